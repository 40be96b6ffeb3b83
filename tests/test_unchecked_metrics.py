"""A score that nothing checks (no threshold, no gate on its mean) can be 0 on every item and
fail nothing: the session's notices say so, once per metric of a test, and the README's examples
give every metric a threshold."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import Project, items

ROOT = Path(__file__).parent.parent
# The README's first example, and the custom metric of the tutorial's "Writing eval tests".
README = (ROOT / "README.md", ROOT / "docs" / "tutorial" / "writing-eval-tests.md")

# The README's custom metric as it stood, without a threshold.
METRIC = """
from pytest_opik_eval.metrics import BaseMetric, ScoreResult


class StartsWithAnswer(BaseMetric):
    def score(self, output: str, reference: str, **ignored_kwargs) -> ScoreResult:
        return ScoreResult(name=self.name, value=float(output.startswith(reference)))
"""

TESTS = """
import pytest
from metric import StartsWithAnswer
from pytest_opik_eval.metrics import Equals, LevenshteinRatio


@pytest.mark.parametrize("model", ["small", "large"])
@pytest.mark.eval(
    dataset="data.jsonl", metrics=[{metrics}], scoring_key_mapping={{"reference": "expected_output"}}, {marker}
)
def test_qa(eval_item, model):
    return "Well, " + eval_item["input"]["text"]  # never starts with the answer
"""

NOTICE = (
    "test_eval.py::test_qa: metric 'StartsWithAnswer' has no threshold and no gate, so its scores can "
    "never fail a trial or the session: give it a threshold (thresholds={'StartsWithAnswer': 0.8} in "
    "the marker, or threshold=0.8 on the metric) or a gate (fail_under={'StartsWithAnswer': 0.8}, "
    "--eval-fail-under=StartsWithAnswer=0.8); threshold=0 keeps it a report only, without this notice"
)


def write(project: Project, metrics: str = "StartsWithAnswer()", marker: str = "") -> None:
    project.dataset(items("a", "b", "c"))
    project.write("metric.py", METRIC)
    project.write("test_eval.py", TESTS.format(metrics=metrics, marker=marker))


def test_a_metric_that_nothing_checks_gets_a_notice_once(project: Project) -> None:
    write(project)
    result, report = project.run_report("--eval")
    # 0 on every item of both experiments, and every trial passes: the notice is the only word.
    result.assert_outcomes(passed=6)
    assert [e["summary"]["metrics"]["StartsWithAnswer"]["max"] for e in report["experiments"]] == [0.0, 0.0]
    result.stdout.fnmatch_lines(["*= eval notices =*", NOTICE])
    assert result.stdout.str().count("has no threshold and no gate") == 1  # both parameters: one test


@pytest.mark.parametrize(
    ("metrics", "marker", "options"),
    [
        ("StartsWithAnswer(threshold=1.0)", "", []),
        ("StartsWithAnswer()", "thresholds={'StartsWithAnswer': 1.0},", []),
        ("StartsWithAnswer(threshold=0)", "", []),  # a report alone, on purpose
        ("StartsWithAnswer()", "fail_under={'StartsWithAnswer': 0.5},", []),
        ("StartsWithAnswer()", "", ["--eval-fail-under=StartsWithAnswer=0.5"]),
        ("Equals()", "", []),  # pass/fail metrics have a threshold of 1.0
    ],
    ids=["metric", "marker", "zero", "gate", "option", "equals"],
)
def test_a_metric_with_a_threshold_or_a_gate_gets_none(
    project: Project, metrics: str, marker: str, options: list[str]
) -> None:
    write(project, metrics, marker)
    result = project.run("--eval", *options)
    # Each of the 3 items ran in both experiments and was scored (a bad marker or option would
    # stop it short).
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) + outcomes.get("failed", 0) == 6, outcomes
    assert "errors" not in outcomes
    assert "error" not in outcomes
    result.stdout.fnmatch_lines(["*eval summary*"])
    result.stdout.no_fnmatch_line("*has no threshold and no gate*")


def test_a_similarity_without_a_threshold_is_named_too(project: Project) -> None:
    write(project, "Equals(), LevenshteinRatio()")
    result = project.run("--eval")
    result.stdout.fnmatch_lines(
        ["test_eval.py::test_qa: metric 'levenshtein_ratio_metric' has no threshold and no gate, *"]
    )
    result.stdout.no_fnmatch_line("*metric 'equals_metric' has no threshold*")


def readme_examples() -> list[str]:
    """The README's eval tests, as written."""
    text = "".join(page.read_text(encoding="utf-8") for page in README)
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)
    return [block for block in blocks if "@pytest.mark.eval(" in block]


def test_the_readmes_eval_examples_give_every_metric_a_threshold(project: Project) -> None:
    examples = readme_examples()
    assert len(examples) == 2  # the first example and the custom metric
    (project.path / "data").mkdir()
    project.dataset(items("a", "b"), name="data/qa.jsonl")
    # The app answers a well, and b with words before the answer.
    app = 'def my_app(text):\n    return text if text == "a" else "Well, " + text\n\n\n'
    for number, example in enumerate(examples):
        project.write(f"test_readme_{number}.py", app + example)
    result = project.run("--eval", "test_readme_1.py")
    # The custom metric fails the answer that does not come first.
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.no_fnmatch_line("*has no threshold and no gate*")
    result = project.run("--eval", "test_readme_0.py")
    # trial_count=3: a passes, b ("Well, b") fails Equals, on each trial.
    result.assert_outcomes(passed=3, failed=3)
    result.stdout.no_fnmatch_line("*has no threshold and no gate*")
