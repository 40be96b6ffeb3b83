"""What the phases of one eval session share, on ``config.stash``: one object, made when the
session's plugins are registered, read by each phase; no phase holds another.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_opik_eval.collect.metric_specs import MetricSpecError, load_metrics
from pytest_opik_eval.collect.rescore import RescoreTarget
from pytest_opik_eval.collect.resume import ResumeTarget
from pytest_opik_eval.collect.trials import TestPlan
from pytest_opik_eval.exceptions import StoreError
from pytest_opik_eval.ids import uuid7, uuid7_from_name
from pytest_opik_eval.notices import notice
from pytest_opik_eval.run.budget import Budget, ledger_path
from pytest_opik_eval.run.concurrency import Pool
from pytest_opik_eval.run.distributed import ShardSelector, handed_to_worker, worker_id
from pytest_opik_eval.run.judge_cache import JUDGE_CACHE, JudgeCache
from pytest_opik_eval.settings import judge_cache_enabled
from pytest_opik_eval.store import ExperimentRecord, Store
from pytest_opik_eval.store.backends import backend
from pytest_opik_eval.store.records import BudgetSetting
from pytest_opik_eval.verdict.results import ExperimentResult
from pytest_opik_eval.verdict.summary import Baselines

if TYPE_CHECKING:
    from pytest_opik_eval.run.recording import Recorder, RecordingCounts
    from pytest_opik_eval.settings import EvalOptions

# The names the session's plugins are registered under, in one place: ``register`` and
# ``unregister`` use them, and the pytest-xdist controller drops the phases it does not run.
START_PLUGIN = "opik_eval_start"
COLLECTION_PLUGIN = "opik_eval_collection"
RUNNING_PLUGIN = "opik_eval_running"
STATUS_PLUGIN = "opik_eval_status"
ENDING_PLUGIN = "opik_eval_ending"
WORKER_ENDING_PLUGIN = "opik_eval_worker_ending"
CONTROLLER_PLUGIN = "opik_eval_controller"


class SessionState:
    """The state of one eval session that its phases share: the ids, the resume target, the
    experiments and their results, and the store."""

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
        self.rescore: RescoreTarget | None = None  # --eval-rescore: loaded at the start
        if handed and handed.get("rescore") is not None:
            self.rescore = RescoreTarget.from_json(handed["rescore"])
        # --eval-metric: the metrics a rescore scores with instead of each marker's. Every
        # process imports them (they are code): a bad spec stops the session before it starts.
        self.metrics: tuple[Any, ...] | None = None
        if options.metric_specs:
            try:
                self.metrics = load_metrics(options.metric_specs)
            except MetricSpecError as error:
                raise pytest.UsageError(str(error)) from None
        if handed:
            self.run_id: str = handed["run_id"]
        else:
            self.run_id = uuid7_from_name(options.run_name) if options.run_name else uuid7()
        self.shards: ShardSelector | None = None
        if options.shard is not None:
            self.shards = ShardSelector(options.shard)
        self.experiments: list[ExperimentRecord] = []
        self.results: list[ExperimentResult] = []
        self.plans_seen: list[TestPlan] = []
        self.baselines: Baselines | None = None
        self.unsent: str | None = None  # what the store could not send, for the summary
        self.store_failure: str | None = None  # why trials stopped: the store cannot be written
        self.unusable: StoreError | None = None  # a worker could not create the run
        self.pool = Pool()
        # --eval-budget: set at the start (see ``start_budget``); a worker gets the controller's.
        self.budget: Budget | None = None
        if handed and handed.get("budget") is not None:
            self.start_budget(BudgetSetting.model_validate(handed["budget"]))
        # --eval-judge-cache: each process, the controller too (it adds up its workers' counts).
        self.judge_cache: JudgeCache | None = None
        if judge_cache_enabled(options.judge_cache, options.record_mode):
            # Strict in a strict replay: a judge score not cached fails its trial, no network. Not
            # in a rescore, whose point is to call the judges on the stored outputs.
            strict = options.record_mode == "none" and options.rescore is None
            folder = options.store_path.parent / JUDGE_CACHE
            self.judge_cache = JudgeCache(folder, strict=strict, notify=functools.partial(notice, config))
        self.recorder: Recorder | None = None  # --eval-record, where trials run: see start_recording

    def recordings_folder(self) -> Path:
        """Where --eval-record keeps its files: ``recordings/`` in the store's folder."""
        from pytest_opik_eval.store.http_recordings import recordings_folder

        return recordings_folder(self.options.store_path.parent)

    def start_recording(self) -> None:
        """With --eval-record, this process's recorder, patched in until ``stop_recording``: where
        trials run (a single process, or each pytest-xdist worker), before the first one. Not in a
        rescore: it calls no task, and its judges run live."""
        options = self.options
        if options.record_mode == "off" or options.rescore is not None or self.recorder is not None:
            return
        from pytest_opik_eval.run.recording import Recorder

        self.recorder = Recorder(
            mode=options.record_mode,
            folder=self.recordings_folder(),
            session_id=self.session_id,
            worker=worker_id(self.config),
            allowed=options.record_allowed,
            # Strict replay's judges run live only without the judge cache (--eval-judge-cache=off).
            live_judges=self.judge_cache is None or not self.judge_cache.strict,
            notify=functools.partial(notice, self.config),
        )
        self.recorder.start()

    def stop_recording(self) -> RecordingCounts | None:
        """The recorder unpatched and its journal closed (the process that ends the session folds
        the journals); what it counted, or None where none ran."""
        if self.recorder is None:
            return None
        self.recorder.stop()
        return self.recorder.counts()

    def budget_setting(self) -> BudgetSetting | None:
        """The budget: given to this session (command line, then ini), else the one the resumed
        run was started with, counted afresh."""
        if self.options.budget is not None or self.resume is None:
            return self.options.budget
        return self.resume.run.budget

    def start_budget(self, given: BudgetSetting | None, *, controller: bool = False) -> None:
        """This session's budget: shared through a ledger by the processes of a pytest-xdist
        session (the workers and their controller), a shard's share of it with --eval-shard."""
        if given is None:
            return
        shared = self.worker or controller
        ledger = ledger_path(self.options.store_path, self.session_id) if shared else None
        shards = self.options.shard[1] if self.options.shard is not None else 1
        self.budget = Budget(given, shards, ledger)

    def store(self) -> Store:
        """The store, opened (and created) on first use. A method, not a property: pytest before
        8.3.3 reads every attribute of a plugin object when it looks for fixtures, and so would
        create the store even under ``--co``."""
        if self._store is None:
            self._store = self._open_store(create=True)
        return self._store

    def existing_store(self) -> Store:
        """The store, opened on first use without creating it (for the checks at the start)."""
        if self._store is None:
            self._store = self._open_store(create=False)
        return self._store

    def opened_store(self) -> Store | None:
        """The store if it was opened, without opening it."""
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

    def take_store_notices(self) -> None:
        if self._store is None:
            return  # never opened, or it could not be: nothing to say beyond that
        for message in self._store.notices():
            notice(self.config, message)

    def close_store(self) -> None:
        if self._store is not None:
            self._store.close()


STATE = pytest.StashKey[SessionState]()
