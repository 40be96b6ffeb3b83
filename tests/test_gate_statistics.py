"""The gates decide on evidence, at every sample size and across a whole session (issue 23): no
spread is proof of nothing, a better run never gates worse, normal mode tests the drop against
DELTA and strict mode mirrors it, every gate prints the one-sided bounds it decided on, the
session's regression gates are adjusted together, the baseline is chosen without looking at its
luck, what a gate can detect comes from the design, and ``opik-eval plan`` says what a drop needs.

The runs are deterministic (the app reads which answers to get wrong from a file), so the
expected p-values are those of ``verdict.statistics`` on the same differences, which
``test_statistics.py`` checks against exact enumeration, scipy and statsmodels."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from typing import Any

import pytest
import scipy.optimize  # type: ignore[import-untyped]
import scipy.stats  # type: ignore[import-untyped]
from conftest import Project, items

from pytest_opik_eval.cli import main as opik_eval
from pytest_opik_eval.store.local import LocalStore
from pytest_opik_eval.verdict import decisions, samples
from pytest_opik_eval.verdict import design as dp
from pytest_opik_eval.verdict import pass_at_k as pk
from pytest_opik_eval.verdict import statistics as st
from pytest_opik_eval.verdict.trial_scores import scores_by_item

# An app that gets wrong the item ids (or "id#trial") listed in wrong.txt; a second metric,
# Contains, scores the same answers alike (a correlated metric).
APP = """
import pathlib
import pytest
from pytest_opik_eval.metrics import Contains, Equals

HERE = pathlib.Path(__file__).parent


@pytest.mark.eval(
    dataset="data.jsonl",
    metrics={metrics},
    scoring_key_mapping={{"reference": "expected_output"}},
    {marker}
)
def {name}(eval_item, eval_trial):
    wrong = (HERE / "wrong.txt").read_text().split() if (HERE / "wrong.txt").exists() else []
    if eval_item["id"] in wrong or f"{{eval_item['id']}}#{{eval_trial}}" in wrong:
        return {{"output": "wrong"}}
    return {{"output": eval_item["expected_output"]}}
"""

# An app whose continuous score per item is read from levels.json (1.0 for an item not listed).
LEVELS = """
import json
import pathlib
import pytest
from types import SimpleNamespace

HERE = pathlib.Path(__file__).parent


class Level:
    name = "level"

    def score(self, output, **ignored):
        return SimpleNamespace(name="level", value=float(output), reason=None, scoring_failed=False)


@pytest.mark.eval(dataset="data.jsonl", metrics=[Level()], {marker})
def test_level(eval_item, eval_trial):
    return {{"output": json.loads((HERE / "levels.json").read_text()).get(eval_item["id"], 1.0)}}
"""


def app(
    project: Project,
    n: int,
    *,
    marker: str = "",
    metrics: str = "[Equals()]",
    name: str = "test_app",
    module: str = "test_app",
) -> None:
    project.dataset(items(*(f"i{i:03d}" for i in range(n))))
    project.write(f"{module}.py", APP.format(marker=marker, metrics=metrics, name=name))


def wrong(project: Project, *keys: str) -> None:
    (project.path / "wrong.txt").write_text("\n".join(keys))


def first(n: int) -> list[str]:
    return [f"i{i:03d}" for i in range(n)]


def gate_lines(result: pytest.RunResult) -> list[str]:
    """The gate section: each gate's line and its indented notes."""
    lines = result.outlines
    start = next(i for i, line in enumerate(lines) if "eval gates" in line) + 1
    return [line for line in lines[start:] if line.strip() and not line.startswith("=")]


def gates(report: dict[str, Any], kind: str = "max_regression") -> list[dict[str, Any]]:
    return [g for e in report["experiments"] for g in e["gates"] if g["kind"] == kind]


def regression(
    differences: Sequence[float], delta: float, *, pass_fail: bool = True
) -> decisions.RegressionTest:
    """The test on pass/fail items' differences (``APP``'s), or on scores' (``LEVELS``')."""
    return decisions.regression_test(list(differences), delta, pass_fail=pass_fail)


GATED = ["--eval", "--eval-soft", "--eval-baseline=last"]


# --- 1. no spread is proof of nothing ------------------------------------------------------


def test_one_item_going_from_pass_to_fail_is_no_evidence(project: Project) -> None:
    app(project, 1)
    project.run("--eval", "--eval-soft")
    wrong(project, "i000")
    result, report = project.run_report(*GATED, "--eval-max-regression=equals_metric=0.05")
    assert result.ret == pytest.ExitCode.OK
    assert gate_lines(result)[:3] == [
        "met: test_app: max_regression equals_metric: mean changed by -1.000 from the baseline, beyond "
        "-0.05 but not shown to be (the drop is at least -1.000, p=1.000)",
        "  -1.000 [-1.000, +1.000] one-sided 95% bounds on the change, 1 item, borderline",
        "  at 1 item x 1 trial no drop is caught with 80% power (see opik-eval plan)",
    ]
    [gate] = gates(report)
    assert (gate["p_value"], gate["p_chance"], gate["detectable_drop"]) == (1.0, 0.5, None)


@pytest.mark.parametrize(("regressed", "met"), [(3, True), (6, False)])
def test_items_that_all_regressed_are_as_likely_as_their_signs_by_chance(
    project: Project, regressed: int, met: bool
) -> None:
    # With DELTA 0: 3 of 3 items regressing happen by chance once in 8 (the old gate said p<0.001),
    # and the gate's p-value is the exact sign test's; 6 of 6, once in 64: a regression.
    app(project, regressed)
    project.run("--eval", "--eval-soft")
    wrong(project, *first(regressed))
    result, report = project.run_report(*GATED, "--eval-max-regression=equals_metric=0")
    expected = regression([-1.0] * regressed, 0.0)
    [gate] = gates(report)
    assert gate["p_chance"] == pytest.approx(2.0**-regressed)
    assert gate["p_value"] == pytest.approx(expected.p_beyond)
    assert gate["met"] is met
    assert result.ret == (pytest.ExitCode.OK if met else pytest.ExitCode.TESTS_FAILED)
    assert gate["p_value"] == 2.0**-regressed  # exactly: 1/8 and 1/64, by hand
    low, _ = expected.drop_bounds(0.95)
    if met:  # 3 items: the drop's bound below 0
        assert low < 0
        assert gate_lines(result)[0].endswith(
            f"beyond 0 but not shown to be (the drop is at least {low:.3f}, p=0.125)"
        )
    else:
        assert low > 0
        assert gate_lines(result)[0].endswith(f"beyond the 0 allowed (at least {low:.3f}, p=0.016)")


@pytest.mark.parametrize(("n", "met", "p"), [(2, False, 0.5), (30, False, 0.205), (72, True, 0.049)])
def test_strict_mode_never_passes_on_no_evidence(project: Project, n: int, met: bool, p: float) -> None:
    # An app that did not change on any item: 2 or 30 items cannot exclude that 5% of items
    # broke (30 items miss such a breakage 21% of the time); 72 can.
    app(project, n)
    project.run("--eval", "--eval-soft")
    result, report = project.run_report(
        *GATED, "--eval-max-regression=equals_metric=0.05", "--eval-gate-mode=strict"
    )
    [gate] = gates(report)
    assert gate["p_value"] == pytest.approx(regression([0.0] * n, 0.05).p_within)
    assert (gate["met"], round(gate["p_value"], 3)) == (met, p)
    shown = "" if met else "not "
    assert gate_lines(result)[0].startswith(
        f"{'met' if met else 'NOT MET'}: test_app: max_regression equals_metric (strict): mean changed by "
        f"+0.000 from the baseline; the drop is {shown}shown below 0.05 (at most "
    )
    if not met:  # and how many items would show it
        assert gate["items_needed"] > n
        assert gate["borderline"] is True


def _items_to_clear(mean: float, delta: float = 0.05, alpha: float = 0.05, power: float = 0.8) -> int:
    """The fewest unchanged items at which strict mode shows a drop below ``delta`` with 80%
    chance, worked out from the formula ``design.py`` states, with scipy: a baseline of one
    trial per item with this pass rate, rerun unchanged, differs by +1 or -1 on an item with
    chance mean (1 - mean) each (trials independent: the least favourable correlation); the
    power is Phi(((delta - 0.5 / n) sqrt(n) - t(1 - alpha, n - 1) sqrt(v0)) / sd), v0 the
    variance of the empirical-likelihood tilt of those differences to a mean of -delta."""
    q = mean * (1.0 - mean)
    points = {-1.0: q, 0.0: 1.0 - 2.0 * q, 1.0: q}

    def moment(lam: float) -> float:
        return sum(w * (x + delta) / (1.0 + lam * (x + delta)) for x, w in points.items())

    lam = scipy.optimize.brentq(moment, 0.0, 1.0 / (1.0 - delta) - 1e-12)
    v0 = sum(w / (1.0 + lam * (x + delta)) * (x + delta) ** 2 for x, w in points.items())
    n = 2
    while True:
        t = scipy.stats.t.ppf(1.0 - alpha, n - 1)
        if scipy.stats.norm.cdf(((delta - 0.5 / n) * n**0.5 - t * v0**0.5) / (2.0 * q) ** 0.5) >= power:
            return n
        n += 1


def test_strict_mode_asks_for_no_more_items_when_the_design_has_enough(project: Project) -> None:
    # 72 items passing in the baseline are the 72 strict mode needs (see the test of no evidence); one broke
    # now, so the drop is not shown below 0.05, but more items would not help: no count is given.
    app(project, 72)
    project.run("--eval", "--eval-soft")
    wrong(project, *first(1))
    result, report = project.run_report(
        *GATED, "--eval-max-regression=equals_metric=0.05", "--eval-gate-mode=strict"
    )
    [gate] = gates(report)
    assert (gate["met"], gate["items_needed"]) == (False, 72)
    assert gate["p_value"] == pytest.approx(regression([-1.0] + [0.0] * 71, 0.05).p_within)
    assert not [line for line in gate_lines(result) if "items would" in line]


@pytest.mark.parametrize(("wrong_items", "needed"), [(3, 480), (6, 817)])
def test_strict_mode_says_how_many_unchanged_items_would_show_no_drop(
    project: Project, wrong_items: int, needed: int
) -> None:
    # 30 items of which 3 (or 6) fail, rerun unchanged: too few to show that nothing dropped by
    # 0.05; the note says how many would, a count away from both ends of the search.
    assert _items_to_clear(1.0 - wrong_items / 30) == needed
    app(project, 30)
    wrong(project, *first(wrong_items))
    project.run("--eval", "--eval-soft")
    result, report = project.run_report(
        *GATED, "--eval-max-regression=equals_metric=0.05", "--eval-gate-mode=strict"
    )
    [gate] = gates(report)
    assert (gate["met"], gate["items_needed"]) == (False, needed)
    assert (
        f"  about {needed} items would show a drop below 0.05 when nothing changed with 80% chance "
        "at 1 trial each"
    ) in gate_lines(result)


def test_a_drop_of_exactly_delta_is_within_what_is_allowed(project: Project) -> None:
    # One of two items breaks: a drop of 0.5, the DELTA allowed, not beyond it.
    app(project, 2)
    project.run("--eval", "--eval-soft")
    wrong(project, "i000")
    result, _ = project.run_report(*GATED, "--eval-max-regression=equals_metric=0.5")
    assert gate_lines(result)[0] == (
        "met: test_app: max_regression equals_metric: mean changed by -0.500 from the baseline "
        "(at most -0.5 allowed)"
    )


# 30 items of which 3 fail in the baseline, at DELTA 0.2: the design catches a drop of 0.52
# (between 2 and 3 x DELTA) with 80% power.
DESIGN = dp.design_of([[0.0]] * 3 + [[1.0]] * 27, trials=1)


def test_a_normal_gate_that_fails_on_a_small_design_says_how_many_items_would_catch_twice_delta(
    project: Project,
) -> None:
    detectable = dp.minimum_detectable_drop(DESIGN, 0.2, 0.05)
    assert detectable is not None
    assert 0.4 < detectable < 0.6
    needed = dp.items_needed(DESIGN, lambda d: dp.detection_power(d, 0.4, 0.2, 0.05))
    assert needed is not None
    assert needed > 30
    app(project, 30)
    wrong(project, *first(3))
    project.run("--eval", "--eval-soft")
    wrong(project, *first(18))
    result, report = project.run_report(*GATED, "--eval-max-regression=equals_metric=0.2")
    [gate] = gates(report)
    assert (gate["met"], gate["items_needed"]) == (False, needed)
    assert gate["detectable_drop"] == pytest.approx(detectable)
    assert gate_lines(result)[2:] == [
        f"  catches a drop of {detectable:.3f} or more with 80% power at 30 items x 1 trial",
        f"  about {needed} items would catch a drop of 0.4 with 80% chance at 1 trial each",
    ]


def test_a_strict_gate_that_is_met_asks_for_no_more_items(project: Project) -> None:
    # The same design, unchanged: strict mode shows the drop below 0.2; what more items would
    # catch is for a gate that could not conclude.
    app(project, 30)
    wrong(project, *first(3))
    project.run("--eval", "--eval-soft")
    result, report = project.run_report(
        *GATED, "--eval-max-regression=equals_metric=0.2", "--eval-gate-mode=strict"
    )
    [gate] = gates(report)
    assert (gate["met"], gate["items_needed"]) == (True, None)
    assert not [line for line in gate_lines(result) if "items would" in line]


def test_the_design_rests_on_the_baseline_items_both_runs_planned(project: Project) -> None:
    # The baseline ran 12 items, i011 among its 3 failures; this run leaves i011 out (-k): what
    # the gate can detect comes from the 11 items both planned, 2 of them failing.
    app(project, 12)
    wrong(project, "i000", "i001", "i011")
    project.run("--eval", "--eval-soft")
    result, report = project.run_report(*GATED, "--eval-max-regression=equals_metric=0.1", "-k", "not i011")
    [gate] = gates(report)
    shared = dp.minimum_detectable_drop(dp.design_of([[0.0]] * 2 + [[1.0]] * 9, trials=1), 0.1, 0.05)
    every = dp.minimum_detectable_drop(dp.design_of([[0.0]] * 3 + [[1.0]] * 9, trials=1), 0.1, 0.05)
    assert shared != pytest.approx(every)
    assert gate["met"] is True
    assert gate["detectable_drop"] == pytest.approx(shared)
    assert gate_lines(result)[0].endswith("(at most -0.1 allowed), over the 11 item(s) both planned")


# --- 2. single runs: honest bounds, and a better run never gates worse ------------------------


def test_one_item_bounds_nothing_and_two_equal_scores_are_no_certainty(project: Project) -> None:
    project.dataset(items("a", "b"))
    project.write("test_level.py", LEVELS.format(marker=""))
    (project.path / "levels.json").write_text(json.dumps({"a": 0.8, "b": 0.8}))
    result, report = project.run_report("--eval", "--eval-fail-under=level=0.5", "--eval-gate-mode=strict")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    interval = report["experiments"][0]["summary"]["metrics"]["level"]["interval"]
    assert interval["low"] < 0.3 < 0.8 < interval["high"]  # not [0.8, 0.8]
    [gate] = report["experiments"][0]["gates"]
    # Two items: their spread is estimated (no "one item bounds nothing" note).
    assert gate["notes"] == ["0.800 [0.179, 0.955] one-sided 95% bounds, 2 items, borderline"]
    result, report = project.run_report(
        "--eval", "--eval-fail-under=level=0.5", "--eval-gate-mode=strict", "-k", "a-t0"
    )
    assert gate_lines(result) == [
        "NOT MET: test_level: fail_under level (strict): mean 0.800, lower bound 0.000 is below 0.5 (p=1.000)",
        "  0.800 [0.000, 1.000] one-sided 95% bounds, 1 item, borderline",
        "  one item bounds nothing: its spread cannot be estimated",
    ]


@pytest.mark.parametrize(
    ("bound", "all_passed", "one_failed"), [(0.65, True, True), (0.74, True, False), (0.75, False, False)]
)
def test_a_better_run_never_gates_worse(
    project: Project, bound: float, all_passed: bool, one_failed: bool
) -> None:
    # 10 items x 5 trials, every trial passing, against the same with one failed trial: the
    # bound of the better run is no lower (it was lower with a method switch). The better run's
    # is Clopper-Pearson's for 10 of 10, 0.05^(1/10) = 0.741; the worse run's share of 0.8 may
    # hide items that break outright, and Tango's bound on the shares is 0.734.
    app(project, 10, marker="trial_count=5,")
    strict = ["--eval", "--eval-soft", f"--eval-min-pass-rate={bound}", "--eval-gate-mode=strict"]
    result, report = project.run_report(*strict)
    better = report["experiments"][0]["gates"][0]
    wrong(project, "i000#0")
    result, report = project.run_report(*strict)
    worse = report["experiments"][0]["gates"][0]
    assert better["interval"]["low"] >= worse["interval"]["low"]
    assert better["interval"]["low"] == pytest.approx(0.05**0.1)
    assert worse["interval"]["low"] == pytest.approx(0.7335, abs=1e-4)
    assert (better["met"], worse["met"]) == (all_passed, one_failed)


# --- 3. honest at small n: what the spread seen cannot show ------------------------------------


def test_strict_mode_does_not_take_the_spread_of_shares_for_proof_that_none_broke(project: Project) -> None:
    # 30 items x 5 trials: three items lost a trial, three gained one; the drop is 0. Scores
    # with these differences would be shown within 0.05 (p=0.031), but a pass/fail change that
    # breaks an item outright is a share falling to 0, which 30 items miss often: the bound
    # allows the items unseen at the range's end, and strict mode does not pass.
    differences = [0.2] * 3 + [-0.2] * 3 + [0.0] * 24
    assert round(regression(differences, 0.05, pass_fail=False).p_within, 3) == 0.031
    app(project, 30, marker="trial_count=5,")
    wrong(project, "i000#0", "i001#0", "i002#0")
    project.run("--eval", "--eval-soft")
    wrong(project, "i003#0", "i004#0", "i005#0")
    result, report = project.run_report(
        *GATED, "--eval-max-regression=equals_metric=0.05", "--eval-gate-mode=strict"
    )
    [gate] = gates(report)
    expected = regression(differences, 0.05)
    assert gate["p_value"] == pytest.approx(expected.p_within)
    assert (gate["met"], round(gate["p_value"], 3)) == (False, 0.109)
    _, high = expected.drop_bounds(0.95)
    assert gate_lines(result)[0] == (
        "NOT MET: test_app: max_regression equals_metric (strict): mean changed by +0.000 from the "
        f"baseline; the drop is not shown below 0.05 (at most {high:.3f}, p=0.109)"
    )


# --- 4. normal mode tests the drop against DELTA, strict mode mirrors it -------------------------


@pytest.mark.parametrize(("broken", "met"), [(6, True), (10, True), (20, False)])
def test_normal_mode_fails_only_on_evidence_that_the_drop_exceeds_delta(
    project: Project, broken: int, met: bool
) -> None:
    # 200 items: a drop of 0.03 or of exactly DELTA is tolerated; twice DELTA is caught.
    app(project, 200)
    project.run("--eval", "--eval-soft")
    wrong(project, *first(broken))
    result, report = project.run_report(*GATED, "--eval-max-regression=equals_metric=0.05")
    [gate] = gates(report)
    expected = regression([-1.0] * broken + [0.0] * (200 - broken), 0.05)
    assert gate["p_value"] == pytest.approx(expected.p_beyond)
    assert gate["met"] is met
    if not met:
        # 5. the bound printed is the bound the test used: it excludes DELTA, not borderline
        low, high = expected.drop_bounds(0.95)
        assert gate_lines(result)[0] == (
            "NOT MET: test_app: max_regression equals_metric: mean dropped by 0.100 from the baseline, "
            f"beyond the 0.05 allowed (at least {low:.3f}, p=0.002)"
        )
        assert gate["interval"]["high"] == pytest.approx(-low)
        assert -low < -0.05
        assert (gate["interval"]["one_sided"], gate["interval"]["level"], gate["borderline"]) == (
            True,
            0.95,
            False,
        )
        assert (gate["one_sided"], gate["adjusted_for"], gate["family"]) == (True, 1, 1)


def test_strict_mode_passes_on_evidence_and_is_then_never_borderline(project: Project) -> None:
    # The baseline got 30 of 120 items wrong; the new app fixes them all: shown no worse.
    app(project, 120)
    wrong(project, *first(30))
    project.run("--eval", "--eval-soft")
    wrong(project)
    result, report = project.run_report(
        *GATED, "--eval-max-regression=equals_metric=0.05", "--eval-gate-mode=strict"
    )
    assert result.ret == pytest.ExitCode.OK
    [gate] = gates(report)
    assert gate["met"]
    assert not gate["borderline"]
    assert gate["interval"]["low"] > -0.05
    assert gate["p_value"] == pytest.approx(regression([1.0] * 30 + [0.0] * 90, 0.05).p_within)


# --- 5. the absolute gates: one-sided bounds, in strict mode the test ---------------------------


def test_absolute_gates_print_the_one_sided_bounds_they_use(project: Project) -> None:
    project.dataset(items("a", "b", "c", "d"))
    project.eval_test(behaviour="if item['id'] == 'd': return 'wrong'")
    gates_ = ["--eval", "--eval-soft", "--eval-fail-under=equals_metric=0.5", "--eval-min-pass-rate=0.5"]
    s = samples.sample([1.0, 1.0, 1.0, 0.0])
    low, high = st.lower_bound(s, 0.95), st.upper_bound(s, 0.95)
    result, report = project.run_report(*gates_)
    assert result.ret == pytest.ExitCode.OK  # normal mode: the estimate, a threshold
    assert [g["one_sided"] for g in report["experiments"][0]["gates"]] == [True, True]
    assert gate_lines(result) == [
        "met: test_qa: fail_under equals_metric: mean 0.750 >= 0.5",
        f"  0.750 [{low:.3f}, {high:.3f}] one-sided 95% bounds, 4 items, borderline",
        "met: test_qa: min_pass_rate: trials pass rate 0.750 >= 0.5",
        f"  0.750 [{low:.3f}, {high:.3f}] one-sided 95% bounds, 4 items, borderline",
    ]
    # Borderline below the bound: normal mode goes with the estimate, as the README says.
    below = project.run("--eval", "--eval-soft", "--eval-fail-under=equals_metric=0.8")
    assert below.ret == pytest.ExitCode.TESTS_FAILED
    assert gate_lines(below) == [
        "NOT MET: test_qa: fail_under equals_metric: mean 0.750 is below 0.8",
        f"  0.750 [{low:.3f}, {high:.3f}] one-sided 95% bounds, 4 items, borderline",
    ]
    strict = project.run(*gates_, "--eval-gate-mode=strict")
    assert strict.ret == pytest.ExitCode.TESTS_FAILED
    p = st.p_above(s, 0.5)
    assert gate_lines(strict)[0] == (
        f"NOT MET: test_qa: fail_under equals_metric (strict): mean 0.750, lower bound {low:.3f} is below 0.5 "
        f"(p={p:.3f})"
    )
    clears = project.run(
        "--eval",
        "--eval-soft",
        f"--eval-fail-under=equals_metric={low - 0.01:.3f}",
        "--eval-gate-mode=strict",
    )
    assert clears.ret == pytest.ExitCode.OK


# --- 6. the session is the family ------------------------------------------------------------


def five_gated_tests(project: Project) -> None:
    project.dataset(items(*first(30)))
    for test in range(5):
        project.write(
            f"test_app{test}.py", APP.format(marker="", metrics="[Equals()]", name=f"test_app{test}")
        )


def test_the_regression_gates_of_a_session_are_adjusted_together(project: Project) -> None:
    # Five gated tests: five gates each at 5% would fail an unchanged app's session 23% of the
    # time; Holm over the five keeps it at 5%, and each gate says so.
    five_gated_tests(project)
    project.run("--eval", "--eval-soft")
    wrong(project, *first(5))  # 5 of 30 items regress in every test: p = 1/32 alone
    result, report = project.run_report(*GATED, "--eval-max-regression=equals_metric=0")
    found = gates(report)
    assert len(found) == 5
    alone = regression([-1.0] * 5 + [0.0] * 25, 0.0).p_beyond
    assert alone == pytest.approx(1 / 32)
    for gate in found:
        assert (gate["family"], gate["adjusted_for"], gate["met"]) == (5, 5, True)
        assert gate["p_value_unadjusted"] == pytest.approx(alone)
        assert gate["p_value"] == pytest.approx(min(1.0, 5 * alone))  # tied: all at the first step
        assert gate["interval"]["level"] == pytest.approx(0.99)
    assert result.ret == pytest.ExitCode.OK
    assert (
        "  tested at one-sided 99%: Holm over the session's 5 regression gates; unadjusted p=0.0312"
        in result.outlines
    )
    assert "adjusted for 5 gates" in gate_lines(result)[0]


def test_the_last_holm_step_still_says_it_belongs_to_the_family(project: Project) -> None:
    # Two gated tests regress on 10 and 6 of 30 items (p = 1/1024 and 1/64 alone): Holm tests the
    # first at 2.5%, then the second at 5%, unadjusted, and its note still names the family.
    project.dataset(items(*first(30)))
    for test in range(2):
        source = APP.format(marker="", metrics="[Equals()]", name=f"test_app{test}")
        project.write(f"test_app{test}.py", source.replace('"wrong.txt"', f'"wrong{test}.txt"'))
    project.run("--eval", "--eval-soft")
    for test, regressed in enumerate((10, 6)):
        (project.path / f"wrong{test}.txt").write_text("\n".join(first(regressed)))
    result, report = project.run_report(*GATED, "--eval-max-regression=equals_metric=0")
    steps = {e["name"]: g for e in report["experiments"] for g in e["gates"]}
    assert (steps["test_app0"]["adjusted_for"], steps["test_app1"]["adjusted_for"]) == (2, 1)
    last = steps["test_app1"]
    assert (last["met"], last["family"], last["p_value_unadjusted"]) == (False, 2, pytest.approx(1 / 64))
    assert (
        "tested at one-sided 95%: Holm over the session's 2 regression gates; unadjusted p=0.0156"
        in (last["notes"])
    )
    # What each design detects is at its own step's level: 2.5% for the first, 5% for the last.
    design = dp.design_of([[1.0]] * 30, trials=1)
    first_step = dp.minimum_detectable_drop(design, 0.0, 0.025)
    assert steps["test_app0"]["detectable_drop"] == pytest.approx(first_step)
    assert last["detectable_drop"] == pytest.approx(dp.minimum_detectable_drop(design, 0.0, 0.05))
    assert first_step != pytest.approx(last["detectable_drop"])


def test_the_controller_adjusts_the_whole_session_under_xdist(project: Project) -> None:
    # Tests 0-3 regress on 2-5 items (p = 1/4 ... 1/32 alone), test_app4 on 10 (p < 1/128): Holm
    # fails test_app4 only, on both sides of the split, with the same p-values.
    five_gated_tests(project)
    for test in range(5):
        path = project.path / f"test_app{test}.py"
        path.write_text(path.read_text().replace('"wrong.txt"', f'"wrong{test}.txt"'))
    project.run("--eval", "--eval-soft")
    baseline, _ = last_run(project)
    for test, regressed in enumerate((2, 3, 4, 5, 10)):
        (project.path / f"wrong{test}.txt").write_text("\n".join(first(regressed)))
    gated = ["--eval", "--eval-soft", f"--eval-baseline={baseline}", "--eval-max-regression=equals_metric=0"]
    _, single = project.run_report(*gated, "-p", "no:xdist")
    _, distributed = project.run_report(*gated, "-p", "xdist", "-n", "2")
    verdicts = regression_verdicts(single)
    met, p, alone, family, divisor = verdicts.pop("test_app4")
    assert (met, family, divisor) == (False, 5, 5)
    assert alone < 1 / 128
    assert p == pytest.approx(5 * alone)
    # Holm by hand: 5 x p rejected; then 4/32 is not, and the rest keep the running maximum.
    assert verdicts == {
        "test_app0": (True, pytest.approx(2 / 8), pytest.approx(1 / 4), 5, 4),
        "test_app1": (True, pytest.approx(2 / 8), pytest.approx(1 / 8), 5, 4),
        "test_app2": (True, pytest.approx(3 / 16), pytest.approx(1 / 16), 5, 4),
        "test_app3": (True, pytest.approx(4 / 32), pytest.approx(1 / 32), 5, 4),
    }
    assert regression_verdicts(distributed) == regression_verdicts(single)


def test_a_second_gate_on_a_correlated_metric_says_what_it_was_adjusted_for(project: Project) -> None:
    # Alone, the gate fails (p = 1/32); with a second gate on a metric that scores alike, Holm
    # doubles both p-values and the gate passes: the line says it was adjusted for 2 gates.
    app(project, 30, metrics="[Equals(), Contains()]")
    project.run("--eval", "--eval-soft")
    gated = ["--eval", "--eval-soft", f"--eval-baseline={project.last_experiment_id()}"]
    wrong(project, *first(5))
    one = project.run(*gated, "--eval-max-regression=equals_metric=0")
    assert one.ret == pytest.ExitCode.TESTS_FAILED
    two, report = project.run_report(
        *gated, "--eval-max-regression=equals_metric=0", "--eval-max-regression=contains_metric=0"
    )
    assert two.ret == pytest.ExitCode.OK
    low, _ = regression([-1.0] * 5 + [0.0] * 25, 0.0).drop_bounds(1 - 0.05 / 2)  # at 97.5%
    assert gate_lines(two)[0] == (
        "met: test_app: max_regression equals_metric: mean changed by -0.167 from the baseline, beyond 0 "
        f"but not shown to be (the drop is at least {low:.3f}, p=0.062, adjusted for 2 gates)"
    )
    assert [g["p_value"] for g in gates(report)] == pytest.approx([1 / 16, 1 / 16])


# --- 7. a baseline that is not chosen for its luck ------------------------------------------


def test_last_is_the_newest_earlier_run_whatever_its_gates_said(project: Project) -> None:
    app(project, 4)
    gate = ["--eval", "--eval-soft", "--eval-fail-under=equals_metric=0.9"]
    project.run(*gate)  # passes
    passing = project.last_experiment_id()
    wrong(project, "i000")
    assert project.run(*gate).ret == pytest.ExitCode.TESTS_FAILED  # fails its gate
    failing = project.last_experiment_id()
    _, report = project.run_report(*gate, "--eval-baseline=last")
    assert report["experiments"][0]["baseline"]["experiment_id"] == failing
    _, report = project.run_report(*gate, "--eval-baseline=last-passing")
    assert report["experiments"][0]["baseline"]["experiment_id"] == passing
    # A first run has no baseline and is not blocked.
    first_run = project.run(
        "--eval", "--eval-baseline=last", "-p", "no:cacheprovider", "--eval-store=other.db"
    )
    first_run.stdout.fnmatch_lines(
        ["  baseline: no earlier experiment of test_app.py::test_app; comparison skipped"]
    )


def test_a_baseline_that_did_not_pass_is_announced_by_the_regression_gate(project: Project) -> None:
    # A push that failed for a regression is the next push's "last": compared with it, the
    # regression is not counted again, and the gate says why it may pass.
    app(project, 20)
    gated = ["--eval", "--eval-soft", "--eval-baseline=last", "--eval-max-regression=equals_metric=0.05"]
    project.run(*gated)
    wrong(project, *first(10))
    assert project.run(*gated).ret == pytest.ExitCode.TESTS_FAILED  # the regression: not met
    failing_run, experiments = last_run(project)
    result, report = project.run_report(*gated)
    assert result.ret == pytest.ExitCode.OK  # no change since the failed run
    note = (
        f"the baseline, experiment {experiments['test_app']} of run {failing_run}, did not pass (a gate not "
        "met, a trial failed or pending): a drop it already had is not counted here; compare with a run "
        "that passed: --eval-baseline=RUN_ID"
    )
    assert f"  {note}" in gate_lines(result)
    assert note in gates(report)[0]["notes"]
    # That run passed: against it, no such note.
    assert not any("did not pass" in line for line in gate_lines(project.run(*gated)))


# --- 8. what a gate can detect comes from the design; opik-eval plan ------------------------------


def test_the_detectable_drop_comes_from_the_design_not_the_observed_drop(project: Project) -> None:
    app(project, 40, marker="trial_count=3,")
    wrong(project, *[f"i{i:03d}#0" for i in range(12)])  # flaky items in the baseline
    project.run("--eval", "--eval-soft")
    baseline = project.last_experiment_id()
    drops = []
    for broken in (0, 8):
        wrong(project, *first(broken))
        _, report = project.run_report(
            "--eval", "--eval-soft", f"--eval-baseline={baseline}", "--eval-max-regression=equals_metric=0.05"
        )
        drops.append(gates(report)[0]["detectable_drop"])
    assert drops[0] == drops[1] is not None
    assert 0.05 < drops[0] <= 0.9  # at most the baseline's mean
    store = LocalStore(project.store_path, create=False)
    try:
        values = scores_by_item(store.trials(baseline)).values["equals_metric"]
    finally:
        store.close()
    expected = dp.minimum_detectable_drop(dp.design_of(values.values()), 0.05, 0.05)
    assert drops[0] == pytest.approx(expected)


def test_the_design_has_the_current_runs_trials_when_the_baseline_ran_fewer(project: Project) -> None:
    # The baseline ran each of 20 items once (4 failing), this run three times: the gate can
    # detect what 20 items x 3 trials can, with the baseline's spread.
    app(project, 20)
    wrong(project, *first(4))
    project.run("--eval", "--eval-soft")
    app(project, 20, marker="trial_count=3,")
    result, report = project.run_report(*GATED, "--eval-max-regression=equals_metric=0.05")
    [gate] = gates(report)
    baseline = [[0.0]] * 4 + [[1.0]] * 16
    detectable = dp.minimum_detectable_drop(dp.design_of(baseline, trials=3), 0.05, 0.05)
    one_trial = dp.minimum_detectable_drop(dp.design_of(baseline, trials=1), 0.05, 0.05)
    assert detectable is not None
    assert one_trial is not None
    assert detectable < one_trial
    assert gate["detectable_drop"] == pytest.approx(detectable)
    assert (
        f"  catches a drop of {detectable:.3f} or more with 80% power at 20 items x 3 trials"
        in result.outlines
    )


def test_a_one_trial_baseline_detects_the_same_drop_whatever_broke(
    project: Project, capsys: pytest.CaptureFixture[str]
) -> None:
    # 30 items pass, 10 fail, one trial each: whether 0, 8 or 16 items broke since, the gate
    # prints the drop its design catches (0.344, the least favourable intra-item correlation:
    # trials independent), and opik-eval plan on the baseline says the same.
    app(project, 40)
    failing = [f"i{i:03d}" for i in range(30, 40)]
    wrong(project, *failing)
    project.run("--eval", "--eval-soft")
    baseline, _ = last_run(project)
    printed = set()
    for broken in (0, 8, 16):
        wrong(project, *failing, *first(broken))
        result, report = project.run_report(
            "--eval", "--eval-soft", f"--eval-baseline={baseline}", "--eval-max-regression=equals_metric=0.05"
        )
        printed.add(gates(report)[0]["detectable_drop"])
        assert "  catches a drop of 0.344 or more with 80% power at 40 items x 1 trial" in result.outlines
    assert len(printed) == 1
    capsys.readouterr()
    assert (
        opik_eval(["--store", str(project.store_path), "plan", baseline, "--delta=0.05", "--trials=1,3"]) == 0
    )
    out = capsys.readouterr().out.splitlines()
    assert out[1] == (
        "  equals_metric: pass/fail, mean 0.750, one trial per item: intra-item correlation unknown, "
        "each figure at the least favourable one (0 to 1)"
    )
    assert out[4].split()[0] == "1"
    assert out[4].split()[-1] == "0.344"


def test_opik_eval_plan_says_how_many_items_and_trials_a_drop_needs(
    project: Project, capsys: pytest.CaptureFixture[str]
) -> None:
    app(project, 20, marker="trial_count=3,")
    wrong(project, *[f"i{i:03d}#{t}" for i in range(5) for t in range(3)], "i005#0", "i006#1")
    project.run("--eval", "--eval-soft")
    capsys.readouterr()
    store = ["--store", str(project.store_path)]
    assert opik_eval([*store, "plan", "last", "--drop=0.15", "--delta=0.05", "--trials=1,5"]) == 0
    out = capsys.readouterr().out.splitlines()
    local = LocalStore(project.store_path, create=False)
    try:
        values = scores_by_item(local.trials(project.last_experiment_id())).values["equals_metric"]
    finally:
        local.close()
    design = dp.design_of(values.values())
    rows = dp.plan(design, 0.15, 0.05, 0.05, (1, 5))
    assert (
        out[1]
        == f"  equals_metric: pass/fail, mean {design.mean:.3f}, intra-item correlation {design.icc:.2f}"
    )
    assert out[2] == "    80% chance, one-sided 95%; items needed to:"
    assert out[3].split() == [
        "trials",
        "catch",
        "0.15",
        "show",
        "none",
        ">",
        "0.05",
        "drop",
        "caught",
        "at",
        "20",
        "items",
    ]
    for line, row in zip(out[4:6], rows, strict=True):
        caught = "none" if row.caught_at_size is None else f"{row.caught_at_size:.3f}"
        assert line.split() == [str(row.trials), f"{row.to_catch:,}", f"{row.to_clear:,}", caught]
    assert rows[1].to_catch is not None
    assert rows[0].to_catch is not None
    assert rows[1].to_catch < rows[0].to_catch
    with pytest.raises(SystemExit):
        opik_eval([*store, "plan", "last", "--trials=0,2"])
    assert (
        "expected whole numbers from 1 separated by commas, such as 1,3,5; got '0,2'"
        in capsys.readouterr().err
    )


# --- 9. the baseline line, the flips, the intervals in the summary --------------------------------


def test_the_summary_weighs_every_item_alike_and_shows_its_intervals(project: Project) -> None:
    # The baseline passes a and b once each; the new run, of 3 trials, gets a wrong 3 times and
    # completes one trial of b (two crash): the mean over items is 0.5 (a 0, b 1), not 0.25.
    project.dataset(items("a", "b"))
    test = project.eval_test(behaviour="if item['id'] == 'a': return 'wrong'")
    test.write_text(test.read_text().replace("if item['id'] == 'a': return 'wrong'", "pass"))
    project.run("--eval")
    test.write_text(test.read_text().replace("    pass\n", "    if item['id'] == 'a': return 'wrong'\n"))
    test.write_text(test.read_text().replace("scoring_key_mapping", "trial_count=3, scoring_key_mapping"))
    project.fail("b#1", "b#2")
    result = project.run("--eval", "--eval-soft", "--eval-baseline=last")
    mean = st.interval(samples.sample([0.0, 1.0]))
    result.stdout.fnmatch_lines(
        [
            "  metric               mean  95% interval        min    max failed   pass  gate",
            f"  equals_metric       0.500  [[]{mean.low:.3f}, {mean.high:.3f}]    0.000  1.000      0  0.250",
            "    equals_metric             1.000 ->  0.500 (-0.500)",
            "    regressions (1): a",
            "    as many regressions by chance: p=0.500 (exact one-sided test on the items' flips)",
        ]
    )


def test_multi_trial_items_report_pass_at_k_and_pass_hat_k_with_intervals(project: Project) -> None:
    project.dataset(items("steady", "flaky"))
    # flaky passes 1 of its 3 trials
    project.eval_test(
        marker="trial_count=3, pass_threshold=1,",
        behaviour="if item['id'] == 'flaky' and trial < 2: return {'output': 'wrong'}",
    )
    result, report = project.run_report("--eval", "--eval-min-pass-rate=0.5")
    summary = report["experiments"][0]["summary"]
    # By hand: pass@k = 1 - C(n-c, k) / C(n, k) and pass^k = C(c, k) / C(n, k), per item, averaged.
    assert summary["pass_at_k"] == pytest.approx({"1": (1 + 1 / 3) / 2, "2": (1 + 2 / 3) / 2, "3": 1.0})
    assert summary["pass_hat_k"] == pytest.approx({"1": (1 + 1 / 3) / 2, "2": 0.5, "3": 0.5})
    hat_3 = summary["pass_hat_k_interval"]["3"]
    expected = pk.pass_hat_k_interval([(3, 3), (3, 1)], 3)
    assert (hat_3["estimate"], hat_3["low"], hat_3["high"], hat_3["items"]) == pytest.approx(
        (0.5, expected.low, expected.high, 2)
    )
    at_1, at_3 = (pk.pass_at_k_interval([(3, 3), (3, 1)], k) for k in (1, 3))
    assert (
        f"    pass@1   0.667 [{at_1.low:.3f}, {at_1.high:.3f}]",
        f"    pass@3   1.000 [{at_3.low:.3f}, 1.000]",
        f"    pass^3   0.500 [{expected.low:.3f}, {expected.high:.3f}]",
    ) == tuple(line for line in result.outlines if line.startswith(("    pass@", "    pass^")))


def test_the_pass_at_k_intervals_reach_every_report(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The terminal and the JSON report had them; the JUnit XML, the job summary and the HTML
    # report showed pass@k and pass^k without them.
    project.dataset(items("steady", "flaky"))
    project.eval_test(
        marker="trial_count=3, pass_threshold=1,",
        behaviour="if item['id'] == 'flaky' and trial < 2: return {'output': 'wrong'}",
    )
    step_summary = project.path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step_summary))
    result, report = project.run_report("--eval", "--junitxml=junit.xml", "--eval-html=report.html")
    summary = report["experiments"][0]["summary"]
    at_1, hat_3 = summary["pass_at_k_interval"]["1"], summary["pass_hat_k_interval"]["3"]
    # By hand: pass@1 is 0.667 over the two items (1 and 1/3); pass^3 0.5 (1 and 0).
    assert (at_1["estimate"], hat_3["estimate"]) == pytest.approx((2 / 3, 0.5))

    def ends(interval: dict[str, float], places: str) -> tuple[str, str]:
        return format(interval["low"], places), format(interval["high"], places)

    suite = ET.parse(project.path / "junit.xml").getroot().find("testsuite")
    assert suite is not None
    props = {p.get("name"): p.get("value") for p in suite.findall("properties/property")}
    assert props["eval.test_qa.pass_at_1.ci"] == "{}..{}@95%".format(*ends(at_1, ".6g"))
    assert props["eval.test_qa.pass_hat_3.ci"] == "{}..{}@95%".format(*ends(hat_3, ".6g"))

    at_1_shown, hat_3_shown = "[{}, {}]".format(*ends(at_1, ".3f")), "[{}, {}]".format(*ends(hat_3, ".3f"))
    markdown = step_summary.read_text(encoding="utf-8")
    assert "| k | pass@k | 95% interval | pass^k | 95% interval |" in markdown
    assert f"| 1 | 0.667 | {at_1_shown} | 0.667 |" in markdown
    assert f"| 0.500 | {hat_3_shown} |" in markdown

    html = (project.path / "report.html").read_text(encoding="utf-8")
    assert f'<tr data-k="1"><td>1</td><td>0.667</td><td class="interval">{at_1_shown}</td>' in html
    assert f'<td>0.500</td><td class="interval">{hat_3_shown}</td></tr>' in html


# --- the mode and the level, from the command line, the ini file, a resume and opik-eval gate ----


def test_the_confidence_level_and_the_mode_come_from_the_ini_file_too(project: Project) -> None:
    project.pytester.makeini(
        "[pytest]\nfilterwarnings = error\neval_gate_mode = strict\neval_confidence = 0.8\n"
    )
    project.dataset(items("a", "b", "c", "d"))
    project.eval_test(behaviour="if item['id'] == 'd': return 'wrong'")
    s = samples.sample([1.0, 1.0, 1.0, 0.0])
    low = st.lower_bound(s, 0.8)
    result = project.run("--eval", "--eval-soft", f"--eval-fail-under=equals_metric={low - 0.01:.2f}")
    assert gate_lines(result)[0].startswith(
        f"met: test_qa: fail_under equals_metric (strict): mean 0.750, lower bound {low:.3f} >= "
    )
    assert gate_lines(result)[1].startswith("  0.750 [")
    assert "one-sided 80% bounds, 4 items" in gate_lines(result)[1]
    # The command line wins over the ini file.
    normal = project.run(
        "--eval", "--eval-soft", "--eval-fail-under=equals_metric=0.5", "--eval-gate-mode=normal"
    )
    assert gate_lines(normal)[0] == "met: test_qa: fail_under equals_metric: mean 0.750 >= 0.5"


@pytest.mark.parametrize(
    ("ini", "message"),
    [
        (
            "eval_gate_mode = lenient",
            "ERROR: ini eval_gate_mode: expected one of normal, strict; got 'lenient'",
        ),
        (
            "eval_confidence = 95",
            "ERROR: ini eval_confidence: expected a confidence level from 0.5 to below 1, such as 0.95 "
            "(for 95% write 0.95); got '95'",
        ),
    ],
)
def test_a_bad_ini_setting_is_a_usage_error_that_names_it(project: Project, ini: str, message: str) -> None:
    project.pytester.makeini(f"[pytest]\nfilterwarnings = error\n{ini}\n")
    project.dataset(items("a"))
    project.eval_test()
    result = project.run("--eval")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])
    assert not project.store_path.exists()  # nothing ran


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (
            "--eval-confidence=1",
            "*--eval-confidence: expected a confidence level from 0.5 to below 1, such as 0.95; got '1'",
        ),
        (
            "--eval-gate-mode=lenient",
            "*--eval-gate-mode: invalid choice: 'lenient' (choose from *normal*strict*)",
        ),
    ],
)
def test_a_bad_option_is_a_usage_error(project: Project, option: str, message: str) -> None:
    project.dataset(items("a"))
    project.eval_test()
    result = project.run("--eval", option)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_a_resume_gates_in_the_mode_and_at_the_level_of_the_original_run(project: Project) -> None:
    project.dataset(items("a", "b", "c", "d"))
    project.eval_test(behaviour="if item['id'] == 'd': return 'wrong'")
    project.fail("c")
    project.run(
        "--eval",
        "--eval-soft",
        "--eval-fail-under=equals_metric=0.1",
        "--eval-gate-mode=strict",
        "--eval-confidence=0.9",
    )
    project.repair()
    result, report = project.run_report("--eval-resume=last")
    gate = report["experiments"][0]["gates"][0]
    assert (gate["mode"], gate["interval"]["level"], gate["interval"]["one_sided"]) == ("strict", 0.9, True)
    assert gate_lines(result)[0].startswith("met: test_qa: fail_under equals_metric (strict): mean 0.750")
    assert report["experiments"][0]["settings"]["mode"] == "strict"


def test_opik_eval_gate_takes_the_mode_and_the_level(
    project: Project, capsys: pytest.CaptureFixture[str]
) -> None:
    project.dataset(items("a", "b", "c", "d"))
    project.eval_test(behaviour="if item['id'] == 'd': return 'wrong'")
    project.run("--eval", "--eval-soft")
    store = ["--store", str(project.store_path)]
    gate = ["gate", "last", "--eval-fail-under=equals_metric=0.5"]
    assert opik_eval([*store, *gate]) == 0
    assert opik_eval([*store, *gate, "--eval-gate-mode=strict", "--eval-confidence=0.8"]) == 1
    out = capsys.readouterr().out
    assert "NOT MET: test_qa: fail_under equals_metric (strict): mean 0.750, lower bound 0." in out
    assert "one-sided 80% bounds, 4 items, borderline" in out


def last_run(project: Project) -> tuple[str, dict[str, str]]:
    """The newest run's id, and its experiments' ids by name."""
    store = LocalStore(project.store_path, create=False)
    try:
        run, experiments = store.find("last")
    finally:
        store.close()
    return run.id, {e.name: e.id for e in experiments}


def regression_verdicts(report: dict[str, Any]) -> dict[str, tuple[Any, ...]]:
    """Each experiment's regression gate: its verdict, p-values and what it was adjusted for."""
    return {
        e["name"]: (g["met"], g["p_value"], g["p_value_unadjusted"], g["family"], g["adjusted_for"])
        for e in report["experiments"]
        for g in e["gates"]
        if g["kind"] == "max_regression"
    }


def test_a_session_judged_in_part_keeps_its_whole_family(
    project: Project, capsys: pytest.CaptureFixture[str]
) -> None:
    # Five gated tests, 5 of 30 items regressed in each: p = 1/32 alone, 5/32 over the session's
    # five gates, met. Resuming one experiment by its id, resuming the run with -k, and
    # opik-eval gate on one experiment judge it within the same five, as the uninterrupted
    # session did (judged alone, p = 1/32 would fail it).
    five_gated_tests(project)
    crash = "    if (HERE / 'crash.txt').exists(): raise RuntimeError('interrupted')\n"
    source = (project.path / "test_app4.py").read_text().replace("    wrong = ", crash + "    wrong = ")
    (project.path / "test_app4.py").write_text(source)
    project.run("--eval", "--eval-soft")
    baseline, _ = last_run(project)
    wrong(project, *first(5))
    gated = ["--eval-soft", f"--eval-baseline={baseline}", "--eval-max-regression=equals_metric=0"]
    _, whole = project.run_report("--eval", *gated)
    expected = regression_verdicts(whole)["test_app4"]
    assert expected == (True, pytest.approx(5 / 32), pytest.approx(1 / 32), 5, 5)
    for resume in ("experiment", "run -k"):
        (project.path / "crash.txt").write_text("")
        assert project.run("--eval", *gated).ret == pytest.ExitCode.TESTS_FAILED  # test_app4 pending
        (project.path / "crash.txt").unlink()
        run, experiments = last_run(project)
        target = ["--eval-resume=" + experiments["test_app4"]]
        if resume == "run -k":
            target = [f"--eval-resume={run}", "-k", "test_app4"]
        result, resumed = project.run_report(*target, f"--eval-baseline={baseline}")
        assert regression_verdicts(resumed)["test_app4"] == expected, resume
        assert result.ret == pytest.ExitCode.OK
    capsys.readouterr()
    store = ["--store", str(project.store_path)]
    assert opik_eval([*store, "gate", experiments["test_app4"], f"--eval-baseline={baseline}"]) == 0
    out = capsys.readouterr().out
    assert "met: test_app4: max_regression equals_metric:" in out
    assert "p=0.156, adjusted for 5 gates)" in out
