"""``--eval-budget``: once this session's trials have spent the budget, no new trial starts.

The spend is what the trials' spans reported, app and judges alike: their cost in US dollars
(their own, or genai-prices' estimate, see ``pricing``), or their tokens. A trial adds its spend
when it ends (its spans are priced then); before a trial starts, ``check`` skips its test case if
the spend has reached the budget, and the trial stays pending, for ``--eval-resume`` to run with
a fresh budget (a budget is per session: a resume counts from zero). Trials already running
finish, so the spend can pass the budget by at most what the trials in flight spend: one per
process, or one per thread with ``--eval-threads`` (``check`` runs when a thread takes the trial
up, not when it is queued).

Under pytest-xdist the workers share the spend through a ledger: a file beside the store (every
worker of a session already shares the store's folder) named after the session, to which each
worker appends one line per trial that spent something, with a single ``write(2)`` on a file
opened for appending, so lines of several processes never interleave. Before a trial starts, a
worker reads what was appended since it last looked: a few microseconds. The controller cannot
decide instead: pytest-xdist hands each worker test cases ahead of time and has no message to
take them back, so a worker must be able to tell by itself. At the end, the controller reads the
total and removes the file. CI shards on separate machines share nothing: each gets the budget
divided by the number of shards.

Without a budget, nothing here runs: no check, no ledger.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pytest_opik_eval.exceptions import StoreError
from pytest_opik_eval.formatting import budget_amount
from pytest_opik_eval.store.records import BudgetSetting, SpanRecord
from pytest_opik_eval.verdict.usage import lineage

if TYPE_CHECKING:
    from pytest_opik_eval.run.recording import TrialScope

# Set on a test case whose trial the budget kept from starting: its report says so.
NOT_STARTED = pytest.StashKey[bool]()
# The attribute on such a test case's report (JSON-safe: it crosses from pytest-xdist workers).
NOT_STARTED_ATTR = "eval_budget_not_started"

# A spend within this share of the budget has reached it: a sum of costs such as 0.1 is
# rarely exact in binary, and 30 trials at $0.10 should reach a budget of $3.
_TOLERANCE = 1e-9


def ledger_path(store_path: Path, session_id: str) -> Path:
    """The ledger of a pytest-xdist session, beside the store."""
    return store_path.with_name(store_path.name + ".budget") / f"{session_id}.ledger"


class Budget:
    """This session's budget and what it has spent so far (shared through ``ledger`` when the
    session's trials run in several processes)."""

    def __init__(self, given: BudgetSetting, shards: int, ledger: Path | None = None) -> None:
        self.given = given
        self.unit = given.unit
        self.shards = shards
        self.limit = given.amount / shards  # a CI shard's share
        self._spent = 0.0
        self._lock = threading.Lock()
        self._ledger = None if ledger is None else _Ledger(ledger)
        self.unpriced = False  # a dollar budget saw spans with tokens and no cost: counted as free
        # The same words for every test case, so that pytest's -rs folds them into one line.
        self.reason = (
            f"eval budget of {self.describe(self.limit)} reached: trial not started, "
            "left pending for --eval-resume"
        )

    def describe(self, amount: float) -> str:
        return budget_amount(amount, self.unit)

    def spent(self) -> float:
        """What this session's trials spent, in every process that shares the ledger."""
        with self._lock:
            return self._spent if self._ledger is None else self._ledger.total()

    def reached(self) -> bool:
        return self.spent() >= self.limit * (1 - _TOLERANCE)

    def check(self, item: pytest.Item) -> None:
        """Before trial ``item`` starts: skip its test case if the budget is spent."""
        if self.reached():
            item.stash[NOT_STARTED] = True
            pytest.skip(self.reason)

    def add(self, spans: Sequence[SpanRecord], replayed: TrialScope | None = None) -> None:
        """A trial ended: what its spans spent, less what its replayed calls (--eval-record) saved,
        by the span open where they were made (``TrialScope.saved_under``): the spans that report
        a replayed call's usage, which nobody paid for again, are that span or under it, but for
        those open around a call that went out (``TrialScope.live_under``)."""
        saved_under = {} if replayed is None else replayed.saved_under
        if self.unit == "tokens":
            spend = [(span, float(_tokens(span))) for span in spans]
            saved = {
                under: float(c.saved_input_tokens + c.saved_output_tokens) for under, c in saved_under.items()
            }
        else:
            spend = [(span, span.cost) for span in spans if span.cost is not None]
            saved = {under: c.saved_cost or 0.0 for under, c in saved_under.items()}
            if any(span.cost is None and _tokens(span) for span in spans):
                self.unpriced = True
        live = set() if replayed is None else replayed.live_under
        self.spend(math.fsum(amount for _, amount in spend) - _replayed(spans, spend, saved, live))

    def spend(self, amount: float) -> None:
        """Count ``amount`` (in the budget's unit) as spent: a trial's, or the answers of
        provider batches collected at the start of a resume (--eval-batch), paid when they ran
        and replayed for free after."""
        if amount <= 0:
            return
        with self._lock:
            if self._ledger is None:
                self._spent += amount
            else:
                self._ledger.append(amount)

    def close(self, *, remove: bool = False) -> None:
        """Close the ledger; ``remove``: and delete it (the controller, once its workers ended)."""
        if self._ledger is not None:
            self._ledger.close(remove=remove)


def _replayed(
    spans: Sequence[SpanRecord],
    spend: Sequence[tuple[SpanRecord, float]],
    saved: Mapping[str, float],
    live: AbstractSet[str],
) -> float:
    """What of ``spend`` the replayed calls account for: the amount ``saved`` by the calls made
    under each span, taken from what that span and the spans under it spent, never more (a call
    no span reported, through plain httpx, cancels nothing), and never from under a span open
    around a call that went out (``live``), which was paid for; the innermost spans' calls
    first, so that calls made under an outer span take only what is left."""
    if not saved:
        return 0.0
    parents = {span.id: span.parent_span_id for span in spans}
    children: dict[str | None, list[str]] = {}
    for span in spans:
        children.setdefault(span.parent_span_id, []).append(span.id)
    left = {span.id: amount for span, amount in spend}
    taken = 0.0
    for under in sorted(saved, key=lambda under: -len(lineage(under, parents))):
        wanted = saved[under]
        # A live call's span above this one (or this one) does not keep its own calls' savings out.
        paid = live - set(lineage(under, parents))
        for span_id in _below(under, children, paid):
            if wanted <= 0:
                break
            part = min(left.get(span_id, 0.0), wanted)
            if part > 0:
                left[span_id] -= part
                wanted -= part
                taken += part
    return taken


def _below(top: str, children: Mapping[str | None, list[str]], skipped: AbstractSet[str]) -> Iterator[str]:
    """``top`` and the spans under it, depth first, but for the subtrees of ``skipped``: one pass
    over the subtree however deep it is."""
    stack = [top]
    while stack:
        span_id = stack.pop()
        if span_id in skipped:
            continue
        yield span_id
        stack.extend(reversed(children.get(span_id, ())))


def _tokens(span: SpanRecord) -> int:
    if span.total_tokens is not None:
        return span.total_tokens
    return (span.prompt_tokens or 0) + (span.completion_tokens or 0)


class _Ledger:
    """An append-only file of amounts, one per line, that several processes write and read.
    Opened on first use: the controller's, only at the end, to read what its workers wrote."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fds: tuple[int, int] | None = None  # (append, read)
        self._partial = b""  # a line another process is writing, seen in part
        self._total = 0.0

    def _open(self) -> tuple[int, int]:
        if self._fds is None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                # Two descriptors: appends go to the end whatever the reading offset is.
                append = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                self._fds = (append, os.open(self.path, os.O_RDONLY))
            except OSError as error:
                raise StoreError(
                    f"the budget ledger {self.path}, which the pytest-xdist workers share, cannot be "
                    f"written: {error.strerror or error}; make its folder writable, or run without -n"
                ) from None
        return self._fds

    def append(self, amount: float) -> None:
        os.write(self._open()[0], f"{amount!r}\n".encode())

    def total(self) -> float:
        """The sum of every line so far: reads only what was appended since the last call."""
        read = self._open()[1]
        while chunk := os.read(read, 1 << 16):
            *lines, self._partial = (self._partial + chunk).split(b"\n")
            for line in lines:
                try:
                    self._total += float(line)
                except ValueError:  # cannot happen with our own lines; never fail a trial for it
                    continue
        return self._total

    def close(self, *, remove: bool) -> None:
        fds, self._fds = self._fds or (), None
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass
        if remove:
            try:
                self.path.unlink()
                self.path.parent.rmdir()  # only if no other session's ledger is there
            except OSError:
                pass
