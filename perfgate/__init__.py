"""perfgate: a CI performance-regression gate for PyTorch training.

The public API for writing workloads lives here and does not import torch; the
measuring side (``perfgate.measure``) is the only part that does.
"""

from perfgate.model.verdict import Verdict
from perfgate.model.version import __version__
from perfgate.model.workload import PHASES, BuildContext, Built, DataSource, Params, Workload

__all__ = ["PHASES", "BuildContext", "Built", "DataSource", "Params", "Verdict", "Workload", "__version__", "history"]


def __getattr__(name: str) -> object:
    """``perfgate.history``: the history store as a pandas DataFrame (``perfgate.history.load``),
    imported on first use so that ``import perfgate`` stays light (no pandas)."""
    if name == "history":
        import importlib

        return importlib.import_module("perfgate.analysis.history")
    raise AttributeError(f"module 'perfgate' has no attribute {name!r}")
