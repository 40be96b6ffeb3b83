"""Side-by-side measurements of the plugin's cost, printed as one ratio per figure.

    python benchmarks/bench.py [--quick] [--figure NAME ...]

Every comparison runs in pairs: our side and its baseline one after the other (which goes first
alternates), in the same temporary folder, after one warm-up run of each. Each pair gives a
ratio, and a figure is the median of its pairs' ratios, printed with their spread (the middle
half and the whole range): a noisy machine (other processes on its 2 cores) hits both runs of a
pair alike, and the median is not moved by the pairs it hit unevenly. The figures:
1. overhead: N trivial trials with one Equals metric under --eval, against a plain
   parametrized test with the same body and assertion over the same items (target <= 1.25);
2. latency-bound throughput: 400 trials whose task sleeps 50 ms with --eval-threads=20, against
   the ideal 400 x 50 ms / 20 plus the start-up of the same session (--eval --co) (target <= 1.10);
3. resume at scale: an experiment of 100,000 planned trials with 10 pending, --eval-resume,
   against --eval --co of the same suite (target <= 1.15);
4. inert cost: 200 plain tests with the plugin against -p no:opik_eval (target <= 1.02);
5. -n 2 against -n 0 on the latency-bound case;
6. overhead per span recorded: N trials whose task makes S spans, through the manual API
   (``trace.span``) and through ``@opik.track``, against the same app making none (the same
   functions called, undecorated, outside any span): the difference of processor time per span
   (target <= 50 us). For ``@opik.track`` that includes the SDK's own cost of making the span;
7. replay: N trials whose task makes one call to a fake LLM server (answering after 20 ms),
   replayed strictly (--eval-record=none) against the same app answered in the process by
   httpx's MockTransport, and
   recording (--eval-record=all) against the same live run unrecorded: the cost per call
   (target <= 1 ms), from suites of N items and of 1, and the cost once per session; then the
   strict replay against the live run it replaces;
8. rescore: --eval-rescore of N trials whose task took 50 ms, against a fresh --eval run of an
   instant task with the same metric (target <= 1.10): rescoring costs no task time.
9. batch: what --eval-batch costs the client, in this process rather than in pytest runs: per
   request deferred to a batch, against the same call replayed and sent live (target < 1 ms a
   request), and per round, the submission and collection of 200 and 10,000 answers
   (``benchmarks/batch.py``, which also writes them to benchmarks/results/batch.json).
10. trajectory: what reading a trial's tool calls from its spans costs, per span by kind of span
   (target < 5 us), in this process (``benchmarks/trajectory.py``, which also writes them to
   benchmarks/results/trajectory.json).
11. conversation: what the conversation driver (``eval_conversation``) costs a turn, in this
   process, against the same loop written by hand, inside a trial's trace (target < 50 us a
   turn; ``benchmarks/conversation.py``).
12. rescore spans: --eval-rescore of N trials whose task made S tool spans each, with a metric
   that does not read the calls (Equals), against the same rescore of an original that made no
   span (target <= 1.05: the spans are not read); then with a trajectory metric (StepCount),
   which reads them, against Equals: its cost per stored span, in processor time (the read
   itself, the store's indexed lookup and the spans' parsing, is about 9 us of it).

The runs write bytecode to a cache of their own (PYTHONPYCACHEPREFIX), as an installed package
has it: without it (PYTHONDONTWRITEBYTECODE) every run would compile the plugin's modules anew.
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

# The Opik SDK's own pytest plugin is left out (-p no:opik) unless --opik-plugin: it costs about
# 1 ms per test by itself, and imports the SDK in every session (see --opik-plugin).
PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:opik"]

PLAIN = """
import json, pathlib, pytest
ITEMS = [json.loads(line) for line in open(pathlib.Path(__file__).parent / "data.jsonl")]

@pytest.mark.parametrize("item", ITEMS, ids=[i["id"] for i in ITEMS])
def test_plain(item):
    assert item["input"]["text"].lower() == item["expected_output"].lower()
"""

EVAL = """
import pytest
from pytest_opik_eval.metrics import Equals

@pytest.mark.eval(
    dataset="data.jsonl", metrics=[Equals()], scoring_key_mapping={"reference": "expected_output"}
)
def test_eval(eval_item):
    return eval_item["input"]["text"]
"""

SLOW = """
import time
import pytest

@pytest.mark.eval(dataset="data.jsonl")
def test_slow(eval_item):
    time.sleep(0.05)
    return eval_item["input"]["text"]
"""

# The app of figure 6: SPANS steps per trial, each in a span of its own ("spans") or not ("none").
SPANS_APP = """
import pytest
{imports}

{decorate}
def step(i):
    {body}

@pytest.mark.eval(dataset="data.jsonl")
def test_{name}(eval_item):
    for i in range({spans}):
        step(i)
    return eval_item["input"]["text"]
"""
SPANS_KINDS = {
    "manual API": (
        "from pytest_opik_eval.tracing import trace",
        "",
        'with trace.span("step", input={"i": i}) as span:\n        span.output = i',
    ),
    "@opik.track": ("import opik", "@opik.track", "return i"),
}

# The app of figure 7: one call to the fake LLM server per trial ("app"), or the same call
# answered in the process by httpx's MockTransport ("local"): what httpx itself costs a call is
# on both sides, so their difference is the recorder's.
LLM_APP = """
import os
import httpx
import pytest

CLIENT = httpx.Client(base_url=os.environ["BENCH_LLM_URL"])

@pytest.mark.eval(dataset="data.jsonl")
def test_app(eval_item):
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": eval_item["input"]["text"]}]}
    return CLIENT.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]["content"]
"""

LLM_LOCAL = """
import json
import httpx
import pytest

def answer(request):
    text = json.loads(request.content)["messages"][0]["content"]
    choice = {"index": 0, "message": {"role": "assistant", "content": "answer to " + text}}
    usage = {"prompt_tokens": 12, "completion_tokens": 4, "total_tokens": 16}
    return httpx.Response(200, json={"model": "gpt-4o-mini", "choices": [choice], "usage": usage})

CLIENT = httpx.Client(base_url="http://llm.invalid", transport=httpx.MockTransport(answer))

@pytest.mark.eval(dataset="data.jsonl")
def test_local(eval_item):
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": eval_item["input"]["text"]}]}
    return CLIENT.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]["content"]
"""

LLM_DELAY = 0.02

SLOW_TRIALS, SLOW_SECONDS, THREADS = 400, 0.05, 20
IDEAL = SLOW_TRIALS * SLOW_SECONDS / THREADS


class Timing(NamedTuple):
    wall: float
    cpu: float


# The app of figure 12: each trial runs {spans} tools, each in a tool span of the manual API.
TOOLS_APP = """
import pytest
from pytest_opik_eval.tracing import trace

@pytest.mark.eval(dataset="data.jsonl", scoring_key_mapping={{"reference": "expected_output"}})
def test_agent(eval_item):
    for i in range({spans}):
        with trace.span("search", type="tool", input={{"q": f"query {{i}}"}}) as span:
            span.output = {{"hits": [i, i + 1]}}
    return eval_item["input"]["text"]
"""
# Its trajectory metric, named with --eval-metric=rescore_metrics:steps.
STEPS = """
from pytest_opik_eval.metrics import StepCount


def steps():
    return StepCount(max_tool_calls=1000)
"""


class Runner:
    """Runs pytest in a folder, with a bytecode cache shared by all the runs of the script."""

    def __init__(self, cache: Path) -> None:
        self.env = {**os.environ, "PYTHONPYCACHEPREFIX": str(cache)}
        self.env.pop("PYTHONDONTWRITEBYTECODE", None)

    def wall(self, folder: Path, *args: str) -> Timing:
        """The run's wall time, and the processor time it used (user and system)."""
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run(
            [*PYTEST, *args], cwd=folder, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        elapsed = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0:  # a figure of a broken run would mean nothing: say so
            print(f"pytest {' '.join(args)} exited with {done.returncode}:", done.stderr.decode()[-2000:])
        cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
        return Timing(elapsed, cpu)

    def pairs(
        self,
        folder: Path,
        ours: list[str],
        baseline: list[str],
        count: int,
        prepare: Callable[[], None] = lambda: None,
    ) -> list[tuple[Timing, Timing]]:
        """``count`` pairs of wall times (ours, baseline), after a warm-up run of each;
        ``prepare`` is called, untimed, before each run of ours."""

        def run_ours() -> Timing:
            prepare()
            return self.wall(folder, *ours)

        run_ours()
        self.wall(folder, *baseline)
        measured = []
        for index in range(count):
            # Which side goes first alternates: a drift in the machine's load favours neither.
            if index % 2:
                b = self.wall(folder, *baseline)
                a = run_ours()
            else:
                a = run_ours()
                b = self.wall(folder, *baseline)
            measured.append((a, b))
        return measured


def report(
    name: str, pairs: list[tuple[Timing, Timing]], target: float | None, baseline_extra: float = 0.0
) -> None:
    """The median of the pairs' ratios of wall times (ours / (baseline + baseline_extra)), and
    their spread; then the same ratio of processor times, which the machine's load moves less
    (not for the latency-bound figure, whose runs mostly wait)."""
    ratios = sorted(a.wall / (b.wall + baseline_extra) for a, b in pairs)
    median = statistics.median(ratios)
    if len(ratios) >= 4:
        q1, _, q3 = statistics.quantiles(ratios, n=4)
        middle = f"middle half {q1:.3f}-{q3:.3f}, "
    else:
        middle = ""
    ours = statistics.median(a.wall for a, _ in pairs)
    baseline = statistics.median(b.wall for _, b in pairs) + baseline_extra
    cpu = (
        ""
        if baseline_extra
        else f"; processor time {statistics.median(a.cpu / b.cpu for a, b in pairs):.3f}x"
    )
    verdict = (
        "" if target is None else f"  (target <= {target:.2f}: {'met' if median <= target else 'NOT met'})"
    )
    print(
        f"{name}: {median:.3f}x, median of {len(ratios)} pairs ({middle}all "
        f"{ratios[0]:.3f}-{ratios[-1]:.3f}); medians {ours:.2f} s vs {baseline:.2f} s{cpu}{verdict}",
        flush=True,
    )


def write_items(path: Path, n: int) -> None:
    path.write_text(
        "".join(
            json.dumps({"id": f"i{i}", "input": {"text": f"t{i}"}, "expected_output": f"t{i}"}) + "\n"
            for i in range(n)
        )
    )


def overhead(run: Runner, folder: Path, n: int, count: int) -> None:
    write_items(folder / "data.jsonl", n)
    (folder / "test_plain.py").write_text(PLAIN)
    (folder / "test_eval.py").write_text(EVAL)
    pairs = run.pairs(folder, ["--eval", "test_eval.py"], ["test_plain.py"], count)
    report(f"1. overhead ({n} trivial trials vs a plain parametrized test)", pairs, 1.25)


def latency(run: Runner, folder: Path, count: int, distributed_count: int) -> None:
    write_items(folder / "data.jsonl", SLOW_TRIALS)
    (folder / "test_slow.py").write_text(SLOW)
    threaded = ["--eval", f"--eval-threads={THREADS}", "test_slow.py"]
    pairs = run.pairs(folder, threaded, ["--eval", "--co", "test_slow.py"], count)
    report(
        f"2. latency-bound ({SLOW_TRIALS} x {SLOW_SECONDS * 1000:.0f} ms, --eval-threads={THREADS},"
        " vs ideal + start-up)",
        pairs,
        1.10,
        baseline_extra=IDEAL,
    )
    if distributed_count:
        pairs = run.pairs(folder, [*threaded, "-n", "2"], threaded, distributed_count)
        report(f"5. -n 2 vs -n 0 (latency-bound, --eval-threads={THREADS})", pairs, None)


def resume_at_scale(run: Runner, folder: Path, n: int, count: int) -> None:
    from pytest_opik_eval.ids import node_id, uuid7_for
    from pytest_opik_eval.store.local import LocalStore
    from pytest_opik_eval.store.records import PlannedTrial

    write_items(folder / "data.jsonl", n)
    (folder / "test_eval.py").write_text(EVAL)
    store = folder / "big.db"
    # One real session plans the experiment with only 10 trials selected; then the store's own
    # interface records the rest of the N as planned and completed.
    subprocess.run(
        [*PYTEST, "--eval", f"--eval-store={store}", "test_eval.py", "-k", "i1-t0 or i2-t0"],
        cwd=folder,
        env=run.env,
        stdout=subprocess.DEVNULL,
        check=False,
    )
    local = LocalStore(store)
    stored_run, [experiment] = local.find("last")
    planned = [
        PlannedTrial(
            uuid7_for(experiment.id, f"i{i}-t0"),
            experiment.id,
            f"i{i}",
            0,
            node_id(experiment.test, "", f"i{i}", 0),
        )
        for i in range(n)
    ]
    items = [{"id": f"i{i}", "input": {"text": f"t{i}"}, "expected_output": f"t{i}"} for i in range(n)]
    local.create_run(stored_run, [experiment.model_copy(update={"items": items})], planned)
    for trial in planned[10:]:
        local.complete_attempt(local.start_attempt(trial.id, "bench"))
    local.close()
    pristine = folder / "pristine.db"
    shutil.copyfile(store, pristine)

    def restore() -> None:
        # Every resume finds the same 10 trials pending: the store as it was before the first.
        for path in (store, store.with_name("big.db-wal"), store.with_name("big.db-shm")):
            path.unlink(missing_ok=True)
        shutil.rmtree(store.with_name("big.db.journals"), ignore_errors=True)
        shutil.copyfile(pristine, store)

    pairs = run.pairs(
        folder,
        [f"--eval-resume={experiment.id}", f"--eval-store={store}", "test_eval.py"],
        ["--eval", "--co", f"--eval-store={store}", "test_eval.py"],
        count,
        prepare=restore,
    )
    report(f"3. resume at scale ({n} planned, 10 pending, vs --eval --co)", pairs, 1.15)


def inert(run: Runner, folder: Path, count: int) -> None:
    (folder / "test_inert.py").write_text(
        "import pytest\n\n@pytest.mark.parametrize('i', range(200))\ndef test_inert(i):\n    assert i >= 0\n"
    )
    pairs = run.pairs(folder, ["test_inert.py"], ["-p", "no:opik_eval", "test_inert.py"], count)
    report("4. inert cost (200 plain tests, plugin vs -p no:opik_eval)", pairs, 1.02)


def per_span(run: Runner, folder: Path, n: int, spans: int, count: int) -> None:
    write_items(folder / "data.jsonl", n)
    for kind, (imports, decorate, body) in SPANS_KINDS.items():
        (folder / "test_spans.py").write_text(
            SPANS_APP.format(imports=imports, decorate=decorate, body=body, name="spans", spans=spans)
        )
        # The same calls, neither in a span nor decorated (the SDK imported all the same).
        imports_only = imports if "opik" in imports else ""
        (folder / "test_none.py").write_text(
            SPANS_APP.format(imports=imports_only, decorate="", body="return i", name="none", spans=spans)
        )
        pairs = run.pairs(folder, ["--eval", "test_spans.py"], ["--eval", "test_none.py"], count)
        made = n * spans
        cpu = sorted((a.cpu - b.cpu) / made * 1e6 for a, b in pairs)
        wall = sorted((a.wall - b.wall) / made * 1e6 for a, b in pairs)
        median = statistics.median(cpu)
        print(
            f"6. overhead per span ({kind}, {n} trials x {spans} spans): {median:.1f} us of processor "
            f"time, median of {len(pairs)} pairs (all {cpu[0]:.1f}-{cpu[-1]:.1f}); wall "
            f"{statistics.median(wall):.1f} us (target <= 50 us: {'met' if median <= 50 else 'NOT met'})",
            flush=True,
        )


class _FakeLLM(http.server.BaseHTTPRequestHandler):
    """An OpenAI-style chat completion, after LLM_DELAY."""

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        time.sleep(LLM_DELAY)
        text = request["messages"][0]["content"]
        body = json.dumps(
            {
                "model": request["model"],
                "choices": [{"index": 0, "message": {"role": "assistant", "content": f"answer to {text}"}}],
                "usage": {"prompt_tokens": 12, "completion_tokens": 4, "total_tokens": 16},
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def replay(run: Runner, folder: Path, n: int, count: int) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _FakeLLM)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    run.env["BENCH_LLM_URL"] = f"http://127.0.0.1:{server.server_address[1]}"
    live, local = ["--eval", "test_app.py"], ["--eval", "test_local.py"]
    recording = ["--eval", "--eval-record=all", "test_app.py"]
    strict = ["--eval", "--eval-record=none", "test_app.py"]
    try:
        # The same suites with N items and with one: their difference is what N - 1 calls cost,
        # apart from what a session with recording on costs once (vcrpy and the libraries it
        # patches imported, the files read and written).
        suites = {size: folder / f"items{size}" for size in (n, 1)}
        for size, suite in suites.items():
            suite.mkdir()
            write_items(suite / "data.jsonl", size)
            (suite / "test_app.py").write_text(LLM_APP)
            (suite / "test_local.py").write_text(LLM_LOCAL)
            run.wall(suite, *recording)  # the recordings that the strict replays read
        for name, ours, baseline in (
            ("strict replay vs httpx's MockTransport", strict, local),
            ("recording vs the same live run", recording, live),
        ):
            differences = {
                size: statistics.median(a.wall - b.wall for a, b in run.pairs(suite, ours, baseline, count))
                for size, suite in suites.items()
            }
            per_call = (differences[n] - differences[1]) / (n - 1) * 1000
            print(
                f"7. {name}: {per_call:.2f} ms per call (medians of {count} pairs with {n} calls and "
                f"with 1), and {differences[1] * 1000:.0f} ms once per session "
                f"(target <= 1 ms per call: {'met' if per_call <= 1 else 'NOT met'})",
                flush=True,
            )
        report(
            f"7. strict replay vs the live run ({n} calls of {LLM_DELAY * 1000:.0f} ms)",
            run.pairs(suites[n], strict, live, count),
            None,
        )
    finally:
        server.shutdown()
        del run.env["BENCH_LLM_URL"]


def rescore(run: Runner, folder: Path, n: int, count: int) -> None:
    from pytest_opik_eval.store.local import LocalStore

    write_items(folder / "data.jsonl", n)
    (folder / "test_slow.py").write_text(SLOW.replace("test_slow", "test_task"))
    (folder / "test_instant.py").write_text(
        SLOW.replace("time.sleep(0.05)", "pass").replace("test_slow", "test_task")
    )
    store = folder / "rescore.db"
    run.wall(folder, "--eval", f"--eval-store={store}", "test_slow.py")
    local = LocalStore(store)
    original, _ = local.find("last")
    local.close()
    pairs = run.pairs(
        folder,
        [f"--eval-rescore={original.id}", f"--eval-store={store}", "test_slow.py"],
        ["--eval", f"--eval-store={store}", "test_instant.py"],
        count,
    )
    report(
        f"8. rescore ({n} trials of {SLOW_SECONDS * 1000:.0f} ms, vs a run of an instant task)", pairs, 1.10
    )


def rescore_spans(run: Runner, folder: Path, n: int, spans: int, count: int) -> None:
    from pytest_opik_eval.store.local import LocalStore

    write_items(folder / "data.jsonl", n)
    (folder / "rescore_metrics.py").write_text(STEPS)
    store = folder / "rescore.db"
    originals = {}
    for name, made in (("traced", spans), ("untraced", 0)):
        (folder / f"test_{name}.py").write_text(TOOLS_APP.format(spans=made))
        run.wall(folder, "--eval", f"--eval-store={store}", f"test_{name}.py")
        local = LocalStore(store)
        originals[name] = local.find("last")[0].id
        local.close()

    def rescored(name: str, metric: str) -> list[str]:
        return [f"--eval-rescore={originals[name]}", f"--eval-store={store}", f"--eval-metric={metric}"]

    pairs = run.pairs(folder, rescored("traced", "Equals"), rescored("untraced", "Equals"), count)
    report(f"12. rescore spans ({n} trials, Equals: {spans} spans each vs none)", pairs, 1.05)
    pairs = run.pairs(
        folder, rescored("traced", "rescore_metrics:steps"), rescored("traced", "Equals"), count
    )
    report(f"12. rescore spans ({n} trials of {spans} spans, StepCount vs Equals)", pairs, None)
    per_span = statistics.median(a.cpu - b.cpu for a, b in pairs) / (n * spans) * 1e6
    print(
        f"    a trajectory metric in a rescore: {per_span:.1f} us of processor time a stored span "
        "(the spans read, their calls extracted, the metric's span holding them)",
        flush=True,
    )


def batch_figures(folder: Path, quick: bool) -> None:
    # Imported only for this figure: it imports the openai client and the tests' fake of its APIs.
    from batch import figures

    figures(folder, quick=quick)


def trajectory_figures(quick: bool) -> None:
    from trajectory import figures  # in this process: no pytest run to compare with

    print("10. trajectory: extracting tool calls, processor time (target < 5 us a span)")
    figures(quick)


def conversation_figure(quick: bool) -> None:
    # Imported only for this figure, as batch's.
    from conversation import main as conversation

    print("11. conversation: the driver's cost per turn")
    sys.argv = [sys.argv[0], *(["--quick"] if quick else [])]
    conversation()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="smaller sizes, few pairs: a smoke run")
    parser.add_argument(
        "--figure",
        action="append",
        choices=[
            "overhead",
            "latency",
            "resume",
            "inert",
            "spans",
            "replay",
            "rescore",
            "batch",
            "trajectory",
            "conversation",
            "rescore-spans",
        ],
        help="run only this figure (repeatable); latency includes -n 2",
    )
    parser.add_argument(
        "--opik-plugin",
        action="store_true",
        help="load the Opik SDK's own pytest plugin (which imports the SDK) in every run",
    )
    args = parser.parse_args()
    quick = args.quick
    if args.opik_plugin:
        del PYTEST[-2:]  # "-p", "no:opik"
    figures: dict[str, Callable[[Runner, Path], None]] = {
        # 15 pairs: one pair's ratio moves by 5% either way on a shared 2-core machine, and the
        # median of 7 moved between 1.20x and 1.28x from one run to the next.
        "overhead": lambda run, d: overhead(run, d, 500 if quick else 5000, 2 if quick else 15),
        "latency": lambda run, d: latency(run, d, 2 if quick else 9, 1 if quick else 5),
        "resume": lambda run, d: resume_at_scale(run, d, 2000 if quick else 100_000, 2 if quick else 7),
        "inert": lambda run, d: inert(run, d, 4 if quick else 31),
        "spans": lambda run, d: per_span(run, d, 200 if quick else 1000, 20, 2 if quick else 7),
        "replay": lambda run, d: replay(run, d, 50 if quick else 300, 2 if quick else 7),
        "rescore": lambda run, d: rescore(run, d, 50 if quick else 300, 2 if quick else 7),
        "batch": lambda run, d: batch_figures(d, quick),
        "trajectory": lambda run, d: trajectory_figures(quick),
        "conversation": lambda run, d: conversation_figure(quick),
        "rescore-spans": lambda run, d: rescore_spans(run, d, 200 if quick else 5000, 10, 2 if quick else 5),
    }
    with tempfile.TemporaryDirectory() as cache:
        run = Runner(Path(cache))
        for name, figure in figures.items():
            if args.figure and name not in args.figure:
                continue
            with tempfile.TemporaryDirectory() as tmp:
                figure(run, Path(tmp))


if __name__ == "__main__":
    main()
