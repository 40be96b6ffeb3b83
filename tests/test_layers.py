"""The shape of the package, as a contract: imports point down the layers, never in a cycle.

Every import counts, those inside functions and under ``TYPE_CHECKING`` too: a cycle that only
type checking walks is still a cycle for the reader.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

PACKAGE = Path(__file__).parent.parent / "pytest_opik_eval"

# The entry module wires; the command line is an entry of its own. Nothing imports either.
ENTRIES = {"pytest_opik_eval.plugin", "pytest_opik_eval.cli"}

# The session's phase plugins: only the entry module registers them (through the package's
# register()), and no phase reaches into another: what they share is in the session's state, made
# of the target the start decides, the run's resources and the store's handle.
SESSION = "pytest_opik_eval.session"
# batches: the batch steps the start (collect) and the end (submit) take, as resources are shared.
SHARED = {f"{SESSION}.{name}" for name in ("state", "target", "resources", "store_handle", "batches")}

# What runs without pytest: the store (opik-eval reads it), the metrics (usable on their own),
# and the verdict (pure functions over records).
NO_PYTEST = ("pytest_opik_eval.store", "pytest_opik_eval.metrics", "pytest_opik_eval.verdict")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> set[str]:
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def graph() -> dict[str, set[str]]:
    modules = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    return {
        name: {i for i in imports_of(path) if i in modules and i != name} for name, path in modules.items()
    }


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other, directly or not."""

    def reachable(start: str) -> set[str]:
        seen: set[str] = set()
        todo = list(edges[start])
        while todo:
            module = todo.pop()
            if module not in seen:
                seen.add(module)
                todo.extend(edges[module])
        return seen

    reach = {module: reachable(module) for module in edges}
    groups = {frozenset(m for m in reach[v] if v in reach[m]) for v in edges if v in reach[v]}
    return sorted(sorted(group) for group in groups)


def test_no_import_cycle() -> None:
    assert cycles(graph()) == []


def test_the_entry_modules_are_imported_by_no_module() -> None:
    # But for an entry's own ``__main__`` (``python -m pytest_opik_eval.cli``), which only calls it.
    runners = {f"{entry}.__main__" for entry in ENTRIES}
    importers = {
        name: sorted(ENTRIES & imported)
        for name, imported in graph().items()
        if ENTRIES & imported and name not in runners
    }
    assert importers == {}


def test_the_session_phases_are_imported_by_the_entry_module_only() -> None:
    edges = graph()
    importers = {
        name: sorted(i for i in imported if i == SESSION or i.startswith(f"{SESSION}."))
        for name, imported in edges.items()
        if name != "pytest_opik_eval.plugin" and not name.startswith(f"{SESSION}.") and name != SESSION
    }
    assert {name: found for name, found in importers.items() if found} == {}
    assert SESSION in edges["pytest_opik_eval.plugin"]


def test_no_phase_imports_another() -> None:
    edges = graph()
    phases = {name for name in edges if name.startswith(f"{SESSION}.") and name not in SHARED}
    reaching = {name: sorted(edges[name] & (phases | {SESSION})) for name in phases | SHARED}
    assert {name: found for name, found in reaching.items() if found} == {}
    assert len(phases) >= 4  # the contract sees the phases


# How text reaches a terminal: print(), sys.stdout and sys.stderr, and the methods of pytest's
# terminal reporter and writer that write.
WRITERS = {"line", "section", "write", "write_line", "write_sep", "write_raw", "rewrite", "sep"}


def printing(source: str) -> list[str]:
    """Where ``source`` prints: each call of print() or of a writing method, and each use of
    sys.stdout or sys.stderr, as ``line: what``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
            found.append(f"{node.lineno}: print()")
        elif (
            isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in WRITERS
        ):
            found.append(f"{node.lineno}: .{node.func.attr}()")
        elif (
            isinstance(node, ast.Attribute)
            and node.attr in ("stdout", "stderr")
            and isinstance(node.value, ast.Name)
            and node.value.id == "sys"
        ):
            found.append(f"{node.lineno}: sys.{node.attr}")
    return found


def test_the_session_phases_print_nothing_themselves() -> None:
    # Computing apart from printing: a phase builds the report model and hands it, with the
    # terminal reporter, to reports/ (reports.terminal writes the eval summary); it writes no line.
    session = PACKAGE / "session"
    found = {
        module_name(path): where
        for path in sorted(session.rglob("*.py"))
        if (where := printing(path.read_text(encoding="utf-8")))
    }
    assert found == {}


def test_the_contract_sees_printing() -> None:
    source = "import sys\nprint(1)\nreporter.line('x')\nsys.stdout.flush()\nreport_lines('x')\n"
    assert printing(source) == ["2: print()", "3: .line()", "4: sys.stdout"]


def test_the_store_metrics_and_verdict_import_no_pytest() -> None:
    offenders = {
        name: sorted(i for i in imports_of(path) if i.split(".")[0] in ("pytest", "_pytest"))
        for path in PACKAGE.rglob("*.py")
        if (name := module_name(path)).startswith(NO_PYTEST)
    }
    assert {name: found for name, found in offenders.items() if found} == {}


# The layers, top down: a module imports from its own layer or a lower one, never a higher one.
# Within a layer, modules may import each other as long as no cycle forms. A module not listed
# is a leaf and imports no listed layer.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("plugin", "cli", "tracing"),  # the entries (tracing: the manual and OpenTelemetry public names)
    ("session", "hookspecs", "disabled"),  # the wiring of a pytest session
    # A trial run and reported. Running executes what collection planned: it reads the plan
    # (collect/trials.py: what a trial is), and planning never needs what runs a trial.
    ("run", "reports"),
    ("collect", "settings"),  # a trial planned, from the marker and the options
    ("verdict",),  # pure functions over records
    ("store", "metrics"),  # the pytest-free bottom: records, never plans or sessions
)


def layer_of(module: str) -> int:
    top = module.split(".")[1] if "." in module else ""
    return next((rank for rank, names in enumerate(LAYERS) if top in names), len(LAYERS))


def upward_imports(edges: dict[str, set[str]]) -> dict[str, list[str]]:
    upward = {
        name: sorted(i for i in imported if layer_of(i) < layer_of(name)) for name, imported in edges.items()
    }
    return {name: found for name, found in upward.items() if found}


def test_imports_point_down_the_layers() -> None:
    assert upward_imports(graph()) == {}


def test_every_layer_names_a_part_of_the_package() -> None:
    tops = {name.split(".")[1] for name in graph() if "." in name}
    assert {name for layer in LAYERS for name in layer} - tops == set()


def test_collect_is_below_run() -> None:
    # The order the data flows in: the marker, the selection and the planned trials first, then
    # each trial run. Collection importing run (as planning once built the scorer) is upward.
    assert layer_of("pytest_opik_eval.collect.planning") > layer_of("pytest_opik_eval.run.scoring")
    planted = {"pytest_opik_eval.collect.planning": {"pytest_opik_eval.run.scoring"}}
    assert upward_imports(planted) == {"pytest_opik_eval.collect.planning": ["pytest_opik_eval.run.scoring"]}


def test_run_reads_the_plan_from_collect_trials_never_from_planning() -> None:
    # What a trial is lives in collect/trials.py; how trials are planned is none of run's business.
    reaching = {
        name: sorted(i for i in imported if i.startswith("pytest_opik_eval.collect.planning"))
        for name, imported in graph().items()
        if name.startswith("pytest_opik_eval.run.")
    }
    assert {name: found for name, found in reaching.items() if found} == {}


def test_the_contract_sees_an_upward_import() -> None:
    planted = {
        "pytest_opik_eval.store.local": {"pytest_opik_eval.verdict.gates"},
        "pytest_opik_eval.ids": set(),
    }
    assert upward_imports(planted) == {"pytest_opik_eval.store.local": ["pytest_opik_eval.verdict.gates"]}


def test_the_contract_sees_a_cycle() -> None:
    # The checker itself: a cycle planted in a small graph is found.
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


# The modules that touch another project's private API (see tests/test_compat.py) sit at the
# bottom, beside that project: they import no module of the package, so a fix there is local.
FENCES = ("pytest_opik_eval._compat", "pytest_opik_eval._compat_xdist", "pytest_opik_eval._compat_opik")

# A trial's spans, top down: the manual API and the OpenTelemetry processor hand spans to the
# trial's trace, which keeps Span objects and makes records, whose values are bounded.
SPANS = tuple(
    f"pytest_opik_eval.run.{name}"
    for name in ("manual_spans", "otel", "trial_trace", "span_records", "span", "bounded")
)


def out_of_order(edges: dict[str, set[str]], order: tuple[str, ...]) -> dict[str, list[str]]:
    """The modules of ``order`` that import one listed before them: above them."""
    found = {name: sorted(i for i in edges[name] if i in order[: order.index(name)]) for name in order}
    return {name: imported for name, imported in found.items() if imported}


def test_the_fences_import_no_module_of_the_package() -> None:
    edges = graph()
    assert {name: sorted(edges[name]) for name in FENCES if edges[name]} == {}


def test_the_span_modules_import_down_their_order() -> None:
    assert out_of_order(graph(), SPANS) == {}
    planted = {"a": set[str](), "b": {"a"}, "c": {"b"}}
    assert out_of_order(planted, ("a", "b", "c")) == {"b": ["a"], "c": ["b"]}


def assigned(source: str) -> list[str]:
    """The attributes ``source`` assigns to, as dotted names (``self.state.run.experiments``)."""

    def dotted(node: ast.expr) -> str | None:
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, ast.Attribute):
            base = dotted(node.value)
            return None if base is None else f"{base}.{node.attr}"
        return None

    found = []
    for node in ast.walk(ast.parse(source)):
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, (ast.AugAssign, ast.AnnAssign))
            else []
        )
        found += [name for t in targets if isinstance(t, ast.Attribute) and (name := dotted(t)) is not None]
    return found


def writers(pattern: str) -> dict[str, list[str]]:
    """The modules of the package that assign to an attribute whose dotted name ends with
    ``pattern`` (a regular expression), and what they assign."""
    found = {
        module_name(path): [
            name for name in assigned(path.read_text(encoding="utf-8")) if re.search(pattern, name)
        ]
        for path in sorted(PACKAGE.rglob("*.py"))
    }
    return {name: names for name, names in found.items() if names}


def test_the_session_state_is_assigned_in_its_own_module_only() -> None:
    # Each part of the state has one writer: no phase re-assigns what another set (the run id
    # once came from three places). The target is the start's, decided once through begin().
    assert writers(r"(^|\.)state\.\w+$") == {}


def test_only_running_writes_what_its_trials_made_and_met() -> None:
    # The experiments running created, and the store failures that stopped its trials.
    assert set(writers(r"(^|\.)state\.run\.\w+$")) == {f"{SESSION}.running"}


def added_to(source: str) -> list[str]:
    """The lists ``source`` adds to in place (``x.append()``, ``x.extend()``, ``x.insert()``,
    ``x += ...``), as dotted names."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("append", "extend", "insert"):
                found.append(ast.unparse(node.func.value))
        elif isinstance(node, ast.AugAssign):
            found.append(ast.unparse(node.target))
    return found


def test_only_collection_adds_to_the_plans_and_no_one_to_the_run_experiments() -> None:
    # The plans are collection's, one per eval test; the experiments are running's, assigned
    # once (test_only_running_writes_what_its_trials_made_and_met), never added to elsewhere.
    found = {
        module_name(path): sorted(
            name
            for name in added_to(path.read_text(encoding="utf-8"))
            if re.search(r"(^|\.)state\.(plans_seen|run\.experiments)$", name)
        )
        for path in sorted(PACKAGE.rglob("*.py"))
    }
    assert {name: names for name, names in found.items() if names} == {
        f"{SESSION}.collection": ["self.state.plans_seen"]
    }
    source = "state.run.experiments.append(e)\nself.state.plans_seen += [p]\nx.append(1)\n"
    assert sorted(added_to(source)) == ["self.state.plans_seen", "state.run.experiments", "x"]


def test_the_contract_sees_an_assignment() -> None:
    source = "self.state.run_id = 1\nstate.run.experiments = x = []\nself.plain = 2\n"
    assert assigned(source) == ["self.state.run_id", "state.run.experiments", "self.plain"]


def test_what_the_start_decides_and_a_trial_runs_with_are_frozen() -> None:
    # Set once and passed down: a later phase cannot change the session's run id or its budget,
    # nor a trial the store it records in.
    from pytest_opik_eval.run.trial import TrialContext
    from pytest_opik_eval.session.target import Target

    for kind in (Target, TrialContext):
        assert dataclasses.is_dataclass(kind)
        assert getattr(kind, "__dataclass_params__").frozen, kind  # noqa: B009 (mypy does not know it)


# A module is read whole: one over this many lines holds more than one concern. Where splitting
# one would hurt, its opening docstring says why, with this phrase and the reason.
MOST_LINES = 600
LONG_BECAUSE = "Longer than 600 lines because"


def too_long(source: str) -> bool:
    """Whether ``source`` is over ``MOST_LINES`` lines and its opening docstring does not say why
    (``LONG_BECAUSE``, which may wrap across the docstring's lines)."""
    if len(source.splitlines()) <= MOST_LINES:
        return False
    docstring = ast.get_docstring(ast.parse(source)) or ""
    return LONG_BECAUSE not in " ".join(docstring.split())


def test_no_module_is_over_600_lines_unless_its_docstring_says_why() -> None:
    """Every module of the package is at most 600 lines: a longer one is split along the seams
    its code already has (as verdict/statistics.py into samples, statistics, paired and
    decisions). A module that must stay longer says why in its opening docstring, with the
    phrase "Longer than 600 lines because" followed by the reason; a comment does not count."""
    found = {
        module_name(path): len(source.splitlines())
        for path in sorted(PACKAGE.rglob("*.py"))
        if too_long(source := path.read_text(encoding="utf-8"))
    }
    assert found == {}


def test_the_contract_sees_a_long_module() -> None:
    lines = "x = 1\n" * MOST_LINES
    assert not too_long(lines)
    assert too_long(lines + "y = 2\n")
    wrapped = LONG_BECAUSE.replace(" lines", "\nlines")
    assert not too_long(f'"""One table.\n\n{wrapped} its rows read as one."""\n{lines}')
    assert too_long(f'"""One table."""\n# {LONG_BECAUSE} its rows read as one.\n{lines}')
