"""``--eval-rescore``: the stored outputs of an experiment or run, scored again without calling
the task. It collects as a resume does (the stored items, the same node ids), selects the trials
that completed, and gives each its stored output; the new run is planned as any run is. A rescore
run is resumed as any run is (its judges' batches collected, or after Ctrl-C), its pending trials
given their original's stored outputs again."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from pytest_opik_eval.collect.planning import labelled_only
from pytest_opik_eval.collect.resume import ResumeTarget, load_target
from pytest_opik_eval.collect.trials import TRIAL_KEY, Trial
from pytest_opik_eval.store import ExperimentRecord, Store, TrialState
from pytest_opik_eval.store.base import rescore_chain

OPTION = "--eval-rescore"

_Key = tuple[str, str, int]  # (experiment id, item id, trial)


@dataclass
class RescoreTarget:
    """The experiments rescored, and the output each completed trial of theirs stored; for those
    that are rescores themselves, the trial that ran the task of each of theirs (``ran``)."""

    original: ResumeTarget
    outputs: dict[_Key, dict[str, Any]]
    # A rescore's trial stored no span of the app (its task was not called): the calls of a
    # rescore of it are those of the trial at the start of the chain, of the same item and trial.
    ran: dict[_Key, str] = field(default_factory=dict)

    @property
    def never_completed(self) -> int:
        """The original's trials with no stored output to score: they never completed."""
        return sum(not trial.completed for trial in self.original.trials.values())

    def to_json(self) -> dict[str, Any]:
        """JSON-safe, to hand to pytest-xdist workers."""
        return {
            "original": self.original.to_json(),
            "outputs": [[*key, output] for key, output in self.outputs.items()],
            "ran": [[*key, trial_id] for key, trial_id in self.ran.items()],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RescoreTarget:
        return cls(
            original=ResumeTarget.from_json(data["original"], OPTION),
            outputs={(e, i, t): output for e, i, t, output in data["outputs"]},
            ran={(e, i, t): trial_id for e, i, t, trial_id in data["ran"]},
        )

    def select_stored(self, items: list[pytest.Item]) -> tuple[list[pytest.Item], list[pytest.Item]]:
        """Split the collected items into the trials of the original that have a stored output,
        each given it (and its original trial, whose stored spans give its calls), and everything
        else, to deselect (a trial that never completed has no output: the header and the summary
        say to resume the original first)."""

        def stored(trial: Trial, experiment: ExperimentRecord, record: TrialState) -> bool:
            key = (experiment.id, record.dataset_item_id, record.trial)
            trial.stored_output = self.outputs.get(key)
            trial.original = None if trial.stored_output is None else self.ran.get(key, record.id)
            return trial.stored_output is not None

        return self.original.select(items, stored)

    def select_pending(
        self, resume: ResumeTarget, items: list[pytest.Item]
    ) -> tuple[list[pytest.Item], list[pytest.Item]]:
        """A resumed rescore's: its pending trials, as any resume selects them, each given the
        output its original trial stored (and that trial, whose stored spans give its calls)."""
        keep, deselected = resume.select_pending(items)
        rescored = {e.id: e.rescore_of for e in resume.experiments if e.rescore_of is not None}
        for item in keep:
            trial = item.stash[TRIAL_KEY]
            assert trial.experiment_id is not None, "bound to its stored trial as it was selected"
            key = (rescored.get(trial.experiment_id, ""), trial.case.item_id, trial.case.trial)
            trial.stored_output = self.outputs.get(key)
            original = self.original.trials.get(key)
            trial.original = None if original is None else self.ran.get(key, original.id)
            if trial.stored_output is None:  # the original's trial was deleted since
                raise pytest.UsageError(
                    f"{resume.option}={resume.requested}: experiment {trial.experiment_id} rescores "
                    f"experiment {key[0]}, which no longer holds the output of item {key[1]} "
                    f"(trial {key[2]}); rescore the original again: pytest --eval-rescore={key[0]}"
                )
        return keep, deselected


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
    outputs = _outputs(store, [e.id for e in original.experiments])
    return RescoreTarget(original, outputs, _ran(store, original))


class NotResumable(ValueError):
    """A run that a resume cannot finish: the message says what to run instead."""


def resumed_rescore(store: Store, resume: ResumeTarget) -> RescoreTarget | None:
    """For a resume of a rescore run (its experiments rescore others'), the originals and their
    stored outputs, which its pending trials score; None for any other run. Raises NotResumable
    for a calibration (``opik-eval calibrate`` makes a new one), and ExperimentNotFound for an
    original since deleted."""
    originals = [e.rescore_of for e in resume.experiments if e.rescore_of is not None]
    if not originals:
        return None
    calibration = next((e for e in resume.experiments if e.selection.labelled), None)
    if calibration is not None:
        raise NotResumable(
            f"experiment {calibration.id} measured the judges of experiment {calibration.rescore_of} "
            "against its labels (opik-eval calibrate or judge-drift); run that command on "
            f"{calibration.rescore_of} again instead"
        )
    run, _ = store.find(originals[0])
    original = load_target(store, run.id, OPTION)
    return RescoreTarget(original, _outputs(store, originals), _ran(store, original))


def _outputs(store: Store, experiment_ids: list[str]) -> dict[_Key, dict[str, Any]]:
    """The outputs the experiments' completed trials stored."""
    return {
        (t.experiment_id, t.dataset_item_id, t.trial): t.output
        for experiment_id in experiment_ids
        for t in store.trials(experiment_id)
        if t.status == "completed" and t.output is not None
    }


def _ran(store: Store, original: ResumeTarget) -> dict[_Key, str]:
    """For each experiment of ``original`` that is a rescore itself, the trials that ran the task
    of its trials: those of the experiment that starts its chain of rescores, by item and trial.
    Nothing for the others: an experiment that ran its task holds its own calls."""
    ran: dict[_Key, str] = {}
    for experiment in original.experiments:
        chain = rescore_chain(store, experiment)
        # A chain whose start was deleted gives no trial: the rescore's own, which has no calls.
        if chain and chain[-1][1] is not None:
            for t in store.trial_states(chain[-1][0]):
                ran[(experiment.id, t.dataset_item_id, t.trial)] = t.id
    return ran
