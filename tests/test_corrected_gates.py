"""Gates on a judge's pass rate corrected for the judge's errors against human labels, end to
end: the experiment's own labels, or those of another test of the session scored by the same
judge; strict mode's refusal of a judge it cannot correct."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import Project

from pytest_opik_eval.cli import main
from pytest_opik_eval.exceptions import ExperimentNotFound
from pytest_opik_eval.store.calibrations import Calibrations
from pytest_opik_eval.store.local import LocalStore
from pytest_opik_eval.verdict.calibration import LabelledItem
from pytest_opik_eval.verdict.correction import Correction, correction

# The judge's verdict is the item's "judge" field: a judge (it says so) whose errors the labels
# measure. Its prompt is part of its identity: another prompt is another judge.
JUDGED = """
import pytest
from pytest_opik_eval.metrics import BaseMetric, ScoreResult


class Judge(BaseMetric):
    judge = True

    def __init__(self, prompt="Is the answer right?"):
        super().__init__(name="correctness")
        self.threshold = 0.5
        self.prompt = prompt

    def score(self, output, **kwargs):
        return ScoreResult(name=self.name, value=float(output))

{tests}
"""

TEST = """
@pytest.mark.eval(dataset="{dataset}", metrics=[Judge({prompt})], {marker})
def {name}(eval_item):
    return {{"output": eval_item["judge"]}}
"""


def rows(passed: int, failed: int, *, label: bool | None, prefix: str) -> list[dict[str, Any]]:
    """Items the judge passes (``passed``) and fails (``failed``), labelled ``label`` (or not)."""
    found = []
    for n in range(passed + failed):
        row: dict[str, Any] = {"id": f"{prefix}{n}", "judge": int(n < passed)}
        if label is not None:
            row["labels"] = {"correctness": label}
        found.append(row)
    return found


# 10 items labelled pass (the judge passes 9), 10 labelled fail (it fails 8): sensitivity 0.9,
# specificity 0.8. Observed: 11 of 20 passed, 0.55; corrected (0.55 + 0.8 - 1) / 0.7 = 0.5.
CALIBRATION = rows(9, 1, label=True, prefix="p") + rows(2, 8, label=False, prefix="f")


def write(project: Project, *tests: tuple[str, str, str, str]) -> None:
    """Each test as (name, dataset file, judge prompt argument, marker arguments)."""
    source = "".join(
        TEST.format(name=name, dataset=dataset, prompt=prompt, marker=marker)
        for name, dataset, prompt, marker in tests
    )
    project.write("test_eval.py", JUDGED.format(tests=source))


def gate_lines(result: pytest.RunResult) -> list[str]:
    return [line for line in result.outlines if line.startswith(("met:", "NOT MET:"))]


def expected(observed: list[float]) -> Correction:
    labelled = [LabelledItem(r["id"], r["judge"], 1, r["labels"]["correctness"]) for r in CALIBRATION]
    found = correction(observed, labelled, trials=len(observed))
    assert isinstance(found, Correction)
    return found


def test_a_gate_that_the_raw_rate_passes_fails_on_the_corrected_one(project: Project) -> None:
    # Every item is labelled: each counts by its label, 10 of 20 pass, whatever the judge said.
    project.dataset(CALIBRATION)
    write(project, ("test_qa", "data.jsonl", "", 'fail_under={"correctness": 0.52}'))
    result, report = project.run_report("--eval")
    assert gate_lines(result) == [
        "NOT MET: test_qa: fail_under correctness: pass rate 0.500 corrected for the judge's errors, "
        "20 labelled item(s) by their labels (0.550 as judged) is below 0.52"
    ]
    (gate,) = report["experiments"][0]["gates"]
    assert gate["value"] == pytest.approx(0.5)
    assert gate["correction"] == {
        "raw": 0.55,
        "sensitivity": 0.9,
        "specificity": 0.8,
        "labelled": 20,
        "source": "test_qa",
        "known": 20,
    }
    # The labels' pass rate alone: two passes and two failures added, 12/24, over 24 items.
    reach = 1.6448536 * math.sqrt(0.5 * 0.5 / 24)
    assert (gate["interval"]["low"], gate["interval"]["high"]) == pytest.approx((0.5 - reach, 0.5 + reach))
    assert gate["notes"][1] == (
        "corrected by 20 labelled item(s) of test_qa: sensitivity 0.900, specificity 0.800; every one "
        "of the run's 20 item(s) is labelled and counts by its label: the judge's errors do not "
        "enter, and the bounds carry the labels' sampling error"
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_another_test_of_the_session_calibrates_the_same_judge(project: Project) -> None:
    project.dataset(CALIBRATION, "labelled.jsonl")
    # The app's run: 30 of 40 judged passing, none labelled.
    project.dataset(rows(30, 10, label=None, prefix="a"), "app.jsonl")
    write(
        project,
        ("test_calibration", "labelled.jsonl", "", ""),
        ("test_app", "app.jsonl", "", 'fail_under={"correctness": 0.6}'),
        ("test_other_prompt", "app.jsonl", '"Is it right?"', 'fail_under={"correctness": 0.6}'),
    )
    result, report = project.run_report("--eval")
    # (0.75 + 0.8 - 1) / 0.7 = 0.786
    found = expected([1.0] * 30 + [0.0] * 10)
    assert found.estimate == pytest.approx(0.55 / 0.7)
    app, other = gate_lines(result)
    assert app == (
        "met: test_app: fail_under correctness: pass rate 0.786 corrected for the judge's errors "
        "(0.750 as judged) >= 0.6"
    )
    gates = {e["name"]: e["gates"] for e in report["experiments"]}
    assert gates["test_app"][0]["notes"][1].startswith(
        "corrected by 20 labelled item(s) of test_calibration:"
    )
    # Another prompt is another judge: the labels do not hold for it.
    assert other == (
        "met: test_other_prompt: fail_under correctness: mean 0.750 >= 0.6; the judge of correctness "
        'is not calibrated: its errors are not in this bound; label some items ("labels": '
        '{"correctness": true}) to correct it'
    )
    store = LocalStore(project.store_path, create=False)
    try:
        judges = {e.name: e.judges for e in store.find("last")[1]}
    finally:
        store.close()
    assert judges["test_app"] == judges["test_calibration"] != judges["test_other_prompt"]
    assert list(judges["test_app"]) == ["correctness"]


def test_strict_mode_refuses_a_judge_without_labels(project: Project) -> None:
    project.dataset(rows(20, 0, label=None, prefix="a"))
    write(project, ("test_qa", "data.jsonl", "", 'fail_under={"correctness": 0.5}'))
    result = project.run("--eval", "--eval-gate-mode=strict")
    (line,) = gate_lines(result)
    assert line.startswith("NOT MET: test_qa: fail_under correctness (strict): mean 1.000, lower bound ")
    assert line.endswith(
        "; strict mode refuses it: the judge of correctness is not calibrated: its errors are not in "
        'this bound; label some items ("labels": {"correctness": true}) to correct it'
    )


@pytest.mark.parametrize("mode", ["normal", "strict"])
def test_labels_that_cannot_correct_say_why(project: Project, mode: str) -> None:
    # Every labelled item labelled pass: the judge's specificity is unknown, and the two
    # unlabelled items need it (with every item labelled, nothing would).
    project.dataset(rows(8, 2, label=True, prefix="p") + rows(1, 1, label=None, prefix="a"))
    write(project, ("test_qa", "data.jsonl", "", 'fail_under={"correctness": 0.5}'))
    result = project.run("--eval", f"--eval-gate-mode={mode}")
    (line,) = gate_lines(result)
    why = (
        "not corrected by the labels of test_qa: no labelled item is labelled fail: the judge's "
        "specificity is unknown"
    )
    if mode == "normal":
        assert line == f"met: test_qa: fail_under correctness: mean 0.750 >= 0.5; {why}"
    else:
        assert line.startswith("NOT MET: test_qa: fail_under correctness (strict): mean 0.750, lower bound ")
        assert line.endswith(f"; strict mode refuses it: {why}")


def test_a_judge_no_better_than_chance_corrects_nothing(project: Project) -> None:
    # Labelled pass: the judge passes 1 of 2; labelled fail: it fails 1 of 2. Se + Sp = 1. The
    # two unlabelled items would need correcting (with every item labelled, none would).
    labelled = rows(1, 1, label=True, prefix="p") + rows(1, 1, label=False, prefix="f")
    project.dataset(labelled + rows(1, 1, label=None, prefix="a"))
    write(project, ("test_qa", "data.jsonl", "", 'fail_under={"correctness": 0.5}'))
    (line,) = gate_lines(project.run("--eval"))
    assert line == (
        "met: test_qa: fail_under correctness: mean 0.500 >= 0.5; not corrected by the labels of "
        "test_qa: the judge does no better than chance on the labels (sensitivity 0.500 + "
        "specificity 0.500 <= 1): a pass rate it gives cannot be corrected"
    )


@pytest.mark.parametrize(("bound", "met"), [(0.3, True), (0.75, False)])
def test_strict_mode_gates_on_the_corrected_lower_bound(project: Project, bound: float, met: bool) -> None:
    project.dataset(CALIBRATION, "labelled.jsonl")
    project.dataset(rows(30, 10, label=None, prefix="a"), "app.jsonl")
    write(
        project,
        ("test_calibration", "labelled.jsonl", "", ""),
        ("test_app", "app.jsonl", "", f'fail_under={{"correctness": {bound}}}'),
    )
    result = project.run("--eval", "--eval-gate-mode=strict")
    found = expected([1.0] * 30 + [0.0] * 10)
    low, p = found.bounds(0.95).low, found.p_above(bound)
    assert (p <= 0.05) is met
    verb = ">=" if met else "is below"
    shown_p = "p<0.001" if p < 0.001 else f"p={p:.3f}"
    assert gate_lines(result) == [
        f"{'met' if met else 'NOT MET'}: test_app: fail_under correctness (strict): pass rate 0.786 "
        f"corrected for the judge's errors (0.750 as judged), lower bound {low:.3f} {verb} {bound:g} "
        f"({shown_p})"
    ]


def test_a_stored_calibration_corrects_a_later_session_until_the_judge_changes(
    project: Project, capsys: pytest.CaptureFixture[str]
) -> None:
    project.dataset(CALIBRATION, "labelled.jsonl")
    project.dataset(rows(30, 10, label=None, prefix="a"), "app.jsonl")
    write(project, ("test_calibration", "labelled.jsonl", "", ""))
    project.run("--eval")
    # Kept by the judge's identity: the labelled items' verdicts, never their content.
    (kept,) = (project.store_path.parent / "calibrations").glob("*/*.json")
    stored = json.loads(kept.read_text())
    assert (stored["score"], stored["experiment"], len(stored["items"])) == (
        "correctness",
        "test_calibration",
        20,
    )
    assert stored["items"][0] == {"item_id": "p0", "passed": 1, "trials": 1, "label": True}
    calibration_run = stored["run_id"]

    # A later session gates the app alone: the stored labels correct the same judge.
    write(project, ("test_app", "app.jsonl", "", 'fail_under={"correctness": 0.6}'))
    result, report = project.run_report("--eval")
    assert gate_lines(result) == [
        "met: test_app: fail_under correctness: pass rate 0.786 corrected for the judge's errors "
        "(0.750 as judged) >= 0.6"
    ]
    (gate,) = report["experiments"][0]["gates"]
    assert gate["notes"][1].startswith(
        f"corrected by 20 labelled item(s) of test_calibration (run {calibration_run}, 20"
    )
    # opik-eval gate judges the stored run the same way (its 10 failed trials fail it).
    assert main(["--store", str(project.store_path), "gate", "last"]) == 1
    assert (
        "pass rate 0.786 corrected for the judge's errors (0.750 as judged) >= 0.6" in capsys.readouterr().out
    )

    # The judge's prompt changes: its old labels no longer hold, and the gate says so.
    write(project, ("test_app", "app.jsonl", '"Is it right?"', 'fail_under={"correctness": 0.6}'))
    (line,) = gate_lines(project.run("--eval", "--eval-gate-mode=strict"))
    assert line.endswith(
        f"; strict mode refuses it: the judge of correctness is not calibrated (the labels of "
        f"test_calibration, run {calibration_run}, were for another version of it: its prompt, model "
        "or code changed since): its errors are not in this bound; label some items "
        '("labels": {"correctness": true}) to correct it'
    )


def test_strict_mode_refuses_a_judge_below_its_floor(project: Project) -> None:
    # The calibration: kappa 0.7 (agreement 17/20, chance 0.5), sensitivity 0.9, specificity 0.8;
    # 10 more items nobody labelled, 5 judged pass: (10 + 10 x (0.5 + 0.8 - 1) / 0.7) / 30.
    project.dataset(CALIBRATION + rows(5, 5, label=None, prefix="a"))
    write(project, ("test_qa", "data.jsonl", "", 'fail_under={"correctness": 0.05}'))
    floors = ("--eval-judge-floor=kappa=0.8", "--eval-judge-floor=specificity=0.85")
    (line,) = gate_lines(project.run("--eval", "--eval-gate-mode=strict", *floors))
    assert line.startswith("NOT MET: test_qa: fail_under correctness (strict): pass rate 0.476 corrected")
    assert line.endswith(
        "; strict mode refuses it: the judge's calibration is below its floor: kappa 0.700 < 0.8, "
        "specificity 0.800 < 0.85 (--eval-judge-floor)"
    )
    # Floors the judge clears, from the ini file: the gate rests on the corrected bound alone.
    project.pytester.makeini(
        "[pytest]\nfilterwarnings = error\neval_judge_floor =\n    kappa=0.6\n    sensitivity=0.9\n"
    )
    (line,) = gate_lines(project.run("--eval", "--eval-gate-mode=strict"))
    assert line.startswith("met: test_qa: fail_under correctness (strict): pass rate 0.476 corrected")
    assert "floor" not in line


def test_a_floor_does_not_refuse_a_gate_on_labels_alone(project: Project) -> None:
    # Every item labelled: the rate is the labels' (0.5), whatever the judge's kappa of 0.7.
    project.dataset(CALIBRATION)
    write(project, ("test_qa", "data.jsonl", "", 'fail_under={"correctness": 0.05}'))
    (line,) = gate_lines(project.run("--eval", "--eval-gate-mode=strict", "--eval-judge-floor=kappa=0.8"))
    assert line.startswith(
        "met: test_qa: fail_under correctness (strict): pass rate 0.500 corrected for the judge's errors, "
        "20 labelled item(s) by their labels (0.550 as judged), lower bound "
    )
    assert "floor" not in line


def test_a_floor_on_an_unknown_figure_is_a_usage_error(project: Project) -> None:
    project.dataset(CALIBRATION)
    write(project, ("test_qa", "data.jsonl", "", ""))
    result = project.run("--eval", "--eval-judge-floor=agreement=0.5")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*--eval-judge-floor: expected FIGURE=MIN, FIGURE one of kappa, sensitivity, specificity and "
            "MIN from 0 to 1 (kappa: -1 to 1), such as kappa=0.6; got 'agreement=0.5'"
        ]
    )


# A judge whose verdicts change without any change to its prompt, model name or code: as when the
# model behind an API name is updated. Its identity stays the same.
DRIFTING = """
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
        drifted = (HERE / "drifted.txt").exists() and id in ("p0", "p1", "p2", "f0")
        return ScoreResult(name=self.name, value=float(output) if not drifted else 1.0 - float(output))


@pytest.mark.eval(dataset="labelled.jsonl", metrics=[Judge()])
def test_calibration(eval_item):
    return {"output": eval_item["judge"]}
"""


def test_a_judge_whose_verdicts_change_is_reported_as_drift(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    summary = project.path / "step_summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    project.dataset(CALIBRATION, "labelled.jsonl")
    project.write("test_eval.py", DRIFTING)
    result, report = project.run_report("--eval")
    assert report["judge_drift"] == []  # nothing to compare with yet
    first_run = report["run_id"]
    (project.path / "drifted.txt").write_text("")
    result, report = project.run_report("--eval")
    # p0, p1 and p2 (labelled and judged pass) now fail; f0 (labelled fail, judged pass) now fails
    # too: 4 of 20 changed, all the same way.
    (drift,) = report["judge_drift"]
    assert (drift["items"], drift["changed"], drift["now_fail"], drift["now_pass"]) == (20, 4, 4, 0)
    assert drift["p_value"] == pytest.approx(2 * 0.5**4)
    assert drift["sensitivity"] == pytest.approx([0.9, 0.6])
    assert drift["specificity"] == pytest.approx([0.8, 0.9])
    (line,) = [line for line in result.outlines if line.startswith("judge drift:")]
    assert line == (
        f"judge drift: correctness (judge {drift['judge'][:12]}): 4 of 20 labelled items judged "
        f"otherwise than in test_calibration (run {first_run}, {drift['since'][-11:-1]}): 4 now fail "
        "more, 0 now pass more (p=0.125 that they go either way as likely), sensitivity 0.900 -> "
        "0.600, specificity 0.800 -> 0.900"
    )
    assert f"⚠️ {line}" in summary.read_text(encoding="utf-8")  # the job summary's words
    # Compared with the calibration it replaced: the same verdicts again are no drift.
    assert project.run_report("--eval")[1]["judge_drift"] == []


def test_eval_calibrate_runs_only_the_labelled_items_without_the_judge_cache(project: Project) -> None:
    # 20 labelled items, and 10 of the app's that nobody labelled.
    project.dataset(CALIBRATION + rows(5, 5, label=None, prefix="a"), "labelled.jsonl")
    project.write("test_eval.py", DRIFTING)
    result, report = project.run_report("--eval-calibrate", "--eval-judge-cache=on")
    result.assert_outcomes(passed=11, failed=9)  # the labelled 20 only
    (experiment,) = report["experiments"]
    assert experiment["summary"]["trials"] == 20
    assert experiment["calibrations"][0]["items"] == 20
    assert report["judge_cache"] is None  # off: a cached score is yesterday's judge's
    assert not (project.store_path.parent / "judge-cache").exists()
    assert list((project.store_path.parent / "calibrations").glob("*/*.json"))
    store = LocalStore(project.store_path, create=False)
    try:
        (stored,) = store.find(report["run_id"])[1]
        # A calibration, only the labelled items, is never the "last" run to resume or compare with.
        with pytest.raises(ExperimentNotFound, match="no run but calibrations"):
            store.find("last")
    finally:
        store.close()
    assert stored.selection.labelled


def test_opik_eval_calibrate_judges_the_stored_outputs_again(project: Project) -> None:
    project.dataset(CALIBRATION + rows(5, 5, label=None, prefix="a"), "labelled.jsonl")
    project.write("test_eval.py", DRIFTING)
    project.run("--eval")  # 30 items: the labelled ones keep the judge's calibration
    (project.path / "drifted.txt").write_text("")  # the model behind the judge changed
    (kept,) = (project.store_path.parent / "calibrations").glob("*/*.json")
    before = json.loads(kept.read_text())["run_id"]
    # A drift bound in the ini file fails pytest's sessions; calibrate accepts the change.
    project.pytester.makeini("[pytest]\nfilterwarnings = error\neval_max_judge_drift = 0.1\n")
    done = subprocess.run(
        [sys.executable, "-m", "pytest_opik_eval.cli", "calibrate", "last", "-p", "no:randomly"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=project.path,
        check=False,
    )
    # The judge's misses fail no trial: on an item labelled fail, a miss is the judge right.
    assert done.returncode == 0, done.stdout + done.stderr
    # The 20 labelled items' stored outputs, judged again: not the task, not the other 10.
    assert "labels: correctness (threshold 0.5, 20 items x 1 trial)" in done.stdout
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("judge drift:")]
    assert ": 4 of 20 labelled items judged otherwise than in test_calibration (run " in line
    assert json.loads(kept.read_text())["run_id"] != before  # today's verdicts are its calibration


def test_a_regression_gate_says_when_the_judge_changed_since_the_baseline(project: Project) -> None:
    project.dataset(rows(30, 10, label=None, prefix="a"), "app.jsonl")
    write(project, ("test_app", "app.jsonl", "", ""))
    project.run("--eval")
    gate = ("--eval", "--eval-baseline=last", "--eval-max-regression=correctness=0.05")
    # The same judge: nothing to say.
    _, report = project.run_report(*gate)
    (same,) = report["experiments"][0]["gates"]
    assert not any("changed since the baseline" in note for note in same["notes"])
    baseline = report["experiments"][0]["id"]
    # Another prompt: the judge is another, and the gate says what the change mixes.
    write(project, ("test_app", "app.jsonl", '"Is it right?"', ""))
    _, report = project.run_report(*gate)
    (changed,) = report["experiments"][0]["gates"]
    assert (
        "the judge of correctness changed since the baseline (its prompt, model or code): the change "
        "mixes the app's with the judge's; judge the baseline's outputs again with today's judge "
        f"(opik-eval rescore {baseline}) and compare with that"
    ) in changed["notes"]


def test_a_damaged_calibration_file_is_ignored(project: Project) -> None:
    project.dataset(CALIBRATION, "labelled.jsonl")
    project.dataset(rows(30, 10, label=None, prefix="a"), "app.jsonl")
    write(project, ("test_calibration", "labelled.jsonl", "", ""))
    project.run("--eval")
    (kept,) = (project.store_path.parent / "calibrations").glob("*/*.json")
    damaged = json.loads(kept.read_text())
    damaged["items"][0]["trials"] = 0  # a bad merge, a hand edit: 1 passed of 0 trials
    kept.write_text(json.dumps(damaged))
    write(project, ("test_app", "app.jsonl", "", 'fail_under={"correctness": 0.6}'))
    (line,) = gate_lines(project.run("--eval"))
    assert line.startswith(
        "met: test_app: fail_under correctness: mean 0.750 >= 0.6; the judge of correctness is not calibrated"
    )


def test_a_calibration_is_found_only_under_a_judge_identity(tmp_path: Path) -> None:
    stored = Calibrations(tmp_path / "calibrations")
    outside = tmp_path / "outside"
    outside.mkdir()
    assert stored.of("../outside", "correctness") is None  # not a sha256: never a path
    assert stored.of("0" * 64, "correctness") is None  # none kept yet


def test_a_part_of_a_calibration_never_replaces_the_whole(project: Project) -> None:
    project.dataset(CALIBRATION, "labelled.jsonl")
    write(project, ("test_calibration", "labelled.jsonl", "", ""))
    project.run("--eval")
    (kept,) = (project.store_path.parent / "calibrations").glob("*/*.json")
    assert len(json.loads(kept.read_text())["items"]) == 20
    project.run("--eval", "-k", "p0 or p1")  # 2 of the 20 labelled items
    assert len(json.loads(kept.read_text())["items"]) == 20


def test_a_calibration_stale_by_judge_samples_alone_says_so(project: Project) -> None:
    project.dataset(CALIBRATION, "labelled.jsonl")
    project.dataset(rows(30, 10, label=None, prefix="a"), "app.jsonl")
    write(project, ("test_calibration", "labelled.jsonl", "", ""))
    project.run("--eval")  # kept for the judge called once
    (kept,) = (project.store_path.parent / "calibrations").glob("*/*.json")
    run = json.loads(kept.read_text())["run_id"]
    stale = "were for another version of it: {} since): its errors are not in this bound"
    gate = 'fail_under={"correctness": 0.6}'

    # The same judge, sampled three times: only judge_samples changed its identity.
    write(project, ("test_app", "app.jsonl", "", f"judge_samples=3, {gate}"))
    (line,) = gate_lines(project.run("--eval"))
    assert (
        f"the labels of test_calibration, run {run}, " + stale.format("judge_samples changed (1 -> 3)")
        in line
    )
    # Another prompt as well: both are said.
    write(project, ("test_app", "app.jsonl", '"Is it right?"', f"judge_samples=3, {gate}"))
    (line,) = gate_lines(project.run("--eval"))
    assert stale.format("its prompt, model or code and judge_samples changed (1 -> 3)") in line
    # Only the prompt: as before.
    write(project, ("test_app", "app.jsonl", '"Is it right?"', gate))
    (line,) = gate_lines(project.run("--eval"))
    assert stale.format("its prompt, model or code changed") in line

    # Calibrated sampled three times only, gated called once: the stored count tells it apart too.
    shutil.rmtree(project.store_path.parent / "calibrations")
    write(project, ("test_calibration", "labelled.jsonl", "", "judge_samples=3,"))
    project.run("--eval")
    write(project, ("test_app", "app.jsonl", "", gate))
    (line,) = gate_lines(project.run("--eval"))
    assert stale.format("judge_samples changed (3 -> 1)") in line
    # Both sampled, three and five times: what else changed cannot be told, and the line says so.
    write(project, ("test_app", "app.jsonl", "", f"judge_samples=5, {gate}"))
    (line,) = gate_lines(project.run("--eval"))
    assert (
        stale.format("judge_samples changed (3 -> 5); its prompt, model or code may have changed too") in line
    )


def test_a_regression_gate_says_when_only_judge_samples_changed_since_the_baseline(
    project: Project,
) -> None:
    project.dataset(rows(30, 10, label=None, prefix="a"), "app.jsonl")
    write(project, ("test_app", "app.jsonl", "", ""))
    project.run("--eval")
    gate = ("--eval", "--eval-baseline=last", "--eval-max-regression=correctness=0.05")
    _, report = project.run_report(*gate, "--eval-judge-samples=2")
    (changed,) = report["experiments"][0]["gates"]
    assert any(
        note.startswith(
            "the judge of correctness changed since the baseline (judge_samples changed (1 -> 2)): the "
            "change mixes the app's with the judge's;"
        )
        for note in changed["notes"]
    ), changed["notes"]
