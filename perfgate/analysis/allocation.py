"""The paired design that reaches a decision soonest: steps per window, windows per repeat, first look.

Given where the noise lives (:class:`~perfgate.analysis.stats.components.Components`) and
what each level costs (:class:`LevelCosts`), Kalibera and Jones's question is how many
units to take at each level. Here the units are the gate's own: each ABBA block starts four
fresh processes, each times ``windows`` windows of ``steps`` steps, and the gate looks after
every block from its first look on (:mod:`perfgate.analysis.driver`).

**The analytic ranking.** The gate's block contrast is the head pair's mean minus the base
pair's, so its variance is that of the four processes' estimates::

    var(d) = 2 · variance_of_mean(2, W, N) = σ_P² + σ_W² / W + σ_S² / (W N)

The between-block component cancels from it exactly (both pairs share their block), which
is why it never enters the design; it is reported, never weighed. A design decides at the
first look ``J`` (of the schedule from its first look to ``GateConfig.max_blocks``) where

    (t[J-1](1 - level_J) + t[J-1](power)) · sd(d) / sqrt(J) <= log(1 + δ)

with ``level_J`` the stricter of the two levels the driver really tests at that look
(:class:`~perfgate.analysis.stats.sequential.Schedule`): Holm's first step for the
REGRESSION test, ``α / family``, and the PASS bound's ``(1 - confidence) / 2``. There, a
true slowdown of δ is significant with the power asked, and an unchanged commit passes
with it. Its time is ``J · 4 · (process + W · (window + N · step))`` seconds. A design that
does not get there by ``max_blocks`` is ranked after every one that does, by the time it
would need beyond it (the blocks its variance needs at the last look's quantiles): the
design nearest to deciding per second, never the cheapest block that decides nothing.

**The check by simulation.** The analytic figure leaves out what the gate adds: its median-step
statistic (PASS needs both bounds below δ), the t statistic's few degrees of freedom at
early looks, and the chance that the decision comes before or after the 80% point. So the
best few designs (distinct steps and windows) are run as simulated gates through the real
driver and ``compare`` (:func:`perfgate.analysis.simulate.simulate`, one workload, the
components as its noise: processes, windows and steps independent, at most
:data:`SIMULATED_STEPS` steps drawn per window; no AR, drift, outliers or throttling,
which no design choice here changes), each at two first
looks: its analytic best (where 80% of the gates are expected to have decided: the first
look is then also the last for most) and the smallest (``Bounds.min_blocks``), from which
the gate looks after every block and stops the easy half of the gates sooner than the 80%
point; only the simulation can say which of the two is quicker at the median. The one with
the least objective is chosen:

    objective = (median seconds to a decision with no change
                 + median seconds to a decision with a slowdown of ``slowdown``) / 2

an unchanged commit (A/A, which should PASS) and a slowed one (which should be a
REGRESSION) weighing alike; a decision is whatever verdict stopped the workload. The
slowdown is 2δ unless given: at
exactly δ a REGRESSION needs the estimate itself above δ, a coin flip whatever the design,
so that the median would measure ``max_blocks`` rather than the design. A gate undecided
at ``max_blocks`` counts the time it ran. A design whose gates mostly stay undecided (fewer
than half decided in either case) ranks after every design that mostly decides, by its
seconds per decided gate. Ties go to the analytic ranking.

Pure: nothing here measures, reads a file or prints.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from statistics import median

import numpy as np
from scipy import special

from perfgate.analysis.blocks import blocks_problem
from perfgate.analysis.decide import GateConfig
from perfgate.analysis.simulate import Noise, Scenario, simulate
from perfgate.analysis.stats.components import Components
from perfgate.analysis.stats.sequential import Schedule
from perfgate.model.verdict import Verdict
from perfgate.text.units import duration

__all__ = ["Allocation", "Bounds", "Candidate", "LevelCosts", "Simulated", "allocate"]

PROCESSES_PER_BLOCK = 4
"""An ABBA block: base, head, head, base."""

SIMULATED_STEPS = 32
"""At most this many steps per window are drawn in a simulated gate; a longer window draws
this many with the step sd scaled so that the window's mean (and, near enough, its median)
varies as much as the real window's would. The gate reads a window only through those two."""

_STEP_GRID = (2, 3, 5, 7, 10, 15, 20, 30, 50, 70, 100, 150, 200, 300, 500, 700, 1000, 1500, 2000, 3000, 5000)
"""Steps per window tried (with the bounds themselves): about three per factor of ten."""
_FIRST_LOOKS_DENSE = 12
"""Every first look up to this many blocks is tried; beyond, about one per quarter more."""


@dataclass(frozen=True)
class LevelCosts:
    """What each level costs, in seconds."""

    process_s: float
    """One repeat process, all but its windows: starting (or forking) it, building the model and
    the data, warmup."""
    step_s: float
    """One timed step."""
    window_s: float = 0.0
    """Each window's own overhead (its synchronisations, a settle before it)."""

    def __post_init__(self) -> None:
        for name in ("process_s", "step_s", "window_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (math.isfinite(v) and v >= 0):
                raise ValueError(f"LevelCosts.{name} must be a finite number of seconds >= 0, got {v!r}")
        if self.step_s <= 0:
            raise ValueError(f"LevelCosts.step_s must be > 0, got {self.step_s!r}")

    def process_seconds(self, steps: int, windows: int) -> float:
        return self.process_s + windows * (self.window_s + steps * self.step_s)


@dataclass(frozen=True)
class Bounds:
    """The designs considered."""

    min_steps: int = 2
    max_steps: int = 1000
    min_windows: int = 1
    max_windows: int = 20
    min_blocks: int = 2
    """The fewest blocks at the first look (a paired gate's ``blocks`` is at least 2)."""
    max_blocks: int | None = None
    """The most blocks at the first look; None: ``GateConfig.max_blocks``."""

    def __post_init__(self) -> None:
        for name in ("min_steps", "max_steps", "min_windows", "max_windows", "min_blocks"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"Bounds.{name} must be a positive integer, got {v!r}")
        if self.max_blocks is not None and (isinstance(self.max_blocks, bool) or not isinstance(self.max_blocks, int)):
            raise ValueError(f"Bounds.max_blocks must be an integer or None, got {self.max_blocks!r}")
        if self.min_steps < 2:
            raise ValueError(f"Bounds.min_steps must be at least 2 (a median step needs steps), got {self.min_steps}")
        problem = blocks_problem(self.min_blocks, "Bounds.min_blocks")
        if problem is not None:
            raise ValueError(problem)
        for low, high in (("min_steps", "max_steps"), ("min_windows", "max_windows")):
            if getattr(self, high) < getattr(self, low):
                raise ValueError(f"Bounds.{high} ({getattr(self, high)}) is below {low} ({getattr(self, low)})")
        if self.max_blocks is not None and self.max_blocks < self.min_blocks:
            raise ValueError(f"Bounds.max_blocks ({self.max_blocks}) is below min_blocks ({self.min_blocks})")


@dataclass(frozen=True)
class Simulated:
    """One design's simulated gates through the real driver."""

    gates: int
    unchanged_s: float
    """Median seconds to a decision with no change (A/A)."""
    slowed_s: float
    """Median seconds to a decision with the slowdown."""
    unchanged_pass: float
    """Share of the A/A gates that PASS."""
    slowed_regression: float
    """Share of the slowed gates that are a REGRESSION."""
    decided: float = 1.0
    """Share of all the simulated gates (both cases) that ended decided (not INCONCLUSIVE)."""

    @property
    def objective_s(self) -> float:
        """The mean of the two medians (an undecided gate counts the time it ran)."""
        return (self.unchanged_s + self.slowed_s) / 2.0

    def rank(self) -> tuple[int, float]:
        """What the choice minimises: a design whose gates mostly decide (at least half in each
        case, so each median is a decision) before one whose gates mostly do not, then the
        objective; among designs that mostly do not decide, the seconds per decided gate."""
        if self.decided_each >= 0.5:
            return (0, self.objective_s)
        return (1, self.per_decision_s)

    @property
    def per_decision_s(self) -> float:
        """Seconds spent per gate that decided (infinite when none did): the rank of designs
        whose gates mostly stay undecided, so a cheap one that decides nothing never wins."""
        return self.objective_s / self.decided if self.decided > 0 else math.inf

    decided_each: float = 1.0
    """The smaller of the two cases' decided shares."""


@dataclass(frozen=True)
class Candidate:
    steps: int
    windows: int
    blocks: int
    """Blocks at the first look."""
    contrast_sd: float
    """sd of log of one block's contrast (head pair mean minus base pair mean)."""
    block_s: float
    """Seconds one block takes (four processes)."""
    decided_at: int | None
    """The analytic look (blocks) where the power is reached; None: not by ``max_blocks``."""
    analytic_s: float
    """Seconds to ``decided_at``; when None, to the blocks it would need beyond ``max_blocks``
    (the last look's quantiles, extrapolated): what ranks the designs that do not get there."""
    simulated: Simulated | None = None

    def key(self) -> tuple[bool, float, float, int, int]:
        """The analytic rank: reaching the power first, then the time, then the cheaper block.
        Among designs that do not reach it by ``max_blocks``, the least time they would need
        beyond it (``analytic_s``, extrapolated), never the cheapest block that decides nothing."""
        if self.decided_at is None:
            return (True, self.analytic_s, self.block_s, self.windows, self.steps)
        return (False, self.analytic_s, self.block_s, self.windows, self.steps)

    def text(self) -> str:
        return f"{self.steps} steps × {self.windows} window{'s' if self.windows != 1 else ''}, first look {self.blocks}"


@dataclass(frozen=True)
class Allocation:
    """The design chosen and what it was chosen from."""

    steps: int
    windows: int
    blocks: int
    expected_s: float
    """The chosen design's objective (module doc): simulated median seconds to a decision."""
    candidates: tuple[Candidate, ...]
    """Every design ranked analytically, best first; the simulated ones carry ``simulated``."""
    delta: float
    slowdown: float
    block_sd: float | None
    """The between-block sd of the components: it cancels from the contrast, shown only."""
    considered: str
    """The ranges searched, in words."""

    @property
    def chosen(self) -> Candidate:
        return next(c for c in self.candidates
                    if (c.steps, c.windows, c.blocks) == (self.steps, self.windows, self.blocks))

    def describe(self) -> tuple[str, ...]:
        """Lines for the calibrate report."""
        c = self.chosen
        lines = [
            f"design: {c.text()} block{'s' if c.blocks != 1 else ''}: about {duration(self.expected_s)} "
            f"to a decision ({duration(c.block_s)} per block of 4 processes)",
            f"block contrast sd {c.contrast_sd * 100:.2f}% (head pair minus base pair"
            + (f"; the {self.block_sd * 100:.1f}% between blocks cancels from it)" if self.block_sd is not None
               else "; between blocks cancels from it)"),
            f"objective: the mean of the median times to a decision with no change and with a "
            f"{self.slowdown * 100:+.3g}% slowdown (δ = {self.delta * 100:g}%), simulated through the gate's driver",
        ]
        for cand in self.candidates:
            s = cand.simulated
            if s is None:
                continue
            mark = "*" if cand is c else " "
            analytic = (f"power at {cand.decided_at} blocks, {duration(cand.analytic_s)}" if cand.decided_at
                        else f"power not reached by max_blocks: it would need about "
                             f"{cand.analytic_s / cand.block_s:.0f} blocks, {duration(cand.analytic_s)}")
            lines.append(f"{mark} {cand.text()}: {duration(s.objective_s)} (no change: {s.unchanged_pass:.0%} PASS, "
                         f"median {duration(s.unchanged_s)}; slowed: {s.slowed_regression:.0%} REGRESSION, "
                         f"median {duration(s.slowed_s)}; {s.gates} gates each; analytic: {analytic})")
        lines.append(f"{len(self.candidates)} designs ranked analytically ({self.considered})")
        return tuple(lines)


def _steps_grid(bounds: Bounds) -> list[int]:
    inside = {n for n in _STEP_GRID if bounds.min_steps <= n <= bounds.max_steps}
    return sorted(inside | {bounds.min_steps, bounds.max_steps})


def _first_looks(low: int, high: int) -> list[int]:
    looks = set(range(low, min(high, _FIRST_LOOKS_DENSE) + 1))
    n = float(max(_FIRST_LOOKS_DENSE, low))
    while n < high:
        looks.add(int(round(n)))
        n *= 1.25
    looks.add(high)
    return sorted(b for b in looks if low <= b <= high)


def _variance_caps(first: int, config: GateConfig, family: int, power: float) -> tuple[np.ndarray, np.ndarray]:
    """The looks of the schedule from ``first`` and, at each, the largest contrast variance
    that reaches the power there (module doc)."""
    schedule = Schedule(first, config.max_blocks, 1, config.spending_gamma, "t")
    counts = np.array(schedule.counts)
    level = np.array([min(schedule.level(config.alpha / family, int(c)),
                          schedule.level((1.0 - config.confidence) / 2.0, int(c))) for c in counts])
    df = counts - 1.0
    q = special.stdtrit(df, 1.0 - level) + special.stdtrit(df, power)
    room = math.log1p(config.delta)
    return counts, counts * (room / q) ** 2


def _noise_components(components: Components) -> Components:
    """The components a contrast sees: with no process level estimated (one process per
    block), the between-block sd holds it, and is taken as the process sd (on the safe side:
    it may hold a block effect that would cancel)."""
    if components.process_sd is None and components.block_sd is not None:
        return dataclasses.replace(components, process_sd=components.block_sd)
    return components


def _simulated(cand: Candidate, comps: Components, config: GateConfig, costs: LevelCosts, slowdown: float,
               gates: int, seed: int) -> Simulated:
    sim_steps = min(cand.steps, SIMULATED_STEPS)
    step_sd = (comps.step_sd or 0.0) * math.sqrt(sim_steps / cand.steps)
    noise = Noise(run_sd_log=comps.process_sd or 0.0, ar=0.0, drift_per_process=0.0, day_sd_log=0.0,
                  outlier_rate=0.0, throttle_rate=0.0)
    per_block = PROCESSES_PER_BLOCK * costs.process_seconds(cand.steps, cand.windows)
    out: list[tuple[float, float, float]] = []
    for effect, wanted in ((0.0, Verdict.PASS), (slowdown, Verdict.REGRESSION)):
        scenario = Scenario(noise, effect, paired=True, blocks=cand.blocks, workloads=1, steps=sim_steps,
                            step_sd=step_sd, windows=cand.windows, window_sd=comps.window_sd or 0.0)
        cell = simulate(scenario, gates, config, seed=seed)
        seconds = [(u or config.max_blocks) * per_block for u in cell.changed_units]
        decided = 1.0 - cell.share(Verdict.INCONCLUSIVE)
        out.append((median(seconds), cell.share(wanted), decided))
    (aa_s, aa_pass, aa_decided), (slow_s, slow_reg, slow_decided) = out
    return Simulated(gates, aa_s, slow_s, aa_pass, slow_reg, decided=(aa_decided + slow_decided) / 2,
                     decided_each=min(aa_decided, slow_decided))


def allocate(components: Components, costs: LevelCosts, config: GateConfig, *, delta: float | None = None,
             bounds: Bounds = Bounds(), family: int | None = None, slowdown: float | None = None,
             simulate_best: int = 3, gates: int = 40, seed: int = 0) -> Allocation:
    """The paired design with the least simulated time to a decision (module doc).

    ``delta``: the effect of interest (None: ``config.delta``); ``family``: the Holm family
    of the workload's hypotheses (None: its time per step, its median step and its gated
    phases); ``slowdown``: the simulated true slowdown (None: 2δ); ``simulate_best`` distinct
    designs are simulated, ``gates`` gates for each of the two cases. Deterministic per ``seed``.

    ValueError (one line) when the components hold no noise of the processes, windows or steps."""
    if delta is not None:
        config = dataclasses.replace(config, delta=delta)
    delta = config.delta
    slowdown = 2.0 * delta if slowdown is None else slowdown
    if not (isinstance(slowdown, (int, float)) and math.isfinite(slowdown) and slowdown > 0):
        raise ValueError(f"allocate: slowdown must be > 0, got {slowdown!r}")
    family = 2 + len(config.gate_phases) if family is None else family
    if isinstance(family, bool) or not isinstance(family, int) or family < 1:
        raise ValueError(f"allocate: family must be a positive integer, got {family!r}")
    for name, value in (("simulate_best", simulate_best), ("gates", gates)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"allocate: {name} must be a positive integer, got {value!r}")
    comps = _noise_components(components)
    if comps.variance_of_mean(1, 1, 1) <= 0:
        raise ValueError("allocate: the components hold no variation between processes, windows or steps; "
                         "there is nothing to allocate against")
    top = config.max_blocks if bounds.max_blocks is None else min(bounds.max_blocks, config.max_blocks)
    if top < bounds.min_blocks:
        raise ValueError(f"allocate: max_blocks = {config.max_blocks} is below the first look's "
                         f"{bounds.min_blocks} blocks")
    steps_grid = _steps_grid(bounds)
    windows_grid = list(range(bounds.min_windows, bounds.max_windows + 1))
    designs = [(n, w) for n in steps_grid for w in windows_grid]
    variances = np.array([comps.variance_of_mean(1, w, n) for n, w in designs])
    block_s = np.array([PROCESSES_PER_BLOCK * costs.process_seconds(n, w) for n, w in designs])
    candidates: list[Candidate] = []
    for first in _first_looks(bounds.min_blocks, top):
        counts, caps = _variance_caps(first, config, family, config.power)
        reached = variances[:, None] <= caps[None, :]
        hit = np.asarray(reached.any(axis=1))
        at = np.where(hit, counts[np.argmax(reached, axis=1)], 0)
        for i, (n, w) in enumerate(designs):
            decided = int(at[i]) if hit[i] else None
            # not reached by max_blocks: the blocks it would need, at the last look's quantiles
            needed = decided if decided is not None else float(counts[-1] * variances[i] / caps[-1])
            seconds = float(needed * block_s[i])
            candidates.append(Candidate(n, w, first, math.sqrt(float(variances[i])), float(block_s[i]), decided,
                                        seconds))
    candidates.sort(key=Candidate.key)
    best: dict[tuple[int, int], Candidate] = {}
    for cand in candidates:
        if len(best) >= simulate_best:
            break
        best.setdefault((cand.steps, cand.windows), cand)
    earliest = {(c.steps, c.windows): c for c in candidates if c.blocks == bounds.min_blocks}
    shortlist = [c for design, b in best.items() for c in dict.fromkeys((b, earliest[design]))]
    simulated = {id(c): dataclasses.replace(c, simulated=_simulated(c, comps, config, costs, slowdown, gates, seed))
                 for c in shortlist}
    candidates = [simulated.get(id(c), c) for c in candidates]
    order = {id(c): k for k, c in enumerate(candidates)}
    chosen = min((c for c in candidates if c.simulated is not None),
                 key=lambda c: (*c.simulated.rank(), order[id(c)]))  # type: ignore[union-attr]  # only candidates with simulated set
    assert chosen.simulated is not None
    considered = (f"steps {bounds.min_steps}–{bounds.max_steps}, windows {bounds.min_windows}–{bounds.max_windows}, "
                  f"first look {bounds.min_blocks}–{top} blocks")
    return Allocation(chosen.steps, chosen.windows, chosen.blocks, chosen.simulated.objective_s, tuple(candidates),
                      delta, float(slowdown), components.block_sd, considered)
