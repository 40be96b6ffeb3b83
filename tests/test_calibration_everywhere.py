"""A judge's calibration and the gates it corrects, the same under every way of running:
pytest-xdist's workers, CI shards merged and gated afterwards, and a recorded run replayed
offline with the judge cache."""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import NEEDS_RECORD, Project
from test_corrected_gates import CALIBRATION, gate_lines, write

from pytest_opik_eval.cli import main as opik_eval

GATED = 'fail_under={"correctness": 0.52}'
# (0.55 + 0.8 - 1) / 0.7: the judge passes 11 of the 20, with sensitivity 0.9 and specificity 0.8.
LINE = (
    "NOT MET: test_qa: fail_under correctness: pass rate 0.500 corrected for the judge's errors, "
    "20 labelled item(s) by their labels (0.550 as judged) is below 0.52"
)


def figures(report: dict[str, Any]) -> tuple[Any, ...]:
    """The experiment's calibration and its corrected gate, as the JSON report has them."""
    (experiment,) = report["experiments"]
    (found,) = experiment["calibrations"]
    (gate,) = experiment["gates"]
    return (
        found["items"],
        found["sensitivity"]["estimate"],
        found["specificity"]["estimate"],
        found["corrected"],
        gate["value"],
        gate["interval"],
        gate["correction"],
    )


@pytest.fixture
def serial(project: Project) -> tuple[Any, ...]:
    """The calibrated project, and its figures run in one process."""
    project.dataset(CALIBRATION)
    write(project, ("test_qa", "data.jsonl", "", GATED))
    _, report = project.run_report("--eval", "--eval-soft", "--eval-store=serial.db")
    return figures(report)


def test_xdist_workers_calibrate_as_one_process(project: Project, serial: tuple[Any, ...]) -> None:
    result, report = project.run_report("--eval", "--eval-soft", "-p", "xdist", "-n", "2")
    assert gate_lines(result) == [LINE]
    assert figures(report) == serial
    # The controller keeps the calibration, once.
    assert len(list((project.store_path.parent / "calibrations").glob("*/*.json"))) == 1


def test_shards_merged_are_calibrated_and_gated_as_one_run(project: Project, serial: tuple[Any, ...]) -> None:
    for k in (1, 2):
        project.run(
            "--eval",
            "--eval-soft",
            "--eval-run-id=ci-1",
            f"--eval-shard={k}/2",
            f"--eval-store=ci/shard{k}.db",
        )
    merged = str(project.path / "ci" / "merged.db")
    shards = [str(project.path / "ci" / f"shard{k}.db") for k in (1, 2)]
    assert opik_eval(["--store", merged, "merge", *shards]) == 0
    exported = project.path / "merged.json"
    assert opik_eval(["--store", merged, "export", "ci-1", "-o", str(exported)]) == 0
    assert figures(json.loads(exported.read_text())) == serial
    kept = project.path / "ci" / "calibrations"  # beside the stores
    assert not kept.exists()  # a shard has a part of the labelled items: it keeps none
    # The gate on the whole run: the corrected rate 0.5 is below 0.52; and the fan-in keeps the
    # judge's calibration of the whole run.
    assert opik_eval(["--store", merged, "gate", "ci-1"]) == 1
    (calibration,) = kept.glob("*/*.json")
    assert len(json.loads(calibration.read_text())["items"]) == 20


@NEEDS_RECORD
def test_a_replay_offline_calibrates_from_the_judge_cache(project: Project, serial: tuple[Any, ...]) -> None:
    recorded = project.run("--eval", "--eval-soft", "--eval-record=once")
    recorded.stdout.fnmatch_lines(["eval judge cache: 0 hits, 20 scored"])
    replayed, report = project.run_report("--eval", "--eval-soft", "--eval-record=none")
    replayed.stdout.fnmatch_lines(["eval judge cache: 20 hits, 0 scored, 0 missed (strict)"])
    assert gate_lines(replayed) == [LINE]
    assert figures(report) == serial
