"""--eval-batch end to end: an app calling OpenAI (Anthropic, Gemini) through the official client,
its requests deferred to the batch API of a local fake (tests/fake_batches.py) whose batches end
when the test says, and the trials finished by --eval-resume with the answers the batches gave.
"""

from __future__ import annotations

import functools
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from conftest import NEEDS_RECORD, Project, installed, needs_extra
from fake_batches import FakeAnthropic, FakeGemini, FakeOpenAI
from opik_server import OpikTestServer

from pytest_opik_eval.cli import main
from pytest_opik_eval.formatting import dollars

pytestmark = NEEDS_RECORD

APP = """
import openai
import pytest
from pytest_opik_eval.metrics import Equals


def ask(text, model="gpt-4.1-mini", **extra):
    client = openai.OpenAI(max_retries=0)
    answer = client.chat.completions.create(model=model, messages=[{{"role": "user", "content": text}}], **extra)
    return answer.choices[0].message.content


@pytest.mark.eval(dataset="data.jsonl", metrics=[Equals()], scoring_key_mapping={{"reference": "expected_output"}})
def test_qa(eval_item):
    {body}
"""

SINGLE_CALL = "return ask(eval_item['input'])"


@pytest.fixture
def app(project: Project, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> Project:
    monkeypatch.setenv("OPENAI_BASE_URL", fake_openai.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", fake_openai.api_key)
    project.dataset(
        [
            {"id": name, "input": f"question {name}", "expected_output": f"answer to question {name}"}
            for name in "abc"
        ]
    )
    project.write("test_app.py", APP.format(body=SINGLE_CALL))
    return project


def batch_args(fake: FakeOpenAI) -> list[str]:
    port = fake.base_url.split(":")[2].split("/")[0]
    return ["--eval-batch", f"--eval-batch-provider=127.0.0.1:{port}=openai"]


def input_lines(fake: FakeOpenAI, batch_id: str) -> list[dict[str, Any]]:
    """The batch's input file, as the plugin uploaded it."""
    return fake._batches[batch_id].requests


def files_under(folder: Path) -> dict[str, str]:
    return {
        str(p): p.read_text(errors="replace") for p in folder.rglob("*") if p.is_file() and p.suffix != ".db"
    }


def test_a_single_call_app_completes_in_two_sessions_with_no_live_call(
    app: Project, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    step_summary = app.path / "step-summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step_summary))
    first = app.run("--eval", *batch_args(fake_openai))
    first.assert_outcomes(skipped=3)
    assert first.ret == pytest.ExitCode.INTERRUPTED  # incomplete by design: the gates wait
    output = first.stdout.str()
    (batch_id,) = fake_openai.batches
    assert (
        f"eval batches: 3 trials wait; submitted 3 requests in 1 batch: openai gpt-4.1-mini /v1/chat/completions {batch_id} (3)"
        in output
    )
    assert "3 eval trials waiting for a batch" in output
    assert "then finish them: pytest --eval-resume=" in output
    # The job summary says the same.
    assert "⏳ eval batches: 3 trials wait; submitted 3 requests in 1 batch" in step_summary.read_text()
    assert fake_openai.live_calls == []
    assert fake_openai.rejected == []
    assert app.completed() == set()
    # Nothing the plugin wrote holds the key.
    for path, text in files_under(app.path / ".opik-eval").items():
        assert fake_openai.api_key not in text, path

    # Not ended yet: the trials are not run again, and nothing is submitted twice.
    waiting = app.run("--eval-resume=last", *batch_args(fake_openai))
    waiting.assert_outcomes(skipped=3)
    assert f"still running: {batch_id}" in waiting.stdout.str()
    assert len(fake_openai.batches) == 1

    fake_openai.finish()
    second = app.run("--eval-resume=last", *batch_args(fake_openai))
    second.assert_outcomes(passed=3)
    assert second.ret == pytest.ExitCode.OK
    assert "eval batches collected: 3 answers from 1 batch" in second.stdout.str()
    assert fake_openai.live_calls == []
    assert len(fake_openai.batches) == 1
    assert app.completed() == {("a", 0), ("b", 0), ("c", 0)}
    outputs = {t.dataset_item_id: t.output for t in app.trials()}
    assert outputs["a"] == {"output": "answer to question a"}


def test_expired_and_failed_requests_are_submitted_again(app: Project, fake_openai: FakeOpenAI) -> None:
    app.run("--eval", *batch_args(fake_openai)).assert_outcomes(skipped=3)
    (first,) = fake_openai.batches
    lines = input_lines(fake_openai, first)
    # "question a" asks for item a.
    by_item = {line["body"]["messages"][0]["content"].split()[-1]: line["custom_id"] for line in lines}
    fake_openai.finish(first, expire=[by_item["a"]], error=[by_item["b"]])
    second = app.run("--eval-resume=last", "-rs", *batch_args(fake_openai))
    second.assert_outcomes(passed=1, skipped=2)
    output = second.stdout.str()
    assert (
        "eval batches collected: 1 answer from 1 batch; 2 requests without an answer, submitted again"
        in output
    )
    assert "request deferred to a batch again" in output
    assert len(fake_openai.batches) == 2
    second_batch = [b for b in fake_openai.batches if b != first][0]
    assert {line["custom_id"] for line in input_lines(fake_openai, second_batch)} == {
        by_item["a"],
        by_item["b"],
    }
    fake_openai.finish(second_batch)
    app.run("--eval-resume=last", *batch_args(fake_openai)).assert_outcomes(passed=2)
    assert app.completed() == {("a", 0), ("b", 0), ("c", 0)}
    assert fake_openai.live_calls == []


@pytest.mark.parametrize(("status", "times"), [(400, 1), (500, 3)], ids=["refused", "failing"])
def test_a_refused_submission_loses_nothing_and_the_next_resume_submits(
    app: Project, fake_openai: FakeOpenAI, status: int, times: int
) -> None:
    fake_openai.refuse_creates(status, times)
    first = app.run("--eval", *batch_args(fake_openai))
    first.assert_outcomes(skipped=3)
    output = first.stdout.str()
    assert "eval batches: 3 requests not submitted (openai gpt-4.1-mini /v1/chat/completions)" in output
    assert "the next resume submits them again" in output
    assert f"HTTP {status}" in output  # the provider's answer, said
    assert fake_openai.batches == {}
    second = app.run("--eval-resume=last", *batch_args(fake_openai))
    second.assert_outcomes(skipped=3)
    (batch_id,) = fake_openai.batches
    fake_openai.finish(batch_id)
    app.run("--eval-resume=last", *batch_args(fake_openai)).assert_outcomes(passed=3)


def test_a_batch_deleted_at_the_provider_is_submitted_again(app: Project, fake_openai: FakeOpenAI) -> None:
    app.run("--eval", *batch_args(fake_openai)).assert_outcomes(skipped=3)
    (batch_id,) = fake_openai.batches
    fake_openai.delete(batch_id)
    second = app.run("--eval-resume=last", *batch_args(fake_openai))
    second.assert_outcomes(skipped=3)
    output = second.stdout.str()
    assert f"batch {batch_id} not found at the provider (deleted?)" in output
    assert "3 requests without an answer, submitted again as their trials run" in output
    assert len([b for b in fake_openai.batches if b != batch_id]) == 1


def test_a_streamed_request_goes_live_with_a_notice_or_fails_the_trial_in_strict_mode(
    app: Project, fake_openai: FakeOpenAI
) -> None:
    app.write(
        "test_app.py",
        APP.format(
            body="return ''.join(c.choices[0].delta.content or '' for c in openai.OpenAI(max_retries=0).chat.completions.create(model='gpt-4.1-mini', messages=[{'role': 'user', 'content': eval_item['input']}], stream=True))"
        ),
    )
    # Strict first: the live run records the calls, which a later run would replay.
    strict = app.run(
        "--eval", *batch_args(fake_openai)[:-2], "--eval-batch=strict", batch_args(fake_openai)[-1]
    )
    strict.assert_outcomes(failed=3)
    assert (
        "--eval-batch=strict: not batchable: /v1/chat/completions: a streamed request" in strict.stdout.str()
    )
    assert fake_openai.live_calls == []
    live = app.run("--eval-resume=last", *batch_args(fake_openai))
    live.assert_outcomes(passed=3)
    assert (
        "--eval-batch: sent live, not batched: /v1/chat/completions: a streamed request (stream=true) is not batchable"
        in live.stdout.str()
    )
    assert len(fake_openai.live_calls) == 3
    assert fake_openai.batches == {}


def test_resuming_a_batched_run_without_eval_batch_says_how(app: Project, fake_openai: FakeOpenAI) -> None:
    app.run("--eval", *batch_args(fake_openai)).assert_outcomes(skipped=3)
    result = app.run("--eval-resume=last")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*sent requests to provider batches; resume it with --eval-batch*"])


def test_eval_batch_with_another_record_mode_is_a_usage_error(app: Project, fake_openai: FakeOpenAI) -> None:
    result = app.run("--eval", *batch_args(fake_openai), "--eval-record=none")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*it records in mode new_episodes, not --eval-record=none*"])


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("eval_batch_max_rounds", "0", "ini eval_batch_max_rounds: *got '0'"),
        (
            "eval_batch_after_cap",
            "later",
            "ini eval_batch_after_cap: expected one of pending, live; got 'later'",
        ),
    ],
)
def test_a_bad_ini_batch_setting_is_a_usage_error_naming_the_key(
    app: Project, fake_openai: FakeOpenAI, key: str, value: str, message: str
) -> None:
    app.pytester.makeini(f"[pytest]\nfilterwarnings = error\n{key} = {value}\n")
    result = app.run("--eval", *batch_args(fake_openai))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: {message}"])


def test_a_test_path_after_the_bare_flag_says_how_to_write_it(app: Project) -> None:
    result = app.run("--eval-batch", "test_app.py")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*argument --eval-batch: expected one of off, on, strict; got 'test_app.py' (a test path after the "
            "bare flag is read as its mode: write --eval-batch=on)"
        ]
    )


def custom_ids(fake: FakeOpenAI, batch_id: str) -> dict[str, str]:
    """Item id -> the custom_id of its request in the batch ("question a" asks for item a)."""
    return {
        line["body"]["messages"][0]["content"].split()[-1]: line["custom_id"]
        for line in input_lines(fake, batch_id)
    }


def test_results_of_unknown_ids_are_ignored_and_missing_ones_submitted_again(
    app: Project, fake_openai: FakeOpenAI
) -> None:
    app.run("--eval", *batch_args(fake_openai)).assert_outcomes(skipped=3)
    (batch_id,) = fake_openai.batches
    ids = custom_ids(fake_openai, batch_id)
    fake_openai.finish(batch_id)
    fake_openai.extra_results(batch_id, ["oe1_000000000000_not_ours"])
    fake_openai.drop_results(batch_id, [ids["a"]])
    result = app.run("--eval-resume=last", *batch_args(fake_openai))
    result.assert_outcomes(passed=2, skipped=1)
    output = result.stdout.str()
    assert f"--eval-batch: batch {batch_id} returned 1 result of no request it was given; ignored" in output
    assert (
        "1 request without an answer, submitted again as their trials run; 1 result of no request" in output
    )
    (again,) = [b for b in fake_openai.batches if b != batch_id]
    assert set(custom_ids(fake_openai, again).values()) == {ids["a"]}


def test_a_submission_killed_mid_way_is_found_again_and_never_made_twice(
    app: Project, fake_openai: FakeOpenAI
) -> None:
    app.write("conftest.py", "import os, pathlib\npathlib.Path('pid.txt').write_text(str(os.getpid()))\n")
    fake_openai.kill_on_create(app.path / "pid.txt")
    killed = app.pytester.runpytest_subprocess("-p", "opik_eval", "--eval", *batch_args(fake_openai))
    assert killed.ret == -9  # SIGKILL, after the provider created the batch, before the ledger said so
    assert fake_openai.creates == 1
    resumed = app.run("--eval-resume=last", *batch_args(fake_openai))
    resumed.assert_outcomes(skipped=3)
    (batch_id,) = fake_openai.batches
    assert f"still running: {batch_id}" in resumed.stdout.str()
    assert fake_openai.creates == 1
    fake_openai.finish()
    app.run("--eval-resume=last", *batch_args(fake_openai)).assert_outcomes(passed=3)
    assert fake_openai.creates == 1


def test_under_xdist_the_workers_requests_go_in_one_batch(app: Project, fake_openai: FakeOpenAI) -> None:
    app.run("--eval", "-p", "xdist", "-n", "2", *batch_args(fake_openai)).assert_outcomes(skipped=3)
    (batch_id,) = fake_openai.batches
    assert len(input_lines(fake_openai, batch_id)) == 3
    fake_openai.finish()
    result = app.run("--eval-resume=last", "-p", "xdist", "-n", "2", *batch_args(fake_openai))
    result.assert_outcomes(passed=3)
    assert "eval batches collected: 3 answers from 1 batch" in result.stdout.str()


def test_a_batched_run_replays_offline_once_complete(app: Project, fake_openai: FakeOpenAI) -> None:
    app.run("--eval", *batch_args(fake_openai)).assert_outcomes(skipped=3)
    fake_openai.finish()
    app.run("--eval-resume=last", *batch_args(fake_openai)).assert_outcomes(passed=3)
    fake_openai.close()  # no network: the answers are recordings
    app.run("--eval", "--eval-record=none").assert_outcomes(passed=3)


def batch_cli(app: Project, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """``opik-eval --store STORE batch ARGS`` in this process: its exit code and what it printed."""
    capsys.readouterr()
    code = main(["--store", str(app.store_path), "batch", *args])
    return code, capsys.readouterr().out


def test_batch_status_and_collect_commands(
    app: Project, fake_openai: FakeOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    app.run("--eval", *batch_args(fake_openai)).assert_outcomes(skipped=3)
    (batch_id,) = fake_openai.batches
    cli = functools.partial(batch_cli, app, capsys)

    code, out = cli("status")
    assert code == 0
    assert (
        f"  {batch_id}  openai gpt-4.1-mini /v1/chat/completions  in_progress 0/3, 0 failed  submitted "
        in out
    )
    assert "1 still running; once they end: pytest --eval-resume=" in out
    fake_openai.finish()
    code, out = cli("status", "last")
    assert "completed 3/3, 0 failed" in out
    assert "all ended: pytest --eval-resume=" in out
    code, out = cli("collect")
    assert code == 0
    assert "eval batches collected: 3 answers from 1 batch" in out
    # The resume replays what the command collected, and downloads nothing again.
    result = app.run("--eval-resume=last", *batch_args(fake_openai))
    result.assert_outcomes(passed=3)
    assert "eval batches collected" not in result.stdout.str()
    code, out = cli("status")
    assert f"  {batch_id}  openai gpt-4.1-mini /v1/chat/completions  collected  submitted " in out


def test_batch_status_of_a_run_without_batches(app: Project, capsys: pytest.CaptureFixture[str]) -> None:
    app.run("--eval").assert_outcomes(passed=3)  # live
    capsys.readouterr()
    assert main(["--store", str(app.store_path), "batch", "status"]) == 0
    assert "has no provider batch (it ran without --eval-batch" in capsys.readouterr().out


JUDGED_APP = """
import openai
import pytest
from pytest_opik_eval.metrics import BaseMetric, ScoreResult
from pytest_opik_eval.tracing import trace


def ask(text):
    # Reported on a span of its own, as an instrumented client does: priced at the end.
    with trace.span("chat", type="llm") as span:
        client = openai.OpenAI(max_retries=0)
        answer = client.chat.completions.create(model="gpt-4.1-mini", messages=[{"role": "user", "content": text}])
        span.model = "gpt-4.1-mini"
        span.usage = {"prompt_tokens": answer.usage.prompt_tokens, "completion_tokens": answer.usage.completion_tokens}
    return answer.choices[0].message.content


class Judge(BaseMetric):
    # An LLM judge: the fake answers "answer to <prompt>", which it reads as a pass when the
    # output it was shown answers the question.
    judge = True

    def __init__(self):
        super().__init__(name="judge", threshold=0.5)

    def score(self, input, output, **ignored):
        verdict = ask(f"grade: {output}")
        return ScoreResult(name="judge", value=1.0 if f"answer to grade: answer to {input}" == verdict else 0.0)


@pytest.mark.eval(dataset="data.jsonl", metrics=[Judge()])
def test_qa(eval_item):
    return ask(eval_item["input"])
"""


def test_an_app_and_its_llm_judge_complete_in_three_sessions(app: Project, fake_openai: FakeOpenAI) -> None:
    app.write("test_app.py", JUDGED_APP)
    app.run("--eval", *batch_args(fake_openai)).assert_outcomes(skipped=3)
    fake_openai.finish()
    # The task's answers replay; the judges' calls go in the next batch.
    second = app.run("--eval-resume=last", *batch_args(fake_openai))
    second.assert_outcomes(skipped=3)
    assert "submitted 3 requests in 1 batch" in second.stdout.str()
    (judges,) = [b for b, batch in fake_openai.batches.items() if batch["status"] != "completed"]
    assert all(
        line["body"]["messages"][0]["content"].startswith("grade: ")
        for line in input_lines(fake_openai, judges)
    )
    assert list((app.path / ".opik-eval" / "judge-cache").rglob("*.json")) == []  # nothing scored yet
    fake_openai.finish()
    third = app.run("--eval-resume=last", *batch_args(fake_openai))
    third.assert_outcomes(passed=3)
    assert fake_openai.live_calls == []
    assert {s.name: s.value for t in app.trials() for s in t.scores} == {"judge": 1.0}
    assert len(list((app.path / ".opik-eval" / "judge-cache").rglob("*.json"))) == 3
    # Offline, the judges' scores come from the cache.
    fake_openai.close()
    app.run("--eval", "--eval-record=none").assert_outcomes(passed=3)


TRACED_ASK = JUDGED_APP[JUDGED_APP.index("def ask(text):") : JUDGED_APP.index("class Judge")]
# The same app and judge through a plain client, with no span of their own.
PLAIN_JUDGED_APP = JUDGED_APP.replace(
    TRACED_ASK,
    """def ask(text):
    with openai.OpenAI(max_retries=0) as client:
        answer = client.chat.completions.create(model="gpt-4.1-mini", messages=[{"role": "user", "content": text}])
    return answer.choices[0].message.content


""",
)


def test_a_plain_judges_calls_count_once_sent_live_or_answered_by_a_batch(
    app: Project, fake_openai: FakeOpenAI
) -> None:
    # The app and its judge call through a plain client: with --eval-llm-spans=on each answer
    # becomes an LLM span, the judge's under its metric, whether it went out or a batch's answer
    # replayed. Item a: the app asks "question a" (2 words, the fake's tokens) and gets "answer
    # to question a" (4); the judge asks "grade: answer to question a" (5) and gets 7 words back.
    app.write("test_app.py", PLAIN_JUDGED_APP)
    spans_and_budget = ("--eval-llm-spans=on", "--eval-budget=1000k tokens")

    def check_usage(result: pytest.RunResult, report: dict[str, Any], store: Path | None = None) -> None:
        result.assert_outcomes(passed=3)
        for trial in app.trials(store_path=store):
            http = [s for s in trial.spans if (s.metadata or {}).get("source") == "http"]
            assert [(s.prompt_tokens, s.completion_tokens) for s in http] == [(2, 4), (5, 7)]
        (experiment,) = report["experiments"]
        for trial in experiment["trials"]:
            usage = trial["usage"]
            assert (usage["app"]["prompt_tokens"], usage["app"]["completion_tokens"]) == (2, 4)
            assert (usage["judge"]["prompt_tokens"], usage["judge"]["completion_tokens"]) == (5, 7)
        result.stdout.fnmatch_lines(["  judges: * tokens 15 in / 21 out *"])

    live, live_report = app.run_report("--eval", "--eval-store=live/store.db", *spans_and_budget)
    check_usage(live, live_report, app.path / "live" / "store.db")
    assert live_report["budget"]["spent"] == 3 * (2 + 4 + 5 + 7)  # every call, paid once
    calls = len(fake_openai.live_calls)
    assert calls == 6

    options = (*spans_and_budget, *batch_args(fake_openai))
    app.run("--eval", *options).assert_outcomes(skipped=3)
    fake_openai.finish()
    app.run("--eval-resume=last", *options).assert_outcomes(skipped=3)  # the judges' calls wait
    fake_openai.finish()
    result, report = app.run_report("--eval-resume=last", *options)
    check_usage(result, report)
    assert len(fake_openai.live_calls) == calls
    # The budget: the judges' answers once, when their batch was collected; their replay is free.
    assert report["budget"]["spent"] == 3 * (5 + 7)
    if installed("genai_prices"):  # the cost extra: the judges' cost is their batch's, at its price

        def judges(report: dict[str, Any]) -> float:
            return float(sum(t["usage"]["judge"]["cost"] for t in report["experiments"][0]["trials"]))

        assert judges(report) == pytest.approx(report["batches"]["cost"])
        assert judges(report) == pytest.approx(judges(live_report) / 2)


def test_a_replayed_session_whose_judges_went_out_is_not_said_to_be_free(
    app: Project, fake_openai: FakeOpenAI
) -> None:
    # The app's calls replay; its plain judge's go out live (no judge cache), and with no span
    # (its test reads no tool calls): the notice must not say that every call cost nothing.
    app.write("test_app.py", PLAIN_JUDGED_APP)
    app.run("--eval", "--eval-record=once").assert_outcomes(passed=3)
    sent = len(fake_openai.live_calls)
    budget = "--eval-budget=1000k tokens"
    result = app.run("--eval", "--eval-record=none", "--eval-judge-cache=off", budget)
    result.assert_outcomes(passed=3)
    assert len(fake_openai.live_calls) == sent + 3  # the judges' calls, paid
    result.stdout.fnmatch_lines(
        [
            "*eval budget: the trials that ran spent nothing, so the budget of 1,000,000 tokens counted "
            "nothing: the 3 calls they made were replayed from the recordings (--eval-record=none), "
            "which costs nothing; a call sent (a judge's) counts when a span reports it: those the app "
            "traces *, and the OpenAI and Anthropic calls of an uninstrumented app, read from their "
            "HTTP answers, in the tests whose metrics read tool calls (--eval-llm-spans=auto; *",
        ]
    )


class _Received(list[tuple[str, dict[str, Any]]]):
    """The fake's live calls, with when the fake got each (``time.time()``)."""

    def __init__(self) -> None:
        super().__init__()
        self.times: list[float] = []

    def append(self, call: tuple[str, dict[str, Any]]) -> None:
        self.times.append(time.time())
        super().append(call)


def test_a_plain_judges_live_call_span_starts_when_it_was_sent(app: Project, fake_openai: FakeOpenAI) -> None:
    # The span of a judge's live call starts before the fake got it, as the app's does: not
    # when its answer came back, which made it last no time at all.
    app.write("test_app.py", PLAIN_JUDGED_APP)
    received = fake_openai.live_calls = _Received()
    result, _ = app.run_report("--eval", "--eval-llm-spans=on")
    result.assert_outcomes(passed=3)
    got = dict(zip((body["messages"][0]["content"] for _, body in received), received.times, strict=True))
    for trial in app.trials():
        http = [s for s in trial.spans if (s.metadata or {}).get("source") == "http"]
        assert len(http) == 2  # the app's call, and its judge's
        for span in http:
            sent = datetime.fromisoformat(str(span.start_time)).timestamp()
            assert sent <= got[span.input["messages"][0]["content"]]


def test_the_round_cap_leaves_the_trial_pending_or_sends_the_rest_live(
    app: Project, fake_openai: FakeOpenAI
) -> None:
    app.write("test_app.py", APP.format(body="return ask('then ' + ask(eval_item['input']))"))
    app.run("--eval", *batch_args(fake_openai), "--eval-batch-max-rounds=1").assert_outcomes(skipped=3)
    fake_openai.finish()
    capped = app.run("--eval-resume=last", *batch_args(fake_openai), "--eval-batch-max-rounds=1")
    capped.assert_outcomes(failed=3)  # nothing will come: it says so, and stays pending
    assert (
        "the trial took 1 batched rounds (--eval-batch-max-rounds) and stays pending" in capped.stdout.str()
    )
    assert len(fake_openai.batches) == 1
    assert fake_openai.live_calls == []
    live = app.run(
        "--eval-resume=last",
        *batch_args(fake_openai),
        "--eval-batch-max-rounds=1",
        "--eval-batch-after-cap=live",
    )
    live.assert_outcomes(failed=3)  # completed: the output is not the dataset's expected one
    assert (
        "--eval-batch: sent live, not batched: its trial took --eval-batch-max-rounds=1 rounds"
        in live.stdout.str()
    )
    assert len(fake_openai.live_calls) == 3
    assert len(fake_openai.batches) == 1


TRACED_BODY = """from pytest_opik_eval.tracing import trace
    with trace.span("chat", type="llm") as span:
        client = openai.OpenAI(max_retries=0)
        answer = client.chat.completions.create(
            model="gpt-4.1-mini", messages=[{"role": "user", "content": eval_item["input"]}]
        )
        span.model = "gpt-4.1-mini"
        span.usage = {"prompt_tokens": answer.usage.prompt_tokens, "completion_tokens": answer.usage.completion_tokens}
    return answer.choices[0].message.content"""


@needs_extra("cost", "genai_prices")
def test_batched_calls_cost_half_the_live_price(app: Project, fake_openai: FakeOpenAI) -> None:
    app.write("test_app.py", APP.format(body=TRACED_BODY))
    live, live_report = app.run_report("--eval", "--eval-store=live/store.db")
    live.assert_outcomes(passed=3)
    app.run("--eval", *batch_args(fake_openai)).assert_outcomes(skipped=3)
    fake_openai.finish()
    batched, report = app.run_report("--eval-resume=last", *batch_args(fake_openai))
    batched.assert_outcomes(passed=3)

    def app_cost(report: dict[str, Any]) -> float:
        return float(sum(t["usage"]["app"]["cost"] for e in report["experiments"] for t in e["trials"]))

    assert app_cost(report) == pytest.approx(app_cost(live_report) / 2)
    collected = report["batches"]
    assert collected["cost"] == pytest.approx(app_cost(report))
    assert collected["live_cost"] == pytest.approx(app_cost(live_report))
    assert f"at batch prices (live {dollars(collected['live_cost'])})" in batched.stdout.str()
    assert len(fake_openai.live_calls) == 3  # the live run's only


ANTHROPIC_APP = """
import anthropic
import pytest
from pytest_opik_eval.metrics import Equals


@pytest.mark.eval(dataset="data.jsonl", metrics=[Equals()], scoring_key_mapping={"reference": "expected_output"})
def test_qa(eval_item):
    client = anthropic.Anthropic(max_retries=0)
    message = client.messages.create(
        model="claude-haiku-4-5", max_tokens=100, messages=[{"role": "user", "content": eval_item["input"]}]
    )
    return message.content[0].text
"""


@pytest.fixture
def claude_app(app: Project, fake_anthropic: FakeAnthropic, monkeypatch: pytest.MonkeyPatch) -> Project:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake_anthropic.base_url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", fake_anthropic.api_key)
    app.write("test_app.py", ANTHROPIC_APP)
    return app


def anthropic_args(fake: FakeAnthropic) -> list[str]:
    port = fake.base_url.rsplit(":", 1)[1].strip("/")
    return ["--eval-batch", f"--eval-batch-provider=127.0.0.1:{port}=anthropic"]


@pytest.mark.usefixtures("claude_app")
def test_an_anthropic_app_completes_in_two_sessions(app: Project, fake_anthropic: FakeAnthropic) -> None:
    first = app.run("--eval", *anthropic_args(fake_anthropic))
    first.assert_outcomes(skipped=3)
    (batch_id,) = fake_anthropic.batches
    assert (
        f"submitted 3 requests in 1 batch: anthropic claude-haiku-4-5 /v1/messages {batch_id} (3)"
        in first.stdout.str()
    )
    assert fake_anthropic.rejected == []
    fake_anthropic.finish()  # its results come back in another order than the requests
    second = app.run("--eval-resume=last", *anthropic_args(fake_anthropic))
    second.assert_outcomes(passed=3)
    assert fake_anthropic.live_calls == []
    for path, text in files_under(app.path / ".opik-eval").items():
        assert fake_anthropic.api_key not in text, path


@pytest.mark.usefixtures("claude_app")
def test_an_anthropic_submission_killed_mid_way_is_found_by_its_size(
    app: Project, fake_anthropic: FakeAnthropic
) -> None:
    app.write("conftest.py", "import os, pathlib\npathlib.Path('pid.txt').write_text(str(os.getpid()))\n")
    fake_anthropic.kill_on_create(app.path / "pid.txt")
    killed = app.pytester.runpytest_subprocess("-p", "opik_eval", "--eval", *anthropic_args(fake_anthropic))
    assert killed.ret == -9
    resumed = app.run("--eval-resume=last", *anthropic_args(fake_anthropic))
    resumed.assert_outcomes(skipped=3)
    assert fake_anthropic.creates == 1
    fake_anthropic.finish()
    app.run("--eval-resume=last", *anthropic_args(fake_anthropic)).assert_outcomes(passed=3)
    assert fake_anthropic.creates == 1


def test_shards_batch_apart_and_the_merged_run_collects_them_all(
    app: Project, fake_openai: FakeOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    app.dataset(
        [
            {"id": f"q{n}", "input": f"question q{n}", "expected_output": f"answer to question q{n}"}
            for n in range(6)
        ]
    )
    skipped = 0
    for k in (1, 2):
        shard = app.run(
            "--eval",
            "--eval-run-id=nightly",
            f"--eval-shard={k}/2",
            f"--eval-store=shard{k}/store.db",
            *batch_args(fake_openai),
        )
        skipped += shard.parseoutcomes()["skipped"]
    assert skipped == 6  # each shard its items
    assert len(fake_openai.batches) == 2
    merged = app.path / "merged" / "store.db"
    assert (
        main(["--store", str(merged), "merge", *(str(app.path / f"shard{k}" / "store.db") for k in (1, 2))])
        == 0
    )
    assert capsys.readouterr().out.count(" batch ledger file(s) from ") == 2
    fake_openai.finish()
    result = app.run("--eval-resume=nightly", f"--eval-store={merged}", *batch_args(fake_openai))
    result.assert_outcomes(passed=6)
    assert "eval batches collected: 6 answers from 2 batches" in result.stdout.str()
    assert fake_openai.live_calls == []


@needs_extra("cost", "genai_prices")
def test_a_200_item_suite_and_its_judge_end_as_a_live_run_does_at_half_the_price(
    app: Project, fake_openai: FakeOpenAI
) -> None:
    items = [f"q{n:03d}" for n in range(200)]
    app.dataset([{"id": name, "input": f"question {name}"} for name in items])
    app.write("test_app.py", JUDGED_APP)
    live, live_report = app.run_report("--eval", "--eval-store=live/store.db")
    calls = len(fake_openai.live_calls)
    assert calls == 400  # the app's and the judge's

    app.run("--eval", *batch_args(fake_openai)).assert_outcomes(skipped=200)
    fake_openai.finish()
    app.run("--eval-resume=last", *batch_args(fake_openai)).assert_outcomes(skipped=200)
    fake_openai.finish()
    batched, report = app.run_report("--eval-resume=last", *batch_args(fake_openai))
    assert batched.ret == live.ret
    assert batched.parseoutcomes()["passed"] == live.parseoutcomes()["passed"] == 200

    def trials(report: dict[str, Any]) -> dict[str, tuple[Any, ...]]:
        (experiment,) = report["experiments"]
        return {
            t["dataset_item_id"]: (t["output"], t["passed"], [s["value"] for s in t["scores"]])
            for t in experiment["trials"]
        }

    def cost(report: dict[str, Any]) -> float:
        (experiment,) = report["experiments"]
        return float(
            sum(t["usage"]["app"]["cost"] + t["usage"]["judge"]["cost"] for t in experiment["trials"])
        )

    assert trials(report) == trials(live_report)
    assert len(fake_openai.live_calls) == calls  # none more: every call went in a batch
    assert len(fake_openai.batches) == 2
    assert app.completed() == {(name, 0) for name in items}
    assert cost(report) == pytest.approx(cost(live_report) / 2)


def test_a_three_call_agent_and_its_judge_take_four_rounds(app: Project, fake_openai: FakeOpenAI) -> None:
    agent = JUDGED_APP.replace(
        'return ask(eval_item["input"])', 'return ask("then " + ask("next " + ask(eval_item["input"])))'
    )
    app.write("test_app.py", agent)
    app.run("--eval", *batch_args(fake_openai)).assert_outcomes(skipped=3)
    for round_ in range(1, 4):  # the agent's second and third calls, then the judge's
        fake_openai.finish()
        app.run("--eval-resume=last", *batch_args(fake_openai)).assert_outcomes(skipped=3)
        assert len(fake_openai.batches) == round_ + 1
    fake_openai.finish()
    done = app.run("--eval-resume=last", *batch_args(fake_openai))
    done.assert_outcomes(failed=3)  # completed: the judge reads the agent's answer as wrong
    assert fake_openai.live_calls == []
    outputs = {t.dataset_item_id: t.output for t in app.trials()}
    assert outputs["a"] == {"output": "answer to then answer to next answer to question a"}


@needs_extra("cost", "genai_prices")
def test_a_budget_counts_the_answers_once_when_they_are_collected(
    app: Project, fake_openai: FakeOpenAI
) -> None:
    app.write("test_app.py", APP.format(body=TRACED_BODY))
    _, first = app.run_report("--eval", "--eval-budget=1", *batch_args(fake_openai))
    assert first["budget"]["spent"] == 0  # a deferred request costs nothing yet
    fake_openai.finish()
    _, second = app.run_report("--eval-resume=last", "--eval-budget=1", *batch_args(fake_openai))
    assert second["batches"]["cost"] > 0
    # The answers' batch cost, once: their replay is not paid again.
    assert second["budget"]["spent"] == pytest.approx(second["batches"]["cost"])


def test_with_the_opik_backend_the_trials_wait_on_the_server(
    app: Project, fake_openai: FakeOpenAI, opik: OpikTestServer
) -> None:
    app.run("--eval", *batch_args(fake_openai)).assert_outcomes(skipped=3)
    fake_openai.finish()
    result, report = app.run_report("--eval-resume=last", *batch_args(fake_openai))
    result.assert_outcomes(passed=3)
    (experiment,) = report["experiments"]
    assert {t["dataset_item_id"]: t["output"] for t in experiment["trials"]} == {
        name: {"output": f"answer to question {name}"} for name in "abc"
    }
    assert fake_openai.live_calls == []


def test_a_retry_of_a_deferred_request_is_not_submitted_again(app: Project, fake_openai: FakeOpenAI) -> None:
    # A retry loop on the error answer (as tenacity's): one request in the batch, not three.
    app.write(
        "test_app.py",
        APP.format(
            body="""for attempt in range(3):
        try:
            return ask(eval_item['input'])
        except openai.BadRequestError:
            pass
    raise RuntimeError('no answer')"""
        ),
    )
    app.run("--eval", *batch_args(fake_openai)).assert_outcomes(skipped=3)
    (batch_id,) = fake_openai.batches
    assert len(input_lines(fake_openai, batch_id)) == 3
    fake_openai.finish()
    app.run("--eval-resume=last", *batch_args(fake_openai)).assert_outcomes(passed=3)


def test_a_new_run_does_not_replay_the_answers_an_earlier_run_was_given(
    app: Project, fake_openai: FakeOpenAI
) -> None:
    app.run("--eval", *batch_args(fake_openai)).assert_outcomes(skipped=3)
    fake_openai.finish()
    app.run("--eval-resume=last", *batch_args(fake_openai)).assert_outcomes(passed=3)
    # Tomorrow's nightly run asks again: last night's answers measure last night's app.
    app.run("--eval", *batch_args(fake_openai)).assert_outcomes(skipped=3)
    assert len(fake_openai.batches) == 2


def test_a_judge_that_swallows_a_refused_call_is_not_cached(app: Project, fake_openai: FakeOpenAI) -> None:
    # A judge that streams (no batch takes it: strict mode refuses it) and returns 0 on an error.
    forgiving = JUDGED_APP.replace(
        '        verdict = ask(f"grade: {output}")',
        """        try:
            stream = openai.OpenAI(max_retries=0).chat.completions.create(
                model="gpt-4.1-mini", messages=[{"role": "user", "content": f"grade: {output}"}], stream=True
            )
            verdict = "".join(chunk.choices[0].delta.content or "" for chunk in stream)
        except openai.BadRequestError:
            return ScoreResult(name="judge", value=0.0)""",
    )
    app.write("test_app.py", forgiving.replace('return ask(eval_item["input"])', 'return "a fixed output"'))
    strict = app.run(
        "--eval", *batch_args(fake_openai)[:-2], "--eval-batch=strict", batch_args(fake_openai)[-1]
    )
    strict.assert_outcomes(failed=3)  # pending: the judge's call was not sent
    assert "--eval-batch=strict: not batchable" in strict.stdout.str()
    assert list((app.path / ".opik-eval" / "judge-cache").rglob("*.json")) == []


def test_cancelled_batches_are_submitted_again(
    app: Project, fake_openai: FakeOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    app.run("--eval", *batch_args(fake_openai)).assert_outcomes(skipped=3)
    (batch_id,) = fake_openai.batches
    capsys.readouterr()
    assert main(["--store", str(app.store_path), "batch", "cancel"]) == 0
    assert f"  {batch_id}  openai gpt-4.1-mini /v1/chat/completions  cancelling" in capsys.readouterr().out
    fake_openai.finish()
    again = app.run("--eval-resume=last", *batch_args(fake_openai))
    again.assert_outcomes(skipped=3)
    assert "3 requests without an answer, submitted again" in again.stdout.str()
    assert len(fake_openai.batches) == 2


def two_tests(batch: str, body: str) -> str:
    """The app's test, and a second one whose marker says ``batch=``."""
    second = (
        '@pytest.mark.eval(dataset="data.jsonl", metrics=[Equals()], '
        f'scoring_key_mapping={{"reference": "expected_output"}}, batch={batch})\n'
        f"def test_live(eval_item):\n    {body}\n"
    )
    return APP.format(body=SINGLE_CALL) + "\n\n" + second


def test_the_marker_sends_one_tests_calls_live_or_makes_it_strict(
    app: Project, fake_openai: FakeOpenAI
) -> None:
    app.write("test_app.py", two_tests("False", SINGLE_CALL))
    result = app.run("--eval", *batch_args(fake_openai))
    result.assert_outcomes(passed=3, skipped=3)  # test_live's calls went live; test_qa's wait
    assert len(fake_openai.live_calls) == 3
    (batch_id,) = fake_openai.batches
    assert len(input_lines(fake_openai, batch_id)) == 3
    streamed = (
        "return ''.join(c.choices[0].delta.content or '' for c in openai.OpenAI(max_retries=0)"
        ".chat.completions.create(model='gpt-4.1-mini', messages=[{'role': 'user', 'content': "
        "eval_item['input']}], stream=True))"
    )
    app.write("test_app.py", two_tests("'strict'", streamed))
    strict = app.run("--eval", *batch_args(fake_openai), "-k", "test_live")
    strict.assert_outcomes(failed=3)  # a streamed request no batch takes: strict for this test
    assert "--eval-batch=strict: not batchable" in strict.stdout.str()


def test_a_marker_that_batches_in_a_session_that_does_not_says_so(
    app: Project, fake_openai: FakeOpenAI
) -> None:
    app.write("test_app.py", two_tests("True", SINGLE_CALL))
    result = app.run("--eval", "-k", "test_live")
    result.assert_outcomes(passed=3)
    assert (
        "batch='on' in its marker, but this session runs without --eval-batch: its calls go live"
        in result.stdout.str()
    )


def test_a_bad_batch_in_the_marker_fails_collection(app: Project) -> None:
    app.write("test_app.py", two_tests("'sometimes'", SINGLE_CALL))
    result = app.run("--eval")
    result.stdout.fnmatch_lines(["*batch must be True, False, 'strict', 'on' or 'off', not 'sometimes'*"])


def test_batch_status_says_why_requests_got_no_answer(
    app: Project, fake_openai: FakeOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    app.run("--eval", *batch_args(fake_openai)).assert_outcomes(skipped=3)
    (batch_id,) = fake_openai.batches
    ids = custom_ids(fake_openai, batch_id)
    fake_openai.finish(batch_id, expire=[ids["a"], ids["b"]])
    store = ["--store", str(app.store_path)]
    assert main([*store, "batch", "collect"]) == 0
    capsys.readouterr()
    assert main([*store, "batch", "status"]) == 0
    assert "  2 requests without an answer: " in capsys.readouterr().out


def test_a_rescore_batches_only_its_judges_and_a_resume_collects_them(
    app: Project, fake_openai: FakeOpenAI
) -> None:
    app.write("test_app.py", JUDGED_APP)
    live, live_report = app.run_report("--eval")
    live.assert_outcomes(passed=3)
    assert len(fake_openai.live_calls) == 6  # the app's and the judge's
    (original,) = (e["id"] for e in live_report["experiments"])

    # opik-eval rescore --batch: the stored outputs, only the judges' calls, in one batch.
    port = fake_openai.base_url.split(":")[2].split("/")[0]
    first = subprocess.run(
        [sys.executable, "-m", "pytest_opik_eval.cli", "rescore", "--batch", "last"]
        + [f"--eval-batch-provider=127.0.0.1:{port}=openai", "-p", "no:randomly"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=app.path,
        check=False,
    )
    assert first.returncode == pytest.ExitCode.INTERRUPTED, first.stdout + first.stderr
    assert "3 eval trials waiting for a batch" in first.stdout
    assert "then finish them: pytest --eval-resume=" in first.stdout
    (batch_id,) = fake_openai.batches
    assert all(
        line["body"]["messages"][0]["content"].startswith("grade: answer to question ")
        for line in input_lines(fake_openai, batch_id)
    )
    assert len(fake_openai.live_calls) == 6  # no task, no judge live

    fake_openai.finish()
    collected, report = app.run_report("--eval-resume=last", *batch_args(fake_openai))
    collected.assert_outcomes(passed=3)
    assert "eval: a rescore of run " in collected.stdout.str()
    assert len(fake_openai.live_calls) == 6
    (experiment,) = report["experiments"]
    assert experiment["rescore_of"] == original
    assert {t["dataset_item_id"]: [s["value"] for s in t["scores"]] for t in experiment["trials"]} == {
        name: [1.0] for name in "abc"
    }
    judges = report["batches"]
    assert judges["live_cost"] == pytest.approx(2 * judges["cost"])
    assert judges["cost"] > 0


def test_calibrate_with_eval_batch_is_a_usage_error(app: Project, fake_openai: FakeOpenAI) -> None:
    app.run("--eval").assert_outcomes(passed=3)
    result = app.run("--eval-rescore=last", "--eval-calibrate", *batch_args(fake_openai))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: --eval-batch (from --eval-batch) with opik-eval calibrate or judge-drift: a calibration *"]
    )


GEMINI_APP = """
import pytest
from google import genai
from pytest_opik_eval.metrics import BaseMetric, Equals, ScoreResult
from pytest_opik_eval.tracing import trace


def ask(text):
    # The client as a user makes it: its key and base URL from the environment.
    with trace.span("generate", type="llm") as span:
        client = genai.Client()  # kept while in use: a Client closes its connections when collected
        answer = client.models.generate_content(model="gemini-2.5-flash", contents=text)
        span.model = "gemini-2.5-flash"
        usage = answer.usage_metadata
        span.usage = {"prompt_tokens": usage.prompt_token_count, "completion_tokens": usage.candidates_token_count}
    return answer.text


class Judge(BaseMetric):
    judge = True

    def __init__(self):
        super().__init__(name="judge", threshold=0.5)

    def score(self, input, output, **ignored):
        verdict = ask(f"grade: {output}")
        return ScoreResult(name="judge", value=1.0 if f"answer to grade: answer to {input}" == verdict else 0.0)


@pytest.mark.eval(dataset="data.jsonl", metrics=[METRIC], scoring_key_mapping={"reference": "expected_output"})
def test_qa(eval_item):
    return ask(eval_item["input"])
"""


@pytest.fixture
def gemini_app(app: Project, fake_gemini: FakeGemini, monkeypatch: pytest.MonkeyPatch) -> Project:
    # python-genai takes GOOGLE_API_KEY over GEMINI_API_KEY when both are set.
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    monkeypatch.setenv("GEMINI_API_KEY", fake_gemini.api_key)
    monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", fake_gemini.origin)
    app.write("test_app.py", GEMINI_APP.replace("METRIC", "Equals()"))
    return app


def gemini_args(fake: FakeGemini) -> list[str]:
    return ["--eval-batch", f"--eval-batch-provider=127.0.0.1:{fake.port}=gemini"]


def gemini_keys(fake: FakeGemini, batch_id: str) -> dict[str, str]:
    """Item -> the custom_id of its request in the batch ("question a" asks for item a)."""
    return {
        request["request"]["contents"][0]["parts"][0]["text"].split()[-1]: request["metadata"]["key"]
        for request in fake.requests_of(batch_id)
    }


@needs_extra("cost", "genai_prices")
@pytest.mark.usefixtures("gemini_app")
def test_a_gemini_app_and_its_judge_end_as_a_live_run_does_at_half_the_price(
    app: Project, fake_gemini: FakeGemini
) -> None:
    app.write("test_app.py", GEMINI_APP.replace("METRIC", "Judge()"))
    live, live_report = app.run_report("--eval", "--eval-store=live/store.db")
    live.assert_outcomes(passed=3)
    calls = len(fake_gemini.live_calls)
    assert calls == 6  # the app's and the judge's

    first = app.run("--eval", *gemini_args(fake_gemini))
    first.assert_outcomes(skipped=3)
    (batch_id,) = fake_gemini.batches
    assert (
        f"submitted 3 requests in 1 batch: gemini gemini-2.5-flash /models/gemini-2.5-flash:generateContent "
        f"{batch_id} (3)" in first.stdout.str()
    )
    fake_gemini.finish()
    second = app.run("--eval-resume=last", *gemini_args(fake_gemini))
    second.assert_outcomes(skipped=3)
    assert "submitted 3 requests in 1 batch" in second.stdout.str()
    fake_gemini.finish()
    batched, report = app.run_report("--eval-resume=last", *gemini_args(fake_gemini))
    batched.assert_outcomes(passed=3)

    def trials(report: dict[str, Any]) -> dict[str, tuple[Any, ...]]:
        (experiment,) = report["experiments"]
        return {
            t["dataset_item_id"]: (t["output"], t["passed"], [s["value"] for s in t["scores"]])
            for t in experiment["trials"]
        }

    def cost(report: dict[str, Any]) -> float:
        (experiment,) = report["experiments"]
        return float(
            sum(t["usage"]["app"]["cost"] + t["usage"]["judge"]["cost"] for t in experiment["trials"])
        )

    assert trials(report) == trials(live_report)
    assert trials(report)["a"][0] == {"output": "answer to question a"}
    assert cost(report) == pytest.approx(cost(live_report) / 2)
    assert len(fake_gemini.live_calls) == calls  # none more: every call went in a batch
    assert len(fake_gemini.batches) == 2
    assert fake_gemini.rejected == []
    for path, text in files_under(app.path / ".opik-eval").items():
        assert fake_gemini.api_key not in text, path


@pytest.mark.usefixtures("gemini_app")
def test_gemini_requests_that_failed_or_expired_are_submitted_again(
    app: Project, fake_gemini: FakeGemini
) -> None:
    app.run("--eval", *gemini_args(fake_gemini)).assert_outcomes(skipped=3)
    (first,) = fake_gemini.batches
    keys = gemini_keys(fake_gemini, first)
    # A rate limit is worth another try; a bad request is answered as live would answer it.
    fake_gemini.finish(first, error={keys["a"]: "RESOURCE_EXHAUSTED", keys["b"]: "INVALID_ARGUMENT"})
    second = app.run("--eval-resume=last", *gemini_args(fake_gemini))
    second.assert_outcomes(passed=1, failed=1, skipped=1)
    output = second.stdout.str()
    assert (
        "eval batches collected: 2 answers from 1 batch; 1 request without an answer, submitted again"
        in output
    )
    assert "400 INVALID_ARGUMENT" in output
    (again,) = [b for b in fake_gemini.batches if b != first]
    assert set(gemini_keys(fake_gemini, again).values()) == {keys["a"]}
    fake_gemini.expire(again)  # the whole batch: its request is submitted once more
    # b's trial runs again, as a failed one does on a resume, and replays its 400.
    app.run("--eval-resume=last", *gemini_args(fake_gemini)).assert_outcomes(failed=1, skipped=1)
    assert len(fake_gemini.batches) == 3
    fake_gemini.finish()
    app.run("--eval-resume=last", *gemini_args(fake_gemini)).assert_outcomes(passed=1, failed=1)
    # b's task raised on the 400, as it would live: its trial stays pending, as any task error leaves it.
    assert {(t.dataset_item_id, t.status) for t in app.trials()} == {
        ("a", "completed"),
        ("b", "pending"),
        ("c", "completed"),
    }
    assert fake_gemini.live_calls == []
    assert fake_gemini.rejected == []
    for path, text in files_under(app.path / ".opik-eval").items():
        assert fake_gemini.api_key not in text, path


@pytest.mark.usefixtures("gemini_app")
def test_a_gemini_submission_killed_mid_way_is_found_by_its_name(
    app: Project, fake_gemini: FakeGemini
) -> None:
    app.write("conftest.py", "import os, pathlib\npathlib.Path('pid.txt').write_text(str(os.getpid()))\n")
    fake_gemini.kill_on_create(app.path / "pid.txt")
    killed = app.pytester.runpytest_subprocess("-p", "opik_eval", "--eval", *gemini_args(fake_gemini))
    assert killed.ret == -9  # after Gemini created the batch, before the ledger said so
    resumed = app.run("--eval-resume=last", *gemini_args(fake_gemini))
    resumed.assert_outcomes(skipped=3)
    (batch_id,) = fake_gemini.batches
    assert f"still running: {batch_id}" in resumed.stdout.str()
    assert fake_gemini.creates == 1
    fake_gemini.finish()
    app.run("--eval-resume=last", *gemini_args(fake_gemini)).assert_outcomes(passed=3)
    assert fake_gemini.creates == 1


@pytest.mark.usefixtures("gemini_app")
def test_gemini_batch_status_and_cancel_commands(
    app: Project, fake_gemini: FakeGemini, capsys: pytest.CaptureFixture[str]
) -> None:
    app.run("--eval", *gemini_args(fake_gemini)).assert_outcomes(skipped=3)
    (batch_id,) = fake_gemini.batches
    cli = functools.partial(batch_cli, app, capsys)

    code, out = cli("status")
    assert code == 0
    assert (
        f"  {batch_id}  gemini gemini-2.5-flash /models/gemini-2.5-flash:generateContent  running 0/3, 0 failed"
        in out
    )
    code, out = cli("cancel")
    assert code == 0
    assert fake_gemini.batches[batch_id]["metadata"]["state"] == "BATCH_STATE_CANCELLED"
    # A cancelled batch answered nothing: its requests go in a new batch, and end as live would.
    resumed = app.run("--eval-resume=last", *gemini_args(fake_gemini))
    resumed.assert_outcomes(skipped=3)
    assert "3 requests without an answer, submitted again" in resumed.stdout.str()
    fake_gemini.finish()
    app.run("--eval-resume=last", *gemini_args(fake_gemini)).assert_outcomes(passed=3)
    assert len(fake_gemini.batches) == 2
    assert fake_gemini.live_calls == []


PER_TURN_JUDGE = """
import openai
import pytest
from pytest_opik_eval.metrics import BaseMetric, PerTurn, ScoreResult


class Judge(BaseMetric):
    judge = True

    def __init__(self):
        super().__init__(name="judge", threshold=0.5)

    def score(self, output, **ignored):
        client = openai.OpenAI(max_retries=0)
        answer = client.chat.completions.create(
            model="gpt-4.1-mini", messages=[{"role": "user", "content": f"grade: {output}"}]
        )
        return ScoreResult(name=self.name, value=float(answer.choices[0].message.content.startswith("answer to grade")))


@pytest.mark.eval(dataset="chat.jsonl", metrics=[PerTurn(Judge())])
def test_chat(eval_conversation):
    return eval_conversation.run(str.upper)
"""


def test_a_judge_turn_by_turn_sends_every_turn_in_one_batch(app: Project, fake_openai: FakeOpenAI) -> None:
    app.dataset([{"id": "a", "user_responses": ["one", "two", "three", "four"]}], "chat.jsonl")
    app.write("test_app.py", PER_TURN_JUDGE)
    first = app.run("--eval", *batch_args(fake_openai))
    first.assert_outcomes(skipped=1)
    (batch_id,) = fake_openai.batches
    assert [line["body"]["messages"][0]["content"] for line in input_lines(fake_openai, batch_id)] == [
        f"grade: {word.upper()}" for word in ("one", "two", "three", "four")
    ]
    fake_openai.finish()
    second, report = app.run_report("--eval-resume=last", *batch_args(fake_openai))
    second.assert_outcomes(passed=1)
    (score,) = report["experiments"][0]["trials"][0]["scores"]
    assert score["value"] == 1.0
    assert len(fake_openai.batches) == 1
