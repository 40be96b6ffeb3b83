"""Deferring the app's LLM requests to provider batches (``--eval-batch``), in each process where
trials run: the recorder asks :class:`Batcher` about each request its recordings cannot answer.

A batchable request is not sent: it is queued (a ``deferred`` line in the run's ledger, its raw
body in memory only) and answered with an HTTP 400 that says so, as a strict replay answers a
miss: SDKs do not retry it, and whatever the app does with the error, the trial's output is
discarded and the trial left pending with the reason (``run/trial.py``). The session's end submits
the queue (``run/batch_submit.py``); the next resume collects the answers into the trial's
recordings (``run/batch_collect.py``), which its task replays up to its next request: a task
that makes k dependent calls takes k rounds.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_opik_eval.option_values import Host
from pytest_opik_eval.run.batch_requests import Batchable, batchable, custom_id, provider_of
from pytest_opik_eval.run.http_calls import error_answer
from pytest_opik_eval.store.batch_ledger import Deferred, Group, Ledger, Writer

if TYPE_CHECKING:
    from pytest_opik_eval.run.recording import TrialKey, TrialScope
    from pytest_opik_eval.store.http_recordings import RecordedRequest

BATCHED_TYPE = "opik_eval_batched"
MAX_TRIES = 3  # submissions of one request: one the provider keeps refusing is a bug to see
_DECISION = "_opik_eval_batchable"  # the attribute of vcrpy's request that keeps the decision


@dataclass(frozen=True)
class Queued:
    custom_id: str
    group: Group
    body: bytes  # the app's raw JSON body: in memory only, never written but to the provider


class Batcher:
    """This process's deferrals: ``mode`` "on" sends a request no batch takes live, with a
    notice; "strict" fails its trial. ``ledger`` is the run's as this session began."""

    def __init__(
        self,
        *,
        mode: str,
        run_id: str,
        ledger: Ledger,
        writer: Writer,
        providers: Mapping[Host, str],
        notify: Callable[[str], None],
        max_rounds: int = 8,
        after_cap: str = "pending",
    ) -> None:
        self.mode = mode
        self.max_rounds = max_rounds
        self.after_cap = after_cap
        self.run_id = run_id
        self.ledger = ledger
        self.writer = writer
        self.providers = providers
        self.notify = notify
        self.queue: dict[str, Queued] = {}
        self._lock = threading.Lock()
        self._waiting = ledger.waiting_trials()
        self._told: set[str] = set()
        self._drained = False

    def decision(self, request: Any) -> Batchable | str | None:
        """What a batch makes of vcrpy's ``request``: its group and body, why no batch takes it,
        or None for a host that is no batch provider's (left alone). Asked up to three times
        per request: made once, kept on it."""
        found = getattr(request, _DECISION, _DECISION)
        if found is _DECISION:
            provider = provider_of(request.host, request.port, self.providers)
            found = None
            if provider is not None:
                found = batchable(provider, request.method, request.uri, request.headers, request.body)
            setattr(request, _DECISION, found)
        return found

    def takes(self, request: Any, scope: TrialScope) -> bool:
        """Whether the batcher answers the request (defers it, or in strict mode refuses it);
        not a request of a trial at the round cap that goes live after it."""
        mode = self.mode_of(scope)
        found = None if mode == "off" else self.decision(request)
        if found is None:
            return False
        if isinstance(found, Batchable) and self.after_cap == "live" and self.capped(scope.key):
            return False
        return isinstance(found, Batchable) or mode == "strict"

    def mode_of(self, scope: TrialScope) -> str:
        """The trial's mode: its test's marker's (``batch=``), else the session's."""
        return scope.batch_mode or self.mode

    def capped(self, key: TrialKey) -> bool:
        """The trial took --eval-batch-max-rounds rounds already."""
        return self.ledger.rounds(key.test, key.item_id, key.trial) >= self.max_rounds

    def not_batched(self, request: Any, scope: TrialScope) -> None:
        """Mode on: a provider's request no batch takes goes live, and a trial's past the round
        cap with --eval-batch-after-cap=live; said once per reason. Not a test's whose marker
        sends its calls live (``batch=False``)."""
        if self.mode_of(scope) == "off":
            return
        found = self.decision(request)
        if isinstance(found, Batchable):
            cap = self.max_rounds
            found = f"its trial took --eval-batch-max-rounds={cap} rounds (--eval-batch-after-cap=live)"
        if isinstance(found, str):
            self.not_batched_because(found)

    def waiting_reason(self, key: TrialKey) -> str | None:
        """Why the trial need not run again yet: a request of it waits in a batch not ended."""
        trial = (key.test, key.item_id, key.trial)
        return waiting(self._waiting[trial]) if trial in self._waiting else None

    def defer(
        self, request: Any, scope: TrialScope, canonical: RecordedRequest, *, task: bool = True
    ) -> dict[str, Any]:
        """Queue the request for a batch (or in strict mode refuse it), and answer the app.
        ``task``: the task's request, not a judge's. A task that sends a deferred request again
        (a retry loop on the error answer) gets the same answer and queues nothing more: its
        next round replays the one answer, and the retry never happens. A judge's repeats are
        its samples (``judge_samples``), each its own request."""
        found = self.decision(request)
        if task and canonical.key in scope.deferred_requests:
            return _answer(f"opik-eval: {scope.deferred[0]}")
        occurrence = scope.next_occurrence(canonical)
        if not isinstance(found, Batchable):
            scope.refuse(canonical, f"--eval-batch=strict: not batchable: {found}")
            return _answer(f"opik-eval: --eval-batch=strict did not send this request: {found}")
        key = scope.key
        if self.capped(key):  # nothing will come: the trial fails, pending, saying why
            scope.refuse(canonical, cap_reason(self.max_rounds))
            return _answer(f"opik-eval: {cap_reason(self.max_rounds)}")
        custom = custom_id(self.run_id, key.test, key.item_id, key.trial, canonical.key, occurrence)
        state = self.ledger.state(custom)
        if state is not None and state.state in ("waiting", "submitting"):
            reason = waiting(state.batch_id)
        elif state is not None and state.state == "failed" and self.ledger.attempts[custom] >= MAX_TRIES:
            why = f"--eval-batch: no answer after {MAX_TRIES} batches; the last: {state.reason}"
            scope.refuse(canonical, why)
            return _answer(f"opik-eval: {why}")
        else:
            again = f" again ({state.reason})" if state is not None and state.state == "failed" else ""
            reason = deferred(found.group, again)
            with self._lock:
                # Once drained (the session's end), a late deferral (a trial a thread was still
                # running at Ctrl-C) queues nothing: the trial stays pending, deferred again later.
                if custom not in self.queue and not self._drained:
                    self.queue[custom] = Queued(custom, found.group, found.body)
                    self.writer.write(
                        Deferred(
                            custom_id=custom,
                            run_id=self.run_id,
                            test=key.test,
                            item_id=key.item_id,
                            trial=key.trial,
                            occurrence=occurrence,
                            request=canonical,
                            group=found.group,
                        )
                    )
        scope.deferred.append(reason)
        scope.deferred_requests.add(canonical.key)
        return _answer(f"opik-eval: {reason}")

    def drain(self) -> list[Queued]:
        """The queue, for the submission; nothing is queued after."""
        with self._lock:
            self._drained = True
            return list(self.queue.values())

    def outside_trial(self, request: Any) -> None:
        """A provider's request made outside any trial (a thread the task started itself): it
        goes live, unbatched; said once."""
        if isinstance(self.decision(request), Batchable):
            self.not_batched_because(
                "made outside the trial's context (a thread the task started itself: run it with "
                "contextvars.copy_context().run or asyncio.to_thread), so no trial waits for it"
            )

    def not_batched_because(self, why: str) -> None:
        if why not in self._told:
            self._told.add(why)
            self.notify(f"--eval-batch: sent live, not batched: {why}")


@functools.lru_cache(maxsize=64)
def deferred(group: Group, again: str = "") -> str:
    """The reason of a trial whose request waits for the session's end: the same words for every
    trial of a group, so that pytest's -rs folds them into one line."""
    return (
        f"eval batch: request deferred to a batch{again}: {group.describe()}; "
        "the trial stays pending until --eval-resume collects the answer"
    )


def cap_reason(rounds: int) -> str:
    return (
        f"--eval-batch: the trial took {rounds} batched rounds (--eval-batch-max-rounds) and stays pending; "
        "an app whose requests change every round (a timestamp in a prompt) never ends: raise the cap, "
        "or send the rest live with --eval-batch-after-cap=live"
    )


def waiting(batch_id: str | None) -> str:
    where = f"in batch {batch_id}" if batch_id else "for its interrupted submission to be found"
    return f"eval batch: waiting {where}; the trial stays pending until --eval-resume collects the answer"


def _answer(message: str) -> dict[str, Any]:
    return error_answer(message, BATCHED_TYPE)
