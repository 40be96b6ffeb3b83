"""The spans an app makes with OpenTelemetry (by hand, or through instrumentations that follow
the GenAI semantic conventions, such as OpenLLMetry, or OpenInference's), recorded with the
trial whose task or scoring started them: the optional extra ``pytest-opik-eval[otel]``.

:class:`SpanProcessor` only reads spans: the app's exporters still get every span, and a span
started outside a trial is left alone. At ``on_start``, which OpenTelemetry calls in the context
that starts the span, it remembers the trial (``trial_trace.current()``) and the span's parent there:
the span of the same trial its OpenTelemetry parent was recorded as, else the innermost span of
the trial open in that context (the task span, a metric's span, an ``@opik.track`` span). At
``on_end``, which may run in another thread or after the context is gone, it converts the span
to the Opik SDK's span parameters (type, model, provider, usage in Opik's names, input, output,
error, the other attributes as metadata) and hands it to that trial.

It is added to the global SDK ``TracerProvider`` on its own, once the app has set one
(``add_to_global_provider``, called as each trial starts); a provider the app keeps to itself
takes one line: ``provider.add_span_processor(SpanProcessor())``. Imported only when the app has
imported OpenTelemetry's SDK: a session without it pays nothing.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import weakref
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from typing import Any

from opentelemetry import trace as trace_api
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, TracerProvider
from opentelemetry.sdk.trace import SpanProcessor as _SdkSpanProcessor
from opentelemetry.trace import StatusCode

from pytest_opik_eval._compat_opik import top_span_id
from pytest_opik_eval.ids import uuid7
from pytest_opik_eval.metrics.tool_calls import TOOL_CALL_ID
from pytest_opik_eval.run import span_usage, trial_trace

_logger = logging.getLogger(__name__)

# The attributes read, first found wins: the GenAI semantic conventions (current, then older
# names), OpenInference's, OpenLLMetry's own.
_MODEL = ("gen_ai.response.model", "gen_ai.request.model", "llm.model_name")
_PROVIDER = ("gen_ai.provider.name", "gen_ai.system", "llm.provider", "llm.system")
_USAGE = {
    "prompt_tokens": ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens", "llm.token_count.prompt"),
    "completion_tokens": (
        "gen_ai.usage.output_tokens",
        "gen_ai.usage.completion_tokens",
        "llm.token_count.completion",
    ),
    "total_tokens": ("gen_ai.usage.total_tokens", "llm.usage.total_tokens", "llm.token_count.total"),
    "cache_read_input_tokens": (
        "gen_ai.usage.cache_read.input_tokens",
        "gen_ai.usage.cache_read_input_tokens",
        "llm.token_count.prompt_details.cache_read",
    ),
    "cache_creation_input_tokens": (
        "gen_ai.usage.cache_creation.input_tokens",
        "gen_ai.usage.cache_creation_input_tokens",
        "llm.token_count.prompt_details.cache_write",
    ),
}
_COST = ("llm.cost.total", "gen_ai.usage.cost")
# Whole messages, as one value (JSON text, most often); then messages spread over indexed
# attributes ("gen_ai.prompt.0.role", "llm.input_messages.0.message.content").
_INPUT = ("input.value", "gen_ai.input.messages", "gen_ai.prompt")
_OUTPUT = ("output.value", "gen_ai.output.messages", "gen_ai.completion")
_INPUT_INDEXED = ("gen_ai.prompt.", "llm.input_messages.")
_OUTPUT_INDEXED = ("gen_ai.completion.", "llm.output_messages.")
# The older GenAI conventions put messages in events, one per message.
_INPUT_EVENTS = (
    "gen_ai.system.message",
    "gen_ai.user.message",
    "gen_ai.assistant.message",
    "gen_ai.tool.message",
)
_OUTPUT_EVENT = "gen_ai.choice"
_LLM_OPERATIONS = {"chat", "text_completion", "generate_content", "embeddings"}
# A tool span's tool, call and result: the GenAI conventions' (``execute_tool`` spans), then
# OpenInference's and OpenLLMetry's. Read at conversion, once, so that the trajectory metrics
# (metrics/tool_calls.py) read every tool span alike: the span named after its tool, its
# arguments as input, its result as output, its call id in the metadata.
_TOOL_NAME = ("gen_ai.tool.name", "tool.name", "traceloop.entity.name")
_TOOL_INPUT = ("gen_ai.tool.call.arguments", "traceloop.entity.input")
_TOOL_OUTPUT = ("gen_ai.tool.call.result", "traceloop.entity.output")
# The semantic conventions' provider names that Opik names otherwise (opik.types.LLMProvider).
_PROVIDERS = {"aws.bedrock": "bedrock", "gcp.vertex_ai": "google_vertexai", "gcp.gemini": "google_ai"}
# Attributes kept as metadata: the rest of a span's, at most this many (an app may set hundreds).
MAX_METADATA_KEYS = 64


class _Claim:
    """An OpenTelemetry span taken for a trial: its id there, its parent's, and the processor
    that took it (the one that records it)."""

    __slots__ = ("__weakref__", "id", "owner", "parent_id", "trial")

    def __init__(self, trial: trial_trace.TrialTrace, id: str, parent_id: str, owner: SpanProcessor) -> None:
        # Weak: the claims are kept by their trial (below), which must still be able to go.
        self.trial = weakref.ref(trial)
        self.id = id
        self.parent_id = parent_id
        self.owner = owner


# Process-wide, as OpenTelemetry's providers are: each claimed span by its OpenTelemetry
# (trace id, span id), for as long as its trial lives. A child finds its parent's trial and id
# here, even from a context without the trial (a thread that carried only OpenTelemetry's
# context), and a second processor of ours on the same spans (the one added on its own and one
# the user added) sees the span is taken, so no span is recorded twice.
_lock = threading.Lock()
_claims: weakref.WeakValueDictionary[tuple[int, int], _Claim] = weakref.WeakValueDictionary()
_kept: weakref.WeakKeyDictionary[trial_trace.TrialTrace, list[_Claim]] = weakref.WeakKeyDictionary()


class SpanProcessor(_SdkSpanProcessor):
    """Records each span started in a trial's task or scoring with that trial; leaves the others
    alone. Add it to the ``TracerProvider`` an app keeps to itself (the global one gets one on
    its own): ``provider.add_span_processor(SpanProcessor())``."""

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        try:
            self._claim(span)
        except Exception:  # a span processor must never break the app's span
            _logger.exception("pytest-opik-eval could not follow OpenTelemetry span %r", span.name)

    def on_end(self, span: ReadableSpan) -> None:
        context = span.context
        if context is None:
            return
        claim = _claims.get((context.trace_id, context.span_id))
        if claim is None or claim.owner is not self:
            return
        trial = claim.trial()
        if trial is None:
            return
        try:
            params = span_params(span, claim.id, trial.trace_id, claim.parent_id)
        except Exception:
            _logger.exception("pytest-opik-eval could not record OpenTelemetry span %r", span.name)
            return
        trial.add_span(params)

    def _claim(self, span: Span) -> None:
        context = span.context
        if context is None:
            return
        trial = trial_trace.current()
        parent = span.parent
        with _lock:
            if (context.trace_id, context.span_id) in _claims:
                return  # another processor of ours took it
            mapped = None if parent is None else _claims.get((parent.trace_id, parent.span_id))
            mapped_trial = None if mapped is None else mapped.trial()
            if mapped is not None and mapped_trial is not None and trial in (None, mapped_trial):
                trial, parent_id = mapped_trial, mapped.id
            elif trial is not None:
                parent_id = _innermost(trial)
            else:
                return  # outside any trial: not ours
            claim = _Claim(trial, uuid7(), parent_id, self)
            _claims[context.trace_id, context.span_id] = claim
            _kept.setdefault(trial, []).append(claim)


def _innermost(trial: trial_trace.TrialTrace) -> str:
    """The span a span started here hangs under: the app's ``@opik.track`` span open here, when
    the Opik SDK is loaded (so a call instrumented with OpenTelemetry inside a tracked function
    nests under it), else the trial's innermost open span."""
    if "opik" in sys.modules:
        top = top_span_id(trial.trace_id)
        if top is not None:
            return top
    return trial.parent_span_id()


_added = threading.Lock()


def add_to_global_provider() -> None:
    """One :class:`SpanProcessor` on the global SDK ``TracerProvider``, if the app set one and
    it has none of ours yet (the user may have added one). Cheap enough to ask as each trial
    starts, so a provider the app sets in its first task call is found for the next trials."""
    provider = trace_api.get_tracer_provider()
    if not isinstance(provider, TracerProvider) or _has_ours(provider):
        return
    with _added:
        if not _has_ours(provider):
            provider.add_span_processor(SpanProcessor())


def _has_ours(provider: TracerProvider) -> bool:
    # The SDK keeps no public list of a provider's processors; without one, adding ours is safe
    # all the same: a second processor of ours records nothing twice (see _claims).
    active = getattr(provider, "_active_span_processor", None)
    return any(isinstance(p, SpanProcessor) for p in getattr(active, "_span_processors", ()))


# -- a finished OpenTelemetry span, as the Opik SDK's span parameters ------------------------


def span_params(span: ReadableSpan, id: str, trace_id: str, parent_id: str) -> dict[str, Any]:
    """``span`` in the Opik SDK's span parameter names (``SpanData.as_parameters``)."""
    attributes: dict[str, Any] = dict(span.attributes or {})
    used: set[str] = set()

    def first(names: Iterable[str]) -> Any:
        for name in names:
            if name in attributes:
                used.add(name)
                return attributes[name]
        return None

    model = first(_MODEL)
    provider = first(_PROVIDER)
    provider = None if provider is None else _PROVIDERS.get(str(provider), str(provider))
    usage, bad_usage = _usage(attributes, used)
    cost_name = next((name for name in _COST if name in attributes), "")
    cost = first(_COST)
    bad_cost = (
        None if cost is None or span_usage.cost(cost) is not None else span_usage.field(cost_name, cost)
    )
    span_input = _messages(attributes, used, _INPUT, _INPUT_INDEXED) or _events(span, _INPUT_EVENTS)
    output = _messages(attributes, used, _OUTPUT, _OUTPUT_INDEXED) or _events(span, (_OUTPUT_EVENT,))
    kind = _type(attributes, model is not None and (usage is not None or bad_usage is not None))
    name = span.name
    # What names a tool call is kept in the metadata whatever the cut below drops.
    kept: dict[str, Any] = {}
    if kind == "tool":
        for key in (*_TOOL_NAME, TOOL_CALL_ID):
            if key in attributes:
                used.add(key)
                kept[key] = _plain(attributes[key])
        tool = next((kept[key] for key in _TOOL_NAME if key in kept), None)
        if isinstance(tool, str) and tool:
            name = tool
        arguments = first(_TOOL_INPUT)
        result = first(_TOOL_OUTPUT)
        span_input = _tool_arguments(_decoded(arguments, None)) if span_input is None else span_input
        output = _decoded(result, None) if output is None else output
    metadata = {key: _plain(value) for key, value in attributes.items() if key not in used}
    if len(metadata) > MAX_METADATA_KEYS:
        metadata = dict(sorted(metadata.items())[:MAX_METADATA_KEYS])
    metadata.update(kept)
    params = {
        "id": id,
        "trace_id": trace_id,
        "parent_span_id": parent_id,
        "name": name,
        "type": kind,
        "start_time": _time(span.start_time),
        "end_time": _time(span.end_time),
        "input": span_input,
        "output": output,
        "metadata": metadata or None,
        "tags": None,
        "model": None if model is None else str(model),
        "provider": provider,
        "usage": usage,
        "total_cost": span_usage.cost(cost),
        "error_info": _error(span),
    }
    if bad_usage or bad_cost:
        # Named as the app set them: the trial's end would name them by Opik's names.
        params[span_usage.REJECTED] = [span_usage.rejection(span.name, bad_usage, bad_cost)]
    return params


def _type(attributes: Mapping[str, Any], reports_usage: bool) -> str:
    """Opik's span type: "llm" for a model call, "tool", "guardrail", else "general"."""
    operation = attributes.get("gen_ai.operation.name")
    kind = str(attributes.get("openinference.span.kind", "")).upper()
    if operation == "execute_tool" or kind == "TOOL" or attributes.get("traceloop.span.kind") == "tool":
        return "tool"
    if kind == "GUARDRAIL":
        return "guardrail"
    if (
        operation in _LLM_OPERATIONS
        or kind in ("LLM", "EMBEDDING")
        or "llm.request.type" in attributes
        or reports_usage
    ):
        return "llm"
    return "general"


def _usage(attributes: Mapping[str, Any], used: set[str]) -> tuple[dict[str, int] | None, str | None]:
    """The token counts, in Opik's names; or None and the first attribute that holds no count
    (see ``span_usage``)."""
    usage: dict[str, int] = {}
    bad = None
    for opik_name, names in _USAGE.items():
        name = next((name for name in names if name in attributes), None)
        if name is None:
            continue
        used.add(name)
        counted = span_usage.count(attributes[name])
        if counted is None:
            bad = bad or span_usage.field(name, attributes[name])
        else:
            usage[opik_name] = counted
    if bad is not None or not usage:
        return None, bad
    if "total_tokens" not in usage and ("prompt_tokens" in usage or "completion_tokens" in usage):
        usage["total_tokens"] = usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0)
    return usage, None


def _messages(
    attributes: Mapping[str, Any], used: set[str], whole: Iterable[str], indexed: Iterable[str]
) -> Any:
    """The messages in or out: a whole value if there is one, else the indexed ones. Every
    attribute that holds them is used (not metadata too), whichever is kept."""
    found: Any = None
    for name in whole:
        if name in attributes:
            used.add(name)
            mime = f"{name.rpartition('.')[0]}.mime_type"
            used.add(mime)
            if found is None:
                found = _decoded(attributes[name], attributes.get(mime))
    for prefix in indexed:
        messages: dict[int, dict[str, Any]] = {}
        for name, value in attributes.items():
            index, dot, field = (
                name[len(prefix) :].partition(".") if name.startswith(prefix) else ("", "", "")
            )
            if dot and index.isdigit():
                used.add(name)
                messages.setdefault(int(index), {})[field.removeprefix("message.")] = _plain(value)
        if messages and found is None:
            found = [_with_tool_calls(messages[index]) for index in sorted(messages)]
    return found


def _with_tool_calls(message: dict[str, Any]) -> dict[str, Any]:
    """A message spread over indexed attributes, its tool calls gathered as a list of
    ``{name, arguments, id}``: OpenLLMetry's ``tool_calls.{j}.name`` and OpenInference's
    ``tool_calls.{j}.tool_call.function.name`` (and ``arguments``, ``id``) alike."""
    calls: dict[int, dict[str, Any]] = {}
    for field in [field for field in message if field.startswith("tool_calls.")]:
        index, _, rest = field[len("tool_calls.") :].partition(".")
        if index.isdigit() and rest:
            calls.setdefault(int(index), {})[rest.rpartition(".")[2]] = message.pop(field)
    if calls:
        message["tool_calls"] = [calls[index] for index in sorted(calls)]
    return message


def _events(span: ReadableSpan, names: Iterable[str]) -> Any:
    wanted = set(names)
    messages = [
        {
            "role": event.name.split(".")[1],
            **{k: _decoded(v, None) for k, v in (event.attributes or {}).items()},
        }
        for event in span.events
        if event.name in wanted
    ]
    return messages or None


def _tool_arguments(value: Any) -> Any:
    """A tool span's arguments as the tool took them: OpenLLMetry's ``@tool`` writes
    ``{"args": [...], "kwargs": {...}}`` into ``traceloop.entity.input``: its keyword arguments
    (with the positional ones under ``args`` when there are any)."""
    if type(value) is dict and set(value) == {"args", "kwargs"} and type(value["kwargs"]) is dict:
        return {**value["kwargs"], **({"args": value["args"]} if value["args"] else {})}
    return value


def _decoded(value: Any, mime: Any) -> Any:
    """An attribute's value: JSON text (a message list, OpenInference's application/json) as
    the data it holds, anything else as it is."""
    if isinstance(value, str) and (mime == "application/json" or value[:1] in ("[", "{")):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return _plain(value)


def _plain(value: Any) -> Any:
    # Attribute sequences come as tuples: a list is what JSON (and the store) hold.
    return list(value) if isinstance(value, tuple) else value


def _error(span: ReadableSpan) -> dict[str, str] | None:
    if span.status.status_code is not StatusCode.ERROR:
        return None
    for event in span.events:
        if event.name == "exception":
            attributes = event.attributes or {}
            return {
                "exception_type": str(attributes.get("exception.type", "Exception")),
                "message": str(attributes.get("exception.message", span.status.description or "")),
            }
    return {"exception_type": "Error", "message": span.status.description or ""}


def _time(nanoseconds: int | None) -> datetime | None:
    return None if nanoseconds is None else datetime.fromtimestamp(nanoseconds / 1e9, timezone.utc)
