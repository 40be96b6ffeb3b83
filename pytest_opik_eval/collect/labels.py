"""Human labels in a dataset item: a JSON object under the labels field (``labels`` unless the
marker's ``labels_field`` or the ini key ``eval_labels_field`` names another) mapping a score's
name to a human verdict, ``true``/``false`` or a number from 0 to 1.

The item's snapshot keeps them (resume and calibration read them); the task and the metrics get
the item without them (``for_task``), so that no label can leak into what it is compared with.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_opik_eval.escaping import shorten
from pytest_opik_eval.options import LABELS_FIELD as LABELS_FIELD


def label_problem(value: object, field: str) -> str | None:
    """Why ``value`` (an item's ``field``) is not a labels object, or None when it is."""
    example = f'e.g. "{field}": {{"correctness": true, "relevance": 0.8}}'
    if not isinstance(value, Mapping):
        return (
            f'"{field}" must be an object mapping score names to human verdicts, {example}; '
            f"got {_show(value)}"
        )
    for name, label in value.items():
        if isinstance(label, bool):
            continue
        if isinstance(label, (int, float)) and math.isfinite(label) and 0 <= label <= 1:
            continue
        return (
            f'"{field}"[{_show(name)}] must be true, false or a number from 0 to 1 (a human score), '
            f"got {_show(label)}; fix the label, or remove it"
        )
    return None


def for_task(item: dict[str, Any], field: str) -> dict[str, Any]:
    """The item as the task and the metrics see it: without its labels (the same dict when it
    has none)."""
    if field not in item:
        return item
    return {k: v for k, v in item.items() if k != field}


def with_labels(
    items: Sequence[dict[str, Any]], field: str, found: Mapping[str, Mapping[str, float]]
) -> list[dict[str, Any]]:
    """The items with the labels ``found`` (by item id, then score name) added under ``field``;
    a label an item has for a score already wins (the dataset's own, reviewed with it)."""
    return [_labelled(item, field, found.get(str(item["id"]))) for item in items]


def _labelled(item: dict[str, Any], field: str, found: Mapping[str, float] | None) -> dict[str, Any]:
    if not found:
        return item
    own = item.get(field)
    return {**item, field: {**found, **(own if isinstance(own, Mapping) else {})}}


def _show(value: object) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return shorten(text, 60)  # escaped with the whole message, where it is shown
