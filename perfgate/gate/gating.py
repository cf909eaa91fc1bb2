"""The gate as a procedure: measure, compare, and one planned second look.

This is the glue the adapters (CLI, pytest plugin, CI) share. It measures through
``perfgate.measure.runner``, loads baselines from the store and decides with
``perfgate.analysis.compare``. A workload left INCONCLUSIVE at the first look gets exactly one
second look with more repeats (default: as many again), judged on all its repeats at
the second look's α; it is never "re-run until green".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from perfgate.analysis.compare import compare, stored_counted
from perfgate.analysis.outcome import Counted, Entry, GateOutcome, Pairing
from perfgate.analysis.stats import paired_look_correlation
from perfgate.gate.config import Settings
from perfgate.gate.worktree import BaseTree
from perfgate.measure.paired import ContentionCheck, PairedOutcome, Side, base_results_dir, measure_paired
from perfgate.measure.runner import Progress, RunOutcome, measure
from perfgate.model.counters import CounterSet
from perfgate.model.job import Job
from perfgate.model.result import RunResult, merge_repeats
from perfgate.store.baselines import find_baseline
from perfgate.store.discovery import discover, load_source
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


@dataclass(frozen=True)
class GateRun:
    outcome: GateOutcome
    second_look_workloads: tuple[str, ...]
    errors: Mapping[str, str] = field(default_factory=dict)
    """Workloads whose (head) measurement failed, with the message."""
    base_errors: Mapping[str, str] = field(default_factory=dict)
    """Paired: workloads whose base side failed."""
    base_missing: tuple[str, ...] = ()
    """Paired: workloads the base commit does not define."""
    notes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Per workload, each repeat or block measured again or kept although contended."""


def run_gate(
    jobs: Sequence[Job],
    *,
    settings: Settings,
    device: str,
    repeats: int,
    cache_dir: Path,
    out_dir: Path,
    progress: Callable[[Progress], None],
    timeout_s: float,
    announce: Callable[[str], None] = lambda message: None,
    telemetry: bool = True,
    contention_check: ContentionCheck | None = None,
    max_reruns: int = 3,
) -> GateRun:
    """Measure ``jobs``, compare, and look a second time at the undecided ones if planned."""
    names = [job.workload.name for job in jobs]
    first = measure(jobs, device=device, repeats=repeats, cache_dir=cache_dir, out_dir=out_dir,
                    progress=progress, timeout_s=timeout_s, telemetry=telemetry,
                    contention_check=contention_check, max_reruns=max_reruns)
    errors = {n: e.message for n, e in first.errors.items()}
    config = settings.gate
    counted = count_stored(jobs, first.results, settings, device=device, cache_dir=cache_dir, out_dir=out_dir,
                           timeout_s=timeout_s, announce=announce)
    outcome = compare(entries_for(first.results, errors, names, settings, counted), config, look=1,
                      per_workload=settings.per_workload)
    outcome = _with_contention(outcome, first.reruns, first.contended)
    again = [c.workload for c in outcome.comparisons if c.second_look]
    if not again:
        return GateRun(outcome, (), errors, notes=_notes(first.reruns, first.contended))
    extra = config.second_look_repeats or repeats
    announce(f"second look: {', '.join(again)} undecided; measuring {extra} more repeat(s) each")
    second_jobs = [job for job in jobs if job.workload.name in again]
    second = measure(second_jobs, device=device, repeats=extra, cache_dir=cache_dir,
                     out_dir=None, progress=progress, timeout_s=timeout_s, telemetry=telemetry,
                     contention_check=contention_check, max_reruns=max_reruns)
    results = dict(first.results)
    for name in again:
        if name in second.errors:
            errors[name] = second.errors[name].message
            continue
        merged = merge_repeats([first.results[name], second.results[name]])
        save_result(merged, result_path(out_dir, name))
        results[name] = merged
    decided = [n for n in names if n not in again]
    second_outcome = compare(entries_for(results, errors, again, settings, counted), config, look=2,
                             already_decided=decided, per_workload=settings.per_workload)
    second_outcome = _with_contention(
        second_outcome, {n: [*first.reruns.get(n, []), *second.reruns.get(n, [])] for n in again},
        {n: [*first.contended.get(n, []), *second.contended.get(n, [])] for n in again})
    by_name = {c.workload: c for c in outcome.comparisons}
    by_name.update({c.workload: c for c in second_outcome.comparisons})
    final = GateOutcome(tuple(by_name[n] for n in names), config, look=2)
    reruns = {n: [*first.reruns.get(n, []), *second.reruns.get(n, [])] for n in names}
    contended = {n: [*first.contended.get(n, []), *second.contended.get(n, [])] for n in names}
    return GateRun(final, tuple(again), errors, notes=_notes(reruns, contended))


def base_jobs_for(head_jobs: Sequence[Job], tree: BaseTree, *, project_dir: Path, workload_paths: Sequence[Path],
                  assignments: Mapping[str, object], device: str) -> dict[str, Job]:
    """The base side's job for each head job whose workload the base tree defines.

    The base tree's own workload files are discovered as the head's were (its version of
    a reference workload wins over the installed one); a workload defined in another file
    (a test module) is read from that file's place in the base tree. The parameters are
    resolved with the same ``--set`` assignments as the head's.
    """
    mirrored = [tree.mirror(p) for p in workload_paths]
    registry = discover([p for p in mirrored if p.exists()], project_dir=tree.mirror(project_dir), prefer_project=True)
    jobs: dict[str, Job] = {}
    for job in head_jobs:
        name = job.workload.name
        workload = registry.workloads.get(name)
        kind, _, target = job.workload.source.partition(":")
        if workload is None and kind == "file":
            there = tree.mirror(Path(target))
            if there != Path(target).resolve() and there.is_file():
                workload = next((w for w in load_source(f"file:{there}") if w.name == name), None)
        if workload is not None:
            params = workload.resolve(device, assignments)
            jobs[name] = Job(workload, params, job.overrides, job.data_root)
    return jobs


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
                notes.append(f"the {side} side's counted run failed: {outcome.error.message}")
        out[name] = Counted(sides["base"], sides["head"], "; ".join(notes) or None)
    return out


def paired_entries(head: RunOutcome, base: RunOutcome, names: Sequence[str], plan: PairedPlan,
                   baselines: Path, extra_errors: Mapping[str, str],
                   counted: Mapping[str, Counted] | None = None) -> list[Entry]:
    entries = []
    for name in names:
        if name in extra_errors:
            entries.append(Entry(name, head.results.get(name), None, error=extra_errors[name]))
        elif name in head.errors:
            entries.append(Entry(name, None, None, error=head.errors[name].message))
        elif name in base.errors:
            entries.append(Entry(name, head.results.get(name), None,
                                 error=f"the base side ({plan.against[:7]}) failed: {base.errors[name].message}"))
        else:
            result = head.results[name]
            entries.append(Entry(name, result, find_baseline(baselines, result.environment.key(), name),
                                 pairing=Pairing(base.results[name], plan.against, plan.base_python),
                                 counted=(counted or {}).get(name)))
    return entries


def run_paired_gate(
    plan: PairedPlan,
    *,
    settings: Settings,
    device: str,
    blocks: int,
    second_look_blocks: int | None,
    cache_dir: Path,
    out_dir: Path,
    progress: Callable[[Progress], None],
    timeout_s: float,
    announce: Callable[[str], None] = lambda message: None,
    telemetry: bool = True,
    contention_check: ContentionCheck | None = None,
    max_reruns: int = 3,
) -> GateRun:
    """Measure base and head in ABBA blocks, judge them paired, and look again if planned.

    A workload the base tree does not define is measured on the head alone (its result is
    written) and is an ERROR naming the cause; so is one whose base side fails. After the
    first look's blocks, each workload measured on both sides gets one counted run per
    side (unless ``counters = false``); a counter change that fails is a REGRESSION
    whatever the timing says (``perfgate.analysis.compare``), so it takes no second look.
    """
    names = [job.workload.name for job in plan.head_jobs]
    head_jobs = {job.workload.name: job for job in plan.head_jobs}
    missing = [n for n in names if n not in plan.base_jobs]
    extra_errors = {n: f"the base commit {plan.against[:7]} has no workload {n!r}; a new workload is gated "
                       f"against a stored baseline once one is recorded (perfgate rebaseline {n})"
                    for n in missing}
    if missing:
        announce(f"{', '.join(missing)}: not in the base commit; measuring the head side alone")
        measure([head_jobs[n] for n in missing], device=device, repeats=settings.repeats, cache_dir=cache_dir,
                out_dir=out_dir, progress=progress, timeout_s=timeout_s, telemetry=telemetry,
                project_dir=plan.head_dir)
    paired = [n for n in names if n not in missing]
    head_side = Side("head", head_jobs, plan.head_dir)
    base_side = Side("base", plan.base_jobs, plan.base_dir, plan.base_python)

    def run(which: Sequence[str], count: int, first: int, out: Path | None) -> PairedOutcome:
        return measure_paired(head_side, base_side, which, device=device, blocks=count, first_block=first,
                              cache_dir=cache_dir, out_dir=out, progress=progress, timeout_s=timeout_s,
                              telemetry=telemetry, contention_check=contention_check, max_reruns=max_reruns)

    first = run(paired, blocks, 0, out_dir)
    config = settings.gate
    both = [n for n in paired if n not in first.head.errors and n not in first.base.errors]
    if config.counters:
        counted = count_pairs(plan, both, device=device, cache_dir=cache_dir, out_dir=out_dir,
                              timeout_s=timeout_s, announce=announce)
    else:
        counted = {n: Counted(note="not counted: counters = false in [tool.perfgate]") for n in both}
    extra = second_look_blocks or blocks
    # Blocks are independent, so the looks' correlation is known by design: α is spent by
    # the equal-z boundary for it (about 0.0057 per look for α = 0.01 and as many blocks again).
    rho = paired_look_correlation(blocks, blocks + extra) if config.looks == 2 else None
    outcome = compare(paired_entries(first.head, first.base, names, plan, settings.baselines, extra_errors,
                                     counted), config, look=1, per_workload=settings.per_workload, rho=rho)
    outcome = _with_contention(outcome, first.reruns, first.contended)
    again = [c.workload for c in outcome.comparisons if c.second_look]
    if not again:
        return GateRun(outcome, (), {n: e.message for n, e in first.head.errors.items()},
                       {n: e.message for n, e in first.base.errors.items()}, tuple(missing),
                       _notes(first.reruns, first.contended))
    announce(f"second look: {', '.join(again)} undecided; measuring {extra} more ABBA block(s) each")
    second = run(again, extra, blocks, None)
    head, base = RunOutcome(dict(first.head.results), dict(first.head.errors)), RunOutcome(
        dict(first.base.results), dict(first.base.errors))
    for name in again:
        for side_name, merged_into, new in (("head", head, second.head), ("base", base, second.base)):
            if name in new.errors:
                merged_into.errors[name] = new.errors[name]
                continue
            merged = merge_repeats([merged_into.results[name], new.results[name]])
            target = out_dir if side_name == "head" else base_results_dir(out_dir)
            save_result(merged, result_path(target, name))
            merged_into.results[name] = merged
    decided = [n for n in names if n not in again]
    second_outcome = compare(paired_entries(head, base, again, plan, settings.baselines, extra_errors, counted),
                             config,
                             look=2, already_decided=decided, per_workload=settings.per_workload, rho=rho)
    for name in again:
        first.reruns.setdefault(name, []).extend(second.reruns.get(name, []))
        first.contended.setdefault(name, []).extend(second.contended.get(name, []))
    second_outcome = _with_contention(second_outcome, first.reruns, first.contended)
    by_name = {c.workload: c for c in outcome.comparisons}
    by_name.update({c.workload: c for c in second_outcome.comparisons})
    final = GateOutcome(tuple(by_name[n] for n in names), config, look=2, rho=rho)
    return GateRun(final, tuple(again), {n: e.message for n, e in head.errors.items()},
                   {n: e.message for n, e in base.errors.items()}, tuple(missing),
                   _notes(first.reruns, first.contended))


def _notes(reruns: Mapping[str, list[str]], contended: Mapping[str, list[str]]) -> dict[str, tuple[str, ...]]:
    names = dict.fromkeys([*reruns, *contended])
    out = {n: (*reruns.get(n, []), *contended.get(n, [])) for n in names}
    return {n: lines for n, lines in out.items() if lines}


def _with_contention(outcome: GateOutcome, reruns: Mapping[str, list[str]],
                     contended: Mapping[str, list[str]]) -> GateOutcome:
    """Name every repeat or block measured again, or kept although contended, in its workload's report."""
    comparisons = []
    for c in outcome.comparisons:
        named = [*reruns.get(c.workload, []), *contended.get(c.workload, [])]
        comparisons.append(dataclasses.replace(c, left_out=(*c.left_out, *named)) if named else c)
    return dataclasses.replace(outcome, comparisons=tuple(comparisons))
