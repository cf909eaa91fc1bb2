"""Profiler traces, read back without torch: the schedule and the operator table.

A traced run (``perfgate.measure.trace``) is a separate, short run of a workload under
``torch.profiler``. It writes Chrome trace files and ``operators.json``: per phase of the
step (``data_wait`` ... ``optimizer``), the operators whose time falls inside that phase's
``record_function`` range, with call counts and totals. This module holds the nouns and
their dict form; the files are ``perfgate.store.traces``, the markdown ``perfgate.store.traces``.

Traced runs are slower than measured ones (a profiler costs 10-30%) and never feed a
verdict: they explain a regression, the unprofiled repeats measure it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from perfgate.model.errors import PerfgateError
from perfgate.model.schema import Fields, migrate, number_series
from perfgate.model.workload import PHASES

TABLE_KIND = "perfgate.operator-table"
TABLE_SCHEMA_VERSION = 1
TABLE_MIGRATIONS: dict[int, Any] = {}
OPERATORS_JSON = "operators.json"
OPERATORS_MD = "operators.md"
TRACE_GLOB = "trace-*.json"
OTHER_THREADS = "other_threads"
"""Work on threads that are neither the step's nor the autograd engine's (a pin-memory thread)."""


class TraceError(PerfgateError):
    """A traced run that could not be written or profiled (exit code 2, never a verdict)."""


@dataclass(frozen=True)
class TraceSchedule:
    """``torch.profiler.schedule``: per cycle, ``wait`` idle, ``warmup`` and ``active`` steps.

    The workload's own warmup steps run before the profiler starts; these steps come after
    them. ``repeat`` cycles give one Chrome trace file each.
    """

    wait: int = 1
    warmup: int = 1
    active: int = 3
    repeat: int = 1

    def __post_init__(self) -> None:
        for name, minimum in (("wait", 0), ("warmup", 0), ("active", 1), ("repeat", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ValueError(f"trace schedule {name} must be an integer >= {minimum}, got {value!r}")

    @property
    def steps(self) -> int:
        """Steps run under the profiler (every cycle, idle and warmup steps included)."""
        return (self.wait + self.warmup + self.active) * self.repeat

    @property
    def active_steps(self) -> int:
        return self.active * self.repeat

    def to_dict(self) -> dict[str, int]:
        return {"wait": self.wait, "warmup": self.warmup, "active": self.active, "repeat": self.repeat}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TraceSchedule:
        return cls(**{k: data[k] for k in ("wait", "warmup", "active", "repeat") if k in data})


@dataclass(frozen=True)
class OperatorRow:
    """One operator name inside one phase, summed over the profiled steps (microseconds)."""

    name: str
    calls: int
    self_cpu_us: float
    """Host time inside this operator and not inside an operator it called."""
    cpu_total_us: float
    """Host time inside this operator, its callees included (recursion counted once)."""
    self_device_us: float | None = None
    """Kernel time launched by this operator itself (None on the CPU)."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "calls": self.calls, "self_cpu_us": self.self_cpu_us,
                               "cpu_total_us": self.cpu_total_us}
        if self.self_device_us is not None:
            out["self_device_us"] = self.self_device_us
        return out

    @classmethod
    def from_fields(cls, f: Fields) -> OperatorRow:
        calls = f.get("calls", int)
        if calls < 1:
            raise ValueError(f"{f.where}.calls: expected a positive count, got {calls}")
        return cls(name=f.get("name", str), calls=calls, self_cpu_us=f.number("self_cpu_us") or 0.0,
                   cpu_total_us=f.number("cpu_total_us") or 0.0,
                   self_device_us=f.number("self_device_us", optional=True))


@dataclass(frozen=True)
class PhaseOperators:
    """The operators attributed to one phase, and the phase's own totals (microseconds)."""

    phase: str
    ranges: int
    """``record_function`` ranges of this phase found (one per profiled step)."""
    wall_us: float
    """Summed duration of the ranges on the step's thread."""
    operator_self_cpu_us: float
    """Self host time of every operator attributed to the phase (all of them, not only the top)."""
    outside_operators_us: float
    """Time on the step's thread in the range but in no operator: Python, sleeps, waits."""
    operators: int
    """Distinct operator names attributed."""
    by_self_cpu: tuple[OperatorRow, ...]
    device_us: float | None = None
    """Kernel time launched from the phase (None on the CPU)."""
    by_device: tuple[OperatorRow, ...] = ()
    wall_us_per_step: tuple[float, ...] = ()
    """``wall_us`` per range, in time order (one per profiled step)."""
    operator_self_cpu_us_per_step: tuple[float, ...] = ()
    """``operator_self_cpu_us`` per range: a single slow step stands out, a median ignores it."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "ranges": self.ranges, "wall_us": self.wall_us, "operator_self_cpu_us": self.operator_self_cpu_us,
            "outside_operators_us": self.outside_operators_us, "operators": self.operators,
            "by_self_cpu": [r.to_dict() for r in self.by_self_cpu],
            "wall_us_per_step": list(self.wall_us_per_step),
            "operator_self_cpu_us_per_step": list(self.operator_self_cpu_us_per_step),
        }
        if self.device_us is not None:
            out["device_us"] = self.device_us
            out["by_device"] = [r.to_dict() for r in self.by_device]
        return out

    @classmethod
    def from_fields(cls, phase: str, f: Fields) -> PhaseOperators:
        def rows(key: str) -> tuple[OperatorRow, ...]:
            values = f.get(key, list, optional=True) or []
            return tuple(OperatorRow.from_fields(Fields(v, f"{f.where}.{key}[{i}]")) for i, v in enumerate(values))

        def series(key: str) -> tuple[float, ...]:
            values = f.get(key, list, optional=True) or []
            return number_series(values, f"{f.where}.{key}") if values else ()

        return cls(phase=phase, ranges=f.get("ranges", int), wall_us=f.number("wall_us") or 0.0,
                   operator_self_cpu_us=f.number("operator_self_cpu_us") or 0.0,
                   outside_operators_us=f.number("outside_operators_us") or 0.0,
                   operators=f.get("operators", int), by_self_cpu=rows("by_self_cpu"),
                   device_us=f.number("device_us", optional=True), by_device=rows("by_device"),
                   wall_us_per_step=series("wall_us_per_step"),
                   operator_self_cpu_us_per_step=series("operator_self_cpu_us_per_step"))


@dataclass(frozen=True)
class OperatorTable:
    """``operators.json``: per phase, the top operators of one traced run."""

    workload: str
    device: str
    schedule: TraceSchedule
    unprofiled_warmup_steps: int
    profiled_steps: int
    """Active steps the table sums over."""
    row_limit: int
    traces: tuple[str, ...]
    """Chrome trace file names, next to ``operators.json``."""
    phases: Mapping[str, PhaseOperators]
    other_threads: PhaseOperators | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    torch_version: str = ""
    perfgate_version: str = ""
    created_at: str = ""
    seconds: float = 0.0
    """Wall time of the traced run in its process: build, warmup, profiled steps, writing."""

    def phase(self, name: str) -> PhaseOperators:
        try:
            return self.phases[name]
        except KeyError:
            raise KeyError(f"no phase {name!r} in the operator table of {self.workload}") from None

    def operator_share(self, phase: str) -> float:
        """The phase's share of the operator self time of all phases (0 when there is none)."""
        total = sum(p.operator_self_cpu_us for p in self.phases.values())
        return self.phase(phase).operator_self_cpu_us / total if total > 0 else 0.0

    def wall_share(self, phase: str) -> float:
        """The phase's share of the summed phase ranges (the traced step, roughly)."""
        total = sum(p.wall_us for p in self.phases.values())
        return self.phase(phase).wall_us / total if total > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": TABLE_KIND,
            "schema_version": TABLE_SCHEMA_VERSION,
            "workload": self.workload,
            "device": self.device,
            "schedule": self.schedule.to_dict(),
            "unprofiled_warmup_steps": self.unprofiled_warmup_steps,
            "profiled_steps": self.profiled_steps,
            "row_limit": self.row_limit,
            "time_unit": "us",
            "traces": list(self.traces),
            "phases": {name: p.to_dict() for name, p in self.phases.items()},
            OTHER_THREADS: self.other_threads.to_dict() if self.other_threads is not None else None,
            "params": dict(self.params),
            "torch_version": self.torch_version,
            "perfgate_version": self.perfgate_version,
            "created_at": self.created_at,
            "seconds": self.seconds,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> OperatorTable:
        data = migrate(dict(data), TABLE_KIND, TABLE_SCHEMA_VERSION, TABLE_MIGRATIONS)
        f = Fields(data, "")
        phases_f = f.sub("phases")
        # JSON keys are sorted on disk; the table keeps the order of the step.
        order = [p for p in PHASES if p in phases_f.data] + sorted(set(phases_f.data) - set(PHASES))
        phases = {name: PhaseOperators.from_fields(name, phases_f.sub(name)) for name in order}
        other = (PhaseOperators.from_fields(OTHER_THREADS, f.sub(OTHER_THREADS))
                 if f.get(OTHER_THREADS, dict, optional=True) is not None else None)
        traces = f.get("traces", list)
        if not all(isinstance(t, str) for t in traces):
            raise ValueError("traces: expected a list of file names")
        try:
            schedule = TraceSchedule.from_dict(f.get("schedule", dict))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"schedule: {exc}") from None
        return cls(
            workload=f.get("workload", str), device=f.get("device", str), schedule=schedule,
            unprofiled_warmup_steps=f.get("unprofiled_warmup_steps", int),
            profiled_steps=f.get("profiled_steps", int), row_limit=f.get("row_limit", int),
            traces=tuple(traces), phases=phases, other_threads=other,
            params=f.get("params", dict, optional=True) or {},
            torch_version=f.get("torch_version", str, optional=True) or "",
            perfgate_version=f.get("perfgate_version", str, optional=True) or "",
            created_at=f.get("created_at", str, optional=True) or "",
            seconds=f.number("seconds", optional=True) or 0.0,
        )
