"""--eval-record end to end: the app's HTTP calls recorded per trial, replayed without a network,
a request without a recording failing its trial, and the files that keep them.

The app under test is an inner project's eval test that asks a fake OpenAI-style server on
127.0.0.1 with plain httpx, sending an API key in a header and in the query. The server answers
each prompt differently each time it is asked, so trial 0 and trial 1 of an item get different
answers; an inner conftest counts every connection the app's process opens to it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import NEEDS_RECORD, Project
from fake_llm import APP, CONFTEST, SECRET, FakeLLM, connections
from opik_server import OpikTestServer

from pytest_opik_eval.cli import main as opik_eval
from pytest_opik_eval.option_values import RECORD_MODES
from pytest_opik_eval.store.local import GITIGNORE

pytestmark = NEEDS_RECORD  # tests/test_extras.py checks what its absence says

QUESTIONS = ["capital", "colour", "planet"]


def app_test(imports: str, test: str, decorator: str = "", options: str = "") -> str:
    """An inner test module whose eval test asks the dataset's questions (two trials of each)
    through ``test``, a ``def test_answer`` with the imports it needs."""
    return f"""
import pytest
from pytest_opik_eval.metrics import Contains
{imports}

{decorator}
@pytest.mark.eval(
    dataset="data.jsonl",
    metrics=[Contains()],
    scoring_key_mapping={{"reference": "expected_output"}},
    trial_count=2,
    {options}
)
{test}"""


def write_project(
    project: Project,
    *,
    threads: int | None = None,
    asynchronous: bool = False,
    marker: str = "",
    suffix: str = "",
) -> None:
    rows = [{"id": q, "input": {"question": q}, "expected_output": "answer 1"} for q in QUESTIONS]
    project.dataset(rows)
    project.write("app.py", APP)
    project.write("conftest.py", CONFTEST)
    # Trial 0 of each item passes (the first answer), trial 1 fails: the verdicts differ by trial.
    ask = "ask_async" if asynchronous else "ask"
    test = f"""{"async def" if asynchronous else "def"} test_answer(eval_item):
    return {"await " if asynchronous else ""}{ask}(eval_item["input"]["question"]{f' + "{suffix}"' if suffix else ""})
"""
    options = f"task_threads={threads}," if threads else ""
    project.write("test_app.py", app_test(f"from app import {ask}", test, marker, options))


def trials(report: dict[str, Any]) -> dict[tuple[str, int], tuple[Any, bool | None]]:
    """Each trial's output and verdict, by (item id, trial), of the report's one experiment."""
    [experiment] = report["experiments"]
    return experiment_trials(experiment)


def experiment_trials(experiment: dict[str, Any]) -> dict[tuple[str, int], tuple[Any, bool | None]]:
    return {(t["dataset_item_id"], t["trial"]): (t["output"], t["passed"]) for t in experiment["trials"]}


def recordings(project: Project) -> Path:
    return project.path / ".opik-eval" / "recordings"


def recorded_files(project: Project) -> dict[str, bytes]:
    """The recordings' files (not the journals), by path."""
    folder = recordings(project)
    return {
        str(path.relative_to(folder)): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and not any(part.startswith(".") for part in path.relative_to(folder).parts)
    }


def interactions(project: Project) -> list[dict[str, Any]]:
    [content] = recorded_files(project).values()
    found: list[dict[str, Any]] = json.loads(content)["interactions"]
    return found


# -- record, then replay offline -------------------------------------------------------------


def test_a_recorded_run_replays_offline_with_the_same_outputs_and_verdicts(
    project: Project, llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_project(project)
    result, recorded = project.run_report("--eval", "--eval-record=new_episodes")
    result.assert_outcomes(passed=3, failed=3)
    result.stdout.fnmatch_lines(
        [
            "eval recordings: */.opik-eval/recordings (mode new_episodes, from --eval-record: *)",
            "eval recordings (--eval-record=new_episodes): 0 replayed, 6 recorded, 0 missed",
        ]
    )
    assert llm.requests == 6
    assert connections(project) == 6
    assert recorded["recordings"] == {
        "mode": "new_episodes",
        "replayed": 0,
        "recorded": 6,
        "missed": 0,
        "missed_trials": 0,
        "refused": 0,
        "saved_input_tokens": 0,
        "saved_output_tokens": 0,
        "saved_cost": None,
    }
    # One file per test, at a path made from its node id.
    assert list(recorded_files(project)) == ["test_app.py/test_answer.json"]

    llm.stop()
    step_summary = project.path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step_summary))
    result, replayed = project.run_report("--eval", "--eval-record=none")
    result.assert_outcomes(passed=3, failed=3)
    assert trials(replayed) == trials(recorded)
    assert connections(project) == 0
    assert "📼 eval recordings (--eval-record=none): 6 replayed, 0 recorded, 0 missed; saved 90 tokens" in (
        step_summary.read_text(encoding="utf-8")
    )
    result.stdout.fnmatch_lines(
        ["eval recordings (--eval-record=none): 6 replayed, 0 recorded, 0 missed; saved 90 tokens*"]
    )
    assert replayed["recordings"]["replayed"] == 6
    assert replayed["recordings"]["saved_input_tokens"] == 60
    assert replayed["recordings"]["saved_output_tokens"] == 30


def test_each_trial_replays_its_own_answer(project: Project, llm: FakeLLM) -> None:
    write_project(project)
    result, recorded = project.run_report("--eval", "--eval-record=once")
    answers = {key: output for key, (output, _) in trials(recorded).items()}
    # The requests of an item's two trials are the same; the server answered them differently.
    assert answers == {
        **{(q, 0): {"output": f"answer 1 to {q}"} for q in QUESTIONS},
        **{(q, 1): {"output": f"answer 2 to {q}"} for q in QUESTIONS},
    }
    llm.reset()
    # Mode once: the recorded trials replay, and the server is not asked again.
    result, replayed = project.run_report("--eval", "--eval-record=once")
    assert trials(replayed) == trials(recorded)
    assert llm.requests == 6
    result.stdout.fnmatch_lines(["eval recordings (--eval-record=once): 6 replayed, 0 recorded, 0 missed*"])


def test_no_secret_is_written_to_the_recordings(project: Project, llm: FakeLLM) -> None:
    write_project(project)
    project.run("--eval", "--eval-record=all").assert_outcomes(passed=3, failed=3)
    files = recorded_files(project)
    assert files
    for path, content in files.items():
        assert SECRET.encode() not in content, path
    request = interactions(project)[0]["request"]
    # The key param is redacted; the headers (Authorization) are not kept.
    assert "key=REDACTED" in json.dumps(request)
    assert "Bearer" not in json.dumps(interactions(project))
    # The journals that were folded are gone: nothing else holds the requests.
    assert not list((recordings(project) / ".journal").glob("*.jsonl"))


# -- strict replay, and recording what is new ------------------------------------------------


def test_a_changed_prompt_fails_its_trials_in_strict_mode_with_a_diff_and_stays_pending(
    project: Project, llm: FakeLLM
) -> None:
    write_project(project)
    project.run("--eval", "--eval-record=new_episodes").assert_outcomes(passed=3, failed=3)
    assert connections(project) == 6

    write_project(project, suffix="?")  # the app now asks each question with a question mark
    result, report = project.run_report("--eval", "--eval-record=none")
    result.assert_outcomes(failed=6)
    assert connections(project) == 0
    result.stdout.fnmatch_lines(
        [
            "*item capital (trial 0): the app made 1 request with no recording (--eval-record=none):",
            f"  POST {llm.url}/v1/chat/completions?key=REDACTED",
            '    -*"content": "capital",',
            '    +*"content": "capital?",',
            "*record what is missing with --eval-record=new_episodes (the trial stays pending)",
        ]
    )
    result.stdout.fnmatch_lines(
        ["eval recordings (--eval-record=none): 0 replayed, 0 recorded, 6 missed (6 trials failed)"]
    )
    assert report["recordings"]["missed_trials"] == 6
    assert {t["status"] for t in report["experiments"][0]["trials"]} == {"pending"}

    # The pending trials are resumed, recording what is new: the server is asked the new questions.
    result, resumed = project.run_report("--eval-resume=last", "--eval-record=new_episodes")
    result.assert_outcomes(passed=3, failed=3)
    assert llm.requests == 12
    assert {output["output"] for output, _ in trials(resumed).values()} >= {"answer 1 to capital?"}
    assert len(interactions(project)) == 12  # the old answers stay beside the new ones


def test_new_episodes_records_a_changed_prompt_and_keeps_the_answers_of_the_others(
    project: Project, llm: FakeLLM
) -> None:
    write_project(project)
    _, recorded = project.run_report("--eval", "--eval-record=new_episodes")
    # The app changes for one question only.
    app = project.path / "app.py"
    app.write_text(
        app.read_text().replace(
            "def ask(prompt):", "def ask(prompt):\n    prompt = prompt.replace('planet', 'planet?')"
        )
    )
    result, report = project.run_report("--eval", "--eval-record=new_episodes")
    result.stdout.fnmatch_lines(
        ["eval recordings (--eval-record=new_episodes): 4 replayed, 2 recorded, 0 missed*"]
    )
    assert llm.requests == 8
    now, before = trials(report), trials(recorded)
    assert {key: now[key] for key in now if key[0] != "planet"} == {
        key: before[key] for key in before if key[0] != "planet"
    }
    assert now[("planet", 0)][0] == {"output": "answer 1 to planet?"}


# -- strict replay sends nothing it cannot replay --------------------------------------------


# The task asks from a thread of its own, which carries no trial: SUBMIT is pool.submit's call.
THREAD_TEST = app_test(
    "import contextvars\nfrom concurrent.futures import ThreadPoolExecutor\nfrom app import ask, ask_requests",
    """def test_answer(eval_item):
    with ThreadPoolExecutor(2) as pool:
        return pool.submit(SUBMIT, eval_item["input"]["question"]).result()
""",
)


@pytest.mark.parametrize("client", ["ask", "ask_requests"], ids=["httpx", "requests"])
def test_strict_replay_sends_no_request_from_a_thread_the_task_started(
    project: Project, llm: FakeLLM, client: str
) -> None:
    write_project(project)
    project.write("test_app.py", THREAD_TEST.replace("SUBMIT", client))
    # Outside the trial's context: sent, and not recorded, in the modes that record.
    project.run("--eval", "--eval-record=new_episodes").assert_outcomes(passed=3, failed=3)
    assert connections(project) == 6
    assert not recorded_files(project)

    # Strict replay, the server still up: nothing reaches it, and every trial fails saying why.
    result, report = project.run_report("--eval", "--eval-record=none")
    result.assert_outcomes(failed=6)
    assert connections(project) == 0
    host = f"127.0.0.1:{llm.port}"
    result.stdout.fnmatch_lines(
        [
            "*item capital (trial 0): the app made 1 request with no recording (--eval-record=none):",
            f"  POST {llm.url}/v1/chat/completions?key=REDACTED",
            "    not sent: it was made outside the trial's context (in a thread the task started itself: "
            "ThreadPoolExecutor.submit, threading.Thread, loop.run_in_executor), so it cannot be recorded or "
            "replayed, and strict replay sends nothing else; every trial running in this process then fails",
            "    fix: run that code in the trial's context (executor.submit(contextvars.copy_context().run, "
            f"function), asyncio.to_thread), or let the host through with --eval-record-allow-host={host}",
            "the trial stays pending",
        ]
    )
    result.stdout.fnmatch_lines(
        ["eval recordings (--eval-record=none): 0 replayed, 0 recorded, 6 missed (6 trials failed)"]
    )
    assert {t["status"] for t in report["experiments"][0]["trials"]} == {"pending"}

    # The fix it names: the trial's context carried into the thread, recorded and replayed.
    project.write("test_app.py", THREAD_TEST.replace("SUBMIT", f"contextvars.copy_context().run, {client}"))
    llm.reset()
    project.run("--eval", "--eval-record=new_episodes").assert_outcomes(passed=3, failed=3)
    assert len(interactions(project)) == 6
    connections(project)
    result = project.run("--eval", "--eval-record=none")
    result.assert_outcomes(passed=3, failed=3)
    assert connections(project) == 0


# A local service the app reads (a retrieval index, say), which a session fixture checks first.
SERVICE_CONFTEST = """
import os
import urllib.request
import pytest


@pytest.fixture(scope="session", autouse=True)
def service_is_up():
    with urllib.request.urlopen(os.environ["SERVICE_URL"] + "/health", timeout=10) as answer:
        assert answer.status == 200
"""

SERVICE_TEST = app_test(
    "import os\nimport httpx\nfrom app import ask",
    """def test_answer(eval_item):
    with httpx.Client(trust_env=False) as client:
        context = client.get(os.environ["SERVICE_URL"] + "/context").text
    return ask(eval_item["input"]["question"]) + context
""",
)


class LocalService:
    """A local HTTP service that counts its requests."""

    def __init__(self) -> None:
        service = self
        self.requests = 0

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                service.requests += 1
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.port = int(self.server.server_address[1])

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def service(monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalService]:
    running = LocalService()
    monkeypatch.setenv("SERVICE_URL", f"http://127.0.0.1:{running.port}")
    yield running
    running.stop()


def test_a_host_let_through_is_left_alone_and_strict_replay_refuses_a_fixtures_request(
    project: Project, llm: FakeLLM, service: LocalService
) -> None:
    write_project(project)
    project.write("conftest.py", CONFTEST + SERVICE_CONFTEST)
    project.write("test_app.py", SERVICE_TEST)
    allow = f"--eval-record-allow-host=127.0.0.1:{service.port}"
    project.run("--eval", "--eval-record=new_episodes", allow).assert_outcomes(passed=3, failed=3)
    # The service's calls are not recorded, in the task or out of it: only the LLM's.
    assert {i["request"]["url"].split("/")[2] for i in interactions(project)} == {f"127.0.0.1:{llm.port}"}
    assert service.requests == 7
    assert connections(project) == 6

    llm.stop()
    # Let through from the ini file too (one host per line): the service is called, the LLM replayed.
    project.pytester.makeini(
        f"[pytest]\nfilterwarnings = error\neval_record_allow_host =\n    localhost:1\n    127.0.0.1:{service.port}\n"
    )
    result = project.run("--eval", "--eval-record=none")
    result.assert_outcomes(passed=3, failed=3)
    result.stdout.fnmatch_lines(
        [f"eval recordings: * (mode none, *); left alone: localhost:1, 127.0.0.1:{service.port}"]
    )
    assert service.requests == 14
    assert connections(project) == 0

    # Not let through: strict replay does not send the fixture's request, and the session fails.
    project.pytester.makeini("[pytest]\nfilterwarnings = error\n")
    result = project.run("--eval", "--eval-record=none")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert service.requests == 14
    result.stdout.fnmatch_lines(
        [
            f"--eval-record=none did not send GET http://127.0.0.1:{service.port}/health: it was made outside "
            "any trial (a fixture, a hook, or a thread a task started and did not wait for), and strict replay "
            "sends nothing it cannot replay: the session fails. Let a local service through with "
            f"--eval-record-allow-host=127.0.0.1:{service.port}, or make the request inside the task",
            "eval recordings (--eval-record=none): 0 replayed, 0 recorded, 1 missed "
            "(1 request outside any trial not sent)",
        ]
    )


def test_a_bad_host_to_let_through_is_a_usage_error(project: Project) -> None:
    write_project(project)
    result = project.run("--eval", "--eval-record-allow-host=http://localhost:8080")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*--eval-record-allow-host: expected HOST or HOST:PORT, such as localhost or 127.0.0.1:8080 "
            "([[]::1]:8080 for IPv6), not a URL; got 'http://localhost:8080'"
        ]
    )
    project.pytester.makeini("[pytest]\neval_record_allow_host = localhost:99999\n")
    result = project.run("--eval")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*ini eval_record_allow_host: expected HOST or HOST:PORT*got 'localhost:99999'"]
    )


def test_strict_replay_records_the_run_on_the_opik_server(
    project: Project, llm: FakeLLM, opik: OpikTestServer
) -> None:
    write_project(project)
    project.run("--eval", "--eval-record=new_episodes").assert_outcomes(passed=3, failed=3)
    llm.stop()
    connections(project)
    result = project.run("--eval", "--eval-record=none")
    result.assert_outcomes(passed=3, failed=3)
    result.stdout.fnmatch_lines(["eval recordings (--eval-record=none): 6 replayed, 0 recorded, 0 missed*"])
    assert connections(project) == 0
    # The plugin's own requests went out: both runs, each trial's output and scores, on the server.
    assert len(opik.experiments) == 2
    assert len(opik.feedback_scores) == 12


# -- where the trials run: async, threads, pytest-xdist --------------------------------------

# "-p asyncio" names a module of the standard library too: pytest warns that it cannot rewrite it.
# pytest-asyncio before 0.24 does not know its loop scope option: a warning, not an error.
ASYNCIO_INI = """
[pytest]
filterwarnings =
    error
    ignore:Module already imported so cannot be rewritten:pytest.PytestAssertRewriteWarning
    ignore:Unknown config option:pytest.PytestConfigWarning
asyncio_default_fixture_loop_scope = function
asyncio_mode = auto
"""


# Where an async test's trials run: on pytest-asyncio's loop (its replacement of the test
# function), on anyio's, on an event loop of their own without either plugin, and on threads.
ASYNC_RUNNERS = [
    pytest.param(("-p", "asyncio"), "", None, id="pytest-asyncio"),
    pytest.param(("-p", "asyncio"), "", 4, id="pytest-asyncio-threads"),
    pytest.param(("-p", "anyio"), "@pytest.mark.anyio", None, id="anyio"),
    pytest.param((), "", None, id="own-loop"),
]


@pytest.mark.parametrize(("plugin", "marker", "threads"), ASYNC_RUNNERS)
def test_async_tests_record_and_replay(
    project: Project, llm: FakeLLM, plugin: tuple[str, ...], marker: str, threads: int | None
) -> None:
    if plugin == ("-p", "asyncio"):
        project.pytester.makeini(ASYNCIO_INI)
    write_project(project, asynchronous=True, marker=marker, threads=threads)
    _, recorded = project.run_report("--eval", *plugin, "--eval-record=new_episodes")
    assert connections(project) > 0
    assert len(interactions(project)) == 6
    llm.stop()
    result, replayed = project.run_report("--eval", *plugin, "--eval-record=none")
    result.assert_outcomes(passed=3, failed=3)
    assert trials(replayed) == trials(recorded)
    assert connections(project) == 0


def test_threads_record_and_replay(project: Project, llm: FakeLLM) -> None:
    write_project(project)
    _, recorded = project.run_report("--eval", "--eval-threads=4", "--eval-record=new_episodes")
    assert len(interactions(project)) == 6
    assert connections(project) == 6
    llm.stop()
    result, replayed = project.run_report("--eval", "--eval-threads=4", "--eval-record=none")
    result.assert_outcomes(passed=3, failed=3)
    assert trials(replayed) == trials(recorded)
    assert connections(project) == 0


def test_xdist_workers_with_threads_record_every_trial_and_replay_strictly(
    project: Project, llm: FakeLLM
) -> None:
    write_project(project)
    xdist = ("-p", "xdist", "-n", "2", "--eval-threads=2")
    result, recorded = project.run_report("--eval", *xdist, "--eval-record=new_episodes")
    result.stdout.fnmatch_lines(
        ["eval recordings (--eval-record=new_episodes): 0 replayed, 6 recorded, 0 missed"]
    )
    keys = {(i["item_id"], i["trial"], i["occurrence"]) for i in interactions(project)}
    assert keys == {(q, t, 0) for q in QUESTIONS for t in (0, 1)}
    assert not list((recordings(project) / ".journal").glob("*.jsonl")), "every worker's journal is folded"
    asked = llm.requests
    connections(project)

    result, replayed = project.run_report("--eval", *xdist, "--eval-record=none")
    result.assert_outcomes(passed=3, failed=3)
    result.stdout.fnmatch_lines(["eval recordings (--eval-record=none): 6 replayed, 0 recorded, 0 missed*"])
    assert trials(replayed) == trials(recorded)
    assert connections(project) == 0
    assert llm.requests == asked

    # The workers' misses reach the controller's summary and report.
    write_project(project, suffix="?")
    result, missed = project.run_report("--eval", *xdist, "--eval-record=none")
    result.assert_outcomes(failed=6)
    result.stdout.fnmatch_lines(
        ["eval recordings (--eval-record=none): 0 replayed, 0 recorded, 6 missed (6 trials failed)"]
    )
    assert missed["recordings"]["missed_trials"] == 6
    assert connections(project) == 0
    assert llm.requests == asked


# -- the files -------------------------------------------------------------------------------


def test_recording_again_gives_the_same_bytes_and_a_diff_of_what_changed(
    project: Project, llm: FakeLLM
) -> None:
    write_project(project)
    project.run("--eval", "--eval-record=all").assert_outcomes(passed=3, failed=3)
    first = recorded_files(project)
    before = interactions(project)
    # The same answers again, each with a fresh id, creation time and fingerprint.
    llm.reset()
    result = project.run("--eval", "--eval-record=all")
    result.stdout.fnmatch_lines(["eval recordings (--eval-record=all): 0 replayed, 6 recorded, 0 missed"])
    assert recorded_files(project) == first
    assert first["test_app.py/test_answer.json"].endswith(b"}\n")

    # One question's answers change: the re-recording's diff is theirs, and nothing else.
    llm.reset()
    httpx.post(f"{llm.url}/v1/chat/completions", json={"model": "m", "messages": [{"content": "planet"}]})
    project.run("--eval", "--eval-record=all").assert_outcomes(passed=2, failed=4)
    after = interactions(project)
    assert [i for i in after if i["item_id"] != "planet"] == [i for i in before if i["item_id"] != "planet"]
    old_text, new_text = (
        content.decode().splitlines()
        for content in (first["test_app.py/test_answer.json"], *recorded_files(project).values())
    )
    # Two trials' answers, each with its fresh id, creation time and fingerprint; no other line.
    assert len(old_text) == len(new_text)
    changed = [line for pair in zip(old_text, new_text, strict=True) if pair[0] != pair[1] for line in pair]
    volatile = ('"content": "answer', '"created"', '"id"', '"system_fingerprint"')
    assert len(changed) == 2 * 4 * 2
    assert all(line.strip().startswith(volatile) for line in changed)


def test_a_failed_re_recording_keeps_the_recordings_it_would_have_replaced(
    project: Project, llm: FakeLLM
) -> None:
    write_project(project)
    project.run("--eval", "--eval-record=new_episodes").assert_outcomes(passed=3, failed=3)
    recorded = recorded_files(project)

    # The server is down: every attempt fails, and the recordings stay as they were.
    llm.stop()
    result = project.run("--eval", "--eval-record=all")
    result.assert_outcomes(failed=6)
    result.stdout.fnmatch_lines(["eval recordings (--eval-record=all): 0 replayed, 0 recorded, 0 missed"])
    assert recorded_files(project) == recorded
    result = project.run("--eval", "--eval-record=none")
    result.assert_outcomes(passed=3, failed=3)
    result.stdout.fnmatch_lines(["eval recordings (--eval-record=none): 6 replayed, 0 recorded, 0 missed*"])


# The task asks, then raises for the questions listed in fail.txt, or kills its process on one.
FAILING_TEST = app_test(
    "import os\nimport pathlib\nfrom app import ask\n\nHERE = pathlib.Path(__file__).parent",
    """def test_answer(eval_item, eval_trial):
    question = eval_item["input"]["question"]
    answer = ask(question)
    fail = HERE / "fail.txt"
    if fail.exists() and question in fail.read_text().split():
        raise RuntimeError("the app failed after its call")
    kill = HERE / "kill.txt"
    if kill.exists() and f"{question}#{eval_trial}" == kill.read_text().strip():
        os._exit(9)
    return answer
""",
)


def answers(project: Project) -> dict[tuple[str, int], str]:
    return {
        (i["item_id"], i["trial"]): i["response"]["body"]["json"]["choices"][0]["message"]["content"]
        for i in interactions(project)
    }


def test_re_recording_replaces_only_the_trials_whose_attempt_completed(
    project: Project, llm: FakeLLM
) -> None:
    write_project(project)
    project.write("test_app.py", FAILING_TEST)
    project.run("--eval", "--eval-record=all").assert_outcomes(passed=3, failed=3)
    first = answers(project)
    assert first[("planet", 1)] == "answer 2 to planet"

    # The task raises after its call for one question: its trials keep their recordings.
    project.fail("planet")
    result = project.run("--eval", "--eval-record=all")
    result.assert_outcomes(failed=6)
    assert answers(project) == {
        **{(q, t): f"answer {t + 3} to {q}" for q in ("capital", "colour") for t in (0, 1)},
        ("planet", 0): "answer 1 to planet",
        ("planet", 1): "answer 2 to planet",
    }

    # A process killed in the middle: the attempts that completed before it are kept, and folded
    # by the next session; the one it killed, and those that never ran, keep theirs.
    project.repair()
    (project.path / "kill.txt").write_text("colour#1")
    result = project.pytester.runpytest_subprocess("--eval", "--eval-record=all", "-p", "no:cacheprovider")
    assert result.ret not in (0, 1)
    (project.path / "kill.txt").unlink()
    llm.stop()
    project.run("--eval", "--eval-record=none", "-k", "capital")
    assert answers(project) == {
        ("capital", 0): "answer 5 to capital",
        ("capital", 1): "answer 6 to capital",
        ("colour", 0): "answer 5 to colour",
        ("colour", 1): "answer 4 to colour",
        ("planet", 0): "answer 1 to planet",
        ("planet", 1): "answer 2 to planet",
    }


# Every trial passes, so that the exit status says what became of the recordings.
PARAMETRIZED_TEST = app_test(
    "from app import ask",
    """def test_answer(eval_item, style):
    return ask(eval_item["input"]["question"] + " " + style[:10])
""",
    decorator='@pytest.mark.parametrize("style", STYLES, ids=STYLES)',
)

LONG = "a-very-long-parametrize-id-" * 10  # 270 characters


def test_a_long_parametrize_id_gets_a_bounded_file_name_and_the_others_are_written(
    project: Project, llm: FakeLLM
) -> None:
    write_project(project)
    project.dataset({"id": q, "input": {"question": q}, "expected_output": "answer"} for q in QUESTIONS)
    project.write("test_app.py", PARAMETRIZED_TEST.replace("STYLES", repr(["short", LONG])))
    result = project.run("--eval", "--eval-record=new_episodes")
    result.assert_outcomes(passed=12)
    assert result.ret == pytest.ExitCode.OK
    files = recorded_files(project)
    assert len(files) == 2
    assert "test_app.py/test_answer[short].json" in files
    [long_name] = [name for name in files if "short" not in name]
    assert long_name.startswith(f"test_app.py/test_answer[{LONG[:60]}")
    assert len(long_name.split("/")[1]) <= 237
    assert json.loads(files[long_name])["test"] == f"test_app.py::test_answer[{LONG}]"

    llm.stop()
    result = project.run("--eval", "--eval-record=none")
    result.assert_outcomes(passed=12)
    result.stdout.fnmatch_lines(["eval recordings (--eval-record=none): 12 replayed, 0 recorded, 0 missed*"])


def test_a_file_that_cannot_be_written_fails_the_session_and_its_recordings_wait_in_a_journal(
    project: Project, llm: FakeLLM
) -> None:
    write_project(project)
    project.dataset({"id": q, "input": {"question": q}, "expected_output": "answer"} for q in QUESTIONS)
    project.write("test_app.py", PARAMETRIZED_TEST.replace("STYLES", repr(["short", "long"])))
    blocked = recordings(project) / "test_app.py" / "test_answer[long].json"
    # A folder takes the place of one test's file while the session runs.
    project.write(
        "conftest.py",
        CONFTEST
        + f"""
@pytest.fixture(autouse=True)
def block_a_file(request):
    yield  # once the long test has read its recordings
    if request.node.callspec.params["style"] == "long":
        pathlib.Path({str(blocked)!r}).mkdir(parents=True, exist_ok=True)
""",
    )
    result = project.run("--eval", "--eval-record=new_episodes")
    result.assert_outcomes(passed=12)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            f"eval recordings NOT saved: {blocked}: Is a directory; what this session recorded for it is kept "
            "in a journal, which the next session that records folds in"
        ]
    )
    # The other test's recordings are written; the blocked one's wait in a journal.
    assert list(recorded_files(project)) == ["test_app.py/test_answer[short].json"]
    assert len(list((recordings(project) / ".journal").glob("*.jsonl"))) == 1

    # Once the way is clear, the next session folds them in, though it ran the other test only.
    project.write("conftest.py", CONFTEST)
    blocked.rmdir()
    llm.stop()
    result = project.run("--eval", "--eval-record=none", "-k", "short")
    assert result.ret == pytest.ExitCode.OK
    assert len(json.loads(recorded_files(project)["test_app.py/test_answer[long].json"])["interactions"]) == 6
    assert not list((recordings(project) / ".journal").glob("*.jsonl"))
    result = project.run("--eval", "--eval-record=none")
    result.stdout.fnmatch_lines(["eval recordings (--eval-record=none): 12 replayed, 0 recorded, 0 missed*"])
    assert result.ret == pytest.ExitCode.OK


# The app's calls reported as spans, as an instrumented app's are (track_openai, OpenTelemetry).
USAGE_TEST = app_test(
    "from pytest_opik_eval.tracing import trace\nfrom app import ask",
    """def test_answer(eval_item):
    answer = ask(eval_item["input"]["question"])
    trace.usage(model="gpt-4o-mini", input_tokens=10, output_tokens=5)  # the server's usage
    return answer
""",
)


def test_a_budget_does_not_count_the_replayed_calls(project: Project, llm: FakeLLM) -> None:
    write_project(project)
    project.write("test_app.py", USAGE_TEST)
    live = project.run("--eval", "--eval-record=new_episodes", "--eval-budget=40tokens")
    # Live, the budget stops the run: 15 tokens a trial.
    live.stdout.fnmatch_lines(["eval budget reached: spent 45 tokens of 40 tokens (3 trials not started)"])
    project.run("--eval", "--eval-record=new_episodes").assert_outcomes(passed=3, failed=3)

    # Replayed, the same spans spend nothing: every trial runs under the same budget.
    llm.stop()
    result = project.run("--eval", "--eval-record=none", "--eval-budget=40tokens")
    result.assert_outcomes(passed=3, failed=3)
    assert "eval budget reached" not in result.stdout.str()
    result.stdout.fnmatch_lines(["eval recordings (--eval-record=none): 6 replayed, 0 recorded, 0 missed*"])


def test_a_damaged_recording_file_is_set_aside_and_the_new_recordings_kept(
    project: Project, llm: FakeLLM
) -> None:
    write_project(project)
    project.run("--eval", "--eval-record=all").assert_outcomes(passed=3, failed=3)
    path = recordings(project) / "test_app.py" / "test_answer.json"
    damaged = "<<<<<<< HEAD\n" + path.read_text(encoding="utf-8")  # a merge conflict left in it
    path.write_text(damaged, encoding="utf-8")

    # Re-recording over it, as a user fixes it: the session ends as usual and says what it did.
    llm.reset()
    result = project.run("--eval", "--eval-record=all")
    result.assert_outcomes(passed=3, failed=3)
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    result.stdout.fnmatch_lines(
        [f"*--eval-record: {path} is not a recording file this plugin reads*it is kept as {path}.damaged*"]
    )
    assert path.with_name("test_answer.json.damaged").read_text(encoding="utf-8") == damaged
    assert len(json.loads(path.read_text(encoding="utf-8"))["interactions"]) == 6

    llm.stop()
    connections(project)  # the count starts again
    project.run("--eval", "--eval-record=none").assert_outcomes(passed=3, failed=3)
    assert connections(project) == 0


def test_each_parametrization_of_a_test_keeps_its_own_recordings(project: Project, llm: FakeLLM) -> None:
    write_project(project)
    source = (project.path / "test_app.py").read_text()
    # Two experiments that ask the same questions: their trials are not each other's.
    source = source.replace("def test_answer(eval_item):", "def test_answer(eval_item, style):")
    source = source.replace(
        "\n@pytest.mark.eval(", '\n@pytest.mark.parametrize("style", ["short", "long"])\n@pytest.mark.eval('
    )
    (project.path / "test_app.py").write_text(source)
    _, recorded = project.run_report("--eval", "--eval-record=all")
    assert sorted(recorded_files(project)) == [
        "test_app.py/test_answer[long].json",
        "test_app.py/test_answer[short].json",
    ]
    llm.stop()
    result, replayed = project.run_report("--eval", "--eval-record=none")
    result.stdout.fnmatch_lines(["eval recordings (--eval-record=none): 12 replayed, 0 recorded, 0 missed*"])
    replayed_trials = {e["name"]: experiment_trials(e) for e in replayed["experiments"]}
    assert replayed_trials == {e["name"]: experiment_trials(e) for e in recorded["experiments"]}
    # The server answered each question four times: each experiment replays its own two answers.
    assert {output["output"] for output, _ in replayed_trials["test_answer[long]"].values()} != {
        output["output"] for output, _ in replayed_trials["test_answer[short]"].values()
    }


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_the_recordings_can_be_committed_and_the_store_stays_ignored(tmp_path: Path) -> None:
    folder = tmp_path / ".opik-eval"
    for name in (
        "store.db",
        "store.db-wal",
        "recordings/tests/test_app.py/test_answer.json",
        "recordings/.journal/0199.main.jsonl",
        "recordings/.journal/0199.main.jsonl.lock",
        "judge-cache/ab/cd.json",
    ):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).touch()
    (folder / ".gitignore").write_text(GITIGNORE)
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    listed = subprocess.run(
        ["git", "-C", str(tmp_path), "status", "--porcelain", "--untracked-files=all"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    assert sorted(line.removeprefix("?? ") for line in listed) == [
        ".opik-eval/.gitignore",
        ".opik-eval/judge-cache/ab/cd.json",
        ".opik-eval/recordings/tests/test_app.py/test_answer.json",
    ]


def test_a_store_folder_ignored_before_recordings_existed_lets_them_be_committed(
    project: Project, llm: FakeLLM
) -> None:
    ignore = project.path / ".opik-eval" / ".gitignore"
    ignore.parent.mkdir()
    ignore.write_text("# created by pytest-opik-eval\n*\n")
    write_project(project)
    project.run("--eval", "--eval-record=new_episodes").assert_outcomes(passed=3, failed=3)
    assert ignore.read_text() == GITIGNORE


def test_merge_unions_the_recordings_of_shards(project: Project, llm: FakeLLM) -> None:
    write_project(project)
    for shard in (1, 2):
        store = project.path / f"shard{shard}" / "store.db"
        result = project.run(
            "--eval", f"--eval-store={store}", f"--eval-shard={shard}/2", "--eval-record=new_episodes"
        )
        assert result.ret in (0, 1)
    shares = [keys_in(project.path / f"shard{shard}" / "recordings") for shard in (1, 2)]
    # Each shard recorded its own share.
    assert shares[0]
    assert shares[1]
    assert not shares[0] & shares[1]
    merged = project.path / "merged" / "store.db"
    sources = [str(project.path / f"shard{shard}" / "store.db") for shard in (1, 2)]
    assert opik_eval(["--store", str(merged), "merge", *sources]) == 0
    assert keys_in(merged.parent / "recordings") == {(q, t) for q in QUESTIONS for t in (0, 1)}


def keys_in(folder: Path) -> set[tuple[str, int]]:
    """The (item id, trial) of every interaction in a recordings folder's files."""
    return {
        (i["item_id"], i["trial"])
        for path in folder.rglob("*.json")
        for i in json.loads(path.read_text())["interactions"]
    }


# -- the option ------------------------------------------------------------------------------


def test_a_bad_mode_is_a_usage_error_naming_the_modes(project: Project) -> None:
    write_project(project)
    result = project.run("--eval", "--eval-record=bogus")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    modes = ", ".join(RECORD_MODES)
    result.stderr.fnmatch_lines([f"*--eval-record: expected one of {modes}; got 'bogus'"])


@pytest.mark.parametrize(
    ("where", "message"),
    [
        (
            "env",
            "*env PYTEST_OPIK_EVAL_RECORD: expected one of off, once, new_episodes, none, all; got 'replay'",
        ),
        ("ini", "*ini eval_record: expected one of off, once, new_episodes, none, all; got 'replay'"),
    ],
)
def test_a_bad_mode_from_the_environment_or_the_ini_file_names_it(
    project: Project, monkeypatch: pytest.MonkeyPatch, where: str, message: str
) -> None:
    write_project(project)
    if where == "env":
        monkeypatch.setenv("PYTEST_OPIK_EVAL_RECORD", "replay")
    else:
        project.pytester.makeini("[pytest]\neval_record = replay\n")
    result = project.run("--eval")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_the_command_line_wins_over_the_environment_which_wins_over_the_ini_file(
    project: Project, llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_project(project)
    project.pytester.makeini("[pytest]\nfilterwarnings = error\neval_record = all\n")
    result = project.run("--eval")
    result.stdout.fnmatch_lines(
        ["eval recordings: * (mode all, from ini eval_record: record every call again)"]
    )
    monkeypatch.setenv("PYTEST_OPIK_EVAL_RECORD", "none")
    result = project.run("--eval")
    result.stdout.fnmatch_lines(["eval recordings: * (mode none, from env PYTEST_OPIK_EVAL_RECORD: *)"])
    result.assert_outcomes(passed=3, failed=3)  # replayed what the ini's mode recorded
    result = project.run("--eval", "--eval-record=off")
    assert "eval recordings" not in result.stdout.str()


def test_without_eval_record_nothing_is_patched(project: Project, llm: FakeLLM) -> None:
    write_project(project)
    project.write(
        "test_patched.py",
        """
        import sys

        def test_no_recorder():
            assert "vcr" not in sys.modules
            assert "pytest_opik_eval.run.recording" not in sys.modules
        """,
    )
    result = project.pytester.runpytest_subprocess("--eval")
    result.assert_outcomes(passed=4, failed=3)
    assert "eval recordings" not in result.stdout.str()
