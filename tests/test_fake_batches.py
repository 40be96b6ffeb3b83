"""The fake OpenAI (tests/fake_batches.py) is faithful: the official ``openai`` client drives it as
it drives OpenAI, and every object it returns validates with the SDK's own models, with no field
the SDK does not know. The batch tests trust their verdicts to it, so it is tested first."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Literal

import openai
import pydantic
import pytest
from fake_batches import FakeOpenAI
from openai.types import Batch, FileDeleted, FileObject
from openai.types.chat import ChatCompletion


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
