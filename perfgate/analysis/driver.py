"""The gate's one procedure: look, decide what can be decided, measure the rest, look again.

Every design is a :class:`Strategy` of this loop: the stored baseline (more current repeats
per look), the paired design (more ABBA blocks per look), the judge's replay of measured
files (the blocks are read, never run) and the simulation's draws. :func:`drive` owns what
they share:

- the looks: at the schedule's first count, then after every ``every`` more, up to its last
  (``GateConfig.max_blocks``); α and the PASS bound are spent over them
  (:mod:`perfgate.analysis.stats.sequential`), Holm over the whole family at each look;
- a decided workload (REGRESSION, PASS, IMPROVED, an ERROR) stops measuring, the others go on;
- the wall-time budget: no next group of blocks is started that the time measured so far says
  cannot end within it; the workloads left are INCONCLUSIVE, "stopped at the budget";
- an interruption (Ctrl-C) ends the gate with the looks completed so far, the workloads left
  INCONCLUSIVE, "interrupted".

Pure: nothing here measures, reads a file or prints; the strategy does, and ``announce``
says what happens.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from perfgate.analysis.compare import compare
from perfgate.analysis.decide import GateConfig, Look, pass_level
from perfgate.analysis.outcome import Entry, GateOutcome, WorkloadComparison
from perfgate.analysis.stats.sequential import Schedule
from perfgate.model.verdict import Verdict
from perfgate.text.units import duration as duration_text

__all__ = ["BudgetTooSmall", "Driven", "Strategy", "drive", "needed_count", "schedule_for"]


class BudgetTooSmall(ValueError):
    """The wall-time budget cannot hold the first look (measured on its first unit)."""


class Strategy(Protocol):
    """One design's way of getting the blocks (or repeats) a look judges."""

    unit: str
    """"block" (paired) or "repeat" (stored baseline)."""

    def measure(self, names: Sequence[str], upto: int) -> None:
        """Bring every workload in ``names`` to ``upto`` units (a failure is kept for ``entries``)."""

    def available(self, name: str) -> int:
        """The units of ``name`` there are to judge (live: measured; replay: in the files)."""

    def entries(self, names: Sequence[str], count: int) -> list[Entry]:
        """The entries judged at ``count`` units (a workload that failed: an entry with its error)."""

    def seconds_per_unit(self, names: Sequence[str]) -> float | None:
        """Wall time one more unit of all of ``names`` takes, from what was measured (None: unknown)."""

    def notes(self, name: str) -> tuple[str, ...]:
        """Lines to show under the workload: each block measured again, or kept although contended."""


def schedule_for(config: GateConfig, first: int, unit: str = "block") -> Schedule:
    """The planned looks: at ``first`` units, then after every one more, up to ``config.max_blocks``.

    Blocks (the paired design) are judged by a one-sample t on ``count - 1`` df, whose exact
    boundary the schedule uses (``pivot="t"``); repeats against a stored baseline by the
    Brownian boundary at each estimate's own information (``pivot="information"``: their
    variance holds the baseline's and the day's, which more current repeats do not shrink).
    ValueError (one line) when ``max_blocks`` cannot hold the first look."""
    if config.max_blocks < first:
        raise ValueError(f"max_blocks = {config.max_blocks} cannot hold the first look's {first} {unit}s; "
                         f"raise max_blocks or lower the first look")
    return Schedule(first, config.max_blocks, 1, config.spending_gamma, "t" if unit == "block" else "information")


@dataclass(frozen=True)
class Driven:
    outcome: GateOutcome
    looks: int
    """Looks taken."""
    count: int
    """Units (blocks or repeats) of the last look taken."""
    seconds: float
    interrupted: bool = False


def needed_count(comparison: WorkloadComparison, config: GateConfig, look: Look) -> int | None:
    """About how many units unchanged code would need to PASS, at this noise: the count at which
    the PASS bound's half-width (at this look's level) shrinks below δ, with the estimate at 0."""
    time_ = comparison.time
    if time_ is None or not time_.by_statistic:
        decisions = [time_] if time_ is not None else []
    else:
        decisions = list(time_.by_statistic.values())
    worst = 0.0
    for d in decisions:
        se = d.estimate.se_log
        if not (isinstance(se, float) and math.isfinite(se) and se > 0):
            return None
        worst = max(worst, se)
    if worst == 0.0:
        return None
    from scipy import special

    # the t quantile of this look (its degrees of freedom): an estimate from these blocks
    df = min((d.estimate.df for d in decisions), default=math.inf)
    level = pass_level(config, look)
    z = float(special.stdtrit(df, 1.0 - level)) if math.isfinite(df) and df > 0 else -float(special.ndtri(level))
    room = math.log1p(config.delta)
    need = look.count * (z * worst / room) ** 2
    return int(math.ceil(need)) if math.isfinite(need) else None


def drive(
    strategy: Strategy,
    names: Sequence[str],
    config: GateConfig,
    schedule: Schedule,
    *,
    per_workload: Mapping[str, GateConfig] | None = None,
    budget_s: float | None = None,
    replay: bool = False,
    clock: Callable[[], float] = time.monotonic,
    announce: Callable[[str], None] = lambda message: None,
) -> Driven:
    """Look at ``names`` at every count of ``schedule`` until each is decided, the budget is
    spent, or the last look is taken. ``replay``: the units are read, not measured; a workload
    with fewer units than the next look is stopped there ("stopped at the budget": the
    measuring job measured no further), never judged on what the files claim."""
    unit = strategy.unit
    started = clock()
    final: dict[str, WorkloadComparison] = {}
    last: dict[str, WorkloadComparison] = {}
    open_names = list(names)
    count = 0
    looks = 0
    look: Look | None = None
    stopped: dict[str, str] = {}
    interrupted = False

    def plural(n: int) -> str:
        return f"{n} {unit}{'s' if n != 1 else ''}"

    for target in schedule.counts:
        if not open_names:
            break
        if replay:
            short = [n for n in open_names if strategy.available(n) < target]
            for name in short:
                if count == 0:
                    continue  # the first look not there whole: the strategy's entry says so (an ERROR)
                stopped[name] = (f"stopped at the budget: the results hold {plural(strategy.available(name))}, "
                                 f"the last look there was at {plural(count)}, and its boundary had not decided")
            open_names = [n for n in open_names if n not in stopped]
            if not open_names:
                break
        elif count and budget_s is not None:
            per = strategy.seconds_per_unit(open_names)
            elapsed = clock() - started
            if per is not None and elapsed + per * (target - count) > budget_s:
                for name in open_names:
                    stopped[name] = (f"stopped at the budget ({duration_text(budget_s)}) after {plural(count)} "
                                     f"({duration_text(elapsed)}): the next look needs about "
                                     f"{duration_text(per * (target - count))} more")
                break
        if not replay:
            try:
                if count == 0 and budget_s is not None and target > 1:
                    # The first look is the least a gate measures: one unit first, to see whether it fits.
                    strategy.measure(open_names, 1)
                    per = strategy.seconds_per_unit(open_names)
                    if per is not None and per * target > budget_s:
                        raise BudgetTooSmall(
                            f"budget = {duration_text(budget_s)} cannot hold the first look: {plural(target)} at "
                            f"about {duration_text(per)} each need about {duration_text(per * target)}; raise the "
                            f"budget or lower the first look (blocks / repeats)")
                strategy.measure(open_names, target)
            except KeyboardInterrupt:
                interrupted = True
                for name in open_names:
                    stopped[name] = (f"interrupted after {plural(count)} ({duration_text(clock() - started)}); "
                                     "the looks completed are shown" if count else
                                     "interrupted before the first look was measured")
                break
        count = target
        looks += 1
        look = Look(count, schedule, unit)
        decided = [n for n in names if n not in open_names]
        outcome = compare(strategy.entries(open_names, count), config, look=look, already_decided=decided,
                          per_workload=per_workload)
        elapsed = clock() - started
        going = []
        for c in outcome.comparisons:
            if c.goes_on:
                going.append(c.workload)
                last[c.workload] = c
            else:
                progress = None
                if c.verdict is Verdict.INCONCLUSIVE:
                    progress = f"undecided at the last planned look ({plural(count)}, max_blocks)"
                elif c.verdict not in (Verdict.ERROR, Verdict.INCOMPARABLE, Verdict.NO_BASELINE):
                    progress = (f"decided after {plural(count)} ({duration_text(elapsed)})" if not replay
                                else f"decided after {plural(count)} (look {look.number} of {look.looks})")
                final[c.workload] = dataclasses.replace(c, progress=progress)
        if going:
            announce(f"look {look.number} of {look.looks} at {plural(count)} ({duration_text(elapsed)}): "
                     f"{', '.join(going)} undecided; measuring on")
        open_names = going

    for name in names:
        if name in final:
            continue
        why = stopped.get(name, "undecided")
        before = last.get(name)
        if before is None:
            final[name] = WorkloadComparison(name, Verdict.INCONCLUSIVE, why, progress=why)
            continue
        need = needed_count(before, config, look) if look is not None else None
        tail = (f"; this runner would need about {plural(need)} for δ={config.delta * 100:g}%"
                if need and need > count else "")
        reason = before.reason.replace("; measuring on", "")
        final[name] = dataclasses.replace(before, verdict=Verdict.INCONCLUSIVE, reason=f"{reason}; {why}",
                                          progress=f"{why}{tail}")
    comparisons = []
    for name in names:
        c = final[name]
        notes = strategy.notes(name)
        comparisons.append(dataclasses.replace(c, left_out=(*c.left_out, *notes)) if notes else c)
    reason = None
    if stopped:
        reason = next(iter(stopped.values()))
    outcome = GateOutcome(tuple(comparisons), config, look or Look.single(max(schedule.first, 1), unit), reason)
    return Driven(outcome, looks, count, clock() - started, interrupted)
