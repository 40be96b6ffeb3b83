"""One trial's life as a user sees it: the task's output, the scores, the verdict, the marker."""

from __future__ import annotations

import json
import re
import sqlite3
import time
from datetime import datetime, timezone

import pytest
from conftest import Project, items


def test_eval_item_is_a_fresh_copy_with_its_id_and_eval_trial_counts(project: Project) -> None:
    project.dataset(items("a"))
    project.write(
        "test_copy.py",
        """
        import pytest

        seen = []

        @pytest.mark.eval(dataset="data.jsonl", trial_count=3)
        def test_copy(eval_item, eval_trial):
            seen.append((eval_item["id"], eval_trial, eval_item["input"]["text"]))
            eval_item["input"]["text"] = "mutated"
            return "x"

        def test_seen():
            assert seen == [("a", 0, "a"), ("a", 1, "a"), ("a", 2, "a")]
        """,
    )
    # test_seen runs after the three trials and checks what each of them received.
    project.run("--eval").assert_outcomes(passed=4)


def test_fixtures_and_getfixturevalue_see_the_trials_item_too(project: Project) -> None:
    project.dataset(items("a", "b"))
    project.write(
        "test_fixture.py",
        """
        import pytest

        @pytest.fixture
        def prompt(eval_item, eval_trial):
            eval_item["input"]["text"] += "!"  # the test's copy, shared with the task
            return f"say {eval_item['input']['text']} ({eval_trial})"

        @pytest.mark.eval(dataset="data.jsonl", trial_count=2)
        def test_prompt(prompt, eval_item, request):
            assert request.getfixturevalue("eval_item") is eval_item
            return f"{prompt} / {eval_item['input']['text']}"

        @pytest.mark.eval(dataset="data.jsonl")
        def test_asks(eval_item, request):
            # Not set up as a fixture for the task, but there when asked for.
            again = request.getfixturevalue("eval_item")
            assert again == eval_item and again is not eval_item
            return request.getfixturevalue("eval_trial")
        """,
    )
    result, report = project.run_report("--eval")
    result.assert_outcomes(passed=6)
    prompt, asks = ([t["output"]["output"] for t in e["trials"]] for e in report["experiments"])
    assert prompt == ["say a! (0) / a!", "say a! (1) / a!", "say b! (0) / b!", "say b! (1) / b!"]
    assert asks == [0, 0]


def test_return_value_is_the_stored_output(project: Project) -> None:
    project.dataset(items("text", "dict", "none"))
    project.write(
        "test_out.py",
        """
        import pytest

        @pytest.mark.eval(dataset="data.jsonl")
        def test_out(eval_item):
            kind = eval_item["id"]
            if kind == "dict":
                return {"output": "o", "context": ["c1"]}
            return None if kind == "none" else "plain"
        """,
    )
    result, report = project.run_report("--eval")
    result.assert_outcomes(passed=3, warnings=0)  # no PytestReturnNotNoneWarning
    outputs = {t["dataset_item_id"]: t["output"] for t in report["experiments"][0]["trials"]}
    assert outputs == {
        "text": {"output": "plain"},
        "dict": {"output": "o", "context": ["c1"]},
        "none": {"output": None},
    }


def test_a_test_that_returns_none_gets_a_hint(project: Project) -> None:
    project.dataset(items("a", "b"))
    project.write(
        "test_none.py",
        """
        import pytest
        from pytest_opik_eval.metrics import Equals

        @pytest.mark.eval(dataset="data.jsonl", metrics=[Equals()], scoring_key_mapping={"reference": "expected_output"})
        def test_forgot(eval_item):
            answer = eval_item["input"]["text"]  # and no return
        """,
    )
    result = project.run("--eval")
    result.assert_outcomes(failed=2)
    hint = 'the test function returned None; its return value is the task output that the metrics score: return the answer (e.g. return {"output": answer})'
    result.stdout.fnmatch_lines(
        ["item a (trial 0) did not meet its thresholds:", "*output:   null", f"  hint: {hint}"]
    )
    # Once in the notices, naming the user's test and its line.
    result.stdout.fnmatch_lines(["*= eval notices =*", f"test_none.py::test_forgot (test_none.py:5): {hint}"])
    assert result.stdout.str().count(f"test_forgot (test_none.py:5): {hint}") == 1


def test_missing_metric_argument_fails_the_trial_and_leaves_it_pending(project: Project) -> None:
    project.dataset([{"id": "a", "input": {"text": "a"}, "answer": "a"}])
    project.write(
        "test_missing.py",
        """
        import pytest
        from pytest_opik_eval.metrics import Equals

        @pytest.mark.eval(dataset="data.jsonl", metrics=[Equals()], scoring_key_mapping={"reference": "expected"})
        def test_missing(eval_item):
            return eval_item["input"]["text"]
        """,
    )
    result = project.run("--eval")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*metric 'equals_metric' (Equals) needs reference, which neither the item, the task output nor scoring_key_mapping provides.",
            "*available keys: answer, id, input, output",
            "*scoring_key_mapping: {'reference': 'expected'}",
            '*fix: return it from the test, or map it, e.g. scoring_key_mapping={"reference": "<key>"}',
        ]
    )
    # Once: not again after "During handling of the above exception, another exception occurred".
    report = result.stdout.str().split("short test summary info")[0]
    assert "During handling of the above exception" not in report
    assert report.count("needs reference") == 1
    [trial] = project.trials()
    assert trial.status == "pending"


def test_default_thresholds_exact_metrics_fail_similarity_metrics_only_report(project: Project) -> None:
    project.dataset(items("paris"))
    project.eval_test(
        metrics="[Equals(), LevenshteinRatio()]",
        imports="from pytest_opik_eval.metrics import LevenshteinRatio",
        behaviour="return 'pariss'",
    )
    result = project.run("--eval")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*item paris (trial 0) did not meet its thresholds:",
            "*equals_metric             0 < 1",
            "*levenshtein_ratio_metric  0.909 (no threshold)",
            '*input:    {"text": "paris"}',
            "*expected: paris",
            "*output:   pariss",
        ]
    )


def test_similarity_alone_never_fails_without_a_threshold(project: Project) -> None:
    project.dataset(items("paris"))
    project.eval_test(
        metrics="[LevenshteinRatio()]",
        imports="from pytest_opik_eval.metrics import LevenshteinRatio",
        behaviour="return 'london'",
    )
    project.run("--eval").assert_outcomes(passed=1)


def test_thresholds_in_the_marker_and_on_the_metric(project: Project) -> None:
    project.dataset(items("paris"))
    project.eval_test(
        "thresholds={'levenshtein_ratio_metric': 0.95},",
        metrics="[LevenshteinRatio(), Equals(threshold=0.0)]",
        imports="from pytest_opik_eval.metrics import LevenshteinRatio",
        behaviour="return 'pariss'",
    )
    result = project.run("--eval")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*levenshtein_ratio_metric  0.909 < 0.95", "*equals_metric             0 >= 0"]
    )


def test_a_threshold_for_a_score_no_metric_returns_fails_the_trial(project: Project) -> None:
    project.dataset(items("a"))
    project.eval_test("thresholds={'equal_metric': 1.0},")
    result = project.run("--eval")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*equal_metric  no metric returned a score named 'equal_metric' (see thresholds)"]
    )


def test_long_values_are_shortened_in_the_failure_message(project: Project) -> None:
    project.dataset([{"id": "long", "input": {"text": "x" * 1000}, "expected_output": "y" * 1000}])
    project.eval_test()
    result = project.run("--eval")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            f"*expected: {'y' * 200}... (800 more characters)",
            f"*output:   {'x' * 200}... (800 more characters)",
        ]
    )


def test_a_value_is_shortened_before_its_control_characters_are_escaped(project: Project) -> None:
    # 193 characters: shown whole, each ESC as a whole escape (cutting the escaped text at its
    # limit would have left a broken "\\x" at the end).
    project.dataset([{"id": "esc", "input": {"text": "x" * 183 + "\x1b" * 10}, "expected_output": "y"}])
    project.eval_test()
    result = project.run("--eval")
    result.assert_outcomes(failed=1)
    escaped = "\\x1b" * 10
    assert f"output:   {'x' * 183}{escaped}\n" in result.stdout.str()
    assert "\x1b" not in result.stdout.str()


def test_any_object_with_name_and_score_is_a_metric(project: Project) -> None:
    project.dataset(items("a", "b"))
    project.eval_test(
        "thresholds={'first_letter': 1.0},",
        metrics="[FirstLetter()]",
        imports="""
from types import SimpleNamespace

class FirstLetter:  # not a BaseMetric: duck-typed like the Opik SDK's metrics
    name = "first_letter"

    def score(self, output, **ignored):
        return [SimpleNamespace(name="first_letter", value=float(output.startswith("a")), reason="checked", scoring_failed=False),
                SimpleNamespace(name="length", value=float(len(output)), reason=None, scoring_failed=False)]
""",
    )
    result, report = project.run_report("--eval")
    result.assert_outcomes(passed=1, failed=1)
    metrics = report["experiments"][0]["summary"]["metrics"]
    assert metrics["first_letter"]["mean"] == 0.5
    assert metrics["length"] == {
        "mean": 1.0,
        "min": 1.0,
        "max": 1.0,
        "count": 2,
        "failed": 0,
        "threshold": None,
        "pass_rate": None,
        # Every length was 1.0, over 2 items: as two passes, Clopper-Pearson's sqrt(0.025).
        "interval": {
            "estimate": 1.0,
            "low": pytest.approx(0.025**0.5, abs=1e-6),
            "high": 1.0,
            "level": 0.95,
            "items": 2,
            "method": "score",
            "one_sided": False,
        },
    }


# A metric that explains its score in ScoreResult.metadata, as an LLM judge would; a date is a
# value JSON cannot hold, and item "b" gets none.
JUDGE_METRIC = """
import datetime
from pytest_opik_eval.metrics import BaseMetric, ScoreResult

class Judge(BaseMetric):
    def __init__(self):
        super().__init__(name="judge", threshold=1.0)

    def score(self, output, reference, **ignored):
        if output == "b":
            return ScoreResult(name=self.name, value=1.0)
        metadata = {"verdict": "same", "tokens": {"in": 12, "out": None}, "on": datetime.date(2026, 1, 2)}
        return ScoreResult(name=self.name, value=float(output == reference), metadata=metadata)
"""


def test_a_scores_metadata_is_kept_in_the_store_and_the_reports(project: Project) -> None:
    project.dataset(items("a", "b"))
    project.eval_test(imports=JUDGE_METRIC, metrics="[Judge()]")
    result, report = project.run_report("--eval", "--eval-html=report.html")
    result.assert_outcomes(passed=2)
    metadata = {"verdict": "same", "tokens": {"in": 12, "out": None}, "on": "datetime.date(2026, 1, 2)"}

    stored = {t.dataset_item_id: t.scores for t in project.trials()}
    assert [(s.name, s.value, s.metadata) for s in stored["a"]] == [("judge", 1.0, metadata)]
    assert [(s.name, s.metadata) for s in stored["b"]] == [("judge", None)]
    # A score without metadata is stored as before, so that an earlier version still reads it.
    db = sqlite3.connect(project.store_path)
    [[text]] = db.execute("SELECT scores FROM attempts WHERE scores NOT LIKE '%metadata%'").fetchall()
    db.close()
    assert json.loads(text) == [{"name": "judge", "value": 1.0, "scoring_failed": False}]

    trials = {t["dataset_item_id"]: t for t in report["experiments"][0]["trials"]}
    assert trials["a"]["scores"] == [
        {
            "name": "judge",
            "value": 1.0,
            "reason": None,
            "scoring_failed": False,
            "metadata": metadata,
            "samples": None,
        }
    ]
    assert trials["b"]["scores"][0]["metadata"] is None

    html = (project.path / "report.html").read_text()
    match = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', html, re.S)
    assert match is not None
    [experiment] = json.loads(match.group(1))["experiments"]
    shown = {item["id"]: item["trials"][0]["scores"] for item in experiment["items"]}
    assert shown == {"a": [["judge", 1.0, None, False, metadata]], "b": [["judge", 1.0, None, False]]}


def test_a_metadata_number_json_cannot_hold_is_kept_as_its_repr(project: Project) -> None:
    # NaN and the infinities are no JSON: written as bare tokens, they would read back as null in
    # the report and make the Opik server's batch invalid JSON.
    project.dataset(items("a"))
    project.eval_test(
        imports="""
from pytest_opik_eval.metrics import BaseMetric, ScoreResult

class Judge(BaseMetric):
    def __init__(self):
        super().__init__(name="judge")

    def score(self, output, **ignored):
        spread = {"nan": float("nan"), "up": float("inf"), "down": [float("-inf")]}
        return ScoreResult(name=self.name, value=1.0, metadata=spread)
""",
        metrics="[Judge()]",
    )
    result, report = project.run_report("--eval")
    result.assert_outcomes(passed=1)
    expected = {"nan": "nan", "up": "inf", "down": ["-inf"]}
    assert report["experiments"][0]["trials"][0]["scores"][0]["metadata"] == expected
    [trial] = project.trials()
    assert trial.scores[0].metadata == expected


def test_scoring_key_mapping_callable(project: Project) -> None:
    project.dataset([{"id": "a", "input": {"text": "a"}, "expected": {"answer": "a"}}])
    project.write(
        "test_eval.py",
        """
        import pytest
        from pytest_opik_eval.metrics import Equals

        @pytest.mark.eval(dataset="data.jsonl", metrics=[Equals()],
                          scoring_key_mapping={"reference": lambda merged: merged["expected"]["answer"]})
        def test_qa(eval_item):
            return eval_item["input"]["text"]
        """,
    )
    project.run("--eval").assert_outcomes(passed=1)


def test_failing_fixture_teardown_does_not_leave_a_scored_trial_pending(project: Project) -> None:
    project.dataset(items("a"))
    project.write(
        "test_fixture.py",
        """
        import pytest
        from pytest_opik_eval.metrics import Equals

        @pytest.fixture
        def client():
            yield "client"
            raise RuntimeError("teardown broke")

        @pytest.mark.eval(dataset="data.jsonl", metrics=[Equals()], scoring_key_mapping={"reference": "expected_output"})
        def test_fixture(eval_item, client):
            return eval_item["input"]["text"]
        """,
    )
    project.run("--eval").assert_outcomes(passed=1, errors=1)
    assert [t.status for t in project.trials()] == ["completed"]


def test_system_exit_in_the_task_fails_it_and_the_session_goes_on(project: Project) -> None:
    project.dataset(items("a", "b", "c"))
    project.eval_test(behaviour="if item['id'] == 'b': raise SystemExit('task exited')")
    project.run("--eval").assert_outcomes(passed=2, failed=1)
    assert project.completed() == {("a", 0), ("c", 0)}


def test_assertion_in_the_task_leaves_the_trial_pending(project: Project) -> None:
    project.dataset(items("a", "b"))
    project.eval_test(behaviour="assert item['id'] != 'b', 'b is not supported yet'")
    result = project.run("--eval")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*AssertionError: b is not supported yet"])
    assert project.completed() == {("a", 0)}


def test_async_eval_test(project: Project) -> None:
    project.dataset(items("a", "b"))
    project.write(
        "test_coro.py",
        """
        import asyncio
        import pytest
        from pytest_opik_eval.metrics import Equals

        @pytest.mark.eval(dataset="data.jsonl", metrics=[Equals()], scoring_key_mapping={"reference": "expected_output"})
        async def test_async(eval_item):
            await asyncio.sleep(0)
            return eval_item["input"]["text"]
        """,
    )
    project.run("--eval").assert_outcomes(passed=2)
    assert project.completed() == {("a", 0), ("b", 0)}


def test_an_attempts_start_time_is_stored_in_utc_to_the_millisecond(project: Project) -> None:
    project.dataset(items("a", "b", "c"))
    project.eval_test()
    before = datetime.now(timezone.utc).replace(microsecond=0)
    project.run("--eval").assert_outcomes(passed=3)
    after = datetime.now(timezone.utc)

    db = sqlite3.connect(project.store_path)
    stored = [text for (text,) in db.execute("SELECT started_at FROM attempts ORDER BY id")]
    db.close()
    assert len(stored) == 3
    for text in stored:
        # As datetime.isoformat(timespec="milliseconds") writes a UTC time, which other tools parse.
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00", text), text
        assert before <= datetime.fromisoformat(text) <= after
    assert stored == sorted(stored)  # the attempts started in order


def test_the_start_time_is_datetimes_isoformat_across_second_boundaries(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The start time is put together from the clock, its date and time formatted once a second:
    it must read as ``datetime.isoformat`` writes the same instant, whichever second comes next."""
    from pytest_opik_eval.store.local import rows

    instants_ms = [
        0,
        5,
        999,
        1_000,
        1_001,
        59_999,
        60_000,
        1_767_225_599_999,
        1_767_225_600_000,
        4_102_444_800_123,
    ]
    for ms in [*instants_ms, *reversed(instants_ms)]:
        monkeypatch.setattr(time, "time_ns", lambda ms=ms: ms * 1_000_000 + 999_999)
        expected = datetime.fromtimestamp(ms // 1000, timezone.utc).replace(microsecond=ms % 1000 * 1000)
        assert rows.now() == expected.isoformat(timespec="milliseconds")
