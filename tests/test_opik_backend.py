"""The Opik server as the backend, end to end against the Opik-compatible test server."""

from __future__ import annotations

import json
import os
import shlex
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import opik_server
import pytest
from conftest import OPIK_KEY, Project, items, opik_days_behind
from opik_server import OpikTestServer

import pytest_opik_eval.ids
from pytest_opik_eval.cli import main as opik_eval
from pytest_opik_eval.store.local import LocalStore
from pytest_opik_eval.store.opik.client import OpikClient, OpikHTTPError, OpikUnavailable
from pytest_opik_eval.store.opik.config import read_settings

PENDING = "_opik_evaluation_pending"


def server_trials(server: OpikTestServer, experiment_id: str) -> list[dict[str, Any]]:
    """Each attempt of the experiment on the server: its item, trial, marker and output."""
    traces = server.traces
    attempts = []
    for link in server.experiment_items:
        if link["experiment_id"] == experiment_id:
            trace = traces[link["trace_id"]]
            metadata = trace.get("metadata") or {}
            attempts.append(
                {
                    "item": metadata.get("dataset_item_id"),
                    "trial": metadata.get("trial"),
                    "pending": metadata.get(PENDING),
                    "output": trace.get("output"),
                }
            )
    return sorted(attempts, key=lambda a: (str(a["item"]), str(a["trial"]), a["pending"] is False))


def test_a_run_is_recorded_in_opiks_format(project: Project, opik: OpikTestServer) -> None:
    project.dataset(items("a", "b", "c"), name="qa.jsonl")
    project.eval_test("trial_count=2,", dataset='"qa.jsonl"')
    project.fail("b#1")
    result = project.run("--eval")
    result.assert_outcomes(passed=5, failed=1)
    result.stdout.fnmatch_lines(
        [
            f"eval backend: opik server: {opik.api_url} (from env OPIK_URL_OVERRIDE), workspace evals "
            "(from env OPIK_WORKSPACE), project 'pytest-evals', api key from env OPIK_API_KEY; spool *"
        ]
    )
    assert OPIK_KEY not in result.stdout.str()
    [experiment] = opik.experiments.values()
    assert experiment["name"] == "test_qa"
    assert experiment["dataset_name"] == "qa"
    resume_state = json.loads(experiment["metadata"]["_opik_resume"])
    assert resume_state["resumable"] is True
    assert resume_state["default_runs_per_item"] == 2
    assert resume_state["dataset_version_name"] == "v1"
    dataset = opik.dataset_by_name("qa")
    assert dataset is not None
    assert sorted(item["data"]["id"] for item in dataset["items"].values()) == ["a", "b", "c"]
    attempts = server_trials(opik, experiment["id"])
    assert len(attempts) == 6
    pending = [a for a in attempts if a["pending"] is not False]
    assert pending == [{"item": "b", "trial": 1, "pending": True, "output": None}]
    assert all(a["output"] == {"output": a["item"]} for a in attempts if a["pending"] is False)
    scores = {(s["name"], s["value"]) for s in opik.feedback_scores}
    assert scores == {("equals_metric", 1.0)}
    assert len(opik.feedback_scores) == 5
    experiment_scores = {
        s["name"]: s["value"] for s in opik.experiments[experiment["id"]].get("experiment_scores") or []
    }
    assert experiment_scores == {"equals_metric.mean": 1.0, "pass_rate": 1.0}


def test_a_scores_metadata_goes_to_the_trace_as_no_feedback_score_carries_it(
    project: Project, opik: OpikTestServer, capsys: pytest.CaptureFixture[str]
) -> None:
    project.dataset(items("a", "b"))
    project.eval_test(
        metrics="[Judge()]",
        imports="""
from pytest_opik_eval.metrics import BaseMetric, ScoreResult

class Judge(BaseMetric):
    def score(self, output, **ignored):
        return ScoreResult(name="judge", value=1.0, reason="fine", metadata={"item": output, "tokens": [3, 4]})
""",
    )
    project.run("--eval").assert_outcomes(passed=2)
    experiment_id = project.last_experiment_id()
    by_item = {
        trace["metadata"]["dataset_item_id"]: trace["metadata"].get("score_metadata")
        for trace in opik.traces.values()
    }
    assert by_item == {
        "a": {"judge": {"item": "a", "tokens": [3, 4]}},
        "b": {"judge": {"item": "b", "tokens": [3, 4]}},
    }
    # As the Opik SDK sends them: name, value and reason (its feedback scores have no metadata).
    assert {(s["name"], s["value"], s["reason"], "metadata" in s) for s in opik.feedback_scores} == {
        ("judge", 1.0, "fine", False)
    }

    # Read back from the server, by a machine without the spool.
    project.store_path.unlink()
    assert opik_eval(["--backend", "opik", "--store", str(project.store_path), "show", experiment_id]) == 0
    stored = {
        t.dataset_item_id: [(s.name, s.metadata) for s in t.scores] for t in project.trials(experiment_id)
    }
    assert stored == {
        "a": [("judge", {"item": "a", "tokens": [3, 4]})],
        "b": [("judge", {"item": "b", "tokens": [3, 4]})],
    }


def test_a_second_run_reuses_the_uploaded_dataset(project: Project, opik: OpikTestServer) -> None:
    project.dataset(items("a", "b"), name="qa.jsonl")
    project.eval_test(dataset='"qa.jsonl"')
    project.run("--eval").assert_outcomes(passed=2)
    project.run("--eval").assert_outcomes(passed=2)
    dataset = opik.dataset_by_name("qa")
    assert dataset is not None
    assert len(dataset["items"]) == 2
    project.dataset(items("a", "b", "c"), name="qa.jsonl")
    project.run("--eval").assert_outcomes(passed=3)
    dataset = opik.dataset_by_name("qa")
    assert dataset is not None
    assert len(dataset["items"]) == 3


def test_resume_on_another_machine_reads_the_server(project: Project, opik: OpikTestServer) -> None:
    project.dataset(items("a", "b", "c"))
    project.eval_test("trial_count=2,")
    project.fail("b", "c#0")
    project.run("--eval").assert_outcomes(passed=3, failed=3)
    experiment_id = project.last_experiment_id()
    project.calls()

    # Another machine: the same checkout, no local spool.
    project.store_path.unlink()
    project.repair()
    result = project.run(f"--eval-resume={experiment_id}")
    result.assert_outcomes(passed=3, deselected=3)
    assert sorted(project.calls()) == ["b#0", "b#1", "c#0"]
    attempts = server_trials(opik, experiment_id)
    completed = {(a["item"], a["trial"]) for a in attempts if a["pending"] is False}
    assert completed == {(i, t) for i in "abc" for t in (0, 1)}
    # The failed attempts stay, as with the Opik SDK; nothing completed twice.
    assert len(attempts) == 9
    assert len([a for a in attempts if a["pending"] is False]) == 6


def test_opik_sdk_resumes_an_experiment_left_pending_by_pytest(
    project: Project, opik: OpikTestServer
) -> None:
    project.dataset(items("a", "b", "c"))
    project.eval_test()
    project.fail("b")
    project.run("--eval").assert_outcomes(passed=2, failed=1)
    experiment_id = project.last_experiment_id()
    script = textwrap.dedent(
        f"""
        import json, opik
        from opik.evaluation import metrics
        calls = []
        def task(item):
            calls.append(item["input"]["text"])
            return {{"output": item["input"]["text"]}}
        result = opik.evaluate_resume(
            experiment_id={experiment_id!r}, task=task, scoring_metrics=[metrics.Equals()],
            scoring_key_mapping={{"reference": "expected_output"}}, verbose=0)
        print(json.dumps(calls))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], env=os.environ.copy(), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == ["b"]
    outputs = [a["output"] for a in server_trials(opik, experiment_id) if a["output"] is not None]
    assert sorted(o["output"] for o in outputs) == ["a", "b", "c"]


def test_an_item_ids_selection_writes_the_sdks_checkpoint(project: Project, opik: OpikTestServer) -> None:
    project.dataset(items("a", "b", "c"))
    project.eval_test("item_ids=['c', 'a'],")
    project.run("--eval").assert_outcomes(passed=2)
    experiment_id = project.last_experiment_id()
    checkpoint = json.loads(
        (Path(os.environ["HOME"]) / ".opik" / "resume" / f"{experiment_id}.json").read_text()
    )
    dataset = opik.dataset_by_name("data")
    assert dataset is not None
    server_ids = {item["data"]["id"]: item["id"] for item in dataset["items"].values()}
    assert checkpoint == {
        "schema_version": 1,
        "experiment_id": experiment_id,
        "resolved_dataset_item_ids": [server_ids["c"], server_ids["a"]],
    }


def test_a_wrong_key_stops_the_session_at_start(
    project: Project, opik: OpikTestServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPIK_API_KEY", OPIK_KEY + "-wrong")
    project.dataset(items("a"))
    project.eval_test()
    result = project.run("--eval")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "ERROR: --eval-backend=opik: the Opik server at * refused the credentials (HTTP 401): check the API key (OPIK_API_KEY, here from env OPIK_API_KEY)*"
        ]
    )
    assert OPIK_KEY not in result.stdout.str() + result.stderr.str()
    assert project.calls() == []


def test_the_server_down_at_start_is_a_clear_error(project: Project, opik: OpikTestServer) -> None:
    project.dataset(items("a"))
    project.eval_test()
    opik.go_down()
    result = project.run("--eval")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: --eval-backend=opik: cannot reach the Opik server: *; check OPIK_URL_OVERRIDE*"]
    )
    assert project.calls() == []


def test_the_server_down_in_the_middle_loses_nothing_and_sends_nothing_twice(
    project: Project, opik: OpikTestServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(opik_server, "CURRENT", opik, raising=False)
    project.dataset(items("a", "b", "c", "d"))
    project.eval_test(
        behaviour="if item['id'] == 'b': __import__('opik_server').CURRENT.go_down()",
    )
    result = project.run("--eval")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["* write(s) wait to be sent to the Opik server: run opik-eval sync"])
    experiment_id = project.last_experiment_id()

    opik.come_back()
    assert opik_eval(["--store", str(project.store_path), "sync"]) == 0
    attempts = server_trials(opik, experiment_id)
    assert [(a["item"], a["pending"]) for a in attempts] == [
        ("a", False),
        ("b", False),
        ("c", False),
        ("d", False),
    ]
    assert len(opik.experiment_items) == 4
    assert len(opik.feedback_scores) == 4


def test_a_429_storm_is_ridden_out(project: Project, opik: OpikTestServer) -> None:
    project.dataset(items("a", "b", "c"))
    project.eval_test()
    # As many 429s in a row as the client retries a request (4, then a 5th attempt): whichever
    # request meets them rides them out, the background sender's during the run, or the end of
    # the session's when a busy machine gave the sender no turn before it. (A longer storm met by
    # one request leaves the writes in the spool for opik-eval sync, as documented.)
    opik.rate_limit_next(4, retry_after=0.05, path_contains="traces")
    result = project.run("--eval")
    result.assert_outcomes(passed=3)
    assert "wait to be sent to the Opik server" not in result.stdout.str()
    attempts = server_trials(opik, project.last_experiment_id())
    assert [a["pending"] for a in attempts] == [False, False, False]
    assert [r.status for r in opik.requests if r.fault == "rate_limit"] == [429] * 4


def test_the_key_is_never_shown(project: Project, opik: OpikTestServer) -> None:
    project.dataset(items("a", "b"))
    project.eval_test(behaviour="if item['id'] == 'b': return 'wrong'")
    result = project.run(
        "--eval",
        "-vv",
        "--log-level=DEBUG",
        "--junitxml=junit.xml",
        "--eval-report=report.json",
        "--eval-html=report.html",
    )
    text = result.stdout.str() + result.stderr.str()
    for name in ("junit.xml", "report.json", "report.html"):
        text += (project.path / name).read_text()
    assert OPIK_KEY not in text


def test_client_errors_name_the_endpoint_and_redact_an_echoed_key() -> None:
    def echo(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, json={"message": f"bad request, headers {dict(request.headers)}"})

    settings = read_settings().__class__(
        url="http://opik.invalid/api/", api_key=OPIK_KEY, workspace="evals", project="p", sources={}
    )
    client = OpikClient(settings, transport=httpx.MockTransport(echo))
    with pytest.raises(OpikHTTPError) as caught:
        client.request("POST", "traces/batch", body={"traces": []})
    message = str(caught.value)
    assert message.startswith(
        "POST v1/private/traces/batch at http://opik.invalid/api/ failed with HTTP 400: "
    )
    assert OPIK_KEY not in message
    assert "***" in message


def test_slow_answers_beyond_the_timeout_are_retried_then_reported(opik: OpikTestServer) -> None:
    opik.delay(1.0)
    client = OpikClient(read_settings(), timeout=0.2, retries=1, backoff=0.01)
    with pytest.raises(OpikUnavailable, match="GET v1/private/experiments at .* failed after 2 attempt"):
        client.request("GET", "experiments")


def test_opik_eval_show_reads_the_server(
    project: Project, opik: OpikTestServer, capsys: pytest.CaptureFixture[str]
) -> None:
    project.dataset(items("a", "b"))
    project.eval_test()
    project.fail("b")
    project.run("--eval")
    experiment_id = project.last_experiment_id()
    project.store_path.unlink()
    capsys.readouterr()
    assert opik_eval(["--backend", "opik", "--store", str(project.store_path), "show", experiment_id]) == 0
    out = capsys.readouterr().out
    assert "trials: 2 planned, 1 completed (1 passed, 0 failed), 1 pending" in out


def sdk_evaluate(script: str) -> list[str]:
    """Run an Opik SDK script in its own process (the SDK keeps global state); its last line is JSON."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        env=os.environ.copy(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


def test_pytest_resumes_an_experiment_started_by_opik_evaluate(
    project: Project, opik: OpikTestServer
) -> None:
    started = sdk_evaluate(
        """
        import json, opik
        from opik.evaluation import metrics
        client = opik.Opik()
        dataset = client.get_or_create_dataset("capitals")
        dataset.insert([{"input": {"text": t}, "expected_output": t} for t in ["a", "b", "c"]])
        def task(item):
            if item["input"]["text"] == "b":
                raise RuntimeError("interrupted")
            return {"output": item["input"]["text"]}
        try:
            opik.evaluate(dataset=dataset, task=task, scoring_metrics=[metrics.Equals()],
                          scoring_key_mapping={"reference": "expected_output"}, experiment_name="sdk-run",
                          task_threads=1, verbose=0)
        except Exception:
            pass
        [experiment] = client.get_experiments_by_name("sdk-run")
        print(json.dumps([experiment.id]))
        """
    )
    experiment_id = started[0]
    project.write(
        "test_capitals.py",
        """
        import pathlib
        import pytest
        from pytest_opik_eval.metrics import Equals

        @pytest.mark.eval(dataset="opik:capitals", metrics=[Equals()], scoring_key_mapping={"reference": "expected_output"})
        def test_capitals(eval_item):
            with open(pathlib.Path(__file__).parent / "calls.log", "a") as log:
                log.write(eval_item["input"]["text"] + "\\n")
            return eval_item["input"]["text"]
        """,
    )
    result = project.run(f"--eval-resume={experiment_id}")
    result.assert_outcomes(passed=1, deselected=2)
    # The two trials evaluate() completed are not pending; the one it left is.
    result.stdout.fnmatch_lines(["eval resume: 1 pending of 3 planned trials in 1 experiment(s) of run *"])
    assert (project.path / "calls.log").read_text().split() == ["b"]
    outputs = sorted(
        a["output"]["output"] for a in server_trials(opik, experiment_id) if a["output"] is not None
    )
    assert outputs == ["a", "b", "c"]
    # Nothing is left: a second resume runs nothing.
    result = project.run(f"--eval-resume={experiment_id}")
    result.stdout.fnmatch_lines(["nothing pending: *"])


def test_an_sdk_experiment_finished_by_pytest_is_gated_and_compared_as_one(
    project: Project, opik: OpikTestServer
) -> None:
    # evaluate() scores 5 of 6 items and is interrupted on b; pytest runs b (now wrong) and
    # judges the experiment over all six, five trials the SDK's and one its own; a later pytest
    # experiment is then compared with that mixed one, item by item.
    [experiment_id] = sdk_evaluate(
        """
        import json, opik
        from opik.evaluation import metrics
        client = opik.Opik()
        dataset = client.get_or_create_dataset("letters")
        dataset.insert([{"input": {"text": t}, "expected_output": t} for t in "abcdef"])
        def task(item):
            if item["input"]["text"] == "b":
                raise RuntimeError("interrupted")
            return {"output": item["input"]["text"]}
        try:
            opik.evaluate(dataset=dataset, task=task, scoring_metrics=[metrics.Equals()],
                          scoring_key_mapping={"reference": "expected_output"}, experiment_name="sdk-letters",
                          task_threads=1, verbose=0)
        except Exception:
            pass
        print(json.dumps([client.get_experiments_by_name("sdk-letters")[0].id]))
        """
    )
    project.write(
        "test_letters.py",
        """
        import pathlib
        import pytest
        from pytest_opik_eval.metrics import Equals

        HERE = pathlib.Path(__file__).parent

        @pytest.mark.eval(dataset="opik:letters", metrics=[Equals()], scoring_key_mapping={"reference": "expected_output"})
        def test_letters(eval_item):
            text = eval_item["input"]["text"]
            with open(HERE / "calls.log", "a") as log:
                log.write(text + "\\n")
            return "wrong" if text in (HERE / "wrong.txt").read_text() else text
        """,
    )
    (project.path / "wrong.txt").write_text("b")
    result, report = project.run_report(
        f"--eval-resume={experiment_id}", "--eval-fail-under=equals_metric=0.9"
    )
    result.assert_outcomes(failed=1, deselected=5)
    assert (project.path / "calls.log").read_text().split() == ["b"]
    [experiment] = report["experiments"]
    assert (experiment["id"], experiment["summary"]["trials"], experiment["summary"]["completed"]) == (
        experiment_id,
        6,
        6,
    )
    [gate] = experiment["gates"]
    assert (gate["met"], gate["value"], gate["interval"]["items"]) == (False, pytest.approx(5 / 6), 6)
    result.stdout.fnmatch_lines(["NOT MET: sdk-letters: fail_under equals_metric: mean 0.833 is below 0.9"])
    # The SDK's trials have no verdict: they are judged by the test's thresholds, as its own is.
    summary = experiment["summary"]
    assert (summary["passed"], summary["failed"]) == (5, 1)
    letters = opik.dataset_by_name("letters")
    assert letters is not None
    text_of = {item_id: item["data"]["input"]["text"] for item_id, item in letters["items"].items()}
    verdicts = {text_of[item["dataset_item_id"]]: item["verdict"] for item in experiment["items"]}
    assert verdicts == {
        "a": "passed",
        "b": "failed",
        "c": "passed",
        "d": "passed",
        "e": "passed",
        "f": "passed",
    }

    (project.path / "wrong.txt").write_text("ac")
    # The experiment is the test's now: --eval-baseline=last finds it.
    result, report = project.run_report(
        "--eval", "--eval-baseline=last", "--eval-max-regression=equals_metric=0.5"
    )
    result.assert_outcomes(passed=4, failed=2)
    [experiment] = report["experiments"]
    assert experiment["id"] != experiment_id
    [gate] = experiment["gates"]
    assert (gate["met"], gate["value"], gate["interval"]["items"]) == (True, pytest.approx(-1 / 6), 6)
    # Item by item: a and c passed in the SDK's trials and fail now; b, pytest's, is fixed.
    baseline = experiment["baseline"]
    assert sorted(text_of[i] for i in baseline["regressions"]) == ["a", "c"]
    assert [text_of[i] for i in baseline["fixes"]] == ["b"]
    result.stdout.fnmatch_lines(
        [
            f"  baseline sdk-letters (experiment {experiment_id}):",
            "    compared over the 6 item(s) both planned",
            "    equals_metric             0.833 ->  0.667 (-0.167)",
        ]
    )


def test_an_sdk_experiment_matching_several_tests_asks_for_a_node_id(
    project: Project, opik: OpikTestServer
) -> None:
    [experiment_id] = sdk_evaluate(
        """
        import json, opik
        from opik.evaluation import metrics
        client = opik.Opik()
        dataset = client.get_or_create_dataset("shared")
        dataset.insert([{"input": {"text": "a"}, "expected_output": "a"}])
        def task(item):
            raise RuntimeError("interrupted")
        try:
            opik.evaluate(dataset=dataset, task=task, scoring_metrics=[metrics.Equals()], experiment_name="sdk-shared", verbose=0)
        except Exception:
            pass
        print(json.dumps([client.get_experiments_by_name("sdk-shared")[0].id]))
        """
    )
    source = """
        import pytest
        @pytest.mark.eval(dataset="opik:shared")
        def test_{name}(eval_item):
            return eval_item["input"]["text"]
    """
    project.write("test_one.py", source.format(name="one"))
    project.write("test_two.py", source.format(name="two"))
    result = project.run(f"--eval-resume={experiment_id}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            f"ERROR: --eval-resume={experiment_id}: experiment * on dataset opik:shared matches several eval tests: test_one.py::test_one, test_two.py::test_two; name the one to run on the command line: pytest --eval-resume={experiment_id} test_one.py::test_one"
        ]
    )
    project.run(f"--eval-resume={experiment_id}", "test_two.py::test_two").assert_outcomes(passed=1)


def test_an_sdk_experiment_whose_dataset_no_test_names_says_how_to_mark_one(
    project: Project, opik: OpikTestServer
) -> None:
    [experiment_id] = sdk_evaluate(
        """
        import json, opik
        from opik.evaluation import metrics
        client = opik.Opik()
        dataset = client.get_or_create_dataset("orphan")
        dataset.insert([{"input": {"text": "a"}, "expected_output": "a"}])
        def task(item):
            raise RuntimeError("interrupted")
        try:
            opik.evaluate(dataset=dataset, task=task, scoring_metrics=[metrics.Equals()], experiment_name="sdk-orphan", verbose=0)
        except Exception:
            pass
        print(json.dumps([client.get_experiments_by_name("sdk-orphan")[0].id]))
        """
    )
    project.write(
        "test_other.py",
        """
        import pytest
        @pytest.mark.eval(dataset="opik:elsewhere")
        def test_other(eval_item):
            return eval_item["input"]["text"]
        """,
    )
    before = server_trials(opik, experiment_id)
    result = project.run(f"--eval-resume={experiment_id}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            f'ERROR: --eval-resume={experiment_id}: experiment {experiment_id} was started outside pytest on dataset opik:orphan, and no collected eval test\'s marker names that dataset: mark the test with @pytest.mark.eval(dataset="opik:orphan", ...)'
        ]
    )
    assert server_trials(opik, experiment_id) == before, "nothing ran, nothing was written"


def test_an_opik_dataset_is_evaluated_with_the_filter_sent_to_the_server(
    project: Project, opik: OpikTestServer
) -> None:
    opik.create_dataset(
        "geo",
        [
            {"input": {"text": t}, "expected_output": t, "category": c}
            for t, c in [("a", "geo"), ("b", "math"), ("c", "geo")]
        ],
    )
    project.write(
        "test_geo.py",
        """
        import pytest
        from pytest_opik_eval.metrics import Equals

        @pytest.mark.eval(dataset="opik:geo", filter='data.category = "GEO"', metrics=[Equals()],
                          scoring_key_mapping={"reference": "expected_output"})
        def test_geo(eval_item):
            return eval_item["input"]["text"]
        """,
    )
    result, report = project.run_report("--eval")
    result.assert_outcomes(passed=2)
    assert [
        r.body.get("filters")
        for r in opik.find_requests("POST", "items/stream")
        if r.body.get("dataset_name") == "geo"
    ][0] == json.dumps([{"field": "data", "key": "category", "type": "map", "operator": "=", "value": "GEO"}])
    assert report["experiments"][0]["dataset"]["source"] == "opik:geo"


def test_an_opik_dataset_needs_the_opik_backend(project: Project) -> None:
    project.write(
        "test_geo.py",
        'import pytest\n@pytest.mark.eval(dataset="opik:geo")\ndef test_geo(eval_item):\n    return 1\n',
    )
    result = project.run("--eval")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        ["*dataset 'opik:geo' lives on an Opik server: run with --eval-backend=opik*"]
    )


def test_opik_eval_runs_lists_the_servers_experiments(
    project: Project, opik: OpikTestServer, capsys: pytest.CaptureFixture[str]
) -> None:
    project.dataset(items("a"))
    project.eval_test()
    project.run("--eval")
    experiment_id = project.last_experiment_id()
    capsys.readouterr()
    assert opik_eval(["--backend", "opik", "--store", str(project.path / "elsewhere.db"), "runs"]) == 0
    out = capsys.readouterr().out
    assert f"latest experiments on {opik.api_url}" in out
    assert experiment_id in out
    assert "test_qa" in out


def test_traces_spooled_for_days_are_sent_under_new_ids(
    project: Project, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Recorded as if two days ago, the server (which checks the UUID v7 time window as Opik
    # Cloud does) away once the experiment is made: the writes are sent under new ids.
    with opik_days_behind(project, monkeypatch, tmp_path, project_name=None) as server:
        project.dataset(items("a", "b"))
        project.eval_test()
        server.go_down()
        server.come_back()
        result = project.run("--eval")
        result.assert_outcomes(passed=2)
        result.stdout.fnmatch_lines(["* write(s) wait to be sent to the Opik server: run opik-eval sync"])
        monkeypatch.setattr(pytest_opik_eval.ids, "_clock", time.time_ns)

        server.come_back()
        synced = opik_eval(["--store", str(project.store_path), "sync"])
        assert server.invalid_requests == []
        assert synced == 0
        experiment_id = project.last_experiment_id()
        attempts = server_trials(server, experiment_id)
        assert [(a["item"], a["pending"]) for a in attempts] == [("a", False), ("b", False)]
        assert len(server.experiment_items) == 2


def test_the_marker_can_name_the_server_dataset(project: Project, opik: OpikTestServer) -> None:
    project.dataset(items("a"))
    project.eval_test("dataset_name='qa-golden',")
    project.run("--eval").assert_outcomes(passed=1)
    assert opik.dataset_by_name("qa-golden") is not None
    [experiment] = opik.experiments.values()
    assert experiment["dataset_name"] == "qa-golden"


# -- a server that stalls, garbles its answers or echoes the key (issue 11) -------------------------


def hang_on_trial_writes(server: OpikTestServer) -> None:
    """The server takes connections and never answers the trials' writes (the run and its
    experiment are created as usual), in this process and any other (pytest-xdist workers)."""
    server.hang(path_contains="traces/batch")


def sync_command(result: pytest.RunResult) -> list[str]:
    """The words of the `opik-eval ... sync` command the session printed for what it left."""
    [line] = [line for line in result.stdout.lines if "wait to be sent to the Opik server: run " in line]
    words = shlex.split(line.split(": run ", 1)[1])
    assert words[0] == "opik-eval"
    assert words[-1] == "sync"
    return words


def test_a_server_that_stops_answering_holds_the_end_only_for_the_sync_timeout(
    project: Project, opik: OpikTestServer
) -> None:
    # ini option, and the project's warnings are errors: nothing of ours may become one.
    project.pytester.makeini("[pytest]\nfilterwarnings = error\neval_sync_timeout = 0.5\n")
    project.dataset(items("a", "b", "c"))
    project.eval_test()
    hang_on_trial_writes(opik)
    result = project.run("--eval")
    result.assert_outcomes(passed=3)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [
            "*= eval notices =*",
            "the Opik server did not take every write at the end of the session (--eval-sync-timeout=0.5): "
            f"*{opik.api_url}*",
            "* write(s) wait to be sent to the Opik server: run opik-eval sync",
        ]
    )
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    assert sync_command(result) == ["opik-eval", "sync"]  # the default spool: found from here

    opik.clear_faults()
    assert opik_eval(["--store", str(project.store_path), "sync"]) == 0
    attempts = server_trials(opik, project.last_experiment_id())
    assert [(a["item"], a["pending"]) for a in attempts] == [("a", False), ("b", False), ("c", False)]


def test_the_sync_command_left_names_a_spool_given_on_the_command_line(
    project: Project, opik: OpikTestServer, capsys: pytest.CaptureFixture[str]
) -> None:
    project.dataset(items("a", "b"))
    project.eval_test()
    hang_on_trial_writes(opik)
    result = project.run("--eval", "-W", "error", "--eval-sync-timeout=0.5", "--eval-store=spools/s.db")
    result.assert_outcomes(passed=2)
    words = sync_command(result)
    spool = project.path / "spools" / "s.db"
    assert words == ["opik-eval", f"--store={spool}", "sync"]
    capsys.readouterr()
    # The server still stalls: opik-eval sync gives up after its own timeout, and says why.
    assert opik_eval([*words[1:], "--timeout", "0.5"]) == 1
    out, err = capsys.readouterr()
    assert f"wait to be sent to the Opik server: run opik-eval --store={spool} sync" in out
    assert f"opik-eval: POST v1/private/traces/batch at {opik.api_url} failed after 1 attempt(s): " in err

    opik.clear_faults()
    assert opik_eval(words[1:]) == 0  # exactly what was printed
    store = LocalStore(spool, create=False)
    try:
        experiment_id = store.find("last")[1][0].id
    finally:
        store.close()
    attempts = server_trials(opik, experiment_id)
    assert [(a["item"], a["pending"]) for a in attempts] == [("a", False), ("b", False)]


# Each worker's first task waits until the test has made the server stop answering, which the
# test does once every worker has started a trial, so has created the run: from then on every
# request hangs, the workers' writes and the controller's read-back alike.
AFTER_THE_HANG = """
import os
import time
from collections.abc import Iterator

def after_the_hang():
    (HERE / f"started-{os.environ['PYTEST_XDIST_WORKER']}").write_text("")
    for _ in range(600):  # at most a minute, should the test fail to answer
        if (HERE / "hanging").exists():
            return
        time.sleep(0.1)
"""


def test_under_xdist_the_controller_alone_spends_the_sync_timeout(
    project: Project, opik: OpikTestServer
) -> None:
    project.dataset(items("a", "b", "c", "d"))
    project.eval_test(imports=AFTER_THE_HANG, behaviour="after_the_hang()")

    def hang_once_the_run_is_created() -> None:
        for _ in range(600):
            if len(list(project.path.glob("started-gw*"))) == 2:
                break
            time.sleep(0.1)
        opik.hang()  # every endpoint, from now on
        (project.path / "hanging").write_text("")

    hanger = threading.Thread(target=hang_once_the_run_is_created, daemon=True)
    hanger.start()
    # A first run: the spool is created by the workers, after the controller opened it.
    result = project.run("--eval", "-p", "xdist", "-n", "2", "-W", "error", "--eval-sync-timeout=0.5")
    hanger.join()
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(
        [
            "*= eval notices =*",
            "could not read from the Opik server the trials recorded elsewhere: GET v1/private/datasets/*"
            f"/items/experiments/items at {opik.api_url} failed after 1 attempt(s): *; what the spool "
            f"{project.store_path} holds is shown",
            "the Opik server did not take every write at the end of the session (--eval-sync-timeout=0.5): "
            f"*{opik.api_url}*",
            "*= eval summary =*",
            "  trials: 4 planned, 4 completed (4 passed, 0 failed), 0 pending",
            "* write(s) wait to be sent to the Opik server: run opik-eval sync",
        ]
    )
    # The controller's read-back and its drain share the budget: the end is not held up for each
    # request's own timeout (10 s, retried). The read-back made one attempt (above), which spent
    # the budget, so the drain sent nothing: the read-back is the last request the server saw
    # (the workers' writes came before it, when they stopped).
    hung = [(request.method, request.path) for request in opik.requests if request.fault == "hang"]
    assert [request for request in hung if request[0] == "GET"] == [hung[-1]]
    assert hung[-1][1].endswith("/items/experiments/items")
    opik.clear_faults()
    assert opik_eval(["--store", str(project.store_path), "sync"]) == 0
    attempts = server_trials(opik, project.last_experiment_id())
    assert [a["pending"] for a in attempts] == [False] * 4
    # The workers start together and may both create the run's dataset and experiment (same names
    # and ids): the server tells the one that lost the race 409, which the plugin expects, and
    # which the opik fixture does not count as invalid. Nothing else may be refused.


READ_BACK_FAULTS = {
    "garbled": "failed after 2 attempt(s): HTTP 200, text/html, not JSON: *",
    "refused": "failed with HTTP 403: *",
}


@pytest.mark.parametrize("fault", READ_BACK_FAULTS, ids=list(READ_BACK_FAULTS))
def test_under_xdist_a_server_failing_the_controllers_read_leaves_the_spools_summary(
    project: Project, opik: OpikTestServer, fault: str
) -> None:
    project.dataset(items("a", "b"))
    project.eval_test()
    report = project.path / "report.json"
    # The controller reads back from the server what other machines recorded.
    path = "items/experiments/items"
    if fault == "garbled":
        opik.answer_next(2, 200, HTML_PAGE, {"Content-Type": "text/html"}, path_contains=path)
    else:
        opik.fail_next(1, 403, path_contains=path)
    result = project.run("--eval", "-p", "xdist", "-n", "2", "-W", "error", f"--eval-report={report}")
    result.assert_outcomes(passed=2)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [
            "*= eval notices =*",
            "could not read from the Opik server the trials recorded elsewhere: GET v1/private/datasets/*"
            f"/items/experiments/items at * {READ_BACK_FAULTS[fault]}; what the spool {project.store_path} "
            "holds is shown",
            "*= eval summary =*",
            "  trials: 2 planned, 2 completed (2 passed, 0 failed), 0 pending",
        ]
    )
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    assert [t["status"] for t in json.loads(report.read_text())["experiments"][0]["trials"]] == [
        "completed",
        "completed",
    ]


def test_a_bad_sync_timeout_is_a_usage_error(project: Project, opik: OpikTestServer) -> None:
    project.dataset(items("a"))
    project.eval_test()
    result = project.run("--eval", "--eval-sync-timeout=soon")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--eval-sync-timeout: expected a number of seconds, 0 or more, such as 30; got 'soon'"]
    )
    project.pytester.makeini("[pytest]\neval_sync_timeout = -1\n")
    result = project.run("--eval")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: ini eval_sync_timeout: expected a number of seconds*got '-1'"])


HTML_PAGE = (
    "<!DOCTYPE html>\n<html><head><title>502 Bad Gateway</title></head>\n<body>\x1b[2J\x07"
    + "<p>upstream unavailable</p>\n" * 40
    + "</body></html>"
)
GARBLED: dict[str, tuple[bytes | str, dict[str, str]]] = {
    "gzip that does not decompress": (b"\x1f\x8bnot really gzip", {"Content-Encoding": "gzip"}),
    "an HTML page": (HTML_PAGE, {"Content-Type": "text/html"}),
    "text, not JSON": ("all good\x1b]0;pwned\x07", {"Content-Type": "text/plain"}),
}


@pytest.mark.parametrize("garbled", GARBLED, ids=list(GARBLED))
def test_a_garbled_answer_at_start_is_one_clear_usage_error(
    project: Project, opik: OpikTestServer, garbled: str
) -> None:
    body, headers = GARBLED[garbled]
    opik.answer_next(2, 200, body, headers, path_contains="v1/private/experiments")
    project.dataset(items("a"))
    project.eval_test()
    result = project.run("--eval", "-W", "error")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            f"ERROR: --eval-backend=opik: the server at {opik.api_url} does not answer as the Opik API does: "
            f"GET v1/private/experiments at {opik.api_url} failed after 2 attempt(s): HTTP 200, *; check "
            "OPIK_URL_OVERRIDE (here from env OPIK_URL_OVERRIDE): it must be the address of the Opik API*"
        ]
    )
    output = result.stdout.str() + result.stderr.str()
    assert "INTERNALERROR" not in output
    assert "Traceback" not in output
    assert "\x1b" not in output  # the server's text is escaped
    assert "\x07" not in output
    if garbled == "an HTML page":
        assert (
            "<!DOCTYPE html> <html><head><title>502 Bad Gateway</title></head> <body>\\x1b[2J\\x07<p>"
            in output
        )
        assert " more characters)" in output  # shortened
    assert project.calls() == []


@pytest.mark.parametrize("garbled", GARBLED, ids=list(GARBLED))
def test_garbled_answers_mid_run_keep_the_writes_spooled(
    project: Project, opik: OpikTestServer, garbled: str
) -> None:
    body, headers = GARBLED[garbled]
    project.dataset(items("a", "b"))
    project.eval_test()
    # Every write of a trial's trace gets the garbled answer (the run is created as usual).
    opik.answer_next(10_000, 200, body, headers, path_contains="traces/batch")
    result = project.run("--eval", "-W", "error", "--eval-sync-timeout=3")
    result.assert_outcomes(passed=2)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [
            "*= eval notices =*",
            # What the last attempt saw depends on timing: the garbled answer ("POST
            # v1/private/traces/batch at ... failed after N attempt(s): ..."), or, on a loaded
            # machine, a budget spent on retrying it ("... did not answer in time").
            "the Opik server did not take every write at the end of the session (--eval-sync-timeout=3): "
            f"*{opik.api_url}*",
            "* write(s) wait to be sent to the Opik server: run opik-eval sync",
        ]
    )
    output = result.stdout.str() + result.stderr.str()
    assert "INTERNALERROR" not in output
    assert "Warning" not in output
    assert "Traceback" not in output
    assert "\x1b" not in output

    opik.clear_faults()
    assert opik_eval(["--store", str(project.store_path), "sync"]) == 0
    attempts = server_trials(opik, project.last_experiment_id())
    assert [(a["item"], a["pending"]) for a in attempts] == [("a", False), ("b", False)]


def test_a_servers_text_is_escaped_with_its_bidirectional_overrides(
    project: Project, opik: OpikTestServer
) -> None:
    # U+202E reverses what follows it on screen: a refusal could make a log line read otherwise.
    refusal = json.dumps({"message": "bad \u202etrace\u2066 \x1b\x07" + "z" * 400})
    opik.answer_next(1, 400, refusal, path_contains="traces/batch")
    project.dataset(items("a"))
    project.eval_test()
    result = project.run("--eval", "-W", "error")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*= eval notices =*",
            "the Opik server refused writes of this session: POST v1/private/traces/batch at * failed with "
            "HTTP 400: bad \\u202etrace\\u2066 \\x1b\\x07zzz*... (* more characters)",
        ]
    )
    with sqlite3.connect(project.store_path) as db:
        errors = [row[0] for row in db.execute("SELECT error FROM outbox WHERE error IS NOT NULL")]
    for text in [result.stdout.str(), *errors]:
        assert "\u202e" not in text
        assert "\u2066" not in text
        assert "\x1b" not in text
        assert "\x07" not in text
    assert errors
    assert all("bad \\u202etrace\\u2066" in error for error in errors)


def echo_of_the_key(at: int) -> str:
    """A 400 body whose message shows the key from character ``at`` of the client's excerpt on:
    past the first few hundred characters, where a message is shortened."""
    return json.dumps({"errors": ["x" * (at - 18) + f" Authorization: {OPIK_KEY} " + "y" * 400]})


def assert_no_part_of_the_key(text: str) -> None:
    for part in (OPIK_KEY[:10], OPIK_KEY[10:20], OPIK_KEY[-10:]):
        assert part not in text


@pytest.mark.parametrize("at", [280, 295])
def test_a_key_echoed_in_a_refusal_at_start_is_masked_before_the_message_is_shortened(
    project: Project, opik: OpikTestServer, at: int
) -> None:
    opik.answer_next(1, 400, echo_of_the_key(at), path_contains="datasets/retrieve")
    project.dataset(items("a"))
    project.eval_test()
    result = project.run("--eval", "-W", "error")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "ERROR: could not create the experiments on the Opik server: POST v1/private/datasets/retrieve at "
            "* failed with HTTP 400: *"
        ]
    )
    output = result.stdout.str() + result.stderr.str()
    assert_no_part_of_the_key(output)
    if at < 300:
        assert "***" in output


def test_a_key_echoed_in_a_refused_write_is_masked_in_the_spool_and_the_terminal(
    project: Project, opik: OpikTestServer
) -> None:
    project.dataset(items("a"))
    project.eval_test()
    opik.answer_next(1, 400, echo_of_the_key(290), path_contains="traces/batch")
    result = project.run("--eval", "-W", "error")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*= eval notices =*",
            f"the Opik server refused writes of this session: POST v1/private/traces/batch at {opik.api_url} "
            "failed with HTTP 400: ['xxx*x Authorization: *** yyy*... (* more characters)",
            "* write(s) were refused by the Opik server (kept in *)",
        ]
    )
    assert_no_part_of_the_key(result.stdout.str() + result.stderr.str())
    with sqlite3.connect(project.store_path) as db:
        errors = [row[0] for row in db.execute("SELECT error FROM outbox WHERE error IS NOT NULL")]
    assert errors
    assert all("failed with HTTP 400" in error and "***" in error for error in errors)
    assert all(len(error) < 1000 for error in errors)  # a shortened message, not the whole body
    assert_no_part_of_the_key("".join(errors))


# -- a spool that cannot be written while what it holds is sent ---------------------------------


FLUSH_ONCE = """
import sys
from pathlib import Path

from pytest_opik_eval.store.opik.config import read_settings
from pytest_opik_eval.store.opik.store import OpikStore

store = OpikStore(read_settings(), Path(sys.argv[1]), create=False, sync_timeout=30)
try:
    print(store.flush())
    for notice in store.notices():
        print(notice)
finally:
    store.close()
"""


@pytest.fixture
def read_only_spool_with_writes_to_send(project: Project, opik: OpikTestServer) -> Iterator[Path]:
    """The default spool, holding writes the server did not take, made read-only (the tests run
    what reads it as a user that file modes apply to)."""
    from test_store_faults import _unprivileged_prefix

    if _unprivileged_prefix() is None:
        pytest.skip("no way to run a command as a user that file modes apply to (unshare --user)")
    project.dataset(items("a", "b"))
    project.eval_test()
    hang_on_trial_writes(opik)
    result = project.run("--eval", "--eval-sync-timeout=0.5")
    result.assert_outcomes(passed=2)
    sync_command(result)  # writes wait to be sent
    opik.clear_faults()
    spool = project.store_path
    spool.chmod(0o444)
    try:
        yield spool
    finally:
        spool.chmod(0o644)


def _run_unprivileged(project: Project, *command: str) -> subprocess.CompletedProcess[str]:
    from test_store_faults import _unprivileged_prefix

    prefix = _unprivileged_prefix()
    assert prefix is not None
    return subprocess.run([*prefix, *command], capture_output=True, text=True, cwd=project.path, timeout=120)


def test_sync_that_cannot_mark_what_it_sent_is_one_line(
    project: Project, opik: OpikTestServer, read_only_spool_with_writes_to_send: Path
) -> None:
    spool = read_only_spool_with_writes_to_send
    cli = "import sys; from pytest_opik_eval.cli import main; sys.exit(main())"
    synced = _run_unprivileged(project, sys.executable, "-c", cli, "--store", str(spool), "sync")
    assert synced.returncode == 2, synced.stderr
    assert synced.stderr == (
        f"opik-eval: cannot write to the eval store {spool}: the file is read-only (permission denied); "
        "make it writable, or point --store at a writable place (what was recorded before is kept)\n"
    )
    spool.chmod(0o644)
    # What was sent but not marked so is sent again: harmless, every write carries its id.
    assert opik_eval(["--store", str(spool), "sync"]) == 0
    attempts = server_trials(opik, project.last_experiment_id())
    assert [(a["item"], a["pending"]) for a in attempts] == [("a", False), ("b", False)]


def test_the_end_of_a_session_that_cannot_mark_what_it_sent_keeps_the_whole_message(
    project: Project, opik: OpikTestServer, read_only_spool_with_writes_to_send: Path
) -> None:
    spool = read_only_spool_with_writes_to_send
    flushed = _run_unprivileged(project, sys.executable, "-c", FLUSH_ONCE, str(spool))
    assert flushed.returncode == 0, flushed.stderr
    # Not "stopped on an unexpected error (StoreUnwritable: ...", cut at 300 characters: the
    # whole line, with its advice.
    assert (
        f"sending to the Opik server stopped: cannot write to the eval store {spool}: the file is "
        "read-only (permission denied); make it writable, or point --eval-store at a writable place "
        "(what was recorded before is kept)"
    ) in flushed.stdout.splitlines()
