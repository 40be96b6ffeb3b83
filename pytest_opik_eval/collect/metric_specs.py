"""``--eval-metric=SPEC``: the metrics a rescore scores with instead of the marker's, each named
on the command line as ``package.module:NAME`` or by the name of one of this plugin's metrics."""

from __future__ import annotations

import dataclasses
import functools
import importlib
from collections.abc import Sequence
from typing import Any, NoReturn

from pytest_opik_eval.collect.marker import EvalSpec
from pytest_opik_eval.options import METRIC_FORMS, METRICS_MODULE


class MetricSpecError(ValueError):
    """A spec that does not name a metric: the message says which part failed."""


def load_metrics(specs: Sequence[str]) -> tuple[Any, ...]:
    """The metric each spec names, in order; two of one name are an error, as in a marker."""
    metrics: list[Any] = []
    names: dict[str, str] = {}
    for spec in specs:
        metric = load_metric(spec)
        if metric.name in names:
            raise MetricSpecError(
                f"--eval-metric={names[metric.name]} and --eval-metric={spec} are both named "
                f"{metric.name!r}; give one another name (a factory can return Equals(name='exact'))"
            )
        names[metric.name] = spec
        metrics.append(metric)
    return tuple(metrics)


def with_metrics(spec: EvalSpec, metrics: tuple[Any, ...]) -> EvalSpec:
    """The marker with ``metrics`` in place of its own. Its thresholds and ``fail_under`` on
    metrics it no longer has are left out: they would fail every trial, and the experiment, as
    unscored."""
    names = {metric.name for metric in metrics}
    return dataclasses.replace(
        spec,
        metrics=metrics,
        thresholds={name: value for name, value in spec.thresholds.items() if name in names},
        fail_under={name: value for name, value in spec.fail_under.items() if name in names},
    )


def load_metric(spec: str) -> Any:
    """The metric ``spec`` names: ``package.module:NAME`` (an instance, or a class or factory
    called without arguments), or a bare name of :mod:`pytest_opik_eval.metrics`."""
    found = _named(spec)
    if _is_metric(found):
        return found
    name = spec.rpartition(":")[2]
    if not callable(found):
        _fail(spec, f"{name} is neither a metric nor a class or factory that makes one: {found!r}")
    failure: str | None = None
    try:
        made = found()
    except Exception as error:
        # Outside the except block: the message alone, not the chain.
        failure = f"calling {name}() without arguments raised {type(error).__name__}: {error}"
    if failure is not None:
        _fail(spec, failure)
    if not _is_metric(made):
        _fail(spec, f"{name}() returned {made!r}, which is not a metric")
    return made


def _named(spec: str) -> Any:
    """What ``spec`` names, imported."""
    module_name, sep, name = spec.rpartition(":")
    if not sep:
        module_name = METRICS_MODULE
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        _fail(
            spec,
            f"cannot import the module {module_name!r} ({type(error).__name__}: {error}); it must be "
            "importable from the folder pytest runs in (add its folder to the pythonpath ini option)",
        )
    try:
        return functools.reduce(getattr, name.split("."), module)
    except AttributeError:
        pass
    if not sep:
        ours = ", ".join(n for n in module.__all__ if n != "BaseMetric" and _is_metric_class(module, n))
        _fail(spec, f"{METRICS_MODULE} has no metric {name!r} (its metrics: {ours})")
    _fail(spec, f"the module {module_name!r} has no attribute {name!r}")


def _is_metric(value: object) -> bool:
    """As the marker checks its metrics: an instance with a str ``name`` and a ``score`` method."""
    return (
        not isinstance(value, type)
        and isinstance(getattr(value, "name", None), str)
        and callable(getattr(value, "score", None))
    )


def _is_metric_class(module: object, name: str) -> bool:
    return callable(getattr(getattr(module, name), "score", None))


def _fail(spec: str, problem: str) -> NoReturn:
    raise MetricSpecError(
        f"--eval-metric={spec}: {problem}; a metric has a str 'name' and a score(**kwargs) method, "
        f"and the accepted forms are {METRIC_FORMS}"
    )
