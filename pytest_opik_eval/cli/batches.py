"""``opik-eval batch status|collect|cancel RUN``: where a run's provider batches stand
(``--eval-batch``); their ended results collected into the recordings without running a trial
(on a machine with network: ``pytest --eval-resume`` then replays them anywhere the store folder
goes); the batches still running cancelled (their requests are submitted again by the next
resume that batches)."""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from pytest_opik_eval.escaping import escape_control
from pytest_opik_eval.reports.session_lines import collected_line
from pytest_opik_eval.run.batch_collect import collect_run
from pytest_opik_eval.run.batch_providers import BatchNotFound, ProviderError
from pytest_opik_eval.run.batch_submit import client_for, reconcile
from pytest_opik_eval.store import Store
from pytest_opik_eval.store.batch_ledger import Ledger, Writer, batches_folder, load, locked


def batch(store: Store, path: Path, args: argparse.Namespace, resume: Callable[[str], str]) -> int:
    run, _ = store.find(args.id)
    folder = batches_folder(path.parent)
    if not load(folder, run.id).submissions:
        print(f"run {run.id} has no provider batch (it ran without --eval-batch, or submitted nothing)")
        return 0
    session = f"cli-{uuid.uuid4().hex[:12]}"
    command = resume(run.id) + " --eval-batch"
    if args.batch_command == "collect":
        return _collect(path, run.id, session, command)
    with locked(folder, run.id):
        ledger = load(folder, run.id)
        writer = Writer(folder, run.id, session, args.batch_command)
        try:
            for message in reconcile(ledger, writer):
                _tell(message)
        finally:
            writer.close()
    if args.batch_command == "cancel":
        return _cancel(ledger, command)
    return _status(ledger, run.id, command)


def _status(ledger: Ledger, run_id: str, command: str) -> int:
    print(f"run {run_id}: {len(ledger.batches)} batch{'es' if len(ledger.batches) != 1 else ''}")
    running = 0
    for batch_id, submission in ledger.batches.items():
        line = ledger.submissions[submission].line
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(line.at))
        if batch_id in ledger.collected:
            state = "collected"
        else:
            try:
                client = client_for(line.group)
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
                state = f"{view.status} {view.completed}/{view.total}, {view.failed} failed"
                running += not view.ended
        print(escape_control(f"  {batch_id}  {line.group.describe()}  {state}  submitted {when}"))
    for refused in ledger.submissions.values():
        if refused.failed is not None and refused.batch_id is None:
            count = len(refused.line.custom_ids)
            print(escape_control(f"  not submitted ({count} requests): {refused.failed}"))
    reasons = Counter(s.reason for s in ledger.states.values() if s.state == "failed" and s.batch_id)
    for reason, count in reasons.most_common():
        print(escape_control(f"  {count} request{'s' if count > 1 else ''} without an answer: {reason}"))
    print(f"{running} still running; once they end: {command}" if running else f"all ended: {command}")
    return 0


def _collect(path: Path, run_id: str, session: str, command: str) -> int:
    done = collect_run(path.parent, run_id, session, "collect")
    for message in done.notices:
        _tell(message)
    print(collected_line(done.report()))
    print(f"finish the trials: {command}")
    return 1 if done.unsaved else 0


def _cancel(ledger: Ledger, command: str) -> int:
    failed = 0
    for batch_id in ledger.open_batches():
        group = ledger.submissions[ledger.batches[batch_id]].line.group
        try:
            client = client_for(group)
            try:
                view = client.cancel(batch_id)
            finally:
                client.close()
        except ProviderError as error:
            _tell(f"batch {batch_id} not cancelled: {error}")
            failed += 1
            continue
        print(escape_control(f"  {batch_id}  {group.describe()}  {view.status}"))
    print(f"the next resume collects what they answered and submits the rest again: {command}")
    return 1 if failed else 0


def _tell(message: str) -> None:
    print(escape_control(f"opik-eval: {message}"), file=sys.stderr)
