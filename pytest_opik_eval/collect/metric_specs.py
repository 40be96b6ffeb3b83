"""``--eval-metric=SPEC``: the metrics a rescore scores with instead of the marker's, each named
on the command line as ``package.module:NAME`` or by the name of one of this plugin's metrics."""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TypeVar

from pytest_opik_eval.collect.marker import EvalSpec
from pytest_opik_eval.escaping import shorten
from pytest_opik_eval.option_values import METRIC_FORMS, METRICS_MODULE

_Value = TypeVar("_Value")
_MISSING = object()  # a name the module does not have
_REPR = 200  # characters of a value shown in an error


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
    called without arguments), or a bare name of :mod:`pytest_opik_eval.metrics`. Whatever the
    spec's code raises (an import, a lookup, the call; ``sys.exit`` in it too) is a
    ``MetricSpecError`` that says which step failed; only Ctrl-C goes through."""
    found = _named(spec)
    if _is_metric(found):
        return found
    name = spec.rpartition(":")[2]
    if not callable(found):
        _fail(spec, f"{name} is neither a metric nor a class or factory that makes one: {_shown(found)}")
    if inspect.isbuiltin(found):
        # sys.exit, os.abort, input: no factory is written in C, and calling one blind may end
        # or hang the process.
        _fail(spec, f"{name} is a built-in function ({_shown(found)}), not a metric factory: not called")
    made = _guarded(spec, found, f"calling {name}() without arguments")
    if not _is_metric(made):
        if inspect.iscoroutine(made):
            made.close()  # an async factory's: never awaited, it would warn when collected
        _fail(spec, f"{name}() returned {_shown(made)}, which is not a metric")
    return made


def _named(spec: str) -> Any:
    """What ``spec`` names, imported."""
    module_name, sep, name = spec.rpartition(":")
    if not sep:
        module_name = METRICS_MODULE
    module = _guarded(spec, lambda: _module(spec, module_name), f"importing the module {module_name!r}")
    found = _guarded(spec, lambda: _attribute(module, name), f"looking up {name!r} in {module_name!r}")
    if found is not _MISSING:
        return found
    if not sep:
        ours = ", ".join(n for n in module.__all__ if n != "BaseMetric" and _is_metric_class(module, n))
        _fail(spec, f"{METRICS_MODULE} has no metric {name!r} (its metrics: {ours})")
    _fail(spec, f"the module {module_name!r} has no attribute {name!r}")


def _module(spec: str, module_name: str) -> Any:
    try:
        return importlib.import_module(module_name)
    except ImportError as error:
        _fail(
            spec,
            f"cannot import the module {module_name!r} ({type(error).__name__}: {error}); it must be "
            "importable from the folder pytest runs in (add its folder to the pythonpath ini option)",
        )


def _attribute(module: Any, dotted: str) -> Any:
    try:
        return functools.reduce(getattr, dotted.split("."), module)
    except AttributeError:
        return _MISSING


def _guarded(spec: str, step: Callable[[], _Value], what: str) -> _Value:
    """``step``, the spec's own code; what it raises, but Ctrl-C and our own error, fails the
    spec naming ``what``: SystemExit and pytest's outcomes (``pytest.skip()``) too, which would
    otherwise end pytest with an internal error."""
    try:
        return step()
    except (KeyboardInterrupt, MetricSpecError):
        raise
    except BaseException as error:
        failure = f"{what} raised {_described(error)}"
    # Outside the except block: the message alone, not the chain.
    _fail(spec, failure)


def _is_metric(value: object) -> bool:
    """As the marker checks its metrics: an instance with a str ``name`` and a ``score`` method
    (an attribute that raises when read is not there)."""
    try:
        return (
            not isinstance(value, type)
            and isinstance(getattr(value, "name", None), str)
            and callable(getattr(value, "score", None))
        )
    except Exception:
        return False


def _described(error: BaseException) -> str:
    """``SystemExit: 3``; the type alone when the message is empty (``sys.exit()``) or raises."""
    try:
        message = str(error)
    except Exception:
        message = ""
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


def _shown(value: object) -> str:
    """``value``'s repr, cut short (a factory may return a list of a million items), or its type
    when its repr raises."""
    try:
        return shorten(repr(value), _REPR)
    except Exception:
        return f"<{type(value).__name__} object>"


def _is_metric_class(module: object, name: str) -> bool:
    return callable(getattr(getattr(module, name), "score", None))


def _fail(spec: str, problem: str) -> NoReturn:
    raise MetricSpecError(
        f"--eval-metric={spec}: {problem}; a metric has a str 'name' and a score(**kwargs) method, "
        f"and the accepted forms are {METRIC_FORMS}"
    )
