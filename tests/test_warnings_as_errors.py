"""Projects that turn warnings into errors (``-W error``, ini ``filterwarnings = error``): the
plugin's advice is shown in the "eval notices" section, never as a Python warning, so it cannot
abort the session; under pytest-xdist the workers' notices are printed once, by the controller."""

from __future__ import annotations

import sys
import threading
from types import SimpleNamespace
from typing import cast

import pytest
from conftest import Project, items

STRICT = {
    # -W error; no ini filter, which pytest would apply after -W and which would then win.
    "W-error": ("[pytest]\n", ("-W", "error")),
    "ini-error": ("[pytest]\nfilterwarnings = error\n", ()),
}
XDIST = {"one-process": (), "xdist": ("-p", "xdist", "-n", "2")}


@pytest.fixture(params=list(STRICT))
def strict(request: pytest.FixtureRequest, project: Project) -> tuple[str, ...]:
    ini, args = STRICT[request.param]
    project.pytester.makeini(ini)
    return args


@pytest.fixture(params=list(XDIST))
def processes(request: pytest.FixtureRequest) -> tuple[str, ...]:
    return XDIST[request.param]


def assert_one_notice(result: pytest.RunResult, text: str) -> None:
    output = result.stdout.str()
    assert "INTERNALERROR" not in output, output
    assert "Warning" not in output, output
    result.stdout.fnmatch_lines(["*= eval notices =*", text])
    assert sum(1 for line in output.splitlines() if line.startswith(text.split("*")[0])) == 1, output


def test_soft_mode_without_a_gate(
    project: Project, strict: tuple[str, ...], processes: tuple[str, ...]
) -> None:
    project.dataset(items("a", "b", "c"))
    project.eval_test(behaviour="if item['id'] == 'b': return 'wrong'")
    result = project.run("--eval", "--eval-soft", *strict, *processes)
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=2)  # and b soft-failed
    assert_one_notice(
        result, "soft mode with no gate: scores can never fail this session (test_eval.py::test_qa *"
    )


def test_resume_after_a_dataset_edit(
    project: Project, strict: tuple[str, ...], processes: tuple[str, ...]
) -> None:
    project.dataset(items("a", "b", "c"))
    project.eval_test()
    project.fail("b")
    project.run("--eval", *strict, *processes).assert_outcomes(passed=2, failed=1)
    project.repair()
    project.dataset(items("a", "b", "c", "d"))
    result = project.run("--eval-resume=last", *strict, *processes)
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=1)
    assert_one_notice(
        result, "test_eval.py::test_qa (test_eval.py:*): the test selects differently from experiment *"
    )


def test_a_function_scoped_fixture_under_threads(
    project: Project, strict: tuple[str, ...], processes: tuple[str, ...]
) -> None:
    project.dataset(items("a", "b", "c", "d"))
    project.write(
        "test_fixture.py",
        """
        import pytest

        @pytest.fixture
        def client():
            return object()

        @pytest.mark.eval(dataset="data.jsonl")
        def test_fixture(eval_item, client):
            return eval_item["id"]
        """,
    )
    result = project.run("--eval", "--eval-threads=4", *strict, *processes)
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=4)
    assert_one_notice(
        result, "test_fixture.py::test_fixture (test_fixture.py:*) uses the function-scoped fixture 'client'*"
    )


def test_a_test_returning_none(project: Project, strict: tuple[str, ...], processes: tuple[str, ...]) -> None:
    project.dataset(items("a", "b", "c"))
    project.write(
        "test_none.py",
        """
        import pytest

        @pytest.mark.eval(dataset="data.jsonl")
        def test_none(eval_item):
            pass
        """,
    )
    result = project.run("--eval", *strict, *processes)
    assert result.ret == pytest.ExitCode.OK  # no metric, nothing to fail: only the hint
    result.assert_outcomes(passed=3)
    assert_one_notice(result, "test_none.py::test_none (test_none.py:*): the test function returned None*")


def test_notices_given_by_many_threads_at_once_are_each_kept_once() -> None:
    # Trials in pool threads (--eval-threads) give notices at the same moment, the first of them
    # while the list is created. Thread switches as often as the interpreter allows, over rounds
    # that each start with a fresh session's stash, make an unguarded list lose some.
    from pytest_opik_eval.notices import notice, notices_of

    threads, rounds = 8, 300
    expected = sorted({f"shared {n}" for n in range(5)} | {f"thread {t}" for t in range(threads)})
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for _ in range(rounds):
            config = cast(pytest.Config, SimpleNamespace(stash=pytest.Stash()))
            start = threading.Barrier(threads)

            def give(t: int, config: pytest.Config = config, start: threading.Barrier = start) -> None:
                start.wait()
                for n in range(5):
                    notice(config, f"shared {n}")
                    notice(config, f"thread {t}")

            pool = [threading.Thread(target=give, args=(t,)) for t in range(threads)]
            for thread in pool:
                thread.start()
            for thread in pool:
                thread.join()
            assert sorted(notices_of(config)) == expected
    finally:
        sys.setswitchinterval(switch)


def test_a_filter_rule_naming_eval_warning_still_loads(project: Project) -> None:
    project.dataset(items("a"))
    project.eval_test()
    project.pytester.makeini(
        "[pytest]\nfilterwarnings =\n    error\n    ignore::pytest_opik_eval.exceptions.EvalWarning\n"
    )
    result = project.run("--eval", "-W", "ignore::pytest_opik_eval.exceptions.EvalWarning")
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=1)
