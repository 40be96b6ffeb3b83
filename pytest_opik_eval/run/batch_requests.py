"""Which of the app's requests a provider's batch API takes, and how they are named and grouped
(``--eval-batch``). Pure: no network, no state.

A batchable request is a POST to an endpoint the provider's batch API accepts, with a JSON body
that does not ask for a stream, to a host known to be that provider's (or named with
``--eval-batch-provider``), authenticated with a key held in an environment variable: a later
session collects the answers with it, and the ledger names the variable, never the key.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

from pytest_opik_eval.masking import EnvironmentSecrets
from pytest_opik_eval.option_values import Host
from pytest_opik_eval.store.batch_ledger import Group

# The hosts whose provider the host alone tells (Gemini's: the Gemini Developer API, Google AI
# Studio's; Vertex AI batches through Cloud Storage or BigQuery, which is not this).
KNOWN_HOSTS = {
    "api.openai.com": "openai",
    "api.anthropic.com": "anthropic",
    "generativelanguage.googleapis.com": "gemini",
}
# The batch endpoints evals call: OpenAI's (the client's BatchCreateParams.endpoint) and
# Anthropic's Messages (its Message Batches take nothing else).
_ENDPOINTS = {
    "openai": ("/v1/chat/completions", "/v1/responses", "/v1/embeddings", "/v1/completions"),
    "anthropic": ("/v1/messages",),
}
# Gemini's generateContent, after the API version python-genai puts first (v1 by default in
# google-genai 3, v1beta before, either by HttpOptions.api_version): the model is in the path.
# streamGenerateContent, a stream, is no batch's.
_GEMINI = re.compile(r"(?P<base>.*/v1(?:alpha|beta)?)(?P<endpoint>/models/(?P<model>[^/:]+):generateContent)")
# Sent with every batch call when the app sent them: the account the batch is billed to, and
# the API version and betas its requests are written for.
_FORWARDED = ("openai-organization", "openai-project", "anthropic-version", "anthropic-beta")
# Per batch: OpenAI's input file takes 50,000 requests and 200 MB (the client's batches.create
# docstring), Anthropic's 100,000 requests or 256 MB (its batch-processing guide), Gemini's
# inlined requests 20 MB in all, with no count given (its Batch Mode guide); a margin under the
# size for the encoding.
LIMITS = {
    "openai": (50_000, 190 * 1024 * 1024),
    "anthropic": (100_000, 245 * 1024 * 1024),
    "gemini": (100_000, 19 * 1024 * 1024),
}


@dataclass(frozen=True)
class Route:
    provider: str
    base_url: str
    endpoint: str
    model: str | None = None  # when the path names it (Gemini's)


@dataclass(frozen=True)
class Batchable:
    """A request a batch can take: its group and its raw JSON body (kept in memory only)."""

    group: Group
    body: bytes


def provider_of(host: str | None, port: int | None, providers: Mapping[Host, str]) -> str | None:
    """The batch API the host speaks: named with --eval-batch-provider, else a known host's."""
    if host is None:
        return None
    return providers.get((host, port)) or providers.get((host, None)) or KNOWN_HOSTS.get(host)


def route(provider: str, method: str, url: str) -> Route | str:
    """Where the provider's batch takes the request, or why it cannot. The base URL is the one
    the app called: OpenAI's up to and including ``/v1``, Gemini's up to and including its API
    version, Anthropic's before ``/v1``."""
    parts = urlsplit(url)
    if method.upper() != "POST":
        return f"{method} is not batchable (a batch takes POST requests)"
    host = parts.netloc.rpartition("@")[2]  # user:password@ never kept
    if provider == "gemini":
        found = _GEMINI.fullmatch(parts.path)
        if found is None:
            return f"{parts.path} is not an endpoint of gemini's batch API (models/{{model}}:generateContent)"
        return Route(provider, f"{parts.scheme}://{host}{found['base']}", found["endpoint"], found["model"])
    endpoints = _ENDPOINTS[provider]
    for endpoint in endpoints:
        if parts.path.endswith(endpoint):
            base = parts.path[: -len(endpoint)] + ("/v1" if provider == "openai" else "")
            return Route(provider, f"{parts.scheme}://{host}{base}", endpoint)
    return f"{parts.path} is not an endpoint of {provider}'s batch API ({', '.join(endpoints)})"


def batchable(provider: str, method: str, url: str, headers: Mapping[str, Any], body: Any) -> Batchable | str:
    """The request's group and body, or why no batch takes it (one line, for a notice)."""
    found = route(provider, method, url)
    if isinstance(found, str):
        return found
    raw = body if isinstance(body, bytes) else body.encode() if isinstance(body, str) else None
    try:
        parsed = json.loads(raw) if raw else None
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict) or raw is None:
        return f"{found.endpoint}: the body is not a JSON object"
    if parsed.get("stream"):
        return f"{found.endpoint}: a streamed request (stream=true) is not batchable"
    if parsed.get("background"):
        return f"{found.endpoint}: a background response is not batchable"
    lowered = {str(name).lower(): value for name, value in headers.items()}
    if provider == "gemini":
        # python-genai sends x-goog-api-key; the REST examples, a key= parameter.
        key = _one(lowered.get("x-goog-api-key")) or _one(parse_qs(urlsplit(url).query).get("key")) or None
        bearer = False
    else:
        api_key = _one(lowered.get("x-api-key")) or None
        bearer = api_key is None and provider == "anthropic"
        key = api_key or _bearer(lowered.get("authorization"))
    key_env = None if key is None else key_variable(key)
    if key_env is None:
        return (
            "--eval-batch needs the API key in an environment variable (OPENAI_API_KEY, ANTHROPIC_API_KEY, "
            "GEMINI_API_KEY), so that a later session can collect the answers"
        )
    forwarded = tuple((name, _one(lowered[name])) for name in _FORWARDED if name in lowered)
    model = found.model or parsed.get("model")
    group = Group(
        provider=provider,
        base_url=found.base_url,
        endpoint=found.endpoint,
        model=model if isinstance(model, str) else None,
        key_env=key_env,
        headers=forwarded,
        bearer=bearer,
    )
    return Batchable(group, raw)


def key_variable(key: str) -> str | None:
    """The environment variable whose value ``key`` is, if any (read again only when the
    environment changed: see ``masking.EnvironmentSecrets``)."""
    placeholder = _SECRETS.current().get(key)
    return None if placeholder is None else placeholder[1:-1]


_SECRETS = EnvironmentSecrets()


def _bearer(value: Any) -> str | None:
    text = _one(value)
    if text.lower().startswith("bearer "):
        return text[7:].strip() or None
    return None


def _one(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        value = value[0] if value else ""
    return value.decode() if isinstance(value, bytes) else str(value or "")


def custom_id(run_id: str, test: str, item_id: str, trial: int, request_key: str, occurrence: int) -> str:
    """The request's id in a batch: the same for the same request of the same trial in every
    round and process, so a result is matched to its trial, a request is never in two waiting
    batches, and a resubmission is recognised. 57 characters of [a-z0-9_], which every
    provider's custom_id takes (Anthropic's: ``^[a-zA-Z0-9_-]{1,64}$``)."""
    digest = hashlib.sha256(json.dumps([test, item_id, trial, request_key, occurrence]).encode()).hexdigest()
    return f"oe1_{_run_prefix(run_id)}_{digest[:40]}"


def submission_id(run_id: str) -> str:
    """A new submission's id, written to the ledger before any network call and carried by the
    batch's metadata: how a batch created just before the submitting process was killed is
    found again. Never the same twice, even for the same requests submitted again (an earlier
    batch of them, failed or collected, must not be taken for the new one)."""
    return f"oe1_{_run_prefix(run_id)}_{uuid.uuid4().hex[:16]}"


def _run_prefix(run_id: str) -> str:
    return hashlib.sha256(run_id.encode()).hexdigest()[:12]


def split(provider: str, requests: Sequence[tuple[str, bytes]]) -> Iterator[list[tuple[str, bytes]]]:
    """The (custom_id, body) pairs in parts a batch of the provider takes (``LIMITS``: requests
    and bytes, each request counted with the line or entry that wraps it)."""
    most, most_bytes = LIMITS[provider]
    part: list[tuple[str, bytes]] = []
    size = 0
    for custom, body in requests:
        length = len(body) + _WRAPPING
        if part and (len(part) == most or size + length > most_bytes):
            yield part
            part, size = [], 0
        part.append((custom, body))
        size += length
    if part:
        yield part


# The bytes around a body in the batch: its custom_id, method and URL (OpenAI), params (Anthropic),
# or request and metadata (Gemini).
_WRAPPING = 160
