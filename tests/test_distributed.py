"""pytest-xdist: one run across workers, the controller reports and gates, resume under -n."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from conftest import Project, items

LABELS = [f"item-{i}" for i in range(6)]


def test_workers_record_one_run_and_the_controller_reports_it_all(project: Project) -> None:
    project.dataset(items(*LABELS))
    project.eval_test("trial_count=2,", behaviour="if item['id'] == 'item-5': return 'wrong'")
    project.write("test_plain.py", "def test_plain():\n    pass\n")
    result, report = project.run_report("--eval", "-p", "xdist", "-n", "2", "--junitxml=junit.xml")
    result.assert_outcomes(passed=11, failed=2)
    result.stdout.fnmatch_lines(
        ["*= eval summary =*", "  trials: 12 planned, 12 completed (10 passed, 2 failed), 0 pending"]
    )
    [experiment] = report["experiments"]
    assert len(experiment["trials"]) == 12
    assert all(t["ran_this_session"] and t["attempts"] == 1 for t in experiment["trials"])
    trials = project.trials()
    assert len(trials) == 12 and all(t.attempts == 1 for t in trials)
    suite = ET.parse(project.path / "junit.xml").getroot().find("testsuite")
    assert suite is not None
    suite_props = {p.get("name"): p.get("value") for p in suite.findall("properties/property")}
    assert suite_props["eval.test_qa.trials"] == "12"
    assert suite_props["eval.test_qa.equals_metric.mean"] == str(10 / 12)[:8].rstrip("0")
    case = next(c for c in suite.findall("testcase") if c.get("name") == "test_qa[item-0-t1]")
    assert {p.get("name"): p.get("value") for p in case.findall("properties/property")} == {
        "eval.equals_metric": "1.0",
        "eval.passed": "True",
    }


def test_gates_on_the_controller_cover_every_worker(project: Project) -> None:
    project.dataset(items(*LABELS))
    project.eval_test(behaviour="if item['id'] in ('item-4', 'item-5'): return 'wrong'")
    result = project.run(
        "--eval", "-p", "xdist", "-n", "2", "--eval-soft", "--eval-fail-under=equals_metric=0.7"
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["NOT MET: test_qa: fail_under equals_metric: mean 0.667 is below 0.7"])


def test_resume_under_xdist(project: Project) -> None:
    project.dataset(items(*LABELS))
    project.eval_test()
    project.fail("item-1", "item-4")
    project.run("--eval", "-p", "xdist", "-n", "2").assert_outcomes(passed=4, failed=2)
    project.calls()
    project.repair()
    result, report = project.run_report("--eval-resume=last", "-p", "xdist", "-n", "2")
    result.assert_outcomes(passed=2)
    assert sorted(project.calls()) == ["item-1#0", "item-4#0"]
    assert result.ret == 0
    ran = sorted(t["dataset_item_id"] for t in report["experiments"][0]["trials"] if t["ran_this_session"])
    assert ran == ["item-1", "item-4"]
    assert project.completed() == {(label, 0) for label in LABELS}


def test_a_crashed_worker_leaves_only_its_unfinished_trial_pending(project: Project) -> None:
    project.dataset(items(*LABELS))
    project.eval_test(
        behaviour="if item['id'] == 'item-3' and (HERE / 'crash').exists(): os._exit(1)",
        imports="import os",
    )
    (project.path / "crash").touch()
    result = project.run("--eval", "-p", "xdist", "-n", "2", "--max-worker-restart=2")
    result.assert_outcomes(passed=5, failed=1)
    pending = [t.dataset_item_id for t in project.trials() if t.status == "pending"]
    assert pending == ["item-3"]
    (project.path / "crash").unlink()
    project.calls()
    project.run("--eval-resume=last", "-p", "xdist", "-n", "2").assert_outcomes(passed=1)
    assert project.calls() == ["item-3#0"]


def test_without_xdist(project: Project) -> None:
    project.dataset(items("a", "b"))
    project.eval_test()
    result, report = project.run_report("--eval", "-p", "no:xdist")
    result.assert_outcomes(passed=2)
    assert report["experiments"][0]["summary"]["completed"] == 2
