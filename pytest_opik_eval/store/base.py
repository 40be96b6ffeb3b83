"""The storage interface: what the session asks of a store, whichever backend it is.

:class:`Store` is what every store implements. A store may also have the methods of
:class:`StoreExtras`, which the session reaches without assuming them (``end_begins`` and
``stored_dataset`` here, a ``getattr`` for ``check_writable``), doing what is right for a store
without them: a store that a plugin supplies through the ``pytest_opik_eval_store`` hook may have
been written before they existed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from pytest_opik_eval.exceptions import ExperimentNotFound, StoreError
from pytest_opik_eval.store.records import (
    ExperimentRecord,
    PlannedTrial,
    RunRecord,
    RunSummary,
    ScoreRecord,
    SpanRecord,
    TrialRecord,
    TrialState,
    Usage,
)


class Store(Protocol):
    """The storage interface. Every write is durable when the call returns."""

    @property
    def location(self) -> str:
        """Where the store is, for messages (a file path, a URL)."""
        ...

    def create_run(
        self,
        run: RunRecord,
        experiments: Sequence[ExperimentRecord],
        trials: Sequence[PlannedTrial],
    ) -> None:
        """Record a run, its experiments and their planned trials, all or nothing."""
        ...

    def start_attempt(self, trial_id: str, session_id: str) -> str:
        """Record that a trial starts (pending) and return the new attempt's id."""
        ...

    def record_output(self, attempt_id: str, output: Mapping[str, Any]) -> None: ...

    def record_scores(self, attempt_id: str, scores: Sequence[ScoreRecord], passed: bool) -> None: ...

    def complete_attempt(self, attempt_id: str, *, replaces: str | None = None) -> None:
        """Clear the pending marker: the attempt reached its happy-path line. The first attempt
        of a trial to complete stands, except that ``replaces`` names an attempt of the same
        trial completed earlier in this process, which this one replaces: a rerun in the same
        session (pytest-rerunfailures, pytest-retry). The keyword is passed only for a rerun."""
        ...

    def record_verdict(self, experiment_id: str, passed: bool, aggregates: Mapping[str, float]) -> None:
        """At the end of a session: whether the experiment's gates were all met with nothing
        pending (``--eval-baseline=last`` finds it, and ``last-passing`` if they were), and its
        aggregate scores."""
        ...

    def flush(self) -> str | None:
        """Make sure every write has reached the store; return one line for the summary when
        some could not be (e.g. ``3 writes wait to be sent: run opik-eval sync``)."""
        ...

    def notices(self) -> list[str]:
        """Advice for the user gathered since the last call (a damaged journal line, a server
        problem), for the terminal summary; a store never emits Python warnings, which a
        project's ``-W error`` would turn into errors."""
        ...

    def latest(self, test: str, params: str, before: str, *, passing: bool) -> ExperimentRecord | None:
        """The newest experiment of this test (and parametrize id) older than experiment
        ``before`` whose session recorded its verdict (``passing``: a passing one), if any."""
        ...

    def runs(self) -> list[RunSummary]:
        """Every run, newest first."""
        ...

    def find(self, target: str) -> tuple[RunRecord, list[ExperimentRecord]]:
        """The run with id ``target`` and its experiments, or the run of experiment ``target``
        with only that experiment; ``last`` is the newest run. Raises ``ExperimentNotFound``."""
        ...

    def trials(self, experiment_id: str, *, spans: bool = False) -> list[TrialRecord]:
        """The experiment's planned trials in plan order, read fresh, each with its attempt's
        usage; with its spans only when ``spans`` (or when the store has no usage summed)."""
        ...

    def trial_states(self, experiment_id: str) -> list[TrialState]:
        """The same trials, with only whether each is completed: quick for 100,000 of them."""
        ...

    def close(self) -> None: ...


class StoreExtras(Protocol):
    """Methods a store may have beyond :class:`Store`."""

    def check_writable(self) -> None:
        """Raise ``StoreUnwritable`` now if the store cannot be written: the pytest-xdist
        controller, which writes nothing itself, asks before its workers start. Without it, the
        workers find out when they create the run."""
        ...

    def end_begins(self) -> None:
        """The end of the session begins: a store with a time budget for the end (sending what
        is left) starts counting it now. The pytest-xdist controller says so before it reads
        its workers' run back. Without it, nothing happens."""
        ...

    def bind_test(self, experiment: ExperimentRecord) -> None:
        """Keep ``experiment``'s test for an experiment recorded without one (the Opik SDK's, read
        from the server), which a resume bound to its test: from then on it is that test's, which
        ``latest`` (``--eval-baseline=last``) finds. A recorded test is never replaced. Without
        it, such an experiment stays without a test."""
        ...

    def record_calibrations(self, experiment_id: str, calibrations: Sequence[Mapping[str, Any]]) -> None:
        """The calibrations of the experiment's judges against human labels, as the JSON report
        has them (each a ``JudgeCalibration``), kept with the experiment when its session ends.
        Without it, they are kept in the calibrations folder only (``store/calibrations.py``)."""
        ...

    def record_judges(self, experiment_id: str, update: Mapping[str, str | None]) -> dict[str, str]:
        """The names of the scores the experiment's judges gave, learned as its trials were
        scored (``run/judges.ScoreNames``): ``update`` applied to the record's ``judges`` as
        ``records.learned_judges`` does, at once, for the process that reports, a resume and
        ``opik-eval``; returns them as they are then. Without it, a judge is kept under its own
        name only, as the run was created."""
        ...

    def human_labels(self, experiment_id: str) -> dict[str, dict[str, float]]:
        """Human labels the store holds apart from the dataset (with the Opik backend, the feedback
        scores people gave in the Opik UI), by the experiment's item id, then score name, each a
        number from 0 to 1. Without it, ``--eval-labels-from=opik-feedback`` finds none."""
        ...

    def load_dataset(self, name: str, filters: list[dict[str, str]] | None) -> list[dict[str, Any]]:
        """The items of the dataset ``name`` that the store holds itself (``dataset="opik:NAME"``),
        with the filter (Opik's wire format) applied, each with its ``id``; raises ``StoreError``.
        Without it, the store holds no datasets."""
        ...

    def record_spans(self, attempt_id: str, spans: Sequence[SpanRecord], usage: Usage | None = None) -> None:
        """The spans of the attempt's trace, its task span first, and their ``usage`` summed
        (``verdict/usage.trial_usage``), for ``trials`` to return with the attempt. Without it,
        the app's spans are not captured: they go to the Opik SDK's own client, as if this plugin
        were not there."""
        ...

    def completed_spans(self, trial_id: str) -> list[SpanRecord]:
        """The spans of the trial's completed attempt, its task span first; empty when it has none
        (or never completed). A rescore reads the tool calls of the trial it rescores there.
        Without it, a rescore's trajectory metrics get no calls."""
        ...

    def record_timings(
        self,
        attempt_id: str,
        task_seconds: float | None,
        metric_seconds: Mapping[str, float],
        *,
        completes: bool = False,
    ) -> None:
        """How long the attempt's task and metrics took, for ``trials`` to return with the
        attempt. ``completes``: the attempt reached its happy-path line, and
        ``complete_attempt`` follows: the timings may be written with it (if the process dies
        in between, the attempt stays pending, and its timings may be lost with it). Without
        it, no latency is kept."""
        ...

    def find_trial(
        self, target: str, *, run: str | None = None
    ) -> tuple[ExperimentRecord, TrialRecord] | None:
        """The trial with id ``target``, or whose attempt (its trace) or node id (of the run with
        id ``run`` when given, else the newest run's) is ``target``, with its experiment; None
        when none is. Without it, ``opik-eval show`` finds runs and experiments only."""
        ...

    def experiments_with_trial(self, node_id: str) -> list[ExperimentRecord]:
        """The experiments with a trial of node id ``node_id``, the newest run's first, for
        ``opik-eval show`` to say which runs have it. Without it, it names none."""
        ...


def span_recorder(store: Store) -> Callable[[str, Sequence[SpanRecord], Usage | None], None] | None:
    """The store's ``record_spans`` (see :meth:`StoreExtras.record_spans`), if it has one."""
    method: Callable[[str, Sequence[SpanRecord], Usage | None], None] | None = getattr(
        store, "record_spans", None
    )
    return method


def span_reader(store: Store) -> Callable[[str], list[SpanRecord]] | None:
    """The store's ``completed_spans`` (see :meth:`StoreExtras.completed_spans`), if it has one."""
    method: Callable[[str], list[SpanRecord]] | None = getattr(store, "completed_spans", None)
    return method


def rescore_chain(store: Store, experiment: ExperimentRecord) -> list[tuple[str, str | None]]:
    """The experiment ``experiment`` is a rescore of, the one that one rescored, and so on, each
    with its run's id (None: not in this store): the task ran in the last, when it is in the
    store. Empty for an experiment that ran its task."""
    chain: list[tuple[str, str | None]] = []
    seen = {experiment.id}
    target = experiment.rescore_of
    while target is not None and target not in seen:
        seen.add(target)
        try:
            run, [original, *_] = store.find(target)
        except ExperimentNotFound:
            chain.append((target, None))
            break
        chain.append((target, run.id))
        target = original.rescore_of
    return chain


class TimingsRecorder(Protocol):
    def __call__(
        self,
        attempt_id: str,
        task_seconds: float | None,
        metric_seconds: Mapping[str, float],
        *,
        completes: bool = False,
    ) -> None: ...


def timings_recorder(store: Store) -> TimingsRecorder | None:
    """The store's ``record_timings`` (see :meth:`StoreExtras.record_timings`), if it has one."""
    method: TimingsRecorder | None = getattr(store, "record_timings", None)
    return method


def find_trial(
    store: Store, target: str, run: str | None = None
) -> tuple[ExperimentRecord, TrialRecord] | None:
    """The trial ``target`` names in ``store``, in run ``run`` when given (see
    :meth:`StoreExtras.find_trial`), if it can tell."""
    method: Callable[..., tuple[ExperimentRecord, TrialRecord] | None] | None = getattr(
        store, "find_trial", None
    )
    if method is None:
        return None
    # A store written before runs could be picked takes the target alone.
    return method(target) if run is None else method(target, run=run)


def experiments_with_trial(store: Store, node_id: str) -> list[ExperimentRecord]:
    """The experiments of ``store`` with a trial of that node id, newest run first (see
    :meth:`StoreExtras.experiments_with_trial`); none when it cannot tell."""
    method: Callable[[str], list[ExperimentRecord]] | None = getattr(store, "experiments_with_trial", None)
    return [] if method is None else method(node_id)


def bind_test(store: Store, experiment: ExperimentRecord) -> None:
    """Keep the test a resume bound ``experiment`` to (see :meth:`StoreExtras.bind_test`), if
    the store can."""
    method: Callable[[ExperimentRecord], None] | None = getattr(store, "bind_test", None)
    if method is not None:
        method(experiment)


def record_calibrations(store: Store, experiment_id: str, calibrations: Sequence[Mapping[str, Any]]) -> None:
    """Keep the experiment's calibrations with it (see :meth:`StoreExtras.record_calibrations`),
    if the store can."""
    method: Callable[[str, Sequence[Mapping[str, Any]]], None] | None = getattr(
        store, "record_calibrations", None
    )
    if method is not None:
        method(experiment_id, calibrations)


def record_judges(store: Store, experiment_id: str, update: Mapping[str, str | None]) -> None:
    """Keep the judges' score names learned for the experiment (see
    :meth:`StoreExtras.record_judges`), if the store can."""
    method: Callable[[str, Mapping[str, str | None]], object] | None = getattr(store, "record_judges", None)
    if method is not None:
        method(experiment_id, update)


def human_labels(store: Store, experiment_id: str) -> dict[str, dict[str, float]] | None:
    """The human labels ``store`` holds for the experiment's items (see
    :meth:`StoreExtras.human_labels`); None when it cannot hold any."""
    method: Callable[[str], dict[str, dict[str, float]]] | None = getattr(store, "human_labels", None)
    return None if method is None else method(experiment_id)


def end_begins(store: Store) -> None:
    """Tell ``store`` that the end of the session begins (see :meth:`StoreExtras.end_begins`)."""
    method: Callable[[], None] | None = getattr(store, "end_begins", None)
    if method is not None:
        method()


def stored_dataset(store: Store, name: str, filters: list[dict[str, str]] | None) -> list[dict[str, Any]]:
    """The items of the dataset ``name`` that ``store`` holds (see :meth:`StoreExtras.load_dataset`)."""
    method: Callable[[str, list[dict[str, str]] | None], list[dict[str, Any]]] | None = getattr(
        store, "load_dataset", None
    )
    if method is None:
        raise StoreError(
            f"the store {store.location} holds no datasets: dataset 'opik:{name}' cannot be read"
        )
    return method(name, filters)
