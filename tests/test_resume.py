"""--eval-resume end to end: the scenarios of the Opik SDK's evaluate_resume suite, ported to
the pytest interface, and the ways a pytest run can break (SIGKILL, Ctrl-C, -x)."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import Project, items


@pytest.fixture
def project(any_backend: Project) -> Project:
    """Every resume scenario runs against the local store and against an Opik server."""
    return any_backend


LABELS = [f"item-{i}" for i in range(5)]


def scores_of(report: dict[str, Any], name: str = "equals_metric") -> dict[tuple[str, int], float]:
    [experiment] = report["experiments"]
    return {
        (t["dataset_item_id"], t["trial"]): s["value"]
        for t in experiment["trials"]
        for s in t["scores"]
        if s["name"] == name
    }


def test_happy_path_with_mapping_round_trip(project: Project) -> None:
    project.dataset(items("hello", "world", "test"))
    project.eval_test()

    result, report = project.run_report("--eval")
    result.assert_outcomes(passed=3)
    assert scores_of(report) == {("hello", 0): 1.0, ("world", 0): 1.0, ("test", 0): 1.0}
    assert project.completed() == {("hello", 0), ("world", 0), ("test", 0)}
    project.calls()

    result, report = project.run_report(f"--eval-resume={report['experiments'][0]['id']}")
    assert project.calls() == []
    assert result.ret == 0
    result.stdout.fnmatch_lines(["nothing pending: every planned trial of * is completed"])
    [experiment] = report["experiments"]
    assert len(experiment["trials"]) == 3
    assert all(not t["ran_this_session"] for t in experiment["trials"])
    assert set(scores_of(report).values()) == {1.0}
    assert project.completed() == {("hello", 0), ("world", 0), ("test", 0)}


def test_failure_during_run_then_resume(project: Project) -> None:
    project.dataset(items(*LABELS))
    project.eval_test()
    project.fail("item-3", "item-4")

    result = project.run("--eval")
    result.assert_outcomes(passed=3, failed=2)
    assert project.completed() == {("item-0", 0), ("item-1", 0), ("item-2", 0)}
    result.stdout.fnmatch_lines(["*trials: 5 planned, 3 completed*2 pending", "*pytest --eval-resume=*"])
    project.calls()

    project.repair()
    result, report = project.run_report("--eval-resume=last")
    result.assert_outcomes(passed=2, deselected=3)
    assert sorted(project.calls()) == ["item-3#0", "item-4#0"]
    assert scores_of(report) == {(label, 0): 1.0 for label in LABELS}
    ran = {t["dataset_item_id"] for t in report["experiments"][0]["trials"] if t["ran_this_session"]}
    assert ran == {"item-3", "item-4"}
    assert project.completed() == {(label, 0) for label in LABELS}


def test_failure_during_first_resume_then_second_resume(project: Project) -> None:
    project.dataset(items(*LABELS))
    project.eval_test()
    project.fail("item-3", "item-4")
    project.run("--eval").assert_outcomes(passed=3, failed=2)
    experiment_id = project.last_experiment_id()
    project.calls()

    project.fail("item-4")
    project.run(f"--eval-resume={experiment_id}").assert_outcomes(passed=1, failed=1, deselected=3)
    assert sorted(project.calls()) == ["item-3#0", "item-4#0"]
    assert project.completed() == {(label, 0) for label in LABELS[:4]}

    project.repair()
    project.run(f"--eval-resume={experiment_id}").assert_outcomes(passed=1, deselected=4)
    assert project.calls() == ["item-4#0"]
    assert project.completed() == {(label, 0) for label in LABELS}


def test_unknown_id_is_a_usage_error(project: Project) -> None:
    project.dataset(items("a"))
    project.eval_test()
    project.run("--eval").assert_outcomes(passed=1)

    result = project.run("--eval-resume=0190c1a0-0000-7000-8000-000000000000")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "ERROR: --eval-resume=0190c1a0-0000-7000-8000-000000000000: no experiment or run with id "
            f"* in the * {project.store_path}*opik-eval runs*"
        ]
    )
    assert project.calls() == ["a#0"]


def test_last_in_an_empty_store_is_a_usage_error(project: Project) -> None:
    project.dataset(items("a"))
    project.eval_test()
    result = project.run("--eval-resume=last")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f"ERROR: --eval-resume=last: no run in the eval store {project.store_path}*"]
    )
    assert not project.store_path.exists(), "a resume must not create a store"


def test_unknown_id_from_python_raises_experiment_not_found(project: Project) -> None:
    from pytest_opik_eval.exceptions import ExperimentNotFound
    from pytest_opik_eval.store.local import LocalStore

    project.dataset(items("a"))
    project.eval_test()
    project.run("--eval").assert_outcomes(passed=1)
    store = LocalStore(project.store_path)
    with pytest.raises(ExperimentNotFound, match="no experiment or run with id 'nope'"):
        store.find("nope")
    store.close()


def test_filter_is_replayed(project: Project) -> None:
    project.dataset(
        [
            {"id": "q1", "input": {"text": "q1"}, "expected_output": "q1", "category": "geo"},
            {"id": "q2", "input": {"text": "q2"}, "expected_output": "q2", "category": "math"},
            {"id": "q3", "input": {"text": "q3"}, "expected_output": "q3", "category": "geo"},
            {"id": "q4", "input": {"text": "q4"}, "expected_output": "q4", "category": "math"},
        ]
    )
    project.eval_test("filter='data.category = \"geo\"',")
    project.fail("q3")
    project.run("--eval").assert_outcomes(passed=1, failed=1)
    assert project.calls() == ["q1#0", "q3#0"]

    project.repair()
    project.run("--eval-resume=last").assert_outcomes(passed=1, deselected=1)
    assert project.calls() == ["q3#0"]
    project.run("--eval-resume=last").assert_outcomes(deselected=2)
    assert project.calls() == []
    assert project.completed() == {("q1", 0), ("q3", 0)}


def test_item_ids_are_replayed(project: Project) -> None:
    project.dataset(items("v0", "v1", "v2", "v3"))
    project.eval_test("item_ids=['v1', 'v0'],")
    project.fail("v1")
    project.run("--eval").assert_outcomes(passed=1, failed=1)
    assert project.calls() == ["v1#0", "v0#0"]
    assert project.completed() == {("v0", 0)}

    project.repair()
    project.run("--eval-resume=last").assert_outcomes(passed=1, deselected=1)
    assert project.calls() == ["v1#0"]
    assert project.completed() == {("v0", 0), ("v1", 0)}


def test_random_sampler_is_replayed_not_resampled(project: Project) -> None:
    # No seed: a fresh sample would differ, so only the stored one can give the same items.
    project.dataset(items(*(f"v{i}" for i in range(10))))
    project.eval_test(
        "sampler=RandomDatasetSampler(max_samples=3),",
        imports="from pytest_opik_eval.samplers import RandomDatasetSampler",
    )
    project.fail(*(f"v{i}" for i in range(10)))
    project.run("--eval").assert_outcomes(failed=3)
    sampled = project.calls()
    assert len(set(sampled)) == 3

    project.repair()
    project.run("--eval-resume=last").assert_outcomes(passed=3)
    assert project.calls() == sampled
    assert project.completed() == {(call.split("#")[0], 0) for call in sampled}


def test_nb_samples_is_replayed(project: Project) -> None:
    project.dataset(items(*LABELS))
    project.eval_test("nb_samples=3,")
    project.fail(*LABELS)
    project.run("--eval").assert_outcomes(failed=3)
    assert project.calls() == ["item-0#0", "item-1#0", "item-2#0"]

    project.repair()
    project.run("--eval-resume=last").assert_outcomes(passed=3)
    assert project.calls() == ["item-0#0", "item-1#0", "item-2#0"]
    assert project.completed() == {("item-0", 0), ("item-1", 0), ("item-2", 0)}


def test_trial_count_partial_item_replays_only_missing_trials(project: Project) -> None:
    project.dataset(items("value"))
    project.eval_test("trial_count=3,")
    project.fail("value#1", "value#2")
    project.run("--eval").assert_outcomes(passed=1, failed=2)
    assert project.completed() == {("value", 0)}
    project.calls()

    project.repair()
    result, report = project.run_report("--eval-resume=last")
    result.assert_outcomes(passed=2, deselected=1)
    assert project.calls() == ["value#1", "value#2"]
    assert scores_of(report) == {("value", 0): 1.0, ("value", 1): 1.0, ("value", 2): 1.0}


def test_mixed_partial_and_fully_completed_items(project: Project) -> None:
    project.dataset(items("item-0", "item-1", "item-2"))
    project.eval_test("trial_count=2,")
    project.fail("item-1#1")
    project.run("--eval").assert_outcomes(passed=5, failed=1)
    assert {item for item, _ in project.completed()} == {"item-0", "item-1", "item-2"}
    project.calls()

    project.repair()
    result, report = project.run_report("--eval-resume=last")
    result.assert_outcomes(passed=1, deselected=5)
    assert project.calls() == ["item-1#1"]
    trials = report["experiments"][0]["trials"]
    assert len(trials) == 6
    assert {t["dataset_item_id"]: 0 for t in trials} == {"item-0": 0, "item-1": 0, "item-2": 0}
    assert all(t["status"] == "completed" for t in trials)


# A metric that raises what the fail file names: SystemExit (a BaseException) or RuntimeError.
RAISING_METRIC = """
from pytest_opik_eval.metrics import BaseMetric, ScoreResult


class Raising(BaseMetric):
    def __init__(self):
        super().__init__(name="raising", threshold=1.0)

    def score(self, output, reference, **ignored):
        crash = HERE / "metric_crash.txt"
        if crash.exists():
            kind, *labels = crash.read_text().split()
            if output in labels:
                raise {"exit": SystemExit, "error": RuntimeError}[kind](f"scoring crash on {output}")
        return ScoreResult(name=self.name, value=float(output == reference))
"""


def metric_crash(project: Project, kind: str, *labels: str) -> None:
    (project.path / "metric_crash.txt").write_text(" ".join([kind, *labels]))


def test_base_exception_in_scoring_after_the_task_is_replayed(project: Project) -> None:
    project.dataset(items("item-0", "item-1", "item-2"))
    project.eval_test(
        metrics="[Raising()]", imports=RAISING_METRIC.replace("HERE", "pathlib.Path(__file__).parent")
    )
    metric_crash(project, "exit", "item-1")
    result = project.run("--eval")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*SystemExit: scoring crash on item-1*"])
    assert project.completed() == {("item-0", 0), ("item-2", 0)}
    [pending] = [t for t in project.trials() if t.status == "pending"]
    assert pending.output == {"output": "item-1"}, "the task's output was stored before scoring"
    project.calls()

    (project.path / "metric_crash.txt").unlink()
    result, report = project.run_report("--eval-resume=last")
    result.assert_outcomes(passed=1, deselected=2)
    assert project.calls() == ["item-1#0"]
    assert scores_of(report, "raising") == {("item-0", 0): 1.0, ("item-1", 0): 1.0, ("item-2", 0): 1.0}


def test_exception_in_a_metric_completes_the_trial_and_is_not_replayed(project: Project) -> None:
    project.dataset(items("item-0", "item-1", "item-2"))
    project.eval_test(
        metrics="[Raising()]", imports=RAISING_METRIC.replace("HERE", "pathlib.Path(__file__).parent")
    )
    metric_crash(project, "error", "item-1")
    result, report = project.run_report("--eval")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*raising*scoring failed: RuntimeError: scoring crash on item-1*"])
    assert project.completed() == {("item-0", 0), ("item-1", 0), ("item-2", 0)}
    [failed] = [t for t in report["experiments"][0]["trials"] if t["dataset_item_id"] == "item-1"]
    assert failed["scores"] == [
        {
            "name": "raising",
            "value": 0.0,
            "reason": "RuntimeError: scoring crash on item-1",
            "scoring_failed": True,
            "metadata": None,
            "samples": None,
        }
    ]
    assert report["experiments"][0]["summary"]["metrics"]["raising"]["failed"] == 1
    project.calls()

    (project.path / "metric_crash.txt").unlink()
    result, report = project.run_report("--eval-resume=last")
    assert project.calls() == []
    assert len(report["experiments"][0]["trials"]) == 3
    # The trial completed with a failed score: the resumed experiment still fails.
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_mixed_task_and_scoring_failures_replay_exactly_the_failed(project: Project) -> None:
    project.dataset(items("task_fails", "scoring_fails", "all_good"))
    project.eval_test(
        metrics="[Raising()]", imports=RAISING_METRIC.replace("HERE", "pathlib.Path(__file__).parent")
    )
    project.fail("task_fails")
    metric_crash(project, "exit", "scoring_fails")
    project.run("--eval").assert_outcomes(passed=1, failed=2)
    assert project.completed() == {("all_good", 0)}
    project.calls()

    project.repair()
    (project.path / "metric_crash.txt").unlink()
    result, report = project.run_report("--eval-resume=last")
    result.assert_outcomes(passed=2, deselected=1)
    assert sorted(project.calls()) == ["scoring_fails#0", "task_fails#0"]
    assert len(report["experiments"][0]["trials"]) == 3
    assert project.completed() == {("task_fails", 0), ("scoring_fails", 0), ("all_good", 0)}


def test_sigkill_mid_run_then_resume_runs_no_completed_trial_twice(project: Project) -> None:
    project.dataset(items(*LABELS))
    project.eval_test(
        behaviour="if (HERE / 'kill').exists() and item['id'] == 'item-2': os.kill(os.getpid(), 9)",
        imports="import os",
    )
    (project.path / "kill").touch()
    result = project.pytester.runpytest_subprocess("--eval")
    assert result.ret == -9
    assert project.calls() == ["item-0#0", "item-1#0", "item-2#0"]
    assert project.completed() == {("item-0", 0), ("item-1", 0)}

    (project.path / "kill").unlink()
    project.run("--eval-resume=last").assert_outcomes(passed=3, deselected=2)
    assert project.calls() == ["item-2#0", "item-3#0", "item-4#0"]
    assert project.completed() == {(label, 0) for label in LABELS}


def test_ctrl_c_then_resume(project: Project) -> None:
    project.dataset(items(*LABELS))
    project.eval_test(
        behaviour="if (HERE / 'interrupt').exists() and item['id'] == 'item-2': raise KeyboardInterrupt"
    )
    (project.path / "interrupt").touch()
    # In a subprocess: pytester re-raises a Ctrl-C of an in-process run.
    result, report = project.run_report("--eval", subprocess=True)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    statuses = [t["status"] for t in report["experiments"][0]["trials"]]
    assert statuses == ["completed", "completed", "pending", "pending", "pending"]
    result.stdout.fnmatch_lines(["*resume the 3 pending: pytest --eval-resume=*"])
    project.calls()

    (project.path / "interrupt").unlink()
    project.run("--eval-resume=last").assert_outcomes(passed=3, deselected=2)
    assert project.calls() == ["item-2#0", "item-3#0", "item-4#0"]


def test_exitfirst_then_resume(project: Project) -> None:
    project.dataset(items(*LABELS))
    project.eval_test()
    project.fail("item-1")
    result = project.run("--eval", "-x")
    result.assert_outcomes(passed=1, failed=1)
    assert project.completed() == {("item-0", 0)}
    result.stdout.fnmatch_lines(["*4 pending*", "*resume the 4 pending: pytest --eval-resume=*"])
    project.calls()

    project.repair()
    project.run("--eval-resume=last").assert_outcomes(passed=4, deselected=1)
    assert project.calls() == ["item-1#0", "item-2#0", "item-3#0", "item-4#0"]


def test_edited_dataset_resume_replays_the_stored_items(project: Project) -> None:
    project.dataset(items("item-0", "item-1", "item-2"))
    project.eval_test()
    project.fail("item-1")
    project.run("--eval").assert_outcomes(passed=2, failed=1)
    project.calls()

    project.repair()
    # item-1 is gone from the file and the others changed: resume still runs the stored item-1.
    project.dataset([{"id": "item-0", "input": {"text": "changed"}, "expected_output": "other"}])
    result, report = project.run_report("--eval-resume=last")
    result.assert_outcomes(passed=1, deselected=2)
    assert project.calls() == ["item-1#0"]
    result.stdout.fnmatch_lines(
        [
            "*eval notices*",
            "test_eval.py::test_qa (test_eval.py:*): the test selects differently from experiment *"
            "the dataset data.jsonl was edited*resume replays the 3 items stored with the experiment",
        ]
    )
    assert report["experiments"][0]["dataset"]["items"] == 3


def test_changed_filter_warns_and_replays_the_stored_selection(project: Project) -> None:
    project.dataset(items("a", "b", category="x"))
    test = project.eval_test("filter='data.category = \"x\"',")
    project.fail("b")
    project.run("--eval").assert_outcomes(passed=1, failed=1)
    project.calls()

    project.repair()
    test.write_text(test.read_text().replace('"x"', '"y"'))
    result = project.run("--eval-resume=last")
    result.assert_outcomes(passed=1, deselected=1)
    result.stdout.fnmatch_lines(["*filter was 'data.category = \"x\"', is now 'data.category = \"y\"'*"])
    assert project.calls() == ["b#0"]


def test_a_resumed_trial_is_judged_by_the_thresholds_stored_with_its_experiment(project: Project) -> None:
    project.dataset(items("good", "wrong"))
    test = project.eval_test(
        'thresholds={"equals_metric": 0.0},', behaviour="if item['id'] == 'wrong': return 'not it'"
    )
    project.fail("wrong")
    project.run("--eval").assert_outcomes(passed=1, failed=1)

    # The marker now asks more: the experiment keeps the threshold it was created with.
    project.repair()
    test.write_text(test.read_text().replace('"equals_metric": 0.0', '"equals_metric": 1.0'))
    result, report = project.run_report("--eval-resume=last")
    result.assert_outcomes(passed=1, deselected=1)
    assert scores_of(report) == {("good", 0): 1.0, ("wrong", 0): 0.0}


def test_resume_exit_status_is_the_uninterrupted_runs(project: Project) -> None:
    project.dataset(items("good", "bad", "crash"))
    project.eval_test(behaviour="if item['id'] == 'bad': return 'wrong'")
    project.fail("crash")
    project.run("--eval").assert_outcomes(passed=1, failed=2)

    project.repair()
    result = project.run("--eval-resume=last")
    result.assert_outcomes(passed=1, deselected=2)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*failed in an earlier session (1):", "*test_eval.py::test_qa?bad-t0?"])

    result = project.run("--eval-resume=last")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["nothing pending: *"])


def test_resume_runs_only_pending_trials_and_no_other_test(project: Project) -> None:
    project.dataset(items("a", "b"))
    project.eval_test()
    project.write("test_plain.py", "def test_plain():\n    pass\n")
    project.fail("b")
    project.run("--eval").assert_outcomes(passed=2, failed=1)

    project.repair()
    result = project.run("--eval-resume=last", "-v")
    result.assert_outcomes(passed=1, deselected=2)
    result.stdout.fnmatch_lines(
        ["eval resume: 1 pending of 2 planned trials in 1 experiment(s) of run *", "*test_qa?b-t0? PASSED*"]
    )
    result.stdout.no_fnmatch_line("*test_plain*")


def test_two_tests_on_one_dataset_each_resume_their_own_experiment(project: Project) -> None:
    # Each experiment is bound to its own test, not offered to every test that names its dataset
    # (only an experiment opik.evaluate() started, which has no test, is).
    project.dataset(items("a", "b", "c"))
    project.eval_test(name="test_one")
    project.eval_test(name="test_two")
    project.fail("b")
    project.run("--eval").assert_outcomes(passed=4, failed=2)

    project.repair()
    result = project.run("--eval-resume=last", "-v")
    result.assert_outcomes(passed=2, deselected=4)
    result.stdout.fnmatch_lines(
        [
            "eval resume: 2 pending of 6 planned trials in 2 experiment(s) of run *",
            "*test_one.py::test_qa?b-t0? PASSED*",
            "*test_two.py::test_qa?b-t0? PASSED*",
        ]
    )


def test_resume_of_an_uncollected_test_names_the_node_id(project: Project) -> None:
    project.dataset(items("a"))
    test = project.eval_test()
    project.fail("a")
    project.run("--eval").assert_outcomes(failed=1)

    test.write_text(test.read_text().replace("def test_qa(", "def test_renamed("))
    result = project.run("--eval-resume=last")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "ERROR: --eval-resume=last: the test of experiment * was not collected: looked for test_eval.py::test_qa.*"
        ]
    )


def test_a_parametrized_test_resumes_only_the_combinations_its_run_had(project: Project) -> None:
    # The run had only test_qa[small] (-k), and stopped at its first failure (-x): on resume,
    # test_qa[large]'s trial cases belong to no experiment, and are deselected, not an error.
    project.dataset(items("a", "b"))
    project.write(
        "test_models.py",
        """
        import pathlib
        import pytest
        from pytest_opik_eval.metrics import Equals

        @pytest.mark.parametrize("model", ["small", "large"])
        @pytest.mark.eval(dataset="data.jsonl", metrics=[Equals()],
                          scoring_key_mapping={"reference": "expected_output"})
        def test_qa(eval_item, model):
            text = eval_item["input"]["text"]
            broken = pathlib.Path(__file__).with_name("broken.txt")
            return "wrong" if broken.exists() and text == "a" else text
        """,
    )
    (project.path / "broken.txt").write_text("")
    result, report = project.run_report("--eval", "-k", "small", "-x")
    result.assert_outcomes(failed=1, deselected=2)
    assert [e["name"] for e in report["experiments"]] == ["test_qa[small]"]

    (project.path / "broken.txt").unlink()
    result = project.run("--eval-resume=last", "-v")
    result.assert_outcomes(passed=1, deselected=3)
    result.stdout.fnmatch_lines(["*test_models.py::test_qa?small-b-t0? PASSED*"])
