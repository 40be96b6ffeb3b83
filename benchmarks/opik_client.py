"""Client-side cost per trial with the Opik backend, next to the Opik SDK's opik.evaluate() on
the same server, items and metric, measured in one run.

    python benchmarks/opik_client.py [--trials 300]

Both talk to the Opik-compatible test server of the test suite (tests/opik_server.py, on
127.0.0.1), so the figures are client cost plus loopback HTTP, not a real server's. Needs the
test extras (pip install -e '.[test]').
- ours: `pytest --eval --eval-backend=opik` on N items with Equals, minus `--eval --co` of the
  same suite (start-up and collection), divided by N; it includes pytest's own per-test cost.
- the SDK: the wall time of opik.evaluate() over the same N items, divided by N.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from bench import EVAL, write_items  # noqa: E402  (beside this script: the same suite as figure 1)
from opik_server import OpikTestServer  # noqa: E402

SDK = """
import json, sys, time, opik
from opik.evaluation import metrics
items = [json.loads(line) for line in open("data.jsonl")]
client = opik.Opik()
dataset = client.get_or_create_dataset("sdk-bench")
dataset.insert([{k: v for k, v in item.items() if k != "id"} for item in items])
start = time.perf_counter()
opik.evaluate(dataset=dataset, task=lambda item: {"output": item["input"]["text"]},
              scoring_metrics=[metrics.Equals()], scoring_key_mapping={"reference": "expected_output"},
              task_threads=1, verbose=0)
print(time.perf_counter() - start)
"""


def timed(command: list[str], folder: Path, env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, cwd=folder, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=300)
    args = parser.parse_args()
    n = args.trials
    with tempfile.TemporaryDirectory() as tmp, OpikTestServer() as server:
        folder = Path(tmp)
        (folder / "test_eval.py").write_text(EVAL)
        write_items(folder / "data.jsonl", n)
        env = {
            **os.environ,
            **server.sdk_env(),
            "PYTEST_OPIK_EVAL_BACKEND": "opik",
            "OPIK_CONFIG_PATH": str(folder / "none"),
            "HOME": str(folder),
        }
        pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:opik", "--eval"]
        startup = min(timed([*pytest, "--co"], folder, env) for _ in range(2))
        ours = min(timed(pytest, folder, env) for _ in range(2))
        sdk_runs = []
        for _ in range(2):
            done = subprocess.run(
                [sys.executable, "-c", SDK], cwd=folder, env=env, check=True, capture_output=True, text=True
            )
            sdk_runs.append(float(done.stdout.strip().splitlines()[-1]))
        ours_per_trial = (ours - startup) / n * 1000
        sdk_per_trial = min(sdk_runs) / n * 1000
        print(f"opik backend: {ours_per_trial:.2f} ms per trial ({n} trials, pytest's own cost included)")
        print(f"opik.evaluate(): {sdk_per_trial:.2f} ms per trial")
        print(f"ratio: {ours_per_trial / sdk_per_trial:.2f}x the SDK's cost per trial (goal: at most 0.33x)")


if __name__ == "__main__":
    main()
