"""The judge cache (``--eval-judge-cache``): an LLM judge's scores, kept by everything that decides
them, so a rerun (a replay of recorded app calls, above all) does not pay for the judges again.

A metric is a judge when its class says so (``judge = True``, on this package's ``BaseMetric``
or any metric), or when it is one of the Opik SDK's LLM-judge metrics: it holds an Opik model
(an ``OpikBaseModel``) among its attributes, or its class comes from the SDK's ``llm_judges``.
Heuristic metrics are cheap and deterministic: never cached.

The key is the sha256 of a canonical JSON of: the metric's class (module and qualified name), the
version of the library it comes from, its code (``run/fingerprint.py``: the source of the class
and of its bases that are the project's, their class attributes, and what the methods scoring
runs read, followed through the project's functions and modules transitively: a helper
function, a prompt in another module, a default argument value, a closure; a library's code by
its name and version), the metric's whole configuration (its attributes, recursively: the model
and its name, the prompt, the temperature, a client by its endpoint...), the inputs of
``score()``, the item id and the trial index (so repeated trials keep their own judge samples).
Whatever changes one of them is scored again: an edited prompt never gets a stale score. Secrets
(the values of the environment's ``*_KEY``/``*_TOKEN``/``*_SECRET``/``*_PASSWORD`` variables,
and attributes named like an API key) are replaced by a placeholder first, so a key rotated or
set differently in CI keeps the cache.

What the key cannot see (a file the judge reads when it scores, an object whose state Python
cannot read) makes a judge uncacheable: it is called every time (never in strict replay), and a
notice names what was not seen, once, unless the metric gives its own key (``judge_cache_key``).

Each result is a plain JSON file, ``<store folder>/judge-cache/<2 hex>/<key>.json``, written
atomically (a temporary file renamed): one key always means the same content, so threads,
pytest-xdist workers and CI shards never clash, and merging shards' folders is a plain copy.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from pytest_opik_eval.collect.datasets.loading import MAX_DEPTH
from pytest_opik_eval.escaping import escape_control
from pytest_opik_eval.files import write_atomically
from pytest_opik_eval.masking import EnvironmentSecrets, Scrubber, mask
from pytest_opik_eval.run.fingerprint import Fingerprint, Fingerprints, attributes, digest, qualified
from pytest_opik_eval.store.records import ScoreRecord

JUDGE_CACHE = "judge-cache"  # the folder under the store folder
FORMAT = 2  # of the key and of the files: a new format starts a new cache
# What a metric defines to give its own key: a method (or a value) returning what decides its
# score, where the plugin cannot see it all (a prompt read from a file when it scores).
OWN_KEY = "judge_cache_key"

# How deep a metric's configuration is walked (a model inside the metric, its client, its
# settings...); the inputs, dataset data, are walked as deep as a dataset may nest.
_CONFIGURATION_DEPTH = 12


@dataclasses.dataclass
class JudgeCounts:
    """Judge scores served from the cache, scored by calling the judge, and missed: not in the
    cache in strict replay, where judges may not reach the network (the trial fails)."""

    hits: int = 0
    scored: int = 0
    missed: int = 0

    def to_json(self) -> dict[str, int]:
        return {"hits": self.hits, "scored": self.scored, "missed": self.missed}

    def add(self, other: Mapping[str, int]) -> None:
        self.hits += int(other.get("hits", 0))
        self.scored += int(other.get("scored", 0))
        self.missed += int(other.get("missed", 0))


@dataclasses.dataclass(frozen=True)
class _Judge:
    digest: str  # of the metric's class, code, library version and configuration
    about: dict[str, Any]  # the readable parts, stored with each result
    unknown: tuple[str, ...] = ()  # what decides its score that the key cannot see: never cached


class JudgeCache:
    """The cache of one process: files under ``folder``, the judges' identities (computed once per
    metric object, on first use), and the counts. ``strict`` (strict replay, ``--eval-record=none``):
    a judge whose score is not in the cache is not called, and its trial fails. ``notify`` shows
    the user a notice: a judge that cannot be cached, once."""

    def __init__(
        self,
        folder: Path,
        environ: Mapping[str, str] | None = None,
        *,
        strict: bool = False,
        notify: Callable[[str], None] | None = None,
    ) -> None:
        self.folder = folder
        self.strict = strict
        self.counts = JudgeCounts()
        environ = os.environ if environ is None else environ
        # Read again whenever the environment changed: a key a session fixture sets is masked too.
        self._secrets = EnvironmentSecrets(environ)
        self._fingerprints = Fingerprints(self._secrets, environ)
        self._notify = notify
        self._lock = threading.Lock()  # the counts and the memos: trials score on pool threads
        # One judge fingerprinted at a time: the fingerprints' memos of code are shared.
        self._identifying = threading.Lock()
        # By id(): a metric object may not be hashable. The metric is kept, so its id stays its own.
        self._judges: dict[int, tuple[Any, _Judge | None]] = {}

    def score(
        self,
        metric: Any,
        inputs: Mapping[str, Any],
        item_id: str,
        trial: int,
        score: Callable[[], list[ScoreRecord]],
    ) -> list[ScoreRecord]:
        """``score()``'s records: the cached ones of a judge, else those of calling it (kept when
        none failed: a judge that failed, a rate limit or a timeout, is called again next time).
        When strict, a judge's score not in the cache fails the trial (``pytest.fail``, which
        leaves it pending) instead of calling the judge. A judge whose key cannot see all that
        decides its score is never cached: called every time, and in strict replay, never."""
        judge = self._judge(metric)
        if judge is None:
            return score()
        seen = self._inputs(inputs)
        if seen.unknown:  # an object among the inputs whose state cannot be read
            judge = dataclasses.replace(judge, unknown=judge.unknown + seen.unknown)
            self._tell(_uncached_notice(judge))
        key = digest({"judge": judge.digest, "inputs": seen.data, "item_id": item_id, "trial": trial})
        path = self.folder / key[:2] / f"{key}.json"
        cached = None if judge.unknown else _read(path, key)
        if cached is not None:
            with self._lock:
                self.counts.hits += 1
            return cached
        if self.strict:
            with self._lock:
                self.counts.missed += 1
            pytest.fail(_miss_message(judge, item_id, trial), pytrace=False)
        records = score()
        with self._lock:
            self.counts.scored += 1
        if not judge.unknown and not any(record.scoring_failed for record in records):
            self._write(path, key, judge, item_id, trial, records)
        return records

    def _write(
        self, path: Path, key: str, judge: _Judge, item_id: str, trial: int, records: list[ScoreRecord]
    ) -> None:
        results = [r.model_dump(mode="json", exclude_none=True) for r in records]
        entry = {"format": FORMAT, "key": key, **judge.about, "item_id": item_id, "trial": trial}
        # Scrubbed as it is written, with the environment as it is now.
        text = json.dumps(
            self._masked({**entry, "results": results}), indent=2, sort_keys=True, ensure_ascii=False
        )
        try:
            write_atomically(path, text + "\n")
        except OSError:
            pass  # a read-only or full folder: the score stands, it is only not kept

    def _judge(self, metric: Any) -> _Judge | None:
        with self._lock:
            known = self._judges.get(id(metric))
        if known is not None:
            return known[1]
        with self._identifying:
            if id(metric) not in self._judges:  # another thread may have just identified it
                judge = self._identify(metric) if is_judge(metric) else None
                if judge is not None and judge.unknown:
                    self._tell(_uncached_notice(judge))
                with self._lock:
                    self._judges[id(metric)] = (metric, judge)
        return self._judges[id(metric)][1]

    def _identify(self, metric: Any) -> _Judge:
        cls = type(metric)
        library = cls.__module__.split(".")[0]
        about = {
            "class": qualified(cls),
            "name": str(getattr(metric, "name", cls.__name__)),
            "model": _model_name(metric),
            "library": library,
            "library_version": self._fingerprints.version(library),
        }
        about = self._masked(about)
        if getattr(metric, OWN_KEY, None) is not None:
            # Its author says what decides its score: that, and the source of its classes.
            code = Fingerprint(self._fingerprints.sources(cls))
            configuration = self._own_key(metric)
        else:
            # The code of its class and bases, and what it reaches; its configuration.
            code = self._fingerprints.class_code(cls)
            configuration = self._fingerprints.configuration(metric, _CONFIGURATION_DEPTH)
        parts = {"format": FORMAT, **about, "code": code.data, "configuration": configuration.data}
        unknown = tuple(dict.fromkeys(code.unknown + configuration.unknown))
        return _Judge(digest(parts), about, unknown)

    def _own_key(self, metric: Any) -> Fingerprint:
        """What the metric's ``judge_cache_key`` (a method, or a value) says decides its score."""
        where = f"{qualified(type(metric))}.{OWN_KEY}"
        own = getattr(metric, OWN_KEY)
        try:
            value = own() if callable(own) else own
        except Exception as error:
            return Fingerprint(None, (f"{where}() raised {type(error).__name__}: {error}",))
        return self._fingerprints.of(value, _CONFIGURATION_DEPTH, where)

    def _inputs(self, inputs: Mapping[str, Any]) -> Fingerprint:
        try:
            # JSON data, as inputs nearly always are: dumped in C, at any depth a dataset may have.
            return Fingerprint(mask(json.dumps(inputs, sort_keys=True, ensure_ascii=False), self._secrets))
        except (TypeError, ValueError):
            # An object (a task's output may be one): its state as far as it can be seen.
            with self._identifying:
                return self._fingerprints.of(inputs, MAX_DEPTH + 1, "score()'s inputs")

    def _tell(self, message: str) -> None:
        if self._notify is not None:
            self._notify(message)

    def _masked(self, value: Any) -> Any:
        """``value`` (JSON data) scrubbed as the recordings are (see ``masking``), with the
        environment's secrets as it is now."""
        return Scrubber(self._secrets).value(value)


def _miss_message(judge: _Judge, item_id: str, trial: int) -> str:
    # The item id is data, the metric's name its author's: escaped, as any text shown.
    where = f"item {escape_control(item_id)} (trial {trial}): judge {_named(judge)}"
    if judge.unknown:
        return (
            f"{where} cannot be cached: {_unseen(judge)}; and strict replay (--eval-record=none) "
            "keeps judges off the network.\n"
            f"  fix: {_OWN_KEY_FIX}; or let judges run live in strict replay with "
            "--eval-judge-cache=off (the trial stays pending)"
        )
    return (
        f"{where} has no cached score, and strict replay (--eval-record=none) keeps judges off the network.\n"
        "  fix: score it once while the judge's model can be reached, with --eval-record=new_episodes "
        "(or --eval-judge-cache=on without --eval-record=none); or let judges run live in strict "
        "replay with --eval-judge-cache=off (the trial stays pending)"
    )


_OWN_KEY_FIX = (
    f"give the metric a {OWN_KEY}() method that returns what decides its score (the prompt's text, "
    "the model, the endpoint), which the cache then keys it by (README: Cache the judges' scores)"
)


def _uncached_notice(judge: _Judge) -> str:
    return (
        f"judge cache: judge {_named(judge)} is not cached, its score called afresh each time: "
        f"{_unseen(judge)}.\n  To cache it, {_OWN_KEY_FIX}."
    )


def _named(judge: _Judge) -> str:
    return f"{escape_control(repr(judge.about['name']))} ({judge.about['class']})"


def _unseen(judge: _Judge) -> str:
    return "its key cannot see what decides it: " + "; ".join(judge.unknown)


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
    return model_class is not None and any(isinstance(v, model_class) for v in attributes(metric).values())


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


def _model_name(metric: Any) -> str | None:
    """The judge's model, for a reader of the cache: a ``model``/``model_name`` string attribute,
    or that of a model object the metric holds."""
    for name, value in sorted(attributes(metric).items()):
        if name.lstrip("_") in ("model", "model_name") and isinstance(value, str):
            return value
        inner = getattr(value, "model_name", None) if not isinstance(value, (str, int, float)) else None
        if isinstance(inner, str):
            return inner
    return None
