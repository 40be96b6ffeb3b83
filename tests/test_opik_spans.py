"""The spans of an ``@opik.track`` app with the Opik backend: each trial's spans reach the Opik
server in the SDK's format, under the trial's trace, as ``opik.evaluate()`` lays them out; they
go through the spool, so a server away in the middle loses none and ``opik-eval sync`` sends
them; and the Opik SDK reads them back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import opik_server
import pytest
from conftest import Project, opik_days_behind
from opik_server import OpikTestServer

import pytest_opik_eval.ids
from pytest_opik_eval.cli import main as opik_eval

LABELS = [f"item-{i}" for i in range(6)]
# The task span, the app's three (agent, retrieve, fake_llm), metrics_calculation and equals_metric.
SPANS_PER_TRIAL = 6

APP = """
import asyncio

import opik
from opik import opik_context


@opik.track(type="llm")
def fake_llm(prompt):
    opik_context.update_current_span(
        model="gpt-4o-mini",
        provider="openai",
        usage={"prompt_tokens": len(prompt), "completion_tokens": 2, "total_tokens": len(prompt) + 2},
        total_cost=0.25,
    )
    return prompt


@opik.track(type="tool")
def retrieve(question):
    return [question]


@opik.track
def agent(question):
    return fake_llm(retrieve(question)[0])


@opik.track(name="agent")
async def agent_async(question):
    await asyncio.sleep(0)
    return fake_llm(retrieve(question)[0])
"""

TEST = """
import pytest
from pytest_opik_eval.metrics import Equals
from app import agent


@pytest.mark.eval(dataset="data.jsonl", metrics=[Equals()], scoring_key_mapping={"reference": "expected_output"})
def test_qa(eval_item):
    {behaviour}
    return agent(eval_item["input"]["text"])
"""


@pytest.fixture
def traced(project: Project, opik: OpikTestServer) -> Project:
    project.dataset([{"id": label, "input": {"text": label}, "expected_output": label} for label in LABELS])
    project.write("app.py", APP)
    return project


def spans_by_item(server: OpikTestServer, experiment_id: str) -> dict[str, tuple[str, list[dict[str, Any]]]]:
    """Per dataset item: its completed trace's id and the spans on the server under that trace."""
    traces = server.traces
    spans = list(server.spans.values())
    found = {}
    for link in server.experiment_items:
        if link["experiment_id"] != experiment_id:
            continue
        trace = traces[link["trace_id"]]
        item = trace["metadata"]["dataset_item_id"]
        found[item] = (trace["id"], [span for span in spans if span["trace_id"] == trace["id"]])
    return found


def check_tree(label: str, trace_id: str, spans: list[dict[str, Any]]) -> None:
    by_id = {span["id"]: span for span in spans}
    layout = sorted(
        (
            span["name"],
            by_id[span["parent_span_id"]]["name"] if span.get("parent_span_id") else None,
            span["type"],
        )
        for span in spans
    )
    assert layout == [
        ("agent", "test_qa", "general"),
        ("equals_metric", "metrics_calculation", "general"),
        ("fake_llm", "agent", "llm"),
        ("metrics_calculation", None, "general"),
        ("retrieve", "agent", "tool"),
        ("test_qa", None, "general"),
    ], label
    assert {(span["trace_id"], span["project_name"], span["source"]) for span in spans} == {
        (trace_id, "pytest-evals", "experiment")
    }
    task = next(span for span in spans if span["name"] == "test_qa")
    # As opik.evaluate()'s task span: the task's input and what it returned.
    assert task["input"] == {"eval_item": {"id": label, "input": {"text": label}, "expected_output": label}}
    assert task["output"] == {"output": label}
    # As opik.evaluate() lays out the scoring: beside the task span, tagged as the SDK's own (the
    # Opik UI folds it), and one span per metric under it, with the score's arguments and result.
    scoring = next(span for span in spans if span["name"] == "metrics_calculation")
    assert scoring["tags"] == ["__opik_eval_internal__"]
    assert task["end_time"] <= scoring["start_time"]
    metric = next(span for span in spans if span["name"] == "equals_metric")
    assert metric["input"] == {
        "id": label,
        "input": {"text": label},
        "expected_output": label,
        "output": label,
        "reference": label,
    }
    assert metric["output"] == {"output": {"name": "equals_metric", "value": 1.0, "scoring_failed": False}}
    [llm] = [span for span in spans if span["type"] == "llm"]
    assert (llm["model"], llm["provider"], llm["total_estimated_cost"]) == ("gpt-4o-mini", "openai", 0.25)
    # As the SDK sends it: Opik's names, and the provider's own under original_usage.
    assert {k: v for k, v in llm["usage"].items() if not k.startswith("original_usage.")} == {
        "prompt_tokens": len(label),
        "completion_tokens": 2,
        "total_tokens": len(label) + 2,
    }
    assert llm["input"] == {"prompt": label}
    assert llm["output"] == {"output": label}
    assert all(span["start_time"] <= span["end_time"] for span in spans)


@pytest.mark.parametrize(
    "args", [[], ["--eval-threads=3"], ["-p", "xdist", "-n", "2"]], ids=["serial", "threads", "xdist"]
)
def test_each_trials_spans_reach_the_server_under_its_trace(
    traced: Project, opik: OpikTestServer, args: list[str]
) -> None:
    traced.write("test_app.py", TEST.replace("{behaviour}", "pass"))
    traced.run("--eval", "-W", "error", *args).assert_outcomes(passed=len(LABELS))
    experiment_id = traced.last_experiment_id()
    found = spans_by_item(opik, experiment_id)
    assert sorted(found) == LABELS
    for label, (trace_id, spans) in found.items():
        check_tree(label, trace_id, spans)
    # The app's spans went nowhere else: no trace of their own on the server, none orphaned.
    assert set(opik.traces) == {trace_id for trace_id, _ in found.values()}
    assert len(opik.spans) == SPANS_PER_TRIAL * len(LABELS)
    # The spool keeps the same spans.
    local = {t.dataset_item_id: {s.id for s in t.spans} for t in traced.trials(experiment_id)}
    assert local == {label: {s["id"] for s in spans} for label, (_, spans) in found.items()}
    # The trial records its spans after its output (the metric spans come last): the task span
    # is sent once, already carrying the output, not first without it and then again. (The
    # pytest-xdist controller sends again what a worker had in flight at its end: the same write.)
    labels = {
        next(s["id"] for s in spans if s["name"] == "test_qa"): label for label, (_, spans) in found.items()
    }
    sent = [
        span
        for request in opik.find_requests("POST", "spans/batch")
        if request.status is not None and request.status < 300
        for span in request.body["spans"]
        if span["id"] in labels
    ]
    assert {span["id"] for span in sent} == set(labels)
    assert all(span.get("output") == {"output": labels[span["id"]]} for span in sent)
    if "xdist" not in args:
        assert len(sent) == len(labels)


ASYNC_TEST = """
import pytest
from pytest_opik_eval.metrics import Equals
from app import agent_async


@pytest.mark.eval(dataset="data.jsonl", metrics=[Equals()], scoring_key_mapping={"reference": "expected_output"})
async def test_qa(eval_item):
    return await agent_async(eval_item["input"]["text"])
"""


def test_async_trials_spans_reach_the_server_under_their_traces(
    traced: Project, opik: OpikTestServer
) -> None:
    # pytest-asyncio runs each coroutine in a context it copied before this plugin's hooks ran:
    # the trial's trace is entered inside the coroutine. Warnings shown, not errors: "-p asyncio"
    # makes pytest warn that the module asyncio (the standard library's) is already imported.
    traced.pytester.makeini(
        "[pytest]\nfilterwarnings = default\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n"
    )
    traced.write("test_app.py", ASYNC_TEST)
    traced.run("-p", "asyncio", "--eval").assert_outcomes(passed=len(LABELS))
    found = spans_by_item(opik, traced.last_experiment_id())
    assert sorted(found) == LABELS
    for label, (trace_id, spans) in found.items():
        check_tree(label, trace_id, spans)
    assert set(opik.traces) == {trace_id for trace_id, _ in found.values()}
    assert len(opik.spans) == SPANS_PER_TRIAL * len(LABELS)


def test_a_failed_task_sends_its_spans_with_the_error(traced: Project, opik: OpikTestServer) -> None:
    traced.write(
        "test_app.py",
        TEST.replace(
            "{behaviour}", "if eval_item['id'] == 'item-1':\n        agent('x'); raise ValueError('broke')"
        ),
    )
    traced.run("--eval").assert_outcomes(passed=len(LABELS) - 1, failed=1)
    trace_id, spans = spans_by_item(opik, traced.last_experiment_id())["item-1"]
    task = next(span for span in spans if span["name"] == "test_qa")
    assert task["error_info"]["exception_type"] == "ValueError"
    assert "output" not in task
    assert sorted(span["name"] for span in spans) == ["agent", "fake_llm", "retrieve", "test_qa"]


def test_spans_wait_in_the_spool_while_the_server_is_away_and_sync_sends_them(
    traced: Project, opik: OpikTestServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(opik_server, "CURRENT", opik, raising=False)
    traced.write(
        "test_app.py",
        TEST.replace(
            "{behaviour}", "if eval_item['id'] == 'item-2': __import__('opik_server').CURRENT.go_down()"
        ),
    )
    result = traced.run("--eval", "--eval-sync-timeout=1")
    result.assert_outcomes(passed=len(LABELS))
    result.stdout.fnmatch_lines(["* write(s) wait to be sent to the Opik server: run opik-eval sync"])
    experiment_id = traced.last_experiment_id()
    assert len(spans_by_item(opik, experiment_id)) < len(LABELS)

    opik.come_back()
    assert opik_eval(["--store", str(traced.store_path), "sync"]) == 0
    found = spans_by_item(opik, experiment_id)
    assert sorted(found) == LABELS
    for label, (trace_id, spans) in found.items():
        check_tree(label, trace_id, spans)
    assert len(opik.spans) == SPANS_PER_TRIAL * len(LABELS)


def test_the_opik_sdk_reads_the_spans_back(traced: Project, opik: OpikTestServer) -> None:
    traced.write("test_app.py", TEST.replace("{behaviour}", "pass"))
    traced.run("--eval").assert_outcomes(passed=len(LABELS))
    found = spans_by_item(opik, traced.last_experiment_id())
    trace_ids = {label: trace_id for label, (trace_id, _) in found.items()}
    script = textwrap.dedent(
        f"""
        import json, opik
        client = opik.Opik()
        read = {{}}
        for label, trace_id in {trace_ids!r}.items():
            spans = client.search_spans(project_name="pytest-evals", trace_id=trace_id)
            by_id = {{s.id: s for s in spans}}
            read[label] = sorted(
                [s.name, by_id[s.parent_span_id].name if s.parent_span_id else None, s.type,
                 (s.usage or {{}}).get("total_tokens")]
                for s in spans
            )
        client.end()
        print(json.dumps(read))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], env=os.environ.copy(), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    read = json.loads(done.stdout.strip().splitlines()[-1])
    assert read == {
        label: [
            ["agent", "test_qa", "general", None],
            ["equals_metric", "metrics_calculation", "general", None],
            ["fake_llm", "agent", "llm", len(label) + 2],
            ["metrics_calculation", None, "general", None],
            ["retrieve", "agent", "tool", None],
            ["test_qa", None, "general", None],
        ]
        for label in LABELS
    }


def test_spans_spooled_for_days_are_sent_under_new_ids(
    project: Project, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Recorded as if two days ago, the server (which checks the UUID v7 time window as Opik
    # Cloud does) away once the experiment is made: the writes are sent under new ids.
    with opik_days_behind(project, monkeypatch, tmp_path) as server:
        project.dataset(
            [{"id": label, "input": {"text": label}, "expected_output": label} for label in LABELS]
        )
        project.write("app.py", APP)
        project.write("test_app.py", TEST.replace("{behaviour}", "pass"))
        result = project.run("--eval", "--eval-sync-timeout=1")
        result.assert_outcomes(passed=len(LABELS))
        monkeypatch.setattr(pytest_opik_eval.ids, "_clock", time.time_ns)

        server.come_back()
        assert opik_eval(["--store", str(project.store_path), "sync"]) == 0
        assert server.invalid_requests == []
        found = spans_by_item(server, project.last_experiment_id())
        assert sorted(found) == LABELS
        for label, (trace_id, spans) in found.items():
            check_tree(label, trace_id, spans)
        assert len(server.spans) == SPANS_PER_TRIAL * len(LABELS)
