"""The session's two moments with provider batches (``--eval-batch``), in the process that reports
(a single process, or the pytest-xdist controller): collecting the resumed run's ended batches
before any trial runs, and submitting what its trials deferred at its end.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import pytest

from pytest_opik_eval.options import resume_command
from pytest_opik_eval.run.budget import Budget
from pytest_opik_eval.session.resources import batches_folder
from pytest_opik_eval.settings import EvalOptions
from pytest_opik_eval.verdict.model import BatchReport, BatchSubmission

if TYPE_CHECKING:
    from pytest_opik_eval.run.batching import Queued

# What a pytest-xdist worker hands its controller: the requests its trials deferred (the raw
# bodies cross in memory, never written).
WORKER_BATCH = "opik_eval_batch"


def check_resume(options: EvalOptions, run_id: str, requested: str) -> None:
    """A resume of a run with batches, with neither --eval-batch nor recording: said before
    anything runs, since the answers collected would not be replayed: the trials would run live."""
    from pytest_opik_eval.store.batch_ledger import has_ledger

    if (
        options.batch == "off"
        and options.record_mode == "off"
        and has_ledger(batches_folder(options), run_id)
    ):
        raise pytest.UsageError(
            f"--eval-resume={requested}: run {run_id} sent requests to provider batches; resume it with "
            "--eval-batch to collect their answers and batch the rest, or with --eval-record=new_episodes "
            "to replay the answers collected (opik-eval batch collect) and send the rest live"
        )


def collect_batches(
    options: EvalOptions,
    run_id: str,
    session_id: str,
    notify: Callable[[str], None],
    budget: Budget | None = None,
) -> BatchReport:
    """The resumed run's ended batches read into the recordings before any trial runs; what
    their answers cost counted in ``budget``."""
    from pytest_opik_eval.run.batch_collect import collect_run
    from pytest_opik_eval.store.batch_ledger import has_ledger

    if not has_ledger(batches_folder(options), run_id):
        return BatchReport()
    done = collect_run(options.store_path.parent, run_id, session_id, "collect")
    if budget is not None:
        budget.spend(done.tokens if budget.unit == "tokens" else done.cost or 0.0)
    for message in done.notices:
        notify(message)
    return done.report()


def submit_batches(
    options: EvalOptions,
    run_id: str,
    session_id: str,
    queued: Iterable[Queued],
    collected: BatchReport | None,
    waiting_trials: int,
) -> BatchReport:
    """Submit what the session's trials deferred; the report of the session's batches."""
    from pytest_opik_eval.run.batch_submit import submit
    from pytest_opik_eval.store.batch_ledger import Writer, load, locked

    folder = batches_folder(options)
    queue = list(queued)
    outcomes = []
    if queue:
        with locked(folder, run_id):
            ledger = load(folder, run_id)
            writer = Writer(folder, run_id, session_id, "submit")
            try:
                outcomes = submit(queue, ledger, writer, run_id)
            finally:
                writer.close()
    report = collected or BatchReport()
    store = options.store_path if options.store_source == "--eval-store" else None
    return report.model_copy(
        update={
            "waiting_trials": waiting_trials,
            "submissions": [
                BatchSubmission(
                    provider=o.group.provider,
                    model=o.group.model,
                    endpoint=o.group.endpoint,
                    requests=o.requests,
                    batch_id=o.batch_id,
                    error=o.error,
                )
                for o in outcomes
            ],
            "status_command": f"opik-eval batch status {run_id}" + (f" --store {store}" if store else ""),
            "resume_command": resume_command(run_id, store=store, paths=options.paths) + " --eval-batch",
        }
    )


def handed(queue: list[Queued]) -> list[dict[str, str]]:
    """A worker's queue as it crosses to the controller (JSON-safe)."""
    return [
        {
            "custom_id": q.custom_id,
            "group": q.group.model_dump_json(),
            "body": base64.b64encode(q.body).decode("ascii"),
        }
        for q in queue
    ]


def received(handed: list[dict[str, str]]) -> list[Queued]:
    """A worker's queue as the controller submits it."""
    from pytest_opik_eval.run.batching import Queued
    from pytest_opik_eval.store.batch_ledger import Group

    return [
        Queued(h["custom_id"], Group.model_validate_json(h["group"]), base64.b64decode(h["body"]))
        for h in handed
    ]
