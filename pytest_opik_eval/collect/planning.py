"""From a test's marker to its planned trials: the dataset read and selected (or the stored
snapshot replayed on resume), one pytest test case per item and trial, and at the start of the
run the experiment records that hold everything resume needs."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_opik_eval.collect.datasets import Dataset, DatasetError
from pytest_opik_eval.collect.marker import EvalSpec
from pytest_opik_eval.collect.selection import SelectionError, describe_selection, select_items
from pytest_opik_eval.collect.trials import RejectedItem, TestPlan, Trial, TrialCase
from pytest_opik_eval.escaping import escape_control
from pytest_opik_eval.ids import uuid7_for
from pytest_opik_eval.store.records import (
    BudgetSetting,
    DatasetRecord,
    ExperimentRecord,
    GateSettings,
    LatencyLimit,
    PlannedTrial,
    RunRecord,
)

if TYPE_CHECKING:
    from pytest_opik_eval.settings import EvalOptions, GateOptions


def plan_new(
    definition: pytest.Item,
    spec: EvalSpec,
    base_dir: Path,
    where: str,
    options: EvalOptions,
    load: Callable[[EvalSpec, Path], Dataset],
) -> TestPlan:
    """Read the dataset and apply the marker's selection; errors fail the test's collection."""
    try:
        dataset = load(spec, base_dir)
        items = select_items(dataset.items, spec, dataset.source)
    except (DatasetError, SelectionError) as error:
        # Outside the except block: the message alone, without the chain of causes.
        # The message may quote the dataset (an id, a key): its control characters escaped.
        failure: str | None = escape_control(f"@pytest.mark.eval on {where}: {error}", newlines=True)
    else:
        failure = None
    if failure is not None:
        pytest.fail(failure, pytrace=False)
    labels = spec.labels_field or options.labels_field
    selection = describe_selection(spec)
    if options.calibrate:
        items, selection = labelled_only(items, labels), selection.model_copy(update={"labelled": True})
    return TestPlan(
        test=definition.nodeid,
        name=definition.name,
        spec=spec,
        dataset=DatasetRecord(
            source=dataset.source,
            path=str(dataset.path) if dataset.path is not None else None,
            version=dataset.version,
            name=spec.dataset_name,
            file_hash=file_hash(dataset.path) if dataset.path is not None else None,
        ),
        selection=selection,
        items=items,
        gates=settings_for_new(spec, options.ini_gates, options.cli_gates),
        threads=spec.task_threads or options.threads,
        batch=spec.batch,
        judge_samples=spec.judge_samples or options.judge_samples,
        where=where,
        labels_field=labels,
        rejected=[
            RejectedItem(place, escape_control(f"@pytest.mark.eval on {where}: {message}"))
            for place, message in dataset.rejected
        ],
    )


def labelled_only(items: list[dict[str, Any]], labels_field: str) -> list[dict[str, Any]]:
    """The items with human labels (``--eval-calibrate``)."""
    return [item for item in items if item.get(labels_field)]


def plan_resumed(
    definition: pytest.Item,
    spec: EvalSpec,
    experiments: list[ExperimentRecord],
    options: EvalOptions,
    where: str = "",
) -> TestPlan:
    """Replay what the stored experiments selected, with the thresholds and gates they stored;
    the current marker supplies the metrics and the mapping (code is not stored)."""
    stored = experiments[0]
    return TestPlan(
        test=definition.nodeid,
        name=definition.name,
        spec=spec,
        dataset=stored.dataset,
        selection=stored.selection,
        items=stored.items,
        gates=settings_for_resume(stored.gates, options.cli_gates),
        threads=spec.task_threads or options.threads,
        batch=spec.batch,
        judge_samples=stored.judge_samples,  # as the experiment sampled its first trials
        resumed={e.params: e for e in experiments},
        metric_specs=tuple(stored.metric_specs),
        where=where or definition.nodeid,
        labels_field=stored.labels_field,
    )


def plan_rescored(
    definition: pytest.Item,
    spec: EvalSpec,
    experiments: list[ExperimentRecord],
    options: EvalOptions,
    where: str,
) -> TestPlan:
    """Score the stored experiments' outputs again: their items as stored, and everything else
    as a new experiment of the test would have it (the marker's metrics and thresholds, and the
    gates of the marker, the command line and the ini file, but those on the app's latency and
    cost), so that the rescore gives what a rerun scored the same way would."""
    stored = experiments[0]
    gates = settings_for_new(spec, options.ini_gates, options.cli_gates)
    items, selection = stored.items, stored.selection
    if options.calibrate:  # opik-eval calibrate: today's judges on the labelled items' outputs
        items = labelled_only(items, stored.labels_field)
        selection = selection.model_copy(update={"labelled": True})
    return TestPlan(
        test=definition.nodeid,
        name=definition.name,
        spec=spec,
        dataset=stored.dataset,
        selection=selection,
        items=items,
        # The app does not run: its latency and its cost per item are not measured, and their
        # gates (the original run's to meet) would fail as such. The run's spend, the judges', counts.
        gates=gates.model_copy(update={"max_latency": None, "max_cost_per_item": None}),
        threads=spec.task_threads or options.threads,
        batch=spec.batch,
        judge_samples=spec.judge_samples or options.judge_samples,
        rescore_of={e.params: e.id for e in experiments},
        metric_specs=options.metric_specs,
        where=where,
        labels_field=stored.labels_field,
    )


def file_hash(path: Path) -> str:
    """The SHA-256 of a file's bytes: resume checks cheaply whether a dataset file was edited."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def trial_cases(plan: TestPlan) -> list[TrialCase]:
    return [
        TrialCase(plan, item, trial) for item in plan.items for trial in range(plan.selection.trial_count)
    ]


def params_of(item: pytest.Function, case: TrialCase) -> str:
    """The pytest id of the test's other parametrize arguments ("" when it has none)."""
    full = item.callspec.id
    if full == case.case_id:
        return ""
    # Our parametrization runs last (trylast), so its id is the last part of the joined id.
    suffix = f"-{case.case_id}"
    return full[: -len(suffix)] if full.endswith(suffix) else full.replace(case.case_id, "", 1).strip("-")


@dataclass(frozen=True)
class RunPlan:
    """What is written before the first trial runs: everything resume needs."""

    run: RunRecord
    experiments: list[ExperimentRecord]
    trials: list[PlannedTrial]


def plan_run(
    config: pytest.Config,
    run_id: str,
    trials: list[tuple[pytest.Item, Trial]],
    name: str | None = None,
    budget: BudgetSetting | None = None,
) -> RunPlan:
    """The run, one experiment per test and combination of its other parameters, and the
    trials the session selected (after -k, -m and every other deselection), in order. Binds
    each trial to its experiment and planned trial. The ids derive from the run's id, so every
    process that plans the same run (pytest-xdist workers) plans the same records. The run keeps
    its budget, which a resume gets afresh."""
    now = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
    run = RunRecord(
        id=run_id,
        created_at=now,
        rootdir=str(config.rootpath),
        args=list(config.invocation_params.args),
        name=name,
        budget=budget,
    )
    experiments: dict[tuple[str, str], ExperimentRecord] = {}
    planned: list[PlannedTrial] = []
    for item, trial in trials:
        plan = trial.case.plan
        experiment = experiments.get((plan.test, trial.params))
        if experiment is None:
            experiment = experiments[plan.test, trial.params] = ExperimentRecord(
                id=uuid7_for(run_id, f"{plan.test}[{trial.params}]"),
                run_id=run.id,
                name=plan.experiment_name(trial.params),
                test=plan.test,
                params=trial.params,
                created_at=now,
                dataset=plan.dataset,
                selection=plan.selection,
                items=[],
                gates=plan.gates,
                rescore_of=plan.rescore_of.get(trial.params),
                metric_specs=list(plan.metric_specs),
                labels_field=plan.labels_field,
                judge_samples=plan.judge_samples,
                # The plan's items as they are, loaded and checked: validated here, each would be
                # copied, and the session would keep a second dict per item to its end.
            ).model_copy(update={"items": plan.items})
        trial.experiment_id = experiment.id
        trial.trial_id = uuid7_for(experiment.id, trial.case.case_id)
        planned.append(
            PlannedTrial(trial.trial_id, experiment.id, trial.case.item_id, trial.case.trial, item.nodeid)
        )
    return RunPlan(run, list(experiments.values()), planned)


def settings_for_new(spec: EvalSpec, ini: GateOptions, cli: GateOptions) -> GateSettings:
    """The settings a new experiment is created with: the marker's, then the command line's,
    then the ini file's, per metric (the most specific wins)."""
    return GateSettings(
        fail_under={**ini.fail_under, **cli.fail_under, **spec.fail_under},
        min_pass_rate=_first(spec.min_pass_rate, cli.min_pass_rate, ini.min_pass_rate),
        pass_threshold=spec.pass_threshold,
        max_regression={**ini.max_regression, **cli.max_regression},
        soft=bool(_first(cli.soft, ini.soft)),
        thresholds=spec.thresholds_in_force(),
        mode=cli.mode or ini.mode or "normal",
        confidence=_first(cli.confidence, ini.confidence) or 0.95,
        **_cost_and_latency({**ini.max_cost, **cli.max_cost, **spec.max_cost}, None),
        max_latency=_latency(spec.max_latency or cli.max_latency or ini.max_latency),
        judge_floor={**ini.judge_floor, **cli.judge_floor},
    )


def settings_for_resume(stored: GateSettings, cli: GateOptions) -> GateSettings:
    """A resume gates as the original run did, unless its command line says otherwise, per
    metric: its command line is most often the original's (a CI's ``addopts``), so a gate it
    gives is added to the stored ones (the marker's among them), replacing only the same gate."""
    return _with_given(stored, cli, replace=False)


def settings_for_gate(stored: GateSettings, cli: GateOptions) -> GateSettings:
    """``opik-eval gate``: the stored gates, but each gate option given replaces the stored gates
    of its kind, all of them (``--eval-fail-under=a=0.8`` leaves no stored ``fail_under`` on
    another metric; ``--eval-max-cost=1/run`` no stored cost gate per item)."""
    return _with_given(stored, cli, replace=True)


def _with_given(stored: GateSettings, cli: GateOptions, *, replace: bool) -> GateSettings:
    def per_metric(given: dict[str, float], kept: dict[str, float]) -> dict[str, float]:
        return (given or kept) if replace else {**kept, **given}

    return stored.model_copy(
        update={
            "fail_under": per_metric(cli.fail_under, stored.fail_under),
            "min_pass_rate": _first(cli.min_pass_rate, stored.min_pass_rate),
            "max_regression": per_metric(cli.max_regression, stored.max_regression),
            "soft": stored.soft if cli.soft is None else cli.soft,
            "mode": cli.mode or stored.mode,
            "confidence": stored.confidence if cli.confidence is None else cli.confidence,
            **_cost_and_latency(cli.max_cost, None if replace and cli.max_cost else stored),
            "max_latency": _latency(cli.max_latency) or stored.max_latency,
            "judge_floor": per_metric(cli.judge_floor, stored.judge_floor),
        }
    )


def _cost_and_latency(max_cost: dict[str, float], stored: GateSettings | None) -> dict[str, float | None]:
    """The cost gates by scope: those given, else those stored (a resume's)."""
    return {
        "max_cost_per_item": max_cost.get("item", stored.max_cost_per_item if stored else None),
        "max_cost_per_run": max_cost.get("run", stored.max_cost_per_run if stored else None),
    }


def _latency(given: tuple[float, float] | None) -> LatencyLimit | None:
    return None if given is None else LatencyLimit(seconds=given[0], percentile=given[1])


def _first(*values: float | bool | None) -> float | bool | None:
    return next((v for v in values if v is not None), None)
