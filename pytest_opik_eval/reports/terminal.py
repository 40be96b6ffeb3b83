"""The eval summary as text: one compact section per experiment, then the gate verdicts.

The metric table stays within 80 columns whatever the number of metrics (one row per metric, long
names cut); lines that carry ids, a gate's detail or a command are not wrapped, so that they can be
copied whole.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Protocol

import pytest

from pytest_opik_eval.escaping import escape_control
from pytest_opik_eval.formatting import (
    FIGURE_LABELS,
    ago,
    bounds,
    budget_amount,
    direction,
    dollars,
    duration,
    figure_row,
    level,
    score,
    signed,
)
from pytest_opik_eval.verdict.model import (
    BudgetReport,
    CalibrationOrigin,
    ConfidenceInterval,
    ExperimentReport,
    ExperimentSummary,
    FigureChange,
    GateVerdict,
    JudgeCacheReport,
    JudgeCalibration,
    JudgeDrift,
    JudgeSelfAgreement,
    RecordingReport,
    Report,
    TrialReport,
    UsageTotals,
)

_NAME = 24  # width of the metric column
_TABLE_NAME = 18  # in the metric table, which has the interval too
_LISTED = 10  # ids named in one line before "and N more"
_WIDTH = 80
_OUTLIERS = 3  # the slowest and the most expensive trials named
# What a soft-failed trial is, as every report says it (verdict.model.TrialReport.soft_failed).
SOFT_FAILED = "soft-failed (missed thresholds; the gates decide)"


def trial_verdict(passed: bool | None, *, soft: bool) -> str:
    """A trial's verdict in a word: passed, failed, soft-failed (missed its thresholds where that
    fails nothing: ``GateSettings.soft_trials``), or "" for a trial that has none yet."""
    if passed is None:
        return ""
    return "passed" if passed else ("soft-failed" if soft else "failed")


def summary_lines(
    experiments: Sequence[ExperimentReport], resume_command: Callable[[str], str], resumed: bool
) -> list[str]:
    lines: list[str] = []
    for experiment in experiments:
        lines += experiment_lines(experiment, resume_command, resumed)
    return [escape_control(line) for line in lines]  # names and ids may carry data


def experiment_lines(
    experiment: ExperimentReport, resume_command: Callable[[str], str], resumed: bool
) -> list[str]:
    s = experiment.summary
    lines = [
        f"{experiment.name} ({experiment.test})",
        f"  experiment {experiment.id}  run {experiment.run_id}",
        f"  trials: {s.trials} planned, {s.completed} completed ({trial_verdicts(s)}), {s.pending} pending",
    ]
    rescore_of = experiment.rescore_of
    if rescore_of is not None:
        lines.insert(2, f"  rescore of experiment {rescore_of}: its stored outputs scored again")
    if resumed:
        earlier = sum(1 for t in experiment.trials if t.status == "completed" and not t.ran_this_session)
        now = sum(1 for t in experiment.trials if t.ran_this_session)
        lines.append(f"  this session ran {now}; {earlier} completed in earlier sessions")
    lines += cost_lines(experiment.summary)
    lines += outlier_lines(experiment)
    lines += _metric_table(experiment)
    lines += _item_lines(experiment)
    lines += calibration_lines(experiment)
    lines += [f"  judge samples: {self_agreement_line(a)}" for a in experiment.self_agreement]
    lines += baseline_lines(experiment)
    failed = [t for t in experiment.trials if t.passed is False]
    earlier_failures = [t.node_id for t in failed if not t.ran_this_session]
    if resumed and earlier_failures and not experiment.settings.soft_trials():
        lines.append(f"  failed in an earlier session ({len(earlier_failures)}):")
        lines += [f"    {node}" for node in earlier_failures[:_LISTED]]
        if len(earlier_failures) > _LISTED:
            lines.append(f"    ... and {len(earlier_failures) - _LISTED} more")
    if s.soft_failed:
        lines.append(f"  {SOFT_FAILED}: {_ids([t.node_id for t in failed])}")
    if s.pending:
        lines.append(f"  resume the {s.pending} pending: {resume_command(experiment.id)}")
    return lines


def calibration_lines(experiment: ExperimentReport) -> list[str]:
    """One line per score the items have human labels for: the judge's agreement with them."""
    return [f"  labels: {calibration_line(c, experiment.trial_count)}" for c in experiment.calibrations]


def calibration_line(found: JudgeCalibration, trial_count: int) -> str:
    """``correctness (threshold 0.5, 40 items x 3 trials): agreement 0.850 [0.740, 0.930], ...;
    labels of this experiment``: a figure that is undefined says why, and the end where the
    labels came from (``calibration_origin``)."""
    line = _calibration_figures(found, trial_count)
    return line if found.origin is None else f"{line}; {calibration_origin(found.origin)}"


def calibration_origin(origin: CalibrationOrigin) -> str:
    """Where a calibration's labels came from: ``labels of this experiment``, ``labels of
    test_calibration, this session``, or ``stored calibration of test_calibration: calibrated 3
    days ago, run R, 2026-12-02`` (its age at the session's clock)."""
    if origin.kind == "own":
        return "labels of this experiment"
    if origin.kind == "session":
        return f"labels of {origin.experiment}, this session"
    age = "" if origin.age_days is None else f" {ago(origin.age_days)},"
    date = "" if origin.created_at is None else f", {origin.created_at[:10]}"
    return f"stored calibration of {origin.experiment}: calibrated{age} run {origin.run_id}{date}"


def _calibration_figures(found: JudgeCalibration, trial_count: int) -> str:
    threshold = "pass/fail" if found.threshold is None else f"threshold {found.threshold:g}"
    if found.trials == found.items * trial_count:
        count = f"{found.items} items x {trial_count} trial{'s' if trial_count != 1 else ''}"
    else:
        count = f"{found.items} items, {found.trials} trials"
    head = f"{found.score} ({threshold}, {count})"
    if not found.items:
        return f"{head}: {'; '.join(found.notes)}"
    kappa = found.kappa
    parts = [
        f"agreement {_figure(found.agreement)}",
        f"sensitivity {_figure(found.sensitivity, 'no item labelled pass')}",
        f"specificity {_figure(found.specificity, 'no item labelled fail')}",
        "kappa undefined (one verdict only from judge and labels)"
        if kappa is None
        else f"kappa {score(kappa.estimate)} "
        + ("(no interval)" if kappa.low is None else f"[{score(kappa.low)}, {score(kappa.high)}]"),
    ]
    if found.graded:
        parts += _graded_parts(found)
    line = f"{head}: {', '.join(parts)}"
    if found.judged is None:
        return line
    rates = f"pass rate {_figure(found.judged)} as judged"
    if found.corrected is not None:
        # Its own labelled items count by their labels; another experiment's labels correct all.
        own = found.origin is None or found.origin.kind == "own"
        return f"{line}; {rates}, {_figure(found.corrected)} corrected" + (
            " (labelled items by their labels)" if own else ""
        )
    why = next((n for n in found.notes if n.startswith("not corrected: ")), "not corrected")
    return f"{line}; {rates}, {why}"


def self_agreement_line(found: JudgeSelfAgreement) -> str:
    """``judge (3 samples x 20 trials, threshold 0.5): unanimous in 0.850 of trials (3 split),
    sd within a trial 0.120``: the judge against itself."""
    threshold = "pass/fail" if found.threshold is None else f"threshold {found.threshold:g}"
    trials = f"{found.trials} trial{'s' if found.trials != 1 else ''}"
    return (
        f"{found.score} ({found.samples} samples x {trials}, {threshold}): unanimous in "
        f"{score(found.unanimous)} of trials ({found.split} split), sd within a trial {score(found.sd)}"
    )


def _graded_parts(found: JudgeCalibration) -> list[str]:
    """A graded judge's weighted kappa, correlation and bias against the human scores, or why
    they are undefined (``correlation undefined (every item has the same human score)``)."""

    def why(figure: str) -> str:
        start = f"{figure} undefined: "
        return next((n.removeprefix(start) for n in found.notes if n.startswith(start)), "undefined")

    every = "weighted kappa, correlation and bias"
    if (found.weighted_kappa, found.correlation, found.bias) == (None, None, None):
        return [f"{every} undefined ({why(every)})"]
    parts = []
    for figure, value in (("weighted kappa", found.weighted_kappa), ("correlation", found.correlation)):
        if value is None:
            parts.append(f"{figure} undefined ({why(figure)})")
        else:
            ends = "(no interval)" if value.low is None else f"[{score(value.low)}, {score(value.high)}]"
            parts.append(f"{figure} {score(value.estimate)} {ends}")
    if found.bias is not None:
        parts.append(f"bias {signed(found.bias.estimate)} {bounds(found.bias, signed)}")
    return parts


def _figure(interval: ConfidenceInterval | None, undefined: str = "") -> str:
    if interval is None:
        return f"undefined ({undefined})"
    return f"{score(interval.estimate)} {bounds(interval)}"


def judge_drift_line(drift: JudgeDrift) -> str:
    """``judge drift: correctness (judge 1a2b3c4d5e6f): 7 of 100 labelled items judged
    otherwise than in test_calibration (run ..., 2026-12-01): ...``."""

    def change(figure: str, pair: tuple[float | None, float | None]) -> str:
        before, now = pair
        return "" if before is None or now is None else f", {figure} {score(before)} -> {score(now)}"

    p = "p<0.001" if drift.p_value < 0.001 else f"p={drift.p_value:.3f}"
    return escape_control(
        f"judge drift: {drift.score} (judge {drift.judge[:12]}): {drift.changed} of {drift.items} "
        f"labelled items judged otherwise than in {drift.since}: {drift.now_fail} now fail more, "
        f"{drift.now_pass} now pass more ({p} that they go either way as likely)"
        f"{change('sensitivity', drift.sensitivity)}{change('specificity', drift.specificity)}"
    )


def judge_drift_failure(drift: JudgeDrift, run_id: str | None, store: Path | None = None) -> str:
    """Why a judge's drift failed the session, and what to do: ``NOT MET: judge drift of
    correctness (judge 1a2b3c4d5e6f): 4 of 20 labelled items (0.200) changed ...``; the command
    that accepts the verdicts names ``store`` when it is not the one found by default. Against a
    reference (--eval-judge-drift-since), accepting them is taking run ``run_id`` as the next one."""
    if drift.reference is not None and run_id:
        accept = f"take this run's verdicts as the reference: --eval-judge-drift-since={run_id}"
    else:
        command = (
            shlex.join(["opik-eval", *(["--store", str(store)] if store else []), "calibrate", run_id])
            if run_id
            else "pytest --eval-calibrate"
        )
        accept = f"accept today's verdicts as its calibration: {command}"
    return escape_control(
        f"NOT MET: judge drift of {drift.score} (judge {drift.judge[:12]}): {drift.changed} of "
        f"{drift.items} labelled items ({drift.changed / drift.items:.3f}) judged otherwise than in "
        f"{drift.since}, above --eval-max-judge-drift={drift.bound:g}; that calibration is kept. "
        "Pin the judge's model to a dated version; or, if the change is wanted, review the items "
        f"that changed and {accept}"
    )


def trial_verdicts(summary: ExperimentSummary) -> str:
    """The completed trials by verdict, as every report counts them: ``6 passed, 1 failed``, and
    ``, 2 soft-failed`` when some are."""
    s = summary
    return f"{s.passed} passed, {s.failed} failed" + (
        f", {s.soft_failed} soft-failed" if s.soft_failed else ""
    )


def cost_lines(summary: ExperimentSummary) -> list[str]:
    """The task latency (p50, p95), the app's tokens and cost, then the judges' (the parts that
    were measured or reported): one line within 80 columns, or as many as that takes."""
    parts = []
    if summary.latency is not None:
        parts.append(f"latency p50 {duration(summary.latency.p50)}  p95 {duration(summary.latency.p95)}")
    usage = summary.usage
    if usage is not None and usage.app is not None:
        parts += _usage_parts(usage.app)
    lines = _fill(parts, "  ")
    if usage is not None and usage.judge is not None:
        lines += _fill(["judges:", *_usage_parts(usage.judge)], "  ")
    return [escape_control(line) for line in lines]  # a model's name is the app's data


def outlier_lines(experiment: ExperimentReport) -> list[str]:
    """The slowest trials and the most expensive (the app's cost), a few of each: where to look
    first. Only when they say something: more trials measured than are named, not all alike."""
    several = experiment.trial_count > 1
    timed: list[tuple[float, TrialReport]] = []
    costed: list[tuple[float, TrialReport]] = []
    for trial in experiment.trials:
        if trial.latency is not None and trial.latency.task_seconds is not None:
            timed.append((trial.latency.task_seconds, trial))
        usage = trial.usage
        if usage is not None and usage.app is not None and usage.app.cost is not None:
            costed.append((usage.app.cost, trial))
    lines = _top("slowest:", timed, duration, several) + _top("most expensive:", costed, dollars, several)
    return [escape_control(line) for line in lines]


def _top(
    label: str,
    values: list[tuple[float, TrialReport]],
    show: _Shown,
    several: bool,
) -> list[str]:
    # Only when it says something: more trials than it names, and not all shown alike ("0 ms").
    if len(values) <= _OUTLIERS or show(min(v for v, _ in values)) == show(max(v for v, _ in values)):
        return []
    # sorted is stable: of equal values, the first planned is named first
    top = sorted(values, key=lambda pair: -pair[0])[:_OUTLIERS]
    named = [value for value, _ in top]  # shown beside one another: as precise as they differ
    names = [
        f"{_cut(t.dataset_item_id)}{f'#{t.trial}' if several else ''} {show(value, against=named)}"
        for value, t in top
    ]
    return _fill([label, *names], "  ")


class _Shown(Protocol):
    """How a figure is written: ``dollars`` or ``duration``, as precise as those beside it need."""

    def __call__(self, value: float, /, *, against: Iterable[float | None] = ()) -> str: ...


def _usage_parts(totals: UsageTotals) -> list[str]:
    parts = []
    if totals.total_tokens or totals.prompt_tokens or totals.completion_tokens:
        parts.append(f"tokens {totals.prompt_tokens:,} in / {totals.completion_tokens:,} out")
    unpriced = _unpriced(totals.unpriced)
    if totals.cost is not None or unpriced:
        parts.append(f"cost {'unknown' if totals.cost is None else dollars(totals.cost)}")
    if unpriced:  # a part of its own: on the cost's line when it fits, else on the next
        parts.append(f"({unpriced})")
    return parts


def _unpriced(reasons: dict[str, int]) -> str:
    """The spans with tokens and no cost, and why: "3 spans unpriced: unknown model 'foo-1'"
    (the two most frequent reasons; the JSON report has them all)."""
    if not reasons:
        return ""
    count = sum(reasons.values())
    ordered = sorted(reasons, key=lambda reason: -reasons[reason])
    shown = "; ".join(ordered[:2]) + (f"; {len(ordered) - 2} more" if len(ordered) > 2 else "")
    return f"{count} span{'s' if count != 1 else ''} unpriced: {shown}"


def _fill(parts: list[str], indent: str) -> list[str]:
    lines: list[str] = []
    line = ""
    for part in parts:
        joined = f"{line}   {part}" if line else f"{indent}{part}"
        if line and len(joined) > _WIDTH:
            lines.append(line)
            joined = f"{indent}{part}"
        line = joined
    if line and line.strip() != "judges:":
        lines.append(line)
    return lines


def budget_lines(budget: BudgetReport, code: Callable[[str], str] = str) -> list[str]:
    """``--eval-budget``, as every report says it: what this session spent of it and whether it
    stopped the run (``eval budget reached: spent $7.50 of $7.50 (70 trials not started)``);
    then, when it kept trials from starting, the command that runs them (``resume them with a
    fresh budget: ...``, the command marked up by ``code``)."""
    amounts = (budget.spent, budget.limit)
    spent = (
        f"spent {budget_amount(budget.spent, budget.unit, against=amounts)} "
        f"of {budget_amount(budget.limit, budget.unit, against=amounts)}"
    )
    if budget.given != budget.limit:
        spent += f" (this shard's share of {budget_amount(budget.given, budget.unit)})"
    if not budget.reached:
        return [f"eval budget: {spent}"]
    if not budget.not_started:
        return [f"eval budget reached: {spent} (every trial had started)"]
    trials = f"{budget.not_started} trial{'s' if budget.not_started > 1 else ''}"
    lines = [f"eval budget reached: {spent} ({trials} not started)"]
    if budget.resume_command:
        lines.append(f"resume them with a fresh budget: {code(budget.resume_command)}")
    return lines


def sentence(line: str) -> str:
    """A line of the terminal's as a sentence of its own (a report's paragraph): capitalized."""
    return line[:1].upper() + line[1:]


def judge_cache_lines(cache: JudgeCacheReport | None) -> list[str]:
    """``--eval-judge-cache``: the judges' scores this session reused, those it paid for, and, in
    strict replay, those it missed (their trials failed): ``eval judge cache: 8 hits, 0 scored,
    1 missed (strict)``; nothing when it is off or no judge scored."""
    if cache is None or not (cache.hits or cache.scored or cache.missed):
        return []
    hits, scored, missed = cache.hits, cache.scored, cache.missed
    line = f"eval judge cache: {hits} hit{'' if hits == 1 else 's'}, {scored} scored"
    return [f"{line}, {missed} missed (strict)" if cache.strict or missed else line]


def recording_line(recordings: RecordingReport) -> str:
    """``--eval-record``'s counts in one line (the Markdown summary shows the same):
    ``eval recordings (--eval-record=none): 12 replayed, 0 recorded, 1 missed (1 trial failed);
    saved 4,210 tokens ($0.0123)``."""
    r = recordings
    line = (
        f"eval recordings (--eval-record={r.mode}): "
        f"{r.replayed} replayed, {r.recorded} recorded, {r.missed} missed"
    )
    why = []
    if r.missed_trials:
        why.append(f"{r.missed_trials} trial{'s' if r.missed_trials > 1 else ''} failed")
    if r.refused:
        why.append(f"{r.refused} request{'s' if r.refused > 1 else ''} outside any trial not sent")
    if why:
        line += f" ({'; '.join(why)})"
    tokens = r.saved_input_tokens + r.saved_output_tokens
    if tokens:
        line += f"; saved {tokens:,} tokens" + ("" if r.saved_cost is None else f" ({dollars(r.saved_cost)})")
    elif r.saved_cost:
        line += f"; saved {dollars(r.saved_cost)}"
    return line


def gate_lines(experiments: Sequence[ExperimentReport]) -> list[str]:
    """Per gate, met or not: a line with the experiment, the metric, the value, the bound; then,
    indented, what the decision rests on (the interval, what the gate can detect)."""
    lines = []
    for experiment in experiments:
        for gate in experiment.gates:
            lines.append(_gate_line(experiment, gate))
            lines += [f"  {note}" for note in gate.notes]
    return [escape_control(line) for line in lines]


def verdict_counts(experiments: Sequence[ExperimentReport]) -> dict[str, int]:
    """What the eval verdict adds to pytest's last line ("1 passed, 1 eval gate not met in 0.2s"):
    the reasons, other than this session's test outcomes, why the session fails. Each key reads
    after its count, and starts with "eval" so that no tool parsing the line ("N failed") counts
    it as a test outcome."""
    unmet = sum(1 for e in experiments for gate in e.gates if not gate.met)
    earlier = sum(
        1
        for e in experiments
        if not e.settings.soft_trials()
        for t in e.trials
        if t.passed is False and not t.ran_this_session
    )
    # Pending trials fail only the gates of their experiment; without a gate they decide nothing.
    pending = sum(e.summary.pending for e in experiments if not e.gates_met)
    counts = {
        f"eval gate{'s' if unmet > 1 else ''} not met": unmet,
        f"eval trial{'s' if earlier > 1 else ''} failed earlier": earlier,
        f"eval trial{'s' if pending > 1 else ''} pending": pending,
    }
    return {key: count for key, count in counts.items() if count}


def _gate_line(experiment: ExperimentReport, gate: GateVerdict) -> str:
    what = gate.kind if gate.metric is None else f"{gate.kind} {gate.metric}"
    mode = " (strict)" if gate.mode == "strict" else ""
    return f"{'met' if gate.met else 'NOT MET'}: {experiment.name}: {what}{mode}: {gate.detail}"


def _metric_table(experiment: ExperimentReport) -> list[str]:
    metrics = experiment.summary.metrics
    if not metrics:
        return []
    gated = {g.metric: g.met for g in experiment.gates if g.kind == "fail_under"}
    interval = f"{level(experiment.settings.confidence)} interval"
    lines = [f"  {'metric':<{_TABLE_NAME}}   mean  {interval:<16}    min    max failed   pass  gate"]
    for name, m in metrics.items():
        gate = "" if name not in gated else ("ok" if gated[name] else "FAIL")
        lines.append(
            f"  {_cut(name, _TABLE_NAME):<{_TABLE_NAME}} {score(m.mean, 6)}  {bounds(m.interval):<16} "
            f"{score(m.min, 6)} {score(m.max, 6)} {m.failed:>6} {score(m.pass_rate, 6)}  {gate}".rstrip()
        )
    return lines


def _item_lines(experiment: ExperimentReport) -> list[str]:
    if experiment.trial_count <= 1:
        return []
    items = experiment.items
    passed = sum(1 for i in items if i.verdict == "passed")
    pending = sum(1 for i in items if i.verdict == "pending")
    required = experiment.settings.pass_threshold or experiment.trial_count
    line = f"  items: {passed} of {len(items)} passed ({required} of {experiment.trial_count} trials each)"
    lines = [line + (f", {pending} pending" if pending else "")]
    summary = experiment.summary
    if summary.item_pass_rate is not None:
        lines.append(f"    item pass rate {_interval(summary.item_pass_rate)}")
    if summary.pass_at_k:
        k = max(summary.pass_at_k, key=int)
        for name, value, interval in (
            ("pass@1", summary.pass_at_k["1"], summary.pass_at_k_interval.get("1")),
            (f"pass@{k}", summary.pass_at_k[k], summary.pass_at_k_interval.get(k)),
            (f"pass^{k}", summary.pass_hat_k[k], summary.pass_hat_k_interval.get(k)),
        ):
            lines.append(f"    {name:<8} {score(value)} {bounds(interval)}")
    for item in items:
        if item.verdict == "failed":
            lines.append(
                f"    item {item.dataset_item_id} failed: {item.passed} of {item.trials} trials passed"
            )
    return lines


def baseline_lines(experiment: ExperimentReport) -> list[str]:
    if experiment.baseline_note:
        return [f"  baseline: {experiment.baseline_note}"]
    baseline = experiment.baseline
    if baseline is None:
        return []
    lines = [f"  baseline {baseline.name} (experiment {baseline.experiment_id}):"]
    only_here, only_there = baseline.only_in_current, baseline.only_in_baseline
    # Means over different item sets would not compare: both are over the items both planned.
    lines.append(f"    compared over the {baseline.shared_items} item(s) both planned")
    if only_here:
        lines.append(f"    only in this experiment ({len(only_here)}): {_ids(only_here)}")
    if only_there:
        lines.append(f"    only in the baseline ({len(only_there)}): {_ids(only_there)}")
    for name, change in baseline.metrics.items():
        delta = "" if change.delta is None else f" ({signed(change.delta)})"
        before, after = score(change.baseline_mean, 6), score(change.current_mean, 6)
        lines.append(f"    {_cut(name):<{_NAME}} {before} -> {after}{delta}")
        if change.interval is not None:
            interval = change.interval
            lines.append(
                f"      change {bounds(interval, signed)} {level(interval.level)} paired, "
                f"{interval.items} item(s)"
            )
    lines += figure_lines(baseline.figures)
    lines.append(f"    regressions ({len(baseline.regressions)}): {_ids(baseline.regressions)}")
    lines.append(f"    fixes ({len(baseline.fixes)}): {_ids(baseline.fixes)}")
    if baseline.regressions:
        # On the items' verdicts, not the means the gates decide on: informational.
        lines.append(
            f"    as many regressions by chance: p={baseline.regressions_p_value:.3f} "
            "(exact one-sided test on the items' flips)"
        )
    return lines


def figure_lines(figures: dict[str, FigureChange]) -> list[str]:
    """Cost, tokens and latency against the baseline, as the metric rows, with which way is worse."""
    lines = []
    for name, change in figures.items():
        before, after, shown = figure_row(name, change.baseline, change.current, change.delta)
        moved = direction(change.delta, change.relative)
        delta = "" if change.delta is None else f" ({shown}, {moved})"
        floor = f"; a floor: {change.unpriced} span(s) unpriced" if change.unpriced else ""
        if floor:
            delta = f"{delta[:-1]}{floor})" if delta else f" ({floor[2:]})"
        lines.append(f"    {FIGURE_LABELS.get(name, name):<{_NAME}} {before:>6} -> {after}{delta}")
    return lines


def _interval(interval: ConfidenceInterval) -> str:
    return f"{score(interval.estimate)} {bounds(interval)} {level(interval.level)}, {interval.items} item(s)"


def _ids(ids: Sequence[str]) -> str:
    if not ids:
        return "none"
    shown = ", ".join(ids[:_LISTED])
    return shown + (f", ... and {len(ids) - _LISTED} more" if len(ids) > _LISTED else "")


def _cut(name: str, width: int = _NAME) -> str:
    name = escape_control(name)  # escaped before it is padded, so the columns stay aligned
    return name if len(name) <= width else name[: width - 1] + "~"


def write_summary(
    terminal: pytest.TerminalReporter,
    report: Report,
    resume_command: Callable[[str], str],
    *,
    resumed_as: str | None,
    unsaved_recordings: Sequence[str] = (),
    unsent: str | None = None,
) -> None:
    """The "eval summary" section, then "eval gates". ``resumed_as``: the --eval-resume value
    as given, when the session resumed; ``unsaved_recordings``, the recordings' files that could
    not be written; ``unsent``, what the store could not send."""
    experiments = report.experiments
    terminal.section("eval summary")
    if resumed_as is not None and not any(t.ran_this_session for e in experiments for t in e.trials):
        if not any(e.summary.pending for e in experiments):
            terminal.line(f"nothing pending: every planned trial of {resumed_as} is completed")
    for line in summary_lines(experiments, resume_command, resumed_as is not None):
        terminal.line(line)
    pending = sum(e.summary.pending for e in experiments)
    if pending and len(experiments) > 1 and report.run_id:
        terminal.line(f"resume all {pending} pending trials: {resume_command(report.run_id)}")
    _write_session_lines(terminal, report, unsaved_recordings, unsent)
    gates = gate_lines(experiments)
    if gates:
        terminal.section("eval gates")
        for line in gates:
            terminal.line(line, red=line.startswith("NOT MET"), green=line.startswith("met"))


def _write_session_lines(
    terminal: pytest.TerminalReporter, report: Report, unsaved_recordings: Sequence[str], unsent: str | None
) -> None:
    """What the session spent and saved, and what it could not send."""
    budget = [] if report.budget is None else budget_lines(report.budget)
    for line in budget + judge_cache_lines(report.judge_cache):
        terminal.line(line, yellow=line.startswith("eval budget reached"))
    for drift in report.judge_drift:
        terminal.line(judge_drift_line(drift), yellow=not drift.failed, red=drift.failed)
        if drift.failed:
            terminal.line(judge_drift_failure(drift, report.run_id), red=True)
    recordings = report.recordings
    if recordings is not None:
        terminal.line(
            recording_line(recordings), yellow=bool(recordings.missed), red=bool(recordings.refused)
        )
    for unsaved in unsaved_recordings:
        terminal.line(
            escape_control(
                f"eval recordings NOT saved: {unsaved}; what this session recorded for it is kept in "
                f"a journal, which the next session that records folds in"
            ),
            red=True,
        )
    if unsent:
        terminal.line(escape_control(unsent), yellow=True)
