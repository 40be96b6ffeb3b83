"""pytest-opik-eval: LLM evaluations as pytest tests, recorded in a store and resumable.

Public names live in their modules, so that importing this package (which pytest does in every
run) costs nothing: ``pytest_opik_eval.metrics``, ``pytest_opik_eval.samplers`` and
``pytest_opik_eval.exceptions``; ``trace`` (spans and usage recorded by hand, see
``pytest_opik_eval.run.tracing.EvalTrace``) is imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_opik_eval.run.tracing import trace as trace

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name == "trace":
        from pytest_opik_eval.run.tracing import trace

        return trace
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
