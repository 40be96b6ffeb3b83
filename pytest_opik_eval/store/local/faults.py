"""The SQLite fault advice: which errors mean the store could not be written (a full disk, a
read-only file or folder, a file size limit, another process holding the file) rather than a bug,
and the one line that says so: the store, the cause found out (SQLite says only "disk I/O
error"), and what to do. Also the notices a store keeps for the end of the session.
"""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path

from pytest_opik_eval.exceptions import StoreUnwritable

# What the file system or SQLite raise when a write cannot be made; of SQLite's errors only those
# whose code says so (see is_fault). Any other error is a bug, and propagates as one.
CAUGHT = (OSError, sqlite3.OperationalError)
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


def code_name(error: BaseException) -> str:
    """SQLite's name of the error's result code (``SQLITE_IOERR_WRITE``), or ""."""
    name = getattr(error, "sqlite_errorname", None)
    if isinstance(name, str):
        return name
    return _CODE_OF_MESSAGE.get(str(error), "")


def is_fault(error: BaseException) -> bool:
    """Whether the store could not be written (the disk, the file, its folder, another process
    holding it), rather than a bug such as "no such column"."""
    return isinstance(error, OSError) or code_name(error).startswith(_UNWRITABLE_CODES + _BUSY_CODES)


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


def unwritable_error(
    error: BaseException, path: Path, *, option: str, waited: float, opening: bool = False
) -> StoreUnwritable:
    """One line for a write to the store at ``path`` that failed: the store, the cause, and what
    to do. ``option`` names the store (for the fix), ``waited`` is the busy timeout in seconds."""
    cause, fix = _cause(error, path, waited)
    what = "open" if opening else "write to"
    return StoreUnwritable(
        f"cannot {what} the eval store {path}: {cause}; "
        f"{fix.format(option=option)} (what was recorded before is kept)"
    )


def _cause(error: BaseException, path: Path, waited: float) -> tuple[str, str]:
    code = error.errno if isinstance(error, OSError) else None
    name = "" if isinstance(error, OSError) else code_name(error)
    if name.startswith(_BUSY_CODES):
        # Not the disk's fault: another process (a long transaction, an open DB browser)
        # held the file for longer than this one waits.
        return (
            f"another process held it for more than {waited:g} s ({error})",
            "let that process finish (or close it) and run again, or point {option} at another file",
        )
    if code is None:
        # SQLite does not say which system call failed, nor why: find out.
        if name == "SQLITE_FULL":
            code = errno.ENOSPC
        else:
            code = unwritable_errno(path)
        if code is None and name.startswith("SQLITE_IOERR") and _file_size_limit() is not None:
            code = errno.EFBIG  # SQLite reports a write past the limit as an I/O error
    if code in _CAUSES:
        cause, fix = _CAUSES[code]
        if code in (errno.EACCES, errno.EPERM, errno.EROFS):
            cause = f"{_read_only_part(path)} is read-only ({cause})"
        elif code == errno.EFBIG:
            cause = f"{cause}: {_file_size_limit()} bytes"
        return cause, fix
    return f"{error}", "check the disk, or point {option} at another file"


def unwritable_errno(path: Path) -> int | None:
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


class Notices:
    """What a store has to tell at the end of the session (a fault, a damaged journal or row), in
    the order it happened; taken once."""

    def __init__(self) -> None:
        self._waiting: list[str] = []
        self._said: set[str] = set()

    def add(self, message: str) -> None:
        self._waiting.append(message)

    def once(self, message: str) -> None:
        """``message``, unless it was said before (what is read again at the end of a session)."""
        if message not in self._said:
            self._said.add(message)
            self._waiting.append(message)

    def take(self) -> list[str]:
        taken, self._waiting = self._waiting, []
        return taken
