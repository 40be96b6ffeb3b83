"""What the verdict reads of a trial: a trial with its scores (a store's trial record, or a
report's), its scores gathered by metric and item, the verdicts of the trials the Opik SDK
completed, and the completed trial handed to ``pytest_opik_eval_trial_finished``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, NamedTuple, Protocol

from pytest_opik_eval.store.records import ScoreRecord, TrialRecord


class ScoredTrial(Protocol):
    """What the summary and the item verdicts read of a trial (a store's trial record, or a
    report's trial)."""

    @property
    def dataset_item_id(self) -> str: ...

    @property
    def status(self) -> Literal["completed", "pending"]: ...

    @property
    def passed(self) -> bool | None: ...

    @property
    def scores(self) -> Sequence[ScoreRecord]: ...


@dataclass(frozen=True)
class TrialResult:
    """A completed trial, as handed to ``pytest_opik_eval_trial_finished``."""

    experiment_id: str
    node_id: str
    item: dict[str, Any]
    trial: int
    output: dict[str, Any]
    scores: list[ScoreRecord]
    passed: bool


class ScoresByItem(NamedTuple):
    """Each metric's computed scores by item id (an item's trials are one cluster), and its
    scores that failed to compute, counted."""

    values: dict[str, dict[str, list[float]]]
    failed: dict[str, int]


def scores_by_item(completed: Sequence[ScoredTrial]) -> ScoresByItem:
    """The completed trials' scores by metric and item: one pass over them (200,000 are
    common)."""
    by_item: dict[str, dict[str, list[float]]] = {}
    failed: dict[str, int] = {}
    for trial in completed:
        item = trial.dataset_item_id
        for score in trial.scores:
            if score.scoring_failed:
                failed[score.name] = failed.get(score.name, 0) + 1
                continue
            metric = by_item.get(score.name)
            if metric is None:
                metric = by_item[score.name] = {}
            values = metric.get(item)
            if values is None:
                metric[item] = [score.value]
            else:
                values.append(score.value)
    return ScoresByItem(by_item, failed)


def with_verdicts(trials: Sequence[TrialRecord], thresholds: Mapping[str, float | None]) -> list[TrialRecord]:
    """The trials, those the Opik SDK completed given a verdict: they have scores and none (an
    SDK experiment has no thresholds), and counting them failed would make every item of an SDK
    experiment finished by pytest a failure, and its comparisons fixes. Such a trial passes when
    no score failed and each score meets its threshold in ``thresholds`` (the experiment's in
    force); a score without one cannot fail it. Unlike the scorer (``run/scoring.py``), a
    threshold whose score the SDK's metrics did not give fails nothing: they were not the test's."""
    if all(t.passed is not None or t.status != "completed" for t in trials):
        return list(trials)  # the common case, this plugin's trials only: one pass, no copy
    return [
        replace(t, passed=_meets(t.scores, thresholds)) if t.passed is None and t.status == "completed" else t
        for t in trials
    ]


def _meets(scores: Sequence[ScoreRecord], thresholds: Mapping[str, float | None]) -> bool:
    for s in scores:
        threshold = thresholds.get(s.name)
        if s.scoring_failed or (threshold is not None and s.value < threshold):
            return False
    return True
