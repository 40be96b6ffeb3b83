"""The HTML report: its static sections, the embedded data (escaped, small enough for 10,000
trials), and the page as a person sees it in headless Chromium."""

from __future__ import annotations

import base64
import json
import math
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Project, items, offline_opik
from test_report import ab_runs

from pytest_opik_eval.reports.html import render_html, write_html
from pytest_opik_eval.store.records import GateSettings, ScoreRecord
from pytest_opik_eval.verdict.experiment_summary import item_statistics, summarize
from pytest_opik_eval.verdict.item_verdicts import item_results
from pytest_opik_eval.verdict.model import (
    BaselineComparison,
    ConfidenceInterval,
    DatasetReport,
    ExperimentReport,
    GateVerdict,
    ItemChange,
    MetricDelta,
    Report,
    TrialReport,
)

INJECTION = "</script><script>alert(1)</script><!--<script>"
RESUME = "pytest --eval-resume=exp-1"
CHROMIUM = Path("/usr/bin/chromium")


def trial(
    item: str,
    index: int,
    accuracy: float | None,
    reason: str = "exact match",
    output: object = None,
) -> TrialReport:
    """A completed trial scored by accuracy (threshold 0.5) and relevance, or a pending one
    (``accuracy=None``)."""
    if accuracy is None:
        return TrialReport(
            dataset_item_id=item,
            trial=index,
            node_id=f"test_qa.py::test_qa[{item}-t{index}]",
            status="pending",
            ran_this_session=False,
            attempts=0,
            output=None,
            passed=None,
            scores=[],
        )
    return TrialReport(
        dataset_item_id=item,
        trial=index,
        node_id=f"test_qa.py::test_qa[{item}-t{index}]",
        status="completed",
        ran_this_session=True,
        attempts=1,
        output={"output": output if output is not None else f"answer to {item}"},
        passed=accuracy >= 0.5,
        scores=[
            ScoreRecord(name="accuracy", value=accuracy, reason=reason),
            ScoreRecord(name="relevance", value=0.75, reason="on topic"),
        ],
    )


def experiment(trials: list[TrialReport], **changes: Any) -> ExperimentReport:
    """An experiment over ``trials`` with its summary and item verdicts computed as the plugin
    does, an unmet and a met gate, and a baseline comparison."""
    settings = GateSettings(fail_under={"accuracy": 0.9}, thresholds={"accuracy": 0.5, "relevance": None})
    report = ExperimentReport(
        id="exp-1",
        name="qa eval",
        test="test_qa.py::test_qa",
        run_id="run-1",
        dataset=DatasetReport(source="data.jsonl", version="0123456789abcdef", items=4),
        trial_count=2,
        settings=settings,
        trials=trials,
        items=item_results(trials, None),
        summary=summarize(trials, settings.thresholds),
        gates=[
            GateVerdict(
                kind="fail_under",
                metric="accuracy",
                value=0.833,
                bound=0.9,
                met=False,
                detail=f"mean 0.833 is below 0.9; 1 trial(s) pending: {RESUME}",
            ),
            GateVerdict(
                kind="min_pass_rate",
                metric=None,
                value=0.8,
                bound=0.5,
                met=True,
                detail="trials pass rate 0.800 >= 0.5",
            ),
        ],
        gates_met=False,
        baseline=BaselineComparison(
            experiment_id="exp-0",
            run_id="run-0",
            name="qa baseline",
            metrics={"accuracy": MetricDelta(baseline_mean=0.9, current_mean=0.833, delta=-0.067)},
            shared_items=4,
            only_in_current=[],
            only_in_baseline=[],
            regressions=["capital"],
            fixes=["sum"],
        ),
    )
    return report.model_copy(update=changes)


def sample_trials() -> list[TrialReport]:
    """Item "greeting" passes, "capital" fails one trial, "sum" has a pending trial, and "inject" carries
    text that would break out of a script element."""
    return [
        trial("greeting", 0, 1.0),
        trial("greeting", 1, 1.0),
        trial("capital", 0, 0.0, reason="expected Paris, got Lyon", output="The capital is Lyon"),
        trial("capital", 1, 1.0),
        trial("sum", 0, 1.0),
        trial("sum", 1, None),
        trial("inject", 0, 1.0, output=INJECTION),
        trial("inject", 1, 1.0, reason=INJECTION),
    ]


def sample_items() -> list[dict[str, Any]]:
    return [
        {"id": "greeting", "input": {"text": "Say hello"}, "expected_output": "hello"},
        {
            "id": "capital",
            "input": {"text": "Capital of France?"},
            "expected_output": "Paris",
            "tags": ["geo"],
        },
        {"id": "sum", "input": {"text": "2 + 2"}, "expected_output": "4"},
        {"id": "inject", "input": {"text": INJECTION}, "expected_output": INJECTION},
    ]


def sample_report() -> Report:
    return Report(run_id="run-1", resumed=None, experiments=[experiment(sample_trials())])


def evidence_experiment() -> ExperimentReport:
    """The sample as a run gated on its baseline sees it: intervals on the aggregates and, with two
    trials per item, pass@k and pass^k; a borderline absolute gate and a strict regression gate
    with their notes; the paired comparison, item by item, worst first."""
    trials = sample_trials()
    settings = GateSettings(
        fail_under={"accuracy": 0.9},
        max_regression={"accuracy": 0.05},
        thresholds={"accuracy": 0.5, "relevance": None},
        mode="strict",
    )
    summary = item_statistics(summarize(trials, settings.thresholds, 0.95), item_results(trials, None), 0.95)
    mean = ConfidenceInterval(estimate=0.857, low=0.6, high=1.0, level=0.95, items=4, one_sided=True)
    change = ConfidenceInterval(estimate=-0.125, low=-0.375, high=0.0, level=0.95, items=4, one_sided=True)
    gates = [
        GateVerdict(
            kind="fail_under",
            metric="accuracy",
            value=0.857,
            bound=0.9,
            met=False,
            detail="mean 0.857, lower bound 0.600 is below 0.9",
            notes=["0.857 [0.600, 1.000] one-sided 95% bounds, 4 items, borderline"],
            mode="strict",
            interval=mean,
            borderline=True,
        ),
        GateVerdict(
            kind="max_regression",
            metric="accuracy",
            value=-0.125,
            bound=-0.05,
            met=False,
            detail="mean changed by -0.125 from the baseline; the drop is not shown below 0.05 (at most 0.375, p=0.300)",
            notes=[
                "-0.125 [-0.375, +0.000] one-sided 95% bounds on the change, 4 items, borderline",
                "catches a drop of 0.400 or more with 80% power at 4 items x 2 trials",
            ],
            mode="strict",
            interval=change,
            borderline=True,
            p_value=0.3,
            detectable_drop=0.4,
            items_needed=120,
        ),
    ]
    baseline = BaselineComparison(
        experiment_id="exp-0",
        run_id="run-0",
        name="qa baseline",
        metrics={
            "accuracy": MetricDelta(
                baseline_mean=0.96, current_mean=0.835, delta=-0.125, interval=change, items=4, sd=0.25
            ),
            "relevance": MetricDelta(baseline_mean=0.75, current_mean=0.75, delta=0.0, items=4, sd=0.0),
        },
        shared_items=5,
        only_in_current=["new"],
        only_in_baseline=["old"],
        regressions=["capital"],
        fixes=["inject"],
        regressions_p_value=0.5,
        # worst first by accuracy, not in the dataset's order
        items=[
            ItemChange(
                dataset_item_id="capital",
                baseline="passed",
                current="failed",
                flip="regression",
                changes={"accuracy": -0.5, "relevance": 0.0},
            ),
            ItemChange(
                dataset_item_id="sum",
                baseline="passed",
                current="pending",
                flip=None,
                changes={"accuracy": -0.25, "relevance": 0.0},
            ),
            ItemChange(
                dataset_item_id="greeting",
                baseline="passed",
                current="passed",
                flip=None,
                changes={"accuracy": 0.0, "relevance": 0.0},
            ),
            ItemChange(
                dataset_item_id=INJECTION,
                baseline="failed",
                current="failed",
                flip=None,
                changes={"accuracy": 0.0},  # no relevance score in one of the runs
            ),
            ItemChange(
                dataset_item_id="inject",
                baseline="failed",
                current="passed",
                flip="fix",
                changes={"accuracy": 0.25, "relevance": 0.0},
            ),
        ],
    )
    return experiment(trials, settings=settings, summary=summary, gates=gates, baseline=baseline)


def evidence_report() -> Report:
    return Report(run_id="run-1", resumed=None, experiments=[evidence_experiment()])


def large_report(size: int = 2000) -> tuple[Report, dict[str, list[dict[str, Any]]]]:
    """10,000 trials: 2,000 items (``size``) x 5 trials, outputs of about 40 characters, 2
    metrics; one item in ten fails its first trial."""
    trials = [
        trial(
            f"item-{i:05d}",
            t,
            0.0 if i % 10 == 0 and t == 0 else 1.0,
            reason="matched the reference",
            output=f"generated answer number {i:05d} trial {t}..",
        )
        for i in range(size)
        for t in range(5)
    ]
    items = [
        {"id": f"item-{i:05d}", "input": {"text": f"question {i}"}, "expected_output": "x"}
        for i in range(size)
    ]
    return Report(run_id="run-1", resumed=None, experiments=[experiment(trials, trial_count=5)]), {
        "exp-1": items
    }


def embedded(html: str) -> Any:
    match = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', html, re.S)
    assert match is not None
    return json.loads(match.group(1), parse_constant=lambda name: pytest.fail(f"{name} is not JSON"))


def test_static_sections() -> None:
    html = render_html(sample_report(), {"exp-1": sample_items()})
    assert (
        '<h2>qa eval <span class="badge wait">1 pending</span> <span class="badge bad">gates not met</span></h2>'
        in html
    )
    for text in ("test_qa.py::test_qa", "exp-1", "run-1", "data.jsonl", "0123456789abcdef"):
        assert f"<code>{text}</code>" in html
    assert (
        '<b>7</b> completed\n (<span class="ok">6 passed</span>, <span class="bad">1 failed</span>)' in html
    )
    assert '<b class="trials-pending">1</b> pending' in html
    # accuracy over the 4 items' completed trials (1, 0.5, 1 and 1): six 1.0 and one 0.0 of 7
    # pass the threshold 0.5
    assert (
        '<tr data-metric="accuracy"><td>accuracy</td><td>0.875</td><td>0.000</td><td>1.000</td>'
        "<td>0</td><td>0.500</td><td>85.7%</td></tr>"
    ) in html
    assert (
        "<td>relevance</td><td>0.750</td><td>0.750</td><td>0.750</td><td>0</td><td>-</td><td>-</td>" in html
    )
    assert re.findall(r'<li class="gate (\w+)" data-kind="(\w+)" data-borderline="false">', html) == [
        ("unmet", "fail_under"),
        ("met", "min_pass_rate"),
    ]
    assert f"accuracy: mean 0.833 is below 0.9; 1 trial(s) pending: {RESUME}</li>" in html
    assert '<td>accuracy</td><td>0.900</td><td>0.833</td><td class="bad">-0.067</td>' in html
    assert "Regressions (passed in the baseline, fail now): 1</summary><p><code>capital</code>" in html
    assert "Fixes (failed in the baseline, pass now): 1</summary><p><code>sum</code>" in html
    # one histogram per metric, ten bars each, the threshold drawn where there is one
    figures = re.findall(r'<figure class="histogram" data-metric="(\w+)">(.*?)</figure>', html, re.S)
    assert [name for name, _ in figures] == ["accuracy", "relevance"]
    assert all(body.count("<rect") == 10 for _, body in figures)
    assert "<title>0 to 0.1: 1</title>" in figures[0][1]
    assert "<title>0.9 to 1: 6</title>" in figures[0][1]
    assert '<line class="threshold" x1="150.0"' in figures[0][1]
    assert "threshold" not in figures[1][1]
    assert "http://" not in html  # self-contained
    assert "https://" not in html
    assert html.count("<script") == 2


def test_embedded_data_is_escaped_and_round_trips() -> None:
    html = render_html(sample_report(), {"exp-1": sample_items()})
    assert INJECTION not in html
    assert "alert(1)" in html  # the text is there, only its "<" are escaped
    assert html.count("</script>") == 2
    [data] = embedded(html)["experiments"]
    assert data["metrics"] == ["accuracy", "relevance"]
    by_id = {item["id"]: item for item in data["items"]}
    assert [(i["id"], i["verdict"], i["passed"]) for i in data["items"]] == [
        ("greeting", "passed", 2),
        ("capital", "failed", 1),
        ("sum", "pending", 1),
        ("inject", "passed", 2),
    ]
    inject = by_id["inject"]
    assert inject["data"] == {"input": {"text": INJECTION}, "expected_output": INJECTION}
    assert inject["trials"][0]["output"] == {"output": INJECTION}
    assert inject["trials"][1]["scores"][0] == ["accuracy", 1.0, INJECTION, False]
    assert by_id["capital"]["data"]["tags"] == ["geo"]
    assert by_id["sum"]["trials"][1] == {
        "trial": 1,
        "status": "pending",
        "passed": None,
        "output": None,
        "scores": [],
    }


def test_outputs_that_are_not_json_numbers_still_make_valid_json() -> None:
    # Scores are always finite; a task's output may hold NaN, which JSON.parse rejects.
    trials = [trial("a", 0, 1.0, output=math.nan), trial("b", 0, 1.0)]
    html = render_html(Report(run_id=None, resumed=None, experiments=[experiment(trials)]), {})
    [data] = embedded(html)["experiments"]
    assert data["items"][0]["trials"][0]["output"] == {"output": "nan"}
    assert data["items"][0]["data"] is None  # no dataset items given


def test_no_experiments() -> None:
    html = render_html(Report(run_id=None, resumed=None, experiments=[]), {})
    assert "No experiment was evaluated." in html
    assert embedded(html) == {"experiments": []}


def test_write_html_is_atomic(tmp_path: Path) -> None:
    path = tmp_path / "reports" / "nested" / "eval.html"
    write_html(sample_report(), {"exp-1": sample_items()}, path)
    assert path.read_text(encoding="utf-8") == render_html(sample_report(), {"exp-1": sample_items()})
    assert [p.name for p in path.parent.iterdir()] == ["eval.html"]


def test_ten_thousand_trials_stay_under_five_megabytes() -> None:
    report, items = large_report()
    size = len(render_html(report, items).encode("utf-8"))
    assert size < 5_000_000, f"{size:,} bytes"


# The page in a real browser. CI installs Debian's chromium and the playwright package; the
# browser that playwright would download itself cannot be fetched here.


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is missing (pip install playwright)")
    args = [
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
    ]
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=args)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A page that records script errors and dialogs: an injected alert() would open one."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.problems = []
    page.on("pageerror", lambda error: page.problems.append(f"error: {error}"))
    page.on("dialog", lambda dialog: (page.problems.append(f"dialog: {dialog.message}"), dialog.dismiss()))
    yield page
    page.close()


def distinct_colours(page: Any, png: bytes) -> int:
    """The number of distinct colours in a screenshot, decoded by the browser itself."""
    return int(
        page.evaluate(
            """async (src) => {
                const image = new Image();
                image.src = src;
                await image.decode();
                const canvas = document.createElement("canvas");
                canvas.width = image.width;
                canvas.height = image.height;
                const context = canvas.getContext("2d");
                context.drawImage(image, 0, 0);
                const pixels = context.getImageData(0, 0, canvas.width, canvas.height).data;
                const colours = new Set();
                for (let i = 0; i < pixels.length; i += 4) {
                    colours.add((pixels[i] << 16) | (pixels[i + 1] << 8) | pixels[i + 2]);
                }
                return colours.size;
            }""",
            "data:image/png;base64," + base64.b64encode(png).decode(),
        )
    )


def visible_verdicts(page: Any) -> list[str]:
    return [row.get_attribute("data-verdict") for row in page.locator("tr.item-row:visible").all()]


def test_page_in_chromium(page: Any, tmp_path: Path) -> None:
    path = tmp_path / "eval.html"
    write_html(sample_report(), {"exp-1": sample_items()}, path)
    page.goto("about:blank")
    blank = page.screenshot()
    page.goto(path.as_uri())
    page.wait_for_selector("body[data-rendered=true]")
    shot = page.screenshot(path=tmp_path / "eval.png", full_page=True)
    assert distinct_colours(page, blank) == 1
    assert distinct_colours(page, shot) > 20  # text, badges, bars: not a blank page
    assert page.locator("h2").first.inner_text() == "qa eval 1 pending gates not met"
    pending = page.locator(".pending-trials")
    assert pending.is_visible()
    assert RESUME in pending.inner_text()
    assert "sum#1" in pending.inner_text()

    assert visible_verdicts(page) == ["passed", "failed", "pending", "passed"]
    assert page.locator(".item-count").inner_text() == "(4 of 4 shown)"
    assert page.locator(".item-details").count() == 0  # details are built when a row opens
    page.click("#failures-only")
    assert visible_verdicts(page) == ["failed", "pending"]
    assert page.locator(".item-count").inner_text() == "(2 of 4 shown)"

    page.click("tr.item-row[data-item-id=capital]")
    details = page.locator(".item-details")
    assert details.count() == 1
    text = details.inner_text()
    assert "Capital of France?" in text
    assert "Paris" in text
    assert '"geo"' in text
    assert "The capital is Lyon" in details.locator(".trial[data-trial='0'] pre.output").inner_text()
    assert details.locator(".trial[data-trial='0'] .reason").first.inner_text() == "expected Paris, got Lyon"
    assert "Trial 0: completed, failed" in text
    assert "Trial 1: completed, passed" in text
    page.click("tr.item-row[data-item-id=capital]")
    assert page.locator(".item-details").count() == 0

    page.click("#failures-only")
    page.fill("#item-search", "inject")
    assert visible_verdicts(page) == ["passed"]
    page.click("tr.item-row[data-item-id=inject]")
    # the injected markup is shown as text, and no script ran from it
    assert INJECTION in page.locator(".item-details .trial[data-trial='0'] pre.output").inner_text()
    assert page.locator(".item-details .trial[data-trial='1'] .reason").first.inner_text() == INJECTION
    assert page.locator("script").count() == 2
    assert page.problems == []


def test_a_scores_metadata_is_shown_as_text_in_its_trial(page: Any, tmp_path: Path) -> None:
    judged = trial("a", 0, 1.0)
    accuracy, relevance = judged.scores
    metadata = {"judge": INJECTION, "tokens": 12}
    judged = judged.model_copy(
        update={"scores": [accuracy.model_copy(update={"metadata": metadata}), relevance]}
    )
    path = tmp_path / "eval.html"
    write_html(Report(run_id=None, resumed=None, experiments=[experiment([judged])]), {}, path)
    page.goto(path.as_uri())
    page.wait_for_selector("body[data-rendered=true]")
    page.click("tr.item-row[data-item-id=a]")
    rows = page.locator(".item-details tr.score")
    assert rows.nth(0).locator("td.metadata pre").inner_text() == json.dumps(metadata, indent=2)
    assert rows.nth(1).locator("td.metadata").count() == 0  # a score without metadata: no cell
    assert page.locator("script").count() == 2
    assert page.problems == []


def test_a_conversation_is_shown_as_its_transcript(page: Any, tmp_path: Path) -> None:
    conversation = [
        {"role": "user", "content": "Where is my order?"},
        {"role": "assistant", "content": INJECTION},
    ]
    output = {"conversation": conversation, "output": INJECTION, "turns": 1}
    chat = trial("a", 0, 1.0).model_copy(update={"output": output})
    per_turn = chat.scores[0].model_copy(
        update={"name": "polite", "metadata": {"aggregate": "mean", "turns": [[0.5, INJECTION]]}}
    )
    chat = chat.model_copy(update={"scores": [per_turn, chat.scores[1]]})
    path = tmp_path / "eval.html"
    write_html(Report(run_id=None, resumed=None, experiments=[experiment([chat])]), {}, path)
    page.goto(path.as_uri())
    page.wait_for_selector("body[data-rendered=true]")
    page.click("tr.item-row[data-item-id=a]")
    messages = page.locator(".item-details ol.transcript li.message")
    assert [messages.nth(n).get_attribute("class") for n in range(2)] == ["message user", "message assistant"]
    assert messages.nth(0).locator(".content").inner_text() == "Where is my order?"
    assert messages.nth(1).locator(".content").inner_text() == INJECTION  # text, never markup
    # The reply's per-turn score, its reason as the chip's title.
    chip = messages.nth(1).locator(".turn-score")
    assert chip.inner_text() == "polite 0.500"
    assert chip.get_attribute("title") == INJECTION
    assert messages.nth(0).locator(".turn-score").count() == 0
    assert page.locator(".item-details pre.output").count() == 0
    rest = json.loads(page.locator(".item-details pre.output-rest").inner_text())
    assert rest == {"turns": 1}  # the rest of the output, beside the transcript (not the last reply again)
    assert page.locator("script").count() == 2
    assert page.problems == []


def test_a_tool_sequence_shows_the_expected_calls_beside_the_calls_made(page: Any, tmp_path: Path) -> None:
    metadata = {
        "mode": "exact",
        "calls": "executed",
        "expected": [["search", None], ["fetch_order", None], ["refund", {"id": 7}]],
        "actual": [["fetch_order", {"id": 7}], ["search", {"q": INJECTION}], ["delete_account", None]],
        "missing": [2],
        "extra": [2],
        "moved": [[0, 1], [1, 0]],
    }
    agent = trial("a", 0, 0.0)
    sequence = agent.scores[0].model_copy(update={"name": "tool_sequence", "metadata": metadata})
    agent = agent.model_copy(update={"scores": [sequence, agent.scores[1]]})
    path = tmp_path / "eval.html"
    write_html(Report(run_id=None, resumed=None, experiments=[experiment([agent])]), {}, path)
    page.goto(path.as_uri())
    page.wait_for_selector("body[data-rendered=true]")
    page.click("tr.item-row[data-item-id=a]")
    rows = page.locator(".item-details table.trajectory tr")
    assert page.locator(".item-details .trajectory h4").inner_text() == "tool_sequence: tool calls (exact)"
    cells = [[cell.inner_text() for cell in rows.nth(n).locator("td").all()] for n in range(1, 4)]
    assert cells == [
        ["1", "search", 'fetch_order({"id":7})'],
        ["2", "fetch_order", f'search({{"q":{json.dumps(INJECTION)}}})'],
        ["3", 'refund({"id":7})', "delete_account"],
    ]
    marks = [
        [cell.get_attribute("class") for cell in rows.nth(n).locator("td.call").all()] for n in range(1, 4)
    ]
    assert marks == [
        ["call moved", "call moved"],
        ["call moved", "call moved"],
        ["call missing", "call extra"],
    ]
    assert page.locator("script").count() == 2
    assert page.problems == []


def test_ten_thousand_trials_load_without_freezing(page: Any, tmp_path: Path) -> None:
    def load(size: int) -> float:
        path = tmp_path / f"report-{size}.html"
        write_html(*large_report(size), path)
        start = time.perf_counter()
        page.goto(path.as_uri())
        page.wait_for_selector("body[data-rendered=true]")
        return time.perf_counter() - start

    # A guard against a page whose work grows faster than its rows (the freeze of a quadratic
    # render), as a ratio, not a time: ten times the rows load in less than ten times as long,
    # which work proportional to the rows cannot exceed (1.3 times here, the page's fixed costs
    # included); a quadratic render takes up to 100 times as long. Each size's best of two: a
    # pause of the machine during one load (a loaded CI runner) is no property of the page.
    small = min(load(200) for _ in range(2))
    large = min(load(2000) for _ in range(2))
    assert large < 10 * small, (large, small)
    assert page.locator("tr.item-row").count() == 2000
    page.click("#failures-only")
    assert page.locator("tr.item-row:visible").count() == 200
    page.click("tr.item-row[data-item-id=item-00010]")
    assert "generated answer number 00010 trial 0.." in page.locator(".item-details").inner_text()
    assert page.problems == []


# -- an experiment that is not finished, and one that was resumed -------------------------------


def test_pending_trials_show_their_count_missing_scores_and_the_resume_command(project: Project) -> None:
    project.dataset(items("a", "b", "c"))
    project.eval_test()
    project.fail("c")
    project.run("--eval", "--eval-html=report.html").assert_outcomes(passed=2, failed=1)
    experiment_id = project.last_experiment_id()
    html = (project.path / "report.html").read_text()
    # Not "no gates" and 100% as if finished: how many are pending, over what the rate is.
    assert (
        '<h2>test_qa <span class="badge wait">1 pending</span> <span class="badge neutral">no gates' in html
    )
    assert "pass rate 100.0% of the 2 completed" in html
    assert "<h3>Pending: 1 of 3 trials</h3>" in html
    assert '<tr data-metric="equals_metric"><td>equals_metric</td><td>2</td><td>1</td></tr>' in html
    assert f'<code class="resume-command">pytest --eval-resume={experiment_id}</code>' in html
    assert "Pending trials (item#trial): 1</summary><p><code>c#0</code>" in html
    assert "resumed" not in html

    project.repair()
    project.run("--eval-resume=last", "--eval-html=report.html").assert_outcomes(passed=1, deselected=2)
    html = (project.path / "report.html").read_text()
    # The experiment keeps its id: the page says it was resumed, and what this session ran.
    assert f'data-experiment-id="{experiment_id}"' in html
    assert '<span class="badge neutral">resumed</span>' in html
    assert "this session ran <b>1</b> trial(s); 2 completed in earlier sessions" in html
    assert "Trials run by this session (item#trial): 1</summary><p><code>c#0</code>" in html
    assert "pending</span>" not in html
    assert "Pending:" not in html


# -- the evidence behind the numbers, and the A/B view of the baseline comparison ------------------


def test_evidence_sections() -> None:
    html = render_html(evidence_report(), {"exp-1": sample_items()})
    # the mean's interval beside it; the pass rates with theirs; pass@k and pass^k
    assert "<th>mean</th><th>95% interval</th><th>min</th>" in html
    assert '<td>accuracy</td><td>0.875</td><td class="interval">[0.248, 1.000]</td><td>0.000</td>' in html
    assert '<p class="pass-rate">trial pass rate 0.875 [0.248, 1.000] 95%, 4 items</p>' in html
    assert (
        '<p class="item-pass-rate">items passing 2 of 2 trials 0.667 [0.094, 0.992] 95%, 3 items</p>' in html
    )
    cell = r'<td>([\d.]+)</td><td class="interval">(\[[\d.]+, [\d.]+\])</td>'
    assert re.findall(rf'<tr data-k="(\d)"><td>\d</td>{cell}{cell}</tr>', html) == [
        ("1", "0.833", "[0.116, 1.000]", "0.833", "[0.116, 1.000]"),
        ("2", "1.000", "[0.292, 1.000]", "0.667", "[0.094, 0.992]"),
    ]
    # gate cards: borderline and strict badges, the interval drawn against the bound, the notes
    cards = re.findall(
        r'<li class="gate (\w+)" data-kind="(\w+)" data-borderline="(\w+)">(.*?)</li></ul>', html
    )
    assert [card[:3] for card in cards] == [
        ("unmet", "fail_under", "true"),
        ("unmet", "max_regression", "true"),
    ]
    absolute, regression = (card[3] for card in cards)
    assert '<span class="badge wait borderline"' in absolute
    assert ">strict</span>" in absolute
    assert 'aria-label="0.857 [0.600, 1.000] one-sided 95%, 4 items; bound 0.900"' in absolute
    assert "<li>0.857 [0.600, 1.000] one-sided 95% bounds, 4 items, borderline" in absolute
    assert 'aria-label="-0.125 [-0.375, +0.000] one-sided 95%, 4 items; bound -0.050"' in regression
    assert "<li>catches a drop of 0.400 or more with 80% power at 4 items x 2 trials" in regression
    # the baseline: each metric's paired interval, the exact test on the flips
    assert "<th>delta</th><th>95% paired interval</th><th>items</th>" in html
    assert '<td class="bad">-0.125</td><td class="interval">[-0.375, +0.000]</td><td>4</td>' in html
    assert "1 regression(s), 1 fix(es): as many regressions by chance p=0.500" in html
    # the A/B view: its summary, and its rows as data for the script, in the report's order
    assert (
        '<p class="ab-summary">5 item(s) in both runs (1 only in this experiment, 1 only in the baseline)'
        ' &middot; <span class="bad">1 regression(s)</span>, <span class="ok">1 fix(es)</span>'
        " &middot; as many regressions by chance p=0.500</p>"
    ) in html
    assert re.findall(r'<th class="sortable" data-column="(\d)" data-metric="(\w+)"', html) == [
        ("0", "accuracy"),
        ("1", "relevance"),
    ]
    ab = embedded(html)["experiments"][0]["ab"]
    assert ab == {
        "metrics": ["accuracy", "relevance"],
        "items": [
            ["capital", "passed", "failed", "regression", [-0.5, 0.0]],
            ["sum", "passed", "pending", None, [-0.25, 0.0]],
            ["greeting", "passed", "passed", None, [0.0, 0.0]],
            [INJECTION, "failed", "failed", None, [0.0, None]],
            ["inject", "failed", "passed", "fix", [0.25, 0.0]],
        ],
    }
    assert INJECTION not in html
    assert html.count("</script>") == 2


def test_no_ab_view_without_a_baseline() -> None:
    html = render_html(Report(run_id=None, resumed=None, experiments=[experiment([], baseline=None)]), {})
    assert 'class="ab-view"' not in html
    assert embedded(html)["experiments"][0]["ab"] is None


def ab_rows(page: Any) -> list[tuple[str, ...]]:
    """The visible A/B rows as a person reads them: item, changes, verdicts, flip badge."""
    return [
        tuple(cell.inner_text() for cell in row.locator("td").all())
        for row in page.locator("table.ab tr.ab-row:visible").all()
    ]


def test_ab_view_in_chromium(page: Any, tmp_path: Path) -> None:
    path = tmp_path / "eval.html"
    write_html(evidence_report(), {"exp-1": sample_items()}, path)
    page.goto(path.as_uri())
    page.wait_for_selector("body[data-rendered=true]")
    # worst change first, the flips marked with their badges
    assert ab_rows(page) == [
        ("capital", "-0.500", "+0.000", "passed", "failed", "regression"),
        ("sum", "-0.250", "+0.000", "passed", "pending", ""),
        ("greeting", "+0.000", "+0.000", "passed", "passed", ""),
        (INJECTION, "+0.000", "-", "failed", "failed", ""),
        ("inject", "+0.250", "+0.000", "failed", "passed", "fix"),
    ]
    assert page.locator("tr.ab-row[data-item-id=capital] .badge.bad").inner_text() == "regression"
    assert page.locator("tr.ab-row[data-item-id=inject] .badge.ok").inner_text() == "fix"
    assert page.locator(".ab-count").inner_text() == "(5 of 5 shown)"
    # a second click on the change's heading: best first
    heading = page.locator("table.ab th.sortable[data-metric=accuracy]")
    assert heading.get_attribute("aria-sort") == "ascending"
    heading.click()
    assert heading.get_attribute("aria-sort") == "descending"
    assert [row[0] for row in ab_rows(page)] == ["inject", "greeting", INJECTION, "sum", "capital"]
    # sorted by another metric, the missing change last, ties in the report's order
    page.click("table.ab th.sortable[data-metric=relevance]")
    assert [row[0] for row in ab_rows(page)] == ["capital", "sum", "greeting", "inject", INJECTION]
    page.click("input.flips-only")
    assert [row[0] for row in ab_rows(page)] == ["capital", "inject"]
    assert page.locator(".ab-count").inner_text() == "(2 of 5 shown)"
    page.fill("#item-search", "cap")  # the search box filters these rows too
    assert [row[0] for row in ab_rows(page)] == ["capital"]
    # the gate cards: the interval against the bound, and the notes
    card = page.locator("li.gate[data-kind=max_regression]")
    assert "borderline" in card.inner_text()
    assert "catches a drop of 0.400" in card.inner_text()
    assert card.locator("svg.gate-interval").is_visible()
    assert page.locator("script").count() == 2
    assert page.problems == []


def test_a_gated_run_shows_its_evidence_and_the_ab_view(project: Project, page: Any) -> None:
    result, _ = ab_runs(project, "--eval-html=report.html", "--eval-fail-under=equals_metric=0.9")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    page.goto((project.path / "report.html").as_uri())
    page.wait_for_selector("body[data-rendered=true]")
    aggregates = page.locator("table.aggregates tr[data-metric=equals_metric] td").all_inner_texts()
    assert aggregates[:2] == ["equals_metric", "0.812"]
    assert aggregates[2].startswith("[")
    assert "items passing 2 of 2 trials 0.750 [" in page.locator(".item-pass-rate").inner_text()
    absolute = page.locator("li.gate[data-kind=fail_under]")
    assert absolute.get_attribute("data-borderline") == "true"
    assert "one-sided 95% bounds, 8 items, borderline" in absolute.inner_text()
    regression = page.locator("li.gate[data-kind=max_regression]")
    assert "one-sided 95% bounds on the change, 7 items" in regression.inner_text()
    assert "with 80% power" in regression.inner_text()
    summary = page.locator(".ab-summary").inner_text()
    assert summary == (
        "7 item(s) in both runs (1 only in this experiment, 1 only in the baseline) · 2 regression(s), "
        "1 fix(es) · as many regressions by chance p=0.500"
    )
    assert ab_rows(page) == [
        ("f", "-1.000", "passed", "failed", "regression"),
        ("e", "-0.500", "passed", "failed", "regression"),
        ("b", "+0.000", "passed", "passed", ""),
        ("c", "+0.000", "passed", "passed", ""),
        ("d", "+0.000", "passed", "passed", ""),
        ("g", "+0.000", "passed", "passed", ""),
        ("a", "+1.000", "failed", "passed", "fix"),
    ]
    assert page.problems == []


# -- each trial's span tree ---------------------------------------------------------------------

TRACED_APP = """
import opik
from opik import opik_context


@opik.track(type="tool")
def lookup(question):
    if question == "b":
        raise KeyError("no page for b")
    return "page about " + question


@opik.track(type="llm")
def llm(prompt):
    opik_context.update_current_span(
        model="house-llm-1",
        usage={"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
        total_cost=0.0021,
    )
    return prompt.split(":")[-1]


@opik.track
def agent(question):
    try:
        context = lookup(question)
    except KeyError:
        context = ""
    return llm(context + "</script><b>hi</b>:" + question)
"""


@pytest.fixture
def traced(project: Project, monkeypatch: pytest.MonkeyPatch) -> Project:
    """An app that makes spans with the Opik SDK (kept in memory: no server is reached)."""
    offline_opik(project, monkeypatch)
    project.dataset(items("a", "b"))
    project.write("app.py", TRACED_APP)
    project.eval_test(imports="from app import agent", behaviour="return agent(item['input']['text'])")
    return project


def span_heads(page: Any, trial: Any) -> list[str]:
    return [" ".join(text.split()) for text in trial.locator("details.span > summary").all_inner_texts()]


def test_a_trials_span_tree_opens_in_chromium(traced: Project, page: Any) -> None:
    result = traced.run("--eval", "--eval-html=report.html")
    result.assert_outcomes(passed=2)
    page.goto((traced.path / "report.html").as_uri())
    page.wait_for_selector("body[data-rendered=true]")
    page.click("tr.item-row[data-item-id=b]")
    trial = page.locator(".item-details .trial[data-trial='0']")
    # the trial's own latency, tokens and cost, in its heading
    assert re.search(r"completed, passed · \d+ ms · 12 in / 3 out tokens · \$0\.0021", trial.inner_text())
    tree = trial.locator("details.span-tree")
    assert tree.locator("summary").first.inner_text().startswith("Spans (6) · trace ")
    assert not trial.locator("details.span").first.is_visible()  # folded until opened
    tree.locator("summary").first.click()
    # the task span and the scoring beside it, at the top; the rest folded under them
    roots = tree.locator(":scope > details.span")
    assert [roots.nth(i).get_attribute("data-name") for i in range(roots.count())] == [
        "test_qa",
        "metrics_calculation",
    ]
    roots.first.locator(":scope > summary").click()
    agent = roots.first.locator(":scope > details.span[data-name=agent]")
    agent.locator(":scope > summary").click()
    children = agent.locator(":scope > details.span")
    assert [children.nth(i).get_attribute("data-name") for i in range(children.count())] == ["lookup", "llm"]
    lookup, llm = children.nth(0), children.nth(1)
    assert re.fullmatch(r"lookup tool \d+ ms error", " ".join(lookup.locator("summary").inner_text().split()))
    assert re.fullmatch(
        r"llm llm \d+ ms house-llm-1 12 in / 3 out tokens \$0\.0021",
        " ".join(llm.locator("summary").inner_text().split()),
    )
    assert not llm.locator(".field").first.is_visible()
    llm.locator("summary").click()
    fields = llm.locator(":scope > .field")
    # the app's text is shown as text: no element made from it, no script run
    assert '"prompt": "</script><b>hi</b>:b"' in fields.nth(0).inner_text()
    assert fields.nth(1).locator("h4").inner_text() == "Output"
    lookup.locator("summary").click()
    error = lookup.locator(":scope > .field").last
    assert error.locator("h4").inner_text() == "Error"
    assert "KeyError" in error.inner_text()
    assert "no page for b" in error.inner_text()
    assert page.locator("b:text-is('hi')").count() == 0
    assert page.locator("script").count() == 2
    assert page.problems == []


def test_span_trees_past_the_budget_are_left_out_and_name_their_trace(
    traced: Project, page: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_opik_eval import cli
    from pytest_opik_eval.reports import html_data as html

    # b fails its score: its tree comes first, though a was planned before it
    traced.dataset(
        [
            {"id": "a", "input": {"text": "a"}, "expected_output": "a"},
            {"id": "b", "input": {"text": "b"}, "expected_output": "not b"},
        ]
    )
    traced.run("--eval").assert_outcomes(passed=1, failed=1)
    a, b = traced.trials()
    tree = html.script_json(html._span_tree(b.spans))
    # Room for one tree, not for two.
    monkeypatch.setattr(html, "SPAN_BUDGET", len(tree) + 10)
    path = traced.path / "report.html"
    assert cli.main(["--store", str(traced.store_path), "report", "last", "--html", str(path)]) == 0
    page.goto(path.as_uri())
    page.wait_for_selector("body[data-rendered=true]")
    page.click("tr.item-row[data-item-id=a]")
    page.click("tr.item-row[data-item-id=b]")
    left_out = page.locator("tr.item-details").nth(0).locator(".trial")
    kept = page.locator("tr.item-details").nth(1).locator(".trial")
    assert kept.locator("details.span-tree").count() == 1
    assert kept.locator(".spans-left-out").count() == 0
    assert left_out.locator("details.span-tree").count() == 0
    assert left_out.locator(".spans-left-out").inner_text() == (
        f"Its span tree ({len(a.spans)} spans) is left out of this report to keep the file small; "
        f"print it with: opik-eval show {a.spans[0].trace_id}"
    )
    assert page.problems == []


def test_a_soft_failed_trial_says_so_in_chromium(project: Project, page: Any) -> None:
    # Missed its threshold in soft mode: "soft-failed", as in the terminal, not "failed".
    project.dataset(items("a", "b"))
    project.eval_test(behaviour="if item['id'] == 'b': return 'wrong'")
    result = project.run("--eval", "--eval-soft", "--eval-html=report.html")
    result.stdout.fnmatch_lines(["*1 passed, 1 soft-failed*"])
    page.goto((project.path / "report.html").as_uri())
    page.wait_for_selector("body[data-rendered=true]")
    counts = " ".join(page.locator("p.counts").inner_text().split())
    assert counts.startswith("2 trials: 2 completed (1 passed, 0 failed, 1 soft-failed)"), counts
    page.click("tr.item-row[data-item-id=b]")
    trial = page.locator(".item-details .trial[data-trial='0']")
    assert trial.get_attribute("data-outcome") == "soft-failed"
    assert trial.locator("h4").first.inner_text().startswith("Trial 0: completed, soft-failed")
    assert page.problems == []
