"""The looks of a gate replayed from a pull request's measured files (``perfgate judge``).

Nothing is measured here: the judge's driver (``perfgate.analysis.driver.drive``, which
knows a :class:`~perfgate.analysis.driver.Replayed` strategy) asks, at each planned look, for
the entries the files hold up to that look: the paired design's whole ABBA blocks
(:class:`ReplayedBlocks`), or the stored design's
repeats (:class:`ReplayedRepeats`). A workload whose files hold too few blocks, blocks out of
order or a side without its pair is an error at that look; one whose files end before its last
planned look is stopped at the budget only when they show it (:meth:`_Replay.stopped_short`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from perfgate.analysis.counted import stored_counted
from perfgate.analysis.driver import budget_spent, recorded_instant, recorded_seconds, recorded_window_seconds
from perfgate.analysis.outcome import Counted, Entry, Pairing
from perfgate.gate.config import Settings
from perfgate.gate.shards import ShardedMeasured
from perfgate.model.measuring_job import MeasuringJob
from perfgate.model.result import RunResult
from perfgate.store.baselines import find_baseline
from perfgate.store.untrusted_folders import Measured
from perfgate.text.units import duration as duration_text


def _parts(measured: Measured) -> tuple[Measured, ...]:
    """The measuring jobs' folders: each shard of a sharded run, else the run itself."""
    return tuple(measured.shards) if isinstance(measured, ShardedMeasured) and measured.shards else (measured,)


def stamp_problem(measured: Measured, job: MeasuringJob) -> str | None:
    """What makes the instants the results record impossible for the measuring job that wrote
    them (its start and end from the Actions API), or None: a repeat that started outside the
    job's run, or, in one workload's side, a repeat that started before the one measured before
    it (by index) had even finished its timed window. A sharded run: each shard's job ran its
    own span, so only the run's whole span is checked (from the first shard's start to the last
    one's end, as ``job`` gives it)."""
    for part in _parts(measured):
        for side, results in (("head", part.head), ("base", part.base)):
            for name, result in sorted(results.items()):
                ordered = sorted(result.repeats, key=lambda r: r.index)
                before = None
                for repeat in ordered:
                    moment = recorded_instant(repeat.started_at)
                    where = f"{name} ({side}) repeat {repeat.index}"
                    if moment is None:
                        return f"{where} with no start time"
                    if not job.holds(moment):
                        return (f"{where} started at {moment.isoformat()}, outside the measuring job's run "
                                f"({job.started_at.isoformat()} to {job.completed_at.isoformat()})")
                    if before is not None:
                        gap = (moment - before[0]).total_seconds()
                        if gap < before[1]:
                            return (f"{where} started {gap:.3g} s after the repeat before it, whose timed window "
                                    f"alone took {before[1]:.3g} s")
                    before = (moment, float(repeat.window_s))
    return None

def _keep(result: RunResult, keep: Any) -> RunResult | None:
    repeats = tuple(r for r in result.repeats if keep(r))
    return dataclasses.replace(result, repeats=repeats) if repeats else None


def _blocks(result: RunResult) -> set[int]:
    return {r.block for r in result.repeats if r.block is not None}


def _whole_blocks(head: RunResult, base: RunResult, limit: int) -> tuple[str | None, int]:
    """(why the blocks below ``limit`` are not measured whole, or None; how many there are).

    The invariant: every repeat carries a block ≥ 0; the blocks below ``limit`` run 0, 1, 2, …
    without a gap on both sides, each holding two repeats of each side (its ABBA or BAAB set).
    Anything else (a block with three head repeats, a gap, a side with a block the other
    lacks) is not a measurement this gate planned; leaving out slowed-down repeats happens
    later, capped, in the comparison. A block from ``limit`` on lies beyond the last look the
    base's settings allow: it is refused, never quietly left unread."""
    counts: dict[str, dict[int, int]] = {}
    for side, result in (("head", head), ("base", base)):
        by_block: dict[int, int] = {}
        for r in result.repeats:
            if r.block is None:
                return "a repeat carries no ABBA block, which the paired design needs", 0
            if r.block < 0:
                return f"the {side} side holds block {r.block}, not a planned block", 0
            if r.block >= limit:
                return (f"the {side} side holds block {r.block}, beyond the last look the base's settings allow "
                        f"({limit} blocks): refused, not read"), 0
            by_block[r.block] = by_block.get(r.block, 0) + 1
        counts[side] = by_block
    present = sorted({*counts["head"], *counts["base"]})
    total = present[-1] + 1 if present else 0
    for side in ("head", "base"):
        lacking = [b for b in range(total) if b not in counts[side]]
        if lacking:
            shown = ", ".join(str(b) for b in lacking[:8]) + (" …" if len(lacking) > 8 else "")
            return f"the {side} side lacks block(s) {shown} of the 0–{total - 1} measured", 0
        odd = sorted(b for b, n in counts[side].items() if n != 2)
        if odd:
            return (f"the {side} side holds {counts[side][odd[0]]} repeats in block {odd[0]}; an ABBA block holds "
                    "two of each side"), 0
    return None, total



class _Replay:
    """What the judge's replays share: nothing is measured, and each look's entries are the
    workloads' own, or their error, or the first look's shortfall; an undecided workload whose
    files end before its last planned look is stopped at the budget only when they show it
    (:meth:`stopped_short`)."""

    unit = "block"
    measured: Measured
    settings: Settings
    errors: dict[str, str]
    limit: int
    job: MeasuringJob | None = None
    """The measuring job's start and end from the Actions API (None: judged by hand)."""

    def budget_share(self, names: Sequence[str], count: int) -> float:
        """The share of the base's budget the blocks below ``count`` measured, as the measuring
        gate spent α by it: a sharded run's shards each spent by their own, so the largest
        (the least strict boundary: a workload a shard decided is decided here too)."""
        budget = self.settings.budget_s
        assert budget is not None
        shares = [recorded_window_seconds([*part.head.values(), *part.base.values()], count) / budget
                  for part in _parts(self.measured)]
        return min(1.0, max(shares, default=0.0))

    def available(self, name: str) -> int:
        raise NotImplementedError

    def held(self, name: str) -> int:
        """The units of ``name`` its files hold."""
        raise NotImplementedError

    def entry(self, name: str, count: int) -> Entry:
        """``name``'s entry at ``count`` units (``count`` <= :meth:`held`)."""
        raise NotImplementedError

    def _part(self, name: str) -> Measured:
        """The measuring job's folder that holds ``name``: a shard of a sharded run (each
        shard stops at its own budget, on its own clock), else the whole run."""
        return next((part for part in _parts(self.measured) if name in part.head or name in part.base),
                    self.measured)

    def stopped_short(self, name: str, count: int, last: int, open_names: Sequence[str]) -> str | None:
        """None when the files show that the measuring job stopped ``name``, undecided at the look
        of ``count`` units, at the base's wall-time budget; else the ERROR that says why not.

        A measuring gate stops an undecided workload before its last planned look (``last``) only
        at its budget, which stops every workload still undecided at once, when the time measured
        and one more unit's would pass it. So: the base must set a budget; every other workload of
        the same run (the same shard) still undecided here holds as many units; and the wall time
        the run's repeats record (:func:`~perfgate.analysis.driver.recorded_seconds`) must show the
        budget spent (:func:`~perfgate.analysis.driver.budget_spent`). Anything else (a job that
        stopped early, a run cut short, a perfgate that decided by another rule) is no decision."""
        held = self.available(name)
        unit = self.unit
        head = (f"{name}: the results hold {held} {unit}(s), the base's settings plan looks up to {last} and the "
                f"boundary had not decided at {count}")
        budget = self.settings.budget_s
        if budget is None:
            return (f"{head}; the base sets no budget (max_blocks = {self.settings.gate.max_blocks}), so the gate "
                    f"measures to its last planned look: a run measured short of it is no decision")
        part = self._part(name)
        for other in open_names:
            if other != name and other not in self.errors and self.available(other) != held and (
                    other in part.head or other in part.base):
                return (f"{head}; {other}, undecided too, holds {self.available(other)}: a budget stops every "
                        f"workload still undecided at the same {unit}, so this run was not stopped by it")
        if self.job is not None:
            # The job's own duration, as the Actions API reports it: the measuring job's work
            # (its setup included) must have lasted the budget for the budget to have stopped it.
            if not budget_spent(self.job.seconds, held, budget):
                return (f"{head}; the measuring job ran {duration_text(self.job.seconds)} by the Actions API, short "
                        f"of the base's budget of {duration_text(budget)}: the budget did not stop it")
            return None
        below = self.limit if unit == "block" else None
        seconds = recorded_seconds([*part.head.values(), *part.base.values()], below)
        if not budget_spent(seconds, held, budget):
            spent = "no recorded time" if seconds is None else f"about {duration_text(seconds)}"
            return (f"{head}; its {unit}s record {spent} of the base's budget of {duration_text(budget)}: the budget "
                    "was not spent, so the run was not stopped by it")
        return None

    def measure(self, names: Sequence[str], upto: int) -> None:
        raise AssertionError("a replay measures nothing")

    def seconds_per_unit(self, names: Sequence[str]) -> float | None:
        return None

    def notes(self, name: str) -> tuple[str, ...]:
        return ()

    def entries(self, names: Sequence[str], count: int) -> list[Entry]:
        out = []
        for name in names:
            if name in self.errors:
                out.append(Entry(name, None, None, error=self.errors[name]))
            elif self.held(name) < count:
                out.append(Entry(name, None, None, error=f"the first look was not measured whole: "
                                                         f"{self.held(name)} {self.unit}(s) of its {count}"))
            else:
                out.append(self.entry(name, count))
        return out


class ReplayedBlocks(_Replay):
    """The judge's strategy for the paired design: the blocks are read from the measured files.

    Every repeat must carry a block; the blocks (below ``limit``: ``max_blocks``, or with a
    budget its cap) must run 0, 1, 2, ... without a gap, each holding two repeats of each side
    (its ABBA or BAAB set); anything else, a block from ``limit`` on included, is an ERROR naming it."""

    unit = "block"

    def __init__(self, measured: Measured, settings: Settings, names: Sequence[str], errors: Mapping[str, str],
                 against: str | None, limit: int | None = None, job: MeasuringJob | None = None) -> None:
        self.measured, self.settings, self.against, self.job = measured, settings, against, job
        self.errors = dict(errors)
        self.limit = settings.gate.max_blocks if limit is None else limit
        self.counts: dict[str, int] = {}
        for name in names:
            if name in self.errors:
                continue
            problem, count = _whole_blocks(measured.head[name], measured.base[name], self.limit)
            if problem:
                self.errors[name] = f"the blocks were not measured whole: {problem}"
            else:
                self.counts[name] = count

    def available(self, name: str) -> int:
        return self.counts.get(name, self.limit if name in self.errors else 0)

    def counted(self, name: str) -> Counted:
        if not self.settings.gate.counters:
            return Counted(note="not compared: counters = false in the base's [tool.perfgate]")
        base_c, head_c = self.measured.base_counters.get(name), self.measured.head_counters.get(name)
        # A base side counted and a head not: compare makes that an ERROR (missing_is_error).
        lacking = [side for side, c in (("head", head_c), ("base", base_c)) if c is None]
        note = (f"not compared: no counted run of the {' and the '.join(lacking)} side"
                f"{'s' if len(lacking) == 2 else ''} in the results" if lacking else None)
        return Counted(base_c, head_c, note)

    def held(self, name: str) -> int:
        return self.counts[name]

    def entry(self, name: str, count: int) -> Entry:
        head, base = self.measured.head[name], self.measured.base[name]
        h = _keep(head, lambda r: r.block is not None and r.block < count)
        b = _keep(base, lambda r: r.block is not None and r.block < count)
        return Entry(name, h, _lookup(self.settings, head),  # held() >= count: not None
                     pairing=Pairing(b, self.against or "base"), counted=self.counted(name))  # type: ignore[arg-type]  # as h


class ReplayedRepeats(_Replay):
    """The judge's strategy for the stored design: the current repeats are read from the
    measured files, in the order they were measured (their index)."""

    unit = "repeat"

    def __init__(self, measured: Measured, settings: Settings, names: Sequence[str],
                 errors: Mapping[str, str], job: MeasuringJob | None = None) -> None:
        self.measured, self.settings, self.errors, self.job = measured, settings, dict(errors), job
        self.limit = settings.gate.max_blocks

    def available(self, name: str) -> int:
        if name in self.errors:
            return self.limit
        return len(self.measured.head[name].repeats)

    def held(self, name: str) -> int:
        return len(self.measured.head[name].repeats)

    def entry(self, name: str, count: int) -> Entry:
        result = self.measured.head[name]
        kept = dataclasses.replace(result, repeats=tuple(sorted(result.repeats, key=lambda r: r.index)[:count]))
        found = _lookup(self.settings, result)
        return Entry(name, kept, found, counted=stored_counted(found, self.measured.head_counters.get(name),
                                                                self.settings.gate))


def _lookup(settings: Settings, result: RunResult) -> Any:
    return find_baseline(settings.baselines, result.environment.key(), result.workload)
