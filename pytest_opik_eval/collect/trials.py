"""What a trial is: the plan of one eval test (``TestPlan``), the parameter of each of its test
cases (``TrialCase``: an item and a trial index), and the runtime state of a trial (``Trial``,
kept in its test case's stash under ``TRIAL_KEY``).

Collection makes them (``planning``, ``resume``, ``rescore``) and ``run/`` executes them, reading
their types from here: run/ sits above collect/, which never imports what runs a trial (run/
builds each test's scorer itself, see ``run.scoring.scorer_of``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

from pytest_opik_eval.collect.labels import LABELS_FIELD, for_task
from pytest_opik_eval.ids import case_id

if TYPE_CHECKING:
    from pytest_opik_eval.collect.marker import EvalSpec
    from pytest_opik_eval.store.records import (
        DatasetRecord,
        ExperimentRecord,
        GateSettings,
        ScoreRecord,
        Selection,
    )

# The hidden parameter that carries each test case's trial; it is not a fixture.
CASE_ARG = "_opik_eval_trial"


@dataclass(eq=False)
class TestPlan:
    """One eval test function: what its marker selected, shared by all its test cases."""

    __test__ = False  # not a test class, despite its name

    test: str  # node id of the test function
    name: str  # the function's name
    spec: EvalSpec
    dataset: DatasetRecord
    selection: Selection
    items: list[dict[str, Any]]
    gates: GateSettings  # in force for this test's experiments
    threads: int  # trials of this test that may run at the same time
    # When resuming: the stored experiments of this test, by their parametrize id.
    resumed: dict[str, ExperimentRecord] = field(default_factory=dict)
    # When rescoring: the id of the stored experiment each new one scores again, by parametrize id.
    rescore_of: dict[str, str] = field(default_factory=dict)
    # A rescore's --eval-metric specs (or a resumed rescore's, as stored), kept with its experiments.
    metric_specs: tuple[str, ...] = ()
    # The test as messages name it: its node id, and its file and line ("t.py::test_qa (t.py:12)").
    where: str = ""
    # Dataset items set aside (nested too deep to process): each is a failing test case.
    rejected: list[RejectedItem] = field(default_factory=list)
    # The item key of human labels (the marker's, the ini's, or a resumed experiment's).
    labels_field: str = LABELS_FIELD
    # Times each LLM judge scores a trial's output (the marker's, else the option's).
    judge_samples: int = 1
    # The marker's --eval-batch mode for this test (on, strict, off); None: the session's.
    batch: str | None = None
    # What the phases after collection keep for the whole test, as pytest's nodes have a stash:
    # the run keeps its scorer there (see ``run.scoring.scorer_of``).
    stash: pytest.Stash = field(default_factory=pytest.Stash)

    def experiment_name(self, params: str) -> str:
        name = self.spec.experiment_name or self.name
        return f"{name}[{params}]" if params else name


@dataclass(frozen=True)
class RejectedItem:
    """The parameter of a test case that stands for a dataset item that could not be processed:
    it fails with ``message`` (naming the file and line) while the other items run."""

    place: str  # "line 3", "item 2"
    message: str

    @property
    def case_id(self) -> str:
        return "invalid-" + self.place.replace(" ", "")

    def __repr__(self) -> str:
        return f"RejectedItem({self.case_id})"


# Slots (no __dict__ each): one TrialCase and one Trial per trial live for the whole session, and
# every full pass of the garbage collector walks them. Not frozen: a frozen dataclass sets each
# field through object.__setattr__, twice the cost of building one (made for every trial, at
# collection); nothing assigns a field after it is built.
@dataclass(eq=False, slots=True)
class TrialCase:
    """The parameter of one test case: an item and a trial index of a plan."""

    plan: TestPlan
    item: dict[str, Any]
    trial: int
    case_id: str = field(init=False)  # its id among the test's cases: every case's is needed

    def __post_init__(self) -> None:
        self.case_id = case_id(self.item_id, self.trial)

    @property
    def item_id(self) -> str:
        return str(self.item["id"])

    @property
    def task_item(self) -> dict[str, Any]:
        """The item as the task and the metrics get it: without its human labels."""
        return for_task(self.item, self.plan.labels_field)

    def __repr__(self) -> str:
        return f"TrialCase({self.case_id})"


@dataclass(eq=False, slots=True)
class Trial:
    """The runtime state of one trial test case (kept in the item's stash)."""

    case: TrialCase
    params: str  # the test's other parametrize ids: with the test, names the experiment
    experiment_id: str | None = None  # known once the run is created or resumed
    trial_id: str | None = None
    attempt_id: str | None = None
    output: dict[str, Any] | None = None
    # None until scored and once recorded: 100,000 empty lists would lengthen every pass of the
    # garbage collector, and the end of the process.
    scores: list[ScoreRecord] | None = None
    passed: bool | None = None
    reached_happy_path: bool = False
    soft_failure: str | None = None  # the message of a soft trial that missed its thresholds
    completed_attempt: str | None = None  # the attempt this session completed, if any
    # A rescore's: the output the original trial's completed attempt stored, scored in place of
    # the task's (the task is not called); and the id of the trial that called the task (that
    # one, or for a rescore of a rescore the first's), whose stored spans give the tool calls its
    # metrics read (run/rescored.py).
    stored_output: dict[str, Any] | None = None
    original: str | None = None


# Each trial test case carries its Trial in its stash.
TRIAL_KEY = pytest.StashKey[Trial]()

# The task's arguments that are its trial's own: the trial passes them to the task itself, and
# they are kept out of pytest's fixture setup (see session/collection.py), which costs
# more per test case than a trivial task does. The fixtures of the same names serve the rest.
OWN_ARGS = frozenset({"eval_item", "eval_trial", "eval_conversation"})

ANYIO_BACKEND = "anyio_backend"  # the fixture through which anyio's pytest plugin runs a test
