"""The options' value checks: each turns the text of an option, an ini value or an environment
variable into its value, or raises ``argparse.ArgumentTypeError`` naming the form it expects,
with an example (``options`` adds the options with them; ``settings`` reads the ini values and
the environment through them; the ``opik-eval`` command and the marker's arguments share them).
Standard library only: pytest imports this in every run."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Iterable
from typing import Literal

METRICS_MODULE = "pytest_opik_eval.metrics"  # a bare metric name is one of these
METRIC_FORMS = (
    "package.module:NAME, where NAME is a metric instance, or a class or factory called without "
    f"arguments; or the name of a metric of {METRICS_MODULE}, such as Equals"
)
_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


def metric_spec(value: str) -> str:
    """``--eval-metric``: the form only; the metric is imported when the session starts."""
    text = value.strip()
    module, sep, name = text.rpartition(":")
    if not _DOTTED.fullmatch(name) or (sep and not _DOTTED.fullmatch(module)) or (not sep and "." in name):
        raise argparse.ArgumentTypeError(f"expected {METRIC_FORMS}; got {value!r}")
    return text


def seconds(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        number = float("nan")
    if not 0 <= number < float("inf"):
        raise argparse.ArgumentTypeError(
            f"expected a number of seconds, 0 or more, such as 30; got {value!r}"
        )
    return number


def metric_bound(value: str) -> tuple[str, float]:
    metric, sep, number = value.partition("=")
    try:
        bound = float(number)
    except ValueError:
        bound = float("nan")
    if not sep or not metric.strip() or bound != bound:
        raise argparse.ArgumentTypeError(f"expected METRIC=NUMBER, such as equals_metric=0.9; got {value!r}")
    metric = metric.strip()
    problem = score_bound_problem(bound, written=f"{metric}=")
    if problem:
        raise argparse.ArgumentTypeError(f"the bound {problem}; got {value!r}")
    return metric, bound


JUDGE_FIGURES = ("kappa", "sensitivity", "specificity")


def judge_floor(value: str) -> tuple[str, float]:
    """FIGURE=MIN: the least a judge's calibration figure may be for strict mode to gate on it."""
    figure, sep, number = value.partition("=")
    figure = figure.strip()
    try:
        bound = float(number)
    except ValueError:
        bound = float("nan")
    lowest = -1.0 if figure == "kappa" else 0.0
    if not sep or figure not in JUDGE_FIGURES or not lowest <= bound <= 1.0:
        raise argparse.ArgumentTypeError(
            f"expected FIGURE=MIN, FIGURE one of {', '.join(JUDGE_FIGURES)} and MIN from 0 to 1 (kappa: "
            f"-1 to 1), such as kappa=0.6; got {value!r}"
        )
    return figure, bound


def confidence(value: str) -> float:
    try:
        level = float(value)
    except ValueError:
        level = float("nan")
    if not 0.5 <= level < 1.0:
        hint = f" (for {level:g}% write {level / 100:g})" if 50 <= level < 100 else ""
        raise argparse.ArgumentTypeError(
            f"expected a confidence level from 0.5 to below 1, such as 0.95{hint}; got {value!r}"
        )
    return level


def score_bound_problem(bound: float, *, written: str = "") -> str | None:
    """Why ``bound`` cannot bound a score (a gate's minimum, a regression's drop), or None.

    Scores run from 0 to 1: a bound of 80 can never be met (or, as a drop, never exceeded). One
    from 1 to 100 is most likely a percentage, and the hint shows the share, after ``written``
    (how the option or argument is written up to the number, such as ``equals_metric=``)."""
    if 0.0 <= bound <= 1.0:
        return None
    hint = f" (for {bound:g}% write {written}{bound / 100:g})" if 1 < bound <= 100 else ""
    return f"must be a score from 0 to 1{hint}"


COST_SCOPES = ("item", "run")
_COST_FORM = (
    "expected a cost in USD as AMOUNT[/item|/run], such as 0.01 (each item's mean cost), "
    "0.01/item, or 5/run (the experiment's whole spend)"
)
_LATENCY_FORM = "expected SECONDS[@pNN], such as 2.5 (p95), 800ms, or 2.5@p99"


def cost_limit(value: str) -> tuple[str, float]:
    """``0.01``, ``0.01/item``, ``$5/run``, ``5usd/run`` -> (scope, USD)."""
    amount, _, scope = value.strip().partition("/")
    scope = scope.strip().lower() or "item"
    amount = amount.strip().removeprefix("$")
    if amount.lower().endswith("usd"):
        amount = amount[:-3].strip()
    try:
        usd = float(amount)
    except ValueError:
        usd = float("nan")
    if scope not in COST_SCOPES or not 0 <= usd < float("inf"):
        raise argparse.ArgumentTypeError(f"{_COST_FORM}; got {value!r}")
    return scope, usd


def latency_limit(value: str) -> tuple[float, float]:
    """``2.5``, ``2.5s``, ``800ms``, ``2.5@p99`` -> (seconds, percentile)."""
    amount, sep, rank = value.strip().lower().partition("@")
    amount = amount.strip()
    scale = 1.0
    if amount.endswith("ms"):
        amount, scale = amount[:-2], 0.001
    elif amount.endswith("s"):
        amount = amount[:-1]
    try:
        limit = float(amount) * scale
        percentile = float(rank.strip().removeprefix("p")) if sep and rank.strip().startswith("p") else 95.0
    except ValueError:
        limit = percentile = float("nan")
    if sep and not rank.strip().startswith("p"):
        percentile = float("nan")
    if not 0 <= limit < float("inf") or not 0 < percentile <= 100:
        raise argparse.ArgumentTypeError(f"{_LATENCY_FORM}; got {value!r}")
    return limit, percentile


def shard(value: str) -> tuple[int, int]:
    k, sep, n = value.partition("/")
    try:
        shard = (int(k), int(n))
    except ValueError:
        shard = (0, 0)
    if not sep or not 1 <= shard[0] <= shard[1]:
        raise argparse.ArgumentTypeError(f"expected K/N with 1 <= K <= N, such as 2/3; got {value!r}")
    return shard


_NUMBER = r"(\d+(?:\.\d*)?|\.\d+)"
_DOLLARS = re.compile(rf"\$?\s*{_NUMBER}\s*(?:usd)?", re.IGNORECASE)
_TOKENS = re.compile(rf"{_NUMBER}\s*([km]?)\s*tokens?", re.IGNORECASE)
_MULTIPLIERS = {"": 1, "k": 1_000, "m": 1_000_000}
BUDGET_FORMS = (
    "an amount in US dollars, such as 5, 2.50 or $5, or of tokens, such as 200000tokens or 200k tokens"
)


def budget(value: str) -> tuple[float, Literal["usd", "tokens"]]:
    """``--eval-budget``: the amount, and whether it is in US dollars or in tokens."""
    text = value.strip()
    dollars = _DOLLARS.fullmatch(text)
    tokens = None if dollars else _TOKENS.fullmatch(text)
    unit: Literal["usd", "tokens"]
    if dollars:
        amount, unit = float(dollars.group(1)), "usd"
    elif tokens:
        amount, unit = float(tokens.group(1)) * _MULTIPLIERS[tokens.group(2).lower()], "tokens"
    else:
        raise argparse.ArgumentTypeError(f"expected {BUDGET_FORMS}; got {value!r}")
    if not 0 < amount < float("inf"):
        raise argparse.ArgumentTypeError(
            f"the budget must be more than 0, such as 5 or 200k tokens; got {value!r}"
        )
    return amount, unit


def one_of(values: Iterable[str]) -> Callable[[str], str]:
    """A parser of a value that must be one of ``values``, in any case."""
    allowed = tuple(values)

    def parse(text: str) -> str:
        value = text.strip().lower()
        if value not in allowed:
            raise argparse.ArgumentTypeError(f"expected one of {', '.join(allowed)}; got {text!r}")
        return value

    return parse


# The record modes, named as vcrpy's (and pytest-recording's), which many pytest users know.
RECORD_MODES = {
    "off": "nothing recorded or replayed",
    "once": "a trial with recordings replays them, one without records",
    "new_episodes": "replay what is recorded, record the rest",
    "none": "replay only, no network: a request without a recording fails its trial",
    "all": "record every call again",
}
record_mode = one_of(RECORD_MODES)

# A host whose requests --eval-record leaves alone: its name or address, and its port (None: any).
Host = tuple[str, "int | None"]
_HOST = re.compile(
    r"(?:\[(?P<bracketed>[0-9a-f:.]+(?:%\w+)?)\]|(?P<name>[^\s:/\[\]@?#]+))(?::(?P<port>\d{1,5}))?"
)
_IPV6 = re.compile(r"[0-9a-f]*:[0-9a-f:.]*(?:%\w+)?")


def allowed_host(value: str) -> Host:
    """``--eval-record-allow-host``: HOST or HOST:PORT; an IPv6 address bare, or in brackets
    with a port (``[::1]:8080``)."""
    text = value.strip().lower()
    if text.count(":") > 1 and _IPV6.fullmatch(text):
        return text, None
    found = _HOST.fullmatch(text)
    port = int(found.group("port")) if found and found.group("port") else None
    if found is None or (port is not None and not 0 < port < 65536):
        raise argparse.ArgumentTypeError(
            f"expected HOST or HOST:PORT, such as localhost or 127.0.0.1:8080 ([::1]:8080 for IPv6), "
            f"not a URL; got {value!r}"
        )
    return found.group("bracketed") or found.group("name"), port


# --eval-batch: what happens to the LLM requests the recordings cannot answer.
BATCH_MODES = {
    "off": "sent live",
    "on": "deferred to provider batches at half price; a request no batch takes is sent live, with a notice",
    "strict": "deferred to provider batches; a request no batch takes fails its trial",
}
_batch_modes = one_of(BATCH_MODES)


def batch_mode(text: str) -> str:
    """--eval-batch's mode. Its value is optional, so a bare flag before a test path takes the
    path for its mode: the error says how to write it."""
    try:
        return _batch_modes(text)
    except argparse.ArgumentTypeError as error:
        if "/" in text or "::" in text or text.endswith(".py") or text == ".":
            raise argparse.ArgumentTypeError(
                f"{error} (a test path after the bare flag is read as its mode: write --eval-batch=on)"
            ) from None
        raise


BATCH_PROVIDERS = ("openai", "anthropic", "gemini")
BATCH_AFTER_CAP = ("pending", "live")  # a trial at --eval-batch-max-rounds: stays pending, or goes live
BATCH_MAX_ROUNDS = 8


def batch_rounds(value: str) -> int:
    """``--eval-batch-max-rounds``: the batched rounds a trial may take."""
    if not value.strip().isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(
            f"expected how many batched rounds a trial may take, a whole number of at least 1 such as 8; "
            f"got {value!r}"
        )
    return int(value)


def batch_provider(value: str) -> tuple[Host, str]:
    """``--eval-batch-provider``: HOST[:PORT]=PROVIDER, the batch API a host speaks when its name
    does not tell (a gateway, a proxy, a local server)."""
    host, equals, provider = value.rpartition("=")
    if not equals or provider.strip().lower() not in BATCH_PROVIDERS:
        raise argparse.ArgumentTypeError(
            f"expected HOST[:PORT]=PROVIDER with PROVIDER one of {', '.join(BATCH_PROVIDERS)}, such as "
            f"127.0.0.1:8080=openai; got {value!r}"
        )
    return allowed_host(host), provider.strip().lower()


def host_text(host: str | None, port: int | None) -> str:
    """``host:port`` as --eval-record-allow-host takes it (an IPv6 address in brackets)."""
    name = f"[{host}]" if host and ":" in host else str(host)
    return name if port is None else f"{name}:{port}"


def threads_count(value: str) -> int:
    try:
        threads = int(value)
    except ValueError:
        threads = 0
    if threads < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, such as 16; got {value!r}")
    return threads


def judge_samples_count(value: str) -> int:
    try:
        samples = int(value)
    except ValueError:
        samples = 0
    if samples < 1:
        raise argparse.ArgumentTypeError(
            f"expected how many times each LLM judge scores an output, a whole number of at least 1 "
            f"such as 3; got {value!r}"
        )
    return samples


def rate(value: str) -> float:
    try:
        rate = float(value)
    except ValueError:
        rate = -1.0
    if not 0.0 <= rate <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a share from 0 to 1, such as 0.9; got {value!r}")
    return rate


def run_id(value: str) -> str:
    value = value.strip()
    if not value:
        raise argparse.ArgumentTypeError("needs a run id or name (list them with: opik-eval runs)")
    return value


def resume_id(value: str) -> str:
    value = value.strip()
    if not value:
        raise argparse.ArgumentTypeError(
            "needs an experiment id, a run id, or 'last' (list them with: opik-eval runs)"
        )
    return value
