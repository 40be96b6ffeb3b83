"""The recording engine on its own (run/recording.py, run/http_calls.py, store/http_recordings.py),
driven directly as the library layer it is, against a real local HTTP server: what the wiring's
end-to-end tests rely on. The pytest-facing behaviour is tested end to end elsewhere."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import gzip
import http.server
import importlib.util
import json
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import NEEDS_RECORD

from pytest_opik_eval.own_requests import sending
from pytest_opik_eval.run.http_calls import usage_of
from pytest_opik_eval.run.recording import Recorder, RecordingCounts, TrialKey, TrialScope
from pytest_opik_eval.store.http_recordings import (
    Folded,
    Interaction,
    Journal,
    RecordedRequest,
    RecordedResponse,
    fold,
    merge,
)
from pytest_opik_eval.store.http_recordings import load as load_recordings
from pytest_opik_eval.store.http_recordings import test_file as file_of

pytestmark = NEEDS_RECORD

TEST = "tests/test_app.py::test_answer"
SECRET = "sk-test-5ecret-value-123456"


class FakeLLM(http.server.ThreadingHTTPServer):
    """Answers chat completions with a counter, so each call gets its own answer."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.hits = 0
        self.lock = threading.Lock()
        self.url = f"http://127.0.0.1:{self.server_address[1]}"

    def hit(self) -> int:
        with self.lock:
            self.hits += 1
            return self.hits


class _Handler(http.server.BaseHTTPRequestHandler):
    server: FakeLLM

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers["content-length"])))
        n = self.server.hit()
        prompt = request["messages"][0]["content"]
        if self.path.startswith("/stream"):
            events = [
                {"model": "gpt-4o-mini", "choices": [{"delta": {"content": f"answer {n}"}}]},
                {
                    "model": "gpt-4o-mini",
                    "choices": [],
                    "usage": {"prompt_tokens": 7, "completion_tokens": 3},
                },
            ]
            body = "".join(f"data: {json.dumps(e)}\n\n" for e in events).encode() + b"data: [DONE]\n\n"
            self._send(body, {"content-type": "text/event-stream"})
            return
        answer = {
            "model": "gpt-test",
            "choices": [{"message": {"content": f"answer {n} to {prompt}"}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5},
        }
        if "x-echo" in self.headers:  # the key echoed back, as an error page may: scrubbed too
            answer["echo"] = self.headers.get("authorization", "")
        body = json.dumps(answer).encode()
        headers = {"content-type": "application/json", "set-cookie": "session=abc", "x-api-key": SECRET}
        if "gzip" in self.path:
            body, headers["content-encoding"] = gzip.compress(body), "gzip"
        self._send(body, headers)

    def _send(self, body: bytes, headers: dict[str, str]) -> None:
        self.send_response(200)
        for name, value in {**headers, "content-length": str(len(body))}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[FakeLLM]:
    fake = FakeLLM()
    thread = threading.Thread(target=fake.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield fake
    fake.shutdown()
    fake.server_close()


@contextlib.contextmanager
def session(folder: Path, mode: str, **options: Any) -> Iterator[Recorder]:
    """One pytest session's recorder, as the wiring runs it: started, stopped, folded."""
    recorder = Recorder(mode=mode, folder=folder, session_id="s1", worker="main", **options)
    recorder.start()
    try:
        yield recorder
    finally:
        recorder.stop()
        fold(folder)


def chat(kind: str, url: str, prompt: str) -> tuple[int, Any]:
    """One chat completion with one of the HTTP clients LLM SDKs use: (status, JSON body)."""
    path = "/v1/chat/completions"
    payload = {"model": "gpt-test", "messages": [{"content": prompt}], "user": "volatile"}
    headers = {"authorization": f"Bearer {SECRET}"}
    if kind == "httpx":
        with httpx.Client() as client:
            response = client.post(url + path, json=payload, headers=headers)
            return response.status_code, response.json()
    if kind == "httpx-async":

        async def post() -> tuple[int, Any]:
            async with httpx.AsyncClient() as client:
                response = await client.post(url + path, json=payload, headers=headers)
                return response.status_code, response.json()

        return asyncio.run(post())
    if kind == "requests":
        requests = pytest.importorskip("requests")
        answer = requests.post(url + path, json=payload, headers=headers, timeout=10)
        return answer.status_code, answer.json()
    aiohttp = pytest.importorskip("aiohttp")

    async def post_aiohttp() -> tuple[int, Any]:
        async with (
            aiohttp.ClientSession() as client,
            client.post(url + path, json=payload, headers=headers) as answer,
        ):
            return answer.status, await answer.json(content_type=None)

    return asyncio.run(post_aiohttp())


def run_trial(
    recorder: Recorder, item: str, trial: int, *prompts: str, kind: str = "httpx", url: str = ""
) -> tuple[TrialScope, list[Any]]:
    """One trial attempt that completes (as the wiring says in the trial's teardown)."""
    key = TrialKey(TEST, item, trial)
    scope = recorder.scope(key, attempt=f"{item}#{trial}")
    with scope.entered():
        answers = [chat(kind, url, prompt)[1] for prompt in prompts]
    recorder.completed(scope.attempt)
    return scope, answers


def content(answer: Any) -> str:
    return str(answer["choices"][0]["message"]["content"])


# -- the vcrpy surface -------------------------------------------------------------------

# What vcrpy's stubs and patcher builder use of a cassette. A vcrpy release that uses more fails
# here, in our CI, rather than in a user's run.
VCRPY_SURFACE = {
    "append",
    "can_play_response_for",
    "custom_patches",
    "filter_request",
    "find_requests_with_most_matches",
    "play_response",
    "write_protected",
    "skip_patchers",
    "_path",
}


def test_vcrpy_uses_of_the_cassette_are_those_our_dispatcher_implements() -> None:
    import vcr

    from pytest_opik_eval.run import recording

    package = Path(vcr.__file__).parent
    sources = [package / "patch.py", *sorted((package / "stubs").glob("*.py"))]
    # cassette.name, self._cassette.name, getattr(self._cassette, "name", default)
    use = re.compile(r"\b_?cassette\.(\w+)|getattr\((?:self\.)?_?cassette, \"(\w+)\"")
    used = {"".join(found) for source in sources for found in use.findall(source.read_text(encoding="utf-8"))}
    assert used - VCRPY_SURFACE == set()  # older releases use less (no skip_patchers before 9)
    assert [name for name in sorted(VCRPY_SURFACE) if not hasattr(recording._Cassette, name)] == []


# -- record and replay -------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["httpx", "httpx-async", "requests", "aiohttp"])
def test_a_recorded_trial_replays_with_the_server_down(tmp_path: Path, server: FakeLLM, kind: str) -> None:
    with session(tmp_path, "new_episodes") as recorder:
        _, recorded = run_trial(recorder, "q1", 0, "hi", kind=kind, url=server.url)
    assert server.hits == 1
    assert recorder.counts().recorded == 1
    server.shutdown()
    server.server_close()

    with session(tmp_path, "none") as recorder:
        scope, replayed = run_trial(recorder, "q1", 0, "hi", kind=kind, url=server.url)
    assert replayed == recorded
    assert (scope.misses, scope.counts.replayed) == ([], 1)  # the guard saw no connection either


def test_mode_none_refuses_connections_inside_a_trial_and_outside_but_those_let_through(
    tmp_path: Path, server: FakeLLM
) -> None:
    address = ("127.0.0.1", server.server_address[1])
    told: list[str] = []

    async def open_asyncio() -> None:
        await asyncio.open_connection(*address)

    with session(tmp_path, "none", notify=told.append) as recorder:
        scope = recorder.scope(TrialKey(TEST, "q1", 0), "a1")
        with scope.entered(), pytest.raises(ConnectionRefusedError, match="--eval-record=none blocks"):
            socket.create_connection(address)
        with pytest.raises(ConnectionRefusedError):
            scope.wrap(asyncio.run)(open_asyncio())
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(address)  # outside the trial, in the session's thread: a fixture
        with sending():
            socket.create_connection(address).close()  # the plugin's own
        # Datagrams are no HTTP call (a metrics client's statsd, the local-address trick): left alone.
        for where in (contextlib.nullcontext(), scope.entered()):
            with where, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
                udp.connect(address)
    with session(tmp_path, "none", allowed=[("localhost", address[1])]) as allowing:
        socket.create_connection(address).close()  # localhost's address
        with allowing.scope(TrialKey(TEST, "q1", 0), "a2").entered():
            socket.create_connection(address).close()
    assert [miss.request for miss in scope.misses] == [f"CONNECT {address}"] * 2
    assert (recorder.counts().missed, recorder.counts().refused) == (3, 1)
    assert told == [
        f"--eval-record=none did not send CONNECT 127.0.0.1:{address[1]}: it was made outside any trial (a "
        "fixture, a hook, or a thread a task started and did not wait for), and strict replay sends nothing "
        "it cannot replay: the session fails. Let a local service through with "
        f"--eval-record-allow-host=127.0.0.1:{address[1]}, or make the request inside the task"
    ]
    assert allowing.counts() == RecordingCounts()


@pytest.mark.parametrize("mode", ["new_episodes", "none"])
def test_a_request_outside_any_trial_is_sent_unrecorded_but_in_strict_replay(
    tmp_path: Path, server: FakeLLM, mode: str
) -> None:
    with session(tmp_path, mode) as recorder:
        status, answer = chat("httpx", server.url, "from a fixture")
        with sending():  # the Opik backend's, in every mode
            assert chat("httpx", server.url, "the plugin's")[0] == 200
    if mode == "none":
        assert (status, answer["error"]["type"], server.hits) == (400, "opik_eval_no_recording", 1)
        assert recorder.counts() == RecordingCounts(missed=1, refused=1)
    else:
        assert (status, content(answer)) == (200, "answer 1 to from a fixture")
        assert recorder.counts() == RecordingCounts()
    assert not (tmp_path / "tests").exists()


@pytest.mark.parametrize("kind", ["httpx", "requests"])
def test_strict_replay_fails_the_running_trials_for_a_request_from_a_thread_the_task_started(
    tmp_path: Path, server: FakeLLM, kind: str
) -> None:
    with session(tmp_path, "new_episodes") as recorder:
        run_trial(recorder, "q1", 0, "hi", kind=kind, url=server.url)
    with session(tmp_path, "none") as recorder:
        scope = recorder.scope(TrialKey(TEST, "q1", 0), "a1")
        other = recorder.scope(TrialKey(TEST, "q2", 0), "a1")
        with scope.entered(), ThreadPoolExecutor(1) as pool:
            in_context = pool.submit(contextvars.copy_context().run, chat, kind, server.url, "hi").result()
            started, finish = threading.Event(), threading.Event()

            def other_task() -> None:  # another trial's, running at the same time
                started.set()
                finish.wait(10)

            with ThreadPoolExecutor(1) as elsewhere:
                done = elsewhere.submit(other.wrap(other_task))
                started.wait(10)
                bare = pool.submit(chat, kind, server.url, "hi").result()
                finish.set()
                done.result()
    assert (in_context[0], bare[0], server.hits) == (200, 400, 1)
    assert f"--eval-record-allow-host=127.0.0.1:{server.server_address[1]}" in bare[1]["error"]["message"]
    assert [m.request for m in scope.misses] == [f"POST {server.url}/v1/chat/completions"]
    assert scope.misses[0].diff.startswith("not sent: it was made outside the trial's context")
    assert other.misses == scope.misses  # which of the running trials made it cannot be told
    counts = recorder.counts()
    assert (counts.replayed, counts.missed, counts.refused) == (1, 1, 0)


@pytest.mark.parametrize("live", [True, False])
def test_strict_replay_sends_the_judges_requests_while_a_trial_is_scored_only_when_they_run_live(
    tmp_path: Path, server: FakeLLM, live: bool
) -> None:
    with session(tmp_path, "none", live_judges=live) as recorder:
        scope = recorder.scope(TrialKey(TEST, "q1", 0), "a1")
        with recorder.scoring(scope):
            status, _ = chat("httpx", server.url, "judge this")
    assert (status, server.hits) == ((200, 1) if live else (400, 0))
    assert [miss.diff.split(":")[0] for miss in scope.misses] == ([] if live else ["not sent"])
    assert recorder.counts().refused == 0  # blamed on the trial scored, which fails


def test_nothing_is_imported_before_start(tmp_path: Path) -> None:
    code = (
        "import sys; from pathlib import Path\n"
        "from pytest_opik_eval.run.recording import Recorder\n"
        f"Recorder(mode='none', folder=Path({str(tmp_path)!r}), session_id='s', worker='main')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('vcr', 'httpx', 'requests', 'aiohttp')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_each_trial_keeps_its_answers_in_the_order_they_came(tmp_path: Path, server: FakeLLM) -> None:
    with session(tmp_path, "new_episodes") as recorder:
        _, trial0 = run_trial(recorder, "q1", 0, "hi", "hi", url=server.url)
        _, trial1 = run_trial(recorder, "q1", 1, "hi", "hi", url=server.url)
    assert [content(a) for a in trial0 + trial1] == [f"answer {n} to hi" for n in (1, 2, 3, 4)]

    with session(tmp_path, "none") as recorder:
        _, replayed1 = run_trial(recorder, "q1", 1, "hi", "hi", url=server.url)
        _, replayed0 = run_trial(recorder, "q1", 0, "hi", "hi", url=server.url)
    assert (replayed0, replayed1, server.hits) == (trial0, trial1, 4)
    occurrences = [(i.trial, i.occurrence) for i in load_recordings(tmp_path, TEST)]
    assert occurrences == [(0, 0), (0, 1), (1, 0), (1, 1)]


def test_threaded_and_async_trials_each_get_their_own_answers(tmp_path: Path, server: FakeLLM) -> None:
    # As --eval-threads and async tasks run them: several trials at once in one process.
    def threaded(recorder: Recorder) -> dict[int, str]:
        answers: dict[int, str] = {}

        def task(trial: int) -> None:
            answers[trial] = content(chat("httpx", server.url, f"t{trial}")[1])

        scopes = [recorder.scope(TrialKey(TEST, "threads", trial), "a1") for trial in range(4)]
        threads = [threading.Thread(target=scope.wrap(task), args=(n,)) for n, scope in enumerate(scopes)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return answers

    def concurrent(recorder: Recorder) -> list[str]:
        async def task(trial: int) -> str:
            async with httpx.AsyncClient() as client:
                payload = {"messages": [{"content": f"a{trial}"}]}
                return content((await client.post(f"{server.url}/v1", json=payload)).json())

        async def trials() -> list[str]:
            tasks = [recorder.scope(TrialKey(TEST, "async", n), "a1").wrap(task)(n) for n in range(4)]
            return list(await asyncio.gather(*tasks))

        return asyncio.run(trials())

    with session(tmp_path, "new_episodes") as recorder:
        recorded = (threaded(recorder), concurrent(recorder))
    with session(tmp_path, "none") as recorder:
        replayed = (threaded(recorder), concurrent(recorder))
    assert replayed == recorded
    assert recorder.counts().replayed == 8
    assert server.hits == 8
    assert len({*recorded[0].values(), *recorded[1]}) == 8  # each trial had an answer of its own


def test_a_strict_miss_answers_400_and_keeps_a_diff(tmp_path: Path, server: FakeLLM) -> None:
    with session(tmp_path, "new_episodes") as recorder:
        run_trial(recorder, "q1", 0, "hello", url=server.url)
    with session(tmp_path, "none") as recorder:
        changed = recorder.scope(TrialKey(TEST, "q1", 0), "a1")
        with changed.entered():
            status, answer = chat("httpx", server.url, "hullo")
            chat("httpx", server.url, "hello")
            chat("httpx", server.url, "hello")  # once more than recorded
        other_item, _ = run_trial(recorder, "q2", 0, "hello", "hullo", url=server.url)
        elsewhere = recorder.scope(TrialKey("tests/test_app.py::test_other", "q1", 0), "a1")
        with elsewhere.entered():
            chat("httpx", server.url, "hello")
    assert (status, answer["error"]["type"]) == (400, "opik_eval_no_recording")
    assert server.hits == 1
    first, repeated = changed.misses
    assert first.request == f"POST {server.url}/v1/chat/completions"
    assert '-          "content": "hello"\n+          "content": "hullo"\n' in first.diff
    assert repeated.diff.startswith("this request was recorded 1 time(s) for this trial")
    # Another item's trial made the same request: nothing to diff, but where it was recorded.
    assert other_item.misses[0].diff.startswith("this request was recorded for item 'q1' (trial 0), not")
    assert other_item.misses[1].diff.startswith("--- recorded (closest in this test)\n")
    assert "no recordings for this test" in elsewhere.misses[0].diff
    assert recorder.counts().missed == 5


def test_mode_once_replays_a_recorded_trial_strictly_and_records_a_new_one(
    tmp_path: Path, server: FakeLLM
) -> None:
    with session(tmp_path, "once") as recorder:
        run_trial(recorder, "q1", 0, "hi", url=server.url)
    with session(tmp_path, "once") as recorder:
        recorded, _ = run_trial(recorder, "q1", 0, "hi", "hi", url=server.url)
        new, _ = run_trial(recorder, "q2", 0, "hi", url=server.url)
    assert (len(recorded.misses), new.counts.recorded, server.hits) == (1, 1, 2)


def test_mode_all_replaces_the_interactions_of_the_trials_it_runs(tmp_path: Path, server: FakeLLM) -> None:
    with session(tmp_path, "new_episodes") as recorder:
        for item, prompts in {"q1": ("hi", "again"), "q2": ("hi",), "q3": ("hi",)}.items():
            run_trial(recorder, item, 0, *prompts, url=server.url)
    with session(tmp_path, "all") as recorder:
        run_trial(recorder, "q1", 0, "hi", url=server.url)
        run_trial(recorder, "q3", 0, url=server.url)  # it makes no request now; q2 does not run
    kept = [(i.item_id, content(i.response.body["json"])) for i in load_recordings(tmp_path, TEST)]  # type: ignore[index]
    assert kept == [("q1", "answer 5 to hi"), ("q2", "answer 3 to hi")]


# -- what is stored ------------------------------------------------------------------------


def test_no_secret_reaches_any_file(tmp_path: Path, server: FakeLLM, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    recorder = Recorder(mode="new_episodes", folder=tmp_path, session_id="s1", worker="main")
    recorder.start()
    scope = recorder.scope(TrialKey(TEST, "q1", 0), "a1")
    with scope.entered():
        httpx.post(
            f"{server.url}/v1/chat/completions?key={SECRET}&b=1",
            json={"messages": [{"content": SECRET}], "auth": {"api_key": "not-in-the-environment"}},
            headers={"authorization": f"Bearer {SECRET}", "x-echo": "1"},
        )
    recorder.stop()
    journaled = [path.read_text() for path in tmp_path.rglob("*") if path.is_file()]
    fold(tmp_path)
    written = [path.read_text() for path in tmp_path.rglob("*") if path.is_file()]
    assert [
        text
        for text in journaled + written
        if any(s in text for s in (SECRET, "session=abc", "not-in-the-environment"))
    ] == []
    (interaction,) = load_recordings(tmp_path, TEST)
    assert interaction.request.url == f"{server.url}/v1/chat/completions?b=1&key=REDACTED"
    assert interaction.request.body == {
        "json": {"messages": [{"content": "<OPENAI_API_KEY>"}], "auth": {"api_key": "REDACTED"}}
    }
    assert interaction.response.body["json"]["echo"] == "Bearer <OPENAI_API_KEY>"  # type: ignore[index]


def test_bodies_are_stored_readable_and_replays_count_the_tokens_saved(
    tmp_path: Path, server: FakeLLM
) -> None:
    with session(tmp_path, "new_episodes") as recorder:
        scope = recorder.scope(TrialKey(TEST, "q1", 0), "a1")
        with scope.entered():
            zipped = httpx.post(f"{server.url}/gzip", json={"messages": [{"content": "hi"}]}).json()
            streamed = httpx.post(f"{server.url}/stream", json={"messages": [{"content": "hi"}]}).text
    gzipped, stream = load_recordings(tmp_path, TEST)
    assert gzipped.response.body == {"json": zipped}
    # No content-encoding, content-length, set-cookie, x-api-key, date.
    assert sorted(gzipped.response.headers) == ["content-type", "server"]
    assert stream.response.body == {"text": streamed}
    assert stream.usage is not None
    assert (stream.usage.model, stream.usage.input_tokens, stream.usage.output_tokens) == (
        "gpt-4o-mini",
        7,
        3,
    )

    with session(tmp_path, "none") as recorder:
        scope = recorder.scope(TrialKey(TEST, "q1", 0), "a1")
        with scope.entered():
            again = httpx.post(f"{server.url}/gzip", json={"messages": [{"content": "hi"}]}).json()
            with httpx.stream(
                "POST", f"{server.url}/stream", json={"messages": [{"content": "hi"}]}
            ) as response:
                chunks = list(response.iter_text())
    assert (again, "".join(chunks)) == (zipped, streamed)
    counts = recorder.counts()
    assert (counts.replayed, counts.saved_input_tokens, counts.saved_output_tokens) == (2, 17, 8)
    # Priced from the table when recorded: the stream's model is known, "gpt-test" is not.
    priced = importlib.util.find_spec("genai_prices") is not None
    assert (counts.saved_cost is not None and counts.saved_cost > 0) == priced


# -- writing without clashes -----------------------------------------------------------------


def interaction(item: str, trial: int, prompt: str, answer: str, occurrence: int = 0) -> Interaction:
    return Interaction(
        item_id=item,
        trial=trial,
        occurrence=occurrence,
        request=RecordedRequest(method="POST", url="https://llm/v1", body={"json": {"prompt": prompt}}),
        response=RecordedResponse(status=200, body={"json": {"answer": answer}}),
    )


def test_journals_of_processes_and_threads_fold_into_one_stable_file(tmp_path: Path) -> None:
    added = [interaction(f"q{n % 5}", n % 2, f"p{n}", f"a{n}") for n in range(40)]
    journals = [Journal(tmp_path / "a", "s1", "gw0"), Journal(tmp_path / "a", "s1", "gw1")]
    threads = [
        threading.Thread(target=lambda k=k: [journals[k % 2].add(TEST, i) for i in added[k::4]])
        for k in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for journal in journals:
        journal.close()
    assert fold(tmp_path / "a") == Folded()
    # The same interactions journaled in another order by one process make the same file.
    single = Journal(tmp_path / "b", "s2", "main")
    for one in reversed(added):
        single.add(TEST, one)
    single.close()
    fold(tmp_path / "b")
    text = file_of(tmp_path / "a", TEST).read_text()
    assert text == file_of(tmp_path / "b", TEST).read_text()
    assert len(load_recordings(tmp_path / "a", TEST)) == 40
    assert text.endswith("}\n")
    assert file_of(tmp_path, TEST) == tmp_path / "tests" / "test_app.py" / "test_answer.json"
    assert list((tmp_path / "a" / ".journal").glob("*.jsonl")) == []


def test_a_dead_process_journal_is_folded_and_a_live_ones_is_not(tmp_path: Path) -> None:
    code = (
        "import os, sys; from pathlib import Path\n"
        "from pytest_opik_eval.store.http_recordings import Journal, Interaction\n"
        "journal = Journal(Path(sys.argv[1]), 'dead', 'main')\n"
        "journal.add(sys.argv[2], Interaction.model_validate_json(sys.argv[3]))\n"
        "os._exit(1)  # killed: no close\n"
    )
    dead = interaction("q1", 0, "p", "from the dead")
    subprocess.run([sys.executable, "-c", code, str(tmp_path), TEST, dead.model_dump_json()], check=False)
    live = Journal(tmp_path, "live", "main")
    live.add(TEST, interaction("q2", 0, "p", "alive"))
    assert fold(tmp_path) == Folded()
    assert [i.item_id for i in load_recordings(tmp_path, TEST)] == ["q1"]
    assert live.path.exists()  # its process may still append: left for a later fold
    live.close()
    assert fold(tmp_path) == Folded()
    assert not live.path.exists()
    assert [i.item_id for i in load_recordings(tmp_path, TEST)] == ["q1", "q2"]


def test_merge_adds_the_shards_recordings_and_keeps_its_own(tmp_path: Path) -> None:
    shards = [tmp_path / "shard1", tmp_path / "shard2"]
    for n, shard in enumerate(shards):
        journal = Journal(shard, "s", "main")
        journal.add(TEST, interaction("q1", 0, "p", f"shard {n}"))
        journal.add(TEST, interaction(f"only{n}", 0, "p", "a"))
        journal.close()  # left unfolded: merge folds a shard's journals first
    assert merge(tmp_path / "merged", shards) == 3
    merged = load_recordings(tmp_path / "merged", TEST)
    assert [(i.item_id, i.response.body) for i in merged] == [
        ("only0", {"json": {"answer": "a"}}),
        ("only1", {"json": {"answer": "a"}}),
        ("q1", {"json": {"answer": "shard 0"}}),
    ]


def test_merge_says_what_a_shards_own_fold_could_not_write_and_adds_the_rest(tmp_path: Path) -> None:
    shard = tmp_path / "shard"
    other = "tests/test_app.py::test_other"
    journal = Journal(shard, "killed", "main")
    journal.add(TEST, interaction("q1", 0, "p", "a"))
    journal.add(other, interaction("q1", 0, "p", "b"))
    journal.close()  # left unfolded, as a killed shard leaves it
    file_of(shard, TEST).mkdir(parents=True)  # a folder in the place of one test's file
    with pytest.raises(ValueError, match=r"^1 interaction\(s\) added, but not all: ") as raised:
        merge(tmp_path / "merged", [shard])
    message = str(raised.value)
    assert f"{file_of(shard, TEST)}: Is a directory" in message
    assert f"waits in a journal of {shard}" in message
    assert [i.response.body for i in load_recordings(tmp_path / "merged", other)] == [
        {"json": {"answer": "b"}}
    ]
    # Nothing is lost: once the folder is out of the way, merging again adds the rest.
    file_of(shard, TEST).rmdir()
    assert merge(tmp_path / "merged", [shard]) == 1
    assert [i.response.body for i in load_recordings(tmp_path / "merged", TEST)] == [
        {"json": {"answer": "a"}}
    ]


def test_a_long_test_name_is_cut_with_a_hash_and_found_again_by_load_and_merge(tmp_path: Path) -> None:
    long_tests = [f"tests/test_app.py::test_answer[{'x' * 300}{n}]" for n in (1, 2)]
    shard = tmp_path / "shard"
    journal = Journal(shard, "s", "main")
    for test in long_tests:
        journal.add(test, interaction("q1", 0, "p", test[-1]))
    journal.close()
    assert fold(shard) == Folded()
    names = sorted(path.name for path in (shard / "tests" / "test_app.py").iterdir())
    assert len(names) == 2
    assert all(len(name) <= 237 and "~" in name for name in names)  # distinct
    assert merge(tmp_path / "merged", [shard]) == 2
    for test in long_tests:
        [found] = load_recordings(tmp_path / "merged", test)
        assert found.response.body == {"json": {"answer": test[-1]}}
    short = file_of(tmp_path, "tests/test_app.py::test_answer[" + "y" * 200 + "]")
    assert short.name == "test_answer[" + "y" * 200 + "].json"  # a name that fits is kept as it is


def stream(answer: str, ids: str) -> RecordedResponse:
    events = [{"id": f"chatcmpl-{ids}", "created": len(ids), "choices": [{"delta": {"content": answer}}]}]
    return RecordedResponse(status=200, body=sse(*events))


def test_mode_all_keeps_an_unchanged_answer_only_when_the_attempt_made_the_same_requests(
    tmp_path: Path,
) -> None:
    def recorded(*answers: tuple[str, str, str]) -> list[RecordedResponse]:
        """Attempt by attempt (prompts, answer, ids): the trial's answers once folded."""
        journal = Journal(tmp_path, "s", "main")
        for n, (prompts, answer, ids) in enumerate(answers):
            for occurrence, prompt in enumerate(prompts.split()):
                request = RecordedRequest(
                    method="POST", url="https://llm/v1", body={"json": {"prompt": prompt}}
                )
                added = Interaction(
                    item_id="q1",
                    trial=0,
                    occurrence=occurrence,
                    request=request,
                    response=stream(answer, ids),
                )
                journal.add(TEST, added, f"a{n}")
            journal.complete(TEST, "q1", 0, f"a{n}")
        journal.close()
        fold(tmp_path)
        return [i.response for i in load_recordings(tmp_path, TEST)]

    first = recorded(("hi", "hello", "old-ids"))
    assert recorded(("hi", "hello", "new-ids-each-call")) == first  # only the stream's ids changed
    assert recorded(("hi", "hello!", "newer")) == [stream("hello!", "newer")]  # the answer changed
    # Another request besides: the new answers replace them all, ids and all.
    assert recorded(("hi there", "hello!", "newest")) == [stream("hello!", "newest")] * 2


def test_a_damaged_file_is_named_with_what_to_do(tmp_path: Path) -> None:
    path = file_of(tmp_path, TEST)
    path.parent.mkdir(parents=True)
    path.write_text('<<<<<<< HEAD\n{"version": 1}\n')
    with pytest.raises(
        ValueError, match=r"test_answer.json is not a recording file .* \(a merge conflict\?\)"
    ):
        Recorder(mode="none", folder=tmp_path, session_id="s", worker="main").scope(
            TrialKey(TEST, "q1", 0), "a1"
        )


def sse(*events: dict[str, Any]) -> dict[str, Any]:
    return {"text": "".join(f"event: x\ndata: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"}


@pytest.mark.parametrize(
    "body",
    [
        {"json": {"model": "m", "usage": {"prompt_tokens": 11, "completion_tokens": 4}}},  # OpenAI chat
        {"json": {"model": "m", "usage": {"input_tokens": 11, "output_tokens": 4}}},  # Anthropic, responses
        {"json": {"modelVersion": "m", "usageMetadata": {"promptTokenCount": 11, "candidatesTokenCount": 4}}},
        sse(  # Anthropic's stream: the input at the start, the output as it grows
            {
                "type": "message_start",
                "message": {"model": "m", "usage": {"input_tokens": 11, "output_tokens": 1}},
            },
            {"type": "message_delta", "usage": {"output_tokens": 4}},
        ),
        sse(
            {
                "type": "response.completed",
                "response": {"model": "m", "usage": {"input_tokens": 11, "output_tokens": 4}},
            }
        ),
        sse(  # Gemini's stream (alt=sse): the usage so far in each chunk; thoughts are output too
            {"modelVersion": "m", "usageMetadata": {"promptTokenCount": 11}},
            {
                "modelVersion": "m",
                "usageMetadata": {"promptTokenCount": 11, "candidatesTokenCount": 1, "thoughtsTokenCount": 3},
            },
        ),
        # Gemini's built-in tools' results (a search's) are input, as genai-prices and Opik count them.
        {
            "json": {
                "modelVersion": "m",
                "usageMetadata": {
                    "promptTokenCount": 8,
                    "toolUsePromptTokenCount": 3,
                    "candidatesTokenCount": 4,
                    "totalTokenCount": 15,
                },
            }
        },
        # Thoughts the answer's count holds already (the total says so, as on some Vertex AI
        # models): not counted twice.
        {
            "json": {
                "modelVersion": "m",
                "usageMetadata": {
                    "promptTokenCount": 11,
                    "candidatesTokenCount": 4,
                    "thoughtsTokenCount": 3,
                    "totalTokenCount": 15,
                },
            }
        },
    ],
    ids=[
        "openai",
        "anthropic",
        "gemini",
        "anthropic-stream",
        "responses-stream",
        "gemini-stream",
        "gemini-tool-use",
        "gemini-thoughts-inside",
    ],
)
def test_the_usage_of_each_providers_response_is_read(body: dict[str, Any]) -> None:
    usage = usage_of(RecordedResponse(status=200, body=body))
    assert usage is not None
    assert (usage.model, usage.input_tokens, usage.output_tokens) == ("m", 11, 4)
