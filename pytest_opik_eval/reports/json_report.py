"""Writing the JSON report (``--eval-report``)."""

from __future__ import annotations

from pathlib import Path

from pytest_opik_eval.files import write_atomically
from pytest_opik_eval.verdict.model import Report


def write_report(report: Report, path: Path) -> None:
    write_atomically(path, report.model_dump_json(indent=2) + "\n")
