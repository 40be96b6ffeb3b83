"""Where a judge's calibration came from, in every report's judges section: the experiment's own
labels, another experiment's of the session, or a calibration an earlier session stored, with
its run, its date and its age at the session's clock (a fake one here)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from datetime import datetime, timezone
from typing import Any

import pytest
from conftest import Project
from test_corrected_gates import CALIBRATION, rows, write

from pytest_opik_eval import ids

CALIBRATED_AT = "2026-12-02T09:30:00.000+00:00"
SESSION_CLOCK = datetime(2026, 12, 5, 12, 0, tzinfo=timezone.utc)  # 3 days and 2.5 hours later


def labels_line(lines: list[str], test: str) -> str:
    """The labels line of ``test``'s experiment in the terminal summary."""
    start = next(n for n, line in enumerate(lines) if line.startswith(f"{test} ("))
    return next(line for line in lines[start:] if line.startswith("  labels: "))


def judges_properties(project: Project) -> dict[str, str]:
    root = ET.parse(project.path / "junit.xml").getroot()
    found = {str(p.get("name")): str(p.get("value")) for p in root.iter("property")}
    return {name: value for name, value in found.items() if ".labels.correctness." in name}


def html_origin(project: Project) -> str:
    """The judges panel's last cell, where the labels came from."""
    page = (project.path / "report.html").read_text()
    row = page.split('<div class="panel judges">', 1)[1].split('<tr data-score="correctness">', 1)[1]
    return row.split("</tr>", 1)[0].split("<td>")[-1].removesuffix("</td>")


def test_a_gate_by_a_stored_calibration_shows_its_age_and_origin_in_every_report(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    project.dataset(CALIBRATION, "labelled.jsonl")
    project.dataset(rows(30, 10, label=None, prefix="a"), "app.jsonl")
    write(project, ("test_calibration", "labelled.jsonl", "", ""))
    project.run("--eval")
    (kept,) = (project.store_path.parent / "calibrations").glob("*/*.json")
    stored: dict[str, Any] = json.loads(kept.read_text())
    kept.write_text(json.dumps({**stored, "created_at": CALIBRATED_AT}))  # kept three days before
    run = stored["run_id"]

    summary = project.path / "step_summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    monkeypatch.setattr(ids, "_clock", lambda: int(SESSION_CLOCK.timestamp()) * 10**9)
    write(project, ("test_app", "app.jsonl", "", 'fail_under={"correctness": 0.6}'))
    result, report = project.run_report("--eval", "--junitxml=junit.xml", "--eval-html=report.html")
    origin = f"stored calibration of test_calibration: calibrated 3 days ago, run {run}, 2026-12-02"
    line = labels_line(result.outlines, "test_app")
    # The stored items' figures, the app's pass rate as judged and corrected by them, and whence.
    assert line.startswith("  labels: correctness (threshold 0.5, 20 items x 1 trial): agreement 0.850 [")
    assert "; pass rate 0.750 [" in line
    assert line.endswith(f"] corrected; {origin}")
    (found,) = report["experiments"][0]["calibrations"]
    assert found["origin"] == {
        "kind": "stored",
        "experiment": "test_calibration",
        "run_id": run,
        "created_at": CALIBRATED_AT,
        "age_days": pytest.approx(3 + 2.5 / 24),
    }
    assert found["corrected"]["estimate"] == pytest.approx(0.55 / 0.7)
    properties = judges_properties(project)
    base = "eval.test_app.labels.correctness."
    assert {name: properties[base + name] for name in ("origin", "experiment", "run_id", "created_at")} == {
        "origin": "stored",
        "experiment": "test_calibration",
        "run_id": run,
        "created_at": CALIBRATED_AT,
    }
    assert properties[base + "age_days"] == "3.10417"
    assert f"- {line.removeprefix('  labels: ')}\n" in summary.read_text(encoding="utf-8")
    assert html_origin(project) == origin


def test_a_calibration_by_the_sessions_labels_says_whose(project: Project) -> None:
    project.dataset(CALIBRATION, "labelled.jsonl")
    project.dataset(rows(30, 10, label=None, prefix="a"), "app.jsonl")
    write(
        project,
        ("test_calibration", "labelled.jsonl", "", ""),
        ("test_app", "app.jsonl", "", 'fail_under={"correctness": 0.6}'),
    )
    result, report = project.run_report("--eval", "--junitxml=junit.xml", "--eval-html=report.html")
    assert labels_line(result.outlines, "test_calibration").endswith("; labels of this experiment")
    assert labels_line(result.outlines, "test_app").endswith("; labels of test_calibration, this session")
    origins = {e["name"]: e["calibrations"][0]["origin"] for e in report["experiments"]}
    run = report["run_id"]
    assert origins == {
        "test_calibration": {
            "kind": "own",
            "experiment": "test_calibration",
            "run_id": run,
            "created_at": None,
            "age_days": None,
        },
        "test_app": {
            "kind": "session",
            "experiment": "test_calibration",
            "run_id": run,
            "created_at": None,
            "age_days": None,
        },
    }
    properties = judges_properties(project)
    assert properties["eval.test_calibration.labels.correctness.origin"] == "own"
    assert properties["eval.test_app.labels.correctness.origin"] == "session"
    assert "eval.test_app.labels.correctness.age_days" not in properties
