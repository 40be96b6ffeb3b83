"""What the app did, recorded by hand or through OpenTelemetry: the public names.

- ``trace``: spans and LLM usage recorded by hand, for an app with neither the Opik SDK nor
  OpenTelemetry (``with trace.span("retrieve", type="tool") as span: ...``,
  ``trace.usage(model=..., input_tokens=..., output_tokens=...)``); the ``eval_trace`` fixture
  is the same object. Outside a trial, a no-op.
- ``Span``: what ``trace.span`` gives, to set its output, model, usage or cost on.
- ``SpanProcessor``: the OpenTelemetry span processor (the ``otel`` extra) for a tracer provider
  the app keeps to itself; imported when first asked for, so importing this module never
  imports OpenTelemetry.

An app built on ``@opik.track`` needs none of these: its spans are recorded as they are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pytest_opik_eval.run.manual_spans import EvalTrace, trace
from pytest_opik_eval.run.span import Span

if TYPE_CHECKING:
    from pytest_opik_eval.run.otel import SpanProcessor

__all__ = ["EvalTrace", "Span", "SpanProcessor", "trace"]


def __getattr__(name: str) -> Any:
    if name == "SpanProcessor":
        try:
            from pytest_opik_eval.run.otel import SpanProcessor
        except ImportError as error:  # the extra is not installed: say which, not only what is missing
            raise ImportError(
                f"pytest_opik_eval.tracing.SpanProcessor needs OpenTelemetry's SDK ({error}): "
                "pip install 'pytest-opik-eval[otel]'",
                name=error.name,
            ) from error
        return SpanProcessor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
