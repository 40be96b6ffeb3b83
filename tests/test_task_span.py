"""A metric whose score() names ``task_span`` gets the trial's spans as the Opik SDK's SpanModel
tree, as under ``opik.evaluate``: Opik metrics written against it work unchanged."""

from __future__ import annotations

import pytest
from conftest import Project, offline_opik

APP = """
import opik
import pytest
from opik.evaluation.metrics import base_metric, score_result
from pytest_opik_eval.tracing import trace


@opik.track(type="tool")
def search(q):
    return ["a result"]


def agent(question):
    search(question)
    with trace.span("rerank", type="tool", input={"k": 3}) as span:
        span.output = {"kept": 1}
    return "an answer"


class ToolSpans(base_metric.BaseMetric):
    # An Opik metric over the task span, as opik.evaluate() runs one.
    def __init__(self):
        super().__init__(name="tool_spans", track=False)

    def score(self, task_span, **ignored):
        def walk(span):
            yield span
            for child in span.spans:
                yield from walk(child)

        tools = [s.name for s in walk(task_span) if s.type == "tool"]
        return score_result.ScoreResult(
            name=self.name, value=float(tools == ["search", "rerank"]), reason=f"{task_span.name}: {tools}"
        )


@pytest.mark.eval(dataset=[{"id": "q1", "input": "what?"}], metrics=[ToolSpans()])
def test_agent(eval_item):
    return agent(eval_item["input"])
"""


def test_an_opik_metric_over_task_span_works_unchanged(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    offline_opik(project, monkeypatch)
    project.write("test_agent.py", APP)
    result, report = project.run_report("--eval")
    result.assert_outcomes(passed=1)
    (score,) = report["experiments"][0]["trials"][0]["scores"]
    assert (score["value"], score["reason"]) == (1.0, "test_agent: ['search', 'rerank']")
