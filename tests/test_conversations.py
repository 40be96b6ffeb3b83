"""Conversations as trials, end to end: an app and a simulated user that both call a fake of
OpenAI through the official client, one trial per whole conversation (``eval_conversation``),
its transcript the output, each turn a span; k-of-n verdicts and gates, SIGKILL then resume,
strict offline replay and pytest-xdist as for any trial."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import NEEDS_RECORD, Project, opik_days_behind
from fake_batches import FakeOpenAI
from opik_server import OpikTestServer

import pytest_opik_eval.ids
from pytest_opik_eval.cli import main as opik_eval
from pytest_opik_eval.metrics import Equals, PerTurn
from pytest_opik_eval.store.local import LocalStore
from pytest_opik_eval.store.opik import sender

SCENARIOS = 20

# A support agent (one model call per turn) and a simulated user whose next message is its own
# model's answer. Scenario s0, s5, s10 and s15 get a confused agent in two trials of three: they
# fail their k-of-n verdict (2 of 3); the others fail one trial of three and pass.
APP = """
import os
import pathlib
import signal

import openai
import pytest
from pytest_opik_eval.metrics import BaseMetric, ScoreResult

HERE = pathlib.Path(__file__).parent


def chat(model, messages):
    client = openai.OpenAI(max_retries=0)
    return client.chat.completions.create(model=model, messages=messages).choices[0].message.content


class Resolved(BaseMetric):
    # A whole-conversation metric: reads the transcript, as Opik's conversation metrics do.
    def __init__(self):
        super().__init__(name="resolved", threshold=0.5)

    def score(self, conversation, **ignored):
        replies = [m["content"] for m in conversation if m["role"] == "assistant"]
        return ScoreResult(name=self.name, value=float(bool(replies) and replies[-1] != "I do not know"))


@pytest.mark.eval(dataset="scenarios.jsonl", metrics=[Resolved()], trial_count=3, pass_threshold=2{gates})
def test_support(eval_conversation, eval_item, eval_trial):
    number = int(eval_item["id"][1:])
    confused = eval_trial != 0 if number % 5 == 0 else eval_trial == number % 3

    def agent(message, history):
        kill = HERE / "kill"
        if len(history) == 2 and kill.exists() and kill.read_text() == eval_item["id"]:
            kill.unlink()
            os.kill(os.getpid(), signal.SIGKILL)  # mid-conversation, at its second turn
        reply = chat("gpt-4.1-mini", [*history, {{"role": "user", "content": message}}])
        return "I do not know" if confused and len(history) == 2 else reply

    def user(history):
        return chat("gpt-4.1-nano", [{{"role": "user", "content": "follow up: " + history[-1]["content"][-40:]}}])

    return eval_conversation.run(agent, user=user)
"""


def scenario(number: int) -> dict[str, Any]:
    return {"id": f"s{number}", "first_message": f"help with order {number}", "max_turns": 2}


@pytest.fixture
def support(project: Project, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> Project:
    monkeypatch.setenv("OPENAI_BASE_URL", fake_openai.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", fake_openai.api_key)
    project.dataset([scenario(n) for n in range(SCENARIOS)], "scenarios.jsonl")
    project.write("test_support.py", APP.format(gates=""))
    return project


def verdicts(report: dict[str, Any]) -> dict[str, Any]:
    (experiment,) = report["experiments"]
    return {
        "trials": {
            (t["dataset_item_id"], t["trial"]): (t["output"], t["passed"]) for t in experiment["trials"]
        },
        "items": {i["dataset_item_id"]: (i["passed"], i["verdict"]) for i in experiment["items"]},
        "gates": experiment["gates"],
    }


def test_a_conversation_suite_gives_k_of_n_verdicts_and_gates(
    support: Project, fake_openai: FakeOpenAI
) -> None:
    support.write("test_support.py", APP.format(gates=", min_pass_rate=0.7"))
    result, report = support.run_report("--eval")
    # 20 scenarios x 3 trials: s0, s5, s10, s15 miss in two trials each, the others in one; with
    # pass_threshold, a trial's miss is soft: the items' k-of-n verdicts and the gates decide.
    result.assert_outcomes(passed=36)
    result.stdout.fnmatch_lines(["*36 passed, 24 soft-failed, 1 eval gate not met*"])
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    found = verdicts(report)
    failed = [item for item, (_, verdict) in found["items"].items() if verdict != "passed"]
    assert failed == ["s0", "s5", "s10", "s15"]
    assert {passed for item, (passed, _) in found["items"].items() if item in failed} == {1}
    assert {g["kind"]: g["met"] for g in found["gates"]} == {"min_pass_rate": True, "items": False}
    # One trial is one conversation: its transcript, two turns each, the user's opening first.
    output, _ = found["trials"][("s1", 0)]
    assert [m["role"] for m in output["conversation"]] == ["user", "assistant", "user", "assistant"]
    assert output["conversation"][0] == {"role": "user", "content": "help with order 1"}
    assert output["conversation"][1]["content"] == "answer to help with order 1"
    assert output["conversation"][2]["content"].startswith("answer to follow up: ")
    assert (output["turns"], output["stopped_by"]) == (2, "max_turns")
    assert output["output"] == output["conversation"][3]["content"]
    # Each conversation: 2 agent calls and 1 simulated user's call.
    assert len(fake_openai.live_calls) == 60 * 3


def spans_of(project: Project, item: str, trial: int) -> list[Any]:
    store = LocalStore(project.store_path, create=False)
    try:
        _, experiments = store.find("last")
        (found,) = [
            t
            for t in store.trials(experiments[0].id, spans=True)
            if (t.dataset_item_id, t.trial) == (item, trial)
        ]
        return list(found.spans or [])
    finally:
        store.close()


def test_each_turn_is_a_span_and_the_simulated_user_is_apart(support: Project) -> None:
    support.run("--eval", "-k", "s1-").assert_outcomes(passed=2)
    spans = spans_of(support, "s1", 0)
    by_id = {s.id: s for s in spans}
    turns = [s for s in spans if s.name.startswith("turn ")]
    assert [(s.name, s.metadata) for s in turns] == [("turn 1", {"turn": 1}), ("turn 2", {"turn": 2})]
    assert turns[0].input == {"role": "user", "content": "help with order 1"}
    assert turns[1].output == {"role": "assistant", "content": turns[1].output["content"]}
    (simulated,) = [s for s in spans if s.name == "simulated user"]
    assert simulated.tags == ["simulated_user"]
    assert simulated.output["content"].startswith("answer to follow up: ")
    task = by_id[turns[0].parent_span_id]
    assert task.id == simulated.parent_span_id  # both under the task span, the user's outside a turn


def test_a_conversation_killed_mid_way_reruns_whole_and_only_the_unfinished(
    support: Project, fake_openai: FakeOpenAI
) -> None:
    (support.path / "kill").write_text("s7")
    killed = support.pytester.runpytest_subprocess("--eval", "-p", "no:randomly")
    assert killed.ret == -9
    done = support.completed()
    assert ("s7", 0) not in done
    assert len(done) < 60
    calls = len(fake_openai.live_calls)

    resumed, report = support.run_report("--eval-resume=last")
    assert support.completed() == {(f"s{n}", t) for n in range(SCENARIOS) for t in range(3)}
    unfinished = 60 - len(done)
    assert len(fake_openai.live_calls) - calls == 3 * unfinished  # whole conversations, none twice
    outcomes = resumed.parseoutcomes()
    assert outcomes["passed"] + outcomes.get("soft", 0) == unfinished  # "N soft-failed", as pytest parses it
    output, _ = verdicts(report)["trials"][("s7", 0)]
    assert output["turns"] == 2


@NEEDS_RECORD
def test_a_recorded_suite_replays_offline_with_identical_transcripts_and_verdicts(
    support: Project, fake_openai: FakeOpenAI
) -> None:
    _, recorded = support.run_report("--eval", "--eval-record=once")
    fake_openai.close()  # offline: every call of the app and the simulated user is replayed
    replayed_result, replayed = support.run_report("--eval", "--eval-record=none")
    assert "0 missed" in replayed_result.stdout.str()
    assert verdicts(replayed) == verdicts(recorded)


def test_under_xdist_the_verdicts_are_the_same(support: Project) -> None:
    _, alone = support.run_report("--eval")
    _, spread = support.run_report("--eval", "-p", "xdist", "-n", "2")
    assert verdicts(spread) == verdicts(alone)


def test_an_async_app_converses_with_arun(support: Project) -> None:
    support.write(
        "test_support.py",
        """
        import pytest
        from pytest_opik_eval.metrics import BaseMetric, ScoreResult


        class Turns(BaseMetric):
            def __init__(self):
                super().__init__(name="turns")

            def score(self, turns, stopped_by, **ignored):
                return ScoreResult(name=self.name, value=float(turns == 2 and stopped_by == "user"))


        @pytest.mark.eval(dataset="chat.jsonl", metrics=[Turns()])
        async def test_chat(eval_conversation):
            async def app(message):
                return {"role": "assistant", "content": message.upper()}

            return await eval_conversation.arun(app)
        """,
    )
    support.dataset([{"id": "a", "user_responses": ["hi", "bye"]}], "chat.jsonl")
    # As tests/test_async.py runs pytest-asyncio in process (its module is imported already).
    support.pytester.makeini(
        "[pytest]\nfilterwarnings = default\nasyncio_default_fixture_loop_scope = function\nasyncio_mode = auto\n"
    )
    result, report = support.run_report("--eval", "-p", "asyncio")
    result.assert_outcomes(passed=1)
    (trial,) = report["experiments"][0]["trials"]
    assert trial["output"]["conversation"] == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "HI"},
        {"role": "user", "content": "bye"},
        {"role": "assistant", "content": "BYE"},
    ]


@pytest.mark.parametrize(
    ("item", "run", "message"),
    [
        (
            {"id": "a"},
            "eval_conversation.run(str)",
            "*ConversationError: no simulated user: give the item a persona*",
        ),
        (
            {"id": "a", "user_responses": ["hi"], "max_turns": 0},
            "eval_conversation.run(str)",
            "*max_turns must be a whole number of turns, 1 or more; got 0*",
        ),
        (
            {"id": "a", "user_responses": ["hi"]},
            "eval_conversation.run(lambda message: 7)",
            "*the app replied int, not a str or a {'role': 'assistant', 'content': str} message*",
        ),
        (
            {"id": "a", "first_message": "hi"},
            'eval_conversation.run(str, user=lambda history: "I\'m having trouble responding right now. (x)")',
            "*the simulated user's model failed: I'm having trouble responding right now. (x)*",
        ),
    ],
)
def test_a_conversation_that_cannot_go_on_fails_its_trial_pending(
    project: Project, item: dict[str, Any], run: str, message: str
) -> None:
    project.dataset([item], "chat.jsonl")
    project.write(
        "test_chat.py",
        f"""
        import pytest
        from pytest_opik_eval.metrics import Equals

        @pytest.mark.eval(dataset="chat.jsonl", metrics=[Equals()])
        def test_chat(eval_conversation):
            return {run}
        """,
    )
    result, report = project.run_report("--eval")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([message])
    assert [t["status"] for t in report["experiments"][0]["trials"]] == ["pending"]


def test_the_store_holds_no_conversation_object(support: Project) -> None:
    # The task span's input shows the item, never the fixture's object.
    support.run("--eval", "-k", "s2-").assert_outcomes(passed=2)
    (task,) = [s for s in spans_of(support, "s2", 0) if s.name == "test_support"]
    assert set(task.input) == {"eval_item", "eval_trial"}
    assert json.dumps(task.input)
    assert Path(support.store_path).exists()


def test_the_simulated_users_usage_is_counted_apart_from_the_apps(project: Project) -> None:
    project.dataset([{"id": "a", "first_message": "hi"}, {"id": "b", "first_message": "hello"}], "chat.jsonl")
    project.write(
        "test_chat.py",
        """
        import pytest
        from pytest_opik_eval.metrics import Equals
        from pytest_opik_eval.tracing import trace


        def app(message):
            trace.usage(model="gpt-4.1-mini", input_tokens=10, output_tokens=4, cost=0.001)
            return "ok"


        def user(history):
            trace.usage(model="gpt-4.1-nano", input_tokens=5, output_tokens=3, cost=0.0002)
            return "thanks"


        @pytest.mark.eval(dataset="chat.jsonl", metrics=[Equals()], scoring_key_mapping={"reference": "output"})
        def test_chat(eval_conversation):
            return eval_conversation.run(app, user=user, max_turns=2)
        """,
    )
    result, report = project.run_report("--eval", "--eval-max-cost=0.1/run")
    (experiment,) = report["experiments"]
    usage = experiment["summary"]["usage"]
    # Per conversation: two app turns, one simulated user's message (the item opens).
    assert (usage["app"]["prompt_tokens"], usage["app"]["cost"]) == (40, pytest.approx(0.004))
    assert (usage["simulator"]["prompt_tokens"], usage["simulator"]["cost"]) == (10, pytest.approx(0.0004))
    assert (usage["judge"], experiment["trials"][0]["usage"]["simulator"]["spans"]) == (None, 1)
    result.stdout.fnmatch_lines(["*simulated users:*tokens 10 in / 6 out*"])
    (gate,) = experiment["gates"]
    assert "(app $0.004, simulated users $0.0004)" in gate["detail"]


SDK_THREADS = """
import json, opik
threads = opik.Opik().search_threads(project_name="pytest-evals")
print(json.dumps(sorted((t.id, t.number_of_messages) for t in threads)))
"""


def test_with_the_opik_backend_each_conversation_is_a_thread(project: Project, opik: OpikTestServer) -> None:
    project.dataset(
        [{"id": name, "user_responses": [f"hi from {name}", "bye"]} for name in "ab"], "chat.jsonl"
    )
    project.write(
        "test_chat.py",
        """
        import pytest
        from pytest_opik_eval.metrics import Equals

        @pytest.mark.eval(dataset="chat.jsonl", metrics=[Equals()], scoring_key_mapping={"reference": "output"}, trial_count=2)
        def test_chat(eval_conversation):
            return eval_conversation.run(lambda message: message.upper())
        """,
    )
    project.run("--eval").assert_outcomes(passed=4)
    # Each trial's trace, linked by its experiment item, names its conversation's thread.
    linked = [opik.traces[link["trace_id"]] for link in opik.experiment_items]
    threads = {trace["metadata"]["thread_id"] for trace in linked}
    assert threads == {trace["id"] for trace in linked}
    # The turns: one trace each, in the thread, as the Opik SDK's run_simulation logs them.
    turns = [t for t in opik.traces.values() if t.get("thread_id")]
    assert len(turns) == 4 * 2
    first = min((t for t in turns if t["input"]["content"] == "hi from a"), key=lambda t: t["start_time"])
    assert first["output"] == {"role": "assistant", "content": "HI FROM A"}
    assert first["name"] == "conversation_turn"

    # Read back through the Opik SDK's own API.
    done = subprocess.run(
        [sys.executable, "-c", SDK_THREADS], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == sorted([thread, 4] for thread in threads)


SCORED = """
import os
import pathlib
import signal

import pytest
from pytest_opik_eval.metrics import BaseMetric, Contains, PerTurn, ScoreResult

HERE = pathlib.Path(__file__).parent


class Resolved(BaseMetric):
    def __init__(self):
        super().__init__(name="resolved", threshold=0.5)

    def score(self, conversation, **ignored):
        last = conversation[-1]["content"]
        return ScoreResult(name=self.name, value=float("done" in last), reason=f"last reply: {last!r}")


@pytest.mark.eval(
    dataset="chat.jsonl",
    metrics=[Resolved(), PerTurn(Contains(case_sensitive=False, name="polite"), "mean", turn_threshold=1.0)],
    scoring_key_mapping={"reference": lambda item: "please"},
    trial_count=2,
)
def test_chat(eval_conversation, eval_item, eval_trial):
    replies = iter(["Hello, please wait", "done" if eval_trial == 0 else "done, please rate us"])

    def app(message, history):
        kill = HERE / "kill"
        if history and kill.exists() and kill.read_text() == f"{eval_item['id']} {eval_trial}":
            kill.unlink()
            os.kill(os.getpid(), signal.SIGKILL)  # mid-conversation, at its second turn
        return next(replies)

    return eval_conversation.run(app)
"""

# The threads' feedback scores, and those of the traces named on the command line, as the Opik
# SDK reads them: {id: [[name, value, reason], ...]}.
SDK_SCORES = """
import json, sys, opik
client = opik.Opik()
scores = {
    thread.id: sorted([s.name, s.value, s.reason] for s in thread.feedback_scores or [])
    for thread in client.search_threads(project_name="pytest-evals")
}
for trace_id in sys.argv[1:]:
    trace = client.get_trace_content(trace_id)
    scores[trace_id] = sorted([s.name, s.value, s.reason] for s in trace.feedback_scores or [])
print(json.dumps(scores))
"""


def sdk_scores(trace_ids: list[str]) -> dict[str, list[list[Any]]]:
    done = subprocess.run(
        [sys.executable, "-c", SDK_SCORES, *trace_ids],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found: dict[str, list[list[Any]]] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def threads_of_trials(opik: OpikTestServer) -> dict[tuple[str, int], str]:
    """The thread of each trial's completed trace that an experiment item links, by (item, trial)."""
    traces = [opik.traces[link["trace_id"]] for link in opik.experiment_items]
    linked = [t for t in traces if not t["metadata"]["_opik_evaluation_pending"]]
    return {
        (t["metadata"]["dataset_item_id"], t["metadata"]["trial"]): t["metadata"]["thread_id"] for t in linked
    }


def turn_traces(opik: OpikTestServer, thread: str) -> list[str]:
    """The ids of a thread's turn traces, in turn order."""
    turns = [t for t in opik.traces.values() if t.get("thread_id") == thread]
    return [t["id"] for t in sorted(turns, key=lambda t: t["metadata"]["turn"])]


def test_with_the_opik_backend_a_conversations_scores_are_its_threads_and_each_turn_its_own(
    project: Project, opik: OpikTestServer
) -> None:
    project.dataset(
        [{"id": name, "user_responses": [f"hi from {name}", "bye"]} for name in "ab"], "chat.jsonl"
    )
    project.write("test_chat.py", SCORED)
    result, report = project.run_report("--eval")
    result.assert_outcomes(passed=2, failed=2)  # trial 0's last reply is not polite
    trials = {(t["dataset_item_id"], t["trial"]): t["scores"] for t in report["experiments"][0]["trials"]}
    threads = threads_of_trials(opik)
    assert set(threads) == set(trials)
    turns = {thread: turn_traces(opik, thread) for thread in threads.values()}
    read = sdk_scores([turn for ids in turns.values() for turn in ids])

    for key, scores in trials.items():
        thread = threads[key]
        # The thread holds the conversation's scores, the whole conversation's and each per-turn
        # aggregate, with their reasons: what the JSON report says of the trial.
        assert read[thread] == sorted([s["name"], s["value"], s["reason"]] for s in scores)
        # Each turn's trace holds that turn's score of the per-turn metric.
        (polite,) = [s for s in scores if s["name"] == "polite"]
        assert [read[turn] for turn in turns[thread]] == [
            [["polite", value, reason]] for value, reason in polite["metadata"]["turns"]
        ]
    # Trial 0's second reply ("done") does not say please: its thread's mean and its turn show it.
    thread = threads["a", 0]
    assert ["polite", 0.5, "mean of 2 turns (1, 0); turn 2 below 1"] in read[thread]
    assert ["resolved", 1.0, "last reply: 'done'"] in read[thread]
    assert read[turns[thread][1]][0][:2] == ["polite", 0.0]
    assert opik.unhandled_requests == []


def test_with_the_opik_backend_a_killed_then_resumed_suite_scores_each_thread_once(
    project: Project, opik: OpikTestServer
) -> None:
    project.dataset(
        [{"id": name, "user_responses": [f"hi from {name}", "bye"]} for name in "ab"], "chat.jsonl"
    )
    project.write("test_chat.py", SCORED)
    (project.path / "kill").write_text("b 0")
    killed = project.pytester.runpytest_subprocess("--eval", "-p", "no:randomly")
    assert killed.ret == -9
    assert ("b", 0) not in project.completed()

    # The resumed session sends what the killed one spooled, riding out a flaky server.
    sent = len(opik.find_requests("PUT", "threads/feedback-scores"))  # by the killed session's sender
    opik.fail_next(3, status=503, path_contains="threads/feedback-scores")
    resumed, report = project.run_report("--eval-resume=last")
    resumed.assert_outcomes(passed=1, failed=1)  # the killed conversation, whole again, and b's last
    faults = [r.fault for r in opik.find_requests("PUT", "threads/feedback-scores")][sent:]
    assert faults[:3] == ["fail"] * 3
    trials = {(t["dataset_item_id"], t["trial"]): t["scores"] for t in report["experiments"][0]["trials"]}
    threads = threads_of_trials(opik)
    assert set(threads) == set(trials) == {("a", 0), ("a", 1), ("b", 0), ("b", 1)}
    # One thread per trial, each with one score of each name: the killed conversation sent no
    # turn (its spans go with its scores), and the rerun is a thread of its own.
    read = sdk_scores([])
    assert set(read) == set(threads.values())
    for key, scores in trials.items():
        assert read[threads[key]] == sorted([s["name"], s["value"], s["reason"]] for s in scores)


def test_with_the_opik_backend_a_conversation_that_ended_unscored_leaves_no_thread(
    project: Project, opik: OpikTestServer
) -> None:
    project.dataset([{"id": "a", "user_responses": ["hi", "bye"]}], "chat.jsonl")
    # The app fails at trial 1's second turn, once: that attempt ends unscored, and reruns whole
    # on --eval-resume, as one killed or waiting for a batch does.
    project.write(
        "test_chat.py",
        SCORED.replace(
            "        return next(replies)",
            "        fail = HERE / 'fail'\n"
            "        if history and eval_trial == 1 and fail.exists():\n"
            "            fail.unlink()\n"
            "            raise RuntimeError('the app is down')\n"
            "        return next(replies)",
        ),
    )
    (project.path / "fail").write_text("")
    project.run("--eval").assert_outcomes(passed=0, failed=2)
    project.run("--eval-resume=last").assert_outcomes(passed=1)
    # The Threads view holds the two conversations scored, not the one the app broke off.
    threads = threads_of_trials(opik)
    assert set(threads) == {("a", 0), ("a", 1)}
    assert {t["thread_id"] for t in opik.traces.values() if t.get("thread_id")} == set(threads.values())
    assert set(sdk_scores([])) == set(threads.values())


MANY_SCORES = """
import pytest
from pytest_opik_eval.metrics import BaseMetric, ScoreResult


class Aspects(BaseMetric):
    def __init__(self):
        super().__init__(name="aspects")

    def score(self, conversation, **ignored):
        return [ScoreResult(name=f"aspect {n:04}", value=1.0) for n in range(1001)]


@pytest.mark.eval(dataset="chat.jsonl", metrics=[Aspects()])
def test_chat(eval_conversation):
    return eval_conversation.run(lambda message, history: "ok")
"""


def test_with_the_opik_backend_more_than_1000_scores_go_in_requests_the_server_takes(
    project: Project, opik: OpikTestServer
) -> None:
    project.dataset([{"id": "a", "user_responses": ["hi"], "max_turns": 1}], "chat.jsonl")
    project.write("test_chat.py", MANY_SCORES)
    result = project.run("--eval")
    result.assert_outcomes(passed=1)
    assert "refused" not in result.stdout.str()
    (thread,) = threads_of_trials(opik).values()
    assert len(opik.thread_feedback_scores[thread]) == 1001
    assert len(opik.feedback_scores) == 1001  # on the trial's trace
    sizes = [len(r.body["scores"]) for r in opik.find_requests("PUT", "feedback-scores")]
    assert sorted(sizes) == [1, 1, 1000, 1000]


def test_a_conversation_spooled_for_days_scores_its_renewed_turn_traces_and_its_thread(
    project: Project, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Recorded as if two days ago, the server (which checks the UUID v7 time window as Opik
    # Cloud does) away once the experiment is made: the writes are sent under new ids.
    with opik_days_behind(project, monkeypatch, tmp_path) as server:
        project.dataset([{"id": "a", "user_responses": ["hi", "bye"]}], "chat.jsonl")
        project.write("test_chat.py", SCORED)
        project.run("--eval").assert_outcomes(passed=1, failed=1)
        monkeypatch.setattr(pytest_opik_eval.ids, "_clock", time.time_ns)

        server.come_back()
        # One write a batch: a turn's score goes in a later batch than its renewed trace.
        monkeypatch.setattr(sender, "BATCH", 1)
        assert opik_eval(["--store", str(project.store_path), "sync"]) == 0
        assert server.invalid_requests == []
        threads = threads_of_trials(server)
        assert set(threads) == {("a", 0), ("a", 1)}
        trials: dict[str, list[str]] = {}  # thread -> the linked trial traces that name it
        for link in server.experiment_items:
            trials.setdefault(server.traces[link["trace_id"]]["metadata"]["thread_id"], []).append(
                link["trace_id"]
            )
        scored = {score["id"]: score for score in server.feedback_scores if score["name"] == "polite"}
        for thread in threads.values():
            assert {s["name"] for s in server.thread_feedback_scores[thread]} == {"resolved", "polite"}
            turns = turn_traces(server, thread)
            assert len(turns) == 2
            assert not {pytest_opik_eval.ids.uuid7_for(thread, f"turn {n}") for n in (1, 2)} & set(turns)
            assert all(turn in scored for turn in turns)
            # Each turn names its trial's trace as the server knows it: under its new id.
            (trial,) = trials[thread]
            assert trial != thread
            assert {server.traces[turn]["metadata"]["trial_trace_id"] for turn in turns} == {trial}


def test_with_the_opik_backend_a_refused_thread_score_sets_aside_no_other_write(
    project: Project, opik: OpikTestServer
) -> None:
    # An Opik server older than scores on open threads answers 409 until the thread is closed.
    opik.fail_next(100, status=409, path_contains="threads/feedback-scores")
    project.dataset([{"id": "a", "user_responses": ["hi", "bye"]}], "chat.jsonl")
    project.write("test_chat.py", SCORED)
    result = project.run("--eval")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "the Opik server refused writes of this session: PUT v1/private/traces/threads/feedback-scores "
            "at * failed with HTTP 409*",
            "* write(s) were refused by the Opik server (kept in *)",
        ]
    )
    # Only the threads' scores are kept aside: what was written with them reached the server.
    with sqlite3.connect(project.store_path) as db:
        kept = db.execute("SELECT kind, error IS NOT NULL FROM outbox").fetchall()
    assert kept == [("thread_feedback_scores", 1)] * 2
    assert opik.thread_feedback_scores == {}
    threads = threads_of_trials(opik)
    scored = {(score["id"], score["name"]) for score in opik.feedback_scores}
    for thread in threads.values():
        assert {(thread, "resolved"), (thread, "polite")} <= scored  # the trial's trace is its thread's id
        assert {(turn, "polite") for turn in turn_traces(opik, thread)} <= scored
    (experiment,) = opik.experiments.values()
    assert {score["name"] for score in experiment["experiment_scores"]} >= {"resolved.mean", "polite.mean"}


PER_TURN = """
import pytest
from opik.evaluation.metrics import ConversationDegenerationMetric
from pytest_opik_eval.metrics import BaseMetric, Contains, PerTurn, ScoreResult


class Polite(BaseMetric):
    judge = True  # as an LLM judge would be: its scores go in the judge cache

    def __init__(self):
        super().__init__(name="polite", threshold=1.0)

    def score(self, output, turn, **ignored):
        return ScoreResult(name=self.name, value=float("please" in output), reason=f"turn {turn}: {output!r}")


@pytest.mark.eval(
    dataset="chat.jsonl",
    metrics=[
        PerTurn(Contains(case_sensitive=False, name="mentions_order"), "all"),
        PerTurn(Contains(case_sensitive=False, name="mentions_order_mean"), "mean"),
        PerTurn(Contains(case_sensitive=False, name="mentions_order_last"), "last"),
        PerTurn(Polite(), "mean"),
        ConversationDegenerationMetric(),  # the Opik SDK's conversation metric, unchanged
    ],
    scoring_key_mapping={"reference": lambda item: "order"},
)
def test_chat(eval_conversation):
    replies = iter(["Your order, please wait", "Anything else?", "Order shipped, please rate us"])
    return eval_conversation.run(lambda message: next(replies))
"""


def test_per_turn_metrics_aggregate_the_turns_and_opiks_conversation_metrics_score_unchanged(
    project: Project,
) -> None:
    project.dataset([{"id": "a", "user_responses": ["hi", "and?", "ok"]}], "chat.jsonl")
    project.write("test_chat.py", PER_TURN)
    result, report = project.run_report("--eval", "--eval-judge-cache=on")
    result.assert_outcomes(failed=1)
    scores = {s["name"]: s for s in report["experiments"][0]["trials"][0]["scores"]}
    # Turn 2 does not mention the order: "all" is the share of turns that do, and fails.
    assert scores["mentions_order"]["value"] == pytest.approx(2 / 3)
    assert scores["mentions_order"]["reason"] == "all of 3 turns (1, 0, 1); turn 2 below 1"
    assert scores["mentions_order"]["metadata"]["turns"][1][0] == 0.0
    assert scores["mentions_order_mean"]["value"] == pytest.approx(2 / 3)
    assert scores["mentions_order_last"]["value"] == 1.0
    assert scores["polite"]["value"] == pytest.approx(2 / 3)
    assert scores["polite"]["metadata"]["turns"][0] == [1.0, "turn 1: 'Your order, please wait'"]
    assert (
        scores["polite"]["reason"]
        == "mean of 3 turns (1, 0, 1); turn 2 below 1 (turn 2: turn 2: 'Anything else?')"
    )
    assert scores["conversation_degeneration_metric"]["scoring_failed"] is False
    result.stdout.fnmatch_lines(["*mentions_order*0.667*"])
    # A judge turn by turn is a judge: its score is kept in the judge cache.
    assert len(list((project.path / ".opik-eval" / "judge-cache").rglob("*.json"))) == 1


def test_a_bad_per_turn_aggregate_fails_collection_naming_it(project: Project) -> None:
    project.dataset([{"id": "a", "user_responses": ["hi"]}], "chat.jsonl")
    project.write("test_chat.py", PER_TURN.replace('"last"', '"median"'))
    result = project.run("--eval")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*PerTurn aggregate must be one of all, mean, last; got 'median'*"])


def test_per_turn_of_an_opik_pass_fail_metric_fails_a_turn_below_one(project: Project) -> None:
    project.dataset([{"id": "a", "user_responses": ["hi", "and?"]}], "chat.jsonl")
    project.write(
        "test_chat.py",
        """
        import pytest
        from opik.evaluation.metrics import Contains
        from pytest_opik_eval.metrics import PerTurn

        @pytest.mark.eval(dataset="chat.jsonl", metrics=[PerTurn(Contains(reference="ok"))])
        def test_chat(eval_conversation):
            replies = iter(["ok then", "no"])
            return eval_conversation.run(lambda message: next(replies))
        """,
    )
    result, report = project.run_report("--eval")
    result.assert_outcomes(failed=1)  # the Opik SDK's Contains carries no threshold: 1.0, as in a marker
    (score,) = report["experiments"][0]["trials"][0]["scores"]
    assert (score["value"], score["reason"]) == (0.5, "all of 2 turns (1, 0); turn 2 below 1")


def test_a_one_turn_conversation_from_the_items_first_message_needs_no_simulated_user(
    project: Project,
) -> None:
    project.dataset([{"id": "a", "first_message": "hi", "max_turns": 1}], "chat.jsonl")
    project.write(
        "test_chat.py",
        """
        import pytest
        from pytest_opik_eval.metrics import Equals

        @pytest.mark.eval(dataset="chat.jsonl", metrics=[Equals()], scoring_key_mapping={"reference": "output"})
        def test_chat(eval_conversation):
            return eval_conversation.run(str.upper)
        """,
    )
    result, report = project.run_report("--eval")
    result.assert_outcomes(passed=1)
    (trial,) = report["experiments"][0]["trials"]
    assert trial["output"]["conversation"][-1] == {"role": "assistant", "content": "HI"}


def test_a_persona_gets_the_opik_sdks_simulated_user_and_its_model_failing_leaves_the_trial_pending(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    # LiteLLM, under the SDK's SimulatedUser, would fetch its price table over the network.
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-not-a-key")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")  # nothing answers: the model fails
    project.dataset([{"id": "a", "persona": "a hurried customer", "goal": "a refund"}], "chat.jsonl")
    project.write(
        "test_chat.py",
        """
        import pytest
        from pytest_opik_eval.metrics import Equals

        @pytest.mark.eval(dataset="chat.jsonl", metrics=[Equals()], scoring_key_mapping={"reference": "output"})
        def test_chat(eval_conversation):
            return eval_conversation.run(str.upper, max_turns=2)
        """,
    )
    result, report = project.run_report("--eval", "-p", "no:randomly", subprocess=True)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*ConversationError: the simulated user's model failed: I'm having trouble*"]
    )
    assert [t["status"] for t in report["experiments"][0]["trials"]] == ["pending"]


def test_a_bad_item_fails_before_the_app_is_called_and_a_per_turn_threshold_is_checked(
    project: Project,
) -> None:
    project.dataset(
        [{"id": "a", "first_message": "hi"}, {"id": "b", "first_message": "hi", "user_responses": "bye"}],
        "chat.jsonl",
    )
    project.write(
        "test_chat.py",
        """
        import pathlib
        import pytest
        from pytest_opik_eval.metrics import Equals

        def app(message):
            with pathlib.Path("calls.log").open("a") as log:
                log.write("called ")
            return "ok"

        @pytest.mark.eval(dataset="chat.jsonl", metrics=[Equals()], scoring_key_mapping={"reference": "output"})
        def test_chat(eval_conversation):
            return eval_conversation.run(app)
        """,
    )
    result = project.run("--eval")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        ["*ConversationError: no simulated user*", "*user_responses must be a list of str*"]
    )
    assert not (project.path / "calls.log").exists()  # no turn paid for before the item was checked
    with pytest.raises(ValueError, match="PerTurn turn_threshold must be a finite number or None; got nan"):
        PerTurn(Equals(), turn_threshold=float("nan"))


def test_a_conversation_whose_app_made_no_span_gets_the_no_spans_notice(project: Project) -> None:
    project.dataset([{"id": "a", "user_responses": ["hi", "bye"]}], "chat.jsonl")
    project.write(
        "test_chat.py",
        """
        import pytest
        from pytest_opik_eval.metrics import ToolCalled

        @pytest.mark.eval(dataset="chat.jsonl", metrics=[ToolCalled("search")])
        def test_chat(eval_conversation):
            return eval_conversation.run(str.upper)
        """,
    )
    result = project.run("--eval")
    result.assert_outcomes(failed=1)
    # Its turns and simulated user are spans, but none is the app's.
    assert result.stdout.str().count("but the trial has no spans, so they got none") == 1
