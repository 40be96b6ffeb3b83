"""An experiment compared with its baseline: the items both planned, paired by item id; per
metric the change of the mean with its interval, and the regression gates' tests on it; the
items whose verdict flipped; the cost, token and latency figures of both. Pure functions over
experiment results: no pytest, no store."""

from __future__ import annotations

import math
from collections.abc import Container, Sequence
from dataclasses import replace

from pytest_opik_eval.store.records import TrialRecord
from pytest_opik_eval.verdict import calibration, samples
from pytest_opik_eval.verdict import statistics as stats
from pytest_opik_eval.verdict.decisions import regression_test_on
from pytest_opik_eval.verdict.experiment_summary import confidence_interval
from pytest_opik_eval.verdict.model import BaselineComparison, FigureChange, ItemStatus, MetricDelta
from pytest_opik_eval.verdict.paired import PairedComparison, paired_comparison, regressions_by_chance
from pytest_opik_eval.verdict.results import BaselineRun, ExperimentResult
from pytest_opik_eval.verdict.usage import Spend, latencies, percentile, spend


def with_baseline(result: ExperimentResult, baseline: BaselineRun | ExperimentResult) -> ExperimentResult:
    """The result with its baseline comparison, and the tests of its regression gates (the
    baseline: a session's ``baseline_run``, or a whole result)."""
    comparison, paired, baseline_verdicts = compare(result, baseline)
    tests = {
        metric: regression_test_on(pairs.sample, delta)
        for metric, delta in result.settings.max_regression.items()
        if (pairs := paired.get(metric)) is not None and pairs.sample is not None
    }
    judges = {**baseline.experiment.judges, **result.experiment.judges}
    labels = (
        calibration.labels_by_score(baseline.experiment.items, baseline.experiment.labels_field)
        if any(metric in judges for metric in tests)
        else {}
    )
    return replace(
        result,
        baseline_labelled={
            metric: found
            for metric in tests
            if metric in labels
            and (
                found := calibration.labelled_items(
                    labels[metric], baseline.values.get(metric, {}), result.settings.thresholds.get(metric)
                )
            )
        },
        baseline=comparison,
        paired=paired,
        tests=tests,
        baseline_verdicts=baseline_verdicts,
        baseline_values=baseline.values,
        baseline_judges=baseline.experiment.judges,
        baseline_judge_samples=baseline.experiment.judge_samples,
    )


def compare(
    current: ExperimentResult, baseline: BaselineRun | ExperimentResult
) -> tuple[BaselineComparison, dict[str, PairedComparison], dict[str, ItemStatus]]:
    """The two experiments over the items both planned, paired by item id (a baseline made with
    ``-k``, or with a narrower selection, covers fewer): per metric the paired comparison of the
    items both scored (the baseline's and the current mean over them, each item's mean weighing
    the same, and the mean per-item difference with its interval); the items that passed in the
    baseline and fail now (regressions) and the reverse (fixes), with the exact one-sided test
    on them; and the items only one of them planned. Also the baseline's verdict by item."""
    level = current.settings.confidence
    before_items = baseline.verdicts
    now_items = current.verdicts
    shared, only_here, regressions, fixes = [], [], [], []
    for item, verdict in now_items.items():  # one pass: 100,000 items are common
        before_verdict = before_items.get(item)
        if before_verdict is None:
            only_here.append(item)
            continue
        shared.append(item)
        if before_verdict != verdict:
            if verdict == "failed" and before_verdict == "passed":
                regressions.append(item)
            elif verdict == "passed" and before_verdict == "failed":
                fixes.append(item)
    kept = set(shared) if only_here else None
    metrics, paired = {}, {}
    for name in dict.fromkeys([*baseline.values, *current.values]):
        now_by_item = current.values.get(name, {})
        if kept is not None:
            now_by_item = {i: v for i, v in now_by_item.items() if i in kept}
        before_by_item = baseline.values.get(name, {})
        pairs = paired_comparison(now_by_item, before_by_item)
        paired[name] = pairs
        metrics[name] = MetricDelta(
            baseline_mean=pairs.baseline_mean if pairs.shared else _mean(before_by_item, now_items),
            current_mean=pairs.current_mean if pairs.shared else _mean(now_by_item, before_items),
            delta=pairs.sample.mean if pairs.sample else None,
            interval=confidence_interval(stats.interval(pairs.sample, level)) if pairs.sample else None,
            items=len(pairs.shared),
            sd=math.sqrt(pairs.sample.variance) if pairs.sample else None,
        )
    every_baseline_item = len(shared) == len(before_items)
    only_in_baseline = [] if every_baseline_item else [i for i in before_items if i not in now_items]
    comparison = BaselineComparison(
        experiment_id=baseline.id,
        run_id=baseline.run_id,
        name=baseline.name,
        metrics=metrics,
        shared_items=len(shared),
        only_in_current=only_here,
        only_in_baseline=only_in_baseline,
        regressions=regressions,
        fixes=fixes,
        regressions_p_value=regressions_by_chance(len(regressions), len(fixes)),
        figures=_figures(
            current.trials if kept is None else [t for t in current.trials if t.dataset_item_id in kept],
            # the baseline's trials of the shared items: all of them when it planned no other
            baseline.trials
            if every_baseline_item
            else [t for t in baseline.trials if t.dataset_item_id in now_items],
        ),
    )
    return comparison, paired, before_items


def _mean(by_item: dict[str, list[float]], planned: Container[str]) -> float | None:
    """The mean of the item means over the items the other run planned (a metric only one of
    the two scored)."""
    means = samples.item_means(v for item, v in by_item.items() if item in planned and v)
    return samples.mean(means) if means else None


def _figures(now: Sequence[TrialRecord], before: Sequence[TrialRecord]) -> dict[str, FigureChange]:
    """Cost, tokens and latency in both runs over the same items; a figure neither run measured
    is left out."""
    spent_now, spent_before = spend(now), spend(before)
    unpriced = sum(spent_now.unpriced_app.values()) + sum(spent_before.unpriced_app.values())
    figures = {
        "cost_per_item": (
            _per_item(spent_now, spent_now.cost_by_item),
            _per_item(spent_before, spent_before.cost_by_item),
            unpriced,
        ),
        "tokens_per_item": (
            _per_item(spent_now, spent_now.tokens_by_item),
            _per_item(spent_before, spent_before.tokens_by_item),
            0,
        ),
    }
    seconds_now, seconds_before = latencies(now), latencies(before)
    for p in (50, 95):
        figures[f"latency_p{p}"] = (
            percentile(seconds_now, p) if seconds_now else None,
            percentile(seconds_before, p) if seconds_before else None,
            0,
        )
    return {
        name: _change(current, previous, unpriced_spans)
        for name, (current, previous, unpriced_spans) in figures.items()
        if current is not None or previous is not None
    }


def _per_item(spent: Spend, by_item: dict[str, float]) -> float | None:
    if not spent.app_reported or not by_item:
        return None
    return math.fsum(by_item.values()) / len(by_item)


def _change(current: float | None, previous: float | None, unpriced: int) -> FigureChange:
    delta = None if current is None or previous is None else current - previous
    relative = None if delta is None or not previous else delta / previous
    return FigureChange(baseline=previous, current=current, delta=delta, relative=relative, unpriced=unpriced)
