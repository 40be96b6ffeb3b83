"""What the HTML report embeds as JSON for its script: each item's row with its trials, the
A/B rows of a baseline comparison, and the span trees of as many trials as fit in
``SPAN_BUDGET`` characters (the failed trials first), each input and output cut to
``SPAN_FIELD_CHARS``; JSON that no text can break out of its script element.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pytest_opik_eval.escaping import shorten
from pytest_opik_eval.formatting import dollars
from pytest_opik_eval.reports.span_tree import span_seconds, walk
from pytest_opik_eval.store.records import SpanRecord
from pytest_opik_eval.verdict.model import ExperimentReport, Report

if TYPE_CHECKING:
    from pytest_opik_eval.store.base import Store
    from pytest_opik_eval.verdict.results import ExperimentResult

# experiment id -> that experiment's dataset items (dicts with "id", "input", "expected_output", ...)
Items = Mapping[str, Sequence[Mapping[str, Any]]]
# experiment id -> each of its trials' spans, in the order of the report's trials
Spans = Mapping[str, Sequence[Sequence[SpanRecord]]]

SPAN_BUDGET = 4_000_000  # characters of span trees embedded in one report
SPAN_FIELD_CHARS = 2_000  # characters of a span's input, output or error embedded


def spans_of(store: Store, results: Sequence[ExperimentResult]) -> Spans:
    """Each experiment's trials' spans, in the order of its result's trials: read for the report
    alone, since the verdict reads the trials without them (their usage is summed in the store)."""
    spans: dict[str, list[list[SpanRecord]]] = {}
    for result in results:
        read = {t.id: t.spans for t in store.trials(result.id, spans=True)}
        spans[result.id] = [read.get(t.id, t.spans) for t in result.trials]
    return spans


def experiment_data(
    experiment: ExperimentReport,
    items: Sequence[Mapping[str, Any]],
    spans: Sequence[Sequence[SpanRecord]],
    trees: Mapping[int, list[dict[str, Any]]],
) -> dict[str, Any]:
    """What the script needs for the item rows. Scores are ``[name, value, reason, failed]``
    lists rather than objects (with two metrics per trial that saves a quarter of the file), and
    the score's metadata fifth when it has any. A trial with spans has its trace id, and its
    span tree (see ``_span_tree``) or the count of spans left out."""
    fields = {str(item["id"]): {k: v for k, v in item.items() if k != "id"} for item in items}
    trials: dict[str, list[dict[str, Any]]] = {}
    for index, t in enumerate(experiment.trials):
        trial: dict[str, Any] = {
            "trial": t.trial,
            "status": t.status,
            "passed": t.passed,
            "output": t.output,
            **({"softFailed": True} if t.soft_failed else {}),
            "scores": [
                [s.name, s.value, s.reason, s.scoring_failed, *([s.metadata] if s.metadata else [])]
                for s in t.scores
            ],
        }
        if t.latency is not None and t.latency.task_seconds is not None:
            trial["seconds"] = t.latency.task_seconds
        app = t.usage.app if t.usage is not None else None
        if app is not None:
            # The cost written here, as every report writes a cost (formatting.dollars).
            cost = None if app.cost is None else dollars(app.cost)
            trial["usage"] = [app.prompt_tokens, app.completion_tokens, cost]
        trial_spans = spans[index] if index < len(spans) else ()
        if trial_spans:
            trial["trace"] = trial_spans[0].trace_id
            if index in trees:
                trial["spans"] = trees[index]
            else:
                trial["spansLeftOut"] = len(trial_spans)
        trials.setdefault(t.dataset_item_id, []).append(trial)
    return {
        "id": experiment.id,
        "metrics": list(experiment.summary.metrics),
        "ab": _ab_data(experiment),
        "items": [
            {
                "id": v.dataset_item_id,
                "verdict": v.verdict,
                "passed": v.passed,
                "trials": trials.get(v.dataset_item_id, []),
                "data": fields.get(v.dataset_item_id),
            }
            for v in experiment.items
        ],
    }


def span_trees(report: Report, spans: Spans) -> dict[str, dict[int, list[dict[str, Any]]]]:
    """The span trees embedded, by experiment id and trial index: the failed trials' first, then
    the others in plan order, until the next would pass ``SPAN_BUDGET``."""
    order = [
        (e.id, index)
        for e in report.experiments
        for index, t in enumerate(e.trials)
        if index < len(spans.get(e.id, ())) and spans[e.id][index]
    ]
    failed = {(e.id, i) for e in report.experiments for i, t in enumerate(e.trials) if t.passed is False}
    order.sort(key=lambda key: key not in failed)  # stable: plan order within each group
    trees: dict[str, dict[int, list[dict[str, Any]]]] = {}
    left = SPAN_BUDGET
    for experiment_id, index in order:
        tree = _span_tree(spans[experiment_id][index])
        left -= len(script_json(tree))
        if left < 0:
            break
        trees.setdefault(experiment_id, {})[index] = tree
    return trees


def _span_tree(spans: Sequence[SpanRecord]) -> list[dict[str, Any]]:
    """The spans depth first, each with its depth (``d``): name, type, seconds, model, tokens
    ``[in, out]``, cost (written, as every report writes it), why it has no cost, input, output,
    error; short keys, as there may be thousands of them, and only those the span has."""
    tree = []
    for depth, span in walk(spans):
        node: dict[str, Any] = {"d": depth, "n": span.name or "(unnamed)", "t": span.type}
        took = span_seconds(span)
        optional = {
            "s": took,
            "m": span.model,
            "u": [span.prompt_tokens or 0, span.completion_tokens or 0] if span.usage is not None else None,
            "c": None if span.cost is None else dollars(span.cost),
            "x": span.unpriced if span.cost is None else None,
            "i": _field(span.input),
            "o": _field(span.output),
            "e": _field(span.error),
        }
        node.update((key, value) for key, value in optional.items() if value is not None)
        tree.append(node)
    return tree


def _field(value: Any) -> Any:
    """``value`` as embedded: as it is when short, else its JSON text cut to ``SPAN_FIELD_CHARS``."""
    if value is None:
        return None
    text = value if isinstance(value, str) else json.dumps(_jsonable(value), ensure_ascii=False, default=str)
    if len(text) <= SPAN_FIELD_CHARS:
        return value
    return shorten(text, SPAN_FIELD_CHARS)


def _ab_data(experiment: ExperimentReport) -> dict[str, Any] | None:
    """The A/B rows: ``[id, baseline verdict, current verdict, flip, [change per metric]]`` lists,
    in the comparison's order (worst change first), a missing change as null."""
    b = experiment.baseline
    if b is None or not b.items:
        return None
    metrics = list(b.metrics) or sorted({name for i in b.items for name in i.changes})
    return {
        "metrics": metrics,
        "items": [
            [i.dataset_item_id, i.baseline, i.current, i.flip, [i.changes.get(m) for m in metrics]]
            for i in b.items
        ],
    }


def script_json(data: Any) -> str:
    """JSON that is safe inside a script element: no ``<`` at all, so no item text can close the
    element (``</script>``) or open an HTML comment (``<!--``) that changes where it ends."""
    return json.dumps(_jsonable(data), separators=(",", ":"), ensure_ascii=False, default=str).replace(
        "<", "\\u003c"
    )


def _jsonable(value: Any) -> Any:
    """Python writes NaN and Infinity, which JSON.parse rejects (a task output may hold them):
    spell them as strings; the rest is left to ``json.dumps``."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, Mapping):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value
