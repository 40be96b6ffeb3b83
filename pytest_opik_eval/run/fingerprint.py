"""A Python value as canonical JSON data, the same in every process: what the judge cache keys a
metric by (``run/judge_cache.py``).

Containers are taken by content, objects by their class (and its code) and their own
attributes, functions by their code; never a memory address, a secret, or a process's state
(locks, connections, clocks). The source of a class comes with the module-level data its
functions read (a prompt template kept in a module constant).
"""

from __future__ import annotations

import enum
import functools
import hashlib
import inspect
import json
import sys
import types
from collections.abc import Callable, Mapping
from typing import Any

from pytest_opik_eval.masking import is_credential, mask

# Objects of these libraries hold connections, locks, loggers and clocks, not configuration:
# known by their class alone (their state differs from one process to the next).
_PROCESS_LIBRARIES = frozenset(
    {
        "_io", "_thread", "aiohttp", "asyncio", "concurrent", "httpcore", "httpx", "io", "logging",
        "multiprocessing", "queue", "requests", "socket", "sqlite3", "ssl", "threading", "urllib3",
    }
)  # fmt: skip
_DATA_DEPTH = 12  # of a module constant: a prompt template, a few-shot list of dicts


class Fingerprints:
    """Fingerprints made with the environment's ``secrets`` masked (see ``masking.env_secrets``),
    each class's code fingerprinted once."""

    def __init__(self, secrets: Mapping[str, str]) -> None:
        self.secrets = secrets
        self._classes: dict[type, str] = {}

    def of(self, value: Any, limit: int) -> Any:
        """``value`` as canonical JSON data, walked ``limit`` levels deep."""
        return _Walk(self.secrets, self.class_code, limit).of(value, 0)

    def class_code(self, cls: type) -> str:
        """The digest of a class's source (or, where Python cannot find it, its functions' code),
        with the module-level data its functions read."""
        if cls not in self._classes:
            self._classes[cls] = digest(self._code_parts(cls))
        return self._classes[cls]

    def _code_parts(self, cls: type) -> dict[str, Any]:
        try:
            source: Any = inspect.getsource(cls)
        except (OSError, TypeError):
            source = {name: code_data(f.__code__) for name, f in sorted(functions(cls).items())}
        names = sorted({n for f in functions(cls).values() for n in global_names(f.__code__)})
        module = sys.modules.get(cls.__module__)
        data = {
            name: self.of(value, _DATA_DEPTH)
            for name in names
            if is_data(value := getattr(module, name, None)) and value is not None
        }
        return {"class": qualified(cls), "source": source, "globals": data}


class _Walk:
    """A value as canonical JSON data: containers by content, objects by their class (and its
    code) and their own attributes; never a memory address, a secret, or a process's state."""

    def __init__(self, secrets: Mapping[str, str], class_code: Callable[[type], str], limit: int) -> None:
        self.secrets = secrets
        self.class_code = class_code
        self.limit = limit
        self.seen: set[int] = set()

    def of(self, value: Any, depth: int) -> Any:
        if value is None or isinstance(value, (bool, int, float)):
            return value
        if isinstance(value, str):
            return mask(value, self.secrets)
        named = self._by_name(value)
        if named is not None:
            return named
        if depth >= self.limit:
            return {"too_deep": qualified(type(value))}
        if id(value) in self.seen:
            return {"cycle": qualified(type(value))}
        self.seen.add(id(value))
        try:
            return self._container(value, depth + 1)
        finally:
            self.seen.discard(id(value))

    def _by_name(self, value: Any) -> dict[str, Any] | None:
        """What is known by its name (and its code), not by attributes; else None."""
        if isinstance(value, (bytes, bytearray)):
            return {"bytes": hashlib.sha256(value).hexdigest()}
        if isinstance(value, enum.Enum):
            return {"enum": qualified(type(value)), "member": value.name}
        if isinstance(value, types.ModuleType):
            return {"module": value.__name__}
        if isinstance(value, type):
            return {"type": qualified(value), "code": self._code_of(value)}
        if callable(value) and not _has_state(value):
            return _callable(value)
        if "Secret" in type(value).__name__:  # pydantic's SecretStr, and its kind
            return {"secret": qualified(type(value))}
        return None

    def _container(self, value: Any, depth: int) -> Any:
        if isinstance(value, types.MethodType):
            return {"method": _callable(value.__func__), "self": self.of(value.__self__, depth)}
        if isinstance(value, functools.partial):
            return {
                "partial": self.of(value.func, depth),
                "args": self.of(value.args, depth),
                "keywords": self.of(value.keywords, depth),
            }
        if isinstance(value, Mapping):
            pairs = [(self.of(k, depth), self._named(k, v, depth)) for k, v in value.items()]
            return {"mapping": sorted(pairs, key=canonical)}
        if isinstance(value, (list, tuple)):
            return [self.of(v, depth) for v in value]
        if isinstance(value, (set, frozenset)):
            return {"set": sorted((self.of(v, depth) for v in value), key=canonical)}
        cls = type(value)
        if cls.__module__.split(".")[0] in _PROCESS_LIBRARIES:
            return {"object": qualified(cls)}
        try:  # an array (numpy's, array.array): its content, which no attribute shows
            view = memoryview(value)
        except TypeError:
            pass
        else:
            content = hashlib.sha256(view.tobytes()).hexdigest()
            return {"object": qualified(cls), "buffer": [view.format, list(view.shape or ()), content]}
        own = attributes(value)
        return {
            "object": qualified(cls),
            "code": self._code_of(cls),
            "attributes": {name: self._named(name, v, depth) for name, v in sorted(own.items())},
        }

    def _named(self, name: Any, value: Any, depth: int) -> Any:
        if isinstance(name, str) and isinstance(value, str) and is_credential(name):
            return "<secret>"
        return self.of(value, depth)

    def _code_of(self, cls: type) -> str | None:
        # Python's and the process libraries' classes are known by name; others by their code.
        if cls.__module__ in ("builtins", "typing") or cls.__module__.split(".")[0] in _PROCESS_LIBRARIES:
            return None
        return self.class_code(cls)


def attributes(value: Any) -> dict[str, Any]:
    """An object's own attributes: its ``__dict__`` and its slots."""
    attributes = dict(getattr(value, "__dict__", None) or {})
    for cls in type(value).__mro__:
        for slot in getattr(cls, "__slots__", ()):
            if isinstance(slot, str) and slot not in ("__dict__", "__weakref__") and hasattr(value, slot):
                attributes.setdefault(slot, getattr(value, slot))
    return attributes


def _has_state(value: Any) -> bool:
    # A function is code; a callable object (a model), a bound method (its object's settings) or
    # a partial (its arguments) is configuration too.
    return not isinstance(value, (types.FunctionType, types.BuiltinFunctionType))


def _callable(value: Any) -> dict[str, Any]:
    function = inspect.unwrap(getattr(value, "__func__", value))
    code = getattr(function, "__code__", None)
    return {"function": qualified(function), "code": None if code is None else digest(code_data(code))}


def qualified(value: Any) -> str:
    return f"{getattr(value, '__module__', None)}.{getattr(value, '__qualname__', type(value).__qualname__)}"


def functions(cls: type) -> dict[str, types.FunctionType]:
    found: dict[str, types.FunctionType] = {}
    for name, value in vars(cls).items():
        value = getattr(value, "__func__", value)  # staticmethod, classmethod
        if isinstance(value, property):
            value = value.fget
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


def is_data(value: Any) -> bool:
    if isinstance(value, (str, bytes, int, float, bool)):
        return True
    if isinstance(value, (list, tuple, set, frozenset)):
        return all(is_data(v) for v in value)
    if isinstance(value, dict):
        return all(is_data(k) and is_data(v) for k, v in value.items())
    return False


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
