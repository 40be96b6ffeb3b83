"""The Opik server as the store, in Opik's own format.

Each experiment is an Opik experiment on a dataset version; each trial attempt is one trace
(input: the item; output empty until the attempt completes) linked to the experiment by an
experiment item; each score is a feedback score on the trace. A conversation's turns are also
traces of a thread, which gets the conversation's scores (and each turn's trace its per-turn
scores). The pending marker is the trace metadata key ``_opik_evaluation_pending``: true when
the trace is created, false when the attempt completes, which re-sends the whole trace with its
output through the batch endpoint (a newer version of the same trace id replaces the older one,
and a retry is harmless).

The local SQLite store at the spool path keeps everything this machine records, and an outbox
of the writes for the server, committed with the local change they mirror; a background thread
sends them in batches. So trials never wait on the network, and a server that goes away loses
nothing: what could not be sent is sent later, at session end, or by ``opik-eval sync``.

Its parts: ``spool`` (the local store and its outbox), ``payloads`` (what is sent, in the Opik
SDK's formats), ``datasets`` (the server's datasets), ``sender`` (the background sender),
``importing`` (what the server holds and the spool does not, read back), ``annotations`` (the
scores people gave in the Opik UI, as labels) and ``client`` (HTTP).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_opik_eval.exceptions import ExperimentNotFound, StoreError
from pytest_opik_eval.files import write_atomically
from pytest_opik_eval.ids import node_id, uuid7
from pytest_opik_eval.store.opik import payloads
from pytest_opik_eval.store.opik.annotations import Annotations
from pytest_opik_eval.store.opik.client import (
    OpikBadAnswer,
    OpikClient,
    OpikError,
    OpikHTTPError,
    OpikUnavailable,
)
from pytest_opik_eval.store.opik.config import SYNC_COMMAND, SYNC_TIMEOUT, OpikSettings
from pytest_opik_eval.store.opik.datasets import RemoteExperiment, ServerDatasets
from pytest_opik_eval.store.opik.importing import Importer
from pytest_opik_eval.store.opik.payloads import AttemptInfo, TrialInfo
from pytest_opik_eval.store.opik.sender import Sender, drain
from pytest_opik_eval.store.opik.spool import Message, Spool, unsent_line
from pytest_opik_eval.store.records import (
    ExperimentRecord,
    PlannedTrial,
    RunRecord,
    RunSummary,
    ScoreRecord,
    SpanRecord,
    TrialRecord,
    TrialState,
    Usage,
)


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
        self.spool = Spool(spool_path, create=create)
        self.sender = Sender(spool_path, self.client)
        self.sync_timeout = sync_timeout
        self.sync_command = sync_command
        self.drain_at_end = drain_at_end
        self._notices: list[str] = []
        self._last_failure: OpikUnavailable | None = None
        self._last_refusal: OpikHTTPError | None = None
        self._end_deadline: float | None = None  # see end_begins
        self.datasets = ServerDatasets(self.client, settings)
        self.importer = Importer(self.client, self.datasets, self.spool, settings)
        self._trials: dict[str, TrialInfo] = {}
        self._attempts: dict[str, AttemptInfo] = {}
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

    def load_dataset(self, name: str, filters: list[dict[str, str]] | None) -> list[dict[str, Any]]:
        """The items of server dataset ``name`` (the filter applied by the server), each as the
        Opik SDK hands it to a task: its data with the server's ``id``."""
        try:
            return self.datasets.load(name, filters)
        except OpikError as error:
            raise StoreError(str(error)) from None

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
        remote, dataset_size = self.datasets.for_experiment(experiment)
        state = payloads.resume_state(experiment, remote, dataset_size)
        if self._experiment_exists(experiment.id):
            return remote  # another shard or worker of the same run created it (same id)
        try:
            self.client.request(
                "POST",
                "experiments",
                body=payloads.experiment(run, experiment, remote, planned, state, self.settings.project),
            )
        except OpikHTTPError as error:
            # 409: another shard or worker of the same run created it first (same id).
            if error.status != 409:
                raise
        if state.get("requires_local_checkpoint"):
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
            self._trials[t.id] = TrialInfo(
                experiment_id=t.experiment_id,
                item=items[t.experiment_id, t.dataset_item_id],
                trial=t.trial,
                node_id=node_id(*tests[t.experiment_id], t.dataset_item_id, t.trial),
                server_item_id=remote.item_ids[t.dataset_item_id],
            )

    # -- each trial ---------------------------------------------------------------------------

    def start_attempt(self, trial_id: str, session_id: str) -> str:
        attempt_id = uuid7()
        attempt = self._attempts[attempt_id] = AttemptInfo(
            trial_id=trial_id, started=payloads.now(), link_id=uuid7()
        )
        trial = self._trials[trial_id]
        outbox = [
            self._trace(attempt_id, attempt, completed=False),
            payloads.experiment_item(attempt_id, attempt, trial, self.settings.project),
        ]
        self.spool.start_attempt(trial_id, session_id, attempt_id=attempt_id, outbox=outbox)
        self.sender.wake()
        return attempt_id

    def _trace(
        self, attempt_id: str, attempt: AttemptInfo, *, completed: bool, replaced_by: str | None = None
    ) -> Message:
        trial = self._trials[attempt.trial_id]
        project = self.settings.project
        return payloads.trace(
            attempt_id, attempt, trial, project, completed=completed, replaced_by=replaced_by
        )

    def record_spans(self, attempt_id: str, spans: Sequence[SpanRecord], usage: Usage | None = None) -> None:
        """The app's spans under the attempt's trace, the task span first (see ``run/trial_trace.py``),
        sent like the trace: through the outbox, committed with the local copy."""
        attempt = self._attempts[attempt_id]
        attempt.task_span = spans[0] if spans else None
        # The output is known here if the trial records its spans after it (metric spans too).
        outbox = [payloads.spans(spans, self.settings.project, task_output=attempt.output)] if spans else []
        turns = payloads.turn_traces(attempt_id, spans, self.settings.project)
        if turns:
            attempt.thread_id, attempt.turn_traces = attempt_id, turns
        self.spool.record_spans(attempt_id, spans, usage, outbox=outbox)
        self.sender.wake()

    def record_output(self, attempt_id: str, output: Mapping[str, Any]) -> None:
        attempt = self._attempts[attempt_id]
        # The task span was sent before the output was known: sent again with it (the newer
        # last_updated_at replaces it), as the SDK's span of a task carries what it returned.
        outbox = []
        if attempt.task_span is not None:
            outbox.append(payloads.spans([attempt.task_span], self.settings.project, task_output=output))
        self.spool.record_output(attempt_id, output, outbox=outbox)
        attempt.output = dict(output)

    def record_scores(self, attempt_id: str, scores: Sequence[ScoreRecord], passed: bool) -> None:
        attempt = self._attempts[attempt_id]
        attempt.passed = passed
        attempt.errors = payloads.scoring_errors(scores)
        # The Opik SDK sends a ScoreResult's metadata in the output of the metric's span, never
        # with the feedback score (which has no such field); with no spans here, the trace keeps it.
        attempt.score_metadata = {s.name: s.metadata for s in scores if s.metadata is not None}
        # A judge's samples (judge_samples) likewise: the feedback score is their mean or majority.
        attempt.score_samples = {s.name: s.samples for s in scores if s.samples is not None}
        project = self.settings.project
        outbox = payloads.feedback_scores(attempt_id, scores, project)
        if attempt.thread_id is not None:
            # A conversation's thread: its turns' traces, which the Opik UI's Threads view shows,
            # with its scores, and each turn's score of a per-turn metric on that turn's trace.
            # Sent with the scores, so that an attempt that ended unscored (killed, its app
            # failed, a request deferred to a batch), which reruns whole, leaves no thread
            # beside its rerun's. Its spans, and so its turns, were recorded before its scores
            # (see run/trial.py).
            outbox += attempt.turn_traces
            outbox += payloads.thread_feedback_scores(attempt.thread_id, scores, project)
            outbox += payloads.turn_feedback_scores(attempt_id, len(attempt.turn_traces), scores, project)
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
            outbox.append(payloads.experiment_item_delete(replaced))
        self.spool.complete_attempt(attempt_id, replaces=replaces, outbox=outbox)
        self.sender.wake()

    def record_verdict(self, experiment_id: str, passed: bool, aggregates: Mapping[str, float]) -> None:
        self.spool.record_verdict(experiment_id, passed, aggregates)
        outbox = payloads.experiment_scores(experiment_id, aggregates)
        if outbox:
            self.spool.enqueue(outbox)

    def bind_test(self, experiment: ExperimentRecord) -> None:
        self.spool.bind_test(experiment)  # the server's experiment names no test

    def record_calibrations(self, experiment_id: str, calibrations: Sequence[Mapping[str, Any]]) -> None:
        """The judges' calibrations into the experiment's metadata (``payloads.CALIBRATIONS_KEY``)."""
        self.spool.enqueue(
            payloads.experiment_metadata(experiment_id, payloads.CALIBRATIONS_KEY, list(calibrations))
        )

    def record_judges(self, experiment_id: str, update: Mapping[str, str | None]) -> dict[str, str]:
        """The judges' score names learned (see ``StoreExtras.record_judges``): in the spool, and
        into the experiment's metadata (``payloads.JUDGES_KEY``), whole, for another machine that
        imports it. Both in one transaction: another process's may not come between them."""
        judges = self.spool.record_judges(
            experiment_id,
            update,
            outbox=lambda judges: payloads.experiment_metadata(experiment_id, payloads.JUDGES_KEY, judges),
        )
        self.sender.wake()
        return judges

    def human_labels(self, experiment_id: str) -> dict[str, dict[str, float]]:
        """The feedback scores people gave in the Opik UI to the traces of the experiments on this
        experiment's server dataset, as labels by item id, then score name (``annotations``);
        none when the server cannot be read (a notice says why)."""
        remote = self._remote(experiment_id)
        try:
            labels, refused = Annotations(self.client).labels(remote)
        except OpikError as error:
            self._notices.append(
                f"--eval-labels-from=opik-feedback: could not read the scores people gave in the Opik UI "
                f"to the experiments on dataset {remote.dataset_name!r}: {error}; the dataset's labels "
                "alone are used"
            )
            return {}
        self._notices.extend(f"--eval-labels-from=opik-feedback: {line}" for line in refused)
        return labels

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

    def latest(self, test: str, params: str, before: str, *, passing: bool) -> ExperimentRecord | None:
        return self.spool.latest(test, params, before, passing=passing)

    def find(self, target: str) -> tuple[RunRecord, list[ExperimentRecord]]:
        """From the spool when this machine knows the id, else from the server; either way the
        trials completed elsewhere are read from the server first."""
        local = True
        try:
            run, experiments = self.spool.find(target)
        except ExperimentNotFound:
            if target == "last":
                raise
            run, experiments = self.importer.experiment(target)
            local = False
        remotes = {}
        for experiment in experiments:
            remotes[experiment.id] = self._remote(experiment.id)
            if not local:
                self.importer.attempts(experiment, remotes[experiment.id])
                continue
            # Known here (the pytest-xdist controller reads its workers' run at the end): what
            # other machines recorded is worth a short try, not a stalled or crashed session.
            # Whatever the server answers (no answer, garbage, a refusal), the spool's is shown.
            try:
                self.importer.attempts(experiment, remotes[experiment.id], retries=1)
            except OpikError as error:
                self._notices.append(
                    f"could not read from the Opik server the trials recorded elsewhere: {error}; "
                    f"what the spool {self.spool.location} holds is shown"
                )
        trials = [t for e in experiments for t in self.spool.trial_states(e.id)]
        self._remember(experiments, trials, remotes)
        return run, experiments

    def trials(self, experiment_id: str, *, spans: bool = False) -> list[TrialRecord]:
        return self.spool.trials(experiment_id, spans=spans)

    def trial_states(self, experiment_id: str) -> list[TrialState]:
        return self.spool.trial_states(experiment_id)

    def completed_spans(self, trial_id: str) -> list[SpanRecord]:
        """The spans this machine recorded (an experiment imported from the server has none)."""
        return self.spool.completed_spans(trial_id)

    def find_trial(
        self, target: str, *, run: str | None = None
    ) -> tuple[ExperimentRecord, TrialRecord] | None:
        """A trial this machine recorded, by its id, trace id or node id (see the spool's)."""
        return self.spool.find_trial(target, run=run)

    def experiments_with_trial(self, node_id: str) -> list[ExperimentRecord]:
        """The experiments this machine recorded with a trial of that node id (see the spool's)."""
        return self.spool.experiments_with_trial(node_id)

    def server_experiments(self, limit: int) -> list[dict[str, Any]]:
        """The newest experiments on the server, whoever created them."""
        page = self.client.json("GET", "experiments", params={"page": 1, "size": limit})
        return [dict(e) for e in (page or {}).get("content") or []]

    def _remote(self, experiment_id: str) -> RemoteExperiment:
        info = self.spool.remote(experiment_id)
        if info is None:
            raise StoreError(f"experiment {experiment_id} was recorded without the Opik backend")
        return RemoteExperiment.model_validate_json(info)

    def close(self) -> None:
        # Without a flush (an error ended the session): stop at once, waiting for a batch in
        # flight no longer than the budget.
        self.client.finish_by(time.monotonic())
        self.sender.stop(time.monotonic() + self.sync_timeout)
        self.client.close()
        self.spool.close()


def write_checkpoint(experiment_id: str, item_ids: Sequence[str]) -> None:
    """The Opik SDK's local resume checkpoint, so opik.evaluate_resume() finds the same items
    on this machine (this plugin itself resumes from the ids in the experiment's metadata)."""
    payload = {
        "schema_version": 1,
        "experiment_id": experiment_id,
        "resolved_dataset_item_ids": list(item_ids),
    }
    write_atomically(Path.home() / ".opik" / "resume" / f"{experiment_id}.json", json.dumps(payload))
