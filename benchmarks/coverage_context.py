"""A pytest plugin for ``mutation.py``'s coverage map: each outer test's lines under its node id.

coverage's own ``dynamic_context = test_function`` names the innermost function called ``test*``
on the stack, and an inner pytest run (pytester, in-process) has test functions of its own: the
lines the inner session ran (the gates, the budget, the reports) were filed under the inner
tests' names, which name no file of ours, so the map missed the outer tests that reached them.
Switching the context from the outer session's hook keeps every line under the outer test: the
inner session has its own plugin manager and never calls this hook."""

from __future__ import annotations

from collections.abc import Generator

import coverage
import pytest


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    measuring = coverage.Coverage.current()
    if measuring is not None:
        measuring.switch_context(item.nodeid)
    try:
        return (yield)
    finally:
        if measuring is not None:
            measuring.switch_context("")
