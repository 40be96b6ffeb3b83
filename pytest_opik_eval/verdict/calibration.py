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
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from pytest_opik_eval.verdict import statistics as stats
from pytest_opik_eval.verdict.distributions import t_quantile

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


def calibrate(
    score: str,
    threshold: float | None,
    items: Sequence[LabelledItem],
    level: float = stats.LEVEL,
) -> Calibration:
    """The agreement, sensitivity, specificity and kappa of the judge's verdicts with the labels."""
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
        notes=tuple(notes),
    )


def _interval(shares: list[float], level: float) -> stats.Interval | None:
    return stats.interval(stats.sample(shares, pass_fail=True), level) if shares else None


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
    values = [k for k in left_out if k is not None]
    if len(values) < n:
        return Kappa(estimate, None, None, level, n)
    centre = math.fsum(values) / n
    se = math.sqrt((n - 1) / n * math.fsum((k - centre) ** 2 for k in values))
    t = t_quantile(1.0 - (1.0 - level) / 2.0, n - 1)
    return Kappa(estimate, max(-1.0, estimate - t * se), min(1.0, estimate + t * se), level, n)


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
        if threshold is None and not stats.pass_fail(values[i] for i in labels if i in values):
            note = (
                f"no threshold, and its scores are not pass/fail: give it one (thresholds={{{name!r}: 0.5}})"
            )
            found.append(Calibration(name, None, 0, 0, 0, 0, None, None, None, None, (note,)))
            continue
        found.append(calibrate(name, threshold, labelled_items(labels, values, threshold), level))
    return found
