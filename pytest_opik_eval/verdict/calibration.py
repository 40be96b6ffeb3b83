"""How far a judge agrees with human labels: for each score that items are labelled for, the
judge's verdicts (its score at the score's threshold) against the humans', over the labelled
items whose trials completed. Pure functions, standard library only.

Conventions, as in ``statistics``: the *item* is the unit. An item's trials are one observation,
the share of them the judge passed, so the trials of one item are clustered, never counted as
independent evidence. A human label is a verdict (``true``/``false``) or a score from 0 to 1 that
passes at the same threshold as the judge's score.

The figures, each with a two-sided interval at ``level``:
- agreement: the mean over items of the share of trials whose verdict is the label's;
- sensitivity: over the items labelled pass, the mean share of trials the judge passed;
- specificity: over the items labelled fail, the mean share of trials the judge failed;
- Cohen's kappa on the trial-level 2x2 table (judge x label), each item weighing 1 in all (each
  of its trials 1 / its trial count), with a jackknife interval over items.
The first three are means of shares in [0, 1], bounded as the gates bound a pass rate
(``statistics.interval`` on a pass/fail sample).

When the labels are human scores (not all ``true``/``false``; a verdict then counts as 1 or 0)
and the judge's values are graded (not only 0 and 1), three figures on the scores themselves,
over the labelled items (at least three):
- weighted kappa: Cohen's kappa with quadratic weights, directly on the [0, 1] scale (no bins),
  on the trial-level pairs (judge value, human score), each item weighing 1 as above: 1 - the
  mean squared difference over the mean squared difference of independent pairs. With one trial
  per item it is Lin's concordance correlation coefficient of the pairs (variances over n); with
  more, a judge's spread over its trials counts as disagreement, as its verdicts' do in kappa.
  Jackknife interval over items, as kappa's;
- correlation: Pearson's, between each item's mean judge score over its trials and its human
  score, with the Fisher z interval over items (atanh r -/+ z / sqrt(n - 3), back through tanh:
  it stays within [-1, 1] and narrows towards a good judge's correlation near 1, where a
  jackknife's symmetric interval would be clipped; none with three items);
- bias: the mean over items of the judge's mean score less the human score, with Student's t
  interval over items.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from pytest_opik_eval.verdict import samples
from pytest_opik_eval.verdict import statistics as stats
from pytest_opik_eval.verdict.distributions import normal_quantile, t_quantile

# Tolerance for a chance agreement of 1 (kappa undefined), against rounding in the sums.
_EPSILON = 1e-12


@dataclass(frozen=True)
class LabelledItem:
    """One labelled item's trials for one score: how many the judge passed, of how many."""

    item_id: str
    passed: int  # trials whose score met the threshold
    trials: int  # completed trials with a score (at least one)
    label: bool  # the human verdict

    @property
    def share(self) -> float:
        """The share of its trials the judge passed."""
        return self.passed / self.trials

    @property
    def agreement(self) -> float:
        """The share of its trials whose verdict is the label's."""
        return self.share if self.label else 1.0 - self.share


@dataclass(frozen=True)
class Kappa:
    """Cohen's kappa with its jackknife interval (``low`` and ``high`` are None when the
    jackknife is undefined: fewer than two items, or kappa undefined once an item is left out)."""

    estimate: float
    low: float | None
    high: float | None
    level: float
    n: int


@dataclass(frozen=True)
class GradedItem:
    """One labelled item's trials for a graded score: the judge's mean and mean square over them,
    and the human score."""

    item_id: str
    mean: float  # the judge's mean over its trials
    square: float  # the mean of its trial values' squares
    label: float  # the human score (a verdict as 1 or 0)


@dataclass(frozen=True)
class Correlation:
    """Pearson's correlation with its Fisher z interval (``low`` and ``high`` are None with
    three items: the interval needs four)."""

    estimate: float
    low: float | None
    high: float | None
    level: float
    n: int


@dataclass(frozen=True)
class Graded:
    """A graded judge's scores against human scores (each figure None where undefined, with a
    note saying why)."""

    weighted_kappa: Kappa | None  # None: fewer than three items, or every score the same
    correlation: Correlation | None  # None: fewer than three items, or one side constant
    bias: stats.Interval | None  # None: fewer than three items
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Calibration:
    """A judge's score against the human labels of one experiment's items."""

    score: str
    threshold: float | None  # None: the score is pass/fail (0 or 1), passing at 1
    items: int  # labelled items with at least one completed, scored trial
    trials: int  # their completed, scored trials
    label_pass: int  # of the items, labelled pass
    label_fail: int
    agreement: stats.Interval | None
    sensitivity: stats.Interval | None  # None: no item labelled pass
    specificity: stats.Interval | None  # None: no item labelled fail
    kappa: Kappa | None  # None: no item, or chance agreement of 1
    notes: tuple[str, ...] = ()  # why a figure is missing, in words
    graded: Graded | None = None  # None: the labels are verdicts only, or the judge's values 0 or 1


def label_verdict(label: bool | float, threshold: float | None) -> bool:
    """A human label as a verdict: a bool as it is, a score at the threshold (1 without one)."""
    if isinstance(label, bool):
        return label
    return label >= (1.0 if threshold is None else threshold)


def labels_by_score(items: Iterable[Mapping[str, object]], field: str) -> dict[str, dict[str, bool | float]]:
    """The items' labels by score name, then by item id, in the order the items name them;
    a value that is not a labels object, or not a verdict, is skipped (collection rejects both)."""
    found: dict[str, dict[str, bool | float]] = {}
    for item in items:
        labels = item.get(field)
        if not isinstance(labels, Mapping):
            continue
        for name, label in labels.items():
            if isinstance(label, (bool, int, float)):
                found.setdefault(str(name), {})[str(item["id"])] = label
    return found


def passed_shares(items: Iterable[Sequence[float]], threshold: float | None) -> list[float]:
    """Each item's share of trials whose score meets the threshold (1 without one)."""
    cut = 1.0 if threshold is None else threshold
    return [sum(1 for v in values if v >= cut) / len(values) for values in items]


def labelled_items(
    labels: Mapping[str, bool | float],
    scores: Mapping[str, Sequence[float]],
    threshold: float | None,
) -> list[LabelledItem]:
    """The labelled items with scores: ``scores`` maps an item id to its completed trials'
    values of the score (failed scorings left out), ``labels`` an item id to its label."""
    cut = 1.0 if threshold is None else threshold
    return [
        LabelledItem(
            item_id, sum(1 for v in values if v >= cut), len(values), label_verdict(label, threshold)
        )
        for item_id, label in labels.items()
        if (values := scores.get(item_id))
    ]


def graded_items(
    labels: Mapping[str, bool | float], scores: Mapping[str, Sequence[float]]
) -> list[GradedItem] | None:
    """The labelled items with scores, as judge and human scores; None when the labels are
    verdicts only (``true``/``false``) or the judge's values are 0 or 1 only: nothing is graded."""
    found = [(item_id, label, values) for item_id, label in labels.items() if (values := scores.get(item_id))]
    if all(isinstance(label, bool) for _, label, _ in found) or samples.pass_fail(v for _, _, v in found):
        return None
    return [
        GradedItem(
            item_id,
            math.fsum(values) / len(values),
            math.fsum(v * v for v in values) / len(values),
            float(label),
        )
        for item_id, label, values in found
    ]


def calibrate(
    score: str,
    threshold: float | None,
    items: Sequence[LabelledItem],
    level: float = stats.LEVEL,
    graded: Sequence[GradedItem] | None = None,
) -> Calibration:
    """The agreement, sensitivity, specificity and kappa of the judge's verdicts with the labels;
    with ``graded`` (``graded_items``), the weighted kappa, correlation and bias of its scores."""
    passing = [i for i in items if i.label]
    failing = [i for i in items if not i.label]
    notes: list[str] = []
    if not items:
        notes.append("no labelled item has a completed trial with this score")
    elif not passing:
        notes.append("sensitivity undefined: no item labelled pass")
    elif not failing:
        notes.append("specificity undefined: no item labelled fail")
    kappa = cohen_kappa(items, level) if items else None
    if items and kappa is None:
        notes.append("kappa undefined: judge and labels each give one verdict only (chance agreement 1)")
    elif kappa is not None and kappa.low is None:
        notes.append("no interval for kappa: it needs two items, each leaving kappa defined")
    scored = None if graded is None else graded_figures(graded, level)
    return Calibration(
        score=score,
        threshold=threshold,
        items=len(items),
        trials=sum(i.trials for i in items),
        label_pass=len(passing),
        label_fail=len(failing),
        agreement=_interval([i.agreement for i in items], level),
        sensitivity=_interval([i.share for i in passing], level),
        specificity=_interval([1.0 - i.share for i in failing], level),
        kappa=kappa,
        notes=(*notes, *(scored.notes if scored else ())),
        graded=scored,
    )


def _interval(shares: list[float], level: float) -> stats.Interval | None:
    return stats.interval(samples.sample(shares, pass_fail=True), level) if shares else None


def kappa_of(items: Sequence[LabelledItem]) -> float | None:
    """Cohen's kappa on the trial-level table, each item weighing 1 (each of its trials 1 / its
    trial count); None when the chance agreement is 1 (judge and labels each always say the same)."""
    if not items:
        return None
    return _kappa(*_sums(items), len(items))


def _sums(items: Sequence[LabelledItem]) -> tuple[float, float, float]:
    """Over the items: the agreement shares, the judge's pass shares and the labels' passes."""
    return (
        math.fsum(i.agreement for i in items),
        math.fsum(i.share for i in items),
        float(sum(1 for i in items if i.label)),
    )


def _kappa(agreed: float, judge_passed: float, label_passed: float, n: int) -> float | None:
    observed, judge_pass, label_pass = agreed / n, judge_passed / n, label_passed / n
    chance = judge_pass * label_pass + (1.0 - judge_pass) * (1.0 - label_pass)
    if chance >= 1.0 - _EPSILON:
        return None
    return (observed - chance) / (1.0 - chance)


def cohen_kappa(items: Sequence[LabelledItem], level: float = stats.LEVEL) -> Kappa | None:
    """Kappa (``kappa_of``) with its interval by the jackknife over items: each item left out in
    turn gives k_i; SE = sqrt((n - 1) / n * sum (k_i - mean k_i)^2); the bounds are kappa -/+
    t(n - 1, (1 + level) / 2) SE, clipped to [-1, 1]. Items are the unit, so an item's trials
    leave together. Each k_i comes from the sums less the item's part: one pass over the items,
    not one per item (a labelled set of 100,000 items would take hours)."""
    estimate = kappa_of(items)
    if estimate is None:
        return None
    n = len(items)
    if n < 2:
        return Kappa(estimate, None, None, level, n)
    agreed, judge_passed, label_passed = _sums(items)
    left_out = [
        _kappa(agreed - i.agreement, judge_passed - i.share, label_passed - i.label, n - 1) for i in items
    ]
    return _jackknife(estimate, left_out, level)


def _jackknife(estimate: float, left_out: Sequence[float | None], level: float) -> Kappa:
    """A kappa with the jackknife interval of its leave-one-out values (none if one is None)."""
    n = len(left_out)
    values = [k for k in left_out if k is not None]
    if len(values) < n:
        return Kappa(estimate, None, None, level, n)
    centre = math.fsum(values) / n
    se = math.sqrt((n - 1) / n * math.fsum((k - centre) ** 2 for k in values))
    t = t_quantile(1.0 - (1.0 - level) / 2.0, n - 1)
    return Kappa(estimate, max(-1.0, estimate - t * se), min(1.0, estimate + t * se), level, n)


# --- graded scores against human scores ----------------------------------------------------

# Items the graded figures need: with two, any correlation is -1 or 1.
GRADED_ITEMS = 3


def graded_figures(items: Sequence[GradedItem], level: float = stats.LEVEL) -> Graded:
    """The weighted kappa, correlation and bias of a graded judge's scores with human scores."""
    n = len(items)
    if n < GRADED_ITEMS:
        why = f"weighted kappa, correlation and bias undefined: {n} labelled items, they need {GRADED_ITEMS}"
        return Graded(None, None, None, (why,))
    notes = []
    kappa = weighted_kappa(items, level)
    if kappa is None:
        notes.append("weighted kappa undefined: the judge and the labels give every item the same score")
    elif kappa.low is None:
        notes.append("no interval for weighted kappa: leaving an item out leaves it undefined")
    found = correlation(items, level)
    if isinstance(found, str):
        notes.append(f"correlation undefined: {found}")
    elif found.low is None:
        notes.append("no interval for the correlation: the Fisher z interval needs 4 items")
    return Graded(kappa, None if isinstance(found, str) else found, bias(items, level), tuple(notes))


def _graded_sums(items: Sequence[GradedItem]) -> tuple[float, float, float, float, float]:
    """Over the items: the judge's mean squares, its means, the labels, their squares, and the
    products of judge mean and label."""
    return (
        math.fsum(i.square for i in items),
        math.fsum(i.mean for i in items),
        math.fsum(i.label for i in items),
        math.fsum(i.label * i.label for i in items),
        math.fsum(i.mean * i.label for i in items),
    )


def _weighted(
    squares: float, means: float, labels: float, label_squares: float, products: float, n: int
) -> float | None:
    # Observed: the mean over items of the mean over trials of (x - y)^2. Expected: the same for a
    # judge trial of one item paired with the label of any item (the marginals independent).
    observed = (squares - 2.0 * products + label_squares) / n
    expected = squares / n + label_squares / n - 2.0 * (means / n) * (labels / n)
    if expected <= _EPSILON:
        return None
    kappa = 1.0 - observed / expected
    # Constant labels give exactly 0 (observed = expected), bar the rounding: not "-0.000".
    return 0.0 if abs(kappa) < _EPSILON else kappa


def weighted_kappa(items: Sequence[GradedItem], level: float = stats.LEVEL) -> Kappa | None:
    """Cohen's kappa with quadratic weights on the [0, 1] scale, trial by trial, each item
    weighing 1: 1 - (mean squared judge-label difference) / (its mean over independent pairs).
    None when the expected difference is 0 (one score everywhere, judge and labels alike).
    Interval: the jackknife over items, as ``cohen_kappa``'s."""
    n = len(items)
    if not n:
        return None
    sums = _graded_sums(items)
    estimate = _weighted(*sums, n)
    if estimate is None:
        return None
    if n < 2:
        return Kappa(estimate, None, None, level, n)
    squares, means, labels, label_squares, products = sums
    left_out = [
        _weighted(
            squares - i.square,
            means - i.mean,
            labels - i.label,
            label_squares - i.label * i.label,
            products - i.mean * i.label,
            n - 1,
        )
        for i in items
    ]
    return _jackknife(estimate, left_out, level)


def correlation(items: Sequence[GradedItem], level: float = stats.LEVEL) -> Correlation | str:
    """Pearson's correlation of the items' mean judge scores with their human scores, with the
    Fisher z interval over items; why it is undefined, in words, when one side is constant or
    there are fewer than three items."""
    n = len(items)
    if n < GRADED_ITEMS:
        return f"it needs {GRADED_ITEMS} labelled items, not {n}"
    xs, ys = [i.mean for i in items], [i.label for i in items]
    # Exactly one value on a side: its variance is 0 (a mean of equal floats can round off it).
    if len(set(xs)) == 1:
        return "the judge gives every item the same mean score"
    if len(set(ys)) == 1:
        return "every item has the same human score"
    mx, my = samples.mean(xs), samples.mean(ys)
    sxx = math.fsum((x - mx) ** 2 for x in xs)
    syy = math.fsum((y - my) ** 2 for y in ys)
    sxy = math.fsum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    r = max(-1.0, min(1.0, sxy / math.sqrt(sxx * syy)))
    if n <= GRADED_ITEMS:
        return Correlation(r, None, None, level, n)
    if abs(r) == 1.0:  # atanh is infinite: every bound is r
        return Correlation(r, r, r, level, n)
    z = math.atanh(r)
    half = normal_quantile(1.0 - (1.0 - level) / 2.0) / math.sqrt(n - 3)
    return Correlation(r, math.tanh(z - half), math.tanh(z + half), level, n)


def bias(items: Sequence[GradedItem], level: float = stats.LEVEL) -> stats.Interval | None:
    """The mean over items of the judge's mean score less the human score (positive: the judge
    scores higher), with Student's t interval over items (n - 1 degrees of freedom), within
    [-1, 1]; None with fewer than two items."""
    n = len(items)
    if n < 2:
        return None
    differences = [i.mean - i.label for i in items]
    estimate = samples.mean(differences)
    half = t_quantile(1.0 - (1.0 - level) / 2.0, n - 1) * math.sqrt(samples.variance(differences) / n)
    return stats.Interval(estimate, max(-1.0, estimate - half), min(1.0, estimate + half), level, n)


def calibrations(
    items: Iterable[Mapping[str, object]],
    field: str,
    scores: Mapping[str, Mapping[str, Sequence[float]]],
    thresholds: Mapping[str, float | None],
    level: float = stats.LEVEL,
) -> list[Calibration]:
    """One calibration per score that at least one item is labelled for, in the order the items
    name them. ``scores``: by score name, each item's completed trials' values (as
    ``results.scores_by_item``). A score with no threshold is calibrated only when its values
    are pass/fail (0 or 1)."""
    found: list[Calibration] = []
    for name, labels in labels_by_score(items, field).items():
        threshold = thresholds.get(name)
        values = scores.get(name, {})
        if threshold is None and not samples.pass_fail(values[i] for i in labels if i in values):
            note = (
                f"no threshold, and its scores are not pass/fail: give it one (thresholds={{{name!r}: 0.5}})"
            )
            found.append(Calibration(name, None, 0, 0, 0, 0, None, None, None, None, (note,)))
            continue
        verdicts = labelled_items(labels, values, threshold)
        found.append(calibrate(name, threshold, verdicts, level, graded_items(labels, values)))
    return found
