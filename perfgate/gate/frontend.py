"""The front-end core: what ``perfgate`` (cli), ``perfgate ci`` and ``pytest --perfgate`` do
the same way, written once. The front ends only turn their own options into these calls.

- :func:`select_results` and :func:`judge_on_disk`: result files already on disk, judged at
  one look with the full α.
- :func:`checked_out` and :func:`paired_gate`: the base commit in a temporary worktree and
  the paired gate of the working tree against it.
- :func:`trace_regressions`: a profiler trace of each workload the gate found slower (a
  separate run that never feeds a verdict).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from perfgate.analysis.compare import compare
from perfgate.analysis.outcome import GateOutcome
from perfgate.gate.config import Settings
from perfgate.gate.gating import (
    GateRequest,
    GateRun,
    PairedPlan,
    base_jobs_for,
    entries_for,
    missing_script,
    run_gate,
)
from perfgate.gate.worktree import BaseTree, base_worktree, check_clean, repository_root, resolve_commit
from perfgate.measure.trace import trace_job
from perfgate.model.counters import CounterSet
from perfgate.model.errors import UsageError
from perfgate.model.job import Job
from perfgate.model.result import RunResult
from perfgate.model.verdict import Verdict
from perfgate.store.traces import TraceOutcome


def select_results(results: Mapping[str, RunResult], wanted: Sequence[str], where: str, verb: str) -> list[str]:
    """The workloads to judge: ``wanted``, else every result; one missing is a UsageError."""
    names = list(wanted) or sorted(results)
    missing = [n for n in names if n not in results]
    if missing:
        raise UsageError(f"no result for {', '.join(missing)} in {where}")
    if not names:
        raise UsageError(f"{where}: no result files to {verb}")
    return names


def judge_on_disk(results: Mapping[str, RunResult], names: Sequence[str], settings: Settings,
                  head_counters: Mapping[str, CounterSet]) -> GateOutcome:
    """Result files already on disk, judged against the stored baselines: one look, full α."""
    return compare(entries_for(results, {}, list(names), settings, dict(head_counters)), settings.gate,
                   per_workload=settings.per_workload)


@contextmanager
def checked_out(start: Path, ref: str, *, allow_dirty: bool) -> Iterator[BaseTree]:
    """The commit ``ref`` of the repository holding ``start``, in a temporary worktree
    (removed afterwards); the working tree must be clean unless ``allow_dirty``."""
    repo = repository_root(start)
    commit = resolve_commit(repo, ref)
    if not allow_dirty:
        check_clean(repo)
    with base_worktree(repo, commit) as tree:
        yield tree


def paired_plan(request: GateRequest, tree: BaseTree, *, project_dir: Path, workload_paths: Sequence[Path],
                assignments: Mapping[str, object], base_python: str | None = None) -> GateRequest:
    """``request`` made paired: its jobs (the working tree at ``project_dir``) against the base
    side checked out in ``tree``."""
    base_jobs = base_jobs_for(request.jobs, tree, project_dir=project_dir, workload_paths=list(workload_paths),
                              assignments=dict(assignments), device=request.device)
    for job in request.jobs:  # a script named on the command line: its absence is bad input, not a verdict
        if job.script is not None and job.script.named_on_command_line and job.workload.name not in base_jobs:
            raise UsageError(missing_script(job, tree.commit))
    plan = PairedPlan(request.jobs, base_jobs, project_dir, tree.mirror(project_dir), tree.commit, base_python)
    return dataclasses.replace(request, paired=plan)


def paired_gate(request: GateRequest, tree: BaseTree, *, project_dir: Path, workload_paths: Sequence[Path],
                assignments: Mapping[str, object], base_python: str | None = None) -> GateRun:
    """The paired gate of ``request`` against the base side checked out in ``tree``."""
    return run_gate(paired_plan(request, tree, project_dir=project_dir, workload_paths=workload_paths,
                                assignments=assignments, base_python=base_python))


def trace_regressions(outcome: GateOutcome, jobs: Sequence[Job], device: str, *, cache_dir: Path, trace_dir: Path,
                      timeout_s: float, tracing: Callable[[str], None] = lambda name: None,
                      failed: Callable[[str, TraceOutcome], None] = lambda name, outcome: None,
                      ) -> dict[str, TraceOutcome]:
    """A profiler trace of each workload the gate judged a REGRESSION, by workload."""
    traces: dict[str, TraceOutcome] = {}
    verdicts = {c.workload: c.verdict for c in outcome.comparisons}
    for job in jobs:
        name = job.workload.name
        if verdicts.get(name) is Verdict.REGRESSION:
            tracing(name)
            traces[name] = trace_job(job, device, cache_dir, trace_dir, timeout_s=timeout_s)
            if not traces[name].ok:
                failed(name, traces[name])
    return traces
