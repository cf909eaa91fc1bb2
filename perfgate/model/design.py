"""What a runner has measured of a workload's noise and costs: the evidence ``windows = "auto"`` designs from.

One :class:`DesignEvidence` is what one paired gate measured of one workload on one runner:
the variance of log time per step between processes (each side's mean and each block's
removed) and between windows inside a process, with their degrees of freedom, and the
seconds a process costs beyond its timed windows and one window costs. The runner keeps the
last few gates' evidence per workload (:mod:`perfgate.store.design_cache`); the measuring side
records the pooled evidence it designed from in ``run.json``, and the judge re-derives the
design from that record (:func:`perfgate.analysis.design.choose_windows`).

Read back from a file it is untrusted data: :meth:`DesignEvidence.from_dict` refuses anything
but finite, non-negative numbers in their ranges, with a ValueError naming the field.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["AUTO_WINDOWS", "DesignEvidence"]

AUTO_WINDOWS = "auto"
"""The ``windows`` setting that designs each workload's windows from this runner's evidence."""

_MAX_DF = 10**7
_MAX_SECONDS = 7 * 24 * 3600.0


@dataclass(frozen=True)
class DesignEvidence:
    """One workload's noise and costs on a runner (one gate's, or several gates' pooled)."""

    process_var: float
    """Variance of log time per step between processes of one side in one block (σ_P²)."""
    process_df: int
    window_var: float
    """Variance of log time per step between windows of one process (σ_W², the steps' share at the
    workload's steps per window included)."""
    window_df: int
    process_s: float
    """Seconds one process costs beyond its timed windows: its start or fork, build and warmup,
    and its share of what its block costs beyond its processes (a forking start's template)."""
    window_s: float
    """Seconds one timed window costs."""
    gates: int = 1
    """How many gates' evidence this is."""

    def __post_init__(self) -> None:
        for name in ("process_var", "window_var", "process_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if isinstance(self.window_s, bool) or not isinstance(self.window_s, (int, float)) \
                or not math.isfinite(self.window_s) or self.window_s <= 0:
            raise ValueError(f"window_s must be a finite number > 0, got {self.window_s!r}")
        if self.process_s > _MAX_SECONDS or self.window_s > _MAX_SECONDS:
            raise ValueError(f"process_s and window_s must be under {_MAX_SECONDS:.0f} s")
        for name in ("process_df", "window_df", "gates"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= _MAX_DF:
                raise ValueError(f"{name} must be an integer from 1 to {_MAX_DF}, got {value!r}")

    def to_dict(self) -> dict[str, Any]:
        return {"process_var": self.process_var, "process_df": self.process_df, "window_var": self.window_var,
                "window_df": self.window_df, "process_s": self.process_s, "window_s": self.window_s,
                "gates": self.gates}

    @classmethod
    def from_dict(cls, data: object) -> DesignEvidence:
        """The evidence a file holds; ValueError naming what is wrong (unknown keys included)."""
        if not isinstance(data, Mapping):
            raise ValueError(f"design evidence must be a table, got {type(data).__name__}")
        fields = ("process_var", "process_df", "window_var", "window_df", "process_s", "window_s", "gates")
        unknown = sorted(str(k) for k in data if k not in fields)
        if unknown:
            raise ValueError(f"design evidence: unknown field {unknown[0]!r}")
        missing = [f for f in fields if f not in data]
        if missing:
            raise ValueError(f"design evidence: {missing[0]} missing")
        return cls(**{f: data[f] for f in fields})
