"""The calibration statistics (verdict/calibration.py), on tables small enough to work by hand."""

from __future__ import annotations

import math

import pytest

from pytest_opik_eval.verdict import samples
from pytest_opik_eval.verdict import statistics as stats
from pytest_opik_eval.verdict.calibration import (
    LabelledItem,
    calibrate,
    calibrations,
    cohen_kappa,
    kappa_of,
    label_verdict,
    labelled_items,
)


def item(item_id: str, label: bool, passed: int, trials: int = 1) -> LabelledItem:
    return LabelledItem(item_id, passed, trials, label)


# A: labelled pass, judged pass; B: labelled pass, judged fail; C, D: labelled fail, judged fail.
FOUR = [item("a", True, 1), item("b", True, 0), item("c", False, 0), item("d", False, 0)]


def test_kappa_by_hand() -> None:
    # po = 3/4; the judge passes 1/4, the labels 2/4: pe = 1/4 * 1/2 + 3/4 * 1/2 = 1/2.
    assert kappa_of(FOUR) == pytest.approx((0.75 - 0.5) / (1 - 0.5))


def test_kappa_weighs_each_item_once_whatever_its_trials() -> None:
    # Item a's 4 trials (3 passed) weigh as much as item c's single one: a table of shares
    # a = 3/4 (judge pass, label pass), c = 1/4 (judge fail, label pass), d = 1 (fail, fail).
    items = [item("a", True, 3, 4), item("c", False, 0, 1)]
    po = (0.75 + 1.0) / 2
    judge, label = 0.75 / 2, 0.5
    pe = judge * label + (1 - judge) * (1 - label)
    assert kappa_of(items) == pytest.approx((po - pe) / (1 - pe))
    # Counted trial by trial instead, the four trials of a would outweigh c: another kappa.
    assert kappa_of(items) != pytest.approx(
        kappa_of([*[item(f"a{i}", True, i < 3) for i in range(4)], items[1]])
    )


def test_jackknife_by_hand() -> None:
    # Leave-one-out kappas: without a: 0 (po 2/3 = pe); without b: 1; without c or d: 0.4.
    left_out = [0.0, 1.0, 0.4, 0.4]
    centre = sum(left_out) / 4
    se = math.sqrt(3 / 4 * sum((k - centre) ** 2 for k in left_out))
    assert se == pytest.approx(math.sqrt(0.3825))
    kappa = cohen_kappa(FOUR * 6)  # 24 items, so the bounds are not clipped
    assert kappa is not None
    # With 24 items: 6 "a" (judge pass, label pass), 6 "b" (fail, pass), 12 "c" or "d" (fail,
    # fail), each left out in turn and kappa computed on the 23 others.
    outs = []
    for judged_pass, label in [(1, True), (0, True), (0, False)]:
        a, b, f = 6 - (judged_pass == 1), 6 - (judged_pass == 0 and label), 12 - (not label)
        po = (a + f) / 23
        pe = (a / 23) * ((a + b) / 23) + (1 - a / 23) * (1 - (a + b) / 23)
        outs.append((po - pe) / (1 - pe))
    values = [outs[0]] * 6 + [outs[1]] * 6 + [outs[2]] * 12
    mean = sum(values) / 24
    se = math.sqrt(23 / 24 * sum((k - mean) ** 2 for k in values))
    t = 2.0686576104190406  # Student's t, 23 degrees of freedom, 0.975
    assert kappa.estimate == pytest.approx(0.5)
    assert kappa.low == pytest.approx(0.5 - t * se)
    assert kappa.high == pytest.approx(0.5 + t * se)
    assert kappa.low is not None
    assert kappa.high is not None
    assert -1 < kappa.low < kappa.high < 1


def test_jackknife_clips_to_the_range() -> None:
    kappa = cohen_kappa(FOUR)
    assert kappa is not None
    # 0.5 -/+ t(3) * sqrt(0.3825) = 0.5 -/+ 1.97: outside [-1, 1] on both sides.
    assert (kappa.low, kappa.high) == (-1.0, 1.0)


def test_kappa_undefined_when_chance_agreement_is_one() -> None:
    everything_passes = [item("a", True, 1), item("b", True, 1)]
    assert kappa_of(everything_passes) is None
    assert cohen_kappa(everything_passes) is None


def test_agreement_sensitivity_specificity_are_means_of_item_shares() -> None:
    items = [item("a", True, 2, 3), item("b", True, 3, 3), item("c", False, 1, 2), item("d", False, 0, 2)]
    found = calibrate("correctness", 0.5, items)
    assert (found.items, found.trials, found.label_pass, found.label_fail) == (4, 10, 2, 2)
    assert found.agreement is not None
    assert found.sensitivity is not None
    assert found.specificity is not None
    assert found.agreement.estimate == pytest.approx((2 / 3 + 1 + 1 / 2 + 1) / 4)
    assert found.sensitivity.estimate == pytest.approx((2 / 3 + 1) / 2)
    assert found.specificity.estimate == pytest.approx((1 / 2 + 1) / 2)
    # The interval of the pass rates over items, as the gates bound them.
    expected = stats.interval(samples.sample([2 / 3, 1.0], pass_fail=True))
    assert (found.sensitivity.low, found.sensitivity.high) == (expected.low, expected.high)
    assert found.notes == ()


def test_no_item_labelled_pass_leaves_sensitivity_undefined() -> None:
    found = calibrate("correctness", 0.5, [item("c", False, 0), item("d", False, 1)])
    assert found.sensitivity is None
    assert found.specificity is not None
    assert found.specificity.estimate == 0.5
    assert "sensitivity undefined: no item labelled pass" in found.notes


def test_no_item_labelled_fail_leaves_specificity_undefined() -> None:
    found = calibrate("correctness", 0.5, [item("a", True, 1), item("b", True, 0)])
    assert found.specificity is None
    assert "specificity undefined: no item labelled fail" in found.notes
    # The labels all say pass: chance agreement is the judge's pass rate, below 1, so kappa is 0.
    assert found.kappa is not None
    assert found.kappa.estimate == pytest.approx(0.0)


def test_no_items_gives_no_figures_and_says_so() -> None:
    found = calibrate("correctness", 0.5, [])
    assert (found.agreement, found.sensitivity, found.specificity, found.kappa) == (None, None, None, None)
    assert found.notes == ("no labelled item has a completed trial with this score",)


@pytest.mark.parametrize(
    ("label", "threshold", "verdict"),
    [
        (True, 0.5, True),
        (False, None, False),
        (0.5, 0.5, True),
        (0.49, 0.5, False),
        (1, None, True),
        (0.9, None, False),
    ],
)
def test_label_verdict(label: bool | float, threshold: float | None, verdict: bool) -> None:
    assert label_verdict(label, threshold) is verdict


def test_labelled_items_hold_the_judge_to_the_threshold() -> None:
    found = labelled_items({"a": True, "b": 0.2, "z": True}, {"a": [0.5, 0.4, 0.9], "b": [0.1]}, 0.5)
    # "z" has no completed trial: left out.
    assert found == [item("a", True, 2, 3), item("b", False, 0, 1)]


def test_calibrations_per_labelled_score_and_no_threshold_needs_pass_fail_scores() -> None:
    items: list[dict[str, object]] = [
        {"id": "a", "labels": {"equals_metric": True, "relevance": 0.9}},
        {"id": "b", "labels": {"equals_metric": False}},
        {"id": "c"},
    ]
    scores = {"equals_metric": {"a": [1.0], "b": [1.0], "c": [0.0]}, "relevance": {"a": [0.7]}}
    found = calibrations(items, "labels", scores, {"equals_metric": None, "relevance": None})
    assert [c.score for c in found] == ["equals_metric", "relevance"]
    equals, relevance = found
    assert (equals.items, equals.label_pass, equals.label_fail) == (2, 1, 1)
    assert equals.agreement is not None
    assert equals.agreement.estimate == 0.5
    assert relevance.agreement is None
    assert relevance.notes == (
        "no threshold, and its scores are not pass/fail: give it one (thresholds={'relevance': 0.5})",
    )
