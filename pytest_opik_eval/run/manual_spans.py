"""Spans and usage recorded by hand: the ``trace`` object of the public module
``pytest_opik_eval.tracing`` and the ``eval_trace`` fixture, for an app that uses neither the
Opik SDK nor OpenTelemetry."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pytest_opik_eval.run import span_usage
from pytest_opik_eval.run.span import Span
from pytest_opik_eval.run.trial_trace import current, current_frame

SpanType = Literal["general", "llm", "tool", "guardrail"]


class EvalTrace:
    """Spans and usage recorded by hand, for an app that uses neither the Opik SDK nor
    OpenTelemetry: the ``eval_trace`` fixture, and the same object as
    ``from pytest_opik_eval.tracing import trace`` for the app's own code.

    Spans attach to the trial whose task or scoring runs in the calling context (threads started
    with a copy of it, ``asyncio`` tasks and ``asyncio.to_thread`` carry it), under the innermost
    span open there: the task span, a metric's span, or a span opened here (they nest).

    Outside a trial (a test not marked ``eval``, a run without ``--eval``, a bare thread the task
    started, the app used on its own) every call is a harmless no-op: ``span`` still runs its
    block, and nothing is recorded.
    """

    def span(
        self,
        name: str,
        *,
        type: SpanType = "general",
        input: Any = None,
        metadata: Mapping[str, Any] | None = None,
        tags: Sequence[str] | None = None,
    ) -> contextlib.AbstractContextManager[Span]:
        """A span around the ``with`` block, under the innermost span open here; set its
        ``output`` (and ``model``, ``usage``...) on the :class:`Span` it gives. An exception that
        leaves the block is recorded on the span, and propagates."""
        trace = current()
        if trace is None:
            return contextlib.nullcontext(Span(None, name, None, input=input, type=type))
        span = Span(
            trace,
            name,
            trace.parent_span_id(),
            input=input,
            type=type,
            tags=None if tags is None else list(tags),
            manual=True,
        )
        span.metadata = None if metadata is None else dict(metadata)
        return trace.opened(span, kept=True)

    def usage(
        self,
        *,
        model: str,
        input_tokens: int,
        output_tokens: int,
        cost: float | None = None,
        provider: str | None = None,
    ) -> None:
        """An LLM call's usage: on the innermost span opened with ``span`` here (added to what it
        has), or else on the span made of the call's HTTP answer (``--eval-llm-spans``), which
        keeps the provider's counts and takes ``cost``, or else as a new "llm" span named after
        the model. ``cost`` in USD; None: priced from the price table (the ``cost`` extra) when
        the trial ends."""
        frame = current_frame()
        if frame is None:
            return
        trace, span = frame
        if span is None or not span.manual or (trace.uses_sdk and trace.parent_span_id() != span.id):
            claimed = trace.claim_http_span(trace.parent_span_id())
            if claimed is not None:
                # The call is already a span, made of its HTTP answer (--eval-llm-spans), with the
                # provider's own counts: the app's report adds only a cost it knows.
                if cost is not None and span_usage.cost(cost) is not None:
                    claimed["total_cost"] = float(cost)
                return
            # No span of ours is the innermost here (an @opik.track span may be): one of its own.
            call = Span(trace, model, trace.parent_span_id(), type="llm", manual=True)
            call.ended = call.started
            _add_usage(call, model, provider, input_tokens, output_tokens, cost)
            trace.add_span(call.params())
            return
        _add_usage(span, model, provider, input_tokens, output_tokens, cost)


def _add_usage(
    span: Span, model: str, provider: str | None, input_tokens: int, output_tokens: int, cost: float | None
) -> None:
    """``trace.usage`` on ``span``: a count or a cost that is none (see span_usage) is not added,
    and the span notes it, named as the app gave it."""
    span.model = model
    span.provider = provider if provider is not None else span.provider
    given = {"input_tokens": input_tokens, "output_tokens": output_tokens}
    bad = next((span_usage.field(k, v) for k, v in given.items() if span_usage.count(v) is None), None)
    bad_cost = None if cost is None or span_usage.cost(cost) is not None else span_usage.field("cost", cost)
    if bad or bad_cost:
        span.rejected = [*(span.rejected or []), span_usage.rejection(span.name, bad, bad_cost)]
    usage = dict(span.usage or {})
    added = {"prompt_tokens": input_tokens, "completion_tokens": output_tokens}
    # A bad count the app set on the span itself is left as it is, for the trial's end to reject.
    if bad is None and all(span_usage.count(usage.get(key, 0)) is not None for key in added):
        for key, tokens in added.items():
            usage[key] = int(usage.get(key, 0)) + int(tokens)
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        span.usage = usage
    if cost is not None and bad_cost is None and span_usage.cost(span.total_cost or 0.0) is not None:
        span.total_cost = (span.total_cost or 0.0) + float(cost)


trace = EvalTrace()
