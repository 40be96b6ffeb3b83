"""Deterministic metrics matching Opik's heuristics of the same names.

Class names, default metric names, constructor parameters, ``score()`` signatures,
values and errors follow ``opik.evaluation.metrics``; only Opik's ``track`` and
``project_name`` are dropped and a keyword-only ``threshold`` is added.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final, NoReturn

from .base import BaseMetric, MetricComputationError, ScoreResult

#: Default threshold of the pass/fail metrics (``Equals``, ``Contains``,
#: ``RegexMatch``, ``IsJson``): they only ever score 0.0 or 1.0, so a trial passes
#: exactly when the check holds.
PASS_FAIL_THRESHOLD: Final = 1.0


def _binary(name: str, ok: bool) -> ScoreResult:
    return ScoreResult(name=name, value=1.0 if ok else 0.0)


class Equals(BaseMetric):
    """Scores 1.0 when ``str(output)`` equals ``str(reference)``, else 0.0.

    Non-string values are compared through ``str()``, so ``42`` equals ``"42"``.
    ``None`` is refused rather than compared as the text ``"None"``.

    Args:
        case_sensitive: Compare without lower-casing both sides. Defaults to False.
        name: Defaults to ``"equals_metric"``.
        threshold: Defaults to ``PASS_FAIL_THRESHOLD`` (1.0).
    """

    def __init__(
        self,
        case_sensitive: bool = False,
        name: str = "equals_metric",
        *,
        threshold: float | None = PASS_FAIL_THRESHOLD,
    ) -> None:
        super().__init__(name=name, threshold=threshold)
        self._case_sensitive = case_sensitive

    def score(self, output: Any, reference: Any, **ignored_kwargs: Any) -> ScoreResult:
        """Compare ``output`` with ``reference``.

        Raises:
            MetricComputationError: If ``output`` or ``reference`` is None.
        """
        if output is None or reference is None:
            raise MetricComputationError(
                "Equals metric requires non-None 'output' and 'reference' arguments, "
                f"got output={output!r}, reference={reference!r}"
            )
        left, right = str(output), str(reference)
        if not self._case_sensitive:
            left, right = left.lower(), right.lower()
        return _binary(self.name, left == right)


class Contains(BaseMetric):
    """Scores 1.0 when the reference occurs in ``output``, else 0.0.

    Args:
        case_sensitive: Compare without lower-casing both sides. Defaults to False.
        reference: Default reference, used when ``score()`` gets none (or None).
        name: Defaults to ``"contains_metric"``.
        threshold: Defaults to ``PASS_FAIL_THRESHOLD`` (1.0).
    """

    def __init__(
        self,
        case_sensitive: bool = False,
        reference: str | None = None,
        name: str = "contains_metric",
        *,
        threshold: float | None = PASS_FAIL_THRESHOLD,
    ) -> None:
        super().__init__(name=name, threshold=threshold)
        self._case_sensitive = case_sensitive
        self._default_reference = reference

    def score(self, output: str, reference: str | None = None, **ignored_kwargs: Any) -> ScoreResult:
        """Check whether ``reference`` (or the default reference) occurs in ``output``.

        Raises:
            ValueError: If there is no reference, or it is empty or not a string
                (Opik raises ``ValueError`` here, not ``MetricComputationError``).
            MetricComputationError: If ``output`` is not a string.
        """
        ref = reference if reference is not None else self._default_reference
        if ref is None:
            raise ValueError(
                "No reference string provided. Either pass `reference` to `score()` "
                "or set a default reference when creating the metric."
            )
        # An empty reference is contained in every output, so it would pass anything.
        if not isinstance(ref, str) or ref == "":
            raise ValueError(
                f"Invalid reference string provided. Reference must be a non-empty string, got {ref!r}."
            )
        if not isinstance(output, str):
            raise MetricComputationError(
                f"Contains metric requires a string 'output' argument, got {type(output).__name__}"
            )
        if not self._case_sensitive:
            output, ref = output.lower(), ref.lower()
        return _binary(self.name, ref in output)


class RegexMatch(BaseMetric):
    """Scores 1.0 when ``regex`` matches anywhere in ``output`` (``re.search``), else 0.0.

    Args:
        regex: The pattern, as a string or a compiled pattern (whose flags are kept).
        name: Defaults to ``"regex_match_metric"``.
        threshold: Defaults to ``PASS_FAIL_THRESHOLD`` (1.0).
    """

    def __init__(
        self,
        regex: str | re.Pattern[str],
        name: str = "regex_match_metric",
        *,
        threshold: float | None = PASS_FAIL_THRESHOLD,
    ) -> None:
        super().__init__(name=name, threshold=threshold)
        # Compiling here makes an invalid pattern fail at collection, not per trial.
        self._regex_pattern = re.compile(regex) if isinstance(regex, str) else regex

    def score(self, output: str, **ignored_kwargs: Any) -> ScoreResult:
        """Search ``output`` for the pattern.

        Raises:
            MetricComputationError: If ``output`` is None or not a string.
        """
        if output is None:
            raise MetricComputationError("RegexMatch metric requires a non-None 'output' argument, got None")
        if not isinstance(output, str):
            raise MetricComputationError(
                f"RegexMatch metric requires a string 'output' argument, got {type(output).__name__}"
            )
        return _binary(self.name, self._regex_pattern.search(output) is not None)


def _reject_non_finite(constant: str) -> NoReturn:
    raise ValueError(f"{constant} is not valid JSON")


class IsJson(BaseMetric):
    """Scores 1.0 when ``output`` parses as JSON, else 0.0; it never raises.

    Python's ``json`` accepts ``NaN``, ``Infinity`` and ``-Infinity`` as an
    extension; they are not JSON (RFC 8259) and score 0.0, as in Opik. Anything
    ``json.loads`` cannot take, such as ``None`` or a number, also scores 0.0.

    Args:
        name: Defaults to ``"is_json_metric"``.
        threshold: Defaults to ``PASS_FAIL_THRESHOLD`` (1.0).
    """

    def __init__(
        self,
        name: str = "is_json_metric",
        *,
        threshold: float | None = PASS_FAIL_THRESHOLD,
    ) -> None:
        super().__init__(name=name, threshold=threshold)

    def score(self, output: str, **ignored_kwargs: Any) -> ScoreResult:
        """Try to parse ``output`` as strict JSON."""
        try:
            json.loads(output, parse_constant=_reject_non_finite)
        # ValueError covers malformed text (JSONDecodeError, bad UTF-8 in bytes);
        # TypeError a non-text output; RecursionError absurdly deep nesting.
        except (ValueError, TypeError, RecursionError):
            return _binary(self.name, False)
        return _binary(self.name, True)


def _lcs_length(a: str, b: str) -> int:
    """Length of the longest common subsequence of ``a`` and ``b``.

    Bit-parallel (Allison-Dix / Hyyrö): bit ``i`` of ``row`` stands for position
    ``i`` of the shorter string, and one pass of big-integer arithmetic per
    character of the longer string replaces a row of the quadratic DP, so the
    cost is O(len(a) * len(b) / word size) in C instead of per cell in Python.
    """
    if len(a) < len(b):
        a, b = b, a
    if not b:
        return 0
    positions: dict[str, int] = {}
    for i, ch in enumerate(b):
        positions[ch] = positions.get(ch, 0) | (1 << i)
    full = (1 << len(b)) - 1
    row = full
    for ch in a:
        matches = row & positions.get(ch, 0)
        # The addition carries past the top bit; masking keeps row to len(b) bits.
        row = ((row + matches) | (row - matches)) & full
    # Each zero bit is one extension of the common subsequence.
    return len(b) - row.bit_count()


class LevenshteinRatio(BaseMetric):
    """Similarity of ``output`` and ``reference`` between 0.0 and 1.0.

    The value is ``rapidfuzz.distance.Indel.normalized_similarity``, which Opik
    uses: ``1 - indel_distance / (len(output) + len(reference))``, where the
    indel distance counts the insertions and deletions turning one string into
    the other, and 1.0 for two empty strings. It is computed here without
    rapidfuzz, in the same floating-point steps, so the values are identical.

    Args:
        case_sensitive: Compare without lower-casing both sides. Defaults to False.
        name: Defaults to ``"levenshtein_ratio_metric"``.
        threshold: Defaults to None: a similarity has no natural pass mark, so
            the score is reported but fails nothing unless a threshold is set.
    """

    def __init__(
        self,
        case_sensitive: bool = False,
        name: str = "levenshtein_ratio_metric",
        *,
        threshold: float | None = None,
    ) -> None:
        super().__init__(name=name, threshold=threshold)
        self._case_sensitive = case_sensitive

    def score(self, output: str, reference: str, **ignored_kwargs: Any) -> ScoreResult:
        """Compute the normalised indel similarity of ``output`` and ``reference``.

        Raises:
            MetricComputationError: If either argument is None or not a string.
        """
        if output is None or reference is None:
            raise MetricComputationError(
                "LevenshteinRatio metric requires non-None 'output' and 'reference' "
                f"arguments, got output={output!r}, reference={reference!r}"
            )
        if not isinstance(output, str) or not isinstance(reference, str):
            raise MetricComputationError(
                "LevenshteinRatio metric requires string 'output' and 'reference' arguments, "
                f"got output of type {type(output).__name__}, "
                f"reference of type {type(reference).__name__}"
            )
        if not self._case_sensitive:
            output, reference = output.lower(), reference.lower()
        total = len(output) + len(reference)
        if total == 0:
            return ScoreResult(name=self.name, value=1.0)
        distance = total - 2 * _lcs_length(output, reference)
        # Same operations as rapidfuzz (normalised distance, then 1 - it) so the
        # floats match bit for bit, e.g. 0.8 rather than 0.7999999999999999.
        return ScoreResult(name=self.name, value=1.0 - distance / total)
