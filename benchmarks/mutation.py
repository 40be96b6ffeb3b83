"""Mutation score of the core modules: of many small deliberate bugs, how many the tests catch.

    pip install coverage
    python benchmarks/mutation.py [resume|budget|gates ...] [--jobs 2] [--limit N] [--seed S]

Each mutant is one change to one line of a module (a comparison flipped or loosened, ``and`` and
``or`` swapped, a ``not`` dropped, a condition negated, a number moved by one, ``True`` and
``False`` swapped, ``+`` and ``-`` or ``*`` and ``/`` swapped, a returned value replaced by
``None``), written into a copy of the project. The tests that run that line (coverage's per-test
contexts, from one run of the module's test files) then run against the copy; a failing test
kills the mutant. A line no test of those files reaches in-process (subprocess runs are not
traced) is tried against all of them. The score is the share of mutants killed; the survivors
are listed, each with its line, so a gap can be closed by a test.

Not in CI: it runs tests hundreds of times (about half an hour for the three modules on 2 cores).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The modules each figure covers, and the test files that exercise them.
MODULES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "resume": (
        ("pytest_opik_eval/collect/resume.py",),
        ("tests/test_resume.py", "tests/test_rescore.py", "tests/test_distributed.py", "tests/test_store.py"),
    ),
    "budget": (
        ("pytest_opik_eval/run/budget.py",),
        ("tests/test_budget.py", "tests/test_bad_usage.py", "tests/test_recording.py"),
    ),
    "gates": (
        ("pytest_opik_eval/verdict/score_gates.py", "pytest_opik_eval/verdict/gates.py"),
        (
            "tests/test_gates.py",
            "tests/test_gate_statistics.py",
            "tests/test_cost_gates.py",
            "tests/test_gate_edges.py",
        ),
    ),
}
TARGET = 0.90
# Inner runs: no plugin but ours and those the tests load themselves, in a fixed order.
PYTEST = ["-x", "-q", "-p", "no:randomly", "-p", "no:cacheprovider", "-W", "error"]


@dataclass(frozen=True)
class Mutant:
    path: str
    line: int
    index: int  # the candidate's position in the module's walk: which node to change
    change: str

    def label(self) -> str:
        return f"{self.path}:{self.line}: {self.change}"


_SWAPS: dict[type[ast.AST], type[ast.AST]] = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.And: ast.Or,
    ast.Or: ast.And,
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Div,
    ast.Div: ast.Mult,
}


def _skipped(tree: ast.Module) -> set[int]:
    """Nodes no mutant touches: annotations (they do not run) and docstrings."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        annotations: list[ast.AST | None] = []
        if isinstance(node, ast.AnnAssign):
            annotations.append(node.annotation)
        elif isinstance(node, ast.arg):
            annotations.append(node.annotation)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            annotations.append(node.returns)
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            annotations.append(body[0])
        for annotation in annotations:
            if annotation is not None:
                skipped.update(id(inner) for inner in ast.walk(annotation))
    return skipped


def _changes(node: ast.AST) -> Iterator[str]:
    """The mutations of one node, by name (``_apply`` carries each out)."""
    if isinstance(node, ast.Compare):
        for position, op in enumerate(node.ops):
            if type(op) in _SWAPS:
                yield f"compare {position}: {type(op).__name__} -> {_SWAPS[type(op)].__name__}"
    elif isinstance(node, ast.BoolOp | ast.BinOp) and type(node.op) in _SWAPS:
        yield f"{type(node.op).__name__} -> {_SWAPS[type(node.op)].__name__}"
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        yield "not dropped"
    elif isinstance(node, ast.If | ast.While | ast.IfExp):
        yield "condition negated"
    elif isinstance(node, ast.Constant):
        yield from _constant_changes(node.value)
    elif isinstance(node, ast.Return) and not _returns_none(node):
        yield "returns None"


def _constant_changes(value: object) -> Iterator[str]:
    if isinstance(value, bool):
        yield f"{value} -> {not value}"
    elif isinstance(value, int | float):
        yield f"{value!r} -> {value + 1!r}"


def _returns_none(node: ast.Return) -> bool:
    return node.value is None or (isinstance(node.value, ast.Constant) and node.value.value is None)


def _candidates(source: str) -> list[tuple[ast.AST, str]]:
    tree = ast.parse(source)
    skipped = _skipped(tree)
    return [(node, change) for node in ast.walk(tree) if id(node) not in skipped for change in _changes(node)]


def mutants(path: str) -> list[Mutant]:
    source = (ROOT / path).read_text()
    return [
        Mutant(path, getattr(node, "lineno", 0), index, change)
        for index, (node, change) in enumerate(_candidates(source))
    ]


def _apply(source: str, mutant: Mutant) -> str:
    """The module's source with the mutant's one change (the same walk finds the same node)."""
    tree = ast.parse(source)
    skipped = _skipped(tree)
    found = [(n, c) for n in ast.walk(tree) if id(n) not in skipped for c in _changes(n)]
    node, change = found[mutant.index]
    if change != mutant.change:
        raise RuntimeError(f"{mutant.label()}: the walk found {change!r}")
    if isinstance(node, ast.Compare):
        position = int(change.split(":")[0].split()[1])
        node.ops[position] = _SWAPS[type(node.ops[position])]()  # type: ignore[call-overload]
    elif isinstance(node, ast.BoolOp | ast.BinOp):
        node.op = _SWAPS[type(node.op)]()  # type: ignore[assignment]
    elif isinstance(node, ast.UnaryOp):
        _replace(tree, node, node.operand)
    elif isinstance(node, ast.If | ast.While | ast.IfExp):
        node.test = ast.UnaryOp(op=ast.Not(), operand=node.test)
    elif isinstance(node, ast.Constant):
        value = node.value
        node.value = (
            (not value) if isinstance(value, bool) else value + 1 if isinstance(value, int | float) else value
        )
    elif isinstance(node, ast.Return):
        node.value = ast.Constant(value=None)
    return ast.unparse(ast.fix_missing_locations(tree))


def _replace(tree: ast.AST, old: ast.AST, new: ast.AST) -> None:
    for parent in ast.walk(tree):
        for name, value in ast.iter_fields(parent):
            if value is old:
                setattr(parent, name, new)
            elif isinstance(value, list):
                parent_list: list[ast.AST] = value
                for position, item in enumerate(parent_list):
                    if item is old:
                        parent_list[position] = new


# --- which tests reach which line ---------------------------------------------------------


def coverage_map(
    paths: Sequence[str], tests: Sequence[str], workdir: Path
) -> dict[tuple[str, int], set[str]]:
    """For each (module, line), the test functions that ran it, as pytest selections."""
    data_file = workdir / ".coverage"
    rcfile = workdir / "coveragerc"
    rcfile.write_text("[run]\ndynamic_context = test_function\n")
    include = ",".join(str(ROOT / p) for p in paths)
    subprocess.run(
        [sys.executable, "-m", "coverage", "run", f"--rcfile={rcfile}", f"--data-file={data_file}",
         f"--include={include}", "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:xdist", *tests],
        cwd=ROOT, check=False, capture_output=True,
    )  # fmt: skip
    import coverage

    data = coverage.CoverageData(basename=str(data_file))
    data.read()
    reached: dict[tuple[str, int], set[str]] = {}
    for path in paths:
        contexts = data.contexts_by_lineno(str(ROOT / path))
        for line, names in contexts.items():
            selections = {_selection(name) for name in names if name}
            reached[(path, line)] = {s for s in selections if s}
    return reached


def _selection(context: str) -> str:
    """coverage's 'tests.test_x.test_name' (or '...Class.test_name') as a pytest selection."""
    parts = context.split(".")
    for split in range(len(parts), 0, -1):
        module = Path(*parts[:split]).with_suffix(".py")
        if (ROOT / module).is_file():
            return "::".join([str(module), *parts[split:]])
    return ""


# --- running the mutants --------------------------------------------------------------------


def _copy(workdir: Path) -> Path:
    copy = Path(tempfile.mkdtemp(dir=workdir)) / "project"
    # Everything the tests read (the README's examples, the example project), not what they make.
    ignored = shutil.ignore_patterns(".git", ".venv*", "__pycache__", ".opik-eval", ".*_cache", "site")
    shutil.copytree(ROOT, copy, ignore=ignored)
    return copy


def killed(mutant: Mutant, selections: Sequence[str], copy: Path) -> bool:
    """Whether a test among ``selections``, run on ``copy`` with the mutant in, fails."""
    target = copy / mutant.path
    original = (ROOT / mutant.path).read_text()
    target.write_text(_apply(original, mutant))
    try:
        # The copy first on sys.path, before the editable install: the plugin's entry point
        # imports the mutated package (inner subprocess runs inherit PYTHONPATH too).
        env = {**os.environ, "PYTHONPATH": str(copy), "PYTHONDONTWRITEBYTECODE": "1"}
        try:
            result = subprocess.run(
                [sys.executable, "-m", "pytest", *PYTEST, *selections],
                cwd=copy, env=env, capture_output=True, timeout=900, check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            return True  # a mutant that hangs the tests is caught (by CI's timeout)
        return result.returncode != 0
    finally:
        target.write_text(original)


def score(name: str, jobs: int, limit: int | None, seed: int) -> dict[str, object]:
    paths, tests = MODULES[name]
    workdir = Path(tempfile.mkdtemp(prefix=f"mutation-{name}-"))
    reached = coverage_map(paths, tests, workdir)
    every = [m for path in paths for m in mutants(path)]
    if limit is not None and limit < len(every):
        every = sorted(random.Random(seed).sample(every, limit), key=lambda m: (m.path, m.index))
    copies = [_copy(workdir) for _ in range(jobs)]

    def run(position: int) -> tuple[Mutant, bool]:
        mutant = every[position]
        selections = sorted(reached.get((mutant.path, mutant.line), ())) or list(tests)
        return mutant, killed(mutant, selections, copies[position % jobs])

    # Mutant i runs on copy i % jobs, so two jobs never share a copy (a pool of exactly jobs
    # threads takes positions in order, one per copy at a time, as long as each waits for the one
    # before it on its copy: run positions in rounds).
    results: list[tuple[Mutant, bool]] = []
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for start in range(0, len(every), jobs):
            results += pool.map(run, range(start, min(start + jobs, len(every))))
    shutil.rmtree(workdir, ignore_errors=True)
    survivors = [m.label() for m, dead in results if not dead]
    return {
        "module": name,
        "mutants": len(results),
        "killed": len(results) - len(survivors),
        "score": (len(results) - len(survivors)) / len(results) if results else 1.0,
        "survivors": survivors,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("modules", nargs="*", help=f"Any of {', '.join(MODULES)} (default: all)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--limit", type=int, default=None, help="Score a random sample of this many mutants")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, help="Write the results to this file as well")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.modules) - set(MODULES))
    if unknown:
        parser.error(f"unknown module(s) {', '.join(unknown)}: choose from {', '.join(MODULES)}")
    results = [score(name, args.jobs, args.limit, args.seed) for name in args.modules or list(MODULES)]
    for result in results:
        print(f"{result['module']}: {result['killed']}/{result['mutants']} killed, {result['score']:.0%}")
        for survivor in result["survivors"]:  # type: ignore[attr-defined]
            print(f"  survived: {survivor}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    below = [r["module"] for r in results if float(r["score"]) < TARGET]  # type: ignore[arg-type]
    print(f"target {TARGET:.0%}: " + ("met" if not below else f"missed by {', '.join(map(str, below))}"))
    return 0 if not below else 1


if __name__ == "__main__":
    raise SystemExit(main())
