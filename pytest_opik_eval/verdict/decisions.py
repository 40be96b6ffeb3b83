"""What a gate decides on: the tests of a drop against a tolerated ``delta`` on the paired
differences (``paired``), as one-sided p-values, and Holm's step-down procedure over a session's
gates. A *difference* is current minus baseline, so a *drop* is ``-difference``. Pure functions,
standard library only."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from pytest_opik_eval.verdict.distributions import sign_test
from pytest_opik_eval.verdict.samples import Sample, sample
from pytest_opik_eval.verdict.statistics import LEVEL, lower_bound, p_above, p_below, upper_bound


class DropTest(Protocol):
    """What a regression gate decides on: ``RegressionTest`` on the scores, or the change of a
    judge's pass rate corrected for its errors (``correction.CorrectedChange``)."""

    @property
    def delta(self) -> float: ...
    @property
    def drop(self) -> float: ...
    @property
    def p_beyond(self) -> float: ...
    @property
    def p_within(self) -> float: ...
    @property
    def p_chance(self) -> float: ...
    def drop_bounds(self, confidence: float) -> tuple[float, float]: ...


@dataclass(frozen=True)
class RegressionTest:
    """What the paired differences say about a drop against a tolerated ``delta``.

    One-sided p-values, ready for ``holm``:
    - ``p_beyond``: for "the drop is greater than delta" (normal mode fails on it);
    - ``p_within``: for "the drop is less than delta" (strict mode passes on it);
    - ``p_chance``: the exact sign test of "nothing changed" on the items that moved (as many
      items down as this, of those that moved up or down, by chance alone): for pass/fail
      items with one trial, McNemar's, the test normal mode decides on at a delta of 0."""

    differences: Sample
    delta: float
    p_beyond: float
    p_within: float
    p_chance: float

    @property
    def drop(self) -> float:
        return -self.differences.mean

    def drop_bounds(self, confidence: float) -> tuple[float, float]:
        """The one-sided lower and upper bounds on the drop that a test at 1 - confidence uses."""
        return -upper_bound(self.differences, confidence), -lower_bound(self.differences, confidence)


def regression_test(differences: Iterable[float], delta: float, *, pass_fail: bool = False) -> RegressionTest:
    """The tests on the per-item differences (current - baseline) against ``delta``;
    ``pass_fail`` if they are pass/fail items'."""
    return regression_test_on(sample(differences, -1.0, 1.0, pass_fail=pass_fail), delta)


def regression_test_on(s: Sample, delta: float) -> RegressionTest:
    """The tests on the differences' sample (a ``PairedComparison``'s, summarized once)."""
    return RegressionTest(
        differences=s,
        delta=delta,
        p_beyond=p_below(s, -delta),
        p_within=p_above(s, -delta),
        p_chance=sign_test(s.down[0], s.up[-1]),
    )


@dataclass(frozen=True)
class Adjusted:
    """One hypothesis of a family after Holm: its adjusted p-value, and the number its level was
    divided by at the step that decided it (its one-sided bound is printed at alpha / divisor)."""

    p_value: float
    divisor: int
    rejected: bool


def holm(p_values: Sequence[float], alpha: float = 1.0 - LEVEL) -> list[Adjusted]:
    """Holm's step-down procedure, in the order given: the family-wise error is at most alpha
    under any dependence. A hypothesis of rank r (1 = smallest p) among m is tested at
    alpha / (m - r + 1) while every smaller one was rejected; once one is not, the rest are
    tested, and kept, at that step's level."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted: list[Adjusted] = [Adjusted(1.0, 1, False)] * m
    running, stopped = 0.0, None
    for rank, i in enumerate(order):
        divisor = m - rank
        running = max(running, min(1.0, divisor * p_values[i]))
        if stopped is None and running > alpha:
            stopped = divisor
        adjusted[i] = Adjusted(running, stopped or divisor, stopped is None)
    return adjusted
