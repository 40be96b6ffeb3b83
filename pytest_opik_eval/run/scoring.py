"""Scoring one trial: the scoring inputs (scoring_key_mapping), calling each metric, and the
thresholds that turn scores into a verdict."""

from __future__ import annotations

import inspect
import json
import math
import numbers
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import pytest

from pytest_opik_eval.collect.datasets.loading import MAX_DEPTH, nested_too_deep
from pytest_opik_eval.collect.marker import EvalSpec, ScoringKeyMapping
from pytest_opik_eval.escaping import escape_control, shorten
from pytest_opik_eval.exceptions import EvalError
from pytest_opik_eval.metrics.tool_calls import Span, extract
from pytest_opik_eval.run.judges import is_judge
from pytest_opik_eval.store.records import ScoreRecord

if TYPE_CHECKING:
    from pytest_opik_eval.collect.trials import TestPlan
    from pytest_opik_eval.run.judge_cache import JudgeCache
    from pytest_opik_eval.run.judges import ScoreNames
    from pytest_opik_eval.run.trial_trace import TrialTrace

# The hint for a task that returned nothing, the usual slip of a first eval test.
RETURNED_NONE = (
    "the test function returned None; its return value is the task output that the metrics "
    'score: return the answer (e.g. return {"output": answer})'
)


# The scoring inputs computed from the trial's spans (see metrics/tool_calls.py), for the tests
# whose metrics name them in their score() (a **kwargs metric does not ask for them) or whose
# scoring_key_mapping reads them.
COMPUTED = frozenset({"tool_calls", "llm_calls", "task_span"})
# Of them, the Opik SDK's SpanModel tree that opik.evaluate gives a metric naming it: made only
# for a test whose metrics (or mapping, by name) read it.
TASK_SPAN = "task_span"

# How an app's tool calls reach its trials: what the two notices below advise.
_INSTRUMENT = (
    'instrument the app\'s tools with the Opik SDK (@opik.track(type="tool")), '
    "with OpenTelemetry (execute_tool spans, the otel extra), "
    "or with the manual API (from pytest_opik_eval.tracing import trace; "
    'with trace.span(name, type="tool", input=args) as span: ...), '
    'or return them from the test ({"output": ..., "tool_calls": [...]}); '
    "the OpenAI and Anthropic calls the app makes itself are read from their HTTP answers with "
    "--eval-llm-spans=auto (the default) and the record extra (pip install 'pytest-opik-eval[record]')"
)
# Said once per test whose metrics read the tool calls of a trial that has no spans.
NO_SPANS = (
    "its metrics read the trial's tool calls (tool_calls, llm_calls), but the trial has no spans, "
    "so they got none: " + _INSTRUMENT
)
# Said once per rescored test whose metrics read the tool calls of an original trial that stored
# no spans of the app: its app made none, its store kept none, or it was imported from the Opik
# server (store/opik/importing.py copies no spans).
RESCORED_CALLS = (
    "its metrics read the trial's tool calls (tool_calls, llm_calls), which a rescore reads from "
    "the spans the original trial stored, but it stored none of the app's here, so they got none "
    "(an experiment recorded on another machine, or by opik.evaluate(), keeps its spans on the "
    "Opik server only: rescore it where it ran); rescore a new run (pytest --eval) of an app whose "
    "calls make spans: " + _INSTRUMENT
)


class SpanSource(Protocol):
    """Where a trial's calls are read from: its own trace (``TrialTrace``), or for a rescore the
    spans its original stored (``run.rescored.OriginalTrace``)."""

    def snapshot(self) -> Sequence[Span]:
        """The app's spans."""

    def task_span(self, output: Mapping[str, Any]) -> Any:
        """The Opik SDK's ``SpanModel`` tree of the task span and the app's spans under it."""


class MissingScoreArguments(EvalError):
    """A metric needs an argument that neither the item, the output nor the mapping provides."""


def scoring_inputs(
    item: Mapping[str, Any],
    output: Mapping[str, Any],
    mapping: ScoringKeyMapping,
    computed: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """``{**item, **computed, **output}``, then each ``{metric_param: source_key}`` entry copies
    a value (or a callable computes one from the merged dict), in order, as in the Opik SDK. The
    task output wins over what was computed from the trial's spans, which wins over the item."""
    inputs = {**item, **output} if computed is None else {**item, **computed, **output}
    for param, source in mapping.items():
        if callable(source):
            inputs[param] = source(inputs)
        elif source in inputs:
            inputs[param] = inputs[source]
    return inputs


def computed_names(spec: EvalSpec) -> set[str]:
    """The computed inputs (``COMPUTED``) a test's metrics, or its mapping by name, read."""
    mapped = spec.scoring_key_mapping.values()
    return {name for metric in spec.metrics for name in _Parameters.of(metric).computed} | {
        source for source in mapped if isinstance(source, str) and source in COMPUTED
    }


def reads_calls(spec: EvalSpec) -> bool:
    """Whether a test's metrics (or its mapping, by name) read its trials' tool calls."""
    return bool(computed_names(spec) - {TASK_SPAN})


@dataclass(frozen=True)
class _Parameters:
    required: tuple[str, ...]
    accepted: frozenset[str] | None  # None: the metric takes **kwargs
    computed: frozenset[str]  # the COMPUTED inputs it names

    @classmethod
    def of(cls, metric: Any) -> _Parameters:
        parameters = inspect.signature(metric.score).parameters.values()
        if any(p.kind is p.VAR_KEYWORD for p in parameters):
            accepted = None
        else:
            accepted = frozenset(p.name for p in parameters if p.kind is not p.VAR_POSITIONAL)
        required = tuple(
            p.name
            for p in parameters
            if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        )
        named = frozenset(p.name for p in parameters if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD))
        return cls(required, accepted, named & COMPUTED)


@dataclass(frozen=True)
class Verdict:
    passed: bool
    lines: tuple[str, ...]  # one per score: value, threshold, reason


_PASSED = Verdict(True, ())


@dataclass(frozen=True)
class Judged:
    """The judge cache, and what of the trial its keys hold besides the metric and its inputs."""

    cache: JudgeCache
    item_id: str
    trial: int
    # --eval-batch: how many of the trial's requests were deferred so far. A judge whose call was
    # deferred scored nothing real (whatever it returned): its score is not cached.
    deferred: Callable[[], int] = lambda: 0


class Scorer:
    """Scores the trials of one experiment; built once, so signatures are inspected once."""

    def __init__(
        self,
        spec: EvalSpec,
        stored_thresholds: Mapping[str, float | None] | None = None,
        *,
        judge_samples: int = 1,
    ) -> None:
        """``stored_thresholds``: those in force when a resumed experiment was created; they win.
        ``judge_samples``: the times each LLM judge (``run.judges.is_judge``) scores an output;
        any other metric scores it once."""
        self._spec = spec
        self.metrics = spec.metrics
        self.mapping = spec.scoring_key_mapping
        self.thresholds = spec.thresholds
        self._stored = stored_thresholds or {}
        self._parameters = [_Parameters.of(metric) for metric in spec.metrics]
        self._by_name = {metric.name: metric for metric in spec.metrics}
        self._tracked = [bool(getattr(metric.score, "opik_tracked", False)) for metric in spec.metrics]
        self._samples = [
            judge_samples if judge_samples > 1 and is_judge(metric) else 1 for metric in spec.metrics
        ]
        # A mapping's callable may read the calls too: they are computed for it, but it is not
        # told of a trial without spans.
        named = computed_names(spec)
        self.reads_calls = bool(named - {TASK_SPAN})
        self._reads_span = TASK_SPAN in named
        # Whether the scoring computes them: a rescore reads the original's spans only then.
        self.computes = bool(named) or any(callable(source) for source in self.mapping.values())

    def score(
        self,
        item: Mapping[str, Any],
        output: Mapping[str, Any],
        trace: TrialTrace | None = None,
        seconds: dict[str, float] | None = None,
        judged: Judged | None = None,
        spans: SpanSource | None = None,
    ) -> list[ScoreRecord]:
        """Run every metric. A metric that raises an ``Exception`` gives a failed score and the
        others still run; a missing argument raises ``MissingScoreArguments``; a
        ``BaseException`` propagates. With ``trace``, each metric runs in a span of its own
        (see ``TrialTrace.metric``); ``seconds`` gets each metric's wall time, by its name; with
        ``judged``, a judge's scores come from the judge cache when it has them. A judge sampled
        several times (``judge_samples``) gives each score once: its samples' mean, or a pass/fail
        judge's majority (``sampled_value``). The tool calls (``COMPUTED``) come from the spans
        ``spans`` (by default ``trace``) holds as the scoring starts, computed only for a test that
        reads them."""
        computed: dict[str, Any] | None = None
        if self.computes:
            source = trace if spans is None else spans
            calls = extract(() if source is None else source.snapshot())
            computed = {"tool_calls": calls.tool_calls, "llm_calls": calls.llm_calls}
            if self._reads_span:
                computed[TASK_SPAN] = None if source is None else source.task_span(output)
        inputs = scoring_inputs(item, output, self.mapping, computed)
        scores: list[ScoreRecord] = []
        for metric, parameters, tracked, samples in zip(
            self.metrics, self._parameters, self._tracked, self._samples, strict=True
        ):
            missing = [name for name in parameters.required if name not in inputs]
            if missing:
                raise MissingScoreArguments(self._missing_message(metric, missing, inputs))
            if parameters.accepted is not None:
                kwargs = {k: v for k, v in inputs.items() if k in parameters.accepted}
            elif computed is None:
                kwargs = inputs
            else:
                # A **kwargs metric gets no computed input it does not name: a judge's cache key
                # would hold the span ids, new each run, and never be found again.
                kwargs = {
                    k: v
                    for k, v in inputs.items()
                    if k not in computed or v is not computed[k] or k in parameters.computed
                }
            started = time.perf_counter()
            if trace is None or tracked:
                # An Opik SDK metric's score() is an @opik.track of its own: its span is there.
                records = self._scored(metric, kwargs, judged, samples)
            else:
                with trace.metric(metric.name, kwargs) as span:
                    records = self._scored(metric, kwargs, judged, samples)
                    span.scores = records  # its output, made only if the trial stores spans
                    if any(r.scoring_failed for r in records):
                        span.error = {"exception_type": "ScoringFailed", "message": records[0].reason or ""}
            if seconds is not None:
                # Two metrics of one name (rare) add up: the time went to that name's scores.
                seconds[metric.name] = seconds.get(metric.name, 0.0) + time.perf_counter() - started
            scores.extend(records)
        return scores

    def calls_advice(
        self, item: Mapping[str, Any], output: Mapping[str, Any], traced: bool, rescored: bool
    ) -> list[str]:
        """What to tell the user, once per test, when its metrics read tool calls that a trial
        (``traced``: the app made spans, or for a rescore, ``rescored``, its original stored them)
        could not give them, or that hid the item's fields of those names. Nothing when the task
        returned its own."""
        if not self.reads_calls or "tool_calls" in output:
            return []
        advice = [] if traced else [RESCORED_CALLS if rescored else NO_SPANS]
        hidden = sorted(COMPUTED.intersection(item))
        if hidden:
            advice.append(
                f"the items' {', '.join(hidden)} field is not what the metrics get: the calls read "
                "from the trial's spans take its place; to score the field, rename it in the dataset"
            )
        return advice

    def _scored(
        self, metric: Any, kwargs: Mapping[str, Any], judged: Judged | None, samples: int
    ) -> list[ScoreRecord]:
        if samples == 1:
            return self._sample(metric, kwargs, judged, 0)
        # Every sample is taken, even after one failed: the score fails then, but the samples
        # that did not are cached, and a rerun pays only for the one that failed.
        return _sampled([self._sample(metric, kwargs, judged, sample) for sample in range(samples)])

    @classmethod
    def _sample(
        cls, metric: Any, kwargs: Mapping[str, Any], judged: Judged | None, sample: int
    ) -> list[ScoreRecord]:
        if judged is None:  # the cache is off: nothing computed
            return cls._run(metric, kwargs)
        return judged.cache.score(
            metric,
            kwargs,
            judged.item_id,
            judged.trial,
            lambda: cls._run(metric, kwargs),
            sample=sample,
            deferred=judged.deferred,
        )

    @staticmethod
    def _run(metric: Any, kwargs: Mapping[str, Any]) -> list[ScoreRecord]:
        try:
            return _records(metric, metric.score(**kwargs))
        except Exception as error:
            return [
                ScoreRecord(
                    name=metric.name,
                    value=0.0,
                    reason=f"{type(error).__name__}: {error}",
                    scoring_failed=True,
                )
            ]

    def _missing_message(self, metric: Any, missing: list[str], inputs: Mapping[str, Any]) -> str:
        # The keys come from the dataset and the task: escaped, as any data shown.
        return escape_control(
            f"metric {metric.name!r} ({type(metric).__name__}) needs {', '.join(missing)}, which "
            f"neither the item, the task output nor scoring_key_mapping provides.\n"
            f"  available keys: {', '.join(sorted(inputs))}\n"
            f"  scoring_key_mapping: {dict(self.mapping) or '{}'}\n"
            f'  fix: return it from the test, or map it, e.g. scoring_key_mapping={{"{missing[0]}": '
            f'"<key>"}}',
            newlines=True,
        )

    def threshold(self, score_name: str, metric: Any) -> float | None:
        """As the marker's spec has it (see ``EvalSpec.threshold``), unless stored thresholds win."""
        if score_name in self._stored:
            return self._stored[score_name]
        return self._spec.threshold(score_name, metric)

    def judge(self, scores: list[ScoreRecord]) -> Verdict:
        """A trial passes when no score failed and every score meets its threshold; the lines
        that explain a verdict are written only for one that failed."""
        thresholds = [self.threshold(s.name, self._by_name.get(s.name)) for s in scores]
        names = {s.name for s in scores} if self.thresholds else set()
        unscored = [name for name in self.thresholds if name not in names]
        for score, threshold in zip(scores, thresholds, strict=True):
            if score.scoring_failed or (threshold is not None and score.value < threshold):
                break
        else:  # a loop, not all() over a generator: this runs for every trial
            if not unscored:
                return _PASSED
        width = max((len(s.name) for s in scores), default=0)
        lines: list[str] = []
        for score, threshold in zip(scores, thresholds, strict=True):
            if score.scoring_failed:
                lines.append(f"{score.name:<{width}}  scoring failed: {score.reason}")
                continue
            miss = threshold is not None and score.value < threshold
            bound = "(no threshold)" if threshold is None else f"{'<' if miss else '>='} {threshold:g}"
            reason = f"  {score.reason}" if score.reason else ""
            sampled = "" if score.samples is None else f" ({_listed(score.samples)})"
            lines.append(f"{score.name:<{width}}  {score.value:.3g}{sampled} {bound}{reason}")
        lines += [f"{name}  no metric returned a score named {name!r} (see thresholds)" for name in unscored]
        return Verdict(False, tuple(lines))


class JudgeScorer(Scorer):
    """The scorer of a test with LLM judges: as it scores, it tells ``names`` the names of the
    scores each metric returns the first time it returns them (see ``run.judges.ScoreNames``):
    a judge's score need not have the judge's name. A test without a judge has a plain
    ``Scorer``, which does nothing more per trial."""

    def __init__(
        self,
        spec: EvalSpec,
        names: ScoreNames,
        test: str,
        stored_thresholds: Mapping[str, float | None] | None = None,
        *,
        judge_samples: int = 1,
    ) -> None:
        super().__init__(spec, stored_thresholds, judge_samples=judge_samples)
        self._names = names
        self._test = test
        self._seen: dict[int, frozenset[str]] = {id(metric): frozenset() for metric in spec.metrics}

    def _scored(
        self, metric: Any, kwargs: Mapping[str, Any], judged: Judged | None, samples: int
    ) -> list[ScoreRecord]:
        records = super()._scored(metric, kwargs, judged, samples)
        seen = self._seen[id(metric)]
        # A failed score is named after its metric whatever the scores it gives when it works.
        new = [r.name for r in records if not r.scoring_failed and r.name not in seen]
        if new:
            self._names.given(self._test, metric, dict.fromkeys(new))
            # Replaced, not added to: another thread may be reading it. Two threads that learn
            # the same name at once both tell ``names``, which records it once.
            self._seen[id(metric)] = seen.union(new)
        return records


# Each test's scorer, in its plan's stash: built at its first trial, then shared by the others.
SCORER = pytest.StashKey[Scorer]()


def scorer_of(plan: TestPlan) -> Scorer:
    """The scorer of a plan's trials (``new_scorer``'s), built at its first trial unless the
    running phase put one there before. Two threads that build it at once build the same scorer:
    either one serves."""
    scorer = plan.stash.get(SCORER, None)
    if scorer is None:
        scorer = plan.stash[SCORER] = new_scorer(plan)
    return scorer


def new_scorer(plan: TestPlan, names: ScoreNames | None = None) -> Scorer:
    """A scorer of the plan's trials: with ``names``, a ``JudgeScorer`` if the test has a judge.
    A resumed experiment is judged by the thresholds stored with it; any other by the marker's
    and its metrics' own."""
    stored = plan.gates.thresholds if plan.resumed else None
    if names is not None and any(map(is_judge, plan.spec.metrics)):
        return JudgeScorer(
            plan.spec, names, plan.test, stored_thresholds=stored, judge_samples=plan.judge_samples
        )
    return Scorer(plan.spec, stored_thresholds=stored, judge_samples=plan.judge_samples)


def sampled_value(samples: list[float]) -> float:
    """A score from a judge's samples of one output: a pass/fail judge's (every sample 0 or 1)
    is their majority, a tie passing, so that it stays pass/fail for its calibration, its
    corrected pass rate and its intervals; any other judge's is their mean."""
    if all(value in (0.0, 1.0) for value in samples):
        return float(2 * sum(samples) >= len(samples))
    # Samples that agree give their value as it is: a mean can round below a threshold it meets.
    return samples[0] if min(samples) == max(samples) else math.fsum(samples) / len(samples)


def _listed(samples: list[float]) -> str:
    kind = "majority" if all(value in (0.0, 1.0) for value in samples) else "mean"
    return f"{kind} of " + ", ".join(f"{value:.3g}" for value in samples)


def _sampled(runs: list[list[ScoreRecord]]) -> list[ScoreRecord]:
    """A judge's samples of one output as one record per score, in the order of the first:
    ``sampled_value`` of its values with all of them kept (``samples``), the first sample's reason
    and metadata; or, when a sample failed (or did not give that score), a failed score that says so."""
    found: dict[str, list[ScoreRecord | None]] = {}
    for sample, records in enumerate(runs):
        for given in records:
            found.setdefault(given.name, [None] * len(runs))[sample] = given
    combined = []
    for name, sampled in found.items():
        problem = next(
            (
                (sample, record)
                for sample, record in enumerate(sampled)
                if record is None or record.scoring_failed
            ),
            None,
        )
        if problem is not None:
            sample, record = problem
            where = f"judge sample {sample + 1} of {len(runs)}"
            reason = (
                f"{where} gave no score named {name!r}; a judge must give the same scores each time"
                if record is None
                else f"{where}: {record.reason}"
            )
            combined.append(ScoreRecord(name=name, value=0.0, reason=reason, scoring_failed=True))
            continue
        values = [record.value for record in sampled if record is not None]
        first = sampled[0]
        assert first is not None
        combined.append(first.model_copy(update={"value": sampled_value(values), "samples": values}))
    return combined


def _records(metric: Any, result: Any) -> list[ScoreRecord]:
    results = result if isinstance(result, list) else [result]
    records = []
    for r in results:
        if not hasattr(r, "name") or not hasattr(r, "value"):
            raise TypeError(
                f"{type(metric).__name__}.score() returned {type(r).__name__}; expected a "
                "ScoreResult (or a list of them)"
            )
        reason = getattr(r, "reason", None)
        failed = bool(getattr(r, "scoring_failed", False))
        value = _finite(r.value)
        if value is None and not failed:
            # A NaN would be stored as null and compare false with every threshold; a string or
            # None is a bug in the metric: either way the trial cannot be judged on it.
            shown = repr(r.value) if r.value is None or isinstance(r.value, float) else _shown(r.value)
            reason = (
                f"{type(metric).__name__}.score() returned {shown} for {str(r.name)!r}; "
                "a score must be a finite number"
            )
            failed = True
        metadata = getattr(r, "metadata", None)
        if metadata is not None:
            metadata, problem = _json_safe(metadata)
            if problem and not failed:
                # The value may be sound, but the trial is not judged on a score whose details
                # were lost: the metric's author is told what to fix.
                reason = (
                    f"{type(metric).__name__}.score() returned metadata for {str(r.name)!r} that {problem}"
                )
                failed = True
        records.append(
            ScoreRecord(
                name=str(r.name),
                value=0.0 if value is None else value,
                reason=None if reason is None else str(reason),
                scoring_failed=failed,
                metadata=metadata,
            )
        )
    return records


# As a task output is stored: a value JSON cannot hold is kept as its repr.
_metadata_json = json.JSONEncoder(ensure_ascii=False, default=repr).encode


def _json_safe(metadata: Any) -> tuple[dict[str, Any] | None, str]:
    """A score's metadata as the store, the reports and the Opik server can hold it (a copy: the
    metric may reuse its dict), or None and what is wrong with it."""
    if not isinstance(metadata, Mapping):
        return None, f"is {_shown(metadata)}; metadata must be a dict (or None)"
    if nested_too_deep(metadata):  # or refers to itself: json would recurse or raise
        return None, f"is nested more than {MAX_DEPTH} levels deep (or contains itself); flatten it"
    try:
        return json.loads(_metadata_json(dict(metadata)), parse_constant=_number_repr), ""
    except (TypeError, ValueError) as error:  # a key that is not a string, number, bool or None
        return None, f"JSON cannot hold ({error}); use string keys"


def _number_repr(constant: str) -> str:
    # NaN and the infinities, which json writes as bare tokens that are no JSON: kept as their
    # repr ("nan", "inf", "-inf"), as every other value JSON cannot hold is.
    return repr(float(constant))


def _finite(value: Any) -> float | None:
    """The score as a float, if it is a real finite number (bools count as 1 and 0)."""
    # A float first: what nearly every metric returns, and the ABC check costs more than the rest.
    if type(value) is not float and not isinstance(value, numbers.Real):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _shown(value: Any) -> str:
    return f"{shorten(repr(value), 80)} (a {type(value).__name__})"


def describe_failure(item: Mapping[str, Any], trial: int, output: Mapping[str, Any], verdict: Verdict) -> str:
    """The failure message of a trial that missed its thresholds: compact, shortened values."""
    # Item ids, values, score names and reasons are data: one line each, controls escaped.
    lines = [f"item {_one_line(str(item.get('id')))} (trial {trial}) did not meet its thresholds:"]
    lines += [f"  {_one_line(line)}" for line in verdict.lines]
    shown = {"input": item.get("input", {k: v for k, v in item.items() if k != "id"})}
    if "expected_output" in item:
        shown["expected"] = item["expected_output"]
    shown["output"] = output.get("output", output)
    width = max(len(k) for k in shown) + 1
    for label, value in shown.items():
        lines.append(f"  {label + ':':<{width}} {_short(value)}")
    if "output" in output and output["output"] is None:
        lines.append(f"  hint: {RETURNED_NONE}")
    return "\n".join(lines)


def _one_line(text: str) -> str:
    return escape_control(text.replace("\n", "\\n"))


def _short(value: Any, limit: int = 200) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=repr)
    return _one_line(shorten(text, limit))
