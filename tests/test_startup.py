"""What the plugin costs a suite that has no eval test: it imports nothing heavy at start-up."""

from __future__ import annotations

import json

from conftest import Project, items

REPORT_MODULES = """
import json, sys

def pytest_sessionfinish(session):
    heavy = ("pydantic", "sqlite3", "httpx", "httpx2", "genai_prices", "filelock", "pytest_opik_eval")
    names = [n for n in sys.modules if n.split(".")[0] in heavy]
    with open("modules.json", "w") as f:
        json.dump(sorted(names), f)
"""


def loaded(project: Project, *args: str) -> list[str]:
    project.write("conftest.py", REPORT_MODULES)
    project.write("test_plain.py", "def test_plain():\n    pass\n")
    result = project.pytester.runpytest_subprocess(*args)
    assert result.ret == 0
    return list(json.loads((project.path / "modules.json").read_text()))


def test_a_suite_without_eval_tests_imports_no_store_and_no_pydantic(project: Project) -> None:
    assert loaded(project) == [
        "pytest_opik_eval",
        "pytest_opik_eval.collect",
        "pytest_opik_eval.collect.marker",
        "pytest_opik_eval.disabled",
        "pytest_opik_eval.hookspecs",
        "pytest_opik_eval.option_values",
        "pytest_opik_eval.options",
        "pytest_opik_eval.plugin",
        "pytest_opik_eval.thresholds",
    ]


def test_eval_without_eval_tests_opens_no_store(project: Project) -> None:
    modules = loaded(project, "--eval")
    assert "pytest_opik_eval.store.local" not in modules
    assert "sqlite3" not in modules
    assert not project.store_path.exists()


def test_an_eval_session_runs_every_test_with_the_garbage_collector_on(project: Project) -> None:
    # The collector is paused while the session's modules are imported at configure, and while
    # the plan is built: every test and eval task runs with it on, as without --eval.
    project.dataset(items("a", "b"))
    project.eval_test(behaviour="assert gc.isenabled()", imports="import gc")
    project.write("test_plain.py", "import gc\n\ndef test_plain():\n    assert gc.isenabled()\n")
    result = project.pytester.runpytest_subprocess("--eval")
    result.assert_outcomes(passed=3)
