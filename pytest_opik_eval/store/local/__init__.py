"""The embedded default store: one SQLite file, safe for several pytest processes at once.

WAL journaling with ``synchronous=NORMAL``: each commit reaches the operating system before the
call returns, so a SIGKILL loses nothing already recorded; a power cut may lose the last few
commits but never corrupts the file. Writers from several processes queue on SQLite's lock
(``LocalStore.BUSY_TIMEOUT``); creating the schema is guarded by a file lock so that first opens
by several processes cannot race. A trial's own writes go first to this process's journal (see
``journal``), which is folded into the file before anything is read from it.

Its parts: ``store`` (the store proper: its writes and reads), ``schema`` (the tables, the file's
header, the folder's .gitignore), ``connection`` (opening the file, transactions), ``journal``
and ``folding`` (a process's trial writes, and folding them into the file), ``rows`` (a trial's
values as stored, and the salvage of damaged rows) and ``faults`` (what to say when the file
cannot be written).
"""

from __future__ import annotations

from pytest_opik_eval.store.local.schema import APPLICATION_ID, GITIGNORE, SCHEMA_VERSION
from pytest_opik_eval.store.local.store import LocalStore

__all__ = ["APPLICATION_ID", "GITIGNORE", "SCHEMA_VERSION", "LocalStore"]
