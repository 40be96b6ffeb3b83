"""What is sent to the Opik server, in the formats the Opik SDK writes, so that the Opik UI and
SDK read it as their own: an experiment and its metadata (the SDK's resume state, and this
plugin's plan), one trace per trial attempt, the experiment item that links it, the spans of the
app under it (``@opik.track``), its feedback scores, a conversation's turns as traces of a thread
and its scores as the thread's, and the experiment's aggregate scores; and a feedback score read
back as a score.

Each write for the server is a :data:`Message` of the spool's outbox.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from pytest_opik_eval.ids import uuid7_for
from pytest_opik_eval.store.opik.datasets import RemoteExperiment
from pytest_opik_eval.store.opik.spool import Message
from pytest_opik_eval.store.records import (
    TURN_TAG,
    ExperimentRecord,
    PlannedTrial,
    RunRecord,
    ScoreRecord,
    SpanRecord,
)

PENDING_KEY = "_opik_evaluation_pending"
RESUME_KEY = "_opik_resume"  # the Opik SDK's resume state, so opik.evaluate_resume() works too
OURS_KEY = "_pytest_opik_eval"  # what this plugin needs beyond it: the plan, the item id mapping
RESCORE_KEY = "rescore_of"  # a rescore's experiment: the experiment whose outputs it scored again
# The judges' calibrations against human labels, as the JSON report's: a key without a dot, so
# that the Opik UI's filters on the experiment's metadata can name it.
CALIBRATIONS_KEY = "judge_calibrations"
# The judges by the names of the scores they give, as learned when their trials were scored
# (``ExperimentRecord.judges``, which the record in OURS_KEY holds as the experiment was created).
JUDGES_KEY = "judges"


@dataclass
class TrialInfo:
    """What a trace says of its trial."""

    experiment_id: str
    item: dict[str, Any]
    trial: int
    node_id: str
    server_item_id: str


@dataclass
class AttemptInfo:
    """What a trace says of its attempt, as far as it got."""

    trial_id: str
    started: str
    link_id: str  # the id of the experiment item that ties its trace to the experiment
    output: dict[str, Any] | None = None
    errors: list[dict[str, Any]] = field(default_factory=list)
    score_metadata: dict[str, dict[str, Any]] = field(default_factory=dict)  # score name -> metadata
    score_samples: dict[str, list[float]] = field(default_factory=dict)  # score name -> judge samples
    passed: bool | None = None
    task_span: SpanRecord | None = None  # sent again with its output, once the output is known
    thread_id: str | None = None  # a conversation's: the thread of its turns' traces
    turn_traces: list[Message] = field(default_factory=list)  # a conversation's: sent once scored


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


# -- the experiment ---------------------------------------------------------------------------


def resume_state(experiment: ExperimentRecord, remote: RemoteExperiment, dataset_size: int) -> dict[str, Any]:
    """The Opik SDK's resume state of an experiment on a dataset that holds ``dataset_size`` items."""
    if remote.version_name is None:
        return {
            "schema_version": 1,
            "resumable": False,
            "non_resumable_reason": "the server's dataset has no versions",
        }
    selection = experiment.selection
    exact = selection.item_ids is None and selection.sampler is None
    return {
        "schema_version": 1,
        "resumable": True,
        "default_runs_per_item": selection.trial_count,
        "dataset_filter_string": selection.filter,
        "dataset_version_name": remote.version_name,
        "nb_samples": selection.nb_samples,
        # The SDK re-selects items from the pinned version with the filter and nb_samples;
        # anything else (ids, a sampler, a dataset that holds more items) needs the ids.
        "requires_local_checkpoint": not exact or len(set(remote.item_ids.values())) != dataset_size,
    }


def experiment(
    run: RunRecord,
    record: ExperimentRecord,
    remote: RemoteExperiment,
    planned: Sequence[PlannedTrial],
    state: Mapping[str, Any],
    project: str,
) -> dict[str, Any]:
    """The experiment as the SDK creates it; its metadata holds the resume ``state``, what this
    plugin needs to resume it on another machine (its run, record and plan), and for a rescore
    the experiment it scored again."""
    whole_plan = len(planned) == len(record.items) * record.selection.trial_count
    ours = {
        "run": run.model_dump(),
        "record": record.model_dump(exclude={"items"}),
        "remote": remote.model_dump(),
        "planned": None if whole_plan else [[t.dataset_item_id, t.trial] for t in planned],
    }
    metadata: dict[str, Any] = {RESUME_KEY: json.dumps(state), OURS_KEY: ours}
    if record.rescore_of is not None:
        # Where the Opik UI shows it: this experiment scored the outputs of that one again.
        metadata[RESCORE_KEY] = record.rescore_of
    return {
        "id": record.id,
        "name": record.name,
        "dataset_name": remote.dataset_name,
        "project_name": project,
        "metadata": metadata,
        "type": "regular",
        "evaluation_method": "dataset",
        **({"dataset_version_id": remote.version_id} if remote.version_id else {}),
    }


def experiment_scores(experiment_id: str, aggregates: Mapping[str, float]) -> list[Message]:
    """The experiment's aggregate scores, if it has any."""
    scores = [{"name": name, "value": value} for name, value in aggregates.items()]
    if not scores:
        return []
    return [("experiment_scores", json.dumps({"id": experiment_id, "scores": scores}))]


def experiment_metadata(experiment_id: str, key: str, value: Any) -> list[Message]:
    """One key of the experiment's metadata set, the others kept (the sender reads them first: the
    server replaces the whole metadata)."""
    return [("experiment_metadata", json.dumps({"id": experiment_id, "key": key, "value": value}))]


# -- each trial attempt -----------------------------------------------------------------------


def link(attempt_id: str, trial: TrialInfo, project: str) -> dict[str, Any]:
    """The experiment item that ties an attempt's trace to the experiment."""
    return {
        "experiment_id": trial.experiment_id,
        "dataset_item_id": trial.server_item_id,
        "trace_id": attempt_id,
        "project_name": project,
    }


def experiment_item(attempt_id: str, attempt: AttemptInfo, trial: TrialInfo, project: str) -> Message:
    return "experiment_item", json.dumps({"id": attempt.link_id, **link(attempt_id, trial, project)})


def experiment_item_delete(attempt: AttemptInfo) -> Message:
    """Unlinks the attempt's trace from the experiment (the trace stays in the project)."""
    return "experiment_item_delete", json.dumps({"ids": [attempt.link_id]})


def trace(
    attempt_id: str,
    attempt: AttemptInfo,
    trial: TrialInfo,
    project: str,
    *,
    completed: bool,
    replaced_by: str | None = None,
) -> Message:
    """The attempt's trace: pending (no output) until it completes."""
    metadata: dict[str, Any] = {
        PENDING_KEY: not completed,
        "pytest_node_id": trial.node_id,
        "trial": trial.trial,
        "dataset_item_id": trial.item["id"],
    }
    if replaced_by is not None:
        metadata["replaced_by"] = replaced_by  # a rerun in the same session completed instead
    if attempt.errors:
        metadata["scoring_errors"] = attempt.errors
    if attempt.score_metadata:
        metadata["score_metadata"] = attempt.score_metadata
    if attempt.score_samples:
        metadata["score_samples"] = attempt.score_samples
    if completed:
        metadata["passed"] = attempt.passed  # the verdict, which Opik does not otherwise keep
    if attempt.thread_id is not None:
        # The conversation it held: an experiment item points at one trace, this one.
        metadata["thread_id"] = attempt.thread_id
    payload = {
        "id": attempt_id,
        "project_name": project,
        "name": "evaluation_task",
        "start_time": attempt.started,
        "input": trial.item,
        # Empty until the attempt completes: the released Opik SDK counts a trace with an
        # output as a completed trial.
        "output": attempt.output if completed else None,
        "metadata": metadata,
        "last_updated_at": now(),
    }
    if completed:
        payload["end_time"] = now()
    # For the sender only (never sent): to link the trace again if it must get a new id.
    payload["_link"] = link(attempt_id, trial, project)
    return "trace", json.dumps(payload, default=repr)


def spans(
    spans: Sequence[SpanRecord], project: str, *, task_output: Mapping[str, Any] | None = None
) -> Message:
    """The spans of an attempt's trace (its task span first, see ``run/trial_trace.py``) as the Opik
    SDK sends them (``CreateSpanMessage.as_payload_dict``, its ``None`` fields left out), to
    ``spans/batch``: ``total_estimated_cost`` is the cost the app set on the span, never an
    estimate of ours, so the server estimates the rest as it does for ``opik.evaluate()``.
    ``task_output`` is the task span's output (the attempt's output), once it is known. A span's
    trace is its attempt's trace: ``trace_id`` is the attempt id, as the trace's own id."""
    stamp = now()
    payload = [_span(span, project, stamp) for span in spans]
    if task_output is not None and payload:
        payload[0]["output"] = _json_field(task_output)
    return "spans", json.dumps({"spans": payload}, default=repr)


def turn_trace_id(attempt_id: str, number: int) -> str:
    """The id of a conversation's turn ``number`` (from 1): the same whenever it is sent."""
    return uuid7_for(attempt_id, f"turn {number}")


def turn_traces(attempt_id: str, spans: Sequence[SpanRecord], project: str) -> list[Message]:
    """A conversation's turns (its spans tagged ``TURN_TAG``) as traces of one thread, its id the
    attempt's, as the Opik SDK's ``run_simulation`` logs a conversation: the Opik UI shows them as
    the thread's messages. Their spans stay under the attempt's trace, which names the thread
    in its metadata; the turn traces are linked to no experiment (``_link`` None)."""
    stamp = now()
    turns = [span for span in spans if span.tags and TURN_TAG in span.tags]
    return [
        (
            "trace",
            json.dumps(
                {
                    "id": turn_trace_id(attempt_id, number),
                    "project_name": project,
                    "name": "conversation_turn",
                    "start_time": _utc(span.start_time) or stamp,
                    "end_time": _utc(span.end_time),
                    "input": _json_field(span.input),
                    "output": _json_field(span.output),
                    "metadata": {"turn": number, "trial_trace_id": attempt_id},
                    "thread_id": attempt_id,
                    "last_updated_at": stamp,
                    "_link": None,
                },
                default=repr,
            ),
        )
        for number, span in enumerate(turns, 1)
    ]


def _span(span: SpanRecord, project: str, stamp: str) -> dict[str, Any]:
    error = None
    if span.error is not None:
        # The REST ErrorInfoWrite requires a traceback; the task span's error has none.
        error = {
            "exception_type": span.error.get("exception_type", "Exception"),
            "message": span.error.get("message"),
            "traceback": span.error.get("traceback", ""),
        }
    fields = {
        "id": span.id,
        "trace_id": span.trace_id,
        "parent_span_id": span.parent_span_id,
        "project_name": project,
        "name": span.name,
        "type": span.type,
        "start_time": _utc(span.start_time) or stamp,
        "end_time": _utc(span.end_time),
        "input": _json_field(span.input),
        "output": _json_field(span.output),
        "metadata": _json_field(span.metadata),
        "tags": span.tags,
        "usage": span.usage,
        "model": span.model,
        "provider": span.provider,
        "error_info": error,
        "total_estimated_cost": span.total_cost,
        "last_updated_at": stamp,
        "source": "experiment",  # as opik.evaluate() sends its spans
    }
    return {key: value for key, value in fields.items() if value is not None}


def _json_field(value: Any) -> Any:
    """A span's input, output or metadata as the REST API takes it: an object, a list of objects
    or a string (a field cut to its bounded size is its JSON text); anything else, wrapped."""
    if value is None or isinstance(value, dict | str):
        return value
    if isinstance(value, list) and all(isinstance(entry, dict) for entry in value):
        return value
    return {"value": value}


def _utc(moment: str | None) -> str | None:
    # As the SDK writes its times (and ``now``): UTC with a Z.
    if moment is not None and moment.endswith("+00:00"):
        return moment[: -len("+00:00")] + "Z"
    return moment


def scoring_errors(scores: Sequence[ScoreRecord]) -> list[dict[str, Any]]:
    """Failed scores are not sent as scores (as with the SDK): their errors go to the trace."""
    return [{"name": s.name, "error": s.reason} for s in scores if s.scoring_failed]


def feedback_scores(attempt_id: str, scores: Sequence[ScoreRecord], project: str) -> list[Message]:
    """The scores that did not fail, as feedback scores on the attempt's trace, if any."""
    feedback = [
        _feedback(attempt_id, s.name, s.value, s.reason, project) for s in scores if not s.scoring_failed
    ]
    return [("feedback_scores", json.dumps({"scores": feedback}))] if feedback else []


def thread_feedback_scores(thread_id: str, scores: Sequence[ScoreRecord], project: str) -> list[Message]:
    """The scores that did not fail, as feedback scores on a conversation's thread, if any, as
    the Opik SDK's ``evaluate_threads`` logs a conversation's scores
    (``ThreadsClient.log_threads_feedback_scores``, to ``traces/threads/feedback-scores``). The
    thread needs no closing first: the server takes scores on an active thread, and a score of
    the same name replaces the thread's earlier one."""
    feedback = [
        _feedback(thread_id, s.name, s.value, s.reason, project, key="thread_id")
        for s in scores
        if not s.scoring_failed
    ]
    return [("thread_feedback_scores", json.dumps({"scores": feedback}))] if feedback else []


def turn_feedback_scores(
    attempt_id: str, turns: int, scores: Sequence[ScoreRecord], project: str
) -> list[Message]:
    """Each turn's own score of a per-turn metric (``PerTurn``: its metadata's ``turns``, one
    ``[value, reason]`` per reply) as a feedback score on that turn's trace, under the metric's
    name, if the conversation's ``turns`` traces and the metric's turns agree."""
    feedback = [
        _feedback(turn_trace_id(attempt_id, number), s.name, value, reason, project)
        for s in scores
        if not s.scoring_failed
        for number, (value, reason) in enumerate(_per_turn(s, turns), 1)
    ]
    return [("feedback_scores", json.dumps({"scores": feedback}))] if feedback else []


def _per_turn(score: ScoreRecord, turns: int) -> list[tuple[float, str | None]]:
    """The turns' ``(value, reason)`` of a per-turn metric's score, one per turn trace; none for
    any other score (a metadata of another shape is a metric's own)."""
    found = (score.metadata or {}).get("turns")
    if not isinstance(found, list) or len(found) != turns:
        return []
    pairs = []
    for entry in found:
        if not (isinstance(entry, list) and len(entry) == 2):
            return []
        value, reason = entry
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            return []
        pairs.append((float(value), reason if isinstance(reason, str) else None))
    return pairs


def _feedback(
    target: str, name: str, value: float, reason: str | None, project: str, *, key: str = "id"
) -> dict[str, Any]:
    # As the Opik SDK's FeedbackScoreMessage.as_payload_dict: a thread's names its thread_id.
    return {
        key: target,
        "project_name": project,
        "name": name,
        "value": value,
        "source": "sdk",
        **({"reason": reason} if reason else {}),
    }


# -- read back --------------------------------------------------------------------------------


def score_record(score: Mapping[str, Any]) -> ScoreRecord:
    """A trace's feedback score as a score record; a value that is not a finite number (another
    tool wrote it) is a failed score that says what the server holds."""
    value = score.get("value")
    name = str(score.get("name"))
    if isinstance(value, int | float) and math.isfinite(value):
        return ScoreRecord(name=name, value=float(value), reason=score.get("reason"))
    return ScoreRecord(
        name=name,
        value=0.0,
        reason=f"the Opik server holds {value!r} for this score, which is not a finite number",
        scoring_failed=True,
    )
