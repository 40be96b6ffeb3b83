"""The example eval suite: `pytest --eval` runs it, `pytest --eval-resume=last` finishes it."""

import app
import pytest

from pytest_opik_eval.metrics import Contains, LevenshteinRatio


@pytest.mark.eval(
    dataset="data/capitals.jsonl",
    # Contains is pass/fail (the expected city must appear in the answer); LevenshteinRatio only
    # reports how close the wording is: its threshold of 0 fails nothing, and says that is meant.
    metrics=[Contains(), LevenshteinRatio(threshold=0)],
    scoring_key_mapping={"reference": "expected_output"},
    trial_count=2,
)
def test_capitals(eval_item):
    return app.answer(eval_item["input"]["question"])


@pytest.mark.eval(
    dataset="data/capitals.jsonl",
    filter='data.region = "europe"',
    metrics=[Contains()],
    scoring_key_mapping={"reference": "expected_output"},
    experiment_name="capitals-europe",
)
def test_european_capitals(eval_item):
    return {"output": app.answer(eval_item["input"]["question"])}


def test_app_declines_other_questions():
    # An ordinary unit test lives next to the evals and runs with or without --eval.
    assert app.answer("How tall is Everest?").startswith("I can only answer")
