"""The distributions the gates' statistics read: the standard normal's quantile, Student's t
(its upper tail and quantile), the beta distribution (its cdf, the regularized incomplete beta
function, and quantile), the binomial's upper tail and the exact sign test. Standard library
only: the quantiles a bound needs, to about 1e-13, with no scipy."""

from __future__ import annotations

import math
from functools import lru_cache
from statistics import NormalDist


def normal_quantile(p: float) -> float:
    """The standard normal quantile: the z with P(Z <= z) = p, for p in (0, 1)."""
    return NormalDist().inv_cdf(p)


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


def beta_quantile(p: float, a: float, b: float) -> float:
    """The x with I_x(a, b) = p (the Beta(a, b) quantile), by bisection: 60 halvings."""
    low, high = 0.0, 1.0
    for _ in range(60):
        middle = (low + high) / 2.0
        if beta_cdf(middle, a, b) < p:
            low = middle
        else:
            high = middle
    return (low + high) / 2.0


def binomial_tail(successes: float, n: float, p: float) -> float:
    """P(X >= successes) for X ~ Binomial(n, p) (1.0 for no successes)."""
    if successes <= 0:
        return 1.0
    return beta_cdf(p, successes, n - successes + 1.0)


def sign_test(against: float, other: float) -> float:
    """The exact sign test: if each of ``against + other`` items were as likely to move either
    way, the chance that at least ``against`` of them move the way ``against`` counts (1.0 when
    none moved). For pass/fail items with one trial, the exact one-sided McNemar test; summed in
    integers up to ``_EXACT`` items (1/32 is 0.03125, not a float's neighbour of it)."""
    moved = against + other
    if against <= 0:
        return 1.0
    if moved <= _EXACT and against == int(against) and other == int(other):
        total = sum(math.comb(int(moved), k) for k in range(int(against), int(moved) + 1))
        return total / (1 << int(moved))
    return binomial_tail(against, moved, 0.5)


_EXACT = 1000
