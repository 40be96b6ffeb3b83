"""The judge cache (``--eval-judge-cache``): an LLM judge's scores, kept by everything that decides
them, so a rerun (a replay of recorded app calls, above all) does not pay for the judges again.

A metric is a judge when its class says so (``judge = True``, on this package's ``BaseMetric``
or any metric), or when it is one of the Opik SDK's LLM-judge metrics: it holds an Opik model
(an ``OpikBaseModel``) among its attributes, or its class comes from the SDK's ``llm_judges``.
Heuristic metrics are cheap and deterministic: never cached.

The key is the sha256 of a canonical JSON of: the metric's class (module and qualified name), the
source of that class and of its bases down to the library's base class, with the module-level
data their methods read (a prompt template kept in a constant), the version of the library the
class comes from, the metric's whole configuration (its attributes, recursively: the model and
its name, the prompt, the temperature...), the inputs of ``score()``, the item id and the trial
index (so repeated trials keep their own judge samples). Whatever changes one of them is scored
again: an edited prompt never gets a stale score. Secrets (the values of the environment's
``*_KEY``/``*_TOKEN``/``*_SECRET``/``*_PASSWORD`` variables, and attributes named like an API key)
are replaced by a placeholder first, so a key rotated or set differently in CI keeps the cache.

Each result is a plain JSON file, ``<store folder>/judge-cache/<2 hex>/<key>.json``, written
atomically (a temporary file renamed): one key always means the same content, so threads,
pytest-xdist workers and CI shards never clash, and merging shards' folders is a plain copy.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import importlib.metadata
import inspect
import json
import os
import re
import sys
import threading
import types
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pytest_opik_eval.collect.datasets.loading import MAX_DEPTH
from pytest_opik_eval.reports.files import write_atomically
from pytest_opik_eval.store.records import ScoreRecord

JUDGE_CACHE = "judge-cache"  # the folder under the store folder
FORMAT = 1  # of the key and of the files: a new format starts a new cache
WORKER_JUDGE_COUNTS = "opik_eval_judge_cache"  # the key in a pytest-xdist worker's workeroutput

# The classes the source hash stops at: the metric libraries' own base classes, and Python's.
_BASE_MODULES = frozenset(
    {"pytest_opik_eval.metrics.base", "opik.evaluation.metrics.base_metric", "_opik._base_metric", "abc"}
)
# Objects of these libraries hold connections, locks, loggers and clocks, not configuration:
# known by their class alone (their state differs from one process to the next).
_PROCESS_LIBRARIES = frozenset(
    {
        "_io", "_thread", "aiohttp", "asyncio", "concurrent", "httpcore", "httpx", "io", "logging",
        "multiprocessing", "queue", "requests", "socket", "sqlite3", "ssl", "threading", "urllib3",
    }
)  # fmt: skip
_SECRET_NAMES = re.compile(
    r"(?:^|_)(?:api_?key|api_?token|access_?token|auth_?token|bearer_?token|token|secret|"
    r"client_?secret|password|authorization)$",
    re.IGNORECASE,
)
_SECRET_ENV = re.compile(r".*(?:_KEY|_TOKEN|_SECRET|_PASSWORD)$|.*API_KEY.*", re.IGNORECASE)
# How deep a metric's configuration is walked (a model inside the metric, its client, its
# settings...); the inputs, dataset data, are walked as deep as a dataset may nest.
_CONFIGURATION_DEPTH = 12


def env_secrets(environ: Mapping[str, str]) -> dict[str, str]:
    """The values of the environment's secret-like variables (8 characters or more), longest
    first, each with the placeholder that stands for it."""
    found = {
        value: f"<{name}>"
        for name, value in environ.items()
        if _SECRET_ENV.fullmatch(name) and len(value) >= 8
    }
    return dict(sorted(found.items(), key=lambda pair: -len(pair[0])))


@dataclasses.dataclass
class JudgeCounts:
    """Judge scores served from the cache, and scored by calling the judge."""

    hits: int = 0
    scored: int = 0

    def to_json(self) -> dict[str, int]:
        return {"hits": self.hits, "scored": self.scored}

    def add(self, other: Mapping[str, int]) -> None:
        self.hits += int(other.get("hits", 0))
        self.scored += int(other.get("scored", 0))


@dataclasses.dataclass(frozen=True)
class _Judge:
    digest: str  # of the metric's class, code, library version and configuration
    about: dict[str, Any]  # the readable parts, stored with each result


class JudgeCache:
    """The cache of one process: files under ``folder``, the judges' identities (computed once per
    metric object, on first use), and the counts."""

    def __init__(self, folder: Path, environ: Mapping[str, str] | None = None) -> None:
        self.folder = folder
        self.counts = JudgeCounts()
        self._secrets = env_secrets(os.environ if environ is None else environ)
        self._lock = threading.Lock()  # the counts and the memos: trials score on pool threads
        # By id(): a metric object may not be hashable. The metric is kept, so its id stays its own.
        self._judges: dict[int, tuple[Any, _Judge | None]] = {}
        self._classes: dict[type, str] = {}
        self._versions: dict[str, str | None] = {}

    def score(
        self,
        metric: Any,
        inputs: Mapping[str, Any],
        item_id: str,
        trial: int,
        score: Callable[[], list[ScoreRecord]],
    ) -> list[ScoreRecord]:
        """``score()``'s records: the cached ones of a judge, else those of calling it (kept when
        none failed: a judge that failed, a rate limit or a timeout, is called again next time)."""
        judge = self._judge(metric)
        if judge is None:
            return score()
        key = _digest(
            {"judge": judge.digest, "inputs": self._inputs(inputs), "item_id": item_id, "trial": trial}
        )
        path = self.folder / key[:2] / f"{key}.json"
        cached = _read(path, key)
        if cached is not None:
            with self._lock:
                self.counts.hits += 1
            return cached
        records = score()
        with self._lock:
            self.counts.scored += 1
        if not any(record.scoring_failed for record in records):
            self._write(path, key, judge, item_id, trial, records)
        return records

    def _write(
        self, path: Path, key: str, judge: _Judge, item_id: str, trial: int, records: list[ScoreRecord]
    ) -> None:
        results = [self._masked(r.model_dump(mode="json", exclude_none=True)) for r in records]
        entry = {"format": FORMAT, "key": key, **judge.about, "item_id": item_id, "trial": trial}
        text = json.dumps({**entry, "results": results}, indent=2, sort_keys=True, ensure_ascii=False)
        try:
            write_atomically(path, text + "\n")
        except OSError:
            pass  # a read-only or full folder: the score stands, it is only not kept

    def _judge(self, metric: Any) -> _Judge | None:
        with self._lock:
            known = self._judges.get(id(metric))
        if known is not None:
            return known[1]
        judge = self._identify(metric) if is_judge(metric) else None
        with self._lock:
            self._judges.setdefault(id(metric), (metric, judge))
            return self._judges[id(metric)][1]

    def _identify(self, metric: Any) -> _Judge:
        cls = type(metric)
        library = cls.__module__.split(".")[0]
        version = self._version(library)
        sources = [self._class_code(c) for c in cls.__mro__ if _own_code(c)]
        configuration = self._fingerprint(_attributes(metric))
        about = {
            "class": _qualified(cls),
            "name": str(getattr(metric, "name", cls.__name__)),
            "model": _model_name(metric),
            "library": library,
            "library_version": version,
        }
        about = self._masked(about)
        parts = {"format": FORMAT, **about, "sources": sources, "configuration": configuration}
        return _Judge(_digest(parts), about)

    def _version(self, library: str) -> str | None:
        if library not in self._versions:
            self._versions[library] = _version_of(library)
        return self._versions[library]

    def _class_code(self, cls: type) -> str:
        if cls not in self._classes:
            self._classes[cls] = _digest(self._code_parts(cls))
        return self._classes[cls]

    def _code_parts(self, cls: type) -> dict[str, Any]:
        """A class's source (or, where Python cannot find it, its functions' code), with the
        module-level data its functions read: a prompt template kept in a module constant."""
        try:
            source: Any = inspect.getsource(cls)
        except (OSError, TypeError):
            source = {name: _code(f.__code__) for name, f in sorted(_functions(cls).items())}
        names = sorted({n for f in _functions(cls).values() for n in _global_names(f.__code__)})
        module = sys.modules.get(cls.__module__)
        data = {
            name: self._fingerprint(value)
            for name in names
            if _is_data(value := getattr(module, name, None)) and value is not None
        }
        return {"class": _qualified(cls), "source": source, "globals": data}

    def _fingerprint(self, value: Any, limit: int = _CONFIGURATION_DEPTH) -> Any:
        return _Fingerprint(self._secrets, self._class_code, limit).of(value, 0)

    def _inputs(self, inputs: Mapping[str, Any]) -> Any:
        try:
            # JSON data, as inputs nearly always are: dumped in C, at any depth a dataset may have.
            return _mask(json.dumps(inputs, sort_keys=True, ensure_ascii=False), self._secrets)
        except (TypeError, ValueError):
            return self._fingerprint(inputs, MAX_DEPTH + 1)

    def _masked(self, value: Any) -> Any:
        """``value`` (JSON data) with the environment's secret values replaced by their names."""
        if isinstance(value, str):
            return _mask(value, self._secrets)
        if isinstance(value, dict):
            return {k: self._masked(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._masked(v) for v in value]
        return value


def is_judge(metric: Any) -> bool:
    """Whether ``metric`` calls an LLM judge: its class says so (``judge = True``), or it is an
    Opik SDK LLM-judge metric (it holds an Opik model, or comes from the SDK's ``llm_judges``)."""
    declared = getattr(type(metric), "judge", None)
    if isinstance(declared, bool):
        return declared
    module = type(metric).__module__
    if module.startswith("opik.") and (".llm_judges." in module or module.endswith(".ragas_metric")):
        return True
    # Loaded if, and only if, an Opik model exists in this process: no import for other metrics.
    models = sys.modules.get("opik.evaluation.models.base_model")
    model_class = getattr(models, "OpikBaseModel", None)
    return model_class is not None and any(isinstance(v, model_class) for v in _attributes(metric).values())


class _Fingerprint:
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
            return _mask(value, self.secrets)
        named = self._by_name(value)
        if named is not None:
            return named
        if depth >= self.limit:
            return {"too_deep": _qualified(type(value))}
        if id(value) in self.seen:
            return {"cycle": _qualified(type(value))}
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
            return {"enum": _qualified(type(value)), "member": value.name}
        if isinstance(value, types.ModuleType):
            return {"module": value.__name__}
        if isinstance(value, type):
            return {"type": _qualified(value), "code": self._code_of(value)}
        if callable(value) and not _has_state(value):
            return _callable(value)
        if "Secret" in type(value).__name__:  # pydantic's SecretStr, and its kind
            return {"secret": _qualified(type(value))}
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
            return {"mapping": sorted(pairs, key=_canonical)}
        if isinstance(value, (list, tuple)):
            return [self.of(v, depth) for v in value]
        if isinstance(value, (set, frozenset)):
            return {"set": sorted((self.of(v, depth) for v in value), key=_canonical)}
        cls = type(value)
        if cls.__module__.split(".")[0] in _PROCESS_LIBRARIES:
            return {"object": _qualified(cls)}
        try:  # an array (numpy's, array.array): its content, which no attribute shows
            view = memoryview(value)
        except TypeError:
            pass
        else:
            content = hashlib.sha256(view.tobytes()).hexdigest()
            return {"object": _qualified(cls), "buffer": [view.format, list(view.shape or ()), content]}
        attributes = _attributes(value)
        return {
            "object": _qualified(cls),
            "code": self._code_of(cls),
            "attributes": {name: self._named(name, v, depth) for name, v in sorted(attributes.items())},
        }

    def _named(self, name: Any, value: Any, depth: int) -> Any:
        if isinstance(name, str) and _SECRET_NAMES.search(name.lstrip("_")) and isinstance(value, str):
            return "<secret>"
        return self.of(value, depth)

    def _code_of(self, cls: type) -> str | None:
        # Python's and the process libraries' classes are known by name; others by their code.
        if cls.__module__ in ("builtins", "typing") or cls.__module__.split(".")[0] in _PROCESS_LIBRARIES:
            return None
        return self.class_code(cls)


def _read(path: Path, key: str) -> list[ScoreRecord] | None:
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
        if entry.get("key") != key or entry.get("format") != FORMAT:
            return None
        return [ScoreRecord.model_validate(result) for result in entry["results"]]
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None  # a damaged file (a manual edit, a bad merge): scored again and rewritten


def _attributes(value: Any) -> dict[str, Any]:
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
    return {"function": _qualified(function), "code": None if code is None else _digest(_code(code))}


def _qualified(value: Any) -> str:
    return f"{getattr(value, '__module__', None)}.{getattr(value, '__qualname__', type(value).__qualname__)}"


def _own_code(cls: type) -> bool:
    """Whether ``cls`` is the metric's own class or a base above the libraries' base classes."""
    return cls is not object and cls.__module__ not in _BASE_MODULES and cls.__module__ != "builtins"


def _functions(cls: type) -> dict[str, types.FunctionType]:
    found: dict[str, types.FunctionType] = {}
    for name, value in vars(cls).items():
        value = getattr(value, "__func__", value)  # staticmethod, classmethod
        if isinstance(value, property):
            value = value.fget
        if isinstance(value, types.FunctionType):
            found[name] = value
    return found


def _global_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


def _code(code: types.CodeType) -> dict[str, Any]:
    """A code object as data (marshal's bytes depend on reference counts; repr shows addresses)."""
    consts = [
        _code(c)
        if isinstance(c, types.CodeType)
        else sorted(map(repr, c))
        if isinstance(c, frozenset)
        else repr(c)
        for c in code.co_consts
    ]
    return {"bytecode": code.co_code.hex(), "names": list(code.co_names), "consts": consts}


def _is_data(value: Any) -> bool:
    if isinstance(value, (str, bytes, int, float, bool)):
        return True
    if isinstance(value, (list, tuple, set, frozenset)):
        return all(_is_data(v) for v in value)
    if isinstance(value, dict):
        return all(_is_data(k) and _is_data(v) for k, v in value.items())
    return False


def _model_name(metric: Any) -> str | None:
    """The judge's model, for a reader of the cache: a ``model``/``model_name`` string attribute,
    or that of a model object the metric holds."""
    for name, value in sorted(_attributes(metric).items()):
        if name.lstrip("_") in ("model", "model_name") and isinstance(value, str):
            return value
        inner = getattr(value, "model_name", None) if not isinstance(value, (str, int, float)) else None
        if isinstance(inner, str):
            return inner
    return None


def _version_of(library: str) -> str | None:
    try:
        return importlib.metadata.version(library)
    except (importlib.metadata.PackageNotFoundError, ValueError):
        pass
    # A module whose distribution has another name (``_opik`` ships with ``opik``).
    for distribution in importlib.metadata.packages_distributions().get(library, []):
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _mask(text: str, secrets: Mapping[str, str]) -> str:
    for value, placeholder in secrets.items():
        if value in text:
            text = text.replace(value, placeholder)
    return text


def _canonical(value: Any) -> str:
    # Fingerprints are JSON data; a stray object is named by its class, never by its repr (an address).
    return json.dumps(
        value,
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        default=lambda o: _qualified(type(o)),
    )


def _digest(value: Any) -> str:
    return hashlib.sha256(_canonical(value).encode("utf-8")).hexdigest()
