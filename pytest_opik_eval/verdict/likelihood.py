"""The empirical likelihood's mechanics (Owen's), on weighted points (value, items): the tilt
that reweights them to a given mean, its root, the likelihood ratio, and the root finder the
bounds invert their tests with."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence


def tilt(points: Sequence[tuple[float, float]], value: float, lam: float) -> tuple[float, float]:
    """The tilted weights' mean of (x - value), times n, and its derivative in lam (negative:
    the mean decreases as lam grows)."""
    total, slope = 0.0, 0.0
    for x, count in points:
        shifted = x - value
        denominator = 1.0 + lam * shifted
        if denominator <= 0.0:
            return -math.inf, -math.inf
        total += count * shifted / denominator
        slope -= count * shifted * shifted / (denominator * denominator)
    return total, slope


def tilt_root(points: Sequence[tuple[float, float]], n: float, value: float, largest: float) -> float:
    """The lam in [0, largest) where the tilted mean is ``value``: Newton's steps, kept inside a
    bracket that bisection narrows when a step would leave it."""
    lo, hi, lam = 0.0, largest, 0.0
    for _ in range(200):
        total, slope = tilt(points, value, lam)
        if total > 0.0:
            lo = lam
        else:
            hi = lam
        if abs(total) <= 1e-12 * n or hi - lo <= 1e-15 * largest:
            break
        step = lam - total / slope if math.isfinite(slope) and slope < 0.0 else math.nan
        lam = step if lo < step < hi else (lo + hi) / 2.0
    return lam


def likelihood_ratio(points: Sequence[tuple[float, float]], n: float, value: float) -> float:
    """-2 log of the empirical likelihood ratio of mean ``value`` (below the points' mean) over
    ``points`` (value, items) of ``n`` items in all: how far they must be reweighted to have
    that mean (infinite below the lowest)."""
    bottom = points[0][0]
    if value <= bottom:
        return math.inf
    lam = tilt_root(points, n, value, 1.0 / (value - bottom))
    return 2.0 * math.fsum(count * math.log1p(lam * (x - value)) for x, count in points)


def root_between(f: Callable[[float], float], lo: float, hi: float, tolerance: float) -> float:
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
