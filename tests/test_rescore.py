"""--eval-rescore and opik-eval rescore: the stored outputs of a run scored again, the task never
called, as a new run linked to the original."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest
from conftest import Project, items
from opik_server import OpikTestServer

from pytest_opik_eval.cli import main as opik_eval
from pytest_opik_eval.store.local import LocalStore

# The first run's metric, then the marker edited to add one.
FIRST = "[Equals()]"
ADDED = "[Equals(), LevenshteinRatio()]"
IMPORTS = "from pytest_opik_eval.metrics import LevenshteinRatio"
# "b" answers close to its reference but not equal to it: the added metric says how close.
BEHAVIOUR = 'if item["id"] == "b":\n        return {"output": "bee"}'


def recorded(project: Project, marker: str = "") -> str:
    """A first run of three items, two trials each, scored with Equals; its experiment id."""
    project.dataset(items("a", "b", "c"))
    project.eval_test("trial_count=2," + marker, behaviour=BEHAVIOUR, imports=IMPORTS)
    project.run("--eval").assert_outcomes(passed=4, failed=2)
    assert len(project.calls()) == 6
    return project.last_experiment_id()


def verdicts(report: dict[str, Any]) -> dict[str, Any]:
    """What a rescore must give as a rerun does: each trial's scores and verdict, the summary's
    counts and metric aggregates, the gates."""
    [experiment] = report["experiments"]
    summary = experiment["summary"]
    return {
        "trials": sorted(
            (t["dataset_item_id"], t["trial"], t["status"], t["passed"], json.dumps(t["scores"]))
            for t in experiment["trials"]
        ),
        "items": experiment["items"],
        "summary": {k: v for k, v in summary.items() if k not in ("latency", "usage")},
        "gates": experiment["gates"],
        "gates_met": experiment["gates_met"],
        "settings": experiment["settings"],
    }


def test_a_rescore_with_an_added_metric_gives_what_a_rerun_gives_without_calling_the_task(
    project: Project,
) -> None:
    original = recorded(project)
    project.eval_test("trial_count=2,", metrics=ADDED, behaviour=BEHAVIOUR, imports=IMPORTS)

    rescored, rescore_report = project.run_report("--eval-rescore=last")
    assert project.calls() == []
    rescored.stdout.fnmatch_lines(
        ["eval: rescoring run *: 6 trials from stored outputs, the task is not called"]
    )
    rescored.assert_outcomes(passed=4, failed=2)
    rerun, rerun_report = project.run_report("--eval")
    assert len(project.calls()) == 6
    rerun.assert_outcomes(passed=4, failed=2)

    assert rescored.ret == rerun.ret == 1
    assert verdicts(rescore_report) == verdicts(rerun_report)
    [experiment] = rescore_report["experiments"]
    names = {s["name"] for t in experiment["trials"] for s in t["scores"]}
    assert names == {"equals_metric", "levenshtein_ratio_metric"}
    assert experiment["id"] != original
    assert experiment["rescore_of"] == original
    assert rerun_report["experiments"][0]["rescore_of"] is None


def test_threads_score_the_stored_outputs_too(project: Project) -> None:
    recorded(project)
    result, report = project.run_report("--eval-rescore=last", "--eval-threads=3")
    result.assert_outcomes(passed=4, failed=2)
    assert project.calls() == []
    outputs = {(t["dataset_item_id"], t["trial"]): t["output"] for t in report["experiments"][0]["trials"]}
    assert outputs[("b", 1)] == {"output": "bee"}
    assert outputs[("a", 0)] == {"output": "a"}


def test_under_xdist_the_workers_score_the_stored_outputs(project: Project) -> None:
    recorded(project)
    result, report = project.run_report("-p", "xdist", "-n", "2", "--eval-rescore=last")
    result.assert_outcomes(passed=4, failed=2)
    assert project.calls() == []
    assert report["experiments"][0]["summary"]["completed"] == 6


def test_eval_metric_replaces_the_markers_metrics(project: Project) -> None:
    # The marker's threshold and gate on Equals go with it: they would fail every trial as unscored.
    recorded(project, 'thresholds={"equals_metric": 1.0}, fail_under={"equals_metric": 0.9},')
    project.write(
        "my_metrics.py",
        """
        from pytest_opik_eval.metrics import BaseMetric, ScoreResult

        class Short(BaseMetric):
            def __init__(self):
                super().__init__(name="short")

            def score(self, output, **ignored):
                return ScoreResult(name=self.name, value=float(len(output) < 3))

        def judge():
            return Short()
        """,
    )
    project.pytester.syspathinsert()
    result, report = project.run_report(
        "--eval-rescore=last", "--eval-metric=LevenshteinRatio", "--eval-metric=my_metrics:judge"
    )
    assert project.calls() == []
    result.assert_outcomes(passed=6)  # neither metric has a threshold that fails a trial
    assert result.ret == pytest.ExitCode.OK
    [experiment] = report["experiments"]
    assert experiment["gates"] == []
    assert experiment["settings"]["thresholds"] == {
        "levenshtein_ratio_metric": None,
        "short": None,
    }
    scores = {
        (t["dataset_item_id"], s["name"]): s["value"] for t in experiment["trials"] for s in t["scores"]
    }
    assert {name for _, name in scores} == {"levenshtein_ratio_metric", "short"}
    assert scores[("b", "short")] == 0.0
    assert scores[("a", "short")] == 1.0
    assert scores[("a", "levenshtein_ratio_metric")] == 1.0


# Specs whose objects are no metrics, or whose code raises at each step of loading them.
HOSTILE = """
import sys
import pytest


def leave():
    sys.exit(3)


def quiet_exit():
    sys.exit()


def skipping():
    pytest.skip("no judge here")


class Broken:
    def __init__(self):
        raise RuntimeError("no key")


class Unprintable(Exception):
    def __str__(self):
        raise ValueError("no text")


def unprintable():
    raise Unprintable()


class Lazy:
    def __getattr__(self, name):
        raise LookupError("not yet")


lazy = Lazy()


class Haunted:
    name = property(lambda self: 1 / 0)

    def __repr__(self):
        raise RuntimeError("no repr")


haunted = Haunted()


def many():
    return list(range(100_000))


async def later():
    return None
"""


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        (
            "no_such_package.metrics:Judge",
            "--eval-metric=no_such_package.metrics:Judge: cannot import the module 'no_such_package.metrics'"
            " (ModuleNotFoundError: *",
        ),
        ("Nope", "--eval-metric=Nope: pytest_opik_eval.metrics has no metric 'Nope' (its metrics: *Equals*"),
        ("os:sep", "--eval-metric=os:sep: sep is neither a metric nor a class or factory that makes one: *"),
        # Not called: a built-in may end the process (os.abort) or wait for input.
        (
            "sys:exit",
            "--eval-metric=sys:exit: exit is a built-in function (<built-in function exit>), not a*",
        ),
        ("os:getcwd", "--eval-metric=os:getcwd: getcwd is a built-in function *"),
        (
            "os:get_exec_path",
            "--eval-metric=os:get_exec_path: get_exec_path() returned *, which is not a metric*",
        ),
        # The spec's own code, whatever it raises: named, never an internal error.
        (
            "hostile:leave",
            "--eval-metric=hostile:leave: calling leave() without arguments raised SystemExit: 3;*",
        ),
        ("hostile:quiet_exit", "*: calling quiet_exit() without arguments raised SystemExit;*"),
        ("hostile:skipping", "*: calling skipping() without arguments raised Skipped: no judge here;*"),
        ("hostile:Broken", "*: calling Broken() without arguments raised RuntimeError: no key;*"),
        ("hostile:unprintable", "*: calling unprintable() without arguments raised Unprintable;*"),
        ("hostile:lazy.judge", "*: looking up 'lazy.judge' in 'hostile' raised LookupError: not yet;*"),
        (
            "hostile:haunted",
            "*: haunted is neither a metric nor a class or factory that makes one: <Haunted object>;*",
        ),
        ("hostile:many", "*: many() returned [0, 1, 2, *... (* more characters), which is not a metric;*"),
        ("hostile:later", "*: later() returned <coroutine object later at *>, which is not a metric;*"),
        ("exits_on_import:judge", "*: importing the module 'exits_on_import' raised SystemExit: 2;*"),
        ("raises_on_import:judge", "*: importing the module 'raises_on_import' raised ZeroDivisionError: *"),
    ],
)
def test_a_bad_metric_spec_is_a_usage_error_that_says_which_part_failed(
    project: Project, spec: str, problem: str
) -> None:
    recorded(project)
    project.write("hostile.py", HOSTILE)
    project.write("exits_on_import.py", "import sys\nsys.exit(2)\n")
    project.write("raises_on_import.py", "RATE = 1 / 0\n")
    project.pytester.syspathinsert()
    result = project.run("--eval-rescore=last", f"--eval-metric={spec}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str() + result.stderr.str()
    result.stderr.fnmatch_lines([f"ERROR: {problem}accepted forms are package.module:NAME*"])
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    assert project.calls() == []


def test_opik_eval_rescore_with_sys_exit_as_a_metric_is_a_usage_error(project: Project) -> None:
    recorded(project)
    for option in (["--metric", "sys:exit"], ["--eval-metric=sys:exit"]):
        done = opik_eval_process("rescore", "last", *option)
        assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout + done.stderr
        assert "ERROR: --eval-metric=sys:exit: exit is a built-in function" in done.stderr
        assert "unexpected SystemExit" not in done.stdout + done.stderr
    assert project.calls() == []


def test_a_malformed_metric_spec_names_the_accepted_forms(project: Project) -> None:
    result = project.run("--eval-rescore=last", "--eval-metric=not a spec")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--eval-metric: expected package.module:NAME, where NAME is *'not a spec'"])


def test_eval_metric_needs_a_rescore(project: Project) -> None:
    project.dataset(items("a"))
    project.eval_test()
    result = project.run("--eval", "--eval-metric=Equals")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --eval-metric=Equals replaces the marker's metrics in a rescore*"])


def test_a_trial_that_never_completed_is_not_rescored_and_the_summary_says_why(project: Project) -> None:
    project.dataset(items("a", "b", "c"))
    project.eval_test()
    project.fail("b")
    project.run("--eval").assert_outcomes(passed=2, failed=1)
    run_id = LocalStore(project.store_path, create=False).find("last")[0].id
    project.calls()

    result, report = project.run_report("--eval-rescore=last")
    assert project.calls() == []
    result.assert_outcomes(passed=2, deselected=1)
    result.stdout.fnmatch_lines(
        [
            "eval: rescoring run *: 2 trials from stored outputs, the task is not called",
            f"*eval rescore: 1 trial of run {run_id} never completed: no stored output to score, not "
            f"rescored; resume the original first (pytest --eval-resume={run_id}), then rescore it",
        ]
    )
    assert sorted(t["dataset_item_id"] for t in report["experiments"][0]["trials"]) == ["a", "c"]


def test_the_new_experiment_links_to_the_original_which_is_untouched(
    project: Project, capsys: pytest.CaptureFixture[str]
) -> None:
    original = recorded(project)
    before = project.trials(original)
    project.eval_test("trial_count=2,", metrics=ADDED, behaviour=BEHAVIOUR, imports=IMPORTS)
    result = project.run("--eval-rescore=" + original)
    result.stdout.fnmatch_lines([f"  rescore of experiment {original}: its stored outputs scored again"])

    store = LocalStore(project.store_path, create=False)
    try:
        original_run = store.find(original)[0]
        run, [experiment] = store.find("last")
    finally:
        store.close()
    assert experiment.rescore_of == original
    assert experiment.id != original
    assert run.id != original_run.id
    assert project.trials(original) == before  # scores, outputs and statuses as they were

    capsys.readouterr()
    assert opik_eval(["--store", str(project.store_path), "show", "last"]) == 0
    assert f"  rescore of experiment {original}: its stored outputs scored again" in capsys.readouterr().out
    assert opik_eval(["--store", str(project.store_path), "show", "last", "--json"]) == 0
    [shown] = json.loads(capsys.readouterr().out)
    assert shown["rescore_of"] == original


def test_a_rescore_is_gated_like_any_run(project: Project) -> None:
    original = recorded(project)
    project.eval_test("trial_count=2,", metrics=ADDED, behaviour=BEHAVIOUR, imports=IMPORTS)
    result = project.run(
        "--eval-rescore=last", "--eval-soft", "--eval-fail-under=levenshtein_ratio_metric=0.99"
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["NOT MET*levenshtein_ratio_metric*0.99*"])

    # Against the original as its baseline: the metric both scored is where it was.
    result, report = project.run_report(
        f"--eval-rescore={original}",
        "--eval-soft",
        f"--eval-baseline={original}",
        "--eval-max-regression=equals_metric=0.1",
    )
    assert result.ret == pytest.ExitCode.OK
    [experiment] = report["experiments"]
    assert experiment["baseline"]["experiment_id"] == original
    assert experiment["baseline"]["metrics"]["equals_metric"]["delta"] == 0.0
    assert [(g["kind"], g["met"]) for g in experiment["gates"]] == [("max_regression", True)]
    assert project.calls() == []


def test_the_apps_latency_and_cost_gates_are_left_to_the_original_run(project: Project) -> None:
    # The app does not run: its latency and cost are not measured, and would fail their gates.
    recorded(project)
    result, report = project.run_report(
        "--eval-rescore=last", "--eval-soft", "--eval-max-latency=1ms", "--eval-max-cost=0.000001/item"
    )
    assert result.ret == pytest.ExitCode.OK
    [experiment] = report["experiments"]
    assert experiment["gates"] == []
    assert experiment["gates_met"] is True
    assert experiment["settings"]["max_latency"] is None
    assert experiment["settings"]["max_cost_per_item"] is None


# A rescore's metric that stops the session (Ctrl-C) at item b's output while the stop file is there.
STOPPING_METRIC = """
import pathlib
from pytest_opik_eval.metrics import BaseMetric, ScoreResult

class Short(BaseMetric):
    def __init__(self):
        super().__init__(name="short")

    def score(self, output, **ignored):
        if output == "bee" and pathlib.Path("stop").exists():
            raise KeyboardInterrupt
        return ScoreResult(name=self.name, value=float(len(output) < 3))
"""


def interrupted_rescore(project: Project) -> set[tuple[str, int]]:
    """A rescore of the last run with --eval-metric=my_metrics:Short, stopped by Ctrl-C at item
    b; the trials it completed."""
    project.write("my_metrics.py", STOPPING_METRIC)
    (project.path / "stop").touch()
    # In a process of its own: pytester's in-process run would pass the Ctrl-C to this one.
    interrupted = project.run_report(
        "--eval-rescore=last", "--eval-metric=my_metrics:Short", subprocess=True
    )[0]
    assert interrupted.ret == pytest.ExitCode.INTERRUPTED
    assert project.calls() == []
    done = project.completed()
    assert not {("b", 0), ("b", 1)} & done
    (project.path / "stop").unlink()
    return done


def test_an_interrupted_rescore_resumes_with_its_metrics_and_never_calls_the_task(project: Project) -> None:
    original = recorded(project)
    # Its --eval-metric stops the session at item b's output while the stop file is there.
    done_before = interrupted_rescore(project)
    rescore = project.last_experiment_id()

    result, report = project.run_report("--eval-resume=last", "-p", "xdist", "-n", "2", subprocess=True)
    assert project.calls() == []  # the pending trials scored the original's outputs
    result.stdout.fnmatch_lines(["eval: a rescore of run *: its pending trials score the stored outputs*"])
    result.assert_outcomes(passed=6 - len(done_before))
    assert project.completed() == {(i, t) for i in "abc" for t in (0, 1)}
    [experiment] = report["experiments"]
    assert (experiment["id"], experiment["rescore_of"]) == (rescore, original)
    # Scored with the rescore's --eval-metric, not the marker's Equals.
    assert {s["name"] for t in experiment["trials"] for s in t["scores"]} == {"short"}
    assert {t["dataset_item_id"]: t["output"] for t in experiment["trials"]}["b"] == {"output": "bee"}


def test_a_calibration_is_not_resumed(project: Project) -> None:
    project.dataset([{**i, "labels": {"equals_metric": True}} for i in items("a", "b")])
    project.eval_test("")
    project.run("--eval").assert_outcomes(passed=2)
    original = project.last_experiment_id()
    _, report = project.run_report("--eval-rescore=last", "--eval-calibrate")
    calibration = report["experiments"][0]["id"]
    result = project.run(f"--eval-resume={calibration}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            f"ERROR: --eval-resume={calibration}: experiment {calibration} measured the judges of "
            f"experiment {original} against its labels (opik-eval calibrate or judge-drift); run that "
            f"command on {original} again instead"
        ]
    )


def test_rescore_and_resume_cannot_be_combined(project: Project) -> None:
    recorded(project)
    result = project.run("--eval-rescore=last", "--eval-resume=last")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --eval-resume=last and --eval-rescore=last cannot be combined*"])


def test_an_unknown_id_is_a_usage_error_as_for_resume(project: Project) -> None:
    recorded(project)
    resumed = project.run("--eval-resume=nope")
    rescored = project.run("--eval-rescore=nope")
    assert resumed.ret == rescored.ret == pytest.ExitCode.USAGE_ERROR
    [resume_error] = [line for line in resumed.stderr.lines if line.startswith("ERROR:")]
    rescored.stderr.fnmatch_lines(
        [resume_error.replace("--eval-resume", "--eval-rescore").replace("[", "[[]")]
    )


def opik_eval_process(*args: str, cwd: str | None = None) -> subprocess.CompletedProcess[str]:
    """opik-eval in its own process, from the project folder unless ``cwd`` says another (it
    runs pytest in its process)."""
    return subprocess.run(
        [sys.executable, "-m", "pytest_opik_eval.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=os.environ.copy(),
        cwd=cwd,
    )


def test_opik_eval_rescore_last_from_the_project_folder(project: Project) -> None:
    original = recorded(project)
    project.eval_test("trial_count=2,", metrics=ADDED, behaviour=BEHAVIOUR, imports=IMPORTS)
    # Another test in the folder: only the rescored experiment's test is collected.
    project.pytester.makepyfile(test_other="def test_other():\n    raise AssertionError('collected')\n")

    done = opik_eval_process("rescore", "last", "--eval-fail-under=levenshtein_ratio_metric=0.5")
    assert done.returncode == 1, done.stdout + done.stderr  # the trials Equals fails: pytest's code
    assert project.calls() == []
    assert "eval: rescoring run " in done.stdout
    assert "2 failed, 4 passed" in done.stdout
    assert "test_other" not in done.stdout
    assert "met: test_qa: fail_under levenshtein_ratio_metric: mean 0.833 >= 0.5" in done.stdout
    assert f"rescore of experiment {original}" in done.stdout

    done = opik_eval_process("rescore", "last", "--metric", "LevenshteinRatio", "-q")
    assert done.returncode == 0, done.stdout + done.stderr
    assert project.calls() == []
    assert "6 passed" in done.stdout

    # From a folder below the project: the store and the tests are found from there too.
    below = project.path / "notes"
    below.mkdir()
    done = opik_eval_process("rescore", "last", "-q", cwd=str(below))
    assert done.returncode == 1, done.stdout + done.stderr
    assert project.calls() == []
    assert "2 failed, 4 passed" in done.stdout

    done = opik_eval_process("rescore", "nope")
    assert done.returncode == pytest.ExitCode.USAGE_ERROR
    assert "--eval-rescore=nope: no experiment or run with id 'nope'" in done.stderr


def test_other_commands_still_refuse_unknown_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        opik_eval(["runs", "-q"])
    assert exited.value.code == 2
    assert "unrecognized arguments: -q" in capsys.readouterr().err


SDK_READ = """
import json, opik
client = opik.Opik()
experiment = client.get_experiment_by_id({experiment_id!r})
scores = sorted(
    (s["name"], round(s["value"], 6))
    for item in experiment.get_items()
    for s in item.feedback_scores
)
print(json.dumps({{"name": experiment.name, "scores": scores}}))
"""


def test_with_the_opik_backend_a_new_experiment_carries_the_scores(
    project: Project, opik: OpikTestServer
) -> None:
    original = recorded(project)
    traces_before = {t["id"]: dict(t) for t in opik.traces.values()}
    project.eval_test("trial_count=2,", metrics=ADDED, behaviour=BEHAVIOUR, imports=IMPORTS)
    result = project.run("--eval-rescore=last")
    result.assert_outcomes(passed=4, failed=2)
    assert project.calls() == []

    [new] = [e for e in opik.experiments.values() if e["id"] != original]
    assert new["metadata"]["rescore_of"] == original
    assert new["metadata"]["_pytest_opik_eval"]["record"]["rescore_of"] == original
    assert "rescore_of" not in opik.experiments[original]["metadata"]
    links = [link for link in opik.experiment_items if link["experiment_id"] == new["id"]]
    assert len(links) == 6
    traces = [opik.traces[link["trace_id"]] for link in links]
    assert all(t["id"] not in traces_before for t in traces)
    outputs = sorted(
        (t["metadata"]["dataset_item_id"], t["metadata"]["trial"], t["output"]["output"]) for t in traces
    )
    assert outputs == sorted((i, n, "bee" if i == "b" else i) for i in "abc" for n in (0, 1))
    # As the Opik SDK's evaluate_experiment logs them: name, value, reason, source, on each trace.
    new_scores = [s for s in opik.feedback_scores if s["id"] in {t["id"] for t in traces}]
    assert {(s["name"], s["source"]) for s in new_scores} == {
        ("equals_metric", "sdk"),
        ("levenshtein_ratio_metric", "sdk"),
    }
    assert len(new_scores) == 12
    # The original's traces keep their output and scores.
    for trace_id, trace in traces_before.items():
        assert opik.traces[trace_id]["output"] == trace["output"]

    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SDK_READ.format(experiment_id=new["id"]))],
        capture_output=True,
        text=True,
        timeout=120,
        env=os.environ.copy(),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["name"] == new["name"]
    names = {name for name, _ in seen["scores"]}
    assert names == {"equals_metric", "levenshtein_ratio_metric"}


def test_with_the_opik_backend_an_interrupted_rescore_resumes(project: Project, opik: OpikTestServer) -> None:
    original = recorded(project)
    interrupted_rescore(project)
    [rescore] = [e for e in opik.experiments.values() if e["id"] != original]
    assert rescore["metadata"]["_pytest_opik_eval"]["record"]["metric_specs"] == ["my_metrics:Short"]

    result = project.run_report("--eval-resume=last", subprocess=True)[0]
    assert result.ret == pytest.ExitCode.OK
    assert project.calls() == []
    links = [link for link in opik.experiment_items if link["experiment_id"] == rescore["id"]]
    traces = {link["trace_id"]: opik.traces[link["trace_id"]] for link in links}
    outputs = sorted(
        (t["metadata"]["dataset_item_id"], t["metadata"]["trial"], t["output"]["output"])
        for t in traces.values()
        if t.get("output")
    )
    assert outputs == sorted((i, n, "bee" if i == "b" else i) for i in "abc" for n in (0, 1))
    scores = {s["name"] for s in opik.feedback_scores if s["id"] in traces}
    assert scores == {"short"}
