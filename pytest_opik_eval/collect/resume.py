"""``--eval-resume``: which experiments to resume, which of their trials are still pending, and
whether the test's marker still selects what the experiment stored."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pytest_opik_eval.collect.marker import EvalSpec
from pytest_opik_eval.collect.planning import file_hash
from pytest_opik_eval.collect.selection import describe_selection
from pytest_opik_eval.collect.trials import TRIAL_KEY, Trial
from pytest_opik_eval.options import resume_command
from pytest_opik_eval.store import ExperimentRecord, RunRecord, Store, TrialState


@dataclass
class ResumeTarget:
    """The experiments a session resumes, with their trials as the store has them now; while
    tests are collected, ``experiments_of`` binds experiments without a test to candidates."""

    requested: str  # the id as given: an experiment id, a run id or "last"
    run: RunRecord
    experiments: list[ExperimentRecord]
    trials: dict[tuple[str, str, int], TrialState]  # (experiment id, item id, trial) -> trial
    # Experiments that opik.evaluate() started have no test yet: the eval tests whose marker
    # names their dataset, by experiment id.
    candidates: dict[str, list[str]] = field(default_factory=dict)
    option: str = "--eval-resume"  # the option that named it, for messages (or --eval-rescore)

    @property
    def resolved(self) -> str:
        """The experiment or run id resumed ("last" resolved to the run's id)."""
        return self.run.id if self.requested == "last" else self.requested

    def to_json(self) -> dict[str, Any]:
        """JSON-safe, to hand to pytest-xdist workers."""
        return {
            "requested": self.requested,
            "run": self.run.model_dump(mode="json"),
            "experiments": [e.model_dump(mode="json") for e in self.experiments],
            "trials": [asdict(t) for t in self.trials.values()],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], option: str = "--eval-resume") -> ResumeTarget:
        trials = [TrialState(**t) for t in data["trials"]]
        return cls(
            requested=data["requested"],
            run=RunRecord.model_validate(data["run"]),
            experiments=[ExperimentRecord.model_validate(e) for e in data["experiments"]],
            trials={(t.experiment_id, t.dataset_item_id, t.trial): t for t in trials},
            option=option,
        )

    def experiments_of(self, test: str, dataset: object) -> list[ExperimentRecord]:
        """The experiments of this test, and those without a test on the dataset it names."""
        found = [e for e in self.experiments if e.test == test]
        for experiment in self.experiments:
            if not experiment.test and experiment.dataset.source == dataset:
                self.candidates.setdefault(experiment.id, []).append(test)
                found.append(experiment.model_copy(update={"test": test}))
        return found

    def _bind(self) -> None:
        for position, experiment in enumerate(self.experiments):
            tests = self.candidates.get(experiment.id, [])
            if experiment.test or not tests:
                continue
            if len(tests) > 1:
                command = resume_command(self.requested, paths=tests[:1], option=self.option)
                raise pytest.UsageError(
                    f"{self.option}={self.requested}: experiment {experiment.id} on dataset "
                    f"{experiment.dataset.source} matches several eval tests: {', '.join(tests)}; name the "
                    f"one to run on the command line: {command}"
                )
            self.experiments[position] = experiment.model_copy(update={"test": tests[0]})

    def pending(self) -> int:
        return sum(1 for t in self.trials.values() if not t.completed)

    def select_pending(self, items: list[pytest.Item]) -> tuple[list[pytest.Item], list[pytest.Item]]:
        """Split the collected items into the pending trials of the resumed experiments, which
        run, and everything else, deselected as --lf deselects what passed. Each kept trial is
        bound to its stored trial. Raises a usage error when an experiment's test is missing."""

        def pending(trial: Trial, experiment: ExperimentRecord, record: TrialState) -> bool:
            if record.completed:
                return False
            trial.experiment_id, trial.trial_id = experiment.id, record.id
            return True

        return self.select(items, pending)

    def select(
        self, items: list[pytest.Item], wanted: Callable[[Trial, ExperimentRecord, TrialState], bool]
    ) -> tuple[list[pytest.Item], list[pytest.Item]]:
        """Split the collected items into the trials of the target's experiments that ``wanted``
        keeps, and everything else, to deselect. Raises a usage error when an experiment's test
        is missing."""
        self._bind()
        by_test = {(e.test, e.params): e for e in self.experiments}
        found: set[str] = set()
        keep: list[pytest.Item] = []
        deselected: list[pytest.Item] = []
        for item in items:
            trial = item.stash.get(TRIAL_KEY, None)
            experiment = None if trial is None else by_test.get((trial.case.plan.test, trial.params))
            if trial is None or experiment is None:
                deselected.append(item)
                continue
            found.add(experiment.id)
            record = self.trials.get((experiment.id, trial.case.item_id, trial.case.trial))
            if record is None or not wanted(trial, experiment, record):
                deselected.append(item)
                continue
            keep.append(item)
        missing = [e for e in self.experiments if e.id not in found]
        unbound = [e for e in missing if not e.test]
        if unbound:
            raise pytest.UsageError(
                f"{self.option}={self.requested}: experiment {unbound[0].id} was started outside pytest on "
                f"dataset {unbound[0].dataset.source}, and no collected eval test's marker names that "
                f'dataset: mark the test with @pytest.mark.eval(dataset="{unbound[0].dataset.source}", ...)'
            )
        if missing:
            names = ", ".join(e.test + (f"[{e.params}]" if e.params else "") for e in missing)
            raise pytest.UsageError(
                f"{self.option}={self.requested}: the test of experiment {missing[0].id} was not "
                f"collected: looked for {names}. Run pytest from the same folder with the same test "
                "paths as the original run (and restore the test if it was renamed or moved)."
            )
        return keep, deselected


def load_target(store: Store, requested: str, option: str = "--eval-resume") -> ResumeTarget:
    """Read the experiments fresh from the store; raises ExperimentNotFound."""
    run, experiments = store.find(requested)
    trials = {
        (t.experiment_id, t.dataset_item_id, t.trial): t
        for experiment in experiments
        for t in store.trial_states(experiment.id)
    }
    return ResumeTarget(requested, run, experiments, trials, option=option)


def changes_since(experiment: ExperimentRecord, spec: EvalSpec) -> list[str]:
    """What differs between the stored experiment and the test's marker and dataset today."""
    changes = []
    stored, current = experiment.selection, describe_selection(spec)
    for name in type(stored).model_fields:
        before, now = getattr(stored, name), getattr(current, name)
        if before != now:
            changes.append(f"{name} was {before!r}, is now {now!r}")
    stored_file = experiment.dataset.path
    if stored_file is not None:
        path = Path(stored_file)
        try:
            edited = experiment.dataset.file_hash != file_hash(path)
        except OSError:
            changes.append(f"the dataset {experiment.dataset.source} can no longer be read")
        else:
            if edited:
                changes.append(f"the dataset {experiment.dataset.source} was edited")
    return changes
