"""What a paired comparison's design can detect: from the baseline's scores (their mean, and
their intra-item correlation or within-item variance), the number of items and of trials, the
chance that normal mode catches a drop, that strict mode shows none when nothing changed, the
smallest drop caught with 80% power, and the items that would catch a given one (``opik-eval
plan``). Each power is the gates' own score test's, on the population the design implies (a
weighted set of differences, not a draw), by the normal approximation of its statistic."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from statistics import NormalDist

from pytest_opik_eval.verdict.distributions import normal_quantile, t_quantile
from pytest_opik_eval.verdict.statistics import (
    CORRECTION,
    POWER,
    Sample,
    item_means,
    null_variance,
    population,
)


@dataclass(frozen=True)
class Design:
    """A paired comparison's design: ``items``, ``trials`` per item (in both runs), and what the
    baseline says of its scores: their ``mean``; for pass/fail scores, the intra-item
    correlation ``icc`` (items' pass probabilities spread as a beta distribution, the beta-
    binomial model); for other scores, the variance of one trial's score within an item
    (``within``). With one trial per item a baseline cannot tell items that differ from trials
    that vary: it is taken as all trial variation (icc 0), the noisiest case."""

    items: int
    trials: int
    mean: float
    binary: bool
    icc: float = 0.0
    within: float = 0.0

    def with_size(self, items: int, trials: int | None = None) -> Design:
        return replace(self, items=items, trials=self.trials if trials is None else trials)

    def differences(self, drop: float) -> Sample:
        """The population of an item's difference (current - baseline) when the mean drops by
        ``drop``, as ``items`` items: for pass/fail scores, each item's pass probability p
        lowered to p (1 - drop / mean), both runs' passed trials binomial; for other scores,
        every item lower by ``drop`` with normal trial noise. Weighted points, not a draw."""
        return _weighted(
            _points(self.binary, self.mean, self.icc, self.within, self.trials, drop), self.items
        )


@lru_cache(maxsize=4096)
def _points(
    binary: bool, mean: float, icc: float, within: float, trials: int, drop: float
) -> tuple[tuple[float, float], ...]:
    """The differences' values and weights (the same at any number of items)."""
    if binary:
        return tuple(_binary_differences(mean, icc, trials, drop))
    sd = math.sqrt(2.0 * within / trials)
    return tuple((max(-1.0, min(1.0, sd * z - drop)), 1.0 / _POINTS) for z in _NORMAL_POINTS)


_POINTS = 40
_NORMAL_POINTS = [normal_quantile((i + 0.5) / _POINTS) for i in range(_POINTS)]


def _binary_differences(mean: float, icc: float, k: int, drop: float) -> list[tuple[float, float]]:
    """P(difference = (j - i) / k): i of k trials passed before, j after, the item's pass
    probability p drawn from the beta distribution (p after: p * shrink), in closed form from
    the beta's moments E[p^a (1 - p)^b]."""
    shrink = 1.0 - drop / mean if mean > 0 else 1.0
    moment = _beta_moments(mean, icc)
    totals: dict[float, float] = {}
    for i in range(k + 1):
        for j in range(k + 1):
            # (1 - p s)^(k - j) expanded: sum over m of C(k - j, m) (-s)^m p^m
            inner = math.fsum(
                math.comb(k - j, m) * (-shrink) ** m * moment(i + j + m, k - i) for m in range(k - j + 1)
            )
            mass = max(0.0, math.comb(k, i) * math.comb(k, j) * shrink**j * inner)
            key = (j - i) / k
            totals[key] = totals.get(key, 0.0) + mass
    return list(totals.items())


def _beta_moments(mean: float, icc: float) -> Callable[[int, int], float]:
    """E[p^a (1 - p)^b] for p of the beta distribution with this mean and intra-item correlation
    (1 / (a + b + 1)); p is the mean itself when icc is 0."""
    if icc <= 0.0 or mean <= 0.0 or mean >= 1.0:
        return lambda a, b: mean**a * (1.0 - mean) ** b
    total = 1.0 / min(icc, 0.999) - 1.0
    alpha, beta = mean * total, (1.0 - mean) * total
    base = math.lgamma(alpha) + math.lgamma(beta) - math.lgamma(alpha + beta)
    return lambda a, b: math.exp(
        math.lgamma(alpha + a) + math.lgamma(beta + b) - math.lgamma(alpha + beta + a + b) - base
    )


def _weighted(points: Iterable[tuple[float, float]], n: int) -> Sample:
    return population(points, n, -1.0, 1.0)


def design_of(
    items: Iterable[Sequence[float]], trials: int | None = None, differences: Sequence[float] | None = None
) -> Design:
    """The design of a comparison with this baseline (each item's trial values), at its own
    size, or with ``trials`` per item: its mean, and how an item's score varies from one trial
    to the next (its within-item variance, and for pass/fail scores the intra-item correlation
    that leaves): from the baseline's items' trials when they have several; with one trial each,
    from the paired ``differences`` when given (two runs of an item differ by that variation,
    twice over; a real change only adds to it), else all of the baseline's spread (the noisiest
    case: flaky items cannot be told from hard ones)."""
    values = [list(v) for v in items if v]
    if not values:
        raise ValueError("a design needs a baseline with at least one item")
    means = item_means(values)
    mean = math.fsum(means) / len(means)
    binary = all(x in (0.0, 1.0) for v in values for x in v)
    per_item = sum(map(len, values)) / len(values)
    repeated = [v for v in values if len(v) > 1]
    if repeated:
        within = math.fsum(_variance(v) for v in repeated) / len(repeated)
        between = max(0.0, _spread(means) - within / per_item)  # Var(item mean) = between + within / k
    elif differences is not None and len(differences) > 1:
        within = _spread(differences) / 2.0
        between = max(0.0, _spread(means) - within)
    else:
        within, between = _spread(means), 0.0
    icc = min(1.0, between / (mean * (1.0 - mean))) if binary and 0.0 < mean < 1.0 else 0.0
    # Rounded beyond the estimates' precision, so that designs alike share their populations.
    return Design(
        len(values), trials or round(per_item), round(mean, 3), binary, round(icc, 2), float(f"{within:.3g}")
    )


def _variance(values: Sequence[float]) -> float:
    mean = math.fsum(values) / len(values)
    return math.fsum((x - mean) ** 2 for x in values) / (len(values) - 1)


def _spread(values: Sequence[float]) -> float:
    return _variance(values) if len(values) > 1 else 0.0


def _power(population: Sample, value: float, alpha: float) -> float:
    """The chance that the test of "the mean is above ``value``" rejects at one-sided ``alpha``
    on n items drawn from ``population`` (normal approximation of the score test: its
    corrected distance over the null's standard error, in the population's)."""
    n = population.n
    if n < 2 or population.mean <= value:
        return 0.0
    gap = (population.mean - value - CORRECTION / n) * math.sqrt(n)
    t = t_quantile(1.0 - alpha, n - 1)
    spread = math.sqrt(population.variance)
    if spread == 0.0:
        return 1.0 if gap > t * math.sqrt(null_variance(population, value)) else 0.0
    return NormalDist().cdf((gap - t * math.sqrt(null_variance(population, value))) / spread)


def detection_power(design: Design, drop: float, delta: float, alpha: float) -> float:
    """The chance that normal mode fails the gate when the true drop is ``drop`` (the sign-flip
    test of no change needs at least log2(1 / alpha) items to reject)."""
    if 2.0**-design.items > alpha:
        return 0.0
    return _power(design.differences(drop).reflected(), delta, alpha)


def clearance_power(design: Design, delta: float, alpha: float) -> float:
    """The chance that strict mode passes the gate when nothing changed."""
    return _power(design.differences(0.0), -delta, alpha)


def minimum_detectable_drop(design: Design, delta: float, alpha: float, power: float = POWER) -> float | None:
    """The smallest true drop normal mode catches with probability ``power`` at this design, or
    ``None`` when not even a drop to a mean of 0 is caught that often."""
    if detection_power(design, design.mean, delta, alpha) < power:
        return None
    low, high = delta, design.mean
    while high - low > 1e-4:
        middle = (low + high) / 2.0
        if detection_power(design, middle, delta, alpha) >= power:
            high = middle
        else:
            low = middle
    return high


def items_needed(
    design: Design, power_at: Callable[[Design], float], power: float = POWER, most: int = 100_000
) -> int | None:
    """The fewest items (at the design's trials) for ``power_at`` to reach ``power``; ``None``
    beyond ``most``."""
    if power_at(design.with_size(most)) < power:
        return None
    low, high = 2, most
    while low < high:
        middle = (low + high) // 2
        if power_at(design.with_size(middle)) >= power:
            high = middle
        else:
            low = middle + 1
    return low


@dataclass(frozen=True)
class PlanRow:
    """What a design at ``trials`` per item needs: the items for normal mode to catch the drop,
    and for strict mode to show no drop beyond delta when nothing changed, each with 80% chance
    (``None``: not within 100,000 items); and the smallest drop caught at the design's items."""

    trials: int
    to_catch: int | None
    to_clear: int | None
    caught_at_size: float | None


def plan(
    design: Design, drop: float, delta: float, alpha: float, trials: Iterable[int], power: float = POWER
) -> list[PlanRow]:
    """For each number of trials per item, what the design needs (``opik-eval plan``)."""
    rows = []
    for k in trials:
        at_k = design.with_size(design.items, k)
        rows.append(
            PlanRow(
                trials=k,
                to_catch=items_needed(at_k, lambda d: detection_power(d, drop, delta, alpha), power),
                to_clear=items_needed(at_k, lambda d: clearance_power(d, delta, alpha), power),
                caught_at_size=minimum_detectable_drop(at_k, delta, alpha, power),
            )
        )
    return rows
