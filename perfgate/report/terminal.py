"""Terminal tables for ``perfgate run`` and the gate.

Every string from a result, a baseline or a reason passes through
:func:`perfgate.text.inert.terminal` first: a result file must not be able to send the
terminal (or a CI log) escape sequences, nor start a line of its own.
"""

from __future__ import annotations

import shlex
from statistics import median

from perfgate.analysis.counted import NOT_COUNTED
from perfgate.analysis.contention import contention
from perfgate.analysis.diagnose import diagnose
from perfgate.analysis.modes import bimodal
from perfgate.analysis.outcome import GateOutcome, WorkloadComparison
from perfgate.analysis.ranks import STRAGGLER_SHARE
from perfgate.analysis.summary import WorkloadSummary
from perfgate.model.result import ROWS, RunResult
from perfgate.model.script import ARGS_PARAM, script_path_of
from perfgate.model.verdict import run_policy
from perfgate.report.markdown import script_argv
from perfgate.report.phase_table import RowKind, phase_table, rank_table
from perfgate.report.wording import clock_line, design_lines, modes_line, modes_lines, sides_line, step_statistics_line
from perfgate.text.inert import terminal as t
from perfgate.text.units import ms, percent, size, table


def _script_precision(result: RunResult) -> str:
    """The precision a script's measured steps ran in, as its repeats recorded it (the autocast
    dtype in effect, else the parameters'), e.g. ``bf16 (autocast)``; several are all named."""
    seen: dict[str, str] = {}
    for repeat in result.repeats:
        script = (getattr(repeat, "torch_settings", None) or {}).get("script") or {}
        name = script.get("precision")
        if isinstance(name, str) and name:
            seen.setdefault(name, str(script.get("precision_from") or ""))
    return ", ".join(f"{t(name)} ({t(source)})" if source else t(name) for name, source in seen.items())


def run_table(result: RunResult, summary: WorkloadSummary, *, straggler_share: float = STRAGGLER_SHARE) -> str:
    """Per phase: median time, share of the step and run-to-run variation, then totals, the
    ranks of a distributed run, and the labels (``straggler_share``: STRAGGLER's threshold)."""
    p = result.params
    script = script_path_of(result.workload_source)
    if script is not None:  # the script sets its own batch, input and precision
        argv = script_argv(p.get(ARGS_PARAM))
        what = f"the script {t(script)}" + (f" -- {t(shlex.join(argv))}" if argv else "")
        precision = _script_precision(result)
        if precision:
            what += f", {precision}"
    else:
        knob = f", input {t(p['input_size'])}" if p.get("input_size") is not None else ""  # optional
        what = f"batch {t(p['batch_size'])}{knob}, {t(p['precision'])}"
    header = (
        f"{t(result.workload)} v{t(result.workload_version)} on {t(result.device)}: "
        f"{len(result.repeats)} repeat(s) x {summary.steps} steps, {what}"
    )
    rows = []
    for row in ROWS:
        rows.append([
            row,
            ms(summary.per_step_ms[row]),
            ms(summary.median_ms[row]),
            percent(summary.share[row]),
            percent(summary.spread[row]) if summary.spread[row] is not None else "—",
        ])
    body = table(["phase", "ms/step", "median ms", "share", "run-to-run"], rows, "lrrrr")
    footer = [
        f"throughput {summary.samples_per_s:.1f} samples/s",
        f"peak memory {size(summary.peak_memory_bytes)} ({t(summary.peak_memory_kind)})",
    ]
    if summary.device_busy_fraction is not None:
        footer.append(f"device busy {percent(summary.device_busy_fraction)} of the window")
    if result.overrides:
        footer.append("overrides " + " ".join(t(f"{k}={v}") for k, v in sorted(result.overrides.items())))
    data = result.data
    footer.append(f"data {t(data.get('kind'))} {t(data.get('hash_method'))}:{t(str(data.get('content_hash'))[:12])}")
    lines = [header, body, "   ".join(footer[:3]), "   ".join(footer[3:])]
    headers, ranks = rank_table(summary)
    if ranks:
        comm = (f"; the all-reduce wait is {percent(summary.comm_share)} of the step"
                if summary.comm_share is not None else "")
        lines += [f"per rank ({len(ranks)} ranks; the table above holds, per step, the slowest rank's{comm}):",
                  table(headers, ranks, "r" * len(headers))]
    lines += [f"{t(label.name)} ({t(label.severity)}): {t(label.evidence)}" for label in
              diagnose(result, straggler_share=straggler_share)]
    found = bimodal([r.per_step_ms["step"] for r in result.repeats])
    if found is not None:
        lines.append(modes_line("this run", found))
    lines += contended_lines(result)
    lines += telemetry_lines(result)
    return "\n".join(line for line in lines if line).rstrip() + "\n"


def contended_lines(result: RunResult) -> list[str]:
    """Each repeat other processes contended (``perfgate.analysis.contention``, the gate's own
    default policy), named with their share and its time per step: a run-to-run figure a
    contended repeat inflated must not read as this code's noise."""
    typical = median(r.per_step_ms["step"] for r in result.repeats)
    lines = []
    for r in result.repeats:
        reason = contention(r.telemetry)
        if reason is not None:
            lines.append(f"repeat {r.index + 1} contended: {t(reason)}; its time per step "
                         f"{ms(r.per_step_ms['step'])} ms against a median of {ms(typical)} ms over the repeats "
                         "(counted in run-to-run; perfgate gate measures a contended repeat again)")
    return lines


def telemetry_lines(result: RunResult) -> list[str]:
    """What the background sampler saw, summarised over the repeats; missing signals say so."""
    summaries = [r.telemetry for r in result.repeats if r.telemetry is not None]
    if not summaries:
        return ["telemetry: not sampled"]
    lines = []
    cpu = [s["cpu"] for s in summaries if s.get("cpu")]
    proc = [c["process_percent"]["mean"] for c in cpu if c["process_percent"]["mean"] is not None]
    system = [c["system_percent"]["mean"] for c in cpu if c["system_percent"]["mean"] is not None]
    if proc:
        lines.append(f"telemetry cpu: this process {median(proc):.0f}% (median of repeat means), "
                     f"machine {median(system):.0f}%")
    gpu = [s["gpu"] for s in summaries if s.get("gpu")]
    util = [u for g in gpu if (u := (g.get("util_percent") or {}).get("mean")) is not None]
    clocks = [c for g in gpu if (c := (g.get("sm_clock_mhz") or {}).get("median")) is not None]
    caps = [c for g in gpu if (c := g.get("power_cap_share")) is not None]
    if util or clocks:
        parts = [f"NVML utilisation {median(util):.0f}%" if util else "NVML utilisation not read",
                 f"SM clock {median(clocks):.0f} MHz" if clocks else "SM clock not read"]
        if caps:
            parts.append(f"at the power cap {median(caps):.0%} of the time")
        throttled = sum(1 for r in result.repeats if r.throttled)
        lines.append(f"telemetry gpu: {', '.join(parts)}, thermal or hardware slowdown in {throttled} of "
                     f"{len(result.repeats)} repeat(s)")
    missing = sorted({f"{t(k)} ({t(v)})" for s in summaries for k, v in s.get("unavailable", {}).items()})
    errors = sorted({t(e) for s in summaries for e in s.get("errors", [])})
    if missing:
        lines.append("telemetry unavailable: " + "; ".join(missing))
    if errors:
        lines.append("telemetry stopped: " + "; ".join(errors))
    return lines


def counter_lines(c: WorkloadComparison) -> list[str]:
    """One line per failing counter, and why a paired workload has no counters."""
    lines = [f"  counters FAIL: {t(ch.reason)}" for ch in (c.counters.failures if c.counters is not None else [])]
    if c.counters_note and c.counters_note != NOT_COUNTED:
        lines.append(f"  counters: {t(c.counters_note)}")
    return lines


def check_line(outcome: GateOutcome) -> str:
    """What the gate does to a pull request's check, as plain text: the comment's "Check:"
    line under the gate's settings (an INCONCLUSIVE gate neutral or failing by ``inconclusive``)."""
    return run_policy(outcome.exit_code, outcome.config).check_line.replace("**", "").replace("`", "")


def gate_table(outcome: GateOutcome) -> str:
    """The gate's verdicts and, per judged workload, the phase table, as plain text."""
    lines = [outcome.headline, ""]
    for c in outcome.comparisons:
        lines.append(t(c.verdict_line))
        if c.time is None and c.headline != c.reason:
            lines.append(f"  {t(c.reason)}")  # not judged: no table below to say the rest
        lines += [f"  {t(line)}" for line in design_lines(c)]
        lines += [f"  environment {t(k)}: base {t(a)}, head {t(b)}" for k, (a, b) in c.environment_differences.items()]
        lines += [f"  {t(label.name)} ({t(label.severity)}): {t(label.evidence)}" for label in c.labels]
        lines += [f"  left out: {t(note)}" for note in c.left_out]
        lines += [f"  {t(line)}" for line in modes_lines(c)]
        lines += counter_lines(c)
    lines += ["", check_line(outcome)]
    if outcome.cost is not None:
        lines.append(f"measuring: {t(outcome.cost.describe())}")
    for c in outcome.comparisons:
        if c.time is None:
            continue
        phases = phase_table(c)
        rows = []
        for row in phases.rows:
            if row.kind is RowKind.STEP:
                assert row.verdict is not None
                change, mark = row.change, row.verdict.value
            elif row.tested is not None:
                change, mark = row.change, ("MOVED" if row.direction else "") if row.tested else "(not tested)"
            else:
                change, mark = "—", ""
            rows.append([t(row.phase), row.before_ms, row.after_ms, change, row.share_text, mark])
        lines += ["", f"{t(c.workload)} ({c.verdict.value})", t(c.reason), table(phases.headers, rows, "lrrrrl")]
        lines += [t(x) for x in (step_statistics_line(c), sides_line(c), clock_line(c)) if x]
        est = c.time.estimate
        if c.paired:
            lines.append(f"noise: run-to-run {percent(est.within_sd_log)} within blocks, block-to-block "
                         f"{percent(est.between_sd_log)} (removed by the design); smallest detectable slowdown "
                         f"{percent(c.time.mde, signed=True)}")
        else:
            lines.append(f"noise: run-to-run {percent(est.current_sd_log)} now, {percent(est.baseline_sd_log)} in "
                         f"the baseline, day-to-day {percent(est.between_sd_log)}"
                         f"{' (measured)' if c.baseline is not None and c.baseline.day_variation else ''}; "
                         f"smallest detectable slowdown "
                         f"{percent(c.time.mde, signed=True)}")
        if c.memory is not None:
            lines.append(f"memory: {t(c.memory.reason)}")
    return "\n".join(lines) + "\n"
