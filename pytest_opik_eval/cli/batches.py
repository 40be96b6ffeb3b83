"""``opik-eval batch status|collect RUN``: where a run's provider batches stand (``--eval-batch``),
and their ended results collected into the recordings without running a trial (on a machine
with network; ``pytest --eval-resume`` then replays them anywhere the store folder goes)."""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from pytest_opik_eval.escaping import escape_control
from pytest_opik_eval.run.batch_collect import collect
from pytest_opik_eval.run.batch_providers import BatchNotFound, ProviderError
from pytest_opik_eval.run.batch_submit import client_for, reconcile
from pytest_opik_eval.store import Store
from pytest_opik_eval.store.batch_ledger import BatchState, Ledger, Writer, batches_folder, load
from pytest_opik_eval.store.http_recordings import Journal, fold, recordings_folder


def batch(store: Store, path: Path, args: argparse.Namespace, resume: Callable[[str], str]) -> int:
    run, _ = store.find(args.id)
    folder = batches_folder(path.parent)
    ledger = load(folder, run.id)
    if not ledger.submissions:
        print(f"run {run.id} has no provider batch (it ran without --eval-batch, or submitted nothing)")
        return 0
    writer = Writer(folder, run.id, f"cli-{uuid.uuid4().hex[:12]}", args.batch_command)
    try:
        if args.batch_command == "collect":
            return _collect(ledger, writer, path, run.id, resume)
        return _status(ledger, writer, run.id, resume)
    finally:
        writer.close()


def _status(ledger: Ledger, writer: Writer, run_id: str, resume: Callable[[str], str]) -> int:
    for message in reconcile(ledger, writer):
        print(escape_control(f"opik-eval: {message}"), file=sys.stderr)
    print(f"run {run_id}: {len(ledger.batches)} batch{'es' if len(ledger.batches) != 1 else ''}")
    running = 0
    for batch_id, submission in ledger.batches.items():
        group = ledger.submissions[submission].line.group
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(ledger.submissions[submission].line.at))
        if batch_id in ledger.collected:
            state = "collected"
        else:
            try:
                client = client_for(group)
                try:
                    view = client.retrieve(batch_id)
                finally:
                    client.close()
            except BatchNotFound:
                state = "not found at the provider (deleted?)"
            except ProviderError as error:
                state = f"not looked up: {error}"
                running += 1
            else:
                writer.write(
                    BatchState(
                        batch_id=batch_id,
                        status=view.status,
                        completed=view.completed,
                        failed=view.failed,
                        total=view.total,
                    )
                )
                state = f"{view.status} {view.completed}/{view.total}, {view.failed} failed"
                running += not view.ended
        print(escape_control(f"  {batch_id}  {group.describe()}  {state}  submitted {when}"))
    for refused in ledger.submissions.values():
        if refused.failed is not None and refused.batch_id is None:
            count = len(refused.line.custom_ids)
            print(escape_control(f"  not submitted ({count} requests): {refused.failed}"))
    command = resume(run_id) + " --eval-batch"
    if running:
        print(f"{running} still running; once they end: {command}")
    else:
        print(f"all ended: {command}")
    return 0


def _collect(ledger: Ledger, writer: Writer, path: Path, run_id: str, resume: Callable[[str], str]) -> int:
    recordings = recordings_folder(path.parent)
    journal = Journal(recordings, writer.path.stem, "batch")
    try:
        done = collect(ledger, writer, journal)
    finally:
        journal.close()
    folded = fold(recordings)
    for message in [*done.notices, *folded.set_aside, *folded.unsaved]:
        print(escape_control(f"opik-eval: {message}"), file=sys.stderr)
    print(
        f"collected {done.answers} answer{'s' if done.answers != 1 else ''} from {done.batches} "
        f"batch{'es' if done.batches != 1 else ''}; {done.failed} without an answer"
        + (f"; still running: {', '.join(done.still_running)}" if done.still_running else "")
    )
    print(f"finish the trials: {resume(run_id)} --eval-batch")
    return 1 if folded.unsaved else 0
