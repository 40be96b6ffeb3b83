"""An agent with no instrumentation at all (no Opik SDK, no OpenTelemetry, no manual spans): a
plain ``openai``, ``anthropic`` or ``google-genai`` client in a loop with three tools (search, fetch_order,
refund; delete_account forbidden), against the local fakes of tests/fake_batches.py, whose model
follows the tool plan in the item's input. Its model calls become LLM spans of the trial, made
from the HTTP answers (--eval-llm-spans), so the trajectory metrics read the tool calls the
model asked for: a right trajectory passes; a wrong order, a missing call, a forbidden call and a
loop past the step limit each fail with a reason that names the difference; the same with the
calls recorded, then replayed strictly offline; never twice with ``track_openai``."""

from __future__ import annotations

import importlib.util
import json
from typing import Any

import pytest
from conftest import NEEDS_RECORD, Project, extra_reason, installed, offline_opik
from fake_batches import REDACTED_THINKING_TRIGGER, FakeAnthropic, FakeGemini, FakeOpenAI, FakeProvider
from trajectories import EXPECTED, check_five_cases, reasons

pytestmark = NEEDS_RECORD

# The loop's StepCount reason: the model's requests, one per answer.
LOOP = "8 tool calls > 5 (search x8)"

CALLS = {
    "search": 'search{"q": "order 7"}',
    "fetch_order": 'fetch_order{"id": 7}',
    "refund": 'refund{"id": 7, "amount": 20}',
    "delete_account": 'delete_account{"id": 7}',
}
# Each item's plan: the calls the fake model asks for, one per answer, then its text answer.
PLANS = {
    "right": ["search", "fetch_order", "refund"],
    "wrong_order": ["fetch_order", "search", "refund"],
    "missing": ["search", "refund"],
    "forbidden": ["search", "fetch_order", "delete_account", "refund"],
}


def plan_text(label: str) -> str:
    if label == "loop":  # the model asks for a search forever; the agent gives up after 8 steps
        return f"Refund order 7. PLAN: LOOP {CALLS['search']}"
    return "Refund order 7. PLAN: " + " > ".join(CALLS[name] for name in PLANS[label]) + " > DONE"


# The agent: a plain client, a loop of model calls, each tool the model asks for run untraced.
APP = """
import json
import os

{imports}

STREAM = {stream}
SCHEMA = {{"type": "object", "properties": {{}}, "additionalProperties": True}}
NAMES = ["search", "fetch_order", "refund", "delete_account"]


def search(q):
    return ["order 7"]


def fetch_order(id):
    return {{"id": id, "total": 20}}


def refund(id, amount):
    return "refunded"


def delete_account(id):
    return "deleted"


TOOLS = {{"search": search, "fetch_order": fetch_order, "refund": refund, "delete_account": delete_account}}

{agent}
"""

OPENAI_AGENT = """
def ask(client, **params):
    if not STREAM:
        return client.chat.completions.create(**params)
    # Usage in a stream only when asked for, as OpenAI sends it.
    with client.chat.completions.stream(**params, stream_options={{"include_usage": True}}) as stream:
        return stream.get_final_completion()


def agent(prompt):
    # Closed at the end, or its connection is left to the garbage collector (a ResourceWarning).
    with {client} as client:
        return loop(client, prompt)


def loop(client, prompt):
    tools = [{{"type": "function", "function": {{"name": n, "parameters": SCHEMA}}}} for n in NAMES]
    messages = [{{"role": "user", "content": prompt}}]
    for _ in range(8):
        answer = ask(client, model="gpt-4o-mini", messages=messages, tools=tools)
        message = answer.choices[0].message
        if not message.tool_calls:
            return message.content
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            result = TOOLS[call.function.name](**json.loads(call.function.arguments))
            messages.append({{"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)}})
    return "gave up"
"""

ANTHROPIC_AGENT = """
def ask(client, **params):
    params.update(THINKING)
    if not STREAM:
        return client.messages.create(**params)
    with client.messages.stream(**params) as stream:
        return stream.get_final_message()


def agent(prompt):
    with anthropic.Anthropic(base_url=os.environ["FAKE_ANTHROPIC_URL"], api_key=os.environ["FAKE_ANTHROPIC_KEY"]) as client:
        return loop(client, prompt)


def loop(client, prompt):
    tools = [{"name": n, "input_schema": SCHEMA} for n in NAMES]
    messages = [{"role": "user", "content": prompt}]
    for _ in range(8):
        answer = ask(client, model="claude-sonnet-4-5", max_tokens=100, messages=messages, tools=tools)
        uses = [block for block in answer.content if block.type == "tool_use"]
        if not uses:
            return next(block.text for block in answer.content if block.type == "text")
        messages.append({"role": "assistant", "content": [block.model_dump() for block in answer.content]})
        results = [
            {"type": "tool_result", "tool_use_id": use.id, "content": json.dumps(TOOLS[use.name](**use.input))}
            for use in uses
        ]
        messages.append({"role": "user", "content": results})
    return "gave up"
"""

GEMINI_AGENT = """
from google.genai import types


def ask(client, **params):
    if not STREAM:
        return client.models.generate_content(**params).candidates[0].content.parts
    # A streamed answer's parts, chunk after chunk, as the app puts them together.
    stream = client.models.generate_content_stream(**params)
    return [part for chunk in stream for part in chunk.candidates[0].content.parts]


def agent(prompt):
    # Its key and base URL from the environment, as a user's app makes it.
    with genai.Client() as client:
        return loop(client, prompt)


def loop(client, prompt):
    declarations = [types.FunctionDeclaration(name=n, parameters_json_schema=SCHEMA) for n in NAMES]
    config = types.GenerateContentConfig(
        tools=[types.Tool(function_declarations=declarations)],
        thinking_config=types.ThinkingConfig(thinking_budget=64, include_thoughts=True),
    )
    contents = [types.Content(role="user", parts=[types.Part(text=prompt)])]
    for _ in range(8):
        parts = ask(client, model="gemini-2.5-flash", contents=contents, config=config)
        calls = [part.function_call for part in parts if part.function_call]
        if not calls:
            return "".join(part.text or "" for part in parts if not part.thought)
        contents.append(types.Content(role="model", parts=parts))
        results = [
            types.Part.from_function_response(name=call.name, response={"result": TOOLS[call.name](**call.args)})
            for call in calls
        ]
        contents.append(types.Content(role="user", parts=results))
    return "gave up"
"""

PLAIN_OPENAI = dict(imports="import openai", client="openai.OpenAI()")
TRACKED_OPENAI = dict(
    imports="import openai\nfrom opik.integrations.openai import track_openai",
    client="track_openai(openai.OpenAI())",
)

TEST = """
import pytest
from pytest_opik_eval.metrics import {metric_names}
from app import agent


@pytest.mark.eval(dataset="data.jsonl", metrics=[{metrics}])
def test_agent(eval_item):
    return agent(eval_item["input"])
"""
TRAJECTORY = "ToolSequence(), ToolNotCalled('delete_account'), StepCount(max_tool_calls=5)"


def agent_project(
    project: Project,
    provider: str,
    *,
    labels: tuple[str, ...] = (*PLANS, "loop"),
    openai_style: dict[str, str] = PLAIN_OPENAI,
    metrics: str = TRAJECTORY,
    stream: bool = False,
    thinking: bool = False,
) -> Project:
    project.dataset(
        [{"id": label, "input": plan_text(label), "expected_tool_calls": EXPECTED} for label in labels]
    )
    if provider == "openai":
        agent = OPENAI_AGENT.format(client=openai_style["client"])
        app = APP.format(imports=openai_style["imports"], agent=agent, stream=stream)
    elif provider == "anthropic":
        app = APP.format(imports="import anthropic", agent=ANTHROPIC_AGENT, stream=stream)
        # Extended thinking: its budget under max_tokens, as Anthropic requires.
        extra = (
            {"max_tokens": 2048, "thinking": {"type": "enabled", "budget_tokens": 1024}} if thinking else {}
        )
        app += f"\nTHINKING = {extra!r}\n"
    else:
        app = APP.format(imports="from google import genai", agent=GEMINI_AGENT, stream=stream)
    project.write("app.py", app)
    names = ", ".join(sorted({name.split("(")[0] for name in metrics.split(", ")}))
    project.write("test_agent.py", TEST.format(metric_names=names, metrics=metrics))
    return project


Fakes = dict[str, FakeProvider]


@pytest.fixture
def fakes(
    fake_openai: FakeOpenAI,
    fake_anthropic: FakeAnthropic,
    fake_gemini: FakeGemini,
    monkeypatch: pytest.MonkeyPatch,
) -> Fakes:
    """Each provider's fake, by name, the apps' clients pointed at them through the environment."""
    monkeypatch.setenv("OPENAI_BASE_URL", fake_openai.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", fake_openai.api_key)
    monkeypatch.setenv("FAKE_ANTHROPIC_URL", fake_anthropic.base_url)
    monkeypatch.setenv("FAKE_ANTHROPIC_KEY", fake_anthropic.api_key)
    # python-genai takes GOOGLE_API_KEY over GEMINI_API_KEY when both are set.
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    monkeypatch.setenv("GEMINI_API_KEY", fake_gemini.api_key)
    monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", fake_gemini.origin)
    return {"openai": fake_openai, "anthropic": fake_anthropic, "gemini": fake_gemini}


def http_spans(project: Project, label: str = "right") -> list[Any]:
    trial = next(t for t in project.trials() if t.dataset_item_id == label)
    return [span for span in trial.spans if span.type == "llm"]


# Each provider's span: its name, its provider (Opik's names), its model, the answer's part kept.
SPANS = {
    "openai": ("chat_completion_create", "openai", "gpt-4o-mini", "choices"),
    "anthropic": ("anthropic_messages_create", "anthropic", "claude-sonnet-4-5", "content"),
    "gemini": ("generate_content: gemini-2.5-flash", "google_ai", "gemini-2.5-flash", "candidates"),
}
# Gemini's thoughts (3 tokens a call, in the fake) are output tokens too.
THOUGHTS = {"gemini": 3}
PROVIDERS = ["openai", "anthropic", "gemini"]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_the_five_trajectories_of_an_agent_with_no_instrumentation(
    project: Project, fakes: Fakes, provider: str
) -> None:
    agent_project(project, provider)
    result, report = project.run_report("--eval")
    check_five_cases(result, report, calls="requested", loop=LOOP)
    assert "eval notices" not in result.stdout.str()
    # Each model call is an LLM span made from its answer: four for the right plan (three calls,
    # then the text), with the model, the provider and the usage the answer reported.
    spans = http_spans(project)
    assert len(spans) == 4
    first = spans[0]
    assert first.metadata is not None
    assert first.metadata["source"] == "http"
    name, provider_name, model, kept = SPANS[provider]
    assert (first.name, first.provider, first.model) == (name, provider_name, model)
    assert first.prompt_tokens == 10
    assert first.completion_tokens == 5 + THOUGHTS.get(provider, 0)
    # Its input is the request, its output the answer's part that the SDK's integration logs.
    assert first.input is not None
    assert "tools" in first.input
    assert first.output is not None
    assert list(first.output) == [kept]
    (experiment,) = report["experiments"]
    right = next(t for t in experiment["trials"] if t["dataset_item_id"] == "right")
    assert right["usage"]["app"]["prompt_tokens"] == sum(span.prompt_tokens or 0 for span in spans)
    if installed("genai_prices"):  # the cost extra: priced from its price table
        assert right["usage"]["app"]["cost"] > 0


@pytest.mark.parametrize("provider", PROVIDERS)
def test_streamed_answers_are_put_together(project: Project, fakes: Fakes, provider: str) -> None:
    # The app streams each answer (the SDKs' stream helpers); the tool calls come in fragments.
    agent_project(project, provider, stream=True)
    result, report = project.run_report("--eval")
    check_five_cases(result, report, calls="requested", loop=LOOP)
    (first, *_, last) = http_spans(project)
    assert first.prompt_tokens == 10
    assert first.completion_tokens == 5 + THOUGHTS.get(provider, 0)
    assert first.output is not None
    if provider == "openai":
        (call,) = first.output["choices"][0]["message"]["tool_calls"]
        assert call["function"] == {"name": "search", "arguments": '{"q": "order 7"}'}
    elif provider == "anthropic":
        (block,) = first.output["content"]
        assert (block["type"], block["name"], block["input"]) == ("tool_use", "search", {"q": "order 7"})
    else:
        # The thought and the call, each a part; the text streamed in two chunks joined.
        (candidate,) = first.output["candidates"]
        assert candidate["content"]["parts"] == [
            {"text": "Thinking about the plan.", "thought": True},
            {"functionCall": {"name": "search", "args": {"q": "order 7"}}},
        ]
        assert candidate["finishReason"] == "STOP"
        assert last.output is not None
        (candidate,) = last.output["candidates"]
        assert [part["text"] for part in candidate["content"]["parts"]] == [
            "Thinking about the plan.",
            "answer to ",
        ]


def test_an_anthropic_stream_keeps_the_models_thinking(project: Project, fakes: Fakes) -> None:
    # Extended thinking, streamed: each answer's thinking (its text and signature, in deltas) and
    # a redacted thinking block (asked for by Anthropic's test string) stay in the span.
    agent_project(project, "anthropic", labels=("right",), stream=True, thinking=True)
    prompt = f"{REDACTED_THINKING_TRIGGER} {plan_text('right')}"
    project.dataset([{"id": "right", "input": prompt, "expected_tool_calls": EXPECTED}])
    result, report = project.run_report("--eval")
    result.assert_outcomes(passed=1)
    assert fakes["anthropic"].rejected == []  # the blocks passed back as the app got them
    first, *_ = spans = http_spans(project)
    assert len(spans) == 4
    assert first.output is not None
    thinking, redacted, use = first.output["content"]
    assert thinking["type"] == "thinking"
    assert thinking["thinking"] == "Thinking about the plan."
    assert str(thinking["signature"]).startswith("sig_")
    assert redacted["type"] == "redacted_thinking"
    assert str(redacted["data"]).startswith("redacted_")
    assert (use["type"], use["name"], use["input"]) == ("tool_use", "search", {"q": "order 7"})


def test_a_gemini_call_to_an_alias_is_the_span_of_the_model_that_answered(
    project: Project, fakes: Fakes
) -> None:
    # The URL names an alias; the answer's modelVersion the model behind it, which the span names
    # (as track_genai's does) and which is priced: the table's guess for the alias is another's.
    agent_project(project, "gemini", labels=("right",))
    app = project.path / "app.py"
    app.write_text(app.read_text().replace('model="gemini-2.5-flash"', 'model="gemini-flash-latest"'))
    result, report = project.run_report("--eval")
    result.assert_outcomes(passed=1)
    assert {path for path, _ in fakes["gemini"].live_calls} == {"/models/gemini-flash-latest:generateContent"}
    first, *_ = spans = http_spans(project)
    assert {(span.name, span.model) for span in spans} == {
        ("generate_content: gemini-2.5-flash", "gemini-2.5-flash")
    }
    assert first.metadata is not None
    assert "gemini-flash-latest" in first.metadata["url"]
    if installed("genai_prices"):
        from pytest_opik_eval.run.pricing import priced
        from pytest_opik_eval.store.records import SpanRecord

        usage = {"prompt_tokens": first.prompt_tokens, "completion_tokens": first.completion_tokens}
        (alone,) = priced([SpanRecord(id="s", trace_id="t", model="gemini-2.5-flash", usage=usage)])
        assert first.cost == pytest.approx(alone.cost)


KEY_IN_URL_APP = """
import os

import httpx

KEY = "AIza" + "UrlOnly-0123456789abcdefghijklmnop"  # in no environment variable


def agent(prompt):
    # The Gemini API's REST form with the key in the URL (?key=), as its curl examples have it.
    url = os.environ["GOOGLE_GEMINI_BASE_URL"] + "/v1beta/models/gemini-2.5-flash:generateContent?key=" + KEY
    body = {"contents": [{"role": "user", "parts": [{"text": prompt}]}], "tools": [{"functionDeclarations": []}]}
    headers = {"x-goog-api-key": os.environ["GEMINI_API_KEY"]}  # the fake's own check
    answer = httpx.post(url, json=body, headers=headers).raise_for_status().json()
    return answer["candidates"][0]["content"]["parts"][0]
"""


def test_a_gemini_key_in_the_url_stays_out_of_the_span_and_the_recordings(
    project: Project, fakes: Fakes
) -> None:
    project.dataset([{"id": "right", "input": "Refund order 7. PLAN: " + CALLS["search"] + " > DONE"}])
    project.write("app.py", KEY_IN_URL_APP)
    project.write("test_app.py", TEST.format(metric_names="ToolCalled", metrics="ToolCalled('search')"))
    result, report = project.run_report("--eval", "--eval-record=once")
    result.assert_outcomes(passed=1)
    (span,) = http_spans(project)
    assert span.metadata is not None
    assert span.metadata["url"].endswith(":generateContent?key=REDACTED")
    key = b"AIzaUrlOnly-0123456789abcdefghijklmnop"
    # What the plugin wrote (the store, the recordings, the report), not the app's own code.
    written = [
        path
        for path in project.path.rglob("*")
        if path.is_file() and path.name != "app.py" and "__pycache__" not in path.parts
    ]
    assert [path for path in written if key in path.read_bytes()] == []
    assert key.decode() not in json.dumps(report)


RESPONSES_APP = """
import openai


def answer(prompt):
    # Streamed, and cut short by max_output_tokens: the stream ends with response.incomplete.
    with openai.OpenAI() as client, client.responses.stream(
        model="gpt-4o-mini", input=prompt, max_output_tokens=16
    ) as stream:
        (response,) = [e.response for e in stream if e.type in ("response.completed", "response.incomplete")]
    return response.output_text
"""


def test_a_responses_stream_cut_short_keeps_its_output_and_status(project: Project, fakes: Fakes) -> None:
    project.dataset([{"id": "long", "input": " ".join(f"word{n}" for n in range(30))}])
    project.write("app.py", RESPONSES_APP)
    project.write(
        "test_app.py",
        TEST.format(metric_names="StepCount", metrics="StepCount(max_llm_calls=1)").replace(
            "from app import agent", "from app import answer as agent"
        ),
    )
    result, report = project.run_report("--eval", "--eval-llm-spans=on")
    result.assert_outcomes(passed=1)
    (span,) = http_spans(project, "long")
    assert span.output is not None
    (message,) = span.output["output"]
    text = message["content"][0]["text"]
    assert (message["status"], len(text.split())) == ("incomplete", 16)
    assert span.metadata is not None
    assert span.metadata["status"] == "incomplete"
    assert span.metadata["incomplete_details"] == {"reason": "max_output_tokens"}
    assert span.completion_tokens == 16
    (trial,) = report["experiments"][0]["trials"]
    assert trial["output"] == {"output": text}  # what the app got: the text cut short


@pytest.mark.parametrize("provider", PROVIDERS)
def test_recorded_then_replayed_offline_gives_the_same_verdicts(
    project: Project, fakes: Fakes, provider: str
) -> None:
    agent_project(project, provider)
    fake = fakes[provider]
    budget = "--eval-budget=1000k tokens"
    result, report = project.run_report("--eval", "--eval-record=once", budget)
    check_five_cases(result, report, calls="requested", loop=LOOP)
    assert report["budget"]["spent"] > 0  # the calls sent count against the budget...
    sent = len(fake.live_calls)
    assert sent == 4 + 4 + 3 + 5 + 8  # right, wrong_order, missing, forbidden, loop
    # Strict replay: nothing is sent, every answer comes from the recordings, the spans with them.
    result, report = project.run_report("--eval", "--eval-record=none", budget)
    check_five_cases(result, report, calls="requested", loop=LOOP)
    assert report["budget"]["spent"] == 0  # ...the replayed ones, which cost nothing, do not
    assert len(fake.live_calls) == sent
    result.stdout.fnmatch_lines(
        [
            "*eval budget: the trials that ran spent nothing, so the budget of 1,000,000 tokens counted "
            "nothing: the 24 calls they made were replayed from the recordings (--eval-record=none), "
            "which costs nothing; a call sent (a judge's) counts when a span reports it: *",
            "*eval recordings (--eval-record=none): 24 replayed, 0 recorded, 0 missed*",
        ]
    )
    assert len(http_spans(project)) == 4
    for path in (project.path / ".opik-eval" / "recordings").rglob("*"):  # no key was written
        assert not path.is_file() or fake.api_key.encode() not in path.read_bytes(), path


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_streamed_answers_replayed_on_threads_make_the_spans_they_were_recorded_with(
    project: Project, fakes: Fakes, provider: str
) -> None:
    # Four trials at a time, each putting its streamed answers together as they replay.
    agent_project(project, provider, stream=True)
    threads = "--eval-threads=4"
    result, report = project.run_report("--eval", "--eval-record=once", threads)
    check_five_cases(result, report, calls="requested", loop=LOOP, in_order=False)

    def spans() -> dict[str, list[tuple[Any, ...]]]:
        return {
            label: [
                (s.name, s.output, s.prompt_tokens, s.completion_tokens) for s in http_spans(project, label)
            ]
            for label in (*PLANS, "loop")
        }

    recorded = spans()
    budget = "--eval-budget=1000k tokens"
    result, report = project.run_report("--eval", "--eval-record=none", threads, budget)
    check_five_cases(result, report, calls="requested", loop=LOOP, in_order=False)
    assert spans() == recorded
    assert report["recordings"]["replayed"] == 24
    assert report["budget"]["spent"] == 0  # each span's usage taken off as saved, as without threads


def test_a_call_track_openai_traces_is_not_counted_twice(
    project: Project, fakes: Fakes, monkeypatch: pytest.MonkeyPatch
) -> None:
    offline_opik(project, monkeypatch)
    agent_project(project, "openai", labels=("right", "forbidden"), openai_style=TRACKED_OPENAI)
    result, report = project.run_report("--eval", "--eval-record=once")
    result.assert_outcomes(passed=1, failed=1)
    assert reasons(report)["forbidden"]["tool_not_called:delete_account"] == (
        'delete_account called 1 time(s): #3 delete_account({"id": 7})'
    )
    # One LLM span per call: track_openai's, open around the HTTP call, and none from its answer.
    spans = http_spans(project)
    assert [span.name for span in spans] == ["chat_completion_create"] * 4
    assert all((span.metadata or {}).get("source") != "http" for span in spans)
    (experiment,) = report["experiments"]
    right = next(t for t in experiment["trials"] if t["dataset_item_id"] == "right")
    assert right["usage"]["app"]["prompt_tokens"] == sum(span.prompt_tokens or 0 for span in spans)
    assert right["usage"]["app"]["spans"] == 4


def test_a_stream_track_genai_traces_is_not_counted_twice(
    project: Project, fakes: Fakes, monkeypatch: pytest.MonkeyPatch
) -> None:
    # track_genai's generate_content_stream makes its call as the app reads the stream, after its
    # span has left the SDK's context: the span made of the HTTP answer is the same call.
    offline_opik(project, monkeypatch)
    agent_project(project, "gemini", labels=("right", "forbidden"), stream=True)
    app = project.path / "app.py"
    plain = "    with genai.Client() as client:\n        return loop(client, prompt)"
    tracked = "    from opik.integrations.genai import track_genai\n\n    return loop(track_genai(genai.Client()), prompt)"
    assert plain in app.read_text()
    app.write_text(app.read_text().replace(plain, tracked))
    result, report = project.run_report("--eval")
    result.assert_outcomes(passed=1, failed=1)
    assert reasons(report)["forbidden"]["tool_not_called:delete_account"] == (
        'delete_account called 1 time(s): #3 delete_account({"id": 7})'
    )
    spans = http_spans(project)
    assert [span.name for span in spans] == ["generate_content_stream: gemini-2.5-flash"] * 4
    assert all((span.metadata or {}).get("source") != "http" for span in spans)
    (experiment,) = report["experiments"]
    right = next(t for t in experiment["trials"] if t["dataset_item_id"] == "right")
    assert right["usage"]["app"]["spans"] == 4
    assert right["usage"]["app"]["prompt_tokens"] == sum(span.prompt_tokens or 0 for span in spans)


def test_only_the_tests_that_read_tool_calls_make_spans_unless_asked(project: Project, fakes: Fakes) -> None:
    # A test without trajectory metrics: its model calls make no span (auto), and the budget,
    # which counts spans, sees nothing and says how it would...
    agent_project(project, "openai", labels=("right",), metrics="Equals()")
    budget = "--eval-budget=1000k tokens"
    result, report = project.run_report("--eval", budget)
    result.assert_outcomes(failed=1)  # Equals has no reference: the score fails, as it would anyway
    assert http_spans(project) == []
    assert report["budget"]["spent"] == 0
    result.stdout.fnmatch_lines(
        ["*eval budget: the trials that ran reported no tokens*=on counts every test's*"]
    )
    # ...unless every test's are asked for: its usage and cost then count too.
    result, report = project.run_report("--eval", "--eval-llm-spans=on", budget)
    spans = http_spans(project)
    assert len(spans) == 4
    assert all(span.prompt_tokens for span in spans)
    assert report["budget"]["spent"] == sum(
        (s.prompt_tokens or 0) + (s.completion_tokens or 0) for s in spans
    )
    assert "eval budget: the trials that ran" not in result.stdout.str()


def test_off_makes_no_span_and_says_how_to_get_the_calls(project: Project, fakes: Fakes) -> None:
    agent_project(project, "openai", labels=("right",))
    result = project.run("--eval", "--eval-llm-spans=off")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*tool_sequence *0 < 1  exact 0.00: missing search (expected #1)*"])
    assert "but the trial has no spans, so they got none" in result.stdout.str()
    assert "--eval-llm-spans" in result.stdout.str()


# One model call inside a span of the app's own that says it is one: a manual LLM span, or an
# OpenTelemetry span started as a GenAI instrumentation starts a chat span.
COVERED_APP = """
import openai
{imports}

TOOLS = [{{"type": "function", "function": {{"name": "search", "parameters": {{"type": "object"}}}}}}]


def agent(prompt):
    with openai.OpenAI() as client, {span}:
        answer = client.chat.completions.create(
            model="gpt-4o-mini", messages=[{{"role": "user", "content": prompt}}], tools=TOOLS
        )
    return answer.choices[0].finish_reason
"""
MANUAL_LLM_SPAN = dict(
    imports="from pytest_opik_eval.tracing import trace",
    span='trace.span("my_chat", type="llm")',
)
OTEL_LLM_SPAN = dict(
    imports="""from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

trace.set_tracer_provider(TracerProvider())
tracer = trace.get_tracer("app")""",
    span='tracer.start_as_current_span("my_chat", attributes={"gen_ai.operation.name": "chat"})',
)


@pytest.mark.parametrize("style", [MANUAL_LLM_SPAN, OTEL_LLM_SPAN], ids=["manual", "otel"])
def test_a_call_inside_an_llm_span_of_the_app_makes_no_second_one(
    project: Project, fakes: Fakes, style: dict[str, str]
) -> None:
    if style is OTEL_LLM_SPAN:
        pytest.importorskip("opentelemetry.sdk.trace", reason=extra_reason("otel", "opentelemetry"))
    project.dataset([{"id": "right", "input": plan_text("right"), "expected_tool_calls": EXPECTED}])
    project.write("app.py", COVERED_APP.format(**style))
    project.write(
        "test_agent.py", TEST.format(metric_names="StepCount", metrics="StepCount(max_llm_calls=1)")
    )
    # In a process of its own: OpenTelemetry's global provider is set once per process.
    result, _ = project.run_report("--eval", subprocess=True)
    result.assert_outcomes(passed=1)
    assert [span.name for span in http_spans(project)] == ["my_chat"]


# -- the answers put together (pure) -----------------------------------------------------------


def answer_of(url: str, body: dict[str, Any]) -> dict[str, Any] | None:
    from pytest_opik_eval.run.llm_responses import assembled, endpoint
    from pytest_opik_eval.store.http_recordings import RecordedRequest, RecordedResponse

    call = {"model": "m", "messages": [], "input": "", "contents": []}  # a model call's, for any endpoint
    found = endpoint(RecordedRequest(method="POST", url=url, body={"json": call}))
    assert found is not None
    return assembled(found, RecordedResponse(status=200, body=body))


def sse(*events: dict[str, Any]) -> dict[str, str]:
    return {"text": "".join(f"data: {json.dumps(event)}\n\n" for event in events) + "data: [DONE]\n\n"}


def test_only_model_calls_are_read() -> None:
    from pytest_opik_eval.run.llm_responses import endpoint
    from pytest_opik_eval.store.http_recordings import RecordedRequest

    chat = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}

    def read(method: str, url: str, body: Any = chat) -> str | None:
        found = endpoint(
            RecordedRequest(method=method, url=url, body=None if body is None else {"json": body})
        )
        return None if found is None else found.name

    assert read("POST", "https://api.openai.com/v1/chat/completions") == "chat_completion_create"
    assert (
        read("POST", "https://api.openai.com/v1/responses", {"model": "gpt-4o", "input": "hi"})
        == "responses_create"
    )
    assert read("POST", "https://api.anthropic.com/v1/messages") == "anthropic_messages_create"
    assert read("GET", "https://api.openai.com/v1/responses/resp_1", None) is None
    assert read("POST", "https://api.anthropic.com/v1/messages/batches", {"requests": []}) is None
    assert read("POST", "https://api.openai.com/v1/embeddings", {"model": "e", "input": "hi"}) is None
    # Other APIs' paths that end alike, whose bodies are no model call's: a tool's own requests.
    assert read("POST", "https://discord.com/api/v10/channels/1/messages", {"content": "done"}) is None
    assert (
        read("POST", "https://api.openai.com/v1/threads/t1/messages", {"role": "user", "content": "x"})
        is None
    )
    assert read("POST", "https://forms.example.com/surveys/9/responses", {"answers": [1]}) is None
    # Gemini's: the model in the path, the body's contents; a batch is no call of its own.
    gemini = "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash"
    contents = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    assert read("POST", f"{gemini}:generateContent", contents) == "generate_content"
    assert read("POST", f"{gemini}:streamGenerateContent?alt=sse", contents) == "generate_content_stream"
    assert read("POST", f"{gemini}:batchGenerateContent", {"batch": {}}) is None
    assert read("POST", f"{gemini}:countTokens", contents) is None
    assert read("POST", "https://example.com/v1/models/x:generateContentNow", contents) is None
    vertex = (
        "https://us-central1-aiplatform.googleapis.com/v1/projects/p/locations/us-central1"
        "/publishers/google/models/gemini-2.5-pro:generateContent"
    )
    found = endpoint(RecordedRequest(method="POST", url=vertex, body={"json": contents}))
    assert found is not None
    assert (found.provider, found.model) == ("google_vertexai", "gemini-2.5-pro")
    # A tuned model: the Gemini API's, and Vertex AI's deployed at an endpoint (its span then
    # named after the answer's model version).
    tuned = "https://generativelanguage.googleapis.com/v1beta/tunedModels/my-model-7:generateContent"
    found = endpoint(RecordedRequest(method="POST", url=tuned, body={"json": contents}))
    assert found is not None
    assert (found.provider, found.name) == ("google_ai", "generate_content")
    deployed = (
        "https://us-central1-aiplatform.googleapis.com/v1/projects/p/locations/us-central1"
        "/endpoints/1234:streamGenerateContent?alt=sse"
    )
    found = endpoint(RecordedRequest(method="POST", url=deployed, body={"json": contents}))
    assert found is not None
    assert (found.provider, found.name) == ("google_vertexai", "generate_content_stream")


def test_parallel_tool_calls_streamed_in_fragments_are_joined_by_index() -> None:
    chunk = {"id": "chatcmpl-1", "model": "gpt-4o-mini"}

    def delta(**fields: Any) -> dict[str, Any]:
        return {**chunk, "choices": [{"index": 0, "delta": fields, "finish_reason": None}]}

    body = sse(
        delta(role="assistant", content=None),
        delta(tool_calls=[{"index": 0, "id": "call_a", "function": {"name": "search", "arguments": ""}}]),
        delta(
            tool_calls=[{"index": 1, "id": "call_b", "function": {"name": "refund", "arguments": '{"id"'}}]
        ),
        delta(tool_calls=[{"index": 0, "function": {"arguments": '{"q": "x"}'}}]),
        delta(tool_calls=[{"index": 1, "function": {"arguments": ": 7}"}}]),
        {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
    )
    answer = answer_of("https://api.openai.com/v1/chat/completions", body)
    assert answer is not None
    (choice,) = answer["choices"]
    assert choice["finish_reason"] == "tool_calls"
    assert [
        (c["id"], c["function"]["name"], c["function"]["arguments"]) for c in choice["message"]["tool_calls"]
    ] == [
        ("call_a", "search", '{"q": "x"}'),
        ("call_b", "refund", '{"id": 7}'),
    ]


def test_a_responses_stream_is_its_completed_response() -> None:
    completed = {
        "id": "resp_1",
        "output": [{"type": "function_call", "call_id": "c", "name": "search", "arguments": "{}"}],
    }
    body = sse(
        {"type": "response.created", "response": {"id": "resp_1", "output": []}},
        {"type": "response.completed", "response": completed},
    )
    assert answer_of("https://api.openai.com/v1/responses", body) == completed


def test_a_responses_stream_that_failed_keeps_its_output_and_status() -> None:
    failed = {
        "id": "resp_1",
        "status": "failed",
        "error": {"code": "server_error", "message": "The model failed."},
        "output": [{"type": "message", "content": [{"type": "output_text", "text": "Half an"}]}],
    }
    body = sse(
        {"type": "response.created", "response": {"id": "resp_1", "status": "in_progress", "output": []}},
        {"type": "response.failed", "response": failed},
    )
    assert answer_of("https://api.openai.com/v1/responses", body) == failed


def test_a_gemini_stream_is_its_chunks_parts_joined() -> None:
    def chunk(*parts: dict[str, Any], **fields: Any) -> dict[str, Any]:
        candidate = {"content": {"role": "model", "parts": list(parts)}, "index": 0}
        return {"candidates": [candidate | fields], "modelVersion": "gemini-2.5-flash", "responseId": "r1"}

    call = {"functionCall": {"name": "search", "args": {"q": "x"}}}
    body = sse(
        chunk({"text": "Let me ", "thought": True}),
        chunk({"text": "think.", "thought": True, "thoughtSignature": "c2ln"}),
        chunk({"text": "Look"}),
        chunk({"text": "ing."}, call),
        chunk(finishReason="STOP") | {"usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 4}},
    )
    answer = answer_of(
        "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
        body,
    )
    assert answer is not None
    (candidate,) = answer["candidates"]
    assert candidate["content"]["parts"] == [
        {"text": "Let me think.", "thought": True, "thoughtSignature": "c2ln"},
        {"text": "Looking."},
        call,
    ]
    assert candidate["finishReason"] == "STOP"
    assert (answer["responseId"], answer["usageMetadata"]["candidatesTokenCount"]) == ("r1", 4)


def test_a_gemini_stream_without_sse_is_its_json_arrays_chunks_joined() -> None:
    # Without alt=sse (a plain HTTP client's call), Gemini streams its chunks as one JSON array.
    chunks = [
        {"candidates": [{"content": {"role": "model", "parts": [{"text": "Look"}]}, "index": 0}]},
        {
            "candidates": [
                {
                    "content": {
                        "role": "model",
                        "parts": [{"functionCall": {"name": "search", "args": {"q": "x"}}}],
                    },
                    "finishReason": "STOP",
                    "index": 0,
                }
            ],
            "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 4, "totalTokenCount": 7},
            "modelVersion": "gemini-2.5-flash",
        },
    ]
    url = "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:streamGenerateContent"
    answer = answer_of(url, {"json": chunks})
    assert answer is not None
    (candidate,) = answer["candidates"]
    assert candidate["content"]["parts"] == [
        {"text": "Look"},
        {"functionCall": {"name": "search", "args": {"q": "x"}}},
    ]
    from pytest_opik_eval.run.http_calls import usage_of
    from pytest_opik_eval.store.http_recordings import RecordedResponse

    usage = usage_of(RecordedResponse(status=200, body={"json": chunks}))
    assert usage is not None
    assert (usage.model, usage.input_tokens, usage.output_tokens) == ("gemini-2.5-flash", 3, 4)


def test_a_function_call_vertex_ai_streams_in_pieces_is_put_together() -> None:
    # streamFunctionCallArguments: the name first, then the arguments as partialArgs (a JSON path
    # and a value, a string in pieces) while willContinue, and an empty call to end the stream.
    def chunk(call: dict[str, Any], **part: Any) -> dict[str, Any]:
        return {"candidates": [{"content": {"role": "model", "parts": [{"functionCall": call, **part}]}}]}

    body = sse(
        chunk({"name": "search", "willContinue": True}, thoughtSignature="c2ln"),
        chunk(
            {
                "partialArgs": [
                    {"jsonPath": "$.q", "stringValue": "order", "willContinue": True},
                    {"jsonPath": "$.filters.ids[0]", "numberValue": 7},
                ],
                "willContinue": True,
            }
        ),
        chunk({"partialArgs": [{"jsonPath": "$.q", "stringValue": " 7"}], "willContinue": True}),
        chunk({"partialArgs": [{"jsonPath": "$.exact", "boolValue": True}]}),
        chunk({}) | {"usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 4}},
    )
    url = (
        "https://us-central1-aiplatform.googleapis.com/v1/projects/p/locations/us-central1"
        "/publishers/google/models/gemini-3-pro-preview:streamGenerateContent?alt=sse"
    )
    answer = answer_of(url, body)
    assert answer is not None
    (candidate,) = answer["candidates"]
    assert candidate["content"]["parts"] == [
        {
            "functionCall": {
                "name": "search",
                "args": {"q": "order 7", "filters": {"ids": [7]}, "exact": True},
            },
            "thoughtSignature": "c2ln",
        }
    ]


CITED = {"type": "char_location", "cited_text": "order 7", "document_index": 0}


def test_an_anthropic_stream_keeps_its_text_and_tool_use_blocks() -> None:
    body = sse(
        {"type": "message_start", "message": {"id": "msg_1", "model": "claude", "content": []}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Let me "}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "look."}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "citations_delta", "citation": CITED}},
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "tool_use", "id": "toolu_1", "name": "search", "input": {}},
        },
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": '{"q": '},
        },
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": '"x"}'},
        },
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}},
    )
    answer = answer_of("https://api.anthropic.com/v1/messages", body)
    assert answer is not None
    assert answer["stop_reason"] == "tool_use"
    assert answer["content"] == [
        {"type": "text", "text": "Let me look.", "citations": [CITED]},
        {"type": "tool_use", "id": "toolu_1", "name": "search", "input": {"q": "x"}},
    ]


def test_an_anthropic_stream_whose_text_block_starts_with_no_citations_keeps_them() -> None:
    # The SDK's TextBlock allows "citations": null at the block's start; its deltas add to it
    # (the answer was put together where the app's call is made: a failure here failed the call).
    body = sse(
        {"type": "message_start", "message": {"id": "msg_1", "model": "claude", "content": []}},
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "text", "text": "", "citations": None},
        },
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Order 7."}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "citations_delta", "citation": CITED}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "citations_delta", "citation": CITED}},
    )
    answer = answer_of("https://api.anthropic.com/v1/messages", body)
    assert answer is not None
    assert answer["content"] == [{"type": "text", "text": "Order 7.", "citations": [CITED, CITED]}]


def test_on_pytest_xdist_workers(project: Project, fakes: Fakes) -> None:
    # Each worker observes its own trials' calls (no --eval-record): the same verdicts.
    agent_project(project, "anthropic")
    result, report = project.run_report("--eval", "-p", "xdist", "-n", "2")
    check_five_cases(
        result, report, calls="requested", loop=LOOP, in_order=False
    )  # the workers' failures come in any order


def test_usage_the_app_reports_after_a_plain_call_is_that_calls_not_a_second_one(
    project: Project, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", fake_openai.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", fake_openai.api_key)
    project.dataset([{"id": "a"}])
    project.write(
        "test_app.py",
        """
        import openai
        import pytest
        from pytest_opik_eval.metrics import StepCount
        from pytest_opik_eval.tracing import trace


        @pytest.mark.eval(dataset="data.jsonl", metrics=[StepCount(max_llm_calls=1)])
        def test_app(eval_item):
            with openai.OpenAI(max_retries=0) as client:
                answer = client.chat.completions.create(
                    model="gpt-4o-mini", messages=[{"role": "user", "content": "hi there"}]
                )
            # As docs/how-to/spans.md shows an uninstrumented app reporting its call's usage.
            trace.usage(model="gpt-4o-mini", input_tokens=answer.usage.prompt_tokens,
                        output_tokens=answer.usage.completion_tokens, cost=0.5)
            return answer.choices[0].message.content
        """,
    )
    result, report = project.run_report("--eval")
    result.assert_outcomes(passed=1)
    (trial,) = report["experiments"][0]["trials"]
    assert trial["usage"]["app"]["spans"] == 1  # the call's span, made of its answer, once
    assert trial["usage"]["app"]["prompt_tokens"] == 2  # the fake counts words: not twice
    assert trial["usage"]["app"]["cost"] == 0.5  # the app's own cost, on that span


def test_tool_calls_streamed_without_an_index_are_told_apart_by_their_ids() -> None:
    from pytest_opik_eval.run.llm_responses import _Choice

    choice = _Choice()
    for delta in (
        {"tool_calls": [{"id": "a", "function": {"name": "search", "arguments": '{"q": '}}]},
        {"tool_calls": [{"function": {"arguments": "1}"}}]},
        {"tool_calls": [{"index": 0, "id": "b", "function": {"name": "refund", "arguments": "{}"}}]},
    ):
        choice.add({"delta": delta})
    calls = choice.made(0)["message"]["tool_calls"]
    assert [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in calls] == [
        ("a", "search", '{"q": 1}'),
        ("b", "refund", "{}"),
    ]


# Two tests, one whose metrics read the tool calls; the other's task says whether vcrpy has
# patched httpx's transport where it runs.
PATCHED_OR_NOT = """
import os

import httpx
import pytest
from pytest_opik_eval.metrics import Equals, ToolSequence


@pytest.mark.eval(dataset="data.jsonl", metrics=[ToolSequence()])
def test_agent(eval_item):
    return "done"


@pytest.mark.eval(dataset="data.jsonl", metrics=[Equals()], scoring_key_mapping={"reference": "input"})
def test_other(eval_item):
    if os.path.exists("fail.txt"):
        raise RuntimeError("not this time")  # the trial stays pending, for a resume
    # vcrpy's stub keeps the name and module of what it wraps, not its code.
    return "vcr" if "/vcr/" in httpx.HTTPTransport.handle_request.__code__.co_filename else "httpx"
"""


@pytest.mark.parametrize("deselect", ["-k", "--deselect"])
def test_a_deselected_test_that_reads_tool_calls_patches_nothing(project: Project, deselect: str) -> None:
    project.dataset([{"id": "a", "input": "httpx", "expected_tool_calls": EXPECTED}])
    project.write("test_app.py", PATCHED_OR_NOT)
    selected = "test_other" if deselect == "-k" else "test_app.py::test_agent"
    result, report = project.run_report("--eval", deselect, selected)
    result.assert_outcomes(passed=1)  # httpx as it is: no recorder was started
    (experiment,) = report["experiments"]
    assert experiment["test"].endswith("test_other")
    # Selected, the test that reads tool calls starts the observing recorder for the session.
    result, report = project.run_report("--eval")
    other = next(e for e in report["experiments"] if e["test"].endswith("test_other"))
    assert other["trials"][0]["output"]["output"] == "vcr"


def test_a_resume_whose_pending_trials_read_no_tool_calls_patches_nothing(project: Project) -> None:
    project.dataset([{"id": "a", "input": "httpx", "expected_tool_calls": EXPECTED}])
    project.write("test_app.py", PATCHED_OR_NOT)
    project.fail()
    project.run("--eval").assert_outcomes(failed=2)  # test_other's trial raised: pending
    project.repair()
    result, report = project.run_report("--eval-resume=last")
    result.assert_outcomes(passed=1)  # only test_other's trial ran, with httpx as it is
    other = next(e for e in report["experiments"] if e["test"].endswith("test_other"))
    assert other["trials"][0]["output"] == {"output": "httpx"}


# A judge of the Opik SDK's (its LiteLLM model, which tracks each completion as an LLM span open
# around the HTTP call) beside an app with no instrumentation.
OPIK_JUDGED_APP = """
import openai
import pytest
from opik.evaluation.models import LiteLLMChatModel
from pytest_opik_eval.metrics import BaseMetric, ScoreResult


class Judge(BaseMetric):
    judge = True

    def __init__(self):
        super().__init__(name="judge", threshold=0.5)
        self.model = LiteLLMChatModel(model_name="openai/gpt-4o-mini")

    def score(self, output, **ignored):
        verdict = self.model.generate_string(f"grade: {output}")
        return ScoreResult(name="judge", value=1.0 if verdict.startswith("answer to grade") else 0.0)


@pytest.mark.eval(dataset="data.jsonl", metrics=[Judge()])
def test_app(eval_item):
    with openai.OpenAI() as client:
        answer = client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": eval_item["input"]}]
        )
    return answer.choices[0].message.content
"""


def test_an_opik_judge_tracked_by_the_sdk_is_counted_once(
    project: Project, fakes: Fakes, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Looked up, not imported: importing litellm in this process changes what later in-process
    # runs find (pytest's entry points among them); the run below is a subprocess of its own.
    if importlib.util.find_spec("litellm") is None:
        pytest.skip("the Opik SDK's LiteLLM model needs litellm")
    offline_opik(project, monkeypatch)
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # offline: its own price table
    # litellm's own warning, when pydantic builds its types: not the plugin's.
    project.pytester.makeini(
        "[pytest]\nfilterwarnings =\n    error\n    ignore:Item .* is using the `ReadOnly` qualifier:UserWarning\n"
    )
    project.dataset([{"id": "a", "input": "question a"}])
    project.write("test_app.py", OPIK_JUDGED_APP)
    # In a process of its own: litellm is slow to import, and patches what it imports.
    result, report = project.run_report("--eval", "--eval-llm-spans=on", subprocess=True)
    result.assert_outcomes(passed=1)
    # The app's call: a span made of its answer; the judge's: the SDK's own, and no second one.
    (trial,) = project.trials()
    calls = [
        (s.name, (s.metadata or {}).get("source"), s.prompt_tokens) for s in trial.spans if s.type == "llm"
    ]
    assert calls == [("chat_completion_create", "http", 2), ("completion", None, 5)]
    usage = report["experiments"][0]["trials"][0]["usage"]
    assert (usage["app"]["prompt_tokens"], usage["judge"]["prompt_tokens"]) == (2, 5)
    assert usage["judge"]["spans"] == 1
