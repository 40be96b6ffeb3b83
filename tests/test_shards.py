"""CI shards: several sessions join one run by name, each runs a stable share, then a fan-in."""

from __future__ import annotations

import pytest
from conftest import Project, items
from opik_server import OpikTestServer

from pytest_opik_eval.cli import main as opik_eval

LABELS = [f"q{i:02}" for i in range(30)]


def run_shard(project: Project, k: int, *args: str) -> pytest.RunResult:
    return project.run("--eval", "--eval-run-id=ci-1234", f"--eval-shard={k}/3", *args)


def test_shards_split_the_trials_stably_and_cover_them_all(project: Project) -> None:
    project.dataset(items(*LABELS))
    project.eval_test(behaviour="if item['id'] == 'q07': return 'wrong'")
    shares = []
    for k in (1, 2, 3):
        result = run_shard(project, k, f"--eval-store=shard{k}.db", "-v")
        ran = sorted(
            {
                line.split("[")[1].split("-t0]")[0]
                for line in result.outlines
                if line.startswith("test_eval.py::test_qa[")
            }
        )
        shares.append(ran)
        # Each shard's summary covers its share of the planned experiment.
        result.stdout.fnmatch_lines([f"  trials: {len(ran)} planned, {len(ran)} completed *, 0 pending"])
    assert sorted(sum(shares, [])) == LABELS, "the shares are disjoint and cover every trial"
    assert all(5 <= len(share) <= 15 for share in shares), shares
    again = run_shard(project, 2, "--eval-store=again.db", "-v")
    assert sum(1 for line in again.outlines if line.startswith("test_eval.py::test_qa[")) == len(shares[1]), (
        "stable"
    )

    # Fan-in: merge the shards' stores, then gate the whole run.
    merged = str(project.path / "merged.db")
    assert (
        opik_eval(["--store", merged, "merge", *(str(project.path / f"shard{k}.db") for k in (1, 2, 3))]) == 0
    )
    assert (
        opik_eval(
            ["--store", merged, "gate", "ci-1234", "--eval-soft", "--eval-fail-under=equals_metric=0.9"]
        )
        == 0
    )
    assert (
        opik_eval(
            ["--store", merged, "gate", "ci-1234", "--eval-soft", "--eval-fail-under=equals_metric=0.99"]
        )
        == 1
    )
    assert opik_eval(["--store", merged, "gate", "ci-1234"]) == 1  # hard mode: q07 failed


def test_a_missing_shard_fails_the_fan_in_gate(project: Project, capsys: pytest.CaptureFixture[str]) -> None:
    project.dataset(items(*LABELS))
    project.eval_test()
    for k in (1, 2):
        run_shard(project, k, f"--eval-store=shard{k}.db")
    merged = str(project.path / "merged.db")
    opik_eval(["--store", merged, "merge", str(project.path / "shard1.db"), str(project.path / "shard2.db")])
    capsys.readouterr()
    assert opik_eval(["--store", merged, "gate", "ci-1234", "--eval-fail-under=equals_metric=0.9"]) == 1
    out = capsys.readouterr().out
    assert "NOT MET: test_qa: fail_under equals_metric: mean 1.000 >= 0.9; " in out
    assert "pending" in out
    assert "eval gate: FAILED: test_qa" in out


def test_a_killed_shard_hands_over_what_it_recorded(project: Project) -> None:
    project.dataset(items(*LABELS))
    project.eval_test(
        behaviour="if item['id'] == 'q20': os.kill(os.getpid(), signal.SIGKILL)",
        imports="import os\nimport signal",
    )
    # q20 falls in shard 1's share; the job is killed there, and its files travel as the
    # README's artifact step sends them (shard1.db*) to the fan-in machine's folder.
    killed = project.pytester.runpytest_subprocess(
        "--eval", "--eval-run-id=ci-1234", "--eval-shard=1/3", "--eval-store=shard1.db"
    )
    assert killed.ret == -9
    fan_in = project.path / "fan-in"
    fan_in.mkdir()
    for path in project.path.glob("shard1.db*"):
        path.rename(fan_in / path.name)
    ran = [line.split("#")[0] for line in project.calls()]
    assert ran[-1] == "q20"
    assert len(ran) > 1

    merged = str(project.path / "merged.db")
    assert opik_eval(["--store", merged, "merge", str(fan_in / "shard1.db")]) == 0
    trials = project.trials(store_path=project.path / "merged.db")
    assert len(trials) == len(LABELS)  # the whole experiment was planned
    completed = {t.dataset_item_id for t in trials if t.status == "completed"}
    assert completed == set(ran[:-1])


def test_shards_write_one_experiment_on_the_opik_server(project: Project, opik: OpikTestServer) -> None:
    project.dataset(items(*LABELS))
    project.eval_test()
    for k in (1, 2, 3):
        # Each shard is another machine: its own spool.
        assert run_shard(project, k, f"--eval-store=machine{k}/spool.db").ret == 0
    assert len(opik.experiments) == 1
    [experiment_id] = opik.experiments
    links = [link for link in opik.experiment_items if link["experiment_id"] == experiment_id]
    assert len(links) == 30
    dataset = opik.dataset_by_name("data")
    assert dataset is not None
    assert len(dataset["items"]) == 30, "the shards' uploads did not duplicate items"
    # The fan-in gate reads the experiment from the server.
    fan_in = ["--backend", "opik", "--store", str(project.path / "fan-in.db"), "gate", experiment_id]
    assert opik_eval([*fan_in, "--eval-fail-under=equals_metric=1.0"]) == 0
