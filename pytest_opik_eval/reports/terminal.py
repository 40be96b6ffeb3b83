"""The eval summary as text: one compact section per experiment, then the session's lines
(``session_lines``), then the gate verdicts. The judges' lines are ``judge_lines``'.

The metric table stays within 80 columns whatever the number of metrics (one row per metric, long
names cut); lines that carry ids, a gate's detail or a command are not wrapped, so that they can be
copied whole.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

import pytest

from pytest_opik_eval.escaping import escape_control
from pytest_opik_eval.formatting import (
    FIGURE_LABELS,
    bounds,
    direction,
    dollars,
    duration,
    figure_row,
    level,
    score,
    signed,
)
from pytest_opik_eval.reports.judge_lines import (
    calibration_lines,
    judge_drift_failure,
    judge_drift_line,
    self_agreement_line,
)
from pytest_opik_eval.reports.session_lines import (
    batch_lines,
    budget_lines,
    judge_cache_lines,
    recording_line,
)
from pytest_opik_eval.verdict.model import (
    ConfidenceInterval,
    ExperimentReport,
    ExperimentSummary,
    FigureChange,
    GateVerdict,
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


def trial_verdicts(summary: ExperimentSummary) -> str:
    """The completed trials by verdict, as every report counts them: ``6 passed, 1 failed``, and
    ``, 2 soft-failed`` when some are."""
    s = summary
    return f"{s.passed} passed, {s.failed} failed" + (
        f", {s.soft_failed} soft-failed" if s.soft_failed else ""
    )


def cost_lines(summary: ExperimentSummary) -> list[str]:
    """The task latency (p50, p95), the app's tokens and cost, then the judges' and the simulated
    users' (the parts that were measured or reported): one line within 80 columns, or as many as
    that takes."""
    parts = []
    if summary.latency is not None:
        parts.append(f"latency p50 {duration(summary.latency.p50)}  p95 {duration(summary.latency.p95)}")
    usage = summary.usage
    if usage is not None and usage.app is not None:
        parts += _usage_parts(usage.app)
    lines = _fill(parts, "  ")
    if usage is not None and usage.judge is not None:
        lines += _fill(["judges:", *_usage_parts(usage.judge)], "  ")
    if usage is not None and usage.simulator is not None:
        lines += _fill(["simulated users:", *_usage_parts(usage.simulator)], "  ")
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
    if report.batches is not None:
        for line, failed in batch_lines(report.batches):
            terminal.line(escape_control(line), yellow=not failed, red=failed)
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
