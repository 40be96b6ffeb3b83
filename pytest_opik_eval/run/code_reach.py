"""What a function reads when it runs, found in its bytecode: the globals it names (a module's
attributes followed, as in ``prompts.EXTRA``), the modules it imports, the environment variables
it reads by name, and the files it reads, whose content no fingerprint can see; and which modules
are the project's own code rather than a library's (the standard library, site-packages).

What ``run/fingerprint.py`` follows to key a judge by the code it reaches.
"""

from __future__ import annotations

import builtins
import dataclasses
import dis
import importlib.util
import io
import os
import site
import sys
import sysconfig
import types
from pathlib import Path
from typing import Any

# The instructions that read an attribute of what the one before left: a chain of them after a
# global (``pkg.prompts.EXTRA``) names a module's attribute.
_ATTRIBUTE = frozenset({"LOAD_ATTR", "LOAD_METHOD"})
# Reading these at call time reads a file (or a prompt store) whose content the key cannot see:
# ``Path.read_text()``, Jinja's ``Environment.get_template()`` (its loader reads the template's
# file), the Opik prompt library's ``get_prompt()``, a path's or an archive's ``.open()``.
_READING_ATTRIBUTES = frozenset({"read_text", "read_bytes", "get_template", "get_prompt", "open"})
_OPENS = (builtins.open, io.open)
_ENVIRONMENT_GETTERS = (os.getenv, os.environ.get)


@dataclasses.dataclass(frozen=True)
class Named:
    """An object a library module holds (``random.random``'s generator, ``sys.modules``): known
    by its name, its state the library's, not the judge's."""

    name: str


@dataclasses.dataclass
class Reads:
    """What a function reads when it runs (its nested functions and lambdas included)."""

    globals: dict[str, Any] = dataclasses.field(default_factory=dict)  # dotted name -> value (or Named)
    environ: set[str] = dataclasses.field(default_factory=set)  # variables read by a constant name
    files: set[str] = dataclasses.field(default_factory=set)  # calls that read a file: "open()"


def reads_of(function: types.FunctionType, libraries: Libraries) -> Reads:
    """What ``function`` reads when it runs: see :class:`Reads`."""
    found = Reads()
    _read_code(function.__code__, function.__globals__, found, libraries)
    return found


def is_data(value: Any) -> bool:
    if isinstance(value, (str, bytes, int, float, bool)):
        return True
    if isinstance(value, (list, tuple, set, frozenset)):
        return all(is_data(v) for v in value)
    if isinstance(value, dict):
        return all(is_data(k) and is_data(v) for k, v in value.items())
    return False


def _read_code(code: types.CodeType, namespace: dict[str, Any], found: Reads, libraries: Libraries) -> None:
    instructions = list(dis.get_instructions(code))
    chained: set[int] = set()  # the attribute reads that a global's chain took
    for index, instruction in enumerate(instructions):
        if instruction.opname == "LOAD_GLOBAL":
            chain = _chain(instructions, index)
            chained.update(range(index + 1, index + len(chain)))
            # What the call is given first (os.getenv("X")): after the NULL that 3.13 pushes there.
            given = (i for i in instructions[index + len(chain) :] if i.opname not in ("PUSH_NULL", "NOP"))
            _global(chain, namespace, next(given, None), found, libraries)
        elif instruction.opname == "IMPORT_NAME":
            _imported(instructions, index, namespace, found, libraries)
        elif (
            instruction.opname in _ATTRIBUTE
            and index not in chained
            and instruction.argval in _READING_ATTRIBUTES
        ):
            found.files.add(f".{instruction.argval}()")
    for const in code.co_consts:
        if isinstance(const, types.CodeType):  # a nested function, a lambda, a comprehension
            _read_code(const, namespace, found, libraries)


def _chain(instructions: list[dis.Instruction], index: int) -> list[str]:
    chain = [str(instructions[index].argval)]
    for instruction in instructions[index + 1 :]:
        if instruction.opname not in _ATTRIBUTE:
            break
        chain.append(str(instruction.argval))
    return chain


def _global(
    chain: list[str],
    namespace: dict[str, Any],
    following: dis.Instruction | None,
    found: Reads,
    libraries: Libraries,
) -> None:
    """One global's chain of attributes: the module attribute it ends at (followed through
    modules only: an object's attributes are its configuration, fingerprinted whole), the
    environment variable it reads, or the file."""
    name, missing = chain[0], object()
    value = namespace.get(name, missing)
    if value is missing:
        value = getattr(builtins, name, missing)
        if value is missing:
            return  # a NameError when it runs: nothing read
    taken, owner = 1, None
    while taken < len(chain) and isinstance(value, types.ModuleType) and chain[taken] in vars(value):
        owner, value = value, vars(value)[chain[taken]]
        taken += 1
    rest = chain[taken:]
    if any(value is opener for opener in _OPENS) or (rest and rest[-1] in _READING_ATTRIBUTES):
        found.files.add(f"{'.'.join(chain)}()")
        return
    constant = following.argval if following is not None and following.opname == "LOAD_CONST" else None
    if isinstance(constant, str) and _reads_environment(value, rest):
        found.environ.add(constant)
        return
    if value is not os.environ and value is not builtins.__dict__.get(name, missing):
        _found(found, ".".join(chain[:taken]), value, owner, libraries)


def _found(found: Reads, name: str, value: Any, owner: types.ModuleType | None, libraries: Libraries) -> None:
    # Code and data are taken as they are; another object of a library's module, by its name.
    if owner is not None and libraries.is_library(owner.__name__) and not _code_or_data(value):
        value = Named(name)
    found.globals[name] = value


def _code_or_data(value: Any) -> bool:
    code = (type, types.FunctionType, types.BuiltinFunctionType, types.ModuleType)
    return isinstance(value, code) or is_data(value)


def _reads_environment(value: Any, rest: list[str]) -> bool:
    # os.environ["X"], os.environ.get("X"), os.getenv("X"), and the same names imported.
    if value is os.environ:
        return rest in ([], ["get"])
    return not rest and any(value == getter for getter in _ENVIRONMENT_GETTERS)


def _imported(
    instructions: list[dis.Instruction],
    index: int,
    namespace: dict[str, Any],
    found: Reads,
    libraries: Libraries,
) -> None:
    """An import inside the function: the module, or the names taken from it (``from m import X``)."""
    level = instructions[index - 2].argval if index >= 2 else 0
    name = "." * (level if isinstance(level, int) else 0) + str(instructions[index].argval)
    try:
        module_name = importlib.util.resolve_name(name, namespace.get("__package__") or "")
    except (ImportError, ValueError):
        return
    module = sys.modules.get(module_name)
    if module is None:
        return  # not imported yet, so not run yet either: it is read when first imported
    taken = [n for n in _imported_names(instructions[index + 1 :]) if n in vars(module)]
    for attribute in taken:
        _found(found, f"{module_name}.{attribute}", vars(module)[attribute], module, libraries)
    if not taken:
        found.globals[module_name] = module


def _imported_names(instructions: list[dis.Instruction]) -> list[str]:
    # from m import a, b: IMPORT_FROM a, STORE_FAST a, IMPORT_FROM b, STORE_FAST b, then POP_TOP.
    names = []
    for instruction in instructions:
        if instruction.opname == "IMPORT_FROM":
            names.append(str(instruction.argval))
        elif not instruction.opname.startswith("STORE_"):
            break
    return names


class Libraries:
    """Which modules are libraries (the standard library, site-packages, this plugin), known by
    their name and version, and which are the project's own code, fingerprinted by their code.
    A module with no file (made by ``exec``, a Jinja template's) counts as the project's."""

    def __init__(self) -> None:
        paths = sysconfig.get_paths()
        roots = {paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths}
        roots.update(site.getsitepackages() if hasattr(site, "getsitepackages") else [])
        roots.add(site.getusersitepackages())
        self._roots = tuple(Path(root).resolve() for root in roots)
        self._known: dict[str, bool] = {}

    def is_library(self, module_name: str | None) -> bool:
        if not module_name:
            return False
        if module_name not in self._known:
            self._known[module_name] = self._library(module_name)
        return self._known[module_name]

    def _library(self, module_name: str) -> bool:
        top = module_name.partition(".")[0]
        if top in ("builtins", "pytest_opik_eval") or top in sys.builtin_module_names:
            return True
        module = sys.modules.get(module_name)
        file = getattr(module, "__file__", None)
        if module is None or not file:
            # An extension module built into Python, a frozen one: Python's. One made by exec
            # (a Jinja template's code), or gone: its code is all there is to go by.
            return module is not None and getattr(module, "__spec__", None) is not None
        path = Path(file).resolve()
        return any(path.is_relative_to(root) for root in self._roots)


def source_of(value: Any) -> str | None:
    """The source text of a function or a class, or None where Python cannot find it (made by
    ``exec``, typed in a REPL)."""
    import inspect

    try:
        return inspect.getsource(value)
    except (OSError, TypeError):
        return None
