"""``python -m pytest_opik_eval.cli``: the ``opik-eval`` command without its script."""

import sys

from pytest_opik_eval.cli import main

sys.exit(main())
