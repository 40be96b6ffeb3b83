"""The cost of an LLM span that reported tokens but no cost, from genai-prices' price table
(the optional extra ``pytest-opik-eval[cost]``; Python >= 3.11).

Priced at the end of each trial, before its spans reach the store: the cost is then in the
store, the JSON report and everything read from them later (``opik-eval show``, a resumed run),
as the table stood when the call was made, and a budget can count it as trials end. The package
is imported on the first span that needs it (about 0.5 s, then 0.4 s for the first lookup), so
a run whose spans report their cost, or carry no tokens, never imports it. The model lookup is
cached per (model, provider); a price is then about 160 us.

A span the table cannot price keeps no cost and says why (``SpanRecord.unpriced``): the summary
counts those. Never an error: a price is an estimate, and a trial does not fail for it.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
from collections.abc import Collection, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from pytest_opik_eval.escaping import shorten
from pytest_opik_eval.store.records import SpanRecord

if TYPE_CHECKING:
    from pytest_opik_eval.store.http_recordings import RecordedUsage

PRICE_TABLE = "price table"
BATCH_PRICE_TABLE = "batch price table"
BATCH_RULE = "batch rule"
# OpenAI, Anthropic and Google price a batched request at half the live price (their batch
# guides): the rule for a model whose batch price the table does not have.
BATCH_SHARE = 0.5
# Why a span has no price when the table is missing: short, the summary prints it.
NOT_INSTALLED = (
    "no price table on Python 3.10"
    if sys.version_info < (3, 11)
    else "no price table (pip install 'pytest-opik-eval[cost]')"
)
NO_MODEL = "no model"
_MODEL_CHARS = 60

# Opik's provider names (opik.types.LLMProvider) as genai-prices names the same sellers. None:
# let genai-prices infer it from the model (Claude on Vertex AI is sold at Anthropic's prices).
_PROVIDERS: dict[str, str | None] = {
    "google_ai": "google",
    "google_vertexai": "google",
    "anthropic_vertexai": None,
    "bedrock": "aws",
}

# Where each provider's usage (as the SDK flattens it, under "original_usage.") or a hand-made
# usage says how many of the prompt tokens were read from, or written to, a prompt cache: the
# SDK's prompt_tokens include them, and the table prices them apart (a cache read at about a
# tenth of an input token).
_CACHE_READ = (
    "cache_read_input_tokens",  # Anthropic
    "prompt_tokens_details.cached_tokens",  # OpenAI chat completions
    "input_tokens_details.cached_tokens",  # OpenAI responses
    "cached_content_token_count",  # Google
    "cacheReadInputTokens",  # Bedrock
)
_CACHE_WRITE = ("cache_creation_input_tokens", "cacheWriteInputTokens")

_lock = threading.Lock()
# (model, provider) -> genai-prices' (Provider, ModelInfo), or why there is none.
_models: dict[tuple[str, str | None], tuple[Any, Any] | str] = {}


def priced(spans: Sequence[SpanRecord], batch: Collection[str] = ()) -> list[SpanRecord]:
    """``spans``, each that reported tokens and no cost of its own given the table's estimate
    (``cost_source="price table"``), or the reason it has none (``unpriced``); those whose ids
    are in ``batch`` (a provider's batch answered their call) at the batch price."""
    return [
        _batch_priced(span) if span.id in batch else _priced(span) if _needs_price(span) else span
        for span in spans
    ]


def _batch_priced(span: SpanRecord) -> SpanRecord:
    """The span at the batch price: the table's, when it has one below the live price, else
    half the live price (the span's own, or the table's)."""
    live = _priced(span) if _needs_price(span) else span
    if live.cost is None:
        return live
    cost, source = live.cost * BATCH_SHARE, BATCH_RULE
    found = _model(span.model, span.provider) if live.cost_source == PRICE_TABLE and span.model else None
    if found is not None and not isinstance(found, str):
        try:
            table = _table_cost(span, found, batch=True)
        except Exception:  # priced live a moment ago: the rule then
            table = live.cost
        if table < live.cost:
            cost, source = table, BATCH_PRICE_TABLE
    return live.model_copy(update={"cost": cost, "cost_source": source, "live_cost": live.cost})


def _needs_price(span: SpanRecord) -> bool:
    return span.cost is None and bool(span.prompt_tokens or span.completion_tokens)


def _priced(span: SpanRecord) -> SpanRecord:
    if span.model is None:
        return span.model_copy(update={"unpriced": NO_MODEL})
    found = _model(span.model, span.provider)
    if isinstance(found, str):
        return span.model_copy(update={"unpriced": found})
    try:
        cost = _table_cost(span, found)
    except Exception as error:  # a table entry this usage does not fit: unpriced, never an error
        return span.model_copy(update={"unpriced": shorten(f"{type(error).__name__}: {error}", 200)})
    return span.model_copy(update={"cost": cost, "cost_source": PRICE_TABLE})


def _table_cost(span: SpanRecord, found: tuple[Any, Any], *, batch: bool = False) -> float:
    """The table's price of the span's usage; ``batch``: the batch price, where it has one (the
    same as live where it has none)."""
    from genai_prices import Usage

    provider, model = found
    # Counts genai-prices refuses (checked before: see span_usage) leave the span unpriced.
    usage = Usage(
        input_tokens=span.prompt_tokens or 0,
        output_tokens=span.completion_tokens or 0,
        cache_read_tokens=_count(span, _CACHE_READ),
        cache_write_tokens=_count(span, _CACHE_WRITE),
    )
    context = {"price_context": {"processing": "batch"}} if batch else {}
    price = model.calc_price(usage, provider, genai_request_timestamp=_when(span), **context)
    return float(price.total_price)


def _count(span: SpanRecord, names: Sequence[str]) -> int | None:
    usage = span.usage or {}
    for name in names:
        for key in (name, f"original_usage.{name}"):
            if key in usage:
                return usage[key]
    return None


def _model(model: str, provider: str | None) -> tuple[Any, Any] | str:
    key = (model, provider)
    found = _models.get(key)
    if found is None:
        with _lock:  # one import and lookup when threaded trials end together
            found = _models.get(key)
            if found is None:
                found = _models[key] = _lookup(model, provider)
    return found


def preload() -> None:
    """Import genai-prices now, on this thread: the main one, before trials run in the pool's
    threads (see ``concurrency.prepare_threads``). Imported by a pool thread as its first span is priced,
    it would be half made for a while in ``sys.modules`` while other threads' trials run, and
    genai-prices imports httpx2, which the OpenAI SDK looks up there on each call ("partially
    initialized module 'httpx2' has no attribute 'Response'", failing those trials)."""
    if "genai_prices" in sys.modules or importlib.util.find_spec("genai_prices") is None:
        return
    try:
        import genai_prices.data_snapshot  # noqa: F401  (its package imports httpx2)
    except ImportError:  # as in _lookup: the spans stay unpriced, and say why
        pass


def _lookup(model: str, provider: str | None) -> tuple[Any, Any] | str:
    try:
        from genai_prices.data_snapshot import get_snapshot
    except ImportError:  # not installed, or Python 3.10 (the extra installs it on 3.11+ only)
        return NOT_INSTALLED
    snapshot = get_snapshot()
    provider_id = _PROVIDERS.get(provider, provider) if provider is not None else None
    unknown = f"unknown model {shorten(model, _MODEL_CHARS)!r}"
    for candidate in dict.fromkeys([provider_id, None]):  # a provider it does not know: inferred
        try:
            return snapshot.find_provider_model(model, None, candidate, None)
        except LookupError:
            continue
        except Exception:  # a failure inside the package: the span stays unpriced
            return unknown
    return unknown


def _when(span: SpanRecord) -> datetime:
    """The call's time, so a price change between the call and now does not apply."""
    if span.start_time is not None:
        try:
            when = datetime.fromisoformat(span.start_time)
            return when if when.tzinfo else when.replace(tzinfo=timezone.utc)
        except ValueError:
            pass
    return datetime.now(timezone.utc)


def priced_usage(usage: RecordedUsage | None, *, batch: bool = False) -> RecordedUsage | None:
    """A recorded call's usage with its cost from the price table, when it has one;
    ``batch``: a batch's answer, at the batch price (the live one in ``live_cost``)."""
    if usage is None or usage.model is None:
        return usage
    tokens = {"prompt_tokens": usage.input_tokens, "completion_tokens": usage.output_tokens}
    recorded = SpanRecord(id="recorded", trace_id="recorded", model=usage.model, usage=tokens)
    (span,) = priced([recorded], batch={"recorded"} if batch else ())
    return usage.model_copy(update={"cost": span.cost, "live_cost": span.live_cost})
