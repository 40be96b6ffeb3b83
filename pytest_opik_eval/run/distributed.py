"""Processes and machines. pytest-xdist: the controller decides, the workers follow.

The controller does not collect. Before the workers start, it hands each of them, through
``workerinput``, the run id and the session id (so every worker records into one run, with the
same experiment and trial ids, derived from the run id) and, when resuming, the snapshot of the
pending trials it read from the store (workers never read the store while collecting: their
collections must be identical). At the end, the controller reads the run back from the store
and reports, gates and sets the exit status for the trials of all workers.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

import pytest

from pytest_opik_eval.notices import WORKER_NOTICES, notice

if TYPE_CHECKING:
    from pytest_opik_eval.run.judge_cache import JudgeCache

HANDOFF = "opik_eval"  # the key in workerinput
# The keys in a worker's workeroutput that carry what its --eval-record recorder counted, what
# its judge cache did, and the judges' score names its trials taught.
WORKER_RECORDINGS = "opik_eval_recordings"
WORKER_JUDGE_COUNTS = "opik_eval_judge_cache"
WORKER_JUDGES = "opik_eval_judges"


def handed_to_worker(config: pytest.Config) -> dict[str, Any] | None:
    """What the controller handed this worker, or None outside a pytest-xdist worker."""
    workerinput = getattr(config, "workerinput", None)
    return None if workerinput is None else workerinput.get(HANDOFF)


def worker_id(config: pytest.Config) -> str:
    """This process's name among the session's: its pytest-xdist worker id (``gw0``), or
    ``main`` outside a worker."""
    workerinput = getattr(config, "workerinput", None)
    return "main" if workerinput is None else str(workerinput["workerid"])


def is_controller(config: pytest.Config) -> bool:
    """Whether pytest-xdist distributes this session's tests to workers (-n, --dist)."""
    return config.pluginmanager.has_plugin("dsession")


class Controller:
    """Registered on the controller of a distributed session, only when pytest-xdist is installed."""

    def __init__(
        self, config: pytest.Config, handoff: dict[str, Any], judge_cache: JudgeCache | None
    ) -> None:
        self.config = config
        self.handoff = handoff  # JSON-safe: it crosses to the workers
        self.judge_cache = judge_cache  # adds up the workers' counts

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput[HANDOFF] = self.handoff

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object) -> None:
        # The workers collect, so the advice about collection is theirs; each is printed once.
        output = getattr(node, "workeroutput", {})
        for message in output.get(WORKER_NOTICES, []):
            notice(self.config, message)
        if self.judge_cache is not None:
            self.judge_cache.counts.add(output.get(WORKER_JUDGE_COUNTS, {}))


def in_shard(shard: tuple[int, int], test: str, params: str, item_id: str, trial: int) -> bool:
    """Whether a trial belongs to shard K of N: a stable hash of the test, the item id and the
    trial (not Python's salted hash()), so every machine computes the same shares."""
    k, n = shard
    digest = hashlib.sha256(f"{test}[{params}]|{item_id}|{trial}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % n == k - 1


SHARD_PLUGIN = "opik_eval_shard"


class ShardSelector:
    """With --eval-shard=K/N: plans every trial the session selected, runs the K-th share."""

    def __init__(self, shard: tuple[int, int]) -> None:
        self.shard = shard
        self.planned: list[pytest.Item] = []  # the whole experiment, before this shard's share

    @pytest.hookimpl(trylast=True)  # after -k and -m, which decide what is planned
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        from pytest_opik_eval.collect.trials import TRIAL_KEY

        self.planned = list(items)
        keep: list[pytest.Item] = []
        deselected: list[pytest.Item] = []
        for item in items:
            trial = item.stash.get(TRIAL_KEY, None)
            mine = trial is None or in_shard(
                self.shard, trial.case.plan.test, trial.params, trial.case.item_id, trial.case.trial
            )
            (keep if mine else deselected).append(item)
        if deselected:
            config.hook.pytest_deselected(items=deselected)
            items[:] = keep
