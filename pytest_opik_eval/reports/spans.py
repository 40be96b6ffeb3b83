"""A trial's spans as a tree, for the HTML report and ``opik-eval show``: each span under its
parent, siblings in the order they started, with its latency, tokens, model and cost."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from pytest_opik_eval.escaping import escape_control, shorten
from pytest_opik_eval.formatting import dollars, duration
from pytest_opik_eval.store.records import SpanRecord

_NAME = 60  # characters of a span's name or model shown in a text line
_ERROR = 300  # characters of an error's message shown in a text line


def span_seconds(span: SpanRecord) -> float | None:
    """The span's wall time, from its start and end (None when either is missing or unreadable)."""
    if span.start_time is None or span.end_time is None:
        return None
    try:
        start = datetime.fromisoformat(span.start_time.replace("Z", "+00:00"))
        end = datetime.fromisoformat(span.end_time.replace("Z", "+00:00"))
        return max(0.0, (end - start).total_seconds())
    except (ValueError, TypeError):  # a naive time against an aware one, or not a time at all
        return None


def walk(spans: Sequence[SpanRecord]) -> list[tuple[int, SpanRecord]]:
    """Every span once, depth first, with its depth: the roots (the task span, the
    ``metrics_calculation`` span, and any span whose parent is not among them) at 0, each span's
    children under it in the order they started (then as recorded)."""
    ids = {span.id for span in spans}
    children: dict[str | None, list[SpanRecord]] = {}
    for span in spans:
        parent = (
            span.parent_span_id if span.parent_span_id in ids and span.parent_span_id != span.id else None
        )
        children.setdefault(parent, []).append(span)
    for siblings in children.values():
        siblings.sort(key=lambda span: span.start_time or "")  # ISO times in UTC sort as text; stable
    ordered: list[tuple[int, SpanRecord]] = []
    seen: set[str] = set()
    stack = [(0, span) for span in reversed(children.get(None, []))]
    while stack:
        depth, span = stack.pop()
        if span.id in seen:
            continue
        seen.add(span.id)
        ordered.append((depth, span))
        stack += [(depth + 1, child) for child in reversed(children.get(span.id, []))]
    # A cycle of parents (which a well-formed trace never has) leaves its spans unreached: show
    # them as roots rather than lose them.
    ordered += [(0, span) for span in spans if span.id not in seen]
    return ordered


def span_line(span: SpanRecord) -> str:
    """Name, type, duration, model, tokens and cost, as far as the span has them (unescaped)."""
    parts = [_cut(span.name or "(unnamed)"), span.type]
    took = span_seconds(span)
    if took is not None:
        parts.append(duration(took))
    if span.model:
        parts.append(_cut(span.model))
    if span.usage is not None:
        parts.append(f"tokens {span.prompt_tokens or 0:,} in / {span.completion_tokens or 0:,} out")
    if span.cost is not None:
        parts.append(dollars(span.cost) + (" (price table)" if span.cost_source == "price table" else ""))
    elif span.unpriced:
        parts.append(f"cost unknown: {span.unpriced}")
    return "  ".join(parts)


def tree_lines(spans: Sequence[SpanRecord]) -> list[str]:
    """The spans as an indented text tree, a line per span and one under a span for its error,
    control characters escaped."""
    walked = walk(spans)
    lines = []
    # Whether a span is the last child of its parent decides its branch, and whether the
    # spans under it continue the parent's line.
    for index, (depth, span) in enumerate(walked):
        prefix = "".join("   " if _last(walked, index, level) else "│  " for level in range(1, depth))
        branch = ("└─ " if _last(walked, index, depth) else "├─ ") if depth else ""
        lines.append(escape_control(prefix + branch + span_line(span)))
        if span.error:
            under = prefix + ("   " if depth == 0 or _last(walked, index, depth) else "│  ")
            error = f"{span.error.get('exception_type', 'error')}: {span.error.get('message', '')}"
            lines.append(under + "  error: " + escape_control(shorten(error, _ERROR)))
    return lines


def _last(walked: list[tuple[int, SpanRecord]], index: int, level: int) -> bool:
    """Whether the ancestor at ``level`` of the span at ``index`` (or the span itself, at its own
    depth) has no later sibling: no span after it at that depth before one shallower."""
    for depth, _ in walked[index + 1 :]:
        if depth < level:
            return True
        if depth == level:
            return False
    return True


def _cut(text: str) -> str:
    return text if len(text) <= _NAME else text[: _NAME - 1] + "~"
