"""Local fakes of OpenAI's, Anthropic's and Gemini's APIs for the tests of --eval-batch: the live
endpoints a batch replaces (OpenAI's chat completions, responses, embeddings; Anthropic's messages;
Gemini's generateContent) and the batch APIs (OpenAI's files and batches, Anthropic's message
batches, Gemini's batchGenerateContent and batches), on 127.0.0.1 in a thread,
with a clock the test controls instead of sleeps.

Answers are a pure function of the request, the same live and in a batch, so a batched run and a
live run give the same outputs. A batch stays in progress until the test calls
:meth:`FakeOpenAI.finish` (or ``fail``, ``delete``...). Every request is checked as the provider
checks it; what the fake refuses is kept in ``rejected``, so a test can assert that the plugin sent
nothing wrong. Everything lives in memory: the fake writes no file (the keys it sees stay here).
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import email.parser
import email.policy
import hashlib
import itertools
import json
import os
import random
import re
import signal
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

API_KEY = "sk-fake-SECRET-0123456789abcdef"
BATCH_ENDPOINTS = ("/v1/chat/completions", "/v1/responses", "/v1/embeddings")
# A fixed creation time for the live answers: part of the pure function, unlike OpenAI's.
ANSWERED_AT = 1_764_892_800
ENDED = frozenset({"completed", "failed", "expired", "cancelled"})


class Refused(Exception):
    """A request the fake answers with OpenAI's error shape."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        injected: bool = False,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.injected = injected  # a fault the test asked for, not a bad request


def error_body(
    status: int, message: str, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    kind = "server_error" if status >= 500 else "invalid_request_error"
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def _words(text: str) -> int:
    return len(text.split())


def _text(content: Any) -> str:
    """A message's text: a string, or the text parts of a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def _digest(body: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:24]


# A tool plan, in the first user message of a request that offers tools: the calls the model
# asks for, one per answer, in order (``name{json arguments}`` steps joined by ``>``, ``DONE``
# ending it, ``LOOP step`` asking for that call forever); an answer counts the tool results
# already in the request to know where the plan is, then answers with text. A pure function of
# the request, as every answer here: the same live and in a batch.
_PLAN = re.compile(r"PLAN:\s*(.*)")


def tool_plan(first_user_text: str) -> tuple[list[tuple[str, dict[str, Any]]], bool] | None:
    """The plan's calls and whether its last repeats forever (LOOP), or None without a plan."""
    found = _PLAN.search(first_user_text)
    if found is None:
        return None
    calls: list[tuple[str, dict[str, Any]]] = []
    loop = False
    for step in (part.strip() for part in found.group(1).split(">")):
        if not step or step == "DONE":
            break
        if step.startswith("LOOP "):
            loop, step = True, step[len("LOOP ") :].strip()
        name, _, arguments = step.partition("{")
        calls.append((name.strip(), json.loads("{" + arguments) if arguments else {}))
        if loop:
            break
    return calls, loop


def planned_call(
    plan: tuple[list[tuple[str, dict[str, Any]]], bool], done: int
) -> tuple[str, dict[str, Any]] | None:
    """The call the plan asks for after ``done`` tool results, or None: answer with text."""
    calls, loop = plan
    if done < len(calls):
        return calls[done]
    return calls[-1] if loop and calls else None


def _first_user_text(messages: list[Any]) -> str:
    users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    return _text(users[0].get("content")) if users else ""


def chat_answer(body: Mapping[str, Any]) -> dict[str, Any]:
    """A chat completion: ``"answer to "`` the last user message; usage counts words. With
    ``tools`` and a tool plan (see ``tool_plan``), the planned call as ``tool_calls``."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or "model" not in body:
        raise Refused(400, "'messages' and 'model' are required", param="messages")
    plan = tool_plan(_first_user_text(messages)) if body.get("tools") else None
    done = sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "tool")
    call = None if plan is None else planned_call(plan, done)
    if call is not None:
        return _chat_tool_call(body, call, done)
    users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    content = "answer to " + (_text(users[-1].get("content")) if users else "")
    prompt = sum(_words(_text(m.get("content"))) for m in messages if isinstance(m, dict))
    return {
        "id": f"chatcmpl-{_digest(body)}",
        "object": "chat.completion",
        "created": ANSWERED_AT,
        "model": body["model"],
        "system_fingerprint": "fp_fake",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, "refusal": None},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": _words(content),
            "total_tokens": prompt + _words(content),
        },
    }


def _chat_tool_call(body: Mapping[str, Any], call: tuple[str, dict[str, Any]], done: int) -> dict[str, Any]:
    name, arguments = call
    digest = _digest(body)
    return {
        "id": f"chatcmpl-{digest}",
        "object": "chat.completion",
        "created": ANSWERED_AT,
        "model": body["model"],
        "system_fingerprint": "fp_fake",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "refusal": None,
                    "tool_calls": [
                        {
                            "id": f"call_{digest[:12]}_{done}",
                            "type": "function",
                            "function": {"name": name, "arguments": json.dumps(arguments)},
                        }
                    ],
                },
                "logprobs": None,
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def responses_answer(body: Mapping[str, Any]) -> dict[str, Any]:
    """A Responses API answer, the same rule: the text of the last user input. With ``tools``
    and a tool plan (see ``tool_plan``), the planned call as a ``function_call`` output item."""
    given = body.get("input")
    if "model" not in body or given is None:
        raise Refused(400, "'input' and 'model' are required", param="input")
    items = [{"role": "user", "content": given}] if isinstance(given, str) else list(given)
    # The model's earlier function_call items and the app's outputs have no role: not turns.
    turns = [_text(m.get("content")) for m in items if isinstance(m, dict) and "role" in m]
    plan = tool_plan(_first_user_text(items)) if body.get("tools") else None
    done = sum(1 for m in items if isinstance(m, dict) and m.get("type") == "function_call_output")
    call = None if plan is None else planned_call(plan, done)
    content = "answer to " + (turns[-1] if turns else "")
    prompt = sum(_words(t) for t in turns)
    digest = _digest(body)
    # An answer longer than max_output_tokens (a word a token here) is cut there: incomplete.
    most = body.get("max_output_tokens")
    if most is not None and (not isinstance(most, int) or most < 16):
        raise Refused(
            400, "Invalid 'max_output_tokens': expected an integer >= 16", param="max_output_tokens"
        )
    status = "completed"
    if most is not None and call is None and _words(content) > most:
        content, status = " ".join(content.split()[:most]), "incomplete"
    if call is None:
        output: dict[str, Any] = {
            "type": "message",
            "id": f"msg_{digest}",
            "status": status,
            "role": "assistant",
            "content": [{"type": "output_text", "text": content, "annotations": []}],
        }
    else:
        output = {
            "type": "function_call",
            "id": f"fc_{digest}",
            "call_id": f"call_{digest[:12]}_{done}",
            "name": call[0],
            "arguments": json.dumps(call[1]),
            "status": "completed",
        }
        content = ""
    return {
        "id": f"resp_{digest}",
        "object": "response",
        "created_at": ANSWERED_AT,
        "status": status,
        "model": body["model"],
        "output": [output],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": None,
        "metadata": {},
        "usage": {
            "input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": _words(content),
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt + _words(content),
        },
    }


def embeddings_answer(body: Mapping[str, Any]) -> dict[str, Any]:
    """Embeddings: four numbers per input, from the input's hash."""
    given = body.get("input")
    if "model" not in body or given is None:
        raise Refused(400, "'input' and 'model' are required", param="input")
    inputs = [given] if isinstance(given, str) else list(given)
    data = [
        {
            "object": "embedding",
            "index": index,
            "embedding": [b / 255 for b in hashlib.sha256(str(text).encode()).digest()[:4]],
        }
        for index, text in enumerate(inputs)
    ]
    tokens = sum(_words(str(text)) for text in inputs)
    return {
        "object": "list",
        "data": data,
        "model": body["model"],
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


ANSWERS: dict[str, Callable[[Mapping[str, Any]], dict[str, Any]]] = {
    "/v1/chat/completions": chat_answer,
    "/v1/responses": responses_answer,
    "/v1/embeddings": embeddings_answer,
}


@dataclasses.dataclass
class StoredFile:
    object: dict[str, Any]  # OpenAI's FileObject
    content: bytes


@dataclasses.dataclass
class BatchState:
    """What the fake knows of a batch beyond the object it shows."""

    object: dict[str, Any]  # OpenAI's Batch, Anthropic's MessageBatch
    requests: list[dict[str, Any]]  # in order: the input file's lines, or {custom_id, params}
    results: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)  # custom_id -> line
    extra: list[str] = dataclasses.field(default_factory=list)
    dropped: set[str] = dataclasses.field(default_factory=set)
    deleted: bool = False


@dataclasses.dataclass(frozen=True)
class Rejection:
    method: str
    path: str
    status: int
    message: str


def _page(items: list[dict[str, Any]], query: Mapping[str, list[str]], most: int) -> dict[str, Any]:
    """A cursor page as OpenAI lists: ``after`` an id, at most ``limit`` (1..most)."""
    after = query.get("after", [None])[0]
    try:
        limit = int(query.get("limit", ["20"])[0])
    except ValueError:
        raise Refused(400, "limit must be an integer", param="limit") from None
    if not 1 <= limit <= most:
        raise Refused(400, f"limit must be between 1 and {most}", param="limit")
    if after is not None:
        ids = [item["id"] for item in items]
        if after not in ids:
            raise Refused(400, f"No such object: {after!r}", param="after")
        items = items[ids.index(after) + 1 :]
    page = items[:limit]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": len(items) > limit,
    }


class FakeProvider:
    """What the fakes of the providers share: the server on 127.0.0.1 in a thread, the clock, the
    batches in memory, the faults a test asks for and the record of what was refused. A provider's
    fake names its routes, checks its credentials, shapes its errors and says when a batch ended."""

    def __init__(self, *, api_key: str) -> None:
        self.api_key = api_key
        # The clock of created_at and the other timestamps: a test may set its own.
        self.clock: Callable[[], float] = time.time
        self.live_calls: list[tuple[str, dict[str, Any]]] = []
        self.rejected: list[Rejection] = []
        self.creates = 0  # batches created
        self._batches: dict[str, BatchState] = {}
        self._ids = itertools.count(1)
        self._refusals: list[int] = []
        self._kill: Path | None = None
        self._lock = threading.RLock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        # A short poll: close() waits for the loop to see the shutdown.
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()
        self.port = int(self._server.server_address[1])
        self.origin = f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    @property
    def batches(self) -> dict[str, dict[str, Any]]:
        """The batches not deleted, id -> the batch object as the provider would show it now."""
        with self._lock:
            return {bid: dict(s.object) for bid, s in self._batches.items() if not s.deleted}

    # -- the test's controls, whatever the provider -----------------------------------------------

    def delete(self, batch_id: str) -> None:
        """The batch is gone on the provider's side: retrieving it answers 404."""
        with self._lock:
            self._batches[batch_id].deleted = True

    def refuse_creates(self, status: int, times: int = 1) -> None:
        """The next ``times`` batch creations answer ``status`` (and create nothing)."""
        with self._lock:
            self._refusals.extend([status] * times)

    def extra_results(self, batch_id: str, custom_ids: Iterable[str]) -> None:
        """Results for requests the batch never had, among its output."""
        with self._lock:
            state = self._batches[batch_id]
            state.extra.extend(custom_ids)
            self._results_changed(state)

    def drop_results(self, batch_id: str, custom_ids: Iterable[str]) -> None:
        """No result line at all for these requests."""
        with self._lock:
            state = self._batches[batch_id]
            state.dropped.update(custom_ids)
            self._results_changed(state)

    def kill_on_create(self, pid_file: Path) -> None:
        """At the next batch creation, once the batch exists and before answering, SIGKILL the
        process whose pid ``pid_file`` holds: a client killed mid-submit, deterministically."""
        with self._lock:
            self._kill = pid_file

    # -- what each provider's fake says ------------------------------------------------------------

    def routes(self) -> Mapping[tuple[str, str], Route]:
        """(method, path pattern) -> what answers it, given the fake, the request and the groups."""
        raise NotImplementedError

    def authorize(self, headers: Mapping[str, str]) -> None:
        """Raise Refused unless the headers (names in lower case) carry the key and all else."""
        raise NotImplementedError

    def error_body(self, refused: Refused) -> dict[str, Any]:
        """The provider's shape of an error answer."""
        raise NotImplementedError

    def ended(self, state: BatchState) -> bool:
        raise NotImplementedError

    def key(self, batch: Mapping[str, Any]) -> str:
        """The batch's id, by which the test's controls name it."""
        return str(batch["id"])

    def _results_changed(self, state: BatchState) -> None:
        """The test changed what an ended batch's results hold (``extra``, ``dropped``)."""

    # -- the batches' life, whatever the provider ---------------------------------------------------

    def _pick(self, batch_id: str | None) -> list[BatchState]:
        if batch_id is not None:
            return [self._batches[batch_id]]
        return [s for s in self._batches.values() if not self.ended(s) and not s.deleted]

    def _new_id(self, prefix: str) -> str:
        # Ordered as created, and unguessable enough to look like a provider's.
        return f"{prefix}{next(self._ids):06d}{os.urandom(6).hex()}"

    def _refuse_if_asked(self) -> None:
        """At the start of a creation: the fault ``refuse_creates`` asked for, if one is left."""
        with self._lock:
            if self._refusals:
                status = self._refusals.pop(0)
                message = f"The fake refuses this batch with HTTP {status} (as asked)."
                raise Refused(status, message, injected=True)

    def _add(self, state: BatchState) -> None:
        """A batch created; then the kill ``kill_on_create`` asked for, before the answer."""
        with self._lock:
            self._batches[self.key(state.object)] = state
            self.creates += 1
            kill, self._kill = self._kill, None
        if kill is not None:
            os.kill(int(kill.read_text()), signal.SIGKILL)

    # -- HTTP ---------------------------------------------------------------------------------

    def serve(
        self, method: str, target: str, headers: Mapping[str, str], raw: bytes
    ) -> tuple[int, bytes, str]:
        """One request's answer: status, body and content type. What the fake refuses (but
        for the faults a test asked for) is kept in ``rejected``."""
        url = urlsplit(target)
        headers = {name.lower(): value for name, value in headers.items()}
        try:
            self.authorize(headers)
            request = Request(url.path, parse_qs(url.query), raw, headers.get("content-type", ""))
            for (verb, pattern), route in self.routes().items():
                if verb == method and (match := re.fullmatch(pattern, url.path)):
                    answer = route(self, request, *match.groups())
                    break
            else:
                raise Refused(404, f"Invalid URL ({method} {url.path})")
        except Refused as refused:
            if not refused.injected:
                with self._lock:
                    self.rejected.append(Rejection(method, url.path, refused.status, refused.message))
            return refused.status, json.dumps(self.error_body(refused)).encode(), "application/json"
        if isinstance(answer, bytes):
            return 200, answer, "application/octet-stream"
        if isinstance(answer, list):
            return 200, b"".join(answer), "text/event-stream"
        return 200, json.dumps(answer).encode(), "application/json"


def _handler(fake: FakeProvider) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the SDKs' clients use
        # Headers and body go in two writes: without this, each answer waits on a delayed ACK.
        disable_nagle_algorithm = True

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def do_DELETE(self) -> None:
            self._serve("DELETE")

        def handle(self) -> None:
            try:
                super().handle()
            except ConnectionError:  # the client is gone (killed mid-submit): not an error here
                self.close_connection = True

        def _serve(self, method: str) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            status, data, kind = fake.serve(method, self.path, dict(self.headers.items()), raw)
            try:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.send_header("x-request-id", f"req_{os.urandom(8).hex()}")
                self.end_headers()
                self.wfile.write(data)
            except OSError:  # the client is gone (killed mid-submit)
                self.close_connection = True

        def log_message(self, format: str, *args: Any) -> None:
            pass  # not on the test's stderr

    return Handler


class FakeOpenAI(FakeProvider):
    """OpenAI's live endpoints and Batch API on ``base_url``; see the module's docstring."""

    def __init__(
        self, *, api_key: str = API_KEY, max_lines: int = 50_000, max_bytes: int = 200 * 1024 * 1024
    ) -> None:
        super().__init__(api_key=api_key)
        self.max_lines = max_lines
        self.max_bytes = max_bytes
        self.uploads: list[dict[str, Any]] = []  # every file uploaded: {id, filename, lines}
        self.files: dict[str, StoredFile] = {}
        self.base_url = f"{self.origin}/v1"

    def routes(self) -> Mapping[tuple[str, str], Route]:
        return ROUTES

    def authorize(self, headers: Mapping[str, str]) -> None:
        if headers.get("authorization") != f"Bearer {self.api_key}":
            raise Refused(401, "Incorrect API key provided.", code="invalid_api_key")

    def error_body(self, refused: Refused) -> dict[str, Any]:
        return error_body(refused.status, refused.message, refused.param, refused.code)

    def ended(self, state: BatchState) -> bool:
        return state.object["status"] in ENDED

    def _results_changed(self, state: BatchState) -> None:
        self._write_results(state)

    # -- the test's controls ------------------------------------------------------------------

    def finish(
        self,
        batch_id: str | None = None,
        *,
        error: Iterable[str] = (),
        expire: Iterable[str] = (),
        http_error: Mapping[str, int] | None = None,
    ) -> None:
        """End a batch (or every batch not ended): each request is answered now, as live, but
        those in ``error`` (no response, ``server_error``), ``expire`` (``batch_expired``, and the
        batch ``expired``) and ``http_error`` (a response with that status). A batch being
        cancelled ends ``cancelled``, its requests ``batch_cancelled``."""
        errors, expired, statuses = set(error), set(expire), dict(http_error or {})
        with self._lock:
            for state in self._pick(batch_id):
                self._end(state, errors, expired, statuses)

    def fail(
        self, batch_id: str, message: str, *, code: str = "token_limit_exceeded", line: int | None = None
    ) -> None:
        """The whole batch fails, as one over the enqueued-token limit does: no results."""
        with self._lock:
            state = self._batches[batch_id]
            state.object.update(
                status="failed",
                failed_at=int(self.clock()),
                errors={
                    "object": "list",
                    "data": [{"code": code, "message": message, "param": None, "line": line}],
                },
            )

    # -- the batches' life ----------------------------------------------------------------------

    def _end(self, state: BatchState, errors: set[str], expired: set[str], statuses: dict[str, int]) -> None:
        batch = state.object
        if batch["status"] in ENDED:
            raise ValueError(f"batch {batch['id']} has already ended ({batch['status']})")
        cancelled = batch["status"] == "cancelling"
        now = int(self.clock())
        for number, request in enumerate(state.requests):
            custom_id = request["custom_id"]
            line: dict[str, Any] = {"id": f"batch_req_{batch['id'][6:]}_{number}", "custom_id": custom_id}
            if cancelled or custom_id in errors or custom_id in expired:
                code, message = (
                    ("batch_cancelled", "This request was cancelled with its batch.")
                    if cancelled
                    else (
                        "batch_expired",
                        "This request could not be executed before the completion window expired.",
                    )
                    if custom_id in expired
                    else ("server_error", "The server had an error while processing this request.")
                )
                line.update(response=None, error={"code": code, "message": message})
            elif custom_id in statuses:
                status = statuses[custom_id]
                body = error_body(status, f"The request failed with status {status}.")
                line.update(response=self._response(status, body, number, batch), error=None)
            else:
                answer = ANSWERS[request["url"]](request["body"])
                line.update(response=self._response(200, answer, number, batch), error=None)
            state.results[custom_id] = line
        failed = sum(
            1 for line in state.results.values() if line["error"] or line["response"]["status_code"] >= 400
        )
        ended = "cancelled" if cancelled else "expired" if expired else "completed"
        batch.update(
            status=ended,
            in_progress_at=batch["in_progress_at"] or now,
            finalizing_at=now,
            request_counts={
                "completed": len(state.requests) - failed,
                "failed": failed,
                "total": len(state.requests),
            },
        )
        batch[f"{ended}_at"] = now
        self._write_results(state)

    @staticmethod
    def _response(status: int, body: dict[str, Any], number: int, batch: dict[str, Any]) -> dict[str, Any]:
        return {"status_code": status, "request_id": f"req_{batch['id'][6:]}_{number}", "body": body}

    def _write_results(self, state: BatchState) -> None:
        """The output and error files of an ended batch, in a shuffled order (results are matched
        by custom_id, never by position): successes in one, failures in the other."""
        batch = state.object
        if batch["status"] not in ("completed", "expired", "cancelled"):
            return
        lines = [line for cid, line in state.results.items() if cid not in state.dropped]
        for number, custom_id in enumerate(state.extra):
            body = {
                "model": batch["model"] or "gpt-4.1-mini",
                "messages": [{"role": "user", "content": custom_id}],
            }
            answer = chat_answer(body)
            lines.append(
                {
                    "id": f"batch_req_extra_{number}",
                    "custom_id": custom_id,
                    "response": self._response(200, answer, 10_000 + number, batch),
                    "error": None,
                }
            )
        random.Random(batch["id"]).shuffle(lines)
        ok = [line for line in lines if line["response"] and line["response"]["status_code"] < 400]
        bad = [line for line in lines if line not in ok]
        for key, chosen in (("output_file_id", ok), ("error_file_id", bad)):
            content = b"".join(json.dumps(line).encode() + b"\n" for line in chosen)
            if batch[key] is None and chosen:
                name = f"{batch['id']}_{key.split('_')[0]}.jsonl"
                batch[key] = self._store_file(name, "batch_output", content).object["id"]
            elif batch[key] is not None:
                stored = self.files[batch[key]]
                stored.content = content
                stored.object["bytes"] = len(content)

    # -- storage ------------------------------------------------------------------------------

    def _store_file(self, filename: str, purpose: str, content: bytes) -> StoredFile:
        file_id = self._new_id("file-")
        stored = StoredFile(
            {
                "id": file_id,
                "object": "file",
                "bytes": len(content),
                "created_at": int(self.clock()),
                "filename": filename,
                "purpose": purpose,
                "status": "processed",
                "expires_at": None,
                "status_details": None,
            },
            content,
        )
        self.files[file_id] = stored
        return stored

    def upload(self, form: Mapping[str, tuple[str | None, bytes]]) -> dict[str, Any]:
        purpose = form.get("purpose", (None, b""))[1].decode()
        if purpose != "batch":
            raise Refused(400, f"This fake takes purpose 'batch' only, not {purpose!r}", param="purpose")
        if "file" not in form:
            raise Refused(400, "'file' is a required property", param="file")
        filename, content = form["file"]
        if len(content) > self.max_bytes:
            raise Refused(400, f"The file is over {self.max_bytes} bytes", param="file")
        lines = [
            _input_line(number, raw) for number, raw in enumerate(content.splitlines(), 1) if raw.strip()
        ]
        if not lines:
            raise Refused(400, "The batch file has no request", param="file")
        if len(lines) > self.max_lines:
            raise Refused(
                400, f"The batch file has {len(lines)} requests, over {self.max_lines}", param="file"
            )
        seen: set[str] = set()
        for number, line in enumerate(lines, 1):
            if line["custom_id"] in seen:
                raise Refused(
                    400, f"Line {number}: custom_id {line['custom_id']!r} is not unique", param="file"
                )
            seen.add(line["custom_id"])
        with self._lock:
            stored = self._store_file(filename or "upload.jsonl", "batch", content)
            self.uploads.append({"id": stored.object["id"], "filename": filename, "lines": lines})
            return stored.object

    def create(self, body: Mapping[str, Any]) -> dict[str, Any]:
        self._refuse_if_asked()
        endpoint, metadata = _batch_params(body)
        with self._lock:
            stored = self.files.get(str(body.get("input_file_id")))
            if stored is None or stored.object["purpose"] != "batch":
                raise Refused(
                    404, f"No such File object: {body.get('input_file_id')!r}", param="input_file_id"
                )
            requests = [json.loads(raw) for raw in stored.content.splitlines() if raw.strip()]
            wrong = [r["custom_id"] for r in requests if r["url"] != endpoint]
            if wrong:
                raise Refused(
                    400,
                    f"Request {wrong[0]!r} has a url other than the batch's endpoint {endpoint}",
                    param="input_file_id",
                )
            models = {r["body"].get("model") for r in requests}
            if len(models) != 1:
                raise Refused(
                    400,
                    f"A batch takes one model, this file has {sorted(map(str, models))}",
                    param="input_file_id",
                )
            now = int(self.clock())
            batch_id = self._new_id("batch_")
            batch = {
                "id": batch_id,
                "object": "batch",
                "endpoint": endpoint,
                "model": models.pop(),
                "errors": None,
                "input_file_id": stored.object["id"],
                "completion_window": "24h",
                "status": "validating",
                "output_file_id": None,
                "error_file_id": None,
                "created_at": now,
                "in_progress_at": None,
                "expires_at": now + 24 * 3600,
                "finalizing_at": None,
                "completed_at": None,
                "failed_at": None,
                "expired_at": None,
                "cancelling_at": None,
                "cancelled_at": None,
                "request_counts": {"completed": 0, "failed": 0, "total": len(requests)},
                "metadata": dict(metadata),
            }
        # Answered "validating", as OpenAI answers; in progress from then on, until finished.
        self._add(BatchState({**batch, "status": "in_progress", "in_progress_at": now}, requests))
        return batch

    def retrieve(self, batch_id: str) -> dict[str, Any]:
        with self._lock:
            state = self._batches.get(batch_id)
            if state is None or state.deleted:
                raise Refused(404, f"No batch found with id '{batch_id}'.")
            return dict(state.object)

    def cancel(self, batch_id: str) -> dict[str, Any]:
        with self._lock:
            batch = self.retrieve(batch_id)
            if batch["status"] not in ("validating", "in_progress", "finalizing"):
                raise Refused(400, f"Cannot cancel a batch with status '{batch['status']}'.")
            state = self._batches[batch_id]
            state.object.update(status="cancelling", cancelling_at=int(self.clock()))
            return dict(state.object)

    def list_batches(self, query: Mapping[str, list[str]]) -> dict[str, Any]:
        with self._lock:
            newest = [dict(s.object) for s in reversed(self._batches.values()) if not s.deleted]
        return _page(newest, query, 100)

    def list_files(self, query: Mapping[str, list[str]]) -> dict[str, Any]:
        order = query.get("order", ["desc"])[0]
        if order not in ("asc", "desc"):
            raise Refused(400, "order must be 'asc' or 'desc'", param="order")
        purpose = query.get("purpose", [None])[0]
        with self._lock:
            files = [dict(f.object) for f in self.files.values() if purpose in (None, f.object["purpose"])]
        return _page(files[::-1] if order == "desc" else files, query, 10_000)

    def file(self, file_id: str) -> StoredFile:
        with self._lock:
            stored = self.files.get(file_id)
        if stored is None:
            raise Refused(404, f"No such File object: {file_id}", param="id")
        return stored

    def delete_file(self, file_id: str) -> dict[str, Any]:
        with self._lock:
            self.file(file_id)
            del self.files[file_id]
        return {"id": file_id, "object": "file", "deleted": True}

    def live(self, path: str, body: dict[str, Any]) -> dict[str, Any] | list[bytes]:
        """A live answer: JSON, or a chat completion's event stream when ``stream`` is set."""
        answer = ANSWERS[path](body)
        with self._lock:
            self.live_calls.append((path, body))
        if path == "/v1/chat/completions" and body.get("stream"):
            return _stream(answer, bool((body.get("stream_options") or {}).get("include_usage")))
        if path == "/v1/responses" and body.get("stream"):
            return _responses_stream(answer)
        return answer


@dataclasses.dataclass(frozen=True)
class Request:
    path: str
    query: dict[str, list[str]]
    raw: bytes
    content_type: str


Route = Callable[..., Any]
# (method, path pattern) -> what answers it, given the fake, the request and the pattern's groups.
ROUTES: dict[tuple[str, str], Route] = {
    ("POST", "/v1/(?:chat/completions|responses|embeddings)"): lambda f, r: f.live(
        r.path, _json_object(r.raw)
    ),
    ("POST", "/v1/files"): lambda f, r: f.upload(_multipart(r.raw, r.content_type)),
    ("GET", "/v1/files"): lambda f, r: f.list_files(r.query),
    ("GET", "/v1/files/([^/]+)"): lambda f, r, file_id: dict(f.file(file_id).object),
    ("GET", "/v1/files/([^/]+)/content"): lambda f, r, file_id: f.file(file_id).content,
    ("DELETE", "/v1/files/([^/]+)"): lambda f, r, file_id: f.delete_file(file_id),
    ("POST", "/v1/batches"): lambda f, r: f.create(_json_object(r.raw)),
    ("GET", "/v1/batches"): lambda f, r: f.list_batches(r.query),
    ("GET", "/v1/batches/([^/]+)"): lambda f, r, batch_id: f.retrieve(batch_id),
    ("POST", "/v1/batches/([^/]+)/cancel"): lambda f, r, batch_id: f.cancel(batch_id),
}


def _stream(answer: dict[str, Any], usage: bool) -> list[bytes]:
    """A chat completion as server-sent events: the content in one chunk (a tool call in two:
    its id and name, then its arguments, as OpenAI cuts them), then the end."""
    base = {key: answer[key] for key in ("id", "created", "model", "system_fingerprint")}
    base["object"] = "chat.completion.chunk"
    choice = answer["choices"][0]
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": choice["message"]["content"]}]
    for index, call in enumerate(choice["message"].get("tool_calls") or ()):
        function = call["function"]
        deltas.append(
            {
                "tool_calls": [
                    {
                        "index": index,
                        "id": call["id"],
                        "type": "function",
                        "function": {"name": function["name"], "arguments": ""},
                    }
                ]
            }
        )
        deltas.append({"tool_calls": [{"index": index, "function": {"arguments": function["arguments"]}}]})
    chunks = [{**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]} for delta in deltas]
    chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]})
    if usage:
        chunks.append({**base, "choices": [], "usage": answer["usage"]})
    return [f"data: {json.dumps(chunk)}\n\n".encode() for chunk in chunks] + [b"data: [DONE]\n\n"]


def _responses_stream(response: dict[str, Any]) -> list[bytes]:
    """A Responses answer as its stream of events: created, each output item (a message's text
    in one delta), then the terminal event of its status (``response.completed``, or
    ``response.incomplete`` for an answer cut short)."""
    started = {**response, "status": "in_progress", "output": [], "usage": None}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": started},
        {"type": "response.in_progress", "response": started},
    ]
    for index, item in enumerate(response["output"]):
        where = {"item_id": item["id"], "output_index": index}
        if item["type"] != "message":
            events.append({"type": "response.output_item.added", "output_index": index, "item": item})
            events.append({"type": "response.output_item.done", "output_index": index, "item": item})
            continue
        events.append(
            {
                "type": "response.output_item.added",
                "output_index": index,
                "item": {**item, "status": "in_progress", "content": []},
            }
        )
        for number, part in enumerate(item["content"]):
            empty = {**part, "text": ""}
            at = {**where, "content_index": number}
            events += [
                {"type": "response.content_part.added", **at, "part": empty},
                {"type": "response.output_text.delta", **at, "delta": part["text"], "logprobs": []},
                {"type": "response.output_text.done", **at, "text": part["text"], "logprobs": []},
                {"type": "response.content_part.done", **at, "part": part},
            ]
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    events.append({"type": f"response.{response['status']}", "response": response})
    return [
        f"event: {event['type']}\ndata: {json.dumps({**event, 'sequence_number': number})}\n\n".encode()
        for number, event in enumerate(events)
    ]


def _batch_params(body: Mapping[str, Any]) -> tuple[str, dict[str, str]]:
    """A batch creation's endpoint and metadata, checked as OpenAI checks them."""
    endpoint = body.get("endpoint")
    if not isinstance(endpoint, str) or endpoint not in BATCH_ENDPOINTS:
        raise Refused(400, f"Invalid endpoint {endpoint!r}", param="endpoint")
    if body.get("completion_window") != "24h":
        raise Refused(400, "completion_window must be '24h'", param="completion_window")
    metadata = body.get("metadata") or {}
    if not isinstance(metadata, dict) or len(metadata) > 16:
        raise Refused(400, "metadata: at most 16 key-value pairs", param="metadata")
    for key, value in metadata.items():
        if not isinstance(value, str) or len(key) > 64 or len(value) > 512:
            message = f"metadata {key!r}: keys up to 64, string values up to 512 characters"
            raise Refused(400, message, param="metadata")
    return endpoint, metadata


def _json_object(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw)
    except ValueError:
        raise Refused(400, "We could not parse the JSON body of your request.") from None
    if not isinstance(body, dict):
        raise Refused(400, "The body of your request must be a JSON object.")
    return body


def _multipart(raw: bytes, content_type: str) -> dict[str, tuple[str | None, bytes]]:
    """A multipart/form-data body's fields: name -> (filename, content)."""
    if not content_type.startswith("multipart/form-data"):
        raise Refused(400, "Expected a multipart/form-data body")
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + raw
    )
    fields: dict[str, tuple[str | None, bytes]] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        if isinstance(name, str) and isinstance(payload, bytes):
            fields[name] = (part.get_filename(), payload)
    return fields


def _input_line(number: int, raw: bytes) -> dict[str, Any]:
    """One line of a batch input file, checked as OpenAI checks it."""
    try:
        line = json.loads(raw)
    except ValueError:
        raise Refused(400, f"Line {number} is not valid JSON", param="file") from None
    if not isinstance(line, dict) or not isinstance(line.get("custom_id"), str):
        raise Refused(400, f"Line {number}: 'custom_id' (a string) is required", param="file")
    if line.get("method") != "POST":
        raise Refused(400, f"Line {number}: method must be 'POST'", param="file")
    if line.get("url") not in BATCH_ENDPOINTS:
        raise Refused(400, f"Line {number}: url {line.get('url')!r} is not a batch endpoint", param="file")
    if not isinstance(line.get("body"), dict):
        raise Refused(400, f"Line {number}: 'body' must be an object", param="file")
    return line


# -- Anthropic ---------------------------------------------------------------------------------

ANTHROPIC_KEY = "sk-ant-fake-SECRET-0123456789abcdef"
CUSTOM_ID = re.compile(r"[a-zA-Z0-9_-]{1,64}")
# Anthropic's error type for each status it answers with.
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


def _rfc3339(when: float) -> str:
    return datetime.fromtimestamp(when, timezone.utc).isoformat().replace("+00:00", "Z")


# Anthropic's test string: a prompt that holds it gets a redacted_thinking block (its extended
# thinking guide), so that apps can test that they pass such blocks back.
REDACTED_THINKING_TRIGGER = (
    "ANTHROPIC_MAGIC_STRING_TRIGGER_REDACTED_THINKING_46C9A13E193C177646C7398A98432ECCCE4C1253"
)


def message_answer(params: Mapping[str, Any]) -> dict[str, Any]:
    """A Message: ``"answer to "`` the last user message; usage counts words. Checked as Anthropic
    checks a request: ``model``, ``max_tokens`` (at least 1) and ``messages`` are required. With
    ``thinking`` enabled, the content starts with a thinking block (and a redacted one for a
    prompt with ``REDACTED_THINKING_TRIGGER``), which a turn of tool use must pass back."""
    messages = params.get("messages")
    if not isinstance(params.get("model"), str):
        raise Refused(400, "model: Field required")
    max_tokens = params.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise Refused(400, "max_tokens: must be an integer of at least 1")
    if not isinstance(messages, list) or not messages:
        raise Refused(400, "messages: at least one message is required")
    turns = [m for m in messages if isinstance(m, dict)]
    plan = tool_plan(_first_user_text(turns)) if params.get("tools") else None
    results = [
        block
        for m in turns
        if m.get("role") == "user" and isinstance(m.get("content"), list)
        for block in m["content"]
        if isinstance(block, dict) and block.get("type") == "tool_result"
    ]
    call = None if plan is None else planned_call(plan, len(results))
    thinking = _thinking(params, turns)
    if call is not None:
        digest = _digest(params)
        return {
            "id": f"msg_{digest}",
            "type": "message",
            "role": "assistant",
            "model": params["model"],
            "content": [
                *thinking,
                {
                    "type": "tool_use",
                    "id": f"toolu_{digest[:12]}_{len(results)}",
                    "name": call[0],
                    "input": call[1],
                },
            ],
            "stop_reason": "tool_use",
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 5},
        }
    users = [m for m in turns if m.get("role") == "user" and _text(m.get("content"))]
    text = "answer to " + (_text(users[-1].get("content")) if users else "")
    prompt = sum(_words(_text(m.get("content"))) for m in turns) + _words(_text(params.get("system")))
    return {
        "id": f"msg_{_digest(params)}",
        "type": "message",
        "role": "assistant",
        "model": params["model"],
        "content": [*thinking, {"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": prompt, "output_tokens": _words(text)},
    }


def _thinking(params: Mapping[str, Any], turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The thinking blocks an answer starts with, checked as Anthropic checks extended thinking:
    a budget of at least 1024 tokens, under ``max_tokens``, and each assistant turn of tool use
    passed back starting with its thinking."""
    thinking = params.get("thinking")
    if not isinstance(thinking, dict) or thinking.get("type") != "enabled":
        return []
    budget = thinking.get("budget_tokens")
    if not isinstance(budget, int) or not 1024 <= budget < params["max_tokens"]:
        raise Refused(400, "thinking.budget_tokens: must be >= 1024 and less than max_tokens")
    for number, turn in enumerate(turns):
        content = turn.get("content")
        if turn.get("role") != "assistant" or not isinstance(content, list) or not content:
            continue
        first = content[0].get("type") if isinstance(content[0], dict) else None
        if first not in ("thinking", "redacted_thinking"):
            raise Refused(
                400,
                f"messages.{number}.content.0.type: Expected `thinking` or `redacted_thinking`, but "
                f"found `{first}`. When `thinking` is enabled, an assistant message must start "
                "with a thinking block",
            )
    digest = _digest(params)
    blocks: list[dict[str, Any]] = [
        {"type": "thinking", "thinking": "Thinking about the plan.", "signature": f"sig_{digest}"}
    ]
    if REDACTED_THINKING_TRIGGER in _first_user_text(turns):
        blocks.append({"type": "redacted_thinking", "data": f"redacted_{digest}"})
    return blocks


def _block_events(block: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A content block's start and deltas, as Anthropic streams it: a text in one delta, a
    tool_use's input in two input_json_delta fragments, a thinking in two thinking_delta then its
    signature_delta; a redacted_thinking whole in its start."""
    if block["type"] == "tool_use":
        arguments = json.dumps(block["input"])
        fragments = (arguments[:3], arguments[3:])
        return {**block, "input": {}}, [{"type": "input_json_delta", "partial_json": f} for f in fragments]
    if block["type"] == "thinking":
        text = block["thinking"]
        halves = (text[: len(text) // 2], text[len(text) // 2 :])
        deltas = [{"type": "thinking_delta", "thinking": half} for half in halves]
        return {"type": "thinking", "thinking": ""}, [
            *deltas,
            {"type": "signature_delta", "signature": block["signature"]},
        ]
    if block["type"] == "redacted_thinking":
        return block, []
    return {"type": "text", "text": ""}, [{"type": "text_delta", "text": block["text"]}]


def _message_stream(message: dict[str, Any]) -> list[bytes]:
    """A Message as Anthropic streams it: start, each block (``_block_events``), stop."""
    usage = message["usage"]
    blocks: list[tuple[str, dict[str, Any]]] = []
    for index, block in enumerate(message["content"]):
        start, deltas = _block_events(block)
        blocks.append(("content_block_start", {"index": index, "content_block": start}))
        blocks += [("content_block_delta", {"index": index, "delta": delta}) for delta in deltas]
        blocks.append(("content_block_stop", {"index": index}))
    events: list[tuple[str, dict[str, Any]]] = [
        (
            "message_start",
            {
                "message": {
                    **message,
                    "content": [],
                    "stop_reason": None,
                    "usage": {"input_tokens": usage["input_tokens"], "output_tokens": 1},
                }
            },
        ),
        *blocks,
        (
            "message_delta",
            {
                "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": usage["output_tokens"]},
            },
        ),
        ("message_stop", {}),
    ]
    return [
        f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n".encode() for name, data in events
    ]


class FakeAnthropic(FakeProvider):
    """Anthropic's Messages API, live and in Message Batches, on ``base_url`` (the URL before
    ``/v1``, as the ``anthropic`` client takes it); see the module's docstring.

    A batch's ``request_counts`` are all ``processing`` until it ends, as Anthropic's are."""

    def __init__(self, *, api_key: str = ANTHROPIC_KEY, max_requests: int = 100_000) -> None:
        super().__init__(api_key=api_key)
        self.max_requests = max_requests
        self.base_url = self.origin

    def routes(self) -> Mapping[tuple[str, str], Route]:
        return ANTHROPIC_ROUTES

    def authorize(self, headers: Mapping[str, str]) -> None:
        # The key as x-api-key, or as a bearer token (OAuth); and the API's version, always.
        if self.api_key not in (
            headers.get("x-api-key"),
            headers.get("authorization", "").removeprefix("Bearer "),
        ):
            raise Refused(401, "invalid x-api-key")
        if not headers.get("anthropic-version"):
            raise Refused(400, "anthropic-version: header is required")

    def error_body(self, refused: Refused) -> dict[str, Any]:
        kind = ERROR_TYPES.get(
            refused.status, "api_error" if refused.status >= 500 else "invalid_request_error"
        )
        return {"type": "error", "error": {"type": kind, "message": refused.message}}

    def ended(self, state: BatchState) -> bool:
        return bool(state.object["processing_status"] == "ended")

    # -- the test's controls ------------------------------------------------------------------

    def finish(
        self,
        batch_id: str | None = None,
        *,
        error: Iterable[str] = (),
        expire: Iterable[str] = (),
        cancel: Iterable[str] = (),
        http_error: Mapping[str, str] | None = None,
    ) -> None:
        """End a batch (or every batch not ended): each request is answered now, as live, but
        those in ``error`` (errored, ``api_error``), ``http_error`` (errored with that error
        type: ``invalid_request_error``, ``overloaded_error``...), ``expire`` and ``cancel``.
        A batch being canceled ends with its requests canceled."""
        types = {**{custom_id: "api_error" for custom_id in error}, **(http_error or {})}
        outcomes = {**{c: "expired" for c in expire}, **{c: "canceled" for c in cancel}}
        with self._lock:
            for state in self._pick(batch_id):
                self._end(state, types, outcomes)

    # -- the batches' life ----------------------------------------------------------------------

    def _end(self, state: BatchState, types: Mapping[str, str], outcomes: Mapping[str, str]) -> None:
        batch = state.object
        if self.ended(state):
            raise ValueError(f"batch {batch['id']} has already ended")
        canceling = batch["processing_status"] == "canceling"
        for request in state.requests:
            custom_id = request["custom_id"]
            outcome = "canceled" if canceling else outcomes.get(custom_id)
            if outcome is not None:
                result: dict[str, Any] = {"type": outcome}
            elif custom_id in types:
                kind = types[custom_id]
                error = {"type": kind, "message": f"The request failed with {kind} (as asked)."}
                result = {
                    "type": "errored",
                    "error": {"type": "error", "error": error, "request_id": f"req_{_digest(request)}"},
                }
            else:
                result = {"type": "succeeded", "message": message_answer(request["params"])}
            state.results[custom_id] = {"custom_id": custom_id, "result": result}
        counts = collections.Counter(line["result"]["type"] for line in state.results.values())
        batch.update(
            processing_status="ended",
            ended_at=_rfc3339(self.clock()),
            results_url=f"{self.base_url}/v1/messages/batches/{batch['id']}/results",
            request_counts={
                "processing": 0,
                "succeeded": counts["succeeded"],
                "errored": counts["errored"],
                "canceled": counts["canceled"],
                "expired": counts["expired"],
            },
        )

    # -- the API ----------------------------------------------------------------------------------

    def live(self, params: dict[str, Any]) -> dict[str, Any] | list[bytes]:
        """A live answer: a Message, or its event stream when ``stream`` is set."""
        answer = message_answer(params)
        with self._lock:
            self.live_calls.append(("/v1/messages", params))
        return _message_stream(answer) if params.get("stream") else answer

    def create(self, body: Mapping[str, Any]) -> dict[str, Any]:
        self._refuse_if_asked()
        requests = body.get("requests")
        if not isinstance(requests, list) or not requests:
            raise Refused(400, "requests: a non-empty list is required")
        if len(requests) > self.max_requests:
            raise Refused(400, f"requests: at most {self.max_requests} requests in a batch")
        seen: set[str] = set()
        for number, request in enumerate(requests):
            _check_batch_request(number, request, seen)
        now = self.clock()
        batch = {
            "id": self._new_id("msgbatch_"),
            "type": "message_batch",
            "processing_status": "in_progress",
            "request_counts": {
                "processing": len(requests),
                "succeeded": 0,
                "errored": 0,
                "canceled": 0,
                "expired": 0,
            },
            "ended_at": None,
            "created_at": _rfc3339(now),
            "expires_at": _rfc3339(now + 24 * 3600),
            "archived_at": None,
            "cancel_initiated_at": None,
            "results_url": None,
        }
        self._add(BatchState(batch, [dict(request) for request in requests]))
        return dict(batch)

    def _state(self, batch_id: str) -> BatchState:
        with self._lock:
            state = self._batches.get(batch_id)
        if state is None or state.deleted:
            raise Refused(404, f"No message batch found with id {batch_id!r}.")
        return state

    def retrieve(self, batch_id: str) -> dict[str, Any]:
        return dict(self._state(batch_id).object)

    def cancel(self, batch_id: str) -> dict[str, Any]:
        with self._lock:
            state = self._state(batch_id)
            if state.object["processing_status"] != "in_progress":
                raise Refused(400, f"Cannot cancel a batch that is {state.object['processing_status']}.")
            state.object.update(processing_status="canceling", cancel_initiated_at=_rfc3339(self.clock()))
            return dict(state.object)

    def delete_batch(self, batch_id: str) -> dict[str, Any]:
        with self._lock:
            state = self._state(batch_id)
            if not self.ended(state):
                raise Refused(400, "A batch must end (or be canceled) before it can be deleted.")
            state.deleted = True
        return {"id": batch_id, "type": "message_batch_deleted"}

    def list_batches(self, query: Mapping[str, list[str]]) -> dict[str, Any]:
        """Newest first, a page ``before_id`` (newer than) or ``after_id`` (older than) an id."""
        with self._lock:
            items = [dict(s.object) for s in reversed(self._batches.values()) if not s.deleted]
        try:
            limit = int(query.get("limit", ["20"])[0])
        except ValueError:
            raise Refused(400, "limit: must be an integer") from None
        if not 1 <= limit <= 1000:
            raise Refused(400, "limit: must be between 1 and 1000")
        ids = [item["id"] for item in items]
        before, after = query.get("before_id", [None])[0], query.get("after_id", [None])[0]
        for cursor in (before, after):
            if cursor is not None and cursor not in ids:
                raise Refused(400, f"No message batch found with id {cursor!r}.")
        if before is not None:
            newer = items[: ids.index(before)]
            page, more = newer[-limit:], len(newer) > limit
        else:
            older = items[ids.index(after) + 1 :] if after is not None else items
            page, more = older[:limit], len(older) > limit
        return {
            "data": page,
            "has_more": more,
            "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None,
        }

    def results(self, batch_id: str) -> bytes:
        """The JSONL of an ended batch's results, in a shuffled order (matched by custom_id)."""
        with self._lock:
            state = self._state(batch_id)
            if not self.ended(state):
                raise Refused(404, f"Message batch {batch_id!r} has not ended: no results yet.")
            lines = [line for cid, line in state.results.items() if cid not in state.dropped]
            for custom_id in state.extra:
                params = {
                    "model": "claude-haiku-4-5",
                    "max_tokens": 16,
                    "messages": [{"role": "user", "content": custom_id}],
                }
                lines.append(
                    {
                        "custom_id": custom_id,
                        "result": {"type": "succeeded", "message": message_answer(params)},
                    }
                )
        random.Random(batch_id).shuffle(lines)
        return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


def _check_batch_request(number: int, request: Any, seen: set[str]) -> None:
    """One of a batch's requests, checked as Anthropic checks it: one bad request refuses all."""
    where = f"requests.{number}"
    if not isinstance(request, dict) or not isinstance(request.get("params"), dict):
        raise Refused(400, f"{where}: an object with custom_id and params is required")
    custom_id = request.get("custom_id")
    if not isinstance(custom_id, str) or not CUSTOM_ID.fullmatch(custom_id):
        raise Refused(400, f"{where}.custom_id: {custom_id!r} does not match ^[a-zA-Z0-9_-]{{1,64}}$")
    if custom_id in seen:
        raise Refused(400, f"{where}.custom_id: {custom_id!r} is not unique in the batch")
    seen.add(custom_id)
    if "stream" in request["params"]:
        raise Refused(400, f"{where}.params.stream: streaming is not supported in a batch")
    try:
        message_answer(request["params"])
    except Refused as refused:
        raise Refused(400, f"{where}.params.{refused.message}") from None


ANTHROPIC_ROUTES: dict[tuple[str, str], Route] = {
    ("POST", "/v1/messages"): lambda f, r: f.live(_json_object(r.raw)),
    ("POST", "/v1/messages/batches"): lambda f, r: f.create(_json_object(r.raw)),
    ("GET", "/v1/messages/batches"): lambda f, r: f.list_batches(r.query),
    ("GET", "/v1/messages/batches/([^/]+)"): lambda f, r, batch_id: f.retrieve(batch_id),
    ("POST", "/v1/messages/batches/([^/]+)/cancel"): lambda f, r, batch_id: f.cancel(batch_id),
    ("DELETE", "/v1/messages/batches/([^/]+)"): lambda f, r, batch_id: f.delete_batch(batch_id),
    ("GET", "/v1/messages/batches/([^/]+)/results"): lambda f, r, batch_id: f.results(batch_id),
}


# -- Gemini ------------------------------------------------------------------------------------

GEMINI_KEY = "AIza-fake-SECRET-0123456789abcdef"
# What Gemini's errors carry, by HTTP status: the google.rpc.Code's name (google/rpc/code.proto).
GEMINI_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ABORTED",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}
# The google.rpc.Code of a request's error inside a batch (an InlinedResponse's ``error``).
GRPC_CODES = {
    "INVALID_ARGUMENT": 3,
    "RESOURCE_EXHAUSTED": 8,
    "INTERNAL": 13,
    "UNAVAILABLE": 14,
    "CANCELLED": 1,
}
GEMINI_ENDED = frozenset(
    {"BATCH_STATE_SUCCEEDED", "BATCH_STATE_FAILED", "BATCH_STATE_CANCELLED", "BATCH_STATE_EXPIRED"}
)
_BATCH_TYPE = "type.googleapis.com/google.ai.generativelanguage.v1beta.GenerateContentBatch"
# Gemini's inlined requests may total 20 MB (its Batch Mode guide).
GEMINI_MAX_BYTES = 20 * 1024 * 1024
# A model's alias (its models guide's "latest" names) and the model that answers for it, which
# the answer's modelVersion names.
GEMINI_ALIASES = {"gemini-flash-latest": "gemini-2.5-flash"}


def gemini_answer(model: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """A GenerateContentResponse: ``"answer to "`` the last user turn's text; usage counts words.
    Checked as Gemini checks a request: ``contents``, a non-empty list of turns with parts, each
    turn of function responses answering the calls of the model's turn before it. With
    ``tools`` and a tool plan (see ``tool_plan``), the planned call as a ``functionCall`` part
    (with no id, as the Gemini API's models give none); an alias answered by its model
    (``GEMINI_ALIASES``). A ``thinkingConfig`` with a budget
    thinks (``thoughtsTokenCount``); ``includeThoughts`` adds its thought as a first part."""
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        raise Refused(400, "* GenerateContentRequest.contents: contents is not specified")
    turns = [turn for turn in contents if isinstance(turn, dict)]
    if len(turns) != len(contents) or any(not isinstance(turn.get("parts"), list) for turn in turns):
        raise Refused(400, "* GenerateContentRequest.contents: each content needs parts")
    _check_function_responses(turns)
    users = [turn for turn in turns if turn.get("role", "user") == "user"]
    plan = tool_plan(_text(users[0]["parts"])) if body.get("tools") and users else None
    done = sum(1 for turn in users for part in turn["parts"] if "functionResponse" in part)
    call = None if plan is None else planned_call(plan, done)
    if call is not None:
        parts: list[dict[str, Any]] = [{"functionCall": {"name": call[0], "args": call[1]}}]
        prompt, answered = 10, 5
    else:
        text = "answer to " + (_text(users[-1]["parts"]) if users else "")
        parts = [{"text": text}]
        prompt, answered = sum(_words(_text(turn["parts"])) for turn in turns), _words(text)
    usage = {"promptTokenCount": prompt, "candidatesTokenCount": answered}
    # Gemini reads a field by its JSON name or its proto name (python-genai sends the latter here).
    thinking = (body.get("generationConfig") or {}).get("thinkingConfig") or {}
    if thinking.get("thinkingBudget") or thinking.get("thinking_budget"):
        usage["thoughtsTokenCount"] = 3
        if thinking.get("includeThoughts") or thinking.get("include_thoughts"):
            parts.insert(0, {"text": "Thinking about the plan.", "thought": True})
    usage["totalTokenCount"] = sum(usage.values())
    return {
        "candidates": [{"content": {"parts": parts, "role": "model"}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": usage,
        "modelVersion": GEMINI_ALIASES.get(model, model),
        "responseId": _digest({"model": model, **body}),
    }


def _check_function_responses(turns: list[dict[str, Any]]) -> None:
    """Each turn of function responses answers, by name and in order, the calls of the model's
    turn right before it, as Gemini requires."""
    for number, turn in enumerate(turns):
        answered = [p["functionResponse"].get("name") for p in turn["parts"] if "functionResponse" in p]
        if not answered:
            continue
        before = turns[number - 1] if number else {"parts": []}
        asked = [p["functionCall"].get("name") for p in before["parts"] if "functionCall" in p]
        if before.get("role") != "model" or answered != asked:
            raise Refused(
                400,
                f"* GenerateContentRequest.contents[{number}]: function responses {answered} do not "
                f"answer the model's function calls {asked} in the turn before",
            )


def _gemini_stream(answer: dict[str, Any]) -> list[bytes]:
    """A GenerateContentResponse as Gemini streams it (``alt=sse``): a thought, then the text in
    two chunks (a function call whole, in one), the finish reason and the full usage last."""
    (candidate,) = answer["candidates"]
    pieces: list[dict[str, Any]] = []
    for part in candidate["content"]["parts"]:
        text = part.get("text")
        if isinstance(text, str) and not part.get("thought"):
            half = len(text) // 2
            pieces += [{**part, "text": text[:half]}, {**part, "text": text[half:]}]
        else:
            pieces.append(part)
    usage = answer["usageMetadata"]
    chunks = []
    for number, piece in enumerate(pieces):
        last = number == len(pieces) - 1
        chunk = {
            "candidates": [
                {
                    "content": {"parts": [piece], "role": "model"},
                    "index": 0,
                    **({"finishReason": candidate["finishReason"]} if last else {}),
                }
            ],
            # Before the end, the usage so far: the prompt only.
            "usageMetadata": usage if last else {"promptTokenCount": usage["promptTokenCount"]},
            "modelVersion": answer["modelVersion"],
            "responseId": answer["responseId"],
        }
        chunks.append(chunk)
    return [f"data: {json.dumps(chunk)}\r\n\r\n".encode() for chunk in chunks]


class FakeGemini(FakeProvider):
    """The Gemini Developer API's generateContent, live and in Batch Mode, on ``origin`` (the URL
    python-genai's ``HttpOptions.base_url`` takes), under ``/v1beta`` and ``/v1`` alike; see the
    module's docstring.

    A batch is a long-running operation whose metadata holds the batch (python-genai reads
    ``name``, ``metadata.displayName``, ``state``, ``createTime``, ``output``): pending when
    created, running when first read, ended by the test. Its listing is oldest first: the order
    of Gemini's is not documented, and the plugin must not depend on it."""

    def __init__(self, *, api_key: str = GEMINI_KEY, max_bytes: int = GEMINI_MAX_BYTES) -> None:
        super().__init__(api_key=api_key)
        self.max_bytes = max_bytes
        self.base_url = self.origin

    def routes(self) -> Mapping[tuple[str, str], Route]:
        return GEMINI_ROUTES

    def authorize(self, headers: Mapping[str, str]) -> None:
        if headers.get("x-goog-api-key") != self.api_key:
            raise Refused(400, "API key not valid. Please pass a valid API key.")

    def error_body(self, refused: Refused) -> dict[str, Any]:
        status = GEMINI_STATUS.get(
            refused.status, "INTERNAL" if refused.status >= 500 else "INVALID_ARGUMENT"
        )
        return {"error": {"code": refused.status, "message": refused.message, "status": status}}

    def ended(self, state: BatchState) -> bool:
        return state.object["metadata"]["state"] in GEMINI_ENDED

    def _results_changed(self, state: BatchState) -> None:
        self._write_output(state)

    # -- the test's controls ------------------------------------------------------------------

    def finish(self, batch_id: str | None = None, *, error: Mapping[str, str] | None = None) -> None:
        """End a batch (or every batch not ended), succeeded: each request is answered now, as
        live, but those in ``error`` (custom_id -> a google.rpc.Code's name: ``INVALID_ARGUMENT``,
        ``RESOURCE_EXHAUSTED``...), which get that error."""
        errors = dict(error or {})
        with self._lock:
            for state in self._pick(batch_id):
                if self.ended(state):
                    raise ValueError(f"batch {state.object['name']} has already ended")
                for request in state.requests:
                    key = request["metadata"]["key"]
                    if key in errors:
                        code = errors[key]
                        result: dict[str, Any] = {
                            "error": {
                                "code": GRPC_CODES[code],
                                "message": f"The request failed with {code} (as asked).",
                            }
                        }
                    else:
                        model = state.object["metadata"]["model"].removeprefix("models/")
                        result = {"response": gemini_answer(model, request["request"])}
                    state.results[key] = {**result, "metadata": dict(request["metadata"])}
                self._end(state, "BATCH_STATE_SUCCEEDED")

    def fail(self, batch_id: str, message: str) -> None:
        """The whole batch fails: no results, the operation's error says why."""
        with self._lock:
            state = self._batches[batch_id]
            self._end(state, "BATCH_STATE_FAILED")
            state.object["error"] = {"code": 3, "message": message}

    def expire(self, batch_id: str) -> None:
        """The batch ran out of time (Gemini's expire after 48 hours): no results."""
        with self._lock:
            self._end(self._batches[batch_id], "BATCH_STATE_EXPIRED")

    # -- the batches' life ----------------------------------------------------------------------

    def _end(self, state: BatchState, ended: str) -> None:
        meta = state.object["metadata"]
        now = _rfc3339(self.clock())
        meta.update(state=ended, endTime=now, updateTime=now)
        state.object["done"] = True
        self._write_output(state)

    def _write_output(self, state: BatchState) -> None:
        """The inlined responses of an ended batch, in the order of its requests (with the
        test's extra ones last), and its stats."""
        meta = state.object["metadata"]
        if meta["state"] not in GEMINI_ENDED:
            return
        lines = [
            state.results[r["metadata"]["key"]]
            for r in state.requests
            if r["metadata"]["key"] in state.results
        ]
        lines = [line for line in lines if line["metadata"]["key"] not in state.dropped]
        model = meta["model"].removeprefix("models/")
        for key in state.extra:
            answer = gemini_answer(model, {"contents": [{"role": "user", "parts": [{"text": key}]}]})
            lines.append({"response": answer, "metadata": {"key": key}})
        failed = sum(1 for line in state.results.values() if "error" in line)
        meta["batchStats"] = {
            "requestCount": str(len(state.requests)),
            "successfulRequestCount": str(len(state.results) - failed),
            "failedRequestCount": str(failed),
            "pendingRequestCount": str(len(state.requests) - len(state.results)),
        }
        if lines:
            meta["output"] = {"inlinedResponses": {"inlinedResponses": lines}}

    # -- the API ----------------------------------------------------------------------------------

    def live(
        self, model: str, body: dict[str, Any], method: str = "generateContent"
    ) -> dict[str, Any] | list[bytes]:
        """A live answer: JSON, or its server-sent events for ``streamGenerateContent``."""
        answer = gemini_answer(model, body)
        with self._lock:
            self.live_calls.append((f"/models/{model}:{method}", body))
        return answer if method == "generateContent" else _gemini_stream(answer)

    def create(self, model: str, raw: bytes) -> dict[str, Any]:
        self._refuse_if_asked()
        if len(raw) > self.max_bytes:
            raise Refused(400, f"Request payload size exceeds the limit: {self.max_bytes} bytes.")
        batch = _json_object(raw).get("batch")
        if not isinstance(batch, dict) or not isinstance(batch.get("displayName"), str):
            raise Refused(400, "* batch.displayName: a name is required")
        given = ((batch.get("inputConfig") or {}).get("requests") or {}).get("requests")
        if not isinstance(given, list) or not given:
            raise Refused(400, "* batch.inputConfig: inlined requests or a file are required")
        seen: set[str] = set()
        for number, request in enumerate(given):
            where = f"batch.inputConfig.requests.requests[{number}]"
            if not isinstance(request, dict) or not isinstance(request.get("request"), dict):
                raise Refused(400, f"* {where}.request: a GenerateContentRequest is required")
            key = (request.get("metadata") or {}).get("key")
            if not isinstance(key, str) or key in seen:
                raise Refused(400, f"* {where}.metadata.key: this fake wants a unique key per request")
            seen.add(key)
            try:
                gemini_answer(model, request["request"])
            except Refused as refused:
                raise Refused(400, f"{where}: {refused.message}") from None
        now = _rfc3339(self.clock())
        name = self._new_id("batches/")
        operation = {
            "name": name,
            "metadata": {
                "@type": _BATCH_TYPE,
                "model": f"models/{model}",
                "displayName": batch["displayName"],
                "createTime": now,
                "updateTime": now,
                "batchStats": {"requestCount": str(len(given)), "pendingRequestCount": str(len(given))},
                "state": "BATCH_STATE_PENDING",
                "name": name,
            },
        }
        self._add(BatchState(operation, [dict(request) for request in given]))
        return copy.deepcopy(operation)

    def _state(self, batch_id: str) -> BatchState:
        with self._lock:
            state = self._batches.get(batch_id)
        if state is None or state.deleted:
            raise Refused(404, f"Batch batches/{batch_id} not found.")
        return state

    def retrieve(self, batch_id: str) -> dict[str, Any]:
        with self._lock:
            state = self._state(batch_id)
            meta = state.object["metadata"]
            if meta["state"] == "BATCH_STATE_PENDING":
                meta["state"] = "BATCH_STATE_RUNNING"
            return copy.deepcopy(state.object)

    def cancel(self, batch_id: str) -> dict[str, Any]:
        with self._lock:
            state = self._state(batch_id)
            if self.ended(state):
                raise Refused(400, f"Batch batches/{batch_id} has already ended.")
            self._end(state, "BATCH_STATE_CANCELLED")
        return {}

    def delete_batch(self, batch_id: str) -> dict[str, Any]:
        with self._lock:
            self._state(batch_id).deleted = True
        return {}

    def list_batches(self, query: Mapping[str, list[str]]) -> dict[str, Any]:
        """Oldest first, ``pageSize`` at a time (default 50, at most 1000), ``pageToken`` the
        offset of the next page."""
        try:
            size = int(query.get("pageSize", ["50"])[0])
            offset = int(query.get("pageToken", ["0"])[0])
        except ValueError:
            raise Refused(400, "Invalid pageSize or pageToken.") from None
        size = min(max(size, 1), 1000)  # coerced, as Google's APIs do (AIP-158)
        with self._lock:
            items = [copy.deepcopy(s.object) for s in self._batches.values() if not s.deleted]
        page: dict[str, Any] = {"operations": items[offset : offset + size]}
        if offset + size < len(items):
            page["nextPageToken"] = str(offset + size)
        return page

    def key(self, batch: Mapping[str, Any]) -> str:
        return str(batch["name"]).removeprefix("batches/")

    def requests_of(self, batch_id: str) -> list[dict[str, Any]]:
        """The batch's inlined requests, as the plugin sent them."""
        return self._batches[batch_id].requests


_VERSION = "/(?:v1|v1beta)"


def _streamed(request: Request) -> str:
    """streamGenerateContent, as server-sent events: the only kind of stream this fake answers."""
    if request.query.get("alt") != ["sse"]:
        raise Refused(400, "this fake streams server-sent events only: add ?alt=sse")
    return "streamGenerateContent"


GEMINI_ROUTES: dict[tuple[str, str], Route] = {
    ("POST", _VERSION + "/models/([^/:]+):generateContent"): lambda f, r, model: f.live(
        model, _json_object(r.raw)
    ),
    ("POST", _VERSION + "/models/([^/:]+):streamGenerateContent"): lambda f, r, model: f.live(
        model, _json_object(r.raw), _streamed(r)
    ),
    ("POST", _VERSION + "/models/([^/:]+):batchGenerateContent"): lambda f, r, model: f.create(model, r.raw),
    ("GET", _VERSION + "/batches"): lambda f, r: f.list_batches(r.query),
    ("GET", _VERSION + "/batches/([^/:]+)"): lambda f, r, batch_id: f.retrieve(batch_id),
    ("POST", _VERSION + "/batches/([^/:]+):cancel"): lambda f, r, batch_id: f.cancel(batch_id),
    ("DELETE", _VERSION + "/batches/([^/:]+)"): lambda f, r, batch_id: f.delete_batch(batch_id),
}
