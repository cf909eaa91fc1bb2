"""perfgate: a CI performance-regression gate for PyTorch training.

The public API for writing workloads lives here and does not import torch; the
measuring side (``perfgate.measure``) is the only part that does. What needs torch or the
statistics (``make_loader``, the comparison a pytest test is handed, ``history``) is
imported on first use, so that ``import perfgate`` stays light: listing workloads and
comparing results never load torch, pandas or scipy.
"""

from perfgate.model.verdict import Verdict
from perfgate.model.version import __version__
from perfgate.model.workload import PHASES, BuildContext, Built, DataSource, Params, Workload

_LAZY = {
    "history": ("perfgate.history", ""),
    "make_loader": ("perfgate.measure.loader", "make_loader"),
    "WorkloadComparison": ("perfgate.analysis.outcome", "WorkloadComparison"),
    "PhaseRow": ("perfgate.analysis.outcome", "PhaseRow"),
    "PhaseFlag": ("perfgate.analysis.decide", "PhaseFlag"),
    "TimeDecision": ("perfgate.analysis.decide", "TimeDecision"),
    "MemoryDecision": ("perfgate.analysis.memory", "MemoryDecision"),
    "LogRatio": ("perfgate.analysis.stats", "LogRatio"),
}
"""Names imported on first use: ``{name: (module, attribute)}`` (no attribute: the module).

``make_loader`` is :func:`perfgate.measure.loader.make_loader` (torch). The others are the
types of the ``perfgate_comparison`` pytest fixture's value and of what it holds
(``comparison.phases[i].flag.estimate.ratio``), for a test's annotations and ``isinstance``."""

__all__ = ["PHASES", "BuildContext", "Built", "DataSource", "Params", "Verdict", "Workload", "__version__",
           *_LAZY]


def __getattr__(name: str) -> object:
    """A name of :data:`_LAZY`, imported now and kept on the package."""
    if name in _LAZY:
        import importlib

        module, attribute = _LAZY[name]
        value = importlib.import_module(module)
        if attribute:
            value = getattr(value, attribute)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'perfgate' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
