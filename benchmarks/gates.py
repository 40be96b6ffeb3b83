"""Do the gates hold at every sample size and across a session? Their error rates, power, interval
coverage and monotonicity, measured by driving the package's own gate code (``experiment_result``,
``with_baseline``, ``judge_session``) over simulated sessions; then what baseline selection does,
whether the printed detectable drop is caught 80% of the time, how well a judge's pass rate
corrected for its errors on labelled items covers the true pass rate (``correction``; with the
run's own labelled items counted by their labels, ``labelled``), and what the gates cost.

    python benchmarks/gates.py [--reruns N] [--seconds S] [--quick] [--jobs 2]
                               [--only rates|baselines|power|correction|labelled|change|cost]
                               [--row TEXT]
                               [--json FILE [--add]]
    python benchmarks/gates.py --markdown FILE    # the table of a --json file, for the README

A row is a kind of score, a number of items and of trials per item, of gated metrics per test and
of gated tests in the session: every combination of issue 23's grid (144 rows). Each rerun draws
a fresh set of items from the row's population (the item is the unit: the dataset is a sample of
the items the app will meet), runs a baseline and candidates on them, and judges the whole
session, each gate ``max_regression METRIC=0.05``:
- pass/fail scores: each item passes its trials with its own probability, drawn from a beta
  distribution with mean 0.75 and intra-item correlation 0.5 (many items always pass or always
  fail, some are flaky); a drop of D breaks a share D / 0.75 of the items (they fail every trial:
  the hardest case for strict mode, and the usual way an app regresses);
- continuous scores: each item's mean score is drawn from Beta(6, 2) (mean 0.75), its trials
  spread uniformly around it (at most 0.25 either way, within [0, 1]); a drop of D lowers every
  item's mean in proportion (by D / 0.75 of it);
- several metrics of a test share its items' difficulty, each with trials of its own; several
  tests have items of their own.
Columns, each the share of the row's reruns (1,000, or as many as --seconds allow a row: the
Monte-Carlo count is the last column):
- A/A: the session fails (any gate not met, normal mode) though nothing changed (target <= 5%);
- at DELTA: the session fails though every drop is exactly DELTA, tolerated (target <= 5%);
- power: the session fails when every metric drops by 2 x DELTA;
- strict at DELTA: strict mode passes every gate though every drop is exactly DELTA (<= 5%);
- strict A/A: strict mode passes every gate when nothing changed;
- coverage: the first metric's two-sided 95% paired interval holds the true change, at a drop of
  2 x DELTA (>= 94% from 10 items);
- monotone: gates that a better run (one more passed trial, or one score raised by 0.1) fails
  though the run itself met them, over every candidate and mode (target 0).
Under the table, every row whose figure misses a target is named, and whether by more than its
Monte-Carlo error. Seeds are fixed: the same command prints the same figures (after --seconds,
--reruns with the count printed gives a row's again); rows run in ``--jobs`` processes, the
costliest first. The table takes hours: ``--add`` continues the counts of a --json file where each
row stopped (rerun i has the same seed in every invocation), so it can be built over several
sittings, ``--seconds`` bounding each.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import multiprocessing
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from statistics import median
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's package

from pytest_opik_eval.store.records import (  # noqa: E402
    DatasetRecord,
    ExperimentRecord,
    GateSettings,
    ScoreRecord,
    Selection,
    TrialRecord,
)
from pytest_opik_eval.verdict import decisions, samples  # noqa: E402
from pytest_opik_eval.verdict import statistics as stats  # noqa: E402
from pytest_opik_eval.verdict.calibration import LabelledItem  # noqa: E402
from pytest_opik_eval.verdict.comparison import with_baseline  # noqa: E402
from pytest_opik_eval.verdict.correction import (  # noqa: E402
    CorrectedChange,
    Correction,
    PassRate,
    corrected_change,
    correction,
    pass_rate,
)
from pytest_opik_eval.verdict.distributions import binomial_tail  # noqa: E402
from pytest_opik_eval.verdict.results import ExperimentResult, baseline_run, experiment_result  # noqa: E402
from pytest_opik_eval.verdict.summary import judge_session, passed  # noqa: E402

DELTA = 0.05
MEAN = 0.75
ICC = 0.5
SIZES = (1, 3, 10, 30, 100, 500)
TRIALS = (1, 3, 5)


@dataclass(frozen=True)
class Row:
    kind: str  # "pass/fail" or "continuous"
    items: int
    trials: int
    metrics: int = 1
    tests: int = 1

    @property
    def name(self) -> str:
        return f"{self.kind} {self.items}x{self.trials} m{self.metrics} t{self.tests}"


# Issue 23's grid, every combination.
ROWS = [
    Row(kind, n, k, metrics, tests)
    for metrics, tests in ((1, 1), (4, 1), (1, 5), (4, 5))
    for kind in ("pass/fail", "continuous")
    for n in SIZES
    for k in TRIALS
]


# --- the populations ---------------------------------------------------------------------


def item_parameters(rng: random.Random, kind: str, n: int) -> list[float]:
    """Each item's mean score (a pass probability for pass/fail scores)."""
    if kind == "pass/fail":
        total = 1.0 / ICC - 1.0
        return [rng.betavariate(MEAN * total, (1.0 - MEAN) * total) for _ in range(n)]
    return [rng.betavariate(6.0, 2.0) for _ in range(n)]


def scores(
    kind: str, means: Sequence[float], draws: Sequence[Sequence[float]], breaks: Sequence[float], drop: float
) -> list[list[float]]:
    """Each item's trial scores, from its mean, the trials' uniform draws and the item's draw for
    breaking (common random numbers: the candidates differ by the drop alone)."""
    out = []
    for mean, trial_draws, broken in zip(means, draws, breaks, strict=True):
        if kind == "pass/fail":
            p = 0.0 if broken < drop / MEAN else mean
            out.append([1.0 if u < p else 0.0 for u in trial_draws])
        else:
            m = mean * (1.0 - drop / MEAN)
            width = min(m, 1.0 - m, 0.25)
            out.append([m + width * (2.0 * u - 1.0) for u in trial_draws])
    return out


# --- the package's records and verdicts ---------------------------------------------------

NORMAL = {m: GateSettings(max_regression={f"m{j}": DELTA for j in range(m)}, soft=True) for m in (1, 4)}
STRICT = {m: NORMAL[m].model_copy(update={"mode": "strict"}) for m in (1, 4)}


def experiment(run: str, test: int, n: int, trials: int, settings: GateSettings) -> ExperimentRecord:
    return ExperimentRecord.model_construct(
        id=f"{run}-{test}",
        run_id=run,
        name=f"test_{test}",
        test=f"test_qa.py::test_{test}",
        params="",
        created_at="2026-01-01T00:00:00",
        dataset=DatasetRecord.model_construct(source="data.jsonl", path=None, version="v"),
        selection=Selection.model_construct(trial_count=trials),
        items=[{"id": f"item-{i}"} for i in range(n)],
        gates=settings,
        rescore_of=None,
    )


_SCORES: dict[tuple[str, float], ScoreRecord] = {}


def score(name: str, value: float) -> ScoreRecord:
    """A score record; pass/fail ones shared (there are two of each metric)."""
    if value not in (0.0, 1.0):
        return ScoreRecord.model_construct(name=name, value=value)
    key = (name, value)
    if key not in _SCORES:
        _SCORES[key] = ScoreRecord.model_construct(name=name, value=value)
    return _SCORES[key]


def records(
    run: str, test: int, metrics: Sequence[Sequence[Sequence[float]]], settings: GateSettings
) -> tuple[ExperimentRecord, list[TrialRecord]]:
    """The experiment and its trials, as the store hands them back, from each metric's per-item
    trial scores."""
    n, trials = len(metrics[0]), len(metrics[0][0])
    record = experiment(run, test, n, trials, settings)
    return record, [
        TrialRecord(
            id=f"{run}-{test}-{i}-{t}",
            experiment_id=record.id,
            dataset_item_id=f"item-{i}",
            trial=t,
            node_id=f"test_qa.py::test_{test}[item-{i}-t{t}]",
            status="completed",
            attempts=1,
            session_id=run,
            output={},
            scores=[score(f"m{j}", m[i][t]) for j, m in enumerate(metrics)],
            passed=True,
        )
        for i in range(n)
        for t in range(trials)
    ]


def result(
    run: str, test: int, metrics: Sequence[Sequence[Sequence[float]]], settings: GateSettings
) -> ExperimentResult:
    """The experiment's result, by the package's own code."""
    return experiment_result(*records(run, test, metrics, settings), run, settings, intervals=False)


def compared(
    baselines: Sequence[ExperimentResult], candidates: Sequence[ExperimentResult]
) -> list[ExperimentResult]:
    """The candidates with their baselines: the same comparison in either mode (the modes share
    the confidence and the deltas), so it is made once for both."""
    return [with_baseline(c, b) for c, b in zip(candidates, baselines, strict=True)]


def session(compared: Sequence[ExperimentResult], settings: GateSettings) -> list[ExperimentResult]:
    judged = [replace(c, settings=settings) for c in compared]
    return judge_session(judged, lambda experiment_id: f"pytest --eval-resume={experiment_id}")


def failed(judged: Sequence[ExperimentResult]) -> bool:
    return not all(passed(r) for r in judged)


def unmet(judged: Sequence[ExperimentResult]) -> set[tuple[str, str | None]]:
    return {(r.name, g.metric) for r in judged for g in r.gates if not g.met}


# --- one row -----------------------------------------------------------------------------


COUNTS = (
    "aa",
    "at_delta",
    "power",
    "strict_at_delta",
    "strict_aa",
    "covered",
    "coverage_runs",
    "monotone",
    "runs",
)


Draws = list[tuple[list[float], list[float], list[tuple[list[list[float]], list[list[float]]]]]]
CANDIDATES = ((0.0, "aa", "strict_aa"), (DELTA, "at_delta", "strict_at_delta"), (2 * DELTA, "power", None))


def draw(row: Row, rng: random.Random) -> Draws:
    """Per test: its items' means, their draws for breaking, and per metric the uniform draws
    of each item's trials in the baseline and in the candidates."""
    draws = []
    for _ in range(row.tests):
        means = item_parameters(rng, row.kind, row.items)
        breaks = [rng.random() for _ in means]
        per_metric = [
            (
                [[rng.random() for _ in range(row.trials)] for _ in means],
                [[rng.random() for _ in range(row.trials)] for _ in means],
            )
            for _ in range(row.metrics)
        ]
        draws.append((means, breaks, per_metric))
    return draws


def run(row: Row, draws: Draws, name: str, drop: float, *, better: bool = False) -> list[ExperimentResult]:
    """The session's results, the baseline's (``name`` "baseline": no drop) or a candidate's."""
    out = []
    for test, (means, breaks, per_metric) in enumerate(draws):
        metrics = [
            scores(row.kind, means, before, breaks, 0.0)
            if name == "baseline"
            else scores(row.kind, means, now, breaks, drop)
            for before, now in per_metric
        ]
        if better:
            metrics[0] = improved(row.kind, metrics[0])
        out.append(result(name, test, metrics, NORMAL[row.metrics]))
    return out


def measure(row: Row, reruns: int, seconds: float = math.inf, start: int = 0) -> dict[str, int]:
    """The row's counts over reruns ``start`` to ``reruns`` (each rerun's seed is its index, so
    counts from separate invocations add up to one run's), or as many as ``seconds`` allow (the
    count is in the table)."""
    counts = dict.fromkeys(COUNTS, 0)
    deadline = time.perf_counter() + seconds
    for rerun in range(start, reruns):
        if time.perf_counter() > deadline:
            break
        draws = draw(row, random.Random(f"{row.name}-{rerun}"))
        baselines = run(row, draws, "baseline", 0.0)
        for drop, key_normal, key_strict in CANDIDATES:
            judge_candidate(row, draws, baselines, drop, key_normal, key_strict, counts)
        counts["runs"] += 1
    return counts


def judge_candidate(
    row: Row,
    draws: Draws,
    baselines: list[ExperimentResult],
    drop: float,
    key_normal: str,
    key_strict: str | None,
    counts: dict[str, int],
) -> None:
    normal, strict = NORMAL[row.metrics], STRICT[row.metrics]
    candidates = compared(baselines, run(row, draws, "candidate", drop))
    judged_normal = session(candidates, normal)
    judged_strict = session(candidates, strict)
    counts[key_normal] += failed(judged_normal)
    if key_strict is not None:
        counts[key_strict] += not failed(judged_strict)
    # A better run never gates worse, in either mode (checked where the verdicts are the closest
    # calls: at a drop of DELTA).
    if drop == DELTA:
        better = compared(baselines, run(row, draws, "candidate", drop, better=True))
        for settings, judged in ((normal, judged_normal), (strict, judged_strict)):
            counts["monotone"] += len(unmet(session(better, settings)) - unmet(judged))
    comparison = judged_normal[0].baseline
    if drop == 2 * DELTA and row.items >= 2 and comparison is not None:
        change = comparison.metrics["m0"].interval
        if change is not None:
            counts["coverage_runs"] += 1
            counts["covered"] += change.low <= -drop <= change.high


def improved(kind: str, items: list[list[float]]) -> list[list[float]]:
    """The same run, one trial better: the first failed trial passes (pass/fail), or the lowest
    score rises by 0.1 (continuous)."""
    better = [list(v) for v in items]
    if kind == "pass/fail":
        for values in better:
            if 0.0 in values:
                values[values.index(0.0)] = 1.0
                break
        return better
    item, trial = min(
        ((i, t) for i, v in enumerate(better) for t in range(len(v))), key=lambda it: better[it[0]][it[1]]
    )
    better[item][trial] = min(1.0, better[item][trial] + 0.1)
    return better


def _measure_job(job: tuple[int, int, float, int]) -> tuple[int, dict[str, int]]:
    index, reruns, seconds, start = job
    counts = measure(ROWS[index], reruns, seconds, start)
    print(f"  {ROWS[index].name}: {counts}", file=sys.stderr, flush=True)  # progress
    return index, counts


def percent(count: int, runs: int) -> str:
    return f"{100 * count / runs:5.1f}%" if runs else "    -"


def print_rates(results: dict[int, dict[str, int]]) -> None:
    print(
        f"max_regression METRIC={DELTA:g} per metric, normal and strict modes, confidence 0.95; the share\n"
        "of reruns (their Monte-Carlo count in the last column; its standard error at 5% is 0.7\n"
        "points for 1,000, 2.2 for 100).\n"
    )
    head = f"{'scores':<11}{'items':>6}{'trials':>7}{'metrics':>8}{'tests':>6}{'A/A':>8}{'at DELTA':>9}"
    print(
        f"{head}{'power':>7}{'strict@DELTA':>13}{'strict A/A':>11}{'coverage':>9}{'monotone':>9}{'runs':>7}"
    )
    for index in sorted(results):
        row, c = ROWS[index], results[index]
        shares = [
            (percent(c["aa"], c["runs"]), 8),
            (percent(c["at_delta"], c["runs"]), 9),
            (percent(c["power"], c["runs"]), 7),
            (percent(c["strict_at_delta"], c["runs"]), 13),
            (percent(c["strict_aa"], c["runs"]), 11),
            (percent(c["covered"], c["coverage_runs"]), 9),
        ]
        print(
            f"{row.kind:<11}{row.items:>6}{row.trials:>7}{row.metrics:>8}{row.tests:>6}"
            + "".join(f"{share:>{width}}" for share, width in shares)
            + f"{c['monotone']:>9}{c['runs']:>7}"
        )
    print()
    for line in misses(results):
        print(line)


def markdown(results: dict[int, dict[str, int]]) -> None:
    """The table as the README shows it."""
    print(
        "| scores | items | trials | metrics x tests | A/A | at DELTA | power (2 x DELTA) | strict at DELTA "
        "| strict A/A | coverage | monotone | runs |\n|---|" + "---:|" * 11
    )
    for index in sorted(results):
        row, c = ROWS[index], results[index]
        shares = [percent(c[key], c["runs"]).strip() for key in COUNTS[:5]]
        shares.append(percent(c["covered"], c["coverage_runs"]).strip())
        cells = [row.kind, str(row.items), str(row.trials), f"{row.metrics} x {row.tests}", *shares]
        print("| " + " | ".join([*cells, str(c["monotone"]), f"{c['runs']:,}"]) + " |")
    print()
    for line in misses(results):
        print(line)


def misses(results: dict[int, dict[str, int]]) -> list[str]:
    """Every row whose figure misses a target: the session's false alarms (A/A, at DELTA) and
    strict mode's error above 5%, coverage below 94% from 10 items, any non-monotone verdict;
    each marked whether it is beyond two Monte-Carlo standard errors."""
    lines = []
    for index in sorted(results):
        row, c = ROWS[index], results[index]
        missed = [
            f"{what} {percent(c[key], c['runs']).strip()}{beyond(c[key], c['runs'], 0.05)}"
            for key, what in (("aa", "A/A"), ("at_delta", "at DELTA"), ("strict_at_delta", "strict at DELTA"))
            if c["runs"] and c[key] / c["runs"] > 0.05
        ]
        uncovered = c["coverage_runs"] - c["covered"]
        if row.items >= 10 and c["coverage_runs"] and uncovered / c["coverage_runs"] > 0.06:
            share = percent(c["covered"], c["coverage_runs"]).strip()
            missed.append(f"coverage {share}{beyond(uncovered, c['coverage_runs'], 0.06)}")
        if c["monotone"]:
            missed.append(f"{c['monotone']} non-monotone verdicts")
        if missed:
            lines.append(f"MISSES a target: {row.name} ({c['runs']} runs): " + ", ".join(missed))
    return lines or ["Every row meets its targets."]


def beyond(count: int, runs: int, target: float) -> str:
    """Whether a share above ``target`` is beyond Monte-Carlo error: the exact binomial chance of
    so many at the target is below 2.5%."""
    chance = binomial_tail(count, runs, target)
    return f" (beyond Monte-Carlo error, p={chance:.2g})" if chance < 0.025 else " (within Monte-Carlo error)"


# --- baseline selection --------------------------------------------------------------------


def baseline_bias(items: int, chain: int, choose: str) -> tuple[int, int]:
    """A chain of runs of an unchanged app, each gated with fail_under at its true mean (which
    fails about half the runs by chance) and a regression gate against the baseline ``choose``
    picks: ``last`` the previous run, ``last-passing`` the newest that met its gates. Returns how
    many regression gates failed, of how many judged."""
    settings = GateSettings(fail_under={"m0": MEAN}, max_regression={"m0": DELTA}, soft=True)
    rng = random.Random(f"chain-{items}")
    history: list[tuple[ExperimentResult, bool]] = []
    alarms = judged = 0
    for step in range(chain):
        means = item_parameters(rng, "pass/fail", items)
        now = result(
            f"run{step}",
            0,
            [scores("pass/fail", means, [[rng.random()] for _ in means], [1.0] * items, 0.0)],
            settings,
        )
        candidates = [r for r, ok in reversed(history) if ok or choose == "last"]
        if candidates:
            [verdict] = judge_session([with_baseline(now, candidates[0])], str)
            judged += 1
            alarms += not next(g for g in verdict.gates if g.kind == "max_regression").met
            ok = passed(verdict)
        else:
            ok = passed(judge_session([now], str)[0])
        history.append((now, ok))
    return alarms, judged


# --- is the printed detectable drop caught 80% of the time? --------------------------------


def detectable_power(kind: str, items: int, trials: int, reruns: int) -> tuple[float, int, int]:
    """Draw a baseline, read the detectable drop its regression gate prints (against an unchanged
    candidate), then run a candidate whose items all drop by that much (pass probabilities lowered
    in proportion: the design's model) and see whether the gate fails. Returns the median printed
    drop, the failures, and the reruns that printed one."""
    settings = GateSettings(max_regression={"m0": DELTA}, soft=True)
    drops, caught, runs = [], 0, 0
    for rerun in range(reruns):
        rng = random.Random(f"mdd-{kind}-{items}-{trials}-{rerun}")
        means = item_parameters(rng, kind, items)
        before = [[rng.random() for _ in range(trials)] for _ in means]
        baseline = result("baseline", 0, [scores(kind, means, before, [1.0] * items, 0.0)], settings)
        same = result(
            "candidate",
            0,
            [scores(kind, means, [[rng.random() for _ in range(trials)] for _ in means], [1.0] * items, 0.0)],
            settings,
        )
        [judged] = judge_session([with_baseline(same, baseline)], str)
        drop = judged.gates[0].detectable_drop
        if drop is None:
            continue
        drops.append(drop)
        shrunk = [m * (1.0 - drop / MEAN) for m in means]
        after = [[rng.random() for _ in range(trials)] for _ in means]
        values = (
            [[1.0 if u < p else 0.0 for u in row] for p, row in zip(shrunk, after, strict=True)]
            if kind == "pass/fail"
            else scores(kind, shrunk, after, [1.0] * items, 0.0)
        )
        worse = result("candidate", 0, [values], settings)
        [verdict] = judge_session([with_baseline(worse, baseline)], str)
        caught += not verdict.gates[0].met
        runs += 1
    return (median(drops) if drops else math.nan), caught, runs


# --- the cost at 100,000 trials ----------------------------------------------------------


def cost(kind: str, metrics: int, items: int, trials: int, repeat: int) -> dict[str, float]:
    """Processor seconds (median of ``repeat`` runs; the machine is shared, and the work is one
    thread's) to build each run's result and to judge every gate (fail_under, min_pass_rate,
    max_regression on each metric) with a baseline, over items x trials trials per run, the
    collector paused as the session judges (building the records is not counted)."""
    names = [f"m{j}" for j in range(metrics)]
    gates = GateSettings(
        fail_under={"m0": 0.7},
        min_pass_rate=0.7,
        max_regression=dict.fromkeys(names, DELTA),
        thresholds={"m0": 0.5},
        soft=True,
    )
    rng = random.Random(f"cost-{kind}-{items}-{trials}")
    means = item_parameters(rng, kind, items)

    def draws() -> list[list[float]]:
        return [[rng.random() for _ in range(trials)] for _ in means]

    before = [scores(kind, means, draws(), [1.0] * items, 0.0) for _ in names]
    after = [scores(kind, means, draws(), [rng.random() for _ in means], 0.02) for _ in names]
    baseline_records = records("baseline", 0, before, gates)
    candidate_records = records("candidate", 0, after, gates)
    runs: list[dict[str, float]] = []
    for _ in range(repeat):
        gc.collect()
        gc.disable()  # as the session judges: under gcpause.no_gc_pass
        try:
            times: dict[str, float] = {}
            start = time.process_time()
            baseline = baseline_run(*baseline_records, gates)
            times["baseline result"] = time.process_time() - start
            start = time.process_time()
            candidate = experiment_result(*candidate_records, "candidate", gates)
            times["candidate result"] = time.process_time() - start
            start = time.process_time()
            judged = judge_session([with_baseline(candidate, baseline)], str)
            times["judge"] = time.process_time() - start
        finally:
            gc.enable()
        assert len(judged[0].gates) == 2 + metrics, judged[0].gates
        times["all"] = sum(times.values())
        runs.append(times)
    return {step: median(r[step] for r in runs) for step in runs[0]}


# --- a judge's pass rate corrected for its errors ---------------------------------------------

# The judges: (sensitivity, specificity). The first is issue 25's fake judge: it fails 10% of
# true passes and passes 20% of true fails.
JUDGES = ((0.9, 0.8), (0.95, 0.95), (0.75, 0.7))
JUDGED_TRIALS = 3
BOUND = 0.75  # the fail_under gate's bound on the true pass rate
ABOVE = 0.1  # the power's true pass rate is this much above the bound


@dataclass(frozen=True)
class CorrectionRow:
    labels: int
    items: int
    judge: tuple[float, float]

    @property
    def name(self) -> str:
        return f"{self.labels} labels {self.items} items judge {self.judge[0]:g}/{self.judge[1]:g}"


CORRECTION_ROWS = [
    CorrectionRow(labels, items, judge)
    for labels in (30, 100, 300)
    for items in (30, 100, 1000, 10_000)
    for judge in JUDGES
]
# half_width: the corrected intervals' half-widths summed, in thousandths (the counts are ints).
CORRECTION_COUNTS = ("covered", "raw_covered", "strict_at_bound", "power", "half_width", "corrected", "runs")


def judged_run(rng: random.Random, rate: float, items: int, judge: tuple[float, float]) -> list[float]:
    """Each item's share of trials the judge passed: the item's pass probability drawn from a
    beta with mean ``rate`` (intra-item correlation ``ICC``), each trial a fresh answer that
    truly passes with it, the judge's verdict on it flipped at the judge's error rates."""
    sensitivity, specificity = judge
    total = 1.0 / ICC - 1.0
    shares = []
    for _ in range(items):
        p = rng.betavariate(rate * total, (1.0 - rate) * total)
        passed = 0
        for _ in range(JUDGED_TRIALS):
            truly = rng.random() < p
            passed += rng.random() < (sensitivity if truly else 1.0 - specificity)
        shares.append(passed / JUDGED_TRIALS)
    return shares


def labelled_items(rng: random.Random, labels: int, judge: tuple[float, float]) -> list[LabelledItem]:
    """Answers whose true verdict is known (half to 70% pass), each judged ``JUDGED_TRIALS``
    times, every verdict flipped at the judge's error rates."""
    sensitivity, specificity = judge
    passing = round(rng.uniform(0.5, 0.7) * labels)
    items = []
    for i in range(labels):
        label = i < passing
        rate = sensitivity if label else 1.0 - specificity
        passed = sum(rng.random() < rate for _ in range(JUDGED_TRIALS))
        items.append(LabelledItem(f"label-{i}", passed, JUDGED_TRIALS, label))
    return items


def measure_correction(row: CorrectionRow, reruns: int, seconds: float = math.inf) -> dict[str, int]:
    """The row's counts over ``reruns`` (or as many as ``seconds`` allow), each rerun a fresh
    calibration and two runs: one whose true pass rate is ``BOUND`` (coverage, of the corrected
    and the raw interval, and strict fail_under's error), one ``ABOVE`` it (power)."""
    counts = dict.fromkeys(CORRECTION_COUNTS, 0)
    deadline = time.perf_counter() + seconds
    for rerun in range(reruns):
        if time.perf_counter() > deadline:
            break
        rng = random.Random(f"{row.name}-{rerun}")
        labelled = labelled_items(rng, row.labels, row.judge)
        at_bound = judged_run(rng, BOUND, row.items, row.judge)
        above = judged_run(rng, BOUND + ABOVE, row.items, row.judge)
        counts["runs"] += 1
        raw = stats.interval(samples.sample(at_bound, pass_fail=True))
        counts["raw_covered"] += raw.low <= BOUND <= raw.high
        trials = JUDGED_TRIALS * row.items
        fixed = correction(at_bound, labelled, trials=trials)
        fixed_above = correction(above, labelled, trials=trials)
        if not isinstance(fixed, Correction) or not isinstance(fixed_above, Correction):
            continue  # no correction: said why, and gated on nothing
        counts["corrected"] += 1
        interval = fixed.interval(stats.LEVEL)
        counts["covered"] += interval.low <= BOUND <= interval.high
        counts["half_width"] += round(500 * (interval.high - interval.low))
        counts["strict_at_bound"] += fixed.p_above(BOUND) <= 1.0 - stats.LEVEL
        counts["power"] += fixed_above.p_above(BOUND) <= 1.0 - stats.LEVEL
    return counts


def _correction_job(job: tuple[int, int, float]) -> tuple[int, dict[str, int]]:
    index, reruns, seconds = job
    row = CORRECTION_ROWS[index]
    counts = measure_correction(row, reruns if row.items < 10_000 else max(1, reruns // 4), seconds)
    print(f"  {row.name}: {counts}", file=sys.stderr, flush=True)  # progress
    return index, counts


def correction_table(results: dict[int, dict[str, int]]) -> None:
    """The corrected rows in Markdown, as docs/explanation/statistics.md shows them."""
    print(
        f"The judge's pass rate corrected by its errors on labelled items ({JUDGED_TRIALS} trials an item,\n"
        f"fail_under at {BOUND:g}, confidence 0.95); coverage of the true pass rate by the two-sided 95%\n"
        "interval, corrected and raw; strict fail_under passing though the true rate is at the bound;\n"
        f"power: the same, the true rate {ABOVE:g} above it.\n"
    )
    print(
        "| labels | run items | judge (Se/Sp) | coverage | raw coverage | strict at bound | power "
        "| half-width | runs |\n|---:|---:|---|" + "---:|" * 6
    )
    for index in sorted(results):
        row, c = CORRECTION_ROWS[index], results[index]
        cells = [
            str(row.labels),
            f"{row.items:,}",
            f"{row.judge[0]:g}/{row.judge[1]:g}",
            percent(c["covered"], c["corrected"]).strip(),
            percent(c["raw_covered"], c["runs"]).strip(),
            percent(c["strict_at_bound"], c["corrected"]).strip(),
            percent(c["power"], c["corrected"]).strip(),
            f"{c['half_width'] / 1000 / max(1, c['corrected']):.3f}",
            f"{c['corrected']:,}",
        ]
        print("| " + " | ".join(cells) + " |")
    print()
    lines = []
    for index in sorted(results):
        row, c = CORRECTION_ROWS[index], results[index]
        missed = []
        target = 0.93 if row.labels < 100 else 0.94
        uncovered = c["corrected"] - c["covered"]
        if c["corrected"] and uncovered / c["corrected"] > 1.0 - target:
            missed.append(
                f"coverage {percent(c['covered'], c['corrected']).strip()}"
                + beyond(uncovered, c["corrected"], 1.0 - target)
            )
        if c["corrected"] and c["strict_at_bound"] / c["corrected"] > 0.05:
            share = percent(c["strict_at_bound"], c["corrected"]).strip()
            missed.append(f"strict at bound {share}{beyond(c['strict_at_bound'], c['corrected'], 0.05)}")
        if c["runs"] > c["corrected"]:
            missed.append(f"{c['runs'] - c['corrected']} runs without a correction")
        if missed:
            lines.append(f"MISSES a target: {row.name}: " + ", ".join(missed))
    for line in lines or ["Every corrected row meets its targets."]:
        print(line)


# --- a run whose own items carry labels ---------------------------------------------------------

# The judges of these rows: issue 25's, and a poor one (its corrections are the widest).
LABELLED_JUDGES = (JUDGES[0], JUDGES[2])


@dataclass(frozen=True)
class LabelledRow:
    labels: int  # of the run's items, the first this many are labelled
    items: int
    judge: tuple[float, float]
    trials: int = JUDGED_TRIALS

    @property
    def name(self) -> str:
        trials = "" if self.trials == JUDGED_TRIALS else f" x {self.trials}"
        return f"{self.labels} of {self.items}{trials} labelled judge {self.judge[0]:g}/{self.judge[1]:g}"


LABELLED_ROWS = [
    *(
        LabelledRow(labels, items, judge)
        for labels, items in ((30, 1000), (300, 1000), (1000, 1000), (30, 100), (100, 100))
        for judge in LABELLED_JUDGES
    ),
    LabelledRow(300, 1000, JUDGES[0], trials=1),
]
# "before": every item corrected by the judge's errors, the labelled ones too (own=False);
# "dataset": the interval holds the run's own items' true pass rate (not the population's).
LABELLED_COUNTS = (
    "covered",
    "covered_before",
    "covered_dataset",
    "strict_at_bound",
    "strict_before",
    "power",
    "power_before",
    "half_width",
    "half_width_before",
    "corrected",
    "runs",
)


def labelled_run(
    rng: random.Random, rate: float, row: LabelledRow
) -> tuple[dict[str, list[float]], list[LabelledItem], float]:
    """The run's items, each a fixed answer (a label describes it) that truly passes at ``rate``,
    judged ``row.trials`` times, each verdict flipped at the judge's error rates; the first
    ``row.labels`` labelled with their true verdict; and the items' own true pass rate."""
    sensitivity, specificity = row.judge
    values: dict[str, list[float]] = {}
    labelled = []
    passing = 0
    for i in range(row.items):
        truly = rng.random() < rate
        passing += truly
        chance = sensitivity if truly else 1.0 - specificity
        verdicts = [float(rng.random() < chance) for _ in range(row.trials)]
        values[f"item-{i}"] = verdicts
        if i < row.labels:
            labelled.append(LabelledItem(f"item-{i}", int(sum(verdicts)), row.trials, truly))
    return values, labelled, passing / row.items


def measure_labelled(row: LabelledRow, reruns: int, seconds: float = math.inf) -> dict[str, int]:
    """The row's counts over ``reruns``, each two runs (the true pass rate at ``BOUND``, and
    ``ABOVE`` it), each gated with its labelled items counted by their labels (``pass_rate``,
    own) and, before, with every item corrected: coverage, strict fail_under's error at the
    bound, its power above it, and the two-sided intervals' half-widths."""
    counts = dict.fromkeys(LABELLED_COUNTS, 0)
    deadline = time.perf_counter() + seconds
    alpha = 1.0 - stats.LEVEL
    for rerun in range(reruns):
        if time.perf_counter() > deadline:
            break
        rng = random.Random(f"{row.name}-{rerun}")
        at_bound, labelled, dataset_rate = labelled_run(rng, BOUND, row)
        above, labelled_above, _ = labelled_run(rng, BOUND + ABOVE, row)
        counts["runs"] += 1
        found = [
            pass_rate(values, None, items, own=own)
            for values, items in ((at_bound, labelled), (above, labelled_above))
            for own in (True, False)
        ]
        rates = [f for f in found if isinstance(f, PassRate)]
        if len(rates) < len(found):
            continue  # no correction: said why, and gated on nothing
        now, before, now_above, before_above = rates
        counts["corrected"] += 1
        for suffix, rate, rate_above in (("", now, now_above), ("_before", before, before_above)):
            interval = rate.interval(stats.LEVEL)
            counts["covered" + suffix] += interval.low <= BOUND <= interval.high
            counts["half_width" + suffix] += round(500 * (interval.high - interval.low))
            counts["strict_at_bound" if not suffix else "strict_before"] += rate.p_above(BOUND) <= alpha
            counts["power" + suffix] += rate_above.p_above(BOUND) <= alpha
        interval = now.interval(stats.LEVEL)
        counts["covered_dataset"] += interval.low <= dataset_rate <= interval.high
    return counts


def _labelled_job(job: tuple[int, int, float]) -> tuple[int, dict[str, int]]:
    index, reruns, seconds = job
    counts = measure_labelled(LABELLED_ROWS[index], reruns, seconds)
    print(f"  {LABELLED_ROWS[index].name}: {counts}", file=sys.stderr, flush=True)  # progress
    return index, counts


def labelled_table(results: dict[int, dict[str, int]]) -> None:
    """The rows of runs with labelled items of their own, as docs/explanation/statistics.md
    shows them."""
    print(
        "A run whose own items are labelled: they count by their labels, the rest is corrected\n"
        f"(before: every item corrected); fail_under at {BOUND:g}, confidence 0.95; coverage of the true\n"
        "pass rate by the two-sided 95% interval, and of the run's own items' true pass rate (dataset);\n"
        f"strict fail_under passing at the bound; power, the true rate {ABOVE:g} above it.\n"
    )
    print(
        "| labelled | run items | trials | judge (Se/Sp) | coverage | before | dataset | strict at bound "
        "| before | power | before | half-width | before | runs |\n|---:|---:|---:|---|" + "---:|" * 10
    )
    missed = []
    for index in sorted(results):
        row, c = LABELLED_ROWS[index], results[index]
        n = c["corrected"]
        cells = [
            f"{row.labels:,}",
            f"{row.items:,}",
            str(row.trials),
            f"{row.judge[0]:g}/{row.judge[1]:g}",
            *(
                percent(c[count], n).strip()
                for count in LABELLED_COUNTS[:7]  # the rates, not the widths
            ),
            f"{c['half_width'] / 1000 / max(1, n):.3f}",
            f"{c['half_width_before'] / 1000 / max(1, n):.3f}",
            f"{n:,}",
        ]
        print("| " + " | ".join(cells) + " |")
        if n and (n - c["covered"]) / n > 0.06:
            missed.append(f"MISSES a target: {row.name}: coverage {percent(c['covered'], n).strip()}")
        if n and c["strict_at_bound"] / n > 0.05:
            share = percent(c["strict_at_bound"], n).strip()
            missed.append(
                f"MISSES a target: {row.name}: strict at bound {share}{beyond(c['strict_at_bound'], n, 0.05)}"
            )
        if c["runs"] > n:
            missed.append(f"MISSES a target: {row.name}: {c['runs'] - n} runs without a correction")
    print()
    for line in missed or ["Every labelled row meets its targets."]:
        print(line)


# --- a regression gate on a judge's corrected pass rate -----------------------------------------

# The judge of the baseline, and the current run's judge when its errors drifted (the app
# unchanged): it passes a true pass rate of 0.75 as 0.625 against the baseline judge's 0.725.
DRIFTED = (0.8, 0.9)


@dataclass(frozen=True)
class ChangeRow:
    labels: int
    items: int
    calibration: str  # "shared": one calibration for both runs; "own": each run judges the labels
    judge: tuple[float, float] = JUDGES[0]

    @property
    def name(self) -> str:
        judge = "" if self.judge == JUDGES[0] else f" judge {self.judge[0]:g}/{self.judge[1]:g}"
        return f"{self.labels} labels {self.items} items {self.calibration}{judge}"


CHANGE_ROWS = [
    *(
        ChangeRow(labels, items, calibration)
        for calibration in ("shared", "own")
        for labels in (30, 100, 300)
        for items in (100, 300, 1000)
    ),
    # An accurate judge is often right on every label: its calibration has no spread of its own.
    *(
        ChangeRow(30, items, calibration, JUDGES[1])
        for calibration in ("shared", "own")
        for items in (1000, 10_000)
    ),
]
CHANGE_COUNTS = (
    "at_delta",
    "raw_at_delta",
    "strict_at_delta",
    "power",
    "raw_power",
    "drift",
    "raw_drift",
    "drift_power",
    "corrected",
    "runs",
)


def paired_runs(
    rng: random.Random, items: int, drop: float, judges: tuple[tuple[float, float], tuple[float, float]]
) -> tuple[dict[str, float], dict[str, float]]:
    """A baseline and a current run over the same items, one trial an item: each item's pass
    probability drawn from a beta with mean ``MEAN`` (intra-item correlation ``ICC``), the
    current's lowered in proportion so that the true pass rate drops by ``drop``; each run's
    answer judged by its judge (Se, Sp)."""
    total = 1.0 / ICC - 1.0
    before: dict[str, float] = {}
    now: dict[str, float] = {}
    for i in range(items):
        p = rng.betavariate(MEAN * total, (1.0 - MEAN) * total)
        for run, rate, (sensitivity, specificity) in (
            (before, p, judges[0]),
            (now, p * (1.0 - drop / MEAN), judges[1]),
        ):
            truly = rng.random() < rate
            run[f"item-{i}"] = float(rng.random() < (sensitivity if truly else 1.0 - specificity))
    return before, now


def judged_labels(rng: random.Random, labels: int, judge: tuple[float, float]) -> list[LabelledItem]:
    """The same labelled answers every time (60% pass), judged once each by ``judge``."""
    sensitivity, specificity = judge
    passing = round(0.6 * labels)
    return [
        LabelledItem(
            f"label-{i}",
            int(rng.random() < (sensitivity if i < passing else 1.0 - specificity)),
            1,
            i < passing,
        )
        for i in range(labels)
    ]


def corrected_test(
    row: ChangeRow,
    rng: random.Random,
    drop: float,
    judges: tuple[tuple[float, float], tuple[float, float]],
) -> tuple[CorrectedChange | str, decisions.RegressionTest]:
    """The corrected and the raw regression test of one pair of runs."""
    before, now = paired_runs(rng, row.items, drop, judges)
    labelled_before = judged_labels(rng, row.labels, judges[0])
    labelled_now = (
        labelled_before if row.calibration == "shared" else judged_labels(rng, row.labels, judges[1])
    )
    differences = [now[i] - before[i] for i in now]
    raw = decisions.regression_test(differences, DELTA, pass_fail=True)
    change = corrected_change(
        now, before, labelled_now, labelled_before, DELTA, raw.p_chance, trials=(row.items, row.items)
    )
    return change, raw


def measure_change(row: ChangeRow, reruns: int, seconds: float = math.inf) -> dict[str, int]:
    """The row's counts over ``reruns``: normal mode's false alarms with the true drop at DELTA
    (corrected and raw) and strict mode's passes there; the power at a true drop of 3 x DELTA;
    and, for runs that judge their own labels, the false alarms when only the judge's errors
    changed (``DRIFTED``) and the power then."""
    counts = dict.fromkeys(CHANGE_COUNTS, 0)
    deadline = time.perf_counter() + seconds
    alpha = 1.0 - stats.LEVEL
    same = (row.judge, row.judge)
    for rerun in range(reruns):
        if time.perf_counter() > deadline:
            break
        rng = random.Random(f"{row.name}-{rerun}")
        counts["runs"] += 1
        at_delta, raw = corrected_test(row, rng, DELTA, same)
        powered, raw_powered = corrected_test(row, rng, 3 * DELTA, same)
        counts["raw_at_delta"] += raw.p_beyond <= alpha
        counts["raw_power"] += raw_powered.p_beyond <= alpha
        tests = {"at_delta": at_delta, "power": powered}
        if row.calibration == "own":
            tests["drift"], raw_drift = corrected_test(row, rng, 0.0, (row.judge, DRIFTED))
            tests["drift_power"], _ = corrected_test(row, rng, 3 * DELTA, (row.judge, DRIFTED))
            counts["raw_drift"] += raw_drift.p_beyond <= alpha
        found = {name: test for name, test in tests.items() if isinstance(test, CorrectedChange)}
        if len(found) < len(tests):
            continue  # no correction: said why, and gated on nothing
        counts["corrected"] += 1
        for name, test in found.items():
            counts[name] += test.p_beyond <= alpha
        counts["strict_at_delta"] += found["at_delta"].p_within <= alpha
    return counts


def _change_job(job: tuple[int, int, float]) -> tuple[int, dict[str, int]]:
    index, reruns, seconds = job
    row = CHANGE_ROWS[index]
    counts = measure_change(row, reruns if row.items < 10_000 else max(1, reruns // 4), seconds)
    print(f"  {CHANGE_ROWS[index].name}: {counts}", file=sys.stderr, flush=True)  # progress
    return index, counts


def change_table(results: dict[int, dict[str, int]]) -> None:
    """The corrected regression rows in Markdown, as docs/explanation/statistics.md shows them."""
    print(
        "A regression gate on a judge's pass rate corrected by its errors (one trial an item,\n"
        f"max_regression {DELTA:g} on the true pass rate of {MEAN:g}, "
        "one-sided 0.95): normal mode failing at a true drop of DELTA (corrected, raw), strict mode\n"
        "passing there, the power at a true drop of 3 x DELTA (corrected, raw); with each run judging\n"
        f"its labels, the app unchanged and the judge's errors drifted to {DRIFTED[0]:g}/{DRIFTED[1]:g}: "
        "false alarms (corrected, raw) and the power at 3 x DELTA.\n"
    )
    print(
        "| calibration | judge | labels | run items | at DELTA | raw | strict at DELTA | power "
        "| raw power | drift alarms | raw | drift power | runs |\n|---|---|---:|---:|" + "---:|" * 9
    )
    missed = []
    for index in sorted(results):
        row, c = CHANGE_ROWS[index], results[index]
        own = row.calibration == "own"
        cells = [
            row.calibration,
            f"{row.judge[0]:g}/{row.judge[1]:g}",
            str(row.labels),
            f"{row.items:,}",
            percent(c["at_delta"], c["corrected"]).strip(),
            percent(c["raw_at_delta"], c["runs"]).strip(),
            percent(c["strict_at_delta"], c["corrected"]).strip(),
            percent(c["power"], c["corrected"]).strip(),
            percent(c["raw_power"], c["runs"]).strip(),
            percent(c["drift"], c["corrected"]).strip() if own else "",
            percent(c["raw_drift"], c["runs"]).strip() if own else "",
            percent(c["drift_power"], c["corrected"]).strip() if own else "",
            f"{c['corrected']:,}",
        ]
        print("| " + " | ".join(cells) + " |")
        for count in ("at_delta", "strict_at_delta", *(("drift",) if own else ())):
            if c["corrected"] and c[count] / c["corrected"] > 0.05:
                share = percent(c[count], c["corrected"]).strip()
                missed.append(
                    f"MISSES a target: {row.name}: {count} {share}{beyond(c[count], c['corrected'], 0.05)}"
                )
        if c["runs"] > c["corrected"]:
            missed.append(
                f"MISSES a target: {row.name}: {c['runs'] - c['corrected']} runs without a correction"
            )
    print()
    for line in missed or ["Every corrected regression row meets its targets."]:
        print(line)


# --- the driver --------------------------------------------------------------------------


def in_parallel(function: Callable[[Any], Any], jobs: Sequence[Any], processes: int) -> list[Any]:
    if processes <= 1:
        return [function(job) for job in jobs]
    with multiprocessing.get_context("fork").Pool(processes) as pool:
        return pool.map(function, jobs, chunksize=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--reruns", type=int, help="reruns per row (default 1,000: hours on two cores; 40 with --quick)"
    )
    parser.add_argument(
        "--seconds", type=float, default=math.inf, help="at most this long per row (its count is printed)"
    )
    parser.add_argument("--quick", action="store_true", help="few reruns: a smoke run")
    parser.add_argument("--jobs", type=int, default=2, help="processes (default 2)")
    parser.add_argument(
        "--only",
        choices=["rates", "baselines", "power", "correction", "labelled", "change", "cost"],
        action="append",
    )
    parser.add_argument("--row", action="append", help="only the rows whose name contains this")
    parser.add_argument("--json", type=Path, help="also write the rates' counts here")
    parser.add_argument(
        "--add",
        action="store_true",
        help="add to --json's counts: bring each row up to --reruns, continuing where it stopped",
    )
    parser.add_argument(
        "--markdown", type=Path, help="print the table of these counts (--json's) in Markdown"
    )
    args = parser.parse_args()
    reruns = args.reruns or (40 if args.quick else 1000)
    parts = args.only or ["rates", "baselines", "power", "correction", "labelled", "change", "cost"]
    started = time.perf_counter()
    if args.markdown:
        markdown(counts_in(args.markdown))
        return
    if "rates" in parts:
        rates(args, reruns)
        print(f"({time.perf_counter() - started:.0f} s)\n", flush=True)
    if "baselines" in parts:
        chain = max(200, reruns * 2)
        print(f"Baseline selection: {chain} runs of an unchanged pass/fail app, fail_under at its true mean")
        print(
            "(an estimate rule: about half the runs fail it by chance); the regression gate's false alarms:"
        )
        chains = [(n, chain, choose) for n in (30, 100) for choose in ("last-passing", "last")]
        for (n, _, choose), (alarms, judged) in zip(
            chains, in_parallel(_bias_job, chains, args.jobs), strict=True
        ):
            print(f"  {n:>4} items, --eval-baseline={choose:<13} {percent(alarms, judged)} of {judged}")
        print(flush=True)
    if "power" in parts:
        print("The detectable drop a regression gate prints (80% power), and how often a drop that large")
        print("is caught (a drop spread over the items in proportion, as the design assumes):")
        designs = [
            (kind, n, k, max(100, reruns // 2))
            for kind in ("pass/fail", "continuous")
            for n in (30, 100, 500)
            for k in (1, 3)
        ]
        for (kind, n, k, _), (drop, caught, runs) in zip(
            designs, in_parallel(_power_job, designs, args.jobs), strict=True
        ):
            caught_share = percent(caught, runs)
            print(f"  {kind:<11}{n:>5} items x {k}: printed {drop:.3f}, caught {caught_share} of {runs}")
        print(flush=True)
    judges(args, parts)
    if "cost" in parts:
        print("Cost of every gate (fail_under, min_pass_rate, max_regression) with a baseline, median of 5:")
        for kind, metrics, n, k in (
            ("pass/fail", 1, 20_000, 5),
            ("pass/fail", 1, 100_000, 1),
            ("continuous", 1, 100_000, 1),
            ("continuous", 2, 100_000, 1),
        ):
            figures = cost(kind, metrics, n, k, 1 if args.quick else 5)
            print(
                f"  {kind}, {metrics} metric(s), {n:,} x {k}: "
                + ", ".join(f"{step} {seconds * 1000:.0f} ms" for step, seconds in figures.items())
            )
    print(f"\n{time.perf_counter() - started:.0f} s in all")


def judges(args: argparse.Namespace, parts: list[str]) -> None:
    """The rows of a judge's corrected pass rate: its interval, and the regression gate on it."""
    names: dict[str, list[str]] = {
        "correction": [row.name for row in CORRECTION_ROWS],
        "labelled": [row.name for row in LABELLED_ROWS],
        "change": [row.name for row in CHANGE_ROWS],
    }
    for part, job, table in (
        ("correction", _correction_job, correction_table),
        ("labelled", _labelled_job, labelled_table),
        ("change", _change_job, change_table),
    ):
        if part not in parts:
            continue
        chosen = [i for i, name in enumerate(names[part]) if not args.row or any(r in name for r in args.row)]
        # 200 reruns a row by default (a quarter at 10,000 items): the correction's 36 rows in
        # about half a minute on a core; 10 with --quick (2 s), a smoke run. The docs' tables
        # are --reruns 400 (correction) and 1,000 (labelled, change).
        jobs = [(i, args.reruns or (10 if args.quick else 200), args.seconds) for i in chosen]
        table(dict(in_parallel(job, jobs, args.jobs)))
        print(flush=True)


def rates(args: argparse.Namespace, reruns: int) -> None:
    """The table: the chosen rows measured (added to --json's counts with --add), printed and
    written to --json."""
    chosen = [i for i, row in enumerate(ROWS) if not args.row or any(r in row.name for r in args.row)]
    # The costliest rows first, so that the processes finish together.
    chosen.sort(key=lambda i: -ROWS[i].items * ROWS[i].trials * ROWS[i].metrics * ROWS[i].tests)
    earlier = counts_in(args.json) if args.add else {}
    jobs = [(i, reruns, args.seconds, earlier.get(i, {}).get("runs", 0)) for i in chosen]
    results = dict(in_parallel(_measure_job, jobs, args.jobs))
    for i, counts in earlier.items():
        results[i] = {key: counts.get(key, 0) + results.get(i, {}).get(key, 0) for key in COUNTS}
    print_rates(results)
    if args.json:
        args.json.write_text(json.dumps({ROWS[i].name: c for i, c in sorted(results.items())}, indent=1))


def counts_in(path: Path | None) -> dict[int, dict[str, int]]:
    """The rows' counts a --json file holds (none when there is no file yet)."""
    if path is None or not path.exists():
        return {}
    names = {row.name: i for i, row in enumerate(ROWS)}
    return {names[name]: counts for name, counts in json.loads(path.read_text()).items()}


def _bias_job(job: tuple[int, int, str]) -> tuple[int, int]:
    return baseline_bias(*job)


def _power_job(job: tuple[str, int, int, int]) -> tuple[float, int, int]:
    return detectable_power(*job)


if __name__ == "__main__":
    main()
