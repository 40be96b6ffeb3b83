"""The plugin's own HTTP requests (the Opik backend's), told apart from the app's: a strict replay
(``--eval-record=none``) refuses the app's requests it cannot replay, never these. A context
variable rather than a host: the app may talk to the same Opik server, and its calls are its own."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

# True while the plugin sends a request of its own, in the context that sends it.
own_request: ContextVar[bool] = ContextVar("pytest_opik_eval_own_request", default=False)


@contextlib.contextmanager
def sending() -> Iterator[None]:
    """Around a request the plugin sends itself."""
    token = own_request.set(True)
    try:
        yield
    finally:
        own_request.reset(token)
