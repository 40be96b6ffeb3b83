"""Unit tests of the Opik filter language: parsing, wire form, errors and matching."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from pytest_opik_eval.exceptions import EvalError
from pytest_opik_eval.filtering import Condition, Filter, FilterError, parse_filter

ITEM: dict[str, Any] = {
    "id": "Q1-abc",
    "input": {"text": "Capital of France?"},
    "expected_output": "Paris",
    "category": "geo",
    "level": 5,
    "score": -3.5,
    "flag": True,
    "nothing": None,
    "quoted": 'say "hi"',
    "tags": ["Alpha", "beta"],
}


def matches(text: str, item: dict[str, Any] = ITEM) -> bool:
    return parse_filter(text).matches(item)


def error_of(text: str) -> str:
    with pytest.raises(FilterError) as info:
        parse_filter(text)
    return str(info.value)


# --- parsing -------------------------------------------------------------------------------


def test_single_condition_and_wire_form() -> None:
    parsed = parse_filter('data.category = "geo"')
    assert parsed == Filter('data.category = "geo"', (Condition("data", "category", "=", "geo"),))
    assert parsed.to_opik() == [
        {"field": "data", "key": "category", "type": "map", "operator": "=", "value": "geo"}
    ]


def test_wire_form_of_every_field_type() -> None:
    parsed = parse_filter('id > "a" AND tags is_empty AND data.x contains "y"')
    assert parsed.to_opik() == [
        {"field": "id", "key": "", "type": "string", "operator": ">", "value": "a"},
        {"field": "tags", "key": "", "type": "list", "operator": "is_empty", "value": ""},
        {"field": "data", "key": "x", "type": "map", "operator": "contains", "value": "y"},
    ]


@pytest.mark.parametrize("joiner", ["AND", "and", "And", "aNd"])
def test_and_in_any_case_joins_conditions(joiner: str) -> None:
    parsed = parse_filter(f'data.a = "1" {joiner} data.b = "2" {joiner} tags contains "x"')
    assert [(c.field, c.key, c.value) for c in parsed.conditions] == [
        ("data", "a", "1"),
        ("data", "b", "2"),
        ("tags", None, "x"),
    ]


@pytest.mark.parametrize(
    "text",
    [
        'data.a="1"',
        'data.a  =  "1"',
        '\tdata.a\n=\t"1"  ',
        'data.a contains"1"',
    ],
)
def test_whitespace_is_optional_around_operators(text: str) -> None:
    assert parse_filter(text).conditions[0].value == "1"
    assert parse_filter(text).text == text


def test_and_may_be_surrounded_by_any_whitespace() -> None:
    assert len(parse_filter('data.a = "1"\n\tAND\n data.b = "2"').conditions) == 2


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('data.my_key2 = "x"', "my_key2"),
        ('data."my key" = "x"', "my key"),
        ('data."say ""hi""" = "x"', 'say "hi"'),
        ("data.'it''s' = \"x\"", "it's"),
        ('data.\'a "b"\' = "x"', 'a "b"'),
    ],
)
def test_keys_plain_or_quoted(text: str, key: str) -> None:
    assert parse_filter(text).conditions[0].key == key


@pytest.mark.parametrize(
    ("written", "value"),
    [
        ('"geo"', "geo"),
        ('"a""b"', 'a"b'),
        ('""', ""),
        ('""""', '"'),
        ('"a AND b or c"', "a AND b or c"),
        ("5", "5"),
        ("-3.5", "-3.5"),
        ("007", "007"),
    ],
)
def test_values_strings_and_numbers_as_text(written: str, value: str) -> None:
    assert parse_filter(f"data.x = {written}").conditions[0].value == value


@pytest.mark.parametrize(
    ("field", "operators"),
    [
        ("data.x", ["=", "!=", "contains", "not_contains", "starts_with", "ends_with"]),
        ("id", ["=", "!=", "contains", "not_contains", "starts_with", "ends_with", ">", "<"]),
        ("tags", ["=", "!=", "contains", "not_contains"]),
    ],
)
def test_every_allowed_operator_parses(field: str, operators: list[str]) -> None:
    for op in operators:
        assert parse_filter(f'{field} {op} "v"').conditions[0].operator == op


@pytest.mark.parametrize("op", ["is_empty", "is_not_empty"])
def test_empty_checks_take_no_value(op: str) -> None:
    parsed = parse_filter(f'tags {op} AND data.x = "1"')
    assert parsed.conditions[0] == Condition("tags", None, op, "")


def test_filter_pickles() -> None:
    parsed = parse_filter('data.x contains "a" AND id = "b" AND tags is_empty')
    restored = pickle.loads(pickle.dumps(parsed))
    assert restored == parsed
    assert restored.matches({"id": "B", "x": "cat"})


# --- errors ----------------------------------------------------------------------------------


def test_error_shows_column_text_and_caret() -> None:
    assert error_of('data.category == "geo"') == (
        "invalid filter: expected an operator (=, !=, contains, not_contains, starts_with,"
        " ends_with) after data.category, at column 15\n"
        '  data.category == "geo"\n'
        "                ^"
    )


def test_filter_error_is_a_value_error_and_an_eval_error() -> None:
    assert issubclass(FilterError, ValueError)
    assert issubclass(FilterError, EvalError)


def test_caret_stays_aligned_with_tabs_and_newlines() -> None:
    lines = error_of('data.a = "1"\tAND\ndata.b = geo').splitlines()
    assert lines[1:] == ['  data.a = "1" AND data.b = geo', "                            ^"]
    assert "at column 27" in lines[0]


def caret_column(message: str) -> int:
    return message.splitlines()[2].index("^") - 1


@pytest.mark.parametrize(
    ("text", "column", "fragments"),
    [
        ("", 1, ["the filter is empty", "data.category"]),
        ("  \t ", 1, ["the filter is empty"]),
        ('data.x = "a" OR data.y = "b"', 14, ["OR is not supported", "AND", "split the test"]),
        ('data.x = "a" or data.y = "b"', 14, ["OR is not supported"]),
        ('category = "geo"', 1, ["unknown field category", "id, tags and data.<key>", "data.category"]),
        ('= "geo"', 1, ["expected a field: id, tags or data.<key>"]),
        ('(data.x = "a")', 1, ["expected a field"]),
        ('data.x = "a" AND', 17, ["expected a field"]),
        ('data = "x"', 5, ["data needs a key", "data.<key>"]),
        ('data. = "x"', 6, ["expected a key after data.", 'data."my key"']),
        ('data.a.b = "x"', 7, ["nested keys are not supported", "top-level"]),
        ('data."a b = "x"', 14, ["expected an operator", 'after data."a b = "']),
        ('data.\'a = "x"', 6, ["unterminated quoted key", "closing '"]),
        ("data.n > 5", 8, ["> is not supported on data.n", "=, !=, contains"]),
        ('tags starts_with "a"', 6, ["starts_with is not supported on tags", "is_not_empty"]),
        ("id is_empty", 4, ["is_empty is not supported on id", ">, <"]),
        ('data."my key" < "a"', 15, ['< is not supported on data."my key"']),
        ("data.x", 7, ["expected an operator", "after data.x"]),
        (
            'id >= "a"',
            4,
            ["expected an operator (=, !=, contains, not_contains, starts_with, ends_with, >, <) after id"],
        ),
        ('tags.x = "a"', 5, ["expected an operator", "after tags"]),
        ("data.x =", 9, ["expected a value after =", "double-quoted string or a number"]),
        ("data.category = 'geo'", 17, ["double quotes, not single quotes"]),
        ("data.x = true", 10, ["true is not a value", '("true")']),
        ('data.x = geo AND id = "a"', 10, ['("geo")']),
        ('data.x = a"b', 10, ['("a""b")']),
        ("data.x = 5.", 10, ["5. is not a value"]),
        ("data.x = -", 10, ["- is not a value"]),
        ('data.x = "abc', 10, ["unterminated string", 'closing "']),
        ('data.x = "a" data.y = "b"', 14, ["expected AND (with spaces around it) or the end"]),
        ('data.x = "a"AND data.y = "b"', 13, ["expected AND"]),
        ('data.x = "a" ANDdata.y = "b"', 14, ["expected AND"]),
        ("data.x = 5)", 10, ["5) is not a value"]),
        ('tags is_empty "x"', 15, ["expected AND"]),
        ('data.x = "a" NOT data.y = "b"', 14, ["expected AND"]),
    ],
)
def test_errors_say_what_is_wrong_and_where(text: str, column: int, fragments: list[str]) -> None:
    message = error_of(text)
    first = message.splitlines()[0]
    assert first.startswith("invalid filter: ")
    assert first.endswith(f", at column {column}")
    assert caret_column(message) == column
    for fragment in fragments:
        assert fragment in first


# --- matching: data ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('data.category = "geo"', True),
        ('data.category = "GEO"', True),
        ('data.category = "ge"', False),
        ("data.level = 5", True),
        ('data.level = "5"', True),
        ("data.score = -3.5", True),
        ('data.flag = "true"', True),
        ('data.nothing = "null"', True),
        ('data.quoted = "say hi"', True),  # quotes inside the value are removed
        ('data.input = "{text:capital of france?}"', True),  # compact JSON, quotes removed
        ('data.missing = ""', True),
        ('data.missing = "x"', False),
    ],
)
def test_data_equals_is_case_insensitive_on_unquoted_json_text(text: str, expected: bool) -> None:
    assert matches(text) is expected


def test_data_equals_matches_numbers_stored_as_strings() -> None:
    assert matches("data.n = 5", {"n": "5"})
    assert not matches("data.n = 5", {"n": 5.0})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('data.category != "GEO"', False),
        ('data.category != "math"', True),
        ('data.missing != "x"', True),
    ],
)
def test_data_not_equals_is_the_negation(text: str, expected: bool) -> None:
    assert matches(text) is expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('data.category contains "E"', True),
        ('data.input contains "CAPITAL"', True),
        ('data.input contains "text"', True),  # the raw JSON text includes the nested keys
        ('data.category contains """geo"""', True),  # and a string's own quotes
        ('data.level contains "5"', True),
        ('data.category contains "math"', False),
        ('data.missing contains "x"', False),
        ('data.category not_contains "GE"', False),
        ('data.category not_contains "math"', True),
        ('data.missing not_contains "x"', True),
    ],
)
def test_data_contains_is_a_case_insensitive_substring_of_the_json(text: str, expected: bool) -> None:
    assert matches(text) is expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('data.expected_output starts_with "pa"', True),
        ('data.expected_output starts_with "ris"', False),
        ('data.expected_output ends_with "RIS"', True),
        ('data.quoted starts_with "say h"', True),  # on the unquoted text
        ("data.level starts_with 5", True),
        ('data.missing starts_with "x"', False),
    ],
)
def test_data_starts_and_ends_with_are_case_insensitive(text: str, expected: bool) -> None:
    assert matches(text) is expected


def test_data_keys_address_the_whole_item() -> None:
    assert matches('data.id = "q1-ABC"')
    assert matches('data."my key" = "v"', {"my key": "v"})


# --- matching: id --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('id = "q1-ABC"', True),
        ('id = "q1"', False),
        ('id != "q1"', True),
        ('id != "Q1-ABC"', False),
        ('id contains "1-A"', True),
        ('id not_contains "1-A"', False),
        ('id starts_with "q1"', True),
        ('id ends_with "BC"', True),
        ('id ends_with "q1"', False),
        ('id > "q0"', True),
        ('id > "q2"', False),
        ('id < "Q2"', True),
        ('id < "q1"', False),
        ('id > "10"', True),  # text comparison, not numeric
    ],
)
def test_id_comparisons_are_case_insensitive_text(text: str, expected: bool) -> None:
    assert matches(text) is expected


def test_id_missing_or_not_a_string() -> None:
    assert matches('id = ""', {})
    assert matches("id = 7", {"id": 7})


# --- matching: tags ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('tags = "Alpha"', True),
        ('tags = "alpha"', False),  # membership is exact
        ('tags = "Alp"', False),
        ('tags != "alpha"', True),
        ('tags != "beta"', False),
        ('tags contains "ALP"', True),  # any tag, case-insensitive substring
        ('tags contains "gamma"', False),
        ('tags not_contains "ET"', False),
        ('tags not_contains "gamma"', True),
        ("tags is_empty", False),
        ("tags is_not_empty", True),
    ],
)
def test_tags(text: str, expected: bool) -> None:
    assert matches(text) is expected


@pytest.mark.parametrize("item", [{}, {"tags": []}, {"tags": None}, {"tags": "alpha"}])
def test_missing_empty_or_non_list_tags_are_empty(item: dict[str, Any]) -> None:
    assert matches("tags is_empty", item)
    assert not matches("tags is_not_empty", item)
    assert not matches('tags contains "a"', item)
    assert matches('tags != "alpha"', item)


# --- matching: conditions together ---------------------------------------------------------


def test_check_keys_lists_quoted_keys_and_cuts_a_long_list() -> None:
    rows = [{"id": "1", "tags": [], "my key": 1, **{f"k{n:02}": n for n in range(25)}}]
    with pytest.raises(FilterError) as info:
        parse_filter('data."my kee" = "x"').check_keys(rows, "data.jsonl")
    message = str(info.value)
    assert message.startswith(
        "invalid filter: unknown field data.\"my kee\": no item of data.jsonl has the key 'my kee'; "
        "the fields are id, tags, data.k00, data.k01,"
    )
    assert "data.k19 and 6 more, at column 1" in message  # "my key" sorts after the k keys
    parse_filter('data."my key" = "x" AND id = "1" AND tags is_empty').check_keys(rows, "data.jsonl")
    parse_filter('data.anything = "x"').check_keys([], "data.jsonl")  # an empty dataset has no keys


def test_all_conditions_must_match() -> None:
    assert matches('data.category = "geo" AND tags = "beta" AND id starts_with "q"')
    assert not matches('data.category = "geo" AND tags = "gamma"')
    assert not matches('data.category = "math" AND tags = "beta"')


def test_conditions_built_directly_match_like_parsed_ones() -> None:
    assert Condition("data", "category", "=", "GEO").matches(ITEM)
    assert Condition("tags", None, "contains", "BET").matches(ITEM)
    assert not Condition("id", None, "<", "a").matches(ITEM)
