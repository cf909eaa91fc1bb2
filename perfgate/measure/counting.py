"""The counting modes of the counted run: its aten calls, FLOPs and synchronisations per phase.

:class:`Counts` holds the running totals per phase. In the operator pass,
:func:`op_counter` (a ``TorchDispatchMode``) counts every aten call, its copies and
conversions and the calls that force a host synchronisation (where they were made: a
:class:`perfgate.measure.sync_sites.Locator`); on CUDA :func:`sync_warnings` adds the
synchronisations ``torch.cuda.set_sync_debug_mode("warn")`` reports outside aten calls.
:class:`CountingClock` gets the loop's phase marks and moves the counts from phase to
phase; :func:`run_steps` runs the steps through it. On CUDA, :func:`device_pass` runs the
steps once more beforehand under ``torch.profiler`` alone, for kernel launches, memory
copy calls and allocator calls (why apart: :mod:`perfgate.measure.counters`).

Nothing here imports torch until it counts. The frames of this module are skipped when a
synchronisation's line is looked for: it is the counting, never the workload.
"""

from __future__ import annotations

import contextlib
import os
import threading
import warnings
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from perfgate.measure.sync_sites import Locator, copy_kind, forces_sync
from perfgate.measure.trace import PhaseMarks, PhaseRanges
from perfgate.model.counters import COPY_OPS
from perfgate.model.workload import PHASES

_SYNC_WARNING = "synchronizing CUDA operation"
GLOBAL_HOOKS_WARNING = r"Using `torch\.compile\(module\)` when there are global hooks"
"""FlopCounterMode's module tracker installs global hooks, which a compiled module warns about."""
OUTSIDE_OPS = "cuda synchronize"
"""The call of a synchronisation the CUDA debug mode reported outside any aten operator."""
_THIS_FILE = os.path.abspath(__file__)
_ALLOCATOR_STATS = {"allocations": "allocation.all.allocated", "frees": "allocation.all.freed",
                    "device_mallocs": "segment.all.allocated", "device_frees": "segment.all.freed",
                    "alloc_retries": "num_alloc_retries"}


class Counts:
    """Running totals per phase; written from the step's thread and autograd's."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.phase: str | None = None
        self.lock = threading.Lock()
        self.local = threading.local()
        self.locator = Locator(_THIS_FILE)
        self.ops = {p: Counter[str]() for p in PHASES}
        self.copies = {p: Counter[str]() for p in PHASES}
        self.conversions = Counter[str]()
        self.device_copies = Counter[str]()
        self.syncs = {p: Counter[tuple[str, str]]() for p in PHASES}
        self.flops = {p: Counter[str]() for p in PHASES}
        self.allocator = {p: Counter[str]() for p in PHASES}

    def sync(self, phase: str, location: str, what: str) -> None:
        with self.lock:
            self.syncs[phase][(location, what)] += 1


def op_counter(counts: Counts) -> Any:
    from torch.utils._python_dispatch import TorchDispatchMode

    from perfgate.model.workload import HOST_PHASES

    # The CPU stand-in counts a sync-forcing call where the same code on a GPU would work
    # on device tensors; the data wait works on host tensors on every device.
    host_only = HOST_PHASES if counts.device == "cpu" else frozenset()

    class OpCounter(TorchDispatchMode):
        """Counts aten calls by phase; notes the ones that force a synchronisation."""

        def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                               kwargs: Mapping[str, Any] | None = None) -> Any:
            kwargs = kwargs or {}
            phase = counts.phase
            if phase is None or func.namespace != "aten":
                return func(*args, **kwargs)
            name = func._schema.name
            sync = phase not in host_only and forces_sync(name, func._overloadname, args, kwargs, counts.device)
            with counts.lock:
                counts.ops[phase][name] += 1
                if name in COPY_OPS:
                    counts.copies[phase][name] += 1
                    conversion, moved, _ = copy_kind(name, args, kwargs)
                    counts.conversions[phase] += conversion
                    counts.device_copies[phase] += moved
            local = counts.local
            outer = getattr(local, "warned", None)
            local.warned = False
            local.counted = False  # this call is the thread's latest; nothing counted for it yet
            try:
                out = func(*args, **kwargs)
            finally:
                warned = local.warned
                local.warned = outer
            if warned:
                counts.sync(phase, counts.locator.locate()[0], name)
                local.counted = True
            elif sync:
                location, own = counts.locator.locate()
                # The CPU stand-in cannot tell which tensors would live on a device. torch's
                # own host-side scalars (an optimizer's step count, read with .item() by
                # Adam and AdamW) stay on the host in a GPU run too, so on the CPU only
                # calls issued by the workload's code count.
                if own or counts.device != "cpu":
                    counts.sync(phase, location, name)
                    local.counted = True
            return out

    return OpCounter()


@contextlib.contextmanager
def sync_warnings(counts: Counts) -> Any:
    """CUDA: ``set_sync_debug_mode("warn")``; each warning is a synchronisation. One raised
    inside an aten call is that call's (the dispatch mode records it once); one raised
    outside any is recorded here, with the line that made it."""
    import torch

    original = warnings.showwarning

    def show(message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
        if _SYNC_WARNING not in str(message):
            original(message, category, filename, lineno, file, line)
            return
        local = counts.local
        if getattr(local, "warned", None) is not None:
            local.warned = True  # inside an aten call: the dispatch mode records it
        elif getattr(local, "counted", False):
            # The warning of the aten call just counted, handed to Python only when the
            # outer call returned (``.item()`` reaches the mode from C++; measured on an
            # H200, torch 2.11): the same synchronisation, counted once.
            local.counted = False
        elif counts.phase is not None:
            counts.sync(counts.phase, counts.locator.locate()[0], OUTSIDE_OPS)

    previous = torch.cuda.get_sync_debug_mode()
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", message=GLOBAL_HOOKS_WARNING)
        warnings.showwarning = show
        torch.cuda.set_sync_debug_mode("warn")
        try:
            yield
        finally:
            torch.cuda.set_sync_debug_mode(previous)


class CountingClock(PhaseMarks):
    """The timed loop's phase marks, moving the counters from phase to phase.

    At each mark the FLOPs (operator pass) or allocator counts (device pass) so far are
    read and the difference since the last mark is the closing phase's; in the device
    pass the marks also open and close one ``record_function`` range per phase for the
    profiler. Nothing here synchronises.
    """

    timing = "counters"

    def __init__(self, counts: Counts, flop_mode: Any | None, memory_stats: Callable[[], Mapping[str, Any]] | None,
                 ranges: Any | None) -> None:
        self.counts = counts
        self.flop_mode = flop_mode
        self.memory_stats = memory_stats
        self.ranges = ranges
        self._flops: dict[str, int] = {}
        self._memory: dict[str, int] = {}

    def _flop_totals(self) -> dict[str, int]:
        if self.flop_mode is None:
            return {}
        counted = self.flop_mode.flop_counts.get("Global", {})
        return {getattr(k, "_qualified_op_name", None) or str(k): int(v) for k, v in counted.items()}

    def _memory_totals(self) -> dict[str, int]:
        if self.memory_stats is None:
            return {}
        stats = self.memory_stats()
        return {name: int(stats.get(key, 0)) for name, key in _ALLOCATOR_STATS.items()}

    def enter(self, phase: str | None) -> None:
        counts = self.counts
        closing = counts.phase
        counts.phase = None  # the bookkeeping below is nobody's
        flops, memory = self._flop_totals(), self._memory_totals()
        if closing is not None:
            for name, value in flops.items():
                delta = value - self._flops.get(name, 0)
                if delta:
                    counts.flops[closing][name] += delta
            for name, value in memory.items():
                counts.allocator[closing][name] += value - self._memory.get(name, 0)
        self._flops, self._memory = flops, memory
        if self.ranges is not None:
            self.ranges.enter(phase)
        counts.phase = phase

    def start_window(self) -> None:
        return None

    def end_window(self) -> None:
        return None


def run_steps(step: Any, clock: CountingClock, steps: int, counts: Counts) -> None:
    """``steps`` steps through the counting clock; between steps, and after a step that
    raised, no phase is open."""
    for _ in range(steps):
        try:
            step(clock)
        finally:
            counts.phase = None


def device_pass(step: Any, steps: int, counts: Counts, sync: Callable[[], None]) -> list[Any]:
    """CUDA: ``steps`` steps under the profiler alone (no dispatch mode, which would make
    a compiled model run its eager code); the allocator counts go into ``counts``.
    Returns the profiler's host events for :func:`perfgate.analysis.attribution.launch_counts`."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile, record_function

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        ranges = PhaseRanges(record_function)
        clock = CountingClock(counts, None, torch.cuda.memory_stats, ranges)
        try:
            run_steps(step, clock, steps, counts)
        finally:
            ranges.close()
            sync()  # every kernel finished before the profiler stops
    return [e for e in prof.events() if e.device_type == DeviceType.CPU and not e.is_async]
