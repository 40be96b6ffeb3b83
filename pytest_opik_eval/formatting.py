"""How numbers are written for people, in one place: every report and gate line shows a score,
a change or a rate the same way."""

from __future__ import annotations

import math
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


def dollars(cost: float | None) -> str:
    """A cost in USD: cents from a dollar up (``$12.35``), else four decimals (``$0.0021``)."""
    if cost is None:
        return MISSING
    if abs(cost) >= 1:
        return f"${cost:,.2f}"
    if 0 < abs(cost) < 0.00005:
        return "<$0.0001"
    return f"${cost:.4f}"


def budget_amount(amount: float, unit: str) -> str:
    """A budget or a spend in its unit ("usd" or "tokens"): ``$5.00``, ``$0.0030``,
    ``200,000 tokens``."""
    if unit == "tokens":
        return f"{math.floor(amount + 0.5):,} tokens"
    if amount >= 1 or amount == 0:
        return f"${amount:,.2f}"
    return f"${amount:.4f}"


def duration(seconds: float | None) -> str:
    """A latency: milliseconds below a second (``120 ms``), else seconds (``2.5 s``)."""
    if seconds is None:
        return MISSING
    if abs(seconds) < 1:
        return f"{seconds * 1000:.0f} ms"
    return f"{seconds:.1f} s" if abs(seconds) < 100 else f"{seconds:,.0f} s"


# The baseline comparison's cost, token and latency figures (higher is worse for each), by key.
FIGURE_LABELS = {
    "cost_per_item": "cost per item",
    "tokens_per_item": "tokens per item",
    "latency_p50": "latency p50",
    "latency_p95": "latency p95",
}


def figure(name: str, value: float | None, *, sign: bool = False) -> str:
    """A figure of the baseline comparison in its unit: dollars, tokens or a duration; with
    ``sign``, a change (``+$0.0010``, ``-120 ms``)."""
    if value is None:
        return MISSING
    prefix = ("+" if value >= 0 else "-") if sign else ""
    shown = abs(value) if sign else value
    if name.startswith("cost"):
        return prefix + dollars(shown)
    if name.startswith("latency"):
        return prefix + duration(shown)
    return prefix + (f"{shown:,.0f}" if shown == round(shown) else f"{shown:,.1f}")


def direction(delta: float | None, relative: float | None) -> str:
    """How a figure moved, for a figure where up is worse: ``+25%, worse``."""
    if delta is None:
        return ""
    word = "worse" if delta > 0 else "better" if delta < 0 else "no change"
    return word if relative is None or delta == 0 else f"{relative:+.0%}, {word}"


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
