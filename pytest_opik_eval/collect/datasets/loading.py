"""Turn a ``@pytest.mark.eval(dataset=...)`` argument into validated, identified items.

A dataset may be a ``.jsonl``, ``.json`` or ``.csv`` file, a list of dicts, or a
zero-argument callable returning dicts. Whatever the source, every item comes
out as a new dict with a string ``"id"`` first, and the whole dataset gets a
content hash so that stored results can tell when the data has changed.
"""

from __future__ import annotations

import copy
import csv
import io
import json
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

from pytest_opik_eval.collect.labels import LABELS_FIELD, label_problem
from pytest_opik_eval.escaping import shorten
from pytest_opik_eval.exceptions import EvalError
from pytest_opik_eval.ids import canonical_json, content_hash, content_id

_ACCEPTED = (
    "pass a path to a .jsonl, .json or .csv file (str or pathlib.Path), "
    "a list of dicts, or a zero-argument function returning a list of dicts"
)
_EXTENSIONS = (
    ".jsonl (one JSON object per line), .json (a JSON list of objects) "
    "or .csv (a header row, then one item per row)"
)
_JSON_TYPES = "str, int, float, bool, None, lists and dicts with str keys"

# How deep lists and objects may nest in an item or a task output. Far beyond real data, and far
# enough below Python's recursion limit that copying, hashing and storing one (each a recursion
# per level, at the depth of pytest's own stack) cannot fail: a deeper item is set aside with a
# message naming its place, and the other items run.
MAX_DEPTH = 200


class DatasetError(EvalError):
    """A dataset could not be loaded.

    ``str(err)`` is the complete message for the user: what is wrong, where
    (file and line, or position in the list) and how to fix it.
    """


@dataclass(frozen=True)
class Dataset:
    """A loaded dataset.

    Attributes:
        source: How to show the dataset: the path as written for files,
            ``"<list of N items>"`` for lists, ``"<callable module.qualname>"``
            for callables.
        path: The resolved file path, or ``None`` for lists and callables.
        items: New dicts in source order, each with a unique str ``"id"`` first.
        version: ``content_hash(items)``; changes whenever the data changes.
    """

    source: str
    path: Path | None
    items: list[dict[str, Any]]
    version: str
    # Items set aside because they could not be processed (nested too deep), as (place, message):
    # each becomes a failing test case of its own, so the other items still run.
    rejected: list[tuple[str, str]] = field(default_factory=list)


def load_dataset(source: object, base_dir: Path, labels_field: str = LABELS_FIELD) -> Dataset:
    """Load and validate a dataset.

    Args:
        source: A ``str``/``os.PathLike`` path to a ``.jsonl``, ``.json`` or
            ``.csv`` file (relative to ``base_dir`` unless absolute), a list
            or tuple of dicts, or a zero-argument callable returning an
            iterable of dicts.
        base_dir: The folder of the test file that names the dataset.
        labels_field: The key of an item's human labels (see ``collect.labels``), checked here
            where the item's place is known.

    Raises:
        DatasetError: If the source cannot be read or an item is invalid.
    """
    if isinstance(source, (str, os.PathLike)):
        written = os.fsdecode(source)
        path = (base_dir / written).resolve()
        # JSON files are numbered by item, JSONL and CSV files by line.
        unit = "item" if path.suffix.lower() == ".json" else "line"
        origin = _Origin(unit, prefix=f"{written} ", suffix="", container=f"in {written}")
        items, version, rejected = _normalise(_read_file(written, path, base_dir), origin, labels_field)
        return Dataset(source=written, path=path, items=items, version=version, rejected=rejected)
    if isinstance(source, (list, tuple)):
        origin = _Origin("item", prefix="", suffix=" of the list", container="in the list")
        items, version, rejected = _normalise(enumerate(source, 1), origin, labels_field)
        return Dataset(
            source=f"<list of {len(items)} items>", path=None, items=items, version=version, rejected=rejected
        )
    if callable(source):
        name = _callable_name(source)
        returned = f"returned by {name}"
        origin = _Origin("item", prefix="", suffix=f" {returned}", container=returned)
        items, version, rejected = _normalise(enumerate(_call(source, name), 1), origin, labels_field)
        return Dataset(
            source=f"<callable {name}>", path=None, items=items, version=version, rejected=rejected
        )
    raise DatasetError(
        f"unsupported dataset {_short_repr(source)} of type {type(source).__name__}; {_ACCEPTED}"
    )


@dataclass(frozen=True)
class _Origin:
    """Where items come from, to phrase error messages.

    Items are numbered by ``unit`` (file line, or 1-based item index). An
    item's place is ``prefix + position + suffix`` ("data/qa.jsonl line 4",
    "item 3 of the list"); ``container`` names the source in messages that
    mention two positions ("in data/qa.jsonl: line 3 and line 7").
    """

    unit: str
    prefix: str
    suffix: str
    container: str

    def position(self, number: int) -> str:
        return f"{self.unit} {number}"

    def place(self, number: int) -> str:
        return f"{self.prefix}{self.position(number)}{self.suffix}"


def nested_too_deep(value: object, limit: int = MAX_DEPTH) -> bool:
    """Whether lists and dicts nest more than ``limit`` levels in ``value``; without recursion,
    so that the check itself cannot overflow."""
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        current, depth = stack.pop()
        inner: Iterable[object]
        if isinstance(current, dict):
            inner = current.values()
        elif isinstance(current, (list, tuple)):
            inner = current
        else:
            continue
        if depth > limit:
            return True
        stack.extend((v, depth + 1) for v in inner if isinstance(v, (dict, list, tuple)))
    return False


@dataclass(frozen=True)
class _TooDeep:
    """A raw item the JSON reader could not even decode: nested past Python's recursion limit."""

    line: int | None = None  # where it starts, in a .json file (numbered by item)


def _too_deep(origin: _Origin, number: int, line: int | None) -> str:
    where = origin.place(number) + ("" if line is None else f" (line {line})")
    return (
        f"{where}: the item is nested more than {MAX_DEPTH} levels deep (lists and "
        "objects inside each other); flatten it, or remove it from the dataset (the other items run)"
    )


def _normalise(
    raw_items: Iterable[tuple[int, object]], origin: _Origin, labels_field: str = LABELS_FIELD
) -> tuple[list[dict[str, Any]], str, list[tuple[str, str]]]:
    """Validate numbered raw items, give each an id, and return them with their content hash,
    and the items set aside (too deep to process) as (place, message)."""
    items: list[dict[str, Any]] = []
    rejected: list[tuple[str, str]] = []
    numbers: list[int] = []
    # id -> (number, whether the id was derived from content), to name both
    # places of a duplicate in one pass.
    seen: dict[str, tuple[int, bool]] = {}
    for number, raw in raw_items:
        if isinstance(raw, _TooDeep) or nested_too_deep(raw):
            line = raw.line if isinstance(raw, _TooDeep) else None
            rejected.append((origin.position(number), _too_deep(origin, number, line)))
            continue
        item, derived = _normalise_item(raw, origin, number)
        if labels_field in item:
            problem = label_problem(item[labels_field], labels_field)
            if problem is not None:
                raise DatasetError(f"{origin.place(number)}: {problem}")
        item_id = item["id"]
        if item_id in seen:
            first, first_derived = seen[item_id]
            both = f"{origin.position(first)} and {origin.position(number)}"
            if derived and first_derived:
                raise DatasetError(
                    f"duplicate item {origin.container}: {both} have the same content and "
                    'no "id"; remove one, or give each an explicit unique "id"'
                )
            raise DatasetError(
                f"duplicate item id {json.dumps(item_id, ensure_ascii=False)} "
                f'{origin.container}: {both}; give each item a unique "id"'
            )
        seen[item_id] = (number, derived)
        items.append(item)
        numbers.append(number)
    # Items are snapshotted into the store as JSON, so anything that would not
    # survive the trip is rejected here, naming the item rather than failing later.
    # Hashing validates them all in one encoder call, much faster than item by
    # item; only when it fails are items encoded one by one to find the culprit.
    try:
        return items, content_hash(items), rejected
    except (TypeError, ValueError):
        for number, item in zip(numbers, items, strict=True):
            try:
                canonical_json(item)
            except (TypeError, ValueError) as exc:
                raise _unserialisable(origin, number, exc) from exc
        raise  # a list encodes iff its items do, so the loop above has raised


def _normalise_item(raw: object, origin: _Origin, number: int) -> tuple[dict[str, Any], bool]:
    """Return a new dict with the item's id first, and whether the id was derived."""
    if not isinstance(raw, Mapping):
        raise DatasetError(
            f"{origin.place(number)}: expected a JSON object such as "
            f'{{"input": "...", "expected_output": "..."}}, got {_describe(raw)}'
        )
    if "id" in raw:
        item_id = _explicit_id(raw["id"], origin, number)
    else:
        try:
            item_id = content_id(raw)
        except (TypeError, ValueError) as exc:
            raise _unserialisable(origin, number, exc) from exc
    # The "id" placeholder puts the key first; a raw "id" only updates its value.
    item = {"id": item_id, **raw}
    item["id"] = item_id
    return item, "id" not in raw


def _unserialisable(origin: _Origin, number: int, exc: Exception) -> DatasetError:
    return DatasetError(
        f"{origin.place(number)}: the item is not JSON-serialisable ({exc}); use only {_JSON_TYPES}"
    )


def _explicit_id(value: object, origin: _Origin, number: int) -> str:
    # bool is an int subclass, but True as an id is almost certainly a mistake.
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, str) and value:
        return value
    got = '""' if value == "" else _describe(value)
    raise DatasetError(
        f'{origin.place(number)}: "id" must be a non-empty string or an integer, got {got}; '
        'fix it, or remove "id" to derive one from the content'
    )


def _read_file(written: str, path: Path, base_dir: Path) -> Iterator[tuple[int, object]]:
    """Check and decode the file, returning its items numbered by line (or index for .json)."""
    try:
        if not path.exists():
            raise DatasetError(
                f"dataset file not found: {written} (resolved to {path}); relative paths "
                f"are resolved from the test file's folder ({base_dir})"
            )
        if path.is_dir():
            raise DatasetError(f"dataset path {written} is a directory ({path}); name a file: {_EXTENSIONS}")
        suffix = path.suffix.lower()
        if suffix not in (".jsonl", ".json", ".csv"):
            raise DatasetError(
                f'dataset file {written} has unsupported extension "{path.suffix}"; use {_EXTENSIONS}'
            )
        data = path.read_bytes()
    except OSError as exc:
        raise DatasetError(
            f"cannot read dataset file {written} ({path}): {exc.strerror or exc}; "
            "check that it is a readable file"
        ) from exc
    try:
        # Editors on Windows often add a BOM; it is not part of the data.
        text = data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise DatasetError(
            f"{written} line {line} is not valid UTF-8 (byte 0x{data[exc.start]:02x}); "
            "save the file with UTF-8 encoding"
        ) from exc
    if suffix == ".jsonl":
        return _jsonl_items(text, written)
    if suffix == ".json":
        return _json_items(text, written)
    return _csv_items(text, written)


def _jsonl_items(text: str, written: str) -> Iterator[tuple[int, object]]:
    # Split on "\n" only: str.splitlines would also split on characters such
    # as U+2028 that may appear unescaped inside JSON strings.
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            value: object = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DatasetError(
                f"{written} line {number}: invalid JSON: {exc.msg} (column {exc.colno}); "
                "each line must hold one complete JSON object"
            ) from exc
        except RecursionError:
            value = _TooDeep()
        yield number, value


def _json_items(text: str, written: str) -> Iterator[tuple[int, object]]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _invalid_json(written, exc) from exc
    except RecursionError:
        # An item nested too deep for the JSON reader: read the list item by item instead, so
        # that one item is set aside and the others still run.
        return _json_items_one_by_one(text, written)
    if not isinstance(value, list):
        raise DatasetError(
            f"{written}: the top level is {type(value).__name__}, expected a JSON list of "
            'objects such as [{"input": "...", "expected_output": "..."}]; use .jsonl for one '
            "object per line"
        )
    return enumerate(value, 1)


def _invalid_json(written: str, exc: json.JSONDecodeError) -> DatasetError:
    return DatasetError(
        f"{written} line {exc.lineno} column {exc.colno}: invalid JSON: {exc.msg}; "
        "the file must hold one JSON list of objects"
    )


_SPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


def _skip_space(text: str, pos: int) -> int:
    match = _SPACE.match(text, pos)
    assert match is not None  # the pattern matches the empty string
    return match.end()


def _json_items_one_by_one(text: str, written: str) -> Iterator[tuple[int, object]]:
    """The items of a JSON list, decoded one at a time; an item too deep to decode is skipped
    over (its brackets counted, strings aside) and given as ``_TooDeep``."""
    pos = _skip_space(text, 0)
    if not text.startswith("[", pos):
        raise DatasetError(
            f"{written}: the top level is not a JSON list; the file must hold one JSON list of objects"
        )
    pos = _skip_space(text, pos + 1)
    number = 0
    if text.startswith("]", pos):
        return
    while True:
        number += 1
        try:
            value, pos = _DECODER.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise _invalid_json(written, exc) from exc
        except RecursionError:
            value, pos = _TooDeep(line=text.count("\n", 0, pos) + 1), _skip_value(text, pos, written)
        yield number, value
        pos = _skip_space(text, pos)
        if text.startswith(",", pos):
            pos = _skip_space(text, pos + 1)
            continue
        if text.startswith("]", pos):
            return
        line = text.count("\n", 0, pos) + 1
        raise DatasetError(f"{written} line {line}: invalid JSON: expected , or ] after item {number}")


_STRING_END = re.compile(r'(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKETS = re.compile(r'[\[\]{}"]')


def _skip_value(text: str, pos: int, written: str) -> int:
    """Where the list or object at ``pos`` ends, counting brackets outside strings."""
    depth = 0
    while True:
        found = _BRACKETS.search(text, pos)
        if found is None:
            line = text.count("\n") + 1
            raise DatasetError(f"{written} line {line}: invalid JSON: the file ends inside an item")
        char, pos = found.group(), found.end()
        if char == '"':
            end = _STRING_END.match(text, pos)
            if end is None:
                raise DatasetError(f"{written}: invalid JSON: a string is not closed")
            pos = end.end()
        elif char in "[{":
            depth += 1
        else:
            depth -= 1
            if depth == 0:
                return pos


def _csv_items(text: str, written: str) -> Iterator[tuple[int, object]]:
    # newline="" lets the csv module see the original line endings, which it
    # needs for quoted fields that span lines.
    reader = csv.reader(io.StringIO(text, newline=""))
    header: list[str] | None = None
    end_of_previous = 0
    try:
        for row in reader:
            # A quoted field may span lines, so a row starts after the previous one ends.
            start, end_of_previous = end_of_previous + 1, reader.line_num
            if not row:
                continue
            if header is None:
                header = row
                _check_header(header, written, start)
                continue
            if len(row) != len(header):
                raise DatasetError(
                    f"{written} line {start}: expected {len(header)} fields as in the "
                    f"header, found {len(row)}; quote values that contain commas"
                )
            yield start, dict(zip(header, row, strict=True))
    except csv.Error as exc:
        raise DatasetError(
            f"{written} line {reader.line_num}: invalid CSV: {exc}; check the quoting"
        ) from exc


def _check_header(header: list[str], written: str, line: int) -> None:
    seen: set[str] = set()
    for column in header:
        if column in seen:
            raise DatasetError(
                f'{written} line {line}: column "{column}" appears twice in the header; rename one of them'
            )
        seen.add(column)


def _callable_name(function: Callable[..., object]) -> str:
    module = getattr(function, "__module__", None)
    qualname = getattr(function, "__qualname__", None) or type(function).__qualname__
    return f"{module}.{qualname}" if module else qualname


def _call(function: Callable[..., object], name: str) -> list[object]:
    """Call a dataset function and collect its items, blaming it for any failure."""
    try:
        result = function()
    except Exception as exc:
        raise _raised(name, exc) from exc
    # Mappings and strings are iterable, but iterating them would yield keys
    # or characters, never the intended items.
    if isinstance(result, (Mapping, str, bytes)) or not isinstance(result, Iterable):
        raise DatasetError(
            f"dataset function {name} returned {type(result).__name__}, expected a list "
            "of dicts; return a list (or other iterable) with one dict per item"
        )
    try:
        # Collected here so that an error raised inside a generator is
        # reported as the function's, not as a loader crash.
        return list(result)
    except Exception as exc:
        raise _raised(name, exc) from exc


def _raised(name: str, exc: Exception) -> DatasetError:
    return DatasetError(
        f"dataset function {name} raised {type(exc).__name__}: {exc}; it is called with "
        "no arguments and must return a list of dicts"
    )


def _describe(value: object) -> str:
    return f"{type(value).__name__} {_short_repr(value)}"


def _short_repr(value: object) -> str:
    return shorten(repr(value), 60)  # escaped with the whole message, where it is shown


_Value = TypeVar("_Value")


def fresh_copy(value: _Value) -> _Value:
    """A deep copy: JSON data (what datasets hold) copied directly, as copy.deepcopy costs
    several times more; anything else through copy.deepcopy."""
    return cast(_Value, _copy(value))


def _copy(value: Any) -> Any:
    kind = type(value)
    if kind is dict:
        return {key: _copy(inner) for key, inner in value.items()}
    if kind is list:
        return [_copy(inner) for inner in value]
    if kind in (str, int, float, bool) or value is None:
        return value
    return copy.deepcopy(value)
