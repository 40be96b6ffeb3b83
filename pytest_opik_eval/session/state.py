"""What the phases of one eval session share, on ``config.stash``: one object, made when the
session's plugins are registered, read by each phase; no phase holds another. Each part has one
writer: the target is decided once by the start (``target.Target``), the run's resources follow
from it (``resources.Resources``), the store is opened once (``store_handle.StoreHandle``),
collection adds the plans it makes, and running records what its trials made and met
(``RunOutcome``).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import pytest

from pytest_opik_eval.collect.metric_specs import MetricSpecError, load_metrics
from pytest_opik_eval.run.distributed import ShardSelector, handed_to_worker
from pytest_opik_eval.session.resources import Resources
from pytest_opik_eval.session.store_handle import StoreHandle
from pytest_opik_eval.session.target import Target

if TYPE_CHECKING:
    from pytest_opik_eval.collect.trials import TestPlan
    from pytest_opik_eval.exceptions import StoreError
    from pytest_opik_eval.settings import EvalOptions
    from pytest_opik_eval.store import ExperimentRecord

# The names the session's plugins are registered under, in one place: ``register`` and
# ``unregister`` use them, and the pytest-xdist controller drops the phases it does not run.
START_PLUGIN = "opik_eval_start"
COLLECTION_PLUGIN = "opik_eval_collection"
RUNNING_PLUGIN = "opik_eval_running"
STATUS_PLUGIN = "opik_eval_status"
# Registered by the running phase as the trials start, only when they have something to do.
REJECTED_ITEMS_PLUGIN = "opik_eval_rejected_items"
ASYNC_CAPTURE_PLUGIN = "opik_eval_async_capture"
CALL_REPORTS_PLUGIN = "opik_eval_call_reports"
ENDING_PLUGIN = "opik_eval_ending"
WORKER_ENDING_PLUGIN = "opik_eval_worker_ending"
CONTROLLER_PLUGIN = "opik_eval_controller"


@dataclasses.dataclass
class RunOutcome:
    """What this process's trials made and met, written by ``running.Running`` only: the run's
    experiments it created (a resumed run's are the target's), and the store failures that
    stopped its trials."""

    experiments: list[ExperimentRecord] = dataclasses.field(default_factory=list)
    # A pytest-xdist worker could not create the run: its trials fail with this error.
    not_created: StoreError | None = None
    # Why trials stopped: the store cannot be written (a full disk, a read-only file).
    store_broken_reason: str | None = None
    # The judges' score names its trials taught (run/judges.ScoreNames), by experiment id: what
    # changed of each experiment's ``judges`` (see store/records.learned_judges), recorded in the
    # store as learned, for the process that reports (a pytest-xdist worker hands it on).
    judges: dict[str, dict[str, str | None]] = dataclasses.field(default_factory=dict)


class SessionState:
    """The state of one eval session that its phases share: the options, the target and the
    resources once the session has started, the store, the plans and what running them made."""

    def __init__(self, config: pytest.Config, options: EvalOptions) -> None:
        self.config = config
        self.options = options
        handed = handed_to_worker(config)
        self.worker = handed is not None  # a pytest-xdist worker: it runs trials, never reports
        # --eval-metric: the metrics a rescore scores with instead of each marker's. Every
        # process imports them (they are code): a bad spec stops the session before it starts.
        self.metrics: tuple[Any, ...] | None = None
        if options.metric_specs:
            self._load_metrics(options.metric_specs)
        self.shards = None if options.shard is None else ShardSelector(options.shard)
        self.store = StoreHandle(config, options, worker=self.worker)
        self.plans_seen: list[TestPlan] = []  # collection's, one per eval test it expands
        self.run = RunOutcome()
        self._target: Target | None = None
        self._resources: Resources | None = None
        if handed is not None:
            self.begin(Target.handed(handed))  # the controller decided

    def begin(self, target: Target, *, controller: bool = False) -> None:
        """The session's target, decided once (by the start, or by the pytest-xdist controller for
        its workers), and the resources it calls for; ``controller``: this process is one, which
        shares the budget's ledger with its workers."""
        assert self._target is None, "a session's target is decided once"
        self._target = target
        if target.resume is not None and target.rescore is not None:
            # A resumed rescore scores with the --eval-metric specs it was started with.
            specs = next((e.metric_specs for e in target.resume.experiments if e.metric_specs), None)
            if specs:
                self._load_metrics(tuple(specs))
        shared = self.worker or controller
        self._resources = Resources(
            self.config, self.options, target.session_id, target.budget, shared=shared, run_id=target.run_id
        )

    def _load_metrics(self, specs: tuple[str, ...]) -> None:
        try:
            self.metrics = load_metrics(specs)
        except MetricSpecError as error:
            raise pytest.UsageError(str(error)) from None

    @property
    def target(self) -> Target:
        """What the session works on: decided at ``pytest_sessionstart``."""
        assert self._target is not None, "read after the session has started"
        return self._target

    @property
    def resources(self) -> Resources:
        """The run's resources, made with the target."""
        assert self._resources is not None, "read after the session has started"
        return self._resources


STATE = pytest.StashKey[SessionState]()
