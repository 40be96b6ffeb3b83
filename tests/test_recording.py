"""--eval-record end to end: the app's HTTP calls recorded per trial, replayed without a network,
a request without a recording failing its trial, and the files that keep them.

The app under test is an inner project's eval test that asks a fake OpenAI-style server on
127.0.0.1 with plain httpx, sending an API key in a header and in the query. The server answers
each prompt differently each time it is asked, so trial 0 and trial 1 of an item get different
answers; an inner conftest counts every connection the app's process opens to it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import Project
from fake_llm import APP, CONFTEST, SECRET, FakeLLM, connections

from pytest_opik_eval.cli import main as opik_eval
from pytest_opik_eval.options import RECORD_MODES
from pytest_opik_eval.store.local import GITIGNORE

QUESTIONS = ["capital", "colour", "planet"]


# Trial 0 of each item passes (the first answer), trial 1 fails: the verdicts differ by trial.
EVAL_TEST = """
import pytest
from pytest_opik_eval.metrics import Contains
from app import {ask}

{marker}
@pytest.mark.eval(
    dataset="data.jsonl",
    metrics=[Contains()],
    scoring_key_mapping={{"reference": "expected_output"}},
    trial_count=2,
    {options}
)
{define} test_answer(eval_item):
    return {call}(eval_item["input"]["question"]{suffix})
"""


def write_project(
    project: Project,
    *,
    threads: int | None = None,
    asynchronous: bool = False,
    marker: str = "",
    suffix: str = "",
) -> None:
    rows = [{"id": q, "input": {"question": q}, "expected_output": "answer 1"} for q in QUESTIONS]
    project.dataset(rows)
    project.write("app.py", APP)
    project.write("conftest.py", CONFTEST)
    project.write(
        "test_app.py",
        EVAL_TEST.format(
            ask="ask_async" if asynchronous else "ask",
            marker=marker,
            options=f"task_threads={threads}," if threads else "",
            define="async def" if asynchronous else "def",
            call="await ask_async" if asynchronous else "ask",
            suffix=f' + "{suffix}"' if suffix else "",
        ),
    )


def trials(report: dict[str, Any]) -> dict[tuple[str, int], tuple[Any, bool | None]]:
    """Each trial's output and verdict, by (item id, trial), of the report's one experiment."""
    [experiment] = report["experiments"]
    return experiment_trials(experiment)


def experiment_trials(experiment: dict[str, Any]) -> dict[tuple[str, int], tuple[Any, bool | None]]:
    return {(t["dataset_item_id"], t["trial"]): (t["output"], t["passed"]) for t in experiment["trials"]}


def recordings(project: Project) -> Path:
    return project.path / ".opik-eval" / "recordings"


def recorded_files(project: Project) -> dict[str, bytes]:
    """The recordings' files (not the journals), by path."""
    folder = recordings(project)
    return {
        str(path.relative_to(folder)): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and not any(part.startswith(".") for part in path.relative_to(folder).parts)
    }


def interactions(project: Project) -> list[dict[str, Any]]:
    [content] = recorded_files(project).values()
    found: list[dict[str, Any]] = json.loads(content)["interactions"]
    return found


# -- record, then replay offline -------------------------------------------------------------


def test_a_recorded_run_replays_offline_with_the_same_outputs_and_verdicts(
    project: Project, llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_project(project)
    result, recorded = project.run_report("--eval", "--eval-record=new_episodes")
    result.assert_outcomes(passed=3, failed=3)
    result.stdout.fnmatch_lines(
        [
            "eval recordings: */.opik-eval/recordings (mode new_episodes, from --eval-record: *)",
            "eval recordings (--eval-record=new_episodes): 0 replayed, 6 recorded, 0 missed",
        ]
    )
    assert llm.requests == 6 and connections(project) == 6
    assert recorded["recordings"] == {
        "mode": "new_episodes",
        "replayed": 0,
        "recorded": 6,
        "missed": 0,
        "missed_trials": 0,
        "saved_input_tokens": 0,
        "saved_output_tokens": 0,
        "saved_cost": None,
    }
    # One file per test, at a path made from its node id.
    assert list(recorded_files(project)) == ["test_app.py/test_answer.json"]

    llm.stop()
    step_summary = project.path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step_summary))
    result, replayed = project.run_report("--eval", "--eval-record=none")
    result.assert_outcomes(passed=3, failed=3)
    assert trials(replayed) == trials(recorded)
    assert connections(project) == 0
    assert "📼 eval recordings (--eval-record=none): 6 replayed, 0 recorded, 0 missed; saved 90 tokens" in (
        step_summary.read_text(encoding="utf-8")
    )
    result.stdout.fnmatch_lines(
        ["eval recordings (--eval-record=none): 6 replayed, 0 recorded, 0 missed; saved 90 tokens*"]
    )
    assert replayed["recordings"]["replayed"] == 6
    assert replayed["recordings"]["saved_input_tokens"] == 60
    assert replayed["recordings"]["saved_output_tokens"] == 30


def test_each_trial_replays_its_own_answer(project: Project, llm: FakeLLM) -> None:
    write_project(project)
    result, recorded = project.run_report("--eval", "--eval-record=once")
    answers = {key: output for key, (output, _) in trials(recorded).items()}
    # The requests of an item's two trials are the same; the server answered them differently.
    assert answers == {
        **{(q, 0): {"output": f"answer 1 to {q}"} for q in QUESTIONS},
        **{(q, 1): {"output": f"answer 2 to {q}"} for q in QUESTIONS},
    }
    llm.reset()
    # Mode once: the recorded trials replay, and the server is not asked again.
    result, replayed = project.run_report("--eval", "--eval-record=once")
    assert trials(replayed) == trials(recorded)
    assert llm.requests == 6
    result.stdout.fnmatch_lines(["eval recordings (--eval-record=once): 6 replayed, 0 recorded, 0 missed*"])


def test_no_secret_is_written_to_the_recordings(project: Project, llm: FakeLLM) -> None:
    write_project(project)
    project.run("--eval", "--eval-record=all").assert_outcomes(passed=3, failed=3)
    files = recorded_files(project)
    assert files
    for path, content in files.items():
        assert SECRET.encode() not in content, path
    request = interactions(project)[0]["request"]
    # The key param is redacted; the headers (Authorization) are not kept.
    assert "key=REDACTED" in json.dumps(request)
    assert "Bearer" not in json.dumps(interactions(project))
    # The journals that were folded are gone: nothing else holds the requests.
    assert not list((recordings(project) / ".journal").glob("*.jsonl"))


# -- strict replay, and recording what is new ------------------------------------------------


def test_a_changed_prompt_fails_its_trials_in_strict_mode_with_a_diff_and_stays_pending(
    project: Project, llm: FakeLLM
) -> None:
    write_project(project)
    project.run("--eval", "--eval-record=new_episodes").assert_outcomes(passed=3, failed=3)
    assert connections(project) == 6

    write_project(project, suffix="?")  # the app now asks each question with a question mark
    result, report = project.run_report("--eval", "--eval-record=none")
    result.assert_outcomes(failed=6)
    assert connections(project) == 0
    result.stdout.fnmatch_lines(
        [
            "*item capital (trial 0): the app made 1 request with no recording (--eval-record=none):",
            f"  POST {llm.url}/v1/chat/completions?key=REDACTED",
            '    -*"content": "capital",',
            '    +*"content": "capital?",',
            "*record what is missing with --eval-record=new_episodes (the trial stays pending)",
        ]
    )
    result.stdout.fnmatch_lines(
        ["eval recordings (--eval-record=none): 0 replayed, 0 recorded, 6 missed (6 trials failed)"]
    )
    assert report["recordings"]["missed_trials"] == 6
    assert {t["status"] for t in report["experiments"][0]["trials"]} == {"pending"}

    # The pending trials are resumed, recording what is new: the server is asked the new questions.
    result, resumed = project.run_report("--eval-resume=last", "--eval-record=new_episodes")
    result.assert_outcomes(passed=3, failed=3)
    assert llm.requests == 12
    assert {output["output"] for output, _ in trials(resumed).values()} >= {"answer 1 to capital?"}
    assert len(interactions(project)) == 12  # the old answers stay beside the new ones


def test_new_episodes_records_a_changed_prompt_and_keeps_the_answers_of_the_others(
    project: Project, llm: FakeLLM
) -> None:
    write_project(project)
    _, recorded = project.run_report("--eval", "--eval-record=new_episodes")
    # The app changes for one question only.
    app = project.path / "app.py"
    app.write_text(
        app.read_text().replace(
            "def ask(prompt):", "def ask(prompt):\n    prompt = prompt.replace('planet', 'planet?')"
        )
    )
    result, report = project.run_report("--eval", "--eval-record=new_episodes")
    result.stdout.fnmatch_lines(
        ["eval recordings (--eval-record=new_episodes): 4 replayed, 2 recorded, 0 missed*"]
    )
    assert llm.requests == 8
    now, before = trials(report), trials(recorded)
    assert {key: now[key] for key in now if key[0] != "planet"} == {
        key: before[key] for key in before if key[0] != "planet"
    }
    assert now[("planet", 0)][0] == {"output": "answer 1 to planet?"}


# -- where the trials run: async, threads, pytest-xdist --------------------------------------

# "-p asyncio" names a module of the standard library too: pytest warns that it cannot rewrite it.
# pytest-asyncio before 0.24 does not know its loop scope option: a warning, not an error.
ASYNCIO_INI = """
[pytest]
filterwarnings =
    error
    ignore:Module already imported so cannot be rewritten:pytest.PytestAssertRewriteWarning
    ignore:Unknown config option:pytest.PytestConfigWarning
asyncio_default_fixture_loop_scope = function
asyncio_mode = auto
"""


# Where an async test's trials run: on pytest-asyncio's loop (its replacement of the test
# function), on anyio's, on an event loop of their own without either plugin, and on threads.
ASYNC_RUNNERS = [
    pytest.param(("-p", "asyncio"), "", None, id="pytest-asyncio"),
    pytest.param(("-p", "asyncio"), "", 4, id="pytest-asyncio-threads"),
    pytest.param(("-p", "anyio"), "@pytest.mark.anyio", None, id="anyio"),
    pytest.param((), "", None, id="own-loop"),
]


@pytest.mark.parametrize(("plugin", "marker", "threads"), ASYNC_RUNNERS)
def test_async_tests_record_and_replay(
    project: Project, llm: FakeLLM, plugin: tuple[str, ...], marker: str, threads: int | None
) -> None:
    if plugin == ("-p", "asyncio"):
        project.pytester.makeini(ASYNCIO_INI)
    write_project(project, asynchronous=True, marker=marker, threads=threads)
    _, recorded = project.run_report("--eval", *plugin, "--eval-record=new_episodes")
    assert connections(project) > 0 and len(interactions(project)) == 6
    llm.stop()
    result, replayed = project.run_report("--eval", *plugin, "--eval-record=none")
    result.assert_outcomes(passed=3, failed=3)
    assert trials(replayed) == trials(recorded)
    assert connections(project) == 0


def test_threads_record_and_replay(project: Project, llm: FakeLLM) -> None:
    write_project(project)
    _, recorded = project.run_report("--eval", "--eval-threads=4", "--eval-record=new_episodes")
    assert len(interactions(project)) == 6 and connections(project) == 6
    llm.stop()
    result, replayed = project.run_report("--eval", "--eval-threads=4", "--eval-record=none")
    result.assert_outcomes(passed=3, failed=3)
    assert trials(replayed) == trials(recorded)
    assert connections(project) == 0


def test_xdist_workers_with_threads_record_every_trial_and_replay_strictly(
    project: Project, llm: FakeLLM
) -> None:
    write_project(project)
    xdist = ("-p", "xdist", "-n", "2", "--eval-threads=2")
    result, recorded = project.run_report("--eval", *xdist, "--eval-record=new_episodes")
    result.stdout.fnmatch_lines(
        ["eval recordings (--eval-record=new_episodes): 0 replayed, 6 recorded, 0 missed"]
    )
    keys = {(i["item_id"], i["trial"], i["occurrence"]) for i in interactions(project)}
    assert keys == {(q, t, 0) for q in QUESTIONS for t in (0, 1)}
    assert not list((recordings(project) / ".journal").glob("*.jsonl")), "every worker's journal is folded"
    asked = llm.requests
    connections(project)

    result, replayed = project.run_report("--eval", *xdist, "--eval-record=none")
    result.assert_outcomes(passed=3, failed=3)
    result.stdout.fnmatch_lines(["eval recordings (--eval-record=none): 6 replayed, 0 recorded, 0 missed*"])
    assert trials(replayed) == trials(recorded)
    assert connections(project) == 0 and llm.requests == asked

    # The workers' misses reach the controller's summary and report.
    write_project(project, suffix="?")
    result, missed = project.run_report("--eval", *xdist, "--eval-record=none")
    result.assert_outcomes(failed=6)
    result.stdout.fnmatch_lines(
        ["eval recordings (--eval-record=none): 0 replayed, 0 recorded, 6 missed (6 trials failed)"]
    )
    assert missed["recordings"]["missed_trials"] == 6
    assert connections(project) == 0 and llm.requests == asked


# -- the files -------------------------------------------------------------------------------


def test_recording_again_gives_the_same_bytes(project: Project, llm: FakeLLM) -> None:
    write_project(project)
    project.run("--eval", "--eval-record=all").assert_outcomes(passed=3, failed=3)
    first = recorded_files(project)
    llm.reset()  # the same answers again
    result = project.run("--eval", "--eval-record=all")
    result.stdout.fnmatch_lines(["eval recordings (--eval-record=all): 0 replayed, 6 recorded, 0 missed"])
    assert recorded_files(project) == first
    assert first["test_app.py/test_answer.json"].endswith(b"}\n")


# The app's calls reported as spans, as an instrumented app's are (track_openai, OpenTelemetry).
USAGE_TEST = """
import pytest
from pytest_opik_eval.metrics import Contains
from pytest_opik_eval.tracing import trace
from app import ask

@pytest.mark.eval(
    dataset="data.jsonl",
    metrics=[Contains()],
    scoring_key_mapping={"reference": "expected_output"},
    trial_count=2,
)
def test_answer(eval_item):
    answer = ask(eval_item["input"]["question"])
    trace.usage(model="gpt-4o-mini", input_tokens=10, output_tokens=5)  # the server's usage
    return answer
"""


def test_a_budget_does_not_count_the_replayed_calls(project: Project, llm: FakeLLM) -> None:
    write_project(project)
    project.write("test_app.py", USAGE_TEST)
    live = project.run("--eval", "--eval-record=new_episodes", "--eval-budget=40tokens")
    # Live, the budget stops the run: 15 tokens a trial.
    live.stdout.fnmatch_lines(["eval budget reached: spent 45 tokens of 40 tokens (3 trials not started)"])
    project.run("--eval", "--eval-record=new_episodes").assert_outcomes(passed=3, failed=3)

    # Replayed, the same spans spend nothing: every trial runs under the same budget.
    llm.stop()
    result = project.run("--eval", "--eval-record=none", "--eval-budget=40tokens")
    result.assert_outcomes(passed=3, failed=3)
    assert "eval budget reached" not in result.stdout.str()
    result.stdout.fnmatch_lines(["eval recordings (--eval-record=none): 6 replayed, 0 recorded, 0 missed*"])


def test_a_damaged_recording_file_is_set_aside_and_the_new_recordings_kept(
    project: Project, llm: FakeLLM
) -> None:
    write_project(project)
    project.run("--eval", "--eval-record=all").assert_outcomes(passed=3, failed=3)
    path = recordings(project) / "test_app.py" / "test_answer.json"
    damaged = "<<<<<<< HEAD\n" + path.read_text(encoding="utf-8")  # a merge conflict left in it
    path.write_text(damaged, encoding="utf-8")

    # Re-recording over it, as a user fixes it: the session ends as usual and says what it did.
    llm.reset()
    result = project.run("--eval", "--eval-record=all")
    result.assert_outcomes(passed=3, failed=3)
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    result.stdout.fnmatch_lines(
        [f"*--eval-record: {path} is not a recording file this plugin reads*it is kept as {path}.damaged*"]
    )
    assert path.with_name("test_answer.json.damaged").read_text(encoding="utf-8") == damaged
    assert len(json.loads(path.read_text(encoding="utf-8"))["interactions"]) == 6

    llm.stop()
    connections(project)  # the count starts again
    project.run("--eval", "--eval-record=none").assert_outcomes(passed=3, failed=3)
    assert connections(project) == 0


def test_each_parametrization_of_a_test_keeps_its_own_recordings(project: Project, llm: FakeLLM) -> None:
    write_project(project)
    source = (project.path / "test_app.py").read_text()
    # Two experiments that ask the same questions: their trials are not each other's.
    source = source.replace("def test_answer(eval_item):", "def test_answer(eval_item, style):")
    source = source.replace(
        "\n@pytest.mark.eval(", '\n@pytest.mark.parametrize("style", ["short", "long"])\n@pytest.mark.eval('
    )
    (project.path / "test_app.py").write_text(source)
    _, recorded = project.run_report("--eval", "--eval-record=all")
    assert sorted(recorded_files(project)) == [
        "test_app.py/test_answer[long].json",
        "test_app.py/test_answer[short].json",
    ]
    llm.stop()
    result, replayed = project.run_report("--eval", "--eval-record=none")
    result.stdout.fnmatch_lines(["eval recordings (--eval-record=none): 12 replayed, 0 recorded, 0 missed*"])
    replayed_trials = {e["name"]: experiment_trials(e) for e in replayed["experiments"]}
    assert replayed_trials == {e["name"]: experiment_trials(e) for e in recorded["experiments"]}
    # The server answered each question four times: each experiment replays its own two answers.
    assert {output["output"] for output, _ in replayed_trials["test_answer[long]"].values()} != {
        output["output"] for output, _ in replayed_trials["test_answer[short]"].values()
    }


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_the_recordings_can_be_committed_and_the_store_stays_ignored(tmp_path: Path) -> None:
    folder = tmp_path / ".opik-eval"
    for name in (
        "store.db",
        "store.db-wal",
        "recordings/tests/test_app.py/test_answer.json",
        "recordings/.journal/0199.main.jsonl",
        "recordings/.journal/0199.main.jsonl.lock",
        "judge-cache/ab/cd.json",
    ):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).touch()
    (folder / ".gitignore").write_text(GITIGNORE)
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    listed = subprocess.run(
        ["git", "-C", str(tmp_path), "status", "--porcelain", "--untracked-files=all"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    assert sorted(line.removeprefix("?? ") for line in listed) == [
        ".opik-eval/.gitignore",
        ".opik-eval/judge-cache/ab/cd.json",
        ".opik-eval/recordings/tests/test_app.py/test_answer.json",
    ]


def test_a_store_folder_ignored_before_recordings_existed_lets_them_be_committed(
    project: Project, llm: FakeLLM
) -> None:
    ignore = project.path / ".opik-eval" / ".gitignore"
    ignore.parent.mkdir()
    ignore.write_text("# created by pytest-opik-eval\n*\n")
    write_project(project)
    project.run("--eval", "--eval-record=new_episodes").assert_outcomes(passed=3, failed=3)
    assert ignore.read_text() == GITIGNORE


def test_merge_unions_the_recordings_of_shards(project: Project, llm: FakeLLM) -> None:
    write_project(project)
    for shard in (1, 2):
        store = project.path / f"shard{shard}" / "store.db"
        result = project.run(
            "--eval", f"--eval-store={store}", f"--eval-shard={shard}/2", "--eval-record=new_episodes"
        )
        assert result.ret in (0, 1)
    shares = [keys_in(project.path / f"shard{shard}" / "recordings") for shard in (1, 2)]
    assert shares[0] and shares[1] and not shares[0] & shares[1]  # each shard recorded its own share
    merged = project.path / "merged" / "store.db"
    sources = [str(project.path / f"shard{shard}" / "store.db") for shard in (1, 2)]
    assert opik_eval(["--store", str(merged), "merge", *sources]) == 0
    assert keys_in(merged.parent / "recordings") == {(q, t) for q in QUESTIONS for t in (0, 1)}


def keys_in(folder: Path) -> set[tuple[str, int]]:
    """The (item id, trial) of every interaction in a recordings folder's files."""
    return {
        (i["item_id"], i["trial"])
        for path in folder.rglob("*.json")
        for i in json.loads(path.read_text())["interactions"]
    }


# -- the option ------------------------------------------------------------------------------


def test_a_bad_mode_is_a_usage_error_naming_the_modes(project: Project) -> None:
    write_project(project)
    result = project.run("--eval", "--eval-record=bogus")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    modes = ", ".join(RECORD_MODES)
    result.stderr.fnmatch_lines([f"*--eval-record: expected one of {modes}; got 'bogus'"])


@pytest.mark.parametrize(
    ("where", "message"),
    [
        (
            "env",
            "*env PYTEST_OPIK_EVAL_RECORD: expected one of off, once, new_episodes, none, all; got 'replay'",
        ),
        ("ini", "*ini eval_record: expected one of off, once, new_episodes, none, all; got 'replay'"),
    ],
)
def test_a_bad_mode_from_the_environment_or_the_ini_file_names_it(
    project: Project, monkeypatch: pytest.MonkeyPatch, where: str, message: str
) -> None:
    write_project(project)
    if where == "env":
        monkeypatch.setenv("PYTEST_OPIK_EVAL_RECORD", "replay")
    else:
        project.pytester.makeini("[pytest]\neval_record = replay\n")
    result = project.run("--eval")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_the_command_line_wins_over_the_environment_which_wins_over_the_ini_file(
    project: Project, llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_project(project)
    project.pytester.makeini("[pytest]\nfilterwarnings = error\neval_record = all\n")
    result = project.run("--eval")
    result.stdout.fnmatch_lines(
        ["eval recordings: * (mode all, from ini eval_record: record every call again)"]
    )
    monkeypatch.setenv("PYTEST_OPIK_EVAL_RECORD", "none")
    result = project.run("--eval")
    result.stdout.fnmatch_lines(["eval recordings: * (mode none, from env PYTEST_OPIK_EVAL_RECORD: *)"])
    result.assert_outcomes(passed=3, failed=3)  # replayed what the ini's mode recorded
    result = project.run("--eval", "--eval-record=off")
    assert "eval recordings" not in result.stdout.str()


def test_without_vcrpy_a_recording_mode_is_a_usage_error_naming_the_extra(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_project(project)
    monkeypatch.setitem(sys.modules, "vcr", None)  # as if it were not installed
    monkeypatch.setenv("PYTEST_OPIK_EVAL_RECORD", "none")
    result = project.run("--eval")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*--eval-record=none (from env PYTEST_OPIK_EVAL_RECORD) records the app's calls with vcrpy, "
            "which is not installed: pip install 'pytest-opik-eval[[]record[]]'"
        ]
    )
    monkeypatch.delenv("PYTEST_OPIK_EVAL_RECORD")
    assert project.run("--eval", "--co").ret == pytest.ExitCode.OK  # off: vcrpy is not needed


def test_without_eval_record_nothing_is_patched(project: Project, llm: FakeLLM) -> None:
    write_project(project)
    project.write(
        "test_patched.py",
        """
        import sys

        def test_no_recorder():
            assert "vcr" not in sys.modules
            assert "pytest_opik_eval.run.recording" not in sys.modules
        """,
    )
    result = project.pytester.runpytest_subprocess("--eval")
    result.assert_outcomes(passed=4, failed=3)
    assert "eval recordings" not in result.stdout.str()
