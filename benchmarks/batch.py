"""What ``--eval-batch`` costs the client, measured through the package's own code against the
local fake of OpenAI's APIs that the tests use (``tests/fake_batches.py``).

    python benchmarks/batch.py [--quick] [--json FILE]

1. Per deferred request: the app's call through the official ``openai`` client (httpx), inside a
   trial's recording scope of a :class:`Recorder` in mode ``new_episodes`` with a
   :class:`Batcher`, deferred and answered by the batcher's 400; against the same call answered
   by a replayed recording (what a resumed or replayed trial already pays), and against the same
   call sent to the live fake with no recorder at all. Each run makes N calls, one trial scope
   each (as each trial of a session has its own); runs go in pairs, ours and the baseline one
   after the other (which goes first alternates), after a warm-up run of each, and a figure is
   the median of the pairs' differences per call, in wall time and in this thread's processor
   time (``time.thread_time``: the live fake answers in threads of its own, whose work is not the
   client's). Target: deferring costs under 1 ms a request more than a replayed call.
2. Per round: the submission of M deferred requests (``batch_submit.submit``: request lines,
   split, upload to the fake, batch created) and the collection of their M answers
   (``batch_collect.collect``: retrieve, download, each answer turned into a recording interaction
   and journaled; then ``http_recordings.fold``, which writes the recordings' files), for M = 200
   and 10,000, each repeated on a fresh run. The ledger's reading (``batch_ledger.load``), which a
   session does before each, is shown apart. Wall time includes the fake's own work (it parses
   the upload, checks each line, serves the files) in its threads; processor time is this
   thread's, the client's alone.

The fake is imported from tests/ (benchmarks/ has no fake of its own, and a copy would drift from
the one the tests keep true to the provider). The trials' traces (``trial_trace``) are left out:
they cost a call the same with or without batches. Without ``--quick``, the figures are written
to benchmarks/results/batch.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's package
sys.path.insert(0, str(ROOT / "tests"))  # the fake of OpenAI's APIs, as the tests run it

import openai  # noqa: E402
from fake_batches import FakeOpenAI  # noqa: E402

from pytest_opik_eval.option_values import Host  # noqa: E402
from pytest_opik_eval.run.batch_collect import collect  # noqa: E402
from pytest_opik_eval.run.batch_submit import submit  # noqa: E402
from pytest_opik_eval.run.batching import Batcher  # noqa: E402
from pytest_opik_eval.run.recording import Recorder, TrialKey  # noqa: E402
from pytest_opik_eval.store import batch_ledger  # noqa: E402
from pytest_opik_eval.store.http_recordings import Journal, fold  # noqa: E402

TEST = "test_app.py::test_qa"
MODEL = "gpt-4.1-mini"
RESULTS = Path(__file__).resolve().parent / "results" / "batch.json"


class Timing(NamedTuple):
    wall: float
    cpu: float  # this thread's processor time


@contextmanager
def timed(into: list[Timing]) -> Iterator[None]:
    wall, cpu = time.perf_counter(), time.thread_time()
    yield
    into.append(Timing(time.perf_counter() - wall, time.thread_time() - cpu))


class App:
    """The app's call, the recordings of the replayed side, and a recorder with a batcher."""

    def __init__(self, folder: Path, fake: FakeOpenAI, n: int) -> None:
        self.folder, self.fake, self.n = folder, fake, n
        # What batchable() needs: the key in an environment variable, read again by collect().
        os.environ["OPENAI_API_KEY"] = fake.api_key
        self.client = openai.OpenAI(base_url=fake.base_url, api_key=fake.api_key, max_retries=0)
        self.recordings = folder / "recordings"
        self.ledgers = folder / "batches"
        self.providers: dict[Host, str] = {("127.0.0.1", fake.port): "openai"}
        self.sessions = 0
        # The replayed side's recordings: N calls recorded live, as a first session would.
        self.recorder = Recorder(
            mode="new_episodes", folder=self.recordings, session_id="record", worker="main"
        )
        self.recorder.start()
        try:
            for i in range(n):
                self.call_in_trial(f"recorded{i}")
        finally:
            self.recorder.stop()
        fold(self.recordings)
        self.recorder = Recorder(
            mode="new_episodes", folder=self.recordings, session_id="bench", worker="main"
        )
        self.run_id = ""

    def ask(self, item: str) -> str | None:
        answer = self.client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": f"question {item}"}]
        )
        return answer.choices[0].message.content

    def call_in_trial(self, item: str) -> str | None:
        """One trial's call in its own recording scope; None when deferred (the app sees a 400)."""
        scope = self.recorder.scope(TrialKey(TEST, item, 0), f"attempt-{item}")
        with scope.entered():
            try:
                return self.ask(item)
            except openai.BadRequestError:
                return None

    def new_batcher(self) -> Batcher:
        """A batcher of a fresh run, as a first session's: an empty ledger and queue."""
        self.sessions += 1
        self.run_id = f"run{self.sessions}"
        batcher = Batcher(
            mode="on",
            run_id=self.run_id,
            ledger=batch_ledger.Ledger(),
            writer=batch_ledger.Writer(self.ledgers, self.run_id, "bench", "main"),
            providers=self.providers,
            notify=print,
        )
        self.recorder.batcher = batcher
        return batcher

    # -- the runs of figure 1, each N calls ------------------------------------------------------

    def deferred(self, run: int) -> Timing:
        batcher = self.new_batcher()
        times: list[Timing] = []
        with timed(times):
            answers = [self.call_in_trial(f"run{run}-{i}") for i in range(self.n)]
        batcher.writer.close()
        if any(answer is not None for answer in answers) or len(batcher.queue) != self.n:
            raise AssertionError(f"not every call was deferred: {len(batcher.queue)} queued of {self.n}")
        return times[0]

    def replayed(self, run: int) -> Timing:
        times: list[Timing] = []
        with timed(times):
            answers = [self.call_in_trial(f"recorded{i}") for i in range(self.n)]
        if answers != [f"answer to question recorded{i}" for i in range(self.n)]:
            raise AssertionError("a replayed call was not answered by its recording")
        return times[0]

    def live(self, run: int) -> Timing:
        """The same calls with no recorder: the recorder is stopped around the run (untimed)."""
        self.recorder.stop()
        times: list[Timing] = []
        try:
            with timed(times):
                answers = [self.ask(f"recorded{i}") for i in range(self.n)]
        finally:
            self.recorder.start()
        if answers[-1] != f"answer to question recorded{self.n - 1}":
            raise AssertionError("the live fake did not answer")
        return times[0]


def pairs(
    ours: Callable[[int], Timing], baseline: Callable[[int], Timing], count: int
) -> list[tuple[Timing, Timing]]:
    """``count`` pairs (ours, baseline) after a warm-up run of each; which goes first alternates."""
    ours(-1)
    baseline(-1)
    measured = []
    for index in range(count):
        if index % 2:
            b = baseline(index)
            a = ours(index)
        else:
            a = ours(index)
            b = baseline(index)
        measured.append((a, b))
    return measured


@dataclass
class PerRequest:
    """Figure 1 against one baseline: microseconds per request, medians over the pairs."""

    baseline: str
    requests: int
    pairs: int
    deferred_us: float
    baseline_us: float
    extra_us: float  # the median of the pairs' differences (wall)
    extra_us_range: tuple[float, float]
    deferred_cpu_us: float
    baseline_cpu_us: float
    extra_cpu_us: float


def per_request(app: App, count: int) -> list[PerRequest]:
    app.new_batcher()  # the replayed side's, as with --eval-batch: a recording answers first
    app.recorder.start()
    figures = []
    try:
        for name, baseline in (("replayed recording", app.replayed), ("live fake, no recorder", app.live)):
            measured = pairs(app.deferred, baseline, count)
            per = 1e6 / app.n
            wall = sorted((a.wall - b.wall) * per for a, b in measured)
            figure = PerRequest(
                baseline=name,
                requests=app.n,
                pairs=count,
                deferred_us=statistics.median(a.wall for a, _ in measured) * per,
                baseline_us=statistics.median(b.wall for _, b in measured) * per,
                extra_us=statistics.median(wall),
                extra_us_range=(wall[0], wall[-1]),
                deferred_cpu_us=statistics.median(a.cpu for a, _ in measured) * per,
                baseline_cpu_us=statistics.median(b.cpu for _, b in measured) * per,
                extra_cpu_us=statistics.median((a.cpu - b.cpu) * per for a, b in measured),
            )
            figures.append(figure)
            verdict = ""
            if name.startswith("replayed"):
                verdict = f" (target < 1000 us: {'met' if figure.extra_us < 1000 else 'NOT met'})"
            print(
                f"batch, deferred vs {name}, {app.n} requests: {figure.extra_us:+.0f} us a request, "
                f"median of {count} pairs (all {wall[0]:+.0f} to {wall[-1]:+.0f}); "
                f"medians {figure.deferred_us:.0f} vs {figure.baseline_us:.0f} us; "
                f"processor time {figure.extra_cpu_us:+.0f} us "
                f"({figure.deferred_cpu_us:.0f} vs {figure.baseline_cpu_us:.0f}){verdict}",
                flush=True,
            )
    finally:
        app.recorder.stop()
    return figures


@dataclass
class Step:
    """A step of figure 2: seconds, medians over the repeats, and microseconds per answer."""

    seconds: float
    cpu_seconds: float
    us_per_answer: float
    cpu_us_per_answer: float


def step(times: list[Timing], answers: int) -> Step:
    wall, cpu = statistics.median(t.wall for t in times), statistics.median(t.cpu for t in times)
    return Step(wall, cpu, wall / answers * 1e6, cpu / answers * 1e6)


@dataclass
class PerRound:
    answers: int
    repeats: int
    ledger_read: Step  # the resume's, before the collection
    submission: Step
    collection: Step  # collect(), the answers journaled
    fold: Step  # the journal folded into the recordings' files
    collection_and_fold: Step


def per_round(folder: Path, fake: FakeOpenAI, answers: int, repeats: int) -> PerRound:
    loads: list[Timing] = []
    submissions: list[Timing] = []
    collections: list[Timing] = []
    folds: list[Timing] = []
    both: list[Timing] = []
    for repeat in range(repeats):
        # A fresh first session: M trials whose one call each is deferred (untimed).
        app = App(folder / f"round{answers}-{repeat}", fake, 0)
        app.recorder.start()
        batcher = app.new_batcher()
        try:
            for i in range(answers):
                app.call_in_trial(f"item{i}")
        finally:
            app.recorder.stop()
            batcher.writer.close()
        queue = list(batcher.queue.values())
        ledger = batch_ledger.load(app.ledgers, app.run_id)
        writer = batch_ledger.Writer(app.ledgers, app.run_id, "first", "submit")
        with timed(submissions):
            outcomes = submit(queue, ledger, writer, app.run_id)
        writer.close()
        if [o.error for o in outcomes if o.error] or sum(o.requests for o in outcomes) != answers:
            raise AssertionError(f"the submission failed: {outcomes}")
        fake.finish()
        # The resume: the ledger read, the batches collected into the journal, the journal folded.
        with timed(loads):
            ledger = batch_ledger.load(app.ledgers, app.run_id)
        writer = batch_ledger.Writer(app.ledgers, app.run_id, "resume", "collect")
        journal = Journal(app.recordings, "resume", "batch")
        with timed(collections):
            done = collect(ledger, writer, journal)
        writer.close()
        journal.close()
        with timed(folds):
            folded = fold(app.recordings)
        both.append(Timing(collections[-1].wall + folds[-1].wall, collections[-1].cpu + folds[-1].cpu))
        if done.answers != answers or done.failed or folded.unsaved or folded.set_aside:
            raise AssertionError(f"the collection lost answers: {done}, {folded}")
    figure = PerRound(
        answers,
        repeats,
        step(loads, answers),
        step(submissions, answers),
        step(collections, answers),
        step(folds, answers),
        step(both, answers),
    )
    for name, s in (
        ("submission", figure.submission),
        ("collection", figure.collection),
        ("fold", figure.fold),
        ("collection and fold", figure.collection_and_fold),
        ("ledger read (resume)", figure.ledger_read),
    ):
        print(
            f"batch, {name}, {answers} answers: {s.seconds:.3f} s, {s.us_per_answer:.0f} us an answer "
            f"(processor time of the client: {s.cpu_seconds:.3f} s, {s.cpu_us_per_answer:.0f} us), "
            f"median of {repeats}",
            flush=True,
        )
    return figure


def figures(folder: Path, *, quick: bool) -> dict[str, Any]:
    """Both figures (the sizes of a smoke run with ``quick``), as written to the results."""
    fake = FakeOpenAI()
    try:
        found: dict[str, Any] = {"per_request": [], "per_round": []}
        for n in (100,) if quick else (1000, 10_000):
            app = App(folder / f"requests{n}", fake, n)
            found["per_request"] += [
                asdict(f) for f in per_request(app, 2 if quick else (7 if n <= 1000 else 3))
            ]
        for answers, repeats in ((20, 1), (200, 2)) if quick else ((200, 7), (10_000, 3)):
            found["per_round"].append(asdict(per_round(folder, fake, answers, repeats)))
        return found
    finally:
        fake.close()


def _rounded(value: Any) -> Any:
    """Four significant digits: the rest is noise."""
    if isinstance(value, float):
        return float(f"{value:.4g}")
    if isinstance(value, dict):
        return {key: _rounded(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_rounded(item) for item in value]
    return value


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="small sizes, few pairs: a smoke run")
    parser.add_argument(
        "--json", type=Path, help=f"write the figures here (default without --quick: {RESULTS})"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        found = figures(Path(tmp), quick=args.quick)
    target = args.json or (None if args.quick else RESULTS)
    if target is not None:
        machine = {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count()}
        target.write_text(
            json.dumps({"machine": machine, "openai": openai.__version__, **_rounded(found)}, indent=1) + "\n"
        )


if __name__ == "__main__":
    main()
