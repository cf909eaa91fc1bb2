"""pytest plugin entry point (``pytest11``): inert unless ``--perfgate`` is given."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("perfgate", "performance-regression gate for PyTorch training")
    group.addoption("--perfgate", action="store_true", default=False,
                    help="run the perfgate workloads as tests and gate them against the baselines")
