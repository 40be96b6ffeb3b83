"""The judge cache (``--eval-judge-cache``): an LLM judge's scores reused on a rerun, never a stale
one when the judge's prompt, code or model changed, and never a heuristic's."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from conftest import NEEDS_RECORD, Project, items, offline_opik
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
import os
import pathlib
from pytest_opik_eval.metrics import BaseMetric, ScoreResult

HERE = pathlib.Path(__file__).parent


def logged(name, line):
    # name: read (and emptied) by the test; its .total: a byte per call ever, for the score.
    # Through os.open: a judge that calls open() when it scores is not cached (its prompt may
    # come from that file), and these are.
    return append(HERE / name, (line + "\\n").encode()) and append(HERE / f"{name}.total", b".")


def append(path, data):
    log = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(log, data)
        return os.fstat(log).st_size
    finally:
        os.close(log)


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


# -- what the key sees: the code a judge reaches, its prompts, its model and its endpoint ------

# Each judge below logs its calls through judges.logged (JUDGES) and scores with a prompt built
# from what the case edits; the reason quotes the prompt, so a new score shows the edit.
PROMPTS = 'EXTRA = "Is {output} correct?"\n'
EDITED_PROMPTS = 'EXTRA = "Is {output} correct, and polite?"\n'

JUDGE_CASE = """
import functools
import os
import string

import jinja2
from pytest_opik_eval.metrics import BaseMetric, ScoreResult
from judges import logged
{module}

class Judge(BaseMetric):
    judge = True
{attributes}
    def __init__(self):
        super().__init__(name="judge", threshold=0.0)
{init}
{decorator}
    def score(self, output, {parameters}**ignored):
        prompt = {prompt}
        calls = logged("judge.log", prompt)
        return ScoreResult(name=self.name, value=calls / 100, reason=prompt)
"""

RUBRICS = """
def rubric(output):
    return _wording().format(output=output)


def _wording():
    return "Is {output} right?"
"""


def judge_case(
    module: str = "import prompts\n",
    attributes: str = "",
    init: str = "",
    parameters: str = "",
    prompt: str = "",
    decorator: str = "",
) -> str:
    """A judge module: ``module`` is its own code, its imports (prompts.py, as a module, unless
    the case says otherwise; nothing else of it, so the key sees only what the case reaches)."""
    indent = "\n        "
    return JUDGE_CASE.format(
        module=module,
        attributes=attributes and f"    {attributes}\n",
        init=init and f"        {indent.join(init.splitlines())}",
        parameters=parameters,
        prompt=prompt,
        decorator=decorator and f"    {decorator}",
    )


# case id -> (judge_case.py, the file edited, what is replaced, by what)
CHANGES = {
    # A module-level helper the judge calls, and the helper that helper calls.
    "helper": (
        judge_case(
            module="def rubric(output):\n    return wording().format(output=output)\n\n\n"
            'def wording():\n    return "Is {output} right?"\n',
            prompt="rubric(output)",
        ),
        "judge_case.py",
        "Is {output} right?",
        "Is {output} right, and kind?",
    ),
    # The same in another module of the project, its helper private.
    "helper-in-another-module": (
        judge_case(module="from rubrics import rubric\n", prompt="rubric(output)"),
        "rubrics.py",
        "Is {output} right?",
        "Is {output} right, and kind?",
    ),
    "prompt-module-attribute": (
        judge_case(prompt="prompts.EXTRA.format(output=output)"),
        "prompts.py",
        "",
        "",
    ),
    "prompt-imported-name": (
        judge_case(module="from prompts import EXTRA\n", prompt="EXTRA.format(output=output)"),
        "prompts.py",
        "",
        "",
    ),
    "class-attribute": (
        judge_case(attributes="PROMPT = prompts.EXTRA", prompt="self.PROMPT.format(output=output)"),
        "prompts.py",
        "",
        "",
    ),
    "default-argument": (
        judge_case(parameters="template=prompts.EXTRA, ", prompt="template.format(output=output)"),
        "prompts.py",
        "",
        "",
    ),
    "closure": (
        judge_case(
            module="import prompts\n\n\ndef renderer(template):\n    return lambda output: template.format(output=output)\n",
            init="self.render = renderer(prompts.EXTRA)",
            prompt="self.render(output)",
        ),
        "prompts.py",
        "",
        "",
    ),
    "partial": (
        judge_case(
            module="import prompts\n\n\ndef render(tone, output):\n    return tone + prompts.EXTRA.format(output=output)\n",
            init='self.render = functools.partial(render, "Strictly: ")',
            prompt="self.render(output)",
        ),
        "prompts.py",
        "",
        "",
    ),
    "lambda-attribute": (
        judge_case(
            init="self.render = lambda output: prompts.EXTRA.format(output=output)",
            prompt="self.render(output)",
        ),
        "prompts.py",
        "",
        "",
    ),
    "str-template-method": (
        judge_case(init="self.render = prompts.EXTRA.format", prompt="self.render(output=output)"),
        "prompts.py",
        "",
        "",
    ),
    "jinja-template": (
        judge_case(
            init='self.template = jinja2.Template(prompts.EXTRA.replace("{output}", "{{ output }}"))',
            prompt="self.template.render(output=output)",
        ),
        "prompts.py",
        "",
        "",
    ),
    "string-template": (
        judge_case(
            init='self.template = string.Template(prompts.EXTRA.replace("{output}", "$output"))',
            prompt="self.template.substitute(output=output)",
        ),
        "prompts.py",
        "",
        "",
    ),
    # A score traced by the Opik SDK: its wrapper is the library's, what it wraps the project's.
    "opik-tracked-score": (
        judge_case(
            module="import opik\nimport prompts\n",
            decorator="@opik.track",
            prompt="prompts.EXTRA.format(output=output)",
        ),
        "prompts.py",
        "",
        "",
    ),
    # An environment variable read by name when it scores: the model's, here.
    "environment-variable": (
        judge_case(prompt='os.environ["JUDGE_MODEL"] + ": " + prompts.EXTRA.format(output=output)'),
        "env",
        "judge-1",
        "judge-2",
    ),
}


@pytest.fixture
def fresh_bytecode(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inner runs compile the project's modules from their source: an edit made within the second
    of the last run, keeping the file's size, would otherwise import the stale bytecode Python
    cached (it checks the source's time to the second, and its size)."""
    monkeypatch.setattr(sys, "dont_write_bytecode", True)


@pytest.mark.usefixtures("fresh_bytecode")
@pytest.mark.parametrize("case", list(CHANGES))
def test_an_edit_to_what_the_judge_reaches_is_scored_again(
    project: Project, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    source, edited, old, new = CHANGES[case]
    project.dataset(items("a", "b", "c"))
    project.write("judges.py", JUDGES)
    project.write("prompts.py", PROMPTS)
    project.write("rubrics.py", RUBRICS)
    project.write("judge_case.py", source)
    project.eval_test(metrics="[Judge()]", imports="from judge_case import Judge")
    monkeypatch.setenv("JUDGE_MODEL", "judge-1")
    offline_opik(project, monkeypatch)  # for @opik.track
    _, before = project.run_report("--eval", ON)
    assert judge_calls(project) == 3
    # Cached: the key is the same in another process.
    again = project.run("--eval", ON)
    again.stdout.fnmatch_lines(["eval judge cache: 3 hits, 0 scored"])
    assert "eval notices" not in again.stdout.str()
    assert judge_calls(project) == 0

    if edited == "env":
        monkeypatch.setenv("JUDGE_MODEL", new)
    elif old:
        path = project.path / edited
        path.write_text(path.read_text().replace(old, new))
    else:
        project.write(edited, EDITED_PROMPTS)
    result, after = project.run_report("--eval", ON)
    result.stdout.fnmatch_lines(["eval judge cache: 0 hits, 3 scored"])
    assert judge_calls(project) == 3
    reasons = {score[1][0][2] for score in scores(after).values()}
    assert reasons.isdisjoint(score[1][0][2] for score in scores(before).values())
    assert all(("polite" in r) or ("kind" in r) or ("judge-2" in r) for r in reasons), reasons


# Judges that hold a client of the fake LLM server (tests/fake_llm.py) and ask it: httpx's, the
# OpenAI SDK's, and one a module holds. Connection: close, so no socket outlives a run.
CLIENT_JUDGES = """
import os
import httpx
import openai
from pytest_opik_eval.metrics import BaseMetric, ScoreResult
from judges import logged

ASK = [{"role": "user", "content": "Is it right?"}]


class HttpxJudge(BaseMetric):
    judge = True

    def __init__(self, base_url, api_key):
        super().__init__(name="judge", threshold=0.0)
        headers = {"Authorization": f"Bearer {api_key}", "Connection": "close"}
        self.client = httpx.Client(base_url=base_url, headers=headers, trust_env=False, timeout=10)

    def score(self, output, **ignored):
        response = self.client.post("/chat/completions", json={"model": "judge-1", "messages": ASK})
        response.raise_for_status()
        logged("judge.log", str(self.client.base_url))
        return ScoreResult(name=self.name, value=0.5, reason=response.json()["choices"][0]["message"]["content"])


class OpenAIJudge(BaseMetric):
    judge = True

    def __init__(self, base_url, api_key):
        super().__init__(name="judge", threshold=0.0)
        self.client = openai.OpenAI(base_url=base_url, api_key=api_key, default_headers={"Connection": "close"})

    def score(self, output, **ignored):
        answer = self.client.chat.completions.create(model="judge-1", messages=ASK)
        logged("judge.log", str(self.client.base_url))
        return ScoreResult(name=self.name, value=0.5, reason=answer.choices[0].message.content)


CLIENT = openai.OpenAI(
    base_url=os.environ["JUDGE_BASE_URL"], api_key=os.environ["JUDGE_SERVICE"], default_headers={"Connection": "close"}
)


class ModuleClientJudge(BaseMetric):
    judge = True

    def __init__(self, base_url, api_key):  # the module's client has them (from the environment)
        super().__init__(name="judge", threshold=0.0)

    def score(self, output, **ignored):
        answer = CLIENT.chat.completions.create(model="judge-1", messages=ASK)
        logged("judge.log", str(CLIENT.base_url))
        return ScoreResult(name=self.name, value=0.5, reason=answer.choices[0].message.content)
"""


@pytest.mark.parametrize("judge", ["HttpxJudge", "OpenAIJudge", "ModuleClientJudge"])
def test_the_judges_endpoint_is_in_its_key_and_its_api_key_is_not(
    project: Project, llm: FakeLLM, monkeypatch: pytest.MonkeyPatch, judge: str
) -> None:
    project.dataset(items("a", "b", "c"))
    project.write("judges.py", JUDGES)
    project.write("client_judges.py", CLIENT_JUDGES)

    def run(base_url: str, api_key: str) -> pytest.RunResult:
        # JUDGE_SERVICE: a name no secrets rule knows; the API key is left out by its place.
        monkeypatch.setenv("JUDGE_BASE_URL", base_url)
        monkeypatch.setenv("JUDGE_SERVICE", api_key)
        metric = f"{judge}(base_url={base_url!r}, api_key={api_key!r})"
        project.eval_test(metrics=f"[{metric}]", imports=f"from client_judges import {judge}")
        result = project.run("--eval", ON)
        result.assert_outcomes(passed=3)
        return result

    run(f"{llm.url}/v1", "sk-first-0123456789").stdout.fnmatch_lines(["eval judge cache: 0 hits, 3 scored"])
    assert (judge_calls(project), llm.requests) == (3, 3)
    # Another API key: the same judge, its scores reused.
    run(f"{llm.url}/v1", "sk-second-9876543210").stdout.fnmatch_lines(["eval judge cache: 3 hits, 0 scored"])
    assert (judge_calls(project), llm.requests) == (0, 3)
    stored = "".join(f.read_text() for f in cache_files(project))
    assert "sk-first" not in stored
    assert "sk-second" not in stored
    # Another endpoint (a gateway, another deployment): scored again.
    run(f"{llm.url}/v2", "sk-second-9876543210").stdout.fnmatch_lines(["eval judge cache: 0 hits, 3 scored"])
    assert (judge_calls(project), llm.requests) == (3, 6)


# -- what the key cannot see: never cached, and said once ---------------------------------------

UNSEEN = """
import pathlib
from pytest_opik_eval.metrics import BaseMetric, ScoreResult
from judges import logged

HERE = pathlib.Path(__file__).parent


class FileJudge(BaseMetric):
    \"\"\"Reads its prompt from a file each time it scores.\"\"\"

    judge = True

    def __init__(self):
        super().__init__(name="judge", threshold=0.0)

    def score(self, output, **ignored):
        prompt = (HERE / "prompt.txt").read_text().format(output=output)
        calls = logged("judge.log", prompt)
        return ScoreResult(name=self.name, value=calls / 100, reason=prompt)


class KeyedFileJudge(FileJudge):
    \"\"\"The same, with the key it gives the cache: the prompt's text.\"\"\"

    def judge_cache_key(self):
        return (HERE / "prompt.txt").read_text()


class SampledJudge(BaseMetric):
    \"\"\"Holds a generator of few-shot examples, whose state Python cannot read.\"\"\"

    judge = True

    def __init__(self):
        super().__init__(name="judge", threshold=0.0)
        self.examples = (example for example in ["a", "b"])

    def score(self, output, **ignored):
        calls = logged("judge.log", output)
        return ScoreResult(name=self.name, value=calls / 100, reason=f"{output} with {next(self.examples, '')}")
"""

UNSEEN_NOTICE = (
    "judge cache: judge 'judge' (unseen.{judge}) is not cached, its score called afresh each time: its "
    "key cannot see what decides it: {what}."
)
OWN_KEY_ADVICE = (
    "  To cache it, give the metric a judge_cache_key() method that returns what decides its score (the "
    "prompt's text, the model, the endpoint), which the cache then keys it by (README: Cache the judges' scores)."
)


def unseen_project(project: Project, judge: str) -> None:
    project.dataset(items("a", "b", "c"))
    project.write("judges.py", JUDGES)
    project.write("unseen.py", UNSEEN)
    (project.path / "prompt.txt").write_text("Is {output} correct?")
    project.eval_test("trial_count=2,", metrics=f"[{judge}()]", imports=f"from unseen import {judge}")


@pytest.mark.parametrize(
    ("judge", "what"),
    [
        pytest.param(
            "FileJudge",
            "*.read_text() in unseen.FileJudge.score: a file (or a prompt store) read when it scores",
            id="prompt-file-read-when-scoring",
        ),
        pytest.param(
            "SampledJudge",
            "unseen.SampledJudge.examples: a builtins.generator object, whose state Python cannot read*",
            id="unreadable-object",
        ),
    ],
)
@NEEDS_RECORD
def test_a_judge_whose_key_cannot_see_it_all_is_never_cached_and_says_so(
    project: Project, judge: str, what: str
) -> None:
    unseen_project(project, judge)
    for _ in range(2):
        result = project.run("--eval", ON)
        result.assert_outcomes(passed=6)
        result.stdout.fnmatch_lines(
            ["*eval notices*", UNSEEN_NOTICE.format(judge=judge, what=what), OWN_KEY_ADVICE]
        )
        assert result.stdout.str().count("is not cached") == 1  # once, for its 6 trials
        result.stdout.fnmatch_lines(["eval judge cache: 0 hits, 6 scored"])
        assert judge_calls(project) == 6
    assert cache_files(project) == []
    # Under pytest-xdist each worker finds it, and the controller says it once.
    result = project.run("--eval", ON, "-p", "xdist", "-n", "2")
    result.assert_outcomes(passed=6)
    assert result.stdout.str().count("is not cached") == 1
    assert judge_calls(project) == 6
    assert cache_files(project) == []

    # Strict replay cannot call it, nor find it cached: its trials fail, and say why.
    result = project.run("--eval", "--eval-record=none")
    result.assert_outcomes(failed=6)
    result.stdout.fnmatch_lines(
        [
            f"*item a (trial 0): judge 'judge' (unseen.{judge}) cannot be cached: its key cannot see what "
            f"decides it: {what}; and strict replay (--eval-record=none) keeps judges off the network.",
            "  fix: give the metric a judge_cache_key() method*; or let judges run live in strict replay "
            "with --eval-judge-cache=off (the trial stays pending)",
            "eval judge cache: 0 hits, 0 scored, 6 missed (strict)",
        ]
    )
    assert judge_calls(project) == 0


@pytest.mark.usefixtures("fresh_bytecode")
def test_a_judge_gives_its_own_key(project: Project) -> None:
    unseen_project(project, "KeyedFileJudge")
    first = project.run("--eval", ON)
    first.stdout.fnmatch_lines(["eval judge cache: 0 hits, 6 scored"])
    assert "eval notices" not in first.stdout.str()
    project.run("--eval", ON).stdout.fnmatch_lines(["eval judge cache: 6 hits, 0 scored"])
    assert judge_calls(project) == 6
    (project.path / "prompt.txt").write_text("Is {output} correct, and polite?")
    _, after = project.run_report("--eval", ON)
    assert judge_calls(project) == 6
    assert {score[1][0][2] for score in scores(after).values()} == {
        f"Is {i} correct, and polite?" for i in "abc"
    }


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
    assert stored
    assert secret not in stored
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
import os
import pathlib
from opik.evaluation.metrics import Hallucination
from opik.evaluation.models import OpikBaseModel

HERE = pathlib.Path(__file__).parent


class LocalModel(OpikBaseModel):
    def generate_chat_completion(self, messages, response_format=None, **kwargs):
        log = os.open(HERE / "judge.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT)  # not open(): see JUDGES
        os.write(log, (self.model_name + "\\n").encode())
        os.close(log)
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

    def __init__(self, prompt: str, api_key: str = "sk-one-1234567890", depth: int = 10) -> None:
        super().__init__(name="judge")
        self.prompt = prompt
        self.client = _Client(self, api_key)
        self.nested: list[Any] = [prompt]
        for _ in range(depth - 1):
            self.nested = [self.nested]

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
    assert "0x" not in stored
    assert "sk-one" not in stored


@NEEDS_RECORD
def test_a_configuration_too_deep_to_see_is_never_cached(tmp_path: Path) -> None:
    notices: list[str] = []
    cache = JudgeCache(tmp_path, notify=notices.append)
    metric = _Judge("Rate {output}", depth=14)
    for _ in range(2):
        cache.score(metric, {"output": "abc"}, "q1", 0, lambda: Scorer._run(metric, {"output": "abc"}))
    assert (cache.counts.hits, cache.counts.scored) == (0, 2)
    assert list(tmp_path.rglob("*.json")) == []
    [notice] = notices
    assert "test_judge_cache._Judge.nested" + "[0]" * 12 + ": nested more than 12 levels deep" in notice


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


@NEEDS_RECORD
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


@NEEDS_RECORD
def test_strict_replay_with_the_judge_cache_off_runs_the_judges_live(project: Project, llm: FakeLLM) -> None:
    judged_app(project)
    project.run("--eval", "--eval-record=new_episodes").assert_outcomes(passed=2, failed=2)
    assert llm.requests == 8
    result = project.run("--eval", "--eval-record=none", "--eval-judge-cache=off")
    result.assert_outcomes(passed=2, failed=2)
    assert llm.requests == 12  # the judge asked again; the app replayed
    assert "eval judge cache" not in result.stdout.str()
