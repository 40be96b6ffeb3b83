"""A gated experiment's own labelled items count by their labels, end to end: only the other
items' pass rate is corrected for the judge's errors, and the report says so; and an interval
is never narrower than the trials scored allow (``correction.share``)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from conftest import Project
from test_corrected_gates import CALIBRATION, gate_lines, rows, write

Z95 = 1.6448536  # one-sided 95%

# A judge whose verdict on each trial is the item's "judge" list at the trial's index (an item
# with a shorter list fails its later trials: they are never scored).
BY_TRIAL = """
import pytest
from pytest_opik_eval.metrics import BaseMetric, ScoreResult


class Judge(BaseMetric):
    judge = True

    def __init__(self):
        super().__init__(name="correctness")
        self.threshold = 0.5

    def score(self, output, **kwargs):
        return ScoreResult(name=self.name, value=float(output))

{tests}
"""

TEST = """
@pytest.mark.eval(dataset="{dataset}", metrics=[Judge()], trial_count=2, {marker})
def {name}(eval_item, eval_trial):
    return {{"output": eval_item["judge"][eval_trial]}}
"""


def item(item_id: str, label: bool | None, *judge: int) -> dict[str, Any]:
    found: dict[str, Any] = {"id": item_id, "judge": list(judge)}
    if label is not None:
        found["labels"] = {"correctness": label}
    return found


def test_labelled_items_count_by_their_labels_and_the_rest_is_corrected(project: Project) -> None:
    # CALIBRATION: 20 labelled items, 10 pass (the judge passes 9), 10 fail (it fails 8): Se 0.9,
    # Sp 0.8. 20 unlabelled items, 14 judged pass: corrected, (0.7 + 0.8 - 1) / 0.7 = 5/7.
    project.dataset(CALIBRATION + rows(14, 6, label=None, prefix="a"))
    write(project, ("test_qa", "data.jsonl", "", 'fail_under={"correctness": 0.5}'))
    result, report = project.run_report("--eval")
    estimate = (10 + 20 * 5 / 7) / 40
    assert gate_lines(result) == [
        f"met: test_qa: fail_under correctness: pass rate {estimate:.3f} corrected for the judge's "
        "errors, 20 labelled item(s) by their labels (0.625 as judged) >= 0.5"
    ]
    result.stdout.fnmatch_lines(
        [
            "  labels: correctness (threshold 0.5, 20 items x 1 trial): *; pass rate * as judged, "
            f"{estimate:.3f} [[]*] corrected (labelled items by their labels); labels of this experiment",
            "  corrected by 20 labelled item(s) of test_qa: sensitivity 0.900, specificity 0.800; the "
            "run's 20 labelled item(s) count by their labels, its other 20 by the judge's verdicts "
            "corrected; the bounds carry the labels' sampling error and the other items'",
        ]
    )
    experiment = report["experiments"][0]
    (gate,) = experiment["gates"]
    assert gate["value"] == pytest.approx(estimate)
    assert gate["correction"] == {
        "raw": 0.625,
        "sensitivity": 0.9,
        "specificity": 0.8,
        "labelled": 20,
        "source": "test_qa",
        "known": 20,
    }
    # By hand, each figure with two passes and two failures added: the labels' 12/24 over 24
    # items; the rest's pass rate 16/24, Se 11/14, Sp 10/14, corrected by the delta method.
    labels = 12 / 24
    p, se, sp = 16 / 24, 11 / 14, 10 / 14
    rest = (p + sp - 1) / (se + sp - 1)
    rest_variance = (
        p * (1 - p) / 24 + rest**2 * se * (1 - se) / 14 + (1 - rest) ** 2 * sp * (1 - sp) / 14
    ) / (se + sp - 1) ** 2
    reach = Z95 * math.sqrt(0.5**2 * labels * (1 - labels) / 24 + 0.5**2 * rest_variance)
    low, high = sorted((estimate, 0.5 * labels + 0.5 * rest))
    assert (gate["interval"]["low"], gate["interval"]["high"]) == pytest.approx((low - reach, high + reach))
    (calibration,) = experiment["calibrations"]
    assert calibration["corrected"]["estimate"] == pytest.approx(estimate)


def test_the_rest_is_bounded_when_no_unlabelled_item_fails(project: Project) -> None:
    # The 10 unlabelled items all judged pass: (1 + 0.8 - 1) / 0.7 is past 1, bounded to 1 before
    # the 10 of 20 labelled pass join them: 20 of 30. Correcting every item (21 of 30 judged
    # pass) would have said (0.7 + 0.8 - 1) / 0.7 = 0.714.
    project.dataset(CALIBRATION + rows(10, 0, label=None, prefix="a"))
    write(project, ("test_qa", "data.jsonl", "", 'fail_under={"correctness": 0.7}'))
    result, report = project.run_report("--eval")
    assert gate_lines(result) == [
        "NOT MET: test_qa: fail_under correctness: pass rate 0.667 corrected for the judge's errors, "
        "20 labelled item(s) by their labels (0.700 as judged) is below 0.7"
    ]
    (gate,) = report["experiments"][0]["gates"]
    assert gate["value"] == pytest.approx(20 / 30)
    assert gate["interval"]["high"] < 1.0


def test_every_item_labelled_pass_is_a_pass_rate_of_one(project: Project) -> None:
    # No item labelled fail: the judge's specificity is unknown, and nothing needs it.
    project.dataset(rows(9, 1, label=True, prefix="p"))
    write(project, ("test_qa", "data.jsonl", "", 'fail_under={"correctness": 0.8}'))
    result, report = project.run_report("--eval")
    assert gate_lines(result) == [
        "met: test_qa: fail_under correctness: pass rate 1.000 corrected for the judge's errors, "
        "10 labelled item(s) by their labels (0.900 as judged) >= 0.8"
    ]
    result.stdout.fnmatch_lines(
        [
            "  corrected by 10 labelled item(s) of test_qa: sensitivity 0.900, specificity undefined "
            "(no item labelled fail); every one of the run's 10 item(s) is labelled and counts by its "
            "label: the judge's errors do not enter, and the bounds carry the labels' sampling error"
        ]
    )
    (gate,) = report["experiments"][0]["gates"]
    assert (gate["value"], gate["correction"]["specificity"], gate["correction"]["known"]) == (1.0, None, 10)


def test_a_labelled_item_counts_once_by_its_label_whatever_its_trials(project: Project) -> None:
    # Two trials an item; p1's second is never scored. Labelled pass: p1 (judged 1), p2 (1, 0);
    # fail: f1 (0, 0), f2 (0, 1): Se = Sp = 0.75. Unlabelled: 2.5 of 4 judged pass, corrected
    # (0.625 + 0.75 - 1) / 0.5 = 0.75. In all (2 + 4 x 0.75) / 8; as judged, 4.5 of 8.
    project.dataset(
        [
            item("p1", True, 1),
            item("p2", True, 1, 0),
            item("f1", False, 0, 0),
            item("f2", False, 0, 1),
            item("a1", None, 1, 1),
            item("a2", None, 1, 0),
            item("a3", None, 0, 0),
            item("a4", None, 1, 1),
        ]
    )
    marker = 'fail_under={"correctness": 0.6}'
    project.write(
        "test_eval.py",
        BY_TRIAL.format(tests=TEST.format(name="test_qa", dataset="data.jsonl", marker=marker)),
    )
    result, report = project.run_report("--eval", "--eval-soft")
    (line,) = gate_lines(result)
    assert line.startswith(
        "NOT MET: test_qa: fail_under correctness: pass rate 0.625 corrected for the judge's errors, "
        "4 labelled item(s) by their labels (0.562 as judged) >= 0.6; 1 trial(s) pending"
    )
    (gate,) = report["experiments"][0]["gates"]
    assert gate["value"] == pytest.approx(0.625)
    assert gate["correction"]["raw"] == pytest.approx(4.5 / 8)
    assert (gate["correction"]["sensitivity"], gate["correction"]["specificity"]) == (0.75, 0.75)
    assert gate["correction"]["known"] == 4


def test_an_interval_is_never_narrower_than_the_trials_allow(project: Project) -> None:
    # 100 labelled items that a judge gets right on both trials calibrate it (Se = Sp = 1). The
    # app's 100 items each pass one of their two trials but one, which fails both: their shares
    # barely spread, and counted as 10,100 effective items they made a lower bound 0.02 below
    # 0.495. No interval may be narrower than 200 independent trials': 1.645 x sqrt(p (1 - p) / 200).
    labelled = [item(f"p{n}", True, 1, 1) for n in range(50)] + [
        item(f"f{n}", False, 0, 0) for n in range(50)
    ]
    app = [item(f"a{n}", None, 1, 0) for n in range(99)] + [item("a99", None, 0, 0)]
    project.dataset(labelled, "labelled.jsonl")
    project.dataset(app, "app.jsonl")
    tests = TEST.format(name="test_calibration", dataset="labelled.jsonl", marker="") + TEST.format(
        name="test_app", dataset="app.jsonl", marker='fail_under={"correctness": 0.4}'
    )
    project.write("test_eval.py", BY_TRIAL.format(tests=tests))
    _, report = project.run_report("--eval", "--eval-soft")
    (gate,) = next(e["gates"] for e in report["experiments"] if e["name"] == "test_app")
    assert gate["value"] == pytest.approx(0.495)
    assert gate["correction"]["known"] == 0
    assert gate["value"] - gate["interval"]["low"] >= Z95 * math.sqrt(0.495 * 0.505 / 200)
