"""Regression gates that have nothing to compare: a baseline that shares no item with the run,
and a gated metric that has no mean in the run or its baseline. Each gate fails and says why,
rather than passing on no evidence."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import Project, items


def regression_gate(report: dict[str, Any]) -> dict[str, Any]:
    (experiment,) = report["experiments"]
    (gate,) = [g for g in experiment["gates"] if g["kind"] == "max_regression"]
    return dict(gate)


def test_a_baseline_sharing_no_item_fails_the_gate_and_says_so(project: Project) -> None:
    project.dataset(items("a", "b", "c"))
    project.eval_test()
    project.run("--eval").assert_outcomes(passed=3)
    baseline = project.last_experiment_id()
    project.dataset(items("x", "y"))
    result, report = project.run_report(
        "--eval", f"--eval-baseline={baseline}", "--eval-max-regression=equals_metric=0.1"
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "NOT MET: test_qa: max_regression equals_metric: the baseline has no item in common with this experiment"
        ]
    )
    assert regression_gate(report)["met"] is False


def test_a_gated_metric_without_a_mean_fails_the_gate_naming_the_scores(project: Project) -> None:
    project.dataset(items("a", "b"))
    project.eval_test()
    project.run("--eval").assert_outcomes(passed=2)
    baseline = project.last_experiment_id()
    result, report = project.run_report(
        "--eval", f"--eval-baseline={baseline}", "--eval-max-regression=equal_metric=0.1"
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "NOT MET: test_qa: max_regression equal_metric: equal_metric has no mean in this experiment or "
            "its baseline; the experiment has no metric named 'equal_metric', its scores are: equals_metric"
        ]
    )
    gate = regression_gate(report)
    assert (gate["met"], gate["value"]) == (False, None)
