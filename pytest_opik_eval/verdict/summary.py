"""The end of a session: each experiment read back whole from the store, compared with its
baseline, judged against its gates, the session's regression gates adjusted together; and
whether the session as a whole failed."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime, timezone

from pytest_opik_eval.store import ExperimentRecord, GateSettings, RunRecord, Store, TrialRecord
from pytest_opik_eval.store.calibrations import Calibrations, LabelledRow, StoredCalibration
from pytest_opik_eval.verdict import correction, samples
from pytest_opik_eval.verdict.calibration import LabelledItem
from pytest_opik_eval.verdict.comparison import with_baseline
from pytest_opik_eval.verdict.decisions import Adjusted, holm
from pytest_opik_eval.verdict.distributions import sign_test
from pytest_opik_eval.verdict.gates import judge
from pytest_opik_eval.verdict.model import CalibrationOrigin, JudgeDrift
from pytest_opik_eval.verdict.results import (
    CalibrationSet,
    CorrectedRegression,
    ExperimentResult,
    baseline_run,
    experiment_result,
    own_labels,
    samples_change,
)
from pytest_opik_eval.verdict.trial_scores import with_verdicts

LAST = "last"
LAST_PASSING = "last-passing"
NEWEST = (LAST, LAST_PASSING)


class Baselines:
    """Finds the baseline of each experiment: a given experiment, the same test's experiment in
    a given run, the test's newest earlier experiment whose session ended (``last``, whatever its
    gates said), or its newest whose gates were met with nothing pending and that ran every trial
    this one selects (``last-passing``, which prefers runs that scored high by luck)."""

    def __init__(self, store: Store, requested: str | None) -> None:
        self.store = store
        self.requested = requested
        self._given: list[ExperimentRecord] = []
        if requested is not None and requested not in NEWEST:
            _, self._given = store.find(requested)  # an unknown id raises ExperimentNotFound

    def of(self, experiment: ExperimentRecord) -> tuple[ExperimentRecord | None, str | None]:
        """The baseline, or why there is none (a first run is not blocked by its absence)."""
        if self.requested is None:
            return None, None
        test = experiment.test + (f"[{experiment.params}]" if experiment.params else "")
        if self.requested == LAST:
            found = self.store.latest(experiment.test, experiment.params, experiment.id, passing=False)
            return found, None if found else f"no earlier experiment of {test}; comparison skipped"
        if self.requested == LAST_PASSING:
            found = self._last_passing_covering(experiment)
            note = (
                f"no earlier experiment of {test} that planned every trial of its {len(experiment.items)}"
                " selected item(s) met its gates with nothing pending; comparison skipped"
            )
            return found, None if found else note
        if len(self._given) == 1 and self._given[0].id == self.requested:
            return self._given[0], None
        for candidate in self._given:
            if (candidate.test, candidate.params) == (experiment.test, experiment.params):
                return candidate, None
        return None, f"run {self.requested} has no experiment of {test}; comparison skipped"

    def failed(self, experiment: ExperimentRecord, baseline: ExperimentRecord) -> bool:
        """Whether ``last`` found a baseline that did not pass (a gate not met, a trial failed
        or pending): a regression it already had is not counted against ``experiment``, which
        a gate says (with the README's CI recipe only default-branch runs are baselines)."""
        if self.requested != LAST:
            return False
        passing = self.store.latest(experiment.test, experiment.params, experiment.id, passing=True)
        return passing is None or passing.id != baseline.id

    def _last_passing_covering(self, experiment: ExperimentRecord) -> ExperimentRecord | None:
        """The newest passing experiment that planned every trial of every item this experiment
        selected: one run with ``-k``, or with a narrower filter, passed over fewer items, and
        comparing its means with this one's would compare different item sets."""
        wanted = [str(item["id"]) for item in experiment.items]
        before = experiment.id
        while True:
            found = self.store.latest(experiment.test, experiment.params, before, passing=True)
            if found is None:
                return None
            planned = {(t.dataset_item_id, t.trial) for t in self.store.trial_states(found.id)}
            trials = range(found.selection.trial_count)
            if all((item, trial) in planned for item in wanted for trial in trials):
                return found
            before = found.id


def judge_experiments(
    store: Store,
    experiments: Sequence[ExperimentRecord],
    session_id: str | None,
    settings_of: Callable[[ExperimentRecord], GateSettings],
    baselines: Baselines,
    resume_command: Callable[[str], str],
    keep: Callable[[ExperimentRecord, TrialRecord], bool] | None = None,
    family: Sequence[ExperimentRecord] = (),
    stored: Calibrations | None = None,
    *,
    now: datetime,
) -> list[ExperimentResult]:
    """Every experiment as the store has it now (only the trials ``keep`` keeps: a shard's
    share), with its baseline comparison and gates; ``family``: the rest of their session's
    experiments, whose regression gates join Holm's family and are not judged (see
    ``rest_of_session``); ``now``: the session's clock, which a stored calibration's age is
    measured against."""

    def compared(experiment: ExperimentRecord) -> ExperimentResult:
        settings = settings_of(experiment)
        trials = [t for t in store.trials(experiment.id) if keep is None or keep(experiment, t)]
        trials = with_verdicts(trials, settings.thresholds)
        result = experiment_result(experiment, trials, session_id, settings)
        baseline, note = baselines.of(experiment)
        if baseline is not None:
            # An SDK experiment has no thresholds: its trials are judged by this test's.
            thresholds = baseline.gates.thresholds or settings.thresholds
            before_trials = with_verdicts(store.trials(baseline.id), thresholds)
            before = baseline_run(baseline, before_trials, baseline.gates)
            result = replace(
                with_baseline(result, before), baseline_failed=baselines.failed(experiment, baseline)
            )
        return replace(result, baseline_note=note)

    results = [compared(e) for e in experiments]
    return judge_session(results, resume_command, [compared(e) for e in family], stored, now)


def rest_of_session(
    store: Store, target: str, run: RunRecord, experiments: Sequence[ExperimentRecord]
) -> list[ExperimentRecord]:
    """The experiments of ``run`` other than ``experiments``, when ``target`` named one
    experiment of it (a resume by experiment id, ``opik-eval gate EXP``): judged alone, its
    regression gates would be adjusted for fewer gates than the session that ran them all."""
    if target in (run.id, LAST):
        return []
    judged = {e.id for e in experiments}
    return [e for e in store.find(run.id)[1] if e.id not in judged]


def judge_session(
    results: Sequence[ExperimentResult],
    resume_command: Callable[[str], str],
    others: Sequence[ExperimentResult] = (),
    stored: Calibrations | None = None,
    now: datetime | None = None,
) -> list[ExperimentResult]:
    """Every result judged (a judge's score corrected by its calibration: ``calibrated``), the
    normal-mode regression gates of all of them and of ``others`` (the rest of their session,
    not judged here) adjusted together (Holm, at each confidence
    level in use): CI fails when any gate fails, so the session is the family, and five gates
    each at 5% would fail an unchanged app's run about 23% of the time. The family is the same
    however the session is judged: at its end, after a resume of one of its experiments, or by
    ``opik-eval gate``."""
    everyone = calibrated([*results, *others], [*results, *others], stored, now)
    results = everyone[: len(results)]
    members = [
        (position, metric, test.p_beyond)
        for position, result in enumerate(everyone)
        if result.settings.mode == "normal"
        for metric in result.tests
        if (test := result.regression_test(metric)) is not None
    ]
    adjusted: dict[int, dict[str, Adjusted]] = {}
    family: dict[int, int] = {}
    for confidence in sorted({everyone[position].settings.confidence for position, _, _ in members}):
        group = [m for m in members if everyone[m[0]].settings.confidence == confidence]
        steps = holm([p for _, _, p in group], 1.0 - confidence)
        for (position, metric, _), step in zip(group, steps, strict=True):
            adjusted.setdefault(position, {})[metric] = step
            family[position] = len(group)
    return [
        judge(result, resume_command, adjusted.get(position), family.get(position, 1))
        for position, result in enumerate(results)
    ]


def calibrated(
    results: Sequence[ExperimentResult],
    session: Sequence[ExperimentResult],
    stored: Calibrations | None = None,
    now: datetime | None = None,
) -> list[ExperimentResult]:
    """Each result with, for each score a fail_under or regression gate reads, the human-labelled
    items its judge's errors are measured on: the result's own; else those of another experiment
    of the session scored by the same judge (the same identity: its prompt, model and code), the
    first one found; else the newest stored for that judge (``stored``: what sessions with labels
    kept, ``calibrations_of``), its age measured at ``now``. A stored calibration of another
    version of the judge is stale: the result says so. A regression gate's change is corrected
    too (``_change``)."""
    by_judge: dict[tuple[str, str], CalibrationSet] = {}
    for other in session:
        for score, identity in other.experiment.judges.items():
            if (score, identity) not in by_judge and (items := other.labelled(score)):
                origin = CalibrationOrigin(kind="session", experiment=other.name, run_id=other.run_id)
                by_judge[score, identity] = CalibrationSet(other.name, items, origin)
    found = []
    for result in results:
        sets, notes = {}, {}
        for score in dict.fromkeys([*result.settings.fail_under, *result.tests]):
            got = _calibration(result, score, by_judge, stored, now)
            if isinstance(got, CalibrationSet):
                sets[score] = got
            elif got is not None:
                notes[score] = got
        if sets or notes:
            result = replace(result, calibration_sets=sets, uncalibrated=notes)
        changes = {score: change for score in result.tests if (change := _change(result, score, stored))}
        found.append(replace(result, changes=changes) if changes else result)
    return found


def _change(
    result: ExperimentResult, score: str, stored: Calibrations | None
) -> CorrectedRegression | str | None:
    """The regression gate's change of the judge's pass rate, each run corrected for its own
    judge's errors: the current run by its calibration (``_calibration``), the baseline by its
    own labelled items, else by the calibration its run kept, else, when both runs had the same
    judge, by the current run's; or why it is not corrected (None: no judge, no labels)."""
    labelled = result.calibration_sets.get(score)
    judge = result.experiment.judges.get(score)
    if labelled is None:
        if judge is None:
            return None
        why = result.uncalibrated.get(score, "")
        return (
            f"the judge of {score} is not calibrated{why}: its errors are not in this change; label "
            f'some items ("labels": {{"{score}": true}}) to correct it'
        )
    by_item, before_by_item = result.values[score], result.baseline_values[score]
    if not samples.pass_fail(by_item.values(), before_by_item.values()):
        return f"{score} is a graded score: only a pass/fail score's pass rate is corrected by labels"
    before = _baseline_calibration(result, score, stored)
    if isinstance(before, str):
        return before
    test = result.tests[score]
    shared = result.paired[score].shared
    now_items = _keyed(labelled)
    change = correction.corrected_change(
        dict(zip(shared, samples.item_means(by_item[i] for i in shared), strict=True)),
        dict(zip(shared, samples.item_means(before_by_item[i] for i in shared), strict=True)),
        now_items,
        now_items if before is labelled else _keyed(before),
        test.delta,
        test.p_chance,
        trials=(sum(len(by_item[i]) for i in shared), sum(len(before_by_item[i]) for i in shared)),
    )
    if isinstance(change, str):
        return f"not corrected by the labels of {labelled.source}: {change}"
    return CorrectedRegression(
        change, labelled.source, before.source, before is labelled, labelled.items, before.items
    )


def _keyed(labelled: CalibrationSet) -> list[LabelledItem]:
    """The labelled items as ``correction.corrected_change`` weighs them, by item id: an
    experiment's own are its run items too (one unit each); those of another experiment or of a
    stored calibration are kept apart from the run's items (an id such as "1" may be another
    dataset's item), yet the same in both runs' calibrations."""
    if labelled.own:
        return labelled.items
    return [replace(item, item_id=f"labelled {item.item_id}") for item in labelled.items]


def _baseline_calibration(
    result: ExperimentResult, score: str, stored: Calibrations | None
) -> CalibrationSet | str:
    """The labelled items the baseline's pass rate is corrected by: its own; else those the
    calibration its run kept for its judge (the judge's errors of that day); else, when the
    judge is the same as the current run's (its identity), the current run's, which assumes the
    judge's errors did not change since; else why there are none."""
    baseline = result.baseline
    assert baseline is not None, "a regression gate's test has a baseline"
    own = result.baseline_labelled.get(score)
    if own:
        return CalibrationSet(baseline.name, own, own_labels(baseline.name, baseline.run_id))
    judge = result.baseline_judges.get(score)
    kept = None if stored is None or judge is None else stored.of_run(judge, score, baseline.run_id)
    if kept is not None:
        return _from_store(kept, None)  # the baseline's: no report shows its age
    current = result.experiment.judges.get(score)
    if judge == current:
        return result.calibration_sets[score]
    changed = None
    if judge is not None and current is not None:
        before_n, now_n = result.baseline_judge_samples, result.experiment.judge_samples
        changed = samples_change(judge, before_n, current, now_n)
    return (
        f"the baseline's judge of {score} was another version of it "
        f"({changed or 'its prompt, model or code'}) and its run kept no calibration: judge the "
        f"baseline's outputs again with today's judge (opik-eval rescore {baseline.experiment_id}) "
        "and compare with that"
    )


def _calibration(
    result: ExperimentResult,
    score: str,
    session: dict[tuple[str, str], CalibrationSet],
    stored: Calibrations | None,
    now: datetime | None,
) -> CalibrationSet | str | None:
    """The labelled items of the score's judge, else why there are none (a stale calibration);
    None when there are none to look for."""
    own = result.labelled(score)
    judge = result.experiment.judges.get(score)
    if own:
        return CalibrationSet(result.name, own, own_labels(result.name, result.run_id))
    if judge is None:
        return None
    if (score, judge) in session:
        return session[score, judge]
    if stored is None:
        return None
    kept = stored.of(judge, score)
    if kept is not None:
        return _from_store(kept, now)
    old = stored.stale(judge, score)
    if old is None:
        return None
    changed = samples_change(old.judge, old.judge_samples, judge, result.experiment.judge_samples)
    return (
        f" (the labels of {old.experiment}, run {old.run_id}, were for another version of it: "
        f"{changed or 'its prompt, model or code changed'} since)"
    )


def _from_store(kept: StoredCalibration, now: datetime | None) -> CalibrationSet:
    """A stored calibration's items, and its origin with its age at ``now`` (None: not shown)."""
    items = [LabelledItem(r.item_id, r.passed, r.trials, r.label) for r in kept.items]
    origin = CalibrationOrigin(
        kind="stored",
        experiment=kept.experiment,
        run_id=kept.run_id,
        created_at=kept.created_at,
        age_days=None if now is None else _age_days(kept.created_at, now),
    )
    return CalibrationSet(f"{kept.experiment} (run {kept.run_id}, {kept.created_at[:10]})", items, origin)


def _age_days(created_at: str, now: datetime) -> float | None:
    """The days from ``created_at`` (ISO 8601, UTC when it names no zone; a server's may end
    in Z) to ``now``; None when it cannot be read."""
    try:
        then = datetime.fromisoformat(created_at.replace("Z", "+00:00"))
    except ValueError:
        return None
    then = then if then.tzinfo else then.replace(tzinfo=timezone.utc)
    return (now - then).total_seconds() / 86400


def keep_calibrations(
    found: Sequence[StoredCalibration],
    stored: Calibrations,
    bound: float | None = None,
    since: str | None = None,
) -> list[JudgeDrift]:
    """Each of ``found`` (``calibrations_of``) kept as its run's calibration and as its judge's,
    and how its verdicts drifted from the one it replaces, or from the one the run ``since`` kept
    (``judge_drift``); but one that drifted beyond ``bound`` keeps the judge's calibration (the
    next session fails too, until the judge is pinned or its new verdicts accepted), and one
    older than the judge's replaces nothing."""
    # A calibration older than the one kept (opik-eval gate on an earlier run) replaces none,
    # and is no drift: it is only its run's.
    newer = [
        c for c in found if (kept := stored.of(c.judge, c.score)) is None or kept.created_at <= c.created_at
    ]
    drift = judge_drift(newer, stored, bound, since)
    drifted = {(d.judge, d.score) for d in drift if d.failed}
    for calibration in found:
        stored.save(
            calibration, newest=calibration in newer and (calibration.judge, calibration.score) not in drifted
        )
    return drift


def judge_drift(
    found: Sequence[StoredCalibration],
    stored: Calibrations,
    bound: float | None = None,
    since: str | None = None,
) -> list[JudgeDrift]:
    """Each of a session's calibrations against the one an earlier experiment stored for the same
    judge and score (the newest, or the one the run ``since`` kept: a reference that drift
    within the bound does not replace, so that slow drift adds up), over the labelled items both
    scored: those whose verdicts changed (none changed: no drift), failed when the share changed
    is above ``bound``. The judge cache serves
    a judge the scores it gave before: a drift shows only with it off."""
    drifts = []
    for now in found:
        before = _earlier(now, stored, since)
        if before is None:
            continue
        earlier = {row.item_id: row for row in before.items}
        pairs = [(earlier[row.item_id], row) for row in now.items if row.item_id in earlier]
        moved = [(old, new) for old, new in pairs if old.passed / old.trials != new.passed / new.trials]
        if not moved:
            continue
        up = sum(1 for old, new in moved if new.passed / new.trials > old.passed / old.trials)
        drifts.append(
            JudgeDrift(
                score=now.score,
                judge=now.judge,
                since=f"{before.experiment} (run {before.run_id}, {before.created_at[:10]})",
                items=len(pairs),
                changed=len(moved),
                now_pass=up,
                now_fail=len(moved) - up,
                p_value=min(1.0, 2.0 * sign_test(max(up, len(moved) - up), min(up, len(moved) - up))),
                sensitivity=(_rate([o for o, _ in pairs], True), _rate([n for _, n in pairs], True)),
                specificity=(_rate([o for o, _ in pairs], False), _rate([n for _, n in pairs], False)),
                bound=bound,
                failed=bound is not None and len(moved) / len(pairs) > bound,
                reference=since,
            )
        )
    return drifts


def uncompared(
    found: Sequence[StoredCalibration], stored: Calibrations, since: str | None = None
) -> list[StoredCalibration]:
    """The session's calibrations that no earlier one of the same judge and score was stored
    for (by the run ``since``, when given): their drift cannot be measured (the first
    calibration of a judge, or one whose prompt, model or code changed: another identity)."""
    return [now for now in found if _earlier(now, stored, since) is None]


def _earlier(now: StoredCalibration, stored: Calibrations, since: str | None) -> StoredCalibration | None:
    before = stored.of(now.judge, now.score) if since is None else stored.of_run(now.judge, now.score, since)
    return None if before is None or before.experiment_id == now.experiment_id else before


def _rate(rows: Sequence[LabelledRow], label: bool) -> float | None:
    """Over the rows labelled ``label``: the mean share of trials the judge got right."""
    shares = [r.passed / r.trials if label else 1.0 - r.passed / r.trials for r in rows if r.label is label]
    return samples.mean(shares) if shares else None


def calibrations_of(results: Sequence[ExperimentResult]) -> list[StoredCalibration]:
    """What a session keeps of its judges' calibrations: for each judge's score that an
    experiment has labelled items for, the judge's verdicts on them; only from an experiment
    with nothing pending and every labelled item scored, so that an interrupted session (-x, a
    budget, -k) never replaces a calibration with a part of one."""
    return [
        StoredCalibration(
            judge=judge,
            score=score,
            experiment=result.name,
            experiment_id=result.id,
            run_id=result.run_id,
            created_at=result.experiment.created_at,
            judge_samples=result.experiment.judge_samples,
            items=[
                LabelledRow(item_id=i.item_id, passed=i.passed, trials=i.trials, label=i.label) for i in own
            ],
        )
        for result in results
        if not result.summary.pending
        for score, judge in result.experiment.judges.items()
        if (own := result.labelled(score)) and len(own) == result.labels_count(score)
    ]


def passed(result: ExperimentResult) -> bool:
    """Whether an uninterrupted run of the whole experiment would pass: every gate met, and no
    completed trial failed (a soft-failed one, with --eval-soft or pass_threshold, leaves it to
    the gates)."""
    return result.gates_met and not result.summary.failed  # soft-failed trials are not counted


def unchecked_metrics(result: ExperimentResult) -> list[str]:
    """The scores of the experiment that nothing checks: no per-trial threshold, no gate on their
    mean or its change. They can be 0 on every item and fail nothing."""
    settings = result.settings
    return [
        name
        for name, metric in result.summary.metrics.items()
        if metric.threshold is None
        and name not in settings.fail_under
        and name not in settings.max_regression
    ]


def aggregates(result: ExperimentResult) -> dict[str, float]:
    """The experiment-level scores: each metric's mean, and the pass rate."""
    scores = {f"{name}.mean": m.mean for name, m in result.summary.metrics.items() if m.mean is not None}
    if result.summary.pass_rate is not None:
        scores["pass_rate"] = result.summary.pass_rate
    return scores
