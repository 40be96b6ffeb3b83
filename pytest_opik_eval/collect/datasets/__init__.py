"""Loading evaluation datasets from files, lists and callables."""

from pytest_opik_eval.collect.datasets.loading import Dataset, DatasetError, load_dataset
from pytest_opik_eval.ids import canonical_json, content_hash, content_id

__all__ = ["Dataset", "DatasetError", "canonical_json", "content_hash", "content_id", "load_dataset"]
