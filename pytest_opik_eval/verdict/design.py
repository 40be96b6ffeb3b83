"""What a paired comparison's design can detect: from the baseline's scores alone (their mean,
and their intra-item correlation or within-item variance), the number of items and the trials
of each run, the chance that normal mode catches a drop, that strict mode shows none when nothing
changed, the smallest drop caught with 80% power, and the items that would catch a given one
(``opik-eval plan``). Never from the current run: its differences from the baseline carry what
broke, and a design that read them would detect less the more broke. Each power is the score
test's, on the population the design implies (a weighted set of differences, not a draw), by the
normal approximation of its statistic; where the baseline leaves the population open (one trial
per item), on the least favourable one. The score test is close to what the gates decide on for
pass/fail items; for continuous scores the gates' likelihood-t bound needs a smaller drop, so the
figures are conservative there (benchmarks/design_power.py measures both)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from statistics import NormalDist

from pytest_opik_eval.verdict import samples
from pytest_opik_eval.verdict.distributions import normal_quantile, t_quantile
from pytest_opik_eval.verdict.samples import Sample, item_means, population
from pytest_opik_eval.verdict.statistics import CORRECTION, null_variance

POWER = 0.80  # the chance of catching a drop that a plan sizes the items for

# With one trial per item a baseline cannot tell items that differ (hard ones) from trials that
# vary (flaky ones): the design then takes, at each size, the least favourable intra-item
# correlation of these, the one that gives the gates the least power.
UNKNOWN_ICC = (0.0, 0.25, 0.5, 0.75, 1.0)


@dataclass(frozen=True)
class Design:
    """A paired comparison's design: ``items``, ``trials`` per item in the current run and
    ``baseline_trials`` in the baseline, and what the baseline says of its scores: their
    ``mean``; for pass/fail scores, the intra-item correlation ``icc`` (items' pass
    probabilities spread as a beta distribution, the beta-binomial model), ``None`` when the
    baseline has one trial per item and cannot tell (``UNKNOWN_ICC``: the least favourable);
    for other scores, the variance of one trial's score within an item (``within``; with one
    trial per item, all of the items' spread: the noisiest case)."""

    items: int
    trials: int
    mean: float
    binary: bool
    icc: float | None = None
    within: float = 0.0
    baseline_trials: int = 1

    def with_size(self, items: int, trials: int | None = None) -> Design:
        """The design at ``items`` items, and at ``trials`` per item in both runs when given (a
        plan for a new pair of runs)."""
        if trials is None:
            return replace(self, items=items)
        return replace(self, items=items, trials=trials, baseline_trials=trials)

    def differences(self, drop: float) -> list[Sample]:
        """The populations of an item's difference (current - baseline) when the mean drops by
        ``drop``, as ``items`` items, one per intra-item correlation the baseline leaves
        possible: for pass/fail scores, a share drop / mean of the items breaks (fails every
        trial: the usual way an app regresses, and the hardest to tell from chance), the
        passed trials binomial in both runs; for other scores, every item lower by ``drop``
        with normal trial noise. Weighted points, not a draw."""
        iccs = (self.icc,) if self.icc is not None or not self.binary else UNKNOWN_ICC
        return [
            _weighted(
                _points(
                    self.binary, self.mean, icc or 0.0, self.within, self.baseline_trials, self.trials, drop
                ),
                self.items,
            )
            for icc in iccs
        ]


@lru_cache(maxsize=4096)
def _points(
    binary: bool, mean: float, icc: float, within: float, before: int, after: int, drop: float
) -> tuple[tuple[float, float], ...]:
    """The differences' values and weights (the same at any number of items), with ``before``
    trials per item in the baseline and ``after`` in the current run."""
    if binary:
        return tuple(_binary_differences(mean, icc, before, after, drop))
    sd = math.sqrt(within / before + within / after)
    return tuple((max(-1.0, min(1.0, sd * z - drop)), 1.0 / _POINTS) for z in _NORMAL_POINTS)


_POINTS = 40
_NORMAL_POINTS = [normal_quantile((i + 0.5) / _POINTS) for i in range(_POINTS)]


def _binary_differences(
    mean: float, icc: float, before: int, after: int, drop: float
) -> list[tuple[float, float]]:
    """P(difference = j / after - i / before): i of ``before`` trials passed in the baseline, j
    of ``after`` now, the item's pass probability p drawn from the beta distribution, and the
    item broken (p 0 now) with chance drop / mean; in closed form from the beta's moments
    E[p^a (1 - p)^b]."""
    broken = min(1.0, drop / mean) if mean > 0 else 0.0
    moment = _beta_moments(mean, icc)
    totals: dict[float, float] = {}
    for i in range(before + 1):
        for j in range(after + 1):
            mass = (1.0 - broken) * math.comb(after, j) * moment(i + j, before - i + after - j)
            if j == 0:
                mass += broken * moment(i, before - i)
            key = (j * before - i * after) / (before * after)  # one division: equal keys alike
            totals[key] = totals.get(key, 0.0) + math.comb(before, i) * mass
    return list(totals.items())


def _beta_moments(mean: float, icc: float) -> Callable[[int, int], float]:
    """E[p^a (1 - p)^b] for p of the beta distribution with this mean and intra-item correlation
    (1 / (a + b + 1)); p is the mean itself when icc is 0, and 0 or 1 when it is 1."""
    if icc <= 0.0 or mean <= 0.0 or mean >= 1.0:
        return lambda a, b: mean**a * (1.0 - mean) ** b
    if icc >= 1.0:  # every item passes always (chance: the mean) or never
        return lambda a, b: (mean if b == 0 else 0.0) + (1.0 - mean if a == 0 else 0.0)
    total = 1.0 / icc - 1.0
    alpha, beta = mean * total, (1.0 - mean) * total
    base = math.lgamma(alpha) + math.lgamma(beta) - math.lgamma(alpha + beta)
    return lambda a, b: math.exp(
        math.lgamma(alpha + a) + math.lgamma(beta + b) - math.lgamma(alpha + beta + a + b) - base
    )


def _weighted(points: Iterable[tuple[float, float]], n: int) -> Sample:
    return population(points, n, -1.0, 1.0)


def design_of(items: Iterable[Sequence[float]], trials: int | None = None) -> Design:
    """The design of a comparison with this baseline (each item's trial values), at its own
    size, with ``trials`` per item in the current run (else the baseline's): from the baseline
    alone, never from a current run (whose differences would carry what broke): its mean, and
    how an item's score varies from one trial to the next (its within-item variance, and for
    pass/fail scores the intra-item correlation that leaves), from the items' trials when they
    have several; with one trial each, unknown (see ``Design``)."""
    values = [v for v in items if v]
    if not values:
        raise ValueError("a design needs a baseline with at least one item")
    means = item_means(values)
    mean = samples.mean(means)
    binary = samples.pass_fail(values)
    per_item = max(1, round(sum(map(len, values)) / len(values)))
    repeated = [v for v in values if len(v) > 1]
    spread = samples.variance(means) if len(means) > 1 else 0.0
    icc: float | None = None
    if repeated:
        within = samples.mean([samples.variance(v) for v in repeated])
        between = max(0.0, spread - within / per_item)  # Var(item mean) = between + within / k
        # Rounded beyond the estimate's precision, so that designs alike share populations.
        icc = round(min(1.0, between / (mean * (1.0 - mean))), 2) if 0.0 < mean < 1.0 else 0.0
    else:
        within = spread
    return Design(
        len(values),
        trials or per_item,
        round(mean, 3),
        binary,
        icc if binary else 0.0,
        float(f"{within:.3g}"),
        per_item,
    )


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


# The powers and the detectable drop are pure functions of a (hashable, rounded) design, each
# power a root-finding per population and each search a dozen or more of them: the gates of a
# session whose baselines look alike (rounded to the same design), and benchmarks/gates.py's
# candidates judged against one baseline, get them back at once.
@lru_cache(maxsize=8192)
def detection_power(design: Design, drop: float, delta: float, alpha: float) -> float:
    """The chance that normal mode fails the gate when the true drop is ``drop`` (the sign-flip
    test of no change needs at least log2(1 / alpha) items to reject)."""
    if 2.0**-design.items > alpha:
        return 0.0
    return min(_power(population.reflected(), delta, alpha) for population in design.differences(drop))


@lru_cache(maxsize=8192)
def clearance_power(design: Design, delta: float, alpha: float) -> float:
    """The chance that strict mode passes the gate when nothing changed."""
    return min(_power(population, -delta, alpha) for population in design.differences(0.0))


@lru_cache(maxsize=1024)
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
