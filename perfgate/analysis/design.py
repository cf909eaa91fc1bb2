"""``windows = "auto"``: each workload's timed windows per process, from this runner's own evidence.

A paired gate's block contrast varies as ``σ_P² + σ_W²/W`` (processes, and windows inside a
process, the steps' share folded into σ_W²; :mod:`perfgate.analysis.allocation`), and a process
of ``W`` windows costs ``c_P + W·c_W`` seconds (its start, build and warmup, its share of
what its block costs beyond its processes, such as the template a forking start renews at
every block, then its windows). The gate decides soonest with the ``W`` that minimises their product, the variance
a second of measuring buys::

    W* = argmin over W in [MIN_AUTO_WINDOWS, MAX_AUTO_WINDOWS] of (σ_P² + σ_W²/W) · (c_P + W·c_W)

(the continuous optimum is ``sqrt((σ_W²/σ_P²)·(c_P/c_W))``: costly processes or noisy windows
ask for more windows, noisy processes or long windows for fewer). What ``calibrate`` computes
from a calibration run, this takes from the gates the runner has already run: each paired
gate leaves its workloads' :class:`~perfgate.model.design.DesignEvidence` in the runner's cache
(:func:`evidence_of`, :mod:`perfgate.store.design_cache`), the next gate pools the last few
(:func:`pooled`) and designs from them before its first block, so every block of a gate has
the same design and its contrasts stay exchangeable, as the exact t boundary assumes. A
workload the runner has no evidence for gets :data:`PILOT_WINDOWS`, which also lets its first
gate measure the window level (one window per process cannot tell windows from processes,
hence at least two).

The rule is a pure function of the evidence: the measuring side records the pooled evidence
it designed from in ``run.json``, and the judge applies :func:`choose_windows` to that record
and refuses results measured with any other windows (the base decides the design). The
evidence only ever moves the design between two and eight windows; the error rates hold
whatever the windows, only the time to a decision changes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from statistics import median

from perfgate.analysis.driver import recorded_instant
from perfgate.analysis.stats.components import repeats_components
from perfgate.model.design import DesignEvidence
from perfgate.model.result import RepeatResult

__all__ = ["KEEP_GATES", "MAX_AUTO_WINDOWS", "MIN_AUTO_WINDOWS", "PILOT_WINDOWS", "block_overheads",
           "choose_windows", "describe_choice", "evidence_of", "pooled"]

PILOT_WINDOWS = 3
"""Windows per process when the runner has no evidence for a workload yet (measured on a 2-core
CPU runner: a forked process of a 15 ms-step CNN spends ~2.2× a window outside its windows, and
window noise ≈ process noise; three windows put over half the wall time inside them)."""
MIN_AUTO_WINDOWS = 2
"""At least two, so that every gate measures the window level for the next."""
MAX_AUTO_WINDOWS = 8
KEEP_GATES = 10
"""The runner keeps the evidence of this many latest gates per workload."""


def _objective(evidence: DesignEvidence, windows: int) -> float:
    return (evidence.process_var + evidence.window_var / windows) * (evidence.process_s + windows * evidence.window_s)


def choose_windows(evidence: DesignEvidence | None) -> int:
    """The windows per process ``windows = "auto"`` gives for ``evidence`` (None: no evidence,
    :data:`PILOT_WINDOWS`); ties go to fewer windows."""
    if evidence is None:
        return PILOT_WINDOWS
    best, best_value = MIN_AUTO_WINDOWS, _objective(evidence, MIN_AUTO_WINDOWS)
    for windows in range(MIN_AUTO_WINDOWS + 1, MAX_AUTO_WINDOWS + 1):
        value = _objective(evidence, windows)
        if value < best_value * (1 - 1e-12):
            best, best_value = windows, value
    return best


def describe_choice(name: str, evidence: DesignEvidence | None) -> str:
    """One line: why ``name`` gets its windows."""
    windows = choose_windows(evidence)
    if evidence is None:
        return f"{name}: {windows} windows per process (no evidence on this runner yet; its gates will gather it)"
    return (f"{name}: {windows} windows per process, from {evidence.gates} earlier gate"
            f"{'s' if evidence.gates != 1 else ''} on this runner (between processes "
            f"{math.sqrt(evidence.process_var) * 100:.1f}%, between windows {math.sqrt(evidence.window_var) * 100:.1f}%; "
            f"a process {evidence.process_s:.2f} s beyond its windows, a window {evidence.window_s:.2f} s)")


def pooled(records: Sequence[DesignEvidence]) -> DesignEvidence | None:
    """The records as one: variances pooled by their degrees of freedom, costs the median over
    gates (one slow gate does not move them); None when there are none."""
    if not records:
        return None
    process_df = sum(r.process_df for r in records)
    window_df = sum(r.window_df for r in records)
    return DesignEvidence(
        process_var=math.fsum(r.process_var * r.process_df for r in records) / process_df, process_df=process_df,
        window_var=math.fsum(r.window_var * r.window_df for r in records) / window_df, window_df=window_df,
        process_s=float(median(r.process_s for r in records)), window_s=float(median(r.window_s for r in records)),
        gates=sum(r.gates for r in records))


def _process_seconds(repeats: Sequence[RepeatResult]) -> float | None:
    """The median wall time of one process: the gap from a process's recorded start to the next
    one's inside the same block (a block's four processes of a workload run one after the other;
    what comes between blocks, the counted runs and other workloads, is left out)."""
    by_block: dict[int, list[float]] = {}
    for repeat in repeats:
        moment = recorded_instant(repeat.started_at)
        if repeat.block is None or moment is None:
            continue
        by_block.setdefault(repeat.block, []).append(moment.timestamp())
    gaps = [later - earlier for starts in by_block.values()
            for earlier, later in zip(sorted(starts), sorted(starts)[1:], strict=False)]
    gaps = [g for g in gaps if g > 0]
    return float(median(gaps)) if gaps else None


def block_overheads(repeats: Mapping[str, Sequence[RepeatResult]]) -> dict[str, float]:
    """Per workload (``repeats``: each workload's repeats of one gate, both sides), the median
    wall time before one of its blocks that no process of the gate holds: the template
    started for that block (a forking start renews it at every block), the parent's work
    between blocks. It is the span from the last process start before the block's first one
    to that first one, less the earlier process's own wall time (its workload's median gap
    inside a block). The once-a-gate parts (the counted runs after the first look) are one
    span each, left out by the median; the gate's first block has no span before it."""
    events: list[tuple[float, str, int]] = []
    for name, these in repeats.items():
        for repeat in these:
            moment = recorded_instant(repeat.started_at)
            if repeat.block is not None and moment is not None:
                events.append((moment.timestamp(), name, repeat.block))
    events.sort()
    walls = {name: _process_seconds(these) for name, these in repeats.items()}
    spans: dict[str, list[float]] = {}
    for (t0, n0, b0), (t1, n1, b1) in zip(events, events[1:], strict=False):
        wall = walls.get(n0)
        if (n0, b0) == (n1, b1) or wall is None:
            continue  # inside one workload's block, or nothing to subtract
        spans.setdefault(n1, []).append(max(t1 - t0 - wall, 0.0))
    return {name: float(median(v)) for name, v in spans.items()}


def evidence_of(base: Sequence[RepeatResult], head: Sequence[RepeatResult],
                block_overhead_s: float = 0.0) -> DesignEvidence | None:
    """What one paired gate measured of one workload (both sides' repeats), or None when it
    cannot tell: fewer than two windows per process (the window level is then not seen), too
    few processes, or no recorded starts to time a process by. ``block_overhead_s``: what a
    block of the workload costs beyond its processes (:func:`block_overheads`), shared by the
    block's processes in ``process_s``."""
    if not base or not head or any(r.windows < 2 for r in (*base, *head)):
        return None
    found = repeats_components({"base": base, "head": head})
    if found is None or found.process_sd is None or found.window_sd is None \
            or found.process_df < 1 or found.window_df < 1:
        return None
    steps = base[0].steps_per_window
    window_var = found.window_sd ** 2 + (found.step_sd or 0.0) ** 2 / steps
    process_wall = _process_seconds([*base, *head])
    if process_wall is None:
        return None
    window_s = float(median(r.window_s / r.windows for r in (*base, *head)))
    timed_s = float(median(r.window_s for r in (*base, *head)))
    per_block: dict[int, int] = {}
    for repeat in (*base, *head):
        if repeat.block is not None:
            per_block[repeat.block] = per_block.get(repeat.block, 0) + 1
    processes = float(median(per_block.values())) if per_block else 4.0
    try:
        return DesignEvidence(process_var=found.process_sd ** 2, process_df=found.process_df, window_var=window_var,
                              window_df=found.window_df,
                              process_s=max(process_wall - timed_s, 0.0) + max(block_overhead_s, 0.0) / processes,
                              window_s=window_s)
    except ValueError:
        return None
