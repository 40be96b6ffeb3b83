"""The embedded default store: one SQLite file, safe for several pytest processes at once.

WAL journaling with ``synchronous=NORMAL``: each commit reaches the operating system before the
call returns, so a SIGKILL loses nothing already recorded; a power cut may lose the last few
commits but never corrupts the file. Writers from several processes queue on SQLite's lock
(``busy_timeout``); creating the schema is guarded by a file lock so that first opens by
several processes cannot race. A trial's own writes go first to this process's journal (see
``journal``), which is folded into the file before anything is read from it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import functools
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, ClassVar, TypeVar, cast
from urllib.parse import quote

from pydantic import TypeAdapter

from pytest_opik_eval.escaping import shorten
from pytest_opik_eval.exceptions import ExperimentNotFound, StoreError, StoreUnwritable
from pytest_opik_eval.gcpause import no_gc_pass
from pytest_opik_eval.ids import uuid7, uuid7_from_name
from pytest_opik_eval.store import journal
from pytest_opik_eval.store.records import (
    ExperimentRecord,
    PlannedTrial,
    RunRecord,
    RunSummary,
    ScoreRecord,
    SpanRecord,
    Timings,
    TrialRecord,
    TrialState,
    Usage,
)

SCHEMA_VERSION = 1

# The store folder's .gitignore: everything but the recordings of the app's HTTP calls
# (--eval-record) and the judge cache, without their hidden working files (journals, locks);
# itself committed, so that a clone keeps the store out of git before its first run.
GITIGNORE = """\
# created by pytest-opik-eval: commit the recordings and the judge cache, not the store
*
!/.gitignore
!/recordings/
!/recordings/**
/recordings/**/.*
!/judge-cache/
!/judge-cache/**
/judge-cache/**/.*
"""
_OLD_GITIGNORE = "# created by pytest-opik-eval\n*\n"  # before --eval-record: rewritten
# Marks the file as ours ("opke"), so a stranger's SQLite file is not mistaken for a store.
APPLICATION_ID = 0x6F706B65

_SCHEMA = """
CREATE TABLE runs (
    id TEXT PRIMARY KEY,
    created_at TEXT NOT NULL,
    record TEXT NOT NULL
);
CREATE TABLE experiments (
    id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL REFERENCES runs(id),
    position INTEGER NOT NULL,
    test TEXT NOT NULL,
    params TEXT NOT NULL,
    verdict INTEGER,  -- 1 when its gates were met with nothing pending (as of its latest session)
    record TEXT NOT NULL
);
CREATE INDEX experiments_run ON experiments(run_id, position);
CREATE INDEX experiments_test ON experiments(test, params, id);
CREATE TABLE trials (
    id TEXT PRIMARY KEY,
    experiment_id TEXT NOT NULL REFERENCES experiments(id),
    position INTEGER NOT NULL,
    dataset_item_id TEXT NOT NULL,
    trial INTEGER NOT NULL,
    node_id TEXT NOT NULL,
    completed_attempt TEXT,  -- set when the pending marker is cleared
    UNIQUE (experiment_id, dataset_item_id, trial)
);
CREATE INDEX trials_experiment ON trials(experiment_id, position);
CREATE TABLE attempts (
    id TEXT PRIMARY KEY,
    trial_id TEXT NOT NULL REFERENCES trials(id),
    session_id TEXT NOT NULL,
    started_at TEXT NOT NULL,
    output TEXT,
    scores TEXT,
    passed INTEGER
);
CREATE INDEX attempts_trial ON attempts(trial_id, id);
"""

# The spans of an attempt's trace (``run/tracing.py``), as a JSON list of SpanRecord. A table of
# its own rather than a column of ``attempts``, made whenever the file is opened to be written
# (as a subclass's EXTRA_SCHEMA): the schema version stays 1, so a store written by this version
# is still read and written by earlier ones, which never look at it, and a store made by an
# earlier one gains it without an upgrade step. A read of a store without it (opened read-only)
# finds no spans.
_SPANS_SCHEMA = """
CREATE TABLE IF NOT EXISTS attempt_spans (
    attempt_id TEXT PRIMARY KEY,  -- an attempts.id
    spans TEXT NOT NULL
)
"""

# How long each attempt's task and metrics took (a Timings as JSON), for every trial. A table of
# its own, made as attempt_spans is and for the same reasons (older versions read and write the
# store as before; an older store gains it), rather than a column of attempt_spans: that table
# has a row only for a trial whose app made spans, and a timing is kept for every trial.
_TIMINGS_SCHEMA = """
CREATE TABLE IF NOT EXISTS attempt_timings (
    attempt_id TEXT PRIMARY KEY,  -- an attempts.id
    timings TEXT NOT NULL
)
"""

# What an attempt's spans reported, summed when they were recorded (a Usage as JSON), so that the
# end of a session and the reports read a few numbers per trial rather than every span. A table
# of its own, made as attempt_spans is and for the same reasons, rather than a column of it:
# earlier versions copy attempt_spans whole (``merge_from``: SELECT *), and write its rows with
# two values. An attempt with spans and no row here (written by an earlier version) has its
# spans read instead.
_USAGE_SCHEMA = """
CREATE TABLE IF NOT EXISTS attempt_usage (
    attempt_id TEXT PRIMARY KEY,  -- an attempts.id
    usage TEXT NOT NULL
)
"""

_BUSY_TIMEOUT = 60.0  # seconds to wait for another process's hold on the file

_SHOWN = 120  # characters of an unreadable stored value quoted in a message
_FOREIGN = -1  # the application id we give a non-empty SQLite file that has none of ours

_scores_json = TypeAdapter(list[ScoreRecord])
_spans_json = TypeAdapter(list[SpanRecord])
_timings_json = TypeAdapter(Timings)
_usage_json = TypeAdapter(Usage)
_NO_TIMINGS = Timings()
# Made once: json.dumps with options builds an encoder on every call. A value JSON cannot hold is
# kept as its repr rather than losing the whole output.
_output_json = json.JSONEncoder(ensure_ascii=False, default=repr).encode


_Method = TypeVar("_Method", bound=Callable[..., Any])


def _locked(method: _Method) -> _Method:
    """One thread at a time on the connection: trials may run in background threads."""

    @functools.wraps(method)
    def locked(self: LocalStore, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return method(self, *args, **kwargs)

    return cast(_Method, locked)


def _writing(method: _Method) -> _Method:
    """As ``_locked``, for a method that writes: a full disk, a read-only file or folder, or a
    file size limit become one ``StoreUnwritable`` that names the store and the cause."""

    @functools.wraps(method)
    def writing(self: LocalStore, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            try:
                return method(self, *args, **kwargs)
            except _CAUGHT as error:
                if not _is_fault(error):
                    raise
                raise self.unwritable(error) from error

    return cast(_Method, writing)


# What the file system or SQLite raise when a write cannot be made; of SQLite's errors only those
# whose code says so (see _is_fault). Any other error is a bug, and propagates as one.
_CAUGHT = (OSError, sqlite3.OperationalError)
# SQLite's (primary) result codes of a write that the disk, the file or its folder refused, and
# of another process's hold on the file outlasting the busy timeout.
_UNWRITABLE_CODES = ("SQLITE_FULL", "SQLITE_IOERR", "SQLITE_READONLY", "SQLITE_CANTOPEN", "SQLITE_PERM")
_BUSY_CODES = ("SQLITE_BUSY", "SQLITE_LOCKED")
# The messages of those codes (sqlite3_errstr), for Python 3.10, whose errors carry no code name.
_CODE_OF_MESSAGE = {
    "database or disk is full": "SQLITE_FULL",
    "disk I/O error": "SQLITE_IOERR",
    "attempt to write a readonly database": "SQLITE_READONLY",
    "unable to open database file": "SQLITE_CANTOPEN",
    "access permission denied": "SQLITE_PERM",
    "database is locked": "SQLITE_BUSY",
    "database table is locked": "SQLITE_LOCKED",
}


def _code_name(error: BaseException) -> str:
    """SQLite's name of the error's result code (``SQLITE_IOERR_WRITE``), or ""."""
    name = getattr(error, "sqlite_errorname", None)
    if isinstance(name, str):
        return name
    return _CODE_OF_MESSAGE.get(str(error), "")


def _is_fault(error: BaseException) -> bool:
    """Whether the store could not be written (the disk, the file, its folder, another process
    holding it), rather than a bug such as "no such column"."""
    return isinstance(error, OSError) or _code_name(error).startswith(_UNWRITABLE_CODES + _BUSY_CODES)


# errno -> (what is wrong, how to fix it)
_FULL = "free some space on its disk, or point {option} at another disk"
_READ_ONLY = "make it writable, or point {option} at a writable place"
_CAUSES = {
    errno.ENOSPC: ("the disk is full", _FULL),
    errno.EDQUOT: ("the disk quota is used up", _FULL),
    errno.EFBIG: (
        "a file reached this process's file size limit",
        "raise the limit (ulimit -f), or point {option} at a new file",
    ),
    errno.EROFS: ("it is on a read-only file system", _READ_ONLY),
    errno.EACCES: ("permission denied", _READ_ONLY),
    errno.EPERM: ("the operation is not permitted (an immutable file?)", _READ_ONLY),
}


def _side_event(side: dict[str, list[Sequence[Any]]], kind: str, params: Sequence[Any]) -> None:
    side[kind].append(params[:2])
    # A "spans" event's third value, its usage summed: earlier versions read the first two.
    if kind == "spans" and len(params) > 2 and params[2] is not None:
        side["usage"].append((params[0], params[2]))


def _apply(db: sqlite3.Connection, events: Sequence[journal.Event]) -> None:
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
            completed.append((attempt_id, replaces, attempt_id))
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
    db.executemany(
        "UPDATE trials SET completed_attempt = ?1"
        " WHERE (completed_attempt IS NULL OR completed_attempt = ?2)"
        " AND id = (SELECT trial_id FROM attempts WHERE id = ?3)",
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


def _unwritable_errno(path: Path) -> int | None:
    """Why the store's file or its folder cannot be written, if that is the case: SQLite also
    makes files beside the store (-wal, -shm), and this plugin its journals."""
    # Never by opening the file: closing any descriptor of it drops every POSIX lock this
    # process holds on it, SQLite's included, and another process could then take the store for
    # unused and remove the WAL file that holds this process's commits.
    if path.exists() and not os.access(path, os.W_OK):
        return errno.EROFS if _on_read_only_disk(path) else errno.EACCES
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not os.access(folder, os.W_OK | os.X_OK):
        return errno.EROFS if _on_read_only_disk(folder) else errno.EACCES
    return None


def _on_read_only_disk(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):  # no statvfs on Windows
        return False


def _read_only_part(path: Path) -> str:
    if path.exists() and not os.access(path, os.W_OK):
        if os.access(path.parent, os.W_OK):
            return "the file"
    return f"its folder {path.parent}" if path.parent.exists() else f"a folder above {path}"


def _file_size_limit() -> int | None:
    try:
        import resource
    except ImportError:  # not on Windows
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    return None if soft == resource.RLIM_INFINITY else int(soft)


def scores_text(scores: Sequence[ScoreRecord]) -> str:
    """A trial's scores as stored, without the fields that are None (metadata, a reason): an
    earlier version, which knows no metadata, still reads every score that has none."""
    return _scores_json.dump_json(list(scores), exclude_none=True).decode()


def _read_scores(text: str | None) -> list[ScoreRecord]:
    # Parsed and validated by pydantic-core in one step: 4x quicker than model_construct on
    # json.loads, which counts when the end of a session reads 100,000 trials.
    return _scores_json.validate_json(text) if text else []


def _salvage_scores(text: str) -> list[ScoreRecord]:
    """The scores of a row that does not validate (an earlier version wrote a metric's NaN as
    null): each score that cannot be read becomes a failed score saying what the store holds."""
    try:
        stored = json.loads(text)
    except ValueError:
        stored = None
    if not isinstance(stored, list):
        return [ScoreRecord(name="?", value=0.0, reason=_unreadable(text), scoring_failed=True)]
    scores = []
    for entry in stored:
        try:
            scores.append(ScoreRecord.model_validate(entry))
        except ValueError:
            name = entry.get("name") if isinstance(entry, dict) else None
            value = entry.get("value") if isinstance(entry, dict) else entry
            scores.append(
                ScoreRecord(
                    name=name if isinstance(name, str) else "?",
                    value=0.0,
                    reason=_unreadable(json.dumps(value)),
                    scoring_failed=True,
                )
            )
    return scores


def _salvage_row(
    row: Sequence[Any],
) -> tuple[dict[str, Any] | None, list[ScoreRecord], bool | None, str]:
    """A trial row's output, scores and verdict, as far as they can be read, and what could not be."""
    unread = []
    try:
        output = json.loads(row[7]) if row[7] is not None else None
    except ValueError:
        output = {"output": _unreadable(str(row[7]), "the output")}
        unread.append(f"output {shorten(str(row[7]), _SHOWN)}")
    if not isinstance(output, dict | None):
        output = {"output": output}
    try:
        scores = _read_scores(row[8])
    except ValueError:
        scores = _salvage_scores(row[8])
        unread.append(f"scores {shorten(str(row[8]), _SHOWN)}")
    failed = any(s.scoring_failed for s in scores)
    passed = False if failed else (bool(row[9]) if row[9] is not None else None)
    return output, scores, passed, "; ".join(unread)


def _unreadable(stored: str, what: str = "this score") -> str:
    return f"the store holds {shorten(stored, _SHOWN)} for {what}, which cannot be read"


def _use_wal(db: sqlite3.Connection) -> None:
    """Switch the file to WAL (once for good: the mode is kept in the file). SQLite does not
    wait for the switch as it does for writes: while processes open a new store at once (xdist
    workers), it can find the file busy, so try again."""
    deadline = time.monotonic() + _BUSY_TIMEOUT
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as error:
            if "database is locked" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


@contextlib.contextmanager
def _transaction(db: sqlite3.Connection) -> Iterator[None]:
    """All or nothing. IMMEDIATE takes the write lock at once: two processes never both read
    and then both wait for the lock to write."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
        db.execute("COMMIT")
    except BaseException:
        # A COMMIT that failed (a full disk) may have rolled back already; the error that
        # counts is the one being raised.
        if db.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
        raise


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


class LocalStore:
    """The SQLite store at ``path``; the file and its folder are created on first write."""

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
        self._journal: journal.Journal | None = None
        self._side: journal.Journal | None = None  # events older versions do not know
        self._timings: dict[str, str] = {}  # attempt -> timings, written when it completes
        self._notices: list[str] = []
        self._reported: set[str] = set()
        self._immutable = False  # opened read-only, in a read-only folder
        self._has_spans = True  # the file has the attempt_spans table (see _SPANS_SCHEMA)
        self._has_timings = True  # the same for attempt_timings
        self._has_usage = True  # and for attempt_usage
        if path.exists() or create:
            self._db = self._open(create)

    @property
    def location(self) -> str:
        return str(self.path)

    def notices(self) -> list[str]:
        taken, self._notices = self._notices, []
        return taken

    # -- opening -------------------------------------------------------------------------

    def _open(self, create: bool) -> sqlite3.Connection | None:
        if self.path.is_dir():
            raise StoreError(f"the eval store {self.path} is a directory; give {self._option} a file path")
        try:
            return self._connect(create)
        except _CAUGHT as error:
            if not _is_fault(error):
                raise
            if create or os.access(self.path.parent, os.W_OK):
                raise self.unwritable(error, opening=True) from error
        # Only reading, in a read-only folder (a store kept as a CI artifact): SQLite cannot make
        # the -shm file a store in WAL mode needs, so read it as a file nobody changes.
        self._immutable = True
        return self._connect(create, uri=f"file:{quote(str(self.path.absolute()))}?immutable=1")

    def _connect(self, create: bool, uri: str | None = None) -> sqlite3.Connection | None:
        if create:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._ignore_folder()
        db = sqlite3.connect(
            uri or self.path,
            timeout=_BUSY_TIMEOUT,
            isolation_level=None,
            check_same_thread=False,
            uri=bool(uri),
        )
        try:
            version, app_id = self._read_header(db)
            if version == 0 and app_id != _FOREIGN and create:
                from filelock import FileLock  # only to create a store: its import costs ~40 ms

                with FileLock(f"{self.path}.lock", timeout=_BUSY_TIMEOUT):
                    version, app_id = self._read_header(db)
                    if version == 0 and app_id != _FOREIGN:
                        self._create_schema(db)
                        version, app_id = SCHEMA_VERSION, APPLICATION_ID
            self._check(version, app_id)
            if version == 0:
                db.close()  # an empty file, only read: leave it as it is
                return None
            if uri is None:
                _use_wal(db)
                self._create_extra_tables(db)
            tables = {
                row[0]
                for row in db.execute(
                    "SELECT name FROM sqlite_master"
                    " WHERE name IN ('attempt_spans', 'attempt_timings', 'attempt_usage')"
                )
            }
            self._has_spans = "attempt_spans" in tables
            self._has_timings = "attempt_timings" in tables
            self._has_usage = "attempt_usage" in tables
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("PRAGMA foreign_keys=ON")
        except BaseException:
            db.close()
            raise
        return db

    def _read_header(self, db: sqlite3.Connection) -> tuple[int, int]:
        try:
            # One statement, so one snapshot: read apart, another process's schema creation
            # could commit in between (version 0, yet tables) and pass for a stranger's file.
            version, app_id, tables = db.execute(
                "SELECT (SELECT user_version FROM pragma_user_version),"
                " (SELECT application_id FROM pragma_application_id),"
                " (SELECT count(*) FROM sqlite_master)"
            ).fetchone()
        except sqlite3.DatabaseError as error:
            if isinstance(error, sqlite3.OperationalError):
                raise  # it cannot be opened (a read-only folder...), which says nothing of its content
            raise StoreError(
                f"{self.path} is not a pytest-opik-eval store ({error}); "
                f"point {self._option} at another file, or move this one away"
            ) from error
        if version == 0 and tables:
            # An SQLite database of someone else's: never write our tables into it.
            app_id = _FOREIGN
        return int(version), int(app_id)

    def unwritable(self, error: BaseException, *, opening: bool = False) -> StoreUnwritable:
        """One line for a write that failed: the store, the cause, and what to do."""
        cause, fix = self._cause(error)
        what = "open" if opening else "write to"
        return StoreUnwritable(
            f"cannot {what} the eval store {self.path}: {cause}; "
            f"{fix.format(option=self._option)} (what was recorded before is kept)"
        )

    def _cause(self, error: BaseException) -> tuple[str, str]:
        code = error.errno if isinstance(error, OSError) else None
        name = "" if isinstance(error, OSError) else _code_name(error)
        if name.startswith(_BUSY_CODES):
            # Not the disk's fault: another process (a long transaction, an open DB browser)
            # held the file for longer than this one waits.
            return (
                f"another process held it for more than {_BUSY_TIMEOUT:g} s ({error})",
                "let that process finish (or close it) and run again, or point {option} at another file",
            )
        if code is None:
            # SQLite does not say which system call failed, nor why: find out.
            if name == "SQLITE_FULL":
                code = errno.ENOSPC
            else:
                code = _unwritable_errno(self.path)
            if code is None and name.startswith("SQLITE_IOERR") and _file_size_limit() is not None:
                code = errno.EFBIG  # SQLite reports a write past the limit as an I/O error
        if code in _CAUSES:
            cause, fix = _CAUSES[code]
            if code in (errno.EACCES, errno.EPERM, errno.EROFS):
                cause = f"{_read_only_part(self.path)} is read-only ({cause})"
            elif code == errno.EFBIG:
                cause = f"{cause}: {_file_size_limit()} bytes"
            return cause, fix
        return f"{error}", "check the disk, or point {option} at another file"

    def check_writable(self) -> None:
        """Raise ``StoreUnwritable`` now if the store's file or folder cannot be written: the
        pytest-xdist controller, which writes nothing itself, checks before its workers start."""
        code = _unwritable_errno(self.path)
        if code is not None:
            raise self.unwritable(OSError(code, os.strerror(code), str(self.path)))

    def _check(self, version: int, app_id: int) -> None:
        if version == 0 and app_id != _FOREIGN:
            return  # an empty file opened read-only: it has no runs
        if app_id != APPLICATION_ID:
            raise StoreError(
                f"{self.path} is an SQLite database but not a pytest-opik-eval store; "
                f"point {self._option} at another file"
            )
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"the eval store {self.path} has schema version {version}, written by a newer "
                f"pytest-opik-eval; this version reads up to {SCHEMA_VERSION}: upgrade "
                f"pytest-opik-eval, or point {self._option} at another file"
            )

    def _create_schema(self, db: sqlite3.Connection) -> None:
        with _transaction(db):
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)
            db.execute(f"PRAGMA application_id={APPLICATION_ID}")
            db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    def _create_extra_tables(self, db: sqlite3.Connection) -> None:
        # A statement whose table exists writes nothing, and needs no write access.
        for schema in (_SPANS_SCHEMA, _TIMINGS_SCHEMA, _USAGE_SCHEMA):
            try:
                db.execute(schema)
            except sqlite3.OperationalError as error:
                # A store of an earlier version in a read-only file, opened to be read: it is
                # read as before, with no spans or timings (see _has_spans).
                if not _code_name(error).startswith("SQLITE_READONLY"):
                    raise
        for statement in self.EXTRA_SCHEMA.split(";"):
            if statement.strip():
                db.execute(statement)

    def _ignore_folder(self) -> None:
        # Like .pytest_cache: the default folder holds only our files, so keep it out of git,
        # but for the recordings and the judge cache, which are made to be committed.
        folder = self.path.parent
        gitignore = folder / ".gitignore"
        if not folder.name.startswith("."):
            return
        try:
            if not gitignore.exists() or gitignore.read_text() == _OLD_GITIGNORE:
                gitignore.write_text(GITIGNORE)
        except OSError:
            pass  # a read-only or shared folder: the store still works

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            self._db = self._open(create=True)
            assert self._db is not None, "opened to write: the schema exists"
        return self._db

    # -- writes --------------------------------------------------------------------------

    @_writing
    def create_run(
        self,
        run: RunRecord,
        experiments: Sequence[ExperimentRecord],
        trials: Sequence[PlannedTrial],
    ) -> None:
        """All or nothing; what is already recorded is kept, so several processes (pytest-xdist
        workers, or a resume on another machine) can record the same run with the same ids."""
        db = self._conn()
        with _transaction(db):
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

    @_writing
    def start_attempt(self, trial_id: str, session_id: str, *, attempt_id: str | None = None) -> str:
        attempt_id = attempt_id or uuid7()
        self._record(("start", attempt_id, trial_id, session_id, _now()))
        return attempt_id

    @_writing
    def record_output(self, attempt_id: str, output: Mapping[str, Any]) -> None:
        self._record(("output", _output_json(output), attempt_id))

    @_writing
    def record_scores(self, attempt_id: str, scores: Sequence[ScoreRecord], passed: bool) -> None:
        self._record(("scores", scores_text(scores), int(passed), attempt_id))

    @_writing
    def record_spans(self, attempt_id: str, spans: Sequence[SpanRecord], usage: Usage | None = None) -> None:
        """The spans of the attempt's trace, its task span first (see ``run/tracing.py``), and
        what they reported, summed (``verdict/usage.trial_usage``), returned by ``trials``
        without the spans."""
        spans_text = _spans_json.dump_json(list(spans), exclude_none=True).decode()
        if usage is None:
            self._record(("spans", attempt_id, spans_text), side=True)
        else:
            usage_text = usage.model_dump_json(exclude_defaults=True)
            self._record(("spans", attempt_id, spans_text, usage_text), side=True)

    @_writing
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
        # Encoded directly (a Timings as JSON, validated when read): a model and its dump cost
        # several times more, on every trial.
        timings = {"metric_seconds": metric_seconds}
        if task_seconds is not None:
            timings["task_seconds"] = task_seconds  # type: ignore[assignment]
        text = _output_json(timings)
        if completes:
            self._timings[attempt_id] = text
        else:
            self._record(("timings", attempt_id, text), side=True)

    @_writing
    def complete_attempt(self, attempt_id: str, *, replaces: str | None = None) -> None:
        timings = self._timings.pop(attempt_id, None)
        if timings is None:
            self._record(("complete", attempt_id, attempt_id, replaces))
        else:
            self._record(("complete", attempt_id, attempt_id, replaces, timings))

    @_writing
    def record_verdict(self, experiment_id: str, passed: bool, aggregates: Mapping[str, float]) -> None:
        self._conn().execute("UPDATE experiments SET verdict = ? WHERE id = ?", (int(passed), experiment_id))

    @_locked
    def flush(self) -> None:
        self._fold_or_keep()  # so that other processes (an xdist controller) read it all

    def _record(self, event: journal.Event, *, side: bool = False) -> None:
        """``side``: an event older versions do not know, for the side journal (see journal.SIDE_SUFFIX)."""
        if self._journaled:
            if self._journal is None:
                self._conn()  # the file first: a journal is folded into it
                # Say now, before the first trial runs, that its writes could never be folded.
                code = _unwritable_errno(self.path)
                if code is not None:
                    raise OSError(code, os.strerror(code), str(self.path))
                self._journal = journal.Journal(journal.folder_of(self.path))
            if side:
                if self._side is None:
                    self._side = journal.Journal(journal.folder_of(self.path), journal.SIDE_SUFFIX)
                self._side.append(event)
            else:
                self._journal.append(event)
            if self._journal.due():
                self._fold_or_keep()
            return
        db = self._conn()
        with _transaction(db):
            _apply(db, [event])
            self._write_along(db)

    # -- what a subclass adds (store/opik/spool.py) --------------------------------------

    # A subclass's own tables, as CREATE TABLE IF NOT EXISTS (or INDEX) statements: they are
    # made whenever the file is opened to be written, so a store made without them gains them.
    EXTRA_SCHEMA: ClassVar[str] = ""

    def _write_along(self, db: sqlite3.Connection) -> None:
        """Rows a subclass writes in the same transaction as a trial write, which then commit
        together or not at all: called only in a store that is not journaled (``journaled=False``),
        under the store's lock."""

    def _fold_or_keep(self) -> bool:
        """Fold this process's journal into the file, or, when the file cannot be written (a full
        disk), keep its events in the journal, where they are durable, for a later fold."""
        try:
            self._fold(everyone=False)
        except _CAUGHT as error:
            if not _is_fault(error):
                raise
            self._kept_in_journal(error)
            return False
        return True

    def _kept_in_journal(self, error: BaseException) -> None:
        message = (
            f"{self.unwritable(error)}; the trial writes not yet in it are kept in "
            f"{journal.folder_of(self.path)}, and the next pytest or opik-eval command that can "
            "write the store folds them in"
        )
        if message not in self._reported:
            self._reported.add(message)
            self._notices.append(message)

    @contextlib.contextmanager
    def _reading(self) -> Iterator[None]:
        """Every journal folded in before a read. When the file cannot be written (a full disk),
        the read still sees the journals' events: they are applied in a transaction that is
        rolled back after the read, and stay in the journals."""
        overlaid = self._fold(everyone=True, overlay=True)
        try:
            yield
        finally:
            if overlaid and self._db is not None:
                with contextlib.suppress(sqlite3.Error):
                    self._db.execute("ROLLBACK")
                self._db.execute("PRAGMA foreign_keys=ON")

    def _fold(self, *, everyone: bool, overlay: bool = False) -> bool:
        """Commit the journal's events to the file; ``everyone``: other processes' too (before
        a read), deleting the journals of those that died. With ``overlay``, events that cannot
        be committed are applied in a transaction left open for a read (see ``_reading``):
        returns whether it is open."""
        own = [j for j in (self._journal, self._side) if j is not None]
        everyone = everyone and not self._immutable  # nothing can be folded into that file
        others = journal.found(journal.folder_of(self.path), [j.path for j in own]) if everyone else []
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
                self._notices.append(
                    f"{other.damaged} line(s) of the eval store's journal {other.path} could not be "
                    f"read and were left out; its other trial writes are in the store, and the "
                    f"file is kept as {where}"
                )
        if committed:
            for j in own:
                j.folded()
        return overlaid

    def _commit(self, events: list[journal.Event], overlay: bool) -> tuple[bool, bool]:
        """(committed, applied in a transaction left open)."""
        db = self._conn()
        # A journal whose trials are not in this file (it was deleted and made anew)
        # must not stop every later read: its attempts are kept, and never read.
        db.execute("PRAGMA foreign_keys=OFF")
        try:
            with _transaction(db):
                _apply(db, events)
            return True, False
        except _CAUGHT as error:
            if not overlay or not _is_fault(error):
                raise
            self._kept_in_journal(error)
            try:
                # Uncommitted changes stay in SQLite's page cache: no disk space needed.
                db.execute("BEGIN")
                _apply(db, events)
            except _CAUGHT as again:
                if not _is_fault(again):
                    raise
                if db.in_transaction:
                    db.execute("ROLLBACK")
                return False, False
            return False, True
        finally:
            if not db.in_transaction:
                db.execute("PRAGMA foreign_keys=ON")

    # -- merging ------------------------------------------------------------------------

    @_writing
    def merge_from(self, source: Path) -> int:
        """Copy in the runs of another store (a CI shard's): its trials and attempts join those
        already here, and a trial completed in either is completed. Returns how many runs."""
        other = LocalStore(source, create=False)  # checks that it is a store this version reads
        other.runs()  # and folds the journals its writers left
        other.close()
        self._fold(everyone=True)
        db = self._conn()
        db.execute("ATTACH DATABASE ? AS source", (str(source),))
        try:
            runs = db.execute("SELECT count(*) FROM source.runs").fetchone()[0]
            with _transaction(db):
                for table in ("runs", "experiments", "trials", "attempts"):
                    db.execute(f"INSERT OR IGNORE INTO {table} SELECT * FROM source.{table}")
                for table in ("attempt_spans", "attempt_timings", "attempt_usage"):
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

    # -- reads ---------------------------------------------------------------------------

    @_locked
    def latest(self, test: str, params: str, before: str, *, passing: bool) -> ExperimentRecord | None:
        if self._db is None:
            return None
        verdict = "verdict = 1" if passing else "verdict IS NOT NULL"
        row = self._db.execute(
            f"SELECT record FROM experiments WHERE test = ? AND params = ? AND {verdict} AND id < ?"
            " ORDER BY id DESC LIMIT 1",
            (test, params, before),
        ).fetchone()
        return None if row is None else ExperimentRecord.model_validate_json(row[0])

    @_locked
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

    @_locked
    def find(self, target: str) -> tuple[RunRecord, list[ExperimentRecord]]:
        if self._db is None and self.path.exists():
            # Missing when opened, created since by another process: the pytest-xdist controller
            # opens the Opik backend's spool at start, and its workers create it.
            self._db = self._open(create=False)
        db = self._db
        if db is not None and target == "last":
            # By creation time: a run named with --eval-run-id has an id derived from its name.
            row = db.execute("SELECT record FROM runs ORDER BY created_at DESC, id DESC LIMIT 1").fetchone()
            if row is not None:
                run = RunRecord.model_validate_json(row[0])
                return run, self._experiments_of(run.id)
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
        what = "no run" if target == "last" else f"no experiment or run with id {target!r}"
        raise ExperimentNotFound(
            f"{what} in the eval store {self.path}; list the runs and experiments with: "
            f"opik-eval runs --store {self.path}"
        )

    def _experiments_of(self, run_id: str) -> list[ExperimentRecord]:
        assert self._db is not None
        rows = self._db.execute(
            "SELECT record FROM experiments WHERE run_id = ? ORDER BY position", (run_id,)
        ).fetchall()
        return [ExperimentRecord.model_validate_json(row[0]) for row in rows]

    @_locked
    def trials(self, experiment_id: str, *, spans: bool = False) -> list[TrialRecord]:
        """The experiment's trials, with each attempt's usage summed; with its ``spans`` too when
        asked, or when the store has no sum for them (written by an earlier version)."""
        if not self._has_spans:
            spans_column = "NULL"
        elif spans or not self._has_usage:
            spans_column = "s.spans"
        else:
            spans_column = "CASE WHEN u.usage IS NULL THEN s.spans END"  # not even read from the file
        with self._reading():
            if self._db is None:
                return []
            rows = self._db.execute(
                """
                SELECT t.id, t.dataset_item_id, t.trial, t.node_id, t.completed_attempt,
                       (SELECT count(*) FROM attempts WHERE trial_id = t.id),
                       a.session_id, a.output, a.scores, a.passed, {spans}, {timings}, {usage}
                FROM trials t
                LEFT JOIN attempts a ON a.id = coalesce(
                    t.completed_attempt,
                    (SELECT id FROM attempts WHERE trial_id = t.id ORDER BY id DESC LIMIT 1)
                )
                {join_spans}
                {join_timings}
                {join_usage}
                WHERE t.experiment_id = ? ORDER BY t.position
                """.format(
                    # Joined on their primary keys: one index lookup per row each.
                    spans=spans_column,
                    timings="tm.timings" if self._has_timings else "NULL",
                    usage="u.usage" if self._has_usage else "NULL",
                    join_spans="LEFT JOIN attempt_spans s ON s.attempt_id = a.id" if self._has_spans else "",
                    join_timings="LEFT JOIN attempt_timings tm ON tm.attempt_id = a.id"
                    if self._has_timings
                    else "",
                    join_usage="LEFT JOIN attempt_usage u ON u.attempt_id = a.id" if self._has_usage else "",
                ),
                (experiment_id,),
            ).fetchall()
        unreadable: list[tuple[str, str]] = []
        with no_gc_pass():
            records = [self._trial_record(experiment_id, row, unreadable) for row in rows]
        if unreadable:
            self._report_unreadable(experiment_id, unreadable)
        return records

    @staticmethod
    def _trial_record(
        experiment_id: str, row: Sequence[Any], unreadable: list[tuple[str, str]]
    ) -> TrialRecord:
        try:
            output = json.loads(row[7]) if row[7] is not None else None
            scores = _read_scores(row[8])
            passed = bool(row[9]) if row[9] is not None else None
        except ValueError:  # pydantic's ValidationError is one
            # One bad row must not make the whole store unreadable: read what can be read.
            output, scores, passed, what = _salvage_row(row)
            unreadable.append((row[3], what))
        try:
            spans = _spans_json.validate_json(row[10]) if row[10] else []
        except ValueError:
            spans = []  # the trial's results stand without its spans
            unreadable.append((row[3], f"spans {shorten(str(row[10]), _SHOWN)}"))
        try:
            timings = _timings_json.validate_json(row[11]) if row[11] else _NO_TIMINGS
        except ValueError:
            timings = _NO_TIMINGS
            unreadable.append((row[3], f"timings {shorten(str(row[11]), _SHOWN)}"))
        try:
            usage = _usage_json.validate_json(row[12]) if row[12] else None
        except ValueError:
            usage = None  # computed from the spans instead, if they can be read
            unreadable.append((row[3], f"usage {shorten(str(row[12]), _SHOWN)}"))
        return TrialRecord(
            id=row[0],
            experiment_id=experiment_id,
            dataset_item_id=row[1],
            trial=row[2],
            node_id=row[3],
            status="completed" if row[4] else "pending",
            attempts=row[5],
            session_id=row[6],
            output=output,
            scores=scores,
            # A verdict counts only once the trial completed; pending trials have none.
            passed=passed if row[4] else None,
            spans=spans,
            task_seconds=timings.task_seconds,
            metric_seconds=dict(timings.metric_seconds),
            usage=usage,
        )

    def _report_unreadable(self, experiment_id: str, rows: list[tuple[str, str]]) -> None:
        node_id, error = rows[0]
        more = f" and {len(rows) - 1} more" if len(rows) > 1 else ""
        message = (
            f"the eval store {self.path} holds trial data that could not be read as written: "
            f"{node_id}{more} of experiment {experiment_id} ({error}); an unreadable score counts as "
            "a failed score, and the rest of the store is read as usual"
        )
        if message not in self._reported:
            self._reported.add(message)  # read again at the end of a session: said once
            self._notices.append(message)

    @_locked
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

    @_locked
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
            if row is not None and row[0] != target and self._has_spans:
                attempt = self._db.execute(
                    "SELECT spans FROM attempt_spans WHERE attempt_id = ?", (target,)
                ).fetchone()
        if row is None:
            return None
        trial = next(t for t in self.trials(row[1], spans=True) if t.id == row[0])
        if attempt is not None and (not trial.spans or trial.spans[0].trace_id != target):
            with contextlib.suppress(ValueError):  # unreadable: the trial's own spans stand
                spans = _spans_json.validate_json(attempt[0])
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

    @_locked
    def close(self) -> None:
        if self._journal is not None:
            folded = self._fold_or_keep()
            self._journal.close(keep=not folded)  # kept: the next reader folds it
            self._journal = None
            if self._side is not None:
                self._side.close(keep=not folded)
                self._side = None
        if self._db is not None:
            self._db.close()
            self._db = None
