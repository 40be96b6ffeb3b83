"""What a span reports it used, checked before anything sums or prices it: a token count is a
whole number >= 0 (a float one counts as its whole part, as the Opik SDK reads it), a cost a
finite number >= 0, in US dollars.

Anything else (a negative count or cost, text, NaN, an infinity, a bool) is the app's data, and
wrong: summed, a negative cost would lower the experiment's cost, meet a cost gate and give
budget back; priced, a negative count makes genai-prices raise. So a span that reports one keeps
everything else it reported, loses its usage (every count of it: the others no longer add up) or
its cost, and the trial notices it, naming the span and the field (``rejection``). Every way a
span reaches a trial passes here: the Opik SDK's spans and the manual API's (``span_records.record``),
``trace.usage`` as it is called, and OpenTelemetry's attributes (``otel.span_params``), which
name the field as the app set it.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_opik_eval.escaping import shorten

# The key of a span's parameters that carries what was rejected before they reached the trial
# (by ``trace.usage``, or an OpenTelemetry span's conversion), named as the app gave it.
REJECTED = "__pytest_opik_eval_rejected__"

_VALUE_CHARS = 40


def count(value: Any) -> int | None:
    """``value`` as a token count, or None if it is none."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        whole = int(value)
        return whole if whole >= 0 else None
    amount = cost(value)
    return None if amount is None else int(amount)


def cost(value: Any) -> float | None:
    """``value`` as a cost in US dollars, or None if it is none."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):  # numpy's numbers are Real
        return None
    amount = float(value)
    return amount if math.isfinite(amount) and amount >= 0 else None


def field(name: str, value: Any) -> str:
    """A rejected field, as a notice names it: ``prompt_tokens=-500``."""
    return f"{name}={shorten(repr(value), _VALUE_CHARS)}"


def checked_usage(usage: Mapping[str, Any]) -> tuple[dict[str, int] | None, str | None]:
    """A usage in Opik's flat names (a manual span's, one given to ``add_span``) as counts, or
    None and the first field that is not one."""
    counts: dict[str, int] = {}
    for name, value in usage.items():
        counted = count(value)
        if counted is None:
            return None, field(str(name), value)
        counts[str(name)] = counted
    return counts or None, None


def raw_usage_problem(usage: Any, prefix: str = "") -> str | None:
    """The first bad field of a usage as the Opik SDK was given it (a provider's usage, nested:
    ``prompt_tokens_details.cached_tokens``), before the SDK drops what it cannot read: a
    negative or non-finite number anywhere, or a field named for tokens that holds no count.
    Other fields may hold text (Anthropic's ``service_tier``)."""
    if isinstance(usage, Mapping):
        items: Sequence[tuple[Any, Any]] = list(usage.items())
    elif isinstance(usage, list | tuple):
        items = list(enumerate(usage))
    else:
        return None
    for key, value in items:
        name = f"{prefix}{key}"
        if isinstance(value, Mapping | list | tuple):
            found = raw_usage_problem(value, f"{name}.")
            if found is not None:
                return found
        elif value is None:
            continue
        elif "token" in str(key).lower() or (isinstance(value, numbers.Real) and not isinstance(value, bool)):
            if count(value) is None:
                return field(name, value)
    return None


def rejection(span: str | None, usage: str | None, cost: str | None) -> str:
    """The notice for a span whose usage (its first bad field) or cost was rejected."""
    what = " and ".join(problem for problem in (usage, cost) if problem)
    lost = "usage and cost" if usage and cost else "usage" if usage else "cost"
    return (
        f"span {shorten(span or '', _VALUE_CHARS)!r} reported {what}, not a number >= 0: its {lost} "
        "ignored (never counted in the tokens, the cost, the gates or the budget; the rest of the span "
        "is kept)"
    )
