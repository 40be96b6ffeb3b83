"""Without ``--eval``: eval tests are left out (not expanded, not run), and one line says so."""

from __future__ import annotations

import pytest

from pytest_opik_eval.collect.marker import MARKER


class EvalLeftOut:
    """Deselects eval tests when the session does not run evaluations."""

    def __init__(self) -> None:
        self.left_out = 0

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        keep = [item for item in items if item.get_closest_marker(MARKER) is None]
        if len(keep) == len(items):
            return
        left_out = [item for item in items if item.get_closest_marker(MARKER) is not None]
        self.left_out = len(left_out)
        config.hook.pytest_deselected(items=left_out)
        items[:] = keep

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if self.left_out:
            terminalreporter.write_line(f"{self.left_out} eval test(s) not run: run them with pytest --eval")
