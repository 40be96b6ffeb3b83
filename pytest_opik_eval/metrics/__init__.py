"""Metrics: the ``BaseMetric`` contract, Opik-compatible heuristic metrics, and the trajectory
metrics that score an agent's tool calls (``ToolCalled``, ``ToolNotCalled``, ``ToolSequence``,
``ToolArgs``, ``StepCount``).

Every metric has a ``threshold``: the minimum score value a trial must reach, or
``None`` for a metric that is reported but never fails a trial. The defaults are
``PASS_FAIL_THRESHOLD`` (1.0) for ``Equals``,
``Contains``, ``RegexMatch`` and ``IsJson``; ``None`` for ``LevenshteinRatio`` and
for ``BaseMetric`` subclasses that do not choose one.
"""

from .base import BaseMetric, MetricComputationError, ScoreResult
from .conversation import PerTurn
from .heuristics import (
    PASS_FAIL_THRESHOLD,
    Contains,
    Equals,
    IsJson,
    LevenshteinRatio,
    RegexMatch,
)
from .tool_calls import LLMCall, ToolCall
from .trajectory import StepCount, ToolArgs, ToolCalled, ToolNotCalled, ToolSequence
from .trajectory_judge import TrajectoryJudge

__all__ = [
    "PASS_FAIL_THRESHOLD",
    "BaseMetric",
    "Contains",
    "Equals",
    "IsJson",
    "LLMCall",
    "LevenshteinRatio",
    "MetricComputationError",
    "PerTurn",
    "RegexMatch",
    "ScoreResult",
    "StepCount",
    "ToolArgs",
    "ToolCall",
    "ToolCalled",
    "ToolNotCalled",
    "ToolSequence",
    "TrajectoryJudge",
]
