"""A judge's pass rate corrected for the judge's errors, measured against human labels.

A judge with sensitivity Se (the share of truly passing answers it passes) and specificity Sp
(the share of truly failing ones it fails) passes a share p = Se * t + (1 - Sp) * (1 - t) of
answers whose true pass rate is t. The Rogan-Gladen estimate inverts that:

    t = (p + Sp - 1) / (Se + Sp - 1), bounded to [0, 1],

with Se and Sp estimated on the labelled items (``calibration``) and p on the gated run's items.
Its interval carries the sampling error of all three: the gated run's, and the calibration's,
which at 30 labelled items is often the larger (the delta method on the three independent
estimates; each estimate's variance is the items' own, clustered by item as in ``statistics``,
and never below that of a pass rate with one pass and one failure added, so that a calibration
without a single error still has a spread). A judge no better than chance (Se + Sp <= 1)
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


@dataclass(frozen=True)
class Correction:
    """The gated run's observed pass rate, and the judge's sensitivity and specificity, each a
    mean over items with its variance."""

    observed: float  # the mean over the gated run's items of the share of trials the judge passed
    observed_variance: float  # of that mean
    items: int
    sensitivity: float
    sensitivity_variance: float
    specificity: float
    specificity_variance: float
    labelled: int  # the calibration's items

    @property
    def youden(self) -> float:
        """Se + Sp - 1: how far the judge is from chance (1: never wrong)."""
        return self.sensitivity + self.specificity - 1.0

    @property
    def unbounded(self) -> float:
        return (self.observed + self.specificity - 1.0) / self.youden

    @property
    def estimate(self) -> float:
        """The corrected pass rate, within [0, 1]."""
        return min(1.0, max(0.0, self.unbounded))

    @property
    def standard_error(self) -> float:
        t = self.unbounded
        variance = (
            self.observed_variance
            + t * t * self.sensitivity_variance
            + (1.0 - t) * (1.0 - t) * self.specificity_variance
        )
        return math.sqrt(variance) / self.youden

    def bounds(self, confidence: float) -> stats.Interval:
        """Both one-sided bounds at ``confidence``, within [0, 1]."""
        reach = normal_quantile(confidence) * self.standard_error
        t = self.unbounded
        return stats.Interval(
            self.estimate, _unit(t - reach), _unit(t + reach), confidence, self.items, one_sided=True
        )

    def interval(self, level: float) -> stats.Interval:
        """The two-sided interval at ``level``."""
        one_sided = self.bounds(1.0 - (1.0 - level) / 2.0)
        return stats.Interval(one_sided.estimate, one_sided.low, one_sided.high, level, self.items)

    def p_above(self, value: float) -> float:
        """The one-sided p-value of "the true pass rate is at most ``value``"."""
        error = self.standard_error
        if error == 0.0:
            return 0.0 if self.unbounded > value else 1.0
        return 0.5 * math.erfc((self.unbounded - value) / error / math.sqrt(2.0))


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
    sensitivity, specificity = stats.mean(positives), stats.mean(negatives)
    if sensitivity + specificity <= 1.0:
        return (
            f"the judge does no better than chance on the labels (sensitivity {sensitivity:.3f} + "
            f"specificity {specificity:.3f} <= 1): a pass rate it gives cannot be corrected"
        )
    return Correction(
        observed=stats.mean(observed),
        observed_variance=_variance_of_mean(observed),
        items=len(observed),
        sensitivity=sensitivity,
        sensitivity_variance=_variance_of_mean(positives),
        specificity=specificity,
        specificity_variance=_variance_of_mean(negatives),
        labelled=len(labelled),
    )


def _variance_of_mean(shares: Sequence[float]) -> float:
    """The variance of the mean of ``shares`` (values in [0, 1], one per item): the sample's, and
    at least a pass rate's with one pass and one failure added (no spread is not certainty)."""
    n = len(shares)
    adjusted = (math.fsum(shares) + 1.0) / (n + 2.0)
    return max(stats.variance(shares) / n, adjusted * (1.0 - adjusted) / (n + 2.0))


def _unit(value: float) -> float:
    return min(1.0, max(0.0, value))
