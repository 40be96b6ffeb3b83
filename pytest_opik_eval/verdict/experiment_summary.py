"""An experiment's summary (``verdict.model.ExperimentSummary``): the trials counted by verdict,
per metric the statistics of the completed trials' scores, and the intervals over items (the
means', the pass rates', pass@k's and pass^k's). The item is the unit: a mean or a pass rate is
the mean over items of each item's mean over its completed trials."""

from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Mapping, Sequence
from typing import Literal

from pytest_opik_eval.verdict import statistics as stats
from pytest_opik_eval.verdict.item_verdicts import item_passes, item_results, pass_rates
from pytest_opik_eval.verdict.model import ConfidenceInterval, ExperimentSummary, ItemVerdict, MetricSummary
from pytest_opik_eval.verdict.pass_at_k import pass_at_k_interval, pass_hat_k_interval
from pytest_opik_eval.verdict.samples import Sample, item_means, item_sample, mean
from pytest_opik_eval.verdict.trial_scores import ScoredTrial, ScoresByItem, scores_by_item


def summarize(
    trials: Sequence[ScoredTrial],
    thresholds: dict[str, float | None],
    level: float | None = None,
    scores: ScoresByItem | None = None,
    *,
    verdicts: Sequence[ItemVerdict] | None = None,
    soft: bool = False,
    samples: Mapping[str, Sample] | None = None,
) -> ExperimentSummary:
    """Counts, and per metric the statistics of the completed trials' scores; with ``level``,
    the intervals of the means too. The item is the unit: a mean or a pass rate is the mean over
    items of each item's mean over its completed trials (with as many trials per item, the mean
    over trials), the estimate its interval is around. ``scores``: ``scores_by_item`` of the
    completed trials, ``verdicts`` their ``item_results``, and ``samples`` each metric's
    ``samples.item_sample``, when the caller has them.
    ``soft``: a trial that missed its thresholds counts as soft-failed, not failed
    (``GateSettings.soft_trials``)."""
    completed = [t for t in trials if t.status == "completed"]
    by_item, failed = scores_by_item(completed) if scores is None else scores
    metrics = {}
    for name in dict.fromkeys([*by_item, *failed]):
        items = by_item.get(name, {})
        v = list(itertools.chain.from_iterable(items.values()))
        threshold = thresholds.get(name)
        scored = len(v) + failed.get(name, 0)
        # Counted as a list's length: a generator's sum costs twice as much at 100,000 values.
        met = len([value for value in v if value >= threshold]) if threshold is not None else 0
        metrics[name] = MetricSummary(
            mean=_mean_over_items(items, v) if v else None,
            min=min(v) if v else None,
            max=max(v) if v else None,
            count=len(v),
            failed=failed.get(name, 0),
            threshold=threshold,
            pass_rate=met / scored if threshold is not None and scored else None,
            interval=_mean_interval(items, level, (samples or {}).get(name)) if v and level else None,
        )
    outcomes = list(map(_passed, completed))  # a C loop: 100,000 trials are common
    passed, missed = outcomes.count(True), outcomes.count(False)
    ran = pass_rates(item_results(trials, None) if verdicts is None else verdicts)
    balanced = len({count for _, count in ran}) <= 1  # as many completed trials per item
    return ExperimentSummary(
        trials=len(trials),
        completed=len(completed),
        pending=len(trials) - len(completed),
        passed=passed,
        failed=0 if soft else missed,
        soft_failed=missed if soft else 0,
        pass_rate=(passed / len(completed) if balanced else math.fsum(p / n for p, n in ran) / len(ran))
        if ran
        else None,
        metrics=metrics,
    )


_passed = operator.attrgetter("passed")


def _mean_over_items(items: dict[str, list[float]], values: list[float]) -> float:
    """The mean over items of each item's mean (with one score per item, of the scores)."""
    return mean(values if len(values) == len(items) else item_means(items.values()))


def _mean_interval(items: dict[str, list[float]], level: float, sample: Sample | None) -> ConfidenceInterval:
    """The interval of the mean over items, on their sample (built here unless given)."""
    if sample is None:
        sample = item_sample(items.values())
    return confidence_interval(stats.interval(sample, level))


def item_statistics(
    summary: ExperimentSummary, items: Sequence[ItemVerdict], level: float
) -> ExperimentSummary:
    """The intervals over items: the pass rate's; and with several trials per item, the k-of-n
    item pass rate's, and pass@k and pass^k (with theirs) for k up to the trials every item
    has, over the items with none pending."""
    ran = pass_rates(items)
    if not ran:
        return summary
    summary = summary.model_copy(
        update={"pass_rate_interval": confidence_interval(stats.pass_rate_interval(ran, level))}
    )
    settled = [i for i in items if i.pending == 0]
    decided = item_passes(items)
    if not settled or max(i.trials for i in items) < 2:
        return summary
    pairs = [(i.trials, i.passed) for i in settled]
    ks = [str(k) for k in range(1, min(i.trials for i in settled) + 1)]
    at_k = [confidence_interval(pass_at_k_interval(pairs, int(k), level)) for k in ks]
    hat_k = [confidence_interval(pass_hat_k_interval(pairs, int(k), level)) for k in ks]
    return summary.model_copy(
        update={
            "item_pass_rate": confidence_interval(stats.pass_rate_interval(decided, level))
            if decided
            else None,
            "pass_at_k": {k: i.estimate for k, i in zip(ks, at_k, strict=True)},
            "pass_hat_k": {k: i.estimate for k, i in zip(ks, hat_k, strict=True)},
            "pass_at_k_interval": dict(zip(ks, at_k, strict=True)),
            "pass_hat_k_interval": dict(zip(ks, hat_k, strict=True)),
        }
    )


def confidence_interval(
    interval: stats.Interval, method: Literal["score", "corrected", "t"] = "score"
) -> ConfidenceInterval:
    return ConfidenceInterval.model_construct(
        estimate=interval.estimate,
        low=interval.low,
        high=interval.high,
        level=interval.level,
        items=interval.n,
        method=method,
        one_sided=interval.one_sided,
    )
