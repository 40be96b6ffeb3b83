"""The plugin's wire to OpenAI's Batch API (run/batch_providers.py), Anthropic's Message Batches
(run/anthropic_batches.py) and Gemini's Batch Mode (run/gemini_batches.py), against the fake
providers (tests/fake_batches.py), and which requests a batch takes (run/batch_requests.py): what it sends is
what the provider takes (the fake refuses anything else), what it reads back is normalized, and
the provider's faults end in one clear error or a retry."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import httpx
import pytest
from fake_batches import FakeAnthropic, FakeGemini, FakeOpenAI

from pytest_opik_eval.own_requests import own_request
from pytest_opik_eval.run import gemini_batches
from pytest_opik_eval.run.anthropic_batches import AnthropicBatches
from pytest_opik_eval.run.batch_providers import (
    SUBMISSION_KEY,
    BatchNotFound,
    BatchView,
    OpenAIBatches,
    ProviderError,
    ResultLine,
    batch_client,
    request_line,
)
from pytest_opik_eval.run.batch_requests import Batchable, batchable, provider_of, split
from pytest_opik_eval.run.gemini_batches import GeminiBatches
from pytest_opik_eval.store.batch_ledger import Group

CHAT = "/v1/chat/completions"


class Wire(httpx.BaseTransport):
    """The real transport, watched: each request's method, path, headers and whether it was marked
    as the plugin's own; and, when asked, the answer to one request lost after the provider acted."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.seen: list[tuple[str, str, bool, httpx.Headers]] = []
        self.lose: str | None = None  # "METHOD path" whose next answer is lost

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.seen.append((request.method, request.url.path, own_request.get(), request.headers))
        response = self.inner.handle_request(request)
        if self.lose == f"{request.method} {request.url.path}":
            self.lose = None
            response.read()
            response.close()
            raise httpx.ReadTimeout("the answer was lost", request=request)
        return response

    def close(self) -> None:
        self.inner.close()

    def calls(self, method: str, path: str) -> int:
        return sum(1 for m, p, _, _ in self.seen if (m, p) == (method, path))


@pytest.fixture
def wire() -> Wire:
    return Wire()


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def batches(fake_openai: FakeOpenAI, wire: Wire, sleeps: list[float]) -> Iterator[OpenAIBatches]:
    client = OpenAIBatches(
        fake_openai.base_url,
        fake_openai.api_key,
        {"OpenAI-Organization": "org-1", "OpenAI-Project": "proj-1"},
        transport=wire,
        sleep=sleeps.append,
    )
    yield client
    client.close()


def chat(prompt: str, **extra: object) -> bytes:
    return json.dumps(
        {"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": prompt}], **extra}
    ).encode()


def submit(
    batches: OpenAIBatches, *prompts: str, name: str = "opik-eval-S.jsonl", submission: str = "S"
) -> str:
    file_id = batches.upload(name, [request_line(f"c{n}", CHAT, chat(p)) for n, p in enumerate(prompts)])
    return batches.create(file_id, CHAT, {"opik_eval": "1", "opik_eval_submission": submission}).id


def test_a_batch_from_upload_to_results(fake_openai: FakeOpenAI, batches: OpenAIBatches, wire: Wire) -> None:
    file_id = batches.upload(
        "opik-eval-S.jsonl", [request_line(f"c{n}", CHAT, chat(str(n))) for n in range(4)]
    )
    created = batches.create(file_id, CHAT, {"opik_eval_submission": "S"})
    assert (created.status, created.ended, created.total, dict(created.metadata)) == (
        "validating",
        False,
        4,
        {"opik_eval_submission": "S"},
    )
    waiting = batches.retrieve(created.id)
    assert (waiting.status, waiting.ended, waiting.output_file_id) == ("in_progress", False, None)

    fake_openai.finish(created.id, error=["c1"], http_error={"c2": 400})
    ended = batches.retrieve(created.id)
    assert (ended.status, ended.ended, ended.completed, ended.failed, ended.total) == (
        "completed",
        True,
        2,
        2,
        4,
    )
    lines = {line.custom_id: line for line in batches.results(ended)}
    assert lines["c0"].status_code == 200
    assert lines["c0"].body["choices"][0]["message"]["content"] == "answer to 0"
    assert lines["c0"].error is None
    assert lines["c1"] == ResultLine(
        "c1", None, None, "server_error: The server had an error while processing this request."
    )
    assert (lines["c2"].status_code, lines["c2"].body["error"]["type"], lines["c2"].error) == (
        400,
        "invalid_request_error",
        None,
    )
    assert sorted(lines) == ["c0", "c1", "c2", "c3"]
    assert batches.skipped == 0
    # Every request was OpenAI's to take, marked as the plugin's own, with the extra headers.
    assert fake_openai.rejected == []
    assert all(own for _, _, own, _ in wire.seen)
    assert {(h["OpenAI-Organization"], h["OpenAI-Project"]) for _, _, _, h in wire.seen} == {
        ("org-1", "proj-1")
    }


def test_expired_and_failed_batches(fake_openai: FakeOpenAI, batches: OpenAIBatches) -> None:
    first, second = submit(batches, "a", "b"), submit(batches, "c", submission="T")
    fake_openai.finish(first, expire=["c1"])
    expired = batches.retrieve(first)
    assert (expired.status, expired.ended) == ("expired", True)
    assert [(line.custom_id, line.error) for line in batches.results(expired) if line.error] == [
        ("c1", "batch_expired: This request could not be executed before the completion window expired.")
    ]
    fake_openai.fail(second, "Enqueued token limit reached.", line=1)
    failed = batches.retrieve(second)
    assert (failed.status, failed.ended, failed.errors) == (
        "failed",
        True,
        ((1, "token_limit_exceeded: Enqueued token limit reached."),),
    )
    assert list(batches.results(failed)) == []


def test_cancel(fake_openai: FakeOpenAI, batches: OpenAIBatches) -> None:
    batch_id = submit(batches, "a")
    assert batches.cancel(batch_id).status == "cancelling"
    fake_openai.finish(batch_id)
    assert [line.error for line in batches.results(batches.retrieve(batch_id))] == [
        "batch_cancelled: This request was cancelled with its batch."
    ]


def test_find_by_metadata_pages_down_to_the_time_given(
    fake_openai: FakeOpenAI, batches: OpenAIBatches, wire: Wire
) -> None:
    now = [1_000.0]
    fake_openai.clock = lambda: now[0]
    file_id = batches.upload("in.jsonl", [request_line("c0", CHAT, chat("a"))])
    for number in range(150):
        now[0] = 1_000.0 + number
        batches.create(file_id, CHAT, {"opik_eval_submission": f"S{number}"})
    found = batches.find("opik_eval_submission", "S10", created_after=0)
    assert found is not None
    assert (found.created_at, found.metadata["opik_eval_submission"]) == (1_010.0, "S10")
    assert wire.calls("GET", "/v1/batches") == 2  # newest first: S10 is on the second page
    assert batches.find("opik_eval_submission", "S140", created_after=1_100) is not None
    assert wire.calls("GET", "/v1/batches") == 3
    # Below the time given the listing stops: an older batch is not looked at.
    assert batches.find("opik_eval_submission", "S10", created_after=1_050) is None
    assert batches.find("opik_eval", "no such", created_after=1_149) is None
    assert wire.calls("GET", "/v1/batches") == 6


def test_delete_uploads_deletes_that_name_only_and_from_the_time_given(
    fake_openai: FakeOpenAI, batches: OpenAIBatches
) -> None:
    now = [1_000.0]
    fake_openai.clock = lambda: now[0]
    line = request_line("c0", CHAT, chat("a"))
    older = batches.upload("opik-eval-S.jsonl", [line])
    now[0] = 2_000.0
    doomed = {batches.upload("opik-eval-S.jsonl", [line]) for _ in range(2)}
    other = batches.upload("opik-eval-T.jsonl", [line])
    assert batches.delete_uploads("opik-eval-S.jsonl", created_after=1_500) == 2
    assert set(fake_openai.files) == {older, other}
    assert doomed.isdisjoint(fake_openai.files)
    assert batches.delete_uploads("opik-eval-S.jsonl", created_after=1_500) == 0


def test_a_deleted_batch_is_not_found(fake_openai: FakeOpenAI, batches: OpenAIBatches) -> None:
    batch_id = submit(batches, "a")
    fake_openai.delete(batch_id)
    with pytest.raises(BatchNotFound) as found:
        batches.retrieve(batch_id)
    assert (found.value.status, found.value.message) == (404, f"No batch found with id '{batch_id}'.")
    with pytest.raises(BatchNotFound):
        batches.cancel(batch_id)


def test_a_failing_create_is_retried(
    fake_openai: FakeOpenAI, batches: OpenAIBatches, sleeps: list[float]
) -> None:
    fake_openai.refuse_creates(500, times=2)
    batch_id = submit(batches, "a")
    assert list(fake_openai.batches) == [batch_id]
    assert fake_openai.creates == 1
    assert sleeps == [0.5, 1.0]


def test_a_create_that_keeps_failing_says_so(fake_openai: FakeOpenAI, batches: OpenAIBatches) -> None:
    fake_openai.refuse_creates(503, times=3)
    with pytest.raises(ProviderError) as failed:
        submit(batches, "a")
    assert failed.value.status == 503
    assert str(failed.value) == (
        f"POST {fake_openai.base_url}/batches failed after 3 attempts: HTTP 503: "
        "The fake refuses this batch with HTTP 503 (as asked)."
    )
    assert fake_openai.creates == 0


def test_a_refused_create_is_not_retried(
    fake_openai: FakeOpenAI, batches: OpenAIBatches, sleeps: list[float]
) -> None:
    fake_openai.refuse_creates(400)
    with pytest.raises(ProviderError) as refused:
        submit(batches, "a")
    assert (refused.value.status, refused.value.message) == (
        400,
        "The fake refuses this batch with HTTP 400 (as asked).",
    )
    assert "\n" not in str(refused.value)
    assert sleeps == []


def test_a_create_whose_answer_was_lost_is_not_made_twice(
    fake_openai: FakeOpenAI, batches: OpenAIBatches, wire: Wire
) -> None:
    wire.lose = "POST /v1/batches"
    batch_id = submit(batches, "a")
    assert list(fake_openai.batches) == [batch_id]
    assert wire.calls("POST", "/v1/batches") == 1


def test_unknown_and_missing_results_are_lines_like_any(
    fake_openai: FakeOpenAI, batches: OpenAIBatches
) -> None:
    batch_id = submit(batches, "a", "b")
    fake_openai.finish(batch_id)
    fake_openai.drop_results(batch_id, ["c0"])
    fake_openai.extra_results(batch_id, ["stranger"])
    assert sorted(line.custom_id for line in batches.results(batches.retrieve(batch_id))) == [
        "c1",
        "stranger",
    ]


def test_unreadable_result_lines_are_skipped_and_counted() -> None:
    content = b'not json\n{"no_custom_id": 1}\n\n{"custom_id": "c0", "response": {"status_code": 200, "body": {}}}\n'
    answers = {
        "/v1/batches/b1": {"id": "b1", "status": "completed", "created_at": 1, "output_file_id": "f1"},
        "/v1/files/f1/content": content,
    }

    def answer(request: httpx.Request) -> httpx.Response:
        found = answers[request.url.path]
        return (
            httpx.Response(200, content=found)
            if isinstance(found, bytes)
            else httpx.Response(200, json=found)
        )

    client = OpenAIBatches("https://api.example/v1", "sk-x", transport=httpx.MockTransport(answer))
    assert list(client.results(client.retrieve("b1"))) == [ResultLine("c0", 200, {}, None)]
    assert client.skipped == 2


def test_errors_never_show_the_key() -> None:
    key = "sk-proj-SECRET-42"

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            401, json={"error": {"message": f"Incorrect API key provided: {key}.\n\x1b[31m"}}
        )

    client = OpenAIBatches("https://api.example/v1/", key, transport=httpx.MockTransport(answer))
    with pytest.raises(ProviderError) as refused:
        client.retrieve("b1")
    assert str(refused.value) == (
        "GET https://api.example/v1/batches/b1 failed: HTTP 401: Incorrect API key provided: ***. \\x1b[31m"
    )


def test_a_rate_limit_waits_as_long_as_the_provider_asks() -> None:
    answers = iter(
        [
            httpx.Response(429, headers={"Retry-After": "7"}, json={"error": {"message": "slow down"}}),
            httpx.Response(429, headers={"Retry-After": "86400"}, json={"error": {"message": "slow down"}}),
            httpx.Response(200, json={"id": "b1", "status": "in_progress", "created_at": 1}),
        ]
    )
    sleeps: list[float] = []
    client = OpenAIBatches(
        "https://api.example/v1",
        "sk-x",
        transport=httpx.MockTransport(lambda _: next(answers)),
        sleep=sleeps.append,
    )
    assert client.retrieve("b1").status == "in_progress"
    assert sleeps == [7.0, 60.0]


def test_no_connection_is_a_provider_error(fake_openai: FakeOpenAI, sleeps: list[float]) -> None:
    url = fake_openai.base_url
    fake_openai.close()
    client = OpenAIBatches(url, fake_openai.api_key, sleep=sleeps.append, transport=httpx.HTTPTransport())
    with pytest.raises(ProviderError) as unreachable:
        client.retrieve("b1")
    assert unreachable.value.status is None
    assert str(unreachable.value).startswith(
        f"GET {url}/batches/b1 failed after 3 attempts: no answer: ConnectError"
    )
    assert len(sleeps) == 2


def test_request_line_is_one_line_of_the_apps_body() -> None:
    body = json.dumps({"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": "é\nx"}]}, indent=2)
    line = request_line("c0", CHAT, body.encode())
    assert b"\n" not in line
    assert json.loads(line) == {"custom_id": "c0", "method": "POST", "url": CHAT, "body": json.loads(body)}
    with pytest.raises(ValueError, match="must be a JSON object, not list"):
        request_line("c0", CHAT, b"[1]")


def test_openai_submit_uploads_names_and_creates(fake_openai: FakeOpenAI, batches: OpenAIBatches) -> None:
    uploads: list[str] = []
    requests = [(f"c{n}", chat(str(n))) for n in range(3)]
    view = batches.submit("S", CHAT, requests, {"opik_eval": "1"}, uploads.append)
    assert uploads == [fake_openai.uploads[0]["id"]]
    assert fake_openai.uploads[0]["filename"] == "opik-eval-S.jsonl"
    assert [line["custom_id"] for line in fake_openai.uploads[0]["lines"]] == ["c0", "c1", "c2"]
    assert dict(view.metadata) == {"opik_eval": "1", SUBMISSION_KEY: "S"}
    found = batches.find_submission("S", 3, created_after=0, known=())
    assert found is not None
    assert found.id == view.id
    assert batches.find_submission("T", 3, created_after=0, known=()) is None


def test_openai_forget_submission_deletes_its_upload_only(
    fake_openai: FakeOpenAI, batches: OpenAIBatches
) -> None:
    kept = batches.upload("opik-eval-T.jsonl", [request_line("c0", CHAT, chat("a"))])
    fake_openai.refuse_creates(400)
    uploads: list[str] = []
    with pytest.raises(ProviderError):
        batches.submit("S", CHAT, [("c0", chat("a"))], {}, uploads.append)
    assert len(uploads) == 1
    assert uploads[0] in fake_openai.files
    assert [f.object["filename"] for f in fake_openai.files.values()] == [
        "opik-eval-T.jsonl",
        "opik-eval-S.jsonl",
    ]
    batches.forget_submission("S", created_after=0)
    assert list(fake_openai.files) == [kept]


def test_batch_client_by_provider() -> None:
    openai = batch_client("openai", "https://api.example/v1", "sk-x", {})
    claude = batch_client("anthropic", "https://api.example", "sk-ant-x", {})
    assert (type(openai), type(claude)) == (OpenAIBatches, AnthropicBatches)
    openai.close()
    claude.close()
    gemini = batch_client("gemini", "https://api.example/v1beta", "AIza-x", {})
    assert type(gemini) is GeminiBatches
    gemini.close()
    with pytest.raises(ValueError, match="'anthropic', 'gemini' or 'openai'"):
        batch_client("vertex", "https://api.example", "k", {})


# -- Anthropic ---------------------------------------------------------------------------------

MESSAGES = "/v1/messages"
BATCHES = "/v1/messages/batches"


@pytest.fixture
def claude(fake_anthropic: FakeAnthropic, wire: Wire, sleeps: list[float]) -> Iterator[AnthropicBatches]:
    client = AnthropicBatches(
        fake_anthropic.base_url,
        fake_anthropic.api_key,
        {"anthropic-beta": "message-batches-2024-09-24"},
        transport=wire,
        sleep=sleeps.append,
    )
    yield client
    client.close()


def message(prompt: str, **extra: object) -> bytes:
    body = {"model": "claude-haiku-4-5", "max_tokens": 64, "messages": [{"role": "user", "content": prompt}]}
    return json.dumps({**body, **extra}).encode()


def never(file_id: str) -> None:
    raise AssertionError(f"Anthropic has no upload, yet {file_id} was said uploaded")


def ask(claude: AnthropicBatches, *prompts: str) -> BatchView:
    return claude.submit("S", MESSAGES, [(f"c{n}", message(p)) for n, p in enumerate(prompts)], {}, never)


def test_an_anthropic_batch_from_submit_to_results(
    fake_anthropic: FakeAnthropic, claude: AnthropicBatches, wire: Wire
) -> None:
    created = ask(claude, *(str(n) for n in range(7)))
    assert (created.status, created.ended, created.completed, created.failed, created.total) == (
        "in_progress",
        False,
        0,
        0,
        7,
    )
    assert claude.retrieve(created.id) == created
    fake_anthropic.finish(
        created.id,
        http_error={"c1": "invalid_request_error", "c2": "overloaded_error", "c3": "rate_limit_error"},
        error=["c4"],
        expire=["c5"],
        cancel=["c6"],
    )
    ended = claude.retrieve(created.id)
    assert (ended.status, ended.ended, ended.completed, ended.failed, ended.total) == ("ended", True, 1, 6, 7)
    lines = {line.custom_id: line for line in claude.results(ended)}
    assert lines["c0"].status_code == 200
    assert lines["c0"].body["content"][0]["text"] == "answer to 0"
    # An errored request gets back the status it would have had live, and Anthropic's error body.
    assert {cid: lines[cid].status_code for cid in ("c1", "c2", "c3", "c4")} == {
        "c1": 400,
        "c2": 529,
        "c3": 429,
        "c4": 500,
    }
    assert lines["c1"].body["type"] == "error"
    assert lines["c1"].body["error"] == {
        "type": "invalid_request_error",
        "message": "The request failed with invalid_request_error (as asked).",
    }
    assert lines["c5"] == ResultLine(
        "c5", None, None, "expired: the batch's 24 hours ended before this request ran"
    )
    assert lines["c6"] == ResultLine("c6", None, None, "canceled: the request was canceled with its batch")
    assert claude.skipped == 0
    # Every request was Anthropic's to take, marked as the plugin's own, with the headers it needs.
    assert fake_anthropic.rejected == []
    assert all(own for _, _, own, _ in wire.seen)
    assert {
        (h["x-api-key"], h["anthropic-version"], h["anthropic-beta"], "authorization" in h)
        for _, _, _, h in wire.seen
    } == {(fake_anthropic.api_key, "2023-06-01", "message-batches-2024-09-24", False)}
    assert wire.calls("POST", BATCHES) == 1
    assert wire.calls("GET", f"{BATCHES}/{created.id}/results") == 1


def test_anthropic_requests_go_inline_as_the_app_made_them(
    fake_anthropic: FakeAnthropic, claude: AnthropicBatches
) -> None:
    body = message("é", system="be brief", temperature=0)
    claude.submit("S", MESSAGES, [("oe1_0123456789ab_" + "f" * 40, body)], {"opik_eval": "1"}, never)
    (state,) = fake_anthropic._batches.values()
    assert state.requests == [{"custom_id": "oe1_0123456789ab_" + "f" * 40, "params": json.loads(body)}]


@pytest.mark.parametrize(
    ("endpoint", "requests", "message"),
    [
        (CHAT, [("c0", b"{}")], "takes requests to /v1/messages only"),
        (MESSAGES, [("c 0", b"{}")], r"custom_id matches \^\[a-zA-Z0-9_-\]\{1,64\}\$, not 'c 0'"),
        (MESSAGES, [("c" * 65, b"{}")], "not 'ccc"),
        (MESSAGES, [("c0", b"{}"), ("c0", b"{}")], "'c0' is twice"),
        (MESSAGES, [("c0", b"[]")], "must be a JSON object"),
    ],
)
def test_what_no_anthropic_batch_takes_is_refused_before_sending(
    claude: AnthropicBatches, wire: Wire, endpoint: str, requests: list[tuple[str, bytes]], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        claude.submit("S", endpoint, requests, {}, never)
    assert wire.seen == []


def test_anthropic_find_submission_by_count_among_unknown_batches(
    fake_anthropic: FakeAnthropic, claude: AnthropicBatches
) -> None:
    now = [1_000.0]
    fake_anthropic.clock = lambda: now[0]
    old = ask(claude, "a", "b")
    now[0] = 2_000.0
    three = ask(claude, "a", "b", "c")
    fake_anthropic.finish(three.id, error=["c0"])  # ended: counted across every outcome
    two = ask(claude, "a", "b")
    # One batch of two requests since 1500: it.
    found = claude.find_submission("S", 2, created_after=1_500, known=())
    assert found is not None
    assert found.id == two.id
    found = claude.find_submission("S", 3, created_after=1_500, known=())
    assert found is not None
    assert found.id == three.id
    # None: no batch of that count, or it is known (recorded for another submission).
    assert claude.find_submission("S", 4, created_after=1_500, known=()) is None
    assert claude.find_submission("S", 2, created_after=1_500, known={two.id}) is None
    # Two of that count and neither known: which one cannot be told.
    with pytest.raises(
        ProviderError, match=f"2 batches of 2 requests .*{two.id}, {old.id}.*cannot tell which"
    ):
        claude.find_submission("S", 2, created_after=0, known=())
    found = claude.find_submission("S", 2, created_after=0, known={two.id})
    assert found is not None
    assert found.id == old.id
    claude.forget_submission("S", created_after=0)  # nothing to forget: no file, and no batch deleted
    assert len(fake_anthropic.batches) == 3


def test_anthropic_find_submission_pages_down(fake_anthropic: FakeAnthropic, wire: Wire) -> None:
    now = [1_000.0]
    fake_anthropic.clock = lambda: now[0]
    for number in range(1_001):
        now[0] = 1_000.0 + number
        fake_anthropic.create({"requests": [{"custom_id": "c0", "params": json.loads(message("a"))}]})
    fake_anthropic.create(
        {"requests": [{"custom_id": f"c{n}", "params": json.loads(message("a"))} for n in range(2)]}
    )
    client = AnthropicBatches(fake_anthropic.base_url, fake_anthropic.api_key, transport=wire)
    found = client.find_submission("S", 1, created_after=0, known=list(fake_anthropic.batches)[1:])
    assert found is not None
    assert found.created_at == 1_000.0
    assert wire.calls("GET", BATCHES) == 2  # the oldest is on the second page of 1000
    client.close()


def test_anthropic_cancel_and_not_found(fake_anthropic: FakeAnthropic, claude: AnthropicBatches) -> None:
    batch = ask(claude, "a", "b")
    assert claude.cancel(batch.id).status == "canceling"
    fake_anthropic.finish(batch.id)
    ended = claude.retrieve(batch.id)
    assert (ended.status, ended.completed, ended.failed) == ("ended", 0, 2)
    assert [line.error for line in claude.results(ended)] == [
        "canceled: the request was canceled with its batch"
    ] * 2
    fake_anthropic.delete(batch.id)
    with pytest.raises(BatchNotFound) as found:
        claude.retrieve(batch.id)
    assert (found.value.status, found.value.message) == (404, f"No message batch found with id {batch.id!r}.")
    with pytest.raises(BatchNotFound):
        claude.cancel(batch.id)
    with pytest.raises(BatchNotFound):
        list(claude.results(ended))


def test_anthropic_failing_creates_are_retried_then_said(
    fake_anthropic: FakeAnthropic, claude: AnthropicBatches, sleeps: list[float]
) -> None:
    fake_anthropic.refuse_creates(529, times=2)
    batch = ask(claude, "a")
    assert (list(fake_anthropic.batches), fake_anthropic.creates) == ([batch.id], 1)
    assert sleeps == [0.5, 1.0]
    fake_anthropic.refuse_creates(529, times=3)
    with pytest.raises(ProviderError) as failed:
        ask(claude, "a")
    assert str(failed.value) == (
        f"POST {fake_anthropic.base_url}/v1/messages/batches failed after 3 attempts: HTTP 529: "
        "The fake refuses this batch with HTTP 529 (as asked)."
    )
    fake_anthropic.refuse_creates(400)
    with pytest.raises(ProviderError) as refused:
        ask(claude, "a")
    assert refused.value.status == 400
    assert fake_anthropic.creates == 1


def test_an_anthropic_create_whose_answer_was_lost_is_not_made_twice(
    fake_anthropic: FakeAnthropic, claude: AnthropicBatches, wire: Wire
) -> None:
    earlier = ask(claude, "a")  # of the same count, but there before the submission began
    wire.lose = f"POST {BATCHES}"
    batch = ask(claude, "b")
    assert batch.id != earlier.id
    assert list(fake_anthropic.batches) == [earlier.id, batch.id]
    assert wire.calls("POST", BATCHES) == 2  # the earlier one's and the lost one's: no retry


def test_anthropic_results_from_another_origin_are_fetched_from_the_base() -> None:
    seen: list[str] = []
    given = {"results_url": ""}
    ended = {
        "id": "msgbatch_1",
        "processing_status": "ended",
        "created_at": "2026-12-05T10:00:00Z",
        "request_counts": {"succeeded": 1},
    }
    line = b'{"custom_id": "c0", "result": {"type": "succeeded", "message": {"id": "m"}}}\nnot json\n'

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        if request.url.path.endswith("/results"):
            return httpx.Response(200, content=line)
        return httpx.Response(200, json={**ended, **given})

    client = AnthropicBatches(
        "https://api.example/", "sk-ant-x", transport=httpx.MockTransport(answer), bearer=True
    )
    for results_url, fetched in (
        (
            "https://elsewhere.example/v1/messages/batches/msgbatch_1/results",
            "https://api.example/v1/messages/batches/msgbatch_1/results",
        ),
        ("https://api.example/files/r1/results", "https://api.example/files/r1/results"),
    ):
        given["results_url"] = results_url
        view = client.retrieve("msgbatch_1")
        assert (view.created_at, view.total) == (1_796_464_800.0, 1)
        assert list(client.results(view)) == [ResultLine("c0", 200, {"id": "m"}, None)]
        assert seen[-1] == fetched
    assert client.skipped == 2
    client.close()


def test_anthropic_bearer_key_and_errors_never_show_it(fake_anthropic: FakeAnthropic, wire: Wire) -> None:
    key = "sk-ant-SECRET-42"

    def answer(request: httpx.Request) -> httpx.Response:
        assert (request.headers["authorization"], "x-api-key" in request.headers) == (f"Bearer {key}", False)
        return httpx.Response(
            401,
            json={"type": "error", "error": {"type": "authentication_error", "message": f"bad key {key}"}},
        )

    client = AnthropicBatches(
        "https://api.example", key, {"x-api-key": "stale"}, transport=httpx.MockTransport(answer), bearer=True
    )
    with pytest.raises(ProviderError) as refused:
        client.retrieve("msgbatch_1")
    assert (
        str(refused.value)
        == "GET https://api.example/v1/messages/batches/msgbatch_1 failed: HTTP 401: bad key ***"
    )
    client.close()


# -- Gemini ------------------------------------------------------------------------------------

FLASH = "/models/gemini-2.5-flash:generateContent"
CREATE = "/v1beta/models/gemini-2.5-flash:batchGenerateContent"


@pytest.fixture
def flash(fake_gemini: FakeGemini, wire: Wire, sleeps: list[float]) -> Iterator[GeminiBatches]:
    client = GeminiBatches(
        f"{fake_gemini.origin}/v1beta", fake_gemini.api_key, transport=wire, sleep=sleeps.append
    )
    yield client
    client.close()


def content(prompt: str) -> bytes:
    return json.dumps({"contents": [{"role": "user", "parts": [{"text": prompt}]}]}).encode()


def generate(client: GeminiBatches, *prompts: str, submission: str = "S") -> BatchView:
    return client.submit(submission, FLASH, [(f"c{n}", content(p)) for n, p in enumerate(prompts)], {}, never)


def test_a_gemini_batch_from_submit_to_results(
    fake_gemini: FakeGemini, flash: GeminiBatches, wire: Wire
) -> None:
    created = generate(flash, *(str(n) for n in range(6)))
    assert (created.status, created.ended, created.total, created.metadata) == (
        "pending",
        False,
        6,
        {"displayName": "S"},
    )
    assert fake_gemini.requests_of(created.id)[0] == {
        "request": json.loads(content("0")),
        "metadata": {"key": "c0"},
    }
    assert flash.retrieve(created.id).status == "running"
    fake_gemini.finish(
        created.id,
        error={"c1": "INVALID_ARGUMENT", "c2": "RESOURCE_EXHAUSTED", "c3": "INTERNAL", "c4": "CANCELLED"},
    )
    ended = flash.retrieve(created.id)
    assert (ended.status, ended.ended, ended.completed, ended.failed, ended.total) == (
        "succeeded",
        True,
        2,
        4,
        6,
    )
    lines = {line.custom_id: line for line in flash.results(ended)}
    assert lines["c0"].status_code == 200
    assert lines["c0"].body["candidates"][0]["content"]["parts"][0]["text"] == "answer to 0"
    # A request's error comes back with the HTTP status and the body the app would have had live.
    assert {cid: lines[cid].status_code for cid in ("c1", "c2", "c3")} == {"c1": 400, "c2": 429, "c3": 500}
    assert lines["c1"].body == {
        "error": {
            "code": 400,
            "message": "The request failed with INVALID_ARGUMENT (as asked).",
            "status": "INVALID_ARGUMENT",
        }
    }
    # Cancelled never ran: no answer, so it is submitted again.
    assert lines["c4"] == ResultLine(
        "c4", None, None, "cancelled: The request failed with CANCELLED (as asked)."
    )
    assert lines["c5"].status_code == 200
    assert flash.skipped == 0
    assert fake_gemini.rejected == []
    assert all(own for _, _, own, _ in wire.seen)
    assert {(h["x-goog-api-key"], "authorization" in h) for _, _, _, h in wire.seen} == {
        (fake_gemini.api_key, False)
    }
    assert wire.calls("POST", CREATE) == 1


def test_gemini_failed_expired_and_cancelled_batches(fake_gemini: FakeGemini, flash: GeminiBatches) -> None:
    failed, expired, cancelled = (generate(flash, name, submission=name) for name in ("F", "E", "C"))
    fake_gemini.fail(failed.id, "over the enqueued-token quota")
    view = flash.retrieve(failed.id)
    assert (view.status, view.ended, view.errors) == (
        "failed",
        True,
        ((None, "INVALID_ARGUMENT: over the enqueued-token quota"),),
    )
    fake_gemini.expire(expired.id)
    view = flash.retrieve(expired.id)
    assert (view.status, view.ended, list(flash.results(view))) == ("expired", True, [])
    view = flash.cancel(cancelled.id)
    assert (view.status, view.ended) == ("cancelled", True)
    fake_gemini.delete(cancelled.id)
    with pytest.raises(BatchNotFound):
        flash.retrieve(cancelled.id)
    with pytest.raises(BatchNotFound):
        flash.cancel(cancelled.id)


def test_gemini_find_submission_by_name_on_every_page(
    fake_gemini: FakeGemini, flash: GeminiBatches, wire: Wire, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gemini_batches, "_PAGE", 2)
    views = [generate(flash, str(n), submission=f"S{n}") for n in range(5)]
    # The fake lists oldest first: the one wanted is on the last page.
    assert flash.find_submission("S4", 1, 0, ()) == views[4]
    assert wire.calls("GET", "/v1beta/batches") == 3
    assert flash.find_submission("S4", 1, 0, {views[4].id}) is None  # known already
    assert flash.find_submission("S4", 1, views[4].created_at + 1, ()) is None  # older than asked
    assert flash.find_submission("S9", 1, 0, ()) is None
    flash.forget_submission("S9", 0)  # nothing to forget: no file is uploaded


def test_a_gemini_create_whose_answer_was_lost_is_not_made_twice(
    fake_gemini: FakeGemini, flash: GeminiBatches, wire: Wire
) -> None:
    wire.lose = f"POST {CREATE}"
    batch = generate(flash, "a")
    assert list(fake_gemini.batches) == [batch.id]
    assert wire.calls("POST", CREATE) == 1  # found by its name: no retry


@pytest.mark.parametrize(
    ("endpoint", "requests", "message"),
    [
        ("/v1/chat/completions", [("c0", b"{}")], "models/{model}:generateContent only"),
        (FLASH, [("c0", b"{}"), ("c0", b"{}")], "twice in one batch"),
        (FLASH, [("c0", b"[]")], "must be a JSON object"),
    ],
)
def test_what_no_gemini_batch_takes_is_refused_before_sending(
    flash: GeminiBatches, wire: Wire, endpoint: str, requests: list[tuple[str, bytes]], message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        flash.submit("S", endpoint, requests, {}, never)
    assert wire.seen == []


def test_gemini_results_without_a_key_are_skipped_and_errors_never_show_the_key() -> None:
    key = "AIza-SECRET-42"
    operation = {
        "name": "batches/b1",
        "metadata": {
            "displayName": "S",
            "state": "BATCH_STATE_SUCCEEDED",
            "createTime": "2026-12-05T10:00:00.123456Z",
            "batchStats": {"requestCount": "3", "successfulRequestCount": "3"},
        },
        "done": True,
        # Where the REST reference also puts the output of an ended batch.
        "response": {
            "output": {
                "inlinedResponses": {
                    "inlinedResponses": [
                        {"response": {"candidates": []}, "metadata": {"key": "c0"}},
                        {"response": {"candidates": []}},
                        {"metadata": {"key": "c2"}},
                        "not an object",
                    ]
                }
            }
        },
    }

    def answer(request: httpx.Request) -> httpx.Response:
        assert request.headers["x-goog-api-key"] == key
        if request.url.path.endswith("/b2"):
            return httpx.Response(403, json={"error": {"code": 403, "message": f"key {key} is not allowed"}})
        return httpx.Response(200, json=operation)

    client = GeminiBatches("https://api.example/v1beta", key, transport=httpx.MockTransport(answer))
    view = client.retrieve("b1")
    assert (view.id, view.status, view.created_at, view.total) == ("b1", "succeeded", 1_796_464_800.123456, 3)
    assert list(client.results(view)) == [
        ResultLine("c0", 200, {"candidates": []}, None),
        ResultLine("c2", None, None, "no_response: the provider gave no response and no error"),
    ]
    assert client.skipped == 2
    with pytest.raises(ProviderError) as refused:
        client.retrieve("b2")
    assert (
        str(refused.value)
        == "GET https://api.example/v1beta/batches/b2 failed: HTTP 403: key *** is not allowed"
    )
    client.close()


def test_gemini_requests_a_batch_takes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GEMINI_API_KEY", "AIza-batch-key")
    host = "https://generativelanguage.googleapis.com"
    body = content("hi")
    assert provider_of("generativelanguage.googleapis.com", None, {}) == "gemini"
    for version in ("v1beta", "v1"):
        url = f"{host}/{version}/models/gemini-2.5-flash:generateContent"
        found = batchable("gemini", "POST", url, {"X-Goog-Api-Key": "AIza-batch-key"}, body)
        assert found == Batchable(
            Group(
                provider="gemini",
                base_url=f"{host}/{version}",
                endpoint=FLASH,
                model="gemini-2.5-flash",
                key_env="GEMINI_API_KEY",
            ),
            body,
        )
    # The key as the REST examples pass it; a gateway's path before the version is kept.
    by_query = batchable(
        "gemini", "POST", f"https://gw.example/google/v1beta{FLASH}?key=AIza-batch-key", {}, body
    )
    assert isinstance(by_query, Batchable)
    assert by_query.group.base_url == "https://gw.example/google/v1beta"
    stream = batchable(
        "gemini", "POST", f"{host}/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", {}, body
    )
    assert stream == (
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent is not an endpoint of gemini's batch API "
        "(models/{model}:generateContent)"
    )
    unknown_key = batchable("gemini", "POST", f"{host}/v1beta{FLASH}", {"x-goog-api-key": "AIza-other"}, body)
    assert isinstance(unknown_key, str)
    assert unknown_key.startswith("--eval-batch needs the API key in an environment variable")
    # Gemini's inlined requests total 20 MB: split under it.
    parts = list(split("gemini", [(f"c{n}", b"x" * (5 * 1024 * 1024)) for n in range(8)]))
    assert [len(part) for part in parts] == [3, 3, 2]
