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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``gpu`` are skipped, with the reason, where torch has no usable CUDA device."""
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items or cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device: torch.cuda.is_available() is False here")
    for item in gpu_items:
        item.add_marker(skip)
