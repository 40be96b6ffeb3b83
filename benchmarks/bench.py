"""Side-by-side measurements of the plugin's cost, printed as one ratio per figure.

    python benchmarks/bench.py [--quick]

Every comparison runs both sides in one run, in the same temporary folder, alternating, and
keeps each side's best wall time, so a noisy machine affects both alike. The figures:
1. overhead: N trivial trials with one Equals metric under --eval, against a plain
   parametrized test with the same body and assertion over the same items (target <= 1.4);
2. latency-bound throughput: 400 trials whose task sleeps 50 ms with --eval-threads=20, against
   the ideal 400 x 50 ms / 20 plus the start-up of the same session (--eval --co) (target <= 1.15);
3. resume at scale: an experiment of 100,000 planned trials with 10 pending, --eval-resume,
   against --eval --co of the same suite (target <= 1.15);
4. inert cost: 200 plain tests with the plugin against -p no:opik_eval (target <= 1.02);
5. -n 2 against -n 0 on the latency-bound case.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:opik"]

PLAIN = """
import json, pathlib, pytest
ITEMS = [json.loads(line) for line in open(pathlib.Path(__file__).parent / "data.jsonl")]

@pytest.mark.parametrize("item", ITEMS, ids=[i["id"] for i in ITEMS])
def test_plain(item):
    assert item["input"]["text"].lower() == item["expected_output"].lower()
"""

EVAL = """
import pytest
from pytest_opik_eval.metrics import Equals

@pytest.mark.eval(
    dataset="data.jsonl", metrics=[Equals()], scoring_key_mapping={"reference": "expected_output"}
)
def test_eval(eval_item):
    return eval_item["input"]["text"]
"""

SLOW = """
import time
import pytest

@pytest.mark.eval(dataset="data.jsonl")
def test_slow(eval_item):
    time.sleep(0.05)
    return eval_item["input"]["text"]
"""


def write_items(path: Path, n: int) -> None:
    path.write_text(
        "".join(
            json.dumps({"id": f"i{i}", "input": {"text": f"t{i}"}, "expected_output": f"t{i}"}) + "\n"
            for i in range(n)
        )
    )


def wall(folder: Path, *args: str) -> float:
    start = time.perf_counter()
    subprocess.run([*PYTEST, *args], cwd=folder, stdout=subprocess.DEVNULL, check=False)
    return time.perf_counter() - start


def best_pair(folder: Path, ours: list[str], baseline: list[str], repeat: int) -> tuple[float, float]:
    a, b = [], []
    for _ in range(repeat):  # alternate, so drifts in the machine's load hit both sides
        a.append(wall(folder, *ours))
        b.append(wall(folder, *baseline))
    return min(a), min(b)


def report(name: str, ours: float, baseline: float, target: float | None) -> None:
    ratio = ours / baseline
    met = "" if target is None else ("met" if ratio <= target else "NOT met")
    verdict = "" if target is None else f"  (target <= {target:.2f}: {met})"
    print(f"{name}: {ours:.2f} s vs {baseline:.2f} s = {ratio:.2f}x{verdict}", flush=True)


def overhead(folder: Path, n: int, repeat: int) -> None:
    write_items(folder / "data.jsonl", n)
    (folder / "test_plain.py").write_text(PLAIN)
    (folder / "test_eval.py").write_text(EVAL)
    ours, baseline = best_pair(folder, ["--eval", "test_eval.py"], ["test_plain.py"], repeat)
    report(f"1. overhead ({n} trivial trials vs a plain parametrized test)", ours, baseline, 1.4)


def latency(folder: Path, repeat: int) -> None:
    write_items(folder / "data.jsonl", 400)
    (folder / "test_slow.py").write_text(SLOW)
    startup = min(wall(folder, "--eval", "--co", "test_slow.py") for _ in range(repeat))
    ours = min(wall(folder, "--eval", "--eval-threads=20", "test_slow.py") for _ in range(repeat))
    report(
        "2. latency-bound (400 x 50 ms, --eval-threads=20, vs ideal + start-up)",
        ours,
        400 * 0.05 / 20 + startup,
        1.15,
    )
    distributed = min(
        wall(folder, "--eval", "--eval-threads=20", "-n", "2", "test_slow.py") for _ in range(repeat)
    )
    report("5. -n 2 vs -n 0 (latency-bound, --eval-threads=20)", distributed, ours, None)


def resume_at_scale(folder: Path, n: int) -> None:
    from pytest_opik_eval.store.local import LocalStore

    write_items(folder / "data.jsonl", n)
    (folder / "test_eval.py").write_text(EVAL)
    store = folder / "big.db"
    # One real session plans the experiment with only 10 trials selected; then the store's own
    # interface records the rest of the 100,000 as planned and completed.
    subprocess.run(
        [*PYTEST, "--eval", f"--eval-store={store}", "test_eval.py", "-k", "i1-t0 or i2-t0"],
        cwd=folder,
        stdout=subprocess.DEVNULL,
        check=False,
    )
    local = LocalStore(store)
    run, [experiment] = local.find("last")
    from pytest_opik_eval.ids import node_id, uuid7_for
    from pytest_opik_eval.store.records import PlannedTrial

    planned = [
        PlannedTrial(
            uuid7_for(experiment.id, f"i{i}-t0"),
            experiment.id,
            f"i{i}",
            0,
            node_id(experiment.test, "", f"i{i}", 0),
        )
        for i in range(n)
    ]
    local.create_run(
        run,
        [
            experiment.model_copy(
                update={
                    "items": [
                        {"id": f"i{i}", "input": {"text": f"t{i}"}, "expected_output": f"t{i}"}
                        for i in range(n)
                    ]
                }
            )
        ],
        planned,
    )
    for trial in planned[10:]:
        local.complete_attempt(local.start_attempt(trial.id, "bench"))
    local.close()
    collect = min(wall(folder, "--eval", "--co", f"--eval-store={store}", "test_eval.py") for _ in range(2))
    resume = min(
        wall(folder, f"--eval-resume={experiment.id}", f"--eval-store={store}", "test_eval.py")
        for _ in range(2)
    )
    report(f"3. resume at scale ({n} planned, 10 pending, vs --eval --co)", resume, collect, 1.15)


def inert(folder: Path, repeat: int) -> None:
    (folder / "test_inert.py").write_text(
        "import pytest\n\n@pytest.mark.parametrize('i', range(200))\ndef test_inert(i):\n    assert i >= 0\n"
    )
    # A difference of a few ms in runs of ~0.6 s: many pairs, so that the best of each settles.
    ours, baseline = best_pair(folder, ["test_inert.py"], ["-p", "no:opik_eval", "test_inert.py"], repeat * 5)
    report("4. inert cost (200 plain tests, plugin vs -p no:opik_eval)", ours, baseline, 1.02)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="smaller sizes, one repeat: a smoke run")
    args = parser.parse_args()
    repeat = 1 if args.quick else 3
    figures: tuple[Callable[[Path], None], ...] = (
        lambda d: overhead(d, 500 if args.quick else 5000, repeat),
        lambda d: latency(d, repeat),
        lambda d: resume_at_scale(d, 2000 if args.quick else 100_000),
        lambda d: inert(d, repeat),
    )
    for figure in figures:
        with tempfile.TemporaryDirectory() as tmp:
            figure(Path(tmp))


if __name__ == "__main__":
    main()
