"""The gate as a procedure: one request, measured and judged by the sequential driver.

This is the glue the adapters (CLI, ``perfgate ci``, the pytest plugin, ``selftest``,
``bisect``) share: each builds one :class:`GateRequest` and calls :func:`run_gate`. The
measuring itself is a strategy of ``perfgate.analysis.driver.drive``: :class:`StoredMeasuring`
(more current repeats against the stored baselines) or :class:`PairedMeasuring` (more ABBA
blocks of base and head). The driver looks after every block from the first look on, with α
and the PASS bound spent over the planned looks, stops each workload once it is decided, and
stops the rest at the last planned look or the wall-time budget; it is never "re-run until
green". With a budget, the paired gate spends α over the share of the budget its blocks
measured, and all that is left at the look the budget ends
(:meth:`perfgate.gate.config.Settings.budget_spending`), so that it is spent over the looks
the gate takes, whatever a block costs.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from perfgate.analysis.counted import stored_counted
from perfgate.analysis.driver import BudgetTooSmall, drive, schedule_for
from perfgate.analysis.outcome import Counted, Entry, GateOutcome, Pairing
from perfgate.gate.auto_windows import design_windows, keep_evidence
from perfgate.gate.config import Settings
from perfgate.gate.side_jobs import paired_error
from perfgate.gate.worktree import BaseTree
from perfgate.measure.paired import ContentionCheck, PairedOutcome, Side, base_results_dir, measure_paired
from perfgate.measure.runner import Progress, RunOutcome, measure
from perfgate.measure.template import FRESH, Starter
from perfgate.model.cost import MeasuringCost
from perfgate.model.design import DesignEvidence
from perfgate.model.counters import CounterSet
from perfgate.model.errors import UsageError
from perfgate.model.job import Job
from perfgate.model.result import RepeatResult, RunResult, merge_repeats
from perfgate.store.baselines import find_baseline
from perfgate.store.results import result_path, save_result


def entries_for(results: Mapping[str, RunResult], errors: Mapping[str, str], names: Sequence[str],
                settings: Settings, head_counters: Mapping[str, CounterSet] | None = None) -> list[Entry]:
    """The stored design's entries: each result with its baseline, and the baseline's
    counted run against ``head_counters`` (the current code's) when both exist."""
    entries = []
    for name in names:
        if name in errors:
            entries.append(Entry(name, None, None, error=errors[name]))
        else:
            result = results[name]
            lookup = find_baseline(settings.baselines, result.environment.key(), name)
            entries.append(Entry(name, result, lookup,
                                 counted=stored_counted(lookup, (head_counters or {}).get(name), settings.gate)))
    return entries


def count_each(jobs: Sequence[Job], names: Collection[str], *, device: str, cache_dir: Path, out_dir: Path,
               timeout_s: float, announce: Callable[[str], None], failed: Callable[[str, str], None]
               ) -> dict[str, CounterSet]:
    """One counted run of each job named in ``names``, written to ``out_dir/<w>.counters.json``.
    A counted run that fails is handed to ``failed(workload, message)``, never raised."""
    from perfgate.measure.counters import count_job

    out: dict[str, CounterSet] = {}
    for job in jobs:
        name = job.workload.name
        if name not in names:
            continue
        announce(name)
        outcome = count_job(job, device, cache_dir, out_dir=out_dir, timeout_s=timeout_s)
        if outcome.counters is not None:
            out[name] = outcome.counters
        elif outcome.error is not None:
            failed(name, outcome.error.message)
    return out


def count_stored(jobs: Sequence[Job], results: Mapping[str, RunResult], settings: Settings, *, device: str,
                 cache_dir: Path, out_dir: Path, timeout_s: float,
                 announce: Callable[[str], None] = lambda message: None) -> dict[str, CounterSet]:
    """Stored design: one counted run of each measured workload whose baseline has one,
    written to ``out_dir/<w>.counters.json``. A counted run that fails is a note on the
    workload (its counters are simply missing), never an error of the gate."""
    from perfgate.store.counters import counters_path

    if not settings.gate.counters:
        return {}
    wanted = set()
    for name, result in results.items():
        counters_path(out_dir, name).unlink(missing_ok=True)  # never a stale file from an earlier run
        if find_baseline(settings.baselines, result.environment.key(), name).counters is not None:
            wanted.add(name)
    return count_each(jobs, wanted, device=device, cache_dir=cache_dir, out_dir=out_dir, timeout_s=timeout_s,
                      announce=lambda name: announce(f"{name}: one counted run (exact counters, against the "
                                                     "baseline's)"),
                      failed=lambda name, message: announce(f"{name}: the counted run failed: {message}"))


def starter_of(request: GateRequest) -> Starter:
    """How the gate's repeats start (``[tool.perfgate] start``); a fallback is announced once."""
    return Starter(request.settings.start_for(paired=request.paired is not None), warn=request.announce)


def measuring_cost(wall_s: float, results: Sequence[RunResult], starter: Starter, windows: int) -> MeasuringCost:
    """The share of ``wall_s`` inside the timed windows of ``results``' repeats; their windows
    as the repeats hold them (``windows`` when none is measured; a range when designed per workload)."""
    timed = math.fsum(r.window_s for result in results for r in result.repeats if isinstance(r, RepeatResult))
    counts = {r.windows for result in results for r in result.repeats}
    return MeasuringCost(wall_s=wall_s, timed_s=timed, processes=starter.processes,
                         windows=min(counts, default=windows), windows_high=max(counts, default=windows),
                         start="fork" if starter.mode == "fork" and starter.templates else "fresh",
                         templates=starter.templates, fallback=starter.fallback)


@dataclass(frozen=True)
class GateRun:
    outcome: GateOutcome
    looks: int = 1
    """Looks the driver took."""
    count: int = 0
    """Blocks (paired) or repeats (stored) of the last look."""
    seconds: float = 0.0
    interrupted: bool = False
    """Ctrl-C ended the gate: the outcome holds the looks completed before it."""
    errors: Mapping[str, str] = field(default_factory=dict)
    """Workloads whose (head) measurement failed, with the message."""
    base_errors: Mapping[str, str] = field(default_factory=dict)
    """Paired: workloads whose base side failed."""
    base_missing: tuple[str, ...] = ()
    """Paired: workloads the base commit does not define."""
    notes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Per workload, each repeat or block measured again or kept although contended."""
    cost: MeasuringCost | None = None
    """What the wall time bought: the share inside timed windows."""
    designed: Mapping[str, DesignEvidence | None] | None = None
    """``windows = "auto"``: per workload, the evidence its windows were designed from; None: not designed."""

    @property
    def went_on(self) -> bool:
        """True when the gate looked more than once."""
        return self.looks > 1


def _no_progress(event: Progress) -> None:
    pass


@dataclass(frozen=True)
class MeasuringRequest:
    """How each repeat is measured, built once by a front end from its options and carried
    to every measuring call: :meth:`repeats` (``perfgate.measure.runner.measure``) and
    :meth:`blocks` (``perfgate.measure.paired.measure_paired``) hand it on whole, so no call
    lists these settings again (or forgets one). What differs per call (the jobs, how many,
    the process starter, where results go) is the call's own."""

    device: str
    cache_dir: Path
    windows: int = 1
    """Timed windows per repeat (a gate's: its settings' ``windows``)."""
    windows_by_workload: Mapping[str, int] = field(default_factory=dict)
    """A paired gate's windows designed per workload (``windows = "auto"``); a workload not
    named here times ``windows``, or one window when it is a script under ``"auto"``."""
    windows_auto: bool = False
    """``windows = "auto"``: a script (whose steps are one window) times one window, whatever ``windows``."""
    progress: Callable[[Progress], None] = _no_progress
    timeout_s: float = 3600.0
    telemetry: bool = True
    contention_check: ContentionCheck | None = None
    """Why a repeat was contended (it is measured again), or None: contention is not checked."""
    max_reruns: int = 3

    def __post_init__(self) -> None:
        if isinstance(self.max_reruns, bool) or not isinstance(self.max_reruns, int) or self.max_reruns < 0:
            raise UsageError("--max-reruns must be 0 or more")
        if not (isinstance(self.timeout_s, (int, float)) and self.timeout_s > 0):
            raise UsageError("--timeout must be more than 0 seconds")

    def repeats(self, jobs: Sequence[Job], repeats: int, *, starter: Starter = FRESH, out_dir: Path | None = None,
                project_dir: Path | None = None, reruns_used: Mapping[str, int] | None = None) -> RunOutcome:
        """``repeats`` fresh processes of each job (``perfgate.measure.runner.measure``)."""
        return measure(list(jobs), device=self.device, repeats=repeats, cache_dir=self.cache_dir, out_dir=out_dir,
                       progress=self.progress, timeout_s=self.timeout_s, project_dir=project_dir,
                       telemetry=self.telemetry, contention_check=self.contention_check, max_reruns=self.max_reruns,
                       reruns_used=reruns_used, starter=starter, windows=self.windows_of(jobs))

    def blocks(self, head: Side, base: Side, names: Sequence[str], blocks: int, *, first_block: int = 0,
               starter: Starter = FRESH, reruns_used: Mapping[str, int] | None = None) -> PairedOutcome:
        """``blocks`` ABBA blocks of each workload in ``names``, numbered from ``first_block``
        (``perfgate.measure.paired.measure_paired``); nothing is written."""
        return measure_paired(head, base, names, device=self.device, blocks=blocks, first_block=first_block,
                              cache_dir=self.cache_dir, out_dir=None, progress=self.progress,
                              timeout_s=self.timeout_s, telemetry=self.telemetry,
                              contention_check=self.contention_check, max_reruns=self.max_reruns,
                              reruns_used=reruns_used, starter=starter,
                              windows=self.windows_of([head.jobs[n] for n in names]))

    def windows_of(self, jobs: Sequence[Job]) -> dict[str, int]:
        """Each job's timed windows per process."""
        return {job.workload.name: self.windows_by_workload.get(
                    job.workload.name, 1 if self.windows_auto and job.script is not None else self.windows)
                for job in jobs}


@dataclass(frozen=True)
class GateRequest:
    """Everything one gate needs, built once by a front end from its options."""

    jobs: Sequence[Job]
    settings: Settings
    measuring: MeasuringRequest
    """How its repeats are measured; its ``windows`` are the settings' (a gate measures as its settings design)."""
    out_dir: Path
    announce: Callable[[str], None] = lambda message: None
    paired: PairedPlan | None = None
    """The paired design's plan (base and head jobs, their trees); None: the stored baselines."""

    def __post_init__(self) -> None:
        if self.measuring.windows != self.settings.windows:
            raise ValueError(f"the measuring request's windows ({self.measuring.windows}) are not the settings' "
                             f"({self.settings.windows})")


def run_gate(request: GateRequest) -> GateRun:
    """Measure and judge ``request`` with the sequential driver, by its design."""
    settings = request.settings
    config = settings.gate
    paired = request.paired is not None
    plan = settings.budget_spending(paired=paired)
    try:  # before anything is measured
        schedule = (plan.schedule(config.spending_gamma) if plan is not None else
                    schedule_for(config, settings.blocks if paired else settings.repeats, "block" if paired else "repeat"))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    began = time.perf_counter()
    designed = None
    if paired and settings.windows_auto:
        windows, designed = design_windows(request.jobs, request.measuring.device, request.announce)
        request = dataclasses.replace(request, measuring=dataclasses.replace(request.measuring,
                                                                             windows_by_workload=windows))
    strategy: StoredMeasuring | PairedMeasuring = PairedMeasuring(request) if paired else StoredMeasuring(request)
    names = strategy.names
    try:
        driven = drive(strategy, names, config, schedule, per_workload=settings.per_workload,
                       budget_s=settings.budget_s, plan=plan, announce=request.announce)
    except BudgetTooSmall as exc:
        raise UsageError(str(exc)) from None
    finally:
        strategy.finish()
    cost = measuring_cost(time.perf_counter() - began, strategy.measured(), strategy.starter, settings.windows)
    if designed is not None and isinstance(strategy, PairedMeasuring):
        keep_evidence({n: (strategy.base.results[n], strategy.head.results[n]) for n in strategy.names
                       if n in strategy.base.results and n in strategy.head.results},
                      request.measuring.device, request.announce)
    return GateRun(dataclasses.replace(driven.outcome, cost=cost), driven.looks, driven.count, driven.seconds, driven.interrupted,
                   strategy.errors(), strategy.base_errors(), strategy.missing, strategy.all_notes(), cost, designed)


class _Measuring:
    """What both designs' strategies keep alike: the request, the process starter, each
    workload's notes (repeats or blocks measured again, or kept although contended) and the
    measuring time per unit, and the template closed at the end."""

    def __init__(self, request: GateRequest, names: Sequence[str]) -> None:
        self.request = request
        self.names = list(names)
        self.starter = starter_of(request)
        self.reruns: dict[str, list[str]] = {}
        self.contended: dict[str, list[str]] = {}
        self.per_unit: dict[str, float] = {}
        self.missing: tuple[str, ...] = ()

    def reruns_used(self, names: Sequence[str]) -> dict[str, int]:
        """Per workload, the units measured again so far (they count against ``max_reruns``)."""
        return {n: len(self.reruns.get(n, ())) for n in names}

    def noted(self, name: str, outcome: RunOutcome | PairedOutcome) -> None:
        """Keep ``outcome``'s notes on ``name``: what was measured again, what was kept although contended."""
        self.reruns.setdefault(name, []).extend(outcome.reruns.get(name, []))
        self.contended.setdefault(name, []).extend(outcome.contended.get(name, []))

    def seconds_per_unit(self, names: Sequence[str]) -> float | None:
        known = [self.per_unit[n] for n in names if n in self.per_unit]
        return sum(known) if known else None

    def notes(self, name: str) -> tuple[str, ...]:
        return (*self.reruns.get(name, ()), *self.contended.get(name, ()))

    def all_notes(self) -> dict[str, tuple[str, ...]]:
        return {n: self.notes(n) for n in self.names if self.notes(n)}

    def finish(self) -> None:
        """Close the template (every look's merged results are written as they are measured)."""
        self.starter.close()


class StoredMeasuring(_Measuring):
    """The stored design's strategy: every look measures more current repeats of the open
    workloads (one fresh process each) and judges all of them against their baselines."""

    unit = "repeat"

    def __init__(self, request: GateRequest) -> None:
        self.jobs = {job.workload.name: job for job in request.jobs}
        super().__init__(request, list(self.jobs))
        self.results: dict[str, RunResult] = {}
        self.failed: dict[str, str] = {}
        self.counted: dict[str, CounterSet] = {}
        for name in self.names:  # never a stale file from an earlier run
            result_path(request.out_dir, name).unlink(missing_ok=True)

    def available(self, name: str) -> int:
        result = self.results.get(name)
        return len(result.repeats) if result is not None else 0

    def measure(self, names: Sequence[str], upto: int) -> None:
        r = self.request
        todo = [n for n in names if n not in self.failed]
        have = {n: self.available(n) for n in todo}
        more = upto - min(have.values(), default=upto)
        if more <= 0:
            return
        began = time.perf_counter()
        done, total = upto - more, max(upto, r.settings.repeats)
        report = r.measuring.progress

        def numbered(event: Progress) -> None:
            """This call's repeats numbered in the gate's: "repeat 2/2", not "1/1" after the
            budget's first repeat measured alone."""
            report(dataclasses.replace(event, repeat=event.repeat + done, repeats=total))

        measuring = dataclasses.replace(r.measuring, progress=numbered)
        outcome = measuring.repeats([self.jobs[n] for n in todo], more, starter=self.starter,
                                    reruns_used=self.reruns_used(todo))
        spent = time.perf_counter() - began
        for name in todo:
            self.noted(name, outcome)
            if name in outcome.errors:
                self.failed[name] = outcome.errors[name].message
                continue
            new = outcome.results[name]
            merged = new if name not in self.results else merge_repeats([self.results[name], new])
            save_result(merged, result_path(r.out_dir, name))
            self.results[name] = merged
            self.per_unit[name] = spent / more / max(len(todo), 1)
        if not any(have.values()):
            m = r.measuring
            self.counted = count_stored([self.jobs[n] for n in todo if n in self.results], self.results,
                                        r.settings, device=m.device, cache_dir=m.cache_dir, out_dir=r.out_dir,
                                        timeout_s=m.timeout_s, announce=r.announce)

    def entries(self, names: Sequence[str], count: int) -> list[Entry]:
        results = {n: _first(self.results[n], count) for n in names if n in self.results}
        return entries_for(results, self.failed, list(names), self.request.settings, self.counted)

    def errors(self) -> dict[str, str]:
        return dict(self.failed)

    def base_errors(self) -> dict[str, str]:
        return {}

    def measured(self) -> list[RunResult]:
        return list(self.results.values())


def _first(result: RunResult, count: int) -> RunResult:
    """``result`` with its first ``count`` repeats (all of them when it has no more)."""
    ordered = sorted(result.repeats, key=lambda r: r.index)
    return result if len(ordered) <= count else dataclasses.replace(result, repeats=tuple(ordered[:count]))


@dataclass(frozen=True)
class PairedPlan:
    """What the paired gate compares: the head's jobs, the base side's, and where each runs."""

    head_jobs: Sequence[Job]
    base_jobs: Mapping[str, Job]
    """The base side's job per workload; a workload the base tree lacks is missing here."""
    head_dir: Path
    base_dir: Path
    against: str
    base_python: str | None = None
    head_tree: BaseTree | None = None
    """The tree the head side runs in when it is a copy of the repository (the same-shape
    sibling of the base's): what the head side records and reports names the repository's
    paths again (:func:`as_repository`). None: the head runs where its jobs point."""


def as_repository(outcome: RunOutcome, tree: BaseTree | None) -> RunOutcome:
    """``outcome`` of jobs run in ``tree`` (the head's copy of the repository) named as the
    repository's: each result's recorded source and each error's message and detail (a
    traceback, a workload file) with the tree's paths replaced by the repository's. In place."""
    if tree is None:
        return outcome
    for name, result in outcome.results.items():
        outcome.results[name] = dataclasses.replace(result, workload_source=tree.shown(result.workload_source))
    for error in outcome.errors.values():
        error.message = tree.shown(error.message)
        error.args = (error.message,)
        if error.detail is not None:
            error.detail = tree.shown(error.detail)
    return outcome


def count_pairs(plan: PairedPlan, names: Sequence[str], *, device: str, cache_dir: Path, out_dir: Path,
                timeout_s: float, announce: Callable[[str], None] = lambda message: None) -> dict[str, Counted]:
    """One counted run per side of each workload (``perfgate.measure.counters``), written
    to ``out_dir/<w>.counters.json`` and ``out_dir/base/<w>.counters.json``.

    A counted run that fails is a note naming the error, never an error of the gate: the
    timed verdict stands without the counters.
    """
    from perfgate.measure.counters import count_job
    from perfgate.store.counters import counters_path

    head_jobs = {job.workload.name: job for job in plan.head_jobs}
    out: dict[str, Counted] = {}
    for name in names:
        announce(f"{name}: one counted run per side (exact counters)")
        sides = {}
        notes = []
        for side, job, directory, where, python in (
                ("head", head_jobs[name], plan.head_dir, out_dir, None),
                ("base", plan.base_jobs[name], plan.base_dir, base_results_dir(out_dir), plan.base_python)):
            counters_path(where, name).unlink(missing_ok=True)  # never a stale file from an earlier run
            outcome = count_job(job, device, cache_dir, out_dir=where, timeout_s=timeout_s, project_dir=directory,
                                python=python)
            sides[side] = outcome.counters
            if outcome.error is not None:
                message = outcome.error.message
                notes.append(f"the {side} side's counted run failed: "
                             f"{plan.head_tree.shown(message) if side == 'head' and plan.head_tree else message}")
        out[name] = Counted(sides["base"], sides["head"], "; ".join(notes) or None)
    return out


def paired_entries(head: RunOutcome, base: RunOutcome, names: Sequence[str], plan: PairedPlan,
                   baselines: Path, counted: Mapping[str, Counted] | None = None) -> list[Entry]:
    """Each workload's entry of the paired design: an ERROR by :func:`paired_error`, else its
    head result paired with its base result."""
    head_jobs = {job.workload.name: job for job in plan.head_jobs}
    entries = []
    for name in names:
        failed = head.errors.get(name)
        error = paired_error(name, plan.against, head_error=failed.message if failed else None,
                             base_error=base.errors[name].message if name in base.errors else None,
                             in_base=name in plan.base_jobs,
                             script=None if name in plan.base_jobs else head_jobs[name].script)
        if error is not None:
            entries.append(Entry(name, None if failed else head.results.get(name), None, error=error))
        else:
            result = head.results[name]
            entries.append(Entry(name, result, find_baseline(baselines, result.environment.key(), name),
                                 pairing=Pairing(base.results[name], plan.against, plan.base_python),
                                 counted=(counted or {}).get(name)))
    return entries


class PairedMeasuring(_Measuring):
    """The paired design's strategy: every look measures more ABBA/BAAB blocks of the open
    workloads (four fresh processes each, base and head alternating) and judges them paired.

    A workload the base tree does not define is measured on the head alone (its result is
    written) and is an ERROR naming the cause; so is one whose base side fails. After the
    first look's blocks, each workload measured on both sides gets one counted run per side
    (unless ``counters = false``); a counter change that fails is a REGRESSION whatever the
    timing says (``perfgate.analysis.compare``), so it measures no further.
    """

    unit = "block"

    def __init__(self, request: GateRequest) -> None:
        assert request.paired is not None
        plan = self.plan = request.paired
        super().__init__(request, [job.workload.name for job in plan.head_jobs])
        head_jobs = {job.workload.name: job for job in plan.head_jobs}
        self.missing = tuple(n for n in self.names if n not in plan.base_jobs)
        self.head_side = Side("head", head_jobs, plan.head_dir)
        self.base_side = Side("base", plan.base_jobs, plan.base_dir, plan.base_python)
        self.head = RunOutcome()
        self.base = RunOutcome()
        self.counted: dict[str, Counted] = {}
        out = request.out_dir
        for name in self.names:  # never a stale file from an earlier run
            result_path(out, name).unlink(missing_ok=True)
            result_path(base_results_dir(out), name).unlink(missing_ok=True)
        if self.missing:
            request.announce(f"{', '.join(self.missing)}: not in the base commit; measuring the head side alone")
            alone = request.measuring.repeats([head_jobs[n] for n in self.missing], request.settings.repeats,
                                              starter=self.starter, out_dir=None, project_dir=plan.head_dir)
            for name, result in as_repository(alone, plan.head_tree).results.items():
                save_result(result, result_path(out, name))

    def _failed(self, name: str) -> bool:
        return name in self.head.errors or name in self.base.errors or name in self.missing

    def available(self, name: str) -> int:
        result = self.head.results.get(name)
        return len({r.block for r in result.repeats}) if result is not None else 0

    def measure(self, names: Sequence[str], upto: int) -> None:
        r = self.request
        todo = [n for n in names if not self._failed(n)]
        have = {n: self.available(n) for n in todo}
        start = min(have.values(), default=upto)
        if start >= upto:
            return
        began = time.perf_counter()
        new = r.measuring.blocks(self.head_side, self.base_side, todo, upto - start, first_block=start,
                                 starter=self.starter, reruns_used=self.reruns_used(todo))
        as_repository(new.head, self.plan.head_tree)
        spent = time.perf_counter() - began
        for name in todo:
            self.noted(name, new)
            for side, into, target in (("head", self.head, r.out_dir),
                                       ("base", self.base, base_results_dir(r.out_dir))):
                got: RunOutcome = getattr(new, side)
                if name in got.errors:
                    into.errors[name] = got.errors[name]
                if name in got.results:
                    part = got.results[name]
                    merged = part if name not in into.results else merge_repeats([into.results[name], part])
                    save_result(merged, result_path(target, name))
                    into.results[name] = merged
            self.per_unit[name] = spent / (upto - start) / max(len(todo), 1)
        if start == 0:
            both = [n for n in todo if not self._failed(n)]
            if r.settings.gate.counters:
                m = r.measuring
                self.counted = count_pairs(self.plan, both, device=m.device, cache_dir=m.cache_dir,
                                           out_dir=r.out_dir, timeout_s=m.timeout_s, announce=r.announce)
            else:
                self.counted = {n: Counted(note="not counted: counters = false in [tool.perfgate]") for n in both}

    def recorded(self, names: Sequence[str]) -> list[RunResult]:
        """Both sides' results of ``names`` as measured so far, as their files hold them (the
        budget's share measured is read from them, as the judge reads it from the files)."""
        return [side.results[n] for n in names for side in (self.head, self.base) if n in side.results]

    def entries(self, names: Sequence[str], count: int) -> list[Entry]:
        head = RunOutcome({n: _blocks_below(res, count) for n, res in self.head.results.items()}, self.head.errors)
        base = RunOutcome({n: _blocks_below(res, count) for n, res in self.base.results.items()}, self.base.errors)
        return paired_entries(head, base, list(names), self.plan, self.request.settings.baselines, self.counted)

    def errors(self) -> dict[str, str]:
        return {n: e.message for n, e in self.head.errors.items()}

    def base_errors(self) -> dict[str, str]:
        return {n: e.message for n, e in self.base.errors.items()}

    def measured(self) -> list[RunResult]:
        return [*self.head.results.values(), *self.base.results.values()]


def _blocks_below(result: RunResult, count: int) -> RunResult:
    kept = tuple(r for r in result.repeats if r.block is not None and r.block < count)
    return result if len(kept) == len(result.repeats) else dataclasses.replace(result, repeats=kept)
