"""The session's store, opened on first use (never under ``--co``, which records nothing), by the
plugin that supplies one or by the backend the options name; its notices and its closing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_opik_eval.notices import notice
from pytest_opik_eval.store.backends import backend

if TYPE_CHECKING:
    import pytest

    from pytest_opik_eval.settings import EvalOptions
    from pytest_opik_eval.store import Store


class StoreHandle:
    """The one store of a session, opened at most once."""

    def __init__(self, config: pytest.Config, options: EvalOptions, *, worker: bool) -> None:
        self._config = config
        self._options = options
        self._worker = worker
        self._store: Store | None = None

    def get(self) -> Store:
        """The store, opened (and created) on first use. A method, not a property: pytest before
        8.3.3 reads every attribute of a plugin object when it looks for fixtures, and so would
        create the store even under ``--co``."""
        if self._store is None:
            self._store = self._open(create=True)
        return self._store

    def existing(self) -> Store:
        """The store, opened on first use without creating it (for the checks at the start)."""
        if self._store is None:
            self._store = self._open(create=False)
        return self._store

    def opened(self) -> Store | None:
        """The store if it was opened, without opening it."""
        return self._store

    def _open(self, *, create: bool) -> Store:
        config, options = self._config, self._options
        supplied: Store | None = config.hook.pytest_opik_eval_store(config=config)
        if supplied is not None:
            return supplied
        return backend(options.backend).open(
            options.store_path,
            create=create,
            sync_timeout=options.sync_timeout,
            sync_command=options.sync_command,
            # A worker leaves what is left to the controller, so the budget bounds the whole end.
            drain_at_end=not self._worker,
        )

    def take_notices(self) -> None:
        """What the store has to say, as the session's notices."""
        if self._store is None:
            return  # never opened, or it could not be: nothing to say beyond that
        for message in self._store.notices():
            notice(self._config, message)

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
