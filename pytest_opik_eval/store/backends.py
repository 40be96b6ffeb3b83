"""The backends this plugin ships (``--eval-backend``): how each opens its store, and what the
session needs to know of it without knowing which it is.

The session asks :func:`backend` for the chosen one; each is imported only when it is opened
(the Opik backend brings httpx and pydantic models along).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from pytest_opik_eval.exceptions import StoreError
from pytest_opik_eval.store.base import Store, stored_dataset

Filters = list[dict[str, str]]  # a dataset filter in Opik's wire format


class Backend(Protocol):
    """A kind of store, before it is opened."""

    # Opened before anything runs (unless a resume opens it anyway), so that its settings and
    # its server are checked then: a wrong key is a usage error, not a failure mid-run.
    checked_at_start: bool

    def open(
        self, path: Path, *, create: bool, sync_timeout: float, sync_command: str, drain_at_end: bool
    ) -> Store:
        """The store at ``path`` (the Opik backend's spool); ``create=False`` only reads.
        ``sync_timeout`` bounds the end of the session for a store that sends writes elsewhere,
        ``sync_command`` sends what it could not, and ``drain_at_end`` is false in a
        pytest-xdist worker, which leaves that to the controller."""
        ...

    def describe(self, path: Path, source: str) -> str:
        """The session header's line: where the store is (``source``: where its path came from)."""
        ...

    def dataset(self, store: Callable[[], Store], name: str, filters: Filters | None) -> list[dict[str, Any]]:
        """The items of dataset ``opik:NAME``, from the store (opened by calling ``store``)."""
        ...


class LocalBackend:
    """The SQLite file (``store/local/``)."""

    checked_at_start = False

    def open(
        self, path: Path, *, create: bool, sync_timeout: float, sync_command: str, drain_at_end: bool
    ) -> Store:
        from pytest_opik_eval.store.local import LocalStore

        return LocalStore(path, create=create)

    def describe(self, path: Path, source: str) -> str:
        # The default follows pytest's rootdir (like .pytest_cache), not the working directory.
        where = "default: under the rootdir" if source == "default" else f"from {source}"
        return f"eval store: {path} ({where})"

    def dataset(self, store: Callable[[], Store], name: str, filters: Filters | None) -> list[dict[str, Any]]:
        raise StoreError(
            f"dataset {'opik:' + name!r} lives on an Opik server: run with --eval-backend=opik "
            "(or PYTEST_OPIK_EVAL_BACKEND=opik) and the OPIK_* settings"
        )


class OpikBackend:
    """The Opik server, through a local spool (``store/opik/``)."""

    checked_at_start = True

    def open(
        self, path: Path, *, create: bool, sync_timeout: float, sync_command: str, drain_at_end: bool
    ) -> Store:
        from pytest_opik_eval.store.opik.config import read_settings
        from pytest_opik_eval.store.opik.store import OpikStore

        return OpikStore(
            read_settings(),
            path,
            create=create,
            sync_timeout=sync_timeout,
            sync_command=sync_command,
            drain_at_end=drain_at_end,
        )

    def describe(self, path: Path, source: str) -> str:
        from pytest_opik_eval.store.opik.config import read_settings

        return f"eval backend: {read_settings().describe()}; spool {path}"

    def dataset(self, store: Callable[[], Store], name: str, filters: Filters | None) -> list[dict[str, Any]]:
        return stored_dataset(store(), name, filters)


_BACKENDS: dict[str, Backend] = {"local": LocalBackend(), "opik": OpikBackend()}


def backend(name: str) -> Backend:
    """The backend named ``name`` (``--eval-backend``, checked when the option was read)."""
    return _BACKENDS[name]


def held_dataset(source: object) -> str | None:
    """The name of the dataset a marker's ``dataset=`` names on the Opik server (``opik:NAME``),
    or None for a dataset file or a list of items."""
    from pytest_opik_eval.store.opik.config import DATASET_PREFIX

    if isinstance(source, str) and source.startswith(DATASET_PREFIX):
        return source[len(DATASET_PREFIX) :]
    return None
