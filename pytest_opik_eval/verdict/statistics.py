"""The statistics behind the gates: intervals with the item as the unit, the paired comparison
with a baseline, the tests a gate decides on, and what a sample of this size can detect.

Pure functions over numbers, standard library only (no pytest, no numpy): 100,000 trials take a
fraction of a second because every resampling works on per-item sums, compressed to the values
they take (see ``Bootstrap``).

Conventions:
- An *item* is the unit: its trials are one cluster. An item is given as the sequence of its
  trials' values (a metric's scores, or 1.0/0.0 for passed/failed trials).
- Deterministic: resampling draws from ``random.Random(seed)`` with a fixed default seed, so the
  same data give the same interval, on every machine and Python version.
- ``level`` is a two-sided confidence level in (0, 1), 0.95 by default; a one-sided test at the
  same level has ``alpha = 1 - level``.
- A *difference* is current minus baseline, so a *drop* (current got worse, for a score where
  higher is better) is a negative difference, and ``drop = -difference``.

Choices made:
- Intervals for a mean over items: the percentile cluster bootstrap, 2,000 resamples. Percentile
  rather than BCa: it needs no jackknife (BCa's is one pass per distinct item value, and its
  acceleration is unstable for the 0/1 data most gates see), it respects the range of the
  statistic (a rate stays in [0, 1]), and its one-sided tail fractions are the p-values the
  gates decide on, so an interval and its test never disagree. Its known weakness, too narrow
  on a handful of items, is where the closed forms below take over.
- A pass rate over items with one trial each: the Wilson score interval (exact enough at any n,
  never outside [0, 1], not degenerate at 0 or 1 passes).
- The k-of-n item pass rate: each item's verdict is one Bernoulli outcome per item, items are
  independent, so it is the Wilson interval over items.
- The trial pass rate with several trials per item: the cluster bootstrap; when every trial
  passed (or every trial failed) the bootstrap has nothing to resample, and the Wilson interval
  over items (as if an item's trials were one outcome: the conservative end) is given instead.
- pass@k: the unbiased estimator of Chen et al. (2021), 1 - C(n-c, k) / C(n, k); pass^k (all k
  of k trials pass): its counterpart C(c, k) / C(n, k), unbiased for p^k when an item's trials
  are independent; both averaged over items.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist

LEVEL = 0.95
RESAMPLES = 2000
SEED = 20250513
POWER = 0.80
EXACT_FLIPS = 2000  # McNemar's test in integers up to this many flips, in floating point beyond

# How the bootstrap resamples (see ``Bootstrap``): items grouped by their distinct values, up to
# MAX_GROUPS of them; items drawn one by one, up to DIRECT_ITEMS of them; otherwise BINS bins.
# Each costs about a microsecond per group or item and resample: at most 0.1 s for 2,000.
MAX_GROUPS = 32
DIRECT_ITEMS = 400
BINS = 16


def normal_quantile(p: float) -> float:
    """The standard normal quantile: the z with P(Z <= z) = p, for p in (0, 1)."""
    return NormalDist().inv_cdf(p)


def _alpha(level: float) -> float:
    if not 0.0 < level < 1.0:
        raise ValueError(f"confidence level {level!r} is not between 0 and 1 (try 0.95)")
    return 1.0 - level


@dataclass(frozen=True)
class Interval:
    """An estimate with its two-sided confidence interval, over ``n`` items."""

    estimate: float
    low: float
    high: float
    level: float
    n: int
    method: str  # "wilson" or "bootstrap"


# --- closed forms -------------------------------------------------------------------------


def wilson_interval(successes: int, n: int, level: float = LEVEL) -> Interval:
    """The Wilson score interval for a proportion: ``successes`` of ``n`` independent Bernoulli
    outcomes (items with one trial each, or items' k-of-n verdicts)."""
    alpha = _alpha(level)
    if n <= 0 or not 0 <= successes <= n:
        raise ValueError(
            f"cannot take {successes} successes of {n} outcomes: need 0 <= successes <= n, n > 0"
        )
    z = normal_quantile(1.0 - alpha / 2.0)
    p = successes / n
    z2n = z * z / n
    centre = (p + z2n / 2.0) / (1.0 + z2n)
    half = z * math.sqrt(p * (1.0 - p) / n + z2n / (4.0 * n)) / (1.0 + z2n)
    # Exactly 0 and 1 at the ends, without rounding error pushing a bound past them.
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return Interval(p, low, high, level, n, "wilson")


def item_pass_rate_interval(verdicts: Iterable[bool], level: float = LEVEL) -> Interval:
    """The k-of-n item pass rate (the share of items whose verdict passed) with its Wilson
    interval: each item's verdict is one independent outcome."""
    outcomes = list(verdicts)
    return wilson_interval(sum(outcomes), len(outcomes), level)


# --- the cluster bootstrap ----------------------------------------------------------------


@dataclass(frozen=True)
class _Group:
    """Items sharing one trial count, whose totals are one value (or, binned, close values)."""

    items: int
    trials: int  # trials per item
    mean: float  # the mean of the items' totals
    variance: float  # their population variance: 0.0 when they share one total


@dataclass(frozen=True)
class Bootstrap:
    """The bootstrap distribution of a mean over items: ``estimate`` on the data, ``replicates``
    (sorted) on resamples of the items with replacement.

    The statistic is the sum of the resampled items' totals over the sum of their trial counts,
    the mean over trials that the summary reports (the mean of item means when every item has
    as many trials). Drawing n items one by one costs n draws per resample, too many at 20,000
    items; but a resample only needs how many times each item is drawn, and items with the same
    (total, trials) are interchangeable. So, in the first of these that applies:
    - grouped (exact): the items take at most ``MAX_GROUPS`` distinct (total, trials) values
      (pass/fail data, counts of passed trials, discrete scores): a resample draws the groups'
      counts from their multinomial distribution, one binomial draw per group, whatever n;
    - direct (exact): at most ``DIRECT_ITEMS`` items: a resample draws them one by one;
    - binned (approximate, many items with many distinct values, such as continuous scores):
      each trial count's items are split into ``BINS`` bins of adjacent sorted totals, a bin's
      count is drawn exactly (multinomial), and the sum of the draws inside a bin from the
      normal distribution with the bin's mean and variance. A resample's mean and variance are
      those of the exact bootstrap; only the shape within a bin, a small part of the spread of
      a mean over hundreds of items, is approximated.
    """

    estimate: float
    replicates: tuple[float, ...]
    n: int

    def interval(self, level: float = LEVEL) -> Interval:
        """The percentile interval: the alpha/2 and 1 - alpha/2 quantiles of the replicates."""
        alpha = _alpha(level)
        low = _quantile(self.replicates, alpha / 2.0)
        high = _quantile(self.replicates, 1.0 - alpha / 2.0)
        return Interval(self.estimate, low, high, level, self.n, "bootstrap")

    def p_above(self, value: float) -> float:
        """One-sided p-value for "the true mean is above ``value``": the share of replicates at
        or below it, counting the data as one more replicate ((k + 1) / (B + 1), never 0)."""
        at_or_below = sum(1 for r in self.replicates if r <= value)
        return (at_or_below + 1) / (len(self.replicates) + 1)

    def p_below(self, value: float) -> float:
        """One-sided p-value for "the true mean is below ``value``" (as ``p_above``)."""
        at_or_above = sum(1 for r in self.replicates if r >= value)
        return (at_or_above + 1) / (len(self.replicates) + 1)


def _quantile(ordered: Sequence[float], q: float) -> float:
    """The q-quantile of sorted values, interpolating linearly (numpy's default)."""
    position = q * (len(ordered) - 1)
    below = math.floor(position)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (position - below)


def bootstrap(
    totals: Sequence[float],
    trials: Sequence[int] | None = None,
    *,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> Bootstrap:
    """The cluster bootstrap of the mean over trials, from per-item sums: ``totals[i]`` is the
    sum of item i's trial values and ``trials[i]`` its number of trials (1 each when omitted, for
    per-item values such as paired differences). Items are independent; their trials need not
    be."""
    counts = [1] * len(totals) if trials is None else list(trials)
    if not totals or len(counts) != len(totals) or min(counts) <= 0:
        raise ValueError("the bootstrap needs at least one item, each with a total and at least one trial")
    if resamples < 1:
        raise ValueError(f"the bootstrap needs at least one resample, got {resamples}")
    rng = random.Random(seed)
    n = len(totals)
    distinct = Counter(zip(counts, totals, strict=True))
    if len(distinct) <= MAX_GROUPS:
        groups = [_Group(items, count, total, 0.0) for (count, total), items in sorted(distinct.items())]
        replicates = [_resample(groups, n, rng) for _ in range(resamples)]
    elif n <= DIRECT_ITEMS:
        replicates = _direct(totals, counts, resamples, rng)
    else:
        groups = _bins(totals, counts)
        replicates = [_resample(groups, n, rng) for _ in range(resamples)]
    return Bootstrap(math.fsum(totals) / sum(counts), tuple(sorted(replicates)), n)


def _direct(
    totals: Sequence[float], trials: Sequence[int], resamples: int, rng: random.Random
) -> list[float]:
    """Resamples drawn item by item."""
    n = len(totals)
    if min(trials) == max(trials):
        scale = n * trials[0]
        return [sum(rng.choices(totals, k=n)) / scale for _ in range(resamples)]
    replicates = []
    for _ in range(resamples):
        drawn = rng.choices(range(n), k=n)
        replicates.append(sum(map(totals.__getitem__, drawn)) / sum(map(trials.__getitem__, drawn)))
    return replicates


def _bins(totals: Sequence[float], trials: Sequence[int]) -> list[_Group]:
    """The items of each trial count in bins of adjacent totals, about ``BINS`` bins in all."""
    by_trials: dict[int, list[float]] = {}
    for total, count in zip(totals, trials, strict=True):
        by_trials.setdefault(count, []).append(total)
    groups = []
    for count, values in by_trials.items():
        values.sort()
        bins = max(1, round(BINS * len(values) / len(totals)))
        for b in range(bins):
            chunk = values[len(values) * b // bins : len(values) * (b + 1) // bins]
            if chunk:
                mean = math.fsum(chunk) / len(chunk)
                variance = math.fsum((v - mean) ** 2 for v in chunk) / len(chunk)
                groups.append(_Group(len(chunk), count, mean, variance))
    return groups


def _resample(groups: Sequence[_Group], n: int, rng: random.Random) -> float:
    """One bootstrap replicate: how many of n draws fall in each group (multinomial, by
    successive binomial draws), and the sum of their totals over the sum of their trials."""
    left, weight_left = n, n
    total = 0.0
    trials = 0
    for group in groups:
        if left == 0:
            break
        drawn = left if group.items == weight_left else _binomial(rng, left, group.items / weight_left)
        left -= drawn
        weight_left -= group.items
        if drawn:
            total += drawn * group.mean
            if group.variance:
                total += math.sqrt(drawn * group.variance) * rng.gauss(0.0, 1.0)
            trials += drawn * group.trials
    return total / trials


def _binomial(rng: random.Random, n: int, p: float) -> int:
    """A draw from Binomial(n, p): by inversion for a small mean, by Hormann's BTRS (transformed
    rejection, as Python 3.12's ``random.binomialvariate``) otherwise. Our own, so that a seed
    gives the same draws on every Python version."""
    if p <= 0.0 or n == 0:
        return 0
    if p >= 1.0:
        return n
    if p > 0.5:
        return n - _binomial(rng, n, 1.0 - p)
    if n * p < 10.0:
        return _binomial_inversion(rng, n, p)
    return _binomial_btrs(rng, n, p)


def _binomial_inversion(rng: random.Random, n: int, p: float) -> int:
    """Sequential search of the cumulative distribution (expected n * p + 1 steps)."""
    q = 1.0 - p
    ratio = p / q
    factor = (n + 1) * ratio
    while True:
        mass = q**n
        u = rng.random()
        k = 0
        while u > mass and k <= n:
            u -= mass
            k += 1
            mass *= factor / k - ratio
        if k <= n:
            return k  # else rounding ran past n: draw again


def _binomial_btrs(rng: random.Random, n: int, p: float) -> int:
    """W. Hormann, "The generation of binomial random variates" (1993), algorithm BTRS, for
    n * p >= 10 and p <= 0.5. Most draws are accepted at the first, cheap test; the exact test's
    constants are computed only when a draw gets that far."""
    spq = math.sqrt(n * p * (1.0 - p))
    b = 1.15 + 2.53 * spq
    a = -0.0873 + 0.0248 * b + 0.01 * p
    c = n * p + 0.5
    v_r = 0.92 - 4.2 / b
    random_ = rng.random
    while True:
        u = random_() - 0.5
        v = random_()
        us = 0.5 - abs(u)
        k = math.floor((2.0 * a / us + b) * u + c)
        if k < 0 or k > n:
            continue
        if us >= 0.07 and v <= v_r:
            return k
        alpha = (2.83 + 5.1 / b) * spq
        m = math.floor((n + 1) * p)
        h = math.lgamma(m + 1) + math.lgamma(n - m + 1)
        bound = h - math.lgamma(k + 1) - math.lgamma(n - k + 1) + (k - m) * math.log(p / (1.0 - p))
        if math.log(v * alpha / (a / (us * us) + b)) <= bound:
            return k


def _sums(items: Iterable[Sequence[float]]) -> tuple[list[float], list[int]]:
    totals: list[float] = []
    trials: list[int] = []
    for values in items:
        if not values:
            raise ValueError("an item has no trial values: leave it out, or give it its values")
        totals.append(math.fsum(values))
        trials.append(len(values))
    return totals, trials


def mean_interval(
    items: Iterable[Sequence[float]],
    level: float = LEVEL,
    *,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> Interval:
    """A metric's mean over all trials with its cluster bootstrap interval, the item as the
    unit: ``items`` gives each item's trial values."""
    totals, trials = _sums(items)
    return bootstrap(totals, trials, resamples=resamples, seed=seed).interval(level)


def pass_rate_interval(
    items: Iterable[tuple[int, int]],
    level: float = LEVEL,
    *,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> Interval:
    """The trial pass rate (passed trials over all trials) with its interval, the item as the
    unit: ``items`` gives each item's (passed trials, trials). Wilson when every item has one
    trial; otherwise the cluster bootstrap, or, when every trial passed or every trial failed
    (nothing to resample), the Wilson interval over items."""
    pairs = list(items)
    if not pairs:
        raise ValueError("a pass rate needs at least one item, each with at least one trial")
    passed, trials = (list(column) for column in zip(*pairs, strict=True))
    if min(trials) <= 0:
        raise ValueError("a pass rate needs at least one item, each with at least one trial")
    total_passed, total_trials = sum(passed), sum(trials)
    if total_trials == len(trials) or total_passed in (0, total_trials):
        interval = wilson_interval(round(total_passed * len(trials) / total_trials), len(trials), level)
        return Interval(
            total_passed / total_trials, interval.low, interval.high, level, len(trials), "wilson"
        )
    return bootstrap([float(p) for p in passed], trials, resamples=resamples, seed=seed).interval(level)


# --- the paired comparison ----------------------------------------------------------------


@dataclass(frozen=True)
class PairedComparison:
    """Two runs compared item by item over the items both have.

    ``differences`` maps each shared item to its mean in the current run minus its mean in the
    baseline (each item weighs the same, whatever its number of trials); ``mean`` is their mean,
    ``sd`` their sample standard deviation (0.0 for fewer than two items), and ``bootstrap`` the
    bootstrap distribution of their mean (``None`` without shared items)."""

    shared: tuple[str, ...]
    only_in_current: tuple[str, ...]
    only_in_baseline: tuple[str, ...]
    differences: dict[str, float]
    mean: float | None
    sd: float
    bootstrap: Bootstrap | None


def paired_comparison(
    current: Mapping[str, Sequence[float]],
    baseline: Mapping[str, Sequence[float]],
    *,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> PairedComparison:
    """Pair two runs by item id (each maps an item id to its trial values) and bootstrap the mean
    of the per-item differences: the paired bootstrap, items resampled with their difference."""
    shared = tuple(item for item in current if item in baseline)
    differences = {
        # One trial each, the common case, needs no sums.
        item: now[0] - before[0] if len(now) == 1 == len(before) else _difference(now, before)
        for item in shared
        for now, before in ((current[item], baseline[item]),)
    }
    values = list(differences.values())
    mean = math.fsum(values) / len(values) if values else None
    sd = (
        math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1))
        if mean is not None and len(values) > 1
        else 0.0
    )
    return PairedComparison(
        shared=shared,
        only_in_current=tuple(item for item in current if item not in baseline),
        only_in_baseline=tuple(item for item in baseline if item not in current),
        differences=differences,
        mean=mean,
        sd=sd,
        bootstrap=bootstrap(values, resamples=resamples, seed=seed) if values else None,
    )


def _difference(current: Sequence[float], baseline: Sequence[float]) -> float:
    """The difference of two means in one division: equal differences of pass/fail means (0.6 -
    0.4 and 0.8 - 0.6) come out as one float, so the bootstrap can group them."""
    if not current or not baseline:
        raise ValueError("an item has no trial values: leave it out, or give it its values")
    numerator = math.fsum(current) * len(baseline) - math.fsum(baseline) * len(current)
    return numerator / (len(current) * len(baseline))


@dataclass(frozen=True)
class Flips:
    """Items whose pass/fail verdict changed between two runs, with McNemar's exact test."""

    regressions: tuple[str, ...]  # passed in the baseline, fail now
    fixes: tuple[str, ...]  # failed in the baseline, pass now
    p_value: float  # two-sided: are flips one way more likely than the other?


def flips(current: Mapping[str, bool], baseline: Mapping[str, bool]) -> Flips:
    """The pass/fail flips over the items both runs have (each maps an item id to whether it
    passed), and McNemar's exact test on them."""
    shared = [item for item in current if item in baseline]
    regressions = tuple(i for i in shared if baseline[i] and not current[i])
    fixes = tuple(i for i in shared if current[i] and not baseline[i])
    return Flips(regressions, fixes, mcnemar_exact(len(regressions), len(fixes)))


def mcnemar_exact(b: int, c: int) -> float:
    """McNemar's exact test: the two-sided p-value for ``b`` flips one way and ``c`` the other,
    under the null hypothesis that a flip goes either way with probability 1/2 (the binomial
    test: twice the smaller tail of Binomial(b + c, 1/2), at most 1). Exact integer arithmetic up
    to ``EXACT_FLIPS`` flips; beyond, whose integers grow to n bits each (0.1 s at 30,000 flips),
    the same sum of terms in floating point from their logarithms (relative error about 1e-10)."""
    if b < 0 or c < 0:
        raise ValueError(f"flip counts must not be negative, got {b} and {c}")
    n, smaller = b + c, min(b, c)
    if 2 * smaller == n:
        return 1.0
    if n > EXACT_FLIPS:
        log_n = math.lgamma(n + 1) - n * math.log(2.0)
        logs = [log_n - math.lgamma(i + 1) - math.lgamma(n - i + 1) for i in range(smaller + 1)]
        top = logs[-1]  # the largest term: the tail's terms grow towards the middle
        return min(1.0, 2.0 * math.exp(top) * math.fsum(math.exp(v - top) for v in logs))
    term, tail = 1, 1  # C(n, 0), and the sum of C(n, i) for i <= smaller
    for i in range(smaller):
        term = term * (n - i) // (i + 1)
        tail += term
    return min(1.0, 2 * tail / (1 << n))


# --- the decisions ------------------------------------------------------------------------


@dataclass(frozen=True)
class RegressionEvidence:
    """What the data say about a drop (baseline minus current) against a tolerated ``delta``.

    One-sided p-values from the bootstrap of the mean difference, ready for ``holm``:
    - ``p_drop``: for "there is a drop" (the mean difference is below 0);
    - ``p_drop_beyond_delta``: for "the drop is greater than delta";
    - ``p_within_delta``: for "the drop is less than delta" (non-inferiority).
    ``upper_drop`` is the one-sided upper confidence bound on the drop at ``level``."""

    drop: float
    delta: float
    upper_drop: float
    p_drop: float
    p_drop_beyond_delta: float
    p_within_delta: float
    level: float


def regression_evidence(difference: Bootstrap, delta: float, level: float = LEVEL) -> RegressionEvidence:
    """The evidence on a drop from the bootstrap of the mean difference (current - baseline)."""
    alpha = _alpha(level)
    return RegressionEvidence(
        drop=-difference.estimate,
        delta=delta,
        upper_drop=-_quantile(difference.replicates, alpha),
        p_drop=difference.p_below(0.0),
        p_drop_beyond_delta=difference.p_below(-delta),
        p_within_delta=difference.p_above(-delta),
        level=level,
    )


def regressed(evidence: RegressionEvidence, p_drop: float | None = None) -> bool:
    """The default rule: a regression when the drop is significant (one-sided, at the level)
    and its estimate exceeds delta. ``p_drop`` overrides the evidence's (a Holm-adjusted one)."""
    p = evidence.p_drop if p_drop is None else p_drop
    return p <= 1.0 - evidence.level and evidence.drop > evidence.delta


def non_inferior(evidence: RegressionEvidence, p_within_delta: float | None = None) -> bool:
    """The strict rule: passes only when the data show the drop is below delta (one-sided, at the
    level). ``p_within_delta`` overrides the evidence's (a Holm-adjusted one)."""
    p = evidence.p_within_delta if p_within_delta is None else p_within_delta
    return p <= 1.0 - evidence.level


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the order given: reject hypothesis i at family-wise
    level alpha when its adjusted p-value is at most alpha. Valid under any dependence."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


# --- what a sample can detect -------------------------------------------------------------


def minimum_detectable_drop(
    n: int, sd: float, level: float = LEVEL, power: float = POWER, delta: float = 0.0
) -> float:
    """The smallest true drop a paired comparison of ``n`` items catches with probability
    ``power``, when per-item differences have standard deviation ``sd`` (normal approximation of
    the mean difference, standard error sd / sqrt(n)). The gate fails when the drop is
    significant (its estimate beyond z_(1-alpha) standard errors, one-sided) and beyond
    ``delta``: so the estimate must clear max(delta, z_(1-alpha) se), and it does with
    probability ``power`` when the true drop is z_power se above that."""
    alpha = _alpha(level)
    if n <= 0 or sd < 0.0:
        raise ValueError(f"need n > 0 items and sd >= 0, got n={n}, sd={sd}")
    se = sd / math.sqrt(n)
    return max(delta, normal_quantile(1.0 - alpha) * se) + normal_quantile(power) * se


def items_needed(
    drop: float, sd: float, level: float = LEVEL, power: float = POWER, delta: float = 0.0
) -> int | None:
    """The number of items for ``minimum_detectable_drop`` to reach ``drop``: the smallest n with
    max(delta, z_(1-alpha) se) + z_power se <= drop. ``None`` when no n will do (a drop not
    beyond delta is never a regression)."""
    alpha = _alpha(level)
    if drop <= delta or drop <= 0.0:
        return None
    if sd == 0.0:
        return 1
    z_alpha, z_power = normal_quantile(1.0 - alpha), normal_quantile(power)
    se = drop / (z_alpha + z_power)
    if z_power > 0.0:
        se = min(se, (drop - delta) / z_power)
    n = math.ceil((sd / se) ** 2 - 1e-9)  # no extra item for rounding error in an exact square
    return max(1, n)


# --- multi-trial items ----------------------------------------------------------------------


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


def mean_pass_at_k(items: Iterable[tuple[int, int]], k: int) -> float:
    """pass@k averaged over items, each given as (trials, passed)."""
    return _mean_over_items(pass_at_k, items, k)


def mean_pass_hat_k(items: Iterable[tuple[int, int]], k: int) -> float:
    """pass^k averaged over items, each given as (trials, passed)."""
    return _mean_over_items(pass_hat_k, items, k)


def _mean_over_items(
    estimator: Callable[[int, int, int], float], items: Iterable[tuple[int, int]], k: int
) -> float:
    # Items share a few (trials, passed) pairs: each pair's estimate is computed once.
    pairs = Counter(items)
    if not pairs:
        raise ValueError("pass@k and pass^k need at least one item")
    total = math.fsum(estimator(n, c, k) * items for (n, c), items in pairs.items())
    return total / sum(pairs.values())
