"""The gates' statistics against known values: textbook examples, direct combinatorics, and
scipy and statsmodels as reference implementations (used here only, never by the plugin)."""

from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pytest
import scipy.stats  # type: ignore[import-untyped]
from statsmodels.stats.contingency_tables import mcnemar  # type: ignore[import-untyped]
from statsmodels.stats.multitest import multipletests  # type: ignore[import-untyped]
from statsmodels.stats.proportion import proportion_confint  # type: ignore[import-untyped]

from pytest_opik_eval.verdict import statistics as st


def simulated_items(n: int, trials: int, seed: int, varied: bool = True) -> list[list[float]]:
    """n items, each passing its trials with its own probability (0.6 to 0.95), as 1.0/0.0."""
    rng = random.Random(seed)
    items = []
    for _ in range(n):
        p = rng.uniform(0.6, 0.95) if varied else 0.8
        items.append([float(rng.random() < p) for _ in range(trials)])
    return items


# --- closed forms -------------------------------------------------------------------------


def test_normal_quantile_matches_scipy() -> None:
    for p in (0.001, 0.025, 0.05, 0.2, 0.5, 0.8, 0.95, 0.975, 0.999):
        assert st.normal_quantile(p) == pytest.approx(scipy.stats.norm.ppf(p), abs=1e-9)
    assert st.normal_quantile(0.975) == pytest.approx(1.959964, abs=1e-6)


def test_wilson_interval_for_8_of_10_is_the_textbook_one() -> None:
    interval = st.wilson_interval(8, 10)
    assert (interval.estimate, interval.n, interval.method) == (0.8, 10, "wilson")
    assert interval.low == pytest.approx(0.4902, abs=5e-5)
    assert interval.high == pytest.approx(0.9433, abs=5e-5)


@pytest.mark.parametrize("level", [0.8, 0.9, 0.95, 0.99])
@pytest.mark.parametrize(
    ("successes", "n"), [(0, 1), (1, 1), (0, 10), (10, 10), (3, 7), (41, 50), (180, 200)]
)
def test_wilson_interval_matches_statsmodels(successes: int, n: int, level: float) -> None:
    interval = st.wilson_interval(successes, n, level)
    low, high = proportion_confint(successes, n, alpha=1 - level, method="wilson")
    assert (interval.low, interval.high) == pytest.approx((low, high), abs=1e-12)
    assert 0.0 <= interval.low <= interval.estimate <= interval.high <= 1.0


def test_wilson_interval_rejects_impossible_counts() -> None:
    with pytest.raises(ValueError, match="0 <= successes <= n"):
        st.wilson_interval(11, 10)
    with pytest.raises(ValueError, match="between 0 and 1"):
        st.wilson_interval(1, 2, level=95)


def test_the_item_pass_rate_is_wilson_over_items() -> None:
    interval = st.item_pass_rate_interval([True] * 41 + [False] * 9)
    low, high = proportion_confint(41, 50, method="wilson")
    assert (interval.estimate, interval.n) == (0.82, 50)
    assert (interval.low, interval.high) == pytest.approx((low, high))


def test_the_trial_pass_rate_with_one_trial_per_item_is_wilson() -> None:
    interval = st.pass_rate_interval([(1, 1)] * 41 + [(0, 1)] * 9)
    assert interval == st.wilson_interval(41, 50)


def test_the_trial_pass_rate_when_every_trial_passed_falls_back_to_wilson_over_items() -> None:
    # Nothing to resample: the bootstrap would say [1, 1]; the items, not the trials, are the unit.
    interval = st.pass_rate_interval([(3, 3)] * 50)
    assert (interval.estimate, interval.method, interval.high) == (1.0, "wilson", 1.0)
    assert interval.low == pytest.approx(st.wilson_interval(50, 50).low)


def test_the_trial_pass_rate_with_several_trials_is_the_cluster_bootstrap() -> None:
    items = simulated_items(50, 3, seed=1)
    interval = st.pass_rate_interval([(int(sum(v)), len(v)) for v in items])
    assert interval == st.mean_interval(items)
    assert interval.method == "bootstrap"
    assert interval.estimate == pytest.approx(sum(map(sum, items)) / 150)


# --- the cluster bootstrap ----------------------------------------------------------------


def test_the_bootstrap_is_reproducible_and_its_seed_matters() -> None:
    rng = random.Random(2)
    items = [[rng.random() for _ in range(3)] for _ in range(200)]
    first, again = st.mean_interval(items), st.mean_interval(items)
    assert first == again
    other = st.mean_interval(items, seed=7)
    assert other != first
    assert other.low == pytest.approx(first.low, abs=0.01)
    # On pass/fail data too, replicate for replicate.
    outcomes = [float(rng.random() < 0.8) for _ in range(500)]
    assert st.bootstrap(outcomes) == st.bootstrap(outcomes)


def scipy_percentile_interval(values: list[float], level: float = 0.95) -> tuple[float, float]:
    result = scipy.stats.bootstrap(
        (np.array(values),),
        np.mean,
        confidence_level=level,
        n_resamples=4000,
        method="percentile",
        rng=np.random.default_rng(0),
    )
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


@pytest.mark.parametrize(
    ("n", "trials", "resampling"),
    [
        (30, 1, "grouped"),  # pass/fail, one trial: 2 distinct values
        (50, 3, "grouped"),  # 4 distinct item totals
        (300, 5, "grouped"),
        (40, 5, "direct"),  # continuous scores: every item its own value
        (300, 2, "direct"),
        (2000, 3, "binned"),
    ],
)
def test_the_bootstrap_agrees_with_scipys_on_item_means(n: int, trials: int, resampling: str) -> None:
    # With as many trials per item, the mean over trials is the mean of the item means, which
    # scipy resamples one by one. The intervals are random: same ballpark, not same digits.
    rng = random.Random(n)
    if resampling == "grouped":
        items = simulated_items(n, trials, seed=n)
    else:
        items = [[rng.betavariate(5, 2) for _ in range(trials)] for _ in range(n)]
    interval = st.mean_interval(items)
    means = [sum(v) / trials for v in items]
    low, high = scipy_percentile_interval(means)
    width = high - low
    assert interval.estimate == pytest.approx(float(np.mean(means)))
    assert interval.low == pytest.approx(low, abs=0.08 * width)
    assert interval.high == pytest.approx(high, abs=0.08 * width)


def test_the_binned_bootstrap_keeps_a_heavy_tail_s_spread() -> None:
    # 1,000 items of 1,000 distinct values, most of the spread in the top bin: its variance is
    # what the binned resampling must carry.
    rng = random.Random(9)
    values = [rng.lognormvariate(0, 1.5) for _ in range(1000)]
    interval = st.mean_interval([[v] for v in values])
    low, high = scipy_percentile_interval(values)
    width = high - low
    assert interval.low == pytest.approx(low, abs=0.08 * width)
    assert interval.high == pytest.approx(high, abs=0.08 * width)


def test_the_item_is_the_unit_not_the_trial() -> None:
    # Three trials that always agree carry no more information than one: the interval is as wide.
    rng = random.Random(3)
    outcomes = [float(rng.random() < 0.7) for _ in range(60)]
    one = st.mean_interval([[v] for v in outcomes])
    three = st.mean_interval([[v] * 3 for v in outcomes])
    assert three == one
    # Whereas 180 independent outcomes would give a narrower one.
    independent = st.mean_interval([[v] for v in outcomes * 3])
    assert independent.high - independent.low < 0.7 * (one.high - one.low)


def test_items_with_different_trial_counts_weigh_by_their_trials() -> None:
    items = [[1.0, 1.0, 1.0, 1.0], [0.0], [1.0, 0.0], [0.5, 0.5, 0.5]] * 10
    interval = st.mean_interval(items)
    assert interval.estimate == pytest.approx(sum(map(sum, items)) / sum(map(len, items)))
    assert interval.low < interval.estimate < interval.high


def test_an_empty_item_or_no_item_is_an_error() -> None:
    with pytest.raises(ValueError, match="no trial values"):
        st.mean_interval([[1.0], []])
    with pytest.raises(ValueError, match="at least one item"):
        st.mean_interval([])


@pytest.mark.parametrize(("n", "p"), [(7, 0.3), (40, 0.1), (500, 0.2), (20000, 1 / 6), (1000, 0.9)])
def test_the_binomial_draws_follow_the_binomial_distribution(n: int, p: float) -> None:
    rng = random.Random(11)
    draws = [st._binomial(rng, n, p) for _ in range(20000)]
    assert min(draws) >= 0 and max(draws) <= n
    # Chi-square goodness of fit over cells of at least 5 expected draws (seeded: not flaky).
    pmf = scipy.stats.binom(n, p).pmf(np.arange(n + 1)) * len(draws)
    observed = np.bincount(draws, minlength=n + 1)
    cells_observed, cells_expected, acc_o, acc_e = [], [], 0.0, 0.0
    for o, e in zip(observed, pmf, strict=True):
        acc_o, acc_e = acc_o + o, acc_e + e
        if acc_e >= 5:
            cells_observed.append(acc_o)
            cells_expected.append(acc_e)
            acc_o, acc_e = 0.0, 0.0
    cells_observed[-1] += acc_o
    cells_expected[-1] += acc_e
    scale = sum(cells_observed) / sum(cells_expected)
    result = scipy.stats.chisquare(cells_observed, [e * scale for e in cells_expected])
    assert result.pvalue > 0.001


# --- the paired comparison ----------------------------------------------------------------


def test_the_paired_comparison_pairs_by_item_id() -> None:
    current = {"a": [1.0, 0.0], "b": [1.0], "c": [0.5], "new": [1.0]}
    baseline = {"old": [0.0], "c": [1.0], "a": [1.0, 1.0], "b": [0.0, 0.0]}
    comparison = st.paired_comparison(current, baseline)
    assert comparison.shared == ("a", "b", "c")
    assert comparison.only_in_current == ("new",)
    assert comparison.only_in_baseline == ("old",)
    assert comparison.differences == {"a": -0.5, "b": 1.0, "c": -0.5}
    assert comparison.mean == pytest.approx(0.0)
    assert comparison.sd == pytest.approx(math.sqrt(0.75))
    assert comparison.bootstrap is not None and comparison.bootstrap.n == 3


def test_equal_differences_of_pass_fail_means_are_one_value() -> None:
    # 0.6 - 0.4 != 0.8 - 0.6 in floats; the bootstrap groups items by value, so they must be equal.
    assert 0.6 - 0.4 != 0.8 - 0.6
    comparison = st.paired_comparison(
        {"a": [1.0, 1.0, 1.0, 0.0, 0.0], "b": [1.0] * 4 + [0.0]},
        {"a": [1.0, 1.0, 0.0, 0.0, 0.0], "b": [1.0] * 3 + [0.0] * 2},
    )
    assert len(set(comparison.differences.values())) == 1


def test_a_comparison_without_shared_items_has_no_interval() -> None:
    comparison = st.paired_comparison({"a": [1.0]}, {"b": [1.0]})
    assert (comparison.shared, comparison.mean, comparison.bootstrap) == ((), None, None)


@pytest.mark.parametrize("trials", [1, 3])
def test_the_paired_bootstrap_agrees_with_scipys(trials: int) -> None:
    base = simulated_items(200, trials, seed=4)
    rng = random.Random(5)
    current = [[v if rng.random() < 0.8 else float(rng.random() < 0.6) for v in item] for item in base]
    comparison = st.paired_comparison(
        {str(i): v for i, v in enumerate(current)}, {str(i): v for i, v in enumerate(base)}
    )
    assert comparison.bootstrap is not None
    interval = comparison.bootstrap.interval()
    x = np.array([sum(v) / trials for v in current])
    y = np.array([sum(v) / trials for v in base])
    result = scipy.stats.bootstrap(
        (x, y),
        lambda a, b, axis: np.mean(a - b, axis=axis),
        paired=True,
        n_resamples=4000,
        method="percentile",
        rng=np.random.default_rng(0),
    )
    width = result.confidence_interval.high - result.confidence_interval.low
    assert interval.estimate == pytest.approx(float(np.mean(x - y)))
    assert interval.low == pytest.approx(result.confidence_interval.low, abs=0.08 * width)
    assert interval.high == pytest.approx(result.confidence_interval.high, abs=0.08 * width)


def test_flips_and_mcnemar() -> None:
    baseline = {"a": True, "b": True, "c": False, "d": True, "e": False, "gone": True}
    current = {"a": False, "b": False, "c": True, "d": True, "e": False, "new": False}
    result = st.flips(current, baseline)
    assert (result.regressions, result.fixes) == (("a", "b"), ("c",))
    assert result.p_value == 1.0


@pytest.mark.parametrize(
    ("b", "c", "expected"),
    [
        (0, 0, 1.0),
        (0, 5, 2 / 32),  # both tails of Binomial(5, 1/2) at their ends
        (1, 6, 2 * 8 / 128),
        (6, 1, 2 * 8 / 128),
        (4, 4, 1.0),
        (3, 4, 1.0),
        (0, 1, 1.0),
    ],
)
def test_mcnemar_exact_known_values(b: int, c: int, expected: float) -> None:
    assert st.mcnemar_exact(b, c) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    ("b", "c"),
    # Beyond EXACT_FLIPS (2,000) the sum is taken in floating point: large, close and far counts.
    [(1, 9), (12, 30), (25, 25), (40, 7), (0, 17), (300, 360), (1000, 1000), (990, 1011), (2000, 2150)]
    + [(14000, 15000), (15000, 15100), (0, 2500), (1200, 1500), (30000, 29000)],
)
def test_mcnemar_exact_matches_scipy_and_statsmodels(b: int, c: int) -> None:
    p = st.mcnemar_exact(b, c)
    assert p == pytest.approx(scipy.stats.binomtest(b, b + c, 0.5).pvalue, rel=1e-9)
    assert p == pytest.approx(mcnemar([[50, b], [c, 50]], exact=True).pvalue, rel=1e-9)


# --- the decisions ------------------------------------------------------------------------


def bootstrap_of(differences: list[float]) -> st.Bootstrap:
    return st.bootstrap(differences)


def test_a_clear_drop_beyond_delta_is_a_regression_and_not_non_inferior() -> None:
    # 100 items, 30 flipped from pass to fail, 2 the other way: a drop of 0.28.
    evidence = st.regression_evidence(bootstrap_of([-1.0] * 30 + [1.0] * 2 + [0.0] * 68), delta=0.05)
    assert evidence.drop == pytest.approx(0.28)
    assert evidence.p_drop < 0.001
    assert evidence.p_drop_beyond_delta < 0.001
    assert evidence.p_within_delta > 0.5
    assert evidence.upper_drop > 0.28
    assert st.regressed(evidence)
    assert not st.non_inferior(evidence)


def test_noise_is_no_regression_but_cannot_prove_non_inferiority() -> None:
    # A drop of 0.06 on 50 items: beyond delta, but not significant; nor shown to be below it.
    evidence = st.regression_evidence(bootstrap_of([-1.0] * 8 + [1.0] * 5 + [0.0] * 37), delta=0.05)
    assert evidence.drop == pytest.approx(0.06)
    assert evidence.p_drop > 0.05
    assert not st.regressed(evidence)
    assert not st.non_inferior(evidence)


def test_a_significant_drop_within_delta_is_no_regression() -> None:
    evidence = st.regression_evidence(bootstrap_of([-1.0] * 40 + [0.0] * 960), delta=0.05)
    assert evidence.drop == pytest.approx(0.04)
    assert evidence.p_drop < 0.001
    assert not st.regressed(evidence)
    # ... but its interval reaches past delta: not shown to be non-inferior at 0.05.
    assert evidence.upper_drop > 0.05
    assert not st.non_inferior(evidence)
    assert st.non_inferior(st.regression_evidence(bootstrap_of([-1.0] * 40 + [0.0] * 960), delta=0.1))


def test_the_decisions_take_holm_adjusted_p_values() -> None:
    evidence = st.regression_evidence(bootstrap_of([-1.0] * 12 + [1.0] * 2 + [0.0] * 86), delta=0.05)
    assert evidence.p_drop < 0.05 and st.regressed(evidence)
    assert not st.regressed(evidence, p_drop=0.06)
    assert st.non_inferior(evidence, p_within_delta=0.01)


def test_the_one_sided_p_values_count_the_data_as_a_replicate() -> None:
    boot = st.Bootstrap(estimate=0.5, replicates=(0.1, 0.2, 0.3, 0.4), n=10)
    assert boot.p_above(0.25) == 3 / 5  # 0.1, 0.2, and the data
    assert boot.p_below(0.25) == 3 / 5
    assert boot.p_above(0.0) == 1 / 5


@pytest.mark.parametrize(
    "p_values",
    [[0.01, 0.04, 0.03, 0.2], [0.001], [0.05, 0.05, 0.05], [0.5, 0.001, 0.02, 0.04, 0.9, 0.011], []],
)
def test_holm_matches_statsmodels(p_values: list[float]) -> None:
    adjusted = st.holm(p_values)
    if p_values:
        expected = multipletests(p_values, method="holm")[1]
        assert adjusted == pytest.approx(list(expected))
    else:
        assert adjusted == []


# --- what a sample can detect -------------------------------------------------------------


def test_the_minimum_detectable_drop_is_z_alpha_plus_z_power_standard_errors() -> None:
    # 100 items, sd 0.5: se 0.05; one-sided 5% and 80% power: (1.6448536 + 0.8416212) * 0.05.
    assert st.minimum_detectable_drop(100, 0.5) == pytest.approx(0.1243237, abs=1e-7)
    # The default rule also needs the estimate beyond delta: delta 0.2 > 1.6449 se.
    assert st.minimum_detectable_drop(100, 0.5, delta=0.2) == pytest.approx(0.2 + 0.8416212 * 0.05)
    assert st.minimum_detectable_drop(400, 0.5) == pytest.approx(0.1243237 / 2, abs=1e-7)


@pytest.mark.parametrize(
    ("drop", "sd", "delta"), [(0.1, 0.5, 0.0), (0.05, 0.3, 0.0), (0.1, 0.5, 0.05), (0.3, 0.6, 0.2)]
)
def test_items_needed_is_the_smallest_n_that_detects_the_drop(drop: float, sd: float, delta: float) -> None:
    n = st.items_needed(drop, sd, delta=delta)
    assert n is not None
    assert st.minimum_detectable_drop(n, sd, delta=delta) <= drop + 1e-12
    assert n == 1 or st.minimum_detectable_drop(n - 1, sd, delta=delta) > drop


def test_items_needed_for_the_textbook_case() -> None:
    # ((1.6448536 + 0.8416212) * 0.5 / 0.1) ** 2 = 154.6
    assert st.items_needed(0.1, 0.5) == 155
    assert st.items_needed(0.05, 0.5, delta=0.05) is None
    assert st.items_needed(0.1, 0.0) == 1


# --- multi-trial items --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "c", "k"), [(5, 0, 1), (5, 2, 1), (5, 2, 3), (5, 5, 5), (6, 3, 2), (10, 7, 4), (8, 1, 8)]
)
def test_pass_at_k_and_pass_hat_k_match_direct_combinatorics(n: int, c: int, k: int) -> None:
    # Every way to pick k of the n trials, c of which passed (trials 0 .. c-1).
    picks = list(itertools.combinations(range(n), k))
    any_passed = sum(1 for pick in picks if min(pick) < c) / len(picks)
    all_passed = sum(1 for pick in picks if max(pick) < c) / len(picks)
    assert st.pass_at_k(n, c, k) == pytest.approx(any_passed)
    assert st.pass_hat_k(n, c, k) == pytest.approx(all_passed)


def test_pass_at_1_is_the_pass_rate_and_averages_over_items() -> None:
    items = [(5, 5), (5, 3), (5, 0), (5, 1)]
    assert st.mean_pass_at_k(items, 1) == pytest.approx(9 / 20)
    assert st.mean_pass_hat_k(items, 1) == pytest.approx(9 / 20)
    assert st.mean_pass_at_k(items, 5) == pytest.approx(3 / 4)
    assert st.mean_pass_hat_k(items, 5) == pytest.approx(1 / 4)
    assert st.mean_pass_hat_k(items, 2) == pytest.approx((1 + 3 / 10 + 0 + 0) / 4)


def test_pass_at_k_needs_k_of_the_trials() -> None:
    with pytest.raises(ValueError, match="1 <= k"):
        st.pass_at_k(3, 1, 4)
