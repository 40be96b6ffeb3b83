"""A graded judge against human scores, end to end: the weighted kappa, correlation and bias in
the terminal summary, the JSON report, the JUnit XML, the job summary and the HTML report."""

from __future__ import annotations

import math
import statistics
import xml.etree.ElementTree as ElementTree
from collections.abc import Sequence

import pytest
from conftest import Project
from test_labels import kappa, labelled, line_starting, row

Z = 1.959963984540054  # the standard normal's 0.975 quantile

# Five items, one trial each: the judge's score, and the human's.
JUDGE = [0.9, 0.7, 0.6, 0.3, 0.1]
HUMAN = [1.0, 0.8, 0.4, 0.3, 0.0]


def lin(judge: Sequence[float], human: Sequence[float]) -> float:
    """Lin's concordance correlation: quadratic-weighted kappa with one trial per item."""
    n = len(judge)
    gap = statistics.fmean(judge) - statistics.fmean(human)
    covariance = statistics.covariance(judge, human) * (n - 1) / n  # over n, as the variances
    return 2 * covariance / (statistics.pvariance(judge) + statistics.pvariance(human) + gap**2)


def expected_figures() -> dict[str, str]:
    """Each graded figure of JUDGE against HUMAN, worked out here, as the reports write it."""
    n = len(JUDGE)
    t = 2.7764451051977987  # Student's t, 4 degrees of freedom, 0.975
    kappa = lin(JUDGE, HUMAN)
    left_out = [lin(JUDGE[:i] + JUDGE[i + 1 :], HUMAN[:i] + HUMAN[i + 1 :]) for i in range(n)]
    centre = statistics.fmean(left_out)
    se = math.sqrt((n - 1) / n * sum((k - centre) ** 2 for k in left_out))
    r = statistics.correlation(JUDGE, HUMAN)
    half = Z / math.sqrt(n - 3)
    differences = [x - y for x, y in zip(JUDGE, HUMAN, strict=True)]
    bias = statistics.fmean(differences)
    spread = t * statistics.stdev(differences) / math.sqrt(n)
    return {
        "weighted kappa": f"{kappa:.3f} [{kappa - t * se:.3f}, {min(1.0, kappa + t * se):.3f}]",
        "correlation": f"{r:.3f} [{math.tanh(math.atanh(r) - half):.3f}, {math.tanh(math.atanh(r) + half):.3f}]",
        "bias": f"{bias:+.3f} [{bias - spread:+.3f}, {bias + spread:+.3f}]",
    }


def graded_rows(judge: Sequence[float] = JUDGE, human: Sequence[object] = HUMAN) -> list[dict[str, object]]:
    return [row(f"i{n}", label, score) for n, (score, label) in enumerate(zip(judge, human, strict=True))]


def test_a_graded_judge_shows_its_figures_against_human_scores(project: Project) -> None:
    labelled(project, graded_rows())
    result, report = project.run_report("--eval")
    result.assert_outcomes(passed=3, failed=2)
    line = line_starting(result, "  labels:")
    # The pass/fail figures at the threshold as before, then the graded ones, then the pass rate.
    assert line.startswith("  labels: correctness (threshold 0.5, 5 items x 1 trial): agreement 0.800 [")
    # kappa: the judge passes 3 items, the labels 2 (a human score passes at 0.5 too).
    figures = ", ".join(f"{name} {value}" for name, value in expected_figures().items())
    assert f", kappa {kappa(2, 0, 1, 2):.3f} [" in line
    assert f"], {figures}; pass rate 0.600 [" in line
    (found,) = report["experiments"][0]["calibrations"]
    assert found["graded"] is True
    assert found["weighted_kappa"]["estimate"] == pytest.approx(lin(JUDGE, HUMAN))
    assert found["weighted_kappa"]["method"] == "jackknife"
    assert found["correlation"]["estimate"] == pytest.approx(statistics.correlation(JUDGE, HUMAN))
    assert (found["correlation"]["method"], found["correlation"]["items"]) == ("fisher_z", 5)
    assert found["bias"]["estimate"] == pytest.approx(0.02)
    assert (found["bias"]["method"], found["bias"]["items"]) == ("t", 5)
    assert found["notes"] == []


@pytest.mark.parametrize(
    ("judge", "human"),
    [
        (JUDGE, [True, True, False, False, False]),  # verdicts: no human score to compare
        ([1.0, 1.0, 1.0, 0.0, 0.0], HUMAN),  # a pass/fail judge
    ],
    ids=["pass-fail-labels", "pass-fail-judge"],
)
def test_no_graded_figures_without_scores_on_both_sides(
    project: Project, judge: list[float], human: list[object]
) -> None:
    labelled(project, graded_rows(judge, human))
    result, report = project.run_report("--eval")
    line = line_starting(result, "  labels:")
    assert f", kappa {kappa(2, 0, 1, 2):.3f} [-0.495, 1.000]; pass rate 0.600 [" in line
    assert "weighted kappa" not in line
    (found,) = report["experiments"][0]["calibrations"]
    assert found["graded"] is False
    assert (found["weighted_kappa"], found["correlation"], found["bias"]) == (None, None, None)
    assert found["notes"] == []


@pytest.mark.parametrize(
    ("judge", "human", "figures", "note"),
    [
        (
            [0.9, 0.2],
            [1.0, 0.1],
            "weighted kappa, correlation and bias undefined (2 labelled items, they need 3)",
            "weighted kappa, correlation and bias undefined: 2 labelled items, they need 3",
        ),
        (
            [0.9, 0.6, 0.2],
            [0.7, 0.7, 0.7],
            # A judge against constant labels is no better than chance: kappa 0, whatever it says.
            "weighted kappa 0.000 [0.000, 0.000], correlation undefined (every item has the same "
            "human score), bias -0.133 [-1.000, +0.739]",
            "correlation undefined: every item has the same human score",
        ),
        (
            [0.7, 0.7, 0.7],
            [0.9, 0.6, 0.3],
            "weighted kappa 0.000 [0.000, 0.000], correlation undefined (the judge gives every item "
            "the same mean score), bias +0.100 [-0.645, +0.845]",
            "correlation undefined: the judge gives every item the same mean score",
        ),
    ],
    ids=["two-items", "constant-labels", "constant-judge"],
)
def test_undefined_graded_figures_say_why(
    project: Project, judge: list[float], human: list[float], figures: str, note: str
) -> None:
    labelled(project, graded_rows(judge, human))
    result, report = project.run_report("--eval")
    assert f", {figures}; pass rate " in line_starting(result, "  labels:")
    (found,) = report["experiments"][0]["calibrations"]
    assert found["graded"] is True
    assert found["correlation"] is None
    assert note in found["notes"]


def test_the_job_summary_junit_and_html_carry_the_graded_figures(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    summary = project.path / "step_summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    labelled(project, graded_rows())
    result = project.run("--eval", "--junitxml=junit.xml", "--eval-html=report.html")
    line = line_starting(result, "  labels:").removeprefix("  labels: ")
    assert f"**Judges against human labels:**\n\n- {line}\n" in summary.read_text()
    suite = ElementTree.parse(project.path / "junit.xml").getroot().find("testsuite")
    assert suite is not None
    properties = {str(p.get("name")): str(p.get("value")) for p in suite.iter("property")}
    base = "eval.test_qa.labels.correctness."
    assert properties[base + "weighted_kappa"].startswith("0.933")
    assert properties[base + "correlation"].startswith("0.958")
    assert float(properties[base + "bias"]) == pytest.approx(0.02)
    for figure in ("weighted_kappa", "correlation", "bias"):
        low, high = (float(end) for end in properties[base + figure + ".ci"].removesuffix("@95%").split(".."))
        assert low < float(properties[base + figure]) <= high
    page = (project.path / "report.html").read_text()
    head = page.split('<div class="panel judges">', 1)[1].split("</thead>", 1)[0]
    assert head.endswith(
        "<th>corrected</th><th>weighted kappa</th><th>correlation</th><th>bias</th><th>labels from</th></tr>"
    )
    cells = page.split('<tr data-score="correctness">', 1)[1].split("</tr>", 1)[0].split("<td>")[1:]
    assert [cell.removesuffix("</td>") for cell in cells[-4:-1]] == list(expected_figures().values())
    assert cells[-1] == "labels of this experiment</td>"
