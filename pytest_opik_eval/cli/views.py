"""The commands that read a stored run and show it: ``runs`` (``list_runs``), ``show`` (an experiment or
a run; a trial is ``trial_view``'s), ``diff`` (against a baseline), ``report`` (the HTML report)
and ``export`` (the JSON report); each experiment judged as at the end of its latest session."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

from pytest_opik_eval.cli.trial_view import scores_text, show_command, show_trial
from pytest_opik_eval.escaping import escape_control
from pytest_opik_eval.exceptions import ExperimentNotFound
from pytest_opik_eval.files import write_atomically
from pytest_opik_eval.ids import now
from pytest_opik_eval.reports.terminal import baseline_lines, gate_lines, summary_lines, trial_verdict
from pytest_opik_eval.store import ExperimentRecord, Store
from pytest_opik_eval.store.calibrations import Calibrations
from pytest_opik_eval.verdict.model import Report
from pytest_opik_eval.verdict.results import ExperimentResult
from pytest_opik_eval.verdict.summary import Baselines, judge_experiments, rest_of_session


def judged(
    store: Store, stored: Calibrations, target: str, resume: Callable[[str], str], baseline: str | None = None
) -> tuple[str, list[ExperimentRecord], list[ExperimentResult]]:
    """The experiments of ``target``, and their results judged as at the end of their latest
    session (one read of the store: with the Opik backend, the server's items are paged)."""
    run, experiments = store.find(target)
    baselines = Baselines(store, baseline)
    results = judge_experiments(
        store,
        experiments,
        None,
        lambda e: e.gates,
        baselines,
        resume,
        family=rest_of_session(store, target, run, experiments),
        stored=stored,
        now=now(),
    )
    return run.id, experiments, results


def list_runs(store: Store) -> int:
    runs = store.runs()
    if not runs:
        print(f"no runs in {store.location}; record one with: pytest --eval")
    else:
        print(f"{'run':<36}  {'created (UTC)':<23}  experiments  trials  pending")
        for run in runs:
            print(
                f"{run.id:<36}  {run.created_at[:23]:<23}  {run.experiments:>11}  {run.trials:>6}  "
                f"{run.trials - run.completed:>7}"
            )
    from pytest_opik_eval.store.opik.store import OpikStore

    if isinstance(store, OpikStore):
        # Runs are this plugin's; the server knows experiments, from any machine or tool.
        print(f"\nlatest experiments on {store.settings.url} (resume one with pytest --eval-resume=ID):")
        for experiment in store.server_experiments(limit=20):
            line = (
                f"{experiment['id']:<36}  {str(experiment.get('created_at', ''))[:23]:<23}  "
                f"{experiment.get('dataset_name', '')}  {experiment.get('name', '')}"
            )
            print(escape_control(line))  # the server's text
    return 0


def show(
    store: Store,
    stored: Calibrations,
    args: argparse.Namespace,
    resume: Callable[[str], str],
    named: Path | None,
) -> int:
    if args.run is not None:  # a trial of that run
        return show_trial(store, args, named)
    try:
        run_id, _, results = judged(store, stored, args.id, resume)
    except ExperimentNotFound as error:
        if args.id == "last":
            raise
        return show_trial(store, args, named, error)
    if args.json:
        print(json.dumps([r.report().model_dump(mode="json") for r in results], indent=2))
        return 0
    for result in results:
        for line in summary_lines([report := result.report()], resume, False):
            print(line)
        for line in gate_lines([report]):
            print(f"  {line}")
        print(f"  {'item':<20} {'trial':>5}  {'status':<9} {'verdict':<11}  scores")
        soft = result.settings.soft_trials()
        for trial in result.trials:
            scores = scores_text(trial.scores)
            verdict = trial_verdict(trial.passed, soft=soft) or "-"
            row = f"  {trial.dataset_item_id:<20} {trial.trial:>5}  {trial.status:<9} {verdict:<11}  {scores}"
            print(escape_control(row))  # item ids and score names are data
        traced = next((t for t in result.trials if t.spans or t.usage is not None), None)
        if traced is not None:
            print(escape_control(f"  a trial's span tree: {show_command(traced.node_id, run_id, named)}"))
        print()
    return 0


def diff(store: Store, stored: Calibrations, args: argparse.Namespace, resume: Callable[[str], str]) -> int:
    baseline_id = store.find(args.baseline)[0].id if args.baseline == "last" else args.baseline
    _, _, results = judged(store, stored, args.current, resume, baseline=baseline_id)
    for result in results:
        print(escape_control(f"{result.name} ({result.test}) experiment {result.id}"))
        for line in baseline_lines(result.report()):
            print(escape_control(line))  # item ids and metric names are data
    return 0


def html_report(
    store: Store, stored: Calibrations, args: argparse.Namespace, resume: Callable[[str], str]
) -> int:
    from pytest_opik_eval.reports.html import write_html
    from pytest_opik_eval.reports.html_data import spans_of

    run_id, experiments, results = judged(store, stored, args.id, resume)
    items = {e.id: e.items for e in experiments}
    spans = spans_of(store, results)
    report = Report(run_id=run_id, resumed=None, experiments=[r.report() for r in results])
    write_html(report, items, Path(args.html), resume, spans)
    print(f"wrote {args.html}")
    return 0


def export(store: Store, stored: Calibrations, args: argparse.Namespace, resume: Callable[[str], str]) -> int:
    run_id, _, results = judged(store, stored, args.id, resume)
    report = Report(run_id=run_id, resumed=None, experiments=[r.report() for r in results])
    text = report.model_dump_json(indent=2) + "\n"
    if args.output:
        write_atomically(Path(args.output), text)
    else:
        sys.stdout.write(text)
    return 0
