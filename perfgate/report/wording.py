"""Words every report uses alike for the design that decided a comparison."""

from __future__ import annotations

from statistics import median

from perfgate.analysis.modes import Modes, bimodal
from perfgate.analysis.outcome import GateOutcome, WorkloadComparison
from perfgate.analysis.stats import LogRatio
from perfgate.analysis.stats.components import repeats_components
from perfgate.model.repeat import MEDIAN, PER_STEP, STATISTIC_WORDS
from perfgate.report.sides import row_sides, samples_sides, sides_note
from perfgate.text.units import change_ci, ms

__all__ = ["clock_line", "column_names", "design_lines", "modes_line", "modes_lines", "side_modes", "sides_line",
           "step_statistics_line", "step_estimate"]


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
    schedule = look.schedule
    if schedule.spending is not None:
        spent = "all of it at the last look, at the budget" if schedule.closed else (
            f"{schedule.spending[look.number - 1] * 100:.0f}% of the budget when the gate ended" if schedule.spending
            else "none")
        return (f"spent over the share of the budget measured (a look after every {look.unit} from {schedule.first}, "
                f"Hwang-Shih-DeCani γ={schedule.gamma:g}; {spent}); the last look taken at {look.count} {look.unit}s")
    if look.looks == 1:
        return "one look"
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

    Beside an estimate the sides are the ones it compares (``perfgate.report.sides``): the
    reference's geometric mean weighed as the estimate weighs its repeats, and that × the
    estimated ratio, so they never move against it (:func:`sides_line` says so under it);
    samples/s follow the time per step's estimate. A statistic without an estimate shows the
    medians over repeats. Plain text; None when the workload was not judged."""
    if c.time is None or c.current is None or c.baseline is None:
        return None
    before, after = column_names(c)
    parts = []
    repeats = [r for rec in c.baseline.recordings for r in rec.repeats]
    for statistic in (PER_STEP, MEDIAN):
        est = step_estimate(c, statistic)
        shown = row_sides(c, "step", statistic, est)
        if shown is not None:
            then, now = shown.before, shown.after
        else:
            then, now = median(r.summary_ms(statistic)["step"] for r in repeats), c.current.of(statistic)["step"]
        change = f" ({change_ci(est.ratio, est.ci_low, est.ci_high)})" if est is not None else ""
        parts.append(f"{STATISTIC_WORDS[statistic]} {ms(then)} → {ms(now)} ms{change}")
    sps = samples_sides(c, step_estimate(c, PER_STEP) or c.time.estimate)
    if sps is not None:
        then_sps, now_sps = sps.before, sps.after
    else:
        then_sps, now_sps = median(r.samples_per_s for r in repeats), c.current.samples_per_s
    parts.append(f"samples/s {then_sps:.4g} → {now_sps:.4g} ({(now_sps / then_sps - 1) * 100:+.1f}%)")
    return f"{before} → {after}: " + "; ".join(parts)


def sides_line(c: WorkloadComparison) -> str | None:
    """What the sides of :func:`step_statistics_line` and of the phase table are, one sentence
    under them in every report; None when the workload was not judged."""
    if c.time is None or c.current is None or c.baseline is None:
        return None
    text = sides_note(c)
    return f"Sides: {text}."


def modes_line(side: str, modes: Modes) -> str:
    """``head: bimodal time per step, 22.5 ms (9 processes) and 25.5 ms (7) ...``: one side's two modes."""
    return (f"{side}: bimodal time per step, {ms(modes.low_ms)} ms ({modes.low_count} processes) and "
            f"{ms(modes.high_ms)} ms ({modes.high_count}), {(modes.ratio - 1) * 100:.1f}% apart — the noise model "
            "assumes one mode; an undecided gate may come from it")


def side_modes(c: WorkloadComparison) -> list[tuple[str, Modes]]:
    """Each side of ``c`` whose per-process time per step is bimodal (``perfgate.analysis.modes``),
    named: base and head (paired), the current run and each baseline recording (stored; the
    recordings one by one, since days apart they may differ by design)."""
    sides: list[tuple[str, list[float]]] = []
    if c.baseline is not None and (c.paired or c.time is not None):
        if c.paired:
            sides.append(("base", [r.per_step_ms["step"] for rec in c.baseline.recordings for r in rec.repeats]))
        else:
            many = len(c.baseline.recordings) > 1
            sides += [(f"baseline recording {j + 1}" if many else "baseline", rec.values("step"))
                      for j, rec in enumerate(c.baseline.recordings)]
    if c.current is not None:
        sides.append((column_names(c)[1], c.current.per_repeat("step")))
    found = [(side, bimodal(values)) for side, values in sides]
    return [(side, m) for side, m in found if m is not None]


def modes_lines(c: WorkloadComparison) -> list[str]:
    """One line per bimodal side of ``c`` (:func:`modes_line`); empty when none is."""
    return [modes_line(side, m) for side, m in side_modes(c)]


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
