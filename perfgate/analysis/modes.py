"""Two modes in one side's per-process time per step: a workload the noise model does not fit.

Every estimate perfgate makes treats a side's processes as draws around one level (the log
of their time per step, one mode). A workload whose processes fall into two clusters (a
real one: 22.5 ms in some processes and 25.5 ms in others, as whichever kernel, NUMA node
or clock a process happens to start with decides) breaks that: the spread between
processes is then the gap between the modes, and how many processes of each side land in
each mode moves the estimate, which can leave a gate undecided however long it runs.

:func:`bimodal` names such a side. On the logs of the per-process values (sorted), it
takes the best two-cluster split: the one that maximises the between-cluster sum of squares
(the 1-D two-means optimum, always a split of the sorted values), among the splits that
leave each cluster at least :data:`MIN_SHARE` of the processes. It calls the side bimodal
only when the two clusters' means are far apart against their own spread, by Ashman's D,
``|m2 - m1| / sqrt((s1^2 + s2^2) / 2)``, at least :data:`SEPARATION` (below
:data:`FEW_PROCESSES` processes, :data:`SEPARATION_FEW`).

Why those thresholds. For a mixture of two normals, D > 2 is the usual mark of a clean
separation; but the best split of a *unimodal* sample shows a D of its own, because
cutting at the best place truncates both halves: a normal cut at its median gives
D = 2 * 0.798 / 0.603 = 2.65 at any size, and the search over splits of a small sample
adds much more (the 99th percentile of D over 20,000 normal samples: 7.4 at 8 processes,
5.5 at 12, 4.5 at 20, 4.0 at 30, 3.5 at 60). D >= 6 keeps the false naming under 1 in 100
from 11 processes on (0.4% at 12, 0.03% at 20, none seen at 30 and 60) for normal and
lognormal times and for heavy-tailed (t with 3 df) ones; 7.5 does the same at 8 to 10
processes (0.9% at 8). It still names a mixture whose modes are 8 within-mode sds apart
(22.5 and 25.5 ms with 1.5% noise in each) about 9 times in 10 at 12 processes, and
surely from 20 on. D is a size (how far apart against the spread), not a test, so more
processes do not make it name ever closer modes. A strongly right-skewed side (a floor and
a lognormal delay of sd 1 above it) is named at 2.5% at 12 processes and under 1% from 20 on.
tests/test_report_consistency.py checks these rates with a fixed seed.

Numpy only: no torch, no files, no printing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["FEW_PROCESSES", "MIN_PROCESSES", "MIN_SHARE", "SEPARATION", "SEPARATION_FEW", "Modes", "bimodal",
           "two_clusters"]

MIN_PROCESSES = 8
"""Fewer processes than this are never called bimodal: two clusters of a handful say nothing."""
MIN_SHARE = 0.20
"""Each cluster holds at least this share of the processes (rounded up): a stray process or
two is an outlier, not a mode."""
SEPARATION = 6.0
"""Ashman's D the two clusters must reach (see the module doc)."""
FEW_PROCESSES = 11
"""Below this many processes the threshold is :data:`SEPARATION_FEW`."""
SEPARATION_FEW = 7.5


@dataclass(frozen=True)
class Modes:
    """The best two-cluster split of one side's per-process values."""

    low_ms: float
    """The faster cluster's geometric mean."""
    high_ms: float
    low_count: int
    high_count: int
    separation: float
    """Ashman's D on the logs: the clusters' mean distance over their root mean square sd
    (``math.inf`` when both clusters are without spread and apart)."""
    threshold: float
    """The D this many processes must reach to be called bimodal."""

    @property
    def bimodal(self) -> bool:
        return self.separation >= self.threshold

    @property
    def processes(self) -> int:
        return self.low_count + self.high_count

    @property
    def ratio(self) -> float:
        """How much slower the slower mode is: ``high_ms / low_ms``."""
        return self.high_ms / self.low_ms


def threshold_for(n: int) -> float:
    """The D that ``n`` processes must reach (:data:`SEPARATION`, more below :data:`FEW_PROCESSES`)."""
    return SEPARATION if n >= FEW_PROCESSES else SEPARATION_FEW


def two_clusters(values_ms: Sequence[float], *, min_share: float = MIN_SHARE) -> Modes | None:
    """The best split of ``values_ms`` (per-process time per step, ms, > 0) into two clusters
    of at least ``min_share`` each, on their logs; None below :data:`MIN_PROCESSES` values or
    when a value is not finite and positive."""
    y = np.asarray(values_ms, dtype=float)
    if y.ndim != 1 or y.size < MIN_PROCESSES or not np.all(np.isfinite(y)) or np.any(y <= 0):
        return None
    if not 0.0 < min_share <= 0.5:
        raise ValueError(f"min_share must be in (0, 0.5], got {min_share!r}")
    y = np.sort(np.log(y))
    n = y.size
    m = max(1, math.ceil(min_share * n - 1e-9))
    y = y - y.mean()  # centred: the running sums of squares below lose nothing to cancellation
    c, c2 = np.cumsum(y), np.cumsum(y * y)
    k = np.arange(m, n - m + 1)  # the low cluster holds the first k values
    s1, q1 = c[k - 1], c2[k - 1]
    s2, q2 = c[-1] - s1, c2[-1] - q1
    ss1 = np.maximum(q1 - s1 * s1 / k, 0.0)
    ss2 = np.maximum(q2 - s2 * s2 / (n - k), 0.0)
    i = int(np.argmin(ss1 + ss2))  # the least within-cluster sum of squares: the most between
    low, high = y[: k[i]], y[k[i]:]
    diff = float(high.mean() - low.mean())
    var1 = float(ss1[i]) / max(low.size - 1, 1)
    var2 = float(ss2[i]) / max(high.size - 1, 1)
    spread = math.sqrt((var1 + var2) / 2.0)
    if spread > 1e-12 * max(1.0, abs(diff)):
        separation = diff / spread
    else:
        separation = math.inf if diff > 1e-12 else 0.0
    centre = float(np.mean(np.log(np.asarray(values_ms, dtype=float))))
    return Modes(
        low_ms=math.exp(centre + float(low.mean())), high_ms=math.exp(centre + float(high.mean())),
        low_count=int(low.size), high_count=int(high.size), separation=separation, threshold=threshold_for(n))


def bimodal(values_ms: Sequence[float], *, min_share: float = MIN_SHARE) -> Modes | None:
    """The two modes of one side's per-process time per step, or None when the side is not
    clearly bimodal (see the module doc) or has too few processes to say."""
    found = two_clusters(values_ms, min_share=min_share)
    return found if found is not None and found.bimodal else None
