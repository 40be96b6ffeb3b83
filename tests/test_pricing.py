"""The cost of an LLM call that reports tokens but no cost: estimated from genai-prices' price
table (the cost extra) at the trial's end, kept in the store with where it came from, and
summed in the report; a call the table cannot price is counted, never an error."""

from __future__ import annotations

import sys

import pytest
from conftest import Project, offline_opik

from pytest_opik_eval.run import pricing

APP = """
import opik
from opik import opik_context


@opik.track(type="llm")
def llm(model, prompt_tokens, completion_tokens, cost=None):
    opik_context.update_current_span(
        model=model,
        provider="openai",
        usage={
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
        **({} if cost is None else {"total_cost": cost}),
    )
    return model


@opik.track
def agent(question):
    llm("gpt-4o-mini", 1000, 100)  # no cost of its own: priced from the table
    llm("gpt-4o-mini", 1000, 100, cost=0.5)  # its own cost stands
    llm("foo-1", 10, 5)  # a model no table knows
    return question
"""


@pytest.fixture
def traced(project: Project, monkeypatch: pytest.MonkeyPatch) -> Project:
    offline_opik(project, monkeypatch)
    project.dataset([{"id": label, "input": {"text": label}, "expected_output": label} for label in "abc"])
    project.write("app.py", APP)
    project.eval_test(imports="from app import agent", behaviour='agent(item["input"]["text"])')
    return project


def test_a_known_model_is_priced_from_the_table_and_an_unknown_one_counted(traced: Project) -> None:
    pytest.importorskip("genai_prices")
    result, report = traced.run_report("--eval")
    result.assert_outcomes(passed=3)
    # gpt-4o-mini at OpenAI, as genai-prices 0.2.3 has it (genai_prices/data.py, provider
    # "openai", model "gpt-4o-mini": input_mtok=0.15, output_mtok=0.6, USD per million tokens):
    # 1000 * 0.15 / 1e6 + 100 * 0.6 / 1e6 = 0.00015 + 0.00006 = 0.00021
    priced = 0.00021
    for trial in traced.trials():
        llm = [span for span in trial.spans if span.type == "llm"]
        assert [(s.model, s.total_cost, s.cost, s.cost_source, s.unpriced) for s in llm] == [
            ("gpt-4o-mini", None, pytest.approx(priced, abs=1e-12), "price table", None),
            ("gpt-4o-mini", 0.5, 0.5, "span", None),
            ("foo-1", None, None, None, "unknown model 'foo-1'"),
        ]
    (experiment,) = report["experiments"]
    for trial in experiment["trials"]:
        app = trial["usage"]["app"]
        assert app["cost"] == pytest.approx(0.5 + priced, abs=1e-12)
        assert app["unpriced"] == {"unknown model 'foo-1'": 1}
    summary = experiment["summary"]["usage"]["app"]
    assert summary["cost"] == pytest.approx(3 * (0.5 + priced), abs=1e-12)
    assert summary["unpriced"] == {"unknown model 'foo-1'": 3}
    # 3 * 0.50021 = 1.50063
    result.stdout.fnmatch_lines(
        ["  latency * tokens 6,030 in / 615 out   cost $1.50", "  (3 spans unpriced: unknown model 'foo-1')"]
    )


def test_without_the_price_table_the_cost_is_what_spans_reported(
    traced: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As if the cost extra were not installed: the import fails, nothing is cached yet.
    monkeypatch.setitem(sys.modules, "genai_prices", None)
    monkeypatch.setitem(sys.modules, "genai_prices.data_snapshot", None)
    monkeypatch.setattr(pricing, "_models", {})
    result, report = traced.run_report("--eval")
    result.assert_outcomes(passed=3)
    (experiment,) = report["experiments"]
    summary = experiment["summary"]["usage"]["app"]
    assert summary["cost"] == pytest.approx(1.5)
    assert summary["unpriced"] == {pricing.NOT_INSTALLED: 6}
    result.stdout.fnmatch_lines(["  latency * cost $1.50", f"  (6 spans unpriced: {pricing.NOT_INSTALLED})"])


CACHED_APP = """
import opik
from opik import opik_context


@opik.track(type="llm")
def claude(question):
    # Anthropic's own usage: input_tokens are the uncached ones, and the SDK's prompt_tokens
    # add the cache's reads and writes back (1000 in all).
    opik_context.update_current_span(
        model="claude-3-5-haiku-latest",
        provider="anthropic",
        usage={
            "input_tokens": 100,
            "output_tokens": 100,
            "cache_read_input_tokens": 800,
            "cache_creation_input_tokens": 100,
        },
    )
    return question
"""


def test_prompt_tokens_read_from_the_cache_are_priced_at_the_cache_price(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("genai_prices")
    offline_opik(project, monkeypatch)
    project.dataset([{"id": "a", "input": {"text": "a"}, "expected_output": "a"}])
    project.write("app.py", CACHED_APP)
    project.eval_test(imports="from app import claude", behaviour='claude(item["input"]["text"])')
    project.run("--eval").assert_outcomes(passed=1)
    (trial,) = project.trials()
    (llm,) = [span for span in trial.spans if span.type == "llm"]
    assert (llm.prompt_tokens, llm.completion_tokens) == (1000, 100)
    # claude-3-5-haiku-latest in genai-prices 0.2.3, USD per million tokens: input 0.8, output 4,
    # cache read 0.08, cache write 1. 100 * 0.8 + 800 * 0.08 + 100 * 1 + 100 * 4 = 644 per
    # million: 0.000644 (all 1000 as plain input would be 0.0012).
    assert llm.cost == pytest.approx(0.000644, abs=1e-12)
    assert llm.cost_source == "price table"
