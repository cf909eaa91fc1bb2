"""The counted run: exact counters of a workload's training step, per phase.

A run of its own, like a traced run, never inside a measured window: the workload is
built with the same builder, parameters, torch settings and data as a repeat
(``loop.apply_torch_settings``, ``loop._check_built``), its warmup steps run exactly as
a repeat's (``loop._Step`` with the no-op clock), then ``steps`` more steps of the very
same ``_Step`` run under counting, with a phase clock whose marks (the ones the timed
loop uses) move the counters from one phase to the next. What is counted, and where
it comes from, is described in :mod:`perfgate.analysis.counters`, which holds the data; this
module only touches torch:

- a ``TorchDispatchMode`` counts every aten operator call, its copies and conversions
  and the calls that force a host synchronisation (with the Python line that issued
  them); ``FlopCounterMode`` counts FLOPs, read at each phase mark;
- on CUDA, ``torch.cuda.set_sync_debug_mode("warn")`` reports synchronisations outside
  aten operators; in a pass of its own, before the counting modes are entered,
  ``torch.profiler`` (CPU and CUDA activity, one ``record_function`` range per phase as
  in a traced run) gives the kernel launches and memory copy calls, attributed to phases
  by ``perfgate.measure.trace.PhaseAttribution``, and ``torch.cuda.memory_stats()``, read
  at each phase mark, the allocator calls. The pass is separate because a dispatch mode
  changes what runs: while one is active a ``torch.compile``d model runs its eager code
  (measured on an H200 with torch 2.11: resnet18-cifar10 launched 319 kernels a step
  compiled, 380 eager, and 380 compiled under either mode). So a compiled workload's
  launches, copies and allocator calls are its compiled code's, while its operator
  calls, FLOPs and synchronisations are counted on its eager path (the counter set
  says so in ``notes``);
- ``torch._dynamo``'s counters and compilation metrics give graph breaks, recompiles
  and the compile time, over the whole run.

Both dispatch modes are thread-local state that autograd carries to its device
threads, so CUDA backward work is counted too, in the ``backward`` phase.

:func:`count_workload` runs in this process and raises; :func:`count_job` runs it in a
fresh process (``python -P -m perfgate.measure.counters REQUEST RESPONSE``) and returns
a failure as a value, so a counted run that crashes never takes a timed verdict down.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import subprocess
import sys
import sysconfig
import threading
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from perfgate.analysis.counters import CounterOutcome
from perfgate.measure.child import call, serve
from perfgate.measure.runner import Job
from perfgate.measure.trace import PhaseMarks
from perfgate.model.counters import (
    COPY_OPS,
    DEFAULT_STEPS,
    AllocatorCounts,
    CompileInfo,
    CounterError,
    CounterSet,
    PhaseCounters,
    SyncSite,
    clean_reason,
)
from perfgate.model.errors import DataError, DeviceError, PerfgateError, UsageError, WorkloadError
from perfgate.model.version import __version__
from perfgate.model.workload import PHASES, BuildContext, Params, Workload
from perfgate.store.counters import save_counters

# --- what forces a host synchronisation -------------------------------------------------

SYNC_OPS = frozenset({
    "aten::_local_scalar_dense",  # .item(), float(t), bool(t), int(t)
    "aten::nonzero",  # torch.nonzero, torch.where(cond), t.nonzero()
    "aten::masked_select",
    "aten::_unique", "aten::_unique2", "aten::unique_dim", "aten::unique_consecutive",
    "aten::unique_dim_consecutive",
    "aten::bincount",  # its length is the largest value
    "aten::equal",  # returns a Python bool
})
"""Operators whose result the host must wait for: a value or a data-dependent shape."""
_MASK_INDEXED = frozenset({"aten::index", "aten::index_put_", "aten::index_put", "aten::_index_put_impl_"})
"""Indexing that synchronises when an index is a boolean (or byte) mask: it becomes nonzero()."""
_D2H = frozenset({"aten::_to_copy", "aten::copy_", "aten::_copy_from", "aten::_copy_from_and_resize"})
SYNC_SOURCE_CPU = ("aten calls that force a synchronisation on a device (.item(), nonzero, boolean-mask "
                   "indexing, unique, ...) made from the workload's own code, counted on the CPU as the stand-in "
                   "for one, outside the data wait")
SYNC_SOURCE_CUDA = ("aten calls on device tensors that force a synchronisation, and the synchronising calls "
                    "torch.cuda.set_sync_debug_mode reports outside any operator")
_SYNC_WARNING = "synchronizing CUDA operation"
_GLOBAL_HOOKS_WARNING = r"Using `torch\.compile\(module\)` when there are global hooks"
"""FlopCounterMode's module tracker installs global hooks, which a compiled module warns about."""
OUTSIDE_OPS = "cuda synchronize"
"""The call of a synchronisation the CUDA debug mode reported outside any aten operator."""

_LAUNCH_PREFIXES = ("cudaLaunch", "cuLaunch", "cudaGraphLaunch", "cuGraphLaunch")
_MEMCPY_PREFIXES = ("cudaMemcpy", "cuMemcpy")
_ALLOCATOR_STATS = {"allocations": "allocation.all.allocated", "frees": "allocation.all.freed",
                    "device_mallocs": "segment.all.allocated", "device_frees": "segment.all.freed",
                    "alloc_retries": "num_alloc_retries"}

COMPILED_EAGER_NOTE_CUDA = (
    "compiled: kernel launches, memory copies and allocator calls are the compiled code's; operator "
    "calls, FLOPs and synchronisations are counted on the model's eager path (torch.compile runs eager "
    "code while a dispatch mode counts)")
COMPILED_EAGER_NOTE_CPU = (
    "compiled: operator calls, FLOPs and synchronisations are counted on the model's eager path "
    "(torch.compile runs eager code while a dispatch mode counts); the compiled code's own kernels "
    "are not counted on the CPU")

UNAVAILABLE_CPU = {
    "kernel_launches": "a CPU run launches no kernels (the aten operator count stands in for them)",
    "memcpy_calls": "a CPU run makes no device memory copies (host-device copies show as copies)",
    "allocator": "the CPU allocator keeps no call counts (torch.cuda.memory_stats is CUDA only)",
}


def _tensors(value: Any, out: list[Any]) -> list[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        out.append(value)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _tensors(v, out)
    elif isinstance(value, dict):
        for v in value.values():
            _tensors(v, out)
    return out


def _device_type(value: Any) -> str | None:
    import torch

    if value is None:
        return None
    return torch.device(value).type


def _copy_kind(name: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> tuple[bool, bool, bool]:
    """(dtype conversion, device copy, device to host and blocking) of a copy operator."""
    import torch

    if name == "aten::_to_copy" and args and isinstance(args[0], torch.Tensor):
        src = args[0]
        dtype, device = kwargs.get("dtype"), _device_type(kwargs.get("device"))
        conversion = dtype is not None and dtype != src.dtype
        moved = device is not None and device != src.device.type
        return conversion, moved, moved and device == "cpu" and not kwargs.get("non_blocking", False)
    if name in ("aten::copy_", "aten::_copy_from", "aten::_copy_from_and_resize") and len(args) >= 2:
        dst, src = (args[0], args[1]) if name == "aten::copy_" else (args[1], args[0])
        if isinstance(dst, torch.Tensor) and isinstance(src, torch.Tensor):
            non_blocking = kwargs.get("non_blocking", args[2] if len(args) > 2 else False)
            moved = dst.device.type != src.device.type
            return (dst.dtype != src.dtype, moved,
                    moved and dst.device.type == "cpu" and not bool(non_blocking))
    if name == "aten::_foreach_copy_" and len(args) >= 2:
        pairs = list(zip(args[0], args[1]))
        return (any(d.dtype != s.dtype for d, s in pairs), any(d.device != s.device for d, s in pairs), False)
    return False, False, False


def forces_sync(name: str, overload: str, args: tuple[Any, ...], kwargs: Mapping[str, Any], device: str) -> bool:
    """Whether this aten call makes the host wait for the device.

    On CUDA only calls on device tensors count (``.item()`` of a CPU tensor waits for
    nothing). On the CPU nothing waits, and the same calls are counted as the stand-in:
    the same code on a GPU would synchronise there.
    """
    import torch

    if name in _D2H:
        return _copy_kind(name, args, kwargs)[2]
    if name in SYNC_OPS or (name == "aten::repeat_interleave" and overload == "Tensor"
                            and kwargs.get("output_size") is None):
        pass
    elif name in _MASK_INDEXED and len(args) >= 2 and isinstance(args[1], (list, tuple)):
        if not any(isinstance(t, torch.Tensor) and t.dtype in (torch.bool, torch.uint8) for t in args[1]):
            return False
    else:
        return False
    return device == "cpu" or any(t.device.type != "cpu" for t in _tensors((args, kwargs), []))


# --- where in the Python code ---------------------------------------------------------

_THIS_FILE = os.path.abspath(__file__)
_PERFGATE_DIR = os.path.dirname(os.path.dirname(_THIS_FILE)) + os.sep
_STDLIB_DIRS = tuple({os.path.abspath(p) + os.sep for p in (sysconfig.get_paths().get("stdlib"),
                                                           sysconfig.get_paths().get("platstdlib")) if p})
NO_FRAME = "<no Python frame outside torch>"


class _Locator:
    """``path:line`` of the first frame outside torch, perfgate and the standard library.

    When every frame is torch's or perfgate's (the step's own host-to-device copy, for
    example), the innermost perfgate line is named instead; when there is no Python
    frame at all outside torch (work on an autograd thread), :data:`NO_FRAME`.
    """

    def __init__(self) -> None:
        import torch

        self.torch_dir = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
        self.cwd = os.path.abspath(os.getcwd()) + os.sep
        self._cache: dict[str, tuple[str, str]] = {}
        self.boundary: Any = None
        """The counting loop's frame: the callers above it are not the step's."""

    def _kind_and_name(self, filename: str) -> tuple[str, str]:
        cached = self._cache.get(filename)
        if cached is not None:
            return cached
        path = os.path.abspath(filename)
        if filename.startswith("<"):
            kind = "skip"
        elif path.startswith(self.torch_dir) or path == _THIS_FILE:
            kind = "skip"
        elif path.startswith(_PERFGATE_DIR):
            kind = "perfgate"
        elif path.startswith(_STDLIB_DIRS) and "-packages" not in path:
            kind = "skip"
        else:
            kind = "user"
        self._cache[filename] = (kind, self._display(path))
        return kind, self._cache[filename][1]

    def _display(self, path: str) -> str:
        if path.startswith(_PERFGATE_DIR):
            return os.path.relpath(path, os.path.dirname(_PERFGATE_DIR.rstrip(os.sep)))
        if path.startswith(self.cwd):
            return os.path.relpath(path, self.cwd)
        roots = [os.path.abspath(p) + os.sep for p in sys.path if p and path.startswith(os.path.abspath(p) + os.sep)]
        if roots:
            return os.path.relpath(path, max(roots, key=len))
        return path

    def locate(self) -> tuple[str, bool]:
        """The location, and whether it is the workload's own code (not torch's or perfgate's)."""
        frame = sys._getframe(1)
        fallback = None
        while frame is not None and frame is not self.boundary:
            kind, name = self._kind_and_name(frame.f_code.co_filename)
            if kind == "user":
                return f"{name}:{frame.f_lineno}", True
            if kind == "perfgate" and fallback is None:
                fallback = f"{name}:{frame.f_lineno}"
            frame = frame.f_back
        return fallback or NO_FRAME, False


# --- counting ---------------------------------------------------------------------------


class _Counts:
    """Running totals per phase; written from the step's thread and autograd's."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.phase: str | None = None
        self.lock = threading.Lock()
        self.local = threading.local()
        self.locator = _Locator()
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


def _op_counter(counts: _Counts) -> Any:
    from torch.utils._python_dispatch import TorchDispatchMode

    from perfgate.measure.loop import HOST_PHASES

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
                    conversion, moved, _ = _copy_kind(name, args, kwargs)
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
def _sync_warnings(counts: _Counts) -> Any:
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
        warnings.filterwarnings("ignore", message=_GLOBAL_HOOKS_WARNING)
        warnings.showwarning = show
        torch.cuda.set_sync_debug_mode("warn")
        try:
            yield
        finally:
            torch.cuda.set_sync_debug_mode(previous)


class _CountingClock(PhaseMarks):
    """The timed loop's phase marks, moving the counters from phase to phase.

    At each mark the FLOPs (operator pass) or allocator counts (device pass) so far are
    read and the difference since the last mark is the closing phase's; in the device
    pass the marks also open and close one ``record_function`` range per phase for the
    profiler. Nothing here synchronises.
    """

    timing = "counters"

    def __init__(self, counts: _Counts, flop_mode: Any | None, memory_stats: Callable[[], Mapping[str, Any]] | None,
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



def _run_steps(step: Any, clock: _CountingClock, steps: int, counts: _Counts) -> None:
    """``steps`` steps through the counting clock; between steps, and after a step that
    raised, no phase is open."""
    for _ in range(steps):
        try:
            step(clock)
        finally:
            counts.phase = None


def _device_pass(step: Any, steps: int, counts: _Counts, sync: Callable[[], None]) -> list[Any]:
    """CUDA: ``steps`` steps under the profiler alone (no dispatch mode, which would make
    a compiled model run its eager code); the allocator counts go into ``counts``.
    Returns the profiler's host events for :func:`_launches`."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile, record_function

    from perfgate.measure.trace import _PhaseRanges

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        ranges = _PhaseRanges(record_function)
        clock = _CountingClock(counts, None, torch.cuda.memory_stats, ranges)
        try:
            _run_steps(step, clock, steps, counts)
        finally:
            ranges.close()
            sync()  # every kernel finished before the profiler stops
    return [e for e in prof.events() if e.device_type == DeviceType.CPU and not e.is_async]


def _launches(events: list[Any]) -> tuple[dict[str, int], dict[str, int]]:
    """Kernel launches and memory copy calls per phase, from the profiler's host events."""
    from perfgate.measure.trace import PhaseAttribution

    attribution = PhaseAttribution()
    attribution.add(events)
    launches, memcpy = {}, {}
    for phase, bucket in attribution.buckets.items():
        launches[phase] = sum(int(row[0]) for name, row in bucket.ops.items() if name.startswith(_LAUNCH_PREFIXES))
        memcpy[phase] = sum(int(row[0]) for name, row in bucket.ops.items() if name.startswith(_MEMCPY_PREFIXES))
    return launches, memcpy


# --- compile counters -----------------------------------------------------------------


def _dynamo_state() -> tuple[int, dict[str, int], list[Any]] | None:
    """Frames compiled, graph breaks by reason and the compilation metrics so far; None
    when dynamo was never loaded."""
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is None:
        return None
    counters = utils.counters
    frames = int(counters["frames"]["total"]) if "frames" in counters else 0
    breaks = dict(counters["graph_break"]) if "graph_break" in counters else {}
    metrics = list(utils.get_compilation_metrics()) if hasattr(utils, "get_compilation_metrics") else []
    return frames, breaks, metrics


def _compile_info(at_start: tuple[int, dict[str, int], list[Any]] | None,
                  before_counting: tuple[int, dict[str, int], list[Any]] | None
                  ) -> tuple[CompileInfo | None, str | None, float | None]:
    """What dynamo did since ``at_start`` (its counters are per process, and a process
    may count more than once): the info, or why there is none, and the compile seconds."""
    state = _dynamo_state()
    start = at_start or (0, {}, [])
    frames = (state[0] - start[0]) if state is not None else 0
    if state is None or frames <= 0:
        return None, ("the workload does not compile: torch.compile compiled no frame during the build, "
                      "the warmup or the counted steps"), None
    _, breaks, all_metrics = state
    earlier = {id(m) for m in start[2]}
    metrics = [m for m in all_metrics if id(m) not in earlier]
    graph_breaks: Counter[str] = Counter()
    for reason, n in breaks.items():
        new = int(n) - int(start[1].get(reason, 0))
        if new > 0:
            graph_breaks[clean_reason(str(reason))] += new
    recompile_reasons = tuple(clean_reason(str(m.recompile_reason), lines=1).split(" # ")[0].strip()
                              for m in metrics if getattr(m, "recompile_reason", None))
    seconds = [getattr(m, "entire_frame_compile_time_s", None) for m in metrics]
    compile_s = sum(s for s in seconds if isinstance(s, (int, float)) and math.isfinite(s)) if metrics else None
    info = CompileInfo(
        frames_compiled=frames,
        recompiles=len(recompile_reasons),
        recompile_reasons=recompile_reasons,
        graph_breaks=dict(graph_breaks),
        compiles_in_counted_steps=state[0] - (before_counting[0] if before_counting else 0),
    )
    return info, None, compile_s


# --- the counted run, in this process -------------------------------------------------


def count_workload(
    workload: Workload,
    params: Params,
    device: str,
    *,
    cache_dir: Path,
    data_root: Path | None = None,
    steps: int = DEFAULT_STEPS,
) -> CounterSet:
    """Count ``steps`` steps of ``workload`` here, after its warmup; raises WorkloadError
    (the builder or the step failed) or CounterError (the counting itself failed).

    ``params`` are the job's resolved parameters: the same seed and settings as a repeat.
    Only when ``steps`` is more than ``params.steps`` is the loader sized for it (as a
    traced run does), so it never restarts inside the counted steps.
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise UsageError(f"counted steps must be an integer >= 1, got {steps!r}")
    began = time.perf_counter()
    name = workload.name

    import torch
    from torch.utils.flop_counter import FlopCounterMode

    compile_at_start = _dynamo_state()

    from perfgate.measure.loop import _check_built, _fail, _NoClock, _Step, apply_torch_settings

    cuda = device == "cuda"
    needed = 2 * steps if cuda else steps  # CUDA counts in two passes
    run_params = params if params.steps >= needed else dataclasses.replace(params, steps=needed)
    apply_torch_settings(run_params, device)
    ctx = BuildContext(params=run_params, device=device, data_root=data_root, cache_dir=cache_dir, workload=name)
    try:
        built = _check_built(workload.build(ctx), name)
    except PerfgateError:
        raise
    except BaseException as exc:  # noqa: BLE001 - user code: reported, not raised raw
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise _fail(name, "building the workload", exc) from None

    sync: Callable[[], None] = torch.cuda.synchronize if cuda else (lambda: None)
    torch_device = torch.device(device)
    stage = "the warmup"
    try:
        memory_format = torch.channels_last if run_params.memory_format == "channels_last" else torch.contiguous_format
        built.model.to(torch_device, memory_format=memory_format)
        built.model.train()
        step = _Step(built, torch_device, run_params)
        warmup = _NoClock()
        for i in range(run_params.warmup_steps):
            value = float(step(warmup).detach().float().item())
            if not math.isfinite(value):
                raise WorkloadError(f"{name}: loss is non-finite ({value}) at warmup step {i}")
        sync()

        counts = _Counts(device)
        compile_before = _dynamo_state()
        events: list[Any] = []
        if cuda:
            stage = "the counted steps (the profiler's pass)"
            events = _device_pass(step, steps, counts, sync)
        stage = "the counted steps"
        with contextlib.ExitStack() as stack:
            stack.enter_context(warnings.catch_warnings())
            warnings.filterwarnings("ignore", message=_GLOBAL_HOOKS_WARNING)
            flop_mode = stack.enter_context(FlopCounterMode(display=False))
            if cuda:
                stack.enter_context(_sync_warnings(counts))
            counts.locator.boundary = sys._getframe()
            clock = _CountingClock(counts, flop_mode, None, None)
            stack.enter_context(_op_counter(counts))
            _run_steps(step, clock, steps, counts)
            sync()
        compile_info, no_compile, compile_s = _compile_info(compile_at_start, compile_before)
    except BaseException as exc:  # noqa: BLE001
        if isinstance(exc, (KeyboardInterrupt, PerfgateError)):
            raise
        raise _fail(name, stage, exc) from None

    try:
        launches, memcpy = _launches(events) if cuda else ({}, {})
    except Exception as exc:  # noqa: BLE001 - the profiler's events, not the workload
        raise CounterError(f"{name}: reading the profiler's kernel launches failed: {type(exc).__name__}: {exc}",
                           detail=traceback.format_exc()) from None
    phases = {}
    for p in PHASES:
        phases[p] = PhaseCounters(
            ops=dict(counts.ops[p]),
            copies=dict(counts.copies[p]),
            dtype_conversions=counts.conversions[p],
            device_copies=counts.device_copies[p],
            flops=sum(counts.flops[p].values()),
            flops_by_op=dict(counts.flops[p]),
            syncs=tuple(SyncSite(loc, what, n) for (loc, what), n in sorted(counts.syncs[p].items())),
            kernel_launches=launches.get(p, 0) if cuda else None,
            memcpy_calls=memcpy.get(p, 0) if cuda else None,
            allocator=AllocatorCounts(**{k: counts.allocator[p][k] for k in AllocatorCounts.FIELDS}) if cuda else None,
        )
    unavailable = {} if cuda else dict(UNAVAILABLE_CPU)
    if no_compile is not None:
        unavailable["compile"] = no_compile
    notes = () if compile_info is None else (COMPILED_EAGER_NOTE_CUDA if cuda else COMPILED_EAGER_NOTE_CPU,)
    return CounterSet(
        workload=name,
        workload_version=workload.version,
        device=device,
        steps=steps,
        warmup_steps=run_params.warmup_steps,
        params=run_params.to_dict(),
        phases=phases,
        compile=compile_info,
        unavailable=unavailable,
        sync_source=SYNC_SOURCE_CUDA if cuda else SYNC_SOURCE_CPU,
        notes=notes,
        timings={"counted_run_s": round(time.perf_counter() - began, 3),
                 "compile_s": None if compile_s is None else round(compile_s, 3)},
        torch_version=str(torch.__version__),
        perfgate_version=__version__,
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )


# --- the counted run, in a fresh process ------------------------------------------------

_ERRORS: dict[str, type[PerfgateError]] = {
    cls.__name__: cls for cls in (CounterError, WorkloadError, DataError, DeviceError, UsageError)
}


def count_job(
    job: Job,
    device: str,
    cache_dir: Path,
    *,
    steps: int = DEFAULT_STEPS,
    out_dir: Path | None = None,
    timeout_s: float = 1800.0,
    project_dir: Path | None = None,
    python: str | None = None,
) -> CounterOutcome:
    """Count ``job`` in a fresh process; never raises a PerfgateError, returns it instead.

    With ``out_dir`` the counters are also written to ``<out_dir>/<workload>.counters.json``.
    ``project_dir`` is the tree to run in (default: this directory), ``python`` another
    interpreter, as for a repeat. Whatever fails (the build, the step, the counting, a
    crash, the timeout) comes back in ``CounterOutcome.error``, with ``counters`` None.
    """
    from perfgate.model.counters import counters_from_dict

    name = job.workload.name
    began = time.perf_counter()

    def failed(error: PerfgateError) -> CounterOutcome:
        return CounterOutcome(name, None, error, round(time.perf_counter() - began, 3))

    try:
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise UsageError(f"counted steps must be an integer >= 1, got {steps!r}")
        request = {
            "workload": name,
            "source": job.workload.source,
            "device": device,
            "params": job.params.to_dict(),
            "data_root": str(job.data_root) if job.data_root else None,
            "cache_dir": str(cache_dir),
            "steps": steps,
            "project_dir": str(project_dir) if project_dir else None,
        }
        try:
            run = call("perfgate.measure.counters", request, timeout_s, python=python)
        except subprocess.TimeoutExpired:
            return failed(CounterError(f"{name}: the counted run did not finish within {timeout_s:g} s"))
        response = run.response
        if response is None:
            return failed(CounterError(f"{name}: " + run.died("the counted run's"), detail=run.output))
        if not response["ok"]:
            error = response["error"]
            kind = _ERRORS.get(error.get("type", ""), CounterError)
            return failed(kind(error["message"], detail=(error.get("detail") or "") + "\n" + run.output))
        try:
            counters = counters_from_dict(response["counters"])
        except (KeyError, ValueError) as exc:
            return failed(CounterError(f"{name}: the counted run answered malformed counters: {exc}"))
        if out_dir is not None:
            save_counters(counters, Path(out_dir))
    except PerfgateError as exc:
        return failed(exc)
    except Exception as exc:  # noqa: BLE001 - a counted run must never take a verdict down
        return failed(CounterError(f"{name}: counting failed: {type(exc).__name__}: {exc}",
                                   detail=traceback.format_exc()))
    return CounterOutcome(name, counters, None, round(time.perf_counter() - began, 3))


def _child(request: dict[str, Any]) -> dict[str, Any]:
    from perfgate.store.discovery import load_source

    name = request["workload"]
    matches = [w for w in load_source(request["source"]) if w.name == name]
    if not matches:
        raise WorkloadError(f"{name}: not found in {request['source']}")
    counters = count_workload(
        matches[0],
        Params.from_dict(request["params"]),
        request["device"],
        cache_dir=Path(request["cache_dir"]),
        data_root=Path(request["data_root"]) if request.get("data_root") else None,
        steps=request["steps"],
    )
    return {"ok": True, "counters": counters.to_dict()}


def main(argv: list[str]) -> int:
    return serve(argv, "perfgate.measure.counters", _child)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
