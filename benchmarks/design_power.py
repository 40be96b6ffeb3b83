"""Is the detectable drop a regression gate prints caught 80% of the time, when the app regresses
the way the rates table of ``gates.py`` makes it regress?

    python benchmarks/design_power.py [--reruns N] [--row TEXT]

Each rerun draws a fresh set of items from ``gates.py``'s population (pass/fail: pass
probabilities from a beta distribution with mean 0.75 and intra-item correlation 0.5;
continuous: item means from Beta(6, 2)), runs a baseline, and reads the detectable drop its gate
``max_regression m0=0.05`` prints (from the design: the baseline and the current run's trials
alone). A candidate then drops by exactly that much, as the rates table's candidates do: pass/fail,
a share drop / 0.75 of the items breaks (fails every trial); continuous, every item's mean lowered
in proportion. The share of reruns whose gate fails is the power at the printed drop (target 80%).
Everything goes through the package's own code (``experiment_result``, ``with_baseline``,
``judge_session``); seeds are fixed.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parent))  # gates.py, its population and records

from gates import DELTA, MEAN, item_parameters, result, scores  # noqa: E402

from pytest_opik_eval.store.records import GateSettings  # noqa: E402
from pytest_opik_eval.verdict.comparison import with_baseline  # noqa: E402
from pytest_opik_eval.verdict.summary import judge_session  # noqa: E402

SETTINGS = GateSettings(max_regression={"m0": DELTA}, soft=True)


@dataclass(frozen=True)
class Row:
    kind: str
    items: int
    baseline_trials: int
    trials: int

    @property
    def name(self) -> str:
        return f"{self.kind} {self.items} items, {self.baseline_trials} -> {self.trials} trial(s)"


ROWS = [
    Row(kind, n, k, k) for kind in ("pass/fail", "continuous") for n in (30, 100, 500) for k in (1, 3)
] + [Row("pass/fail", 100, 1, 3), Row("pass/fail", 100, 3, 1)]


def measure(row: Row, reruns: int) -> tuple[float, int, int]:
    """The median printed drop, the reruns whose gate caught a drop that large, and the reruns
    that printed one."""
    drops: list[float] = []
    caught = 0
    for rerun in range(reruns):
        rng = random.Random(f"design-power-{row.name}-{rerun}")
        means = item_parameters(rng, row.kind, row.items)
        breaks = [rng.random() for _ in means]
        before = scores(row.kind, means, uniforms(rng, len(means), row.baseline_trials), breaks, 0.0)
        baseline = result("baseline", 0, [before], SETTINGS)
        after = uniforms(rng, len(means), row.trials)
        unchanged = result("candidate", 0, [scores(row.kind, means, after, breaks, 0.0)], SETTINGS)
        [judged] = judge_session([with_baseline(unchanged, baseline)], str)
        drop = judged.gates[0].detectable_drop
        if drop is None:
            continue
        drops.append(drop)
        worse = result("candidate", 0, [scores(row.kind, means, after, breaks, drop)], SETTINGS)
        [verdict] = judge_session([with_baseline(worse, baseline)], str)
        caught += not verdict.gates[0].met
    return (median(drops) if drops else math.nan), caught, len(drops)


def uniforms(rng: random.Random, items: int, trials: int) -> list[list[float]]:
    """Each item's trials' uniform draws."""
    return [[rng.random() for _ in range(trials)] for _ in range(items)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reruns", type=int, default=500)
    parser.add_argument("--row", help="only the rows whose name contains this text")
    args = parser.parse_args()
    print(f"max_regression m0={DELTA:g}, confidence 0.95, population mean {MEAN:g}, {args.reruns} reruns")
    print(f"{'row':<44} {'printed drop':>12} {'caught':>8} {'runs':>6}")
    for row in ROWS:
        if args.row and args.row not in row.name:
            continue
        drop, caught, runs = measure(row, args.reruns)
        share = f"{100 * caught / runs:.1f}%" if runs else "-"
        print(f"{row.name:<44} {drop:>12.3f} {share:>8} {runs:>6}", flush=True)


if __name__ == "__main__":
    main()
