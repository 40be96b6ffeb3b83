"""The ``opik-eval`` command: list runs, show an experiment or run, export it as JSON, score its
stored outputs again, gate it, plan the items and trials a regression gate needs. Here the
parser and ``main``, which opens the store and hands it to the command: the commands that read
a run are ``views``', those that run pytest ``rescoring``'s, ``gate`` and ``plan`` ``gating``'s,
``merge`` and ``sync`` ``stores``', ``batch`` ``batches``'."""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Callable, Sequence

from pytest_opik_eval import __version__
from pytest_opik_eval.cli.batches import batch
from pytest_opik_eval.cli.gating import gate, plan
from pytest_opik_eval.cli.rescoring import RUN_PYTEST, rescore
from pytest_opik_eval.cli.stores import merge, open_store, store_path, sync
from pytest_opik_eval.cli.views import diff, export, html_report, list_runs, show
from pytest_opik_eval.escaping import escape_control
from pytest_opik_eval.exceptions import ExperimentNotFound, StoreError
from pytest_opik_eval.option_values import (
    METRIC_FORMS,
    confidence,
    cost_limit,
    judge_floor,
    latency_limit,
    metric_bound,
    metric_spec,
    rate,
    seconds,
)
from pytest_opik_eval.options import (
    BACKEND_ENV,
    BACKENDS,
    GATE_MODES,
    STORE_ENV,
    STORE_FILE,
    STORE_FOLDER,
    resume_command,
)
from pytest_opik_eval.store.calibrations import CALIBRATIONS, Calibrations


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    # Only the commands that run pytest take arguments of their own beyond ours: those they hand to it.
    args, pytest_args = parser.parse_known_args(argv)
    if pytest_args and args.command not in RUN_PYTEST:
        parser.error(f"unrecognized arguments: {' '.join(pytest_args)}")
    path = store_path(args.store)
    if args.command == "sync":
        return sync(path, args.timeout)
    if args.command in RUN_PYTEST:
        return rescore(path, args, pytest_args)
    try:
        store = open_store(path, args.backend, create=args.command == "merge")
    except StoreError as error:
        print(escape_control(f"opik-eval: {error}", newlines=True), file=sys.stderr)
        return 2
    # The resume command must find the same store when the user named one.
    named = path.resolve() if args.store else None
    resume = functools.partial(resume_command, store=named)
    stored = Calibrations(path.parent / CALIBRATIONS)  # judges' calibrations the gates read
    commands: dict[str, Callable[[], int]] = {
        "runs": lambda: list_runs(store),
        "show": lambda: show(store, stored, args, resume, named),
        "diff": lambda: diff(store, stored, args, resume),
        "report": lambda: html_report(store, stored, args, resume),
        "merge": lambda: merge(store, args),
        "gate": lambda: gate(store, stored, args, resume, named),
        "export": lambda: export(store, stored, args, resume),
        "plan": lambda: plan(store, args),
        "batch": lambda: batch(store, path, args, resume),
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
        usage="opik-eval rescore [-h] [--metric SPEC]... [--batch] ID [PYTEST ARGS...]",
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
    rescore.add_argument(
        "--batch",
        action="store_true",
        help="send the judges' calls through the providers' batch APIs, at half price (pytest "
        "--eval-batch): the trials wait, pending, until pytest --eval-resume=RUN --eval-batch collects them",
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
    calibrate.set_defaults(metric=[], batch=False)
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
    drift.set_defaults(metric=[], batch=False)
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
    batches = commands.add_parser(
        "batch", help="where a run's provider batches stand (--eval-batch), and collect their results"
    )
    batch_commands = batches.add_subparsers(dest="batch_command", required=True, metavar="COMMAND")
    for name, text in (
        ("status", "each batch's state at the provider, and what to run once they end"),
        ("collect", "the ended batches' results into the recordings, without running a trial"),
        ("cancel", "cancel the batches still running; the next resume submits their requests again"),
    ):
        command = batch_commands.add_parser(name, help=text)
        command.add_argument(
            "id", nargs="?", default="last", help="a run id or name, or 'last' (the default)"
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
