"""Judges' calibrations against human labels, kept by the judge's identity (``run/judges.py``):
``<store folder>/calibrations/<identity>/<score>.json``, one file per judge and score, the newest
session's; and each run's, under ``<identity>/runs/<run>/``, which a regression gate corrects its
baseline by (the judge's errors of the baseline's day). A later session whose gate reads that
judge's score, with no labelled test of its own, is corrected by the newest; a judge whose
prompt, model or code changed has another identity, so its old calibration is found stale, not
used.

Each file holds the labelled items' verdicts (how many trials the judge passed, of how many, and
the label), never their inputs or outputs: no dataset content, so no secret, is copied here. It is
written whole or not at all, as the judge cache's files are; a damaged one (or one that is not
what its path says) is ignored.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from pytest_opik_eval.files import write_atomically

CALIBRATIONS = "calibrations"  # the folder under the store folder
RUNS = "runs"  # under a judge's folder: each run's calibrations, by the run's id
# A judge's identity: a sha256, which names its folder (a record read from a server that held
# anything else must not name a path).
IDENTITY = "^[0-9a-f]{64}$"


class LabelledRow(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    item_id: str
    passed: int = Field(ge=0)  # trials the judge passed
    trials: int = Field(ge=1)
    label: bool  # the human verdict

    @model_validator(mode="after")
    def _passed_of_trials(self) -> LabelledRow:
        if self.passed > self.trials:
            raise ValueError(f"{self.passed} passed of {self.trials} trials")
        return self


class StoredCalibration(BaseModel):
    """A judge's verdicts on one experiment's labelled items, for one score."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    judge: str = Field(pattern=IDENTITY)  # its identity
    score: str
    experiment: str  # the experiment's name
    experiment_id: str
    run_id: str
    created_at: str  # the experiment's
    items: list[LabelledRow]
    # The times the judge scored each output (judge_samples), which its identity holds: a change
    # of it alone can be told from one of its prompt, model or code (None: kept by a version
    # before it was stored, which says only that the judge changed).
    judge_samples: int | None = Field(default=None, ge=1)


class Calibrations:
    """The calibrations under ``folder``."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def save(self, calibration: StoredCalibration, *, newest: bool = True) -> None:
        """Kept as its run's calibration of the judge's score, and (``newest``) as the judge's
        calibration for it; a read-only or full folder keeps none: the session's own gates have
        it already."""
        text = calibration.model_dump_json(indent=2) + "\n"
        folder = self.folder / calibration.judge  # the model checked the identity
        paths = [folder / RUNS / _digest(calibration.run_id) / _file(calibration.score)]
        if newest:
            paths.append(folder / _file(calibration.score))
        for path in paths:
            try:
                write_atomically(path, text)
            except OSError:
                pass

    def of_run(self, judge: str, score: str, run_id: str) -> StoredCalibration | None:
        """The calibration of ``score`` the run ``run_id`` kept for the judge: the judge's errors
        on that day, which a later calibration does not replace."""
        if not re.match(IDENTITY, judge):
            return None
        found = _read(self.folder / judge / RUNS / _digest(run_id) / _file(score))
        return (
            found
            if found is not None and (found.judge, found.score, found.run_id) == (judge, score, run_id)
            else None
        )

    def of(self, judge: str, score: str) -> StoredCalibration | None:
        if not re.match(IDENTITY, judge):
            return None
        found = _read(self.folder / judge / _file(score))
        return found if found is not None and (found.judge, found.score) == (judge, score) else None

    def stale(self, judge: str, score: str) -> StoredCalibration | None:
        """The newest calibration of ``score`` made for another judge (another identity)."""
        found = [
            c
            for path in self.folder.glob(f"*/{_file(score)}")
            if path.parent.name != judge
            and (c := _read(path)) is not None
            and (c.judge, c.score) == (path.parent.name, score)
        ]
        return max(found, key=lambda c: c.created_at, default=None)


def _file(score: str) -> str:
    return _digest(score) + ".json"


def _digest(name: str) -> str:
    # A score's name, a run's id, is any text: its digest makes a file name on every file system.
    return hashlib.sha256(name.encode()).hexdigest()[:32]


def _read(path: Path) -> StoredCalibration | None:
    try:
        return StoredCalibration.model_validate(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, ValidationError):
        return None  # none yet, or a damaged file (a manual edit, a bad merge)
