"""Words every report uses alike for the design that decided a comparison."""

from __future__ import annotations

from statistics import median

from perfgate.analysis.outcome import GateOutcome, WorkloadComparison
from perfgate.analysis.stats import LogRatio
from perfgate.analysis.stats.components import repeats_components
from perfgate.model.repeat import MEDIAN, PER_STEP, STATISTIC_WORDS
from perfgate.text.units import change_ci, ms

__all__ = ["clock_line", "column_names", "design_lines", "step_statistics_line", "step_estimate"]


def column_names(c: WorkloadComparison) -> tuple[str, str]:
    """What the two sides of the phase table are: base/head (paired) or baseline/current."""
    return ("base", "head") if c.paired else ("baseline", "current")


def design_lines(c: WorkloadComparison) -> list[str]:
    """Which design decided and, in the paired design, the stored baseline's secondary line."""
    if not c.design:
        return []
    lines = [f"Decided by: {c.design}."]
    if c.progress:
        lines.append(f"{c.progress[0].upper()}{c.progress[1:]}.")
    if c.since_baseline:
        lines.append(f"{c.since_baseline[0].upper()}{c.since_baseline[1:]}.")
    return lines


def looks_wording(outcome: GateOutcome) -> str:
    """How α was spent over the looks, said the same way in every report's footer."""
    look = outcome.look
    if look.looks == 1:
        return "one look"
    schedule = look.schedule
    return (f"spent over up to {look.looks} looks ({look.unit}s {schedule.first}–{schedule.last}, "
            f"Hwang-Shih-DeCani γ={schedule.gamma:g}); the last look taken at {look.count} {look.unit}s")


def step_estimate(c: WorkloadComparison, statistic: str = PER_STEP) -> LogRatio | None:
    """The step's estimate under ``statistic`` (the decision's own when it held only one)."""
    if c.time is None:
        return None
    if c.time.by_statistic:
        return c.time.by_statistic[statistic].estimate
    return c.time.estimate if c.time.statistic == statistic else None


def step_statistics_line(c: WorkloadComparison) -> str | None:
    """Both sides' time per step, median step and samples/s, with the two statistics' changes:
    "time per step 10.0 → 12.5 ms (+25.0% [+20.1, +30.2]); median step ...; samples/s 800 → 640 (-20.0%)".
    Plain text; None when the workload was not judged."""
    if c.time is None or c.current is None or c.baseline is None:
        return None
    before, after = column_names(c)
    parts = []
    repeats = [r for rec in c.baseline.recordings for r in rec.repeats]
    for statistic in (PER_STEP, MEDIAN):
        est = step_estimate(c, statistic)
        then = median(r.summary_ms(statistic)["step"] for r in repeats)
        now = c.current.of(statistic)["step"]
        change = f" ({change_ci(est.ratio, est.ci_low, est.ci_high)})" if est is not None else ""
        parts.append(f"{STATISTIC_WORDS[statistic]} {ms(then)} → {ms(now)} ms{change}")
    then_sps = median(r.samples_per_s for r in repeats)
    parts.append(f"samples/s {then_sps:.4g} → {c.current.samples_per_s:.4g} "
                 f"({(c.current.samples_per_s / then_sps - 1) * 100:+.1f}%)")
    return f"{before} → {after}: " + "; ".join(parts)


def clock_line(c: WorkloadComparison) -> str | None:
    """Both sides' median SM clocks, when sampled: "SM clock: base 1590 MHz, head 1463 MHz (-8.0%)"."""
    if not c.clocks:
        return None
    parts = [f"{side} {mhz:.0f} MHz" for side, mhz in c.clocks.items()]
    values = list(c.clocks.values())
    change = f" ({(values[0] / values[1] - 1) * 100:+.1f}%)" if len(values) == 2 and values[1] > 0 else ""
    return "SM clock: " + ", ".join(parts) + change + " (shown, never a reason to leave a repeat out)"


def noise_components_line(c: WorkloadComparison) -> str | None:
    """Where this comparison's noise was, level by level (``perfgate.analysis.stats.components``):
    between blocks, processes, windows and steps; None when the repeats cannot say, or each
    timed one window (the noise line's run-to-run variation is then the whole story)."""
    if c.current is None or all(r.windows == 1 for r in c.current.repeats):
        return None
    sides: dict[str, list] = {"head": list(c.current.repeats)}
    if c.paired and c.baseline is not None:
        sides = {"base": [r for rec in c.baseline.recordings for r in rec.repeats], **sides}
    found = repeats_components(sides)
    return None if found is None else f"Where the noise was: {found.describe()}."
