"""What reading a trial's tool calls from its spans costs (``metrics/tool_calls.py:extract``), per
span, by kind of span, in this process rather than in pytest runs.

    python benchmarks/trajectory.py [--quick] [--json FILE]

Each kind is measured over trials of 20 spans of that kind (each span's parent the task span, which
is not among them, as in a live trial), 100,000 spans in all: the spans as a trial holds them while
it runs (the Opik SDK's span parameters, ours, and stored ``SpanRecord``s for a rescore). The
kinds: a general span (no call: what every other span of an app costs), an executed call from the
Opik SDK (``@track(type="tool")``: a datetime start, the SDK's marker) and from the manual API (a
float start), an LLM span whose OpenAI chat answer asks for 1 and for 5 tool calls (arguments as
JSON text, decoded), an Anthropic answer with 1 ``tool_use`` block, the Responses API's
``function_call`` item, a Gemini answer with 1 ``functionCall`` part, an OpenTelemetry tool span
as ``run/otel.py`` converts it (its call id in the metadata) and chat span (output messages with
a GenAI ``tool_call`` part), and a stored tool ``SpanRecord`` (ISO text start). Then an agent
trial as the tests have it: 10 steps of an LLM span asking for a call and the tool span that runs it, and
``ToolSequence`` scoring its 10 calls. Target: under 5 us a span, for every kind (an LLM span
that asks for 5 calls: a call).

Figures are the median of 7 repeats (3 with ``--quick``, over 10,000 spans), in processor time of
this thread. Without ``--quick``, they are written to benchmarks/results/trajectory.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's package

from pytest_opik_eval.metrics import ToolSequence  # noqa: E402
from pytest_opik_eval.metrics.tool_calls import extract  # noqa: E402
from pytest_opik_eval.store.records import SpanRecord  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "trajectory.json"
PER_TRIAL = 20
TARGET_US = 5.0
SDK_MARK = "__pytest_opik_eval_from_sdk__"  # _compat_opik.FROM_SDK


def openai_answer(calls: int) -> dict[str, Any]:
    tool_calls = [
        {
            "id": f"call_{i}",
            "type": "function",
            "function": {"name": "search", "arguments": json.dumps({"q": f"query {i}", "limit": 5})},
        }
        for i in range(calls)
    ]
    message = {"role": "assistant", "content": None, "tool_calls": tool_calls}
    return {"choices": [{"index": 0, "message": message}]}


def llm_output(n: int, kind: str) -> Any:
    """The output of the n-th span of a trial, an LLM span of ``kind``: each call with an id of
    its own (an id seen twice is one call, counted once)."""
    if kind.startswith("openai llm"):
        answer = openai_answer(int(kind.split()[-2]))
        for call in answer["choices"][0]["message"]["tool_calls"]:
            call["id"] += f"-{n}"
        return answer
    if kind == "anthropic llm":
        return {"content": [{"type": "tool_use", "id": f"toolu_{n}", "name": "search", "input": {}}]}
    if kind == "responses llm":
        return {
            "output": [{"type": "function_call", "call_id": f"c{n}", "name": "search", "arguments": "{}"}]
        }
    if kind == "gemini llm":
        call = {"functionCall": {"name": "search", "args": {"q": "query"}, "id": f"fc_{n}"}}
        return {"candidates": [{"content": {"role": "model", "parts": [call]}, "index": 0}]}
    # "otel chat llm": output messages as run/otel.py decodes gen_ai.output.messages.
    part = {"type": "tool_call", "id": f"call_{n}", "name": "search", "arguments": {"q": "query"}}
    return [{"role": "assistant", "parts": [part], "finish_reason": "tool_call"}]


def span(n: int, kind: str) -> Any:
    """The n-th span of a trial, of ``kind``."""
    base: dict[str, Any] = {
        "id": f"span-{n}",
        "trace_id": "trace",
        "parent_span_id": "task",
        "name": "step",
        "type": "general",
        "start_time": 1_700_000_000.0 + n,
        "input": {"text": "x"},
        "output": {"output": "y"},
    }
    if kind == "sdk tool":
        base.update(
            type="tool",
            name="search",
            start_time=datetime.fromtimestamp(1_700_000_000 + n, timezone.utc),
            input={"q": "query", "limit": 5},
            **{SDK_MARK: True},
        )
    elif kind == "manual tool":
        base.update(type="tool", name="search", input={"q": "query", "limit": 5})
    elif kind.endswith(("llm", "calls")):
        base.update(type="llm", output=llm_output(n, kind))
    elif kind == "otel tool":
        base.update(
            type="tool",
            name="search",
            input={"q": "query", "limit": 5},
            metadata={"gen_ai.tool.name": "search", "gen_ai.tool.call.id": f"call_{n}"},
        )
    elif kind == "stored tool":
        return SpanRecord(
            id=f"span-{n}",
            trace_id="trace",
            parent_span_id="task",
            name="search",
            type="tool",
            start_time=datetime.fromtimestamp(1_700_000_000 + n, timezone.utc).isoformat(),
            input={"q": "query", "limit": 5},
        )
    return base


KINDS = [
    "general",
    "sdk tool",
    "manual tool",
    "openai llm 1 calls",
    "openai llm 5 calls",
    "anthropic llm",
    "responses llm",
    "gemini llm",
    "otel tool",
    "otel chat llm",
    "stored tool",
]


def agent_trial() -> list[dict[str, Any]]:
    spans = []
    for step in range(10):
        asked = span(2 * step, "openai llm 1 calls")
        ran = span(2 * step + 1, "manual tool")
        spans += [asked, ran]
    return spans


def timed(function: Callable[[], object], repeats: int) -> float:
    """The median processor time of ``function`` over ``repeats`` runs (after one warm-up)."""
    function()
    runs = []
    for _ in range(repeats):
        started = time.thread_time()
        function()
        runs.append(time.thread_time() - started)
    return statistics.median(runs)


def figures(quick: bool) -> dict[str, float]:
    total = 10_000 if quick else 100_000
    repeats = 3 if quick else 7
    trials_count = total // PER_TRIAL
    found: dict[str, float] = {}
    for kind in KINDS:
        trials = [[span(n, kind) for n in range(PER_TRIAL)] for _ in range(trials_count)]

        def run(trials: list[list[Any]] = trials) -> None:
            for spans in trials:
                extract(spans)

        found[kind] = timed(run, repeats) / total * 1e6
        calls = int(kind.split()[-2]) if kind.startswith("openai llm") else 1
        each = f" ({found[kind] / calls:.2f} us a call)" if calls > 1 else ""
        print(f"  {kind:<20} {found[kind]:6.2f} us a span{each}")
    agents = [agent_trial() for _ in range(total // 20)]
    agent = "agent trial (10 llm + 10 tool spans)"

    def run_agents() -> None:
        for spans in agents:
            extract(spans)

    found[agent] = timed(run_agents, repeats) / total * 1e6
    print(f"  {'agent trial':<20} {found[agent]:6.2f} us a span")
    metric = ToolSequence(["search"] * 10)
    extracted = [extract(s).tool_calls for s in agents]
    per_score = timed(lambda: [metric.score(tool_calls=c) for c in extracted], repeats) / len(extracted) * 1e6
    found["ToolSequence exact, 10 calls (per score)"] = per_score
    print(f"  ToolSequence exact over 10 calls: {per_score:.1f} us a score")
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="10,000 spans, 3 repeats: a smoke run")
    parser.add_argument("--json", type=Path, default=None, help=f"write the figures here (default {RESULTS})")
    args = parser.parse_args()
    print(f"trajectory: extracting tool calls, processor time (target < {TARGET_US:g} us a span)")
    found = figures(args.quick)
    # The target is a span's; a span that asks for 5 calls is held to it per call.
    worst = max(
        value / (5 if "5 calls" in name else 1)
        for name, value in found.items()
        if not name.startswith("ToolSequence")
    )
    print(f"  worst: {worst:.2f} us a span (or a call) ({'met' if worst < TARGET_US else 'MISSED'})")
    target = args.json or (None if args.quick else RESULTS)
    if target is not None:
        target.write_text(
            json.dumps(
                {"python": platform.python_version(), "machine": platform.machine(), "us": found}, indent=2
            )
            + "\n"
        )


if __name__ == "__main__":
    main()
