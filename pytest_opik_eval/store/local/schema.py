"""The store's file: the tables it holds, the header that marks it as a store of this version,
and the .gitignore of the folder it lives in.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from pytest_opik_eval.exceptions import StoreError
from pytest_opik_eval.store.local.faults import code_name

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

# The spans of an attempt's trace (``run/trial_trace.py``), as a JSON list of SpanRecord. A table of
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

# The tables the spans, timings and usage schemas make: a file may lack them (see _SPANS_SCHEMA).
OPTIONAL_TABLES = ("attempt_spans", "attempt_timings", "attempt_usage")
FOREIGN = -1  # the application id we give a non-empty SQLite file that has none of ours


def read_header(db: sqlite3.Connection, path: Path, option: str) -> tuple[int, int]:
    """The file's schema version and application id (``FOREIGN`` for someone else's database)."""
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
            f"{path} is not a pytest-opik-eval store ({error}); "
            f"point {option} at another file, or move this one away"
        ) from error
    if version == 0 and tables:
        # An SQLite database of someone else's: never write our tables into it.
        app_id = FOREIGN
    return int(version), int(app_id)


def check_header(version: int, app_id: int, path: Path, option: str) -> None:
    """Raise ``StoreError`` unless the file is a store this version reads (or an empty file)."""
    if version == 0 and app_id != FOREIGN:
        return  # an empty file opened read-only: it has no runs
    if app_id != APPLICATION_ID:
        raise StoreError(
            f"{path} is an SQLite database but not a pytest-opik-eval store; point {option} at another file"
        )
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"the eval store {path} has schema version {version}, written by a newer "
            f"pytest-opik-eval; this version reads up to {SCHEMA_VERSION}: upgrade "
            f"pytest-opik-eval, or point {option} at another file"
        )


def create_tables(db: sqlite3.Connection) -> None:
    """The tables of a new store, and its header: to be run in one transaction."""
    for statement in _SCHEMA.split(";"):
        if statement.strip():
            db.execute(statement)
    db.execute(f"PRAGMA application_id={APPLICATION_ID}")
    db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")


def create_optional_tables(db: sqlite3.Connection, extra_schema: str) -> None:
    """The tables a store made by an earlier version may lack, and ``extra_schema``'s (a
    subclass's own tables, see ``LocalStore.EXTRA_SCHEMA``)."""
    # A statement whose table exists writes nothing, and needs no write access.
    for schema in (_SPANS_SCHEMA, _TIMINGS_SCHEMA, _USAGE_SCHEMA):
        try:
            db.execute(schema)
        except sqlite3.OperationalError as error:
            # A store of an earlier version in a read-only file, opened to be read: it is
            # read as before, with no spans or timings (see LocalStore._tables).
            if not code_name(error).startswith("SQLITE_READONLY"):
                raise
    for statement in extra_schema.split(";"):
        if statement.strip():
            db.execute(statement)


def ignore_folder(folder: Path) -> None:
    """Keep the store's folder out of git, as .pytest_cache is: the default folder holds only our
    files, but for the recordings and the judge cache, which are made to be committed."""
    gitignore = folder / ".gitignore"
    if not folder.name.startswith("."):
        return
    try:
        if not gitignore.exists() or gitignore.read_text() == _OLD_GITIGNORE:
            gitignore.write_text(GITIGNORE)
    except OSError:
        pass  # a read-only or shared folder: the store still works
