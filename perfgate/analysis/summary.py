"""Summaries derived from raw results: the unit of analysis is the repeat.

Consecutive steps are autocorrelated, so steps are never treated as independent samples.
Each repeat is summarised by two statistics per phase and for the whole step
(``perfgate.model.repeat``): its **time per step** (the window's total over its steps, what
throughput sees) and its **median step**. A workload is summarised by the median over its
repeats of each, and its run-to-run variation by the standard deviation of their logarithms.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import median, stdev

from perfgate.analysis.ranks import comm_share, per_rank_medians
from perfgate.model.repeat import MEDIAN, PER_STEP, RESIDUAL, ROWS, STATISTICS, Repeat
from perfgate.model.result import RepeatResult, RunResult


def log_sd(values: Sequence[float]) -> float | None:
    """Sample standard deviation of log(values): the relative run-to-run variation."""
    if len(values) < 2 or any(v <= 0 for v in values):
        return None
    return stdev(math.log(v) for v in values)


def row_summary(repeats: Sequence[Repeat], statistic: str) -> dict[str, float]:
    """The median over ``repeats`` of each row's per-repeat ``statistic``."""
    return {row: median(r.summary_ms(statistic)[row] for r in repeats) for row in ROWS}


@dataclass(frozen=True)
class WorkloadSummary:
    workload: str
    device: str
    repeats: tuple[RepeatResult, ...]
    """The repeats themselves: each derives its statistics and shares from its raw values."""
    steps: int
    per_step_ms: dict[str, float]
    """Per row, the median over repeats of the time per step: the number the verdict and the
    phase table speak of."""
    median_ms: dict[str, float]
    """Per row, the median over repeats of the median step."""
    share: dict[str, float]
    """Per row, the median over repeats of its share of the time per step."""
    spread: dict[str, float | None]
    """Run-to-run variation of each row's time per step (sd of log); None below 2 repeats."""
    samples_per_s: float
    peak_memory_bytes: int | None
    peak_memory_kind: str
    device_busy_fraction: float | None
    ranks: tuple[Mapping[str, float], ...] = ()
    """A distributed run: per rank, its medians over the repeats (phases, step, ``comm``,
    ``backward_work``; :func:`perfgate.analysis.ranks.per_rank_medians`). Empty otherwise."""
    comm_share: float | None = None
    """A distributed run: the exposed all-reduce wait's share of the step (None: not recorded)."""

    def per_repeat(self, row: str, statistic: str = PER_STEP) -> list[float]:
        return [r.summary_ms(statistic)[row] for r in self.repeats]

    def of(self, statistic: str) -> Mapping[str, float]:
        """The workload's summary per row under ``statistic``."""
        return {PER_STEP: self.per_step_ms, MEDIAN: self.median_ms}[statistic]


assert set(STATISTICS) == {PER_STEP, MEDIAN}


def summarise(result: RunResult) -> WorkloadSummary:
    reps = result.repeats
    share = {row: median(r.shares[row] for r in reps) for row in ROWS}
    spread = {row: log_sd([r.per_step_ms[row] for r in reps]) for row in ROWS if row != RESIDUAL}
    spread[RESIDUAL] = None  # can be zero or negative: no log-scale spread
    peaks = [r.peak_memory_bytes for r in reps if r.peak_memory_bytes is not None]
    busy = [r.device_busy_fraction for r in reps if r.device_busy_fraction is not None]
    return WorkloadSummary(
        workload=result.workload,
        device=result.device,
        repeats=reps,
        steps=min(r.steps for r in result.repeats),
        per_step_ms=row_summary(reps, PER_STEP),
        median_ms=row_summary(reps, MEDIAN),
        share=share,
        spread=spread,
        samples_per_s=median(r.samples_per_s for r in reps),
        peak_memory_bytes=int(median(peaks)) if peaks else None,
        peak_memory_kind=result.repeats[0].peak_memory_kind,
        device_busy_fraction=median(busy) if busy else None,
        ranks=tuple(per_rank_medians(reps) or ()),
        comm_share=comm_share(reps),
    )
