"""perfgate: a CI performance-regression gate for PyTorch training.

The public API for writing workloads lives here and does not import torch; the
measuring side (``perfgate.measure``) is the only part that does.
"""

from perfgate.model.verdict import Verdict
from perfgate.model.version import __version__
from perfgate.model.workload import PHASES, BuildContext, Built, DataSource, Params, Workload

__all__ = ["PHASES", "BuildContext", "Built", "DataSource", "Params", "Verdict", "Workload", "__version__"]
