"""The app's recorded HTTP interactions, as plain files under the store's folder.

One JSON file per test (``recordings/tests/test_app.py/test_answer.json``), its interactions in
a stable order, indented, keys sorted: a re-recording shows as a readable diff, and the files are
safe to commit (the recorder scrubs secrets before anything reaches this module). A file name
too long for a file system (a long parametrize id) is cut, with a hash of the whole name.

Writers never touch those files while a session runs: each process appends to a journal of its
own (``recordings/.journal/<session>.<worker>.jsonl``), one flushed line per interaction, held
by a file lock while the process lives. :func:`fold`, at the end of a session, applies every
journal whose lock it can take (the session's own, closed, and those of killed processes) to the
per-test files under a folder-wide lock, then deletes them: threads, ``-n`` workers and a crash
never clash, and a killed run's recordings are not lost. A test whose file cannot be written
keeps its lines in a journal for the next fold; the other tests' files are written.

Mode ``all`` replaces a trial's recordings only with those of an attempt that completed: its
interactions are journaled as they come, with their attempt, and apply only once a ``complete``
line for that attempt follows; an interaction whose request and answer are unchanged (but for
the ids and timestamps a provider makes afresh on each call) keeps its old entry, byte for byte.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from pytest_opik_eval.files import write_atomically
from pytest_opik_eval.ids import canonical_json

RECORDINGS = "recordings"
VERSION: Literal[1] = 1
_JOURNALS = ".journal"
_JOURNAL_SUFFIX = ".jsonl"
# A body is one of: a JSON value (diffable), text, or base64 of bytes that are not UTF-8.
BODY_KINDS = ("json", "text", "base64")
# Characters kept as they are in a file name made from a node id; others are percent-escaped.
_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-[]")
# The longest name a file system takes (255 bytes: ext4, APFS, NTFS), less what is added to a
# test's name: ".json", and write_atomically's ".<name>.<12 hex>.tmp" (23 in all). Names that
# fit are kept as they always were; longer ones are cut, with a hash of the whole name after a
# "~", which no escaped name holds (it would be %7E): a cut name never takes another's.
_MAX_FOLDER = 255
_MAX_NAME = _MAX_FOLDER - 23
_HASHED = 16  # hex digits of the sha256 kept
# Fields of a recorded answer that a provider makes afresh on every call (ids, timestamps, the
# backend's build, stream padding): an answer that differs only there is the same answer, and a
# re-recording keeps the old entry (see _same_answer).
VOLATILE_ANSWER_FIELDS = frozenset(
    {
        "id",
        "item_id",
        "created",
        "created_at",
        "system_fingerprint",
        "obfuscation",
        "responseId",
        "createTime",
    }
)


class _Recorded(BaseModel):
    # Tolerant of fields a later version adds: an older plugin still replays its files.
    model_config = ConfigDict(frozen=True)


class _Bodied(_Recorded):
    body: dict[str, Any] | None = None  # {"json": value} | {"text": str} | {"base64": str}

    @field_validator("body")
    @classmethod
    def _one_kind(cls, body: dict[str, Any] | None) -> dict[str, Any] | None:
        if body is not None and (len(body) != 1 or next(iter(body)) not in BODY_KINDS):
            raise ValueError(f"a body is one of {BODY_KINDS}, got the keys {sorted(body)}")
        return body


class RecordedRequest(_Bodied):
    """The canonical request: what an interaction is found by (headers are not part of it)."""

    method: str
    url: str
    content_type: str | None = None  # the one request header kept, for a reader

    @cached_property  # a big prompt makes a long text: made once per request
    def key(self) -> str:
        """The request's part of an interaction's key: its canonical JSON without the header."""
        return canonical_json({"method": self.method, "url": self.url, "body": self.body})


class RecordedResponse(_Bodied):
    status: int
    reason: str = ""
    headers: dict[str, list[str]] = {}


class RecordedUsage(_Recorded):
    """The tokens the response reported, what a replay of it saves."""

    model: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    # USD, priced from the price table when recorded (as it stood when the call was paid for);
    # None when the table is not installed or does not know the model. A batch's answer: at the
    # batch price, the live one in live_cost.
    cost: float | None = None
    live_cost: float | None = None


class Interaction(_Recorded):
    """One request of the app and its response, in one trial of one dataset item."""

    item_id: str
    trial: int
    occurrence: int  # earlier requests with the same canonical request in the same trial attempt
    request: RecordedRequest
    response: RecordedResponse
    usage: RecordedUsage | None = None
    batch: str | None = None  # --eval-batch: the provider's batch that answered it
    run: str | None = None  # --eval-batch: the run it was recorded in, the only one that replays it

    @property
    def key(self) -> tuple[str, int, str, int]:
        return (self.item_id, self.trial, self.request.key, self.occurrence)


class RecordingFile(_Recorded):
    version: Literal[1] = VERSION
    test: str
    interactions: list[Interaction] = []


class _Added(_Recorded):
    kind: Literal["add"] = "add"
    test: str
    interaction: Interaction
    # Mode all: the trial attempt that made it, whose interactions apply only once it completes.
    attempt: str | None = None


class _Completed(_Recorded):
    """Mode ``all``: the attempt completed; its interactions replace the trial's."""

    kind: Literal["complete"] = "complete"
    test: str
    item_id: str
    trial: int
    attempt: str


_Line = _Added | _Completed


def recordings_folder(store_folder: Path) -> Path:
    return store_folder / RECORDINGS


def test_file(folder: Path, test: str) -> Path:
    """The file of ``test`` (a node id with its own parametrize ids, not the trial's): one folder
    per part of the node id, each part percent-escaped so that no id makes a path outside
    ``folder``, and cut to a length every file system takes."""
    parts = [_escaped(part) for part in test.replace("::", "/").split("/") if part]
    folders = [_bounded(part, _MAX_FOLDER) for part in parts[:-1]]
    return folder.joinpath(*folders, _bounded(parts[-1], _MAX_NAME) + ".json")


test_file.__test__ = False  # type: ignore[attr-defined]  # not a test, for pytest's collection


def _bounded(name: str, limit: int) -> str:
    """``name``, or when longer than ``limit``, its start and a hash of the whole: readable, and
    the same on every run."""
    if len(name) <= limit:
        return name
    start = name[: limit - _HASHED - 1]
    if "%" in start[-2:]:  # not half of an escape
        start = start[: start.rindex("%")]
    return f"{start}~{hashlib.sha256(name.encode()).hexdigest()[:_HASHED]}"


def _escaped(part: str) -> str:
    if part in (".", ".."):
        return part.replace(".", "%2E")
    return "".join(c if c in _SAFE else "".join(f"%{b:02X}" for b in c.encode()) for c in part)


def load(folder: Path, test: str) -> list[Interaction]:
    """The interactions recorded for ``test``; none when it has no file."""
    path = test_file(folder, test)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    return _parsed(path, text).interactions


def _parsed(path: Path, text: str) -> RecordingFile:
    try:
        return RecordingFile.model_validate_json(text)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        why = f"{where}: {first['msg']}" if where else first["msg"]
        raise ValueError(
            f"{path} is not a recording file this plugin reads ({why}): "
            "fix it (a merge conflict?), or delete it to record its calls again"
        ) from None


def _write(folder: Path, test: str, interactions: Iterable[Interaction]) -> None:
    """Write the file atomically (a reader never sees half of it), in the stable order."""
    path = test_file(folder, test)
    ordered = sorted(interactions, key=lambda interaction: interaction.key)
    if not ordered:
        path.unlink(missing_ok=True)
        return
    content = RecordingFile(test=test, interactions=ordered).model_dump(mode="json", exclude_none=False)
    text = json.dumps(content, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    write_atomically(path, text)


class Journal:
    """This process's journal (one per process and folder): created on the first line, held by a
    file lock until :meth:`close`, folded into the per-test files by :func:`fold`."""

    def __init__(self, folder: Path, session_id: str, worker: str) -> None:
        self.path = folder / _JOURNALS / f"{_escaped(session_id)}.{_escaped(worker)}{_JOURNAL_SUFFIX}"
        self._lock = threading.Lock()  # threads of one process append whole lines, one at a time
        self._file: Any = None
        self._held: Any = None  # the FileLock, from the first line to close()

    def add(self, test: str, interaction: Interaction, attempt: str | None = None) -> None:
        """Journal ``interaction``; with ``attempt`` (mode all), to apply once it completes."""
        self._append(_Added(test=test, interaction=interaction, attempt=attempt))

    def complete(self, test: str, item_id: str, trial: int, attempt: str) -> None:
        """Mode all: ``attempt`` of the trial completed, its interactions replace the trial's."""
        self._append(_Completed(test=test, item_id=item_id, trial=trial, attempt=attempt))

    def _append(self, line: _Line) -> None:
        text = line.model_dump_json() + "\n"
        with self._lock:
            if self._file is None:
                self._open()
            self._file.write(text)
            # Flushed line by line: a process killed later loses nothing already recorded.
            self._file.flush()

    def _open(self) -> None:
        from filelock import FileLock

        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Not thread-local: the first line may come from any thread, close() from another.
        self._held = FileLock(f"{self.path}.lock", thread_local=False)
        self._held.acquire(timeout=0)  # the name is this process's own: nobody else holds it
        self._file = self.path.open("a", encoding="utf-8")

    def close(self) -> None:
        """Close the file and free its lock; the journal stays until it is folded."""
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._held.release()
                self._file = self._held = None


@dataclass
class Folded:
    """What a :func:`fold` could not do as asked."""

    set_aside: list[str] = field(default_factory=list)  # damaged files renamed aside: what, where
    unsaved: list[str] = field(default_factory=list)  # the files that could not be written, and why


def fold(folder: Path) -> Folded:
    """Fold every journal no live process holds into the per-test files, then delete it. Journals
    apply oldest first, each line in order (see ``_applied``). Each test's file is written on its
    own: one that cannot be (a full disk, a folder in its place) is named in ``unsaved``, its
    lines kept in a journal for the next fold, and the other tests' files are written."""
    journals = folder / _JOURNALS
    folded = Folded()
    if not journals.is_dir():
        return folded
    from filelock import FileLock, Timeout

    with FileLock(f"{journals / '.fold'}.lock", thread_local=False):
        taken: list[tuple[Path, FileLock]] = []
        for path in sorted(journals.glob(f"*{_JOURNAL_SUFFIX}"), key=_age):
            lock = FileLock(f"{path}.lock", thread_local=False)
            try:
                lock.acquire(timeout=0)
            except Timeout:
                continue  # its process is alive and may still append
            taken.append((path, lock))
        tests: dict[str, list[_Line]] = {}
        for path, _ in taken:
            for line in _lines(path):
                tests.setdefault(line.test, []).append(line)
        unsaved: list[_Line] = []
        for test, lines in tests.items():
            try:
                _write(folder, test, _applied(_loaded_or_set_aside(folder, test, folded.set_aside), lines))
            except OSError as error:
                unsaved += lines
                folded.unsaved.append(f"{test_file(folder, test)}: {error.strerror or error}")
        # Kept whole when what could not be saved cannot be set apart either: applied again, each
        # line gives the same files.
        done = not unsaved or _kept(journals, unsaved, taken[0][0])
        for path, lock in taken:
            if done:
                path.unlink(missing_ok=True)
            lock.release()
            Path(lock.lock_file).unlink(missing_ok=True)
    return folded


def _age(path: Path) -> tuple[float, str]:
    return (path.stat().st_mtime, path.name)


def _lines(path: Path) -> list[_Line]:
    found: list[_Line] = []
    # A last line without its newline was torn by a crash: left out, as any damaged line.
    for line in path.read_text(encoding="utf-8").split("\n")[:-1]:
        try:
            data = json.loads(line)
            kind = _Completed if data.get("kind") == "complete" else _Added
            found.append(kind.model_validate(data))
        except (ValueError, AttributeError):  # pydantic's ValidationError is a ValueError
            continue
    return found


def _kept(journals: Path, lines: Sequence[_Line], oldest: Path) -> bool:
    """Whether ``lines`` (of the tests not saved) are kept in a journal of their own, as old as
    the oldest journal they come from, so that the next fold applies them first."""
    import secrets

    path = journals / f"unsaved.{secrets.token_hex(6)}{_JOURNAL_SUFFIX}"
    try:
        write_atomically(path, "".join(line.model_dump_json() + "\n" for line in lines))
        age = oldest.stat()
        os.utime(path, ns=(age.st_atime_ns, age.st_mtime_ns))
    except OSError:
        path.unlink(missing_ok=True)
        return False
    return True


def _applied(recorded: Iterable[Interaction], lines: Sequence[_Line]) -> Iterable[Interaction]:
    """The test's interactions with its journaled lines applied: an ``add`` without an attempt
    replaces the interaction with the same key; an attempt's adds wait for its ``complete``
    line, and are dropped without one (the attempt failed, or its process was killed)."""
    interactions = {i.key: i for i in recorded}
    held: dict[str, list[Interaction]] = {}
    for line in lines:
        if isinstance(line, _Completed):
            _replace(interactions, line.item_id, line.trial, held.pop(line.attempt, []))
        elif line.attempt is None:
            interactions[line.interaction.key] = line.interaction
        else:
            held.setdefault(line.attempt, []).append(line.interaction)
    return interactions.values()


def _replace(
    interactions: dict[tuple[str, int, str, int], Interaction],
    item_id: str,
    trial: int,
    new: list[Interaction],
) -> None:
    """The trial's interactions become ``new``. When the attempt made the very requests that were
    recorded, an answer that did not change (but for its volatile fields) keeps its old entry,
    so a re-recording's diff shows only what changed; safe to mix, since the app made the same
    requests after the old answers as after the new. Otherwise (a later request carried a new
    id, say) the new ones replace them all."""
    old = {key: interactions.pop(key) for key in [k for k in interactions if k[:2] == (item_id, trial)]}
    same_requests = {i.key for i in new} == old.keys()
    for interaction in new:
        before = old.get(interaction.key) if same_requests else None
        unchanged = before is not None and _same_answer(before, interaction)
        interactions[interaction.key] = before if unchanged and before is not None else interaction


def _same_answer(old: Interaction, new: Interaction) -> bool:
    a, b = old.response, new.response
    return (a.status, a.reason, a.headers) == (b.status, b.reason, b.headers) and _stable(a.body) == _stable(
        b.body
    )


def _stable(body: dict[str, Any] | None) -> Any:
    """A stored body without its volatile fields: in a JSON body, and in each event of a stream."""
    if not body or "base64" in body:
        return body
    if "json" in body:
        return _without_volatile(body["json"])
    events = []
    for line in str(body["text"]).splitlines():
        try:
            events.append(_without_volatile(json.loads(line[5:])) if line.startswith("data:") else line)
        except ValueError:  # "data: [DONE]"
            events.append(line)
    return events


def _without_volatile(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_volatile(v) for k, v in value.items() if k not in VOLATILE_ANSWER_FIELDS}
    if isinstance(value, list):
        return [_without_volatile(v) for v in value]
    return value


def _loaded_or_set_aside(folder: Path, test: str, damaged: list[str]) -> list[Interaction]:
    """The test's recorded interactions; a file this plugin cannot read (a merge conflict left in
    it) is renamed aside, kept for its owner to look at, and the test's recordings start again
    from this session's: what the session recorded is never lost to a damaged file."""
    try:
        return load(folder, test)
    except ValueError as error:
        path = test_file(folder, test)
        aside = path.with_name(f"{path.name}.damaged")
        os.replace(path, aside)
        damaged.append(f"{error}; it is kept as {aside}, and the test's new recordings are in {path}")
        return []


def merge(folder: Path, sources: Sequence[Path]) -> int:
    """Add the recordings of other folders (CI shards) to ``folder``'s; the number of
    interactions added. An interaction ``folder`` has already keeps its own answer. A source's
    journals left by a killed shard are folded into it first: what that fold could not write (or
    set aside) is not in the source's files, so merge adds the rest, then raises ``ValueError``
    naming it, never reporting a merge that left recordings behind as whole."""
    added = 0
    left: list[str] = []
    for source in sources:
        if source.resolve() == folder.resolve():
            continue
        folded = fold(source)
        left += folded.set_aside + [f"{why}; it waits in a journal of {source}" for why in folded.unsaved]
        for path in sorted(source.rglob("*.json")):
            if _JOURNALS in path.relative_to(source).parts or not path.is_file():
                continue  # a journal, or a folder in a file's place (named in ``left``)
            recorded = _parsed(path, path.read_text(encoding="utf-8"))
            mine = {i.key: i for i in load(folder, recorded.test)}
            new = [i for i in recorded.interactions if i.key not in mine]
            if new:
                _write(folder, recorded.test, [*mine.values(), *new])
                added += len(new)
    if left:
        raise ValueError(f"{added} interaction(s) added, but not all: " + "; ".join(left))
    return added
