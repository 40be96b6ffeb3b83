"""What an eval session works on, decided once at its start and never changed: made by
``start.Start`` on the process that reports, handed by the pytest-xdist controller to its workers.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pytest_opik_eval.collect.rescore import RescoreTarget
from pytest_opik_eval.collect.resume import ResumeTarget
from pytest_opik_eval.ids import uuid7, uuid7_from_name
from pytest_opik_eval.store.records import BudgetSetting
from pytest_opik_eval.verdict.summary import Baselines


@dataclasses.dataclass(frozen=True)
class Target:
    """The session's id and its run's; the run it resumes (``--eval-resume``) or the experiments
    it rescores (``--eval-rescore``); the baselines its regression gates compare with
    (``--eval-baseline``, only where the session is judged), and the run whose calibrations its
    judges' drift is measured against (``--eval-judge-drift-since``, likewise); and the budget it
    decided on (this command line's, or the resumed run's, counted afresh)."""

    session_id: str
    run_id: str
    resume: ResumeTarget | None = None
    rescore: RescoreTarget | None = None
    baselines: Baselines | None = None
    budget: BudgetSetting | None = None
    drift_since: str | None = None  # a run's id

    @classmethod
    def new(
        cls,
        *,
        run_name: str | None,
        resume: ResumeTarget | None,
        rescore: RescoreTarget | None,
        baselines: Baselines | None,
        budget: BudgetSetting | None,
        drift_since: str | None = None,
    ) -> Target:
        """This session's target: a fresh session id; the resumed run's id, else one named after
        ``run_name`` (--eval-run-name), else a fresh one."""
        if resume is not None:
            run_id = resume.run.id
        else:
            run_id = uuid7_from_name(run_name) if run_name else uuid7()
        return cls(uuid7(), run_id, resume, rescore, baselines, budget, drift_since)

    def handoff(self) -> dict[str, Any]:
        """What the pytest-xdist controller hands its workers (JSON-safe: it crosses to them). Not
        the baselines or the drift's reference: a worker judges nothing."""
        return {
            "run_id": self.run_id,
            "session_id": self.session_id,
            "resume": None if self.resume is None else self.resume.to_json(),
            "rescore": None if self.rescore is None else self.rescore.to_json(),
            "budget": None if self.budget is None else self.budget.model_dump(mode="json"),
        }

    @classmethod
    def handed(cls, handoff: dict[str, Any]) -> Target:
        """A worker's target: the one its controller decided on."""
        resume, rescore, budget = handoff["resume"], handoff.get("rescore"), handoff.get("budget")
        return cls(
            session_id=handoff["session_id"],
            run_id=handoff["run_id"],
            resume=None if resume is None else ResumeTarget.from_json(resume),
            rescore=None if rescore is None else RescoreTarget.from_json(rescore),
            budget=None if budget is None else BudgetSetting.model_validate(budget),
        )
