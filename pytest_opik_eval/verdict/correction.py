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
when the trials of an item average out their noise). A judge no better than chance (Se + Sp <= 1)
corrects nothing: ``correction`` says why instead of dividing by zero or less.

Pure functions, standard library only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_opik_eval.verdict import statistics as stats
from pytest_opik_eval.verdict.calibration import LabelledItem
from pytest_opik_eval.verdict.distributions import normal_quantile

# Items' worth of passes (and of failures) added to each estimate before its variance is taken:
# Agresti and Coull's z^2 / 2 at 95%, as Lang and Reiczigel add them. In items, not effective
# items: in effective items, 3 trials an item diluted them threefold, and the lower bound's error
# reached 6-7% at 30 labels and a true rate of 0.3 (2% in items).
PSEUDO = 2.0


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


@dataclass(frozen=True)
class Correction:
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


def correction(observed: Sequence[float], labelled: Sequence[LabelledItem]) -> Correction | str:
    """The correction of a pass rate observed over items (each item's share of trials the judge
    passed) by the judge's errors on ``labelled``; or, when there is none to make, why."""
    positives = [i.share for i in labelled if i.label]
    negatives = [1.0 - i.share for i in labelled if not i.label]
    if not observed:
        return "no item of the run has a completed trial with this score"
    if not positives:
        return "no labelled item is labelled pass: the judge's sensitivity is unknown"
    if not negatives:
        return "no labelled item is labelled fail: the judge's specificity is unknown"
    sensitivity, specificity = share(positives), share(negatives)
    if sensitivity.mean + specificity.mean <= 1.0:
        return (
            f"the judge does no better than chance on the labels (sensitivity {sensitivity.mean:.3f} "
            f"+ specificity {specificity.mean:.3f} <= 1): a pass rate it gives cannot be corrected"
        )
    if sensitivity.adjusted + specificity.adjusted <= 1.0:
        return (
            f"too few labels to tell the judge from chance ({len(positives)} labelled pass, "
            f"{len(negatives)} labelled fail): label more items"
        )
    return Correction(share(observed), sensitivity, specificity, len(observed), len(labelled))


def share(shares: Sequence[float]) -> Share:
    """The mean of per-item shares (at least one), and their effective items: n p (1 - p) over
    their variance (n, the items, when they have none, or when every item passes or fails)."""
    n = len(shares)
    mean = stats.mean(shares)
    spread = stats.variance(shares) * (n - 1) / n  # the items' own: n for pass/fail items
    binomial = mean * (1.0 - mean)
    return Share(mean, n, n * binomial / spread if spread > 0.0 and binomial > 0.0 else float(n))


def _unit(value: float) -> float:
    return min(1.0, max(0.0, value))
