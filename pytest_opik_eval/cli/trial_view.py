"""``opik-eval show NODE_ID``: one trial, what it is (of which run, a rescore of which), its latency,
scores and span tree; and the command that shows it, which ``show`` of a run prints."""

from __future__ import annotations

import argparse
import json
import shlex
from collections.abc import Sequence
from pathlib import Path

from pytest_opik_eval.escaping import escape_control
from pytest_opik_eval.exceptions import ExperimentNotFound
from pytest_opik_eval.formatting import duration
from pytest_opik_eval.reports.span_tree import tree_lines
from pytest_opik_eval.reports.terminal import trial_verdict
from pytest_opik_eval.store import ScoreRecord, Store, TrialRecord
from pytest_opik_eval.store.base import experiments_with_trial, find_trial, rescore_chain

# The other runs with the trial named, when its node id picked the newest run's.
_OTHER_RUNS = 5


def show_trial(
    store: Store, args: argparse.Namespace, named: Path | None, not_found: ExperimentNotFound | None = None
) -> int:
    """One trial: what it is (of which run; a rescore of which), its latency and scores, and its
    spans as a tree (or as JSON)."""
    run = None if args.run is None else store.find(args.run)[0].id
    found = find_trial(store, args.id, run)
    if found is None:
        raise _no_trial(store, args.id, run, not_found)
    experiment, trial = found
    others = [] if run is not None else experiments_with_trial(store, trial.node_id)
    others = [e for e in others if e.run_id != experiment.run_id]
    chain = rescore_chain(store, experiment)
    if args.json:
        shown = {
            "experiment_id": experiment.id,
            "run_id": experiment.run_id,
            "rescore_of": [{"experiment_id": e, "run_id": r} for e, r in chain] or None,
            "other_runs": [e.run_id for e in others],
            "trial_id": trial.id,
            "node_id": trial.node_id,
            "dataset_item_id": trial.dataset_item_id,
            "trial": trial.trial,
            "status": trial.status,
            "passed": trial.passed,
            "task_seconds": trial.task_seconds,
            "metric_seconds": trial.metric_seconds,
            "spans": [span.model_dump(mode="json", exclude_none=True) for span in trial.spans],
        }
        print(json.dumps(shown, indent=2, ensure_ascii=False))
        return 0
    lines = [
        f"{experiment.name} ({experiment.test})  experiment {experiment.id}",
        f"  trial {trial.node_id}, run {experiment.run_id}",
    ]
    if others:
        listed = ", ".join(e.run_id + (" (a rescore)" if e.rescore_of else "") for e in others[:_OTHER_RUNS])
        more = f" and {len(others) - _OTHER_RUNS} more" if len(others) > _OTHER_RUNS else ""
        lines.append(
            f"  {len(others)} other run(s) have it, newest first: {listed}{more}; pick one with --run ID"
        )
    if chain:
        lines.append(f"  {_rescore_note(chain, trial.node_id, named)}")
    lines += _trial_lines(trial, rescored=bool(chain), soft=experiment.gates.soft_trials())
    for line in lines:
        print(escape_control(line))  # names, ids and errors are data (tree_lines escaped its own)
    return 0


def _no_trial(
    store: Store, target: str, run: str | None, not_found: ExperimentNotFound | None
) -> ExperimentNotFound:
    if run is None:
        assert not_found is not None, "without --run, the id was looked up as an experiment or run first"
        return ExperimentNotFound(
            str(not_found).replace("no experiment or run with id", "no run, experiment or trial with id", 1)
        )
    elsewhere = ", ".join(e.run_id for e in experiments_with_trial(store, target)[:_OTHER_RUNS])
    where = (
        f"the runs that have it: {elsewhere}" if elsewhere else f"list its trials with: opik-eval show {run}"
    )
    return ExperimentNotFound(f"no trial with id, trace id or node id {target!r} in run {run}; {where}")


def _rescore_note(chain: list[tuple[str, str | None]], node_id: str, named: Path | None) -> str:
    """What a rescored trial is: ``a rescore of run R (experiment E): the task did not run; ...``."""
    experiment, run = chain[0]
    note = (
        f"a rescore of run {run} (experiment {experiment})"
        if run
        else f"a rescore of experiment {experiment}"
    )
    for experiment, run in chain[1:]:
        note += (
            f", itself a rescore of run {run}" if run else f", itself a rescore of experiment {experiment}"
        )
    origin = chain[-1][1]
    if origin is None:
        return f"{note} (not in this store): the task did not run here; its output is that experiment's"
    return (
        f"{note}: the task did not run here; its output and the task's spans are in run {origin}: "
        f"{show_command(node_id, origin, named)}"
    )


def _trial_lines(trial: TrialRecord, *, rescored: bool, soft: bool) -> list[str]:
    """The trial's status, verdict, latency, scores and span tree."""
    verdict = trial_verdict(trial.passed, soft=soft)
    status = f"{trial.status}, {verdict}" if verdict else trial.status
    lines = [f"  item {trial.dataset_item_id}, trial {trial.trial}: {status}"]
    timings = [f"task {duration(trial.task_seconds)}"] if trial.task_seconds is not None else []
    timings += [f"{name} {duration(value)}" for name, value in trial.metric_seconds.items()]
    if timings:
        lines.append("  latency: " + ", ".join(timings))
    if trial.scores:
        lines.append(f"  scores: {scores_text(trial.scores)}")
    if trial.spans:
        lines.append(f"  trace {trial.spans[0].trace_id}: {len(trial.spans)} spans")
        lines += [f"    {line}" for line in tree_lines(trial.spans)]
    elif rescored:
        lines.append("  no spans recorded: the task did not run, and the metrics made none")
    else:
        lines.append("  no spans recorded: the app made none with the Opik SDK")
    return lines


def scores_text(scores: Sequence[ScoreRecord]) -> str:
    return ", ".join(f"{s.name}=" + ("FAILED" if s.scoring_failed else f"{s.value:.3g}") for s in scores)


def show_command(node_id: str, run_id: str, named: Path | None) -> str:
    """The command that shows trial ``node_id`` of run ``run_id``, with the store it was read
    from when one was named."""
    store = [] if named is None else ["--store", str(named)]
    return shlex.join(["opik-eval", *store, "show", node_id, "--run", run_id])
