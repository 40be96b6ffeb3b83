"""Eval results in pytest's JUnit XML (``--junitxml``): each trial's scores are properties of its
test case (added by the trial), each experiment's aggregates and gates properties of the suite."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from pytest_opik_eval._compat import junit_suite_property_recorder
from pytest_opik_eval.escaping import escape_control
from pytest_opik_eval.verdict.results import ExperimentResult

PREFIX = "eval."


def suite_properties(experiments: Sequence[ExperimentResult]) -> list[tuple[str, str]]:
    properties = []
    for e in experiments:
        base = f"{PREFIX}{e.name}."
        s = e.summary
        properties += [
            (base + "experiment_id", e.id),
            (base + "trials", str(s.trials)),
            (base + "completed", str(s.completed)),
            (base + "pending", str(s.pending)),
            (base + "pass_rate", _num(s.pass_rate)),
            (base + "gates_met", str(e.gates_met).lower()),
        ]
        for name, m in s.metrics.items():
            properties += [
                (f"{base}{name}.mean", _num(m.mean)),
                (f"{base}{name}.min", _num(m.min)),
                (f"{base}{name}.max", _num(m.max)),
                (f"{base}{name}.failed", str(m.failed)),
            ]
        for gate in e.gates:
            name = f"{base}gate.{gate.kind}" + (f".{gate.metric}" if gate.metric else "")
            properties.append((name, ("met: " if gate.met else "not met: ") + gate.detail))
    # Experiment and metric names and gate details carry data; pytest escapes only what XML
    # forbids in values, so an ESC in a name would make the file unreadable.
    return [(escape_control(name), escape_control(value)) for name, value in properties]


def add_suite_properties(config: pytest.Config, properties: Sequence[tuple[str, str]]) -> None:
    """Add them to the JUnit XML being written, if any; call before junitxml's sessionfinish."""
    record = junit_suite_property_recorder(config)
    if record is not None:
        for name, value in properties:
            record(name, value)


def _num(value: float | None) -> str:
    return "" if value is None else f"{value:.6g}"
