"""The ``opik-eval`` command: list runs, show an experiment or run, export it as JSON, score its
stored outputs again, gate it, plan the items and trials a regression gate needs."""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_opik_eval import __version__
from pytest_opik_eval.cli.trial_view import scores_text, show_command, show_trial
from pytest_opik_eval.collect.planning import settings_for_gate
from pytest_opik_eval.escaping import escape_control
from pytest_opik_eval.exceptions import ExperimentNotFound, StoreError
from pytest_opik_eval.files import write_atomically
from pytest_opik_eval.ids import now
from pytest_opik_eval.options import (
    BACKEND_ENV,
    BACKENDS,
    GATE_MODES,
    METRIC_FORMS,
    STORE_ENV,
    STORE_FILE,
    STORE_FOLDER,
    confidence,
    cost_limit,
    judge_floor,
    latency_limit,
    metric_bound,
    metric_spec,
    rate,
    resume_command,
    seconds,
)
from pytest_opik_eval.reports.terminal import (
    baseline_lines,
    gate_lines,
    judge_drift_failure,
    judge_drift_line,
    summary_lines,
    trial_verdict,
)
from pytest_opik_eval.settings import GateOptions
from pytest_opik_eval.store import ExperimentRecord, RunRecord, Store
from pytest_opik_eval.store.calibrations import CALIBRATIONS, Calibrations
from pytest_opik_eval.store.local import LocalStore
from pytest_opik_eval.verdict.model import Report
from pytest_opik_eval.verdict.results import ExperimentResult
from pytest_opik_eval.verdict.summary import (
    Baselines,
    calibrations_of,
    judge_experiments,
    keep_calibrations,
    passed,
    rest_of_session,
)

if TYPE_CHECKING:
    from pytest_opik_eval.verdict.design import Design, PlanRow


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    # Only the commands that run pytest take arguments of their own beyond ours: those they hand to it.
    args, pytest_args = parser.parse_known_args(argv)
    if pytest_args and args.command not in _RUN_PYTEST:
        parser.error(f"unrecognized arguments: {' '.join(pytest_args)}")
    store_path = _store_path(args.store)
    if args.command == "sync":
        return _sync(store_path, args.timeout)
    if args.command in _RUN_PYTEST:
        return _rescore(store_path, args, pytest_args)
    try:
        store = _open(store_path, args.backend, create=args.command == "merge")
    except StoreError as error:
        print(escape_control(f"opik-eval: {error}", newlines=True), file=sys.stderr)
        return 2
    # The resume command must find the same store when the user named one.
    named = store_path.resolve() if args.store else None
    resume = functools.partial(resume_command, store=named)
    stored = Calibrations(store_path.parent / CALIBRATIONS)  # judges' calibrations the gates read
    commands: dict[str, Callable[[], int]] = {
        "runs": lambda: _runs(store),
        "show": lambda: _show(store, stored, args, resume, named),
        "diff": lambda: _diff(store, stored, args, resume),
        "report": lambda: _html(store, stored, args, resume),
        "merge": lambda: _merge(store, args),
        "gate": lambda: _gate(store, stored, args, resume, named),
        "export": lambda: _export(store, stored, args, resume),
        "plan": lambda: _plan(store, args),
    }
    try:
        return commands[args.command]()
    except (ExperimentNotFound, StoreError) as error:
        print(escape_control(f"opik-eval: {error}", newlines=True), file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader went away (opik-eval show ID | head): stop quietly, as Unix tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    finally:
        for message in store.notices():
            print(escape_control(f"opik-eval: {message}", newlines=True), file=sys.stderr)
        store.close()


_RUN_PYTEST = ("rescore", "calibrate", "judge-drift")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="opik-eval", description="Inspect the runs and experiments recorded by pytest --eval."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument(
        "--store",
        metavar="PATH",
        help=f"the store file (default: env {STORE_ENV}, else {STORE_FOLDER}/{STORE_FILE} in this "
        "folder or the nearest parent that has one)",
    )
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        default=os.environ.get(BACKEND_ENV) or "local",
        help=f"read experiments from the local store, or from the Opik server too (env {BACKEND_ENV})",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser("runs", help="list the runs, newest first")
    show = commands.add_parser(
        "show", help="show an experiment or a run (its trials and scores), or a trial (its span tree)"
    )
    show.add_argument("id", help="an experiment id, a run id, 'last', or a trial's id, trace id or node id")
    show.add_argument(
        "--run",
        metavar="ID",
        help="the trial of a node id in this run (a run id or name, an experiment id, or 'last'); "
        "by default the newest run's",
    )
    show.add_argument(
        "--json",
        action="store_true",
        help="print the report's experiment objects, or the trial and its spans, as JSON",
    )
    export = commands.add_parser("export", help="export an experiment or a run as a JSON report")
    export.add_argument("id", help="an experiment id, a run id, or 'last'")
    export.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    diff = commands.add_parser("diff", help="compare B with its baseline A: metric means, regressions, fixes")
    diff.add_argument("baseline", metavar="A", help="the baseline: an experiment id, a run id, or 'last'")
    diff.add_argument("current", metavar="B", help="the experiment or run to compare with A")
    report = commands.add_parser("report", help="write the HTML report of an experiment or a run")
    report.add_argument("id", help="an experiment id, a run id, or 'last'")
    report.add_argument("--html", metavar="PATH", required=True, help="the HTML file to write")
    sync = commands.add_parser("sync", help="send to the Opik server what an earlier session could not")
    sync.add_argument(
        "--timeout",
        metavar="SECONDS",
        type=seconds,
        default=300.0,
        help="give up after this long; what is left waits for the next sync (default: 300)",
    )
    rescore = commands.add_parser(
        "rescore",
        help="score the stored outputs of an experiment or run again, without calling the task: "
        "runs pytest --eval-rescore=ID on the run's tests; the other arguments go to pytest",
        usage="opik-eval rescore [-h] [--metric SPEC]... ID [PYTEST ARGS...]",
        # A pytest option must not pass for an abbreviation of ours.
        allow_abbrev=False,
    )
    rescore.add_argument("id", help="an experiment id, a run id or name, or 'last'")
    rescore.add_argument(
        "--metric",
        metavar="SPEC",
        action="append",
        type=metric_spec,
        default=[],
        help=f"score with this metric instead of the marker's (repeatable): {METRIC_FORMS}",
    )
    calibrate = commands.add_parser(
        "calibrate",
        help="judge the stored outputs of the labelled items of an experiment or run again with "
        "today's judges, against the human labels, and keep that as their calibration: runs pytest "
        "--eval-rescore=ID --eval-calibrate --eval-soft --eval-max-judge-drift=1 on the run's tests, which "
        "accepts today's verdicts as the judges' calibrations; the other arguments go to pytest",
        usage="opik-eval calibrate [-h] ID [PYTEST ARGS...]",
        allow_abbrev=False,
    )
    calibrate.add_argument("id", help="an experiment id, a run id or name, or 'last'")
    calibrate.set_defaults(metric=[])
    drift = commands.add_parser(
        "judge-drift",
        help="judge the stored outputs of the labelled items of an experiment or run again with "
        "today's judges, and compare their verdicts with each judge's stored calibration: exit 1 "
        "when they changed on more than --max-drift of the items; runs pytest --eval-rescore=ID "
        "--eval-calibrate --eval-soft on the run's tests; the other arguments go to pytest",
        usage="opik-eval judge-drift [-h] [--max-drift SHARE] [--since RUN] ID [PYTEST ARGS...]",
        allow_abbrev=False,
    )
    drift.add_argument("id", help="an experiment id, a run id or name, or 'last'")
    drift.add_argument(
        "--max-drift",
        metavar="SHARE",
        type=rate,
        help="the share of a calibration's labelled items (0 to 1) whose verdicts may change, such "
        "as 0.1 (pytest --eval-max-judge-drift; default: ini eval_max_judge_drift, else report the "
        "drift and never fail on it)",
    )
    drift.add_argument(
        "--since",
        metavar="RUN",
        help="compare with the calibration run RUN (id or name) kept, not the newest (pytest "
        "--eval-judge-drift-since; default: ini eval_judge_drift_since)",
    )
    drift.set_defaults(metric=[])
    merge = commands.add_parser(
        "merge",
        help="copy the runs of other stores (CI shards), and the recordings beside them, into this one",
    )
    merge.add_argument("sources", nargs="+", metavar="STORE", help="the store files to merge in")
    gate = commands.add_parser(
        "gate", help="gate an experiment or run (all its shards) as pytest would: exit 1 when it fails"
    )
    gate.add_argument("id", help="an experiment id, a run id or name, or 'last'")
    gate.add_argument(
        "--eval-fail-under", metavar="METRIC=MIN", action="append", type=metric_bound, default=[]
    )
    gate.add_argument("--eval-min-pass-rate", metavar="RATE", type=rate)
    gate.add_argument("--eval-soft", action="store_true", default=None)
    gate.add_argument("--eval-baseline", metavar="ID")
    gate.add_argument(
        "--eval-max-regression", metavar="METRIC=DELTA", action="append", type=metric_bound, default=[]
    )
    gate.add_argument(
        "--eval-max-cost", metavar="USD[/item|/run]", action="append", type=cost_limit, default=[]
    )
    gate.add_argument("--eval-max-latency", metavar="SECONDS[@pNN]", type=latency_limit)
    gate.add_argument(
        "--eval-judge-floor", metavar="FIGURE=MIN", action="append", type=judge_floor, default=[]
    )
    gate.add_argument("--eval-gate-mode", choices=GATE_MODES)
    gate.add_argument("--eval-confidence", metavar="LEVEL", type=confidence)
    gate.add_argument(
        "--eval-max-judge-drift",
        metavar="SHARE",
        type=rate,
        help="fail when a judge's verdicts on the labelled items of the run (all its shards) changed "
        "on more than SHARE (0 to 1) of those of its stored calibration; that calibration is kept",
    )
    gate.add_argument(
        "--eval-judge-drift-since",
        metavar="RUN",
        help="measure the drift against the calibration run RUN (id or name) kept, not the newest",
    )
    plan = commands.add_parser(
        "plan",
        help="how many items and trials a regression gate needs, from the scores of a stored run",
        description="From each experiment of a stored run taken as the baseline (its mean, and how "
        "its items' trials vary), how many items a regression gate needs to catch a drop with 80%% "
        "power (normal mode), or to show no drop beyond DELTA when nothing changed (strict mode), "
        "at 1, 3 and 5 trials per item (or --trials), and the drop it catches at the run's size.",
    )
    plan.add_argument("id", help="an experiment id, a run id or name, or 'last'")
    plan.add_argument("--drop", type=_drop, help="the drop to catch (default: twice DELTA)")
    plan.add_argument(
        "--delta", type=rate, help="the drop tolerated, DELTA (default: the gate's stored with it, else 0.05)"
    )
    plan.add_argument("--metric", action="append", default=[], help="only this score (repeatable)")
    plan.add_argument("--trials", type=_counts, default=(1, 3, 5), help="trials per item, such as 1,3,5")
    plan.add_argument("--confidence", type=confidence, help="the gates' level (default: the run's)")
    plan.add_argument(
        "--gates",
        type=_count,
        default=1,
        help="the session's normal-mode regression gates, adjusted together (Holm: the first at level / N)",
    )
    return parser


def _drop(value: str) -> float:
    drop = rate(value)
    if drop <= 0.0:
        raise argparse.ArgumentTypeError(f"expected a drop above 0, such as 0.1; got {value!r}")
    return drop


def _count(value: str) -> int:
    if not value.strip().isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number from 1, such as 5; got {value!r}")
    return int(value)


def _counts(value: str) -> tuple[int, ...]:
    try:
        return tuple(_count(part) for part in value.split(","))
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"expected whole numbers from 1 separated by commas, such as 1,3,5; got {value!r}"
        ) from None


def _open(store_path: Path, backend: str, *, create: bool) -> Store:
    if backend == "opik":
        from pytest_opik_eval.store.opik.config import read_settings
        from pytest_opik_eval.store.opik.store import OpikStore

        return OpikStore(read_settings(), store_path)
    return LocalStore(store_path, create=create, option="--store")


def _sync(store_path: Path, timeout: float) -> int:
    from pytest_opik_eval.store.opik.client import OpikClient, OpikUnavailable
    from pytest_opik_eval.store.opik.config import read_settings, sync_command
    from pytest_opik_eval.store.opik.sender import drain
    from pytest_opik_eval.store.opik.spool import Spool, unsent_line

    try:
        spool = Spool(store_path, create=False, option="--store")
    except StoreError as error:
        print(escape_control(f"opik-eval: {error}", newlines=True), file=sys.stderr)
        return 2
    client = OpikClient(read_settings())
    failures: list[OpikUnavailable] = []
    deadline = time.monotonic() + timeout
    client.finish_by(deadline)  # no request outlives the timeout
    try:
        drain(spool, client, until=deadline, on_down=failures.append)
        left = unsent_line(spool, sync_command(store_path))
    except StoreError as error:
        # The spool cannot be written (marking a batch sent): what was sent but not marked is
        # sent again by the next sync, which is harmless (every write carries its id).
        print(escape_control(f"opik-eval: {error}", newlines=True), file=sys.stderr)
        return 2
    finally:
        client.close()
        spool.close()
    for failure in failures:
        print(f"opik-eval: {escape_control(str(failure))}", file=sys.stderr)
    print(escape_control(left) if left else f"everything in {store_path} has reached the Opik server")
    return 1 if left else 0


def _rescore(store_path: Path, args: argparse.Namespace, pytest_args: list[str]) -> int:
    """pytest, in this process, rescoring ``args.id`` on the tests of its experiments (calibrating
    and checking drift: only their labelled items); pytest says what is wrong with an id it
    cannot find, as for ``--eval-rescore`` (exit code 4)."""
    import pytest

    target, tests = args.id, []
    try:
        store = _open(store_path, args.backend, create=False)
    except StoreError:
        pass  # pytest opens it again, and says why it cannot
    else:
        try:
            run, experiments = store.find(args.id)
        except (ExperimentNotFound, StoreError):
            pass
        else:
            # "last" named now: a run that starts meanwhile is not the one rescored.
            target = run.id if args.id == "last" else args.id
            tests = _tests_of(run, experiments)
        finally:
            store.close()
    command = [
        f"--eval-rescore={target}",
        *(["--eval-calibrate"] if args.command in ("calibrate", "judge-drift") else []),
        *_drift_options(args),
        f"--eval-store={store_path.resolve()}",
        f"--eval-backend={args.backend}",
        *(f"--eval-metric={spec}" for spec in args.metric),
        *tests,
        *pytest_args,
    ]
    return int(pytest.main(command))


def _drift_options(args: argparse.Namespace) -> list[str]:
    """calibrate and judge-drift: the judge's misses do not fail the session (on an item labelled
    fail, a miss is the judge right); judge-drift's bound, if given; calibrate accepts today's
    verdicts as the judge's calibration, however far they drifted (an ini bound aside)."""
    if args.command == "calibrate":
        return ["--eval-soft", "--eval-max-judge-drift=1"]
    if args.command != "judge-drift":
        return []
    bound = [] if args.max_drift is None else [f"--eval-max-judge-drift={args.max_drift:g}"]
    since = [] if args.since is None else [f"--eval-judge-drift-since={args.since}"]
    return ["--eval-soft", *bound, *since]


def _tests_of(run: RunRecord, experiments: Sequence[ExperimentRecord]) -> list[str]:
    """The node ids of the experiments' test functions, to collect only them: relative to the
    run's rootdir, from where they are given as is, and absolute from anywhere else. None for
    an experiment started outside pytest: its test is found at collection, by its dataset."""
    if any(not e.test for e in experiments):
        return []
    tests = list(dict.fromkeys(e.test for e in experiments))
    root = Path(run.rootdir) if run.rootdir else None
    if root is None or root.resolve() == Path.cwd().resolve():
        return tests
    return [str(root / test) for test in tests]


def _store_path(given: str | None) -> Path:
    if given:
        return Path(given)
    if os.environ.get(STORE_ENV):
        return Path(os.environ[STORE_ENV])
    cwd = Path.cwd()
    for folder in (cwd, *cwd.parents):
        candidate = folder / STORE_FOLDER / STORE_FILE
        if candidate.exists():
            return candidate
    return cwd / STORE_FOLDER / STORE_FILE


def _results(
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


def _runs(store: Store) -> int:
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


def _show(
    store: Store,
    stored: Calibrations,
    args: argparse.Namespace,
    resume: Callable[[str], str],
    named: Path | None,
) -> int:
    if args.run is not None:  # a trial of that run
        return show_trial(store, args, named)
    try:
        run_id, _, results = _results(store, stored, args.id, resume)
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


def _diff(store: Store, stored: Calibrations, args: argparse.Namespace, resume: Callable[[str], str]) -> int:
    baseline_id = store.find(args.baseline)[0].id if args.baseline == "last" else args.baseline
    _, _, results = _results(store, stored, args.current, resume, baseline=baseline_id)
    for result in results:
        print(escape_control(f"{result.name} ({result.test}) experiment {result.id}"))
        for line in baseline_lines(result.report()):
            print(escape_control(line))  # item ids and metric names are data
    return 0


def _html(store: Store, stored: Calibrations, args: argparse.Namespace, resume: Callable[[str], str]) -> int:
    from pytest_opik_eval.reports.html import write_html
    from pytest_opik_eval.reports.html_data import spans_of

    run_id, experiments, results = _results(store, stored, args.id, resume)
    items = {e.id: e.items for e in experiments}
    spans = spans_of(store, results)
    report = Report(run_id=run_id, resumed=None, experiments=[r.report() for r in results])
    write_html(report, items, Path(args.html), resume, spans)
    print(f"wrote {args.html}")
    return 0


def _merge(store: Store, args: argparse.Namespace) -> int:
    if not isinstance(store, LocalStore):
        print("opik-eval: merge combines local stores; with the Opik backend the shards share the server")
        return 2
    for source in args.sources:
        runs = store.merge_from(Path(source))
        print(f"merged {runs} run(s) from {source} into {store.location}")
        _merge_recordings(store.path.parent, Path(source).parent)
    return 0


def _merge_recordings(target_folder: Path, source_folder: Path) -> None:
    """The recordings of the app's calls (--eval-record) beside a shard's store, added to those
    beside this store: the shards of one run recorded its trials between them."""
    from pytest_opik_eval.store.http_recordings import merge, recordings_folder

    source, target = recordings_folder(source_folder), recordings_folder(target_folder)
    if not source.is_dir() or source.resolve() == target.resolve():
        return
    try:
        added = merge(target, [source])
    except (OSError, ValueError) as error:  # a file that cannot be read, written or parsed
        raise StoreError(f"could not merge the recordings of {source} into {target}: {error}") from None
    print(f"merged {added} recorded call(s) from {source} into {target}")


def _gate(
    store: Store,
    stored: Calibrations,
    args: argparse.Namespace,
    resume: Callable[[str], str],
    store_path: Path | None,
) -> int:
    """The combined verdict of a run's shards: the summary, one line per gate, the exit code."""
    given = GateOptions(
        fail_under=dict(args.eval_fail_under),
        min_pass_rate=args.eval_min_pass_rate,
        max_regression=dict(args.eval_max_regression),
        soft=args.eval_soft,
        mode=args.eval_gate_mode,
        confidence=args.eval_confidence,
        max_cost=dict(args.eval_max_cost),
        max_latency=args.eval_max_latency,
        judge_floor=dict(args.eval_judge_floor),
    )
    run, experiments = store.find(args.id)
    since = None if args.eval_judge_drift_since is None else store.find(args.eval_judge_drift_since)[0].id
    results = judge_experiments(
        store,
        experiments,
        None,
        lambda e: settings_for_gate(e.gates, given),
        Baselines(store, args.eval_baseline),
        resume,
        family=rest_of_session(store, args.id, run, experiments),
        stored=stored,
        now=now(),
    )
    reports = [r.report() for r in results]
    # The fan-in of CI shards keeps the judges' calibrations that no shard could (each had a part).
    kept = calibrations_of(results)
    drift = keep_calibrations(kept, stored, args.eval_max_judge_drift, since)
    for line in summary_lines(reports, resume, False) + gate_lines(reports):
        print(line)
    for found in drift:
        print(judge_drift_line(found))
        if found.failed:
            print(judge_drift_failure(found, run.id, store_path))
    if args.eval_max_judge_drift is not None and not kept:
        print(
            f"--eval-max-judge-drift={args.eval_max_judge_drift:g}: no judge's calibration to check: "
            "no experiment judged every one of its items with human labels"
        )
    failed = [r.name for r in results if not passed(r) or r.summary.pending]
    failed += [f"judge drift of {d.score}" for d in drift if d.failed]
    print(escape_control(f"eval gate: {'FAILED: ' + ', '.join(failed) if failed else 'passed'}"))
    return 1 if failed else 0


def _plan(store: Store, args: argparse.Namespace) -> int:
    """Per experiment and score: the design the stored run implies, and what it needs."""
    from pytest_opik_eval.verdict.design import design_of, plan
    from pytest_opik_eval.verdict.results import baseline_run

    _, experiments = store.find(args.id)
    for experiment in experiments:
        result = baseline_run(experiment, store.trials(experiment.id), experiment.gates)
        size = f"{len(result.verdicts)} items x {experiment.selection.trial_count} trial(s)"
        print(escape_control(f"{experiment.name} ({experiment.test}) experiment {experiment.id}: {size}"))
        level = args.confidence or experiment.gates.confidence
        for metric in args.metric or list(result.values):
            by_item = result.values.get(metric)
            if not by_item:
                print(escape_control(f"  {metric}: no completed trial has this score"))
                continue
            design = design_of(by_item.values())
            delta = (
                args.delta if args.delta is not None else experiment.gates.max_regression.get(metric, 0.05)
            )
            drop = args.drop or 2 * delta
            if drop <= delta:
                print(
                    escape_control(
                        f"  {metric}: a drop of {drop:g} is within DELTA {delta:g}: nothing to catch"
                    )
                )
                continue
            rows = plan(design, drop, delta, (1.0 - level) / args.gates, args.trials)
            for line in _plan_lines(metric, design, rows, drop, delta, level, args.gates):
                print(escape_control(line))
    return 0


def _plan_lines(
    metric: str, design: Design, rows: Sequence[PlanRow], drop: float, delta: float, level: float, gates: int
) -> list[str]:
    if design.binary:
        spread = (
            f"intra-item correlation {design.icc:.2f}"
            if design.icc is not None
            else "one trial per item: intra-item correlation unknown, each figure at the least "
            "favourable one (0 to 1)"
        )
        kind = f"pass/fail, mean {design.mean:.3f}, {spread}"
    else:
        kind = f"mean {design.mean:.3f}, within-item sd {math.sqrt(design.within):.3f}"
    adjusted = f", adjusted for {gates} gates" if gates > 1 else ""
    catch = f"catch {drop:g}"
    clear = f"show none > {delta:g}"
    lines = [
        f"  {metric}: {kind}",
        f"    80% chance, one-sided {level * 100:g}%{adjusted}; items needed to:",
        f"    {'trials':>6}  {catch:>14}  {clear:>16}  drop caught at {design.items} items",
    ]
    for row in rows:
        caught = "none" if row.caught_at_size is None else f"{row.caught_at_size:.3f}"
        lines.append(
            f"    {row.trials:>6}  {_needed(row.to_catch):>14}  {_needed(row.to_clear):>16}  {caught}"
        )
    return lines


def _needed(items: int | None) -> str:
    return "over 100,000" if items is None else f"{items:,}"


def _export(
    store: Store, stored: Calibrations, args: argparse.Namespace, resume: Callable[[str], str]
) -> int:
    run_id, _, results = _results(store, stored, args.id, resume)
    report = Report(run_id=run_id, resumed=None, experiments=[r.report() for r in results])
    text = report.model_dump_json(indent=2) + "\n"
    if args.output:
        write_atomically(Path(args.output), text)
    else:
        sys.stdout.write(text)
    return 0
