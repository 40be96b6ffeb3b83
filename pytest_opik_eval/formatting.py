"""How numbers are written for people, in one place: every report and gate line shows a score,
a change or a rate the same way."""

from __future__ import annotations

MISSING = "-"  # no value: no completed trial, or no baseline


def score(value: float | None, width: int = 0) -> str:
    """A score, a mean or a bound: three decimals (``0.875``), right-aligned in ``width``."""
    return f"{MISSING if value is None else f'{value:.3f}':>{width}}"


def signed(value: float | None) -> str:
    """A change against the baseline, with its sign (``+0.050``, ``-0.125``)."""
    return MISSING if value is None else f"{value:+.3f}"


def percent(value: float | None) -> str:
    """A rate as a percentage (``87.5%``)."""
    return MISSING if value is None else f"{value:.1%}"


def seconds(value: float) -> str:
    """A duration: milliseconds under a second (``120 ms``), else seconds (``2.4 s``)."""
    if value < 1:
        return f"{value * 1000:.0f} ms"
    return f"{value:.1f} s" if value < 100 else f"{value:,.0f} s"


def dollars(cost: float) -> str:
    """A cost in USD: four decimals under a dollar (``$0.0123``), a floor for a tiny one."""
    if cost >= 1:
        return f"${cost:,.2f}"
    if 0 < cost < 0.00005:
        return "<$0.0001"
    return f"${cost:.4f}"
