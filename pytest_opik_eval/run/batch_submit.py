"""Submitting the session's deferred requests as provider batches, at its end, in the process that
ends it; and finding again a submission whose process was killed mid-way (``reconcile``).

The protocol never submits a request twice: each submission is written to the ledger
(``submitting``, with its id, a digest of its requests) before the first network call, and its
batch carries that id in its metadata. A process killed after the provider created the batch but
before the ledger said so leaves a submission with no outcome; the next reader looks for a batch
with that id among the provider's recent batches, and adopts it, or, when there is none, deletes
the uploaded file and marks the submission failed, so that its requests are submitted again.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass

from pytest_opik_eval.run.batch_providers import BatchClient, ProviderError, batch_client
from pytest_opik_eval.run.batch_requests import split, submission_id
from pytest_opik_eval.run.batching import Queued
from pytest_opik_eval.run.provider_http import CLOCK_SKEW
from pytest_opik_eval.store.batch_ledger import (
    Group,
    Ledger,
    Submission,
    SubmitFailed,
    Submitted,
    Submitting,
    Uploaded,
    Writer,
)


@dataclass(frozen=True)
class Outcome:
    """One submission's: its batch, or why it failed."""

    group: Group
    requests: int
    batch_id: str | None = None
    error: str | None = None


Clients = Callable[[Group], BatchClient]


def client_for(group: Group) -> BatchClient:
    """The provider's client for the group, with the key its environment variable holds now."""
    key = os.environ.get(group.key_env)
    if not key:
        why = f"the environment variable {group.key_env}, which holds the API key, is not set"
        raise ProviderError(why, status=None, message=why)
    return batch_client(group.provider, group.base_url, key, dict(group.headers), bearer=group.bearer)


def submit(
    queue: Iterable[Queued], ledger: Ledger, writer: Writer, run_id: str, clients: Clients = client_for
) -> list[Outcome]:
    """Submit the queued requests, one batch per group and part (``batch_requests.split``),
    serially: a killed process leaves at most one submission without an outcome. Requests
    already waiting in a batch (a trial run twice in the session) are not submitted again."""
    groups: dict[Group, list[Queued]] = {}
    for queued in queue:
        state = ledger.state(queued.custom_id)
        if state is not None and state.state in ("waiting", "submitting"):
            continue
        groups.setdefault(queued.group, []).append(queued)
    outcomes = []
    for group, members in groups.items():
        for part in split(group.provider, [(q.custom_id, q.body) for q in members]):
            outcomes.append(_submit_part(group, part, writer, run_id, clients))
    return outcomes


def _submit_part(
    group: Group, part: list[tuple[str, bytes]], writer: Writer, run_id: str, clients: Clients
) -> Outcome:
    custom_ids = [custom for custom, _ in part]
    submission = submission_id(run_id)
    line = Submitting(submission=submission, group=group, custom_ids=custom_ids)
    writer.write(line)
    uploaded: list[str] = []

    def upload(file_id: str) -> None:
        uploaded.append(file_id)
        writer.write(Uploaded(submission=submission, file_id=file_id))

    try:
        client = clients(group)
        try:
            batch = client.submit(
                submission, group.endpoint, part, {"opik_eval": "1", "opik_eval_run": run_id[:512]}, upload
            )
        except (ProviderError, ValueError):
            if uploaded:  # the input file of a batch never created: not left with the provider
                _forget(client, line)
            raise
        finally:
            client.close()
    except (ProviderError, ValueError) as error:
        writer.write(SubmitFailed(submission=submission, reason=str(error)))
        return Outcome(group, len(part), error=str(error))
    writer.write(Submitted(submission=submission, batch_id=batch.id))
    return Outcome(group, len(part), batch_id=batch.id)


def _forget(client: BatchClient, line: Submitting) -> None:
    try:
        client.forget_submission(line.submission, line.at - CLOCK_SKEW)
    except ProviderError:  # an input file left behind expires with the provider's retention
        pass


def reconcile(ledger: Ledger, writer: Writer, clients: Clients = client_for) -> list[str]:
    """Settle each submission its process left without an outcome: adopt the batch the provider
    created for it, or mark it failed. Returns a notice per submission it could not settle (the
    provider did not answer): they stay as they are, never submitted again until settled."""
    unsettled = []
    for submission in list(ledger.submissions.values()):
        if submission.open:
            try:
                line = _settle(submission, set(ledger.batches), clients)
            except ProviderError as error:
                unsettled.append(
                    f"--eval-batch: submission {submission.line.submission} was interrupted and could not "
                    f"be looked up ({error}); its {len(submission.line.custom_ids)} requests wait until then"
                )
                continue
            writer.write(line)
            ledger.apply(line)
    return unsettled


def _settle(submission: Submission, known: Collection[str], clients: Clients) -> Submitted | SubmitFailed:
    line = submission.line
    client = clients(line.group)
    try:
        since = line.at - CLOCK_SKEW
        found = client.find_submission(line.submission, len(line.custom_ids), since, known)
        if found is not None:
            return Submitted(submission=line.submission, batch_id=found.id, adopted=True)
        _forget(client, line)
    finally:
        client.close()
    return SubmitFailed(
        submission=line.submission, reason="interrupted before the provider created the batch"
    )
