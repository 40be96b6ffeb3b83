"""Unit tests for pytest_opik_eval.metrics: values, names, thresholds and errors."""

from __future__ import annotations

import random
import re
import time
from typing import Any

import pytest

from pytest_opik_eval.metrics import (
    PASS_FAIL_THRESHOLD,
    BaseMetric,
    Contains,
    Equals,
    IsJson,
    LevenshteinRatio,
    MetricComputationError,
    RegexMatch,
    ScoreResult,
)

# --- ScoreResult -------------------------------------------------------------


def test_score_result_defaults() -> None:
    result = ScoreResult(name="m", value=0.5)
    assert (result.reason, result.metadata, result.scoring_failed) == (None, None, False)


def test_score_result_field_order() -> None:
    result = ScoreResult("m", 1.0, "why", {"k": 1}, True)
    assert result == ScoreResult(name="m", value=1.0, reason="why", metadata={"k": 1}, scoring_failed=True)


# --- BaseMetric --------------------------------------------------------------


class StartsWith(BaseMetric):
    def score(self, output: str, reference: str, **ignored_kwargs: Any) -> ScoreResult:
        return ScoreResult(name=self.name, value=float(output.startswith(reference)))


def test_base_metric_is_abstract() -> None:
    with pytest.raises(TypeError):
        BaseMetric()  # type: ignore[abstract]


def test_custom_metric_defaults_to_class_name_and_no_threshold() -> None:
    metric = StartsWith()
    assert metric.name == "StartsWith"
    assert metric.threshold is None


def test_custom_metric_name_and_threshold() -> None:
    metric = StartsWith("starts", threshold=0.5)
    assert (metric.name, metric.threshold) == ("starts", 0.5)
    assert metric.score(output="hello", reference="he", extra="ignored").value == 1.0


@pytest.mark.parametrize("threshold", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_threshold_rejected(threshold: float) -> None:
    with pytest.raises(ValueError, match="threshold"):
        StartsWith(threshold=threshold)


# --- default names and thresholds --------------------------------------------


@pytest.mark.parametrize(
    ("metric", "name", "threshold"),
    [
        (Equals(), "equals_metric", 1.0),
        (Contains(), "contains_metric", 1.0),
        (RegexMatch("x"), "regex_match_metric", 1.0),
        (IsJson(), "is_json_metric", 1.0),
        (LevenshteinRatio(), "levenshtein_ratio_metric", None),
    ],
)
def test_default_name_and_threshold(metric: BaseMetric, name: str, threshold: float | None) -> None:
    assert metric.name == name
    assert metric.threshold == threshold


def test_pass_fail_threshold_constant() -> None:
    assert PASS_FAIL_THRESHOLD == 1.0


def test_name_and_threshold_can_be_overridden() -> None:
    metric = Equals(name="exact", threshold=None)
    assert (metric.name, metric.threshold) == ("exact", None)
    assert LevenshteinRatio(threshold=0.8).threshold == 0.8


def test_metric_name_is_used_in_results() -> None:
    assert IsJson(name="json_ok").score("{}") == ScoreResult(name="json_ok", value=1.0)


# --- Equals ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("output", "reference", "expected"),
    [
        ("Paris", "Paris", 1.0),
        ("Paris", "paris", 1.0),
        ("Paris", "Paris ", 0.0),
        ("", "", 1.0),
        (42, 42, 1.0),
        (42, "42", 1.0),
        ("42", 42, 1.0),
        (3.14, 3.14, 1.0),
        (42, "forty-two", 0.0),
        ({"a": 1}, "{'A': 1}", 1.0),
    ],
)
def test_equals_values(output: Any, reference: Any, expected: float) -> None:
    assert Equals().score(output=output, reference=reference) == ScoreResult(
        name="equals_metric", value=expected
    )


def test_equals_case_sensitive() -> None:
    metric = Equals(case_sensitive=True)
    assert metric.score("Paris", "Paris").value == 1.0
    assert metric.score("Paris", "paris").value == 0.0


def test_equals_ignores_extra_kwargs() -> None:
    assert Equals().score(output="a", reference="a", input="q", id="1").value == 1.0


@pytest.mark.parametrize(("output", "reference"), [(None, "x"), ("x", None), (None, None)])
def test_equals_rejects_none(output: Any, reference: Any) -> None:
    with pytest.raises(MetricComputationError, match="non-None"):
        Equals().score(output=output, reference=reference)


# --- Contains ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("output", "reference", "expected"),
    [
        ("Hello, World!", "world", 1.0),
        ("Hello, World!", "World", 1.0),
        ("Hello, World!", "there", 0.0),
        ("abc", "abc", 1.0),
        ("", "a", 0.0),
    ],
)
def test_contains_values(output: str, reference: str, expected: float) -> None:
    assert Contains().score(output, reference) == ScoreResult(name="contains_metric", value=expected)


def test_contains_case_sensitive() -> None:
    metric = Contains(case_sensitive=True)
    assert metric.score("Hello, World!", "World").value == 1.0
    assert metric.score("Hello, World!", "world").value == 0.0


def test_contains_default_reference_and_override() -> None:
    metric = Contains(reference="world")
    assert metric.score(output="Hello, World!").value == 1.0
    assert metric.score(output="Hello, planet!").value == 0.0
    # An explicit reference wins; an explicit None falls back to the default.
    assert metric.score(output="Hello, there!", reference="there").value == 1.0
    assert metric.score(output="Hello, World!", reference=None).value == 1.0


@pytest.mark.parametrize("metric", [Contains(), Contains(reference=None)])
def test_contains_without_any_reference(metric: Contains) -> None:
    with pytest.raises(ValueError, match="No reference string provided"):
        metric.score(output="text")


@pytest.mark.parametrize(("default", "reference"), [("", None), ("ok", ""), (None, 5), (None, ["a"])])
def test_contains_invalid_reference(default: str | None, reference: Any) -> None:
    with pytest.raises(ValueError, match="Invalid reference string provided"):
        Contains(reference=default).score(output="some text", reference=reference)


@pytest.mark.parametrize("output", [None, 5, ["a"]])
def test_contains_rejects_non_string_output(output: Any) -> None:
    with pytest.raises(MetricComputationError, match="string 'output'"):
        Contains().score(output=output, reference="a")


# --- RegexMatch --------------------------------------------------------------


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        ("My SSN is 123-45-6789", 1.0),
        ("My phone is 555-1234", 0.0),
        ("123-45-6789 at the start", 1.0),
        ("", 0.0),
    ],
)
def test_regex_match_searches_anywhere(output: str, expected: float) -> None:
    metric = RegexMatch(r"\d{3}-\d{2}-\d{4}")
    assert metric.score(output) == ScoreResult(name="regex_match_metric", value=expected)


def test_regex_match_anchors_and_empty_pattern() -> None:
    assert RegexMatch(".+metric$").score("some metric").value == 1.0
    assert RegexMatch(".+metric$").score("some param").value == 0.0
    assert RegexMatch("").score("").value == 1.0


def test_regex_match_accepts_compiled_pattern_with_flags() -> None:
    metric = RegexMatch(re.compile("paris", re.IGNORECASE))
    assert metric.score(output="PARIS").value == 1.0
    # A string pattern is case-sensitive: RegexMatch has no case_sensitive option.
    assert RegexMatch("paris").score(output="PARIS").value == 0.0


def test_regex_match_invalid_pattern_fails_at_construction() -> None:
    with pytest.raises(re.error):
        RegexMatch("(unclosed")


@pytest.mark.parametrize(("output", "message"), [(None, "non-None"), (42, "got int")])
def test_regex_match_rejects_bad_output(output: Any, message: str) -> None:
    with pytest.raises(MetricComputationError, match=message):
        RegexMatch("x").score(output=output)


# --- IsJson ------------------------------------------------------------------


@pytest.mark.parametrize(
    "output",
    ['{"key": "value"}', "[1, 2, 3]", "5", "-1.5e3", '"a json string"', "true", "null", " {} "],
)
def test_is_json_valid(output: str) -> None:
    assert IsJson().score(output=output) == ScoreResult(name="is_json_metric", value=1.0)


@pytest.mark.parametrize(
    "output",
    [
        "Not a JSON string",
        "",
        '{"key": "value"',
        "{'key': 'value'}",
        "undefined",
        "NaN",
        "Infinity",
        "-Infinity",
        '{"score": NaN}',
        "[1, Infinity]",
        "[" * 100_000,
        None,
        123,
    ],
)
def test_is_json_invalid_scores_zero_without_raising(output: Any) -> None:
    assert IsJson().score(output=output) == ScoreResult(name="is_json_metric", value=0.0)


# --- LevenshteinRatio --------------------------------------------------------


@pytest.mark.parametrize(
    ("output", "reference", "expected"),
    [
        # LCS "pple": distance 10 - 2*4 = 2 over 10 characters.
        ("maple", "apple", 0.8),
        ("apple", "apple", 1.0),
        ("qqqqq", "apple", 0.0),
        # LCS "ittn": distance 13 - 8 = 5 over 13.
        ("kitten", "sitting", 1 - 5 / 13),
        # Lower-cased by default, so case differences cost nothing.
        ("Hello, World!", "hello, world", 1 - 1 / 25),
        ("", "", 1.0),
        ("abc", "", 0.0),
        ("", "abc", 0.0),
        ("abc", "xyz", 0.0),
        # One insertion: distance 1 over 7.
        ("abc", "abxc", 1 - 1 / 7),
        ("ab", "ba", 0.5),
        ("héllo wörld", "hello world", 1 - 4 / 22),
    ],
)
def test_levenshtein_ratio_hand_computed(output: str, reference: str, expected: float) -> None:
    result = LevenshteinRatio().score(output, reference)
    assert result == ScoreResult(name="levenshtein_ratio_metric", value=expected)


def test_levenshtein_ratio_case_sensitive() -> None:
    # Opik's docstring example: one deletion over 25 characters.
    sensitive = LevenshteinRatio(case_sensitive=True)
    assert sensitive.score("Hello, World!", "Hello, World").value == 0.96
    assert sensitive.score("ABC", "abc").value == 0.0
    assert LevenshteinRatio().score("ABC", "abc").value == 1.0


def test_levenshtein_ratio_is_symmetric() -> None:
    metric = LevenshteinRatio()
    assert metric.score("kitten", "sitting") == metric.score("sitting", "kitten")


def _lcs_by_dynamic_programming(a: str, b: str) -> int:
    previous = [0] * (len(b) + 1)
    for char_a in a:
        current = [0]
        for j, char_b in enumerate(b):
            current.append(previous[j] + 1 if char_a == char_b else max(previous[j + 1], current[j]))
        previous = current
    return previous[-1]


def test_levenshtein_ratio_matches_brute_force_lcs_on_random_strings() -> None:
    rng = random.Random(20240611)
    metric = LevenshteinRatio(case_sensitive=True)
    # A small alphabet gives long common subsequences; the emoji and the
    # accented letter check that characters, not bytes or UTF-16 units, count.
    alphabet = "abcAé😀 "
    for _ in range(400):
        a = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 80)))
        b = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 150)))
        total = len(a) + len(b)
        lcs = _lcs_by_dynamic_programming(a, b)
        expected = 1.0 if total == 0 else 1.0 - (total - 2 * lcs) / total
        assert metric.score(a, b).value == expected, (a, b)


def test_levenshtein_ratio_is_fast_on_long_strings() -> None:
    rng = random.Random(7)
    a, b = ("".join(rng.choice("abcdefghijklmnopqrstuvwxyz ") for _ in range(2000)) for _ in range(2))
    small_a, small_b = a[:200], b[:200]
    metric = LevenshteinRatio()

    def fastest(run: Any) -> float:
        timings = []
        for _ in range(3):
            start = time.perf_counter()
            run()
            timings.append(time.perf_counter() - start)
        return min(timings)

    # A ratio, not a time: the metric on 2,000 characters against the quadratic DP on 200 (100
    # times fewer cells). The bit-parallel LCS is about 10 times faster than that DP; a quadratic
    # metric would be about 100 times slower, whatever the machine's speed.
    metric_time = fastest(lambda: metric.score(a, b))
    quadratic_time = fastest(lambda: _lcs_by_dynamic_programming(small_a, small_b))
    assert metric_time < quadratic_time, (metric_time, quadratic_time)


@pytest.mark.parametrize(
    ("output", "reference", "message"),
    [
        (None, "a", "non-None"),
        ("a", None, "non-None"),
        (1, "a", "output of type int"),
        ("a", ["a"], "reference of type list"),
    ],
)
def test_levenshtein_ratio_rejects_bad_input(output: Any, reference: Any, message: str) -> None:
    with pytest.raises(MetricComputationError, match=message):
        LevenshteinRatio().score(output=output, reference=reference)
