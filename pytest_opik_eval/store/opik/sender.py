"""The background sender: drains the spool's outbox to the Opik server in batches, so a trial
never waits on the network, and keeps whatever cannot be sent for later."""

from __future__ import annotations

import functools
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytest_opik_eval.ids import uuid7
from pytest_opik_eval.store.opik.client import OpikClient, OpikHTTPError, OpikUnavailable
from pytest_opik_eval.store.opik.spool import Spool

BATCH = 500  # messages read from the outbox at a time
SPANS_PER_REQUEST = 1000  # the most spans/batch takes (the Opik SDK's batcher sends as many)
SCORES_PER_REQUEST = 1000  # the most a feedback-scores request takes (the SDK's batches as many)
# The outbox's kinds of feedback scores, each to its endpoint: a trace's, a conversation thread's.
SCORE_PATHS = (
    ("feedback_scores", "traces/feedback-scores"),
    ("thread_feedback_scores", "traces/threads/feedback-scores"),
)
# The keys of a trace's metadata that hold another trace's id (see payloads.turn_traces, trace).
TRACE_KEYS = ("trial_trace_id", "replaced_by")
SPAN_BYTES_PER_REQUEST = 10_000_000  # of JSON, before gzip: well under the server's request limit
# Opik Cloud refuses a new trace whose UUID v7 time is more than its window (24 hours by
# default, 12 at the least) from now; self-hosted servers check only the version. A trace
# spooled for longer than this is sent under a new id, so a long outage loses nothing.
REKEY_AFTER_MS = 11 * 3600 * 1000


def send_batch(
    client: OpikClient, messages: list[tuple[int, str, str]], spool: Spool
) -> dict[int, OpikHTTPError]:
    """Send one batch, grouped by kind, in the order that keeps references valid: traces before
    the spans, experiment items and scores that point at them. A refused request sets aside the
    writes of its kind only, and the rest is still sent: a thread's scores refused (by a server
    that wants the thread closed first) must not cost the experiment its scores. Returns the
    refused writes' outbox ids with the refusal; raises what the client raises otherwise."""
    by_kind: dict[str, list[dict[str, Any]]] = {}
    ids: dict[str, list[int]] = {}
    for message_id, kind, payload in messages:
        by_kind.setdefault(kind, []).append(json.loads(payload))
        ids.setdefault(kind, []).append(message_id)
    _renew_old_trace_ids(by_kind, spool)
    send = _Requests(client, ids)
    traces = by_kind.get("trace", [])
    if traces:
        # A completed trace and its earlier pending version in one batch: the newer one is enough.
        latest = {trace["id"]: {k: v for k, v in trace.items() if k != "_link"} for trace in traces}
        send("trace", "POST", "traces/batch", {"traces": list(latest.values())})
    # After their traces. A task span sent again with its output: the newer one is enough.
    spans = {span["id"]: span for batch in by_kind.get("spans", []) for span in batch["spans"]}
    for chunk in _span_requests(list(spans.values())):
        send("spans", "POST", "spans/batch", {"spans": chunk})
    if "experiment_item" in by_kind:
        send("experiment_item", "POST", "experiments/items", {"experiment_items": by_kind["experiment_item"]})
    # After the items they delete (a rerun's replaced attempt): the outbox keeps the order.
    deleted = [item_id for batch in by_kind.get("experiment_item_delete", []) for item_id in batch["ids"]]
    if deleted:
        send("experiment_item_delete", "POST", "experiments/items/delete", {"ids": deleted})
    # A thread's after the turn traces that make it: the server scores the thread they name.
    for kind, path in SCORE_PATHS:
        scores = [score for batch in by_kind.get(kind, []) for score in batch["scores"]]
        for start in range(0, len(scores), SCORES_PER_REQUEST):
            send(kind, "PUT", path, {"scores": scores[start : start + SCORES_PER_REQUEST]})
    for update in by_kind.get("experiment_scores", []):
        body = {"experiment_scores": update["scores"]}
        send("experiment_scores", "PATCH", f"experiments/{update['id']}", body)
    for update in by_kind.get("experiment_metadata", []):
        send(
            "experiment_metadata",
            "PATCH",
            f"experiments/{update['id']}",
            functools.partial(_metadata, client, update),
        )
    return send.refused


class _Requests:
    """Sends the requests of one batch; a refused one sets aside the batch's writes of its kind
    (``refused``: their outbox ids, with the refusal)."""

    def __init__(self, client: OpikClient, ids: dict[str, list[int]]) -> None:
        self._client = client
        self._ids = ids
        self.refused: dict[int, OpikHTTPError] = {}

    def __call__(
        self, kind: str, method: str, path: str, body: dict[str, Any] | Callable[[], dict[str, Any]]
    ) -> None:
        """``body``, or what it makes when called (which may ask the server too)."""
        try:
            self._client.request(method, path, body=body() if callable(body) else body)
        except OpikHTTPError as error:
            self.refused.update(dict.fromkeys(self._ids.get(kind, []), error))


def _metadata(client: OpikClient, update: dict[str, Any]) -> dict[str, Any]:
    # The server replaces the whole metadata: the keys set at creation (the resume state, this
    # plugin's plan) are read back and sent with the new one.
    found = client.json("GET", f"experiments/{update['id']}") or {}
    return {"metadata": {**(found.get("metadata") or {}), update["key"]: update["value"]}}


def _renew_old_trace_ids(by_kind: dict[str, list[dict[str, Any]]], spool: Spool) -> None:
    renewed: dict[str, str] = {}
    now_ms = time.time_ns() // 1_000_000
    for trace in by_kind.get("trace", []):
        old = trace["id"]
        new = spool.renewed_id(old)
        # Renewed again if even the new id has grown too old (the outage went on).
        if now_ms - _uuid7_ms(new or old) > REKEY_AFTER_MS:
            new = spool.renew_id(old, uuid7())
            if trace["_link"] is not None and not spool.outbox_links(old):
                # Its experiment item went out under the old id: link the renewed trace too.
                link = {**trace["_link"], "id": uuid7(), "trace_id": new}
                by_kind.setdefault("experiment_item", []).append(link)
        if new is not None:
            renewed[old] = trace["id"] = new
    _follow_renewed_traces(by_kind, renewed, now_ms, spool)


def _follow_renewed_traces(
    by_kind: dict[str, list[dict[str, Any]]], renewed: dict[str, str], now_ms: int, spool: Spool
) -> None:
    """What points at a trace follows it, renewed in this batch or in an earlier one (a batch
    may end between a trace and its experiment item or scores)."""
    for trace in by_kind.get("trace", []):
        # A trace naming another (a turn its conversation's trial, a replaced attempt the one
        # that replaced it) names it as sent; the thread's id is no trace's and stays.
        metadata = trace.get("metadata") or {}
        for key in TRACE_KEYS:
            if isinstance(metadata.get(key), str):
                metadata[key] = _current_id(metadata[key], renewed, spool)
    for link in by_kind.get("experiment_item", []):
        link["trace_id"] = _current_id(link["trace_id"], renewed, spool)
    _renew_old_span_ids(by_kind.get("spans", []), renewed, spool, now_ms)
    for batch in by_kind.get("feedback_scores", []):
        for score in batch["scores"]:
            score["id"] = _current_id(score["id"], renewed, spool)


def _current_id(old: str, renewed: dict[str, str], spool: Spool) -> str:
    return renewed.get(old) or spool.renewed_id(old) or old


def _renew_old_span_ids(
    batches: list[dict[str, Any]], renewed: dict[str, str], spool: Spool, now_ms: int
) -> None:
    """Spans spooled as long as an old trace are as old (the server checks their ids the same
    way): each goes under its trace's new id, and under a new id of its own, which its children
    name as their parent; recorded in the spool, so a span sent again keeps the same new id."""
    spans = [span for batch in batches for span in batch["spans"]]
    ids: dict[str, str] = {}
    for span in spans:
        old = span["id"]
        new = spool.renewed_id(old)
        if now_ms - _uuid7_ms(new or old) > REKEY_AFTER_MS:
            new = spool.renew_id(old, uuid7())
        if new is not None:
            ids[old] = new
    for span in spans:
        span["id"] = ids.get(span["id"], span["id"])
        parent = span.get("parent_span_id")
        if parent is not None:
            # A parent sent in an earlier batch was renewed then.
            span["parent_span_id"] = ids.get(parent) or spool.renewed_id(parent) or parent
        span["trace_id"] = _current_id(span["trace_id"], renewed, spool)


def _span_requests(spans: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """``spans`` in requests of at most ``SPANS_PER_REQUEST`` spans and about
    ``SPAN_BYTES_PER_REQUEST`` bytes of JSON each (a span alone may be bigger)."""
    requests: list[list[dict[str, Any]]] = []
    chunk: list[dict[str, Any]] = []
    size = 0
    for span in spans:
        span_size = len(json.dumps(span, default=str))
        if chunk and (len(chunk) >= SPANS_PER_REQUEST or size + span_size > SPAN_BYTES_PER_REQUEST):
            requests.append(chunk)
            chunk, size = [], 0
        chunk.append(span)
        size += span_size
    if chunk:
        requests.append(chunk)
    return requests


def _uuid7_ms(value: str) -> int:
    return int(value.replace("-", "")[:12], 16)


def _ignore(error: OpikHTTPError) -> None:
    pass


def drain(
    spool: Spool,
    client: OpikClient,
    *,
    until: float,
    on_down: Callable[[OpikUnavailable], None],
    on_refused: Callable[[OpikHTTPError], None] = _ignore,
) -> None:
    """Send everything in the outbox, or until the deadline; the writes of a refused request
    are set aside (and ``on_refused`` hears why). When the server is away or keeps answering
    garbage, ``on_down`` hears why and the rest waits."""
    while time.monotonic() < until:
        messages = spool.outbox_batch(BATCH)
        if not messages:
            return
        try:
            refused = send_batch(client, messages, spool)
        except OpikUnavailable as failure:
            on_down(failure)
            return
        spool.outbox_sent([m[0] for m in messages if m[0] not in refused])
        for refusal in {id(e): e for e in refused.values()}.values():
            # Retrying cannot help a refused request: keep its writes, out of the way, with its
            # reason (the client has masked the key and shortened the server's message).
            spool.outbox_refused([i for i, e in refused.items() if e is refusal], str(refusal))
            on_refused(refusal)


class Sender:
    """A daemon thread that drains the outbox while the session runs.

    It never dies and never warns: pytest turns an exception that ends a thread into a warning,
    which a project's ``-W error`` turns into an error. What goes wrong is kept for
    :meth:`take_notices`, and the writes stay in the outbox for the end of the session."""

    def __init__(self, spool_path: Path, client: OpikClient, *, interval: float = 0.2) -> None:
        self._spool_path = spool_path
        self._client = client
        self._interval = interval
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._down_until = 0.0
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._notices: list[str] = []
        self.last_failure: OpikUnavailable | None = None  # why the server did not take a batch
        self.last_refusal: OpikHTTPError | None = None  # why the server refused one

    def wake(self) -> None:
        if self._thread is None and not self._stop.is_set():
            self._thread = threading.Thread(target=self._run, name="opik-eval-sender", daemon=True)
            self._thread.start()
        self._wake.set()

    def stop(self, deadline: float) -> bool:
        """Stop sending, waiting for a batch in flight until ``deadline`` (a ``time.monotonic()``)
        at the latest; whether the thread is done. One still waiting on the server is left behind
        (a daemon thread: what it has not marked sent stays in the outbox, and sending it again
        is harmless: every write carries its id)."""
        self._stop.set()
        self._wake.set()
        thread, self._thread = self._thread, None
        if thread is None:
            return True
        thread.join(max(0.0, deadline - time.monotonic()))
        return not thread.is_alive()

    def take_notices(self) -> list[str]:
        with self._lock:
            taken, self._notices = self._notices, []
        return taken

    def _run(self) -> None:
        try:
            spool = Spool(self._spool_path)  # its own connection: SQLite connections stay in one thread
        except Exception as error:
            self._trouble("could not open the spool", error)
            return
        try:
            while not self._stop.is_set():
                self._wake.wait(self._interval)
                self._wake.clear()
                # Once stopped, the end of the session sends the rest, within its budget.
                if self._stop.is_set() or time.monotonic() < self._down_until:
                    continue
                try:
                    drain(
                        spool,
                        self._client,
                        until=time.monotonic() + 5.0,
                        on_down=self._pause,
                        on_refused=self._refused,
                    )
                except Exception as error:
                    self._trouble("stopped on an unexpected error", error)
                    self._down_until = time.monotonic() + 2.0
        finally:
            try:
                spool.close()
            except Exception as error:
                self._trouble("could not close the spool", error)

    def _pause(self, failure: OpikUnavailable) -> None:
        # The server is away: try again a little later, without holding up the trials.
        self.last_failure = failure
        self._down_until = time.monotonic() + 2.0

    def _refused(self, error: OpikHTTPError) -> None:
        self.last_refusal = error

    def _trouble(self, what: str, error: Exception) -> None:
        message = (
            f"the Opik sender {what} ({type(error).__name__}: {self._client.quote(str(error))}); "
            f"the writes stay in the spool {self._spool_path}"
        )
        with self._lock:
            if message not in self._notices:
                self._notices.append(message)
