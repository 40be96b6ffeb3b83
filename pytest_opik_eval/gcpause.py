"""Python's cyclic garbage collector paused while many long-lived objects are made at once."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def no_gc_pass() -> Iterator[None]:
    """The collector paused while one record per trial is built (the run's plan, the session's
    results, 100,000 trials read back): the allocations would otherwise trigger full passes over
    the whole heap (every test item) again and again, each costing as much as hundreds of
    trials. What is built holds no cycles, so nothing is left for the collector to find."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
