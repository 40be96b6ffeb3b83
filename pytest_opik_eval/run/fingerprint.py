"""A Python value as canonical JSON data, the same in every process: what the judge cache keys a
metric by (``run/judge_cache.py``), with what it could not see.

Containers are taken by content, objects by their class (and its code) and their own
attributes, never a memory address, a secret, or a process's state (locks, connections, clocks).
The project's code (not the standard library's nor site-packages', known by their name and
version) is taken with what it reads when it runs, followed transitively: the source of a
function or a class, its default argument values, its closure, its class's attributes, and the
globals it names (a helper function, a prompt in another module: ``prompts.EXTRA``, a client
object), found in its bytecode (``run/code_reach.py``). A client object is known by its class and
its endpoint (its base URL, its headers and query parameters, credentials left out).

What no fingerprint can see is named in ``Fingerprint.unknown``: a file the code reads when it
runs (``open()``, ``Path.read_text()``), an object whose state Python cannot read (a C object
that cannot be pickled, a generator).
"""

from __future__ import annotations

import copyreg
import dataclasses
import enum
import functools
import hashlib
import importlib.metadata
import json
import os
import sys
import types
from collections.abc import Callable, Mapping
from pathlib import Path, PurePath
from typing import Any

from pytest_opik_eval.masking import (
    EnvironmentSecrets,
    Scrubber,
    env_secrets,
    is_credential,
    is_secret_param,
    mask,
)
from pytest_opik_eval.run.code_reach import Libraries, Named, Reads, reads_of, source_of

# Objects of these libraries hold connections, locks, loggers and clocks, not configuration:
# known by their class alone (their state differs from one process to the next), and, for a
# client, its endpoint.
_PROCESS_LIBRARIES = frozenset(
    {
        "_io", "_thread", "aiohttp", "asyncio", "concurrent", "httpcore", "httpx", "io", "logging",
        "multiprocessing", "queue", "requests", "socket", "sqlite3", "ssl", "threading", "urllib3",
        "weakref", "_weakrefset",
    }
)  # fmt: skip
# What a client's requests go to: its base URL, and the headers and query parameters it adds.
_ENDPOINT = ("base_url", "_base_url", "headers", "params", "default_query")
# Headers a client sets for the transport, which differ with what is installed (brotli adds
# "br"), not with what the model answers.
_TRANSPORT_HEADERS = frozenset({"accept", "accept-encoding", "connection", "user-agent"})
# Run when an object is made, before a judge scores: what they did is in the object's attributes.
_CONSTRUCTORS = frozenset({"__init__", "__new__", "__post_init__", "__init_subclass__", "__set_name__"})
_DATA_DEPTH = 12  # of a global or a class attribute: a prompt template, a few-shot list of dicts
_SELF_DATA = (str, bytes, int, float, tuple, list, dict, set, frozenset)


@dataclasses.dataclass(frozen=True)
class Fingerprint:
    data: Any  # canonical JSON data
    unknown: tuple[str, ...] = ()  # what it could not see, and where


class Fingerprints:
    """Fingerprints made with the environment's ``secrets`` masked (see ``masking``, a live view:
    a key set after the session started is masked too); each class's and each function's code
    fingerprinted once."""

    def __init__(self, secrets: EnvironmentSecrets, environ: Mapping[str, str] | None = None) -> None:
        self.secrets = secrets
        self.environ = os.environ if environ is None else environ
        self.libraries = Libraries()
        self._memo: dict[int, tuple[Any, Fingerprint]] = {}  # by id: the object is kept with it
        self._stack: list[int] = []  # the code being fingerprinted, outermost first
        self._tainted: set[int] = set()  # those that met one of their callers (a cycle): not memoized
        self._versions: dict[str, str | None] = {}
        self._distributions: Mapping[str, list[str]] | None = None
        self._cached: dict[type, frozenset[str]] = {}

    def of(self, value: Any, limit: int, where: str) -> Fingerprint:
        """``value`` as canonical JSON data, walked ``limit`` levels deep; ``where`` names it
        in what ``unknown`` says."""
        walk = _Walk(self, limit)
        data = walk.of(value, 0, where)
        return Fingerprint(data, tuple(walk.unknown))

    def configuration(self, value: Any, limit: int) -> Fingerprint:
        """An object's own attributes, as the walk takes them (see :meth:`attributes`)."""
        walk = _Walk(self, limit)
        data = walk.attributes(self.attributes(value), 0, qualified(type(value)))
        return Fingerprint(data, tuple(walk.unknown))

    def attributes(self, value: Any) -> dict[str, Any]:
        """An object's own attributes, without those a ``functools.cached_property`` filled: a
        value computed from the others, set or not depending on what ran before."""
        cls = type(value)
        if cls not in self._cached:
            self._cached[cls] = frozenset(
                name
                for c in cls.__mro__
                for name, v in vars(c).items()
                if isinstance(v, functools.cached_property)
            )
        cached = self._cached[cls]
        own = attributes(value)
        return {k: v for k, v in own.items() if k not in cached} if cached else own

    def class_code(self, cls: type) -> Fingerprint:
        """A class's code: a library's by its name and version; the project's by its source and
        its bases', their attributes, and what the methods a judge's scoring can reach read
        (``_reached``)."""
        if self.libraries.is_library(cls.__module__):
            return Fingerprint({"class": qualified(cls), "version": self.version(cls.__module__)})
        return self._memoized(cls, lambda: self._project_class(cls), {"class": qualified(cls)})

    def function(self, function: types.FunctionType) -> Fingerprint:
        """A function's code: a library's by its name; the project's by its source (or, where
        Python has none, its bytecode) and what it reads when it runs."""
        name = {"function": qualified(function)}
        if self.libraries.is_library(_home(function)):
            return Fingerprint(name)
        return self._memoized(function, lambda: self._project_function(function), name)

    def version(self, module_name: str) -> str | None:
        """The version of the distribution a library's module comes from; None for the project's
        modules and Python's."""
        library = module_name.partition(".")[0]
        if library not in self._versions:
            if not self.libraries.is_library(module_name) or library in sys.stdlib_module_names:
                self._versions[library] = None
            else:
                self._versions[library] = self._version_of(library)
        return self._versions[library]

    def _version_of(self, library: str) -> str | None:
        try:
            return importlib.metadata.version(library)
        except (importlib.metadata.PackageNotFoundError, ValueError):
            pass
        # A module whose distribution has another name (``_opik`` ships with ``opik``): the map
        # of every installed distribution's modules, read once (it opens them all).
        if self._distributions is None:
            self._distributions = importlib.metadata.packages_distributions()
        for distribution in self._distributions.get(library, []):
            try:
                return importlib.metadata.version(distribution)
            except importlib.metadata.PackageNotFoundError:
                continue
        return None

    def sources(self, cls: type) -> list[str | None]:
        """The source of a class and of its bases that are the project's."""
        return [source_of(c) for c in cls.__mro__ if not self.libraries.is_library(c.__module__)]

    def _memoized(self, code: Any, make: Callable[[], Fingerprint], name: dict[str, Any]) -> Fingerprint:
        key = id(code)
        if key in self._memo:
            return self._memo[key][1]
        if key in self._stack:  # recursion: the caller being fingerprinted holds the whole cycle
            self._tainted.update(self._stack[self._stack.index(key) + 1 :])
            return Fingerprint({**name, "recursive": True})
        self._stack.append(key)
        try:
            made = make()
        finally:
            self._stack.pop()
        if key in self._tainted:
            self._tainted.discard(key)  # made with a caller's stub: made again where met again
        else:
            self._memo[key] = (code, made)
        return made

    def _project_class(self, cls: type) -> Fingerprint:
        project = [c for c in cls.__mro__ if not self.libraries.is_library(c.__module__)]
        parts: dict[str, Any] = {"class": qualified(cls), "sources": [], "attributes": {}, "reached": {}}
        unknown: list[str] = []
        for c in project:
            parts["sources"].append(_source(c))
            data = {k: v for k, v in vars(c).items() if not _special(k) and not _is_function(v)}
            walk = _Walk(self, _DATA_DEPTH)
            parts["attributes"][qualified(c)] = walk.attributes(data, 0, qualified(c))
            unknown += walk.unknown
        for function in _reached(cls, project):
            found = self._reads(function)
            parts["reached"][qualified(function)] = found.data
            unknown += found.unknown
        return Fingerprint(digest(parts), tuple(dict.fromkeys(unknown)))

    def _project_function(self, function: types.FunctionType) -> Fingerprint:
        reads = self._reads(function)
        source: Any = source_of(function) or code_data(function.__code__)
        return Fingerprint({"function": qualified(function), "source": source, **reads.data}, reads.unknown)

    def _reads(self, function: types.FunctionType) -> Fingerprint:
        """What a function of the project reads when it runs, besides its code. A library's
        function in a project's class (a decorator's wrapper: ``@opik.track``) is known by its
        version; its closure holds what it wraps, the project's."""
        where = qualified(function)
        library = self.libraries.is_library(_home(function))
        reads = Reads() if library else reads_of(function, self.libraries)
        walk = _Walk(self, _DATA_DEPTH)
        cells = zip(function.__code__.co_freevars, function.__closure__ or (), strict=True)
        data = {
            "defaults": walk.of(function.__defaults__, 0, f"{where} defaults"),
            "kwdefaults": walk.of(function.__kwdefaults__, 0, f"{where} defaults"),
            "closure": {name: walk.of(_cell(cell), 0, f"{where}.{name}") for name, cell in cells},
            "globals": {
                name: walk.named(name.rpartition(".")[2], value, 0, name)
                for name, value in sorted(reads.globals.items())
            },
            "environ": {name: self._environment(name) for name in sorted(reads.environ)},
        }
        unknown = [*walk.unknown, *(_file_read(call, where) for call in sorted(reads.files))]
        return Fingerprint(data, tuple(unknown))

    def _environment(self, name: str) -> str | None:
        value = self.environ.get(name)
        if value is not None and (is_credential(name) or env_secrets({name: value})):
            return f"<{name}>"
        return None if value is None else mask(value, self.secrets)

    def module(self, module: types.ModuleType) -> dict[str, Any]:
        """A module as a value (passed whole, imported in a function): a library's by its name
        and version; the project's by its file, whose every part it may read."""
        if self.libraries.is_library(module.__name__):
            return {"module": module.__name__, "version": self.version(module.__name__)}
        file = getattr(module, "__file__", None)
        try:
            content = hashlib.sha256(Path(file).read_bytes()).hexdigest() if file else None
        except OSError:
            content = None
        return {"module": module.__name__, "file": content}


class _Walk:
    """A value as canonical JSON data: containers by content, objects by their class (and its
    code) and their own attributes; never a memory address, a secret, or a process's state. What
    it cannot see goes to ``unknown``."""

    def __init__(self, fingerprints: Fingerprints, limit: int) -> None:
        self.fingerprints = fingerprints
        self.secrets = fingerprints.secrets
        self.limit = limit
        self.seen: set[int] = set()
        self.unknown: list[str] = []

    def of(self, value: Any, depth: int, where: str) -> Any:
        if value is None or isinstance(value, (bool, int, float)):
            return value
        if isinstance(value, str):
            return mask(value, self.secrets)
        named = self._by_name(value, where)
        if named is not None:
            return named
        if depth >= self.limit:
            self.unknown.append(f"{where}: nested more than {self.limit} levels deep")
            return {"too_deep": qualified(type(value))}
        if id(value) in self.seen:
            return {"cycle": qualified(type(value))}
        self.seen.add(id(value))
        try:
            return self._container(value, depth + 1, where)
        finally:
            self.seen.discard(id(value))

    def _by_name(self, value: Any, where: str) -> Any:
        """What is known by its name (and its code), not by attributes; else None."""
        if isinstance(value, (bytes, bytearray)):
            return {"bytes": hashlib.sha256(value).hexdigest()}
        if isinstance(value, enum.Enum):
            return {"enum": qualified(type(value)), "member": value.name}
        return self._code(value) or self._value(value)

    def _code(self, value: Any) -> Any:
        if isinstance(value, types.ModuleType):
            return self.fingerprints.module(value)
        if isinstance(value, type):
            return {"type": qualified(value), "code": self._code_of(value)}
        if isinstance(value, types.FunctionType):
            return self._found(self.fingerprints.function(value))
        return None

    def _value(self, value: Any) -> Any:
        if isinstance(value, PurePath):
            return {"path": str(value)}
        if isinstance(value, Named):
            return {"name": value.name}
        if value is os.environ:  # read by name where the code reads it (code_reach)
            return {"object": "os.environ"}
        if _is_url(value):
            return {"url": _url(str(value), self.secrets)}
        if "Secret" in type(value).__name__:  # pydantic's SecretStr, and its kind
            return {"secret": qualified(type(value))}
        return None

    def _container(self, value: Any, depth: int, where: str) -> Any:
        if isinstance(value, (types.MethodType, types.BuiltinMethodType)):
            return self._method(value, depth, where)
        if isinstance(value, functools.partial):
            return {
                "partial": self.of(value.func, depth, where),
                "args": self.of(value.args, depth, where),
                "keywords": self.of(value.keywords, depth, where),
            }
        if isinstance(value, Mapping):
            return self._mapping(value, depth, where)
        if isinstance(value, (list, tuple)):
            return [self.of(v, depth, f"{where}[{i}]") for i, v in enumerate(value)]
        if isinstance(value, (set, frozenset)):
            return {"set": sorted((self.of(v, depth, where) for v in value), key=canonical)}
        cls = type(value)
        if any(c.__module__.split(".")[0] in _PROCESS_LIBRARIES for c in cls.__mro__[:-1]):
            return {"object": qualified(cls), **self._endpoint(value, depth, where)}
        try:  # an array (numpy's, array.array): its content, which no attribute shows
            view = memoryview(value)
        except TypeError:
            pass
        else:
            content = hashlib.sha256(view.tobytes()).hexdigest()
            return {"object": qualified(cls), "buffer": [view.format, list(view.shape or ()), content]}
        return self._object(value, depth, where)

    def _object(self, value: Any, depth: int, where: str) -> Any:
        cls = type(value)
        library = self.fingerprints.libraries.is_library(cls.__module__)
        if library and hasattr(value, "base_url"):  # an SDK's client: openai.OpenAI, anthropic's...
            public = {k: v for k, v in self.fingerprints.attributes(value).items() if not k.startswith("_")}
            return {
                "client": qualified(cls),
                "version": self.fingerprints.version(cls.__module__),
                **self._endpoint(value, depth, where),
                "attributes": self.attributes(public, depth, where),
            }
        own = self.fingerprints.attributes(value)
        if not own and not hasattr(value, "__dict__"):
            return self._reduced(value, depth, where)
        attributes = self.attributes(own, depth, where)
        return {"object": qualified(cls), "code": self._code_of(cls), "attributes": attributes}

    def attributes(self, own: Mapping[str, Any], depth: int, where: str) -> dict[str, Any]:
        return {name: self.named(name, v, depth, f"{where}.{name}") for name, v in sorted(own.items())}

    def _mapping(self, value: Mapping[Any, Any], depth: int, where: str) -> Any:
        pairs = [
            (self.of(k, depth, where), self.named(k, v, depth, f"{where}[{k!r}]")) for k, v in value.items()
        ]
        return {"mapping": sorted(pairs, key=canonical)}

    def named(self, name: Any, value: Any, depth: int, where: str) -> Any:
        if isinstance(name, str) and isinstance(value, str) and is_credential(name):
            return "<secret>"
        return self.of(value, depth, where)

    def _method(self, value: Any, depth: int, where: str) -> Any:
        owner = value.__self__
        if isinstance(value, types.MethodType):
            function = self.of(value.__func__, depth, where)
            return {"method": function, "self": self.of(owner, depth, where)}
        if owner is None:
            return {"function": qualified(value)}
        if isinstance(owner, types.ModuleType):  # a C function: a library's, or the project's by its file
            return {"function": qualified(value), "module": self.fingerprints.module(owner)}
        # A C method: of a prompt ("...".format), by its data; of a library's object
        # (random.random), by its class: its state is that object's, not the judge's.
        library = self.fingerprints.libraries.is_library(type(owner).__module__)
        if isinstance(owner, _SELF_DATA) or not library:
            return {"method": qualified(value), "self": self.of(owner, depth, where)}
        return {"method": qualified(value), "of": qualified(type(owner))}

    def _endpoint(self, value: Any, depth: int, where: str) -> dict[str, Any]:
        """What a client's requests go to (see ``_ENDPOINT``), credentials left out."""
        found: dict[str, Any] = {}
        for name in _ENDPOINT:
            try:
                setting = getattr(value, name, None)
            except Exception:  # a property that needs what the object does not have yet
                continue
            if isinstance(setting, Mapping):
                setting = {
                    k: "<secret>" if is_secret_param(str(k)) else v
                    for k, v in setting.items()
                    if str(k).lower() not in _TRANSPORT_HEADERS
                }
            if setting:
                found[name.lstrip("_")] = self.of(setting, depth, f"{where}.{name}")
        return found

    def _reduced(self, value: Any, depth: int, where: str) -> Any:
        """An object with no attributes of its own, a C object's state: as ``pickle`` takes it.
        Where Python cannot read it (``pickle`` refuses), it is unknown."""
        cls = type(value)
        try:
            # As pickle does: a reducer registered for the class first (re.Pattern's), then its own.
            reducer = copyreg.dispatch_table.get(cls)
            reduced = reducer(value) if reducer is not None else value.__reduce_ex__(4)
        except Exception as error:  # TypeError: cannot pickle, and whatever a C type raises
            self.unknown.append(
                f"{where}: a {qualified(cls)} object, whose state Python cannot read ({error})"
            )
            return {"object": qualified(cls), "unknown": True}
        if isinstance(reduced, str):  # a module-level name: a singleton
            return {"object": qualified(cls), "global": reduced}
        parts = list(reduced[1:3]) + [None if items is None else list(items) for items in reduced[3:5]]
        return {"object": qualified(cls), "reduced": self.of(parts, depth, where)}

    def _code_of(self, cls: type) -> Any:
        # Python's and the process libraries' classes are known by name; others by their code.
        if cls.__module__ in ("builtins", "typing") or cls.__module__.split(".")[0] in _PROCESS_LIBRARIES:
            return None
        return self._found(self.fingerprints.class_code(cls))

    def _found(self, fingerprint: Fingerprint) -> Any:
        self.unknown.extend(fingerprint.unknown)
        return fingerprint.data


def _reached(cls: type, project: list[type]) -> list[types.FunctionType]:
    """The functions of the project's classes in ``cls.__mro__`` that scoring can run: from its
    public methods (``score``, ``ascore``, ``__call__``) and those overriding a library's (which
    the library calls), to the methods they name, in turn. Not the constructors nor the helpers
    only they call: what they did is in the object's attributes."""
    table: dict[str, list[types.FunctionType]] = {}
    for c in project:
        for name, function in functions(c).items():
            table.setdefault(name, []).append(function)
    library_names = {name for c in cls.__mro__ if c not in project for name in vars(c)}
    todo = [n for n in table if (not n.startswith("_") or n == "__call__" or n in library_names)]
    todo = [n for n in todo if n not in _CONSTRUCTORS]
    reached: dict[str, None] = {}
    while todo:
        name = todo.pop()
        if name in reached:
            continue
        reached[name] = None
        for function in table[name]:
            todo += [n for n in global_names(function.__code__) if n in table and n not in reached]
    return [function for name in sorted(reached) for function in table[name]]


def attributes(value: Any) -> dict[str, Any]:
    """An object's own attributes: its ``__dict__`` and its slots."""
    attributes = dict(getattr(value, "__dict__", None) or {})
    for cls in type(value).__mro__:
        for slot in getattr(cls, "__slots__", ()):
            if isinstance(slot, str) and slot not in ("__dict__", "__weakref__") and hasattr(value, slot):
                attributes.setdefault(slot, getattr(value, slot))
    return attributes


def qualified(value: Any) -> str:
    return f"{getattr(value, '__module__', None)}.{getattr(value, '__qualname__', type(value).__qualname__)}"


def functions(cls: type) -> dict[str, types.FunctionType]:
    found: dict[str, types.FunctionType] = {}
    for name, value in vars(cls).items():
        value = getattr(value, "__func__", value)  # staticmethod, classmethod
        if isinstance(value, property):
            value = value.fget
        elif isinstance(value, functools.cached_property):
            value = value.func
        if isinstance(value, types.FunctionType):
            found[name] = value
    return found


def global_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= global_names(const)
    return names


def code_data(code: types.CodeType) -> dict[str, Any]:
    """A code object as data (marshal's bytes depend on reference counts; repr shows addresses)."""
    consts = [
        code_data(c)
        if isinstance(c, types.CodeType)
        else sorted(map(repr, c))
        if isinstance(c, frozenset)
        else repr(c)
        for c in code.co_consts
    ]
    return {"bytecode": code.co_code.hex(), "names": list(code.co_names), "consts": consts}


def canonical(value: Any) -> str:
    # Fingerprints are JSON data; a stray object is named by its class, never by its repr (an address).
    return json.dumps(
        value,
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        default=lambda o: qualified(type(o)),
    )


def digest(value: Any) -> str:
    return hashlib.sha256(canonical(value).encode("utf-8")).hexdigest()


def _source(cls: type) -> Any:
    # Where Python cannot find it (a class made by exec), its functions' code.
    return source_of(cls) or {name: code_data(f.__code__) for name, f in sorted(functions(cls).items())}


def _special(name: str) -> bool:
    # Python's (__module__, __doc__...) and abc's (_abc_impl: its registry, a C object).
    return (name.startswith("__") and name.endswith("__")) or name == "_abc_impl"


def _is_function(value: Any) -> bool:
    return isinstance(
        value, (types.FunctionType, staticmethod, classmethod, property, functools.cached_property)
    )


def _home(function: types.FunctionType) -> str | None:
    # The module whose code it is: a decorator's wrapper takes the wrapped function's __module__.
    name = function.__globals__.get("__name__")
    return name if isinstance(name, str) else None


def _cell(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # a name the enclosing function has not bound yet
        return None


def _file_read(call: str, where: str) -> str:
    return f"{call} in {where}: a file (or a prompt store) read when it scores"


def _is_url(value: Any) -> bool:
    cls = type(value)
    return cls.__name__ == "URL" and cls.__module__.split(".")[0] in ("httpx", "yarl")


def _url(url: str, secrets: EnvironmentSecrets) -> str:
    """A client's URL as the recordings hold it: credential query parameters and userinfo out."""
    from pytest_opik_eval.run.http_calls import canonical_url

    return canonical_url(url, Scrubber(secrets))
