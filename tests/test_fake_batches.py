"""The fakes of OpenAI, Anthropic and Gemini (tests/fake_batches.py) are faithful: the official
``openai``, ``anthropic`` and ``google-genai`` clients drive them as they drive the providers, and
every object they return validates with the SDK's own models, with no field the SDK does not know. The batch tests trust their verdicts to it, so it is tested first."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Literal, cast

import anthropic
import fake_batches
import httpx
import openai
import pydantic
import pytest
from anthropic.types import Message
from anthropic.types.messages import DeletedMessageBatch, MessageBatch, MessageBatchIndividualResponse
from anthropic.types.messages.batch_create_params import Request
from fake_batches import FakeAnthropic, FakeGemini, FakeOpenAI
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as genai_types
from openai.types import Batch, FileDeleted, FileObject
from openai.types.chat import ChatCompletion, ChatCompletionMessageToolCall
from openai.types.responses import Response


class _Response(pydantic.BaseModel, extra="forbid"):
    status_code: int
    request_id: str
    body: dict[str, Any]


class _Error(pydantic.BaseModel, extra="forbid"):
    code: str
    message: str


class BatchRequestOutput(pydantic.BaseModel, extra="forbid"):
    """A line of a batch's output or error file, as OpenAI's OpenAPI spec names it (the SDK has
    no model for it: its users parse the lines themselves)."""

    id: str
    custom_id: str
    response: _Response | None
    error: _Error | None


def known(obj: dict[str, Any], model: type[pydantic.BaseModel]) -> set[str]:
    """The fields of ``obj`` the SDK's model does not have (the SDK's models take any field)."""
    return set(obj) - set(model.model_fields)


def line(custom_id: str, prompt: str, url: str = "/v1/chat/completions") -> bytes:
    body = {"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": prompt}]}
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": url, "body": body}).encode() + b"\n"


@pytest.fixture
def client(fake_openai: FakeOpenAI) -> Any:
    with openai.OpenAI(base_url=fake_openai.base_url, api_key=fake_openai.api_key, max_retries=0) as sdk:
        yield sdk


def output_lines(client: openai.OpenAI, file_id: str | None) -> list[BatchRequestOutput]:
    if file_id is None:
        return []
    text = client.files.content(file_id).text
    return [BatchRequestOutput.model_validate_json(raw) for raw in text.splitlines()]


def test_a_batch_through_the_sdk(fake_openai: FakeOpenAI, client: openai.OpenAI) -> None:
    content = (
        line("a", "what is two") + line("b", "and three") + line("c", "and four") + line("d", "and five")
    )
    uploaded = client.files.create(file=("in.jsonl", content), purpose="batch")
    assert known(uploaded.model_dump(mode="json", exclude_unset=True), FileObject) == set()
    assert (uploaded.purpose, uploaded.filename, uploaded.bytes) == ("batch", "in.jsonl", len(content))
    assert client.files.retrieve(uploaded.id) == uploaded

    batch = client.batches.create(
        input_file_id=uploaded.id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
        metadata={"opik_eval_submission": "oe1_x"},
    )
    assert batch.status == "validating"
    raw = fake_openai.batches[batch.id]
    assert known(raw, Batch) == set()
    assert Batch.model_validate(raw, strict=True).status == "in_progress"
    assert client.batches.retrieve(batch.id).status == "in_progress"
    assert batch.request_counts is not None
    assert batch.request_counts.total == 4
    assert batch.model == "gpt-4.1-mini"

    fake_openai.finish(batch.id, error=["b"], http_error={"c": 429})
    ended = client.batches.retrieve(batch.id)
    assert ended.status == "completed"
    assert ended.request_counts is not None
    assert (ended.request_counts.completed, ended.request_counts.failed) == (2, 2)
    outputs = output_lines(client, ended.output_file_id)
    errors = output_lines(client, ended.error_file_id)
    assert sorted(o.custom_id for o in outputs) == ["a", "d"]
    assert {o.custom_id: (o.response and o.response.status_code, o.error) for o in errors} == {
        "b": (
            None,
            _Error(code="server_error", message="The server had an error while processing this request."),
        ),
        "c": (429, None),
    }
    answered = {o.custom_id: ChatCompletion.model_validate(o.response.body) for o in outputs if o.response}
    assert answered["a"].choices[0].message.content == "answer to what is two"

    # The same request live gets the same answer: a batched run and a live run agree.
    live = client.chat.completions.create(
        model="gpt-4.1-mini", messages=[{"role": "user", "content": "what is two"}]
    )
    assert live.model_dump() == answered["a"].model_dump()
    assert fake_openai.live_calls == [
        (
            "/v1/chat/completions",
            {"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": "what is two"}]},
        )
    ]
    assert known(outputs[0].response.body if outputs[0].response else {}, ChatCompletion) == set()
    assert fake_openai.rejected == []


def test_listing_paging_and_cancel(fake_openai: FakeOpenAI, client: openai.OpenAI) -> None:
    ids = []
    for number in range(5):
        uploaded = client.files.create(file=(f"in{number}.jsonl", line("x", str(number))), purpose="batch")
        ids.append(
            client.batches.create(
                input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
            ).id
        )
    page = client.batches.list(limit=2)
    assert [b.id for b in page.data] == ids[::-1][:2]
    assert page.has_more
    assert [b.id for b in client.batches.list(limit=2)] == ids[::-1]  # the SDK pages with `after`
    files = client.files.list(purpose="batch", order="desc", limit=3)
    assert [f.filename for f in files.data] == ["in4.jsonl", "in3.jsonl", "in2.jsonl"]

    cancelling = client.batches.cancel(ids[0])
    assert cancelling.status == "cancelling"
    fake_openai.finish(ids[0])
    cancelled = client.batches.retrieve(ids[0])
    assert cancelled.status == "cancelled"
    assert [o.error.code for o in output_lines(client, cancelled.error_file_id) if o.error] == [
        "batch_cancelled"
    ]

    fake_openai.delete(ids[1])
    with pytest.raises(openai.NotFoundError):
        client.batches.retrieve(ids[1])
    deleted = client.files.delete(files.data[0].id)
    assert isinstance(deleted, FileDeleted)
    assert deleted.deleted


def test_expired_and_failed_batches(fake_openai: FakeOpenAI, client: openai.OpenAI) -> None:
    uploaded = client.files.create(file=("in.jsonl", line("a", "1") + line("b", "2")), purpose="batch")
    first, second = (
        client.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        for _ in range(2)
    )
    fake_openai.finish(first.id, expire=["b"])
    expired = client.batches.retrieve(first.id)
    assert expired.status == "expired"
    assert [(o.custom_id, o.error and o.error.code) for o in output_lines(client, expired.error_file_id)] == [
        ("b", "batch_expired")
    ]
    fake_openai.fail(second.id, "Enqueued token limit reached for gpt-4.1-mini.")
    failed = client.batches.retrieve(second.id)
    assert failed.status == "failed"
    assert failed.errors is not None
    assert failed.errors.data is not None
    assert failed.errors.data[0].message == "Enqueued token limit reached for gpt-4.1-mini."
    assert (failed.output_file_id, failed.error_file_id) == (None, None)


def test_extra_and_dropped_results(fake_openai: FakeOpenAI, client: openai.OpenAI) -> None:
    uploaded = client.files.create(file=("in.jsonl", line("a", "1") + line("b", "2")), purpose="batch")
    batch = client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    fake_openai.finish(batch.id)
    fake_openai.drop_results(batch.id, ["a"])
    fake_openai.extra_results(batch.id, ["stranger"])
    ended = client.batches.retrieve(batch.id)
    assert sorted(o.custom_id for o in output_lines(client, ended.output_file_id)) == ["b", "stranger"]


Endpoint = Literal["/v1/chat/completions", "/v1/responses", "/v1/embeddings"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"not json\n", "Line 1 is not valid JSON"),
        (line("a", "1") + line("a", "2"), "Line 2: custom_id 'a' is not unique"),
        (line("a", "1", url="/v1/completions"), "Line 1: url '/v1/completions' is not a batch endpoint"),
        (
            json.dumps({"custom_id": "a", "method": "GET", "url": "/v1/embeddings", "body": {}}).encode(),
            "method",
        ),
    ],
)
def test_bad_uploads_are_refused(
    fake_openai: FakeOpenAI, client: openai.OpenAI, content: bytes, message: str
) -> None:
    with pytest.raises(openai.BadRequestError, match=message):
        client.files.create(file=("in.jsonl", content), purpose="batch")
    assert [(r.path, r.status) for r in fake_openai.rejected] == [("/v1/files", 400)]
    assert fake_openai.uploads == []


def test_bad_batches_are_refused(fake_openai: FakeOpenAI, client: openai.OpenAI) -> None:
    chat = client.files.create(file=("in.jsonl", line("a", "1")), purpose="batch")
    two_models = line("a", "1") + line("b", "2").replace(b"gpt-4.1-mini", b"gpt-4o")
    mixed = client.files.create(file=("in.jsonl", two_models), purpose="batch")
    cases: list[tuple[str, Endpoint, dict[str, str], str]] = [
        (chat.id, "/v1/embeddings", {}, "url other than the batch's endpoint"),
        (chat.id, "/v1/chat/completions", {f"k{n}": "v" for n in range(17)}, "at most 16"),
        (chat.id, "/v1/chat/completions", {"k" * 65: "v"}, "keys up to 64"),
        (chat.id, "/v1/chat/completions", {"k": "v" * 513}, "values up to 512"),
        (mixed.id, "/v1/chat/completions", {}, "one model"),
    ]
    for file_id, endpoint, metadata, message in cases:
        with pytest.raises(openai.BadRequestError, match=message):
            client.batches.create(
                input_file_id=file_id, endpoint=endpoint, completion_window="24h", metadata=metadata
            )
    with pytest.raises(openai.NotFoundError):
        client.batches.create(input_file_id="file-nope", endpoint="/v1/embeddings", completion_window="24h")
    assert len(fake_openai.rejected) == len(cases) + 1
    assert fake_openai.creates == 0


def test_a_wrong_key_is_refused(fake_openai: FakeOpenAI) -> None:
    with (
        openai.OpenAI(base_url=fake_openai.base_url, api_key="sk-wrong", max_retries=0) as sdk,
        pytest.raises(openai.AuthenticationError),
    ):
        sdk.batches.list()
    assert [r.status for r in fake_openai.rejected] == [401]


def test_refused_creates_are_faults_not_rejections(fake_openai: FakeOpenAI, client: openai.OpenAI) -> None:
    uploaded = client.files.create(file=("in.jsonl", line("a", "1")), purpose="batch")
    fake_openai.refuse_creates(503)
    with pytest.raises(openai.InternalServerError):
        client.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
    client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h")
    assert (fake_openai.creates, fake_openai.rejected) == (1, [])


def test_the_other_live_endpoints(fake_openai: FakeOpenAI, client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="gpt-4.1-mini",
        messages=[{"role": "user", "content": "hi there"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "answer to hi there"
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 4  # "answer to hi there"
    response = client.responses.create(model="gpt-4.1-mini", input="hi there")
    assert response.output_text == "answer to hi there"
    embedding = client.embeddings.create(model="text-embedding-3-small", input=["a", "b"])
    assert len(embedding.data) == 2
    assert [path for path, _ in fake_openai.live_calls] == [
        "/v1/chat/completions",
        "/v1/responses",
        "/v1/embeddings",
    ]


def test_kill_on_create_kills_the_client_once_the_batch_exists(
    fake_openai: FakeOpenAI, client: openai.OpenAI, tmp_path: Path
) -> None:
    uploaded = client.files.create(file=("in.jsonl", line("a", "1")), purpose="batch")
    pid_file = tmp_path / "pid"
    fake_openai.kill_on_create(pid_file)
    submit = f"""
import os, pathlib, httpx
pathlib.Path({str(pid_file)!r}).write_text(str(os.getpid()))
httpx.post({fake_openai.base_url + "/batches"!r}, headers={{"Authorization": "Bearer {fake_openai.api_key}"}},
           json={{"input_file_id": {uploaded.id!r}, "endpoint": "/v1/chat/completions", "completion_window": "24h"}})
print("answered")
"""
    done = subprocess.run(
        [sys.executable, "-c", submit], capture_output=True, text=True, timeout=60, check=False
    )
    assert (done.returncode, done.stdout) == (-signal.SIGKILL, "")
    assert fake_openai.creates == 1
    assert [b.status for b in client.batches.list()] == ["in_progress"]


# -- Anthropic ---------------------------------------------------------------------------------


def ask(custom_id: str, prompt: str, **params: Any) -> Request:
    """One request of a Message Batch (any params, also those Anthropic refuses)."""
    request = {
        "custom_id": custom_id,
        "params": {
            "model": "claude-haiku-4-5",
            "max_tokens": 64,
            "messages": [{"role": "user", "content": prompt}],
            **params,
        },
    }
    return cast(Request, request)


@pytest.fixture
def claude(fake_anthropic: FakeAnthropic) -> Any:
    with anthropic.Anthropic(
        base_url=fake_anthropic.base_url, api_key=fake_anthropic.api_key, max_retries=0
    ) as sdk:
        yield sdk


def test_a_message_batch_through_the_sdk(fake_anthropic: FakeAnthropic, claude: anthropic.Anthropic) -> None:
    batch = claude.messages.batches.create(
        requests=[ask(name, f"what is {name}") for name in ("a", "b", "c", "d", "e")]
    )
    raw = fake_anthropic.batches[batch.id]
    assert known(raw, MessageBatch) == set()
    MessageBatch.model_validate_json(json.dumps(raw), strict=True)
    assert (batch.processing_status, batch.results_url) == ("in_progress", None)
    waiting = claude.messages.batches.retrieve(batch.id)
    # All "processing" until the whole batch ends, as Anthropic counts.
    assert waiting.request_counts.model_dump() == {
        "processing": 5,
        "succeeded": 0,
        "errored": 0,
        "canceled": 0,
        "expired": 0,
    }

    fake_anthropic.finish(
        batch.id, error=["b"], http_error={"c": "invalid_request_error"}, expire=["d"], cancel=["e"]
    )
    ended = claude.messages.batches.retrieve(batch.id)
    assert ended.processing_status == "ended"
    assert ended.ended_at is not None
    assert ended.results_url == f"{fake_anthropic.base_url}/v1/messages/batches/{batch.id}/results"
    assert ended.request_counts.model_dump() == {
        "processing": 0,
        "succeeded": 1,
        "errored": 2,
        "canceled": 1,
        "expired": 1,
    }
    results = list(claude.messages.batches.results(batch.id))
    assert all(isinstance(r, MessageBatchIndividualResponse) for r in results)
    outcomes = {r.custom_id: r.result for r in results}
    assert {name: result.type for name, result in outcomes.items()} == {
        "a": "succeeded",
        "b": "errored",
        "c": "errored",
        "d": "expired",
        "e": "canceled",
    }
    errored = outcomes["c"]
    assert errored.type == "errored"
    assert errored.error.error.type == "invalid_request_error"
    assert outcomes["b"].type == "errored"
    assert outcomes["b"].error.error.type == "api_error"
    answered = outcomes["a"]
    assert answered.type == "succeeded"
    assert answered.message.content[0].type == "text"
    assert answered.message.content[0].text == "answer to what is a"
    assert known(answered.message.model_dump(exclude_unset=True), Message) == set()

    # The same request live gets the same answer: a batched run and a live run agree.
    live = claude.messages.create(
        model="claude-haiku-4-5", max_tokens=64, messages=[{"role": "user", "content": "what is a"}]
    )
    assert live.model_dump() == answered.message.model_dump()
    assert (live.usage.input_tokens, live.usage.output_tokens) == (3, 5)
    assert [path for path, _ in fake_anthropic.live_calls] == ["/v1/messages"]
    assert (fake_anthropic.creates, fake_anthropic.rejected) == (1, [])


def test_message_batches_list_newest_first_and_page(
    fake_anthropic: FakeAnthropic, claude: anthropic.Anthropic
) -> None:
    ids = [claude.messages.batches.create(requests=[ask("x", str(n))]).id for n in range(5)]
    page = claude.messages.batches.list(limit=2)
    assert [b.id for b in page.data] == ids[::-1][:2]
    assert (page.has_more, page.first_id, page.last_id) == (True, ids[4], ids[3])
    assert [b.id for b in claude.messages.batches.list(limit=2)] == ids[::-1]  # the SDK pages with after_id
    newer = claude.messages.batches.list(limit=2, before_id=ids[0])
    assert ([b.id for b in newer.data], newer.has_more) == ([ids[2], ids[1]], True)
    with pytest.raises(anthropic.BadRequestError, match="between 1 and 1000"):
        claude.messages.batches.list(limit=1001)


def test_cancel_and_delete_a_message_batch(
    fake_anthropic: FakeAnthropic, claude: anthropic.Anthropic
) -> None:
    batch = claude.messages.batches.create(requests=[ask("a", "1"), ask("b", "2")])
    with pytest.raises(anthropic.BadRequestError, match="must end"):
        claude.messages.batches.delete(batch.id)
    canceling = claude.messages.batches.cancel(batch.id)
    assert (canceling.processing_status, canceling.cancel_initiated_at is not None) == ("canceling", True)
    fake_anthropic.finish(batch.id)
    assert [r.result.type for r in claude.messages.batches.results(batch.id)] == ["canceled", "canceled"]
    deleted = claude.messages.batches.delete(batch.id)
    assert isinstance(deleted, DeletedMessageBatch)
    assert deleted.id == batch.id
    with pytest.raises(anthropic.NotFoundError):
        claude.messages.batches.retrieve(batch.id)


def test_results_of_a_message_batch_wait_for_its_end(fake_anthropic: FakeAnthropic) -> None:
    batch = fake_anthropic.create({"requests": [ask("a", "1"), ask("b", "2")]})
    url = f"{fake_anthropic.base_url}/v1/messages/batches/{batch['id']}/results"
    headers = {"x-api-key": fake_anthropic.api_key, "anthropic-version": "2023-06-01"}
    early = httpx.get(url, headers=headers)
    assert early.status_code == 404
    assert early.json()["error"]["type"] == "not_found_error"
    fake_anthropic.finish()
    fake_anthropic.drop_results(batch["id"], ["a"])
    fake_anthropic.extra_results(batch["id"], ["stranger"])
    lines = [json.loads(line) for line in httpx.get(url, headers=headers).text.splitlines()]
    assert sorted(line["custom_id"] for line in lines) == ["b", "stranger"]


@pytest.mark.parametrize(
    ("requests", "message"),
    [
        ([], "non-empty list"),
        ([ask("a b", "1")], "requests.0.custom_id: 'a b' does not match"),
        ([ask("x" * 65, "1")], "does not match"),
        ([ask("a", "1"), ask("a", "2")], "requests.1.custom_id: 'a' is not unique"),
        ([ask("a", "1", max_tokens=0)], "requests.0.params.max_tokens"),
        ([ask("a", "1", stream=True)], "requests.0.params.stream"),
        ([{"custom_id": "a", "params": {"model": "m", "max_tokens": 1}}], "requests.0.params.messages"),
    ],
)
def test_bad_message_batches_are_refused(
    fake_anthropic: FakeAnthropic, claude: anthropic.Anthropic, requests: list[Any], message: str
) -> None:
    with pytest.raises(anthropic.BadRequestError, match=message) as refused:
        claude.messages.batches.create(requests=requests)
    body = refused.value.body
    assert isinstance(body, dict)
    assert body == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": body["error"]["message"]},
    }
    assert [(r.path, r.status) for r in fake_anthropic.rejected] == [("/v1/messages/batches", 400)]
    assert fake_anthropic.creates == 0


def test_anthropic_wants_its_key_and_a_version(fake_anthropic: FakeAnthropic) -> None:
    with (
        anthropic.Anthropic(base_url=fake_anthropic.base_url, api_key="sk-ant-wrong", max_retries=0) as sdk,
        pytest.raises(anthropic.AuthenticationError),
    ):
        sdk.messages.batches.list()
    url = f"{fake_anthropic.base_url}/v1/messages/batches"
    unversioned = httpx.get(url, headers={"x-api-key": fake_anthropic.api_key})
    assert (unversioned.status_code, unversioned.json()["error"]["type"]) == (400, "invalid_request_error")
    bearer = httpx.get(
        url, headers={"Authorization": f"Bearer {fake_anthropic.api_key}", "anthropic-version": "2023-06-01"}
    )
    assert bearer.status_code == 200
    assert [r.status for r in fake_anthropic.rejected] == [401, 400]


def test_a_live_message_streams(fake_anthropic: FakeAnthropic, claude: anthropic.Anthropic) -> None:
    with claude.messages.stream(
        model="claude-haiku-4-5", max_tokens=64, messages=[{"role": "user", "content": "hi there"}]
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "answer to hi there"
    assert (final.usage.input_tokens, final.usage.output_tokens, final.stop_reason) == (2, 4, "end_turn")
    assert fake_anthropic.live_calls[0][1]["stream"] is True


def test_a_refused_message_batch_create_is_a_fault_not_a_rejection(
    fake_anthropic: FakeAnthropic, claude: anthropic.Anthropic
) -> None:
    fake_anthropic.refuse_creates(529)
    with pytest.raises(anthropic.InternalServerError) as refused:
        claude.messages.batches.create(requests=[ask("a", "1")])
    assert refused.value.status_code == 529
    claude.messages.batches.create(requests=[ask("a", "1")])
    assert (fake_anthropic.creates, fake_anthropic.rejected) == (1, [])


# -- Gemini ------------------------------------------------------------------------------------

# What python-genai reads of a batch of the Gemini Developer API (batches.py, _BatchJob_from_mldev),
# and what the REST reference adds that it does not read (the operation's type, the batch's
# name again, its counts; done and error on the operation).
GENAI_READS = {"displayName", "state", "createTime", "endTime", "updateTime", "model", "output"}
REST_ONLY = {"@type", "name", "batchStats"}


@pytest.fixture
def gemini(fake_gemini: FakeGemini) -> Any:
    with genai.Client(
        api_key=fake_gemini.api_key, http_options=genai_types.HttpOptions(base_url=fake_gemini.origin)
    ) as sdk:
        yield sdk


def inlined(key: str, prompt: str) -> genai_types.InlinedRequest:
    return genai_types.InlinedRequest(
        contents=[genai_types.Content(role="user", parts=[genai_types.Part(text=prompt)])],
        metadata={"key": key},
    )


def test_a_gemini_batch_through_the_sdk(fake_gemini: FakeGemini, gemini: genai.Client) -> None:
    job = gemini.batches.create(
        model="gemini-2.5-flash",
        src=[inlined(key, f"what is {key}") for key in "abcd"],
        config={"display_name": "oe1_submission"},
    )
    assert (job.display_name, job.state, job.model) == (
        "oe1_submission",
        genai_types.JobState.JOB_STATE_PENDING,
        "models/gemini-2.5-flash",
    )
    assert job.name is not None
    assert job.name.startswith("batches/")
    batch_id = job.name.removeprefix("batches/")
    assert set(fake_gemini.batches[batch_id]["metadata"]) <= GENAI_READS | REST_ONLY
    assert gemini.batches.get(name=job.name).state == genai_types.JobState.JOB_STATE_RUNNING
    # As python-genai sends them: each request a generateContent body, its metadata kept.
    assert fake_gemini.requests_of(batch_id)[0] == {
        "request": {"contents": [{"role": "user", "parts": [{"text": "what is a"}]}]},
        "metadata": {"key": "a"},
    }

    fake_gemini.finish(batch_id, error={"b": "RESOURCE_EXHAUSTED", "c": "INVALID_ARGUMENT"})
    ended = gemini.batches.get(name=job.name)
    assert ended.state == genai_types.JobState.JOB_STATE_SUCCEEDED
    assert ended.done
    assert ended.dest is not None
    assert ended.dest.inlined_responses is not None
    responses = {(r.metadata or {})["key"]: r for r in ended.dest.inlined_responses}
    assert list(responses) == ["a", "b", "c", "d"]  # in the order of the requests
    answered = responses["a"].response
    assert answered is not None
    assert answered.text == "answer to what is a"
    assert (
        responses["b"].error and responses["b"].error.code,
        responses["c"].error and responses["c"].error.code,
    ) == (
        8,
        3,
    )
    assert fake_gemini.batches[batch_id]["metadata"]["batchStats"] == {
        "requestCount": "4",
        "successfulRequestCount": "2",
        "failedRequestCount": "2",
        "pendingRequestCount": "0",
    }
    raw = fake_gemini.batches[batch_id]["metadata"]["output"]["inlinedResponses"]["inlinedResponses"][0]
    genai_types.GenerateContentResponse.model_validate(raw["response"])  # no field the SDK does not know

    # The same request live gets the same answer: a batched run and a live run agree.
    live = gemini.models.generate_content(model="gemini-2.5-flash", contents="what is a")
    transport = {"sdk_http_response", "automatic_function_calling_history"}  # the client's, not the answer
    assert live.model_dump(exclude=transport) == answered.model_dump(exclude=transport)
    assert live.usage_metadata is not None
    assert (live.usage_metadata.prompt_token_count, live.usage_metadata.candidates_token_count) == (3, 5)
    assert fake_gemini.live_calls == [
        (
            "/models/gemini-2.5-flash:generateContent",
            {"contents": [{"parts": [{"text": "what is a"}], "role": "user"}]},
        )
    ]
    assert fake_gemini.rejected == []


def test_gemini_batches_list_page_cancel_fail_expire_and_delete(
    fake_gemini: FakeGemini, gemini: genai.Client
) -> None:
    names = [
        gemini.batches.create(
            model="gemini-2.5-flash", src=[inlined("a", str(n))], config={"display_name": f"b{n}"}
        ).name
        for n in range(5)
    ]
    listed = [job.name for job in gemini.batches.list(config={"page_size": 2})]
    assert listed == names  # every page, oldest first
    assert all(isinstance(name, str) for name in names)
    first, second, third, fourth, fifth = (str(name) for name in names)
    gemini.batches.cancel(name=first)
    assert gemini.batches.get(name=first).state == genai_types.JobState.JOB_STATE_CANCELLED
    fake_gemini.fail(second.removeprefix("batches/"), "over the quota")
    assert gemini.batches.get(name=second).state == genai_types.JobState.JOB_STATE_FAILED
    assert fake_gemini.batches[second.removeprefix("batches/")]["error"] == {
        "code": 3,
        "message": "over the quota",
    }
    fake_gemini.expire(third.removeprefix("batches/"))
    expired = gemini.batches.get(name=third)
    assert (expired.state, expired.dest) == (genai_types.JobState.JOB_STATE_EXPIRED, None)
    with pytest.raises(genai_errors.ClientError) as ended:
        gemini.batches.cancel(name=third)
    assert ended.value.code == 400
    gemini.batches.delete(name=fourth)
    with pytest.raises(genai_errors.ClientError) as gone:
        gemini.batches.get(name=fourth)
    assert (gone.value.code, gone.value.status) == (404, "NOT_FOUND")
    fake_gemini.delete(fifth.removeprefix("batches/"))
    assert [job.name for job in gemini.batches.list()] == [first, second, third]


@pytest.mark.parametrize(
    ("batch", "message"),
    [
        (
            {"inputConfig": {"requests": {"requests": [{"request": {"contents": [{"parts": []}]}}]}}},
            "displayName",
        ),
        ({"displayName": "S", "inputConfig": {}}, "inlined requests or a file are required"),
        (
            {"displayName": "S", "inputConfig": {"requests": {"requests": [{"request": {"contents": []}}]}}},
            "metadata.key",
        ),
        (
            {
                "displayName": "S",
                "inputConfig": {
                    "requests": {"requests": [{"request": {"contents": []}, "metadata": {"key": "a"}}]}
                },
            },
            "contents is not specified",
        ),
    ],
)
def test_bad_gemini_batches_are_refused(fake_gemini: FakeGemini, batch: dict[str, Any], message: str) -> None:
    answer = httpx.post(
        f"{fake_gemini.origin}/v1beta/models/gemini-2.5-flash:batchGenerateContent",
        headers={"x-goog-api-key": fake_gemini.api_key},
        json={"batch": batch},
    )
    assert answer.status_code == 400
    assert message in answer.json()["error"]["message"]
    assert answer.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert fake_gemini.creates == 0
    assert [r.status for r in fake_gemini.rejected] == [400]


def test_gemini_wants_its_key_and_a_refused_create_is_a_fault(
    fake_gemini: FakeGemini, gemini: genai.Client
) -> None:
    with genai.Client(
        api_key="AIza-wrong", http_options=genai_types.HttpOptions(base_url=fake_gemini.origin)
    ) as wrong:
        with pytest.raises(genai_errors.ClientError) as refused:
            wrong.models.generate_content(model="gemini-2.5-flash", contents="hi")
    assert (refused.value.code, refused.value.message) == (
        400,
        "API key not valid. Please pass a valid API key.",
    )
    assert [r.status for r in fake_gemini.rejected] == [400]
    fake_gemini.refuse_creates(503)
    with pytest.raises(genai_errors.ServerError) as failed:
        gemini.batches.create(model="gemini-2.5-flash", src=[inlined("a", "1")], config={"display_name": "S"})
    assert failed.value.code == 503
    gemini.batches.create(model="gemini-2.5-flash", src=[inlined("a", "1")], config={"display_name": "S"})
    assert (fake_gemini.creates, len(fake_gemini.rejected)) == (1, 1)


def test_gemini_serves_v1beta_as_older_clients_send(fake_gemini: FakeGemini) -> None:
    options = genai_types.HttpOptions(base_url=fake_gemini.origin, api_version="v1beta")
    with genai.Client(api_key=fake_gemini.api_key, http_options=options) as beta:
        assert beta.models.generate_content(model="gemini-2.5-flash", contents="hi").text == "answer to hi"
        job = beta.batches.create(
            model="gemini-2.5-flash", src=[inlined("a", "1")], config={"display_name": "S"}
        )
        assert job.name is not None
        assert beta.batches.get(name=job.name).display_name == "S"


# -- tool plans: a request with tools whose first user message holds a plan ---------------------

PLAN = 'PLAN: search{"q": "order 7"} > refund{"id": 7} > DONE'
LOOP = 'PLAN: LOOP search{"q": "again"}'
FUNCTION = {"type": "object", "properties": {}, "additionalProperties": True}
CHAT_TOOLS: Any = [
    {"type": "function", "function": {"name": name, "parameters": FUNCTION}} for name in ("search", "refund")
]


def test_a_chat_tool_plan_through_the_sdk(fake_openai: FakeOpenAI, client: openai.OpenAI) -> None:
    messages: list[Any] = [{"role": "user", "content": PLAN}]
    asked = []
    for _ in range(3):
        answer = client.chat.completions.create(model="gpt-4.1-mini", messages=messages, tools=CHAT_TOOLS)
        message = answer.choices[0].message
        if not message.tool_calls:
            break
        (call,) = message.tool_calls
        assert call.type == "function"
        asked.append((call.function.name, json.loads(call.function.arguments), call.id))
        messages += [
            message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "ok"},
        ]
    assert [(name, args) for name, args, _ in asked] == [("search", {"q": "order 7"}), ("refund", {"id": 7})]
    assert len({call_id for _, _, call_id in asked}) == 2  # each call its own id
    assert (answer.choices[0].finish_reason, message.content) == ("stop", f"answer to {PLAN}")
    # Each answer is a ChatCompletion with no field the SDK does not know; and no tools, no plan.
    for _, body in fake_openai.live_calls:
        raw = fake_batches.chat_answer(body)
        ChatCompletion.model_validate_json(json.dumps(raw), strict=True)
        for call in raw["choices"][0]["message"].get("tool_calls", []):
            assert known(call, ChatCompletionMessageToolCall) == set()
    plain = fake_batches.chat_answer({"model": "m", "messages": [{"role": "user", "content": PLAN}]})
    assert "tool_calls" not in plain["choices"][0]["message"]
    assert fake_openai.rejected == []


def test_a_responses_tool_plan_through_the_sdk(fake_openai: FakeOpenAI, client: openai.OpenAI) -> None:
    tools: Any = [{"type": "function", "name": name, "parameters": FUNCTION} for name in ("search", "refund")]
    items: list[Any] = [{"role": "user", "content": PLAN}]
    asked = []
    for _ in range(3):
        response = client.responses.create(model="gpt-4.1-mini", input=items, tools=tools)
        calls = [item for item in response.output if item.type == "function_call"]
        if not calls:
            break
        asked.append((calls[0].name, json.loads(calls[0].arguments)))
        items += [calls[0].model_dump(exclude_none=True)]
        items += [{"type": "function_call_output", "call_id": calls[0].call_id, "output": "ok"}]
    assert asked == [("search", {"q": "order 7"}), ("refund", {"id": 7})]
    assert response.output_text == f"answer to {PLAN}"
    for _, body in fake_openai.live_calls:
        Response.model_validate_json(json.dumps(fake_batches.responses_answer(body)), strict=True)
    assert fake_openai.rejected == []


def test_an_anthropic_tool_plan_through_the_sdk(
    fake_anthropic: FakeAnthropic, claude: anthropic.Anthropic
) -> None:
    tools: Any = [{"name": name, "input_schema": FUNCTION} for name in ("search", "refund")]
    messages: list[Any] = [{"role": "user", "content": LOOP}]
    for _ in range(4):  # a loop asks for its call forever
        answer = claude.messages.create(
            model="claude-haiku-4-5", max_tokens=64, messages=messages, tools=tools
        )
        (block,) = answer.content
        assert answer.stop_reason == "tool_use"
        assert block.type == "tool_use"
        assert (block.name, block.input) == ("search", {"q": "again"})
        result = {"type": "tool_result", "tool_use_id": block.id, "content": "ok"}
        messages += [
            {"role": "assistant", "content": [block.model_dump()]},
            {"role": "user", "content": [result]},
        ]
    for _, params in fake_anthropic.live_calls:
        Message.model_validate_json(json.dumps(fake_batches.message_answer(params)), strict=True)
    assert fake_anthropic.rejected == []


def test_tool_calls_stream(
    fake_openai: FakeOpenAI, client: openai.OpenAI, claude: anthropic.Anthropic
) -> None:
    chunks = list(
        client.chat.completions.create(
            model="gpt-4.1-mini", messages=[{"role": "user", "content": PLAN}], tools=CHAT_TOOLS, stream=True
        )
    )
    # As OpenAI cuts a tool call: its id and name first, then its arguments, joined by its index.
    calls = [call for chunk in chunks for call in chunk.choices[0].delta.tool_calls or ()]
    assert [(c.index, c.id, c.function and c.function.name) for c in calls] == [
        (0, calls[0].id, "search"),
        (0, None, None),
    ]
    arguments = "".join((c.function and c.function.arguments) or "" for c in calls)
    assert json.loads(arguments) == {"q": "order 7"}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    tools: Any = [{"name": "search", "input_schema": FUNCTION}]
    with claude.messages.stream(
        model="claude-haiku-4-5", max_tokens=64, messages=[{"role": "user", "content": PLAN}], tools=tools
    ) as stream:
        final = stream.get_final_message()
    (block,) = final.content
    assert block.type == "tool_use"
    assert (block.name, block.input, final.stop_reason) == ("search", {"q": "order 7"}, "tool_use")
