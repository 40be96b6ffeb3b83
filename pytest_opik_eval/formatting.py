"""How numbers are written for people, in one place: every report and gate line shows a score,
a change or a rate the same way."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

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


def level(value: float) -> str:
    """A confidence level as a percentage (``95%``, ``97.5%``)."""
    return f"{value * 100:g}%"


class Bounded(Protocol):
    @property
    def low(self) -> float: ...

    @property
    def high(self) -> float: ...


def bounds(interval: Bounded | None, show: Callable[[float | None], str] = score) -> str:
    """An interval's ends (``[0.583, 0.917]``; a change's with ``signed``), or ``-`` without one."""
    return MISSING if interval is None else f"[{show(interval.low)}, {show(interval.high)}]"
