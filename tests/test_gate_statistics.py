"""The gates decide on evidence: intervals, the paired comparison with a baseline, the normal and
strict modes, Holm over several regression gates, what a gate can detect, pass@k and pass^k;
end to end, as a user runs them."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import Project, items

from pytest_opik_eval.cli import main as opik_eval

# An app that is right on an item with the item's probability, drawn per run (APP_SEED) and per
# trial; APP_DROP makes it worse on every item.
STOCHASTIC_APP = """
import os
import random

import pytest
from pytest_opik_eval.metrics import Equals


@pytest.mark.eval(
    dataset="data.jsonl",
    metrics=[Equals()],
    scoring_key_mapping={"reference": "expected_output"},
)
def test_app(eval_item, eval_trial):
    draw = random.Random(f"{os.environ['APP_SEED']}/{eval_item['id']}/{eval_trial}").random()
    right = draw < eval_item["p"] - float(os.environ.get("APP_DROP", "0"))
    return {"output": eval_item["expected_output"] if right else "wrong"}
"""

ITEMS = 40


@pytest.fixture
def app(project: Project) -> Project:
    # 40 items, each right with its own probability, from 0.6 to 0.95.
    project.dataset(
        [
            {"id": f"item{i}", "expected_output": "yes", "p": 0.6 + 0.35 * i / (ITEMS - 1)}
            for i in range(ITEMS)
        ]
    )
    project.write("test_app.py", STOCHASTIC_APP)
    return project


def gate_lines(result: pytest.RunResult) -> list[str]:
    """The gate section: each gate's line and its indented notes."""
    lines = result.outlines
    start = next(i for i, line in enumerate(lines) if "eval gates" in line) + 1
    return [line for line in lines[start:] if line.strip() and not line.startswith("=")]


def lucky_baseline(app: Project, monkeypatch: pytest.MonkeyPatch) -> str:
    """The baseline run: seeded so that it happened to score 0.85, above the app's usual 0.78."""
    monkeypatch.setenv("APP_SEED", "base9")
    app.run("--eval", "--eval-soft")
    return app.last_experiment_id()


def regression_gate(report: dict[str, Any]) -> dict[str, Any]:
    gates: list[dict[str, Any]] = [
        g for g in report["experiments"][0]["gates"] if g["kind"] == "max_regression"
    ]
    (gate,) = gates
    return gate


def test_an_unchanged_app_passes_its_regression_gate_against_a_lucky_baseline(
    app: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The A/A study, end to end: the baseline run happened to score 0.85; four reruns of the same
    # app score 0.05 to 0.10 lower by chance. Compared on means, three of them fail a 0.05 gate.
    baseline = lucky_baseline(app, monkeypatch)
    drops = []
    for rerun in range(1, 5):
        monkeypatch.setenv("APP_SEED", f"rerun{rerun}")
        result, report = app.run_report(
            "--eval", "--eval-soft", f"--eval-baseline={baseline}", "--eval-max-regression=equals_metric=0.05"
        )
        assert result.ret == pytest.ExitCode.OK, result.outlines
        gate = regression_gate(report)
        assert gate["met"] and gate["p_value"] > 0.05
        drops.append(-gate["value"])
    assert drops == pytest.approx([0.1, 0.075, 0.05, 0.075])
    # What the last rerun printed: the drop is beyond DELTA, but not significant, and the gate
    # says how many items would tell.
    lines = gate_lines(result)
    assert lines[0].startswith(
        "met: test_app: max_regression equals_metric: mean changed by -0.075 from the baseline, "
        "beyond -0.05 but not significantly (p=0."
    )
    assert lines[1].startswith("  -0.075 [-0.2")
    assert lines[1].endswith(" 95% paired interval, 40 items, borderline")
    assert lines[2].startswith("  detects a drop of 0.") and lines[2].endswith(
        " or more with 80% power at this size and variance"
    )
    assert lines[3].startswith("  40 items cannot settle this; about ")
    assert all(len(line) <= 80 for line in lines[1:])


def test_a_real_regression_fails_the_gate_with_its_evidence(
    app: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    lucky_baseline(app, monkeypatch)
    monkeypatch.setenv("APP_SEED", "rerun1")
    monkeypatch.setenv("APP_DROP", "0.3")
    result, report = app.run_report(
        "--eval", "--eval-soft", "--eval-baseline=last-passing", "--eval-max-regression=equals_metric=0.05"
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    lines = gate_lines(result)
    assert lines[0].startswith(
        "NOT MET: test_app: max_regression equals_metric: mean dropped by 0.4"
    ) and lines[0].endswith(" from the baseline, beyond the 0.05 allowed (p<0.001)")
    gate = regression_gate(report)
    assert gate["met"] is False and gate["p_value"] < 0.001 and gate["mode"] == "normal"
    assert gate["interval"]["items"] == ITEMS and gate["interval"]["level"] == 0.95
    assert gate["interval"]["high"] < -0.05  # the whole interval is beyond DELTA
    baseline = report["experiments"][0]["baseline"]
    assert baseline["flips_p_value"] < 0.001
    assert len(baseline["regressions"]) > 10 and baseline["fixes"] == []
    change = baseline["metrics"]["equals_metric"]
    assert change["items"] == ITEMS and change["delta"] == pytest.approx(gate["value"])
    assert "    flips either way as likely (McNemar exact test): p=0.000" in result.outlines


def test_strict_mode_passes_a_regression_gate_only_when_the_data_show_no_drop_beyond_delta(
    app: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    baseline = lucky_baseline(app, monkeypatch)
    strict = [
        "--eval",
        "--eval-soft",
        f"--eval-baseline={baseline}",
        "--eval-max-regression=equals_metric=0.05",
    ]
    # The same outcomes: no item changed, which 40 items show with confidence.
    same = app.run(*strict, "--eval-gate-mode=strict")
    assert same.ret == pytest.ExitCode.OK
    assert gate_lines(same)[0] == (
        "met: test_app: max_regression equals_metric (strict): mean changed by +0.000 from the baseline; "
        "the drop is shown below 0.05 (upper bound 0.000, p<0.001)"
    )
    # A rerun that dropped by chance: the normal mode lets it pass, the strict one cannot.
    monkeypatch.setenv("APP_SEED", "rerun4")
    result = app.run(*strict, "--eval-gate-mode=strict")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    lines = gate_lines(result)
    assert lines[0].startswith(
        "NOT MET: test_app: max_regression equals_metric (strict): mean changed by -0.075 from the "
        "baseline; the drop is not shown below 0.05 (upper bound 0."
    )


def test_absolute_gates_keep_the_estimate_rule_flag_borderline_results_and_can_be_strict(
    project: Project,
) -> None:
    project.dataset(items("a", "b", "c", "d"))
    project.eval_test(behaviour="if item['id'] == 'd': return 'wrong'")
    gates = ["--eval", "--eval-soft", "--eval-fail-under=equals_metric=0.5", "--eval-min-pass-rate=0.5"]
    result, report = project.run_report(*gates)
    assert result.ret == pytest.ExitCode.OK
    assert gate_lines(result) == [
        "met: test_qa: fail_under equals_metric: mean 0.750 >= 0.5",
        "  0.750 [0.301, 0.954] 95% interval, 4 items, borderline",
        "met: test_qa: min_pass_rate: trials pass rate 0.750 >= 0.5",
        "  0.750 [0.301, 0.954] 95% interval, 4 items, borderline",
    ]
    fail_under = report["experiments"][0]["gates"][0]
    assert fail_under["borderline"] is True and fail_under["interval"] == {
        "estimate": 0.75,
        "low": pytest.approx(0.30064, abs=1e-5),  # Wilson, 3 of 4 at 95%: a textbook value
        "high": pytest.approx(0.95441, abs=1e-5),
        "level": 0.95,
        "items": 4,
        "method": "wilson",
    }

    strict = project.run(*gates, "--eval-gate-mode=strict")
    assert strict.ret == pytest.ExitCode.TESTS_FAILED
    assert gate_lines(strict)[0] == (
        "NOT MET: test_qa: fail_under equals_metric (strict): mean 0.750, lower bound 0.301 is below 0.5"
    )
    # A lower bound that clears it passes in strict mode too.
    assert (
        project.run(
            "--eval", "--eval-soft", "--eval-fail-under=equals_metric=0.3", "--eval-gate-mode=strict"
        ).ret
        == 0
    )


def test_the_confidence_level_and_the_mode_come_from_the_ini_file_too(project: Project) -> None:
    project.pytester.makeini(
        "[pytest]\nfilterwarnings = error\neval_gate_mode = strict\neval_confidence = 0.8\n"
    )
    project.dataset(items("a", "b", "c", "d"))
    project.eval_test(behaviour="if item['id'] == 'd': return 'wrong'")
    result = project.run("--eval", "--eval-soft", "--eval-fail-under=equals_metric=0.4")
    lines = gate_lines(result)
    # Wilson at 80% for 3 of 4: [0.4325, 0.9219]; at 95% the lower bound would be 0.301.
    assert lines == [
        "met: test_qa: fail_under equals_metric (strict): mean 0.750, lower bound 0.433 >= 0.4",
        "  0.750 [0.433, 0.922] 80% interval, 4 items",
    ]
    # The command line wins over the ini file.
    normal = project.run(
        "--eval", "--eval-soft", "--eval-fail-under=equals_metric=0.5", "--eval-gate-mode=normal"
    )
    assert gate_lines(normal)[0] == "met: test_qa: fail_under equals_metric: mean 0.750 >= 0.5"
    assert gate_lines(normal)[1] == "  0.750 [0.433, 0.922] 80% interval, 4 items, borderline"


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
        "--eval-fail-under=equals_metric=0.3",
        "--eval-gate-mode=strict",
        "--eval-confidence=0.9",
    )
    project.repair()
    result, report = project.run_report("--eval-resume=last")
    gate = report["experiments"][0]["gates"][0]
    assert (gate["mode"], gate["interval"]["level"]) == ("strict", 0.9)
    assert gate_lines(result)[0].startswith("met: test_qa: fail_under equals_metric (strict): mean 0.750")
    assert report["experiments"][0]["settings"]["mode"] == "strict"


def test_several_regression_gates_are_holm_adjusted(app: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    app.write(
        "test_app.py",
        STOCHASTIC_APP.replace("[Equals()]", "[Equals(), Contains()]").replace(
            "import Equals", "import Contains, Equals"
        ),
    )
    baseline = lucky_baseline(app, monkeypatch)
    monkeypatch.setenv("APP_SEED", "rerun1")
    result, report = app.run_report(
        "--eval",
        "--eval-soft",
        f"--eval-baseline={baseline}",
        "--eval-max-regression=equals_metric=0.05",
        "--eval-max-regression=contains_metric=0.05",
    )
    gates = [g for g in report["experiments"][0]["gates"] if g["kind"] == "max_regression"]
    assert len(gates) == 2
    assert all("p-values Holm-adjusted over the 2 regression gates" in g["notes"] for g in gates)
    # The two metrics score alike here: Holm doubles the smaller p-value, and the larger is at
    # least that.
    assert gates[0]["p_value"] == gates[1]["p_value"]
    one = app.run_report(
        "--eval", "--eval-soft", f"--eval-baseline={baseline}", "--eval-max-regression=equals_metric=0.05"
    )[1]
    assert regression_gate(one)["p_value"] * 2 == pytest.approx(gates[0]["p_value"])
    assert "  p-values Holm-adjusted over the 2 regression gates" in result.outlines


def test_multi_trial_items_report_pass_at_k_and_pass_hat_k(project: Project) -> None:
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
    assert summary["item_pass_rate"]["estimate"] == 1.0 and summary["item_pass_rate"]["items"] == 2
    result.stdout.fnmatch_lines(
        [
            "    item pass rate 1.000 [0.342, 1.000] 95%, 2 item(s)",
            "    pass@1 0.667  pass@3 1.000  pass^3 0.500",
        ]
    )
    # Once: the items gate (pass_threshold) does not repeat them in its notes.
    assert sum("pass@3" in line for line in result.outlines) == 1


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
    assert "] 80% interval, 4 items, borderline" in out


def test_every_aggregate_in_the_report_carries_its_interval(project: Project) -> None:
    project.dataset(items("a", "b", "c"))
    project.eval_test(
        marker="trial_count=2,", behaviour="if item['id'] == 'c' and trial == 1: return 'wrong'"
    )
    _, report = project.run_report("--eval", "--eval-soft")
    summary = report["experiments"][0]["summary"]
    mean = summary["metrics"]["equals_metric"]["interval"]
    # 3 items of 2 trials: 3 observations, not 6; a 0/1 metric's mean is a pass rate.
    assert (mean["estimate"], mean["items"], mean["level"]) == (pytest.approx(5 / 6), 3, 0.95)
    assert 0 < mean["low"] < 5 / 6 < mean["high"] <= 1
    assert (
        summary["pass_rate_interval"]["items"] == 3 and summary["pass_rate_interval"]["method"] == "bootstrap"
    )
