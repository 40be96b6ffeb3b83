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

A mutant's tests run fastest first (each test's time comes from the coverage run's JUnit XML) and
stop at the first failure, so a killed mutant usually costs one quick test; a mutant that runs
far longer than its tests did (a loop that no longer ends) is stopped and counted killed. Each
mutant's outcome is printed on stderr as it comes. With ``--limit`` the figure is a random
sample's, printed with its exact (Clopper-Pearson) 95% interval.

Not in CI: it runs tests hundreds of times (an hour or more for the three modules on 2 cores).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import queue
import random
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from pytest_opik_eval.verdict.distributions import beta_quantile

ROOT = Path(__file__).resolve().parent.parent

# The modules each figure covers, and the test files that exercise them.
MODULES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "resume": (
        ("pytest_opik_eval/collect/resume.py",),
        (
            "tests/test_resume.py",
            "tests/test_rescore.py",
            "tests/test_distributed.py",
            "tests/test_store.py",
            # Experiments that opik.evaluate() started, resumed by pytest.
            "tests/test_opik_backend.py",
        ),
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
# Inner runs: no plugin but ours and those the tests load themselves, in the order given (pytest
# runs node ids in command-line order), stopping at the first failure.
PYTEST = ["-x", "-q", "-p", "no:randomly", "-p", "no:cacheprovider", "-p", "no:xdist", "-W", "error"]
PYTEST += ["-p", "no:cov", "-p", "no:rerunfailures", "-p", "no:pytest-retry"]
# A mutant's run may take this many times its tests' traced time (plus a start-up allowance)
# before it counts as hung: traced runs are slower than plain ones, so this is generous.
TIMEOUT_FACTOR, TIMEOUT_FLOOR = 4.0, 60.0


@dataclass(frozen=True)
class Mutant:
    path: str
    line: int
    index: int  # the candidate's position in the module's walk: which node to change
    change: str

    def label(self) -> str:
        return f"{self.path}:{self.line}: {self.change}"

    def short(self) -> str:
        return f"{Path(self.path).name}:{self.line} {self.change}"


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


_SYMBOLS: dict[type[ast.AST], str] = {
    ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=",
    ast.In: "in", ast.NotIn: "not in", ast.Is: "is", ast.IsNot: "is not", ast.And: "and",
    ast.Or: "or", ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/",
}  # fmt: skip


def _swap(op: ast.AST) -> str:
    return f"'{_SYMBOLS[type(op)]}' -> '{_SYMBOLS[_SWAPS[type(op)]]}'"


def _skipped(tree: ast.Module, source: str) -> set[int]:
    """Nodes no mutant touches: annotations and docstrings, and the blocks under ``if
    TYPE_CHECKING:``, which do not run; file modes (octal constants such as 0o644), which no test
    of ours can tell apart from their mutants (0o645)."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            skipped.update(id(inner) for inner in ast.walk(node))
        elif isinstance(node, ast.Constant) and (ast.get_source_segment(source, node) or "").startswith("0o"):
            skipped.add(id(node))
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
                yield f"compare {position}: {_swap(op)}"
    elif isinstance(node, ast.BoolOp | ast.BinOp) and type(node.op) in _SWAPS:
        yield _swap(node.op)
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
    skipped = _skipped(tree, source)
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
    skipped = _skipped(tree, source)
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


@dataclass(frozen=True)
class Reach:
    """Which tests run which line of the modules, and how long each test took (traced)."""

    lines: Mapping[tuple[str, int], frozenset[str]]
    seconds: Mapping[str, float]

    def ordered(self, selections: Sequence[str]) -> list[str]:
        """Fastest first: a killed mutant then usually costs one quick test."""
        return sorted(selections, key=lambda s: (self.seconds.get(s, float("inf")), s))

    def timeout(self, selections: Sequence[str]) -> float:
        return TIMEOUT_FLOOR + TIMEOUT_FACTOR * sum(self.seconds.get(s, TIMEOUT_FLOOR) for s in selections)


def coverage_map(paths: Sequence[str], tests: Sequence[str], workdir: Path) -> Reach:
    """For each (module, line), the test functions that ran it, as pytest selections."""
    data_file = workdir / ".coverage"
    rcfile = workdir / "coveragerc"
    junit = workdir / "junit.xml"
    rcfile.write_text("[run]\n")
    include = ",".join(str(ROOT / p) for p in paths)
    # Each line under the outer test that ran it (coverage_context.py says why not coverage's own
    # test_function contexts).
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "benchmarks"), os.environ.get("PYTHONPATH", "")]),
    }
    run = subprocess.run(
        [sys.executable, "-m", "coverage", "run", f"--rcfile={rcfile}", f"--data-file={data_file}",
         f"--include={include}", "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:xdist",
         "-p", "coverage_context", f"--junitxml={junit}", *tests],
        cwd=ROOT, env=env, check=False, capture_output=True, text=True,
    )  # fmt: skip
    if run.returncode != 0:
        # Every mutant would look killed: the unmutated tests must pass first.
        tail = "\n".join(run.stdout.splitlines()[-15:])
        raise SystemExit(f"the tests fail without any mutant ({' '.join(tests)}):\n{tail}")
    import coverage

    data = coverage.CoverageData(basename=str(data_file))
    data.read()
    reached: dict[tuple[str, int], frozenset[str]] = {}
    for path in paths:
        contexts = data.contexts_by_lineno(str(ROOT / path))
        for line, names in contexts.items():
            # A node id, its parameters dropped: a selection runs every case of the function.
            reached[(path, line)] = frozenset(name.split("[")[0] for name in names if name)
    if not any(reached.values()):
        raise SystemExit(f"no test context of {data_file} names a test function of {', '.join(tests)}")
    return Reach(reached, _durations(junit))


def _durations(junit: Path) -> dict[str, float]:
    """Each test function's time, its parametrized cases summed (a selection runs them all)."""
    seconds: dict[str, float] = {}
    for case in ElementTree.parse(junit).iter("testcase"):
        function = case.get("name", "").split("[")[0]
        selection = _selection(f"{case.get('classname', '')}.{function}")
        if selection:
            seconds[selection] = seconds.get(selection, 0.0) + float(case.get("time", "0") or 0)
    return seconds


def _selection(context: str) -> str:
    """JUnit's 'tests.test_x.test_name' (or '...Class.test_name') as a pytest selection, or ''
    for no test file."""
    parts = context.split(".")
    for base in (Path(), Path("tests")):
        for split in range(len(parts), 0, -1):
            module = base / Path(*parts[:split]).with_suffix(".py")
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


def outcome(mutant: Mutant, selections: Sequence[str], copy: Path, timeout: float) -> str:
    """'killed' when a test among ``selections`` (run in order on ``copy`` with the mutant in)
    fails, 'hung' when they run past ``timeout`` seconds, else 'survived'."""
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
                cwd=copy, env=env, capture_output=True, timeout=timeout, check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            return "hung"  # a mutant that hangs the tests is caught (by CI's timeout)
        return "killed" if result.returncode != 0 else "survived"
    finally:
        target.write_text(original)


def interval(killed: int, total: int) -> tuple[float, float]:
    """The exact (Clopper-Pearson) 95% interval of a score measured on a random sample."""
    low = beta_quantile(0.025, killed, total - killed + 1) if killed else 0.0
    high = beta_quantile(0.975, killed + 1, total - killed) if killed < total else 1.0
    return low, high


@dataclass(frozen=True)
class Score:
    module: str
    mutants: int  # scored: all of the module's, or a sample of them
    of: int  # the module's mutants
    killed: int
    survivors: list[str]

    @property
    def score(self) -> float:
        return self.killed / self.mutants if self.mutants else 1.0

    def line(self) -> str:
        line = f"{self.module}: {self.killed}/{self.mutants} killed, {self.score:.0%}"
        if self.mutants < self.of:
            low, high = interval(self.killed, self.mutants)
            line += f" (a sample of {self.mutants} of {self.of}; 95% interval {low:.0%}-{high:.0%})"
        return line


def score(name: str, jobs: int, limit: int | None, seed: int) -> Score:
    paths, tests = MODULES[name]
    workdir = Path(tempfile.mkdtemp(prefix=f"mutation-{name}-"))
    print(f"{name}: tracing {' '.join(tests)} ...", file=sys.stderr, flush=True)
    reach = coverage_map(paths, tests, workdir)
    every = [m for path in paths for m in mutants(path)]
    total = len(every)
    if limit is not None and limit < len(every):
        every = sorted(random.Random(seed).sample(every, limit), key=lambda m: (m.path, m.index))
    # One copy of the project per job: a job takes a free copy, so two never share one.
    copies: queue.Queue[Path] = queue.Queue()
    for _ in range(jobs):
        copies.put(_copy(workdir))

    def run(position: int) -> tuple[Mutant, str]:
        mutant = every[position]
        # A line no test reaches in-process (run on import, or in a subprocess): every test.
        reaching = reach.lines.get((mutant.path, mutant.line)) or reach.seconds.keys() or tests
        selections = reach.ordered(sorted(reaching))
        copy = copies.get()
        started = time.monotonic()
        try:
            result = outcome(mutant, selections, copy, reach.timeout(selections))
        finally:
            copies.put(copy)
        seconds = time.monotonic() - started
        line = f"[{position + 1}/{len(every)}] {mutant.short()} {result} ({seconds:.1f} s)"
        print(line, file=sys.stderr, flush=True)
        return mutant, result

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        results = list(pool.map(run, range(len(every))))
    shutil.rmtree(workdir, ignore_errors=True)
    survivors = [m.label() for m, result in results if result == "survived"]
    return Score(name, len(results), total, len(results) - len(survivors), survivors)


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
        print(result.line())
        for survivor in result.survivors:
            print(f"  survived: {survivor}")
    if args.json:
        rows = [{**asdict(r), "score": r.score, "interval": interval(r.killed, r.mutants)} for r in results]
        args.json.write_text(json.dumps(rows, indent=2))
    below = [r.module for r in results if r.score < TARGET]
    print(f"target {TARGET:.0%}: " + ("met" if not below else f"missed by {', '.join(map(str, below))}"))
    return 0 if not below else 1


if __name__ == "__main__":
    raise SystemExit(main())
