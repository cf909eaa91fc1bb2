"""Phase attribution of a profile: the host events of profiler cycles, summed per phase.

Pure: it works on anything shaped like torch's ``FunctionEvent`` (:class:`HostEvent`)
and imports no torch. The traced run (``perfgate.measure.trace``) turns it into the
operator table; the counted run (``perfgate.measure.counters``) reads kernel launches
and memory copy calls from it (:func:`launch_counts`).

The profiler's events form one tree per thread (a child's time range lies inside its
parent's). The five phase ranges are children of ``ProfilerStep#N`` on the step's
thread; every event below a phase range is that phase's. The autograd engine runs CUDA
backward work on its own device threads while the step's thread waits inside
``backward``: the roots of a thread that runs autograd (``autograd::engine::...``) are
attributed to the phase range that contains their start time. Roots on any other thread
(a pin-memory thread) are kept apart as ``other_threads``. Kernels count toward the CPU
operator that launched them (``self_device_time_total``), so device time is attributed by
launch, even when the kernel runs after the phase ended on the host.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from perfgate.model.trace import OTHER_THREADS, OperatorRow, PhaseOperators
from perfgate.model.workload import PHASES

_STEP_RANGE = "ProfilerStep"
_AUTOGRAD_PREFIX = "autograd::engine::"
_LAUNCH_PREFIXES = ("cudaLaunch", "cuLaunch", "cudaGraphLaunch", "cuGraphLaunch")
_MEMCPY_PREFIXES = ("cudaMemcpy", "cuMemcpy")


class _TimeRange(Protocol):
    start: float
    end: float


class HostEvent(Protocol):
    """The parts of ``torch.autograd.profiler_util.FunctionEvent`` the attribution reads."""

    name: str
    thread: int
    node_id: int
    time_range: _TimeRange
    cpu_parent: Any
    cpu_children: list[Any]
    cpu_time_total: float
    self_cpu_time_total: float
    self_device_time_total: float


class _Bucket:
    """Running sums for one phase (or for the other threads), over every profiled cycle."""

    def __init__(self) -> None:
        self.ranges = 0
        self.wall_us = 0.0
        self.outside_us = 0.0
        # per range (profiled step): [wall, operator self cpu]
        self.per_range: list[list[float]] = []
        # name -> [calls, self cpu, cpu total (outermost call of a name only), self device]
        self.ops: dict[str, list[float]] = {}

    def add_range(self, event: HostEvent) -> int:
        """Count one phase range; returns its index for work on other threads."""
        self.ranges += 1
        self.wall_us += event.cpu_time_total
        self.outside_us += event.self_cpu_time_total
        self.per_range.append([event.cpu_time_total, 0.0])
        for child in event.cpu_children:
            self.add_tree(child, len(self.per_range) - 1)
        return len(self.per_range) - 1

    def add_tree(self, root: HostEvent, index: int | None = None) -> None:
        stack: list[tuple[HostEvent, frozenset[str]]] = [(root, frozenset())]
        ops = self.ops
        self_cpu = 0.0
        while stack:
            event, above = stack.pop()
            row = ops.get(event.name)
            if row is None:
                row = ops[event.name] = [0, 0.0, 0.0, 0.0]
            row[0] += 1
            row[1] += event.self_cpu_time_total
            self_cpu += event.self_cpu_time_total
            if event.name not in above:
                row[2] += event.cpu_time_total
            row[3] += event.self_device_time_total
            below = above | {event.name}
            stack.extend((child, below) for child in event.cpu_children)
        if index is not None:
            self.per_range[index][1] += self_cpu

    def calls(self, prefixes: tuple[str, ...]) -> int:
        """Calls of the operators whose name starts with one of ``prefixes``."""
        return sum(int(row[0]) for name, row in self.ops.items() if name.startswith(prefixes))

    def finish(self, phase: str, row_limit: int, device: bool) -> PhaseOperators:
        rows = [
            OperatorRow(name, int(c), round(s, 3), round(t, 3), round(d, 3) if device else None)
            for name, (c, s, t, d) in self.ops.items()
        ]
        by_cpu = sorted(rows, key=lambda r: (-r.self_cpu_us, r.name))[:row_limit]
        by_device = sorted((r for r in rows if (r.self_device_us or 0) > 0),
                           key=lambda r: (-(r.self_device_us or 0.0), r.name))[:row_limit] if device else []
        return PhaseOperators(
            phase=phase,
            ranges=self.ranges,
            wall_us=round(self.wall_us, 3),
            operator_self_cpu_us=round(sum(v[1] for v in self.ops.values()), 3),
            outside_operators_us=round(self.outside_us, 3),
            operators=len(rows),
            wall_us_per_step=tuple(round(w, 3) for w, _ in self.per_range),
            operator_self_cpu_us_per_step=tuple(round(o, 3) for _, o in self.per_range),
            by_self_cpu=tuple(by_cpu),
            device_us=round(sum(v[3] for v in self.ops.values()), 3) if device else None,
            by_device=tuple(by_device),
        )


class PhaseAttribution:
    """Sums the host events of profiler cycles into one bucket per phase."""

    def __init__(self, phases: Sequence[str] = PHASES) -> None:
        self.phases = tuple(phases)
        self.buckets = {p: _Bucket() for p in self.phases}
        self.other = _Bucket()

    def _is_phase_range(self, event: HostEvent) -> bool:
        parent = event.cpu_parent
        # A workload's own record_function("forward") lies deeper and stays an operator row.
        return event.name in self.buckets and (parent is None or parent.name.startswith(_STEP_RANGE))

    def add(self, events: Iterable[HostEvent]) -> int:
        """Attribute one cycle's host (CPU, synchronous) events; returns phase ranges found."""
        events = list(events)
        ranges = [e for e in events if self._is_phase_range(e)]
        step_threads = {(e.thread, e.node_id) for e in ranges}
        # (start, end, phase, index of the range in its phase), in time order
        spans: list[tuple[float, float, str, int]] = []
        for e in sorted(ranges, key=lambda e: e.time_range.start):
            spans.append((e.time_range.start, e.time_range.end, e.name, self.buckets[e.name].add_range(e)))
        starts = [s[0] for s in spans]
        roots = [e for e in events if e.cpu_parent is None and (e.thread, e.node_id) not in step_threads]
        autograd_threads = {(e.thread, e.node_id) for e in roots if e.name.startswith(_AUTOGRAD_PREFIX)}
        for root in roots:
            if (root.thread, root.node_id) in autograd_threads:
                i = bisect.bisect_right(starts, root.time_range.start) - 1
                if i >= 0 and root.time_range.start < spans[i][1]:
                    self.buckets[spans[i][2]].add_tree(root, spans[i][3])
                    continue
            self.other.add_tree(root)
        return len(ranges)

    def finish(self, row_limit: int, device: bool) -> tuple[dict[str, PhaseOperators], PhaseOperators | None]:
        phases = {p: b.finish(p, row_limit, device) for p, b in self.buckets.items()}
        other = self.other.finish(OTHER_THREADS, row_limit, device) if self.other.ops else None
        return phases, other


def launch_counts(events: Iterable[HostEvent]) -> tuple[dict[str, int], dict[str, int]]:
    """Kernel launches and memory copy calls per phase, from the profiler's host events."""
    attribution = PhaseAttribution()
    attribution.add(events)
    launches, memcpy = {}, {}
    for phase, bucket in attribution.buckets.items():
        launches[phase] = bucket.calls(_LAUNCH_PREFIXES)
        memcpy[phase] = bucket.calls(_MEMCPY_PREFIXES)
    return launches, memcpy
