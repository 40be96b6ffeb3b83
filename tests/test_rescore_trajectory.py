"""--eval-rescore of an agent's test with trajectory metrics: each rescored trial is scored on the
tool calls its original trial made, read from the spans the original stored; the task (the agent)
is not called. The agent and its five trajectories are tests/test_trajectory.py's."""

from __future__ import annotations

import pytest
from conftest import Project
from opik_server import OpikTestServer
from test_trajectory import MANUAL, PLANS, REQUESTED, agent_project
from test_trajectory_judge import judged
from trajectories import check_five_cases, reasons

# The original run's test: the agent, scored on its answer only; each call logged to calls.log.
ORIGINAL = """
import pathlib

import pytest
from my_metrics import Answered
from app import agent

HERE = pathlib.Path(__file__).parent


@pytest.mark.eval(dataset="data.jsonl", metrics=[Answered()], thresholds={"answered": 1.0})
def test_agent(eval_item):
    with open(HERE / "calls.log", "a") as log:
        log.write(eval_item["id"] + "\\n")
    return agent(eval_item["plan"])
"""

# The metrics the rescores name with --eval-metric=my_metrics:NAME.
MY_METRICS = """
import pathlib

from pytest_opik_eval.metrics import BaseMetric, ScoreResult, StepCount, ToolNotCalled, ToolSequence


class Answered(BaseMetric):
    def __init__(self):
        super().__init__(name="answered")

    def score(self, output, **ignored):
        return ScoreResult(name=self.name, value=float(output == "refunded"))


def no_delete():
    return ToolNotCalled("delete_account")


def steps():
    return StepCount(max_tool_calls=5)


class SpanWalk(BaseMetric):
    # Reads the task span's tree as opik.evaluate gives it: the root and the tool spans under it.
    def __init__(self):
        super().__init__(name="span_walk")

    def score(self, task_span, **ignored):
        tools = [child.name for child in task_span.spans if child.type == "tool"]
        return ScoreResult(name=self.name, value=1.0, reason=f"{task_span.name} {task_span.output}: {tools}")


class StoppingSequence(ToolSequence):
    # Stops the session (Ctrl-C) at item "missing" while the stop file is there.
    def score(self, tool_calls=None, expected_tool_calls=None, **kwargs):
        if kwargs.get("id") == "missing" and pathlib.Path("stop").exists():
            raise KeyboardInterrupt
        return super().score(tool_calls, expected_tool_calls)
"""

# The rescore's metrics: those of tests/test_trajectory.py's marker, which check_five_cases checks.
TRAJECTORY = (
    "--eval-metric=ToolSequence",
    "--eval-metric=my_metrics:no_delete",
    "--eval-metric=my_metrics:steps",
)
LOOP = "9 tool calls > 5 (search x7, fetch_order x1, refund x1)"
NO_SPANS_STORED = "the spans the original trial stored, but it stored none of the app's here"
CUT = "its metrics read the calls of the original trial from the spans it stored, and the store kept"


def recorded(project: Project, style: dict[str, str] = MANUAL, *args: str) -> None:
    """A first run of the agent over the five plans, scored on its answer: every trial passes."""
    agent_project(project, style)
    project.write("test_agent.py", ORIGINAL)
    project.write("my_metrics.py", MY_METRICS)
    # The metrics module importable by pytest-xdist's workers too.
    project.pytester.makeini("[pytest]\nfilterwarnings = error\npythonpath = .\n")
    project.run("--eval", *args).assert_outcomes(passed=len(PLANS))
    assert sorted(project.calls()) == sorted(PLANS)


@pytest.mark.parametrize("xdist", [False, True], ids=["one-process", "xdist"])
def test_a_rescore_scores_the_trajectory_the_original_trial_made(project: Project, xdist: bool) -> None:
    recorded(project)
    workers = ("-p", "xdist", "-n", "2") if xdist else ()
    result, report = project.run_report(*workers, "--eval-rescore=last", *TRAJECTORY)
    assert project.calls() == []
    # The right trajectory passes; the wrong order, the missing call, the forbidden call and the
    # loop each fail with a reason that names the difference.
    check_five_cases(result, report, calls="executed", loop=LOOP, in_order=not xdist)
    assert NO_SPANS_STORED not in result.stdout.str()
    assert CUT not in result.stdout.str()


@pytest.mark.parametrize("xdist", [False, True], ids=["one-process", "xdist"])
def test_a_rescore_of_a_rescore_scores_the_calls_of_the_run_that_called_the_agent(
    project: Project, xdist: bool
) -> None:
    recorded(project)
    # The first rescore called no agent: its trials stored no span of the app.
    project.run("--eval-rescore=last", "--eval-metric=my_metrics:Answered").assert_outcomes(passed=len(PLANS))
    workers = ("-p", "xdist", "-n", "2") if xdist else ()
    result, report = project.run_report(*workers, "--eval-rescore=last", *TRAJECTORY)
    assert project.calls() == []
    check_five_cases(result, report, calls="executed", loop=LOOP, in_order=not xdist)
    assert NO_SPANS_STORED not in result.stdout.str()


# A trajectory metric that says how many attempts the store's file holds as it scores a trial.
FILE_ATTEMPTS = """
import contextlib
import sqlite3

from pytest_opik_eval.metrics import BaseMetric, ScoreResult


class FileAttempts(BaseMetric):
    def __init__(self):
        super().__init__(name="file_attempts")

    def score(self, tool_calls, **ignored):
        with contextlib.closing(sqlite3.connect("file:.opik-eval/store.db?mode=ro", uri=True)) as db:
            (count,) = db.execute("SELECT count(*) FROM attempts").fetchone()
        return ScoreResult(name=self.name, value=1.0, reason=f"{len(tool_calls)} calls, {count} in the file")
"""


def test_reading_the_original_calls_leaves_the_rescore_writes_in_its_journal(project: Project) -> None:
    recorded(project)
    project.write("file_attempts.py", FILE_ATTEMPTS)
    # The journal folded only when the session ends, not every few seconds: whatever reaches the
    # file before then was folded by a read.
    project.write(
        "conftest.py", "from pytest_opik_eval.store.local import journal\n\njournal.FOLD_SECONDS = 3600.0\n"
    )
    # In a process of its own: the journal's setting stays there.
    result, report = project.run_report(
        "--eval-rescore=last", "--eval-metric=file_attempts:FileAttempts", subprocess=True
    )
    result.assert_outcomes(passed=len(PLANS))
    # Each trial's calls were read, and the file still held the original's attempts alone: the
    # rescore's trial writes were not committed once per trial, as a fold on each read did.
    found = reasons(report)
    assert {label: found[label]["file_attempts"] for label in PLANS} == {
        label: f"{len(plan)} calls, {len(PLANS)} in the file" for label, plan in PLANS.items()
    }


def test_a_changed_expectation_is_checked_against_the_original_calls(project: Project) -> None:
    recorded(project)
    project.write(
        "my_metrics.py",
        MY_METRICS + "\n\nfrom pytest_opik_eval.metrics import ToolCalled\n\n\n"
        "def refunded():\n    return ToolCalled('refund', args={'amount': 20}, metric_name='refund_20')\n\n\n"
        "def refunded_more():\n    return ToolCalled('refund', args={'amount': 30}, metric_name='refund_30')\n",
    )
    result, report = project.run_report(
        "--eval-rescore=last", "--eval-metric=my_metrics:refunded", "--eval-metric=my_metrics:refunded_more"
    )
    assert project.calls() == []
    result.assert_outcomes(failed=len(PLANS))
    found = reasons(report)
    assert found["right"]["refund_20"] == "refund called (#3)"
    assert found["forbidden"]["refund_20"] == "refund called (#4)"
    assert found["right"]["refund_30"] == (
        'refund called 1 time(s), never with {"amount": 30}: #3 refund({"amount": 20, "id": 7})'
    )
    result.stdout.fnmatch_lines(['*refund_30 *0 < 1  refund called 1 time(s), never with {"amount": 30}*'])


def test_a_metric_reading_task_span_gets_the_original_tree(project: Project) -> None:
    recorded(project)
    result, report = project.run_report("--eval-rescore=last", "--eval-metric=my_metrics:SpanWalk")
    result.assert_outcomes(passed=len(PLANS))
    assert reasons(report)["missing"]["span_walk"] == (
        "test_agent {'output': 'refunded'}: ['search', 'refund']"
    )


def test_an_interrupted_rescore_resumes_on_the_original_calls(project: Project) -> None:
    recorded(project)
    (project.path / "stop").touch()
    # In a process of its own: pytester's in-process run would pass the Ctrl-C to this one.
    interrupted = project.run_report(
        "--eval-rescore=last", "--eval-metric=my_metrics:StoppingSequence", subprocess=True
    )[0]
    assert interrupted.ret == pytest.ExitCode.INTERRUPTED
    assert ("missing", 0) not in project.completed()
    (project.path / "stop").unlink()

    result, report = project.run_report("--eval-resume=last", "-p", "xdist", "-n", "2", subprocess=True)
    assert project.calls() == []
    result.stdout.fnmatch_lines(["eval: a rescore of run *: its pending trials score the stored outputs*"])
    assert project.completed() == {(label, 0) for label in PLANS}
    assert reasons(report)["missing"]["tool_sequence"] == (
        "exact 0.67: missing fetch_order (expected #2); got search -> refund"
    )
    assert reasons(report)["right"]["tool_sequence"] == "exact 1.00: got search -> fetch_order -> refund"


def test_an_original_that_stored_no_spans_gives_no_calls_and_says_so_once(project: Project) -> None:
    # The tools run untraced and the model's answers make no span: the original stored none.
    recorded(project, {**REQUESTED, "answer": "pass"})
    result, report = project.run_report("--eval-rescore=last", "--eval-metric=ToolSequence")
    result.assert_outcomes(failed=len(PLANS))
    assert str(reasons(report)["right"]["tool_sequence"]).startswith("exact 0.00: missing search")
    assert result.stdout.str().count(NO_SPANS_STORED) == 1
    result.stdout.fnmatch_lines(["*test_agent*: its metrics read the trial's tool calls*rescore a new run*"])


def test_a_trajectory_judge_rescored_is_found_in_the_cache_of_the_original(project: Project) -> None:
    judged(project)
    first, report = project.run_report("--eval", "--eval-judge-cache=on")
    assert report["judge_cache"]["scored"] == len(PLANS)
    result, report = project.run_report("--eval-rescore=last", "--eval-judge-cache=on")
    # Every judge score comes from the cache: the rescore sees the calls the original's judge saw.
    assert report["judge_cache"]["hits"] == len(PLANS)
    assert report["judge_cache"]["scored"] == 0
    result.assert_outcomes(passed=4, failed=1)
    assert reasons(report)["missing"]["trajectory_judge"] == "refund before fetching"


def test_with_the_opik_backend_a_rescore_scores_the_original_calls(
    project: Project, opik: OpikTestServer
) -> None:
    recorded(project)
    result, report = project.run_report("--eval-rescore=last", *TRAJECTORY)
    assert project.calls() == []
    check_five_cases(result, report, calls="executed", loop=LOOP)
    [rescore] = report["experiments"]
    assert opik.experiments[rescore["id"]]["metadata"]["rescore_of"] == rescore["rescore_of"]


# A tool whose arguments are longer than the store keeps of a span's input.
BIG_ARGUMENTS = """
import pytest
from pytest_opik_eval.metrics import ToolCalled
from pytest_opik_eval.tracing import trace


@pytest.mark.eval(dataset="data.jsonl", metrics=[ToolCalled("write", args={"path": "a.txt"})])
def test_writer(eval_item):
    with trace.span("write", type="tool", input={"path": "a.txt", "text": "x" * 30_000}) as span:
        span.output = {"ok": True}
    return "written"
"""


def test_a_rescore_says_when_the_calls_it_read_were_cut_as_they_were_stored(project: Project) -> None:
    project.dataset([{"id": "a", "input": "q"}])
    project.write("test_writer.py", BIG_ARGUMENTS)
    project.run("--eval").assert_outcomes(passed=1)
    result = project.run("--eval-rescore=last")
    # The stored span kept the arguments' JSON text, cut: the call no longer shows {"path": "a.txt"}
    # (the live run saw it whole, and passed), and the user is told why, once.
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(['*write called 1 time(s), never with {"path": "a.txt"}*'])
    assert result.stdout.str().count(CUT) == 1
    result.stdout.fnmatch_lines(
        ["*test_writer*: its metrics read the calls of the original trial*20,000 characters*"]
    )
