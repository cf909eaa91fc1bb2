"""The two sides a report shows beside an estimate, made so that they never contradict it.

A median over repeats of each side can move one way while the gate's estimate moves the
other: a real paired A/A run read "time per step 15.73 → 15.52 ms (+1.4% [−1.2, +4.1])".
The estimate is not a ratio of medians. The paired design's (``block_log_ratio``) is the
mean over the blocks judged of ``mean log head_j − mean log base_j``; the stored design's
(``stats.estimate.log_ratio``) is the current repeats' mean log less the unweighted mean of
the baseline recordings' mean logs, the repeats it set aside as outliers left out.

So every report shows, for a row with an estimate:

* the reference side (base, baseline) as the geometric mean of its repeats **weighed as the
  estimate weighs them**: per block judged, each block alike (paired), or per recording,
  each recording alike and without the repeats set aside (stored);
* the other side (head, current) as that × the estimated ratio.

With these weights the second number is also the head's (current's) own geometric mean,
weighed the same way (per block, or over its repeats): the estimate is exactly the ratio of
the two, so the two sides and the estimate always move together. Samples/s are the
reference side's geometric mean, weighed alike, and that ÷ the time per step's ratio.

A row without an estimate (the residual) shows the medians over repeats, as before.
No printing; the reports only format what is returned here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from perfgate.analysis.outcome import WorkloadComparison
from perfgate.analysis.stats import LogRatio
from perfgate.model.repeat import Repeat

__all__ = ["Sides", "row_sides", "samples_sides", "sides_note"]


@dataclass(frozen=True)
class Sides:
    """A row's two sides in ms (or samples/s): ``after == before * ratio`` always."""

    before: float
    after: float
    ratio: float
    """The estimate's ratio (after / before); for samples/s, 1 / the time per step's ratio."""


def _mean_log(values: Sequence[float]) -> float | None:
    if not values or any(not (v > 0) or not math.isfinite(v) for v in values):
        return None
    return math.fsum(math.log(v) for v in values) / len(values)


def _base_repeats(c: WorkloadComparison) -> list[Repeat]:
    assert c.baseline is not None
    return [r for rec in c.baseline.recordings for r in rec.repeats]


def _paired_level(c: WorkloadComparison, value: Callable[[Repeat], float]) -> float | None:
    """The base side's mean log as ``block_log_ratio`` weighs it: each block that holds both
    arms alike, the mean of its base repeats in it."""
    assert c.current is not None
    base = _base_repeats(c)
    if any(r.block is None for r in base) or any(r.block is None for r in c.current.repeats):
        return None
    kept = sorted({r.block for r in base if r.block is not None}
                  & {r.block for r in c.current.repeats if r.block is not None})
    levels = [_mean_log([value(r) for r in base if r.block == b]) for b in kept]
    if not levels or any(level is None for level in levels):
        return None
    return math.fsum(levels) / len(levels)  # type: ignore[arg-type]  # None returned above


def _stored_level(c: WorkloadComparison, value: Callable[[Repeat], float],
                  excluded: Sequence[tuple[int, int]]) -> float | None:
    """The baseline's mean log as ``log_ratio`` weighs it: each recording alike, the mean of
    its repeats less those set aside as outliers (``excluded``: (recording, repeat) pairs)."""
    assert c.baseline is not None
    skip = set(excluded)
    levels = [_mean_log([value(r) for i, r in enumerate(rec.repeats) if (j, i) not in skip])
              for j, rec in enumerate(c.baseline.recordings)]
    if not levels or any(level is None for level in levels):
        return None
    return math.fsum(levels) / len(levels)  # type: ignore[arg-type]  # None returned above


def _level(c: WorkloadComparison, value: Callable[[Repeat], float],
           excluded: Sequence[tuple[int, int]] = ()) -> float | None:
    if c.baseline is None or c.current is None or not c.baseline.recordings:
        return None
    found = _paired_level(c, value) if c.paired else _stored_level(c, value, excluded)
    if found is None:  # values that have no logarithm, a paired run without blocks: the plain geometric mean
        found = _mean_log([value(r) for r in _base_repeats(c)])
    return None if found is None else math.exp(found)


def row_sides(c: WorkloadComparison, row: str, statistic: str, est: LogRatio | None) -> Sides | None:
    """``row``'s two sides under ``statistic`` beside its estimate ``est`` (None: no estimate, or
    no reference side whose geometric mean exists; the report then shows the medians)."""
    if est is None:
        return None
    before = _level(c, lambda r: r.summary_ms(statistic)[row], est.excluded_baseline)
    if before is None:
        return None
    return Sides(before, before * est.ratio, est.ratio)


def samples_sides(c: WorkloadComparison, est: LogRatio | None) -> Sides | None:
    """Samples/s on both sides: the reference's geometric mean weighed as the time per step's
    estimate ``est`` weighs the repeats, and that ÷ its ratio (samples/s are samples over the
    window's time: they move as 1 / time per step)."""
    if est is None or not est.ratio > 0:
        return None
    before = _level(c, lambda r: r.samples_per_s, est.excluded_baseline)
    if before is None:
        return None
    return Sides(before, before / est.ratio, 1.0 / est.ratio)


def _blocks_judged(c: WorkloadComparison) -> int:
    if c.baseline is None or c.current is None:
        return 0
    base = {r.block for r in _base_repeats(c) if r.block is not None}
    return len(base & {r.block for r in c.current.repeats if r.block is not None})


def sides_note(c: WorkloadComparison) -> str:
    """How the sides beside an estimate were made, in words the reports share."""
    if c.paired:
        blocks = _blocks_judged(c)
        how = (f"geometric means as the paired estimate weighs the repeats, block by block over the {blocks} "
               f"block{'s' if blocks != 1 else ''} judged: the head's is the base's × the estimated change")
        before = "base"
    else:
        how = ("geometric means as the estimate weighs the repeats, the baseline's recording by recording "
               "(outliers set aside left out), the current run's over its repeats: the current's is the "
               "baseline's × the estimated change")
        before = "baseline"
    return (f"{how}, so the two sides always move as the estimate does; samples/s: the {before}'s, and that ÷ "
            "the time per step's ratio; a row without an estimate (the residual): medians over repeats")
