"""Exact counters of a training step, and their comparison without statistics.

Timing on a shared machine is noisy, but many regressions change something that can be
counted exactly: an extra ``.item()`` that synchronises every step, a dtype change that
adds copy kernels, a fused optimizer lost, a model that now does twice the FLOPs. A
*counted run* (``perfgate.measure.counters``) is a short run of its own, never inside a
measured window: it builds the workload as a repeat does, runs its warmup, then counts
over a few steps, per phase of the step (``data_wait`` ... ``optimizer``):

- ``ops``: aten operator calls by name, as a ``TorchDispatchMode`` sees them (after
  autograd and the composite decompositions: what the device is asked to run);
- ``copies``: the copy operators among them (``aten::_to_copy``, ``aten::copy_``,
  ``aten::clone`` ...), and how many changed a dtype or a device;
- ``flops``: ``torch.utils.flop_counter.FlopCounterMode``'s count, in total and by operator;
- ``syncs``: host-device synchronisations, each with the Python line that issued it
  (the first frame outside torch, perfgate and the standard library). On every device
  the aten calls that force one are counted (``aten::_local_scalar_dense`` from
  ``.item()``, ``aten::nonzero``, a boolean-mask index, a device-to-host copy ...): on
  CUDA those on device tensors, on the CPU, where nothing waits, every one outside the
  data wait, as the stand-in. On CUDA ``torch.cuda.set_sync_debug_mode`` adds the ones
  outside aten operators (``torch.cuda.synchronize()``, an event's or a stream's);
- ``kernel_launches`` and ``memcpy_calls`` (CUDA, from ``torch.profiler``), allocator
  calls (CUDA, from ``torch.cuda.memory_stats()``), and for a workload that compiles,
  graph breaks and recompiles (``torch._dynamo``).

A counter the device cannot provide is ``None`` with the reason in
:attr:`CounterSet.unavailable`, never 0. Values are totals over the counted steps; a
value per step is the total divided by :attr:`CounterSet.steps`. The same code gives the
same counters in every run, so :func:`compare_counters` needs no statistics: any change
is real, and :class:`CounterThresholds` says which changes fail.

This module holds the data and its dict form; the files are ``perfgate.store.counters``, the
comparison ``perfgate.analysis.counters``, the table ``perfgate.report.counters``.
"""


from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from perfgate.model.errors import PerfgateError
from perfgate.model.schema import Fields, migrate
from perfgate.model.workload import DEVICES, PHASES
from perfgate.model.workload import HOST_PHASES as HOST_PHASES  # re-exported, see below

COUNTERS_KIND = "perfgate.counters"
COUNTERS_SCHEMA_VERSION = 1
COUNTERS_MIGRATIONS: dict[int, Any] = {}
COUNTERS_SUFFIX = ".counters.json"
DEFAULT_STEPS = 3
"""Steps counted after the warmup, by default."""

COPY_OPS = frozenset({
    "aten::_to_copy", "aten::copy_", "aten::clone", "aten::_copy_from", "aten::_copy_from_and_resize",
    "aten::lift_fresh_copy", "aten::_to_cpu", "aten::_foreach_copy_",
})
"""Operators that copy a tensor (a dtype conversion, a device transfer, a layout change)."""

OPTIONAL = ("kernel_launches", "memcpy_calls", "allocator", "compile")
"""Counters that a device or a workload may not provide: ``None`` with a reason then."""

GATED = ("syncs", "flops", "launches", "copies", "graph_breaks", "recompiles")
"""What :class:`CounterThresholds` can fail on. ``launches`` is the kernel launch count on
CUDA and, on the CPU where nothing is launched, the aten operator count that stands in."""

# HOST_PHASES (perfgate.model.workload): their aten calls launch no kernels and wait for
# no device, so on the CPU they stand in for neither launches nor synchronisations.

STEP = "step"
"""The phase of a change that belongs to the whole run (compile counters)."""


class CounterError(PerfgateError):
    """A counted run that could not be made (exit code 2; never a verdict on timing)."""


def _count(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{where}: expected a count (an integer >= 0), got {value!r}")
    return value


def _counts(data: object, where: str) -> dict[str, int]:
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected an object of counts, got {type(data).__name__}")
    out: dict[str, int] = {}
    for key, value in data.items():
        if not isinstance(key, str) or not key:
            raise ValueError(f"{where}: keys must be non-empty strings")
        out[key] = _count(value, f"{where}.{key}")
    return out


def _sorted_counts(counts: Mapping[str, int]) -> dict[str, int]:
    """Largest first, then by name: a stable order for files and tables."""
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


@dataclass(frozen=True)
class SyncSite:
    """Host-device synchronisations issued from one Python line by one call."""

    location: str
    """``path:line`` of the first frame outside torch, perfgate and the standard library
    (relative to the directory the run started in when inside it), or a note in angle
    brackets when there is none (work on an autograd thread, for example)."""
    call: str
    """The aten operator that forced it (``aten::_local_scalar_dense``), or, on CUDA, a
    synchronising call outside any operator (``cuda synchronize``)."""
    count: int
    """Total over the counted steps."""

    def to_dict(self) -> dict[str, Any]:
        return {"location": self.location, "call": self.call, "count": self.count}

    @classmethod
    def from_dict(cls, data: object, where: str) -> SyncSite:
        f = Fields(data, where)
        site = cls(f.get("location", str), f.get("call", str), _count(f.get("count", int), f"{where}.count"))
        if site.count < 1:
            raise ValueError(f"{where}.count: a synchronisation site has a count of at least 1")
        return site


@dataclass(frozen=True)
class AllocatorCounts:
    """CUDA caching allocator calls over the counted steps (``torch.cuda.memory_stats`` deltas)."""

    allocations: int
    """Blocks handed out (``allocation.all.allocated``)."""
    frees: int
    """Blocks given back (``allocation.all.freed``)."""
    device_mallocs: int
    """Memory asked of the device (``segment.all.allocated``: ``cudaMalloc`` calls)."""
    device_frees: int
    """Memory given back to the device (``segment.all.freed``)."""
    alloc_retries: int
    """Allocations that failed once and were retried after freeing the cache (``num_alloc_retries``)."""

    FIELDS = ("allocations", "frees", "device_mallocs", "device_frees", "alloc_retries")

    def to_dict(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in self.FIELDS}

    @classmethod
    def from_dict(cls, data: object, where: str) -> AllocatorCounts:
        f = Fields(data, where)
        return cls(**{k: _count(f.get(k, int), f"{where}.{k}") for k in cls.FIELDS})


@dataclass(frozen=True)
class PhaseCounters:
    """The counters of one phase, totals over the counted steps."""

    ops: Mapping[str, int]
    """aten operator calls by name (``aten::addmm``)."""
    copies: Mapping[str, int]
    """The copy operators among ``ops`` (see :data:`COPY_OPS`)."""
    dtype_conversions: int
    """Copies that changed the dtype."""
    device_copies: int
    """Copies between devices (host to device and back)."""
    flops: int
    flops_by_op: Mapping[str, int]
    syncs: tuple[SyncSite, ...]
    kernel_launches: int | None
    """CUDA kernel launches (``cudaLaunchKernel`` and the like); None on the CPU."""
    memcpy_calls: int | None
    """CUDA memory copy calls (``cudaMemcpy*``); None on the CPU."""
    allocator: AllocatorCounts | None
    """None on the CPU."""

    @property
    def op_calls(self) -> int:
        return sum(self.ops.values())

    @property
    def copy_calls(self) -> int:
        return sum(self.copies.values())

    @property
    def sync_count(self) -> int:
        return sum(s.count for s in self.syncs)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ops": _sorted_counts(self.ops),
            "copies": _sorted_counts(self.copies),
            "dtype_conversions": self.dtype_conversions,
            "device_copies": self.device_copies,
            "flops": self.flops,
            "flops_by_op": _sorted_counts(self.flops_by_op),
            "syncs": [s.to_dict() for s in sorted(self.syncs, key=lambda s: (s.location, s.call))],
            "kernel_launches": self.kernel_launches,
            "memcpy_calls": self.memcpy_calls,
            "allocator": self.allocator.to_dict() if self.allocator is not None else None,
        }

    @classmethod
    def from_dict(cls, data: object, where: str) -> PhaseCounters:
        f = Fields(data, where)
        ops = _counts(f.get("ops", dict), f"{where}.ops")
        copies = _counts(f.get("copies", dict), f"{where}.copies")
        for name, n in copies.items():
            if ops.get(name, 0) < n:
                raise ValueError(f"{where}.copies.{name}: {n} copies but {ops.get(name, 0)} calls in ops")
        flops_by_op = _counts(f.get("flops_by_op", dict), f"{where}.flops_by_op")
        flops = _count(f.get("flops", int), f"{where}.flops")
        if sum(flops_by_op.values()) != flops:
            raise ValueError(f"{where}.flops: {flops} is not the sum of flops_by_op ({sum(flops_by_op.values())})")
        syncs = tuple(SyncSite.from_dict(s, f"{where}.syncs[{i}]") for i, s in enumerate(f.get("syncs", list)))
        launches = f.get("kernel_launches", int, optional=True)
        memcpy = f.get("memcpy_calls", int, optional=True)
        allocator = f.get("allocator", dict, optional=True)
        return cls(
            ops=ops,
            copies=copies,
            dtype_conversions=_count(f.get("dtype_conversions", int), f"{where}.dtype_conversions"),
            device_copies=_count(f.get("device_copies", int), f"{where}.device_copies"),
            flops=flops,
            flops_by_op=flops_by_op,
            syncs=syncs,
            kernel_launches=None if launches is None else _count(launches, f"{where}.kernel_launches"),
            memcpy_calls=None if memcpy is None else _count(memcpy, f"{where}.memcpy_calls"),
            allocator=None if allocator is None else AllocatorCounts.from_dict(allocator, f"{where}.allocator"),
        )


@dataclass(frozen=True)
class CompileInfo:
    """What ``torch.compile`` did over the whole counted run (build, warmup and counted steps)."""

    frames_compiled: int
    """Frames dynamo compiled, recompilations included."""
    recompiles: int
    recompile_reasons: tuple[str, ...]
    """The first line of each recompilation's guard failure, in order."""
    graph_breaks: Mapping[str, int]
    """Graph breaks by reason (the reason's first lines, addresses and paths left out)."""
    compiles_in_counted_steps: int
    """Frames compiled while the steps were counted (0 once the warmup compiled everything)."""

    @property
    def graph_break_count(self) -> int:
        return sum(self.graph_breaks.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "frames_compiled": self.frames_compiled,
            "recompiles": self.recompiles,
            "recompile_reasons": list(self.recompile_reasons),
            "graph_breaks": _sorted_counts(self.graph_breaks),
            "compiles_in_counted_steps": self.compiles_in_counted_steps,
        }

    @classmethod
    def from_dict(cls, data: object, where: str) -> CompileInfo:
        f = Fields(data, where)
        reasons = f.get("recompile_reasons", list)
        if not all(isinstance(r, str) for r in reasons):
            raise ValueError(f"{where}.recompile_reasons: expected a list of strings")
        return cls(
            frames_compiled=_count(f.get("frames_compiled", int), f"{where}.frames_compiled"),
            recompiles=_count(f.get("recompiles", int), f"{where}.recompiles"),
            recompile_reasons=tuple(reasons),
            graph_breaks=_counts(f.get("graph_breaks", dict), f"{where}.graph_breaks"),
            compiles_in_counted_steps=_count(f.get("compiles_in_counted_steps", int),
                                             f"{where}.compiles_in_counted_steps"),
        )


def _phase_value(c: PhaseCounters, counter: str) -> int | None:
    if counter == "ops":
        return c.op_calls
    if counter == "copies":
        return c.copy_calls
    if counter == "syncs":
        return c.sync_count
    if counter in AllocatorCounts.FIELDS:
        return None if c.allocator is None else getattr(c.allocator, counter)
    return getattr(c, counter)


@dataclass(frozen=True)
class CounterSet:
    """The counters of one counted run of one workload on one device."""

    workload: str
    workload_version: int
    device: str
    steps: int
    """Steps counted (after ``warmup_steps`` uncounted ones)."""
    warmup_steps: int
    params: Mapping[str, Any]
    phases: Mapping[str, PhaseCounters]
    compile: CompileInfo | None
    unavailable: Mapping[str, str]
    """Each counter that is None (``kernel_launches``, ``memcpy_calls``, ``allocator``,
    ``compile``) and why."""
    sync_source: str
    """How synchronisations were found on this device."""
    timings: Mapping[str, float | None] = field(default_factory=dict)
    """Seconds, reported apart and never compared: ``counted_run_s`` (in the counting
    process: importing torch, the build, the warmup and the counted steps) and
    ``compile_s`` (dynamo's frame compilation; None when the workload does not compile)."""
    torch_version: str = ""
    perfgate_version: str = ""
    created_at: str = ""
    notes: tuple[str, ...] = ()
    """What a reader must know about how these were counted (a compiled model's operator
    calls counted on its eager path, for one)."""

    def __post_init__(self) -> None:
        if not all(isinstance(n, str) and n.strip() for n in self.notes):
            raise ValueError("notes must be non-empty strings")
        object.__setattr__(self, "notes", tuple(self.notes))
        if self.device not in DEVICES:
            raise ValueError(f"device must be one of {', '.join(DEVICES)}, got {self.device!r}")
        if isinstance(self.steps, bool) or not isinstance(self.steps, int) or self.steps < 1:
            raise ValueError(f"steps must be an integer >= 1, got {self.steps!r}")
        if set(self.phases) != set(PHASES):
            raise ValueError(f"phases must be exactly {', '.join(PHASES)}, got {', '.join(self.phases)}")
        unknown = set(self.unavailable) - set(OPTIONAL)
        if unknown:
            raise ValueError(f"unavailable: unknown counter(s) {', '.join(sorted(unknown))}")
        for name, reason in self.unavailable.items():
            if not isinstance(reason, str) or not reason.strip():
                raise ValueError(f"unavailable.{name}: a counter that is null needs a reason")
        for counter in ("kernel_launches", "memcpy_calls", "allocator"):
            nulls = {p for p, c in self.phases.items() if getattr(c, counter) is None}
            if nulls and nulls != set(PHASES):
                raise ValueError(f"{counter} is null in some phases only ({', '.join(sorted(nulls))})")
            if bool(nulls) != (counter in self.unavailable):
                raise ValueError(f"{counter}: null exactly when unavailable names a reason for it")
        if (self.compile is None) != ("compile" in self.unavailable):
            raise ValueError("compile: null exactly when unavailable names a reason for it")
        object.__setattr__(self, "phases", {p: self.phases[p] for p in PHASES})

    def per_step(self, total: int | None) -> float | None:
        """A total over the counted steps as a value per step (None stays None)."""
        return None if total is None else total / self.steps

    def total(self, counter: str) -> int | None:
        """A counter summed over the phases (``ops`` means operator calls, ``copies`` copy calls)."""
        values = [_phase_value(c, counter) for c in self.phases.values()]
        return None if any(v is None for v in values) else sum(v for v in values if v is not None)

    def counters_dict(self) -> dict[str, Any]:
        """What must be identical between two runs of the same code: everything but the
        timings and the creation time."""
        data = self.to_dict()
        for key in ("timings", "created_at"):
            data.pop(key)
        return data

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": COUNTERS_KIND,
            "schema_version": COUNTERS_SCHEMA_VERSION,
            "perfgate_version": self.perfgate_version,
            "torch_version": self.torch_version,
            "created_at": self.created_at,
            "workload": self.workload,
            "workload_version": self.workload_version,
            "device": self.device,
            "steps": self.steps,
            "warmup_steps": self.warmup_steps,
            "params": dict(self.params),
            "sync_source": self.sync_source,
            "phases": {p: c.to_dict() for p, c in self.phases.items()},
            "compile": self.compile.to_dict() if self.compile is not None else None,
            "unavailable": dict(sorted(self.unavailable.items())),
            "notes": list(self.notes),
            "timings": dict(self.timings),
        }


def counters_from_dict(data: object) -> CounterSet:
    """A :class:`CounterSet` from its JSON form; a ValueError names the bad field."""
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object at the top level, got {type(data).__name__}")
    data = migrate(dict(data), COUNTERS_KIND, COUNTERS_SCHEMA_VERSION, COUNTERS_MIGRATIONS)
    f = Fields(data, "")
    phases = f.sub("phases")
    missing = [p for p in PHASES if p not in phases.data]
    extra = [p for p in phases.data if p not in PHASES]
    if missing or extra:
        raise ValueError(f"phases: expected exactly {', '.join(PHASES)}"
                         + (f"; missing {', '.join(missing)}" if missing else "")
                         + (f"; unknown {', '.join(map(str, extra))}" if extra else ""))
    compile_data = f.get("compile", dict, optional=True)
    unavailable = f.get("unavailable", dict)
    timings = f.get("timings", dict)
    for key, value in timings.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not math.isfinite(value) or value < 0):
            raise ValueError(f"timings.{key}: expected seconds (a number >= 0) or null, got {value!r}")
    try:
        return CounterSet(
            workload=f.get("workload", str),
            workload_version=f.get("workload_version", int),
            device=f.get("device", str),
            steps=f.get("steps", int),
            warmup_steps=_count(f.get("warmup_steps", int), "warmup_steps"),
            params=f.get("params", dict),
            phases={p: PhaseCounters.from_dict(phases.data[p], f"phases.{p}") for p in PHASES},
            compile=None if compile_data is None else CompileInfo.from_dict(compile_data, "compile"),
            unavailable=unavailable,
            sync_source=f.get("sync_source", str),
            timings=timings,
            torch_version=f.get("torch_version", str),
            perfgate_version=f.get("perfgate_version", str),
            created_at=f.get("created_at", str),
            notes=tuple(f.get("notes", list, optional=True) or ()),
        )
    except TypeError as exc:  # a wrong type deep inside, reported as a bad file
        raise ValueError(str(exc)) from None


def first_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[0]


_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")


def clean_reason(text: str, lines: int = 2) -> str:
    """A compiler's reason made stable between runs: its first ``lines`` lines up to the
    debug context, whitespace collapsed, memory addresses replaced by ``0x…``."""
    kept = []
    for line in text.strip().splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith(("Developer debug context", "For more details", "Hint:")):
            break
        kept.append(" ".join(stripped.split()))
        if len(kept) == lines:
            break
    return _ADDRESS.sub("0x…", " ".join(kept))
