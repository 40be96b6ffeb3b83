"""Latency and usage: per trial, from its timings and spans; per experiment, their aggregates."""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter, itemgetter

from pytest_opik_eval.metrics.tool_calls import METRICS_SPAN
from pytest_opik_eval.store.records import SIMULATOR_TAG, SpanRecord, TrialRecord, Usage, UsageTotals
from pytest_opik_eval.verdict.model import Latency, LatencySummary


def trial_latency(trial: TrialRecord) -> Latency | None:
    if trial.task_seconds is None and not trial.metric_seconds:
        return None
    return Latency(task_seconds=trial.task_seconds, metric_seconds=trial.metric_seconds)


def trial_usage(spans: Sequence[SpanRecord]) -> Usage | None:
    """The usage and cost the spans reported (or the price table estimated), summed: those
    under the task span (the first, the root) as the app's, but those under a simulated user's
    span (a conversation's, see ``SIMULATOR_TAG``) as the simulated user's, and those under the
    "metrics_calculation" span as the judges'. Every span that reports counts, at whatever
    depth: the SDK reports usage on the LLM call's span only, unless the app sets it on another
    too, which would then count twice."""
    if not spans:
        return None
    parents = {span.id: span.parent_span_id for span in spans}
    names = {span.id: span.name for span in spans}
    simulated = {span.id for span in spans if span.tags and SIMULATOR_TAG in span.tags}
    task_id = spans[0].id
    roots: dict[str, str | None] = {}
    app: list[SpanRecord] = []
    judge: list[SpanRecord] = []
    simulator: list[SpanRecord] = []
    for span in spans:
        if span.usage is None and span.cost is None:
            continue
        root = _root(span.id, parents, roots)
        if root == task_id and span.id != task_id:
            if simulated and not simulated.isdisjoint(lineage(span.id, parents)):
                simulator.append(span)
            else:
                app.append(span)
        elif root is not None and names.get(root) == METRICS_SPAN:
            judge.append(span)
    if not app and not judge and not simulator:
        return None
    return Usage(app=_totals(app), judge=_totals(judge), simulator=_totals(simulator))


def usage_of(trial: TrialRecord) -> Usage | None:
    """The trial's usage: as the store summed it when the spans were recorded, or, from a store
    written before it kept that sum, from the spans themselves."""
    if trial.usage is None:
        return trial_usage(trial.spans)
    usage = trial.usage
    return usage if usage.app is not None or usage.judge is not None or usage.simulator is not None else None


def _root(span_id: str, parents: dict[str, str | None], roots: dict[str, str | None]) -> str | None:
    """The span at the top of ``span_id``'s chain of parents (None: a parent is missing, or a
    cycle, which a well-formed trace never has). ``roots`` keeps each chain's answer for every
    span on it, so the spans of a trace are summed in one pass at any depth (following each
    span's chain apart cost depth x spans)."""
    path: list[str] = []
    on_path: set[str] = set()
    root: str | None = None
    while span_id not in roots:
        path.append(span_id)
        on_path.add(span_id)
        parent = parents.get(span_id)
        if parent is None:
            root = span_id
            break
        if parent not in parents or parent in on_path:
            break
        span_id = parent
    else:
        root = roots[span_id]
    for step in path:
        roots[step] = root
    return root


def lineage(span_id: str, parents: Mapping[str, str | None]) -> list[str]:
    """``span_id``, its parent, and so on up, as far as ``parents`` (each span's parent, by id)
    knows them: a missing parent or a cycle ends it."""
    chain = [span_id]
    seen = {span_id}
    parent = parents.get(span_id)
    while parent is not None and parent in parents and parent not in seen:
        chain.append(parent)
        seen.add(parent)
        parent = parents.get(parent)
    return chain


def _totals(spans: Sequence[SpanRecord]) -> UsageTotals | None:
    if not spans:
        return None
    costs = [span.cost for span in spans if span.cost is not None]
    unpriced = Counter(span.unpriced for span in spans if span.cost is None and span.unpriced is not None)
    return UsageTotals(
        prompt_tokens=sum(span.prompt_tokens or 0 for span in spans),
        completion_tokens=sum(span.completion_tokens or 0 for span in spans),
        total_tokens=sum(span.total_tokens or 0 for span in spans),
        cost=math.fsum(costs) if costs else None,
        spans=len(spans),
        unpriced=dict(unpriced),
    )


def latency_summary(trials: Iterable[TrialRecord]) -> LatencySummary | None:
    """p50, p95 and max of the completed trials' task latencies: what the latency gate judges
    (a pending trial's attempt, which raised, is shown with its trial and timed again when it
    is resumed)."""
    seconds = latencies(trials)
    if not seconds:
        return None
    return LatencySummary(
        trials=len(seconds), p50=percentile(seconds, 50), p95=percentile(seconds, 95), max=seconds[-1]
    )


def percentile(ordered: Sequence[float], p: float) -> float:
    """The nearest-rank percentile of sorted values: a value that was measured, never one
    interpolated between two (with 20 trials, p95 is the 19th)."""
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def usage_summary(usages: Iterable[Usage | None]) -> Usage | None:
    """The trials' usage, summed, the app's, the judges' and the simulated users' apart."""
    app: list[UsageTotals] = []
    judge: list[UsageTotals] = []
    simulator: list[UsageTotals] = []
    for usage in usages:
        if usage is not None:
            if usage.app is not None:
                app.append(usage.app)
            if usage.judge is not None:
                judge.append(usage.judge)
            if usage.simulator is not None:
                simulator.append(usage.simulator)
    if not app and not judge and not simulator:
        return None
    return Usage(app=_sum(app), judge=_sum(judge), simulator=_sum(simulator))


def _sum(totals: Sequence[UsageTotals]) -> UsageTotals | None:
    if not totals:
        return None
    costs = [t.cost for t in totals if t.cost is not None]
    unpriced: Counter[str] = Counter()
    for t in totals:
        unpriced.update(t.unpriced)
    return UsageTotals(
        prompt_tokens=sum(t.prompt_tokens for t in totals),
        completion_tokens=sum(t.completion_tokens for t in totals),
        total_tokens=sum(t.total_tokens for t in totals),
        cost=math.fsum(costs) if costs else None,
        spans=sum(t.spans for t in totals),
        unpriced=dict(unpriced),
    )


@dataclass
class Spend:
    """What an experiment's completed trials spent, for the cost gates and the baseline
    comparison. A completed trial whose app reported nothing counts as spending nothing."""

    trials: int = 0  # completed
    app: float = 0.0  # USD, every trial's app cost
    judge: float = 0.0
    simulator: float = 0.0  # a conversation's simulated users'
    # Each item's mean, per completed trial, of the app's cost and total tokens: only when the app
    # reported some (every reader checks ``app_reported`` first; 100,000 zeros cost 0.1 s).
    cost_by_item: dict[str, float] = field(default_factory=dict)
    tokens_by_item: dict[str, float] = field(default_factory=dict)
    app_reported: bool = False  # some span of the app reported usage or a cost
    judge_reported: bool = False
    simulator_reported: bool = False
    # The spans with tokens and no cost, by why: the costs above are floors.
    unpriced_app: Counter[str] = field(default_factory=Counter)
    unpriced_judge: Counter[str] = field(default_factory=Counter)  # the simulated users' too

    @property
    def total(self) -> float:
        return self.app + self.judge + self.simulator


def spend(trials: Sequence[TrialRecord]) -> Spend:
    result = Spend(trials=list(map(_status, trials)).count("completed"))  # C loops
    # Most sessions report no usage at all: only the trials that have some are read further.
    apps: dict[int, UsageTotals] = {}  # the app's usage by the trial's id()
    for trial in trials:
        if (trial.usage is None and not trial.spans) or trial.status != "completed":
            continue
        usage = usage_of(trial)
        if usage is None:
            continue
        if usage.app is not None:
            apps[id(trial)] = usage.app
            result.app_reported = True
            result.app += usage.app.cost or 0.0
            result.unpriced_app.update(usage.app.unpriced)
        if usage.judge is not None:
            result.judge_reported = True
            result.judge += usage.judge.cost or 0.0
            result.unpriced_judge.update(usage.judge.unpriced)
        if usage.simulator is not None:
            result.simulator_reported = True
            result.simulator += usage.simulator.cost or 0.0
            result.unpriced_judge.update(usage.simulator.unpriced)
    if result.app_reported:
        result.cost_by_item, result.tokens_by_item = _by_item(trials, apps)
    return result


_status = attrgetter("status")


def _by_item(
    trials: Sequence[TrialRecord], apps: Mapping[int, UsageTotals]
) -> tuple[dict[str, float], dict[str, float]]:
    """Each item's mean app cost and total tokens per completed trial (``apps``: the app's usage
    by the trial's id(); a trial without counts as spending nothing)."""
    costs: dict[str, list[float]] = {}
    tokens: dict[str, list[int]] = {}
    for trial in trials:
        if trial.status != "completed":
            continue
        app = apps.get(id(trial))
        costs.setdefault(trial.dataset_item_id, []).append((app.cost or 0.0) if app else 0.0)
        tokens.setdefault(trial.dataset_item_id, []).append(app.total_tokens if app else 0)
    return (
        {item: math.fsum(c) / len(c) for item, c in costs.items()},
        {item: sum(t) / len(t) for item, t in tokens.items()},
    )


def latencies(trials: Iterable[TrialRecord]) -> list[float]:
    """The completed trials' task latencies, sorted."""
    return sorted([t.task_seconds for t in trials if t.status == "completed" and t.task_seconds is not None])


def slowest(trials: Iterable[TrialRecord], count: int) -> list[tuple[float, TrialRecord]]:
    """The ``count`` completed trials with the longest task latencies, slowest first (in trial
    order among equals)."""
    measured = ((t.task_seconds, t) for t in trials if t.status == "completed" and t.task_seconds is not None)
    return heapq.nlargest(count, measured, key=itemgetter(0))
