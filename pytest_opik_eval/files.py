"""Writing a file whole or not at all: a report (JSON, HTML, ``opik-eval export -o``), a recording, a
cached judge score."""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that a reader (or a crash) sees the old file or the new one,
    never half of it: into a temporary file beside it, then renamed over it.

    The file gets the permissions any new file gets (the user's umask applies: ``tempfile``'s
    files are private, 0600, which a report shared by CI or a web server must not be), and a
    file that is replaced keeps its own.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    # O_EXCL: a name nobody else has; 0o666: the kernel takes the umask off, as for open(..., "w").
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        try:
            os.chmod(temporary, stat.S_IMODE(os.stat(path).st_mode))
        except FileNotFoundError:
            pass
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())  # on disk before the rename: a power cut leaves a whole file
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
