"""The wire of a provider's batch API, for ``--eval-batch``: :class:`BatchClient`, what the rest
of the plugin asks of any provider, and OpenAI's Batch API over httpx (the plugin does not depend
on the ``openai`` package, and the app's client may be anything); Anthropic's is in
``anthropic_batches``, Gemini's in ``gemini_batches``.

What the rest of the plugin sees is normalized: a :class:`BatchView` of a batch's state and a
:class:`ResultLine` per answer, so the submission and collection logic does not depend on one
provider's words. The retries, errors and key masking all providers share are in
``provider_http``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol

import httpx
import pydantic

from pytest_opik_eval.run.anthropic_batches import AnthropicBatches
from pytest_opik_eval.run.gemini_batches import GeminiBatches
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

__all__ = [
    "SUBMISSION_KEY",
    "BatchClient",
    "BatchNotFound",
    "BatchView",
    "OpenAIBatches",
    "ProviderError",
    "ResultLine",
    "batch_client",
    "request_line",
    "upload_name",
]

ENDED = frozenset({"completed", "failed", "expired", "cancelled"})
_PAGE = 100  # the most OpenAI lists of batches at once
# The metadata key that names a batch's submission, so that a lost one can be found again.
SUBMISSION_KEY = "opik_eval_submission"


class BatchClient(Protocol):
    """What the plugin asks of a provider's batch API (:func:`batch_client` makes one)."""

    @property
    def skipped(self) -> int:
        """Result lines that could not be read (not JSON, no custom_id), so far."""

    def submit(
        self,
        submission: str,
        endpoint: str,
        requests: Sequence[tuple[str, bytes]],
        metadata: Mapping[str, str],
        uploaded: Callable[[str], None],
    ) -> BatchView:
        """One batch of ``requests`` (custom_id, the app's raw JSON body) to ``endpoint``, created
        for ``submission``; ``uploaded`` is told the id of an input file once there is one (a
        provider without files never calls it). ValueError, before anything is sent, for a
        request no batch of this provider can take."""

    def find_submission(
        self, submission: str, requests: int, created_after: float, known: Collection[str]
    ) -> BatchView | None:
        """The batch created for ``submission`` (of ``requests`` requests) after ``created_after``
        by a process killed before it recorded the batch's id, or None when there is none.
        ``known`` are the batch ids already recorded: never this one. Raises ProviderError when
        the provider cannot tell which batch it is."""

    def forget_submission(self, submission: str, created_after: float) -> None:
        """Delete what a submission that never became a batch left with the provider."""

    def retrieve(self, batch_id: str) -> BatchView: ...

    def results(self, view: BatchView) -> Iterator[ResultLine]:
        """Every result of an ended batch; lines that cannot be read are counted in ``skipped``.
        A download that fails raises ProviderError while iterating."""

    def cancel(self, batch_id: str) -> BatchView: ...

    def close(self) -> None: ...


def batch_client(
    provider: str, base_url: str, api_key: str, headers: Mapping[str, str], *, bearer: bool = False
) -> BatchClient:
    """The batch API of ``provider`` (``openai``, ``anthropic`` or ``gemini``) at ``base_url``,
    the URL the app called (OpenAI's ends in ``/v1``, Gemini's in its API version, Anthropic's is
    before ``/v1``). ``bearer``: the app sent its Anthropic key as ``Authorization: Bearer``
    (OpenAI's always is)."""
    if provider == "openai":
        return OpenAIBatches(base_url, api_key, headers)
    if provider == "anthropic":
        return AnthropicBatches(base_url, api_key, headers, bearer=bearer)
    if provider == "gemini":
        return GeminiBatches(base_url, api_key, headers)
    raise ValueError(f"no batch API for the provider {provider!r}: 'anthropic', 'gemini' or 'openai'")


class _Counts(Tolerant):
    completed: int = 0
    failed: int = 0
    total: int = 0


class _BatchError(Tolerant):
    code: str | None = None
    message: str | None = None
    line: int | None = None


class _Errors(Tolerant):
    data: list[_BatchError] | None = None


class _Batch(ProviderBatch):
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


class _Response(Tolerant):
    status_code: int
    body: Any = None


class _LineError(Tolerant):
    code: str | None = None
    message: str | None = None


class _Line(Tolerant):
    custom_id: str
    response: _Response | None = None
    error: _LineError | None = None


def request_line(custom_id: str, endpoint: str, body: bytes) -> bytes:
    """One line of a batch input file (no newline), for ``body``, the app's raw JSON request.

    Re-encoded compactly: a pretty-printed body would break the file's one request per line.
    Raises ValueError when the body is not a JSON object, which no batch can take."""
    line = {"custom_id": custom_id, "method": "POST", "url": endpoint, "body": json_object(body)}
    return json.dumps(line, ensure_ascii=False, separators=(",", ":")).encode()


def upload_name(submission: str) -> str:
    """The name of a submission's input file, by which it is found again."""
    return f"opik-eval-{submission}.jsonl"


class OpenAIBatches(WireClient):
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
        super().__init__(
            ProviderHTTP(
                base_url,
                api_key,
                httpx.Headers({**headers, "Authorization": f"Bearer {api_key}"}),
                transport=transport,
                sleep=sleep,
                tries=tries,
            )
        )

    def submit(
        self,
        submission: str,
        endpoint: str,
        requests: Sequence[tuple[str, bytes]],
        metadata: Mapping[str, str],
        uploaded: Callable[[str], None],
    ) -> BatchView:
        """Upload the requests as :func:`upload_name`, then create their batch, its metadata
        naming the submission (``SUBMISSION_KEY``) so that :meth:`find_submission` finds it."""
        lines = [request_line(custom_id, endpoint, body) for custom_id, body in requests]
        file_id = self.upload(upload_name(submission), lines)
        uploaded(file_id)
        return self.create(file_id, endpoint, {**metadata, SUBMISSION_KEY: submission})

    def find_submission(
        self, submission: str, requests: int, created_after: float, known: Collection[str]
    ) -> BatchView | None:
        """The batch whose metadata names ``submission``: one id, so no doubt (and no use for the
        count of requests or the ids known)."""
        return self.find(SUBMISSION_KEY, submission, created_after)

    def forget_submission(self, submission: str, created_after: float) -> None:
        """Delete the submission's uploaded input file, if any."""
        self.delete_uploads(upload_name(submission), created_after)

    def upload(self, name: str, lines: Iterable[bytes]) -> str:
        """Upload a batch input file named ``name`` (each line a :func:`request_line`); its id."""
        content = b"".join(line.rstrip(b"\n") + b"\n" for line in lines)
        files = {"file": (name, content, "application/jsonl")}
        answer = self._wire.json("POST", "files", data={"purpose": "batch"}, files=files)
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
            return self._newest(lambda batch: batch.get("input_file_id") == file_id, started - CLOCK_SKEW)

        return _batch(self._wire.json("POST", "batches", json=body, already_done=created))

    def retrieve(self, batch_id: str) -> BatchView:
        return _batch(self._wire.json("GET", f"batches/{batch_id}", not_found=BatchNotFound))

    def cancel(self, batch_id: str) -> BatchView:
        return _batch(self._wire.json("POST", f"batches/{batch_id}/cancel", not_found=BatchNotFound))

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
                self._wire.json("DELETE", f"files/{file_id}")
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
                yield from self._wire.lines(f"files/{file_id}/content", _line)

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
        return self._wire.listing(
            path,
            params,
            created_after,
            cursor="after",
            created=lambda item: float(item.get("created_at") or 0),
        )


def _line(raw: str) -> ResultLine | None:
    try:
        line = _Line.model_validate_json(raw)
    except pydantic.ValidationError:
        return None
    if line.response is not None:
        return ResultLine(line.custom_id, line.response.status_code, line.response.body, None)
    error = line.error or _LineError(code="no_response", message="the provider gave no response and no error")
    return ResultLine(line.custom_id, None, None, f"{error.code or 'error'}: {error.message or ''}")


def _batch(answer: Any) -> BatchView:
    return read_batch(_Batch, answer)
