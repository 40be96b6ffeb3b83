"""A judge's pass rate corrected for the judge's errors, measured against human labels.

A judge with sensitivity Se (the share of truly passing answers it passes) and specificity Sp
(the share of truly failing ones it fails) passes a share p = Se * t + (1 - Sp) * (1 - t) of
answers whose true pass rate is t. The Rogan-Gladen estimate inverts that:

    t = (p + Sp - 1) / (Se + Sp - 1), bounded to [0, 1],

with Se and Sp estimated on the labelled items (``calibration``) and p on the gated run's items.
Its interval carries the sampling error of all three: the gated run's, and the calibration's,
which at 30 labelled items is often the larger. The method is Lang and Reiczigel's (2014,
"Confidence limits for prevalence of disease adjusted for estimated sensitivity and
specificity", Prev Vet Med 113): the delta method on the three independent estimates, each first
given ``PSEUDO`` items' worth of passes and as many of failures (Agresti and Coull's
adjustment), its standard error the adjusted estimates'. Lang and Reiczigel centre the interval
on the corrected rate of the adjusted estimates; here each bound reaches from the lower (the
higher) of that rate and Rogan-Gladen's, so that the interval always holds the estimate: the
adjusted estimates are pulled towards one half, which pulls a high corrected rate up (a
sensitivity of 0.95 becomes 0.92 on 60 items labelled pass), and at a true rate of 0.95 the
adjusted centre let the true rate fall below the 95% lower bound in 6-8% of runs. The plain
delta method (its variances at least a pass rate's with one pass and one failure added) let the
true rate fall below its 95% lower bound in 8-11% of runs at a true rate of 0.3 (one trial an
item, from 100 run items), and its two-sided interval covered as little as 87% (30 labels,
10,000 items, a true rate of 0.95); with 3 trials an item its floor, a single trial's variance,
made it needlessly wide. Now the two-sided interval covers at least 94.9% in every setting
simulated, and the lower bound errs in at most 5.7% of runs (6.2% in one setting of 500). The
simulation over labels, run items, judges and true rates is summed up in
docs/explanation/statistics.md, "Judges' errors"; ``benchmarks/gates.py --only correction``
measures its rows.

Items are the unit, as in ``statistics``: each estimate is a mean over items of the share of an
item's trials the judge passed (or failed), and its variance is the items' own, so the trials
of one item are clustered: the variance is a pass rate's over the items times the design effect,
the items' variance over that of pass/fail items at the same mean (1 for one trial an item; less
when the trials of an item average out their noise), but never below independent trials' (the
effective items are at most the trials scored: ``share``). A judge no better than chance
(Se + Sp <= 1) corrects nothing: ``correction`` says why instead of dividing by zero or less.

A gated run whose own items are labelled counts them by their labels and corrects only the rest
(``pass_rate``, ``PassRate``); a regression gate's change (``corrected_change``) still corrects
them by the judge: a dataset's labels are the same in both runs, and counting by them would
hold every labelled item unchanged, which is what the gate tests (docs/explanation/statistics.md,
"Labelled items of the gated run").

Pure functions, standard library only.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from pytest_opik_eval.verdict import samples
from pytest_opik_eval.verdict import statistics as stats
from pytest_opik_eval.verdict.calibration import LabelledItem
from pytest_opik_eval.verdict.distributions import normal_quantile, t_sf

# Items' worth of passes (and of failures) added to each estimate before its variance is taken:
# Agresti and Coull's z^2 / 2 at 95%, as Lang and Reiczigel add them. In items, not effective
# items: in effective items, 3 trials an item diluted them threefold, and the lower bound's error
# reached 6-7% at 30 labels and a true rate of 0.3 (2% in items).
PSEUDO = 2.0
# The ids of those items among a corrected change's influences (``_pseudo``): no item's id.
PSEUDO_ID = "\0pseudo-"


@dataclass(frozen=True)
class Share:
    """A mean over items of a share in [0, 1], with its items and effective items."""

    mean: float
    items: int
    size: float  # effective items: n p (1 - p) over the items' variance (n for pass/fail items)

    @property
    def adjusted(self) -> float:
        """The mean with ``PSEUDO`` items' worth of passes and of failures added."""
        return (self.mean * self.items + PSEUDO) / (self.items + 2.0 * PSEUDO)

    @property
    def variance(self) -> float:
        """The adjusted mean's variance: a pass rate's over the items, times the design effect
        (the items' variance over pass/fail items' at the same mean, n over the effective items)."""
        p = self.adjusted
        return p * (1.0 - p) / (self.items + 2.0 * PSEUDO) * self.items / self.size


class _Bounded(ABC):
    """A corrected pass rate's bounds from its plain and its adjusted estimate (``PSEUDO`` added
    to each figure), and the standard error of the adjusted one."""

    items: int

    @property
    @abstractmethod
    def unbounded(self) -> float: ...

    @property
    @abstractmethod
    def adjusted(self) -> float: ...

    @property
    @abstractmethod
    def standard_error(self) -> float: ...

    @property
    @abstractmethod
    def estimate(self) -> float: ...

    def bounds(self, confidence: float) -> stats.Interval:
        """Both one-sided bounds at ``confidence``, within [0, 1]: the standard error's reach
        from the lower, and from the higher, of the plain and the adjusted corrected rate."""
        reach = normal_quantile(confidence) * self.standard_error
        low, high = sorted((self.unbounded, self.adjusted))
        return stats.Interval(
            self.estimate, _unit(low - reach), _unit(high + reach), confidence, self.items, one_sided=True
        )

    def interval(self, level: float) -> stats.Interval:
        """The two-sided interval at ``level``."""
        one_sided = self.bounds(1.0 - (1.0 - level) / 2.0)
        return stats.Interval(one_sided.estimate, one_sided.low, one_sided.high, level, self.items)

    def p_above(self, value: float) -> float:
        """The one-sided p-value of "the true pass rate is at most ``value``": at most 1 - c
        exactly when ``bounds(c).low`` is above ``value``."""
        low = min(self.unbounded, self.adjusted)
        return 0.5 * math.erfc((low - value) / self.standard_error / math.sqrt(2.0))


@dataclass(frozen=True)
class Correction(_Bounded):
    """The gated run's observed pass rate, and the judge's sensitivity and specificity, each a
    mean over items with its number of effective items."""

    passed: Share  # the share of trials the judge passed, over the gated run's items
    positives: Share  # the share of trials the judge passed, over the items labelled pass
    negatives: Share  # the share of trials the judge failed, over the items labelled fail
    items: int
    labelled: int  # the calibration's items

    @property
    def observed(self) -> float:
        """The mean over the gated run's items of the share of trials the judge passed."""
        return self.passed.mean

    @property
    def sensitivity(self) -> float:
        return self.positives.mean

    @property
    def specificity(self) -> float:
        return self.negatives.mean

    @property
    def youden(self) -> float:
        """Se + Sp - 1: how far the judge is from chance (1: never wrong)."""
        return self.sensitivity + self.specificity - 1.0

    @property
    def unbounded(self) -> float:
        """The corrected pass rate (Rogan-Gladen), before it is bounded to [0, 1]."""
        return (self.observed + self.specificity - 1.0) / self.youden

    @property
    def estimate(self) -> float:
        """The corrected pass rate, within [0, 1]."""
        return _unit(self.unbounded)

    @property
    def adjusted(self) -> float:
        """The corrected pass rate of the adjusted estimates (``PSEUDO`` added to each)."""
        sensitivity, specificity = self.positives.adjusted, self.negatives.adjusted
        return (self.passed.adjusted + specificity - 1.0) / (sensitivity + specificity - 1.0)

    @property
    def standard_error(self) -> float:
        """The adjusted rate's, by the delta method on the adjusted estimates, at the rate bounded
        to [0, 1]: past an end, a higher observed rate would widen it, and lower a bound."""
        t = _unit(self.adjusted)
        variance = (
            self.passed.variance
            + t * t * self.positives.variance
            + (1.0 - t) * (1.0 - t) * self.negatives.variance
        )
        return math.sqrt(variance) / (self.positives.adjusted + self.negatives.adjusted - 1.0)


def correction(
    observed: Sequence[float], labelled: Sequence[LabelledItem], *, trials: int
) -> Correction | str:
    """The correction of a pass rate observed over items (each item's share of trials the judge
    passed, ``trials`` trials in all) by the judge's errors on ``labelled``; or, when there is
    none to make, why."""
    if not observed:
        return "no item of the run has a completed trial with this score"
    judge = _judge(labelled)
    if isinstance(judge, str):
        return judge
    sensitivity, specificity = judge
    positives = sum(1 for i in labelled if i.label)
    negatives = len(labelled) - positives
    if sensitivity.mean + specificity.mean <= 1.0:
        return (
            f"the judge does no better than chance on the labels (sensitivity {sensitivity.mean:.3f} "
            f"+ specificity {specificity.mean:.3f} <= 1): a pass rate it gives cannot be corrected"
        )
    if sensitivity.adjusted + specificity.adjusted <= 1.0:
        return (
            f"too few labels to tell the judge from chance ({positives} labelled pass, "
            f"{negatives} labelled fail): label more items"
        )
    return Correction(share(observed, trials), sensitivity, specificity, len(observed), len(labelled))


@dataclass(frozen=True)
class PassRate(_Bounded):
    """A run's pass rate when a judge's errors are measured on labelled items: the run's own
    labelled items (``known``) count by their labels, the rest (``rest``) by the judge's verdicts
    corrected for its errors. Like ``Correction``'s, the interval is of the pass rate of the items
    the dataset samples, not of these items alone: the labelled items are known exactly, yet they
    are a sample too, so they keep their labels' sampling error (a pass rate's over them) and lose
    only the judge's. With L of N items labelled, the rate is (L x their labels' mean + (N - L) x
    the rest's corrected rate) / N, and its variance (L/N)^2 the labels' + ((N - L)/N)^2 the
    rest's, the two independent (the labels' mean is not what the judge's errors are measured
    by). With every item labelled it is the labels' pass rate, whatever the judge did."""

    rest: Correction | None  # None: every item of the run is labelled
    known: Share | None  # each labelled item's label, 1 or 0; None: none of the run's is labelled
    observed: float  # the pass rate as the judge gave it: over all the run's items
    # The judge's, on the labelled items; None with every item labelled and none labelled pass
    # (sensitivity), or fail (specificity): nothing is corrected, so nothing needs them.
    sensitivity: float | None
    specificity: float | None
    labelled: int  # the calibration's items
    items: int  # the run's

    def _mix(self, known: float, rest: float) -> float:
        """The labelled items' figure and the rest's, weighed by their items."""
        labels = 0 if self.known is None else self.known.items
        rest_items = self.items - labels
        return (labels * known + rest_items * rest) / self.items

    def _rest(self, figure: float) -> float:
        """A figure of the rest's: alone, as ``Correction`` has it (bounded to [0, 1] at the
        end); beside labels, bounded first, or a rest corrected past 1 would lift the total past
        what the labels allow, and its lower bound past the estimate."""
        return figure if self.known is None else _unit(figure)

    @property
    def unbounded(self) -> float:
        known = 0.0 if self.known is None else self.known.mean
        return self._mix(known, 0.0 if self.rest is None else self._rest(self.rest.unbounded))

    @property
    def estimate(self) -> float:
        return _unit(self.unbounded)

    @property
    def adjusted(self) -> float:
        """The pass rate of the adjusted figures (``PSEUDO`` added to each)."""
        known = 0.0 if self.known is None else self.known.adjusted
        return self._mix(known, 0.0 if self.rest is None else self._rest(self.rest.adjusted))

    @property
    def standard_error(self) -> float:
        labels = 0.0 if self.known is None else self.known.items * math.sqrt(self.known.variance)
        rest = 0.0 if self.rest is None else self.rest.items * self.rest.standard_error
        return math.hypot(labels, rest) / self.items


def pass_rate(
    values: Mapping[str, Sequence[float]],
    threshold: float | None,
    labelled: Sequence[LabelledItem],
    *,
    own: bool,
) -> PassRate | str:
    """A run's pass rate corrected by the judge's errors on ``labelled`` (``values``: each item's
    scores over its trials, by item id, passing at ``threshold``, 1 without one); when the labelled
    items are the run's ``own``, they count by their labels and only the rest is corrected. Or,
    when there is nothing to correct by, why."""
    if not values:
        return "no item of the run has a completed trial with this score"
    cut = 1.0 if threshold is None else threshold
    labels = {i.item_id: i for i in labelled if i.item_id in values} if own else {}
    judged = {item: sum(1 for v in scores if v >= cut) / len(scores) for item, scores in values.items()}
    rest = [item for item in values if item not in labels]
    corrected: Correction | None = None
    if rest:
        found = correction([judged[i] for i in rest], labelled, trials=sum(len(values[i]) for i in rest))
        if isinstance(found, str):
            return found
        corrected = found
    known = [1.0 if i.label else 0.0 for i in labels.values()]
    # Shown only: with every item labelled, nothing is corrected, and either may be unknown.
    positives = [i.share for i in labelled if i.label]
    negatives = [1.0 - i.share for i in labelled if not i.label]
    return PassRate(
        corrected,
        share(known, len(known)) if known else None,
        samples.mean(list(judged.values())),
        samples.mean(positives) if positives else None,
        samples.mean(negatives) if negatives else None,
        len(labelled),
        len(values),
    )


def _judge(labelled: Sequence[LabelledItem]) -> tuple[Share, Share] | str:
    """The judge's sensitivity and specificity on ``labelled``, each a mean over items; or which
    of them is unknown."""
    positives = [i for i in labelled if i.label]
    negatives = [i for i in labelled if not i.label]
    if not positives:
        return "no labelled item is labelled pass: the judge's sensitivity is unknown"
    if not negatives:
        return "no labelled item is labelled fail: the judge's specificity is unknown"
    return (
        share([i.share for i in positives], sum(i.trials for i in positives)),
        share([1.0 - i.share for i in negatives], sum(i.trials for i in negatives)),
    )


@dataclass(frozen=True)
class CorrectedChange:
    """The change of a judge's corrected pass rate from a baseline to the current run, each
    corrected by its own calibration (or both by one), with the tests a regression gate decides
    on, as ``decisions.RegressionTest`` has them.

    The change is the difference of the two Rogan-Gladen estimates, t_c - t_b, a difference of
    ratios: with 30 labels the judge's Se + Sp - 1 is known to about a fifth, and a delta-method
    interval on the ratios let strict mode pass 6.5% of runs whose drop was exactly DELTA (30
    labels, 1,000 items). So the tests are Fieller's: "the drop is DELTA" is t_c - t_b + DELTA
    = 0, which times both runs' Se + Sp - 1 (both positive) is

        F(DELTA) = N_c J_b - N_b J_c + DELTA J_c J_b, with N = p + Sp - 1, J = Se + Sp - 1,

    linear in each estimate, so a normal test on it holds its level; its standard error is the
    delta method's over every item that moves any of the six estimates (the runs' pass rates over
    the items both scored, each calibration's sensitivity and specificity), each item's influence
    summed over the items by id, so that what the two runs share cancels (an item both scored, one
    calibration for both, labelled items that are run items too). With one calibration for both
    runs, F is J times the judged change plus DELTA J: the test is the judged drop's against
    DELTA x (Se + Sp - 1). The bounds on the drop are the DELTAs at which the test turns."""

    current: Correction
    baseline: Correction
    delta: float
    statistic: float  # F(d) = statistic + d * slope
    slope: float
    parts: tuple[Influence, ...]  # F's variance: the run items', the labelled items'
    p_chance: float  # the judged items' sign test (``decisions.RegressionTest``)

    @property
    def change(self) -> float:
        """The corrected pass rate's change, current minus baseline: of the rates before they are
        bounded to [0, 1] (F's root), as its bounds are; bounded, two rates past 1 would show no
        change between bounds that exclude none."""
        return self.current.unbounded - self.baseline.unbounded

    @property
    def judged(self) -> float:
        """The pass rate's change as judged."""
        return self.current.observed - self.baseline.observed

    @property
    def drop(self) -> float:
        return -self.change

    def _t(self, delta: float) -> tuple[float, int]:
        """F(delta) over its standard error (below 0 when the drop is beyond delta), and its
        degrees of freedom: Welch and Satterthwaite's over the run items' share of the variance
        and the labelled items' (with 12 labelled fail, a normal test let strict mode pass 6.5%
        of runs at a drop of DELTA, 30 labels and 100 items, each run judging its labels)."""
        value = self.statistic + delta * self.slope
        variances = [part.at(delta) for part in self.parts]
        variance = math.fsum(variances)
        if variance <= 0.0:
            return (math.copysign(math.inf, value) if value else 0.0), 1
        shares = math.fsum(
            v * v / (p.items - 1) for v, p in zip(variances, self.parts, strict=True) if p.items > 1
        )
        df = max(1, int(variance * variance / shares)) if shares > 0.0 else 1
        return value / math.sqrt(variance), df

    @property
    def p_beyond(self) -> float:
        """For "the drop is greater than delta": F(delta) below 0."""
        t, df = self._t(self.delta)
        return t_sf(-t, df)

    @property
    def p_within(self) -> float:
        """For "the drop is less than delta": F(delta) above 0."""
        t, df = self._t(self.delta)
        return t_sf(t, df)

    def drop_bounds(self, confidence: float) -> tuple[float, float]:
        """The one-sided lower and upper bounds on the drop that a test at 1 - confidence uses:
        the highest drop shown exceeded, and the lowest shown not reached (within [-1, 1])."""
        alpha = 1.0 - confidence
        return (
            _turn(lambda d: t_sf(-self._t(d)[0], self._t(d)[1]) <= alpha, True),
            _turn(lambda d: t_sf(self._t(d)[0], self._t(d)[1]) <= alpha, False),
        )


@dataclass(frozen=True)
class Influence:
    """A group of items' share of F's variance, var(d) = variance + 2 d covariance + d^2
    spread, and how many items it has."""

    variance: float
    covariance: float
    spread: float
    items: int

    def at(self, delta: float) -> float:
        return self.variance + 2.0 * delta * self.covariance + delta * delta * self.spread

    @classmethod
    def of(cls, influences: Sequence[list[float]]) -> Influence:
        return cls(
            math.fsum(a * a for a, _ in influences),
            math.fsum(a * b for a, b in influences),
            math.fsum(b * b for _, b in influences),
            len(influences),
        )


def _turn(shown: Callable[[float], bool], lower: bool) -> float:
    """Where ``shown`` turns over [-1, 1] (it holds below the point for a lower bound, above it
    for an upper one), by bisection. F's z rises with the drop tested wherever the judge is
    clearly better than chance; where it does not (a handful of labels), the bisection finds one
    of its turns, and the test at DELTA, which decides the gate, is exact either way."""
    low, high = -1.0, 1.0
    if shown(high if lower else low):
        return high if lower else low
    if not shown(low if lower else high):
        return low if lower else high
    for _ in range(60):
        middle = (low + high) / 2.0
        if shown(middle) == lower:
            low = middle
        else:
            high = middle
    return low if lower else high


def corrected_change(
    current: Mapping[str, float],
    baseline: Mapping[str, float],
    labelled: Sequence[LabelledItem],
    baseline_labelled: Sequence[LabelledItem],
    delta: float,
    p_chance: float,
    *,
    trials: tuple[int, int],
) -> CorrectedChange | str:
    """The corrected change over the items both runs scored (``current`` and ``baseline``: each
    item's share of trials the judge passed, by item id, the same ids; ``trials``: the trials
    they scored in all, in each run), each run corrected by
    its labelled items (the same sequence for both when one calibration serves both); or why
    there is none to make."""
    now = correction(list(current.values()), labelled, trials=trials[0])
    if isinstance(now, str):
        return now
    before = correction(list(baseline.values()), baseline_labelled, trials=trials[1])
    if isinstance(before, str):
        return f"the baseline's: {before}"
    # Each item's influence on F(d) = a + d b: (a, b) by item id.
    influence: defaultdict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    n = len(current)
    scale = math.sqrt(n / (n - 1)) / n if n > 1 else 1.0  # the items' variance, not its plug-in
    for item, share_now in current.items():
        influence[item][0] += scale * (
            before.youden * (share_now - now.observed) - now.youden * (baseline[item] - before.observed)
        )
    # F's derivatives in each run's Se and Sp, taken where the null puts the runs (their mean
    # corrected rate, DELTA apart), as a score test does: at the estimates, the judge's error
    # weighed too little when the drop is far from DELTA, and strict mode passed 9% of runs at a
    # drop of DELTA (30 labels, 1,000 items). As (a, b), the derivative a + d b.
    mean = (_unit(now.unbounded) + _unit(before.unbounded)) / 2.0
    # The pseudo items of one calibration for both runs (or of two with the same verdicts on the
    # same items: a deterministic judge's) are one set, which cancels as their real items do;
    # two calibrations' are two, each the floor of its own spread.
    one = labelled is baseline_labelled or set(labelled) == set(baseline_labelled)
    runs = ("both",) if one else ("current", "baseline")
    j_now, j_before = now.youden, before.youden
    _add_labelled(
        influence,
        labelled,
        runs[0],
        now,
        (-j_before * mean, j_before / 2.0),
        (j_before * (1.0 - mean), j_before / 2.0),
    )
    _add_labelled(
        influence,
        baseline_labelled,
        runs[-1],
        before,
        (j_now * mean, j_now / 2.0),
        (-j_now * (1.0 - mean), j_now / 2.0),
    )
    n_now, n_before = now.observed + now.specificity - 1.0, before.observed + before.specificity - 1.0
    labelled_ids = {i.item_id for i in (*labelled, *baseline_labelled)}
    labelled_ids.update(
        item_id for run in runs for label in (True, False) for item_id, _, _ in _pseudo(label, run)
    )
    return CorrectedChange(
        now,
        before,
        delta,
        statistic=n_now * before.youden - n_before * now.youden,
        slope=now.youden * before.youden,
        parts=(
            Influence.of([v for k, v in influence.items() if k not in labelled_ids]),
            Influence.of([influence[k] for k in labelled_ids]),
        ),
        p_chance=p_chance,
    )


def _add_labelled(
    influence: defaultdict[str, list[float]],
    labelled: Sequence[LabelledItem],
    pseudo: str,
    run: Correction,
    by_sensitivity: tuple[float, float],
    by_specificity: tuple[float, float],
) -> None:
    """Adds each labelled item's influence on F through the run's sensitivity (items labelled
    pass) and specificity (labelled fail): the share of its trials it got right, less the mean,
    over the items, times F's derivative in that figure (a + d b). As for ``Correction``, the
    spread is Agresti and Coull's: ``PSEUDO`` items' worth of right verdicts and as many wrong
    ones join each group, under ids of their own (``pseudo``'s: the same for both runs where
    they share one calibration, so that they cancel as its items do). A judge right on all 30
    labels has no spread of its own: without them, strict mode passed 9-11% of runs at a drop
    of DELTA (a judge of 0.95/0.95, 10,000 items)."""
    for label, mean, (a, b) in (
        (True, run.sensitivity, by_sensitivity),
        (False, run.specificity, by_specificity),
    ):
        group = [i for i in labelled if i.label is label]
        total = len(group) + 2.0 * PSEUDO
        adjusted = (mean * len(group) + PSEUDO) / total  # as Share.adjusted
        weighed = [(i.item_id, i.share if label else 1.0 - i.share, 1.0) for i in group]
        for item_id, right, weight in (*weighed, *_pseudo(label, pseudo)):
            deviation = math.sqrt(weight) * (right - adjusted) / total
            found = influence[item_id]
            found[0] += a * deviation
            found[1] += b * deviation


def _pseudo(label: bool, run: str) -> tuple[tuple[str, float, float], ...]:
    """A label group's ``PSEUDO`` items' worth of right and of wrong verdicts: (id, right, weight)."""
    return (
        (f"{PSEUDO_ID}{run}-{label}-right", 1.0, PSEUDO),
        (f"{PSEUDO_ID}{run}-{label}-wrong", 0.0, PSEUDO),
    )


def share(shares: Sequence[float], trials: int) -> Share:
    """The mean of per-item shares (at least one), and their effective items: n p (1 - p) over
    their variance (n, the items, when every item passes or fails), at most ``trials``, the
    trials scored: the design effect of clustered trials is at least that of independent ones.
    Items that all pass about half their trials have almost no spread, and without that bound
    their effective items (10,100 from 100 items of 2 trials, all at 0.5 but one) made an
    interval far narrower than the 200 trials behind it allow."""
    n = len(shares)
    mean = samples.mean(shares)
    spread = samples.variance(shares) * (n - 1) / n  # the items' own: n for pass/fail items
    binomial = mean * (1.0 - mean)
    if binomial <= 0.0:
        return Share(mean, n, float(n))
    size = n * binomial / spread if spread * trials > n * binomial else float(trials)
    return Share(mean, n, size)


def _unit(value: float) -> float:
    return min(1.0, max(0.0, value))
