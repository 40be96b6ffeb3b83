"""Human labels with the Opik backend, end to end against the Opik-compatible test server: the
judges' calibrations kept in the experiment's metadata, labels in an Opik dataset's items, and the
feedback scores people gave in the Opik UI read as labels."""

from __future__ import annotations

import json
from typing import Any

import httpx
from conftest import Project
from opik_server import OpikTestServer

from pytest_opik_eval.store.opik.annotations import human_value

# A task that says what it was given, and a judge whose score is the item's "judge" field.
LABELLED_TEST = """
import json
import pathlib
import pytest
from pytest_opik_eval.metrics import BaseMetric, ScoreResult

HERE = pathlib.Path(__file__).parent


class Judge(BaseMetric):
    def __init__(self):
        super().__init__(name="correctness")
        self.threshold = 0.5

    def score(self, output, **kwargs):
        return ScoreResult(name=self.name, value=float(output))


@pytest.mark.eval(dataset={dataset}, metrics=[Judge()])
def test_qa(eval_item):
    with open(HERE / "task.log", "a") as log:
        log.write(json.dumps(sorted(eval_item)) + "\\n")
    return {{"output": eval_item["judge"]}}
"""


def judged(project: Project, dataset: str = '"data.jsonl"') -> None:
    project.write("test_eval.py", LABELLED_TEST.format(dataset=dataset))


def row(item_id: str, judge: float, label: object = None) -> dict[str, Any]:
    return {
        "id": item_id,
        "judge": judge,
        **({"labels": {"correctness": label}} if label is not None else {}),
    }


# The judge passes p1, p2 and f1; the labels pass p1, p2 and p3.
FOUR = [row("p1", 1, True), row("p2", 1, True), row("p3", 0, True), row("f1", 1, False)]


def metadata_calibrations(opik: OpikTestServer) -> object:
    [experiment] = opik.experiments.values()
    return experiment["metadata"].get("judge_calibrations")


def test_the_calibrations_go_into_the_experiments_metadata(project: Project, opik: OpikTestServer) -> None:
    project.dataset(FOUR)
    judged(project)
    result, report = project.run_report("--eval")
    result.assert_outcomes(passed=3, failed=1)
    [experiment] = opik.experiments.values()
    metadata = experiment["metadata"]
    # As the JSON report has them, beside what the experiment was created with, which stays.
    assert metadata["judge_calibrations"] == report["experiments"][0]["calibrations"]
    assert {"_opik_resume", "_pytest_opik_eval"} <= set(metadata)
    [found] = metadata["judge_calibrations"]
    assert (found["score"], found["items"], found["label_pass"], found["label_fail"]) == (
        "correctness",
        4,
        3,
        1,
    )
    assert found["agreement"]["estimate"] == 0.5
    assert found["sensitivity"]["estimate"] == 2 / 3
    assert found["specificity"]["estimate"] == 0.0
    assert found["judge"] is None  # not an LLM judge: no identity
    assert found["judged"]["estimate"] == 0.75
    assert opik.invalid_requests == []


def test_an_experiment_without_labels_holds_no_calibrations(project: Project, opik: OpikTestServer) -> None:
    project.dataset([row("a", 1), row("b", 0)])
    judged(project)
    project.run("--eval").assert_outcomes(passed=1, failed=1)
    assert metadata_calibrations(opik) is None
    assert all("metadata" not in r.body for r in opik.find_requests("PATCH", "experiments/"))


def test_an_opik_datasets_labels_are_kept_from_the_task_and_calibrate_the_judge(
    project: Project, opik: OpikTestServer
) -> None:
    opik.create_dataset("qa", [{k: v for k, v in r.items() if k != "id"} for r in FOUR])
    judged(project, '"opik:qa"')
    result, report = project.run_report("--eval")
    result.assert_outcomes(passed=3, failed=1)
    for line in (project.path / "task.log").read_text().splitlines():
        assert json.loads(line) == ["id", "judge"]
    [found] = report["experiments"][0]["calibrations"]
    assert (found["items"], found["label_pass"], found["label_fail"]) == (4, 3, 1)
    assert metadata_calibrations(opik) == [found]


def annotate(
    opik: OpikTestServer, experiment_id: str, scores: dict[str, float], name: str = "correctness"
) -> None:
    """As a person does in the Opik UI: a feedback score on the trace of each item named, through
    the Opik SDK's REST client (the UI's own endpoint, source "ui")."""
    from opik.rest_api import OpikApi

    with httpx.Client(timeout=10) as http:
        api = OpikApi(
            base_url=opik.url.rstrip("/"),
            api_key=opik.api_key,
            workspace_name=opik.workspace,
            httpx_client=http,
        )
        for link in opik.experiment_items:
            trace = opik.traces[link["trace_id"]]
            item = trace["metadata"]["dataset_item_id"]
            if link["experiment_id"] == experiment_id and item in scores:
                api.traces.add_trace_feedback_score(trace["id"], name=name, value=scores[item], source="ui")


def test_scores_people_gave_in_the_opik_ui_are_labels(project: Project, opik: OpikTestServer) -> None:
    # The judge passes p1, p2 and f1 (and u, which nobody labels).
    project.dataset([row("p1", 1), row("p2", 1), row("p3", 0), row("f1", 1), row("u", 1)])
    judged(project)
    project.run("--eval").assert_outcomes(passed=4, failed=1)
    [first] = opik.experiments
    # p3 labelled pass against the judge, f1 fail against it; p2 given again (the server keeps the
    # newer); the judge's own score on u (source "sdk") is no label.
    annotate(opik, first, {"p1": 1, "p2": 0, "p3": 1.0, "f1": 0})
    annotate(opik, first, {"p2": 0.75})
    result, report = project.run_report("--eval", "--eval-labels-from=opik-feedback")
    result.assert_outcomes(passed=4, failed=1)
    for line in (project.path / "task.log").read_text().splitlines():
        assert json.loads(line) == ["id", "judge"]
    [experiment] = report["experiments"]
    [found] = experiment["calibrations"]
    assert (found["score"], found["items"], found["label_pass"], found["label_fail"]) == (
        "correctness",
        4,
        3,
        1,
    )
    assert found["sensitivity"]["estimate"] == 2 / 3
    assert found["specificity"]["estimate"] == 0.0
    assert opik.experiments[experiment["id"]]["metadata"]["judge_calibrations"] == [found]
    # Without the option, the dataset's labels alone: it has none.
    assert project.run_report("--eval")[1]["experiments"][0]["calibrations"] == []
    assert opik.invalid_requests == []


def test_the_datasets_own_label_wins_and_a_ui_score_outside_0_to_1_is_said(
    project: Project, opik: OpikTestServer
) -> None:
    rows = [row("p1", 1, True), row("f1", 1)]
    project.dataset(rows)
    judged(project)
    project.run("--eval").assert_outcomes(passed=2)
    [first] = opik.experiments
    annotate(opik, first, {"p1": 0, "f1": 4})
    result, report = project.run_report("--eval", "--eval-labels-from=opik-feedback")
    [found] = report["experiments"][0]["calibrations"]
    assert (found["items"], found["label_pass"], found["label_fail"]) == (1, 1, 0)
    result.stdout.fnmatch_lines(
        [
            "*--eval-labels-from=opik-feedback: item f1: the score 'correctness' given in the Opik UI on "
            "trace * is 4, not a label (true, false or a number from 0 to 1)*"
        ]
    )


def test_labels_from_opik_feedback_need_the_opik_backend(project: Project) -> None:
    project.dataset(FOUR)
    judged(project)
    result = project.run("--eval", "--eval-labels-from=opik-feedback")
    assert result.ret == 4
    result.stderr.fnmatch_lines(
        [
            "*--eval-labels-from=opik-feedback reads the scores people gave in the Opik UI from the Opik "
            "server: run with --eval-backend=opik*"
        ]
    )


def test_a_servers_scores_by_author_give_the_mean_of_the_ui_ones() -> None:
    # A server that keeps each author's score apart sends their mean, with one of their sources.
    by_author = {
        "judge": {"value": 0.0, "source": "sdk", "last_updated_at": "2026-01-03T00:00:00Z"},
        "ann": {"value": 1.0, "source": "ui", "last_updated_at": "2026-01-01T00:00:00Z"},
        "bob": {"value": 0.5, "source": "ui", "last_updated_at": "2026-01-02T00:00:00Z"},
    }
    score = {"name": "correctness", "value": 0.5, "source": "sdk", "value_by_author": by_author}
    assert human_value(score) == (0.75, "2026-01-02T00:00:00Z")
    assert human_value({**score, "value_by_author": {"judge": by_author["judge"]}}) is None
    assert human_value({"name": "correctness", "value": 1, "source": "ui"}) == (1.0, "")
    assert human_value({"name": "correctness", "value": 1, "source": "online_scoring"}) is None


# An Opik SDK LLM judge as it is, its model a local OpikBaseModel: it finds no hallucination.
OPIK_JUDGE_TEST = """
import json
import pytest
from opik.evaluation.metrics import Hallucination
from opik.evaluation.models import OpikBaseModel


class LocalModel(OpikBaseModel):
    def generate_chat_completion(self, messages, response_format=None, **kwargs):
        return {"role": "assistant", "content": json.dumps({"score": 0.0, "reason": ["grounded"]})}

    def generate_string(self, input, response_format=None, **kwargs):
        raise NotImplementedError

    def generate_provider_response(self, messages, **kwargs):
        raise NotImplementedError


@pytest.mark.eval(dataset="data.jsonl", metrics=[Hallucination(model=LocalModel("local-1"), track=False)])
def test_qa(eval_item):
    return {"output": eval_item["input"], "input": eval_item["input"], "context": ["Paris"]}
"""


def test_an_opik_sdk_judges_calibration_names_the_judge_in_the_metadata(
    project: Project, opik: OpikTestServer
) -> None:
    project.dataset(
        [
            {"id": "a", "input": "Paris", "labels": {"hallucination_metric": False}},
            {"id": "b", "input": "Lyon", "labels": {"hallucination_metric": True}},
        ]
    )
    project.write("test_eval.py", OPIK_JUDGE_TEST)
    result, report = project.run_report("--eval")
    result.assert_outcomes(passed=2)
    [found] = report["experiments"][0]["calibrations"]
    assert (found["score"], found["items"], found["label_pass"], found["label_fail"]) == (
        "hallucination_metric",
        2,
        1,
        1,
    )
    assert found["judge"]  # its identity: the model's name and the prompt
    assert metadata_calibrations(opik) == [found]


def test_a_rescore_judges_the_outputs_people_labelled_against_their_labels(
    project: Project, opik: OpikTestServer
) -> None:
    project.dataset([row("p1", 1), row("f1", 1)])
    judged(project)
    project.run("--eval").assert_outcomes(passed=2)
    [first] = opik.experiments
    annotate(opik, first, {"p1": 1, "f1": 0})
    result, report = project.run_report(f"--eval-rescore={first}", "--eval-labels-from=opik-feedback")
    result.assert_outcomes(passed=2)
    [experiment] = report["experiments"]
    assert experiment["rescore_of"] == first
    [found] = experiment["calibrations"]
    assert (found["items"], found["label_pass"], found["label_fail"]) == (2, 1, 1)
    assert opik.experiments[experiment["id"]]["metadata"]["judge_calibrations"] == [found]
