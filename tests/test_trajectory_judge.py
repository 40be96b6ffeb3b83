"""TrajectoryJudge end to end: an LLM judge of an agent's tool calls (its model a local function
that reads the prompt as a model would), its scores cached by what the calls say rather than by
their span ids, its bad answers a failed score that says why; and the HTML report's view of a
ToolSequence: the expected calls beside the calls made."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import Project
from test_trajectory import MANUAL, PLANS, agent_project

from pytest_opik_eval.metrics import TrajectoryJudge

# The judge's model: passes a trajectory that fetched the order before refunding; it sees the
# calls as the prompt lists them ("2. fetch_order({"id": 7}) -> ...").
JUDGE_TEST = """
import json
import re

import pytest
from pytest_opik_eval.metrics import TrajectoryJudge
from app import agent


def model(prompt):
    calls = re.findall(r"^\\d+\\. (\\w+)\\(", prompt, re.MULTILINE)
    if "NONSENSE" in prompt:
        return "I cannot say."
    fetched = "fetch_order" in calls and "refund" in calls and calls.index("fetch_order") < calls.index("refund")
    return json.dumps({{"score": 1.0 if fetched else 0.0, "reason": "order fetched first" if fetched else "refund before fetching"}})


@pytest.mark.eval(dataset="data.jsonl", metrics=[TrajectoryJudge("{criteria}", model)])
def test_agent(eval_item):
    return agent(eval_item["plan"])
"""


def judged(project: Project, criteria: str = "the order is fetched before it is refunded") -> Project:
    agent_project(project, MANUAL)
    project.write("test_agent.py", JUDGE_TEST.format(criteria=criteria))
    return project


def scores(report: dict[str, Any]) -> dict[str, tuple[float, str | None, bool]]:
    (experiment,) = report["experiments"]
    return {
        t["dataset_item_id"]: next(
            (s["value"], s["reason"], s["scoring_failed"])
            for s in t["scores"]
            if s["name"] == "trajectory_judge"
        )
        for t in experiment["trials"]
    }


def test_a_trajectory_judge_scores_the_calls_and_is_cached_by_what_they_say(project: Project) -> None:
    judged(project)
    result, report = project.run_report("--eval", "--eval-judge-cache=on")
    # wrong_order refunds after fetching too: the judge's criteria are not the sequence's.
    result.assert_outcomes(passed=4, failed=1)
    found = scores(report)
    assert found["right"] == (1.0, "order fetched first", False)
    assert found["missing"] == (0.0, "refund before fetching", False)
    assert report["judge_cache"]["scored"] == len(PLANS)
    # A second run makes new spans (new span ids) with the same calls: every score is a hit.
    again, report = project.run_report("--eval", "--eval-judge-cache=on")
    assert report["judge_cache"]["hits"] == len(PLANS)
    assert scores(report) == found


def test_a_judge_answer_without_a_score_fails_the_score_saying_so(project: Project) -> None:
    judged(project, criteria="NONSENSE")
    result, report = project.run_report("--eval")
    value, reason, failed = scores(report)["right"]
    assert failed is True
    assert reason == (
        "MetricComputationError: TrajectoryJudge: the model's answer has no "
        '{"score": 0..1} object: I cannot say.'
    )


@pytest.mark.parametrize(
    ("criteria", "model", "message"),
    [
        ("", print, "TrajectoryJudge: criteria must be a non-empty str: what a good trajectory does"),
        (
            "fine",
            42,
            "TrajectoryJudge: model=int is neither an Opik model (with generate_string) nor a callable",
        ),
    ],
)
def test_bad_arguments_are_refused(criteria: str, model: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        TrajectoryJudge(criteria, model)


def test_an_opik_model_is_asked_through_generate_string() -> None:
    class Model:
        def generate_string(self, input: str, **kwargs: Any) -> str:
            assert "1. search" in input
            return 'Sure. {"score": 0.75, "reason": "mostly"}'

    judge = TrajectoryJudge("criteria", Model())
    result = judge.score(tool_calls=["search"], input="q", output="a")
    assert (result.value, result.reason) == (0.75, "mostly")
