"""A metric whose score() names ``task_span`` gets the trial's spans as the Opik SDK's SpanModel
tree, as under ``opik.evaluate``: Opik metrics written against it work unchanged."""

from __future__ import annotations

from typing import Any

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


JUDGED = APP.replace(
    "class ToolSpans(base_metric.BaseMetric):",
    """class SpanJudge(base_metric.BaseMetric):
    judge = True  # an LLM judge of the task span: cached by what the spans say

    def __init__(self):
        super().__init__(name="span_judge", track=False)

    def score(self, task_span, **ignored):
        return score_result.ScoreResult(name=self.name, value=float(len(task_span.spans) == 2))


class ToolSpans(base_metric.BaseMetric):""",
).replace("metrics=[ToolSpans()]", "metrics=[SpanJudge()]")


def test_a_judge_of_the_task_span_is_cached_by_what_its_spans_say(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    offline_opik(project, monkeypatch)
    project.write("test_agent.py", JUDGED)
    _, first = project.run_report("--eval", "--eval-judge-cache=on")
    assert first["judge_cache"]["scored"] == 1
    # New spans, new span ids and times: the same tree, a hit.
    _, second = project.run_report("--eval", "--eval-judge-cache=on")
    assert (second["judge_cache"]["hits"], second["judge_cache"]["scored"]) == (1, 0)


def test_a_task_spans_cache_form_leaves_out_the_provider_call_ids_and_keeps_the_arguments() -> None:
    from pytest_opik_eval._compat_opik import span_tree
    from pytest_opik_eval.metrics.tool_calls import stable

    def tree(call_id: str, order: int) -> Any:
        answer = {
            "choices": [
                {
                    "message": {
                        "tool_calls": [
                            {
                                "id": call_id,
                                "type": "function",
                                "function": {"name": "refund", "arguments": "{}"},
                            }
                        ]
                    }
                }
            ]
        }
        follow_up = {"messages": [{"role": "tool", "tool_call_id": call_id, "content": "done"}]}
        spans = [
            {
                "id": f"s1-{call_id}",
                "parent_span_id": "root",
                "type": "llm",
                "name": "chat",
                "output": answer,
            },
            {
                "id": f"s2-{call_id}",
                "parent_span_id": "root",
                "type": "tool",
                "name": "refund",
                "input": {"id": order},
            },
            {
                "id": f"s3-{call_id}",
                "parent_span_id": "root",
                "type": "llm",
                "name": "chat",
                "input": follow_up,
            },
        ]
        return span_tree({"id": "root", "name": "test_agent", "start_time": 0.0}, spans)

    assert stable(tree("call_abc", 7)) == stable(tree("call_xyz", 7))  # new ids each live run
    assert stable(tree("call_abc", 7)) != stable(tree("call_abc", 8))  # a tool's own "id" argument

    def gemini(call_id: str, order: int) -> Any:
        # Gemini's call and its answer, their ids inside the parts (camel case on the wire, snake
        # case as track_genai logs them); the call's own "id" argument stays.
        call = {"functionCall": {"id": call_id, "name": "refund", "args": {"id": order}}}
        answer = {"function_response": {"id": call_id, "name": "refund", "response": {"id": order}}}
        spans = [
            {
                "id": f"s1-{call_id}",
                "parent_span_id": "root",
                "type": "llm",
                "name": "generate_content",
                "input": {"contents": [{"role": "user", "parts": [answer]}]},
                "output": {"candidates": [{"content": {"role": "model", "parts": [call]}}]},
            }
        ]
        return span_tree({"id": "root", "name": "test_agent", "start_time": 0.0}, spans)

    assert stable(gemini("fc_abc", 7)) == stable(gemini("fc_xyz", 7))
    assert stable(gemini("fc_abc", 7)) != stable(gemini("fc_abc", 8))
