"""Gemini's Batch Mode (Google AI Studio, ``generativelanguage.googleapis.com``) over httpx, for
``--eval-batch`` (the plugin does not depend on ``google-genai``): a
:class:`~pytest_opik_eval.run.batch_providers.BatchClient`.

The wire, as python-genai (``google/genai/batches.py``, ``_transformers.py``, ``types.py``) speaks
it to the Gemini Developer API: ``POST {version}/models/{model}:batchGenerateContent`` with
``{"batch": {"displayName", "inputConfig": {"requests": {"requests": [InlinedRequest]}}}}``, each
``InlinedRequest`` ``{"request": <a generateContent body>, "metadata": {...}}``; a batch is a
long-running operation, ``{"name": "batches/{id}", "metadata": <GenerateContentBatch>, "done"}``,
read at ``GET {version}/batches/{id}``, cancelled with ``POST {version}/batches/{id}:cancel``,
listed at ``GET {version}/batches`` (``operations``, ``nextPageToken``). The batch's fields are
in its metadata: ``displayName``, ``state`` (``BATCH_STATE_PENDING``... ``_EXPIRED``),
``createTime``, ``batchStats`` and, once ended, ``output.inlinedResponses.inlinedResponses``:
``InlinedResponse {response | error, metadata}`` in the order of the requests (or, the REST
reference says, in the ended operation's ``response.output``).

How it differs from the others: the model is in the URL, not the body; requests go inline (up to
20 MB a batch: ``batch_requests.LIMITS`` splits under it), each carrying its custom_id as
``metadata.key``, by which its answer is matched; the batch's ``displayName`` is the submission's
id, by which a batch whose creation went unrecorded is found again; and a request's error is a
``google.rpc.Status``, whose code is a gRPC code, turned back into the HTTP status and error body
the app would have had live.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from datetime import datetime
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
    not_a_batch,
    read_batch,
)

# The one endpoint a Gemini batch takes, ``/models/{model}:generateContent`` after the version.
ENDPOINT = re.compile(r"/models/([^/:?#]+):generateContent")
ENDED = frozenset({"succeeded", "failed", "cancelled", "expired"})
_STATE = re.compile(r"(?:BATCH|JOB)_STATE_")  # the REST enum's prefix, and python-genai's
# A page of the listing: Google's APIs coerce a larger page size to their maximum (AIP-158).
_PAGE = 1000
# google.rpc.Code -> the HTTP status the API answers it with (google/rpc/code.proto), and the
# name its error bodies carry; a code above 16 is taken as an HTTP status already.
GRPC_STATUS = {
    1: (499, "CANCELLED"),
    2: (500, "UNKNOWN"),
    3: (400, "INVALID_ARGUMENT"),
    4: (504, "DEADLINE_EXCEEDED"),
    5: (404, "NOT_FOUND"),
    6: (409, "ALREADY_EXISTS"),
    7: (403, "PERMISSION_DENIED"),
    8: (429, "RESOURCE_EXHAUSTED"),
    9: (400, "FAILED_PRECONDITION"),
    10: (409, "ABORTED"),
    11: (400, "OUT_OF_RANGE"),
    12: (501, "UNIMPLEMENTED"),
    13: (500, "INTERNAL"),
    14: (503, "UNAVAILABLE"),
    15: (500, "DATA_LOSS"),
    16: (401, "UNAUTHENTICATED"),
}


class _Status(Tolerant):
    """A google.rpc.Status."""

    code: int | None = None
    message: str | None = None


class _Stats(Tolerant):
    # int64 fields: strings in proto3's JSON, which pydantic reads as numbers.
    requestCount: int = 0
    successfulRequestCount: int = 0
    failedRequestCount: int = 0
    pendingRequestCount: int = 0


class _Inlined(Tolerant):
    response: Any = None
    error: _Status | None = None
    metadata: dict[str, Any] | None = None


class _Responses(Tolerant):
    inlinedResponses: list[Any] = []


class _Output(Tolerant):
    inlinedResponses: _Responses | None = None
    responsesFile: str | None = None


class _Metadata(Tolerant):
    displayName: str | None = None
    state: str = "BATCH_STATE_UNSPECIFIED"
    createTime: datetime
    batchStats: _Stats = _Stats()
    output: _Output | None = None


class _Done(Tolerant):
    output: _Output | None = None


class _Operation(ProviderBatch):
    name: str
    metadata: _Metadata
    error: _Status | None = None  # a failed batch's reason
    # An ended operation's BatchGenerateContentResponse, whose output the REST reference says may
    # hold the responses instead of the batch's own (python-genai reads the batch's).
    response: _Done | None = None

    @property
    def output(self) -> _Output | None:
        return self.metadata.output or (self.response.output if self.response is not None else None)

    def view(self) -> BatchView:
        meta, stats = self.metadata, self.metadata.batchStats
        state = _STATE.sub("", meta.state).lower()
        errors = () if self.error is None else ((None, _status_text(self.error)),)
        output = self.output
        return BatchView(
            id=self.name.removeprefix("batches/"),
            status=state,
            ended=state in ENDED,
            created_at=meta.createTime.timestamp(),
            completed=stats.successfulRequestCount,
            failed=stats.failedRequestCount,
            total=stats.requestCount,
            errors=errors,
            output_file_id=None if output is None else output.responsesFile,
            error_file_id=None,
            metadata={} if meta.displayName is None else {"displayName": meta.displayName},
        )


class GeminiBatches(WireClient):
    """Gemini's Batch Mode at ``base_url``, the URL up to and including the API version the app
    called (``https://generativelanguage.googleapis.com/v1beta``). The key goes as
    ``x-goog-api-key``, as python-genai sends it; retries as
    :class:`~pytest_opik_eval.run.provider_http.ProviderHTTP` does."""

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
        sent = httpx.Headers(headers)
        sent.pop("authorization", None)  # one credential, the key given
        sent["x-goog-api-key"] = api_key
        super().__init__(ProviderHTTP(base_url, api_key, sent, transport=transport, sleep=sleep, tries=tries))

    def submit(
        self,
        submission: str,
        endpoint: str,
        requests: Sequence[tuple[str, bytes]],
        metadata: Mapping[str, str],
        uploaded: Callable[[str], None],
    ) -> BatchView:
        """One batch of the requests, inline (``uploaded`` is never called), named
        ``submission`` (its ``displayName``) so that :meth:`find_submission` finds it; each
        request carries its custom_id as ``metadata.key``. The batch has no other metadata.

        A creation whose answer was lost may have happened: before trying again, the batch of
        that name is looked for, so that a retry never creates a second batch."""
        model = ENDPOINT.fullmatch(endpoint)
        if model is None:
            raise ValueError(
                f"a Gemini batch takes requests to /models/{{model}}:generateContent only, not {endpoint}"
            )
        inlined = [{"request": json_object(raw), "metadata": {"key": custom}} for custom, raw in requests]
        if len({custom for custom, _ in requests}) < len(requests):
            raise ValueError("a custom_id is twice in one batch")
        body = {
            "batch": {
                "displayName": submission,
                "inputConfig": {"requests": {"requests": inlined}},
            }
        }
        since = time.time() - CLOCK_SKEW

        def created() -> dict[str, Any] | None:
            return self._named(submission, since, ())

        path = f"models/{model.group(1)}:batchGenerateContent"
        return _batch(self._wire.json("POST", path, json=body, already_done=created))

    def find_submission(
        self, submission: str, requests: int, created_after: float, known: Collection[str]
    ) -> BatchView | None:
        """The batch named ``submission`` (its ``displayName``): one name, so no doubt."""
        found = self._named(submission, created_after, known)
        return None if found is None else _batch(found)

    def forget_submission(self, submission: str, created_after: float) -> None:
        """Nothing: a batch that was never created left nothing behind (no file is uploaded)."""

    def retrieve(self, batch_id: str) -> BatchView:
        return _batch(self._operation(batch_id))

    def cancel(self, batch_id: str) -> BatchView:
        """Cancel the batch (Gemini answers nothing but success), then its state."""
        self._wire.json("POST", f"batches/{batch_id}:cancel", json={}, not_found=BatchNotFound)
        return self.retrieve(batch_id)

    def results(self, view: BatchView) -> Iterator[ResultLine]:
        """Every result of an ended batch: its inlined responses, read again from the batch (they
        are part of it). A response with no custom_id in its metadata is counted in ``skipped``."""
        answer = self._operation(view.id)
        try:
            output = _Operation.model_validate(answer).output
        except pydantic.ValidationError as error:
            raise not_a_batch(error) from None
        if output is not None and output.inlinedResponses is None and output.responsesFile:
            why = (
                f"batch {view.id} gave its results in a file ({output.responsesFile}), which this "
                "version does not read"
            )
            raise ProviderError(why, status=None, message=why)
        items = (
            []
            if output is None or output.inlinedResponses is None
            else output.inlinedResponses.inlinedResponses
        )
        for item in items:
            line = _line(item)
            if line is None:
                self._wire.skipped += 1
            else:
                yield line

    def _operation(self, batch_id: str) -> dict[str, Any]:
        return self._wire.json("GET", f"batches/{batch_id}", not_found=BatchNotFound)

    def _named(self, name: str, created_after: float, known: Collection[str]) -> dict[str, Any] | None:
        """The batch whose ``displayName`` is ``name``, created after ``created_after``, not
        among ``known``. Every page is read: the order of Gemini's listing is not documented."""
        params: dict[str, str | int] = {"pageSize": _PAGE}
        while True:
            page = self._wire.json("GET", "batches", params=params)
            for item in page.get("operations") or []:
                try:
                    batch = _Operation.model_validate(item)
                except pydantic.ValidationError:
                    continue  # not a batch this plugin can have made or read
                view = batch.view()
                fits = view.created_at >= created_after and view.id not in known
                if fits and batch.metadata.displayName == name:
                    return dict(item)
            token = page.get("nextPageToken")
            if not token:
                return None
            params = {**params, "pageToken": str(token)}


def _status_text(status: _Status) -> str:
    return f"{_http_status(status.code or 2)[1]}: {status.message or ''}"


def _http_status(code: int) -> tuple[int, str]:
    """The HTTP status and status name of a google.rpc.Status code (or of an HTTP status)."""
    if code in GRPC_STATUS:
        return GRPC_STATUS[code]
    return code, next((name for status, name in GRPC_STATUS.values() if status == code), "UNKNOWN")


def _line(item: Any) -> ResultLine | None:
    try:
        inlined = _Inlined.model_validate(item)
    except pydantic.ValidationError:
        return None
    custom = (inlined.metadata or {}).get("key")
    if not isinstance(custom, str) or not custom:
        return None
    error = inlined.error
    if error is not None and error.code == 1:  # CANCELLED: never ran, so no answer to replay
        return ResultLine(custom, None, None, f"cancelled: {error.message or 'the request was cancelled'}")
    if error is not None:
        # Gemini's error body, as the app would have had it live with that status.
        status, name = _http_status(error.code or 2)
        message = error.message or "the provider gave no message for this request"
        return ResultLine(
            custom, status, {"error": {"code": status, "message": message, "status": name}}, None
        )
    if inlined.response is None:
        return ResultLine(custom, None, None, "no_response: the provider gave no response and no error")
    return ResultLine(custom, 200, inlined.response, None)


def _batch(answer: Any) -> BatchView:
    return read_batch(_Operation, answer)
