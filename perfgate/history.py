"""``import perfgate.history``: the history store as a pandas DataFrame.

The public name of :mod:`perfgate.analysis.history` (the module ``perfgate history record``'s
store is read by), so that a notebook writes ``perfgate.history.load(path)`` after either
``import perfgate`` or ``import perfgate.history``. It imports pandas; ``import perfgate``
alone does not (the package loads this module on first use of the attribute).
"""

from __future__ import annotations

from perfgate.analysis.history import DTYPES, SERIES_COLUMNS, VALUE_COLUMNS, frame, load, per_run, run_series

__all__ = ["DTYPES", "SERIES_COLUMNS", "VALUE_COLUMNS", "frame", "load", "per_run", "run_series"]
