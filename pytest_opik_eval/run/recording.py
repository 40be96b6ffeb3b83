"""Recording and replay of the app's HTTP calls, per trial (``--eval-record``).

vcrpy patches every transport an LLM SDK uses (httpx, requests/urllib3, http.client, aiohttp),
so one library covers them all; but its ``use_cassette`` patches the whole process with one
cassette, and threaded or async trials of one process need one each. So the :class:`Recorder`
patches once, with vcrpy's patcher builder, and gives it a single cassette-like object of ours
(:class:`_Cassette`) that dispatches each request to the trial running where it is made: the
:class:`TrialScope` in a context variable, set around the task call only. A request made outside
any scope (a fixture, a metric, the Opik backend's sender thread) goes to the network unrecorded.

Interactions are keyed by (test, item, trial, canonical request, occurrence), so each trial of an
item keeps its own answers and a retry loop replays its answers in order. New ones are journaled
at once (``store/recordings.py``); what a session replays is what the files held when it began.

Limits, as for the trial's spans (``run/tracing.py``): code the task runs in a thread of its own
(a bare ``threading.Thread``, ``ThreadPoolExecutor.submit``) starts with an empty context, so its
requests are outside the trial and pass through unrecorded (``asyncio`` tasks, ``to_thread`` and
``copy_context().run`` carry the trial). And vcrpy's http.client stub (requests, urllib3) swaps
the real connection classes back for an instant while it opens a real connection, process-wide:
with threaded trials, another thread's connection opened in that instant is not patched (mode
``none`` then refuses it and counts a miss). httpx and aiohttp are not affected.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

from pytest_opik_eval.masking import EnvironmentSecrets, Scrubber, mask
from pytest_opik_eval.options import RECORD_MODES
from pytest_opik_eval.run import http_calls
from pytest_opik_eval.run.contexts import within
from pytest_opik_eval.store.recordings import Interaction, Journal, RecordedRequest, RecordedUsage, load

MISS_TYPE = "opik_eval_no_recording"
_CANONICAL = "_opik_eval_canonical"  # the attribute of vcrpy's request that keeps its canonical form

_Function = TypeVar("_Function", bound=Callable[..., Any])
_Key = tuple[str, int, str, int]
# The trial attempt whose task runs in this context; None outside any.
_current: ContextVar[TrialScope | None] = ContextVar("pytest_opik_eval_recording", default=None)


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


@dataclass
class RecordingCounts:
    replayed: int = 0
    recorded: int = 0
    missed: int = 0
    saved_input_tokens: int = 0
    saved_output_tokens: int = 0
    saved_cost: float | None = None  # USD, of the replayed calls the price table knows

    def add(self, other: RecordingCounts) -> None:
        """Add ``other``'s counts (a request's, another worker's)."""
        self.replayed += other.replayed
        self.recorded += other.recorded
        self.missed += other.missed
        self.saved_input_tokens += other.saved_input_tokens
        self.saved_output_tokens += other.saved_output_tokens
        if other.saved_cost is not None:
            self.saved_cost = (self.saved_cost or 0.0) + other.saved_cost


@dataclass
class _Recorded:
    """A test's interactions as its file held them when the session first needed them."""

    by_key: dict[_Key, Interaction]
    trials: set[tuple[str, int]] = field(default_factory=set)


class Recorder:
    """One per process: patches the HTTP libraries between :meth:`start` and :meth:`stop`, and
    makes a :class:`TrialScope` for each trial attempt. Nothing is imported or patched before
    :meth:`start`."""

    def __init__(self, *, mode: str, folder: Path, session_id: str, worker: str) -> None:
        if mode not in RECORD_MODES:
            raise ValueError(f"unknown recording mode {mode!r}: use one of {', '.join(RECORD_MODES)}")
        self.mode = mode
        self.folder = folder
        self.journal = Journal(folder, session_id, worker)
        self.lock = threading.RLock()  # the scopes' counters, the loaded files, the journal
        self._recorded: dict[str, _Recorded] = {}
        self._totals = RecordingCounts()
        self._patches: contextlib.ExitStack | None = None
        # Read again whenever the environment changed: a key a session fixture sets is masked too.
        self.secrets = EnvironmentSecrets()
        self.notices: list[str] = []  # what the user should know: a response not recorded, and why

    def start(self) -> None:
        if self._patches is not None or self.mode == "off":
            return
        from vcr.patch import CassettePatcherBuilder

        with contextlib.ExitStack() as patches:
            for patcher in CassettePatcherBuilder(_Cassette(self)).build():
                patches.enter_context(patcher)
            if self.mode == "none":
                patches.enter_context(_socket_guard())
            self._patches = patches.pop_all()

    def stop(self) -> None:
        if self._patches is not None:
            self._patches.close()
            self._patches = None
        self.journal.close()

    def scope(self, key: TrialKey) -> TrialScope:
        # A parametrize id made of a key (test_answer[sk-...]) names a file: masked as a body is.
        key = TrialKey(mask(key.test, self.secrets), mask(key.item_id, self.secrets), key.trial)
        return TrialScope(self, key, self._loaded(key.test))

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


class TrialScope:
    """One trial attempt's recording: where its requests are answered from, what it missed."""

    def __init__(self, recorder: Recorder, key: TrialKey, recorded: _Recorded) -> None:
        self.key = key
        self.misses: list[Miss] = []
        self.counts = RecordingCounts()
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
        # Mode all: the trial's recordings become what this attempt makes, none if it makes no
        # request; a reset is journaled when its task starts (a trial that never runs keeps its).
        self._reset = mode == "all"

    @contextlib.contextmanager
    def entered(self) -> Iterator[None]:
        if self._reset:
            with self.recorder.lock:
                if self._reset:
                    self.recorder.journal.reset(self.key.test, self.key.item_id, self.key.trial)
                    self._reset = False
        token = _current.set(self)
        try:
            yield
        finally:
            _current.reset(token)

    def wrap(self, function: _Function) -> _Function:
        """``function`` run inside :meth:`entered` (see ``contexts.within``)."""
        return within(function, self.entered)

    # -- what the cassette asks ----------------------------------------------------------

    def answers(self, request: RecordedRequest) -> bool:
        """Whether the request gets its answer here (a recording, or the strict miss response)
        rather than from the network. Asked more than once per request: counts nothing."""
        with self.recorder.lock:
            found = self._find(request, self._seen[request.key]) is not None
        return found or self.strict

    def play(self, request: RecordedRequest) -> dict[str, Any]:
        with self.recorder.lock:
            times = self._seen[request.key]
            self._seen[request.key] += 1
            found = self._find(request, times)
            if found is not None:
                usage = found.usage or RecordedUsage()
                saved = RecordingCounts(
                    replayed=1,
                    saved_input_tokens=usage.input_tokens,
                    saved_output_tokens=usage.output_tokens,
                    saved_cost=usage.cost,
                )
                self.recorder.tally(self, saved)
                return _vcr_response(
                    found.response.status,
                    found.response.reason,
                    found.response.headers,
                    http_calls.body_bytes(found.response.body),
                )
            self.recorder.tally(self, RecordingCounts(missed=1))
            self.misses.append(Miss(http_calls.one_line(request), self._diff(request, times)))
        message = (
            f"opik-eval: no recording for {http_calls.one_line(request)} in trial {self.key.trial} of item "
            f"{self.key.item_id!r} (--eval-record={self.recorder.mode}); the trial fails with a diff"
        )
        body = {"error": {"message": message, "type": MISS_TYPE}}
        return _vcr_response(
            400, "Bad Request", {"content-type": ["application/json"]}, http_calls.body_bytes({"json": body})
        )

    def record(self, request: RecordedRequest, response: dict[str, Any]) -> None:
        status = int(response["status"]["code"])
        # A transient failure is not recorded: its replay would repeat the SDK's backoff sleep.
        # The retry that succeeds takes its place (same occurrence).
        if status == 429 or status >= 500:
            return
        try:
            stored = http_calls.recorded_response(
                status,
                response["status"].get("message") or "",
                response["headers"],
                response["body"].get("string") or b"",
                self.scrubber,
            )
        except http_calls.UnreadableBody as error:  # never written unscrubbed: not recorded
            message = (
                f"--eval-record: the response to {http_calls.one_line(request)} was not recorded: {error}; "
                "a body the recorder cannot read cannot be kept free of secrets"
            )
            with self.recorder.lock:
                if message not in self.recorder.notices:
                    self.recorder.notices.append(message)
            return
        usage = _priced(http_calls.usage_of(stored))
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
            )
            self.recorder.journal.add(key.test, interaction)
            self.recorder.tally(self, RecordingCounts(recorded=1))

    def blocked(self, address: Any) -> None:
        with self.recorder.lock:
            self.recorder.tally(self, RecordingCounts(missed=1))
            self.misses.append(
                Miss(
                    f"CONNECT {address}",
                    "--eval-record=none blocks the network inside a trial: "
                    "this connection was not made by an HTTP library the recordings cover",
                )
            )

    def _find(self, request: RecordedRequest, times: int) -> Interaction | None:
        key = self.key
        return self._recorded.by_key.get((key.item_id, key.trial, request.key, times))

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
        if scope is None:  # outside any trial
            return False
        # Made before the request is sent, even by a trial that only records: sending consumes
        # what some bodies hold (the files of an aiohttp FormData).
        canonical = self._canonical(request, scope)
        return scope.replays and scope.answers(canonical)

    def play_response(self, request: Any) -> dict[str, Any]:
        scope = _current.get()
        assert scope is not None, "vcrpy plays a response only after can_play_response_for"
        return scope.play(self._canonical(request, scope))

    def append(self, request: Any, response: dict[str, Any]) -> None:
        scope = _current.get()
        if scope is None:  # outside any trial (a fixture, a metric, the Opik backend): left alone
            return
        scope.record(self._canonical(request, scope), response)

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
        return cast(RecordedRequest, canonical)


def _priced(usage: RecordedUsage | None) -> RecordedUsage | None:
    """The usage with its cost from the price table (``run/pricing.py``), when it has one."""
    if usage is None or usage.model is None:
        return usage
    from pytest_opik_eval.run.pricing import priced
    from pytest_opik_eval.store.records import SpanRecord

    tokens = {"prompt_tokens": usage.input_tokens, "completion_tokens": usage.output_tokens}
    (span,) = priced([SpanRecord(id="recorded", trace_id="recorded", model=usage.model, usage=tokens)])
    return usage.model_copy(update={"cost": span.cost})


def _vcr_response(status: int, reason: str, headers: dict[str, list[str]], body: bytes) -> dict[str, Any]:
    # vcrpy's stubs mutate the headers they are given (the http.client one drops
    # transfer-encoding): a copy each time.
    return {
        "status": {"code": status, "message": reason},
        "headers": {k: list(v) for k, v in headers.items()},
        "body": {"string": body},
    }


@contextlib.contextmanager
def _socket_guard() -> Iterator[None]:
    """Mode ``none``: inside a trial, an internet socket's connect is refused (a library vcrpy
    does not patch, or a raw socket); outside, untouched."""
    from unittest import mock

    real_connect, real_connect_ex = socket.socket.connect, socket.socket.connect_ex

    def blocked(sock: socket.socket, address: Any) -> bool:
        scope = _current.get()
        if scope is None or not scope.blocks_network or sock.family not in (socket.AF_INET, socket.AF_INET6):
            return False
        scope.blocked(address)
        return True

    def connect(sock: socket.socket, address: Any) -> None:
        if blocked(sock, address):
            raise ConnectionRefusedError(f"opik-eval: --eval-record=none blocks connecting to {address}")
        real_connect(sock, address)

    def connect_ex(sock: socket.socket, address: Any) -> int:
        if blocked(sock, address):
            import errno

            return errno.ECONNREFUSED
        return real_connect_ex(sock, address)

    with (
        mock.patch.object(socket.socket, "connect", connect),
        mock.patch.object(socket.socket, "connect_ex", connect_ex),
    ):
        yield
