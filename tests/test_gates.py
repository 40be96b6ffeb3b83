"""CI gating: aggregate gates, soft mode, k-of-n item verdicts, baselines, and the gate lines."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from conftest import Project, items

from pytest_opik_eval.cli import main as opik_eval

LEVENSHTEIN = "from pytest_opik_eval.metrics import LevenshteinRatio"


def test_passing_trials_can_fail_a_mean_gate(project: Project) -> None:
    project.dataset(items("paris", "rome"))
    project.eval_test(
        metrics="[LevenshteinRatio()]", imports=LEVENSHTEIN, behaviour="return item['id'] + 's'"
    )
    result = project.run("--eval", "--eval-fail-under=levenshtein_ratio_metric=0.95")
    result.assert_outcomes(passed=2)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "*= eval gates =*",
            "NOT MET: test_qa: fail_under levenshtein_ratio_metric: mean 0.899 is below 0.95",
        ]
    )


def test_a_met_gate_prints_a_line_and_keeps_the_exit_code(project: Project) -> None:
    project.dataset(items("paris", "rome"))
    project.eval_test("fail_under={'equals_metric': 1.0}, min_pass_rate=1.0,")
    result = project.run("--eval")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [
            "met: test_qa: fail_under equals_metric: mean 1.000 >= 1",
            "met: test_qa: min_pass_rate: trials pass rate 1.000 >= 1",
        ]
    )


def test_without_gates_exit_codes_are_pytests(project: Project) -> None:
    project.dataset(items("a"))
    project.eval_test()
    result = project.run("--eval")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.no_fnmatch_line("*eval gates*")


def test_the_marker_gate_wins_over_the_command_line_for_its_test(project: Project) -> None:
    project.dataset(items("a", "b", "c", "d"))
    project.eval_test("fail_under={'equals_metric': 0.5},", behaviour="if item['id'] == 'd': return 'x'")
    result = project.run("--eval", "--eval-soft", "--eval-fail-under=equals_metric=0.9")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["met: test_qa: fail_under equals_metric: mean 0.750 >= 0.5"])


def test_soft_mode_trials_missing_thresholds_do_not_fail_the_session(project: Project) -> None:
    project.dataset(items("a", "b", "c", "d"))
    project.eval_test(behaviour="if item['id'] == 'd': return 'wrong'")
    result = project.run("--eval", "--eval-soft", "--eval-min-pass-rate=0.75", "-v")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [
            "*test_qa?d-t0? SOFT-FAILED*",
            "*soft-failed (missed thresholds; the gates decide): test_eval.py::test_qa?d-t0?",
            "met: test_qa: min_pass_rate: trials pass rate 0.750 >= 0.75",
            "*3 passed, 1 soft-failed*",
        ]
    )
    # The progress line shows it with a letter of its own.
    result = project.run("--eval", "--eval-soft", "--eval-min-pass-rate=0.9")
    result.stdout.fnmatch_lines(["test_eval.py ...f*"])
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_soft_mode_still_fails_a_task_that_raises(project: Project) -> None:
    project.dataset(items("a", "b"))
    project.eval_test()
    project.fail("b")
    result = project.run("--eval", "--eval-soft", "--eval-min-pass-rate=0.1")
    result.assert_outcomes(passed=1, failed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_soft_mode_without_a_gate_says_it_can_never_fail(project: Project) -> None:
    project.dataset(items("a"))
    project.eval_test(behaviour="return 'wrong'")
    result = project.run("--eval", "--eval-soft")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [
            "*eval notices*",
            "soft mode with no gate: scores can never fail this session "
            "(test_eval.py::test_qa (test_eval.py:*))*",
        ]
    )


@pytest.mark.parametrize(
    "option",
    [
        "--eval-fail-under=equals_metric=80",
        "--eval-fail-under=equals_metric=-0.5",
        "--eval-max-regression=equals_metric=5",
    ],
)
def test_a_bound_outside_the_range_of_scores_is_a_usage_error(project: Project, option: str) -> None:
    project.dataset(items("a"))
    project.eval_test()
    result = project.run("--eval", option)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*the bound must be a score from 0 to 1*; got *"])
    assert project.calls() == []


def test_a_percentage_bound_suggests_the_share(project: Project) -> None:
    project.dataset(items("a"))
    project.eval_test()
    result = project.run("--eval", "--eval-fail-under=equals_metric=80")
    result.stderr.fnmatch_lines(["*(for 80% write equals_metric=0.8); got 'equals_metric=80'"])
    project.pytester.makeini("[pytest]\nfilterwarnings = error\neval_fail_under = equals_metric=90\n")
    result = project.run("--eval")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*ini eval_fail_under: *(for 90% write equals_metric=0.9)*"])
    project.pytester.makeini("[pytest]\nfilterwarnings = error\n")
    project.eval_test("fail_under={'equals_metric': 75},")
    result = project.run("--eval")
    result.stdout.fnmatch_lines(
        [
            "*@pytest.mark.eval on *: fail_under?'equals_metric'? must be a score from 0 to 1 (for 75% write 0.75), got 75"
        ]
    )


def test_a_gate_on_an_unknown_metric_lists_the_experiments_scores(project: Project) -> None:
    project.dataset(items("a"))
    project.eval_test(
        metrics="[Equals(), LevenshteinRatio()]",
        imports=LEVENSHTEIN,
        marker="fail_under={'equal_metric': 0.5},",
    )
    result = project.run("--eval")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "NOT MET: test_qa: fail_under equal_metric: no completed trial has a equal_metric score "
            "(bound 0.5); the experiment has no metric named 'equal_metric', its scores are: "
            "equals_metric, levenshtein_ratio_metric",
        ]
    )
    # A known metric without a score yet is not called unknown.
    project.eval_test(metrics="[Equals(), LevenshteinRatio()]", imports=LEVENSHTEIN)
    project.fail("a")
    result = project.run("--eval", "--eval-fail-under=equals_metric=0.5")
    result.stdout.fnmatch_lines(
        [
            "NOT MET: test_qa: fail_under equals_metric: no completed trial has a equals_metric score (bound 0.5); 1 trial(s) pending*"
        ]
    )
    result.stdout.no_fnmatch_line("*has no metric named*")
    # Nor is a pass rate of no completed trial met.
    result, report = project.run_report("--eval", "--eval-min-pass-rate=0.5")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["NOT MET: test_qa: min_pass_rate: no completed trials (bound 0.5)*"])
    [gate] = report["experiments"][0]["gates"]
    assert (gate["kind"], gate["met"], gate["value"]) == ("min_pass_rate", False, None)


def test_failed_scores_count_against_a_gate(project: Project) -> None:
    project.dataset(items("a", "b"))
    project.eval_test(
        "fail_under={'boom': 0.0},",
        metrics="[Boom()]",
        imports="""
from pytest_opik_eval.metrics import BaseMetric, ScoreResult
class Boom(BaseMetric):
    def __init__(self):
        super().__init__(name="boom")
    def score(self, output, **ignored):
        if output == "b":
            raise ValueError("cannot score b")
        return ScoreResult(name="boom", value=1.0)
""",
    )
    result = project.run("--eval", "--eval-soft")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "NOT MET: test_qa: fail_under boom: mean 1.000 >= 0; 1 score(s) failed to compute, which fails the gate"
        ]
    )


def gate_lines(result: pytest.RunResult) -> list[str]:
    return [line for line in result.outlines if line.startswith(("met:", "NOT MET:"))]


def test_a_crash_then_resume_gates_like_an_uninterrupted_run(project: Project) -> None:
    project.dataset(items("a", "b", "c", "d"))
    project.eval_test(behaviour="if item['id'] == 'd': return 'wrong'")
    options = ["--eval-soft", "--eval-fail-under=equals_metric=0.7", "--eval-min-pass-rate=0.7"]
    project.fail("c")
    result = project.run("--eval", *options)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "NOT MET: test_qa: fail_under equals_metric: mean 0.667 is below 0.7; 1 trial(s) pending: pytest --eval-resume=*"
        ]
    )

    project.repair()
    resumed = project.run("--eval-resume=last")  # the gates stored with the experiment apply
    uninterrupted = project.run("--eval", *options)
    assert (
        gate_lines(resumed)
        == gate_lines(uninterrupted)
        == [
            "met: test_qa: fail_under equals_metric: mean 0.750 >= 0.7",
            "met: test_qa: min_pass_rate: trials pass rate 0.750 >= 0.7",
        ]
    )
    assert resumed.ret == uninterrupted.ret == pytest.ExitCode.OK


def test_a_resume_can_gate_with_new_command_line_options(project: Project) -> None:
    project.dataset(items("a", "b"))
    project.eval_test(behaviour="if item['id'] == 'b': return 'wrong'")
    project.fail("a")
    project.run("--eval", "--eval-soft", "--eval-fail-under=equals_metric=0.4")
    project.repair()
    result = project.run("--eval-resume=last", "--eval-fail-under=equals_metric=0.6")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert gate_lines(result) == ["NOT MET: test_qa: fail_under equals_metric: mean 0.500 is below 0.6"]


def test_k_of_n_item_verdicts(project: Project) -> None:
    project.dataset(items("steady", "flaky", "broken"))
    project.eval_test(
        "trial_count=3, pass_threshold=2, min_pass_rate=0.6,",
        behaviour="if (item['id'], trial) in {('flaky', 0), ('broken', 0), ('broken', 2)}: return 'wrong'",
    )
    result, report = project.run_report("--eval", "-v")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=6)
    result.stdout.fnmatch_lines(
        [
            "*test_qa?flaky-t0? SOFT-FAILED*",
            "  items: 2 of 3 passed (2 of 3 trials each)",
            "    item broken failed: 1 of 3 trials passed",
            "met: test_qa: min_pass_rate: items pass rate 0.667 >= 0.6",
            "NOT MET: test_qa: items: 2 of 3 items passed at least 2 of their trials",
        ]
    )
    verdicts = {i["dataset_item_id"]: i["verdict"] for i in report["experiments"][0]["items"]}
    assert verdicts == {"steady": "passed", "flaky": "passed", "broken": "failed"}


def test_baseline_regressions_and_fixes(project: Project) -> None:
    project.dataset(items("a", "b", "c"))
    test = project.eval_test(behaviour="if item['id'] == 'c': return 'wrong'")
    first = project.run("--eval", "--eval-soft", "--eval-min-pass-rate=0.5", "--eval-baseline=last-passing")
    first.stdout.fnmatch_lines(
        [
            "  baseline: no earlier experiment of test_eval.py::test_qa that planned every trial of its"
            " 3 selected item(s) met its gates with nothing pending; comparison skipped"
        ]
    )
    assert first.ret == pytest.ExitCode.OK  # a first run is not blocked
    baseline_id = project.last_experiment_id()

    test.write_text(test.read_text().replace("item['id'] == 'c'", "item['id'] == 'b'"))
    result, report = project.run_report(
        "--eval", "--eval-soft", "--eval-baseline=last-passing", "--eval-max-regression=equals_metric=0.1"
    )
    result.stdout.fnmatch_lines(
        [
            f"  baseline test_qa (experiment {baseline_id}):",
            "    equals_metric             0.667 ->  0.667 (+0.000)",
            "    regressions (1): b",
            "    fixes (1): c",
            "met: test_qa: max_regression equals_metric: mean changed by +0.000 from the baseline (at most -0.1 allowed)",
        ]
    )
    baseline = report["experiments"][0]["baseline"]
    assert (baseline["experiment_id"], baseline["regressions"], baseline["fixes"]) == (
        baseline_id,
        ["b"],
        ["c"],
    )

    # One more item fails: a drop of 0.333 beyond the 0.1 allowed, but one item of three moved,
    # which chance does half the time (p = 1/2 exactly), and the gate says so rather than failing.
    test.write_text(test.read_text().replace("item['id'] == 'b'", "item['id'] in 'bc'"))
    result, report = project.run_report(
        "--eval", "--eval-soft", f"--eval-baseline={baseline_id}", "--eval-max-regression=equals_metric=0.1"
    )
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [
            "met: test_qa: max_regression equals_metric: mean changed by -0.333 from the baseline, beyond "
            "-0.1 but not shown to be (the drop is at least -0.733, p=0.500)",
            "  -0.333 [-0.930, +0.733] one-sided 95% bounds on the change, 3 items, borderline",
            "  at 3 items x 1 trial no drop is caught with 80% power (see opik-eval plan)",
            "  about * items would catch a drop of 0.2 with 80% chance at 1 trial each",
        ]
    )
    gate = report["experiments"][0]["gates"][0]
    assert gate["p_value"] == gate["p_chance"] == 0.5
    assert gate["detectable_drop"] is None


def test_last_passing_skips_experiments_that_failed_or_left_trials_pending(project: Project) -> None:
    project.dataset(items("a", "b"))
    project.eval_test()
    project.run("--eval").assert_outcomes(passed=2)
    good = project.last_experiment_id()
    project.fail("b")
    project.run("--eval")  # pending trial: not a baseline
    result = project.run("--eval", "--eval-baseline=last-passing")
    result.stdout.fnmatch_lines([f"  baseline test_qa (experiment {good}):"])


def test_last_passing_skips_runs_that_covered_part_of_the_selection(project: Project) -> None:
    project.dataset(items("alpha", "beta", "gamma", "delta"))
    project.eval_test(behaviour="if item['id'] == 'delta': return 'wrong'")
    soft = ["--eval", "--eval-soft", "--eval-min-pass-rate=0.5"]
    project.run(*soft).assert_outcomes(passed=3)
    full = project.last_experiment_id()
    project.run(*soft, "-k", "alpha or beta").assert_outcomes(passed=2, deselected=2)  # mean 1.0
    partial = project.last_experiment_id()

    gated = [*soft, "--eval-baseline=last-passing", "--eval-max-regression=equals_metric=0.1"]
    result, report = project.run_report(*gated)
    # The -k run passed over 2 items, with a mean of 1.0: against it, the same scores (0.75 over
    # all 4) would fail the gate with no regression listed.
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [
            f"  baseline test_qa (experiment {full}):",
            "    compared over the 4 item(s) both planned",
            "    equals_metric             0.750 ->  0.750 (+0.000)",
            "    regressions (0): none",
        ]
    )
    baseline = report["experiments"][0]["baseline"]
    assert (baseline["experiment_id"], baseline["shared_items"]) == (full, 4)

    # Given explicitly, a partial baseline is compared over the items both planned.
    result, report = project.run_report(
        *soft, f"--eval-baseline={partial}", "--eval-max-regression=equals_metric=0.1"
    )
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [
            f"  baseline test_qa (experiment {partial}):",
            "    compared over the 2 item(s) both planned",
            "    only in this experiment (2): gamma, delta",
            "    equals_metric             1.000 ->  1.000 (+0.000)",
            "met: test_qa: max_regression equals_metric: mean changed by +0.000 from the baseline"
            " (at most -0.1 allowed), over the 2 item(s) both planned",
        ]
    )
    baseline = report["experiments"][0]["baseline"]
    assert (baseline["shared_items"], baseline["only_in_current"], baseline["only_in_baseline"]) == (
        2,
        ["gamma", "delta"],
        [],
    )


def test_last_passing_needs_a_run_of_every_selected_item(project: Project) -> None:
    project.dataset(items("alpha", "beta"))
    test = project.eval_test("filter='id = \"alpha\"',")
    project.run("--eval").assert_outcomes(passed=1)
    test.write_text(test.read_text().replace("filter='id = \"alpha\"',", ""))
    result = project.run("--eval", "--eval-baseline=last-passing")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [
            "  baseline: no earlier experiment of test_eval.py::test_qa that planned every trial of its"
            " 2 selected item(s) met its gates with nothing pending; comparison skipped"
        ]
    )


def test_an_unknown_baseline_is_a_usage_error_before_anything_runs(project: Project) -> None:
    project.dataset(items("a"))
    project.eval_test()
    result = project.run("--eval", "--eval-baseline=nope")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --eval-baseline=nope: no experiment or run with id 'nope'*"])
    assert project.calls() == []


def test_junit_xml_has_trial_and_suite_properties(project: Project) -> None:
    project.dataset(items("a", "b"))
    project.eval_test("fail_under={'equals_metric': 0.4},", behaviour="if item['id'] == 'b': return 'wrong'")
    result = project.run("--eval", "--eval-soft", "--junitxml=junit.xml")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.no_fnmatch_line("*Warning*")
    root = ET.parse(project.path / "junit.xml").getroot()
    suite = root.find("testsuite")
    assert suite is not None
    suite_props = {p.get("name"): p.get("value") for p in suite.findall("properties/property")}
    assert suite_props["eval.test_qa.equals_metric.mean"] == "0.5"
    assert suite_props["eval.test_qa.pending"] == "0"
    assert suite_props["eval.test_qa.gates_met"] == "true"
    # the decision first, then what it rests on (the interval)
    assert str(suite_props["eval.test_qa.gate.fail_under.equals_metric"]).startswith(
        "met: mean 0.500 >= 0.4; "
    )
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    case_props = {
        p.get("name"): p.get("value") for p in cases["test_qa[b-t0]"].findall("properties/property")
    }
    assert case_props == {"eval.equals_metric": "0.0", "eval.passed": "False"}


def test_github_step_summary(project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    summary = project.path / "step_summary.md"
    summary.write_text("# earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    project.dataset(items("a", "b"))
    project.eval_test("fail_under={'equals_metric': 0.9},")
    project.fail("b")
    project.run("--eval")
    text = summary.read_text()
    assert text.startswith("# earlier step\n")
    assert "test_qa" in text
    assert "equals_metric" in text
    assert "pytest --eval-resume=" in text


def test_html_report_is_written(project: Project) -> None:
    project.dataset(items("a", "b"))
    project.eval_test(behaviour="if item['id'] == 'b': return 'wrong'")
    project.run("--eval", "--eval-html=out/report.html")
    html = (project.path / "out" / "report.html").read_text()
    assert html.startswith("<!DOCTYPE html>") or html.lower().startswith("<!doctype html>")
    assert "test_qa" in html
    assert "http://" not in html.replace("http://www.w3.org", "")


def test_summary_fits_80_columns_with_50_metrics(project: Project) -> None:
    project.dataset(items("a"))
    project.eval_test(
        metrics="[Many()]",
        imports="""
from types import SimpleNamespace
class Many:
    name = "many"
    def score(self, output, **ignored):
        return [SimpleNamespace(name=f"a_rather_long_metric_name_number_{i}", value=i / 50, reason=None)
                for i in range(50)]
""",
        behaviour="return 'x'",
    )
    result = project.run("--eval")
    section = result.outlines[
        result.outlines.index(next(line for line in result.outlines if "eval summary" in line)) :
    ]
    rows = [line for line in section if "a_rather_long" in line]
    assert len(rows) == 50
    assert max(len(line) for line in section if not line.startswith("  experiment")) <= 80


def test_cli_show_diff_and_html(project: Project, capsys: pytest.CaptureFixture[str]) -> None:
    project.dataset(items("a", "b"))
    test = project.eval_test(
        "fail_under={'equals_metric': 0.4},", behaviour="if item['id'] == 'b': return 'wrong'"
    )
    project.run("--eval", "--eval-soft")
    first = project.last_experiment_id()
    test.write_text(test.read_text().replace("item['id'] == 'b'", "item['id'] == 'a'"))
    project.run("--eval", "--eval-soft")
    second = project.last_experiment_id()
    store = ["--store", str(project.store_path)]
    capsys.readouterr()

    assert opik_eval([*store, "show", second]) == 0
    out = capsys.readouterr().out
    assert "  metric               mean  95% interval        min    max failed   pass  gate" in out
    assert "  met: test_qa: fail_under equals_metric: mean 0.500 >= 0.4" in out

    assert opik_eval([*store, "diff", first, second]) == 0
    out = capsys.readouterr().out
    assert "    regressions (1): a" in out
    assert "    fixes (1): b" in out

    assert opik_eval([*store, "report", second, "--html", str(project.path / "r.html")]) == 0
    assert "test_qa" in (project.path / "r.html").read_text()


# -- the last line states the verdict that decides the exit status ----------------------------


def last_line(result: pytest.RunResult) -> str:
    return next(line for line in reversed(result.outlines) if line.strip())


RED = "\x1b[31m"


def test_the_last_line_states_a_failed_gate_in_red(project: Project) -> None:
    project.dataset(items("a", "b", "c"))
    project.eval_test(behaviour="if item['id'] == 'c': return 'wrong'")
    result = project.run("--eval", "--eval-soft", "--eval-fail-under=equals_metric=0.9", "--color=yes")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    line = last_line(result)
    assert line.startswith(RED), repr(line)  # the line's colour, as pytest's for a failed test
    plain = project.run("--eval", "--eval-soft", "--eval-fail-under=equals_metric=0.9")
    assert plain.ret == pytest.ExitCode.TESTS_FAILED
    plain.stdout.fnmatch_lines(["*= 2 passed, 1 soft-failed, 1 eval gate not met in *"])
    plain.assert_outcomes(passed=2)  # tools that read the line count no failed test


def test_the_last_line_states_pending_trials_that_fail_the_gates(project: Project) -> None:
    project.dataset(items("a", "b", "c"))
    project.eval_test()
    project.fail("c")
    result = project.run("--eval", "--eval-min-pass-rate=0.5", "--deselect=test_eval.py::test_qa[b-t0]")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    # The crash is a failed test; the pending trial and the gate it fails are the eval's verdict.
    assert last_line(result).startswith("=")
    assert "1 failed, 1 passed, 1 deselected, 1 eval gate not met" in last_line(result)
    assert "1 eval trial pending" in last_line(result)


def test_the_last_line_of_a_resume_states_failures_of_earlier_sessions(project: Project) -> None:
    project.dataset(items("good", "bad", "crash"))
    project.eval_test(behaviour="if item['id'] == 'bad': return 'wrong'")
    project.fail("crash")
    project.run("--eval").assert_outcomes(passed=1, failed=2)
    project.repair()

    result = project.run("--eval-resume=last", "--color=yes")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert last_line(result).startswith(RED), repr(last_line(result))
    result = project.run("--eval-resume=last")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*= 3 deselected, 1 eval trial failed earlier in *"])


def test_the_last_line_is_pytests_own_when_the_eval_verdict_passes(project: Project) -> None:
    project.dataset(items("a", "b"))
    project.eval_test()
    result = project.run("--eval", "--eval-fail-under=equals_metric=0.9", "--color=yes")
    assert result.ret == pytest.ExitCode.OK
    assert not last_line(result).startswith(RED)
    assert "eval" not in last_line(result)


def test_gate_options_replace_the_stored_gates_of_their_kind_and_add_to_a_resumes(
    project: Project, capsys: pytest.CaptureFixture[str]
) -> None:
    # Equals fails "b" ("bee" for "b"); LevenshteinRatio scores it 0.5: the two means differ.
    project.dataset(items("a", "b", "c"))
    marker = "trial_count=1,"
    metrics = "[Equals(), LevenshteinRatio()]"
    behaviour = 'if item["id"] == "b": return {"output": "bee"}'
    project.eval_test(marker, metrics=metrics, behaviour=behaviour, imports=LEVENSHTEIN)
    project.run("--eval", "--eval-soft")
    baseline = project.last_experiment_id()
    stored = [
        "--eval-fail-under=equals_metric=0.9",
        f"--eval-baseline={baseline}",
        "--eval-max-regression=equals_metric=0.05",
        "--eval-max-cost=0.000001/item",
    ]
    result = project.run("--eval", "--eval-soft", *stored)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert [line.split(":")[2] for line in gate_lines(result)] == [
        " fail_under equals_metric",
        " max_regression equals_metric",
        " max_cost_per_item",
    ]
    store = ["--store", str(project.store_path)]

    # Without options, the stored gates; with them, the given gates of each kind instead of the
    # stored ones of that kind (the other kinds stay).
    capsys.readouterr()
    assert opik_eval([*store, "gate", "last", f"--eval-baseline={baseline}"]) == 1
    assert "NOT MET: test_qa: fail_under equals_metric: mean 0.667 is below 0.9" in capsys.readouterr().out
    given = [
        "--eval-fail-under=levenshtein_ratio_metric=0.5",
        "--eval-max-regression=levenshtein_ratio_metric=0.1",
        "--eval-max-cost=5/run",
    ]
    assert opik_eval([*store, "gate", "last", f"--eval-baseline={baseline}", *given]) == 1
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith(("met:", "NOT MET:"))]
    assert [line.split(":")[2] for line in lines] == [
        " fail_under levenshtein_ratio_metric",
        " max_regression levenshtein_ratio_metric",
        " max_cost_per_run",  # not measured (no spans): fails, and says so
    ]
    assert opik_eval([*store, "gate", "last", f"--eval-baseline={baseline}", *given[:2]]) == 1
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith(("met:", "NOT MET:"))]
    assert [line.split(":")[2] for line in lines] == [
        " fail_under levenshtein_ratio_metric",
        " max_regression levenshtein_ratio_metric",
        " max_cost_per_item",  # the stored cost gate: no cost option given
    ]

    # A resume gates as the run it finishes: what its command line gives is added to the stored
    # gates (a CI's addopts are the original run's too), never dropping the marker's.
    result = project.run("--eval-resume=last", f"--eval-baseline={baseline}", *given[:2])
    assert sorted(line.split(":")[2] for line in gate_lines(result)) == [
        " fail_under equals_metric",
        " fail_under levenshtein_ratio_metric",
        " max_cost_per_item",
        " max_regression equals_metric",
        " max_regression levenshtein_ratio_metric",
    ]


@pytest.mark.parametrize("processes", [[], ["-p", "xdist", "-n", "2"]], ids=["single", "xdist"])
def test_a_soft_failed_trial_reads_the_same_in_every_report(
    project: Project,
    monkeypatch: pytest.MonkeyPatch,
    processes: list[str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    project.dataset(items("a", "b", "c", "d"))
    project.eval_test(behaviour="if item['id'] == 'd': return 'wrong'")
    summary = project.path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result, report = project.run_report(
        "--eval",
        "--eval-soft",
        "--eval-min-pass-rate=0.75",
        "--junitxml=junit.xml",
        "--eval-html=r.html",
        *processes,
    )
    assert result.ret == pytest.ExitCode.OK
    # The terminal: its own count, apart from the passed and the failed.
    result.stdout.fnmatch_lines(
        [
            "  trials: 4 planned, 4 completed (3 passed, 0 failed, 1 soft-failed), 0 pending",
            "  soft-failed (missed thresholds; the gates decide): test_eval.py::test_qa?d-t0?",
            "*3 passed, 1 soft-failed*",
        ]
    )
    # The JSON report: the same count, and the trial marked.
    (experiment,) = report["experiments"]
    counts = {key: experiment["summary"][key] for key in ("passed", "failed", "soft_failed")}
    assert counts == {"passed": 3, "failed": 0, "soft_failed": 1}
    assert [t["dataset_item_id"] for t in experiment["trials"] if t["soft_failed"]] == ["d"]
    assert [t["dataset_item_id"] for t in experiment["trials"] if t["passed"] is False] == ["d"]
    # JUnit: skipped with the reason, as pytest shows an xfail, so that a CI dashboard counts it
    # apart from the passes; the suite's counts agree.
    suite = ET.parse(project.path / "junit.xml").getroot().find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("skipped"), suite.get("failures")) == ("4", "1", "0")
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    skipped = cases["test_qa[d-t0]"].find("skipped")
    assert skipped is not None
    assert skipped.get("type") == "pytest_opik_eval.soft_failed"
    assert skipped.get("message") == (
        "soft-failed (missed thresholds; the gates decide): item d (trial 0) did not meet its thresholds:"
    )
    assert "output:   wrong" in str(skipped.text)
    assert all(cases[f"test_qa[{i}-t0]"].find("skipped") is None for i in "abc")
    # The step summary and the HTML report count it the same way.
    markdown = summary.read_text()
    assert "4 trials: 4 completed (3 passed, 0 failed, 1 soft-failed), 0 pending" in markdown, markdown
    assert "**Soft-failed (missed thresholds; the gates decide) (1):** `d#0`" in markdown
    page = (project.path / "r.html").read_text()
    assert '<span class="bad">0 failed</span>, <span class="pending soft-failed"' in page
    assert ">1 soft-failed</span>" in page
    # opik-eval show: the experiment's table and the trial itself.
    capsys.readouterr()
    store = ["--store", str(project.store_path)]
    assert opik_eval([*store, "show", "last"]) == 0
    rows = [line.split()[:4] for line in capsys.readouterr().out.splitlines()]
    assert ["d", "0", "completed", "soft-failed"] in rows
    assert ["a", "0", "completed", "passed"] in rows
    assert opik_eval([*store, "show", "test_eval.py::test_qa[d-t0]"]) == 0
    assert "  item d, trial 0: completed, soft-failed" in capsys.readouterr().out.splitlines()


@pytest.mark.parametrize(
    ("budget", "passed"),
    [
        ("$1", 2),  # item c's trials did not start: it has no verdict yet
        ("$1.25", 3),  # item c passed the one trial it needs, and its second is still pending
    ],
)
def test_the_items_gate_is_not_met_while_a_trial_is_pending(
    project: Project, budget: str, passed: int
) -> None:
    # Each trial spends $0.25: the budget stops the run before the trials of item c finished.
    project.dataset(items("a", "b", "c"))
    project.eval_test(
        "trial_count=2, pass_threshold=1,",
        imports="from pytest_opik_eval.tracing import trace",
        behaviour="with trace.span('llm', type='llm'):\n"
        "        trace.usage(model='house-llm-1', input_tokens=1, output_tokens=1, cost=0.25)",
    )
    result, report = project.run_report("--eval", f"--eval-budget={budget}")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    [gate] = [g for g in report["experiments"][0]["gates"] if g["kind"] == "items"]
    assert gate["met"] is False
    assert gate["detail"].startswith(f"{passed} of 3 items passed at least 1 of their trials; ")
    assert "trial(s) pending: pytest --eval-resume=" in gate["detail"]
