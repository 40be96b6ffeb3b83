"""The GitHub Actions job summary."""

from __future__ import annotations

import re

import pytest
from conftest import Project
from test_html import evidence_report, experiment, sample_report, trial
from test_report import ab_runs

from pytest_opik_eval.reports.markdown import step_summary
from pytest_opik_eval.store.records import GateSettings, ScoreRecord
from pytest_opik_eval.verdict.model import ExperimentReport, Report


def resume(experiment_id: str) -> str:
    return f"pytest --eval-resume={experiment_id}"


def summary(*experiments: ExperimentReport) -> str:
    return step_summary(Report(run_id="run-1", resumed=None, experiments=[*experiments]), resume)


def test_sections() -> None:
    assert step_summary(sample_report(), resume) == (
        "## ❌ qa eval\n"
        "\n"
        "`test_qa.py::test_qa` · experiment `exp-1` · run `run-1`\n"
        "\n"
        "8 trials: 7 completed (6 passed, 1 failed), 1 pending · pass rate 87.5% · "
        "items: 2 passed, 1 failed, 1 pending\n"
        "\n"
        "| metric | mean | min | max | failed | threshold | pass rate | Δ baseline |\n"
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n"
        "| accuracy | 0.875 | 0.000 | 1.000 | 0 | 0.500 | 85.7% | -0.067 |\n"
        "| relevance | 0.750 | 0.750 | 0.750 | 0 | - | - | - |\n"
        "\n"
        "**Gates not met**\n"
        "\n"
        "| verdict | gate | estimate | one-sided bounds | items | bound |\n"
        "| --- | --- | ---: | ---: | ---: | ---: |\n"
        "| ❌ not met | `fail_under` accuracy | 0.833 | - | - | 0.900 |\n"
        "| ✅ met | `min_pass_rate` | 0.800 | - | - | 0.500 |\n"
        "\n"
        "- ❌ `fail_under` accuracy: mean 0.833 is below 0.9; 1 trial(s) pending: pytest --eval-resume=exp-1\n"
        "- ✅ `min_pass_rate`: trials pass rate 0.800 >= 0.5\n"
        "\n"
        "**Failed items (1):** `capital`\n"
        "\n"
        "**Baseline** qa baseline (`exp-0`): 1 regression(s), 1 fix(es), over the 4 item(s) both planned\n"
        "- As many regressions by chance: p=1.000 (exact one-sided test on the items' verdicts; the gates "
        "decide on the means)\n"
        "- Regressions: `capital`\n"
        "- Fixes: `sum`\n"
        "\n"
        "⏳ **1 trial(s) pending:** `sum#1`\n"
        "\n"
        "Resume them with `pytest --eval-resume=exp-1`\n"
    )


def test_pipes_and_line_breaks_stay_inside_their_cell() -> None:
    scored = trial("a", 0, 1.0).model_copy(
        update={"scores": [ScoreRecord(name="exact|match\nstrict", value=1.0)]}
    )
    text = summary(experiment([scored], settings=GateSettings(), baseline=None))
    assert "| exact\\|match strict | 1.000 | 1.000 | 1.000 | 0 | - | - |\n" in text
    header, rule = [line for line in text.splitlines() if line.startswith("| ")][:2]
    assert header.count(" | ") == rule.count(" | ") == 6


def test_long_lists_are_capped() -> None:
    trials = [trial(f"item-{i:02d}", 0, 0.0 if i < 25 else 1.0) for i in range(30)]
    trials += [trial(f"late-{i:02d}", 0, None) for i in range(12)]
    base = experiment(trials)
    assert base.baseline is not None
    baseline = base.baseline.model_copy(update={"regressions": [f"item-{i:02d}" for i in range(25)]})
    text = summary(base.model_copy(update={"baseline": baseline}))
    assert "**Failed items (25):** `item-00`, `item-01`, " in text
    assert "`item-09` ... and 15 more\n" in text
    assert "- Regressions: `item-00`, " in text
    assert "`item-09` ... and 15 more\n- Fixes: `sum`\n" in text
    assert "⏳ **12 trial(s) pending:** `late-00#0`, " in text
    assert "`late-09#0` ... and 2 more\n" in text
    assert "Resume them with `pytest --eval-resume=exp-1`" in text
    assert len(text.splitlines()) < 40


def test_passing_experiment_without_gates_or_baseline() -> None:
    text = summary(
        experiment(
            [trial("a", 0, 1.0)],
            gates=[],
            gates_met=True,
            baseline=None,
            baseline_note="no earlier run of qa eval in the store",
        )
    )
    assert text.startswith("## ✅ qa eval\n")
    assert "Gates" not in text
    assert "Failed items" not in text
    assert "Resume" not in text
    assert "_No baseline comparison: no earlier run of qa eval in the store_\n" in text
    assert "Δ baseline" not in text


def test_heading_icon() -> None:
    failing = [trial("a", 0, 0.0), trial("b", 0, 1.0)]
    met = {"gates": [], "gates_met": True, "baseline": None}
    assert summary(experiment(failing, **met)).startswith("## ❌ ")
    # soft: failed trials do not fail the session, the gates alone decide
    soft = GateSettings(soft=True)
    assert summary(experiment(failing, settings=soft, **met)).startswith("## ✅ ")
    assert summary(experiment([*failing, trial("c", 0, None)], settings=soft, **met)).startswith("## ⏳ ")


def test_code_spans_survive_backticks() -> None:
    text = summary(experiment([trial("a`b", 0, 0.0)], gates=[], gates_met=True, baseline=None))
    assert "**Failed items (1):** `` a`b ``\n" in text


def test_no_experiments() -> None:
    assert (
        step_summary(Report(run_id=None, resumed=None, experiments=[]), resume)
        == "No experiment was evaluated.\n"
    )


def test_the_evidence_behind_each_number() -> None:
    text = step_summary(evidence_report(), resume)
    # the mean's interval beside it
    assert "| metric | mean | 95% interval | min | max |" in text
    # (items as the unit: greeting 1, capital 0.5, sum 1 of its completed trial, inject 1; at
    # four items the upper end rounds to the range's end, 0.999 before the likelihood's tail term)
    assert "| accuracy | 0.875 | [0.248, 1.000] | 0.000 | 1.000 | 0 | 0.500 | 85.7% | -0.125 |\n" in text
    # two trials per item: k of n with its interval, pass@k and pass^k
    assert "Items passing 2 of 2 trials: 0.667 [0.094, 0.992] 95%, 3 item(s)\n" in text
    assert (
        "| k | pass@k | 95% interval | pass^k | 95% interval |\n| ---: | ---: | ---: | ---: | ---: |\n"
        "| 1 | 0.833 | [0.116, 1.000] | 0.833 | [0.116, 1.000] |\n"
        "| 2 | 1.000 | [0.292, 1.000] | 0.667 | [0.094, 0.992] |\n"
    ) in text
    # each gate: verdict, borderline, estimate, interval, items, bound; then its notes
    assert (
        "| ❌ not met · ⚠️ borderline | `fail_under` accuracy (strict) | 0.857 | [0.600, 1.000] at 95% | 4 "
        "| 0.900 |\n"
        "| ❌ not met · ⚠️ borderline | `max_regression` accuracy (strict) | -0.125 | [-0.375, +0.000] at 95% "
        "| 4 | -0.050 |\n"
    ) in text
    assert (
        "- ❌ `max_regression` accuracy (strict): mean changed by -0.125 from the baseline; the drop is not "
        "shown below 0.05 (at most 0.375, p=0.300)\n"
        "  - -0.125 [-0.375, +0.000] one-sided 95% bounds on the change, 4 items, borderline\n"
        "  - catches a drop of 0.400 or more with 80% power at 4 items x 2 trials\n"
    ) in text
    # the baseline: each metric's paired change, then the exact test on the flips
    assert (
        "| metric | baseline | current | change | 95% paired interval | items |\n"
        "| --- | ---: | ---: | ---: | ---: | ---: |\n"
        "| accuracy | 0.960 | 0.835 | -0.125 | [-0.375, +0.000] | 4 |\n"
        "| relevance | 0.750 | 0.750 | +0.000 | - | 4 |\n"
        "\n"
        "- As many regressions by chance: p=0.500"
    ) in text
    assert "- Only in this experiment: `new`\n- Only in the baseline: `old`\n" in text


def test_one_trial_per_item_has_no_pass_at_k() -> None:
    assert "pass@k" not in summary(experiment([trial("a", 0, 1.0), trial("b", 0, 0.0)], baseline=None))


def test_step_summary_of_a_gated_run(project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    path = project.path / "step_summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(path))
    result, _ = ab_runs(project, "--eval-fail-under=equals_metric=0.9")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    text = path.read_text()
    second = text[text.rindex("## ") :]  # each run appends its summary
    assert "| equals_metric | 0.812 | [" in second
    assert "Items passing 2 of 2 trials: 0.750 [" in second
    assert "95%, 8 item(s)\n" in second
    interval = r"\[[01]\.\d{3}, [01]\.\d{3}\]"  # pass@k and pass^k with theirs
    assert re.search(rf"\| 2 \| 0\.875 \| {interval} \| 0\.750 \| {interval} \|\n", second)
    lines = second.splitlines()
    absolute = next(line for line in lines if "`fail_under` equals_metric |" in line)
    assert absolute.startswith("| ❌ not met · ⚠️ borderline | `fail_under` equals_metric | 0.812 | [")
    assert absolute.endswith("| 8 | 0.900 |")
    regression = next(line for line in lines if "`max_regression` equals_metric |" in line)
    assert regression.startswith("| ✅ met")
    assert "| -0.071 | [" in regression
    assert regression.endswith("| 7 | -0.050 |")
    assert "  - at 7 items x 2 trials no drop is caught with 80% power (see opik-eval plan)" in lines
    change = next(line for line in lines if line.startswith("| equals_metric | 0.857 | 0.786 |"))
    assert change.endswith(" | 7 |")
    assert "| -0.071 | [" in change
    assert "- As many regressions by chance: p=0.500" in second
    assert "- Regressions: `e`, `f`\n- Fixes: `a`\n" in second
    assert "- Only in this experiment: `new`\n- Only in the baseline: `old`" in second
