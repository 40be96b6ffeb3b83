"""Anthropic's Message Batches API over httpx, for ``--eval-batch`` (the plugin does not depend on
the ``anthropic`` package): a :class:`~pytest_opik_eval.run.batch_providers.BatchClient`.

Anthropic's batches differ from OpenAI's in ways the code below answers: the requests go inline
in one POST (no file); a batch has no metadata, so a batch whose creation went unrecorded is
recognised by its count of requests among the batches created since, the ones already recorded
set apart; request counts are all ``processing`` until the whole batch ends; and an errored
request carries Anthropic's error type, not an HTTP status, so the status the app would have had
live is restored from the type (429 and 5xx are what the collector sends again).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

import httpx
import pydantic

from pytest_opik_eval.run.provider_http import (
    CLOCK_SKEW,
    BatchNotFound,
    BatchView,
    ProviderBatch,
    ProviderError,
    ProviderHTTP,
    ResultLine,
    Tolerant,
    WireClient,
    json_object,
    read_batch,
)

ANTHROPIC_VERSION = "2023-06-01"  # sent unless the app's own anthropic-version header says otherwise
ENDPOINT = "/v1/messages"  # the one endpoint a Message Batch takes
CUSTOM_ID = re.compile(r"[a-zA-Z0-9_-]{1,64}")  # Anthropic refuses the whole batch for one other
_BATCHES = "v1/messages/batches"
_PAGE = 1000  # the most Anthropic lists of batches at once
# The HTTP status a request would have had live, by the error type of an errored result
# (Anthropic's "Errors" reference); an unknown type is taken as the request's own fault.
STATUS_OF_ERROR = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}
_WHEN = pydantic.TypeAdapter(datetime)


class _Counts(Tolerant):
    processing: int = 0
    succeeded: int = 0
    errored: int = 0
    canceled: int = 0
    expired: int = 0


class _Batch(ProviderBatch):
    id: str
    processing_status: str
    created_at: datetime
    request_counts: _Counts = _Counts()
    results_url: str | None = None

    def view(self) -> BatchView:
        counts = self.request_counts
        failed = counts.errored + counts.canceled + counts.expired
        return BatchView(
            id=self.id,
            status=self.processing_status,
            ended=self.processing_status == "ended",
            created_at=self.created_at.timestamp(),
            completed=counts.succeeded,
            failed=failed,
            total=counts.processing + counts.succeeded + failed,
            errors=(),
            output_file_id=None,
            error_file_id=None,
            metadata={},
            results_url=self.results_url,
        )


class _Result(Tolerant):
    type: str
    message: Any = None
    error: Any = None


class _Line(Tolerant):
    custom_id: str
    result: _Result


class AnthropicBatches(WireClient):
    """Anthropic's Message Batches at ``base_url``, the URL before ``/v1``
    (``https://api.anthropic.com`` or a compatible one).

    The key goes as ``x-api-key``, or as ``Authorization: Bearer`` when ``bearer``; ``headers``
    (``anthropic-version``, ``anthropic-beta``...) go with every request. Retries as
    :class:`~pytest_opik_eval.run.provider_http.ProviderHTTP` does."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        headers: Mapping[str, str] = {},  # noqa: B006  (read only)
        *,
        bearer: bool = False,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
        tries: int = 3,
    ) -> None:
        sent = httpx.Headers({"anthropic-version": ANTHROPIC_VERSION})
        sent.update(headers)
        for name in ("x-api-key", "authorization"):
            sent.pop(name, None)  # one credential, the key given
        if bearer:
            sent["Authorization"] = f"Bearer {api_key}"
        else:
            sent["x-api-key"] = api_key
        super().__init__(ProviderHTTP(base_url, api_key, sent, transport=transport, sleep=sleep, tries=tries))

    def submit(
        self,
        submission: str,
        endpoint: str,
        requests: Sequence[tuple[str, bytes]],
        metadata: Mapping[str, str],
        uploaded: Callable[[str], None],
    ) -> BatchView:
        """One batch of the requests, inline (no file: ``uploaded`` is never called; and no
        metadata: Anthropic's batches have none).

        A creation whose answer was lost may have happened: before trying again, the batch is
        looked for as :meth:`find_submission` does, among the batches created since the batches
        listed just before the first try, so that a retry never creates a second batch."""
        if endpoint != ENDPOINT:
            raise ValueError(f"an Anthropic batch takes requests to {ENDPOINT} only, not {endpoint}")
        body = {"requests": [{"custom_id": custom, "params": json_object(raw)} for custom, raw in requests]}
        _check_custom_ids(custom for custom, _ in requests)
        since = time.time() - CLOCK_SKEW
        before = {batch.id for batch in self._listing(since)}

        def created() -> dict[str, Any] | None:
            found = self._only(len(requests), since, before)
            return None if found is None else found.model_dump(mode="json")

        return _batch(self._wire.json("POST", _BATCHES, json=body, already_done=created))

    def find_submission(
        self, submission: str, requests: int, created_after: float, known: Collection[str]
    ) -> BatchView | None:
        """The one batch created after ``created_after``, not among ``known``, of ``requests``
        requests; None when there is none; ProviderError when there are several, which nothing
        sets apart (Anthropic's batches have no metadata to name a submission)."""
        found = self._only(requests, created_after, known)
        return None if found is None else found.view()

    def forget_submission(self, submission: str, created_after: float) -> None:
        """Nothing: a batch that was never created left nothing behind (no file is uploaded)."""

    def retrieve(self, batch_id: str) -> BatchView:
        return _batch(self._wire.json("GET", f"{_BATCHES}/{batch_id}", not_found=BatchNotFound))

    def cancel(self, batch_id: str) -> BatchView:
        return _batch(self._wire.json("POST", f"{_BATCHES}/{batch_id}/cancel", not_found=BatchNotFound))

    def results(self, view: BatchView) -> Iterator[ResultLine]:
        """Every result of an ended batch, from its ``results_url`` when that is on the same
        origin as ``base_url`` (the key is never sent anywhere else), or else from where
        Anthropic serves them. A line that cannot be read is counted in ``skipped``."""
        path = f"{_BATCHES}/{view.id}/results"
        if view.results_url is not None:
            given, base = httpx.URL(view.results_url), self._wire.base_url
            if (given.scheme, given.host, given.port) == (base.scheme, base.host, base.port):
                path = view.results_url
        yield from self._wire.lines(path, _line, not_found=BatchNotFound)

    def _only(self, requests: int, created_after: float, known: Collection[str]) -> _Batch | None:
        found = [
            batch
            for batch in self._listing(created_after)
            if batch.id not in known and batch.view().total == requests
        ]
        if len(found) > 1:
            why = (
                f"{len(found)} batches of {requests} requests were created on this account since "
                f"{datetime.fromtimestamp(created_after, timezone.utc).isoformat(timespec='seconds')} "
                f"({', '.join(batch.id for batch in found)}): cannot tell which is this submission's"
            )
            raise ProviderError(why, status=None, message=why)
        return found[0] if found else None

    def _listing(self, created_after: float) -> Iterator[_Batch]:
        items = self._wire.listing(
            _BATCHES, {"limit": _PAGE}, created_after, cursor="after_id", created=_created
        )
        for item in items:
            try:
                yield _Batch.model_validate(item)
            except pydantic.ValidationError:
                continue  # not a batch this plugin can have made or read


def _check_custom_ids(custom_ids: Iterable[str]) -> None:
    seen: set[str] = set()
    for custom in custom_ids:
        if not CUSTOM_ID.fullmatch(custom):
            raise ValueError(
                f"an Anthropic batch's custom_id matches ^[a-zA-Z0-9_-]{{1,64}}$, not {custom!r}"
            )
        if custom in seen:
            raise ValueError(f"the custom_id {custom!r} is twice in one batch")
        seen.add(custom)


def _created(item: dict[str, Any]) -> float:
    try:
        return _WHEN.validate_python(item.get("created_at")).timestamp()
    except pydantic.ValidationError:
        return float("inf")  # unreadable: not a reason to stop looking


def _line(raw: str) -> ResultLine | None:
    try:
        line = _Line.model_validate_json(raw)
    except pydantic.ValidationError:
        return None
    result, custom = line.result, line.custom_id
    if result.type == "succeeded":
        return ResultLine(custom, 200, result.message, None)
    if result.type == "errored":
        # Anthropic's ErrorResponse, as the app would have had it live with that status.
        error = result.error if isinstance(result.error, dict) else {}
        inner = error.get("error") if isinstance(error.get("error"), dict) else None
        if inner is None:
            inner = {"type": "api_error", "message": "the provider gave no error for this request"}
        body = {**error, "type": "error", "error": inner}
        return ResultLine(custom, STATUS_OF_ERROR.get(str(inner.get("type")), 400), body, None)
    if result.type == "canceled":
        return ResultLine(custom, None, None, "canceled: the request was canceled with its batch")
    if result.type == "expired":
        return ResultLine(custom, None, None, "expired: the batch's 24 hours ended before this request ran")
    return ResultLine(custom, None, None, f"{result.type}: an outcome this plugin does not know")


def _batch(answer: Any) -> BatchView:
    return read_batch(_Batch, answer)
