"""A metric's own threshold: its ``threshold`` attribute (this package's metrics, and any that
sets one), else 1.0 for the Opik SDK's pass/fail heuristics, which carry none."""

from __future__ import annotations

from typing import Any

# Opik's pass/fail heuristics, when passed in from the Opik SDK (which carries no threshold):
# anything below 1.0 is a miss, as with this package's own Equals, Contains, RegexMatch, IsJson.
EXACT_METRICS = frozenset({"equals_metric", "contains_metric", "regex_match_metric", "is_json_metric"})


def own_threshold(metric: Any) -> float | None:
    """The threshold ``metric`` itself gives its score, or None."""
    if hasattr(metric, "threshold"):
        value = metric.threshold
        return None if value is None else float(value)
    return 1.0 if getattr(metric, "name", None) in EXACT_METRICS else None
