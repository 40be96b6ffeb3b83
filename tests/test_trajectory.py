"""Trajectory metrics over a trial's spans: an agent loop with three tools (and a forbidden one)
whose "model" is a scripted local function, its tools instrumented with the manual API, with the
Opik SDK's ``@track(type="tool")``, or not at all (the tool calls read from an LLM span's
OpenAI-shaped answer). A right trajectory passes; a wrong order, a missing call, a forbidden call
and a loop past the step limit each fail with a reason that names the difference, in the terminal
and in the JSON report. Plus pure tests of the extraction and of the four sequence modes."""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from typing import Any

import pytest
from conftest import Project, offline_opik
from trajectories import EXPECTED, RIGHT, check_five_cases, reasons

from pytest_opik_eval.metrics import (
    LLMCall,
    MetricComputationError,
    StepCount,
    ToolArgs,
    ToolCall,
    ToolCalled,
    ToolNotCalled,
    ToolSequence,
)
from pytest_opik_eval.metrics.tool_calls import as_calls, extract
from pytest_opik_eval.store.records import SpanRecord

# Each item's plan: the tool calls the scripted model asks for, one per turn, then its answer.
PLANS = {
    "right": RIGHT,
    "wrong_order": [RIGHT[1], RIGHT[0], RIGHT[2]],
    "missing": [RIGHT[0], RIGHT[2]],
    "forbidden": [RIGHT[0], RIGHT[1], ["delete_account", {"id": 7}], RIGHT[2]],
    "loop": [RIGHT[0]] * 7 + [RIGHT[1], RIGHT[2]],
}

# The agent: a loop asking the scripted model for the next step, running the tool it names.
# {tool} wraps a tool's run; {answer} records the model's answer (requested calls only).
AGENT = """
import json

{imports}


def model(plan, step):
    # A scripted model: the plan's next tool call, as OpenAI's chat completions shape it.
    if step < len(plan):
        name, arguments = plan[step]
        call = {{"id": f"call_{{step}}", "type": "function",
                "function": {{"name": name, "arguments": json.dumps(arguments)}}}}
        message = {{"role": "assistant", "content": None, "tool_calls": [call]}}
    else:
        message = {{"role": "assistant", "content": "refunded"}}
    return {{"choices": [{{"index": 0, "message": message}}]}}


{tools}


TOOLS = {{"search": search, "fetch_order": fetch_order, "refund": refund, "delete_account": delete_account}}


def agent(plan):
    step = 0
    while True:
        answer = model(plan, step)
        {answer}
        message = answer["choices"][0]["message"]
        if not message.get("tool_calls"):
            return message["content"]
        for call in message["tool_calls"]:
            {run}
        step += 1
"""

MANUAL = dict(
    imports="from pytest_opik_eval.tracing import trace",
    tools="""
def tool(name):
    def run(**arguments):
        with trace.span(name, type="tool", input=arguments) as span:
            span.output = {"ok": name}
            return span.output
    return run


search, fetch_order, refund, delete_account = map(tool, ["search", "fetch_order", "refund", "delete_account"])
""",
    answer="pass",
    run='TOOLS[call["function"]["name"]](**json.loads(call["function"]["arguments"]))',
)

SDK = dict(
    imports="import opik",
    tools="""
@opik.track(type="tool")
def search(q):
    return ["order 7"]


@opik.track(type="tool")
def fetch_order(id):
    return {"id": id}


@opik.track(type="tool")
def refund(id, amount):
    return "done"


@opik.track(type="tool")
def delete_account(id):
    return "deleted"
""",
    answer="pass",
    run='TOOLS[call["function"]["name"]](**json.loads(call["function"]["arguments"]))',
)

# No tool spans: the tools run untraced; each model answer is an LLM span, as track_openai logs one.
REQUESTED = dict(
    imports="from pytest_opik_eval.tracing import trace",
    tools="""
def search(q):
    return ["order 7"]


def fetch_order(id):
    return {"id": id}


def refund(id, amount):
    return "done"


def delete_account(id):
    return "deleted"
""",
    answer="""with trace.span("chat.completions", type="llm") as span:
            span.output = {"choices": answer["choices"]}""",
    run='TOOLS[call["function"]["name"]](**json.loads(call["function"]["arguments"]))',
)

TEST = """
import pytest
from pytest_opik_eval.metrics import StepCount, ToolNotCalled, ToolSequence
from app import agent


@pytest.mark.eval(
    dataset="data.jsonl",
    metrics=[ToolSequence(), ToolNotCalled("delete_account"), StepCount(max_tool_calls=5)],
    {marker}
)
def test_agent(eval_item):
    return agent(eval_item["plan"])
"""


def agent_project(
    project: Project, style: dict[str, str], *, field: str = "expected_tool_calls", marker: str = ""
) -> Project:
    project.dataset([{"id": label, "plan": plan, field: EXPECTED} for label, plan in PLANS.items()])
    project.write("app.py", AGENT.format(**style))
    project.write("test_agent.py", TEST.format(marker=marker))
    return project


@pytest.mark.parametrize(
    ("style", "kind"),
    [(MANUAL, "executed"), (SDK, "executed"), (REQUESTED, "requested")],
    ids=["manual", "sdk", "requested"],
)
def test_the_five_trajectories(
    project: Project, monkeypatch: pytest.MonkeyPatch, style: dict[str, str], kind: str
) -> None:
    if style is SDK:
        offline_opik(project, monkeypatch)
    agent_project(project, style)
    result, report = project.run_report("--eval", "--eval-html=report.html")
    check_five_cases(
        result, report, calls=kind, loop="9 tool calls > 5 (search x7, fetch_order x1, refund x1)"
    )
    # A metric's span keeps the calls it was given (its input), as the store and the reports show it.
    right = next(t for t in project.trials() if t.dataset_item_id == "right")
    (sequence,) = [span for span in right.spans if span.name == "tool_sequence"]
    assert [call[0] for call in sequence.input["tool_calls"]] == ["search", "fetch_order", "refund"]
    assert (project.path / "report.html").exists()


def test_the_expected_trajectory_from_a_mapped_field(project: Project) -> None:
    agent_project(
        project, MANUAL, field="gold", marker='scoring_key_mapping={"expected_tool_calls": "gold"},'
    )
    result, report = project.run_report("--eval", "-k", "right or missing")
    result.assert_outcomes(passed=1, failed=1)
    assert reasons(report)["missing"]["tool_sequence"] == (
        "exact 0.67: missing fetch_order (expected #2); got search -> refund"
    )


def test_no_expected_trajectory_fails_the_score_saying_where_to_put_it(project: Project) -> None:
    agent_project(project, MANUAL, field="unused")
    result, report = project.run_report("--eval", "-k", "right")
    result.assert_outcomes(failed=1)
    reason = reasons(report)["right"]["tool_sequence"]
    assert reason is not None
    assert reason.startswith("MetricComputationError: ToolSequence has no expected trajectory")
    assert "'expected_tool_calls' field" in reason
    result.stdout.fnmatch_lines(
        ["*tool_sequence *scoring failed: MetricComputationError: ToolSequence has no*"]
    )


def test_a_trial_without_spans_gets_no_calls_and_one_notice(project: Project) -> None:
    # No span source imported (no Opik SDK, no manual API): the trial is not traced.
    project.dataset(
        [{"id": "a", "expected_tool_calls": ["search"]}, {"id": "b", "expected_tool_calls": ["search"]}]
    )
    project.write(
        "test_agent.py",
        """
        import pytest
        from pytest_opik_eval.metrics import ToolCalled


        @pytest.mark.eval(dataset="data.jsonl", metrics=[ToolCalled("search")])
        def test_agent(eval_item):
            return "done"
        """,
    )
    # In a process of its own: this one has imported the Opik SDK, which would trace the trial.
    result = project.pytester.runpytest_subprocess("--eval")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*tool_called:search  0 < 1  search not called; calls: no tool calls"])
    text = result.stdout.str()
    assert text.count("but the trial has no spans, so they got none") == 1
    assert '@opik.track(type="tool")' in text


def test_with_the_opik_sdk_imported_a_trial_without_spans_still_gets_the_notice(project: Project) -> None:
    # The Opik SDK's own pytest plugin imports it in every session of a user who has it: the
    # trial is traced, and still the app made no span.
    project.dataset([{"id": "a", "expected_tool_calls": ["search"]}])
    project.write(
        "test_agent.py",
        """
        import opik
        import pytest
        from pytest_opik_eval.metrics import ToolCalled


        @pytest.mark.eval(dataset="data.jsonl", metrics=[ToolCalled("search")])
        def test_agent(eval_item):
            return "done"
        """,
    )
    result = project.run("--eval")
    result.assert_outcomes(failed=1)
    assert result.stdout.str().count("but the trial has no spans, so they got none") == 1


def test_an_item_field_named_tool_calls_is_hidden_and_said_once(project: Project) -> None:
    project.dataset([{"id": label, "tool_calls": ["search"]} for label in ("a", "b")])
    project.write(
        "test_agent.py",
        """
        import pytest
        from pytest_opik_eval.metrics import ToolCalled
        from pytest_opik_eval.tracing import trace


        @pytest.mark.eval(dataset="data.jsonl", metrics=[ToolCalled("search")])
        def test_agent(eval_item):
            with trace.span("refund", type="tool"):
                return "done"
        """,
    )
    result = project.run("--eval")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*tool_called:search  0 < 1  search not called; calls: refund"])
    assert result.stdout.str().count("the items' tool_calls field is not what the metrics get") == 1


def test_the_tool_calls_the_task_returns_win(project: Project) -> None:
    project.dataset([{"id": "a", "expected_tool_calls": ["search", "refund"], "tool_calls": ["ignored"]}])
    project.write(
        "test_agent.py",
        """
        import pytest
        from pytest_opik_eval.metrics import ToolSequence


        @pytest.mark.eval(dataset="data.jsonl", metrics=[ToolSequence(mode="in_order")])
        def test_agent(eval_item):
            return {"output": "done", "tool_calls": [{"name": "search", "arguments": {}}, "log", "refund"]}
        """,
    )
    result, report = project.run_report("--eval")
    result.assert_outcomes(passed=1)
    assert (
        reasons(report)["a"]["tool_sequence"]
        == "in_order 1.00: also called log (#2); got search -> log -> refund"
    )
    assert "eval notices" not in result.stdout.str()


def test_a_mapping_callable_sees_the_computed_calls(project: Project) -> None:
    agent_project(project, MANUAL)
    project.write(
        "test_agent.py",
        """
        import pytest
        from pytest_opik_eval.metrics import Equals
        from app import agent


        @pytest.mark.eval(
            dataset="data.jsonl",
            metrics=[Equals()],
            scoring_key_mapping={"reference": lambda x: " ".join(c.name for c in x["tool_calls"])},
        )
        def test_agent(eval_item):
            agent(eval_item["plan"])
            return "search fetch_order refund"
        """,
    )
    result, report = project.run_report("--eval", "-k", "right or missing")
    result.assert_outcomes(passed=1, failed=1)
    (experiment,) = report["experiments"]
    values = {t["dataset_item_id"]: t["scores"][0]["value"] for t in experiment["trials"]}
    assert values == {"right": 1.0, "missing": 0.0}


def test_a_kwargs_metric_gets_no_computed_input_it_does_not_name(project: Project) -> None:
    # A judge's cache key would hold the span ids, new each run: it would never be found again.
    project.dataset([{"id": "a", "expected_tool_calls": ["search"]}])
    project.write(
        "test_agent.py",
        """
        import pytest
        from pytest_opik_eval.metrics import BaseMetric, ScoreResult, ToolCalled
        from pytest_opik_eval.tracing import trace


        class Keys(BaseMetric):
            def score(self, **kwargs):
                return ScoreResult(self.name, 1.0, " ".join(sorted(kwargs)))


        class Named(BaseMetric):
            def score(self, tool_calls, **kwargs):
                return ScoreResult(self.name, 1.0, " ".join(sorted([*kwargs, "tool_calls"])))


        @pytest.mark.eval(dataset="data.jsonl", metrics=[ToolCalled("search"), Keys(), Named()])
        def test_agent(eval_item):
            with trace.span("search", type="tool"):
                return "done"
        """,
    )
    result, report = project.run_report("--eval")
    result.assert_outcomes(passed=1)
    assert reasons(report)["a"] == {
        "tool_called:search": "search called (#1)",
        "Keys": "expected_tool_calls id output",
        "Named": "expected_tool_calls id output tool_calls",
    }


def test_bad_constructor_arguments_fail_the_collection_naming_the_metric(project: Project) -> None:
    project.dataset([{"id": "a"}])
    project.write(
        "test_agent.py",
        """
        import pytest
        from pytest_opik_eval.metrics import ToolSequence


        @pytest.mark.eval(dataset="data.jsonl", metrics=[ToolSequence(["a"], mode="strict")])
        def test_agent(eval_item):
            return "done"
        """,
    )
    result = project.run("--eval")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*ValueError: ToolSequence: mode must be one of exact, in_order, subset, any_order; got 'strict'"]
    )


def test_a_failed_trajectory_trial_resumed_is_scored_again(project: Project) -> None:
    agent_project(project, MANUAL)
    # The first session's "missing" trial raises in its task: it stays pending.
    app = project.path / "app.py"
    app.write_text(
        app.read_text() + "\n\nimport pathlib\n_agent = agent\n\n\ndef agent(plan):\n"
        "    if len(plan) == 2 and pathlib.Path('crash').exists():\n"
        "        raise RuntimeError('crash')\n"
        "    return _agent(plan)\n"
    )
    (project.path / "crash").write_text("")
    project.run("--eval").assert_outcomes(passed=1, failed=4)
    (project.path / "crash").unlink()
    result, report = project.run_report("--eval-resume=last")
    result.assert_outcomes(failed=1, deselected=4)
    assert reasons(report)["missing"]["tool_sequence"] == (
        "exact 0.67: missing fetch_order (expected #2); got search -> refund"
    )


# The pure parts: the extraction, and the sequence modes.


def openai_answer(*calls: tuple[str, str, str]) -> dict[str, Any]:
    tool_calls = [{"id": i, "type": "function", "function": {"name": n, "arguments": a}} for i, n, a in calls]
    return {"choices": [{"message": {"role": "assistant", "tool_calls": tool_calls}}]}


def span(
    id: str, type: str = "general", parent: str | None = None, start: float = 0.0, **fields: Any
) -> dict[str, Any]:
    return {"id": id, "type": type, "parent_span_id": parent, "start_time": start, **fields}


def test_requested_calls_in_the_three_provider_shapes() -> None:
    spans = [
        span("a", "llm", start=1.0, output=openai_answer(("call_1", "search", '{"q": "x"}'))),
        span(
            "b",
            "llm",
            start=2.0,
            output={
                "content": [
                    {"type": "text", "text": "..."},
                    {"type": "tool_use", "id": "toolu_1", "name": "fetch_order", "input": {"id": 7}},
                ]
            },
        ),
        span(
            "c",
            "llm",
            start=3.0,
            output={
                "output": [
                    {"type": "message"},
                    {
                        "type": "function_call",
                        "call_id": "call_2",
                        "name": "refund",
                        "arguments": '{"id": 7}',
                    },
                ]
            },
        ),
    ]
    calls = extract(spans)
    assert [(c.name, c.arguments, c.id, c.kind, c.span_id) for c in calls.tool_calls] == [
        ("search", {"q": "x"}, "call_1", "requested", "a"),
        ("fetch_order", {"id": 7}, "toolu_1", "requested", "b"),
        ("refund", {"id": 7}, "call_2", "requested", "c"),
    ]
    assert [call.span_id for call in calls.llm_calls] == ["a", "b", "c"]


def test_requested_calls_in_gemini_parts() -> None:
    # A generateContent answer as the wire has it (an HTTP span's), then as track_genai logs
    # google-genai's response (snake case, every field, None where unset).
    wire = {
        "candidates": [
            {
                "content": {
                    "role": "model",
                    "parts": [
                        {"text": "Thinking.", "thought": True},
                        {"functionCall": {"name": "search", "args": {"q": "x"}, "id": "fc_1"}},
                        {"functionCall": {"name": "fetch_order", "args": {"id": 7}}},
                    ],
                }
            }
        ]
    }
    sdk = {
        "candidates": [
            {
                "content": {
                    "role": "model",
                    "parts": [
                        {
                            "text": None,
                            "function_call": {"id": None, "name": "refund", "args": {"id": 7}},
                            "function_response": None,
                        }
                    ],
                },
                "finish_reason": "STOP",
            }
        ]
    }
    calls = extract([span("a", "llm", start=1.0, output=wire), span("b", "llm", start=2.0, output=sdk)])
    assert [(c.name, c.arguments, c.id, c.kind, c.span_id) for c in calls.tool_calls] == [
        ("search", {"q": "x"}, "fc_1", "requested", "a"),
        ("fetch_order", {"id": 7}, None, "requested", "a"),
        ("refund", {"id": 7}, None, "requested", "b"),
    ]
    assert [len(call.tool_calls) for call in calls.llm_calls] == [2, 1]


def test_requested_calls_in_opentelemetry_chat_messages() -> None:
    # A chat span's output as run/otel.py makes it: a list of messages, with the GenAI
    # conventions' tool_call parts, or gathered tool_calls (OpenLLMetry's, OpenInference's).
    spans = [
        span(
            "a",
            "llm",
            start=1.0,
            output=[
                {
                    "role": "assistant",
                    "parts": [
                        {"type": "text", "content": "looking"},
                        {"type": "tool_call", "id": "call_1", "name": "search", "arguments": {"q": "x"}},
                    ],
                    "finish_reason": "tool_call",
                }
            ],
        ),
        span(
            "b",
            "llm",
            start=2.0,
            output=[
                {
                    "role": "assistant",
                    "tool_calls": [{"id": "call_2", "name": "fetch_order", "arguments": '{"id": 7}'}],
                }
            ],
        ),
        span(
            "c",
            "llm",
            start=3.0,
            output=[
                {
                    "role": "assistant",
                    "tool_calls": [{"id": "call_3", "function": {"name": "refund", "arguments": "{}"}}],
                },
                "not a message",
            ],
        ),
    ]
    calls = extract(spans)
    assert [(c.name, c.arguments, c.id, c.span_id) for c in calls.tool_calls] == [
        ("search", {"q": "x"}, "call_1", "a"),
        ("fetch_order", {"id": 7}, "call_2", "b"),
        ("refund", {}, "call_3", "c"),
    ]


def test_an_executed_call_with_its_own_id_takes_the_request_of_that_id() -> None:
    # An OpenTelemetry tool span carries its call id (gen_ai.tool.call.id): the request of that
    # id ran, whatever its position; the other one of the same name did not.
    spans = [
        span(
            "l",
            "llm",
            start=1.0,
            output=openai_answer(("call_1", "search", "{}"), ("call_2", "search", "{}")),
        ),
        span("t", "tool", start=2.0, name="search", metadata={"gen_ai.tool.call.id": "call_2"}),
    ]
    calls = extract(spans)
    assert [(c.name, c.id) for c in calls.tool_calls] == [("search", "call_2")]
    assert [c.id for c in calls.tool_calls.requested_not_run] == ["call_1"]


def test_executed_calls_win_and_borrow_the_requests_ids() -> None:
    spans = [
        span(
            "t2", "tool", start=4.0, name="fetch_order", input={"id": 7}, output={"output": 7}
        ),  # ended first
        span(
            "l1",
            "llm",
            start=1.0,
            output=openai_answer(("call_1", "search", "{}"), ("call_2", "refund", "{}")),
        ),
        span(
            "t1",
            "tool",
            start=2.0,
            name="search",
            input={},
            output={"hits": 1},
            __pytest_opik_eval_from_sdk__=True,
        ),
    ]
    calls = extract(spans)
    assert [(c.name, c.id, c.result, c.source) for c in calls.tool_calls] == [
        ("search", "call_1", {"hits": 1}, "sdk"),
        ("fetch_order", None, 7, "span"),
    ]
    assert [c.name for c in calls.tool_calls.requested_not_run] == ["refund"]
    assert [c.name for c in calls.tool_calls.requested] == ["search", "refund"]


def test_duplicates_and_the_evals_own_spans_do_not_count() -> None:
    answer = openai_answer(("call_1", "search", "{}"))
    spans = [
        span("outer", "llm", start=1.0, output=answer),
        span("inner", "llm", parent="outer", start=1.1, output=answer),  # the same call, seen twice
        span("t", "tool", start=2.0, name="search"),
        span("t-again", "tool", parent="t", start=2.1, name="search"),  # one call, two instrumentations
        span("t-inner", "tool", parent="t", start=2.2, name="rank"),  # a tool the tool called
        span("m", start=3.0, name="metrics_calculation"),
        span("judge", "llm", parent="m", start=3.1, output=openai_answer(("call_9", "grade", "{}"))),
        span("judge-tool", "tool", parent="judge", start=3.2, name="lookup"),
        span("user", start=4.0, name="simulated user", tags=["simulated_user"]),
        span("user-llm", "llm", parent="user", start=4.1, output=openai_answer(("call_8", "ask", "{}"))),
    ]
    calls = extract(spans)
    assert [(c.name, c.span_id) for c in calls.tool_calls] == [("search", "t"), ("rank", "t-inner")]
    assert [c.span_id for c in calls.llm_calls] == ["outer"]
    assert [c.id for c in calls.tool_calls.requested] == ["call_1"]


def test_the_span_names_and_tags_agree_with_those_that_make_the_spans() -> None:
    from pytest_opik_eval.metrics import tool_calls
    from pytest_opik_eval.store import records

    assert tool_calls.SIMULATOR_TAG == records.SIMULATOR_TAG


def test_stored_span_records_give_the_same_calls() -> None:
    def at(seconds: float) -> str:
        return datetime.fromtimestamp(seconds, timezone.utc).isoformat()

    records = [
        SpanRecord(id="t2", trace_id="x", type="tool", name="refund", start_time=at(20), input={"id": 7}),
        SpanRecord(id="t1", trace_id="x", type="tool", name="search", start_time=at(10), input={"q": "x"}),
        SpanRecord(
            id="l", trace_id="x", type="llm", start_time=at(5), output=openai_answer(("c", "search", "{bad"))
        ),
    ]
    calls = extract(records)
    assert [(c.name, c.arguments, c.id) for c in calls.tool_calls] == [
        ("search", {"q": "x"}, "c"),
        ("refund", {"id": 7}, None),
    ]
    assert calls.tool_calls.requested[0].arguments == "{bad"  # not JSON: kept as text


def seq(*names: str) -> list[ToolCall]:
    return [ToolCall(name) for name in names]


@pytest.mark.parametrize(
    ("mode", "actual", "value", "reason"),
    [
        ("exact", "abc", 1.0, "exact 1.00: got a -> b -> c"),
        (
            "exact",
            "acb",
            1 / 3,
            "exact 0.33: moved b (expected #2, got #3); moved c (expected #3, got #2); got a -> c -> b",
        ),
        ("exact", "ac", 2 / 3, "exact 0.67: missing b (expected #2); got a -> c"),
        ("exact", "abxc", 0.75, "exact 0.75: extra x (#3); got a -> b -> x -> c"),
        (
            "exact",
            "",
            0.0,
            "exact 0.00: missing a (expected #1); missing b (expected #2); missing c (expected #3); got no tool calls",
        ),
        (
            "in_order",
            "axbyc",
            1.0,
            "in_order 1.00: also called x (#2); also called y (#4); got a -> x -> b -> y -> c",
        ),
        ("in_order", "acb", 2 / 3, "in_order 0.67: moved b (expected #2, got #3); got a -> c -> b"),
        ("in_order", "ab", 2 / 3, "in_order 0.67: missing c (expected #3); got a -> b"),
        ("subset", "cxba", 1.0, "subset 1.00: also called x (#2); got c -> x -> b -> a"),
        ("subset", "ca", 2 / 3, "subset 0.67: missing b (expected #2); got c -> a"),
        ("any_order", "cba", 1.0, "any_order 1.00: got c -> b -> a"),
        ("any_order", "cbax", 0.75, "any_order 0.75: extra x (#4); got c -> b -> a -> x"),
        ("any_order", "cb", 2 / 3, "any_order 0.67: missing a (expected #1); got c -> b"),
    ],
)
def test_the_sequence_modes(mode: str, actual: str, value: float, reason: str) -> None:
    score = ToolSequence(["a", "b", "c"], mode=mode).score(tool_calls=seq(*actual))
    assert score.value == pytest.approx(value)
    assert score.reason == reason


def test_expected_arguments_are_matched_as_a_subset() -> None:
    calls = [ToolCall("refund", {"id": 7, "amount": 20, "meta": {"by": "bot", "x": 1}})]
    assert (
        ToolSequence([{"name": "refund", "arguments": {"id": 7, "meta": {"by": "bot"}}}])
        .score(tool_calls=calls)
        .value
        == 1.0
    )
    wrong = ToolSequence([{"name": "refund", "arguments": {"id": 8}}]).score(tool_calls=calls)
    assert wrong.value == 0.0
    assert (
        wrong.reason == 'exact 0.00: missing refund({"id": 8}) (expected #1); extra refund (#1); got refund'
    )


def test_metadata_is_bounded() -> None:
    calls = [ToolCall("search", {"q": "x" * 1000})] * 300
    metadata = ToolSequence(["search"], mode="subset").score(tool_calls=calls).metadata
    assert metadata is not None
    assert len(metadata["actual"]) == 200
    assert len(metadata["actual"][0][1]) == 200
    assert len(json.dumps(metadata)) < 100_000


def test_tool_called_args_and_not_called() -> None:
    calls = [ToolCall("search", {"q": "x"}), ToolCall("refund", {"id": 7, "amount": 20})]
    assert ToolCalled("refund", {"id": 7}).score(tool_calls=calls).value == 1.0
    missing = ToolCalled("fetch_order").score(tool_calls=calls)
    assert (missing.value, missing.reason) == (0.0, "fetch_order not called; calls: search -> refund")
    wrong = ToolCalled("refund", {"id": 8}).score(tool_calls=calls)
    assert wrong.reason == 'refund called 1 time(s), never with {"id": 8}: #2 refund({"amount": 20, "id": 7})'
    assert ToolNotCalled("delete_account").score(tool_calls=calls).value == 1.0


def test_tool_args() -> None:
    calls = [ToolCall("refund", {"id": 7, "amount": 20}), ToolCall("refund", {"id": 8, "amount": 5})]
    assert (
        ToolArgs("refund", {"id": 7}).score(tool_calls=calls).reason
        == 'refund: #2 {"amount": 5, "id": 8} != {"id": 7}'
    )
    assert ToolArgs("refund", {"id": 7}).score(tool_calls=calls).value == 0.5
    expected = [{"name": "refund", "arguments": {"id": 7}}, {"name": "refund", "arguments": {"id": 8}}]
    assert ToolArgs("refund").score(tool_calls=calls, expected_tool_calls=expected).value == 1.0
    assert ToolArgs("refund", {"id": 7, "amount": 20}, match="exact").score(tool_calls=calls[:1]).value == 1.0
    assert ToolArgs("refund", {"id": 7}, match="exact").score(tool_calls=calls[:1]).value == 0.0
    small = ToolArgs("refund", match=lambda actual, expected: actual["amount"] < 10)
    assert small.score(tool_calls=calls, expected_tool_calls=expected).value == 0.5
    assert small.score(tool_calls=calls).reason == 'refund: #1 {"amount": 20, "id": 7} refused by match'
    with pytest.raises(MetricComputationError, match="ToolArgs has no expected arguments"):
        ToolArgs("refund").score(tool_calls=calls)
    with pytest.raises(MetricComputationError, match="has no call named 'refund'"):
        ToolArgs("refund").score(tool_calls=calls, expected_tool_calls=["search"])


def test_step_count_counts_llm_and_tool_calls() -> None:
    llm = [LLMCall(f"span-{n}", "chat", "gpt-4o-mini") for n in range(4)]
    calls = seq("search", "search", "refund")
    both = StepCount(max_llm_calls=3, max_tool_calls=2).score(tool_calls=calls, llm_calls=llm)
    assert (both.value, both.reason) == (0.0, "3 tool calls > 2 (search x2, refund x1); 4 LLM calls > 3")
    assert both.metadata == {"tool_calls": 3, "llm_calls": 4}
    within = StepCount(max_llm_calls=4).score(tool_calls=calls, llm_calls=llm)
    assert (within.value, within.reason) == (1.0, "3 tool calls, 4 LLM calls")


def test_which_calls_a_metric_reads() -> None:
    spans = [
        span("l", "llm", start=1.0, output=openai_answer(("call_1", "delete_account", "{}"))),
        span("t", "tool", start=2.0, name="search"),
    ]
    calls = extract(spans).tool_calls
    assert ToolNotCalled("delete_account").score(tool_calls=calls).value == 1.0  # never ran
    assert ToolNotCalled("delete_account", calls="requested").score(tool_calls=calls).value == 0.0


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda: ToolSequence(mode="strict"),
            "ToolSequence: mode must be one of exact, in_order, subset, any_order; got 'strict'",
        ),
        (
            lambda: StepCount(max_tool_calls=-1),
            "StepCount: max_tool_calls must be a whole number >= 0 or None, got -1",
        ),
        (lambda: StepCount(), "StepCount: give max_llm_calls, max_tool_calls or both"),
        (lambda: ToolArgs("x", match="fuzzy"), "ToolArgs: match must be one of subset, exact; got 'fuzzy'"),
        (
            lambda: ToolCalled("x", calls="all"),
            "ToolCalled: calls must be one of auto, executed, requested; got 'all'",
        ),
        (
            lambda: ToolSequence(["a", 3]),
            "ToolSequence(expected=...): each expected call must be a tool name or",
        ),
    ],
)
def test_bad_constructor_arguments(make: Any, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}"):
        make()


def test_tool_calls_an_app_returns() -> None:
    assert as_calls(["a", {"name": "b", "args": {"x": 1}}, {"name": "c", "arguments": '{"y": 2}'}]) == [
        ToolCall("a"),
        ToolCall("b", {"x": 1}),
        ToolCall("c", {"y": 2}),
    ]
    with pytest.raises(TypeError, match="each tool call must be"):
        as_calls([3])
    with pytest.raises(
        MetricComputationError, match="ToolCalled: tool_calls must be a list of tool calls, got str"
    ):
        ToolCalled("a").score(tool_calls="a")


def test_tool_calls_in_an_opentelemetry_choice_event_are_read() -> None:
    # run/otel turns a gen_ai.choice span event into {"role": "choice", "message": {...}}.
    event = {
        "role": "choice",
        "index": 0,
        "finish_reason": "tool_calls",
        "message": {
            "tool_calls": [{"id": "call_1", "function": {"name": "search", "arguments": '{"q": "x"}'}}]
        },
    }
    spans = [{"id": "s1", "parent_span_id": "root", "type": "llm", "name": "chat", "output": [event]}]
    (call,) = extract(spans).tool_calls
    assert (call.name, call.arguments, call.id) == ("search", {"q": "x"}, "call_1")
