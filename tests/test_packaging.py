"""The package's version has one source: the constant the build reads, which the installed
metadata, ``pytest_opik_eval.__version__`` and ``opik-eval --version`` all show.

(The built sdist and wheel are checked by .ci/check_dist.py: building is too slow for a test.)"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest

import pytest_opik_eval
from pytest_opik_eval.cli import main as opik_eval


def test_the_version_is_the_installed_metadatas(capsys: pytest.CaptureFixture[str]) -> None:
    version = importlib.metadata.version("pytest-opik-eval")
    assert pytest_opik_eval.__version__ == version
    with pytest.raises(SystemExit) as exit_:
        opik_eval(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"opik-eval {version}\n"


def test_the_installed_command_prints_it() -> None:
    command = Path(sys.executable).parent / "opik-eval"
    result = subprocess.run([command, "--version"], capture_output=True, text=True, check=True)
    assert result.stdout == f"opik-eval {importlib.metadata.version('pytest-opik-eval')}\n"
