"""Opening the store's file, and writing to it: WAL journaling, the wait for another process's
hold on the file, the schema created once however many processes open a new store at the same
time, a read-only copy read as it is, and all-or-nothing transactions.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from pytest_opik_eval.exceptions import StoreError
from pytest_opik_eval.store.local.faults import CAUGHT, is_fault, unwritable_error
from pytest_opik_eval.store.local.schema import (
    APPLICATION_ID,
    FOREIGN,
    OPTIONAL_TABLES,
    SCHEMA_VERSION,
    check_header,
    create_optional_tables,
    create_tables,
    ignore_folder,
    read_header,
)


@dataclass(frozen=True)
class Opened:
    """A store's file, opened."""

    db: sqlite3.Connection | None  # None: an empty file, only read (a store with no runs)
    immutable: bool  # only read, in a read-only folder: nothing can be written or folded into it
    tables: frozenset[str]  # which of schema.OPTIONAL_TABLES the file has


def open_file(path: Path, *, create: bool, option: str, extra_schema: str, timeout: float) -> Opened:
    """Open the store at ``path``; with ``create``, make the file, its folder and its schema
    (and ``extra_schema``'s tables) when missing. ``option`` names the store in error messages;
    ``timeout`` is how long, in seconds, another process's hold on the file is waited for."""
    if path.is_dir():
        raise StoreError(f"the eval store {path} is a directory; give {option} a file path")
    try:
        db, tables = _connect(path, create, option, extra_schema, timeout)
        return Opened(db, immutable=False, tables=tables)
    except CAUGHT as error:
        if not is_fault(error):
            raise
        if create or os.access(path.parent, os.W_OK):
            raise unwritable_error(error, path, option=option, waited=timeout, opening=True) from error
    # Only reading, in a read-only folder (a store kept as a CI artifact): SQLite cannot make
    # the -shm file a store in WAL mode needs, so read it as a file nobody changes.
    uri = f"file:{quote(str(path.absolute()))}?immutable=1"
    db, tables = _connect(path, create, option, extra_schema, timeout, uri=uri)
    return Opened(db, immutable=True, tables=tables)


def _connect(
    path: Path, create: bool, option: str, extra_schema: str, timeout: float, uri: str | None = None
) -> tuple[sqlite3.Connection | None, frozenset[str]]:
    if create:
        path.parent.mkdir(parents=True, exist_ok=True)
        ignore_folder(path.parent)
    db = sqlite3.connect(
        uri or path,
        timeout=timeout,
        isolation_level=None,
        check_same_thread=False,
        uri=bool(uri),
    )
    try:
        version, app_id = read_header(db, path, option)
        if version == 0 and app_id != FOREIGN and create:
            from filelock import FileLock  # only to create a store: its import costs ~40 ms

            with FileLock(f"{path}.lock", timeout=timeout):
                version, app_id = read_header(db, path, option)
                if version == 0 and app_id != FOREIGN:
                    with transaction(db):
                        create_tables(db)
                    version, app_id = SCHEMA_VERSION, APPLICATION_ID
        check_header(version, app_id, path, option)
        if version == 0:
            db.close()  # an empty file, only read: leave it as it is
            return None, frozenset()
        if uri is None:
            _use_wal(db, timeout)
            create_optional_tables(db, extra_schema)
        found = db.execute("SELECT name FROM sqlite_master WHERE name IN (?, ?, ?)", OPTIONAL_TABLES)
        tables = frozenset(row[0] for row in found)
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA foreign_keys=ON")
    except BaseException:
        db.close()
        raise
    return db, tables


def _use_wal(db: sqlite3.Connection, timeout: float) -> None:
    """Switch the file to WAL (once for good: the mode is kept in the file). SQLite does not
    wait for the switch as it does for writes: while processes open a new store at once (xdist
    workers), it can find the file busy, so try again."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as error:
            if "database is locked" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


@contextlib.contextmanager
def transaction(db: sqlite3.Connection) -> Iterator[None]:
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
