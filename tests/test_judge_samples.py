"""Judge samples (``judge_samples=N``, ``--eval-judge-samples=N``): an LLM judge scores each output
N times, the trial's score is their mean (a pass/fail judge's majority), the report shows how far the judge agrees with itself, and every sample is cached apart."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import NEEDS_RECORD, Project, items
from opik_server import OpikTestServer

# A judge (judge = True) that gives an output the votes its item lists, one per call in turn
# (the calls of an output counted in a file of its own, through os.open: a judge that calls
# open() when it scores is not cached), and a heuristic scored once per trial.
JUDGES = """
import os
import pathlib
from pytest_opik_eval.metrics import BaseMetric, ScoreResult

HERE = pathlib.Path(__file__).parent


def call(name):
    log = os.open(HERE / name, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(log, b".")
        return os.fstat(log).st_size
    finally:
        os.close(log)


class Judge(BaseMetric):
    judge = True

    def __init__(self, threshold=0.5):
        super().__init__(name="judge", threshold=threshold)

    def score(self, output, votes, **ignored):
        calls = call(f"judge-{output}.calls")
        call("judge.calls")
        vote = votes[(calls - 1) % len(votes)]
        if isinstance(vote, str):
            raise RuntimeError(vote)
        return ScoreResult(name=self.name, value=vote, reason=f"call {calls}")


class Heuristic(BaseMetric):
    def __init__(self):
        super().__init__(name="heuristic", threshold=0.0)

    def score(self, output, **ignored):
        call("heuristic.calls")
        return ScoreResult(name="heuristic", value=1.0)
"""

# a: unanimous pass; b: a majority pass (2 of 3); c: a majority fail (1 of 3).
VOTES: dict[str, list[Any]] = {"a": [1, 1, 1], "b": [1, 0, 1], "c": [0, 1, 0]}


def sampled_project(project: Project, marker: str = "", votes: dict[str, list[Any]] = VOTES) -> None:
    project.dataset([{**item, "votes": votes[item["id"]]} for item in items(*votes)])
    project.write("judges.py", JUDGES)
    project.eval_test(marker, metrics="[Judge(), Heuristic()]", imports="from judges import Judge, Heuristic")


def calls(project: Project, name: str = "judge") -> int:
    """The metric's calls since the last look."""
    path = project.path / f"{name}.calls"
    count = len(path.read_bytes()) if path.exists() else 0
    path.unlink(missing_ok=True)
    for each in project.path.glob(f"{name}-*.calls"):
        each.unlink()
    return count


def judged(report: dict[str, Any]) -> dict[str, tuple[Any, ...]]:
    """Each trial's verdict and its judge score: value, samples, reason."""
    return {
        t["dataset_item_id"]: (
            t["passed"],
            *next(
                (s["value"], s.get("samples"), s.get("reason")) for s in t["scores"] if s["name"] == "judge"
            ),
        )
        for e in report["experiments"]
        for t in e["trials"]
    }


def test_the_judge_scores_each_output_n_times_and_the_mean_decides(project: Project) -> None:
    sampled_project(project, "judge_samples=3,")
    result, report = project.run_report("--eval")
    result.assert_outcomes(passed=2, failed=1)
    assert calls(project) == 9
    assert calls(project, "heuristic") == 3  # a heuristic is not a judge: scored once
    assert judged(report) == {
        "a": (True, 1.0, [1.0, 1.0, 1.0], "call 1"),
        "b": (True, 1.0, [1.0, 0.0, 1.0], "call 1"),
        "c": (False, 0.0, [0.0, 1.0, 0.0], "call 1"),
    }
    heuristic = [s for t in report["experiments"][0]["trials"] for s in t["scores"] if s["name"] != "judge"]
    assert [s.get("samples") for s in heuristic] == [None] * 3
    [agreement] = report["experiments"][0]["self_agreement"]
    assert agreement == {
        "score": "judge",
        "samples": 3,
        "trials": 3,
        "threshold": 0.5,
        "unanimous": pytest.approx(1 / 3),
        "split": 2,
        "sd": pytest.approx((0 + 2 * 0.5773502691896257) / 3),
    }
    result.stdout.fnmatch_lines(
        [
            "  judge samples: judge (3 samples x 3 trials, threshold 0.5): unanimous in 0.333 of trials "
            "(2 split), sd within a trial 0.385"
        ]
    )
    # The failure names the mean and the samples, and the first sample's reason.
    result.stdout.fnmatch_lines(
        [
            "item c (trial 0) did not meet its thresholds:",
            "  judge      0 (majority of 0, 1, 0) < 0.5  call 1",
        ]
    )


def test_a_graded_judge_gives_the_mean_and_a_pass_fail_tie_passes(project: Project) -> None:
    sampled_project(project, "judge_samples=2,", votes={"a": [0.2, 0.5], "b": [1, 0], "c": [0, 0]})
    result, report = project.run_report("--eval")
    result.assert_outcomes(passed=1, failed=2)
    assert judged(report) == {
        "a": (False, 0.35, [0.2, 0.5], "call 1"),
        "b": (True, 1.0, [1.0, 0.0], "call 1"),
        "c": (False, 0.0, [0.0, 0.0], "call 1"),
    }
    result.stdout.fnmatch_lines(["  judge      0.35 (mean of 0.2, 0.5) < 0.5  call 1"])


def test_one_sample_is_todays_scoring(project: Project) -> None:
    sampled_project(project)
    result, report = project.run_report("--eval")
    result.assert_outcomes(passed=2, failed=1)  # c's first vote is 0
    assert calls(project) == 3
    assert {item: score[2] for item, score in judged(report).items()} == {"a": None, "b": None, "c": None}
    assert report["experiments"][0]["self_agreement"] == []
    assert "judge samples" not in result.stdout.str()


def test_every_report_carries_the_judges_self_agreement(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    import xml.etree.ElementTree as ElementTree

    summary = project.path / "step_summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    sampled_project(project, "judge_samples=3,")
    result = project.run("--eval", "--junitxml=junit.xml", "--eval-html=report.html")
    result.assert_outcomes(passed=2, failed=1)
    line = next(line for line in result.outlines if line.startswith("  judge samples: "))
    assert f"- {line.removeprefix('  judge samples: ')}\n" in summary.read_text()
    suite = ElementTree.parse(project.path / "junit.xml").getroot().find("testsuite")
    assert suite is not None
    properties = {str(p.get("name")): str(p.get("value")) for p in suite.iter("property")}
    base = "eval.test_qa.judge_samples.judge."
    assert {name: value for name, value in properties.items() if name.startswith(base)} == {
        base + "samples": "3",
        base + "trials": "3",
        base + "unanimous": "0.333333",
        base + "split": "2",
        base + "sd": "0.3849",
    }
    page = (project.path / "report.html").read_text()
    row = page.split('<div class="panel judge-samples">', 1)[1].split('<tr data-score="judge">', 1)[1]
    cells = [cell.split("</td>", 1)[0] for cell in row.split("</tr>", 1)[0].split("<td>")[1:]]
    assert cells == ["judge", "3", "3", "0.5", "0.333", "2", "0.385"]


def test_the_marker_wins_over_the_option_and_the_option_over_the_ini(project: Project) -> None:
    sampled_project(project)
    project.pytester.makeini("[pytest]\nfilterwarnings = error\neval_judge_samples = 2\n")
    project.run("--eval").assert_outcomes(passed=3)  # c: 0 and 1, a mean of 0.5
    assert calls(project) == 6
    project.run("--eval", "--eval-judge-samples=3").assert_outcomes(passed=2, failed=1)
    assert calls(project) == 9
    sampled_project(project, "judge_samples=1,")
    project.run("--eval", "--eval-judge-samples=3").assert_outcomes(passed=2, failed=1)
    assert calls(project) == 3


@pytest.mark.parametrize(
    ("value", "shown"), [("0", "0"), ("-1", "-1"), ("2.5", "2.5"), ("True", "True"), ('"3"', "'3'")]
)
def test_a_bad_marker_value_fails_the_tests_collection(project: Project, value: str, shown: str) -> None:
    sampled_project(project, f"judge_samples={value},")
    result = project.run("--eval")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "*@pytest.mark.eval on test_eval.py::test_qa*judge_samples must be a whole number of at "
            f"least 1 (the times each LLM judge scores an output, such as 3), got {shown}"
        ]
    )
    assert calls(project) == 0


@pytest.mark.parametrize("value", ["0", "-2", "2.5", "x"])
def test_a_bad_option_or_ini_value_is_a_usage_error(project: Project, value: str) -> None:
    sampled_project(project)
    result = project.run("--eval", f"--eval-judge-samples={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            f"*--eval-judge-samples: expected how many times each LLM judge scores an output, a whole "
            f"number of at least 1 such as 3; got '{value}'"
        ]
    )
    project.pytester.makeini(f"[pytest]\nfilterwarnings = error\neval_judge_samples = {value}\n")
    result = project.run("--eval")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*ini eval_judge_samples: expected how many times*; got '{value}'"])


ON = "--eval-judge-cache=on"


def cache_files(project: Project) -> list[Path]:
    return sorted((project.path / ".opik-eval" / "judge-cache").rglob("*.json"))


def test_the_judge_cache_keeps_each_sample_apart_the_first_under_todays_key(project: Project) -> None:
    sampled_project(project)
    project.run("--eval", ON).stdout.fnmatch_lines(["eval judge cache: 0 hits, 3 scored"])
    assert calls(project) == 3
    # The first sample is the score a judge scored once has in the cache: only the others are new.
    result, first = project.run_report("--eval", ON, "--eval-judge-samples=3")
    result.stdout.fnmatch_lines(["eval judge cache: 3 hits, 6 scored"])
    assert calls(project) == 6
    result, again = project.run_report("--eval", ON, "--eval-judge-samples=3")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["eval judge cache: 9 hits, 0 scored"])
    assert calls(project) == 0
    assert judged(again) == judged(first)
    assert again["judge_cache"] == {"hits": 9, "scored": 0, "missed": 0, "strict": False}
    entries = [json.loads(path.read_text()) for path in cache_files(project)]
    assert sorted((e["item_id"], e.get("sample", 0)) for e in entries) == [
        (item, sample) for item in "abc" for sample in range(3)
    ]


def test_a_failed_sample_fails_the_score_and_a_rerun_pays_only_for_it(project: Project) -> None:
    sampled_project(project, "judge_samples=3,", votes={**VOTES, "a": [1, "rate limited", 1]})
    result, report = project.run_report("--eval", ON)
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(
        [
            "item a (trial 0) did not meet its thresholds:",
            "  judge      scoring failed: judge sample 2 of 3: *",
        ]
    )
    assert judged(report)["a"][:3] == (False, 0.0, None)
    assert calls(project) == 9
    # The other samples were cached: the rerun calls the judge once, for the sample that failed.
    result = project.run("--eval", ON)
    result.stdout.fnmatch_lines(["eval judge cache: 8 hits, 1 scored"])
    result.assert_outcomes(passed=2, failed=1)
    assert calls(project) == 1


@NEEDS_RECORD
def test_strict_replay_misses_a_sample_not_cached(project: Project) -> None:
    sampled_project(project)
    project.run("--eval", ON, "--eval-judge-samples=2").assert_outcomes(passed=3)
    assert calls(project) == 6
    result = project.run("--eval", "--eval-record=none", "--eval-judge-samples=3")
    result.stdout.fnmatch_lines(["eval judge cache: 6 hits, 0 scored, 3 missed (strict)"])
    result.assert_outcomes(failed=3)
    result.stdout.fnmatch_lines(
        ["*item a (trial 0, judge sample 3): judge 'judge' (judges.Judge) has no cached score*"]
    )
    result = project.run("--eval", "--eval-record=none", "--eval-judge-samples=2")
    result.stdout.fnmatch_lines(["eval judge cache: 6 hits, 0 scored, 0 missed (strict)"])
    result.assert_outcomes(passed=3)
    assert calls(project) == 0


def test_xdist_workers_sample_cache_and_report_the_agreement(project: Project) -> None:
    sampled_project(project, "judge_samples=3,")
    first, report = project.run_report("--eval", ON, "-p", "xdist", "-n", "2")
    first.assert_outcomes(passed=2, failed=1)
    first.stdout.fnmatch_lines(["eval judge cache: 0 hits, 9 scored"])
    assert calls(project) == 9
    [agreement] = report["experiments"][0]["self_agreement"]
    assert (agreement["trials"], agreement["split"]) == (3, 2)
    first.stdout.fnmatch_lines(["  judge samples: judge (3 samples x 3 trials, threshold 0.5): *"])
    again, replayed = project.run_report("--eval", ON, "-p", "xdist", "-n", "2")
    again.stdout.fnmatch_lines(["eval judge cache: 9 hits, 0 scored"])
    assert calls(project) == 0
    assert judged(replayed) == judged(report)


def test_a_resume_samples_as_many_times_as_the_run_did(project: Project) -> None:
    # c fails first, and -x leaves a and b pending.
    sampled_project(project, votes={"c": VOTES["c"], "a": VOTES["a"], "b": VOTES["b"]})
    project.run("--eval", "--eval-judge-samples=3", "-x").assert_outcomes(failed=1)
    assert calls(project) == 3
    # Resumed as printed, without the option: the judge still samples each output 3 times.
    result, report = project.run_report("--eval-resume=last")
    result.assert_outcomes(passed=2)
    assert calls(project) == 6
    assert {item: score[2] for item, score in judged(report).items()} == {
        item: [float(v) for v in votes] for item, votes in VOTES.items()
    }


def test_a_rescore_samples_the_stored_outputs(project: Project) -> None:
    sampled_project(project)
    project.run("--eval").assert_outcomes(passed=2, failed=1)
    assert calls(project) == 3
    assert len(project.calls()) == 3
    result, report = project.run_report("--eval-rescore=last", "--eval-judge-samples=3")
    assert project.calls() == []  # the task is not called
    assert calls(project) == 9
    result.assert_outcomes(passed=2, failed=1)
    assert {item: score[2] for item, score in judged(report).items()} == {
        item: [float(v) for v in votes] for item, votes in VOTES.items()
    }
    assert report["experiments"][0]["rescore_of"] is not None
    result.stdout.fnmatch_lines(["  judge samples: judge (3 samples x 3 trials, threshold 0.5): *"])


def test_a_calibration_judges_by_the_samples_mean(project: Project) -> None:
    # b's first vote fails it; two of its three pass it, as its label says.
    votes: dict[str, list[float]] = {"a": [1, 1, 1], "b": [0, 1, 1], "c": [0, 1, 0]}
    labels = {"a": True, "b": True, "c": False}
    project.dataset(
        [
            {**item, "votes": votes[item["id"]], "labels": {"judge": labels[item["id"]]}}
            for item in items(*votes)
        ]
    )
    project.write("judges.py", JUDGES)
    project.eval_test(metrics="[Judge(), Heuristic()]", imports="from judges import Judge, Heuristic")

    def calibration(*args: str) -> tuple[dict[str, Any], str]:
        _, report = project.run_report("--eval-calibrate", *args)
        calls(project)
        [found] = report["experiments"][0]["calibrations"]
        return {figure: found[figure]["estimate"] for figure in ("sensitivity", "specificity")}, found[
            "judge"
        ]

    once, judge_once = calibration()
    assert once == {"sensitivity": 0.5, "specificity": 1.0}
    sampled, judge_sampled = calibration("--eval-judge-samples=3")
    assert sampled == {"sensitivity": 1.0, "specificity": 1.0}
    # The majority of three errs otherwise than one call: another judge to its calibration.
    assert judge_once != judge_sampled
    assert calibration("--eval-judge-samples=3")[1] == judge_sampled
    # The majority keeps the judge pass/fail: strict mode gates on its corrected pass rate (too few
    # items to meet the gate), where it would refuse a mean as a graded score.
    result = project.run(
        "--eval", "--eval-judge-samples=3", "--eval-gate-mode=strict", "--eval-fail-under=judge=0.5"
    )
    result.stdout.fnmatch_lines(
        [
            "NOT MET: test_qa: fail_under judge (strict): pass rate 0.667 corrected for the judge's "
            "errors, 3 labelled item(s) by their labels (0.667 as judged)*"
        ]
    )


# A graded judge whose every sample is drawn at random from 0 to 1 (seeded by its output and
# call), or a constant 0.5: the items are all alike, so the spread of their scores is the
# judge's noise alone.
NOISY = """
import os
import pathlib
import random
from pytest_opik_eval.metrics import BaseMetric, ScoreResult

HERE = pathlib.Path(__file__).parent


class Coin(BaseMetric):
    judge = True

    def __init__(self, noisy=True):
        super().__init__(name="coin", threshold=0.0)
        self.noisy = noisy

    def score(self, output, **ignored):
        log = os.open(HERE / f"{output}.calls", os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        os.write(log, b".")
        calls = os.fstat(log).st_size
        os.close(log)
        value = random.Random(f"{output}:{calls}").random() if self.noisy else 0.5
        return ScoreResult(name=self.name, value=value)
"""


def test_the_gates_intervals_carry_the_judges_noise(project: Project) -> None:
    project.dataset(items(*(f"i{n}" for n in range(24))))
    project.write("coin.py", NOISY)

    def width(metric: str, *args: str) -> float:
        project.eval_test(metrics=f"[{metric}]", imports="from coin import Coin")
        _, report = project.run_report("--eval", *args)
        for each in project.path.glob("*.calls"):
            each.unlink()
        interval = report["experiments"][0]["summary"]["metrics"]["coin"]["interval"]
        return float(interval["high"] - interval["low"])

    once = width("Coin()")
    nine = width("Coin()", "--eval-judge-samples=9")
    steady = width("Coin(noisy=False)", "--eval-judge-samples=9")
    # Each trial's score is its samples' mean: what noise is left in it widens the interval,
    # nine samples leave about a third of it, and a judge without noise leaves none.
    assert steady < 0.05 < nine < once / 2


def test_shards_sample_their_share_and_the_fan_in_reports_them_all(project: Project) -> None:
    from pytest_opik_eval.cli import main as opik_eval

    sampled_project(project, "judge_samples=3,")
    for k in (1, 2):
        project.run("--eval", "--eval-run-id=ci-1", f"--eval-shard={k}/2", f"--eval-store=shard{k}.db", ON)
    assert calls(project) == 9
    merged = str(project.path / "merged.db")
    assert (
        opik_eval(
            ["--store", merged, "merge", str(project.path / "shard1.db"), str(project.path / "shard2.db")]
        )
        == 0
    )
    exported = project.path / "merged.json"
    assert opik_eval(["--store", merged, "export", "ci-1", "-o", str(exported)]) == 0
    report = json.loads(exported.read_text())
    assert {item: score[2] for item, score in judged(report).items()} == {
        item: [float(v) for v in votes] for item, votes in VOTES.items()
    }
    [agreement] = report["experiments"][0]["self_agreement"]
    assert (agreement["trials"], agreement["split"]) == (3, 2)
    # The shards' judge cache is one folder beside their stores: a rerun of a shard hits it.
    rerun = project.run("--eval", "--eval-run-id=ci-2", "--eval-shard=1/2", "--eval-store=shard1.db", ON)
    rerun.stdout.fnmatch_lines(["eval judge cache: [1-9] hits, 0 scored"])
    assert calls(project) == 0


def test_the_opik_server_keeps_the_samples_with_the_trace(project: Project, opik: OpikTestServer) -> None:
    from pytest_opik_eval.cli import main as opik_eval

    sampled_project(project, "judge_samples=3,")
    result = project.run("--eval")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["  judge samples: judge (3 samples x 3 trials, threshold 0.5): *"])
    experiment_id = project.last_experiment_id()
    by_item = {
        trace["metadata"]["dataset_item_id"]: trace["metadata"].get("score_samples")
        for trace in opik.traces.values()
    }
    assert by_item == {item: {"judge": [float(v) for v in votes]} for item, votes in VOTES.items()}
    # The feedback score is the trial's score: the majority.
    assert sorted((s["name"], s["value"]) for s in opik.feedback_scores if s["name"] == "judge") == [
        ("judge", 0.0),
        ("judge", 1.0),
        ("judge", 1.0),
    ]
    # Read back from the server, by a machine without the spool.
    project.store_path.unlink()
    assert opik_eval(["--backend", "opik", "--store", str(project.store_path), "show", experiment_id]) == 0
    stored = {
        t.dataset_item_id: [s.samples for s in t.scores if s.name == "judge"]
        for t in project.trials(experiment_id)
    }
    assert stored == {item: [[float(v) for v in votes]] for item, votes in VOTES.items()}
