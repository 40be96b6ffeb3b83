"""The statistics behind the gates: bounds on a mean over items, the paired comparison with a
baseline, the tests a gate decides on, Holm over a session's gates, and what a design of n items
and k trials can detect.

Pure functions over numbers, standard library only (no pytest, no numpy, no scipy): every step is
one pass over the items, so 100,000 trials take a few milliseconds.

Conventions:
- An *item* is the unit: its trials are one observation, the item's mean over them. A mean over
  items lies in a known range: [0, 1] for scores and pass rates, [-1, 1] for a paired difference
  (current minus baseline).
- ``level`` is a two-sided confidence level in (0, 1), 0.95 by default; ``confidence`` is a one-
  sided one: a lower bound at confidence 0.95 is below the truth 95% of the time.
- A *difference* is current minus baseline, so a *drop* (current got worse, for a score where
  higher is better) is a negative difference, and ``drop = -difference``.

The method, the same for every kind of score (pass/fail, counts of passed trials, continuous
scores), so that a run never changes method when its scores change, and a better run never gets
a worse bound ("bounded t"):
- the t bound on the mean of the item values: mean - t * s / sqrt(n), t with n - 1 degrees of
  freedom; honest from about 10 items whatever the shape, and exact for normal data;
- widened where the sample cannot see what could hide from it: the least favourable population
  with the observed mean is two-point, the bulk at the mean and a share at the end of the range
  (items that broke, scoring 0), which n items miss entirely with a chance that the t bound
  ignores when they all agree (no spread is not proof). Its variance, (mean - m)(m - low) at a
  hypothesized mean m, is a floor on the variance the test uses; solved, the bound is the mean
  with t^2 pseudo-items at the end of the range: (n * mean + t^2 * low) / (n + t^2). For pass/
  fail data that is Wilson's score bound with t for z; for all n items passing it is within a
  few thousandths of the exact binomial bound.
- The bound is the lower of the two (the upper bound the higher), never outside the range. One
  item has no spread to estimate: it bounds nothing (the range's ends), and its tests have p = 1.
- Each p-value is the bound's inversion: p <= a exactly when the bound at confidence 1 - a
  excludes the value, so a printed bound and its test never disagree.
- "No change" is also tested exactly: if an unchanged app's items were as likely to move up as
  down, how often would chance alone give a total drop this large? The sign-flip randomization
  test (for pass/fail items with one trial, the exact one-sided McNemar test). A regression gate
  fails only when both this test and the bound against DELTA say so: 3 items that all regressed
  give p = 1/8, never a regression.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist

LEVEL = 0.95
POWER = 0.80
# The sign-flip test's resolution: magnitudes in sixtieths (exact for items of up to 6 trials, and
# for 4 against 5), and its exact distribution computed up to this many steps, normal beyond.
FLIP_STEPS = 60
FLIP_WORK = 30_000
# Over this many distinct values (continuous scores), a mean's test works on this many bins of
# adjacent values (their means and variances), so that it costs the same at any number of items.
BINS = 64


def normal_quantile(p: float) -> float:
    """The standard normal quantile: the z with P(Z <= z) = p, for p in (0, 1)."""
    return NormalDist().inv_cdf(p)


def _alpha(level: float) -> float:
    if not 0.0 < level < 1.0:
        raise ValueError(f"confidence level {level!r} is not between 0 and 1 (try 0.95)")
    return 1.0 - level


# --- Student's t, from the regularized incomplete beta function ---------------------------


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz), for x below
    (a + 1) / (a + b + 2), where it converges in O(sqrt(max(a, b))) steps."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    fraction = d
    for m in range(1, 10_000):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            fraction *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return fraction


def beta_cdf(x: float, a: float, b: float) -> float:
    """The regularized incomplete beta function I_x(a, b): P(X <= x) for X ~ Beta(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_fraction(b, a, 1.0 - x) / b


def t_sf(x: float, df: int) -> float:
    """P(T >= x) for Student's t with ``df`` >= 1 degrees of freedom."""
    if x == 0.0:
        return 0.5
    if math.isinf(x):
        return 0.0 if x > 0 else 1.0
    tail = 0.5 * beta_cdf(df / (df + x * x), df / 2.0, 0.5)
    return tail if x > 0 else 1.0 - tail


def _t_density(x: float, df: int) -> float:
    log_front = math.lgamma((df + 1) / 2.0) - math.lgamma(df / 2.0) - 0.5 * math.log(df * math.pi)
    return math.exp(log_front - (df + 1) / 2.0 * math.log1p(x * x / df))


@lru_cache(maxsize=4096)
def t_quantile(p: float, df: int) -> float:
    """The t with P(T <= t) = p, for Student's t with ``df`` >= 1 degrees of freedom: exact for
    1 and 2, else Newton's steps from the Cornish-Fisher expansion (bisection if they stall)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"a quantile needs 0 < p < 1, got {p!r}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    if p == 0.5:
        return 0.0
    if df == 1:
        return math.tan(math.pi * (p - 0.5))
    if df == 2:
        return (2.0 * p - 1.0) / math.sqrt(2.0 * p * (1.0 - p))
    z = normal_quantile(p)
    x = z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df * df)
    for _ in range(50):
        step = (t_sf(x, df) - (1.0 - p)) / _t_density(x, df)
        x += step
        if abs(step) <= 1e-13 * max(1.0, abs(x)):
            return x
    low, high = 0.0, max(1.0, 2.0 * x)
    while t_sf(high, df) > 1.0 - p:
        low, high = high, 2.0 * high
    while high - low > 1e-13 * high:
        middle = (low + high) / 2.0
        low, high = (middle, high) if t_sf(middle, df) > 1.0 - p else (low, middle)
    return (low + high) / 2.0


# --- a mean over items ----------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    """Per-item values (item means, or paired differences), grouped: each distinct value with
    its number of items (or, over ``BINS`` values, bins of adjacent values: their mean, count and
    variance); and the range [low, high] their mean can take."""

    values: tuple[tuple[float, float, float], ...]  # (value, items, variance within a bin)
    n: int
    mean: float
    variance: float  # the sample variance of the items' values (0.0 for fewer than two)
    low: float = 0.0
    high: float = 1.0

    def reflected(self) -> Sample:
        """The same values negated: an upper bound is the reflection's lower bound."""
        return Sample(
            tuple((-v, c, w) for v, c, w in reversed(self.values)),
            self.n,
            -self.mean,
            self.variance,
            -self.high,
            -self.low,
        )


def sample(values: Iterable[float], low: float = 0.0, high: float = 1.0) -> Sample:
    """The summary of per-item values in [low, high]."""
    counted = Counter(values)  # items share few values (pass/fail, counts of passed trials)
    n = sum(counted.values())
    if n == 0:
        raise ValueError("a mean over items needs at least one item")
    mean = math.fsum(value * count for value, count in counted.items()) / n
    squares = math.fsum((value - mean) ** 2 * count for value, count in counted.items())
    ordered = sorted(counted.items())
    if len(ordered) > BINS:
        ordered_values = [value for value, count in ordered for _ in range(count)]
        grouped = tuple(_bin(ordered_values[n * b // BINS : n * (b + 1) // BINS]) for b in range(BINS))
    else:
        grouped = tuple((value, float(count), 0.0) for value, count in ordered)
    clipped = min(high, max(low, mean))
    return Sample(grouped, n, clipped, squares / (n - 1) if n > 1 else 0.0, low, high)


def _bin(values: list[float]) -> tuple[float, float, float]:
    mean = math.fsum(values) / len(values)
    return mean, len(values), math.fsum((v - mean) ** 2 for v in values) / len(values)


def null_variance(s: Sample, value: float) -> float:
    """The variance of the items' values under the most likely population whose mean is
    ``value`` (below the sample's mean), on the observed values and the range's lower end: the
    observed values reweighted, w_j = n_j / (n (1 + lam (x_j - value))) (the empirical
    likelihood's tilt), and, when that cannot reach ``value``, a share at ``low`` (items that
    could have broken unseen) with lam at its largest, 1 / (value - low). For pass/fail
    differences (values -1, 0, 1) this is Tango's restricted maximum-likelihood variance, for
    pass/fail values Wilson's."""
    n, low = s.n, s.low
    largest = 1.0 / (value - low)
    if s.values[0][0] > low and _tilt(s, value, largest)[0] > 0.0:
        weights = [(x, c * (value - low) / (n * (x - low)), w) for x, c, w in s.values]
        at_low = max(0.0, 1.0 - math.fsum(weight for _, weight, _ in weights))
    else:
        lam = _root(s, value, largest)
        weights = [(x, c / (n * (1.0 + lam * (x - value))), w) for x, c, w in s.values]
        at_low = 0.0
    spread = math.fsum(weight * ((x - value) ** 2 + w) for x, weight, w in weights)
    return spread + at_low * (low - value) ** 2


def _tilt(s: Sample, value: float, lam: float) -> tuple[float, float]:
    """The tilted weights' mean of (x - value), times n, and its derivative in lam (negative:
    the mean decreases as lam grows)."""
    total, slope = 0.0, 0.0
    for x, count, _ in s.values:
        shifted = x - value
        denominator = 1.0 + lam * shifted
        if denominator <= 0.0:
            return -math.inf, -math.inf
        total += count * shifted / denominator
        slope -= count * shifted * shifted / (denominator * denominator)
    return total, slope


def _root(s: Sample, value: float, largest: float) -> float:
    """The lam in [0, largest) where the tilted mean is ``value``: Newton's steps, kept inside a
    bracket that bisection narrows when a step would leave it."""
    lo, hi, lam = 0.0, largest, 0.0
    for _ in range(200):
        total, slope = _tilt(s, value, lam)
        if total > 0.0:
            lo = lam
        else:
            hi = lam
        if abs(total) <= 1e-12 * s.n or hi - lo <= 1e-15 * largest:
            break
        step = lam - total / slope if math.isfinite(slope) and slope < 0.0 else math.nan
        lam = step if lo < step < hi else (lo + hi) / 2.0
    return lam


# Half an item's worth, towards the hypothesis, taken off the distance between the mean and the
# value tested: the continuity correction that keeps the tests at their level when few items
# move (a count of 3 regressions is not a normal variable). Exact sizes, enumerated for pass/fail
# items with one trial, from 1 to 150 items: at most about 5.2% at 5%.
CORRECTION = 0.5


def _statistic(s: Sample, value: float) -> float:
    """The score statistic for the mean against ``value`` (below the mean): the corrected
    distance in standard errors of the most likely population with that mean."""
    gap = s.mean - value - CORRECTION / s.n
    if gap <= 0.0:
        return 0.0
    variance = null_variance(s, value)
    return math.inf if variance <= 0.0 else gap * math.sqrt(s.n / variance)


def lower_bound(s: Sample, confidence: float = LEVEL) -> float:
    """The one-sided lower confidence bound on the mean: the lowest value the score test at
    1 - ``confidence`` does not reject (the t quantile with n - 1 degrees of freedom)."""
    _alpha(confidence)
    if s.n < 2:
        return s.low
    t = t_quantile(confidence, s.n - 1)

    def excess(value: float) -> float:  # positive where the value is rejected; decreasing
        return _statistic(s, value) - t if value > s.low else math.inf

    # A bracket from the t bound, where the answer usually is, widened towards the range's end.
    start = max(s.low, s.mean - t * math.sqrt(s.variance / s.n))
    step = max(s.mean - start, (s.high - s.low) * 1e-3)
    lo, hi = start, s.mean
    while lo > s.low and excess(lo) <= 0.0:
        lo, hi = max(s.low, lo - step), lo
        step *= 2.0
    return _root_between(excess, lo, hi, (s.high - s.low) * 1e-10)


def _root_between(f: Callable[[float], float], lo: float, hi: float, tolerance: float) -> float:
    """The point where decreasing ``f`` crosses 0 in [lo, hi] (f(lo) > 0 >= f(hi), or lo at
    the range's end), by regula falsi (Illinois) with bisection where f is infinite: the upper
    end of the final bracket, so that the value returned is never rejected."""
    f_lo, f_hi = f(lo), f(hi)
    if f_lo <= 0.0:
        return lo
    side = 0
    while hi - lo > tolerance:
        if math.isfinite(f_lo) and math.isfinite(f_hi) and f_lo != f_hi:
            middle = hi - f_hi * (hi - lo) / (f_hi - f_lo)
            if not lo < middle < hi:
                middle = (lo + hi) / 2.0
        else:
            middle = (lo + hi) / 2.0
        f_middle = f(middle)
        if f_middle > 0.0:
            lo, f_lo = middle, f_middle
            if side == -1:
                f_hi /= 2.0
            side = -1
        else:
            hi, f_hi = middle, f_middle
            if side == 1:
                f_lo /= 2.0
            side = 1
    return hi


def upper_bound(s: Sample, confidence: float = LEVEL) -> float:
    """The one-sided upper confidence bound on the mean (the reflection's lower bound)."""
    return -lower_bound(s.reflected(), confidence)


def p_above(s: Sample, value: float) -> float:
    """One-sided p-value for "the mean is above ``value``" (against: it is at most ``value``):
    at most a exactly when ``lower_bound(s, 1 - a)`` is above ``value``."""
    if s.n < 2:
        return 1.0
    if s.mean == value:
        return 0.5
    if s.mean < value:
        return 1.0 - p_above(s.reflected(), -value)
    if value <= s.low:  # a mean at most the range's end: every item there, which they are not
        return 0.0
    return t_sf(_statistic(s, value), s.n - 1)


def p_below(s: Sample, value: float) -> float:
    """One-sided p-value for "the mean is below ``value``" (as ``p_above``, reflected)."""
    return p_above(s.reflected(), -value)


@dataclass(frozen=True)
class Interval:
    """An estimate with its confidence interval over ``n`` items: two-sided at ``level``, or
    (``one_sided``) each end a one-sided bound at ``level``."""

    estimate: float
    low: float
    high: float
    level: float
    n: int
    one_sided: bool = False


def interval(s: Sample, level: float = LEVEL) -> Interval:
    """The two-sided interval: each end the one-sided bound at (1 + level) / 2."""
    confidence = 1.0 - _alpha(level) / 2.0
    return Interval(s.mean, lower_bound(s, confidence), upper_bound(s, confidence), level, s.n)


def bounds(s: Sample, confidence: float) -> Interval:
    """Both one-sided bounds at ``confidence``: what a one-sided test at 1 - confidence uses."""
    return Interval(s.mean, lower_bound(s, confidence), upper_bound(s, confidence), confidence, s.n, True)


def mean_interval(items: Iterable[Sequence[float]], level: float = LEVEL) -> Interval:
    """A score's mean over items (each item's mean over its trials) with its interval."""
    return interval(sample(item_means(items)), level)


def item_means(items: Iterable[Sequence[float]]) -> list[float]:
    """Each item's mean over its trial values."""
    means = []
    for values in items:
        if not values:
            raise ValueError("an item has no trial values: leave it out, or give it its values")
        means.append(values[0] if len(values) == 1 else math.fsum(values) / len(values))
    return means


def mean(values: Sequence[float]) -> float:
    """The mean of ``values`` (at least one)."""
    if not values:
        raise ValueError("a mean needs at least one value")
    return math.fsum(values) / len(values)


def variance(values: Sequence[float]) -> float:
    """The sample variance of ``values`` (divided by n - 1; at least two)."""
    if len(values) < 2:
        raise ValueError("a sample variance needs at least two values")
    centre = mean(values)
    return math.fsum((x - centre) ** 2 for x in values) / (len(values) - 1)


def pass_rate_interval(items: Iterable[tuple[int, int]], level: float = LEVEL) -> Interval:
    """The pass rate over items (each item's passed trials over its trials) with its interval:
    ``items`` gives each item's (passed trials, trials)."""
    rates = []
    for passed, trials in items:
        if trials <= 0 or not 0 <= passed <= trials:
            raise ValueError(
                f"an item has {passed} passed of {trials} trials: need 0 <= passed <= trials, trials > 0"
            )
        rates.append(passed / trials)
    return interval(sample(rates), level)


# --- the paired comparison ----------------------------------------------------------------


@dataclass(frozen=True)
class PairedComparison:
    """Two runs compared item by item over the items both have.

    ``differences`` maps each shared item to its mean in the current run minus its mean in the
    baseline (each item weighs the same, whatever its number of trials); ``sample`` summarizes
    them (``None`` without shared items), ``baseline_mean`` and ``current_mean`` are the means
    of the item means over those items (so their difference is the sample's mean)."""

    shared: tuple[str, ...]
    only_in_current: tuple[str, ...]
    only_in_baseline: tuple[str, ...]
    differences: dict[str, float]
    sample: Sample | None
    baseline_mean: float | None
    current_mean: float | None


def paired_comparison(
    current: Mapping[str, Sequence[float]], baseline: Mapping[str, Sequence[float]]
) -> PairedComparison:
    """Pair two runs by item id (each maps an item id to its trial values); one pass over the
    items (100,000 are common)."""
    differences: dict[str, float] = {}
    now: list[float] = []
    before: list[float] = []
    for item, values in current.items():
        previous = baseline.get(item)
        if previous is None:
            continue
        if len(values) == 1 == len(previous):  # the common case needs no sums
            now.append(values[0])
            before.append(previous[0])
            differences[item] = values[0] - previous[0]
        else:
            now.append(math.fsum(values) / len(values))
            before.append(math.fsum(previous) / len(previous))
            # One division: equal differences of pass/fail means (0.6 - 0.4, 0.8 - 0.6) come out
            # as one float, which the sign-flip test and the sample group.
            differences[item] = _difference(values, previous)
    shared = tuple(differences)
    every = len(shared) == len(current), len(shared) == len(baseline)
    return PairedComparison(
        shared=shared,
        only_in_current=() if every[0] else tuple(i for i in current if i not in baseline),
        only_in_baseline=() if every[1] else tuple(i for i in baseline if i not in current),
        differences=differences,
        sample=sample(differences.values(), -1.0, 1.0) if shared else None,
        baseline_mean=math.fsum(before) / len(before) if shared else None,
        current_mean=math.fsum(now) / len(now) if shared else None,
    )


def _difference(current: Sequence[float], baseline: Sequence[float]) -> float:
    if not current or not baseline:
        raise ValueError("an item has no trial values: leave it out, or give it its values")
    numerator = math.fsum(current) * len(baseline) - math.fsum(baseline) * len(current)
    return numerator / (len(current) * len(baseline))


def chance_of_drop(differences: Iterable[float]) -> float:
    """The exact sign-flip test of "nothing changed": if each item's difference were as likely
    to have either sign (two runs of the same app), the chance of a total at most the one
    observed. Magnitudes in sixtieths (``FLIP_STEPS``); for pass/fail items with one trial this
    is the exact one-sided McNemar (binomial) test; computed exactly while that takes at most
    ``FLIP_WORK`` steps, by the normal approximation beyond (many items moved)."""
    groups: Counter[int] = Counter()
    total = 0
    for difference in differences:
        step = round(abs(difference) * FLIP_STEPS)
        if step:
            groups[step] += 1
            total += step if difference > 0 else -step
    if not groups:
        return 1.0
    divisor = math.gcd(*groups)
    groups = Counter({step // divisor: count for step, count in groups.items()})
    observed = total // divisor
    work, support, reach = 0, 1, 0
    for step, count in sorted(groups.items(), key=lambda group: -group[1]):
        work += support * (count + 1)
        reach += step * count
        support = min(support * (count + 1), 2 * reach + 1)
    if work > FLIP_WORK:
        spread = math.sqrt(sum(step * step * count for step, count in groups.items()))
        return NormalDist().cdf((observed + 1) / spread)  # a continuity correction of one unit
    return _flip_tail(groups, observed)


def _flip_tail(groups: Counter[int], observed: int) -> float:
    """P(sum of +-step over every item <= observed), signs fair and independent: the sum's
    distribution built group by group (a group of ``count`` items of one step contributes
    step * (count - 2 * j) with j ~ Binomial(count, 1/2))."""
    distribution = {0: 1.0}
    for step, count in sorted(groups.items(), key=lambda group: -group[1]):
        weights = _half_binomial(count)
        spread: dict[int, float] = {}
        for value, mass in distribution.items():
            for j, weight in enumerate(weights):
                key = value + step * (count - 2 * j)
                spread[key] = spread.get(key, 0.0) + mass * weight
        distribution = spread
    return min(1.0, math.fsum(mass for value, mass in distribution.items() if value <= observed))


def _half_binomial(count: int) -> list[float]:
    """The probabilities of Binomial(count, 1/2), from their logarithms (no overflow)."""
    log_all = math.lgamma(count + 1) - count * math.log(2.0)
    return [math.exp(log_all - math.lgamma(j + 1) - math.lgamma(count - j + 1)) for j in range(count + 1)]


def regressions_by_chance(regressions: int, fixes: int) -> float:
    """The exact one-sided test on items' pass/fail flips: the chance, if a flip were as likely
    either way, of at least ``regressions`` of the ``regressions + fixes`` flips being
    regressions (1.0 without flips)."""
    if regressions < 0 or fixes < 0:
        raise ValueError(f"flip counts must not be negative, got {regressions} and {fixes}")
    return chance_of_drop([-1.0] * regressions + [1.0] * fixes)


# --- the decisions ------------------------------------------------------------------------


@dataclass(frozen=True)
class RegressionTest:
    """What the paired differences say about a drop against a tolerated ``delta``.

    One-sided p-values, ready for ``holm``:
    - ``p_beyond``: for "the drop is greater than delta" (normal mode fails on it): the larger
      of ``p_bound`` (the score test against delta) and ``p_chance``;
    - ``p_within``: for "the drop is less than delta" (strict mode passes on it);
    - ``p_chance``: the exact sign-flip test of "nothing changed"."""

    differences: Sample
    delta: float
    p_beyond: float
    p_within: float
    p_chance: float
    p_bound: float

    @property
    def drop(self) -> float:
        return -self.differences.mean

    def drop_bounds(self, confidence: float) -> tuple[float, float]:
        """The one-sided lower and upper bounds on the drop that a test at 1 - confidence uses:
        the lower one no higher than 0 while the sign-flip test cannot tell the drop from chance
        (so that it excludes delta exactly when normal mode fails)."""
        low = -upper_bound(self.differences, confidence)
        if self.p_chance > 1.0 - confidence:
            low = min(low, 0.0)
        return low, -lower_bound(self.differences, confidence)


def regression_test(differences: Sequence[float], delta: float) -> RegressionTest:
    """The tests on the per-item differences (current - baseline) against ``delta``."""
    s = sample(differences, -1.0, 1.0)
    chance = chance_of_drop(differences)
    bound = p_below(s, -delta)
    return RegressionTest(
        differences=s,
        delta=delta,
        p_beyond=max(bound, chance),
        p_within=p_above(s, -delta),
        p_chance=chance,
        p_bound=bound,
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


# --- multi-trial items --------------------------------------------------------------------


def pass_at_k(n: int, c: int, k: int) -> float:
    """pass@k for one item: the probability that at least one of k trials drawn without
    replacement from its n trials, c of which passed, passes: 1 - C(n - c, k) / C(n, k), the
    unbiased estimator of Chen et al. (2021)."""
    _check_trials(n, c, k)
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """pass^k for one item: the probability that all of k trials drawn without replacement from
    its n trials, c of which passed, pass: C(c, k) / C(n, k), unbiased for p^k."""
    _check_trials(n, c, k)
    return math.comb(c, k) / math.comb(n, k)


def _check_trials(n: int, c: int, k: int) -> None:
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= passed ({c}) <= trials ({n}) and 1 <= k ({k}) <= trials")


def pass_at_k_interval(items: Iterable[tuple[int, int]], k: int, level: float = LEVEL) -> Interval:
    """pass@k averaged over items, each given as (trials, passed), with its interval."""
    return _over_items(pass_at_k, items, k, level)


def pass_hat_k_interval(items: Iterable[tuple[int, int]], k: int, level: float = LEVEL) -> Interval:
    """pass^k averaged over items, each given as (trials, passed), with its interval."""
    return _over_items(pass_hat_k, items, k, level)


def _over_items(
    estimator: Callable[[int, int, int], float], items: Iterable[tuple[int, int]], k: int, level: float
) -> Interval:
    # Items share a few (trials, passed) pairs: each pair's estimate is computed once.
    pairs = Counter(items)
    if not pairs:
        raise ValueError("pass@k and pass^k need at least one item")
    estimates = {pair: estimator(*pair, k) for pair in pairs}
    return interval(sample(estimates[pair] for pair in pairs.elements()), level)
