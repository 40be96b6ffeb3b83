"""The model calls of an app with no instrumentation, as "llm" spans of its trial, made from the
HTTP answers the recorder (``run/recording.py``) sees: OpenAI chat completions and Responses,
Anthropic messages, Gemini's generateContent (the Gemini API's and Vertex AI's), answered as
JSON or streamed (server-sent events, assembled here).

Each span is what the Opik SDK's integrations log for the same call (``track_openai``,
``track_anthropic``, ``track_genai``): input = the request's body, output = the answer's
``choices`` (chat), ``output`` (Responses), ``content`` (Anthropic) or ``candidates`` (Gemini),
model and usage from the answer (Gemini's model version; the URL's model, which may be an
alias such as ``gemini-flash-latest``, when the answer names none), and
``source: "http"`` in its metadata, with a Responses answer's ``status`` when it did not
complete. So the trajectory metrics read the tool calls the model
asked for (``metrics/tool_calls.py``), and the budget, the usage and the cost count the call.

One call is one span: a call made while an instrumented LLM span is open around it (the Opik
SDK's, as ``track_openai`` keeps its span open over the HTTP call; a manual ``type="llm"``
span; an OpenTelemetry span of a model call) is that span's, and gets none here. A call an
integration makes as the app reads its stream, its span no longer open (``track_genai``'s
``generate_content_stream``), gets one, which the integration's span replaces when it ends
(``trial_trace.TrialTrace.add_span``).

Imported by the recorder only when it makes such spans (``--eval-llm-spans``): being in
``trial_trace._SPAN_SOURCES``, its import makes every trial of the session traced.
"""

from __future__ import annotations

import itertools
import json
import re
import sys
import time
from collections.abc import Mapping
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from pytest_opik_eval._compat_opik import top_span_type
from pytest_opik_eval.ids import uuid7
from pytest_opik_eval.run import trial_trace
from pytest_opik_eval.run.http_calls import events_of
from pytest_opik_eval.store.http_recordings import RecordedRequest, RecordedResponse, RecordedUsage

SOURCE = trial_trace.HTTP_SOURCE  # metadata["source"] of the spans made here


class _Endpoint(NamedTuple):
    provider: str
    name: str  # the span's: as the SDK's integration names its own (Gemini's: then the model)
    output: str  # the key of the answer that the span's output keeps
    model: str | None = None  # the model the URL names (Gemini's)


# By the end of the URL's path, POST only (a retrieval, GET /v1/responses/{id}, is no call).
_ENDPOINTS = {
    "/chat/completions": _Endpoint("openai", "chat_completion_create", "choices"),
    "/responses": _Endpoint("openai", "responses_create", "output"),
    "/messages": _Endpoint("anthropic", "anthropic_messages_create", "content"),
}
# What marks an OpenTelemetry span as a model call when it starts (the GenAI conventions'
# operation, OpenInference's span kind, OpenLLMetry's request type), as run/otel.py types it.
_OTEL_LLM_OPERATIONS = frozenset({"chat", "text_completion", "generate_content"})
# Gemini's model calls: the model and the method at the end of the path
# (``/v1beta/models/{model}:generateContent``, a tuned model's ``/v1beta/tunedModels/{id}``;
# Vertex AI's ``.../publishers/google/models/{model}``, a tuned model deployed at
# ``.../endpoints/{id}``), never ``:batchGenerateContent`` (a batch, its answers read by
# run/batch_collect.py).
_GEMINI_PATH = re.compile(
    r"/(?:models|tunedModels|endpoints)/([^/:]+):(generateContent|streamGenerateContent)"
)
# The span names of track_genai's, by method (it adds the answer's model after a colon).
_GEMINI_NAMES = {"generateContent": "generate_content", "streamGenerateContent": "generate_content_stream"}
# A Responses stream's terminal events: each carries the response as it ended.
_RESPONSE_ENDS = frozenset({"response.completed", "response.incomplete", "response.failed"})


def endpoint(request: RecordedRequest) -> _Endpoint | None:
    """The model call ``request`` is, or None for any other request: a POST to one of the
    endpoints whose JSON body names a ``model`` and its ``messages`` (or Responses' ``input``),
    or to Gemini's ``models/{model}:generateContent`` with ``contents``; never another API's
    path that ends alike (a chat app's ``/channels/{id}/messages``)."""
    if request.method != "POST":
        return None
    body = (request.body or {}).get("json")
    if not isinstance(body, dict):
        return None
    gemini = _gemini(request.url) if isinstance(body.get("contents"), list) else None
    if gemini is not None:
        return gemini
    if not isinstance(body.get("model"), str):
        return None
    if "messages" not in body and "input" not in body:
        return None
    path = urlsplit(request.url).path.rstrip("/")
    return next((found for suffix, found in _ENDPOINTS.items() if path.endswith(suffix)), None)


def _gemini(url: str) -> _Endpoint | None:
    parts = urlsplit(url)
    found = _GEMINI_PATH.search(parts.path)
    if found is None or not parts.path.endswith(found.group(0)):
        return None
    model, method = found.groups()
    # Opik's provider names (opik.types.LLMProvider): Vertex AI's paths name a project, or a
    # publisher (its express mode's).
    vertex = "/projects/" in parts.path or "/publishers/" in parts.path
    provider = "google_vertexai" if vertex else "google_ai"
    return _Endpoint(provider, _GEMINI_NAMES[method], "candidates", model)


def parent(trace: trial_trace.TrialTrace) -> str | None:
    """The span a model call made here hangs under, or None when an instrumented LLM span open
    here covers it (see the module's docstring). Asked where the request is made."""
    if trace.uses_sdk and top_span_type(trace.trace_id) == "llm":
        return None
    frame = trial_trace.current_frame()
    if frame is not None and frame[0] is trace and frame[1] is not None and frame[1].type == "llm":
        return None
    if _otel_llm_span_open():
        return None
    return trace.parent_span_id()


def _otel_llm_span_open() -> bool:
    otel = sys.modules.get("opentelemetry.trace")
    if otel is None:
        return False
    attributes = getattr(otel.get_current_span(), "attributes", None)
    if not attributes:
        return False
    return (
        attributes.get("gen_ai.operation.name") in _OTEL_LLM_OPERATIONS
        or str(attributes.get("openinference.span.kind", "")).upper() == "LLM"
        or "llm.request.type" in attributes
    )


def add_span(
    trace: trial_trace.TrialTrace,
    request: RecordedRequest,
    response: RecordedResponse,
    usage: RecordedUsage | None,
    started: float,
) -> str | None:
    """The span of one model call (the request made at ``started``, answered with ``response``)
    added to ``trace``; its id, or None when it makes none: no model call, an error answer, or
    one that an instrumented LLM span open here covers. Called where the request is made."""
    found = endpoint(request)
    if found is None or not 200 <= response.status < 300:  # an error answer: no call was made
        return None
    parent_id = parent(trace)
    if parent_id is None:
        return None
    span_id = uuid7()
    trace.add_span(_params(found, trace, request, response, usage, span_id, parent_id, started))
    return span_id


def _params(
    found: _Endpoint,
    trace: trial_trace.TrialTrace,
    request: RecordedRequest,
    response: RecordedResponse,
    usage: RecordedUsage | None,
    span_id: str,
    parent_id: str,
    started: float,
) -> dict[str, Any]:
    """The "llm" span of one model call, as ``TrialTrace.add_span`` takes it."""
    answer = assembled(found, response)
    tokens = None
    if usage is not None:
        tokens = {
            "prompt_tokens": usage.input_tokens,
            "completion_tokens": usage.output_tokens,
            "total_tokens": usage.input_tokens + usage.output_tokens,
        }
    metadata: dict[str, Any] = {"source": SOURCE, "url": request.url}
    answer = answer or {}
    answer_id = answer.get("id") or answer.get("responseId")
    if isinstance(answer_id, str):
        metadata["id"] = answer_id
    status = answer.get("status")
    if found.output == "output" and isinstance(status, str) and status != "completed":
        # A Responses answer cut short (max_output_tokens) or failed says so, and why.
        metadata["status"] = status
        metadata.update({k: answer[k] for k in ("incomplete_details", "error") if answer.get(k) is not None})
    # The model that answered (track_genai's too), priced as such: never an alias the URL named.
    model = (
        (usage.model if usage is not None else None)
        or answer.get("model")
        or answer.get("modelVersion")
        or found.model
    )
    model = model if isinstance(model, str) else None
    return {
        "id": span_id,
        "trace_id": trace.trace_id,
        "parent_span_id": parent_id,
        "name": f"{found.name}: {model}" if found.model is not None else found.name,
        "type": "llm",
        "start_time": started,
        "end_time": time.time(),
        "input": (request.body or {}).get("json"),
        "output": {found.output: answer.get(found.output)} if answer else None,
        "metadata": metadata,
        "tags": None,
        "model": model,
        "provider": found.provider,
        "usage": tokens,
        "total_cost": None,  # priced with the trial's other spans (a batch's answer at its price)
        "error_info": None,
    }


def assembled(found: _Endpoint, response: RecordedResponse) -> dict[str, Any] | None:
    """The answer as one JSON object: the body itself, or a stream's events put together as the
    SDKs' stream helpers do (OpenAI chat chunks, the Responses API's terminal event: completed,
    incomplete or failed, Anthropic's message events, Gemini's partial responses, as server-sent
    events or a JSON array); None for a body that is neither."""
    events = events_of(response)
    if not events:
        return None
    body = (response.body or {}).get("json")
    if body is not None and not isinstance(body, list):
        return body if isinstance(body, dict) else None
    objects = [event for event in events if isinstance(event, dict)]
    if found.output == "choices":
        return _chat_stream(objects)
    if found.output == "output":
        ended = [e.get("response") for e in objects if e.get("type") in _RESPONSE_ENDS]
        return next((r for r in ended if isinstance(r, dict)), None)
    if found.output == "candidates":
        return _gemini_stream(objects)
    return _message_stream(objects)


def _chat_stream(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """OpenAI chat completion chunks as one completion: each choice's content joined, its tool
    calls' fragments joined by their index (the id and name come in the first)."""
    answer: dict[str, Any] = {}
    choices: dict[int, _Choice] = {}
    for chunk in chunks:
        answer.update({k: chunk[k] for k in ("id", "model", "created", "usage") if chunk.get(k) is not None})
        for delta in chunk.get("choices") or ():
            if isinstance(delta, Mapping):
                choices.setdefault(delta.get("index", 0), _Choice()).add(delta)
    answer["choices"] = [choices[index].made(index) for index in sorted(choices)]
    return answer


class _Choice:
    """One choice of a streamed chat completion, as its deltas come."""

    def __init__(self) -> None:
        self.content: str | None = None
        self.finish_reason: Any = None
        self.calls: dict[int, dict[str, Any]] = {}

    def add(self, choice: Mapping[str, Any]) -> None:
        delta = choice.get("delta") or {}
        if isinstance(delta.get("content"), str):
            self.content = (self.content or "") + delta["content"]
        for fragment in delta.get("tool_calls") or ():
            if isinstance(fragment, Mapping):
                self._join(fragment)
        if choice.get("finish_reason") is not None:
            self.finish_reason = choice["finish_reason"]

    def _join(self, fragment: Mapping[str, Any]) -> None:
        index = fragment.get("index")
        if not isinstance(index, int):
            index = max(self.calls, default=0)  # no index (some OpenAI-compatible servers): the last
        new_id = fragment.get("id")
        if new_id and index in self.calls and self.calls[index]["id"] not in (None, new_id):
            # Another call's first fragment under an index already taken (a server that numbers
            # every call 0, or none): a call of its own.
            index = max(self.calls) + 1
        call = self.calls.setdefault(
            index, {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
        )
        if new_id:
            call["id"] = new_id
        function = fragment.get("function") or {}
        for key in ("name", "arguments"):
            if isinstance(function.get(key), str):
                call["function"][key] += function[key]

    def made(self, index: int) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.calls:
            message["tool_calls"] = [self.calls[k] for k in sorted(self.calls)]
        return {"index": index, "message": message, "finish_reason": self.finish_reason}


def _message_stream(events: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Anthropic's message events as one message: ``message_start``'s message, each content
    block from its ``content_block_start`` and deltas (text joined; a tool_use's input from its
    ``input_json_delta`` fragments), the stop reason from ``message_delta``."""
    message: dict[str, Any] | None = None
    blocks: dict[int, dict[str, Any]] = {}
    partial: dict[int, str] = {}
    for event in events:
        kind, index = event.get("type"), event.get("index", 0)
        if kind == "message_start" and isinstance(event.get("message"), dict):
            message = dict(event["message"])
        elif kind == "content_block_start" and isinstance(event.get("content_block"), dict):
            blocks[index] = dict(event["content_block"])
        elif kind == "content_block_delta" and isinstance(event.get("delta"), dict):
            _block_delta(
                blocks.setdefault(index, {"type": "text", "text": ""}), event["delta"], partial, index
            )
        elif kind == "message_delta" and message is not None and isinstance(event.get("delta"), dict):
            message.update({k: v for k, v in event["delta"].items() if v is not None})
    if message is None:
        return None
    for index, text in partial.items():
        try:
            blocks[index]["input"] = json.loads(text) if text else {}
        except ValueError:
            blocks[index]["input"] = text  # cut short: kept as it came
    message["content"] = [blocks[index] for index in sorted(blocks)]
    return message


def _block_delta(
    block: dict[str, Any], delta: Mapping[str, Any], partial: dict[int, str], index: int
) -> None:
    """One delta added to its block, as the anthropic SDK's stream accumulates it (a
    ``redacted_thinking`` block comes whole in its start, with no delta)."""
    kind = delta.get("type")
    if kind == "text_delta":
        block["text"] = str(block.get("text", "")) + str(delta.get("text", ""))
    elif kind == "input_json_delta":
        partial[index] = partial.get(index, "") + str(delta.get("partial_json", ""))
    elif kind == "thinking_delta":
        block["thinking"] = str(block.get("thinking", "")) + str(delta.get("thinking", ""))
    elif kind == "signature_delta":
        block["signature"] = delta.get("signature")
    elif kind == "citations_delta":
        # A text block may start with "citations": null, as the SDK's TextBlock allows.
        block["citations"] = [*(block.get("citations") or ()), delta.get("citation")]


def _gemini_stream(chunks: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Gemini's partial responses as one: each candidate's parts in order, text that follows
    text joined (a thought's apart from the answer's), a function call as it came (whole, in one
    chunk, from the Gemini API; in pieces, from Vertex AI asked to stream its arguments, joined);
    the last finish reason, usage and model version."""
    if not chunks:
        return None
    answer: dict[str, Any] = {}
    candidates: dict[int, dict[str, Any]] = {}
    for chunk in chunks:
        answer.update({k: v for k, v in chunk.items() if k != "candidates" and v is not None})
        for given in chunk.get("candidates") or ():
            if not isinstance(given, Mapping):
                continue
            candidate = candidates.setdefault(
                given.get("index", 0), {"content": {"parts": [], "role": "model"}}
            )
            candidate.update({k: v for k, v in given.items() if k != "content" and v is not None})
            content = given.get("content")
            parts = content.get("parts") if isinstance(content, Mapping) else None
            for part in parts if isinstance(parts, list) else ():
                if isinstance(part, Mapping):
                    _add_part(candidate["content"]["parts"], part)
    answer["candidates"] = [candidates[index] for index in sorted(candidates)]
    return answer


_TEXT_KEYS = frozenset({"text", "thought", "thoughtSignature"})


def _add_part(parts: list[dict[str, Any]], part: Mapping[str, Any]) -> None:
    call = part.get("functionCall")
    if isinstance(call, Mapping) and (
        "partialArgs" in call or "willContinue" in call or not isinstance(call.get("name"), str)
    ):
        _add_call_piece(parts, part, call)
        return
    last = parts[-1] if parts else None
    if (
        last is not None
        and isinstance(part.get("text"), str)
        and isinstance(last.get("text"), str)
        and _TEXT_KEYS.issuperset(part)
        and _TEXT_KEYS.issuperset(last)
        and bool(part.get("thought")) == bool(last.get("thought"))
    ):
        last["text"] += part["text"]
        if part.get("thoughtSignature"):
            last["thoughtSignature"] = part["thoughtSignature"]
        return
    parts.append(dict(part))


def _add_call_piece(parts: list[dict[str, Any]], part: Mapping[str, Any], piece: Mapping[str, Any]) -> None:
    """A piece of a function call Vertex AI streams in pieces (``streamFunctionCallArguments``):
    its name in the first, its arguments as ``partialArgs`` (a JSON path and a value, a string
    in pieces), ``willContinue`` until its last; a call with no name and nothing open ends a
    stream, and is no call."""
    open_call = parts[-1].get("functionCall") if parts else None
    if not (isinstance(open_call, dict) and open_call.get("willContinue")):
        if not isinstance(piece.get("name"), str):
            return
        given = piece.get("args")
        open_call = {"name": piece["name"], "args": dict(given) if isinstance(given, Mapping) else {}}
        parts.append({**part, "functionCall": open_call})
    if isinstance(piece.get("id"), str):
        open_call["id"] = piece["id"]
    args = open_call.setdefault("args", {})
    for partial in piece.get("partialArgs") or ():
        if isinstance(partial, Mapping) and isinstance(args, dict):
            _set_partial(args, partial)
    if piece.get("willContinue"):
        open_call["willContinue"] = True
    else:
        open_call.pop("willContinue", None)


# A step of a JSON path (RFC 9535) as partialArgs name one: .name, [index] or ['name'].
_PATH_STEP = re.compile(r"\.([^.\[\]]+)|\[(\d+)\]|\['([^']*)'\]")
_PARTIAL_VALUES = ("stringValue", "numberValue", "boolValue", "nullValue")


def _set_partial(args: dict[str, Any], partial: Mapping[str, Any]) -> None:
    """One partial argument set at its path in ``args``: a string's piece added to what came."""
    path = partial.get("jsonPath")
    kind = next((key for key in _PARTIAL_VALUES if key in partial), None)
    if not isinstance(path, str) or not path.startswith("$") or kind is None:
        return
    steps: list[str | int] = [
        int(index) if index else name or quoted for name, index, quoted in _PATH_STEP.findall(path[1:])
    ]
    holder: Any = args
    for step, after in itertools.pairwise(steps):
        holder = _slot(holder, step, [] if isinstance(after, int) else {})
    if not steps or _slot(holder, steps[-1], None) is _NO_SLOT:
        return
    value = None if kind == "nullValue" else partial[kind]
    came = holder[steps[-1]]
    holder[steps[-1]] = came + value if isinstance(came, str) and isinstance(value, str) else value


_NO_SLOT: Any = object()  # a step the holder cannot take (a name in a list, an index in an object)


def _slot(holder: Any, step: str | int, empty: Any) -> Any:
    """What ``holder`` has at ``step``, made ``empty`` where it has nothing (a list extended to
    the index); ``_NO_SLOT`` where the step does not fit it."""
    if isinstance(holder, dict) and isinstance(step, str):
        if holder.get(step) is None:
            holder[step] = empty
        return holder[step]
    if isinstance(holder, list) and isinstance(step, int):
        holder.extend([None] * (step + 1 - len(holder)))
        if holder[step] is None:
            holder[step] = empty
        return holder[step]
    return _NO_SLOT
