"""Folding the journals of trial writes (``journal``) into the store's file: a writer folds its
own every few seconds and when it closes, and a reader every journal it finds first, deleting
those of writers that died. When the file cannot be written (a full disk), the events stay in
the journals, where they are durable, and a read still sees them.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pytest_opik_eval.exceptions import StoreUnwritable
from pytest_opik_eval.store.local.connection import transaction
from pytest_opik_eval.store.local.faults import CAUGHT, Notices, is_fault, unwritable_errno
from pytest_opik_eval.store.local.journal import SIDE_SUFFIX, Event, Journal, folder_of, found


class Journals:
    """This process's journals of one store's trial writes, and their folding into its file.

    ``connect`` opens the file to write it (made when missing), ``unwritable`` says why a write
    failed, and ``notices`` takes what the end of the session should tell."""

    def __init__(
        self,
        path: Path,
        *,
        connect: Callable[[], sqlite3.Connection],
        unwritable: Callable[[BaseException], StoreUnwritable],
        notices: Notices,
    ) -> None:
        self._path = path
        self._folder = folder_of(path)
        self._connect = connect
        self._unwritable = unwritable
        self._notices = notices
        self._main: Journal | None = None
        self._side: Journal | None = None  # events older versions do not know

    def append(self, event: Event, *, side: bool = False) -> None:
        """``side``: an event older versions do not know, for the side journal (see SIDE_SUFFIX)."""
        if self._main is None:
            self._connect()  # the file first: a journal is folded into it
            # Say now, before the first trial runs, that its writes could never be folded.
            code = unwritable_errno(self._path)
            if code is not None:
                raise OSError(code, os.strerror(code), str(self._path))
            self._main = Journal(self._folder)
        if side:
            if self._side is None:
                self._side = Journal(self._folder, SIDE_SUFFIX)
            self._side.append(event)
        else:
            self._main.append(event)
        if self._main.due():
            self.fold_or_keep()

    def fold_or_keep(self) -> bool:
        """Fold this process's journals into the file, or, when the file cannot be written (a full
        disk), keep their events there, where they are durable, for a later fold."""
        try:
            self.fold(everyone=False)
        except CAUGHT as error:
            if not is_fault(error):
                raise
            self._kept_in_journal(error)
            return False
        return True

    def _kept_in_journal(self, error: BaseException) -> None:
        self._notices.once(
            f"{self._unwritable(error)}; the trial writes not yet in it are kept in "
            f"{self._folder}, and the next pytest or opik-eval command that can "
            "write the store folds them in"
        )

    def fold(self, *, everyone: bool, overlay: bool = False) -> bool:
        """Commit this process's events to the file; ``everyone``: other processes' too (before
        a read), deleting the journals of those that died. With ``overlay``, events that cannot
        be committed are applied in a transaction left open for a read (see
        ``LocalStore._reading``): returns whether it is open."""
        own = [j for j in (self._main, self._side) if j is not None]
        others = found(self._folder, [j.path for j in own]) if everyone else []
        committed = overlaid = False
        try:
            events = [event for other in others for event in other.events()]
            events += [event for j in own for event in j.unfolded]
            committed, overlaid = self._commit(events, overlay) if events else (True, False)
        finally:
            for other in others:
                other.done(folded=committed)
        for other in others:
            if other.damaged and committed:
                where = other.kept_as if other.dead else other.path
                self._notices.add(
                    f"{other.damaged} line(s) of the eval store's journal {other.path} could not be "
                    f"read and were left out; its other trial writes are in the store, and the "
                    f"file is kept as {where}"
                )
        if committed:
            for j in own:
                j.folded()
        return overlaid

    def _commit(self, events: list[Event], overlay: bool) -> tuple[bool, bool]:
        """(committed, applied in a transaction left open)."""
        db = self._connect()
        # A journal whose trials are not in this file (it was deleted and made anew)
        # must not stop every later read: its attempts are kept, and never read.
        db.execute("PRAGMA foreign_keys=OFF")
        try:
            with transaction(db):
                apply(db, events)
            return True, False
        except CAUGHT as error:
            if not overlay or not is_fault(error):
                raise
            self._kept_in_journal(error)
            try:
                # Uncommitted changes stay in SQLite's page cache: no disk space needed.
                db.execute("BEGIN")
                apply(db, events)
            except CAUGHT as again:
                if not is_fault(again):
                    raise
                if db.in_transaction:
                    db.execute("ROLLBACK")
                return False, False
            return False, True
        finally:
            if not db.in_transaction:
                db.execute("PRAGMA foreign_keys=ON")

    def close(self) -> None:
        """Fold this process's journals and delete them; kept when they cannot be folded, for the
        next reader to fold."""
        if self._main is None:
            return
        folded = self.fold_or_keep()
        self._main.close(keep=not folded)
        self._main = None
        if self._side is not None:
            self._side.close(keep=not folded)
            self._side = None


def _side_event(side: dict[str, list[Sequence[Any]]], kind: str, params: Sequence[Any]) -> None:
    side[kind].append(params[:2])
    # A "spans" event's third value, its usage summed: earlier versions read the first two.
    if kind == "spans" and len(params) > 2 and params[2] is not None:
        side["usage"].append((params[0], params[2]))


def apply(db: sqlite3.Connection, events: Sequence[Event]) -> None:
    """Write a batch of trial events: an attempt started in the batch is one row written once,
    and one applied again (a journal folded twice) keeps what it already had."""
    started: dict[Any, list[Any]] = {}
    later: dict[str, list[Sequence[Any]]] = {"output": [], "scores": []}  # attempts started earlier
    completed: list[tuple[Any, Any, Any]] = []
    # [attempt, the spans' JSON], [attempt, the Timings' JSON] (of an attempt that never completes),
    # [attempt, the spans' Usage as JSON]
    side: dict[str, list[Sequence[Any]]] = {"spans": [], "timings": [], "usage": []}
    for kind, *params in events:
        if kind in side:
            _side_event(side, kind, params)
            continue
        attempt_id = params[-1] if kind in later else params[0]
        if kind == "start":
            started[attempt_id] = [*params, None, None, None]
        elif kind == "output" and attempt_id in started:
            started[attempt_id][4] = params[0]
        elif kind == "scores" and attempt_id in started:
            started[attempt_id][5:7] = params[:2]
        elif kind in later:
            later[kind].append(params)
        else:  # "complete": journal.Found leaves out what is not one of journal.KINDS
            # [attempt, attempt, the attempt it replaces, its Timings' JSON]: the last two are
            # missing in older journals; older versions read the first three, and ignore the rest.
            replaces = params[2] if len(params) > 2 else None
            # The trial of an attempt started in the batch is known: no lookup (see below).
            start = started.get(attempt_id)
            completed.append((attempt_id, replaces, None if start is None else start[1]))
            if len(params) > 3 and params[3] is not None:
                side["timings"].append((attempt_id, params[3]))
    db.executemany(
        "INSERT INTO attempts (id, trial_id, session_id, started_at, output, scores, passed)"
        " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET"
        " output = coalesce(output, excluded.output), scores = coalesce(scores, excluded.scores),"
        " passed = coalesce(passed, excluded.passed)",
        started.values(),
    )
    db.executemany("UPDATE attempts SET output = ? WHERE id = ?", later["output"])
    db.executemany("UPDATE attempts SET scores = ?, passed = ? WHERE id = ?", later["scores"])
    # The first completion stands: a journal folded twice, or a late attempt of another process
    # (a killed worker's trial run again), cannot replace it. Only a rerun in the same session
    # replaces its own earlier attempt, named in its event.
    # One statement, in the events' order (the first completion stands); the attempt's trial is
    # looked up only when the batch did not start it (coalesce evaluates its arguments lazily).
    db.executemany(
        "UPDATE trials SET completed_attempt = ?1"
        " WHERE (completed_attempt IS NULL OR completed_attempt = ?2)"
        " AND id = coalesce(?3, (SELECT trial_id FROM attempts WHERE id = ?1))",
        completed,
    )
    _write_side(db, side)


def _write_side(db: sqlite3.Connection, side: dict[str, list[Sequence[Any]]]) -> None:
    if side["spans"]:
        # The first record of an attempt's spans stands (a journal folded twice).
        db.executemany("INSERT OR IGNORE INTO attempt_spans (attempt_id, spans) VALUES (?, ?)", side["spans"])
    if side["usage"]:
        db.executemany("INSERT OR IGNORE INTO attempt_usage (attempt_id, usage) VALUES (?, ?)", side["usage"])
    if side["timings"]:
        db.executemany(
            "INSERT OR IGNORE INTO attempt_timings (attempt_id, timings) VALUES (?, ?)", side["timings"]
        )
