"""Where runs, experiments and trials are recorded: one small interface, several backends.

The local SQLite store is the default; a plugin can supply another through the
``pytest_opik_eval_store`` hook by implementing :class:`Store` (``base``). ``backends`` opens
the stores this plugin ships.
"""

from __future__ import annotations

from pytest_opik_eval.store.base import Store, StoreExtras
from pytest_opik_eval.store.records import (
    DatasetRecord,
    ExperimentRecord,
    GateSettings,
    PlannedTrial,
    RunRecord,
    RunSummary,
    ScoreRecord,
    Selection,
    TrialRecord,
    TrialState,
)

__all__ = [
    "DatasetRecord",
    "ExperimentRecord",
    "GateSettings",
    "PlannedTrial",
    "RunRecord",
    "RunSummary",
    "ScoreRecord",
    "Selection",
    "Store",
    "StoreExtras",
    "TrialRecord",
    "TrialState",
]
