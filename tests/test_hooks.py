"""The plugin's own hooks, implemented in a project's conftest.py."""

from __future__ import annotations

import json

from conftest import Project, items


def test_trial_finished_is_called_for_completed_trials_only(project: Project) -> None:
    project.dataset(items("a", "b", "c"))
    project.eval_test(behaviour="if item['id'] == 'c': return 'wrong'")
    project.fail("b")
    project.write(
        "conftest.py",
        """
        import json

        # The argument's type, by its module and by the path it had before verdict/ was split.
        from pytest_opik_eval.verdict.results import TrialResult as TrialResultOldPath
        from pytest_opik_eval.verdict.trial_scores import TrialResult

        def pytest_opik_eval_trial_finished(item, result):
            assert isinstance(result, TrialResult) and TrialResultOldPath is TrialResult
            with open("finished.jsonl", "a") as log:
                log.write(json.dumps({
                    "node": item.nodeid, "experiment": result.experiment_id, "item": result.item["id"],
                    "trial": result.trial, "output": result.output, "passed": result.passed,
                    "scores": [[s.name, s.value] for s in result.scores],
                }) + "\\n")
        """,
    )
    project.run("--eval").assert_outcomes(passed=1, failed=2)
    finished = [json.loads(line) for line in (project.path / "finished.jsonl").read_text().splitlines()]
    experiment = project.last_experiment_id()
    assert finished == [
        {
            "node": "test_eval.py::test_qa[a-t0]",
            "experiment": experiment,
            "item": "a",
            "trial": 0,
            "output": {"output": "a"},
            "passed": True,
            "scores": [["equals_metric", 1.0]],
        },
        {
            "node": "test_eval.py::test_qa[c-t0]",
            "experiment": experiment,
            "item": "c",
            "trial": 0,
            "output": {"output": "wrong"},
            "passed": False,
            "scores": [["equals_metric", 0.0]],
        },
    ]


def test_experiment_finished_gets_the_whole_experiment(project: Project) -> None:
    project.dataset(items("a", "b"))
    project.eval_test()
    project.fail("b")
    project.write(
        "conftest.py",
        """
        def pytest_opik_eval_experiment_finished(config, experiment):
            with open("experiments.txt", "a") as log:
                s = experiment.summary
                log.write(f"{experiment.name} {experiment.id} {s.trials} {s.completed} {s.pending} "
                          f"{s.metrics['equals_metric'].mean}\\n")
        """,
    )
    project.run("--eval").assert_outcomes(passed=1, failed=1)
    project.repair()
    project.run("--eval-resume=last").assert_outcomes(passed=1, deselected=1)
    experiment = project.last_experiment_id()
    assert (project.path / "experiments.txt").read_text().splitlines() == [
        f"test_qa {experiment} 2 1 1 1.0",
        f"test_qa {experiment} 2 2 0 1.0",
    ]


def test_a_conftest_can_supply_the_store(project: Project) -> None:
    project.dataset(items("a", "b"))
    project.eval_test()
    project.write(
        "conftest.py",
        """
        from pathlib import Path
        from pytest_opik_eval.store.local import LocalStore

        class CountingStore(LocalStore):
            completed = 0

            def complete_attempt(self, attempt_id):
                super().complete_attempt(attempt_id)
                CountingStore.completed += 1

        def pytest_opik_eval_store(config):
            return CountingStore(Path(config.rootpath, "custom.db"))

        def pytest_sessionfinish(session):
            Path("completed.txt").write_text(str(CountingStore.completed))
        """,
    )
    project.run("--eval").assert_outcomes(passed=2)
    assert (project.path / "custom.db").exists()
    assert not project.store_path.exists()
    assert (project.path / "completed.txt").read_text() == "2"
    # Resume finds the run in the supplied store too.
    result = project.run("--eval-resume=last")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["nothing pending: *"])
