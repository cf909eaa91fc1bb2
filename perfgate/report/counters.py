"""The counters of one run, and the changes between two, as terminal text."""

from __future__ import annotations

from typing import Any

from perfgate.analysis.counters import _flops, _num
from perfgate.model.counters import STEP, CounterSet, _sorted_counts, first_line
from perfgate.model.workload import PHASES
from perfgate.text.inert import terminal
from perfgate.text.units import table

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
    flop_ops: dict[str, int] = {}
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
            lines.append(f"  graph break x{n}: {terminal(first_line(reason))}")
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
