"""Advice for the user, printed in the terminal summary's "eval notices" section.

Advisory messages (soft mode without a gate, a resume after a dataset edit, a fixture that
keeps trials from running at once, a damaged journal line, a server problem) are not Python
warnings: a project's ``filterwarnings = error`` or ``-W error`` would turn them into errors
that abort the session. They are collected on ``config.stash`` instead, and each is printed once
at the end, where a reader looks for the verdict. Under pytest-xdist, the workers (which
collect) hand theirs to the controller, which prints them.
"""

from __future__ import annotations

import threading

import pytest

from pytest_opik_eval.escaping import escape_control

NOTICES = pytest.StashKey[list[str]]()

# The key in a pytest-xdist worker's workeroutput that carries its notices to the controller.
WORKER_NOTICES = "opik_eval_notices"

# Trials notice from pool threads (--eval-threads): the list's creation on the first notice, and
# each check-then-append, must not interleave, or a notice is lost (two lists made at once) or
# shown twice. One lock for the process: it guards no state of its own, and is held for a moment.
_LOCK = threading.Lock()


def notice(config: pytest.Config, message: str) -> None:
    """Show ``message`` in the terminal summary (once, however often it is given, from any thread)."""
    with _LOCK:
        notices = config.stash.setdefault(NOTICES, [])
        if message not in notices:
            notices.append(message)


def notices_of(config: pytest.Config) -> list[str]:
    """The notices given so far, in order (a copy: threads may still add to the list)."""
    with _LOCK:
        notices: list[str] = config.stash.get(NOTICES, [])
        return list(notices)


def print_notices(config: pytest.Config, terminalreporter: pytest.TerminalReporter) -> None:
    messages = notices_of(config)
    if messages:
        terminalreporter.section("eval notices", yellow=True)
        for message in messages:
            # A notice may quote a server's answer or a dataset's key: data, so escaped.
            terminalreporter.line(escape_control(message, newlines=True), yellow=True)
