"""The private state of pytest-xdist this plugin touches: a worker's queue of test cases, in
its ``WorkerInteractor`` (as pytest's own is in ``_compat.py``). When a pytest-xdist release
changes it, it is fixed here alone: ``tests/test_compat.py`` fails naming what is gone, and
keeps these names out of every other module. Without that state a worker runs no trial ahead of
its own test case: slower, never wrong."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import pytest


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
