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
