"""``--eval-budget``: once the trials' spans have spent the budget, no new trial starts, the rest
stay pending, and ``--eval-resume`` runs them with a fresh budget; each trial runs once."""

from __future__ import annotations

import argparse
import os
import re
import shlex
from collections import Counter
from pathlib import Path
from xml.etree import ElementTree

import pytest
from conftest import NEEDS_RECORD, Project, needs_extra, offline_opik
from fake_llm import APP as HTTPX_APP
from fake_llm import FakeLLM

from pytest_opik_eval.option_values import budget

# Each trial's LLM call reports 400 tokens and costs $0.25 (exact in binary: the sums are too).
APP = """
import opik
from opik import opik_context


@opik.track(type="llm")
def llm(prompt):
    opik_context.update_current_span(
        model="house-llm-1",
        provider="openai",
        usage={"prompt_tokens": 300, "completion_tokens": 100, "total_tokens": 400},
        total_cost=0.25,
    )
    return prompt


@opik.track(type="llm")
def judge_llm(text):
    opik_context.update_current_span(
        usage={"prompt_tokens": 80, "completion_tokens": 20, "total_tokens": 100}, total_cost=0.125
    )
    return 1.0
"""

TEST = """
import pathlib
import pytest
from app import judge_llm, llm
from pytest_opik_eval.metrics import BaseMetric, Equals, ScoreResult

HERE = pathlib.Path(__file__).parent


class Judge(BaseMetric):
    def score(self, output):
        return ScoreResult(name=self.name, value=judge_llm(output))


@pytest.mark.eval(
    dataset="data.jsonl",
    metrics={metrics},
    scoring_key_mapping={{"reference": "expected_output"}},
    {marker}
)
def test_qa(eval_item, eval_trial):
    with open(HERE / "calls.log", "a") as log:
        log.write(f"{{eval_item['id']}}#{{eval_trial}}\\n")
    return llm(eval_item["input"]["text"])
"""

LABELS = [f"q{i:03}" for i in range(100)]


def make_project(
    project: Project, monkeypatch: pytest.MonkeyPatch, *, marker: str = "", judge: bool = False
) -> None:
    if os.environ.get("PYTEST_OPIK_EVAL_BACKEND") != "opik":  # the opik fixture's server, else none
        offline_opik(project, monkeypatch)
    project.dataset([{"id": label, "input": {"text": label}, "expected_output": label} for label in LABELS])
    project.write("app.py", APP)
    metrics = "[Equals(), Judge('judge')]" if judge else "[Equals()]"
    project.write("test_eval.py", TEST.format(metrics=metrics, marker=marker))


def resume_line(result: pytest.RunResult) -> list[str]:
    """The resume command the summary printed, as arguments for pytester (without "pytest")."""
    (line,) = [line for line in result.outlines if line.startswith("resume them with a fresh budget: ")]
    args = shlex.split(line.split(": ", 1)[1])
    assert args[0] == "pytest"
    return args[1:]


def open_files() -> list[str]:
    """What this process (an in-process run's controller) holds open, by path."""
    names = []
    for fd in Path("/proc/self/fd").iterdir():
        try:
            names.append(os.readlink(fd))
        except OSError:  # the listing's own descriptor, closed by now
            continue
    return names


def assert_each_trial_ran_once(project: Project, calls: list[str], store: str | None = None) -> None:
    counts = Counter(calls)
    assert sorted(counts) == sorted(f"{label}#0" for label in LABELS), "nothing lost"
    assert set(counts.values()) == {1}, {call: n for call, n in counts.items() if n > 1}
    trials = project.trials(store_path=None if store is None else project.path / store)
    assert len(trials) == 100
    for trial in trials:
        assert trial.status == "completed", trial
        assert trial.attempts == 1, trial
        assert trial.output == {"output": trial.dataset_item_id}


def test_a_budget_stops_the_run_and_resumes_afresh_until_every_trial_ran_once(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_project(project, monkeypatch)
    result, report = project.run_report("--eval", "--eval-budget=$7.50", "-rs")
    # 30 trials at $0.25 reach $7.50: the 31st does not start.
    result.assert_outcomes(passed=30, skipped=70)
    assert result.ret == pytest.ExitCode.INTERRUPTED, "an incomplete run is not a pass"
    assert project.calls() == [f"{label}#0" for label in LABELS[:30]]
    run_id = report["run_id"]
    result.stdout.fnmatch_lines(
        [
            "eval budget: $7.50",
            "  trials: 100 planned, 30 completed (30 passed, 0 failed), 70 pending",
            "eval budget reached: spent $7.50 of $7.50 (70 trials not started)",
            f"resume them with a fresh budget: pytest --eval-resume={run_id}",
            # Each skip at the test's line: pytest folds them into one.
            "SKIPPED [[]70] test_eval.py:*: eval budget of $7.50 reached: trial not started, left pending "
            "for --eval-resume",
            "*= 30 passed, 70 skipped, 70 eval trials not started (budget) in *",
        ]
    )
    # Every span had its cost: no notice of spans counted as free.
    assert "counted them as free" not in result.stdout.str()
    assert report["budget"] == {
        "unit": "usd",
        "given": 7.5,
        "limit": 7.5,
        "spent": 7.5,
        "reached": True,
        "not_started": 70,
        "resume_command": f"pytest --eval-resume={run_id}",
    }
    pending = [t for t in project.trials() if t.status == "pending"]
    assert len(pending) == 70, "never started"
    assert all(t.attempts == 0 for t in pending), "never started"

    # The resume gets the run's budget afresh: 30 more trials.
    again = project.run(*resume_line(result))
    again.assert_outcomes(passed=30, skipped=40)
    assert again.ret == pytest.ExitCode.INTERRUPTED
    assert project.calls() == [f"{label}#0" for label in LABELS[30:60]]
    again.stdout.fnmatch_lines(["eval budget reached: spent $7.50 of $7.50 (40 trials not started)"])

    # A budget given on the resume's command line wins; this one finishes the run.
    last, last_report = project.run_report(f"--eval-resume={run_id}", "--eval-budget=20")
    last.assert_outcomes(passed=40)
    assert last.ret == pytest.ExitCode.OK
    last.stdout.fnmatch_lines(["eval budget: spent $10.00 of $20.00"])
    assert last_report["budget"]["reached"] is False
    assert last_report["budget"]["not_started"] == 0
    assert_each_trial_ran_once(project, [f"{label}#0" for label in LABELS[:60]] + project.calls())


def test_a_token_budget_counts_the_judges_tokens_too(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_project(project, monkeypatch, judge=True)
    # 400 tokens of the app and 100 of the judge per trial: 10 trials reach 5,000.
    result, report = project.run_report("--eval", "--eval-budget=5k tokens")
    result.assert_outcomes(passed=10, skipped=90)
    result.stdout.fnmatch_lines(
        ["eval budget reached: spent 5,000 tokens of 5,000 tokens (90 trials not started)"]
    )
    assert report["budget"]["unit"] == "tokens"
    assert report["budget"]["spent"] == 5000
    # In dollars the judge counts as well: $0.375 a trial, so 20 trials reach $7.50.
    project.calls()
    dollars = project.run("--eval", "--eval-budget=7.5")
    dollars.assert_outcomes(passed=20, skipped=80)


def test_threads_overshoot_by_at_most_the_trials_in_flight(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_project(project, monkeypatch, marker="task_threads=4,")
    result, report = project.run_report("--eval", "--eval-budget=7.50")
    completed = len(project.completed())
    # The 30th trial reaches the budget; at most three others were in flight then.
    assert 30 <= completed <= 33, completed
    result.assert_outcomes(passed=completed, skipped=100 - completed)
    assert report["budget"]["spent"] == completed * 0.25
    assert report["budget"]["not_started"] == 100 - completed
    calls = project.calls()
    assert len(calls) == completed, "a trial not started never ran its task"
    rest = project.run(f"--eval-resume={report['run_id']}", "--eval-budget=100")
    rest.assert_outcomes(passed=100 - completed)
    assert_each_trial_ran_once(project, calls + project.calls())


def test_xdist_workers_share_one_budget(project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    make_project(project, monkeypatch)
    result, report = project.run_report("--eval", "--eval-budget=7.50", "-p", "xdist", "-n", "2")
    completed = len(project.completed())
    # Shared, the budget stops both workers after 30 trials in all, give or take the other
    # worker's trial in flight (each alone would have run 30).
    assert 30 <= completed <= 31, completed
    result.assert_outcomes(passed=completed, skipped=100 - completed)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert report["budget"]["spent"] == completed * 0.25
    assert report["budget"]["not_started"] == 100 - completed
    result.stdout.fnmatch_lines(
        [f"eval budget reached: spent * of $7.50 ({100 - completed} trials not started)"]
    )
    assert not (project.path / ".opik-eval" / "store.db.budget").exists(), "the ledger is removed"
    assert not [name for name in open_files() if "store.db.budget" in name], "and closed by the controller"
    calls = project.calls()
    rest = project.run(f"--eval-resume={report['run_id']}", "--eval-budget=100", "-p", "xdist", "-n", "2")
    rest.assert_outcomes(passed=100 - completed)
    assert_each_trial_ran_once(project, calls + project.calls())


def test_the_opik_backend_keeps_the_runs_budget_for_the_resume(
    any_backend: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = any_backend
    make_project(project, monkeypatch)
    project.dataset(
        [{"id": label, "input": {"text": label}, "expected_output": label} for label in LABELS[:10]]
    )
    result, report = project.run_report("--eval", "--eval-budget=1")
    result.assert_outcomes(passed=4, skipped=6)
    # The resume reads the run back (from the server, with the Opik backend) with its budget.
    again = project.run(*resume_line(result))
    again.assert_outcomes(passed=4, skipped=2)
    again.stdout.fnmatch_lines(["eval budget: $1.00 (the run's, counted afresh)"])
    last, last_report = project.run_report(f"--eval-resume={report['run_id']}")
    last.assert_outcomes(passed=2)
    assert last.ret == pytest.ExitCode.OK
    assert [t["status"] for t in last_report["experiments"][0]["trials"]] == ["completed"] * 10
    calls = project.calls()
    assert sorted(calls) == sorted(f"{label}#0" for label in LABELS[:10])
    assert len(set(calls)) == 10


def test_each_ci_shard_gets_its_share_of_the_budget(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_project(project, monkeypatch)
    shard = ("--eval-run-id=ci-7", "--eval-shard=1/2", "--eval-store=shard1.db")
    result = project.run("--eval", *shard, "--eval-budget=5")
    # Its share of $5 is $2.50: 10 trials, of the share of about 50 it holds.
    outcomes = result.parseoutcomes()
    assert outcomes["passed"] == 10, outcomes
    assert 30 <= outcomes["skipped"] <= 70, outcomes
    result.stdout.fnmatch_lines(
        [
            "eval budget: $2.50 (this shard's share of $5.00)",
            "eval budget reached: spent $2.50 of $2.50 (this shard's share of $5.00) (* trials not started)",
        ]
    )
    # The shard's store planned every trial; its resume runs only this shard's, afresh.
    args = resume_line(result)
    assert "--eval-shard=1/2" in args
    assert any(arg.startswith("--eval-store=") for arg in args)
    first = project.calls()
    rest = project.run(*args, "--eval-budget=100")
    rest.assert_outcomes(passed=outcomes["skipped"])
    ran = first + project.calls()
    assert len(ran) == len(set(ran)) == 10 + outcomes["skipped"]
    trials = project.trials(store_path=project.path / "shard1.db")
    assert {f"{t.dataset_item_id}#0" for t in trials if t.status == "completed"} == set(ran)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("5", (5.0, "usd")),
        ("5.00", (5.0, "usd")),
        ("$5", (5.0, "usd")),
        (" $2.5 ", (2.5, "usd")),
        ("5usd", (5.0, "usd")),
        ("200000tokens", (200_000.0, "tokens")),
        ("200k tokens", (200_000.0, "tokens")),
        ("1.5M tokens", (1_500_000.0, "tokens")),
    ],
)
def test_the_budget_forms(given: str, expected: tuple[float, str]) -> None:
    assert budget(given) == expected


@pytest.mark.parametrize("given", ["abc", "5 euros", "5k", "tokens", "$", "-5", "nan"])
def test_a_budget_that_is_not_one_is_refused(given: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="expected an amount in US dollars"):
        budget(given)


def test_bad_budgets_name_the_option_and_the_forms(project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    make_project(project, monkeypatch)
    result = project.run("--eval", "--eval-budget=5 euros")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*argument --eval-budget: expected an amount in US dollars, such as 5, 2.50 or $5, or of tokens, "
            "such as 200000tokens or 200k tokens; got '5 euros'"
        ]
    )
    zero = project.run("--eval", "--eval-budget=0")
    assert zero.ret == pytest.ExitCode.USAGE_ERROR
    zero.stderr.fnmatch_lines(["*argument --eval-budget: the budget must be more than 0*; got '0'"])
    project.pytester.makeini("[pytest]\nfilterwarnings = error\neval_budget = lots\n")
    ini = project.run("--eval")
    assert ini.ret == pytest.ExitCode.USAGE_ERROR
    ini.stderr.fnmatch_lines(["*ini eval_budget: expected an amount in US dollars*; got 'lots'"])
    assert project.calls() == []


def test_an_ini_budget_and_a_budget_that_sees_no_spend(project: Project) -> None:
    # An app without the Opik SDK reports nothing: the budget cannot count, and says so.
    project.dataset(
        [{"id": label, "input": {"text": label}, "expected_output": label} for label in LABELS[:5]]
    )
    project.eval_test()
    project.pytester.makeini("[pytest]\nfilterwarnings = error\neval_budget = $1\n")
    result = project.pytester.runpytest_subprocess("--eval")  # this process has imported opik
    result.assert_outcomes(passed=5)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [
            "eval budget: $1.00",
            "*eval budget: the trials that ran reported no cost, so the budget of $1.00 counted nothing: "
            "it counts the usage and cost of the trials' LLM calls: those the app traces *, and the OpenAI "
            "and Anthropic calls of an uninstrumented app, read from their HTTP answers, in the tests "
            "whose metrics read tool calls (--eval-llm-spans=auto; =on counts every test's;*",
            "eval budget: spent $0.00 of $1.00",
        ]
    )


def test_the_step_summary_and_junit_carry_the_budget(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_project(project, monkeypatch)
    summary = project.path / "step-summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = project.run("--eval", "--eval-budget=$2.50", "--junitxml=junit.xml")
    result.assert_outcomes(passed=10, skipped=90)
    text = summary.read_text(encoding="utf-8")
    # First, before the experiments: a run the budget stopped is incomplete.
    assert text.startswith(
        "💰 **eval budget reached: spent $2.50 of $2.50 (90 trials not started)**\n\n"
        "Resume them with a fresh budget: `pytest --eval-resume="
    ), text
    root = ElementTree.parse(project.path / "junit.xml").getroot()
    props = {
        p.get("name"): p.get("value")
        for p in root.iter("property")
        if p.get("name", "").startswith("eval.budget")
    }
    assert props == {
        "eval.budget.unit": "usd",
        "eval.budget.limit": "2.5",
        "eval.budget.spent": "2.5",
        "eval.budget.reached": "true",
        "eval.budget.not_started": "90",
    }


# Two tests in one module: test_wide runs 8 trials at once (a barrier of 8 proves it), then
# test_narrow, task_threads=2, whose trials each cost $1 and log how many of its trials were in
# flight as each one started; each waits (up to 2 s) for 8 to be in flight, so that the pool lets
# every trial it would run at once run then.
THREADS_TEST = """
import pathlib
import threading
import pytest
from app import llm
from pytest_opik_eval.metrics import Equals

HERE = pathlib.Path(__file__).parent
BARRIER = threading.Barrier(8, timeout=10)
FLIGHT = threading.Condition()
in_flight = 0


@pytest.mark.eval(dataset="wide.jsonl", metrics=[Equals()], scoring_key_mapping={"reference": "expected_output"}, task_threads=8)
def test_wide(eval_item):
    BARRIER.wait()
    return eval_item["input"]["text"]


@pytest.mark.eval(
    dataset="data.jsonl", metrics=[Equals()], scoring_key_mapping={"reference": "expected_output"},
    task_threads=2,
)
def test_narrow(eval_item):
    global in_flight
    with FLIGHT:
        in_flight += 1
        with open(HERE / "in_flight.log", "a") as log:
            log.write(f"{in_flight}\\n")
        FLIGHT.notify_all()
        FLIGHT.wait_for(lambda: in_flight >= 8, timeout=2)
    try:
        return llm(eval_item["input"]["text"], cost=1.0)
    finally:
        with FLIGHT:
            in_flight -= 1
"""

COSTLY_APP = """
import opik
from opik import opik_context


@opik.track(type="llm")
def llm(prompt, cost):
    opik_context.update_current_span(
        model="house-llm-1", usage={"prompt_tokens": 3, "completion_tokens": 1}, total_cost=cost
    )
    return prompt
"""


def test_each_tests_task_threads_holds_and_bounds_the_budgets_overshoot(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    offline_opik(project, monkeypatch)
    project.dataset(
        [{"id": f"w{i}", "input": {"text": f"w{i}"}, "expected_output": f"w{i}"} for i in range(8)],
        name="wide.jsonl",
    )
    project.dataset(
        [{"id": label, "input": {"text": label}, "expected_output": label} for label in LABELS[:16]]
    )
    project.write("app.py", COSTLY_APP)
    project.write("test_eval.py", THREADS_TEST)
    result, report = project.run_report("--eval", "--eval-budget=3")
    in_flight = [int(n) for n in (project.path / "in_flight.log").read_text().split()]
    # The 8 threads test_wide needed are idle when test_narrow starts: 2 of them may run its trials.
    assert max(in_flight) == 2, in_flight
    # The third $1 trial reaches the budget, the other one in flight finishes: $4, never $8.
    spent = report["budget"]["spent"]
    assert 3 <= spent <= 3 + 2, spent
    assert report["budget"]["reached"] is True
    result.assert_outcomes(passed=8 + spent, skipped=16 - spent)


# The app asks the fake LLM server through plain httpx (no span); the judge asks it too, live (the
# judges' calls are not recorded), and reports the 15 tokens its answer says it used.
JUDGED_REPLAY_TEST = """
import pytest
from pytest_opik_eval.metrics import BaseMetric, ScoreResult
from pytest_opik_eval.tracing import trace
from app import ask


class Judge(BaseMetric):
    def score(self, output):
        ask("judge: " + output)
        trace.usage(model="gpt-4o-mini", input_tokens=10, output_tokens=5)
        return ScoreResult(name=self.name, value=1.0)


@pytest.mark.eval(dataset="data.jsonl", metrics=[Judge("judge")], trial_count=2)
def test_answer(eval_item):
    return ask(eval_item["input"]["question"])
"""


@NEEDS_RECORD
def test_replayed_calls_without_a_span_do_not_cancel_the_judges_live_spend(
    project: Project, llm: FakeLLM
) -> None:
    project.dataset([{"id": q, "input": {"question": q}} for q in ("capital", "colour", "planet")])
    project.write("app.py", HTTPX_APP)
    project.write("test_app.py", JUDGED_REPLAY_TEST)
    project.run("--eval", "--eval-record=new_episodes", "--eval-judge-cache=off").assert_outcomes(passed=6)
    assert llm.requests == 12

    # The app's 6 calls replay (90 tokens saved); the judges' calls are live, 15 tokens each: the
    # third trial reaches the budget.
    result, report = project.run_report(
        "--eval", "--eval-record=none", "--eval-judge-cache=off", "--eval-budget=40 tokens"
    )
    result.assert_outcomes(passed=3, skipped=3)
    result.stdout.fnmatch_lines(
        [
            "eval budget reached: spent 45 tokens of 40 tokens (3 trials not started)",
            "*",
            "eval recordings (--eval-record=none): 3 replayed, 0 recorded, 0 missed; saved 45 tokens*",
        ]
    )
    assert report["budget"]["spent"] == 45
    assert llm.requests == 12 + 3, "only the judges asked the server"


def test_the_html_report_says_the_budget_stopped_the_run(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_project(project, monkeypatch)
    html = project.path / "report.html"
    summary = project.path / "step-summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = project.run("--eval", "--eval-budget=$2.60", f"--eval-html={html}")
    result.assert_outcomes(passed=11, skipped=89)
    line = "eval budget reached: spent $2.75 of $2.60 (89 trials not started)"
    result.stdout.fnmatch_lines([line, "resume them with a fresh budget: pytest --eval-resume=*"])
    command = resume_line(result)
    # The page says it first, in the terminal's words, with the command that runs the rest: not
    # only "89 pending".
    page = html.read_text(encoding="utf-8")
    text = " ".join(re.sub(r"<[^>]+>", " ", page.split("<main>")[1].split("</main>")[0]).split())
    assert text.startswith(f"{line} Resume them with a fresh budget: pytest {shlex.join(command)}")
    assert f"**{line}**" in summary.read_text(encoding="utf-8")  # the step summary's words too

    # A budget not reached says what was spent of it.
    result = project.run(
        f"--eval-resume={command[0].split('=')[1]}", "--eval-budget=100", f"--eval-html={html}"
    )
    result.assert_outcomes(passed=89, deselected=11)
    page = html.read_text(encoding="utf-8")
    assert '<div class="budget"><p class="budget-line">eval budget: spent $22.25 of $100.00</p></div>' in page


# The app asks twice: a plain httpx call (no span), recorded once and replayed since, then a new
# question in a span of its own, which reports the 100 tokens that live call used.
MIXED_TEST = """
import pytest
from pytest_opik_eval.metrics import Equals
from pytest_opik_eval.tracing import trace
from app import ask

LIVE = LIVE_CALL


@pytest.mark.eval(
    dataset="data.jsonl", metrics=[Equals(threshold=0)], scoring_key_mapping={"reference": "expected_output"}
)
def test_answer(eval_item):
    answer = ask(eval_item["input"]["question"])
    if LIVE:
        with trace.span("live call", type="llm"):
            ask("again: " + eval_item["input"]["question"])
            trace.usage(model="gpt-4o-mini", input_tokens=90, output_tokens=10)
    return answer
"""


@NEEDS_RECORD
def test_a_replayed_call_never_takes_off_what_a_live_calls_span_spent(project: Project, llm: FakeLLM) -> None:
    project.dataset(
        [{"id": q, "input": {"question": q}, "expected_output": q} for q in ("capital", "colour", "planet")]
    )
    project.write("app.py", HTTPX_APP)
    project.write("test_app.py", MIXED_TEST.replace("LIVE_CALL", "False"))
    project.run("--eval", "--eval-record=new_episodes").assert_outcomes(passed=3)

    # The first call of each trial replays (15 tokens saved, reported by no span); the second goes
    # out and its span reports 100 tokens: paid, all of it.
    project.write("test_app.py", MIXED_TEST.replace("LIVE_CALL", "True"))
    result, report = project.run_report("--eval", "--eval-record=new_episodes", "--eval-budget=1M tokens")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["eval recordings (--eval-record=new_episodes): 3 replayed, 3 recorded*"])
    assert report["budget"]["spent"] == 300


# The app's call, in a span that reports what the answer says it used (10 + 5 tokens of
# gpt-4o-mini): replayed, the call costs nothing, in dollars as in tokens.
SPANNED_TEST = """
import pytest
from pytest_opik_eval.metrics import Equals
from pytest_opik_eval.tracing import trace
from app import ask


@pytest.mark.eval(
    dataset="data.jsonl", metrics=[Equals(threshold=0)], scoring_key_mapping={"reference": "expected_output"}
)
def test_answer(eval_item):
    with trace.span("ask", type="llm"):
        answer = ask(eval_item["input"]["question"])
        trace.usage(model="gpt-4o-mini", input_tokens=10, output_tokens=5)
    return answer
"""


@NEEDS_RECORD
@needs_extra("cost", "genai_prices")
def test_a_replayed_call_costs_nothing_of_a_dollar_budget(project: Project, llm: FakeLLM) -> None:
    # Each call saves a few millionths of a dollar: far below one of the budget's units, all of
    # it is taken off what the call's span spent.
    project.dataset(
        [{"id": q, "input": {"question": q}, "expected_output": q} for q in ("capital", "colour", "planet")]
    )
    project.write("app.py", HTTPX_APP)
    project.write("test_app.py", SPANNED_TEST)
    result, report = project.run_report("--eval", "--eval-record=new_episodes", "--eval-budget=$1")
    result.assert_outcomes(passed=3)
    spent_live = report["budget"]["spent"]
    assert 0 < spent_live < 0.001

    result, report = project.run_report("--eval", "--eval-record=none", "--eval-budget=$1")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["eval recordings (--eval-record=none): 3 replayed, 0 recorded, 0 missed*"])
    assert report["budget"]["spent"] == 0
    assert llm.requests == 3, "the replay asked nothing"


# The app's LLM span as the manual API records it, with the usage set by hand: prompt and
# completion tokens and no total, which nothing fills in on this way.
MANUAL_SPAN_APP = """
from pytest_opik_eval.tracing import trace


def llm(prompt):
    with trace.span("llm", type="llm") as span:
        span.usage = {"prompt_tokens": 300, "completion_tokens": 100}
    return prompt


def judge_llm(text):
    return 1.0
"""


@pytest.mark.parametrize("route", ["opik sdk", "manual span"])
def test_a_token_budget_adds_up_a_spans_prompt_and_completion_when_it_reports_no_total(
    project: Project, monkeypatch: pytest.MonkeyPatch, route: str
) -> None:
    # An app whose spans report prompt and completion tokens but no total (as some providers'
    # usage does): each trial's 300 + 100 tokens still count, so 5 trials reach 2,000.
    make_project(project, monkeypatch)
    if route == "opik sdk":
        project.write("app.py", APP.replace(', "total_tokens": 400', "").replace(', "total_tokens": 100', ""))
    else:
        project.write("app.py", MANUAL_SPAN_APP)
    result, report = project.run_report("--eval", "--eval-budget=2k tokens")
    result.assert_outcomes(passed=5, skipped=95)
    assert report["budget"]["spent"] == 2000


def test_a_dollar_budget_says_when_it_counted_spans_without_a_cost_as_free(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The app's spans report tokens of a model no price table knows, and no cost: a dollar budget
    # cannot count them, so every trial runs, and the run says why the budget saw no spend.
    make_project(project, monkeypatch)
    project.dataset(
        [{"id": label, "input": {"text": label}, "expected_output": label} for label in LABELS[:4]]
    )
    project.write(
        "app.py", APP.replace("total_cost=0.25,", "").replace('"house-llm-1"', '"house-llm-unpriced"')
    )
    result, report = project.run_report("--eval", "--eval-budget=$0.01")
    result.assert_outcomes(passed=4)
    assert report["budget"]["spent"] == 0
    assert result.stdout.str().count("the dollar budget counted them as free") == 1
    result.stdout.fnmatch_lines(["*some spans reported tokens but no cost*--eval-budget=200k tokens*"])


# The app's call made in a span that reports no cost itself (an agent's step); its cost is on
# the span opened after it, under it: what a replayed call saves is taken from there.
STEP_TEST = """
import pytest
from pytest_opik_eval.metrics import Equals
from pytest_opik_eval.tracing import trace
from app import ask


@pytest.mark.eval(
    dataset="data.jsonl", metrics=[Equals(threshold=0)], scoring_key_mapping={"reference": "expected_output"}
)
def test_answer(eval_item):
    with trace.span("step", type="general"):
        answer = ask(eval_item["input"]["question"])
        with trace.span("ask", type="llm"):
            trace.usage(model=MODEL, input_tokens=10, output_tokens=5, cost=COST)
    return answer
"""


@NEEDS_RECORD
@needs_extra("cost", "genai_prices")
def test_a_replayed_call_is_taken_off_the_priced_span_under_the_one_it_was_made_in(
    project: Project, llm: FakeLLM
) -> None:
    project.dataset(
        [{"id": q, "input": {"question": q}, "expected_output": q} for q in ("capital", "colour", "planet")]
    )
    project.write("app.py", HTTPX_APP)
    project.write("test_app.py", STEP_TEST.replace("MODEL", '"gpt-4o-mini"').replace("COST", "None"))
    project.run("--eval", "--eval-record=new_episodes").assert_outcomes(passed=3)

    result, report = project.run_report("--eval", "--eval-record=none", "--eval-budget=$1")
    result.assert_outcomes(passed=3)
    assert report["budget"]["spent"] == 0
    assert llm.requests == 3, "the replay asked nothing"


@NEEDS_RECORD
def test_a_replayed_call_of_an_unpriced_model_keeps_what_its_span_reports(
    project: Project, llm: FakeLLM
) -> None:
    # No price table knows the model, so what the replayed call saved is unknown: the budget
    # keeps the $0.25 its span reports rather than guess (it may stop early, never overrun).
    project.dataset(
        [{"id": q, "input": {"question": q}, "expected_output": q} for q in ("capital", "colour", "planet")]
    )
    project.write("app.py", HTTPX_APP.replace('"gpt-4o-mini"', '"house-llm-unpriced"'))
    project.write("test_app.py", STEP_TEST.replace("MODEL", '"house-llm-unpriced"').replace("COST", "0.25"))
    project.run("--eval", "--eval-record=new_episodes").assert_outcomes(passed=3)

    result, report = project.run_report("--eval", "--eval-record=none", "--eval-budget=$1")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["eval recordings (--eval-record=none): 3 replayed, 0 recorded, 0 missed*"])
    assert report["budget"]["spent"] == 0.75
