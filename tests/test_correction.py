"""The correction of a judge's pass rate for its errors (verdict/correction.py), on cases small
enough to work by hand."""

from __future__ import annotations

import math

import pytest

from pytest_opik_eval.verdict.calibration import LabelledItem
from pytest_opik_eval.verdict.correction import Correction, correction


def labels(passes: tuple[int, int], fails: tuple[int, int]) -> list[LabelledItem]:
    """Items labelled pass (``passes``: judged pass, judged fail) and fail (judged fail, judged
    pass), one trial each."""
    (true_pass, false_fail), (true_fail, false_pass) = passes, fails
    counts = ((True, 1, true_pass), (True, 0, false_fail), (False, 0, true_fail), (False, 1, false_pass))
    return [
        LabelledItem(f"{label}-{passed}-{i}", passed, 1, label)
        for label, passed, count in counts
        for i in range(count)
    ]


def run(passed: int, items: int) -> list[float]:
    return [1.0] * passed + [0.0] * (items - passed)


def corrected(observed: list[float], labelled: list[LabelledItem]) -> Correction:
    result = correction(observed, labelled)
    assert isinstance(result, Correction), result
    return result


def test_a_judge_never_wrong_leaves_the_observed_rate() -> None:
    c = corrected(run(70, 100), labels((20, 0), (10, 0)))
    assert (c.sensitivity, c.specificity, c.youden) == (1.0, 1.0, 1.0)
    assert c.estimate == pytest.approx(0.7)


def test_the_estimate_and_interval_by_hand() -> None:
    # Se = 18/20, Sp = 8/10, p = 70/100: t = (0.7 + 0.8 - 1) / 0.7 = 5/7.
    c = corrected(run(70, 100), labels((18, 2), (8, 2)))
    assert c.estimate == pytest.approx(5 / 7)
    # Two passes and two failures added to each: p = 72/104, Se = 20/24, Sp = 10/14, and the
    # corrected rate of those, 0.742, is above 5/7: the bounds reach from 5/7 down and from the
    # adjusted rate up.
    p, se, sp = 72 / 104, 20 / 24, 10 / 14
    adjusted = (p + sp - 1) / (se + sp - 1)
    variance = p * (1 - p) / 104 + adjusted**2 * se * (1 - se) / 24 + (1 - adjusted) ** 2 * sp * (1 - sp) / 14
    error = math.sqrt(variance) / (se + sp - 1)
    assert c.adjusted == pytest.approx(adjusted) == pytest.approx(0.74247, abs=1e-5)
    bounds = c.bounds(0.95)
    assert bounds.low == pytest.approx(5 / 7 - 1.6448536 * error)
    assert bounds.high == pytest.approx(adjusted + 1.6448536 * error)
    interval = c.interval(0.95)
    assert interval.low == pytest.approx(5 / 7 - 1.9599640 * error)
    assert interval.high == pytest.approx(min(1.0, adjusted + 1.9599640 * error))
    assert (interval.level, interval.one_sided, bounds.one_sided) == (0.95, False, True)


@pytest.mark.parametrize(
    ("passed", "passes", "fails"), [(70, (18, 2), (8, 2)), (98, (29, 1), (9, 1)), (25, (9, 1), (18, 2))]
)
def test_the_interval_holds_the_estimate(
    passed: int, passes: tuple[int, int], fails: tuple[int, int]
) -> None:
    c = corrected(run(passed, 100), labels(passes, fails))
    for confidence in (0.8, 0.95, 0.99):
        bounds = c.bounds(confidence)
        assert bounds.low <= c.estimate <= bounds.high


def test_a_judge_no_better_than_chance_corrects_nothing() -> None:
    # Se = 0.5, Sp = 0.5: Se + Sp - 1 = 0.
    reason = correction(run(5, 10), labels((5, 5), (5, 5)))
    assert isinstance(reason, str)
    assert "no better than chance" in reason


def test_no_pass_label_or_no_fail_label_says_which() -> None:
    only_passes = correction(run(5, 10), labels((5, 0), (0, 0)))
    only_fails = correction(run(5, 10), labels((0, 0), (5, 0)))
    assert isinstance(only_passes, str)
    assert "specificity is unknown" in only_passes
    assert isinstance(only_fails, str)
    assert "sensitivity is unknown" in only_fails
    assert isinstance(correction([], labels((5, 0), (5, 0))), str)


def test_a_rate_below_the_false_passes_corrects_to_zero() -> None:
    # Sp = 0.8: a judge passes at least 20% of answers that all fail; 10% observed is below that.
    c = corrected(run(10, 100), labels((20, 0), (8, 2)))
    assert c.estimate == 0.0
    assert c.bounds(0.95).low == 0.0
    assert 0.0 < c.bounds(0.95).high < 1.0


@pytest.mark.parametrize("confidence", [0.95, 0.9975])
def test_a_higher_observed_rate_never_lowers_the_bound(confidence: float) -> None:
    labelled = labels((16, 4), (7, 3))
    lows = [corrected(run(passed, 30), labelled).bounds(confidence).low for passed in range(31)]
    highs = [corrected(run(passed, 30), labelled).bounds(confidence).high for passed in range(31)]
    assert lows == sorted(lows)
    assert highs == sorted(highs)
    assert lows[-1] > lows[0]


def test_a_better_run_never_gets_a_lower_bound_even_where_the_estimate_is_pinned_at_one() -> None:
    # A judge that misses many true passes (sensitivity 0.56) and no true failure: a high
    # observed rate corrects past 1, where the bound once fell as the rate rose (the standard
    # error was taken at the unbounded rate). Over label tables with 10 or more items of each
    # label, every bound rises with the observed rate.
    for passes in ((10, 0), (10, 8), (20, 4), (30, 6)):
        for fails in ((10, 0), (10, 2), (25, 6)):
            labelled = labels(passes, fails)
            for items in (30, 100):
                lows = []
                for passed in range(items + 1):
                    found = correction(run(passed, items), labelled)
                    if isinstance(found, Correction):
                        lows.append(found.bounds(0.95).low)
                assert all(b >= a - 1e-9 for a, b in zip(lows, lows[1:], strict=False)), (
                    passes,
                    fails,
                    items,
                )


@pytest.mark.parametrize("confidence", [0.8, 0.95, 0.99])
def test_p_above_agrees_with_the_bound(confidence: float) -> None:
    c = corrected(run(70, 100), labels((18, 2), (8, 2)))
    low = c.bounds(confidence).low
    assert c.p_above(low) == pytest.approx(1 - confidence)
    assert c.p_above(low - 0.01) < 1 - confidence < c.p_above(low + 0.01)


def test_trials_of_an_item_are_clustered() -> None:
    # The same shares, as 30 items of 3 trials each that always agree among themselves, or with
    # trials spread evenly: the spread of items' shares, not the trials' count, sets the width.
    labelled = labels((16, 4), (7, 3))
    agreeing = corrected([1.0] * 21 + [0.0] * 9, labelled)
    spread = corrected([1.0] * 3 + [2 / 3] * 27, labelled)
    assert agreeing.observed == pytest.approx(spread.observed)
    assert agreeing.estimate == pytest.approx(spread.estimate)
    width = agreeing.interval(0.95).high - agreeing.interval(0.95).low
    assert spread.interval(0.95).high - spread.interval(0.95).low < width
