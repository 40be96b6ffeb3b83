"""The commands about a run's gates: ``gate`` (the combined verdict of a run's shards, as pytest
would give it, and the judges' calibrations no shard could keep) and ``plan`` (the items and
trials a regression gate needs, from a stored run taken as the baseline)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_opik_eval.collect.planning import settings_for_gate
from pytest_opik_eval.escaping import escape_control
from pytest_opik_eval.ids import now
from pytest_opik_eval.reports.judge_lines import judge_drift_failure, judge_drift_line
from pytest_opik_eval.reports.terminal import gate_lines, summary_lines
from pytest_opik_eval.settings import GateOptions
from pytest_opik_eval.store import Store
from pytest_opik_eval.store.calibrations import Calibrations
from pytest_opik_eval.verdict.summary import (
    Baselines,
    calibrations_of,
    judge_experiments,
    keep_calibrations,
    passed,
    rest_of_session,
)

if TYPE_CHECKING:
    from pytest_opik_eval.verdict.design import Design, PlanRow


def gate(
    store: Store,
    stored: Calibrations,
    args: argparse.Namespace,
    resume: Callable[[str], str],
    store_path: Path | None,
) -> int:
    """The combined verdict of a run's shards: the summary, one line per gate, the exit code."""
    given = GateOptions(
        fail_under=dict(args.eval_fail_under),
        min_pass_rate=args.eval_min_pass_rate,
        max_regression=dict(args.eval_max_regression),
        soft=args.eval_soft,
        mode=args.eval_gate_mode,
        confidence=args.eval_confidence,
        max_cost=dict(args.eval_max_cost),
        max_latency=args.eval_max_latency,
        judge_floor=dict(args.eval_judge_floor),
    )
    run, experiments = store.find(args.id)
    since = None if args.eval_judge_drift_since is None else store.find(args.eval_judge_drift_since)[0].id
    results = judge_experiments(
        store,
        experiments,
        None,
        lambda e: settings_for_gate(e.gates, given),
        Baselines(store, args.eval_baseline),
        resume,
        family=rest_of_session(store, args.id, run, experiments),
        stored=stored,
        now=now(),
    )
    reports = [r.report() for r in results]
    # The fan-in of CI shards keeps the judges' calibrations that no shard could (each had a part).
    kept = calibrations_of(results)
    drift = keep_calibrations(kept, stored, args.eval_max_judge_drift, since)
    for line in summary_lines(reports, resume, False) + gate_lines(reports):
        print(line)
    for found in drift:
        print(judge_drift_line(found))
        if found.failed:
            print(judge_drift_failure(found, run.id, store_path))
    if args.eval_max_judge_drift is not None and not kept:
        print(
            f"--eval-max-judge-drift={args.eval_max_judge_drift:g}: no judge's calibration to check: "
            "no experiment judged every one of its items with human labels"
        )
    failed = [r.name for r in results if not passed(r) or r.summary.pending]
    failed += [f"judge drift of {d.score}" for d in drift if d.failed]
    print(escape_control(f"eval gate: {'FAILED: ' + ', '.join(failed) if failed else 'passed'}"))
    return 1 if failed else 0


def plan(store: Store, args: argparse.Namespace) -> int:
    """Per experiment and score: the design the stored run implies, and what it needs."""
    from pytest_opik_eval.verdict.design import design_of, plan
    from pytest_opik_eval.verdict.results import baseline_run

    _, experiments = store.find(args.id)
    for experiment in experiments:
        result = baseline_run(experiment, store.trials(experiment.id), experiment.gates)
        size = f"{len(result.verdicts)} items x {experiment.selection.trial_count} trial(s)"
        print(escape_control(f"{experiment.name} ({experiment.test}) experiment {experiment.id}: {size}"))
        level = args.confidence or experiment.gates.confidence
        for metric in args.metric or list(result.values):
            by_item = result.values.get(metric)
            if not by_item:
                print(escape_control(f"  {metric}: no completed trial has this score"))
                continue
            design = design_of(by_item.values())
            delta = (
                args.delta if args.delta is not None else experiment.gates.max_regression.get(metric, 0.05)
            )
            drop = args.drop or 2 * delta
            if drop <= delta:
                print(
                    escape_control(
                        f"  {metric}: a drop of {drop:g} is within DELTA {delta:g}: nothing to catch"
                    )
                )
                continue
            rows = plan(design, drop, delta, (1.0 - level) / args.gates, args.trials)
            for line in _plan_lines(metric, design, rows, drop, delta, level, args.gates):
                print(escape_control(line))
    return 0


def _plan_lines(
    metric: str, design: Design, rows: Sequence[PlanRow], drop: float, delta: float, level: float, gates: int
) -> list[str]:
    if design.binary:
        spread = (
            f"intra-item correlation {design.icc:.2f}"
            if design.icc is not None
            else "one trial per item: intra-item correlation unknown, each figure at the least "
            "favourable one (0 to 1)"
        )
        kind = f"pass/fail, mean {design.mean:.3f}, {spread}"
    else:
        kind = f"mean {design.mean:.3f}, within-item sd {math.sqrt(design.within):.3f}"
    adjusted = f", adjusted for {gates} gates" if gates > 1 else ""
    catch = f"catch {drop:g}"
    clear = f"show none > {delta:g}"
    lines = [
        f"  {metric}: {kind}",
        f"    80% chance, one-sided {level * 100:g}%{adjusted}; items needed to:",
        f"    {'trials':>6}  {catch:>14}  {clear:>16}  drop caught at {design.items} items",
    ]
    for row in rows:
        caught = "none" if row.caught_at_size is None else f"{row.caught_at_size:.3f}"
        lines.append(
            f"    {row.trials:>6}  {_needed(row.to_catch):>14}  {_needed(row.to_clear):>16}  {caught}"
        )
    return lines


def _needed(items: int | None) -> str:
    return "over 100,000" if items is None else f"{items:,}"
