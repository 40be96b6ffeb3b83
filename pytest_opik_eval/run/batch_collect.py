"""Collecting a run's ended batches (``--eval-resume`` with ``--eval-batch``, before any trial
runs): each answer becomes the trial's recording, so that its task replays it and goes on to its
next request; a request that got no usable answer is marked failed, and submitted again when its
trial runs.

An answer is recorded as live would have answered: a success, or an error the provider would give
again (a 400 for a bad request: the app sees it and the trial fails as it would live). Transient
errors (408, 409, 429, 5xx), expired and cancelled requests, and a request with no result in an
ended batch are failed: resubmitted. A result whose id no request of the batch had is counted and
ignored.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_opik_eval.masking import EnvironmentSecrets, Scrubber
from pytest_opik_eval.run.batch_providers import (
    BatchClient,
    BatchNotFound,
    BatchView,
    ProviderError,
    ResultLine,
)
from pytest_opik_eval.run.batch_submit import Clients, client_for, reconcile
from pytest_opik_eval.run.http_calls import recorded_response, usage_of
from pytest_opik_eval.run.pricing import priced_usage
from pytest_opik_eval.store.batch_ledger import (
    Answered,
    Collected,
    Failed,
    Ledger,
    Writer,
    batches_folder,
    load,
    locked,
)
from pytest_opik_eval.store.http_recordings import Interaction, Journal, fold, recordings_folder
from pytest_opik_eval.verdict.model import BatchReport

# Statuses a provider may answer differently when asked again.
_TRANSIENT = frozenset({408, 409, 429})


@dataclass
class Collection:
    """What a collection did."""

    batches: int = 0  # ended batches whose results were read
    answers: int = 0
    failed: int = 0
    unknown: int = 0
    cost: float | None = None  # USD, of the answers at the batch price (None: none priced)
    live_cost: float | None = None  # what they would have cost live
    tokens: int = 0  # of the answers, in and out
    unsaved: bool = False  # the recordings' files could not all be written (the journal keeps them)

    def report(self) -> BatchReport:
        """What every report says of it."""
        return BatchReport(
            collected_batches=self.batches,
            answers=self.answers,
            failed_requests=self.failed,
            unknown_results=self.unknown,
            cost=self.cost,
            live_cost=self.live_cost,
            still_running=self.still_running,
        )

    still_running: list[str] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)


def collect_run(store_folder: Path, run_id: str, session_id: str, process: str) -> Collection:
    """The run's ended batches collected into the recordings beside the store and folded (the
    trials replay them from the files), under the ledger's lock; what could not be read said."""
    folder, recordings = batches_folder(store_folder), recordings_folder(store_folder)
    with locked(folder, run_id):
        ledger = load(folder, run_id)
        writer = Writer(folder, run_id, session_id, process)
        journal = Journal(recordings, session_id, "batch")
        try:
            done = collect(ledger, writer, journal)
        finally:
            writer.close()
            journal.close()
    folded = fold(recordings)
    damaged = [
        f"--eval-batch: a ledger line could not be read, and was skipped: {where}" for where in ledger.damaged
    ]
    done.notices += [*damaged, *folded.set_aside, *folded.unsaved]
    done.unsaved = bool(folded.unsaved)
    return done


def collect(ledger: Ledger, writer: Writer, journal: Journal, clients: Clients = client_for) -> Collection:
    """Read every ended batch of the ledger not collected yet into the recordings' ``journal``
    (folded by the caller before trials run), and settle interrupted submissions first."""
    done = Collection(notices=reconcile(ledger, writer, clients))
    for batch_id in ledger.open_batches():
        group = ledger.submissions[ledger.batches[batch_id]].line.group
        try:
            client = clients(group)
        except ProviderError as error:
            done.notices.append(f"--eval-batch: batch {batch_id} not collected: {error}")
            continue
        try:
            _collect_batch(batch_id, ledger, writer, journal, client, done)
        except ProviderError as error:
            done.notices.append(f"--eval-batch: batch {batch_id} not collected this time: {error}")
        finally:
            client.close()
    return done


def _collect_batch(
    batch_id: str, ledger: Ledger, writer: Writer, journal: Journal, client: BatchClient, done: Collection
) -> None:
    waiting = ledger.waiting(batch_id)
    try:
        view = client.retrieve(batch_id)
    except BatchNotFound:
        why = f"batch {batch_id} not found at the provider (deleted?)"
        done.notices.append(f"--eval-batch: {why}: its {len(waiting)} requests are submitted again")
        _fail_all(waiting, batch_id, why, writer, ledger, done)
        _write(Collected(batch_id=batch_id), writer, ledger)
        return
    if not view.ended:
        done.still_running.append(batch_id)
        return
    if view.status == "failed":
        errors = "; ".join(message for _, message in view.errors) or "no reason given"
        _fail_all(waiting, batch_id, f"batch {batch_id} failed: {errors}", writer, ledger, done)
    else:
        _read_results(view, set(waiting), ledger, writer, journal, client, done)
    done.batches += 1
    _write(Collected(batch_id=batch_id), writer, ledger)


def _read_results(
    view: BatchView,
    waiting: set[str],
    ledger: Ledger,
    writer: Writer,
    journal: Journal,
    client: BatchClient,
    done: Collection,
) -> None:
    scrubber = Scrubber(EnvironmentSecrets())
    # The batch's own requests: one already answered comes again when a collection killed
    # mid-way downloads the batch again; only an id of none of them is unknown.
    own = set(ledger.submissions[ledger.batches[view.id]].line.custom_ids)
    unknown = 0
    for result in client.results(view):
        if result.custom_id not in waiting:
            unknown += result.custom_id not in own
            continue
        waiting.discard(result.custom_id)
        reason = _unusable(result)
        if reason is not None:
            _write(Failed(custom_id=result.custom_id, batch_id=view.id, reason=reason), writer, ledger)
            done.failed += 1
            continue
        _record(result, view.id, ledger, journal, scrubber, done)
        _write(Answered(custom_id=result.custom_id, batch_id=view.id), writer, ledger)
        done.answers += 1
    if client.skipped:
        done.notices.append(
            f"--eval-batch: batch {view.id} returned {client.skipped} result line(s) that could not be read "
            "(not JSON, or no custom_id); their requests are submitted again"
        )
    why = f"no result in batch {view.id} ({view.status})"
    _fail_all(sorted(waiting), view.id, why, writer, ledger, done)
    if unknown:
        done.unknown += unknown
        done.notices.append(
            f"--eval-batch: batch {view.id} returned {unknown} result{'s' if unknown > 1 else ''} of no "
            "request it was given; ignored"
        )


def _unusable(result: ResultLine) -> str | None:
    """Why the result is no answer to replay (None: it is one)."""
    status = result.status_code
    if status is None:
        return result.error or "no response"
    if status in _TRANSIENT or status >= 500:
        return f"HTTP {status}: {_message(result.body)}"
    return None


def _message(body: object) -> str:
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return str(body["error"].get("message") or body["error"])
    return json.dumps(body)[:200]


def _record(
    result: ResultLine, batch_id: str, ledger: Ledger, journal: Journal, scrubber: Scrubber, done: Collection
) -> None:
    """The answer as the trial's recording: what live would have recorded."""
    deferred = ledger.requests[result.custom_id]
    status = result.status_code or 200
    body = json.dumps(result.body).encode()
    response = recorded_response(
        status, "OK" if status < 400 else "Error", {"content-type": ["application/json"]}, body, scrubber
    )
    usage = priced_usage(usage_of(response), batch=True)
    interaction = Interaction(
        item_id=deferred.item_id,
        trial=deferred.trial,
        occurrence=deferred.occurrence,
        request=deferred.request,
        response=response,
        usage=usage,
        batch=batch_id,
        run=deferred.run_id,
    )
    journal.add(deferred.test, interaction)
    if usage is not None:
        done.tokens += usage.input_tokens + usage.output_tokens
    if usage is not None and usage.cost is not None:
        done.cost = (done.cost or 0.0) + usage.cost
        done.live_cost = (done.live_cost or 0.0) + (usage.live_cost or usage.cost)


def _fail_all(
    custom_ids: Iterable[str], batch_id: str, reason: str, writer: Writer, ledger: Ledger, done: Collection
) -> None:
    for custom_id in custom_ids:
        _write(Failed(custom_id=custom_id, batch_id=batch_id, reason=reason), writer, ledger)
        done.failed += 1


def _write(line: Any, writer: Writer, ledger: Ledger) -> None:
    writer.write(line)
    ledger.apply(line)
