"""The wire of a provider's batch API, for ``--eval-batch``: OpenAI's Batch API over httpx (the
plugin does not depend on the ``openai`` package, and the app's client may be anything).

What the rest of the plugin sees is normalized: a :class:`BatchView` of a batch's state and a
:class:`ResultLine` per answer, so the submission and collection logic does not depend on one
provider's words. Every request is the plugin's own (``own_requests.sending()``), so the recorder
of ``--eval-record`` leaves it alone. Errors never carry the API key, and text from the provider
is escaped and shortened before it can reach a terminal.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import httpx
import pydantic

from pytest_opik_eval.escaping import escape_control, shorten
from pytest_opik_eval.exceptions import EvalError
from pytest_opik_eval.own_requests import sending

ENDED = frozenset({"completed", "failed", "expired", "cancelled"})
_RETRIED = frozenset({408, 409, 429})  # and every 5xx: the provider's fault, worth another try
_EXCERPT = 300  # characters of a provider's message shown in an error
_PAGE = 100  # the most OpenAI lists of batches at once
_MAX_WAIT = 60.0  # seconds: the longest a Retry-After is obeyed
# Seconds of clock difference allowed between this machine and the provider's: a batch created
# just before a failed answer is looked for this far before the request started.
_CLOCK_SKEW = 600.0


class ProviderError(EvalError):
    """A batch request the provider refused, or that kept failing after every try; its text is
    one line that says which request, the HTTP status and the provider's own message."""

    def __init__(self, reason: str, *, status: int | None, message: str) -> None:
        super().__init__(reason)
        self.status = status  # None when no answer came (a connection error)
        self.message = message


class BatchNotFound(ProviderError):
    """The provider knows no such batch (404): deleted on its side, or another account's."""


@dataclasses.dataclass(frozen=True)
class BatchView:
    """A batch's state as the plugin needs it, whatever the provider."""

    id: str
    status: str  # the provider's word
    ended: bool  # no more results will come: completed, failed, expired, cancelled
    created_at: float
    completed: int
    failed: int
    total: int
    errors: tuple[tuple[int | None, str], ...]  # whole-batch errors: (input line, "code: message")
    output_file_id: str | None
    error_file_id: str | None
    metadata: Mapping[str, str]


@dataclasses.dataclass(frozen=True)
class ResultLine:
    """One request's outcome in an ended batch."""

    custom_id: str
    status_code: int | None  # the request's HTTP status; None when it got no response
    body: Any  # the response body (parsed JSON), or None
    error: str | None  # "code: message" when it got no response


class _Tolerant(pydantic.BaseModel):
    # What the provider sends: unknown fields are the API growing, not an error.
    model_config = pydantic.ConfigDict(extra="ignore")


class _Counts(_Tolerant):
    completed: int = 0
    failed: int = 0
    total: int = 0


class _BatchError(_Tolerant):
    code: str | None = None
    message: str | None = None
    line: int | None = None


class _Errors(_Tolerant):
    data: list[_BatchError] | None = None


class _Batch(_Tolerant):
    id: str
    status: str
    created_at: float
    request_counts: _Counts | None = None
    errors: _Errors | None = None
    output_file_id: str | None = None
    error_file_id: str | None = None
    metadata: dict[str, str] | None = None

    def view(self) -> BatchView:
        counts = self.request_counts or _Counts()
        errors = (self.errors.data or []) if self.errors else []
        return BatchView(
            id=self.id,
            status=self.status,
            ended=self.status in ENDED,
            created_at=self.created_at,
            completed=counts.completed,
            failed=counts.failed,
            total=counts.total,
            errors=tuple((e.line, f"{e.code or 'error'}: {e.message or ''}") for e in errors),
            output_file_id=self.output_file_id,
            error_file_id=self.error_file_id,
            metadata=self.metadata or {},
        )


class _Response(_Tolerant):
    status_code: int
    body: Any = None


class _LineError(_Tolerant):
    code: str | None = None
    message: str | None = None


class _Line(_Tolerant):
    custom_id: str
    response: _Response | None = None
    error: _LineError | None = None


def request_line(custom_id: str, endpoint: str, body: bytes) -> bytes:
    """One line of a batch input file (no newline), for ``body``, the app's raw JSON request.

    Re-encoded compactly: a pretty-printed body would break the file's one request per line.
    Raises ValueError when the body is not a JSON object, which no batch can take."""
    request = json.loads(body)
    if not isinstance(request, dict):
        raise ValueError(f"a batch request's body must be a JSON object, not {type(request).__name__}")
    line = {"custom_id": custom_id, "method": "POST", "url": endpoint, "body": request}
    return json.dumps(line, ensure_ascii=False, separators=(",", ":")).encode()


class OpenAIBatches:
    """OpenAI's Batch API at ``base_url`` (``https://api.openai.com/v1`` or a compatible one).

    Retries connection errors, 408, 409, 429 and 5xx up to ``tries`` attempts, waiting through
    ``sleep`` (a short backoff, or the provider's Retry-After up to a minute); raises at once on
    other 4xx. ``headers`` (OpenAI-Organization, OpenAI-Project)
    go with every request."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        headers: Mapping[str, str] = {},  # noqa: B006  (read only)
        *,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
        tries: int = 3,
    ) -> None:
        self._key = api_key
        self._sleep = sleep
        self._tries = max(1, tries)
        self._http = httpx.Client(
            base_url=base_url.rstrip("/") + "/",
            headers={**headers, "Authorization": f"Bearer {api_key}"},
            transport=transport,
            # Uploads of up to 200 MB: a generous write and read time, a short connect.
            timeout=httpx.Timeout(120.0, connect=10.0),
        )
        self.skipped = 0  # result lines that were not JSON or named no custom_id

    def close(self) -> None:
        self._http.close()

    def upload(self, name: str, lines: Iterable[bytes]) -> str:
        """Upload a batch input file named ``name`` (each line a :func:`request_line`); its id."""
        content = b"".join(line.rstrip(b"\n") + b"\n" for line in lines)
        files = {"file": (name, content, "application/jsonl")}
        answer = self._json("POST", "files", data={"purpose": "batch"}, files=files)
        return str(answer["id"])

    def create(self, file_id: str, endpoint: str, metadata: Mapping[str, str]) -> BatchView:
        """Create a batch of the uploaded file's requests to ``endpoint`` (``/v1/chat/completions``).

        A creation whose answer was lost (a 5xx or a broken connection after sending) may have
        happened: before trying again, the batch of this input file is looked for, and adopted
        if it is there, so that a retry never creates a second batch."""
        started = time.time()
        body = {
            "input_file_id": file_id,
            "endpoint": endpoint,
            "completion_window": "24h",
            "metadata": dict(metadata),
        }

        def created() -> dict[str, Any] | None:
            return self._newest(lambda batch: batch.get("input_file_id") == file_id, started - _CLOCK_SKEW)

        return _batch(self._json("POST", "batches", json=body, already_done=created))

    def retrieve(self, batch_id: str) -> BatchView:
        return _batch(self._json("GET", f"batches/{batch_id}", not_found=BatchNotFound))

    def cancel(self, batch_id: str) -> BatchView:
        return _batch(self._json("POST", f"batches/{batch_id}/cancel", not_found=BatchNotFound))

    def find(self, key: str, value: str, created_after: float) -> BatchView | None:
        """The newest batch whose metadata has ``key: value``, among those created after
        ``created_after`` (OpenAI lists batches newest first, with no filter on metadata)."""
        found = self._newest(lambda batch: (batch.get("metadata") or {}).get(key) == value, created_after)
        return None if found is None else _batch(found)

    def delete_uploads(self, name: str, created_after: float) -> int:
        """Delete the batch input files named ``name`` uploaded after ``created_after`` (those of a
        submission that never became a batch); how many were deleted."""
        doomed = []
        params: dict[str, str | int] = {"purpose": "batch", "order": "desc", "limit": _PAGE}
        for item in self._listing("files", params, created_after):
            if item.get("filename") == name:
                doomed.append(str(item["id"]))
        deleted = 0
        for file_id in doomed:
            try:
                self._json("DELETE", f"files/{file_id}")
            except ProviderError as error:
                if error.status != 404:  # already gone is what was wanted
                    raise
            else:
                deleted += 1
        return deleted

    def results(self, view: BatchView) -> Iterator[ResultLine]:
        """Every result of an ended batch, line by line: its output file, then its error file.
        A line that cannot be read is counted in ``skipped``, not raised: the others still count.
        A file that cannot be downloaded raises ProviderError while iterating (nothing is cached:
        iterating again downloads again, and a result is idempotent by its custom_id)."""
        for file_id in (view.output_file_id, view.error_file_id):
            if file_id is not None:
                yield from self._lines(file_id)

    def _lines(self, file_id: str) -> Iterator[ResultLine]:
        # Streamed: an output file may be hundreds of MB. The request is marked as the plugin's
        # own when sent; the body is read outside that mark, so the caller's code between lines
        # is never taken for the plugin's.
        path = f"files/{file_id}/content"
        response = self._send("GET", path, stream=True)
        assert isinstance(response, httpx.Response)  # nothing else without already_done
        try:
            for raw in response.iter_lines():
                if raw.strip():
                    line = self._line(raw)
                    if line is not None:
                        yield line
        except httpx.TransportError as error:
            raise self._error("GET", path, None, f"{type(error).__name__}: {error}", 1) from None
        finally:
            response.close()

    def _line(self, raw: str) -> ResultLine | None:
        try:
            line = _Line.model_validate_json(raw)
        except pydantic.ValidationError:
            self.skipped += 1
            return None
        if line.response is not None:
            return ResultLine(line.custom_id, line.response.status_code, line.response.body, None)
        error = line.error or _LineError(
            code="no_response", message="the provider gave no response and no error"
        )
        return ResultLine(line.custom_id, None, None, f"{error.code or 'error'}: {error.message or ''}")

    def _newest(
        self, wanted: Callable[[dict[str, Any]], bool], created_after: float
    ) -> dict[str, Any] | None:
        for batch in self._listing("batches", {"limit": _PAGE}, created_after):
            if wanted(batch):
                return batch
        return None

    def _listing(
        self, path: str, params: dict[str, str | int], created_after: float
    ) -> Iterator[dict[str, Any]]:
        """The objects of a newest-first listing, page after page, down to ``created_after``."""
        while True:
            page = self._json("GET", path, params=params)
            data = [item for item in page.get("data") or [] if isinstance(item, dict)]
            for item in data:
                if float(item.get("created_at") or 0) < created_after:
                    return
                yield item
            if not page.get("has_more") or not data:
                return
            params = {**params, "after": str(data[-1]["id"])}

    def _json(
        self,
        method: str,
        path: str,
        *,
        not_found: type[ProviderError] = ProviderError,
        already_done: Callable[[], dict[str, Any] | None] | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        response = self._send(method, path, not_found=not_found, already_done=already_done, **kwargs)
        if isinstance(response, dict):  # found done by already_done
            return response
        try:
            answer = response.json()
        except ValueError:
            reason = f"an answer that is not JSON ({response.headers.get('Content-Type', 'no Content-Type')})"
            raise self._error(method, path, response.status_code, reason, 1) from None
        if not isinstance(answer, dict):
            raise self._error(method, path, response.status_code, "an answer that is not a JSON object", 1)
        return answer

    def _send(
        self,
        method: str,
        path: str,
        *,
        not_found: type[ProviderError] = ProviderError,
        already_done: Callable[[], dict[str, Any] | None] | None = None,
        stream: bool = False,
        **kwargs: Any,
    ) -> httpx.Response | dict[str, Any]:
        """The provider's answer to one request, after retries; or what ``already_done`` found
        when an attempt whose answer was lost (a 5xx, a connection broken after sending) had in
        fact been carried out."""
        failure, status, maybe_done, asked = "", None, False, None
        for attempt in range(self._tries):
            if attempt:
                self._sleep(asked if asked is not None else min(8.0, 0.5 * 2 ** (attempt - 1)))
                if maybe_done and already_done is not None and (done := already_done()) is not None:
                    return done
            request = self._http.build_request(method, path, **kwargs)
            try:
                with sending():  # the plugin's own request: the recorder lets it through
                    response = self._http.send(request, stream=stream)
            except httpx.TransportError as error:
                failure, status, asked = f"{type(error).__name__}: {error}", None, None
                maybe_done = maybe_done or not isinstance(error, httpx.ConnectError)  # sent, or not
                continue
            if response.is_success:
                return response
            if stream:
                response.read()
            status, failure = response.status_code, _message(response)
            asked = _retry_after(response)
            maybe_done = maybe_done or status >= 500
            if status < 500 and status not in _RETRIED:
                error_type = not_found if status == 404 else ProviderError
                raise self._error(method, path, status, failure, attempt + 1, error_type)
        raise self._error(method, path, status, failure, self._tries)

    def _error(
        self,
        method: str,
        path: str,
        status: int | None,
        message: str,
        attempts: int,
        error_type: type[ProviderError] = ProviderError,
    ) -> ProviderError:
        message = escape_control(shorten(" ".join(message.replace(self._key, "***").split()), _EXCERPT))
        url = f"{method} {self._http.base_url}{path}"
        got = "no answer" if status is None else f"HTTP {status}"
        tried = f" after {attempts} attempts" if attempts > 1 else ""
        return error_type(f"{url} failed{tried}: {got}: {message}", status=status, message=message)


def _message(response: httpx.Response) -> str:
    """The provider's own words in an error answer (OpenAI's ``{"error": {"message"}}``)."""
    try:
        body = response.json()
    except ValueError:
        return response.text or response.reason_phrase or "(no message)"
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and error.get("message"):
        return str(error["message"])
    return json.dumps(body)


def _retry_after(response: httpx.Response) -> float | None:
    """The wait a 429 or 503 asks for, in seconds, capped: a provider asking for hours is better
    told to the user (the submission fails, the next resume tries again) than waited for."""
    try:
        return min(_MAX_WAIT, max(0.0, float(response.headers["Retry-After"])))
    except (KeyError, ValueError):  # none, or an HTTP date: the backoff will do
        return None


def _batch(answer: Any) -> BatchView:
    try:
        return _Batch.model_validate(answer).view()
    except pydantic.ValidationError as error:
        raise ProviderError(
            f"the provider answered with something that is not a batch: "
            f"{escape_control(shorten(' '.join(str(error).split()), _EXCERPT))}",
            status=None,
            message=str(error),
        ) from None
