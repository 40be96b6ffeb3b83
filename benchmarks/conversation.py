"""What the conversation driver (``eval_conversation``, ``run/conversation.py``) costs per turn,
measured through the package's own code, in this process.

    python benchmarks/conversation.py [--quick]

Each run drives conversations of T turns between an app and a simulated user that both answer
at once (no model: what is left is the driver's own work), inside a trial's trace, as a trial
runs its task: ``Conversation.run``, which makes a span per turn and per simulated user's
message, keeps the transcript and checks the end; against the same loop written by hand (the
app and the user called in turn, the transcript kept in a list), in the same trace. Runs go in
pairs, ours and the baseline one after the other (which goes first alternates), after a warm-up
run of each; the figure is the median of the pairs' differences per turn, in processor time
(``time.thread_time``), with the spread. Target: under 50 us a turn, next to a model's call of a
second or more.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's package

from pytest_opik_eval.ids import uuid7  # noqa: E402
from pytest_opik_eval.run import trial_trace  # noqa: E402
from pytest_opik_eval.run.conversation import Conversation  # noqa: E402

TARGET_US = 50.0


def app(message: str) -> str:
    return "ok"


def user(history: list[dict[str, str]]) -> str:
    return "next"


def driven(conversations: int, turns: int) -> None:
    item = {"id": "a", "first_message": "hi", "max_turns": turns}
    for _ in range(conversations):
        Conversation(item).run(app, user=user)


def by_hand(conversations: int, turns: int) -> None:
    for _ in range(conversations):
        history = [{"role": "user", "content": "hi"}]
        for turn in range(turns):
            if turn:
                history.append({"role": "user", "content": user(history)})
            history.append({"role": "assistant", "content": app(history[-1]["content"])})


def in_trace(body: Callable[[], None]) -> float:
    """``body``'s processor time, run inside a trial's trace (each run its own, as each trial)."""
    trace = trial_trace.TrialTrace(uuid7(), "test_chat", dict, {"id": "a"})
    with trace.entered():
        started = time.thread_time()
        body()
        elapsed = time.thread_time() - started
    trace.close()
    return elapsed


def per_turn(conversations: int, turns: int, pairs: int) -> list[float]:
    """The pairs' differences, ours minus the hand-written loop, per turn, in microseconds."""
    total = conversations * turns
    ours = lambda: driven(conversations, turns)  # noqa: E731
    baseline = lambda: by_hand(conversations, turns)  # noqa: E731
    in_trace(ours), in_trace(baseline)  # warm-up
    differences = []
    for number in range(pairs):
        if number % 2:
            base, mine = in_trace(baseline), in_trace(ours)
        else:
            mine, base = in_trace(ours), in_trace(baseline)
        differences.append((mine - base) / total * 1e6)
    return differences


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer turns and pairs: a smoke run")
    args = parser.parse_args()
    conversations, turns, pairs = (50, 5, 3) if args.quick else (400, 25, 9)
    differences = sorted(per_turn(conversations, turns, pairs))
    median = statistics.median(differences)
    verdict = "met" if median < TARGET_US else "NOT MET"
    print(
        f"conversation driver: {median:.1f} us a turn more than a hand-written loop "
        f"({conversations} conversations x {turns} turns, {pairs} pairs; range "
        f"{differences[0]:.1f} to {differences[-1]:.1f} us); target < {TARGET_US:.0f} us: {verdict}"
    )


if __name__ == "__main__":
    main()
