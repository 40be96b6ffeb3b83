"""The pytest entry point (``-p no:opik_eval`` disables it): options, the marker, the fixtures
and the hook wiring. It holds no logic, and imports nothing heavy: pytest loads it in every run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from pytest_opik_eval.collect.marker import MARKER_HELP
from pytest_opik_eval.options import add_options

if TYPE_CHECKING:
    from pytest_opik_eval.collect.trials import Trial
    from pytest_opik_eval.run.conversation import Conversation
    from pytest_opik_eval.run.manual_spans import EvalTrace


LEFT_OUT_PLUGIN = "opik_eval_left_out"


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from pytest_opik_eval import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER_HELP)
    if _evaluates(config):
        from pytest_opik_eval.gcpause import no_gc_pass

        # The session's imports (pydantic, and the models it builds) allocate enough to trigger
        # full passes of the garbage collector over the whole heap, two or three of them, for
        # nothing: what an import makes lives as long as the process.
        with no_gc_pass():
            from pytest_opik_eval.session import register
            from pytest_opik_eval.settings import EvalOptions

            register(config, EvalOptions.read(config))
    else:
        from pytest_opik_eval.disabled import EvalLeftOut

        config.pluginmanager.register(EvalLeftOut(), LEFT_OUT_PLUGIN)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _evaluates(config):
        from pytest_opik_eval.session import unregister

        unregister(config)
    else:
        left_out = config.pluginmanager.get_plugin(LEFT_OUT_PLUGIN)
        if left_out is not None:
            config.pluginmanager.unregister(left_out, LEFT_OUT_PLUGIN)


def _evaluates(config: pytest.Config) -> bool:
    """Whether this session runs evaluations (--eval, --eval-resume, --eval-rescore or
    --eval-calibrate)."""
    return (
        bool(config.getoption("eval"))
        or bool(config.getoption("eval_calibrate"))
        or config.getoption("eval_resume") is not None
        or config.getoption("eval_rescore") is not None
    )


@pytest.fixture
def eval_item(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The dataset item of this trial, including its ``"id"`` (without its human labels); a
    fresh copy for each trial."""
    from pytest_opik_eval.collect.datasets.loading import fresh_copy

    return fresh_copy(_trial(request).case.task_item)


@pytest.fixture
def eval_trial(request: pytest.FixtureRequest) -> int:
    """The index of this trial of its item, from 0 to ``trial_count - 1``."""
    return _trial(request).case.trial


@pytest.fixture
def eval_conversation(request: pytest.FixtureRequest) -> Conversation:
    """This trial's conversation with a simulated user made from its item (``persona``, ``goal``,
    ``first_message``, ``max_turns``, or a scripted ``user_responses``):
    ``return eval_conversation.run(app)`` drives it to its end and returns the transcript, the
    trial's output (see docs/how-to/conversations.md)."""
    from pytest_opik_eval.collect.datasets.loading import fresh_copy
    from pytest_opik_eval.run.conversation import Conversation

    return Conversation(fresh_copy(_trial(request).case.task_item))


@pytest.fixture
def eval_trace() -> EvalTrace:
    """Record spans and LLM usage by hand, for an app with neither the Opik SDK nor
    OpenTelemetry: ``with eval_trace.span("retrieve", type="tool", input=...) as span:
    span.output = ...`` and ``eval_trace.usage(model=..., input_tokens=..., output_tokens=...)``.
    The same object as ``from pytest_opik_eval.tracing import trace``; outside a trial, a no-op."""
    # The public module: a session that imports it is traced (see trial_trace.start).
    from pytest_opik_eval.tracing import trace

    return trace


def _trial(request: pytest.FixtureRequest) -> Trial:
    from pytest_opik_eval.collect.trials import TRIAL_KEY

    trial: Trial | None = request.node.stash.get(TRIAL_KEY, None)
    if trial is None:
        pytest.fail(
            f"{request.node.nodeid} uses the {request.fixturename} fixture, which only tests "
            "marked @pytest.mark.eval have (and only when run with --eval)",
            pytrace=False,
        )
    return trial
