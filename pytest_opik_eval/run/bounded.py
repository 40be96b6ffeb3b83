"""A span's input, output or metadata as stored: JSON data, bounded in size (an app may pass
whole documents to a tracked function, or objects JSON cannot hold)."""

from __future__ import annotations

import json
import re
from typing import Any

from pytest_opik_eval.collect.datasets.loading import nested_too_deep
from pytest_opik_eval.escaping import shorten

# At most this many characters of JSON; a bigger value is kept as its JSON text, cut.
MAX_FIELD_CHARS = 20_000

# How a value cut by ``bounded`` ends (``escaping.shorten``'s count of the characters left out).
_CUT = re.compile(r"\.\.\. \(\d+ more characters?\)\Z")

# As a task output is stored: a value JSON cannot hold is kept as its repr.
_json = json.JSONEncoder(ensure_ascii=False, default=repr).encode


def bounded(value: Any) -> Any:
    """``value`` as JSON data (what JSON cannot hold as its repr), or its JSON text cut to
    ``MAX_FIELD_CHARS`` when longer."""
    if value is None:
        return None
    kind = type(value)
    # What most spans hold, kept as it is (a copy): a short text, a number, a flat dict of those.
    if kind is str:
        return value if len(value) <= MAX_FIELD_CHARS else shorten(value, MAX_FIELD_CHARS)
    if kind is int or kind is bool or (kind is float and value - value == 0):
        return value
    if kind is dict and len(value) <= 16 and _flat(value):
        return dict(value)
    if nested_too_deep(value):  # or contains itself: json would recurse or raise
        return shorten(repr(value), MAX_FIELD_CHARS)
    try:
        text = _json(value)
    except (TypeError, ValueError):  # a key JSON cannot hold
        return shorten(repr(value), MAX_FIELD_CHARS)
    if len(text) > MAX_FIELD_CHARS:
        return shorten(text, MAX_FIELD_CHARS)
    # NaN and the infinities, written by json as bare tokens, are read back as their repr.
    return json.loads(text, parse_constant=lambda constant: repr(float(constant)))


def _flat(value: dict[Any, Any]) -> bool:
    """A dict of string keys and short texts, integers, finite floats and booleans: JSON as it is."""
    for key, inner in value.items():
        kind = type(inner)
        if type(key) is not str or not (
            (kind is str and len(inner) <= 1_000)
            or kind is int
            or kind is bool
            or inner is None
            or (kind is float and inner - inner == 0)
        ):
            return False
    return True


def was_cut(value: Any) -> bool:
    """Whether ``value`` is what ``bounded`` kept of a longer value: its text, cut."""
    # Only its end is searched: the text itself is the app's.
    cut = type(value) is str and len(value) > MAX_FIELD_CHARS
    return cut and _CUT.search(value, len(value) - 40) is not None
