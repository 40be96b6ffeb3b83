"""``TrajectoryJudge``: an LLM judge of what an agent did, for what the rule-based trajectory
metrics (``metrics/trajectory.py``) cannot say ("did it look the order up before refunding?",
"were the search queries sensible?")."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from .base import BaseMetric, MetricComputationError, ScoreResult
from .tool_calls import ToolCall, as_calls
from .trajectory import EXPECTED_FIELD, MAX_CALLS

# Characters of a call's arguments, a call's result and the task's output shown to the judge.
MAX_SHOWN = 1_000

PROMPT = """You are judging the trajectory of an AI agent: the tools it called to do a task.

Criteria: {criteria}

The task's input:
{input}

{expected}The tool calls the agent made, in order (name, arguments, result):
{calls}

The agent's final output:
{output}

Answer with a JSON object and nothing else: {{"score": <a number from 0 to 1, 1 when the
trajectory fully meets the criteria>, "reason": "<one or two sentences: why>"}}"""

_JSON_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


class TrajectoryJudge(BaseMetric):
    """An LLM judge of the agent's tool calls against ``criteria``, given the task's input, the
    expected calls (the item's ``expected_tool_calls``, when it has them), the calls made with
    their arguments and results, and the final output. It answers a score from 0 to 1 and a
    reason.

    Args:
        criteria: What a good trajectory does, in words.
        model: The judge's model: an Opik SDK model (an object with ``generate_string(input)``,
            such as ``opik.evaluation.models.LiteLLMChatModel("gpt-4.1")``) or any callable
            ``(prompt) -> str``.
        name: Defaults to "trajectory_judge".
        threshold: Defaults to 0.5.

    A judge: its scores go in the judge cache (``--eval-judge-cache``), keyed by what the calls
    say, never by their span ids; label items to calibrate it as any judge.
    """

    judge: ClassVar[bool] = True

    def __init__(
        self,
        criteria: str,
        model: Any,
        *,
        name: str = "trajectory_judge",
        threshold: float | None = 0.5,
    ) -> None:
        if not isinstance(criteria, str) or not criteria.strip():
            raise ValueError("TrajectoryJudge: criteria must be a non-empty str: what a good trajectory does")
        generate = getattr(model, "generate_string", None)
        if not callable(generate) and not callable(model):
            raise ValueError(
                f"TrajectoryJudge: model={type(model).__name__} is neither an Opik model (with "
                "generate_string) nor a callable (prompt) -> str"
            )
        super().__init__(name=name, threshold=threshold)
        self.criteria = criteria
        self.model = model

    def score(
        self,
        tool_calls: Any = None,
        input: Any = None,
        output: Any = None,
        expected_tool_calls: Any = None,
        **ignored_kwargs: Any,
    ) -> ScoreResult:
        try:
            calls = as_calls(tool_calls)
        except TypeError as error:
            raise MetricComputationError(f"TrajectoryJudge: {error}") from None
        prompt = PROMPT.format(
            criteria=self.criteria,
            input=_shown(input),
            expected=(
                f"The expected tool calls ({EXPECTED_FIELD}):\n{_shown(expected_tool_calls)}\n\n"
                if expected_tool_calls
                else ""
            ),
            calls=_listed(calls),
            output=_shown(output),
        )
        answer = self._ask(prompt)
        value, reason = _verdict(answer)
        return ScoreResult(name=self.name, value=value, reason=reason)

    def _ask(self, prompt: str) -> str:
        generate: Callable[..., Any] | None = getattr(self.model, "generate_string", None)
        answer = generate(input=prompt) if callable(generate) else self.model(prompt)
        if not isinstance(answer, str):
            raise MetricComputationError(
                f"TrajectoryJudge: the model answered {type(answer).__name__}, not text"
            )
        return answer


def _verdict(answer: str) -> tuple[float, str]:
    """The judge's score and reason from its answer: the JSON object in it."""
    found = _JSON_OBJECT.search(answer)
    try:
        parsed = json.loads(found.group(0)) if found else None
    except ValueError:
        parsed = None
    score = parsed.get("score") if isinstance(parsed, dict) else None
    if isinstance(score, bool) or not isinstance(score, int | float) or not 0 <= score <= 1:
        raise MetricComputationError(
            f'TrajectoryJudge: the model\'s answer has no {{"score": 0..1}} object: {_cut(answer, 300)}'
        )
    reason = parsed.get("reason") if isinstance(parsed, dict) else None
    return float(score), reason if isinstance(reason, str) else ""


def _listed(calls: Sequence[ToolCall]) -> str:
    if not calls:
        return "(none)"
    lines = []
    for number, call in enumerate(calls[:MAX_CALLS], 1):
        result = "" if call.result is None else f" -> {_shown(call.result)}"
        lines.append(f"{number}. {call.name}({_shown(call.arguments)}){result}")
    if len(calls) > MAX_CALLS:
        lines.append(f"... and {len(calls) - MAX_CALLS} more")
    return "\n".join(lines)


def _shown(value: Any) -> str:
    if isinstance(value, str):
        return _cut(value, MAX_SHOWN)
    return _cut(json.dumps(value, ensure_ascii=False, default=repr, sort_keys=True), MAX_SHOWN)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
