"""A trial's row: its values as the store writes them (JSON), and the row read back as a
``TrialRecord``. A damaged row (an earlier version wrote a metric's NaN as null; a byte went
wrong on a disk) is salvaged: what can be read is read, the rest is said, and one bad row never
makes the whole store unreadable.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from json.encoder import encode_basestring
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter

from pytest_opik_eval.escaping import shorten
from pytest_opik_eval.store.local.schema import OPTIONAL_TABLES
from pytest_opik_eval.store.records import ScoreRecord, SpanRecord, Timings, TrialRecord, Usage

_SHOWN = 120  # characters of an unreadable stored value quoted in a message

_scores_json = TypeAdapter(list[ScoreRecord])
_spans_json = TypeAdapter(list[SpanRecord])
_timings_json = TypeAdapter(Timings)
_usage_json = TypeAdapter(Usage)
_NO_TIMINGS = Timings()
# Made once: json.dumps with options builds an encoder on every call. A value JSON cannot hold is
# kept as its repr rather than losing the whole output.
output_json = json.JSONEncoder(ensure_ascii=False, default=repr).encode


def now() -> str:
    """The time as the store writes it (when an attempt started), as
    ``datetime.now(timezone.utc).isoformat(timespec="milliseconds")`` writes it: put together from
    the clock directly, its date and time to the second formatted once a second, as it is made
    for every trial."""
    global _second_text
    second, millisecond = divmod(time.time_ns() // 1_000_000, 1000)
    known, text = _second_text
    if second != known:
        text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        # One tuple, replaced whole: stores in other threads never read one second's text as another's.
        _second_text = (second, text)
    return f"{text}.{millisecond:03d}+00:00"


_second_text = (-1, "")  # the last second formatted, and its text


def scores_text(scores: Sequence[ScoreRecord]) -> str:
    """A trial's scores as stored, without the fields that are None (metadata, a reason): an
    earlier version, which knows no metadata, still reads every score that has none."""
    return _scores_json.dump_json(list(scores), exclude_none=True).decode()


def timings_text(task_seconds: float | None, metric_seconds: Mapping[str, float]) -> str:
    """An attempt's timings as stored: the JSON of a ``Timings`` (validated when read), written
    directly, as ``output_json`` would write it: a model and its dump cost several times more,
    and so does the encoder, on every trial. The values are finite: clock differences."""
    metrics = ", ".join(
        [f"{encode_basestring(name)}: {float(value)!r}" for name, value in metric_seconds.items()]
    )
    if task_seconds is None:
        return f'{{"metric_seconds": {{{metrics}}}}}'
    return f'{{"metric_seconds": {{{metrics}}}, "task_seconds": {float(task_seconds)!r}}}'


def spans_text(spans: Sequence[SpanRecord]) -> str:
    return _spans_json.dump_json(list(spans), exclude_none=True).decode()


def spans_of(text: str) -> list[SpanRecord]:
    """The spans stored as ``text``; ValueError when they cannot be read."""
    return _spans_json.validate_json(text)


def trials_query(*, spans: bool, tables: frozenset[str]) -> str:
    """The query of an experiment's trials (its one parameter), each with its completed attempt
    (or its latest) and that attempt's usage summed, as ``trial_record`` reads its rows; with the
    attempt's ``spans`` too, or when the store has no sum for them (written by an earlier
    version). ``tables``: which of the optional tables the file has."""
    has_spans, has_timings, has_usage = (name in tables for name in OPTIONAL_TABLES)
    if not has_spans:
        spans_column = "NULL"
    elif spans or not has_usage:
        spans_column = "s.spans"
    else:
        spans_column = "CASE WHEN u.usage IS NULL THEN s.spans END"  # not even read from the file
    return """
        SELECT t.id, t.dataset_item_id, t.trial, t.node_id, t.completed_attempt,
               (SELECT count(*) FROM attempts WHERE trial_id = t.id),
               a.session_id, a.output, a.scores, a.passed, {spans}, {timings}, {usage}
        FROM trials t
        LEFT JOIN attempts a ON a.id = coalesce(
            t.completed_attempt,
            (SELECT id FROM attempts WHERE trial_id = t.id ORDER BY id DESC LIMIT 1)
        )
        {join_spans}
        {join_timings}
        {join_usage}
        WHERE t.experiment_id = ? ORDER BY t.position
        """.format(
        # Joined on their primary keys: one index lookup per row each.
        spans=spans_column,
        timings="tm.timings" if has_timings else "NULL",
        usage="u.usage" if has_usage else "NULL",
        join_spans="LEFT JOIN attempt_spans s ON s.attempt_id = a.id" if has_spans else "",
        join_timings="LEFT JOIN attempt_timings tm ON tm.attempt_id = a.id" if has_timings else "",
        join_usage="LEFT JOIN attempt_usage u ON u.attempt_id = a.id" if has_usage else "",
    )


def trial_record(experiment_id: str, row: Sequence[Any], unreadable: list[tuple[str, str]]) -> TrialRecord:
    """The trial of a ``trials_query`` row; what could not be read is added to ``unreadable``
    (the trial's node id, and what the store holds)."""
    try:
        output = json.loads(row[7]) if row[7] is not None else None
        scores = _read_scores(row[8])
        passed = bool(row[9]) if row[9] is not None else None
    except ValueError:  # pydantic's ValidationError is one
        # One bad row must not make the whole store unreadable: read what can be read.
        output, scores, passed, what = _salvage_row(row)
        unreadable.append((row[3], what))
    try:
        spans = _spans_json.validate_json(row[10]) if row[10] else []
    except ValueError:
        spans = []  # the trial's results stand without its spans
        unreadable.append((row[3], f"spans {shorten(str(row[10]), _SHOWN)}"))
    try:
        timings = _timings_json.validate_json(row[11]) if row[11] else _NO_TIMINGS
    except ValueError:
        timings = _NO_TIMINGS
        unreadable.append((row[3], f"timings {shorten(str(row[11]), _SHOWN)}"))
    try:
        usage = _usage_json.validate_json(row[12]) if row[12] else None
    except ValueError:
        usage = None  # computed from the spans instead, if they can be read
        unreadable.append((row[3], f"usage {shorten(str(row[12]), _SHOWN)}"))
    return TrialRecord(
        id=row[0],
        experiment_id=experiment_id,
        dataset_item_id=row[1],
        trial=row[2],
        node_id=row[3],
        status="completed" if row[4] else "pending",
        attempts=row[5],
        session_id=row[6],
        output=output,
        scores=scores,
        # A verdict counts only once the trial completed; pending trials have none.
        passed=passed if row[4] else None,
        spans=spans,
        task_seconds=timings.task_seconds,
        metric_seconds=dict(timings.metric_seconds),
        usage=usage,
    )


def unreadable_notice(path: Path, experiment_id: str, rows: list[tuple[str, str]]) -> str:
    """One line for the rows ``trial_record`` could not read as written."""
    node_id, error = rows[0]
    more = f" and {len(rows) - 1} more" if len(rows) > 1 else ""
    return (
        f"the eval store {path} holds trial data that could not be read as written: "
        f"{node_id}{more} of experiment {experiment_id} ({error}); an unreadable score counts as "
        "a failed score, and the rest of the store is read as usual"
    )


def _read_scores(text: str | None) -> list[ScoreRecord]:
    # Parsed and validated by pydantic-core in one step: 4x quicker than model_construct on
    # json.loads, which counts when the end of a session reads 100,000 trials.
    return _scores_json.validate_json(text) if text else []


def _salvage_scores(text: str) -> list[ScoreRecord]:
    """The scores of a row that does not validate (an earlier version wrote a metric's NaN as
    null): each score that cannot be read becomes a failed score saying what the store holds."""
    try:
        stored = json.loads(text)
    except ValueError:
        stored = None
    if not isinstance(stored, list):
        return [ScoreRecord(name="?", value=0.0, reason=_unreadable(text), scoring_failed=True)]
    scores = []
    for entry in stored:
        try:
            scores.append(ScoreRecord.model_validate(entry))
        except ValueError:
            name = entry.get("name") if isinstance(entry, dict) else None
            value = entry.get("value") if isinstance(entry, dict) else entry
            scores.append(
                ScoreRecord(
                    name=name if isinstance(name, str) else "?",
                    value=0.0,
                    reason=_unreadable(json.dumps(value)),
                    scoring_failed=True,
                )
            )
    return scores


def _salvage_row(
    row: Sequence[Any],
) -> tuple[dict[str, Any] | None, list[ScoreRecord], bool | None, str]:
    """A trial row's output, scores and verdict, as far as they can be read, and what could not be."""
    unread = []
    try:
        output = json.loads(row[7]) if row[7] is not None else None
    except ValueError:
        output = {"output": _unreadable(str(row[7]), "the output")}
        unread.append(f"output {shorten(str(row[7]), _SHOWN)}")
    if not isinstance(output, dict | None):
        output = {"output": output}
    try:
        scores = _read_scores(row[8])
    except ValueError:
        scores = _salvage_scores(row[8])
        unread.append(f"scores {shorten(str(row[8]), _SHOWN)}")
    failed = any(s.scoring_failed for s in scores)
    passed = False if failed else (bool(row[9]) if row[9] is not None else None)
    return output, scores, passed, "; ".join(unread)


def _unreadable(stored: str, what: str = "this score") -> str:
    return f"the store holds {shorten(stored, _SHOWN)} for {what}, which cannot be read"
