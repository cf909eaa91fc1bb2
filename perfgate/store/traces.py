"""Trace files: ``operators.json``, its markdown ``operators.md`` and the Chrome traces a traced
run writes; read back without torch."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from perfgate.model.errors import PerfgateError
from perfgate.model.trace import OPERATORS_JSON, OPERATORS_MD, OperatorRow, OperatorTable, PhaseOperators
from perfgate.store.jsonfile import load_document, write_json_atomic
from perfgate.text.inert import code_cell, inline


def save_operator_table(table: OperatorTable, path: Path) -> None:
    write_json_atomic(path, table.to_dict())


def load_operator_table(path: Path) -> OperatorTable:
    """Read ``operators.json``; a missing, truncated or foreign file is a FileFormatError."""
    return load_document(path, "operator table", OperatorTable.from_dict)


@dataclass(frozen=True)
class TraceResult:
    """What one traced run wrote, and its table."""

    workload: str
    directory: Path
    """``<artifacts>/<workload>``."""
    traces: tuple[Path, ...]
    operators_json: Path
    operators_md: Path
    table: OperatorTable

    def top(self, phase: str, n: int = 5, *, by: str = "self_cpu") -> tuple[OperatorRow, ...]:
        """The first ``n`` operators of ``phase`` by ``"self_cpu"`` or ``"device"`` time."""
        if by not in ("self_cpu", "device"):
            raise ValueError(f"by must be self_cpu or device, got {by!r}")
        p = self.table.phase(phase)
        return (p.by_self_cpu if by == "self_cpu" else p.by_device)[:n]

    @classmethod
    def from_directory(cls, directory: Path) -> TraceResult:
        """The result recorded in ``directory`` (``<artifacts>/<workload>``)."""
        table = load_operator_table(directory / OPERATORS_JSON)
        return cls(table.workload, directory, tuple(directory / t for t in table.traces),
                   directory / OPERATORS_JSON, directory / OPERATORS_MD, table)


@dataclass(frozen=True)
class TraceOutcome:
    """A traced run as the gate sees it: a result, or the error to report (never raised)."""

    workload: str
    result: TraceResult | None = None
    error: PerfgateError | None = None
    seconds: float = 0.0
    """Wall time including the process start."""

    @property
    def ok(self) -> bool:
        return self.result is not None


# --- operators.md ----------------------------------------------------------------------


def _ms(us: float | None) -> str:
    if us is None:
        return "—"
    value = us / 1000.0
    return f"{value:.3g}" if value < 10 else f"{value:.1f}"


def _pct(part: float, whole: float) -> str:
    return f"{part / whole * 100:.0f}%" if whole > 0 else "—"


def _cell(text: str) -> str:
    return code_cell(text)


def phase_operator_rows(phase: PhaseOperators, limit: int, *, by: str = "self_cpu") -> list[str]:
    """A markdown table of one phase's top operators (per-step milliseconds)."""
    steps = max(phase.ranges, 1)
    device = phase.device_us is not None
    rows = phase.by_device if by == "device" else phase.by_self_cpu
    total = (phase.device_us or 0.0) if by == "device" else phase.operator_self_cpu_us
    share = "share of phase kernel time" if by == "device" else "share of phase ops"
    header = f"| operator | calls/step | self CPU ms/step | {share} |"
    rule = "|---|---:|---:|---:|"
    if device:
        header += " device ms/step |"
        rule += "---:|"
    lines = [header, rule]
    for row in rows[:limit]:
        part = (row.self_device_us or 0.0) if by == "device" else row.self_cpu_us
        line = (f"| {_cell(row.name)} | {row.calls / steps:.3g} | {_ms(row.self_cpu_us / steps)} | "
                f"{_pct(part, total)} |")
        if device:
            line += f" {_ms((row.self_device_us or 0.0) / steps)} |"
        lines.append(line)
    if phase.outside_operators_us > 0 and by == "self_cpu":
        line = f"| *(in no operator: Python, sleeps, waits)* | | {_ms(phase.outside_operators_us / steps)} | |"
        lines.append(line + (" |" if device else ""))
    return lines


def render_operator_table(table: OperatorTable, *, limit: int = 10) -> str:
    """``operators.md``: a small table per phase, with what the numbers are."""
    lines = [
        f"# Operators of {inline(table.workload)} ({inline(table.device)})",
        "",
        f"A traced run: {table.profiled_steps} profiled step(s) after {table.unprofiled_warmup_steps} "
        f"unprofiled warmup step(s), schedule wait={table.schedule.wait} warmup={table.schedule.warmup} "
        f"active={table.schedule.active} repeat={table.schedule.repeat}; torch {inline(table.torch_version)}. "
        "Times are per profiled step. A profiler slows the step (10-30%); these numbers explain, "
        "they are never used for the verdict.",
        "",
        "Traces (open in https://ui.perfetto.dev or chrome://tracing): "
        + ", ".join(f"[{t}]({t})" for t in table.traces),
        "",
    ]
    total_ops = sum(p.operator_self_cpu_us for p in table.phases.values())
    for name, phase in table.phases.items():
        steps = max(phase.ranges, 1)
        summary = (f"## {name}: {_ms(phase.wall_us / steps)} ms/step in the range, "
                   f"{_ms(phase.operator_self_cpu_us / steps)} ms/step in operators "
                   f"({_pct(phase.operator_self_cpu_us, total_ops)} of all phases' operator time)")
        if phase.device_us is not None:
            summary += f", {_ms(phase.device_us / steps)} ms/step of kernels launched"
        lines += [summary, ""]
        if not phase.by_self_cpu:
            lines += ["No operators.", ""]
            continue
        lines += [*phase_operator_rows(phase, limit), ""]
        if phase.device_us is not None and phase.by_device:
            lines += ["By device time:", "", *phase_operator_rows(phase, limit, by="device"), ""]
    other = table.other_threads
    if other is not None and other.by_self_cpu:
        lines += ["## Other threads during the profiled steps (not attributed to a phase)", "",
                  *phase_operator_rows(other, limit), ""]
    return "\n".join(lines).rstrip() + "\n"
