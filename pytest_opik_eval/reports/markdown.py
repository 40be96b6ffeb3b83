"""The GitHub Actions job summary (``$GITHUB_STEP_SUMMARY``): per experiment its latency, tokens and
cost, its aggregates with their confidence intervals, gates with the evidence they rest on, changes
from the baseline and how to resume pending trials, in a few dozen lines."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path

from pytest_opik_eval.escaping import escape_control
from pytest_opik_eval.formatting import (
    FIGURE_LABELS,
    bounds,
    direction,
    dollars,
    duration,
    figure,
    figure_row,
    level,
    percent,
    score,
    signed,
)
from pytest_opik_eval.reports.judge_lines import (
    calibration_line,
    judge_drift_failure,
    judge_drift_line,
    self_agreement_line,
)
from pytest_opik_eval.reports.session_lines import batch_lines, budget_lines, recording_line, sentence
from pytest_opik_eval.reports.terminal import SOFT_FAILED, trial_verdicts
from pytest_opik_eval.verdict.model import (
    BatchReport,
    BudgetReport,
    ConfidenceInterval,
    ExperimentReport,
    FigureChange,
    GateVerdict,
    RecordingReport,
    Report,
)

# How many item ids or trials to name before saying "... and N more": a summary that lists a
# thousand failures is no longer a summary.
_LISTED = 10
# pass@k and pass^k rows at most: with more trials per item, the first k and the last.
_KS = 10


def step_summary(report: Report, resume_command: Callable[[str], str]) -> str:
    """Markdown for the job summary; ``resume_command(experiment_id)`` is the command that runs an
    experiment's pending trials."""
    blocks = ["\n".join(_experiment(e, resume_command)) for e in report.experiments]
    budget = _budget_lines(report.budget)
    recordings = _recording_lines(report.recordings) + _batch_lines(report.batches)
    # A judge that drifted: its scores moved without the app changing, which every gate reads.
    drift = [
        f"❌ {_inline(judge_drift_line(d))}\n\n{_inline(judge_drift_failure(d, report.run_id))}"
        if d.failed
        else f"⚠️ {_inline(judge_drift_line(d))}"
        for d in report.judge_drift
    ]
    return "\n\n".join([*budget, *recordings, *drift, *(blocks or ["No experiment was evaluated."])]) + "\n"


def _budget_lines(budget: BudgetReport | None) -> list[str]:
    """The budget first: a run it stopped is incomplete, whatever its experiments say."""
    if budget is None:
        return []
    line, *resume = budget_lines(budget, _code)
    if not budget.reached:
        return [f"💰 {line}"]
    return ["\n\n".join([f"💰 **{line}**", *map(sentence, resume)])]


def _recording_lines(recordings: RecordingReport | None) -> list[str]:
    """The app's recorded calls: a miss failed its trial, a strict replay proves no call was paid."""
    if recordings is None:
        return []
    line = recording_line(recordings)
    return [("📼 **" + line + "**") if recordings.missed else f"📼 {line}"]


def _batch_lines(batches: BatchReport | None) -> list[str]:
    """--eval-batch: what was collected, what waits, and what to run once the batches end."""
    if batches is None:
        return []
    return [f"⏳ **{line}**" if failed else f"⏳ {line}" for line, failed in batch_lines(batches, _code)]


def _experiment(e: ExperimentReport, resume_command: Callable[[str], str]) -> list[str]:
    s = e.summary
    items = {verdict: [i.dataset_item_id for i in e.items if i.verdict == verdict] for verdict in _ICONS}
    lines = [
        f"## {_icon(e, bool(items['failed']))} {_inline(e.name)}",
        "",
        f"{_code(e.test)} · experiment {_code(e.id)} · run {_code(e.run_id)}",
        "",
        f"{s.trials} trials: {s.completed} completed ({trial_verdicts(s)}), "
        f"{s.pending} pending · pass rate {percent(s.pass_rate)} · items: "
        + ", ".join(f"{len(ids)} {verdict}" for verdict, ids in items.items()),
    ]
    lines += _usage_lines(e) + _metric_table(e) + _pass_at_k(e) + _gate_lines(e) + _calibration_lines(e)
    lines += _self_agreement_lines(e)
    if items["failed"]:
        lines += ["", f"**Failed items ({len(items['failed'])}):** {_ids(items['failed'])}"]
    if s.soft_failed:
        soft = [f"{t.dataset_item_id}#{t.trial}" for t in e.trials if t.soft_failed]
        lines += ["", f"**{SOFT_FAILED.capitalize()} ({s.soft_failed}):** {_ids(soft)}"]
    return lines + _baseline_lines(e) + _pending_lines(e, resume_command)


def _usage_lines(e: ExperimentReport) -> list[str]:
    """The task latency (p50, p95) and the tokens and cost of the app's spans, then the
    judges': only what was measured or reported."""
    s = e.summary
    parts = []
    if s.latency is not None:
        parts.append(f"latency p50 {duration(s.latency.p50)}, p95 {duration(s.latency.p95)}")
    usage = s.usage
    whose = (
        ()
        if usage is None
        else (("app", usage.app), ("judges", usage.judge), ("simulated users", usage.simulator))
    )
    for who, totals in whose:
        if totals is None:
            continue
        cost = "unknown" if totals.cost is None else dollars(totals.cost)
        unpriced = sum(totals.unpriced.values())
        # A span with tokens and no known price leaves the cost a floor.
        floor = f" ({unpriced} span{'s' if unpriced != 1 else ''} unpriced)" if unpriced else ""
        tokens = f"{totals.prompt_tokens:,} tokens in / {totals.completion_tokens:,} out"
        parts.append(f"{who}: {tokens}, cost {cost}{floor}")
    return ["", " · ".join(parts)] if parts else []


def _metric_table(e: ExperimentReport) -> list[str]:
    if not e.summary.metrics:
        return []
    deltas = e.baseline.metrics if e.baseline is not None else None
    intervals = any(m.interval is not None for m in e.summary.metrics.values())
    head = ["metric", "mean"] + ([f"{level(e.settings.confidence)} interval"] if intervals else [])
    head += ["min", "max", "failed", "threshold", "pass rate"]
    if deltas is not None:
        head.append("Δ baseline")
    lines = ["", _row(head), _row(["---"] + ["---:"] * (len(head) - 1))]
    for name, m in e.summary.metrics.items():
        cells = [name, score(m.mean)] + ([bounds(m.interval)] if intervals else [])
        cells += [score(m.min), score(m.max), str(m.failed), score(m.threshold)]
        cells.append(percent(m.pass_rate))
        if deltas is not None:
            delta = deltas.get(name)
            cells.append(signed(delta.delta if delta is not None else None))
        lines.append(_row(cells))
    return lines


def _pass_at_k(e: ExperimentReport) -> list[str]:
    """With several trials per item: the share of items that passed k of n, and per k the chance
    that one of k trials passes (pass@k) and that all k do (pass^k), each with its interval."""
    s = e.summary
    if not s.pass_at_k:
        return []
    lines = [""]
    if s.item_pass_rate is not None:
        required = e.settings.pass_threshold or e.trial_count
        lines += [f"Items passing {required} of {e.trial_count} trials: {_estimate(s.item_pass_rate)}", ""]
    interval = f"{level(e.settings.confidence)} interval"
    lines += [_row(["k", "pass@k", interval, "pass^k", interval]), _row(["---:"] * 5)]
    ks = sorted(s.pass_at_k, key=int)
    if len(ks) > _KS:  # a hundred trials per item: the small k, and the last
        ks = [*ks[: _KS - 1], ks[-1]]
    return lines + [
        _row(
            [
                k,
                score(s.pass_at_k[k]),
                bounds(s.pass_at_k_interval.get(k)),
                score(s.pass_hat_k.get(k)),
                bounds(s.pass_hat_k_interval.get(k)),
            ]
        )
        for k in ks
    ]


def _gate_lines(e: ExperimentReport) -> list[str]:
    """A table of the gates' numbers, then each gate's decision and the evidence it rests on."""
    if not e.gates:
        return []
    lines = [
        "",
        f"**Gates {'met' if e.gates_met else 'not met'}**",
        "",
        _row(["verdict", "gate", "estimate", "one-sided bounds", "items", "bound"]),
        _row(["---", "---", "---:", "---:", "---:", "---:"]),
    ]
    for g in e.gates:
        show = _gate_figure(g)
        items = str(g.interval.items) if g.interval is not None else "-"
        tested = f" at {level(g.interval.level)}" if g.interval is not None else ""
        lines.append(
            _row(
                [
                    _verdict(g),
                    _gate_name(g),
                    show(g.value),
                    bounds(g.interval, show) + tested,
                    items,
                    show(g.bound),
                ]
            )
        )
    lines.append("")
    for g in e.gates:
        lines.append(f"- {'✅' if g.met else '❌'} {_gate_name(g)}: {_inline(g.detail)}")
        lines += [f"  - {_inline(note)}" for note in g.notes]
    return lines


def _calibration_lines(e: ExperimentReport) -> list[str]:
    """Each labelled score's judge against the human labels, as the terminal words it."""
    if not e.calibrations:
        return []
    found = [f"- {_inline(calibration_line(c, e.trial_count))}" for c in e.calibrations]
    return ["", "**Judges against human labels:**", "", *found]


def _self_agreement_lines(e: ExperimentReport) -> list[str]:
    """Each judge sampled several times against itself, as the terminal words it."""
    if not e.self_agreement:
        return []
    found = [f"- {_inline(self_agreement_line(a))}" for a in e.self_agreement]
    return ["", "**Judges against themselves (judge samples):**", "", *found]


def _gate_figure(g: GateVerdict) -> Callable[[float | None], str]:
    """How a gate's value and bound are written: a change against the baseline with its sign (as
    in the baseline section), a cost in dollars, a latency in seconds, else a score; a cost or a
    latency as precise as its difference from the bound needs ("$1.004" against "$1.00")."""
    if g.kind == "max_regression":
        return signed
    if g.kind.startswith("max_cost"):
        return lambda value: figure("cost", value, against=(g.value, g.bound))
    if g.kind == "max_latency":
        return lambda value: figure("latency", value, against=(g.value, g.bound))
    return score


def _verdict(g: GateVerdict) -> str:
    verdict = "✅ met" if g.met else "❌ not met"
    # borderline: the interval holds the bound, the sample cannot tell on which side the truth is
    return verdict + (" · ⚠️ borderline" if g.borderline else "")


def _gate_name(g: GateVerdict) -> str:
    metric = f" {_inline(g.metric)}" if g.metric else ""
    return f"`{g.kind}`{metric}" + (" (strict)" if g.mode == "strict" else "")


def _baseline_lines(e: ExperimentReport) -> list[str]:
    b = e.baseline
    if b is None:
        return ["", f"_No baseline comparison: {_inline(e.baseline_note)}_"] if e.baseline_note else []
    lines = [
        "",
        f"**Baseline** {_inline(b.name)} ({_code(b.experiment_id)}): "
        f"{len(b.regressions)} regression(s), {len(b.fixes)} fix(es), over the {b.shared_items} "
        "item(s) both planned",
    ]
    # with the paired intervals, a table of the changes (the metric table has their estimates)
    changes = list(b.metrics.items()) if any(d.interval is not None for d in b.metrics.values()) else []
    if changes:
        lines += [
            "",
            _row(
                [
                    "metric",
                    "baseline",
                    "current",
                    "change",
                    f"{level(e.settings.confidence)} paired interval",
                    "items",
                ]
            ),
            _row(["---"] + ["---:"] * 5),
        ]
        lines += [
            _row(
                [
                    name,
                    score(d.baseline_mean),
                    score(d.current_mean),
                    signed(d.delta),
                    bounds(d.interval, signed),
                    str(d.items),
                ]
            )
            for name, d in changes
        ]
    figures = _figure_rows(b.figures)
    if figures:
        lines += ["", *figures]
    bullets = []
    if b.regressions:
        bullets.append(
            f"- As many regressions by chance: p={b.regressions_p_value:.3f} (exact one-sided test on "
            "the items' verdicts; the gates decide on the means)"
        )
    if b.regressions:
        bullets.append(f"- Regressions: {_ids(b.regressions)}")
    if b.fixes:
        bullets.append(f"- Fixes: {_ids(b.fixes)}")
    if b.only_in_current:
        bullets.append(f"- Only in this experiment: {_ids(b.only_in_current)}")
    if b.only_in_baseline:
        bullets.append(f"- Only in the baseline: {_ids(b.only_in_baseline)}")
    # a list right after a table needs a blank line between them
    return lines + ([""] if (changes or figures) and bullets else []) + bullets


def _figure_rows(figures: dict[str, FigureChange]) -> list[str]:
    """Cost, tokens and latency in both runs: higher is worse, and a rise is flagged."""
    if not figures:
        return []
    lines = [_row(["figure", "baseline", "current", "change", "direction"]), _row(["---"] + ["---:"] * 4)]
    for name, f in figures.items():
        moved = direction(f.delta, f.relative)
        if f.delta is not None and f.delta > 0:
            moved += " ⚠️"
        if f.unpriced:
            moved += f" (a floor: {f.unpriced} span(s) unpriced)"
        lines.append(
            _row([FIGURE_LABELS.get(name, name), *figure_row(name, f.baseline, f.current, f.delta), moved])
        )
    return lines


def _pending_lines(e: ExperimentReport, resume_command: Callable[[str], str]) -> list[str]:
    if not e.summary.pending:
        return []
    pending = [f"{t.dataset_item_id}#{t.trial}" for t in e.trials if t.status == "pending"]
    return [
        "",
        f"⏳ **{e.summary.pending} trial(s) pending:** {_ids(pending)}",
        "",
        f"Resume them with {_code(resume_command(e.id))}",
    ]


_ICONS = {"passed": "✅", "failed": "❌", "pending": "⏳"}


def _icon(e: ExperimentReport, items_failed: bool) -> str:
    # Failed items fail the session unless it is soft, where only the gates decide.
    if not e.gates_met or (items_failed and not e.settings.soft):
        return _ICONS["failed"]
    return _ICONS["pending"] if e.summary.pending else _ICONS["passed"]


def _estimate(interval: ConfidenceInterval) -> str:
    return f"{score(interval.estimate)} {bounds(interval)} {level(interval.level)}, {interval.items} item(s)"


def _row(cells: Sequence[str]) -> str:
    # An unescaped "|" would split a cell in two; GitHub honours "\|" even inside code spans.
    return "| " + " | ".join(_inline(c).replace("|", "\\|") for c in cells) + " |"


def _ids(ids: Sequence[str]) -> str:
    listed = ", ".join(_code(i) for i in ids[:_LISTED])
    return listed + (f" ... and {len(ids) - _LISTED} more" if len(ids) > _LISTED else "")


def _code(text: str) -> str:
    """A code span that survives backticks in the text: its fence is longer than any run of them."""
    text = _inline(text)
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    pad = " " if fence != "`" else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _inline(text: str) -> str:
    # A line break would end a table row or a list item early; other control characters are
    # escaped, as everywhere data is shown.
    return escape_control(" ".join(text.split()))


def append_step_summary(path: Path, report: Report, resume_command: Callable[[str], str]) -> None:
    """Add the summary to the job summary's file, which each step of a job appends to."""
    with open(path, "a", encoding="utf-8") as file:
        file.write(step_summary(report, resume_command) + "\n")
