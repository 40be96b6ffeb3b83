"""A finished span as the trial stores it: from the Opik SDK's span parameters
(``SpanData.as_parameters``), which every span reaching a trial comes in (the SDK's, an
OpenTelemetry span's, the manual API's, the trial's own), to a ``SpanRecord``, its values bounded
and its usage and cost checked (see ``span_usage``)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from pytest_opik_eval._compat_opik import FROM_SDK, parse_usage
from pytest_opik_eval.escaping import shorten
from pytest_opik_eval.run import span_usage
from pytest_opik_eval.run.bounded import bounded
from pytest_opik_eval.store.records import SpanRecord

_TRACEBACK_CHARS = 4_000

_logger = logging.getLogger(__name__)


def record(params: Mapping[str, Any], rejected: list[str]) -> SpanRecord:
    """A span as the SDK handed it to its client (``SpanData.as_parameters``), as a record; the
    notice of a usage or cost it reported that is none (see ``span_usage``), in ``rejected``."""
    provider = params.get("provider")
    provider = None if provider is None else str(getattr(provider, "value", provider))
    usage, bad_usage = _usage(params.get("usage"), provider, sdk=bool(params.get(FROM_SDK)))
    given_cost = params.get("total_cost")
    cost = None if given_cost is None else span_usage.cost(given_cost)
    bad_cost = None if given_cost is None or cost is not None else span_usage.field("total_cost", given_cost)
    if bad_usage or bad_cost:
        rejected.append(span_usage.rejection(_text(params.get("name")), bad_usage, bad_cost))
    rejected += params.get(span_usage.REJECTED) or ()
    error = params.get("error_info")
    return SpanRecord(
        id=str(params["id"]),
        trace_id=str(params["trace_id"]),
        parent_span_id=_text(params.get("parent_span_id")),
        name=_text(params.get("name")),
        type=str(params.get("type") or "general"),
        start_time=span_time(params.get("start_time")),
        end_time=span_time(params.get("end_time")),
        input=bounded(params.get("input")),
        output=bounded(params.get("output")),
        metadata=bounded(params.get("metadata")),
        tags=[str(tag) for tag in params.get("tags") or []] or None,
        model=_text(params.get("model")),
        provider=provider,
        usage=usage,
        total_cost=cost,
        cost=cost,
        cost_source=None if cost is None else "span",
        error={str(k): shorten(str(v), _TRACEBACK_CHARS) for k, v in error.items()}
        if isinstance(error, Mapping)
        else None,
    )


def _usage(usage: Any, provider: str | None, *, sdk: bool) -> tuple[dict[str, int] | None, str | None]:
    """A span's usage in Opik's flat names: from the SDK (``sdk``), the provider's own usage
    or an OpikUsage, made flat as the SDK sends it; from ``add_span`` (a span processor, the
    manual API), in Opik's names already. Or None, and the first field that is no count (see
    ``span_usage``)."""
    if usage is None:
        return None, None
    if not sdk:
        if isinstance(usage, Mapping):
            return span_usage.checked_usage(usage)
        return None, span_usage.field("usage", usage)
    # Checked before the SDK reads it: the SDK drops a count it cannot read, without a word.
    problem = span_usage.raw_usage_problem(usage)
    if problem is not None:
        return None, problem
    try:
        parsed = parse_usage(usage, _logger, provider)
    except Exception:  # an app's odd usage object must not fail its trial
        return None, span_usage.field("usage", usage)
    # A provider's usage object (not a mapping) is checked once the SDK made it flat.
    return span_usage.checked_usage(parsed or {})


def span_time(value: Any) -> str | None:
    """A span's time as ISO 8601 text in UTC: from a datetime (the SDK's, a span processor's),
    or seconds since the epoch (our own spans')."""
    if type(value) is float:
        return datetime.fromtimestamp(value, timezone.utc).isoformat()
    if isinstance(value, datetime):
        return (
            (value if value.tzinfo else value.replace(tzinfo=timezone.utc))
            .astimezone(timezone.utc)
            .isoformat()
        )
    return None if value is None else str(value)


def error_info(error: BaseException) -> dict[str, str]:
    """An exception that left a span, as the span's ``error_info``."""
    return {"exception_type": type(error).__name__, "message": shorten(str(error), _TRACEBACK_CHARS)}


def _text(value: Any) -> str | None:
    return None if value is None else str(value)
