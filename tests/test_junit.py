"""The JUnit XML's suite properties: each experiment's aggregates with their intervals, its gates
with what they rest on, and the comparison with the baseline."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest
from conftest import Project
from test_report import ab_runs


def suite_properties(project: Project) -> dict[str, str]:
    suite = ET.parse(project.path / "junit.xml").getroot().find("testsuite")
    assert suite is not None
    return {str(p.get("name")): str(p.get("value")) for p in suite.findall("properties/property")}


def interval(value: str) -> tuple[float, float]:
    match = re.fullmatch(r"(.+)\.\.(.+)@95%", value)
    assert match is not None, value
    return float(match[1]), float(match[2])


def test_suite_properties_carry_the_evidence(project: Project) -> None:
    result, report = ab_runs(project, "--junitxml=junit.xml", "--eval-fail-under=equals_metric=0.9")
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # the mean, 0.812, is below 0.9
    props = suite_properties(project)
    summary = report["experiments"][0]["summary"]

    # each interval is one property, next to its estimate, with the report's numbers
    assert props["eval.test_qa.equals_metric.mean"] == "0.8125"
    mean = summary["metrics"]["equals_metric"]["interval"]
    assert props["eval.test_qa.equals_metric.mean.ci"] == f"{mean['low']:.6g}..{mean['high']:.6g}@95%"
    low, high = interval(props["eval.test_qa.equals_metric.mean.ci"])
    assert low < 0.8125 < high
    assert props["eval.test_qa.pass_rate"] == "0.8125"
    low, high = interval(props["eval.test_qa.pass_rate.ci"])
    assert low < 0.8125 < high
    # two trials per item: the k-of-n item pass rate, pass@k and pass^k
    assert props["eval.test_qa.item_pass_rate"] == "0.75"
    low, high = interval(props["eval.test_qa.item_pass_rate.ci"])
    assert low < 0.75 < high
    assert (props["eval.test_qa.pass_at_2"], props["eval.test_qa.pass_hat_2"]) == ("0.875", "0.75")

    # a gate's value starts as it always did, and goes on with its notes
    absolute = props["eval.test_qa.gate.fail_under.equals_metric"]
    assert absolute.startswith("not met: mean 0.812 is below 0.9; 0.812 [")
    assert "one-sided 95% bounds, 8 items, borderline" in absolute
    regression = props["eval.test_qa.gate.max_regression.equals_metric"]
    assert regression.startswith("met: mean changed by -0.071 from the baseline")
    assert "; -0.071 [" in regression
    assert "one-sided 95% bounds on the change, 7 items" in regression
    assert "no drop is caught with 80% power" in regression

    # the paired comparison: 7 shared items, e and f regressed, a was fixed
    assert props["eval.test_qa.baseline.shared_items"] == "7"
    assert (props["eval.test_qa.baseline.regressions"], props["eval.test_qa.baseline.fixes"]) == ("2", "1")
    assert props["eval.test_qa.baseline.regressions_p_value"] == "0.5"
    assert props["eval.test_qa.baseline.equals_metric.delta"] == f"{-0.5 / 7:.6g}"
    low, high = interval(props["eval.test_qa.baseline.equals_metric.delta.ci"])
    assert low < -0.5 / 7 < high


# A judge whose score's name has a space, a dot and an ESC, sampled twice, with labels, gated, and
# whose verdicts change once drifted.txt exists (its identity the same: a drift).
ODD_JUDGE = """
import pathlib
import pytest
from pytest_opik_eval.metrics import BaseMetric, ScoreResult

HERE = pathlib.Path(__file__).parent


class Judge(BaseMetric):
    judge = True

    def __init__(self):
        super().__init__(name="answer ok.v2\\x1b[1m", threshold=0.5)

    def score(self, output, id, **kwargs):
        flipped = (HERE / "drifted.txt").exists() and id == "a"
        return ScoreResult(name=self.name, value=1.0 - output if flipped else float(output))


@pytest.mark.eval(
    dataset="data.jsonl", metrics=[Judge()], judge_samples=2,
    fail_under={"answer ok.v2\\x1b[1m": 0.1},
)
def test_qa(eval_item):
    return {"output": eval_item["judge"]}
"""


def test_every_property_named_by_a_score_escapes_it_one_way(project: Project) -> None:
    name = "answer ok.v2\x1b[1m"
    project.dataset(
        {"id": item, "judge": judge, "labels": {name: label}}
        for item, judge, label in (("a", 1, True), ("b", 1, True), ("c", 0, False), ("d", 1, False))
    )
    project.write("test_eval.py", ODD_JUDGE)
    project.run("--eval")
    (project.path / "drifted.txt").write_text("")
    project.run("--eval", "--junitxml=junit.xml")
    root = ET.parse(project.path / "junit.xml").getroot()
    names = {str(p.get("name")) for p in root.iter("property")}
    # Spaces and dots as the score is named; the ESC escaped, in every kind of property alike.
    key = "answer ok.v2\\x1b[1m"
    assert {
        f"eval.{key}",  # a trial's
        f"eval.test_qa.{key}.mean",
        f"eval.test_qa.gate.fail_under.{key}",
        f"eval.test_qa.labels.{key}.kappa",
        f"eval.test_qa.judge_samples.{key}.samples",
        f"eval.judge_drift.{key}.changed",
    } <= names
    assert not any("\x1b" in n for n in names)
