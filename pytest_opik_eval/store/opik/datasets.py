"""Datasets on the Opik server: an experiment's items made to match a server dataset, and the
items of a dataset that lives on the server (``dataset="opik:NAME"``).

An experiment pins the dataset version it ran on; what this plugin calls an item (its ``id``)
and what the server calls it are kept together in :class:`RemoteExperiment`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from pytest_opik_eval.exceptions import StoreError
from pytest_opik_eval.ids import canonical_json, uuid7_for, uuid7_from_name
from pytest_opik_eval.store.opik.client import OpikClient, OpikHTTPError
from pytest_opik_eval.store.opik.config import DATASET_PREFIX, OpikSettings
from pytest_opik_eval.store.records import ExperimentRecord

PAGE = 1000  # rows the server is asked for at a time


class RemoteExperiment(BaseModel):
    """The server side of an experiment, kept in its metadata and in the spool."""

    model_config = ConfigDict(extra="ignore")

    dataset_name: str
    dataset_id: str
    version_id: str | None = None
    version_name: str | None = None
    version_hash: str | None = None
    item_ids: dict[str, str]  # this plugin's item id -> the server's dataset item id

    @classmethod
    def at(
        cls, name: str, dataset_id: str, version: Mapping[str, Any], item_ids: dict[str, str]
    ) -> RemoteExperiment:
        """The dataset ``name`` at ``version`` (a version as the server describes it, or {})."""
        return cls(
            dataset_name=name,
            dataset_id=dataset_id,
            version_id=version.get("id"),
            version_name=version.get("version_name"),
            version_hash=version.get("version_hash"),
            item_ids=item_ids,
        )


def dataset_name(experiment: ExperimentRecord) -> str:
    """The server dataset of an experiment: ``opik:NAME``'s name, the marker's ``dataset_name``,
    a file's stem, or the test's name."""
    source = experiment.dataset.source
    if experiment.dataset.name:
        return experiment.dataset.name
    if source.startswith(DATASET_PREFIX):
        return source[len(DATASET_PREFIX) :]
    return Path(source).stem if experiment.dataset.path else experiment.name


class ServerDatasets:
    """The datasets of the server and workspace of ``settings``, through ``client``."""

    def __init__(self, client: OpikClient, settings: OpikSettings) -> None:
        self.client = client
        self.settings = settings

    def for_experiment(self, experiment: ExperimentRecord) -> tuple[RemoteExperiment, int]:
        """The server dataset of ``experiment``, holding its items (uploaded when it is not a
        server dataset already), and how many items the dataset holds."""
        if experiment.dataset.source.startswith(DATASET_PREFIX):
            return self.on_server(dataset_name(experiment), experiment.items)
        return self.sync(dataset_name(experiment), experiment.items)

    def sync(self, name: str, items: Sequence[Mapping[str, Any]]) -> tuple[RemoteExperiment, int]:
        """Make the server dataset hold these items (uploading only those it lacks, matched by
        content); return the mapping from this plugin's item ids to the server's, and how many
        items the dataset holds now."""
        dataset_id = self.dataset_id(name)
        existing = {canonical_json(data): item_id for item_id, data in self.stream_items(name)}
        missing = []
        item_ids = {}
        for item in items:
            key = canonical_json(item)
            server_id = existing.get(key)
            if server_id is None:
                # Derived from the content: machines uploading the same item agree on its id, so a
                # race between CI shards upserts one item instead of adding two.
                server_id = existing[key] = uuid7_for(uuid7_from_name(f"dataset:{name}"), key)
                missing.append({"id": server_id, "data": dict(item), "source": "sdk"})
            item_ids[str(item["id"])] = server_id
        for start in range(0, len(missing), PAGE):
            self.client.request(
                "PUT", "datasets/items", body={"dataset_name": name, "items": missing[start : start + PAGE]}
            )
        version = self.latest_version(dataset_id) or {}
        remote = RemoteExperiment.at(name, dataset_id, version, item_ids)
        return remote, len(existing)

    def on_server(self, name: str, items: Sequence[Mapping[str, Any]]) -> tuple[RemoteExperiment, int]:
        """A dataset that lives on the server: its items keep their server ids."""
        dataset_id = self.dataset_id(name, create=False)
        version = self.latest_version(dataset_id) or {}
        size = sum(1 for _ in self.stream_items(name))
        remote = RemoteExperiment.at(
            name, dataset_id, version, {str(item["id"]): str(item["id"]) for item in items}
        )
        return remote, size

    def load(self, name: str, filters: list[dict[str, str]] | None) -> list[dict[str, Any]]:
        """The items of server dataset ``name`` (the filter applied by the server), each as the
        Opik SDK hands it to a task: its data with the server's ``id``."""
        self.dataset_id(name, create=False)
        return [{**data, "id": item_id} for item_id, data in self.stream_items(name, filters=filters)]

    def dataset_id(self, name: str, *, create: bool = True) -> str:
        try:
            return str(self.client.json("POST", "datasets/retrieve", body={"dataset_name": name})["id"])
        except OpikHTTPError as error:
            if error.status != 404:
                raise
            if not create:
                raise StoreError(
                    f"the Opik server {self.settings.url} (workspace {self.settings.workspace}) has no "
                    f"dataset named {name!r}; create it in the Opik UI or with the Opik SDK"
                ) from None
        try:
            self.client.request("POST", "datasets", body={"name": name})
        except OpikHTTPError as error:
            if error.status != 409:  # 409: another worker or shard created it first
                raise
        return str(self.client.json("POST", "datasets/retrieve", body={"dataset_name": name})["id"])

    def latest_version(self, dataset_id: str) -> dict[str, Any] | None:
        try:
            page = self.client.json("GET", f"datasets/{dataset_id}/versions", params={"page": 1, "size": 1})
        except OpikHTTPError:
            return None  # versioning is off on this server: the experiment cannot pin a version
        content = (page or {}).get("content") or []
        return dict(content[0]) if content else None

    def version(self, dataset_id: str, version_name: str) -> dict[str, Any]:
        """The version named ``version_name`` (``v3``), as the server describes it."""
        found: dict[str, Any] = self.client.json(
            "POST", f"datasets/{dataset_id}/versions/retrieve", body={"version_name": version_name}
        )
        return found

    def stream_items(
        self, name: str, version_hash: str | None = None, filters: list[dict[str, str]] | None = None
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """Every item of the dataset (at a version, matching the filters), as (server id, data),
        paging by cursor."""
        last: str | None = None
        while True:
            body: dict[str, Any] = {"dataset_name": name, "steam_limit": PAGE}
            if filters:
                body["filters"] = json.dumps(filters)
            if last is not None:
                body["last_retrieved_id"] = last
            if version_hash is not None:
                body["dataset_version"] = version_hash
            rows = list(self.client.ndjson("datasets/items/stream", body))
            for row in rows:
                yield str(row["id"]), dict(row.get("data") or {})
            if len(rows) < PAGE:
                return
            last = str(rows[-1]["id"])
