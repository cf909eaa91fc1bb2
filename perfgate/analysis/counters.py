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

This module does not import torch: the data, the file format, the comparison and the
table are read and written here.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfgate.model.errors import FileFormatError, PerfgateError
from perfgate.store.jsonfile import load_document, write_json_atomic
from perfgate.report.inert import terminal
from perfgate.report.units import table
from perfgate.model.schema import Fields, migrate
from perfgate.model.workload import DEVICES, PHASES

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

HOST_PHASES = frozenset({"data_wait"})
"""Phases that work on host tensors on every device (``perfgate.measure.loop.HOST_PHASES``):
their aten calls launch no kernels and wait for no device, so on the CPU they stand in for
neither launches nor synchronisations."""

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


def counters_path(out_dir: Path, workload: str) -> Path:
    """``<out_dir>/<workload>.counters.json``, beside the workload's result file."""
    return Path(out_dir) / f"{workload}{COUNTERS_SUFFIX}"


def load_counters_beside(results_dir: Path, names: Iterable[str]) -> dict[str, CounterSet]:
    """The counted runs found beside result files (``<w>.counters.json``), by workload; a
    bad file is a FileFormatError, one that names another workload too."""
    out = {}
    for name in names:
        path = counters_path(results_dir, name)
        if path.is_file():
            counters = load_counters(path)
            if counters.workload != name:
                raise FileFormatError(f"{path}: holds the counters of {counters.workload!r}, not {name!r}")
            out[name] = counters
    return out


def save_counters(counters: CounterSet, out_dir: Path) -> Path:
    path = counters_path(out_dir, counters.workload)
    write_json_atomic(path, counters.to_dict())
    return path


def load_counters(path: Path) -> CounterSet:
    return load_document(Path(path), "counters", counters_from_dict)


@dataclass(frozen=True)
class CounterOutcome:
    """A counted run as a caller sees it: the counters, or the error (never raised)."""

    workload: str
    counters: CounterSet | None = None
    error: PerfgateError | None = None
    seconds: float = 0.0
    """Wall time of the counted run, the process start included."""

    @property
    def ok(self) -> bool:
        return self.counters is not None


# --- the comparison --------------------------------------------------------------------


@dataclass(frozen=True)
class CounterThresholds:
    """Which counter changes fail. Counters are exact, so a threshold is a size of change
    worth failing on, not a noise margin.

    - a new host synchronisation per step (any);
    - FLOPs per step of a phase up by more than ``flops_threshold``;
    - kernel launches per step of a phase up by more than ``launch_threshold`` (CUDA);
      on the CPU, aten operator calls per step up by more than the same share (outside
      the data wait, which launches nothing on any device);
    - copies and dtype conversions per step of a phase up by more than ``copy_threshold``
      (0: any new copy);
    - a new graph break, or more of them; more recompiles.

    A counter left out of ``enabled`` (names in :data:`GATED`) is still reported when it
    changes, but never fails.
    """

    flops_threshold: float = 0.01
    launch_threshold: float = 0.10
    copy_threshold: float = 0.0
    enabled: frozenset[str] = frozenset(GATED)

    def __post_init__(self) -> None:
        for name in ("flops_threshold", "launch_threshold", "copy_threshold"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 <= value < math.inf):
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if isinstance(self.enabled, str):
            raise ValueError("enabled must be a set of counter names, not a string")
        enabled = frozenset(self.enabled)
        unknown = enabled - set(GATED)
        if unknown:
            raise ValueError(f"enabled: unknown counter(s) {', '.join(sorted(unknown))}; known: {', '.join(GATED)}")
        object.__setattr__(self, "enabled", enabled)


@dataclass(frozen=True)
class CounterChange:
    """One counter that differs between two counted runs."""

    phase: str
    """A phase of the step, or ``"step"`` for the compile counters of the whole run."""
    counter: str
    """``syncs``, ``flops``, ``kernel_launches``, ``ops``, ``copies``, ``memcpy_calls``,
    ``allocations``, ``device_mallocs``, ``alloc_retries``, ``graph_breaks``,
    ``recompiles``, ``frames_compiled`` or ``compile``."""
    before: float | None
    """Per step (the compile counters: per run); None when not counted."""
    after: float | None
    changed: tuple[str, ...]
    """The operators, stack lines or reasons behind the change, largest first."""
    failed: bool
    reason: str
    """One line saying what changed (and, when ``failed``, why that fails)."""


class CounterChanges(list[CounterChange]):
    """The changes :func:`compare_counters` found; ``failed`` when any of them fails."""

    @property
    def failed(self) -> bool:
        return any(c.failed for c in self)

    @property
    def failures(self) -> list[CounterChange]:
        return [c for c in self if c.failed]


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


def _num(value: float) -> str:
    """A per-step value: an integer as one, else up to three decimals."""
    if value == int(value):
        return str(int(value))
    return f"{value:.3f}".rstrip("0").rstrip(".")


def _flops(value: float) -> str:
    for unit, scale in (("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6), ("kFLOP", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{_num(value)} FLOP"


def _growth(before: float, after: float) -> str:
    return f"{(after / before - 1) * 100:.1f}%" if before > 0 else "from none"


def _up_by_more(before: float, after: float, threshold: float) -> bool:
    """``after`` exceeds ``before`` by more than ``threshold`` as a share (from 0: any rise)."""
    return after > before and after > before * (1 + threshold)


def _deltas(before: Mapping[str, int], after: Mapping[str, int], steps_b: int, steps_a: int,
            fmt: Any = _num, limit: int = 8) -> tuple[str, ...]:
    """``name +d`` per step for each key that changed, largest change first."""
    rows = []
    for key in set(before) | set(after):
        d = after.get(key, 0) / steps_a - before.get(key, 0) / steps_b
        if d:
            rows.append((-abs(d), key, d))
    rows.sort()
    return tuple(f"{key} {'+' if d > 0 else '-'}{fmt(abs(d))}" for _, key, d in rows[:limit])


def _sync_sites(c: PhaseCounters, steps: int) -> dict[tuple[str, str], float]:
    out: dict[tuple[str, str], float] = {}
    for s in c.syncs:
        out[(s.location, s.call)] = out.get((s.location, s.call), 0.0) + s.count / steps
    return out


def _compare_phase(phase: str, b: PhaseCounters, a: PhaseCounters, sb: int, sa: int, device: str,
                   t: CounterThresholds) -> list[CounterChange]:
    out: list[CounterChange] = []

    # Host synchronisations: any new one fails.
    before, after = b.sync_count / sb, a.sync_count / sa
    sites_b, sites_a = _sync_sites(b, sb), _sync_sites(a, sa)
    grew = sorted(((sites_a[k] - sites_b.get(k, 0.0), k) for k in sites_a if sites_a[k] > sites_b.get(k, 0.0)),
                  key=lambda x: (-x[0], x[1]))
    went = sorted(((sites_b[k] - sites_a.get(k, 0.0), k) for k in sites_b if sites_b[k] > sites_a.get(k, 0.0)),
                  key=lambda x: (-x[0], x[1]))
    if grew or went or before != after:
        changed = tuple(f"{loc} ({call}) +{_num(d)}" for d, (loc, call) in grew) + tuple(
            f"{loc} ({call}) -{_num(d)}" for d, (loc, call) in went)
        if after > before:
            n = after - before
            lines = ", ".join(dict.fromkeys(loc for _, (loc, _) in grew)) or "no new line (counts moved)"
            reason = (f"{_num(n)} new host synchronisation{'' if n == 1 else 's'} per step in {phase}: {lines}")
            out.append(CounterChange(phase, "syncs", before, after, changed, "syncs" in t.enabled, reason))
        else:
            reason = (f"host synchronisations per step in {phase}: {_num(before)} → {_num(after)}"
                      + ("" if after < before else " (moved between lines)"))
            out.append(CounterChange(phase, "syncs", before, after, changed, False, reason))

    # FLOPs.
    before, after = b.flops / sb, a.flops / sa
    if before != after:
        changed = _deltas(b.flops_by_op, a.flops_by_op, sb, sa, _flops)
        fails = "flops" in t.enabled and _up_by_more(before, after, t.flops_threshold)
        reason = f"FLOPs per step in {phase}: {_flops(before)} → {_flops(after)}"
        if fails:
            reason = (f"FLOPs per step in {phase} up {_growth(before, after)} ({_flops(before)} → {_flops(after)}; "
                      f"more than {t.flops_threshold * 100:g}%)" + (f": {', '.join(changed[:3])}" if changed else ""))
        out.append(CounterChange(phase, "flops", before, after, changed, fails, reason))

    # Kernel launches (CUDA), and the aten operator calls that stand in for them on the CPU.
    for counter, what, gated in (("kernel_launches", "kernel launches", device == "cuda"),
                                 ("ops", "aten operator calls", device == "cpu" and phase not in HOST_PHASES)):
        vb, va = _phase_value(b, counter), _phase_value(a, counter)
        if vb is None or va is None:
            if (vb is None) != (va is None):
                out.append(CounterChange(phase, counter, None if vb is None else vb / sb,
                                         None if va is None else va / sa, (), False,
                                         f"{what} in {phase}: counted in only one of the runs"))
            continue
        before, after = vb / sb, va / sa
        changed = _deltas(b.ops, a.ops, sb, sa) if counter == "ops" else ()
        if before == after and not changed:
            continue
        fails = gated and "launches" in t.enabled and _up_by_more(before, after, t.launch_threshold)
        reason = f"{what} per step in {phase}: {_num(before)} → {_num(after)}"
        if fails:
            stand_in = "; the CPU stand-in for kernel launches" if counter == "ops" else ""
            reason = (f"{what} per step in {phase} up {_growth(before, after)} ({_num(before)} → {_num(after)}; "
                      f"more than {t.launch_threshold * 100:g}%{stand_in})"
                      + (f": {', '.join(changed[:4])}" if changed else ""))
        out.append(CounterChange(phase, counter, before, after, changed, fails, reason))

    # Copies and dtype conversions.
    before, after = b.copy_calls / sb, a.copy_calls / sa
    conv_b, conv_a = b.dtype_conversions / sb, a.dtype_conversions / sa
    changed = _deltas(b.copies, a.copies, sb, sa)
    if before != after or conv_b != conv_a or changed:
        if conv_b != conv_a:
            changed += (f"dtype conversions {_num(conv_b)} → {_num(conv_a)}",)
        fails = "copies" in t.enabled and (_up_by_more(before, after, t.copy_threshold)
                                           or _up_by_more(conv_b, conv_a, t.copy_threshold))
        if fails:
            n = max(after - before, conv_a - conv_b)
            reason = (f"{_num(n)} more cop{'y' if n == 1 else 'ies'} or dtype conversion{'' if n == 1 else 's'} "
                      f"per step in {phase} (copies {_num(before)} → {_num(after)}, "
                      f"dtype conversions {_num(conv_b)} → {_num(conv_a)})"
                      + (f": {', '.join(changed[:3])}" if changed else ""))
        else:
            reason = f"copies per step in {phase}: {_num(before)} → {_num(after)}"
        out.append(CounterChange(phase, "copies", before, after, changed, fails, reason))

    # Reported, never failing: memory copy calls and the allocator.
    for counter in ("memcpy_calls", *AllocatorCounts.FIELDS):
        vb, va = _phase_value(b, counter), _phase_value(a, counter)
        if vb is None and va is None:
            continue
        before_v = None if vb is None else vb / sb
        after_v = None if va is None else va / sa
        if before_v != after_v:
            text = (f"{counter.replace('_', ' ')} per step in {phase}: "
                    f"{'—' if before_v is None else _num(before_v)} → {'—' if after_v is None else _num(after_v)}")
            out.append(CounterChange(phase, counter, before_v, after_v, (), False, text))
    return out


def _first_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[0]


def _compare_compile(b: CompileInfo | None, a: CompileInfo | None, t: CounterThresholds) -> list[CounterChange]:
    if b is None and a is None:
        return []
    if b is None or a is None:
        now = a if a is not None else b
        assert now is not None
        what = "compiles now" if a is not None else "no longer compiles"
        return [CounterChange(STEP, "compile", None, None, tuple(now.graph_breaks), False,
                              f"the workload {what} ({now.frames_compiled} frame(s) compiled, "
                              f"{now.graph_break_count} graph break(s), {now.recompiles} recompile(s))")]
    out: list[CounterChange] = []
    gb, ga = b.graph_break_count, a.graph_break_count
    new = {r: n - b.graph_breaks.get(r, 0) for r, n in a.graph_breaks.items() if n > b.graph_breaks.get(r, 0)}
    gone = {r: n - a.graph_breaks.get(r, 0) for r, n in b.graph_breaks.items() if n > a.graph_breaks.get(r, 0)}
    if new or gone:
        changed = tuple(f"+{n} {r}" for r, n in sorted(new.items(), key=lambda kv: (-kv[1], kv[0]))) + tuple(
            f"-{n} {r}" for r, n in sorted(gone.items(), key=lambda kv: (-kv[1], kv[0])))
        if new:
            n = sum(new.values())
            reasons = "; ".join(_first_line(r) for r in sorted(new, key=lambda r: (-new[r], r)))
            reason = f"{n} new graph break{'' if n == 1 else 's'} ({gb} → {ga}): {reasons}"
            out.append(CounterChange(STEP, "graph_breaks", gb, ga, changed, "graph_breaks" in t.enabled, reason))
        else:
            out.append(CounterChange(STEP, "graph_breaks", gb, ga, changed, False, f"graph breaks: {gb} → {ga}"))
    if a.recompiles != b.recompiles:
        more = a.recompiles > b.recompiles
        reasons = a.recompile_reasons[b.recompiles:] if more else ()
        reason = (f"{a.recompiles - b.recompiles} more recompile{'' if a.recompiles - b.recompiles == 1 else 's'} "
                  f"({b.recompiles} → {a.recompiles})" + (f": {reasons[0]}" if reasons else "")) if more else (
            f"recompiles: {b.recompiles} → {a.recompiles}")
        out.append(CounterChange(STEP, "recompiles", b.recompiles, a.recompiles, tuple(reasons),
                                 more and "recompiles" in t.enabled, reason))
    if a.frames_compiled != b.frames_compiled:
        out.append(CounterChange(STEP, "frames_compiled", b.frames_compiled, a.frames_compiled, (), False,
                                 f"frames compiled: {b.frames_compiled} → {a.frames_compiled}"))
    return out


def compare_counters(before: CounterSet, after: CounterSet,
                     thresholds: CounterThresholds = CounterThresholds()) -> CounterChanges:
    """Every counter that differs between ``before`` (the base) and ``after`` (the head).

    Values are compared per step, so runs that counted a different number of steps
    compare. Pure: no torch, no files. Raises ValueError for counters of different
    workloads or devices (a CPU run's counters say nothing about a CUDA run's).
    """
    if before.workload != after.workload:
        raise ValueError(f"counters of different workloads: {before.workload} and {after.workload}")
    if before.device != after.device:
        raise ValueError(f"{after.workload}: counters of different devices ({before.device} and {after.device}) "
                         "are not comparable")
    changes = CounterChanges()
    for phase in PHASES:
        changes.extend(_compare_phase(phase, before.phases[phase], after.phases[phase], before.steps, after.steps,
                                      after.device, thresholds))
    changes.extend(_compare_compile(before.compile, after.compile, thresholds))
    return changes


# --- the table -------------------------------------------------------------------------


def _cell(value: float | None, fmt: Any = _num) -> str:
    return "—" if value is None else fmt(value)


def render_counters(counters: CounterSet, top: int = 8) -> str:
    """The counters of one run as terminal text: per phase and per step, the top
    operators, the synchronisations with their lines, and what was not counted."""
    c = counters
    per = c.per_step
    headers = ["phase", "ops", "copies", "dtype conv", "FLOPs", "syncs", "launches", "memcpy", "allocs"]
    rows = []
    for phase, pc in c.phases.items():
        rows.append([phase, _cell(per(pc.op_calls)), _cell(per(pc.copy_calls)), _cell(per(pc.dtype_conversions)),
                     _cell(per(pc.flops), _flops), _cell(per(pc.sync_count)), _cell(per(pc.kernel_launches)),
                     _cell(per(pc.memcpy_calls)),
                     _cell(per(None if pc.allocator is None else pc.allocator.allocations))])
    total_allocs = None if "allocator" in c.unavailable else sum(
        pc.allocator.allocations for pc in c.phases.values() if pc.allocator is not None)
    rows.append([STEP, _cell(per(c.total("ops"))), _cell(per(c.total("copies"))),
                 _cell(per(c.total("dtype_conversions"))), _cell(per(c.total("flops")), _flops),
                 _cell(per(c.total("syncs"))), _cell(per(c.total("kernel_launches"))),
                 _cell(per(c.total("memcpy_calls"))), _cell(per(total_allocs))])
    lines = [f"{terminal(c.workload)} on {c.device}: per step, over {c.steps} counted step(s) "
             f"after {c.warmup_steps} warmup step(s)", "",
             table(headers, rows, "lrrrrrrrr"), ""]
    lines.append(f"top {top} operators per phase, calls per step:")
    for phase, pc in c.phases.items():
        if pc.ops:
            best = list(_sorted_counts(pc.ops).items())[:top]
            lines.append(f"  {phase}: " + ", ".join(f"{terminal(k)} {_num(v / c.steps)}" for k, v in best))
    flop_ops = {}
    for pc in c.phases.values():
        for k, v in pc.flops_by_op.items():
            flop_ops[k] = flop_ops.get(k, 0) + v
    if flop_ops:
        lines.append("FLOPs per step by operator: " + ", ".join(
            f"{terminal(k)} {_flops(v / c.steps)}" for k, v in list(_sorted_counts(flop_ops).items())[:top]))
    syncs = [(phase, s) for phase, pc in c.phases.items() for s in pc.syncs]
    lines.append(f"host synchronisations ({terminal(c.sync_source)}):" if syncs
                 else f"host synchronisations: none ({terminal(c.sync_source)})")
    for phase, s in sorted(syncs, key=lambda x: (PHASES.index(x[0]), -x[1].count, x[1].location)):
        lines.append(f"  {phase}: {terminal(s.location)}  {terminal(s.call)}  {_num(s.count / c.steps)} per step")
    if c.compile is not None:
        cc = c.compile
        lines.append(f"compile: {cc.frames_compiled} frame(s) compiled, {cc.recompiles} recompile(s), "
                     f"{cc.graph_break_count} graph break(s), {cc.compiles_in_counted_steps} compile(s) "
                     "while counting")
        for reason, n in _sorted_counts(cc.graph_breaks).items():
            lines.append(f"  graph break x{n}: {terminal(_first_line(reason))}")
        for reason in cc.recompile_reasons:
            lines.append(f"  recompile: {terminal(reason)}")
    for name, reason in sorted(c.unavailable.items()):
        lines.append(f"not counted: {name}: {terminal(reason)}")
    for note in c.notes:
        lines.append(f"note: {terminal(note)}")
    timings = ", ".join(f"{k} {v:.2f} s" for k, v in c.timings.items() if v is not None)
    if timings:
        lines.append(f"timings (not compared): {timings}")
    return "\n".join(lines) + "\n"


def render_changes(changes: Iterable[CounterChange]) -> str:
    """One line per change, failures first."""
    ordered = sorted(changes, key=lambda ch: not ch.failed)
    return "".join(f"{'FAIL' if ch.failed else 'info'}  {terminal(ch.reason)}\n" for ch in ordered)


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
