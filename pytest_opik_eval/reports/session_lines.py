"""The session's lines, as every report words them, below the experiments': what it spent of
``--eval-budget``, what ``--eval-judge-cache`` reused, what ``--eval-record`` replayed and
recorded; and ``sentence``, for a report that prints such a line as a paragraph."""

from __future__ import annotations

from collections.abc import Callable

from pytest_opik_eval.formatting import budget_amount, dollars
from pytest_opik_eval.verdict.model import BatchReport, BudgetReport, JudgeCacheReport, RecordingReport


def budget_lines(budget: BudgetReport, code: Callable[[str], str] = str) -> list[str]:
    """``--eval-budget``, as every report says it: what this session spent of it and whether it
    stopped the run (``eval budget reached: spent $7.50 of $7.50 (70 trials not started)``);
    then, when it kept trials from starting, the command that runs them (``resume them with a
    fresh budget: ...``, the command marked up by ``code``)."""
    amounts = (budget.spent, budget.limit)
    spent = (
        f"spent {budget_amount(budget.spent, budget.unit, against=amounts)} "
        f"of {budget_amount(budget.limit, budget.unit, against=amounts)}"
    )
    if budget.given != budget.limit:
        spent += f" (this shard's share of {budget_amount(budget.given, budget.unit)})"
    if not budget.reached:
        return [f"eval budget: {spent}"]
    if not budget.not_started:
        return [f"eval budget reached: {spent} (every trial had started)"]
    trials = f"{budget.not_started} trial{'s' if budget.not_started > 1 else ''}"
    lines = [f"eval budget reached: {spent} ({trials} not started)"]
    if budget.resume_command:
        lines.append(f"resume them with a fresh budget: {code(budget.resume_command)}")
    return lines


def judge_cache_lines(cache: JudgeCacheReport | None) -> list[str]:
    """``--eval-judge-cache``: the judges' scores this session reused, those it paid for, and, in
    strict replay, those it missed (their trials failed): ``eval judge cache: 8 hits, 0 scored,
    1 missed (strict)``; nothing when it is off or no judge scored."""
    if cache is None or not (cache.hits or cache.scored or cache.missed):
        return []
    hits, scored, missed = cache.hits, cache.scored, cache.missed
    line = f"eval judge cache: {hits} hit{'' if hits == 1 else 's'}, {scored} scored"
    return [f"{line}, {missed} missed (strict)" if cache.strict or missed else line]


def recording_line(recordings: RecordingReport) -> str:
    """``--eval-record``'s counts in one line (the Markdown summary shows the same):
    ``eval recordings (--eval-record=none): 12 replayed, 0 recorded, 1 missed (1 trial failed);
    saved 4,210 tokens ($0.0123)``."""
    r = recordings
    line = (
        f"eval recordings (--eval-record={r.mode}): "
        f"{r.replayed} replayed, {r.recorded} recorded, {r.missed} missed"
    )
    why = []
    if r.missed_trials:
        why.append(f"{r.missed_trials} trial{'s' if r.missed_trials > 1 else ''} failed")
    if r.refused:
        why.append(f"{r.refused} request{'s' if r.refused > 1 else ''} outside any trial not sent")
    if why:
        line += f" ({'; '.join(why)})"
    tokens = r.saved_input_tokens + r.saved_output_tokens
    if tokens:
        line += f"; saved {tokens:,} tokens" + ("" if r.saved_cost is None else f" ({dollars(r.saved_cost)})")
    elif r.saved_cost:
        line += f"; saved {dollars(r.saved_cost)}"
    return line


def batch_lines(batches: BatchReport, code: Callable[[str], str] = str) -> list[tuple[str, bool]]:
    """``--eval-batch``: what was collected, what waits and was submitted, and what to run next,
    each line with whether it tells of a failure (``eval batches: 200 trials wait; submitted 200
    requests in 1 batch: openai gpt-4.1-mini /v1/chat/completions batch_6f1c (200)``)."""
    b = batches
    lines: list[tuple[str, bool]] = []
    if b.collected_batches or b.still_running or b.failed_requests:
        lines.append((collected_line(b), False))
    submitted = [s for s in b.submissions if s.batch_id is not None]
    if b.waiting_trials or submitted:
        line = f"eval batches: {_count(b.waiting_trials, 'trial')} wait"
        if submitted:
            parts = ", ".join(
                f"{s.provider} {s.model or ''} {s.endpoint} {s.batch_id} ({s.requests})" for s in submitted
            )
            requests = sum(s.requests for s in submitted)
            line += f"; submitted {_count(requests, 'request')} in {_count(len(submitted), 'batch')}: {parts}"
        lines.append((line, False))
    for failed in b.submissions:
        if failed.batch_id is None:
            lines.append(
                (
                    f"eval batches: {_count(failed.requests, 'request')} not submitted "
                    f"({failed.provider} {failed.model or ''} {failed.endpoint}): {failed.error}; "
                    "the next resume submits them again",
                    True,
                )
            )
    if b.waiting_trials and b.resume_command:
        status = f"see progress: {code(b.status_command)}; " if b.status_command else ""
        lines.append((f"batches end within 24 h; {status}then finish them: {code(b.resume_command)}", False))
    return lines


def collected_line(b: BatchReport) -> str:
    """What the start collected: ``eval batches collected: 200 answers from 1 batch; cost $0.02
    at batch prices (live $0.04): saved $0.02``."""
    answers = _count(b.answers, "answer")
    line = f"eval batches collected: {answers} from {_count(b.collected_batches, 'batch')}"
    if b.failed_requests:
        line += (
            f"; {_count(b.failed_requests, 'request')} without an answer, submitted again as their trials run"
        )
    if b.unknown_results:
        line += f"; {_count(b.unknown_results, 'result')} of no request of the batch, ignored"
    if b.still_running:
        line += f"; still running: {', '.join(b.still_running)}"
    if b.cost is not None and b.live_cost is not None:
        line += (
            f"; cost {dollars(b.cost)} at batch prices (live {dollars(b.live_cost)}): "
            f"saved {dollars(b.live_cost - b.cost)}"
        )
    return line


def _count(number: int, noun: str) -> str:
    plural = noun + ("es" if noun.endswith("ch") else "s")
    return f"{number:,} {noun if number == 1 else plural}"


def sentence(line: str) -> str:
    """A line of the terminal's as a sentence of its own (a report's paragraph): capitalized."""
    return line[:1].upper() + line[1:]
