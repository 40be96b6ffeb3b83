"""`.ci/run`, the CI script: it must stop at the first step that fails."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

CI_SCRIPT = Path(__file__).parent.parent / ".ci" / "run"

# Stand-ins for the commands the script runs: each logs its name, and fails when its name is
# listed in $FAILING. python3 -m venv makes an activate script that changes nothing.
STUB = """#!/usr/bin/env bash
name=$(basename "$0")
echo "$name $*" >> "$CALLS"
if [ "$name" = python3 ] && [ "$1" = -m ] && [ "$2" = venv ]; then
  mkdir -p "$3/bin" && : > "$3/bin/activate"
fi
case " $FAILING " in *" $name "*) exit 3 ;; esac
exit 0
"""


SUITE = ["python3", "pip", "pytest", "mypy", "ruff", "ruff"]
LOWEST = ["python3", "pip", "pytest"]
# pip install '.[docs]', mkdocs build --strict, the docs' examples
DOCS = ["pip", "mkdocs", "pytest"]
# pip install build, python -m build, check_dist, the wheel's venv, its install, the quick start
PACKAGES = ["pip", "python", "python", "python3", "pip", "python"]
# python3 --version, its venv, pip install '.[test-core]', no extra's package, the suite
CORE = ["python3", "python3", "pip", "python", "pytest"]


def run_ci(tmp_path: Path, failing: str) -> tuple[int, list[str]]:
    checkout = tmp_path / "checkout"
    (checkout / ".ci").mkdir(parents=True)
    shutil.copy(CI_SCRIPT, checkout / ".ci" / "run")
    stubs = tmp_path / "bin"
    stubs.mkdir()
    for name in ("python3", "python", "pip", "pytest", "mypy", "ruff", "chromium", "mkdocs"):
        (stubs / name).write_text(STUB)
        (stubs / name).chmod(0o755)
    calls = tmp_path / "calls.log"
    env = {
        "PATH": f"{stubs}{os.pathsep}{os.environ['PATH']}",
        "CALLS": str(calls),
        "FAILING": failing,
        "HOME": str(tmp_path),
    }
    bash = shutil.which("bash")
    assert bash is not None
    result = subprocess.run([bash, str(checkout / ".ci" / "run")], env=env, capture_output=True)
    return result.returncode, [line.split()[0] for line in calls.read_text().splitlines()]


@pytest.mark.parametrize(
    ("failing", "steps_run"),
    [
        # The suite, the checks, then the suite again at the lowest pytest supported, the docs
        # (their extra, the strict build, their examples), the packages built, checked and the
        # wheel's quick start, the suite with the core install.
        ("", [*SUITE, *LOWEST, *DOCS, *PACKAGES, *CORE]),
        ("mkdocs", [*SUITE, *LOWEST, "pip", "mkdocs"]),
        # The first python: the build.
        ("python", [*SUITE, *LOWEST, *DOCS, "pip", "python"]),
        ("python3", ["python3"]),
        ("pip", ["python3", "pip"]),
        ("pytest", ["python3", "pip", "pytest"]),
        ("mypy", ["python3", "pip", "pytest", "mypy"]),
    ],
)
def test_ci_script_stops_at_the_first_failing_step(
    tmp_path: Path, failing: str, steps_run: list[str]
) -> None:
    code, calls = run_ci(tmp_path, failing)
    assert calls == steps_run
    assert code == (3 if failing else 0)


def test_ci_runs_the_suite_at_the_lowest_pytest_pyproject_allows() -> None:
    [floor] = re.findall(r'"pytest>=([\d.]+)"', (CI_SCRIPT.parent.parent / "pyproject.toml").read_text())
    assert re.findall(r"'pytest==([\d.]+)\.\*'", CI_SCRIPT.read_text()) == [floor]
