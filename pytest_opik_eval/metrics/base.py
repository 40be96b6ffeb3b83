"""The metric contract: ``ScoreResult``, ``MetricComputationError`` and ``BaseMetric``.

These mirror the Opik SDK's ``opik.evaluation.metrics`` types so a metric written
for ``opik.evaluate`` ports over by changing its imports. Opik's ``track`` and
``project_name`` arguments are gone (nothing is traced here) and a ``threshold``
is added, because in a test run a score has to become a pass or a fail.
"""

from __future__ import annotations

import abc
import dataclasses
import math
from typing import Any, ClassVar


@dataclasses.dataclass
class ScoreResult:
    """One score produced by a metric.

    Attributes:
        name: The metric name the score is reported under (usually ``metric.name``).
        value: The score, for the built-in metrics between 0.0 and 1.0.
        reason: Optional human-readable explanation, shown in reports.
        metadata: Optional JSON-serialisable details kept with the result.
        scoring_failed: True when the metric raised instead of producing a score.
    """

    name: str
    value: float
    reason: str | None = None
    metadata: dict[str, Any] | None = None
    scoring_failed: bool = False


class MetricComputationError(Exception):
    """Raised by a metric when its inputs cannot be scored (e.g. ``None`` output)."""


class BaseMetric(abc.ABC):
    """Base class for every metric; subclass it to write your own.

    A metric's ``score()`` receives the dataset item's fields merged with the task
    output (after any ``scoring_key_mapping``) as keyword arguments. Declare the
    ones you need as parameters and accept the rest with ``**ignored_kwargs``;
    parameters without a default are required, and an item lacking one is an error.

    Class attributes:
        judge: True for a metric that asks an LLM (a judge): its scores are then kept in the judge
            cache (``--eval-judge-cache``), keyed by the metric's class, source and whole
            configuration, its inputs, the item and the trial. False (the default) for a cheap,
            deterministic metric, which is never cached.

    Args:
        name: The name scores are reported under. Defaults to the class name.
        threshold: The minimum score value a trial must reach for the test to pass.
            ``None`` means the metric is recorded and reported but never fails a
            trial (the session's notices say so, unless a gate checks its mean; ``0``
            says that is meant). Defaults to ``None``.

    Example::

        from typing import Any

        from pytest_opik_eval.metrics import BaseMetric, ScoreResult

        class StartsWithReference(BaseMetric):
            def __init__(self, threshold: float | None = 1.0) -> None:
                super().__init__(name="starts_with_reference", threshold=threshold)

            def score(self, output: str, reference: str, **ignored_kwargs: Any) -> ScoreResult:
                ok = output.startswith(reference)
                return ScoreResult(
                    name=self.name,
                    value=1.0 if ok else 0.0,
                    reason=None if ok else f"output does not start with {reference!r}",
                )
    """

    judge: ClassVar[bool] = False

    def __init__(self, name: str | None = None, *, threshold: float | None = None) -> None:
        # A NaN threshold would fail every trial and an infinite one is meaningless;
        # refuse them here rather than let a run report baffling failures.
        if threshold is not None and not math.isfinite(threshold):
            raise ValueError(f"threshold must be a finite number or None, got {threshold!r}")
        self.name = name or type(self).__name__
        self.threshold = threshold

    @abc.abstractmethod
    def score(self, *args: Any, **kwargs: Any) -> ScoreResult | list[ScoreResult]:
        """Score one trial.

        Return one ``ScoreResult``, or a list of them for a metric that reports
        several scores at once. Raise ``MetricComputationError`` (or any other
        exception) when the inputs cannot be scored; the runner records the
        failure as a failed score instead of crashing the run.
        """
