"""A store that cannot be written: a full disk, a file size limit, a read-only store file, a store
in a read-only folder. Each is one line naming the store and the cause; what was recorded before
stays intact, and the reports that can still be written are.

The faults are real, not mocked: a full disk is a 1 MB tmpfs mounted in a private mount namespace
(``unshare``: the test is skipped where user namespaces are not allowed); a file size limit is
``RLIMIT_FSIZE``, set by the task in a pytest subprocess; a read-only store is a file or folder
without write permission, with the inner pytest run as an unprivileged user (when the tests run as
root, which file modes do not stop, in a user namespace that maps the files' owner to another user).
"""

from __future__ import annotations

import functools
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import Project, items

from pytest_opik_eval.store.local import LocalStore

PAD = "x" * 20_000  # a task output big enough that appending it to the journal needs disk space

# Fills the small tmpfs the store is on, once. Never more than 2 MB: run anywhere else by
# mistake, it must not fill a real disk.
FILL_DISK = """
import os

def fill(folder):
    if (HERE / "filled").exists():
        return
    (HERE / "filled").write_text("")
    disk = os.statvfs(folder)
    assert disk.f_blocks * disk.f_frsize <= 2**21, "not the test's small tmpfs"
    with open(folder / "filler", "wb", buffering=0) as file:
        try:
            for _ in range(2**21 // 4096):
                file.write(b"x" * 4096)
        except OSError:
            pass  # full
"""


def _usable(*command: str) -> bool:
    try:
        return subprocess.run(command, capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@functools.cache
def _can_mount_tmpfs(where: str) -> bool:
    return _usable("unshare", "--user", "--map-root-user", "--mount", "mount", "-t", "tmpfs", "tmpfs", where)


@functools.cache
def _unprivileged_prefix() -> list[str] | None:
    """How to run a command as a user that file modes apply to, or None if there is none."""
    if os.geteuid() != 0:
        return []
    prefix = ["unshare", "--user", "--map-user=1000", "--map-group=1000"]
    return prefix if _usable(*prefix, "true") else None


def _pytest(*args: str) -> str:
    return shlex.join([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args])


def test_a_full_disk_stops_the_trials_with_one_line_and_keeps_what_was_recorded(
    project: Project, tmp_path: Path
) -> None:
    if not _can_mount_tmpfs(str(tmp_path)):
        pytest.skip("a tmpfs cannot be mounted in a user namespace here (unshare --user --mount)")
    project.dataset(items("a", "b", "c", "d", "e", "f"))
    # Item c's task fills the disk the store is on; every output needs new space in the journal.
    project.eval_test(
        imports=FILL_DISK,
        behaviour=f"if item['id'] == 'c': fill(HERE / '.opik-eval')\n    return item['input']['text'] + '{PAD}'",
        metrics="[]",
    )
    (project.path / ".opik-eval").mkdir()
    report = project.path / "report.json"
    # The tmpfs lives as long as the namespace: the store is copied out before it goes.
    script = (
        "mount -t tmpfs -o size=1m tmpfs .opik-eval && "
        f"{_pytest('--eval', f'--eval-report={report}')}; status=$?; "
        "rm .opik-eval/filler; cp -a .opik-eval saved; exit $status"
    )
    result = project.pytester.run("unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script)

    output = result.stdout.str() + result.stderr.str()
    assert result.ret == 1, output
    store = project.path / ".opik-eval" / "store.db"
    line = (
        f"cannot write to the eval store {store}: the disk is full; free some space on its disk, or point "
        "--eval-store at another disk (what was recorded before is kept)"
    )
    assert line in output
    assert "Traceback" not in output
    assert "INTERNALERROR" not in output
    assert "sqlite3" not in output
    result.stdout.fnmatch_lines(["*1 failed, 2 passed*"])
    assert project.calls() == ["a#0", "b#0", "c#0"]  # no trial starts after the store failed
    # The report was written (to another disk), with what was recorded before the disk filled.
    experiments: Any = _strict_json(report)["experiments"]
    trials = {t["dataset_item_id"]: t["status"] for t in experiments[0]["trials"]}
    assert trials == {
        "a": "completed",
        "b": "completed",
        "c": "pending",
        "d": "pending",
        "e": "pending",
        "f": "pending",
    }

    # Nothing recorded was lost: with space again, a resume finishes the rest.
    saved = project.path / "saved" / "store.db"
    recorded = project.trials(store_path=saved)
    assert {t.dataset_item_id for t in recorded if t.status == "completed"} == {"a", "b"}
    resumed = project.run("--eval-resume=last", f"--eval-store={saved}")
    assert resumed.ret == 0, resumed.stdout.str()
    assert project.calls() == ["c#0", "d#0", "e#0", "f#0"]


def _strict_json(path: Path) -> dict[str, object]:
    import json

    def refuse(constant: str) -> None:
        raise ValueError(constant)

    data = json.loads(path.read_text(), parse_constant=refuse)
    assert isinstance(data, dict)
    return data


# Sets the file size limit of the pytest process (a subprocess), once.
LIMIT_ONCE = """
import resource

def limit():
    if (HERE / "limited").exists():
        return False
    (HERE / "limited").write_text("")
    resource.setrlimit(resource.RLIMIT_FSIZE, (8_000, resource.RLIM_INFINITY))
    return True
"""


def test_a_file_size_limit_is_one_line_and_the_reports_that_fit_are_written(project: Project) -> None:
    # RLIMIT_FSIZE: writes past it fail with EFBIG, as a full disk fails with ENOSPC (and SQLite
    # says only "disk I/O error").
    project.dataset(items("a", "b", "c", "d"))
    project.eval_test(
        imports=LIMIT_ONCE,
        behaviour=f"if item['id'] == 'c' and limit(): return item['input']['text'] + '{PAD}'",
    )
    html = project.path / "report.html"
    result, report = project.run_report("--eval", f"--eval-html={html}", subprocess=True)

    output = result.stdout.str() + result.stderr.str()
    assert result.ret == 1, output
    store = project.store_path
    result.stdout.fnmatch_lines(
        [
            f"*cannot write to the eval store {store}: a file reached this process's file size limit"
            ": 8000 bytes; raise the limit (ulimit -f), or point --eval-store at a new file (what was recorded "
            "before is kept)*",
            "*1 failed, 2 passed*",
        ]
    )
    assert "Traceback" not in output
    assert "INTERNALERROR" not in output
    assert project.calls() == ["a#0", "b#0", "c#0"]
    # The JSON report fits under the limit; the HTML report does not, and one line says so.
    assert [t["status"] for t in report["experiments"][0]["trials"]] == [
        "completed",
        "completed",
        "pending",
        "pending",
    ]
    result.stdout.fnmatch_lines([f"*could not write the HTML report {html}: File too large*"])
    # The store is intact: a resume without the limit finishes the rest.
    resumed = project.pytester.runpytest_subprocess("--eval-resume=last")
    assert resumed.ret == 0, resumed.stdout.str()
    assert project.calls() == ["c#0", "d#0"]
    assert project.completed() == {("a", 0), ("b", 0), ("c", 0), ("d", 0)}


XDIST = ("-p", "xdist", "-n", "2")


@pytest.mark.parametrize("read_only", ["file", "folder"])
def test_a_read_only_store_is_one_line_and_stays_readable(project: Project, read_only: str) -> None:
    prefix = _unprivileged_prefix()
    if prefix is None:
        pytest.skip("no way to run pytest as a user that file modes apply to (unshare --user)")
    project.dataset(items("a", "b"))
    project.eval_test()
    project.fail("b")
    assert project.run("--eval").ret == 1  # b stays pending
    project.calls()
    project.repair()
    store = project.store_path
    made_read_only = store if read_only == "file" else store.parent
    made_read_only.chmod(0o444 if read_only == "file" else 0o555)
    where = "the file" if read_only == "file" else f"its folder {store.parent}"
    try:
        # A new run cannot start; the message names the store and the cause, not "not a store".
        fresh = project.pytester.run(*prefix, "sh", "-c", _pytest("--eval"))
        fresh_output = fresh.stdout.str() + fresh.stderr.str()
        assert fresh.ret == pytest.ExitCode.USAGE_ERROR, fresh_output
        assert f"the eval store {store}: {where} is read-only (permission denied)" in fresh_output
        assert "make it writable, or point --eval-store at a writable place" in fresh_output
        assert "not a pytest-opik-eval store" not in fresh_output
        assert "Traceback" not in fresh_output

        # A resume stops at its first trial, before the task runs.
        resumed = project.pytester.run(*prefix, "sh", "-c", _pytest("--eval-resume=last"))
        output = resumed.stdout.str() + resumed.stderr.str()
        assert resumed.ret == 1, output
        assert (
            f"cannot write to the eval store {store}: {where} is read-only (permission denied); make it "
            "writable, or point --eval-store at a writable place (what was recorded before is kept)"
        ) in output
        assert "Traceback" not in output
        assert "During handling" not in output
        assert "INTERNALERROR" not in output
        assert project.calls() == []

        # Reading it works as before.
        cli = "import sys; from pytest_opik_eval.cli import main; sys.exit(main())"
        shown = project.pytester.run(*prefix, sys.executable, "-c", cli, "show", "last")
        assert shown.ret == 0, shown.stderr.str()
        shown.stdout.fnmatch_lines(["*a * 0  completed passed*", "*b * 0  pending*"])
        # Under pytest-xdist the controller, which runs no trial itself, checks the store before
        # its workers start: one line, for a new run and for a resume alike.
        for args in (["--eval", *XDIST], ["--eval-resume=last", *XDIST]):
            distributed = project.pytester.run(*prefix, "sh", "-c", _pytest(*args))
            output = distributed.stdout.str() + distributed.stderr.str()
            assert distributed.ret == pytest.ExitCode.USAGE_ERROR, output
            assert f"the eval store {store}: {where} is read-only (permission denied); make it" in output
            assert "Traceback" not in output, output
            assert "INTERNALERROR" not in output, output
            assert project.calls() == []
    finally:
        made_read_only.chmod(0o644 if read_only == "file" else 0o755)

    finished = project.run("--eval-resume=last")
    assert finished.ret == 0, finished.stdout.str()
    assert project.completed() == {("a", 0), ("b", 0)}


def test_under_xdist_a_full_disk_fails_the_trials_with_one_line(project: Project, tmp_path: Path) -> None:
    if not _can_mount_tmpfs(str(tmp_path)):
        pytest.skip("a tmpfs cannot be mounted in a user namespace here (unshare --user --mount)")
    project.dataset(items("a", "b", "c", "d", "e", "f"))
    project.eval_test(
        imports=FILL_DISK,
        behaviour=f"if item['id'] == 'c': fill(HERE / '.opik-eval')\n    return item['input']['text'] + '{PAD}'",
        metrics="[]",
    )
    (project.path / ".opik-eval").mkdir()
    script = (
        "mount -t tmpfs -o size=1m tmpfs .opik-eval && "
        f"{_pytest('--eval', '-p', 'xdist', '-n', '2')}; status=$?; "
        "rm .opik-eval/filler; cp -a .opik-eval saved; exit $status"
    )
    result = project.pytester.run("unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script)

    output = result.stdout.str() + result.stderr.str()
    store = project.path / ".opik-eval" / "store.db"
    assert f"cannot write to the eval store {store}: the disk is full; free some space" in output
    assert "Traceback" not in output
    assert "INTERNALERROR" not in output
    assert "sqlite3" not in output
    # A worker stops at its first failed trial, as with -x, and pytest-xdist then interrupts the
    # session (exit status 2, as its own -x does), saying why in the same line.
    assert result.ret == pytest.ExitCode.INTERRUPTED, output
    result.stdout.fnmatch_lines(
        ["FAILED test_eval.py::test_qa[[]c-t0] - Failed: cannot write to the eval st*"]
    )
    # Nothing recorded was lost: with space again, a resume finishes the rest.
    saved = project.path / "saved" / "store.db"
    completed = {t.dataset_item_id for t in project.trials(store_path=saved) if t.status == "completed"}
    assert "c" not in completed
    project.calls()
    resumed = project.run("--eval-resume=last", f"--eval-store={saved}")
    assert resumed.ret == 0, resumed.stdout.str()
    assert sorted(project.calls()) == sorted(f"{i}#0" for i in "abcdef" if i not in completed)


# Run on each pytest-xdist worker once it has collected: after the controller found the store
# writable, before the worker records the run.
READ_ONLY_ON_WORKERS = """
import pathlib

def pytest_collection_finish(session):
    if hasattr(session.config, "workerinput"):
        (pathlib.Path(str(session.config.rootpath)) / ".opik-eval" / "store.db").chmod(0o444)
"""


def test_under_xdist_a_store_that_turns_read_only_fails_each_workers_first_trial(project: Project) -> None:
    prefix = _unprivileged_prefix()
    if prefix is None:
        pytest.skip("no way to run pytest as a user that file modes apply to (unshare --user)")
    project.dataset(items("a", "b", "c", "d"))
    project.eval_test()
    assert project.run("--eval").ret == 0  # the store exists, writable
    project.calls()
    project.write("conftest.py", READ_ONLY_ON_WORKERS)
    store = project.store_path
    try:
        result = project.pytester.run(*prefix, "sh", "-c", _pytest("--eval", *XDIST))
    finally:
        store.chmod(0o644)
    output = result.stdout.str() + result.stderr.str()
    assert "Traceback" not in output, output
    assert "INTERNALERROR" not in output, output
    assert result.ret == pytest.ExitCode.INTERRUPTED, output  # a worker stopped, as with -x
    line = (
        f"cannot write to the eval store {store}: the file is read-only (permission denied); make it "
        "writable, or point --eval-store at a writable place (what was recorded before is kept)"
    )
    assert result.stdout.lines.count(line) == 2, output  # each worker's first trial failed with it
    result.stdout.fnmatch_lines(["*= 2 failed in *"])
    assert project.calls() == []  # no task ran
    assert project.completed() == {(i, 0) for i in "abcd"}  # the first run is intact


# Another process's write transaction on the store, held until the test closes its stdin.
HOLD_THE_STORE = """
import sqlite3
import sys

db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN IMMEDIATE")
print("held", flush=True)
sys.stdin.read()
"""


def test_a_store_another_process_holds_is_one_line_that_says_so(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    project.dataset(items("a", "b"))
    project.eval_test()
    assert project.run("--eval").ret == 0
    project.calls()
    store = project.store_path
    # The inner run is in this process: it waits half a second for the store, not a minute.
    monkeypatch.setattr(LocalStore, "BUSY_TIMEOUT", 0.5)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_THE_STORE, str(store)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    with holder:
        try:
            assert holder.stdout is not None
            assert holder.stdout.readline() == "held\n"
            result = project.run("--eval")
        finally:
            assert holder.stdin is not None
            holder.stdin.close()  # the holder ends, and lets the store go
            holder.wait()
    output = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, output
    assert (
        f"cannot write to the eval store {store}: another process held it for more than 0.5 s (database "
        "is locked); let that process finish (or close it) and run again, or point --eval-store at "
        "another file (what was recorded before is kept)"
    ) in output
    assert "check the disk" not in output
    assert "Traceback" not in output
    assert project.calls() == []
    # Once it is let go, the store works as before.
    assert project.run("--eval").ret == 0
    assert project.calls() == ["a#0", "b#0"]
