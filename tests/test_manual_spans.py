"""Spans and usage recorded by hand (the ``eval_trace`` fixture, ``from pytest_opik_eval.tracing import
trace``), for an app with neither the Opik SDK nor OpenTelemetry: nested under the task span or a
metric's span, with their usage priced, in the right trial; a no-op outside a trial."""

from __future__ import annotations

import importlib.util

import pytest
from conftest import Project

from pytest_opik_eval.run.pricing import NOT_INSTALLED

LABELS = ["a", "b", "c", "d"]
PRICED = importlib.util.find_spec("genai_prices") is not None

APP = """
import asyncio
import contextvars
import threading

from pytest_opik_eval.tracing import trace


def retrieve(question):
    with trace.span("retrieve", type="tool", input={"question": question}) as span:
        span.output = {"docs": [question]}
        return [question]


def llm(prompt):
    # The usage on the span of the call, priced from the table (no cost given).
    with trace.span("llm", type="llm", input={"prompt": prompt}) as span:
        trace.usage(model="gpt-4o-mini", input_tokens=1000, output_tokens=100)
        span.output = prompt
        return prompt


def agent(question):
    with trace.span("agent", input={"question": question}):
        docs = retrieve(question)
        thread = threading.Thread(target=contextvars.copy_context().run, args=(llm, docs[0]))
        thread.start()
        thread.join()
    # No span of ours open (the task span is): a call span of its own, with the cost the
    # provider reported.
    trace.usage(model="house-llm-1", input_tokens=10, output_tokens=2, cost=0.25)
    return docs[0]


async def agent_async(question):
    with trace.span("agent", input={"question": question}):
        docs = retrieve(question)
        await asyncio.to_thread(llm, docs[0])
    trace.usage(model="house-llm-1", input_tokens=10, output_tokens=2, cost=0.25)
    return docs[0]
"""

TESTS = """
import pytest
from pytest_opik_eval.metrics import BaseMetric, Equals, ScoreResult
from app import agent, agent_async


class Judge(BaseMetric):
    def score(self, output):
        from pytest_opik_eval.tracing import trace

        with trace.span("judge_call", type="llm"):
            trace.usage(model="gpt-4o-mini", input_tokens=100, output_tokens=10, cost=0.5)
        return ScoreResult(name=self.name, value=1.0)


METRICS = [Equals(), Judge("judge")]


@pytest.mark.eval(dataset="data.jsonl", metrics=METRICS, scoring_key_mapping={"reference": "expected_output"})
def test_qa(eval_item, eval_trace):
    with eval_trace.span("prepare", input=eval_item["input"]):
        pass
    return agent(eval_item["input"]["text"])


@pytest.mark.eval(dataset="data.jsonl", metrics=METRICS, scoring_key_mapping={"reference": "expected_output"})
async def test_qa_async(eval_item, eval_trace):
    with eval_trace.span("prepare", input=eval_item["input"]):
        pass
    return await agent_async(eval_item["input"]["text"])
"""


def tree(spans: list) -> list[tuple[str | None, str | None, str]]:  # type: ignore[type-arg]
    names = {span.id: span.name for span in spans}
    return sorted(
        (span.name, names.get(span.parent_span_id) if span.parent_span_id else None, span.type)
        for span in spans
    )


@pytest.fixture
def manual(project: Project) -> Project:
    project.dataset([{"id": label, "input": {"text": label}, "expected_output": label} for label in LABELS])
    project.write("app.py", APP)
    project.write("test_eval.py", TESTS)
    return project


@pytest.mark.parametrize("threads", ["1", "3"])
def test_manual_spans_nest_in_each_trial_with_their_usage(manual: Project, threads: str) -> None:
    result, report = manual.run_report("--eval", f"--eval-threads={threads}")
    result.assert_outcomes(passed=8)
    for experiment in report["experiments"]:
        for trial in experiment["trials"]:
            app = trial["usage"]["app"]
            assert (app["prompt_tokens"], app["completion_tokens"], app["spans"]) == (1010, 102, 2)
            # gpt-4o-mini: 1000 x $0.15 / 1M + 100 x $0.60 / 1M = $0.00021, plus the 0.25 given.
            assert app["cost"] == pytest.approx(0.25 + (0.00021 if PRICED else 0))
            assert app["unpriced"] == ({} if PRICED else {NOT_INSTALLED: 1})
            assert trial["usage"]["judge"]["cost"] == 0.5
    from pytest_opik_eval.store.local import LocalStore

    store = LocalStore(manual.store_path, create=False)
    _, experiments = store.find("last")
    trials = [trial for experiment in experiments for trial in store.trials(experiment.id, spans=True)]
    store.close()
    assert len(trials) == 8
    for trial in trials:
        spans = trial.spans
        task = spans[0].name
        assert tree(spans) == sorted(
            [
                (task, None, "general"),
                ("prepare", task, "general"),
                ("agent", task, "general"),
                ("retrieve", "agent", "tool"),
                ("llm", "agent", "llm"),
                ("house-llm-1", task, "llm"),
                ("metrics_calculation", None, "general"),
                ("equals_metric", "metrics_calculation", "general"),
                ("judge", "metrics_calculation", "general"),
                ("judge_call", "judge", "llm"),
            ]
        ), trial.node_id
        assert {span.trace_id for span in spans} == {spans[0].trace_id}
        retrieve = next(span for span in spans if span.name == "retrieve")
        label = trial.dataset_item_id
        assert (retrieve.input, retrieve.output) == ({"question": label}, {"docs": [label]})
        llm = next(span for span in spans if span.name == "llm")
        assert (llm.model, llm.usage) == (
            "gpt-4o-mini",
            {"prompt_tokens": 1000, "completion_tokens": 100, "total_tokens": 1100},
        )
        assert llm.cost_source == ("price table" if PRICED else None)
        house = next(span for span in spans if span.name == "house-llm-1")
        assert (house.cost, house.cost_source) == (0.25, "span")
    assert len({t.spans[0].trace_id for t in trials}) == 8


def test_an_exception_in_a_manual_span_is_recorded_on_it(project: Project) -> None:
    project.dataset([{"id": "a", "input": {"text": "a"}, "expected_output": "a"}])
    project.write(
        "test_eval.py",
        """
        import pytest
        from pytest_opik_eval.metrics import Equals


        @pytest.mark.eval(dataset="data.jsonl", metrics=[Equals()])
        def test_qa(eval_item, eval_trace):
            with eval_trace.span("fetch", type="tool"):
                raise TimeoutError("the search timed out")
        """,
    )
    project.run("--eval").assert_outcomes(failed=1)
    [trial] = project.trials()
    fetch = next(span for span in trial.spans if span.name == "fetch")
    assert fetch.error == {"exception_type": "TimeoutError", "message": "the search timed out"}
    assert trial.spans[0].error == {"exception_type": "TimeoutError", "message": "the search timed out"}


def test_outside_a_trial_the_manual_api_does_nothing(project: Project) -> None:
    project.dataset([{"id": "a", "input": {"text": "a"}, "expected_output": "a"}])
    project.write(
        "test_plain.py",
        """
        import threading

        import pytest
        from pytest_opik_eval.tracing import trace


        def work():
            with trace.span("step", input={"x": 1}) as span:
                span.output = 2
                trace.usage(model="gpt-4o-mini", input_tokens=1, output_tokens=1)
            trace.usage(model="gpt-4o-mini", input_tokens=1, output_tokens=1, cost=0.1)
            return 2


        def test_plain(eval_trace):
            assert work() == 2


        @pytest.mark.eval(dataset="data.jsonl")
        def test_qa(eval_item):
            # A bare thread starts outside the trial: its spans are recorded nowhere.
            thread = threading.Thread(target=work)
            thread.start()
            thread.join()
            return eval_item["input"]["text"]
        """,
    )
    assert project.run().ret == 0  # without --eval: no trial at all
    project.run("--eval").assert_outcomes(passed=2)
    assert [trial.spans for trial in project.trials()] == [[]]
