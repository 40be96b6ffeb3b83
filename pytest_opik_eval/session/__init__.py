"""An eval session, as small class plugins, one per phase, registered only where they are active
(as pytest's ``cacheprovider`` and ``stepwise``, and pytest-xdist's ``DSession``):

- ``start.Start``: the header line and the checks before anything runs; on the pytest-xdist
  controller, the hand-off to its workers;
- ``collection.Collection``: each eval test expanded into its trials;
- ``running.Running``: the run written before the first trial, then each trial's test case
  (``run.trial`` holds a trial's life); ``running.TrialStatus`` shows a soft failure;
- ``ending.Ending``: the verdict, the reports and the exit status; ``ending.WorkerEnding`` on a
  pytest-xdist worker, which hands what it knows to the controller.

What they share is one ``state.SessionState`` on ``config.stash``: the target the start decides
(``target``), the run's resources (``resources``) and the store (``store_handle``). Under
pytest-xdist the controller decides and the workers follow: a worker collects and runs trials,
and reports nothing; the controller collects nothing and runs no trial (it is known as such only at
``pytest_sessionstart``, when pytest-xdist has registered its ``dsession``, so ``Start`` drops
those two phases then).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_opik_eval.run.distributed import SHARD_PLUGIN
from pytest_opik_eval.session.collection import Collection
from pytest_opik_eval.session.ending import Ending, WorkerEnding
from pytest_opik_eval.session.running import Running, TrialStatus
from pytest_opik_eval.session.start import Start
from pytest_opik_eval.session.state import (
    ASYNC_CAPTURE_PLUGIN,
    CALL_REPORTS_PLUGIN,
    COLLECTION_PLUGIN,
    CONTROLLER_PLUGIN,
    ENDING_PLUGIN,
    REJECTED_ITEMS_PLUGIN,
    RUNNING_PLUGIN,
    START_PLUGIN,
    STATE,
    STATUS_PLUGIN,
    WORKER_ENDING_PLUGIN,
    SessionState,
)

if TYPE_CHECKING:
    import pytest

    from pytest_opik_eval.settings import EvalOptions

# Every plugin a session may register, for unregister().
_PLUGINS = (
    SHARD_PLUGIN,
    START_PLUGIN,
    COLLECTION_PLUGIN,
    RUNNING_PLUGIN,
    REJECTED_ITEMS_PLUGIN,
    ASYNC_CAPTURE_PLUGIN,
    CALL_REPORTS_PLUGIN,
    STATUS_PLUGIN,
    ENDING_PLUGIN,
    WORKER_ENDING_PLUGIN,
    CONTROLLER_PLUGIN,
)


def register(config: pytest.Config, options: EvalOptions) -> None:
    """Registers the phases of an eval session (``--eval``, ``--eval-resume`` or
    ``--eval-rescore``) that this process runs."""
    state = config.stash[STATE] = SessionState(config, options)
    plugins: dict[str, object] = {}
    if state.shards is not None:
        plugins[SHARD_PLUGIN] = state.shards
    if state.worker:
        plugins[COLLECTION_PLUGIN] = Collection(state)
        plugins[RUNNING_PLUGIN] = Running(state)
        plugins[WORKER_ENDING_PLUGIN] = WorkerEnding(state)
    else:
        plugins[START_PLUGIN] = Start(state)
        plugins[COLLECTION_PLUGIN] = Collection(state)
        plugins[RUNNING_PLUGIN] = Running(state)
        plugins[STATUS_PLUGIN] = TrialStatus(config)
        plugins[ENDING_PLUGIN] = Ending(state)
    for name, plugin in plugins.items():
        config.pluginmanager.register(plugin, name)


def unregister(config: pytest.Config) -> None:
    """Unregisters whatever ``register`` (and the phases since) registered."""
    for name in _PLUGINS:
        plugin = config.pluginmanager.get_plugin(name)
        if plugin is not None:
            config.pluginmanager.unregister(plugin, name)
