"""Bad input end to end: each mistake a user can make gets one clear message (where, what, and
the fix), and nothing half-done is written to the store."""

from __future__ import annotations

import sqlite3

import pytest
from conftest import Project, items

from pytest_opik_eval.store.local import LocalStore
from pytest_opik_eval.store.records import RunSummary


def where(project: Project, name: str = "test_eval") -> str:
    """How a marker error starts: the test, and the file and line of its marker."""
    lines = (project.path / f"{name}.py").read_text().splitlines()
    line = next(n for n, text in enumerate(lines, 1) if text.startswith("@pytest.mark.eval"))
    return f"@pytest.mark.eval on {name}.py::test_qa ({name}.py:{line}):"


def assert_collection_error(project: Project, result: pytest.RunResult, message: str) -> None:
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([f"{where(project)} {message}"])
    assert project.calls() == []
    assert not project.store_path.exists()


def runs(project: Project) -> list[RunSummary]:
    store = LocalStore(project.store_path, create=False)
    try:
        return store.runs()
    finally:
        store.close()


# --- the dataset ------------------------------------------------------------------------------


def test_missing_dataset_file(project: Project) -> None:
    project.eval_test(dataset='"missing.jsonl"')
    result = project.run("--eval")
    assert_collection_error(
        project,
        result,
        "dataset file not found: missing.jsonl (resolved to */missing.jsonl); "
        f"relative paths are resolved from the test file's folder ({project.path})",
    )


def test_malformed_jsonl_line_is_named(project: Project) -> None:
    project.write("data.jsonl", '{"id": "a", "input": {"text": "a"}}\n{"id": "b", oops}\n')
    project.eval_test()
    result = project.run("--eval")
    assert_collection_error(
        project,
        result,
        "data.jsonl line 2: invalid JSON: Expecting property name enclosed in double quotes "
        "(column 13); each line must hold one complete JSON object",
    )


def test_item_that_is_not_an_object(project: Project) -> None:
    project.write("data.jsonl", '{"id": "a", "input": {"text": "a"}}\n[1, 2]\n')
    project.eval_test()
    result = project.run("--eval")
    assert_collection_error(
        project,
        result,
        # The key a dataset's reference goes under is expected_output, as the metrics map it.
        'data.jsonl line 2: expected a JSON object such as {"input": "...", "expected_output": "..."}, '
        "got list ?1, 2?",
    )


def test_unknown_file_type(project: Project) -> None:
    project.write("data.yaml", "- id: a\n")
    project.eval_test(dataset='"data.yaml"')
    result = project.run("--eval")
    assert_collection_error(
        project,
        result,
        'dataset file data.yaml has unsupported extension ".yaml"; use .jsonl (one JSON object '
        "per line), .json (a JSON list of objects) or .csv (a header row, then one item per row)",
    )


def test_duplicate_ids_name_both_lines(project: Project) -> None:
    project.dataset(items("a", "b", "a"))
    project.eval_test()
    result = project.run("--eval")
    assert_collection_error(
        project,
        result,
        'duplicate item id "a" in data.jsonl: line 1 and line 3; give each item a unique "id"',
    )


# --- the marker's selection -------------------------------------------------------------------


def test_bad_filter_shows_column_and_caret(project: Project) -> None:
    project.dataset(items("a"))
    project.eval_test("filter='data.category == \"geo\"',")
    result = project.run("--eval")
    assert_collection_error(
        project,
        result,
        "invalid filter: expected an operator (=, !=, contains, not_contains, starts_with, "
        "ends_with) after data.category, at column 15",
    )
    result.stdout.fnmatch_lines(
        [f"{where(project)} invalid filter: *", '  data.category == "geo"', "                ^"],
        consecutive=True,
    )


@pytest.mark.parametrize("operator", ["=", "!="])
def test_filter_on_a_key_no_item_has_names_it_and_lists_the_fields(project: Project, operator: str) -> None:
    # Misspelt, the key would match no item (a skipped eval, exit 0) or, with !=, every item.
    project.dataset(items("a", "b", category="geo", lang="en"))
    project.eval_test(f'filter=\'data.lang = "en" AND data.categroy {operator} "geo"\',')
    result = project.run("--eval")
    assert_collection_error(
        project,
        result,
        "invalid filter: unknown field data.categroy: no item of data.jsonl has the key 'categroy'; "
        "the fields are id, tags, data.category, data.expected_output, data.input, data.lang, at column 22",
    )
    result.stdout.fnmatch_lines(
        [
            f"{where(project)} invalid filter: *",
            f'  data.lang = "en" AND data.categroy {operator} "geo"',
            "  " + " " * 21 + "^",
        ],
        consecutive=True,
    )


def test_filter_on_a_key_only_some_items_have_is_fine(project: Project) -> None:
    project.dataset([*items("a", category="geo"), *items("b")])
    project.eval_test("filter='data.category != \"geo\"',")
    project.run("--eval").assert_outcomes(passed=1)
    assert project.calls() == ["b#0"]


def test_unknown_item_id_is_named(project: Project) -> None:
    project.dataset(items("a", "b"))
    project.eval_test("item_ids=['a', 'nope'],")
    result = project.run("--eval")
    assert_collection_error(
        project,
        result,
        "item_ids names 1 id(s) not in data.jsonl: 'nope'; name items by their \"id\" (items without "
        "one get an id from their content: see the node ids of pytest --eval --co)",
    )


@pytest.mark.parametrize("argument", ["trial_count", "nb_samples"])
def test_count_of_zero(project: Project, argument: str) -> None:
    project.dataset(items("a"))
    project.eval_test(f"{argument}=0,")
    result = project.run("--eval")
    assert_collection_error(project, result, f"{argument} must be an integer >= 1, got 0")


@pytest.mark.parametrize(
    ("metrics", "shown"),
    [
        ("[Equals]", "<class '*.Equals'> (pass an instance: Equals(), not Equals)"),
        ('["equals"]', "'equals'"),
    ],
    ids=["class", "string"],
)
def test_metric_that_is_not_a_metric(project: Project, metrics: str, shown: str) -> None:
    project.dataset(items("a"))
    project.eval_test(metrics=metrics)
    result = project.run("--eval")
    assert_collection_error(
        project,
        result,
        f"metrics?0? is not a metric: {shown}; a metric has a str 'name' and a score(**kwargs) "
        "method, like pytest_opik_eval.metrics.BaseMetric",
    )


def test_unknown_marker_argument(project: Project) -> None:
    project.dataset(items("a"))
    project.eval_test("trial_cuont=2,")
    result = project.run("--eval")
    assert_collection_error(
        project,
        result,
        "got an unexpected keyword argument 'trial_cuont'; the signature is "
        "@pytest.mark.eval(dataset, *, metrics=(), *trial_count=1, *)",
    )


@pytest.mark.parametrize(
    ("marker", "dataset"),
    [
        ("", '"missing.jsonl"'),
        ("", '"bad.jsonl"'),
        ("filter='data.x == 1',", '"data.jsonl"'),
        ("trial_cuont=2,", '"data.jsonl"'),
    ],
    ids=["missing-file", "bad-jsonl", "bad-filter", "unknown-argument"],
)
def test_collection_error_is_shown_once(project: Project, marker: str, dataset: str) -> None:
    project.dataset(items("a"))
    project.write("bad.jsonl", '{"id": "a", "input": {"text": "a"}}\n{"id": "b", oops}\n')
    project.eval_test(marker, dataset=dataset)
    result = project.run("--eval")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    # The short summary repeats the message (in full when CI is set): count the report only.
    output = result.stdout.str().split("short test summary info")[0]
    assert "During handling of the above exception" not in output
    assert "The above exception was the direct cause" not in output
    assert output.count(where(project)) == 1


# --- without --eval, and with another good test -------------------------------------------------


def test_without_eval_bad_markers_are_left_out_unread(project: Project) -> None:
    project.dataset(items("a"))
    project.eval_test(dataset='"missing.jsonl"')
    project.eval_test("trial_cuont=2,", name="test_typo")
    project.write("test_plain.py", "def test_plain():\n    pass\n")
    result = project.run()
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=1, deselected=2)
    result.stdout.fnmatch_lines(["2 eval test(s) not run: run them with pytest --eval"])
    assert not project.store_path.exists()


def test_collection_error_stops_the_session_before_any_store_write(project: Project) -> None:
    project.dataset(items("a"))
    project.eval_test()
    project.run("--eval").assert_outcomes(passed=1)
    assert project.calls() == ["a#0"]
    earlier = runs(project)

    project.eval_test(dataset='"missing.jsonl"', name="test_broken")
    result = project.run("--eval")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([f"{where(project, 'test_broken')} dataset file not found: missing.jsonl *"])
    assert project.calls() == [], "the good eval test must not run either"
    assert runs(project) == earlier


# --- the store --------------------------------------------------------------------------------

EVAL = "--eval"
RESUME = "--eval-resume=last"


def assert_store_usage_error(project: Project, result: pytest.RunResult, message: str) -> None:
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "INTERNALERROR" not in result.stdout.str()
    result.stderr.fnmatch_lines([f"ERROR: *{message}"])
    assert project.calls() == []


@pytest.mark.parametrize("mode", [EVAL, RESUME])
def test_store_file_that_is_not_a_store(project: Project, mode: str) -> None:
    project.dataset(items("a"))
    project.eval_test()
    garbage = project.write("garbage.db", "not a database\n")
    result = project.run(mode, "--eval-store=garbage.db")
    assert_store_usage_error(
        project,
        result,
        f"{garbage} is not a pytest-opik-eval store (file is not a database); "
        "point --eval-store at another file, or move this one away",
    )
    assert garbage.read_text() == "not a database\n"


@pytest.mark.parametrize("mode", [EVAL, RESUME])
def test_store_file_that_is_someone_elses_sqlite(project: Project, mode: str) -> None:
    project.dataset(items("a"))
    project.eval_test()
    other = project.path / "other.db"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE notes (text TEXT)")
        db.execute("INSERT INTO notes VALUES ('mine')")
    db.close()
    result = project.run(mode, "--eval-store=other.db")
    assert_store_usage_error(
        project,
        result,
        f"{other} is an SQLite database but not a pytest-opik-eval store; point --eval-store at another file",
    )
    db = sqlite3.connect(other)
    try:
        assert db.execute("SELECT name FROM sqlite_master").fetchall() == [("notes",)]
    finally:
        db.close()


@pytest.mark.parametrize("mode", [EVAL, RESUME])
def test_store_with_a_newer_schema(project: Project, mode: str) -> None:
    project.dataset(items("a"))
    project.eval_test()
    project.run("--eval").assert_outcomes(passed=1)
    project.calls()
    earlier = [run.id for run in runs(project)]
    db = sqlite3.connect(project.store_path)
    db.execute("PRAGMA user_version = 99")
    db.close()

    result = project.run(mode)
    assert_store_usage_error(
        project,
        result,
        f"the eval store {project.store_path} has schema version 99, written by a newer "
        "pytest-opik-eval; this version reads up to 1: upgrade pytest-opik-eval, "
        "or point --eval-store at another file",
    )
    db = sqlite3.connect(project.store_path)
    try:
        assert db.execute("PRAGMA user_version").fetchone() == (99,)
        assert [row[0] for row in db.execute("SELECT id FROM runs")] == earlier
    finally:
        db.close()


@pytest.mark.parametrize("value", ["", "  "], ids=["empty", "blank"])
def test_empty_resume_value(project: Project, value: str) -> None:
    project.dataset(items("a"))
    project.eval_test()
    result = project.run(f"--eval-resume={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*argument --eval-resume: needs an experiment id, a run id, or 'last' (list them with: opik-eval runs)"
        ]
    )
    assert project.calls() == []
    assert not project.store_path.exists()


def test_a_bad_backend_from_the_environment_or_the_ini_file_names_its_source(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    project.dataset(items("a"))
    project.eval_test()
    monkeypatch.setenv("PYTEST_OPIK_EVAL_BACKEND", "cloud")
    result = project.run("--eval")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*env PYTEST_OPIK_EVAL_BACKEND: expected one of local, opik; got 'cloud'"])
    monkeypatch.delenv("PYTEST_OPIK_EVAL_BACKEND")
    project.pytester.makeini("[pytest]\neval_backend = Local\n")  # any case, as on the command line
    assert project.run("--eval").ret == pytest.ExitCode.OK
    project.pytester.makeini("[pytest]\neval_backend = remote\n")
    result = project.run("--eval")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*ini eval_backend: expected one of local, opik; got 'remote'"])
