"""The HTTP client of the Opik REST API: one httpx client per process, keep-alive, explicit
timeouts, gzip-compressed bodies, retries with capped exponential backoff, an optional deadline
that no request outlives, and errors that name the endpoint and the server's message (masked,
escaped and shortened) but never the API key."""

from __future__ import annotations

import gzip
import json
import random
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import httpx

from pytest_opik_eval.escaping import escape_control, shorten
from pytest_opik_eval.exceptions import EvalError
from pytest_opik_eval.own_requests import sending
from pytest_opik_eval.store.opik.config import OpikSettings

API = "v1/private/"
_RETRIED_STATUSES = frozenset({429, 500, 502, 503, 504})
EXCERPT = 300  # characters of a server's answer shown in an error
_MIN_ATTEMPT = 0.05  # seconds: less than this left before the deadline is not worth an attempt


class OpikError(EvalError):
    """A request to the Opik server failed."""


class OpikUnavailable(OpikError):
    """The server could not be reached, or kept failing, after every retry (or until the deadline)."""


class OpikBadAnswer(OpikUnavailable):
    """The server kept answering with something that is not the Opik API's JSON: a body that does
    not decode, an HTML page (a proxy, or the Opik UI's address instead of its API's)."""


class OpikHTTPError(OpikError):
    """The server refused a request (a 4xx other than 429); retrying would not help."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class _Garbled(Exception):
    """An answer that cannot be read: retried like a server fault."""


class OpikClient:
    """Calls the Opik REST API under ``<url>v1/private/``."""

    def __init__(
        self,
        settings: OpikSettings,
        *,
        transport: httpx.BaseTransport | None = None,
        timeout: float = 10.0,
        retries: int = 4,
        backoff: float = 0.25,
        max_backoff: float = 8.0,
    ) -> None:
        headers = {"Comet-Workspace": settings.workspace, "Accept-Encoding": "gzip"}
        if settings.api_key:
            headers["Authorization"] = settings.api_key  # the raw key, as the Opik SDK sends it
        self._secret = settings.api_key
        self.settings = settings
        self._http = httpx.Client(base_url=settings.url, headers=headers, transport=transport)
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        # A time.monotonic() after which no request, in any thread, starts an attempt or waits on
        # the server: the end of the session's budget for sending. A float is set atomically.
        self._deadline: float | None = None

    def close(self) -> None:
        self._http.close()

    def finish_by(self, deadline: float) -> None:
        """From now on, cap each attempt's timeout by what remains until ``deadline`` (a
        ``time.monotonic()``), and start no attempt or backoff after it."""
        self._deadline = deadline

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, Any] | None = None,
        retries: int | None = None,
    ) -> httpx.Response:
        """Send one request, retrying connection errors, timeouts, 429, 5xx and answers that are
        not JSON; the response of a success, whose body (if any) is valid JSON."""
        response, _ = self._call(method, path, body, params, retries, _read_json)
        return response

    def json(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, Any] | None = None,
        retries: int | None = None,
    ) -> Any:
        """The decoded JSON answer of :meth:`request` (None when the body is empty)."""
        return self._call(method, path, body, params, retries, _read_json)[1]

    def ndjson(self, path: str, body: Any) -> Iterator[dict[str, Any]]:
        rows: list[dict[str, Any]] = self._call("POST", path, body, None, None, _read_ndjson)[1]
        return iter(rows)

    def _call(
        self,
        method: str,
        path: str,
        body: Any,
        params: Mapping[str, Any] | None,
        retries: int | None,
        read: Callable[[httpx.Response], Any],
    ) -> tuple[httpx.Response, Any]:
        content, headers = None, {}
        if body is not None:
            content = gzip.compress(json.dumps(body, default=str).encode(), compresslevel=5)
            headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
        endpoint = f"{method} {API}{path}"
        attempts = (self.retries if retries is None else retries) + 1
        failure = ""
        garbled = False
        made = 0
        for attempt in range(attempts):
            timeout = self._attempt_timeout()
            if timeout is None:
                failure = (failure + "; " if failure else "") + "the time allowed for sending ran out"
                break
            made += 1
            request = self._http.build_request(
                method,
                API + path,
                content=content,
                headers=headers,
                params=params,
                timeout=httpx.Timeout(timeout, connect=min(timeout, 5.0)),
            )
            try:
                with sending():  # not the app's: a strict replay lets it through
                    response = self._http.send(request, stream=True)
            except httpx.TransportError as error:
                failure, garbled = f"{type(error).__name__}: {self.quote(str(error))}", False
                self._sleep(attempt, attempts, None)
                continue
            try:
                try:
                    response.read()
                finally:
                    response.close()
            except httpx.DecodingError as error:
                failure, garbled = self._undecodable(response, error), True
                self._sleep(attempt, attempts, None)
                continue
            except httpx.TransportError as error:  # the server went away in the middle of its answer
                failure, garbled = f"{type(error).__name__}: {self.quote(str(error))}", False
                self._sleep(attempt, attempts, None)
                continue
            if response.status_code in _RETRIED_STATUSES:
                failure, garbled = f"HTTP {response.status_code}: {self._message(response)}", False
                self._sleep(attempt, attempts, response.headers.get("Retry-After"))
                continue
            if response.status_code >= 400:
                raise OpikHTTPError(
                    self._redact(
                        f"{endpoint} at {self.settings.url} failed with HTTP {response.status_code}: "
                        f"{self._message(response)}"
                    ),
                    response.status_code,
                )
            try:
                return response, read(response)
            except _Garbled:
                failure, garbled = f"HTTP {response.status_code}, {self._unreadable(response)}", True
                self._sleep(attempt, attempts, None)
        error_type = OpikBadAnswer if garbled else OpikUnavailable
        raise error_type(
            self._redact(f"{endpoint} at {self.settings.url} failed after {made} attempt(s): {failure}")
        )

    def _attempt_timeout(self) -> float | None:
        deadline = self._deadline
        if deadline is None:
            return self.timeout
        left = deadline - time.monotonic()
        return min(self.timeout, left) if left >= _MIN_ATTEMPT else None

    def _sleep(self, attempt: int, attempts: int, retry_after: str | None) -> None:
        if attempt + 1 >= attempts:
            return
        delay = min(self.max_backoff, self.backoff * 2**attempt) * random.uniform(0.5, 1.0)
        if retry_after is not None:
            try:
                delay = min(self.max_backoff * 4, max(delay, float(retry_after)))
            except ValueError:
                pass  # an HTTP date: the backoff is a fine approximation
        deadline = self._deadline
        if deadline is not None:
            delay = min(delay, max(0.0, deadline - time.monotonic()))
        time.sleep(delay)

    def _message(self, response: httpx.Response) -> str:
        try:
            body = response.json()
        except ValueError:
            return self.quote(response.text) or response.reason_phrase or "(no message)"
        if isinstance(body, dict):
            body = body.get("errors") or body.get("message") or body
        return self.quote(str(body))

    def _unreadable(self, response: httpx.Response) -> str:
        kind = response.headers.get("Content-Type") or "no Content-Type"
        return f"{kind}, not JSON: '{self.quote(response.text)}'"

    def _undecodable(self, response: httpx.Response, error: httpx.DecodingError) -> str:
        kind = response.headers.get("Content-Type") or "no Content-Type"
        encoding = response.headers.get("Content-Encoding") or "no Content-Encoding"
        return (
            f"HTTP {response.status_code}, {kind} with Content-Encoding {encoding}, a body that does not "
            f"decode ({self.quote(str(error))})"
        )

    def quote(self, text: str) -> str:
        """Text from the server, fit for a terminal and a log: the key masked first (so that a cut
        cannot leave part of it), whitespace runs made one space, shortened, then control
        characters escaped (so that a cut cannot halve an escape)."""
        return escape_control(shorten(" ".join(self._redact(text).split()), EXCERPT))

    def _redact(self, text: str) -> str:
        # The server may echo request headers in an error page: never pass the key on.
        return text.replace(self._secret, "***") if self._secret else text


def _read_json(response: httpx.Response) -> Any:
    if not response.content.strip():
        return None
    try:
        return json.loads(response.content)
    except ValueError:
        raise _Garbled from None


def _read_ndjson(response: httpx.Response) -> list[dict[str, Any]]:
    try:
        rows = [json.loads(line) for line in response.content.splitlines() if line.strip()]
    except ValueError:
        raise _Garbled from None
    if not all(isinstance(row, dict) for row in rows):
        raise _Garbled
    return rows
