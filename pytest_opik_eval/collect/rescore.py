"""``--eval-rescore``: the stored outputs of an experiment or run, scored again without calling
the task. It collects as a resume does (the stored items, the same node ids), selects the trials
that completed, and gives each its stored output; the new run is planned as any run is."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import pytest

from pytest_opik_eval.collect.planning import labelled_only
from pytest_opik_eval.collect.resume import ResumeTarget, load_target
from pytest_opik_eval.collect.trials import Trial
from pytest_opik_eval.store import ExperimentRecord, Store, TrialState

OPTION = "--eval-rescore"

_Key = tuple[str, str, int]  # (experiment id, item id, trial)


@dataclass
class RescoreTarget:
    """The experiments rescored, and the output each completed trial of theirs stored."""

    original: ResumeTarget
    outputs: dict[_Key, dict[str, Any]]

    @property
    def never_completed(self) -> int:
        """The original's trials with no stored output to score: they never completed."""
        return sum(not trial.completed for trial in self.original.trials.values())

    def to_json(self) -> dict[str, Any]:
        """JSON-safe, to hand to pytest-xdist workers."""
        return {
            "original": self.original.to_json(),
            "outputs": [[*key, output] for key, output in self.outputs.items()],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RescoreTarget:
        return cls(
            original=ResumeTarget.from_json(data["original"], OPTION),
            outputs={(e, i, t): output for e, i, t, output in data["outputs"]},
        )

    def select_stored(self, items: list[pytest.Item]) -> tuple[list[pytest.Item], list[pytest.Item]]:
        """Split the collected items into the trials of the original that have a stored output,
        each given it, and everything else, to deselect (a trial that never completed has no
        output: the header and the summary say to resume the original first)."""

        def stored(trial: Trial, experiment: ExperimentRecord, record: TrialState) -> bool:
            trial.stored_output = self.outputs.get((experiment.id, record.dataset_item_id, record.trial))
            return trial.stored_output is not None

        return self.original.select(items, stored)


def load_rescore_target(store: Store, requested: str, *, labelled: bool = False) -> RescoreTarget:
    """The experiments and the outputs of their completed trials, read fresh from the store
    (``labelled``, for --eval-calibrate: only the experiments with items with human labels, the
    others' tests having none to collect); raises ExperimentNotFound."""
    original = load_target(store, requested, OPTION)
    if labelled:
        kept = [e for e in original.experiments if labelled_only(e.items, e.labels_field)]
        ids = {e.id for e in kept}
        trials = {key: trial for key, trial in original.trials.items() if key[0] in ids}
        original = replace(original, experiments=kept, trials=trials)
    outputs = {
        (t.experiment_id, t.dataset_item_id, t.trial): t.output
        for experiment in original.experiments
        for t in store.trials(experiment.id)
        if t.status == "completed" and t.output is not None
    }
    return RescoreTarget(original, outputs)
