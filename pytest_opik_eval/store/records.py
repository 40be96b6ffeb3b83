"""What the store holds of runs, experiments and trials: pydantic models for what is written to
disk as JSON (a run, an experiment with its settings, a score, a span, usage), and the plain
records the store hands back (a trial, its state, a run's summary)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer


class _Written(BaseModel):
    # Strict on what we write; a newer version adding fields bumps the schema version instead.
    model_config = ConfigDict(extra="forbid", frozen=True)


def _left_out_at_default(model: BaseModel, data: dict[str, Any], *names: str) -> dict[str, Any]:
    """``data`` without the fields ``names`` that hold their default: an earlier version, which
    forbids unknown fields, still reads a record that does not use them."""
    for name in names:
        if getattr(model, name) == type(model).model_fields[name].default:
            data.pop(name, None)
    return data


class ScoreRecord(_Written):
    name: str
    value: float = Field(allow_inf_nan=False)  # JSON has no NaN: it would be written as null
    reason: str | None = None
    scoring_failed: bool = False
    # The metric's ScoreResult.metadata, made JSON-safe by the scorer. Last, and left out of the
    # store when None (see local/rows.scores_text), so a score without it is stored as before.
    metadata: dict[str, Any] | None = None
    # judge_samples > 1: the values of an LLM judge's samples of this score, in order; ``value``
    # is their mean, or their majority when each is 0 or 1 (``reason`` and ``metadata`` are the
    # first sample's). None: scored once. Left out of the store when None, as ``metadata`` is.
    samples: list[float] | None = None


class SpanRecord(_Written):
    """One span of a trial's trace: the task span (the root) or a span the app made with the Opik
    SDK (``@opik.track`` and its integrations), as the SDK would send it to an Opik server. The
    trace is the attempt: ``trace_id`` is the attempt's id."""

    id: str
    trace_id: str
    parent_span_id: str | None = None  # None for the task span
    name: str | None = None
    type: str = "general"  # "general", "llm", "tool", "guardrail"... as the SDK names them
    start_time: str | None = None  # ISO 8601, UTC
    end_time: str | None = None
    # JSON-safe copies (a value JSON cannot hold is its repr), each cut to a bounded size.
    input: Any = None
    output: Any = None
    metadata: Any = None
    tags: list[str] | None = None
    model: str | None = None
    provider: str | None = None
    # As the SDK sends it: prompt_tokens, completion_tokens, total_tokens, original_usage.*
    usage: dict[str, int] | None = None
    total_cost: float | None = Field(default=None, allow_inf_nan=False)  # USD, set by the app
    # USD: the span's own total_cost ("span"), or, for a span that reported tokens and no cost,
    # genai-prices' estimate from its model and usage ("price table"; see run/pricing.py). A call
    # a provider's batch answered (--eval-batch): the table's batch price ("batch price table"),
    # or half the live price ("batch rule"), the live one kept in live_cost.
    cost: float | None = Field(default=None, allow_inf_nan=False)
    cost_source: Literal["span", "price table", "batch price table", "batch rule"] | None = None
    live_cost: float | None = Field(default=None, allow_inf_nan=False)
    unpriced: str | None = None  # why a span with tokens has no cost: "unknown model 'foo-1'"...
    error: dict[str, str] | None = None  # exception_type, message, traceback (as the SDK's error_info)

    @property
    def prompt_tokens(self) -> int | None:
        return None if self.usage is None else self.usage.get("prompt_tokens")

    @property
    def completion_tokens(self) -> int | None:
        return None if self.usage is None else self.usage.get("completion_tokens")

    @property
    def total_tokens(self) -> int | None:
        return None if self.usage is None else self.usage.get("total_tokens")


class _Summed(BaseModel):
    # Written with a trial's spans and in the JSON report (whose schema they are part of: see
    # verdict/model.py): not frozen, as the report's models are not.
    model_config = ConfigDict(extra="forbid")


class UsageTotals(_Summed):
    """The sums over some of a trial's spans (or an experiment's trials) of what they reported."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    # USD: the sum of the spans' costs, their own (set by the app or an integration) or, for a
    # span with a model and tokens and no cost, genai-prices' estimate; None when none has one.
    cost: float | None = None
    spans: int = 0  # the spans that reported usage or a cost
    # The spans with tokens and no cost, by why: {"unknown model 'foo-1'": 3}. Their cost is
    # missing from ``cost``, which is then a floor.
    unpriced: dict[str, int] = {}


# The tag of a conversation's simulated user's spans (run/conversation.py): what they and the
# spans under them report is the eval's, not the app's.
SIMULATOR_TAG = "simulated_user"
# The tag of a conversation's turn spans: with the Opik backend, each is also a trace of the
# conversation's thread (store/opik/payloads.turn_traces).
TURN_TAG = "conversation_turn"


class Usage(_Summed):
    """What the app's spans (under the task span), the judges' (under the metric spans) and a
    simulated user's (under its spans, see ``SIMULATOR_TAG``) reported, apart: a judge's or a
    simulated user's tokens are the eval's cost, not the app's."""

    app: UsageTotals | None = None  # None: no span of the app reported usage
    judge: UsageTotals | None = None
    simulator: UsageTotals | None = None

    @model_serializer(mode="wrap")
    def _without_simulator(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # A trial without a simulated user reads as before.
        return _left_out_at_default(self, handler(self), "simulator")


class Timings(_Written):
    """How long an attempt's task and each of its metrics took (wall time, ``time.perf_counter``),
    measured for every trial, with or without the Opik SDK."""

    task_seconds: float | None = Field(default=None, allow_inf_nan=False)  # a task that raised too
    metric_seconds: dict[str, float] = Field(default_factory=dict)  # by metric name


class DatasetRecord(_Written):
    source: str  # the path as written in the marker, or a description of a list or callable
    path: str | None  # the resolved file, to check later whether it changed
    version: str  # content hash of all the dataset's items when the experiment was created
    name: str | None = None  # the server dataset a file or list is uploaded to, if not the default
    file_hash: str | None = None  # SHA-256 of the file's bytes, to notice an edit on resume


class Selection(_Written):
    """The marker arguments that chose the items and trials; resume replays them as stored."""

    filter: str | None = None
    item_ids: list[str] | None = None
    nb_samples: int | None = None
    sampler: str | None = None
    trial_count: int = 1
    labelled: bool = False  # --eval-calibrate: only the items with human labels

    @model_serializer(mode="wrap")
    def _without_labelled(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _left_out_at_default(self, handler(self), "labelled")


GateMode = Literal["normal", "strict"]


class LatencyLimit(_Written):
    """A latency gate's bound: the task latency's ``percentile`` (nearest rank) at most ``seconds``."""

    seconds: float
    percentile: float = 95.0


class GateSettings(_Written):
    """The gates, thresholds and soft setting in force when the experiment was created; a
    resume gates with them unless its command line gives new ones."""

    fail_under: dict[str, float] = {}  # metric -> minimum mean over the completed trials
    min_pass_rate: float | None = None  # share of trials (of items with pass_threshold) passed
    pass_threshold: int | None = None  # an item passes when this many of its trials passed
    max_regression: dict[str, float] = {}  # metric -> largest drop of the mean from the baseline
    soft: bool = False  # trials that miss thresholds do not fail the session; the gates decide
    thresholds: dict[str, float | None] = {}  # score name -> the per-trial threshold in force
    # "normal": a regression gate fails on a significant drop beyond its delta, an absolute gate
    # on its estimate; "strict": a gate passes only when its interval clears the bound.
    mode: GateMode = "normal"
    confidence: float = 0.95  # the level of every interval and test
    # USD. Per item: no item's mean cost over its completed trials, the app's spans only, above
    # it. Per run: the experiment's whole spend (the app's and the judges'), every session's.
    max_cost_per_item: float | None = None
    max_cost_per_run: float | None = None
    max_latency: LatencyLimit | None = None  # on the task latency, over the completed trials
    # Strict mode: the least a judge's calibration may have of each figure ("kappa",
    # "sensitivity", "specificity") for a gate on its corrected pass rate.
    judge_floor: dict[str, float] = {}

    @model_serializer(mode="wrap")
    def _without_judge_floor(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _left_out_at_default(self, handler(self), "judge_floor")

    def soft_trials(self) -> bool:
        """Whether a trial that misses its thresholds is soft-failed rather than failed: it does
        not fail the session by itself, the gates (and with ``pass_threshold`` its item's k-of-n
        verdict) decide (``--eval-soft``, or ``pass_threshold``)."""
        return self.soft or self.pass_threshold is not None

    def has_gates(self) -> bool:
        return bool(
            self.fail_under
            or self.min_pass_rate is not None
            or self.max_regression
            or self.max_cost_per_item is not None
            or self.max_cost_per_run is not None
            or self.max_latency is not None
        )


class ExperimentRecord(_Written):
    id: str
    run_id: str
    name: str
    test: str  # node id of the test function
    params: str  # pytest id of the test's other parametrize arguments ("" when none)
    created_at: str
    dataset: DatasetRecord
    selection: Selection
    items: list[dict[str, Any]]  # the snapshot of the selected items, replayed by resume
    gates: GateSettings = GateSettings()
    # A rescore's (--eval-rescore): the experiment whose stored outputs this one scored again.
    rescore_of: str | None = None
    # A rescore's --eval-metric specs, scored with in place of the marker's metrics: a resume of
    # the rescore (its judges' batches collected) scores with the same ones.
    metric_specs: list[str] = []
    # The item key of the human labels in ``items`` (the marker's labels_field, or ini
    # eval_labels_field): calibration reads them; the task and the metrics never saw them.
    labels_field: str = "labels"  # options.LABELS_FIELD, the default
    # The LLM judges among its metrics, by the name of the scores they give: each one's identity
    # (run/judges.py), which a calibration against human labels holds for. A judge is recorded
    # under its own name as the run is created, then under the names of the scores its trials
    # return when they differ (run/judges.ScoreNames, patched in with ``learned_judges``).
    judges: dict[str, str] = {}
    # The times each LLM judge scored an output (judge_samples): a resume samples as many.
    judge_samples: int = Field(default=1, ge=1)

    @model_serializer(mode="wrap")
    def _without_rescore_of(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Every experiment that is not a rescore, labelled under another key, judged by an LLM
        # judge or sampling its judges reads as before.
        return _left_out_at_default(
            self, handler(self), "rescore_of", "metric_specs", "labels_field", "judges", "judge_samples"
        )


def learned_judges(judges: Mapping[str, str], update: Mapping[str, str | None]) -> dict[str, str]:
    """An experiment's ``judges`` with ``update`` applied: a score name with an identity is that
    judge's score, one with None is no judge's (a judge's own name that none of its scores has,
    or a name two metrics give)."""
    patched = {**judges, **update}
    return {score: judge for score, judge in patched.items() if judge is not None}


BudgetUnit = Literal["usd", "tokens"]


class BudgetSetting(_Written):
    """``--eval-budget``: the most a session may spend, in US dollars (the spans' cost) or in
    tokens (their total tokens), the app's and the judges'."""

    amount: float = Field(gt=0, allow_inf_nan=False)
    unit: BudgetUnit


class RunRecord(_Written):
    id: str
    created_at: str
    rootdir: str
    args: list[str]
    name: str | None = None  # given with --eval-run-id (e.g. the CI's run number); the id derives from it
    # The budget the run was started with: a resume without --eval-budget gets it afresh.
    budget: BudgetSetting | None = None


# One per trial, by the thousand (a run's plan, a resume's states, the trials read back at the
# end of a session): not frozen, since a frozen dataclass sets each field through
# object.__setattr__, which made building a TrialRecord four times the cost (about 6 us more,
# 30 ms in a session of 5,000 trials); nothing assigns a field after one is built.
@dataclass(slots=True)
class PlannedTrial:
    id: str
    experiment_id: str
    dataset_item_id: str
    trial: int
    node_id: str


@dataclass(slots=True)  # not frozen: see PlannedTrial
class TrialState:
    """A planned trial and whether it is completed: all that resume needs to select it."""

    id: str
    experiment_id: str
    dataset_item_id: str
    trial: int
    completed: bool


@dataclass(slots=True)  # not frozen: see PlannedTrial
class TrialRecord:
    """A planned trial with its latest attempt (its completed one, when it has one)."""

    id: str
    experiment_id: str
    dataset_item_id: str
    trial: int
    node_id: str
    status: Literal["completed", "pending"]
    attempts: int
    session_id: str | None  # the session of the attempt shown
    output: dict[str, Any] | None
    scores: list[ScoreRecord]
    passed: bool | None
    # The spans of the attempt shown, the task span first: empty when the app made none (or the
    # store was written by a version that did not record them), and, from a store that keeps
    # ``usage``, unless they were asked for (``Store.trials(..., spans=True)``): the verdict and
    # the reports need only ``usage``, and reading 100,000 trials' spans is most of a session's end.
    spans: list[SpanRecord] = field(default_factory=list)
    # The spans' usage, summed when they were recorded (verdict/usage.trial_usage; an empty Usage
    # when none reported any): None when the attempt has no spans, or when the store has no sum
    # for them (written by an earlier version), in which case ``spans`` are read.
    usage: Usage | None = None
    # The attempt's latency (see Timings): None and empty for a store that does not keep it.
    task_seconds: float | None = None
    metric_seconds: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class RunSummary:
    id: str
    created_at: str
    experiments: int
    trials: int
    completed: int
