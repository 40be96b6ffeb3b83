"""Can the regression gate be trusted? Its false-alarm rate, its power and its cost, measured by
driving the real gate code (``experiment_result`` and ``judge``) over simulated runs.

    python benchmarks/gates.py [--reruns N] [--quick] [--old-package-path PATH | --old-commit REV]
                               [--cell 50x1-equal ...] [--no-cost | --no-rates] [--jobs 2]

The gate is ``max_regression equals_metric=0.05`` over a pass/fail metric: a trial scores 1 with
its item's probability. A cell is a number of items (50, 200), of trials per item (1, 3) and a
difficulty: equal (every item p=0.8) or varied (p uniform in 0.6-0.95, fixed per item, the same
in both runs). In each of N reruns a baseline and a candidate are drawn independently:
- A/A: the candidate is the same app; the share of reruns whose gate is not met is the false-
  alarm rate (target <= 5% in every cell);
- power: the candidate's pass probability is lower by 0.10 and by 0.30 (clipped at 0); the share
  of reruns whose gate is not met is the rate at which it catches the drop (target >= 80% for
  0.30 on 50 items with one trial);
- strict mode under A/A: the share of reruns in which it proves the drop is below 0.05.
The three candidates of a rerun share its random draws (a trial passes when its uniform draw is
below its probability), so the columns differ by the drop alone. 250 reruns per cell by default
(a Monte-Carlo standard error of 1.4 points at 5%; about five minutes on two busy cores); to
settle one cell, measure it alone with more: ``--cell 50x1-equal --reruns 2000 --no-cost``
(rerun i draws the same outcomes whatever the number of reruns).

Then the cost: every gate (fail_under, min_pass_rate, max_regression, with a baseline) over
100,000 trials per run, as 20,000 items x 5 trials and as 100,000 x 1, the median of a few runs
(target <= 1 s), split into building each run's result and judging, with the garbage collector
paused as the session judges (under ``gcpause.no_gc_pass``); building the records is not counted.

Both rules run side by side: the new one from this checkout, the old one (the point-estimate rule
"fail when the mean dropped by more than DELTA") from a checkout of the old package, by default
commit 8840b3d extracted with ``git archive`` into a temporary folder. Each runs in a subprocess
whose PYTHONPATH puts its package first; the driver code is the same for both (it gives
``GateSettings`` only the fields that version has). Seeds are fixed: the same command prints the
same rates.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from statistics import median
from typing import Any

HERE = Path(__file__).resolve().parents[1]  # this checkout: the new package
OLD_COMMIT = "8840b3d"  # main before issue 13: the point-estimate rule
METRIC = "equals_metric"
DELTA = 0.05
SHIFTS = (0.0, 0.10, 0.30)
SIZES = (50, 200)
TRIALS = (1, 3)
DIFFICULTIES = ("equal", "varied")

Cell = tuple[int, int, str]  # items, trials per item, difficulty


# --- the worker: runs in a subprocess, with one version of the package on its path ------------


def probabilities(items: int, difficulty: str) -> list[float]:
    """Each item's pass probability: fixed per item, the same in every rerun and in both runs."""
    if difficulty == "equal":
        return [0.8] * items
    rng = random.Random(f"difficulty-{items}")
    return [rng.uniform(0.6, 0.95) for _ in range(items)]


def settings(**fields: Any) -> Any:
    """A ``GateSettings`` with the fields this version of the package has (the old one has no
    ``mode`` or ``confidence``)."""
    from pytest_opik_eval.store.records import GateSettings

    known = {name: value for name, value in fields.items() if name in GateSettings.model_fields}
    return GateSettings.model_validate(known)


class Simulator:
    """Builds the store's records of a simulated run and judges it with the package's own code.

    The package is imported inside the functions, from whichever version the worker's path
    holds: its objects are typed ``Any`` here."""

    def __init__(self) -> None:
        self.experiments: dict[tuple[str, int, int], Any] = {}

    def experiment(self, run: str, items: int, trials: int) -> Any:
        from pytest_opik_eval.store.records import DatasetRecord, ExperimentRecord, Selection

        key = (run, items, trials)
        if key not in self.experiments:
            self.experiments[key] = ExperimentRecord(
                id=f"{run}-{items}x{trials}",
                run_id=run,
                name="test_qa",
                test="test_qa.py::test_qa",
                params="",
                created_at="2026-01-01T00:00:00",
                dataset=DatasetRecord(source="data.jsonl", path=None, version="v"),
                selection=Selection(trial_count=trials),
                items=[{"id": f"item-{i}"} for i in range(items)],
            )
        return self.experiments[key]

    def records(self, run: str, outcomes: Sequence[Sequence[bool]]) -> tuple[Any, list[Any]]:
        """The experiment and its trials, as the store hands them back, from each item's trial
        outcomes."""
        from pytest_opik_eval.store.records import ScoreRecord, TrialRecord

        experiment = self.experiment(run, len(outcomes), len(outcomes[0]))
        one, zero = ScoreRecord(name=METRIC, value=1.0), ScoreRecord(name=METRIC, value=0.0)
        trials = [
            TrialRecord(
                id=f"{run}-{i}-{t}",
                experiment_id=experiment.id,
                dataset_item_id=f"item-{i}",
                trial=t,
                node_id=f"test_qa.py::test_qa[item-{i}-t{t}]",
                status="completed",
                attempts=1,
                session_id=run,
                output={},
                scores=[one if passed else zero],
                passed=passed,
            )
            for i, item in enumerate(outcomes)
            for t, passed in enumerate(item)
        ]
        return experiment, trials

    def result(self, run: str, outcomes: Sequence[Sequence[bool]], gates: Any) -> Any:
        """The experiment's result (summary, item verdicts), by the package's own code."""
        from pytest_opik_eval.verdict.results import experiment_result

        return experiment_result(*self.records(run, outcomes), run, gates)


def judge(result: Any, gates: Any, baseline: Any) -> Any:
    from pytest_opik_eval.verdict.gates import judge as real_judge

    return real_judge(result, gates, baseline, lambda experiment_id: f"pytest --eval-resume={experiment_id}")


def rates(cell: Cell, reruns: int, strict: bool) -> dict[str, int]:
    """For one cell, over ``reruns`` reruns: how many times the gate was not met, per shift, and
    (``strict``) how many times strict mode passed under A/A."""
    items, trials, difficulty = cell
    p = probabilities(items, difficulty)
    normal = settings(max_regression={METRIC: DELTA}, thresholds={METRIC: 0.5})
    strict_settings = settings(max_regression={METRIC: DELTA}, thresholds={METRIC: 0.5}, mode="strict")
    simulator = Simulator()
    counts = {f"fail {shift:g}": 0 for shift in SHIFTS} | {"strict pass": 0}
    for rerun in range(reruns):
        rng = random.Random(f"{items}-{trials}-{difficulty}-{rerun}")
        before = [[rng.random() < q for _ in range(trials)] for q in p]
        draws = [[rng.random() for _ in range(trials)] for _ in p]
        baseline = simulator.result("baseline", before, normal)
        for shift in SHIFTS:
            after = [[u < max(0.0, q - shift) for u in row] for q, row in zip(p, draws, strict=True)]
            candidate = simulator.result("candidate", after, normal)
            counts[f"fail {shift:g}"] += not judge(candidate, normal, baseline).gates_met
            if strict and shift == 0.0:
                counts["strict pass"] += judge(candidate, strict_settings, baseline).gates_met
    return counts


def cost(items: int, trials: int, repeat: int) -> dict[str, float]:
    """Seconds (median of ``repeat`` runs) to build each run's result and to judge every gate,
    over ``items`` x ``trials`` trials per run (the records' building is not counted)."""
    from pytest_opik_eval.verdict.results import experiment_result

    p = probabilities(items, "varied")
    gates = settings(
        fail_under={METRIC: 0.7}, min_pass_rate=0.7, max_regression={METRIC: DELTA}, thresholds={METRIC: 0.5}
    )
    simulator = Simulator()
    rng = random.Random(f"cost-{items}-{trials}")
    before = [[rng.random() < q for _ in range(trials)] for q in p]
    after = [[rng.random() < q - 0.02 for _ in range(trials)] for q in p]
    baseline_records = simulator.records("baseline", before)
    candidate_records = simulator.records("candidate", after)
    runs: list[dict[str, float]] = []
    for _ in range(repeat):
        gc.collect()
        gc.disable()  # as the session judges: under gcpause.no_gc_pass
        try:
            times: dict[str, float] = {}
            start = time.perf_counter()
            baseline = experiment_result(*baseline_records, None, gates)
            times["baseline result"] = time.perf_counter() - start
            start = time.perf_counter()
            candidate = experiment_result(*candidate_records, "candidate", gates)
            times["candidate result"] = time.perf_counter() - start
            start = time.perf_counter()
            judged = judge(candidate, gates, baseline)
            times["judge"] = time.perf_counter() - start
        finally:
            gc.enable()
        times["all"] = sum(times.values())
        assert len(judged.gates) == 3, judged.gates
        runs.append(times)
    return {step: median(r[step] for r in runs) for step in runs[0]}


CELLS: list[Cell] = [(i, t, d) for i in SIZES for t in TRIALS for d in DIFFICULTIES]


def cell_name(cell: Cell) -> str:
    items, trials, difficulty = cell
    return f"{items}x{trials}-{difficulty}"


def worker(part: str, cells: Sequence[int], reruns: int, repeat: int, strict: bool) -> None:
    """Prints one JSON object: where the package came from, and the part's figures."""
    import pytest_opik_eval

    out: dict[str, Any] = {"package": str(Path(pytest_opik_eval.__file__).parent)}
    if part == "rates":
        out["cells"] = {str(index): rates(CELLS[index], reruns, strict) for index in cells}
    else:
        out["cost"] = {f"{i} x {t}": cost(i, t, repeat) for i, t in ((20_000, 5), (100_000, 1))}
    print(json.dumps(out))


# --- the driver: runs the workers, prints the tables ---------------------------------------


def old_package(commit: str, folder: Path) -> Path:
    """The package as it was at ``commit``, extracted into ``folder`` (the repository is not
    touched: no worktree, no checkout)."""
    archive = subprocess.run(
        ["git", "-C", str(HERE), "archive", commit, "pytest_opik_eval"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    return folder


class Worker:
    """A subprocess running one part with one version of the package first on its path."""

    def __init__(self, root: Path, part: str, cells: Sequence[int], args: argparse.Namespace) -> None:
        self.root = root
        env = {**os.environ, "PYTHONPATH": str(root)}
        command = [sys.executable, __file__, "--worker", part, f"--reruns={args.reruns}"]
        command += [f"--repeat={args.repeat}", f"--cells={','.join(map(str, cells))}"]
        command += ["--strict"] if root == HERE else []
        self.process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)

    def result(self) -> dict[str, Any]:
        out, _ = self.process.communicate()
        if self.process.returncode != 0:
            raise SystemExit(f"the worker for {self.root} exited with {self.process.returncode}")
        result: dict[str, Any] = json.loads(out)
        # PYTHONPATH comes before the venv's editable install: check that it did.
        if Path(result["package"]).parent.resolve() != self.root.resolve():
            raise SystemExit(f"the worker for {self.root} imported the package from {result['package']}")
        return result


def measure_rates(
    root: Path, cells: Sequence[int], jobs: int, args: argparse.Namespace
) -> dict[int, dict[str, int]]:
    """The cells' counts, the cells shared among ``jobs`` workers (the costliest cells, with
    three trials and 200 items, spread evenly)."""
    order = sorted(cells, key=lambda index: CELLS[index][0] * CELLS[index][1])
    workers = [Worker(root, "rates", order[job::jobs], args) for job in range(jobs)]
    return {int(index): counts for w in workers for index, counts in w.result()["cells"].items()}


def percent(count: int, reruns: int) -> str:
    return f"{100 * count / reruns:6.1f}%"


def print_rates(old: dict[int, dict[str, int]], new: dict[int, dict[str, int]], reruns: int) -> None:
    """The table: one row per cell, the old rule's figure beside the new one's."""
    se = 100 * math.sqrt(0.05 * 0.95 / reruns)
    se_80 = 100 * math.sqrt(0.8 * 0.2 / reruns)
    print(
        f"Gate max_regression {METRIC}={DELTA:g} over a 0/1 metric: the share of {reruns} reruns per cell\n"
        f"whose gate is not met (Monte-Carlo standard error {se:.1f} points at 5%, {se_80:.1f} at 80%).\n"
        "old: fails when the mean dropped by more than 0.05 (point estimates);\n"
        "new: normal mode, confidence 0.95; strict: the share of A/A reruns that strict mode\n"
        "passes (it proves the drop is below 0.05).\n"
    )
    groups = ("A/A false alarm", "drop 0.10 found", "drop 0.30 found")
    print(f"{'':23}" + "   ".join(f"{group:^15}" for group in groups) + "   strict")
    print(f"{'items trials p':23}" + "   ".join(f"{'old':>7} {'new':>7}" for _ in groups) + "   A/A pass")
    for index, (before, now) in sorted((index, (old[index], new[index])) for index in new):
        items, trials, difficulty = CELLS[index]
        p = "0.8" if difficulty == "equal" else "0.6-0.95"
        columns = "   ".join(
            f"{percent(before[f'fail {s:g}'], reruns)} {percent(now[f'fail {s:g}'], reruns)}" for s in SHIFTS
        )
        # Above the target: by how many Monte-Carlo standard errors (at 5%), to tell chance from a flaw.
        excess = (now["fail 0"] / reruns - 0.05) / math.sqrt(0.05 * 0.95 / reruns)
        flag = f"  <- above 5% by {excess:.1f} SE" if excess > 0 else ""
        print(f"{items:>5} {trials:>6} {p:<8}  {columns}   {percent(now['strict pass'], reruns):>8}{flag}")


def print_cost(old: dict[str, Any], new: dict[str, Any], repeat: int) -> None:
    print(
        "\nCost of every gate (fail_under, min_pass_rate, max_regression) with a baseline: each run's\n"
        f"result (experiment_result), then judge, the collector paused as in the session; median of\n"
        f"{repeat} runs, target <= 1 s in all\n"
    )
    steps = ("baseline result", "candidate result", "judge", "all")
    print(f"{'trials per run':<22}" + "".join(f"{step:>17}" for step in steps))
    for size in new["cost"]:
        for rule, figures in (("old", old), ("new", new)):
            row = "".join(f"{figures['cost'][size][step] * 1000:14.0f} ms" for step in steps)
            print(f"{size + ', ' + rule:<22}{row}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reruns", type=int, help="simulated reruns per cell (default 250, 40 with --quick)")
    parser.add_argument("--repeat", type=int, help="runs of the cost, of which the median (default 5)")
    parser.add_argument("--quick", action="store_true", help="few reruns, one cost run: a smoke run")
    parser.add_argument("--jobs", type=int, default=2, help="processes for the new rule's rates (default 2)")
    parser.add_argument("--old-package-path", type=Path, help="a folder holding the old pytest_opik_eval")
    parser.add_argument(
        "--old-commit", default=OLD_COMMIT, help=f"the old rule's commit (default {OLD_COMMIT})"
    )
    parser.add_argument(
        "--cell",
        action="append",
        choices=[cell_name(cell) for cell in CELLS],
        help="measure only this cell (repeatable), e.g. with many more reruns",
    )
    parser.add_argument("--no-cost", action="store_true", help="skip the cost")
    parser.add_argument("--no-rates", action="store_true", help="skip the rates: the cost only")
    parser.add_argument("--worker", choices=["rates", "cost"], help=argparse.SUPPRESS)
    parser.add_argument("--cells", default="", help=argparse.SUPPRESS)
    parser.add_argument("--strict", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.reruns = args.reruns or (40 if args.quick else 250)
    args.repeat = args.repeat or (1 if args.quick else 5)
    if args.worker:
        cells = [int(index) for index in args.cells.split(",") if index]
        worker(args.worker, cells, args.reruns, args.repeat, args.strict)
        return
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        compare(args.old_package_path or old_package(args.old_commit, Path(tmp)), args)
    print(f"\n{time.perf_counter() - started:.0f} s in all")


def compare(old_root: Path, args: argparse.Namespace) -> None:
    """Both rules' rates, then their costs."""
    print(
        f"old rule: {old_root} ({args.old_package_path or args.old_commit})\nnew rule: {HERE}\n", flush=True
    )
    cells = [i for i, cell in enumerate(CELLS) if not args.cell or cell_name(cell) in args.cell]
    if not args.no_rates:
        old_rates = measure_rates(old_root, cells, 1, args)  # quick: one process, before the new one's
        new_rates = measure_rates(HERE, cells, min(args.jobs, len(cells)), args)
        print_rates(old_rates, new_rates, args.reruns)
    if not args.no_cost:
        # The costs one at a time, nothing else running.
        old_cost, new_cost = (Worker(root, "cost", [], args).result() for root in (old_root, HERE))
        print_cost(old_cost, new_cost, args.repeat)


if __name__ == "__main__":
    main()
