"""Tests of the Opik-compatible test server (tests/opik_server.py).

The SDK tests drive the official ``opik`` SDK (evaluate, evaluate_resume, dataset reads, experiment reads) against
the server: that the real client works end to end is what tells us the server speaks Opik. The rest use plain
httpx requests for fault injection, header checks, gzip bodies, validation, the filter stream, dataset versions,
trace upserts and compare-read paging.
"""

from __future__ import annotations

import gzip
import json
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from opik_server import OpikTestServer, uuid7

# ----------------------------------------------------------------------------------------------------------------
# Fixtures
# ----------------------------------------------------------------------------------------------------------------


@pytest.fixture
def server() -> Iterator[OpikTestServer]:
    with OpikTestServer() as srv:
        yield srv


@pytest.fixture
def api(server: OpikTestServer) -> Iterator[httpx.Client]:
    headers = {"Authorization": server.api_key or "", "Comet-Workspace": server.workspace or ""}
    with httpx.Client(base_url=server.api_url, headers=headers, timeout=60, verify=False) as client:
        yield client


@pytest.fixture
def sdk(server: OpikTestServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> Iterator[Any]:
    """The ``opik`` module, configured (through environment variables only) to talk to ``server``.

    The SDK keeps a global client; it is reset before and ended after each test so nothing leaks between tests.
    """
    opik = pytest.importorskip("opik")
    from opik.api_objects import opik_client
    from opik.evaluation.engine import exception_analyzer

    for name, value in server.sdk_env().items():
        monkeypatch.setenv(name, value)
    config = tmp_path / "opik.config"
    config.write_text("[opik]\n")
    monkeypatch.setenv("OPIK_CONFIG_PATH", str(config))  # ignore any ~/.opik.config
    monkeypatch.setenv("HOME", str(tmp_path))  # resume checkpoints go to ~/.opik/resume
    # A failing task makes the engine import openai + litellm (~2 s) to ask whether it was an LLM rate limit.
    monkeypatch.setattr(
        exception_analyzer,
        "is_llm_provider_rate_limit_error",
        lambda exception: getattr(exception, "status_code", None) == 429,
    )
    opik_client.reset_global_client()
    try:
        yield opik
    finally:
        opik_client.reset_global_client()  # flushes, then releases the client's connection resources


def _client(sdk: Any) -> Any:
    """The SDK's global client: the one evaluate() uses and the ``sdk`` fixture ends after the test."""
    return sdk.api_objects.opik_client.get_global_client()


def _items_by_input(server: OpikTestServer, dataset_name: str) -> dict[str, str]:
    dataset = server.dataset_by_name(dataset_name)
    assert dataset is not None
    return {item["data"]["input"]: item_id for item_id, item in dataset["items"].items()}


# ----------------------------------------------------------------------------------------------------------------
# The official SDK end to end
# ----------------------------------------------------------------------------------------------------------------


def test_sdk_evaluate_partial_then_resume_completes_only_the_missing_item(
    server: OpikTestServer, sdk: Any
) -> None:
    from opik.evaluation.metrics import Equals
    from opik.evaluation.metrics.score_result import ScoreResult

    client = _client(sdk)
    dataset = client.get_or_create_dataset("qa")
    dataset.insert([{"input": f"q{i}", "expected": f"a{i}"} for i in range(3)])
    item_ids = _items_by_input(server, "qa")

    calls: list[str] = []
    broken = {"q1"}

    def task(item: dict[str, Any]) -> dict[str, Any]:
        calls.append(item["input"])
        if item["input"] in broken:
            raise RuntimeError(f"simulated crash on {item['input']}")
        return {"output": item["expected"]}

    with pytest.raises(RuntimeError, match="simulated crash on q1"):
        sdk.evaluate(
            dataset,
            task,
            scoring_metrics=[Equals()],
            scoring_key_mapping={"reference": "expected"},
            experiment_name="partial",
            task_threads=1,
            verbose=0,
        )
    # evaluate() raises before its own flush, so the last trial may still be queued in the SDK
    sdk.flush_tracker()
    assert sorted(calls) == ["q0", "q1", "q2"]

    (experiment,) = server.experiments.values()
    assert experiment["name"] == "partial"
    assert experiment["dataset_name"] == "qa"
    assert experiment["status"] == "running"  # never finished
    assert json.loads(experiment["metadata"]["_opik_resume"])["resumable"] is True
    dataset = server.dataset_by_name("qa")
    assert dataset is not None
    assert experiment["dataset_version_id"] == dataset["versions"][-1]["id"]

    items = server.experiment_items
    assert len(items) == 3
    traces = server.traces
    by_item = {item["dataset_item_id"]: traces[item["trace_id"]] for item in items}
    assert by_item[item_ids["q0"]]["output"] == {"output": "a0"}
    assert by_item[item_ids["q2"]]["output"] == {"output": "a2"}
    assert by_item[item_ids["q1"]]["output"] is None  # the SDK's "incomplete" marker
    assert by_item[item_ids["q1"]]["error_info"]["exception_type"] == "RuntimeError"
    assert all(trace["name"] == "evaluation_task" for trace in by_item.values())
    scores = server.feedback_scores
    assert {(s["id"], s["name"], s["value"]) for s in scores} == {
        (by_item[item_ids["q0"]]["id"], "equals_metric", 1.0),
        (by_item[item_ids["q2"]]["id"], "equals_metric", 1.0),
    }

    # resume: only the missing item runs
    calls.clear()
    broken.clear()
    result = sdk.evaluate_resume(
        experiment["id"],
        task,
        scoring_metrics=[Equals()],
        scoring_key_mapping={"reference": "expected"},
        experiment_scoring_functions=[lambda results: ScoreResult(name="n_results", value=len(results))],
        task_threads=1,
        verbose=0,
    )
    assert calls == ["q1"]
    assert len(result.test_results) == 3  # 2 reconstructed from the server + 1 new
    assert sorted(r.test_case.task_output["output"] for r in result.test_results) == ["a0", "a1", "a2"]

    items = server.experiment_items
    assert len(items) == 4  # the failed trial's item stays
    traces = server.traces
    q1_outputs = [traces[i["trace_id"]]["output"] for i in items if i["dataset_item_id"] == item_ids["q1"]]
    assert sorted(q1_outputs, key=str) == [None, {"output": "a1"}]
    assert len(server.feedback_scores) == 3
    assert server.experiments[experiment["id"]]["status"] == "completed"  # finish was called
    assert server.experiments[experiment["id"]]["experiment_scores"] == [{"name": "n_results", "value": 3.0}]
    assert [e.id for e in client.get_experiments_by_name("PART")] == [experiment["id"]]  # the name stream

    # nothing left to do: a second resume runs no task
    calls.clear()
    again = sdk.evaluate_resume(
        experiment["id"],
        task,
        scoring_metrics=[Equals()],
        scoring_key_mapping={"reference": "expected"},
        task_threads=1,
        verbose=0,
    )
    assert calls == []
    assert len(again.test_results) == 3

    # the SDK talked to the real API shape: gzip bodies, the raw key, the workspace
    assert any(r.headers.get("content-encoding") == "gzip" for r in server.requests)
    assert {r.headers.get("authorization") for r in server.requests if r.path.startswith("v1/")} == {
        "test-api-key"
    }
    assert server.find_requests("GET", "/items/experiments/items")  # the compare read
    assert server.find_requests("POST", "/versions/retrieve")  # resume pins the version by name
    assert server.invalid_requests == []
    assert server.unhandled_requests == []


def test_sdk_resume_of_unknown_experiment_is_experiment_not_found(server: OpikTestServer, sdk: Any) -> None:
    from opik.exceptions import ExperimentNotFound

    with pytest.raises(ExperimentNotFound):
        sdk.evaluate_resume(uuid7(), lambda item: {"output": ""}, verbose=0)
    assert [r.status for r in server.find_requests("GET", "v1/private/experiments/")] == [404]
    assert server.invalid_requests == []


def test_sdk_dataset_filters_versions_and_rate_limit_retry(server: OpikTestServer, sdk: Any) -> None:
    client = _client(sdk)
    dataset = client.create_dataset("geo")
    dataset.insert([{"input": "Paris", "category": "GEO"}, {"input": "2+2", "category": "math"}])
    dataset.insert([{"input": "Rome", "category": "geo"}])

    found = dataset.get_items(filter_string='data.category = "geo"')
    assert sorted(item["input"] for item in found) == ["Paris", "Rome"]  # case-insensitive, server side
    # the SDK reads a dataset through the paged endpoint, with the filter as JSON in the query
    filtered = [
        r for r in server.find_requests("GET", f"datasets/{dataset.id}/items") if r.query.get("filters")
    ]
    assert json.loads(filtered[-1].query["filters"]) == [
        {"field": "data", "key": "category", "type": "map", "operator": "=", "value": "geo"}
    ]

    assert dataset.get_version_info().version_name == "v2"
    v1 = dataset.get_version_view("v1")
    assert sorted(item["input"] for item in v1.get_items()) == ["2+2", "Paris"]

    # the SDK honours the server's Retry-After
    server.rate_limit_next(2, retry_after=0.1, path_contains="datasets/retrieve")
    assert client.get_dataset("geo").id == dataset.id
    assert [r.status for r in server.find_requests("POST", "datasets/retrieve")][-3:] == [429, 429, 200]
    assert server.invalid_requests == []
    assert server.unhandled_requests == []


def test_sdk_reads_more_than_2000_experiment_items_through_compare_paging(
    server: OpikTestServer, sdk: Any, api: httpx.Client
) -> None:
    dataset_id = server.create_dataset("big", [{"n": i} for i in range(2500)])
    dataset_item_ids = sorted(server.datasets[dataset_id]["items"])
    experiment_id = uuid7()
    assert (
        api.post(
            "v1/private/experiments", json={"id": experiment_id, "name": "big-run", "dataset_name": "big"}
        ).status_code
        == 201
    )
    for start in range(0, 2500, 1000):
        batch = [
            {"id": uuid7(), "experiment_id": experiment_id, "dataset_item_id": item_id, "trace_id": uuid7()}
            for item_id in dataset_item_ids[start : start + 1000]
        ]
        assert api.post("v1/private/experiments/items", json={"experiment_items": batch}).status_code == 204

    page2 = api.get(
        f"v1/private/datasets/{dataset_id}/items/experiments/items",
        params={"experiment_ids": json.dumps([experiment_id]), "page": 2, "size": 2000},
    ).json()
    assert page2["total"] == 2500
    assert len(page2["content"]) == 500

    items = _client(sdk).get_experiment_by_id(experiment_id).get_items()
    assert len(items) == 2500
    assert {item.dataset_item_id for item in items} == set(dataset_item_ids)
    assert server.invalid_requests == []


# ----------------------------------------------------------------------------------------------------------------
# Fault injection
# ----------------------------------------------------------------------------------------------------------------


def test_rate_limit_answers_429_with_retry_after(server: OpikTestServer, api: httpx.Client) -> None:
    server.rate_limit_next(1, retry_after=2)
    limited = api.get("v1/private/auth/workspace")
    assert limited.status_code == 429
    assert limited.headers["Retry-After"] == "2"
    assert limited.headers["RateLimit-Reset"] == "2"
    ok = api.get("v1/private/auth/workspace")
    assert ok.status_code == 200
    assert ok.json() == {"workspace_name": "test-workspace"}
    assert [r.fault for r in server.requests] == ["rate_limit", None]


def test_fail_next_only_hits_matching_paths(server: OpikTestServer, api: httpx.Client) -> None:
    server.fail_next(2, status=503, path_contains="datasets/retrieve")
    assert api.get("is-alive/ping").status_code == 200
    statuses = [
        api.post("v1/private/datasets/retrieve", json={"dataset_name": "x"}).status_code for _ in range(3)
    ]
    assert statuses == [503, 503, 404]
    server.fail_next(1, status=500)
    assert api.get("is-alive/ping").status_code == 500
    assert api.get("is-alive/ping").status_code == 200


def test_drop_next_closes_the_connection_without_an_answer(server: OpikTestServer, api: httpx.Client) -> None:
    server.drop_next(1)
    with pytest.raises(httpx.RemoteProtocolError):
        api.post(
            "v1/private/traces/batch",
            json={"traces": [{"id": uuid7(), "start_time": "2024-01-01T00:00:00Z"}]},
        )
    (dropped,) = server.requests
    assert dropped.status is None
    assert dropped.fault == "drop"
    assert dropped.body["traces"][0]["start_time"] == "2024-01-01T00:00:00Z"  # read, never handled
    assert server.traces == {}
    assert api.get("is-alive/ping").status_code == 200


def test_hang_reads_requests_and_never_answers_until_the_faults_are_cleared(
    server: OpikTestServer, api: httpx.Client
) -> None:
    server.hang(path_contains="is-alive/ver")
    assert api.get("is-alive/ping").status_code == 200  # other paths answer
    with pytest.raises(httpx.ReadTimeout):
        api.get("is-alive/ver", timeout=0.3)
    assert [r.fault for r in server.requests if r.path == "is-alive/ver"] == ["hang"]
    server.clear_faults()
    assert api.get("is-alive/ver").status_code == 200


def test_answer_next_sends_exactly_the_given_answer(server: OpikTestServer, api: httpx.Client) -> None:
    server.answer_next(1, 200, b"<html>proxy</html>", {"Content-Type": "text/html"}, path_contains="ping")
    server.answer_next(1, 200, b"\x1f\x8bgarbage", {"Content-Encoding": "gzip"}, path_contains="ping")
    page = api.get("is-alive/ping")
    assert (page.status_code, page.headers["Content-Type"], page.text) == (
        200,
        "text/html",
        "<html>proxy</html>",
    )
    with pytest.raises(httpx.DecodingError):
        api.get("is-alive/ping")
    assert api.get("is-alive/ping").json() == {"healthy": True}


def test_delay_slows_matching_answers(
    server: OpikTestServer, api: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    paused: list[float] = []  # the server's pauses, seen without a clock
    monkeypatch.setattr(server, "_pause", paused.append)
    server.delay(0.3, path_contains="is-alive/ver")
    assert api.get("is-alive/ver").status_code == 200
    assert paused == [0.3]
    assert api.get("is-alive/ping").status_code == 200
    assert paused == [0.3]  # another path is not delayed
    server.delay(0, path_contains="is-alive/ver")
    assert api.get("is-alive/ver").status_code == 200
    assert paused == [0.3]


def test_go_down_refuses_connections_and_come_back_keeps_port_and_data(server: OpikTestServer) -> None:
    server.create_dataset("kept", [{"x": 1}])
    port = server.port
    headers = {"Authorization": "test-api-key", "Comet-Workspace": "test-workspace"}
    with httpx.Client(base_url=server.api_url, headers=headers, timeout=2) as client:
        assert client.get("is-alive/ping").status_code == 200  # a pooled keep-alive connection
        server.go_down()
        assert not server.is_up
        with pytest.raises(httpx.TransportError):  # the open connection was cut
            client.get("is-alive/ping")
        with pytest.raises(httpx.ConnectError):
            client.get("is-alive/ping")
        with pytest.raises(httpx.ConnectError):
            httpx.get(server.api_url + "is-alive/ping", timeout=2)
        server.come_back()
        assert server.port == port
        assert (
            client.post("v1/private/datasets/retrieve", json={"dataset_name": "kept"}).json()["name"]
            == "kept"
        )


def test_fault_methods_are_safe_to_call_while_requests_are_in_flight(server: OpikTestServer) -> None:
    errors: list[BaseException] = []

    def hammer() -> None:
        try:
            with httpx.Client(base_url=server.api_url, timeout=5) as client:
                for _ in range(40):
                    client.get("is-alive/ping")
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=hammer) for _ in range(4)]
    for thread in threads:
        thread.start()
    for _ in range(20):
        server.fail_next(1, status=503)
        server.delay(0.001)
        server.clear_faults()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(server.find_requests("GET", "is-alive/ping")) == 160


# ----------------------------------------------------------------------------------------------------------------
# Headers, gzip, validation
# ----------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"Comet-Workspace": "test-workspace"}, 401),
        ({"Authorization": "wrong", "Comet-Workspace": "test-workspace"}, 401),
        ({"Authorization": "Bearer test-api-key", "Comet-Workspace": "test-workspace"}, 401),
        ({"Authorization": "test-api-key"}, 403),
        ({"Authorization": "test-api-key", "Comet-Workspace": "other"}, 403),
        ({"Authorization": "test-api-key", "Comet-Workspace": "test-workspace"}, 200),
    ],
)
def test_auth_headers(server: OpikTestServer, headers: dict[str, str], status: int) -> None:
    response = httpx.get(server.api_url + "v1/private/auth/workspace", headers=headers)
    assert response.status_code == status
    assert httpx.get(server.url + "is-alive/ping").status_code == 200  # health needs no credentials
    assert server.invalid_requests == []


def test_answers_with_and_without_the_api_prefix(server: OpikTestServer, api: httpx.Client) -> None:
    headers = dict(api.headers)
    assert httpx.get(server.url + "v1/private/auth/workspace", headers=headers).status_code == 200
    assert httpx.get(server.api_url + "v1/private/auth/workspace", headers=headers).status_code == 200
    assert api.get("v1/private/no-such-endpoint").status_code == 404
    assert [r.path for r in server.unhandled_requests] == ["v1/private/no-such-endpoint"]


def test_gzip_request_bodies(server: OpikTestServer, api: httpx.Client) -> None:
    trace_id = uuid7()
    body = json.dumps(
        {"traces": [{"id": trace_id, "start_time": "2024-01-01T00:00:00Z", "output": {"a": 1}}]}
    )
    response = api.post(
        "v1/private/traces/batch",
        content=gzip.compress(body.encode()),
        headers={"Content-Encoding": "gzip", "Content-Type": "application/json"},
    )
    assert response.status_code == 204
    assert server.traces[trace_id]["output"] == {"a": 1}
    assert server.requests[-1].body["traces"][0]["id"] == trace_id

    broken = api.post(
        "v1/private/traces/batch",
        content=b"not gzip",
        headers={"Content-Encoding": "gzip", "Content-Type": "application/json"},
    )
    assert broken.status_code == 400
    assert [entry["status"] for entry in server.invalid_requests] == [400]


@pytest.mark.parametrize(
    ("path", "body", "message"),
    [
        ("v1/private/traces/batch", {"traces": [{"id": "ID", "name": "no start"}]}, "start_time"),
        (
            "v1/private/traces/batch",
            {"traces": [{"id": "ID", "start_time": "2024-01-01T00:00:00Z", "outptu": 1}]},
            "outptu",
        ),
        ("v1/private/traces/batch", {"trace": []}, "traces"),
        (
            "v1/private/traces/batch",
            {"traces": [{"id": str(uuid.uuid4()), "start_time": "2024-01-01T00:00:00Z"}]},
            "Trace id must be a version 7 UUID",
        ),
        ("v1/private/experiments/items", {"experiment_items": [{"experiment_id": "ID"}]}, "dataset_item_id"),
        ("v1/private/datasets/items/stream", {"dataset_name": "x", "steam_limit": "many"}, "steam_limit"),
    ],
)
def test_invalid_bodies_get_400_naming_the_problem(
    server: OpikTestServer, api: httpx.Client, path: str, body: dict[str, Any], message: str
) -> None:
    body = json.loads(json.dumps(body).replace('"ID"', json.dumps(uuid7())))
    response = api.post(path, json=body)
    assert response.status_code == 400
    assert message in response.json()["errors"][0]
    (invalid,) = server.invalid_requests
    assert invalid["path"] == path
    assert message in invalid["error"]
    assert invalid["body"] == body


def test_feedback_score_source_must_be_a_known_value(server: OpikTestServer, api: httpx.Client) -> None:
    score = {"id": uuid7(), "name": "m", "value": 1.0, "source": "pytest"}
    response = api.put("v1/private/traces/feedback-scores", json={"scores": [score]})
    assert response.status_code == 400
    assert (
        "scores.0.source" in response.json()["errors"][0]
        or "scores[0].source" in response.json()["errors"][0]
    )
    assert (
        api.put(
            "v1/private/traces/feedback-scores", json={"scores": [{**score, "source": "sdk"}]}
        ).status_code
        == 204
    )
    assert server.feedback_scores[0]["value"] == 1.0


# ----------------------------------------------------------------------------------------------------------------
# Traces: the backend's upsert rule
# ----------------------------------------------------------------------------------------------------------------


def _trace(trace_id: str, output: Any, last_updated_at: str | None) -> dict[str, Any]:
    trace = {"id": trace_id, "start_time": "2024-01-01T00:00:00Z", "name": "t", "output": output}
    if last_updated_at is not None:
        trace["last_updated_at"] = last_updated_at
    return trace


def test_trace_rewrite_keeps_the_newest_last_updated_at(server: OpikTestServer, api: httpx.Client) -> None:
    trace_id = uuid7()

    def write(*traces: dict[str, Any]) -> None:
        assert api.post("v1/private/traces/batch", json={"traces": list(traces)}).status_code == 204

    write(_trace(trace_id, {"v": 2}, "2024-01-01T00:00:02.000000Z"))
    write(_trace(trace_id, {"v": 1}, "2024-01-01T00:00:01.000000Z"))  # older: ignored
    assert server.traces[trace_id]["output"] == {"v": 2}
    write(_trace(trace_id, None, "2024-01-01T00:00:03.000000Z"))  # newer: replaces the whole row
    assert server.traces[trace_id]["output"] is None
    write(_trace(trace_id, {"v": 4}, "2024-01-01T00:00:03.000000Z"))  # tie: the later write wins
    assert server.traces[trace_id]["output"] == {"v": 4}
    # within one batch, the newest of the same id wins regardless of order
    write(
        _trace(trace_id, {"v": 6}, "2024-01-01T00:00:06Z"), _trace(trace_id, {"v": 5}, "2024-01-01T00:00:05Z")
    )
    assert server.traces[trace_id]["output"] == {"v": 6}
    # no last_updated_at: the server's clock, which is newer than 2024
    write(_trace(trace_id, {"v": 7}, None))
    assert server.traces[trace_id]["output"] == {"v": 7}

    public = api.get(f"v1/private/traces/{trace_id}").json()
    assert public["output"] == {"v": 7}
    assert public["id"] == trace_id
    assert api.get(f"v1/private/traces/{uuid7()}").status_code == 404


def test_trace_patch_updates_fields(server: OpikTestServer, api: httpx.Client) -> None:
    trace_id = uuid7()
    api.post("v1/private/traces/batch", json={"traces": [_trace(trace_id, None, None)]})
    assert (
        api.patch(
            f"v1/private/traces/{trace_id}", json={"output": {"late": True}, "tags_to_add": ["x"]}
        ).status_code
        == 204
    )
    trace = server.traces[trace_id]
    assert trace["output"] == {"late": True}
    assert trace["tags"] == ["x"]
    assert trace["name"] == "t"


# ----------------------------------------------------------------------------------------------------------------
# Datasets: versions and the filter stream
# ----------------------------------------------------------------------------------------------------------------


def _stream(api: httpx.Client, **body: Any) -> list[dict[str, Any]]:
    response = api.post("v1/private/datasets/items/stream", json=body)
    assert response.status_code == 200, response.text
    return [json.loads(line) for line in response.text.splitlines() if line]


def test_dataset_versions(server: OpikTestServer, api: httpx.Client) -> None:
    def put(batch_group_id: str | None, *inputs: str) -> None:
        items = [{"id": uuid7(), "source": "sdk", "data": {"input": text}} for text in inputs]
        body = {"dataset_name": "ds", "items": items, "batch_group_id": batch_group_id}
        assert api.put("v1/private/datasets/items", json=body).status_code == 204

    assert api.post("v1/private/datasets", json={"name": "ds"}).status_code == 201
    assert api.post("v1/private/datasets", json={"name": "ds"}).status_code == 409
    server.clear_requests()
    first = uuid7()
    put(first, "a")
    put(first, "b")  # same batch group: same version
    put(uuid7(), "c")  # a new insert: a new version
    dataset = api.post("v1/private/datasets/retrieve", json={"dataset_name": "ds"}).json()
    assert dataset["dataset_items_count"] == 3

    versions = api.get(f"v1/private/datasets/{dataset['id']}/versions", params={"page": 1, "size": 10}).json()
    assert [(v["version_name"], v["items_total"], v["is_latest"]) for v in versions["content"]] == [
        ("v2", 3, True),
        ("v1", 2, False),
    ]
    latest_only = api.get(
        f"v1/private/datasets/{dataset['id']}/versions", params={"page": 1, "size": 1}
    ).json()
    assert latest_only["total"] == 2
    assert latest_only["content"][0]["version_name"] == "v2"

    v1 = api.post(
        f"v1/private/datasets/{dataset['id']}/versions/retrieve", json={"version_name": "v1"}
    ).json()
    assert v1["version_hash"] != versions["content"][0]["version_hash"]
    assert sorted(
        i["data"]["input"] for i in _stream(api, dataset_name="ds", dataset_version=v1["version_hash"])
    ) == ["a", "b"]
    assert sorted(i["data"]["input"] for i in _stream(api, dataset_name="ds")) == ["a", "b", "c"]
    missing = api.post(f"v1/private/datasets/{dataset['id']}/versions/retrieve", json={"version_name": "v9"})
    assert missing.status_code == 404
    assert server.invalid_requests == []


def test_a_dataset_create_that_lost_a_race_is_not_an_invalid_request(
    server: OpikTestServer, api: httpx.Client
) -> None:
    def retrieve() -> int:
        return api.post("v1/private/datasets/retrieve", json={"dataset_name": "ds"}).status_code

    def create() -> int:
        return api.post("v1/private/datasets", json={"name": "ds"}).status_code

    # Two pytest-xdist workers look the dataset up, both are told it does not exist, both create it.
    assert [retrieve(), retrieve()] == [404, 404]
    assert [create(), create()] == [201, 409]
    assert server.invalid_requests == []
    # A client told it exists, or that never asked, has no reason to create it: that 409 is invalid.
    assert [retrieve(), create()] == [200, 409]
    assert [(entry["path"], entry["status"]) for entry in server.invalid_requests] == [
        ("v1/private/datasets", 409)
    ]


@pytest.fixture
def filter_items(server: OpikTestServer) -> dict[str, str]:
    ids = {name: uuid7() for name in ("A", "B", "C")}  # created in this order: the stream gives C, B, A
    server.create_dataset(
        "f",
        [
            {"id": ids["A"], "data": {"q": "Hello World", "n": 5, "cat": "GEO"}, "tags": ["t1"]},
            {"id": ids["B"], "data": {"q": "hello there", "n": "5", "cat": "geo"}, "tags": []},
            {
                "id": ids["C"],
                "data": {"q": "Bye", "n": 6, "cat": "math", "quote": 'say "hi"'},
                "tags": ["t2", "t1x"],
            },
        ],
    )
    return ids


@pytest.mark.parametrize(
    ("expressions", "expected"),
    [
        ([("data", "cat", "=", "geo")], "BA"),
        ([("data", "n", "=", "5")], "BA"),  # the number 5 and the string "5"
        ([("data", "n", "!=", "5")], "C"),
        ([("data", "q", "contains", "WORLD")], "A"),
        ([("data", "q", "not_contains", "hello")], "C"),
        ([("data", "q", "starts_with", "HELLO")], "BA"),
        ([("data", "q", "ends_with", "There")], "B"),
        ([("data", "quote", "=", "say hi")], "C"),  # escaped quotes removed, as the backend does
        ([("data", "missing", "=", "x")], ""),
        ([("tags", "", "=", "t1")], "A"),  # exact membership
        ([("tags", "", "contains", "t1")], "CA"),
        ([("tags", "", "is_empty", "")], "B"),
        ([("tags", "", "is_not_empty", "")], "CA"),
        ([("data", "cat", "=", "geo"), ("tags", "", "is_empty", "")], "B"),
    ],
)
def test_filter_stream(
    api: httpx.Client,
    filter_items: dict[str, str],
    expressions: list[tuple[str, str, str, str]],
    expected: str,
) -> None:
    filters = [
        {"field": f, "key": k, "type": "map" if f == "data" else "list", "operator": o, "value": v}
        for f, k, o, v in expressions
    ]
    names = {item_id: name for name, item_id in filter_items.items()}
    found = _stream(api, dataset_name="f", filters=json.dumps(filters))
    assert "".join(names[item["id"]] for item in found) == expected


def test_filter_stream_by_id_paging_and_errors(
    server: OpikTestServer, api: httpx.Client, filter_items: dict[str, str]
) -> None:
    by_id = [
        {"field": "id", "key": "", "type": "string", "operator": "=", "value": filter_items["B"].upper()}
    ]
    assert [i["id"] for i in _stream(api, dataset_name="f", filters=json.dumps(by_id))] == [filter_items["B"]]

    first = _stream(api, dataset_name="f", steam_limit=2)
    assert [i["id"] for i in first] == [filter_items["C"], filter_items["B"]]
    rest = _stream(api, dataset_name="f", steam_limit=2, last_retrieved_id=first[-1]["id"])
    assert [i["id"] for i in rest] == [filter_items["A"]]

    bad = [{"field": "nope", "key": "", "operator": "=", "value": "x"}]
    response = api.post(
        "v1/private/datasets/items/stream", json={"dataset_name": "f", "filters": json.dumps(bad)}
    )
    assert response.status_code == 400
    assert "nope" in response.json()["errors"][0]
    assert api.post("v1/private/datasets/items/stream", json={"dataset_name": "zzz"}).status_code == 404

    dataset = server.dataset_by_name("f")
    assert dataset is not None
    page = api.get(f"v1/private/datasets/{dataset['id']}/items", params={"page": 2, "size": 2}).json()
    assert page["total"] == 3
    assert [i["id"] for i in page["content"]] == [filter_items["A"]]


# ----------------------------------------------------------------------------------------------------------------
# Experiments
# ----------------------------------------------------------------------------------------------------------------


def test_experiments_lifecycle(server: OpikTestServer, api: httpx.Client) -> None:
    dataset_id = server.create_dataset("d", [{"x": 1}])
    (item_id,) = server.datasets[dataset_id]["items"]
    ids = [uuid7(), uuid7()]
    for experiment_id, name in zip(ids, ["Run-Alpha", "run-beta"], strict=True):
        body = {"id": experiment_id, "name": name, "dataset_name": "d", "metadata": {"k": name}}
        assert api.post("v1/private/experiments", json=body).status_code == 201
    # As the backend: creating an existing experiment again succeeds and changes nothing.
    assert api.post("v1/private/experiments", json={"id": ids[0], "dataset_name": "d"}).status_code == 201
    assert server.experiments[ids[0]]["name"] == "Run-Alpha"
    assert api.get(f"v1/private/experiments/{uuid7()}").status_code == 404

    streamed = api.post("v1/private/experiments/stream", json={"name": "RUN", "limit": 10}).text.splitlines()
    assert [json.loads(line)["id"] for line in streamed] == ids[
        ::-1
    ]  # contains, case-insensitive, newest first
    listed = api.get("v1/private/experiments", params={"name": "alpha", "page": 1, "size": 10}).json()
    assert listed["total"] == 1
    assert listed["content"][0]["metadata"] == {"k": "Run-Alpha"}

    trace_id = uuid7()
    api.post("v1/private/traces/batch", json={"traces": [_trace(trace_id, {"o": 1}, None)]})
    api.put(
        "v1/private/traces/feedback-scores",
        json={"scores": [{"id": trace_id, "name": "acc", "value": 0.5, "source": "sdk"}]},
    )
    item = {"id": uuid7(), "experiment_id": ids[0], "dataset_item_id": item_id, "trace_id": trace_id}
    assert api.post("v1/private/experiments/items", json={"experiment_items": [item]}).status_code == 204
    unknown = {**item, "id": uuid7(), "experiment_id": uuid7()}
    assert api.post("v1/private/experiments/items", json={"experiment_items": [unknown]}).status_code == 409

    patch = {"experiment_scores": [{"name": "mean", "value": 0.5}], "tags_to_add": ["x"]}
    assert api.patch(f"v1/private/experiments/{ids[0]}", json=patch).status_code == 204
    assert api.post("v1/private/experiments/finish", json={"ids": [ids[0]]}).status_code == 204
    public = api.get(f"v1/private/experiments/{ids[0]}").json()
    assert public["status"] == "completed"
    assert public["tags"] == ["x"]
    assert public["experiment_scores"] == [{"name": "mean", "value": 0.5}]
    assert public["feedback_scores"] == [{"name": "acc", "value": 0.5}]
    assert public["trace_count"] == 1
    assert public["dataset_version_id"] == server.datasets[dataset_id]["versions"][0]["id"]

    compare = api.get(
        f"v1/private/datasets/{dataset_id}/items/experiments/items",
        params={"experiment_ids": json.dumps([ids[0]]), "page": 1, "size": 10},
    ).json()
    (row,) = compare["content"]
    assert row["id"] == item_id
    assert row["data"] == {"x": 1}
    (view,) = row["experiment_items"]
    assert view["output"] == {"o": 1}
    assert view["feedback_scores"][0]["value"] == 0.5
    assert [(entry["path"], entry["status"]) for entry in server.invalid_requests] == [
        ("v1/private/experiments/items", 409)
    ]


def test_responses_parse_as_the_sdk_public_models(server: OpikTestServer, api: httpx.Client) -> None:
    types = pytest.importorskip("opik.rest_api.types")
    dataset_id = server.create_dataset("m", [{"x": 1}])
    experiment_id = uuid7()
    api.post("v1/private/experiments", json={"id": experiment_id, "dataset_name": "m"})
    types.DatasetPublic.model_validate(api.get(f"v1/private/datasets/{dataset_id}").json())
    types.DatasetVersionPagePublic.model_validate(
        api.get(f"v1/private/datasets/{dataset_id}/versions").json()
    )
    types.DatasetItemPagePublic.model_validate(api.get(f"v1/private/datasets/{dataset_id}/items").json())
    types.ExperimentPublic.model_validate(api.get(f"v1/private/experiments/{experiment_id}").json())
    types.ExperimentPagePublic.model_validate(api.get("v1/private/experiments").json())
    for line in _stream(api, dataset_name="m"):
        types.DatasetItem.model_validate(line)


def test_uuid7_is_time_ordered_and_version_7() -> None:
    ids = [uuid7() for _ in range(2000)]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
    assert {uuid.UUID(value).version for value in ids} == {7}


def test_uuid7_window_when_enabled(api: httpx.Client, server: OpikTestServer) -> None:
    server.uuid7_window = 24 * 3600
    old = uuid7(at=time.time() - 3 * 24 * 3600)
    response = api.post("v1/private/traces/batch", json={"traces": [_trace(old, None, None)]})
    assert response.status_code == 400
    assert "too_old" in response.json()["errors"][0]
    assert (
        api.post("v1/private/traces/batch", json={"traces": [_trace(uuid7(), None, None)]}).status_code == 204
    )


def test_every_request_model_is_built_from_the_installed_sdk() -> None:
    pytest.importorskip("opik")
    assert OpikTestServer.validation_problems() == {}
