"""The commands that run pytest, in this process, on the tests of a stored run: ``rescore``,
``calibrate`` and ``judge-drift`` (each ``--eval-rescore=ID``, the last two on the labelled items
only); the arguments that are not ours go to pytest."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from pytest_opik_eval.cli.stores import open_store
from pytest_opik_eval.exceptions import ExperimentNotFound, StoreError
from pytest_opik_eval.store import ExperimentRecord, RunRecord

# The commands, which take pytest's arguments beside theirs.
RUN_PYTEST = ("rescore", "calibrate", "judge-drift")


def rescore(store_path: Path, args: argparse.Namespace, pytest_args: list[str]) -> int:
    """pytest, in this process, rescoring ``args.id`` on the tests of its experiments (calibrating
    and checking drift: only their labelled items); pytest says what is wrong with an id it
    cannot find, as for ``--eval-rescore`` (exit code 4)."""
    import pytest

    target, tests = args.id, []
    try:
        store = open_store(store_path, args.backend, create=False)
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
        *(["--eval-batch=on"] if args.batch else []),
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
