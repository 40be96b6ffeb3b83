"""Strict replay of streamed answers on threads, this checkout's package against another
revision's: what the recorder's lock costs trials that put their streamed answers together.

    python benchmarks/replay_threads.py [--quick] [--before REV]

A suite of N items whose task makes C streamed chat completions (each answer K server-sent
chunks, the last with its usage) through httpx, scored by ``StepCount`` (which reads the
trial's LLM calls, so each replayed answer becomes an LLM span: --eval-llm-spans=auto), is
recorded once against a local fake (``--eval-record=all``), then replayed strictly
(``--eval-record=none``) with ``--eval-threads=T``: in pairs, this checkout's package and the
package of ``--before`` (default ``HEAD~1``, exported with ``git archive``), which goes first
alternating, after a warm-up run of each. A figure is the median of the pairs' ratios of wall
times (ours / before), with their spread, then the same for processor time. Nothing is written
to benchmarks/results: the figure compares two revisions, not the package against a baseline.
Last, in this process, what putting one such answer together costs: what a replayed call held
the recorder's lock for while it did so.
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import timeit
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parents[1]
PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:opik"]

APP = """
import os
import httpx
import pytest
from pytest_opik_eval.metrics import StepCount

CALLS = {calls}


def ask(client, text):
    body = {{"model": "gpt-4o-mini", "messages": [{{"role": "user", "content": text}}], "stream": True}}
    with client.stream("POST", "/v1/chat/completions", json=body) as answer:
        return answer.read()


@pytest.mark.eval(dataset="data.jsonl", metrics=[StepCount(max_llm_calls=CALLS)])
def test_app(eval_item):
    with httpx.Client(base_url=os.environ["BENCH_LLM_URL"]) as client:
        return [len(ask(client, f"{{eval_item['input']}} {{n}}")) for n in range(CALLS)]
"""


class _Streamer(http.server.BaseHTTPRequestHandler):
    """An OpenAI-style streamed chat completion of CHUNKS chunks, the last with its usage."""

    chunks = 300

    @classmethod
    def body(cls) -> bytes:
        head = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "gpt-4o-mini"}
        events: list[dict[str, Any]] = [
            {**head, "choices": [{"index": 0, "delta": {"content": f"word{n} "}, "finish_reason": None}]}
            for n in range(cls.chunks)
        ]
        usage = {"prompt_tokens": 12, "completion_tokens": cls.chunks, "total_tokens": 12 + cls.chunks}
        last = {"index": 0, "delta": {}, "finish_reason": "stop"}
        events.append({**head, "choices": [last], "usage": usage})
        return ("".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n").encode()

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        body = self.body()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


class Timing(NamedTuple):
    wall: float
    cpu: float


def run(folder: Path, env: dict[str, str], *args: str) -> Timing:
    """One pytest run's wall time and the processor time it used; a failed run is shown."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([*PYTEST, *args], cwd=folder, env=env, capture_output=True)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:  # a figure of a broken run would mean nothing: say so
        print(f"pytest {' '.join(args)} exited with {done.returncode}:", done.stdout.decode()[-2000:])
    return Timing(elapsed, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)


def export(rev: str, into: Path) -> None:
    """The package as it was at ``rev``, under ``into``."""
    archive = subprocess.run(
        ["git", "archive", rev, "pytest_opik_eval"], cwd=ROOT, capture_output=True, check=True
    )
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="a smaller suite, few pairs: a smoke run")
    parser.add_argument("--before", default="HEAD~1", help="the revision to compare with (default: HEAD~1)")
    parser.add_argument("--threads", type=int, default=4)
    args = parser.parse_args()
    items, calls, count = (12, 2, 2) if args.quick else (40, 4, 9)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Streamer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with tempfile.TemporaryDirectory() as tmp:
        folder, before = Path(tmp) / "suite", Path(tmp) / "before"
        folder.mkdir()
        before.mkdir()
        export(args.before, before)
        (folder / "data.jsonl").write_text(
            "".join(json.dumps({"id": f"i{n}", "input": f"q{n}"}) + "\n" for n in range(items))
        )
        (folder / "test_app.py").write_text(APP.format(calls=calls))
        base = {**os.environ, "BENCH_LLM_URL": f"http://127.0.0.1:{server.server_address[1]}"}
        base["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
        ours_env = {**base, "PYTHONPATH": str(ROOT)}
        before_env = {**base, "PYTHONPATH": str(before)}
        run(folder, ours_env, "--eval", "--eval-record=all")
        replay = ["--eval", "--eval-record=none", f"--eval-threads={args.threads}"]
        run(folder, ours_env, *replay)  # warm-up runs
        run(folder, before_env, *replay)
        pairs = []
        for index in range(count):
            # Which side goes first alternates: a drift in the machine's load favours neither.
            if index % 2:
                b = run(folder, before_env, *replay)
                a = run(folder, ours_env, *replay)
            else:
                a = run(folder, ours_env, *replay)
                b = run(folder, before_env, *replay)
            pairs.append((a, b))
        server.shutdown()
    for name, field in (("wall", 0), ("processor", 1)):
        ratios = sorted(a[field] / b[field] for a, b in pairs)
        middle = ""
        if len(ratios) >= 4:
            q1, _, q3 = statistics.quantiles(ratios, n=4)
            middle = f"middle half {q1:.3f}-{q3:.3f}, "
        ours = statistics.median(a[field] for a, _ in pairs)
        theirs = statistics.median(b[field] for _, b in pairs)
        print(
            f"strict replay, {items} trials x {calls} streamed answers of {_Streamer.chunks} chunks, "
            f"--eval-threads={args.threads}, {name} time, ours / {args.before}: "
            f"{statistics.median(ratios):.3f}x, median of {len(ratios)} pairs ({middle}all "
            f"{ratios[0]:.3f}-{ratios[-1]:.3f}); medians {ours:.2f} s vs {theirs:.2f} s",
            flush=True,
        )
    print(f"one answer of {_Streamer.chunks} chunks put together: {assembly_ms():.2f} ms, median of 7")


def assembly_ms() -> float:
    """What putting one streamed answer together costs (``llm_responses.assembled``), in this
    process: the time a replayed call held the recorder's lock for before it was moved out."""
    sys.path.insert(0, str(ROOT))
    from pytest_opik_eval.run.llm_responses import assembled, endpoint
    from pytest_opik_eval.store.http_recordings import RecordedRequest, RecordedResponse

    request = RecordedRequest(
        method="POST",
        url="http://127.0.0.1/v1/chat/completions",
        body={"json": {"model": "gpt-4o-mini", "messages": []}},
    )
    found = endpoint(request)
    assert found is not None
    answer = RecordedResponse(status=200, body={"text": _Streamer.body().decode()})
    times = timeit.repeat(lambda: assembled(found, answer), number=20, repeat=7)
    return statistics.median(times) / 20 * 1000


if __name__ == "__main__":
    main()
