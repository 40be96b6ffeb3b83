"""The JSON report and its published schema, and the terminal summary."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Project, items

from pytest_opik_eval.cli import main as opik_eval
from pytest_opik_eval.verdict.model import SCHEMA_VERSION, Report, json_schema

SCHEMA = Path(__file__).parent.parent / "schema" / "eval-report.schema.json"


def test_report_describes_every_planned_trial(project: Project) -> None:
    project.dataset(items("a", "b"))
    project.eval_test(
        "trial_count=2, experiment_name='qa-baseline',", behaviour="if item['id'] == 'b': return 'nope'"
    )
    project.fail("a#1")
    result, report = project.run_report("--eval")
    result.assert_outcomes(passed=1, failed=3)
    assert report["schema_version"] == 7
    assert report["resumed"] is None
    [experiment] = report["experiments"]
    assert report["run_id"] == experiment["run_id"]
    assert experiment["name"] == "qa-baseline"
    assert experiment["test"] == "test_eval.py::test_qa"
    assert experiment["dataset"]["source"] == "data.jsonl"
    assert experiment["dataset"]["items"] == 2
    assert len(experiment["dataset"]["version"]) == 16
    assert experiment["trial_count"] == 2
    assert [(t["dataset_item_id"], t["trial"], t["status"], t["passed"]) for t in experiment["trials"]] == [
        ("a", 0, "completed", True),
        ("a", 1, "pending", None),
        ("b", 0, "completed", False),
        ("b", 1, "completed", False),
    ]
    first = experiment["trials"][0]
    # Measured for every trial (no spans here, so no usage); the crashed task too, unscored.
    latency = first.pop("latency")
    assert latency["task_seconds"] > 0
    assert set(latency["metric_seconds"]) == {"equals_metric"}
    assert first.pop("usage") is None
    crashed = experiment["trials"][1]
    assert crashed["latency"]["task_seconds"] > 0
    assert crashed["latency"]["metric_seconds"] == {}
    assert crashed["usage"] is None
    assert first == {
        "dataset_item_id": "a",
        "trial": 0,
        "node_id": "test_eval.py::test_qa[a-t0]",
        "status": "completed",
        "ran_this_session": True,
        "attempts": 1,
        "output": {"output": "a"},
        "passed": True,
        "scores": [
            {
                "name": "equals_metric",
                "value": 1.0,
                "reason": None,
                "scoring_failed": False,
                "metadata": None,
                "samples": None,
            }
        ],
        "soft_failed": False,
    }
    summary = experiment["summary"]
    assert summary.pop("latency")["trials"] == 3  # the completed trials (the gate judges those)
    assert summary.pop("usage") is None
    # The item is the unit of every mean and interval: a's completed trial and b's two are 2
    # observations, a scoring 1 and b 0.
    mean_interval = summary["metrics"]["equals_metric"].pop("interval")
    assert mean_interval["estimate"] == 0.5
    assert (mean_interval["level"], mean_interval["items"], mean_interval["method"]) == (0.95, 2, "score")
    assert mean_interval["low"] <= 0.5 <= mean_interval["high"]
    assert summary.pop("pass_rate_interval")["items"] == 2
    # k of n and pass@k are over the items with no trial pending: b alone, which failed both.
    item_rate = summary.pop("item_pass_rate")
    assert (item_rate["estimate"], item_rate["items"], item_rate["method"]) == (0.0, 1, "score")
    assert (summary.pop("pass_at_k"), summary.pop("pass_hat_k")) == (
        {"1": 0.0, "2": 0.0},
        {"1": 0.0, "2": 0.0},
    )
    assert [i["items"] for i in summary.pop("pass_at_k_interval").values()] == [1, 1]
    assert [i["estimate"] for i in summary.pop("pass_hat_k_interval").values()] == [0.0, 0.0]
    assert summary == {
        "trials": 4,
        "completed": 3,
        "pending": 1,
        "passed": 1,
        "failed": 2,
        "soft_failed": 0,
        "pass_rate": 0.5,  # a passed its completed trial, b failed both: each item weighs alike
        "metrics": {
            "equals_metric": {
                "mean": 0.5,
                "min": 0.0,
                "max": 1.0,
                "count": 3,
                "failed": 0,
                "threshold": 1.0,
                "pass_rate": 1 / 3,
            }
        },
    }
    assert experiment["items"] == [
        {"dataset_item_id": "a", "trials": 2, "passed": 1, "pending": 1, "required": 2, "verdict": "pending"},
        {"dataset_item_id": "b", "trials": 2, "passed": 0, "pending": 0, "required": 2, "verdict": "failed"},
    ]
    assert experiment["settings"]["thresholds"] == {"equals_metric": 1.0}
    assert (experiment["gates"], experiment["gates_met"], experiment["baseline"]) == ([], True, None)
    Report.model_validate(report)


def test_report_is_written_when_the_session_stops_early(project: Project) -> None:
    project.dataset(items("a", "b", "c"))
    project.eval_test()
    project.fail("a")
    result, report = project.run_report("--eval", "-x")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert [t["status"] for t in report["experiments"][0]["trials"]] == ["pending"] * 3


def test_report_path_from_ini(project: Project) -> None:
    project.pytester.makeini("[pytest]\nfilterwarnings = error\neval_report = out/report.json\n")
    project.dataset(items("a"))
    project.eval_test()
    project.run("--eval").assert_outcomes(passed=1)
    report = json.loads((project.path / "out" / "report.json").read_text())
    assert len(report["experiments"]) == 1


def test_no_report_and_no_summary_when_no_eval_test_ran(project: Project) -> None:
    project.write("test_plain.py", "def test_plain():\n    pass\n")
    result = project.run("--eval", "--eval-report=report.json")
    result.assert_outcomes(passed=1)
    result.stdout.no_fnmatch_line("*eval summary*")
    assert not (project.path / "report.json").exists()


def test_summary_lists_each_experiment_with_the_resume_command(project: Project) -> None:
    project.dataset(items("a", "b"))
    project.eval_test()
    project.eval_test(name="test_other")
    project.fail("b")
    result = project.run("--eval")
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines(
        [
            "*= eval summary =*",
            "test_qa (test_eval.py::test_qa)",
            "  experiment *  run *",
            "  trials: 2 planned, 1 completed (1 passed, 0 failed), 1 pending",
            "  metric               mean  95% interval        min    max failed   pass  gate",
            "  equals_metric       1.000  [0.000, 1.000]    1.000  1.000      0  1.000",
            "  resume the 1 pending: pytest --eval-resume=*",
            "test_qa (test_other.py::test_qa)",
            "*",
            "resume all 2 pending trials: pytest --eval-resume=*",
        ]
    )


def test_resume_command_names_a_store_given_on_the_command_line(project: Project) -> None:
    project.dataset(items("a"))
    project.eval_test()
    project.fail("a")
    result = project.run("--eval", "--eval-store=elsewhere/store.db")
    result.stdout.fnmatch_lines(
        [f"*resume the 1 pending: pytest --eval-resume=* --eval-store={project.path}/elsewhere/store.db"]
    )


def test_published_schema_is_in_step_with_the_models() -> None:
    assert json.loads(SCHEMA.read_text()) == json_schema(), (
        "regenerate it: python -m pytest_opik_eval.verdict.model > schema/eval-report.schema.json"
    )


def test_resume_command_repeats_the_test_paths_given(project: Project) -> None:
    project.dataset(items("a"))
    project.eval_test()
    project.write("test_plain.py", "def test_plain():\n    pass\n")
    project.fail("a")
    result = project.run("--eval", "test_eval.py")
    result.stdout.fnmatch_lines(["*resume the 1 pending: pytest --eval-resume=* test_eval.py"])
    command = next(line for line in result.outlines if "resume the 1 pending" in line).split(": ", 1)[1]
    project.repair()
    project.run(*command.split()[1:]).assert_outcomes(passed=1)


@pytest.fixture
def umask() -> Iterator[int]:
    """A umask other than the usual 022, so that a mode that merely looks right cannot pass."""
    previous = os.umask(0o007)
    try:
        yield 0o007
    finally:
        os.umask(previous)


def test_reports_are_written_with_the_users_umask(
    project: Project, umask: int, capsys: pytest.CaptureFixture[str]
) -> None:
    project.dataset(items("a"))
    project.eval_test()
    kept = project.path / "out" / "kept.html"
    kept.parent.mkdir()
    kept.write_text("old")
    kept.chmod(0o640)

    result = project.run("--eval", "--eval-report=out/report.json", "--eval-html=out/report.html")
    result.assert_outcomes(passed=1)
    project.run("--eval", "--eval-html=out/kept.html")
    assert opik_eval(["--store", str(project.store_path), "export", "last", "-o", "out/export.json"]) == 0
    capsys.readouterr()

    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (project.path / "out").iterdir()}
    new = 0o666 & ~umask  # what any new file gets: tempfile's private 0600 would hide the report
    assert modes == {"report.json": new, "report.html": new, "export.json": new, "kept.html": 0o640}
    assert "<!DOCTYPE html>" in kept.read_text()  # replaced whole, keeping its mode


JSON_REPORT_PAGE = Path(__file__).parent.parent / "docs" / "reference" / "json-report.md"


def test_the_readmes_json_example_has_the_current_schema_version() -> None:
    readme = JSON_REPORT_PAGE.read_text(encoding="utf-8")
    section = readme[readme.index("# The JSON report") :]
    example = json.loads(
        section[section.index("```json\n") + 8 : section.index("```", section.index("```json") + 7)]
    )
    assert example["schema_version"] == SCHEMA_VERSION
    Report.model_validate(example, strict=False)  # every field it shows is the report's


# -- the evidence behind the gates ----------------------------------------------------------------

# Returns a wrong output for the item ids ("b") or trials ("b#0") listed in wrong.txt.
WRONG = (
    "if item['id'] in (HERE / 'wrong.txt').read_text().split() "
    "or f\"{item['id']}#{trial}\" in (HERE / 'wrong.txt').read_text().split(): return {'output': 'wrong'}"
)


def ab_runs(project: Project, *args: str) -> tuple[pytest.RunResult, dict[str, Any]]:
    """A baseline and a run gated on it, two trials per item. The baseline gets item a wrong; the
    second run gets a right and f (both trials) and e (one trial) wrong, and its dataset swaps
    item "old" for "new". Seven items are in both: sorted by their change they are f (-1),
    e (-0.5), b, c, d, g (0) and a (+1), which is not the dataset's order."""
    project.dataset(items("a", "b", "c", "d", "e", "f", "g", "old"))
    project.eval_test("trial_count=2,", behaviour=WRONG)
    project.write("wrong.txt", "a")
    project.run("--eval", "--eval-soft").assert_outcomes(passed=14, failed=0)
    project.dataset(items("a", "b", "c", "d", "e", "f", "g", "new"))
    project.write("wrong.txt", "f e#0")
    return project.run_report(
        "--eval",
        "--eval-soft",
        "--eval-baseline=last",
        "--eval-max-regression=equals_metric=0.05",
        *args,
    )


def test_report_carries_the_intervals_the_gates_and_the_paired_comparison(project: Project) -> None:
    result, report = ab_runs(project)
    assert result.ret == pytest.ExitCode.OK
    Report.model_validate(report)
    [experiment] = report["experiments"]
    summary = experiment["summary"]
    # Every interval is over the 8 items (16 trials, 3 wrong): the item is the unit.
    mean = summary["metrics"]["equals_metric"]["interval"]
    assert (mean["estimate"], mean["level"], mean["items"]) == (13 / 16, 0.95, 8)
    assert mean["low"] < 13 / 16 < mean["high"]
    rate = summary["pass_rate_interval"]
    assert (rate["estimate"], rate["level"], rate["items"]) == (13 / 16, 0.95, 8)
    items_rate = summary["item_pass_rate"]
    assert (items_rate["estimate"], items_rate["items"], items_rate["method"]) == (6 / 8, 8, "score")
    # f fails both trials, e one: 7 of 8 items pass at least once in 2, 6 of 8 pass both.
    assert summary["pass_at_k"] == {"1": 13 / 16, "2": 7 / 8}
    assert summary["pass_hat_k"] == {"1": 13 / 16, "2": 6 / 8}

    [gate] = experiment["gates"]
    assert (gate["kind"], gate["metric"], gate["mode"]) == ("max_regression", "equals_metric", "normal")
    assert gate["interval"]["items"] == 7
    assert gate["interval"]["level"] == 0.95
    assert 0 < gate["p_value"] < 1
    assert gate["p_value"] == gate["p_value_unadjusted"]
    assert (gate["one_sided"], gate["adjusted_for"], gate["family"]) == (True, 1, 1)
    # 7 items catch no drop with 80% power; the gate says how many would catch one of 0.1.
    assert gate["detectable_drop"] is None
    assert gate["items_needed"] > 7
    assert "at 7 items x 2 trials no drop is caught with 80% power (see opik-eval plan)" in gate["notes"]

    baseline = experiment["baseline"]
    assert (baseline["shared_items"], baseline["only_in_current"], baseline["only_in_baseline"]) == (
        7,
        ["new"],
        ["old"],
    )
    change = baseline["metrics"]["equals_metric"]
    # a +1, e -0.5, f -1 over 7 items
    assert change["delta"] == pytest.approx(-0.5 / 7)
    assert change["items"] == 7
    assert change["interval"]["items"] == 7
    assert change["interval"]["low"] < change["delta"] < change["interval"]["high"]
    assert (baseline["regressions"], baseline["fixes"]) == (["e", "f"], ["a"])
    # 2 regressions and 1 fix: as many regressions or more by chance 4 times in 8.
    assert baseline["regressions_p_value"] == pytest.approx(0.5)
    assert [(i["dataset_item_id"], i["flip"], i["changes"]["equals_metric"]) for i in baseline["items"]] == [
        ("f", "regression", -1.0),
        ("e", "regression", -0.5),
        ("b", None, 0.0),
        ("c", None, 0.0),
        ("d", None, 0.0),
        ("g", None, 0.0),
        ("a", "fix", 1.0),
    ]
    assert [(i["baseline"], i["current"]) for i in baseline["items"]][:2] == [("passed", "failed")] * 2


def test_the_readme_points_at_the_published_schema() -> None:
    readme = JSON_REPORT_PAGE.read_text(encoding="utf-8")
    assert f"[`schema/{SCHEMA.name}`](../../schema/{SCHEMA.name})" in readme
    assert json.loads(SCHEMA.read_text())["properties"]["schema_version"]["const"] == SCHEMA_VERSION
