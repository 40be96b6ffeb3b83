"""The GitHub Actions job summary (``$GITHUB_STEP_SUMMARY``): per experiment its aggregates,
gates, changes from the baseline and how to resume pending trials, in a few dozen lines."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from pytest_opik_eval.escaping import escape_control
from pytest_opik_eval.formatting import percent, score, signed
from pytest_opik_eval.verdict.model import ExperimentReport, Report

# How many item ids or trials to name before saying "... and N more": a summary that lists a
# thousand failures is no longer a summary.
_LISTED = 10


def step_summary(report: Report, resume_command: Callable[[str], str]) -> str:
    """Markdown for the job summary; ``resume_command(experiment_id)`` is the command that runs an
    experiment's pending trials."""
    blocks = ["\n".join(_experiment(e, resume_command)) for e in report.experiments]
    return "\n\n".join(blocks or ["No experiment was evaluated."]) + "\n"


def _experiment(e: ExperimentReport, resume_command: Callable[[str], str]) -> list[str]:
    s = e.summary
    items = {verdict: [i.dataset_item_id for i in e.items if i.verdict == verdict] for verdict in _ICONS}
    lines = [
        f"## {_icon(e, bool(items['failed']))} {_inline(e.name)}",
        "",
        f"{_code(e.test)} · experiment {_code(e.id)} · run {_code(e.run_id)}",
        "",
        f"{s.trials} trials: {s.completed} completed ({s.passed} passed, {s.failed} failed), "
        f"{s.pending} pending · pass rate {percent(s.pass_rate)} · items: "
        + ", ".join(f"{len(ids)} {verdict}" for verdict, ids in items.items()),
    ]
    lines += _metric_table(e) + _gate_lines(e)
    if items["failed"]:
        lines += ["", f"**Failed items ({len(items['failed'])}):** {_ids(items['failed'])}"]
    return lines + _baseline_lines(e) + _pending_lines(e, resume_command)


def _metric_table(e: ExperimentReport) -> list[str]:
    if not e.summary.metrics:
        return []
    deltas = e.baseline.metrics if e.baseline is not None else None
    head = ["metric", "mean", "min", "max", "failed", "threshold", "pass rate"]
    if deltas is not None:
        head.append("Δ baseline")
    lines = ["", _row(head), _row(["---"] + ["---:"] * (len(head) - 1))]
    for name, m in e.summary.metrics.items():
        cells = [name, score(m.mean), score(m.min), score(m.max), str(m.failed), score(m.threshold)]
        cells.append(percent(m.pass_rate))
        if deltas is not None:
            delta = deltas.get(name)
            cells.append(signed(delta.delta if delta is not None else None))
        lines.append(_row(cells))
    return lines


def _gate_lines(e: ExperimentReport) -> list[str]:
    if not e.gates:
        return []
    lines = ["", f"**Gates {'met' if e.gates_met else 'not met'}**", ""]
    for g in e.gates:
        metric = f" {_inline(g.metric)}" if g.metric else ""
        lines.append(f"- {'✅' if g.met else '❌'} `{g.kind}`{metric}: {_inline(g.detail)}")
    return lines


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
    if b.regressions:
        lines.append(f"- Regressions: {_ids(b.regressions)}")
    if b.fixes:
        lines.append(f"- Fixes: {_ids(b.fixes)}")
    if b.only_in_current:
        lines.append(f"- Only in this experiment: {_ids(b.only_in_current)}")
    if b.only_in_baseline:
        lines.append(f"- Only in the baseline: {_ids(b.only_in_baseline)}")
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
