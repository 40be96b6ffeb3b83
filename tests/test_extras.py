"""Each optional extra's absence is a clear message naming the extra to install. CI also runs the
whole suite without any extra (.ci/run), where these run against the real absence; here they
hide an installed extra from the imports."""

from __future__ import annotations

import importlib.metadata
import re
import sys
from pathlib import Path

import pytest
from conftest import Project
from test_recording import write_project

import pytest_opik_eval

OTEL_MODULES = ("opentelemetry", "opentelemetry.sdk", "opentelemetry.sdk.trace", "opentelemetry.trace")


def test_without_the_otel_extra_the_span_processor_names_it(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in OTEL_MODULES:
        monkeypatch.setitem(sys.modules, name, None)  # as if it were not installed
    monkeypatch.delitem(sys.modules, "pytest_opik_eval.run.otel", raising=False)
    project.write("test_app.py", "from pytest_opik_eval.tracing import SpanProcessor\n")
    result = project.run("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        [
            "*ImportError: pytest_opik_eval.tracing.SpanProcessor needs OpenTelemetry's SDK (*): "
            "pip install 'pytest-opik-eval[[]otel[]]'"
        ]
    )


def test_every_extra_a_message_names_is_one_the_package_has() -> None:
    # A renamed extra would leave the messages asking for one pip cannot find.
    named = {
        match.group(1)
        for path in Path(pytest_opik_eval.__file__).parent.rglob("*.py")
        for match in re.finditer(r"pip install 'pytest-opik-eval\[(\w+)\]'", path.read_text())
    }
    provided = set(importlib.metadata.metadata("pytest-opik-eval").get_all("Provides-Extra") or [])
    assert named == {"cost", "otel", "record"}
    assert named <= provided


def test_without_vcrpy_a_recording_mode_is_a_usage_error_naming_the_extra(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_project(project)
    monkeypatch.setitem(sys.modules, "vcr", None)  # as if it were not installed
    monkeypatch.setenv("PYTEST_OPIK_EVAL_RECORD", "none")
    result = project.run("--eval")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*--eval-record=none (from env PYTEST_OPIK_EVAL_RECORD) records the app's calls with vcrpy, "
            "which is not installed: pip install 'pytest-opik-eval[[]record[]]'"
        ]
    )
    monkeypatch.delenv("PYTEST_OPIK_EVAL_RECORD")
    assert project.run("--eval", "--co").ret == pytest.ExitCode.OK  # off: vcrpy is not needed
