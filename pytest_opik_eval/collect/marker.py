"""The ``@pytest.mark.eval`` marker: its signature, and its arguments checked into an EvalSpec."""

from __future__ import annotations

import argparse
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

import pytest

from pytest_opik_eval.option_values import cost_limit, latency_limit, score_bound_problem
from pytest_opik_eval.thresholds import own_threshold

if TYPE_CHECKING:
    from pytest_opik_eval.filtering import Filter

MARKER = "eval"  # @pytest.mark.eval
MARKER_HELP = (
    "eval(dataset, *, metrics=(), scoring_key_mapping=None, trial_count=1, filter=None, "
    "item_ids=None, sampler=None, nb_samples=None, experiment_name=None, thresholds=None, "
    "fail_under=None, min_pass_rate=None, pass_threshold=None, dataset_name=None, task_threads=None, "
    "max_cost=None, max_latency=None, labels_field=None, judge_samples=None, batch=None): "
    "run the test as an evaluation with --eval: one test case per dataset item and trial; the "
    "test function is the task, its return value the output, and the metrics' scores its "
    "assertions. dataset: a .jsonl/.json/.csv path relative to the test file, a list of dicts, "
    "or a callable returning one. fail_under and min_pass_rate gate the experiment's aggregates; "
    "pass_threshold=K passes an item when K of its trial_count trials passed. max_cost: USD "
    "per item (0.01), or '0.01/item', '5/run', or a list of both; max_latency: seconds of task "
    "latency at p95 (2.5), or '800ms', '2.5@p99'. dataset_name: the "
    "Opik server dataset a file dataset is uploaded to (default: the file's name). task_threads: "
    "how many trials may run at once (wins over --eval-threads). labels_field: the item key "
    "holding human labels by score name, kept from the task and the metrics (wins over ini "
    "eval_labels_field; default: labels). judge_samples=N: each LLM judge scores each output N "
    "times, the score their mean, a pass/fail judge's majority (wins over --eval-judge-samples; "
    "default: 1). batch: with --eval-batch, False sends this test's calls live, 'strict' fails a "
    "trial whose request no batch takes (default: the option's mode)."
)


def _signature(
    dataset: object,
    *,
    metrics: Sequence[Any] = (),
    scoring_key_mapping: Mapping[str, Any] | None = None,
    trial_count: int = 1,
    filter: str | None = None,
    item_ids: Sequence[str] | None = None,
    sampler: Any = None,
    nb_samples: int | None = None,
    experiment_name: str | None = None,
    thresholds: Mapping[str, float] | None = None,
    fail_under: Mapping[str, float] | None = None,
    min_pass_rate: float | None = None,
    pass_threshold: int | None = None,
    dataset_name: str | None = None,
    task_threads: int | None = None,
    max_cost: float | str | Sequence[str] | None = None,
    max_latency: float | str | None = None,
    labels_field: str | None = None,
    judge_samples: int | None = None,
    batch: bool | str | None = None,
) -> None:
    """The marker's signature; binding the marker's arguments to it reports unknown ones."""


ScoringKeyMapping = Mapping[str, "str | Callable[[dict[str, Any]], Any]"]


@dataclass(frozen=True)
class EvalSpec:
    """The checked arguments of one test's ``eval`` marker."""

    dataset: object
    metrics: tuple[Any, ...]
    scoring_key_mapping: ScoringKeyMapping
    trial_count: int
    filter: Filter | None
    item_ids: tuple[str, ...] | None
    sampler: Any
    nb_samples: int | None
    experiment_name: str | None
    thresholds: Mapping[str, float]
    fail_under: Mapping[str, float]
    min_pass_rate: float | None
    pass_threshold: int | None
    dataset_name: str | None
    task_threads: int | None
    max_cost: Mapping[str, float] = field(default_factory=dict)  # "item" / "run" -> USD
    max_latency: tuple[float, float] | None = None  # (seconds, percentile)
    labels_field: str | None = None  # the item key of human labels; None: the ini's, else "labels"
    judge_samples: int | None = None  # times each LLM judge scores an output; None: the option's
    batch: str | None = None  # "on", "strict" or "off": this test's --eval-batch mode; None: the option's

    def threshold(self, score_name: str, metric: Any) -> float | None:
        """The threshold a score named ``score_name`` is judged against (``metric``: the metric
        of that name, or None): the marker's, else the metric's own, else none."""
        if score_name in self.thresholds:
            return self.thresholds[score_name]
        return own_threshold(metric)

    def thresholds_in_force(self) -> dict[str, float | None]:
        """Each metric's threshold and the marker's, by score name, as stored with the experiment."""
        in_force = {m.name: self.threshold(m.name, m) for m in self.metrics}
        in_force.update({name: self.threshold(name, None) for name in self.thresholds})
        return in_force

    def sampler_description(self) -> str | None:
        if self.sampler is None:
            return None
        describe = getattr(self.sampler, "describe", None)
        return str(describe()) if callable(describe) else type(self.sampler).__name__


def read_spec(marker: pytest.Mark, where: str) -> EvalSpec:
    """Check the marker's arguments; a bad one fails collection with a message naming it."""
    try:
        bound = inspect.signature(_signature).bind(*marker.args, **marker.kwargs)
    except TypeError as error:
        problem = str(error)
    else:
        problem = ""
    if problem:
        _fail(where, f"{problem}; the signature is @pytest.mark.{MARKER_HELP.split(':')[0]}")
    bound.apply_defaults()
    args = bound.arguments
    trial_count = _count(args["trial_count"], "trial_count", where, default=1)
    return EvalSpec(
        dataset=args["dataset"],
        metrics=_metrics(args["metrics"], where),
        scoring_key_mapping=_mapping(args["scoring_key_mapping"], where),
        trial_count=trial_count,
        filter=_filter(args["filter"], where),
        item_ids=_item_ids(args["item_ids"], where),
        sampler=_sampler(args["sampler"], where),
        nb_samples=_count(args["nb_samples"], "nb_samples", where, default=None),
        experiment_name=_name(args["experiment_name"], where),
        thresholds=_numbers(args["thresholds"], "thresholds", where),
        fail_under=_scores(_numbers(args["fail_under"], "fail_under", where), "fail_under", where),
        min_pass_rate=_min_pass_rate(args["min_pass_rate"], where),
        pass_threshold=_pass_threshold(args["pass_threshold"], trial_count, where),
        dataset_name=_name(args["dataset_name"], where, "dataset_name"),
        task_threads=_count(args["task_threads"], "task_threads", where, default=None),
        max_cost=_max_cost(args["max_cost"], where),
        max_latency=_max_latency(args["max_latency"], where),
        labels_field=_name(args["labels_field"], where, "labels_field"),
        judge_samples=_judge_samples(args["judge_samples"], where),
        batch=_batch(args["batch"], where),
    )


def _fail(where: str, message: str) -> NoReturn:
    pytest.fail(f"@pytest.mark.eval on {where}: {message}", pytrace=False)


def _metrics(value: object, where: str) -> tuple[Any, ...]:
    if not isinstance(value, (list, tuple)):
        _fail(where, f"metrics must be a list of metrics, got {type(value).__name__}")
    names: dict[str, int] = {}
    for position, metric in enumerate(value, start=1):
        name = getattr(metric, "name", None)
        if (
            isinstance(metric, type)
            or not callable(getattr(metric, "score", None))
            or not isinstance(name, str)
        ):
            hint = " (pass an instance: Equals(), not Equals)" if isinstance(metric, type) else ""
            _fail(
                where,
                f"metrics[{position - 1}] is not a metric: {metric!r}{hint}; a metric has a "
                "str 'name' and a score(**kwargs) method, like pytest_opik_eval.metrics.BaseMetric",
            )
        if name in names:
            _fail(
                where,
                f"metrics[{names[name]}] and metrics[{position - 1}] are both named {name!r}; "
                "give one another name (e.g. Equals(name='exact'))",
            )
        names[name] = position - 1
    return tuple(value)


def _mapping(value: object, where: str) -> ScoringKeyMapping:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and (isinstance(v, str) or callable(v)) for k, v in value.items()
    ):
        _fail(
            where,
            "scoring_key_mapping must map metric parameter names to item/output keys or callables,"
            ' e.g. {"reference": "expected_output"}',
        )
    return dict(value)


def _count(value: object, name: str, where: str, *, default: int | None) -> Any:
    if value is None and default is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        _fail(where, f"{name} must be an integer >= 1, got {value!r}")
    return value


def _batch(value: object, where: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, str) and value.strip().lower() in ("on", "strict", "off"):
        return value.strip().lower()
    _fail(where, f"batch must be True, False, 'strict', 'on' or 'off', not {value!r}")


def _judge_samples(value: object, where: str) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        _fail(
            where,
            f"judge_samples must be a whole number of at least 1 (the times each LLM judge scores "
            f"an output, such as 3), got {value!r}",
        )
    return value


def _filter(value: object, where: str) -> Filter | None:
    if value is None:
        return None
    if not isinstance(value, str):
        _fail(where, f"filter must be a string such as 'data.category = \"geo\"', got {value!r}")
    # Imported here: the entry module imports this one, and pytest loads it in every run.
    from pytest_opik_eval.filtering import FilterError, parse_filter

    try:
        return parse_filter(value)
    except FilterError as error:
        problem = str(error)
    _fail(where, problem)


def _item_ids(value: object, where: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        _fail(where, f"item_ids must be a list of item ids, got {value!r}")
    ids = tuple(str(v) if isinstance(v, int) and not isinstance(v, bool) else v for v in value)
    seen: set[str] = set()
    for item_id in ids:
        if not isinstance(item_id, str):
            _fail(where, f"item_ids must hold str ids, got {item_id!r}")
        if item_id in seen:
            _fail(where, f"item_ids lists {item_id!r} twice")
        seen.add(item_id)
    return ids


def _sampler(value: object, where: str) -> Any:
    if value is not None and not callable(getattr(value, "sample", None)):
        _fail(
            where,
            f"sampler must have a sample(items) method, like "
            f"pytest_opik_eval.samplers.RandomDatasetSampler(max_samples=10, seed=1); got {value!r}",
        )
    return value


def _name(value: object, where: str, argument: str = "experiment_name") -> str | None:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        _fail(where, f"{argument} must be a non-empty string, got {value!r}")
    return value if value is None else str(value)


def _numbers(value: object, argument: str, where: str) -> Mapping[str, float]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        _fail(
            where,
            f'{argument} must map score names to minimums, e.g. {{"equals_metric": 0.9}}; got {value!r}',
        )
    result: dict[str, float] = {}
    for name, minimum in value.items():
        if not isinstance(name, str) or isinstance(minimum, bool) or not isinstance(minimum, (int, float)):
            _fail(where, f"{argument}[{name!r}] must be a number, got {minimum!r}")
        result[name] = float(minimum)
    return result


def _scores(bounds: Mapping[str, float], argument: str, where: str) -> Mapping[str, float]:
    for name, bound in bounds.items():
        problem = score_bound_problem(bound)
        if problem:
            _fail(where, f"{argument}[{name!r}] {problem}, got {bound:g}")
    return bounds


def _min_pass_rate(value: object, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        _fail(where, f"min_pass_rate must be a share from 0 to 1, such as 0.9; got {value!r}")
    return float(value)


def _pass_threshold(value: object, trial_count: int, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= trial_count:
        _fail(
            where, f"pass_threshold must be an integer from 1 to trial_count ({trial_count}), got {value!r}"
        )
    return value


def _max_cost(value: object, where: str) -> dict[str, float]:
    """A number is USD per item; a string reads as --eval-max-cost does; a list gives both."""
    if value is None:
        return {}
    given = [value] if isinstance(value, (str, int, float)) else value
    limits: dict[str, float] = {}
    for one in given if isinstance(given, (list, tuple)) else [given]:
        if isinstance(one, bool) or not isinstance(one, (str, int, float)):
            _fail(
                where,
                f"max_cost must be USD per item (0.01), or '0.01/item', '5/run', or a list; got {value!r}",
            )
        try:
            scope, usd = cost_limit(str(one))
        except argparse.ArgumentTypeError as error:
            problem = str(error)
        else:
            limits[scope] = usd
            continue
        _fail(where, f"max_cost: {problem}")
    return limits


def _max_latency(value: object, where: str) -> tuple[float, float] | None:
    """A number is seconds at p95; a string reads as --eval-max-latency does."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        _fail(
            where,
            f"max_latency must be seconds (2.5), or a string such as '800ms' or '2.5@p99'; got {value!r}",
        )
    try:
        return latency_limit(str(value))
    except argparse.ArgumentTypeError as error:
        problem = str(error)
    _fail(where, f"max_latency: {problem}")
