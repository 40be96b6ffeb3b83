"""Collection: each eval test expanded into its trials (marker -> selected items -> planned test
cases), the trials bound to their test cases, and a resumed session narrowed to what is pending
(a rescored one, to the trials that have a stored output).

Registered where tests are collected: a single process, or each pytest-xdist worker (the
controller does not collect).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_opik_eval._compat import fixture_definition
from pytest_opik_eval.collect.datasets import Dataset, DatasetError, content_hash, load_dataset
from pytest_opik_eval.collect.labels import label_problem
from pytest_opik_eval.collect.marker import MARKER, EvalSpec, read_spec
from pytest_opik_eval.collect.metric_specs import with_metrics
from pytest_opik_eval.collect.planning import params_of, plan_new, plan_rescored, plan_resumed, trial_cases
from pytest_opik_eval.collect.resume import changes_since
from pytest_opik_eval.collect.trials import (
    CASE_ARG,
    OWN_ARGS,
    TRIAL_KEY,
    RejectedItem,
    TestPlan,
    Trial,
    TrialCase,
)
from pytest_opik_eval.exceptions import StoreError
from pytest_opik_eval.gcpause import no_gc_pass
from pytest_opik_eval.notices import notice
from pytest_opik_eval.run.concurrency import async_fixture, function_scoped_fixture
from pytest_opik_eval.session.state import SessionState
from pytest_opik_eval.store import ExperimentRecord
from pytest_opik_eval.store.backends import backend, held_dataset


class Collection:
    """Plans the trials of the eval tests collected, and binds each to its test case."""

    def __init__(self, state: SessionState) -> None:
        self.state = state
        self.config = state.config
        self.options = state.options

    @pytest.hookimpl(trylast=True)
    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        definition = metafunc.definition
        marker = definition.get_closest_marker(MARKER)
        if marker is None:
            return
        # One item, one test case and one call spec per trial, all kept for the whole session:
        # without the pause their allocation would set off full passes over the heap.
        with no_gc_pass():
            self._expand(metafunc, marker)

    def _expand(self, metafunc: pytest.Metafunc, marker: pytest.Mark) -> None:
        definition = metafunc.definition
        path, lineno, _ = definition.location
        where = f"{definition.nodeid} ({path}:{(lineno or 0) + 1})"
        spec = read_spec(marker, where)
        if self.state.metrics is not None:
            spec = with_metrics(spec, self.state.metrics)
        resume, rescore = self.state.target.resume, self.state.target.rescore
        target = resume or (rescore.original if rescore is not None else None)
        if target is None:
            plan = plan_new(definition, spec, definition.path.parent, where, self.options, self._load_dataset)
        else:
            stored = target.experiments_of(definition.nodeid, spec.dataset)
            if not stored:
                return  # not resumed (or rescored): left unexpanded, and deselected
            if resume is not None:  # a rescore run too: its stored plan
                plan = plan_resumed(definition, spec, stored, self.options, where)
            else:
                plan = plan_rescored(definition, spec, stored, self.options, where)
            self._warn_on_changes(plan, stored[0], "resume" if resume is not None else "rescore")
        self.state.plans_seen.append(plan)
        cases = trial_cases(plan)
        if "eval_conversation" in metafunc.fixturenames:
            # Before the first trial: a session that imports it traces its trials (turns are spans).
            import pytest_opik_eval.run.conversation  # noqa: F401
        _prune_own_args(metafunc)
        metafunc.fixturenames.append(CASE_ARG)
        params: list[TrialCase | RejectedItem] = [*cases, *plan.rejected]
        if params:
            metafunc.parametrize(CASE_ARG, params, ids=[param.case_id for param in params])
        else:
            reason = f"the selection matched no items of {plan.dataset.source}"
            metafunc.parametrize(
                CASE_ARG, [pytest.param(None, marks=pytest.mark.skip(reason=reason), id="no-items")]
            )

    def _load_dataset(self, spec: EvalSpec, base_dir: Path) -> Dataset:
        source = spec.dataset
        name = held_dataset(source)
        labels = spec.labels_field or self.options.labels_field
        if name is None:
            return load_dataset(source, base_dir, labels)
        filters = spec.filter.to_opik() if spec.filter is not None else None
        try:
            items = backend(self.options.backend).dataset(self.state.store.get, name, filters)
        except StoreError as error:
            raise DatasetError(str(error)) from None
        for number, item in enumerate(items, 1):
            problem = label_problem(item[labels], labels) if labels in item else None
            if problem is not None:
                raise DatasetError(f"item {number} of dataset {name}: {problem}")
        return Dataset(source=str(source), path=None, items=items, version=content_hash(items))

    def _warn_on_changes(self, plan: TestPlan, stored: ExperimentRecord, action: str) -> None:
        changes = changes_since(stored, plan.spec)
        if changes:
            notice(
                self.config,
                f"{plan.where}: the test selects differently from experiment {stored.id} "
                f"({'; '.join(changes)}); {action} replays the {len(stored.items)} items stored "
                "with the experiment",
            )

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        with no_gc_pass():  # one Trial per item, kept for the whole session
            for item in items:
                case = _case_of(item)
                if case is not None:
                    assert isinstance(item, pytest.Function)
                    item.stash[TRIAL_KEY] = Trial(case, params_of(item, case))
                    if case.plan.threads > 1:
                        self._check_concurrency(item, case.plan)
        self._warn_on_soft_mode_without_gates()
        resume, rescore = self.state.target.resume, self.state.target.rescore
        if resume is not None or rescore is not None:
            if rescore is None:
                assert resume is not None
                keep, deselected = resume.select_pending(items)
            elif resume is not None:  # a rescore run resumed: its pending trials score stored outputs
                keep, deselected = rescore.select_pending(resume, items)
            else:
                keep, deselected = rescore.select_stored(items)
            if deselected:
                config.hook.pytest_deselected(items=deselected)
                items[:] = keep

    def _warn_on_soft_mode_without_gates(self) -> None:
        if self.options.calibrate:  # the trials' verdicts are the judge's, which its labels measure
            return
        soft_without_gates = [
            p.where
            for p in self.state.plans_seen
            if p.gates.soft and not p.gates.has_gates() and p.gates.pass_threshold is None
        ]
        if soft_without_gates:
            notice(
                self.config,
                "soft mode with no gate: scores can never fail this session "
                f"({', '.join(soft_without_gates)}); add --eval-fail-under=METRIC=MIN or "
                "--eval-min-pass-rate=RATE",
            )

    def _check_concurrency(self, item: pytest.Function, plan: TestPlan) -> None:
        fixture = function_scoped_fixture(item)
        if fixture is not None:
            plan.threads = 1
            notice(
                self.config,
                f"{plan.where} uses the function-scoped fixture {fixture!r}, so its trials run one "
                "at a time; give the fixture a wider scope (module, session) to run them concurrently",
            )
            return
        fixture = async_fixture(item)
        if fixture is not None:
            plan.threads = 1
            notice(
                self.config,
                f"{plan.where} uses the async fixture {fixture!r}, whose objects belong to the event "
                "loop it was set up on, so its trials run one at a time, on that loop; to run them "
                "concurrently (each on an event loop of its own), make the fixture a plain function "
                "or create its objects in the test",
            )

    def pytest_report_collectionfinish(self) -> str | None:
        resume = self.state.target.resume
        if resume is None:
            return None
        pending, total = resume.pending(), len(resume.trials)
        return (
            f"eval resume: {pending} pending of {total} planned trials in "
            f"{len(resume.experiments)} experiment(s) of run {resume.run.id}"
        )


def _prune_own_args(metafunc: pytest.Metafunc) -> None:
    """The trial passes its own arguments (eval_item, eval_trial, eval_conversation) to its task
    itself (trial.task_args), so
    pytest need not set them up as fixtures, unless another fixture of the test needs them
    (and then shares them with the task, as pytest does). Pruning the closure is what pytest
    itself does for the arguments that direct parametrization shadows."""
    definitions = (fixture_definition(metafunc.definition, name) for name in metafunc.fixturenames)
    needed = {arg for definition in definitions if definition is not None for arg in definition.argnames}
    metafunc.fixturenames[:] = [n for n in metafunc.fixturenames if n not in OWN_ARGS or n in needed]


def _case_of(item: pytest.Item) -> TrialCase | None:
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return None
    case = callspec.params.get(CASE_ARG)
    return case if isinstance(case, TrialCase) else None
