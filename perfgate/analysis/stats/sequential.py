"""Sequential looks: α spent over many looks by a spending function.

The gate looks again after every block (paired) or repeat (stored baseline), from its first
look up to a planned maximum, and stops a workload as soon as it is decided. Each look tests
at a *nominal* one-sided level that this module computes so that the chance of ever crossing
the boundary, over all looks, is exactly the total α (a group-sequential boundary; Lan and
DeMets' α-spending, with Hwang, Shih and DeCani's family of spending functions).

- The statistic at look k is ``Z_k = W(t_k) / sqrt(t_k)`` with ``W`` a Brownian motion and
  ``t_k`` the look's information fraction (its count over the last look's: blocks for a
  paired gate, whose blocks are independent; repeats for a stored baseline, whose looks are
  more correlated than that, so the boundary errs on the safe side there, by Slepian's
  inequality).
- ``spent(t) = α (1 - exp(-γ t)) / (1 - exp(-γ))`` (γ = 0: ``α t``). A larger γ spends more
  early (γ = 1 is close to Pocock's boundary, γ = -4 to O'Brien and Fleming's). The gate's
  default is chosen by simulation (docs/deciding.md, "Sequential looks").
- The boundary is found by the recursive numerical integration of Armitage, McPherson and
  Rowe: the density of ``W`` on the continuation region is carried from look to look on a
  grid, and each look's boundary solves ``P(first crossing at look k) = spent(t_k) -
  spent(t_{k-1})``.

Exact for z statistics. The gate's statistics are t statistics with few degrees of freedom;
each look's nominal level is applied to its t-test's p-value (the "significance level"
approach), which simulations through the gate's own driver check (``benchmarks/sequential.py``).

A run that stops before its last planned look (its time budget spent) has spent less than
α: stopping early never raises the error. Nothing here knows about workloads or verdicts.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import optimize, special

__all__ = ["DEFAULT_GAMMA", "Schedule", "crossing_levels", "spent"]

DEFAULT_GAMMA = 1.0
"""The spending function's γ: near Pocock's boundary, which spends early enough that a gate
stopped by its budget at a third of its planned blocks has spent most of its α."""

_GRID_PER_SD = 8
"""Grid points per standard deviation of the smallest increment between looks (the levels
are within 0.2% of a grid three times as fine)."""
_MAX_GRID = 800
"""At most this many grid points: with hundreds of looks the grid stays coarse enough to be fast."""
_TAIL_SD = 9.0
"""How far below zero (in sd of W at the look) the grid reaches; the mass lost there is < 1e-18."""


def spent(t: float, alpha: float, gamma: float = DEFAULT_GAMMA) -> float:
    """α spent by information fraction ``t`` (0 ≤ t ≤ 1) under Hwang-Shih-DeCani(γ)."""
    if t >= 1.0:
        return alpha  # exactly: a single look tests at the whole α
    t = max(t, 0.0)
    if abs(gamma) < 1e-12:
        return alpha * t
    return alpha * math.expm1(-gamma * t) / math.expm1(-gamma)


def _norm_sf(x: np.ndarray | float) -> np.ndarray | float:
    return special.ndtr(-np.asarray(x, dtype=float)) if isinstance(x, np.ndarray) else float(special.ndtr(-x))


@functools.lru_cache(maxsize=512)
def crossing_levels(alpha: float, fractions: tuple[float, ...], gamma: float = DEFAULT_GAMMA) -> tuple[float, ...]:
    """The nominal one-sided level of each look, for total ``alpha`` over looks at the
    information ``fractions`` (increasing, the last one 1).

    ``P(Z_1 > c_1 or ... or Z_K > c_K) = alpha`` under the null, with look k's share of it
    ``spent(t_k) - spent(t_{k-1})``; the level of look k is ``1 - Phi(c_k)``. One look: ``alpha``.
    """
    if not (isinstance(alpha, float) and 0.0 < alpha < 1.0):
        raise ValueError(f"alpha must be a float between 0 and 1, got {alpha!r}")
    t = np.asarray(fractions, dtype=float)
    if t.size == 0 or not np.all(np.isfinite(t)) or t[0] <= 0 or abs(t[-1] - 1.0) > 1e-12 or np.any(np.diff(t) <= 0):
        raise ValueError(f"fractions must increase from above 0 to exactly 1, got {fractions!r}")
    levels: list[float] = []
    # Look 1: W(t1) ~ N(0, t1).
    target = spent(t[0], alpha, gamma)
    c = -float(special.ndtri(target)) if target > 0 else math.inf
    levels.append(target)
    b = c * math.sqrt(t[0])
    if t.size == 1:
        return tuple(levels)
    lo = -_TAIL_SD * math.sqrt(t[-1])
    step = max(min(float(np.min(np.diff(t))), float(t[0])) ** 0.5 / _GRID_PER_SD, 2 * -lo / _MAX_GRID)

    def grid(upper: float) -> tuple[np.ndarray, np.ndarray]:
        top = min(upper, _TAIL_SD * math.sqrt(t[-1]))
        n = max(int(math.ceil((top - lo) / step)), 2)
        x = np.linspace(lo, top, n + 1)
        w = np.full(x.size, x[1] - x[0])
        w[0] = w[-1] = (x[1] - x[0]) / 2.0  # trapezoid
        return x, w

    x, w = grid(b)
    density = np.exp(-0.5 * x * x / t[0]) / math.sqrt(2.0 * math.pi * t[0])
    previous = spent(t[0], alpha, gamma)
    for k in range(1, t.size):
        dt = float(t[k] - t[k - 1])
        sd = math.sqrt(dt)
        mass = density * w
        now = spent(t[k], alpha, gamma)
        target = now - previous
        previous = now

        def crossing(bound: float) -> float:
            return float(np.dot(mass, _norm_sf((bound - x) / sd)))

        if target <= 0:
            bk = math.inf
        else:
            high = x[-1] + 12.0 * sd
            if crossing(high) >= target:  # numerically nothing left to spend at this look
                bk = high
            else:
                bk = float(optimize.brentq(lambda v: crossing(v) - target, x[0] - 12.0 * sd, high,
                                           xtol=1e-12, rtol=1e-12))
        levels.append(float(special.ndtr(-bk / math.sqrt(t[k]))) if math.isfinite(bk) else 0.0)
        if k == t.size - 1:
            break
        nx, nw = grid(bk)
        kernel = np.exp(-0.5 * ((nx[:, None] - x[None, :]) / sd) ** 2) / (sd * math.sqrt(2.0 * math.pi))
        density = kernel @ mass
        x, w = nx, nw
    return tuple(levels)


@dataclass(frozen=True)
class Schedule:
    """The planned looks of one workload: at ``first`` blocks (or repeats), then after every
    ``every`` more, up to ``last``; α is spent over them by γ.

    ``Schedule(n, n)`` is a single look at n, which tests at the whole α.
    """

    first: int
    last: int
    every: int = 1
    gamma: float = DEFAULT_GAMMA

    def __post_init__(self) -> None:
        for name in ("first", "last", "every"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"Schedule.{name} must be a positive integer, got {value!r}")
        if self.last < self.first:
            raise ValueError(f"the last look ({self.last}) comes before the first ({self.first})")
        if not (isinstance(self.gamma, (int, float)) and math.isfinite(self.gamma) and -40 <= self.gamma <= 40):
            raise ValueError(f"Schedule.gamma must be a number from -40 to 40, got {self.gamma!r}")

    @property
    def counts(self) -> tuple[int, ...]:
        """The counts at which the looks fall; the last one is always ``last``."""
        out = list(range(self.first, self.last, self.every))
        return (*out, self.last)

    @property
    def looks(self) -> int:
        return len(self.counts)

    def look_at(self, count: int) -> int | None:
        """The 1-based number of the look at ``count``, or None when no look falls there."""
        counts = self.counts
        return counts.index(count) + 1 if count in counts else None

    def last_look_within(self, count: int) -> int | None:
        """The count of the last look that ``count`` blocks (or repeats) reach, or None before the first."""
        reached = [c for c in self.counts if c <= count]
        return reached[-1] if reached else None

    def level(self, alpha: float, count: int) -> float:
        """The nominal one-sided level of the look at ``count`` for a total ``alpha``."""
        look = self.look_at(count)
        if look is None:
            raise ValueError(f"no look falls at {count} (looks: {_counts_text(self.counts)})")
        fractions = tuple(c / self.last for c in self.counts)
        return crossing_levels(float(alpha), fractions, float(self.gamma))[look - 1]

    def describe(self) -> str:
        if self.looks == 1:
            return f"one look at {self.last}"
        return (f"looks at {_counts_text(self.counts)}, α spent by Hwang-Shih-DeCani(γ={self.gamma:g}) over "
                f"{self.looks} looks")


def _counts_text(counts: Sequence[int]) -> str:
    if len(counts) <= 4:
        return ", ".join(str(c) for c in counts)
    return f"{counts[0]}, {counts[1]}, …, {counts[-1]}"
