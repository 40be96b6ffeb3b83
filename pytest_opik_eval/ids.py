"""Ids: UUID version 7 ids (RFC 9562), time-ordered as the Opik server expects for its
entities; the node ids of trial test cases, which are the resume key; and the ids and versions
derived from content (a dataset item without an id, a dataset's version)."""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

_lock = threading.Lock()
_last = 0
_clock = time.time_ns  # the time ids carry; a test may set it back to play a long outage


def uuid7() -> str:
    """Return a new UUID v7 as a string.

    The 48-bit millisecond timestamp is followed by a 12-bit counter seeded from random bits
    (RFC 9562, method 1), so ids made in one process sort in creation order even within one
    millisecond; the store relies on that order for "the most recent run".
    """
    global _last
    random = int.from_bytes(os.urandom(10), "big")  # one system call: 11 bits for the counter, 62 below
    with _lock:
        candidate = (_clock() // 1_000_000) << 12 | random >> 69
        # Never go backwards: a clock step or a burst within one millisecond bumps the counter.
        _last = stamp = max(candidate, _last + 1)
    value = (stamp >> 12) << 80 | 0x7 << 76 | (stamp & 0xFFF) << 64 | 0b10 << 62 | random & ((1 << 62) - 1)
    return _uuid_text(value)


def _uuid_text(value: int) -> str:
    """``str(uuid.UUID(int=value))`` for a value of 128 bits, formatted directly: the UUID and its
    str() cost twice as much, for every trial (its attempt's id, and its own when planned)."""
    text = f"{value:032x}"
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def now() -> datetime:
    """The time of the clock ids carry (``_clock``), in UTC: the session's clock, which the age
    of what it reads (a stored calibration) is measured against, and which a test may set."""
    return datetime.fromtimestamp(_clock() / 1e9, timezone.utc)


def uuid7_for(parent: str, key: str) -> str:
    """A UUID v7 derived from another and a key: the parent's time, and bits from a hash of both.

    Processes that plan the same run (pytest-xdist workers) derive the same ids for the same
    experiments and trials without talking to each other."""
    digest = int.from_bytes(hashlib.sha256(f"{parent}/{key}".encode()).digest()[:10], "big")
    stamp = int(parent.replace("-", "")[:12], 16)
    value = stamp << 80 | 0x7 << 76 | (digest >> 68 & 0xFFF) << 64
    value |= 0b10 << 62 | digest & ((1 << 62) - 1)
    return _uuid_text(value)


def uuid7_from_name(name: str) -> str:
    """A UUID v7 that depends only on ``name``: machines that are given the same run name (a CI
    run number) agree on the run's id without talking to each other. Its time part is a hash,
    not a time; the store orders runs by their creation time."""
    digest = hashlib.sha256(f"pytest-opik-eval/{name}".encode()).hexdigest()
    parent = f"{digest[:8]}-{digest[8:12]}-7000-8000-000000000000"
    return uuid7_for(parent, name)


def sampled_judge(identity: str, samples: int) -> str:
    """The identity of a judge whose score is the mean or majority of ``samples`` calls
    (``judge_samples``), from its identity called once (``run/judges.py``): another judge to its
    calibration, as it errs otherwise; called once, the same."""
    if samples == 1:
        return identity
    text = canonical_json({"judge": identity, "samples": samples})
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def case_id(item_id: str, trial: int) -> str:
    """A trial's part of its test case's id: test_qa[<item id>-t<trial>]. It is the resume key,
    so it must stay stable."""
    return f"{_ascii_id(item_id)}-t{trial}"


def node_id(test: str, params: str, item_id: str, trial: int) -> str:
    """The node id pytest gives the test case of this trial."""
    return f"{test}[{params + '-' if params else ''}{case_id(item_id, trial)}]"


def _ascii_id(item_id: str) -> str:
    """Percent-encode what pytest would escape itself (non-ASCII, backslash, control characters),
    so that the id pytest shows is exactly this one."""
    if item_id.isascii() and item_id.isprintable() and "\\" not in item_id and "%" not in item_id:
        return item_id
    return "".join(
        c if c.isascii() and c.isprintable() and c not in "\\%" else "".join(f"%{b:02X}" for b in c.encode())
        for c in item_id
    )


def content_id(item: Mapping[str, Any]) -> str:
    """Return the id derived from an item's content.

    The first 16 hex digits of the SHA-256 of the item's canonical JSON, so an
    item keeps its id across runs and wherever it sits in the file.
    """
    return _digest(canonical_json(item))


def content_hash(items: Sequence[Mapping[str, Any]]) -> str:
    """Return the version of a list of items (ids included).

    The first 16 hex digits of the SHA-256 of the list's canonical JSON.
    """
    return _digest(canonical_json(list(items)))


# Same output as json.dumps(value, sort_keys=True, separators=(",", ":"),
# ensure_ascii=False); one shared encoder skips json.dumps's per-call setup,
# which is a large share of the time for many small items.
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical_json(value: object) -> str:
    """The canonical JSON text of a value: sorted keys, no spaces; what content ids hash."""
    return _ENCODER.encode(value)


def _digest(text: str) -> str:
    # surrogatepass: JSON may contain lone surrogates ("\ud800"), which
    # strict UTF-8 cannot encode; they must still hash, and deterministically.
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
