"""The private API of other projects the plugin touches sits in one module per project, where
each use has a small typed function or class: pytest's in ``_compat.py`` (CI runs the suite at the
lowest pytest supported as well as the latest), pytest-xdist's in ``_compat_xdist.py``, the Opik
SDK's in ``_compat_opik.py``. A contract test per project fails, naming the attribute, when the
installed version no longer has one."""

from __future__ import annotations

import ast
import inspect
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace

import pytest

PACKAGE = Path(__file__).parent.parent / "pytest_opik_eval"
COMPAT = PACKAGE / "_compat.py"


def private_uses(path: Path) -> list[str]:
    """``_pytest`` imports, and reads of another object's private attributes (``item._x``; an
    object's own, ``self._x``, ``cls._x`` or ``super()._x``, are its business), each as
    ``line: code``."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [
                (node.lineno, f"import {a.name}") for a in node.names if a.name.split(".")[0] == "_pytest"
            ]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "_pytest":
            found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")) and not _is_super(
                node.value
            ):
                found.append((node.lineno, ast.unparse(node)))
    return [f"{line}: {code}" for line, code in sorted(found)]


def _is_super(node: ast.expr) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"


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


# -- pytest-xdist and the Opik SDK: their private API, fenced as pytest's ----------------------
# Each use is written as ``root.attribute...`` (an attribute, or a key of a mapping on the way),
# ending in ``(name, ...)`` for a callable's parameters that the fence passes by name.

XDIST_FENCE = PACKAGE / "_compat_xdist.py"
OPIK_FENCE = PACKAGE / "_compat_opik.py"

# What WorkerQueue (_compat_xdist.py) reads of a worker's WorkerInteractor, an instance.
XDIST_USES = (
    "WorkerInteractor.torun.lock",
    "WorkerInteractor.nextitem_index",
    "WorkerInteractor.steal(indices)",
)

# What _compat_opik.py reads of the Opik SDK, and what its client stand-in stands in for: the
# client methods ``@track`` and the integrations call (they call the SDK's own client's).
OPIK_USES = (
    "opik.set_global_client(client, context_wise)",
    "opik_client.get_current_client_raw",
    "opik_client.Opik.__internal_api__span__",
    "opik_client.Opik.__internal_api__trace__",
    "opik_client.Opik.flush(timeout)",
    "config.OpikConfig.model_fields.log_start_trace_span",
    "context_storage.top_span_data",
    "context_storage.get_trace_data",
    "context_storage.add_span_data",
    "context_storage.pop_span_data(ensure_id)",
    "context_storage.temporary_context",
    "span.SpanData(trace_id, id, parent_span_id, name, type)",
    "trace.TraceData(id, start_time, name, input, created_by)",
    "validation_helpers.validate_and_parse_usage(usage, logger, provider)",
    "simulation.SimulatedUser(persona, model)",
    "models.SpanModel(id, start_time, source, name, input, output, tags, metadata, type, usage, end_time, model, provider, total_cost, spans)",
    "simulated_user.SimulatedUser._generate_llm_response",
)


def gaps(roots: Mapping[str, object], uses: Sequence[str]) -> list[str]:
    """The uses (see above) that ``roots`` (by each use's first name) no longer has."""
    missing: list[str] = []
    for use in uses:
        path, _, params = use.partition("(")
        first, *names = path.split(".")
        found: object = roots[first]
        for name in names:
            if isinstance(found, Mapping) and name in found:
                found = found[name]
            elif hasattr(found, name):
                found = getattr(found, name)
            else:
                missing.append(path)
                break
        else:
            wanted = [p.strip() for p in params.rstrip(")").split(",") if p.strip()]
            if wanted:
                signature = inspect.signature(found)  # type: ignore[arg-type]
                missing += [f"{path}({p})" for p in wanted if p not in signature.parameters]
    return missing


def assert_has(project: str, fence: Path, roots: Mapping[str, object], uses: Sequence[str]) -> None:
    missing = gaps(roots, uses)
    assert not missing, (
        f"the installed {project} no longer has {', '.join(missing)}, which "
        f"pytest_opik_eval/{fence.name} uses: adapt {fence.name} to this version"
    )


@pytest.fixture
def worker_interactor(pytester: pytest.Pytester) -> object:
    """pytest-xdist's own WorkerInteractor, as a worker makes it (a stand-in channel)."""
    import execnet
    from xdist.remote import WorkerInteractor  # type: ignore[import-untyped]

    config = pytester.parseconfig()
    config.workerinput = {"workerid": "gw0", "testrunuid": "contract"}  # type: ignore[attr-defined]
    channel = SimpleNamespace(gateway=SimpleNamespace(execmodel=execnet.gateway_base.get_execmodel("thread")))
    interactor: object = WorkerInteractor(config, channel)
    return interactor


def test_pytest_xdist_still_has_what_compat_xdist_uses(worker_interactor: object) -> None:
    assert_has("pytest-xdist", XDIST_FENCE, {"WorkerInteractor": worker_interactor}, XDIST_USES)
    # WorkerQueue wraps steal on the instance: xdist must call it through the instance.
    source = inspect.getsource(type(worker_interactor))
    assert "self.steal(" in source, "WorkerInteractor no longer calls self.steal(indices)"


@pytest.fixture
def opik_modules() -> dict[str, object]:
    """The Opik SDK's modules that _compat_opik.py reaches, by the first name of its uses."""
    import opik
    from opik import config, context_storage, simulation
    from opik.api_objects import opik_client, span, trace, validation_helpers
    from opik.message_processing.emulation import models
    from opik.simulation import simulated_user

    found = (
        opik,
        opik_client,
        config,
        context_storage,
        span,
        trace,
        validation_helpers,
        simulation,
        simulated_user,
        models,
    )
    return {module.__name__.rpartition(".")[2]: module for module in found}


def test_the_opik_sdk_still_has_what_compat_opik_uses(opik_modules: dict[str, object]) -> None:
    assert_has("Opik SDK", OPIK_FENCE, opik_modules, OPIK_USES)


def test_the_contracts_name_what_a_release_took_away(opik_modules: dict[str, object]) -> None:
    # The two tests above, against stand-ins of releases that lack one attribute or parameter:
    # each fails, naming it.
    class WorkerInteractor:
        torun = SimpleNamespace(lock=lambda: None)

        def steal(self, indices: list[int]) -> None: ...

    with pytest.raises(AssertionError) as failure:
        test_pytest_xdist_still_has_what_compat_xdist_uses(WorkerInteractor())
    assert "pytest-xdist no longer has WorkerInteractor.nextitem_index, which" in str(failure.value)
    assert "_compat_xdist.py" in str(failure.value)

    storage = SimpleNamespace(**vars(opik_modules["context_storage"]))
    del storage.pop_span_data
    opik = SimpleNamespace(set_global_client=lambda client: None)
    with pytest.raises(AssertionError) as failure:
        test_the_opik_sdk_still_has_what_compat_opik_uses(
            {**opik_modules, "context_storage": storage, "opik": opik}
        )
    assert (
        "Opik SDK no longer has opik.set_global_client(context_wise), context_storage.pop_span_data, which"
        in str(failure.value)
    )
    assert "_compat_opik.py" in str(failure.value)


def names_used(path: Path) -> list[str]:
    """Where a module imports the Opik SDK, names an ``__internal_api__`` attribute, or reads
    pytest-xdist's worker state, each as ``line: code``."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, f"import {a.name}") for a in node.names if a.name.split(".")[0] == "opik"]
        elif (
            isinstance(node, ast.ImportFrom)
            and (node.module or "").split(".")[0] == "opik"
            and not node.level
        ):
            found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, (ast.Attribute, ast.FunctionDef)):
            name = node.attr if isinstance(node, ast.Attribute) else node.name
            if name.startswith("__internal_api__") or name in ("torun", "nextitem_index"):
                found.append((node.lineno, name))
        elif isinstance(node, ast.Constant) and node.value == "WorkerInteractor":
            found.append((node.lineno, repr(node.value)))
    return [f"{line}: {code}" for line, code in sorted(found)]


def test_private_xdist_and_opik_api_is_used_in_their_fences_only(tmp_path: Path) -> None:
    offenders = {
        str(path.relative_to(PACKAGE)): uses
        for path in sorted(PACKAGE.rglob("*.py"))
        if path not in (XDIST_FENCE, OPIK_FENCE) and (uses := names_used(path))
    }
    assert offenders == {}
    # The checker itself: each kind of use planted in a module is found.
    module = tmp_path / "module.py"
    module.write_text(
        "from opik import context_storage\n"
        "import opik.api_objects\n"
        "def f(client, worker):\n"
        "    client.__internal_api__span__()\n"
        "    return worker.torun, 'WorkerInteractor'\n"
    )
    assert names_used(module) == [
        "1: from opik import context_storage",
        "2: import opik.api_objects",
        "4: __internal_api__span__",
        "5: 'WorkerInteractor'",
        "5: torun",
    ]
    assert names_used(XDIST_FENCE) != []  # where they belong
    assert names_used(OPIK_FENCE) != []  # where they belong


def test_the_opik_sdks_simulated_user_still_answers_its_failures_as_compat_opik_reads_them() -> None:
    from opik.simulation.simulated_user import SimulatedUser

    from pytest_opik_eval._compat_opik import SIMULATOR_FAILED

    assert SIMULATOR_FAILED in inspect.getsource(SimulatedUser._generate_llm_response), (
        "the Opik SDK's SimulatedUser no longer answers a failed model with "
        f"{SIMULATOR_FAILED!r}: adapt _compat_opik.SIMULATOR_FAILED"
    )
