"""Which metrics are LLM judges, and each judge's identity: what the judge cache keys its scores
by (``run/judge_cache.py``) and what a calibration against human labels is kept for
(``ExperimentRecord.judges``), so that a judge whose prompt, model or code changed is a new judge.

A metric is a judge when its class says so (``judge = True``, on this package's ``BaseMetric``
or any metric), or when it is one of the Opik SDK's LLM-judge metrics: it holds an Opik model
(an ``OpikBaseModel``) among its attributes, or its class comes from the SDK's ``llm_judges``.
Heuristic metrics are cheap and deterministic: no identity.

A judge's identity is the sha256 of a canonical JSON of: the metric's class (module and
qualified name), the version of the library it comes from, its code (``run/fingerprint.py``: the
source of the class and of its bases that are the project's, their class attributes, and what the
methods scoring runs read, followed through the project's functions and modules transitively),
and the metric's whole configuration (its attributes, recursively: the model and its name, the
prompt, the temperature, a client by its endpoint...), secrets masked; or, when the metric gives
its own key (``judge_cache_key``), that key and the source of its classes.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from pytest_opik_eval.ids import sampled_judge

if TYPE_CHECKING:
    from pytest_opik_eval.run.fingerprint import Fingerprint

# The fingerprints (and the masking they use) are imported by the first judge's identity: they
# cost about 15 ms, which a session whose metrics are no judges never pays.

FORMAT = 2  # of an identity (and of the judge cache's keys and files): a new format starts anew
# What a metric defines to give its own key: a method (or a value) returning what decides its
# score, where the plugin cannot see it all (a prompt read from a file when it scores).
OWN_KEY = "judge_cache_key"

# How deep a metric's configuration is walked (a model inside the metric, its client, its
# settings...).
_CONFIGURATION_DEPTH = 12


@dataclasses.dataclass(frozen=True)
class Judge:
    digest: str  # of the metric's class, code, library version and configuration
    about: dict[str, Any]  # the readable parts, stored with each cached result
    unknown: tuple[str, ...] = ()  # what decides its score that the digest cannot see


class Judges:
    """The identities of one process's judges, computed once per metric object, on first use;
    ``environ``'s secrets are masked (read again whenever it changed: a key a session fixture
    sets is masked too)."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        from pytest_opik_eval.masking import EnvironmentSecrets
        from pytest_opik_eval.run.fingerprint import Fingerprints

        environ = os.environ if environ is None else environ
        self.secrets = EnvironmentSecrets(environ)
        self.fingerprints = Fingerprints(self.secrets, environ)
        # One judge fingerprinted at a time: the fingerprints' memos of code are shared (the
        # judge cache fingerprints score() inputs under it too).
        self.identifying = threading.Lock()
        self._lock = threading.Lock()
        # By id(): a metric object may not be hashable. The metric is kept, so its id stays its own.
        self._judges: dict[int, tuple[Any, Judge | None]] = {}

    def of(self, metric: Any) -> Judge | None:
        """The metric's identity; None if it is not a judge."""
        with self._lock:
            known = self._judges.get(id(metric))
        if known is not None:
            return known[1]
        with self.identifying:
            if id(metric) not in self._judges:  # another thread may have just identified it
                judge = self._identify(metric) if is_judge(metric) else None
                with self._lock:
                    self._judges[id(metric)] = (metric, judge)
        return self._judges[id(metric)][1]

    def digests(self, metrics: Iterable[Any], samples: int = 1) -> dict[str, str]:
        """The judges among ``metrics`` by their ``name``, each one's identity (its digest, with
        ``samples``: ``ids.sampled_judge``), as the run is created: before any trial, a judge's
        name is the best guess at the name of the score it gives, as labels and gates name it
        (true of this package's metrics and the Opik SDK's). A judge that names its scores
        otherwise, or gives several, is recorded under their names when its trials return them
        (``ScoreNames``)."""
        found = {}
        for metric in metrics:
            judge = self.of(metric)
            if judge is not None:
                found[str(judge.about["name"])] = sampled_judge(judge.digest, samples)
        return found

    def masked(self, value: Any) -> Any:
        """``value`` (JSON data) scrubbed as the recordings are (see ``masking``), with the
        environment's secrets as it is now."""
        from pytest_opik_eval.masking import Scrubber

        return Scrubber(self.secrets).value(value)

    def _identify(self, metric: Any) -> Judge:
        from pytest_opik_eval.run.fingerprint import Fingerprint, digest, qualified

        cls = type(metric)
        library = cls.__module__.split(".")[0]
        about = {
            "class": qualified(cls),
            "name": str(getattr(metric, "name", cls.__name__)),
            "model": _model_name(metric),
            "library": library,
            "library_version": self.fingerprints.version(library),
        }
        about = self.masked(about)
        if getattr(metric, OWN_KEY, None) is not None:
            # Its author says what decides its score: that, and the source of its classes.
            code = Fingerprint(self.fingerprints.sources(cls))
            configuration = self._own_key(metric)
        else:
            # The code of its class and bases, and what it reaches; its configuration.
            code = self.fingerprints.class_code(cls)
            configuration = self.fingerprints.configuration(metric, _CONFIGURATION_DEPTH)
        parts = {"format": FORMAT, **about, "code": code.data, "configuration": configuration.data}
        unknown = tuple(dict.fromkeys(code.unknown + configuration.unknown))
        return Judge(digest(parts), about, unknown)

    def _own_key(self, metric: Any) -> Fingerprint:
        """What the metric's ``judge_cache_key`` (a method, or a value) says decides its score."""
        from pytest_opik_eval.run.fingerprint import Fingerprint, qualified

        where = f"{qualified(type(metric))}.{OWN_KEY}"
        own = getattr(metric, OWN_KEY)
        try:
            value = own() if callable(own) else own
        except Exception as error:
            return Fingerprint(None, (f"{where}() raised {type(error).__name__}: {error}",))
        return self.fingerprints.of(value, _CONFIGURATION_DEPTH, where)


# Where learned names go: the test, then score name -> the judge's identity, or None for a name
# that is no judge's (see ``learned_judges`` in store/records.py).
LearnedNames = Callable[[str, dict[str, str | None]], None]


class ScoreNames:
    """The names of the scores each judge gives, learned as trials are scored (``run/scoring.py``'s
    ``JudgeScorer`` tells it the names each metric of a test returned the first time it returned
    them), for the experiments' records (``ExperimentRecord.judges``): labels, calibrations and
    gates name a judge's scores, which need not have its name, and may be several.

    ``learned`` is given each change, in order: a score name with its judge's identity; a judge's
    own name that none of its scores has (recorded as the run was created, ``Judges.digests``)
    with None. A score name that a judge and another metric of the same test both give is no
    judge's (None): its scores mix two metrics', so no calibration can hold for them; ``notify``
    says so, once, and how to fix it.

    One per process, made only when a test of the process has a judge: a session without one
    pays nothing for it."""

    def __init__(
        self, judges: Judges, learned: LearnedNames, notify: Callable[[str], None], samples: Mapping[str, int]
    ) -> None:
        """``samples``: each test's ``judge_samples``, part of its judges' identities."""
        self._judges = judges
        self._learned = learned
        self._notify = notify
        self._samples = samples
        self._lock = threading.Lock()
        # test -> score name -> the metrics that gave it: by id(), their label, and their identity
        # (None for a metric that is no judge).
        self._given: dict[str, dict[str, dict[int, tuple[str, str | None]]]] = {}
        self._named: set[tuple[str, int]] = set()  # the judges whose own name was checked

    def given(self, test: str, metric: Any, names: Iterable[str]) -> None:
        """``metric`` of ``test`` returned scores of ``names``, which it had not returned before."""
        judge = self._judges.of(metric)
        label = f"{'judge' if judge else 'metric'} {type(metric).__name__} ({getattr(metric, 'name', '?')!r})"
        mine = None if judge is None else sampled_judge(judge.digest, self._samples.get(test, 1))
        with self._lock:
            given = self._given.setdefault(test, {})
            update: dict[str, str | None] = {}
            for name in names:
                givers = given.setdefault(name, {})
                givers[id(metric)] = (label, mine)
                if not any(j for _, j in givers.values()):
                    continue  # no judge gives it: nothing to record
                update[name] = link = self._link(givers)
                if link is None:
                    who = " and ".join(sorted(g for g, _ in givers.values()))
                    self._notify(
                        f"{test}: score {name!r} is given by {who}: it is no judge's score, so no "
                        "calibration against human labels holds for it and its gates are not "
                        "corrected for a judge's errors; give each metric's scores names of their "
                        "own (the name of the ScoreResult the judge returns)"
                    )
            if judge is not None and (test, id(metric)) not in self._named:
                self._named.add((test, id(metric)))
                own = str(judge.about["name"])
                # Recorded as the run was created: not a score it gives, unless a judge gives it.
                if own not in update and not any(j for _, j in given.get(own, {}).values()):
                    update[own] = None
            if update:
                self._learned(test, update)

    @staticmethod
    def _link(givers: Mapping[int, tuple[str, str | None]]) -> str | None:
        """The judge a score name is linked to: its only giver, if that is a judge."""
        if len(givers) != 1:
            return None
        ((_, judge),) = givers.values()
        return judge


def is_judge(metric: Any) -> bool:
    """Whether ``metric`` calls an LLM judge: its class says so (``judge = True``), or it is an
    Opik SDK LLM-judge metric (it holds an Opik model, or comes from the SDK's ``llm_judges``),
    or it scores a conversation turn by turn with one (``PerTurn``)."""
    # Looked up, not imported: a PerTurn exists only where its module was imported.
    conversation = sys.modules.get("pytest_opik_eval.metrics.conversation")
    if conversation is not None and isinstance(metric, conversation.PerTurn):
        return is_judge(metric.metric)  # a judge's, turn by turn, is a judge
    declared = getattr(type(metric), "judge", None)
    if isinstance(declared, bool):
        return declared
    module = type(metric).__module__
    if module.startswith("opik.") and (".llm_judges." in module or module.endswith(".ragas_metric")):
        return True
    # Loaded if, and only if, an Opik model exists in this process: no import for other metrics.
    models = sys.modules.get("opik.evaluation.models.base_model")
    model_class = getattr(models, "OpikBaseModel", None)
    if model_class is None:
        return False
    from pytest_opik_eval.run.fingerprint import attributes

    return any(isinstance(v, model_class) for v in attributes(metric).values())


def _model_name(metric: Any) -> str | None:
    """The judge's model, for a reader of the cache: a ``model``/``model_name`` string attribute,
    or that of a model object the metric holds."""
    from pytest_opik_eval.run.fingerprint import attributes

    for name, value in sorted(attributes(metric).items()):
        if name.lstrip("_") in ("model", "model_name") and isinstance(value, str):
            return value
        inner = getattr(value, "model_name", None) if not isinstance(value, (str, int, float)) else None
        if isinstance(inner, str):
            return inner
    return None
