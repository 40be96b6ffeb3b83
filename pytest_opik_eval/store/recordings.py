"""The app's recorded HTTP interactions, as plain files under the store's folder.

One JSON file per test (``recordings/tests/test_app.py/test_answer.json``), its interactions in
a stable order, indented, keys sorted: a re-recording shows as a readable diff, and the files are
safe to commit (the recorder scrubs secrets before anything reaches this module).

Writers never touch those files while a session runs: each process appends to a journal of its
own (``recordings/.journal/<session>.<worker>.jsonl``), one flushed line per interaction, held
by a file lock while the process lives. :func:`fold`, at the end of a session, applies every
journal whose lock it can take (the session's own, closed, and those of killed processes) to the
per-test files under a folder-wide lock, then deletes them: threads, ``-n`` workers and a crash
never clash, and a killed run's recordings are not lost.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable, Sequence
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
    # None when the table is not installed or does not know the model.
    cost: float | None = None


class Interaction(_Recorded):
    """One request of the app and its response, in one trial of one dataset item."""

    item_id: str
    trial: int
    occurrence: int  # earlier requests with the same canonical request in the same trial attempt
    request: RecordedRequest
    response: RecordedResponse
    usage: RecordedUsage | None = None

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


class _Reset(_Recorded):
    """Mode ``all``: the trial's earlier interactions go (journaled before its first new one)."""

    kind: Literal["reset"] = "reset"
    test: str
    item_id: str
    trial: int


def recordings_folder(store_folder: Path) -> Path:
    return store_folder / RECORDINGS


def test_file(folder: Path, test: str) -> Path:
    """The file of ``test`` (a node id with its own parametrize ids, not the trial's): one folder
    per part of the node id, each part percent-escaped so that no id makes a path outside
    ``folder``."""
    parts = [_escaped(part) for part in test.replace("::", "/").split("/") if part]
    return folder.joinpath(*parts[:-1], parts[-1] + ".json")


test_file.__test__ = False  # type: ignore[attr-defined]  # not a test, for pytest's collection


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

    def add(self, test: str, interaction: Interaction) -> None:
        self._append(_Added(test=test, interaction=interaction))

    def reset(self, test: str, item_id: str, trial: int) -> None:
        self._append(_Reset(test=test, item_id=item_id, trial=trial))

    def _append(self, line: _Added | _Reset) -> None:
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


def fold(folder: Path) -> list[str]:
    """Fold every journal no live process holds into the per-test files, then delete it; what
    went wrong with a damaged file, set aside (see ``_loaded_or_set_aside``). Journals apply
    oldest first, each line in order: a ``reset`` drops the trial's interactions so far, an
    ``add`` replaces one with the same key."""
    journals = folder / _JOURNALS
    if not journals.is_dir():
        return []
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
        tests: dict[str, dict[tuple[str, int, str, int], Interaction]] = {}
        damaged: list[str] = []
        for path, _ in taken:
            _apply(folder, _lines(path), tests, damaged)
        for test, interactions in tests.items():
            _write(folder, test, interactions.values())
        for path, lock in taken:
            path.unlink(missing_ok=True)
            lock.release()
            Path(lock.lock_file).unlink(missing_ok=True)
    return damaged


def _age(path: Path) -> tuple[float, str]:
    return (path.stat().st_mtime, path.name)


def _lines(path: Path) -> list[_Added | _Reset]:
    found: list[_Added | _Reset] = []
    # A last line without its newline was torn by a crash: left out, as any damaged line.
    for line in path.read_text(encoding="utf-8").split("\n")[:-1]:
        try:
            data = json.loads(line)
            kind = _Reset if data.get("kind") == "reset" else _Added
            found.append(kind.model_validate(data))
        except (ValueError, AttributeError):  # pydantic's ValidationError is a ValueError
            continue
    return found


def _apply(
    folder: Path,
    lines: Sequence[_Added | _Reset],
    tests: dict[str, dict[tuple[str, int, str, int], Interaction]],
    damaged: list[str],
) -> None:
    for line in lines:
        if line.test not in tests:
            tests[line.test] = {i.key: i for i in _loaded_or_set_aside(folder, line.test, damaged)}
        interactions = tests[line.test]
        if isinstance(line, _Reset):
            for key in [k for k in interactions if k[:2] == (line.item_id, line.trial)]:
                del interactions[key]
        else:
            interactions[line.interaction.key] = line.interaction


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
    journals left by a killed shard are folded into it first."""
    added = 0
    for source in sources:
        if source.resolve() == folder.resolve():
            continue
        fold(source)
        for path in sorted(source.rglob("*.json")):
            if _JOURNALS in path.relative_to(source).parts:
                continue
            recorded = _parsed(path, path.read_text(encoding="utf-8"))
            mine = {i.key: i for i in load(folder, recorded.test)}
            new = [i for i in recorded.interactions if i.key not in mine]
            if new:
                _write(folder, recorded.test, [*mine.values(), *new])
                added += len(new)
    return added
