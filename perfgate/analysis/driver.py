"""The gate's one procedure: look, decide what can be decided, measure the rest, look again.

Every design is a :class:`Strategy` of this loop: the stored baseline (more current repeats
per look), the paired design (more ABBA blocks per look), the judge's replay of measured
files (the blocks are read, never run) and the simulation's draws. :func:`drive` owns what
they share:

- the looks: at the schedule's first count, then after every ``every`` more, up to its last
  (``GateConfig.max_blocks``, or, with a :class:`BudgetPlan`, the last look the budget holds at
  the wall time of the first block measured); α and the PASS bound are spent over them
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
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Protocol

from perfgate.analysis.compare import compare
from perfgate.analysis.decide import GateConfig, Look, pass_level
from perfgate.analysis.outcome import Entry, GateOutcome, WorkloadComparison
from perfgate.analysis.stats.sequential import Schedule
from perfgate.model.result import RepeatResult, RunResult
from perfgate.model.verdict import Verdict
from perfgate.text.units import duration as duration_text

__all__ = ["BUDGET_SLACK", "MAX_PLANNED", "BudgetPlan", "BudgetTooSmall", "Driven", "PlannedLast", "Strategy",
           "budget_spent", "drive", "first_block_seconds", "needed_count", "recorded_instant", "recorded_seconds",
           "schedule_for"]


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

    # A strategy driven with a :class:`BudgetPlan` also has
    #     def recorded(self, names: Sequence[str]) -> Iterable[RunResult]
    # the results measured so far of ``names``, both sides, as their files hold them.
    # A strategy driven with ``replay=True`` also has
    #     def stopped_short(self, name: str, count: int, last: int, open_names: Sequence[str]) -> str | None
    # for an undecided workload whose files end before the next look (the last one taken at
    # ``count``, the schedule planned up to ``last``): None when its files show the measuring
    # job stopped it at the budget, else the ERROR that says why they do not.


MAX_PLANNED = 500
"""The most blocks a budget plans when no ``max_blocks`` is given (``GateConfig.max_blocks``'s own limit)."""


def recorded_instant(text: object) -> datetime | None:
    """A recorded ``started_at`` as an aware datetime (a naive one is taken as UTC); None when it is not ISO 8601."""
    if not isinstance(text, str):
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)


def first_block_seconds(results: Iterable[RunResult]) -> float | None:
    """The wall time of the first ABBA block (block 0) of all the gate's workloads, from what
    their result files record; the one definition the measuring gate and the judge both use.

    Over the n processes of block 0 (every workload's, both sides): the span from the first
    process's ``started_at`` to the last one's, times n / (n - 1) (the last process's own time
    taken as the mean gap), and at least the sum of their timed windows (the processes run one
    after the other). Only block 0 is read: the next block's start cannot end it, because the
    counted runs come between them. What comes before the first process's start (the first
    template's start) is not recorded, so it is left out. Independent of the order of the
    results: the sum is exact (``math.fsum``), the span a difference of recorded instants.
    None when no repeat of block 0 is recorded."""
    return _span_seconds(r for result in results for r in result.repeats if r.block == 0)


def recorded_seconds(results: Iterable[RunResult], below: int | None = None) -> float | None:
    """The wall time the repeats of ``results`` took, from what their files record: as
    :func:`first_block_seconds` measures block 0, over every repeat (only those of a block below
    ``below`` when it is given; a repeat without a block is always read). None when none is."""
    return _span_seconds(r for result in results for r in result.repeats
                         if below is None or r.block is None or r.block < below)


def _span_seconds(repeats: Iterable[RepeatResult]) -> float | None:
    """The wall time of ``repeats`` run one after the other, from their records: the span from
    the first ``started_at`` to the last, times n / (n - 1) (the last one's own time taken as the
    mean gap), at least the sum of their timed windows; None when there is no repeat."""
    starts: list[datetime] = []
    windows: list[float] = []
    for repeat in repeats:
        windows.append(float(repeat.window_s))
        moment = recorded_instant(getattr(repeat, "started_at", None))
        if moment is not None:
            starts.append(moment)
    if not windows:
        return None
    timed = math.fsum(windows)
    if len(starts) < 2:
        return timed
    span = (max(starts) - min(starts)).total_seconds() * len(starts) / (len(starts) - 1)
    return max(span, timed)


BUDGET_SLACK = 0.05
"""The share of the budget a measuring job may leave unspent, unrecorded, when it stops at the
budget (:func:`budget_spent`): what its files cannot show (the first template's start, the
processes' own start before their recorded instant, a block measured again)."""


def budget_spent(recorded_s: float | None, units: int, budget_s: float) -> bool:
    """Whether ``units`` blocks (or repeats) that took ``recorded_s`` seconds, as their files
    record them (:func:`recorded_seconds`), show a wall-time budget of ``budget_s`` spent: the
    measuring gate stops when the time so far and one more unit's would pass the budget, and
    the files leave out what no repeat records, so the recorded time with one more unit must
    reach the budget less the larger of two units and :data:`BUDGET_SLACK` of it."""
    if recorded_s is None or units < 1 or not (math.isfinite(recorded_s) and recorded_s > 0):
        return False
    per = recorded_s / units
    return recorded_s + per >= budget_s - max(2 * per, BUDGET_SLACK * budget_s)


@dataclass(frozen=True)
class PlannedLast:
    """The last look a :class:`BudgetPlan` planned from a first block's recorded wall time."""

    last: int
    block_s: float | None
    """The first block's wall time (:func:`first_block_seconds`); None: none was recorded."""
    allowed: int | None
    """``floor(budget / block_s)``: the blocks the budget holds, before the first look and the cap bound it."""
    plan: BudgetPlan

    def describe(self) -> str:
        """How the last look was planned: "planned up to 37 blocks: budget 10 min at about 15.8 s a block"."""
        plan = self.plan
        head = f"planned up to {self.last} blocks"
        if self.block_s is None:
            return f"{head}, the first look: no block was recorded to time the budget's blocks by"
        each = f"{self.block_s:.3g} s" if self.block_s < 60 else duration_text(self.block_s)
        budget = f"budget {duration_text(plan.budget_s)} at about {each} a block"
        assert self.allowed is not None
        if self.allowed < plan.first:
            return f"{head}, the first look ({budget} holds {self.allowed})"
        if self.allowed > plan.cap:
            cap = "max_blocks" if plan.cap_given else "the most a budget plans"
            return f"{head}, {cap} ({budget} would hold {self.allowed})"
        return f"{head}: {budget}"


@dataclass(frozen=True)
class BudgetPlan:
    """The paired gate's last look from its wall-time budget: ``clamp(floor(budget_s / block_s),
    first, cap)``, ``block_s`` the first block's recorded wall time (:func:`first_block_seconds`).

    The boundary depends on the planned last look, never on an outcome, so planning it from the
    first block, before the first look is judged, keeps every look's level. ``cap``: an explicit
    ``max_blocks``, else :data:`MAX_PLANNED`."""

    budget_s: float
    first: int
    cap: int
    cap_given: bool = False
    """True when ``cap`` is a ``max_blocks`` the user set (settings or ``--max-blocks``)."""

    def __post_init__(self) -> None:
        if not (isinstance(self.budget_s, (int, float)) and math.isfinite(self.budget_s) and self.budget_s > 0):
            raise ValueError(f"BudgetPlan.budget_s must be a positive number of seconds, got {self.budget_s!r}")
        if not 1 <= self.first <= self.cap:
            raise ValueError(f"BudgetPlan: the cap ({self.cap}) cannot hold the first look ({self.first})")

    def last_for(self, block_s: float | None) -> int:
        """The planned last look at ``block_s`` seconds a block (None: the first look)."""
        if block_s is None or not (math.isfinite(block_s) and block_s > 0):
            return self.first
        return max(self.first, min(self.cap, math.floor(self.budget_s / block_s)))

    def planned(self, results: Iterable[RunResult]) -> PlannedLast:
        """The last look planned from the recorded ``results`` (their first block)."""
        block_s = first_block_seconds(results)
        if block_s is not None and not (math.isfinite(block_s) and block_s > 0):
            block_s = None
        allowed = None if block_s is None else math.floor(self.budget_s / block_s)
        return PlannedLast(self.last_for(block_s), block_s, allowed, self)


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
    planned: PlannedLast | None = None
    """How the last look was planned from the budget (None: the schedule as given)."""


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
    plan: BudgetPlan | PlannedLast | None = None,
    clock: Callable[[], float] = time.monotonic,
    announce: Callable[[str], None] = lambda message: None,
) -> Driven:
    """Look at ``names`` at every count of ``schedule`` until each is decided, the budget is
    spent, or the last look is taken. ``replay``: the units are read, not measured; an undecided
    workload with fewer units than the next look is stopped there: "stopped at the budget" when
    the strategy finds the files show it (``stopped_short`` returns None), else an ERROR saying
    why they do not. A short run is never a decision, nor judged on what the files claim.

    ``plan``: a :class:`BudgetPlan` (measuring; ``budget_s`` defaults to its budget): the first
    unit is measured first, and the schedule's last look becomes the one the budget holds at
    the first block's recorded wall time (``strategy.recorded``), before the first look is
    judged. A :class:`PlannedLast` (the judge's replay): the last look already planned from the
    recorded files, which ``schedule`` ends at. Either way every progress line says how the
    last look was planned."""
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
    planned = plan if isinstance(plan, PlannedLast) else None
    if isinstance(plan, BudgetPlan) and budget_s is None:
        budget_s = plan.budget_s

    def plural(n: int) -> str:
        return f"{n} {unit}{'s' if n != 1 else ''}"

    if not replay and open_names and budget_s is not None and (schedule.first > 1 or isinstance(plan, BudgetPlan)):
        # The first look is the least a gate measures: one unit first, to see whether it fits,
        # and to time the block the budget's plan counts in.
        try:
            strategy.measure(open_names, 1)
        except KeyboardInterrupt:
            interrupted = True
            stopped = {name: "interrupted before the first look was measured" for name in open_names}
            open_names = []
        else:
            per = strategy.seconds_per_unit(open_names)
            if schedule.first > 1 and per is not None and per * schedule.first > budget_s:
                raise BudgetTooSmall(
                    f"budget = {duration_text(budget_s)} cannot hold the first look: {plural(schedule.first)} at "
                    f"about {duration_text(per)} each need about {duration_text(per * schedule.first)}; raise "
                    f"the budget or lower the first look (blocks / repeats)")
            if isinstance(plan, BudgetPlan):
                planned = plan.planned(strategy.recorded(names))  # type: ignore[attr-defined]  # a strategy driven with a BudgetPlan has recorded()
                schedule = dataclasses.replace(schedule, last=max(planned.last, schedule.first))
                announce(planned.describe())
    how = f"; {planned.describe()}" if planned is not None else ""

    for target in schedule.counts:
        if not open_names:
            break
        if replay:
            short = [n for n in open_names if strategy.available(n) < target]
            for name in short:
                if count == 0:
                    continue  # the first look not there whole: the strategy's entry says so (an ERROR)
                problem = strategy.stopped_short(name, count, schedule.last, open_names)  # type: ignore[attr-defined]  # a replayed strategy has stopped_short()
                if problem is not None:
                    final[name] = WorkloadComparison(name, Verdict.ERROR, problem, progress=(
                        f"measured short: {plural(strategy.available(name))} of the {plural(schedule.last)} "
                        f"planned{how}"))
                    continue
                stopped[name] = (f"stopped at the budget: the results hold {plural(strategy.available(name))}, "
                                 f"the last look there was at {plural(count)}, and its boundary had not decided")
            open_names = [n for n in open_names if n not in stopped and n not in final]
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
                    progress = (f"undecided at the last planned look ({plural(count)}){how}" if planned else
                                f"undecided at the last planned look ({plural(count)}, max_blocks)")
                elif c.verdict not in (Verdict.ERROR, Verdict.INCOMPARABLE, Verdict.NO_BASELINE):
                    progress = (f"decided after {plural(count)} ({duration_text(elapsed)}){how}" if not replay
                                else f"decided after {plural(count)} (look {look.number} of {look.looks}){how}")
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
            final[name] = WorkloadComparison(name, Verdict.INCONCLUSIVE, why, progress=f"{why}{how}")
            continue
        need = needed_count(before, config, look) if look is not None else None
        tail = (f"; this runner would need about {plural(need)} for δ={config.delta * 100:g}%"
                if need and need > count else "")
        reason = before.reason.replace("; measuring on", "")
        final[name] = dataclasses.replace(before, verdict=Verdict.INCONCLUSIVE, reason=f"{reason}; {why}",
                                          progress=f"{why}{tail}{how}")
    comparisons = []
    for name in names:
        c = final[name]
        notes = strategy.notes(name)
        comparisons.append(dataclasses.replace(c, left_out=(*c.left_out, *notes)) if notes else c)
    stop_reason = next(iter(stopped.values())) if stopped else None
    outcome = GateOutcome(tuple(comparisons), config, look or Look.single(max(schedule.first, 1), unit), stop_reason)
    return Driven(outcome, looks, count, clock() - started, interrupted, planned)
