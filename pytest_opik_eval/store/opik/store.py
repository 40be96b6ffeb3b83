"""The Opik server as the store, in Opik's own format.

Each experiment is an Opik experiment on a dataset version; each trial attempt is one trace
(input: the item; output empty until the attempt completes) linked to the experiment by an
experiment item; each score is a feedback score on the trace. The pending marker is the trace
metadata key ``_opik_evaluation_pending``: true when the trace is created, false when the
attempt completes, which re-sends the whole trace with its output through the batch endpoint (a
newer version of the same trace id replaces the older one, and a retry is harmless).

The local SQLite store at the spool path keeps everything this machine records, and an outbox
of the writes for the server, committed with the local change they mirror; a background thread
sends them in batches. So trials never wait on the network, and a server that goes away loses
nothing: what could not be sent is sent later, at session end, or by ``opik-eval sync``.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from pytest_opik_eval.collect.datasets import canonical_json, content_hash
from pytest_opik_eval.exceptions import ExperimentNotFound, StoreError
from pytest_opik_eval.ids import node_id, uuid7, uuid7_for, uuid7_from_name
from pytest_opik_eval.store.local import LocalStore, Message
from pytest_opik_eval.store.opik.client import (
    OpikBadAnswer,
    OpikClient,
    OpikError,
    OpikHTTPError,
    OpikUnavailable,
)
from pytest_opik_eval.store.opik.config import SYNC_COMMAND, SYNC_TIMEOUT, OpikSettings
from pytest_opik_eval.store.opik.sender import Sender, drain
from pytest_opik_eval.store.records import (
    DatasetRecord,
    ExperimentRecord,
    PlannedTrial,
    RunRecord,
    RunSummary,
    ScoreRecord,
    Selection,
    TrialRecord,
    TrialState,
)

PENDING_KEY = "_opik_evaluation_pending"
RESUME_KEY = "_opik_resume"  # the Opik SDK's resume state, so opik.evaluate_resume() works too
OURS_KEY = "_pytest_opik_eval"  # what this plugin needs beyond it: the plan, the item id mapping
DATASET_PREFIX = "opik:"
_PAGE = 1000


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


@dataclass
class _Trial:
    experiment_id: str
    item: dict[str, Any]
    trial: int
    node_id: str
    server_item_id: str


@dataclass
class _Attempt:
    trial_id: str
    started: str
    link_id: str  # the id of the experiment item that ties its trace to the experiment
    output: dict[str, Any] | None = None
    errors: list[dict[str, Any]] = field(default_factory=list)
    score_metadata: dict[str, dict[str, Any]] = field(default_factory=dict)  # score name -> metadata
    passed: bool | None = None


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def dataset_name(experiment: ExperimentRecord) -> str:
    """The server dataset of an experiment: ``opik:NAME``'s name, the marker's ``dataset_name``,
    a file's stem, or the test's name."""
    source = experiment.dataset.source
    if experiment.dataset.name:
        return experiment.dataset.name
    if source.startswith(DATASET_PREFIX):
        return source[len(DATASET_PREFIX) :]
    return Path(source).stem if experiment.dataset.path else experiment.name


class OpikStore:
    """Records runs on an Opik server, through a local spool at ``spool_path``."""

    def __init__(
        self,
        settings: OpikSettings,
        spool_path: Path,
        *,
        create: bool = True,
        client: OpikClient | None = None,
        sync_timeout: float = SYNC_TIMEOUT,
        sync_command: str = SYNC_COMMAND,
        drain_at_end: bool = True,
    ) -> None:
        """``sync_timeout`` bounds the end of the session: sending what is left, and waiting for a
        batch in flight; what is still unsent then waits for ``sync_command``. A pytest-xdist
        worker passes ``drain_at_end=False``: it stops sending at its end, at once, and leaves the
        rest to the controller, whose drain alone takes the budget."""
        self.settings = settings
        self.client = client or OpikClient(settings)
        self.spool = LocalStore(spool_path, create=create, journaled=False)
        self.sender = Sender(spool_path, self.client)
        self.sync_timeout = sync_timeout
        self.sync_command = sync_command
        self.drain_at_end = drain_at_end
        self._notices: list[str] = []
        self._last_failure: OpikUnavailable | None = None
        self._last_refusal: OpikHTTPError | None = None
        self._end_deadline: float | None = None  # see end_begins
        self._trials: dict[str, _Trial] = {}
        self._attempts: dict[str, _Attempt] = {}
        try:
            self._check_access()
        except BaseException:
            self.close()
            raise

    @property
    def location(self) -> str:
        return f"{self.settings.url} workspace {self.settings.workspace} (spool {self.spool.location})"

    def _check_access(self) -> None:
        """Fail at the start, not in the middle: a wrong key or workspace, or no server."""
        try:
            self.client.request("GET", "experiments", params={"page": 1, "size": 1}, retries=1)
        except OpikHTTPError as error:
            if error.status in (401, 403):
                raise StoreError(
                    f"the Opik server at {self.settings.url} refused the credentials (HTTP {error.status}): "
                    f"check the API key (OPIK_API_KEY, here from {self.settings.sources['api_key']}) and "
                    f"the workspace {self.settings.workspace!r} (OPIK_WORKSPACE, from "
                    f"{self.settings.sources['workspace']})"
                ) from None
            raise StoreError(str(error)) from None
        except OpikBadAnswer as error:
            raise StoreError(
                f"the server at {self.settings.url} does not answer as the Opik API does: {error}; check "
                f"OPIK_URL_OVERRIDE (here from {self.settings.sources['url']}): it must be the address of "
                "the Opik API (a self-hosted Opik's ends in /api/), or use --eval-backend=local"
            ) from None
        except OpikUnavailable as error:
            raise StoreError(
                f"cannot reach the Opik server: {error}; check OPIK_URL_OVERRIDE (here from "
                f"{self.settings.sources['url']}), or use --eval-backend=local"
            ) from None

    def check_writable(self) -> None:
        """Raise ``StoreUnwritable`` now if the spool cannot be written (see ``LocalStore``)."""
        self.spool.check_writable()

    # -- the run ----------------------------------------------------------------------------

    def create_run(
        self, run: RunRecord, experiments: Sequence[ExperimentRecord], trials: Sequence[PlannedTrial]
    ) -> None:
        remotes = {}
        try:
            for experiment in experiments:
                planned = [t for t in trials if t.experiment_id == experiment.id]
                remotes[experiment.id] = self._create_experiment(run, experiment, planned)
        except OpikError as error:
            raise StoreError(f"could not create the experiments on the Opik server: {error}") from None
        self.spool.create_run(run, experiments, trials)
        for experiment in experiments:
            self.spool.save_remote(experiment.id, remotes[experiment.id].model_dump_json())
        self._remember(experiments, trials, remotes)

    def _create_experiment(
        self, run: RunRecord, experiment: ExperimentRecord, planned: Sequence[PlannedTrial]
    ) -> RemoteExperiment:
        if experiment.dataset.source.startswith(DATASET_PREFIX):
            remote, dataset_size = self._server_dataset(dataset_name(experiment), experiment.items)
        else:
            remote, dataset_size = self._sync_dataset(dataset_name(experiment), experiment.items)
        trial_count = experiment.selection.trial_count
        whole_plan = len(planned) == len(experiment.items) * trial_count
        selection = experiment.selection
        exact = selection.item_ids is None and selection.sampler is None
        resume_state = {
            "schema_version": 1,
            "resumable": remote.version_name is not None,
            "default_runs_per_item": trial_count,
            "dataset_filter_string": selection.filter,
            "dataset_version_name": remote.version_name,
            "nb_samples": selection.nb_samples,
            # The SDK re-selects items from the pinned version with the filter and nb_samples;
            # anything else (ids, a sampler, a dataset that holds more items) needs the ids.
            "requires_local_checkpoint": not exact or len(set(remote.item_ids.values())) != dataset_size,
        }
        if not resume_state["resumable"]:
            resume_state = {
                "schema_version": 1,
                "resumable": False,
                "non_resumable_reason": "the server's dataset has no versions",
            }
        ours = {
            "run": run.model_dump(),
            "record": experiment.model_dump(exclude={"items"}),
            "remote": remote.model_dump(),
            "planned": None if whole_plan else [[t.dataset_item_id, t.trial] for t in planned],
        }
        if self._experiment_exists(experiment.id):
            return remote  # another shard or worker of the same run created it (same id)
        try:
            self.client.request(
                "POST",
                "experiments",
                body={
                    "id": experiment.id,
                    "name": experiment.name,
                    "dataset_name": remote.dataset_name,
                    "project_name": self.settings.project,
                    "metadata": {RESUME_KEY: json.dumps(resume_state), OURS_KEY: ours},
                    "type": "regular",
                    "evaluation_method": "dataset",
                    **({"dataset_version_id": remote.version_id} if remote.version_id else {}),
                },
            )
        except OpikHTTPError as error:
            # 409: another shard or worker of the same run created it first (same id).
            if error.status != 409:
                raise
        if resume_state.get("requires_local_checkpoint"):
            write_checkpoint(experiment.id, [remote.item_ids[item["id"]] for item in experiment.items])
        return remote

    def _experiment_exists(self, experiment_id: str) -> bool:
        try:
            self.client.request("GET", f"experiments/{experiment_id}")
        except OpikHTTPError as error:
            if error.status == 404:
                return False
            raise
        return True

    def _sync_dataset(self, name: str, items: Sequence[Mapping[str, Any]]) -> tuple[RemoteExperiment, int]:
        """Make the server dataset hold these items (uploading only those it lacks, matched by
        content); return the mapping from this plugin's item ids to the server's, and how many
        items the dataset holds now."""
        dataset_id = self._dataset_id(name)
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
        for start in range(0, len(missing), _PAGE):
            self.client.request(
                "PUT", "datasets/items", body={"dataset_name": name, "items": missing[start : start + _PAGE]}
            )
        version = self._latest_version(dataset_id) or {}
        remote = RemoteExperiment.at(name, dataset_id, version, item_ids)
        return remote, len(existing)

    def _server_dataset(self, name: str, items: Sequence[Mapping[str, Any]]) -> tuple[RemoteExperiment, int]:
        """A dataset that lives on the server: its items keep their server ids."""
        dataset_id = self._dataset_id(name, create=False)
        version = self._latest_version(dataset_id) or {}
        size = sum(1 for _ in self.stream_items(name))
        remote = RemoteExperiment.at(
            name, dataset_id, version, {str(item["id"]): str(item["id"]) for item in items}
        )
        return remote, size

    def load_dataset(self, name: str, filters: list[dict[str, str]] | None) -> list[dict[str, Any]]:
        """The items of server dataset ``name`` (the filter applied by the server), each as the
        Opik SDK hands it to a task: its data with the server's ``id``."""
        self._dataset_id(name, create=False)
        return [{**data, "id": item_id} for item_id, data in self.stream_items(name, filters=filters)]

    def _dataset_id(self, name: str, *, create: bool = True) -> str:
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

    def _latest_version(self, dataset_id: str) -> dict[str, Any] | None:
        try:
            page = self.client.json("GET", f"datasets/{dataset_id}/versions", params={"page": 1, "size": 1})
        except OpikHTTPError:
            return None  # versioning is off on this server: the experiment cannot pin a version
        content = (page or {}).get("content") or []
        return dict(content[0]) if content else None

    def stream_items(
        self, name: str, version_hash: str | None = None, filters: list[dict[str, str]] | None = None
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """Every item of the dataset (at a version, matching the filters), as (server id, data),
        paging by cursor."""
        last: str | None = None
        while True:
            body: dict[str, Any] = {"dataset_name": name, "steam_limit": _PAGE}
            if filters:
                body["filters"] = json.dumps(filters)
            if last is not None:
                body["last_retrieved_id"] = last
            if version_hash is not None:
                body["dataset_version"] = version_hash
            rows = list(self.client.ndjson("datasets/items/stream", body))
            for row in rows:
                yield str(row["id"]), dict(row.get("data") or {})
            if len(rows) < _PAGE:
                return
            last = str(rows[-1]["id"])

    def _remember(
        self,
        experiments: Sequence[ExperimentRecord],
        trials: Sequence[PlannedTrial | TrialState],
        remotes: Mapping[str, RemoteExperiment],
    ) -> None:
        items = {(e.id, str(i["id"])): i for e in experiments for i in e.items}
        tests = {e.id: (e.test, e.params) for e in experiments}
        for t in trials:
            remote = remotes[t.experiment_id]
            self._trials[t.id] = _Trial(
                experiment_id=t.experiment_id,
                item=items[t.experiment_id, t.dataset_item_id],
                trial=t.trial,
                node_id=node_id(*tests[t.experiment_id], t.dataset_item_id, t.trial),
                server_item_id=remote.item_ids[t.dataset_item_id],
            )

    # -- each trial ---------------------------------------------------------------------------

    def _link(self, attempt_id: str, trial: _Trial) -> dict[str, Any]:
        """The experiment item that ties an attempt's trace to the experiment."""
        return {
            "experiment_id": trial.experiment_id,
            "dataset_item_id": trial.server_item_id,
            "trace_id": attempt_id,
            "project_name": self.settings.project,
        }

    def _trace(
        self, attempt_id: str, attempt: _Attempt, *, completed: bool, replaced_by: str | None = None
    ) -> Message:
        trial = self._trials[attempt.trial_id]
        metadata: dict[str, Any] = {
            PENDING_KEY: not completed,
            "pytest_node_id": trial.node_id,
            "trial": trial.trial,
            "dataset_item_id": trial.item["id"],
        }
        if replaced_by is not None:
            metadata["replaced_by"] = replaced_by  # a rerun in the same session completed instead
        if attempt.errors:
            metadata["scoring_errors"] = attempt.errors
        if attempt.score_metadata:
            metadata["score_metadata"] = attempt.score_metadata
        if completed:
            metadata["passed"] = attempt.passed  # the verdict, which Opik does not otherwise keep
        trace = {
            "id": attempt_id,
            "project_name": self.settings.project,
            "name": "evaluation_task",
            "start_time": attempt.started,
            "input": trial.item,
            # Empty until the attempt completes: the released Opik SDK counts a trace with an
            # output as a completed trial.
            "output": attempt.output if completed else None,
            "metadata": metadata,
            "last_updated_at": _now(),
        }
        if completed:
            trace["end_time"] = _now()
        # For the sender only (never sent): to link the trace again if it must get a new id.
        trace["_link"] = self._link(attempt_id, trial)
        return "trace", json.dumps(trace, default=repr)

    def start_attempt(self, trial_id: str, session_id: str) -> str:
        attempt_id = uuid7()
        attempt = self._attempts[attempt_id] = _Attempt(trial_id=trial_id, started=_now(), link_id=uuid7())
        trial = self._trials[trial_id]
        link = {"id": attempt.link_id, **self._link(attempt_id, trial)}
        outbox = [self._trace(attempt_id, attempt, completed=False), ("experiment_item", json.dumps(link))]
        self.spool.start_attempt(trial_id, session_id, attempt_id=attempt_id, outbox=outbox)
        self.sender.wake()
        return attempt_id

    def record_output(self, attempt_id: str, output: Mapping[str, Any]) -> None:
        self.spool.record_output(attempt_id, output)
        self._attempts[attempt_id].output = dict(output)

    def record_scores(self, attempt_id: str, scores: Sequence[ScoreRecord], passed: bool) -> None:
        attempt = self._attempts[attempt_id]
        attempt.passed = passed
        # Failed scores are not sent as scores (as with the SDK); their errors go to the trace.
        attempt.errors = [{"name": s.name, "error": s.reason} for s in scores if s.scoring_failed]
        # The Opik SDK sends a ScoreResult's metadata in the output of the metric's span, never
        # with the feedback score (which has no such field); with no spans here, the trace keeps it.
        attempt.score_metadata = {s.name: s.metadata for s in scores if s.metadata is not None}
        feedback = [
            {
                "id": attempt_id,
                "project_name": self.settings.project,
                "name": s.name,
                "value": s.value,
                "source": "sdk",
                **({"reason": s.reason} if s.reason else {}),
            }
            for s in scores
            if not s.scoring_failed
        ]
        outbox = [("feedback_scores", json.dumps({"scores": feedback}))] if feedback else []
        self.spool.record_scores(attempt_id, scores, passed, outbox=outbox)

    def complete_attempt(self, attempt_id: str, *, replaces: str | None = None) -> None:
        outbox = [self._trace(attempt_id, self._attempts[attempt_id], completed=True)]
        if replaces is not None and replaces in self._attempts:
            # A rerun in this session replaces the trial's earlier attempt. Its experiment item
            # is deleted, so the experiment holds the trial once: its averages in the Opik UI, its
            # trace count, and what the Opik SDK and this plugin read back leave the replaced
            # attempt out (its feedback scores stay on its trace, which stays in the project). The
            # trace is sent again as pending, without its output and naming its replacement.
            replaced = self._attempts[replaces]
            outbox.append(self._trace(replaces, replaced, completed=False, replaced_by=attempt_id))
            outbox.append(("experiment_item_delete", json.dumps({"ids": [replaced.link_id]})))
        self.spool.complete_attempt(attempt_id, replaces=replaces, outbox=outbox)
        self.sender.wake()

    def record_verdict(self, experiment_id: str, passed: bool, aggregates: Mapping[str, float]) -> None:
        self.spool.record_verdict(experiment_id, passed, aggregates)
        scores = [{"name": name, "value": value} for name, value in aggregates.items()]
        if scores:
            self.spool.enqueue([("experiment_scores", json.dumps({"id": experiment_id, "scores": scores}))])

    def end_begins(self) -> None:
        """The end of the session starts now: its budget (``sync_timeout``) runs from here, for
        every request that follows, the drain in :meth:`flush` included. The pytest-xdist
        controller calls this before it reads its workers' run back (:meth:`find`), so a server
        that does not answer holds up that read and the drain together for the budget, not more."""
        if self._end_deadline is None:
            self._end_deadline = time.monotonic() + self.sync_timeout
            self.client.finish_by(self._end_deadline)

    def flush(self) -> str | None:
        """Send what is left within the budget (``sync_timeout``), then say what still waits."""
        # No request of either thread may outlive the budget: each attempt's timeout is capped
        # by what remains, and none starts after it. A worker sends nothing more, nor waits for
        # a batch in flight: the controller sends it again (harmless: every write carries its id),
        # so its drain alone takes the budget.
        if self.drain_at_end:
            self.end_begins()
            assert self._end_deadline is not None
            deadline = self._end_deadline
        else:
            deadline = time.monotonic()
        self.client.finish_by(deadline)
        if self.sender.stop(deadline) and self.drain_at_end:
            try:
                drain(self.spool, self.client, until=deadline, on_down=self._down, on_refused=self._refused)
            except StoreError as error:
                # The spool cannot be written (a full disk): its message names the spool, the
                # cause and the fix, whole. What was sent but not marked so is sent again later.
                self._notices.append(f"sending to the Opik server stopped: {error}")
            except Exception as error:  # never an INTERNALERROR at the end: the writes stay spooled
                self._notices.append(
                    f"sending to the Opik server stopped on an unexpected error ({type(error).__name__}: "
                    f"{self.client.quote(str(error))}); the writes stay in the spool {self.spool.location}"
                )
        line = unsent_line(self.spool, self.sync_command)
        refusal = self._last_refusal or self.sender.last_refusal
        if refusal is not None:
            self._notices.append(f"the Opik server refused writes of this session: {refusal}")
        if self.drain_at_end and self.spool.outbox_counts()[0]:
            failure = self._last_failure or self.sender.last_failure
            why = str(failure) if failure else f"{self.settings.url} did not answer in time"
            self._notices.append(
                "the Opik server did not take every write at the end of the session "
                f"(--eval-sync-timeout={self.sync_timeout:g}): {why}"
            )
        return line

    def _down(self, failure: OpikUnavailable) -> None:
        self._last_failure = failure

    def _refused(self, error: OpikHTTPError) -> None:
        self._last_refusal = error

    def notices(self) -> list[str]:
        taken, self._notices = self._notices, []
        return self.sender.take_notices() + taken + self.spool.notices()

    # -- reading back -------------------------------------------------------------------------

    def runs(self) -> list[RunSummary]:
        return self.spool.runs()

    def last_passing(self, test: str, params: str, before: str) -> ExperimentRecord | None:
        return self.spool.last_passing(test, params, before)

    def find(self, target: str) -> tuple[RunRecord, list[ExperimentRecord]]:
        """From the spool when this machine knows the id, else from the server; either way the
        trials completed elsewhere are read from the server first."""
        local = True
        try:
            run, experiments = self.spool.find(target)
        except ExperimentNotFound:
            if target == "last":
                raise
            run, experiments = self._import(target)
            local = False
        remotes = {}
        for experiment in experiments:
            remotes[experiment.id] = self._remote(experiment.id)
            if not local:
                self._refresh(experiment, remotes[experiment.id])
                continue
            # Known here (the pytest-xdist controller reads its workers' run at the end): what
            # other machines recorded is worth a short try, not a stalled or crashed session.
            # Whatever the server answers (no answer, garbage, a refusal), the spool's is shown.
            try:
                self._refresh(experiment, remotes[experiment.id], retries=1)
            except OpikError as error:
                self._notices.append(
                    f"could not read from the Opik server the trials recorded elsewhere: {error}; "
                    f"what the spool {self.spool.location} holds is shown"
                )
        trials = [t for e in experiments for t in self.spool.trial_states(e.id)]
        self._remember(experiments, trials, remotes)
        return run, experiments

    def trials(self, experiment_id: str) -> list[TrialRecord]:
        return self.spool.trials(experiment_id)

    def trial_states(self, experiment_id: str) -> list[TrialState]:
        return self.spool.trial_states(experiment_id)

    def server_experiments(self, limit: int) -> list[dict[str, Any]]:
        """The newest experiments on the server, whoever created them."""
        page = self.client.json("GET", "experiments", params={"page": 1, "size": limit})
        return [dict(e) for e in (page or {}).get("content") or []]

    def _remote(self, experiment_id: str) -> RemoteExperiment:
        info = self.spool.remote(experiment_id)
        if info is None:
            raise StoreError(f"experiment {experiment_id} was recorded without the Opik backend")
        return RemoteExperiment.model_validate_json(info)

    def _import(self, experiment_id: str) -> tuple[RunRecord, list[ExperimentRecord]]:
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
            return self._import_sdk_experiment(found, metadata)
        remote = RemoteExperiment.model_validate(ours["remote"])
        data = {str(d.get("id")): d for _, d in self.stream_items(remote.dataset_name, remote.version_hash)}
        record = ExperimentRecord.model_validate(
            {**ours["record"], "items": [data[i] for i in remote.item_ids]}
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

    def _import_sdk_experiment(
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
        dataset_id = self._dataset_id(name, create=False)
        version = self.client.json(
            "POST",
            f"datasets/{dataset_id}/versions/retrieve",
            body={"version_name": state["dataset_version_name"]},
        )
        items = [
            {**data, "id": item_id} for item_id, data in self.stream_items(name, version["version_hash"])
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
                from pytest_opik_eval.collect.filtering import parse_filter

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

    def _refresh(
        self, experiment: ExperimentRecord, remote: RemoteExperiment, retries: int | None = None
    ) -> None:
        """Record here the attempts the server has (from any machine or tool)."""
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
                    "size": _PAGE,
                    "truncate": "false",
                },
                retries=retries,
            )
            rows = (body or {}).get("content") or []
            for row in rows:
                new = [a for a in row.get("experiment_items") or [] if str(a.get("trace_id")) not in known]
                self._import_item_attempts(experiment, new, ours_by_server)
            if len(rows) < _PAGE:
                return
            page += 1

    def _import_item_attempts(
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
            self._import_attempt(experiment, attempt, ours_by_server)

    def _import_attempt(
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
        scores = [_feedback_score(s) for s in attempt.get("feedback_scores") or []] + [
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

    def close(self) -> None:
        # Without a flush (an error ended the session): stop at once, waiting for a batch in
        # flight no longer than the budget.
        self.client.finish_by(time.monotonic())
        self.sender.stop(time.monotonic() + self.sync_timeout)
        self.client.close()
        self.spool.close()


def _feedback_score(score: Mapping[str, Any]) -> ScoreRecord:
    """A trace's feedback score as a score record; a value that is not a finite number (another
    tool wrote it) is a failed score that says what the server holds."""
    value = score.get("value")
    name = str(score.get("name"))
    if isinstance(value, int | float) and math.isfinite(value):
        return ScoreRecord(name=name, value=float(value), reason=score.get("reason"))
    return ScoreRecord(
        name=name,
        value=0.0,
        reason=f"the Opik server holds {value!r} for this score, which is not a finite number",
        scoring_failed=True,
    )


def unsent_line(spool: LocalStore, sync_command: str = SYNC_COMMAND) -> str | None:
    waiting, refused = spool.outbox_counts()
    parts = []
    if waiting:
        parts.append(f"{waiting} write(s) wait to be sent to the Opik server: run {sync_command}")
    if refused:
        parts.append(f"{refused} write(s) were refused by the Opik server (kept in {spool.location})")
    return "; ".join(parts) or None


def write_checkpoint(experiment_id: str, item_ids: Sequence[str]) -> None:
    """The Opik SDK's local resume checkpoint, so opik.evaluate_resume() finds the same items
    on this machine (this plugin itself resumes from the ids in the experiment's metadata)."""
    folder = Path.home() / ".opik" / "resume"
    folder.mkdir(parents=True, exist_ok=True)
    payload = {
        "schema_version": 1,
        "experiment_id": experiment_id,
        "resolved_dataset_item_ids": list(item_ids),
    }
    fd, temporary = tempfile.mkstemp(dir=folder, suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        json.dump(payload, file)
    os.replace(temporary, folder / f"{experiment_id}.json")
