"""The private pytest API the plugin touches sits in ``_compat.py`` alone, where each use has a
small typed function (CI runs the suite at the lowest pytest supported as well as the latest)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parent.parent / "pytest_opik_eval"
COMPAT = PACKAGE / "_compat.py"


def private_uses(path: Path) -> list[str]:
    """``_pytest`` imports, and reads of another object's private attributes (``item._x``; an
    object's own, ``self._x`` or ``cls._x``, are its business), each as ``line: code``."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [
                (node.lineno, f"import {a.name}") for a in node.names if a.name.split(".")[0] == "_pytest"
            ]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "_pytest":
            found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                found.append((node.lineno, ast.unparse(node)))
    return [f"{line}: {code}" for line, code in sorted(found)]


def test_private_pytest_api_is_used_in_compat_only() -> None:
    offenders = {
        str(path.relative_to(PACKAGE)): uses
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != COMPAT and (uses := private_uses(path))
    }
    assert offenders == {}


def test_the_contract_sees_private_uses(tmp_path: Path) -> None:
    # The checker itself: each kind of use planted in a module is found, an object's own is not.
    module = tmp_path / "module.py"
    module.write_text(
        "from _pytest.junitxml import xml_key\n"
        "import _pytest.fixtures\n"
        "def f(item, self):\n"
        "    self._own = item._fixtureinfo.argnames\n"
        "    return item.__class__\n"
    )
    assert private_uses(module) == [
        "1: from _pytest.junitxml import xml_key",
        "2: import _pytest.fixtures",
        "4: item._fixtureinfo",
    ]
    assert private_uses(COMPAT) != []  # where they belong


def test_junitxml_still_has_what_compat_uses() -> None:
    # junit_suite_property_recorder and junit_mark_skipped (a soft-failed trial's <skipped>): the
    # names they reach, so that a pytest release without one fails here, by name.
    from _pytest import junitxml

    assert isinstance(junitxml.xml_key, pytest.StashKey)
    for name in ("node_reporter", "add_global_property", "pytest_runtest_logreport"):
        assert callable(getattr(junitxml.LogXML, name, None)), f"LogXML.{name}"
    assert callable(getattr(junitxml._NodeReporter, "append", None)), "_NodeReporter.append"
