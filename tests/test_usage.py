"""Latency, tokens and cost per trial and per experiment: in the store, the JSON report and the
eval summary. Usage is what the spans reported (the app's under the task span, the judges' under
the metric spans, apart); latency is measured for every trial, with or without the Opik SDK."""

from __future__ import annotations

import importlib.util
import json
import re
import sqlite3
from typing import Any

import pytest
from conftest import Project, offline_opik

from pytest_opik_eval.cli import main as opik_eval
from pytest_opik_eval.run.pricing import NOT_INSTALLED
from pytest_opik_eval.store.local import rows

LABELS = ["a", "b", "c"]
# Why the app's call that reports no cost has none: no price table knows its model, or there is
# no price table (the cost extra is not installed, or Python 3.10).
UNPRICED = "unknown model 'house-llm-1'" if importlib.util.find_spec("genai_prices") else NOT_INSTALLED

APP = """
import opik
from opik import opik_context


@opik.track(type="llm")
def llm(prompt, prompt_tokens, completion_tokens, cost=None, model="gpt-4o-mini"):
    opik_context.update_current_span(
        model=model,
        provider="openai",
        usage={
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
        **({} if cost is None else {"total_cost": cost}),
    )
    return prompt


@opik.track
def agent(question):
    llm(question, 10, 2, cost=0.001)  # reports its cost
    return llm(question, 5, 1, model="house-llm-1")  # does not, and no price table knows its model


@opik.track(type="llm")
def judge_llm(text):
    opik_context.update_current_span(
        usage={"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}, total_cost=0.0005
    )
    return 1.0
"""

TEST = """
import pytest
from app import agent, judge_llm
from pytest_opik_eval.metrics import BaseMetric, Equals, ScoreResult


class Judge(BaseMetric):
    def score(self, output):
        return ScoreResult(name=self.name, value=judge_llm(output))


@pytest.mark.eval(
    dataset="data.jsonl", metrics=[Equals(), Judge("judge")], scoring_key_mapping={"reference": "expected_output"}
)
def test_qa(eval_item):
    return agent(eval_item["input"]["text"])
"""


@pytest.fixture
def traced(project: Project, monkeypatch: pytest.MonkeyPatch) -> Project:
    offline_opik(project, monkeypatch)
    project.dataset([{"id": label, "input": {"text": label}, "expected_output": label} for label in LABELS])
    project.write("app.py", APP)
    project.write("test_eval.py", TEST)
    return project


def test_usage_of_the_app_and_of_the_judges_apart(traced: Project) -> None:
    result, report = traced.run_report("--eval")
    result.assert_outcomes(passed=3)
    (experiment,) = report["experiments"]
    for trial in experiment["trials"]:
        # Two app calls: 10 + 5 in, 2 + 1 out, one of them priced; one judge call.
        assert trial["usage"] == {
            "app": {
                "prompt_tokens": 15,
                "completion_tokens": 3,
                "total_tokens": 18,
                "cost": 0.001,
                "spans": 2,
                "unpriced": {UNPRICED: 1},
            },
            "judge": {
                "prompt_tokens": 100,
                "completion_tokens": 10,
                "total_tokens": 110,
                "cost": 0.0005,
                "spans": 1,
                "unpriced": {},
            },
        }
        latency = trial["latency"]
        assert latency["task_seconds"] > 0
        assert set(latency["metric_seconds"]) == {"equals_metric", "judge"}
    summary = experiment["summary"]
    assert summary["usage"]["app"] == {
        "prompt_tokens": 45,
        "completion_tokens": 9,
        "total_tokens": 54,
        "cost": pytest.approx(0.003),
        "spans": 6,
        "unpriced": {UNPRICED: 3},
    }
    assert summary["usage"]["judge"]["cost"] == pytest.approx(0.0015)
    assert summary["usage"]["judge"]["prompt_tokens"] == 300
    assert summary["latency"]["trials"] == 3
    assert 0 < summary["latency"]["p50"] <= summary["latency"]["p95"] <= summary["latency"]["max"]
    result.stdout.fnmatch_lines(
        [
            "test_qa (test_eval.py::test_qa)",
            "  latency p50 * ms  p95 * ms   tokens 45 in / 9 out   cost $0.003",
            f"  (3 spans unpriced: {UNPRICED})",
            "  judges:   tokens 300 in / 30 out   cost $0.0015",
            "  metric *",
        ]
    )


def test_latency_in_the_report_and_summary_without_opik(project: Project) -> None:
    project.dataset([{"id": label, "input": {"text": label}, "expected_output": label} for label in LABELS])
    project.eval_test(imports="import time", behaviour="time.sleep(0.05)")
    # In a process of its own: this one has imported the Opik SDK.
    result, report = project.run_report("--eval", subprocess=True)
    result.assert_outcomes(passed=3)
    (experiment,) = report["experiments"]
    for trial in experiment["trials"]:
        assert trial["latency"]["task_seconds"] >= 0.05
        assert set(trial["latency"]["metric_seconds"]) == {"equals_metric"}
        assert trial["usage"] is None
    latency = experiment["summary"]["latency"]
    assert 0.05 <= latency["p50"] <= latency["p95"] <= latency["max"]
    assert experiment["summary"]["usage"] is None
    lines = [line for line in result.stdout.lines if line.startswith("  latency ")]
    assert len(lines) == 1, lines
    assert "tokens" not in lines[0], lines
    assert "cost" not in lines[0], lines
    assert len(lines[0]) <= 80


def test_the_cost_line_stays_within_80_columns() -> None:
    from pytest_opik_eval.reports.terminal import cost_lines
    from pytest_opik_eval.verdict.model import ExperimentSummary, LatencySummary, Usage, UsageTotals
    from pytest_opik_eval.verdict.usage import percentile

    big = UsageTotals(
        prompt_tokens=123_456_789, completion_tokens=98_765_432, total_tokens=1, cost=12_345.678
    )
    summary = ExperimentSummary(
        trials=1, completed=1, pending=0, passed=1, failed=0, pass_rate=1.0, metrics={}
    )
    summary.latency = LatencySummary(trials=20, p50=1.23, p95=345.6, max=400.0)
    summary.usage = Usage(app=big, judge=UsageTotals(prompt_tokens=10, completion_tokens=1, cost=0.00001))
    assert cost_lines(summary) == [
        "  latency p50 1.2 s  p95 346 s   tokens 123,456,789 in / 98,765,432 out",
        "  cost $12,345.68",
        "  judges:   tokens 10 in / 1 out   cost $0.00001",
    ]
    # Nearest rank: a measured value, p95 of 20 is the 19th.
    assert percentile([float(x) for x in range(1, 21)], 95) == 19.0
    assert percentile([float(x) for x in range(1, 21)], 50) == 10.0
    assert percentile([7.0], 95) == 7.0


# -- in the reports: the slowest and most expensive trials, JUnit, the step summary ------------

COSTLY_APP = """
import time

import opik
from opik import opik_context

COSTS = {"a": 0.001, "b": 0.004, "c": 0.002, "d": 0.003, "e": 0.0005}
DELAYS = {"a": 0.0, "b": 0.0, "c": 0.2, "d": 0.0, "e": 0.1}


@opik.track(type="llm")
def agent(question):
    time.sleep(DELAYS[question])
    opik_context.update_current_span(
        model="house-llm-1",
        usage={"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12},
        total_cost=COSTS[question],
    )
    return question
"""


@pytest.fixture
def costly(project: Project, monkeypatch: pytest.MonkeyPatch) -> Project:
    offline_opik(project, monkeypatch)
    labels = ["a", "b", "c", "d", "e"]
    project.dataset([{"id": label, "input": {"text": label}, "expected_output": label} for label in labels])
    project.write("app.py", COSTLY_APP)
    project.eval_test(imports="from app import agent", behaviour="return agent(item['input']['text'])")
    return project


def test_the_summary_names_the_slowest_and_most_expensive_trials(costly: Project) -> None:
    result = costly.run("--eval")
    result.assert_outcomes(passed=5)
    result.stdout.fnmatch_lines(
        [
            "  latency p50 * ms  p95 * ms   tokens 50 in / 10 out   cost $0.0105",
            "  slowest:   * ms   * ms   * ms",
            "  most expensive:   b $0.004   d $0.003   c $0.002",
            "  metric *",
        ]
    )
    (slowest,) = [line for line in result.stdout.lines if line.startswith("  slowest:")]
    # the two that sleep are among the three slowest, whatever else the machine was doing
    assert {"c", "e"} <= {part.split()[0] for part in slowest.split("   ")[1:]}, slowest
    assert len(slowest) <= 80


def test_three_trials_name_no_slowest(traced: Project) -> None:
    result = traced.run("--eval")
    result.assert_outcomes(passed=3)
    # three trials: the slowest three would be all of them
    assert not [line for line in result.stdout.lines if line.startswith(("  slowest:", "  most expensive:"))]


def test_junit_and_step_summary_carry_latency_tokens_and_cost(
    traced: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    import xml.etree.ElementTree as ET

    summary_path = traced.path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary_path))
    result, report = traced.run_report("--eval", "--junitxml=junit.xml")
    result.assert_outcomes(passed=3)
    suite = ET.parse(traced.path / "junit.xml").getroot().find("testsuite")
    assert suite is not None
    props = {str(p.get("name")): str(p.get("value")) for p in suite.findall("properties/property")}
    latency = report["experiments"][0]["summary"]["latency"]
    assert props["eval.test_qa.latency.p50"] == f"{latency['p50']:.6g}"
    assert props["eval.test_qa.latency.p95"] == f"{latency['p95']:.6g}"
    assert props["eval.test_qa.latency.max"] == f"{latency['max']:.6g}"
    assert {k: v for k, v in props.items() if ".usage." in k} == {
        "eval.test_qa.usage.app.prompt_tokens": "45",
        "eval.test_qa.usage.app.completion_tokens": "9",
        "eval.test_qa.usage.app.total_tokens": "54",
        "eval.test_qa.usage.app.cost": "0.003",
        "eval.test_qa.usage.app.unpriced_spans": "3",
        "eval.test_qa.usage.judge.prompt_tokens": "300",
        "eval.test_qa.usage.judge.completion_tokens": "30",
        "eval.test_qa.usage.judge.total_tokens": "330",
        "eval.test_qa.usage.judge.cost": "0.0015",
    }
    text = summary_path.read_text()
    line = next(line for line in text.splitlines() if line.startswith("latency p50 "))
    assert re.fullmatch(
        r"latency p50 \d+ ms, p95 \d+ ms · app: 45 tokens in / 9 out, cost \$0\.003 \(3 spans unpriced\) · "
        r"judges: 300 tokens in / 30 out, cost \$0\.0015",
        line,
    ), line


class _CountingParse:
    """The store's spans TypeAdapter, counting the JSON texts it parses."""

    def __init__(self, adapter: Any) -> None:
        self.adapter = adapter
        self.parsed = 0

    def validate_json(self, data: Any) -> Any:
        self.parsed += 1
        return self.adapter.validate_json(data)

    def dump_json(self, *args: Any, **kwargs: Any) -> Any:
        return self.adapter.dump_json(*args, **kwargs)


APP_USAGE = {
    "prompt_tokens": 45,
    "completion_tokens": 9,
    "total_tokens": 54,
    "cost": pytest.approx(0.003),
    "spans": 6,
    "unpriced": {UNPRICED: 3},
}


def test_the_session_end_reads_no_spans_unless_the_html_report_shows_them(
    traced: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The usage is summed when the spans are recorded: the end of a session (the verdict, the
    # gates, the summary, the JSON report) reads the sums, not 100,000 trials' spans.
    counting = _CountingParse(rows._spans_json)
    monkeypatch.setattr(rows, "_spans_json", counting)
    result, report = traced.run_report("--eval", "--eval-max-cost=1")
    result.assert_outcomes(passed=3)
    assert report["experiments"][0]["summary"]["usage"]["app"] == APP_USAGE
    result.stdout.fnmatch_lines(["  latency p50 * ms  p95 * ms   tokens 45 in / 9 out   cost $0.003"])
    assert counting.parsed == 0
    # The HTML report's span trees are the spans themselves.
    traced.run("--eval", "--eval-html=report.html").assert_outcomes(passed=3)
    assert counting.parsed == 3


def test_a_store_without_usage_sums_has_its_usage_read_from_its_spans(
    traced: Project, capsys: pytest.CaptureFixture[str]
) -> None:
    traced.run("--eval").assert_outcomes(passed=3)
    # As an earlier version wrote it: spans, and no sums (the table is made again, empty, when
    # this version opens the store).
    with sqlite3.connect(traced.store_path) as db:
        db.execute("DROP TABLE IF EXISTS attempt_usage")
    db.close()
    capsys.readouterr()
    assert opik_eval(["--store", str(traced.store_path), "export", "last"]) == 0
    exported = json.loads(capsys.readouterr().out)
    (experiment,) = exported["experiments"]
    assert experiment["summary"]["usage"]["app"] == APP_USAGE
    assert experiment["summary"]["usage"]["judge"]["prompt_tokens"] == 300
    assert {t["usage"]["app"]["total_tokens"] for t in experiment["trials"]} == {18}
