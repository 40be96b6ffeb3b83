"""A rescored trial (``--eval-rescore``, see ``collect/rescore.py``): its task, which returns the
output the original trial stored, and its tool calls, those the original made, read from the
spans its completed attempt stored. A rescore calls no task, so its trial makes no spans of the
app; the metrics that read ``tool_calls``, ``llm_calls`` or ``task_span`` get the original's.

The spans are read where the trials run (a single process, each pytest-xdist worker), each
trial's as it is scored, and only for a test whose metrics read the calls: a rescore of tests
with other metrics reads no span, and the controller hands its workers no span.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pytest_opik_eval._compat_opik import span_tree
from pytest_opik_eval.collect.datasets.loading import fresh_copy
from pytest_opik_eval.collect.trials import Trial
from pytest_opik_eval.run.bounded import MAX_FIELD_CHARS, was_cut

if TYPE_CHECKING:
    from pytest_opik_eval.run.recording import TrialScope
    from pytest_opik_eval.run.trial_trace import TrialTrace
    from pytest_opik_eval.store.records import SpanRecord


# Said once per rescored test whose original trial stored a span of the app with its input or
# output cut (``run.bounded``): the live run's metrics saw it whole, the rescore's see the cut.
CUT_CALLS = (
    "its metrics read the calls of the original trial from the spans it stored, and the store "
    f"kept at most {MAX_FIELD_CHARS:,} characters of a span's input and output: a longer one "
    "was cut, so a metric that compares the calls' arguments or results (ToolCalled(args=...), "
    "ToolArgs, a judge) may score them otherwise than in the run that made them"
)


class StoredOutput:
    """A rescore's task: returns the output the original trial stored, a fresh copy each time (a
    metric may change what it is given); the task itself is not called. ``original``: that
    trial's id, whose stored spans give the calls its metrics read."""

    def __init__(self, output: dict[str, Any], original: str | None = None) -> None:
        self.output = output
        self.original = original

    def __call__(self, trace: TrialTrace | None, scope: TrialScope | None) -> dict[str, Any]:
        return fresh_copy(self.output)


def stored_task(trial: Trial) -> StoredOutput | None:
    """The task that stands for a rescored trial's, or None for a trial whose task runs."""
    return None if trial.stored_output is None else StoredOutput(trial.stored_output, trial.original)


class OriginalTrace:
    """The spans the original trial stored, seen as the trial's own trace is by the scoring
    (``run.scoring.SpanSource``): the app's spans, and the task span they hang under."""

    def __init__(self, spans: Sequence[SpanRecord]) -> None:
        """``spans``: the attempt's, its task span first (as the store keeps them)."""
        self._root = spans[0] if spans else None
        self._spans = _under(spans[0].id, spans) if spans else []

    def snapshot(self) -> list[SpanRecord]:
        """The app's spans, those under the task span: neither the task span itself nor the
        original's scoring spans (its judges' calls), which sit beside it."""
        return self._spans

    def cut(self) -> bool:
        """Whether the input or output of one of the app's spans was cut as it was stored."""
        return any(was_cut(span.input) or was_cut(span.output) for span in self._spans)

    def task_span(self, output: Mapping[str, Any]) -> Any:
        """The Opik SDK's ``SpanModel`` tree, as ``TrialTrace.task_span`` makes it live: the
        stored task span, with the trial's output (not stored twice), and the app's spans."""
        if self._root is None:
            return None
        root = {**vars(self._root), "output": dict(output)}
        return span_tree(root, [vars(span) for span in self._spans])


# A store's reader of a trial's stored spans, by trial id (``store.base.span_reader``).
SpanReader = Callable[[str], list["SpanRecord"]]


def calls_source(task: object, read: SpanReader | None, computes: bool) -> OriginalTrace | None:
    """Where a trial's calls are read, if not from its own trace: for a rescored trial (``task``
    a ``StoredOutput``) whose scoring ``computes`` them, the trace its original stored, read now
    (each trial's own, one indexed read: an experiment's are never all held at once)."""
    if not computes or not isinstance(task, StoredOutput) or task.original is None:
        return None
    return OriginalTrace([] if read is None else read(task.original))


def cut_advice(original: OriginalTrace | None) -> list[str]:
    """What to tell the user of a rescored trial's calls (``original``, see ``calls_source``):
    that some were cut as they were stored."""
    return [CUT_CALLS] if original is not None and original.cut() else []


def _under(root_id: str, spans: Sequence[SpanRecord]) -> list[SpanRecord]:
    """The spans below ``root_id``, at any depth, in their stored order."""
    children: dict[str | None, list[str]] = {}
    for span in spans:
        children.setdefault(span.parent_span_id, []).append(span.id)
    below: set[str] = set()
    todo = list(children.get(root_id, ()))
    while todo:
        span_id = todo.pop()
        if span_id not in below:  # a cycle, which a well-formed trace never has, ends here
            below.add(span_id)
            todo.extend(children.get(span_id, ()))
    return [span for span in spans if span.id in below]
