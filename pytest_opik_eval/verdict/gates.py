"""Deciding on a whole experiment: item verdicts (k of n), aggregate gates, pending trials.
Pure functions over experiment results: no pytest, no store.

The gates on scores decide on evidence (``score_gates``). The cost and latency gates compare
what was measured with their bound: no interval, no test, the same in either mode. A figure that
was not measured (no span reported usage, a span has tokens and no price, no latency was
recorded) fails its gate, saying why and how to measure it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import replace

from pytest_opik_eval.formatting import dollars, duration
from pytest_opik_eval.store.records import GateSettings
from pytest_opik_eval.verdict.decisions import Adjusted
from pytest_opik_eval.verdict.model import GateVerdict
from pytest_opik_eval.verdict.results import ExperimentResult
from pytest_opik_eval.verdict.score_gates import fail_under, max_regression, min_pass_rate
from pytest_opik_eval.verdict.score_gates import verdict as _verdict
from pytest_opik_eval.verdict.usage import latencies, percentile, slowest, spend

# Items or trials named in a cost or latency gate's notes, worst first.
_WORST = 5


def judge(
    result: ExperimentResult,
    resume_command: Callable[[str], str],
    adjusted: Mapping[str, Adjusted] | None,
    family: int,
) -> ExperimentResult:
    """The result (with its baseline comparison, if any) with its gate verdicts; ``adjusted``:
    its regression gates' Holm steps over the session's ``family`` of them (none: unadjusted)."""
    gates = evaluate_gates(result, result.settings, resume_command, adjusted or {}, family)
    return replace(result, gates=gates, gates_met=all(g.met for g in gates))


def evaluate_gates(
    result: ExperimentResult,
    settings: GateSettings,
    resume_command: Callable[[str], str],
    adjusted: Mapping[str, Adjusted],
    family: int,
) -> list[GateVerdict]:
    """Every gate that applies to the experiment, met or not, with one line of detail each."""
    summary = result.summary
    pending_note = (
        f"; {summary.pending} trial(s) pending: {resume_command(result.id)}" if summary.pending else ""
    )
    verdicts = [
        *fail_under(result, settings),
        *min_pass_rate(result, settings),
        *_items(result, settings),
        *max_regression(result, settings, adjusted, family),
        *_max_cost(result, settings),
        *_max_latency(result, settings),
    ]
    verdicts = [v.model_copy(update={"detail": v.detail + pending_note}) for v in verdicts]
    if summary.pending and not verdicts and settings.has_gates():
        verdicts.append(_verdict("pending", None, None, None, False, pending_note.lstrip("; ")))
    return verdicts


def _items(result: ExperimentResult, settings: GateSettings) -> list[GateVerdict]:
    if settings.pass_threshold is None:
        return []
    # An item whose verdict waits on a pending trial has neither passed nor failed; and as every
    # gate, this one is not met while a trial is pending, even one its item no longer needs.
    passed = sum(i.verdict == "passed" for i in result.items)
    met = passed == len(result.items) and not result.summary.pending
    threshold = settings.pass_threshold
    detail = f"{passed} of {len(result.items)} items passed at least {threshold} of their trials"
    # pass@k and pass^k are in the summary, shown beside the item counts: not repeated here.
    return [_verdict("items", None, None, None, met, detail)]


def _max_cost(result: ExperimentResult, settings: GateSettings) -> list[GateVerdict]:
    """Per item: no item's mean app cost per trial above the bound (the judges' cost is the eval's,
    not the app's); per run: the experiment's whole spend, the app's and the judges'."""
    if settings.max_cost_per_item is None and settings.max_cost_per_run is None:
        return []
    spent = spend(result.trials)
    pending = bool(result.summary.pending)
    verdicts = []
    bound = settings.max_cost_per_item
    if bound is not None:
        worst = sorted(spent.cost_by_item.items(), key=lambda pair: -pair[1])
        # Costs by item only when the app reported some: else no item is named (each would read $0).
        value = worst[0][1] if worst else None
        over = [item for item, cost in worst if cost > bound]
        if not spent.app_reported:
            detail = _nothing_reported("the app's", spent.trials)
        elif over:
            most = dollars(value, against=[bound])
            detail = (
                f"{len(over)} of {len(worst)} items cost more than {dollars(bound, against=[value])} per "
                f"trial (the app's spans, mean over an item's trials), the most {most}"
            )
        else:
            detail = (
                f"the most expensive item cost {dollars(value, against=[bound])} per trial <= "
                f"{dollars(bound, against=[value])} (the app's spans)"
            )
        unpriced = _unpriced(spent.unpriced_app)
        notes = []
        if worst:
            # side by side, and beside the bound: as precise as they differ
            named = [bound, *(cost for _, cost in worst[:_WORST])]
            notes.append(
                "most expensive: " + ", ".join(f"{i} {dollars(c, against=named)}" for i, c in worst[:_WORST])
            )
        verdicts.append(
            _verdict(
                "max_cost_per_item",
                None,
                value,
                bound,
                spent.app_reported and not over and not unpriced and not pending,
                detail + unpriced,
            ).model_copy(update={"notes": notes})
        )
    bound = settings.max_cost_per_run
    if bound is not None:
        reported = spent.app_reported or spent.judge_reported or spent.simulator_reported
        if not reported:
            detail = _nothing_reported("any", spent.trials)
        else:
            # The parts of the total, as precise as it is (they add up to it).
            judged = f", judges {dollars(spent.judge, against=[bound])}" if spent.judge_reported else ""
            if spent.simulator_reported:
                judged += f", simulated users {dollars(spent.simulator, against=[bound])}"
            verb = "<=" if spent.total <= bound else "is above"
            app = dollars(spent.app, against=[bound])
            detail = (
                f"spent {dollars(spent.total, against=[bound])} (app {app}{judged}) {verb} "
                f"{dollars(bound, against=[spent.total])}"
            )
        unpriced = _unpriced(spent.unpriced_app + spent.unpriced_judge)
        met = reported and spent.total <= bound and not unpriced and not pending
        verdicts.append(
            _verdict(
                "max_cost_per_run", None, spent.total if reported else None, bound, met, detail + unpriced
            )
        )
    return verdicts


def _nothing_reported(whose: str, trials: int) -> str:
    return (
        f"no cost was measured: no span of {whose} reported usage or a cost in {trials} completed "
        "trial(s); record the LLM calls with @opik.track (or an Opik integration such as "
        "track_openai) and their usage with opik_context.update_current_span(usage=..., total_cost=...)"
    )


def _unpriced(reasons: Counter[str]) -> str:
    """Why a cost is a floor, which a gate cannot pass on, and how to price the rest."""
    if not reasons:
        return ""
    count = sum(reasons.values())
    why = "; ".join(f"{reason} ({n})" for reason, n in reasons.most_common())
    # The reasons are run/pricing.py's: "no price table (pip install ...)", "unknown model 'x'", ...
    fix = (
        "install the price table: pip install 'pytest-opik-eval[cost]' (Python >= 3.11)"
        if any(reason.startswith("no price table") for reason in reasons)
        else "report the span's cost (total_cost), or a model and provider the price table knows"
    )
    return f"; {count} span(s) have tokens and no price, so the cost is a floor and cannot pass: {why}; {fix}"


def _max_latency(result: ExperimentResult, settings: GateSettings) -> list[GateVerdict]:
    """The task latency's percentile (nearest rank: a measured value) over the completed trials."""
    limit = settings.max_latency
    if limit is None:
        return []
    name = f"p{limit.percentile:g}"
    measured = latencies(result.trials)
    value = percentile(measured, limit.percentile) if measured else None
    if value is None:
        detail = (
            "no completed trial recorded its task latency (trials recorded by a version that kept "
            "no timings have none: rerun them)"
        )
    else:
        verb = "<=" if value <= limit.seconds else "is above"
        pair = (value, limit.seconds)  # as precise as they differ: never "2.5 s is above 2.5 s"
        detail = (
            f"{name} task latency {duration(value, against=pair)} {verb} "
            f"{duration(limit.seconds, against=pair)}, over {len(measured)} trial(s)"
        )
    notes = []
    if measured:
        worst = (f"{t.dataset_item_id}#{t.trial} {duration(s)}" for s, t in slowest(result.trials, _WORST))
        notes.append(f"slowest: {', '.join(worst)}")
    met = value is not None and value <= limit.seconds and not result.summary.pending
    return [
        _verdict("max_latency", name, value, limit.seconds, met, detail).model_copy(update={"notes": notes})
    ]
