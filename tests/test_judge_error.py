"""A judge of known error, end to end: 200 simulated runs of one app in one pytest session, each
with its own items and its own human-labelled sample of them, scored by a judge that fails 10%
of true passes and passes 20% of true failures. The corrected pass rate's interval must cover the
app's true pass rate at least 93% of the time; the raw rate's, which the judge's errors bias,
is reported beside it."""

from __future__ import annotations

from conftest import Project

RUNS = 200
TRUE_PASS_RATE = 0.3  # the judge passes 0.9 * 0.3 + 0.2 * 0.7 = 0.41 of the answers

# Each run is a test of its own, with its own items (their true verdicts drawn with the run's
# seed) and its own judge (its errors drawn with the run's seed): an experiment per run.
SIMULATION = f"""
import random
import pytest
from pytest_opik_eval.metrics import BaseMetric, ScoreResult

ITEMS, LABELLED = 60, 30


class FlippingJudge(BaseMetric):
    judge = True  # an LLM judge: a true pass it fails 10% of the time, a true failure it passes 20%

    def __init__(self, run):
        super().__init__(name="correctness")
        self.threshold = 0.5
        self.run = run

    def score(self, output, id, **ignored):
        right = output == "right"
        draw = random.Random(f"judge-{{self.run}}-{{id}}").random()
        return ScoreResult(name=self.name, value=float(draw < (0.9 if right else 0.2)))


def items(run):
    rng = random.Random(f"app-{{run}}")
    found = []
    for n in range(ITEMS):
        right = rng.random() < {TRUE_PASS_RATE}
        item = {{"id": f"r{{run}}i{{n}}", "right": right}}
        if n < LABELLED:  # a person checked these answers
            item["labels"] = {{"correctness": right}}
        found.append(item)
    return found


def make(run):
    @pytest.mark.eval(dataset=items(run), metrics=[FlippingJudge(run)], experiment_name=f"run{{run}}")
    def test_app(eval_item):
        return {{"output": "right" if eval_item["right"] else "wrong"}}

    return test_app


for run in range({RUNS}):
    globals()[f"test_run{{run}}"] = make(run)
"""


def test_the_corrected_interval_covers_the_true_pass_rate(project: Project) -> None:
    project.write("test_sim.py", SIMULATION)
    # Soft: a trial the judge fails does not fail the session (nor cost a failure report).
    _, report = project.run_report("--eval", "--eval-soft", "-q")
    assert len(report["experiments"]) == RUNS
    covered = raw_covered = 0
    for experiment in report["experiments"]:
        (found,) = experiment["calibrations"]
        corrected, judged = found["corrected"], found["judged"]
        covered += corrected["low"] <= TRUE_PASS_RATE <= corrected["high"]
        raw_covered += judged["low"] <= TRUE_PASS_RATE <= judged["high"]
    print(f"coverage of {TRUE_PASS_RATE}: corrected {covered}/{RUNS}, as judged {raw_covered}/{RUNS}")
    assert covered >= 0.93 * RUNS
    assert raw_covered < covered  # the judge's errors move the raw rate off the truth
