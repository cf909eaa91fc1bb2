"""Terminal tables for ``perfgate run``."""

from __future__ import annotations

from perfgate.report.units import ms, percent, size, table
from perfgate.result import RunResult
from perfgate.summary import ROWS, WorkloadSummary


def run_table(result: RunResult, summary: WorkloadSummary) -> str:
    """Per phase: median time, share of the step and run-to-run variation, then totals."""
    p = result.params
    header = (
        f"{result.workload} v{result.workload_version} on {result.device}: "
        f"{len(result.repeats)} repeat(s) x {summary.steps} steps, batch {p['batch_size']}, "
        f"input {p['input_size']}, {p['precision']}"
    )
    rows = []
    for row in ROWS:
        rows.append([
            row,
            ms(summary.median_ms[row]),
            percent(summary.share[row]),
            percent(summary.spread[row]) if summary.spread[row] is not None else "—",
        ])
    body = table(["phase", "median ms", "share", "run-to-run"], rows, "lrrr")
    footer = [
        f"throughput {summary.samples_per_s:.1f} samples/s",
        f"peak memory {size(summary.peak_memory_bytes)} ({summary.peak_memory_kind})",
    ]
    if summary.device_busy_fraction is not None:
        footer.append(f"device busy {percent(summary.device_busy_fraction)} of the window")
    if result.overrides:
        footer.append("overrides " + " ".join(f"{k}={v}" for k, v in sorted(result.overrides.items())))
    data = result.data
    footer.append(f"data {data.get('kind')} {data.get('hash_method')}:{str(data.get('content_hash'))[:12]}")
    return "\n".join([header, body, "   ".join(footer[:3]), "   ".join(footer[3:])]).rstrip() + "\n"
