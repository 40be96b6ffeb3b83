"""The store proper: ``LocalStore``, what it writes and what it reads back, one thread at a time.

A trial's writes go to this process's journal (``folding``), folded into the file before
anything is read from it; a run's plan, a verdict and a merge are written to the file at once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, TypeVar, cast

from pytest_opik_eval.exceptions import ExperimentNotFound, StoreUnwritable
from pytest_opik_eval.gcpause import no_gc_pass
from pytest_opik_eval.ids import uuid7, uuid7_from_name
from pytest_opik_eval.store.local.connection import open_file, transaction
from pytest_opik_eval.store.local.faults import CAUGHT, Notices, is_fault, unwritable_errno, unwritable_error
from pytest_opik_eval.store.local.folding import Journals, apply
from pytest_opik_eval.store.local.journal import Event
from pytest_opik_eval.store.local.rows import (
    now,
    output_json,
    scores_text,
    spans_of,
    spans_text,
    timings_text,
    trial_record,
    trials_query,
    unreadable_notice,
)
from pytest_opik_eval.store.local.schema import OPTIONAL_TABLES
from pytest_opik_eval.store.records import (
    ExperimentRecord,
    PlannedTrial,
    RunRecord,
    RunSummary,
    ScoreRecord,
    SpanRecord,
    TrialRecord,
    TrialState,
    Usage,
    learned_judges,
)

_Method = TypeVar("_Method", bound=Callable[..., Any])


def locked(method: _Method) -> _Method:
    """One thread at a time on the connection: trials may run in background threads."""

    @functools.wraps(method)
    def locked(self: LocalStore, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return method(self, *args, **kwargs)

    return cast(_Method, locked)


def writing(method: _Method) -> _Method:
    """As ``locked``, for a method that writes: a full disk, a read-only file or folder, or a
    file size limit become one ``StoreUnwritable`` that names the store and the cause."""

    @functools.wraps(method)
    def writing(self: LocalStore, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            try:
                return method(self, *args, **kwargs)
            except CAUGHT as error:
                if not is_fault(error):
                    raise
                raise self.unwritable(error) from error

    return cast(_Method, writing)


class LocalStore:
    """The SQLite store at ``path``; the file and its folder are created on first write."""

    BUSY_TIMEOUT: ClassVar[float] = 60.0  # seconds to wait for another process's hold on the file

    def __init__(
        self, path: Path, *, create: bool = True, option: str = "--eval-store", journaled: bool = True
    ) -> None:
        """``create=False`` only reads: a missing or empty file is a store with no runs.
        ``option`` is the option that names the store, for error messages. ``journaled=False``
        commits each trial write to the file at once (a subclass's rows, see ``_write_along``,
        commit with the write they go with)."""
        self.path = path
        self._option = option
        self._lock = threading.RLock()
        self._db: sqlite3.Connection | None = None
        self._journaled = journaled
        self._timings: dict[str, str] = {}  # attempt -> timings, written when it completes
        self._notices = Notices()
        self._journals = Journals(path, connect=self._conn, unwritable=self.unwritable, notices=self._notices)
        self._immutable = False  # opened read-only, in a read-only folder
        # Which of the tables a store made by an earlier version lacks the file has (all, until
        # it is opened).
        self._tables = frozenset(OPTIONAL_TABLES)
        if path.exists() or create:
            self._db = self._open(create)

    @property
    def location(self) -> str:
        return str(self.path)

    def notices(self) -> list[str]:
        return self._notices.take()

    # -- opening -------------------------------------------------------------------------

    def _open(self, create: bool) -> sqlite3.Connection | None:
        opened = open_file(
            self.path,
            create=create,
            option=self._option,
            extra_schema=self.EXTRA_SCHEMA,
            timeout=self.BUSY_TIMEOUT,
        )
        if opened.immutable:
            self._immutable = True
        if opened.db is not None:
            self._tables = opened.tables
        return opened.db

    def unwritable(self, error: BaseException, *, opening: bool = False) -> StoreUnwritable:
        """One line for a write that failed: the store, the cause, and what to do."""
        return unwritable_error(
            error, self.path, option=self._option, waited=self.BUSY_TIMEOUT, opening=opening
        )

    def check_writable(self) -> None:
        """Raise ``StoreUnwritable`` now if the store's file or folder cannot be written: the
        pytest-xdist controller, which writes nothing itself, checks before its workers start."""
        code = unwritable_errno(self.path)
        if code is not None:
            raise self.unwritable(OSError(code, os.strerror(code), str(self.path)))

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            self._db = self._open(create=True)
            assert self._db is not None, "opened to write: the schema exists"
        return self._db

    # -- writes --------------------------------------------------------------------------

    @writing
    def create_run(
        self,
        run: RunRecord,
        experiments: Sequence[ExperimentRecord],
        trials: Sequence[PlannedTrial],
    ) -> None:
        """All or nothing; what is already recorded is kept, so several processes (pytest-xdist
        workers, or a resume on another machine) can record the same run with the same ids."""
        db = self._conn()
        with transaction(db):
            db.execute(
                "INSERT OR IGNORE INTO runs (id, created_at, record) VALUES (?, ?, ?)",
                (run.id, run.created_at, run.model_dump_json()),
            )
            db.executemany(
                "INSERT OR IGNORE INTO experiments (id, run_id, position, test, params, record)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                [
                    (e.id, e.run_id, i, e.test, e.params, e.model_dump_json())
                    for i, e in enumerate(experiments)
                ],
            )
            db.executemany(
                "INSERT OR IGNORE INTO trials (id, experiment_id, position, dataset_item_id, trial, node_id)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                [
                    (t.id, t.experiment_id, i, t.dataset_item_id, t.trial, t.node_id)
                    for i, t in enumerate(trials)
                ],
            )

    @writing
    def start_attempt(self, trial_id: str, session_id: str, *, attempt_id: str | None = None) -> str:
        attempt_id = attempt_id or uuid7()
        self._record(("start", attempt_id, trial_id, session_id, now()))
        return attempt_id

    @writing
    def record_output(self, attempt_id: str, output: Mapping[str, Any]) -> None:
        self._record(("output", output_json(output), attempt_id))

    @writing
    def record_scores(self, attempt_id: str, scores: Sequence[ScoreRecord], passed: bool) -> None:
        self._record(("scores", scores_text(scores), int(passed), attempt_id))

    @writing
    def record_spans(self, attempt_id: str, spans: Sequence[SpanRecord], usage: Usage | None = None) -> None:
        """The spans of the attempt's trace, its task span first (see ``run/trial_trace.py``), and
        what they reported, summed (``verdict/usage.trial_usage``), returned by ``trials``
        without the spans."""
        text = spans_text(spans)
        if usage is None:
            self._record(("spans", attempt_id, text), side=True)
        else:
            usage_text = usage.model_dump_json(exclude_defaults=True)
            self._record(("spans", attempt_id, text, usage_text), side=True)

    @writing
    def record_timings(
        self,
        attempt_id: str,
        task_seconds: float | None,
        metric_seconds: Mapping[str, float],
        *,
        completes: bool = False,
    ) -> None:
        """The attempt's timings: with its "complete" event when it ``completes`` (no write of
        their own for nearly every trial), or now, on their own."""
        text = timings_text(task_seconds, metric_seconds)
        if completes:
            self._timings[attempt_id] = text
        else:
            self._record(("timings", attempt_id, text), side=True)

    @writing
    def complete_attempt(self, attempt_id: str, *, replaces: str | None = None) -> None:
        timings = self._timings.pop(attempt_id, None)
        if timings is None:
            self._record(("complete", attempt_id, attempt_id, replaces))
        else:
            self._record(("complete", attempt_id, attempt_id, replaces, timings))

    @writing
    def record_verdict(self, experiment_id: str, passed: bool, aggregates: Mapping[str, float]) -> None:
        self._conn().execute("UPDATE experiments SET verdict = ? WHERE id = ?", (int(passed), experiment_id))

    @writing
    def bind_test(self, experiment: ExperimentRecord) -> None:
        self._conn().execute(
            "UPDATE experiments SET test = ?, params = ?, record = ? WHERE id = ? AND test = ''",
            (experiment.test, experiment.params, experiment.model_dump_json(), experiment.id),
        )

    @writing
    def record_judges(self, experiment_id: str, update: Mapping[str, str | None]) -> dict[str, str]:
        """The judges' score names learned for the experiment (see ``StoreExtras.record_judges``):
        read and written in one transaction, so that pytest-xdist workers learning at once each
        add theirs."""
        db = self._conn()
        with transaction(db):
            judges = self._learn_judges(db, experiment_id, update)
        return judges or {}

    @staticmethod
    def _learn_judges(
        db: sqlite3.Connection, experiment_id: str, update: Mapping[str, str | None]
    ) -> dict[str, str] | None:
        """``record_judges``'s change, in the caller's transaction; None: no such experiment."""
        row = db.execute("SELECT record FROM experiments WHERE id = ?", (experiment_id,)).fetchone()
        if row is None:
            return None
        record = ExperimentRecord.model_validate_json(row[0])
        judges = learned_judges(record.judges, update)
        if judges != record.judges:
            db.execute(
                "UPDATE experiments SET record = ? WHERE id = ?",
                (record.model_copy(update={"judges": judges}).model_dump_json(), experiment_id),
            )
        return judges

    @locked
    def flush(self) -> None:
        self._journals.fold_or_keep()  # so that other processes (an xdist controller) read it all

    def _record(self, event: Event, *, side: bool = False) -> None:
        """``side``: an event older versions do not know, for the side journal (see journal.SIDE_SUFFIX)."""
        if self._journaled:
            self._journals.append(event, side=side)
            return
        db = self._conn()
        with transaction(db):
            apply(db, [event])
            self._write_along(db)

    # -- what a subclass adds (store/opik/spool.py) --------------------------------------

    # A subclass's own tables, as CREATE TABLE IF NOT EXISTS (or INDEX) statements: they are
    # made whenever the file is opened to be written, so a store made without them gains them.
    EXTRA_SCHEMA: ClassVar[str] = ""

    def _write_along(self, db: sqlite3.Connection) -> None:
        """Rows a subclass writes in the same transaction as a trial write, which then commit
        together or not at all: called only in a store that is not journaled (``journaled=False``),
        under the store's lock."""

    @contextlib.contextmanager
    def _reading(self) -> Iterator[None]:
        """Every journal folded in before a read. When the file cannot be written (a full disk),
        the read still sees the journals' events: they are applied in a transaction that is
        rolled back after the read, and stay in the journals."""
        overlaid = self._journals.fold(everyone=not self._immutable, overlay=True)
        try:
            yield
        finally:
            if overlaid and self._db is not None:
                with contextlib.suppress(sqlite3.Error):
                    self._db.execute("ROLLBACK")
                self._db.execute("PRAGMA foreign_keys=ON")

    # -- merging ------------------------------------------------------------------------

    @writing
    def merge_from(self, source: Path) -> int:
        """Copy in the runs of another store (a CI shard's): its trials and attempts join those
        already here, and a trial completed in either is completed. Returns how many runs."""
        other = LocalStore(source, create=False)  # checks that it is a store this version reads
        other.runs()  # and folds the journals its writers left
        other.close()
        self._journals.fold(everyone=not self._immutable)
        db = self._conn()
        db.execute("ATTACH DATABASE ? AS source", (str(source),))
        try:
            runs = db.execute("SELECT count(*) FROM source.runs").fetchone()[0]
            with transaction(db):
                self._merge_judges(db)  # before the trials join: which store scored which
                for table in ("runs", "experiments", "trials", "attempts"):
                    db.execute(f"INSERT OR IGNORE INTO {table} SELECT * FROM source.{table}")
                for table in OPTIONAL_TABLES:
                    if db.execute(
                        "SELECT count(*) FROM source.sqlite_master WHERE name = ?", (table,)
                    ).fetchone()[0]:
                        db.execute(f"INSERT OR IGNORE INTO {table} SELECT * FROM source.{table}")
                db.execute(
                    "UPDATE trials SET completed_attempt = (SELECT s.completed_attempt FROM source.trials s"
                    " WHERE s.id = trials.id) WHERE completed_attempt IS NULL AND id IN"
                    " (SELECT id FROM source.trials WHERE completed_attempt IS NOT NULL)"
                )
        finally:
            db.execute("DETACH DATABASE source")
        return int(runs)

    @staticmethod
    def _merge_judges(db: sqlite3.Connection) -> None:
        """An experiment that both stores have: the judges' score names each shard learned,
        together; but a shard that completed none of its trials learned none, and knows its
        judges by their own names only (a guess at their scores' names, which the other shard's
        learning replaced): its names are left out."""
        scored = (
            "EXISTS (SELECT 1 FROM {}.trials t"
            " WHERE t.experiment_id = e.id AND t.completed_attempt IS NOT NULL)"
        )
        rows = db.execute(
            f"SELECT e.record, s.record, {scored.format('main')}, {scored.format('source')}"
            " FROM experiments e JOIN source.experiments s ON s.id = e.id WHERE e.record != s.record"
        ).fetchall()
        for here, there, here_scored, there_scored in rows:
            record = ExperimentRecord.model_validate_json(here)
            theirs = ExperimentRecord.model_validate_json(there).judges
            if here_scored and not there_scored:
                continue
            judges = theirs if there_scored and not here_scored else learned_judges(record.judges, theirs)
            if judges != record.judges:
                db.execute(
                    "UPDATE experiments SET record = ? WHERE id = ?",
                    (record.model_copy(update={"judges": judges}).model_dump_json(), record.id),
                )

    # -- reads ---------------------------------------------------------------------------

    @locked
    def latest(self, test: str, params: str, before: str, *, passing: bool) -> ExperimentRecord | None:
        if self._db is None:
            return None
        verdict = "verdict = 1" if passing else "verdict IS NOT NULL"
        rows = self._db.execute(
            f"SELECT record FROM experiments WHERE test = ? AND params = ? AND {verdict} AND id < ?"
            " ORDER BY id DESC",
            (test, params, before),
        )
        for (record,) in rows:
            experiment = ExperimentRecord.model_validate_json(record)
            # --eval-calibrate ran only the labelled items: not the test's experiment to compare with.
            if not experiment.selection.labelled:
                return experiment
        return None

    @locked
    def runs(self) -> list[RunSummary]:
        with self._reading():
            if self._db is None:
                return []
            rows = self._db.execute(
                """
                SELECT r.id, r.created_at,
                       (SELECT count(*) FROM experiments e WHERE e.run_id = r.id),
                       count(t.id), count(t.completed_attempt)
                FROM runs r
                LEFT JOIN experiments e ON e.run_id = r.id
                LEFT JOIN trials t ON t.experiment_id = e.id
                GROUP BY r.id ORDER BY r.created_at DESC, r.id DESC
                """
            ).fetchall()
        return [RunSummary(*row) for row in rows]

    @locked
    def find(self, target: str) -> tuple[RunRecord, list[ExperimentRecord]]:
        if self._db is None and self.path.exists():
            # Missing when opened, created since by another process: the pytest-xdist controller
            # opens the Opik backend's spool at start, and its workers create it.
            self._db = self._open(create=False)
        db = self._db
        if db is not None and target == "last":
            last = self._last()
            if last is not None:
                return last
        elif db is not None:
            row = db.execute("SELECT record FROM runs WHERE id = ?", (target,)).fetchone()
            if row is not None:
                run = RunRecord.model_validate_json(row[0])
                return run, self._experiments_of(run.id)
            row = db.execute(
                "SELECT r.record, e.record FROM experiments e JOIN runs r ON r.id = e.run_id WHERE e.id = ?",
                (target,),
            ).fetchone()
            if row is not None:
                return (
                    RunRecord.model_validate_json(row[0]),
                    [ExperimentRecord.model_validate_json(row[1])],
                )
        named = uuid7_from_name(target)
        if db is not None and target != "last" and target != named:
            # A run named with --eval-run-id is found by its name too.
            row = db.execute("SELECT 1 FROM runs WHERE id = ?", (named,)).fetchone()
            if row is not None:
                return self.find(named)
        what = f"no experiment or run with id {target!r}"
        if target == "last":
            some = db is not None and db.execute("SELECT 1 FROM runs").fetchone() is not None
            what = "no run but calibrations (--eval-calibrate: name one by its id)" if some else "no run"
        raise ExperimentNotFound(
            f"{what} in the eval store {self.path}; list the runs and experiments with: "
            f"opik-eval runs --store {self.path}"
        )

    def _last(self) -> tuple[RunRecord, list[ExperimentRecord]] | None:
        """The newest run, by creation time (a run named with --eval-run-id has an id derived
        from its name), but a calibration's (--eval-calibrate: only the labelled items), which
        neither resumes nor compares as the test's last run."""
        assert self._db is not None
        for (record,) in self._db.execute("SELECT record FROM runs ORDER BY created_at DESC, id DESC"):
            run = RunRecord.model_validate_json(record)
            experiments = self._experiments_of(run.id)
            if not experiments or not all(e.selection.labelled for e in experiments):
                return run, experiments
        return None

    def _experiments_of(self, run_id: str) -> list[ExperimentRecord]:
        assert self._db is not None
        rows = self._db.execute(
            "SELECT record FROM experiments WHERE run_id = ? ORDER BY position", (run_id,)
        ).fetchall()
        return [ExperimentRecord.model_validate_json(row[0]) for row in rows]

    @locked
    def trials(self, experiment_id: str, *, spans: bool = False) -> list[TrialRecord]:
        """The experiment's trials, with each attempt's usage summed; with its ``spans`` too when
        asked, or when the store has no sum for them (written by an earlier version)."""
        with self._reading():
            if self._db is None:
                return []
            query = trials_query(spans=spans, tables=self._tables)
            rows = self._db.execute(query, (experiment_id,)).fetchall()
        unreadable: list[tuple[str, str]] = []
        with no_gc_pass():
            records = [trial_record(experiment_id, row, unreadable) for row in rows]
        if unreadable:
            # Read again at the end of a session: said once.
            self._notices.once(unreadable_notice(self.path, experiment_id, unreadable))
        return records

    @locked
    def completed_spans(self, trial_id: str) -> list[SpanRecord]:
        """The spans of the trial's completed attempt (one indexed read: a rescore reads its
        trials' one at a time, as it scores them, rather than holding an experiment's).

        Read from the file without folding the journals first, as other reads do: the rescore
        that asks read its original's trials first (``collect/rescore.py``), which folded every
        journal, the spans of those completed trials among them. A fold here would commit this
        process's own writes once per trial (and, under pytest-xdist, apply every other worker's
        journal again), which the journal exists to avoid."""
        if self._db is None or "attempt_spans" not in self._tables:
            return []
        row = self._db.execute(
            "SELECT s.spans FROM trials t JOIN attempt_spans s ON s.attempt_id = t.completed_attempt"
            " WHERE t.id = ?",
            (trial_id,),
        ).fetchone()
        if row is None:
            return []
        try:
            return spans_of(row[0])
        except ValueError:  # unreadable: as none, which the rescore's notice then says
            return []

    @locked
    def trial_states(self, experiment_id: str) -> list[TrialState]:
        with self._reading():
            if self._db is None:
                return []
            rows = self._db.execute(
                "SELECT id, dataset_item_id, trial, completed_attempt IS NOT NULL FROM trials"
                " WHERE experiment_id = ? ORDER BY position",
                (experiment_id,),
            ).fetchall()
        with no_gc_pass():
            return [TrialState(row[0], experiment_id, row[1], row[2], bool(row[3])) for row in rows]

    @locked
    def find_trial(
        self, target: str, *, run: str | None = None
    ) -> tuple[ExperimentRecord, TrialRecord] | None:
        """The trial with id ``target``, or whose attempt (the trace, on an Opik server) has that
        id, or with that node id (of run ``run`` when given, else the newest run's), and its
        experiment; None when none has. For an attempt other than the one the trial shows (an
        earlier, replaced one), the trial comes with that attempt's spans."""
        with self._reading():
            if self._db is None:
                return None
            row = self._db.execute(
                """
                SELECT t.id, t.experiment_id, e.record FROM trials t
                JOIN experiments e ON e.id = t.experiment_id JOIN runs r ON r.id = e.run_id
                WHERE (t.id = ?1 OR t.id = (SELECT trial_id FROM attempts WHERE id = ?1) OR t.node_id = ?1)
                AND (?2 IS NULL OR r.id = ?2)
                ORDER BY r.created_at DESC, r.id DESC LIMIT 1
                """,
                (target, run),
            ).fetchone()
            attempt = None
            if row is not None and row[0] != target and "attempt_spans" in self._tables:
                attempt = self._db.execute(
                    "SELECT spans FROM attempt_spans WHERE attempt_id = ?", (target,)
                ).fetchone()
        if row is None:
            return None
        trial = next(t for t in self.trials(row[1], spans=True) if t.id == row[0])
        if attempt is not None and (not trial.spans or trial.spans[0].trace_id != target):
            with contextlib.suppress(ValueError):  # unreadable: the trial's own spans stand
                spans = spans_of(attempt[0])
                trial = dataclasses.replace(trial, spans=spans, usage=None)  # usage: of these spans
        return ExperimentRecord.model_validate_json(row[2]), trial

    def experiments_with_trial(self, node_id: str) -> list[ExperimentRecord]:
        """The experiments that planned a trial with node id ``node_id``, the newest run's first
        (one per run: a run's node ids are unique)."""
        with self._reading():
            if self._db is None:
                return []
            rows = self._db.execute(
                """
                SELECT e.record FROM trials t
                JOIN experiments e ON e.id = t.experiment_id JOIN runs r ON r.id = e.run_id
                WHERE t.node_id = ? ORDER BY r.created_at DESC, r.id DESC
                """,
                (node_id,),
            ).fetchall()
        return [ExperimentRecord.model_validate_json(row[0]) for row in rows]

    @locked
    def close(self) -> None:
        self._journals.close()
        if self._db is not None:
            self._db.close()
            self._db = None
