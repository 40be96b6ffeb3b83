"""The spans an app makes with the Opik SDK's ``@opik.track``, recorded with each trial in the
local store: the task span, the app's spans under it, with their usage, in the right trial
whether trials run one at a time, in threads, as coroutines or on pytest-xdist workers; and
nothing reaches a server."""

from __future__ import annotations

import sqlite3

import pytest
from conftest import Project, offline_opik

from pytest_opik_eval.store.local import LocalStore, journal
from pytest_opik_eval.store.records import SpanRecord, TrialRecord

LABELS = [f"item-{i}" for i in range(8)]

# A 3-level app: agent -> retrieve, and agent -> an LLM call that reports its usage.
APP = """
import asyncio
import opik
from opik import opik_context


@opik.track(type="llm")
def fake_llm(prompt):
    opik_context.update_current_span(
        model="gpt-4o-mini",
        provider="openai",
        usage={"prompt_tokens": len(prompt), "completion_tokens": 2, "total_tokens": len(prompt) + 2},
    )
    return prompt


@opik.track(type="tool")
def retrieve(question):
    return [question]


@opik.track
def agent(question):
    return fake_llm(retrieve(question)[0])


@opik.track
async def agent_async(question):
    docs = retrieve(question)
    # Fanned out: asyncio tasks and to_thread carry the context, so both calls nest.
    first, second = await asyncio.gather(asyncio.to_thread(fake_llm, docs[0]), asyncio.to_thread(fake_llm, docs[0]))
    return first
"""

SYNC_TEST = """
import sqlite3

import pytest
from pytest_opik_eval.metrics import Equals
from app import agent


@pytest.mark.eval(dataset="data.jsonl", metrics=[Equals()], scoring_key_mapping={"reference": "expected_output"})
def test_qa(eval_item):
    return agent(eval_item["input"]["text"])
"""

ASYNC_TEST = """
import sqlite3

import pytest
from pytest_opik_eval.metrics import Equals
from app import agent_async


@pytest.mark.eval(dataset="data.jsonl", metrics=[Equals()], scoring_key_mapping={"reference": "expected_output"})
async def test_qa(eval_item):
    return await agent_async(eval_item["input"]["text"])
"""

# The SDK's global client, made on first use to send to a server: it must never be made.
NO_CLIENT = """
import pathlib


def pytest_sessionfinish(session):
    import sys
    if "opik" in sys.modules:
        from opik.api_objects import opik_client
        made = opik_client._global_singleton is not None
    else:
        made = "opik not imported"
    with open(pathlib.Path(__file__).parent / "client.log", "a") as log:
        log.write(f"{made}\\n")
"""


@pytest.fixture
def traced(project: Project, monkeypatch: pytest.MonkeyPatch) -> Project:
    """A project whose app uses the Opik SDK, configured for a server that does not answer."""
    offline_opik(project, monkeypatch)
    project.dataset([{"id": label, "input": {"text": label}, "expected_output": label} for label in LABELS])
    project.write("app.py", APP)
    project.write("conftest.py", NO_CLIENT)
    return project


def tree(spans: list[SpanRecord]) -> list[tuple[str | None, str | None, str]]:
    """(span, parent span, type), by name."""
    names = {span.id: span.name for span in spans}
    return [
        (span.name, names.get(span.parent_span_id) if span.parent_span_id else None, span.type)
        for span in spans
    ]


def check_trial(trial: TrialRecord, *, llm_calls: int = 1) -> None:
    label = trial.dataset_item_id
    spans = trial.spans
    assert spans, f"{label}: no spans recorded"
    task = spans[0]
    assert (task.name, task.parent_span_id) == ("test_qa", None)
    assert task.input == {"eval_item": {"id": label, "input": {"text": label}, "expected_output": label}}
    # Every span belongs to this trial's trace, once.
    assert {span.trace_id for span in spans} == {task.trace_id}
    assert len({span.id for span in spans}) == len(spans)
    agent = next(span for span in spans if span.name in ("agent", "agent_async"))
    assert sorted(tree(spans)) == sorted(
        [
            ("test_qa", None, "general"),
            (agent.name, "test_qa", "general"),
            ("retrieve", agent.name, "tool"),
            *[("fake_llm", agent.name, "llm")] * llm_calls,
            # As opik.evaluate() lays out the scoring: beside the task span, a span per metric.
            ("metrics_calculation", None, "general"),
            ("equals_metric", "metrics_calculation", "general"),
        ]
    )
    scoring = next(span for span in spans if span.name == "metrics_calculation")
    assert scoring.tags == ["__opik_eval_internal__"]
    assert task.end_time <= scoring.start_time  # type: ignore[operator]
    metric = next(span for span in spans if span.name == "equals_metric")
    # The score's arguments (Equals takes **kwargs: all the scoring inputs).
    assert metric.input == {
        "id": label,
        "input": {"text": label},
        "expected_output": label,
        "output": label,
        "reference": label,
    }
    assert metric.output == {"output": {"name": "equals_metric", "value": 1.0, "scoring_failed": False}}
    for llm in (span for span in spans if span.type == "llm"):
        assert llm.input == {"prompt": label}  # this trial's own call
        assert (llm.model, llm.provider) == ("gpt-4o-mini", "openai")
        assert (llm.prompt_tokens, llm.completion_tokens, llm.total_tokens) == (len(label), 2, len(label) + 2)
        assert llm.start_time is not None
        assert llm.end_time is not None
        assert llm.start_time <= llm.end_time
    assert task.start_time is not None
    assert task.end_time is not None
    assert task.start_time <= agent.start_time  # type: ignore[operator]
    assert agent.end_time <= task.end_time  # type: ignore[operator]


def check_run(project: Project, *, llm_calls: int = 1) -> None:
    trials = project.trials()
    assert sorted(t.dataset_item_id for t in trials) == LABELS
    for trial in trials:
        assert trial.status == "completed"
        check_trial(trial, llm_calls=llm_calls)
    assert len({t.spans[0].trace_id for t in trials}) == len(trials)
    # The SDK never made a client of its own: no span was sent anywhere.
    assert set((project.path / "client.log").read_text().split()) == {"False"}


def test_the_spans_of_each_trial_are_stored_as_a_tree(traced: Project) -> None:
    traced.write("test_eval.py", SYNC_TEST)
    traced.run("--eval").assert_outcomes(passed=len(LABELS))
    check_run(traced)


def test_spans_land_in_their_own_trial_with_threads(traced: Project) -> None:
    traced.write("test_eval.py", SYNC_TEST)
    traced.run("--eval", "--eval-threads=4").assert_outcomes(passed=len(LABELS))
    check_run(traced)


def test_spans_of_async_tests_under_pytest_asyncio(traced: Project) -> None:
    # pytest-asyncio runs the coroutine in a context it copied before this plugin's hooks ran.
    # Warnings shown, not errors: "-p asyncio" makes pytest warn that the module asyncio (the
    # standard library's) is already imported, as in test_async.py.
    traced.pytester.makeini(
        "[pytest]\nfilterwarnings = default\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n"
    )
    traced.write("test_eval.py", ASYNC_TEST)
    traced.run("-p", "asyncio", "--eval").assert_outcomes(passed=len(LABELS))
    check_run(traced, llm_calls=2)


def test_spans_of_async_tests_in_threads(traced: Project) -> None:
    traced.write("test_eval.py", ASYNC_TEST)
    traced.run("--eval", "--eval-threads=4").assert_outcomes(passed=len(LABELS))
    check_run(traced, llm_calls=2)


def test_spans_land_in_their_own_trial_under_xdist(traced: Project) -> None:
    traced.write("test_eval.py", SYNC_TEST)
    traced.run("-p", "xdist", "-n", "2", "--eval").assert_outcomes(passed=len(LABELS))
    check_run(traced)


def test_an_app_without_spans_stores_none(traced: Project) -> None:
    traced.write(
        "test_eval.py",
        """
        import opik  # imported, but nothing is tracked
        import pytest
        from pytest_opik_eval.metrics import Equals


        @pytest.mark.eval(dataset="data.jsonl", metrics=[Equals()], scoring_key_mapping={"reference": "expected_output"})
        def test_qa(eval_item):
            return eval_item["input"]["text"]
        """,
    )
    traced.run("--eval").assert_outcomes(passed=len(LABELS))
    assert [t.spans for t in traced.trials()] == [[]] * len(LABELS)


def test_a_store_made_before_spans_is_read_and_gains_them(traced: Project) -> None:
    traced.write("test_eval.py", SYNC_TEST)
    traced.run("--eval").assert_outcomes(passed=len(LABELS))
    # As an earlier version leaves the file: no attempt_spans table (the schema version is the same).
    db = sqlite3.connect(traced.store_path)
    db.execute("DROP TABLE attempt_spans")
    db.execute("DROP TABLE attempt_timings")
    db.close()
    assert [(t.spans, t.task_seconds, t.metric_seconds) for t in traced.trials()] == [([], None, {})] * len(
        LABELS
    )
    traced.run("--eval").assert_outcomes(passed=len(LABELS))  # a new run in the same store
    for trial in traced.trials():
        check_trial(trial)
        assert trial.task_seconds is not None
        assert set(trial.metric_seconds) == {"equals_metric"}


JUDGES = """
import opik
from opik import opik_context
from opik.evaluation.metrics import base_metric as opik_base_metric
from pytest_opik_eval.metrics import BaseMetric, ScoreResult


@opik.track(type="llm")
def judge_llm(text):
    opik_context.update_current_span(
        model="gpt-4o",
        provider="openai",
        usage={"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
    )
    return 1.0


class Judge(BaseMetric):
    # This package's metric: not tracked by itself, so the scorer opens its span.
    def score(self, output):
        return ScoreResult(name=self.name, value=judge_llm(output), reason="judged")


class OpikJudge(opik_base_metric.BaseMetric):
    # An Opik SDK metric: its score() is an @opik.track of its own, which makes its span.
    def score(self, output, **ignored):
        from opik.evaluation.metrics import score_result

        return score_result.ScoreResult(name=self.name, value=judge_llm(output))
"""


def test_a_judges_llm_call_nests_under_its_metric_span(traced: Project) -> None:
    traced.write("judges.py", JUDGES)
    traced.write(
        "test_eval.py",
        """
        import pytest
        from app import agent
        from judges import Judge, OpikJudge


        @pytest.mark.eval(dataset="data.jsonl", metrics=[Judge("judge"), OpikJudge("opik_judge")])
        def test_qa(eval_item):
            return agent(eval_item["input"]["text"])
        """,
    )
    traced.run("--eval").assert_outcomes(passed=len(LABELS))
    for trial in traced.trials():
        spans = trial.spans
        assert sorted(tree(spans)) == sorted(
            [
                ("test_qa", None, "general"),
                ("agent", "test_qa", "general"),
                ("retrieve", "agent", "tool"),
                ("fake_llm", "agent", "llm"),
                ("metrics_calculation", None, "general"),
                ("judge", "metrics_calculation", "general"),
                ("judge_llm", "judge", "llm"),
                ("opik_judge", "metrics_calculation", "general"),
                ("judge_llm", "opik_judge", "llm"),
            ]
        ), trial.dataset_item_id
        judge = next(span for span in spans if span.name == "judge")
        assert judge.input == {"output": trial.dataset_item_id}
        assert judge.output == {
            "output": {"name": "judge", "value": 1.0, "reason": "judged", "scoring_failed": False}
        }
        assert {span.trace_id for span in spans} == {spans[0].trace_id}
    assert set((traced.path / "client.log").read_text().split()) == {"False"}


def test_latency_of_the_task_and_each_metric_is_kept_without_opik(project: Project) -> None:
    project.dataset(
        [{"id": label, "input": {"text": label}, "expected_output": label} for label in LABELS[:3]]
    )
    project.write(
        "test_eval.py",
        """
        import sys
        import time

        import pytest
        from pytest_opik_eval.metrics import BaseMetric, Equals, ScoreResult


        class Slow(BaseMetric):
            def score(self, output):
                time.sleep(0.03)
                return ScoreResult(name=self.name, value=1.0)


        @pytest.mark.eval(
            dataset="data.jsonl", metrics=[Equals(), Slow("slow")], scoring_key_mapping={"reference": "expected_output"}
        )
        def test_qa(eval_item):
            assert "opik" not in sys.modules  # no Opik SDK: timed all the same
            time.sleep(0.05)
            return eval_item["input"]["text"]
        """,
    )
    # In a process of its own: this one has imported the Opik SDK.
    project.pytester.runpytest_subprocess("--eval").assert_outcomes(passed=3)
    for trial in project.trials():
        assert trial.spans == []
        assert trial.task_seconds is not None
        assert trial.task_seconds >= 0.05
        assert set(trial.metric_seconds) == {"equals_metric", "slow"}
        assert trial.metric_seconds["slow"] >= 0.03
        assert 0 <= trial.metric_seconds["equals_metric"]


# An app (and a judge) with neither the Opik SDK nor OTel: it hands finished spans to the trial's
# trace itself, as the OTel span processor does: directly, from a thread that runs in a copy of
# the context, and from an asyncio.to_thread call.
NO_SDK_APP = """
import asyncio
import contextvars
import threading
from datetime import datetime, timezone

import pytest_opik_eval.tracing  # the public module: a session that imports it is traced
from pytest_opik_eval.ids import uuid7
from pytest_opik_eval.run import trial_trace


def emit(name):
    trace = trial_trace.current()
    assert trace is not None, f"{name}: outside a trial"
    parent = trace.parent_span_id()
    start = datetime.now(timezone.utc)
    trace.add_span(
        {
            "id": uuid7(), "trace_id": trace.trace_id, "parent_span_id": parent, "name": name, "type": "llm",
            "start_time": start, "end_time": datetime.now(timezone.utc), "input": {"prompt": name},
            "output": {"text": "ok"}, "model": "gpt-4o-mini", "provider": "openai",
            "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}, "total_cost": 0.5,
        }
    )


def agent(question):
    emit("direct")
    thread = threading.Thread(target=contextvars.copy_context().run, args=(emit, "in_thread"))
    thread.start()
    thread.join()
    return question


async def agent_async(question):
    emit("direct")
    await asyncio.to_thread(emit, "in_thread")
    return question
"""

NO_SDK_TEST = """
import sys

import pytest
from pytest_opik_eval.metrics import BaseMetric, Equals, ScoreResult
from app import agent, agent_async, emit


class Judge(BaseMetric):
    def score(self, output):
        emit("judge_call")
        return ScoreResult(name=self.name, value=1.0)


@pytest.mark.eval(dataset="data.jsonl", metrics=[Equals(), Judge("judge")], scoring_key_mapping={"reference": "expected_output"})
def test_qa(eval_item):
    assert "opik" not in sys.modules
    return agent(eval_item["input"]["text"])


@pytest.mark.eval(dataset="data.jsonl", metrics=[Equals(), Judge("judge")], scoring_key_mapping={"reference": "expected_output"})
async def test_qa_async(eval_item):
    assert "opik" not in sys.modules
    return await agent_async(eval_item["input"]["text"])
"""


@pytest.mark.parametrize("threads", ["1", "4"])
def test_spans_added_through_the_trace_without_the_opik_sdk(project: Project, threads: str) -> None:
    project.dataset(
        [{"id": label, "input": {"text": label}, "expected_output": label} for label in LABELS[:4]]
    )
    project.write("app.py", NO_SDK_APP)
    project.write("test_eval.py", NO_SDK_TEST)
    # In a process of its own: this one has imported the Opik SDK.
    project.pytester.runpytest_subprocess("--eval", f"--eval-threads={threads}").assert_outcomes(passed=8)
    store = LocalStore(project.store_path, create=False)
    _, experiments = store.find("last")
    trials = [trial for experiment in experiments for trial in store.trials(experiment.id, spans=True)]
    store.close()
    assert len(trials) == 8
    for trial in trials:
        spans = trial.spans
        task = spans[0]
        assert task.name in ("test_qa", "test_qa_async")
        assert task.parent_span_id is None
        assert sorted(tree(spans)) == sorted(
            [
                (task.name, None, "general"),
                ("direct", task.name, "llm"),
                ("in_thread", task.name, "llm"),
                ("metrics_calculation", None, "general"),
                ("equals_metric", "metrics_calculation", "general"),
                ("judge", "metrics_calculation", "general"),
                ("judge_call", "judge", "llm"),
            ]
        ), trial.node_id
        assert {span.trace_id for span in spans} == {task.trace_id}
        assert len({span.id for span in spans}) == len(spans)
        llm = [span for span in spans if span.type == "llm"]
        assert [(s.cost, s.cost_source, s.prompt_tokens) for s in llm] == [(0.5, "span", 10)] * 3
        assert trial.task_seconds is not None
    assert len({t.spans[0].trace_id for t in trials}) == 8


def test_a_task_that_raised_keeps_its_latency(project: Project) -> None:
    project.dataset([{"id": "a", "input": {"text": "a"}, "expected_output": "a"}])
    project.write(
        "test_eval.py",
        """
        import time

        import pytest
        from pytest_opik_eval.metrics import Equals


        @pytest.mark.eval(dataset="data.jsonl", metrics=[Equals()])
        def test_qa(eval_item):
            time.sleep(0.05)
            raise RuntimeError("the app failed")
        """,
    )
    project.run("--eval").assert_outcomes(failed=1)
    [trial] = project.trials()
    assert trial.status == "pending"
    assert trial.task_seconds is not None
    assert trial.task_seconds >= 0.05


def test_the_journal_of_a_traced_run_stays_readable_by_older_versions(
    traced: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process killed mid-run leaves its journals for the next reader, which may be an older
    version: it knows only start/output/scores/complete events, and sets a journal with any
    other line aside as damaged. A traced run's spans, and its timings, must not be in it."""
    project = traced
    project.write(
        "test_eval.py",
        """
        import os

        import pytest
        from pytest_opik_eval.metrics import Equals
        from app import agent


        @pytest.mark.eval(dataset="data.jsonl", metrics=[Equals()], scoring_key_mapping={"reference": "expected_output"})
        def test_qa(eval_item):
            if eval_item["id"] == "item-3":
                os._exit(1)  # killed: the journals stay unfolded
            answer = agent(eval_item["input"]["text"])
            if eval_item["id"] == "item-2":
                raise RuntimeError("the app failed")  # an attempt that never completes
            return answer
        """,
    )
    project.pytester.runpytest_subprocess("--eval")
    folder = journal.folder_of(project.store_path)
    older = sorted(folder.glob("*.v1.jsonl"))  # what an older version folds
    assert older
    monkeypatch.setattr(journal, "KINDS", frozenset({"start", "output", "scores", "complete"}))
    events = []
    for path in older:
        found = journal.Found(path)
        events += found.events()
        assert found.damaged == 0
        found.done(folded=False)
    completes = [event for event in events if event[0] == "complete"]
    assert len(completes) == 2
    # What an older version reads of them: [attempt, attempt, replaces]; the timings after it.
    assert all(event[1] == event[2] and event[3] is None for event in completes)
    monkeypatch.undo()
    # This version reads it all: spans and timings of the completed trials, the failed one's too.
    trials = {trial.dataset_item_id: trial for trial in project.trials()}
    for label in ("item-0", "item-1"):
        assert trials[label].status == "completed"
        assert [span.name for span in trials[label].spans][:1] == ["test_qa"]
        assert {"agent", "fake_llm"} <= {span.name for span in trials[label].spans}
        assert trials[label].task_seconds is not None
        assert set(trials[label].metric_seconds) == {"equals_metric"}
    assert trials["item-2"].status == "pending"
    assert trials["item-2"].task_seconds is not None
    assert {span.name for span in trials["item-2"].spans} >= {"agent", "fake_llm"}
    assert not list(folder.glob("*.jsonl")), "the journals of the dead writer are folded and gone"
