"""The report of a session's experiments: the JSON report's schema (``results`` computes it
from the store).

The published JSON Schema (``schema/eval-report.schema.json``) is generated from these models
by ``python -m pytest_opik_eval.verdict.model``; a test keeps the two in step.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

# Usage and UsageTotals live with the store, which keeps each trial's usage summed with its spans.
from pytest_opik_eval.store.records import GateMode, GateSettings, ScoreRecord
from pytest_opik_eval.store.records import Usage as Usage
from pytest_opik_eval.store.records import UsageTotals as UsageTotals

SCHEMA_VERSION: Literal[7] = 7


class _Report(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Latency(_Report):
    """Wall time, in seconds, of the task (None when it raised) and of each metric, by name."""

    task_seconds: float | None = None
    metric_seconds: dict[str, float] = {}


class TrialReport(_Report):
    dataset_item_id: str
    trial: int
    node_id: str
    status: Literal["completed", "pending"]
    ran_this_session: bool
    attempts: int
    output: dict[str, Any] | None
    passed: bool | None
    scores: list[ScoreRecord]
    # Missed its thresholds (passed is false) where that does not fail the session by itself:
    # --eval-soft, or pass_threshold (see GateSettings.soft_trials). Every report says
    # "soft-failed", and the JUnit XML marks its test case skipped.
    soft_failed: bool = False
    latency: Latency | None = None  # None: not measured (a store that keeps no timings)
    usage: Usage | None = None  # None: the attempt has no spans with usage or cost


class ConfidenceInterval(_Report):
    """An estimate with its confidence interval. The item is the unit: an item's trials are one
    observation (their mean), so ``items`` is the sample size. Two-sided at ``level``, or, with
    ``one_sided``, each end a one-sided bound at ``level`` (what a gate's one-sided test uses)."""

    estimate: float  # the mean over items of each item's mean
    low: float
    high: float
    level: float  # 0.95 for a 95% interval
    items: int
    # The score method: the bound is the furthest mean that the score test against the most
    # likely population with that mean (on the values seen and the scale's ends) does not
    # reject, with Student's t on n - 1 degrees of freedom (Wilson's bound for pass/fail items,
    # Tango's for pass/fail differences). "corrected": a pass rate corrected for a judge's errors
    # against human labels, its bounds carrying the labels' sampling error (verdict/correction.py).
    # "t": Student's t interval over items (a graded judge's bias against human scores).
    method: Literal["score", "corrected", "t"] = "score"
    one_sided: bool = False

    def straddles(self, bound: float) -> bool:
        """Whether ``bound`` lies inside the interval: the data cannot tell on which side of it
        the true value is (a "borderline" result). A bound at an end of the interval does not:
        an estimate of 1.0 against a bound of 1 is as close as the data can come."""
        return self.low < bound < self.high


class MetricSummary(_Report):
    # The mean over items of each item's mean over its scores (the mean of the scores when every
    # item has as many); None when every score of the metric failed.
    mean: float | None
    min: float | None
    max: float | None
    count: int  # scores that did not fail
    failed: int  # scores with scoring_failed
    threshold: float | None  # the per-trial threshold in force, if any
    pass_rate: float | None  # share of the scores that met the threshold (failed scores miss it)
    interval: ConfidenceInterval | None = None  # of the mean, over the items with a score


class LatencySummary(_Report):
    """The task latency over the trials that measured it (nearest-rank percentiles)."""

    trials: int
    p50: float
    p95: float
    max: float


class ExperimentSummary(_Report):
    trials: int
    completed: int
    pending: int
    passed: int
    failed: int  # completed trials that missed their thresholds, and failed the session
    # The mean over items of each item's passed / completed trials (passed / completed when every
    # item has as many completed trials).
    pass_rate: float | None
    metrics: dict[str, MetricSummary]
    # completed trials that missed their thresholds where that does not fail the session by
    # itself (passed + failed + soft_failed = completed)
    soft_failed: int = 0
    pass_rate_interval: ConfidenceInterval | None = None  # of pass_rate, the item as the unit
    # With several trials per item: the share of items whose k-of-n verdict passed, and per k
    # (from 1 to the trials per item) pass@k, the chance that at least one of k trials passes,
    # and pass^k, the chance that all k pass, averaged over the items with no trial pending.
    item_pass_rate: ConfidenceInterval | None = None
    pass_at_k: dict[str, float] = {}
    pass_hat_k: dict[str, float] = {}
    pass_at_k_interval: dict[str, ConfidenceInterval] = {}  # per k, over the items, as pass_at_k
    pass_hat_k_interval: dict[str, ConfidenceInterval] = {}
    latency: LatencySummary | None = None  # None: no trial measured its task
    usage: Usage | None = None  # the trials' usage summed; None: no trial had any


ItemStatus = Literal["passed", "failed", "pending"]
GateKind = Literal[
    "fail_under",
    "min_pass_rate",
    "items",
    "max_regression",
    "max_cost_per_item",
    "max_cost_per_run",
    "max_latency",
    "pending",
]


# An item's verdict over its trials. A dataclass, not a model: one is built per item at every
# session's end (100,000 for a large experiment), for the summary and the gates as for the
# reports, and a model costs ten times as much to build; pydantic writes, reads and describes it
# in the JSON Schema as it would a model (no docstring: it would enter the schema). Not frozen:
# a frozen one sets each field through object.__setattr__, four times the cost (75 ms for
# 100,000); nothing assigns a field after it is built.
@dataclass(slots=True)
class ItemVerdict:
    __pydantic_config__ = ConfigDict(extra="forbid")

    dataset_item_id: str
    trials: int
    passed: int
    pending: int
    required: int  # trials that must pass: pass_threshold, or all of them
    verdict: ItemStatus


class GateVerdict(_Report):
    kind: GateKind
    metric: str | None
    value: float | None
    bound: float | None
    met: bool
    detail: str  # the decision in a sentence
    # What the decision rests on, one line each: the interval, what the gate can detect, how
    # many items would settle a close call.
    notes: list[str] = []
    mode: GateMode = "normal"
    # Score gates: the one-sided bounds the decision used (one_sided, at the tested level).
    interval: ConfidenceInterval | None = None
    # The bounds hold the bound: the data cannot tell on which side of it the truth lies. A gate
    # that strict mode passes, or normal mode fails on a regression, is never borderline.
    borderline: bool = False
    # The one-sided p-value decided on, and for normal-mode regression gates Holm-adjusted over
    # every such gate of the session ("family" of them; the level was divided by
    # "adjusted_for" at the step that decided this one, and "p_value_unadjusted" is before).
    p_value: float | None = None
    p_value_unadjusted: float | None = None
    # Whether the gate decides on a one-sided test (its p-values and interval): the score gates,
    # in either mode. The count, cost, latency and pending gates compare a figure with their
    # bound, with no test: false.
    one_sided: bool = False
    adjusted_for: int = 1
    family: int = 1
    # Regression gates: the exact sign-flip test that nothing changed (normal mode fails only
    # when it, too, is below the level).
    p_chance: float | None = None
    # Regression gates, from the design (items, trials, and the baseline's spread): the drop
    # normal mode catches with 80% power (None: no drop the scale allows); and the items that
    # would catch a drop of twice DELTA (normal mode), or show a drop below DELTA when there is
    # none (strict), with 80% chance, at the same trials (None: not within 100,000).
    detectable_drop: float | None = None
    items_needed: int | None = None
    # fail_under on a judge's pass rate corrected for its errors against human labels: "value" is
    # the corrected rate, and this what it was corrected from.
    correction: GateCorrection | None = None


class GateCorrection(_Report):
    raw: float  # the pass rate as the judge gave it: the mean over items of their passed share
    # The judge's, on the labelled items: the share labelled pass it passed, and the share labelled
    # fail it failed; null when there is none (only with every item of the run labelled: then
    # each counts by its label and nothing is corrected).
    sensitivity: float | None
    specificity: float | None
    labelled: int  # the labelled items
    source: str  # the experiment they are of (a stored one: with its run and date)
    # Of the run's items, those labelled (its own calibration's): each counts by its label, and
    # only the others' pass rate is corrected (0: the labels are another experiment's).
    known: int = 0


class MetricDelta(_Report):
    # Over the items both scored, each item's mean over its trials, then the mean over items:
    # each item weighs the same whatever its trials, so current_mean - baseline_mean is delta.
    baseline_mean: float | None
    current_mean: float | None
    # current - baseline: the mean of the per-item differences over the items both scored
    delta: float | None
    interval: ConfidenceInterval | None = None  # of delta: two-sided, the paired score interval
    items: int = 0  # the items both runs scored, which the difference is over
    sd: float | None = None  # the standard deviation of the per-item differences


class FigureChange(_Report):
    """A cost, token or latency figure in both runs, over the items both planned. Higher is
    worse for every one of them. No statistical test: the change as measured."""

    baseline: float | None  # None: not measured in that run
    current: float | None
    delta: float | None  # current - baseline
    relative: float | None  # delta / baseline; None when the baseline is 0 or missing
    # Spans with tokens and no cost, in the two runs together: a cost is then a floor.
    unpriced: int = 0


class ItemChange(_Report):
    """One item in both runs, for the A/B view."""

    dataset_item_id: str
    baseline: ItemStatus
    current: ItemStatus
    flip: Literal["regression", "fix"] | None
    changes: dict[str, float]  # metric -> the item's mean now minus its mean in the baseline


class BaselineComparison(_Report):
    experiment_id: str
    run_id: str
    name: str
    metrics: dict[str, MetricDelta]
    # The comparison pairs the two experiments' trials by item id, over the items both planned:
    # the metric means above are over those items only, in both.
    shared_items: int
    only_in_current: list[str]  # item ids this experiment planned and the baseline did not
    only_in_baseline: list[str]  # and the reverse
    regressions: list[str]  # item ids that passed in the baseline and fail now
    fixes: list[str]  # item ids that failed in the baseline and pass now
    # The exact one-sided test on those flips of the items' verdicts (pass/fail, k of n): the
    # chance of at least this many regressions among the flips if a flip were as likely either
    # way (1.0 without flips). Informational: the gates decide on the metrics' means.
    regressions_p_value: float = 1.0
    # The items both planned, sorted by their change in the first metric (worst first).
    items: list[ItemChange] = []
    # Over those items: "cost_per_item" (USD, the app's spans: the mean over items of an item's
    # mean cost per trial), "tokens_per_item" (the app's total tokens, likewise), and the task
    # latency's "latency_p50" and "latency_p95" (seconds, over the trials). Only those measured.
    figures: dict[str, FigureChange] = {}


class KappaEstimate(_Report):
    """Cohen's kappa with its interval by the jackknife over items (each left out in turn);
    ``low`` and ``high`` are None when the jackknife is undefined (one item, or kappa undefined
    once an item is left out)."""

    estimate: float
    low: float | None
    high: float | None
    level: float
    items: int
    method: Literal["jackknife"] = "jackknife"


class CorrelationEstimate(_Report):
    """Pearson's correlation of the items' mean judge scores with their human scores, with its
    Fisher z interval over items; ``low`` and ``high`` are None with three items (it needs four)."""

    estimate: float
    low: float | None
    high: float | None
    level: float
    items: int
    method: Literal["fisher_z"] = "fisher_z"


class CalibrationOrigin(_Report):
    """Where a judge's calibration came from: this experiment's labelled items (``own``), those of
    another experiment of the session scored by the same judge (``session``), or the calibration
    an earlier session stored for that judge (``stored``: the newest, when the session has none)."""

    kind: Literal["own", "session", "stored"]
    experiment: str  # the labelled experiment's name
    run_id: str  # its run
    created_at: str | None = None  # stored: when the labelled experiment was created (ISO 8601)
    age_days: float | None = None  # stored: its age at the session's clock, in days


class JudgeCalibration(_Report):
    """A score against the human labels of the experiment's items (see ``verdict.calibration``):
    over the labelled items with completed trials, the judge's verdict (its score at
    ``threshold``) against the label's. Each interval has the item as its unit."""

    score: str
    threshold: float | None  # None: a pass/fail score (0 or 1), passing at 1
    items: int  # labelled items with a completed, scored trial
    trials: int  # their completed, scored trials
    label_pass: int  # of the items, labelled pass
    label_fail: int
    agreement: ConfidenceInterval | None  # the mean share of an item's trials agreeing with its label
    sensitivity: ConfidenceInterval | None  # over items labelled pass; None: there is none
    specificity: ConfidenceInterval | None  # over items labelled fail; None: there is none
    kappa: KappaEstimate | None  # None: no item, or a chance agreement of 1
    notes: list[str] = []  # why a figure is missing
    judge: str | None = None  # the identity of the score's LLM judge (None: not a judge)
    # Over all the experiment's items with the score: the pass rate as the judge gave it (the
    # mean over items of the share of trials at the threshold), and corrected for the judge's
    # errors on these labels (None: they cannot correct it, the notes say why).
    judged: ConfidenceInterval | None = None
    corrected: ConfidenceInterval | None = None
    # ``graded``: the labels are human scores and the judge's values graded, so its scores are
    # compared with them as well, over the labelled items (None where undefined: fewer than three
    # items, or a constant side for the correlation; the notes say why).
    graded: bool = False
    weighted_kappa: KappaEstimate | None = None  # quadratic weights, on the [0, 1] scale
    correlation: CorrelationEstimate | None = None  # of the items' mean judge scores
    bias: ConfidenceInterval | None = None  # the mean of judge less human score (method "t")
    origin: CalibrationOrigin | None = None  # where its labels came from (set from version 7 on)


class JudgeSelfAgreement(_Report):
    """An LLM judge scored each output several times (``judge_samples``): how far its samples of
    one output agree, over the completed trials whose score it sampled (``verdict.self_agreement``).
    Each trial's score is its samples' mean (a pass/fail judge's majority), so what they disagree
    by is in the spread of the trials' scores, which the gates' intervals rest on."""

    score: str
    samples: int  # samples per trial (the most any trial has)
    trials: int  # completed trials with sampled scores
    threshold: float | None  # the verdict's cut: the score's threshold; None: pass/fail, passing at 1
    unanimous: float  # the share of those trials whose samples all gave the same verdict
    split: int  # trials whose samples gave both verdicts
    sd: float  # the mean over those trials of their samples' standard deviation (n - 1)


class DatasetReport(_Report):
    source: str
    version: str
    items: int


class ExperimentReport(_Report):
    id: str
    name: str
    test: str
    run_id: str
    dataset: DatasetReport
    trial_count: int
    settings: GateSettings
    trials: list[TrialReport]
    items: list[ItemVerdict]
    summary: ExperimentSummary
    gates: list[GateVerdict] = []
    gates_met: bool = True
    baseline: BaselineComparison | None = None
    baseline_note: str | None = None  # why there is no comparison, when one was asked for
    rescore_of: str | None = None  # a rescore's: the experiment whose stored outputs it scored again
    # Each score the items have human labels for, the judge's verdicts against them.
    calibrations: list[JudgeCalibration] = []
    # Each score an LLM judge sampled several times (judge_samples), the judge against itself.
    self_agreement: list[JudgeSelfAgreement] = []


class BudgetReport(_Report):
    """``--eval-budget``: what this session's trials spent against it, app and judges."""

    unit: Literal["usd", "tokens"]
    given: float  # the budget as given (on the command line, the ini file, or the resumed run)
    limit: float  # this session's: with --eval-shard=K/N, the given budget divided by N
    spent: float  # by the trials that ran this session (those in flight when it was reached too)
    reached: bool
    not_started: int  # trials the budget kept from starting: pending, for --eval-resume
    resume_command: str | None = None  # runs them, with a fresh budget


class JudgeCacheReport(_Report):
    """``--eval-judge-cache``: the judges' scores of this session, reused from the cache or scored."""

    hits: int
    scored: int  # by calling the judge (and then kept, unless the scoring failed)
    missed: int = 0  # not in the cache in strict replay (--eval-record=none): the trial failed, pending
    strict: bool = False  # strict replay: a judge whose score is not in the cache is not called


class RecordingReport(_Report):
    """``--eval-record``: what became of the requests the app made in this session's trials, in
    every process (a worker's counts reach its controller as JSON)."""

    mode: str  # once, new_episodes, none or all
    replayed: int = 0  # answered from a recording
    recorded: int = 0  # sent, and their answer recorded
    missed: int = 0  # no recording to replay, or a connection blocked, where the network is not used
    missed_trials: int = 0  # trial attempts failed by a miss: pending, for --eval-resume
    # Mode none: of the missed, the requests made outside any trial (a fixture): not sent, and
    # no trial to fail for them, so the session fails.
    refused: int = 0
    saved_input_tokens: int = 0  # the usage of the replayed answers: not paid again
    saved_output_tokens: int = 0
    saved_cost: float | None = None  # in USD; None: no replayed answer had a price


class BatchSubmission(_Report):
    """Requests of this session submitted in one provider batch, or refused."""

    provider: str
    model: str | None
    endpoint: str
    requests: int
    batch_id: str | None = None  # None: the submission failed
    error: str | None = None  # the provider's words, when it failed


class BatchReport(_Report):
    """``--eval-batch``: what this session collected from earlier rounds' batches, the trials that
    wait for a batch, and what it submitted."""

    waiting_trials: int = 0  # skipped, pending: a request of theirs waits in a batch
    collected_batches: int = 0  # batches that had ended, their results read at the start
    answers: int = 0  # answers collected into the trials' recordings
    failed_requests: int = 0  # expired, cancelled, errored or missing: submitted again
    unknown_results: int = 0  # results whose id no request of the batch had: ignored
    cost: float | None = None  # USD, of the answers collected, at the batch price (None: none priced)
    live_cost: float | None = None  # what they would have cost live
    still_running: list[str] = []  # batches not ended at the start: their trials waited
    submissions: list[BatchSubmission] = []
    status_command: str | None = None  # how to see the batches' progress
    resume_command: str | None = None  # what finishes the waiting trials


class JudgeDrift(_Report):
    """A judge's verdicts on the labelled items of a calibration now, against those an earlier
    session stored for the same judge (the same identity: prompt, model, code), over the items
    both scored: the model behind an API name can change without notice."""

    score: str
    judge: str  # the identity
    since: str  # the earlier calibration: its experiment, run and date
    items: int  # the labelled items both scored
    changed: int  # of them, those whose share of trials the judge passed changed
    now_pass: int  # of those, the ones it passes more often now
    now_fail: int
    p_value: float  # the exact two-sided sign test that the changes go either way as likely
    sensitivity: tuple[float | None, float | None]  # before, now (None: no item labelled pass)
    specificity: tuple[float | None, float | None]
    # --eval-max-judge-drift: the share of the items that may change (None: not given), and
    # whether changed / items is above it, which fails the session (the sign test's p-value does
    # not enter: the bound is the team's tolerance, whatever the direction of the changes).
    bound: float | None = None
    failed: bool = False
    # --eval-judge-drift-since: the run whose calibration ``since`` is, kept as the reference
    # (drift within the bound does not replace it); None: the newest calibration.
    reference: str | None = None


class Report(_Report):
    schema_version: Literal[7] = SCHEMA_VERSION
    run_id: str | None
    resumed: str | None
    experiments: list[ExperimentReport]
    budget: BudgetReport | None = None  # None: no --eval-budget
    judge_cache: JudgeCacheReport | None = None  # None: the judge cache is off
    recordings: RecordingReport | None = None  # None: --eval-record=off
    batches: BatchReport | None = None  # None: --eval-batch=off
    judge_drift: list[JudgeDrift] = []  # the judges whose verdicts changed since their calibration


def json_schema() -> dict[str, Any]:
    schema = Report.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "pytest-opik-eval report"
    return schema


if __name__ == "__main__":
    sys.stdout.write(json.dumps(json_schema(), indent=2, sort_keys=True) + "\n")
