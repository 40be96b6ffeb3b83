"""What every provider's batch wire shares, for ``--eval-batch``: the normalized views the rest of
the plugin sees (:class:`BatchView`, :class:`ResultLine`), the errors, and :class:`ProviderHTTP`,
an httpx client that retries what is worth retrying and never lets the API key into an error.

Every request is the plugin's own (``own_requests.sending()``), so the recorder of
``--eval-record`` leaves it alone; text from the provider is escaped and shortened before it can
reach a terminal.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import httpx
import pydantic

from pytest_opik_eval.escaping import escape_control, shorten
from pytest_opik_eval.exceptions import EvalError
from pytest_opik_eval.own_requests import sending

_RETRIED = frozenset({408, 409, 429})  # and every 5xx: the provider's fault, worth another try
EXCERPT = 300  # characters of a provider's message shown in an error
_MAX_WAIT = 60.0  # seconds: the longest a Retry-After is obeyed
# Seconds of clock difference allowed between this machine and the provider's: a batch created
# just before a failed answer is looked for this far before the request started.
CLOCK_SKEW = 600.0


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
    results_url: str | None = None  # where the results are, for a provider that gives a URL


@dataclasses.dataclass(frozen=True)
class ResultLine:
    """One request's outcome in an ended batch."""

    custom_id: str
    status_code: int | None  # the request's HTTP status; None when it got no response
    body: Any  # the response body (parsed JSON), or None
    error: str | None  # "code: message" when it got no response


class Tolerant(pydantic.BaseModel):
    # What the provider sends: unknown fields are the API growing, not an error.
    model_config = pydantic.ConfigDict(extra="ignore")


class ProviderBatch(Tolerant):
    """A provider's batch object as it answers it, and its normalized view."""

    def view(self) -> BatchView:
        raise NotImplementedError


def read_batch(model: type[ProviderBatch], answer: Any) -> BatchView:
    """The view of ``answer``, which should be a batch of the provider's (``model``)."""
    try:
        return model.model_validate(answer).view()
    except pydantic.ValidationError as error:
        raise not_a_batch(error) from None


class WireClient:
    """What every provider's :class:`~pytest_opik_eval.run.batch_providers.BatchClient` shares:
    its :class:`ProviderHTTP`, the count of result lines it could not read, and closing it."""

    def __init__(self, wire: ProviderHTTP) -> None:
        self._wire = wire

    @property
    def skipped(self) -> int:
        """Result lines that were not JSON or named no custom_id."""
        return self._wire.skipped

    def close(self) -> None:
        self._wire.close()


def json_object(body: bytes) -> dict[str, Any]:
    """The app's raw JSON request as an object; ValueError when it is not one, which no batch can
    take."""
    request = json.loads(body)
    if not isinstance(request, dict):
        raise ValueError(f"a batch request's body must be a JSON object, not {type(request).__name__}")
    return request


def not_a_batch(error: pydantic.ValidationError) -> ProviderError:
    """The error for an answer that should have been a batch and is not."""
    return ProviderError(
        f"the provider answered with something that is not a batch: "
        f"{escape_control(shorten(' '.join(str(error).split()), EXCERPT))}",
        status=None,
        message=str(error),
    )


class ProviderHTTP:
    """An httpx client for one provider and key, with the retries and the errors of the batch wire.

    Retries connection errors, 408, 409, 429 and 5xx up to ``tries`` attempts, waiting through
    ``sleep`` (a short backoff, or the provider's Retry-After up to a minute); raises at once on
    other 4xx. The key, wherever the provider echoes it, is masked in every error."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        headers: httpx.Headers,
        *,
        transport: httpx.BaseTransport | None,
        sleep: Callable[[float], None],
        tries: int,
    ) -> None:
        self._key = api_key
        self._sleep = sleep
        self._tries = max(1, tries)
        self.skipped = 0  # result lines that were not JSON or named no custom_id
        self._http = httpx.Client(
            base_url=base_url.rstrip("/") + "/",
            headers=headers,
            transport=transport,
            # Uploads of up to a few hundred MB: a generous write and read time, a short connect.
            timeout=httpx.Timeout(120.0, connect=10.0),
        )

    @property
    def base_url(self) -> httpx.URL:
        return self._http.base_url

    def close(self) -> None:
        self._http.close()

    def json(
        self,
        method: str,
        path: str,
        *,
        not_found: type[ProviderError] = ProviderError,
        already_done: Callable[[], dict[str, Any] | None] | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """The provider's JSON object answering one request (see :meth:`send`)."""
        response = self.send(method, path, not_found=not_found, already_done=already_done, **kwargs)
        if isinstance(response, dict):  # found done by already_done
            return response
        try:
            answer = response.json()
        except ValueError:
            reason = f"an answer that is not JSON ({response.headers.get('Content-Type', 'no Content-Type')})"
            raise self.error(method, path, response.status_code, reason, 1) from None
        if not isinstance(answer, dict):
            raise self.error(method, path, response.status_code, "an answer that is not a JSON object", 1)
        return answer

    def listing(
        self,
        path: str,
        params: Mapping[str, str | int],
        created_after: float,
        *,
        cursor: str,
        created: Callable[[dict[str, Any]], float],
    ) -> Iterator[dict[str, Any]]:
        """The objects of a newest-first listing, page after page (the last id of a page in the
        ``cursor`` parameter of the next), down to ``created_after`` by ``created``."""
        while True:
            page = self.json("GET", path, params=dict(params))
            data = [item for item in page.get("data") or [] if isinstance(item, dict)]
            for item in data:
                if created(item) < created_after:
                    return
                yield item
            if not page.get("has_more") or not data:
                return
            params = {**params, cursor: str(data[-1]["id"])}

    def lines(
        self,
        path: str,
        read: Callable[[str], ResultLine | None],
        *,
        not_found: type[ProviderError] = ProviderError,
    ) -> Iterator[ResultLine]:
        """The results of a JSONL download, each non-blank line read by ``read`` (None: skipped).

        Streamed: a results file may be hundreds of MB. The request is marked as the plugin's own
        when sent; the body is read outside that mark, so the caller's code between lines is never
        taken for the plugin's."""
        response = self.send("GET", path, stream=True, not_found=not_found)
        assert isinstance(response, httpx.Response)  # nothing else without already_done
        try:
            for raw in response.iter_lines():
                if raw.strip():
                    line = read(raw)
                    if line is None:
                        self.skipped += 1
                    else:
                        yield line
        except httpx.TransportError as error:
            raise self.error("GET", path, None, f"{type(error).__name__}: {error}", 1) from None
        finally:
            response.close()

    def send(
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
                raise self.error(method, path, status, failure, attempt + 1, error_type)
        raise self.error(method, path, status, failure, self._tries)

    def error(
        self,
        method: str,
        path: str,
        status: int | None,
        message: str,
        attempts: int,
        error_type: type[ProviderError] = ProviderError,
    ) -> ProviderError:
        message = escape_control(shorten(" ".join(message.replace(self._key, "***").split()), EXCERPT))
        url = f"{method} {self._http.base_url.join(path)}"
        got = "no answer" if status is None else f"HTTP {status}"
        tried = f" after {attempts} attempts" if attempts > 1 else ""
        return error_type(f"{url} failed{tried}: {got}: {message}", status=status, message=message)


def _message(response: httpx.Response) -> str:
    """The provider's own words in an error answer (``{"error": {"message"}}``, OpenAI's shape and
    Anthropic's)."""
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
