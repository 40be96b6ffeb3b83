"""Eval results in pytest's JUnit XML (``--junitxml``): each trial's scores are properties of its
test case (added by the trial), each experiment's aggregates and gates properties of the suite.

A confidence interval is one property, ``LOW..HIGH@LEVEL`` (``0.583333..0.916667@95%``): both ends
in one value that a person reads at a glance in a CI page and a script splits on ``..`` and
``@``. Its name is the estimate's with ``.ci`` added (``eval.qa.equals_metric.mean.ci``).

Latency is in seconds (``eval.qa.latency.p95``), cost in USD (``eval.qa.usage.app.cost``), written
with the digits the other reports show (``0.000081``, ``12.35``).
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from pytest_opik_eval._compat import junit_suite_property_recorder
from pytest_opik_eval.escaping import escape_control, property_key
from pytest_opik_eval.formatting import level, plain_number
from pytest_opik_eval.verdict.model import (
    BudgetReport,
    ConfidenceInterval,
    CorrelationEstimate,
    ExperimentReport,
    ExperimentSummary,
    JudgeCalibration,
    JudgeDrift,
    JudgeSelfAgreement,
    KappaEstimate,
    Report,
)

PREFIX = "eval."


def report_properties(report: Report) -> list[tuple[str, str]]:
    """The suite's properties: each experiment's, then the budget's, then the judges' drift."""
    return (
        suite_properties(report.experiments)
        + budget_properties(report.budget)
        + drift_properties(report.judge_drift)
    )


def suite_properties(experiments: Sequence[ExperimentReport]) -> list[tuple[str, str]]:
    properties = []
    for e in experiments:
        base = f"{PREFIX}{property_key(e.name)}."
        s = e.summary
        properties += [
            (base + "experiment_id", e.id),
            (base + "trials", str(s.trials)),
            (base + "completed", str(s.completed)),
            (base + "pending", str(s.pending)),
            (base + "pass_rate", plain_number(s.pass_rate)),
            *_interval(base + "pass_rate", s.pass_rate_interval),
            (base + "gates_met", str(e.gates_met).lower()),
        ]
        if s.item_pass_rate is not None:  # k of n, with several trials per item
            properties.append((base + "item_pass_rate", plain_number(s.item_pass_rate.estimate)))
            properties += _interval(base + "item_pass_rate", s.item_pass_rate)
        for k in s.pass_at_k:
            properties.append((f"{base}pass_at_{k}", plain_number(s.pass_at_k[k])))
            properties += _interval(f"{base}pass_at_{k}", s.pass_at_k_interval.get(k))
            if k in s.pass_hat_k:
                properties.append((f"{base}pass_hat_{k}", plain_number(s.pass_hat_k[k])))
                properties += _interval(f"{base}pass_hat_{k}", s.pass_hat_k_interval.get(k))
        for metric, m in s.metrics.items():
            name = property_key(metric)
            properties += [
                (f"{base}{name}.mean", plain_number(m.mean)),
                *_interval(f"{base}{name}.mean", m.interval),
                (f"{base}{name}.min", plain_number(m.min)),
                (f"{base}{name}.max", plain_number(m.max)),
                (f"{base}{name}.failed", str(m.failed)),
            ]
        properties += _usage_properties(base, s)
        for gate in e.gates:
            name = f"{base}gate.{gate.kind}" + (f".{property_key(gate.metric)}" if gate.metric else "")
            # "met: " or "not met: " and the decision first, as before; then what it rests on.
            value = ("met: " if gate.met else "not met: ") + "; ".join([gate.detail, *gate.notes])
            properties.append((name, value))
        properties += _calibration_properties(base, e.calibrations)
        properties += _self_agreement_properties(base, e.self_agreement)
        if e.baseline is not None:
            b = e.baseline
            properties += [
                (base + "baseline.experiment_id", b.experiment_id),
                (base + "baseline.shared_items", str(b.shared_items)),
                (base + "baseline.regressions", str(len(b.regressions))),
                (base + "baseline.fixes", str(len(b.fixes))),
                (base + "baseline.regressions_p_value", plain_number(b.regressions_p_value)),
            ]
            for metric, delta in b.metrics.items():
                name = f"{base}baseline.{property_key(metric)}.delta"
                properties.append((name, plain_number(delta.delta)))
                properties += _interval(name, delta.interval)
            for name, change in b.figures.items():  # cost, tokens, latency: higher is worse
                moved = plain_number(change.delta)
                properties.append((f"{base}baseline.{name}.delta", moved))
    # Gate details carry data; pytest escapes only what XML forbids in values, so an ESC in one
    # would make the file unreadable. The names' data went through property_key.
    return [(name, escape_control(value)) for name, value in properties]


def budget_properties(budget: BudgetReport | None) -> list[tuple[str, str]]:
    """``--eval-budget``: the session's budget and spend (USD or tokens), and the trials it kept
    from starting."""
    if budget is None:
        return []
    limit, spent = plain_number(budget.limit), plain_number(budget.spent)
    return [
        ("eval.budget.unit", budget.unit),
        ("eval.budget.limit", limit),
        ("eval.budget.spent", spent),
        ("eval.budget.reached", str(budget.reached).lower()),
        ("eval.budget.not_started", str(budget.not_started)),
    ]


def drift_properties(drifts: Sequence[JudgeDrift]) -> list[tuple[str, str]]:
    """Each judge whose verdicts changed since its calibration, by score: how many of the
    labelled items changed, and whether that is beyond --eval-max-judge-drift."""
    properties = []
    for drift in drifts:
        base = f"{PREFIX}judge_drift.{property_key(drift.score)}."
        properties += [
            (base + "changed", str(drift.changed)),
            (base + "items", str(drift.items)),
            (base + "p_value", plain_number(drift.p_value)),
        ]
        if drift.bound is not None:
            properties += [
                (base + "bound", plain_number(drift.bound)),
                (base + "failed", str(drift.failed).lower()),
            ]
    return properties


def add_suite_properties(config: pytest.Config, properties: Sequence[tuple[str, str]]) -> None:
    """Add them to the JUnit XML being written, if any; call before junitxml's sessionfinish."""
    record = junit_suite_property_recorder(config)
    if record is not None:
        for name, value in properties:
            record(name, value)


def _usage_properties(base: str, s: ExperimentSummary) -> list[tuple[str, str]]:
    """The task latency in seconds (p50, p95, max) and the tokens and USD cost that the app's
    spans and the judges' reported, apart; only what was measured or reported."""
    properties = []
    if s.latency is not None:
        properties += [
            (base + "latency.p50", plain_number(s.latency.p50)),
            (base + "latency.p95", plain_number(s.latency.p95)),
            (base + "latency.max", plain_number(s.latency.max)),
        ]
    usage = s.usage
    whose = (
        () if usage is None else (("app", usage.app), ("judge", usage.judge), ("simulator", usage.simulator))
    )
    for who, totals in whose:
        if totals is None:
            continue
        name = f"{base}usage.{who}."
        properties += [
            (name + "prompt_tokens", str(totals.prompt_tokens)),
            (name + "completion_tokens", str(totals.completion_tokens)),
            (name + "total_tokens", str(totals.total_tokens)),
        ]
        if totals.cost is not None:
            properties.append((name + "cost", plain_number(totals.cost)))
        if totals.unpriced:  # the cost is then a floor
            properties.append((name + "unpriced_spans", str(sum(totals.unpriced.values()))))
    return properties


def _calibration_properties(base: str, calibrations: Sequence[JudgeCalibration]) -> list[tuple[str, str]]:
    """Each judge against the items' human labels: its items and trials, and each figure it has
    (``eval.qa.labels.correctness.kappa`` and ``.kappa.ci``), the experiment's pass rate as
    judged and corrected among them, and a graded judge's ``weighted_kappa``, ``correlation``
    and ``bias`` against human scores; where its labels came from (``.origin``: own, session or
    stored, ``.experiment``, ``.run_id``), and a stored calibration's ``.created_at`` and
    ``.age_days`` at the session's clock."""
    properties = []
    for c in calibrations:
        name = f"{base}labels.{property_key(c.score)}"
        properties += [(name + ".items", str(c.items)), (name + ".trials", str(c.trials))]
        origin = c.origin
        if origin is not None:
            properties += [
                (name + ".origin", origin.kind),
                (name + ".experiment", origin.experiment),
                (name + ".run_id", origin.run_id),
            ]
            if origin.created_at is not None:
                properties.append((name + ".created_at", origin.created_at))
            if origin.age_days is not None:
                properties.append((name + ".age_days", plain_number(origin.age_days)))
        for figure, found in (
            ("agreement", c.agreement),
            ("sensitivity", c.sensitivity),
            ("specificity", c.specificity),
            ("kappa", c.kappa),
            ("judged", c.judged),
            ("corrected", c.corrected),
            ("weighted_kappa", c.weighted_kappa),
            ("correlation", c.correlation),
            ("bias", c.bias),
        ):
            if found is not None:
                properties.append((f"{name}.{figure}", plain_number(found.estimate)))
                properties += _interval(f"{name}.{figure}", found)
    return properties


def _self_agreement_properties(base: str, agreements: Sequence[JudgeSelfAgreement]) -> list[tuple[str, str]]:
    """Each judge sampled several times against itself (``eval.qa.judge_samples.correctness.sd``)."""
    properties = []
    for a in agreements:
        name = f"{base}judge_samples.{property_key(a.score)}"
        properties += [
            (name + ".samples", str(a.samples)),
            (name + ".trials", str(a.trials)),
            (name + ".unanimous", plain_number(a.unanimous)),
            (name + ".split", str(a.split)),
            (name + ".sd", plain_number(a.sd)),
        ]
    return properties


def _interval(
    name: str, interval: ConfidenceInterval | KappaEstimate | CorrelationEstimate | None
) -> list[tuple[str, str]]:
    if interval is None or interval.low is None or interval.high is None:
        return []
    return [
        (name + ".ci", f"{plain_number(interval.low)}..{plain_number(interval.high)}@{level(interval.level)}")
    ]
