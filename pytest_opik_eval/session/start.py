"""The start of an eval session: the header line, and the checks made before anything runs (the
resume target, the baseline, the backend, a store that can be written), on this process or on the
pytest-xdist controller, which then hands its workers what they need.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import pytest

from pytest_opik_eval.collect.rescore import NotResumable, RescoreTarget, load_rescore_target, resumed_rescore
from pytest_opik_eval.collect.resume import ResumeTarget, load_target
from pytest_opik_eval.exceptions import ExperimentNotFound, StoreError
from pytest_opik_eval.notices import notice
from pytest_opik_eval.option_values import BATCH_MODES, RECORD_MODES, host_text
from pytest_opik_eval.run.distributed import Controller, is_controller
from pytest_opik_eval.session.batches import check_resume, collect_batches
from pytest_opik_eval.session.resources import batches_folder, recordings_folder
from pytest_opik_eval.session.state import COLLECTION_PLUGIN, CONTROLLER_PLUGIN, RUNNING_PLUGIN, SessionState
from pytest_opik_eval.session.target import Target
from pytest_opik_eval.store.backends import backend
from pytest_opik_eval.store.records import BudgetSetting
from pytest_opik_eval.verdict.summary import Baselines


class Start:
    """Registered on the process that reports: a single process, or the pytest-xdist controller.
    Decides the session's target, once, at ``pytest_sessionstart``."""

    def __init__(self, state: SessionState) -> None:
        self.state = state
        self.config = state.config
        self.options = state.options

    def pytest_report_header(self) -> list[str]:
        line = backend(self.options.backend).describe(self.options.store_path, self.options.store_source)
        target = self.state.target
        resume = target.resume
        if resume is not None:
            line += f"; resuming {resume.requested} (run {resume.run.id})"
        lines = [line]
        rescore = target.rescore
        if rescore is not None and resume is not None:
            lines.append(
                f"eval: a rescore of run {rescore.original.run.id}: its pending trials score the "
                "stored outputs, the task is not called"
            )
        elif rescore is not None:
            lines.append(
                f"eval: rescoring run {rescore.original.run.id}: {len(rescore.outputs)} trials from "
                "stored outputs, the task is not called"
            )
        budget = self.state.resources.budget
        if budget is not None:
            share = (
                f" (this shard's share of {budget.describe(budget.given.amount)})"
                if budget.shards > 1
                else ""
            )
            afresh = " (the run's, counted afresh)" if resume is not None and not self.options.budget else ""
            lines.append(f"eval budget: {budget.describe(budget.limit)}{share}{afresh}")
        if self.options.record_mode != "off":
            mode = self.options.record_mode
            allowed = ", ".join(host_text(*host) for host in self.options.record_allowed)
            lines.append(
                f"eval recordings: {recordings_folder(self.options)} (mode {mode}, from "
                f"{self.options.record_source}: {RECORD_MODES[mode]})"
                + (f"; left alone: {allowed}" if allowed else "")
            )
        if self.options.batch != "off":
            lines.append(
                f"eval batches: {batches_folder(self.options)} (--eval-batch={self.options.batch}, from "
                f"{self.options.batch_source}: {BATCH_MODES[self.options.batch]})"
            )
        return lines

    def pytest_sessionstart(self) -> None:
        self._check_backend_access()
        # Ids given on the command line are checked before anything runs (exit code 4).
        resume, rescored = self._load_resume_target()
        target = Target.new(
            run_name=self.options.run_name,
            resume=resume,
            rescore=rescored or self._load_rescore_target(),
            baselines=self._load_baseline(),
            budget=self._budget_setting(resume),
            drift_since=self._load_drift_since(),
        )
        controller = is_controller(self.config)
        self.state.begin(target, controller=controller)
        if resume is not None:
            self._collect_batches(resume)
        if controller:
            self._start_controller()

    def _check_backend_access(self) -> None:
        targeted = self.options.resume is not None or self.options.rescore is not None
        if backend(self.options.backend).checked_at_start and not targeted:
            try:  # credentials and the server are checked before anything runs
                self.state.store.existing()
            except StoreError as error:
                raise pytest.UsageError(f"--eval-backend={self.options.backend}: {error}") from None

    def _load_resume_target(self) -> tuple[ResumeTarget | None, RescoreTarget | None]:
        """The resumed run, and for a rescore run the outputs its pending trials score."""
        if self.options.resume is None:
            return None, None
        try:
            # Resuming never creates a store: an empty one could not hold the experiment.
            store = self.state.store.existing()
            resume = load_target(store, self.options.resume)
            return resume, resumed_rescore(store, resume)
        except (ExperimentNotFound, StoreError, NotResumable) as error:
            raise pytest.UsageError(f"--eval-resume={self.options.resume}: {error}") from None

    def _collect_batches(self, resume: ResumeTarget) -> None:
        """--eval-batch: the resumed run's ended batches collected into its recordings, before
        any trial (or pytest-xdist worker) starts."""
        run_id = resume.run.id
        check_resume(self.options, run_id, resume.requested)
        if self.options.batch != "off":
            resources = self.state.resources
            resources.batches_collected = collect_batches(
                self.options,
                run_id,
                self.state.target.session_id,
                functools.partial(notice, self.config),
                resources.budget,
            )

    def _budget_setting(self, resume: ResumeTarget | None) -> BudgetSetting | None:
        """The budget: given to this session (command line, then ini), else the one the resumed
        run was started with, counted afresh."""
        if self.options.budget is not None or resume is None:
            return self.options.budget
        return resume.run.budget

    def _load_rescore_target(self) -> RescoreTarget | None:
        requested = self.options.rescore
        if requested is None:
            return None
        try:
            # As for a resume, the store must exist: an empty one could not hold the outputs.
            rescore = load_rescore_target(
                self.state.store.existing(), requested, labelled=self.options.calibrate
            )
        except (ExperimentNotFound, StoreError) as error:
            raise pytest.UsageError(f"--eval-rescore={requested}: {error}") from None
        if self.options.calibrate and not rescore.original.experiments:
            raise pytest.UsageError(
                f"--eval-rescore={requested} --eval-calibrate: no experiment of run "
                f"{rescore.original.run.id} has items with human labels, so there is no judge to "
                "calibrate or check for drift; label items of its datasets (docs/how-to/judge-labels.md)"
            )
        missing = rescore.never_completed
        if missing:
            run = rescore.original.run.id
            trials = f"{missing} trial{'s' if missing > 1 else ''} of run {run}"
            notice(
                self.config,
                f"eval rescore: {trials} never completed: no stored output to score, not rescored; "
                "resume the original first "
                f"({self.options.resume_command(rescore.original.resolved)}), then rescore it",
            )
        return rescore

    def _load_baseline(self) -> Baselines | None:
        if self.options.baseline is None:
            return None
        try:
            return Baselines(self.state.store.existing(), self.options.baseline)
        except (ExperimentNotFound, StoreError) as error:
            raise pytest.UsageError(f"--eval-baseline={self.options.baseline}: {error}") from None

    def _load_drift_since(self) -> str | None:
        """--eval-judge-drift-since: the run's id (given by its id or name)."""
        given = self.options.judge_drift_since
        if given is None:
            return None
        try:
            run, _ = self.state.store.existing().find(given)
        except (ExperimentNotFound, StoreError) as error:
            raise pytest.UsageError(f"--eval-judge-drift-since={given}: {error}") from None
        return run.id

    def _start_controller(self) -> None:
        # The controller writes nothing itself, and its workers would each find a store that
        # cannot be written only when they create the run: say so once, before they start, as
        # a single process does when it creates the run.
        try:
            self._check_writable()
        except StoreError as error:
            raise pytest.UsageError(str(error)) from None
        # The controller does not collect and runs no trial: its workers do.
        for name in (COLLECTION_PLUGIN, RUNNING_PLUGIN):
            plugin = self.config.pluginmanager.get_plugin(name)
            if plugin is not None:
                self.config.pluginmanager.unregister(plugin, name)
        self.config.pluginmanager.register(
            Controller(self.config, self.state.target.handoff(), self.state.resources.judge_cache),
            CONTROLLER_PLUGIN,
        )

    def _check_writable(self) -> None:
        store = self.state.store.get()
        check: Callable[[], None] | None = getattr(store, "check_writable", None)
        if check is not None:  # a store a plugin supplies may not know how to tell
            check()
