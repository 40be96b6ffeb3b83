"""What the Opik server holds and this machine's spool does not, copied into the spool: an
experiment recorded elsewhere (by this plugin on another machine, or started by the Opik SDK's
``opik.evaluate()``), and the attempts other machines and tools added to a known experiment.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pytest_opik_eval.exceptions import ExperimentNotFound, StoreError
from pytest_opik_eval.ids import content_hash, node_id, uuid7
from pytest_opik_eval.store.opik import payloads
from pytest_opik_eval.store.opik.client import OpikClient, OpikHTTPError
from pytest_opik_eval.store.opik.config import DATASET_PREFIX, OpikSettings
from pytest_opik_eval.store.opik.datasets import PAGE, RemoteExperiment, ServerDatasets
from pytest_opik_eval.store.opik.payloads import JUDGES_KEY, OURS_KEY, PENDING_KEY, RESUME_KEY
from pytest_opik_eval.store.opik.spool import Spool
from pytest_opik_eval.store.records import (
    DatasetRecord,
    ExperimentRecord,
    PlannedTrial,
    RunRecord,
    ScoreRecord,
    Selection,
)


class Importer:
    """Reads from the server at ``settings.url``, through ``client`` and ``datasets``, into
    ``spool``."""

    def __init__(
        self, client: OpikClient, datasets: ServerDatasets, spool: Spool, settings: OpikSettings
    ) -> None:
        self.client = client
        self.datasets = datasets
        self.spool = spool
        self.settings = settings

    def experiment(self, experiment_id: str) -> tuple[RunRecord, list[ExperimentRecord]]:
        """The server's experiment ``experiment_id`` and a run for it, recorded in the spool."""
        try:
            found = self.client.json("GET", f"experiments/{experiment_id}")
        except OpikHTTPError as error:
            if error.status in (400, 404):
                raise ExperimentNotFound(
                    f"no experiment or run with id {experiment_id!r} in the spool {self.spool.location} "
                    f"nor on the Opik server {self.settings.url} (workspace {self.settings.workspace}); "
                    "list the experiments in the Opik UI, or with: opik-eval runs"
                ) from None
            raise
        metadata = found.get("metadata") or {}
        ours = metadata.get(OURS_KEY)
        if not isinstance(ours, dict):
            return self._sdk_experiment(found, metadata)
        remote = RemoteExperiment.model_validate(ours["remote"])
        data = {
            str(d.get("id")): d
            for _, d in self.datasets.stream_items(remote.dataset_name, remote.version_hash)
        }
        # The judges' score names its trials taught since it was created, if any.
        judges = metadata.get(JUDGES_KEY)
        learned = {"judges": judges} if isinstance(judges, dict) else {}
        record = ExperimentRecord.model_validate(
            {**ours["record"], **learned, "items": [data[i] for i in remote.item_ids]}
        )
        run = RunRecord.model_validate(ours["run"])
        trial_count = record.selection.trial_count
        plan = ours.get("planned") or [[i, t] for i in remote.item_ids for t in range(trial_count)]
        planned = [
            PlannedTrial(uuid7(), record.id, item, trial, node_id(record.test, record.params, item, trial))
            for item, trial in plan
        ]
        self.spool.create_run(run, [record], planned)
        self.spool.save_remote(record.id, remote.model_dump_json())
        return run, [record]

    def _sdk_experiment(
        self, found: Mapping[str, Any], metadata: Mapping[str, Any]
    ) -> tuple[RunRecord, list[ExperimentRecord]]:
        """An experiment that opik.evaluate() started: its items and trials from its resume state.
        Its eval test is found at collection, by the dataset its marker names."""
        experiment_id = str(found["id"])
        try:
            state = json.loads(metadata[RESUME_KEY])
        except (KeyError, TypeError, ValueError):
            state = {}
        if not state.get("resumable") or not state.get("dataset_version_name"):
            raise StoreError(
                f"experiment {experiment_id} on {self.settings.url} cannot be resumed: it has no resume "
                f"state ({state.get('non_resumable_reason') or 'not started by a resumable evaluation'})"
            )
        name = str(found["dataset_name"])
        dataset_id = self.datasets.dataset_id(name, create=False)
        version = self.datasets.version(dataset_id, state["dataset_version_name"])
        items = [
            {**data, "id": item_id}
            for item_id, data in self.datasets.stream_items(name, version["version_hash"])
        ]
        if state.get("requires_local_checkpoint"):
            checkpoint = Path.home() / ".opik" / "resume" / f"{experiment_id}.json"
            try:
                wanted = json.loads(checkpoint.read_text())["resolved_dataset_item_ids"]
            except (OSError, ValueError, KeyError):
                raise StoreError(
                    f"experiment {experiment_id} selected its items with ids or a sampler, and its local "
                    f"checkpoint {checkpoint} is missing: resume it on the machine that started it"
                ) from None
            by_id = {item["id"]: item for item in items}
            items = [by_id[i] for i in wanted if i in by_id]
        else:
            if state.get("dataset_filter_string"):
                from pytest_opik_eval.filtering import parse_filter

                matcher = parse_filter(state["dataset_filter_string"])
                items = [item for item in items if matcher.matches(item)]
            if state.get("nb_samples"):
                items = items[: int(state["nb_samples"])]
        trial_count = max(1, int(state.get("default_runs_per_item") or 1))
        now = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
        run = RunRecord(id=uuid7(), created_at=now, rootdir="", args=[])
        record = ExperimentRecord(
            id=experiment_id,
            run_id=run.id,
            name=str(found.get("name") or experiment_id),
            test="",  # bound at collection to the eval test whose marker names the dataset
            params="",
            created_at=str(found.get("created_at") or now),
            dataset=DatasetRecord(source=DATASET_PREFIX + name, path=None, version=content_hash(items)),
            selection=Selection(
                filter=state.get("dataset_filter_string"),
                nb_samples=state.get("nb_samples"),
                trial_count=trial_count,
            ),
            items=items,
        )
        planned = [
            PlannedTrial(uuid7(), experiment_id, str(item["id"]), trial, "")
            for item in items
            for trial in range(trial_count)
        ]
        remote = RemoteExperiment.at(
            name, dataset_id, version, {str(item["id"]): str(item["id"]) for item in items}
        )
        self.spool.create_run(run, [record], planned)
        self.spool.save_remote(record.id, remote.model_dump_json())
        return run, [record]

    def attempts(
        self, experiment: ExperimentRecord, remote: RemoteExperiment, retries: int | None = None
    ) -> None:
        """Record in the spool the attempts the server has of ``experiment`` (from any machine or
        tool); ``retries`` as the client's."""
        ours_by_server = {server: ours for ours, server in remote.item_ids.items()}
        known = self.spool.attempt_ids(experiment.id)
        page = 1
        while True:
            body = self.client.json(
                "GET",
                f"datasets/{remote.dataset_id}/items/experiments/items",
                params={
                    "experiment_ids": json.dumps([experiment.id]),
                    "page": page,
                    "size": PAGE,
                    "truncate": "false",
                },
                retries=retries,
            )
            rows = (body or {}).get("content") or []
            for row in rows:
                new = [a for a in row.get("experiment_items") or [] if str(a.get("trace_id")) not in known]
                self._item_attempts(experiment, new, ours_by_server)
            if len(rows) < PAGE:
                return
            page += 1

    def _item_attempts(
        self,
        experiment: ExperimentRecord,
        attempts: Sequence[Mapping[str, Any]],
        ours_by_server: Mapping[str, str],
    ) -> None:
        # The Opik SDK's traces carry no trial index: its completed attempts fill the item's
        # trials that are not completed yet, in the order they were made.
        items = {ours_by_server.get(str(a.get("dataset_item_id"))) for a in attempts}
        completed_here = {
            t.trial
            for t in self.spool.trials(experiment.id)
            if t.status == "completed" and t.dataset_item_id in items
        }
        sdk_trial = 0
        for attempt in sorted(attempts, key=lambda a: str(a.get("trace_id"))):
            metadata = attempt.get("trace_metadata") or {}
            if not isinstance(metadata.get("trial"), int) and attempt.get("output") is not None:
                while sdk_trial in completed_here:
                    sdk_trial += 1
                attempt = {**attempt, "trace_metadata": {**metadata, "trial": sdk_trial}}
                sdk_trial += 1
            self._attempt(experiment, attempt, ours_by_server)

    def _attempt(
        self, experiment: ExperimentRecord, attempt: Mapping[str, Any], ours_by_server: Mapping[str, str]
    ) -> None:
        if attempt.get("experiment_id") != experiment.id:
            return
        item_id = ours_by_server.get(str(attempt.get("dataset_item_id")))
        metadata = attempt.get("trace_metadata") or {}
        trial = metadata.get("trial")
        if item_id is None or not isinstance(trial, int):
            return
        marker = metadata.get(PENDING_KEY)
        output = attempt.get("output")
        completed = marker is False or (marker is None and output is not None)
        scores = [payloads.score_record(s) for s in attempt.get("feedback_scores") or []] + [
            ScoreRecord(name=str(e.get("name")), value=0.0, reason=e.get("error"), scoring_failed=True)
            for e in metadata.get("scoring_errors") or []
            if isinstance(e, dict)
        ]
        kept = metadata.get("score_metadata")
        if isinstance(kept, dict):
            scores = [
                s.model_copy(update={"metadata": kept[s.name]}) if isinstance(kept.get(s.name), dict) else s
                for s in scores
            ]
        samples = metadata.get("score_samples")
        if isinstance(samples, dict):
            scores = [_with_samples(s, samples.get(s.name)) for s in scores]
        passed = metadata.get("passed")
        self.spool.import_attempt(
            experiment.id,
            item_id,
            trial,
            str(attempt["trace_id"]),
            output,
            scores,
            passed if isinstance(passed, bool) else None,
            completed,
        )


def _with_samples(score: ScoreRecord, samples: object) -> ScoreRecord:
    """The score with the judge samples its trace keeps, if they are a list of finite numbers."""
    if score.scoring_failed or not isinstance(samples, list) or len(samples) < 2:
        return score
    if not all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in samples):
        return score
    return score.model_copy(update={"samples": [float(v) for v in samples]})
