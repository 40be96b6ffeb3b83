"""--eval-threads: trials of a test run at the same time, each still its own test case."""

from __future__ import annotations

import pytest
from conftest import Project, items


@pytest.fixture
def project(any_backend: Project) -> Project:
    """Concurrent trials against the local store and against an Opik server."""
    return any_backend


LABELS = [f"item-{i}" for i in range(8)]

# A barrier of 4 passes only if 4 trials run at the same time; one at a time, it times out.
TOGETHER = """
import threading
BARRIER = threading.Barrier(4, timeout=10)
"""


def test_up_to_n_trials_run_at_once(project: Project) -> None:
    project.dataset(items(*LABELS))
    project.eval_test(imports=TOGETHER, behaviour="BARRIER.wait()")
    result = project.run("--eval", "--eval-threads=4", "-v")
    result.assert_outcomes(passed=8)
    result.stdout.fnmatch_lines([f"*test_qa?{label}-t0? PASSED*" for label in LABELS])
    assert project.completed() == {(label, 0) for label in LABELS}


# item-0's model call is slow: it lasts until item-3's has started. Should item-3 never start while
# it waits (the other thread left idle), it gives up after 10 s and returns a wrong answer, so the
# outcome, not the run's duration, tells the two apart.
SLOW_HEAD = """if item['id'] == 'item-3':
        (HERE / 'item-3-started').touch()
    if item['id'] == 'item-0':
        deadline = time.monotonic() + 10
        while not (HERE / 'item-3-started').exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        if not (HERE / 'item-3-started').exists():
            return 'held up'"""


def test_a_slow_trial_does_not_leave_the_other_threads_idle(project: Project) -> None:
    # Two threads: while item-0 waits for its model, the other thread goes on to item-1, 2, 3.
    project.dataset(items(*LABELS[:4]))
    project.eval_test(imports="import time", behaviour=SLOW_HEAD)
    result = project.run("--eval", "--eval-threads=2")
    result.assert_outcomes(passed=4)


def test_one_at_a_time_without_threads(project: Project) -> None:
    project.dataset(items(*LABELS[:2]))
    project.eval_test(
        imports="import threading\nBARRIER = threading.Barrier(2, timeout=0.5)", behaviour="BARRIER.wait()"
    )
    project.run("--eval").assert_outcomes(failed=2)


def test_the_marker_wins_over_the_option(project: Project) -> None:
    project.dataset(items(*LABELS))
    project.eval_test("task_threads=4,", imports=TOGETHER, behaviour="BARRIER.wait()")
    project.run("--eval", "--eval-threads=1").assert_outcomes(passed=8)


def test_each_trial_keeps_its_own_outcome_and_marker(project: Project) -> None:
    project.dataset(items(*LABELS))
    project.eval_test(behaviour="if item['id'] == 'item-2': return 'wrong'")
    project.fail("item-5")
    result = project.run("--eval", "--eval-threads=4", "-v")
    result.assert_outcomes(passed=6, failed=2)
    result.stdout.fnmatch_lines(
        [
            "*test_qa?item-2-t0? FAILED*",
            "*test_qa?item-5-t0? FAILED*",
            "*item item-2 (trial 0) did not meet its thresholds:",
            "*RuntimeError: simulated crash on item-5",
        ]
    )
    completed = {item for item, _ in project.completed()}
    assert completed == set(LABELS) - {"item-5"}


def test_exitfirst_leaves_trials_run_ahead_pending(project: Project) -> None:
    project.dataset(items(*LABELS))
    project.eval_test()
    project.fail("item-1")
    result = project.run("--eval", "--eval-threads=3", "-x")
    result.assert_outcomes(passed=1, failed=1)
    trials = {t.dataset_item_id: t for t in project.trials()}
    assert {i for i, t in trials.items() if t.status == "completed"} == {"item-0"}
    # item-2 and item-3 ran ahead and finished, but their test cases were never reported.
    assert trials["item-2"].attempts == 1
    assert trials["item-2"].status == "pending"
    project.repair()
    project.calls()
    project.run("--eval-resume=last", "--eval-threads=3").assert_outcomes(passed=7, deselected=1)
    assert sorted(project.calls()) == [f"{label}#0" for label in LABELS[1:]]


def test_ctrl_c_abandons_trials_in_flight_and_writes_the_report(project: Project) -> None:
    project.dataset(items(*LABELS))
    project.eval_test(
        imports="import time",
        behaviour="if item['id'] == 'item-1': raise KeyboardInterrupt\n    if item['id'] != 'item-0': time.sleep(30)",
    )
    result, report = project.run_report("--eval", "--eval-threads=4", subprocess=True)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    statuses = [t["status"] for t in report["experiments"][0]["trials"]]
    assert statuses == ["completed"] + ["pending"] * 7
    assert result.duration < 20, "Ctrl-C must not wait for the trials in flight"


def test_a_function_scoped_fixture_runs_the_trials_one_at_a_time(project: Project) -> None:
    project.dataset(items(*LABELS[:3]))
    project.write(
        "test_fixture.py",
        """
        import pytest

        @pytest.fixture
        def client():
            return object()

        @pytest.mark.eval(dataset="data.jsonl")
        def test_fixture(eval_item, client):
            return eval_item["id"]
        """,
    )
    result = project.run("--eval", "--eval-threads=4")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(
        [
            "*eval notices*",
            # The user's test, and where it is: not the plugin's code that noticed.
            "test_fixture.py::test_fixture (test_fixture.py:*) uses the function-scoped fixture 'client', so its trials run one at a time*",
        ]
    )


def test_shared_fixtures_and_parametrize_reach_the_trials_run_ahead(project: Project) -> None:
    project.dataset(items(*LABELS))
    project.write(
        "test_shared.py",
        """
        import threading
        import pytest

        BARRIER = threading.Barrier(4, timeout=10)

        @pytest.fixture(scope="module")
        def client():
            return {"name": "shared"}

        @pytest.mark.parametrize("model", ["m"])
        @pytest.mark.eval(dataset="data.jsonl", task_threads=4)
        def test_shared(eval_item, eval_trial, client, model):
            BARRIER.wait()
            return f"{client['name']}-{model}-{eval_item['id']}-{eval_trial}"
        """,
    )
    _, report = project.run_report("--eval")
    outputs = {t["dataset_item_id"]: t["output"]["output"] for t in report["experiments"][0]["trials"]}
    assert outputs == {label: f"shared-m-{label}-0" for label in LABELS}


def test_async_eval_tests_run_concurrently(project: Project) -> None:
    project.dataset(items(*LABELS[:4]))
    project.write(
        "test_coro.py",
        """
        import asyncio
        import pytest

        started = []

        @pytest.mark.eval(dataset="data.jsonl", task_threads=4)
        async def test_async(eval_item):
            started.append(eval_item["id"])
            for _ in range(500):  # wait until all four are in flight
                if len(started) == 4:
                    return eval_item["id"]
                await asyncio.sleep(0.01)
            raise AssertionError("the trials did not run at the same time")
        """,
    )
    project.run("--eval").assert_outcomes(passed=4)
