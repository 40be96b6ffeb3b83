"""The private API of the Opik SDK this plugin touches (as pytest's is in ``_compat.py``): the
client surface its ``@track`` and integrations send finished spans to (``__internal_api__*``),
its context storage (the trace and the span stack of this context), its span and trace data,
and its usage parser. When an SDK release changes one, it is fixed here alone:
``tests/test_compat.py`` fails naming what is gone, and keeps the SDK's modules and
``__internal_api__`` names out of every other module.

The SDK is never imported here at the top: only once the app has imported it (``"opik" in
sys.modules``), when a trial asks.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

# Marks the parameters of a span the Opik SDK sent (see OpikClient.__internal_api__span__): its
# usage is the provider's own, parsed as the SDK does (see parse_usage).
FROM_SDK = "__pytest_opik_eval_from_sdk__"


class _ClientConfig:
    # @track asks before it starts a span; False: spans are sent once, when they end.
    log_start_trace_span = False


class _Sent:
    """What the client returns for a trace it was given: ``OpikTracer`` checks there is one."""

    def __init__(self, id: str | None) -> None:
        self.id = id


class OpikClient:
    """The surface of the SDK's client (``opik.Opik``) that ``@track`` and the integrations use:
    a trial's trace is one, set as the context-wise client while the trial runs (see
    ``pushed``), and keeps what they send with ``add_span``."""

    config = _ClientConfig()
    add_span: Callable[[Mapping[str, Any]], None]  # the trace's own

    def __internal_api__span__(self, **params: Any) -> None:
        params[FROM_SDK] = True  # its usage is the provider's own: parsed as the SDK does
        self.add_span(params)

    def __internal_api__trace__(self, **params: Any) -> _Sent:
        # The trial's own trace is never ended by the SDK (it was pushed); a trace another one
        # started inside the task (an explicit opik.start_as_current_trace) is not kept.
        return _Sent(params.get("id"))

    def flush(self, timeout: int | None = None) -> bool:
        return True


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


def top_span_id(trace_id: str) -> str | None:
    """The id of the SDK's innermost span open in this context (an ``@opik.track`` span, or one
    of ours pushed with ``push_span``) if it belongs to trace ``trace_id``, else None."""
    top = _sdk().storage.top_span_data()
    return str(top.id) if top is not None and top.trace_id == trace_id else None


def top_span_type(trace_id: str) -> str | None:
    """The type ("llm", "tool", "general"...) of the SDK's innermost span open in this context
    if it belongs to trace ``trace_id``, else None: ``track_openai`` keeps its "llm" span open
    around the HTTP call it traces."""
    top = _sdk().storage.top_span_data()
    return str(top.type) if top is not None and top.trace_id == trace_id else None


def is_current_trace(trace_id: str) -> bool:
    """Whether trace ``trace_id`` is the SDK's current trace in this context (see ``pushed``)."""
    data = _sdk().storage.get_trace_data()
    return data is not None and data.id == trace_id


@contextlib.contextmanager
def pushed(
    client: OpikClient,
    trace_id: str,
    trace_name: str,
    started: datetime,
    item: Mapping[str, Any],
    task_span_id: str,
    task_name: str,
) -> Iterator[None]:
    """The trace (its input the dataset item) and the task span on the SDK's context, and
    ``client`` the context-wise client, as ``opik.evaluate()``'s engine sets its own; the context
    as it was afterwards."""
    sdk = _sdk()
    trace = sdk.TraceData(
        id=trace_id, start_time=started, name=trace_name, input=item, created_by="evaluation"
    )
    task = sdk.SpanData(trace_id=trace_id, id=task_span_id, name=task_name)
    previous = sdk.client()
    sdk.set_client(client, context_wise=True)
    try:
        with sdk.storage.temporary_context(task, trace):
            yield
    finally:
        # Back to what it was (None, most often: the global client then applies again).
        sdk.set_client(previous, context_wise=True)


def push_span(trace_id: str, span_id: str, parent_id: str | None, name: str) -> None:
    """A span of ours on the SDK's span stack, so the app's ``@track`` spans nest under it."""
    sdk = _sdk()
    sdk.storage.add_span_data(
        sdk.SpanData(trace_id=trace_id, id=span_id, parent_span_id=parent_id, name=name)
    )


def pop_span(span_id: str) -> None:
    """The span ``push_span`` pushed, off the stack: by id, so a metric that left a span of its
    own on the stack cannot pop ours (see ``OpikContextStorage.pop_span_data``)."""
    _sdk().storage.pop_span_data(ensure_id=span_id)


def parse_usage(usage: Any, logger: logging.Logger, provider: str | None) -> dict[str, int] | None:
    """A provider's usage (a mapping or its own object) or an ``OpikUsage``, made flat in Opik's
    names as the SDK sends it; may raise on an odd usage object."""
    from opik.api_objects import validation_helpers

    parsed: dict[str, int] | None = validation_helpers.validate_and_parse_usage(usage, logger, provider)
    return parsed


# What the SDK's SimulatedUser answers when its model fails (simulated_user.py,
# _generate_llm_response): no user's message, an error.
SIMULATOR_FAILED = "I'm having trouble responding right now."


def simulated_user(persona: str, model: str | None) -> Any:
    """The SDK's ``SimulatedUser`` (``opik.simulation``) with this persona and model; ImportError
    without the SDK."""
    from opik.simulation import SimulatedUser

    return SimulatedUser(persona=persona, model=model)


def span_tree(root: Mapping[str, Any], spans: Sequence[Mapping[str, Any]]) -> Any:
    """``root`` and the spans under it as the SDK's ``SpanModel`` tree
    (``message_processing.emulation.models``): what ``opik.evaluate`` gives a metric whose
    ``score`` names ``task_span``. Span parameters as ``TrialTrace.add_span`` takes them; times
    as seconds since the epoch, datetimes or ISO text; children in start order."""
    from opik.message_processing.emulation.models import SpanModel

    models: dict[Any, Any] = {}
    for params in [root, *spans]:
        models[params["id"]] = SpanModel(
            id=params["id"],
            start_time=_moment(params.get("start_time")),
            source="experiment",
            name=params.get("name"),
            input=params.get("input"),
            output=params.get("output"),
            tags=params.get("tags"),
            metadata=params.get("metadata"),
            type=params.get("type") or "general",
            usage=params.get("usage"),
            end_time=_moment(params.get("end_time")) if params.get("end_time") is not None else None,
            model=params.get("model"),
            provider=params.get("provider"),
            total_cost=params.get("total_cost"),
        )
    for params in spans:
        parent = models.get(params.get("parent_span_id"))
        if parent is not None:
            parent.spans.append(models[params["id"]])
    for model in models.values():
        model.spans.sort(key=lambda child: child.start_time)
    return models[root["id"]]


def _moment(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value, timezone.utc)
    if isinstance(value, str):
        return _moment(datetime.fromisoformat(value.replace("Z", "+00:00")))
    return datetime.now(timezone.utc)
