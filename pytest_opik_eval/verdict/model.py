"""The report of a session's experiments: the JSON report's schema (``results`` computes it
from the store).

The published JSON Schema (``schema/eval-report.schema.json``) is generated from these models
by ``python -m pytest_opik_eval.verdict.model``; a test keeps the two in step.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from pytest_opik_eval.store.records import GateSettings, ScoreRecord

SCHEMA_VERSION: Literal[2] = 2


class _Report(BaseModel):
    model_config = ConfigDict(extra="forbid")


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


class MetricSummary(_Report):
    mean: float | None  # None when every score of the metric failed
    min: float | None
    max: float | None
    count: int  # scores that did not fail
    failed: int  # scores with scoring_failed
    threshold: float | None  # the per-trial threshold in force, if any
    pass_rate: float | None  # share of the scores that met the threshold (failed scores miss it)


class ExperimentSummary(_Report):
    trials: int
    completed: int
    pending: int
    passed: int
    failed: int
    pass_rate: float | None  # passed / completed
    metrics: dict[str, MetricSummary]


ItemStatus = Literal["passed", "failed", "pending"]
GateKind = Literal["fail_under", "min_pass_rate", "items", "max_regression", "pending"]


class ItemVerdict(_Report):
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
    detail: str


class MetricDelta(_Report):
    baseline_mean: float | None
    current_mean: float | None
    delta: float | None


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


class Report(_Report):
    schema_version: Literal[2] = SCHEMA_VERSION
    run_id: str | None
    resumed: str | None
    experiments: list[ExperimentReport]


def json_schema() -> dict[str, Any]:
    schema = Report.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "pytest-opik-eval report"
    return schema


if __name__ == "__main__":
    sys.stdout.write(json.dumps(json_schema(), indent=2, sort_keys=True) + "\n")
