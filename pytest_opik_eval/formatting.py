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
