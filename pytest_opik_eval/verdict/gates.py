"""Deciding on a whole experiment: item verdicts (k of n), aggregate gates, pending trials, and
the comparison with a baseline. Pure functions over experiment results: no pytest, no store.

The cost and latency gates compare what was measured with their bound: no interval, no test,
the same in either mode. A figure that was not measured (no span reported usage, a span has
tokens and no price, no latency was recorded) fails its gate, saying why and how to measure it.

How a score gate decides, at the settings' confidence level (``GateSettings.mode``):
- normal: an absolute gate (fail_under, min_pass_rate) compares its estimate with the bound, and
  flags as borderline a result whose interval holds the bound. A regression gate fails when the
  drop is significant (the one-sided paired bootstrap test, Holm-adjusted over the experiment's
  regression gates: with several, one of them would otherwise fail by chance more often than
  the level allows) and its estimate exceeds DELTA.
- strict: a gate passes only on evidence: an absolute gate when its interval's lower end clears
  the bound, a regression gate when the one-sided test shows the drop is below DELTA. Every gate
  must pass on its own (an intersection-union test), which needs no multiplicity correction.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace

from pytest_opik_eval.formatting import bounds, dollars, duration, level, score, signed
from pytest_opik_eval.store.records import GateSettings, TrialRecord
from pytest_opik_eval.verdict import statistics as stats
from pytest_opik_eval.verdict.model import (
    BaselineComparison,
    ConfidenceInterval,
    ExperimentSummary,
    FigureChange,
    GateKind,
    GateVerdict,
    MetricDelta,
)
from pytest_opik_eval.verdict.results import (
    ExperimentResult,
    confidence_interval,
    summarize,
)
from pytest_opik_eval.verdict.usage import Spend, percentile, spend, task_seconds

# Items or trials named in a cost or latency gate's notes, worst first.
_WORST = 5


def judge(
    result: ExperimentResult,
    settings: GateSettings,
    baseline: ExperimentResult | None,
    resume_command: Callable[[str], str],
) -> ExperimentResult:
    """The result with its baseline comparison and gate verdicts."""
    with_baseline = result
    if baseline is not None:
        comparison, paired = compare(result, baseline)
        verdicts = {i.dataset_item_id: i.verdict for i in baseline.items}
        with_baseline = replace(result, baseline=comparison, paired=paired, baseline_verdicts=verdicts)
    gates = evaluate_gates(with_baseline, settings, resume_command)
    return replace(with_baseline, gates=gates, gates_met=all(g.met for g in gates))


def evaluate_gates(
    result: ExperimentResult, settings: GateSettings, resume_command: Callable[[str], str]
) -> list[GateVerdict]:
    """Every gate that applies to the experiment, met or not, with one line of detail each."""
    summary = result.summary
    pending_note = (
        f"; {summary.pending} trial(s) pending: {resume_command(result.id)}" if summary.pending else ""
    )
    verdicts = [
        *_fail_under(result, settings),
        *_min_pass_rate(result, settings),
        *_items(result, settings),
        *_max_regression(result, settings),
        *_max_cost(result, settings),
        *_max_latency(result, settings),
    ]
    verdicts = [v.model_copy(update={"detail": v.detail + pending_note}) for v in verdicts]
    if summary.pending and not verdicts and settings.has_gates():
        verdicts.append(_verdict("pending", None, None, None, False, pending_note.lstrip("; ")))
    return verdicts


def _fail_under(result: ExperimentResult, settings: GateSettings) -> list[GateVerdict]:
    summary = result.summary
    verdicts = []
    for metric, bound in settings.fail_under.items():
        stats_ = summary.metrics.get(metric)
        value = stats_.mean if stats_ is not None else None
        interval = stats_.interval if stats_ is not None else None
        failed = stats_.failed if stats_ is not None else 0
        cleared = _clears(value, interval, bound, settings)
        met = cleared and not failed and not summary.pending
        if stats_ is None:
            detail = f"no completed trial has a {metric} score (bound {bound:g})" + _unknown(
                metric, result, settings
            )
        elif value is None:
            detail = f"every {metric} score failed to compute (bound {bound:g})"
        else:
            detail = _absolute_detail("mean", value, interval, bound, cleared, settings)
        if failed:
            detail += f"; {failed} score(s) failed to compute, which fails the gate"
        verdicts.append(_absolute("fail_under", metric, value, bound, met, detail, interval, settings))
    return verdicts


def _min_pass_rate(result: ExperimentResult, settings: GateSettings) -> list[GateVerdict]:
    if settings.min_pass_rate is None:
        return []
    bound = settings.min_pass_rate
    summary = result.summary
    if settings.pass_threshold is not None:
        done = [i for i in result.items if i.verdict != "pending"]
        value = sum(1 for i in done if i.verdict == "passed") / len(done) if done else None
        # With one trial per item, an item's verdict is its trial's: the same rate and interval.
        interval, counted = summary.item_pass_rate or summary.pass_rate_interval, "items"
    else:
        value, interval, counted = summary.pass_rate, summary.pass_rate_interval, "trials"
    cleared = _clears(value, interval, bound, settings)
    met = cleared and not summary.pending
    if value is None:
        detail = f"no completed {counted} (bound {bound:g})"
    else:
        detail = _absolute_detail(f"{counted} pass rate", value, interval, bound, cleared, settings)
    return [_absolute("min_pass_rate", None, value, bound, met, detail, interval, settings)]


def _clears(
    value: float | None, interval: ConfidenceInterval | None, bound: float, settings: GateSettings
) -> bool:
    """Normal mode: the estimate reaches the bound; strict: the interval's lower end does."""
    if value is None:
        return False
    if settings.mode == "strict":
        return interval is not None and interval.low >= bound
    return value >= bound


def _absolute_detail(
    what: str,
    value: float,
    interval: ConfidenceInterval | None,
    bound: float,
    cleared: bool,
    settings: GateSettings,
) -> str:
    if settings.mode == "strict" and interval is not None:
        low = score(interval.low)
        return f"{what} {score(value)}, lower bound {low} {'>=' if cleared else 'is below'} {bound:g}"
    return f"{what} {score(value)} {'>=' if cleared else 'is below'} {bound:g}"


def _absolute(
    kind: GateKind,
    metric: str | None,
    value: float | None,
    bound: float,
    met: bool,
    detail: str,
    interval: ConfidenceInterval | None,
    settings: GateSettings,
) -> GateVerdict:
    borderline = interval is not None and interval.straddles(bound)
    notes = [] if interval is None else [_interval_note(interval, bound=bound)]
    return _verdict(kind, metric, value, bound, met, detail).model_copy(
        update={"notes": notes, "mode": settings.mode, "interval": interval, "borderline": borderline}
    )


def _items(result: ExperimentResult, settings: GateSettings) -> list[GateVerdict]:
    if settings.pass_threshold is None:
        return []
    failed_items = [i for i in result.items if i.verdict == "failed"]
    met = not failed_items and not result.summary.pending
    detail = (
        f"{len(result.items) - len(failed_items)} of {len(result.items)} items passed "
        f"at least {settings.pass_threshold} of their trials"
    )
    # pass@k and pass^k are in the summary, shown beside the item counts: not repeated here.
    return [_verdict("items", None, None, None, met, detail)]


def _max_regression(result: ExperimentResult, settings: GateSettings) -> list[GateVerdict]:
    baseline = result.baseline
    if baseline is None:
        return []
    level = settings.confidence
    evidence = {
        metric: stats.regression_evidence(paired.bootstrap, delta, level)
        for metric, delta in settings.max_regression.items()
        if (paired := result.paired.get(metric)) is not None and paired.bootstrap is not None
    }
    # Holm over the regression gates that test for a drop (normal mode); with one, p unchanged.
    adjusted = dict(zip(evidence, stats.holm([e.p_drop for e in evidence.values()]), strict=True))
    verdicts = []
    for metric, delta in settings.max_regression.items():
        change = baseline.metrics.get(metric)
        value = change.delta if change is not None else None
        found = evidence.get(metric)
        if not baseline.shared_items:
            detail = "the baseline has no item in common with this experiment"
        elif found is None or change is None:
            detail = f"{metric} has no mean in this experiment or its baseline" + _unknown(
                metric, result, settings
            )
        else:
            verdicts.append(
                _regression(result, settings, metric, change, found, adjusted[metric], len(evidence))
            )
            continue
        verdicts.append(_verdict("max_regression", metric, value, -delta, False, detail))
    return verdicts


def _regression(
    result: ExperimentResult,
    settings: GateSettings,
    metric: str,
    change: MetricDelta,
    evidence: stats.RegressionEvidence,
    p_drop: float,
    tested: int,
) -> GateVerdict:
    """One regression gate, decided on the paired comparison's evidence."""
    delta, drop, level = evidence.delta, evidence.drop, evidence.level
    sd = change.sd or 0.0
    # What the gate can see: at the level each of ``tested`` Holm-adjusted tests may need.
    worst_level = 1.0 - (1.0 - level) / tested
    detectable = stats.minimum_detectable_drop(change.items, sd, worst_level, delta=delta)
    changed = f"mean changed by {signed(-drop)} from the baseline"
    needed: int | None = None
    if settings.mode == "strict":
        p_value = evidence.p_within_delta
        cleared = stats.non_inferior(evidence)
        upper = f"(upper bound {score(evidence.upper_drop + 0.0)}, {_p(p_value)})"  # never -0.000
        detail = f"{changed}; the drop is {'' if cleared else 'not '}shown below {delta:g} {upper}"
        if not cleared and drop < delta:
            needed = _items_to_show_below(delta - drop, sd, level)
    else:
        p_value = p_drop
        cleared = not stats.regressed(evidence, p_drop)
        if not cleared:
            detail = (
                f"mean dropped by {score(drop)} from the baseline, beyond the {delta:g} allowed "
                f"({_p(p_value)})"
            )
        elif drop > delta:
            detail = f"{changed}, beyond -{delta:g} but not significantly ({_p(p_value)})"
            needed = stats.items_needed(drop, sd, worst_level, delta=delta)
        else:
            detail = f"{changed} (at most -{delta:g} allowed)"
    baseline = result.baseline
    if baseline is not None and (baseline.only_in_current or baseline.only_in_baseline):
        detail += f", over the {baseline.shared_items} item(s) both planned"
    notes = []
    if change.interval is not None:
        notes.append(_interval_note(change.interval, "paired ", bound=-delta))
    notes.append(f"detects a drop of {score(detectable)} or more with 80% power at this size and variance")
    if needed is not None and needed > change.items:
        notes.append(
            f"{change.items} items cannot settle this; about {needed} would (or more trials per item)"
        )
    if tested > 1 and settings.mode == "normal":
        notes.append(f"p-values Holm-adjusted over the {tested} regression gates")
    return _verdict(
        "max_regression", metric, change.delta, -delta, cleared and not result.summary.pending, detail
    ).model_copy(
        update={
            "notes": notes,
            "mode": settings.mode,
            "interval": change.interval,
            "borderline": change.interval is not None and change.interval.straddles(-delta),
            "p_value": p_value,
            "detectable_drop": detectable,
            "items_needed": needed,
        }
    )


def _max_cost(result: ExperimentResult, settings: GateSettings) -> list[GateVerdict]:
    """Per item: no item's mean app cost per trial above the bound (the judges' cost is the eval's,
    not the app's); per run: the experiment's whole spend, the app's and the judges'."""
    if settings.max_cost_per_item is None and settings.max_cost_per_run is None:
        return []
    spent = spend(result.trials)
    pending = bool(result.summary.pending)
    verdicts = []
    bound = settings.max_cost_per_item
    if bound is not None:
        worst = sorted(spent.cost_by_item.items(), key=lambda pair: -pair[1])
        value = worst[0][1] if worst and spent.app_reported else None
        over = [item for item, cost in worst if cost > bound]
        if not spent.app_reported:
            detail = _nothing_reported("the app's", spent.trials)
        elif over:
            most = dollars(value, against=[bound])
            detail = (
                f"{len(over)} of {len(worst)} items cost more than {dollars(bound, against=[value])} per "
                f"trial (the app's spans, mean over an item's trials), the most {most}"
            )
        else:
            detail = (
                f"the most expensive item cost {dollars(value, against=[bound])} per trial <= "
                f"{dollars(bound, against=[value])} (the app's spans)"
            )
        unpriced = _unpriced(spent.unpriced_app)
        notes = []
        if worst and spent.app_reported:
            # side by side, and beside the bound: as precise as they differ
            named = [bound, *(cost for _, cost in worst[:_WORST])]
            notes.append(
                "most expensive: " + ", ".join(f"{i} {dollars(c, against=named)}" for i, c in worst[:_WORST])
            )
        verdicts.append(
            _verdict(
                "max_cost_per_item",
                None,
                value,
                bound,
                spent.app_reported and not over and not unpriced and not pending,
                detail + unpriced,
            ).model_copy(update={"notes": notes})
        )
    bound = settings.max_cost_per_run
    if bound is not None:
        reported = spent.app_reported or spent.judge_reported
        if not reported:
            detail = _nothing_reported("any", spent.trials)
        else:
            # The parts of the total, as precise as it is (they add up to it).
            judged = f", judges {dollars(spent.judge, against=[bound])}" if spent.judge_reported else ""
            verb = "<=" if spent.total <= bound else "is above"
            app = dollars(spent.app, against=[bound])
            detail = (
                f"spent {dollars(spent.total, against=[bound])} (app {app}{judged}) {verb} "
                f"{dollars(bound, against=[spent.total])}"
            )
        unpriced = _unpriced(spent.unpriced_app + spent.unpriced_judge)
        met = reported and spent.total <= bound and not unpriced and not pending
        verdicts.append(
            _verdict(
                "max_cost_per_run", None, spent.total if reported else None, bound, met, detail + unpriced
            )
        )
    return verdicts


def _nothing_reported(whose: str, trials: int) -> str:
    return (
        f"no cost was measured: no span of {whose} reported usage or a cost in {trials} completed "
        "trial(s); record the LLM calls with @opik.track (or an Opik integration such as "
        "track_openai) and their usage with opik_context.update_current_span(usage=..., total_cost=...)"
    )


def _unpriced(reasons: Counter[str]) -> str:
    """Why a cost is a floor, which a gate cannot pass on, and how to price the rest."""
    if not reasons:
        return ""
    count = sum(reasons.values())
    why = "; ".join(f"{reason} ({n})" for reason, n in reasons.most_common())
    # The reasons are run/pricing.py's: "no price table (pip install ...)", "unknown model 'x'", ...
    fix = (
        "install the price table: pip install 'pytest-opik-eval[cost]' (Python >= 3.11)"
        if any(reason.startswith("no price table") for reason in reasons)
        else "report the span's cost (total_cost), or a model and provider the price table knows"
    )
    return f"; {count} span(s) have tokens and no price, so the cost is a floor and cannot pass: {why}; {fix}"


def _max_latency(result: ExperimentResult, settings: GateSettings) -> list[GateVerdict]:
    """The task latency's percentile (nearest rank: a measured value) over the completed trials."""
    limit = settings.max_latency
    if limit is None:
        return []
    name = f"p{limit.percentile:g}"
    measured = task_seconds(result.trials)
    value = percentile([seconds for seconds, _ in reversed(measured)], limit.percentile) if measured else None
    if value is None:
        detail = (
            "no completed trial recorded its task latency (trials recorded by a version that kept "
            "no timings have none: rerun them)"
        )
    else:
        verb = "<=" if value <= limit.seconds else "is above"
        pair = (value, limit.seconds)  # as precise as they differ: never "2.5 s is above 2.5 s"
        detail = (
            f"{name} task latency {duration(value, against=pair)} {verb} "
            f"{duration(limit.seconds, against=pair)}, over {len(measured)} trial(s)"
        )
    notes = []
    if measured:
        slowest = ", ".join(f"{t.dataset_item_id}#{t.trial} {duration(s)}" for s, t in measured[:_WORST])
        notes.append(f"slowest: {slowest}")
    met = value is not None and value <= limit.seconds and not result.summary.pending
    return [
        _verdict("max_latency", name, value, limit.seconds, met, detail).model_copy(update={"notes": notes})
    ]


def _items_to_show_below(margin: float, sd: float, level: float) -> int:
    """Items for the one-sided test to show, with 80% power, a drop ``margin`` below delta."""
    if sd == 0.0:
        return 1
    z = stats.normal_quantile(level) + stats.normal_quantile(stats.POWER)
    return max(1, math.ceil((z * sd / margin) ** 2))


def _interval_note(interval: ConfidenceInterval, kind: str = "", *, bound: float) -> str:
    """The estimate, its interval and the sample size; "borderline" when the interval holds the
    bound (the sample cannot tell on which side of it the truth is)."""
    show = signed if kind else score  # a change carries its sign
    borderline = ", borderline" if interval.straddles(bound) else ""
    items = f"{interval.items} item{'s' if interval.items != 1 else ''}"
    return (
        f"{show(interval.estimate)} {bounds(interval, show)} "
        f"{level(interval.level)} {kind}interval, {items}{borderline}"
    )


def _p(p_value: float) -> str:
    return "p<0.001" if p_value < 0.001 else f"p={p_value:.3f}"


def compare(
    current: ExperimentResult, baseline: ExperimentResult
) -> tuple[BaselineComparison, dict[str, stats.PairedComparison]]:
    """The two experiments over the items both planned, paired by item id (a baseline made with
    ``-k``, or with a narrower selection, covers fewer): per metric the baseline mean, the current
    mean, both over those items only, and the paired comparison of the items both scored (the
    mean per-item difference with its interval); the items that passed in the baseline and fail
    now (regressions) and the reverse (fixes), with McNemar's test on them; and the items only
    one of them planned."""
    level = current.settings.confidence
    before_items = {i.dataset_item_id: i.verdict for i in baseline.items}
    now_items = {i.dataset_item_id: i.verdict for i in current.items}
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
    before_summary = _summary_over(baseline, shared, len(before_items))
    now_summary = _summary_over(current, shared, len(now_items))
    kept = set(shared) if only_here else None
    metrics, paired = {}, {}
    for name in dict.fromkeys([*before_summary.metrics, *now_summary.metrics]):
        before = before_summary.metrics.get(name)
        now = now_summary.metrics.get(name)
        now_by_item = current.values.get(name, {})
        if kept is not None:
            now_by_item = {i: v for i, v in now_by_item.items() if i in kept}
        pairs = stats.paired_comparison(now_by_item, baseline.values.get(name, {}))
        paired[name] = pairs
        metrics[name] = MetricDelta(
            baseline_mean=before.mean if before is not None else None,
            current_mean=now.mean if now is not None else None,
            delta=pairs.mean,
            interval=confidence_interval(pairs.bootstrap.interval(level)) if pairs.bootstrap else None,
            items=len(pairs.shared),
            sd=pairs.sd if pairs.shared else None,
        )
    comparison = BaselineComparison(
        experiment_id=baseline.id,
        run_id=baseline.run_id,
        name=baseline.name,
        metrics=metrics,
        shared_items=len(shared),
        only_in_current=only_here,
        only_in_baseline=[i for i in before_items if i not in now_items]
        if len(shared) < len(before_items)
        else [],
        regressions=regressions,
        fixes=fixes,
        flips_p_value=stats.mcnemar_exact(len(regressions), len(fixes)),
        figures=_figures(
            current.trials if kept is None else [t for t in current.trials if t.dataset_item_id in kept],
            [t for t in baseline.trials if t.dataset_item_id in now_items],  # the shared items'
        ),
    )
    return comparison, paired


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
    seconds_now = sorted(s for s, _ in task_seconds(now))
    seconds_before = sorted(s for s, _ in task_seconds(before))
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


def _summary_over(result: ExperimentResult, items: list[str], planned: int) -> ExperimentSummary:
    if len(items) == planned:
        return result.summary  # every item of the experiment is compared
    kept = set(items)
    trials = [t for t in result.trials if t.dataset_item_id in kept]
    return summarize(trials, result.settings.thresholds, soft=result.settings.soft_trials())


def _unknown(metric: str, result: ExperimentResult, settings: GateSettings) -> str:
    """When no metric of the experiment scores ``metric`` (a typo, or a metric's other name):
    the score names it has, so the gate can be fixed."""
    known = list(dict.fromkeys([*result.summary.metrics, *settings.thresholds]))
    if metric in known:
        return ""
    return f"; the experiment has no metric named {metric!r}, its scores are: {', '.join(known) or 'none'}"


def _verdict(
    kind: GateKind, metric: str | None, value: float | None, bound: float | None, met: bool, detail: str
) -> GateVerdict:
    return GateVerdict(kind=kind, metric=metric, value=value, bound=bound, met=met, detail=detail)
