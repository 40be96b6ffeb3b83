"""The gates' statistics against known values: textbook forms, exact enumeration of every outcome
of small designs, and scipy and statsmodels as reference implementations (used here only, never
by the plugin)."""

from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pytest
import scipy.optimize  # type: ignore[import-untyped]
import scipy.special  # type: ignore[import-untyped]
import scipy.stats  # type: ignore[import-untyped]
from statsmodels.stats.multitest import multipletests  # type: ignore[import-untyped]

from pytest_opik_eval.verdict import decisions, paired, samples
from pytest_opik_eval.verdict import design as dp
from pytest_opik_eval.verdict import distributions as dist
from pytest_opik_eval.verdict import pass_at_k as pk
from pytest_opik_eval.verdict import statistics as st

ALPHA = 0.05


# --- Student's t and the beta function ------------------------------------------------------


@pytest.mark.parametrize("df", [1, 2, 3, 9, 29, 99, 999, 100_000])
def test_t_quantiles_and_tails_match_scipy(df: int) -> None:
    for p in (0.6, 0.9, 0.95, 0.975, 0.99, 0.9999, 0.025):
        assert dist.t_quantile(p, df) == pytest.approx(scipy.stats.t.ppf(p, df), rel=1e-9, abs=1e-12)
    for x in (-3.0, -0.5, 0.1, 1.7, 6.0, 40.0):
        assert dist.t_sf(x, df) == pytest.approx(scipy.stats.t.sf(x, df), rel=1e-8, abs=1e-15)


@pytest.mark.parametrize(("a", "b"), [(0.5, 0.5), (2.0, 3.0), (50.0, 0.5), (0.5, 40_000.0), (7.3, 1.1)])
def test_the_beta_cdf_matches_scipy(a: float, b: float) -> None:
    for x in (1e-6, 0.01, 0.3, 0.5, 0.77, 0.999):
        assert dist.beta_cdf(x, a, b) == pytest.approx(scipy.special.betainc(a, b, x), rel=1e-9, abs=1e-15)


def test_a_quantile_needs_a_probability() -> None:
    with pytest.raises(ValueError, match="0 < p < 1"):
        dist.t_quantile(1.0, 3)


# --- bounds on a mean over items --------------------------------------------------------------


@pytest.mark.parametrize(
    ("successes", "n"), [(2, 2), (1, 2), (10, 10), (30, 30), (9, 10), (3, 7), (41, 50), (180, 200), (1, 30)]
)
def test_for_pass_fail_items_the_bound_is_clopper_pearsons(successes: int, n: int) -> None:
    s = samples.sample([1.0] * successes + [0.0] * (n - successes))
    expected = scipy.stats.beta.ppf(0.05, successes, n - successes + 1)
    assert st.lower_bound(s, 0.95) == pytest.approx(expected, abs=1e-9)
    assert st.upper_bound(s, 0.95) == pytest.approx(
        scipy.stats.beta.ppf(0.95, successes + 1, n - successes) if successes < n else 1.0, abs=1e-9
    )


def test_every_item_passing_has_the_exact_bound_by_hand() -> None:
    # n of n passed: the rate p with p^n = 0.05 (the review's 0.224, 0.741, 0.905).
    for n, expected in ((2, 0.2236), (10, 0.7411), (30, 0.9050)):
        assert st.lower_bound(samples.sample([1.0] * n)) == pytest.approx(expected, abs=1e-4)
        assert expected == pytest.approx(0.05 ** (1 / n), abs=1e-4)


def tango_variance(b: int, c: int, n: int, delta: float) -> float:
    """Tango's restricted maximum-likelihood variance of a paired pass/fail difference (b items
    pass -> fail, c fail -> pass, of n): the trinomial likelihood maximized numerically over the
    nuisance p_c, with p_b = p_c + delta."""

    def minus_log_likelihood(pc: float) -> float:
        pb = pc + delta
        terms = [(b, pb), (c, pc), (n - b - c, 1 - pb - pc)]
        return -sum(k * math.log(p) if k else 0.0 for k, p in terms)

    upper = (1 - delta) / 2
    found = scipy.optimize.minimize_scalar(
        minus_log_likelihood, bounds=(1e-12, upper - 1e-12), method="bounded", options={"xatol": 1e-12}
    )
    pc = float(found.x)
    return pc + (pc + delta) - delta * delta


@pytest.mark.parametrize(
    ("b", "c", "n"), [(2, 0, 100), (0, 0, 30), (8, 3, 40), (5, 5, 20), (1, 9, 30), (12, 0, 12)]
)
def test_for_pass_fail_differences_the_null_variance_is_tangos(b: int, c: int, n: int) -> None:
    s = samples.sample([-1.0] * b + [1.0] * c + [0.0] * (n - b - c), -1.0, 1.0)
    for delta in (0.05, 0.1, 0.3):
        if -s.mean < delta:  # the null drop is above the observed one: the lower side
            assert st.null_variance(s, -delta) == pytest.approx(tango_variance(b, c, n, delta), rel=1e-5)


def binomial_outcomes(n: int, p: float) -> list[tuple[int, float]]:
    return [(x, float(scipy.stats.binom.pmf(x, n, p))) for x in range(n + 1)]


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 10, 13, 20, 30, 50, 80])
def test_strict_absolute_tests_keep_their_level_exactly(n: int) -> None:
    # Every outcome of n pass/fail items whose true rate is exactly the bound: how often the
    # lower bound clears it (strict mode passes a gate it should fail).
    bounds = {x: st.lower_bound(samples.sample([1.0] * x + [0.0] * (n - x)), 0.95) for x in range(n + 1)}
    for bound in (0.5, 0.7, 0.8, 0.9, 0.95):
        error = sum(p for x, p in binomial_outcomes(n, bound) if bounds[x] > bound)
        assert error <= ALPHA + 1e-12, (bound, error)  # Clopper-Pearson's: exact


def trinomial(n: int, pb: float, pc: float) -> list[tuple[int, int, float]]:
    cells = [(b, c) for b in range(n + 1) for c in range(n + 1 - b)]
    counts = np.array([[b, c, n - b - c] for b, c in cells])
    masses = scipy.stats.multinomial.pmf(counts, n, [pb, pc, 1 - pb - pc])
    return [(b, c, float(mass)) for (b, c), mass in zip(cells, masses, strict=True)]


@pytest.mark.parametrize("n", [1, 3, 6, 8, 14, 21, 30])
def test_the_regression_tests_keep_their_level_exactly_over_every_outcome(n: int) -> None:
    # Pass/fail items with one trial: every (regressions, fixes) outcome, at the boundary of each
    # null (a drop of exactly DELTA; no change at all) over the nuisance (how flaky the app is).
    outcomes = [(b, c) for b in range(n + 1) for c in range(n + 1 - b)]
    for delta in (0.05, 0.0):
        tests = {
            (b, c): decisions.regression_test([-1.0] * b + [1.0] * c + [0.0] * (n - b - c), delta)
            for b, c in outcomes
        }
        for pc in np.linspace(0.0, (1 - delta) / 2, 12):
            at_delta = trinomial(n, pc + delta, pc)
            strict_error = sum(p for b, c, p in at_delta if tests[b, c].p_within <= ALPHA)
            normal_error = sum(p for b, c, p in at_delta if tests[b, c].p_beyond <= ALPHA)
            assert strict_error <= ALPHA + 1e-12, (pc, strict_error, normal_error)
            assert normal_error <= ALPHA + 1e-12, (pc, strict_error, normal_error)


def test_with_delta_0_the_regression_test_is_the_exact_sign_test_by_hand() -> None:
    # b items regressed, c fixed, the rest unchanged: P(at least b of b + c fair coins), by hand.
    for b, c, expected in ((5, 0, 1 / 32), (3, 0, 1 / 8), (4, 1, 6 / 32), (6, 0, 1 / 64), (9, 1, 11 / 1024)):
        for unchanged in (0, 25):
            test = decisions.regression_test([-1.0] * b + [1.0] * c + [0.0] * unchanged, 0.0)
            assert test.p_beyond == pytest.approx(expected)
            assert test.p_chance == pytest.approx(expected)
    # A 50/50 flaky app: with 1 to 4 items no outcome is a regression (the test cannot go below 1/16).
    for n in range(1, 5):
        for b in range(n + 1):
            assert decisions.regression_test([-1.0] * b + [0.0] * (n - b), 0.0).p_beyond >= 1 / 16 - 1e-15


def test_the_examples_of_the_review() -> None:
    # One item going pass -> fail: p = 1, no test at all on one item.
    assert decisions.regression_test([-1.0], 0.05).p_beyond == 1.0
    # 3 of 3 items regressing with DELTA 0.05: at least the exact one-sided sign test's 1/8.
    three = decisions.regression_test([-1.0] * 3, 0.05)
    assert three.p_chance == pytest.approx(0.125)
    assert three.p_beyond >= three.p_chance
    # Strict mode does not show non-inferiority from 2 unchanged items, nor from 30 or 71 ...
    for n in (2, 30, 71):
        assert decisions.regression_test([0.0] * n, 0.05).p_within > ALPHA
    # ... from 72 it can (Tango's score test with its continuity correction: p = 0.049).
    assert decisions.regression_test([0.0] * 72, 0.05).p_within == pytest.approx(0.049, abs=5e-4)


def test_each_p_value_is_its_bounds_inversion() -> None:
    rng = random.Random(4)
    for _ in range(30):
        n = rng.randint(2, 60)
        s = samples.sample([rng.betavariate(2, 1) for _ in range(n)])
        for a in (0.05, 0.01):
            low = st.lower_bound(s, 1 - a)
            assert st.p_above(s, low - 1e-6) <= a < st.p_above(s, low + 1e-6) or low == 0.0
            high = st.upper_bound(s, 1 - a)
            assert st.p_below(s, high + 1e-6) <= a < st.p_below(s, high - 1e-6) or high == 1.0


def test_one_item_bounds_nothing_and_equal_values_still_have_a_spread() -> None:
    one = samples.sample([0.7])
    assert (st.lower_bound(one), st.upper_bound(one), st.p_above(one, 0.1)) == (0.0, 1.0, 1.0)
    # Two equal continuous scores: no zero-width interval; ten give a narrower one.
    two, ten = st.interval(samples.sample([0.8, 0.8])), st.interval(samples.sample([0.8] * 10))
    # Two scores bound the mean no better than two passes would on [0, 0.8] (sqrt(0.025) of it).
    assert two.low == pytest.approx(0.8 * 0.025**0.5)
    assert two.high > 0.95
    assert two.low < ten.low < 0.8 < ten.high


def test_a_better_run_never_gets_a_lower_bound() -> None:
    # 10 items x 5 trials all passing, against the same run with one failed trial.
    all_passed = st.pass_rate_interval([(5, 5)] * 10)
    one_failed = st.pass_rate_interval([(5, 5)] * 9 + [(4, 5)])
    assert all_passed.low >= one_failed.low
    assert all_passed.low < 0.9  # 10 items cannot show a rate of 0.9
    # Every pass/fail outcome of up to 40 items: more passes, a bound no lower.
    for n in (5, 12, 40):
        lows = [st.lower_bound(samples.sample([1.0] * x + [0.0] * (n - x))) for x in range(n + 1)]
        assert lows == sorted(lows)
    # Paired: fewer regressions or more fixes, a smaller p for "within delta", larger for "beyond".
    n = 25
    tests = {
        (b, c): decisions.regression_test([-1.0] * b + [1.0] * c + [0.0] * (n - b - c), 0.05)
        for b in range(n + 1)
        for c in range(n + 1 - b)
    }
    for (b, c), test in tests.items():
        if b > 0:
            better = tests[b - 1, c]
            assert better.p_within <= test.p_within + 1e-12
            assert better.p_beyond >= test.p_beyond - 1e-12
        if b + c < n:
            better = tests[b, c + 1]
            assert better.p_within <= test.p_within + 1e-12
            assert better.p_beyond >= test.p_beyond - 1e-12


@pytest.mark.parametrize("n", [2, 3, 5, 10, 20, 40, 100, 129, 300])
def test_a_better_continuous_run_never_gets_a_lower_bound(n: int) -> None:
    # Continuous scores and their differences, spread or nearly alike: one item's value raised
    # (a little, or to the range's end), the bound at every confidence a session's gates use (5%
    # over up to 20 gates, by Holm) is no lower and the p-value no higher. Raising a high value
    # widens the spread: Student's t bound falls there (the reverted fix of issue 23). Past 128
    # items the likelihood weighs groups of adjacent items: raising the highest of a group (one
    # of n / 64 ranks) widened its spread, and a bin's mean minus its spread fell with it (28 of
    # 1,440 such cases, by up to 0.002, before runs' means replaced them). On a grid of 0.01 the
    # number of distinct values crosses 64 and 128 as ties form and split.
    rng = random.Random(n)
    confidences = (0.9, 0.95, 0.9875, 0.9975)
    for _ in range(40):
        low = rng.choice((0.0, -1.0))
        centre, spread = rng.uniform(low + 0.2, 0.8), rng.choice((0.01, 0.1, 0.3))
        grid = rng.choice((0.0, 0.0, 0.01))
        values = [min(1.0, max(low, rng.gauss(centre, spread))) for _ in range(n)]
        values = [round(v / grid) * grid for v in values] if grid else values
        worse = samples.sample(values, low, 1.0)
        raised = list(values)
        ranked = sorted(range(n), key=values.__getitem__)
        top_of_group = ranked[max(0, n * rng.randrange(1, 65) // 64 - 1)]
        i = rng.choice((ranked[-1], ranked[0], rng.randrange(n), top_of_group, top_of_group))
        raised[i] = min(1.0, raised[i] + rng.choice((grid or 0.001, 0.05, 0.3, 1.0)))
        better = samples.sample(raised, low, 1.0)
        for confidence in confidences:
            assert st.lower_bound(better, confidence) >= st.lower_bound(worse, confidence) - 1e-9
            assert st.upper_bound(better, confidence) >= st.upper_bound(worse, confidence) - 1e-9
        for value in (st.lower_bound(worse, 0.9875), worse.mean - 0.05, worse.mean + 0.05):
            assert st.p_above(better, value) <= st.p_above(worse, value) + 1e-9
            assert st.p_below(better, value) >= st.p_below(worse, value) - 1e-9


def test_the_two_sided_interval_covers_at_its_level_for_pass_fail_items() -> None:
    for n in (10, 30, 100):
        intervals = {x: st.interval(samples.sample([1.0] * x + [0.0] * (n - x))) for x in range(n + 1)}
        for p in (0.5, 0.7, 0.8, 0.9, 0.97):
            coverage = sum(
                q for x, q in binomial_outcomes(n, p) if intervals[x].low <= p <= intervals[x].high
            )
            assert coverage >= 0.95, (n, p, coverage)


def test_many_items_are_weighed_as_runs_of_adjacent_items() -> None:
    # 20,000 continuous values: 128 means, the bound as the t bound's at this size.
    rng = random.Random(7)
    values = [rng.gauss(0.6, 0.1) for _ in range(20_000)]
    s = samples.sample(values)
    assert len(s.values) == samples.POINTS
    half = dist.t_quantile(0.975, len(values) - 1) * float(np.std(values, ddof=1)) / math.sqrt(len(values))
    interval = st.interval(s)
    assert interval.low == pytest.approx(float(np.mean(values)) - half, abs=half * 0.05)
    assert interval.high == pytest.approx(float(np.mean(values)) + half, abs=half * 0.05)


def test_an_empty_item_or_no_item_is_an_error() -> None:
    with pytest.raises(ValueError, match="no trial values"):
        st.mean_interval([[1.0], []])
    with pytest.raises(ValueError, match="at least one item"):
        st.mean_interval([])
    with pytest.raises(ValueError, match="need 0 <= passed <= trials"):
        st.pass_rate_interval([(3, 2)])


def test_the_item_is_the_unit_and_items_weigh_alike() -> None:
    items = [[1.0, 1.0, 1.0, 1.0], [0.0], [1.0, 0.0], [0.5, 0.5, 0.5]] * 5
    interval = st.mean_interval(items)
    assert interval.estimate == pytest.approx((1 + 0 + 0.5 + 0.5) / 4)
    assert interval.n == 20


# --- the paired comparison ----------------------------------------------------------------


def test_the_paired_comparison_pairs_by_item_id_and_its_means_subtract() -> None:
    current = {"a": [1.0, 0.0], "b": [1.0], "c": [0.5], "new": [1.0]}
    baseline = {"old": [0.0], "c": [1.0], "a": [1.0, 1.0, 1.0, 1.0], "b": [0.0, 0.0]}
    comparison = paired.paired_comparison(current, baseline)
    assert comparison.shared == ("a", "b", "c")
    assert comparison.only_in_current == ("new",)
    assert comparison.only_in_baseline == ("old",)
    assert comparison.differences == {"a": -0.5, "b": 1.0, "c": -0.5}
    assert comparison.sample is not None
    assert comparison.sample.mean == pytest.approx(0.0)
    # Each item's mean, then the mean over items: 1.000 -> 0.500 would mix weightings.
    assert comparison.baseline_mean == pytest.approx(2 / 3)
    assert comparison.current_mean == pytest.approx(2 / 3)


def test_equal_differences_of_pass_fail_means_are_one_value() -> None:
    assert 0.6 - 0.4 != 0.8 - 0.6
    comparison = paired.paired_comparison(
        {"a": [1.0, 1.0, 1.0, 0.0, 0.0], "b": [1.0] * 4 + [0.0]},
        {"a": [1.0, 1.0, 0.0, 0.0, 0.0], "b": [1.0] * 3 + [0.0] * 2},
    )
    assert len(set(comparison.differences.values())) == 1


@pytest.mark.parametrize(
    ("b", "c"), [(0, 0), (3, 0), (1, 6), (6, 1), (12, 30), (40, 7), (300, 360), (5000, 5200)]
)
def test_on_pass_fail_flips_it_is_the_one_sided_mcnemar_test(b: int, c: int) -> None:
    expected = scipy.stats.binomtest(b, b + c, 0.5, alternative="greater").pvalue if b + c else 1.0
    assert paired.regressions_by_chance(b, c) == pytest.approx(expected, rel=1e-6)


# --- Holm -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "p_values",
    [[0.01, 0.04, 0.03, 0.2], [0.001], [0.05, 0.05, 0.05], [0.5, 0.001, 0.02, 0.04, 0.9, 0.011], []],
)
def test_holm_matches_statsmodels(p_values: list[float]) -> None:
    adjusted = decisions.holm(p_values)
    if p_values:
        expected = multipletests(p_values, method="holm")[1]
        assert [a.p_value for a in adjusted] == pytest.approx(list(expected))
        assert [a.rejected for a in adjusted] == list(multipletests(p_values, alpha=0.05, method="holm")[0])
    else:
        assert adjusted == []


def test_holm_says_what_each_level_was_divided_by() -> None:
    # All rejected: each at its own step.
    assert [a.divisor for a in decisions.holm([0.01, 0.02, 0.04])] == [3, 2, 1]
    # None rejected: every one tested at the first step's alpha / 3.
    assert [a.divisor for a in decisions.holm([0.02, 0.03, 0.5])] == [3, 3, 3]
    # The first rejected, the rest stopped at the second step.
    steps = decisions.holm([0.001, 0.04, 0.03])
    assert [(a.divisor, a.rejected) for a in steps] == [(3, True), (2, False), (2, False)]


# --- what a design can detect -------------------------------------------------------------


def test_the_design_reads_the_intra_item_correlation() -> None:
    # Items that always agree with themselves (temperature 0): icc 1; independent trials: about 0.
    agreeing = dp.design_of([[1.0] * 3] * 30 + [[0.0] * 3] * 10)
    assert agreeing.binary
    assert agreeing.icc == pytest.approx(1.0)
    assert agreeing.trials == 3
    rng = random.Random(5)
    independent = dp.design_of([[float(rng.random() < 0.7) for _ in range(5)] for _ in range(400)])
    assert independent.icc is not None
    assert independent.icc < 0.05
    assert independent.mean == pytest.approx(0.7, abs=0.03)
    continuous = dp.design_of([[0.5, 0.7], [0.2, 0.2], [0.9, 0.8]])
    assert not continuous.binary
    assert continuous.within == pytest.approx((0.02 + 0 + 0.005) / 3, rel=1e-3)
    # One trial per item: the baseline cannot tell hard items from flaky ones; pass/fail
    # designs take the least favourable intra-item correlation, continuous ones the noisiest
    # case (every item's spread is within it).
    single = dp.design_of([[1.0]] * 15 + [[0.0]] * 5, trials=3)
    assert (single.icc, single.baseline_trials, single.trials) == (None, 1, 3)
    assert len(single.differences(0.1)) == len(dp.UNKNOWN_ICC)
    noisy = dp.design_of([[0.5], [0.7], [0.9]], trials=3)
    assert noisy.within == pytest.approx(0.04)
    assert noisy.baseline_trials == 1
    # Trial counts that differ: a difference's variance is within / 1 + within / 3, not 2 / 3 of it.
    [population] = noisy.differences(0.0)
    assert population.variance == pytest.approx(0.04 * (1 + 1 / 3), rel=0.05)


def test_the_detectable_drop_stays_on_the_scale_and_shrinks_with_items() -> None:
    small = dp.Design(items=3, trials=1, mean=0.8, binary=True)
    assert dp.minimum_detectable_drop(small, 0.05, ALPHA) is None  # 3 items catch nothing
    drops = [dp.minimum_detectable_drop(small.with_size(n), 0.05, ALPHA) for n in (30, 100, 500)]
    assert all(d is not None for d in drops)
    assert 0.8 >= drops[0] > drops[1] > drops[2] > 0.05  # type: ignore[operator]


def test_items_needed_is_the_smallest_size_with_the_power() -> None:
    design = dp.Design(items=40, trials=1, mean=0.8, binary=True, icc=0.3)

    def power(d: dp.Design) -> float:
        return dp.detection_power(d, 0.15, 0.05, ALPHA)

    n = dp.items_needed(design, power)
    assert n is not None
    assert power(design.with_size(n)) >= 0.8 > power(design.with_size(n - 1))
    assert dp.items_needed(design, lambda d: 0.0) is None


# --- multi-trial items --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "c", "k"), [(5, 0, 1), (5, 2, 1), (5, 2, 3), (5, 5, 5), (6, 3, 2), (10, 7, 4), (8, 1, 8)]
)
def test_pass_at_k_and_pass_hat_k_match_direct_combinatorics(n: int, c: int, k: int) -> None:
    # Every way to pick k of the n trials, c of which passed (trials 0 .. c-1).
    picks = list(itertools.combinations(range(n), k))
    any_passed = sum(1 for pick in picks if min(pick) < c) / len(picks)
    all_passed = sum(1 for pick in picks if max(pick) < c) / len(picks)
    assert pk.pass_at_k(n, c, k) == pytest.approx(any_passed)
    assert pk.pass_hat_k(n, c, k) == pytest.approx(all_passed)


def test_pass_at_k_averages_over_items_with_an_interval() -> None:
    items = [(5, 5), (5, 3), (5, 0), (5, 1)] * 5
    at_1 = pk.pass_at_k_interval(items, 1)
    assert at_1.estimate == pytest.approx(9 / 20)
    assert at_1.low < 9 / 20 < at_1.high
    assert at_1.n == 20
    assert pk.pass_at_k_interval(items, 5).estimate == pytest.approx(3 / 4)
    assert pk.pass_hat_k_interval(items, 2).estimate == pytest.approx((1 + 3 / 10 + 0 + 0) / 4)


def test_pass_at_k_needs_k_of_the_trials() -> None:
    with pytest.raises(ValueError, match="1 <= k"):
        pk.pass_at_k(3, 1, 4)


# --- continuous scores at the sizes most teams use ----------------------------------------


def test_ten_continuous_scores_get_the_t_bound() -> None:
    # The review's example: ten scores of mean 0.73 and spread 0.05 (symmetric about the mean).
    # The t bound is 0.701; the first implementation printed 0.480 (its floor at the range's end).
    z = np.array([-1.5, -1.0, -0.5, -0.25, 0.0, 0.0, 0.25, 0.5, 1.0, 1.5])
    values = 0.73 + 0.05 * z / z.std(ddof=1)
    t_bound = 0.73 - scipy.stats.t.ppf(0.95, 9) * 0.05 / math.sqrt(10)
    assert t_bound == pytest.approx(0.701, abs=5e-4)
    assert st.lower_bound(samples.sample(values.tolist())) == pytest.approx(t_bound, abs=0.003)


@pytest.mark.parametrize("n", [10, 20, 30])
def test_continuous_differences_have_the_power_and_level_of_a_t_test(n: int) -> None:
    # Paired continuous differences, normal about the true change with spread 0.12: the gate's
    # normal-mode test against DELTA 0.05 rejects as often as the one-sided paired t-test, at
    # a drop of DELTA (its level) and of 2 x DELTA (its power), within Monte-Carlo error.
    rng = random.Random(n)
    for drop in (0.05, 0.10):
        gate = t_test = 0
        for _ in range(300):
            differences = [max(-1.0, min(1.0, rng.gauss(-drop, 0.12))) for _ in range(n)]
            gate += decisions.regression_test(differences, 0.05).p_beyond <= ALPHA
            shifted = np.array(differences) + 0.05
            t_test += scipy.stats.ttest_1samp(shifted, 0.0, alternative="less").pvalue <= ALPHA
        assert abs(gate - t_test) <= 0.05 * 300, (drop, gate, t_test)
        if drop == 0.05:
            assert gate <= 0.08 * 300  # about the level (the first implementation: 0)
        else:
            assert gate >= 0.25 * 300  # the t-test's power at 10 items is 28%, 74% at 30
