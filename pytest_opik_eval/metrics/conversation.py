"""Scoring a conversation turn by turn: :class:`PerTurn` runs a single-answer metric on each of
a conversation's replies and aggregates the turns' scores by a rule."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from pytest_opik_eval.thresholds import own_threshold

from .base import BaseMetric, MetricComputationError, ScoreResult

Aggregate = Literal["all", "mean", "last"]
AGGREGATES: tuple[Aggregate, ...] = ("all", "mean", "last")


class PerTurn(BaseMetric):
    """Score every turn of a conversation (the ``eval_conversation`` fixture's output) with
    ``metric``, then aggregate the turns' values.

    Each turn is scored as a single answer: the metric gets the item's fields, then
    ``input`` (the user's message), ``output`` (the reply), ``turn`` (from 1) and
    ``conversation`` (the transcript up to that reply), so ``PerTurn(Contains(...))`` or an LLM
    judge written for one answer scores each reply.

    Args:
        metric: A metric returning one score (this plugin's, the Opik SDK's, or your own).
        aggregate: ``"all"``: the share of turns that meet the metric's threshold, a trial
            passing only when every turn does (threshold 1.0); ``"mean"``: the turns' mean,
            against the metric's threshold; ``"last"``: the last turn's value, likewise.
        name: Defaults to the metric's name.
        turn_threshold: What each turn must meet; defaults to the metric's own threshold (1.0 for
            the Opik SDK's Equals, Contains, RegexMatch and IsJson, which carry none).

    The score's metadata holds each turn's value and reason (``turns``), which the HTML
    report shows beside the transcript, and the Opik backend puts on each turn's trace.
    """

    def __init__(
        self,
        metric: Any,
        aggregate: Aggregate = "all",
        *,
        name: str | None = None,
        turn_threshold: float | None = None,
    ) -> None:
        if aggregate not in AGGREGATES:
            raise ValueError(f"PerTurn aggregate must be one of {', '.join(AGGREGATES)}; got {aggregate!r}")
        score = getattr(metric, "score", None)
        if not callable(score):
            raise TypeError(f"PerTurn needs a metric with a score() method; got {type(metric).__name__}")
        # What each turn must meet: the metric's own threshold (1.0 for the Opik SDK's pass/fail
        # heuristics, which carry none), unless given.
        if turn_threshold is not None and (
            isinstance(turn_threshold, bool)
            or not isinstance(turn_threshold, int | float)
            or not math.isfinite(turn_threshold)
        ):
            raise ValueError(
                f"PerTurn turn_threshold must be a finite number or None; got {turn_threshold!r}"
            )
        self.turn_threshold = own_threshold(metric) if turn_threshold is None else float(turn_threshold)
        threshold = 1.0 if aggregate == "all" and self.turn_threshold is not None else self.turn_threshold
        super().__init__(name=name or getattr(metric, "name", type(metric).__name__), threshold=threshold)
        self.metric = metric
        self.aggregate = aggregate

    def score(self, conversation: Sequence[Mapping[str, Any]], **fields: Any) -> ScoreResult:
        turns = _turns(conversation)
        if not turns:
            raise MetricComputationError("the conversation has no reply to score")
        accepted = _accepted(self.metric.score)
        values: list[list[Any]] = []
        failure: Exception | None = None
        for number, (message, reply, transcript) in enumerate(turns, 1):
            inputs = {**fields, "input": message, "output": reply, "turn": number, "conversation": transcript}
            try:
                values.append(self._turn(number, accepted(inputs)))
            except Exception as error:
                # Every turn is still scored: a judge's request deferred to a batch (or refused)
                # for one turn would otherwise hold back the next turns' to another round.
                failure = failure or error
        if failure is not None:
            raise failure
        return ScoreResult(
            name=self.name,
            value=self._aggregated([v for v, _ in values]),
            reason=self._reason(values),
            metadata={"aggregate": self.aggregate, "turns": values},
        )

    def _turn(self, number: int, inputs: dict[str, Any]) -> list[Any]:
        """One turn's [value, reason]."""
        result = self.metric.score(**inputs)
        if isinstance(result, list):
            raise MetricComputationError(
                f"PerTurn({type(self.metric).__name__}): the metric returned {len(result)} scores; "
                "PerTurn aggregates a metric that returns one"
            )
        value = getattr(result, "value", None)
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise MetricComputationError(f"turn {number}: the metric scored {value!r}, not a finite number")
        return [float(value), getattr(result, "reason", None)]

    def _aggregated(self, values: list[float]) -> float:
        if self.aggregate == "mean":
            return math.fsum(values) / len(values)
        if self.aggregate == "last":
            return values[-1]
        bound = self.turn_threshold
        if bound is None:
            return math.fsum(values) / len(values)  # nothing to meet: the mean, reported only
        return sum(value >= bound for value in values) / len(values)

    def _reason(self, values: list[list[Any]]) -> str:
        bound = self.turn_threshold
        missed = [n for n, (value, _) in enumerate(values, 1) if bound is not None and value < bound]
        shown = ", ".join(f"{value:g}" for value, _ in values)
        summary = f"{self.aggregate} of {len(values)} turns ({shown})"
        if not missed:
            return summary
        first = values[missed[0] - 1][1]
        why = f" (turn {missed[0]}: {first})" if first else ""
        turns = f"turn{'s' if len(missed) > 1 else ''} {', '.join(map(str, missed))}"
        return f"{summary}; {turns} below {bound:g}{why}"


def _accepted(score: Any) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """What picks, of the inputs, those ``score`` takes (all of them with ``**kwargs``)."""
    parameters = inspect.signature(score).parameters
    if any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        return lambda inputs: inputs
    return lambda inputs: {key: value for key, value in inputs.items() if key in parameters}


def _turns(conversation: Sequence[Mapping[str, Any]]) -> list[tuple[Any, Any, list[Mapping[str, Any]]]]:
    """Each reply, with the user's message before it and the transcript up to it."""
    if not isinstance(conversation, Sequence) or isinstance(conversation, str):
        raise MetricComputationError(
            "PerTurn scores a conversation (a list of {'role', 'content'} messages); got "
            + type(conversation).__name__
        )
    turns = []
    last_user: Any = None
    for position, message in enumerate(conversation):
        role = message.get("role") if isinstance(message, Mapping) else None
        if role == "user":
            last_user = message.get("content")
        elif role == "assistant":
            turns.append((last_user, message.get("content"), list(conversation[: position + 1])))
    return turns
