"""Per-item values as a sample: an *item* is the unit, its trials one observation (the item's
mean over them), and a mean over items lies in a known range ([0, 1] for scores and pass rates,
[-1, 1] for a paired difference, current minus baseline). ``Sample`` groups the values once, in
one pass over the items, into what the bounds read (``statistics``): the points the empirical
likelihood weighs, at most ``POINTS`` of them, and the items per point of the pass/fail lattice.
Pure functions, standard library only."""

from __future__ import annotations

import bisect
import itertools
import math
import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

# Over this many items, a mean's empirical likelihood weighs this many means of runs of adjacent
# items (``_runs``), so that it costs the same at any number of items.
POINTS = 128


def lattice(low: float, high: float) -> tuple[float, ...]:
    """The values of pass/fail data in the range: its ends, and 0 for a difference."""
    return (low, 0.0, high) if low < 0.0 < high else (low, high)


@dataclass(frozen=True)
class Sample:
    """Per-item values (item means, or paired differences), grouped: the points the empirical
    likelihood weighs, with their items (each distinct value; over ``POINTS`` items, ``_runs``);
    the range [low, high] their mean can take; the lowest and highest value; and the items per
    ``lattice`` point, each value rounded up (``up``) or down (``down``) to one."""

    values: tuple[tuple[float, float], ...]  # (value, items), ascending
    n: int
    mean: float
    variance: float  # the sample variance of the items' values (0.0 for fewer than two)
    low: float
    high: float
    bottom: float
    top: float
    up: tuple[float, ...]
    down: tuple[float, ...]
    # Whether the values are pass/fail items' (shares of passed trials, or their differences):
    # they get a fourth bound, for the breaks the sample missed (``statistics``' docstring).
    pass_fail: bool = False

    def reflected(self) -> Sample:
        """The same values negated: an upper bound is the reflection's lower bound."""
        return Sample(
            tuple((-v, c) for v, c in reversed(self.values)),
            self.n,
            -self.mean,
            self.variance,
            -self.high,
            -self.low,
            -self.top,
            -self.bottom,
            tuple(reversed(self.down)),
            tuple(reversed(self.up)),
            self.pass_fail,
        )


def sample(
    values: Iterable[float], low: float = 0.0, high: float = 1.0, *, pass_fail: bool = False
) -> Sample:
    """The summary of per-item values in [low, high]; ``pass_fail`` if they are pass/fail items'
    (shares of passed trials, or differences of them)."""
    data = sorted(values)
    n = len(data)
    if n == 0:
        raise ValueError("a mean over items needs at least one item")
    distinct = _distinct(data)
    if distinct is None:  # many distinct values (so many items), in C loops: 100,000 are common
        return _summary(_runs(data), data, None, n, low, high, pass_fail)
    grouped = tuple((value, float(count)) for value, count in distinct)
    support = grouped if n <= POINTS else _runs(data)
    return _summary(support, [v for v, _ in grouped], [c for _, c in grouped], n, low, high, pass_fail)


def _distinct(data: list[float]) -> list[tuple[float, int]] | None:
    """The distinct values of ascending ``data`` with their counts, or None over ``POINTS`` of
    them: one bisection a value (items share few values: pass/fail, counts of passed trials)."""
    found: list[tuple[float, int]] = []
    start = 0
    while start < len(data):
        if len(found) == POINTS:
            return None
        end = bisect.bisect_right(data, data[start], start)
        found.append((data[start], end - start))
        start = end
    return found


def _runs(data: list[float]) -> tuple[tuple[float, float], ...]:
    """Ascending ``data`` as ``POINTS`` runs of adjacent items: each run's mean with its items
    (equal means merged). Which items a run holds depends on their ranks alone, so raising a
    value never lowers a point, nor the bounds on them (the bins' means and spreads did not do
    that: mean minus spread falls as a bin's highest value rises). The spread within a run is
    lost: well under 1% of the variance for 100,000 normal values."""
    n = len(data)
    points: list[tuple[float, float]] = []
    for r in range(POINTS):
        run = data[n * r // POINTS : n * (r + 1) // POINTS]
        value = math.fsum(run) / len(run)
        if points and points[-1][0] == value:
            points[-1] = (value, points[-1][1] + len(run))
        else:
            points.append((value, float(len(run))))
    return tuple(points)


def population(points: Iterable[tuple[float, float]], n: int, low: float, high: float) -> Sample:
    """A population as a sample of ``n`` items: each value with its probability (``design``'s
    populations of differences, weighted points rather than a draw)."""
    merged: dict[float, float] = {}
    for value, weight in points:
        merged[value] = merged.get(value, 0.0) + weight
    ordered = [(value, weight * n) for value, weight in sorted(merged.items()) if weight > 0.0]
    summary = _summary(tuple(ordered), [v for v, _ in ordered], [c for _, c in ordered], n, low, high)
    # A population's variance, not a sample's: the weights are probabilities.
    return replace(summary, variance=math.fsum(c * (v - summary.mean) ** 2 for v, c in ordered) / n)


def _summary(
    support: tuple[tuple[float, float], ...],
    values: Sequence[float],
    counts: Sequence[float] | None,
    n: int,
    low: float,
    high: float,
    pass_fail: bool = False,
) -> Sample:
    """The summary of ``values`` (ascending), each with its number of items (``counts``; None:
    one each, the same sums without multiplying by 1.0, as 100,000 distinct scores often are),
    weighed by the empirical likelihood as ``support``."""
    below: Sequence[float]  # below[i]: the items of the first i values
    if counts is None:
        mean = math.fsum(values) / n
        centred = [v - mean for v in values]
        squares = math.fsum(map(operator.mul, centred, centred))
        below = range(n + 1)
    else:
        mean = math.fsum(map(operator.mul, values, counts)) / n
        centred = [v - mean for v in values]
        squares = math.fsum(map(operator.mul, centred, map(operator.mul, centred, counts)))
        below = [0.0, *itertools.accumulate(counts)]
    points = lattice(low, high)
    # Items rounded up to a lattice point are those above the point before it, up to it; rounded
    # down, those from it to below the next one.
    at_most = [float(below[bisect.bisect_right(values, p)]) for p in points[:-1]] + [float(n)]
    under = [0.0] + [float(below[bisect.bisect_left(values, p)]) for p in points[1:]]
    up = [at_most[0]] + [at_most[i] - at_most[i - 1] for i in range(1, len(points))]
    down = [under[i + 1] - under[i] for i in range(len(points) - 1)] + [n - under[-1]]
    return Sample(
        support,
        n,
        min(high, max(low, mean)),
        squares / (n - 1) if n > 1 else 0.0,
        low,
        high,
        values[0],
        values[-1],
        tuple(up),
        tuple(down),
        pass_fail,
    )


def item_sample(items: Iterable[Sequence[float]]) -> Sample:
    """The items' means over their trial values as a sample: a pass/fail one when every trial
    value is 0 or 1."""
    items = list(items)
    return sample(item_means(items), pass_fail=pass_fail(items))


def item_means(items: Iterable[Sequence[float]]) -> list[float]:
    """Each item's mean over its trial values."""
    items = list(items)
    if set(map(len, items)) == {1}:  # one trial each, the common case: a C loop
        return list(map(operator.itemgetter(0), items))
    means = []
    for values in items:
        if not values:
            raise ValueError("an item has no trial values: leave it out, or give it its values")
        means.append(values[0] if len(values) == 1 else math.fsum(values) / len(values))
    return means


def pass_fail(*runs: Iterable[Sequence[float]]) -> bool:
    """Whether every trial value of the runs' items is 0 or 1: a pass/fail score's (in C, and
    at the first other value: continuous scores cost nothing)."""
    return all({0.0, 1.0}.issuperset(itertools.chain.from_iterable(items)) for items in runs)


def mean(values: Sequence[float]) -> float:
    """The mean of ``values`` (at least one)."""
    if not values:
        raise ValueError("a mean needs at least one value")
    return math.fsum(values) / len(values)


def variance(values: Sequence[float]) -> float:
    """The sample variance (n - 1 in the denominator); 0.0 for fewer than two values."""
    if len(values) < 2:
        return 0.0
    centre = mean(values)
    # x ** 2 in a C loop: pow(x, 2) is not always the float x * x.
    squares = map(pow, [x - centre for x in values], itertools.repeat(2))
    return math.fsum(squares) / (len(values) - 1)
