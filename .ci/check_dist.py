"""Check what the built sdist and wheel hold: python .ci/check_dist.py DIST_FOLDER.

The wheel must carry what the plugin reads at run time besides its code (the HTML report's CSS
and JS, py.typed for type checkers), the LICENSE, and a version that is the package's constant;
nothing from the tests, the benchmarks or a virtual environment. The sdist must carry what a
rebuild or a packager needs: the LICENSE, the JSON report's schema, the changelog, the tests.
Prints what it checked; exits 1 naming each problem."""

from __future__ import annotations

import ast
import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

PACKAGE = "pytest_opik_eval"
IN_THE_WHEEL = [
    f"{PACKAGE}/py.typed",
    f"{PACKAGE}/reports/assets/report.css",
    f"{PACKAGE}/reports/assets/report.js",
    f"{PACKAGE}/plugin.py",
]
IN_THE_SDIST = [
    "LICENSE",
    "CHANGELOG.md",
    "README.md",
    "pyproject.toml",
    "schema/eval-report.schema.json",
    f"{PACKAGE}/py.typed",
    f"{PACKAGE}/reports/assets/report.css",
    f"{PACKAGE}/reports/assets/report.js",
    "tests/conftest.py",
]
NEVER = ("tests/", "benchmarks/", ".venv", "__pycache__/", ".opik-eval/", ".pyc")


def main(dist: Path) -> int:
    (wheel,) = dist.glob("*.whl")
    (sdist,) = dist.glob("*.tar.gz")
    version = _version()
    problems = _check_wheel(wheel, version) + _check_sdist(sdist, version)
    for problem in problems:
        print(f"check_dist: {problem}", file=sys.stderr)
    if not problems:
        print(f"check_dist: {wheel.name} and {sdist.name} hold what they should (version {version})")
    return 1 if problems else 0


def _version() -> str:
    """The constant the build reads (pyproject.toml: tool.setuptools.dynamic)."""
    tree = ast.parse(Path(PACKAGE, "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "__version__" for target in node.targets
        ):
            return str(ast.literal_eval(node.value))
    raise SystemExit(f"check_dist: no __version__ in {PACKAGE}/__init__.py")


def _check_wheel(wheel: Path, version: str) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        info = f"{PACKAGE}-{version}.dist-info"
        metadata = Parser().parsestr(archive.read(f"{info}/METADATA").decode())
    problems = [f"{wheel.name} lacks {name}" for name in IN_THE_WHEEL if name not in names]
    if f"{info}/licenses/LICENSE" not in names:
        problems.append(f"{wheel.name} lacks {info}/licenses/LICENSE")
    problems += [
        f"{wheel.name} holds {name}, which is not the package's"
        for name in names
        if any(part in name for part in NEVER) or not name.startswith((f"{PACKAGE}/", info))
    ]
    if metadata["Version"] != version:
        problems.append(f"{wheel.name}'s metadata says version {metadata['Version']}, the package {version}")
    if metadata["License-Expression"] != "Apache-2.0":
        problems.append(f"{wheel.name}'s License-Expression is {metadata['License-Expression']!r}")
    return problems


def _check_sdist(sdist: Path, version: str) -> list[str]:
    root = f"pytest_opik_eval-{version}/"
    with tarfile.open(sdist) as archive:
        names = {name.removeprefix(root) for name in archive.getnames()}
    problems = [f"{sdist.name} lacks {name}" for name in IN_THE_SDIST if name not in names]
    problems += [
        f"{sdist.name} holds {name}"
        for name in sorted(names)
        if any(part in name for part in (".venv", "__pycache__/", ".opik-eval/", ".pyc"))
    ]
    return problems


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
