"""Deciding on a whole experiment: item verdicts (k of n), aggregate gates, pending trials, and
the comparison with a baseline. Pure functions over experiment results: no pytest, no store."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from pytest_opik_eval.formatting import score, signed
from pytest_opik_eval.store.records import GateSettings
from pytest_opik_eval.verdict.model import (
    BaselineComparison,
    ExperimentSummary,
    GateKind,
    GateVerdict,
    MetricDelta,
)
from pytest_opik_eval.verdict.results import ExperimentResult, summarize


def judge(
    result: ExperimentResult,
    settings: GateSettings,
    baseline: ExperimentResult | None,
    resume_command: Callable[[str], str],
) -> ExperimentResult:
    """The result with its baseline comparison and gate verdicts."""
    with_baseline = replace(result, baseline=compare(result, baseline) if baseline is not None else None)
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
    ]
    verdicts = [v.model_copy(update={"detail": v.detail + pending_note}) for v in verdicts]
    if summary.pending and not verdicts and settings.has_gates():
        verdicts.append(_verdict("pending", None, None, None, False, pending_note.lstrip("; ")))
    return verdicts


def _fail_under(result: ExperimentResult, settings: GateSettings) -> list[GateVerdict]:
    summary = result.summary
    verdicts = []
    for metric, bound in settings.fail_under.items():
        stats = summary.metrics.get(metric)
        value = stats.mean if stats is not None else None
        failed = stats.failed if stats is not None else 0
        met = value is not None and value >= bound and not failed and not summary.pending
        if stats is None:
            detail = f"no completed trial has a {metric} score (bound {bound:g})" + _unknown(
                metric, result, settings
            )
        elif value is None:
            detail = f"every {metric} score failed to compute (bound {bound:g})"
        else:
            detail = f"mean {score(value)} {'>=' if value >= bound else 'is below'} {bound:g}"
        if failed:
            detail += f"; {failed} score(s) failed to compute, which fails the gate"
        verdicts.append(_verdict("fail_under", metric, value, bound, met, detail))
    return verdicts


def _min_pass_rate(result: ExperimentResult, settings: GateSettings) -> list[GateVerdict]:
    if settings.min_pass_rate is None:
        return []
    bound = settings.min_pass_rate
    if settings.pass_threshold is not None:
        done = [i for i in result.items if i.verdict != "pending"]
        value = sum(1 for i in done if i.verdict == "passed") / len(done) if done else None
        counted = "items"
    else:
        value, counted = result.summary.pass_rate, "trials"
    met = value is not None and value >= bound and not result.summary.pending
    detail = f"{counted} pass rate {score(value)} {'>=' if met else 'is below'} {bound:g}"
    return [_verdict("min_pass_rate", None, value, bound, met, detail)]


def _items(result: ExperimentResult, settings: GateSettings) -> list[GateVerdict]:
    if settings.pass_threshold is None:
        return []
    failed_items = [i for i in result.items if i.verdict == "failed"]
    met = not failed_items and not result.summary.pending
    detail = (
        f"{len(result.items) - len(failed_items)} of {len(result.items)} items passed "
        f"at least {settings.pass_threshold} of their trials"
    )
    return [_verdict("items", None, None, None, met, detail)]


def _max_regression(result: ExperimentResult, settings: GateSettings) -> list[GateVerdict]:
    baseline = result.baseline
    if baseline is None:
        return []
    verdicts = []
    for metric, delta in settings.max_regression.items():
        change = baseline.metrics.get(metric)
        value = change.delta if change is not None else None
        met = value is not None and value >= -delta and not result.summary.pending
        if not baseline.shared_items:
            detail = "the baseline has no item in common with this experiment"
        elif value is None:
            detail = f"{metric} has no mean in this experiment or its baseline" + _unknown(
                metric, result, settings
            )
        else:
            detail = f"mean changed by {signed(value)} from the baseline (at most -{delta:g} allowed)"
            if baseline.only_in_current or baseline.only_in_baseline:
                detail += f", over the {baseline.shared_items} item(s) both planned"
        verdicts.append(_verdict("max_regression", metric, value, -delta, met, detail))
    return verdicts


def compare(current: ExperimentResult, baseline: ExperimentResult) -> BaselineComparison:
    """The two experiments over the items both planned, paired by item id (a baseline made with
    ``-k``, or with a narrower selection, covers fewer): per metric the baseline mean, the current
    mean and their difference, both over those items only; the items that passed in the baseline
    and fail now (regressions) and the reverse (fixes); and the items only one of them planned."""
    before_items = {i.dataset_item_id: i.verdict for i in baseline.items}
    now_items = {i.dataset_item_id: i.verdict for i in current.items}
    shared = [item for item in now_items if item in before_items]
    before_summary = _summary_over(baseline, shared, len(before_items))
    now_summary = _summary_over(current, shared, len(now_items))
    metrics = {}
    for name in dict.fromkeys([*before_summary.metrics, *now_summary.metrics]):
        before = before_summary.metrics.get(name)
        now = now_summary.metrics.get(name)
        before_mean = before.mean if before is not None else None
        now_mean = now.mean if now is not None else None
        delta = now_mean - before_mean if now_mean is not None and before_mean is not None else None
        metrics[name] = MetricDelta(baseline_mean=before_mean, current_mean=now_mean, delta=delta)
    return BaselineComparison(
        experiment_id=baseline.id,
        run_id=baseline.run_id,
        name=baseline.name,
        metrics=metrics,
        shared_items=len(shared),
        only_in_current=[i for i in now_items if i not in before_items],
        only_in_baseline=[i for i in before_items if i not in now_items],
        regressions=[i for i in shared if before_items[i] == "passed" and now_items[i] == "failed"],
        fixes=[i for i in shared if before_items[i] == "failed" and now_items[i] == "passed"],
    )


def _summary_over(result: ExperimentResult, items: list[str], planned: int) -> ExperimentSummary:
    if len(items) == planned:
        return result.summary  # every item of the experiment is compared
    kept = set(items)
    trials = [t for t in result.trials if t.dataset_item_id in kept]
    return summarize(trials, result.settings.thresholds)


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
