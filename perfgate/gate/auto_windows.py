"""``windows = "auto"`` in a gate: each workload's windows designed before the first block, and
what the gate measured kept for the runner's next gates.

The rule is :func:`perfgate.analysis.design.choose_windows`; the evidence lives in the runner's
design folder (:mod:`perfgate.store.design_cache`). The gate records the pooled evidence it
designed from (``GateRun.designed``, ``run.json``'s ``windows_evidence``), from which the judge
re-derives every workload's windows.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from perfgate.analysis.contention import contention
from perfgate.analysis.design import (
    KEEP_GATES,
    block_overheads,
    choose_windows,
    describe_choice,
    evidence_of,
    pooled,
)
from perfgate.model.design import DesignEvidence
from perfgate.model.job import Job
from perfgate.model.result import RunResult
from perfgate.store.design_cache import design_dir, load_evidence, record_evidence

__all__ = ["design_windows", "keep_evidence"]


def design_windows(jobs: Sequence[Job], device: str, announce: Callable[[str], None]
                   ) -> tuple[dict[str, int], dict[str, DesignEvidence | None]]:
    """Each job's windows per process, and the pooled evidence each workload's were designed from.
    A script times one window per process whatever the evidence (its windows cannot be split);
    it has no entry in the evidence."""
    directory = design_dir()
    evidence: dict[str, DesignEvidence | None] = {}
    windows: dict[str, int] = {}
    for job in jobs:
        name = job.workload.name
        if job.script is not None:
            windows[name] = 1
            continue
        evidence[name] = pooled(load_evidence(directory, name, device, announce))
        windows[name] = choose_windows(evidence[name])
        announce(describe_choice(name, evidence[name]))
    return windows, evidence


def keep_evidence(results: Mapping[str, tuple[RunResult, RunResult]], device: str,
                  announce: Callable[[str], None]) -> None:
    """What the gate measured of each workload's noise and costs (``results``: its base and head
    results), kept for the runner's next gates; a workload it cannot tell about adds nothing,
    and evidence that cannot be written is announced, never a failure of the gate.

    Only a workload none of whose processes was contended teaches the next gates: a process
    that shared the CPUs with others (``perfgate.analysis.contention``) measures the other
    processes' noise and cost, not the runner's, and a contended gate here once taught the next
    one 2 windows and 36% of its time inside windows."""
    overheads = block_overheads({name: (*base.repeats, *head.repeats) for name, (base, head) in results.items()})
    for name, (base, head) in results.items():
        repeats = (*base.repeats, *head.repeats)
        contended = sum(contention(r.telemetry) is not None for r in repeats)
        if contended:
            announce(f"{name}: the design evidence of this gate is not kept: {contended} of its {len(repeats)} "
                     "processes shared the machine with other processes")
            continue
        found = evidence_of(base.repeats, head.repeats, overheads.get(name, 0.0))
        if found is None:
            continue
        try:
            record_evidence(design_dir(), name, device, found, keep=KEEP_GATES, notice=announce)
        except OSError as exc:
            announce(f"{name}: the design evidence could not be kept: {exc}")
