"""The spans an app makes with OpenTelemetry (GenAI semantic conventions, OpenInference's
names), recorded with each trial through the plugin's span processor (run/otel.py, the extra
``pytest-opik-eval[otel]``): nested under the trial's task span, with their model, tokens and
cost, in the right trial whether trials run one at a time, in threads, as coroutines or on
pytest-xdist workers; the app's own exporter still gets every span, and a span started outside
a trial is left alone."""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import Project, extra_reason, offline_opik
from opik_server import OpikTestServer
from test_tracing import tree

# Imported once for the whole module, as the plugin imports it in each inner run: pytester drops
# the modules a run imported when it ends, and a later run would meet the first run's module
# through the package's attribute, holding that run's OpenTelemetry (see conftest.py).
otel = pytest.importorskip("pytest_opik_eval.run.otel", reason=extra_reason("otel", "opentelemetry"))
from opentelemetry import trace  # noqa: E402
from opentelemetry.util._once import Once  # noqa: E402

from pytest_opik_eval.store.records import TrialRecord  # noqa: E402

LABELS = [f"item-{i}" for i in range(8)]

# An app instrumented by hand as a GenAI instrumentation would: an agent span, a tool span,
# and the LLM call under the tool, reporting model and tokens (no cost: the price table's).
# A bare thread that carries only OpenTelemetry's context makes a span under the agent.
APP = """
import asyncio
import json
import threading

from opentelemetry import context, trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

# The app's telemetry as it is in production: a global SDK provider and its exporter.
EXPORTED = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(EXPORTED))
trace.set_tracer_provider(provider)
tracer = trace.get_tracer("app")


def fake_llm(prompt):
    with tracer.start_as_current_span("chat gpt-4o-mini", kind=SpanKind.CLIENT) as span:
        span.set_attributes(
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.system": "openai",
                "gen_ai.request.model": "gpt-4o-mini",
                "gen_ai.response.model": "gpt-4o-mini-2024-07-18",
                "gen_ai.usage.input_tokens": 1000,
                "gen_ai.usage.output_tokens": 100,
                "gen_ai.input.messages": json.dumps([{"role": "user", "content": prompt}]),
                "gen_ai.output.messages": json.dumps([{"role": "assistant", "content": prompt}]),
                "server.address": "api.openai.com",
            }
        )
        return prompt


def search(question):
    with tracer.start_as_current_span("execute_tool search") as span:
        span.set_attribute("gen_ai.operation.name", "execute_tool")
        return fake_llm(question)


def in_bare_thread(work):
    carried = context.get_current()  # only OpenTelemetry's context: not the trial's

    def run():
        token = context.attach(carried)
        try:
            work()
        finally:
            context.detach(token)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()


def side_work():
    with tracer.start_as_current_span("side work"):
        pass


def flaky():
    try:
        with tracer.start_as_current_span("flaky call"):
            raise TimeoutError("rate limited")
    except TimeoutError:
        pass  # the app retries; the span keeps the error


def agent(question):
    with tracer.start_as_current_span("agent"):
        flaky()
        in_bare_thread(side_work)
        return search(question)


async def agent_async(question):
    with tracer.start_as_current_span("agent"):
        flaky()
        in_bare_thread(side_work)
        # Fanned out: asyncio tasks and to_thread carry the context, so both calls nest.
        first, _ = await asyncio.gather(asyncio.to_thread(search, question), asyncio.to_thread(search, question))
        return first
"""

SYNC_TEST = """
import pytest
from pytest_opik_eval.metrics import Equals
from app import agent, tracer


@pytest.mark.eval(dataset="data.jsonl", metrics=[Equals()], scoring_key_mapping={"reference": "expected_output"})
def test_qa(eval_item):
    return agent(eval_item["input"]["text"])


def test_plain():
    # Not an eval test: its span belongs to no trial.
    with tracer.start_as_current_span("outside") as span:
        span.set_attribute("gen_ai.usage.input_tokens", 7)
"""

ASYNC_TEST = """
import pytest
from pytest_opik_eval.metrics import Equals
from app import agent_async


@pytest.mark.eval(dataset="data.jsonl", metrics=[Equals()], scoring_key_mapping={"reference": "expected_output"})
async def test_qa(eval_item):
    return await agent_async(eval_item["input"]["text"])
"""

# What the app's own exporter got, one JSON line per process (each xdist worker writes its own).
EXPORTED = """
import json
import pathlib
import sys


def pytest_sessionfinish(session):
    app = sys.modules.get("app")
    if app is None:
        return
    spans = [
        {"name": span.name, "attributes": dict(span.attributes), "status": span.status.status_code.name}
        for span in app.EXPORTED.get_finished_spans()
    ]
    with open(pathlib.Path(__file__).parent / "exported.jsonl", "a") as log:
        log.write(json.dumps(spans) + "\\n")
"""

# gpt-4o-mini at OpenAI, as genai-prices 0.2.3 has it (input_mtok=0.15, output_mtok=0.6 USD):
# 1000 * 0.15 / 1e6 + 100 * 0.6 / 1e6 = 0.00015 + 0.00006 = 0.00021
PRICE = 0.00021


@pytest.fixture(autouse=True)
def fresh_global_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    """OpenTelemetry's global provider can be set once per process: each inner run's app sets
    its own (as OpenTelemetry's own tests reset it)."""
    monkeypatch.setattr(trace, "_TRACER_PROVIDER_SET_ONCE", Once())
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", None)


@pytest.fixture
def instrumented(project: Project) -> Project:
    project.dataset([{"id": label, "input": {"text": label}, "expected_output": label} for label in LABELS])
    project.write("app.py", APP)
    project.write("conftest.py", EXPORTED)
    return project


def check_trial(trial: TrialRecord, *, llm_calls: int = 1) -> None:
    label = trial.dataset_item_id
    spans = trial.spans
    assert spans, f"{label}: no spans recorded"
    task = spans[0]
    assert (task.name, task.parent_span_id) == ("test_qa", None)
    # Every span belongs to this trial's trace, once.
    assert {span.trace_id for span in spans} == {task.trace_id}
    assert len({span.id for span in spans}) == len(spans)
    assert sorted(tree(spans)) == sorted(
        [
            ("test_qa", None, "general"),
            ("agent", "test_qa", "general"),
            ("flaky call", "agent", "general"),
            ("side work", "agent", "general"),  # from a bare thread: through its OTel parent
            *[("execute_tool search", "agent", "tool"), ("chat gpt-4o-mini", "execute_tool search", "llm")]
            * llm_calls,
            ("metrics_calculation", None, "general"),
            ("equals_metric", "metrics_calculation", "general"),
        ]
    ), label
    flaky = next(span for span in spans if span.name == "flaky call")
    assert flaky.error == {"exception_type": "TimeoutError", "message": "rate limited"}
    for llm in (span for span in spans if span.type == "llm"):
        assert llm.input == [{"role": "user", "content": label}]  # this trial's own call
        assert llm.output == [{"role": "assistant", "content": label}]
        assert (llm.model, llm.provider) == ("gpt-4o-mini-2024-07-18", "openai")
        assert (llm.prompt_tokens, llm.completion_tokens, llm.total_tokens) == (1000, 100, 1100)
        assert (llm.total_cost, llm.cost_source) == (None, "price table")
        assert llm.cost == pytest.approx(PRICE, abs=1e-12)
        # The attributes not read, and those read but not kept (the model asked for, beside the one
        # that answered).
        assert llm.metadata == {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "gpt-4o-mini",
            "server.address": "api.openai.com",
        }
        assert llm.start_time is not None
        assert llm.end_time is not None
        assert task.start_time <= llm.start_time <= llm.end_time <= task.end_time  # type: ignore[operator]


def check_run(project: Project, report: dict[str, Any], *, llm_calls: int = 1) -> None:
    trials = project.trials()
    assert sorted(t.dataset_item_id for t in trials) == LABELS
    for trial in trials:
        assert trial.status == "completed"
        check_trial(trial, llm_calls=llm_calls)
    assert len({t.spans[0].trace_id for t in trials}) == len(trials)
    (experiment,) = report["experiments"]
    for trial_report in experiment["trials"]:
        app = trial_report["usage"]["app"]
        assert (app["prompt_tokens"], app["completion_tokens"]) == (1000 * llm_calls, 100 * llm_calls)
        assert app["cost"] == pytest.approx(PRICE * llm_calls, abs=1e-12)
    summary = experiment["summary"]["usage"]["app"]
    assert summary["prompt_tokens"] == 1000 * llm_calls * len(LABELS)
    assert summary["cost"] == pytest.approx(PRICE * llm_calls * len(LABELS), abs=1e-12)
    # The app's exporter got every span, as the app made it; ours only read them.
    exported = [
        span
        for line in (project.path / "exported.jsonl").read_text().split("\n")
        if line
        for span in json.loads(line)
    ]
    per_trial = 3 + 2 * llm_calls  # agent, flaky call, side work, then search and chat per call
    assert len([s for s in exported if s["name"] != "outside"]) == per_trial * len(LABELS)
    llm = next(s for s in exported if s["name"] == "chat gpt-4o-mini")
    assert llm["attributes"]["gen_ai.usage.input_tokens"] == 1000
    assert "flaky call" in {s["name"] for s in exported if s["status"] == "ERROR"}


@pytest.mark.parametrize(
    "args",
    [
        pytest.param([], id="one-at-a-time"),
        pytest.param(["--eval-threads=4"], id="threads"),
        pytest.param(["-p", "xdist", "-n", "2"], id="xdist"),
    ],
)
def test_otel_spans_of_each_trial_are_stored_under_its_task_span(
    instrumented: Project, args: list[str]
) -> None:
    pytest.importorskip("genai_prices", reason=extra_reason("cost", "genai_prices"))
    instrumented.write("test_eval.py", SYNC_TEST)
    result, report = instrumented.run_report("--eval", *args)
    result.assert_outcomes(passed=len(LABELS) + 1)
    check_run(instrumented, report)
    # A span outside any trial is left alone: exported, in no trial.
    exported = [
        span
        for line in (instrumented.path / "exported.jsonl").read_text().split("\n")
        if line
        for span in json.loads(line)
    ]
    assert [s["attributes"] for s in exported if s["name"] == "outside"] == [{"gen_ai.usage.input_tokens": 7}]
    assert all(span.name != "outside" for trial in instrumented.trials() for span in trial.spans)


def test_otel_spans_of_async_tests_under_pytest_asyncio(instrumented: Project) -> None:
    pytest.importorskip("genai_prices", reason=extra_reason("cost", "genai_prices"))
    # Warnings shown, not errors: "-p asyncio" makes pytest warn that the module asyncio (the
    # standard library's) is already imported, as in test_async.py.
    instrumented.pytester.makeini(
        "[pytest]\nfilterwarnings = default\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n"
    )
    instrumented.write("test_eval.py", ASYNC_TEST)
    result, report = instrumented.run_report("-p", "asyncio", "--eval")
    result.assert_outcomes(passed=len(LABELS))
    check_run(instrumented, report, llm_calls=2)


def test_otel_spans_of_async_tests_in_threads(instrumented: Project) -> None:
    pytest.importorskip("genai_prices", reason=extra_reason("cost", "genai_prices"))
    instrumented.write("test_eval.py", ASYNC_TEST)
    result, report = instrumented.run_report("--eval", "--eval-threads=4")
    result.assert_outcomes(passed=len(LABELS))
    check_run(instrumented, report, llm_calls=2)


# An app instrumented as OpenInference's instrumentations do, on a provider it keeps to itself
# (they take ``tracer_provider=``): the processor is added there by hand, in one line.
OPENINFERENCE_APP = """
from opentelemetry.sdk.trace import TracerProvider
from pytest_opik_eval.tracing import SpanProcessor

provider = TracerProvider()
provider.add_span_processor(SpanProcessor())
tracer = provider.get_tracer("app")


def llm(prompt):
    with tracer.start_as_current_span("ChatCompletion") as span:
        span.set_attributes(
            {
                "openinference.span.kind": "LLM",
                "llm.model_name": "claude-sonnet-4",
                "llm.provider": "anthropic",
                "llm.token_count.prompt": 30,
                "llm.token_count.completion": 5,
                "llm.token_count.total": 35,
                "llm.cost.total": 0.25,
                "input.value": '{"messages": [{"role": "user", "content": "' + prompt + '"}]}',
                "input.mime_type": "application/json",
                "output.value": prompt,
                "llm.input_messages.0.message.role": "user",
                "llm.input_messages.0.message.content": prompt,
            }
        )
        return prompt


def retriever(question):
    with tracer.start_as_current_span("lookup") as span:
        span.set_attributes({"openinference.span.kind": "TOOL", "input.value": question})
        return question


def chain(question):
    with tracer.start_as_current_span("chain") as span:
        span.set_attribute("openinference.span.kind", "CHAIN")
        return llm(retriever(question))
"""


def test_openinference_names_are_mapped_on_a_provider_of_the_apps_own(project: Project) -> None:
    project.dataset(
        [{"id": label, "input": {"text": label}, "expected_output": label} for label in LABELS[:3]]
    )
    project.write("app.py", OPENINFERENCE_APP)
    project.eval_test(imports="from app import chain", behaviour='chain(item["input"]["text"])')
    result, report = project.run_report("--eval")
    result.assert_outcomes(passed=3)
    for trial in project.trials():
        label = trial.dataset_item_id
        spans = trial.spans
        assert sorted(tree(spans)) == sorted(
            [
                ("test_qa", None, "general"),
                ("chain", "test_qa", "general"),
                ("lookup", "chain", "tool"),
                ("ChatCompletion", "chain", "llm"),
                ("metrics_calculation", None, "general"),
                ("equals_metric", "metrics_calculation", "general"),
            ]
        )
        llm = next(span for span in spans if span.type == "llm")
        assert (llm.model, llm.provider) == ("claude-sonnet-4", "anthropic")
        assert (llm.prompt_tokens, llm.completion_tokens, llm.total_tokens) == (30, 5, 35)
        assert (llm.total_cost, llm.cost, llm.cost_source) == (0.25, 0.25, "span")  # its own cost stands
        assert llm.input == {"messages": [{"role": "user", "content": label}]}
        assert llm.output == label
        assert llm.metadata == {"openinference.span.kind": "LLM"}
        lookup = next(span for span in spans if span.name == "lookup")
        assert lookup.input == label
    (experiment,) = report["experiments"]
    assert experiment["summary"]["usage"]["app"]["cost"] == pytest.approx(0.75)
    assert experiment["summary"]["usage"]["app"]["total_tokens"] == 105


def test_a_processor_added_by_hand_to_the_global_provider_records_each_span_once(
    instrumented: Project,
) -> None:
    # The user adds one to the global provider the plugin would add one to: not twice.
    instrumented.write(
        "conftest.py",
        EXPORTED
        + """
import app
from pytest_opik_eval.tracing import SpanProcessor

# Two, as a conftest and a shared helper might each add one.
app.provider.add_span_processor(SpanProcessor())
app.provider.add_span_processor(SpanProcessor())
""",
    )
    instrumented.write("test_eval.py", SYNC_TEST)
    instrumented.run("--eval", "--eval-threads=2").assert_outcomes(passed=len(LABELS) + 1)
    for trial in instrumented.trials():
        assert len([span for span in trial.spans if span.type == "llm"]) == 1, trial.dataset_item_id
        assert len(trial.spans) == 8


def test_a_session_without_opentelemetry_never_imports_it(project: Project) -> None:
    project.dataset(
        [{"id": label, "input": {"text": label}, "expected_output": label} for label in LABELS[:2]]
    )
    project.eval_test(
        imports="import sys",
        behaviour='assert not {"opentelemetry", "pytest_opik_eval.run.otel"} & set(sys.modules), sorted(sys.modules)',
    )
    # In a process of its own: this one has imported OpenTelemetry.
    project.pytester.runpytest_subprocess("--eval").assert_outcomes(passed=2)
    assert [trial.spans for trial in project.trials()] == [[], []]


# OpenTelemetry inside @opik.track (an app tracked with Opik whose LLM client is instrumented
# with OpenTelemetry); its provider set in the first task call, as a lazy setup does.
MIXED_APP = """
import opik
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

tracer = trace.get_tracer("app")  # a proxy until the provider is set


def setup_once():
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        trace.set_tracer_provider(TracerProvider())


@opik.track
def agent(question):
    setup_once()
    with tracer.start_as_current_span("chat") as span:
        span.set_attributes({"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o-mini"})
    return question
"""


def test_otel_spans_nest_under_opik_spans_once_the_app_sets_its_provider(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    offline_opik(project, monkeypatch)
    project.dataset(
        [{"id": label, "input": {"text": label}, "expected_output": label} for label in LABELS[:3]]
    )
    project.write("app.py", MIXED_APP)
    project.eval_test(imports="from app import agent", behaviour='agent(item["input"]["text"])')
    project.run("--eval").assert_outcomes(passed=3)
    trials = sorted(project.trials(), key=lambda trial: trial.spans[0].start_time or "")
    # The first trial set the provider inside its task: the processor joins for the next ones.
    assert [sorted(tree(trial.spans)) for trial in trials[1:]] == [
        sorted(
            [
                ("test_qa", None, "general"),
                ("agent", "test_qa", "general"),
                ("chat", "agent", "llm"),
                ("metrics_calculation", None, "general"),
                ("equals_metric", "metrics_calculation", "general"),
            ]
        )
    ] * 2
    assert "chat" not in {span.name for span in trials[0].spans}


def test_otel_spans_reach_the_opik_server_under_each_trials_trace(
    instrumented: Project, opik: OpikTestServer
) -> None:
    instrumented.write("test_eval.py", SYNC_TEST)
    instrumented.run("--eval", "--eval-threads=4").assert_outcomes(passed=len(LABELS) + 1)
    spans = list(opik.spans.values())
    for trace_id in opik.traces:
        mine = [span for span in spans if span["trace_id"] == trace_id]
        names = {span["id"]: span["name"] for span in mine}
        assert sorted(
            (s["name"], names.get(s.get("parent_span_id") or ""), s["type"]) for s in mine
        ) == sorted(
            [
                ("test_qa", None, "general"),
                ("agent", "test_qa", "general"),
                ("flaky call", "agent", "general"),
                ("side work", "agent", "general"),
                ("execute_tool search", "agent", "tool"),
                ("chat gpt-4o-mini", "execute_tool search", "llm"),
                ("metrics_calculation", None, "general"),
                ("equals_metric", "metrics_calculation", "general"),
            ]
        )
        [llm] = [span for span in mine if span["type"] == "llm"]
        assert (llm["model"], llm["provider"]) == ("gpt-4o-mini-2024-07-18", "openai")
        assert (llm["usage"]["prompt_tokens"], llm["usage"]["completion_tokens"]) == (1000, 100)
    assert len(opik.traces) == len(LABELS)
    assert len(spans) == 8 * len(LABELS)  # none orphaned, none twice


def finished(name: str, attributes: dict[str, Any]) -> Any:
    """One span, ended, as a span processor's ``on_end`` gets it."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exported = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    with provider.get_tracer("test").start_as_current_span(name) as span:
        span.set_attributes(attributes)
    (ended,) = exported.get_finished_spans()
    return ended


@pytest.mark.parametrize(
    ("attributes", "metadata"),
    [
        (
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "refund",
                "gen_ai.tool.call.id": "call_9",
                "gen_ai.tool.call.arguments": '{"id": 7}',
                "gen_ai.tool.call.result": '{"ok": true}',
            },
            {
                "gen_ai.tool.name": "refund",
                "gen_ai.tool.call.id": "call_9",
            },
        ),
        (
            {
                "openinference.span.kind": "TOOL",
                "tool.name": "refund",
                "input.value": '{"id": 7}',
                "output.value": '{"ok": true}',
            },
            {"tool.name": "refund"},
        ),
        (
            {
                "traceloop.span.kind": "tool",
                "traceloop.entity.name": "refund",
                # As OpenLLMetry's @tool writes it: the arguments as args and kwargs.
                "traceloop.entity.input": '{"args": [], "kwargs": {"id": 7}}',
                "traceloop.entity.output": '{"ok": true}',
            },
            {"traceloop.entity.name": "refund"},
        ),
    ],
    ids=["semconv", "openinference", "openllmetry"],
)
def test_a_tool_span_is_named_after_its_tool_with_its_arguments_and_result(
    attributes: dict[str, Any], metadata: dict[str, Any]
) -> None:
    # More attributes than the metadata keeps, sorted before the tool's own: the tool's stay.
    many = {f"app.detail.{i:03}": i for i in range(otel.MAX_METADATA_KEYS + 10)}
    params = otel.span_params(finished("execute_tool refund", {**many, **attributes}), "s", "t", "p")
    assert (params["name"], params["type"], params["input"], params["output"]) == (
        "refund",
        "tool",
        {"id": 7},
        {"ok": True},
    )
    assert len(params["metadata"]) <= otel.MAX_METADATA_KEYS + len(metadata)
    assert {key: params["metadata"].get(key) for key in metadata} == metadata


def test_a_chat_span_with_indexed_tool_calls_gathers_them() -> None:
    attributes = {
        "llm.request.type": "chat",
        "gen_ai.completion.0.role": "assistant",
        "gen_ai.completion.0.tool_calls.0.id": "call_1",
        "gen_ai.completion.0.tool_calls.0.name": "search",
        "gen_ai.completion.0.tool_calls.0.arguments": '{"q": "x"}',
        "gen_ai.completion.0.tool_calls.1.name": "refund",
        "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "ignored: one source is enough",
    }
    params = otel.span_params(finished("openai.chat", attributes), "s", "t", "p")
    assert params["type"] == "llm"
    assert params["output"] == [
        {
            "role": "assistant",
            "tool_calls": [{"id": "call_1", "name": "search", "arguments": '{"q": "x"}'}, {"name": "refund"}],
        }
    ]
    openinference = {
        "openinference.span.kind": "LLM",
        "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.tool_calls.0.tool_call.id": "call_2",
        "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "refund",
        "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": "{}",
    }
    params = otel.span_params(finished("ChatCompletion", openinference), "s", "t", "p")
    assert params["output"] == [
        {"role": "assistant", "tool_calls": [{"id": "call_2", "name": "refund", "arguments": "{}"}]}
    ]
