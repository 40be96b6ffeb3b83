"""The cost and latency gates (--eval-max-cost, --eval-max-latency, the marker's max_cost and
max_latency), a gate on a figure that was not measured, and the cost, token and latency changes
against a baseline. The app reports its LLM calls' usage and cost through the Opik SDK; each
item's cost is in the dataset, scaled by ``scale.txt`` (to make a second run cost more)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

import pytest
from conftest import Project, offline_opik

from pytest_opik_eval.cli import main as opik_eval

APP = """
import pathlib
import time

import opik
from opik import opik_context

HERE = pathlib.Path(__file__).parent


@opik.track(type="llm")
def llm(prompt, cost, tokens, model):
    opik_context.update_current_span(
        model=model,
        provider="openai",
        usage={"prompt_tokens": tokens, "completion_tokens": 0, "total_tokens": tokens},
        **({} if cost is None else {"total_cost": cost}),
    )
    return prompt


@opik.track
def agent(item):
    scale_file = HERE / "scale.txt"
    scale = float(scale_file.read_text()) if scale_file.exists() else 1.0
    time.sleep(item.get("sleep", 0) * scale)
    cost = item.get("cost")
    llm(item["id"], None if cost is None else cost * scale, int(10 * scale), item.get("model", "gpt-4o-mini"))
"""

# The three items cost $0.001, $0.002 and $0.004 per trial: $0.007 a run.
COSTS = {"a": 0.001, "b": 0.002, "c": 0.004}


def rows(**extra: Any) -> list[dict[str, Any]]:
    return [
        {"id": item, "input": {"text": item}, "expected_output": item, "cost": cost, **extra}
        for item, cost in COSTS.items()
    ]


@pytest.fixture
def app(project: Project, monkeypatch: pytest.MonkeyPatch) -> Project:
    offline_opik(project, monkeypatch)
    project.dataset(rows())
    project.write("app.py", APP)
    project.eval_test(imports="from app import agent", behaviour="agent(item)")
    return project


def gates(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    (experiment,) = report["experiments"]
    return {gate["kind"]: gate for gate in experiment["gates"]}


def test_a_cost_gate_per_item_passes_and_fails_naming_the_worst_items(app: Project) -> None:
    result, report = app.run_report("--eval", "--eval-max-cost=0.005")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [
            "met: test_qa: max_cost_per_item: the most expensive item cost $0.004 per trial <= $0.005 "
            "(the app's spans)",
            "  most expensive: c $0.004, b $0.002, a $0.001",
        ]
    )
    gate = gates(report)["max_cost_per_item"]
    assert (gate["met"], gate["value"], gate["bound"]) == (True, pytest.approx(0.004), 0.005)
    # A figure against its bound: no test, so no p-value, and nothing one-sided about it.
    assert (gate["one_sided"], gate["p_value"], gate["interval"]) == (False, None, None)
    assert report["experiments"][0]["settings"]["max_cost_per_item"] == 0.005

    result, report = app.run_report("--eval", "--eval-max-cost=0.0015/item")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "NOT MET: test_qa: max_cost_per_item: 2 of 3 items cost more than $0.0015 per trial "
            "(the app's spans, mean over an item's trials), the most $0.004",
            "  most expensive: c $0.004, b $0.002, a $0.001",
            "*1 eval gate not met*",
        ]
    )
    assert gates(report)["max_cost_per_item"]["met"] is False


def test_a_cost_gate_per_run_counts_the_judges_too(app: Project) -> None:
    # The app spends $0.007 and an LLM judge $0.0005 a trial: $0.0085 in all.
    app.write(
        "judge.py",
        """
        import opik
        from opik import opik_context
        from pytest_opik_eval.metrics import BaseMetric, ScoreResult


        @opik.track(type="llm")
        def judge_llm(text):
            opik_context.update_current_span(
                usage={"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}, total_cost=0.0005
            )
            return 1.0


        class Judge(BaseMetric):
            def score(self, output):
                return ScoreResult(name=self.name, value=judge_llm(output))
        """,
    )
    app.eval_test(
        imports="from app import agent\nfrom judge import Judge",
        behaviour="agent(item)",
        metrics="[Equals(), Judge('judge')]",
    )
    result = app.run("--eval", "--eval-max-cost=0.009/run", "--eval-max-cost=0.01/item")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [
            "met: test_qa: max_cost_per_item: *",
            "met: test_qa: max_cost_per_run: spent $0.0085 (app $0.007, judges $0.0015) <= $0.009",
        ]
    )
    result = app.run("--eval", "--eval-max-cost=0.008/run")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        ["NOT MET: test_qa: max_cost_per_run: spent $0.0085 (app $0.007, judges $0.0015) is above $0.008"]
    )


def test_the_marker_sets_the_gates_and_wins_over_the_command_line(app: Project) -> None:
    app.eval_test(
        "max_cost=['0.005/item', '1/run'], max_latency='30s@p50',",
        imports="from app import agent",
        behaviour="agent(item)",
    )
    result, report = app.run_report("--eval", "--eval-max-cost=0.001/item", "--eval-max-latency=0")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [
            "met: test_qa: max_cost_per_item: * <= $0.005 *",
            "met: test_qa: max_cost_per_run: spent $0.007 (app $0.007) <= $1.00",
            "met: test_qa: max_latency p50: p50 task latency * <= 30.0 s, over 3 trial(s)",
        ]
    )
    settings = report["experiments"][0]["settings"]
    assert settings["max_latency"] == {"seconds": 30.0, "percentile": 50.0}


def test_a_latency_gate_on_the_task_latency_percentile(app: Project) -> None:
    # Every task sleeps 0.2 s: its latency is at least that, and far below 60 s.
    app.dataset(rows(sleep=0.2))
    result, report = app.run_report("--eval", "--eval-max-latency=60")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        ["met: test_qa: max_latency p95: p95 task latency * <= 60.0 s, over 3 trial(s)"]
    )
    gate = gates(report)["max_latency"]
    assert gate["metric"] == "p95"
    assert gate["value"] >= 0.2
    assert gate["bound"] == 60

    result, report = app.run_report("--eval", "--eval-max-latency=150ms@p99")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "NOT MET: test_qa: max_latency p99: p99 task latency * is above 150 ms, over 3 trial(s)",
            "  slowest: *#0 *, *#0 *, *#0 *",
        ]
    )
    assert gates(report)["max_latency"]["value"] >= 0.2


def test_the_ini_file_sets_the_gates(app: Project) -> None:
    app.write(
        "pytest.ini",
        """
        [pytest]
        filterwarnings = error
        eval_max_cost = 0.001/item 5/run
        eval_max_latency = 60@p50
        """,
    )
    result = app.run("--eval")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "NOT MET: test_qa: max_cost_per_item: 2 of 3 items cost more than $0.001 *",
            "met: test_qa: max_cost_per_run: *",
            "met: test_qa: max_latency p50: *",
        ]
    )


def test_a_gate_on_a_cost_that_was_not_measured_fails_and_says_how_to_measure_it(project: Project) -> None:
    # A task that records no span: nothing reported usage or a cost.
    project.dataset(rows())
    project.eval_test()
    result = project.run("--eval", "--eval-max-cost=1", "--eval-max-cost=10/run")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "NOT MET: test_qa: max_cost_per_item: no cost was measured: no span of the app's reported usage "
            "or a cost in 3 completed trial(s); record the LLM calls with @opik.track *"
            "opik_context.update_current_span(usage=..., total_cost=...)",
            "NOT MET: test_qa: max_cost_per_run: no cost was measured: no span of any reported usage*",
        ]
    )
    # Nothing was measured: no item is named the most expensive (each would read $0).
    assert not [line for line in result.stdout.lines if "most expensive" in line]


def test_a_cost_with_unpriced_spans_is_a_floor_and_fails_the_gate(app: Project) -> None:
    # The spans have tokens and no cost, and a model no price table knows (or no table at all).
    app.dataset(rows(model="house-llm-1", cost=None))
    result = app.run("--eval", "--eval-max-cost=1", "--eval-max-cost=1/run")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "NOT MET: test_qa: max_cost_per_item: the most expensive item cost $0.00 per trial <= $1.00 "
            "(the app's spans); 3 span(s) have tokens and no price, so the cost is a floor and cannot "
            "pass: * (3); *",
            "NOT MET: test_qa: max_cost_per_run: spent $0.00 (app $0.00) <= $1.00; 3 span(s) *",
        ]
    )
    line = next(
        line for line in result.stdout.lines if line.startswith("NOT MET: test_qa: max_cost_per_item")
    )
    assert (
        "unknown model 'house-llm-1' (3); report the span's cost (total_cost), or a model and provider"
        in line
        or "no price table" in line
        and "pip install 'pytest-opik-eval[cost]'" in line
    ), line


def test_a_judge_span_without_a_price_keeps_the_run_cost_gate_from_passing(app: Project) -> None:
    # The app's spans carry their cost; the judge's has tokens and a model no price table knows:
    # the run's spend is a floor, whatever the app's spans say.
    app.write(
        "judge.py",
        """
        import opik
        from opik import opik_context
        from pytest_opik_eval.metrics import BaseMetric, ScoreResult


        @opik.track(type="llm")
        def judge_llm(text):
            opik_context.update_current_span(
                model="house-judge-1",
                provider="openai",
                usage={"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
            )
            return 1.0


        class Judge(BaseMetric):
            def score(self, output):
                return ScoreResult(name=self.name, value=judge_llm(output))
        """,
    )
    app.eval_test(
        imports="from app import agent\nfrom judge import Judge",
        behaviour="agent(item)",
        metrics="[Equals(), Judge('judge')]",
    )
    result = app.run("--eval", "--eval-max-cost=1/run")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "NOT MET: test_qa: max_cost_per_run: spent $0.007 (app $0.007, judges $0.00) <= $1.00; "
            "3 span(s) have tokens and no price, so the cost is a floor and cannot pass: *"
        ]
    )


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (
            "--eval-max-cost=cheap",
            "expected a cost in USD as AMOUNT?/item|/run?, such as 0.01 *; got 'cheap'",
        ),
        ("--eval-max-cost=1/week", "expected a cost in USD as AMOUNT?/item|/run?*; got '1/week'"),
        ("--eval-max-cost=-1", "expected a cost in USD*; got '-1'"),
        (
            "--eval-max-latency=fast",
            "expected SECONDS?@pNN?, such as 2.5 (p95), 800ms, or 2.5@p99; got 'fast'",
        ),
        ("--eval-max-latency=2@q99", "expected SECONDS?@pNN?*; got '2@q99'"),
        ("--eval-max-latency=2@p101", "expected SECONDS?@pNN?*; got '2@p101'"),
    ],
)
def test_a_bad_option_value_names_the_option_and_the_form(
    project: Project, option: str, message: str
) -> None:
    project.dataset(rows())
    project.eval_test()
    result = project.run("--eval", option)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*argument {option.split('=')[0]}*: {message}"])


def test_a_bad_ini_value_or_marker_argument_says_where(project: Project) -> None:
    project.dataset(rows())
    project.eval_test()
    project.write("pytest.ini", "[pytest]\neval_max_latency = soon\n")
    result = project.run("--eval")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*ini eval_max_latency: expected SECONDS?@pNN?*; got 'soon'"])
    project.write("pytest.ini", "[pytest]\neval_max_cost = 1/week\n")
    result = project.run("--eval")
    result.stderr.fnmatch_lines(["*ini eval_max_cost: expected a cost in USD*; got '1/week'"])
    project.write("pytest.ini", "[pytest]\n")
    project.eval_test("max_cost='lots',")
    result = project.run("--eval")
    result.stdout.fnmatch_lines(
        ["*@pytest.mark.eval on test_eval.py::test_qa*: max_cost: expected a cost in USD*"]
    )


def test_a_resume_gates_with_the_stored_cost_and_latency_gates(app: Project) -> None:
    app.fail("b")
    result = app.run("--eval", "--eval-max-cost=0.003/item", "--eval-max-latency=60")
    result.assert_outcomes(passed=2, failed=1)
    app.repair()
    # No gate option: the resume judges with those stored with the experiment, over all trials.
    result, report = app.run_report("--eval-resume=last")
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "NOT MET: test_qa: max_cost_per_item: 1 of 3 items cost more than $0.003 per trial *",
            "met: test_qa: max_latency p95: *",
        ]
    )
    # Its own command line wins.
    result = app.run("--eval-resume=last", "--eval-max-cost=0.01/item")
    result.stdout.fnmatch_lines(["met: test_qa: max_cost_per_item: * <= $0.01 *"])


def test_cost_tokens_and_latency_changes_against_the_baseline(
    app: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    app.dataset(rows(sleep=0.01))
    app.run("--eval").assert_outcomes(passed=3)
    baseline = app.last_experiment_id()
    # 50 times the cost and tokens, and the tasks sleep 0.5 s: slower whatever the machine's noise.
    (app.path / "scale.txt").write_text("50")
    summary = app.path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    html = app.path / "report.html"
    result, report = app.run_report(
        "--eval", f"--eval-baseline={baseline}", f"--eval-html={html}", "--junitxml=junit.xml"
    )
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [
            "  baseline test_qa (experiment *):",
            "    equals_metric *",
            "    cost per item            $0.00233 -> $0.117 (+$0.114, +4900%, worse)",
            "    tokens per item              10 -> 500 (+490, +4900%, worse)",
            "    latency p50 * -> * (+*, +*%, worse)",
            "    latency p95 * -> * (+*, +*%, worse)",
            "    regressions (0): none",
        ]
    )
    figures = report["experiments"][0]["baseline"]["figures"]
    assert list(figures) == ["cost_per_item", "tokens_per_item", "latency_p50", "latency_p95"]
    cost = figures["cost_per_item"]
    assert cost["baseline"] == pytest.approx(0.007 / 3)
    assert cost["current"] == pytest.approx(50 * 0.007 / 3)
    assert cost["delta"] == pytest.approx(49 * 0.007 / 3)
    assert cost["relative"] == pytest.approx(49)
    assert cost["unpriced"] == 0
    assert figures["tokens_per_item"] == {
        "baseline": 10.0,
        "current": 500.0,
        "delta": 490.0,
        "relative": 49.0,
        "unpriced": 0,
    }
    assert figures["latency_p95"]["current"] >= 0.5 > figures["latency_p95"]["baseline"]
    markdown = summary.read_text()
    assert "| cost per item | $0.00233 | $0.117 | +$0.114 | +4900%, worse ⚠️ |" in markdown, markdown
    assert "| tokens per item | 10 | 500 | +490 | +4900%, worse ⚠️ |" in markdown
    page = html.read_text()
    assert '<tr data-figure="cost_per_item"><td>cost per item</td><td>$0.00233</td><td>$0.117</td>' in page
    assert '<td class="bad">+$0.114 (+4900%, worse)</td>' in page
    suite = ET.parse(app.path / "junit.xml").getroot().find("testsuite")
    assert suite is not None
    properties = {p.get("name"): p.get("value") for p in suite.iter("property")}
    # 49 * 0.007 / 3, to six digits for a machine to read (the summary shows $0.114)
    assert properties["eval.test_qa.baseline.cost_per_item.delta"] == "0.114333"
    assert properties["eval.test_qa.baseline.tokens_per_item.delta"] == "490"
    # Cheaper than the expensive run: the change reads "better".
    expensive = app.last_experiment_id()
    (app.path / "scale.txt").write_text("1")
    result = app.run("--eval", f"--eval-baseline={expensive}")
    result.stdout.fnmatch_lines(["    cost per item            $0.117 -> $0.00233 (-$0.114, -98%, better)"])


def test_opik_eval_gate_takes_the_cost_and_latency_gates(
    app: Project, capsys: pytest.CaptureFixture[str]
) -> None:
    app.run("--eval").assert_outcomes(passed=3)
    capsys.readouterr()
    store = ["--store", str(app.store_path)]
    assert opik_eval([*store, "gate", "last", "--eval-max-cost=0.01", "--eval-max-latency=60"]) == 0
    assert opik_eval([*store, "gate", "last", "--eval-max-cost=0.005/run"]) == 1
    out = capsys.readouterr().out
    assert "NOT MET: test_qa: max_cost_per_run: spent $0.007 (app $0.007) is above $0.005" in out, out


def test_small_costs_show_the_digits_that_tell_them_apart(
    app: Project, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Costs of a cheap model: a cost per item of $0.000243, then 26% less. Four decimals wrote
    # "$0.0002 -> $0.0002 (-$0.0001, -26%, better)", a judge span of $0.000081 as "$0.0001",
    # and a gate "1 of 3 items cost more than $0.0003 ..., the most $0.0003".
    cheap = {"a": 0.000081, "b": 0.000243, "c": 0.000405}
    app.dataset([{**row, "cost": cheap[row["id"]]} for row in rows()])
    app.run("--eval").assert_outcomes(passed=3)
    baseline = app.last_experiment_id()
    (app.path / "scale.txt").write_text("0.74")
    summary = app.path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    html = app.path / "report.html"
    result = app.run(
        "--eval",
        f"--eval-baseline={baseline}",
        f"--eval-html={html}",
        "--junitxml=junit.xml",
        "--eval-max-cost=0.00029/item",
        "--eval-max-cost=0.00054/run",
    )
    result.stdout.fnmatch_lines(
        [
            "    cost per item            $0.000243 -> $0.00018 (-$0.0000632, -26%, better)",
            "NOT MET: test_qa: max_cost_per_item: 1 of 3 items cost more than $0.00029 per trial "
            "(the app's spans, mean over an item's trials), the most $0.0002997",
            "  most expensive: c $0.0002997, b $0.00018, a $0.0000599",
            "met: test_qa: max_cost_per_run: spent $0.00053946 (app $0.00053946) <= $0.00054",
        ]
    )
    assert "$0.0002 -> $0.0002" not in result.stdout.str()
    markdown = summary.read_text()
    assert "| cost per item | $0.000243 | $0.00018 | -$0.0000632 | -26%, better |" in markdown, markdown
    page = html.read_text()
    assert '<td>$0.000243</td><td>$0.00018</td><td class="ok">-$0.0000632 (-26%, better)</td>' in page
    # the trial's and the span's costs are written as the terminal writes them
    assert '"c":"$0.0000599"' in page  # 0.000081 x 0.74
    suite = ET.parse(app.path / "junit.xml").getroot().find("testsuite")
    assert suite is not None
    properties = {p.get("name"): p.get("value") for p in suite.iter("property")}
    # Six significant digits for a machine to read, never an exponent (8.1e-05).
    assert properties["eval.test_qa.baseline.cost_per_item.delta"] == "-0.00006318"
    assert properties["eval.test_qa.usage.app.cost"] == "0.00053946"
    # opik-eval show prints a trial's span tree with the same digits
    capsys.readouterr()
    opik_eval(["--store", str(app.store_path), "show", "test_eval.py::test_qa[a-t0]"])
    assert "$0.0000599" in capsys.readouterr().out


def test_figures_side_by_side_never_read_alike() -> None:
    # Written alone, a figure has a few significant digits; beside another, enough to differ.
    from pytest_opik_eval.formatting import direction, dollars, duration, figure_row, plain_number

    assert [dollars(c) for c in (12345.678, 0.5, 0.0021, 0.000081, 0, -0.25)] == [
        "$12,345.68",
        "$0.50",
        "$0.0021",
        "$0.000081",
        "$0.00",
        "-$0.25",
    ]
    assert [plain_number(v) for v in (0.000081, 2.5, 12.3456789, -0.25, 0, None)] == [
        "0.000081",  # JUnit: no exponent
        "2.5",
        "12.3457",
        "-0.25",
        "0",
        "",
    ]
    assert (dollars(4.996, against=[5]), dollars(5, against=[4.996])) == ("$4.996", "$5.00")
    assert figure_row("cost_per_item", 12.3451, 12.3459, 0.0008) == ("$12.3451", "$12.3459", "+$0.0008")
    assert direction(0.0008, 0.0008 / 12.3451) == "+0.0065%, worse"  # not "+0%"
    assert (duration(2.54, against=[2.5]), duration(2.5, against=[2.54])) == ("2.54 s", "2.5 s")
    assert figure_row("latency_p50", 0.1204, 0.1200, -0.0004) == ("120.4 ms", "120 ms", "-0.4 ms")
    assert figure_row("tokens_per_item", 10, 500, 490) == ("10", "500", "+490")


def test_a_cost_exactly_at_its_bound_meets_the_gate(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Costs exact in binary, so the run's total is exactly $0.875 and the dearest item $0.50.
    offline_opik(project, monkeypatch)
    project.dataset([{**row, "cost": cost} for row, cost in zip(rows(), (0.125, 0.25, 0.5), strict=True)])
    project.write("app.py", APP)
    project.eval_test(imports="from app import agent", behaviour="agent(item)")
    result, report = project.run_report("--eval", "--eval-max-cost=0.875/run", "--eval-max-cost=0.5/item")
    assert result.ret == pytest.ExitCode.OK
    met = gates(report)
    assert (met["max_cost_per_run"]["met"], met["max_cost_per_run"]["value"]) == (True, 0.875)
    assert (met["max_cost_per_item"]["met"], met["max_cost_per_item"]["value"]) == (True, 0.5)
    # Exactly at the bound reads as within it, not above it.
    assert met["max_cost_per_run"]["detail"] == "spent $0.875 (app $0.875) <= $0.875"


def test_a_cost_gate_names_the_five_most_expensive_items(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    offline_opik(project, monkeypatch)
    project.dataset(
        [
            {"id": f"i{n}", "input": {"text": f"i{n}"}, "expected_output": f"i{n}", "cost": n / 1000}
            for n in range(1, 8)
        ]
    )
    project.write("app.py", APP)
    project.eval_test(imports="from app import agent", behaviour="agent(item)")
    result, report = project.run_report("--eval", "--eval-max-cost=1")
    assert result.ret == pytest.ExitCode.OK
    assert gates(report)["max_cost_per_item"]["notes"] == [
        "most expensive: i7 $0.007, i6 $0.006, i5 $0.005, i4 $0.004, i3 $0.003"
    ]
