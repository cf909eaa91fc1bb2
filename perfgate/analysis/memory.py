"""The peak-memory rule: a comparison's memory row beside the step's verdict.

The median peak memory over the current repeats against the reference's; growth above the
threshold (``memory_threshold``, 10% by default) is a REGRESSION. No sequential looks and no
test: the peak of a repeat is nearly deterministic, and a growth beyond a tenth is a fact to
report, not a noise to weigh.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median

import numpy as np

from perfgate.model.verdict import Verdict


@dataclass(frozen=True)
class MemoryDecision:
    """Peak memory: REGRESSION or PASS, or ``verdict=None`` when it cannot be compared."""

    verdict: Verdict | None
    ratio: float | None
    reason: str


def decide_memory(
    current: Sequence[float] | None,
    baseline: Sequence[float] | None,
    threshold: float = 0.10,
) -> MemoryDecision:
    """Ratio of median peak memory, current / baseline; growth above ``threshold`` fails."""
    if not (isinstance(threshold, (int, float)) and not isinstance(threshold, bool) and math.isfinite(threshold) and threshold > 0):
        raise ValueError(f"threshold must be > 0, got {threshold!r}")
    sides: list[np.ndarray] = []
    for what, values in (("current run", current), ("baseline", baseline)):
        if values is None or len(values) == 0:
            return MemoryDecision(None, None, f"peak memory not compared: not recorded in the {what}")
        arr = np.asarray(values, dtype=float)
        if not np.all(np.isfinite(arr)) or np.any(arr < 0):
            raise ValueError(f"peak memory of the {what} must be finite and >= 0")
        sides.append(arr)
    cur, base = (median(a.tolist()) for a in sides)
    if base <= 0:
        return MemoryDecision(None, None, "peak memory not compared: the baseline recorded 0 bytes")
    ratio = cur / base
    head = f"peak memory {(ratio - 1) * 100:+.1f}% (median of {sides[0].size} vs {sides[1].size} repeats)"
    limit = f"the {threshold * 100:g}% threshold"
    if ratio > 1 + threshold:
        return MemoryDecision(Verdict.REGRESSION, ratio, f"{head}, above {limit}")
    return MemoryDecision(Verdict.PASS, ratio, f"{head}, within {limit}")
