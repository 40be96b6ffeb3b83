"""Trajectory metrics: what an agent did, scored from its tool calls (``metrics/tool_calls.py``)
rather than from its final answer.

Each metric's ``score`` names ``tool_calls`` (and ``StepCount`` ``llm_calls``), which the runner
computes from the trial's spans; an app may also return its own ``tool_calls`` (names, or
``{"name", "arguments"}`` mappings), which then win. The expected trajectory is the constructor's
``expected``, else the item's ``expected_tool_calls`` field (names or ``{"name", "arguments"}``,
partial arguments allowed); a dataset with another field maps it:
``scoring_key_mapping={"expected_tool_calls": "gold"}``.

``calls``: which calls a metric reads: ``"auto"`` (the trial's, see ``tool_calls.py``),
``"executed"`` (the tool spans') or ``"requested"`` (what the model asked for:
``ToolNotCalled("delete_account", calls="requested")`` fails a model that even asks).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from .base import BaseMetric, MetricComputationError, ScoreResult
from .heuristics import PASS_FAIL_THRESHOLD
from .tool_calls import LLMCall, ToolCall, ToolCalls, as_calls

MODES: Final = ("exact", "in_order", "subset", "any_order")
CALLS: Final = ("auto", "executed", "requested")
ARGUMENT_MATCHES: Final = ("subset", "exact")
EXPECTED_FIELD: Final = "expected_tool_calls"

# Bounds of what a score's metadata keeps (the HTML report shows it): calls, and each call's
# arguments as text.
MAX_CALLS: Final = 200
MAX_ARGUMENT_CHARS: Final = 200

# A match of arguments: (actual, expected) -> whether they agree.
ArgumentMatch = Callable[[Any, Any], bool]


class _Expected:
    """One expected call: a name, and the arguments it must have (None: any)."""

    __slots__ = ("name", "arguments")

    def __init__(self, name: str, arguments: Any = None) -> None:
        self.name = name
        self.arguments = arguments

    def shown(self) -> str:
        return self.name if self.arguments is None else f"{self.name}({_text(self.arguments)})"


class _TrajectoryMetric(BaseMetric):
    """What the trajectory metrics share: which calls they read, and how they are shown."""

    def __init__(self, name: str, threshold: float | None, calls: str) -> None:
        _one_of(type(self).__name__, "calls", calls, CALLS)
        super().__init__(name=name, threshold=threshold)
        self.calls = calls

    def _calls(self, tool_calls: Any) -> list[ToolCall]:
        if self.calls != "auto" and isinstance(tool_calls, ToolCalls):
            return tool_calls.executed if self.calls == "executed" else tool_calls.requested
        try:
            return as_calls(tool_calls)
        except TypeError as error:
            raise MetricComputationError(f"{type(self).__name__}: {error}") from None

    def _kind(self, tool_calls: Any) -> str:
        """Which calls were read: "executed", "requested", or "returned" (by the task)."""
        if not isinstance(tool_calls, ToolCalls):
            return "returned"
        if self.calls != "auto":
            return self.calls
        return "executed" if tool_calls.executed else "requested"

    def _result(self, value: float, reason: str, metadata: dict[str, Any] | None = None) -> ScoreResult:
        return ScoreResult(name=self.name, value=value, reason=reason, metadata=metadata)


class ToolCalled(_TrajectoryMetric):
    """1.0 when the app called tool ``name`` (with arguments that contain ``args``, when
    given), else 0.0.

    Args:
        name: The tool's name.
        args: Arguments the call must have (a subset of its arguments); None: any.
        calls: Which calls to read: "auto", "executed" or "requested" (see the module).
        threshold: Defaults to ``PASS_FAIL_THRESHOLD`` (1.0).
    """

    def __init__(
        self,
        name: str,
        args: Mapping[str, Any] | None = None,
        *,
        calls: str = "auto",
        metric_name: str | None = None,
        threshold: float | None = PASS_FAIL_THRESHOLD,
    ) -> None:
        super().__init__(metric_name or f"tool_called:{name}", threshold, calls)
        self.tool = name
        self.args = args

    def score(self, tool_calls: Any = None, **ignored_kwargs: Any) -> ScoreResult:
        calls = self._calls(tool_calls)
        named = [(n, c) for n, c in enumerate(calls, 1) if c.name == self.tool]
        found = [(n, c) for n, c in named if self.args is None or _subset(self.args, c.arguments)]
        if found:
            return self._result(1.0, f"{self.tool} called (#{found[0][0]})")
        if not named:
            return self._result(0.0, f"{self.tool} not called; calls: {_sequence(calls)}")
        return self._result(
            0.0,
            f"{self.tool} called {len(named)} time(s), never with {_text(self.args)}: "
            + "; ".join(f"#{n} {_call(c)}" for n, c in named[:5]),
        )


class ToolNotCalled(_TrajectoryMetric):
    """1.0 when the app never called tool ``name``, else 0.0; the reason names each call.

    Args:
        name: The forbidden tool's name.
        calls: Which calls to read: "auto", "executed" or "requested" (see the module).
        threshold: Defaults to ``PASS_FAIL_THRESHOLD`` (1.0).
    """

    def __init__(
        self,
        name: str,
        *,
        calls: str = "auto",
        metric_name: str | None = None,
        threshold: float | None = PASS_FAIL_THRESHOLD,
    ) -> None:
        super().__init__(metric_name or f"tool_not_called:{name}", threshold, calls)
        self.tool = name

    def score(self, tool_calls: Any = None, **ignored_kwargs: Any) -> ScoreResult:
        calls = self._calls(tool_calls)
        named = [(n, c) for n, c in enumerate(calls, 1) if c.name == self.tool]
        if not named:
            return self._result(1.0, f"{self.tool} not called")
        shown = "; ".join(f"#{n} {_call(c)}" for n, c in named[:5])
        more = f" (and {len(named) - 5} more)" if len(named) > 5 else ""
        return self._result(0.0, f"{self.tool} called {len(named)} time(s): {shown}{more}")


class ToolSequence(_TrajectoryMetric):
    """How well the calls follow the expected trajectory, from 0.0 to 1.0, with the difference
    in the reason (missing, extra and moved calls, and the calls made).

    An expected call matches an actual one of its name whose arguments contain the expected
    arguments (when given). Modes:

    - ``exact``: the same calls in the same order; value = 1 - edit distance / the longer length;
    - ``in_order``: the expected calls in their order, other calls allowed between them;
      value = the longest common subsequence / expected length;
    - ``subset``: every expected call, in any order, other calls allowed; value = matched /
      expected length;
    - ``any_order``: the same calls in any order, none other; value = matched / the longer length.

    Args:
        expected: The expected calls (names or ``{"name", "arguments"}``); None: the item's
            ``expected_tool_calls``.
        mode: One of ``MODES``. Defaults to "exact".
        calls: Which calls to read: "auto", "executed" or "requested" (see the module).
        threshold: Defaults to 1.0: the trajectory must be right.
    """

    def __init__(
        self,
        expected: Sequence[Any] | None = None,
        mode: str = "exact",
        *,
        calls: str = "auto",
        name: str = "tool_sequence",
        threshold: float | None = PASS_FAIL_THRESHOLD,
    ) -> None:
        _one_of("ToolSequence", "mode", mode, MODES)
        super().__init__(name, threshold, calls)
        self.mode = mode
        try:
            self.expected = (
                None if expected is None else _expected_calls(expected, "ToolSequence(expected=...)")
            )
        except MetricComputationError as error:  # at collection: a bad argument, not a bad score
            raise ValueError(str(error)) from None

    def score(
        self, tool_calls: Any = None, expected_tool_calls: Any = None, **ignored_kwargs: Any
    ) -> ScoreResult:
        expected = self.expected
        if expected is None:
            expected = _expected_calls(_required(expected_tool_calls, "ToolSequence"), EXPECTED_FIELD)
        actual = self._calls(tool_calls)
        diff = sequence_diff(expected, actual, self.mode)
        return self._result(diff.value, diff.reason(), diff.metadata(self.mode, self._kind(tool_calls)))


class ToolArgs(_TrajectoryMetric):
    """Whether the calls of tool ``name`` had the expected arguments: the share of them that
    did (0.0 when it was never called).

    Args:
        name: The tool's name.
        args: The arguments each call must have; None: the item's ``expected_tool_calls``
            entries of that name, the first for the first call, and so on (a call count that
            differs counts as mismatches); with a callable ``match`` and no such field, None.
        match: "subset" (the expected arguments are among the call's, nested dicts alike),
            "exact" (equal), or a callable ``(actual, expected) -> bool``.
        calls: Which calls to read: "auto", "executed" or "requested" (see the module).
        threshold: Defaults to 1.0.
    """

    def __init__(
        self,
        name: str,
        args: Any = None,
        match: str | ArgumentMatch = "subset",
        *,
        calls: str = "auto",
        metric_name: str | None = None,
        threshold: float | None = PASS_FAIL_THRESHOLD,
    ) -> None:
        if not callable(match):
            _one_of("ToolArgs", "match", match, ARGUMENT_MATCHES)
        super().__init__(metric_name or f"tool_args:{name}", threshold, calls)
        self.tool = name
        self.args = args
        self.match = match

    def score(
        self, tool_calls: Any = None, expected_tool_calls: Any = None, **ignored_kwargs: Any
    ) -> ScoreResult:
        named = [c for c in self._calls(tool_calls) if c.name == self.tool]
        if self.args is not None or (callable(self.match) and expected_tool_calls is None):
            # A callable alone judges each call by itself (expected None).
            wanted = [self.args] * max(len(named), 1)
        else:
            entries = _expected_calls(_required(expected_tool_calls, "ToolArgs"), EXPECTED_FIELD)
            wanted = [e.arguments for e in entries if e.name == self.tool]
            if not wanted:
                raise MetricComputationError(
                    f"ToolArgs: {EXPECTED_FIELD} has no call named {self.tool!r}; give "
                    f"ToolArgs({self.tool!r}, args={{...}}) or add it to the item"
                )
        if not named:
            return self._result(0.0, f"{self.tool} not called")
        # The counts may differ (said below): zip pairs what both have.
        bad = [
            f"#{n} {_text(call.arguments)} "
            + ("refused by match" if callable(self.match) else f"!= {_text(want)}")
            for n, (call, want) in enumerate(zip(named, wanted, strict=False), 1)
            if not self._agrees(call.arguments, want)
        ]
        pairs = max(len(named), len(wanted))
        good = min(len(named), len(wanted)) - len(bad)
        if good == pairs:
            return self._result(1.0, f"{self.tool}: {len(named)} call(s) with the expected arguments")
        problems = bad[:5]
        if len(named) != len(wanted):
            problems.append(f"{len(named)} call(s), {len(wanted)} expected")
        return self._result(good / pairs, f"{self.tool}: " + "; ".join(problems))

    def _agrees(self, actual: Any, expected: Any) -> bool:
        if callable(self.match):
            return bool(self.match(actual, expected))
        if expected is None:
            return True
        return actual == expected if self.match == "exact" else _subset(expected, actual)


class StepCount(_TrajectoryMetric):
    """1.0 when the app made at most ``max_llm_calls`` model calls and ``max_tool_calls`` tool
    calls, else 0.0: a loop that runs away fails, its count in the reason.

    Args:
        max_llm_calls: The most LLM calls (the app's LLM spans); None: any number.
        max_tool_calls: The most tool calls; None: any number.
        calls: Which tool calls to count: "auto", "executed" or "requested" (see the module).
        threshold: Defaults to ``PASS_FAIL_THRESHOLD`` (1.0).
    """

    def __init__(
        self,
        max_llm_calls: int | None = None,
        max_tool_calls: int | None = None,
        *,
        calls: str = "auto",
        name: str = "step_count",
        threshold: float | None = PASS_FAIL_THRESHOLD,
    ) -> None:
        for argument, limit in (("max_llm_calls", max_llm_calls), ("max_tool_calls", max_tool_calls)):
            if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
                raise ValueError(f"StepCount: {argument} must be a whole number >= 0 or None, got {limit!r}")
        if max_llm_calls is None and max_tool_calls is None:
            raise ValueError("StepCount: give max_llm_calls, max_tool_calls or both")
        super().__init__(name, threshold, calls)
        self.max_llm_calls = max_llm_calls
        self.max_tool_calls = max_tool_calls

    def score(
        self, tool_calls: Any = None, llm_calls: Sequence[LLMCall] | None = None, **ignored_kwargs: Any
    ) -> ScoreResult:
        calls = self._calls(tool_calls)
        llm = len(llm_calls or ())
        over = []
        if self.max_tool_calls is not None and len(calls) > self.max_tool_calls:
            counts = ", ".join(f"{name} x{n}" for name, n in Counter(c.name for c in calls).most_common(5))
            over.append(f"{len(calls)} tool calls > {self.max_tool_calls} ({counts})")
        if self.max_llm_calls is not None and llm > self.max_llm_calls:
            over.append(f"{llm} LLM calls > {self.max_llm_calls}")
        metadata = {"tool_calls": len(calls), "llm_calls": llm}
        if over:
            return self._result(0.0, "; ".join(over), metadata)
        return self._result(1.0, f"{len(calls)} tool calls, {llm} LLM calls", metadata)


class SequenceDiff:
    """``ToolSequence``'s comparison of expected and actual calls: its value, and the expected
    calls missing, the actual ones extra, and those moved (present, out of place), each as
    (position from 1, call)."""

    def __init__(
        self,
        value: float,
        expected: list[_Expected],
        actual: list[ToolCall],
        missing: list[int],
        extra: list[int],
        moved: list[tuple[int, int]],
        mode: str,
    ) -> None:
        self.value = value
        self.expected = expected
        self.actual = actual
        self.missing = missing  # indexes into expected
        self.extra = extra  # indexes into actual
        self.moved = moved  # (expected index, actual index)
        self.mode = mode

    def reason(self) -> str:
        parts = [f"missing {self.expected[i].shown()} (expected #{i + 1})" for i in self.missing]
        parts += [
            f"moved {self.expected[i].shown()} (expected #{i + 1}, got #{j + 1})" for i, j in self.moved
        ]
        # Extra calls are allowed by in_order and subset: shown, but as what they are.
        label = "extra" if self.mode in ("exact", "any_order") else "also called"
        parts += [f"{label} {self.actual[j].name} (#{j + 1})" for j in self.extra]
        if len(parts) > 8:
            parts = [*parts[:8], f"and {len(parts) - 8} more"]
        head = f"{self.mode} {self.value:.2f}"
        got = f"got {_sequence(self.actual)}"
        return f"{head}: {'; '.join([*parts, got])}" if parts else f"{head}: {got}"

    def metadata(self, mode: str, calls: str) -> dict[str, Any]:
        return {
            "mode": mode,
            "calls": calls,
            "expected": [[e.name, _bounded(e.arguments)] for e in self.expected[:MAX_CALLS]],
            "actual": [[c.name, _bounded(c.arguments)] for c in self.actual[:MAX_CALLS]],
            "missing": self.missing[:MAX_CALLS],
            "extra": self.extra[:MAX_CALLS],
            "moved": [list(pair) for pair in self.moved[:MAX_CALLS]],
        }


def sequence_diff(expected: list[_Expected], actual: list[ToolCall], mode: str) -> SequenceDiff:
    """Compare ``actual`` with ``expected`` as ``ToolSequence``'s ``mode`` says (see there)."""
    # Whether each expected call matches each actual one: asked once, read by every step below.
    same = [[_matches(e, a) for a in actual] for e in expected]
    if mode == "exact":
        distance, missing, extra = _edit(same, len(actual))
        longest = max(len(expected), len(actual))
        value = 1.0 - distance / longest if longest else 1.0
    elif mode == "in_order":
        kept, missing, extra = _common(same, len(actual))
        value = kept / len(expected) if expected else 1.0
    else:
        matched, missing, extra = _matched(same, len(actual), [e.arguments is None for e in expected])
        if mode == "subset":
            value = matched / len(expected) if expected else 1.0
        else:
            longest = max(len(expected), len(actual))
            value = matched / longest if longest else 1.0
    moved = _moved(same, missing, extra)
    moved_expected, moved_actual = {i for i, _ in moved}, {j for _, j in moved}
    return SequenceDiff(
        value,
        expected,
        actual,
        [i for i in missing if i not in moved_expected],
        [j for j in extra if j not in moved_actual],
        moved,
        mode,
    )


def _edit(same: list[list[bool]], cols: int) -> tuple[int, list[int], list[int]]:
    """The edit distance (insert, delete, substitute) and, from one cheapest alignment, the
    expected calls left out and the actual calls added (a substitution is one of each)."""
    rows = len(same)
    table = [[0] * (cols + 1) for _ in range(rows + 1)]
    for i in range(rows + 1):
        table[i][0] = i
    for j in range(cols + 1):
        table[0][j] = j
    for i in range(1, rows + 1):
        for j in range(1, cols + 1):
            cost = 0 if same[i - 1][j - 1] else 1
            table[i][j] = min(table[i - 1][j] + 1, table[i][j - 1] + 1, table[i - 1][j - 1] + cost)
    missing: list[int] = []
    extra: list[int] = []
    i, j = rows, cols
    while i or j:
        if i and j and table[i][j] == table[i - 1][j - 1] + (0 if same[i - 1][j - 1] else 1):
            if not same[i - 1][j - 1]:
                missing.append(i - 1)
                extra.append(j - 1)
            i, j = i - 1, j - 1
        elif i and table[i][j] == table[i - 1][j] + 1:
            missing.append(i - 1)
            i -= 1
        else:
            extra.append(j - 1)
            j -= 1
    return table[rows][cols], sorted(missing), sorted(extra)


def _common(same: list[list[bool]], cols: int) -> tuple[int, list[int], list[int]]:
    """The longest common subsequence's length, the expected calls out of it and the actual ones
    out of it."""
    rows = len(same)
    table = [[0] * (cols + 1) for _ in range(rows + 1)]
    for i in range(rows - 1, -1, -1):
        for j in range(cols - 1, -1, -1):
            if same[i][j]:
                table[i][j] = table[i + 1][j + 1] + 1
            else:
                table[i][j] = max(table[i + 1][j], table[i][j + 1])
    kept_expected: set[int] = set()
    kept_actual: set[int] = set()
    i = j = 0
    while i < rows and j < cols:
        if same[i][j] and table[i][j] == table[i + 1][j + 1] + 1:
            kept_expected.add(i)
            kept_actual.add(j)
            i, j = i + 1, j + 1
        elif table[i + 1][j] >= table[i][j + 1]:
            i += 1
        else:
            j += 1
    return (
        table[0][0],
        [i for i in range(rows) if i not in kept_expected],
        [j for j in range(cols) if j not in kept_actual],
    )


def _matched(same: list[list[bool]], cols: int, loose: list[bool]) -> tuple[int, list[int], list[int]]:
    """Each expected call paired with an actual one that matches it, in any order: those with
    arguments first (the pickier), each taking the first free call. The count, the expected
    calls left unpaired and the actual ones."""
    free = list(range(cols))
    missing = []
    for i in sorted(range(len(same)), key=loose.__getitem__):
        j = next((j for j in free if same[i][j]), None)
        if j is None:
            missing.append(i)
        else:
            free.remove(j)
    return len(same) - len(missing), sorted(missing), free


def _moved(same: list[list[bool]], missing: list[int], extra: list[int]) -> list[tuple[int, int]]:
    """The missing expected calls that an extra actual call matches: made, out of place."""
    free = list(extra)
    moved = []
    for i in missing:
        j = next((j for j in free if same[i][j]), None)
        if j is not None:
            free.remove(j)
            moved.append((i, j))
    return moved


def _matches(expected: _Expected, actual: ToolCall) -> bool:
    return expected.name == actual.name and (
        expected.arguments is None or _subset(expected.arguments, actual.arguments)
    )


def _subset(expected: Any, actual: Any) -> bool:
    """Whether ``actual`` has what ``expected`` has: each key of a dict, with a value that has
    what the expected one has (nested dicts alike); any other value equal."""
    if isinstance(expected, Mapping):
        return isinstance(actual, Mapping) and all(
            key in actual and _subset(value, actual[key]) for key, value in expected.items()
        )
    return bool(expected == actual)


def _expected_calls(value: Any, where: str) -> list[_Expected]:
    """The expected trajectory, checked: a list of names or ``{"name", "arguments"}``."""
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence):
        raise MetricComputationError(
            f"{where} must be a list of tool names or {{'name', 'arguments'}} mappings, got {_text(value)}"
        )
    calls = []
    for entry in value:
        if isinstance(entry, str):
            calls.append(_Expected(entry))
        elif isinstance(entry, Mapping) and isinstance(entry.get("name"), str):
            calls.append(_Expected(entry["name"], entry.get("arguments", entry.get("args"))))
        else:
            raise MetricComputationError(
                f"{where}: each expected call must be a tool name or a mapping with a 'name', "
                f"got {_text(entry)}"
            )
    return calls


def _required(value: Any, metric: str) -> Any:
    if value is None:
        raise MetricComputationError(
            f"{metric} has no expected trajectory: give it {metric}(expected=[...]) or put the "
            f"expected calls in the item's {EXPECTED_FIELD!r} field (another field: "
            f'scoring_key_mapping={{"{EXPECTED_FIELD}": "<field>"}})'
            if metric == "ToolSequence"
            else f"{metric} has no expected arguments: give {metric}(name, args={{...}}) or put the "
            f"expected calls in the item's {EXPECTED_FIELD!r} field"
        )
    return value


def _one_of(metric: str, argument: str, value: Any, allowed: Sequence[str]) -> None:
    if value not in allowed:
        raise ValueError(f"{metric}: {argument} must be one of {', '.join(allowed)}; got {value!r}")


def _sequence(calls: Sequence[ToolCall]) -> str:
    if not calls:
        return "no tool calls"
    names = [c.name for c in calls[:20]]
    more = f" -> ... ({len(calls) - 20} more)" if len(calls) > 20 else ""
    return " -> ".join(names) + more


def _call(call: ToolCall) -> str:
    return call.name if call.arguments is None else f"{call.name}({_text(call.arguments)})"


def _text(value: Any) -> str:
    text = (
        json.dumps(value, ensure_ascii=False, default=repr, sort_keys=True)
        if not isinstance(value, str)
        else value
    )
    return text if len(text) <= MAX_ARGUMENT_CHARS else text[: MAX_ARGUMENT_CHARS - 3] + "..."


def _bounded(arguments: Any) -> Any:
    """Arguments as the metadata keeps them: as they are when short, else cut as text."""
    if arguments is None:
        return None
    text = _text(arguments)
    return arguments if len(text) < MAX_ARGUMENT_CHARS else text
