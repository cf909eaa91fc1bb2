"""The comparison of two counted runs, without statistics (the counters: ``perfgate.model.counters``).

The same code gives the same counters in every run, so any change is real:
:class:`CounterThresholds` says which changes fail.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from perfgate.model.counters import (
    GATED,
    HOST_PHASES,
    STEP,
    AllocatorCounts,
    CompileInfo,
    CounterSet,
    PhaseCounters,
    _phase_value,
    first_line,
)
from perfgate.model.errors import PerfgateError
from perfgate.model.workload import PHASES


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
            reasons = "; ".join(first_line(r) for r in sorted(new, key=lambda r: (-new[r], r)))
            reason = f"{n} new graph break{'' if n == 1 else 's'} ({gb} → {ga}): {reasons}"
            out.append(CounterChange(STEP, "graph_breaks", gb, ga, changed, "graph_breaks" in t.enabled, reason))
        else:
            out.append(CounterChange(STEP, "graph_breaks", gb, ga, changed, False, f"graph breaks: {gb} → {ga}"))
    if a.recompiles != b.recompiles:
        more = a.recompiles > b.recompiles
        recompiled = a.recompile_reasons[b.recompiles:] if more else ()
        reason = (f"{a.recompiles - b.recompiles} more recompile{'' if a.recompiles - b.recompiles == 1 else 's'} "
                  f"({b.recompiles} → {a.recompiles})" + (f": {recompiled[0]}" if recompiled else "")) if more else (
            f"recompiles: {b.recompiles} → {a.recompiles}")
        out.append(CounterChange(STEP, "recompiles", b.recompiles, a.recompiles, tuple(recompiled),
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
