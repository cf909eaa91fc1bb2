"""``perfgate calibrate``: what this machine's noise means for a gate.

From A/A repeats of one workload (the same code measured N times, one process each) it
reports the run-to-run variation of the step and of each phase, the number of repeats a
gate needs to catch a slowdown of δ with the requested power, and the verdict of a
split-half A/A gate (even repeats against odd ones), which should never be REGRESSION.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from statistics import median

from perfgate.analysis.allocation import Allocation, Bounds, LevelCosts, allocate
from perfgate.analysis.blocks import blocks_needed, paired_min_detectable
from perfgate.analysis.decide import GateConfig, decide_time
from perfgate.analysis.driver import schedule_for
from perfgate.analysis.stats import log_ratio, repeats_needed
from perfgate.analysis.stats.components import Components, Window, components
from perfgate.analysis.summary import summarise
from perfgate.model.result import RESIDUAL, ROWS, RunResult
from perfgate.model.errors import UsageError
from perfgate.text.units import duration, ms, percent, table


def _needed(sd: float, delta: float, alpha: float, power: float, **kw: float | int) -> str:
    try:
        return str(repeats_needed(sd, delta, alpha, power, **kw))  # type: ignore[arg-type]  # kw: repeats_needed's own keywords
    except ValueError:
        return "not reachable"


def _paired_lines(sd: float, delta: float, alpha: float, power: float, blocks: int,
                  config: GateConfig) -> list[str]:
    """What the paired design can detect here: the δ this machine supports."""
    looks = [blocks, config.max_blocks] if config.max_blocks > blocks else [blocks]
    detectable = [paired_min_detectable(sd, j, alpha, power) for j in looks]
    needed = blocks_needed(sd, delta, alpha, power)
    where = " and ".join(f"{percent(m, signed=True)} with {j} blocks" for j, m in zip(looks, detectable, strict=True))
    supported = detectable[-1]
    lines = [
        f"paired design (ABBA blocks of four processes; this run-to-run sd is an upper bound, since the "
        f"blocks remove drift between them): detects about {where} ({power:.0%} power)",
        f"  blocks needed to detect {delta:.0%}: {needed if needed is not None else 'not reachable'}",
    ]
    if supported > delta:
        lines.append(f"  this machine supports delta of about {supported:.0%} with the default blocks: with "
                     f"--delta {delta:g} most gates of a true {delta:.0%} slowdown end INCONCLUSIVE; raise "
                     f"--delta to {supported:.2g} or --blocks to {needed if needed is not None else 'far more'}")
    else:
        lines.append(f"  this machine supports delta of {delta:.0%} with {looks[-1]} blocks")
    return lines


def process_seconds(result: RunResult) -> float | None:
    """The wall time of one repeat's process (start to start of consecutive repeats), or None."""
    from datetime import datetime

    try:
        starts = sorted(datetime.fromisoformat(r.started_at) for r in result.repeats)
    except (TypeError, ValueError):
        return None
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(starts) if (b - a).total_seconds() > 0]
    return median(gaps) if gaps else None


def sequential_lines(sd: float, config: GateConfig, blocks: int, seconds: float | None, *, gates: int = 60,
                     seed: int = 0) -> list[str]:
    """What this runner's gates will do under the sequential driver, simulated through it at this
    noise (one workload: Holm over its time per step and median step, the real levels): the
    A/A PASS share, and the blocks and time to a decision, for unchanged code and a true 2δ."""
    from perfgate.analysis.simulate import Noise, Scenario, simulate
    from perfgate.model.verdict import Verdict

    noise = Noise(run_sd_log=sd, ar=0.0, day_sd_log=0.0, outlier_rate=0.0, throttle_rate=0.0)
    lines = [f"under the sequential gate (first look at {blocks} blocks, a look after every block up to "
             f"max_blocks = {config.max_blocks}; {gates} simulated gates at this noise, this workload alone):"]
    for what, slowdown in (("unchanged code", 0.0), (f"a true +{2 * config.delta:.0%}", 2 * config.delta)):
        r = simulate(Scenario(noise, slowdown, blocks=blocks, workloads=1), gates, config, seed=seed)
        used = sorted(r.units)
        mid = median(used)
        when = f", about {duration(mid * 4 * seconds)}" if seconds else ""
        verdict = Verdict.PASS if slowdown == 0 else Verdict.REGRESSION
        lines.append(f"  {what}: {r.share(verdict):.0%} {verdict.value}, {r.share(Verdict.INCONCLUSIVE):.0%} "
                     f"INCONCLUSIVE; median {mid:g} blocks to stop{when}")
    return lines


def calibration_report(result: RunResult, config: GateConfig, *, power: float = 0.8, blocks: int = 6) -> str:
    summary = summarise(result)
    n = len(result.repeats)
    lines = [
        f"calibrate {result.workload} on {result.device} ({result.environment.key()}): "
        f"{n} A/A repeats x {summary.steps} steps",
        "",
    ]
    rows = [[row, ms(summary.median_ms[row]), percent(summary.spread[row]) if summary.spread[row] is not None else "—"]
            for row in ROWS if row != RESIDUAL]
    lines.append(table(["series", "median ms", "run-to-run (sd of log)"], rows, "lrr"))
    sd = summary.spread["step"]
    if sd is None:
        return "\n".join(lines) + "\n"
    try:
        schedule = schedule_for(config, blocks)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    # The first look's level for the first of Holm's two steps (time per step, median step).
    alpha = schedule.level(config.alpha / 2, blocks)
    delta = config.delta
    lines += [
        "",
        f"repeats per side to detect a {delta:.0%} slowdown with {power:.0%} power at the first look "
        f"(one workload, one-sided level {alpha:.3g}: alpha {config.alpha:g}, Holm over its two statistics, "
        f"spent over the looks):",
        f"  same-job comparison (no day-to-day drift):           {_needed(sd, delta, alpha, power)}",
        f"  stored baseline, 1 recording, assumed day sd {config.assumed_day_sd_log:.1%}: "
        f"{_needed(sd, delta, alpha, power, day_sd_log=config.assumed_day_sd_log)}",
        f"  stored baseline, 3 recordings:                       "
        f"{_needed(sd, delta, alpha, power, day_sd_log=config.assumed_day_sd_log, baseline_recordings=3)}",
        f"  (a slowdown of exactly delta passes the point-estimate rule only half the time: "
        f"size for the slowdown you must catch, e.g. --delta {2 * delta:g})",
        "",
        *_paired_lines(sd, delta, alpha, power, blocks, config),
        "",
        *sequential_lines(sd, config, blocks, process_seconds(result)),
    ]
    steps = summary.per_repeat("step")
    half_base, half_cur = steps[0::2], steps[1::2]
    est = log_ratio(half_cur, [half_base], confidence=config.confidence,
                    assumed_day_sd_log=0.0, outlier_sd=config.outlier_sd)
    decision = decide_time({result.workload: est}, config)[result.workload]
    lines += [
        "",
        f"split-half A/A gate (odd repeats against even ones, same job, no day term): "
        f"{decision.verdict.value}: {decision.reason}",
    ]
    return "\n".join(lines) + "\n"


PROCESSES_PER_GROUP = 4
"""calibrate's processes are grouped by four, as a paired gate's block groups them (and as
one template serves them): the "between blocks" level."""


@dataclass(frozen=True)
class DesignAdvice:
    """What calibrate recommends: the components it saw, the costs, and the allocations."""

    components: Components
    costs: LevelCosts
    free: Allocation | None
    """Steps per window chosen too (a change of the workload's pinned ``steps``)."""
    pinned: Allocation | None
    """With the workload's own steps per window: what ``--auto`` writes (windows, blocks)."""
    steps: int
    lines: tuple[str, ...]


def measured_components(result: RunResult) -> Components:
    """The variance components of calibrate's repeats: groups of four processes, each of its
    windows, each step (ValueError when the repeats cannot give them)."""
    windows = []
    for i, repeat in enumerate(result.repeats):
        n = repeat.steps_per_window
        step = repeat.phases_ms["step"]
        for w, value in enumerate(repeat.window_step_ms):
            windows.append(Window(i // PROCESSES_PER_GROUP, i, w, n, value, tuple(step[w * n:(w + 1) * n])))
    return components(windows)


def design_advice(result: RunResult, process_s: float, config: GateConfig, *, how: str,
                  gates: int = 40) -> DesignAdvice:
    """The allocation of steps, windows and blocks for ``config``'s δ, from ``result``'s
    components and ``process_s`` (a process's wall time outside its timed windows; ``how``
    says how it started, for the report)."""
    found = measured_components(result)
    steps = result.repeats[0].steps_per_window
    step_s = median(s for r in result.repeats for s in r.phases_ms["step"]) / 1e3
    costs = LevelCosts(process_s=process_s, step_s=step_s)
    lines = [
        f"where the noise is: {found.describe()}",
        f"what each level costs: a process {process_s:.2f} s beyond its timed windows ({how}), a step "
        f"{ms(step_s * 1e3)} ms",
    ]
    free = pinned = None
    try:
        free = allocate(found, costs, config, gates=gates)
        pinned = allocate(found, costs, config, gates=gates, bounds=Bounds(min_steps=steps, max_steps=steps))
    except ValueError as exc:
        lines.append(f"no design recommended: {exc}")
    if pinned is not None and free is not None:
        lines += ["", f"the design for delta {config.delta:.0%} with the workload's own {steps} steps a window "
                      f"(what --auto writes):", *(f"  {line}" for line in pinned.describe())]
        if free.steps != steps:
            lines += ["", f"with steps per window free too (--set steps={free.steps}: a change of the workload's "
                          f"pinned parameters, so its stored baselines would need recording again):",
                      *(f"  {line}" for line in free.describe()[:1])]
    return DesignAdvice(found, costs, free, pinned, steps, tuple(lines))
