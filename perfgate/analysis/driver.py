"""The gate's one procedure: look, decide what can be decided, measure the rest, look again.

Every design is a :class:`Strategy` of this loop: the stored baseline (more current repeats
per look), the paired design (more ABBA blocks per look), the judge's replay of measured
files (the blocks are read, never run) and the simulation's draws. :func:`drive` owns what
they share:

- the looks: at the schedule's first count, then after every ``every`` more, up to its last
  (``GateConfig.max_blocks``); α and the PASS bound are spent over them
  (:mod:`perfgate.analysis.stats.sequential`), Holm over the whole family at each look. A
  paired gate with a budget (:class:`BudgetSpending`) spends them over the share of the budget
  its blocks measured, and all that is left at the look the budget ends;
- a decided workload (REGRESSION, PASS, IMPROVED, an ERROR) stops measuring, the others go on;
- the wall-time budget: no next group of blocks is started that the time measured so far says
  cannot end within it; the workloads left are INCONCLUSIVE, "stopped at the budget";
- an interruption (Ctrl-C) ends the gate with the looks completed so far, the workloads left
  INCONCLUSIVE, "interrupted";
- an undecided workload is green only while its interval rules out a slowdown of the gate's
  bound (:func:`perfgate.analysis.outcome.settle`); else it is TOO_NOISY, a failure.

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
from typing import Protocol, runtime_checkable

from perfgate.analysis.compare import compare
from perfgate.analysis.decide import GateConfig, Look, pass_level
from perfgate.analysis.outcome import UNDECIDED, Entry, GateOutcome, WorkloadComparison, settle
from perfgate.analysis.stats.sequential import Schedule
from perfgate.model.result import RepeatResult, RunResult
from perfgate.model.verdict import POLICY, Verdict
from perfgate.text.units import duration as duration_text

__all__ = ["BUDGET_SLACK", "MAX_PLANNED", "BudgetSpending", "BudgetTooSmall", "Driven", "Strategy", "budget_spent",
           "drive", "needed_count", "recorded_instant", "recorded_seconds", "recorded_window_seconds", "schedule_for"]


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


@runtime_checkable
class Recording(Strategy, Protocol):
    """A measuring strategy a budget's gate spends α by (:class:`BudgetSpending`)."""

    def recorded(self, names: Sequence[str]) -> Iterable[RunResult]:
        """The results measured so far of ``names``, both sides, as their files hold them."""


@runtime_checkable
class Replayed(Strategy, Protocol):
    """The judge's strategy: the units are read from the measured files, never measured, and
    the driver replays the looks over them (:func:`drive`)."""

    def stopped_short(self, name: str, count: int, last: int, open_names: Sequence[str]) -> str | None:
        """For an undecided workload whose files end before the next look (the last one taken at
        ``count``, the looks allowed up to ``last``): None when its files show the measuring job
        stopped it at the budget, else the ERROR that says why they do not."""

    def budget_share(self, names: Sequence[str], count: int) -> float:
        """The share of the budget the blocks below ``count`` measured (a sharded run: its largest)."""


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


def recorded_seconds(results: Iterable[RunResult], below: int | None = None) -> float | None:
    """The wall time the repeats of ``results`` took, from the instants their files record
    (:func:`_span_seconds`), over every repeat (only those of a block below ``below`` when it is
    given; a repeat without a block is always read). None when none is. Only a folder judged by
    hand, with no measuring job's times from the Actions API, is judged on it."""
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


def recorded_window_seconds(results: Iterable[RunResult], below: int) -> float:
    """The timed steps of every repeat of ``results`` in a block below ``below``, in seconds,
    added up exactly (``math.fsum``: the same total in any order): the share of a budget's gate
    measured at a look, from the step times the measurement holds (the very numbers the gate
    judges), never from the instants or the window durations its files record besides them."""
    return math.fsum(r.steps_s for result in results for r in result.repeats if r.block is not None and r.block < below)


@dataclass(frozen=True)
class BudgetSpending:
    """A paired gate with a wall-time budget: a look after every block from ``first`` up to
    ``cap``, α (and the PASS bound) spent over the share of the budget measured at each look,
    and all of what is left at the last look, wherever the budget ends it
    (:meth:`perfgate.analysis.stats.sequential.Schedule.spend`).

    The share at a look is the timed steps of the blocks judged, over the budget
    (:func:`recorded_window_seconds`): the step times the measuring gate and the judge read alike
    from the same results, so both find the same boundary, and no instant (or other duration) a
    file records moves it. A look is the last when the next block would not fit in the budget
    (the measuring gate's own clock; the judge: the files end there and the measuring job ran
    for the budget), or at ``cap``. A plan timed from the first block instead promised looks the budget never held
    (three quiet gates here planned 191–219 blocks and stopped at 83–92), and the α of the
    looks not taken was lost. ``cap``: an explicit ``max_blocks``, else :data:`MAX_PLANNED`."""

    budget_s: float
    first: int
    cap: int
    cap_given: bool = False
    """True when ``cap`` is a ``max_blocks`` the user set (settings or ``--max-blocks``)."""

    def __post_init__(self) -> None:
        if not (isinstance(self.budget_s, (int, float)) and math.isfinite(self.budget_s) and self.budget_s > 0):
            raise ValueError(f"BudgetSpending.budget_s must be a positive number of seconds, got {self.budget_s!r}")
        if not 2 <= self.first <= self.cap:
            raise ValueError(f"BudgetSpending: the cap ({self.cap}) cannot hold the first look ({self.first})")

    def schedule(self, gamma: float) -> Schedule:
        """The schedule before any look is taken."""
        return Schedule(self.first, self.cap, 1, gamma, "t", spending=())

    def share(self, results: Iterable[RunResult], count: int) -> float:
        """The share of the budget the blocks below ``count`` of ``results`` measured (at most 1)."""
        return min(1.0, recorded_window_seconds(results, count) / self.budget_s)

    def describe(self) -> str:
        """How its α is spent, for the progress lines: "α spent over the budget of 10 min …"."""
        cap = f"max_blocks {self.cap}" if self.cap_given else f"at most {self.cap} blocks"
        return (f"α spent over the share of the {duration_text(self.budget_s)} budget measured, all of it at the last "
                f"look ({cap})")


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
    plan: BudgetSpending | None = None
    """How α was spent over the budget (None: the schedule as given)."""


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
    plan: BudgetSpending | None = None,
    clock: Callable[[], float] = time.monotonic,
    announce: Callable[[str], None] = lambda message: None,
) -> Driven:
    """Look at ``names`` at every count of ``schedule`` until each is decided, the budget is
    spent, or the last look is taken. A :class:`Replayed` strategy (the judge's): the units are
    read, not measured; an undecided workload with fewer units than the next look is stopped
    there: "stopped at the budget" when the strategy finds the files show it (``stopped_short``
    returns None), else an ERROR saying why they do not. A short run is never a decision, nor judged on what the files claim.

    ``plan``: a budget's paired gate (:class:`BudgetSpending`; ``budget_s`` defaults to its
    budget, ``schedule`` is its :meth:`~BudgetSpending.schedule`): the first unit is measured
    first (to see that the first look fits), each look spends α up to the share of the budget
    its blocks measured (``strategy.recorded``), and the look after which the next block would
    not fit (measuring: by the time so far; replay: the files end there and the strategy finds
    the budget spent) is the last, spending all that is left. Every progress line says so."""
    unit = strategy.unit
    replayed = strategy if isinstance(strategy, Replayed) else None
    replay = replayed is not None
    recording = strategy if isinstance(strategy, Recording) else None
    if plan is not None and not replay and recording is None:
        raise TypeError("a budget's gate spends α by what its strategy recorded: it has no recorded()")
    started = clock()
    final: dict[str, WorkloadComparison] = {}
    last: dict[str, WorkloadComparison] = {}
    open_names = list(names)
    count = 0
    looks = 0
    look: Look | None = None
    stopped: dict[str, str] = {}
    interrupted = False
    if plan is not None and budget_s is None:
        budget_s = plan.budget_s
    how = f"; {plan.describe()}" if plan is not None else ""

    def plural(n: int) -> str:
        return f"{n} {unit}{'s' if n != 1 else ''}"

    def needs(c: WorkloadComparison) -> str:
        """What an undecided workload would need: "; this runner would need about 180 blocks (about 21 min) ..."."""
        if c.verdict not in UNDECIDED or look is None:
            return ""
        need = needed_count(c, config, look)
        if not need or need <= count:
            return ""
        per = None if replay else strategy.seconds_per_unit(names)
        minutes = f" (about {duration_text(per * need)})" if per and per * need >= 1.0 else ""
        return f"; this runner would need about {plural(need)}{minutes} for δ={config.delta * 100:g}%"

    if not replay and open_names and budget_s is not None and (schedule.first > 1 or plan is not None):
        # The first look is the least a gate measures: one unit first, to see whether it fits.
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
        if plan is not None:
            announce(plan.describe())

    for target in schedule.counts:
        if not open_names:
            break
        if replay:
            short = [n for n in open_names if strategy.available(n) < target]
            for name in short:
                if count == 0:
                    continue  # the first look not there whole: the strategy's entry says so (an ERROR)
                assert replayed is not None
                problem = replayed.stopped_short(name, count, schedule.last, open_names)
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
        elif count and budget_s is not None and plan is None:
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
        at_budget = False
        if plan is not None:
            if replayed is not None:
                at_budget = target < schedule.last and all(strategy.available(n) == target for n in open_names) and (
                    replayed.stopped_short(open_names[0], target, schedule.last, open_names) is None)
                share = 1.0 if at_budget else replayed.budget_share(names, target)
            else:
                assert recording is not None
                per = strategy.seconds_per_unit(open_names)
                at_budget = per is not None and clock() - started + per > plan.budget_s
                share = 1.0 if at_budget else plan.share(recording.recorded(names), target)
            at_budget = at_budget or (share >= 1.0 and target < schedule.last)  # the timed steps alone filled it
            schedule = schedule.spend(target, share)
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
                if c.verdict in UNDECIDED:
                    progress = (f"undecided at the last look, at the budget ({plural(count)}): all of α spent"
                                f"{needs(c)}{how}" if at_budget else
                                f"undecided at the last planned look ({plural(count)}){needs(c)}{how}" if plan else
                                f"undecided at the last planned look ({plural(count)}, max_blocks){needs(c)}")
                elif POLICY[c.verdict].judged:
                    progress = (f"decided after {plural(count)} ({duration_text(elapsed)}){how}" if not replay
                                else f"decided after {plural(count)} ({look.where().split(',')[0]}){how}")
                final[c.workload] = dataclasses.replace(c, progress=progress)
        if going:
            announce(f"{look.where()} ({duration_text(elapsed)}): {', '.join(going)} undecided; measuring on")
        open_names = going
        if schedule.closed:
            break

    for name in names:
        if name in final:
            continue
        why = stopped.get(name, "undecided")
        before = last.get(name)
        own = per_workload.get(name, config) if per_workload else config
        if before is None:
            final[name] = settle(WorkloadComparison(name, Verdict.INCONCLUSIVE, why, progress=f"{why}{how}"), own,
                                 ended=True)
            continue
        reason = before.reason.replace("; measuring on", "")
        settled = settle(dataclasses.replace(before, verdict=Verdict.INCONCLUSIVE, reason=f"{reason}; {why}"), own,
                         ended=True)
        final[name] = dataclasses.replace(settled, progress=f"{why}{needs(settled)}{how}")
    comparisons = []
    for name in names:
        c = final[name]
        notes = strategy.notes(name)
        comparisons.append(dataclasses.replace(c, left_out=(*c.left_out, *notes)) if notes else c)
    stop_reason = next(iter(stopped.values())) if stopped else None
    outcome = GateOutcome(tuple(comparisons), config, look or Look.single(max(schedule.first, 1), unit), stop_reason)
    return Driven(outcome, looks, count, clock() - started, interrupted, plan)
