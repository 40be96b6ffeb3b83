"""Run the README's quick start with the installed wheel: python .ci/quick_start.py EXAMPLE_FOLDER.

Run by the Python of an environment that holds the wheel alone (.ci/run's .venv-wheel). It
copies the example project out of the checkout, so nothing of the source tree can be imported,
runs `pytest --eval` there as the README does, and checks that it ends as the README says: 10
failed test cases on purpose (exit 1). Also that the plugin ran from the environment, and that
`opik-eval --version` is the wheel's version. Exits 1 naming what differs."""

from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

EXPECTED = "= 10 failed, "  # the README: "The run ends with 10 failed test cases on purpose"


def main(example: Path) -> int:
    bin_folder = Path(sys.executable).parent
    version = importlib.metadata.version("pytest-opik-eval")
    with tempfile.TemporaryDirectory() as folder:
        copy = Path(folder) / "example_project"
        shutil.copytree(example, copy, ignore=shutil.ignore_patterns(".opik-eval", "__pycache__"))
        run = subprocess.run([bin_folder / "pytest", "--eval"], cwd=copy, capture_output=True, text=True)
        where = subprocess.run(
            [sys.executable, "-c", "import pytest_opik_eval; print(pytest_opik_eval.__file__)"],
            cwd=copy,
            capture_output=True,
            text=True,
        )
    said = subprocess.run([bin_folder / "opik-eval", "--version"], capture_output=True, text=True)
    lines = run.stdout.splitlines()
    problems = []
    if run.returncode != 1 or not lines or EXPECTED not in lines[-1]:
        print(run.stdout + run.stderr)
        problems.append(f"pytest --eval exited {run.returncode}, not 1 with{EXPECTED}...")
    if not where.stdout.startswith(sys.prefix):
        problems.append(f"the plugin came from {where.stdout.strip() or where.stderr}, not {sys.prefix}")
    if said.stdout != f"opik-eval {version}\n":
        problems.append(f"opik-eval --version said {said.stdout!r}, the wheel's version is {version}")
    for problem in problems:
        print(f"quick_start: {problem}", file=sys.stderr)
    if not problems:
        print(f"quick_start: the README's quick start from the wheel ({version}): {lines[-1].strip('= ')}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
