"""The correction of a judge's pass rate for its errors (verdict/correction.py), on cases small
enough to work by hand."""

from __future__ import annotations

import math

import pytest

from pytest_opik_eval.verdict.calibration import LabelledItem
from pytest_opik_eval.verdict.correction import Correction, PassRate, correction, pass_rate, share


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


def corrected(observed: list[float], labelled: list[LabelledItem], trials: int = 1) -> Correction:
    result = correction(observed, labelled, trials=trials * len(observed))
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
    reason = correction(run(5, 10), labels((5, 5), (5, 5)), trials=10)
    assert isinstance(reason, str)
    assert "no better than chance" in reason


def test_no_pass_label_or_no_fail_label_says_which() -> None:
    only_passes = correction(run(5, 10), labels((5, 0), (0, 0)), trials=10)
    only_fails = correction(run(5, 10), labels((0, 0), (5, 0)), trials=10)
    assert isinstance(only_passes, str)
    assert "specificity is unknown" in only_passes
    assert isinstance(only_fails, str)
    assert "sensitivity is unknown" in only_fails
    assert isinstance(correction([], labels((5, 0), (5, 0)), trials=0), str)


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
                    found = correction(run(passed, items), labelled, trials=items)
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
    agreeing = corrected([1.0] * 21 + [0.0] * 9, labelled, trials=3)
    spread = corrected([1.0] * 3 + [2 / 3] * 27, labelled, trials=3)
    assert agreeing.observed == pytest.approx(spread.observed)
    assert agreeing.estimate == pytest.approx(spread.estimate)
    width = agreeing.interval(0.95).high - agreeing.interval(0.95).low
    assert spread.interval(0.95).high - spread.interval(0.95).low < width


def run_of(labelled: list[LabelledItem], passed: int, items: int) -> dict[str, list[float]]:
    """The labelled items' trials (one each, as judged) and ``items`` unlabelled ones, ``passed``
    of them judged pass."""
    values = {i.item_id: [float(i.passed)] for i in labelled}
    return values | {f"a{n}": [float(n < passed)] for n in range(items)}


def rate_of(values: dict[str, list[float]], labelled: list[LabelledItem], *, own: bool = True) -> PassRate:
    found = pass_rate(values, None, labelled, own=own)
    assert isinstance(found, PassRate), found
    return found


def test_labelled_items_count_by_their_labels_and_only_the_rest_is_corrected() -> None:
    # 30 labelled (20 pass: the judge passes 18; 10 fail: it fails 8): Se 0.9, Sp 0.8. 20 more,
    # 14 judged pass: corrected, (0.7 + 0.8 - 1) / 0.7 = 5/7. In all (20 + 20 x 5/7) / 50.
    labelled = labels((18, 2), (8, 2))
    rate = rate_of(run_of(labelled, 14, 20), labelled)
    assert rate.estimate == pytest.approx((20 + 20 * 5 / 7) / 50)
    assert rate.observed == pytest.approx((20 + 14) / 50)
    assert (rate.known and rate.known.items, rate.rest and rate.rest.items) == (30, 20)
    # By hand: the labels' pass rate with two passes and two failures added, 22/34; the rest's
    # adjusted estimates as in test_the_estimate_and_interval_by_hand, over 20 items.
    p, se, sp = 16 / 24, 20 / 24, 10 / 14
    rest = (p + sp - 1) / (se + sp - 1)
    rest_variance = (
        p * (1 - p) / 24 + rest**2 * se * (1 - se) / 24 + (1 - rest) ** 2 * sp * (1 - sp) / 14
    ) / (se + sp - 1) ** 2
    known = 22 / 34
    error = math.sqrt((30 / 50) ** 2 * known * (1 - known) / 34 + (20 / 50) ** 2 * rest_variance)
    adjusted = (30 * known + 20 * rest) / 50
    low, high = sorted((rate.estimate, adjusted))
    bounds = rate.bounds(0.95)
    assert (bounds.low, bounds.high) == pytest.approx((low - 1.6448536 * error, high + 1.6448536 * error))
    # Rogan-Gladen is linear in the observed rate, and the labelled items' judged rate corrects to
    # their labels' exactly: the estimate is the one that corrects every item. The interval is
    # narrower: the labelled items carry no judge's error.
    everything = rate_of(run_of(labelled, 14, 20), labelled, own=False)
    assert everything.known is None
    assert everything.estimate == pytest.approx(rate.estimate)
    alone = corrected(list(map(float, [i.passed for i in labelled])) + run(14, 20), labelled)
    assert everything.bounds(0.95) == alone.bounds(0.95)  # without labels of its own: as before
    width = everything.interval(0.95).high - everything.interval(0.95).low
    assert rate.interval(0.95).high - rate.interval(0.95).low < 0.8 * width


def test_the_rest_is_bounded_before_the_labels_join_it() -> None:
    # Every unlabelled item judged pass: (1 + 0.8 - 1) / 0.7 > 1 is bounded to 1 before the 20 of
    # 30 labelled pass join it; correcting every item at once would give (0.8 + 0.8 - 1) / 0.7.
    labelled = labels((18, 2), (8, 2))
    rate = rate_of(run_of(labelled, 20, 20), labelled)
    assert rate.estimate == pytest.approx((20 + 20) / 50)
    assert rate_of(run_of(labelled, 20, 20), labelled, own=False).estimate == pytest.approx(0.6 / 0.7)
    assert rate.bounds(0.95).low < rate.estimate <= rate.bounds(0.95).high < 1.0
    # Many items: the bounds still hold the estimate (from the rest's rate past 1, they did not).
    many = labels((180, 20), (80, 20))
    for passed in (690, 700):
        rate = rate_of(run_of(many, passed, 700), many)
        bounds = rate.bounds(0.95)
        assert bounds.low <= rate.estimate <= bounds.high
        assert rate.p_above(bounds.low) == pytest.approx(0.05)


def test_with_every_item_labelled_the_labels_are_the_pass_rate() -> None:
    # A judge no better than chance corrects nothing, yet with every item labelled there is
    # nothing to correct: 2 of 4 pass, with the labels' sampling error alone.
    labelled = labels((1, 1), (1, 1))
    assert isinstance(correction([1.0, 0.0, 0.0, 1.0], labelled, trials=4), str)
    rate = rate_of(run_of(labelled, 0, 0), labelled)
    assert rate.rest is None
    assert rate.estimate == 0.5
    reach = 1.9599640 * math.sqrt(0.25 / 8)
    interval = rate.interval(0.95)
    assert (interval.low, interval.high) == pytest.approx((0.5 - reach, 0.5 + reach))
    # Every item labelled pass: no specificity to show, and none needed.
    passes = labels((3, 1), (0, 0))
    assert isinstance(correction([1.0], passes, trials=1), str)
    rate = rate_of(run_of(passes, 0, 0), passes)
    assert (rate.estimate, rate.sensitivity, rate.specificity) == (1.0, 0.75, None)


def test_a_labelled_item_weighs_one_item_whatever_its_trials() -> None:
    # Two trials an item, one of p1's not scored: p1 (judged 1) and p2 (judged 1 and 0) are
    # labelled pass, f1 (0, 0) and f2 (0, 1) fail: Se = (1 + 0.5) / 2, Sp = (1 + 0.5) / 2. The
    # unlabelled: 2.5 of 4 judged pass, corrected (0.625 + 0.75 - 1) / 0.5 = 0.75.
    labelled = [
        LabelledItem("p1", 1, 1, True),
        LabelledItem("p2", 1, 2, True),
        LabelledItem("f1", 0, 2, False),
        LabelledItem("f2", 1, 2, False),
    ]
    values = {
        "p1": [1.0],
        "p2": [1.0, 0.0],
        "f1": [0.0, 0.0],
        "f2": [0.0, 1.0],
        "a1": [1.0, 1.0],
        "a2": [1.0, 0.0],
        "a3": [0.0, 0.0],
        "a4": [1.0, 1.0],
    }
    rate = rate_of(values, labelled)
    assert (rate.sensitivity, rate.specificity) == (0.75, 0.75)
    assert rate.rest is not None
    assert rate.rest.estimate == pytest.approx(0.75)
    assert rate.estimate == pytest.approx((2 + 4 * 0.75) / 8)
    assert rate.observed == pytest.approx((1 + 0.5 + 0 + 0.5 + 2.5) / 8)


def test_effective_items_are_at_most_the_trials_scored() -> None:
    # 100 items of two trials, all but one passing one of the two: their shares barely spread, and
    # n p (1 - p) over that spread is 10,100 items, from 200 trials. The design effect of
    # independent trials bounds it.
    shares = [0.5] * 99 + [0.0]
    mean = sum(shares) / 100
    spread = sum((s - mean) ** 2 for s in shares) / 100
    assert 100 * mean * (1 - mean) / spread == pytest.approx(10_100, rel=0.01)
    assert share(shares, 200).size == 200
    assert share([0.5] * 100, 200).size == 200  # no spread at all: independent trials too
    # Pass/fail items, and items that spread more than independent trials, keep their own.
    assert share([1.0] * 30 + [0.0] * 70, 100).size == pytest.approx(100)
    assert share([1.0] * 30 + [0.0] * 70, 300).size == pytest.approx(100)
    assert share([1.0] * 10, 30).size == 10.0  # every item passes: the items
