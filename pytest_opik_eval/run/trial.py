"""One trial's life: pending -> task -> output stored -> scoring -> scores stored -> the
happy-path line -> (teardown) marker cleared.

A trial counts as completed only when its marker is cleared, and that happens only for a trial
that reached its happy-path line: a task that raises, a missing metric argument, a metric that
raises a BaseException, Ctrl-C, -x or a killed process all leave the trial pending.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import inspect
import sys
import time
from collections.abc import Callable, Coroutine, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

from pytest_opik_eval._compat import argument_names
from pytest_opik_eval.collect.datasets.loading import MAX_DEPTH, fresh_copy, nested_too_deep
from pytest_opik_eval.collect.trials import ANYIO_BACKEND, OWN_ARGS, Trial
from pytest_opik_eval.escaping import escape_control, property_key
from pytest_opik_eval.metrics.tool_calls import made_by_app
from pytest_opik_eval.notices import notice
from pytest_opik_eval.run import trial_trace
from pytest_opik_eval.run.rescored import SpanReader, StoredOutput, calls_source, cut_advice
from pytest_opik_eval.run.scoring import (
    RETURNED_NONE,
    Judged,
    MissingScoreArguments,
    Scorer,
    SpanSource,
    describe_failure,
    scorer_of,
)
from pytest_opik_eval.run.unanswered import fail_on_misses, wait_for_batch
from pytest_opik_eval.store.base import span_recorder, timings_recorder
from pytest_opik_eval.store.records import ScoreRecord, Usage
from pytest_opik_eval.verdict.trial_scores import TrialResult
from pytest_opik_eval.verdict.usage import trial_usage

if TYPE_CHECKING:
    from pytest_opik_eval.run.batching import Batcher
    from pytest_opik_eval.run.budget import Budget
    from pytest_opik_eval.run.judge_cache import JudgeCache
    from pytest_opik_eval.run.recording import Recorder, TrialKey, TrialScope
    from pytest_opik_eval.store import Store

UNPRICED_SPEND = (
    "eval budget: some spans reported tokens but no cost (no price for their model, or no price "
    "table), and the dollar budget counted them as free; set the cost on the span, install the cost "
    "extra (pip install 'pytest-opik-eval[cost]'), or give a budget in tokens (--eval-budget=200k tokens)"
)


_Result = TypeVar("_Result")
_Function = TypeVar("_Function", bound=Callable[..., Any])

# A task to call with the attempt's trace and recording scope (see threaded_task).
Task = Callable[["trial_trace.TrialTrace | None", "TrialScope | None"], Any]


@dataclasses.dataclass(frozen=True)
class TrialContext:
    """What every trial of this process runs with, made once: the store its steps are recorded
    in, the session its attempts belong to, the budget its spans' spend counts against (with
    --eval-budget), the judge cache its judges' scores come from when it has them
    (--eval-judge-cache), the recorder that records or replays its task's HTTP calls
    (--eval-record), and in a rescore how the spans its originals stored are read (--eval-rescore)."""

    store: Store
    session_id: str
    budget: Budget | None = None
    judge_cache: JudgeCache | None = None
    recorder: Recorder | None = None
    batcher: Batcher | None = None  # --eval-batch: the trials whose requests wait in a batch
    read_spans: SpanReader | None = None  # --eval-rescore: the original trials' stored spans


def run(item: pytest.Function, trial: Trial, context: TrialContext, task: Task | None = None) -> None:
    """Run the task and score it, recording each step: in the test's call phase, or ahead of it
    in a background thread, calling ``task`` with the attempt's trace and recording scope (see
    ``concurrency`` and ``threaded_task``)."""
    assert trial.trial_id is not None, "the run is created before any trial starts"
    case, store, recorder = trial.case, context.store, context.recorder
    # A rerun of the same test case (pytest-rerunfailures, pytest-retry) starts from scratch: it
    # is a new attempt, which replaces this session's earlier one only if it completes.
    _forget_attempt(item, trial)
    trial.attempt_id = attempt = store.start_attempt(trial.trial_id, context.session_id)

    trace = _trace(item, trial, store, attempt)
    scorer = scorer_of(case.plan)
    # None in a rescore, which calls no task: its session records nothing.
    scope = (
        None
        if recorder is None
        else recorder.trial_scope(recording_key(trial), attempt, case.plan.batch, trace, scorer.reads_calls)
    )
    metric_seconds: dict[str, float] = {}
    task_seconds: float | None = None
    completed_scoring = False
    try:
        # Once per trial: this trace current where the trial runs (the task, when it runs here,
        # and the scoring); the task's own context gets it too when that is another one.
        with _NOTHING if trace is None else trace.entered():
            started = time.perf_counter()
            try:
                returned = _task_output(item, trial, task, trace, scope)
            finally:
                # A task that raised took its time too: its latency is kept with its attempt. A
                # stored output took none: a rescore measures no latency rather than a false one.
                task_seconds = None if isinstance(task, StoredOutput) else time.perf_counter() - started
            fail_on_misses(item, case.item_id, case.trial, scope)
            wait_for_batch(item, scope)
            if returned is None:
                notice(item.config, f"{case.plan.where}: {RETURNED_NONE}")
            output = _as_output(returned)
            if nested_too_deep(output):
                # Stored as JSON, copied and hashed, each a recursion per level: say so, not RecursionError.
                pytest.fail(
                    f"item {escape_control(case.item_id)} (trial {case.trial}): the task output is nested "
                    f"more than {MAX_DEPTH} levels deep (lists and dicts inside each other), too deep to "
                    "store; flatten it",
                    pytrace=False,
                )
            store.record_output(attempt, output)
            trial.output = output

            # A rescore's calls are those its original made, read from the spans it stored.
            original = calls_source(task, context.read_spans, scorer.computes)
            spans = original or trace
            # Whether the app made spans (asked before the metrics make theirs, a judge's among
            # them; a conversation's turns and simulated user are not the app's): a trace alone
            # says nothing, as the Opik SDK's own pytest plugin imports the SDK in every session.
            app_spans = spans is not None and scorer.reads_calls and made_by_app(spans.snapshot())
            try:
                cache = context.judge_cache
                judged = None if cache is None else _judged(cache, case.item_id, case.trial, scope)
                # The metrics' requests are the judges' (strict replay sends them only if live).
                with _NOTHING if scope is None else scope.recorder.scoring(scope):
                    scores = _score(scorer, case.task_item, output, trace, metric_seconds, judged, spans)
            except MissingScoreArguments as error:
                missing = str(error)
            else:
                missing = ""
            advice = scorer.calls_advice(case.task_item, output, app_spans, isinstance(task, StoredOutput))
            advice += cut_advice(original)
            _notice_all(item, case.plan.where, advice)
            # A metric's request that strict replay refused, or deferred to a batch.
            fail_on_misses(item, case.item_id, case.trial, scope)
            wait_for_batch(item, scope)
        completed_scoring = not missing
    finally:
        # A task that failed spent its calls too: its spans are kept with its attempt.
        if trace is not None:
            _record_spans(item, store, attempt, trace, context.budget, scope, case.plan.where)
        if not completed_scoring:
            # This attempt never completes: its timings are written now, on their own.
            _record_timings(store, attempt, task_seconds, metric_seconds, completes=False)
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
        (f"eval.{property_key(s.name)}", s.value) for s in scores if not s.scoring_failed
    ]
    item.user_properties.append(("eval.passed", verdict.passed))

    # The happy-path line: the task and the whole scoring loop returned.
    trial.reached_happy_path = True
    # Written with the attempt's completion, in teardown (see clear_marker).
    _record_timings(store, attempt, task_seconds, metric_seconds, completes=True)

    if not verdict.passed:
        message = describe_failure(case.task_item, case.trial, output, verdict)
        if case.plan.gates.soft_trials():
            trial.soft_failure = message  # reported as soft-failed: the gates decide
        else:
            pytest.fail(message, pytrace=False)


def _notice_all(item: pytest.Function, where: str, messages: list[str]) -> None:
    for message in messages:
        notice(item.config, f"{where}: {message}")


def _judged(cache: JudgeCache, item_id: str, trial: int, scope: TrialScope | None) -> Judged:
    if scope is None:
        return Judged(cache, item_id, trial)
    # A call deferred, or refused (strict batching, a request out of tries): no score to keep.
    return Judged(cache, item_id, trial, lambda: len(scope.deferred) + len(scope.misses))


def recording_key(trial: Trial) -> TrialKey:
    """What the trial's recordings are found by (each attempt gets a scope of its own, which
    counts the app's requests from the first again, as a rerun by pytest-rerunfailures sends them
    again). Keyed by the experiment: the test with its own parametrize ids (``test_qa[gpt-4o]``),
    whose trials of an item are not those of another."""
    from pytest_opik_eval.run.recording import TrialKey

    case = trial.case
    test = f"{case.plan.test}[{trial.params}]" if trial.params else case.plan.test
    return TrialKey(test=test, item_id=case.item_id, trial=case.trial)


def _task_output(
    item: pytest.Function,
    trial: Trial,
    task: Task | None,
    trace: trial_trace.TrialTrace | None,
    scope: TrialScope | None,
) -> Any:
    """What the task returned; None when it raised after a request that had no recording, which
    is then why it failed (a strict replay answers with an HTTP 400, which an SDK raises), and
    what the trial fails with; or after a request deferred to a batch, answered likewise."""
    try:
        if task is None:
            return _call_task(item, task_args(item, trial, item), trace, scope)
        return task(trace, scope)
    except (Exception, pytest.fail.Exception):
        if scope is None or not (scope.misses or scope.deferred):
            raise
        return None


def _entered(
    function: _Function, trace: trial_trace.TrialTrace | None, scope: TrialScope | None
) -> _Function:
    """``function`` (the task), in the attempt's trace and its recording scope when called:
    inside the coroutine for an ``async def`` task, where the event loop's task runs it."""
    traced = trial_trace.traced(function, trace)
    return traced if scope is None else scope.wrap(traced)


def _trace(item: pytest.Function, trial: Trial, store: Store, attempt: str) -> trial_trace.TrialTrace | None:
    """The attempt's trace, when the store keeps spans and a span can reach the trial (see
    ``trial_trace.start``): a store that does not keep them (one a plugin supplies) leaves the app's
    spans to the SDK's own client (and OpenTelemetry's to its exporters)."""
    if span_recorder(store) is None:
        return None
    if "opentelemetry.sdk.trace" in sys.modules:  # the app uses OpenTelemetry's SDK: see run/otel.py
        from pytest_opik_eval.run import otel

        otel.add_to_global_provider()
    return trial_trace.start(
        # The trace's input is on the SDK's context, which the app can read: without the labels.
        attempt,
        item.originalname,
        functools.partial(_task_input, item, trial),
        trial.case.task_item,
    )


def _task_input(item: pytest.Function, trial: Trial) -> dict[str, Any]:
    """The task span's input: the task's data arguments (its item, trial index and parametrize
    values); fixture objects (clients, connections) are no data, and may hold secrets."""
    callspec = getattr(item, "callspec", None)
    shown: dict[str, Any] = {}
    for name in argument_names(item):
        if name == "eval_item":
            shown[name] = trial.case.task_item
        elif name == "eval_trial":
            shown[name] = trial.case.trial
        elif callspec is not None and name in callspec.params:
            shown[name] = callspec.params[name]
    return shown


def _score(
    scorer: Scorer,
    item: dict[str, Any],
    output: dict[str, Any],
    trace: trial_trace.TrialTrace | None,
    seconds: dict[str, float],
    judged: Judged | None,
    spans: SpanSource | None,
) -> list[ScoreRecord]:
    if trace is None:
        return scorer.score(item, output, seconds=seconds, judged=judged, spans=spans)
    with trace.scoring():  # the "metrics_calculation" span, the metrics' spans under it
        return scorer.score(item, output, trace, seconds, judged, spans)


def _record_spans(
    item: pytest.Function,
    store: Store,
    attempt: str,
    trace: trial_trace.TrialTrace,
    budget: Budget | None,
    scope: TrialScope | None,
    where: str,
) -> None:
    """The attempt's spans, in the store (none when the app, the judges and the manual API made
    none); their spend, less what the replayed calls saved, in the budget; a notice for each span
    whose usage or cost was rejected."""
    spans = trace.close(() if scope is None else scope.batched_under)
    for rejected in trace.rejected:
        notice(item.config, f"{where}: {rejected}")
    if spans:
        if budget is not None:
            budget.add(spans, scope)
            if budget.unpriced:
                notice(item.config, UNPRICED_SPEND)
        record = span_recorder(store)
        assert record is not None, "traced only for a store that records spans"
        # Summed once, here, so that the end of the session need not read the spans back.
        record(attempt, spans, trial_usage(spans) or Usage())


def _record_timings(
    store: Store,
    attempt: str,
    task_seconds: float | None,
    metric_seconds: dict[str, float],
    *,
    completes: bool,
) -> None:
    """How long the attempt's task and metrics took, in the store (when it keeps them)."""
    record = timings_recorder(store)
    if record is not None and (task_seconds is not None or metric_seconds):
        record(attempt, task_seconds, metric_seconds, completes=completes)


def clear_marker(item: pytest.Item, trial: Trial, context: TrialContext) -> None:
    """Teardown: complete the trial if, and only if, it reached its happy-path line; then, with
    --eval-record=all, what the attempt recorded replaces the trial's recordings (journaled
    first: a process killed after the store's write loses none of a completed attempt's)."""
    if not trial.reached_happy_path or trial.attempt_id in (None, trial.completed_attempt):
        return
    assert trial.attempt_id is not None
    if context.recorder is not None:
        context.recorder.completed(trial.attempt_id)
    store = context.store
    if trial.completed_attempt is None:
        store.complete_attempt(trial.attempt_id)
    else:
        # A rerun in this session (pytest-rerunfailures, pytest-retry) that completed: it stands
        # for the trial, as it does for pytest. Only this session's own earlier attempt is
        # replaced; one completed by another process first still wins.
        store.complete_attempt(trial.attempt_id, replaces=trial.completed_attempt)
    trial.completed_attempt = trial.attempt_id
    # Nobody listens (the usual case): spare every trial the result and the hook call.
    if item.config.hook.pytest_opik_eval_trial_finished.get_hookimpls():
        _announce(item, trial)
    # Recorded and announced, the output and scores are not read again (a rerun starts afresh);
    # kept on every trial until the session ends, they would lengthen each full pass of the
    # garbage collector, which the session's growing heap triggers again and again.
    trial.output = trial.scores = None


def _announce(item: pytest.Item, trial: Trial) -> None:
    assert trial.experiment_id is not None
    assert trial.output is not None
    assert trial.passed is not None
    assert trial.scores is not None
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


def _forget_attempt(item: pytest.Function, trial: Trial) -> None:
    if trial.attempt_id is None:
        return
    trial.attempt_id = trial.output = trial.scores = trial.passed = trial.soft_failure = None
    trial.reached_happy_path = False
    item.user_properties[:] = [p for p in item.user_properties if not str(p[0]).startswith("eval.")]


def task_args(item: pytest.Function, trial: Trial, shared: pytest.Function) -> dict[str, Any]:
    """The task's arguments: its own item and trial index, its parametrize values, and the
    fixture objects set up for ``shared`` (the test case itself, or, for a trial that runs ahead
    of its own setup, the test case being run)."""
    callspec = getattr(item, "callspec", None)
    args: dict[str, Any] = {}
    for name in argument_names(item):
        if name in OWN_ARGS and name in item.funcargs:
            args[name] = item.funcargs[name]  # set up by pytest: a fixture of the test needs it too
        elif name == "eval_item":
            args[name] = fresh_copy(trial.case.task_item)  # the task may change its copy
        elif name == "eval_trial":
            args[name] = trial.case.trial
        elif name == "eval_conversation":
            from pytest_opik_eval.run.conversation import Conversation  # imported at collection

            args[name] = Conversation(fresh_copy(trial.case.task_item))  # one per trial, as its item
        elif callspec is not None and name in callspec.params:
            args[name] = callspec.params[name]
        else:
            args[name] = shared.funcargs[name]
    return args


# Plugins that run coroutine tests (pytest-asyncio) replace ``item.obj``, while the test case
# runs, by a sync function that runs the coroutine on their event loop and drops its return
# value, which is the task output. ``capturing`` gives them a coroutine function that keeps it.
CAPTURE_KEY = pytest.StashKey["_Capture"]()


class _Capture:
    """The test's coroutine function, and ``capture``: the same, keeping what it returned."""

    def __init__(self, function: Callable[..., Any]) -> None:
        self.function = function
        self.outputs: list[Any] = []
        # The attempt's trace and recording scope, while ``_call_task`` runs.
        self.trace: trial_trace.TrialTrace | None = None
        self.scope: TrialScope | None = None

        @functools.wraps(function)
        async def capture(**kwargs: Any) -> Any:
            output = await _entered(function, self.trace, self.scope)(**kwargs)
            self.outputs.append(output)
            return output

        self.capture = capture


_NOTHING = contextlib.nullcontext()


def is_async_task(item: pytest.Function) -> bool:
    """Whether the test is an ``async def`` one, whose call phase needs ``capturing``."""
    return inspect.iscoroutinefunction(item.obj)


def capturing(item: pytest.Function) -> contextlib.AbstractContextManager[None]:
    """Around the test case's call phase (``item.runtest()``, where such plugins step in): an
    ``async def`` test is seen by them as a coroutine function that keeps its return value."""
    if not is_async_task(item):
        return _NOTHING  # a sync test, as nearly all are: no generator made for every trial
    return _capturing(item)


@contextlib.contextmanager
def _capturing(item: pytest.Function) -> Iterator[None]:
    function = item.obj
    captured = item.stash[CAPTURE_KEY] = _Capture(function)
    item.obj = captured.capture
    try:
        yield
    finally:
        item.obj = function
        del item.stash[CAPTURE_KEY]


def _task_function(item: pytest.Function) -> Callable[..., Any]:
    """The test function as collected (not a plugin's replacement while its test case runs)."""
    captured = item.stash.get(CAPTURE_KEY, None)
    return item.obj if captured is None else captured.function


def _call_task(
    item: pytest.Function,
    args: dict[str, Any],
    trace: trial_trace.TrialTrace | None,
    scope: TrialScope | None,
) -> Any:
    """The task, in its own test case's call phase. A coroutine runs where the plugin that
    pairs with the test would run it, so it shares the event loop of that plugin's async
    fixtures: pytest-asyncio's (auto mode, or ``@pytest.mark.asyncio``), anyio's
    (``@pytest.mark.anyio``); otherwise on an event loop of its own."""
    captured = item.stash.get(CAPTURE_KEY, None)
    if captured is None:
        return _entered(_call_sync, trace, scope)(item.obj, args)
    if item.obj is not captured.capture:
        # As pytest's own pytest_pyfunc_call, through the plugin's replacement, which runs
        # ``capture`` in a context of its own: the trace (and the recording scope) is entered
        # there, inside the coroutine.
        captured.trace, captured.scope = trace, scope
        try:
            item.obj(**args)
        finally:
            captured.trace = captured.scope = None
        if not captured.outputs:
            raise RuntimeError(
                f"{item.nodeid}: the plugin that runs this async test (its item comes from "
                f"{type(item).__module__}) did not call the test's coroutine function, so the task "
                "output is unknown; run the test without that plugin (-p no:NAME)"
            )
        return captured.outputs.pop()
    backend = _anyio_backend(item, item)
    if backend is not None:
        from anyio.pytest_plugin import get_runner

        with get_runner(*backend) as runner:
            # The runner returns what a fixture's coroutine returned; a test's, it drops.
            return runner.run_fixture(_entered(captured.function, trace, scope), args)
    return run_coroutine(_entered(captured.function, trace, scope)(**args))


def threaded_task(item: pytest.Function, trial: Trial, shared: pytest.Function) -> Task:
    """Trial ``item``'s task, to call in a background thread with the fixture objects of test
    case ``shared`` (see ``task_args``), the attempt's trace and its recording scope. A coroutine
    runs on an event loop of its own, through anyio for a test anyio's plugin would run (its
    backend may be trio)."""
    args = task_args(item, trial, shared)
    function = _task_function(item)  # read now, in the main thread: item.obj changes while it runs
    if not inspect.iscoroutinefunction(function):
        return lambda trace, scope: _entered(_call_sync, trace, scope)(function, args)
    backend = _anyio_backend(item, shared)
    if backend is None:
        return lambda trace, scope: run_coroutine(_entered(function, trace, scope)(**args))
    import anyio

    name, options = backend
    return lambda trace, scope: anyio.run(
        functools.partial(_entered(function, trace, scope), **args), backend=name, backend_options=options
    )


def _call_sync(function: Callable[..., Any], args: dict[str, Any]) -> Any:
    # As pytest's own pytest_pyfunc_call, but keeping the return value: it is the task output.
    result = function(**args)
    if inspect.iscoroutine(result):  # from a sync function that returns a coroutine
        result = run_coroutine(result)
    return result


def run_coroutine(coroutine: Coroutine[Any, Any, _Result]) -> _Result:
    """``asyncio.run``, on an event loop that never becomes the thread's current one: the current
    one is another plugin's (pytest-asyncio before 0.24 leaves a fresh one after each of its
    tests), and ``asyncio.run`` would drop it unclosed, a ResourceWarning (an error under
    ``-W error``) whenever it is collected."""
    if sys.version_info < (3, 11):  # no asyncio.Runner: the loop is set as current, then unset
        return asyncio.run(coroutine)
    # Given a loop factory, the runner does not set its loop as the current one.
    with asyncio.Runner(loop_factory=asyncio.new_event_loop) as runner:
        return runner.run(coroutine)


def _anyio_backend(item: pytest.Function, shared: pytest.Function) -> tuple[str, dict[str, Any]] | None:
    """The backend with which anyio's pytest plugin would run this test, if it would run it."""
    if ANYIO_BACKEND not in item.fixturenames or not item.config.pluginmanager.has_plugin("anyio"):
        return None
    callspec = getattr(item, "callspec", None)
    if ANYIO_BACKEND in item.funcargs:
        value = item.funcargs[ANYIO_BACKEND]
    elif callspec is not None and ANYIO_BACKEND in callspec.params:
        value = callspec.params[ANYIO_BACKEND]  # a trial run ahead of its own setup
    else:
        value = shared.funcargs[ANYIO_BACKEND]  # a shared fixture: the same object
    from anyio.pytest_plugin import extract_backend_and_options

    return extract_backend_and_options(value)


def _as_output(value: Any) -> dict[str, Any]:
    # As in Opik, a task output that is not a dict is the output itself.
    return value if isinstance(value, dict) else {"output": value}
