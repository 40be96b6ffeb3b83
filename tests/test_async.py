"""`async def` eval tests with the plugins that run coroutine tests: pytest-asyncio and anyio.

The coroutine's return value is the task output, whichever plugin runs it. In its own test
case, a trial runs where that plugin would run the test, on the event loop of its async
fixtures; with threads, each trial runs on an event loop of its own.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest
from conftest import LOOP_SCOPE_APART, Project, items

LABELS = [f"item-{i}" for i in range(4)]

ASYNCIO_INI = """
[pytest]
filterwarnings = default
asyncio_default_fixture_loop_scope = function
asyncio_mode = {mode}
"""

# The test records the event loop it ran on, and the one its async fixture was set up on.
ON_THE_FIXTURE_LOOP = """
import asyncio
import pytest
{imports}

LOOPS = []

@{fixture}
async def fixture_loop():
    return asyncio.get_running_loop()

{marker}
@pytest.mark.eval(dataset="data.jsonl")
async def test_async(eval_item, fixture_loop):
    await asyncio.sleep(0)
    assert asyncio.get_running_loop() is fixture_loop, "not on the loop of the async fixture"
    return eval_item["id"]
"""

# Four trials in flight at the same time, or a failure.
CONCURRENT = """
import asyncio
import pytest

started = []

{marker}
@pytest.mark.eval(dataset="data.jsonl", task_threads=4)
async def test_async(eval_item):
    started.append(eval_item["id"])
    for _ in range(500):  # wait until all four are in flight
        if len(started) == 4:
            return eval_item["id"]
        await asyncio.sleep(0.01)
    raise AssertionError("the trials did not run at the same time")
"""

PYTEST_ASYNCIO_MODES = [
    pytest.param("auto", "", id="auto-mode"),
    pytest.param("strict", "@pytest.mark.asyncio", id="strict-mode-marked"),
    pytest.param("strict", "", id="strict-mode-unmarked"),  # the plugin runs it itself
]


def outputs(report: dict[str, Any]) -> dict[str, object]:
    [experiment] = report["experiments"]
    return {t["dataset_item_id"]: t["output"] for t in experiment["trials"]}


@pytest.mark.parametrize(("mode", "marker"), PYTEST_ASYNCIO_MODES)
def test_pytest_asyncio_scores_what_the_coroutine_returned(project: Project, mode: str, marker: str) -> None:
    project.pytester.makeini(ASYNCIO_INI.format(mode=mode))
    project.dataset(items(*LABELS))
    if marker:
        fixture = "pytest_asyncio.fixture"
        imports = "import pytest_asyncio"
    else:
        fixture, imports = "pytest.fixture", ""
    if mode == "strict" and not marker:
        # Unmarked in strict mode: pytest-asyncio leaves the test and its fixture alone.
        source = ON_THE_FIXTURE_LOOP.replace("async def fixture_loop", "def fixture_loop")
        source = source.replace("return asyncio.get_running_loop()", "return None")
        source = source.replace("assert asyncio.get_running_loop() is fixture_loop", "assert True")
    else:
        source = ON_THE_FIXTURE_LOOP
    project.write("test_coro.py", source.format(imports=imports, fixture=fixture, marker=marker))
    result, report = project.run_report("--eval", "-p", "asyncio")
    result.assert_outcomes(passed=4)
    assert outputs(report) == {label: {"output": label} for label in LABELS}


@pytest.mark.parametrize(("mode", "marker"), PYTEST_ASYNCIO_MODES)
def test_pytest_asyncio_with_threads_runs_the_trials_concurrently(
    project: Project, mode: str, marker: str
) -> None:
    project.pytester.makeini(ASYNCIO_INI.format(mode=mode))
    project.dataset(items(*LABELS))
    project.write("test_coro.py", CONCURRENT.format(marker=marker))
    result, report = project.run_report("--eval", "-p", "asyncio", "--eval-threads=4")
    result.assert_outcomes(passed=4)
    assert outputs(report) == {label: {"output": label} for label in LABELS}


def test_anyio_scores_what_the_coroutine_returned_on_its_event_loop(project: Project) -> None:
    project.dataset(items(*LABELS))
    project.write(
        "test_coro.py",
        ON_THE_FIXTURE_LOOP.format(imports="", fixture="pytest.fixture", marker="@pytest.mark.anyio"),
    )
    result, report = project.run_report("--eval", "-p", "anyio", "-v")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["*test_async?asyncio-item-0-t0? PASSED*"])
    assert outputs(report) == {label: {"output": label} for label in LABELS}


def test_anyio_with_threads_runs_the_trials_concurrently(project: Project) -> None:
    project.dataset(items(*LABELS))
    project.write(
        "conftest.py", "import pytest\n\n@pytest.fixture\ndef anyio_backend():\n    return 'asyncio'\n"
    )
    project.write("test_coro.py", CONCURRENT.format(marker="@pytest.mark.anyio"))
    result, report = project.run_report("--eval", "-p", "anyio", "--eval-threads=4")
    result.assert_outcomes(passed=4)
    assert "eval notices" not in result.stdout.str()  # anyio_backend is not an object to share
    assert outputs(report) == {label: {"output": label} for label in LABELS}


@pytest.mark.parametrize("plugin", ["asyncio", "anyio"])
def test_a_shared_async_fixture_runs_the_trials_one_at_a_time_on_its_loop(
    project: Project, plugin: str
) -> None:
    project.dataset(items(*LABELS))
    if plugin == "asyncio":
        project.pytester.makeini(ASYNCIO_INI.format(mode="strict"))
        if LOOP_SCOPE_APART:
            fixture = 'pytest_asyncio.fixture(scope="module", loop_scope="module")'
            marker = '@pytest.mark.asyncio(loop_scope="module")'
        else:
            fixture, marker = 'pytest_asyncio.fixture(scope="module")', '@pytest.mark.asyncio(scope="module")'
        imports = "import pytest_asyncio"
    else:
        fixture, marker, imports = 'pytest.fixture(scope="module")', "@pytest.mark.anyio", ""
    project.write("test_coro.py", ON_THE_FIXTURE_LOOP.format(imports=imports, fixture=fixture, marker=marker))
    result, report = project.run_report("--eval", "-p", plugin, "--eval-threads=4")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(
        [
            "*eval notices*",
            "test_coro.py::test_async (test_coro.py:*) uses the async fixture 'fixture_loop', whose objects "
            "belong to the event loop it was set up on, so its trials run one at a time, on that loop;*",
        ]
    )
    assert outputs(report) == {label: {"output": label} for label in LABELS}


def test_resume_with_pytest_asyncio(project: Project) -> None:
    project.pytester.makeini(ASYNCIO_INI.format(mode="auto"))
    project.dataset(items(*LABELS))
    project.eval_test(imports="import asyncio")
    source = (project.path / "test_eval.py").read_text()
    source = source.replace("def task(", "async def task(").replace("return task(", "return await task(")
    source = source.replace("def test_qa(", "async def test_qa(")
    (project.path / "test_eval.py").write_text(source)
    project.fail("item-2")
    project.run("--eval", "-p", "asyncio", "--eval-threads=2").assert_outcomes(passed=3, failed=1)
    project.calls()
    project.repair()
    result, report = project.run_report("--eval-resume=last", "-p", "asyncio")
    result.assert_outcomes(passed=1, deselected=3)
    assert project.calls() == ["item-2#0"]
    assert outputs(report)["item-2"] == {"output": "item-2"}


# Set as the thread's current event loop by someone else (pytest-asyncio before 0.24 leaves a
# fresh one after each of its tests): running the eval test's coroutine must leave it there, as
# a loop dropped unclosed is a ResourceWarning, an error under -W error.
ANOTHER_PLUGINS_LOOP = """
import asyncio
import pytest

LOOP = asyncio.new_event_loop()
asyncio.set_event_loop(LOOP)

@pytest.mark.eval(dataset="data.jsonl")
async def test_async(eval_item):
    await asyncio.sleep(0)
    return eval_item["id"]

def test_the_loop_is_still_current():
    assert asyncio.get_event_loop_policy().get_event_loop() is LOOP
    LOOP.close()
"""


@pytest.mark.skipif(sys.version_info < (3, 11), reason="no asyncio.Runner: the plugin uses asyncio.run")
def test_a_coroutine_the_plugin_runs_leaves_the_current_event_loop_alone(project: Project) -> None:
    project.dataset(items(*LABELS))
    project.write("test_coro.py", ANOTHER_PLUGINS_LOOP)
    project.run("--eval").assert_outcomes(passed=5)
