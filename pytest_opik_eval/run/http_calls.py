"""The app's HTTP requests and responses as recordings hold them: canonical, scrubbed, diffable.

A request is found again by its canonical form: method, URL (key-like query parameters
redacted, query sorted) and body (JSON parsed, with the fields an SDK fills with per-call values
removed). Headers are not part of it: they carry the API key, and SDKs put versions and retry
counts in them. Everything here is pure: the recorder (``run/recording.py``) feeds it what
vcrpy's stubs hand over, and nothing is written before it went through a :class:`Scrubber`.
"""

from __future__ import annotations

import base64
import difflib
import functools
import gzip
import hashlib
import importlib
import json
import re
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import ModuleType
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from pytest_opik_eval.masking import REDACTED, Scrubber, is_credential, is_secret_param
from pytest_opik_eval.run import aiohttp_bodies
from pytest_opik_eval.store.http_recordings import (
    Interaction,
    RecordedRequest,
    RecordedResponse,
    RecordedUsage,
)

# Fields of a JSON request body (top level) that SDKs fill with per-call values: a request that
# differs only there is the same request.
VOLATILE_FIELDS = frozenset({"user", "safety_identifier", "prompt_cache_key", "metadata"})
# Response headers never stored (besides credentials, see masking): cookies; what replay makes
# untrue (the body is stored decoded, whole); and what changes on every call (dates, request ids,
# timings, rate limits), which no client needs again and which would make each re-recording a diff.
_DROPPED_HEADER = re.compile(
    r"set-cookie|cookie|content-length|content-encoding|transfer-encoding"
    r"|date|age|expires|via|alt-svc|server-timing|traceparent|tracestate|cf-ray|cf-cache-status"
    r"|.*request-id|.*trace-id|x-amzn?-.*id.*|x-cloud-trace-context|x-envoy-upstream-service-time"
    r"|openai-processing-ms|.*ratelimit.*",
    re.IGNORECASE,
)
_BOUNDARY = re.compile(r"multipart/.*;\s*boundary=([^;]+)", re.IGNORECASE)
_FIELD_NAME = re.compile(rb'content-disposition:[^\r\n]*?[; ]name="?([^";\r\n]*)', re.IGNORECASE)
_ZSTD_FRAME = b"\x28\xb5\x2f\xfd"


class UnreadableBody(ValueError):
    """A response body this process cannot decode, so cannot scrub: it is not recorded."""


class _NoDecoder(Exception):
    """No module of this process decodes the content coding (the message says what to install)."""


def canonical_request(
    method: str, url: str, body: Any, headers: Mapping[str, Any], scrubber: Scrubber
) -> RecordedRequest:
    """The request as recordings hold it and find it again (see the module's docstring)."""
    scrubber.refresh()
    content_type = _header(headers, "content-type")
    rendered = aiohttp_bodies.rendered(body)
    if rendered is not None:
        body, content_type = rendered
    elif _form_pairs(body):  # aiohttp's data=[(name, value), ...]: a form
        body, content_type = urlencode(body).encode(), aiohttp_bodies.FORM
    elif not isinstance(body, (dict, list)):  # aiohttp's json= (or data=) is not encoded yet
        body = _bytes(body)  # read once: the request may be scrubbed twice
    found = scrubber.found()
    request = _canonical(method, url, body, content_type, _header(headers, "content-encoding"), scrubber)
    if scrubber.found() != found:  # a credential found by name: masked in the rest of the request too
        request = _canonical(method, url, body, content_type, _header(headers, "content-encoding"), scrubber)
    return request


def _canonical(
    method: str, url: str, body: Any, content_type: str | None, encoding: str | None, scrubber: Scrubber
) -> RecordedRequest:
    # The body first: a credential found there is masked in the URL too.
    stored = _request_body(body, content_type, encoding, scrubber)
    return RecordedRequest(
        method=method.upper(),
        url=canonical_url(url, scrubber),
        body=stored,
        content_type=content_type.split(";")[0].strip() if content_type else None,
    )


def canonical_url(url: str, scrubber: Scrubber) -> str:
    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")[2]  # user:password@ never stored
    query = []
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if is_secret_param(name):
            scrubber.learn(value)
            value = REDACTED
        query.append((scrubber.text(name), scrubber.text(value)))
    # Scrubbed before encoding: a secret with a "/" or a "+" is found as it is; "<NAME>" kept readable.
    encoded = urlencode(sorted(query), safe="<>")
    return scrubber.text(urlunsplit((parts.scheme.lower(), netloc.lower(), parts.path, encoded, "")))


def _request_body(
    body: Any, content_type: str | None, encoding: str | None, scrubber: Scrubber
) -> dict[str, Any] | None:
    if isinstance(body, (dict, list)):
        return {"json": _without_volatile(scrubber.value(body))}
    data: bytes = body
    if data and encoding:  # a compressed request body (rare): read like a response's
        try:
            data = _decoded(data, encoding)
        except UnreadableBody as error:
            digest = hashlib.sha256(data).hexdigest()
            return {"text": f"{REDACTED}: {error} (sha256 {digest})"}
    if not data:
        return None
    boundary = _BOUNDARY.search(content_type or "")
    if boundary:
        # A multipart body (a file or audio upload) is cut by a random boundary on each call.
        return {"text": _multipart(data, boundary.group(1).strip('"').encode(), scrubber)}
    if aiohttp_bodies.FORM in (content_type or "").lower() and _is_text(data):
        # A form's first field has no "&" before it, as the others: one is put there to find it.
        return {"text": scrubber.text("&" + data.decode("utf-8"))[1:]}
    parsed = _json(data)
    if isinstance(parsed, (dict, list)):
        return {"json": _without_volatile(scrubber.value(parsed))}
    return _text_or_bytes(data, scrubber)


def _form_pairs(body: Any) -> bool:
    return (
        isinstance(body, list)
        and bool(body)
        and all(isinstance(pair, tuple) and len(pair) == 2 and isinstance(pair[0], str) for pair in body)
    )


def _multipart(data: bytes, boundary: bytes, scrubber: Scrubber) -> str:
    """A multipart body as text, the same on every call: its boundary made ``BOUNDARY``, a
    credential field's value redacted, a part that is not text (a file) in base64, as MIME writes
    it, with the secrets' values masked in its bytes."""
    sections = data.split(b"--" + boundary)
    parts = [sections[0]]
    for section in sections[1:]:
        parts.append(section if section.startswith(b"--") else _part(section, scrubber))
    return scrubber.text(f"--{aiohttp_bodies.BOUNDARY}".encode().join(parts).decode("utf-8", "replace"))


def _part(section: bytes, scrubber: Scrubber) -> bytes:
    head, blank, content = section.partition(b"\r\n\r\n")
    end = b"\r\n" if content.endswith(b"\r\n") else b""
    content = content[: len(content) - len(end)]
    name = _FIELD_NAME.search(head)
    if name and content and is_secret_param(name.group(1).decode("utf-8", "replace")):
        scrubber.learn(content.decode("utf-8", "replace"))
        content = REDACTED.encode()
    elif not _is_text(content):
        content = base64.b64encode(scrubber.bytes(content))
        head += b"\r\nContent-Transfer-Encoding: base64"
    return head + blank + content + end


def _bytes(body: Any) -> bytes:
    """The body as vcrpy's request holds it: bytes, str, a file, chunks, or None."""
    if body is None:
        return b""
    if isinstance(body, str):
        return body.encode()
    if isinstance(body, (bytes, bytearray, memoryview)):
        return bytes(body)
    if hasattr(body, "read"):
        data = body.read()
        return data.encode() if isinstance(data, str) else bytes(data)
    return b"".join(_bytes(chunk) for chunk in body)


def _without_volatile(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: v for k, v in value.items() if k not in VOLATILE_FIELDS}
    return value


def _json(data: bytes) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        return None


def _is_text(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _text_or_bytes(data: bytes, scrubber: Scrubber) -> dict[str, Any]:
    try:
        return {"text": scrubber.text(data.decode("utf-8"))}
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(scrubber.bytes(data)).decode("ascii")}


def recorded_response(
    status: int, reason: str, headers: Mapping[str, Sequence[str]], body: bytes, scrubber: Scrubber
) -> RecordedResponse:
    """The response to store: its body decoded (gzip, deflate, br, zstd) and kept as JSON, text
    or base64 by its content type, scrubbed; credentials, cookies and framing headers dropped.
    Raises :class:`UnreadableBody` for a body in a coding this process cannot decode."""
    scrubber.refresh()
    data = _decoded(body, _header(headers, "content-encoding"))
    found = scrubber.found()
    response = _response(status, reason, headers, data, scrubber)
    if scrubber.found() != found:  # a credential found in the body: masked in the headers too
        response = _response(status, reason, headers, data, scrubber)
    return response


def _response(
    status: int, reason: str, headers: Mapping[str, Sequence[str]], data: bytes, scrubber: Scrubber
) -> RecordedResponse:
    content_type = (_header(headers, "content-type") or "").lower()
    stored: dict[str, Any] | None = None
    if data:
        parsed = _json(data) if "json" in content_type else None
        stored = {"json": scrubber.value(parsed)} if parsed is not None else _text_or_bytes(data, scrubber)
    kept: dict[str, list[str]] = {}
    for name, values in headers.items():
        if not _DROPPED_HEADER.fullmatch(name) and not is_credential(name):
            # Lower case, as HTTP/2 sends them: the same file whichever client recorded it.
            kept.setdefault(name.lower(), []).extend(scrubber.text(str(v)) for v in values)
    return RecordedResponse(status=status, reason=scrubber.text(reason or ""), headers=kept, body=stored)


def _header(headers: Mapping[str, Any], name: str) -> str | None:
    values = [
        str(v)
        for key, found in headers.items()
        if key.lower() == name
        for v in (found if isinstance(found, (list, tuple)) else [found])
    ]
    return ", ".join(values) if values else None


def _decoded(data: bytes, encoding: str | None) -> bytes:
    """The body with its content codings undone, last applied first. A body that does not decode
    was already plain: urllib3 and aiohttp decode it themselves and leave the header. One in a
    coding this process has no decoder for is read as it is if it is text, else it is
    :class:`UnreadableBody`."""
    codings = [c.strip().lower() for c in (encoding or "").split(",") if c.strip()]
    while codings:
        coding = codings.pop()
        if coding == "identity":
            continue
        try:
            decoded = _decode(coding, data)
        except _NoDecoder as missing:
            if _is_text(data):
                return data
            raise UnreadableBody(str(missing)) from None
        if decoded is None:
            if _looks_encoded(coding, data):  # cut short, or damaged: its secrets out of reach
                raise UnreadableBody(f"its body is {coding}-encoded and does not decode (cut short?)")
            return data
        data = decoded
    return data


def _looks_encoded(coding: str, data: bytes) -> bool:
    """Whether ``data``, which did not decode, still bears its coding's mark (a gzip, zlib or
    zstd header), or, for br, which has none, is not text: not a body decoded already."""
    if coding in ("gzip", "x-gzip"):
        return data.startswith(b"\x1f\x8b")
    if coding == "deflate":
        return len(data) >= 2 and data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0
    if coding == "zstd":
        return data.startswith(_ZSTD_FRAME)
    return coding == "br" and not _is_text(data)


def _decode(coding: str, data: bytes) -> bytes | None:
    """``data`` decoded, or None when it is not in that coding."""
    decoder = _DECODERS.get(coding)
    if decoder is None:
        raise _NoDecoder(f"its body is {coding}-encoded, a coding this plugin does not decode")
    return decoder(data)


def _gunzip(data: bytes) -> bytes | None:
    try:
        return gzip.decompress(data)
    except (OSError, EOFError, zlib.error):
        return None


def _inflate(data: bytes) -> bytes | None:
    for wbits in (zlib.MAX_WBITS, -zlib.MAX_WBITS):  # raw deflate too, as some servers send it
        try:
            return zlib.decompress(data, wbits)
        except zlib.error:
            continue
    return None


def _unbrotli(data: bytes) -> bytes | None:
    # The modules httpx, urllib3 and aiohttp use: a client asks for br only when it has one.
    brotli = _module("brotli") or _module("brotlicffi")
    if brotli is None:
        raise _NoDecoder("its body is br-encoded, and this process has no br decoder (pip install brotli)")
    try:
        return bytes(brotli.decompress(data))
    except getattr(brotli, "error", Exception):
        return None


def _unzstd(data: bytes) -> bytes | None:
    skippable = len(data) >= 4 and data[1:4] == b"\x2a\x4d\x18" and 0x50 <= data[0] <= 0x5F
    if not (data.startswith(_ZSTD_FRAME) or skippable):
        return None  # not zstd: decoded already
    # Python 3.14's, its backport (urllib3's, aiohttp's), or zstandard (httpx's).
    for name in ("compression.zstd", "backports.zstd"):
        zstd = _module(name)
        if zstd is not None:
            try:
                return bytes(zstd.decompress(data))
            except zstd.ZstdError:
                return None
    zstandard = _module("zstandard")
    if zstandard is None:
        raise _NoDecoder(
            "its body is zstd-encoded, and this process has no zstd decoder (pip install zstandard)"
        )
    decoded = []
    try:
        while data:  # frame after frame, as a stream may send them
            frame = zstandard.ZstdDecompressor().decompressobj()
            decoded.append(frame.decompress(data))
            if not frame.eof:  # a frame cut short: what came out of it is not the body
                return None
            data = frame.unused_data
    except zstandard.ZstdError:
        return None
    return b"".join(decoded)


@functools.cache
def _module(name: str) -> ModuleType | None:
    """An optional module, imported when a response first needs it."""
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


_DECODERS: dict[str, Callable[[bytes], bytes | None]] = {
    "gzip": _gunzip,
    "x-gzip": _gunzip,
    "deflate": _inflate,
    "br": _unbrotli,
    "zstd": _unzstd,
}


def body_bytes(body: Mapping[str, Any] | None) -> bytes:
    """A stored body as the bytes to serve again."""
    if not body:
        return b""
    kind, value = next(iter(body.items()))
    if kind == "json":
        return json.dumps(value, ensure_ascii=False).encode()
    if kind == "text":
        return str(value).encode()
    return base64.b64decode(value)


def one_line(request: RecordedRequest) -> str:
    return f"{request.method} {request.url}"


def pretty(request: RecordedRequest) -> list[str]:
    text = json.dumps(
        {"method": request.method, "url": request.url, "body": request.body},
        indent=2,
        sort_keys=True,
        ensure_ascii=False,
    )
    return text.splitlines(keepends=True)


def miss_diff(
    request: RecordedRequest, times: int, trial: tuple[str, int], recorded: Sequence[Interaction]
) -> str:
    """Why ``request`` (made ``times`` times before in the attempt of ``trial``, an (item id, trial
    index)) has no recording among the test's: a diff against the closest recorded request of the
    same trial, else of the same test."""
    same_trial = [i.request for i in recorded if (i.item_id, i.trial) == trial]
    if any(r.key == request.key for r in same_trial):
        return (
            f"this request was recorded {times} time(s) for this trial; the app made it once more "
            "(a retry, or a loop that ran longer)"
        )
    elsewhere = next((i for i in recorded if i.request.key == request.key), None)
    if elsewhere is not None:
        return (
            f"this request was recorded for item {elsewhere.item_id!r} (trial {elsewhere.trial}), not for "
            "this trial: record it with --eval-record=new_episodes"
        )
    candidates, where = (
        (same_trial, "this trial") if same_trial else ([i.request for i in recorded], "this test")
    )
    if not candidates:
        return "no recordings for this test: record them with --eval-record=new_episodes (or once)"
    lines = pretty(request)
    closest = max(
        _distinct(candidates), key=lambda r: difflib.SequenceMatcher(None, pretty(r), lines).ratio()
    )
    diff = difflib.unified_diff(pretty(closest), lines, f"recorded (closest in {where})", "requested")
    return "".join(diff)


def _distinct(requests: Iterable[RecordedRequest]) -> list[RecordedRequest]:
    return list({r.key: r for r in requests}.values())


def usage_of(response: RecordedResponse) -> RecordedUsage | None:
    """The tokens a provider's response reports (OpenAI chat and responses, Anthropic, Gemini),
    from a JSON body or a stream of server-sent events; None when it reports none."""
    events = events_of(response)
    if events is None:
        return None
    model, input_tokens, output_tokens, found = None, 0, 0, False
    for event in events:
        for holder in _usage_holders(event):
            usage = holder.get("usage") or holder.get("usageMetadata")
            model = model or holder.get("model") or holder.get("modelVersion")
            if isinstance(usage, dict):
                found = True
                # Streams report the input once and the output as it grows: the largest of each.
                # Gemini bills the results of its built-in tools (toolUsePromptTokenCount) as input.
                input_tokens = max(
                    input_tokens,
                    _tokens(usage, "prompt_tokens", "input_tokens", "promptTokenCount")
                    + _tokens(usage, "toolUsePromptTokenCount"),
                )
                output_tokens = max(
                    output_tokens,
                    _tokens(usage, "completion_tokens", "output_tokens", "candidatesTokenCount")
                    + _thoughts(usage),
                )
    if not found:
        return None
    return RecordedUsage(
        model=model if isinstance(model, str) else None,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
    )


def events_of(response: RecordedResponse) -> list[Any] | None:
    """A response's body as a list of JSON values: a JSON body alone, a JSON array's items (Gemini
    streams its answer as one without ``alt=sse``), or the ``data:`` lines of a stream of
    server-sent events (one that is not JSON, such as ``[DONE]``, as None); None for a body that
    is neither."""
    body = response.body or {}
    if "json" in body:
        value = body["json"]
        return list(value) if isinstance(value, list) else [value]
    if "text" in body:
        return [
            _json(line[5:].strip().encode()) for line in body["text"].splitlines() if line.startswith("data:")
        ]
    return None


def _usage_holders(event: Any) -> list[dict[str, Any]]:
    """The event, and the message or response it wraps (Anthropic's ``message_start``, OpenAI's
    ``response.completed``)."""
    if not isinstance(event, dict):
        return []
    return [event, *(event[k] for k in ("message", "response") if isinstance(event.get(k), dict))]


def _thoughts(usage: Mapping[str, Any]) -> int:
    """Gemini's thinking tokens, billed as output and counted apart from the answer's
    (``candidatesTokenCount``), but where the total shows the answer's count holds them already
    (some Vertex AI models): as the Opik SDK reads them (``OpikUsage.from_google_dict``)."""
    thoughts = _tokens(usage, "thoughtsTokenCount")
    total = usage.get("totalTokenCount")
    parts = ("promptTokenCount", "toolUsePromptTokenCount", "candidatesTokenCount")
    if isinstance(total, int) and total == sum(_tokens(usage, name) for name in parts):
        return 0
    return thoughts


def _tokens(usage: Mapping[str, Any], *names: str) -> int:
    for name in names:
        value = usage.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return 0


def vcr_response(
    status: int, reason: str, headers: Mapping[str, Sequence[str]], body: bytes
) -> dict[str, Any]:
    """A response as vcrpy's stubs take it. They mutate the headers they are given (the
    http.client one drops transfer-encoding): a copy each time."""
    return {
        "status": {"code": status, "message": reason},
        "headers": {k: list(v) for k, v in headers.items()},
        "body": {"string": body},
    }


def error_answer(message: str, kind: str) -> dict[str, Any]:
    """The HTTP 400 a request the plugin does not send is answered with (SDKs do not retry it),
    its JSON body an error of type ``kind`` that says why."""
    body = {"error": {"message": message, "type": kind}}
    return vcr_response(
        400, "Bad Request", {"content-type": ["application/json"]}, body_bytes({"json": body})
    )
