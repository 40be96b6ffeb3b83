"""Exceptions and the warning category of pytest-opik-eval."""

from __future__ import annotations

import pytest


class EvalWarning(pytest.PytestWarning):
    """Kept so that existing filter rules naming it (``-W ignore::pytest_opik_eval.exceptions.
    EvalWarning``) still load; nothing emits it. The plugin's advice is printed in the "eval
    notices" section instead (``pytest_opik_eval.notices``), which ``-W error`` cannot abort."""


class EvalError(Exception):
    """Base of this plugin's errors; the message says what is wrong, where, and how to fix it."""


class ExperimentNotFound(EvalError, LookupError):
    """No experiment or run with the given id (or no run at all for ``last``) is in the store."""


class StoreError(EvalError):
    """The store file cannot be used: it is not a store, or was written by a newer version."""


class StoreUnwritable(StoreError):
    """The store cannot be written (a full disk, a read-only file or folder); what was recorded
    before is intact."""
