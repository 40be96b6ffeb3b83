"""A gate on a judge's drift, end to end: --eval-max-judge-drift fails the session when a judge's
verdicts on its calibration's labelled items changed on more than a share of them, and
``opik-eval judge-drift`` checks a stored run's labelled outputs with today's judge. And the
calibrations, only the labelled items, that "last" never names."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from typing import Any

import pytest
from conftest import Project

# 10 items labelled pass (the judge passes 9), 10 labelled fail (it fails 8); the app's test, on
# items nobody labelled, is scored by the same judge.
LABELLED = [{"id": f"p{n}", "judge": int(n < 9), "labels": {"correctness": True}} for n in range(10)] + [
    {"id": f"f{n}", "judge": int(n < 2), "labels": {"correctness": False}} for n in range(10)
]
APP = [{"id": f"a{n}", "judge": 1} for n in range(5)]

# A judge whose verdicts change with no change to its prompt, model name or code (its identity
# stays the same): drifted.txt lists the items it now judges the other way, as when the model
# behind an API name is updated.
TESTS = """
import pathlib
import pytest
from pytest_opik_eval.metrics import BaseMetric, ScoreResult

HERE = pathlib.Path(__file__).parent


class Judge(BaseMetric):
    judge = True

    def __init__(self):
        super().__init__(name="correctness")
        self.threshold = 0.5

    def score(self, output, id, **kwargs):
        drifted = HERE / "drifted.txt"
        flipped = id in drifted.read_text().split() if drifted.exists() else False
        return ScoreResult(name=self.name, value=1.0 - float(output) if flipped else float(output))


@pytest.mark.eval(dataset="labelled.jsonl", metrics=[Judge()])
def test_calibration(eval_item):
    return {"output": eval_item["judge"]}


@pytest.mark.eval(dataset="app.jsonl", metrics=[Judge()])
def test_app(eval_item):
    return {"output": eval_item["judge"]}
"""

# A calibration session: the labelled items only, the judge cache off; the judge's misses (right
# on the items labelled fail) do not fail it.
CALIBRATE = ("--eval-calibrate", "--eval-soft")


@pytest.fixture
def judged(project: Project) -> Project:
    return judging(project)


def judging(project: Project) -> Project:
    project.dataset(LABELLED, "labelled.jsonl")
    project.dataset(APP, "app.jsonl")
    project.write("test_eval.py", TESTS)
    return project


def drift(project: Project, *items: str) -> None:
    (project.path / "drifted.txt").write_text(" ".join(items))


def starting(lines: list[str], start: str) -> list[str]:
    return [line for line in lines if line.startswith(start)]


def opik_eval(project: Project, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_opik_eval.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=project.path,
        check=False,
    )


def test_a_drift_within_the_bound_passes_and_replaces_the_calibration(judged: Project) -> None:
    _, first = judged.run_report(*CALIBRATE)
    drift(judged, "p0", "f0")  # 2 of 20: 0.1
    result, report = judged.run_report(*CALIBRATE, "--eval-max-judge-drift=0.1")
    assert result.ret == pytest.ExitCode.OK
    (found,) = report["judge_drift"]
    assert (found["changed"], found["items"], found["bound"], found["failed"]) == (2, 20, 0.1, False)
    assert found["since"].startswith(f"test_calibration (run {first['run_id']}, ")
    assert len(starting(result.outlines, "judge drift: correctness")) == 1
    assert not starting(result.outlines, "NOT MET")
    # Within the bound, today's verdicts are the calibration: the same again is no drift.
    result, report = judged.run_report(*CALIBRATE, "--eval-max-judge-drift=0")
    assert (result.ret, report["judge_drift"]) == (pytest.ExitCode.OK, [])


def test_a_drift_beyond_the_bound_fails_the_session_until_it_is_accepted(
    judged: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    summary = judged.path / "step_summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    judged.run(*CALIBRATE)
    drift(judged, "p0", "p1", "p2", "f0")  # 4 of 20: 0.2
    result, report = judged.run_report(*CALIBRATE, "--eval-max-judge-drift=0.1", "--junitxml=junit.xml")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    (found,) = report["judge_drift"]
    assert (found["changed"], found["bound"], found["failed"]) == (4, 0.1, True)
    (line,) = starting(result.outlines, "NOT MET: judge drift")
    assert line == (
        f"NOT MET: judge drift of correctness (judge {found['judge'][:12]}): 4 of 20 labelled items "
        f"(0.200) judged otherwise than in {found['since']}, above --eval-max-judge-drift=0.1; that "
        "calibration is kept. Pin the judge's model to a dated version; or, if the change is wanted, "
        "review the items that changed and accept today's verdicts as its calibration: "
        f"opik-eval calibrate {report['run_id']}"
    )
    assert "1 judge drifted (--eval-max-judge-drift)" in result.outlines[-1]  # pytest's last line
    properties = {p.get("name"): p.get("value") for p in ET.parse(judged.path / "junit.xml").iter("property")}
    assert properties["eval.judge_drift.correctness.changed"] == "4"
    assert properties["eval.judge_drift.correctness.failed"] == "true"
    markdown = summary.read_text(encoding="utf-8")
    assert "❌ judge drift: correctness" in markdown
    assert "NOT MET: judge drift of correctness" in markdown
    # The calibration it drifted from is kept: a rerun (the bound from the ini file) fails too.
    judged.pytester.makeini("[pytest]\nfilterwarnings = error\neval_max_judge_drift = 0.1\n")
    result, report = judged.run_report(*CALIBRATE)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert report["judge_drift"][0]["since"] == found["since"]
    # A calibration without the bound accepts today's verdicts; the check passes from then on.
    judged.pytester.makeini("[pytest]\nfilterwarnings = error\n")
    judged.run(*CALIBRATE)
    result, report = judged.run_report(*CALIBRATE, "--eval-max-judge-drift=0.1")
    assert (result.ret, report["judge_drift"]) == (pytest.ExitCode.OK, [])


def test_slow_drift_adds_up_against_a_reference_run(judged: Project) -> None:
    _, reference = judged.run_report(*CALIBRATE)
    since = f"--eval-judge-drift-since={reference['run_id']}"
    drift(judged, "p0", "f0")  # 2 of 20: within the bound, and the newest calibration from now on
    result, _ = judged.run_report(*CALIBRATE, "--eval-max-judge-drift=0.1", since)
    assert result.ret == pytest.ExitCode.OK
    drift(judged, "p0", "f0", "p1", "p2")  # 2 more: 2 since the newest, 4 since the reference
    result, report = judged.run_report(*CALIBRATE, "--eval-max-judge-drift=0.1")
    assert result.ret == pytest.ExitCode.OK
    assert report["judge_drift"][0]["changed"] == 2
    result, report = judged.run_report(*CALIBRATE, "--eval-max-judge-drift=0.1", since)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    (found,) = report["judge_drift"]
    assert (found["changed"], found["failed"], found["reference"]) == (4, True, reference["run_id"])
    assert found["since"].startswith(f"test_calibration (run {reference['run_id']}, ")
    (line,) = starting(result.outlines, "NOT MET: judge drift")
    # Accepting the change is taking this run as the reference; then the check passes.
    advice = f"take this run's verdicts as the reference: --eval-judge-drift-since={report['run_id']}"
    assert line.endswith(advice)
    result, report = judged.run_report(*CALIBRATE, "--eval-max-judge-drift=0.1", advice.rsplit(" ", 1)[1])
    assert (result.ret, report["judge_drift"]) == (pytest.ExitCode.OK, [])
    # The same check from the command line, and through the ini file.
    run = reference["run_id"]  # its stored outputs judged again by today's judge
    done = opik_eval(judged, "judge-drift", run, "--max-drift", "0.1", "--since", run)
    assert done.returncode == 1, done.stdout + done.stderr
    assert starting(done.stdout.splitlines(), "NOT MET: judge drift of correctness")
    judged.pytester.makeini(
        f"[pytest]\nfilterwarnings = error\neval_judge_drift_since = {reference['run_id']}\n"
    )
    result = judged.run(*CALIBRATE, "--eval-max-judge-drift=0.1")
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_a_reference_run_that_is_not_there_is_a_usage_error(judged: Project) -> None:
    judged.run(*CALIBRATE)
    result = judged.run("--eval", "--eval-judge-drift-since=no-such-run")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--eval-judge-drift-since=no-such-run: " in result.stderr.str()
    assert not result.outlines or "passed" not in result.outlines[-1]  # nothing ran
    done = opik_eval(judged, "gate", "last", "--eval-judge-drift-since=no-such-run")
    assert done.returncode == 2
    assert "opik-eval: " in done.stderr


def test_the_bound_says_when_there_is_no_calibration_to_check(judged: Project) -> None:
    result, report = judged.run_report(*CALIBRATE, "--eval-max-judge-drift=0.1")
    assert result.ret == pytest.ExitCode.OK  # the first calibration of a judge is not a drift
    assert report["judge_drift"] == []
    (calibration,) = report["experiments"]
    result.stdout.fnmatch_lines(
        [
            "--eval-max-judge-drift=0.1: no earlier calibration of correctness (judge *) to compare "
            f"with; this session's, test_calibration (run {report['run_id']}), is kept as its "
            "calibration, which the next session checks against"
        ]
    )
    # No test of the session has labelled items: nothing to check, and it says so.
    result = judged.run("--eval", "--eval-max-judge-drift=0.1", "-k", "test_app")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [
            "--eval-max-judge-drift=0.1: no judge's calibration to check: no experiment of this "
            "session judged every one of its items with human labels (see docs/how-to/judge-labels.md)"
        ]
    )
    assert calibration["name"] == "test_calibration"
    # A shard has a part of the labelled items: the fan-in checks them.
    result = judged.run("--eval", "--eval-max-judge-drift=0.1", "--eval-shard=1/2")
    result.stdout.fnmatch_lines(
        [
            "--eval-max-judge-drift=0.1: a shard has a part of the labelled items and checks no judge's "
            "drift: opik-eval gate --eval-max-judge-drift=0.1 on the merged store checks the whole run's"
        ]
    )


@pytest.mark.parametrize("value", ["1.5", "-0.1", "ten percent"])
def test_a_bad_bound_is_a_usage_error(judged: Project, value: str) -> None:
    result = judged.run("--eval", f"--eval-max-judge-drift={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f"*argument --eval-max-judge-drift: expected a share from 0 to 1, such as 0.9; got '{value}'"]
    )
    judged.pytester.makeini(f"[pytest]\nfilterwarnings = error\neval_max_judge_drift = {value}\n")
    result = judged.run("--eval")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f"ERROR: ini eval_max_judge_drift: expected a share from 0 to 1, such as 0.9; got '{value}'"]
    )


def test_opik_eval_judge_drift_checks_a_stored_run_with_todays_judge(judged: Project) -> None:
    judged.run("--eval")  # the app's test and the calibration's: a CI run
    # Today's judge as yesterday's: no drift, and the judge's misses do not fail the check.
    done = opik_eval(judged, "judge-drift", "last", "--max-drift", "0.1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "11 passed, 1 deselected, 9 soft-failed" in done.stdout.splitlines()[-1]
    assert not starting(done.stdout.splitlines(), "judge drift:")
    drift(judged, "p0", "p1", "p2", "f0")  # the model behind the judge's API name changed
    done = opik_eval(judged, "judge-drift", "last", "--max-drift", "0.1")
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    (line,) = starting(lines, "judge drift: correctness")
    assert ": 4 of 20 labelled items judged otherwise than in test_calibration (run " in line
    (failure,) = starting(lines, "NOT MET: judge drift of correctness")
    # Without a bound, the drift is reported, and the check passes.
    done = opik_eval(judged, "judge-drift", "last")
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(starting(done.stdout.splitlines(), "judge drift: correctness")) == 1
    # Its advice accepts today's verdicts as the calibration: the check passes from then on.
    accept = failure.rsplit(": ", 1)[1].split()
    assert accept[:2] == ["opik-eval", "calibrate"]
    opik_eval(judged, *accept[1:])
    done = opik_eval(judged, "judge-drift", "last", "--max-drift", "0.1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert not starting(done.stdout.splitlines(), "judge drift:")


def test_opik_eval_judge_drift_without_a_calibration_or_labels(judged: Project) -> None:
    judged.run("--eval", "--eval-judge-cache=off")
    for kept in (judged.store_path.parent / "calibrations").glob("*/*.json"):
        kept.unlink()  # no calibration stored for the judge
    done = opik_eval(judged, "judge-drift", "last", "--max-drift", "0.1")
    # Nothing to compare with is not a drift: said, and this check's verdicts are kept for the next.
    assert done.returncode == 0, done.stdout + done.stderr
    assert "--eval-max-judge-drift=0.1: no earlier calibration of correctness (judge " in done.stdout
    assert list((judged.store_path.parent / "calibrations").glob("*/*.json"))
    # A run with no labelled item has no judge to check: a usage error, before anything runs.
    judged.run("--eval", "-k", "test_app")
    done = opik_eval(judged, "judge-drift", "last")
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout + done.stderr
    assert "has items with human labels, so there is no judge to calibrate or check for drift" in done.stderr


def test_opik_eval_gate_fails_on_the_drift_of_shards_merged(judged: Project) -> None:
    judged.run(*CALIBRATE, "--eval-store=ci/base.db")  # the judge's calibration, beside the stores
    drift(judged, "p0", "p1", "p2", "f0")  # 4 of 20: 0.2
    shards = []
    for k in (1, 2):  # each shard has a part of the labelled items: it checks no drift
        shard = f"ci/shard{k}.db"
        result = judged.run(*CALIBRATE, "--eval-run-id=ci-2", f"--eval-shard={k}/2", f"--eval-store={shard}")
        assert result.ret == pytest.ExitCode.OK
        shards.append(shard)
    assert opik_eval(judged, "--store", "ci/merged.db", "merge", *shards).returncode == 0
    calibrations = judged.path / "ci" / "calibrations"
    (kept,) = calibrations.glob("*/*.json")
    before = kept.read_text()
    # The fan-in checks the whole run's verdicts against the stored calibration.
    done = opik_eval(judged, "--store", "ci/merged.db", "gate", "ci-2", "--eval-max-judge-drift=0.1")
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    (failure,) = starting(lines, "NOT MET: judge drift of correctness")
    assert "4 of 20 labelled items (0.200) judged otherwise than in test_calibration (run " in failure
    # Its advice accepts the run's verdicts from the merged store.
    run_id = failure.rsplit(" ", 1)[1]
    assert failure.endswith(f"opik-eval --store {judged.path / 'ci' / 'merged.db'} calibrate {run_id}")
    assert lines[-1] == "eval gate: FAILED: judge drift of correctness"
    assert kept.read_text() == before  # the calibration it drifted from is kept
    # Its advice, taken, accepts the run's verdicts: the gate passes from then on.
    accept = failure.rsplit(": ", 1)[1].split()
    assert opik_eval(judged, *accept[1:]).returncode == 0
    assert kept.read_text() != before
    done = opik_eval(judged, "--store", "ci/merged.db", "gate", "ci-2", "--eval-max-judge-drift=0.1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert not starting(done.stdout.splitlines(), "judge drift:")


def test_opik_eval_gate_says_when_no_judge_drift_can_be_checked(judged: Project) -> None:
    judged.run("--eval", "-k", "test_app")  # no labelled item: no calibration
    done = opik_eval(judged, "gate", "last", "--eval-max-judge-drift=0.1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (
        "--eval-max-judge-drift=0.1: no judge's calibration to check: no experiment judged every one "
        "of its items with human labels" in done.stdout
    )
    done = opik_eval(judged, "gate", "last", "--eval-max-judge-drift=2")
    assert done.returncode == 2
    assert "expected a share from 0 to 1, such as 0.9; got '2'" in done.stderr


@pytest.mark.parametrize("value", ["2", "x"])
def test_opik_eval_judge_drift_refuses_a_bad_bound(judged: Project, value: str) -> None:
    done = opik_eval(judged, "judge-drift", "last", "--max-drift", value)
    assert done.returncode == 2
    assert (
        f"argument --max-drift: expected a share from 0 to 1, such as 0.9; got '{value}'"
        in done.stderr.splitlines()[-1]
    )


def test_a_calibration_is_never_the_last_run_to_compare_with_or_resume(any_backend: Project) -> None:
    judged = judging(any_backend)  # the Opik backend finds "last" in its spool
    _, full = judged.run_report("--eval")
    _, calibration = judged.run_report(*CALIBRATE)
    assert calibration["run_id"] != full["run_id"]
    _, report = judged.run_report("--eval", "--eval-baseline=last")
    baselines: dict[str, Any] = {e["name"]: e["baseline"] for e in report["experiments"]}
    full_ids = {e["name"]: e["id"] for e in full["experiments"]}
    # The full run's experiments, all 20 items of the calibration test compared (not its rescore).
    assert {name: b["experiment_id"] for name, b in baselines.items()} == full_ids
    assert baselines["test_calibration"]["shared_items"] == 20
    # The session just run is the last one; after another calibration, it still is.
    judged.run(*CALIBRATE)
    result = judged.run("--eval-resume=last")
    result.stdout.fnmatch_lines(
        [f"*eval resume: 0 pending of 25 planned trials in 2 experiment(s) of run {report['run_id']}*"]
    )
