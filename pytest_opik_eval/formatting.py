"""How numbers are written for people, in one place: every report and gate line shows a score,
a change or a rate the same way."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
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


# A cost below a dollar shows this many significant digits ($0.0021, $0.000081); from a dollar up,
# cents. Shown beside other costs (a baseline, a bound, a budget), it shows as many more decimals as
# their difference needs for _CHANGE_DIGITS of its own: two costs that differ never read alike,
# and a change is never bigger than the two figures it is between seem to allow.
_COST_DIGITS = 3
_CHANGE_DIGITS = 2
_PLAIN_DIGITS = 6  # a machine's copy: as precise as the store's sums need
_MAX_DECIMALS = 12  # past a trillionth of a dollar, a difference is the sum's rounding


def dollars(cost: float | None, *, against: Iterable[float | None] = ()) -> str:
    """A cost in USD, with the digits that matter: cents from a dollar up (``$12.35``), three
    significant digits below (``$0.0021``, ``$0.000081``), and, beside the costs ``against`` it is
    compared with, enough decimals to show how it differs from each (``$12.3451 -> $12.3459``)."""
    if cost is None:
        return MISSING
    decimals = _decimals(cost, _COST_DIGITS, least=2)
    for other in against:
        if other is not None and other != cost:
            decimals = max(decimals, _decimals(cost - other, _CHANGE_DIGITS, least=2))
    digits = _fixed(abs(cost), decimals, 2)
    sign = "-" if cost < 0 and digits.strip("0.,") else ""
    return f"{sign}${digits}"


def ago(days: float) -> str:
    """An age as people say it, in its largest whole unit: ``3 days ago``, ``1 hour ago``; under
    a minute (or a clock behind the other), ``just now``."""
    seconds = days * 86400
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size:
            count = int(seconds // size)
            return f"{count} {unit}{'s' if count != 1 else ''} ago"
    return "just now"


def plain_number(value: float | None) -> str:
    """A number for a machine to read (a JUnit property): six significant digits, never an
    exponent nor a separator (``0.000081``, ``12.3457``, ``2.5``); "" for None."""
    if value is None:
        return ""
    digits = _fixed(abs(value), _decimals(value, _PLAIN_DIGITS), 0, separators=False)
    return f"-{digits}" if value < 0 and digits.strip("0.") else digits


def _fixed(value: float, decimals: int, least: int, *, separators: bool = True) -> str:
    """``value`` with ``decimals`` decimals, less the zeros that end them past ``least``: the
    zeros a difference asked for say nothing ("$0.50", "2.5 s", not "$0.500", "2.500 s")."""
    text = f"{value:{',' if separators else ''}.{decimals}f}"
    if decimals > least:
        text = text[: len(text) - (decimals - least)] + text[len(text) - (decimals - least) :].rstrip("0")
        text = text.rstrip(".")
    return text


def _decimals(value: float, digits: int, least: int = 0) -> int:
    """The decimals that show ``digits`` significant digits of ``value``, at least ``least``."""
    magnitude = abs(value)
    if magnitude == 0 or not math.isfinite(magnitude):
        return least
    return min(max(least, digits - 1 - math.floor(math.log10(magnitude))), _MAX_DECIMALS)


def budget_amount(amount: float, unit: str, *, against: Iterable[float] = ()) -> str:
    """A budget or a spend in its unit ("usd" or "tokens"): ``$5.00``, ``$0.003``,
    ``200,000 tokens``; in USD, as precise as ``dollars`` beside the amounts ``against`` it."""
    if unit == "tokens":
        return f"{math.floor(amount + 0.5):,} tokens"
    return dollars(amount, against=against)


def duration(seconds: float | None, *, against: Iterable[float | None] = ()) -> str:
    """A latency: milliseconds below a second (``120 ms``), else seconds (``2.5 s``); beside the
    latencies ``against`` it, enough decimals to show how it differs from each."""
    if seconds is None:
        return MISSING
    scale, unit = (1000, "ms") if abs(seconds) < 1 else (1, "s")
    least = decimals = 1 if unit == "s" and abs(seconds) < 100 else 0
    for other in against:
        if other is not None and other != seconds:
            decimals = max(decimals, _decimals((seconds - other) * scale, _CHANGE_DIGITS))
    return f"{_fixed(seconds * scale, decimals, least)} {unit}"


# The baseline comparison's cost, token and latency figures (higher is worse for each), by key.
FIGURE_LABELS = {
    "cost_per_item": "cost per item",
    "tokens_per_item": "tokens per item",
    "latency_p50": "latency p50",
    "latency_p95": "latency p95",
}


def figure(
    name: str, value: float | None, *, sign: bool = False, against: Iterable[float | None] = ()
) -> str:
    """A figure of the baseline comparison in its unit: dollars, tokens or a duration, as precise
    as the figures ``against`` it need to read apart; with ``sign``, a change (``+$0.001``,
    ``-120 ms``), ``against`` then compared by size."""
    if value is None:
        return MISSING
    if sign:
        sizes = [abs(other) for other in against if other is not None]
        return ("+" if value >= 0 else "-") + figure(name, abs(value), against=sizes)
    if name.startswith("cost"):
        return dollars(value, against=against)
    if name.startswith("latency"):
        return duration(value, against=against)
    whole = value == round(value)
    least = decimals = 0 if whole else 1
    for other in against:
        # Two whole counts differ by a whole count, which no decimal makes clearer.
        if other is not None and other != value and not (whole and other == round(other)):
            decimals = max(decimals, _decimals(value - other, _CHANGE_DIGITS))
    return _fixed(value, decimals, least)


def figure_row(
    name: str, baseline: float | None, current: float | None, delta: float | None
) -> tuple[str, str, str]:
    """A figure in the baseline and now, and its change, written together: the two figures as
    precise as their difference needs to show ("$0.000243 -> $0.00018", never "$0.0002 ->
    $0.0002"), the change with two significant digits at least (its difference from nothing)."""
    both = (baseline, current)
    return (
        figure(name, baseline, against=both),
        figure(name, current, against=both),
        figure(name, delta, sign=True, against=(0.0,)),
    )


def direction(delta: float | None, relative: float | None) -> str:
    """How a figure moved, for a figure where up is worse: ``+25%, worse``; a change below 1%
    with two significant digits (``+0.049%``), never ``+0%``."""
    if delta is None:
        return ""
    word = "worse" if delta > 0 else "better" if delta < 0 else "no change"
    if relative is None or delta == 0:
        return word
    if abs(relative) >= 0.01:
        return f"{relative:+.0%}, {word}"
    return f"{relative * 100:+.{_decimals(relative * 100, _CHANGE_DIGITS)}f}%, {word}"


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
