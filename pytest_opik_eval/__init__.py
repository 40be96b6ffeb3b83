"""pytest-opik-eval: LLM evaluations as pytest tests, recorded in a store and resumable.

Public names live in their modules, so that importing this package (which pytest does in every
run) costs nothing: ``pytest_opik_eval.metrics``, ``pytest_opik_eval.samplers`` and
``pytest_opik_eval.exceptions``.
"""

__version__ = "0.1.0"
