"""A span of ours, open in a trial: the scoring's, a metric's, or one opened by hand
(``trace.span``). Kept as a small object while it runs, and made into the Opik SDK's span
parameters (``params``) only if the trial stores its spans."""

from __future__ import annotations

import threading
import time
from typing import Any, Protocol

from pytest_opik_eval.ids import uuid7
from pytest_opik_eval.run import span_usage
from pytest_opik_eval.store.records import ScoreRecord

_id_lock = threading.Lock()  # a span's id is made once, whichever thread asks first


class Trace(Protocol):
    """What a span reads of the trial's trace it belongs to."""

    @property
    def trace_id(self) -> str: ...


class Span:
    """A span opened with :meth:`EvalTrace.span` (or by the trial itself: the scoring, a
    metric's). Set what it should record before the ``with`` block ends: ``output``,
    ``metadata``, ``model``, ``provider``, ``usage`` (Opik's names: ``prompt_tokens``,
    ``completion_tokens``, ``total_tokens``), ``total_cost`` (USD; left None, a span with a
    model and tokens is priced from the price table). Outside a trial it records nothing."""

    __slots__ = (
        "trace",
        "manual",
        "name",
        "type",
        "parent",
        "started",
        "ended",
        "input",
        "output",
        "scores",
        "metadata",
        "tags",
        "model",
        "provider",
        "usage",
        "total_cost",
        "error",
        "rejected",
        "_id",
    )

    def __init__(
        self,
        trace: Trace | None,
        name: str,
        parent: str | None,
        *,
        input: Any = None,
        type: str = "general",
        tags: list[str] | None = None,
        manual: bool = False,
    ) -> None:
        self.trace = trace  # None: outside a trial, recorded nowhere
        self.manual = manual
        self.name = name
        self.type = type
        self.parent = parent  # its parent span's id; None: under the trace
        self.started = time.time()
        self.ended: float | None = None
        self.input = input
        self.output: Any = None
        self.scores: list[ScoreRecord] | None = None  # a metric's: its output, made at close
        self.metadata: dict[str, Any] | None = None
        self.tags = tags
        self.model: str | None = None
        self.provider: str | None = None
        self.usage: dict[str, int] | None = None
        self.total_cost: float | None = None
        self.error: dict[str, str] | None = None
        self.rejected: list[str] | None = None  # what ``trace.usage`` refused (see span_usage)
        self._id: str | None = None

    @property
    def id(self) -> str:
        """Made when first asked for: a span nobody nests under and that is never stored needs none."""
        if self._id is None:
            with _id_lock:
                if self._id is None:
                    self._id = uuid7()
        return self._id

    def params(self) -> dict[str, Any]:
        """As the Opik SDK hands a finished span to its client (``SpanData.as_parameters``), its
        times as seconds since the epoch."""
        output = self.output
        if self.scores is not None:
            # As @opik.track shows a tracked score()'s output.
            shown = [r.model_dump(exclude_none=True) for r in self.scores]
            output = {"output": shown[0] if len(shown) == 1 else shown}
        params = {
            "id": self.id,
            "trace_id": None if self.trace is None else self.trace.trace_id,
            "parent_span_id": self.parent,
            "name": self.name,
            "type": self.type,
            # Seconds since the epoch, as time.time() gave them: _time makes them text directly.
            "start_time": self.started,
            "end_time": self.ended if self.ended is not None else time.time(),
            "input": self.input,
            "output": output,
            "metadata": self.metadata,
            "tags": self.tags,
            "model": self.model,
            "provider": self.provider,
            "usage": self.usage,
            "total_cost": self.total_cost,
            "error_info": self.error,
        }
        if self.rejected:
            params[span_usage.REJECTED] = self.rejected
        return params
