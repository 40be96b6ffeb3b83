"""Metrics that return something other than a finite number, and stores that already hold such a
score (written by an earlier version as a null value): a clear failure of the trial, and a store
that stays readable."""

from __future__ import annotations

import json
import re
import sqlite3
from typing import Any

import pytest
from conftest import Project, items

from pytest_opik_eval.cli import main

# A metric whose value for each item is given by the item's id; "raise" raises.
ODD_METRIC = """
import math
from pytest_opik_eval.metrics import BaseMetric, ScoreResult

VALUES = {"nan": math.nan, "inf": math.inf, "none": None, "text": "0.5", "ok": 1.0}


class Odd(BaseMetric):
    def __init__(self):
        super().__init__(name="odd_metric")

    def score(self, output, **ignored):
        if output == "raise":
            raise ValueError("the judge model answered nonsense")
        return ScoreResult(name=self.name, value=VALUES[output])
"""


def _strict_json(text: str) -> Any:
    def refuse(constant: str) -> None:
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_a_score_that_is_not_a_finite_number_fails_its_trial_naming_the_metric_and_value(
    project: Project, capsys: pytest.CaptureFixture[str]
) -> None:
    project.dataset(items("ok", "nan", "inf", "none", "text", "raise"))
    project.eval_test(imports=ODD_METRIC, metrics="[Odd()]")

    result = project.run("--eval", f"--eval-report={project.path / 'report.json'}")

    assert result.ret == 1
    assert "INTERNALERROR" not in result.stdout.str()
    result.assert_outcomes(passed=1, failed=5)
    result.stdout.fnmatch_lines(
        [
            "*odd_metric  scoring failed: Odd.score() returned nan for 'odd_metric'; a score must be a "
            "finite number*",
            "*odd_metric  scoring failed: Odd.score() returned inf for 'odd_metric'*",
            "*odd_metric  scoring failed: Odd.score() returned None for 'odd_metric'*",
            "*odd_metric  scoring failed: Odd.score() returned '0.5' (a str) for 'odd_metric'*",
            "*odd_metric  scoring failed: ValueError: the judge model answered nonsense*",
            "*6 completed (1 passed, 5 failed), 0 pending*",
        ]
    )
    report = _strict_json((project.path / "report.json").read_text())
    scores = {t["dataset_item_id"]: t["scores"][0] for t in report["experiments"][0]["trials"]}
    assert scores["ok"] == {
        "name": "odd_metric",
        "value": 1.0,
        "reason": None,
        "scoring_failed": False,
        "metadata": None,
        "samples": None,
    }
    assert all(scores[k]["scoring_failed"] for k in ("nan", "inf", "none", "text", "raise"))

    # The store stays readable by every later command.
    code, out, err = _cli(capsys, "show", "last")
    assert code == 0, err
    assert re.search(r"^  nan +0  completed failed +odd_metric=FAILED$", out, re.MULTILINE), out
    assert project.run("--eval-resume=last").ret == 1  # completed trials that failed still fail


# Metadata JSON cannot hold, chosen by the item's id; "ok" holds values JSON has no type for.
ODD_METADATA = """
import datetime
from pytest_opik_eval.metrics import BaseMetric, ScoreResult

loop = {}
loop["self"] = loop
METADATA = {"list": [1, 2], "loop": loop, "keys": {(1, 2): "pair"}, "ok": {"when": {datetime.date(2026, 1, 2)}}}


class Detailed(BaseMetric):
    def __init__(self):
        super().__init__(name="detailed")

    def score(self, output, **ignored):
        return ScoreResult(name=self.name, value=1.0, metadata=METADATA[output])
"""


def test_metadata_json_cannot_hold_fails_its_score_naming_the_metric_and_keeps_the_rest(
    project: Project,
) -> None:
    project.dataset(items("list", "loop", "keys", "ok"))
    project.eval_test(imports=ODD_METADATA, metrics="[Detailed(), Equals()]")

    result, report = project.run_report("--eval")

    assert "INTERNALERROR" not in result.stdout.str()
    result.assert_outcomes(passed=1, failed=3)
    result.stdout.fnmatch_lines_random(
        [
            "*detailed       scoring failed: Detailed.score() returned metadata for 'detailed' that is "
            "[[]1, 2[]] (a list); metadata must be a dict (or None)",
            "*detailed       scoring failed: Detailed.score() returned metadata for 'detailed' that is "
            "nested more than 200 levels deep (or contains itself); flatten it",
            "*detailed       scoring failed: Detailed.score() returned metadata for 'detailed' that JSON "
            "cannot hold (keys must be str, int, float, bool or None, not tuple); use string keys",
            "FAILED test_eval.py::test_qa[[]list-t0[]] - Failed: item list (trial 0)*",
            "FAILED test_eval.py::test_qa[[]loop-t0[]] - Failed: item loop (trial 0)*",
        ]
    )
    # Each trial keeps its output and its other score; the value JSON has no type for is its repr.
    trials = {t["dataset_item_id"]: t for t in report["experiments"][0]["trials"]}
    for item in ("list", "loop", "keys"):
        assert trials[item]["output"] == {"output": item}
        detailed, equals = trials[item]["scores"]
        assert (detailed["scoring_failed"], detailed["metadata"]) == (True, None)
        assert (equals["name"], equals["value"]) == ("equals_metric", 1.0)
    assert trials["ok"]["scores"][0]["metadata"] == {"when": "{datetime.date(2026, 1, 2)}"}
    assert trials["ok"]["passed"] is True


def _plant_null_score(project: Project, item_id: str) -> None:
    """What an earlier version wrote for a metric that returned NaN: the score's value as null."""
    db = sqlite3.connect(project.store_path)
    with db:
        db.execute(
            "UPDATE attempts SET scores = ? WHERE trial_id ="
            " (SELECT id FROM trials WHERE dataset_item_id = ?)",
            (
                json.dumps(
                    [{"name": "equals_metric", "value": None, "reason": None, "scoring_failed": False}]
                ),
                item_id,
            ),
        )
    db.close()


def test_a_store_holding_a_null_score_opens_and_reports_the_row(
    project: Project, capsys: pytest.CaptureFixture[str]
) -> None:
    project.dataset(items("a", "b", "c"))
    project.eval_test()
    project.fail("c")
    assert project.run("--eval").ret == 1  # c stays pending
    project.calls()
    _plant_null_score(project, "b")

    # opik-eval show reads the store, shows the score as failed, and names the row.
    code, out, err = _cli(capsys, "show", "last")
    assert code == 0, err
    assert "could not be read" in err
    assert "test_eval.py::test_qa[b-t0]" in err
    assert '"value": null' in err
    assert re.search(r"^  b +0  completed failed +equals_metric=FAILED$", out, re.MULTILINE), out

    # So does a resume: it runs the pending trial, and its summary and report read the rest.
    project.repair()
    result, report = project.run_report("--eval-resume=last")
    assert "INTERNALERROR" not in result.stdout.str()
    assert project.calls() == ["c#0"]
    result.stdout.fnmatch_lines(["*eval notices*", "*could not be read*test_eval.py::test_qa?b-t0?*"])
    trials = {t["dataset_item_id"]: t for t in report["experiments"][0]["trials"]}
    assert trials["b"]["scores"][0]["scoring_failed"] is True
    assert trials["b"]["passed"] is False
    assert (trials["a"]["passed"], trials["c"]["passed"]) == (True, True)
    assert result.ret == 1  # the unreadable score fails its trial, as a NaN score does now

    # And the export of the JSON report.
    code, out, err = _cli(capsys, "export", "last")
    assert code == 0, err
    assert _strict_json(out)["experiments"][0]["summary"]["metrics"]["equals_metric"]["failed"] == 1
