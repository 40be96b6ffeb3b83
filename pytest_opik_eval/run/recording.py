"""Recording and replay of the app's HTTP calls, per trial (``--eval-record``).

vcrpy patches every transport an LLM SDK uses (httpx, requests/urllib3, http.client, aiohttp),
so one library covers them all; but its ``use_cassette`` patches the whole process with one
cassette, and threaded or async trials of one process need one each. So the :class:`Recorder`
patches once, with vcrpy's patcher builder, and gives it a single cassette-like object of ours
(:class:`_Cassette`) that dispatches each request to the trial running where it is made: the
:class:`TrialScope` in a context variable, set around the task call only. A request made outside
any scope (a fixture, a metric, the Opik backend's sender thread) goes to the network unrecorded,
except in strict replay (mode ``none``), which sends nothing it cannot replay: such a request is
refused (see :meth:`Recorder.refuses`), but for the plugin's own (``own_requests``), the judges'
while a trial is scored when they run live (the judge cache off), and the hosts the user lets
through (``--eval-record-allow-host``), which every mode leaves alone.

Interactions are keyed by (test, item, trial, canonical request, occurrence), so each trial of an
item keeps its own answers and a retry loop replays its answers in order. New ones are journaled
at once (``store/http_recordings.py``); what a session replays is what the files held when it began.
Mode ``all`` journals them with their attempt, and :meth:`Recorder.completed` says when that
attempt completed: only then do they replace the trial's recordings.

With ``--eval-llm-spans``, each model call a trial's task gets the answer of, sent or replayed,
becomes its span (``run/llm_responses.py``), and so does each of its judges' (its metrics' while
it is scored), sent or answered by a batch, though a judge's is never recorded. Without
``--eval-record`` the recorder then only observes (mode ``off``): it journals nothing, and scopes
only the trials whose spans it makes.

Longer than 600 lines because the recorder, its per-trial scopes and the cassette vcrpy's stubs
call are one state machine: one lock, two context variables and the scopes' counters, which each
part reads and changes; split, each would reach into the others' private state.

Limits, as for the trial's spans (``run/trial_trace.py``): code the task runs in a thread of its own
(a bare ``threading.Thread``, ``ThreadPoolExecutor.submit``, ``loop.run_in_executor``) starts with
an empty context, so its requests are outside the trial: they pass through unrecorded, and in mode
``none`` they are refused and fail every trial whose task runs in the process at that moment (the
one that made them cannot be told apart). ``asyncio`` tasks, ``to_thread`` and
``copy_context().run`` carry the trial. And vcrpy's http.client stub (requests, urllib3) swaps
the real connection classes back for an instant while it opens a real connection, process-wide:
with threaded trials, another thread's connection opened in that instant is not patched (mode
``none`` then refuses it and counts a miss). httpx and aiohttp are not affected.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

from pytest_opik_eval.masking import EnvironmentSecrets, Scrubber, mask
from pytest_opik_eval.option_values import RECORD_MODES, Host, host_text
from pytest_opik_eval.own_requests import own_request
from pytest_opik_eval.run import http_calls, trial_trace
from pytest_opik_eval.run.call_context import within
from pytest_opik_eval.run.network_guard import socket_guard, with_addresses
from pytest_opik_eval.run.pricing import priced_usage
from pytest_opik_eval.store.http_recordings import (
    Interaction,
    Journal,
    RecordedRequest,
    RecordedResponse,
    RecordedUsage,
    load,
)

if TYPE_CHECKING:
    from pytest_opik_eval.run.trial_trace import TrialTrace


class Deferrer(Protocol):
    """What defers the requests no recording answers (``run/batching.Batcher``, --eval-batch)."""

    def takes(self, request: Any, scope: TrialScope) -> bool: ...
    def not_batched(self, request: Any, scope: TrialScope) -> None: ...
    def defer(
        self, request: Any, scope: TrialScope, canonical: RecordedRequest, *, task: bool = True
    ) -> dict[str, Any]: ...
    def outside_trial(self, request: Any) -> None: ...


MISS_TYPE = "opik_eval_no_recording"
_CANONICAL = "_opik_eval_canonical"  # the attribute of vcrpy's request that keeps its canonical form
_STARTED = "_opik_eval_started"  # and when it was first seen (time.time()), for its span

_Function = TypeVar("_Function", bound=Callable[..., Any])
_Key = tuple[str, int, str, int]
# The trial attempt whose task runs in this context; None outside any.
_current: ContextVar[TrialScope | None] = ContextVar("pytest_opik_eval_recording", default=None)
# The trial attempt being scored in this context (its metrics run); None outside scoring.
_scoring: ContextVar[TrialScope | None] = ContextVar("pytest_opik_eval_scoring", default=None)


@dataclass(frozen=True)
class TrialKey:
    test: str  # the node id of the test, with its own parametrize ids but not the trial's
    item_id: str
    trial: int


@dataclass
class Miss:
    """A request the recordings could not answer, or a connection blocked in mode ``none``."""

    request: str  # one line: "POST https://api.openai.com/v1/chat/completions"
    diff: str
    recordable: bool = True  # False: no record mode would record it (not sent by the trial's task)


@dataclass
class RecordingCounts:
    replayed: int = 0
    recorded: int = 0
    missed: int = 0
    refused: int = 0  # mode none: requests made outside any trial, not sent; they fail the session
    saved_input_tokens: int = 0
    saved_output_tokens: int = 0
    saved_cost: float | None = None  # USD, of the replayed calls the price table knows

    def add(self, other: RecordingCounts) -> None:
        """Add ``other``'s counts (a request's, another worker's)."""
        self.replayed += other.replayed
        self.recorded += other.recorded
        self.missed += other.missed
        self.refused += other.refused
        self.saved_input_tokens += other.saved_input_tokens
        self.saved_output_tokens += other.saved_output_tokens
        if other.saved_cost is not None:
            self.saved_cost = (self.saved_cost or 0.0) + other.saved_cost


@dataclass
class _Recorded:
    """A test's interactions as its file held them when the session first needed them."""

    by_key: dict[_Key, Interaction]
    trials: set[tuple[str, int]] = field(default_factory=set)


_NOTHING = _Recorded({})  # mode off: nothing is replayed


class Recorder:
    """One per process: patches the HTTP libraries between :meth:`start` and :meth:`stop`, and
    makes a :class:`TrialScope` for each trial attempt. Nothing is imported or patched before
    :meth:`start`.

    ``allowed``: the hosts (and ports) left alone in every mode, never recorded, replayed or
    refused. ``live_judges``: in mode ``none``, whether the metrics' requests while a trial is
    scored go out (the judge cache is off); else they are refused. ``notify``: where what the user
    should know goes (the terminal summary's notices): a request refused outside any trial, a
    response not recorded. ``llm_spans``: --eval-llm-spans (see ``makes_spans``); in mode ``off``,
    the recorder exists only to make those spans."""

    def __init__(
        self,
        *,
        mode: str,
        folder: Path,
        session_id: str,
        worker: str,
        allowed: Sequence[Host] = (),
        live_judges: bool = True,
        notify: Callable[[str], None] = lambda message: None,
        batcher: Deferrer | None = None,
        run_id: str | None = None,
        llm_spans: str = "off",
    ) -> None:
        if mode not in RECORD_MODES:
            raise ValueError(f"unknown recording mode {mode!r}: use one of {', '.join(RECORD_MODES)}")
        self.mode = mode
        self.llm_spans = llm_spans
        self.folder = folder
        self.journal = Journal(folder, session_id, worker)
        self.lock = threading.RLock()  # the scopes' counters, the loaded files, the journal
        self.live_judges = live_judges
        self._given = tuple(allowed)
        self.allowed: frozenset[Host] = frozenset(allowed)  # with their addresses once started
        self.notify = notify
        self.batcher = batcher  # --eval-batch: defers what the recordings cannot answer
        # --eval-batch: the run whose recordings alone are replayed, and which new ones are marked
        # with: a new run's trials must not replay the answers an earlier run was given.
        self.run_id = run_id
        self._recorded: dict[str, _Recorded] = {}
        self._totals = RecordingCounts()
        self._running: list[TrialScope] = []  # the scopes whose task runs now, in any thread
        self._attempts: dict[str, TrialKey] = {}  # mode all: each attempt's key, until it completes
        self._session_thread: int | None = None  # where pytest runs hooks and fixtures
        self._patches: contextlib.ExitStack | None = None
        # Read again whenever the environment changed: a key a session fixture sets is masked too.
        self.secrets = EnvironmentSecrets()

    def start(self) -> None:
        if self._patches is not None or (self.mode == "off" and self.llm_spans == "off"):
            return
        from vcr.patch import CassettePatcherBuilder

        if self.llm_spans != "off":
            # A source of spans: from now on every trial is traced (see trial_trace.may_trace).
            import pytest_opik_eval.run.llm_responses  # noqa: F401

        self._session_thread = threading.get_ident()
        self.allowed = with_addresses(self._given)
        with contextlib.ExitStack() as patches:
            for patcher in CassettePatcherBuilder(_Cassette(self)).build():
                patches.enter_context(patcher)
            if self.mode == "none":
                patches.enter_context(socket_guard(self, _current.get))
            self._patches = patches.pop_all()

    def stop(self) -> None:
        if self._patches is not None:
            self._patches.close()
            self._patches = None
        self.journal.close()

    def trial_scope(
        self, key: TrialKey, attempt: str, batch_mode: str | None, trace: TrialTrace | None, reads_calls: bool
    ) -> TrialScope | None:
        """``scope``, its model calls made spans of ``trace`` with --eval-llm-spans=on, or auto
        when its test ``reads_calls``; None for any other trial of an observing recorder."""
        spans = self.llm_spans == "on" or (self.llm_spans == "auto" and reads_calls)
        if self.mode == "off" and (trace is None or not spans):
            return None
        return self.scope(key, attempt, batch_mode, trace if spans else None)

    def scope(
        self, key: TrialKey, attempt: str, batch_mode: str | None = None, trace: TrialTrace | None = None
    ) -> TrialScope:
        """The recording scope of ``attempt`` (the store's id of a trial attempt); ``batch_mode``:
        its test's marker's --eval-batch mode (None: the session's); ``trace``: the trace its
        model calls become spans of."""
        key = self.masked(key)
        if self.mode == "all":  # the key its recordings are journaled under, for completed()
            with self.lock:
                self._attempts[attempt] = key
        scope = TrialScope(self, key, attempt, self._loaded(key.test) if self.mode != "off" else _NOTHING)
        scope.batch_mode = batch_mode
        scope.trace = trace
        return scope

    def masked(self, key: TrialKey) -> TrialKey:
        """The key as files name it: a parametrize id made of a key (test_answer[sk-...]) names a
        file, masked as a body is."""
        return TrialKey(mask(key.test, self.secrets), mask(key.item_id, self.secrets), key.trial)

    @contextlib.contextmanager
    def scoring(self, scope: TrialScope) -> Iterator[None]:
        """Around the scoring of ``scope``'s trial: its metrics' requests are the judges'."""
        token = _scoring.set(scope)
        try:
            yield
        finally:
            _scoring.reset(token)

    @contextlib.contextmanager
    def running(self, scope: TrialScope) -> Iterator[None]:
        """While ``scope``'s task runs: a request refused from a thread of no trial fails it."""
        with self.lock:
            self._running.append(scope)
        try:
            yield
        finally:
            with self.lock:
                self._running.remove(scope)

    def completed(self, attempt: str) -> None:
        """``attempt`` completed (its marker is about to be cleared): in mode ``all``, what it
        recorded replaces the trial's recordings, from the next fold on. Journaled under the key
        its scope was made with (masked then: the environment may have changed since)."""
        with self.lock:
            key = self._attempts.pop(attempt, None)
        if key is not None:
            self.journal.complete(key.test, key.item_id, key.trial, attempt)

    def counts(self) -> RecordingCounts:
        with self.lock:
            return RecordingCounts(**vars(self._totals))

    def _loaded(self, test: str) -> _Recorded:
        with self.lock:
            if test not in self._recorded:
                interactions = load(self.folder, test) if self.mode != "all" else []
                self._recorded[test] = _Recorded(
                    {i.key: i for i in interactions}, {(i.item_id, i.trial) for i in interactions}
                )
            return self._recorded[test]

    def tally(self, scope: TrialScope, added: RecordingCounts) -> None:
        """Add to this process's counts and the scope's (the caller holds ``lock``)."""
        self._totals.add(added)
        scope.counts.add(added)

    # -- outside the trials' tasks --------------------------------------------------------

    def allows(self, host: str | None, port: int | None) -> bool:
        """Whether requests to ``host:port`` are left alone (--eval-record-allow-host)."""
        allowed = self.allowed
        return (host, port) in allowed or (host, None) in allowed

    def refuses(self, host: str | None, port: int | None) -> bool:
        """Mode ``none``: whether a request made outside any trial's task (in this context) is
        refused rather than sent: anything but the plugin's own requests, the judges' while a
        trial is scored if they run live, and the hosts let through."""
        if self.mode != "none" or own_request.get():
            return False
        if _scoring.get() is not None and self.live_judges:
            return False
        return not self.allows(host, port)

    def refused(self, request: str, host: str) -> None:
        """Count a request refused outside any trial's task, and fail what it can be blamed on:
        the trial being scored (a metric's request); a thread of the task's own, which carries no
        trial, so every trial whose task runs now; nothing for the session's own thread (a
        fixture, a hook), or when no task runs, and the session then fails with a notice."""
        scored = _scoring.get()
        on_session_thread = threading.get_ident() == self._session_thread
        with self.lock:
            blamed = [scored] if scored is not None else [] if on_session_thread else list(self._running)
            why = _METRIC_REFUSED if scored is not None else _THREAD_REFUSED
            for scope in dict.fromkeys(blamed):
                scope.misses.append(Miss(request, why.format(host=host), recordable=False))
            self._totals.add(RecordingCounts(missed=1, refused=0 if blamed else 1))
        if not blamed:
            self.notify(_SESSION_REFUSED.format(request=request, host=host))


# Why a request made outside the trial's task was not sent, in mode none (see Recorder.refused).
_THREAD_FIX = (
    "run that code in the trial's context (executor.submit(contextvars.copy_context().run, "
    "function), asyncio.to_thread), or let the host through with --eval-record-allow-host={host}"
)
_THREAD_REFUSED = (
    "not sent: it was made outside the trial's context (in a thread the task started itself: "
    "ThreadPoolExecutor.submit, threading.Thread, loop.run_in_executor), so it cannot be recorded or "
    "replayed, and strict replay sends nothing else; every trial running in this process then fails\n"
    f"fix: {_THREAD_FIX}"
)
_METRIC_REFUSED = (
    "not sent: a metric made it while the trial was scored, and strict replay with the judge cache on "
    "sends no judge's call\n"
    "fix: mark the metric as a judge (judge = True) so that its scores are cached, let judges run live "
    "with --eval-judge-cache=off, or let the host through with --eval-record-allow-host={host}"
)
_SESSION_REFUSED = (
    "--eval-record=none did not send {request}: it was made outside any trial (a fixture, a hook, "
    "or a thread a task started and did not wait for), and strict replay sends nothing it cannot "
    "replay: the session fails. Let a local service through with --eval-record-allow-host={host}, "
    "or make the request inside the task"
)


class TrialScope:
    """One trial attempt's recording: where its requests are answered from, what it missed."""

    def __init__(self, recorder: Recorder, key: TrialKey, attempt: str, recorded: _Recorded) -> None:
        self.key = key
        self.attempt = attempt
        self.misses: list[Miss] = []
        self.deferred: list[str] = []  # --eval-batch: why each request deferred to a batch waits
        self.deferred_requests: set[str] = set()  # their canonical keys
        self.batch_mode: str | None = None  # --eval-batch: the test's marker's mode (None: the session's)
        self.counts = RecordingCounts()
        # What the replayed calls saved, by the id of the trial's span open where each was made
        # (see ``play``): a budget subtracts it only from what that span and those under it report,
        # but for the spans open around a call that went out (``live_under``), which were paid.
        self.saved_under: dict[str, RecordingCounts] = {}
        self.live_under: set[str] = set()
        self.batched_under: set[str] = set()  # spans around a call a batch answered: batch-priced
        self.trace: TrialTrace | None = None  # its model calls become spans of it (--eval-llm-spans)
        self.recorder = recorder
        self._recorded = recorded
        self._seen: Counter[str] = Counter()  # canonical request -> requests made so far
        # The attempt's own: a credential found in one of its requests is masked in those after.
        self.scrubber = Scrubber(recorder.secrets)
        has_recordings = (key.item_id, key.trial) in recorded.trials
        mode = recorder.mode
        # Mode once: a trial with recordings replays strictly; one without records, as vcrpy's
        # once treats a cassette that exists and one that does not.
        self.strict = mode == "none" or (mode == "once" and has_recordings)
        self.replays = mode in ("none", "new_episodes") or self.strict
        self.blocks_network = mode == "none"
        # Mode all: what this attempt records replaces the trial's recordings if it completes.
        self._journaled_attempt = attempt if mode == "all" else None

    @contextlib.contextmanager
    def entered(self) -> Iterator[None]:
        token = _current.set(self)
        try:
            with self.recorder.running(self):
                yield
        finally:
            _current.reset(token)

    def wrap(self, function: _Function) -> _Function:
        """``function`` run inside :meth:`entered` (see ``call_context.within``)."""
        return within(function, self.entered)

    # -- what the cassette asks ----------------------------------------------------------

    def answers(self, request: RecordedRequest) -> bool:
        """Whether the request gets its answer here (a recording, or the strict miss response)
        rather than from the network. Asked more than once per request: counts nothing."""
        with self.recorder.lock:
            found = self._find(request, self._seen[request.key]) is not None
        return found or self.strict

    def play(self, request: RecordedRequest, started: float) -> dict[str, Any]:
        with self.recorder.lock:
            times = self._seen[request.key]
            self._seen[request.key] += 1
            found = self._find(request, times)
            if found is None:
                self.recorder.tally(self, RecordingCounts(missed=1))
                self.misses.append(Miss(http_calls.one_line(request), self._diff(request, times)))
        if found is None:
            message = (
                f"opik-eval: no recording for {http_calls.one_line(request)} in trial {self.key.trial} of "
                f"item {self.key.item_id!r} (--eval-record={self.recorder.mode}); the trial fails with a diff"
            )
            return http_calls.error_answer(message, MISS_TYPE)
        # Its span is made outside the lock, which guards the counters and the journal only:
        # putting a streamed answer together is this trial's work, and concurrent trials
        # (--eval-threads) would wait for it. Its span, if it makes one, is where it saved: what
        # it reports is not spent.
        under = self._llm_span(request, found.response, found.usage, started) or _open_span()
        usage = found.usage or RecordedUsage()
        saved = RecordingCounts(
            replayed=1,
            saved_input_tokens=usage.input_tokens,
            saved_output_tokens=usage.output_tokens,
            saved_cost=usage.cost,
        )
        with self.recorder.lock:
            self.recorder.tally(self, saved)
            if under is not None:
                self.saved_under.setdefault(under, RecordingCounts()).add(saved)
                if found.batch is not None:
                    self.batched_under.add(under)
        return http_calls.vcr_response(
            found.response.status,
            found.response.reason,
            found.response.headers,
            http_calls.body_bytes(found.response.body),
        )

    def sent(self) -> None:
        """A request of the task went out (recorded, or to a host left alone): what the span open
        around it reports was paid for, whatever a replayed call saved under an outer span."""
        under = _open_span()
        if under is not None:
            with self.recorder.lock:
                self.live_under.add(under)

    def next_occurrence(self, request: RecordedRequest) -> int:
        """A request not played nor sent (deferred to a batch) takes its occurrence all the same."""
        with self.recorder.lock:
            times = self._seen[request.key]
            self._seen[request.key] += 1
            return times

    def refuse(self, request: RecordedRequest, why: str) -> None:
        """The request was not sent, for ``why``: the trial fails, pending."""
        with self.recorder.lock:
            self.recorder.tally(self, RecordingCounts(missed=1))
            self.misses.append(Miss(http_calls.one_line(request), why, recordable=False))

    def record(self, request: RecordedRequest, response: dict[str, Any], started: float) -> None:
        """A response the task got from the network: journaled (but in mode ``off``), and made
        the trial's span when it is a model call the scope makes spans of."""
        self.sent()
        status = int(response["status"]["code"])
        # A transient failure is not recorded: its replay would repeat the SDK's backoff sleep.
        # The retry that succeeds takes its place (same occurrence).
        if status == 429 or status >= 500:
            return
        if self.recorder.mode == "off" and not self._observes(request):
            return  # observing only, and nothing to observe: not even read
        try:
            stored = _read(response, self.scrubber)
        except http_calls.UnreadableBody as error:  # never written unscrubbed: not recorded
            message = (
                f"--eval-record: the response to {http_calls.one_line(request)} was not recorded: {error}; "
                "a body the recorder cannot read cannot be kept free of secrets"
            )
            self.recorder.notify(message)
            return
        usage = priced_usage(http_calls.usage_of(stored))
        self._llm_span(request, stored, usage, started)
        if self.recorder.mode == "off":  # observing only: nothing is kept
            return
        key = self.key
        with self.recorder.lock:
            times = self._seen[request.key]
            self._seen[request.key] += 1
            interaction = Interaction(
                item_id=key.item_id,
                trial=key.trial,
                occurrence=times,
                request=request,
                response=stored,
                usage=usage,
                run=self.recorder.run_id,
            )
            self.recorder.journal.add(key.test, interaction, self._journaled_attempt)
            self.recorder.tally(self, RecordingCounts(recorded=1))

    def judged(self, request: RecordedRequest, response: dict[str, Any], started: float) -> None:
        """A response a metric (a judge) got from the network while this trial was scored: never
        recorded (a judge's scores are cached instead), but made its LLM span, under the metric,
        when it is a model call this scope makes spans of: a judge's call a batch answered makes
        one (``play``), and the one that went out live cost as much."""
        if not self._observes(request) or not 200 <= int(response["status"]["code"]) < 300:
            return
        try:
            stored = _read(response, self.scrubber)
        except http_calls.UnreadableBody:  # nothing kept, nothing to tell: it only makes no span
            return
        self._llm_span(request, stored, priced_usage(http_calls.usage_of(stored)), started)

    def _observes(self, request: RecordedRequest) -> bool:
        """Whether ``request`` is a model call this scope makes a span of."""
        from pytest_opik_eval.run import llm_responses

        return self.trace is not None and llm_responses.endpoint(request) is not None

    def _llm_span(
        self, request: RecordedRequest, response: Any, usage: RecordedUsage | None, started: float
    ) -> str | None:
        """The id of the trial's span made of this model call (see ``run/llm_responses.py``), or None."""
        if self.trace is None:
            return None
        from pytest_opik_eval.run import llm_responses

        return llm_responses.add_span(self.trace, request, response, usage, started)

    def blocked(self, address: Any) -> None:
        with self.recorder.lock:
            self.recorder.tally(self, RecordingCounts(missed=1))
            self.misses.append(
                Miss(
                    f"CONNECT {address}",
                    "--eval-record=none blocks the network inside a trial: "
                    "this connection was not made by an HTTP library the recordings cover",
                    recordable=False,
                )
            )

    def _find(self, request: RecordedRequest, times: int) -> Interaction | None:
        key = self.key
        found = self._recorded.by_key.get((key.item_id, key.trial, request.key, times))
        run = self.recorder.run_id
        return found if found is None or run is None or found.run == run else None

    def _diff(self, request: RecordedRequest, times: int) -> str:
        trial = (self.key.item_id, self.key.trial)
        return http_calls.miss_diff(request, times, trial, list(self._recorded.by_key.values()))


class _Cassette:
    """What vcrpy's stubs and patcher builder use of a cassette, and nothing else (pinned by
    ``tests/test_recording_engine.py``): each call goes to the scope current where the request
    is made, or lets the request through when there is none."""

    _path = "OpikEval"  # vcrpy names the connection classes it patches in after it
    custom_patches = ()
    skip_patchers = ()
    # Never vcrpy's CannotOverwriteExistingCassetteException: a strict miss is answered (400).
    write_protected = False

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    def can_play_response_for(self, request: Any) -> bool:
        scope = _current.get()
        if scope is None:
            spanned = self._spanned_judge(request)
            if spanned is not None:
                # Made before the request is sent: when it was, its span's start (see append).
                self._canonical(request, spanned)
            if self._judged(request) is not None:  # a judge's, with --eval-batch
                return True
            if self.recorder.batcher is not None and _scoring.get() is None:
                self.recorder.batcher.outside_trial(request)
            # Outside any trial: sent, unless strict replay refuses it.
            return self.recorder.refuses(request.host, request.port)
        if self._left_alone(request):
            return False
        # Made before the request is sent, even by a trial that only records: sending consumes
        # what some bodies hold (the files of an aiohttp FormData).
        canonical = self._canonical(request, scope)
        if scope.replays and scope.answers(canonical):
            return True
        batcher = self.recorder.batcher
        if batcher is None:
            return False
        if batcher.takes(request, scope):
            return True
        batcher.not_batched(request, scope)
        return False

    def play_response(self, request: Any) -> dict[str, Any]:
        task = _current.get()
        scope = task or self._judged(request)
        if scope is None:
            return self._refused(request)
        canonical = self._canonical(request, scope)
        batcher = self.recorder.batcher
        if batcher is not None and not (scope.replays and scope.answers(canonical)):
            return batcher.defer(request, scope, canonical, task=task is not None)
        return scope.play(canonical, _started(request))

    def append(self, request: Any, response: dict[str, Any]) -> None:
        scope = _current.get()
        # Outside any trial (a fixture, a metric, the Opik backend), or a host left alone: not kept.
        if scope is None:
            spanned = self._spanned_judge(request)
            if spanned is not None:
                spanned.judged(self._canonical(request, spanned), response, _started(request))
            return
        if self._left_alone(request):
            scope.sent()
            return
        scope.record(self._canonical(request, scope), response, _started(request))

    def _spanned_judge(self, request: Any) -> TrialScope | None:
        """The trial being scored whose judge made the request, when its model calls become
        spans (``TrialScope.judged``); else None."""
        scored = _scoring.get()
        if scored is None or scored.trace is None or self._left_alone(request):
            return None
        return scored

    def _judged(self, request: Any) -> TrialScope | None:
        """With --eval-batch, the trial being scored whose judge made the request, when a batch
        answered it or takes it: the judges' calls go in the round after the task's last."""
        batcher, scored = self.recorder.batcher, _scoring.get()
        if batcher is None or scored is None or self._left_alone(request):
            return None
        canonical = self._canonical(request, scored)
        if (scored.replays and scored.answers(canonical)) or batcher.takes(request, scored):
            return scored
        return None

    def _left_alone(self, request: Any) -> bool:
        # Most sessions let no host through: the request's URL is not parsed for them.
        return bool(self.recorder.allowed) and self.recorder.allows(request.host, request.port)

    def _refused(self, request: Any) -> dict[str, Any]:
        """Mode none, outside any trial: the request is not sent; the app gets an HTTP 400 (SDKs
        do not retry it) that says why."""
        line = f"{request.method} {http_calls.canonical_url(request.uri, Scrubber(self.recorder.secrets))}"
        host = host_text(request.host, request.port)
        self.recorder.refused(line, host)
        message = (
            f"opik-eval: --eval-record=none did not send {line}: it was made outside any trial's context "
            "(a thread the task started itself?), so it has no recording; " + _THREAD_FIX.format(host=host)
        )
        return http_calls.error_answer(message, MISS_TYPE)

    def filter_request(self, request: Any) -> Any:
        return request

    def find_requests_with_most_matches(self, request: Any) -> list[tuple[Any, list[str], list[str]]]:
        # aiohttp's stub looks up a redirect's target with this; the target itself is the match.
        return [(request, [], [])]

    def _canonical(self, request: Any, scope: TrialScope) -> RecordedRequest:
        # vcrpy asks about one request (its own object) up to three times, with other requests'
        # questions in between on one event loop: its canonical form is made once, kept on it.
        canonical = getattr(request, _CANONICAL, None)
        if canonical is None:
            canonical = http_calls.canonical_request(
                request.method, request.uri, request.body, request.headers, scope.scrubber
            )
            setattr(request, _CANONICAL, canonical)
            setattr(request, _STARTED, time.time())
        return cast(RecordedRequest, canonical)


def _read(response: dict[str, Any], scrubber: Scrubber) -> RecordedResponse:
    """vcrpy's ``response`` as a recording keeps it (see ``http_calls.recorded_response``)."""
    return http_calls.recorded_response(
        int(response["status"]["code"]),
        response["status"].get("message") or "",
        response["headers"],
        response["body"].get("string") or b"",
        scrubber,
    )


def _started(request: Any) -> float:
    """When vcrpy's ``request`` was first seen (its canonical form made), as ``time.time()``."""
    started = getattr(request, _STARTED, None)
    return started if isinstance(started, float) else time.time()


def _open_span() -> str | None:
    """The trial's span open where a request is made: an instrumented client's (track_openai's,
    a manual one) around its call, else the task span, under which the app reports the call's
    usage on a span of its own (``trace.usage`` after the call)."""
    trial = trial_trace.current()
    return None if trial is None else trial.parent_span_id()
