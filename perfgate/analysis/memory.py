"""The peak-memory rule: a comparison's memory row beside the step's verdict.

The median peak memory over the current repeats against the reference's; growth above the
threshold (``memory_threshold``, 10% by default) is a REGRESSION. No sequential looks and no
test: the peak of a repeat is nearly deterministic, and a growth beyond a tenth is a fact to
report, not a noise to weigh.

Memory creep (:func:`memory_creep`, :func:`creep_rule`): each repeat's telemetry holds the
least-squares slope of the process's resident memory over the window's samples (taken about
every 100 ms beside the loop, never inside it; on CUDA also NVML's device memory used), in
bytes per second. Per repeat it becomes bytes per step (× the window's seconds / its steps);
over the repeats, their mean and the 95% t interval around it (the figure shown is the
interval's centre, so it can never sit outside its own interval). A side creeps
when the interval's lower bound is above :data:`CREEP_FLOOR_BYTES` (64 KiB); a head that creeps
against a reference measured not to, and grows more than it by more than that floor beyond
the noise of both (a slowed step holds more seconds, over which a process's memory may grow
with time, not with steps), is a REGRESSION of the memory row. Both creeping, or
neither, changes nothing; a stored baseline keeps no telemetry, so against one the slope is
not known and changes nothing either.

In the paired design both sides' slopes are measured by the same harness in the same job: a
kind of memory whose slope one side recorded and the other did not, although its windows were
long enough to record one (:func:`missing_slopes`, :func:`slope_recordable`), is missing data,
never a pass. The comparison makes it an ERROR, as a missing peak memory
(``perfgate.analysis.compare``; with ``missing_is_error = false`` the memory row says it was
not compared): a head that left its slope out would otherwise hide MEMORY-CREEP, and so would
a base side that left out its own.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import median

import numpy as np
from scipy import stats

from perfgate.model.result import RepeatResult, finite_number
from perfgate.model.verdict import Verdict

CREEP_FLOOR_BYTES = 64.0 * 1024
"""MEMORY-CREEP needs the interval's lower bound above 64 KiB per step. A steady loop's
resident set still grows early in a process (the allocator's arenas, pages touched for the
first time, Python's caches): measured here on two CPU cores, the tiny test workload over
400 steps after 2 warmup steps grew 2.5-4 KiB per step (interval [1.3, 5.0] KiB over 3
repeats), over 2000 steps 1.4-2.9 KiB per step, and a loop that keeps nothing about 1 KiB per
step (the loop's own per-step records are part of it), so a floor of 1 KiB would label
steady workloads. A leak worth reporting keeps a tensor a step (an activation, a loss with its
graph): tens of KiB to MiB; 64 KiB a step is 6.4 GiB over 100,000 steps."""

CREEP_SOURCES = (("cpu", "rss_slope", "resident memory"), ("gpu", "memory_used_slope", "device memory"))
"""Where each repeat's telemetry holds a slope, and what it is called in a label."""


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
    limit_value = finite_number(threshold)
    if limit_value is None or limit_value <= 0:
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


@dataclass(frozen=True)
class Creep:
    """One kind of memory's growth over the window, in bytes per step, over a side's repeats."""

    what: str
    """``resident memory`` (the process's RSS) or ``device memory`` (NVML's memory used on CUDA)."""
    per_step: float
    """Mean over repeats of the per-repeat slope, bytes per step: the centre of ``low``..``high``."""
    low: float
    high: float
    """The 95% interval of the slope per step."""
    repeats: int
    growing: int
    """Repeats whose own slope is above :data:`CREEP_FLOOR_BYTES`."""
    se: float = 0.0
    """The standard error of ``per_step`` (bytes per step)."""
    df: float = math.inf
    """Its degrees of freedom (``low``..``high`` is ``per_step`` ± the t quantile on them × ``se``)."""

    @property
    def creeps(self) -> bool:
        return self.low > CREEP_FLOOR_BYTES

    def describe(self) -> str:
        size = max(abs(self.per_step), abs(self.high))  # one unit for the figure and its interval
        unit, scale = ("MiB", 1 << 20) if size >= 1 << 20 else ("KiB", 1 << 10)
        digits = 1 if unit == "MiB" or size < 10 * scale else 0
        return (f"{self.what} grows {self.per_step / scale:.{digits}f} {unit} per step "
                f"[{self.low / scale:.{digits}f}, {self.high / scale:.{digits}f}] over the window "
                f"({self.repeats} repeat{'s' if self.repeats != 1 else ''})")


def _slope(telemetry: object, part: str, key: str) -> tuple[float, float, int] | None:
    """(bytes per second, its standard error, samples) from one repeat's telemetry; read
    leniently: telemetry is free-form in a result file, anything unusable is not known."""
    side = telemetry.get(part) if isinstance(telemetry, Mapping) else None
    slope = side.get(key) if isinstance(side, Mapping) else None
    if not isinstance(slope, Mapping):
        return None
    rate, error, samples = (finite_number(slope.get(k)) for k in ("bytes_per_s", "stderr_bytes_per_s", "samples"))
    if rate is None or error is None or samples is None or error < 0 or samples < 3:
        return None
    return rate, error, int(samples)


def memory_creep(repeats: Sequence[RepeatResult]) -> list[Creep]:
    """Per kind of memory whose slope the repeats recorded, its growth per step."""
    out = []
    for part, key, what in CREEP_SOURCES:
        per_step, errors, dfs = [], [], []
        for r in repeats:
            found = _slope(r.telemetry, part, key)
            steps = len(r.phases_ms["step"])
            if found is None or steps == 0:
                continue
            rate, error, samples = found
            per_step.append(rate * r.window_s / steps)
            errors.append(error * r.window_s / steps)
            dfs.append(samples - 2)
        if not per_step:
            continue
        k = len(per_step)
        if k == 1:
            centre, se, df = per_step[0], errors[0], dfs[0]
        else:
            centre = math.fsum(per_step) / k
            spread = float(np.std(per_step, ddof=1)) / math.sqrt(k)
            within = math.sqrt(math.fsum(e * e for e in errors)) / k
            se, df = max(spread, within), k - 1  # agreeing repeats still carry their own noise
        half = float(stats.t.ppf(0.975, df)) * se
        out.append(Creep(what, centre, centre - half, centre + half, k,
                         sum(1 for v in per_step if v > CREEP_FLOOR_BYTES), se, float(df)))
    return out


def excess(head: Creep, reference: Creep) -> tuple[float, float, float]:
    """How much more the head grows per step than the reference: (difference, and its 95%
    interval), Welch's: each side's standard error on its own degrees of freedom."""
    difference = head.per_step - reference.per_step
    variances = (head.se * head.se, reference.se * reference.se)
    se = math.sqrt(sum(variances))
    if se == 0.0:
        return difference, difference, difference
    finite = [(v, df) for v, df in zip(variances, (head.df, reference.df), strict=True) if math.isfinite(df)]
    welch = sum(v * v / df for v, df in finite if df > 0)
    df = (se ** 4) / welch if welch > 0 else math.inf
    half = float(stats.t.ppf(0.975, df)) * se  # infinite df: the normal quantile
    return difference, difference - half, difference + half


SLOPE_WINDOW_S = 0.8
"""A repeat whose timed steps add up to this long must carry its memory slope where its
telemetry sampled that memory: the sampler takes a sample every 100 ms and gives a slope from
5 samples on (``perfgate.measure.telemetry_host.MIN_SLOPE_SAMPLES``), so a window under half a
second may legitimately record none (``rss_slope: null``: a fast base side beside a slowed
head), and one of 0.8 s, with room for the sampler's start, may not."""


def slope_recordable(repeats: Sequence[RepeatResult]) -> set[str]:
    """The kinds of memory whose slope ``repeats`` must have recorded: those whose telemetry
    part was sampled in a repeat whose timed steps (genuine, unlike a stated window) last at
    least :data:`SLOPE_WINDOW_S`."""
    found = set()
    for part, _key, what in CREEP_SOURCES:
        for r in repeats:
            sampled = isinstance(r.telemetry, Mapping) and isinstance(r.telemetry.get(part), Mapping)
            if sampled and r.steps_s >= SLOPE_WINDOW_S:
                found.add(what)
                break
    return found


def missing_slopes(head: Sequence[Creep], reference: Sequence[Creep], head_recordable: set[str] | None = None,
                   reference_recordable: set[str] | None = None) -> tuple[list[str], list[str]]:
    """The kinds of memory (``resident memory``, ``device memory``) whose slope the reference
    recorded and the head did not, and those the head recorded and the reference did not;
    a side whose windows were too short to record one (``*_recordable``: :func:`slope_recordable`;
    None: every kind) lacks nothing there: its slope is not known, not left out."""
    ours, theirs = [c.what for c in head], [c.what for c in reference]
    return ([w for w in theirs if w not in ours and (head_recordable is None or w in head_recordable)],
            [w for w in ours if w not in theirs and (reference_recordable is None or w in reference_recordable)])


def creep_rule(memory: MemoryDecision, head: Sequence[Creep], reference: Sequence[Creep] | None,
               side: str = "baseline") -> MemoryDecision:
    """``memory`` made a REGRESSION when the head creeps in a kind of memory the reference
    (``side``: "baseline" or "base side") measured and does not creep in, and the head grows
    more than the reference by more than :data:`CREEP_FLOOR_BYTES` per step beyond noise (the
    lower bound of :func:`excess`): a reference whose own interval reaches the head's growth
    has not shown that it grows less. Else unchanged."""
    if reference is None:
        return memory
    measured = {c.what: c for c in reference}
    new = [(c, measured[c.what]) for c in head if c.creeps and c.what in measured and not measured[c.what].creeps
           and excess(c, measured[c.what])[1] > CREEP_FLOOR_BYTES]
    if not new:
        head_lacks, reference_lacks = missing_slopes(head, reference)
        unknown = [f"{what} not recorded in the head" for what in head_lacks]
        unknown += [f"{what} not recorded in the {side}" for what in reference_lacks]
        if unknown:  # shown, when missing_is_error = false lets the comparison go on without it
            return MemoryDecision(memory.verdict, memory.ratio,
                                  f"{memory.reason}; memory creep not compared: {', '.join(unknown)}")
        return memory
    found = "; ".join(f"MEMORY-CREEP: {c.describe()}, the {side} shows none "
                      f"({ref.per_step / 1024:.1f} KiB per step [{ref.low / 1024:.1f}, {ref.high / 1024:.1f}])"
                      for c, ref in new)
    reason = f"{found}; {memory.reason}" if memory.verdict is Verdict.REGRESSION else f"{found} ({memory.reason})"
    return MemoryDecision(Verdict.REGRESSION, memory.ratio, reason)
