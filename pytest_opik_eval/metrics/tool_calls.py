"""A trial's tool calls, read from its spans: the ``tool_calls`` and ``llm_calls`` that the
trajectory metrics (``metrics/trajectory.py``) take as ``score()`` arguments, as they take
``output``.

Two kinds of call, from two kinds of span:

- **executed**: a span of type ``"tool"``, one per call the app ran: an Opik SDK
  ``@track(type="tool")`` function (name = the span's, arguments = its bound arguments, result =
  what it returned), a manual ``trace.span(name, type="tool", input=...)``, or an OpenTelemetry
  tool span (``execute_tool``), which ``run/otel.py`` names after its tool, with its arguments
  as input, its result as output and its call id in the metadata (``TOOL_CALL_ID``);
- **requested**: a tool call the model asked for, in the output of a span of type ``"llm"``, in
  the shapes the Opik SDK's integrations log: OpenAI chat completions
  (``choices[].message.tool_calls[]``), OpenAI Responses (``output[]`` items of type
  ``function_call``), Anthropic messages (``content[]`` blocks of type ``tool_use``) and Gemini's
  generateContent (``candidates[].content.parts[].functionCall``, or ``function_call`` as the
  SDK's ``track_genai`` logs the google-genai response, in snake case); or in
  the messages of an OpenTelemetry chat span (``run/otel.py`` makes its output a list of
  messages): the GenAI conventions' ``parts[]`` of type ``tool_call``, or a ``tool_calls[]``
  list (OpenLLMetry's and OpenInference's indexed attributes, gathered).

Per trial, not per call (so an app that renames a tool or rewrites its arguments does not make
calls vanish silently): a trial with at least one executed call has those as its ``tool_calls``,
in start order, each lent the id of a request of the same name; otherwise its requested calls,
in response order. Both stay on the list (``ToolCalls.executed``, ``.requested``).

Deduplicated: a requested call seen in two LLM spans (two instrumentations of one client) counts
once, by its provider id (calls without one are not merged); a tool span whose nearest tool span
above it has its name is the same call seen twice (the outer one counts), and an LLM span inside
another LLM span is the same model call. Spans under the scoring's span (a judge's) or a simulated
user's (a conversation's, tagged ``SIMULATOR_TAG``) are never the app's.

Pure and cheap (a dict lookup per span; JSON decoded only for actual calls): it works on the
span parameters a trial holds while it runs (``TrialTrace.snapshot``) and on stored
``SpanRecord``s alike.
"""

from __future__ import annotations

import json
import json.scanner
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple, TypeAlias, cast

if TYPE_CHECKING:  # the metrics import no pydantic: a SpanRecord is read as its __dict__
    from pytest_opik_eval.store.records import SpanRecord

# The span a trial's scoring runs in (see run/trial_trace.py): the spans under it are the
# metrics' (a judge's calls), never the app's.
METRICS_SPAN = "metrics_calculation"
# The tag of a conversation's simulated-user spans: their calls are the eval's. The value of
# store/records.py's SIMULATOR_TAG, named here so that the metrics import no pydantic
# (tests/test_trajectory.py checks the two agree).
SIMULATOR_TAG = "simulated_user"
TURN_TAG = "conversation_turn"  # store/records.py's, likewise
# The key the Opik SDK's spans carry in a trial (``_compat_opik.FROM_SDK``), named here so that
# this bottom layer imports nothing of the SDK's compatibility module.
_FROM_SDK = "__pytest_opik_eval_from_sdk__"
# Where an OpenTelemetry tool span's call id is (its metadata; the GenAI conventions' name).
TOOL_CALL_ID = "gen_ai.tool.call.id"


class ToolCall(NamedTuple):
    """One tool call of a trial. A tuple: cheap to make, and JSON holds it (as a list)."""

    name: str
    arguments: Any = None  # a dict when the source gave JSON (or a dict); else as given
    result: Any = None  # an executed call's: what the tool returned
    id: str | None = None  # the provider's call id (call_..., toolu_...), when known
    kind: str = "executed"  # "executed" (a tool span) | "requested" (the model asked for it)
    source: str = "span"  # "sdk" (an Opik SDK span) | "span" (manual, stored) | "llm_span"
    span_id: str | None = None


class LLMCall(NamedTuple):
    """One model call of the app: its span, its model, and the tool calls it asked for."""

    span_id: str | None
    name: str | None
    model: str | None
    tool_calls: tuple[ToolCall, ...] = ()


class ToolCalls(list[ToolCall]):
    """The trial's tool calls (see the module docstring for which), with both kinds kept:
    ``executed``, ``requested``, and ``requested_not_run`` (asked for and never run, when the
    executed ones are the list)."""

    def __init__(
        self,
        calls: Iterable[ToolCall],
        *,
        executed: list[ToolCall],
        requested: list[ToolCall],
        requested_not_run: list[ToolCall],
    ) -> None:
        super().__init__(calls)
        self.executed = executed
        self.requested = requested
        self.requested_not_run = requested_not_run


def stable(value: Any) -> Any:
    """``value`` with each tool call and LLM call as what it says (name, arguments, result, kind;
    model, the calls it asked for), and an Opik SDK ``SpanModel`` tree (``task_span``) as its
    spans' names, types, inputs, outputs and models, without the ids and times that change from
    one run to the next: what a judge's cache key sees of them (``run/judge_cache``)."""
    if isinstance(value, ToolCall):
        return {"name": value.name, "arguments": value.arguments, "result": value.result, "kind": value.kind}
    if isinstance(value, LLMCall):
        return {"name": value.name, "model": value.model, "tool_calls": [stable(c) for c in value.tool_calls]}
    if isinstance(value, list) and value and isinstance(value[0], ToolCall | LLMCall):
        return [stable(entry) for entry in value]
    if type(value).__name__ == "SpanModel" and hasattr(value, "spans"):  # task_span (_compat_opik)
        llm = value.type == "llm"
        return {
            "name": value.name,
            "type": value.type,
            # A model call's input and output hold the provider's call ids, new on each live call.
            "input": _without_call_ids(value.input) if llm else value.input,
            "output": _without_call_ids(value.output) if llm else value.output,
            "model": value.model,
            "spans": [stable(child) for child in value.spans],
        }
    return value


# The keys of provider call ids, in model calls' messages and answers (OpenAI's tool_call_id and
# Responses call_id, Anthropic's tool_use_id), and the kinds of entry whose own "id" is one (a
# tool call, a tool use, a function call, a message): never a tool's arguments, which have none.
_CALL_ID_KEYS = frozenset({"tool_call_id", "call_id", "tool_use_id"})
_ID_KINDS = frozenset({"function", "function_call", "tool_use", "tool_result", "message"})
# Gemini's parts hold a call and its answer under these keys (camel case on the wire, snake case
# as track_genai logs the SDK's objects), their "id" the call's.
_GEMINI_CALL_KEYS = frozenset({"functionCall", "functionResponse", "function_call", "function_response"})


def _without_call_ids(value: Any) -> Any:
    if type(value) is list:
        return [_without_call_ids(entry) for entry in value]
    if type(value) is not dict:
        return value
    provider = value.get("type") in _ID_KINDS or "function" in value
    return {
        key: _without_id(entry) if key in _GEMINI_CALL_KEYS else _without_call_ids(entry)
        for key, entry in value.items()
        if key not in _CALL_ID_KEYS and not (key == "id" and provider)
    }


def _without_id(call: Any) -> Any:
    """A Gemini function call or response without its id (its arguments kept whole)."""
    return {key: entry for key, entry in call.items() if key != "id"} if type(call) is dict else call


def made_by_app(spans: Iterable[Span]) -> bool:
    """Whether the app made any of ``spans`` (taken before its scoring): not a conversation's
    turn or simulated-user span, nor one under a simulated user's."""
    fields = [_fields(span) for span in spans]
    simulated = {f.get("id") for f in fields if _tagged(f, SIMULATOR_TAG)}
    parents = {f.get("id"): f.get("parent_span_id") for f in fields}
    for f in fields:
        if _tagged(f, SIMULATOR_TAG) or _tagged(f, TURN_TAG):
            continue
        parent, seen = f.get("parent_span_id"), 0
        while parent is not None and parent not in simulated and seen < len(parents):
            parent, seen = parents.get(parent), seen + 1
        if parent is None or parent not in simulated:
            return True
    return False


def _fields(span: Span) -> Mapping[str, Any]:
    # A SpanRecord's fields are its __dict__: read as a mapping, with no copy.
    return span if type(span) is dict or isinstance(span, Mapping) else cast(Mapping[str, Any], span.__dict__)


def _tagged(fields: Mapping[str, Any], tag: str) -> bool:
    tags = fields.get("tags")
    return type(tags) is list and tag in tags


class Calls(NamedTuple):
    tool_calls: ToolCalls
    llm_calls: list[LLMCall]


Span: TypeAlias = "Mapping[str, Any] | SpanRecord"

# What a span's ancestors say of it: whether it is none of the app's (under the scoring's span or
# a simulated user's), the name of the nearest tool span above it, and whether an LLM span is.
_Above = tuple[bool, str | None, bool]
_TOP: _Above = (False, None, False)


def extract(spans: Iterable[Span]) -> Calls:
    """The tool calls and LLM calls in a trial's spans: span parameters (``TrialTrace.add_span``'s
    mappings) or ``SpanRecord``s."""
    by_id: dict[Any, Mapping[str, Any]] = {}
    tools: list[Mapping[str, Any]] = []
    llms: list[Mapping[str, Any]] = []
    for span in spans:
        fields = _fields(span)
        by_id[fields.get("id")] = fields
        kind = fields.get("type")
        if kind == "tool":
            tools.append(fields)
        elif kind == "llm":
            llms.append(fields)
    if not tools and not llms:
        return Calls(ToolCalls((), executed=[], requested=[], requested_not_run=[]), [])
    memo: dict[Any, _Above] = {}
    executed = []
    for fields in sorted(tools, key=_start) if len(tools) > 1 else tools:
        foreign, tool_above, _ = _above(fields.get("parent_span_id"), by_id, memo)
        if foreign or tool_above == fields.get("name"):
            continue
        executed.append(_executed(fields))
    llm_calls, requested = _llm_calls(sorted(llms, key=_start) if len(llms) > 1 else llms, by_id, memo)
    if not executed:
        return Calls(ToolCalls(requested, executed=[], requested=requested, requested_not_run=[]), llm_calls)
    lent, not_run = _lend_ids(executed, requested)
    return Calls(ToolCalls(lent, executed=lent, requested=requested, requested_not_run=not_run), llm_calls)


def _llm_calls(
    llms: list[Mapping[str, Any]], by_id: Mapping[Any, Mapping[str, Any]], memo: dict[Any, _Above]
) -> tuple[list[LLMCall], list[ToolCall]]:
    """The app's model calls (an LLM span inside another is the same call) and the tool calls
    they asked for (one id seen twice counts once)."""
    llm_calls: list[LLMCall] = []
    requested: list[ToolCall] = []
    seen_ids: set[str] = set()
    for fields in llms:
        foreign, _, llm_above = _above(fields.get("parent_span_id"), by_id, memo)
        if foreign:
            continue
        first = len(requested)
        _requested(fields, seen_ids, requested)
        asked = tuple(requested[first:])
        if not llm_above:
            llm_calls.append(LLMCall(fields.get("id"), fields.get("name"), fields.get("model"), asked))
    return llm_calls, requested


def as_calls(value: Any) -> list[ToolCall]:
    """Tool calls as the metrics read them: a list of ``ToolCall`` (the computed input), or one
    an app returned itself: names, or mappings with ``name`` and ``arguments`` (or ``args``,
    ``input``). Anything else raises ``TypeError`` saying what was expected."""
    if value is None:
        return []
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise TypeError(f"tool_calls must be a list of tool calls, got {type(value).__name__}")
    calls = []
    for entry in value:
        if isinstance(entry, ToolCall):
            calls.append(entry)
        elif isinstance(entry, str):
            calls.append(ToolCall(entry))
        elif isinstance(entry, Mapping) and isinstance(entry.get("name"), str):
            arguments = next((entry[k] for k in ("arguments", "args", "input") if k in entry), None)
            calls.append(ToolCall(entry["name"], _decoded(arguments), entry.get("result"), entry.get("id")))
        else:
            raise TypeError(
                "each tool call must be a ToolCall, a name, or a mapping with a 'name' (and "
                f"'arguments'); got {_shown(entry)}"
            )
    return calls


def _above(parent: Any, by_id: Mapping[Any, Mapping[str, Any]], memo: dict[Any, _Above]) -> _Above:
    """What the span ``parent`` and its ancestors say of a span under it (see ``_Above``): the
    chain up to a span already seen (or the root), then filled in top down, so each span of the
    trial is walked once whatever the number of calls under it."""
    chain = []
    while parent is not None and parent not in memo:
        fields = by_id.get(parent)
        if fields is None:  # the task span (not among the app's spans) or a span we never got
            break
        chain.append(fields)
        parent = fields.get("parent_span_id")
    state = memo.get(parent, _TOP) if parent is not None else _TOP
    for fields in reversed(chain):
        foreign, tool, llm = state
        kind = fields.get("type")
        state = (
            foreign or fields.get("name") == METRICS_SPAN or SIMULATOR_TAG in (fields.get("tags") or ()),
            fields.get("name") if kind == "tool" else tool,
            llm or kind == "llm",
        )
        memo[fields.get("id")] = state
    return state


def _executed(fields: Mapping[str, Any]) -> ToolCall:
    output = fields.get("output")
    # The SDK logs a result that is not a dict as {"output": result}.
    if isinstance(output, dict) and len(output) == 1 and "output" in output:
        output = output["output"]
    metadata = fields.get("metadata")
    call_id = metadata.get(TOOL_CALL_ID) if type(metadata) is dict else None
    return ToolCall(
        str(fields.get("name")),
        fields.get("input"),
        output,
        call_id if type(call_id) is str and call_id else None,
        "executed",
        "sdk" if _FROM_SDK in fields else "span",
        fields.get("id"),
    )


def _requested(fields: Mapping[str, Any], seen_ids: set[str], into: list[ToolCall]) -> None:
    """Adds to ``into`` the tool calls an LLM span's output asks for, in the shapes the SDK's
    integrations log (plain dicts and lists, as every span holds them), but those of an id seen
    already."""
    output = fields.get("output")
    span_id = fields.get("id")
    if type(output) is list:  # an OpenTelemetry chat span's output messages
        _message_calls(output, seen_ids, into, span_id)
        return
    if type(output) is not dict:
        return
    choices = output.get("choices")
    if type(choices) is list:  # OpenAI chat completions
        _chat_calls(choices, seen_ids, into, span_id)
    content = output.get("content")
    if type(content) is list:  # Anthropic messages
        _tool_use_calls(content, seen_ids, into, span_id)
    items = output.get("output")
    if type(items) is list:  # OpenAI Responses
        _function_call_items(items, seen_ids, into, span_id)
    candidates = output.get("candidates")
    if type(candidates) is list:  # Gemini generateContent
        _gemini_calls(candidates, seen_ids, into, span_id)


def _tool_use_calls(blocks: list[Any], seen_ids: set[str], into: list[ToolCall], span_id: Any) -> None:
    """Anthropic messages: the content's tool_use blocks."""
    for block in blocks:
        if type(block) is dict and block.get("type") == "tool_use" and type(block.get("name")) is str:
            _add(into, seen_ids, block["name"], block.get("input"), block.get("id"), span_id)


def _function_call_items(items: list[Any], seen_ids: set[str], into: list[ToolCall], span_id: Any) -> None:
    """OpenAI Responses: the output's function_call items."""
    for item in items:
        if type(item) is dict and item.get("type") == "function_call" and type(item.get("name")) is str:
            _add(into, seen_ids, item["name"], item.get("arguments"), item.get("call_id"), span_id)


def _chat_calls(choices: list[Any], seen_ids: set[str], into: list[ToolCall], span_id: Any) -> None:
    """OpenAI chat completions: each choice's message's tool_calls."""
    for choice in choices:
        message = choice.get("message") if type(choice) is dict else None
        calls = message.get("tool_calls") if type(message) is dict else None
        for call in calls if type(calls) is list else ():
            function = call.get("function") if type(call) is dict else None
            if type(function) is dict and type(function.get("name")) is str:
                _add(into, seen_ids, function["name"], function.get("arguments"), call.get("id"), span_id)


def _gemini_calls(candidates: list[Any], seen_ids: set[str], into: list[ToolCall], span_id: Any) -> None:
    """Gemini: each candidate's ``functionCall`` parts (``function_call`` as track_genai logs
    them); their ``args`` an object, their ``id`` set only by some models."""
    for candidate in candidates:
        content = candidate.get("content") if type(candidate) is dict else None
        parts = content.get("parts") if type(content) is dict else None
        for part in parts if type(parts) is list else ():
            if type(part) is not dict:
                continue
            call = part.get("functionCall") or part.get("function_call")
            if type(call) is dict and type(call.get("name")) is str:
                _add(into, seen_ids, call["name"], call.get("args"), call.get("id"), span_id)


def _message_calls(messages: list[Any], seen_ids: set[str], into: list[ToolCall], span_id: Any) -> None:
    """OpenTelemetry chat messages: the GenAI conventions' ``tool_call`` parts, or a message's
    ``tool_calls`` (``{name, arguments, id}``, or OpenAI's ``{id, function: {name, arguments}}``)."""
    for message in messages:
        if type(message) is not dict:
            continue
        nested = message.get("message")  # a gen_ai.choice event's (run/otel._events)
        if type(nested) is dict:
            message = nested
        parts = message.get("parts")
        for part in parts if type(parts) is list else ():
            if type(part) is dict and part.get("type") == "tool_call" and type(part.get("name")) is str:
                _add(into, seen_ids, part["name"], part.get("arguments"), part.get("id"), span_id)
        calls = message.get("tool_calls")
        for call in calls if type(calls) is list else ():
            if type(call) is not dict:
                continue
            function = call.get("function")
            named = function if type(function) is dict else call
            if type(named.get("name")) is str:
                _add(into, seen_ids, named["name"], named.get("arguments"), call.get("id"), span_id)


def _add(
    into: list[ToolCall], seen_ids: set[str], name: str, arguments: Any, call_id: Any, span_id: Any
) -> None:
    if type(call_id) is str and call_id:
        if call_id in seen_ids:
            return
        seen_ids.add(call_id)
    else:
        call_id = None
    into.append(ToolCall(name, _decoded(arguments), None, call_id, "requested", "llm_span", span_id))


def _lend_ids(executed: list[ToolCall], requested: list[ToolCall]) -> tuple[list[ToolCall], list[ToolCall]]:
    """Each executed call without an id of its own given the id of the first request of its name
    not yet matched; and the requests that no executed call matched (by id, else so)."""
    if not requested:
        return executed, []
    own = {call.id for call in executed if call.id is not None}
    pending: dict[str, list[ToolCall]] = {}
    for call in requested:
        if call.id is None or call.id not in own:
            pending.setdefault(call.name, []).append(call)
    lent = []
    taken: set[int] = set()  # the requests matched, by identity (two may be equal tuples)
    for call in executed:
        waiting = pending.get(call.name)
        if waiting and call.id is None:
            request = waiting.pop(0)
            taken.add(id(request))
            call = ToolCall(
                call.name, call.arguments, call.result, request.id, call.kind, call.source, call.span_id
            )
        lent.append(call)
    return lent, [
        call for call in requested if id(call) not in taken and (call.id is None or call.id not in own)
    ]


# The JSON scanner itself: a third of json.loads's cost for the small objects tool arguments are
# (json.loads adds type checks and a whitespace regex around the same C scanner).
_scan = json.scanner.make_scanner(cast(Any, json.JSONDecoder()))


def _decoded(arguments: Any) -> Any:
    """Arguments given as JSON text (OpenAI's) as the value they hold; else as they are."""
    if type(arguments) is str and arguments[:1] in ("{", "["):
        try:
            value, end = _scan(arguments, 0)
        except (StopIteration, ValueError):  # cut by a stored span's bound, or not JSON after all
            return arguments
        return value if end == len(arguments) or not arguments[end:].strip() else arguments
    return arguments


def _start(fields: Mapping[str, Any]) -> float:
    """A span's start as seconds: a float (ours), a datetime (the SDK's) or ISO text (stored)."""
    value = fields.get("start_time")
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value).timestamp()
        except ValueError:
            return 0.0
    return 0.0


def _shown(value: Any) -> str:
    text = repr(value)
    return (
        f"{text[:80]}... (a {type(value).__name__})"
        if len(text) > 80
        else f"{text} (a {type(value).__name__})"
    )
