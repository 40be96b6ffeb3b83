"""The bounds on a mean over items behind the gates, their p-values, and the intervals every
report prints: on a ``samples.Sample`` (one pass over the items, then at most
``samples.POINTS`` groups of them); the paired comparison with a baseline is ``paired``'s, the
tests a gate decides on and Holm over a session's gates ``decisions``'. Pure functions, standard
library only.

Conventions:
- An *item* is the unit: its trials are one observation, the item's mean over them. A mean over
  items lies in a known range: [0, 1] for scores and pass rates, [-1, 1] for a paired difference
  (current minus baseline).
- ``level`` is a two-sided confidence level in (0, 1), 0.95 by default; ``confidence`` is a one-
  sided one: a lower bound at confidence 0.95 is below the truth 95% of the time.
- A *difference* is current minus baseline, so a *drop* (current got worse, for a score where
  higher is better) is a negative difference, and ``drop = -difference``.

One method for every kind of score (pass/fail items with several trials add the last bound
below), so that a run never changes method when its scores change.
Each part below never decreases when an item's value rises, so neither does the bound (a better
run never gets a worse bound, nor a worse p-value). The lattice is the range's ends, and 0 for a
difference; its methods, on counts of items per point: Clopper-Pearson for a rate; for
differences (items broke, stayed, were fixed) Tango's score bound with half an item's continuity
correction, and at no change the exact sign test (one-sided McNemar) alone. A lower bound is
the lowest of:
- the spread seen: Owen's empirical likelihood of the mean, its ratio read as Student's t with
  n - 1 degrees of freedom, a Bartlett factor and a tail term (``_as_t``): the t-test's bound for
  symmetric values, following the skew of skewed ones. Not the t bound itself, which falls when a
  high value rises (the spread grows faster than the mean), nor its monotone envelope (the lowest
  t bound over every run at least as good: the highest values raised to the range's end), twice
  as far from the mean at 10 items; the tail term instead holds the level at the 1% and 0.25% a
  session's gates test at after Holm, where the ratio read with the Bartlett factor alone let two
  to five times too many through at 10 items. Or, if higher, the lattice methods' bound on the
  values rounded down to the lattice (valid for any values in the range). On pass/fail items
  with one trial the latter is the method, exact where Clopper-Pearson and the sign test are;
- the same methods on the values rounded up: a cap that binds only near the range's end (ten
  scores of 0.99 get no higher a bound than ten passes);
- no spread: n values whose best is v get a bound no higher than the larger of
  v - t (v - low) / n^1.5 and Clopper-Pearson's for n passes on [low, v]; it binds only with
  very few items or no spread: one item bounds nothing, two equal scores prove little;
- for pass/fail items off the lattice (``Sample.pass_fail``: shares of passed trials, or their
  differences), what the spread seen cannot show: Tango's score bound on the values themselves,
  its variance the most likely population's under the bound, which may hold items at the
  range's end that the sample never saw. With several trials an item's share lies between the
  lattice's points, and a change that breaks a few items outright (a share of 0.8 falling to 0)
  leaves no trace in most samples of 30 items: the spread of the rest made the likelihood's
  bound too high (strict mode passed 8% of runs whose drop equalled the margin, 30 items x 5
  trials). Without a continuity correction: the values are not counts. On the lattice (one
  trial an item) the lattice methods are exact, and this bound is not used.
The upper bound is the reflection's lower bound. Each p-value is the inversion: p <= a exactly
when the bound at 1 - a excludes the value, so a bound and its test never disagree.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from pytest_opik_eval.verdict.distributions import beta_quantile, binomial_tail, sign_test, t_quantile, t_sf
from pytest_opik_eval.verdict.likelihood import likelihood_ratio, root_between, tilt, tilt_root
from pytest_opik_eval.verdict.samples import Sample, item_sample, lattice, population, sample

LEVEL = 0.95
# Half an item's worth, towards the hypothesis, taken off the distance between the lattice's mean
# and the value tested: the continuity correction of a score test on counts (it applies to the
# lattice's counts only, never to values that are not counts).
CORRECTION = 0.5
# The empirical likelihood ratio's Bartlett factor, 1 + BARTLETT / n, and its tail term at few
# items, TAIL n u^4 (``_as_t``).
BARTLETT = 2.0
TAIL = 3.0


def _alpha(level: float) -> float:
    if not 0.0 < level < 1.0:
        raise ValueError(f"confidence level {level!r} is not between 0 and 1 (try 0.95)")
    return 1.0 - level


# --- the spread seen: the empirical likelihood ---------------------------------------------


def _as_t(ratio: float, n: int) -> float:
    """The likelihood ratio as Student's t. For normal values the ratio of the mean is
    n u, u = log(1 + t^2 / (n - 1)), t the t statistic (its quadratic approximation is too
    small below about 30 items); the empirical one runs smaller still at few items, by a Bartlett
    factor 1 + a / n (a = 1.5 for normal values), and in the tail it runs ahead of n u: it is
    infinite where the value leaves the sample's range, so a factor that holds the level at 95%
    lets too much through at 99% (at 10 normal values, a = 1.7 holds 95%, 99% needs 5.5 and
    99.75% 13; a session's gates test at 5% over their number, by Holm). The ratio is read as
    (n + ``BARTLETT``) u + ``TAIL`` n u^4: at 10 items the tail term adds 1 to the factor at 95%,
    6 at 98.75% and 23 at 99.75%; at 30 items 0.1 at 95% and 2 at 99.75%; it vanishes with more
    (it is about t^8 / n^3). The constants keep the level from 10 items, 95% to 99.75%, for the
    differences of skewed scores (benchmarks/gates.py), and at 10 normal values the power of the
    t-test at 95% within 5 points (31% for 36%; 33% with the Bartlett factor alone). Increasing in
    the ratio, so the bound stays monotone in the values."""
    if not math.isfinite(ratio):
        return math.inf
    # The root of (n + BARTLETT) u + TAIL n u^4 = ratio, increasing and convex in u: Newton's
    # steps from above (both terms alone give a point above it) stay above it and converge.
    linear, quartic = n + BARTLETT, TAIL * n
    u = min(ratio / linear, (ratio / quartic) ** 0.25)
    for _ in range(100):
        step = (linear * u + quartic * u**4 - ratio) / (linear + 4.0 * quartic * u**3)
        u -= step
        if step <= 1e-15 * u:
            break
    return math.sqrt((n - 1) * math.expm1(u)) if u < 700.0 else math.inf  # past a float


def _ratio_of_t(t: float, n: int) -> float:
    u = math.log1p(t * t / (n - 1))
    return (n + BARTLETT) * u + TAIL * n * u**4


def _seen_lower(s: Sample, confidence: float) -> float:
    if len(s.values) == 1:
        return s.mean
    t = t_quantile(confidence, s.n - 1)
    target = _ratio_of_t(t, s.n)
    return root_between(
        lambda value: likelihood_ratio(s.values, s.n, value) - target, s.values[0][0], s.mean, _tolerance(s)
    )


def _seen_p(s: Sample, value: float) -> float:
    if value == s.mean:
        return 0.5
    if value > s.mean:
        return 1.0 - _seen_p(s.reflected(), -value)
    return t_sf(_as_t(likelihood_ratio(s.values, s.n, value), s.n), s.n - 1)


def _tolerance(s: Sample) -> float:
    return (s.high - s.low) * 1e-10


# --- the pass/fail lattice -------------------------------------------------------------------


def _lattice_lower(s: Sample, confidence: float, counts: tuple[float, ...]) -> float:
    """The pass/fail methods' bound on the items per lattice point (``s.up`` or ``s.down``)."""
    if len(counts) == 2:  # a pass rate: Clopper-Pearson's bound
        passed = counts[1]
        if passed <= 0:
            return s.low
        return s.low + (s.high - s.low) * beta_quantile(1.0 - confidence, passed, s.n - passed + 1.0)
    # Tango's bound; the exact sign test decides on which side of 0 it lies (the tests below
    # 0 reject whenever it rejects no change, those above only when it does too).
    bound = _score_lower(on_lattice(s, counts), confidence)
    return max(bound, 0.0) if _sign(counts) <= 1.0 - confidence else min(bound, 0.0)


def _lattice_p(s: Sample, value: float, counts: tuple[float, ...]) -> float:
    if len(counts) == 2:
        return binomial_tail(counts[1], s.n, (value - s.low) / (s.high - s.low))
    sign = _sign(counts)
    if value == 0.0:
        return sign
    p = _score_p(on_lattice(s, counts), value)
    return min(p, sign) if value < 0.0 else max(p, sign)


def _sign(counts: tuple[float, ...]) -> float:
    """The exact sign test that the differences moved up: fixes against breakages."""
    broke, _, fixed = counts
    return sign_test(fixed, broke)


def on_lattice(s: Sample, counts: tuple[float, ...]) -> Sample:
    """The items per lattice point (``s.up`` or ``s.down``) as a sample: what the pass/fail
    methods read."""
    points = zip(lattice(s.low, s.high), (c / s.n for c in counts), strict=True)
    return population(points, s.n, s.low, s.high)


def null_variance(s: Sample, value: float) -> float:
    """The variance of the items' values under the most likely population whose mean is
    ``value`` (below the sample's mean), on the observed values and the range's lower end: the
    observed values reweighted, w_j = n_j / (n (1 + lam (x_j - value))) (the empirical
    likelihood's tilt), and, when that cannot reach ``value``, a share at ``low`` (items that
    could have broken unseen) with lam at its largest, 1 / (value - low). For pass/fail
    differences (values -1, 0, 1) this is Tango's restricted maximum-likelihood variance."""
    n, low = s.n, s.low
    points = s.values
    largest = 1.0 / (value - low)
    if points[0][0] > low and tilt(points, value, largest)[0] > 0.0:
        weights = [(x, c * (value - low) / (n * (x - low))) for x, c in points]
        at_low = max(0.0, 1.0 - math.fsum(weight for _, weight in weights))
    else:
        lam = tilt_root(points, n, value, largest)
        weights = [(x, c / (n * (1.0 + lam * (x - value)))) for x, c in points]
        at_low = 0.0
    spread = math.fsum(weight * (x - value) ** 2 for x, weight in weights)
    return spread + at_low * (low - value) ** 2


def _statistic(s: Sample, value: float, correction: float) -> float:
    """Tango's score statistic for the mean against ``value`` (below the mean): the distance,
    less ``correction`` items' worth, in standard errors of the most likely population with that
    mean."""
    gap = s.mean - value - correction / s.n
    if gap <= 0.0:
        return 0.0
    variance = null_variance(s, value)
    return math.inf if variance <= 0.0 else gap * math.sqrt(s.n / variance)


def _score_lower(s: Sample, confidence: float, correction: float = CORRECTION) -> float:
    t = t_quantile(confidence, s.n - 1)

    def excess(value: float) -> float:  # positive where the value is rejected; decreasing
        return _statistic(s, value, correction) - t if value > s.low else math.inf

    return root_between(excess, s.low, s.mean, _tolerance(s))


def _score_p(s: Sample, value: float, correction: float = CORRECTION) -> float:
    if value > s.mean:
        return 1.0 - _score_p(s.reflected(), -value, correction)
    if value <= s.low:
        return 0.0 if s.mean > s.low else 1.0
    return t_sf(_statistic(s, value, correction), s.n - 1)


# --- what the spread seen cannot show --------------------------------------------------------


def _unseen_lower(s: Sample, confidence: float) -> float:
    if not s.pass_fail or _on_lattice(s):
        return s.high
    return _score_lower(s, confidence, 0.0)


def _unseen_p(s: Sample, value: float) -> float:
    if not s.pass_fail or _on_lattice(s):
        return 0.0
    return _score_p(s, value, 0.0)


def _on_lattice(s: Sample) -> bool:
    """Whether every value is a lattice point (pass/fail items of one trial each): there the
    lattice methods are exact, and bound what the sample missed."""
    return s.up == s.down


# --- no spread -----------------------------------------------------------------------------


def _floor_lower(s: Sample, confidence: float) -> float:
    t = t_quantile(confidence, s.n - 1)
    share = max(1.0 - t / (s.n * math.sqrt(s.n)), math.pow(1.0 - confidence, 1.0 / s.n))
    return s.low + max(0.0, share) * (s.top - s.low)


def _floor_p(s: Sample, value: float) -> float:
    if value >= s.top:
        return 1.0
    share = (value - s.low) / (s.top - s.low)
    return min(t_sf((1.0 - share) * (s.n * math.sqrt(s.n)), s.n - 1), math.pow(share, s.n))


# --- the bounds, their p-values, the intervals ----------------------------------------------


# A bound and a p-value are pure functions of a (hashable) sample, and each takes several
# root-findings: pass/fail samples of a few items recur often (each distinct one is a handful of
# counts), across a session's experiments and metrics and across benchmarks/gates.py's reruns.
@lru_cache(maxsize=4096)
def lower_bound(s: Sample, confidence: float = LEVEL) -> float:
    """The one-sided lower confidence bound on the mean: the lowest of the three methods' (the
    module's docstring); one item bounds nothing."""
    _alpha(confidence)
    if s.n < 2:
        return s.low
    seen = max(_seen_lower(s, confidence), _lattice_lower(s, confidence, s.down))
    return min(
        seen, _lattice_lower(s, confidence, s.up), _floor_lower(s, confidence), _unseen_lower(s, confidence)
    )


def upper_bound(s: Sample, confidence: float = LEVEL) -> float:
    """The one-sided upper confidence bound on the mean (the reflection's lower bound)."""
    return -lower_bound(s.reflected(), confidence)


@lru_cache(maxsize=4096)
def p_above(s: Sample, value: float) -> float:
    """One-sided p-value for "the mean is above ``value``" (against: it is at most ``value``):
    at most a exactly when ``lower_bound(s, 1 - a)`` is above ``value``."""
    if s.n < 2:
        return 1.0
    if value <= s.low:  # a mean at most the range's end: every item there
        return 0.0 if s.top > s.low else 1.0
    seen = min(_seen_p(s, value), _lattice_p(s, value, s.down))
    return max(seen, _lattice_p(s, value, s.up), _floor_p(s, value), _unseen_p(s, value))


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
    return interval(item_sample(items), level)


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
    return interval(sample(rates, pass_fail=True), level)
