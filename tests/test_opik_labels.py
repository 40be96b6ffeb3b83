"""Human labels with the Opik backend, end to end against the Opik-compatible test server: the
judges' calibrations kept in the experiment's metadata, labels in an Opik dataset's items, and the
feedback scores people gave in the Opik UI read as labels."""

from __future__ import annotations

import json
from typing import Any

from conftest import Project
from opik_server import OpikTestServer

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


def metadata_calibrations(opik: OpikTestServer) -> list[Any] | None:
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
