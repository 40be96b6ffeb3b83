"""The graded figures of a calibration (verdict/calibration.py): a judge's scores against human
scores, on tables small enough to work by hand."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest

from pytest_opik_eval.verdict.calibration import (
    GradedItem,
    bias,
    calibrate,
    calibrations,
    correlation,
    graded_figures,
    graded_items,
    labelled_items,
    weighted_kappa,
)

Z = 1.959963984540054  # the standard normal's 0.975 quantile
T3 = 3.182446305284263  # Student's t, 3 degrees of freedom, 0.975


def graded(*pairs: tuple[Sequence[float], float]) -> list[GradedItem]:
    found = graded_items(
        {f"i{n}": label for n, (_, label) in enumerate(pairs)},
        {f"i{n}": list(values) for n, (values, _) in enumerate(pairs)},
    )
    assert found is not None
    return found


def brute_kappa(pairs: Sequence[tuple[Sequence[float], float]]) -> float:
    """Quadratic-weighted kappa counted pair by pair: each item weighing 1, its trials 1 / its
    count; chance pairs a trial of one item with the label of any item."""
    n = len(pairs)
    observed = sum(sum((x - y) ** 2 for x in xs) / len(xs) for xs, y in pairs) / n
    expected = sum(sum((x - y) ** 2 for x in xs) / len(xs) for xs, _ in pairs for _, y in pairs) / n**2
    return 1 - observed / expected


# Four items, one trial each: judge 0.2, 0.4, 0.6, 1.0; human 0, 0.5, 0.5, 1.
FOUR = [([0.2], 0.0), ([0.4], 0.5), ([0.6], 0.5), ([1.0], 1.0)]


def test_weighted_kappa_on_one_trial_each_is_lins_concordance() -> None:
    # Means 0.55 and 0.5; over n: variances 0.35/4 and 0.5/4, covariance 0.4/4.
    # Lin's CCC = 2 * 0.1 / (0.0875 + 0.125 + 0.05^2) = 0.2 / 0.215.
    # As kappa: observed (0.04 + 0.01 + 0.01 + 0) / 4 = 0.015 against 0.215 by chance.
    kappa = weighted_kappa(graded(*FOUR))
    assert kappa is not None
    assert kappa.estimate == pytest.approx(0.2 / 0.215)
    assert kappa.estimate == pytest.approx(1 - 0.015 / 0.215)


def test_weighted_kappa_counts_a_judges_spread_over_its_trials() -> None:
    # Item a's trials 0 and 1 average the label, 0.5, but each is 0.5 off it.
    pairs = [([0.0, 1.0], 0.5), ([0.2], 0.0), ([1.0], 1.0)]
    kappa = weighted_kappa(graded(*pairs))
    assert kappa is not None
    observed = (0.25 + 0.04 + 0.0) / 3
    expected = (0.5 + 0.04 + 1.0) / 3 + (0.25 + 0 + 1) / 3 - 2 * (1.7 / 3) * (1.5 / 3)
    assert kappa.estimate == pytest.approx(1 - observed / expected)
    assert kappa.estimate == pytest.approx(brute_kappa(pairs))
    # On the items' means, item a would agree perfectly: a higher kappa.
    assert kappa.estimate < brute_kappa([([0.5], 0.5), *pairs[1:]])


def test_weighted_kappa_jackknife_by_hand() -> None:
    pairs = FOUR * 3  # 12 items, so the bounds are not clipped
    kappa = weighted_kappa(graded(*pairs))
    assert kappa is not None
    assert kappa.estimate == pytest.approx(0.2 / 0.215)
    left_out = [brute_kappa(pairs[:i] + pairs[i + 1 :]) for i in range(12)]
    centre = sum(left_out) / 12
    se = math.sqrt(11 / 12 * sum((k - centre) ** 2 for k in left_out))
    t = 2.200985160082949  # Student's t, 11 degrees of freedom, 0.975
    assert kappa.low == pytest.approx(kappa.estimate - t * se)
    assert kappa.high == pytest.approx(kappa.estimate + t * se)
    assert kappa.low is not None
    assert kappa.high is not None
    assert -1 < kappa.low < kappa.estimate < kappa.high < 1
    assert (kappa.level, kappa.n) == (0.95, 12)


def test_correlation_by_hand_with_its_fisher_interval() -> None:
    # Deviations from the means: judge -0.35, -0.15, 0.05, 0.45; human -0.5, 0, 0, 0.5.
    # Sums of squares 0.35 and 0.5, of products 0.4: r = 0.4 / sqrt(0.175).
    found = correlation(graded(*FOUR))
    assert not isinstance(found, str)
    r = 0.4 / math.sqrt(0.175)
    assert found.estimate == pytest.approx(r)
    # Fisher z with 4 items: atanh(r) -/+ 1.96 / sqrt(1), back through tanh.
    assert found.low == pytest.approx(math.tanh(math.atanh(r) - Z))
    assert found.high == pytest.approx(math.tanh(math.atanh(r) + Z))
    assert (found.level, found.n) == (0.95, 4)


def test_correlation_is_of_the_items_means() -> None:
    # Item 0's trials 0 and 0.4 average 0.2: the same correlation as FOUR's.
    found = correlation(graded(([0.0, 0.4], 0.0), *FOUR[1:]))
    assert not isinstance(found, str)
    assert found.estimate == pytest.approx(0.4 / math.sqrt(0.175))


def test_three_items_give_a_correlation_without_an_interval() -> None:
    found = correlation(graded(*FOUR[1:]))
    assert not isinstance(found, str)
    assert (found.low, found.high, found.n) == (None, None, 3)
    assert graded_figures(graded(*FOUR[1:])).notes == (
        "no interval for the correlation: the Fisher z interval needs 4 items",
    )


def test_a_perfect_correlation_has_no_width() -> None:
    found = correlation(graded(([0.1], 0.2), ([0.3], 0.4), ([0.5], 0.6), ([0.7], 0.8)))
    assert not isinstance(found, str)
    assert (found.estimate, found.low, found.high) == pytest.approx((1.0, 1.0, 1.0))


def test_bias_by_hand_with_its_t_interval() -> None:
    # Judge less human: 0.2, -0.1, 0.1, 0: mean 0.05, sample variance 0.05 / 3.
    found = bias(graded(*FOUR))
    assert found is not None
    half = T3 * math.sqrt(0.05 / 3 / 4)
    assert found.estimate == pytest.approx(0.05)
    assert (found.low, found.high) == pytest.approx((0.05 - half, 0.05 + half))
    assert (found.level, found.n) == (0.95, 4)


def test_fewer_than_three_items_give_no_graded_figure_and_say_why() -> None:
    found = graded_figures(graded(*FOUR[:2]))
    assert (found.weighted_kappa, found.correlation, found.bias) == (None, None, None)
    assert found.notes == ("weighted kappa, correlation and bias undefined: 2 labelled items, they need 3",)


def test_a_constant_judge_has_no_correlation_but_a_kappa_and_a_bias() -> None:
    found = graded_figures(graded(([0.5], 0.0), ([0.5], 0.5), ([0.5], 1.0)))
    assert found.correlation is None
    assert found.notes == ("correlation undefined: the judge gives every item the same mean score",)
    assert found.weighted_kappa is not None
    assert found.weighted_kappa.estimate == pytest.approx(0.0)  # no better than chance
    assert found.bias is not None
    assert found.bias.estimate == pytest.approx(0.0)


def test_constant_labels_have_no_correlation() -> None:
    found = graded_figures(graded(([0.1], 0.5), ([0.5], 0.5), ([0.9], 0.5)))
    assert found.correlation is None
    assert found.notes == ("correlation undefined: every item has the same human score",)


def test_one_score_everywhere_has_no_weighted_kappa() -> None:
    found = graded_figures(graded(([0.5], 0.5), ([0.5], 0.5), ([0.5], 0.5), ([0.4], 0.4)))
    assert found.weighted_kappa is not None  # defined on the four: item 3 differs
    # Leaving item 3 out leaves one score everywhere: no interval.
    assert (found.weighted_kappa.low, found.weighted_kappa.high) == (None, None)
    assert "no interval for weighted kappa: leaving an item out leaves it undefined" in found.notes
    everywhere = graded_figures(graded(([0.5], 0.5), ([0.5], 0.5), ([0.5], 0.5)))
    assert everywhere.weighted_kappa is None
    assert everywhere.notes[0] == (
        "weighted kappa undefined: the judge and the labels give every item the same score"
    )


@pytest.mark.parametrize(
    ("labels", "scores"),
    [
        ({"a": True, "b": False}, {"a": [0.7], "b": [0.2]}),  # verdicts: nothing graded to compare
        ({"a": 0.8, "b": 0.1}, {"a": [1.0], "b": [0.0, 1.0]}),  # a pass/fail judge
        ({"a": 0.8}, {"b": [0.3]}),  # no labelled item with a score
    ],
)
def test_nothing_graded(labels: dict[str, bool | float], scores: dict[str, list[float]]) -> None:
    assert graded_items(labels, scores) is None


def test_a_verdict_among_human_scores_counts_as_one_or_zero() -> None:
    found = graded_items(
        {"a": True, "b": 0.3, "c": False, "z": 0.5}, {"a": [0.9, 0.7], "b": [0.4], "c": [0.0]}
    )
    assert found == [
        GradedItem("a", pytest.approx(0.8), pytest.approx(0.65), 1.0),  # type: ignore[arg-type]
        GradedItem("b", 0.4, pytest.approx(0.16), 0.3),  # type: ignore[arg-type]
        GradedItem("c", 0.0, 0.0, 0.0),
    ]


def test_calibrate_adds_the_graded_figures_and_their_notes() -> None:
    labels: dict[str, bool | float] = {"a": 0.9, "b": 0.8}
    scores = {"a": [0.7], "b": [0.6]}
    found = calibrate(
        "relevance", 0.5, labelled_items(labels, scores, 0.5), graded=graded_items(labels, scores)
    )
    assert found.graded is not None
    assert found.notes == (
        "specificity undefined: no item labelled fail",
        "kappa undefined: judge and labels each give one verdict only (chance agreement 1)",
        "weighted kappa, correlation and bias undefined: 2 labelled items, they need 3",
    )
    assert calibrate("relevance", 0.5, labelled_items(labels, scores, 0.5)).graded is None


def test_calibrations_grade_a_graded_judge_with_human_scores_only() -> None:
    items: list[dict[str, object]] = [
        {"id": f"i{n}", "labels": {"relevance": label, "correctness": label >= 0.5}}
        for n, (_, label) in enumerate(FOUR)
    ]
    values = {f"i{n}": list(judge) for n, (judge, _) in enumerate(FOUR)}
    found = calibrations(
        items, "labels", {"relevance": values, "correctness": values}, {"relevance": 0.5, "correctness": 0.5}
    )
    relevance, correctness = found
    assert relevance.graded is not None
    assert relevance.graded.weighted_kappa is not None
    assert relevance.graded.weighted_kappa.estimate == pytest.approx(0.2 / 0.215)
    assert correctness.graded is None  # labelled true or false
    # The pass/fail figures are as they were, at the threshold.
    assert relevance.kappa == correctness.kappa
