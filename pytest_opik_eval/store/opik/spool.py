"""The spool of the Opik backend: the local store, plus an outbox of the writes for the server.

Each write for the server is a row of the outbox, committed in the same transaction as the local
change it mirrors, so a crash can never record one without the other; the sender (``sender``)
sends the rows in order and deletes them, or sets aside with the server's answer those it
refused. The spool also keeps the ids of traces sent under a new id (``renewed_ids``) and what
the server calls each experiment's dataset and items (``remote_experiments``).

A spool is never journaled: its trial writes commit to the file at once, with their outbox rows.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_opik_eval.store.local.connection import transaction
from pytest_opik_eval.store.local.rows import now, output_json, scores_text
from pytest_opik_eval.store.local.store import LocalStore, locked, writing
from pytest_opik_eval.store.opik.config import SYNC_COMMAND
from pytest_opik_eval.store.records import ScoreRecord, SpanRecord, Usage

# A write for the server, kept in the same transaction as the local change it mirrors:
# (kind, JSON payload).
Message = tuple[str, str]

# The tables of a spool beside the store's own; a store made without them (by the local backend,
# or by a version that made them only for a spool) gains them when it is opened as a spool.
_SPOOL_SCHEMA = """
CREATE TABLE IF NOT EXISTS outbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT,  -- send order
    kind TEXT NOT NULL,
    payload TEXT NOT NULL,
    error TEXT  -- set when the server refused it: kept, not retried
);
CREATE TABLE IF NOT EXISTS renewed_ids (
    old TEXT PRIMARY KEY,
    new TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS remote_experiments (
    experiment_id TEXT PRIMARY KEY,
    info TEXT NOT NULL
);
"""


class Spool(LocalStore):
    """The local store at ``path`` with the outbox of the writes for the Opik server."""

    EXTRA_SCHEMA = _SPOOL_SCHEMA

    def __init__(self, path: Path, *, create: bool = True, option: str = "--eval-store") -> None:
        self._outgoing: Sequence[Message] = ()  # the rows of the trial write being made
        super().__init__(path, create=create, option=option, journaled=False)

    # -- trial writes, each with its outbox rows ------------------------------------------

    def start_attempt(
        self, trial_id: str, session_id: str, *, attempt_id: str | None = None, outbox: Sequence[Message] = ()
    ) -> str:
        with self._sending(outbox):
            return super().start_attempt(trial_id, session_id, attempt_id=attempt_id)

    def record_output(
        self, attempt_id: str, output: Mapping[str, Any], *, outbox: Sequence[Message] = ()
    ) -> None:
        with self._sending(outbox):
            super().record_output(attempt_id, output)

    def record_spans(
        self,
        attempt_id: str,
        spans: Sequence[SpanRecord],
        usage: Usage | None = None,
        *,
        outbox: Sequence[Message] = (),
    ) -> None:
        with self._sending(outbox):
            super().record_spans(attempt_id, spans, usage)

    def record_scores(
        self, attempt_id: str, scores: Sequence[ScoreRecord], passed: bool, *, outbox: Sequence[Message] = ()
    ) -> None:
        with self._sending(outbox):
            super().record_scores(attempt_id, scores, passed)

    def complete_attempt(
        self, attempt_id: str, *, replaces: str | None = None, outbox: Sequence[Message] = ()
    ) -> None:
        with self._sending(outbox):
            super().complete_attempt(attempt_id, replaces=replaces)

    @contextlib.contextmanager
    def _sending(self, outbox: Sequence[Message]) -> Iterator[None]:
        """The trial write made in this block commits with ``outbox`` (see ``_write_along``):
        the store's lock, which the write takes again, is held from here to the end."""
        with self._lock:
            self._outgoing = outbox
            try:
                yield
            finally:
                self._outgoing = ()

    def _write_along(self, db: sqlite3.Connection) -> None:
        db.executemany("INSERT INTO outbox (kind, payload) VALUES (?, ?)", self._outgoing)

    @writing
    def record_judges(
        self,
        experiment_id: str,
        update: Mapping[str, str | None],
        *,
        outbox: Callable[[dict[str, str]], Sequence[Message]] = lambda judges: (),
    ) -> dict[str, str]:
        """As the local store's, with ``outbox`` (made from the judges as they are then) committed
        in the same transaction: of two pytest-xdist workers that learn at once, the one that
        commits last sends what both learned, never the other's older view after it."""
        db = self._conn()
        with transaction(db):
            judges = self._learn_judges(db, experiment_id, update)
            if judges is not None:
                db.executemany("INSERT INTO outbox (kind, payload) VALUES (?, ?)", outbox(judges))
        return judges or {}

    # -- the outbox -----------------------------------------------------------------------

    @writing
    def enqueue(self, outbox: Sequence[Message]) -> None:
        self._conn().executemany("INSERT INTO outbox (kind, payload) VALUES (?, ?)", outbox)

    @locked
    def outbox_batch(self, limit: int) -> list[tuple[int, str, str]]:
        """The oldest messages still to send, in order."""
        if self._db is None:
            return []
        rows = self._db.execute(
            "SELECT id, kind, payload FROM outbox WHERE error IS NULL ORDER BY id LIMIT ?", (limit,)
        ).fetchall()
        return [(int(r[0]), str(r[1]), str(r[2])) for r in rows]

    @writing
    def outbox_sent(self, ids: Sequence[int]) -> None:
        self._conn().executemany("DELETE FROM outbox WHERE id = ?", [(i,) for i in ids])

    @writing
    def outbox_refused(self, ids: Sequence[int], error: str) -> None:
        self._conn().executemany("UPDATE outbox SET error = ? WHERE id = ?", [(error, i) for i in ids])

    @locked
    def outbox_counts(self) -> tuple[int, int]:
        """(waiting to be sent, refused by the server)."""
        if self._db is None:
            return 0, 0
        row = self._db.execute("SELECT count(*) - count(error), count(error) FROM outbox").fetchone()
        return int(row[0]), int(row[1])

    @locked
    def outbox_links(self, trace_id: str) -> bool:
        """Whether an experiment item for this trace is still waiting in the outbox."""
        row = (
            self._conn()
            .execute(
                "SELECT 1 FROM outbox WHERE kind = 'experiment_item' AND error IS NULL"
                " AND payload LIKE ? LIMIT 1",
                (f'%"trace_id": "{trace_id}"%',),
            )
            .fetchone()
        )
        return row is not None

    # -- what the spool knows of the server ----------------------------------------------

    @locked
    def renewed_id(self, old: str) -> str | None:
        row = self._conn().execute("SELECT new FROM renewed_ids WHERE old = ?", (old,)).fetchone()
        return None if row is None else str(row[0])

    @writing
    def renew_id(self, old: str, new: str) -> str:
        """Record that the remote object ``old`` is sent as ``new`` from now on."""
        self._conn().execute("INSERT OR REPLACE INTO renewed_ids (old, new) VALUES (?, ?)", (old, new))
        return new

    @writing
    def save_remote(self, experiment_id: str, info: str) -> None:
        self._conn().execute(
            "INSERT OR REPLACE INTO remote_experiments (experiment_id, info) VALUES (?, ?)",
            (experiment_id, info),
        )

    @locked
    def remote(self, experiment_id: str) -> str | None:
        if self._db is None:
            return None
        row = self._db.execute(
            "SELECT info FROM remote_experiments WHERE experiment_id = ?", (experiment_id,)
        ).fetchone()
        return None if row is None else str(row[0])

    @locked
    def attempt_ids(self, experiment_id: str) -> set[str]:
        """The ids of every attempt recorded here for the experiment."""
        with self._reading():
            if self._db is None:
                return set()
            rows = self._db.execute(
                "SELECT a.id FROM attempts a JOIN trials t ON t.id = a.trial_id WHERE t.experiment_id = ?",
                (experiment_id,),
            ).fetchall()
        return {str(row[0]) for row in rows}

    @writing
    def import_attempt(
        self,
        experiment_id: str,
        item_id: str,
        trial: int,
        attempt_id: str,
        output: Mapping[str, Any] | None,
        scores: Sequence[ScoreRecord],
        passed: bool | None,
        completed: bool,
    ) -> None:
        """Record an attempt another machine or tool made, unless it is already here."""
        db = self._conn()
        row = db.execute(
            "SELECT id FROM trials WHERE experiment_id = ? AND dataset_item_id = ? AND trial = ?",
            (experiment_id, item_id, trial),
        ).fetchone()
        if row is None:
            return
        with transaction(db):
            db.execute(
                "INSERT OR IGNORE INTO attempts"
                " (id, trial_id, session_id, started_at, output, scores, passed)"
                " VALUES (?, ?, 'remote', ?, ?, ?, ?)",
                (
                    attempt_id,
                    row[0],
                    now(),
                    None if output is None else output_json(output),
                    scores_text(scores),
                    None if passed is None else int(passed),
                ),
            )
            if completed:
                db.execute(
                    "UPDATE trials SET completed_attempt = ? WHERE id = ? AND completed_attempt IS NULL",
                    (attempt_id, row[0]),
                )


def unsent_line(spool: Spool, sync_command: str = SYNC_COMMAND) -> str | None:
    """One line for the summary: what the spool still holds for the server, if anything."""
    waiting, refused = spool.outbox_counts()
    parts = []
    if waiting:
        parts.append(f"{waiting} write(s) wait to be sent to the Opik server: run {sync_command}")
    if refused:
        parts.append(f"{refused} write(s) were refused by the Opik server (kept in {spool.location})")
    return "; ".join(parts) or None
