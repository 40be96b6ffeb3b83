"""The judges' lines, as every report words them: each judge against the items' human labels
(agreement, sensitivity, specificity, kappa; a graded judge's weighted kappa, correlation and
bias; the pass rate as judged and as corrected, and where the labels came from), a judge
sampled several times against itself, and a judge's drift from its stored calibration."""

from __future__ import annotations

import shlex
from pathlib import Path

from pytest_opik_eval.escaping import escape_control
from pytest_opik_eval.formatting import ago, bounds, score, signed
from pytest_opik_eval.verdict.model import (
    CalibrationOrigin,
    ConfidenceInterval,
    ExperimentReport,
    JudgeCalibration,
    JudgeDrift,
    JudgeSelfAgreement,
)


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


def self_agreement_line(found: JudgeSelfAgreement) -> str:
    """``judge (3 samples x 20 trials, threshold 0.5): unanimous in 0.850 of trials (3 split),
    sd within a trial 0.120``: the judge against itself."""
    threshold = "pass/fail" if found.threshold is None else f"threshold {found.threshold:g}"
    trials = f"{found.trials} trial{'s' if found.trials != 1 else ''}"
    return (
        f"{found.score} ({found.samples} samples x {trials}, {threshold}): unanimous in "
        f"{score(found.unanimous)} of trials ({found.split} split), sd within a trial {score(found.sd)}"
    )


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
