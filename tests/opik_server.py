"""An in-memory, Opik-compatible HTTP server for the test suite.

``OpikTestServer`` listens on 127.0.0.1 and answers the part of the Opik REST API (``<url>/v1/private/...``)
that the official SDK's ``opik.evaluate()`` / ``opik.evaluate_resume()`` flow and this plugin use: datasets and
their versions, experiments and experiment items, the experiment "compare" read, traces, spans, feedback scores
(of traces, and of threads: a thread is the traces of one ``thread_id``), projects, the workspace name and the health endpoints. Everything is kept in memory.

It behaves like the backend where that matters to a client:

* ``Authorization`` must be the raw API key (no "Bearer") and ``Comet-Workspace`` the workspace, else 401 / 403.
* Request bodies may be gzip-compressed (``Content-Encoding: gzip``).
* Bodies are validated against the SDK's own request models (built from the signatures of the generated
  ``opik.rest_api`` clients, whose parameter types live in ``opik.rest_api.types``); a body that does not
  validate gets a 400 naming the problem and is added to ``server.invalid_requests``.
* Ids the backend requires to be UUID v7 (traces, spans, experiments, experiment items, dataset items) are
  checked the same way (400 ``"<resource> id must be a version 7 UUID"``).
* A trace written again with the same id replaces the stored one when its ``last_updated_at`` is not older
  (the backend's ``traces`` table is a ``ReplacingMergeTree(last_updated_at)``, and a batch is first
  de-duplicated by id keeping the newest ``last_updated_at``).
* Each insert into a dataset (a new ``batch_group_id``) makes a new dataset version, named v1, v2, ...
* Creating an experiment whose id exists succeeds and changes nothing; creating a dataset whose name exists
  gets 409. That 409 counts as invalid unless the client lost a race: it was told the dataset did not exist
  (a 404 looking it up by name) before another client created it, as pytest-xdist workers and CI shards do.

Faults can be injected from the test thread at any time: ``fail_next``, ``rate_limit_next``, ``delay``,
``drop_next``, ``hang`` (read requests, never answer), ``answer_next`` (any status, body and headers: a
garbled gzip body, an HTML error page, a 400 echoing the key), ``go_down`` / ``come_back``.

Typical use::

    with OpikTestServer() as server:
        env = server.sdk_env()          # OPIK_URL_OVERRIDE, OPIK_API_KEY, OPIK_WORKSPACE, ...
        ...
        assert server.invalid_requests == []
"""

from __future__ import annotations

import copy
import datetime as dt
import gzip
import hashlib
import http.server
import inspect
import json
import math
import os
import re
import socket
import threading
import time
import typing
import urllib.parse
import uuid
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["OpikTestServer", "RecordedRequest", "uuid7"]

DEFAULT_PROJECT_NAME = "Default Project"

# Stored traces always have these keys (None when not sent), like a row of the backend's traces table.
_TRACE_FIELDS = (
    "name",
    "start_time",
    "end_time",
    "input",
    "output",
    "metadata",
    "tags",
    "error_info",
    "thread_id",
    "source",
)

# ----------------------------------------------------------------------------------------------------------------
# Small helpers
# ----------------------------------------------------------------------------------------------------------------

_uuid7_lock = threading.Lock()
_uuid7_last = [0, 0]  # [milliseconds, sequence]


def uuid7(at: float | None = None) -> str:
    """A UUID v7 string. Ids made by one process within the same millisecond still sort in creation order."""
    ms = int((time.time() if at is None else at) * 1000)
    with _uuid7_lock:
        if at is None:
            if ms <= _uuid7_last[0]:
                ms = _uuid7_last[0]
                _uuid7_last[1] += 1
                if _uuid7_last[1] > 0xFFF:
                    ms += 1
                    _uuid7_last[1] = 0
            else:
                _uuid7_last[1] = int.from_bytes(os.urandom(1), "big")  # leave room for a sequence
            _uuid7_last[0] = ms
            seq = _uuid7_last[1]
        else:
            seq = int.from_bytes(os.urandom(2), "big") & 0xFFF
    rand_b = int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)
    value = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | seq << 64 | 0b10 << 62 | rand_b
    return str(uuid.UUID(int=value))


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _iso(moment: dt.datetime) -> str:
    return moment.astimezone(dt.timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _parse_time(value: Any) -> dt.datetime | None:
    if value is None or value == "":
        return None
    if isinstance(value, dt.datetime):
        moment = value
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        moment = dt.datetime.fromtimestamp(value, dt.timezone.utc)
    else:
        text = str(value).strip()
        if text.endswith("Z"):
            text = text[:-1] + "+00:00"
        # datetime.fromisoformat in 3.10 accepts at most 6 fraction digits
        text = re.sub(r"(\.\d{6})\d+", r"\1", text)
        moment = dt.datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.timezone.utc)
    return moment


def _time_key(value: Any) -> dt.datetime:
    """A comparable time; what cannot be read sorts first."""
    try:
        return _parse_time(value) or dt.datetime.min.replace(tzinfo=dt.timezone.utc)
    except ValueError:
        return dt.datetime.min.replace(tzinfo=dt.timezone.utc)


def _strip_none(record: dict[str, Any]) -> dict[str, Any]:
    """Drop top-level null fields, as the backend's JSON serialisation does."""
    return {key: value for key, value in record.items() if value is not None}


def _json_bytes(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


class _HttpError(Exception):
    """An error answer. ``invalid`` as in ``OpikTestServer._error``: None counts a 400/409/422 as invalid."""

    def __init__(self, status: int, message: str, *, invalid: bool | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.invalid = invalid


def _canonical_uuid(value: Any, resource: str) -> str:
    try:
        return str(uuid.UUID(str(value)))
    except (ValueError, AttributeError, TypeError):
        raise _HttpError(400, f"{resource} id must be a valid UUID, got {value!r}") from None


# ----------------------------------------------------------------------------------------------------------------
# Request validation against the SDK's generated REST client
# ----------------------------------------------------------------------------------------------------------------

# (HTTP method, route name) -> (generated raw-client class, method). The request model is built from that method's
# parameters: the keys of the JSON body it sends and their types, which come from ``opik.rest_api.types``.
_REQUEST_MODELS: dict[tuple[str, str], tuple[str, str]] = {
    ("POST", "datasets.create"): ("datasets", "create_dataset"),
    ("POST", "datasets.retrieve"): ("datasets", "get_dataset_by_identifier"),
    ("PUT", "datasets.items.put"): ("datasets", "create_or_update_dataset_items"),
    ("POST", "datasets.items.stream"): ("datasets", "stream_dataset_items"),
    ("POST", "datasets.versions.retrieve"): ("datasets", "retrieve_dataset_version"),
    ("POST", "experiments.create"): ("experiments", "create_experiment"),
    ("POST", "experiments.stream"): ("experiments", "stream_experiments"),
    ("POST", "experiments.items.create"): ("experiments", "create_experiment_items"),
    ("POST", "experiments.items.stream"): ("experiments", "stream_experiment_items"),
    ("POST", "experiments.items.delete"): ("experiments", "delete_experiment_items"),
    ("POST", "experiments.finish"): ("experiments", "finish_experiments"),
    ("PATCH", "experiments.update"): ("experiments", "update_experiment"),
    ("POST", "traces.create"): ("traces", "create_trace"),
    ("POST", "traces.batch"): ("traces", "create_traces"),
    ("PATCH", "traces.update"): ("traces", "update_trace"),
    ("PUT", "traces.feedback_scores"): ("traces", "score_batch_of_traces"),
    ("PUT", "traces.feedback_score"): ("traces", "add_trace_feedback_score"),
    ("POST", "spans.batch"): ("spans", "create_spans"),
    ("POST", "spans.search"): ("spans", "search_spans"),
    ("POST", "traces.threads.search"): ("traces", "search_trace_threads"),
    ("PUT", "traces.threads.feedback_scores"): ("traces", "score_batch_of_threads"),
    ("POST", "projects.retrieve"): ("projects", "retrieve_project"),
}

_RAW_CLIENTS = {
    "datasets": ("opik.rest_api.datasets.raw_client", "RawDatasetsClient"),
    "experiments": ("opik.rest_api.experiments.raw_client", "RawExperimentsClient"),
    "traces": ("opik.rest_api.traces.raw_client", "RawTracesClient"),
    "spans": ("opik.rest_api.spans.raw_client", "RawSpansClient"),
    "projects": ("opik.rest_api.projects.raw_client", "RawProjectsClient"),
}

_JSON_KEY_RE = re.compile(r'"(\w+)":\s*(?:convert_and_respect_annotation_metadata\(\s*object_=)?(\w+)')


class _Validator:
    """Builds (lazily, once per process) pydantic models of the request bodies from the generated client."""

    _lock = threading.Lock()
    _models: dict[tuple[str, str], Any] = {}
    _unavailable: dict[tuple[str, str], str] = {}

    @classmethod
    def model_for(cls, key: tuple[str, str]) -> Any:
        with cls._lock:
            if key in cls._models:
                return cls._models[key]
            if key in cls._unavailable:
                return None
            try:
                model = cls._build(*_REQUEST_MODELS[key])
            except Exception as error:  # the SDK is missing or its generated client changed
                cls._unavailable[key] = f"{type(error).__name__}: {error}"
                return None
            cls._models[key] = model
            return model

    @staticmethod
    def _build(client: str, method_name: str) -> Any:
        import importlib

        import pydantic

        module_name, class_name = _RAW_CLIENTS[client]
        function = getattr(getattr(importlib.import_module(module_name), class_name), method_name)
        hints = typing.get_type_hints(function)
        parameters = inspect.signature(function).parameters
        source = inspect.getsource(function)
        start = source.index("json={")
        end = source.find("\n            },", start)
        body_source = source[start : end if end > 0 else None]
        fields: dict[str, Any] = {}
        for json_key, parameter_name in _JSON_KEY_RE.findall(body_source):
            if parameter_name not in parameters:
                continue
            parameter = parameters[parameter_name]
            required = parameter.default is inspect.Parameter.empty
            annotation = hints.get(parameter_name, Any)
            fields[json_key] = (annotation, ... if required else None)
        if not fields:
            raise RuntimeError(f"no JSON body found in {class_name}.{method_name}")
        return pydantic.create_model(
            f"{class_name}_{method_name}_request",
            __config__=pydantic.ConfigDict(extra="forbid", arbitrary_types_allowed=True),
            **fields,
        )

    @classmethod
    def validate(cls, key: tuple[str, str], body: Any, strict: bool) -> str | None:
        """None when the body validates, otherwise a message naming the problem."""
        if key not in _REQUEST_MODELS:
            return None
        model = cls.model_for(key)
        if model is None:
            return None
        import pydantic

        if not isinstance(body, dict):
            return f"request body must be a JSON object, got {type(body).__name__}"
        try:
            instance = model.model_validate(body)
        except pydantic.ValidationError as error:
            problems = []
            for problem in error.errors()[:10]:
                where = ".".join(str(part) for part in problem["loc"]) or "<body>"
                problems.append(f"{where}: {problem['msg']}")
            return "; ".join(problems)
        if strict:
            problems = []
            cls._strict_check(instance, "", problems)
            if problems:
                return "; ".join(problems[:10])
        return None

    @classmethod
    def _strict_check(cls, value: Any, where: str, problems: list[str]) -> None:
        """Unknown fields and out-of-enum values, which the generated models let through (extra="allow",
        ``Union[Literal[...], Any]``) but which are typos or mistakes in a client."""
        import pydantic

        if isinstance(value, pydantic.BaseModel):
            extra = getattr(value, "__pydantic_extra__", None) or {}
            for name in extra:
                problems.append(
                    f"{where + '.' if where else ''}{name}: unknown field for {type(value).__name__}"
                )
            for name, info in type(value).model_fields.items():
                item = getattr(value, name, None)
                if item is None:
                    continue
                path = f"{where}.{name}" if where else name
                allowed = cls._enum_values(info.annotation)
                if allowed is not None and isinstance(item, str) and item not in allowed:
                    problems.append(f"{path}: {item!r} is not one of {sorted(allowed)}")
                    continue
                cls._strict_check(item, path, problems)
        elif isinstance(value, (list, tuple)):
            for index, item in enumerate(value):
                cls._strict_check(item, f"{where}[{index}]", problems)

    @staticmethod
    def _enum_values(annotation: Any) -> set[str] | None:
        def literals(tp: Any) -> set[str] | None:
            if typing.get_origin(tp) is typing.Literal:
                return {str(arg) for arg in typing.get_args(tp)}
            if typing.get_origin(tp) is typing.Union:
                found: set[str] = set()
                for arg in typing.get_args(tp):
                    sub = literals(arg)
                    if sub:
                        found |= sub
                return found or None
            return None

        return literals(annotation)


# ----------------------------------------------------------------------------------------------------------------
# Dataset-item filters (the JSON form of Opik's filter language)
# ----------------------------------------------------------------------------------------------------------------


def _json_text(value: Any) -> str:
    """How the backend stores a value of a dataset item's ``data`` map: as compact JSON text."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _unquoted(value: Any) -> str:
    """The backend's ``trimBoth(replaceAll(<json>, '\\"', ''), '"')``: escaped quotes removed, outer quotes trimmed."""
    return _json_text(value).replace('\\"', "").strip('"')


def _parse_filters(raw: Any) -> list[dict[str, Any]]:
    if raw is None or raw == "":
        return []
    if isinstance(raw, str):
        try:
            parsed = json.loads(urllib.parse.unquote(raw) if raw.startswith("%5B") else raw)
        except json.JSONDecodeError as error:
            raise _HttpError(400, f"Invalid filters query parameter '{raw}': {error}") from None
    else:
        parsed = raw
    if not isinstance(parsed, list):
        raise _HttpError(400, f"Invalid filters '{raw}': expected a JSON list of filter expressions")
    for expression in parsed:
        if not isinstance(expression, dict) or "field" not in expression or "operator" not in expression:
            raise _HttpError(400, f"Invalid filter expression {expression!r}: needs 'field' and 'operator'")
    return parsed


_STRING_OPS = {"=", "!=", "contains", "not_contains", "starts_with", "ends_with", "is_empty", "is_not_empty"}
_TIME_OPS = {"=", "!=", ">", ">=", "<", "<="}
_MAP_OPS = {"=", "!=", "contains", "not_contains", "starts_with", "ends_with", "is_empty", "is_not_empty"}
_LIST_OPS = {"=", "!=", "contains", "not_contains", "is_empty", "is_not_empty"}


def _string_match(text: str, operator: str, value: str) -> bool:
    text_l, value_l = text.lower(), value.lower()
    if operator == "=":
        return text_l == value_l
    if operator == "!=":
        return text_l != value_l
    if operator == "contains":
        return value_l in text_l
    if operator == "not_contains":
        return value_l not in text_l
    if operator == "starts_with":
        return text_l.startswith(value_l)
    if operator == "ends_with":
        return text_l.endswith(value_l)
    if operator == "is_empty":
        return text == ""
    if operator == "is_not_empty":
        return text != ""
    raise AssertionError(operator)


def _dataset_item_matches(item: dict[str, Any], expressions: list[dict[str, Any]]) -> bool:
    """AND of all expressions, with the backend's semantics (see FilterQueryBuilder in opik-backend)."""
    for expression in expressions:
        field_name = str(expression.get("field", ""))
        operator = str(expression.get("operator", ""))
        key = expression.get("key") or ""
        value = "" if expression.get("value") is None else str(expression.get("value"))
        if field_name == "data":
            if operator not in _MAP_OPS:
                raise _HttpError(400, f"Invalid operator '{operator}' for field 'data'")
            data = item.get("data") or {}
            present = isinstance(data, dict) and key in data
            if operator in ("is_empty", "is_not_empty"):
                empty = not present or data[key] is None or data[key] == ""
                if empty != (operator == "is_empty"):
                    return False
                continue
            if not present:
                # indexOf() finds no key: the value reads as '' (so only != and not_contains can match)
                if not _string_match("", operator, value):
                    return False
                continue
            if operator in ("contains", "not_contains"):
                text = _json_text(data[key])  # ilike on the raw JSON text
            else:
                text = _unquoted(data[key])
            if not _string_match(text, operator, value):
                return False
        elif field_name == "tags":
            if operator not in _LIST_OPS:
                raise _HttpError(400, f"Invalid operator '{operator}' for field 'tags'")
            tags = [str(tag) for tag in item.get("tags") or []]
            if operator == "=":
                ok = value in tags
            elif operator == "!=":
                ok = value not in tags
            elif operator == "contains":
                ok = any(value.lower() in tag.lower() for tag in tags)
            elif operator == "not_contains":
                ok = not any(value.lower() in tag.lower() for tag in tags)
            elif operator == "is_empty":
                ok = not tags
            else:
                ok = bool(tags)
            if not ok:
                return False
        elif field_name in ("id", "description", "source", "trace_id", "span_id", "full_data"):
            if operator not in _STRING_OPS:
                raise _HttpError(400, f"Invalid operator '{operator}' for field '{field_name}'")
            if field_name == "full_data":
                text = _json_text(item.get("data") or {})
            else:
                text = "" if item.get(field_name) is None else str(item.get(field_name))
            if not _string_match(text, operator, value):
                return False
        elif field_name in ("created_at", "last_updated_at"):
            if operator not in _TIME_OPS:
                raise _HttpError(400, f"Invalid operator '{operator}' for field '{field_name}'")
            try:
                wanted = _parse_time(value)
            except ValueError:
                raise _HttpError(400, f"Invalid date-time value '{value}' for field '{field_name}'") from None
            actual = _parse_time(item.get(field_name))
            if actual is None or wanted is None:
                return False
            ok = {
                "=": actual == wanted,
                "!=": actual != wanted,
                ">": actual > wanted,
                ">=": actual >= wanted,
                "<": actual < wanted,
                "<=": actual <= wanted,
            }[operator]
            if not ok:
                return False
        else:
            raise _HttpError(400, f"Invalid filter field '{field_name}' for dataset items")
    return True


# ----------------------------------------------------------------------------------------------------------------
# Recording and fault injection
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class RecordedRequest:
    """One request the server received. ``path`` is normalised to start at ``v1/private/`` or ``is-alive/``."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]  # lower-case names
    body: Any  # the parsed JSON body (after gzip), or None
    raw_body: bytes = b""
    raw_path: str = ""
    status: int | None = None  # None when the connection was dropped without an answer
    fault: str | None = None  # "drop", "fail", "rate_limit", "answer", "hang" when an injected fault answered
    started_at: float = field(default_factory=time.time)


@dataclass
class _Fault:
    kind: str  # "fail" | "rate_limit" | "drop" | "answer"
    remaining: int
    status: int = 503
    retry_after: float = 1.0
    path_contains: str | None = None
    body: bytes = b""  # for "answer"
    headers: dict[str, str] = field(default_factory=dict)  # for "answer"


@dataclass
class _Route:
    method: str
    pattern: re.Pattern[str]
    name: str
    handler: Callable[..., Any]


@dataclass
class _Response:
    status: int
    body: Any = None  # JSON value, bytes, or None
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)


# ----------------------------------------------------------------------------------------------------------------
# The HTTP plumbing
# ----------------------------------------------------------------------------------------------------------------


class _HTTPServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64

    def __init__(self, address: tuple[str, int], owner: OpikTestServer) -> None:
        self.owner = owner
        super().__init__(address, _Handler)

    def get_request(self) -> tuple[socket.socket, Any]:
        connection, address = super().get_request()
        # answers are written as two segments (headers, body): without this, Nagle + delayed ACK cost ~40 ms each
        connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.owner._track(connection)
        return connection, address

    def shutdown_request(self, request: Any) -> None:
        self.owner._untrack(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:  # connection resets are expected
        pass


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def do_PUT(self) -> None:
        self._handle()

    def do_PATCH(self) -> None:
        self._handle()

    def do_DELETE(self) -> None:
        self._handle()

    def _read_body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            chunks = []
            while True:
                size_line = self.rfile.readline()
                size = int(size_line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        if len(body) < length:
            raise ConnectionResetError("the client went away in the middle of its request")
        return body

    def _handle(self) -> None:
        owner = self.server.owner
        try:
            raw = self._read_body()
        except (ConnectionError, ValueError):
            # A client killed mid-request (SIGKILL) sent half a body: nothing to answer or record.
            self.close_connection = True
            return
        response = owner._dispatch(self.command, self.path, self.headers, raw)
        if response is None:  # drop the connection without an answer
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        if owner._is_down():
            self.close_connection = True
            return
        if isinstance(response.body, bytes):
            payload = response.body
        elif response.body is None:
            payload = b""
        else:
            payload = _json_bytes(response.body)
        try:
            self.send_response(response.status)
            if payload or response.status not in (204, 304):
                self.send_header("Content-Type", response.content_type)
            for name, value in response.headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if payload:
                self.wfile.write(payload)
            self.wfile.flush()
        except OSError:
            self.close_connection = True


# ----------------------------------------------------------------------------------------------------------------
# The server
# ----------------------------------------------------------------------------------------------------------------


class OpikTestServer:
    """An Opik-compatible REST server on 127.0.0.1 with in-memory storage. See the module docstring.

    Args:
        api_key: the only accepted ``Authorization`` header value (the raw key); None disables the check.
        workspace: the only accepted ``Comet-Workspace`` header value; None disables the check.
        port: 0 picks a free port.
        validate: validate request bodies against the SDK's request models (400 + ``invalid_requests``).
        strict: also reject unknown fields and out-of-enum values the generated models would let through.
        require_uuid7: reject non-v7 ids where the backend does.
        uuid7_window: if set (seconds), also reject new trace/span ids whose embedded time is further than
            this from now, as the backend does when ``uuidValidation.enabled`` is on (its default window is 24h).
        backend_version: what ``GET is-alive/ver`` reports.
    """

    def __init__(
        self,
        api_key: str | None = "test-api-key",
        workspace: str | None = "test-workspace",
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        validate: bool = True,
        strict: bool = True,
        require_uuid7: bool = True,
        uuid7_window: float | None = None,
        backend_version: str | None = None,
    ) -> None:
        self.api_key = api_key
        self.workspace = workspace
        self.host = host
        self._port = port
        self.validate = validate
        self.strict = strict
        self.require_uuid7 = require_uuid7
        self.uuid7_window = uuid7_window
        self.backend_version = backend_version or self._installed_sdk_version()

        self._lock = threading.RLock()  # guards all stored data and the request log
        self._fault_lock = threading.Lock()
        self._faults: list[_Fault] = []
        self._delays: list[tuple[float, str | None]] = []
        self._hang: list[str | None] = []  # path parts whose requests are never answered
        self._released = threading.Event()  # set to let hanging requests go (dropped)
        self._conn_lock = threading.Lock()
        self._connections: set[socket.socket] = set()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._down = False

        self._requests: list[RecordedRequest] = []
        self._invalid: list[dict[str, Any]] = []
        self._unhandled: list[RecordedRequest] = []
        self._routes = self._build_routes()
        self._reset_data()

    # -- lifecycle ---------------------------------------------------------------------------------------------

    def start(self) -> OpikTestServer:
        if self._httpd is not None:
            return self
        if self.validate:
            # Build the request models now (importing opik takes seconds, once per process) rather than in the
            # first request, where it would count against the client's timeout.
            self.validation_problems()
        self._listen()
        return self

    def stop(self) -> None:
        self.clear_faults()  # lets hanging handlers go
        self._shutdown_listener()
        self._down = False

    def __enter__(self) -> OpikTestServer:
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    def _listen(self) -> None:
        last_error: OSError | None = None
        for _ in range(50):
            try:
                self._httpd = _HTTPServer((self.host, self._port), self)
                break
            except OSError as error:  # the port may linger for a moment after go_down()
                last_error = error
                if self._port == 0:
                    raise
                time.sleep(0.05)
        else:
            raise RuntimeError(f"cannot listen on {self.host}:{self._port}: {last_error}")
        self._port = self._httpd.server_address[1]
        self._down = False
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.02},
            name=f"OpikTestServer:{self._port}",
            daemon=True,
        )
        self._thread.start()

    def _shutdown_listener(self) -> None:
        httpd, thread = self._httpd, self._thread
        self._httpd = self._thread = None
        if httpd is None:
            return
        self._down = True
        httpd.shutdown()
        httpd.server_close()
        with self._conn_lock:
            connections = list(self._connections)
            self._connections.clear()
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if thread is not None:
            thread.join(timeout=5)

    def _track(self, connection: socket.socket) -> None:
        with self._conn_lock:
            self._connections.add(connection)

    def _untrack(self, connection: socket.socket) -> None:
        with self._conn_lock:
            self._connections.discard(connection)

    def _is_down(self) -> bool:
        return self._down

    # -- addresses and SDK configuration -----------------------------------------------------------------------

    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        """The server root, e.g. ``http://127.0.0.1:PORT/``. The API answers at ``<url>v1/private/...``."""
        return f"http://{self.host}:{self._port}/"

    @property
    def api_url(self) -> str:
        """The base URL to give the SDK (``OPIK_URL_OVERRIDE``): ``http://127.0.0.1:PORT/api/``, the shape of a
        self-hosted Opik behind its frontend. The server answers with and without the ``api/`` prefix."""
        return f"http://{self.host}:{self._port}/api/"

    def sdk_env(self, project_name: str | None = None) -> dict[str, str]:
        """Environment variables that point the official ``opik`` SDK at this server, quietly and offline."""
        env = {
            "OPIK_URL_OVERRIDE": self.api_url,
            "OPIK_ANALYTICS_ENABLE": "false",
            "OPIK_SENTRY_ENABLE": "false",
            "OPIK_ENABLE_LITELLM_MODELS_MONITORING": "false",
            "OPIK_PYTEST_EXPERIMENT_ENABLED": "false",
            "OPIK_CHECK_TLS_CERTIFICATE": "false",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        }
        if self.api_key is not None:
            env["OPIK_API_KEY"] = self.api_key
        if self.workspace is not None:
            env["OPIK_WORKSPACE"] = self.workspace
        if project_name is not None:
            env["OPIK_PROJECT_NAME"] = project_name
        return env

    @staticmethod
    def _installed_sdk_version() -> str:
        try:
            from importlib.metadata import version

            return version("opik")
        except Exception:
            return "2.2.122"

    # -- fault injection (thread-safe, callable from the test thread at any time) ----------------------------

    def fail_next(self, n: int = 1, status: int = 503, path_contains: str | None = None) -> None:
        """Answer the next ``n`` matching requests with ``status`` (and an error body) instead of handling them."""
        with self._fault_lock:
            self._faults.append(_Fault("fail", n, status=status, path_contains=path_contains))

    def rate_limit_next(self, n: int = 1, retry_after: float = 1, path_contains: str | None = None) -> None:
        """Answer the next ``n`` matching requests with 429 and ``Retry-After`` (plus ``RateLimit-Reset``, what
        Opik Cloud sends)."""
        with self._fault_lock:
            self._faults.append(
                _Fault("rate_limit", n, status=429, retry_after=retry_after, path_contains=path_contains)
            )

    def drop_next(self, n: int = 1, path_contains: str | None = None) -> None:
        """Read the next ``n`` matching requests, then close the connection without an answer."""
        with self._fault_lock:
            self._faults.append(_Fault("drop", n, path_contains=path_contains))

    def delay(self, seconds: float, path_contains: str | None = None) -> None:
        """Wait ``seconds`` before answering every matching request, until ``delay(0, same path)`` or
        ``clear_faults()``."""
        with self._fault_lock:
            self._delays = [entry for entry in self._delays if entry[1] != path_contains]
            if seconds > 0:
                self._delays.append((seconds, path_contains))

    def hang(self, path_contains: str | None = None) -> None:
        """Read every matching request and never answer it (a server that accepts connections and then
        stalls), until ``clear_faults()``, which drops the waiting connections."""
        with self._fault_lock:
            self._released.clear()
            self._hang.append(path_contains)

    def answer_next(
        self,
        n: int = 1,
        status: int = 200,
        body: bytes | str = b"",
        headers: dict[str, str] | None = None,
        path_contains: str | None = None,
    ) -> None:
        """Answer the next ``n`` matching requests with exactly this status, body and headers (``Content-Type``
        defaults to ``application/json``): a garbled gzip body, an HTML error page, a 400 echoing a secret."""
        raw = body.encode() if isinstance(body, str) else body
        with self._fault_lock:
            self._faults.append(
                _Fault(
                    "answer",
                    n,
                    status=status,
                    path_contains=path_contains,
                    body=raw,
                    headers=dict(headers or {}),
                )
            )

    def clear_faults(self) -> None:
        with self._fault_lock:
            self._faults.clear()
            self._delays.clear()
            self._hang.clear()
            self._released.set()

    def go_down(self) -> None:
        """Stop listening and cut open connections: new connections are refused until ``come_back()``."""
        self._shutdown_listener()

    def come_back(self) -> None:
        """Listen again on the same port, with the same data."""
        if self._httpd is None:
            self._listen()

    @property
    def is_up(self) -> bool:
        return self._httpd is not None

    def _take_fault(self, path: str) -> _Fault | None:
        with self._fault_lock:
            for fault in self._faults:
                if fault.remaining > 0 and (fault.path_contains is None or fault.path_contains in path):
                    fault.remaining -= 1
                    taken = copy.copy(fault)
                    self._faults = [f for f in self._faults if f.remaining > 0]
                    return taken
        return None

    def _hangs(self, path: str) -> bool:
        with self._fault_lock:
            return any(part is None or part in path for part in self._hang)

    def _pause(self, seconds: float) -> None:
        """Where ``delay`` waits: a test of the server replaces it to see the pauses without a clock."""
        time.sleep(seconds)

    def _delay_for(self, path: str) -> float:
        with self._fault_lock:
            return max(
                (seconds for seconds, part in self._delays if part is None or part in path),
                default=0.0,
            )

    # -- what tests assert on ------------------------------------------------------------------------------------

    @staticmethod
    def validation_problems() -> dict[str, str]:
        """Routes whose request model could not be built from the installed SDK (their bodies go unchecked),
        e.g. because ``opik`` is not installed: ``{"POST traces.batch": "ModuleNotFoundError: ..."}``."""
        for key in _REQUEST_MODELS:
            _Validator.model_for(key)
        return {f"{method} {name}": problem for (method, name), problem in _Validator._unavailable.items()}

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    @property
    def invalid_requests(self) -> list[dict[str, Any]]:
        """Requests answered 400/409/422 because of their content (and any 500 from a server-side error):
        ``{method, path, status, error, body}``. A test can assert it stays empty."""
        with self._lock:
            return copy.deepcopy(self._invalid)

    @property
    def unhandled_requests(self) -> list[RecordedRequest]:
        """Requests for endpoints this server does not implement (answered 404)."""
        with self._lock:
            return list(self._unhandled)

    def find_requests(
        self, method: str | None = None, path_contains: str | None = None
    ) -> list[RecordedRequest]:
        with self._lock:
            return [
                r
                for r in self._requests
                if (method is None or r.method == method.upper())
                and (path_contains is None or path_contains in r.path)
            ]

    def clear_requests(self) -> None:
        with self._lock:
            self._requests.clear()
            self._invalid.clear()
            self._unhandled.clear()

    @property
    def projects(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return copy.deepcopy(self._projects)

    @property
    def datasets(self) -> dict[str, dict[str, Any]]:
        """``{dataset_id: {...dataset, "items": {item_id: item} (latest version), "versions": [...]}}``; each
        version is ``{id, version_hash, version_name, items_total, ..., "items": {item_id: item}}``."""
        with self._lock:
            result = {}
            for dataset_id, dataset in self._datasets.items():
                versions = self._versions.get(dataset_id, [])
                entry = copy.deepcopy(dataset)
                entry["items"] = copy.deepcopy(versions[-1]["items"]) if versions else {}
                entry["versions"] = copy.deepcopy(versions)
                result[dataset_id] = entry
            return result

    @property
    def experiments(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return copy.deepcopy(self._experiments)

    @property
    def experiment_items(self) -> list[dict[str, Any]]:
        """All experiment items, in the order they were first written."""
        with self._lock:
            return copy.deepcopy(list(self._experiment_items.values()))

    @property
    def traces(self) -> dict[str, dict[str, Any]]:
        """``{trace_id: trace}`` as last written (``last_updated_at`` rules): the fields as sent, plus
        ``id``, ``project_name``, ``project_id``, ``created_at``, ``last_updated_at``; unsent standard fields
        (``output``, ``error_info``, ...) are None."""
        with self._lock:
            return copy.deepcopy(self._traces)

    @property
    def spans(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return copy.deepcopy(self._spans)

    @property
    def feedback_scores(self) -> list[dict[str, Any]]:
        """Current trace feedback scores, one per (trace ``id``, ``name``), in first-write order."""
        with self._lock:
            scores = [score for by_name in self._feedback_scores.values() for score in by_name.values()]
            return copy.deepcopy(sorted(scores, key=lambda score: score["_order"]))

    @property
    def thread_feedback_scores(self) -> dict[str, list[dict[str, Any]]]:
        """Current thread feedback scores by thread id, one per name, in first-write order."""
        with self._lock:
            found = {
                thread_id: sorted(by_name.values(), key=lambda score: score["_order"])
                for (_, thread_id), by_name in self._thread_scores.items()
            }
            return copy.deepcopy(found)

    def dataset_by_name(self, name: str) -> dict[str, Any] | None:
        for dataset in self.datasets.values():
            if dataset["name"] == name:
                return dataset
        return None

    def reset(self) -> None:
        """Forget all data, requests and faults (the server keeps listening)."""
        self.clear_faults()
        with self._lock:
            self._reset_data()
            self._requests.clear()
            self._invalid.clear()
            self._unhandled.clear()

    def _reset_data(self) -> None:
        self._projects: dict[str, dict[str, Any]] = {}
        self._datasets: dict[str, dict[str, Any]] = {}
        self._versions: dict[str, list[dict[str, Any]]] = {}
        self._experiments: dict[str, dict[str, Any]] = {}
        self._experiment_items: dict[str, dict[str, Any]] = {}
        self._traces: dict[str, dict[str, Any]] = {}
        self._spans: dict[str, dict[str, Any]] = {}
        self._feedback_scores: dict[str, dict[str, dict[str, Any]]] = {}  # trace id -> name -> score
        # (project id, thread id) -> name -> score
        self._thread_scores: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
        self._score_writes = 0
        # Clients that raced to create a dataset: a lookup by name answered 404 before it existed, so a
        # create that then gets 409 lost the race (see _create_dataset_record).
        self._dataset_misses: dict[str, int] = {}  # name -> lookups answered 404 while it did not exist
        self._dataset_races: dict[str, int] = {}  # name -> creates that may still lose the race

    # -- seeding helpers (for tests that need data the SDK did not write) ---------------------------------------

    def create_dataset(
        self,
        name: str,
        items: Iterable[dict[str, Any]] = (),
        *,
        project_name: str | None = None,
        description: str | None = None,
    ) -> str:
        """Create a dataset directly; ``items`` are item ``data`` dicts, or ``{"id", "data", "tags"}`` when they
        have a ``"data"`` key. A non-empty ``items`` makes version v1. Returns the dataset id."""
        with self._lock:
            dataset = self._create_dataset_record(name, None, project_name, description, None)
            writes = []
            for entry in items:
                if "data" in entry and isinstance(entry["data"], dict):
                    writes.append({"source": "sdk", **entry})
                else:
                    writes.append({"source": "sdk", "data": dict(entry)})
            if writes:
                self._insert_items(dataset, writes, batch_group_id=uuid7())
            return str(dataset["id"])

    # -- request dispatch ----------------------------------------------------------------------------------------

    def _dispatch(self, method: str, raw_path: str, headers: Any, raw: bytes) -> _Response | None:
        parsed = urllib.parse.urlsplit(raw_path)
        path = self._normalise_path(parsed.path)
        query = dict(urllib.parse.parse_qsl(parsed.query, keep_blank_values=True))
        header_map = {name.lower(): value for name, value in headers.items()}
        record = RecordedRequest(
            method=method,
            path=path,
            query=query,
            headers=header_map,
            body=None,
            raw_body=raw,
            raw_path=raw_path,
        )
        decode_error = self._decode_body(record, header_map)
        with self._lock:
            self._requests.append(record)

        if self._hangs(path):
            record.fault = "hang"
            self._released.wait()
            return None
        fault = self._take_fault(path)
        pause = self._delay_for(path)
        if pause:
            self._pause(pause)
        if fault is not None:
            record.fault = fault.kind
            if fault.kind == "drop":
                return None
            if fault.kind == "answer":
                record.status = fault.status
                content_type = fault.headers.get("Content-Type", "application/json")
                headers = {k: v for k, v in fault.headers.items() if k != "Content-Type"}
                return _Response(fault.status, fault.body, content_type=content_type, headers=headers)
            if fault.kind == "rate_limit":
                record.status = 429
                return _Response(
                    429,
                    {"errors": ["Too Many Requests (injected by OpikTestServer)"]},
                    headers={
                        "Retry-After": f"{fault.retry_after:g}",
                        "RateLimit-Reset": str(max(0, math.ceil(fault.retry_after))),
                    },
                )
            record.status = fault.status
            return _Response(fault.status, {"errors": [f"HTTP {fault.status} (injected by OpikTestServer)"]})

        response = self._answer(record, method, path, query, header_map, decode_error)
        record.status = response.status
        return response

    @staticmethod
    def _decode_body(record: RecordedRequest, headers: dict[str, str]) -> str | None:
        """Inflate and parse the body into ``record.body``; the problem, if any, as a message."""
        raw = record.raw_body
        encoding = (headers.get("content-encoding") or "").lower()
        try:
            if "gzip" in encoding:
                raw = gzip.decompress(raw)
            elif "deflate" in encoding:
                raw = zlib.decompress(raw)
        except (OSError, EOFError, zlib.error) as error:
            return f"Request body is not valid {encoding}: {error}"
        if not raw:
            return None
        try:
            record.body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            return f"Unable to process JSON: {error}"
        return None

    @staticmethod
    def _normalise_path(path: str) -> str:
        path = re.sub(r"/{2,}", "/", path)
        for marker in ("/v1/private/", "/is-alive/"):
            index = path.find(marker)
            if index >= 0:
                return path[index + 1 :]
        return path.lstrip("/")

    def _answer(
        self,
        record: RecordedRequest,
        method: str,
        path: str,
        query: dict[str, str],
        headers: dict[str, str],
        decode_error: str | None,
    ) -> _Response:
        if not path.startswith("is-alive/"):
            if self.api_key is not None and headers.get("authorization") != self.api_key:
                return self._error(record, 401, "API key should be provided and valid", invalid=False)
            if self.workspace is not None and headers.get("comet-workspace") != self.workspace:
                return self._error(record, 403, "User has no permission to the workspace", invalid=False)
        if decode_error is not None:
            return self._error(record, 400, decode_error)

        for route in self._routes:
            if route.method != method:
                continue
            match = route.pattern.fullmatch(path)
            if match is None:
                continue
            if self.validate:
                problem = _Validator.validate((method, route.name), record.body, self.strict)
                if problem is not None:
                    return self._error(record, 400, f"{method} {path}: {problem}")
            try:
                with self._lock:
                    response: _Response = route.handler(record.body, query, **match.groupdict())
                    return response
            except _HttpError as error:
                return self._error(record, error.status, error.message, invalid=error.invalid)
            except Exception as error:  # a bug here, or a body shape nobody expected: say so, don't hang up
                return self._error(record, 500, f"{type(error).__name__}: {error}", invalid=True)
        with self._lock:
            self._unhandled.append(record)
        return _Response(
            404, {"errors": [f"HTTP 404 Not Found: {method} {path} (not implemented by OpikTestServer)"]}
        )

    def _error(
        self, record: RecordedRequest, status: int, message: str, invalid: bool | None = None
    ) -> _Response:
        if invalid is None:
            invalid = status in (400, 409, 422)
        if invalid:
            with self._lock:
                self._invalid.append(
                    {
                        "method": record.method,
                        "path": record.path,
                        "status": status,
                        "error": message,
                        "body": copy.deepcopy(record.body),
                    }
                )
        return _Response(status, {"errors": [message]})

    # -- routes --------------------------------------------------------------------------------------------------

    def _build_routes(self) -> list[_Route]:
        id_ = r"(?P<{}>[^/]+)"
        table: list[tuple[str, str, str, Callable[..., Any]]] = [
            ("GET", "is-alive/ping", "ping", self._ping),
            ("GET", "is-alive/ver", "version", self._version),
            ("GET", "v1/private/auth/workspace", "auth.workspace", self._workspace_name),
            ("POST", "v1/private/projects/retrieve", "projects.retrieve", self._retrieve_project),
            ("GET", "v1/private/projects", "projects.list", self._list_projects),
            ("GET", "v1/private/projects/" + id_.format("project_id"), "projects.get", self._get_project),
            # datasets
            ("POST", "v1/private/datasets", "datasets.create", self._create_dataset),
            ("GET", "v1/private/datasets", "datasets.list", self._list_datasets),
            ("POST", "v1/private/datasets/retrieve", "datasets.retrieve", self._retrieve_dataset),
            ("PUT", "v1/private/datasets/items", "datasets.items.put", self._put_dataset_items),
            ("POST", "v1/private/datasets/items/stream", "datasets.items.stream", self._stream_dataset_items),
            (
                "GET",
                "v1/private/datasets/" + id_.format("dataset_id") + "/items/experiments/items",
                "datasets.compare",
                self._compare,
            ),
            (
                "GET",
                "v1/private/datasets/" + id_.format("dataset_id") + "/items",
                "datasets.items",
                self._get_items,
            ),
            (
                "GET",
                "v1/private/datasets/" + id_.format("dataset_id") + "/versions",
                "datasets.versions",
                self._versions_page,
            ),
            (
                "POST",
                "v1/private/datasets/" + id_.format("dataset_id") + "/versions/retrieve",
                "datasets.versions.retrieve",
                self._retrieve_version,
            ),
            (
                "GET",
                "v1/private/datasets/"
                + id_.format("dataset_id")
                + "/versions/hash/"
                + id_.format("version_hash"),
                "datasets.versions.hash",
                self._version_by_hash,
            ),
            ("GET", "v1/private/datasets/" + id_.format("dataset_id"), "datasets.get", self._get_dataset),
            # experiments
            ("POST", "v1/private/experiments", "experiments.create", self._create_experiment),
            ("GET", "v1/private/experiments", "experiments.list", self._list_experiments),
            ("POST", "v1/private/experiments/stream", "experiments.stream", self._stream_experiments),
            (
                "POST",
                "v1/private/experiments/items",
                "experiments.items.create",
                self._create_experiment_items,
            ),
            (
                "POST",
                "v1/private/experiments/items/stream",
                "experiments.items.stream",
                self._stream_experiment_items,
            ),
            (
                "POST",
                "v1/private/experiments/items/delete",
                "experiments.items.delete",
                self._delete_experiment_items,
            ),
            ("POST", "v1/private/experiments/finish", "experiments.finish", self._finish_experiments),
            (
                "GET",
                "v1/private/experiments/" + id_.format("experiment_id"),
                "experiments.get",
                self._get_experiment,
            ),
            (
                "PATCH",
                "v1/private/experiments/" + id_.format("experiment_id"),
                "experiments.update",
                self._update_experiment,
            ),
            # traces, spans, feedback scores
            ("POST", "v1/private/traces", "traces.create", self._create_trace),
            ("GET", "v1/private/traces", "traces.list", self._list_traces),
            ("POST", "v1/private/traces/batch", "traces.batch", self._create_traces),
            ("PUT", "v1/private/traces/feedback-scores", "traces.feedback_scores", self._score_traces),
            # Before the routes of one trace: "threads" is no trace id (the backend's literal paths win).
            (
                "PUT",
                "v1/private/traces/threads/feedback-scores",
                "traces.threads.feedback_scores",
                self._score_threads,
            ),
            (
                "PUT",
                "v1/private/traces/" + id_.format("trace_id") + "/feedback-scores",
                "traces.feedback_score",
                self._score_trace,
            ),
            ("GET", "v1/private/traces/" + id_.format("trace_id"), "traces.get", self._get_trace),
            ("PATCH", "v1/private/traces/" + id_.format("trace_id"), "traces.update", self._update_trace),
            ("POST", "v1/private/spans/batch", "spans.batch", self._create_spans),
            ("POST", "v1/private/spans/search", "spans.search", self._search_spans),
            ("POST", "v1/private/traces/threads/search", "traces.threads.search", self._search_threads),
        ]
        return [
            _Route(method, re.compile(pattern), name, handler) for method, pattern, name, handler in table
        ]

    # -- shared helpers for handlers -----------------------------------------------------------------------------

    def _check_v7(self, value: Any, resource: str) -> str:
        canonical = _canonical_uuid(value, resource)
        if self.require_uuid7 and (uuid.UUID(canonical).int >> 76) & 0xF != 7:
            raise _HttpError(400, f"{resource} id must be a version 7 UUID")
        return canonical

    def _check_window(self, canonical: str, resource: str, *, creating: bool) -> None:
        if self.uuid7_window is None:
            return
        embedded = (uuid.UUID(canonical).int >> 80) / 1000.0
        now = time.time()
        if embedded > now + self.uuid7_window:
            reason = "too_far_future"
        elif creating and embedded < now - self.uuid7_window:
            reason = "too_old"
        else:
            return
        when = _iso(dt.datetime.fromtimestamp(embedded, dt.timezone.utc))
        raise _HttpError(
            400,
            f"{resource} id with timestamp '{when}' must be in the allowed ingestion window of "
            f"'{self.uuid7_window}s' around now, reason '{reason}'",
        )

    def _project(self, name: str | None) -> dict[str, Any]:
        project_name = name or DEFAULT_PROJECT_NAME
        for project in self._projects.values():
            if project["name"].lower() == project_name.lower():
                return project
        moment = _iso(_now())
        project = {
            "id": uuid7(),
            "name": project_name,
            "visibility": "private",
            "created_at": moment,
            "created_by": "admin",
            "last_updated_at": moment,
            "last_updated_by": "admin",
        }
        self._projects[project["id"]] = project
        return project

    @staticmethod
    def _page_params(query: dict[str, str], default_size: int = 10) -> tuple[int, int]:
        try:
            page = int(query.get("page") or 1)
            size = int(query.get("size") or default_size)
        except ValueError:
            raise _HttpError(400, "page and size must be integers") from None
        if page < 1 or size < 1:
            raise _HttpError(400, "page and size must be at least 1")
        return page, size

    @staticmethod
    def _ndjson(records: Iterable[dict[str, Any]]) -> _Response:
        body = b"".join(_json_bytes(record) + b"\n" for record in records)
        return _Response(200, body, content_type="application/octet-stream")

    # -- health, workspace, projects ----------------------------------------------------------------------------

    def _ping(self, body: Any, query: dict[str, str]) -> _Response:
        return _Response(200, {"healthy": True})

    def _version(self, body: Any, query: dict[str, str]) -> _Response:
        return _Response(200, {"version": self.backend_version})

    def _workspace_name(self, body: Any, query: dict[str, str]) -> _Response:
        return _Response(200, {"workspace_name": self.workspace or "default"})

    def _retrieve_project(self, body: Any, query: dict[str, str]) -> _Response:
        name = (body or {}).get("name")
        for project in self._projects.values():
            if name and project["name"].lower() == str(name).lower():
                return _Response(200, project)
        raise _HttpError(404, "Project not found")

    def _list_projects(self, body: Any, query: dict[str, str]) -> _Response:
        page, size = self._page_params(query)
        name = (query.get("name") or "").lower()
        found = sorted(
            (p for p in self._projects.values() if name in p["name"].lower()),
            key=lambda p: p["id"],
            reverse=True,
        )
        return _Response(
            200,
            {
                "page": page,
                "size": size,
                "total": len(found),
                "content": found[(page - 1) * size : page * size],
            },
        )

    def _get_project(self, body: Any, query: dict[str, str], project_id: str) -> _Response:
        if project_id not in self._projects:
            raise _HttpError(404, "Project not found")
        return _Response(200, self._projects[project_id])

    # -- datasets -------------------------------------------------------------------------------------------------

    def _find_dataset(self, name: str | None = None, dataset_id: str | None = None) -> dict[str, Any] | None:
        if dataset_id is not None:
            return self._datasets.get(dataset_id)
        for dataset in self._datasets.values():
            if dataset["name"] == name:
                return dataset
        return None

    def _create_dataset_record(
        self,
        name: str,
        dataset_id: str | None,
        project_name: str | None,
        description: str | None,
        body: dict[str, Any] | None,
    ) -> dict[str, Any]:
        if not name or not str(name).strip():
            raise _HttpError(422, "name must not be blank")
        if self._find_dataset(name=name) is not None:
            # The backend's answer either way. Only a client that was told the dataset did not exist,
            # and lost the race to create it to another (pytest-xdist workers, CI shards), has a reason
            # to create it: such a 409 is expected; any other is an invalid request.
            lost_race = self._dataset_races.get(name, 0) > 0
            if lost_race:
                self._dataset_races[name] -= 1
            raise _HttpError(409, "Dataset already exists", invalid=not lost_race)
        if dataset_id is not None:
            dataset_id = self._check_v7(dataset_id, "dataset")
            if dataset_id in self._datasets:
                raise _HttpError(409, "Dataset already exists")
        else:
            dataset_id = uuid7()
        # Every client told it did not exist may try to create it; one (this one) wins.
        self._dataset_races[name] = max(0, self._dataset_misses.pop(name, 0) - 1)
        project = self._project(project_name) if project_name else None
        moment = _iso(_now())
        body = body or {}
        dataset = {
            "id": dataset_id,
            "name": name,
            "description": description,
            "project_id": project["id"] if project else None,
            "project_name": project["name"] if project else None,
            "type": body.get("type") or "dataset",
            "visibility": body.get("visibility") or "private",
            "tags": body.get("tags"),
            "status": "completed",
            "created_at": moment,
            "created_by": "admin",
            "last_updated_at": moment,
            "last_updated_by": "admin",
        }
        self._datasets[dataset_id] = dataset
        self._versions[dataset_id] = []
        return dataset

    def _dataset_public(self, dataset: dict[str, Any]) -> dict[str, Any]:
        versions = self._versions.get(dataset["id"], [])
        latest = versions[-1] if versions else None
        experiments = [e for e in self._experiments.values() if e["dataset_id"] == dataset["id"]]
        public = {key: value for key, value in dataset.items() if key != "project_name"}
        public["dataset_items_count"] = len(latest["items"]) if latest else 0
        public["experiment_count"] = len(experiments)
        if experiments:
            public["last_created_experiment_at"] = max(e["created_at"] for e in experiments)
        if latest is not None:
            public["latest_version"] = {
                "id": latest["id"],
                "version_hash": latest["version_hash"],
                "version_name": latest["version_name"],
                "change_description": latest.get("change_description"),
                "tags": list(latest.get("tags") or []),
            }
        return _strip_none(public)

    def _create_dataset(self, body: Any, query: dict[str, str]) -> _Response:
        dataset = self._create_dataset_record(
            body.get("name"), body.get("id"), body.get("project_name"), body.get("description"), body
        )
        return _Response(201, None, headers={"Location": f"{self.url}v1/private/datasets/{dataset['id']}"})

    def _list_datasets(self, body: Any, query: dict[str, str]) -> _Response:
        page, size = self._page_params(query)
        name = (query.get("name") or "").lower()
        found = sorted(
            (d for d in self._datasets.values() if name in d["name"].lower()),
            key=lambda d: d["id"],
            reverse=True,
        )
        content = [self._dataset_public(d) for d in found[(page - 1) * size : page * size]]
        return _Response(200, {"page": page, "size": size, "total": len(found), "content": content})

    def _retrieve_dataset(self, body: Any, query: dict[str, str]) -> _Response:
        name = body.get("dataset_name")
        dataset = self._find_dataset(name=name)
        if dataset is None:
            if isinstance(name, str):
                self._dataset_misses[name] = self._dataset_misses.get(name, 0) + 1
            raise _HttpError(404, "Dataset not found")
        return _Response(200, self._dataset_public(dataset))

    def _get_dataset(self, body: Any, query: dict[str, str], dataset_id: str) -> _Response:
        dataset = self._datasets.get(dataset_id)
        if dataset is None:
            raise _HttpError(404, "Dataset not found")
        return _Response(200, self._dataset_public(dataset))

    def _put_dataset_items(self, body: Any, query: dict[str, str]) -> _Response:
        items = body.get("items") or []
        if not items:
            raise _HttpError(422, "items size must be between 1 and 1000")
        for item in items:
            if item.get("id") is not None:
                self._check_v7(item["id"], "dataset_item")
        if body.get("dataset_id"):
            dataset = self._find_dataset(dataset_id=str(body["dataset_id"]))
            if dataset is None:
                raise _HttpError(404, "Dataset not found")
        elif body.get("dataset_name"):
            dataset = self._find_dataset(name=body["dataset_name"])
            if dataset is None:  # the backend creates the dataset on the fly
                dataset = self._create_dataset_record(
                    body["dataset_name"], None, body.get("project_name"), None, None
                )
        else:
            raise _HttpError(422, "The request body must provide either a dataset_name or a dataset_id")
        self._insert_items(dataset, items, batch_group_id=body.get("batch_group_id"))
        return _Response(204)

    def _insert_items(
        self, dataset: dict[str, Any], items: list[dict[str, Any]], batch_group_id: str | None
    ) -> None:
        """Upsert ``items`` by id. A ``batch_group_id`` different from the latest version's makes a new version
        (a copy of the latest plus these items); the same one, or none, changes the latest version in place."""
        versions = self._versions.setdefault(dataset["id"], [])
        latest = versions[-1] if versions else None
        moment = _iso(_now())
        if latest is None or (batch_group_id is not None and latest.get("batch_group_id") != batch_group_id):
            version = {
                "id": uuid7(),
                "dataset_id": dataset["id"],
                "version_name": f"v{len(versions) + 1}",
                "batch_group_id": batch_group_id,
                "items": copy.deepcopy(latest["items"]) if latest else {},
                "items_added": 0,
                "items_modified": 0,
                "items_deleted": 0,
                "change_description": None,
                "tags": [],
                "created_at": moment,
                "created_by": "admin",
                "last_updated_at": moment,
                "last_updated_by": "admin",
            }
            versions.append(version)
        else:
            version = latest
        for write in items:
            item_id = str(uuid.UUID(str(write["id"]))) if write.get("id") else uuid7()
            previous = version["items"].get(item_id)
            stored = {
                "id": item_id,
                "dataset_item_id": item_id,
                "dataset_id": dataset["id"],
                "source": write.get("source") or "sdk",
                "data": copy.deepcopy(write.get("data")),
                "trace_id": write.get("trace_id"),
                "span_id": write.get("span_id"),
                "description": write.get("description"),
                "tags": list(write.get("tags") or []),
                "evaluators": copy.deepcopy(write.get("evaluators")),
                "execution_policy": copy.deepcopy(write.get("execution_policy")),
                "created_at": previous["created_at"] if previous else moment,
                "created_by": "admin",
                "last_updated_at": moment,
                "last_updated_by": "admin",
            }
            if previous is None:
                version["items_added"] += 1
            elif previous != stored:
                version["items_modified"] += 1
            version["items"][item_id] = stored
        version["items_total"] = len(version["items"])
        version["last_updated_at"] = moment
        digest = hashlib.sha256(
            _json_bytes([dataset["id"], version["version_name"], sorted(version["items"].items())])
        ).hexdigest()
        version["version_hash"] = digest[:16]
        dataset["last_updated_at"] = moment

    def _version_public(self, dataset_id: str, version: dict[str, Any]) -> dict[str, Any]:
        versions = self._versions.get(dataset_id, [])
        public = {key: value for key, value in version.items() if key not in ("items", "batch_group_id")}
        public["is_latest"] = bool(versions) and versions[-1] is version
        return _strip_none(public)

    def _resolve_version(self, dataset_id: str, ref: str | None) -> dict[str, Any] | None:
        """A version by hash, name or id; the latest when ``ref`` is empty. 404 for an unknown reference."""
        versions = self._versions.get(dataset_id, [])
        if not ref:
            return versions[-1] if versions else None
        for version in versions:
            if ref in (version["version_hash"], version["version_name"], version["id"]):
                return version
        raise _HttpError(404, f"Dataset version not found: '{ref}'")

    def _versions_page(self, body: Any, query: dict[str, str], dataset_id: str) -> _Response:
        if dataset_id not in self._datasets:
            raise _HttpError(404, "Dataset not found")
        page, size = self._page_params(query)
        newest_first = list(reversed(self._versions.get(dataset_id, [])))
        content = [self._version_public(dataset_id, v) for v in newest_first[(page - 1) * size : page * size]]
        return _Response(200, {"page": page, "size": size, "total": len(newest_first), "content": content})

    def _retrieve_version(self, body: Any, query: dict[str, str], dataset_id: str) -> _Response:
        if dataset_id not in self._datasets:
            raise _HttpError(404, "Dataset not found")
        name = body.get("version_name")
        for version in self._versions.get(dataset_id, []):
            if version["version_name"] == name:
                return _Response(200, self._version_public(dataset_id, version))
        raise _HttpError(404, f"Dataset version not found: '{name}'")

    def _version_by_hash(
        self, body: Any, query: dict[str, str], dataset_id: str, version_hash: str
    ) -> _Response:
        if dataset_id not in self._datasets:
            raise _HttpError(404, "Dataset not found")
        for version in self._versions.get(dataset_id, []):
            if version["version_hash"] == version_hash:
                return _Response(200, self._version_public(dataset_id, version))
        raise _HttpError(404, f"Dataset version not found: '{version_hash}'")

    @staticmethod
    def _item_public(item: dict[str, Any]) -> dict[str, Any]:
        public = _strip_none(dict(item))
        public.setdefault("tags", [])
        return public

    def _filtered_items(
        self, dataset: dict[str, Any], version_ref: str | None, filters: Any
    ) -> list[dict[str, Any]]:
        version = self._resolve_version(dataset["id"], version_ref)
        expressions = _parse_filters(filters)
        items = list(version["items"].values()) if version else []
        items = [item for item in items if _dataset_item_matches(item, expressions)]
        items.sort(key=lambda item: item["id"], reverse=True)  # newest first (UUID v7 ids)
        return items

    def _stream_dataset_items(self, body: Any, query: dict[str, str]) -> _Response:
        dataset = self._find_dataset(name=body.get("dataset_name"))
        if dataset is None:
            raise _HttpError(404, "Dataset not found")
        items = self._filtered_items(dataset, body.get("dataset_version"), body.get("filters"))
        cursor = body.get("last_retrieved_id")
        if cursor:
            items = [item for item in items if item["id"] < str(cursor).lower()]
        limit = body.get("steam_limit") or 500
        return self._ndjson(self._item_public(item) for item in items[: int(limit)])

    def _get_items(self, body: Any, query: dict[str, str], dataset_id: str) -> _Response:
        dataset = self._datasets.get(dataset_id)
        if dataset is None:
            raise _HttpError(404, "Dataset not found")
        page, size = self._page_params(query)
        items = self._filtered_items(dataset, query.get("version"), query.get("filters"))
        content = [self._item_public(item) for item in items[(page - 1) * size : page * size]]
        return _Response(
            200, {"page": page, "size": size, "total": len(items), "content": content, "columns": []}
        )

    # -- experiments ------------------------------------------------------------------------------------------------

    def _create_experiment(self, body: Any, query: dict[str, str]) -> _Response:
        dataset_name = body.get("dataset_name")
        if not dataset_name:
            raise _HttpError(422, "dataset_name must not be blank")
        experiment_id = self._check_v7(body["id"], "Experiment") if body.get("id") else uuid7()
        if experiment_id in self._experiments:
            # The backend's ExperimentService.create answers a create with the id of an existing experiment
            # as a success ("If a conflict occurs, we just return the id of the existing experiment") and
            # leaves that experiment as it was; older backends answered 409, which the plugin takes too.
            return _Response(
                201, None, headers={"Location": f"{self.url}v1/private/experiments/{experiment_id}"}
            )
        dataset = self._find_dataset(name=dataset_name)
        if dataset is None:  # the backend gets-or-creates the dataset by name
            dataset = self._create_dataset_record(dataset_name, None, body.get("project_name"), None, None)
        version_id = body.get("dataset_version_id")
        if version_id is None:
            versions = self._versions.get(dataset["id"], [])
            version_id = versions[-1]["id"] if versions else None
        elif not any(v["id"] == version_id for v in self._versions.get(dataset["id"], [])):
            raise _HttpError(404, f"Dataset version not found: '{version_id}'")
        project = self._project(body.get("project_name")) if body.get("project_name") else None
        moment = _iso(_now())
        experiment = {
            "id": experiment_id,
            "name": body.get("name") or f"experiment-{len(self._experiments) + 1}",
            "dataset_name": dataset["name"],
            "dataset_id": dataset["id"],
            "project_id": project["id"] if project else None,
            "project_name": project["name"] if project else None,
            "metadata": copy.deepcopy(body.get("metadata")),
            "tags": list(body.get("tags") or []) or None,
            "type": body.get("type") or "regular",
            "evaluation_method": body.get("evaluation_method") or "dataset",
            "optimization_id": body.get("optimization_id"),
            "status": body.get("status") or "running",
            "experiment_scores": copy.deepcopy(body.get("experiment_scores")),
            "prompt_version": copy.deepcopy(body.get("prompt_version")),
            "prompt_versions": copy.deepcopy(body.get("prompt_versions")),
            "dataset_version_id": version_id,
            "created_at": moment,
            "created_by": "admin",
            "last_updated_at": moment,
            "last_updated_by": "admin",
        }
        self._experiments[experiment_id] = experiment
        return _Response(201, None, headers={"Location": f"{self.url}v1/private/experiments/{experiment_id}"})

    def _experiment_public(self, experiment: dict[str, Any]) -> dict[str, Any]:
        items = [i for i in self._experiment_items.values() if i["experiment_id"] == experiment["id"]]
        totals: dict[str, list[float]] = {}
        for item in items:
            for score in self._scores_for_trace(item["trace_id"]):
                totals.setdefault(score["name"], []).append(float(score["value"]))
        public = dict(experiment)
        public["trace_count"] = len({i["trace_id"] for i in items})
        public["dataset_item_count"] = len({i["dataset_item_id"] for i in items})
        public["feedback_scores"] = [
            {"name": name, "value": sum(values) / len(values)} for name, values in sorted(totals.items())
        ]
        return _strip_none(public)

    def _get_experiment(self, body: Any, query: dict[str, str], experiment_id: str) -> _Response:
        experiment = self._experiments.get(experiment_id)
        if experiment is None:
            raise _HttpError(404, f"Experiment not found: '{experiment_id}'")
        return _Response(200, self._experiment_public(experiment))

    def _matching_experiments(self, name: str | None, dataset_id: str | None = None) -> list[dict[str, Any]]:
        needle = (name or "").lower()
        found = [
            e
            for e in self._experiments.values()
            if needle in e["name"].lower() and (dataset_id is None or e["dataset_id"] == dataset_id)
        ]
        return sorted(found, key=lambda e: e["id"], reverse=True)

    def _stream_experiments(self, body: Any, query: dict[str, str]) -> _Response:
        found = self._matching_experiments(body.get("name"))
        if body.get("project_name"):
            found = [e for e in found if (e.get("project_name") or "") == body["project_name"]]
        cursor = body.get("last_retrieved_id")
        if cursor:
            found = [e for e in found if e["id"] < str(cursor).lower()]
        limit = int(body.get("limit") or 500)
        return self._ndjson(self._experiment_public(e) for e in found[:limit])

    def _list_experiments(self, body: Any, query: dict[str, str]) -> _Response:
        page, size = self._page_params(query)
        # The backend's query parameter is camel-cased, as the SDK sends it (an unknown one is ignored).
        found = self._matching_experiments(query.get("name"), query.get("datasetId"))
        if query.get("project_id"):
            found = [e for e in found if e.get("project_id") == query["project_id"]]
        if query.get("experiment_ids"):
            wanted = set(json.loads(query["experiment_ids"]))
            found = [e for e in found if e["id"] in wanted]
        content = [self._experiment_public(e) for e in found[(page - 1) * size : page * size]]
        return _Response(200, {"page": page, "size": size, "total": len(found), "content": content})

    def _dataset_item_exists(self, dataset_item_id: str) -> bool:
        return any(dataset_item_id in v["items"] for versions in self._versions.values() for v in versions)

    def _create_experiment_items(self, body: Any, query: dict[str, str]) -> _Response:
        writes = body.get("experiment_items") or []
        if not writes:
            raise _HttpError(422, "experiment_items size must be between 1 and 1000")
        checked = []
        for write in writes:
            item_id = self._check_v7(write["id"], "Experiment Item") if write.get("id") else uuid7()
            experiment_id = self._check_v7(write["experiment_id"], "Experiment Item experiment")
            dataset_item_id = self._check_v7(write["dataset_item_id"], "Experiment Item datasetItem")
            trace_id = self._check_v7(write["trace_id"], "Experiment Item trace")
            if experiment_id not in self._experiments:
                raise _HttpError(
                    409, "Upserting experiment item with 'experiment_id' not belonging to the workspace"
                )
            if not self._dataset_item_exists(dataset_item_id):
                raise _HttpError(
                    409, "Upserting experiment item with 'dataset_item_id' not belonging to the workspace"
                )
            checked.append((item_id, experiment_id, dataset_item_id, trace_id, write))
        moment = _iso(_now())
        for item_id, experiment_id, dataset_item_id, trace_id, write in checked:
            previous = self._experiment_items.get(item_id)
            project = self._project(write.get("project_name")) if write.get("project_name") else None
            self._experiment_items[item_id] = {
                "id": item_id,
                "experiment_id": experiment_id,
                "dataset_item_id": dataset_item_id,
                "trace_id": trace_id,
                "project_name": project["name"] if project else write.get("project_name"),
                "project_id": project["id"] if project else write.get("project_id"),
                "execution_policy": copy.deepcopy(write.get("execution_policy")),
                "created_at": previous["created_at"] if previous else moment,
                "created_by": "admin",
                "last_updated_at": moment,
                "last_updated_by": "admin",
            }
        return _Response(204)

    def _delete_experiment_items(self, body: Any, query: dict[str, str]) -> _Response:
        # As Opik's ExperimentItemsDelete: 1 to 1000 ids; an id that is not there is no error.
        ids = body.get("ids") or []
        if not 1 <= len(ids) <= 1000:
            raise _HttpError(422, "ids size must be between 1 and 1000")
        for item_id in [_canonical_uuid(i, "Experiment Item") for i in ids]:
            self._experiment_items.pop(item_id, None)
        return _Response(204)

    def _finish_experiments(self, body: Any, query: dict[str, str]) -> _Response:
        moment = _iso(_now())
        for experiment_id in body.get("ids") or []:
            experiment = self._experiments.get(str(experiment_id))
            if experiment is not None:
                experiment["status"] = "completed"
                experiment["finished_at"] = moment
                experiment["last_updated_at"] = moment
        return _Response(204)

    def _update_experiment(self, body: Any, query: dict[str, str], experiment_id: str) -> _Response:
        experiment = self._experiments.get(experiment_id)
        if experiment is None:
            raise _HttpError(404, f"Experiment not found: '{experiment_id}'")
        for key in ("name", "metadata", "type", "status", "experiment_scores"):
            if body.get(key) is not None:
                experiment[key] = copy.deepcopy(body[key])
        if body.get("tags") is not None:
            experiment["tags"] = list(body["tags"])
        tags = list(experiment.get("tags") or [])
        tags += [t for t in body.get("tags_to_add") or [] if t not in tags]
        tags = [t for t in tags if t not in set(body.get("tags_to_remove") or [])]
        experiment["tags"] = tags or None
        experiment["last_updated_at"] = _iso(_now())
        return _Response(204)

    def _scores_for_trace(self, trace_id: str) -> list[dict[str, Any]]:
        return list(self._feedback_scores.get(trace_id, {}).values())

    def _score_public(self, score: dict[str, Any]) -> dict[str, Any]:
        return _strip_none(
            {
                key: score.get(key)
                for key in (
                    "name",
                    "category_name",
                    "value",
                    "reason",
                    "source",
                    "created_at",
                    "last_updated_at",
                    "created_by",
                    "last_updated_by",
                )
            }
        )

    def _experiment_item_view(self, item: dict[str, Any]) -> dict[str, Any]:
        """An experiment item joined with its trace and the trace's feedback scores (``ExperimentItemCompare``)."""
        trace = self._traces.get(item["trace_id"]) or {}
        view = {
            "id": item["id"],
            "experiment_id": item["experiment_id"],
            "dataset_item_id": item["dataset_item_id"],
            "trace_id": item["trace_id"],
            "project_id": item.get("project_id"),
            "input": trace.get("input"),
            "output": trace.get("output"),
            "trace_metadata": trace.get("metadata"),
            "feedback_scores": [self._score_public(s) for s in self._scores_for_trace(item["trace_id"])],
            "execution_policy": item.get("execution_policy"),
            "duration": self._duration_ms(trace),
            "created_at": item["created_at"],
            "last_updated_at": item["last_updated_at"],
            "created_by": item["created_by"],
            "last_updated_by": item["last_updated_by"],
        }
        return _strip_none(view)

    @staticmethod
    def _duration_ms(trace: dict[str, Any]) -> float | None:
        try:
            start, end = _parse_time(trace.get("start_time")), _parse_time(trace.get("end_time"))
        except ValueError:
            return None
        if start is None or end is None:
            return None
        return (end - start).total_seconds() * 1000.0

    def _dataset_item_for(
        self, dataset_id: str, item_id: str, version_id: str | None
    ) -> dict[str, Any] | None:
        versions = self._versions.get(dataset_id, [])
        preferred = [v for v in versions if v["id"] == version_id]
        for version in preferred + list(reversed(versions)):
            if item_id in version["items"]:
                found: dict[str, Any] = version["items"][item_id]
                return found
        return None

    def _compare(self, body: Any, query: dict[str, str], dataset_id: str) -> _Response:
        if dataset_id not in self._datasets:
            raise _HttpError(404, "Dataset not found")
        raw_ids = query.get("experiment_ids")
        if not raw_ids:
            raise _HttpError(400, "experiment_ids query parameter is required")
        try:
            experiment_ids = [str(value) for value in json.loads(raw_ids)]
        except (json.JSONDecodeError, TypeError):
            raise _HttpError(400, f"Invalid experiment_ids query parameter '{raw_ids}'") from None
        page, size = self._page_params(query)
        expressions = _parse_filters(query.get("filters"))
        wanted = set(experiment_ids)
        by_item: dict[str, list[dict[str, Any]]] = {}
        for item in self._experiment_items.values():
            if item["experiment_id"] in wanted:
                by_item.setdefault(item["dataset_item_id"], []).append(item)
        rows = []
        for dataset_item_id, items in by_item.items():
            version_id = self._experiments[items[0]["experiment_id"]].get("dataset_version_id")
            dataset_item = self._dataset_item_for(dataset_id, dataset_item_id, version_id)
            if dataset_item is None or not _dataset_item_matches(dataset_item, expressions):
                continue
            row = self._item_public(dataset_item)
            row["experiment_items"] = [self._experiment_item_view(item) for item in items]
            rows.append(row)
        rows.sort(key=lambda row: row["id"], reverse=True)
        content = rows[(page - 1) * size : page * size]
        return _Response(
            200, {"page": page, "size": size, "total": len(rows), "content": content, "columns": []}
        )

    def _stream_experiment_items(self, body: Any, query: dict[str, str]) -> _Response:
        name = body.get("experiment_name")
        experiment_ids = {e["id"] for e in self._experiments.values() if e["name"] == name}
        items = sorted(
            (i for i in self._experiment_items.values() if i["experiment_id"] in experiment_ids),
            key=lambda i: i["id"],
            reverse=True,
        )
        cursor = body.get("last_retrieved_id")
        if cursor:
            items = [i for i in items if i["id"] < str(cursor).lower()]
        limit = int(body.get("limit") or 500)
        return self._ndjson(self._experiment_item_view(i) for i in items[:limit])

    # -- traces, spans, feedback scores ---------------------------------------------------------------------------

    def _store_row(self, table: dict[str, dict[str, Any]], row: dict[str, Any]) -> None:
        """``ReplacingMergeTree(last_updated_at)``: the row with the newest ``last_updated_at`` is the one read
        back; on a tie the later write wins. A row without ``last_updated_at`` gets the server's clock."""
        previous = table.get(row["id"])
        if previous is not None:
            if _time_key(previous["last_updated_at"]) > _time_key(row["last_updated_at"]):
                return
            row["created_at"] = previous.get("created_at", row.get("created_at"))
        table[row["id"]] = row

    @staticmethod
    def _dedupe_batch(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The backend's batch de-duplication: among rows with an id and a ``last_updated_at``, keep one per id,
        the newest (the later one on a tie); rows without either are kept as they are."""
        kept: dict[str, dict[str, Any]] = {}
        others = []
        for row in rows:
            if row.get("id") is None or row.get("last_updated_at") is None:
                others.append(row)
                continue
            key = str(row["id"]).lower()
            current = kept.get(key)
            if current is None or not _time_key(current["last_updated_at"]) > _time_key(
                row["last_updated_at"]
            ):
                kept[key] = row
        return others + list(kept.values())

    def _trace_row(self, write: dict[str, Any], trace_id: str, moment: str) -> dict[str, Any]:
        project = self._project(write.get("project_name"))
        row: dict[str, Any] = dict.fromkeys(_TRACE_FIELDS)
        row.update({key: copy.deepcopy(value) for key, value in write.items()})
        row.update(
            {
                "id": trace_id,
                "project_name": project["name"],
                "project_id": project["id"],
                "last_updated_at": write.get("last_updated_at") or moment,
                "created_at": moment,
                "created_by": "admin",
                "last_updated_by": "admin",
            }
        )
        return row

    def _create_traces(self, body: Any, query: dict[str, str]) -> _Response:
        writes = body.get("traces") or []
        if not writes:
            raise _HttpError(422, "traces size must be between 1 and 1000")
        rows = self._dedupe_batch(writes)
        checked = []
        for write in rows:
            trace_id = self._check_v7(write["id"], "Trace") if write.get("id") else uuid7()
            self._check_window(trace_id, "Trace", creating=True)
            checked.append((trace_id, write))
        moment = _iso(_now())
        for trace_id, write in checked:
            self._store_row(self._traces, self._trace_row(write, trace_id, moment))
        return _Response(204)

    def _create_trace(self, body: Any, query: dict[str, str]) -> _Response:
        trace_id = self._check_v7(body["id"], "Trace") if body.get("id") else uuid7()
        self._check_window(trace_id, "Trace", creating=True)
        previous = self._traces.get(trace_id)
        moment = _iso(_now())
        row = self._trace_row(body, trace_id, moment)
        if previous is not None:
            if previous.get("_partial") and previous["project_id"] == row["project_id"]:
                # a PATCH came first: the fields it set win, as the backend's merging INSERT ... SELECT does
                merged = dict(row)
                merged.update(
                    {
                        k: v
                        for k, v in previous.items()
                        if v is not None and k not in ("_partial", "start_time")
                    }
                )
                merged.pop("_partial", None)
                self._traces[trace_id] = merged
                return _Response(201, None, headers={"Location": f"{self.url}v1/private/traces/{trace_id}"})
            if previous["project_id"] != row["project_id"]:
                raise _HttpError(409, "Project name and workspace name do not match the existing trace")
            raise _HttpError(409, "Trace already exists")
        row["last_updated_at"] = moment
        self._traces[trace_id] = row
        return _Response(201, None, headers={"Location": f"{self.url}v1/private/traces/{trace_id}"})

    def _update_trace(self, body: Any, query: dict[str, str], trace_id: str) -> _Response:
        trace_id = self._check_v7(trace_id, "Trace")
        self._check_window(trace_id, "Trace", creating=False)
        moment = _iso(_now())
        project = self._project(body.get("project_name")) if not body.get("project_id") else None
        trace = self._traces.get(trace_id)
        if trace is None:
            # the backend writes a partial trace (start_time at the epoch) that a later create completes
            trace = {
                "id": trace_id,
                "project_name": project["name"] if project else None,
                "project_id": project["id"] if project else body.get("project_id"),
                "start_time": "1970-01-01T00:00:00Z",
                "created_at": moment,
                "created_by": "admin",
                "_partial": True,
            }
        elif project is not None and trace.get("project_id") != project["id"]:
            raise _HttpError(409, "Project name and workspace name do not match the existing trace")
        for key in (
            "name",
            "end_time",
            "input",
            "output",
            "metadata",
            "error_info",
            "thread_id",
            "ttft",
            "source",
            "environment",
        ):
            if body.get(key) is not None:
                trace[key] = copy.deepcopy(body[key])
        if body.get("tags") is not None:
            trace["tags"] = list(body["tags"])
        if body.get("tags_to_add") or body.get("tags_to_remove"):
            tags = list(trace.get("tags") or [])
            tags += [t for t in body.get("tags_to_add") or [] if t not in tags]
            trace["tags"] = [t for t in tags if t not in set(body.get("tags_to_remove") or [])]
        trace["last_updated_at"] = moment
        trace["last_updated_by"] = "admin"
        self._traces[trace_id] = trace
        return _Response(204)

    def _trace_public(self, trace: dict[str, Any]) -> dict[str, Any]:
        public = {key: value for key, value in trace.items() if key not in ("project_name", "_partial")}
        public["feedback_scores"] = [self._score_public(s) for s in self._scores_for_trace(trace["id"])]
        public["span_count"] = sum(1 for span in self._spans.values() if span.get("trace_id") == trace["id"])
        public["duration"] = self._duration_ms(trace)
        return _strip_none(public)

    def _get_trace(self, body: Any, query: dict[str, str], trace_id: str) -> _Response:
        trace = self._traces.get(trace_id.lower())
        if trace is None:
            raise _HttpError(404, "Trace not found")
        return _Response(200, self._trace_public(trace))

    def _list_traces(self, body: Any, query: dict[str, str]) -> _Response:
        page, size = self._page_params(query)
        found = list(self._traces.values())
        if query.get("project_name"):
            found = [
                t for t in found if (t.get("project_name") or "").lower() == query["project_name"].lower()
            ]
        if query.get("project_id"):
            found = [t for t in found if t.get("project_id") == query["project_id"]]
        found.sort(key=lambda t: t["id"], reverse=True)
        content = [self._trace_public(t) for t in found[(page - 1) * size : page * size]]
        return _Response(200, {"page": page, "size": size, "total": len(found), "content": content})

    def _create_spans(self, body: Any, query: dict[str, str]) -> _Response:
        writes = body.get("spans") or []
        if not writes:
            raise _HttpError(422, "spans size must be between 1 and 1000")
        checked = []
        for write in self._dedupe_batch(writes):
            span_id = self._check_v7(write["id"], "Span") if write.get("id") else uuid7()
            self._check_window(span_id, "Span", creating=True)
            trace_id = self._check_v7(write.get("trace_id"), "Span trace")
            self._check_window(trace_id, "Span trace", creating=False)
            if write.get("parent_span_id"):
                self._check_v7(write["parent_span_id"], "Span parent")
            checked.append((span_id, trace_id, write))
        moment = _iso(_now())
        for span_id, trace_id, write in checked:
            project = self._project(write.get("project_name"))
            row = {key: copy.deepcopy(value) for key, value in write.items()}
            row.update(
                {
                    "id": span_id,
                    "trace_id": trace_id,
                    "project_name": project["name"],
                    "project_id": project["id"],
                    "last_updated_at": write.get("last_updated_at") or moment,
                    "created_at": moment,
                }
            )
            self._store_row(self._spans, row)
        return _Response(204)

    def _search_spans(self, body: Any, query: dict[str, str]) -> _Response:
        """The spans of a project, or of one trace, newest first, as NDJSON (``Opik.search_spans``);
        filters are not supported here."""
        if body.get("filters"):
            raise _HttpError(400, "the test server does not support span filters")
        found = list(self._spans.values())
        if body.get("project_name"):
            wanted = str(body["project_name"]).lower()
            found = [s for s in found if (s.get("project_name") or "").lower() == wanted]
        if body.get("project_id"):
            found = [s for s in found if s.get("project_id") == body["project_id"]]
        if body.get("trace_id"):
            trace_id = _canonical_uuid(body["trace_id"], "Trace")
            found = [s for s in found if s["trace_id"] == trace_id]
        found.sort(key=lambda s: s["id"], reverse=True)
        cursor = body.get("last_retrieved_id")
        if cursor:
            found = [s for s in found if s["id"] < str(cursor).lower()]
        limit = int(body.get("limit") or 500)
        return self._ndjson(self._span_public(s) for s in found[:limit])

    def _search_threads(self, body: Any, query: dict[str, str]) -> _Response:
        """The threads of a project, made of its traces by ``thread_id`` (``Opik.search_threads``),
        newest first, as NDJSON; of filters only ``id =`` is supported here. A thread's messages
        are its traces' inputs and outputs, as Opik counts them."""
        filters = body.get("filters") or []
        wanted: str | None = None
        for found_filter in filters:
            if (found_filter.get("field"), found_filter.get("operator")) != ("id", "="):
                raise _HttpError(400, "the test server supports only the thread filter id = VALUE")
            wanted = str(found_filter.get("value"))
        traces = [t for t in self._traces.values() if t.get("thread_id")]
        if body.get("project_name"):
            name = str(body["project_name"]).lower()
            traces = [t for t in traces if (t.get("project_name") or "").lower() == name]
        threads: dict[str, list[dict[str, Any]]] = {}
        for trace in sorted(traces, key=lambda t: t["start_time"]):
            threads.setdefault(trace["thread_id"], []).append(trace)
        found = []
        for thread_id, turns in threads.items():
            if wanted is not None and thread_id != wanted:
                continue
            found.append(
                {
                    "id": thread_id,
                    "thread_model_id": turns[0]["id"],
                    "project_id": turns[0].get("project_id"),
                    "start_time": turns[0]["start_time"],
                    "end_time": turns[-1].get("end_time"),
                    "first_message": json.dumps(turns[0].get("input")),
                    "last_message": json.dumps(turns[-1].get("output")),
                    "number_of_messages": sum(
                        (t.get("input") is not None) + (t.get("output") is not None) for t in turns
                    ),
                    "status": "active",
                    "feedback_scores": [
                        self._score_public(score)
                        for score in sorted(
                            self._thread_scores.get(
                                (str(turns[0].get("project_id")), thread_id), {}
                            ).values(),
                            key=lambda score: score["_order"],
                        )
                    ],
                    "created_at": turns[0].get("created_at"),
                    "last_updated_at": turns[-1].get("last_updated_at"),
                }
            )
        found.sort(key=lambda t: t["thread_model_id"], reverse=True)
        cursor = body.get("last_retrieved_thread_model_id")
        if cursor:
            found = [t for t in found if t["thread_model_id"] < str(cursor)]
        limit = int(body.get("limit") or 500)
        return self._ndjson(_strip_none(t) for t in found[:limit])

    def _span_public(self, span: dict[str, Any]) -> dict[str, Any]:
        public = dict(span)
        public["duration"] = self._duration_ms(span)
        return _strip_none(public)

    def _store_score(
        self,
        trace_id: str,
        write: dict[str, Any],
        moment: str,
        by_name: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        if by_name is None:
            by_name = self._feedback_scores.setdefault(trace_id, {})
        previous = by_name.get(str(write["name"]))
        project = self._project(write.get("project_name")) if not write.get("project_id") else None
        self._score_writes += 1
        by_name[str(write["name"])] = {
            "id": trace_id,
            "project_name": project["name"] if project else None,
            "project_id": project["id"] if project else write.get("project_id"),
            "name": write["name"],
            "value": write["value"],
            "reason": write.get("reason"),
            "category_name": write.get("category_name"),
            "source": write.get("source"),
            "author": write.get("author"),
            "created_at": previous["created_at"] if previous else moment,
            "created_by": "admin",
            "last_updated_at": moment,
            "last_updated_by": "admin",
            "_order": previous["_order"] if previous else self._score_writes,
        }

    def _score_traces(self, body: Any, query: dict[str, str]) -> _Response:
        scores = body.get("scores") or []
        if not scores or len(scores) > 1000:
            raise _HttpError(422, "scores size must be between 1 and 1000")
        checked = [(_canonical_uuid(score["id"], "Trace"), score) for score in scores]
        moment = _iso(_now())
        for trace_id, score in checked:
            self._store_score(trace_id, score, moment)
        return _Response(204)

    def _score_threads(self, body: Any, query: dict[str, str]) -> _Response:
        """Thread feedback scores (``ThreadsClient.log_threads_feedback_scores``): as the Opik
        backend, on the thread of that id in the score's project, made if it has no trace yet (its
        status is not checked: open threads take scores), one score per name, the newest kept."""
        scores = body.get("scores") or []
        if not scores or len(scores) > 1000:
            raise _HttpError(422, "scores size must be between 1 and 1000")
        moment = _iso(_now())
        for score in scores:
            thread_id = str(score.get("thread_id") or "")
            if not thread_id.strip():
                raise _HttpError(422, "thread_id must not be blank")
            project = self._project(score.get("project_name"))
            by_name = self._thread_scores.setdefault((project["id"], thread_id), {})
            self._store_score(thread_id, {**score, "project_id": project["id"]}, moment, by_name)
        return _Response(204)

    def _score_trace(self, body: Any, query: dict[str, str], trace_id: str) -> _Response:
        trace_id = _canonical_uuid(trace_id, "Trace")
        project_name = (self._traces.get(trace_id) or {}).get("project_name")
        self._store_score(trace_id, {**body, "project_name": project_name}, _iso(_now()))
        return _Response(204)
