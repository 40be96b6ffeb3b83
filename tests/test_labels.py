"""Human labels in the dataset, end to end: kept from the task and the metrics, checked at
collection, and the judge's agreement with them in the terminal summary and the JSON report."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from conftest import Project

from pytest_opik_eval.verdict import samples
from pytest_opik_eval.verdict import statistics as stats

# A task that says what it was given, and a metric that says what it scored: the judge's verdict
# is the item's "judge" field, whatever the labels say.
LABELLED_TEST = """
import json
import pathlib
import pytest
from pytest_opik_eval.metrics import BaseMetric, ScoreResult
from pytest_opik_eval.tracing import trace

HERE = pathlib.Path(__file__).parent


class Judge(BaseMetric):
    def __init__(self):
        super().__init__(name="correctness")
        self.threshold = 0.5

    def score(self, output, **kwargs):
        with open(HERE / "metric.log", "a") as log:
            log.write(json.dumps(sorted(kwargs)) + "\\n")
        return ScoreResult(name=self.name, value=float(output))


@pytest.mark.eval(dataset="data.jsonl", metrics=[Judge()], {marker})
def test_qa(eval_item, eval_trial):
    with open(HERE / "task.log", "a") as log:
        log.write(json.dumps(sorted(eval_item)) + "\\n")
    with trace.span("step"):
        pass
    return {{"output": eval_item["judge"][eval_trial]}}
"""


def labelled(project: Project, rows: list[dict[str, Any]], marker: str = "") -> None:
    project.dataset(rows)
    project.write("test_eval.py", LABELLED_TEST.format(marker=marker))


def row(item_id: str, label: object, *judge: float, field: str = "labels") -> dict[str, Any]:
    return {"id": item_id, "judge": list(judge), field: {"correctness": label}}


# 8 items, one trial each: 5 labelled pass (the judge passes 4), 3 labelled fail (it fails 2).
EIGHT = [
    row("p1", True, 1),
    row("p2", True, 1),
    row("p3", True, 1),
    row("p4", 0.9, 1),  # a human score: passes at the judge's threshold, 0.5
    row("p5", True, 0),
    row("f1", False, 0),
    row("f2", 0.2, 0),
    row("f3", False, 1),
]


def line_starting(result: pytest.RunResult, start: str) -> str:
    """The output line that starts with ``start`` (fnmatch would read an interval's brackets)."""
    found = [line for line in result.outlines if line.startswith(start)]
    assert len(found) == 1, (start, result.outlines)
    return found[0]


def kappa(a: int, b: int, c: int, d: int) -> float:
    """Cohen's kappa of a 2x2 table of items: a judge pass and label pass, b judge fail and label
    pass, c judge pass and label fail, d both fail."""
    n = a + b + c + d
    judge, label = (a + c) / n, (a + b) / n
    chance = judge * label + (1 - judge) * (1 - label)
    return ((a + d) / n - chance) / (1 - chance)


def interval(*shares: float) -> str:
    found = stats.interval(samples.sample(shares, pass_fail=True))
    return f"{found.estimate:.3f} [{found.low:.3f}, {found.high:.3f}]"


def test_labels_never_reach_the_task_nor_the_metric(project: Project) -> None:
    labelled(project, EIGHT[:2])
    result = project.run("--eval")
    result.assert_outcomes(passed=2)
    for line in (project.path / "task.log").read_text().splitlines():
        assert json.loads(line) == ["id", "judge"]
    for line in (project.path / "metric.log").read_text().splitlines():
        assert json.loads(line) == ["id", "judge"]  # the item's keys, less its labels and output
    for trial in project.trials():
        task = trial.spans[0]
        assert task.input == {"eval_item": {"id": trial.dataset_item_id, "judge": [1]}, "eval_trial": 0}
    # The stored snapshot keeps them: resume and calibration read them.
    store_items = project.run_report("--eval")[1]["experiments"][0]["calibrations"]
    assert [c["items"] for c in store_items] == [2]


def test_the_terminal_shows_the_judges_agreement_with_the_labels(project: Project) -> None:
    labelled(project, EIGHT)
    result = project.run("--eval")
    result.assert_outcomes(passed=5, failed=3)
    # By hand: agreement 6/8; sensitivity 4/5; specificity 2/3; kappa: po 0.75, the judge and the
    # labels each pass 5/8, pe = (5/8)^2 + (3/8)^2 = 34/64, kappa = (0.75 - 34/64) / (30/64) = 7/15.
    agreement = interval(1, 1, 1, 1, 0, 1, 1, 0)
    sensitivity = interval(1, 1, 1, 1, 0)
    specificity = interval(1, 1, 0)
    assert agreement.startswith("0.750 ")
    assert sensitivity.startswith("0.800 ")
    assert specificity.startswith("0.667 ")
    # The jackknife: left out in turn, 4 items judged and labelled pass, 1 judged fail and
    # labelled pass, 1 judged pass and labelled fail, 2 judged and labelled fail.
    assert kappa(4, 1, 1, 2) == pytest.approx(7 / 15)
    left_out = [kappa(3, 1, 1, 2)] * 4 + [kappa(4, 0, 1, 2), kappa(4, 1, 0, 2)] + [kappa(4, 1, 1, 1)] * 2
    centre = sum(left_out) / 8
    se = math.sqrt(7 / 8 * sum((k - centre) ** 2 for k in left_out))
    t = 2.364624251592785  # Student's t, 7 degrees of freedom, 0.975
    low, high = max(-1.0, 7 / 15 - t * se), min(1.0, 7 / 15 + t * se)
    # The judge passes 5 of 8; every item is labelled and counts by its label: 5 of 8 pass. The
    # interval is the labels' alone: two passes and two failures added, 7/12 over 12 items, from
    # the lower and the higher of 5/8 and 7/12.
    judged = interval(1, 1, 1, 1, 0, 0, 0, 1)
    reach = 1.9599640 * math.sqrt(7 / 12 * 5 / 12 / 12)
    rate_low, rate_high = 7 / 12 - reach, 0.625 + reach
    assert line_starting(result, "  labels:") == (
        "  labels: correctness (threshold 0.5, 8 items x 1 trial): "
        f"agreement {agreement}, sensitivity {sensitivity}, specificity {specificity}, "
        f"kappa 0.467 [{low:.3f}, {high:.3f}]; pass rate {judged} as judged, "
        f"0.625 [{rate_low:.3f}, {rate_high:.3f}] corrected (labelled items by their labels); labels of this experiment"
    )


def test_trials_of_an_item_are_shares_of_it(project: Project) -> None:
    # Two trials each: p1 passes one of its two, f1 fails both.
    labelled(project, [row("p1", True, 1, 0), row("p2", True, 1, 1), row("f1", False, 0, 0)], "trial_count=2")
    result, report = project.run_report("--eval")
    (found,) = report["experiments"][0]["calibrations"]
    assert (found["items"], found["trials"], found["label_pass"], found["label_fail"]) == (3, 6, 2, 1)
    assert found["sensitivity"]["estimate"] == 0.75
    assert found["agreement"]["estimate"] == pytest.approx((0.5 + 1 + 1) / 3)
    assert found["agreement"]["items"] == 3  # the item is the unit, not the trial
    assert found["kappa"]["method"] == "jackknife"
    assert found["notes"] == []
    assert line_starting(result, "  labels:").startswith(
        "  labels: correctness (threshold 0.5, 3 items x 2 trials): agreement 0.833 ["
    )


def test_no_item_labelled_pass_says_sensitivity_is_undefined(project: Project) -> None:
    # An unlabelled item needs the correction (with every item labelled, nothing would).
    labelled(project, [row("f1", False, 0), row("f2", False, 1), {"id": "a", "judge": [1]}])
    result, report = project.run_report("--eval")
    line = line_starting(result, "  labels:")
    assert line.startswith("  labels: correctness (threshold 0.5, 2 items x 1 trial): agreement 0.500 [")
    assert ", sensitivity undefined (no item labelled pass), specificity 0.500 [" in line
    assert line.endswith(
        f", kappa 0.000 (no interval); pass rate {interval(0, 1, 1)} as judged, not corrected: no "
        "labelled item is labelled pass: the judge's sensitivity is unknown; labels of this"
        " experiment"
    )  # kappa: left out in turn, one item says nothing
    (found,) = report["experiments"][0]["calibrations"]
    assert found["sensitivity"] is None
    assert found["notes"] == [
        "sensitivity undefined: no item labelled pass",
        "no interval for kappa: it needs two items, each leaving kappa defined",
        "not corrected: no labelled item is labelled pass: the judge's sensitivity is unknown",
    ]
    assert found["corrected"] is None
    assert found["judged"]["estimate"] == pytest.approx(2 / 3)
    assert found["judge"] is None  # the metric does not say it is a judge


def test_no_item_labelled_fail_says_specificity_is_undefined(project: Project) -> None:
    labelled(project, [row("p1", True, 1), row("p2", True, 1), {"id": "a", "judge": [0]}])
    result = project.run("--eval")
    line = line_starting(result, "  labels:")
    assert line.startswith("  labels: correctness (threshold 0.5, 2 items x 1 trial): agreement 1.000 [")
    assert line.endswith(
        ", specificity undefined (no item labelled fail), kappa undefined (one verdict only from judge "
        f"and labels); pass rate {interval(1, 1, 0)} as judged, not corrected: no labelled item is "
        "labelled fail: the judge's specificity is unknown; labels of this experiment"
    )


def test_no_labels_no_line(project: Project) -> None:
    labelled(project, [{"id": "a", "judge": [1]}])
    result, report = project.run_report("--eval")
    assert "labels:" not in result.stdout.str()
    assert report["experiments"][0]["calibrations"] == []


@pytest.mark.parametrize(
    ("labels", "problem"),
    [
        (
            '"correct"',
            '"labels" must be an object mapping score names to human verdicts, e.g. "labels": '
            '{"correctness": true, "relevance": 0.8}; got "correct"',
        ),
        (
            '{"correctness": "yes"}',
            '"labels"["correctness"] must be true, false or a number from 0 to 1 (a human score), '
            'got "yes"; fix the label, or remove it',
        ),
        (
            '{"correctness": 1.5}',
            '"labels"["correctness"] must be true, false or a number from 0 to 1 (a human score), '
            "got 1.5; fix the label, or remove it",
        ),
    ],
)
def test_a_bad_label_fails_collection_naming_its_line(project: Project, labels: str, problem: str) -> None:
    (project.path / "data.jsonl").write_text(
        '{"id": "a", "judge": [1], "labels": {"correctness": true}}\n'
        f'{{"id": "b", "judge": [1], "labels": {labels}}}\n'
    )
    project.write("test_eval.py", LABELLED_TEST.format(marker=""))
    result = project.run("--eval")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.assert_outcomes(errors=1)
    marker_line = LABELLED_TEST.splitlines().index(
        '@pytest.mark.eval(dataset="data.jsonl", metrics=[Judge()], {marker})'
    )
    assert (
        f"@pytest.mark.eval on test_eval.py::test_qa (test_eval.py:{marker_line + 1}): data.jsonl line 2: {problem}"
        in result.outlines
    )
    assert not (project.path / "task.log").exists()
    assert not project.store_path.exists()  # nothing half-done is recorded


def test_labels_field_from_the_marker(project: Project) -> None:
    labelled(
        project,
        [row("p1", True, 1, field="human"), row("f1", False, 0, field="human")],
        'labels_field="human"',
    )
    result = project.run("--eval")
    result.assert_outcomes(passed=1, failed=1)
    assert json.loads((project.path / "task.log").read_text().splitlines()[0]) == ["id", "judge"]
    assert line_starting(result, "  labels:").startswith(
        "  labels: correctness (threshold 0.5, 2 items x 1 trial): agreement 1.000 ["
    )


def test_labels_field_from_the_ini_and_the_marker_wins(project: Project) -> None:
    project.pytester.makeini("[pytest]\nfilterwarnings = error\neval_labels_field = human\n")
    labelled(project, [row("p1", True, 1, field="human"), row("f1", False, 0, field="human")])
    result = project.run("--eval")
    result.assert_outcomes(passed=1, failed=1)
    assert json.loads((project.path / "task.log").read_text().splitlines()[0]) == ["id", "judge"]
    assert line_starting(result, "  labels: correctness (threshold 0.5, 2 items x 1 trial): ")
    # The marker names another field: "human" is then data the task gets, and nothing is labelled.
    (project.path / "task.log").unlink()
    labelled(project, [row("p1", True, 1, field="human")], 'labels_field="verdicts"')
    result = project.run("--eval")
    result.assert_outcomes(passed=1)
    assert json.loads((project.path / "task.log").read_text()) == ["human", "id", "judge"]
    assert "labels:" not in result.stdout.str()


def test_a_bad_labels_field_argument_is_named(project: Project) -> None:
    labelled(project, EIGHT[:1], "labels_field=3")
    result = project.run("--eval")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*@pytest.mark.eval on test_eval.py::test_qa*labels_field must be a non-empty string, got 3"]
    )


def test_a_rescore_checks_the_stored_labels_under_the_stored_field(project: Project) -> None:
    rows = [
        row("p1", True, 1, field="human"),
        row("p2", True, 0, field="human"),
        row("f1", False, 0, field="human"),
    ]
    labelled(project, rows, 'labels_field="human"')
    project.run("--eval").assert_outcomes(passed=1, failed=2)
    (project.path / "task.log").unlink()
    (project.path / "metric.log").unlink()
    # The marker now names another field: the stored items are read as they were stored.
    project.write("test_eval.py", LABELLED_TEST.format(marker='labels_field="verdicts"'))
    result, report = project.run_report("--eval-rescore=last")
    result.assert_outcomes(passed=1, failed=2)
    assert not (project.path / "task.log").exists()  # the stored outputs, scored again
    for line in (project.path / "metric.log").read_text().splitlines():
        assert json.loads(line) == ["id", "judge"]
    (found,) = report["experiments"][0]["calibrations"]
    assert (found["items"], found["label_pass"], found["label_fail"]) == (3, 2, 1)
    assert found["sensitivity"]["estimate"] == 0.5


def test_the_step_summary_and_junit_carry_the_judges_agreement(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    import xml.etree.ElementTree as ElementTree

    summary = project.path / "step_summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    labelled(project, EIGHT)
    result = project.run("--eval", "--junitxml=junit.xml")
    result.assert_outcomes(passed=5, failed=3)
    line = line_starting(result, "  labels:").removeprefix("  labels: ")
    # The job summary words it as the terminal does, under its own heading.
    assert f"**Judges against human labels:**\n\n- {line}\n" in summary.read_text()
    suite = ElementTree.parse(project.path / "junit.xml").getroot().find("testsuite")
    assert suite is not None
    properties = {str(p.get("name")): str(p.get("value")) for p in suite.iter("property")}
    base = "eval.test_qa.labels.correctness."
    assert properties[base + "items"] == "8"
    assert properties[base + "trials"] == "8"
    assert properties[base + "agreement"] == "0.75"
    assert properties[base + "sensitivity"] == "0.8"
    assert properties[base + "specificity"].startswith("0.666")
    assert properties[base + "kappa"].startswith("0.466")
    low, high = (float(end) for end in properties[base + "kappa.ci"].removesuffix("@95%").split(".."))
    assert f"[{low:.3f}, {high:.3f}]" in line
    assert properties[base + "agreement.ci"].endswith("@95%")
    assert properties[base + "judged"] == "0.625"
    assert properties[base + "corrected"].startswith("0.625")
    assert properties[base + "corrected.ci"].endswith("@95%")


def test_the_html_report_has_a_judges_panel(project: Project) -> None:
    labelled(project, EIGHT)
    project.run("--eval", "--eval-html=report.html")
    page = (project.path / "report.html").read_text()
    assert "<h3>Judges against human labels</h3>" in page
    row = page.split('<tr data-score="correctness">', 1)[1].split("</tr>", 1)[0]
    cells = [cell.split("</td>", 1)[0] for cell in row.split("<td>")[1:]]
    agreement = interval(1, 1, 1, 1, 0, 1, 1, 0)
    judged = interval(1, 1, 1, 1, 0, 0, 0, 1)
    assert cells[:4] == ["correctness", "not a judge", "8", agreement]
    assert cells[6].startswith("0.467 [")  # kappa
    assert cells[7] == judged
    assert cells[8].startswith("0.625 [")  # corrected


def test_no_labels_no_judges_panel(project: Project) -> None:
    labelled(project, [{"id": "a", "judge": [1]}])
    project.run("--eval", "--eval-html=report.html")
    assert "Judges against human labels" not in (project.path / "report.html").read_text()
