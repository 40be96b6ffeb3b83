"""Two runs paired item by item: each item both have, its mean in the current run minus its mean
in the baseline (a *difference*; a drop, for a score where higher is better, is a negative one),
summarized as a sample on [-1, 1] for the regression gates' tests (``decisions``); and the exact
test on the items whose pass/fail verdict flipped. One pass over the items (100,000 are common).
Pure functions, standard library only."""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pytest_opik_eval.verdict.distributions import sign_test
from pytest_opik_eval.verdict.samples import Sample, mean, pass_fail, sample


@dataclass(frozen=True)
class PairedComparison:
    """Two runs compared item by item over the items both have.

    ``differences`` maps each shared item to its mean in the current run minus its mean in the
    baseline (each item weighs the same, whatever its number of trials); ``sample`` summarizes
    them (``None`` without shared items), ``baseline_mean`` and ``current_mean`` are the means
    of the item means over those items (so their difference is the sample's mean)."""

    shared: tuple[str, ...]
    only_in_current: tuple[str, ...]
    only_in_baseline: tuple[str, ...]
    differences: dict[str, float]
    sample: Sample | None
    baseline_mean: float | None
    current_mean: float | None


def paired_comparison(
    current: Mapping[str, Sequence[float]], baseline: Mapping[str, Sequence[float]]
) -> PairedComparison:
    """Pair two runs by item id (each maps an item id to its trial values); one pass over the
    items (100,000 are common)."""
    in_order = _one_trial_each(current, baseline)
    if in_order is not None:  # the common case needs no sums: in C loops
        first = operator.itemgetter(0)
        now = list(map(first, current.values()))
        lined_up = baseline.values() if in_order else map(baseline.__getitem__, current)
        before = list(map(first, lined_up))
        differences = dict(zip(current, map(operator.sub, now, before), strict=True))
    else:
        differences, now, before = _paired(current, baseline)
    shared = tuple(differences)
    every = len(shared) == len(current), len(shared) == len(baseline)
    return PairedComparison(
        shared=shared,
        only_in_current=() if every[0] else tuple(i for i in current if i not in baseline),
        only_in_baseline=() if every[1] else tuple(i for i in baseline if i not in current),
        differences=differences,
        sample=sample(
            differences.values(), -1.0, 1.0, pass_fail=pass_fail(current.values(), baseline.values())
        )
        if shared
        else None,
        baseline_mean=mean(before) if shared else None,
        current_mean=mean(now) if shared else None,
    )


def _one_trial_each(
    current: Mapping[str, Sequence[float]], baseline: Mapping[str, Sequence[float]]
) -> bool | None:
    """Whether both runs have the same items, each with one value: None if not, else whether
    in the same order (runs of one selection list them alike, and then their values line up
    without a lookup by item id)."""
    lengths = {*map(len, current.values()), *map(len, baseline.values())}
    if lengths != {1}:
        return None
    if list(current) == list(baseline):
        return True
    return False if current.keys() == baseline.keys() else None


def _paired(
    current: Mapping[str, Sequence[float]], baseline: Mapping[str, Sequence[float]]
) -> tuple[dict[str, float], list[float], list[float]]:
    """Each shared item's difference, and its current and baseline means, in one pass."""
    differences: dict[str, float] = {}
    now: list[float] = []
    before: list[float] = []
    for item, values in current.items():
        previous = baseline.get(item)
        if previous is None:
            continue
        if len(values) == 1 == len(previous):
            now.append(values[0])
            before.append(previous[0])
            differences[item] = values[0] - previous[0]
        else:
            now.append(math.fsum(values) / len(values))
            before.append(math.fsum(previous) / len(previous))
            # One division: equal differences of pass/fail means (0.6 - 0.4, 0.8 - 0.6) come out
            # as one float, which the sample groups.
            differences[item] = _difference(values, previous)
    return differences, now, before


def _difference(current: Sequence[float], baseline: Sequence[float]) -> float:
    if not current or not baseline:
        raise ValueError("an item has no trial values: leave it out, or give it its values")
    numerator = math.fsum(current) * len(baseline) - math.fsum(baseline) * len(current)
    return numerator / (len(current) * len(baseline))


def regressions_by_chance(regressions: int, fixes: int) -> float:
    """The exact one-sided test on items' pass/fail flips: the chance, if a flip were as likely
    either way, of at least ``regressions`` of the ``regressions + fixes`` flips being
    regressions (1.0 without flips)."""
    if regressions < 0 or fixes < 0:
        raise ValueError(f"flip counts must not be negative, got {regressions} and {fixes}")
    return sign_test(regressions, fixes)
