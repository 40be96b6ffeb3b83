"""Running up to N trials of a test at the same time, while each stays its own test case.

pytest runs test cases one after the other. When a trial's call phase starts, this also queues
the tasks (and scoring) of the next trials of the same test, up to LOOKAHEAD x N test cases
ahead, for at most N of the pool's threads at once (an earlier test may have started more);
each test case then waits for its own trial and is reported in order, with its own outcome.
Queuing further ahead than N keeps the threads busy while one slow model call holds up the
reporting. A trial's pending marker is recorded when its task really starts, and is cleared
only in its own test case's teardown: a trial that finished in the background but whose test
case was never reported (-x, --maxfail, Ctrl-C) stays pending.

"The next trials" are those this process runs: the following items of the session, or, on a
pytest-xdist worker, the test cases the controller has sent it (``_compat_xdist.WorkerQueue``).

Only tests whose fixtures are all shared (session, package, module or class scope) plus
``eval_item`` and ``eval_trial``, and none of them async, can run ahead: the background trials
reuse the shared fixture objects, from several threads at once, each trial on an event loop of
its own, while an async fixture's objects belong to the loop it was set up on. The threads
are daemons, so Ctrl-C never waits for a model call in flight: those trials are abandoned as
pending.
"""

from __future__ import annotations

import collections
import dataclasses
import inspect
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future

import pytest

from pytest_opik_eval._compat import fixture_definition
from pytest_opik_eval.collect.trials import ANYIO_BACKEND, OWN_ARGS

# How many test cases per thread are queued ahead of the one being reported.
LOOKAHEAD = 4


def function_scoped_fixture(item: pytest.Function) -> str | None:
    """The first function-scoped fixture the test uses (other than its own), if any."""
    params = getattr(item, "callspec", None)
    direct = set(params.params) if params is not None else set()
    for name in item.fixturenames:
        # anyio_backend names the backend anyio runs the test with (anyio's documentation shows
        # it as a function-scoped fixture): a trial run ahead reads it, and never shares objects.
        if name in OWN_ARGS or name in ("request", ANYIO_BACKEND) or name in direct:
            continue
        definition = fixture_definition(item, name)
        if definition is not None and definition.scope == "function":
            return name
    return None


def async_fixture(item: pytest.Function) -> str | None:
    """The first fixture the test uses that is a coroutine or an async generator function (set
    up on the event loop of pytest-asyncio or anyio), if any."""
    for name in item.fixturenames:
        definition = fixture_definition(item, name)
        if definition is None:
            continue
        # pytest-asyncio before 0.24 replaces the function of an async fixture by a sync one that
        # runs it on the loop, made with functools.wraps: the fixture's own function is below.
        function = inspect.unwrap(definition.func)
        if inspect.iscoroutinefunction(function) or inspect.isasyncgenfunction(function):
            return name
    return None


def prepare_threads() -> None:
    """On the main thread, before trials run in the pool's threads: import what they would
    otherwise import first, mid-run, where the other threads' trials could meet it half made.
    That is genai-prices, which prices spans and the usage of recorded calls as each trial ends
    (see ``pricing.preload``): imported whenever it is installed, since a task may import a
    traced SDK (openai, opik) itself, in the threads, once they run."""
    from pytest_opik_eval.run import pricing

    pricing.preload()


class Pool:
    """Daemon threads that run trials ahead; started on first use, and kept for the session's
    later tests. Each queued trial carries its test's limit (``--eval-threads``, the marker's
    ``task_threads``): a thread takes it up only while fewer trials than that are running, so a
    test with 2 threads after one with 8 runs 2 at once, not 8, and the budget (checked when a
    thread takes a trial up) is overshot by at most one trial per thread the test may use."""

    def __init__(self) -> None:
        self._ready = threading.Condition()  # guards _jobs, _running and _stopped
        self._jobs: collections.deque[_Job] = collections.deque()
        self._running = 0
        self._threads: list[threading.Thread] = []
        self._futures: dict[str, Future[None]] = {}  # the main thread's own
        self._stopped = False

    def run(
        self,
        item: pytest.Function,
        window: Sequence[pytest.Function],
        job: Callable[[pytest.Function, pytest.Function], Callable[[], None]],
        threads: int,
    ) -> None:
        """Start the trials of ``window`` (this test case first) that are not started yet, each
        as ``job(trial's test case, item)`` makes it, at most ``threads`` at once, then wait for
        this test case's trial; re-raise what it raised."""
        while len(self._threads) < threads:
            thread = threading.Thread(target=self._work, name="opik-eval-trial", daemon=True)
            thread.start()
            self._threads.append(thread)
        queued = []
        for ahead in window:
            if ahead.nodeid not in self._futures and not self._stopped:
                future: Future[None] = Future()
                self._futures[ahead.nodeid] = future
                queued.append(_Job(future, job(ahead, item), threads))
        with self._ready:
            self._jobs.extend(queued)
            self._ready.notify(len(queued))
        self._futures.pop(item.nodeid).result()

    def stop(self) -> None:
        """No new trial starts; trials in flight are abandoned (they stay pending)."""
        with self._ready:
            self._stopped = True
            for future in self._futures.values():
                future.cancel()
            self._futures.clear()
            self._jobs.clear()
            self._ready.notify_all()

    def _startable(self) -> bool:
        return bool(self._jobs) and self._running < self._jobs[0].limit

    def _work(self) -> None:
        while True:
            with self._ready:
                self._ready.wait_for(lambda: self._stopped or self._startable())
                if self._stopped:
                    return
                job = self._jobs.popleft()
                if not job.future.set_running_or_notify_cancel():
                    continue
                self._running += 1
            try:
                job.run()
            except BaseException as error:  # re-raised in the test case's own call phase
                outcome: BaseException | None = error
            else:
                outcome = None
            with self._ready:
                self._running -= 1
                self._ready.notify()  # one slot is free: one waiting thread may take a trial
            if outcome is None:
                job.future.set_result(None)
            else:
                job.future.set_exception(outcome)


@dataclasses.dataclass(frozen=True)
class _Job:
    future: Future[None]
    run: Callable[[], None]
    limit: int  # the trials, this one included, that may run at once when it starts
