"""Helpers for the end-to-end tests: a project with a dataset and an eval test, run through pytester."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import importlib.util
import json
import textwrap
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

# pytester's in-process runs drop the modules a run imported when it ends. httpx keeps, from
# its first request, a map of httpcore's exception classes: were httpcore first imported inside
# one run, the next run's fresh httpcore classes would miss that map, and a refused connection
# would surface as a raw httpcore error. Importing it here, once, keeps it across runs.
import httpcore  # noqa: F401
import opik_server
import pytest
from fake_batches import FakeAnthropic, FakeGemini, FakeOpenAI
from fake_llm import SECRET, FakeLLM
from opik_server import OpikTestServer
from packaging.version import Version

# The same hazard inside this package: session/running.py reads ``from pytest_opik_eval.run import
# trial``, which takes the package's attribute, left pointing at the first run's module, while other
# modules import the next run's fresh copy (so trial.py's notices went to a stash key the session
# never read). Imported here once, each module is one object in every run.
import pytest_opik_eval.ids
import pytest_opik_eval.run.recording  # noqa: F401  (--eval-record: its models, one class in every run)
import pytest_opik_eval.run.trial  # noqa: F401
from pytest_opik_eval.store.local import LocalStore
from pytest_opik_eval.store.records import TrialRecord

pytest_plugins = ["pytester"]

# An eval test whose task logs each call to calls.log and raises for the item ids (or
# "id#trial") listed in fail.txt, so a test can break a run and then repair it.
EVAL_TEST = """
import pathlib
import pytest
from pytest_opik_eval.metrics import Equals
{imports}

HERE = pathlib.Path(__file__).parent


def task(item, trial):
    with open(HERE / "calls.log", "a") as log:
        log.write(f"{{item['id']}}#{{trial}}\\n")
    fail = HERE / "fail.txt"
    broken = set(fail.read_text().split()) if fail.exists() else set()
    if item["id"] in broken or f"{{item['id']}}#{{trial}}" in broken:
        raise RuntimeError(f"simulated crash on {{item['id']}}")
    {behaviour}
    return {{"output": item["input"]["text"]}}


@pytest.mark.eval(
    dataset={dataset},
    metrics={metrics},
    scoring_key_mapping={{"reference": "expected_output"}},
    {marker}
)
def test_qa(eval_item, eval_trial):
    return task(eval_item, eval_trial)
"""


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # its parent package is missing
        return False


def extra_reason(extra: str, module: str) -> str:
    """Why a test that needs an optional extra is skipped without it: CI also runs the suite with
    the core install only (.ci/run), where the reason names the extra to install."""
    python = " (Python >= 3.11)" if extra == "cost" else ""
    return f"needs the {extra} extra ({module}): pip install 'pytest-opik-eval[{extra}]'{python}"


def needs_extra(extra: str, module: str) -> pytest.MarkDecorator:
    """Skip a test (a module, as ``pytestmark``) that needs an optional extra when it is not installed."""
    return pytest.mark.skipif(not installed(module), reason=extra_reason(extra, module))


NEEDS_RECORD = needs_extra("record", "vcr")


def items(*labels: str, **extra: Any) -> list[dict[str, Any]]:
    return [{"id": label, "input": {"text": label}, "expected_output": label, **extra} for label in labels]


class Project:
    """A pytester project with one dataset file and one eval test module."""

    def __init__(self, pytester: pytest.Pytester) -> None:
        self.pytester = pytester
        self.path = pytester.path
        self.store_path = pytester.path / ".opik-eval" / "store.db"
        # Strict like the outer suite, and like many projects: any warning the plugin causes in an
        # inner run fails it. A test that needs a warning shown writes an ini of its own.
        pytester.makeini("[pytest]\nfilterwarnings = error\n")

    def dataset(self, rows: Iterable[dict[str, Any]], name: str = "data.jsonl") -> Path:
        path = self.path / name
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
        return path

    def eval_test(
        self,
        marker: str = "",
        *,
        dataset: str = '"data.jsonl"',
        metrics: str = "[Equals()]",
        behaviour: str = "",
        imports: str = "",
        name: str = "test_eval",
    ) -> Path:
        source = EVAL_TEST.format(
            marker=marker, dataset=dataset, metrics=metrics, behaviour=behaviour, imports=imports
        )
        return self.pytester.makepyfile(**{name: source})

    def write(self, name: str, source: str) -> Path:
        path = self.path / name
        path.write_text(textwrap.dedent(source))
        return path

    def fail(self, *keys: str) -> None:
        (self.path / "fail.txt").write_text("\n".join(keys))

    def repair(self) -> None:
        (self.path / "fail.txt").unlink(missing_ok=True)

    def run(self, *args: str) -> pytest.RunResult:
        return self.pytester.runpytest(*args)

    def run_report(self, *args: str, subprocess: bool = False) -> tuple[pytest.RunResult, dict[str, Any]]:
        report = self.path / "report.json"
        report.unlink(missing_ok=True)
        if subprocess:
            result = self.pytester.runpytest_subprocess(*args, f"--eval-report={report}")
        else:
            result = self.run(*args, f"--eval-report={report}")
        return result, json.loads(report.read_text())

    def calls(self) -> list[str]:
        """The task calls ("id#trial") since the last look, in order."""
        log = self.path / "calls.log"
        if not log.exists():
            return []
        calls = log.read_text().split()
        log.unlink()
        return calls

    def trials(
        self, experiment_id: str | None = None, *, store_path: Path | None = None
    ) -> list[TrialRecord]:
        store = LocalStore(store_path or self.store_path, create=False)
        try:
            if experiment_id is None:
                _, experiments = store.find("last")
                assert len(experiments) == 1, experiments
                experiment_id = experiments[0].id
            return store.trials(experiment_id, spans=True)
        finally:
            store.close()

    def completed(self) -> set[tuple[str, int]]:
        return {(t.dataset_item_id, t.trial) for t in self.trials() if t.status == "completed"}

    def last_experiment_id(self) -> str:
        store = LocalStore(self.store_path, create=False)
        try:
            _, experiments = store.find("last")
            return experiments[0].id
        finally:
            store.close()


def offline_opik(project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Opik SDK set up for a server that does not answer, and no user config file: the app's
    spans stay in the trial's memory, and one that escaped would surface as an SDK error, never
    as a hang (port 9, discard, on loopback refuses at once; the sandbox's proxy answers some
    "unroutable" addresses)."""
    monkeypatch.setenv("OPIK_URL_OVERRIDE", "http://127.0.0.1:9/api/")
    monkeypatch.setenv("OPIK_CONFIG_PATH", str(project.path / "no-opik-config"))


@pytest.fixture(autouse=True)
def hermetic(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Inner pytest runs load this plugin and only the others a test names with ``-p`` (such as
    ``-p xdist``), so the suite passes the same whatever else is installed: the Opik SDK's own
    pytest plugin, pytest-asyncio, anyio, pytest-rerunfailures."""
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    # ``-p opik_eval`` loads it by its entry point's name, as a user would, so ``-p no:opik_eval``
    # still blocks it. Not PYTEST_PLUGINS: before pytest 9.2 it takes module names only, and the
    # plugin loaded as ``pytest_opik_eval.plugin`` would escape ``-p no:opik_eval``. Pytester
    # clears PYTEST_ADDOPTS when it starts, so it starts first.
    if "pytester" in request.fixturenames:
        request.getfixturevalue("pytester")
    monkeypatch.setenv("PYTEST_ADDOPTS", "-p opik_eval")


@pytest.fixture
def project(pytester: pytest.Pytester) -> Project:
    return Project(pytester)


OPIK_KEY = "sk-test-0p1k-K3Y-do-not-print"  # recognisable, to prove it is never shown


@pytest.fixture
def opik(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[OpikTestServer]:
    """An Opik-compatible server on 127.0.0.1, with the environment pointing the plugin at it."""
    with OpikTestServer(api_key=OPIK_KEY, workspace="evals") as server:
        point_at(server, monkeypatch, tmp_path)
        yield server
        assert server.invalid_requests == []


def point_at(
    server: OpikTestServer,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    project_name: str | None = "pytest-evals",
) -> None:
    """The environment pointing the plugin's Opik backend (and the Opik SDK) at ``server``."""
    env = server.sdk_env() if project_name is None else server.sdk_env(project_name=project_name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PYTEST_OPIK_EVAL_BACKEND", "opik")
    monkeypatch.setenv("OPIK_CONFIG_PATH", str(tmp_path / "no-opik-config"))
    # The Opik SDK's resume checkpoints go under the home folder.
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


@contextlib.contextmanager
def opik_days_behind(
    project: Project,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    project_name: str | None = "pytest-evals",
) -> Iterator[OpikTestServer]:
    """An Opik server that checks the UUID v7 time window as Opik Cloud does (24 hours), and the
    next run recorded as if two days ago, the server going away once its experiment is made (at
    the first trial's setup): its writes wait in the spool, to be sent under new ids when the
    server comes back. Put the clock back (``ids._clock = time.time_ns``) before syncing."""
    with OpikTestServer(api_key=OPIK_KEY, workspace="evals", uuid7_window=24 * 3600) as server:
        point_at(server, monkeypatch, tmp_path, project_name)
        two_days = 2 * 24 * 3600 * 10**9
        monkeypatch.setattr(pytest_opik_eval.ids, "_clock", lambda: time.time_ns() - two_days)
        monkeypatch.setattr(pytest_opik_eval.ids, "_last", 0)  # ids never go back: the tests' before
        monkeypatch.setattr(opik_server, "CURRENT", server, raising=False)
        project.write(
            "conftest.py",
            "def pytest_runtest_setup(item):\n    __import__('opik_server').CURRENT.go_down()\n",
        )
        yield server


@pytest.fixture(params=["local", "opik"])
def any_backend(request: pytest.FixtureRequest, pytester: pytest.Pytester) -> Project:
    """A project recording to the local store, and the same against the Opik test server."""
    if request.param == "opik":
        request.getfixturevalue("opik")
    return Project(pytester)


@pytest.fixture
def llm(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeLLM]:
    """A fake OpenAI-style server (tests/fake_llm.py), its address and the app's key in the environment."""
    server = FakeLLM()
    monkeypatch.setenv("FAKE_LLM_URL", server.url)
    monkeypatch.setenv("FAKE_LLM_PORT", str(server.port))
    # As an app reads its key: from the environment.
    monkeypatch.setenv("FAKE_LLM_API_KEY", SECRET)
    yield server
    server.stop()


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    """A fake of OpenAI's live and Batch API (tests/fake_batches.py), its batches ended by the test."""
    server = FakeOpenAI()
    yield server
    server.close()


@pytest.fixture
def fake_anthropic() -> Iterator[FakeAnthropic]:
    """A fake of Anthropic's Messages and Message Batches API (tests/fake_batches.py)."""
    server = FakeAnthropic()
    yield server
    server.close()


@pytest.fixture
def fake_gemini() -> Iterator[FakeGemini]:
    """A fake of the Gemini Developer API's generateContent and Batch Mode (tests/fake_batches.py)."""
    server = FakeGemini()
    yield server
    server.close()


# pytest-asyncio 0.24 set an event loop's scope apart from a fixture's, as loop_scope; before,
# the marker named it scope, and an async fixture ran on the loop of its own scope. 0.23 is the
# newest release for pytest before 8.2 (CI also runs the suite at the lowest pytest supported).
LOOP_SCOPE_APART = Version(importlib.metadata.version("pytest-asyncio")) >= Version("0.24")


@pytest.fixture(autouse=True)
def no_event_loop_left() -> Iterator[None]:
    """pytest-asyncio before 0.24 ends a session with a fresh event loop set as the thread's
    current one, for the process's exit to collect. Inner runs share this process: it is closed
    here, after every test (an inner run with pytest-asyncio may be in any test file), as the next
    run that sets a loop would drop it unclosed (a ResourceWarning, an error)."""
    yield
    if LOOP_SCOPE_APART:
        return
    try:
        loop = asyncio.get_event_loop_policy().get_event_loop()
    except RuntimeError:  # none is set
        return
    loop.close()
    asyncio.set_event_loop(None)
