"""An experiment as the end of a session sees it: its trials as the store returned them, its
summary (``experiment_summary``), item verdicts (``item_verdicts``), gates and baseline
comparison, in plain objects; and a baseline's side of a comparison (``BaselineRun``).

The gates, the recorded verdicts and the exit status read these; every report, the terminal's
too, renders the report model built from them once at the session's end (``report()``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

from pytest_opik_eval.ids import sampled_judge
from pytest_opik_eval.store.records import ExperimentRecord, GateSettings, TrialRecord
from pytest_opik_eval.verdict import calibration, correction
from pytest_opik_eval.verdict import statistics as stats
from pytest_opik_eval.verdict.decisions import DropTest, RegressionTest
from pytest_opik_eval.verdict.experiment_summary import confidence_interval, item_statistics, summarize
from pytest_opik_eval.verdict.item_verdicts import item_results, item_statuses
from pytest_opik_eval.verdict.model import (
    BaselineComparison,
    CalibrationOrigin,
    ConfidenceInterval,
    CorrelationEstimate,
    DatasetReport,
    ExperimentReport,
    ExperimentSummary,
    GateVerdict,
    ItemChange,
    ItemStatus,
    ItemVerdict,
    JudgeCalibration,
    KappaEstimate,
    TrialReport,
)
from pytest_opik_eval.verdict.paired import PairedComparison
from pytest_opik_eval.verdict.samples import Sample, item_sample, sample
from pytest_opik_eval.verdict.self_agreement import self_agreements

# The trial-finished hook's argument lived here before the split; users' plugins import it by this path.
from pytest_opik_eval.verdict.trial_scores import TrialResult as TrialResult
from pytest_opik_eval.verdict.trial_scores import scores_by_item
from pytest_opik_eval.verdict.usage import latency_summary, trial_latency, usage_of, usage_summary


class _OfExperiment:
    """The experiment's id, run and name, read off its record (a result's and a baseline's)."""

    experiment: ExperimentRecord

    @property
    def id(self) -> str:
        return self.experiment.id

    @property
    def run_id(self) -> str:
        return self.experiment.run_id

    @property
    def name(self) -> str:
        return self.experiment.name


@dataclass(frozen=True)
class ExperimentResult(_OfExperiment):
    """The whole experiment: every planned trial, whichever session ran it."""

    experiment: ExperimentRecord
    settings: GateSettings  # the settings it is judged with
    session_id: str | None  # the session that is ending, if any: its trials "ran this session"
    trials: Sequence[TrialRecord]
    summary: ExperimentSummary
    items: list[ItemVerdict]
    gates: list[GateVerdict] = field(default_factory=list)
    gates_met: bool = True
    baseline: BaselineComparison | None = None
    baseline_note: str | None = None  # why there is no comparison, when one was asked for
    baseline_failed: bool = False  # the baseline ``last`` found did not pass (its gates, its trials)
    # The paired comparison with the baseline, per metric, and the tests of the regression gates
    # on it; the baseline's item verdicts, for the report's A/B rows (built with the report
    # model); the baseline's scores by item, which set what a regression gate can detect.
    paired: dict[str, PairedComparison] = field(default_factory=dict)
    tests: dict[str, RegressionTest] = field(default_factory=dict)
    baseline_values: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    baseline_verdicts: dict[str, ItemStatus] = field(default_factory=dict)
    baseline_judges: dict[str, str] = field(default_factory=dict)  # the baseline's judges' identities
    baseline_judge_samples: int = 1  # and the times each scored an output
    # Each metric's computed scores by item id (``scores_by_item``), computed once; with the
    # summary's intervals, their item samples, on which those and the fail_under gates rest.
    values: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    samples: dict[str, Sample] = field(default_factory=dict)
    # By score: the human-labelled items its judge's errors are measured on (``calibrated``);
    # for a judge's score without them, why (its labels were for another version of the judge).
    calibration_sets: dict[str, CalibrationSet] = field(default_factory=dict)
    uncalibrated: dict[str, str] = field(default_factory=dict)
    # By regression-gated score: the baseline's own labelled items (``comparison.with_baseline``);
    # the change of the judge's pass rate, each run corrected for its judge's errors, or why it
    # is not (``summary.calibrated``).
    baseline_labelled: dict[str, list[calibration.LabelledItem]] = field(default_factory=dict)
    changes: dict[str, CorrectedRegression | str] = field(default_factory=dict)

    @cached_property
    def verdicts(self) -> dict[str, ItemStatus]:
        """Each item's verdict by item id."""
        return {i.dataset_item_id: i.verdict for i in self.items}

    @property
    def test(self) -> str:
        return self.experiment.test

    @property
    def trial_count(self) -> int:
        return self.experiment.selection.trial_count

    def regression_test(self, metric: str) -> DropTest | None:
        """What the metric's regression gate decides on: the corrected change of a judge's pass
        rate when both runs' judges are calibrated, else the test on the scores."""
        change = self.changes.get(metric)
        return change.test if isinstance(change, CorrectedRegression) else self.tests.get(metric)

    def item_sample(self, metric: str) -> Sample:
        """The metric's items as a sample (``samples.item_sample``): the summary's, if it
        has intervals."""
        known = self.samples.get(metric)
        return item_sample(self.values[metric].values()) if known is None else known

    def ran_this_session(self, trial: TrialRecord) -> bool:
        return self.session_id is not None and trial.session_id == self.session_id

    def report(self) -> ExperimentReport:
        """The report models, as the JSON report writes them."""
        experiment = self.experiment
        soft = self.settings.soft_trials()
        # model_construct: the store's records are already valid, and there may be 100,000 of them.
        trials = [
            TrialReport.model_construct(
                dataset_item_id=t.dataset_item_id,
                trial=t.trial,
                node_id=t.node_id,
                status=t.status,
                ran_this_session=self.ran_this_session(t),
                attempts=t.attempts,
                output=t.output,
                passed=t.passed,
                scores=t.scores,
                soft_failed=soft and t.passed is False,
                latency=trial_latency(t),
                usage=usage_of(t),
            )
            for t in self.trials
        ]
        return ExperimentReport(
            id=experiment.id,
            name=experiment.name,
            test=experiment.test,
            run_id=experiment.run_id,
            dataset=DatasetReport(
                source=experiment.dataset.source,
                version=experiment.dataset.version,
                items=len(experiment.items),
            ),
            trial_count=self.trial_count,
            settings=self.settings,
            trials=trials,
            items=self.items,
            summary=self.summary,
            gates=self.gates,
            gates_met=self.gates_met,
            baseline=None if self.baseline is None else self._with_item_changes(self.baseline),
            baseline_note=self.baseline_note,
            rescore_of=experiment.rescore_of,
            calibrations=self.calibrations(),
            self_agreement=self_agreements(
                (t.scores for t in self.trials if t.status == "completed"), self.settings.thresholds
            ),
        )

    @cached_property
    def labels(self) -> dict[str, dict[str, bool | float]]:
        """The items' human labels by score, then by item id (one pass over 100,000 items, read
        by every gate and report that looks for a judge's calibration)."""
        return calibration.labels_by_score(self.experiment.items, self.experiment.labels_field)

    def labels_count(self, score: str) -> int:
        """How many of this experiment's items are labelled for ``score``."""
        return len(self.labels.get(score, {}))

    def labelled(self, score: str) -> list[calibration.LabelledItem]:
        """This experiment's items labelled for ``score`` that have a completed trial with it."""
        labels = self.labels.get(score)
        if not labels:
            return []
        values = self.values.get(score, {})
        return calibration.labelled_items(labels, values, self.settings.thresholds.get(score))

    def calibrations(self) -> list[JudgeCalibration]:
        """Each labelled score's judge against the items' human labels, over the completed
        trials; then each score the experiment has no labels for whose judge another
        experiment's labels or a stored calibration calibrate (``summary.calibrated``), against
        those, with where they came from."""
        level = self.settings.confidence
        found = calibration.calibrations(
            self.experiment.items, self.experiment.labels_field, self.values, self.settings.thresholds, level
        )
        own = own_labels(self.name, self.run_id)
        reports = [self._side_by_side(judge_calibration(c), self.labelled(c.score), own) for c in found]
        for score, labelled in self.calibration_sets.items():
            if not labelled.own:
                threshold = self.settings.thresholds.get(score)
                other = calibration.calibrate(score, threshold, labelled.items, level)
                reports.append(self._side_by_side(judge_calibration(other), labelled.items, labelled.origin))
        return reports

    def _side_by_side(
        self, found: JudgeCalibration, labelled: list[calibration.LabelledItem], origin: CalibrationOrigin
    ) -> JudgeCalibration:
        """The calibration with where its labels came from, and the experiment's pass rate as
        judged and as corrected by them."""
        by_item = self.values.get(found.score)
        if not found.items or not by_item:
            return found.model_copy(update={"origin": origin})
        level = self.settings.confidence
        shares = calibration.passed_shares(by_item.values(), found.threshold)
        # The experiment's own labelled items count by their labels: only the rest is corrected.
        corrected = correction.pass_rate(by_item, found.threshold, labelled, own=origin.kind == "own")
        update: dict[str, Any] = {
            "origin": origin,
            "judge": self.experiment.judges.get(found.score),
            "judged": confidence_interval(stats.interval(sample(shares, pass_fail=True), level)),
        }
        if isinstance(corrected, str):
            update["notes"] = [*found.notes, f"not corrected: {corrected}"]
        else:
            update["corrected"] = confidence_interval(corrected.interval(level), "corrected")
        return found.model_copy(update=update)

    def _with_item_changes(self, baseline: BaselineComparison) -> BaselineComparison:
        """The comparison with its A/B rows: each item both runs planned with its change per
        metric, worst first by the first metric (items it did not score last)."""
        now = self.verdicts
        before = self.baseline_verdicts
        paired = list(self.paired.items())
        flips: dict[str, dict[str, Literal["regression", "fix"]]] = {
            "passed": {"failed": "regression"},
            "failed": {"passed": "fix"},
        }
        rows = [
            ItemChange.model_construct(
                dataset_item_id=item,
                baseline=before[item],
                current=verdict,
                flip=flips.get(before[item], {}).get(verdict),
                changes={name: p.differences[item] for name, p in paired if item in p.differences},
            )
            for item, verdict in now.items()
            if item in before
        ]
        first = next(iter(self.paired), None)
        rows.sort(key=lambda row: (first not in row.changes, row.changes.get(first or "", 0.0)))
        return baseline.model_copy(update={"items": rows})


def samples_change(before: str, before_samples: int | None, now: str, now_samples: int) -> str | None:
    """What changed between two identities of a judge (``run/judges.py``) whose
    ``judge_samples`` differ: ``judge_samples changed (1 -> 3)`` when that alone tells them
    apart, else that and its prompt, model or code; None when the counts are the same (or the
    earlier one unknown): then its prompt, model or code changed. The identity of a judge sampled
    N times is derived from its identity called once (``ids.sampled_judge``): with one side called
    once, the other's is checked; with both sampled, what else changed cannot be told."""
    if before_samples is None or before_samples == now_samples:
        return None
    samples = f"judge_samples changed ({before_samples} -> {now_samples})"
    if before_samples == 1:
        alone = sampled_judge(before, now_samples) == now
    elif now_samples == 1:
        alone = sampled_judge(now, before_samples) == before
    else:
        return f"{samples}; its prompt, model or code may have changed too"
    return samples if alone else f"its prompt, model or code and {samples}"


def own_labels(experiment: str, run_id: str) -> CalibrationOrigin:
    """The origin of an experiment's calibration by its own labelled items."""
    return CalibrationOrigin(kind="own", experiment=experiment, run_id=run_id)


@dataclass(frozen=True)
class CalibrationSet:
    """The labelled items a judge's score is corrected by, and where they came from."""

    source: str  # as the gates name it: the experiment (a stored calibration's run and date too)
    items: list[calibration.LabelledItem]
    origin: CalibrationOrigin

    @property
    def own(self) -> bool:
        """The experiment's own items (not another's, nor a stored calibration's)."""
        return self.origin.kind == "own"


@dataclass(frozen=True)
class CorrectedRegression:
    """A regression gate's corrected change, and the labels each run was corrected by."""

    test: correction.CorrectedChange
    source: str  # the experiment whose labels corrected the current run
    baseline_source: str  # the baseline's
    shared: bool  # one calibration corrected both: the current run's
    labelled: list[calibration.LabelledItem]  # the current run's labelled items, and the baseline's
    baseline_labelled: list[calibration.LabelledItem]


@dataclass(frozen=True)
class BaselineRun(_OfExperiment):
    """What a comparison reads of its baseline (``comparison.compare``): the experiment, its
    trials, its verdict by item id and its scores by item; none of the summary and item verdicts
    a result has, which a baseline would build and never read (about a sixth of the gates' cost
    at 100,000 trials)."""

    experiment: ExperimentRecord
    trials: Sequence[TrialRecord]
    verdicts: dict[str, ItemStatus]
    values: dict[str, dict[str, list[float]]]


def baseline_run(
    experiment: ExperimentRecord, trials: Sequence[TrialRecord], settings: GateSettings
) -> BaselineRun:
    """The baseline's side of a comparison, judged by its own settings (its ``pass_threshold``)."""
    completed = [t for t in trials if t.status == "completed"]
    return BaselineRun(
        experiment, trials, item_statuses(trials, settings.pass_threshold), scores_by_item(completed).values
    )


def experiment_result(
    experiment: ExperimentRecord,
    trials: Sequence[TrialRecord],
    session_id: str | None,
    settings: GateSettings,
    *,
    intervals: bool = True,
) -> ExperimentResult:
    """The experiment's summary and item verdicts (without its gates and baseline comparison:
    ``gates.judge`` adds them); with ``intervals``, the summary's intervals (the regression
    gates need none: ``benchmarks/gates.py``'s reruns, which judge only those, leave them out;
    a baseline is a ``baseline_run``)."""
    items = item_results(trials, settings.pass_threshold)
    scores = scores_by_item([t for t in trials if t.status == "completed"])
    values = scores.values
    level = settings.confidence if intervals else None
    samples = {name: item_sample(v.values()) for name, v in values.items() if v} if level else {}
    summary = summarize(
        trials,
        settings.thresholds,
        level,
        scores,
        verdicts=items,
        soft=settings.soft_trials(),
        samples=samples,
    )
    summary.latency = latency_summary(trials)
    # Most sessions report no usage: only the trials with a sum or spans are read (as ``spend``).
    summary.usage = usage_summary(usage_of(t) for t in trials if t.usage is not None or t.spans)
    return ExperimentResult(
        experiment=experiment,
        settings=settings,
        session_id=session_id,
        trials=trials,
        summary=item_statistics(summary, items, level) if level else summary,
        items=items,
        values=values,
        samples=samples,
    )


def judge_calibration(found: calibration.Calibration) -> JudgeCalibration:
    def interval(given: stats.Interval | None) -> ConfidenceInterval | None:
        return None if given is None else confidence_interval(given)

    def kappa_estimate(kappa: calibration.Kappa | None) -> KappaEstimate | None:
        if kappa is None:
            return None
        return KappaEstimate(
            estimate=kappa.estimate, low=kappa.low, high=kappa.high, level=kappa.level, items=kappa.n
        )

    graded = found.graded
    r = None if graded is None else graded.correlation
    return JudgeCalibration(
        score=found.score,
        threshold=found.threshold,
        items=found.items,
        trials=found.trials,
        label_pass=found.label_pass,
        label_fail=found.label_fail,
        agreement=interval(found.agreement),
        sensitivity=interval(found.sensitivity),
        specificity=interval(found.specificity),
        kappa=kappa_estimate(found.kappa),
        notes=list(found.notes),
        graded=graded is not None,
        weighted_kappa=None if graded is None else kappa_estimate(graded.weighted_kappa),
        correlation=None
        if r is None
        else CorrelationEstimate(estimate=r.estimate, low=r.low, high=r.high, level=r.level, items=r.n),
        bias=None if graded is None or graded.bias is None else confidence_interval(graded.bias, "t"),
    )
