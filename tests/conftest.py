from __future__ import annotations

import shutil
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def tiny_path(tmp_path: Path) -> Path:
    """A workloads directory holding the tiny test workloads."""
    target = tmp_path / "tiny_workloads"
    target.mkdir()
    shutil.copy(FIXTURES / "tiny_workloads.py", target / "tiny_workloads.py")
    return target


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects anything, so that it sees the added marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every ``extended`` test is ``slow`` too, and tests marked ``gpu`` are skipped, with the
    reason, where torch has no usable CUDA device.

    The two lanes: ``pytest -m "not slow"`` is the fast one (a minute at most on a shared
    2-core machine). A command-line ``-m`` replaces pyproject's ``-m "not extended"``, so
    the fast lane leaves out the extended runs only because they are slow as well; the
    README's ``pytest -q`` keeps pyproject's selection and runs everything but ``extended``.
    """
    for item in items:
        if item.get_closest_marker("extended") is not None and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.slow)
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items or cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device: torch.cuda.is_available() is False here")
    for item in gpu_items:
        item.add_marker(skip)
