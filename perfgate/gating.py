"""The gate as a procedure: measure, compare, and one planned second look.

This is the glue the adapters (CLI, pytest plugin, CI) share. It measures through
``perfgate.measure.runner``, loads baselines from the store and decides with
``perfgate.compare``. A workload left INCONCLUSIVE at the first look gets exactly one
second look with more repeats (default: as many again), judged on all its repeats at
the second look's α; it is never "re-run until green".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from perfgate.baseline import find_baseline
from perfgate.compare import Entry, GateOutcome, WorkloadComparison, compare
from perfgate.config import Settings
from perfgate.measure.runner import Job, Progress, measure
from perfgate.result import RunResult, merge_repeats, result_path, save_result


def entries_for(results: dict[str, RunResult], errors: dict[str, str], names: Sequence[str],
                baselines: Path) -> list[Entry]:
    entries = []
    for name in names:
        if name in errors:
            entries.append(Entry(name, None, None, error=errors[name]))
        else:
            result = results[name]
            entries.append(Entry(name, result, find_baseline(baselines, result.environment.key(), name)))
    return entries


@dataclass(frozen=True)
class GateRun:
    outcome: GateOutcome
    first_look: GateOutcome
    second_look_workloads: tuple[str, ...]

    def outcome_for(self, workload: str) -> WorkloadComparison:
        return next(c for c in self.outcome.comparisons if c.workload == workload)


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
) -> GateRun:
    """Measure ``jobs``, compare, and look a second time at the undecided ones if planned."""
    names = [job.workload.name for job in jobs]
    first = measure(jobs, device=device, repeats=repeats, cache_dir=cache_dir, out_dir=out_dir,
                    progress=progress, timeout_s=timeout_s, telemetry=telemetry)
    errors = {n: e.message for n, e in first.errors.items()}
    config = settings.gate
    outcome = compare(entries_for(first.results, errors, names, settings.baselines), config, look=1,
                      per_workload=settings.per_workload)
    again = [c.workload for c in outcome.comparisons if c.second_look]
    if not again:
        return GateRun(outcome, outcome, ())
    extra = config.second_look_repeats or repeats
    announce(f"second look: {', '.join(again)} undecided; measuring {extra} more repeat(s) each")
    second_jobs = [job for job in jobs if job.workload.name in again]
    second = measure(second_jobs, device=device, repeats=extra, cache_dir=cache_dir,
                     out_dir=None, progress=progress, timeout_s=timeout_s, telemetry=telemetry)
    results = dict(first.results)
    for name in again:
        if name in second.errors:
            errors[name] = second.errors[name].message
            continue
        merged = merge_repeats([first.results[name], second.results[name]])
        save_result(merged, result_path(out_dir, name))
        results[name] = merged
    decided = [n for n in names if n not in again]
    second_outcome = compare(entries_for(results, errors, again, settings.baselines), config, look=2,
                             already_decided=decided, per_workload=settings.per_workload)
    by_name = {c.workload: c for c in outcome.comparisons}
    by_name.update({c.workload: c for c in second_outcome.comparisons})
    final = GateOutcome(tuple(by_name[n] for n in names), config, look=2)
    return GateRun(final, outcome, tuple(again))
