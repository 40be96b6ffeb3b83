"""A process's trial writes, appended to a file of its own before they are folded into SQLite.

Why: each of a trial's four writes (started, output, scores, completed) must be durable when the
store call returns. An SQLite commit costs 40-100 µs (WAL frames, locks, b-tree pages), which
made the store most of a trivial trial's cost; one line appended with a single ``write(2)`` is
in the operating system's hands when the call returns (a SIGKILL right after loses nothing) and
costs a few µs. A power cut may tear the last line: a reader ignores it, so the store is never
corrupted, as with SQLite's own ``synchronous=NORMAL``.

The local store folds the lines into SQLite in one transaction: the writer every few seconds and
when it closes; any other process that reads the store folds every journal it finds first
(folding is idempotent), and deletes the journals of writers that died. A writer holds a file
lock on its journal for as long as it lives, which is how the others tell.
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from collections.abc import Sequence
from json.encoder import encode_basestring
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from filelock import FileLock

# One event: its kind, then the SQL parameters of its write (see folding.apply). A writer
# makes tuples: the garbage collector stops tracking a tuple of strings and numbers, so the
# events waiting for the next fold do not add to the heap it keeps walking.
Event = Sequence[str | int | None]
KINDS = frozenset({"start", "output", "scores", "complete", "spans", "timings"})

# The file format's version is in the files' names: a reader never misreads another version's.
_SUFFIX = ".v1.jsonl"
# The events that versions before spans were recorded do not know ("spans", and "timings" of an
# attempt that never completes) go to a journal of their own, which those versions never glob:
# they would count such lines as damaged, and set the whole file aside. Their own events (start,
# output, scores, complete, with an attempt's timings at the end of its "complete", which they
# ignore) stay in the main journal, which they fold as ever.
SIDE_SUFFIX = ".v1.side.jsonl"
# How stale the SQLite file may be for other readers while a writer runs.
FOLD_SECONDS = 2.0


def folder_of(store: Path) -> Path:
    return store.with_name(store.name + ".journals")


class Journal:
    """This process's journal for one store: created on the first write, deleted on close."""

    def __init__(self, folder: Path, suffix: str = _SUFFIX) -> None:
        folder.mkdir(exist_ok=True)
        self.path = folder / f"{os.getpid()}-{uuid.uuid4().hex[:12]}{suffix}"
        self._lock = _OwnLock(f"{self.path}.lock")
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.unfolded: list[Event] = []
        self.folded_at = time.monotonic()
        self._size = 0

    def append(self, event: Event) -> None:
        line = _line(event)
        try:
            written = os.write(self._fd, line)
            while written < len(line):  # a full disk may take part of a line before it fails
                written += os.write(self._fd, line[written:])
        except OSError:
            # No torn line in the middle of the file, which the next line would turn into a
            # damaged one: the journal ends where it did.
            os.ftruncate(self._fd, self._size)
            raise
        self._size += len(line)
        self.unfolded.append(event)

    def due(self) -> bool:
        return time.monotonic() - self.folded_at > FOLD_SECONDS

    def folded(self) -> None:
        """Its events are committed to SQLite: start the file afresh."""
        self.unfolded.clear()
        os.ftruncate(self._fd, 0)  # with O_APPEND, the next line goes to the start again
        self._size = 0
        self.folded_at = time.monotonic()

    def close(self, *, keep: bool = False) -> None:
        """Once everything was folded the file goes; ``keep`` it when its events could not be
        folded (a full disk): the next reader folds them. The lock goes either way."""
        os.close(self._fd)
        if not keep:
            self.path.unlink(missing_ok=True)
        self._lock.release()


class _OwnLock:
    """The lock a writer holds on its journal for as long as it lives. On POSIX, the flock(2) of
    the lock file that filelock's FileLock takes (readers test it with one), taken directly:
    importing filelock costs about 40 ms, in every session that runs a trial."""

    def __init__(self, path: str) -> None:
        self.lock_file = path
        if sys.platform == "win32":
            from filelock import FileLock

            self._filelock = FileLock(path)
            self._filelock.acquire(timeout=0)
        else:
            import fcntl

            self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                # The journal's name is new: nobody else holds its lock, this never waits.
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BaseException:
                os.close(self._fd)
                raise

    def release(self) -> None:
        if sys.platform == "win32":
            self._filelock.release()
        else:
            os.close(self._fd)  # which releases the flock
        Path(self.lock_file).unlink(missing_ok=True)


class Found:
    """Another writer's journal (or another store object's of this process). When its writer
    is dead, its lock is held from here until ``done``, so nothing can be appended unseen."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.damaged = 0  # lines that are not events: kept aside with the file, never applied
        from filelock import FileLock, Timeout

        self._lock = FileLock(f"{path}.lock")
        try:
            self._lock.acquire(timeout=0)
            self.dead = True
        except Timeout:
            self.dead = False

    def events(self) -> list[Event]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []  # folded and deleted by another reader meanwhile
        events: list[Event] = []
        self.damaged = 0
        # A line without its newline was torn by a crash, or is being written: leave it.
        for line in text.split("\n")[:-1]:
            try:
                event = json.loads(line)
            except ValueError:
                event = None
            if isinstance(event, list) and event and event[0] in KINDS:
                events.append(event)
            else:
                self.damaged += 1
        return events

    @property
    def kept_as(self) -> Path:
        return self.path.with_name(self.path.name + ".damaged")

    def done(self, folded: bool) -> None:
        """A dead writer's journal goes once its events are committed; one with damaged lines
        is kept aside, under a name no reader folds again."""
        if self.dead:
            if folded and self.damaged:
                self.path.replace(self.kept_as)
            elif folded:
                self.path.unlink(missing_ok=True)
            _release(self._lock)


def _line(event: Event) -> bytes:
    """The event as one line of JSON. Written directly: an event is a flat list of strings,
    integers and nulls, and json's encoder costs twice as much for it, four times per trial."""
    fields = [
        encode_basestring(value) if isinstance(value, str) else "null" if value is None else f"{value:d}"
        for value in event
    ]
    return ("[" + ",".join(fields) + "]\n").encode()


def found(folder: Path, own: Sequence[Path]) -> list[Found]:
    if not folder.is_dir():
        return []
    paths = sorted([*folder.glob(f"*{_SUFFIX}"), *folder.glob(f"*{SIDE_SUFFIX}")])
    return [Found(path) for path in paths if path not in own]


def _release(lock: FileLock) -> None:
    lock.release()
    Path(lock.lock_file).unlink(missing_ok=True)
