"""No secret in any file the recorder writes: the README's policy (names, shapes, the environment's
values; see ``masking``) tried as a hostile reviewer would, one credential shape per case.

Each case sends a secret through a real client (httpx, requests, aiohttp) to a local server that
answers as the case says (echoing it, compressing it, putting it in a header), records the trial,
and looks for the secret, as it is and in the forms it takes (percent-encoded, base64), in every
file under the recordings folder: the journal as the process wrote it, then the folded files.
Then it replays the trial strictly: what was redacted is redacted alike on the way in, so the
recording still answers.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gzip
import io
import json
import shutil
import threading
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import brotli
import httpx
import pytest
import requests
import zstandard
from conftest import NEEDS_RECORD, Project

from pytest_opik_eval.masking import EnvironmentSecrets, Scrubber
from pytest_opik_eval.run import http_calls
from pytest_opik_eval.run.http_calls import UnreadableBody
from pytest_opik_eval.run.recording import Recorder, TrialKey
from pytest_opik_eval.store.http_recordings import Folded, fold
from pytest_opik_eval.store.http_recordings import load as load_recordings

pytestmark = NEEDS_RECORD

TEST = "tests/test_app.py::test_answer"
# Recognisable values, none shorter than 8 characters (shorter ones are not masked: see masking).
TOKEN = "tok3n-0f-the-app-7c1d9e"
ENV_KEY = "sk-env-k3y-5b8a-4f1c-9e27"
SLASHED = "wJalrXUtnFEMI/K7MDENG+bPxRfiCY3XAMPLE"  # an AWS secret key: "/" and "+" change when encoded


@dataclass
class Reply:
    status: int = 200
    reason: str = "OK"
    headers: dict[str, str] = field(default_factory=lambda: {"content-type": "application/json"})
    body: bytes = b'{"ok": true}'


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


class Server(ThreadingHTTPServer):
    """Answers each request with ``reply(request)``, the case's."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        self.reply: Callable[[Seen], Reply] = lambda seen: Reply()


class _Handler(BaseHTTPRequestHandler):
    server: Server
    protocol_version = "HTTP/1.1"

    def _answer(self) -> None:
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            body = b""
            while size := int(self.rfile.readline().strip() or b"0", 16):
                body += self.rfile.read(size)
                self.rfile.readline()
            self.rfile.readline()
        else:
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
        seen = Seen(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
        reply = self.server.reply(seen)
        self.send_response(reply.status, reply.reason)
        for name, value in {**reply.headers, "content-length": str(len(reply.body))}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(reply.body)

    do_GET = do_POST = do_PUT = _answer

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[Server]:
    fake = Server()
    thread = threading.Thread(target=fake.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield fake
    fake.shutdown()
    fake.server_close()


def forms(secret: str) -> list[bytes]:
    """The forms a secret takes in a file: as it is, percent-encoded, JSON-escaped, and the
    parts of its base64 that depend on its bytes alone (it may start at any of three offsets)."""
    found = {secret, quote(secret, safe=""), quote_plus(secret), json.dumps(secret)[1:-1]}
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + secret.encode()).decode()
        found.add(encoded[4 if offset else 0 : 4 * ((offset + len(secret)) // 3)])
    return [form.encode() for form in found]


def leaks(folder: Path, secrets: list[str]) -> list[str]:
    """Every file under ``folder`` whose name or content holds one of ``secrets`` in any form."""
    return [
        f"{path.relative_to(folder)} holds {secret!r}"
        for path in sorted(folder.rglob("*"))
        if path.is_file()
        for secret in secrets
        if any(form in path.read_bytes() or form in bytes(path.relative_to(folder)) for form in forms(secret))
    ]


def still_encoded(folder: Path) -> list[str]:
    """The stored bodies that are still compressed (gzip, br, zstd): opaque, so never scrubbed."""
    found = []
    for interaction in load_recordings(folder, TEST):
        for part in (interaction.request, interaction.response):
            data = base64.b64decode((part.body or {}).get("base64", ""))
            for name, decompress in (("gzip", gzip.decompress), ("br", brotli.decompress), ("zstd", _unzstd)):
                try:
                    decompress(data)
                except Exception:  # not in that coding: each library has its own error
                    continue
                if data:
                    found.append(f"{type(part).__name__} of {interaction.item_id} is {name}")
    return found


def _unzstd(data: bytes) -> bytes:
    return bytes(zstandard.ZstdDecompressor().decompressobj().decompress(data))


def echo(seen: Seen) -> Reply:
    """What an echo server (httpbin's /anything) answers: the whole request, headers included."""
    answer = {
        "method": seen.method,
        "url": seen.path,
        "headers": seen.headers,
        "data": seen.body.decode("utf-8", "replace"),
    }
    return Reply(body=json.dumps(answer).encode())


def compressed(coding: str, data: bytes) -> bytes:
    if coding == "br":
        return bytes(brotli.compress(data))
    if coding == "zstd":
        return bytes(zstandard.ZstdCompressor().compress(data))
    return gzip.compress(data)


def in_coding(coding: str) -> Callable[[Seen], Reply]:
    """The echo, compressed in ``coding`` (which the client asked for: httpx asks for br and zstd
    once brotli and zstandard are installed)."""

    def reply(seen: Seen) -> Reply:
        assert coding in seen.headers.get("accept-encoding", ""), seen.headers
        answer = echo(seen)
        headers = {**answer.headers, "content-encoding": coding}
        return Reply(headers=headers, body=compressed(coding, answer.body))

    return reply


def post(url: str, **kwargs: Any) -> None:
    httpx.post(url, timeout=10, **kwargs).raise_for_status()


def get(url: str) -> None:
    httpx.get(url, timeout=10).raise_for_status()


def oauth_then_use(url: str) -> None:
    """An app that gets a token from a server, then sends it where no name says it is one."""
    token = httpx.post(f"{url}/token", data={"grant_type": "client_credentials"}, timeout=10).json()
    access = token["access_token"]
    post(f"{url}/next", json={"input": f"use {access}", "session": access})
    get(f"{url}/items/{access}/status")


def oauth_server(seen: Seen) -> Reply:
    if seen.path == "/token":
        return Reply(body=json.dumps({"access_token": TOKEN, "token_type": "bearer"}).encode())
    return echo(seen)


def aiohttp_form(url: str) -> None:
    import aiohttp

    async def send() -> None:
        form = aiohttp.FormData()
        form.add_field("api_key", TOKEN)
        form.add_field("file", io.BytesIO(b"\x00\xff" + ENV_KEY.encode() + b"\x00"), filename="a.bin")
        async with aiohttp.ClientSession() as session, session.post(f"{url}/upload", data=form) as answer:
            answer.raise_for_status()

    asyncio.run(send())


@dataclass
class Case:
    send: Callable[[str], None]
    secrets: list[str]
    reply: Callable[[Seen], Reply] = echo
    env: dict[str, str] = field(default_factory=dict)


JSON = {"content-type": "application/json"}
CASES: dict[str, Case] = {
    # Names: in a URL's query, a JSON body at any depth, a form, a multipart form, a header.
    "query ?auth=": Case(lambda url: get(f"{url}/v1?auth={TOKEN}&page=2"), [TOKEN]),
    "query ?jwt=": Case(lambda url: get(f"{url}/v1?jwt={TOKEN}"), [TOKEN]),
    "sig= in a JSON string": Case(
        lambda url: post(url, json={"image": {"url": f"https://store.test/a.png?sv=2&sig={TOKEN}"}}), [TOKEN]
    ),
    "nested credentials object": Case(lambda url: post(url, json={"credentials": {"token": TOKEN}}), [TOKEN]),
    "nested auth object": Case(lambda url: post(url, json={"auth": {"key": TOKEN}}), [TOKEN]),
    "form client_secret": Case(
        lambda url: post(url, data={"grant_type": "client_credentials", "client_secret": TOKEN}), [TOKEN]
    ),
    "form client_secret first": Case(lambda url: post(url, data={"client_secret": TOKEN, "x": "1"}), [TOKEN]),
    "multipart api_key beside a binary file": Case(
        lambda url: post(url, data={"api_key": TOKEN}, files={"file": ("a.bin", b"\x00\xff\xfe" * 50)}),
        [TOKEN],
    ),
    "multipart binary file holding an env key": Case(
        lambda url: post(url, files={"file": ("env.bin", b"\x00\xffKEY=" + ENV_KEY.encode() + b"\xfe")}),
        [ENV_KEY],
        env={"OPENAI_API_KEY": ENV_KEY},
    ),
    "aiohttp FormData api_key and binary file": Case(aiohttp_form, [TOKEN, ENV_KEY], env={"LLM_KEY": ENV_KEY}),
    "tool call arguments (JSON in a JSON string)": Case(
        lambda url: post(url, json={"function": {"arguments": json.dumps({"api_key": TOKEN, "q": "x"})}}),
        [TOKEN],
    ),
    "x-session-id response header": Case(
        lambda url: get(url), [TOKEN], reply=lambda seen: Reply(headers={**JSON, "x-session-id": TOKEN})
    ),
    "signed URL in a location header": Case(
        lambda url: post(url, json={}),
        [TOKEN],
        reply=lambda seen: Reply(201, "Created", {**JSON, "location": f"https://store.test/a?se=1&sig={TOKEN}"}),
    ),
    "echo server: every request header in the body": Case(
        lambda url: post(
            url, json={}, headers={"authorization": f"Bearer {TOKEN}", "x-api-key": ENV_KEY, "cookie": "s=1"}
        ),
        [TOKEN, ENV_KEY],
        env={"ANTHROPIC_API_KEY": ENV_KEY},
    ),
    "nested credentials in a response (STS)": Case(
        lambda url: get(url),
        [TOKEN],
        reply=lambda seen: Reply(body=json.dumps({"Credentials": {"SessionToken": TOKEN, "Expiration": "x"}}).encode()),
    ),
    "a credential pair in a stream of events": Case(
        lambda url: get(url),
        [TOKEN],
        reply=lambda seen: Reply(
            headers={"content-type": "text/event-stream"},
            body=f'data: {{"delta": "hi", "api_key": "{TOKEN}"}}\n\ndata: [DONE]\n\n'.encode(),
        ),
    ),
    "credentials in an XML answer (STS)": Case(
        lambda url: get(url),
        [TOKEN],
        reply=lambda seen: Reply(
            headers={"content-type": "text/xml"},
            body=f"<Credentials><SecretAccessKey>{TOKEN}</SecretAccessKey><Expiration>x</Expiration></Credentials>".encode(),
        ),
    ),
    "a token in a URL's fragment (OAuth's implicit flow)": Case(
        lambda url: post(url, json={"redirect": f"https://app.test/cb#access_token={TOKEN}&state=1"}), [TOKEN]
    ),
    # Shapes: whatever holds them.
    "Bearer token in a text": Case(
        lambda url: post(url, json={"note": f"curl -H 'Authorization: Bearer {TOKEN}'"}), [TOKEN]
    ),
    "a URL's user:password@ in a JSON string": Case(
        lambda url: post(url, json={"database": f"postgres://app:{TOKEN}@db.test:5432/app"}), [TOKEN]
    ),
    "a PEM private key in an uploaded text file": Case(
        lambda url: post(url, files={"key": ("k.pem", f"-----BEGIN PRIVATE KEY-----\n{TOKEN}\n-----END PRIVATE KEY-----\n")}),
        [TOKEN],
    ),
    "provider key in a prompt": Case(
        lambda url: post(url, json={"prompt": "my key is sk-proj-a1b2c3d4e5f6g7h8i9j0"}), ["sk-proj-a1b2c3d4e5f6g7h8i9j0"]
    ),
    "a token a server gave, sent back under no credential name": Case(oauth_then_use, [TOKEN], reply=oauth_server),
    # The environment's values: every secret name, every form they take.
    "env name ending _APIKEY": Case(
        lambda url: post(url, json={"input": f"key {ENV_KEY}"}), [ENV_KEY], env={"MY_SERVICE_APIKEY": ENV_KEY}
    ),
    "env name ending _PAT, in the path": Case(
        lambda url: get(f"{url}/repos/{ENV_KEY}/x"), [ENV_KEY], env={"GITHUB_PAT": ENV_KEY}
    ),
    "env secret with / and + in a query value": Case(
        lambda url: get(f"{url}/v1?{httpx.QueryParams({'q': SLASHED})}"),
        [SLASHED],
        env={"AWS_SECRET_ACCESS_KEY": SLASHED},
    ),
    "env secret with / and + in a form value": Case(
        lambda url: post(url, data={"q": SLASHED}), [SLASHED], env={"AWS_SECRET_ACCESS_KEY": SLASHED}
    ),
    "env secret in base64 (a file sent as a data URL)": Case(
        lambda url: post(url, json={"file": "data:text/plain;base64," + base64.b64encode(b"K=" + ENV_KEY.encode()).decode()}),
        [ENV_KEY],
        env={"OPENAI_API_KEY": ENV_KEY},
    ),
    "env secret in a gzip-compressed request body": Case(
        lambda url: post(
            url,
            content=gzip.compress(json.dumps({"input": ENV_KEY}).encode()),
            headers={"content-encoding": "gzip", "content-type": "application/json"},
        ),
        [ENV_KEY],
        env={"OPENAI_API_KEY": ENV_KEY},
    ),
    "env secret in a requests body": Case(
        lambda url: requests.post(url, json={"input": ENV_KEY}, timeout=10).raise_for_status(),
        [ENV_KEY],
        env={"HF_TOKEN": ENV_KEY},
    ),
    "env secret in a response's reason phrase": Case(
        lambda url: get(url), [ENV_KEY], env={"OPENAI_API_KEY": ENV_KEY}, reply=lambda seen: Reply(reason=f"OK {ENV_KEY}")
    ),
    "env secret in a binary response (audio)": Case(
        lambda url: get(url),
        [ENV_KEY],
        env={"OPENAI_API_KEY": ENV_KEY},
        reply=lambda seen: Reply(headers={"content-type": "audio/wav"}, body=b"RIFF\x00\xff" + ENV_KEY.encode() + b"\xfe"),
    ),
    # Bodies the recorder must decode to scrub: br and zstd, as httpx asks for them.
    "env secret in a br-compressed response": Case(
        lambda url: post(url, json={"input": ENV_KEY}), [ENV_KEY], env={"OPENAI_API_KEY": ENV_KEY}, reply=in_coding("br")
    ),
    "env secret in a zstd-compressed response": Case(
        lambda url: post(url, json={"input": ENV_KEY}), [ENV_KEY], env={"OPENAI_API_KEY": ENV_KEY}, reply=in_coding("zstd")
    ),
}  # fmt: skip


@contextlib.contextmanager
def recording(folder: Path, mode: str, notices: list[str] | None = None) -> Iterator[Recorder]:
    told = notices if notices is not None else []
    recorder = Recorder(mode=mode, folder=folder, session_id="s1", worker="main", notify=told.append)
    recorder.start()
    try:
        yield recorder
    finally:
        recorder.stop()


@pytest.mark.parametrize("mode", ["once", "new_episodes", "all"])
@pytest.mark.parametrize("name", list(CASES))
def test_no_secret_reaches_a_recording_and_the_trial_still_replays(
    tmp_path: Path, server: Server, monkeypatch: pytest.MonkeyPatch, name: str, mode: str
) -> None:
    case = CASES[name]
    for variable, value in case.env.items():
        monkeypatch.setenv(variable, value)
    server.reply = case.reply
    with recording(tmp_path, mode) as recorder:
        key = TrialKey(TEST, "q1", 0)
        with recorder.scope(key, "a1").entered():
            case.send(server.url)
        recorder.completed("a1")  # mode all keeps what a completed attempt recorded
        assert recorder.counts().recorded > 0
        assert leaks(tmp_path, case.secrets) == []  # the journal, as the process wrote it
    assert fold(tmp_path) == Folded()
    assert load_recordings(tmp_path, TEST)
    assert leaks(tmp_path, case.secrets) == []
    assert still_encoded(tmp_path) == []

    server.reply = lambda seen: pytest.fail(f"strict replay reached the server: {seen}")
    with recording(tmp_path, "none") as recorder:
        scope = recorder.scope(TrialKey(TEST, "q1", 0), "a2")
        with scope.entered():
            case.send(server.url)
    assert [miss.diff for miss in scope.misses] == []


def test_a_body_in_a_coding_the_recorder_cannot_read_is_not_recorded_and_it_says_so(
    tmp_path: Path, server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", ENV_KEY)
    # "compress" (LZW): no client decodes it, so no client asks for it; a server may still send it.
    opaque = b"\x1f\x9d\x90" + ENV_KEY.encode() + b"\xff\x00"
    server.reply = lambda seen: Reply(headers={**JSON, "content-encoding": "compress"}, body=opaque)
    notices: list[str] = []
    with recording(tmp_path, "new_episodes", notices) as recorder:
        with recorder.scope(TrialKey(TEST, "q1", 0), "a1").entered():
            assert httpx.get(f"{server.url}/v1/audio", timeout=10).content == opaque
    fold(tmp_path)
    assert leaks(tmp_path, [ENV_KEY]) == []
    assert load_recordings(tmp_path, TEST) == []
    assert notices == [
        f"--eval-record: the response to GET {server.url}/v1/audio was not recorded: its body is "
        "compress-encoded, a coding this plugin does not decode; a body the recorder cannot read cannot "
        "be kept free of secrets"
    ]


@pytest.mark.parametrize(
    ("coding", "compress"),
    [
        ("gzip", gzip.compress),
        ("deflate", zlib.compress),
        ("zstd", lambda data: zstandard.ZstdCompressor().compress(data)),
        ("br", brotli.compress),
    ],
)
def test_a_compressed_body_cut_short_is_never_stored_as_it_came(
    monkeypatch: pytest.MonkeyPatch, coding: str, compress: Callable[[bytes], bytes]
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", ENV_KEY)
    body = json.dumps({"echo": ENV_KEY, "padding": "x" * 200}).encode()
    headers = {"content-type": ["application/json"], "content-encoding": [coding]}
    scrubber = Scrubber(EnvironmentSecrets())
    # Cut short: it does not decode, and the key inside is out of the scrubber's reach.
    with pytest.raises(UnreadableBody, match=f"its body is {coding}-encoded and does not decode"):
        http_calls.recorded_response(200, "OK", headers, compress(body)[:-12], scrubber)
    # Decoded already by the client (urllib3, aiohttp leave the header): read, and scrubbed.
    stored = http_calls.recorded_response(200, "OK", headers, body, scrubber)
    assert stored.body == {"json": {"echo": "<OPENAI_API_KEY>", "padding": "x" * 200}}


def test_a_secret_set_after_the_recorder_started_is_masked(
    tmp_path: Path, server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.reply = echo
    with recording(tmp_path, "new_episodes") as recorder:
        # As a session fixture, monkeypatch.setenv or a .env loaded by a conftest fixture do.
        monkeypatch.setenv("LATE_API_KEY", ENV_KEY)
        with recorder.scope(TrialKey(TEST, "q1", 0), "a1").entered():
            post(server.url, json={"input": ENV_KEY})
        monkeypatch.setenv("LATE_API_KEY", SLASHED)  # and changed again, between two trials
        with recorder.scope(TrialKey(TEST, "q2", 0), "a1").entered():
            post(server.url, json={"input": SLASHED})
    fold(tmp_path)
    assert leaks(tmp_path, [ENV_KEY, SLASHED]) == []
    bodies = [i.request.body for i in load_recordings(tmp_path, TEST)]
    assert bodies == [{"json": {"input": "<LATE_API_KEY>"}}] * 2


# -- end to end: pytest runs an inner project's eval test, its app using the real SDKs -----------


def chat_server(seen: Seen) -> Reply:
    """An OpenAI-style server that compresses as the client asks (br first, as servers prefer it),
    echoes the request's key where a careless server would, and answers an upload with its size."""
    if seen.path.startswith("/v1/upload"):
        return Reply(body=json.dumps({"bytes": len(seen.body)}).encode())
    question = json.loads(seen.body)["messages"][-1]["content"]
    answer = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-4o-mini",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": f"answer to {question}"},
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        "system_fingerprint": seen.headers.get("authorization", ""),
    }
    accepted = seen.headers.get("accept-encoding", "")
    coding = (
        "zstd" if "zstd" in seen.path else next((c for c in ("br", "zstd", "gzip") if c in accepted), None)
    )
    body = json.dumps(answer).encode()
    if coding is None:
        return Reply(body=body)
    return Reply(headers={**JSON, "content-encoding": coding}, body=compressed(coding, body))


# The app: the OpenAI SDK (httpx: br), plain httpx (zstd), and requests uploading a binary file
# with its key in a form field (multipart).
SDK_APP = """
import os
import httpx
import openai
import requests

URL = os.environ["SERVER_URL"]


def ask(question):
    client = openai.OpenAI(base_url=URL + "/v1", api_key=os.environ["OPENAI_API_KEY"], max_retries=0)
    answer = client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": question}])
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": question + "?"}]}
    headers = {"authorization": "Bearer " + os.environ["OPENAI_API_KEY"]}
    again = httpx.post(URL + "/v1/zstd", json=body, headers=headers, timeout=10).json()
    audio = b"RIFF\\x00\\xff" + os.environ["OPENAI_API_KEY"].encode() + b"\\xfe\\x00"
    uploaded = requests.post(
        URL + "/v1/upload", data={"api_key": os.environ["UPLOAD_VALUE"]}, files={"file": ("a.wav", audio)}, timeout=10
    ).json()
    assert uploaded["bytes"] > len(audio)
    return answer.choices[0].message.content + " / " + again["choices"][0]["message"]["content"]
"""

SDK_TEST = """
import pytest
from pytest_opik_eval.metrics import Contains
from app import ask


@pytest.mark.eval(dataset="data.jsonl", metrics=[Contains()], scoring_key_mapping={"reference": "expected_output"})
def test_answer(eval_item):
    return ask(eval_item["input"]["question"])
"""

SDK_KEY = "sk-proj-Sdk5ecret0123456789abcd"
UPLOAD_TOKEN = "upl0ad-t0ken-2f6b1c9d"


def sdk_project(project: Project, server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERVER_URL", server.url)
    monkeypatch.setenv("OPENAI_API_KEY", SDK_KEY)
    monkeypatch.setenv("UPLOAD_VALUE", UPLOAD_TOKEN)  # named like no secret: found by its field's name
    server.reply = chat_server
    project.dataset(
        {"id": q, "input": {"question": q}, "expected_output": "answer"} for q in ("capital", "colour")
    )
    project.write("app.py", SDK_APP)
    project.write("test_app.py", SDK_TEST)


def recordings_of(project: Project) -> Path:
    return project.path / ".opik-eval" / "recordings"


def test_compressed_answers_and_binary_uploads_are_stored_readable_scrubbed_and_counted(
    project: Project, server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    sdk_project(project, server, monkeypatch)
    project.run("--eval", "--eval-record=new_episodes").assert_outcomes(passed=2)
    folder = recordings_of(project)
    assert leaks(folder, [SDK_KEY, UPLOAD_TOKEN]) == []
    interactions = json.loads((folder / "test_app.py" / "test_answer.json").read_text())["interactions"]
    by_path = {i["request"]["url"].rpartition("/")[2]: i for i in interactions if i["item_id"] == "capital"}
    chat, compressed_again, upload = by_path["completions"], by_path["zstd"], by_path["upload"]
    # Decoded (br, zstd), so readable and diffable: the JSON the SDK read, the key masked in it.
    assert chat["response"]["body"]["json"]["choices"][0]["message"]["content"] == "answer to capital"
    assert chat["response"]["body"]["json"]["system_fingerprint"] == "Bearer <OPENAI_API_KEY>"
    assert "content-encoding" not in chat["response"]["headers"]
    assert (
        compressed_again["response"]["body"]["json"]["choices"][0]["message"]["content"]
        == "answer to capital?"
    )
    # The upload: its text field redacted, its binary part in base64 with the key masked in it.
    text = upload["request"]["body"]["text"]
    assert 'name="api_key"\r\n\r\nREDACTED\r\n' in text
    assert "Content-Transfer-Encoding: base64\r\n\r\n" in text
    binary = base64.b64decode(text.split("Content-Transfer-Encoding: base64\r\n\r\n")[1].split("\r\n")[0])
    assert binary == b"RIFF\x00\xff<OPENAI_API_KEY>\xfe\x00"

    server.reply = lambda seen: pytest.fail(f"strict replay reached the server: {seen.path}")
    result = project.run("--eval", "--eval-record=none")
    result.assert_outcomes(passed=2)
    # The compressed answers' tokens count as saved: 4 calls of 15 tokens.
    result.stdout.fnmatch_lines(
        ["eval recordings (--eval-record=none): 6 replayed, 0 recorded, 0 missed; saved 60 tokens*"]
    )


# Secrets set after the session started: by a session fixture, by monkeypatch in a test's
# fixture, and from a .env file a conftest fixture loads; sent by the app and quoted by a judge.
LATE_CONFTEST = """
import os
import pathlib
import pytest

HERE = pathlib.Path(__file__).parent


@pytest.fixture(autouse=True, scope="session")
def service_key():
    os.environ["SERVICE_API_KEY"] = "svc-k3y-7e2d-late-session"
    yield
    del os.environ["SERVICE_API_KEY"]


@pytest.fixture(autouse=True)
def more_secrets(monkeypatch):
    monkeypatch.setenv("CLIENT_SECRET", "cl1ent-5ecret-9a8b-monkeypatched")
    for line in (HERE / ".env").read_text().splitlines():  # as python-dotenv's load_dotenv does
        name, _, value = line.partition("=")
        monkeypatch.setenv(name, value)
"""

LATE_APP = """
import os
import httpx


def ask(question):
    body = {"question": question, "with": [os.environ[name] for name in ("SERVICE_API_KEY", "CLIENT_SECRET", "DB_PASSWORD")]}
    answer = httpx.post(os.environ["SERVER_URL"] + "/v1/echo", json=body, timeout=10)
    answer.raise_for_status()
    return answer.json()["data"]
"""

LATE_TEST = """
import os
import pytest
from pytest_opik_eval.metrics import BaseMetric, ScoreResult
from app import ask


class Judge(BaseMetric):
    judge = True

    def score(self, output, **ignored):
        # A judge that quotes what it was given, keys included.
        return ScoreResult(name="judge", value=1.0, reason=f"judged {output} as {os.environ['SERVICE_API_KEY']}")


@pytest.mark.eval(dataset="data.jsonl", metrics=[Judge()])
def test_answer(eval_item):
    return ask(eval_item["input"]["question"])
"""

LATE_SECRETS = ["svc-k3y-7e2d-late-session", "cl1ent-5ecret-9a8b-monkeypatched", "db-pa55word-from-dotenv"]


@pytest.mark.parametrize("mode", ["once", "new_episodes", "all"])
def test_secrets_set_after_the_session_started_reach_no_recording_and_no_judge_score(
    project: Project, server: Server, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    monkeypatch.setenv("SERVER_URL", server.url)
    server.reply = echo
    project.dataset([{"id": "q1", "input": {"question": "q1"}}])
    project.write(".env", f"DB_PASSWORD={LATE_SECRETS[2]}\n")
    project.write("conftest.py", LATE_CONFTEST)
    project.write("app.py", LATE_APP)
    project.write("test_app.py", LATE_TEST)
    project.run("--eval", f"--eval-record={mode}").assert_outcomes(passed=1)
    store = project.path / ".opik-eval"
    assert leaks(store / "recordings", LATE_SECRETS) == []
    assert leaks(store / "judge-cache", LATE_SECRETS) == []
    (recorded,) = json.loads((store / "recordings" / "test_app.py" / "test_answer.json").read_text())[
        "interactions"
    ]
    assert recorded["request"]["body"]["json"]["with"] == [
        "<SERVICE_API_KEY>",
        "<CLIENT_SECRET>",
        "<DB_PASSWORD>",
    ]
    (cached,) = [json.loads(path.read_text()) for path in (store / "judge-cache").rglob("*.json")]
    assert cached["results"][0]["reason"].endswith(" as <SERVICE_API_KEY>")

    server.reply = lambda seen: pytest.fail(f"strict replay reached the server: {seen.path}")
    result = project.run("--eval", "--eval-record=none")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["eval judge cache: 1 hit, 0 scored*"])


# aiohttp's FormData: a file upload with its key in a form field, and a urlencoded form.
FORM_APP = """
import asyncio
import io
import os
import aiohttp

URL = os.environ["SERVER_URL"]


async def upload(question):
    async with aiohttp.ClientSession() as session:
        form = aiohttp.FormData()
        form.add_field("api_key", os.environ["UPLOAD_VALUE"])
        form.add_field("purpose", question)
        form.add_field("file", io.BytesIO(b"\\x00\\xff" + question.encode() + b"\\xfe"), filename="a.bin", content_type="application/octet-stream")
        async with session.post(URL + "/v1/upload", data=form) as answer:
            answer.raise_for_status()
            size = (await answer.json())["bytes"]
        urlencoded = aiohttp.FormData({"client_secret": os.environ["UPLOAD_VALUE"], "question": question})
        async with session.post(URL + "/v1/upload", data=urlencoded) as answer:
            answer.raise_for_status()
            return f"{question}: {size} and {(await answer.json())['bytes']} bytes"


def ask(question):
    return asyncio.run(upload(question))
"""


def test_aiohttp_form_data_uploads_record_and_replay_in_every_mode(
    project: Project, server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SERVER_URL", server.url)
    monkeypatch.setenv("UPLOAD_VALUE", UPLOAD_TOKEN)
    server.reply = chat_server
    project.dataset({"id": q, "input": {"question": q}, "expected_output": q} for q in ("capital", "colour"))
    project.write("app.py", FORM_APP)
    project.write("test_app.py", SDK_TEST)
    result, recorded = project.run_report("--eval", "--eval-record=once")
    result.assert_outcomes(passed=2)
    outputs = {t["dataset_item_id"]: t["output"]["output"] for t in recorded["experiments"][0]["trials"]}
    assert outputs["capital"].startswith("capital: ")
    assert outputs["capital"].endswith(" bytes")
    folder = recordings_of(project)
    assert leaks(folder, [UPLOAD_TOKEN]) == []
    requests_made = [
        i["request"]
        for i in json.loads((folder / "test_app.py" / "test_answer.json").read_text())["interactions"]
    ]
    assert {r["content_type"] for r in requests_made} == {
        "multipart/form-data",
        "application/x-www-form-urlencoded",
    }
    assert "client_secret=REDACTED&question=capital" in {r["body"]["text"] for r in requests_made}

    server.reply = lambda seen: pytest.fail(f"strict replay reached the server: {seen.path}")
    for mode in ("none", "once", "new_episodes"):
        result, replayed = project.run_report("--eval", f"--eval-record={mode}")
        result.assert_outcomes(passed=2)
        assert {
            t["dataset_item_id"]: t["output"]["output"] for t in replayed["experiments"][0]["trials"]
        } == outputs
    server.reply = chat_server
    project.run("--eval", "--eval-record=all").assert_outcomes(passed=2)
    assert leaks(folder, [UPLOAD_TOKEN]) == []


PARAMETRIZED_BY_KEY = """
import os
import pytest
from pytest_opik_eval.metrics import Contains
from app import ask


@pytest.mark.parametrize("key", [os.environ["OPENAI_API_KEY"]])
@pytest.mark.eval(dataset="data.jsonl", metrics=[Contains()], scoring_key_mapping={"reference": "expected_output"})
def test_answer(eval_item, key):
    return ask(eval_item["input"]["question"])
"""


def test_a_test_parametrized_by_a_key_keeps_it_out_of_its_file_name(
    project: Project, server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    sdk_project(project, server, monkeypatch)
    project.write("test_app.py", PARAMETRIZED_BY_KEY)  # its id: test_answer[sk-proj-...]
    project.run("--eval", "--eval-record=new_episodes").assert_outcomes(passed=2)
    folder = recordings_of(project)
    assert leaks(folder, [SDK_KEY]) == []
    (name,) = [path.name for path in (folder / "test_app.py").iterdir()]
    assert "%3COPENAI_API_KEY%3E" in name  # test_answer[<OPENAI_API_KEY>], escaped
    # CI has another key: the same file.
    monkeypatch.setenv("OPENAI_API_KEY", "sk-proj-CIkey0000000000000000000")
    reply = server.reply
    server.reply = lambda seen: pytest.fail(f"strict replay reached the server: {seen.path}")
    project.run("--eval", "--eval-record=none").assert_outcomes(passed=2)
    # Recorded afresh with mode all, which keeps what each completed attempt recorded: under the
    # id masked as when its scope was made.
    server.reply = reply
    shutil.rmtree(folder)
    project.run("--eval", "--eval-record=all").assert_outcomes(passed=2)
    assert [path.name for path in (folder / "test_app.py").iterdir()] == [name]
    assert leaks(folder, [SDK_KEY, "sk-proj-CIkey0000000000000000000"]) == []
    server.reply = lambda seen: pytest.fail(f"strict replay reached the server: {seen.path}")
    project.run("--eval", "--eval-record=none").assert_outcomes(passed=2)


OPAQUE_APP = """
import os
import httpx


def ask(question):
    return str(len(httpx.get(os.environ["SERVER_URL"] + "/v1/speech", timeout=10).content))
"""


def test_a_response_that_cannot_be_scrubbed_is_not_recorded_and_the_session_says_so(
    project: Project, server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SERVER_URL", server.url)
    monkeypatch.setenv("OPENAI_API_KEY", ENV_KEY)
    opaque = b"\x1f\x9d\x90" + ENV_KEY.encode() + b"\xff\x00"
    server.reply = lambda seen: Reply(headers={**JSON, "content-encoding": "compress"}, body=opaque)
    project.dataset([{"id": "q1", "input": {"question": "q1"}, "expected_output": str(len(opaque))}])
    project.write("app.py", OPAQUE_APP)
    project.write("test_app.py", SDK_TEST)
    result = project.run("--eval", "--eval-record=new_episodes")
    result.assert_outcomes(passed=1)  # the app had its answer
    result.stdout.fnmatch_lines(
        [
            "*eval notices*",
            f"--eval-record: the response to GET {server.url}/v1/speech was not recorded: its body is "
            "compress-encoded, a coding this plugin does not decode; a body the recorder cannot read "
            "cannot be kept free of secrets",
            "eval recordings (--eval-record=new_episodes): 0 replayed, 0 recorded, 0 missed",
        ]
    )
    assert leaks(recordings_of(project), [ENV_KEY]) == []


def test_the_private_attributes_of_aiohttps_form_data_the_recorder_reads_are_there() -> None:
    # run/aiohttp_bodies.py renders a FormData from them, without sending it: a release that
    # renames them fails here, rather than in a user's recording.
    import aiohttp

    form = aiohttp.FormData({"a": "1"}, charset="latin-1")
    assert (form._fields[0][0]["name"], form._fields[0][2], form._charset) == ("a", "1", "latin-1")
    form.add_field("file", io.BytesIO(b"x"), filename="f.bin")
    form()  # as aiohttp does when it sends: 3.12 and later move the fields into the writer
    assert all(hasattr(part, "headers") and hasattr(part, "_value") for part, *_ in form._writer)
