"""Unit tests for pytest_opik_eval.collect.datasets."""

from __future__ import annotations

import datetime
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_opik_eval.collect.datasets import (
    Dataset,
    DatasetError,
    content_hash,
    content_id,
    load_dataset,
)


def write(base: Path, name: str, text: str, encoding: str = "utf-8") -> Path:
    path = base / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding=encoding, newline="")
    return path


def jsonl(*items: object) -> str:
    return "".join(json.dumps(item) + "\n" for item in items)


def error(source: object, base: Path) -> str:
    with pytest.raises(DatasetError) as info:
        load_dataset(source, base)
    return str(info.value)


def make_items() -> list[dict[str, Any]]:
    return [{"input": "a"}, {"input": "b"}]


# --- ids and hashes ---------------------------------------------------------


def test_content_id_is_canonical_and_order_independent() -> None:
    item = {"b": 1, "a": "é"}
    canonical = '{"a":"é","b":1}'
    assert content_id(item) == hashlib.sha256(canonical.encode()).hexdigest()[:16]
    assert content_id({"a": "é", "b": 1}) == content_id(item)


def test_content_hash_covers_ids_and_values() -> None:
    items = [{"id": "1", "q": "x"}]
    assert len(content_hash(items)) == 16
    assert content_hash(items) != content_hash([{"id": "2", "q": "x"}])
    assert content_hash(items) != content_hash([{"id": "1", "q": "y"}])
    assert content_hash([]) != content_hash(items)


# --- JSONL ------------------------------------------------------------------


def test_jsonl_items_get_ids_in_source_order(tmp_path: Path) -> None:
    write(tmp_path, "data/qa.jsonl", jsonl({"q": "x", "id": "first"}, {"id": 7, "q": "y"}, {"q": "z"}))
    dataset = load_dataset("data/qa.jsonl", tmp_path)
    assert dataset.source == "data/qa.jsonl"
    assert dataset.path == (tmp_path / "data/qa.jsonl").resolve()
    assert dataset.items == [
        {"id": "first", "q": "x"},
        {"id": "7", "q": "y"},
        {"id": content_id({"q": "z"}), "q": "z"},
    ]
    assert all(next(iter(item)) == "id" for item in dataset.items)
    assert dataset.version == content_hash(dataset.items)


def test_derived_ids_are_stable_across_order_and_runs(tmp_path: Path) -> None:
    write(tmp_path, "a.jsonl", jsonl({"q": 1}, {"q": 2}))
    write(tmp_path, "b.jsonl", jsonl({"q": 2}, {"q": 1}))
    first = load_dataset("a.jsonl", tmp_path)
    assert load_dataset("a.jsonl", tmp_path) == first
    assert {i["id"] for i in load_dataset("b.jsonl", tmp_path).items} == {i["id"] for i in first.items}


def test_version_changes_when_data_changes(tmp_path: Path) -> None:
    path = write(tmp_path, "qa.jsonl", jsonl({"id": "1", "q": "x"}))
    before = load_dataset("qa.jsonl", tmp_path).version
    path.write_text(jsonl({"id": "1", "q": "x!"}))
    assert load_dataset("qa.jsonl", tmp_path).version != before


def test_jsonl_skips_blank_lines_and_accepts_crlf(tmp_path: Path) -> None:
    write(tmp_path, "qa.jsonl", '\r\n{"id": "a"}\r\n   \r\n{"id": "b"}')
    assert [i["id"] for i in load_dataset("qa.jsonl", tmp_path).items] == ["a", "b"]


def test_pathlike_and_absolute_paths(tmp_path: Path) -> None:
    path = write(tmp_path, "qa.jsonl", jsonl({"id": "a"}))
    elsewhere = tmp_path / "elsewhere"
    by_path = load_dataset(Path("qa.jsonl"), tmp_path)
    absolute = load_dataset(str(path), elsewhere)
    assert by_path.source == "qa.jsonl"
    assert absolute.source == str(path)
    assert by_path.path == absolute.path == path.resolve()


def test_empty_file_is_an_empty_dataset(tmp_path: Path) -> None:
    write(tmp_path, "qa.jsonl", "\n\n")
    dataset = load_dataset("qa.jsonl", tmp_path)
    assert dataset.items == []
    assert dataset.version == content_hash([])


def test_malformed_jsonl_names_line_and_parser_message(tmp_path: Path) -> None:
    write(tmp_path, "data/qa.jsonl", '{"id": "a"}\n\n{"id": "b",}\n')
    message = error("data/qa.jsonl", tmp_path)
    assert message.startswith("data/qa.jsonl line 3: invalid JSON: ")
    assert "Expecting property name enclosed in double quotes" in message


def test_jsonl_item_that_is_not_an_object(tmp_path: Path) -> None:
    write(tmp_path, "data/qa.jsonl", jsonl({"id": "a"}, {"id": "b"}, {"id": "c"}, [1, 2]))
    message = error("data/qa.jsonl", tmp_path)
    assert message.startswith("data/qa.jsonl line 4: expected a JSON object")
    assert "got list [1, 2]" in message


def test_duplicate_explicit_ids_name_both_lines(tmp_path: Path) -> None:
    lines = [{"id": f"q{n}"} for n in range(1, 7)] + [{"id": "q3", "other": True}]
    write(tmp_path, "data/qa.jsonl", jsonl(*lines))
    assert error("data/qa.jsonl", tmp_path) == (
        'duplicate item id "q3" in data/qa.jsonl: line 3 and line 7; give each item a unique "id"'
    )


def test_identical_items_without_ids_need_explicit_ids(tmp_path: Path) -> None:
    write(tmp_path, "qa.jsonl", jsonl({"q": "x"}, {"q": "y"}, {"q": "x"}))
    message = error("qa.jsonl", tmp_path)
    assert message.startswith("duplicate item in qa.jsonl: line 1 and line 3 have the same content")
    assert 'explicit unique "id"' in message


@pytest.mark.parametrize(
    ("value", "shown"),
    [("", '""'), (1.5, "float 1.5"), (True, "bool True"), (None, "NoneType None"), ([1], "list [1]")],
)
def test_invalid_ids(tmp_path: Path, value: object, shown: str) -> None:
    write(tmp_path, "qa.jsonl", jsonl({"id": "ok"}, {"id": value}))
    assert error("qa.jsonl", tmp_path) == (
        f'qa.jsonl line 2: "id" must be a non-empty string or an integer, got {shown}; '
        'fix it, or remove "id" to derive one from the content'
    )


# --- JSON -------------------------------------------------------------------


def test_json_list_with_bom(tmp_path: Path) -> None:
    write(tmp_path, "qa.json", '[{"id": "a", "n": 1}, {"n": 2}]', encoding="utf-8-sig")
    dataset = load_dataset("qa.json", tmp_path)
    assert dataset.items == [{"id": "a", "n": 1}, {"id": content_id({"n": 2}), "n": 2}]


def test_json_item_that_is_not_an_object(tmp_path: Path) -> None:
    write(tmp_path, "data/qa.json", '[{"id": "a"}, {"id": "b"}, "c"]')
    assert error("data/qa.json", tmp_path).startswith("data/qa.json item 3: expected a JSON object")


def test_malformed_json_names_line_and_column(tmp_path: Path) -> None:
    write(tmp_path, "qa.json", '[\n  {"id": "a"},\n  {"id" "b"}\n]')
    message = error("qa.json", tmp_path)
    assert message.startswith("qa.json line 3 column 9: invalid JSON: Expecting ':' delimiter")


def test_json_top_level_must_be_a_list(tmp_path: Path) -> None:
    write(tmp_path, "qa.json", '{"items": []}')
    assert error("qa.json", tmp_path).startswith(
        "qa.json: the top level is dict, expected a JSON list of objects"
    )


# --- CSV --------------------------------------------------------------------


def test_csv_rows_become_string_dicts(tmp_path: Path) -> None:
    text = 'id,question,answer\r\n1,"two, words",2\r\n\r\n,"multi\nline",x\r\n'
    write(tmp_path, "qa.csv", text, encoding="utf-8-sig")
    with pytest.raises(DatasetError, match=r'^qa\.csv line 4: "id" must be a non-empty'):
        load_dataset("qa.csv", tmp_path)
    write(tmp_path, "qa.csv", text.replace(',"multi', '3,"multi'))
    assert load_dataset("qa.csv", tmp_path).items == [
        {"id": "1", "question": "two, words", "answer": "2"},
        {"id": "3", "question": "multi\nline", "answer": "x"},
    ]


def test_csv_row_lines_account_for_multiline_fields(tmp_path: Path) -> None:
    write(tmp_path, "qa.csv", 'q,a\n"x\ny",1\nz,2,extra\n')
    assert error("qa.csv", tmp_path) == (
        "qa.csv line 4: expected 2 fields as in the header, found 3; quote values that contain commas"
    )


def test_csv_duplicate_header_column(tmp_path: Path) -> None:
    write(tmp_path, "qa.csv", "q,a,q\n1,2,3\n")
    assert error("qa.csv", tmp_path).startswith('qa.csv line 1: column "q" appears twice in the header')


def test_csv_header_only_is_empty(tmp_path: Path) -> None:
    write(tmp_path, "qa.csv", "q,a\n")
    assert load_dataset("qa.csv", tmp_path).items == []


# --- file errors --------------------------------------------------------------


def test_missing_file(tmp_path: Path) -> None:
    message = error("data/missing.jsonl", tmp_path)
    resolved = (tmp_path / "data/missing.jsonl").resolve()
    assert message.startswith(f"dataset file not found: data/missing.jsonl (resolved to {resolved})")
    assert "relative paths are resolved from the test file's folder" in message


def test_directory(tmp_path: Path) -> None:
    (tmp_path / "data.jsonl").mkdir()
    assert error("data.jsonl", tmp_path).startswith("dataset path data.jsonl is a directory")


def test_unknown_extension(tmp_path: Path) -> None:
    write(tmp_path, "qa.txt", "x")
    message = error("qa.txt", tmp_path)
    assert message.startswith('dataset file qa.txt has unsupported extension ".txt"')
    assert all(ext in message for ext in (".jsonl", ".json", ".csv"))


def test_unreadable_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, "qa.jsonl", "")

    def deny(self: Path) -> bytes:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "read_bytes", deny)
    message = error("qa.jsonl", tmp_path)
    assert message.startswith("cannot read dataset file qa.jsonl (")
    assert "Permission denied" in message


def test_non_utf8_file_names_the_line(tmp_path: Path) -> None:
    (tmp_path / "qa.jsonl").write_bytes(b'{"id": "a"}\n{"id": "\xe9"}\n')
    assert error("qa.jsonl", tmp_path).startswith(
        "qa.jsonl line 2 is not valid UTF-8 (byte 0xe9); save the file with UTF-8 encoding"
    )


# --- lists --------------------------------------------------------------------


def test_list_and_tuple_are_copied_not_mutated() -> None:
    items = make_items()
    dataset = load_dataset(items, Path("."))
    assert dataset == load_dataset(tuple(items), Path("."))
    assert dataset.source == "<list of 2 items>"
    assert dataset.path is None
    assert items == make_items()
    assert dataset.items[0] == {"id": content_id({"input": "a"}), "input": "a"}


def test_list_item_that_is_not_a_dict() -> None:
    assert error([{"id": "a"}, {"id": "b"}, "c"], Path(".")).startswith(
        "item 3 of the list: expected a JSON object"
    )


def test_list_duplicate_ids() -> None:
    assert error([{"id": 1}, {"id": "1"}], Path(".")) == (
        'duplicate item id "1" in the list: item 1 and item 2; give each item a unique "id"'
    )


def test_unserialisable_item_names_place_and_type() -> None:
    message = error([{"id": "a"}, {"when": datetime.date(2024, 1, 1)}], Path("."))
    assert message.startswith("item 2 of the list: the item is not JSON-serialisable (")
    assert "date" in message


def test_unserialisable_item_with_explicit_id() -> None:
    message = error([{"id": "a"}, {"id": "b", "tags": {"x"}}], Path("."))
    assert message.startswith("item 2 of the list: the item is not JSON-serialisable (")
    assert "set" in message


def test_mixed_key_types_are_not_serialisable() -> None:
    assert "not JSON-serialisable" in error([{1: "a"}], Path("."))


# --- callables ----------------------------------------------------------------


def generate() -> Iterator[dict[str, Any]]:
    yield {"id": "a"}
    yield {"id": "b"}


def test_callable_returning_an_iterable() -> None:
    dataset = load_dataset(generate, Path("."))
    assert dataset.source == f"<callable {__name__}.generate>"
    assert [i["id"] for i in dataset.items] == ["a", "b"]


def test_callable_item_that_is_not_a_dict() -> None:
    assert error(lambda: [{"id": "a"}, 3], Path(".")).startswith(
        f"item 2 returned by {__name__}.test_callable_item_that_is_not_a_dict.<locals>.<lambda>: "
        "expected a JSON object"
    )


def test_callable_that_raises_is_chained() -> None:
    def broken() -> list[dict[str, Any]]:
        raise RuntimeError("no network")

    with pytest.raises(DatasetError) as info:
        load_dataset(broken, Path("."))
    assert str(info.value).startswith(
        f"dataset function {__name__}.test_callable_that_raises_is_chained.<locals>.broken "
        "raised RuntimeError: no network;"
    )
    assert isinstance(info.value.__cause__, RuntimeError)


def test_generator_that_raises_midway() -> None:
    def items() -> Iterator[dict[str, Any]]:
        yield {"id": "a"}
        raise OSError("connection reset")

    message = error(items, Path("."))
    assert "raised OSError: connection reset" in message


def test_callable_returning_a_dict() -> None:
    assert "returned dict, expected a list of dicts" in error(lambda: {"id": "a"}, Path("."))


# --- other sources --------------------------------------------------------------


@pytest.mark.parametrize("source", [42, {"id": "a"}, b"qa.jsonl", None])
def test_unsupported_source_type(source: object) -> None:
    message = error(source, Path("."))
    assert message.startswith(f"unsupported dataset {source!r} of type {type(source).__name__};")
    assert ".jsonl, .json or .csv" in message
    assert "list of dicts" in message


def test_dataset_is_frozen() -> None:
    dataset = load_dataset([], Path("."))
    assert isinstance(dataset, Dataset)
    with pytest.raises(AttributeError):
        dataset.version = "x"  # type: ignore[misc]
