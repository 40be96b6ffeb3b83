"""The judge cache (``--eval-judge-cache``): an LLM judge's scores, kept by everything that decides
them, so a rerun (a replay of recorded app calls, above all) does not pay for the judges again.

Which metrics are judges, and a judge's identity (its class, library version, code and
configuration, secrets masked), are ``run/judges.py``'s. The key is the sha256 of a canonical
JSON of: the judge's identity, the inputs of ``score()``, the item id and the trial index (so
repeated trials keep their own judge samples), and with ``judge_samples`` the sample's index from
the second sample on (the first keeps the key of a judge scored once). Whatever changes one of
them is scored again: an edited prompt never gets a stale score. Secrets (the values of the environment's
``*_KEY``/``*_TOKEN``/``*_SECRET``/``*_PASSWORD`` variables, and attributes named like an API
key) are replaced by a placeholder first, so a key rotated or set differently in CI keeps the
cache.

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
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from pytest_opik_eval.collect.datasets.loading import MAX_DEPTH
from pytest_opik_eval.escaping import escape_control
from pytest_opik_eval.files import write_atomically
from pytest_opik_eval.masking import mask
from pytest_opik_eval.metrics.tool_calls import stable
from pytest_opik_eval.run.fingerprint import Fingerprint, digest
from pytest_opik_eval.run.judges import FORMAT, OWN_KEY, Judge, Judges
from pytest_opik_eval.store.records import ScoreRecord

JUDGE_CACHE = "judge-cache"  # the folder under the store folder


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


class JudgeCache:
    """The cache of one process: files under ``folder``, the judges' identities (``judges``: the
    session's, shared with what records them), and the counts. ``strict`` (strict replay,
    ``--eval-record=none``): a judge whose score is not in the cache is not called, and its trial
    fails. ``notify`` shows the user a notice: a judge that cannot be cached, once."""

    def __init__(
        self,
        folder: Path,
        environ: Mapping[str, str] | None = None,
        *,
        strict: bool = False,
        notify: Callable[[str], None] | None = None,
        judges: Judges | None = None,
    ) -> None:
        self.folder = folder
        self.strict = strict
        self.counts = JudgeCounts()
        self.judges = Judges(environ) if judges is None else judges
        self._notify = notify
        self._lock = threading.Lock()  # the counts and the notices: trials score on pool threads
        self._told: set[str] = set()  # the judges whose key cannot see all: told once each

    def score(
        self,
        metric: Any,
        inputs: Mapping[str, Any],
        item_id: str,
        trial: int,
        score: Callable[[], list[ScoreRecord]],
        *,
        sample: int = 0,
        deferred: Callable[[], int] = lambda: 0,
    ) -> list[ScoreRecord]:
        """``score()``'s records: the cached ones of a judge, else those of calling it (kept when
        none failed: a judge that failed, a rate limit or a timeout, is called again next time).
        ``sample``: which of a judge's samples of this output (``judge_samples``), each cached
        apart; sample 0's key is the key of a judge scored once.
        When strict, a judge's score not in the cache fails the trial (``pytest.fail``, which
        leaves it pending) instead of calling the judge. A judge whose key cannot see all that
        decides its score is never cached: called every time, and in strict replay, never.
        ``deferred``: a count of the trial's requests deferred to a batch (--eval-batch); a call
        that deferred one is not cached, whatever it returned."""
        judge = self._judge(metric)
        if judge is None:
            return score()
        seen = self._inputs(inputs)
        if seen.unknown:  # an object among the inputs whose state cannot be read
            judge = dataclasses.replace(judge, unknown=judge.unknown + seen.unknown)
            self._tell(_uncached_notice(judge))
        parts = {"judge": judge.digest, "inputs": seen.data, "item_id": item_id, "trial": trial}
        if sample:  # sample 0 keeps the key a judge scored once has always had
            parts["sample"] = sample
        key = digest(parts)
        path = self.folder / key[:2] / f"{key}.json"
        cached = None if judge.unknown else _read(path, key)
        if cached is not None:
            with self._lock:
                self.counts.hits += 1
            return cached
        if self.strict:
            with self._lock:
                self.counts.missed += 1
            pytest.fail(_miss_message(judge, item_id, trial, sample), pytrace=False)
        before = deferred()
        records = score()
        if deferred() != before:  # its answer comes from a batch: scored when it has
            return records
        with self._lock:
            self.counts.scored += 1
        if not judge.unknown and not any(record.scoring_failed for record in records):
            self._write(path, key, judge, item_id, trial, sample, records)
        return records

    def _write(
        self,
        path: Path,
        key: str,
        judge: Judge,
        item_id: str,
        trial: int,
        sample: int,
        records: list[ScoreRecord],
    ) -> None:
        results = [r.model_dump(mode="json", exclude_none=True) for r in records]
        entry = {"format": FORMAT, "key": key, **judge.about, "item_id": item_id, "trial": trial}
        if sample:
            entry["sample"] = sample
        # Scrubbed as it is written, with the environment as it is now.
        text = json.dumps(
            self.judges.masked({**entry, "results": results}), indent=2, sort_keys=True, ensure_ascii=False
        )
        try:
            write_atomically(path, text + "\n")
        except OSError:
            pass  # a read-only or full folder: the score stands, it is only not kept

    def _judge(self, metric: Any) -> Judge | None:
        judge = self.judges.of(metric)
        if judge is not None and judge.unknown:
            with self._lock:
                new = judge.digest not in self._told
                self._told.add(judge.digest)
            if new:
                self._tell(_uncached_notice(judge))
        return judge

    def _inputs(self, inputs: Mapping[str, Any]) -> Fingerprint:
        # A trial's tool calls as what they say: their span ids are new each run.
        inputs = {name: stable(value) for name, value in inputs.items()}
        try:
            # JSON data, as inputs nearly always are: dumped in C, at any depth a dataset may have.
            text = json.dumps(inputs, sort_keys=True, ensure_ascii=False)
            return Fingerprint(mask(text, self.judges.secrets))
        except (TypeError, ValueError):
            # An object (a task's output may be one): its state as far as it can be seen.
            with self.judges.identifying:
                return self.judges.fingerprints.of(inputs, MAX_DEPTH + 1, "score()'s inputs")

    def _tell(self, message: str) -> None:
        if self._notify is not None:
            self._notify(message)


def _miss_message(judge: Judge, item_id: str, trial: int, sample: int = 0) -> str:
    # The item id is data, the metric's name its author's: escaped, as any text shown.
    of = f", judge sample {sample + 1}" if sample else ""
    where = f"item {escape_control(item_id)} (trial {trial}{of}): judge {_named(judge)}"
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


def _uncached_notice(judge: Judge) -> str:
    return (
        f"judge cache: judge {_named(judge)} is not cached, its score called afresh each time: "
        f"{_unseen(judge)}.\n  To cache it, {_OWN_KEY_FIX}."
    )


def _named(judge: Judge) -> str:
    return f"{escape_control(repr(judge.about['name']))} ({judge.about['class']})"


def _unseen(judge: Judge) -> str:
    return "its key cannot see what decides it: " + "; ".join(judge.unknown)


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
