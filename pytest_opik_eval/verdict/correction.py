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
given ``PSEUDO`` passes and as many failures (Agresti and Coull's adjustment), the interval
centred on the corrected rate of the adjusted estimates. The plain delta method (its
variances at least a pass rate's with one pass and one failure added) let the true rate fall
below its 95% lower bound in 8-10% of runs at a true rate of 0.3 and 30 labels, from 1,000 items
on, and its two-sided interval covered 87-94% at 0.95; with 3 trials an item its floor, a single
trial's variance, made the interval half as wide again as it needed. The simulation over labels,
run items, judges and true rates is summed up in docs/explanation/statistics.md, "Judges'
errors"; ``benchmarks/gates.py --only correction`` measures its rows.

Items are the unit, as in ``statistics``: each estimate is a mean over items of the share of an
item's trials the judge passed (or failed), and its variance is the items' own, so the trials
of one item are clustered. The pseudo-counts are added in *effective items*: the items' number
scaled by p (1 - p) over the variance of their shares (n itself for one trial an item; more when
the trials of an item average out their noise). A judge no better than chance (Se + Sp <= 1)
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

# Passes (and as many failures) added to each estimate before its variance is taken: Agresti and
# Coull's z^2 / 2 at 95%, as Lang and Reiczigel add them.
PSEUDO = 2.0


@dataclass(frozen=True)
class Share:
    """A mean over items of a share in [0, 1], with its number of effective items."""

    mean: float
    size: float  # effective items: n p (1 - p) over the items' variance (n for pass/fail items)

    @property
    def adjusted(self) -> float:
        """The mean with ``PSEUDO`` passes and failures added."""
        return (self.mean * self.size + PSEUDO) / (self.size + 2.0 * PSEUDO)

    @property
    def variance(self) -> float:
        """The adjusted mean's variance."""
        p = self.adjusted
        return p * (1.0 - p) / (self.size + 2.0 * PSEUDO)


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
    def estimate(self) -> float:
        """The corrected pass rate (Rogan-Gladen), within [0, 1]."""
        return _unit((self.observed + self.specificity - 1.0) / self.youden)

    @property
    def centre(self) -> float:
        """The corrected pass rate of the adjusted estimates: the interval's centre."""
        sensitivity, specificity = self.positives.adjusted, self.negatives.adjusted
        return (self.passed.adjusted + specificity - 1.0) / (sensitivity + specificity - 1.0)

    @property
    def standard_error(self) -> float:
        """The centre's, by the delta method."""
        t = self.centre
        variance = (
            self.passed.variance
            + t * t * self.positives.variance
            + (1.0 - t) * (1.0 - t) * self.negatives.variance
        )
        return math.sqrt(variance) / (self.positives.adjusted + self.negatives.adjusted - 1.0)

    def bounds(self, confidence: float) -> stats.Interval:
        """Both one-sided bounds at ``confidence``, within [0, 1]."""
        reach = normal_quantile(confidence) * self.standard_error
        t = self.centre
        return stats.Interval(
            self.estimate, _unit(t - reach), _unit(t + reach), confidence, self.items, one_sided=True
        )

    def interval(self, level: float) -> stats.Interval:
        """The two-sided interval at ``level``."""
        one_sided = self.bounds(1.0 - (1.0 - level) / 2.0)
        return stats.Interval(one_sided.estimate, one_sided.low, one_sided.high, level, self.items)

    def p_above(self, value: float) -> float:
        """The one-sided p-value of "the true pass rate is at most ``value``": at most 1 - c
        exactly when ``bounds(c).low`` is above ``value``."""
        return 0.5 * math.erfc((self.centre - value) / self.standard_error / math.sqrt(2.0))


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
    return Share(mean, n * binomial / spread if spread > 0.0 and binomial > 0.0 else float(n))


def _unit(value: float) -> float:
    return min(1.0, max(0.0, value))
