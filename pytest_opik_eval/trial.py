"""One trial's life: pending -> task -> output stored -> scoring -> scores stored -> the
happy-path line -> (teardown) marker cleared.

A trial counts as completed only when its marker is cleared, and that happens only for a trial
that reached its happy-path line: a task that raises, a missing metric argument, a metric that
raises a BaseException, Ctrl-C, -x or a killed process all leave the trial pending.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar, cast

import pytest

from pytest_opik_eval.datasets.loading import MAX_DEPTH, nested_too_deep
from pytest_opik_eval.escaping import escape_control
from pytest_opik_eval.notices import notice
from pytest_opik_eval.scoring import RETURNED_NONE, MissingScoreArguments, describe_failure
from pytest_opik_eval.store.records import ScoreRecord

if TYPE_CHECKING:
    from pytest_opik_eval.planning import TrialCase
    from pytest_opik_eval.store import Store


@dataclass(eq=False)
class Trial:
    """The runtime state of one trial test case (kept in the item's stash)."""

    case: TrialCase
    params: str  # the test's other parametrize ids: with the test, names the experiment
    experiment_id: str | None = None  # known once the run is created or resumed
    trial_id: str | None = None
    attempt_id: str | None = None
    output: dict[str, Any] | None = None
    scores: list[ScoreRecord] = field(default_factory=list)
    passed: bool | None = None
    reached_happy_path: bool = False
    soft_failure: str | None = None  # the message of a soft trial that missed its thresholds


_Value = TypeVar("_Value")

# Each trial test case carries its Trial in its stash.
TRIAL_KEY = pytest.StashKey[Trial]()

# The task's arguments that are its trial's own: the trial passes them to the task itself, and
# they are kept out of pytest's fixture setup (see session.pytest_generate_tests), which costs
# more per test case than a trivial task does. The fixtures of the same names serve the rest.
OWN_ARGS = frozenset({"eval_item", "eval_trial"})


@dataclass(frozen=True)
class TrialResult:
    """A completed trial, as handed to ``pytest_opik_eval_trial_finished``."""

    experiment_id: str
    node_id: str
    item: dict[str, Any]
    trial: int
    output: dict[str, Any]
    scores: list[ScoreRecord]
    passed: bool


def run(
    item: pytest.Function, trial: Trial, store: Store, session_id: str, args: dict[str, Any] | None = None
) -> None:
    """Run the task and score it, recording each step: in the test's call phase, or ahead of it
    in a background thread with the given arguments (see ``concurrency`` and ``task_args``)."""
    assert trial.trial_id is not None, "the run is created before any trial starts"
    case = trial.case
    trial.attempt_id = attempt = store.start_attempt(trial.trial_id, session_id)

    returned = _call_task(item, task_args(item, trial, item) if args is None else args)
    if returned is None:
        notice(item.config, f"{case.plan.where}: {RETURNED_NONE}")
    output = _as_output(returned)
    if nested_too_deep(output):
        # Stored as JSON, copied and hashed, each a recursion per level: say so, not RecursionError.
        pytest.fail(
            f"item {escape_control(case.item_id)} (trial {case.trial}): the task output is nested more "
            f"than {MAX_DEPTH} levels deep (lists and dicts inside each other), too deep to store; "
            "flatten it",
            pytrace=False,
        )
    store.record_output(attempt, output)
    trial.output = output

    scorer = case.plan.scorer
    try:
        scores = scorer.score(case.item, output)
    except MissingScoreArguments as error:
        missing = str(error)
    else:
        missing = ""
    if missing:
        # Outside the except block: inside it, pytest would print the message twice ("During
        # handling of the above exception, another exception occurred").
        pytest.fail(missing, pytrace=False)
    verdict = scorer.judge(scores)
    store.record_scores(attempt, scores, verdict.passed)
    trial.scores, trial.passed = scores, verdict.passed
    # JUnit XML shows these as the test case's properties.
    # Score names are data (a metric may name its scores): escaped before they reach the XML.
    item.user_properties += [
        (f"eval.{escape_control(s.name)}", s.value) for s in scores if not s.scoring_failed
    ]
    item.user_properties.append(("eval.passed", verdict.passed))

    # The happy-path line: the task and the whole scoring loop returned.
    trial.reached_happy_path = True

    if not verdict.passed:
        message = describe_failure(case.item, case.trial, output, verdict)
        if case.plan.gates.soft or case.plan.gates.pass_threshold is not None:
            trial.soft_failure = message  # reported as soft-failed: the gates decide
        else:
            pytest.fail(message, pytrace=False)


def clear_marker(item: pytest.Item, trial: Trial, store: Store) -> None:
    """Teardown: complete the trial if, and only if, it reached its happy-path line."""
    if not trial.reached_happy_path or trial.attempt_id is None:
        return
    store.complete_attempt(trial.attempt_id)
    if not item.config.hook.pytest_opik_eval_trial_finished.get_hookimpls():
        return  # nobody listens: spare every trial the result and the hook call
    assert trial.experiment_id is not None and trial.output is not None and trial.passed is not None
    item.ihook.pytest_opik_eval_trial_finished(
        item=item,
        result=TrialResult(
            experiment_id=trial.experiment_id,
            node_id=item.nodeid,
            item=trial.case.item,
            trial=trial.case.trial,
            output=trial.output,
            scores=trial.scores,
            passed=trial.passed,
        ),
    )


def task_args(item: pytest.Function, trial: Trial, shared: pytest.Function) -> dict[str, Any]:
    """The task's arguments: its own item and trial index, its parametrize values, and the
    fixture objects set up for ``shared`` (the test case itself, or, for a trial that runs ahead
    of its own setup, the test case being run)."""
    callspec = getattr(item, "callspec", None)
    args: dict[str, Any] = {}
    for name in item._fixtureinfo.argnames:
        if name in OWN_ARGS and name in item.funcargs:
            args[name] = item.funcargs[name]  # set up by pytest: a fixture of the test needs it too
        elif name == "eval_item":
            args[name] = fresh_copy(trial.case.item)  # the task may change its copy
        elif name == "eval_trial":
            args[name] = trial.case.trial
        elif callspec is not None and name in callspec.params:
            args[name] = callspec.params[name]
        else:
            args[name] = shared.funcargs[name]
    return args


def fresh_copy(value: _Value) -> _Value:
    """A deep copy: JSON data (what datasets hold) copied directly, as copy.deepcopy costs
    several times more; anything else through copy.deepcopy."""
    return cast(_Value, _copy(value))


def _copy(value: Any) -> Any:
    kind = type(value)
    if kind is dict:
        return {key: _copy(inner) for key, inner in value.items()}
    if kind is list:
        return [_copy(inner) for inner in value]
    if kind in (str, int, float, bool) or value is None:
        return value
    return copy.deepcopy(value)


def _call_task(item: pytest.Function, args: dict[str, Any]) -> Any:
    # As pytest's own pytest_pyfunc_call, but keeping the return value: it is the task output.
    result = item.obj(**args)
    if inspect.iscoroutine(result):
        result = asyncio.run(result)
    return result


def _as_output(value: Any) -> dict[str, Any]:
    # As in Opik, a task output that is not a dict is the output itself.
    return value if isinstance(value, dict) else {"output": value}
