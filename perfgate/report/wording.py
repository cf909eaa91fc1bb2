"""Words every report uses alike for the design that decided a comparison."""

from __future__ import annotations

from perfgate.analysis.outcome import WorkloadComparison

__all__ = ["column_names", "design_lines"]


def column_names(c: WorkloadComparison) -> tuple[str, str]:
    """What the two sides of the phase table are: base/head (paired) or baseline/current."""
    return ("base", "head") if c.paired else ("baseline", "current")


def design_lines(c: WorkloadComparison) -> list[str]:
    """Which design decided and, in the paired design, the stored baseline's secondary line."""
    if not c.design:
        return []
    lines = [f"Decided by: {c.design}."]
    if c.since_baseline:
        lines.append(f"{c.since_baseline[0].upper()}{c.since_baseline[1:]}.")
    return lines
