"""Usage that is no usage: a negative, non-numeric or non-finite token count or cost, reported
through every way a span reaches a trial (the manual API's ``trace.usage`` and a manual span's
fields, the Opik SDK, OpenTelemetry attributes). The span is kept without it, with a notice that
names the span; it never lowers a total (the tokens, the cost, a cost gate, the budget), never
fails the trial from inside the plugin, and never leaves it pending."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import Project, extra_reason, needs_extra, offline_opik

# Each trial: one good LLM call (80 + 20 tokens, $0.25), then one bad call, "bad" (or named after
# its model, for trace.usage), whose usage or cost is VALUE and the rest of it valid (10 tokens);
# its model is in the price table, which prices the calls that report tokens and no cost.
APP = """
from pytest_opik_eval.tracing import trace
{imports}


def good():
    trace.usage(model="house-llm-1", input_tokens=80, output_tokens=20, cost=0.25)


def bad():
    {bad}


def agent(question):
    good()
    bad()
    return question
"""

TEST = """
import pytest
from pytest_opik_eval.metrics import Equals
from app import agent


@pytest.mark.eval(
    dataset="data.jsonl", metrics=[Equals()], scoring_key_mapping={"reference": "expected_output"}
)
def test_qa(eval_item):
    return agent(eval_item["input"]["text"])
"""

# How each entry point reports the bad call: TOKENS with a bad input token count, COST with a
# bad cost (and valid tokens).
SOURCES = {
    "trace.usage": {
        "tokens": 'trace.usage(model="gpt-4o-mini", input_tokens=VALUE, output_tokens=10)',
        "cost": 'trace.usage(model="gpt-4o-mini", input_tokens=10, output_tokens=0, cost=VALUE)',
        "name": "gpt-4o-mini",
        "fields": "input_tokens cost",
    },
    "manual span": {
        "tokens": """with trace.span("bad", type="llm") as span:
        span.model = "gpt-4o-mini"
        span.usage = {"prompt_tokens": VALUE, "completion_tokens": 10, "total_tokens": 10}""",
        "cost": """with trace.span("bad", type="llm") as span:
        span.model = "gpt-4o-mini"
        span.usage = {"prompt_tokens": 10, "completion_tokens": 0, "total_tokens": 10}
        span.total_cost = VALUE""",
        "name": "bad",
        "fields": "prompt_tokens total_cost",
    },
    "opik": {
        "tokens": """@opik.track(type="llm", name="bad")
    def call():
        opik_context.update_current_span(
            model="gpt-4o-mini",
            provider="openai",
            usage={"prompt_tokens": VALUE, "completion_tokens": 10, "total_tokens": 10},
        )

    call()""",
        "cost": """@opik.track(type="llm", name="bad")
    def call():
        opik_context.update_current_span(
            model="gpt-4o-mini",
            provider="openai",
            usage={"prompt_tokens": 10, "completion_tokens": 0, "total_tokens": 10},
            total_cost=VALUE,
        )

    call()""",
        "name": "bad",
        "fields": "prompt_tokens total_cost",
        "imports": "import opik\nfrom opik import opik_context",
    },
    "opentelemetry": {
        "tokens": """with otel.get_tracer("app").start_as_current_span("bad") as span:
        span.set_attributes({"gen_ai.request.model": "gpt-4o-mini", "gen_ai.usage.output_tokens": 10})
        span.set_attribute("gen_ai.usage.input_tokens", VALUE)""",
        "cost": """with otel.get_tracer("app").start_as_current_span("bad") as span:
        span.set_attributes({"gen_ai.request.model": "gpt-4o-mini", "gen_ai.usage.input_tokens": 10})
        span.set_attribute("llm.cost.total", VALUE)""",
        "name": "bad",
        "fields": "gen_ai.usage.input_tokens llm.cost.total",
        "imports": "from opentelemetry import trace as otel",
    },
}

# The app's global OpenTelemetry provider, set as the app starts (see test_otel.py).
OTEL_CONFTEST = """
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

trace.set_tracer_provider(TracerProvider())
"""

# As the notice shows each value: its repr.
SHOWN = {"-500": "-500", "-92.0": "-92.0", '"lots"': "'lots'", 'float("nan")': "nan", 'float("inf")': "inf"}

BAD_VALUES = {
    "negative": ("-500", "-92.0"),
    "text": ('"lots"', '"lots"'),
    "not finite": ('float("nan")', 'float("inf")'),
}

CASES = [
    pytest.param(source, field, value, id=f"{source}-{field}-{kind}")
    for source in SOURCES
    for kind, values in BAD_VALUES.items()
    for field, value in zip(("tokens", "cost"), values, strict=True)
]


@pytest.mark.parametrize(("source", "field", "value"), CASES)
def test_bad_usage_is_rejected_at_its_span_and_counts_nothing(
    project: Project, monkeypatch: pytest.MonkeyPatch, source: str, field: str, value: str
) -> None:
    if source == "opentelemetry":
        pytest.importorskip("opentelemetry.sdk.trace", reason=extra_reason("otel", "opentelemetry"))
        project.write("conftest.py", OTEL_CONFTEST)
    if source == "opik":
        offline_opik(project, monkeypatch)
    project.dataset([{"id": label, "input": {"text": label}, "expected_output": label} for label in "ab"])
    project.write("app.py", app_source(source, field, value))
    project.write("test_eval.py", TEST)
    # The subprocess is fresh: the OpenTelemetry provider is set once per process.
    result, report = project.run_report("--eval", "--eval-budget=1M tokens", subprocess=True)
    result.assert_outcomes(passed=2)
    (experiment,) = report["experiments"]
    # The bad call's valid tokens count when only its cost was bad.
    tokens = 100 + (10 if field == "cost" else 0)
    for trial in experiment["trials"]:
        assert trial["status"] == "completed"
        app: dict[str, Any] = trial["usage"]["app"]
        # The price table's estimate for 10 input tokens of gpt-4o-mini is a few millionths.
        assert (app["total_tokens"], app["spans"]) == (tokens, 2 if field == "cost" else 1)
        assert app["cost"] == pytest.approx(0.25, abs=1e-5)
    assert report["budget"]["spent"] == 2 * tokens
    name = SOURCES[source]["name"]
    # Named as the app gave it.
    tokens_field, cost_field = SOURCES[source]["fields"].split()
    named = tokens_field if field == "tokens" else cost_field
    result.stdout.fnmatch_lines(
        [
            "*eval notices*",
            f"test_eval.py::test_qa (test_eval.py:*): span '{name}' reported {named}="
            f"{SHOWN[value]}, not a number >= 0: its {'usage' if field == 'tokens' else 'cost'} "
            "ignored (never counted in the tokens, the cost, the gates or the budget; the rest of the span "
            "is kept)",
        ]
    )
    # The span itself is kept, with the rest of what it reported.
    assert any(span["name"] == name for span in _spans(project))


def app_source(source: str, field: str, value: str) -> str:
    bad = SOURCES[source]
    return APP.format(imports=bad.get("imports", ""), bad=bad[field].replace("VALUE", value))


def _spans(project: Project) -> list[dict[str, Any]]:
    return [span.model_dump() for trial in project.trials() for span in trial.spans]


# The other spans have tokens and no cost: without the price table the gate says it cannot pass.
@needs_extra("cost", "genai_prices")
def test_a_negative_cost_never_meets_a_cost_gate(project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    offline_opik(project, monkeypatch)
    project.dataset([{"id": str(n), "input": {"text": str(n)}, "expected_output": str(n)} for n in range(5)])
    project.write("app.py", app_source("opik", "cost", "-92.0"))
    project.write("test_eval.py", TEST)
    result = project.run("--eval", "--eval-max-cost=1/run")
    # 5 trials at $0.25: $1.25, not $1.25 - 5 x $92.
    result.stdout.fnmatch_lines(["NOT MET: test_qa: max_cost_per_run: spent $1.25 * is above $1.00"])
    assert result.ret == pytest.ExitCode.TESTS_FAILED
