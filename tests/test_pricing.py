"""The cost of an LLM call that reports tokens but no cost: estimated from genai-prices' price
table (the cost extra) at the trial's end, kept in the store with where it came from, and
summed in the report; a call the table cannot price is counted, never an error."""

from __future__ import annotations

import json
import sys

import pytest
from conftest import Project, extra_reason, offline_opik
from fake_llm import FakeLLM

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
    pytest.importorskip("genai_prices", reason=extra_reason("cost", "genai_prices"))
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
    pytest.importorskip("genai_prices", reason=extra_reason("cost", "genai_prices"))
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


# The app: the OpenAI SDK, traced by the Opik SDK's track_openai, asking the fake LLM server
# (tests/fake_llm.py). Its spans report gpt-4o-mini's tokens and no cost: the price table prices
# them as each trial ends, in the pool's threads, while other threads' clients are mid-call.
OPENAI_APP = """
import os

import openai
from opik.integrations.openai import track_openai

client = track_openai(
    openai.OpenAI(
        base_url=os.environ["FAKE_LLM_URL"] + "/v1",
        api_key=os.environ["FAKE_LLM_API_KEY"],
        http_client=openai.DefaultHttpxClient(trust_env=False),
        max_retries=0,
    )
)


def ask(question):
    # Calls one after the other: a trial is mid-call most of the time it runs.
    for _ in range(20):
        completion = client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": question}]
        )
    return completion.choices[0].message.content
"""


# The app imported by the test module, or by the first trials' tasks themselves (in the pool's
# threads, once the session runs: nothing could trace before).
@pytest.mark.parametrize(
    ("imported", "run"), [("at start", run) for run in range(3)] + [("by the task", run) for run in range(3)]
)
def test_pricing_in_threads_does_not_break_the_openai_clients_of_other_trials(
    project: Project, monkeypatch: pytest.MonkeyPatch, llm: FakeLLM, imported: str, run: int
) -> None:
    # genai-prices imports httpx2, which the OpenAI SDK looks up in sys.modules on each call: were
    # it first imported in a pool thread, the other threads' calls would meet it half made
    # ("partially initialized module 'httpx2' has no attribute ..."). A fresh process each time,
    # where nothing imported genai-prices before the trials.
    pytest.importorskip("genai_prices", reason=extra_reason("cost", "genai_prices"))
    offline_opik(project, monkeypatch)
    labels = [f"q{i}" for i in range(16)]
    project.dataset(
        [{"id": label, "input": {"text": label}, "expected_output": "answer"} for label in labels]
    )
    project.write("app.py", OPENAI_APP)
    at_start = imported == "at start"
    project.eval_test(
        imports="from pytest_opik_eval.metrics import Contains"
        + ("\nfrom app import ask" if at_start else ""),
        behaviour=("" if at_start else "from app import ask\n    ")
        + 'return {"output": ask(item["input"]["text"])}',
        metrics="[Contains()]",
    )
    result, report = project.run_report("--eval", "--eval-threads=8", subprocess=True)
    result.assert_outcomes(passed=16)
    (experiment,) = report["experiments"]
    apps = [t["usage"]["app"] for t in experiment["trials"] if t["usage"] and t["usage"]["app"]]
    # Imported by the tasks, the SDK traces from the trials that start after it: not the first ones.
    assert len(apps) == 16 if at_start else 0 < len(apps) < 16
    assert {app["cost"] is not None for app in apps} == {True}, "each priced"


MODULES_AT_END = """
import json, sys

def pytest_sessionfinish(session):
    with open("modules.json", "w") as f:
        json.dump(sorted(n for n in sys.modules if n.split(".")[0] in ("genai_prices", "httpx2")), f)
"""


def test_trials_that_price_nothing_import_the_price_table_only_for_threads(project: Project) -> None:
    # No span can reach these trials (no Opik SDK, no OpenTelemetry, no manual API), nor any
    # recording: run one at a time, genai-prices (0.1 s) is never imported for them; with
    # threads it is, before they start, as a task may import a traced SDK itself (above).
    pytest.importorskip("genai_prices", reason=extra_reason("cost", "genai_prices"))
    project.dataset([{"id": label, "input": {"text": label}, "expected_output": label} for label in "abcd"])
    project.eval_test()
    project.write("conftest.py", MODULES_AT_END)
    result = project.pytester.runpytest_subprocess("--eval")
    result.assert_outcomes(passed=4)
    assert json.loads((project.path / "modules.json").read_text()) == []
    result = project.pytester.runpytest_subprocess("--eval", "--eval-threads=4")
    result.assert_outcomes(passed=4)
    assert "genai_prices" in json.loads((project.path / "modules.json").read_text())
