"""Metrics: the ``BaseMetric`` contract and Opik-compatible heuristic metrics.

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

__all__ = [
    "PASS_FAIL_THRESHOLD",
    "BaseMetric",
    "Contains",
    "Equals",
    "IsJson",
    "LevenshteinRatio",
    "MetricComputationError",
    "PerTurn",
    "RegexMatch",
    "ScoreResult",
]
