"""The local store end to end: where it is, what it holds and when, and that it keeps every
record through concurrent writers and a killed process."""

from __future__ import annotations

import json
import multiprocessing
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import Project, items

from pytest_opik_eval.cli import main as opik_eval
from pytest_opik_eval.options import STORE_ENV
from pytest_opik_eval.store.local import APPLICATION_ID, LocalStore
from pytest_opik_eval.store.opik.spool import Spool

LABELS = [f"item-{i}" for i in range(5)]


@pytest.fixture(autouse=True)
def _no_store_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # A store chosen in the outer environment must not leak into the projects under test.
    monkeypatch.delenv(STORE_ENV, raising=False)


def run_ids(path: Path) -> list[str]:
    store = LocalStore(path, create=False)
    try:
        return [run.id for run in store.runs()]
    finally:
        store.close()


# -- where the store is ----------------------------------------------------------------------


def test_default_store_is_in_the_rootdir_ignored_by_git_and_kept_by_cache_clear(project: Project) -> None:
    project.dataset(items("a", "b"))
    project.eval_test()

    result, report = project.run_report("--eval")
    result.assert_outcomes(passed=2)
    store = project.path / ".opik-eval" / "store.db"
    result.stdout.fnmatch_lines([f"eval store: {store} (default: under the rootdir)"])
    assert store.is_file()
    gitignore = project.path / ".opik-eval" / ".gitignore"
    assert "*" in gitignore.read_text().splitlines()
    assert run_ids(store) == [report["run_id"]]

    result = project.run("--eval", "--cache-clear")
    result.assert_outcomes(passed=2)
    assert (project.path / ".pytest_cache").is_dir()
    assert report["run_id"] in run_ids(store), "--cache-clear must not drop the recorded runs"
    assert len(run_ids(store)) == 2


def test_default_store_follows_the_rootdir_not_the_working_directory(
    project: Project, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project.dataset(items("a"))
    project.eval_test()
    store = project.path / ".opik-eval" / "store.db"
    # From the folder above the project (whose ini makes it the rootdir), then from a folder in it.
    monkeypatch.chdir(project.path.parent)
    result = project.run("--eval", project.path.name)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [f"eval store: {store} (default: under the rootdir)", f"rootdir: {project.path}"]
    )
    sub = project.path / "sub"
    sub.mkdir()
    monkeypatch.chdir(sub)
    project.run("--eval", "..").assert_outcomes(passed=1)
    assert len(run_ids(store)) == 2
    assert not (project.path.parent / ".opik-eval").exists()
    assert not (sub / ".opik-eval").exists()
    # opik-eval, run from the folder inside, finds the same store.
    capsys.readouterr()
    assert opik_eval(["runs"]) == 0
    listed = capsys.readouterr().out
    assert all(run in listed for run in run_ids(store))


@pytest.mark.parametrize(
    ("given", "expected", "source"),
    [
        # Each case also gives every option of lower precedence, which must lose.
        (("cli", "env", "ini"), "sub/cli.db", "--eval-store"),
        (("env", "ini"), "sub/env.db", f"env {STORE_ENV}"),
        (("ini",), "stores/ini.db", "ini eval_store"),
        ((), ".opik-eval/store.db", "default: under the rootdir"),
    ],
)
def test_store_location_precedence_and_relative_paths(
    project: Project, monkeypatch: pytest.MonkeyPatch, given: tuple[str, ...], expected: str, source: str
) -> None:
    project.dataset(items("a"))
    project.eval_test()
    args = ["--eval", str(project.path)]
    if "ini" in given:
        # Relative to the ini file's folder, not to where pytest is run from.
        project.pytester.makeini("[pytest]\nfilterwarnings = error\neval_store = stores/ini.db\n")
    if "env" in given:
        monkeypatch.setenv(STORE_ENV, "env.db")  # relative to the working directory
    if "cli" in given:
        args.append("--eval-store=cli.db")  # relative to the invocation directory
    sub = project.path / "sub"
    sub.mkdir()
    monkeypatch.chdir(sub)

    result = project.run(*args)
    result.assert_outcomes(passed=1)
    store = project.path / expected
    where = source if source.startswith("default") else f"from {source}"
    result.stdout.fnmatch_lines([f"eval store: {store} ({where})"])
    assert len(run_ids(store)) == 1
    candidates = {
        "sub/cli.db",
        "sub/env.db",
        "stores/ini.db",
        ".opik-eval/store.db",
        "sub/.opik-eval/store.db",
    }
    written = {name for name in candidates if (project.path / name).exists()}
    assert written == {expected}


def test_collect_only_and_runs_without_eval_write_no_store(project: Project) -> None:
    project.dataset(items("a", "b", "c"))
    project.eval_test()

    result = project.run("--co", "--eval", "-q")
    result.stdout.fnmatch_lines(["3 tests collected*"])
    assert not (project.path / ".opik-eval").exists()

    result = project.run()
    result.assert_outcomes(deselected=1)
    assert not (project.path / ".opik-eval").exists()
    assert project.calls() == []


# -- what the store holds, and when -----------------------------------------------------------

# On the task's first call, look into the store from outside: the plan in the SQLite file itself
# (read-only), and the trials as any reader of the store sees them.
PLAN_PROBE = """
import json
import sqlite3

from pytest_opik_eval.store.local import LocalStore


def probe_store():
    seen = HERE / "seen.json"
    if seen.exists():
        return
    uri = (HERE / ".opik-eval" / "store.db").as_uri() + "?mode=ro"
    db = sqlite3.connect(uri, uri=True)
    counts = {
        table: db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        for table in ("runs", "experiments", "trials")
    }
    db.close()
    store = LocalStore(HERE / ".opik-eval" / "store.db", create=False)
    [run] = store.runs()
    [experiment] = store.find(run.id)[1]
    trials = store.trials(experiment.id)
    counts["attempts"] = sum(t.attempts for t in trials)
    counts["pending"] = sum(t.status == "pending" for t in trials)
    store.close()
    seen.write_text(json.dumps(counts))
"""


def test_schema_and_every_planned_trial_is_written_before_the_first_runs(project: Project) -> None:
    project.dataset(items("a", "b", "c"))
    project.eval_test("trial_count=2,", imports=PLAN_PROBE, behaviour="probe_store()")
    project.run("--eval").assert_outcomes(passed=6)

    seen = json.loads((project.path / "seen.json").read_text())
    # The run, its experiment and all 3 x 2 trials exist, all pending; the running trial has
    # been recorded as started.
    assert seen == {"runs": 1, "experiments": 1, "trials": 6, "attempts": 1, "pending": 6}

    db = sqlite3.connect(project.store_path)
    try:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 1
        application_id = db.execute("PRAGMA application_id").fetchone()[0]
        assert application_id != 0
        assert application_id == APPLICATION_ID
    finally:
        db.close()
    assert len(project.trials()) == 6
    assert project.completed() == {(label, trial) for label in "abc" for trial in (0, 1)}


def test_sigkill_after_a_trial_was_recorded_loses_nothing(project: Project) -> None:
    project.dataset(items(*LABELS))
    project.eval_test(
        behaviour="if item['id'] == 'item-2': os.kill(os.getpid(), signal.SIGKILL)",
        imports="import os\nimport signal",
    )
    result = project.pytester.runpytest_subprocess("--eval")
    assert result.ret == -9
    assert project.calls() == ["item-0#0", "item-1#0", "item-2#0"]
    # The killed process's trial writes wait in its journal; as after a power cut, its last line
    # may be torn, and is then ignored.
    journals = project.path / ".opik-eval" / "store.db.journals"
    [left] = journals.glob("*.jsonl")
    with left.open("a") as file:
        file.write('["complete", "01')

    db = sqlite3.connect(project.store_path)
    try:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        db.close()
    trials = project.trials()
    assert [(t.dataset_item_id, t.status, t.attempts) for t in trials] == [
        ("item-0", "completed", 1),
        ("item-1", "completed", 1),
        ("item-2", "pending", 1),
        ("item-3", "pending", 0),
        ("item-4", "pending", 0),
    ]
    assert [t.output for t in trials[:2]] == [{"output": "item-0"}, {"output": "item-1"}]
    assert [t.passed for t in trials] == [True, True, None, None, None]
    # Reading folded the dead writer's journal into the file, and removed it.
    assert list(journals.iterdir()) == []
    db = sqlite3.connect(project.store_path)
    try:
        assert (
            db.execute("SELECT count(*) FROM trials WHERE completed_attempt IS NOT NULL").fetchone()[0] == 2
        )
    finally:
        db.close()


def test_a_store_deleted_after_a_killed_run_starts_afresh(project: Project) -> None:
    project.dataset(items(*LABELS))
    project.eval_test(
        behaviour="if item['id'] == 'item-1' and not (HERE / 'killed').exists():\n"
        "        (HERE / 'killed').touch()\n"
        "        os.kill(os.getpid(), signal.SIGKILL)",
        imports="import os\nimport signal",
    )
    assert project.pytester.runpytest_subprocess("--eval").ret == -9
    # The user deletes the store file, but not the journal the killed run left beside it.
    for path in (project.path / ".opik-eval").glob("store.db*"):
        if path.is_file():
            path.unlink()

    result = project.run("--eval")
    result.assert_outcomes(passed=5)
    result.stdout.fnmatch_lines(["*trials: 5 planned, 5 completed (5 passed, 0 failed), 0 pending"])
    assert [(t.status, t.attempts) for t in project.trials()] == [("completed", 1)] * 5
    assert list((project.path / ".opik-eval" / "store.db.journals").iterdir()) == []


def _open_store(path: str, start: Any, errors: Any) -> None:
    start.wait()
    try:
        LocalStore(Path(path)).close()
    except Exception as error:  # reported to the test, which names it
        errors.put(f"{type(error).__name__}: {error}")


def test_processes_opening_a_new_store_at_once_all_get_it(tmp_path: Path) -> None:
    # As xdist workers do on a project's first run: one creates the schema, all open it.
    context = multiprocessing.get_context("fork")
    errors = context.Queue()
    for round in range(25):
        start = context.Barrier(6)
        processes = [
            context.Process(target=_open_store, args=(str(tmp_path / f"{round}.db"), start, errors))
            for _ in range(6)
        ]
        for process in processes:
            process.start()
        for process in processes:
            process.join(timeout=60)
        assert all(process.exitcode == 0 for process in processes)
    assert errors.empty(), errors.get()


def test_concurrent_pytest_processes_share_one_store(project: Project) -> None:
    labels = [f"q{i}" for i in range(30)]
    project.dataset(items(*labels))
    processes = 4
    for k in range(processes):
        project.eval_test(name=f"test_p{k}")

    running = [
        subprocess.Popen(
            [sys.executable, "-m", "pytest", "--eval", "-q", "-p", "no:cacheprovider", f"test_p{k}.py"],
            cwd=project.path,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for k in range(processes)
    ]
    outputs = [p.communicate(timeout=120)[0] for p in running]
    for p, output in zip(running, outputs, strict=True):
        assert p.returncode == 0, output
        assert "30 passed" in output, output
    # Each process folded its journal of trial writes into the file when it closed the store.
    assert list((project.path / ".opik-eval" / "store.db.journals").iterdir()) == []

    store = LocalStore(project.store_path, create=False)
    try:
        runs = store.runs()
        assert len(runs) == processes
        assert all((r.experiments, r.trials, r.completed) == (1, 30, 30) for r in runs), runs
        tests = set()
        for run in runs:
            _, [experiment] = store.find(run.id)
            tests.add(experiment.test)
            trials = store.trials(experiment.id)
            assert [t.dataset_item_id for t in trials] == labels
            assert all(t.status == "completed" and t.attempts == 1 and t.passed for t in trials)
    finally:
        store.close()
    assert tests == {f"test_p{k}.py::test_qa" for k in range(processes)}
    assert len(project.calls()) == processes * len(labels)
    db = sqlite3.connect(project.store_path)
    try:
        assert db.execute("SELECT count(*) FROM attempts").fetchone()[0] == processes * len(labels)
    finally:
        db.close()


# -- an empty store file (as made by mktemp or touch) ----------------------------------------


def test_an_empty_file_becomes_a_store(project: Project) -> None:
    project.dataset(items("a"))
    project.eval_test()
    empty = project.path / "empty.db"
    empty.touch()
    project.run("--eval", f"--eval-store={empty}").assert_outcomes(passed=1)
    assert len(run_ids(empty)) == 1


def test_resume_last_in_an_empty_store_file_is_a_usage_error(project: Project) -> None:
    project.dataset(items("a"))
    project.eval_test()
    empty = project.path / "empty.db"
    empty.touch()
    result = project.run("--eval-resume=last", f"--eval-store={empty}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: --eval-resume=last: no run in the eval store {empty}*"])


def test_a_damaged_journal_line_is_left_out_and_the_file_kept(project: Project) -> None:
    project.dataset(items(*LABELS))
    project.eval_test(
        behaviour="if item['id'] == 'item-2': os.kill(os.getpid(), signal.SIGKILL)",
        imports="import os\nimport signal",
    )
    assert project.pytester.runpytest_subprocess("--eval").ret == -9
    [left] = (project.path / ".opik-eval" / "store.db.journals").glob("*.jsonl")
    lines = left.read_text().splitlines(keepends=True)
    left.write_text("".join([lines[0], "not an event\n", '["unknown", 1]\n', *lines[1:]]))

    store = LocalStore(project.store_path, create=False)
    try:
        _, [experiment] = store.find("last")
        trials = store.trials(experiment.id)
        [message] = store.notices()
    finally:
        store.close()
    assert "2 line(s) of the eval store's journal" in message
    assert "could not be read" in message
    assert [(t.dataset_item_id, t.status) for t in trials] == [
        ("item-0", "completed"),
        ("item-1", "completed"),
        ("item-2", "pending"),
        ("item-3", "pending"),
        ("item-4", "pending"),
    ]
    # Kept aside for a look, under a name no reader folds again: the next read is quiet.
    assert left.with_name(left.name + ".damaged").read_text().count("not an event") == 1
    assert project.completed() == {("item-0", 0), ("item-1", 0)}


def test_an_sql_error_that_is_not_the_disks_is_not_reported_as_a_store_fault(tmp_path: Path) -> None:
    # "no such table" is a bug (or a damaged schema), not a full disk: it must not be dressed up
    # as "cannot write to the eval store ...; check the disk", which would send a user looking
    # at the wrong thing. (A unit test: the plugin's own SQL has no such bug to trigger.)
    path = tmp_path / "store.db"
    store = Spool(path)
    try:
        store.flush()
        with sqlite3.connect(path) as other:
            other.execute("DROP TABLE outbox")
        with pytest.raises(sqlite3.OperationalError, match="no such table: outbox"):
            store.enqueue([("trace", "{}")])
    finally:
        store.close()
