"""The cost of the gates' statistics at 100,000 trials, in pure Python.

    python benchmarks/stats_cost.py [--items 20000] [--trials 5] [--repeat 5]

Two runs (a baseline and a current one) of ITEMS x TRIALS trials, each item passing with its own
probability (0.6 to 0.95). Everything a gated run would compute, timed from the trials as flat
records (grouping them by item, the caller's part, is shown apart): a metric's mean interval,
the trial and the k-of-n item pass rates' intervals, the paired comparison, the exact test of the
flips, the regression tests (the score test against DELTA both ways, the exact sign test), Holm
over the metrics, the design's detectable drop and the items needed, pass@k and pass^k with their
intervals. Once for pass/fail scores (the items take a few distinct values) and once for
continuous scores (every item its own value: the tests work on runs of adjacent items). Each
figure is the median of REPEAT runs (the machine is shared).

Named ``stats_cost``, not ``statistics``: a script's folder comes first on ``sys.path``, and a
``statistics.py`` there would shadow the standard library's for ``bench.py``.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable
from statistics import median

from pytest_opik_eval.verdict import decisions, paired
from pytest_opik_eval.verdict import design as dp
from pytest_opik_eval.verdict import pass_at_k as pk
from pytest_opik_eval.verdict import statistics as st

Trial = tuple[str, float, bool]  # item id, score, passed


def simulate(items: int, trials: int, seed: int, continuous: bool, worse: float = 0.0) -> list[Trial]:
    rng = random.Random(seed)
    difficulty = random.Random(0)  # the same items, of the same difficulty, in both runs
    records = []
    for i in range(items):
        p = difficulty.uniform(0.6, 0.95) - worse
        for _ in range(trials):
            score = min(1.0, max(0.0, rng.gauss(p, 0.2))) if continuous else float(rng.random() < p)
            records.append((f"item-{i}", score, score >= 0.5))
    return records


Items = dict[str, list[float]]


def by_item(records: list[Trial]) -> tuple[Items, dict[str, bool]]:
    """The caller's part: each item's scores, and its k-of-n verdict (here: every trial passed)."""
    scores: Items = {}
    verdicts: dict[str, bool] = {}
    for item, score, passed in records:
        scores.setdefault(item, []).append(score)
        verdicts[item] = verdicts.get(item, True) and passed
    return scores, verdicts


def everything(current: list[Trial], baseline: list[Trial]) -> dict[str, float]:
    """Each step's seconds."""
    times: dict[str, float] = {}

    def timed(name: str, step: Callable[[], object]) -> object:
        start = time.perf_counter()
        result = step()
        times[name] = times.get(name, 0.0) + time.perf_counter() - start
        return result

    start = time.perf_counter()
    scores, verdicts = by_item(current)
    before_scores, before_verdicts = by_item(baseline)
    times["(group trials by item)"] = time.perf_counter() - start
    counts = [(len(v), sum(s >= 0.5 for s in v)) for v in scores.values()]

    timed("metric mean interval", lambda: st.mean_interval(scores.values()))
    timed("trial pass rate", lambda: st.pass_rate_interval([(c, n) for n, c in counts]))
    timed("item pass rate (k of n)", lambda: st.pass_rate_interval((int(v), 1) for v in verdicts.values()))
    comparison = timed("paired comparison", lambda: paired.paired_comparison(scores, before_scores))
    assert isinstance(comparison, paired.PairedComparison)
    assert comparison.sample is not None
    regressions = sum(1 for i, v in verdicts.items() if before_verdicts.get(i) and not v)
    fixes = sum(1 for i, v in verdicts.items() if v and before_verdicts.get(i) is False)
    timed("flips' exact test", lambda: paired.regressions_by_chance(regressions, fixes))
    differences = list(comparison.differences.values())
    test = timed("regression tests, Holm", lambda: decisions.regression_test(differences, delta=0.05))
    assert isinstance(test, decisions.RegressionTest)
    timed("regression tests, Holm", lambda: decisions.holm([test.p_beyond, 0.03, 0.2]))
    timed("bounds on the drop", lambda: test.drop_bounds(0.95))

    def detectable() -> object:
        design = dp.design_of(before_scores.values())
        return (
            dp.minimum_detectable_drop(design, 0.05, 0.05),
            dp.items_needed(design, lambda d: dp.detection_power(d, 0.1, 0.05, 0.05)),
        )

    timed("detectable drop", detectable)
    timed(
        "pass@k, pass^k",
        lambda: (pk.pass_at_k_interval(counts, 3), pk.pass_hat_k_interval(counts, 3)),
    )
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=20000)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"{args.items} items x {args.trials} trials, median of {args.repeat} runs")
    for continuous in (False, True):
        baseline = simulate(args.items, args.trials, seed=1, continuous=continuous)
        current = simulate(args.items, args.trials, seed=2, continuous=continuous, worse=0.02)
        runs = [everything(current, baseline) for _ in range(args.repeat)]
        print(f"\n{'continuous' if continuous else 'pass/fail'} scores:")
        for step in runs[0]:
            print(f"  {step:<26} {median(r[step] for r in runs) * 1000:7.1f} ms")
        statistics = median(sum(t for step, t in r.items() if not step.startswith("(")) for r in runs)
        print(f"  {'statistics, all of it':<26} {statistics * 1000:7.1f} ms")


if __name__ == "__main__":
    main()
