"""The spans an app makes during a trial with the Opik SDK (``@opik.track`` and the integrations
built on it: ``track_openai``, ``track_anthropic``, the LangChain ``OpikTracer``...), recorded
with the trial rather than sent to a server.

Each attempt gets a :class:`TrialTrace`, which is at once the trial's trace and the client the
SDK sends its finished spans to. Inside the task call (inside the coroutine, for an ``async def``
task: pytest-asyncio runs it in a context it copied before our hooks run), the trace
("evaluation_task", id = the attempt id) and the task span are pushed with the SDK's
``context_storage``, and the trace is set as the context-wise client with
``opik.set_global_client(trace, context_wise=True)``, as ``opik.evaluate()``'s engine sets its
own. ``@track`` then nests the app's spans under the task span, and ``get_global_client()``
returns this trace, so they reach it in memory: no network, no threads, no other trial's spans.
That is the layout of ``opik.evaluate()`` (trace "evaluation_task", the task span, the app's
spans under it).

Both are context variables: code the task runs in its own thread (a bare ``threading.Thread``,
``ThreadPoolExecutor.submit``) starts with an empty context, so its spans open traces of their
own on the user's client, as with ``opik.evaluate()``. ``asyncio`` tasks, ``asyncio.to_thread``
and ``contextvars.copy_context().run`` carry the context, and nest.

The SDK is imported only by an app: when ``opik`` is not in ``sys.modules``, a trial makes no
trace at all, and costs nothing more. Never imported here at the top.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import logging
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime, timezone
from typing import Any, TypeVar, cast

from pytest_opik_eval.collect.datasets.loading import nested_too_deep
from pytest_opik_eval.escaping import shorten
from pytest_opik_eval.ids import uuid7
from pytest_opik_eval.run import pricing
from pytest_opik_eval.store.records import SpanRecord

TRACE_NAME = "evaluation_task"  # as opik.evaluate() names an item's trace
# As opik.evaluate() lays out the scoring: one span for it, tagged as the SDK's own (the Opik UI
# folds such spans), and one span per metric under it.
METRICS_SPAN = "metrics_calculation"
INTERNAL_TAG = "__opik_eval_internal__"
# A span's input, output or metadata as stored is at most this many characters of JSON; a bigger
# one is kept as its JSON text, cut (an app may pass whole documents to a tracked function).
MAX_FIELD_CHARS = 20_000
_TRACEBACK_CHARS = 4_000

_Function = TypeVar("_Function", bound=Callable[..., Any])

_logger = logging.getLogger(__name__)
# As a task output is stored: a value JSON cannot hold is kept as its repr.
_json = json.JSONEncoder(ensure_ascii=False, default=repr).encode


class _ClientConfig:
    # @track asks before it starts a span; False: spans are sent once, when they end.
    log_start_trace_span = False


class _Sent:
    """What the client returns for a trace it was given: ``OpikTracer`` checks there is one."""

    def __init__(self, id: str | None) -> None:
        self.id = id


def start(
    attempt_id: str, name: str, task_input: Mapping[str, Any], item: Mapping[str, Any]
) -> TrialTrace | None:
    """The trace of one attempt, or None when the app does not use the Opik SDK (not imported)."""
    if "opik" not in sys.modules:
        return None
    return TrialTrace(attempt_id, name, task_input, item)


class TrialTrace:
    """One attempt's trace, and the Opik client (its surface that ``@track`` and the integrations
    use) that keeps the spans of that trace, in memory, until the trial closes it."""

    config = _ClientConfig()

    def __init__(
        self, attempt_id: str, name: str, task_input: Mapping[str, Any], item: Mapping[str, Any]
    ) -> None:
        self.trace_id = attempt_id
        self.task_span_id = uuid7()
        self.name = name
        self.task_input = task_input
        self.item = item
        self.start_time = datetime.now(timezone.utc)
        self.end_time: datetime | None = None
        self.error: dict[str, str] | None = None
        self._lock = threading.Lock()
        self._spans: list[dict[str, Any]] = []
        self._own: list[SpanRecord] = []  # the scoring spans, made here
        self._metrics_span_id: str | None = None
        self._closed = False
        self.late = 0  # spans that ended after the trial closed (a stream consumed later)
        self.foreign = 0  # spans of another trace sent through this client

    # -- the client surface ---------------------------------------------------------------

    def __internal_api__span__(self, **params: Any) -> None:
        with self._lock:
            if self._closed:
                self.late += 1
            elif params.get("trace_id") != self.trace_id:
                self.foreign += 1
            else:
                self._spans.append(params)

    def __internal_api__trace__(self, **params: Any) -> _Sent:
        # The trial's own trace is never ended by the SDK (we pushed it); a trace another one
        # started inside the task (an explicit opik.start_as_current_trace) is not kept.
        return _Sent(params.get("id"))

    def flush(self, timeout: int | None = None) -> bool:
        return True

    # -- the trial's side -----------------------------------------------------------------

    @contextlib.contextmanager
    def entered(self) -> Iterator[None]:
        """The trace and the task span pushed, and this trace the context-wise client, around
        the task call; the context as it was afterwards."""
        from opik.api_objects.span import SpanData

        task = SpanData(
            trace_id=self.trace_id,
            id=self.task_span_id,
            start_time=self.start_time,
            name=self.name,
            input=dict(self.task_input),
        )
        try:
            with self._pushed(task):
                yield
        except BaseException as error:
            self.error = _error_info(error)
            raise
        finally:
            self.end_time = datetime.now(timezone.utc)

    @contextlib.contextmanager
    def scoring(self) -> Iterator[None]:
        """The "metrics_calculation" span pushed under the trace (beside the task span, as
        ``opik.evaluate()`` has it) around the scoring loop; see ``metric``."""
        from opik.api_objects.span import SpanData

        span = SpanData(
            trace_id=self.trace_id,
            id=uuid7(),
            start_time=datetime.now(timezone.utc),
            name=METRICS_SPAN,
            tags=[INTERNAL_TAG],
        )
        self._metrics_span_id = span.id
        error: dict[str, str] | None = None
        try:
            with self._pushed(span):
                yield
        except BaseException as raised:
            error = _error_info(raised)
            raise
        finally:
            self._metrics_span_id = None
            self._keep(span, None, error)

    @contextlib.contextmanager
    def metric(self, name: str, kwargs: Mapping[str, Any]) -> Iterator[MetricSpan]:
        """One metric's span, under "metrics_calculation", around its ``score`` call: a judge's
        own ``@opik.track`` or ``track_openai`` calls nest under it. Its input is the score's
        arguments; its output, set by the caller, the score(s)."""
        from opik import context_storage
        from opik.api_objects.span import SpanData

        span = SpanData(
            trace_id=self.trace_id,
            id=uuid7(),
            parent_span_id=self._metrics_span_id,
            start_time=datetime.now(timezone.utc),
            name=name,
            input=dict(kwargs),
        )
        result = MetricSpan()
        error: dict[str, str] | None = None
        context_storage.add_span_data(span)
        try:
            yield result
        except BaseException as raised:
            error = _error_info(raised)
            raise
        finally:
            # Popped before it is finished (see OpikContextStorage.pop_span_data); by id, so a
            # metric that left a span of its own on the stack cannot pop the scoring span.
            context_storage.pop_span_data(ensure_id=span.id)
            self._keep(span, result.output, error or result.error)

    @contextlib.contextmanager
    def _pushed(self, span: Any) -> Iterator[None]:
        """``span`` on top of the SDK's span stack, the trace set, and this trace the
        context-wise client; the context as it was afterwards."""
        import opik
        from opik import context_storage
        from opik.api_objects import opik_client
        from opik.api_objects.trace import TraceData

        trace = TraceData(
            id=self.trace_id,
            start_time=self.start_time,
            name=TRACE_NAME,
            input=dict(self.item),
            created_by="evaluation",
        )
        previous = opik_client.get_current_client_raw()
        opik.set_global_client(cast(opik.Opik, self), context_wise=True)
        try:
            with context_storage.temporary_context(span, trace):
                yield
        finally:
            # Back to what it was (None, most often: the global client then applies again).
            opik.set_global_client(cast(opik.Opik, previous), context_wise=True)

    def _keep(self, span: Any, output: Any, error: dict[str, str] | None) -> None:
        """A span this trace made itself (scoring, a metric), finished now."""
        record = _record(
            {
                **span.as_parameters,
                "end_time": datetime.now(timezone.utc),
                "output": output,
                "error_info": error,
            }
        )
        with self._lock:
            if not self._closed:
                self._own.append(record)

    def close(self) -> list[SpanRecord]:
        """The trial is over: the task span, the app's spans, the scoring spans and those of the
        metrics (a judge's), as records; none when the SDK made no span (the app and the
        metrics emitted nothing: our own spans alone say nothing the attempt does not). A span
        that ends after this is counted in ``late`` and dropped."""
        with self._lock:
            self._closed = True
            spans, self._spans = self._spans, []
            own, self._own = self._own, []
        if not spans:
            return []
        task = SpanRecord(
            id=self.task_span_id,
            trace_id=self.trace_id,
            name=self.name,
            start_time=self.start_time.isoformat(),
            end_time=(self.end_time or datetime.now(timezone.utc)).isoformat(),
            input=_bounded(self.task_input),
            # The task's output is the trial's output, stored with it: not stored twice.
            error=self.error,
        )
        # Priced here, at the trial's end, so the store keeps the cost (see run/pricing.py).
        records = pricing.priced([*own, *(_record(params) for params in spans)])
        records.sort(key=lambda span: span.start_time or "")
        return [task, *records]


class MetricSpan:
    """What the scorer sets on a metric's span: the score(s) it returned, or what went wrong."""

    output: Any = None
    error: dict[str, str] | None = None


def traced(function: _Function, trace: TrialTrace | None) -> _Function:
    """``function`` (the task), entering ``trace`` when called: inside the coroutine for an
    ``async def`` task, where the event loop's task runs it."""
    if trace is None:
        return function
    if inspect.iscoroutinefunction(function):

        @functools.wraps(function)
        async def in_trace_async(*args: Any, **kwargs: Any) -> Any:
            with trace.entered():
                return await function(*args, **kwargs)

        return cast(_Function, in_trace_async)

    @functools.wraps(function)
    def in_trace(*args: Any, **kwargs: Any) -> Any:
        with trace.entered():
            return function(*args, **kwargs)

    return cast(_Function, in_trace)


def _record(params: Mapping[str, Any]) -> SpanRecord:
    """A span as the SDK handed it to its client (``SpanData.as_parameters``), as a record."""
    from opik.api_objects import validation_helpers

    provider = params.get("provider")
    provider = None if provider is None else str(getattr(provider, "value", provider))
    try:
        # What the SDK sends: the provider's own usage (or an OpikUsage) made flat, in Opik's names.
        usage = validation_helpers.validate_and_parse_usage(params.get("usage"), _logger, provider)
    except Exception:  # an app's odd usage object must not fail its trial
        usage = None
    cost = params.get("total_cost")
    cost = (
        float(cost) if isinstance(cost, int | float) and cost == cost and abs(cost) != float("inf") else None
    )
    error = params.get("error_info")
    return SpanRecord(
        id=str(params["id"]),
        trace_id=str(params["trace_id"]),
        parent_span_id=params.get("parent_span_id"),
        name=_text(params.get("name")),
        type=str(params.get("type") or "general"),
        start_time=_time(params.get("start_time")),
        end_time=_time(params.get("end_time")),
        input=_bounded(params.get("input")),
        output=_bounded(params.get("output")),
        metadata=_bounded(params.get("metadata")),
        tags=[str(tag) for tag in params.get("tags") or []] or None,
        model=_text(params.get("model")),
        provider=provider,
        usage=usage or None,
        total_cost=cost,
        cost=cost,
        cost_source=None if cost is None else "span",
        error={str(k): shorten(str(v), _TRACEBACK_CHARS) for k, v in error.items()}
        if isinstance(error, Mapping)
        else None,
    )


def _bounded(value: Any) -> Any:
    """``value`` as JSON data (what JSON cannot hold as its repr), or its JSON text cut to
    ``MAX_FIELD_CHARS`` when longer."""
    if value is None:
        return None
    if nested_too_deep(value):  # or contains itself: json would recurse or raise
        return shorten(repr(value), MAX_FIELD_CHARS)
    try:
        text = _json(value)
    except (TypeError, ValueError):  # a key JSON cannot hold
        return shorten(repr(value), MAX_FIELD_CHARS)
    if len(text) > MAX_FIELD_CHARS:
        return shorten(text, MAX_FIELD_CHARS)
    # NaN and the infinities, written by json as bare tokens, are read back as their repr.
    return json.loads(text, parse_constant=lambda constant: repr(float(constant)))


def _time(value: Any) -> str | None:
    if isinstance(value, datetime):
        return (
            (value if value.tzinfo else value.replace(tzinfo=timezone.utc))
            .astimezone(timezone.utc)
            .isoformat()
        )
    return None if value is None else str(value)


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _error_info(error: BaseException) -> dict[str, str]:
    return {"exception_type": type(error).__name__, "message": shorten(str(error), _TRACEBACK_CHARS)}
