"""Hostile data end to end: control characters from items, outputs and metric reasons are shown
escaped in every output, and an item nested too deep to process is one clear failure."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest
from conftest import Project

from pytest_opik_eval.cli import main as opik_eval

# Control characters a terminal acts on (LF and TAB aside, which pytest's own output has).
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e]")

HOSTILE_TEST = """
import pytest
from pytest_opik_eval.metrics import BaseMetric, Equals, ScoreResult


class Shouty(BaseMetric):
    def __init__(self):
        super().__init__(name="shout\\x1b[5m")

    def score(self, output, **ignored):
        return ScoreResult(name=self.name, value=0.0, reason="\\x1b]0;pwned\\x07 \\x1b[2Jgone")


@pytest.mark.eval(
    dataset="data.jsonl",
    metrics=[Equals(), Shouty()],
    scoring_key_mapping={"reference": "expected_output"},
    trial_count=2,
)
def test_qa(eval_item):
    return eval_item["input"]["text"] + "\\x9b31m"
"""


def test_control_characters_are_escaped_in_every_output(
    project: Project, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project.dataset(
        [
            {"id": "evil\x1b[2J", "input": {"text": "red\x1b[31m\x07"}, "expected_output": "x\x9b2J\u202e"},
            {"id": "plain", "input": {"text": "p"}, "expected_output": "p"},
        ]
    )
    project.write("test_eval.py", HOSTILE_TEST)
    step_summary = project.path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step_summary))
    result = project.run("--eval", "--junitxml=junit.xml", "--eval-fail-under=equals_metric=0.5", "-rf")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    output = result.stdout.str()
    assert not RAW_CONTROL.search(output), RAW_CONTROL.findall(output)
    # Shown, escaped: the failure message (item id, score name and reason, input, expected,
    # output), the summary's metric table and item verdicts, the gate line.
    for shown in [
        "item evil\\x1b[2J (trial 0) did not meet its thresholds:",
        "  shout\\x1b[5m      0 (no threshold)  \\x1b]0;pwned\\x07 \\x1b[2Jgone",
        '  input:    {"text": "red\\u001b[31m\\u0007"}',  # JSON's own escapes
        "  expected: x\\x9b2J\\u202e",
        "  output:   red\\x1b[31m\\x07\\x9b31m",
        "  shout\\x1b[5m        0.000  [0.000, 0.842]    0.000  0.000      0      -",
        "    item evil\\x1b[2J failed: 0 of 2 trials passed",
    ]:
        assert f"\n{shown}\n" in output, shown

    root = ET.parse(project.path / "junit.xml").getroot()  # readable XML
    properties = [(p.get("name"), p.get("value")) for p in root.iter("property")]
    assert ("eval.shout\\x1b[5m", "0.0") in properties
    assert "eval.test_qa.shout\\x1b[5m.mean" in dict(properties)
    assert not any(RAW_CONTROL.search(f"{name}{value}") for name, value in properties)

    markdown = step_summary.read_text()
    assert not RAW_CONTROL.search(markdown)
    assert "shout\\x1b[5m" in markdown
    assert "evil\\x1b[2J" in markdown

    first = project.last_experiment_id()
    project.run("--eval")
    store = ["--store", str(project.store_path)]
    capsys.readouterr()
    opik_eval([*store, "show", "last"])
    opik_eval([*store, "diff", first, "last"])
    opik_eval([*store, "gate", "last", "--eval-fail-under=shout\x1b[5m=0.5"])
    printed = capsys.readouterr()
    assert not RAW_CONTROL.search(printed.out + printed.err)
    assert "  evil\\x1b[2J " in printed.out  # show: the trial rows
    assert "    shout\\x1b[5m " in printed.out  # diff: the metric's change
    assert "NOT MET: test_qa: fail_under shout\\x1b[5m: mean 0.000 is below 0.5" in printed.out  # gate


def test_a_dataset_error_quoting_an_id_escapes_it(project: Project) -> None:
    project.write(
        "data.jsonl",
        '{"id": "dup\\u009b2J", "input": {"text": "a"}}\n{"id": "dup\\u009b2J", "input": {"text": "b"}}\n',
    )
    project.eval_test()
    result = project.run("--eval")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert not RAW_CONTROL.search(result.stdout.str())
    result.stdout.fnmatch_lines(['*duplicate item id "dup\\x9b2J" in data.jsonl: line 1 and line 2*'])


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("bell\x07", "bell\\x07"),
        ("over\rwrite", "over\\x0dwrite"),
        ("tab\there", "tab\\x09here"),
        ("del\x7f", "del\\x7f"),
        ("csi\x9b", "csi\\x9b"),
        ("bidi\u202eevil", "bidi\\u202eevil"),
        ("café ✓ 日本", "café ✓ 日本"),
    ],
)
def test_escape_control_keeps_text_and_shows_controls(text: str, shown: str) -> None:
    from pytest_opik_eval.escaping import escape_control

    assert escape_control(text) == shown
    assert escape_control(escape_control(text)) == shown  # escaping twice changes nothing
    assert escape_control("a\nb\x1b", newlines=True) == "a\nb\\x1b"


@pytest.mark.parametrize(
    ("text", "limit", "shown"),
    [
        ("abc", 3, "abc"),
        ("abcd", 3, "abc... (1 more character)"),
        ("x" * 10, 4, "xxxx... (6 more characters)"),
        # Text escaped already (json.dumps, repr): a cut inside an escape moves to its start.
        ("ab\\x1bcd", 4, "ab... (6 more characters)"),
        ("ab\\u202ecd", 5, "ab... (8 more characters)"),
        ("ab\\ncd", 3, "ab... (4 more characters)"),
        ("ab\\x1bcd", 6, "ab\\x1b... (2 more characters)"),
    ],
)
def test_shorten_keeps_the_start_and_never_halves_an_escape(text: str, limit: int, shown: str) -> None:
    from pytest_opik_eval.escaping import shorten

    assert shorten(text, limit) == shown


# --- nesting too deep to process -------------------------------------------------------------

DEEP = "[" * 5000 + "]" * 5000  # past Python's recursion limit, for the JSON reader too


def test_an_item_nested_too_deep_is_one_error_naming_its_line_and_the_others_run(project: Project) -> None:
    project.write(
        "data.jsonl",
        '{"id": "a", "input": {"text": "a"}, "expected_output": "a"}\n'
        f'{{"id": "deep", "input": {{"text": "x"}}, "nest": {DEEP}}}\n'
        '{"id": "b", "input": {"text": "b"}, "expected_output": "b"}\n',
    )
    project.eval_test()
    result, report = project.run_report("--eval", "-v")
    result.assert_outcomes(passed=2, errors=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    output = result.stdout.str()
    assert "RecursionError" not in output
    assert "Traceback" not in output
    result.stdout.fnmatch_lines(
        [
            "*test_qa?invalid-line2? ERROR*",
            "@pytest.mark.eval on test_eval.py::test_qa (test_eval.py:*): data.jsonl line 2: the item is "
            "nested more than 200 levels deep (lists and objects inside each other); flatten it, or "
            "remove it from the dataset (the other items run)",
        ]
    )
    assert project.calls() == ["a#0", "b#0"]
    assert [t["dataset_item_id"] for t in report["experiments"][0]["trials"]] == ["a", "b"]


def test_an_item_nested_too_deep_in_a_json_file_or_a_list(project: Project) -> None:
    project.write(
        "data.json",
        '[\n  {"id": "a", "input": {"text": "a"}, "expected_output": "a"},\n'
        f'  {{"id": "deep", "input": {{"text": "x"}}, "nest": {DEEP}, "s": "]]"}},\n'
        '  {"id": "b", "input": {"text": "b"}, "expected_output": "b"}\n]\n',
    )
    project.eval_test(dataset='"data.json"')
    # A list nested past MAX_DEPTH, though not past what Python can parse.
    project.eval_test(
        dataset="[{'id': 'c', 'input': {'text': 'c'}, 'expected_output': 'c'}, DEEPER]",
        imports="DEEPER = {'id': 'x', 'input': {'text': 'x'}}\nfor _ in range(300):\n    DEEPER = {'n': DEEPER}",
        name="test_list",
    )
    result = project.run("--eval")
    result.assert_outcomes(passed=3, errors=2)
    result.stdout.fnmatch_lines(
        ["*: data.json item 2 (line 3): the item is nested more than 200 levels deep*"]
    )
    result.stdout.fnmatch_lines(["*: item 2 of the list: the item is nested more than 200 levels deep*"])
    assert sorted(project.calls()) == ["a#0", "b#0", "c#0"]


def test_a_task_output_nested_too_deep_fails_its_trial_with_a_message(project: Project) -> None:
    project.dataset(
        [
            {"id": "a", "input": {"text": "a"}, "expected_output": "a"},
            {"id": "b", "input": {"text": "b"}, "expected_output": "b"},
        ]
    )
    project.eval_test(
        behaviour="""if item['id'] == 'a':
        deep = []
        for _ in range(5000):
            deep = [deep]
        return {"output": deep}""",
    )
    result = project.run("--eval")
    result.assert_outcomes(passed=1, failed=1)
    assert "RecursionError" not in result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "item a (trial 0): the task output is nested more than 200 levels deep (lists and dicts "
            "inside each other), too deep to store; flatten it"
        ]
    )
    assert project.completed() == {("b", 0)}
