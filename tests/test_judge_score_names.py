"""A judge whose scores are not named after it, or that gives several: it is recorded under the
names of the scores it returns, as labels and gates name them, so that its labels calibrate it,
its gates are corrected, and its calibration is kept for it; the same under pytest-xdist, CI
shards, a resume and ``opik-eval calibrate``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import Project
from opik_server import OpikTestServer
from test_corrected_gates import gate_lines
from test_judge_drift import opik_eval as opik_eval_command

from pytest_opik_eval.cli import main as opik_eval
from pytest_opik_eval.ids import uuid7
from pytest_opik_eval.store.local import LocalStore
from pytest_opik_eval.store.opik import payloads
from pytest_opik_eval.store.opik.spool import Spool
from pytest_opik_eval.store.records import DatasetRecord, ExperimentRecord, RunRecord, Selection

# The judge's verdict is the item's "judge" field; it is named "my_judge", and names its scores
# otherwise ("correctness", or each of ``scores``).
TESTS = """
import pathlib
import pytest
from pytest_opik_eval.metrics import BaseMetric, Equals, ScoreResult


class Judge(BaseMetric):
    judge = True

    def __init__(self, scores=("correctness",)):
        super().__init__(name="my_judge")
        self.scores = scores

    def score(self, output, **kwargs):
        results = [ScoreResult(name=name, value=float(output)) for name in self.scores]
        return results[0] if len(results) == 1 else results


@pytest.mark.eval(dataset="labelled.jsonl", metrics=[Judge({scores})])
def test_calibration(eval_item):
    return {{"output": eval_item["judge"]}}


@pytest.mark.eval(dataset="app.jsonl", metrics=[Judge({scores})], fail_under={gates})
def test_app(eval_item):
    failing = pathlib.Path(__file__).parent / "fail.txt"
    if failing.exists() and eval_item["id"] in failing.read_text().split():
        raise RuntimeError("the app is down")
    return {{"output": eval_item["judge"]}}
"""

TWO = '("correctness", "relevance")'


def labelled(*scores: str) -> list[dict[str, Any]]:
    """10 items labelled pass (the judge passes 9), 10 labelled fail (it fails 8), for each score:
    sensitivity 0.9, specificity 0.8."""
    return [
        {"id": f"p{n}", "judge": int(n < 9), "labels": dict.fromkeys(scores, True)} for n in range(10)
    ] + [{"id": f"f{n}", "judge": int(n < 2), "labels": dict.fromkeys(scores, False)} for n in range(10)]


# The app's run: 30 of 40 judged passing, none labelled; corrected (0.75 + 0.8 - 1) / 0.7 = 0.786.
APP = [{"id": f"a{n}", "judge": int(n < 30)} for n in range(40)]


def corrected(score: str) -> str:
    return (
        f"met: test_app: fail_under {score}: pass rate 0.786 corrected for the judge's errors "
        "(0.750 as judged) >= 0.6"
    )


def judging(project: Project, scores: str = "") -> Project:
    names = ["correctness", "relevance"] if scores == TWO else ["correctness"]
    project.dataset(labelled(*names), "labelled.jsonl")
    project.dataset(APP, "app.jsonl")
    gates = {name: 0.6 for name in names}
    project.write("test_eval.py", TESTS.format(scores=scores, gates=gates))
    return project


def stored_judges(project: Project, store: str | None = None) -> dict[str, dict[str, str]]:
    """Each experiment's judges, as the store keeps them: by the names of their scores."""
    found = LocalStore(project.path / store if store else project.store_path, create=False)
    try:
        return {e.name: e.judges for e in found.find("last")[1]}
    finally:
        found.close()


def calibrations(report: dict[str, Any]) -> dict[str, tuple[Any, ...]]:
    """The calibrations of the report's experiments, by score: their judge, and their figures."""
    return {
        c["score"]: (c["judge"], c["items"], c["sensitivity"]["estimate"], c["specificity"]["estimate"])
        for e in report["experiments"]
        for c in e["calibrations"]
    }


def kept(project: Project) -> dict[str, str]:
    """The calibrations kept beside the store, score -> judge."""
    files = (project.store_path.parent / "calibrations").glob("*/*.json")
    return {(found := json.loads(f.read_text()))["score"]: found["judge"] for f in files}


@pytest.fixture
def judged(project: Project) -> Project:
    return judging(project)


def test_a_judge_named_otherwise_than_its_score_is_calibrated_and_corrects_the_gates(
    judged: Project,
) -> None:
    result, report = judged.run_report("--eval", "--eval-soft")
    assert gate_lines(result) == [corrected("correctness")]
    judges = stored_judges(judged)
    # Under the name of its score, not under its own: no score is named "my_judge".
    assert judges["test_app"] == judges["test_calibration"]
    (judge,) = judges["test_app"].values()
    assert list(judges["test_app"]) == ["correctness"]
    assert calibrations(report) == {"correctness": (judge, 20, 0.9, 0.8)}
    assert kept(judged) == {"correctness": judge}
    # Alone in a later session, the app's test finds the calibration kept for its judge: strict
    # mode takes it as calibrated, and bounds the corrected rate.
    result = judged.run("--eval", "--eval-soft", "--eval-gate-mode=strict", "-k", "test_app")
    (line,) = gate_lines(result)
    assert line.startswith(
        "NOT MET: test_app: fail_under correctness (strict): pass rate 0.786 corrected for the "
        "judge's errors (0.750 as judged), lower bound "
    )
    result.stdout.fnmatch_lines(["  corrected by 20 labelled item(s) of test_calibration (run *"])


def test_a_judge_giving_two_scores_is_calibrated_for_each(project: Project) -> None:
    judging(project, TWO)
    result, report = project.run_report("--eval", "--eval-soft")
    assert gate_lines(result) == [corrected("correctness"), corrected("relevance")]
    judges = stored_judges(project)["test_app"]
    assert sorted(judges) == ["correctness", "relevance"]
    assert judges["correctness"] == judges["relevance"]  # one judge, two scores
    assert calibrations(report) == {
        "correctness": (judges["correctness"], 20, 0.9, 0.8),
        "relevance": (judges["relevance"], 20, 0.9, 0.8),
    }
    assert kept(project) == judges


def test_xdist_workers_learn_the_score_names(project: Project) -> None:
    judging(project, TWO)
    _, serial = project.run_report("--eval", "--eval-soft", "--eval-store=serial.db")
    result, report = project.run_report("--eval", "--eval-soft", "-p", "xdist", "-n", "2")
    assert gate_lines(result) == [corrected("correctness"), corrected("relevance")]
    assert calibrations(report) == calibrations(serial)
    assert stored_judges(project) == stored_judges(project, "serial.db")


def test_shards_merged_know_the_judge_by_its_scores(
    judged: Project, capsys: pytest.CaptureFixture[str]
) -> None:
    _, serial = judged.run_report("--eval", "--eval-soft", "--eval-store=serial.db")
    for k in (1, 2):
        judged.run(
            "--eval",
            "--eval-soft",
            "--eval-run-id=ci-1",
            f"--eval-shard={k}/2",
            f"--eval-store=ci/shard{k}.db",
        )
    merged = str(judged.path / "ci" / "merged.db")
    shards = [str(judged.path / "ci" / f"shard{k}.db") for k in (1, 2)]
    assert opik_eval(["--store", merged, "merge", *shards]) == 0
    assert stored_judges(judged, "ci/merged.db") == stored_judges(judged, "serial.db")
    assert list(stored_judges(judged, "ci/merged.db")["test_app"]) == ["correctness"]
    exported = judged.path / "merged.json"
    assert opik_eval(["--store", merged, "export", "ci-1", "-o", str(exported)]) == 0
    assert calibrations(json.loads(exported.read_text())) == calibrations(serial)
    # The gate on the whole run corrects the app's pass rate by the calibration's labels.
    capsys.readouterr()
    assert opik_eval(["--store", merged, "gate", "ci-1"]) == 0
    assert corrected("correctness") in capsys.readouterr().out.splitlines()


def test_a_shard_that_scored_none_of_a_tests_trials_adds_no_guessed_name(judged: Project) -> None:
    judged.dataset(APP[:1], "app.jsonl")  # one item: one shard has none of the app's trials
    stores = []
    for k in (1, 2):
        store = f"ci/shard{k}.db"
        judged.run(
            "--eval", "--eval-soft", "--eval-run-id=ci-1", f"--eval-shard={k}/2", f"--eval-store={store}"
        )
        stores.append(str(judged.path / store))
    # The shard without the app's trial knows its judge by the judge's own name only.
    assert sorted(
        list(stored_judges(judged, s[len(str(judged.path)) + 1 :])["test_app"]) for s in stores
    ) == [
        ["correctness"],
        ["my_judge"],
    ]
    for order in (stores, stores[::-1]):  # whichever shard is merged first
        merged = judged.path / "ci" / f"merged-{len(order)}-{order[0][-4]}.db"
        assert opik_eval(["--store", str(merged), "merge", *order]) == 0
        assert list(stored_judges(judged, str(merged.relative_to(judged.path)))["test_app"]) == [
            "correctness"
        ]


@pytest.mark.parametrize("processes", [(), ("-p", "xdist", "-n", "2")], ids=["serial", "xdist"])
def test_a_resume_keeps_the_names_its_run_learned(judged: Project, processes: tuple[str, ...]) -> None:
    # The calibration's test runs whole; the app's first trial fails, and -x leaves the others.
    judged.fail("a0")
    judged.run("--eval", "-x").assert_outcomes(passed=20, failed=1)
    judges = stored_judges(judged)
    assert list(judges["test_calibration"]) == ["correctness"]
    assert list(judges["test_app"]) == ["my_judge"]  # none of its trials was scored: its own name
    judged.repair()
    # The calibration's test runs no trial now: its judge is known by its score from the store.
    result, report = judged.run_report("--eval-resume=last", "--eval-soft", *processes)
    result.assert_outcomes(passed=40)
    assert gate_lines(result) == [corrected("correctness")]
    judges = stored_judges(judged)
    assert judges["test_app"] == judges["test_calibration"]
    assert list(judges["test_app"]) == ["correctness"]
    (judge,) = judges["test_app"].values()
    assert calibrations(report) == {"correctness": (judge, 20, 0.9, 0.8)}


def test_calibrate_drift_and_rescore_find_the_judge_by_its_scores(judged: Project) -> None:
    judged.run("--eval", "--eval-soft")
    done = opik_eval_command(judged, "calibrate", "last")
    assert done.returncode == 0, done.stdout + done.stderr
    (judge,) = stored_judges(judged)["test_calibration"].values()
    assert kept(judged) == {"correctness": judge}
    done = opik_eval_command(judged, "judge-drift", "last", "--max-drift", "0.1")
    assert done.returncode == 0, done.stdout + done.stderr
    done = opik_eval_command(judged, "rescore", "last")
    assert stored_judges(judged)["test_app"] == {"correctness": judge}


def test_a_score_a_judge_and_another_metric_both_give_is_no_judges(project: Project) -> None:
    project.dataset(labelled("correctness"), "labelled.jsonl")
    project.dataset(APP, "app.jsonl")
    source = TESTS.format(scores="", gates={"correctness": 0.6}).replace(
        "metrics=[Judge()], fail_under",
        'metrics=[Judge(), Equals(name="correctness")], scoring_key_mapping={"reference": "judge"}, '
        "fail_under",
    )
    project.write("test_eval.py", source)
    result = project.run("--eval", "--eval-soft")
    result.stdout.fnmatch_lines(
        [
            "test_eval.py::test_app: score 'correctness' is given by judge Judge ('my_judge') and metric "
            "Equals ('correctness'): it is no judge's score, so no calibration against human labels "
            "holds for it and its gates are not corrected for a judge's errors; give each metric's "
            "scores names of their own (the name of the ScoreResult the judge returns)"
        ]
    )
    judges = stored_judges(project)
    assert judges["test_app"] == {}
    assert list(judges["test_calibration"]) == ["correctness"]


def test_the_opik_server_keeps_the_names_for_another_machine(judged: Project, opik: OpikTestServer) -> None:
    _, report = judged.run_report("--eval", "--eval-soft")
    judges = stored_judges(judged)  # the spool's
    by_name = {e["name"]: e for e in opik.experiments.values()}
    assert {name: e["metadata"].get("judges") for name, e in by_name.items()} == judges
    # Another machine, without the spool, reads the experiment (and its judges) from the server.
    judged.store_path.unlink()
    exported = judged.path / "exported.json"
    calibration = by_name["test_calibration"]["id"]
    command = ["--backend", "opik", "--store", str(judged.store_path), "export", calibration]
    assert opik_eval([*command, "-o", str(exported)]) == 0
    assert calibrations(json.loads(exported.read_text())) == calibrations(report)


def test_a_sampled_judge_is_another_judge_under_its_scores_names(project: Project) -> None:
    judging(project, TWO)
    project.run("--eval", "--eval-soft")
    once = stored_judges(project)["test_app"]
    result, report = project.run_report("--eval", "--eval-soft", "--eval-judge-samples=3")
    assert gate_lines(result) == [corrected("correctness"), corrected("relevance")]
    sampled = stored_judges(project)["test_app"]
    assert sorted(sampled) == ["correctness", "relevance"]
    # Its mean of 3 calls errs otherwise than one call: another identity, its calibration apart.
    assert sampled["correctness"] == sampled["relevance"] != once["correctness"]
    assert {score: found[0] for score, found in calibrations(report).items()} == sampled


def test_workers_learning_at_once_send_what_both_learned(tmp_path: Path) -> None:
    # Two pytest-xdist workers' spools on one file: each change of the judges commits with the
    # metadata it sends, so the last one sent holds what both learned (sent after its commit, a
    # worker's older view could reach the server last and hide the other's names).
    path = tmp_path / "spool.db"
    first, second = Spool(path), Spool(path)
    run = RunRecord(id=uuid7(), created_at="2026-01-01T00:00:00", rootdir="", args=[])
    experiment = ExperimentRecord(
        id=uuid7(),
        run_id=run.id,
        name="test_app",
        test="test_eval.py::test_app",
        params="",
        created_at=run.created_at,
        dataset=DatasetRecord(source="app.jsonl", path=None, version="v"),
        selection=Selection(),
        items=[{"id": "a"}],
        judges={"my_judge": "J"},
    )
    first.create_run(run, [experiment], [])

    def sent(judges: dict[str, str]) -> list[tuple[str, str]]:
        return payloads.experiment_metadata(experiment.id, payloads.JUDGES_KEY, judges)

    first.record_judges(experiment.id, {"correctness": "J", "my_judge": None}, outbox=sent)
    second.record_judges(experiment.id, {"relevance": "J", "my_judge": None}, outbox=sent)
    # An experiment the spool does not have sends nothing (an empty "judges" would erase them).
    assert second.record_judges("unknown", {"relevance": "J"}, outbox=sent) == {}
    rows = [
        json.loads(payload) for _, kind, payload in first.outbox_batch(10) if kind == "experiment_metadata"
    ]
    assert [row["value"] for row in rows] == [{"correctness": "J"}, {"correctness": "J", "relevance": "J"}]
    first.close()
    second.close()
