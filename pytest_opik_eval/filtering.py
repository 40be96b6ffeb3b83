"""The Opik dataset filter language: parse it here, match items locally.

Filters are written in Opik's query language (``data.category = "geo" AND tags contains "x"``).
We parse them ourselves rather than handing the text to the server for two reasons: a typo must
fail when tests are collected, with a caret under the mistake, not as a server error halfway
through a run; and datasets that never reach the server (local files, offline runs) must select
exactly the items the server would select. So the parser accepts the grammar of Opik's SDK
(``opik_query_language.py``), restricted to the dataset-item fields that make sense here, and
``Condition.matches`` mirrors the SQL of the backend's ``FilterQueryBuilder``.
"""

from __future__ import annotations

import dataclasses
import json
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

from pytest_opik_eval.exceptions import EvalError

_TEXT_OPERATORS = ("=", "!=", "contains", "not_contains", "starts_with", "ends_with")
# The operators Opik's SDK allows on each field (``>``/``<`` are not allowed on data).
_OPERATORS: dict[str, tuple[str, ...]] = {
    "id": (*_TEXT_OPERATORS, ">", "<"),
    "data": _TEXT_OPERATORS,
    "tags": ("=", "!=", "contains", "not_contains", "is_empty", "is_not_empty"),
}
_KNOWN_OPERATORS = frozenset(op for ops in _OPERATORS.values() for op in ops)
_NO_VALUE = frozenset({"is_empty", "is_not_empty"})
# The column types Opik's backend expects in the wire form.
_WIRE_TYPES = {"id": "string", "data": "map", "tags": "list"}

# Tokens, matched at the cursor (never searched for), so each error knows its column.
_IDENT = re.compile(r"[A-Za-z0-9_]*")
_OPERATOR = re.compile(r"[=!<>]+|[A-Za-z_]*")  # a run of symbols, so "==" is reported whole
_WORD = re.compile(r"[A-Za-z]*")
_NON_SPACE = re.compile(r"\S*")
_NUMBER = re.compile(r"-?[0-9]+(?:\.[0-9]+)?")


class FilterError(EvalError, ValueError):
    """A filter that cannot be parsed; ``str(err)`` is the complete message, caret included."""


# What each condition looks at, as the server sees it. Opik stores every data value as compact
# JSON text, compares ``=``/``starts_with``/``ends_with`` on that text with its quotes removed,
# and ``contains`` on the raw JSON text. A missing key reads as "" (ClickHouse's default), so
# ``!=`` and ``not_contains`` match items that lack the key. Text subjects are lower-cased here
# because the server compares text case-insensitively (only tag membership is exact).


def _json(value: Any) -> str:
    # default=str: a value JSON cannot encode (a date read from YAML) still gets a text to match
    # instead of crashing the run.
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


def _data_json(key: str, item: Mapping[str, Any]) -> str:
    return _json(item[key]).lower() if key in item else ""


def _data_unquoted(key: str, item: Mapping[str, Any]) -> str:
    if key not in item:
        return ""
    value = item[key]
    text = value if isinstance(value, str) else _json(value)
    return text.replace('"', "").lower()


def _id_text(item: Mapping[str, Any]) -> str:
    value = item.get("id")
    return "" if value is None else str(value).lower()


def _tags(item: Mapping[str, Any]) -> list[Any]:
    tags = item.get("tags")
    return tags if isinstance(tags, list) else []


def _not_contains(text: str, needle: str) -> bool:
    return needle not in text


def _any_tag_contains(tags: list[Any], needle: str) -> bool:
    return any(needle in str(tag).lower() for tag in tags)


def _no_tag_contains(tags: list[Any], needle: str) -> bool:
    return not _any_tag_contains(tags, needle)


def _lacks(tags: list[Any], value: str) -> bool:
    return value not in tags


def _is_empty(tags: list[Any], _: str) -> bool:
    return not tags


def _is_not_empty(tags: list[Any], _: str) -> bool:
    return bool(tags)


# Module-level functions and partials of them only (no lambdas or closures), so a Condition
# stays picklable like any other value.
_Subject = Callable[[Mapping[str, Any]], Any]
_Test = Callable[[Any, str], bool]
_TEXT_TESTS: dict[str, _Test] = {
    "=": operator.eq,
    "!=": operator.ne,
    "contains": operator.contains,
    "not_contains": _not_contains,
    "starts_with": str.startswith,
    "ends_with": str.endswith,
    ">": operator.gt,  # the server compares lower(id) > lower(value): text, not numbers
    "<": operator.lt,
}
_TAG_TESTS: dict[str, _Test] = {
    "=": operator.contains,  # has(tags, value): exact, case-sensitive membership
    "!=": _lacks,
    "contains": _any_tag_contains,
    "not_contains": _no_tag_contains,
    "is_empty": _is_empty,
    "is_not_empty": _is_not_empty,
}


@dataclasses.dataclass(frozen=True)
class Condition:
    """One ``field operator value`` comparison; build it with :func:`parse_filter`."""

    field: str
    key: str | None
    operator: str
    value: str
    # Where the condition starts in the filter text (0-based), for error messages.
    at: int = dataclasses.field(default=0, compare=False, repr=False)
    # Chosen once here, because matches() runs for every item of the dataset.
    _subject: _Subject = dataclasses.field(init=False, repr=False, compare=False)
    _test: _Test = dataclasses.field(init=False, repr=False, compare=False)
    _needle: str = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        exact = self.field == "tags" and self.operator in ("=", "!=")
        if self.field == "tags":
            subject: _Subject = _tags
        elif self.field == "id":
            subject = _id_text
        elif self.operator in ("contains", "not_contains"):
            subject = partial(_data_json, self.key or "")
        else:
            subject = partial(_data_unquoted, self.key or "")
        tests = _TAG_TESTS if self.field == "tags" else _TEXT_TESTS
        object.__setattr__(self, "_subject", subject)
        object.__setattr__(self, "_test", tests[self.operator])
        object.__setattr__(self, "_needle", self.value if exact else self.value.lower())

    def matches(self, item: Mapping[str, Any]) -> bool:
        return self._test(self._subject(item), self._needle)


@dataclasses.dataclass(frozen=True)
class Filter:
    """A parsed filter: the conditions of ``text``, all of which an item must match."""

    text: str
    conditions: tuple[Condition, ...]

    def matches(self, item: Mapping[str, Any]) -> bool:
        return all(condition.matches(item) for condition in self.conditions)

    def check_keys(self, items: Sequence[Mapping[str, Any]], source: str) -> None:
        """Raise :class:`FilterError` for a ``data.<key>`` that no item has: a misspelt key
        would otherwise match nothing (or, with ``!=``, everything) and skip the eval quietly.
        Items carry any keys they like, so a key is known when at least one item has it."""
        if not items:
            return  # nothing to match, and nothing to learn the keys from
        for condition in self.conditions:
            key = condition.key
            if condition.field != "data" or key is None or any(key in item for item in items):
                continue
            keys = sorted({k for item in items for k in item if k not in ("id", "tags")})
            shown = ", ".join(f"data.{_key_text(k)}" for k in keys[:_LISTED_KEYS])
            more = f" and {len(keys) - _LISTED_KEYS} more" if len(keys) > _LISTED_KEYS else ""
            raise _error(
                self.text,
                f"unknown field data.{_key_text(key)}: no item of {source} has the key {key!r}; "
                f"the fields are id, tags, {shown}{more}",
                condition.at,
            )

    def to_opik(self) -> list[dict[str, str]]:
        """The filter as Opik's SDK sends it to the server (JSON-encoded as ``filters``)."""
        return [
            {
                "field": c.field,
                "key": c.key or "",
                "type": _WIRE_TYPES[c.field],
                "operator": c.operator,
                "value": c.value,
            }
            for c in self.conditions
        ]


def parse_filter(text: str) -> Filter:
    """Parse ``text``; raise :class:`FilterError` pointing at the first mistake."""
    parser = _Parser(text)
    if not text.strip():
        raise parser.error('the filter is empty; write a condition such as data.category = "geo"')
    conditions = [parser.condition()]
    while parser.joiner():
        conditions.append(parser.condition())
    return Filter(text, tuple(conditions))


_LISTED_KEYS = 20  # the item keys an unknown-field error lists before "and N more"
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_]+")


def _key_text(key: str) -> str:
    """A key as the filter language writes it: bare, or quoted when it has other characters."""
    return key if _PLAIN_KEY.fullmatch(key) else '"' + key.replace('"', '""') + '"'


def _error(text: str, message: str, at: int) -> FilterError:
    # One character per column, so tabs and newlines would break the caret's alignment.
    shown = "".join(" " if ch.isspace() else ch for ch in text)
    return FilterError(f"invalid filter: {message}, at column {at + 1}\n  {shown}\n  {' ' * at}^")


class _Parser:
    """A cursor over the filter text; each method consumes one part or raises FilterError."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def error(self, message: str, pos: int | None = None) -> FilterError:
        return _error(self.text, message, self.pos if pos is None else pos)

    def peek(self) -> str:
        return self.text[self.pos : self.pos + 1]  # "" at the end

    def take(self, pattern: re.Pattern[str]) -> str:
        match = pattern.match(self.text, self.pos)
        assert match is not None  # every token pattern can match the empty string
        self.pos = match.end()
        return match.group()

    def skip_space(self) -> bool:
        start = self.pos
        while self.peek().isspace():
            self.pos += 1
        return self.pos > start

    def quoted(self, what: str) -> str:
        """A string between the quotes at the cursor, in which a doubled quote is one quote."""
        quote, start = self.peek(), self.pos
        self.pos += 1
        parts: list[str] = []
        while True:
            end = self.text.find(quote, self.pos)
            if end < 0:
                raise self.error(f"unterminated {what}: add the closing {quote}", start)
            parts.append(self.text[self.pos : end])
            self.pos = end + 1
            if self.peek() != quote:
                return quote.join(parts)
            self.pos += 1

    def condition(self) -> Condition:
        self.skip_space()
        start = self.pos
        name, key = self.field()
        written = self.text[start : self.pos]
        self.skip_space()
        allowed = _OPERATORS[name]
        operator_at = self.pos
        op = self.take(_OPERATOR)
        if op in _KNOWN_OPERATORS and op not in allowed:
            raise self.error(
                f"{op} is not supported on {written}; use one of {', '.join(allowed)}",
                operator_at,
            )
        if op not in allowed:
            raise self.error(f"expected an operator ({', '.join(allowed)}) after {written}", operator_at)
        return Condition(name, key, op, "" if op in _NO_VALUE else self.value(op), at=start)

    def field(self) -> tuple[str, str | None]:
        start = self.pos
        name = self.take(_IDENT)
        if name in ("id", "tags"):
            return name, None
        if not name:
            raise self.error("expected a field: id, tags or data.<key>")
        if name != "data":
            raise self.error(
                f"unknown field {name}; the fields are id, tags and data.<key>"
                f" (for the item's key {name} write data.{name})",
                start,
            )
        if self.peek() != ".":
            raise self.error("data needs a key: write data.<key>, e.g. data.category")
        self.pos += 1
        if self.peek() in ('"', "'"):
            key = self.quoted("quoted key")
        else:
            key = self.take(_IDENT)
            if not key:
                raise self.error(
                    "expected a key after data.: letters, digits and _, or a quoted name"
                    ' such as data."my key"'
                )
        if self.peek() == ".":
            raise self.error("nested keys are not supported; only the item's top-level keys can be filtered")
        return "data", key

    def value(self, op: str) -> str:
        self.skip_space()
        start = self.pos
        if self.peek() == '"':
            return self.quoted("string")
        if self.peek() == "'":
            raise self.error('values take double quotes, not single quotes: write "..."')
        word = self.take(_NON_SPACE)
        if _NUMBER.fullmatch(word):
            return word  # kept as text: Opik sends numbers as strings
        if not word:
            raise self.error(f"expected a value after {op}: a double-quoted string or a number")
        suggestion = '"' + word.replace('"', '""') + '"'
        raise self.error(
            f"{word} is not a value; put text in double quotes ({suggestion})"
            " and write numbers bare (5, -3.5)",
            start,
        )

    def joiner(self) -> bool:
        """Consume the AND before another condition; False at the end of the filter."""
        spaced = self.skip_space()
        if self.pos == len(self.text):
            return False
        start = self.pos
        word = self.take(_WORD).lower()
        if word == "or":
            raise self.error(
                "OR is not supported; an item must match every condition, so narrow the"
                " selection with AND or split the test into one test per alternative",
                start,
            )
        if word == "and" and spaced and (self.skip_space() or self.pos == len(self.text)):
            return True
        raise self.error("expected AND (with spaces around it) or the end of the filter", start)
