"""How far an LLM judge agrees with itself: with ``judge_samples``, a judge scores each output
several times, the trial's score is their mean (a pass/fail judge's majority) and the samples are
kept with it (``ScoreRecord.samples``). Pure functions, standard library only.

For each score with samples, over the completed trials whose score was sampled (a failed scoring
has none): the share of trials whose samples all give the same verdict (each sample against the
score's threshold, or passing at 1 without one, as ``calibration`` reads a verdict), and the mean
over trials of the samples' standard deviation, the judge's noise on a graded scale.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping

from pytest_opik_eval.store.records import ScoreRecord
from pytest_opik_eval.verdict.model import JudgeSelfAgreement


def self_agreements(
    scores: Iterable[Iterable[ScoreRecord]], thresholds: Mapping[str, float | None]
) -> list[JudgeSelfAgreement]:
    """``scores``: each completed trial's scores. One entry per score with samples, in the order
    the trials first give them."""
    sampled: dict[str, list[list[float]]] = {}
    for trial in scores:
        for score in trial:
            if score.samples is not None and len(score.samples) > 1 and not score.scoring_failed:
                sampled.setdefault(score.name, []).append(score.samples)
    found = []
    for name, trials in sampled.items():
        threshold = thresholds.get(name)
        cut = 1.0 if threshold is None else threshold
        split = sum(1 for values in trials if len({v >= cut for v in values}) > 1)
        found.append(
            JudgeSelfAgreement(
                score=name,
                samples=max(len(values) for values in trials),
                trials=len(trials),
                threshold=threshold,
                unanimous=(len(trials) - split) / len(trials),
                split=split,
                sd=statistics.fmean(statistics.stdev(values) for values in trials),
            )
        )
    return found
