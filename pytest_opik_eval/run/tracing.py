"""The spans of a trial: those an app makes with the Opik SDK (``@opik.track`` and the
integrations built on it: ``track_openai``, ``track_anthropic``, the LangChain ``OpikTracer``...),
with an OpenTelemetry span processor (``TrialTrace.add_span``), or by hand (``trace``, the
``eval_trace`` fixture), recorded with the trial rather than sent to a server.

Each attempt of a store that records spans gets a :class:`TrialTrace`, which is at once the
trial's trace and the client the SDK sends its finished spans to. :func:`current` returns it
wherever the trial's task or scoring runs: a context variable of our own, set once around the
whole trial where it runs (the task, the output write, the scoring loop), and again inside the
task's own context when that is another one (an ``async def`` task under pytest-asyncio, which
runs it in a context it copied before our hooks ran).

When the Opik SDK is imported (``"opik" in sys.modules`` when the trial starts), the same push
also sets the SDK's context: the trace ("evaluation_task", id = the attempt id) and the task
span with its ``context_storage``, and the trace as the context-wise client with
``opik.set_global_client(trace, context_wise=True)``, as ``opik.evaluate()``'s engine sets its
own. ``@track`` then nests the app's spans under the task span, and ``get_global_client()``
returns this trace, so they reach it in memory: no network, no threads, no other trial's spans.
The scoring span ("metrics_calculation") and one span per metric go on the SDK's span stack
too, so a judge's own ``@track`` calls nest under its metric, as ``opik.evaluate()`` lays them out.

Both are context variables: code the task runs in its own thread (a bare ``threading.Thread``,
``ThreadPoolExecutor.submit``) starts with an empty context, outside the trial, as with
``opik.evaluate()``; ``asyncio`` tasks, ``asyncio.to_thread`` and
``contextvars.copy_context().run`` carry the context, and nest.

Cheap when the app makes no span: the scoring and metric spans are kept as small objects, and
made into records at ``close`` only when the app, a judge or the manual API made a span; the
task span's input is computed then too. The SDK is never imported here at the top.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from datetime import datetime, timezone
from typing import Any, Literal, TypeVar

from pytest_opik_eval.collect.datasets.loading import nested_too_deep
from pytest_opik_eval.escaping import shorten
from pytest_opik_eval.ids import uuid7
from pytest_opik_eval.run import pricing, span_usage
from pytest_opik_eval.run.contexts import within
from pytest_opik_eval.store.records import ScoreRecord, SpanRecord

TRACE_NAME = "evaluation_task"  # as opik.evaluate() names an item's trace
# As opik.evaluate() lays out the scoring: one span for it, tagged as the SDK's own (the Opik UI
# folds such spans), and one span per metric under it.
METRICS_SPAN = "metrics_calculation"
INTERNAL_TAG = "__opik_eval_internal__"
# A span's input, output or metadata as stored is at most this many characters of JSON; a bigger
# one is kept as its JSON text, cut (an app may pass whole documents to a tracked function).
MAX_FIELD_CHARS = 20_000
_TRACEBACK_CHARS = 4_000

SpanType = Literal["general", "llm", "tool", "guardrail"]

_Function = TypeVar("_Function", bound=Callable[..., Any])

_logger = logging.getLogger(__name__)
# As a task output is stored: a value JSON cannot hold is kept as its repr.
_json = json.JSONEncoder(ensure_ascii=False, default=repr).encode

# The trial whose task or scoring runs in this context, and the innermost span of ours open in
# it (None: the task span).
_Frame = tuple["TrialTrace", "Span | None"]
_current: ContextVar[_Frame | None] = ContextVar("pytest_opik_eval_trial", default=None)
_id_lock = threading.Lock()
# Marks the parameters of a span the Opik SDK sent (see TrialTrace.__internal_api__span__).
_FROM_SDK = "__pytest_opik_eval_from_sdk__"  # a span's id is made once, whichever thread asks first


def current() -> TrialTrace | None:
    """The trace of the trial whose task or scoring runs in this context (a ContextVar of our
    own, set around the task call and the scoring loop); None outside a trial."""
    frame = _current.get()
    return None if frame is None else frame[0]


class _ClientConfig:
    # @track asks before it starts a span; False: spans are sent once, when they end.
    log_start_trace_span = False


class _Sent:
    """What the client returns for a trace it was given: ``OpikTracer`` checks there is one."""

    def __init__(self, id: str | None) -> None:
        self.id = id


@functools.cache
def _sdk() -> types.SimpleNamespace:
    """The parts of the Opik SDK a trace pushes and reads (imported by the app already)."""
    import opik
    from opik import context_storage
    from opik.api_objects import opik_client
    from opik.api_objects.span import SpanData
    from opik.api_objects.trace import TraceData

    return types.SimpleNamespace(
        set_client=opik.set_global_client,
        client=opik_client.get_current_client_raw,
        storage=context_storage,
        SpanData=SpanData,
        TraceData=TraceData,
    )


# The modules through which a span can reach a trial: the Opik SDK (``@opik.track``), the
# OpenTelemetry SDK (our processor on the app's provider, or added by hand), and the public
# module of the manual API (the ``eval_trace`` fixture imports it too). A session that has
# imported none of them can make no span: its trials are not traced at all, and pay nothing.
_SPAN_SOURCES = ("opik", "opentelemetry.sdk.trace", "pytest_opik_eval.tracing", "pytest_opik_eval.run.otel")


def start(
    attempt_id: str, name: str, task_input: Callable[[], Mapping[str, Any]], item: Mapping[str, Any]
) -> TrialTrace | None:
    """The trace of one attempt, or None when no span can reach it (see ``_SPAN_SOURCES``: an
    app that imports one of them only inside its first task call is traced from the next
    trial); ``task_input`` gives the task span's input, asked only when the trial has spans to
    store."""
    if not may_trace():
        return None
    return TrialTrace(attempt_id, name, task_input, item)


def may_trace() -> bool:
    """Whether a span can reach a trial now: a module of ``_SPAN_SOURCES`` is imported."""
    modules = sys.modules
    return any(source in modules for source in _SPAN_SOURCES)


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
        trace: TrialTrace | None,
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


class TrialTrace:
    """One attempt's trace, and the Opik client (its surface that ``@track`` and the integrations
    use) that keeps the spans of that trace, in memory, until the trial closes it."""

    config = _ClientConfig()

    def __init__(
        self,
        attempt_id: str,
        name: str,
        task_input: Callable[[], Mapping[str, Any]],
        item: Mapping[str, Any],
    ) -> None:
        self.trace_id = attempt_id
        self.name = name
        self.item = item
        self._task_input = task_input
        self._task_span_id: str | None = None
        self._started = time.time()
        self._task_ended: float | None = None
        self._task_error: dict[str, str] | None = None
        # Whether the app can use the Opik SDK: only then is its context set (see _pushed).
        self.uses_sdk = "opik" in sys.modules
        self._lock = threading.Lock()
        self._spans: list[Mapping[str, Any]] = []  # the app's, the judges', the manual API's
        self._own: list[Span] = []  # the scoring spans, finished
        self._closed = False
        # The notices of spans whose usage or cost was rejected (see span_usage), made at close.
        self.rejected: list[str] = []
        self.late = 0  # spans that ended after the trial closed (a stream consumed later)
        self.foreign = 0  # spans of another trace sent through this client

    @property
    def task_span_id(self) -> str:
        """The task span's id (the root of the app's spans)."""
        if self._task_span_id is None:
            with self._lock:
                if self._task_span_id is None:
                    self._task_span_id = uuid7()
        return self._task_span_id

    def parent_span_id(self) -> str:
        """The id of the innermost span open in this context: the task span while the task
        runs, "metrics_calculation" or a metric's span while scoring, or a span opened with the
        manual API (nested manual spans nest). What a span without a parent of its own
        (an OTel root span, a manual span) hangs under."""
        if self.uses_sdk:
            # An @opik.track span of this trace open here is the innermost: ours are on the
            # SDK's stack too when it is in use (see opened).
            top = _sdk().storage.top_span_data()
            if top is not None and top.trace_id == self.trace_id:
                return str(top.id)
        frame = _current.get()
        if frame is not None and frame[0] is self and frame[1] is not None:
            return frame[1].id
        return self.task_span_id

    def add_span(self, params: Mapping[str, Any]) -> None:
        """One finished span of this trial, in the Opik SDK's parameter names
        (``SpanData.as_parameters``): id (str, unique), trace_id (== ``trace_id``),
        parent_span_id (usually ``parent_span_id()`` captured when the span started), name,
        type ("general" | "llm" | "tool" | "guardrail"), start_time, end_time (tz-aware
        datetimes), input, output, metadata, tags, model, provider, usage (Opik's names:
        prompt_tokens, completion_tokens, total_tokens...), total_cost (USD), error_info.
        Thread-safe. After the trial closed it is counted as late and dropped."""
        with self._lock:
            if self._closed:
                self.late += 1
            elif params.get("trace_id") != self.trace_id:
                self.foreign += 1
            else:
                self._spans.append(params)

    # -- the client surface that @track and the integrations use ---------------------------

    def __internal_api__span__(self, **params: Any) -> None:
        params[_FROM_SDK] = True  # its usage is the provider's own: parsed as the SDK does
        self.add_span(params)

    def __internal_api__trace__(self, **params: Any) -> _Sent:
        # The trial's own trace is never ended by the SDK (we pushed it); a trace another one
        # started inside the task (an explicit opik.start_as_current_trace) is not kept.
        return _Sent(params.get("id"))

    def flush(self, timeout: int | None = None) -> bool:
        return True

    # -- the trial's side -----------------------------------------------------------------

    @contextlib.contextmanager
    def entered(self) -> Iterator[None]:
        """This trace current (and, with the Opik SDK, its context set, the task span on top)
        in this context, around the trial where it runs: the task, when it runs here, and the
        scoring. Once per trial; the context as it was afterwards."""
        token = _current.set((self, None))
        try:
            if self.uses_sdk:
                with self._pushed():
                    yield
            else:
                yield
        finally:
            _current.reset(token)

    @contextlib.contextmanager
    def task(self) -> Iterator[None]:
        """Around the task call, where it runs: its end and error kept for the task span; this
        trace entered first if it is not current in this context (a context copied before the
        trial began, as pytest-asyncio's)."""
        frame = _current.get()
        try:
            if frame is not None and frame[0] is self:
                yield
            else:
                with self.entered():
                    yield
        except BaseException as error:
            self._task_error = _error_info(error)
            raise
        finally:
            self._task_ended = time.time()

    @contextlib.contextmanager
    def scoring(self) -> Iterator[None]:
        """The "metrics_calculation" span (beside the task span, as ``opik.evaluate()`` has it)
        open around the scoring loop; see ``metric``."""
        with self.opened(Span(self, METRICS_SPAN, None, tags=[INTERNAL_TAG])):
            yield

    @contextlib.contextmanager
    def metric(self, name: str, kwargs: Mapping[str, Any]) -> Iterator[Span]:
        """One metric's span, under "metrics_calculation", around its ``score`` call: a judge's
        own ``@opik.track`` or ``track_openai`` calls nest under it. Its input is the score's
        arguments; the caller sets its ``scores`` (its output) or ``error``."""
        frame = _current.get()
        parent = frame[1] if frame is not None and frame[0] is self else None
        span = Span(self, name, None if parent is None else parent.id, input=dict(kwargs))
        with self.opened(span):
            yield span

    def opened(self, span: Span, *, kept: bool = False) -> _Opened:
        """``span`` the innermost in this context (and on the SDK's span stack when in use)
        while the block runs; then finished, and kept with the trial's own spans (``kept``: as
        one of the trial's spans, which make the trial store its spans: a manual one)."""
        return _Opened(self, span, kept)

    def finished(self, span: Span, kept: bool) -> None:
        """``span`` (opened with ``opened``) has ended: kept as ``opened`` says."""
        span.ended = time.time()
        if kept:
            self.add_span(span.params())
        else:
            with self._lock:
                if not self._closed:
                    self._own.append(span)

    @contextlib.contextmanager
    def _pushed(self) -> Iterator[None]:
        """The trace and the task span on the SDK's context, and this trace the context-wise
        client; the context as it was afterwards."""
        sdk = _sdk()
        trace = sdk.TraceData(
            id=self.trace_id,
            start_time=_datetime(self._started),
            name=TRACE_NAME,
            input=self.item,
            created_by="evaluation",
        )
        task = sdk.SpanData(trace_id=self.trace_id, id=self.task_span_id, name=self.name)
        previous = sdk.client()
        sdk.set_client(self, context_wise=True)
        try:
            with sdk.storage.temporary_context(task, trace):
                yield
        finally:
            # Back to what it was (None, most often: the global client then applies again).
            sdk.set_client(previous, context_wise=True)

    def close(self) -> list[SpanRecord]:
        """The trial is over: the task span, the app's spans, the scoring spans and those of the
        metrics (a judge's), as records; none when no span was made (the app, the judges and
        the manual API made none: our own spans alone say nothing the attempt does not). A span
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
            start_time=_time(self._started),
            end_time=_time(self._task_ended if self._task_ended is not None else time.time()),
            input=_bounded(self._task_input()),
            # The task's output is the trial's output, stored with it: not stored twice.
            error=self._task_error,
        )
        # Priced here, at the trial's end, so the store keeps the cost (see run/pricing.py).
        rejected: list[str] = []
        records = pricing.priced(
            [_record(params, rejected) for params in [*(s.params() for s in own), *spans]]
        )
        self.rejected = rejected
        records.sort(key=lambda span: span.start_time or "")
        return [task, *records]


class _Opened:
    """See ``TrialTrace.opened``: a class rather than a generator, as every manual span opens
    one (a generator-based context manager costs several microseconds more)."""

    __slots__ = ("trace", "span", "kept", "_token", "_sdk_span")

    def __init__(self, trace: TrialTrace, span: Span, kept: bool) -> None:
        self.trace = trace
        self.span = span
        self.kept = kept
        self._sdk_span: Any = None

    def __enter__(self) -> Span:
        trace, span = self.trace, self.span
        self._token = _current.set((trace, span))
        if trace.uses_sdk and _pushed_here(trace):
            self._sdk_span = _sdk().SpanData(
                trace_id=trace.trace_id, id=span.id, parent_span_id=span.parent, name=span.name
            )
            _sdk().storage.add_span_data(self._sdk_span)
        return span

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: Any) -> None:
        span = self.span
        if error is not None:
            span.error = span.error or _error_info(error)
        if self._sdk_span is not None:
            # Popped before it is finished (see OpikContextStorage.pop_span_data); by id, so a
            # metric that left a span of its own on the stack cannot pop ours.
            _sdk().storage.pop_span_data(ensure_id=self._sdk_span.id)
        _current.reset(self._token)
        self.trace.finished(span, self.kept)


class EvalTrace:
    """Spans and usage recorded by hand, for an app that uses neither the Opik SDK nor
    OpenTelemetry: the ``eval_trace`` fixture, and the same object as
    ``from pytest_opik_eval.tracing import trace`` for the app's own code.

    Spans attach to the trial whose task or scoring runs in the calling context (threads started
    with a copy of it, ``asyncio`` tasks and ``asyncio.to_thread`` carry it), under the innermost
    span open there: the task span, a metric's span, or a span opened here (they nest).

    Outside a trial (a test not marked ``eval``, a run without ``--eval``, a bare thread the task
    started, the app used on its own) every call is a harmless no-op: ``span`` still runs its
    block, and nothing is recorded.
    """

    def span(
        self,
        name: str,
        *,
        type: SpanType = "general",
        input: Any = None,
        metadata: Mapping[str, Any] | None = None,
        tags: Sequence[str] | None = None,
    ) -> contextlib.AbstractContextManager[Span]:
        """A span around the ``with`` block, under the innermost span open here; set its
        ``output`` (and ``model``, ``usage``...) on the :class:`Span` it gives. An exception that
        leaves the block is recorded on the span, and propagates."""
        trace = current()
        if trace is None:
            return contextlib.nullcontext(Span(None, name, None, input=input, type=type))
        span = Span(
            trace,
            name,
            trace.parent_span_id(),
            input=input,
            type=type,
            tags=None if tags is None else list(tags),
            manual=True,
        )
        span.metadata = None if metadata is None else dict(metadata)
        return trace.opened(span, kept=True)

    def usage(
        self,
        *,
        model: str,
        input_tokens: int,
        output_tokens: int,
        cost: float | None = None,
        provider: str | None = None,
    ) -> None:
        """An LLM call's usage: on the innermost span opened with ``span`` here (added to what it
        has), or else as a new "llm" span named after the model. ``cost`` in USD; None: priced
        from the price table (the ``cost`` extra) when the trial ends."""
        trace = current()
        if trace is None:
            return
        frame = _current.get()
        span = frame[1] if frame is not None else None
        if span is None or not span.manual or (trace.uses_sdk and trace.parent_span_id() != span.id):
            # No span of ours is the innermost here (an @opik.track span may be): one of its own.
            call = Span(trace, model, trace.parent_span_id(), type="llm", manual=True)
            call.ended = call.started
            _add_usage(call, model, provider, input_tokens, output_tokens, cost)
            trace.add_span(call.params())
            return
        _add_usage(span, model, provider, input_tokens, output_tokens, cost)


def _add_usage(
    span: Span, model: str, provider: str | None, input_tokens: int, output_tokens: int, cost: float | None
) -> None:
    """``trace.usage`` on ``span``: a count or a cost that is none (see span_usage) is not added,
    and the span notes it, named as the app gave it."""
    span.model = model
    span.provider = provider if provider is not None else span.provider
    given = {"input_tokens": input_tokens, "output_tokens": output_tokens}
    bad = next((span_usage.field(k, v) for k, v in given.items() if span_usage.count(v) is None), None)
    bad_cost = None if cost is None or span_usage.cost(cost) is not None else span_usage.field("cost", cost)
    if bad or bad_cost:
        span.rejected = [*(span.rejected or []), span_usage.rejection(span.name, bad, bad_cost)]
    usage = dict(span.usage or {})
    added = {"prompt_tokens": input_tokens, "completion_tokens": output_tokens}
    # A bad count the app set on the span itself is left as it is, for the trial's end to reject.
    if bad is None and all(span_usage.count(usage.get(key, 0)) is not None for key in added):
        for key, tokens in added.items():
            usage[key] = int(usage.get(key, 0)) + int(tokens)
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        span.usage = usage
    if cost is not None and bad_cost is None and span_usage.cost(span.total_cost or 0.0) is not None:
        span.total_cost = (span.total_cost or 0.0) + float(cost)


trace = EvalTrace()


def _pushed_here(trace: TrialTrace) -> bool:
    """Whether ``trace`` is the SDK's current trace in this context (see ``TrialTrace._pushed``)."""
    data = _sdk().storage.get_trace_data()
    return data is not None and data.id == trace.trace_id


def traced(function: _Function, trace: TrialTrace | None) -> _Function:
    """``function`` (the task), in ``trace.task()`` when called (see ``contexts.within``)."""
    return function if trace is None else within(function, trace.task)


def _record(params: Mapping[str, Any], rejected: list[str]) -> SpanRecord:
    """A span as the SDK handed it to its client (``SpanData.as_parameters``), as a record; the
    notice of a usage or cost it reported that is none (see ``span_usage``), in ``rejected``."""
    provider = params.get("provider")
    provider = None if provider is None else str(getattr(provider, "value", provider))
    usage, bad_usage = _usage(params.get("usage"), provider, sdk=bool(params.get(_FROM_SDK)))
    given_cost = params.get("total_cost")
    cost = None if given_cost is None else span_usage.cost(given_cost)
    bad_cost = None if given_cost is None or cost is not None else span_usage.field("total_cost", given_cost)
    if bad_usage or bad_cost:
        rejected.append(span_usage.rejection(_text(params.get("name")), bad_usage, bad_cost))
    rejected += params.get(span_usage.REJECTED) or ()
    error = params.get("error_info")
    return SpanRecord(
        id=str(params["id"]),
        trace_id=str(params["trace_id"]),
        parent_span_id=_text(params.get("parent_span_id")),
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
        usage=usage,
        total_cost=cost,
        cost=cost,
        cost_source=None if cost is None else "span",
        error={str(k): shorten(str(v), _TRACEBACK_CHARS) for k, v in error.items()}
        if isinstance(error, Mapping)
        else None,
    )


def _usage(usage: Any, provider: str | None, *, sdk: bool) -> tuple[dict[str, int] | None, str | None]:
    """A span's usage in Opik's flat names: from the SDK (``sdk``), the provider's own usage
    or an OpikUsage, made flat as the SDK sends it; from ``add_span`` (a span processor, the
    manual API), in Opik's names already. Or None, and the first field that is no count (see
    ``span_usage``)."""
    if usage is None:
        return None, None
    if not sdk:
        if isinstance(usage, Mapping):
            return span_usage.checked_usage(usage)
        return None, span_usage.field("usage", usage)
    # Checked before the SDK reads it: the SDK drops a count it cannot read, without a word.
    problem = span_usage.raw_usage_problem(usage)
    if problem is not None:
        return None, problem
    from opik.api_objects import validation_helpers

    try:
        parsed = validation_helpers.validate_and_parse_usage(usage, _logger, provider)
    except Exception:  # an app's odd usage object must not fail its trial
        return None, span_usage.field("usage", usage)
    # A provider's usage object (not a mapping) is checked once the SDK made it flat.
    return span_usage.checked_usage(parsed or {})


def _bounded(value: Any) -> Any:
    """``value`` as JSON data (what JSON cannot hold as its repr), or its JSON text cut to
    ``MAX_FIELD_CHARS`` when longer."""
    if value is None:
        return None
    kind = type(value)
    # What most spans hold, kept as it is (a copy): a short text, a number, a flat dict of those.
    if kind is str:
        return value if len(value) <= MAX_FIELD_CHARS else shorten(value, MAX_FIELD_CHARS)
    if kind is int or kind is bool or (kind is float and value - value == 0):
        return value
    if kind is dict and len(value) <= 16 and _flat(value):
        return dict(value)
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


def _flat(value: dict[Any, Any]) -> bool:
    """A dict of string keys and short texts, integers, finite floats and booleans: JSON as it is."""
    for key, inner in value.items():
        kind = type(inner)
        if type(key) is not str or not (
            (kind is str and len(inner) <= 1_000)
            or kind is int
            or kind is bool
            or inner is None
            or (kind is float and inner - inner == 0)
        ):
            return False
    return True


def _datetime(stamp: float) -> datetime:
    return datetime.fromtimestamp(stamp, timezone.utc)


def _time(value: Any) -> str | None:
    """A span's time as ISO 8601 text in UTC: from a datetime (the SDK's, a span processor's),
    or seconds since the epoch (our own spans')."""
    if type(value) is float:
        return datetime.fromtimestamp(value, timezone.utc).isoformat()
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
