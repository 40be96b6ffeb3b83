"""The feedback scores people gave in the Opik UI, read as human labels (``--eval-labels-from=
opik-feedback``): a feedback score with the name of a metric that someone gave, in the UI, to a
trace of an experiment on the same server dataset labels that trace's dataset item for that score.

A person's score is one whose ``source`` is ``ui``. A server that keeps each author's score apart
(``value_by_author``) reports their mean as the score, with the source of one of them: there, the
mean of the authors' ``ui`` scores is the label. Of an item's labels for one score (several trials,
several experiments), the newest is kept.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from typing import Any

from pytest_opik_eval.store.opik.client import OpikClient
from pytest_opik_eval.store.opik.datasets import PAGE, RemoteExperiment

UI = "ui"  # the source of a feedback score given in the Opik UI ("sdk", "online_scoring": not a person's)
IDS_PER_READ = 50  # experiments read back in one request (their ids go in the query string)


def human_value(score: Mapping[str, Any]) -> tuple[float, str] | None:
    """A trace's feedback score as people gave it in the UI, with when it was last given; None
    when no person gave it."""
    by_author = score.get("value_by_author")
    if isinstance(by_author, Mapping) and by_author:
        given = [
            entry
            for entry in by_author.values()
            if isinstance(entry, Mapping) and entry.get("source") == UI and _number(entry.get("value"))
        ]
        if not given:
            return None
        value = math.fsum(float(e["value"]) for e in given) / len(given)
        return value, max(str(e.get("last_updated_at") or "") for e in given)
    if score.get("source") != UI or not _number(score.get("value")):
        return None
    return float(score["value"]), str(score.get("last_updated_at") or "")


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


class Annotations:
    """Reads the human labels of a server dataset's items, through ``client``."""

    def __init__(self, client: OpikClient) -> None:
        self.client = client

    def labels(self, remote: RemoteExperiment) -> tuple[dict[str, dict[str, float]], list[str]]:
        """By this plugin's item id (of ``remote``'s items), each score's label; and, in words,
        the scores people gave that cannot be labels (outside 0 to 1)."""
        ours_by_server = {server: ours for ours, server in remote.item_ids.items()}
        newest: dict[tuple[str, str], tuple[str, float]] = {}
        refused: list[str] = []
        for row in self._rows(remote.dataset_id):
            item = ours_by_server.get(str(row.get("id")))
            if item is None:
                continue
            for attempt in row.get("experiment_items") or []:
                for score in attempt.get("feedback_scores") or []:
                    found = human_value(score)
                    if found is None:
                        continue
                    value, when = found
                    name = str(score.get("name"))
                    if not 0.0 <= value <= 1.0:
                        refused.append(
                            f"item {item}: the score {name!r} given in the Opik UI on trace "
                            f"{attempt.get('trace_id')} is {value:g}, not a label (true, false or a number "
                            "from 0 to 1)"
                        )
                        continue
                    key = (item, name)
                    if key not in newest or when >= newest[key][0]:
                        newest[key] = (when, value)
        labels: dict[str, dict[str, float]] = {}
        for (item, name), (_, value) in sorted(newest.items()):
            labels.setdefault(item, {})[name] = value
        return labels, refused

    def _rows(self, dataset_id: str) -> Iterator[Mapping[str, Any]]:
        """Each dataset item with the experiment items of every experiment on the dataset (their
        traces' feedback scores with them)."""
        experiments = list(self._experiment_ids(dataset_id))
        for start in range(0, len(experiments), IDS_PER_READ):
            chosen = json.dumps(experiments[start : start + IDS_PER_READ])
            page = 1
            while True:
                body = self.client.json(
                    "GET",
                    f"datasets/{dataset_id}/items/experiments/items",
                    params={"experiment_ids": chosen, "page": page, "size": PAGE, "truncate": "true"},
                )
                rows = (body or {}).get("content") or []
                yield from rows
                if len(rows) < PAGE:
                    break
                page += 1

    def _experiment_ids(self, dataset_id: str) -> Iterator[str]:
        page = 1
        while True:
            body = self.client.json(
                "GET", "experiments", params={"datasetId": dataset_id, "page": page, "size": PAGE}
            )
            found = (body or {}).get("content") or []
            for experiment in found:
                yield str(experiment["id"])
            if len(found) < PAGE:
                return
            page += 1
