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
import json
import os
import re
import zlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from pytest_opik_eval.masking import env_secrets, is_credential, is_secret_param, mask
from pytest_opik_eval.store.recordings import Interaction, RecordedRequest, RecordedResponse, RecordedUsage

# Fields of a JSON request body (top level) that SDKs fill with per-call values: a request that
# differs only there is the same request.
VOLATILE_FIELDS = frozenset({"user", "safety_identifier", "prompt_cache_key", "metadata"})
REDACTED = "REDACTED"  # the value of a credential query parameter or JSON field (see masking)
# Response headers never stored: credentials and cookies; what replay makes untrue (the body is
# stored decoded, whole); and what changes on every call (dates, request ids, timings, rate
# limits), which no client needs again and which would make each re-recording a diff.
_DROPPED_HEADER = re.compile(
    r"set-cookie|cookie|content-length|transfer-encoding|.*(auth|token|secret|api-?key|password).*"
    r"|date|age|expires|via|alt-svc|server-timing|traceparent|tracestate|cf-ray|cf-cache-status"
    r"|.*request-id|.*trace-id|x-amzn?-.*id.*|x-cloud-trace-context|x-envoy-upstream-service-time"
    r"|openai-processing-ms|.*ratelimit.*",
    re.IGNORECASE,
)
_BOUNDARY = re.compile(r"multipart/.*;\s*boundary=([^;]+)", re.IGNORECASE)
_DECODERS = {
    "gzip": lambda data: zlib.decompress(data, 16 + zlib.MAX_WBITS),
    "x-gzip": lambda data: zlib.decompress(data, 16 + zlib.MAX_WBITS),
    "deflate": lambda data: _inflate(data),
}


class Scrubber:
    """Replaces the values of secret-looking environment variables by ``<NAME>`` (see
    ``masking``): those of the environment as it is when the scrubber is made (the recorder makes
    one when it starts)."""

    def __init__(self) -> None:
        self._secrets = env_secrets(os.environ)

    def text(self, text: str) -> str:
        return mask(text, self._secrets)

    def value(self, value: Any) -> Any:
        """A JSON value with every string (and key) scrubbed, and credential fields redacted."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.value(v) for v in value]
        if isinstance(value, dict):
            # A credential field's string is redacted; a dict under it ("credentials") is walked.
            return {
                self.text(str(k)): REDACTED
                if v and isinstance(v, str) and is_credential(str(k))
                else self.value(v)
                for k, v in value.items()
            }
        return value


def canonical_request(
    method: str, url: str, body: Any, content_type: str | None, scrubber: Scrubber
) -> RecordedRequest:
    boundary = _BOUNDARY.search(content_type or "")
    if boundary and not isinstance(body, (dict, list)):
        # A multipart body (a file or audio upload) is cut by a random boundary on each call.
        body = _bytes(body).replace(boundary.group(1).strip('"').encode(), b"BOUNDARY")
    return RecordedRequest(
        method=method.upper(),
        url=canonical_url(url, scrubber),
        body=_request_body(body, scrubber),
        content_type=content_type.split(";")[0].strip() if content_type else None,
    )


def canonical_url(url: str, scrubber: Scrubber) -> str:
    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")[2]  # user:password@ never stored
    query = sorted(
        (name, REDACTED if is_secret_param(name) else value)
        for name, value in parse_qsl(parts.query, keep_blank_values=True)
    )
    return scrubber.text(urlunsplit((parts.scheme.lower(), netloc.lower(), parts.path, urlencode(query), "")))


def _request_body(body: Any, scrubber: Scrubber) -> dict[str, Any] | None:
    if isinstance(body, (dict, list)):  # aiohttp's json= or data=, not encoded yet
        return {"json": _without_volatile(scrubber.value(body))}
    data = _bytes(body)
    if not data:
        return None
    parsed = _json(data)
    if isinstance(parsed, (dict, list)):
        return {"json": _without_volatile(scrubber.value(parsed))}
    return _text_or_bytes(data, scrubber)


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


def _text_or_bytes(data: bytes, scrubber: Scrubber) -> dict[str, Any]:
    try:
        return {"text": scrubber.text(data.decode("utf-8"))}
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode("ascii")}


def recorded_response(
    status: int, reason: str, headers: Mapping[str, Sequence[str]], body: bytes, scrubber: Scrubber
) -> RecordedResponse:
    """The response to store: its body decoded (gzip, deflate) and kept as JSON, text or base64
    by its content type; credentials, cookies and framing headers dropped."""
    data, encoding = _decoded(body, _header(headers, "content-encoding"))
    kept: dict[str, list[str]] = {}
    for name, values in headers.items():
        if not _DROPPED_HEADER.fullmatch(name) and name.lower() != "content-encoding":
            # Lower case, as HTTP/2 sends them: the same file whichever client recorded it.
            kept.setdefault(name.lower(), []).extend(scrubber.text(str(v)) for v in values)
    if encoding:  # one the plugin cannot decode (br without the brotli package): kept encoded
        kept["content-encoding"] = [encoding]
    content_type = (_header(headers, "content-type") or "").lower()
    stored: dict[str, Any] | None = None
    if data and not encoding:
        parsed = _json(data) if "json" in content_type else None
        stored = {"json": scrubber.value(parsed)} if parsed is not None else _text_or_bytes(data, scrubber)
    elif data:
        stored = {"base64": base64.b64encode(data).decode("ascii")}
    return RecordedResponse(status=status, reason=reason or "", headers=kept, body=stored)


def _header(headers: Mapping[str, Sequence[str]], name: str) -> str | None:
    values = [str(v) for key, found in headers.items() if key.lower() == name for v in found]
    return ", ".join(values) if values else None


def _decoded(data: bytes, encoding: str | None) -> tuple[bytes, str]:
    """The body with its content codings undone, last applied first, and the codings left (those
    with no decoder here). A body that does not decode was already plain: urllib3 and aiohttp
    decode it themselves and leave the header."""
    codings = [c.strip().lower() for c in (encoding or "").split(",") if c.strip()]
    while codings and codings[-1] in (*_DECODERS, "identity"):
        coding = codings.pop()
        if coding != "identity":
            try:
                data = _DECODERS[coding](data)
            except zlib.error:
                return data, ""
    return data, ", ".join(codings)


def _inflate(data: bytes) -> bytes:
    try:
        return zlib.decompress(data)
    except zlib.error:  # raw deflate, as some servers send it
        return zlib.decompress(data, -zlib.MAX_WBITS)


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
    body = response.body or {}
    if "json" in body:
        events = [body["json"]]
    elif "text" in body:
        events = [
            _json(line[5:].strip().encode()) for line in body["text"].splitlines() if line.startswith("data:")
        ]
    else:
        return None
    model, input_tokens, output_tokens, found = None, 0, 0, False
    for event in events:
        for holder in _usage_holders(event):
            usage = holder.get("usage") or holder.get("usageMetadata")
            model = model or holder.get("model") or holder.get("modelVersion")
            if isinstance(usage, dict):
                found = True
                # Streams report the input once and the output as it grows: the largest of each.
                input_tokens = max(
                    input_tokens, _tokens(usage, "prompt_tokens", "input_tokens", "promptTokenCount")
                )
                output_tokens = max(
                    output_tokens,
                    _tokens(usage, "completion_tokens", "output_tokens", "candidatesTokenCount"),
                )
    if not found:
        return None
    return RecordedUsage(
        model=model if isinstance(model, str) else None,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
    )


def _usage_holders(event: Any) -> list[dict[str, Any]]:
    """The event, and the message or response it wraps (Anthropic's ``message_start``, OpenAI's
    ``response.completed``)."""
    if not isinstance(event, dict):
        return []
    return [event, *(event[k] for k in ("message", "response") if isinstance(event.get(k), dict))]


def _tokens(usage: Mapping[str, Any], *names: str) -> int:
    for name in names:
        value = usage.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return 0
