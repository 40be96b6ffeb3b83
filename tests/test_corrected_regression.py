"""Regression gates on a judge's pass rate corrected for the judge's errors, end to end: each run
corrected by its own calibration, so that a change of the judge alone is no regression of the
app; a run whose judge nobody calibrated said so, and refused in strict mode."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import Project

from pytest_opik_eval.verdict.calibration import LabelledItem
from pytest_opik_eval.verdict.correction import CorrectedChange, corrected_change

# The judge's verdict on an answer is the item's: "before" its model changed, "after" once the
# file drifted.txt exists (the model behind an API name changed; its identity did not). The
# app's answer is the item itself, so its verdicts are fixed: the app never changes here unless a
# test rewrites its dataset.
JUDGED = """
import pathlib
import pytest
from pytest_opik_eval.metrics import BaseMetric, ScoreResult

HERE = pathlib.Path(__file__).parent


class Judge(BaseMetric):
    judge = True

    def __init__(self, prompt="Is the answer right?"):
        super().__init__(name="correctness")
        self.threshold = 0.5
        self.prompt = prompt

    def score(self, output, **kwargs):
        drifted = (HERE / "drifted.txt").exists()
        return ScoreResult(name=self.name, value=float(output["after" if drifted else "before"]))


@pytest.mark.eval(dataset="labelled.jsonl", metrics=[Judge()])
def test_calibration(eval_item):
    return {{"output": eval_item["verdicts"]}}


@pytest.mark.eval(dataset="app.jsonl", metrics=[Judge({prompt})])
def test_app(eval_item):
    return {{"output": eval_item["verdicts"]}}
"""


def items(prefix: str, counts: list[tuple[int, int, int]], label: bool | None) -> list[dict[str, Any]]:
    """``count`` items for each (count, verdict before, verdict after), labelled ``label``."""
    found: list[dict[str, Any]] = []
    for count, before, after in counts:
        for _ in range(count):
            row: dict[str, Any] = {
                "id": f"{prefix}{len(found)}",
                "verdicts": {"before": before, "after": after},
            }
            if label is not None:
                row["labels"] = {"correctness": label}
            found.append(row)
    return found


# The judge before: sensitivity 18/20 = 0.9, specificity 16/20 = 0.8; after: 0.6 and 0.9.
LABELLED = items("p", [(12, 1, 1), (6, 1, 0), (2, 0, 0)], True) + items(
    "f", [(2, 1, 1), (2, 1, 0), (16, 0, 0)], False
)
# The app: 70 right answers, 30 wrong ones. The judge before passes 63 + 6 = 69 (0.69); after,
# 42 + 3 = 45 (0.45). Corrected, both are 0.7: (0.69 + 0.8 - 1) / 0.7 and (0.45 + 0.9 - 1) / 0.5.
APP = items("r", [(42, 1, 1), (21, 1, 0), (7, 0, 0)], None) + items(
    "w", [(3, 1, 1), (3, 1, 0), (24, 0, 0)], None
)
GATE = (
    "--eval",
    "--eval-soft",
    "--eval-baseline=last",
    "--eval-max-regression=correctness=0.05",
    "--eval-judge-cache=off",
)


def setup(project: Project, app: list[dict[str, Any]] = APP, prompt: str = "") -> None:
    project.dataset(LABELLED, "labelled.jsonl")
    project.dataset(app, "app.jsonl")
    project.write("test_eval.py", JUDGED.format(prompt=prompt))


def app_gate(report: dict[str, Any]) -> dict[str, Any]:
    (experiment,) = [e for e in report["experiments"] if e["name"] == "test_app"]
    (gate,) = experiment["gates"]
    assert isinstance(gate, dict)
    return gate


def labelled(verdict: str) -> list[LabelledItem]:
    return [LabelledItem(r["id"], r["verdicts"][verdict], 1, r["labels"]["correctness"]) for r in LABELLED]


def test_a_change_of_the_judge_alone_is_drift_not_a_regression(project: Project) -> None:
    setup(project)
    project.run("--eval", "--eval-soft", "--eval-judge-cache=off")
    (project.path / "drifted.txt").write_text("")  # the app unchanged, the judge's errors changed
    result, report = project.run_report(*GATE)
    gate = app_gate(report)
    # As judged, the pass rate fell from 0.69 to 0.45; corrected, it is 0.7 in both runs.
    assert gate["met"]
    assert gate["value"] == pytest.approx(0.0, abs=1e-9)
    assert gate["interval"]["method"] == "corrected"
    assert gate["detail"].startswith(
        "pass rate corrected for the judge's errors changed by +0.000 from the baseline (at most -0.05 allowed)"
    )
    note = next(n for n in gate["notes"] if n.startswith("corrected for the judge's errors"))
    baseline_run = report["experiments"][0]["baseline"]["run_id"]
    assert note.startswith(
        "corrected for the judge's errors, this run by 40 labelled item(s) of test_calibration "
        f"(sensitivity 0.600, specificity 0.900), the baseline by 40 of test_calibration (run {baseline_run}, "
    )
    assert note.endswith(
        "): sensitivity 0.900, specificity 0.800; the pass rate changed by -0.240 as judged, +0.000 "
        "corrected; the bounds carry the labels' sampling error and the runs'"
    )
    # The judge's change is reported as what it is.
    (drift,) = report["judge_drift"]
    assert (drift["changed"], drift["now_fail"]) == (8, 8)
    assert any(line.startswith("judge drift: correctness") for line in result.outlines)
    assert result.ret == pytest.ExitCode.OK


def test_a_regression_of_the_app_is_corrected_for_the_judge(project: Project) -> None:
    setup(project)
    project.run("--eval", "--eval-soft", "--eval-judge-cache=off")
    # The app breaks 21 of its right answers: the judge (unchanged) fails 21 * 0.9 - ... of them.
    broken = items("r", [(42, 0, 0), (21, 1, 1), (7, 0, 0)], None)[:21] + APP[21:]
    project.dataset(broken, "app.jsonl")
    result, report = project.run_report(*GATE)
    gate = app_gate(report)
    before = [float(r["verdicts"]["before"]) for r in APP]
    now = [float(r["verdicts"]["before"]) for r in broken]
    expected = corrected_change(
        {r["id"]: v for r, v in zip(broken, now, strict=True)},
        {r["id"]: v for r, v in zip(APP, before, strict=True)},
        labelled("before"),
        labelled("before"),
        0.05,
        1.0,
    )
    assert isinstance(expected, CorrectedChange)
    # 21 of 69 judged passes now fail: -0.21 as judged; over Se + Sp - 1 = 0.7, -0.3 corrected.
    assert expected.judged == pytest.approx(-0.21)
    assert expected.change == pytest.approx(-0.3)
    assert not gate["met"]
    assert gate["value"] == pytest.approx(-0.3)
    # At Holm's step: the calibration test is gated too (--eval-max-regression is every test's).
    low, high = expected.drop_bounds(0.975)
    assert (gate["interval"]["low"], gate["interval"]["high"]) == pytest.approx((-high, -low))
    assert gate["detail"].startswith(
        "pass rate corrected for the judge's errors dropped by 0.300 from the baseline, beyond the 0.05 allowed"
    )
    # One calibration for both: the same labels, the same verdicts, kept by the baseline's run.
    assert "the pass rate changed by -0.210 as judged, -0.300 corrected" in " ".join(gate["notes"])
    assert result.ret == pytest.ExitCode.TESTS_FAILED


@pytest.mark.parametrize("mode", ["normal", "strict"])
def test_a_regression_gate_on_an_uncalibrated_judge_says_so(project: Project, mode: str) -> None:
    project.dataset(APP, "app.jsonl")
    project.write(
        "test_eval.py",
        JUDGED.format(prompt="").split('@pytest.mark.eval(dataset="labelled')[0]
        + (
            '@pytest.mark.eval(dataset="app.jsonl", metrics=[Judge()])\n'
            "def test_app(eval_item):\n"
            '    return {"output": eval_item["verdicts"]}\n'
        ),
    )
    project.run("--eval", "--eval-soft")
    _, report = project.run_report(*GATE, f"--eval-gate-mode={mode}")
    gate = app_gate(report)
    why = (
        "the judge of correctness is not calibrated: its errors are not in this change; label some "
        'items ("labels": {"correctness": true}) to correct it'
    )
    if mode == "normal":
        assert gate["met"]
        assert gate["detail"].endswith(f"; {why}")
    else:
        assert not gate["met"]
        assert gate["detail"].endswith(f"; strict mode refuses it: {why}")
    assert gate["interval"]["method"] == "score"


def test_a_baseline_judged_by_another_judge_without_labels_is_not_corrected(project: Project) -> None:
    setup(project, prompt='"Is it right?"')  # the app's judge is not the calibration test's
    project.run("--eval", "--eval-soft")
    setup(project)  # now it is: this run is calibrated, its baseline is not
    _, report = project.run_report(*GATE)
    gate = app_gate(report)
    baseline = report["experiments"][1]["baseline"]["experiment_id"]
    assert gate["detail"].endswith(
        "; the baseline's judge of correctness was another version of it (its prompt, model or code) "
        "and its run kept no calibration: judge the baseline's outputs again with today's judge "
        f"(opik-eval rescore {baseline}) and compare with that"
    )
    assert gate["interval"]["method"] == "score"
