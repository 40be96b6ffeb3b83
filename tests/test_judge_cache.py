"""The judge cache (``--eval-judge-cache``): an LLM judge's scores reused on a rerun, never a stale
one when the judge's prompt, code or model changed, and never a heuristic's."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from conftest import Project, items, offline_opik
from fake_llm import APP, CONFTEST, FakeLLM, connections

from pytest_opik_eval.metrics import BaseMetric, ScoreResult
from pytest_opik_eval.run.judge_cache import JudgeCache
from pytest_opik_eval.run.scoring import Scorer
from pytest_opik_eval.settings import judge_cache_enabled
from pytest_opik_eval.store.records import ScoreRecord

# A judge (our BaseMetric, judge = True) that logs each real call to judge.log, and gives each
# call its own score (the count of calls ever), as a sampled LLM judge would; and a heuristic
# that logs its calls to heuristic.log.
JUDGES = '''
import pathlib
from pytest_opik_eval.metrics import BaseMetric, ScoreResult

HERE = pathlib.Path(__file__).parent


def logged(name, line):
    # name: read (and emptied) by the test; its .total: every call ever, for the score.
    for path in (HERE / name, HERE / f"{name}.total"):
        with open(path, "a") as log:
            log.write(line + "\\n")
    return len((HERE / f"{name}.total").read_text().splitlines())


class Judge(BaseMetric):
    """Asks a model whether the output answers the input."""

    judge = True

    def __init__(self, prompt="Does {output} answer {input}?", model="judge-1"):
        super().__init__(name="judge", threshold=0.0)
        self.prompt = prompt
        self.model = model

    def score(self, input, output, **ignored):
        calls = logged("judge.log", self.prompt.format(input=input, output=output))
        return ScoreResult(name=self.name, value=calls / 100, reason=f"call {calls} {{code}}")


class Heuristic(BaseMetric):
    def score(self, output, **ignored):
        logged("heuristic.log", str(output))
        return ScoreResult(name="heuristic", value=1.0)
'''

ON = "--eval-judge-cache=on"


def judged_project(project: Project, *, marker: str = "", code: str = "v1") -> Project:
    project.dataset(items("a", "b", "c"))
    project.write("judges.py", JUDGES.replace("{{code}}", code))
    project.eval_test(marker, metrics="[Judge(), Heuristic()]", imports="from judges import Judge, Heuristic")
    return project


def judge_calls(project: Project, log: str = "judge.log") -> int:
    """The real judge calls since the last look."""
    path = project.path / log
    calls = len(path.read_text().splitlines()) if path.exists() else 0
    path.unlink(missing_ok=True)
    return calls


def scores(report: dict[str, Any]) -> dict[tuple[str, int], tuple[Any, ...]]:
    """Each trial's scores and verdict."""
    return {
        (t["dataset_item_id"], t["trial"]): (
            t["passed"],
            tuple((s["name"], s["value"], s.get("reason")) for s in t["scores"]),
        )
        for e in report["experiments"]
        for t in e["trials"]
    }


def cache_files(project: Project) -> list[Path]:
    return sorted((project.path / ".opik-eval" / "judge-cache").rglob("*.json"))


def test_a_rerun_reuses_the_judges_scores_never_a_heuristics(project: Project) -> None:
    judged_project(project)
    first, report = project.run_report("--eval", ON)
    first.assert_outcomes(passed=3)
    first.stdout.fnmatch_lines(["eval judge cache: 0 hits, 3 scored"])
    assert judge_calls(project) == 3
    assert report["judge_cache"] == {"hits": 0, "scored": 3, "missed": 0, "strict": False}

    again, replayed = project.run_report("--eval", ON)
    again.assert_outcomes(passed=3)
    again.stdout.fnmatch_lines(["eval judge cache: 3 hits, 0 scored"])
    assert judge_calls(project) == 0
    assert scores(replayed) == scores(report)
    assert replayed["judge_cache"] == {"hits": 3, "scored": 0, "missed": 0, "strict": False}
    assert judge_calls(project, "heuristic.log") == 6  # cheap and deterministic: run every time

    # One file per judge score (none for the heuristic), keyed by content, readable: the class, the model, the library.
    files = cache_files(project)
    assert len(files) == 3
    entry = json.loads(files[0].read_text())
    assert files[0] == project.path / ".opik-eval" / "judge-cache" / entry["key"][:2] / f"{entry['key']}.json"
    assert entry["class"] == "judges.Judge"
    assert entry["model"] == "judge-1"
    assert entry["results"][0]["name"] == "judge"
    assert "0x" not in files[0].read_text()


@pytest.mark.parametrize(
    ("change", "where"),
    [
        pytest.param('Judge(prompt="Is {output} a good answer to {input}?")', "test", id="prompt"),
        pytest.param('Judge(model="judge-2")', "test", id="model"),
        pytest.param("v2", "code", id="class-source"),
    ],
)
def test_a_changed_judge_is_scored_again(project: Project, change: str, where: str) -> None:
    judged_project(project)
    _, before = project.run_report("--eval", ON)
    assert judge_calls(project) == 3
    if where == "code":
        judged_project(project, code=change)
    else:
        project.eval_test(metrics=f"[{change}, Heuristic()]", imports="from judges import Judge, Heuristic")
    result, after = project.run_report("--eval", ON)
    result.stdout.fnmatch_lines(["eval judge cache: 0 hits, 3 scored"])
    assert judge_calls(project) == 3
    assert scores(after) != scores(before)


def test_each_trial_keeps_its_own_judge_score(project: Project) -> None:
    judged_project(project, marker="trial_count=2,")
    _, first = project.run_report("--eval", ON)
    assert judge_calls(project) == 6
    values = [s[1][0][1] for s in scores(first).values()]
    assert len(set(values)) == 6  # every call scored differently
    _, again = project.run_report("--eval", ON)
    assert judge_calls(project) == 0
    assert scores(again) == scores(first)


def test_auto_without_a_recording_is_off(project: Project) -> None:
    judged_project(project)
    for _ in range(2):
        result = project.run("--eval")
        result.assert_outcomes(passed=3)
        assert "eval judge cache" not in result.stdout.str()
    assert judge_calls(project) == 6
    assert cache_files(project) == []


def test_the_environment_and_the_ini_file_set_it(project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    judged_project(project)
    project.pytester.makeini("[pytest]\nfilterwarnings = error\neval_judge_cache = on\n")
    project.run("--eval").stdout.fnmatch_lines(["eval judge cache: 0 hits, 3 scored"])
    monkeypatch.setenv("PYTEST_OPIK_EVAL_JUDGE_CACHE", "off")
    assert "eval judge cache" not in project.run("--eval").stdout.str()
    # The command line wins over both.
    project.run("--eval", ON).stdout.fnmatch_lines(["eval judge cache: 3 hits, 0 scored"])


def test_a_bad_value_is_a_usage_error(project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    judged_project(project)
    result = project.run("--eval", "--eval-judge-cache=yes")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--eval-judge-cache*invalid choice*'yes'*auto*on*off*"])
    monkeypatch.setenv("PYTEST_OPIK_EVAL_JUDGE_CACHE", "always")
    result = project.run("--eval")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*env PYTEST_OPIK_EVAL_JUDGE_CACHE: expected one of auto, on, off; got 'always'"]
    )


def test_no_secret_is_stored(project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "sk-judge-secret-0123456789"
    monkeypatch.setenv("JUDGE_API_KEY", secret)
    judged_project(project)
    # The judge's reason quotes the key, as an error page echoing a header would.
    project.eval_test(
        metrics='[Judge(prompt="{output} " + os.environ["JUDGE_API_KEY"]), Heuristic()]',
        imports="import os\nfrom judges import Judge, Heuristic",
    )
    project.run("--eval", ON).assert_outcomes(passed=3)
    stored = "".join(f.read_text() for f in cache_files(project))
    assert stored and secret not in stored
    # The key stands for its variable: a key set differently elsewhere (CI) keeps the cache.
    monkeypatch.setenv("JUDGE_API_KEY", "sk-judge-other-9876543210")
    project.run("--eval", ON).stdout.fnmatch_lines(["eval judge cache: 3 hits, 0 scored"])


def test_xdist_workers_write_the_cache_and_hit_it(project: Project) -> None:
    judged_project(project, marker="trial_count=2,")
    first, report = project.run_report("--eval", ON, "-p", "xdist", "-n", "2")
    first.assert_outcomes(passed=6)
    first.stdout.fnmatch_lines(["eval judge cache: 0 hits, 6 scored"])
    assert judge_calls(project) == 6
    assert len(cache_files(project)) == 6
    again, replayed = project.run_report("--eval", ON, "-p", "xdist", "-n", "2")
    again.stdout.fnmatch_lines(["eval judge cache: 6 hits, 0 scored"])
    assert judge_calls(project) == 0
    assert scores(replayed) == scores(report)
    assert replayed["judge_cache"] == {"hits": 6, "scored": 0, "missed": 0, "strict": False}


# An Opik SDK LLM-judge metric, its model a local OpikBaseModel that logs each call: detected
# as a judge with no flag of ours, and its model's name and its few-shot prompt reach the key.
OPIK_JUDGE = """
import json
import pathlib
from opik.evaluation.metrics import Hallucination
from opik.evaluation.models import OpikBaseModel

HERE = pathlib.Path(__file__).parent


class LocalModel(OpikBaseModel):
    def generate_chat_completion(self, messages, response_format=None, **kwargs):
        with open(HERE / "judge.log", "a") as log:
            log.write(self.model_name + "\\n")
        return {"role": "assistant", "content": json.dumps({"score": 0.0, "reason": ["grounded"]})}

    def generate_string(self, input, response_format=None, **kwargs):
        raise NotImplementedError

    def generate_provider_response(self, messages, **kwargs):
        raise NotImplementedError


def hallucination(model="local-1", examples=None):
    return Hallucination(model=LocalModel(model), few_shot_examples=examples, track=False)
"""


def test_an_opik_llm_judge_is_cached_by_its_model_and_prompt(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    offline_opik(project, monkeypatch)
    project.dataset(items("a", "b"))
    project.write("opik_judges.py", OPIK_JUDGE)
    imports = "from opik_judges import hallucination"
    project.eval_test(metrics="[hallucination()]", imports=imports)
    project.run("--eval", ON).assert_outcomes(passed=2)
    assert judge_calls(project) == 2
    [entry, _] = [json.loads(f.read_text()) for f in cache_files(project)]
    assert entry["class"] == "opik.evaluation.metrics.llm_judges.hallucination.metric.Hallucination"
    assert (entry["model"], entry["library"]) == ("local-1", "opik")
    project.run("--eval", ON).stdout.fnmatch_lines(["eval judge cache: 2 hits, 0 scored"])
    assert judge_calls(project) == 0

    project.eval_test(metrics='[hallucination(model="local-2")]', imports=imports)
    project.run("--eval", ON).stdout.fnmatch_lines(["eval judge cache: 0 hits, 2 scored"])
    example = '[{"title": "t", "input": "i", "context": ["c"], "output": "o", "score": 0.0, "reason": "r"}]'
    project.eval_test(metrics=f"[hallucination(examples={example})]", imports=imports)
    project.run("--eval", ON).stdout.fnmatch_lines(["eval judge cache: 0 hits, 2 scored"])
    assert judge_calls(project) == 4


def test_threads_share_the_cache(project: Project) -> None:
    judged_project(project, marker="task_threads=3,")
    project.run("--eval", ON).assert_outcomes(passed=3)
    assert judge_calls(project) == 3
    project.run("--eval", ON).stdout.fnmatch_lines(["eval judge cache: 3 hits, 0 scored"])
    assert judge_calls(project) == 0


@pytest.mark.parametrize(
    ("setting", "record_mode", "enabled"),
    [
        # The recording modes fill it; strict replay reads it.
        ("auto", "none", True),
        ("auto", "new_episodes", True),
        ("auto", "once", True),
        ("auto", "all", True),
        ("auto", "off", False),
        ("on", "off", True),
        ("off", "none", False),
        ("off", "new_episodes", False),
    ],
)
def test_when_the_judge_cache_is_on(setting: str, record_mode: str, enabled: bool) -> None:
    assert judge_cache_enabled(setting, record_mode) is enabled


class _Client:
    """Stands for an SDK client: a lock, a connection-like object, an API key, a back reference."""

    def __init__(self, owner: object, api_key: str) -> None:
        self.lock = threading.Lock()
        self.handle = object()
        self.api_key = api_key
        self.owner = owner


class _Judge(BaseMetric):
    judge = True

    def __init__(self, prompt: str, api_key: str = "sk-one-1234567890") -> None:
        super().__init__(name="judge")
        self.prompt = prompt
        self.client = _Client(self, api_key)
        self.nested: list[Any] = [[[[[[[[[[[[[[prompt]]]]]]]]]]]]]]

    def score(self, output: str, **ignored: Any) -> ScoreResult:
        return ScoreResult(name=self.name, value=len(output) / 10)


def test_a_key_holds_no_address_and_no_secret(tmp_path: Path) -> None:
    # Another process builds its own metric objects, at other addresses, with its own API key,
    # and a cyclic client: the same judge gets the same key, and a new prompt another one.
    def scored(cache: JudgeCache, metric: _Judge) -> list[ScoreRecord]:
        return cache.score(metric, {"output": "abc"}, "q1", 0, lambda: Scorer._run(metric, {"output": "abc"}))

    first = JudgeCache(tmp_path)
    scored(first, _Judge("Rate {output}"))
    assert (first.counts.hits, first.counts.scored) == (0, 1)
    other = JudgeCache(tmp_path)
    scored(other, _Judge("Rate {output}", api_key="sk-two-0987654321"))
    scored(other, _Judge("Rate {output} from 1 to 5"))
    assert (other.counts.hits, other.counts.scored) == (1, 1)
    stored = "".join(path.read_text() for path in tmp_path.rglob("*.json"))
    assert "0x" not in stored and "sk-one" not in stored


# -- with --eval-record: the judges of a recorded suite replay offline too ---------------------

# A judge of our own that asks the fake LLM server (tests/fake_llm.py) over HTTP, as an
# LLM judge would: outside the recording of the app's calls, which covers the task only.
HTTP_JUDGE = """
import os
import httpx
from pytest_opik_eval.metrics import BaseMetric, ScoreResult


class AskJudge(BaseMetric):
    judge = True

    def __init__(self, prompt="Is this right? {output}"):
        super().__init__(name="ask_judge", threshold=0.0)
        self.prompt = prompt

    def score(self, output, **ignored):
        with httpx.Client(trust_env=False, timeout=10) as client:
            response = client.post(
                os.environ["FAKE_LLM_URL"] + "/v1/chat/completions",
                headers={"Authorization": "Bearer " + os.environ["FAKE_LLM_API_KEY"]},
                json={"model": "judge-1", "messages": [{"role": "user", "content": self.prompt.format(output=output)}]},
            )
        response.raise_for_status()
        verdict = response.json()["choices"][0]["message"]["content"]
        return ScoreResult(name=self.name, value=0.5, reason=verdict)
"""

# Trial 0 of each item passes (the server's first answer), trial 1 fails, as in test_recording.
JUDGED_APP_TEST = """
import pytest
from pytest_opik_eval.metrics import Contains
from app import ask
from http_judge import AskJudge


@pytest.mark.eval(
    dataset="data.jsonl",
    metrics=[Contains(), AskJudge({prompt})],
    scoring_key_mapping={{"reference": "expected_output"}},
    trial_count=2,
)
def test_answer(eval_item):
    return ask(eval_item["input"]["question"])
"""


def judged_app(project: Project, prompt: str = "") -> None:
    project.dataset(
        {"id": q, "input": {"question": q}, "expected_output": "answer 1"} for q in ("capital", "colour")
    )
    project.write("app.py", APP)
    project.write("conftest.py", CONFTEST)  # counts the process's connections to the server
    project.write("http_judge.py", HTTP_JUDGE)
    project.write("test_app.py", JUDGED_APP_TEST.format(prompt=prompt))


def trial_results(report: dict[str, Any]) -> dict[tuple[str, int], tuple[Any, ...]]:
    return {key: (trial["status"], trial["output"], *result) for key, trial, result in _trials(report)}


def _trials(report: dict[str, Any]) -> list[tuple[tuple[str, int], dict[str, Any], tuple[Any, ...]]]:
    judged = scores(report)
    return [
        ((t["dataset_item_id"], t["trial"]), t, judged[(t["dataset_item_id"], t["trial"])])
        for e in report["experiments"]
        for t in e["trials"]
    ]


def test_a_recorded_suite_replays_its_judges_offline_and_a_changed_judge_fails_strict_replay(
    project: Project, llm: FakeLLM
) -> None:
    judged_app(project)
    # Recording (the README's advice) fills the judge cache: auto is on with any --eval-record.
    result, recorded = project.run_report("--eval", "--eval-record=new_episodes")
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines(["eval judge cache: 0 hits, 4 scored"])
    assert llm.requests == 8  # the app's 4 and the judge's 4
    assert connections(project) == 8

    llm.stop()
    result, replayed = project.run_report("--eval", "--eval-record=none")
    result.assert_outcomes(passed=2, failed=2)
    assert trial_results(replayed) == trial_results(recorded)
    assert connections(project) == 0
    result.stdout.fnmatch_lines(["eval judge cache: 4 hits, 0 scored, 0 missed (strict)"])
    assert replayed["judge_cache"] == {"hits": 4, "scored": 0, "missed": 0, "strict": True}

    # A new judge prompt has no cached score: strict replay fails its trials, never the network.
    judged_app(project, prompt='"Is this correct? {output}"')
    result, changed = project.run_report("--eval", "--eval-record=none")
    result.assert_outcomes(failed=4)
    assert connections(project) == 0
    result.stdout.fnmatch_lines(
        [
            "*item capital (trial 0): judge 'ask_judge' (http_judge.AskJudge) has no cached score, and "
            "strict replay (--eval-record=none) keeps judges off the network.",
            "  fix: score it once while the judge's model can be reached, with --eval-record=new_episodes "
            "(or --eval-judge-cache=on without --eval-record=none); or let judges run live in strict "
            "replay with --eval-judge-cache=off (the trial stays pending)",
        ]
    )
    assert "ConnectError" not in result.stdout.str()
    result.stdout.fnmatch_lines(["eval judge cache: 0 hits, 0 scored, 4 missed (strict)"])
    assert changed["judge_cache"] == {"hits": 0, "scored": 0, "missed": 4, "strict": True}
    assert {t["status"] for e in changed["experiments"] for t in e["trials"]} == {"pending"}

    # The workers' misses reach the controller's summary and report.
    result, distributed = project.run_report("--eval", "--eval-record=none", "-p", "xdist", "-n", "2")
    result.assert_outcomes(failed=4)
    result.stdout.fnmatch_lines(["eval judge cache: 0 hits, 0 scored, 4 missed (strict)"])
    assert distributed["judge_cache"]["missed"] == 4


def test_strict_replay_with_the_judge_cache_off_runs_the_judges_live(project: Project, llm: FakeLLM) -> None:
    judged_app(project)
    project.run("--eval", "--eval-record=new_episodes").assert_outcomes(passed=2, failed=2)
    assert llm.requests == 8
    result = project.run("--eval", "--eval-record=none", "--eval-judge-cache=off")
    result.assert_outcomes(passed=2, failed=2)
    assert llm.requests == 12  # the judge asked again; the app replayed
    assert "eval judge cache" not in result.stdout.str()
