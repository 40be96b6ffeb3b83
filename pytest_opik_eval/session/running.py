"""Running the trials: the run and its experiments written before the first trial starts, then
each trial's test case, whose life (pending -> task -> scores -> cleared) is ``run.trial``'s;
this phase only calls it, runs trials ahead on threads, and stops the session when the store
cannot be written.

``Running`` is registered where trials run: a single process, or each pytest-xdist worker (the
controller runs none). ``TrialStatus`` is registered where reports are shown: a single process,
or the controller, which shows its workers'.
"""

from __future__ import annotations

import functools
import itertools
import os
from collections.abc import Callable, Generator, Iterable, Iterator
from typing import Any, Literal, NoReturn

import pytest

from pytest_opik_eval._compat import junit_mark_skipped
from pytest_opik_eval._compat_xdist import WorkerQueue
from pytest_opik_eval.collect.planning import plan_run
from pytest_opik_eval.collect.trials import CASE_ARG, TRIAL_KEY, RejectedItem, TestPlan, Trial
from pytest_opik_eval.exceptions import StoreError
from pytest_opik_eval.gcpause import no_gc_pass
from pytest_opik_eval.notices import notice
from pytest_opik_eval.reports.terminal import SOFT_FAILED
from pytest_opik_eval.run.budget import NOT_STARTED, NOT_STARTED_ATTR
from pytest_opik_eval.run.concurrency import LOOKAHEAD, prepare_threads
from pytest_opik_eval.run.judges import is_judge
from pytest_opik_eval.run.rescored import SpanReader, stored_task
from pytest_opik_eval.run.scoring import SCORER, new_scorer
from pytest_opik_eval.run.trial import (
    Task,
    TrialContext,
    capturing,
    clear_marker,
    is_async_task,
    recording_key,
    run,
    threaded_task,
)
from pytest_opik_eval.run.unanswered import BATCHED, BATCHED_ATTR, RECORDING_MISSED, RECORDING_MISSED_ATTR
from pytest_opik_eval.session.state import (
    ASYNC_CAPTURE_PLUGIN,
    CALL_REPORTS_PLUGIN,
    REJECTED_ITEMS_PLUGIN,
    STATUS_PLUGIN,
    SessionState,
)
from pytest_opik_eval.store.base import record_judges, span_reader
from pytest_opik_eval.store.records import ExperimentRecord, learned_judges

# The type of the <skipped> element of a soft-failed trial's test case (pytest's xfail: "pytest.xfail").
JUNIT_SOFT_FAILED = "pytest_opik_eval.soft_failed"


class Running:
    """Writes the run before the first trial, and runs each trial in its test case."""

    def __init__(self, state: SessionState) -> None:
        self.state = state
        self.config = state.config
        self._items: list[pytest.Item] = []
        self._position: dict[str, int] = {}
        self._scanned = 0  # the position in self._items up to which windows have looked
        self._queue: WorkerQueue | Literal[False] | None = None  # False: not found
        self._trial_context: TrialContext | None = None

    # -- the run is written before any trial starts ---------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> None:
        collection_failed = session.testsfailed and not self.config.option.continue_on_collection_errors
        if collection_failed or self.config.option.collectonly:
            return
        self._items = session.items
        self._position = {item.nodeid: index for index, item in enumerate(session.items)}
        # The plans of the trials left after -k, -m, --deselect and a resume's or a shard's
        # selection: a deselected test that reads tool calls patches no HTTP library.
        self.state.resources.start_recording(_plans_of(session.items))
        self._notice_unbatched()
        self._register_call_plugins(session.items)
        if any(plan.threads > 1 for plan in self.state.plans_seen):
            prepare_threads()
        if self.state.target.resume is not None:
            # The run and its experiments are in the store already (the target has them). Its
            # judges are identified now, as a new run's are, before any fixture: a score name
            # learned is recorded under the identity that the run recorded for its judge.
            for metric in _judge_metrics(self.state.plans_seen):
                self.state.resources.judges().of(metric)
            return
        shards = self.state.shards
        planned = session.items if shards is None else shards.planned
        trials = [t for t in _trials(planned)]
        if trials:
            self._create_run(trials)

    def _notice_unbatched(self) -> None:
        """A marker that batches (``batch=True`` or ``'strict'``) in a session that does not:
        its calls go live, which the test's author may not expect."""
        if self.state.options.batch != "off":
            return
        for plan in self.state.plans_seen:
            if plan.batch in ("on", "strict"):
                notice(
                    self.config,
                    f"{plan.where}: batch={plan.batch!r} in its marker, but this session runs without "
                    "--eval-batch: its calls go live (give --eval-batch, or ini eval_batch = on, to batch)",
                )

    def _register_call_plugins(self, items: list[pytest.Item]) -> None:
        """The hooks around a trial's test case, only where they have something to do: pluggy
        calls each on every test case (a report hook three times), which costs a trivial trial
        more than it does itself."""
        manager = self.config.pluginmanager
        if any(plan.rejected for plan in self.state.plans_seen):
            manager.register(RejectedItems(), REJECTED_ITEMS_PLUGIN)
        if not any(plan.gates.soft_trials() for plan in self.state.plans_seen):
            # No trial of this process can be soft-failed: nothing for TrialStatus to show (on a
            # pytest-xdist controller, which runs no trial, it shows its workers').
            status = manager.get_plugin(STATUS_PLUGIN)
            if status is not None:
                manager.unregister(status, STATUS_PLUGIN)
        if any(
            TRIAL_KEY in item.stash and isinstance(item, pytest.Function) and is_async_task(item)
            for item in items
        ):
            manager.register(AsyncCapture(), ASYNC_CAPTURE_PLUGIN)
        state = self.state
        if (
            state.options.record_mode != "off"
            or state.resources.budget is not None
            or any(plan.gates.soft_trials() for plan in state.plans_seen)
        ):
            manager.register(CallReports(state), CALL_REPORTS_PLUGIN)

    def _create_run(self, trials: list[tuple[pytest.Item, Trial]]) -> None:
        state = self.state
        with no_gc_pass():
            plan = plan_run(
                self.config, state.target.run_id, trials, state.options.run_name, state.options.budget
            )
            experiments = self._with_judges(plan.experiments, trials)
            try:
                state.store.get().create_run(plan.run, experiments, plan.trials)
            except StoreError as error:
                if not state.worker:
                    raise pytest.UsageError(f"{error}") from None
                # The controller found the store writable before this worker started: it stopped
                # being so since (a full disk). An error here would be an INTERNALERROR; the
                # worker's first trial fails with the one line instead, as when a write fails mid-run.
                state.run.not_created = error
                return
        state.run.experiments = experiments

    def _with_judges(
        self, experiments: list[ExperimentRecord], trials: list[tuple[pytest.Item, Trial]]
    ) -> list[ExperimentRecord]:
        """The experiments with the identities of their LLM judges, which a calibration against
        human labels holds for, by their own names: those of the scores they give, as far as
        can be told before they score (``_learned`` records the others). None are looked for
        without one: a heuristic metric costs nothing."""
        plans = {trial.case.plan.test: trial.case.plan for _, trial in trials}
        if not _judge_metrics(plans.values()):
            return experiments
        judges = self.state.resources.judges()
        return [
            e.model_copy(update={"judges": found})
            if (found := judges.digests(plans[e.test].spec.metrics, plans[e.test].judge_samples))
            else e
            for e in experiments
        ]

    # -- each trial ----------------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_pyfunc_call(self, pyfuncitem: pytest.Function) -> bool | None:
        trial = pyfuncitem.stash.get(TRIAL_KEY, None)
        if trial is None:
            return None
        state = self.state
        if state.run.not_created is not None:
            self._stop(pyfuncitem, state.run.not_created)
        threads = trial.case.plan.threads
        budget = state.resources.budget
        try:
            if threads <= 1:
                self._start(pyfuncitem, trial, self._context(), stored_task(trial))
            else:
                # Spent: nothing more is queued; a trial queued already is checked as it starts.
                spent = budget is not None and budget.reached()
                window = [pyfuncitem] if spent else self._window(pyfuncitem, trial, threads)
                state.resources.pool.run(pyfuncitem, window, self._job, threads)
        except StoreError as error:
            failure = error
        else:
            return True
        self._stop(pyfuncitem, failure)  # outside the except block: one line, not a chain

    def _stop(self, item: pytest.Item, error: StoreError) -> NoReturn:
        """The store cannot record trials (a full disk, a read-only file): this trial fails with
        the one line that says why, and no further trial starts, as with -x."""
        self.state.run.store_broken_reason = item.session.shouldfail = str(error)
        pytest.fail(str(error), pytrace=False)

    def _window(self, item: pytest.Function, trial: Trial, threads: int) -> list[pytest.Function]:
        """This trial and the next ones of the same test that this process runs, to run ahead."""

        def same_test(following: Iterator[pytest.Item]) -> list[pytest.Function]:
            window = [item]
            for ahead in following:
                ahead_trial = ahead.stash.get(TRIAL_KEY, None)
                if len(window) == threads * LOOKAHEAD or ahead_trial is None:
                    break
                if ahead_trial.case.plan is not trial.case.plan:
                    break
                assert isinstance(ahead, pytest.Function)
                window.append(ahead)
            return window

        if not self.state.worker:
            position = self._position[item.nodeid]
            # The test cases before self._scanned are in an earlier window, handed to the pool
            # already: each window looks only beyond them, so a session examines each test case
            # once rather than a whole window of them for every trial.
            start = max(position + 1, self._scanned)
            window = same_test(iter(self._items[start : position + threads * LOOKAHEAD]))
            self._scanned = start + len(window) - 1
            return window
        # A pytest-xdist worker runs the test cases the controller sends it, not session.items.
        if self._queue is None:
            self._queue = WorkerQueue.find(self.config, self._items) or False
        if self._queue is False:
            return [item]  # pytest-xdist's queue is not where it was: nothing runs ahead
        return self._queue.ahead(same_test)

    def pytest_runtest_logfinish(self) -> None:
        if self._queue:
            self._queue.finished()

    def _job(self, ahead: pytest.Function, shared: pytest.Function) -> Callable[[], None]:
        """Trial ``ahead``'s task and scoring, with the fixture objects of test case ``shared``."""
        trial = ahead.stash[TRIAL_KEY]
        task = stored_task(trial) or threaded_task(ahead, trial, shared)
        return functools.partial(self._start, ahead, trial, self._context(), task)

    @staticmethod
    def _start(item: pytest.Function, trial: Trial, context: TrialContext, task: Task | None) -> None:
        """The trial, unless the budget is spent: checked as the trial starts (when a thread takes
        it up, not when it was queued: the trials in flight are then at most one per thread)."""
        if context.budget is not None:
            context.budget.check(item)
        if context.batcher is not None and context.recorder is not None:
            # A request of it waits in a batch not ended: running its task again would only
            # reach that request again.
            reason = context.batcher.waiting_reason(context.recorder.masked(recording_key(trial)))
            if reason is not None:
                item.stash[BATCHED] = reason
                pytest.skip(reason)
        run(item, trial, context, task)

    def _context(self) -> TrialContext:
        """What every trial of this process runs with: made at the first trial, once the recorder
        has started (and the store opened, which may fail: that trial then says why)."""
        if self._trial_context is None:
            resources = self.state.resources
            self._trial_context = TrialContext(
                store=self.state.store.get(),
                session_id=self.state.target.session_id,
                budget=resources.budget,
                judge_cache=resources.judge_cache,
                recorder=resources.recorder,
                batcher=resources.batcher,
                read_spans=self._span_reader(),
            )
            self._learn_score_names()
        return self._trial_context

    def _span_reader(self) -> SpanReader | None:
        """A rescore's (a resumed one's too): how its trials' originals' spans are read."""
        return None if self.state.target.rescore is None else span_reader(self.state.store.get())

    def _learn_score_names(self) -> None:
        """Each test with a judge scored by a ``JudgeScorer``, which learns the names of its
        judges' scores (see ``_learned``): put in its plan's stash before its first trial, so that
        a trial of a test without a judge does nothing more."""
        plans = self.state.plans_seen
        if not _judge_metrics(plans):
            return
        from pytest_opik_eval.run.judges import ScoreNames

        names = ScoreNames(
            self.state.resources.judges(),
            self._learned,
            functools.partial(notice, self.config),
            {plan.test: plan.judge_samples for plan in plans},
        )
        for plan in plans:
            if _judge_metrics([plan]):
                plan.stash[SCORER] = new_scorer(plan, names)

    def _learned(self, test: str, update: dict[str, str | None]) -> None:
        """Names of the test's judges' scores learned as its trials were scored: into its
        experiments' records at once (a resume, the pytest-xdist controller and ``opik-eval`` read
        them there), and kept for the process that reports. Called one change at a time."""
        state = self.state
        resume = state.target.resume
        experiments = resume.experiments if resume is not None else state.run.experiments
        for experiment in experiments:
            if experiment.test != test:
                continue
            changed = state.run.judges.get(experiment.id, {})
            before = learned_judges(experiment.judges, changed)
            if learned_judges(before, update) != before:
                record_judges(state.store.get(), experiment.id, update)
                state.run.judges[experiment.id] = {**changed, **update}

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> None:
        # tryfirst: before pytest tears down the fixtures, so a failing fixture teardown
        # cannot leave a scored trial pending.
        trial = item.stash.get(TRIAL_KEY, None)
        if trial is not None:
            try:
                clear_marker(item, trial, self._context())
            except StoreError as error:
                failure = error
            else:
                return
            self._stop(item, failure)


class RejectedItems:
    """Fails the test case of a dataset item that could not be processed with its message,
    before any fixture is set up. Registered by ``Running`` as the trials start, only when an
    eval test has such items."""

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        callspec = getattr(item, "callspec", None)
        rejected = callspec.params.get(CASE_ARG) if callspec is not None else None
        if isinstance(rejected, RejectedItem):
            pytest.fail(rejected.message, pytrace=False)


class AsyncCapture:
    """Around the call phase of an ``async def`` eval test, for the plugins that run it (see
    ``run.trial.capturing``). Registered by ``Running`` as the trials start, only when an eval
    test is one."""

    @pytest.hookimpl(wrapper=True, tryfirst=True)  # outside any plugin that replaces item.obj
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None]:
        if not isinstance(item, pytest.Function) or TRIAL_KEY not in item.stash:
            return (yield)
        with capturing(item):
            return (yield)


class CallReports:
    """What a trial's call report carries to the process that reports (plain values: JSON-safe
    for pytest-xdist): a soft failure, a request that had no recording, a trial the budget kept
    from starting. Registered by ``Running`` as the trials start, only when one of them can
    happen: a test with soft trials, --eval-record, --eval-budget."""

    def __init__(self, state: SessionState) -> None:
        self.state = state

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        trial = item.stash.get(TRIAL_KEY, None)
        if trial is not None and call.when == "call" and report.passed and trial.soft_failure:
            # A plain str, so the report stays JSON-safe for pytest-xdist.
            report.eval_soft_failure = trial.soft_failure  # type: ignore[attr-defined]
        if call.when == "call" and item.stash.get(RECORDING_MISSED, False):
            # Counted by the process that ends the session, which sees every worker's reports.
            setattr(report, RECORDING_MISSED_ATTR, True)
            del item.stash[RECORDING_MISSED]  # a rerun of the test case starts afresh
        batched = item.stash.get(BATCHED, None) if call.when == "call" else None
        if batched is not None:
            setattr(report, BATCHED_ATTR, batched)
            del item.stash[BATCHED]
            path, line = item.reportinfo()[:2]  # where the test is: -rs folds them into one line
            report.longrepr = (os.fspath(path), (line or 0) + 1, f"Skipped: {batched}")
        if call.when == "call" and item.stash.get(NOT_STARTED, False):  # set by the budget only
            budget = self.state.resources.budget
            assert budget is not None
            setattr(report, NOT_STARTED_ATTR, True)
            # Where the test is, as for a skip marker, rather than the line of this plugin that
            # skipped it: pytest's -rs then folds all of them into one line.
            path, line = item.reportinfo()[:2]
            report.longrepr = (os.fspath(path), (line or 0) + 1, f"Skipped: {budget.reason}")
        return report


class TrialStatus:
    """Shows a trial that passed but missed its thresholds in soft mode as SOFT-FAILED, and in the
    JUnit XML as skipped with a message that says so, as pytest shows an xfail: CI dashboards
    count it apart from the passed tests, and show why."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    @pytest.hookimpl(tryfirst=True)
    def pytest_report_teststatus(
        self, report: pytest.TestReport
    ) -> tuple[str, str, tuple[str, dict[str, bool]]] | None:
        if report.when == "call" and getattr(report, "eval_soft_failure", None):
            return "soft-failed", "f", ("SOFT-FAILED", {"yellow": True})
        return None

    @pytest.hookimpl(trylast=True)  # after junitxml has written the test case as passed
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        message = getattr(report, "eval_soft_failure", None)
        if report.when == "call" and report.passed and message:
            junit_mark_skipped(self.config, report, JUNIT_SOFT_FAILED, f"{SOFT_FAILED}: {message}")


def _judge_metrics(plans: Iterable[TestPlan]) -> list[Any]:
    """The LLM judges among the plans' metrics."""
    return [m for m in itertools.chain.from_iterable(p.spec.metrics for p in plans) if is_judge(m)]


def _plans_of(items: list[pytest.Item]) -> list[TestPlan]:
    """The plans of the trials among ``items``, each once."""
    return list({id(trial.case.plan): trial.case.plan for _, trial in _trials(items)}.values())


def _trials(items: list[pytest.Item]) -> Iterator[tuple[pytest.Item, Trial]]:
    for item in items:
        trial = item.stash.get(TRIAL_KEY, None)
        if trial is not None:
            yield item, trial
