"""The opik-eval command, as a user runs it on the store that pytest --eval wrote."""

from __future__ import annotations

import html
import json
import os
import re
import shlex
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import Project, items, offline_opik

from pytest_opik_eval.cli import main
from pytest_opik_eval.options import STORE_ENV
from pytest_opik_eval.store.local import LocalStore

UNKNOWN = "0190c1a0-0000-7000-8000-000000000000"


@pytest.fixture(autouse=True)
def _no_store_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(STORE_ENV, raising=False)


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()  # drop what the pytester runs printed
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def without_session_flags(experiments: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The report's experiments without ran_this_session, which only a pytest session knows."""
    return [
        {**e, "trials": [{k: v for k, v in t.items() if k != "ran_this_session"} for t in e["trials"]]}
        for e in experiments
    ]


def last_experiment_id(path: Path) -> str:
    store = LocalStore(path, create=False)
    try:
        _, [experiment] = store.find("last")
        return experiment.id
    finally:
        store.close()


def recorded_run(project: Project) -> dict[str, Any]:
    """One run of two eval tests (two experiments) over a, b, c: a passes, b scores 0 and fails,
    c's task raises and stays pending. Returns the run's JSON report."""
    project.dataset(items("a", "b", "c"))
    project.eval_test(behaviour="if item['id'] == 'b': return 'wrong'")
    project.eval_test(name="test_other")
    project.fail("c")
    result, report = project.run_report("--eval")
    result.assert_outcomes(passed=3, failed=3)
    assert len(report["experiments"]) == 2
    return report


# -- runs ------------------------------------------------------------------------------------


def test_runs_lists_runs_newest_first_with_counts(
    project: Project, capsys: pytest.CaptureFixture[str]
) -> None:
    project.dataset(items("a", "b", "c"))
    project.eval_test()
    _, first = project.run_report("--eval")
    project.fail("b", "c")
    _, second = project.run_report("--eval")

    code, out, err = cli(capsys, "runs")
    assert (code, err) == (0, "")
    header, *rows = out.splitlines()
    assert header.split() == ["run", "created", "(UTC)", "experiments", "trials", "pending"]
    assert [row.split()[0] for row in rows] == [second["run_id"], first["run_id"]]
    # experiments, trials, pending
    assert [row.split()[2:] for row in rows] == [["1", "3", "2"], ["1", "3", "0"]]


@pytest.mark.parametrize("store", [None, "missing.db"], ids=["default", "--store"])
def test_runs_without_a_store_says_how_to_record_one(
    project: Project, capsys: pytest.CaptureFixture[str], store: str | None
) -> None:
    args = ["runs"] if store is None else ["--store", store, "runs"]
    code, out, err = cli(capsys, *args)
    assert (code, err) == (0, "")
    where = project.store_path if store is None else store
    assert out == f"no runs in {where}; record one with: pytest --eval\n"
    assert not (project.path / ".opik-eval").exists(), "listing runs must not create a store"
    assert not (project.path / "missing.db").exists(), "listing runs must not create a store"


# -- show ------------------------------------------------------------------------------------


def test_show_experiment_prints_its_trials_and_scores(
    project: Project, capsys: pytest.CaptureFixture[str]
) -> None:
    report = recorded_run(project)
    experiment, other = report["experiments"]

    code, out, err = cli(capsys, "show", experiment["id"])
    assert (code, err) == (0, "")
    lines = [line.split() for line in out.splitlines()]
    assert out.splitlines()[:3] == [
        "test_qa (test_eval.py::test_qa)",
        f"  experiment {experiment['id']}  run {report['run_id']}",
        "  trials: 3 planned, 2 completed (1 passed, 1 failed), 1 pending",
    ]
    assert ["item", "trial", "status", "verdict", "scores"] in lines
    assert ["a", "0", "completed", "passed", "equals_metric=1"] in lines
    assert ["b", "0", "completed", "failed", "equals_metric=0"] in lines
    assert ["c", "0", "pending", "-"] in lines
    assert f"resume the 1 pending: pytest --eval-resume={experiment['id']}" in out
    assert other["id"] not in out


def test_show_run_and_last_print_every_experiment(
    project: Project, capsys: pytest.CaptureFixture[str]
) -> None:
    report = recorded_run(project)
    code, by_id, _ = cli(capsys, "show", report["run_id"])
    assert code == 0
    for experiment in report["experiments"]:
        assert f"  experiment {experiment['id']}  run {report['run_id']}" in by_id
    assert "test_qa (test_eval.py::test_qa)" in by_id
    assert "test_qa (test_other.py::test_qa)" in by_id
    assert by_id.count("  item ") == 2, "one table per experiment"

    code, last, _ = cli(capsys, "show", "last")
    assert code == 0
    assert last == by_id


@pytest.mark.parametrize("which", ["run", "experiment"])
def test_show_json_has_the_reports_experiment_objects(
    project: Project, capsys: pytest.CaptureFixture[str], which: str
) -> None:
    report = recorded_run(project)
    target = report["run_id"] if which == "run" else report["experiments"][1]["id"]
    expected = report["experiments"] if which == "run" else report["experiments"][1:]

    code, out, _ = cli(capsys, "show", "--json", target)
    assert code == 0
    shown = json.loads(out)
    assert isinstance(shown, list)
    assert [set(e) for e in shown] == [set(e) for e in expected]
    assert [set(t) for e in shown for t in e["trials"]] == [set(t) for e in expected for t in e["trials"]]
    assert without_session_flags(shown) == without_session_flags(expected)


# -- export ----------------------------------------------------------------------------------


def test_export_prints_and_writes_a_json_report(project: Project, capsys: pytest.CaptureFixture[str]) -> None:
    report = recorded_run(project)

    code, out, err = cli(capsys, "export", report["run_id"])
    assert (code, err) == (0, "")
    exported = json.loads(out)
    assert exported["schema_version"] == 7
    assert exported["run_id"] == report["run_id"]
    assert set(exported) == set(report)
    assert without_session_flags(exported["experiments"]) == without_session_flags(report["experiments"])

    target = project.path / "exported.json"
    code, out, err = cli(capsys, "export", "last", "-o", str(target))
    assert (code, out, err) == (0, "", "")
    assert json.loads(target.read_text()) == exported

    experiment = report["experiments"][0]
    code, out, _ = cli(capsys, "export", experiment["id"])
    assert code == 0
    assert [e["id"] for e in json.loads(out)["experiments"]] == [experiment["id"]]


def test_export_creates_the_output_folder(project: Project, capsys: pytest.CaptureFixture[str]) -> None:
    report = recorded_run(project)
    target = project.path / "reports" / "eval.json"
    code, _, _ = cli(capsys, "export", "last", "-o", str(target))
    assert code == 0
    assert json.loads(target.read_text())["run_id"] == report["run_id"]


# -- which store, and errors -------------------------------------------------------------------


@pytest.mark.parametrize("command", [["show"], ["show", "--json"], ["export"]])
def test_unknown_id_names_the_store_and_how_to_list_runs(
    project: Project, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    recorded_run(project)
    code, out, err = cli(capsys, *command, UNKNOWN)
    assert code == 2
    assert out == ""
    # show finds trials too
    what = "no run, experiment or trial" if command[0] == "show" else "no experiment or run"
    assert err == (
        f"opik-eval: {what} with id '{UNKNOWN}' in the eval store {project.store_path}; "
        f"list the runs and experiments with: opik-eval runs --store {project.store_path}\n"
    )


def test_show_last_without_a_store(project: Project, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "show", "last")
    assert code == 2
    assert out == ""
    assert err.startswith(f"opik-eval: no run in the eval store {project.store_path}; ")
    assert "opik-eval runs" in err
    assert not project.store_path.exists()


def test_store_option_env_and_discovery_select_the_store(
    project: Project, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    project.dataset(items("a"))
    project.eval_test()
    _, default_run = project.run_report("--eval")
    _, other_run = project.run_report("--eval", "--eval-store=other.db")
    other = project.path / "other.db"

    def listed(*args: str) -> list[str]:
        code, out, _ = cli(capsys, *args, "runs")
        assert code == 0
        return [line.split()[0] for line in out.splitlines()[1:]]

    assert listed() == [default_run["run_id"]]
    assert listed("--store", "other.db") == [other_run["run_id"]]
    monkeypatch.setenv(STORE_ENV, str(other))
    assert listed() == [other_run["run_id"]]
    assert listed("--store", str(project.store_path)) == [default_run["run_id"]], "--store beats the env var"
    monkeypatch.delenv(STORE_ENV)

    # Without either, the store of this folder or the nearest parent that has one.
    deeper = project.path / "src" / "pkg"
    deeper.mkdir(parents=True)
    monkeypatch.chdir(deeper)
    assert listed() == [default_run["run_id"]]
    code, out, _ = cli(capsys, "show", "last")
    assert code == 0
    assert default_run["experiments"][0]["id"] in out


@pytest.mark.parametrize("command", [["runs"], ["show", "last"], ["export", "last"]])
def test_a_file_that_is_not_a_store_is_a_clear_error(
    project: Project, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    notes = project.path / "notes.txt"
    notes.write_text("my notes\n")
    code, out, err = cli(capsys, "--store", str(notes), *command)
    assert code == 2
    assert out == ""
    assert err.startswith(f"opik-eval: {notes} is not a pytest-opik-eval store")
    assert "Traceback" not in err
    assert notes.read_text() == "my notes\n"


def test_a_foreign_sqlite_database_is_a_clear_error_and_left_untouched(
    project: Project, capsys: pytest.CaptureFixture[str]
) -> None:
    app_db = project.path / "app.db"
    db = sqlite3.connect(app_db)
    db.execute("CREATE TABLE users (name TEXT)")
    db.commit()
    db.close()

    code, out, err = cli(capsys, "--store", str(app_db), "runs")
    assert code == 2
    assert out == ""
    assert err.startswith(f"opik-eval: {app_db} is an SQLite database but not a pytest-opik-eval store")
    db = sqlite3.connect(app_db)
    try:
        assert db.execute("SELECT name FROM sqlite_master").fetchall() == [("users",)]
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    finally:
        db.close()


def test_an_empty_store_file_has_no_runs_and_is_not_written(
    project: Project, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = project.path / "empty.db"
    empty.touch()
    code, out, _ = cli(capsys, "--store", str(empty), "runs")
    assert (code, out) == (0, f"no runs in {empty}; record one with: pytest --eval\n")
    assert empty.stat().st_size == 0


@pytest.mark.parametrize("kind", ["text file", "directory"])
def test_store_errors_name_the_commands_own_option(
    project: Project, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    bad = project.path / "bad"
    if kind == "directory":
        bad.mkdir()
    else:
        bad.write_text("my notes\n")
    code, _, err = cli(capsys, "--store", str(bad), "runs")
    assert code == 2
    assert "--eval-store" not in err
    assert "--store" in err


def test_show_resume_hint_names_the_store_it_was_read_from(
    project: Project, capsys: pytest.CaptureFixture[str]
) -> None:
    project.dataset(items("a"))
    project.eval_test()
    project.fail("a")
    other = project.path / "other.db"
    project.run("--eval", f"--eval-store={other}").assert_outcomes(failed=1)
    experiment_id = last_experiment_id(other)

    code, out, _ = cli(capsys, "--store", str(other), "show", experiment_id)
    assert code == 0
    [hint] = [line for line in out.splitlines() if "resume the 1 pending" in line]
    command = hint.split(": ", 1)[1]
    assert f"--eval-store={other}" in command
    project.repair()
    project.run(*command.split()[1:]).assert_outcomes(passed=1)


@pytest.mark.parametrize("command", ["gate", "report"])
def test_gate_and_report_give_a_resume_command_that_finds_the_store_they_read(
    project: Project, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    project.dataset(items("a"))
    project.eval_test()
    project.fail("a")
    project.run("--eval", "--eval-store=elsewhere/other.db").assert_outcomes(failed=1)
    store = ["--store", "elsewhere/other.db"]  # relative to this folder, as a user types it

    if command == "gate":
        code, out, _ = cli(capsys, *store, "gate", "last")
        assert code == 1
        [hint] = [line for line in out.splitlines() if "resume the 1 pending" in line]
        resume = hint.split(": ", 1)[1]
    else:
        code, _, _ = cli(capsys, *store, "report", "last", "--html", "report.html")
        assert code == 0
        page = (project.path / "report.html").read_text()
        resume = html.unescape(page.split('<code class="resume-command">', 1)[1].split("</code>", 1)[0])
    assert f"--eval-store={project.path / 'elsewhere' / 'other.db'}" in shlex.split(resume)

    project.repair()
    project.run(*shlex.split(resume)[1:]).assert_outcomes(passed=1)
    code, out, _ = cli(capsys, *store, "gate", "last")
    assert (code, out.splitlines()[-1]) == (0, "eval gate: passed")


# -- the installed command -----------------------------------------------------------------------


def installed_command() -> str:
    beside = Path(sys.executable).with_name("opik-eval")
    if beside.exists():
        return str(beside)
    found = shutil.which("opik-eval")
    assert found is not None, "the opik-eval console script is not installed"
    return found


def test_installed_command(project: Project) -> None:
    project.dataset(items("a", "b"))
    project.eval_test()
    _, report = project.run_report("--eval")
    env = {k: v for k, v in os.environ.items() if k != STORE_ENV}
    command = installed_command()

    listed = subprocess.run(
        [command, "runs"], cwd=project.path, env=env, capture_output=True, text=True, timeout=60
    )
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[1].split()[0] == report["run_id"]

    unknown = subprocess.run(
        [command, "show", UNKNOWN], cwd=project.path, env=env, capture_output=True, text=True, timeout=60
    )
    assert unknown.returncode == 2
    assert unknown.stdout == ""
    assert (
        f"no run, experiment or trial with id '{UNKNOWN}' in the eval store {project.store_path}"
        in unknown.stderr
    )
    assert "Traceback" not in unknown.stderr


def test_show_piped_into_head_stops_quietly(project: Project) -> None:
    # More output than a pipe holds, so that head really closes it early.
    project.dataset(items(*(f"q{i}" for i in range(2000))))
    project.eval_test()
    project.run("--eval", "-q").assert_outcomes(passed=2000)
    command = f"{sys.executable} -m pytest_opik_eval.cli show last | head -n 2"
    done = subprocess.run(command, shell=True, cwd=project.path, capture_output=True, text=True, check=False)
    assert len(done.stdout.splitlines()) == 2
    assert "Traceback" not in done.stderr


def test_sync_escapes_control_characters_in_a_store_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A path is data too: one that holds an escape sequence must not repaint the terminal.
    bad = tmp_path / "spool\x1b[2J\x07.db"
    bad.mkdir()
    code, out, err = cli(capsys, "--store", str(bad), "sync")
    assert code == 2
    assert "\x1b" not in err
    assert "\x07" not in err
    assert (
        f"opik-eval: the eval store {tmp_path}/spool\\x1b[2J\\x07.db is a directory; give --store a file path"
        in err
    )


TRACED_APP = """
import opik
from opik import opik_context


@opik.track(type="tool")
def lookup(question):
    raise KeyError("no page for \\x1b[2J" + question)


@opik.track(type="llm")
def llm(prompt):
    opik_context.update_current_span(
        model="house-llm-1",
        usage={"prompt_tokens": 1200, "completion_tokens": 30, "total_tokens": 1230},
        total_cost=0.0021,
    )
    return prompt


@opik.track(name="agent\\x1b[31m")
def agent(question):
    try:
        lookup(question)
    except KeyError:
        pass
    return llm(question)
"""


def traced_run(project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run of items a and b, whose app makes the spans of TRACED_APP."""
    offline_opik(project, monkeypatch)
    project.dataset(items("a", "b"))
    project.write("app.py", TRACED_APP)
    project.eval_test(imports="from app import agent", behaviour="return agent(item['input']['text'])")
    project.run("--eval").assert_outcomes(passed=2)


def run_of(project: Project) -> str:
    store = LocalStore(project.store_path, create=False)
    try:
        return store.find("last")[0].id
    finally:
        store.close()


def test_show_a_trial_prints_its_span_tree(
    project: Project, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    traced_run(project, monkeypatch)
    trial = project.trials()[1]
    trace = trial.spans[0].trace_id
    store = ["--store", str(project.store_path)]
    # by its node id (as pytest prints it), its trace id (as the HTML report and the Opik UI show
    # it), or its id: the same tree
    code, out, err = cli(capsys, *store, "show", trial.node_id)
    assert (code, err) == (0, "")
    for other in (trace, trial.id):
        assert cli(capsys, *store, "show", other) == (0, out, "")
    lines = out.splitlines()
    assert lines[1:3] == [
        f"  trial test_eval.py::test_qa[b-t0], run {run_of(project)}",
        "  item b, trial 0: completed, passed",
    ]
    assert re.fullmatch(r"  latency: task \d+ ms, equals_metric \d+ ms", lines[3])
    assert lines[4:6] == ["  scores: equals_metric=1", f"  trace {trace}: 6 spans"]
    tree = [re.sub(r"\d+ ms", "N ms", line) for line in lines[6:]]
    assert tree == [
        "    test_qa  general  N ms",
        "    └─ agent\\x1b[31m  general  N ms",
        "       ├─ lookup  tool  N ms",
        "       │    error: KeyError: 'no page for \\x1b[2Jb'",
        "       └─ llm  llm  N ms  house-llm-1  tokens 1,200 in / 30 out  $0.0021",
        "    metrics_calculation  general  N ms",
        "    └─ equals_metric  general  N ms",
    ]
    assert "\x1b" not in out

    code, out, err = cli(capsys, *store, "show", trace, "--json")
    shown = json.loads(out)
    assert (shown["trial_id"], shown["node_id"], shown["status"]) == (trial.id, trial.node_id, "completed")
    assert [span["name"] for span in shown["spans"]] == [span.name for span in trial.spans]
    llm = next(span for span in shown["spans"] if span["name"] == "llm")
    assert llm["usage"]["prompt_tokens"] == 1200
    assert llm["cost"] == 0.0021

    # the experiment's table says how to see a trial's tree, of this run
    code, out, err = cli(capsys, *store, "show", trial.experiment_id)
    command = (
        f"opik-eval --store {project.store_path} show 'test_eval.py::test_qa[a-t0]' --run {run_of(project)}"
    )
    assert f"  a trial's span tree: {command}" in out
    assert cli(capsys, *shlex.split(command)[1:])[0] == 0


def test_show_a_rescored_trial_says_where_the_task_ran_and_picks_a_run(
    project: Project, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    traced_run(project, monkeypatch)
    original_run, original = run_of(project), project.last_experiment_id()
    project.run("--eval-rescore=last").assert_outcomes(passed=2)
    rescore_run = run_of(project)
    node = "test_eval.py::test_qa[b-t0]"
    store = ["--store", str(project.store_path)]

    # By node id alone: the newest run's trial, a rescore, which says so, where the task ran, and
    # which other runs have the trial.
    code, out, err = cli(capsys, *store, "show", node)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    show_original = f"opik-eval --store {project.store_path} show '{node}' --run {original_run}"
    assert lines[1:5] == [
        f"  trial {node}, run {rescore_run}",
        f"  1 other run(s) have it, newest first: {original_run}; pick one with --run ID",
        f"  a rescore of run {original_run} (experiment {original}): the task did not run here; its output "
        f"and the task's spans are in run {original_run}: {show_original}",
        "  item b, trial 0: completed, passed",
    ]
    assert lines[-1] == "  no spans recorded: the task did not run, and the metrics made none"
    assert cli(capsys, *store, "show", node, "--run", "last") == (0, out.replace(lines[2] + "\n", ""), "")

    # The command it gives shows the original trial, the task's spans with it.
    code, out, err = cli(capsys, *shlex.split(show_original)[1:])
    assert (code, err) == (0, "")
    assert f"  trial {node}, run {original_run}" in out
    assert "rescore" not in out
    assert "       ├─ lookup  tool" in out
    assert "  trace " in out
    assert cli(capsys, *store, "show", node, "--run", original) == (0, out, "")  # its experiment's id too

    shown = json.loads(cli(capsys, *store, "show", node, "--json")[1])
    assert (shown["run_id"], shown["other_runs"], shown["spans"]) == (rescore_run, [original_run], [])
    assert shown["rescore_of"] == [{"experiment_id": original, "run_id": original_run}]
    shown = json.loads(cli(capsys, *store, "show", node, "--json", "--run", original_run)[1])
    assert (shown["run_id"], shown["rescore_of"], len(shown["spans"])) == (original_run, None, 6)

    # A run without that trial, and a run that does not exist.
    code, out, err = cli(capsys, *store, "show", "test_eval.py::test_qa[z-t0]", "--run", original_run)
    assert code == 2
    assert f"no trial with id, trace id or node id 'test_eval.py::test_qa[z-t0]' in run {original_run}" in err
    code, out, err = cli(capsys, *store, "show", node, "--run", UNKNOWN)
    assert code == 2
    assert f"no experiment or run with id {UNKNOWN!r}" in err


DEEP = 5_000  # five times Python's default recursion limit


def test_show_a_trial_nested_thousands_of_spans_deep_prints_every_span_on_bounded_lines(
    project: Project, capsys: pytest.CaptureFixture[str]
) -> None:
    # Nested without recursion (an ExitStack), each level reporting its usage, as a deep agent
    # loop or a recursive chain would.
    project.dataset(items("a"))
    project.write(
        "test_deep.py",
        f"""
        import contextlib
        import pytest
        from pytest_opik_eval.metrics import Equals
        from pytest_opik_eval.tracing import trace


        @pytest.mark.eval(dataset="data.jsonl", metrics=[Equals()], scoring_key_mapping={{"reference": "expected_output"}})
        def test_deep(eval_item):
            with contextlib.ExitStack() as stack:
                for level in range({DEEP}):
                    stack.enter_context(trace.span(f"level {{level}}"))
                    trace.usage(model="house-llm-1", input_tokens=10, output_tokens=2, cost=0.0001)
            return eval_item["input"]["text"]
        """,
    )
    result, report = project.run_report("--eval")
    result.assert_outcomes(passed=1)
    [trial] = report["experiments"][0]["trials"]
    assert trial["usage"]["app"]["total_tokens"] == 12 * DEEP  # every level counted once

    code, out, err = cli(capsys, "--store", str(project.store_path), "show", "test_deep.py::test_deep[a-t0]")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert re.fullmatch(rf"  trace \S+: {DEEP + 3} spans", lines[5])
    tree = lines[6:]
    assert [re.sub(r"^[ │├└─]*(\[\+\d+ levels?\] )?[├└]?─? *", "", line).split("  ")[0] for line in tree] == [
        "test_deep",
        *(f"level {level}" for level in range(DEEP)),
        "metrics_calculation",
        "equals_metric",
    ]
    # Drawn 24 levels deep, then each line says how many levels above it it leaves out: no line
    # grows with the depth (drawn in full, the tree took 37 MB and minutes).
    assert tree[25].startswith("    " + " " * 3 * 24 + "└─ level 24  general")
    assert tree[26].startswith("    " + " " * 3 * 24 + "[+1 level] └─ level 25  general")
    assert tree[DEEP].startswith(
        "    " + " " * 3 * 24 + f"[+{DEEP - 25} levels] └─ level {DEEP - 1}  general"
    )
    assert max(len(line) for line in tree) < 200
