"""pass@k and pass^k of items with several trials: each item's unbiased estimate, and their
mean over items with its interval (the statistics module's, as for any mean over items)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable

from pytest_opik_eval.verdict.samples import sample
from pytest_opik_eval.verdict.statistics import LEVEL, Interval, interval


def pass_at_k(n: int, c: int, k: int) -> float:
    """pass@k for one item: the probability that at least one of k trials drawn without
    replacement from its n trials, c of which passed, passes: 1 - C(n - c, k) / C(n, k), the
    unbiased estimator of Chen et al. (2021)."""
    _check_trials(n, c, k)
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """pass^k for one item: the probability that all of k trials drawn without replacement from
    its n trials, c of which passed, pass: C(c, k) / C(n, k), unbiased for p^k."""
    _check_trials(n, c, k)
    return math.comb(c, k) / math.comb(n, k)


def _check_trials(n: int, c: int, k: int) -> None:
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= passed ({c}) <= trials ({n}) and 1 <= k ({k}) <= trials")


def pass_at_k_interval(items: Iterable[tuple[int, int]], k: int, level: float = LEVEL) -> Interval:
    """pass@k averaged over items, each given as (trials, passed), with its interval."""
    return _over_items(pass_at_k, items, k, level)


def pass_hat_k_interval(items: Iterable[tuple[int, int]], k: int, level: float = LEVEL) -> Interval:
    """pass^k averaged over items, each given as (trials, passed), with its interval."""
    return _over_items(pass_hat_k, items, k, level)


def _over_items(
    estimator: Callable[[int, int, int], float], items: Iterable[tuple[int, int]], k: int, level: float
) -> Interval:
    # Items share a few (trials, passed) pairs: each pair's estimate is computed once.
    pairs = Counter(items)
    if not pairs:
        raise ValueError("pass@k and pass^k need at least one item")
    estimates = {pair: estimator(*pair, k) for pair in pairs}
    return interval(sample((estimates[pair] for pair in pairs.elements()), pass_fail=True), level)
