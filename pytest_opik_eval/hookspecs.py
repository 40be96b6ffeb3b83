"""Hooks other plugins and a project's ``conftest.py`` implement to extend pytest-opik-eval.

They are added in ``pytest_addhooks``; implement them like any pytest hook, by name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pytest_opik_eval.store import Store
    from pytest_opik_eval.verdict.model import ExperimentReport
    from pytest_opik_eval.verdict.trial_scores import TrialResult


@pytest.hookspec(firstresult=True)
def pytest_opik_eval_store(config: pytest.Config) -> Store | None:
    """Return the store this session records runs, experiments and trials in.

    The first implementation that returns an object wins; return ``None`` to leave the choice to
    the next one. The default is the local SQLite store at ``--eval-store``. A custom backend
    implements :class:`pytest_opik_eval.store.Store`; called once per session that runs or
    resumes eval tests, before anything is read or written.
    """


def pytest_opik_eval_trial_finished(item: pytest.Item, result: TrialResult) -> None:
    """Called when a trial has reached its happy-path line and its pending marker was cleared.

    ``result`` holds the dataset item (as stored, with its human labels: the trial is scored,
    so they can no longer reach the task or the metrics), the trial index, the task output, the
    scores and the verdict. Not called for a trial whose task or scoring raised: that trial stays pending.
    Called in the test's teardown, before its fixtures are torn down.

    A rerun in the same session (pytest-rerunfailures, pytest-retry) that completes calls it
    again for the same trial (the same ``result.node_id`` and ``result.trial``): that result
    replaces the earlier one, as the rerun's outcome replaces the earlier one for pytest and
    in the store. Keep the last result per ``(node_id, trial)``.
    """


def pytest_opik_eval_experiment_finished(config: pytest.Config, experiment: ExperimentReport) -> None:
    """Called at the end of every session that ran or resumed eval tests, once per experiment.

    ``experiment`` describes the whole experiment as the store has it after this session: every
    planned trial (whichever session ran it), its scores, and the summary, exactly as written
    to the JSON report.
    """
