"""Where a run's provider batches stand (``--eval-batch``): an append-only ledger beside the
store, ``batches/<run id>/<session>.<process>.jsonl``, one flushed line per event.

Files rather than a store table: it works the same with the Opik backend (which has no local
table) and a store a plugin supplies; a killed process loses nothing it flushed; shards merge
by copying files (their names are unique). The lines hold no secret: the requests are the
scrubbed canonical ones recordings hold, and a credential is named by its environment variable.

Reading parses every file of the run and replays the events in the order they happened
(:class:`Ledger`): the last event about a request wins.
"""

from __future__ import annotations

import contextlib
import shutil
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from pytest_opik_eval.gcpause import no_gc_pass
from pytest_opik_eval.store.http_recordings import RecordedRequest

BATCHES = "batches"  # the ledgers' folder, in the store's folder
_SUFFIX = ".jsonl"


def batches_folder(store_folder: Path) -> Path:
    return store_folder / BATCHES


class Group(BaseModel):
    """What the requests of one batch share: a provider's batch takes one endpoint (and, for
    OpenAI, one model), under one account."""

    model_config = ConfigDict(frozen=True)

    provider: str  # "openai", "anthropic" or "gemini"
    # OpenAI's up to and including /v1 (https://api.openai.com/v1), Gemini's up to and including its
    # API version (https://generativelanguage.googleapis.com/v1beta), Anthropic's before /v1
    base_url: str
    endpoint: str  # /v1/chat/completions; Gemini's /models/gemini-2.5-flash:generateContent
    model: str | None = None
    key_env: str  # the environment variable holding the API key: the key itself is never written
    headers: tuple[
        tuple[str, str], ...
    ] = ()  # forwarded, non-secret: OpenAI-Organization, anthropic-version...
    bearer: bool = False  # the key went as Authorization: Bearer (Anthropic's may go as x-api-key)

    def describe(self) -> str:
        return f"{self.provider} {self.model or '(no model)'} {self.endpoint}"


class _Line(BaseModel):
    # Tolerant of fields a later version adds.
    model_config = ConfigDict(frozen=True)

    at: float = Field(default_factory=time.time)  # when: lines of every file replay in this order


class Deferred(_Line):
    """A request not sent: it waits for a batch. Its key parts say whose answer it is."""

    kind: Literal["deferred"] = "deferred"
    custom_id: str
    run_id: str
    test: str  # the recordings' test key (masked, as the recorder's)
    item_id: str
    trial: int
    occurrence: int
    request: RecordedRequest  # canonical and scrubbed: what its recording is found by
    group: Group


class Submitting(_Line):
    """Written before the first network call of a submission: a process killed after it leaves
    a submission whose outcome the next reader finds at the provider (``reconcile``)."""

    kind: Literal["submitting"] = "submitting"
    submission: str
    group: Group
    custom_ids: list[str]


class Uploaded(_Line):
    kind: Literal["uploaded"] = "uploaded"
    submission: str
    file_id: str


class Submitted(_Line):
    kind: Literal["submitted"] = "submitted"
    submission: str
    batch_id: str
    adopted: bool = False  # found at the provider after the submitting process was killed


class SubmitFailed(_Line):
    kind: Literal["submit_failed"] = "submit_failed"
    submission: str
    reason: str


class Answered(_Line):
    kind: Literal["answered"] = "answered"
    custom_id: str
    batch_id: str


class Failed(_Line):
    """The request got no usable answer (expired, cancelled, a transient error, no result, the
    batch lost): it is submitted again when its trial runs again."""

    kind: Literal["failed"] = "failed"
    custom_id: str
    batch_id: str | None = None
    reason: str


class Collected(_Line):
    """Every result of the batch was read: never downloaded again."""

    kind: Literal["collected"] = "collected"
    batch_id: str


Line = Annotated[
    Deferred | Submitting | Uploaded | Submitted | SubmitFailed | Answered | Failed | Collected,
    Field(discriminator="kind"),
]
_LINE: TypeAdapter[Line] = TypeAdapter(Line)


@dataclass
class RequestState:
    """Where one deferred request stands."""

    state: Literal["queued", "submitting", "waiting", "answered", "failed"]
    submission: str | None = None
    batch_id: str | None = None
    reason: str = ""


@dataclass
class Submission:
    line: Submitting
    batch_id: str | None = None
    failed: str | None = None

    @property
    def open(self) -> bool:
        """Neither submitted nor failed: its process was killed in between."""
        return self.batch_id is None and self.failed is None


@dataclass
class Ledger:
    """A run's ledger as its files stand: each request's state, each submission and batch."""

    requests: dict[str, Deferred] = field(default_factory=dict)
    states: dict[str, RequestState] = field(default_factory=dict)
    submissions: dict[str, Submission] = field(default_factory=dict)
    batches: dict[str, str] = field(default_factory=dict)  # batch id -> its submission
    collected: set[str] = field(default_factory=set)
    attempts: Counter[str] = field(default_factory=Counter)  # custom_id -> submissions it was in
    # (test, item, trial) -> the submissions its requests were in: the rounds it took
    trial_rounds: dict[tuple[str, str, int], set[str]] = field(default_factory=dict)
    damaged: list[str] = field(default_factory=list)  # lines that could not be read: where

    def apply(self, line: Line) -> None:
        getattr(self, f"_on_{line.kind}")(line)

    def _on_deferred(self, line: Deferred) -> None:
        self.requests[line.custom_id] = line
        if self.states.get(line.custom_id, _QUEUED).state not in ("submitting", "waiting"):
            self.states[line.custom_id] = RequestState("queued")

    def _on_submitting(self, line: Submitting) -> None:
        self.submissions[line.submission] = Submission(line)
        for custom_id in line.custom_ids:
            self.states[custom_id] = RequestState("submitting", line.submission)

    def _on_uploaded(self, line: Uploaded) -> None:
        """Kept in the file for a person reading it: the reconciliation finds uploads by name."""

    def _on_answered(self, line: Answered) -> None:
        self.states[line.custom_id] = RequestState("answered", batch_id=line.batch_id)

    def _on_failed(self, line: Failed) -> None:
        self.states[line.custom_id] = RequestState("failed", batch_id=line.batch_id, reason=line.reason)

    def _on_collected(self, line: Collected) -> None:
        self.collected.add(line.batch_id)

    def _on_submitted(self, line: Submitted) -> None:
        submission = self.submissions.get(line.submission)
        if submission is None:
            return
        submission.batch_id = line.batch_id
        self.batches[line.batch_id] = line.submission
        # Tries and rounds count the batches a request was in: not a submission the provider
        # refused (an outage), which the next resume makes again.
        for custom_id in submission.line.custom_ids:
            self.attempts[custom_id] += 1
            request = self.requests.get(custom_id)
            if request is not None:
                key = (request.test, request.item_id, request.trial)
                self.trial_rounds.setdefault(key, set()).add(line.submission)
            if self.states[custom_id].submission == line.submission:
                self.states[custom_id] = RequestState("waiting", line.submission, line.batch_id)

    def _on_submit_failed(self, line: SubmitFailed) -> None:
        submission = self.submissions.get(line.submission)
        if submission is None:
            return
        submission.failed = line.reason
        for custom_id in submission.line.custom_ids:
            if self.states[custom_id].submission == line.submission:
                self.states[custom_id] = RequestState("failed", line.submission, reason=line.reason)

    def rounds(self, test: str, item_id: str, trial: int) -> int:
        """The batched rounds the trial took: the submissions its requests were in."""
        return len(self.trial_rounds.get((test, item_id, trial), ()))

    def state(self, custom_id: str) -> RequestState | None:
        return self.states.get(custom_id)

    def waiting(self, batch_id: str) -> list[str]:
        """The requests of the batch still waiting for its answer."""
        submission = self.submissions[self.batches[batch_id]]
        return [
            c
            for c in submission.line.custom_ids
            if self.states[c].state == "waiting" and self.states[c].batch_id == batch_id
        ]

    def open_batches(self) -> list[str]:
        """The batches submitted and not collected yet, oldest first."""
        return [b for b in self.batches if b not in self.collected]

    def waiting_trials(self) -> dict[tuple[str, str, int], str | None]:
        """(test, item, trial) -> the batch one of its requests waits in (None: a submission
        interrupted and not found yet)."""
        found: dict[tuple[str, str, int], str | None] = {}
        for custom_id, state in self.states.items():
            if state.state in ("waiting", "submitting"):
                request = self.requests.get(custom_id)
                if request is not None:
                    found[(request.test, request.item_id, request.trial)] = state.batch_id
        return found


_QUEUED = RequestState("queued")


def load(folder: Path, run_id: str) -> Ledger:
    """The run's ledger (empty when it has none), its files' lines replayed in time order."""
    ledger = Ledger()
    lines: list[tuple[float, int, int, Line]] = []
    # One object per line: without the pause, the collector's full passes would take most of
    # the time of a large ledger (20-47 us a line against 7-9).
    with no_gc_pass():
        for index, path in enumerate(sorted(_run_folder(folder, run_id).glob(f"*{_SUFFIX}"))):
            for number, line in _read(path, ledger.damaged):
                lines.append((line.at, index, number, line))
        for *_, line in sorted(lines, key=lambda entry: entry[:3]):
            ledger.apply(line)
    return ledger


def merge(target: Path, source: Path) -> int:
    """A shard's ledgers (``source``, a batches folder) added to ``target``'s: files are one per
    session and process, so the union of the two folders is the merged ledger. Returns how many
    files were copied (those already there are left as they are)."""
    copied = 0
    for path in sorted(source.glob(f"*/*{_SUFFIX}")):
        destination = target / path.parent.name / path.name
        if destination.exists():
            continue
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, destination)
        copied += 1
    return copied


@contextlib.contextmanager
def locked(folder: Path, run_id: str) -> Iterator[None]:
    """Held while a process reads the ledger and acts on it (collects, settles or submits), so
    that two at once (a resume and ``opik-eval batch collect``, two overlapping scheduled jobs)
    neither collect a batch twice nor submit the same failed requests twice."""
    from filelock import FileLock

    run = _run_folder(folder, run_id)
    run.mkdir(parents=True, exist_ok=True)
    with FileLock(run / ".lock", thread_local=False):
        yield


def has_ledger(folder: Path, run_id: str) -> bool:
    run = _run_folder(folder, run_id)
    return run.is_dir() and any(run.glob(f"*{_SUFFIX}"))


def _read(path: Path, damaged: list[str]) -> Iterator[tuple[int, Line]]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        damaged.append(f"{path}: {error.strerror or error}")
        return
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            yield number, _LINE.validate_json(raw)
        except ValidationError:
            # A line cut short by a killed process (the last one), or a later version's kind.
            damaged.append(f"{path}:{number}")


def _run_folder(folder: Path, run_id: str) -> Path:
    return folder / run_id.replace("/", "_")


class Writer:
    """This process's file of the run's ledger: created on the first line; each line flushed."""

    def __init__(self, folder: Path, run_id: str, session_id: str, process: str) -> None:
        self.path = _run_folder(folder, run_id) / f"{session_id}.{process}{_SUFFIX}"
        self._lock = threading.Lock()
        self._file: Any = None

    def write(self, line: _Line) -> None:
        text = line.model_dump_json() + "\n"
        with self._lock:
            if self._file is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._file = self.path.open("a", encoding="utf-8")
            self._file.write(text)
            self._file.flush()  # a process killed after this line keeps it

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None
