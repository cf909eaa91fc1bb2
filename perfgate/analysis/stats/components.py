"""Variance components of a nested benchmark design: where the noise of a time per step lives.

Kalibera and Jones ("Rigorous benchmarking in reasonable time", ISMM 2013) lay a benchmark
out as nested levels of repetition, each with its own cost and its own random variation.
perfgate's levels, from the top, on the log of the time per step (so every sd is relative):

- **between blocks**: groups of processes measured at different times (an ABBA block);
- **between processes** inside a block: each repeat is a fresh process, and what a process
  draws at its start (memory layout, the allocator's state, where its threads land) stays
  with it;
- **between windows** inside a process: the timed windows one after the other;
- **between steps** inside a window.

The model is ``log y = mu + b + p + w + s`` with independent zero-mean effects of variances
``σ_B², σ_P², σ_W², σ_S²``. The estimates are by the method of moments, from the bottom up:

- steps: the pooled within-window variance of the log per-step values (where they are given);
- windows: each process's windows around the process's own mean (``x_w`` = log of the
  window's time per step, whose step part has variance ``σ_S² / n_w``); the expectation of
  that sum of squares is exact for unequal windows per process and unequal steps per window;
- processes and blocks: the *unweighted means* approach (Henderson's method 1 applied to
  the means of each unit, as Searle, Casella and McCulloch describe it for unbalanced nested
  data): a process's value is the unweighted mean of its windows, a block's the unweighted
  mean of its processes; the sum of squares of those means around their parent's mean is
  set equal to its exact expectation, in which each child's variance is the lower levels'
  share (``σ_W² / w_p + σ_S² mean(1/n) / w_p`` for a process of ``w_p`` windows). Every
  unit weighs alike at its level, which is what the gate does (a process's time per step
  is the mean over its windows, a block's contrast the mean of its processes): the
  estimate answers for the gate's own estimator rather than for a weighted one it does not
  use. In a balanced design it is the ANOVA estimator exactly.

A level's estimate is computed from the others' unclamped estimates (so each stays
unbiased); a negative one is reported as 0 and named in ``Components.clamped``. A level
the data cannot separate is ``None``, never 0: with one window per process the "between
processes" sd holds the windows' variation too; without per-step values the "between
windows" sd holds the steps' share at the steps measured; with one block the blocks are
not estimated at all (they cancel from the paired contrast, see :func:`paired_components`).

No torch, no files, no printing.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from perfgate.model.repeat import Repeat

__all__ = ["LEVELS", "Components", "Window", "components", "paired_components", "repeats_components"]

LEVELS = ("block", "process", "window", "step")
"""The levels from the top, as ``Components.clamped`` names them."""


@dataclass(frozen=True)
class Window:
    """One timed window: its labels, its step count, its time per step (any unit, > 0) and,
    optionally, each step's time (the same unit; ``steps`` of them)."""

    block: Hashable
    process: Hashable
    """A label inside its block (the same label in two blocks is two processes)."""
    window: Hashable
    """A label inside its process."""
    steps: int
    time_per_step: float
    step_times: tuple[float, ...] | None = None
    side: str | None = None
    """The paired design's side ("base", "head"): set on every window or on none. With sides,
    each (block, side) is a unit of the top level and each side's own mean is removed first,
    so that a head-vs-base difference is never taken for a block effect."""


@dataclass(frozen=True)
class Components:
    """The sd of log time per step at each level (None: not estimated), and the units counted."""

    block_sd: float | None
    process_sd: float | None
    window_sd: float | None
    step_sd: float | None
    blocks: int
    processes: int
    windows: int
    steps: int
    """Units counted at each level over the whole design (steps: all the steps timed)."""
    balanced: bool
    """Every block the same processes, every process the same windows, every window the same steps."""
    clamped: tuple[str, ...] = ()
    """The levels (:data:`LEVELS`) whose moment estimate was negative and is reported as 0."""
    block_df: int = 0
    process_df: int = 0
    window_df: int = 0
    step_df: int = 0
    """Degrees of freedom of each level's sum of squares (0: not estimated)."""
    paired: bool = False
    """From a paired design, each side's mean removed (:func:`paired_components`)."""

    def variance_of_mean(self, processes: int, windows: int, steps: int) -> float:
        """Variance of log time per step of the mean of ``processes`` processes of one block,
        each timing ``windows`` windows of ``steps`` steps (``processes=1``: one process's).

        ``σ_P² / P + σ_W² / (P W) + σ_S² / (P W N)``. The block component is left out: a
        contrast inside a block (the paired gate's head pair minus base pair) removes it, and
        a comparison of blocks needs it added once per block. A level not estimated counts
        as 0, because its variation is held by the level above it (one window per process:
        the process sd holds it, and more windows are then not credited with reducing it)."""
        for name, value in (("processes", processes), ("windows", windows), ("steps", steps)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"variance_of_mean: {name} must be a positive integer, got {value!r}")
        p2, w2, s2 = ((v or 0.0) ** 2 for v in (self.process_sd, self.window_sd, self.step_sd))
        return p2 / processes + w2 / (processes * windows) + s2 / (processes * windows * steps)

    def describe(self) -> str:
        """One line: "between processes 10.2%, between windows 7.1%, between steps 3.0%
        (12 processes × 12 windows × 20 steps)"."""
        parts = []
        for level, words, sd, why in (("block", "between blocks", self.block_sd, "one block"),
                                      ("process", "between processes", self.process_sd, "one process per block"),
                                      ("window", "between windows", self.window_sd, "one window per process"),
                                      ("step", "between steps", self.step_sd, "no per-step times")):
            if sd is None:
                if level == "block" and self.blocks <= 1:
                    continue  # a single group: nothing to say
                parts.append(f"{words} not estimated ({why})")
            elif level in self.clamped:
                parts.append(f"{words} 0% (negative estimate set to 0)")
            else:
                parts.append(f"{words} {sd * 100:.1f}%")
        if self.balanced:
            shape = (f"{self.processes} processes × {self.windows // self.processes} windows × "
                     f"{self.steps // self.windows} steps")
        else:
            shape = f"{self.processes} processes, {self.windows} windows, {self.steps} steps, unbalanced"
        if self.blocks > 1:
            shape = f"{self.blocks} blocks, {shape}"
        if self.paired:
            shape += ", each side's mean removed"
        return f"{', '.join(parts)} ({shape})"


def _positive(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{what} must be a number, got {value!r}")
    v = float(value)
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"{what} must be finite and > 0, got {value!r}")
    return v


def _checked(windows: Sequence[Window]) -> None:
    if len(windows) == 0:
        raise ValueError("components: no windows given")
    for w in windows:
        if not isinstance(w, Window):
            raise ValueError(f"components: expected Window observations, got {type(w).__name__}")
    sides = {w.side is None for w in windows}
    if len(sides) > 1:
        raise ValueError("components: set side on every window or on none")
    seen: set[tuple[object, ...]] = set()
    for w in windows:
        where = f"window {w.window!r} of process {w.process!r} in block {w.block!r}"
        if w.side is not None:
            where += f" ({w.side})"
        key = (w.block, w.side, w.process, w.window)
        if key in seen:
            raise ValueError(f"components: {where} is given twice")
        seen.add(key)
        if isinstance(w.steps, bool) or not isinstance(w.steps, int) or w.steps < 1:
            raise ValueError(f"components: {where}: steps must be a positive integer, got {w.steps!r}")
        _positive(w.time_per_step, f"components: {where}: time per step")
        if w.step_times is not None:
            if len(w.step_times) != w.steps:
                raise ValueError(f"components: {where}: {len(w.step_times)} step times for {w.steps} steps")
            for t in w.step_times:
                _positive(t, f"components: {where}: a step time")


def _tree(windows: Sequence[Window]) -> dict[tuple[object, ...], dict[object, dict[object, list[Window]]]]:
    """``{(side, block): {process: {window: [Window]}}}`` in the order first seen."""
    tree: dict[tuple[object, ...], dict[object, dict[object, list[Window]]]] = {}
    for w in windows:
        tree.setdefault((w.side, w.block), {}).setdefault(w.process, {}).setdefault(w.window, []).append(w)
    return tree


def components(windows: Sequence[Window]) -> Components:
    """The variance components of ``windows`` (see the module doc for the estimator).

    ValueError (one line) on no windows, a time that is not finite and > 0, a step count that
    is not a positive integer, step times that do not match it, or a window given twice."""
    _checked(windows)
    tree = _tree(windows)
    paired = windows[0].side is not None

    # Steps: pooled variance of log step times within each window.
    ss_s, df_s = 0.0, 0
    for w in windows:
        if w.step_times is not None and w.steps > 1:
            logs = np.log(np.asarray(w.step_times, dtype=float))
            ss_s += float(np.sum((logs - logs.mean()) ** 2))
            df_s += w.steps - 1
    var_s = ss_s / df_s if df_s else None
    s2 = var_s or 0.0  # not estimated: the windows' sd holds the steps' share

    # Windows inside each process: E[SS] = σ_W² Σ(w_p - 1) + σ_S² Σ_p (1 - 1/w_p) Σ_w 1/n_w.
    ss_w, df_w, c_w = 0.0, 0, 0.0
    process_values: dict[tuple[object, ...], dict[object, tuple[float, float, int]]] = {}
    """Per top unit, per process: (unweighted mean of log window values, its lower-level
    variance's coefficient of σ_S², windows)."""
    for unit, processes in tree.items():
        process_values[unit] = {}
        for label, by_window in processes.items():
            x = np.log(np.array([ws[0].time_per_step for ws in by_window.values()], dtype=float))
            inv_n = np.array([1.0 / ws[0].steps for ws in by_window.values()], dtype=float)  # one each: no repeats
            k = x.size
            ss_w += float(np.sum((x - x.mean()) ** 2))
            df_w += k - 1
            c_w += (1.0 - 1.0 / k) * float(inv_n.sum())
            process_values[unit][label] = (float(x.mean()), float(inv_n.sum()) / (k * k), k)
    var_w = (ss_w - s2 * c_w) / df_w if df_w else None
    w2 = var_w if var_w is not None else 0.0

    # Processes inside each top unit, on the unweighted means of their windows; a process of
    # w_p windows varies by σ_P² + σ_W²/w_p + σ_S² Σ(1/n)/w_p² around its unit.
    ss_p, df_p, lower_p = 0.0, 0, 0.0
    unit_values: dict[tuple[object, ...], tuple[float, float]] = {}
    """Per top unit: (unweighted mean of its processes, the variance of that mean from below
    the process level, given the estimates below)."""
    for unit, by_process in process_values.items():
        means = np.array([m for m, _, _ in by_process.values()])
        below = np.array([w2 / k + s2 * cs for _, cs, k in by_process.values()])
        j = means.size
        ss_p += float(np.sum((means - means.mean()) ** 2))
        df_p += j - 1
        lower_p += (1.0 - 1.0 / j) * float(below.sum())
        unit_values[unit] = (float(means.mean()), float(below.sum()) / (j * j))
    var_p = (ss_p - lower_p) / df_p if df_p else None
    p2 = var_p if var_p is not None else 0.0

    # Top units (blocks; paired: each side's blocks apart, its own mean removed), on the
    # unweighted means of their processes.
    ss_b, df_b, lower_b = 0.0, 0, 0.0
    sides = sorted({side for side, _ in tree}, key=str)
    for side in sides:
        units = [(unit, len(process_values[unit])) for unit in tree if unit[0] == side]
        means = np.array([unit_values[u][0] for u, _ in units])
        below = np.array([p2 / j + unit_values[u][1] for u, j in units])
        m = means.size
        ss_b += float(np.sum((means - means.mean()) ** 2))
        df_b += m - 1
        lower_b += (1.0 - 1.0 / m) * float(below.sum())
    var_b = (ss_b - lower_b) / df_b if df_b else None

    clamped = tuple(level for level, v in zip(LEVELS, (var_b, var_p, var_w, var_s), strict=True) if v is not None and v < 0)

    def sd(v: float | None) -> float | None:
        return None if v is None else math.sqrt(max(v, 0.0))

    per_unit_processes = {len(p) for p in tree.values()}
    per_process_windows = {len(w) for p in tree.values() for w in p.values()}
    per_window_steps = {w.steps for w in windows}
    balanced = len(per_unit_processes) == len(per_process_windows) == len(per_window_steps) == 1
    return Components(
        block_sd=sd(var_b), process_sd=sd(var_p), window_sd=sd(var_w), step_sd=sd(var_s),
        blocks=len({block for _, block in tree}), processes=sum(len(p) for p in tree.values()),
        windows=len(windows), steps=sum(w.steps for w in windows), balanced=balanced, clamped=clamped,
        block_df=df_b, process_df=df_p, window_df=df_w, step_df=df_s, paired=paired,
    )


def paired_components(values: Mapping[Hashable, Mapping[str, Sequence[Sequence[float]]]], *,
                      steps: int) -> Components:
    """The components of a paired gate's measurements: ``values[block][side]`` holds, per
    process of that side in that block, its windows' times per step (each of ``steps`` steps).

    Each side's mean is removed before the blocks are compared, so the head-vs-base
    difference (what the gate measures) is never counted as a block effect; the "between
    blocks" sd is then that of the (block, side) cells, the block effect shared by both
    sides together with any block-by-side interaction. The shared part cancels from the
    gate's contrast; an interaction would not, and this estimate cannot tell the two apart
    (it is an upper bound on the shared part). Steps are not estimated (no per-step times),
    so the windows' sd holds the steps' share at ``steps`` steps."""
    windows = []
    for block, sides in values.items():
        for side, processes in sides.items():
            for p, process in enumerate(processes):
                for k, value in enumerate(process):
                    windows.append(Window(block, p, k, steps, value, side=str(side)))
    if not windows:
        raise ValueError("paired_components: no window values given")
    return components(windows)


def repeats_components(sides: Mapping[str, Sequence[Repeat]]) -> Components | None:
    """The components of the repeats one comparison saw: ``sides`` maps a side ("base",
    "head"; or one side alone) to its repeats. Each repeat is a process of its ABBA block
    (all in one block when it has none), each of its windows a window, each step a step.
    With two sides each side's mean is removed first (:func:`paired_components`' rule). None
    when there are fewer than two processes or a repeat's steps are not all positive."""
    windows = []
    two = len(sides) > 1
    for side, repeats in sides.items():
        for p, repeat in enumerate(repeats):
            n = repeat.steps_per_window
            step = repeat.phases_ms["step"]
            for w, value in enumerate(repeat.window_step_ms):
                part = tuple(step[w * n:(w + 1) * n])
                if value <= 0 or any(v <= 0 for v in part):
                    return None
                windows.append(Window(repeat.block if repeat.block is not None else 0, (side, p), w, n, value, part,
                                      side=side if two else None))
    if len({(w.side, w.block, w.process) for w in windows}) < 2:
        return None
    try:
        return components(windows)
    except ValueError:
        return None
