"""The private pytest API this plugin touches, each use behind a small typed function: when a
pytest release changes one, it is fixed here alone. CI runs the suite at the lowest pytest
``pyproject.toml`` allows as well as at the latest, and ``tests/test_compat.py`` keeps private
attributes and ``_pytest`` imports out of every other module."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest


def argument_names(function: pytest.Function) -> tuple[str, ...]:
    """The names of the test function's own arguments that pytest fills in (fixtures and
    parametrize values), without the fixtures they need in turn, autouse and ``usefixtures``
    ones: ``item.fixturenames`` is that whole closure."""
    return function._fixtureinfo.argnames


def fixture_definition(function: pytest.Function, name: str) -> pytest.FixtureDef[Any] | None:
    """The definition of fixture ``name`` that pytest uses for this test (the last of those
    visible from it, which overrides the others), or None if it has none: a parametrize value,
    or a name outside the test's fixture closure. Also for ``metafunc.definition``, during
    collection."""
    definitions = function._fixtureinfo.name2fixturedefs.get(name)
    return definitions[-1] if definitions else None


def junit_mark_skipped(config: pytest.Config, report: pytest.TestReport, kind: str, message: str) -> None:
    """Show the test case of ``report`` (a call that passed, already written by junitxml) as
    skipped in the JUnit XML being written, as pytest shows an xfail: a ``<skipped type=KIND
    message=...>`` element (``message``'s first line; the whole of it as its text), counted among
    the suite's skipped tests rather than its passed ones. Nothing without ``--junitxml``."""
    import xml.etree.ElementTree as ET

    from _pytest.junitxml import xml_key

    xml = config.stash.get(xml_key, None)
    if xml is None:
        return
    skipped = ET.Element("skipped", type=kind, message=message.partition("\n")[0])
    skipped.text = message
    xml.node_reporter(report).append(skipped)  # counts it as skipped
    xml.stats["passed"] -= 1  # which junitxml counted it as


def junit_suite_property_recorder(config: pytest.Config) -> Callable[[str, object], None] | None:
    """What the ``record_testsuite_property`` fixture records with: adds a property to the
    ``<testsuite>`` of the JUnit XML being written, or None when none is (no ``--junitxml``, or a
    pytest-xdist worker). For a session-end hook, which has no fixture: it is reached the way that
    fixture reaches it."""
    from _pytest.junitxml import xml_key

    xml = config.stash.get(xml_key, None)
    return None if xml is None else xml.add_global_property
