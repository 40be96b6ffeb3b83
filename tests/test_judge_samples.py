"""Judge samples (``judge_samples=N``, ``--eval-judge-samples=N``): an LLM judge scores each output
N times, the trial's score is their mean (at a threshold of 0.5, a pass/fail judge's majority),
the report shows how far the judge agrees with itself, and every sample is cached apart."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import Project, items

# A judge (judge = True) that gives an output the votes its item lists, one per call in turn
# (the calls of an output counted in a file of its own, through os.open: a judge that calls
# open() when it scores is not cached), and a heuristic scored once per trial.
JUDGES = """
import os
import pathlib
from pytest_opik_eval.metrics import BaseMetric, ScoreResult

HERE = pathlib.Path(__file__).parent


def call(name):
    log = os.open(HERE / name, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(log, b".")
        return os.fstat(log).st_size
    finally:
        os.close(log)


class Judge(BaseMetric):
    judge = True

    def __init__(self, threshold=0.5):
        super().__init__(name="judge", threshold=threshold)

    def score(self, output, votes, **ignored):
        calls = call(f"judge-{output}.calls")
        call("judge.calls")
        return ScoreResult(name=self.name, value=votes[(calls - 1) % len(votes)], reason=f"call {calls}")


class Heuristic(BaseMetric):
    def __init__(self):
        super().__init__(name="heuristic", threshold=0.0)

    def score(self, output, **ignored):
        call("heuristic.calls")
        return ScoreResult(name="heuristic", value=1.0)
"""

# a: unanimous pass; b: a majority pass (2 of 3); c: a majority fail (1 of 3).
VOTES: dict[str, list[float]] = {"a": [1, 1, 1], "b": [1, 0, 1], "c": [0, 1, 0]}


def sampled_project(project: Project, marker: str = "", votes: dict[str, list[float]] = VOTES) -> None:
    project.dataset([{**item, "votes": votes[item["id"]]} for item in items(*votes)])
    project.write("judges.py", JUDGES)
    project.eval_test(marker, metrics="[Judge(), Heuristic()]", imports="from judges import Judge, Heuristic")


def calls(project: Project, name: str = "judge") -> int:
    """The metric's calls since the last look."""
    path = project.path / f"{name}.calls"
    count = len(path.read_bytes()) if path.exists() else 0
    path.unlink(missing_ok=True)
    for each in project.path.glob(f"{name}-*.calls"):
        each.unlink()
    return count


def judged(report: dict[str, Any]) -> dict[str, tuple[Any, ...]]:
    """Each trial's verdict and its judge score: value, samples, reason."""
    return {
        t["dataset_item_id"]: (
            t["passed"],
            *next(
                (s["value"], s.get("samples"), s.get("reason")) for s in t["scores"] if s["name"] == "judge"
            ),
        )
        for e in report["experiments"]
        for t in e["trials"]
    }


def test_the_judge_scores_each_output_n_times_and_the_mean_decides(project: Project) -> None:
    sampled_project(project, "judge_samples=3,")
    result, report = project.run_report("--eval")
    result.assert_outcomes(passed=2, failed=1)
    assert calls(project) == 9
    assert calls(project, "heuristic") == 3  # a heuristic is not a judge: scored once
    assert judged(report) == {
        "a": (True, 1.0, [1.0, 1.0, 1.0], "call 1"),
        "b": (True, pytest.approx(2 / 3), [1.0, 0.0, 1.0], "call 1"),
        "c": (False, pytest.approx(1 / 3), [0.0, 1.0, 0.0], "call 1"),
    }
    heuristic = [s for t in report["experiments"][0]["trials"] for s in t["scores"] if s["name"] != "judge"]
    assert [s.get("samples") for s in heuristic] == [None] * 3
    [agreement] = report["experiments"][0]["self_agreement"]
    assert agreement == {
        "score": "judge",
        "samples": 3,
        "trials": 3,
        "threshold": 0.5,
        "unanimous": pytest.approx(1 / 3),
        "split": 2,
        "sd": pytest.approx((0 + 2 * 0.5773502691896257) / 3),
    }
    result.stdout.fnmatch_lines(
        [
            "  judge samples: judge (3 samples x 3 trials, threshold 0.5): unanimous in 0.333 of trials "
            "(2 split), sd within a trial 0.385"
        ]
    )
    # The failure names the mean and the samples, and the first sample's reason.
    result.stdout.fnmatch_lines(
        [
            "item c (trial 0) did not meet its thresholds:",
            "  judge      0.333 (mean of 0, 1, 0) < 0.5  call 1",
        ]
    )


def test_one_sample_is_todays_scoring(project: Project) -> None:
    sampled_project(project)
    result, report = project.run_report("--eval")
    result.assert_outcomes(passed=2, failed=1)  # c's first vote is 0
    assert calls(project) == 3
    assert {item: score[2] for item, score in judged(report).items()} == {"a": None, "b": None, "c": None}
    assert report["experiments"][0]["self_agreement"] == []
    assert "judge samples" not in result.stdout.str()


def test_every_report_carries_the_judges_self_agreement(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    import xml.etree.ElementTree as ElementTree

    summary = project.path / "step_summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    sampled_project(project, "judge_samples=3,")
    result = project.run("--eval", "--junitxml=junit.xml", "--eval-html=report.html")
    result.assert_outcomes(passed=2, failed=1)
    line = next(line for line in result.outlines if line.startswith("  judge samples: "))
    assert f"- {line.removeprefix('  judge samples: ')}\n" in summary.read_text()
    suite = ElementTree.parse(project.path / "junit.xml").getroot().find("testsuite")
    assert suite is not None
    properties = {str(p.get("name")): str(p.get("value")) for p in suite.iter("property")}
    base = "eval.test_qa.judge_samples.judge."
    assert {name: value for name, value in properties.items() if name.startswith(base)} == {
        base + "samples": "3",
        base + "trials": "3",
        base + "unanimous": "0.333333",
        base + "split": "2",
        base + "sd": "0.3849",
    }
    page = (project.path / "report.html").read_text()
    row = page.split('<div class="panel judge-samples">', 1)[1].split('<tr data-score="judge">', 1)[1]
    cells = [cell.split("</td>", 1)[0] for cell in row.split("</tr>", 1)[0].split("<td>")[1:]]
    assert cells == ["judge", "3", "3", "0.5", "0.333", "2", "0.385"]


def test_the_marker_wins_over_the_option_and_the_option_over_the_ini(project: Project) -> None:
    sampled_project(project)
    project.pytester.makeini("[pytest]\nfilterwarnings = error\neval_judge_samples = 2\n")
    project.run("--eval").assert_outcomes(passed=3)  # c: 0 and 1, a mean of 0.5
    assert calls(project) == 6
    project.run("--eval", "--eval-judge-samples=3").assert_outcomes(passed=2, failed=1)
    assert calls(project) == 9
    sampled_project(project, "judge_samples=1,")
    project.run("--eval", "--eval-judge-samples=3").assert_outcomes(passed=2, failed=1)
    assert calls(project) == 3


@pytest.mark.parametrize(
    ("value", "shown"), [("0", "0"), ("-1", "-1"), ("2.5", "2.5"), ("True", "True"), ('"3"', "'3'")]
)
def test_a_bad_marker_value_fails_the_tests_collection(project: Project, value: str, shown: str) -> None:
    sampled_project(project, f"judge_samples={value},")
    result = project.run("--eval")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "*@pytest.mark.eval on test_eval.py::test_qa*judge_samples must be a whole number of at "
            f"least 1 (the times each LLM judge scores an output, such as 3), got {shown}"
        ]
    )
    assert calls(project) == 0


@pytest.mark.parametrize("value", ["0", "-2", "2.5", "x"])
def test_a_bad_option_or_ini_value_is_a_usage_error(project: Project, value: str) -> None:
    sampled_project(project)
    result = project.run("--eval", f"--eval-judge-samples={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            f"*--eval-judge-samples: expected how many times each LLM judge scores an output, a whole "
            f"number of at least 1 such as 3; got '{value}'"
        ]
    )
    project.pytester.makeini(f"[pytest]\nfilterwarnings = error\neval_judge_samples = {value}\n")
    result = project.run("--eval")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*ini eval_judge_samples: expected how many times*; got '{value}'"])
