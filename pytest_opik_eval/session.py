"""The eval session: the class plugin registered when ``--eval`` or ``--eval-resume`` is given.

It follows a trial from the marker to the report: collection expands each eval test into its
trials (``planning``), the run and its experiments are written before the first trial runs,
each trial runs in ``trial``, and the session ends with the summary and the JSON report.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import os
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Literal, NoReturn

import pytest

from pytest_opik_eval._compat import fixture_definition
from pytest_opik_eval.collect.datasets import Dataset, DatasetError, content_hash, load_dataset
from pytest_opik_eval.collect.marker import MARKER, EvalSpec, read_spec
from pytest_opik_eval.collect.planning import (
    CASE_ARG,
    OWN_ARGS,
    TRIAL_KEY,
    RejectedItem,
    TestPlan,
    Trial,
    TrialCase,
    params_of,
    plan_new,
    plan_resumed,
    plan_run,
    trial_cases,
)
from pytest_opik_eval.collect.resume import ResumeTarget, changes_since, load_target
from pytest_opik_eval.escaping import escape_control
from pytest_opik_eval.exceptions import ExperimentNotFound, StoreError
from pytest_opik_eval.ids import uuid7, uuid7_from_name
from pytest_opik_eval.notices import WORKER_NOTICES, notice, notices_of, print_notices
from pytest_opik_eval.reports.json_report import write_report
from pytest_opik_eval.reports.junit import add_suite_properties, suite_properties
from pytest_opik_eval.reports.model import Report
from pytest_opik_eval.reports.terminal import gate_lines, summary_lines, verdict_counts
from pytest_opik_eval.run import trial as trial_life
from pytest_opik_eval.run.concurrency import LOOKAHEAD, Pool, async_fixture, function_scoped_fixture
from pytest_opik_eval.run.distributed import (
    SHARD_PLUGIN,
    Controller,
    ShardSelector,
    WorkerQueue,
    handed_to_worker,
    in_shard,
    is_controller,
)
from pytest_opik_eval.store import ExperimentRecord, GateSettings, Store, TrialRecord
from pytest_opik_eval.store.backends import backend, held_dataset
from pytest_opik_eval.store.base import end_begins
from pytest_opik_eval.verdict.gates import settings_for_resume
from pytest_opik_eval.verdict.results import ExperimentResult
from pytest_opik_eval.verdict.summary import Baselines, aggregates, judge_experiments, passed

if TYPE_CHECKING:
    from pytest_opik_eval.settings import EvalOptions


class EvalSession:
    """Runs the eval tests of one pytest session and records them in the store."""

    def __init__(self, config: pytest.Config, options: EvalOptions) -> None:
        self.config = config
        self.options = options
        handed = handed_to_worker(config)
        self.worker = handed is not None  # a pytest-xdist worker: it runs trials, never reports
        self.session_id: str = handed["session_id"] if handed else uuid7()
        self._store: Store | None = None
        self.resume: ResumeTarget | None = None
        if handed and handed["resume"] is not None:
            self.resume = ResumeTarget.from_json(handed["resume"])
        if handed:
            self.run_id: str = handed["run_id"]
        else:
            self.run_id = uuid7_from_name(options.run_name) if options.run_name else uuid7()
        self.shards: ShardSelector | None = None
        if options.shard is not None:
            self.shards = ShardSelector(options.shard)
            config.pluginmanager.register(self.shards, SHARD_PLUGIN)
        self.experiments: list[ExperimentRecord] = []
        self.results: list[ExperimentResult] = []
        self.plans_seen: list[TestPlan] = []
        self.baselines: Baselines | None = None
        self.unsent: str | None = None  # what the store could not send, for the summary
        self.store_failure: str | None = None  # why trials stopped: the store cannot be written
        self.unusable: StoreError | None = None  # a worker could not create the run
        self.pool = Pool()
        self._items: list[pytest.Item] = []
        self._position: dict[str, int] = {}
        self._queue: WorkerQueue | Literal[False] | None = None  # False: not found

    def store(self) -> Store:
        """The store, opened (and created) on first use. A method, not a property: pytest before
        8.3.3 reads every attribute of a plugin object when it looks for fixtures, and so would
        create the store even under ``--co``."""
        if self._store is None:
            self._store = self._open_store(create=True)
        return self._store

    def _open_store(self, *, create: bool) -> Store:
        supplied: Store | None = self.config.hook.pytest_opik_eval_store(config=self.config)
        if supplied is not None:
            return supplied
        return backend(self.options.backend).open(
            self.options.store_path,
            create=create,
            sync_timeout=self.options.sync_timeout,
            sync_command=self.options.sync_command,
            # A worker leaves what is left to the controller, so the budget bounds the whole end.
            drain_at_end=not self.worker,
        )

    # -- start ---------------------------------------------------------------------------

    def pytest_report_header(self) -> list[str]:
        line = backend(self.options.backend).describe(self.options.store_path, self.options.store_source)
        if self.resume is not None:
            line += f"; resuming {self.resume.requested} (run {self.resume.run.id})"
        return [line]

    def pytest_sessionstart(self) -> None:
        if self.worker:
            return  # the controller checked everything, and handed over what the workers need
        self._start()
        if is_controller(self.config):
            handoff = {
                "run_id": self.run_id,
                "session_id": self.session_id,
                "resume": None if self.resume is None else self.resume.to_json(),
            }
            self.config.pluginmanager.register(Controller(self.config, handoff), "opik_eval_controller")

    def _start(self) -> None:
        if backend(self.options.backend).checked_at_start and self.options.resume is None:
            try:  # credentials and the server are checked before anything runs
                self._store = self._open_store(create=False)
            except StoreError as error:
                raise pytest.UsageError(f"--eval-backend={self.options.backend}: {error}") from None
        # Ids given on the command line are checked before anything runs (exit code 4).
        if self.options.resume is not None:
            try:
                # Resuming never creates a store: an empty one could not hold the experiment.
                self._store = self._open_store(create=False)
                self.resume = load_target(self._store, self.options.resume)
            except (ExperimentNotFound, StoreError) as error:
                raise pytest.UsageError(f"--eval-resume={self.options.resume}: {error}") from None
            self.run_id = self.resume.run.id
            self.experiments = self.resume.experiments  # the same list: tests get bound to it
        if self.options.baseline is not None:
            try:
                if self._store is None:
                    self._store = self._open_store(create=False)
                self.baselines = Baselines(self._store, self.options.baseline)
            except (ExperimentNotFound, StoreError) as error:
                raise pytest.UsageError(f"--eval-baseline={self.options.baseline}: {error}") from None
        if is_controller(self.config):
            # The controller writes nothing itself, and its workers would each find a store that
            # cannot be written only when they create the run: say so once, before they start, as
            # a single process does when it creates the run.
            try:
                self._check_writable()
            except StoreError as error:
                raise pytest.UsageError(str(error)) from None

    def _check_writable(self) -> None:
        store = self._store = self._store or self._open_store(create=True)
        check: Callable[[], None] | None = getattr(store, "check_writable", None)
        if check is not None:  # a store a plugin supplies may not know how to tell
            check()

    # -- collection: marker -> selected items -> trials ------------------------------------

    @pytest.hookimpl(trylast=True)
    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        definition = metafunc.definition
        marker = definition.get_closest_marker(MARKER)
        if marker is None:
            return
        path, lineno, _ = definition.location
        where = f"{definition.nodeid} ({path}:{(lineno or 0) + 1})"
        spec = read_spec(marker, where)
        if self.resume is None:
            plan = plan_new(definition, spec, definition.path.parent, where, self.options, self._load_dataset)
        else:
            stored = self.resume.experiments_of(definition.nodeid, spec.dataset)
            if not stored:
                return  # not resumed: left unexpanded, and deselected
            plan = plan_resumed(definition, spec, stored, self.options, where)
            self._warn_on_changes(plan, stored[0])
        self.plans_seen.append(plan)
        cases = trial_cases(plan)
        _prune_own_args(metafunc)
        metafunc.fixturenames.append(CASE_ARG)
        params: list[TrialCase | RejectedItem] = [*cases, *plan.rejected]
        if params:
            metafunc.parametrize(CASE_ARG, params, ids=[param.case_id for param in params])
        else:
            reason = f"the selection matched no items of {plan.dataset.source}"
            metafunc.parametrize(
                CASE_ARG, [pytest.param(None, marks=pytest.mark.skip(reason=reason), id="no-items")]
            )

    def _load_dataset(self, spec: EvalSpec, base_dir: Path) -> Dataset:
        source = spec.dataset
        name = held_dataset(source)
        if name is None:
            return load_dataset(source, base_dir)
        filters = spec.filter.to_opik() if spec.filter is not None else None
        try:
            items = backend(self.options.backend).dataset(self.store, name, filters)
        except StoreError as error:
            raise DatasetError(str(error)) from None
        return Dataset(source=str(source), path=None, items=items, version=content_hash(items))

    def _warn_on_changes(self, plan: TestPlan, stored: ExperimentRecord) -> None:
        changes = changes_since(stored, plan.spec)
        if changes:
            notice(
                self.config,
                f"{plan.where}: the test selects differently from experiment {stored.id} "
                f"({'; '.join(changes)}); resume replays the {len(stored.items)} items stored "
                "with the experiment",
            )

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        for item in items:
            case = _case_of(item)
            if case is not None:
                assert isinstance(item, pytest.Function)
                item.stash[TRIAL_KEY] = Trial(case, params_of(item, case))
                if case.plan.threads > 1:
                    self._check_concurrency(item, case.plan)
        soft_without_gates = [
            p.where
            for p in self.plans_seen
            if p.gates.soft and not p.gates.has_gates() and p.gates.pass_threshold is None
        ]
        if soft_without_gates:
            notice(
                config,
                "soft mode with no gate: scores can never fail this session "
                f"({', '.join(soft_without_gates)}); add --eval-fail-under=METRIC=MIN or "
                "--eval-min-pass-rate=RATE",
            )
        if self.resume is not None:
            keep, deselected = self.resume.select_pending(items)
            if deselected:
                config.hook.pytest_deselected(items=deselected)
                items[:] = keep

    def _check_concurrency(self, item: pytest.Function, plan: TestPlan) -> None:
        fixture = function_scoped_fixture(item)
        if fixture is not None:
            plan.threads = 1
            notice(
                self.config,
                f"{plan.where} uses the function-scoped fixture {fixture!r}, so its trials run one "
                "at a time; give the fixture a wider scope (module, session) to run them concurrently",
            )
            return
        fixture = async_fixture(item)
        if fixture is not None:
            plan.threads = 1
            notice(
                self.config,
                f"{plan.where} uses the async fixture {fixture!r}, whose objects belong to the event "
                "loop it was set up on, so its trials run one at a time, on that loop; to run them "
                "concurrently (each on an event loop of its own), make the fixture a plain function "
                "or create its objects in the test",
            )

    def pytest_report_collectionfinish(self) -> str | None:
        if self.resume is None:
            return None
        pending, total = self.resume.pending(), len(self.resume.trials)
        return (
            f"eval resume: {pending} pending of {total} planned trials in "
            f"{len(self.resume.experiments)} experiment(s) of run {self.resume.run.id}"
        )

    # -- the run is written before any trial starts ---------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> None:
        collection_failed = session.testsfailed and not self.config.option.continue_on_collection_errors
        if collection_failed or self.config.option.collectonly:
            return
        if self.resume is not None:
            self._items = session.items
            self._position = {item.nodeid: index for index, item in enumerate(session.items)}
            return
        self._items = session.items
        self._position = {item.nodeid: index for index, item in enumerate(session.items)}
        planned = session.items if self.shards is None else self.shards.planned
        trials = [t for t in _trials(planned)]
        if trials:
            self._create_run(trials)

    def _create_run(self, trials: list[tuple[pytest.Item, Trial]]) -> None:
        with _no_gc_pass():
            plan = plan_run(self.config, self.run_id, trials, self.options.run_name)
            try:
                self.store().create_run(plan.run, plan.experiments, plan.trials)
            except StoreError as error:
                if not self.worker:
                    raise pytest.UsageError(f"{error}") from None
                # The controller found the store writable before this worker started: it stopped
                # being so since (a full disk). An error here would be an INTERNALERROR; the
                # worker's first trial fails with the one line instead, as when a write fails mid-run.
                self.unusable = error
                return
        self.run_id = plan.run.id
        self.experiments = plan.experiments

    # -- each trial ----------------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        # A dataset item that could not be processed: its message, before any fixture is set up.
        callspec = getattr(item, "callspec", None)
        rejected = callspec.params.get(CASE_ARG) if callspec is not None else None
        if isinstance(rejected, RejectedItem):
            pytest.fail(rejected.message, pytrace=False)

    @pytest.hookimpl(tryfirst=True)
    def pytest_pyfunc_call(self, pyfuncitem: pytest.Function) -> bool | None:
        trial = pyfuncitem.stash.get(TRIAL_KEY, None)
        if trial is None:
            return None
        if self.unusable is not None:
            self._stop(pyfuncitem, self.unusable)
        threads = trial.case.plan.threads
        try:
            if threads <= 1:
                trial_life.run(pyfuncitem, trial, self.store(), self.session_id)
            else:
                self.pool.run(pyfuncitem, self._window(pyfuncitem, trial, threads), self._job, threads)
        except StoreError as error:
            failure = error
        else:
            return True
        self._stop(pyfuncitem, failure)  # outside the except block: one line, not a chain

    def _stop(self, item: pytest.Item, error: StoreError) -> NoReturn:
        """The store cannot record trials (a full disk, a read-only file): this trial fails with
        the one line that says why, and no further trial starts, as with -x."""
        self.store_failure = item.session.shouldfail = str(error)
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

        if not self.worker:
            start = self._position[item.nodeid] + 1
            return same_test(iter(self._items[start : start + threads * LOOKAHEAD]))
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
        task = trial_life.threaded_task(ahead, trial, shared)
        return functools.partial(trial_life.run, ahead, trial, self.store(), self.session_id, task)

    @pytest.hookimpl(wrapper=True, tryfirst=True)  # outside any plugin that replaces item.obj
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None]:
        if not isinstance(item, pytest.Function) or TRIAL_KEY not in item.stash:
            return (yield)
        with trial_life.capturing(item):
            return (yield)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        trial = item.stash.get(TRIAL_KEY, None)
        if trial is not None and call.when == "call" and report.passed and trial.soft_failure:
            # A plain str, so the report stays JSON-safe for pytest-xdist.
            report.eval_soft_failure = trial.soft_failure  # type: ignore[attr-defined]
        return report

    @pytest.hookimpl(tryfirst=True)
    def pytest_report_teststatus(
        self, report: pytest.TestReport
    ) -> tuple[str, str, tuple[str, dict[str, bool]]] | None:
        if report.when == "call" and getattr(report, "eval_soft_failure", None):
            return "soft-failed", "f", ("SOFT-FAILED", {"yellow": True})
        return None

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> None:
        # tryfirst: before pytest tears down the fixtures, so a failing fixture teardown
        # cannot leave a scored trial pending.
        trial = item.stash.get(TRIAL_KEY, None)
        if trial is not None:
            try:
                trial_life.clear_marker(item, trial, self.store())
            except StoreError as error:
                failure = error
            else:
                return
            self._stop(item, failure)

    # -- the end: reports and the exit status ----------------------------------------------

    @pytest.hookimpl(tryfirst=True)  # before junitxml writes its file
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self.pool.stop()
        if self.worker:
            if self._store is not None:
                try:
                    self._store.flush()  # the controller reports what the store holds
                except StoreError as error:
                    notice(self.config, str(error))
                self._take_store_notices()
            self.config.workeroutput[WORKER_NOTICES] = notices_of(self.config)  # type: ignore[attr-defined]
            return
        try:
            if not self.experiments and is_controller(self.config):
                self.experiments = self._run_experiments()
            if not self.experiments:
                return
            self._finish(session)
        except StoreError as error:
            # The store cannot be read or written any more: say so in one line; what it held
            # before is intact, and the reports that could be written were.
            notice(self.config, str(error))
            if session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
        self._take_store_notices()

    def _finish(self, session: pytest.Session) -> None:
        with _no_gc_pass():
            self.results = judge_experiments(
                self.store(),
                self.experiments,
                self.session_id,
                self._settings_of,
                self.baselines or Baselines(self.store(), None),
                self.options.resume_command,
                self._in_my_shard if self.options.shard else None,
            )
        finished = self.config.hook.pytest_opik_eval_experiment_finished
        step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
        report = None
        # The report models (one per trial) are built only when something reads them.
        if self.options.report_path or self.options.html_path or step_summary or finished.get_hookimpls():
            report = Report(
                run_id=self.run_id,
                resumed=None if self.resume is None else self.resume.resolved,
                experiments=[r.report() for r in self.results],
            )
            self._write_reports(report, step_summary)
        add_suite_properties(self.config, suite_properties(self.results))
        unrecorded: StoreError | None = None
        for position, result in enumerate(self.results):
            try:
                self.store().record_verdict(
                    result.id, passed(result) and not result.summary.pending, aggregates(result)
                )
            except StoreError as error:
                unrecorded = error  # only last-passing baselines miss it: the rest goes on
            if report is not None:
                finished(config=self.config, experiment=report.experiments[position])
        if unrecorded is not None and str(unrecorded) != self.store_failure:
            notice(
                self.config, f"the verdicts for --eval-baseline=last-passing were not recorded: {unrecorded}"
            )
        failed = not all(passed(r) for r in self.results)
        # The exit status an uninterrupted run of the whole experiments would have had.
        if session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            if failed:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
            elif self.resume is not None:
                session.exitstatus = pytest.ExitCode.OK
        self.unsent = self.store().flush()

    def _take_store_notices(self) -> None:
        if self._store is None:
            return  # never opened, or it could not be: nothing to say beyond that
        for message in self._store.notices():
            notice(self.config, message)

    def _write_reports(self, report: Report, step_summary: str | None) -> None:
        # Each report on its own: one that cannot be written (a full disk) does not keep the
        # others from being written.
        if self.options.report_path is not None:
            with self._writing("JSON report", self.options.report_path):
                write_report(report, self.options.report_path)
        if self.options.html_path is not None:
            from pytest_opik_eval.reports.html import write_html

            with self._writing("HTML report", self.options.html_path):
                items = {e.id: e.items for e in self.experiments}
                write_html(report, items, self.options.html_path, self.options.resume_command)
        if step_summary:
            from pytest_opik_eval.reports.markdown import step_summary as markdown

            with self._writing("GitHub step summary", Path(step_summary)):
                with open(step_summary, "a", encoding="utf-8") as file:
                    file.write(markdown(report, self.options.resume_command) + "\n")

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

    def _run_experiments(self) -> list[ExperimentRecord]:
        """On the controller, which does not collect: the experiments its workers recorded."""
        # Reading back from the server spends the end's budget (--eval-sync-timeout), which the
        # drain in flush() then shares.
        end_begins(self.store())
        try:
            return self.store().find(self.run_id)[1]
        except ExperimentNotFound:
            return []  # no eval test ran

    def _settings_of(self, experiment: ExperimentRecord) -> GateSettings:
        if self.resume is None:
            return experiment.gates
        return settings_for_resume(experiment.gates, self.options.cli_gates)

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        print_notices(self.config, terminalreporter)
        if not self.results:
            return
        terminalreporter.section("eval summary")
        if self.resume is not None and not any(r.ran_this_session(t) for r in self.results for t in r.trials):
            pending = sum(r.summary.pending for r in self.results)
            if not pending:
                terminalreporter.line(
                    f"nothing pending: every planned trial of {self.resume.requested} is completed"
                )
        for line in summary_lines(self.results, self.options.resume_command, self.resume is not None):
            terminalreporter.line(line)
        pending_total = sum(r.summary.pending for r in self.results)
        if pending_total and len(self.results) > 1 and self.run_id:
            terminalreporter.line(
                f"resume all {pending_total} pending trials: {self.options.resume_command(self.run_id)}"
            )
        if self.unsent:
            terminalreporter.line(escape_control(self.unsent), yellow=True)
        gates = gate_lines(self.results)
        if gates:
            terminalreporter.section("eval gates")
            for line in gates:
                terminalreporter.line(line, red=line.startswith("NOT MET"), green=line.startswith("met"))

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
            if self.results and not all(passed(r) for r in self.results):
                stats = terminalreporter.stats
                for key, count in verdict_counts(self.results).items():
                    stats.setdefault(key, []).extend(_VerdictPart() for _ in range(count))
                # pytest colours the line red when "failed" is among the stats; this entry is not
                # counted as a failed test (the protocol pytest's own reports follow).
                stats.setdefault("failed", []).append(_VerdictPart(counted=False))

    def pytest_unconfigure(self) -> None:
        if self._store is not None:
            self._store.close()


class _VerdictPart:
    """An entry of the terminal reporter's stats for the eval verdict: pytest's last line shows
    how many there are under their key."""

    def __init__(self, *, counted: bool = True) -> None:
        self.count_towards_summary = counted


@contextlib.contextmanager
def _no_gc_pass() -> Iterator[None]:
    """Python's cyclic garbage collector paused while the run's plan or the session's results
    are built, one record per trial and no cycles among them: the allocations would otherwise
    trigger full passes over the whole session's heap (every test item), each costing as much
    as hundreds of trials."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _prune_own_args(metafunc: pytest.Metafunc) -> None:
    """The trial passes eval_item and eval_trial to its task itself (trial.task_args), so
    pytest need not set them up as fixtures, unless another fixture of the test needs them
    (and then shares them with the task, as pytest does). Pruning the closure is what pytest
    itself does for the arguments that direct parametrization shadows."""
    definitions = (fixture_definition(metafunc.definition, name) for name in metafunc.fixturenames)
    needed = {arg for definition in definitions if definition is not None for arg in definition.argnames}
    metafunc.fixturenames[:] = [n for n in metafunc.fixturenames if n not in OWN_ARGS or n in needed]


def _case_of(item: pytest.Item) -> TrialCase | None:
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return None
    case = callspec.params.get(CASE_ARG)
    return case if isinstance(case, TrialCase) else None


def _trials(items: list[pytest.Item]) -> Iterator[tuple[pytest.Item, Trial]]:
    for item in items:
        trial = item.stash.get(TRIAL_KEY, None)
        if trial is not None:
            yield item, trial
