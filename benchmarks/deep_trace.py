"""The cost of a deeply nested trace, by depth: it should grow linearly.

    python benchmarks/deep_trace.py [--depths 250 500 1000 2000] [--repeat 3]

For each depth, a trial whose task nests DEPTH spans through the manual API (``trace.span``), each
reporting its usage, is recorded by ``pytest --eval`` in a folder of its own. Then, in this
process, the median of REPEAT runs of:

- ``opik-eval show NODE_ID``: reading the trial from the store and printing its span tree;
- summing the spans' usage (``verdict/usage.trial_usage``), which each trial does when its spans
  are recorded.

Each figure is printed with its ratio to the depth before: about 2 for a doubled depth when the
cost is linear (4 quadratic, 8 cubic). The pytest runs themselves are not timed: their start-up
dwarfs the trace.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from pytest_opik_eval.cli import main as opik_eval
from pytest_opik_eval.store.local import LocalStore
from pytest_opik_eval.verdict.usage import trial_usage

# Iterative nesting (an ExitStack), so that the app itself needs no recursion at any depth.
DEEP_APP = """
import contextlib
import pytest
from pytest_opik_eval.tracing import trace


@pytest.mark.eval(dataset="data.jsonl")
def test_deep(eval_item):
    with contextlib.ExitStack() as stack:
        for level in range({depth}):
            stack.enter_context(trace.span(f"level {{level}}", type="llm"))
            trace.usage(model="house-llm-1", input_tokens=10, output_tokens=2, cost=0.0001)
    return eval_item["input"]["text"]
"""

NODE_ID = "test_deep.py::test_deep[a-t0]"


def record(folder: Path, depth: int) -> Path:
    """The store of one run of the deep app, in ``folder``."""
    (folder / "data.jsonl").write_text('{"id": "a", "input": {"text": "a"}, "expected_output": "a"}\n')
    (folder / "test_deep.py").write_text(DEEP_APP.format(depth=depth))
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:opik", "--eval"]
    done = subprocess.run(command, cwd=folder, capture_output=True, text=True, env=os.environ.copy())
    if done.returncode != 0:
        sys.exit(f"pytest at depth {depth} exited with {done.returncode}:\n{done.stdout[-2000:]}")
    return folder / ".opik-eval" / "store.db"


def timed(step: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def show(store: Path) -> int:
    """``opik-eval show`` of the deep trial, its output kept in memory; the output's size."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = opik_eval(["--store", str(store), "show", NODE_ID])
    if code != 0:
        sys.exit(f"opik-eval show exited with {code}")
    return len(out.getvalue())


def measure(folder: Path, depth: int, repeat: int) -> tuple[float, int, float]:
    """At ``depth``: the seconds ``opik-eval show`` takes, its output's size, and the seconds of
    summing the spans' usage."""
    store_path = record(folder, depth)
    store = LocalStore(store_path, create=False)
    try:
        [trial] = store.trials(store.find("last")[1][0].id, spans=True)
    finally:
        store.close()
    assert len(trial.spans) > depth, "every level recorded"
    size = show(store_path)
    return timed(lambda: show(store_path), repeat), size, timed(lambda: trial_usage(trial.spans), repeat)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depths", type=int, nargs="+", default=[250, 500, 1000, 2000])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"{'depth':>6}  {'show':>9} {'ratio':>6}  {'output':>10}  {'usage sum':>9} {'ratio':>6}")
    before: tuple[float, float] | None = None
    with tempfile.TemporaryDirectory() as temporary:
        for depth in args.depths:
            folder = Path(temporary, str(depth))
            folder.mkdir()
            showing, size, summing = measure(folder, depth, args.repeat)
            ratios = ("", "")
            if before is not None:
                ratios = (f"{showing / before[0]:.1f}x", f"{summing / before[1]:.1f}x")
            print(
                f"{depth:>6}  {showing:>8.3f}s {ratios[0]:>6}  {size:>10,}  {summing:>8.4f}s {ratios[1]:>6}",
                flush=True,
            )
            before = (showing, summing)


if __name__ == "__main__":
    main()
