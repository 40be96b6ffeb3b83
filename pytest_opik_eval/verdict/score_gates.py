"""The gates on scores, decided on evidence at the settings' confidence level: ``fail_under`` and
``min_pass_rate`` (absolute), ``max_regression`` (against a baseline).

Every one of them rests on one-sided bounds over the items (``statistics``), and prints the
bounds it decided on:
- normal mode puts the burden of proof on a regression: a regression gate fails only when the
  data show the drop is greater than DELTA (the one-sided test, and the exact test that it is
  not chance), Holm-adjusted over every normal-mode regression gate of the session (CI fails
  when any gate fails, so the session is the family); an absolute gate compares its estimate
  with the bound, as a threshold, and shows its bounds;
- strict mode puts it on the absence of one: a gate passes only when the data show it, a
  regression gate when the drop is shown below DELTA, an absolute gate when its lower bound
  clears the bound. Every gate must pass on its own (an intersection-union test), which needs
  no adjustment.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Literal

from pytest_opik_eval.formatting import level, score, signed
from pytest_opik_eval.store.records import GateSettings
from pytest_opik_eval.verdict import correction, samples
from pytest_opik_eval.verdict import design as plan
from pytest_opik_eval.verdict import statistics as stats
from pytest_opik_eval.verdict.calibration import LabelledItem, kappa_of
from pytest_opik_eval.verdict.decisions import Adjusted, DropTest
from pytest_opik_eval.verdict.experiment_summary import confidence_interval
from pytest_opik_eval.verdict.item_verdicts import item_passes, pass_rates
from pytest_opik_eval.verdict.model import (
    ConfidenceInterval,
    GateCorrection,
    GateKind,
    GateVerdict,
    MetricDelta,
)
from pytest_opik_eval.verdict.results import CorrectedRegression, ExperimentResult, samples_change


def fail_under(result: ExperimentResult, settings: GateSettings) -> list[GateVerdict]:
    summary = result.summary
    verdicts = []
    for metric, bound in settings.fail_under.items():
        stats_ = summary.metrics.get(metric)
        failed = stats_.failed if stats_ is not None else 0
        by_item = result.values.get(metric)
        if not by_item:
            if stats_ is None:
                detail = f"no completed trial has a {metric} score (bound {bound:g})" + unknown(
                    metric, result, settings
                )
            else:
                detail = f"every {metric} score failed to compute (bound {bound:g})"
            verdicts.append(verdict("fail_under", metric, None, bound, False, detail + _failed(failed)))
            continue
        corrected = _corrected(result, metric, settings)
        problem: str | None  # why the gate does not rest on a corrected rate from a sound judge
        if isinstance(corrected, correction.PassRate):
            labelled = result.calibration_sets[metric]
            gate = _corrected_gate(metric, corrected, labelled.source, bound, settings)
            # Every item labelled: the rate is the labels', and no judge's figure enters it.
            floor = settings.judge_floor
            problem = None if corrected.rest is None else _below_floor(corrected, labelled.items, floor)
        else:
            gate = _absolute("fail_under", metric, "mean", result.item_sample(metric), bound, settings)
            problem = corrected
        refused = problem is not None and settings.mode == "strict"
        if problem is not None:
            why = f"strict mode refuses it: {problem}" if refused else problem
            gate = gate.model_copy(update={"detail": f"{gate.detail}; {why}"})
        met = gate.met and not refused and not failed and not summary.pending
        verdicts.append(gate.model_copy(update={"met": met, "detail": gate.detail + _failed(failed)}))
    return verdicts


def _corrected(
    result: ExperimentResult, metric: str, settings: GateSettings
) -> correction.PassRate | str | None:
    """The correction of the metric's pass rate by its judge's errors on human labels; else why
    the gate cannot rest on a corrected rate (a judge without labels, labels that cannot correct,
    a graded score); None for a metric that is no judge and has no labels."""
    labelled = result.calibration_sets.get(metric)
    judge = metric in result.experiment.judges
    if labelled is None:
        if not judge:
            return None
        why = result.uncalibrated.get(metric, "")
        return (
            f"the judge of {metric} is not calibrated{why}: its errors are not in this bound; label "
            f'some items ("labels": {{"{metric}": true}}) to correct it'
        )
    by_item = result.values[metric]
    if not samples.pass_fail(by_item.values()):
        return f"{metric} is a graded score: only a pass/fail score's pass rate is corrected by labels"
    threshold = result.settings.thresholds.get(metric)
    found = correction.pass_rate(by_item, threshold, labelled.items, own=labelled.own)
    if isinstance(found, str):
        return f"not corrected by the labels of {labelled.source}: {found}"
    return found


def _below_floor(
    corrected: correction.PassRate | correction.Correction,
    labelled: list[LabelledItem],
    floor: Mapping[str, float],
) -> str | None:
    """The judge's calibration figures under their floors (``--eval-judge-floor``), if any."""
    figures = {
        "kappa": kappa_of(labelled) if "kappa" in floor else None,
        "sensitivity": corrected.sensitivity,
        "specificity": corrected.specificity,
    }
    below = []
    for figure, least in floor.items():
        value = figures[figure]
        if value is None:
            below.append(f"{figure} undefined (floor {least:g})")
        elif value < least:
            below.append(f"{figure} {score(value)} < {least:g}")
    return (
        f"the judge's calibration is below its floor: {', '.join(below)} (--eval-judge-floor)"
        if below
        else None
    )


def _corrected_gate(
    metric: str, corrected: correction.PassRate, source: str, bound: float, settings: GateSettings
) -> GateVerdict:
    """fail_under on the pass rate corrected for the judge's errors, decided as ``_absolute``
    decides on a sample; both rates are shown, and what corrected it."""
    known = 0 if corrected.known is None else corrected.known.items
    by_labels = f", {known} labelled item(s) by their labels" if known else ""
    gate = _one_sided(
        "fail_under",
        metric,
        f"pass rate {score(corrected.estimate)} corrected for the judge's errors{by_labels} "
        f"({score(corrected.observed)} as judged)",
        corrected.estimate,
        corrected.bounds(settings.confidence),
        corrected.p_above,
        bound,
        settings,
        method="corrected",
    )
    calibration_note = (
        f"corrected by {corrected.labelled} labelled item(s) of {source}: sensitivity "
        f"{_figure(corrected.sensitivity, 'pass')}, specificity {_figure(corrected.specificity, 'fail')}; "
        + _known_note(known, corrected.items)
    )
    return gate.model_copy(
        update={
            "notes": [*gate.notes, calibration_note],
            "correction": GateCorrection(
                raw=corrected.observed,
                sensitivity=corrected.sensitivity,
                specificity=corrected.specificity,
                labelled=corrected.labelled,
                source=source,
                known=known,
            ),
        }
    )


def _figure(value: float | None, label: str) -> str:
    return f"undefined (no item labelled {label})" if value is None else score(value)


def _known_note(known: int, items: int) -> str:
    """How a corrected pass rate counts the run's own labelled items, and what its bounds carry."""
    if not known:
        return "the bounds carry the labels' sampling error and the run's"
    if known == items:
        return (
            f"every one of the run's {items} item(s) is labelled and counts by its label: the judge's "
            "errors do not enter, and the bounds carry the labels' sampling error"
        )
    return (
        f"the run's {known} labelled item(s) count by their labels, its other {items - known} by the "
        "judge's verdicts corrected; the bounds carry the labels' sampling error and the other items'"
    )


def _change_note(corrected: CorrectedRegression) -> str:
    """What corrected a regression gate's change: each run's labels and its judge's errors."""
    test = corrected.test
    now, before = test.current, test.baseline
    runs = (
        f"both runs by {now.labelled} labelled item(s) of {corrected.source}"
        if corrected.shared
        else f"this run by {now.labelled} labelled item(s) of {corrected.source} (sensitivity "
        f"{score(now.sensitivity)}, specificity {score(now.specificity)}), the baseline by "
        f"{before.labelled} of {corrected.baseline_source}"
    )
    return (
        f"corrected for the judge's errors, {runs}: sensitivity {score(before.sensitivity)}, "
        f"specificity {score(before.specificity)}; the pass rate changed by {signed(test.judged)} as "
        f"judged, {signed(test.change)} corrected; the bounds carry the labels' sampling error and the runs'"
    )


def _failed(failed: int) -> str:
    return f"; {failed} score(s) failed to compute, which fails the gate" if failed else ""


def min_pass_rate(result: ExperimentResult, settings: GateSettings) -> list[GateVerdict]:
    if settings.min_pass_rate is None:
        return []
    bound = settings.min_pass_rate
    # With pass_threshold, an item's k-of-n verdict is one outcome; else each item's share of
    # passed trials.
    counted, outcomes = (
        ("items", item_passes(result.items))
        if settings.pass_threshold is not None
        else ("trials", pass_rates(result.items))
    )
    if not outcomes:
        return [
            verdict("min_pass_rate", None, None, bound, False, f"no completed {counted} (bound {bound:g})")
        ]
    s = samples.sample((passed / trials for passed, trials in outcomes), pass_fail=True)
    gate = _absolute("min_pass_rate", None, f"{counted} pass rate", s, bound, settings)
    return [gate.model_copy(update={"met": gate.met and not result.summary.pending})]


def _absolute(
    kind: GateKind, metric: str | None, what: str, s: samples.Sample, bound: float, settings: GateSettings
) -> GateVerdict:
    """Normal mode: the estimate reaches the bound; strict: the one-sided lower bound does (the
    test that the mean is above the bound). Either way the one-sided bounds at the level are
    shown, and whether they hold the bound (borderline)."""
    gate = _one_sided(
        kind,
        metric,
        f"{what} {score(s.mean)}",
        s.mean,
        stats.bounds(s, settings.confidence),
        functools.partial(stats.p_above, s),
        bound,
        settings,
    )
    if s.n >= 2:
        return gate
    alone = "one item bounds nothing: its spread cannot be estimated"
    return gate.model_copy(update={"notes": [*gate.notes, alone]})


def _one_sided(
    kind: GateKind,
    metric: str | None,
    estimate: str,
    value: float,
    bounds: stats.Interval,
    p_above: Callable[[float], float],
    bound: float,
    settings: GateSettings,
    *,
    method: Literal["score", "corrected"] = "score",
) -> GateVerdict:
    """An absolute gate on an estimate (``estimate``: it in words) with its one-sided
    ``bounds``: normal mode compares the estimate with the bound, strict mode its lower bound
    (the p-value of ``p_above``)."""
    p_value: float | None = None
    if settings.mode == "strict":
        p_value = p_above(bound)
        cleared = p_value <= 1.0 - settings.confidence
        verb = ">=" if cleared else "is below"
        detail = f"{estimate}, lower bound {score(bounds.low)} {verb} {bound:g} ({_p(p_value)})"
    else:
        cleared = value >= bound
        detail = f"{estimate} {'>=' if cleared else 'is below'} {bound:g}"
    interval = confidence_interval(bounds, method)
    return verdict(kind, metric, value, bound, cleared, detail).model_copy(
        update={
            "notes": [_bounds_note(interval, score, bound=bound)],
            "mode": settings.mode,
            "interval": interval,
            "borderline": interval.straddles(bound),
            "p_value": p_value,
            "p_value_unadjusted": p_value,
            "one_sided": True,
        }
    )


def max_regression(
    result: ExperimentResult, settings: GateSettings, adjusted: Mapping[str, Adjusted], family: int
) -> list[GateVerdict]:
    """The regression gates; ``adjusted``: each metric's Holm step over the session's
    normal-mode regression gates, ``family`` of them."""
    baseline = result.baseline
    if baseline is None:
        return []
    verdicts = []
    for metric, delta in settings.max_regression.items():
        change = baseline.metrics.get(metric)
        test = result.regression_test(metric)
        if not baseline.shared_items:
            detail = "the baseline has no item in common with this experiment"
        elif test is None or change is None:
            detail = f"{metric} has no mean in this experiment or its baseline" + unknown(
                metric, result, settings
            )
        else:
            verdicts.append(_regression(result, settings, metric, change, test, adjusted.get(metric), family))
            continue
        value = change.delta if change is not None else None
        verdicts.append(verdict("max_regression", metric, value, -delta, False, detail))
    return verdicts


def _regression(
    result: ExperimentResult,
    settings: GateSettings,
    metric: str,
    change: MetricDelta,
    test: DropTest,
    adjusted: Adjusted | None,
    family: int,
) -> GateVerdict:
    """One regression gate, decided on the paired differences' tests (or, for a calibrated
    judge, the corrected change's), at its Holm step."""
    alpha = 1.0 - settings.confidence
    delta, drop = test.delta, test.drop
    strict = settings.mode == "strict"
    # A normal-mode gate's Holm step; a strict gate has none (``summary.judge_session`` puts the
    # normal-mode gates alone in the session's family, so a strict one's ``family`` is 1).
    divisor = 1 if adjusted is None else adjusted.divisor
    confidence = 1.0 - alpha / divisor
    low, high = test.drop_bounds(confidence)
    corrected = result.changes.get(metric)  # a judge's: corrected, or why not
    fixed = corrected if isinstance(corrected, CorrectedRegression) else None
    what = "mean" if fixed is None else "pass rate corrected for the judge's errors"
    p_value, cleared, detail = _regression_decision(test, alpha, strict, adjusted, (low, high), what)
    baseline = result.baseline
    if baseline is not None and (baseline.only_in_current or baseline.only_in_baseline):
        detail += f", over the {baseline.shared_items} item(s) both planned"
    interval = ConfidenceInterval(
        estimate=-drop,
        low=-high,
        high=-low,
        level=confidence,
        items=change.items,
        one_sided=True,
        method="score" if fixed is None else "corrected",
    )
    notes = [_bounds_note(interval, signed, bound=-delta, what="change")]
    refused = False
    scale = None  # a corrected gate's: a judged drop is the true drop times the judge's Se + Sp - 1
    problem = None if isinstance(corrected, CorrectedRegression) else corrected
    if fixed is not None:
        notes.append(_change_note(fixed))
        scale = fixed.test.current.youden
        floor = settings.judge_floor
        problem = _below_floor(fixed.test.current, fixed.labelled, floor) or _below_floor(
            fixed.test.baseline, fixed.baseline_labelled, floor
        )
    if problem is not None:  # as fail_under says it: on the gate's line
        refused = strict
        detail += f"; strict mode refuses it: {problem}" if refused else f"; {problem}"
    if result.baseline_failed and baseline is not None:
        notes.append(
            f"the baseline, experiment {baseline.experiment_id} of run {baseline.run_id}, did not pass "
            "(a gate not met, a trial failed or pending): a drop it already had is not counted here; "
            "compare with a run that passed: --eval-baseline=RUN_ID"
        )
    before, now = result.baseline_judges.get(metric), result.experiment.judges.get(metric)
    if before is not None and now is not None and before != now and fixed is None:
        changed = samples_change(before, result.baseline_judge_samples, now, result.experiment.judge_samples)
        notes.append(
            f"the judge of {metric} changed since the baseline "
            f"({changed or 'its prompt, model or code'}): the change mixes the app's with the judge's; "
            "judge the baseline's outputs again with today's judge "
            f"(opik-eval rescore {baseline.experiment_id if baseline else 'BASELINE'}) "
            "and compare with that"
        )
    if family > 1:
        notes.append(
            f"tested at one-sided {level(confidence)}: Holm over the session's {family} regression "
            f"gates; unadjusted p={test.p_beyond:.3g}"
        )
    detectable, needed, need_note = _design_notes(
        _design(result, metric), delta, alpha / divisor, strict, cleared, scale
    )
    notes += need_note
    met = cleared and not refused and not result.summary.pending
    return verdict(
        "max_regression", metric, change.delta if fixed is None else -drop, -delta, met, detail
    ).model_copy(
        update={
            "notes": notes,
            "mode": settings.mode,
            "interval": interval,
            "borderline": interval.straddles(-delta),
            "p_value": p_value,
            "p_value_unadjusted": test.p_within if strict else test.p_beyond,
            "one_sided": True,
            "adjusted_for": divisor,
            "family": family,
            "p_chance": test.p_chance,
            "detectable_drop": detectable,
            "items_needed": needed,
        }
    )


def _regression_decision(
    test: DropTest,
    alpha: float,
    strict: bool,
    adjusted: Adjusted | None,
    drop_bounds: tuple[float, float],
    what: str,
) -> tuple[float, bool, str]:
    """The p-value decided on, whether the gate is cleared, and the sentence that says so
    (``what`` changed: the mean, or a corrected pass rate)."""
    delta, drop = test.delta, test.drop
    low, high = drop_bounds
    changed = f"{what} changed by {signed(-drop)} from the baseline"
    if strict:
        cleared = test.p_within <= alpha
        shown = "" if cleared else "not "
        upper = f"at most {score(high)}, {_p(test.p_within)}"
        return test.p_within, cleared, f"{changed}; the drop is {shown}shown below {delta:g} ({upper})"
    assert adjusted is not None, "every normal-mode regression gate has its Holm step (judge_session)"
    p_value, cleared = adjusted.p_value, not adjusted.rejected
    adjustment = f", adjusted for {adjusted.divisor} gates" if adjusted.divisor > 1 else ""
    if not cleared:
        beyond = f"beyond the {delta:g} allowed (at least {score(low)}, {_p(p_value)}{adjustment})"
        return p_value, cleared, f"{what} dropped by {score(drop)} from the baseline, {beyond}"
    if drop > delta:
        lower = f"the drop is at least {score(low)}, {_p(p_value)}{adjustment}"
        return p_value, cleared, f"{changed}, beyond {_allowed(delta)} but not shown to be ({lower})"
    return p_value, cleared, f"{changed} (at most {_allowed(delta)} allowed)"


def _design(result: ExperimentResult, metric: str) -> plan.Design:
    """The comparison's design: the baseline's scores of the items both runs scored, and the
    current run's trials per item; never the current scores, whose differences from the
    baseline carry what broke."""
    before = result.baseline_values.get(metric, {})
    pairs = result.paired[metric]  # the items both scored: the baseline has them all
    baseline_items = (
        before.values() if len(pairs.shared) == len(before) else [before[i] for i in pairs.shared]
    )
    return plan.design_of(baseline_items, trials=_trials(result, metric))


def _trials(result: ExperimentResult, metric: str) -> int:
    """The current run's trials per item for this metric (the mean, rounded): the metric has a
    test, so some item has a value."""
    by_item = result.values[metric]
    return max(1, round(sum(map(len, by_item.values())) / len(by_item)))


def _design_notes(
    design: plan.Design,
    delta: float,
    alpha: float,
    strict: bool,
    cleared: bool,
    scale: float | None = None,
) -> tuple[float | None, int | None, list[str]]:
    """What the design can detect, and, when that falls short, how many items would do. A
    corrected gate's design is the judged scores', whose drops are the true ones times
    ``scale`` (the judge's Se + Sp - 1; None for a gate on the scores): its drops are scaled
    back, and its figures leave the labels' sampling error out (with few labels, the power is
    lower than they say)."""
    size = f"{_count(design.items, 'item')} x {_count(design.trials, 'trial')}"
    aside = "" if scale is None else ", the labels' error aside"
    scale = 1.0 if scale is None else scale
    tolerated = delta * scale  # the gate's delta as the judge sees it
    judged = plan.minimum_detectable_drop(design, tolerated, alpha)
    detectable = None if judged is None else min(1.0, judged / scale)
    if detectable is None:
        notes = [f"at {size} no drop is caught with 80% power (see opik-eval plan)"]
    else:
        notes = [f"catches a drop of {score(detectable)} or more with 80% power at {size}{aside}"]
    needed = None
    if strict and not cleared:
        needed = plan.items_needed(design, lambda d: plan.clearance_power(d, tolerated, alpha))
        what = f"show a drop below {delta:g} when nothing changed"
    elif not strict and (detectable is None or detectable > 2 * delta):
        needed = plan.items_needed(design, lambda d: plan.detection_power(d, 2 * tolerated, tolerated, alpha))
        what = f"catch a drop of {2 * delta:g}"
    if needed is not None and needed > design.items:
        notes.append(
            f"about {needed} items would {what} with 80% chance at {_count(design.trials, 'trial')} each"
        )
    return detectable, needed, notes


def _bounds_note(
    interval: ConfidenceInterval, show: Callable[[float | None], str], *, bound: float, what: str = ""
) -> str:
    """The estimate and the one-sided bounds the gate decided on, over how many items;
    "borderline" when they hold the bound (the data cannot tell on which side it lies)."""
    borderline = ", borderline" if interval.straddles(bound) else ""
    items = _count(interval.items, "item")
    on = f" on the {what}" if what else ""
    return (
        f"{show(interval.estimate)} [{show(interval.low)}, {show(interval.high)}] "
        f"one-sided {level(interval.level)} bounds{on}, {items}{borderline}"
    )


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'s' if n != 1 else ''}"


def _allowed(delta: float) -> str:
    """The change allowed, as the changes are written: -0.05, or 0."""
    return f"{-delta:g}" if delta else "0"


def _p(p_value: float) -> str:
    return "p<0.001" if p_value < 0.001 else f"p={p_value:.3f}"


def unknown(metric: str, result: ExperimentResult, settings: GateSettings) -> str:
    """When no metric of the experiment scores ``metric`` (a typo, or a metric's other name):
    the score names it has, so the gate can be fixed."""
    known = list(dict.fromkeys([*result.summary.metrics, *settings.thresholds]))
    if metric in known:
        return ""
    return f"; the experiment has no metric named {metric!r}, its scores are: {', '.join(known) or 'none'}"


def verdict(
    kind: GateKind, metric: str | None, value: float | None, bound: float | None, met: bool, detail: str
) -> GateVerdict:
    return GateVerdict(kind=kind, metric=metric, value=value, bound=bound, met=met, detail=detail)
