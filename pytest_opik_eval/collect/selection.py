"""Which dataset items an experiment evaluates: item_ids, then the filter, then nb_samples, then
the sampler, as in the Opik SDK."""

from __future__ import annotations

from typing import Any

from pytest_opik_eval.collect.marker import EvalSpec
from pytest_opik_eval.filtering import FilterError
from pytest_opik_eval.store.records import Selection

# A dataset on the Opik server ("opik:NAME") arrives filtered by the server, so its items cannot
# tell a misspelt key from one that only the items left out have: the server's answer stands.
_SERVER_FILTERED = "opik:"


class SelectionError(ValueError):
    """The marker selects items that do not exist; the message names them."""


def select_items(items: list[dict[str, Any]], spec: EvalSpec, source: str) -> list[dict[str, Any]]:
    """Return the selected items, in the order they will run."""
    selected = items
    if spec.item_ids is not None:
        by_id = {item["id"]: item for item in items}
        unknown = [item_id for item_id in spec.item_ids if item_id not in by_id]
        if unknown:
            raise SelectionError(
                f"item_ids names {len(unknown)} id(s) not in {source}: "
                + ", ".join(repr(i) for i in unknown[:10])
                + ("" if len(unknown) <= 10 else ", ...")
                + '; name items by their "id" (items without one get an id from their content:'
                " see the node ids of pytest --eval --co)"
            )
        selected = [by_id[item_id] for item_id in spec.item_ids]
    if spec.filter is not None:
        if not source.startswith(_SERVER_FILTERED):
            try:
                spec.filter.check_keys(items, source)
            except FilterError as error:
                raise SelectionError(str(error)) from None
        selected = [item for item in selected if spec.filter.matches(item)]
    if spec.nb_samples is not None:
        selected = selected[: spec.nb_samples]
    if spec.sampler is not None:
        selected = list(spec.sampler.sample(list(selected)))
    return selected


def describe_selection(spec: EvalSpec) -> Selection:
    """The selection as it is stored with the experiment and compared on resume."""
    return Selection(
        filter=spec.filter.text if spec.filter is not None else None,
        item_ids=list(spec.item_ids) if spec.item_ids is not None else None,
        nb_samples=spec.nb_samples,
        sampler=spec.sampler_description(),
        trial_count=spec.trial_count,
    )
