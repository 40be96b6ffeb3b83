"""Agents through the official clients: a small agent loop with three tools (search, fetch_order,
refund; delete_account forbidden) asking a fake model for its next step, through ``openai`` (chat
completions and the Responses API), ``anthropic`` and ``google-genai``, instrumented with the Opik
SDK (``track_openai``/``track_anthropic``/``track_genai``, tools under ``@opik.track(type="tool")`` or not at all) or
with OpenTelemetry alone (spans as the GenAI conventions' instrumentations make them, or
OpenLLMetry's indexed attributes). Each dataset item's input holds the plan the fake model follows
(tests/fake_batches.py: ``tool_plan``): the right trajectory passes; a wrong order, a missing call,
a forbidden call and a loop past the step limit each fail with a reason that names the difference,
in the terminal and in the JSON report."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import Project, extra_reason, installed, offline_opik
from fake_batches import FakeAnthropic, FakeGemini, FakeOpenAI
from trajectories import EXPECTED, check_five_cases, reasons

STEPS = 'search{"q": "order 7"} > fetch_order{"id": 7} > refund{"id": 7, "amount": 20}'
SEARCH, FETCH, REFUND = (step.strip() for step in STEPS.split(">"))
PLANS = {
    "right": f"PLAN: {STEPS} > DONE",
    "wrong_order": f"PLAN: {FETCH} > {SEARCH} > {REFUND} > DONE",
    "missing": f"PLAN: {SEARCH} > {REFUND} > DONE",
    "forbidden": f'PLAN: {SEARCH} > {FETCH} > delete_account{{"id": 7}} > {REFUND} > DONE',
    "loop": f"PLAN: LOOP {SEARCH}",  # the model asks for search forever: the agent stops at 8 steps
}

TEST = """
import pytest
from pytest_opik_eval.metrics import StepCount, ToolNotCalled, ToolSequence
from app import agent


@pytest.mark.eval(
    dataset="data.jsonl",
    metrics=[ToolSequence(), ToolNotCalled("delete_account"), StepCount(max_llm_calls=6, max_tool_calls=5)],
)
def test_agent(eval_item):
    return agent(eval_item["input"])
"""

# The tools, each traced by the Opik SDK ({track}) or not at all.
TOOLS = """
import json
import os

import opik

MAX_STEPS = 8


{track}
def search(q):
    return ["order 7"]


{track}
def fetch_order(id):
    return {{"id": id, "total": 20}}


{track}
def refund(id, amount):
    return "refunded"


{track}
def delete_account(id):
    return "deleted"


TOOLS = {{"search": search, "fetch_order": fetch_order, "refund": refund, "delete_account": delete_account}}
PARAMETERS = {{"type": "object", "properties": {{}}, "additionalProperties": True}}
"""

OPENAI_CHAT = """
import openai
from opik.integrations.openai import track_openai

client = track_openai(openai.OpenAI(base_url=os.environ["FAKE_BASE_URL"], api_key=os.environ["FAKE_KEY"]))
SCHEMAS = [{"type": "function", "function": {"name": name, "parameters": PARAMETERS}} for name in TOOLS]


def agent(question):
    messages = [{"role": "user", "content": question}]
    for _ in range(MAX_STEPS):
        answer = client.chat.completions.create(model="gpt-4.1-mini", messages=messages, tools=SCHEMAS)
        message = answer.choices[0].message
        if not message.tool_calls:
            return message.content
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            result = TOOLS[call.function.name](**json.loads(call.function.arguments))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})
    return "gave up"
"""

OPENAI_RESPONSES = """
import openai
from opik.integrations.openai import track_openai

client = track_openai(openai.OpenAI(base_url=os.environ["FAKE_BASE_URL"], api_key=os.environ["FAKE_KEY"]))
SCHEMAS = [{"type": "function", "name": name, "parameters": PARAMETERS} for name in TOOLS]


def agent(question):
    items = [{"role": "user", "content": question}]
    for _ in range(MAX_STEPS):
        response = client.responses.create(model="gpt-4.1-mini", input=items, tools=SCHEMAS)
        calls = [item for item in response.output if item.type == "function_call"]
        if not calls:
            return response.output_text
        for call in calls:
            result = TOOLS[call.name](**json.loads(call.arguments))
            items.append(call.model_dump(exclude_none=True))
            items.append({"type": "function_call_output", "call_id": call.call_id, "output": json.dumps(result)})
    return "gave up"
"""

ANTHROPIC = """
import anthropic
from opik.integrations.anthropic import track_anthropic

client = track_anthropic(anthropic.Anthropic(base_url=os.environ["FAKE_BASE_URL"], api_key=os.environ["FAKE_KEY"]))
SCHEMAS = [{"name": name, "input_schema": PARAMETERS} for name in TOOLS]


def agent(question):
    messages = [{"role": "user", "content": question}]
    for _ in range(MAX_STEPS):
        answer = client.messages.create(
            model="claude-haiku-4-5", max_tokens=256, messages=messages, tools=SCHEMAS
        )
        uses = [block for block in answer.content if block.type == "tool_use"]
        if not uses:
            return answer.content[0].text
        messages.append({"role": "assistant", "content": [block.model_dump() for block in answer.content]})
        results = [
            {"type": "tool_result", "tool_use_id": use.id, "content": json.dumps(TOOLS[use.name](**use.input))}
            for use in uses
        ]
        messages.append({"role": "user", "content": results})
    return "gave up"
"""

GEMINI = """
from google import genai
from google.genai import types
from opik.integrations.genai import track_genai

client = track_genai(
    genai.Client(api_key=os.environ["FAKE_KEY"], http_options=types.HttpOptions(base_url=os.environ["FAKE_BASE_URL"]))
)
DECLARATIONS = [types.FunctionDeclaration(name=name, parameters_json_schema=PARAMETERS) for name in TOOLS]
CONFIG = types.GenerateContentConfig(tools=[types.Tool(function_declarations=DECLARATIONS)])


def agent(question):
    contents = [types.Content(role="user", parts=[types.Part(text=question)])]
    for _ in range(MAX_STEPS):
        answer = client.models.generate_content(model="gemini-2.5-flash", contents=contents, config=CONFIG)
        calls = answer.function_calls
        if not calls:
            return answer.text
        contents.append(answer.candidates[0].content)
        results = [
            types.Part.from_function_response(name=call.name, response={"result": TOOLS[call.name](**call.args)})
            for call in calls
        ]
        contents.append(types.Content(role="user", parts=results))
    return "gave up"
"""

# The app's client closed when the session ends, as an app closes it when it stops (a client left
# open to the collector would warn, an error in these runs).
CONFTEST = """
import pytest

import app


@pytest.fixture(scope="session", autouse=True)
def close_client():
    yield
    app.client.close()
"""

CLIENTS = {
    "openai-chat": OPENAI_CHAT,
    "openai-responses": OPENAI_RESPONSES,
    "anthropic": ANTHROPIC,
    "gemini": GEMINI,
}
FAKES = {"anthropic": "fake_anthropic", "gemini": "fake_gemini"}


@pytest.fixture(params=list(CLIENTS))
def client_app(
    request: pytest.FixtureRequest, project: Project, monkeypatch: pytest.MonkeyPatch
) -> tuple[Project, str]:
    """The agent project for one client (and the client's name), its fake provider started; the
    app reads where it is from the environment."""
    fake: FakeOpenAI | FakeAnthropic | FakeGemini = request.getfixturevalue(
        FAKES.get(request.param, "fake_openai")
    )
    monkeypatch.setenv("FAKE_BASE_URL", fake.base_url)
    monkeypatch.setenv("FAKE_KEY", fake.api_key)
    offline_opik(project, monkeypatch)
    project.dataset(
        [{"id": label, "input": plan, "expected_tool_calls": EXPECTED} for label, plan in PLANS.items()]
    )
    project.write("test_agent.py", TEST)
    project.write("conftest.py", CONFTEST)
    return project, request.param


def check_agent(result: pytest.RunResult, report: dict[str, Any], calls: str) -> None:
    """The five trajectories, and each model call counted once, however it was instrumented."""
    check_five_cases(result, report, calls=calls, loop="8 tool calls > 5 (search x8); 8 LLM calls > 6")
    assert reasons(report)["right"]["step_count"] == "3 tool calls, 4 LLM calls"


@pytest.mark.parametrize("tools", ["tracked", "untracked"])
def test_the_five_trajectories_through_the_official_clients(
    client_app: tuple[Project, str], tools: str
) -> None:
    project, client = client_app
    track = '@opik.track(type="tool")' if tools == "tracked" else ""
    project.write("app.py", TOOLS.format(track=track) + CLIENTS[client])
    result, report = project.run_report("--eval")
    check_agent(result, report, "executed" if tools == "tracked" else "requested")
    # The provider's call ids reach each call: requested ones from the answers, executed ones
    # lent by the request of their name.
    right = next(t for t in project.trials() if t.dataset_item_id == "right")
    (sequence,) = [span for span in right.spans if span.name == "tool_sequence"]
    scored = sequence.input["tool_calls"]
    assert [call[0] for call in scored] == ["search", "fetch_order", "refund"]
    if client == "gemini":  # the Gemini API's models give their calls no id
        assert [call[3] for call in scored] == [None] * 3
    else:
        assert all(str(call[3]).startswith(("call_", "toolu_")) for call in scored), scored


# -- OpenTelemetry alone ---------------------------------------------------------------------

NEEDS_OTEL = pytest.mark.skipif(
    not installed("opentelemetry.sdk"), reason=extra_reason("otel", "opentelemetry")
)
if installed("opentelemetry.sdk"):
    # Imported once for the module, as in tests/test_otel.py: pytester drops the modules an
    # inner run imported, and a later run would meet the first run's through the package.
    import pytest_opik_eval.run.otel  # noqa: F401


@pytest.fixture
def fresh_global_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    """OpenTelemetry's global provider is set once per process: each inner run's app sets its own."""
    from opentelemetry import trace
    from opentelemetry.util._once import Once

    monkeypatch.setattr(trace, "_TRACER_PROVIDER_SET_ONCE", Once())
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", None)


# The app's telemetry: a global SDK provider; the OpenAI client not instrumented by the Opik SDK.
OTEL = """
import openai
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanKind

trace.set_tracer_provider(TracerProvider())
tracer = trace.get_tracer("agent")
client = openai.OpenAI(base_url=os.environ["FAKE_BASE_URL"], api_key=os.environ["FAKE_KEY"])
SCHEMAS = [{"type": "function", "function": {"name": name, "parameters": PARAMETERS}} for name in TOOLS]


def chat(messages):
    with tracer.start_as_current_span("chat gpt-4.1-mini", kind=SpanKind.CLIENT) as span:
        span.set_attributes({"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4.1-mini"})
        answer = client.chat.completions.create(model="gpt-4.1-mini", messages=messages, tools=SCHEMAS)
        span.set_attributes(output_attributes(answer.choices[0]))
        return answer.choices[0].message


def run_tool(call):
    name, arguments = call.function.name, json.loads(call.function.arguments)
    if not TRACE_TOOLS:
        return TOOLS[name](**arguments)
    with tracer.start_as_current_span(f"execute_tool {name}") as span:
        span.set_attributes(
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": name,
                "gen_ai.tool.call.id": call.id,
                "gen_ai.tool.call.arguments": call.function.arguments,
                # More attributes than the span's metadata keeps: the tool's own must stay.
                **{f"app.detail.{i:02}": i for i in range(70)},
            }
        )
        result = TOOLS[name](**arguments)
        span.set_attribute("gen_ai.tool.call.result", json.dumps(result))
        return result


def agent(question):
    messages = [{"role": "user", "content": question}]
    for _ in range(MAX_STEPS):
        message = chat(messages)
        if not message.tool_calls:
            return message.content
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            result = run_tool(call)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})
    return "gave up"
"""

# The chat span's output as the GenAI conventions' instrumentations set it: one JSON attribute.
SEMCONV = """
def output_attributes(choice):
    message = choice.message
    parts = [{"type": "text", "content": message.content}] if message.content else []
    parts += [
        {"type": "tool_call", "id": call.id, "name": call.function.name, "arguments": json.loads(call.function.arguments)}
        for call in message.tool_calls or ()
    ]
    message = {"role": "assistant", "parts": parts, "finish_reason": choice.finish_reason}
    return {"gen_ai.output.messages": json.dumps([message])}
"""

# As OpenLLMetry sets it: indexed attributes, one per field of each message and tool call.
OPENLLMETRY = """
def output_attributes(choice):
    message = choice.message
    attributes = {"gen_ai.completion.0.role": "assistant", "gen_ai.completion.0.finish_reason": choice.finish_reason}
    if message.content:
        attributes["gen_ai.completion.0.content"] = message.content
    for j, call in enumerate(message.tool_calls or ()):
        attributes[f"gen_ai.completion.0.tool_calls.{j}.id"] = call.id
        attributes[f"gen_ai.completion.0.tool_calls.{j}.name"] = call.function.name
        attributes[f"gen_ai.completion.0.tool_calls.{j}.arguments"] = call.function.arguments
    return attributes
"""


@NEEDS_OTEL
@pytest.mark.usefixtures("fresh_global_provider")
@pytest.mark.parametrize(
    ("style", "trace_tools", "calls"),
    [(SEMCONV, True, "executed"), (SEMCONV, False, "requested"), (OPENLLMETRY, False, "requested")],
    ids=["semconv-tools", "semconv-chat", "openllmetry-chat"],
)
def test_the_five_trajectories_of_an_agent_instrumented_with_opentelemetry_alone(
    project: Project,
    fake_openai: FakeOpenAI,
    monkeypatch: pytest.MonkeyPatch,
    style: str,
    trace_tools: bool,
    calls: str,
) -> None:
    monkeypatch.setenv("FAKE_BASE_URL", fake_openai.base_url)
    monkeypatch.setenv("FAKE_KEY", fake_openai.api_key)
    project.dataset(
        [{"id": label, "input": plan, "expected_tool_calls": EXPECTED} for label, plan in PLANS.items()]
    )
    project.write("test_agent.py", TEST)
    project.write("conftest.py", CONFTEST)
    tools = TOOLS.format(track="").replace("import opik\n", "")
    project.write("app.py", tools + f"TRACE_TOOLS = {trace_tools}\n" + OTEL + style)
    result, report = project.run_report("--eval")
    check_agent(result, report, calls)
    right = next(t for t in project.trials() if t.dataset_item_id == "right")
    (sequence,) = [span for span in right.spans if span.name == "tool_sequence"]
    scored = sequence.input["tool_calls"]
    assert all(str(call[3]).startswith("call_") for call in scored), scored  # the provider's ids
    if trace_tools:
        # A tool span named after its tool, its arguments and result decoded, its call kept
        # whatever the number of other attributes.
        fetch = next(span for span in right.spans if span.name == "fetch_order")
        assert (fetch.type, fetch.input, fetch.output) == ("tool", {"id": 7}, {"id": 7, "total": 20})
        assert fetch.metadata is not None
        assert fetch.metadata["gen_ai.tool.name"] == "fetch_order"
        assert str(fetch.metadata["gen_ai.tool.call.id"]).startswith("call_")
        assert "gen_ai.tool.call.arguments" not in fetch.metadata
