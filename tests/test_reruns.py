"""Plugins that run a failed test case again in the same session: pytest-rerunfailures (``--reruns``,
``@pytest.mark.flaky(reruns=N)``) and pytest-retry (``--retries``). The rerun is the trial's attempt
that counts, as it is pytest's outcome; the store keeps every attempt."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import OPIK_KEY, Project, items, opik_days_behind
from opik_server import OpikTestServer

import pytest_opik_eval.ids
from pytest_opik_eval.cli import main as opik_eval
from pytest_opik_eval.ids import uuid7
from pytest_opik_eval.store.local import LocalStore
from pytest_opik_eval.store.records import (
    DatasetRecord,
    ExperimentRecord,
    PlannedTrial,
    RunRecord,
    Selection,
)

# Item b answers wrong on its first attempt only (a flaky model), so its trial fails its threshold,
# and passes when run again. Item c's first attempt is right.
FLAKY_ONCE = (
    "flag = HERE / f\"seen-{item['id']}-{trial}\"\n"
    "    first = not flag.exists()\n"
    "    flag.write_text('')\n"
    "    if item['id'] == 'b' and first: return 'wrong'"
)

# pytest-retry keeps its settings in module globals that a second pytest run in the same process
# trips over ("no option named 'filtered_exceptions'"): its runs get a process of their own.
RERUNNERS = {
    "rerunfailures": ["-p", "rerunfailures", "--reruns", "1"],
    "rerunfailures-marker": ["-p", "rerunfailures"],
    "pytest-retry": ["-p", "pytest_retry.retry_plugin", "--retries", "1"],
}


def _run(project: Project, how: str, *args: str) -> tuple[pytest.RunResult, dict[str, Any]]:
    return project.run_report(*RERUNNERS[how], *args, subprocess=how == "pytest-retry")


def _eval_test(project: Project, how: str, behaviour: str = FLAKY_ONCE) -> None:
    project.dataset(items("a", "b", "c"))
    test = project.eval_test(behaviour=behaviour)
    if how == "rerunfailures-marker":
        test.write_text(
            test.read_text().replace("def test_qa(", "@pytest.mark.flaky(reruns=1)\ndef test_qa(")
        )


@pytest.mark.parametrize("how", list(RERUNNERS))
def test_a_rerun_that_passes_replaces_the_failed_attempt(any_backend: Project, how: str) -> None:
    project = any_backend
    _eval_test(project, how)

    result, report = _run(project, how, "--eval")

    # pytest says the rerun passed: the eval summary, the report and the exit status agree.
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["*3 completed (3 passed, 0 failed), 0 pending*"])
    assert project.calls() == ["a#0", "b#0", "b#0", "c#0"]
    trials = {t["dataset_item_id"]: t for t in report["experiments"][0]["trials"]}
    assert {k: (t["passed"], t["attempts"]) for k, t in trials.items()} == {
        "a": (True, 1),
        "b": (True, 2),
        "c": (True, 1),
    }
    assert trials["b"]["output"] == {"output": "b"}
    assert report["experiments"][0]["summary"]["failed"] == 0

    # Nothing is left to resume, and the resume exits as the run did.
    resumed, _ = _run(project, how, "--eval-resume=last")
    assert resumed.ret == 0, resumed.stdout.str()
    resumed.stdout.fnmatch_lines(["*nothing pending*"])
    assert project.calls() == []


def test_a_replaced_attempt_spooled_for_days_names_its_replacement_by_its_new_id(
    project: Project, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Recorded as if two days ago, the server (which checks the UUID v7 time window as Opik
    # Cloud does) away once the experiment is made: the writes are sent under new ids.
    with opik_days_behind(project, monkeypatch, tmp_path, project_name=None) as server:
        _eval_test(project, "rerunfailures")
        assert _run(project, "rerunfailures", "--eval")[0].ret == 0
        monkeypatch.setattr(pytest_opik_eval.ids, "_clock", time.time_ns)

        server.come_back()
        assert opik_eval(["--store", str(project.store_path), "sync"]) == 0
        assert server.invalid_requests == []
        traces = [t for t in server.traces.values() if t["metadata"]["dataset_item_id"] == "b"]
        (completed,) = [t for t in traces if t["metadata"]["_opik_evaluation_pending"] is False]
        (replaced,) = [t for t in traces if t["metadata"]["_opik_evaluation_pending"] is True]
        assert replaced["metadata"]["replaced_by"] == completed["id"]


# Trials run ahead in a thread pool, or on pytest-xdist workers that take tests in batches (load)
# or steal them from each other (worksteal): a rerun there still replaces the attempt it reruns.
CONCURRENT = {
    "eval-threads": ["--eval-threads=4"],
    "xdist-load": ["-p", "xdist", "-n", "2", "--dist", "load"],
    "xdist-worksteal": ["-p", "xdist", "-n", "2", "--dist", "worksteal"],
}


@pytest.mark.parametrize("how", list(CONCURRENT))
def test_a_rerun_that_passes_under_threads_or_xdist_replaces_the_failed_attempt(
    project: Project, how: str
) -> None:
    _eval_test(project, "rerunfailures")
    # xdist first: pytest-rerunfailures imports xdist's hooks, and pytest (warnings as errors)
    # refuses a plugin module imported before it was loaded as one.
    concurrent = CONCURRENT[how]

    result, report = project.run_report(*concurrent, *RERUNNERS["rerunfailures"], "--eval")

    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["*3 completed (3 passed, 0 failed), 0 pending*"])
    assert sorted(project.calls()) == ["a#0", "b#0", "b#0", "c#0"]  # b twice, the others once
    trials = {t["dataset_item_id"]: t for t in report["experiments"][0]["trials"]}
    assert {k: (t["passed"], t["attempts"]) for k, t in trials.items()} == {
        "a": (True, 1),
        "b": (True, 2),
        "c": (True, 1),
    }

    resumed, _ = project.run_report(*concurrent, *RERUNNERS["rerunfailures"], "--eval-resume=last")
    assert resumed.ret == 0, resumed.stdout.str()
    resumed.stdout.fnmatch_lines(["*nothing pending*"])
    assert project.calls() == []


def test_the_opik_server_counts_the_rerun_and_not_the_attempt_it_replaced(
    opik: OpikTestServer, project: Project
) -> None:
    _eval_test(project, "rerunfailures")
    assert _run(project, "rerunfailures", "--eval")[0].ret == 0
    assert project.calls() == ["a#0", "b#0", "b#0", "c#0"]

    # One trace per attempt; the replaced one is pending again, without the output the Opik SDK
    # would count as a completed trial.
    traces = [t for t in opik.traces.values() if t["metadata"]["dataset_item_id"] == "b"]
    assert len(traces) == 2
    completed = [t for t in traces if t["metadata"]["_opik_evaluation_pending"] is False]
    replaced = [t for t in traces if t["metadata"]["_opik_evaluation_pending"] is True]
    assert [t["output"] for t in completed] == [{"output": "b"}]
    assert len(replaced) == 1
    assert replaced[0].get("output") is None
    assert replaced[0]["metadata"]["replaced_by"] == completed[0]["id"]

    # The experiment holds the trial once: the replaced attempt's experiment item is deleted, so
    # the averages the Opik UI shows (and the trace count) leave its failed score out.
    experiment_id = project.last_experiment_id()
    linked = [i["trace_id"] for i in opik.experiment_items if i["experiment_id"] == experiment_id]
    assert sorted(linked) == sorted(t["id"] for t in opik.traces.values() if t["id"] != replaced[0]["id"])
    assert replaced[0]["id"] not in linked
    shown = httpx.get(
        f"{opik.api_url}v1/private/experiments/{experiment_id}",
        headers={"Authorization": OPIK_KEY, "Comet-Workspace": "evals"},
    ).json()
    assert shown["trace_count"] == 3
    assert shown["feedback_scores"] == [{"name": "equals_metric", "value": 1.0}]

    # Another machine (an empty spool) reads the same verdict from the server.
    other = project.path / "elsewhere.db"
    result = project.run(f"--eval-resume={experiment_id}", f"--eval-store={other}")
    assert result.ret == 0, result.stdout.str()
    assert project.calls() == []
    assert {t.dataset_item_id: t.passed for t in project.trials(experiment_id, store_path=other)} == {
        "a": True,
        "b": True,
        "c": True,
    }


@pytest.mark.parametrize("how", ["rerunfailures", "pytest-retry"])
def test_a_rerun_that_fails_again_or_crashes_keeps_the_session_failed(project: Project, how: str) -> None:
    # Item b misses its threshold, then its rerun crashes: the rerun did not complete, so the
    # attempt that did stands, and the session fails as pytest's outcome says.
    behaviour = FLAKY_ONCE.replace(
        "if item['id'] == 'b' and first: return 'wrong'",
        "if item['id'] == 'b' and first: return 'wrong'\n"
        "    if item['id'] == 'b': raise RuntimeError('rerun crashed')",
    )
    _eval_test(project, how, behaviour)

    result, report = _run(project, how, "--eval")

    assert result.ret == 1
    result.stdout.fnmatch_lines(["*3 completed (2 passed, 1 failed), 0 pending*"])
    b = next(t for t in report["experiments"][0]["trials"] if t["dataset_item_id"] == "b")
    assert (b["status"], b["passed"], b["attempts"], b["output"]) == (
        "completed",
        False,
        2,
        {"output": "wrong"},
    )


def test_another_process_completing_first_still_wins_over_a_rerun(tmp_path: Path) -> None:
    # Two processes ran the same trial (a killed worker's trial run again): the first to complete
    # stands, even against the other's rerun, which replaces only its own earlier attempt.
    path = tmp_path / "store.db"
    first, second = LocalStore(path), LocalStore(path)
    run = RunRecord(id=uuid7(), created_at="2026-01-01T00:00:00", rootdir="", args=[])
    experiment = ExperimentRecord(
        id=uuid7(),
        run_id=run.id,
        name="test_qa",
        test="test_e.py::test_qa",
        params="",
        created_at=run.created_at,
        dataset=DatasetRecord(source="data.jsonl", path=None, version="v"),
        selection=Selection(),
        items=[{"id": "a"}],
    )
    trial = PlannedTrial(uuid7(), experiment.id, "a", 0, "test_e.py::test_qa[a-t0]")
    first.create_run(run, [experiment], [trial])
    earlier = second.start_attempt(trial.id, "session-2")
    winner = first.start_attempt(trial.id, "session-1")
    first.complete_attempt(winner)
    first.close()
    second.complete_attempt(earlier)
    rerun = second.start_attempt(trial.id, "session-2")
    second.complete_attempt(rerun, replaces=earlier)
    (record,) = second.trials(experiment.id)
    assert (record.status, record.session_id, record.attempts) == ("completed", "session-1", 3)
    second.close()
