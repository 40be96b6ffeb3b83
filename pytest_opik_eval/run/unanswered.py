"""A trial whose task made a request that got no answer: one the recordings could not replay, or
that strict replay or a strict batch refused, fails, pending; one deferred to a provider batch
(``--eval-batch``) is skipped, pending, with the reason, until a resume collects the answer.
Either way the trial's output is not kept: it is what the app made of an error answer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from pytest_opik_eval.escaping import escape_control

if TYPE_CHECKING:
    from pytest_opik_eval.run.recording import TrialScope

# Set on a trial's test case whose task made a request that --eval-record could not replay, and
# as this attribute on its call report (a plain bool: JSON-safe for pytest-xdist).
RECORDING_MISSED = pytest.StashKey[bool]()
RECORDING_MISSED_ATTR = "eval_recording_missed"
# Set on a trial's test case whose request waits for a batch, with the reason, and as this
# attribute on its call report (a str: JSON-safe for pytest-xdist).
BATCHED = pytest.StashKey[str]()
BATCHED_ATTR = "eval_batched"


def fail_on_misses(item: pytest.Function, item_id: str, trial: int, scope: TrialScope | None) -> None:
    """The trial fails, pending, when its task made a request that had no recording."""
    if scope is not None and scope.misses:
        item.stash[RECORDING_MISSED] = True
        pytest.fail(missed_message(item_id, trial, scope), pytrace=False)


# The requests without a recording named in a trial's failure; the rest are counted.
_MISSES_SHOWN = 3


def missed_message(item_id: str, trial: int, scope: TrialScope) -> str:
    """Why a trial failed under --eval-record: each request that had no recording, with its diff
    against the closest recorded request, and how to record it."""
    misses = scope.misses
    lines = [
        f"item {escape_control(item_id)} (trial {trial}): the app made {len(misses)} request"
        f"{'s' if len(misses) > 1 else ''} with no recording (--eval-record={scope.recorder.mode}):"
    ]
    for miss in misses[:_MISSES_SHOWN]:
        lines.append(f"  {escape_control(miss.request)}")
        lines += [f"    {escape_control(line)}" for line in miss.diff.splitlines()]
    if len(misses) > _MISSES_SHOWN:
        lines.append(f"  ... and {len(misses) - _MISSES_SHOWN} more")
    if any(miss.recordable for miss in misses):
        lines.append("record what is missing with --eval-record=new_episodes (the trial stays pending)")
    else:
        lines.append("the trial stays pending")
    return "\n".join(lines)


def wait_for_batch(item: pytest.Function, scope: TrialScope | None) -> None:
    """The trial is skipped, pending, when a request of it was deferred to a batch (misses win:
    a request that failed the trial is the more useful message)."""
    if scope is not None and scope.deferred:
        item.stash[BATCHED] = reason = scope.deferred[0]
        pytest.skip(reason)
