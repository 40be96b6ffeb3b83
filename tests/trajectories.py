"""What the end-to-end tests of an agent's trajectories share (tests/test_trajectory.py,
test_agents.py, test_uninstrumented_agents.py): the five items' right trajectory, and the check
that each fails, or passes, with a reason that names the difference."""

from __future__ import annotations

from typing import Any

import pytest

# The right trajectory, as ToolSequence's metadata lists the calls made.
RIGHT = [["search", {"q": "order 7"}], ["fetch_order", {"id": 7}], ["refund", {"id": 7, "amount": 20}]]
EXPECTED = ["search", "fetch_order", {"name": "refund", "arguments": {"id": 7}}]


def reasons(report: dict[str, Any]) -> dict[str, dict[str, str | None]]:
    """Each trial's score reasons, by item id and score name."""
    (experiment,) = report["experiments"]
    return {
        trial["dataset_item_id"]: {score["name"]: score["reason"] for score in trial["scores"]}
        for trial in experiment["trials"]
    }


def check_five_cases(
    result: pytest.RunResult, report: dict[str, Any], *, calls: str, loop: str, in_order: bool = True
) -> None:
    """The five items (right, wrong_order, missing, forbidden, loop) scored by ToolSequence,
    ToolNotCalled("delete_account") and StepCount: one passes, four fail, each reason naming the
    difference in the JSON report and (``in_order``: in the items' order) the terminal. ``calls``:
    which calls were scored; ``loop``: the loop's StepCount reason."""
    result.assert_outcomes(passed=1, failed=4)
    found = reasons(report)
    assert found["right"]["tool_sequence"] == "exact 1.00: got search -> fetch_order -> refund"
    assert found["right"]["tool_not_called:delete_account"] == "delete_account not called"
    assert found["wrong_order"]["tool_sequence"] == (
        "exact 0.33: moved search (expected #1, got #2); moved fetch_order (expected #2, got #1); "
        "got fetch_order -> search -> refund"
    )
    assert found["missing"]["tool_sequence"] == (
        "exact 0.67: missing fetch_order (expected #2); got search -> refund"
    )
    assert found["forbidden"]["tool_sequence"] == (
        "exact 0.75: extra delete_account (#3); got search -> fetch_order -> delete_account -> refund"
    )
    assert found["forbidden"]["tool_not_called:delete_account"] == (
        'delete_account called 1 time(s): #3 delete_account({"id": 7})'
    )
    assert found["loop"]["step_count"] == loop
    if in_order:
        result.stdout.fnmatch_lines(
            [
                "*item wrong_order (trial 0) did not meet its thresholds:",
                "*tool_sequence *0.333 < 1  exact 0.33: moved search (expected #1, got #2)*",
                "*item missing (trial 0) did not meet its thresholds:",
                "*tool_sequence *0.667 < 1  exact 0.67: missing fetch_order (expected #2)*",
                "*item forbidden (trial 0) did not meet its thresholds:",
                "*tool_not_called:delete_account *0 < 1  delete_account called 1 time(s): #3 delete_account*",
                "*item loop (trial 0) did not meet its thresholds:",
                f"*step_count *0 < 1  {loop}",
            ],
            consecutive=False,
        )
    assert "but the trial has no spans" not in result.stdout.str()  # the calls were found
    (experiment,) = report["experiments"]
    right = next(t for t in experiment["trials"] if t["dataset_item_id"] == "right")
    metadata = right["scores"][0]["metadata"]
    assert metadata["calls"] == calls  # the calls scored: the tool spans', or the model's requests
    assert metadata["actual"] == RIGHT
