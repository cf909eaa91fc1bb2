"""The markdown report the CI check and the pytest plugin publish.

One line per workload at the top, then per workload a phase table (baseline and current
medians, the change with its confidence interval, the share of the step and the flag),
memory, the noise the run saw and the smallest slowdown it could have detected, what
differs when a baseline is incomparable, and the commands to reproduce and to rebaseline.
Long details are folded in ``<details>``. The whole report stays under GitHub's comment
limit however many workloads there are: details are dropped first, then the tables of
passing workloads, and as a last resort the report is cut with a note saying so.

Every string that comes from the measured run or a stored file (workload names, reasons,
label evidence, left-out notes, environment values, provenance, paths, trace file and
operator names, commands built from them) is made inert with :mod:`perfgate.text.inert`
before it is placed: the run is the pull request's code, and this report is posted as a
comment. Only perfgate's own words and the numbers it formats are written as markdown.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from urllib.parse import quote

from perfgate.analysis.counted import NOT_COUNTED
from perfgate.analysis.counters import _flops, _num
from perfgate.analysis.diagnose import PHASE_HINTS
from perfgate.analysis.outcome import GateOutcome, WorkloadComparison
from perfgate.model.script import ARGS_PARAM, script_path_of
from perfgate.model.trace import PhaseOperators
from perfgate.model.verdict import POLICY, Verdict
from perfgate.model.version import __version__
from perfgate.model.workload import PHASES
from perfgate.report.phase_table import RowKind, flagged_rank_table, phase_table
from perfgate.report.wording import (
    clock_line,
    column_names,
    design_lines,
    looks_wording,
    modes_lines,
    noise_components_line,
    sides_line,
    step_statistics_line,
)
from perfgate.store.traces import TraceOutcome, TraceResult
from perfgate.text.inert import code, code_cell, flatten, inline
from perfgate.text.units import ms, percent, size

MARKER = "<!-- perfgate-report -->"
GITHUB_COMMENT_LIMIT = 65_536
ICON = {v: POLICY[v].icon for v in Verdict}
"""Each verdict's icon (``perfgate.model.verdict.POLICY``)."""


REASON_PLACEHOLDER = ' --reason "<why this change is intended>"'
"""perfgate's own placeholder after a rebaseline command (its text, never a run's, so it stays as written)."""


def _run_args(c: WorkloadComparison) -> list[str]:
    """``--device D --set K=V ...``: the words that make a run comparable, as an argv."""
    words = ["--device", c.device] if c.device else []
    sets = [f"{k}={v}" for k, v in sorted(c.overrides.items())]
    return words + (["--set", *sets] if sets else [])


def script_argv(recorded: object) -> list[str]:
    """A script's arguments as a result records them (``shlex.join``), as an argv. The result is
    untrusted: a string that does not split (an unclosed quote) is one argument, whole, so that
    quoting it again shows it literally and nothing in it reaches a shell unquoted."""
    text = str(recorded or "")
    if not text:
        return []
    try:
        return shlex.split(text)
    except ValueError:
        return [text]


def _script_run(c: WorkloadComparison) -> list[str] | None:
    """``perfgate run --script PATH --name NAME ... -- ARGS`` for a script's result; None otherwise."""
    path = script_path_of(c.source)
    if path is None:
        return None
    args = script_argv(c.params.get(ARGS_PARAM))
    return (["perfgate", "run", "--script", path, "--name", c.workload, *_run_args(c)]
            + (["--", *args] if args else []))


def reproduce_command(c: WorkloadComparison) -> str:
    """The command that measures and judges this workload again, every word quoted (``shlex.join``)."""
    script = _script_run(c)
    if script is not None:  # a script is measured by run, then compared
        return f"{shlex.join(script)} && {shlex.join(['perfgate', 'compare', c.workload])}"
    against = ["--against", c.against] if c.against else []
    return shlex.join(["perfgate", "gate", c.workload, *_run_args(c), *against])


def rebaseline_command(c: WorkloadComparison) -> str:
    """The command that records a new baseline with the run's parameters, every word quoted."""
    # the same parameters as the run, or the new baseline would not be comparable
    script = _script_run(c)
    if script is not None:
        return (f"{shlex.join(script)} && "
                f"{shlex.join(['perfgate', 'rebaseline', c.workload, '--from-results', 'perfgate-results'])}"
                + REASON_PLACEHOLDER)
    return shlex.join(["perfgate", "rebaseline", c.workload, *_run_args(c)]) + REASON_PLACEHOLDER


def _command(command: str) -> str:
    """A command as a line of an indented code block: shown literally, on one line."""
    return f"    {flatten(command)}"


def _verdict_line(c: WorkloadComparison) -> str:
    """The line read in one glance: the deciding fact (``WorkloadComparison.headline``); the
    design, the whole reason and the tables follow in the workload's section."""
    return f"- {ICON[c.verdict]} **{inline(c.workload)}** — **{c.verdict.value}**: {inline(c.headline)}"


def _phase_table(c: WorkloadComparison) -> list[str]:
    table = phase_table(c)
    lines = ["| " + " | ".join(table.headers) + " |", "|---|---:|---:|---:|---:|---|"]
    for row in table.rows:
        if row.kind is RowKind.STEP or row.absent:
            continue  # the step comes last, in bold; an absent phase is one this measurement does not have
        if row.kind is RowKind.RESIDUAL:
            lines.append(f"| residual | {row.before_ms} | {row.after_ms} | — | {row.share_text} | "
                         "not attributed to a phase |")
            continue
        change, flag = row.change, ""
        if row.tested is False:
            flag = "not tested (too small a share)"
        elif row.direction is not None:
            change, flag = f"**{change}**", f"⚠️ {row.direction} (q={row.q_value:.2g})"
        if row.gated is not None:
            flag = (flag + "; " if flag else "") + f"gated: {row.gated.value}"
        lines.append(f"| {inline(row.phase)} | {row.before_ms} | {row.after_ms} | {change} | {row.share_text} | {flag} |")
    step = next(r for r in table.rows if r.kind is RowKind.STEP)
    assert step.verdict is not None
    lines.append(f"| **step** | **{step.before_ms}** | **{step.after_ms}** | **{step.change}** | 100% | "
                 f"{step.verdict.value} |")
    return lines


def _counter_value(counter: str, value: float | None) -> str:
    if value is None:
        return "—"
    return _flops(value) if counter == "flops" else _num(value)


def _counted_pair(c: WorkloadComparison) -> str:
    return ("the base side's counted run and the head's" if c.paired
            else "the baseline's counted run and the current one")


def counters_table(c: WorkloadComparison, *, limit: int = 6) -> list[str]:
    """The exact counters that changed between the reference's counted run (the base
    side's, or the baseline's) and the current one (per step), with the operators or
    stack lines behind each, all inert."""
    if c.counters is None:
        if c.counters_note and c.counters_note != NOT_COUNTED:
            return [f"Counters: {inline(c.counters_note)}."]
        return []
    if not c.counters:
        note = f" ({inline(c.counters_note)})" if c.counters_note else ""
        return [f"Counters: no change between {_counted_pair(c)}{note}."]
    before, after = ("base", "head") if c.paired else ("baseline", "current")
    lines = [f"Counters (exact, per step; {_counted_pair(c)}):", "",
             f"| phase | counter | {before} | {after} | what changed |", "|---|---|---:|---:|---|"]
    for ch in sorted(c.counters, key=lambda ch: not ch.failed):
        mark = " ❌" if ch.failed else ""
        shown = ", ".join(code_cell(x) for x in ch.changed[:limit]) + (" …" if len(ch.changed) > limit else "")
        lines.append(f"| {inline(ch.phase)} | {inline(ch.counter)}{mark} | {_counter_value(ch.counter, ch.before)} | "
                     f"{_counter_value(ch.counter, ch.after)} | {shown or inline(ch.reason)} |")
    if c.counters_note:
        lines += ["", f"Counters: {inline(c.counters_note)}."]
    return lines


def noise_line(c: WorkloadComparison, power: float) -> str:
    assert c.time is not None
    est = c.time.estimate
    detect = (f"Smallest slowdown this run could detect: about {percent(c.time.mde, signed=True)} "
              f"(look {c.time.look} of {c.time.looks}, power {power * 100:g}%).")
    if c.paired:
        return (f"Noise: run-to-run variation {percent(est.within_sd_log)} within blocks (block model, "
                f"{est.n_current} head and {est.n_baseline} base repeats, {est.df:g} df); block-to-block "
                f"{percent(est.between_sd_log)}, removed by the design. " + detect)
    day = c.baseline.day_variation if c.baseline is not None else None
    if day is not None:
        day_source = (f"measured on this runner: {day.runs} runs in the history store, {day.first_date} to "
                      f"{day.last_date}; an upper bound, repeat noise included")
        if est.recordings > 1:
            day_source += f", with the {est.recordings} recordings"
    elif est.recordings > 1:
        day_source = f"{est.recordings} recordings"
        if est.between_sd_log_data is not None:
            day_source += f", {percent(est.between_sd_log_data)} seen between them"
    else:
        day_source = "assumed: the baseline has one recording; `perfgate rebaseline --day-history` measures it"
    return (
        f"Noise: run-to-run variation {percent(est.current_sd_log)} in this run "
        f"({est.n_current} repeats), {percent(est.baseline_sd_log)} in the baseline "
        f"({est.n_baseline} repeats); day-to-day {percent(est.between_sd_log)} ({day_source}). " + detect
    )


def memory_line(c: WorkloadComparison, *, plain: bool = False) -> str | None:
    """The memory line, as markdown; ``plain``: as text, for a renderer that escapes it itself."""
    if c.memory is None:
        return None
    text = flatten if plain else inline
    if c.memory.ratio is None or c.current is None or c.baseline is None:
        return f"Memory: {text(c.memory.reason)}."
    base = sorted(c.baseline.peak_memory())
    before = int(base[len(base) // 2]) if base else None
    return (f"Memory ({text(c.current.peak_memory_kind)}): {size(before)} → {size(c.current.peak_memory_bytes)}; "
            f"{text(c.memory.reason)}.")


def _differences_table(c: WorkloadComparison) -> list[str]:
    lines = ["| what differs | baseline | current |", "|---|---|---|"]
    for key, (a, b) in c.differences.items():
        lines.append(f"| {inline(key)} | {code_cell(a)} | {code_cell(b)} |")
    return lines


def _environment_table(c: WorkloadComparison) -> list[str]:
    if not c.environment_differences:
        return []
    lines = ["The two sides ran in different environments (`--base-python`); the difference measured includes "
             "them:", "", "| environment | base | head |", "|---|---|---|"]
    for key, (a, b) in c.environment_differences.items():
        lines.append(f"| {inline(key)} | {code_cell(a)} | {code_cell(b)} |")
    return lines + [""]


def _details(c: WorkloadComparison) -> list[str]:
    lines = ["<details><summary>Details: per-repeat time per step, baseline provenance, environment</summary>", ""]
    if c.current is not None:
        values = ", ".join(ms(v) for v in c.current.per_repeat("step"))
        lines.append(f"- {column_names(c)[1]} time per step of each repeat (ms): {values}")
    if c.baseline is not None:
        for i, rec in enumerate(c.baseline.recordings, 1):
            p = rec.provenance
            commit = (p.commit or "no commit")[:12]
            values = ", ".join(ms(v) for v in rec.values("step"))
            lines.append(f"- baseline recording {i} ({inline(p.date)}, {inline(commit)}, "
                         f"perfgate {inline(p.perfgate_version)}, reason: {inline(p.reason)}): {values}")
    if c.time is not None and c.time.estimate.excluded:
        names = ", ".join(c.time.estimate.excluded_names())
        lines.append("- set aside as outliers (more than the configured robust sds from their run's median): "
                     f"{inline(names)}")
    if c.environment_key:
        lines.append(f"- environment key: {code(c.environment_key)}")
    if c.baseline_path:
        lines.append(f"- baseline file: {code(c.baseline_path)}")
    lines += ["", "</details>"]
    return lines


def _rank_lines(c: WorkloadComparison) -> list[str]:
    """A distributed run: per rank, the flagged phases and those a STRAGGLER label names."""
    headers, rows = flagged_rank_table(c)
    if not rows:
        return []
    return ["", f"Per rank, the medians in ms of the phases flagged or named by STRAGGLER ({len(rows)} ranks; "
                "the table above holds, per step, the slowest rank's):", "",
            "| " + " | ".join(headers) + " |", "|" + "---:|" * len(headers),
            *("| " + " | ".join(inline(cell) for cell in row) + " |" for row in rows)]


def _diagnosis(c: WorkloadComparison) -> list[str]:
    lines = [f"**{inline(label.name)}** ({inline(label.severity)}): {inline(label.evidence)}" for label in c.labels]
    lines += [f"Left out: {inline(note)}." for note in c.left_out]
    return ["Diagnosis: " + "; ".join(lines[:1]), *lines[1:], ""] if lines else []


def _trace_lines(c: WorkloadComparison, trace: TraceOutcome, relative_to: Path | None) -> list[str]:
    """Links to the profiler trace of a regressed workload and the top operators of its moved phases."""
    if trace.result is None:
        message = trace.error.message if trace.error is not None else "no trace"
        return [f"Profiler trace: not taken ({inline(message)})."]
    grew = sorted(((r.current_ms or 0.0) - (r.baseline_ms or 0.0), r.phase) for r in c.phases if r.phase in PHASES)
    flagged = {r.phase for r in c.phases if r.flag is not None and r.flag.flagged
               and r.flag.estimate is not None and r.flag.estimate.ratio > 1}
    moved = [phase for _, phase in reversed(grew) if phase in flagged]  # the largest increase first
    if not moved and grew:
        moved = [grew[-1][1]]  # nothing flagged: the phase that grew the most
    return _trace_markdown(trace.result, moved, relative_to=relative_to)


def _link(label: str, path: Path, relative_to: Path | None) -> str:
    """A link to a trace artifact below ``relative_to``, percent-encoded; any other path is shown, not linked.

    The file names come from the traced run's ``operators.json``: an encoded relative path
    cannot name a scheme or another host, and a name outside the report's folder is not linked.
    """
    if relative_to is not None:
        try:
            relative = path.resolve().relative_to(relative_to.resolve()).as_posix()
        except ValueError:
            pass
        else:
            if relative not in ("", ".") and not relative.startswith("/"):
                return f"[{inline(label)}]({quote(relative, safe='/-._~')})"
    return f"{inline(label)} ({code(path.as_posix())})"


def _operator_rows(phase: PhaseOperators, limit: int) -> list[str]:
    """One phase's top operators by self CPU time (per-step milliseconds), names shown as code."""
    steps = max(phase.ranges, 1)
    device = phase.device_us is not None
    total = phase.operator_self_cpu_us
    header = "| operator | calls/step | self CPU ms/step | share of phase ops |"
    rule = "|---|---:|---:|---:|"
    if device:
        header += " device ms/step |"
        rule += "---:|"
    lines = [header, rule]
    for row in phase.by_self_cpu[:limit]:
        share = f"{row.self_cpu_us / total * 100:.0f}%" if total > 0 else "—"
        line = f"| {code_cell(row.name)} | {row.calls / steps:.3g} | {_trace_ms(row.self_cpu_us / steps)} | {share} |"
        if device:
            line += f" {_trace_ms((row.self_device_us or 0.0) / steps)} |"
        lines.append(line)
    if phase.outside_operators_us > 0:
        line = f"| *(in no operator: Python, sleeps, waits)* | | {_trace_ms(phase.outside_operators_us / steps)} | |"
        lines.append(line + (" |" if device else ""))
    return lines


def _trace_ms(us: float) -> str:
    value = us / 1000.0
    return f"{value:.3g}" if value < 10 else f"{value:.1f}"


def _trace_markdown(result: TraceResult, phases: Sequence[str], *, limit: int = 5,
                    relative_to: Path | None = None) -> list[str]:
    """Links to a traced run's files and the top operators of each regressed phase, in the order given."""
    traces = ", ".join(_link(p.name, p, relative_to) for p in result.traces)
    lines = [
        f"Profiler trace of {inline(result.workload)} (a separate, slower run; not part of the verdict): "
        f"{traces}; {_link('operator table', result.operators_md, relative_to)}.",
    ]
    for phase in phases:
        if phase not in result.table.phases:
            continue
        p = result.table.phase(phase)
        steps = max(p.ranges, 1)
        lines += ["", f"Top operators in {code(phase)} ({_trace_ms(p.wall_us / steps)} ms/step traced):", "",
                  *_operator_rows(p, limit)]
    return lines


def _section(c: WorkloadComparison, power: float, *, details: bool, table: bool,
             trace: TraceOutcome | None = None, relative_to: Path | None = None) -> list[str]:
    lines = [f"### {ICON[c.verdict]} {inline(c.workload)}: {c.verdict.value}", ""]
    design = design_lines(c)
    if design:
        lines += [" ".join(inline(x) for x in design), ""]
    lines += [*_environment_table(c), *_diagnosis(c)]
    lines += [x for line in modes_lines(c) for x in (f"⚠️ {inline(line)}.", "")]
    if c.verdict is Verdict.NO_BASELINE:
        lines += [
            "No baseline in this environment, so nothing was judged. Create one with:",
            "",
            _command(rebaseline_command(c)),
        ]
    elif c.verdict is Verdict.INCOMPARABLE:
        lines += [inline(c.reason), "", *_differences_table(c), "",
                  "Rebaseline if the change is intended:", "", _command(rebaseline_command(c))]
    elif c.verdict is Verdict.ERROR:
        lines += [f"The workload could not be measured or compared: {inline(c.reason)}"]
    else:
        lines.append(inline(c.reason))
        if table:
            lines += ["", *_phase_table(c)]
        lines += ["", *(inline(x) for x in (step_statistics_line(c), sides_line(c), clock_line(c)) if x)]
        lines += _rank_lines(c)
        hints = [PHASE_HINTS[r.phase] for r in c.phases
                 if r.flag is not None and r.flag.flagged and r.phase in PHASE_HINTS]
        if hints:
            lines += ["", *(f"- ⚠️ {h}" for h in hints)]
        lines += ["", noise_line(c, power)]
        where = noise_components_line(c)
        if where:
            lines += ["", inline(where)]
        memory = memory_line(c)
        if memory:
            lines += ["", memory]
        counters = counters_table(c)
        if counters:
            lines += ["", *counters]
        if trace is not None:
            lines += ["", *_trace_lines(c, trace, relative_to)]
        if c.verdict is Verdict.IMPROVED:
            lines += ["", "Faster beyond the threshold: consider recording a new baseline:", "",
                      _command(rebaseline_command(c))]
        if details:
            lines += ["", *_details(c)]
    return lines + [""]


def _footer(outcome: GateOutcome, comparisons: Sequence[WorkloadComparison]) -> list[str]:
    cfg = outcome.config
    lines = ["---", ""]
    judged = [c for c in comparisons if c.device]
    if judged:
        lines.append("Reproduce locally:")
        lines.append("")
        lines += [_command(reproduce_command(c)) for c in judged]
        lines.append("")
        lines.append("After an intended change, rebaseline:")
        lines.append("")
        lines += [_command(rebaseline_command(c)) for c in judged]
        lines.append("")
    judged_count = sum(1 for c in comparisons if c.time is not None)
    if outcome.cost is not None:
        lines += [f"<sub>measuring: {inline(outcome.cost.describe())}</sub>", ""]
    lines.append(
        f"<sub>perfgate {__version__} · α={cfg.alpha:g} one-sided, Holm over {judged_count} judged workload(s), "
        f"{_looks_wording(outcome)} · δ={cfg.delta * 100:g}% · phases flagged by Benjamini–Hochberg at "
        f"q={cfg.phase_q:g} · memory threshold {cfg.memory_threshold * 100:g}%</sub>"
    )
    return lines


def _looks_wording(outcome: GateOutcome) -> str:
    return looks_wording(outcome)


def missing_baseline_consequence(outcome: GateOutcome) -> str:
    """What a missing baseline means for this gate, said the same way in every report."""
    if outcome.config.fail_on_missing_baseline:
        return "this fails the gate (fail_on_missing_baseline)"
    return "they were NOT judged and do not fail the gate"


def _render(outcome: GateOutcome, *, details: bool, passing_tables: bool,
            traces: Mapping[str, TraceOutcome], relative_to: Path | None) -> str:
    comparisons = outcome.comparisons
    lines = [MARKER, f"## {outcome.headline}", ""]
    lines += [_verdict_line(c) for c in comparisons]
    lines.append("")
    missing = outcome.by_verdict(Verdict.NO_BASELINE)
    if missing:
        consequence = missing_baseline_consequence(outcome)
        names = ", ".join(code(c.workload) for c in missing)
        lines += ["> [!WARNING]", f"> **No baseline for {names}**: {consequence}. "
                  "Record one with `perfgate rebaseline`.", ""]
    for c in comparisons:
        show_table = passing_tables or c.verdict is not Verdict.PASS
        lines += _section(c, outcome.config.power, details=details, table=show_table,
                          trace=traces.get(c.workload), relative_to=relative_to)
    lines += _footer(outcome, comparisons)
    return "\n".join(lines) + "\n"


def render_markdown(outcome: GateOutcome, *, limit: int = GITHUB_COMMENT_LIMIT,
                    traces: Mapping[str, TraceOutcome] | None = None, relative_to: Path | None = None) -> str:
    """The report, at most ``limit`` characters.

    ``traces`` holds the profiler traces taken of regressed workloads (``gate
    --trace-on-fail``); links are made relative to ``relative_to``, the report's directory.
    """
    for details, passing_tables in ((True, True), (False, True), (False, False)):
        text = _render(outcome, details=details, passing_tables=passing_tables, traces=traces or {},
                       relative_to=relative_to)
        if len(text) <= limit:
            return text
    note = "\n\n**Report cut to fit the comment limit; the full report is in the job's artifacts.**\n"
    return text[: limit - len(note)].rsplit("\n", 1)[0] + note


def render_workload(outcome: GateOutcome, workload: str) -> str:
    """One workload's section (verdict, phase table, noise, memory), e.g. for a test failure."""
    for c in outcome.comparisons:
        if c.workload == workload:
            return "\n".join(_section(c, outcome.config.power, details=False, table=True))
    raise KeyError(workload)
