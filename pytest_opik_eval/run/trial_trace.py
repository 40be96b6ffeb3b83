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
task span's input is computed then too. The SDK is reached through ``_compat_opik`` alone, and
never imported here.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from contextvars import ContextVar
from datetime import datetime, timezone
from typing import Any, TypeVar

from pytest_opik_eval._compat_opik import (
    FROM_SDK,
    OpikClient,
    is_current_trace,
    pop_span,
    push_span,
    pushed,
    span_tree,
    top_span_id,
)
from pytest_opik_eval.ids import uuid7
from pytest_opik_eval.metrics.tool_calls import METRICS_SPAN
from pytest_opik_eval.run import pricing
from pytest_opik_eval.run.bounded import bounded
from pytest_opik_eval.run.call_context import within
from pytest_opik_eval.run.span import Span
from pytest_opik_eval.run.span_records import error_info, record, span_time
from pytest_opik_eval.store.records import SpanRecord

TRACE_NAME = "evaluation_task"  # as opik.evaluate() names an item's trace
# As opik.evaluate() lays out the scoring: one span for it (METRICS_SPAN), tagged as the SDK's own
# (the Opik UI folds such spans), and one span per metric under it.
INTERNAL_TAG = "__opik_eval_internal__"

_Function = TypeVar("_Function", bound=Callable[..., Any])

# The trial whose task or scoring runs in this context, and the innermost span of ours open in
# it (None: the task span).
Frame = tuple["TrialTrace", "Span | None"]
_current: ContextVar[Frame | None] = ContextVar("pytest_opik_eval_trial", default=None)


def current() -> TrialTrace | None:
    """The trace of the trial whose task or scoring runs in this context (a ContextVar of our
    own, set around the task call and the scoring loop); None outside a trial."""
    frame = _current.get()
    return None if frame is None else frame[0]


def current_frame() -> Frame | None:
    """The trace of the trial running in this context and its innermost span of ours (None:
    the task span), or None outside a trial."""
    return _current.get()


# The modules through which a span can reach a trial: the Opik SDK (``@opik.track``), the
# OpenTelemetry SDK (our processor on the app's provider, or added by hand), the public
# module of the manual API (the ``eval_trace`` fixture imports it too), and the recorder's model
# calls (imported only when it makes their spans). A session that has
# imported none of them can make no span: its trials are not traced at all, and pay nothing.
_SPAN_SOURCES = (
    "opik",
    "opentelemetry.sdk.trace",
    "pytest_opik_eval.tracing",
    "pytest_opik_eval.run.otel",
    "pytest_opik_eval.run.conversation",  # a conversation's turns are spans
    "pytest_opik_eval.run.llm_responses",  # the model calls the recorder sees (--eval-llm-spans)
)


# The "source" in the metadata of a span made of a model call's HTTP answer (run/llm_responses.py).
HTTP_SOURCE = "http"


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
    for source in _SPAN_SOURCES:  # a loop, not any() over a generator: asked for every trial
        if source in modules:
            return True
    return False


class TrialTrace(OpikClient):
    """One attempt's trace, and the Opik client (its surface that ``@track`` and the integrations
    use) that keeps the spans of that trace, in memory, until the trial closes it."""

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
        self._claimed: set[Any] = set()  # the HTTP answers' spans the app reported (claim_http_span)
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
            top = top_span_id(self.trace_id)
            if top is not None:
                return top
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
                if params.get(FROM_SDK) and params.get("type") == "llm":
                    self._spans = [span for span in self._spans if not _covers(params, span)]
                self._spans.append(params)

    def claim_http_span(self, parent: str) -> dict[str, Any] | None:
        """The latest span under ``parent`` made of a model call's HTTP answer that no report of
        the app's has claimed, now claimed; or None. ``trace.usage`` after a plain client's call
        reports the call that span already is: counted once."""
        with self._lock:
            for params in reversed(self._spans):
                metadata = params.get("metadata")
                if (
                    isinstance(params, dict)
                    and params.get("parent_span_id") == parent
                    and isinstance(metadata, dict)
                    and metadata.get("source") == HTTP_SOURCE
                    and params.get("id") not in self._claimed
                ):
                    self._claimed.add(params.get("id"))
                    return params
        return None

    def snapshot(self) -> list[Mapping[str, Any]]:
        """The spans the trial has so far (the app's, the manual API's), as ``add_span`` got
        them: taken as the scoring starts, before any metric made one, they are the app's."""
        with self._lock:
            return list(self._spans)

    def task_span(self, output: Mapping[str, Any]) -> Any:
        """The task span and the app's spans under it, as the Opik SDK's ``SpanModel`` tree that
        ``opik.evaluate`` gives a metric as ``task_span`` (its root the task span, with the
        trial's output): for the metrics that name it. Unlike the SDK's (the trace's first span,
        the task's only if the task was tracked), the root is always the task's."""
        root = {
            "id": self.task_span_id,
            "name": self.name,
            "start_time": self._started,
            "end_time": self._task_ended,
            "input": self._task_input(),
            "output": dict(output),
        }
        return span_tree(root, self.snapshot())

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
            self._task_error = error_info(error)
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

    def _pushed(self) -> contextlib.AbstractContextManager[None]:
        """The trace and the task span on the SDK's context, and this trace the context-wise
        client; the context as it was afterwards."""
        started = datetime.fromtimestamp(self._started, timezone.utc)
        return pushed(self, self.trace_id, TRACE_NAME, started, self.item, self.task_span_id, self.name)

    def close(self, batched: Collection[str] = ()) -> list[SpanRecord]:
        """The trial is over: the task span, the app's spans, the scoring spans and those of the
        metrics (a judge's), as records; none when no span was made (the app, the judges and
        the manual API made none: our own spans alone say nothing the attempt does not). A span
        that ends after this is counted in ``late`` and dropped. ``batched``: the spans whose call
        a provider's batch answered, priced at the batch price."""
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
            start_time=span_time(self._started),
            end_time=span_time(self._task_ended if self._task_ended is not None else time.time()),
            input=bounded(self._task_input()),
            # The task's output is the trial's output, stored with it: not stored twice.
            error=self._task_error,
        )
        # Priced here, at the trial's end, so the store keeps the cost (see run/pricing.py).
        rejected: list[str] = []
        records = pricing.priced(
            [record(params, rejected) for params in [*(s.params() for s in own), *spans]], batched
        )
        self.rejected = rejected
        records.sort(key=lambda span: span.start_time or "")
        return [task, *records]


def _covers(sdk: Mapping[str, Any], span: Mapping[str, Any]) -> bool:
    """Whether the SDK's LLM span ``sdk`` is the model call ``span`` was made of (an HTTP
    answer's, see ``run/llm_responses.py``): made while it ran, from the same place, to the
    same provider. An integration that makes its call as the app reads its stream
    (``track_genai``'s ``generate_content_stream``) is no longer open then: without this, the
    call would count twice."""
    metadata = span.get("metadata")
    if not (isinstance(metadata, dict) and metadata.get("source") == HTTP_SOURCE):
        return False
    provider = sdk.get("provider")
    # The SDK's span started, then the call was made and answered, then the SDK's span ended.
    times = [
        moment
        for moment in map(
            _seconds,
            (sdk.get("start_time"), span.get("start_time"), span.get("end_time"), sdk.get("end_time")),
        )
        if moment is not None
    ]
    return (
        span.get("parent_span_id") == sdk.get("parent_span_id")
        and str(getattr(provider, "value", provider)) == span.get("provider")
        and len(times) == 4
        and times == sorted(times)
    )


def _seconds(value: Any) -> float | None:
    """A span's time in seconds since the epoch: ours are, the SDK's are datetimes."""
    if type(value) is float:
        return value
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=timezone.utc)).timestamp()
    return None


class _Opened:
    """See ``TrialTrace.opened``: a class rather than a generator, as every manual span opens
    one (a generator-based context manager costs several microseconds more)."""

    __slots__ = ("trace", "span", "kept", "_token", "_on_sdk_stack")

    def __init__(self, trace: TrialTrace, span: Span, kept: bool) -> None:
        self.trace = trace
        self.span = span
        self.kept = kept
        self._on_sdk_stack = False

    def __enter__(self) -> Span:
        trace, span = self.trace, self.span
        self._token = _current.set((trace, span))
        if trace.uses_sdk and is_current_trace(trace.trace_id):
            push_span(trace.trace_id, span.id, span.parent, span.name)
            self._on_sdk_stack = True
        return span

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: Any) -> None:
        span = self.span
        if error is not None:
            span.error = span.error or error_info(error)
        if self._on_sdk_stack:
            pop_span(span.id)  # before it is finished, as the SDK pops its own
        _current.reset(self._token)
        self.trace.finished(span, self.kept)


def traced(function: _Function, trace: TrialTrace | None) -> _Function:
    """``function`` (the task), in ``trace.task()`` when called (see ``call_context.within``)."""
    return function if trace is None else within(function, trace.task)
