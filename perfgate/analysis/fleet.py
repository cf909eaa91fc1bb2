"""One runner against the fleet: its time per step on a workload beside the other runners'
of the same GPU model and environment, from the shared history.

Pure statistics; the caller gives, per runner, the per-run times per step (ms) of one
workload, GPU model and environment key, most recent runs only.

The comparison is on the log scale (a ratio of times): each runner's level is the mean
of its runs' log times; the fleet's is the mean of the other runners' levels, so a runner
with many runs weighs no more than one with few. The difference ``d`` (this runner minus
the fleet) gets a t interval whose standard error adds this runner's run-to-run variance
(``s²/n``) to the fleet level's uncertainty: the spread between the other runners' levels
(``s_b²/k``) when there are two or more of them, else the one other runner's run-to-run
variance. Its degrees of freedom are Welch–Satterthwaite's. ``exp(d) - 1`` is the share
slower (positive) or faster.

A runner is **beyond the fleet's spread** when its whole interval lies outside the range
of the other runners' levels: slower than the slowest, or faster than the fastest, by
more than its own noise. That needs two or more other runners; a fleet of one or two has
no spread to be beyond, and says so.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy import stats

LEVEL = 0.95
"""The interval's two-sided confidence level."""
MIN_RUNS = 2
"""Runs a runner needs to have a run-to-run variance (this one, or a lone other)."""


@dataclass(frozen=True)
class FleetComparison:
    workload: str
    gpu_model: str
    runner: str
    runs: int
    others: int
    """Other runners of the same GPU model and environment with runs of the workload."""
    share: float | None = None
    """This runner's time per step over the fleet's, minus 1 (0.11: 11% slower)."""
    low: float | None = None
    high: float | None = None
    beyond_spread: bool = False
    note: str = ""

    def line(self) -> str:
        """One line: ``this T4 runs resnet18-cifar10 11% [7, 15] slower than the fleet's 6 others``."""
        if self.share is None or self.low is None or self.high is None:
            return f"this {self.gpu_model} on {self.workload}: {self.note}"
        slower = self.share >= 0
        word = "slower" if slower else "faster"
        sign = 1 if slower else -1
        a, b = sorted((sign * self.low * 100, sign * self.high * 100))
        others = f"{self.others} other" if self.others == 1 else f"{self.others} others"
        text = (f"this {self.gpu_model} runs {self.workload} {abs(self.share) * 100:.0f}% [{a:.0f}, {b:.0f}] "
                f"{word} than the fleet's {others}")
        if self.beyond_spread:
            text += " (beyond the fleet's spread)"
        return text + (f"; {self.note}" if self.note else "")


def _t_interval(d: float, parts: Sequence[tuple[float, int]]) -> tuple[float, float]:
    """``d`` ± t·se, se² the sum of the ``(variance/n, df)`` parts, df by Welch–Satterthwaite."""
    se2 = sum(v for v, _ in parts)
    if se2 == 0.0:
        return d, d
    df = se2 ** 2 / sum(v ** 2 / nu for v, nu in parts if nu > 0)
    half = float(stats.t.ppf(0.5 + LEVEL / 2, df)) * math.sqrt(se2)
    return d - half, d + half


def compare_to_fleet(workload: str, gpu_model: str, runner: str,
                     times_ms: Mapping[str, Sequence[float]]) -> FleetComparison:
    """``runner`` against the other runners of ``times_ms`` (runner: per-run times per step, ms)."""
    logs = {name: np.log(np.asarray([t for t in ts if t > 0 and math.isfinite(t)], dtype=float))
            for name, ts in times_ms.items()}
    logs = {name: values for name, values in logs.items() if values.size}
    mine = logs.pop(runner, np.empty(0))
    base = FleetComparison(workload, gpu_model, runner, runs=int(mine.size), others=len(logs))
    if mine.size < MIN_RUNS:
        return replace(base, note=f"this runner has {mine.size} run(s) of it in the history; "
                                f"at least {MIN_RUNS} are needed")
    if not logs:
        return replace(base, note="a fleet of one: no other runner of this GPU model and environment has "
                                "recorded it; nothing to compare with")
    levels = np.array([values.mean() for values in logs.values()])
    center = float(levels.mean())
    d = float(mine.mean()) - center
    parts: list[tuple[float, int]] = [(float(mine.var(ddof=1)) / mine.size, mine.size - 1)]
    if levels.size >= 2:
        parts.append((float(levels.var(ddof=1)) / levels.size, levels.size - 1))
    else:
        (other,) = logs.values()
        if other.size < MIN_RUNS:
            return replace(base, note=f"the one other runner has {other.size} run(s) of it; "
                                    f"at least {MIN_RUNS} are needed")
        parts.append((float(other.var(ddof=1)) / other.size, other.size - 1))
    low, high = _t_interval(d, parts)
    beyond = bool(levels.size >= 2 and (low > levels.max() - center or high < levels.min() - center))
    note = "" if levels.size >= 2 else "a fleet of two has no spread to be beyond"
    return replace(base, share=math.expm1(d), low=math.expm1(low), high=math.expm1(high), beyond_spread=beyond,
                 note=note)
