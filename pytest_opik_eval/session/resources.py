"""What a session's trials run with, beside the store: the threads that run trials ahead, the
budget (``--eval-budget``), the judge cache (``--eval-judge-cache``) and the recorder
(``--eval-record``). Made once the start has decided the budget.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_opik_eval.notices import notice
from pytest_opik_eval.run.budget import Budget, ledger_path
from pytest_opik_eval.run.concurrency import Pool
from pytest_opik_eval.run.distributed import worker_id
from pytest_opik_eval.settings import judge_cache_enabled

if TYPE_CHECKING:
    import pytest

    from pytest_opik_eval.collect.trials import TestPlan
    from pytest_opik_eval.run.batching import Batcher
    from pytest_opik_eval.run.judge_cache import JudgeCache
    from pytest_opik_eval.run.judges import Judges
    from pytest_opik_eval.run.recording import Recorder, RecordingCounts
    from pytest_opik_eval.settings import EvalOptions
    from pytest_opik_eval.store.records import BudgetSetting
    from pytest_opik_eval.verdict.model import BatchReport


def batches_folder(options: EvalOptions) -> Path:
    """Where --eval-batch keeps its ledgers: ``batches/`` in the store's folder."""
    from pytest_opik_eval.store.batch_ledger import batches_folder

    return batches_folder(options.store_path.parent)


def recordings_folder(options: EvalOptions) -> Path:
    """Where --eval-record keeps its files: ``recordings/`` in the store's folder."""
    from pytest_opik_eval.store.http_recordings import recordings_folder

    return recordings_folder(options.store_path.parent)


class Resources:
    """The run's resources in this process. ``budget`` is shared through a ledger by the processes
    of a pytest-xdist session (``shared``: the workers and their controller), a shard's share of
    it with --eval-shard; the judge cache is in each process, the controller too (it adds up its
    workers' counts); the recorder, where trials run, from ``start_recording``."""

    def __init__(
        self,
        config: pytest.Config,
        options: EvalOptions,
        session_id: str,
        budget: BudgetSetting | None,
        *,
        shared: bool,
        run_id: str = "",
    ) -> None:
        self._config = config
        self._options = options
        self._session_id = session_id
        self._run_id = run_id
        self.pool = Pool()
        self.budget: Budget | None = None
        if budget is not None:
            ledger = ledger_path(options.store_path, session_id) if shared else None
            self.budget = Budget(budget, options.shard[1] if options.shard is not None else 1, ledger)
        self.judge_cache: JudgeCache | None = None
        if judge_cache_enabled(options.judge_cache, options.record_mode):
            # Strict in a strict replay: a judge score not cached fails its trial, no network. Not
            # in a rescore, whose point is to call the judges on the stored outputs.
            strict = options.record_mode == "none" and options.rescore is None
            # Imported only here: with the code fingerprints it needs, it costs a session
            # without the cache about 15 ms.
            from pytest_opik_eval.run.judge_cache import JUDGE_CACHE, JudgeCache

            folder = options.store_path.parent / JUDGE_CACHE
            self.judge_cache = JudgeCache(folder, strict=strict, notify=functools.partial(notice, config))
        self.recorder: Recorder | None = None
        self.batcher: Batcher | None = None  # --eval-batch, with the recorder
        # --eval-batch: what the start collected of the resumed run's batches.
        self.batches_collected: BatchReport | None = None
        self._judges: Judges | None = None

    def judges(self) -> Judges:
        """The judges' identities as the run is created, made on first use. Not the judge
        cache's: it identifies a judge when it first scores, after the fixtures that may set it
        up (a session fixture that sets its model), and an identity is kept per object."""
        if self._judges is None:
            from pytest_opik_eval.run.judges import Judges

            self._judges = Judges()
        return self._judges

    def start_recording(self, plans: Iterable[TestPlan]) -> None:
        """With --eval-record, this process's recorder, patched in until ``stop_recording``: where
        trials run (a single process, or each pytest-xdist worker), before the first one. Not in a
        rescore, which calls no task and whose judges run live, unless it batches them. Without
        --eval-record, an observing recorder when the model calls of some trials of ``plans`` (the
        tests that run, after deselection) become their spans (--eval-llm-spans): none in a
        session whose selected tests read no tool calls."""
        options = self._options
        rescore_live = options.rescore is not None and options.batch == "off"
        if rescore_live or self.recorder is not None:
            return
        if options.record_mode == "off" and not _observes(options.llm_spans, plans):
            return
        from pytest_opik_eval.run.recording import Recorder

        self.batcher = self._batcher()
        self.recorder = Recorder(
            mode=options.record_mode,
            folder=recordings_folder(options),
            session_id=self._session_id,
            worker=worker_id(self._config),
            allowed=options.record_allowed,
            # Strict replay's judges run live only without the judge cache (--eval-judge-cache=off).
            live_judges=self.judge_cache is None or not self.judge_cache.strict,
            notify=functools.partial(notice, self._config),
            batcher=self.batcher,
            run_id=None if self.batcher is None else self._run_id,
            llm_spans=options.llm_spans,
        )
        self.recorder.start()

    def _batcher(self) -> Batcher | None:
        """With --eval-batch, what defers this process's requests, knowing the run's ledger as it
        stands now (a resume collected what had ended before any trial started)."""
        options = self._options
        if options.batch == "off":
            return None
        from pytest_opik_eval.run.batching import Batcher
        from pytest_opik_eval.store.batch_ledger import Writer, load

        folder = batches_folder(options)
        return Batcher(
            mode=options.batch,
            run_id=self._run_id,
            ledger=load(folder, self._run_id),
            writer=Writer(folder, self._run_id, self._session_id, worker_id(self._config)),
            providers=dict(options.batch_providers),
            notify=functools.partial(notice, self._config),
            max_rounds=options.batch_max_rounds,
            after_cap=options.batch_after_cap,
        )

    def stop_recording(self) -> RecordingCounts | None:
        """The recorder unpatched and its journal closed (the process that ends the session folds
        the journals); what it counted, or None where none ran, or it only observed."""
        if self.recorder is None:
            return None
        self.recorder.stop()
        if self.batcher is not None:
            self.batcher.writer.close()
        return None if self.recorder.mode == "off" else self.recorder.counts()


def _observes(llm_spans: str, plans: Iterable[TestPlan]) -> bool:
    """Whether a session without --eval-record observes its trials' HTTP calls for their model
    calls' spans: --eval-llm-spans=on, or auto with a test whose metrics read the tool calls
    and vcrpy installed (the advice to a trial without spans names it)."""
    if llm_spans == "off":
        return False
    if llm_spans == "auto":
        from pytest_opik_eval.run.scoring import reads_calls

        if not any(reads_calls(plan.spec) for plan in plans) or importlib.util.find_spec("vcr") is None:
            return False
    return True
