"""The end of an eval session. ``Ending``, on the process that reports (a single process, or the
pytest-xdist controller, which reads back what its workers recorded): the experiments judged, the
reports written (the terminal's too, by ``reports.terminal``), the verdicts recorded, the exit
status set.
``WorkerEnding``, on each pytest-xdist worker: what the store holds made durable, and the worker's
notices handed to the controller, which decides.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_opik_eval.collect.labels import with_labels
from pytest_opik_eval.collect.planning import settings_for_resume
from pytest_opik_eval.exceptions import ExperimentNotFound, StoreError
from pytest_opik_eval.gcpause import no_gc_pass
from pytest_opik_eval.ids import now
from pytest_opik_eval.notices import WORKER_NOTICES, notice, notices_of, print_notices
from pytest_opik_eval.reports.json_report import write_report
from pytest_opik_eval.reports.junit import add_suite_properties, report_properties
from pytest_opik_eval.reports.terminal import verdict_counts, write_summary
from pytest_opik_eval.run.budget import NOT_STARTED_ATTR
from pytest_opik_eval.run.distributed import (
    WORKER_JUDGE_COUNTS,
    WORKER_JUDGES,
    WORKER_RECORDINGS,
    in_shard,
    is_controller,
)
from pytest_opik_eval.run.unanswered import BATCHED_ATTR, RECORDING_MISSED_ATTR
from pytest_opik_eval.session.batches import WORKER_BATCH, handed, received, submit_batches
from pytest_opik_eval.session.resources import recordings_folder
from pytest_opik_eval.session.state import SessionState
from pytest_opik_eval.store import ExperimentRecord, GateSettings, TrialRecord
from pytest_opik_eval.store.base import bind_test, end_begins, human_labels, record_calibrations
from pytest_opik_eval.store.calibrations import CALIBRATIONS, Calibrations, StoredCalibration
from pytest_opik_eval.store.records import learned_judges
from pytest_opik_eval.verdict.model import (
    BatchReport,
    BudgetReport,
    JudgeCacheReport,
    RecordingReport,
    Report,
)
from pytest_opik_eval.verdict.results import ExperimentResult
from pytest_opik_eval.verdict.summary import (
    Baselines,
    aggregates,
    calibrations_of,
    judge_experiments,
    keep_calibrations,
    passed,
    rest_of_session,
    unchecked_metrics,
    uncompared,
)

if TYPE_CHECKING:
    from pytest_opik_eval.run.recording import RecordingCounts


class Ending:
    """Judges the session's experiments, writes the reports, and sets the exit status."""

    def __init__(self, state: SessionState) -> None:
        self.state = state
        self.config = state.config
        self.options = state.options
        self.not_started = 0  # trials the budget kept from starting, in every process
        self.batched = 0  # trials waiting for a provider batch (--eval-batch), in every process
        self.workers_batched: list[Any] = []  # what each pytest-xdist worker's trials deferred
        self.batches: BatchReport | None = None
        self.spent = 0.0
        # --eval-record: what each process's recorder counted, and the trials a miss failed.
        self.recording_counts: list[RecordingCounts] = []
        self.missed_trials = 0
        self.recordings: RecordingReport | None = None  # their totals, at the end
        self.unsaved_recordings: list[str] = []  # the recordings' files that could not be written
        self.report: Report | None = None  # every report's model, once the experiments are judged
        self.experiments: list[ExperimentRecord] = []  # the run's, once the session has ended
        self.results: list[ExperimentResult] = []  # the experiments judged
        self.unsent_summary: str | None = None  # what the store could not send, for the summary
        # The judges' score names each pytest-xdist worker's trials taught (see RunOutcome.judges).
        self.workers_judges: list[dict[str, dict[str, str | None]]] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "call":
            return  # both are set on call reports only (see running.CallReports), three times rarer
        if getattr(report, NOT_STARTED_ATTR, False) and self.state.resources.budget is not None:
            self.not_started += 1
        if getattr(report, BATCHED_ATTR, None):
            self.batched += 1
        if getattr(report, RECORDING_MISSED_ATTR, False):
            self.missed_trials += 1

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object) -> None:
        output = getattr(node, "workeroutput", {})
        if WORKER_JUDGES in output:
            self.workers_judges.append(output[WORKER_JUDGES])
        if WORKER_BATCH in output:
            self.workers_batched += received(output[WORKER_BATCH])
        counts = output.get(WORKER_RECORDINGS)
        if counts is not None:
            from pytest_opik_eval.run.recording import RecordingCounts

            self.recording_counts.append(RecordingCounts(**counts))

    @pytest.hookimpl(tryfirst=True)  # before junitxml writes its file
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        resources = self.state.resources
        resources.pool.stop()
        self._end_recording(session)
        self._end_batches()
        if resources.budget is not None:
            try:
                self.spent = resources.budget.spent()
            except StoreError as error:
                notice(self.config, str(error))
            # The workers have ended: the controller removes their ledger.
            resources.budget.close(remove=True)
        try:
            self.experiments = self._experiments()
            if not self.experiments:
                return
            if self.options.labels_from == "opik-feedback":
                self.experiments = [self._with_human_labels(e) for e in self.experiments]
            self._finish(session)
        except StoreError as error:
            # The store cannot be read or written any more: say so in one line; what it held
            # before is intact, and the reports that could be written were.
            notice(self.config, str(error))
            if session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
        self.state.store.take_notices()

    def _end_recording(self, session: pytest.Session) -> None:
        """--eval-record: this process's recorder stopped, the journals of every process (the
        workers have ended) folded into the recordings' files, and what they all counted summed.
        The session fails when recordings could not be saved (the journals keep them for the
        next session), or when a strict replay refused a request no trial could fail for."""
        if self.options.record_mode == "off":
            self.state.resources.stop_recording()  # one that only observed (--eval-llm-spans)
            return
        from pytest_opik_eval.run.recording import RecordingCounts
        from pytest_opik_eval.store.http_recordings import fold

        counted = self.state.resources.stop_recording()
        if counted is not None:
            self.recording_counts.append(counted)
        folder = recordings_folder(self.options)
        try:
            folded = fold(folder)
        except OSError as error:  # a full disk, a read-only folder: the journals wait for the next fold
            self.unsaved_recordings = [f"{folder}: {error.strerror or error}"]
        else:
            for damaged in folded.set_aside:
                notice(self.config, f"--eval-record: {damaged}")
            self.unsaved_recordings = folded.unsaved
        total = RecordingCounts()
        for counts in self.recording_counts:
            total.add(counts)
        self.recordings = RecordingReport(
            mode=self.options.record_mode, missed_trials=self.missed_trials, **dataclasses.asdict(total)
        )
        if (self.unsaved_recordings or total.refused) and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def _end_batches(self) -> None:
        """--eval-batch: what the trials of every process deferred, submitted."""
        if self.options.batch == "off":
            return
        batcher = self.state.resources.batcher
        queued = [
            *self.workers_batched,
            *([] if batcher is None else batcher.drain()),
        ]
        target = self.state.target
        self.batches = submit_batches(
            self.options,
            target.run_id,
            target.session_id,
            queued,
            self.state.resources.batches_collected,
            self.batched,
        )

    def _experiments(self) -> list[ExperimentRecord]:
        """The run's experiments: the resumed run's, or those this process's trials created, or,
        on the pytest-xdist controller, which does not collect, those its workers created; each
        with the judges' score names that the trials taught (of this process or its workers)."""
        resume = self.state.target.resume
        experiments = resume.experiments if resume is not None else self.state.run.experiments
        if not experiments and is_controller(self.config):
            experiments = self._run_experiments()
        changes = [self.state.run.judges, *self.workers_judges]
        if not any(changes):
            return experiments
        return [_with_learned_judges(e, changes) for e in experiments]

    def _run_experiments(self) -> list[ExperimentRecord]:
        """On the controller, which does not collect: the experiments its workers recorded."""
        self._end_begins()
        try:
            return self.state.store.get().find(self.state.target.run_id)[1]
        except ExperimentNotFound:
            return []  # no eval test ran

    def _with_human_labels(self, experiment: ExperimentRecord) -> ExperimentRecord:
        """--eval-labels-from=opik-feedback: the experiment with the labels people gave in the
        Opik UI added to its items. Read here, once, on the process that reports: after every task
        ran (no label can reach one), and with what people labelled while the session ran."""
        self._end_begins()
        found = human_labels(self.state.store.get(), experiment.id)
        if found is None:
            notice(
                self.config,
                f"--eval-labels-from=opik-feedback: the store {self.state.store.get().location} holds no "
                "human labels apart from the dataset's",
            )
            return experiment
        items = with_labels(experiment.items, experiment.labels_field, found)
        return experiment.model_copy(update={"items": items})

    def _end_begins(self) -> None:
        # Reading back from the server spends the end's budget (--eval-sync-timeout), which the
        # drain in flush() then shares.
        end_begins(self.state.store.get())

    def _finish(self, session: pytest.Session) -> None:
        store, target = self.state.store.get(), self.state.target
        calibrations = Calibrations(self.options.store_path.parent / CALIBRATIONS)
        with no_gc_pass():
            self.results = judge_experiments(
                store,
                self.experiments,
                target.session_id,
                self._settings_of,
                target.baselines or Baselines(store, None),
                self.options.resume_command,
                self._in_my_shard if self.options.shard else None,
                self._rest_of_session(),
                calibrations,
                now=now(),
            )
            # A shard's labelled items are some of them: it keeps no calibration.
            kept = [] if self.options.shard else calibrations_of(self.results)
            self._notice_uncompared(kept, calibrations)
            resume = target.resume
            # Built once, before anything that may fail: every report renders it, the terminal's too.
            self.report = report = Report(
                run_id=target.run_id,
                resumed=None if resume is None else resume.resolved,
                experiments=[r.report() for r in self.results],
                budget=self._budget_report(),
                judge_cache=self._judge_cache_report(),
                recordings=self.recordings,
                batches=self.batches,
                judge_drift=keep_calibrations(
                    kept, calibrations, self.options.max_judge_drift, target.drift_since
                ),
            )
        self._notice_unseen_spend()
        self._notice_unchecked_metrics()
        self._write_reports(report)
        add_suite_properties(self.config, report_properties(report))
        self._record_verdicts(report)
        self._set_exit_status(session)
        self.unsent_summary = store.flush()

    def _record_verdicts(self, report: Report) -> None:
        finished = self.config.hook.pytest_opik_eval_experiment_finished
        unrecorded: StoreError | None = None
        store = self.state.store.get()
        resumed = self.state.target.resume is not None
        for result, experiment in zip(self.results, report.experiments, strict=True):
            try:
                if resumed:  # an experiment of the Opik SDK is its test's from now on
                    bind_test(store, result.experiment)
                store.record_verdict(
                    result.id, passed(result) and not result.summary.pending, aggregates(result)
                )
                # A shard's labelled items are some of the experiment's: the whole run's calibration
                # is not its to record (see _finish); nor is another experiment's, or a stored one.
                own = [c for c in experiment.calibrations if c.origin is None or c.origin.kind == "own"]
                if own and not self.options.shard:
                    record_calibrations(store, result.id, [c.model_dump(mode="json") for c in own])
            except StoreError as error:
                unrecorded = error  # only last-passing baselines miss it: the rest goes on
            finished(config=self.config, experiment=experiment)
        if unrecorded is not None and str(unrecorded) != self.state.run.store_broken_reason:
            notice(
                self.config, f"the verdicts for --eval-baseline=last-passing were not recorded: {unrecorded}"
            )

    def _notice_uncompared(self, kept: list[StoredCalibration], calibrations: Calibrations) -> None:
        """--eval-max-judge-drift: say which judges it could not check, and why."""
        bound = self.options.max_judge_drift
        if bound is None:
            return
        option = f"--eval-max-judge-drift={bound:g}"
        if self.options.shard:
            notice(
                self.config,
                f"{option}: a shard has a part of the labelled items and checks no judge's drift: "
                f"opik-eval gate {option} on the merged store checks the whole run's",
            )
        elif not kept:
            notice(
                self.config,
                f"{option}: no judge's calibration to check: no experiment of this session judged "
                "every one of its items with human labels (see docs/how-to/judge-labels.md)",
            )
        since = self.state.target.drift_since
        for found in uncompared(kept, calibrations, since):
            if since is None:
                earlier = "earlier calibration"
            elif since == self.state.target.run_id:
                earlier = f"calibration but this run's own (run {since}, the reference, is this one)"
            else:
                earlier = f"calibration kept by run {since} (the reference)"
            notice(
                self.config,
                f"{option}: no {earlier} of {found.score} (judge {found.judge[:12]}) to "
                f"compare with; this session's, {found.experiment} (run {found.run_id}), is kept as "
                "its calibration, which the next session checks against",
            )

    def _set_exit_status(self, session: pytest.Session) -> None:
        failed = not all(passed(r) for r in self.results) or self._drifted()
        # The exit status an uninterrupted run of the whole experiments would have had.
        if session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            if failed:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
            elif self.state.target.resume is not None:
                session.exitstatus = pytest.ExitCode.OK
        # The budget left trials unstarted: the run is incomplete, as when Ctrl-C stops it, and
        # exits as that does (2), whatever the trials that ran say; its verdict waits for the resume.
        # Trials waiting for a provider batch likewise (--eval-batch): the gates wait for the resume.
        if (self.not_started or self.batched) and session.exitstatus in _INCOMPLETE_WINS_OVER:
            session.exitstatus = pytest.ExitCode.INTERRUPTED

    def _drifted(self) -> bool:
        """A judge's verdicts changed on more labelled items than --eval-max-judge-drift allows."""
        return self.report is not None and any(d.failed for d in self.report.judge_drift)

    def _budget_report(self) -> BudgetReport | None:
        budget = self.state.resources.budget
        if budget is None:
            return None
        return BudgetReport(
            unit=budget.unit,
            given=budget.given.amount,
            limit=budget.limit,
            spent=self.spent,
            reached=self._budget_reached(),
            not_started=self.not_started,
            resume_command=self._budget_resume_command(),
        )

    def _judge_cache_report(self) -> JudgeCacheReport | None:
        cache = self.state.resources.judge_cache
        return None if cache is None else JudgeCacheReport(**cache.counts.to_json(), strict=cache.strict)

    def _budget_reached(self) -> bool:
        budget = self.state.resources.budget
        return budget is not None and (bool(self.not_started) or self.spent >= budget.limit)

    def _budget_resume_command(self) -> str | None:
        if not self.not_started:
            return None
        return self.options.budget_resume_command(self.state.target.run_id)

    def _notice_unseen_spend(self) -> None:
        """A budget that counted nothing while trials ran cannot stop anything: say why."""
        budget = self.state.resources.budget
        if budget is None or self.spent:
            return
        if not any(r.ran_this_session(t) for r in self.results for t in r.trials):
            return
        amount = budget.describe(budget.limit)
        recordings = self.recordings
        counted = (
            "those the app traces (the Opik SDK's @opik.track, track_openai, ...; OpenTelemetry; "
            "trace.usage), " + _UNTRACED_CALLS[self.options.llm_spans]
        )
        if recordings is not None and recordings.replayed and not recordings.recorded:
            # The replayed calls cost nothing; a judge's live call may have been paid for with no
            # span reporting it (a plain client without --eval-llm-spans): not said to be free.
            message = (
                f"eval budget: the trials that ran spent nothing, so the budget of {amount} counted "
                f"nothing: the {recordings.replayed} calls they made were replayed from the recordings "
                f"(--eval-record={recordings.mode}), which costs nothing; a call sent (a judge's) counts "
                f"when a span reports it: {counted}"
            )
        else:
            what = "tokens" if budget.unit == "tokens" else "cost"
            message = (
                f"eval budget: the trials that ran reported no {what}, so the budget of {amount} "
                f"counted nothing: it counts the usage and cost of the trials' LLM calls: {counted}"
            )
        notice(self.config, message)

    def _notice_unchecked_metrics(self) -> None:
        """A metric with neither a threshold nor a gate passes whatever it scores: say so, once
        per metric of a test (its parametrized experiments alike), and how to give it one."""
        for result in self.results:
            for name in unchecked_metrics(result):
                example = f"{{{name!r}: 0.8}}"
                notice(
                    self.config,
                    f"{result.test}: metric {name!r} has no threshold and no gate, so its scores can "
                    f"never fail a trial or the session: give it a threshold (thresholds={example} in "
                    f"the marker, or threshold=0.8 on the metric) or a gate (fail_under={example}, "
                    f"--eval-fail-under={name}=0.8); threshold=0 keeps it a report only, without this "
                    "notice",
                )

    def _write_reports(self, report: Report) -> None:
        # Each report on its own: one that cannot be written (a full disk) does not keep the
        # others from being written.
        if self.options.report_path is not None:
            with self._writing("JSON report", self.options.report_path):
                write_report(report, self.options.report_path)
        if self.options.html_path is not None:
            from pytest_opik_eval.reports.html import write_html
            from pytest_opik_eval.reports.html_data import spans_of

            with self._writing("HTML report", self.options.html_path):
                items = {e.id: e.items for e in self.experiments}
                spans = spans_of(self.state.store.get(), self.results)
                write_html(report, items, self.options.html_path, self.options.resume_command, spans)
        step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if step_summary:
            from pytest_opik_eval.reports.markdown import append_step_summary

            with self._writing("GitHub step summary", Path(step_summary)):
                append_step_summary(Path(step_summary), report, self.options.resume_command)

    @contextlib.contextmanager
    def _writing(self, what: str, path: Path) -> Iterator[None]:
        try:
            yield
        except OSError as error:
            notice(self.config, f"could not write the {what} {path}: {error.strerror or error}")

    def _in_my_shard(self, experiment: ExperimentRecord, trial: TrialRecord) -> bool:
        assert self.options.shard is not None
        return in_shard(
            self.options.shard, experiment.test, experiment.params, trial.dataset_item_id, trial.trial
        )

    def _rest_of_session(self) -> list[ExperimentRecord]:
        """A resume of one experiment: the rest of its run, for Holm's family."""
        resume = self.state.target.resume
        if resume is None:
            return []
        return rest_of_session(self.state.store.get(), resume.requested, resume.run, self.experiments)

    def _settings_of(self, experiment: ExperimentRecord) -> GateSettings:
        if self.state.target.resume is None:
            return experiment.gates
        return settings_for_resume(experiment.gates, self.options.cli_gates)

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        print_notices(self.config, terminalreporter)
        if self.report is None or not self.report.experiments:
            return
        resume = self.state.target.resume
        write_summary(
            terminalreporter,
            self.report,
            self.options.resume_command,
            resumed_as=None if resume is None else resume.requested,
            unsaved_recordings=self.unsaved_recordings,
            unsent=self.unsent_summary,
        )

    @pytest.hookimpl(wrapper=True, tryfirst=True, specname="pytest_terminal_summary")
    def pytest_terminal_summary_verdict(self, terminalreporter: pytest.TerminalReporter) -> Generator[None]:
        # pytest's last line ("1 passed in 0.2s") counts test outcomes; when the eval verdict fails
        # the session (a gate, a trial that failed in an earlier session), that line must say so,
        # in red, rather than "1 passed" in green with the reason far above. Its parts are the
        # reporter's stats, so the verdict goes there: in the outermost wrapper (tryfirst), after
        # pytest's short test summary, which lists every entry of "failed". (pytest reads only
        # methods named pytest_*: hence this name, and specname.)
        try:
            return (yield)
        finally:
            results = self.results
            failed = bool(results) and not all(passed(r) for r in results)
            stats = terminalreporter.stats
            if failed and self.report is not None:
                for key, count in verdict_counts(self.report.experiments).items():
                    stats.setdefault(key, []).extend(_VerdictPart() for _ in range(count))
            drifted = [] if self.report is None else [d for d in self.report.judge_drift if d.failed]
            if drifted:
                # "20 passed, 1 judge drifted (--eval-max-judge-drift)"
                key = f"judge{'s' if len(drifted) > 1 else ''} drifted (--eval-max-judge-drift)"
                stats.setdefault(key, []).extend(_VerdictPart() for _ in drifted)
                failed = True
            if self.not_started:
                # "30 passed, 70 skipped, 70 eval trials not started (budget)": the skips are the
                # budget's, and the run is incomplete.
                key = f"eval trial{'s' if self.not_started > 1 else ''} not started (budget)"
                stats.setdefault(key, []).extend(_VerdictPart() for _ in range(self.not_started))
            if self.batched:
                key = f"eval trial{'s' if self.batched > 1 else ''} waiting for a batch"
                stats.setdefault(key, []).extend(_VerdictPart() for _ in range(self.batched))
            # Trials waiting for a batch alone leave it yellow: incomplete by design, not a failure.
            if failed or self.not_started:
                # pytest colours the line red when "failed" is among the stats; this entry is not
                # counted as a failed test (the protocol pytest's own reports follow).
                stats.setdefault("failed", []).append(_VerdictPart(counted=False))

    def pytest_unconfigure(self) -> None:
        self.state.store.close()
        # Every report is written: the session's records go now, before pytest's own full passes
        # of the garbage collector at exit (several objects a trial, which they would walk twice).
        self.report, self.results, self.experiments = None, [], []


# The exit statuses that a run the budget stopped replaces by INTERRUPTED: not a usage error, an
# internal error or an interruption.
_INCOMPLETE_WINS_OVER = (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.NO_TESTS_COLLECTED)


class WorkerEnding:
    """The end of a pytest-xdist worker: the controller reports, from what the store holds."""

    def __init__(self, state: SessionState) -> None:
        self.state = state

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self) -> None:
        state, resources = self.state, self.state.resources
        resources.pool.stop()
        counted = resources.stop_recording()
        if counted is not None:  # the controller sums the counts, and folds the journals
            state.config.workeroutput[WORKER_RECORDINGS] = dataclasses.asdict(counted)  # type: ignore[attr-defined]
        if resources.budget is not None:
            resources.budget.close()
        store = state.store.opened()
        if store is not None:
            try:
                store.flush()  # the controller reports what the store holds
            except StoreError as error:
                notice(state.config, str(error))
            state.store.take_notices()
        state.config.workeroutput[WORKER_NOTICES] = notices_of(state.config)  # type: ignore[attr-defined]
        batcher = resources.batcher
        queued = [] if batcher is None else batcher.drain()
        if queued:
            state.config.workeroutput[WORKER_BATCH] = handed(queued)  # type: ignore[attr-defined]
        if resources.judge_cache is not None:
            state.config.workeroutput[WORKER_JUDGE_COUNTS] = resources.judge_cache.counts.to_json()  # type: ignore[attr-defined]
        if state.run.judges:
            state.config.workeroutput[WORKER_JUDGES] = state.run.judges  # type: ignore[attr-defined]

    def pytest_unconfigure(self) -> None:
        self.state.store.close()


def _with_learned_judges(
    experiment: ExperimentRecord, changes: list[dict[str, dict[str, str | None]]]
) -> ExperimentRecord:
    """The experiment with what each process learned of its judges' score names applied."""
    judges = experiment.judges
    for changed in changes:
        judges = learned_judges(judges, changed.get(experiment.id, {}))
    return experiment if judges == experiment.judges else experiment.model_copy(update={"judges": judges})


class _VerdictPart:
    """An entry of the terminal reporter's stats for the eval verdict: pytest's last line shows
    how many there are under their key."""

    def __init__(self, *, counted: bool = True) -> None:
        self.count_towards_summary = counted


# What the budget makes of an app's untraced model calls, by --eval-llm-spans.
_UNTRACED_CALLS = {
    "on": "and, with --eval-llm-spans=on, the OpenAI and Anthropic calls of an uninstrumented app, "
    "read from their HTTP answers",
    "auto": "and the OpenAI and Anthropic calls of an uninstrumented app, read from their HTTP answers, "
    "in the tests whose metrics read tool calls (--eval-llm-spans=auto; =on counts every test's; "
    "both need the record extra)",
    "off": "but not an uninstrumented app's OpenAI and Anthropic calls with --eval-llm-spans=off "
    "(=on reads them from their HTTP answers)",
}
