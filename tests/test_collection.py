"""How eval tests become pytest test cases, and how they play with pytest's own selection."""

from __future__ import annotations

import importlib.metadata

import pytest
from conftest import Project, items


def test_collect_only_lists_trials_and_writes_nothing(project: Project) -> None:
    project.dataset(items("a", "b"))
    project.eval_test("trial_count=2,")
    result = project.run("--eval", "--co", "-q")
    result.stdout.fnmatch_lines(
        [
            "test_eval.py::test_qa?a-t0?",
            "test_eval.py::test_qa?a-t1?",
            "test_eval.py::test_qa?b-t0?",
            "test_eval.py::test_qa?b-t1?",
            "4 tests collected*",
        ]
    )
    assert not project.store_path.exists()
    assert project.calls() == []


def test_without_eval_eval_tests_are_left_out_with_one_line(project: Project) -> None:
    # The dataset does not exist: without --eval it is never read.
    project.eval_test(dataset='"missing.jsonl"')
    project.write("test_plain.py", "def test_plain():\n    pass\n")
    result = project.run()
    result.assert_outcomes(passed=1, deselected=1)
    result.stdout.fnmatch_lines(["1 eval test(s) not run: run them with pytest --eval"])
    result.stdout.no_fnmatch_line("*eval summary*")
    assert not project.store_path.exists()


def test_no_line_when_there_is_no_eval_test(project: Project) -> None:
    project.write("test_plain.py", "def test_plain():\n    pass\n")
    result = project.run("--eval")
    result.assert_outcomes(passed=1)
    result.stdout.no_fnmatch_line("*eval summary*")
    assert not project.store_path.exists()


def test_k_plans_only_what_it_selects(project: Project) -> None:
    project.dataset(items("a", "b", "c"))
    project.eval_test("trial_count=2,")
    result = project.run("--eval", "-k", "b-t1 or c")
    result.assert_outcomes(passed=3, deselected=3)
    assert [(t.dataset_item_id, t.trial) for t in project.trials()] == [("b", 1), ("c", 0), ("c", 1)]
    result.stdout.fnmatch_lines(["*trials: 3 planned, 3 completed*0 pending"])


def test_m_selects_eval_tests_by_their_markers(project: Project) -> None:
    project.pytester.makeini("[pytest]\nfilterwarnings = error\nmarkers = slow\n")
    project.dataset(items("a", "b"))
    project.eval_test(imports="pytestmark = pytest.mark.slow")
    project.write("test_plain.py", "def test_plain():\n    pass\n")
    project.run("--eval", "-m", "slow").assert_outcomes(passed=2, deselected=1)
    project.run("--eval", "-m", "not slow").assert_outcomes(passed=1, deselected=2)


def test_last_failed_reruns_the_failed_trials(project: Project) -> None:
    project.dataset(items("a", "b", "c"))
    project.eval_test()
    project.fail("b")
    project.run("--eval").assert_outcomes(passed=2, failed=1)
    project.calls()
    project.repair()
    project.run("--eval", "--lf").assert_outcomes(passed=1)
    assert project.calls() == ["b#0"]


def test_parametrize_makes_one_experiment_per_combination(project: Project) -> None:
    project.dataset(items("a", "b"))
    project.write(
        "test_models.py",
        """
        import pytest
        from pytest_opik_eval.metrics import Equals

        @pytest.mark.parametrize("model", ["small", "large"])
        @pytest.mark.eval(dataset="data.jsonl", metrics=[Equals()],
                          scoring_key_mapping={"reference": "expected_output"})
        def test_qa(eval_item, model):
            text = eval_item["input"]["text"]
            return text if model == "large" or text == "a" else "wrong"
        """,
    )
    result, report = project.run_report("--eval", "-v")
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(["*test_qa?small-a-t0? PASSED*", "*test_qa?small-b-t0? FAILED*"])
    experiments = {e["name"]: e for e in report["experiments"]}
    assert set(experiments) == {"test_qa[small]", "test_qa[large]"}
    assert experiments["test_qa[small]"]["summary"]["metrics"]["equals_metric"]["mean"] == 0.5
    assert experiments["test_qa[large]"]["summary"]["metrics"]["equals_metric"]["mean"] == 1.0
    assert {e["test"] for e in report["experiments"]} == {"test_models.py::test_qa"}

    # Resuming the run picks each combination's pending trials.
    result = project.run("--eval-resume=last")
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # small-b failed in the run
    result.stdout.fnmatch_lines(["nothing pending: *"])


def test_a_selection_matching_no_items_is_one_skipped_test(project: Project) -> None:
    project.dataset(items("a", "b", category="geo"))
    project.eval_test("filter='data.category = \"math\"',")
    result = project.run("--eval", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED*test_eval.py*the selection matched no items of data.jsonl"])


def test_ids_outside_ascii_are_stable_and_resumable(project: Project) -> None:
    project.dataset(items("café", "naïve q"))
    project.eval_test()
    project.fail("café")
    result = project.run("--eval", "-v")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*test_qa?caf%C3%A9-t0? FAILED*", "*test_qa?na%C3%AFve q-t0? PASSED*"])
    project.calls()
    project.repair()
    project.run("--eval-resume=last").assert_outcomes(passed=1, deselected=1)
    assert project.calls() == ["café#0"]


def test_eval_test_in_a_class(project: Project) -> None:
    project.dataset(items("a"))
    project.write(
        "test_class.py",
        """
        import pytest
        from pytest_opik_eval.metrics import Equals

        @pytest.mark.eval(dataset="data.jsonl", metrics=[Equals()],
                          scoring_key_mapping={"reference": "expected_output"})
        class TestQA:
            def test_echo(self, eval_item):
                return eval_item["input"]["text"]
        """,
    )
    result = project.run("--eval", "-v")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["test_class.py::TestQA::test_echo?a-t0? PASSED*"])


def test_marker_and_options_are_documented(project: Project) -> None:
    result = project.run("--markers")
    result.stdout.fnmatch_lines(
        [
            "@pytest.mark.eval(dataset, *, metrics=(), scoring_key_mapping=None, trial_count=1, "
            "filter=None, item_ids=None, sampler=None, nb_samples=None, experiment_name=None, "
            "thresholds=None, fail_under=None, min_pass_rate=None, pass_threshold=None, dataset_name=None, "
            "task_threads=None, max_cost=None, max_latency=None, labels_field=None, judge_samples=None, batch=None): "
            "run the test as an evaluation*"
        ]
    )
    result = project.run("--help")
    result.stdout.fnmatch_lines(
        [
            "LLM evaluations (pytest-opik-eval):",
            "  --eval*Run eval tests*",
            "  --eval-resume=ID*",
            "  --eval-store=PATH*",
            "  --eval-threads=N*",
            "  --eval-judge-samples=N*",
            "  --eval-report=PATH*",
        ]
    )


def test_p_no_opik_eval_disables_the_plugin(project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    # Loaded as pytest loads it for a user, from its entry point, after the -p no: options (the
    # suite's own ``-p opik_eval`` would load it again once ``-p no:opik_eval`` had blocked it);
    # every other installed plugin is blocked, so the run stays hermetic.
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD")
    monkeypatch.delenv("PYTEST_ADDOPTS")
    others = [
        arg
        for entry_point in importlib.metadata.entry_points(group="pytest11")
        if entry_point.name != "opik_eval"
        for arg in ("-p", f"no:{entry_point.name}")
    ]
    project.write("test_plain.py", "def test_plain():\n    pass\n")
    project.run(*others, "--eval").assert_outcomes(passed=1)  # it is loaded
    result = project.run(*others, "-p", "no:opik_eval", "--eval")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unrecognized arguments: --eval*"])
    project.run(*others, "-p", "no:opik_eval").assert_outcomes(passed=1)


def test_eval_fixtures_outside_an_eval_test_say_why(project: Project) -> None:
    project.write("test_plain.py", "def test_plain(eval_item):\n    pass\n")
    result = project.run("--eval")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*test_plain uses the eval_item fixture, which only tests marked @pytest.mark.eval have*"]
    )


def test_works_with_plugin_autoload_disabled(project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.delenv("PYTEST_ADDOPTS")  # the suite's own way of loading it
    project.dataset(items("a"))
    project.eval_test()
    result = project.pytester.runpytest_subprocess("-p", "opik_eval", "--eval")
    result.assert_outcomes(passed=1)
    result = project.pytester.runpytest_subprocess("--eval")
    assert result.ret == pytest.ExitCode.USAGE_ERROR  # the plugin is not loaded: --eval is unknown
