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
# Levels of a text tree drawn as such: a deeper span's line is indented as one at this depth.
_DRAWN = 24


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
    control characters escaped. Linear in the number of spans at any depth: below ``_DRAWN``
    levels, a line stops drawing the levels above it and says how many it leaves out."""
    walked = walk(spans)
    lines = []
    # guides[k]: what the spans under the ancestor at depth k + 1 draw at its level: a line when
    # a sibling of that ancestor follows ("│  "), else blank.
    guides: list[str] = []
    for (depth, span), last in zip(walked, _last_siblings(walked), strict=True):
        prefix = _indent(guides, depth - 1) if depth else ""
        branch = ("└─ " if last else "├─ ") if depth else ""
        lines.append(escape_control(prefix + branch + span_line(span)))
        if span.error:
            under = prefix + ("   " if depth == 0 or last else "│  ")
            error = f"{span.error.get('exception_type', 'error')}: {span.error.get('message', '')}"
            lines.append(under + "  error: " + escape_control(shorten(error, _ERROR)))
        if depth:
            del guides[depth - 1 :]
            guides.append("   " if last else "│  ")
    return lines


def _last_siblings(walked: Sequence[tuple[int, SpanRecord]]) -> list[bool]:
    """Whether each span of a depth-first walk is the last child of its parent (no span follows
    it at its depth before a shallower one), in one pass from the end."""
    last = [True] * len(walked)
    # later[d]: whether, past the current span, a span at depth d comes before any shallower one.
    later: list[bool] = []
    for index in range(len(walked) - 1, -1, -1):
        depth = walked[index][0]
        if depth < len(later):
            last[index] = not later[depth]
            del later[depth:]
        else:
            later += [False] * (depth - len(later))
        later.append(True)
    return last


def _indent(guides: Sequence[str], levels: int) -> str:
    """The guides of a span's ``levels`` ancestors below the root: the first ``_DRAWN``, then
    how many more there are (a tree 5,000 spans deep would otherwise print 37 MB of guides)."""
    if levels <= _DRAWN:
        return "".join(guides[:levels])
    hidden = levels - _DRAWN
    return "".join(guides[:_DRAWN]) + f"[+{hidden} level{'' if hidden == 1 else 's'}] "


def _cut(text: str) -> str:
    return text if len(text) <= _NAME else text[: _NAME - 1] + "~"
