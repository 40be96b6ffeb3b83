"""The self-contained HTML report (``--eval-html``): one file, no network, no external assets.

The aggregates, gates, baseline comparison and histograms are small, so they are rendered here as
static HTML. The items and their trials can number tens of thousands: they are embedded once as
JSON, a small script turns them into collapsed table rows, and builds an item's details only when
its row is opened, which keeps both the file and the page's DOM light. The A/B view of the
baseline comparison (an item per row, sorted by its score change) is built the same way.

A trial's span tree (what the app called, how long each call took, its tokens and cost, its
input and output) is embedded for as many trials as fit in ``html_data.SPAN_BUDGET`` characters,
the failed trials first, each input and output cut to ``SPAN_FIELD_CHARS``: a hundred thousand
trials with a few kilobytes of prompts each would otherwise make a file of gigabytes. A trial
left out names its trace, whose whole tree ``opik-eval show TRACE`` prints. ``html_data`` builds
what is embedded; this module the page.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from html import escape
from importlib.resources import files
from pathlib import Path

from pytest_opik_eval.files import write_atomically
from pytest_opik_eval.formatting import (
    FIGURE_LABELS,
    bounds,
    direction,
    dollars,
    duration,
    figure_row,
    level,
    percent,
    score,
    signed,
)
from pytest_opik_eval.options import resume_command
from pytest_opik_eval.reports.html_data import Items, Spans, experiment_data, script_json, span_trees
from pytest_opik_eval.reports.judge_lines import calibration_origin
from pytest_opik_eval.reports.session_lines import budget_lines, sentence
from pytest_opik_eval.reports.terminal import SOFT_FAILED
from pytest_opik_eval.verdict.model import (
    BudgetReport,
    ConfidenceInterval,
    CorrelationEstimate,
    ExperimentReport,
    FigureChange,
    GateVerdict,
    JudgeCalibration,
    KappaEstimate,
    Report,
)

_BINS = 10  # histogram bars per metric


def render_html(
    report: Report,
    items: Items,
    resume_command: Callable[[str], str] = resume_command,
    spans: Spans | None = None,
) -> str:
    """The whole report as one HTML page; ``items`` gives the dataset items shown in the details,
    ``resume_command(experiment_id)`` the command that runs an experiment's pending trials,
    ``spans`` the trials' spans, whose trees the trials' details show."""
    spans = spans or {}
    trees = span_trees(report, spans)
    data = {
        "experiments": [
            experiment_data(e, items.get(e.id, ()), spans.get(e.id, ()), trees.get(e.id, {}))
            for e in report.experiments
        ]
    }
    was_resumed = report.resumed is not None
    sections = "\n".join(_experiment_html(e, was_resumed, resume_command) for e in report.experiments)
    run = f"run {_code(report.run_id)}" if report.run_id else ""
    resumed = f" &middot; resumed {_code(report.resumed)}" if report.resumed else ""
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>pytest-opik-eval report</title>
<style>{_asset("report.css")}</style>
</head>
<body>
<header class="page">
<h1>pytest-opik-eval report</h1>
<p class="meta">{run}{resumed}</p>
<div class="toolbar">
<label><input type="checkbox" id="failures-only"> show failures only (failed or pending items)</label>
<input type="search" id="item-search" placeholder="filter items by id or input" aria-label="filter items">
</div>
</header>
<main>
{_budget_html(report.budget)}
{sections or '<p class="empty">No experiment was evaluated.</p>'}
</main>
<script type="application/json" id="report-data">{script_json(data)}</script>
<script>{_asset("report.js")}</script>
</body>
</html>
"""


def write_html(
    report: Report,
    items: Items,
    path: Path,
    resume_command: Callable[[str], str] = resume_command,
    spans: Spans | None = None,
) -> None:
    write_atomically(path, render_html(report, items, resume_command, spans))


def _budget_html(budget: BudgetReport | None) -> str:
    """``--eval-budget``, first, in the words of the other reports: a run the budget stopped is
    incomplete, whatever its experiments say, and the command that runs the rest."""
    if budget is None:
        return ""
    line, *resume = budget_lines(budget, lambda cmd: f'<code class="resume-command">{escape(cmd)}</code>')
    status = f'<p class="budget-line">{escape(line)}</p>'
    if not budget.reached:
        return f'<div class="budget">{status}</div>'
    return f'<div class="budget reached">{status}{"".join(f"<p>{sentence(r)}</p>" for r in resume)}</div>'


def _experiment_html(e: ExperimentReport, resumed: bool, resume_command: Callable[[str], str]) -> str:
    s = e.summary
    if not e.gates:
        badge = '<span class="badge neutral">no gates</span>'
    elif e.gates_met:
        badge = '<span class="badge ok">gates met</span>'
    else:
        badge = '<span class="badge bad">gates not met</span>'
    if s.pending:
        # Unfinished: whatever the gates say, the scores and the pass rate are of a part of it.
        badge = f'<span class="badge wait">{s.pending:,} pending</span> {badge}'
    of_completed = f" of the {s.completed:,} completed" if s.pending else ""
    # In the words of every report (reports.terminal.trial_verdicts): its own count, not "failed".
    soft_failed = (
        f', <span class="pending soft-failed" title="{escape(SOFT_FAILED)}">'
        f"{s.soft_failed:,} soft-failed</span>"
        if s.soft_failed
        else ""
    )
    soft = " &middot; soft: failing trials do not fail the session" if e.settings.soft else ""
    k = e.settings.pass_threshold
    k_of_n = f" &middot; an item passes with {k} passed trials" if k is not None else ""
    metric_heads = "".join(f"<th>{escape(name)} mean</th>" for name in s.metrics)
    return f"""<section class="experiment" data-experiment-id="{escape(e.id)}">
<h2>{escape(e.name)} {badge}</h2>
<p class="meta">test {_code(e.test)} &middot; experiment {_code(e.id)} &middot; run {_code(e.run_id)}
 &middot; dataset {_code(e.dataset.source)} ({e.dataset.items} items, version {_code(e.dataset.version)})</p>
<p class="counts">{s.trials:,} trials: <b>{s.completed:,}</b> completed
 (<span class="ok">{s.passed:,} passed</span>, <span class="bad">{s.failed:,} failed</span>{soft_failed}),
 <b class="trials-pending">{s.pending:,}</b> pending
 &middot; pass rate {percent(s.pass_rate)}{of_completed}{soft}{k_of_n}</p>
{_usage_html(e)}
{_resumed_html(e) if resumed else ""}
<div class="panels">
{_pending_html(e, resume_command)}
{_aggregates_html(e)}
{_gates_html(e)}
{_judges_html(e)}
{_self_agreement_html(e)}
{_baseline_html(e)}
<div class="panel"><h3>Score distributions</h3>
<div class="histograms">{"".join(_histogram_svg(e, name) for name in s.metrics)}</div></div>
</div>
{_ab_html(e)}
<h3>Items <span class="item-count"></span></h3>
<table class="items">
<thead><tr><th>item</th><th>verdict</th><th>passed</th>{metric_heads}<th>input</th></tr></thead>
<tbody></tbody>
</table>
</section>"""


def _usage_html(e: ExperimentReport) -> str:
    """The task latency (p50, p95) and the tokens and cost of the app's spans, then the judges'."""
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
        if totals is not None:
            cost = "unknown" if totals.cost is None else dollars(totals.cost)
            unpriced = sum(totals.unpriced.values())
            floor = f" ({unpriced:,} span(s) unpriced)" if unpriced else ""
            parts.append(
                f"{who}: {totals.prompt_tokens:,} tokens in / {totals.completion_tokens:,} out, "
                f"cost {cost}{floor}"
            )
    return f'<p class="usage">{" &middot; ".join(escape(part) for part in parts)}</p>' if parts else ""


def _resumed_html(e: ExperimentReport) -> str:
    """A resumed experiment keeps its id: say what this session reran."""
    rerun = [f"{t.dataset_item_id}#{t.trial}" for t in e.trials if t.ran_this_session]
    earlier = sum(1 for t in e.trials if t.status == "completed" and not t.ran_this_session)
    return (
        f'<div class="resumed"><p><span class="badge neutral">resumed</span> this session ran '
        f"<b>{len(rerun):,}</b> trial(s); {earlier:,} completed in earlier sessions</p>"
        f"{_id_list('rerun', 'Trials run by this session (item#trial)', rerun) if rerun else ''}</div>"
    )


def _pending_html(e: ExperimentReport, resume_command: Callable[[str], str]) -> str:
    """The trials that have not completed: how many, the scores they leave missing, and the
    command that runs them."""
    s = e.summary
    if not s.pending:
        return ""
    pending = [f"{t.dataset_item_id}#{t.trial}" for t in e.trials if t.status == "pending"]
    if s.metrics:
        rows = "".join(
            f'<tr data-metric="{escape(name)}"><td>{escape(name)}</td><td>{m.count + m.failed:,}</td>'
            f"<td>{s.trials - m.count - m.failed:,}</td></tr>"
            for name, m in s.metrics.items()
        )
        missing = (
            '<table class="missing-scores"><thead><tr><th>metric</th><th>scored</th><th>missing</th>'
            f"</tr></thead><tbody>{rows}</tbody></table>"
        )
    else:
        missing = '<p class="empty">No trial has completed: every score is missing.</p>'
    return f"""<div class="panel pending-trials"><h3>Pending: {s.pending:,} of {s.trials:,} trials</h3>
<p>Their scores are missing: the aggregates and the pass rate cover the completed trials only.</p>
{missing}
<p>Run them: <code class="resume-command">{escape(resume_command(e.id))}</code></p>
{_id_list("pending", "Pending trials (item#trial)", pending)}
</div>"""


def _aggregates_html(e: ExperimentReport) -> str:
    s = e.summary
    if not s.metrics:
        return '<div class="panel"><h3>Aggregates</h3><p class="empty">No scores yet.</p></div>'
    intervals = any(m.interval is not None for m in s.metrics.values())
    rows = "".join(
        f'<tr data-metric="{escape(name)}"><td>{escape(name)}</td><td>{score(m.mean)}</td>'
        + (f'<td class="interval">{bounds(m.interval)}</td>' if intervals else "")
        + f"<td>{score(m.min)}</td><td>{score(m.max)}</td><td>{m.failed}</td>"
        f"<td>{score(m.threshold)}</td><td>{percent(m.pass_rate)}</td></tr>"
        for name, m in s.metrics.items()
    )
    interval_head = f"<th>{level(e.settings.confidence)} interval</th>" if intervals else ""
    rates = ""
    if s.pass_rate_interval is not None:
        rates += f'<p class="pass-rate">trial pass rate {_estimate(s.pass_rate_interval)}</p>'
    if s.item_pass_rate is not None:
        required = e.settings.pass_threshold or e.trial_count
        rates += (
            f'<p class="item-pass-rate">items passing {required} of {e.trial_count} trials '
            f"{_estimate(s.item_pass_rate)}</p>"
        )
    return (
        '<div class="panel"><h3>Aggregates</h3><table class="aggregates"><thead><tr><th>metric</th>'
        f"<th>mean</th>{interval_head}<th>min</th><th>max</th><th>failed scores</th><th>threshold</th>"
        f"<th>pass rate</th></tr></thead><tbody>{rows}</tbody></table>{rates}{_pass_at_k_html(e)}</div>"
    )


def _pass_at_k_html(e: ExperimentReport) -> str:
    """With several trials per item: per k, the chance that one of k trials passes (pass@k) and
    that all k do (pass^k), each with its interval over the items."""
    s = e.summary
    if not s.pass_at_k:
        return ""
    rows = "".join(
        f'<tr data-k="{k}"><td>{k}</td><td>{score(s.pass_at_k[k])}</td>'
        f'<td class="interval">{bounds(s.pass_at_k_interval.get(k))}</td>'
        f"<td>{score(s.pass_hat_k.get(k))}</td>"
        f'<td class="interval">{bounds(s.pass_hat_k_interval.get(k))}</td></tr>'
        for k in sorted(s.pass_at_k, key=int)
    )
    interval = f"<th>{level(e.settings.confidence)} interval</th>"
    return (
        '<table class="pass-at-k"><thead><tr><th>k</th>'
        f'<th title="at least one of k trials passes">pass@k</th>{interval}'
        f'<th title="all k trials pass">pass^k</th>{interval}</tr></thead><tbody>{rows}</tbody></table>'
    )


def _gates_html(e: ExperimentReport) -> str:
    if not e.gates:
        return '<div class="panel"><h3>Gates</h3><p class="empty">No gate applies.</p></div>'
    return (
        f'<div class="panel"><h3>Gates</h3><ul class="gates">{"".join(map(_gate_html, e.gates))}</ul></div>'
    )


def _self_agreement_html(e: ExperimentReport) -> str:
    """Each judge sampled several times (judge_samples) against itself."""
    if not e.self_agreement:
        return ""
    rows = "".join(
        f'<tr data-score="{escape(a.score)}"><td>{escape(a.score)}</td><td>{a.samples}</td>'
        f"<td>{a.trials:,}</td><td>{'pass/fail' if a.threshold is None else f'{a.threshold:g}'}</td>"
        f"<td>{score(a.unanimous)}</td><td>{a.split:,}</td><td>{score(a.sd)}</td></tr>"
        for a in e.self_agreement
    )
    return f"""<div class="panel judge-samples"><h3>Judges against themselves</h3>
<table><thead><tr><th>score</th><th>samples</th><th>trials</th><th>threshold</th>
<th>unanimous</th><th>split</th><th>sd within a trial</th></tr></thead><tbody>{rows}</tbody></table></div>"""


def _judges_html(e: ExperimentReport) -> str:
    """Each labelled score's judge against the human labels (see verdict.calibration), and the
    experiment's pass rate for it as judged and as corrected for the judge's errors."""
    if not e.calibrations:
        return ""

    def cell(
        interval: ConfidenceInterval | KappaEstimate | CorrelationEstimate | None,
        show: Callable[[float | None], str] = score,
    ) -> str:
        if interval is None:
            return "-"
        if interval.low is None or interval.high is None:  # a kappa without its jackknife
            return f"{show(interval.estimate)} (no interval)"
        return f"{show(interval.estimate)} [{show(interval.low)}, {show(interval.high)}]"

    # A graded judge's figures against human scores, in columns of their own when one has them.
    graded = any(c.graded for c in e.calibrations)

    def graded_cells(c: JudgeCalibration) -> str:
        if not graded:
            return ""
        return (
            f"<td>{cell(c.weighted_kappa)}</td><td>{cell(c.correlation)}</td><td>{cell(c.bias, signed)}</td>"
        )

    rows = "".join(
        f'<tr data-score="{escape(c.score)}"><td>{escape(c.score)}</td>'
        f"<td>{_code(c.judge[:12]) if c.judge else 'not a judge'}</td><td>{c.items:,}</td>"
        f"<td>{cell(c.agreement)}</td><td>{cell(c.sensitivity)}</td><td>{cell(c.specificity)}</td>"
        f"<td>{cell(c.kappa)}</td><td>{cell(c.judged)}</td><td>{cell(c.corrected)}</td>{graded_cells(c)}"
        f"<td>{'-' if c.origin is None else escape(calibration_origin(c.origin))}</td></tr>"
        for c in e.calibrations
    )
    headings = "<th>weighted kappa</th><th>correlation</th><th>bias</th>" if graded else ""
    notes = "".join(f"<li>{escape(c.score)}: {escape(n)}</li>" for c in e.calibrations for n in c.notes)
    notes = f'<ul class="notes">{notes}</ul>' if notes else ""
    return f"""<div class="panel judges"><h3>Judges against human labels</h3>
<table><thead><tr><th>score</th><th>judge</th><th>labelled items</th><th>agreement</th>
<th>sensitivity</th><th>specificity</th><th>kappa</th><th>pass rate as judged</th>
<th>corrected</th>{headings}<th>labels from</th></tr></thead><tbody>{rows}</tbody></table>{notes}</div>"""


def _gate_html(g: GateVerdict) -> str:
    """A gate's card: the verdict and its sentence, then what it rests on: its interval drawn
    against the bound (flagged borderline when it holds the bound) and the notes in words."""
    borderline = (
        ' <span class="badge wait borderline" title="the interval holds the bound: the sample cannot tell '
        'on which side of it the truth is">borderline</span>'
        if g.borderline
        else ""
    )
    strict = ' <span class="badge neutral">strict</span>' if g.mode == "strict" else ""
    notes = "".join(f"<li>{escape(note)}</li>" for note in g.notes)
    notes = f'<ul class="notes">{notes}</ul>' if notes else ""
    return (
        f'<li class="gate {"met" if g.met else "unmet"}" data-kind="{g.kind}" '
        f'data-borderline="{str(g.borderline).lower()}">'
        f'<span class="badge {"ok" if g.met else "bad"}">{"met" if g.met else "unmet"}</span>'
        f"{borderline}{strict} "
        f"<b>{g.kind}</b>{' ' + escape(g.metric) if g.metric else ''}: {escape(g.detail)}"
        f"{_interval_svg(g)}{notes}</li>"
    )


def _interval_svg(g: GateVerdict) -> str:
    """The gate's interval as a bar with the estimate as a dot, and the bound as a dashed line:
    whether the bar crosses the line is the borderline question, seen at a glance."""
    interval = g.interval
    if interval is None or g.bound is None:
        return ""
    show = signed if g.kind == "max_regression" else score  # a change carries its sign
    points = (interval.low, interval.high, interval.estimate, g.bound)
    low, high = min(points), max(points)
    if g.kind != "max_regression" and 0.0 <= low and high <= 1.0:
        low, high = 0.0, 1.0  # a score or a rate: its whole range
    else:
        pad = (high - low) * 0.1 or 0.05
        low, high = low - pad, high + pad
    width, left, right = 240.0, 8.0, 232.0

    def x(value: float) -> float:
        return left + (value - low) / (high - low) * (right - left)

    label = f"{_estimate(interval, show)}; bound {show(g.bound)}"
    return (
        f'<svg class="gate-interval" viewBox="0 0 {width:g} 30" width="{width:g}" height="30" role="img" '
        f'aria-label="{escape(label)}"><title>{escape(label)}</title>'
        f'<line class="axis" x1="{left:g}" x2="{right:g}" y1="14" y2="14"/>'
        f'<line class="interval" x1="{x(interval.low):.1f}" x2="{x(interval.high):.1f}" y1="14" y2="14"/>'
        f'<circle class="estimate" cx="{x(interval.estimate):.1f}" cy="14" r="3.5"/>'
        f'<line class="bound" x1="{x(g.bound):.1f}" x2="{x(g.bound):.1f}" y1="4" y2="24"/>'
        f'<text x="{left:g}" y="29">{low:.3g}</text>'
        f'<text x="{right:g}" y="29" text-anchor="end">{high:.3g}</text></svg>'
    )


def _baseline_html(e: ExperimentReport) -> str:
    b = e.baseline
    if b is None:
        note = f'<p class="empty">{escape(e.baseline_note)}</p>' if e.baseline_note else ""
        return f'<div class="panel baseline"><h3>Baseline</h3>{note}</div>' if note else ""
    paired = any(d.interval is not None for d in b.metrics.values())
    rows = "".join(
        f'<tr data-metric="{escape(name)}"><td>{escape(name)}</td><td>{score(d.baseline_mean)}</td>'
        f'<td>{score(d.current_mean)}</td><td class="{_sign_class(d.delta)}">{signed(d.delta)}</td>'
        + (f'<td class="interval">{bounds(d.interval, signed)}</td><td>{d.items:,}</td>' if paired else "")
        + "</tr>"
        for name, d in b.metrics.items()
    )
    paired_heads = f"<th>{level(e.settings.confidence)} paired interval</th><th>items</th>" if paired else ""
    return f"""<div class="panel baseline"><h3>Baseline</h3>
<p class="meta">{escape(b.name)} &middot; experiment {_code(b.experiment_id)}
 &middot; run {_code(b.run_id)}</p>
<p class="shared-items">compared over the {b.shared_items:,} item(s) both planned</p>
<table><thead><tr><th>metric</th><th>baseline</th><th>current</th><th>delta</th>{paired_heads}</tr></thead>
<tbody>{rows}</tbody></table>
{_figures_html(b.figures)}
{_flips_html(b.regressions, b.fixes, b.regressions_p_value)}
{_id_list("only-current", "Only in this experiment", b.only_in_current) if b.only_in_current else ""}
{_id_list("only-baseline", "Only in the baseline", b.only_in_baseline) if b.only_in_baseline else ""}
{_id_list("regressions", "Regressions (passed in the baseline, fail now)", b.regressions)}
{_id_list("fixes", "Fixes (failed in the baseline, pass now)", b.fixes)}
</div>"""


def _figures_html(figures: dict[str, FigureChange]) -> str:
    """Cost, tokens and latency in both runs, over the same items; a rise, which is worse, in red."""
    if not figures:
        return ""
    rows = []
    for name, f in figures.items():
        before, after, change = figure_row(name, f.baseline, f.current, f.delta)
        moved = direction(f.delta, f.relative)
        change += f" ({moved})" if f.delta is not None else ""
        if f.unpriced:
            change += f" &middot; a floor: {f.unpriced} span(s) unpriced"
        css = "bad" if f.delta is not None and f.delta > 0 else "ok" if f.delta else ""
        rows.append(
            f'<tr data-figure="{escape(name)}"><td>{escape(FIGURE_LABELS.get(name, name))}</td>'
            f"<td>{before}</td><td>{after}</td>"
            f'<td class="{css}">{change}</td></tr>'
        )
    return (
        '<table class="figures" title="higher is worse"><thead><tr><th>cost and latency</th>'
        "<th>baseline</th><th>current</th><th>change (higher is worse)</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _flips_html(regressions: Sequence[str], fixes: Sequence[str], p_value: float) -> str:
    if not regressions and not fixes:
        return ""
    return (
        f'<p class="flips">{len(regressions):,} regression(s), {len(fixes):,} fix(es): as many '
        f"regressions by chance p={p_value:.3f} (exact one-sided test on the items' verdicts; the "
        "gates decide on the means)</p>"
    )


def _ab_html(e: ExperimentReport) -> str:
    """The A/B view: the items both runs planned, one row each (built by the script from the
    embedded data), in the order of their score change, worst first; flips marked."""
    b = e.baseline
    if b is None or not b.items:
        return ""
    metrics = list(b.metrics) or sorted({name for i in b.items for name in i.changes})
    heads = "".join(
        f'<th class="sortable" data-column="{index}" data-metric="{escape(name)}" '
        f'aria-sort="{"ascending" if index == 0 else "none"}" title="sort by this change">'
        f"{escape(name)} change</th>"
        for index, name in enumerate(metrics)
    )
    only = []
    if b.only_in_current:
        only.append(f"{len(b.only_in_current):,} only in this experiment")
    if b.only_in_baseline:
        only.append(f"{len(b.only_in_baseline):,} only in the baseline")
    summary = (
        f"{b.shared_items:,} item(s) in both runs{' (' + ', '.join(only) + ')' if only else ''} &middot; "
        f'<span class="bad">{len(b.regressions):,} regression(s)</span>, '
        f'<span class="ok">{len(b.fixes):,} fix(es)</span> &middot; as many regressions by chance '
        f"p={b.regressions_p_value:.3f}"
    )
    return f"""<div class="ab-view">
<h3>A/B against the baseline <span class="ab-count"></span></h3>
<p class="ab-summary">{summary}</p>
<label><input type="checkbox" class="flips-only"> show flips only (regressions and fixes)</label>
<table class="ab">
<thead><tr><th>item</th>{heads}<th>baseline</th><th>current</th><th>flip</th></tr></thead>
<tbody></tbody>
</table>
</div>"""


def _id_list(kind: str, title: str, ids: Sequence[str]) -> str:
    # Folded when long, so that a thousand regressions do not push the rest off the screen.
    opened = " open" if len(ids) <= 20 else ""
    entries = " ".join(_code(i) for i in ids) or "none"
    return f'<details class="{kind}"{opened}><summary>{title}: {len(ids)}</summary><p>{entries}</p></details>'


def _histogram_svg(e: ExperimentReport, metric: str) -> str:
    """Bars of the metric's scores over [0, 1] when they all fit there, else over [min, max]."""
    values = [
        s.value
        for t in e.trials
        if t.status == "completed"
        for s in t.scores
        if s.name == metric and not s.scoring_failed
    ]
    low, high = (0.0, 1.0) if all(0.0 <= v <= 1.0 for v in values) else (min(values), max(values))
    if low == high:  # one distinct value: centre it in a unit-wide range
        low, high = low - 0.5, high + 0.5
    counts = [0] * _BINS
    for v in values:
        counts[min(int((v - low) / (high - low) * _BINS), _BINS - 1)] += 1
    tallest = max(counts) or 1
    width, bottom, slot = 300, 104, 300 / _BINS  # bars stand on y = bottom, their counts above them
    bars = []
    for i, count in enumerate(counts):
        # at least 2 pixels, so that 10 failures among 10,000 scores still show
        h = max(count / tallest * 80, 2) if count else 0
        start = low + (high - low) * i / _BINS
        end = low + (high - low) * (i + 1) / _BINS
        bars.append(
            f'<rect x="{i * slot + 1:.1f}" y="{bottom - h:.1f}" width="{slot - 2:.1f}" height="{h:.1f}">'
            f"<title>{start:.3g} to {end:.3g}: {count}</title></rect>"
        )
        if count:
            x = (i + 0.5) * slot
            bars.append(f'<text x="{x:.1f}" y="{bottom - h - 3:.1f}" text-anchor="middle">{count}</text>')
    threshold = e.summary.metrics[metric].threshold
    line = ""
    if threshold is not None and low <= threshold <= high:
        x = (threshold - low) / (high - low) * width
        line = f'<line class="threshold" x1="{x:.1f}" x2="{x:.1f}" y1="10" y2="{bottom}"/>'
    failed = e.summary.metrics[metric].failed
    return f"""<figure class="histogram" data-metric="{escape(metric)}">
<svg viewBox="0 0 {width} {bottom + 16}" width="{width}" height="{bottom + 16}" role="img" \
aria-label="{escape(metric)} score histogram">{"".join(bars)}{line}
<line class="axis" x1="0" x2="{width}" y1="{bottom}" y2="{bottom}"/>
<text x="0" y="{bottom + 13}">{low:.3g}</text>
<text x="{width}" y="{bottom + 13}" text-anchor="end">{high:.3g}</text>
</svg>
<figcaption>{escape(metric)}: {len(values)} scores{f", {failed} failed" if failed else ""}\
{f" &middot; threshold {threshold:g}" if threshold is not None else ""}</figcaption>
</figure>"""


def _estimate(interval: ConfidenceInterval, show: Callable[[float | None], str] = score) -> str:
    """``0.750 [0.583, 0.917] 95%, 6 items``; a gate's bounds ``... one-sided 95%, 6 items``"""
    items = f"{interval.items:,} item{'s' if interval.items != 1 else ''}"
    sided = "one-sided " if interval.one_sided else ""
    return f"{show(interval.estimate)} {bounds(interval, show)} {sided}{level(interval.level)}, {items}"


def _code(text: str) -> str:
    return f"<code>{escape(text)}</code>"


def _asset(name: str) -> str:
    """The page's stylesheet or script, kept as files of their own (``reports/assets``) so that
    they read, lint and diff as CSS and JavaScript; inlined, the report stays one file."""
    return (files("pytest_opik_eval.reports") / "assets" / name).read_text(encoding="utf-8")


def _sign_class(value: float | None) -> str:
    return "bad" if value is not None and value < 0 else "ok" if value else ""
