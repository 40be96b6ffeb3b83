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
import itertools
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from pytest_opik_eval.notices import WORKER_NOTICES, notice
from pytest_opik_eval.run.judge_cache import WORKER_JUDGE_COUNTS, JudgeCache

HANDOFF = "opik_eval"  # the key in workerinput
# The key in a worker's workeroutput that carries what its --eval-record recorder counted.
WORKER_RECORDINGS = "opik_eval_recordings"


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


class WorkerQueue:
    """The test cases a pytest-xdist worker runs next, for the trials its threads run ahead.

    A worker collects every test case but runs only those the controller sends it, in the order
    they came; ``session.items`` after the running one may belong to other workers. pytest-xdist
    keeps what it was sent in private state of its ``WorkerInteractor`` (``torun``, a queue with
    a ``lock()``, ``nextitem_index`` and ``steal``, as in pytest-xdist 3.8); this class is the only
    place that touches it. ``find`` returns None when that state is not there, and the worker then
    runs no trial ahead of its own test case: slower, never wrong.

    With ``--dist worksteal`` the controller may take back ("steal") queued test cases. One whose
    trial already runs ahead must stay here, or it would run again elsewhere: a steal request
    that names one is answered (by pytest-xdist's own ``steal``, which hands back all of the
    requested test cases or none) only once those claimed are out of the queue, at the end of
    a later test case, so the controller is not drawn into asking again at once.
    """

    def __init__(self, interactor: Any, items: list[pytest.Item]) -> None:
        self._interactor = interactor
        self._items = items
        self._claimed: set[int] = set()  # indices of queued test cases whose trial runs ahead
        self._deferred: list[int] | None = None  # a steal request, answered once none is claimed
        self._steal = interactor.steal
        interactor.steal = self._guarded_steal  # pytest-xdist calls self.steal(indices)

    @classmethod
    def find(cls, config: pytest.Config, items: list[pytest.Item]) -> WorkerQueue | None:
        """This worker's queue, or None if pytest-xdist's private state is not as expected."""
        for plugin in config.pluginmanager.get_plugins():
            if type(plugin).__name__ != "WorkerInteractor":
                continue
            torun = getattr(plugin, "torun", None)
            if (
                callable(getattr(torun, "lock", None))
                and hasattr(plugin, "nextitem_index")
                and callable(getattr(plugin, "steal", None))
            ):
                return cls(plugin, items)
        return None

    def ahead(
        self, choose: Callable[[Iterator[pytest.Item]], list[pytest.Function]]
    ) -> list[pytest.Function]:
        """What ``choose`` picks of the test cases this worker runs next (in that order), which
        are then claimed: no steal takes them, so their trials can start ahead."""
        with self._interactor.torun.lock() as queued:
            indices: list[int] = []
            # nextitem_index was taken from the queue: it runs next. A shutdown marker ends both.
            for index in itertools.chain([self._interactor.nextitem_index], queued):
                if not isinstance(index, int):
                    break
                indices.append(index)
            chosen = choose(self._items[index] for index in indices)
            picked = {id(item) for item in chosen}
            self._claimed.update(index for index in indices if id(self._items[index]) in picked)
        return chosen

    def finished(self) -> None:
        """At the end of each test case: answer a steal request held back, if it can be now."""
        with self._interactor.torun.lock() as queued:
            self._claimed.intersection_update(queued)  # those run since are no longer claimed
            deferred, self._deferred = self._deferred, None
            if deferred is not None:
                self._guarded_steal(deferred)

    def _guarded_steal(self, indices: list[int]) -> None:
        # Called by pytest-xdist's channel thread, and by finished() in the main thread.
        with self._interactor.torun.lock():
            if self._claimed.isdisjoint(indices):
                self._steal(indices)
            else:
                self._deferred = list(indices)
