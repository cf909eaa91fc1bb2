"""The front-end core: what ``perfgate`` (cli), ``perfgate ci`` and ``pytest --perfgate`` do
the same way, written once. The front ends only turn their own options into these calls.

- :func:`select_results` and :func:`judge_on_disk`: result files already on disk, judged at
  one look with the full α.
- :func:`checked_out` and :func:`paired_gate`: the base commit and the working tree checked
  out as sibling temporary worktrees of one shape, and the paired gate of one against the other.
- :func:`trace_regressions`: a profiler trace of each workload the gate found slower (a
  separate run that never feeds a verdict).
- :func:`interruptible` and :func:`interrupted_report`: an interrupted gate (Ctrl-C, a
  cancelled CI job's SIGTERM) is never a verdict: the front ends print what was measured
  under an INTERRUPTED headline and exit 128 + the signal (130 for SIGINT, 143 for SIGTERM).
"""

from __future__ import annotations

import dataclasses
import signal
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from perfgate.analysis.compare import compare
from perfgate.analysis.outcome import GateOutcome
from perfgate.gate.config import Settings
from perfgate.gate.gating import GateRequest, GateRun, PairedPlan, entries_for, run_gate
from perfgate.gate.side_jobs import base_jobs_for, missing_script
from perfgate.gate.worktree import BaseTree, SiblingTrees, check_clean, repository_root, resolve_commit, sibling_worktrees
from perfgate.measure.trace import trace_job
from perfgate.model.counters import CounterSet
from perfgate.model.errors import UsageError
from perfgate.model.job import Job
from perfgate.model.result import RunResult
from perfgate.model.verdict import Verdict
from perfgate.store.traces import TraceOutcome
from perfgate.text.inert import terminal
from perfgate.text.units import duration


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
def checked_out(start: Path, ref: str, *, allow_dirty: bool) -> Iterator[SiblingTrees]:
    """Both sides of ``gate --against REF`` in the repository holding ``start``, as sibling
    trees of one shape in one temporary directory (removed afterwards,
    :func:`perfgate.gate.worktree.sibling_worktrees`): ``base/`` the commit ``ref`` names,
    ``head/`` HEAD's commit with the working tree's untracked files that git does not ignore
    and, with ``allow_dirty``, its uncommitted changes to tracked files copied in (without
    it the working tree must have none)."""
    repo = repository_root(start)
    commit = resolve_commit(repo, ref)
    if not allow_dirty:
        check_clean(repo)
    head = resolve_commit(repo, "HEAD", role="the working tree's")
    with sibling_worktrees(repo, head, commit, working_tree=True) as trees:
        yield trees


def paired_plan(request: GateRequest, trees: SiblingTrees, *, project_dir: Path, workload_paths: Sequence[Path],
                assignments: Mapping[str, object], base_python: str | None = None) -> GateRequest:
    """``request`` made paired: its jobs (built from the repository at ``project_dir``), each
    side's found in its own tree of ``trees`` and run there.

    The head side's job of each workload is the one ``trees.head`` defines (a workload
    defined outside the repository, or in a file git ignores, keeps the repository's job);
    the request's jobs stay the repository's, and what the head side records or reports is
    named by the repository's paths again (:attr:`PairedPlan.head_tree`)."""
    def jobs_in(tree: BaseTree) -> dict[str, Job]:
        return base_jobs_for(request.jobs, tree, project_dir=project_dir, workload_paths=list(workload_paths),
                             assignments=dict(assignments), device=request.measuring.device)

    in_head = jobs_in(trees.head)
    head_jobs = [job if job.workload.name not in in_head else
                 dataclasses.replace(in_head[job.workload.name], inject_ms=job.inject_ms) for job in request.jobs]
    base_jobs = jobs_in(trees.base)
    for job in request.jobs:  # a script named on the command line: its absence is bad input, not a verdict
        if job.script is not None and job.script.named_on_command_line and job.workload.name not in base_jobs:
            raise UsageError(missing_script(job, trees.commit))
    plan = PairedPlan(head_jobs, base_jobs, trees.head.mirror(project_dir), trees.base.mirror(project_dir),
                      trees.commit, base_python, head_tree=trees.head)
    return dataclasses.replace(request, paired=plan)


def paired_gate(request: GateRequest, trees: SiblingTrees, *, project_dir: Path, workload_paths: Sequence[Path],
                assignments: Mapping[str, object], base_python: str | None = None) -> GateRun:
    """The paired gate of ``request``: its head side in ``trees.head``, its base side in ``trees.base``."""
    return run_gate(paired_plan(request, trees, project_dir=project_dir, workload_paths=workload_paths,
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


# --- an interrupted gate ------------------------------------------------------------------

INTERRUPTING = (signal.SIGINT, signal.SIGTERM)
"""The signals that interrupt a gate: Ctrl-C, and the SIGTERM a cancelled CI job gets."""


@dataclass
class Interruption:
    """The signal that interrupted the gate; ``signum`` None while none has."""

    signum: int | None = None

    @property
    def name(self) -> str:
        """"SIGINT" or "SIGTERM" (a KeyboardInterrupt raised without a signal counts as SIGINT)."""
        return signal.Signals(self.signum or signal.SIGINT).name

    @property
    def exit_code(self) -> int:
        """128 + the signal, as a shell reports a process the signal ended: 130, 143."""
        return 128 + int(self.signum or signal.SIGINT)


_ACTIVE: list[Interruption] = []


@contextmanager
def interruptible() -> Iterator[Interruption]:
    """While the block runs, SIGINT and SIGTERM raise KeyboardInterrupt (so every cleanup
    runs: the worktree, the template, each repeat's process group) and the signal is kept
    in the :class:`Interruption` yielded, for the exit code. Nested, the outer block's
    record is yielded; a signal ignored when the block starts (a background job's SIGINT)
    stays ignored; off the main thread nothing is installed."""
    if _ACTIVE:
        yield _ACTIVE[-1]
        return
    state = Interruption()
    if threading.current_thread() is not threading.main_thread():
        yield state
        return

    def interrupt(signum: int, frame: object) -> None:
        if state.signum is None:
            state.signum = signum
        raise KeyboardInterrupt

    previous = {}
    for sig in INTERRUPTING:
        if signal.getsignal(sig) is not signal.SIG_IGN:
            previous[sig] = signal.signal(sig, interrupt)
    _ACTIVE.append(state)
    try:
        yield state
    finally:
        _ACTIVE.remove(state)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def interrupted_lines(run: GateRun, interruption: Interruption) -> list[str]:
    """The partial report of an interrupted gate, plain text made inert: an INTERRUPTED
    headline with no verdict, then what each workload had reached (a workload decided at
    a look before the interruption says so; the others' last estimates decide nothing)."""
    def plural(n: int, word: str) -> str:
        return f"{n} {word}{'s' if n != 1 else ''}"

    unit = run.outcome.look.unit
    done = (f"after {plural(run.looks, 'look')} ({plural(run.count, unit)}, {duration(run.seconds)})" if run.looks
            else "before the first look was measured")
    lines = [f"perfgate: INTERRUPTED by {interruption.name}: no verdict (exit code {interruption.exit_code})",
             f"The gate was interrupted {done}, before it ran its course: what it measured until then is "
             "below, and the gate decided nothing. Run it again to its end for a verdict.", ""]
    for c in run.outcome.comparisons:
        stopped = (c.progress or "").startswith("interrupted") or c.reason.startswith("interrupted")
        if stopped or c.goes_on:
            lines.append(f"{terminal(c.workload)}: not decided: {terminal(c.progress or c.reason)}")
            if c.time is not None:
                lines.append(f"  the last look: {terminal(c.reason)}")
        else:
            lines.append(f"{terminal(c.workload)}: {c.verdict.value} at a look before the interruption: "
                         f"{terminal(c.headline)}")
    return lines
