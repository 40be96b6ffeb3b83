"""A fake OpenAI-style LLM server for the tests of --eval-record and the judge cache, and the
inner project's app and conftest that talk to it (``tests/test_recording.py`` explains them)."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

if TYPE_CHECKING:
    from conftest import Project

SECRET = "sk-test-SECRET-4f9a2b"  # recognisable, to prove that no recording holds it


class FakeLLM:
    """An OpenAI-style chat completions server on 127.0.0.1, in a thread. It answers a prompt
    ``"answer N to PROMPT"``, N counting the times the prompt was asked (so the trials of an item
    differ), with a fresh id, creation time and fingerprint each time, as OpenAI does; echoes the
    request's key in a response header, and counts connections and requests."""

    def __init__(self) -> None:
        self.connections = 0
        self.requests = 0
        self._asked: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.port = int(self._server.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self.running = True

    def reset(self) -> None:
        """Answer as if no prompt had been asked yet."""
        with self._lock:
            self._asked.clear()

    def stop(self) -> None:
        if self.running:
            self.running = False
            self._server.shutdown()
            self._server.server_close()

    def _answer(self, prompt: str) -> str:
        with self._lock:
            self.requests += 1
            self._asked[prompt] += 1
            return f"answer {self._asked[prompt]} to {prompt}"

    def _connected(self) -> None:
        with self._lock:
            self.connections += 1

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as the SDKs' clients use

            def setup(self) -> None:
                super().setup()
                fake._connected()

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                content = fake._answer(body["messages"][-1]["content"])
                answer = {
                    "id": f"chatcmpl-{uuid.uuid4().hex}",
                    "object": "chat.completion",
                    "created": time.time_ns(),
                    "system_fingerprint": f"fp_{uuid.uuid4().hex[:10]}",
                    "model": body["model"],
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": content}}],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
                }
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                # The key echoed back, as some servers do in an id or a header: scrubbed too.
                key = parse_qs(urlsplit(self.path).query).get("key", [""])[0]
                self.send_header("X-Echo", key)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # not on the test's stderr

        return Handler


# The app: plain httpx, the key in a header and in the query, and a volatile field ("user"); and
# the same question asked with requests (urllib3 and http.client, which vcrpy patches apart).
APP = """
import os
import httpx
import requests

def ask(prompt):
    with httpx.Client(trust_env=False, timeout=10) as client:
        response = client.post(
            os.environ["FAKE_LLM_URL"] + "/v1/chat/completions",
            params={"key": os.environ["FAKE_LLM_API_KEY"]},
            headers={"Authorization": "Bearer " + os.environ["FAKE_LLM_API_KEY"]},
            json={"model": "gpt-4o-mini", "messages": [{"role": "user", "content": prompt}], "user": "u-1"},
        )
    response.raise_for_status()
    return response.json()["choices"][0]["message"]["content"]


def ask_requests(prompt):
    with requests.Session() as session:
        session.trust_env = False  # no proxy from the environment
        response = session.post(
            os.environ["FAKE_LLM_URL"] + "/v1/chat/completions",
            params={"key": os.environ["FAKE_LLM_API_KEY"]},
            json={"model": "gpt-4o-mini", "messages": [{"role": "user", "content": prompt}]},
            timeout=10,
        )
    response.raise_for_status()
    return response.json()["choices"][0]["message"]["content"]


async def ask_async(prompt):
    async with httpx.AsyncClient(trust_env=False, timeout=10) as client:
        response = await client.post(
            os.environ["FAKE_LLM_URL"] + "/v1/chat/completions",
            params={"key": os.environ["FAKE_LLM_API_KEY"]},
            headers={"Authorization": "Bearer " + os.environ["FAKE_LLM_API_KEY"]},
            json={"model": "gpt-4o-mini", "messages": [{"role": "user", "content": prompt}]},
        )
    response.raise_for_status()
    return response.json()["choices"][0]["message"]["content"]
"""

# Counts every connection the app's process opens to the fake server, in connections.log: set up
# as the first test starts, so it sees the connections --eval-record=none blocks too.
CONFTEST = """
import os
import pathlib
import socket
import pytest

LOG = pathlib.Path(__file__).parent / "connections.log"


@pytest.fixture(autouse=True, scope="session")
def count_connections():
    port = int(os.environ["FAKE_LLM_PORT"])
    connect = socket.socket.connect

    def counting(sock, address):
        if isinstance(address, tuple) and len(address) > 1 and address[1] == port:
            with open(LOG, "a") as log:
                log.write(f"{address}\\n")
        return connect(sock, address)

    socket.socket.connect = counting
    yield
    socket.socket.connect = connect
"""


def connections(project: Project) -> int:
    """The connections the app opened to the fake server since the last look."""
    log = project.path / "connections.log"
    if not log.exists():
        return 0
    count = len(log.read_text().splitlines())
    log.unlink()
    return count
