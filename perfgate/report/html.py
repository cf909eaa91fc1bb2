"""The HTML report: one self-contained page with the verdicts, the tables and the plots.

The page carries what the markdown report carries (the verdict lines, per workload the
phase table with the change and its confidence interval, the noise and memory lines, what
differs when a baseline is incomparable, the commands to reproduce and to rebaseline)
plus the diagnosis labels, the environment and baseline provenance, and one figure per
workload: for each phase, the per-repeat medians of the baseline beside those of the
current run, with the medians marked. A workload that was not judged shows its current
run alone.

Everything is inline (CSS in a ``<style>`` element, figures as base64 PNG), so the file
can be archived as a CI artifact and opened anywhere; the page needs no JavaScript. Every
piece of text that comes from a result, a baseline or a reason is escaped (``html.escape``
with quotes, so also inside attributes), its control characters dropped and a lone
surrogate replaced, so that writing the page as UTF-8 cannot fail.

Matplotlib is imported only when a figure is drawn, through ``Figure`` and the Agg canvas
(never pyplot), so importing this module stays cheap and rendering works headless.
"""

from __future__ import annotations

import base64
import html
import io
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from perfgate import __version__
from perfgate.compare import NOT_COUNTED, GateOutcome, PhaseRow, WorkloadComparison
from perfgate.decide import Verdict
from perfgate.jsonfile import write_text_atomic
from perfgate.report.markdown import (
    memory_line,
    missing_baseline_consequence,
    noise_line,
    rebaseline_command,
    reproduce_command,
)
from perfgate.report.units import change_ci, ms, percent
from perfgate.report.wording import column_names, design_lines
from perfgate.summary import ROWS
from perfgate.workload import PHASES

if TYPE_CHECKING:
    from matplotlib.figure import Figure

INDEX = "index.html"
FIGURE_DPI = 150
"""Pixels per inch of the embedded PNGs; the page shows them at 100 px per inch, so they
stay sharp on high-density screens."""
PANEL_INCHES = (2.75, 2.6)
MAX_COLUMNS = 4
MIN_SPAN = 0.10
"""A panel's y axis spans at least this fraction of its largest median: a run-to-run noise
of 0.2% must not fill the panel and look like a change."""

BASELINE_COLOUR = "#8c8c8c"
COLOUR = {"neutral": "#1f5fa8", "slower": "#c62828", "faster": "#2e7d32"}
VERDICT_CLASS = {
    Verdict.REGRESSION: "bad",
    Verdict.PASS: "good",
    Verdict.IMPROVED: "better",
    Verdict.INCONCLUSIVE: "open",
    Verdict.INCOMPARABLE: "stop",
    Verdict.NO_BASELINE: "open",
    Verdict.ERROR: "bad",
}

CSS = """
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", "DejaVu Sans", sans-serif; color: #1b1b1b;
       margin: 0 auto; padding: 24px 32px 48px; max-width: 1180px; background: #fff; }
h1 { font-size: 1.5em; margin: 0 0 12px; }
h2 { font-size: 1.2em; margin: 36px 0 8px; padding-top: 12px; border-top: 1px solid #ddd; }
h3 { font-size: 1em; margin: 18px 0 6px; }
code, pre, .cmd { font-family: ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: 0.9em; }
pre.cmd { background: #f5f5f5; border: 1px solid #e2e2e2; border-radius: 4px; padding: 6px 10px;
          white-space: pre-wrap; word-break: break-all; margin: 6px 0; }
.badge { display: inline-block; min-width: 7.5em; text-align: center; font-weight: 600; font-size: 0.85em;
         border-radius: 3px; padding: 1px 6px; margin-right: 6px; color: #fff; vertical-align: baseline; }
.bad { background: #c62828; } .good { background: #2e7d32; } .better { background: #1565c0; }
.open { background: #b26a00; } .stop { background: #6a1b9a; }
ul.verdicts { list-style: none; padding: 0; margin: 0 0 12px; }
ul.verdicts li { margin: 4px 0; overflow-wrap: anywhere; }
.warning { border-left: 4px solid #b26a00; background: #fff6e5; padding: 8px 12px; margin: 12px 0; }
.reason { overflow-wrap: anywhere; }
table { border-collapse: collapse; margin: 8px 0; font-variant-numeric: tabular-nums; }
th, td { border: 1px solid #d7d7d7; padding: 3px 10px; text-align: left; vertical-align: top; }
th { background: #f3f3f3; font-weight: 600; }
td.num, th.num { text-align: right; white-space: nowrap; }
tr.step td { font-weight: 700; background: #fafafa; }
td.flagged { color: #c62828; font-weight: 600; }
td.flagged.faster { color: #2e7d32; }
figure { margin: 12px 0; }
figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { font-size: 0.85em; color: #555; max-width: 1080px; }
.labels li { margin: 2px 0; }
.sev { font-weight: 600; text-transform: uppercase; font-size: 0.8em; }
.sev-critical { color: #c62828; } .sev-warning { color: #b26a00; } .sev-info { color: #555; }
details { margin: 10px 0; } summary { cursor: pointer; color: #333; }
dl.kv { display: grid; grid-template-columns: max-content 1fr; gap: 2px 14px; margin: 6px 0; }
dl.kv dt { color: #555; } dl.kv dd { margin: 0; overflow-wrap: anywhere; }
footer { margin-top: 40px; border-top: 1px solid #ddd; padding-top: 12px; font-size: 0.9em; color: #444; }
""".strip()


_UNSHOWN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _e(text: object) -> str:
    """``text`` as HTML text or attribute value: escaped, control characters (not tab or line breaks) dropped."""
    s = _SURROGATE.sub("\ufffd", str(text))
    return html.escape(_UNSHOWN.sub("", s), quote=True)


# ---------------------------------------------------------------------------- figures


@dataclass(frozen=True)
class Panel:
    """One phase of one workload's figure: the per-repeat medians of both sides."""

    row: str
    current: tuple[float, ...]
    baseline: tuple[tuple[float, ...], ...]
    """Per baseline recording, its repeats' medians; empty when there is no baseline to show."""
    subtitle: str
    tone: str
    """``neutral``, ``slower`` or ``faster``: the colour of the current run's points."""
    excluded_current: frozenset[int] = frozenset()
    excluded_baseline: frozenset[tuple[int, int]] = frozenset()


def _tone(ratio: float) -> str:
    return "slower" if ratio > 1 else "faster"


def _plotted_rows(c: WorkloadComparison) -> list[str]:
    """The rows the table shows: a phase that is zero on both sides (a micro-benchmark's) is left out."""
    if c.time is not None:
        return [r.phase for r in c.phases if not (r.baseline_ms == 0 and r.current_ms == 0)]
    assert c.current is not None
    if all(v == 0 for p in PHASES for v in c.current.per_repeat(p)):
        return ["step"]
    return list(ROWS)


def panels(c: WorkloadComparison) -> list[Panel]:
    """What one workload's figure shows: for a judged workload both sides, otherwise the current run alone."""
    if c.current is None:
        return []
    rows = {r.phase: r for r in c.phases}
    out = []
    for name in _plotted_rows(c):
        current = tuple(c.current.per_repeat(name))
        if c.time is None or c.baseline is None:
            out.append(Panel(name, current, (), f"this run only, {len(current)} repeat(s)", "neutral"))
            continue
        baseline = tuple(tuple(rec.medians(name)) for rec in c.baseline.recordings)
        row: PhaseRow | None = rows.get(name)
        est = c.time.estimate if name == "step" else (row.flag.estimate if row and row.flag else None)
        subtitle, tone = "not attributed to a phase" if name == "residual" else "no estimate", "neutral"
        if est is not None:
            subtitle = change_ci(est.ratio, est.ci_low, est.ci_high)
            if name == "step" and c.time.verdict in (Verdict.REGRESSION, Verdict.IMPROVED):
                tone = _tone(est.ratio)
            elif name != "step" and row is not None and row.flag is not None and row.flag.flagged:
                tone = _tone(est.ratio)
        out.append(Panel(name, current, baseline, subtitle, tone,
                         frozenset(),
                         frozenset(est.excluded_baseline) if est else frozenset()))
    return out


def _spread(n: int, centre: float, width: float) -> list[float]:
    """``n`` positions evenly over ``width`` around ``centre``: repeats left to right in run order."""
    if n == 1:
        return [centre]
    return [centre - width / 2 + width * i / (n - 1) for i in range(n)]


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _scatter(ax, points: Sequence[tuple[float, float, bool]], colour: str, size: float) -> None:  # noqa: ANN001
    """One collection per fill, not one per point: a figure draws hundreds of repeats."""
    for hollow in (False, True):
        chosen = [(x, y) for x, y, h in points if h is hollow]
        if chosen:
            ax.scatter([x for x, _ in chosen], [y for _, y in chosen], s=size, marker="o", linewidths=1, zorder=3,
                       facecolors="none" if hollow else colour, edgecolors=colour)


def _draw(ax, panel: Panel) -> None:  # noqa: ANN001 - a matplotlib Axes, imported lazily
    colour = COLOUR[panel.tone]
    strips: list[tuple[str, float, float]] = []  # (label, position, median)
    values = list(panel.current)
    if panel.baseline:
        flat = [v for rec in panel.baseline for v in rec]
        values += flat
        band = 0.62 / len(panel.baseline)
        points = []
        for j, rec in enumerate(panel.baseline):
            xs = _spread(len(rec), -0.31 + band * (j + 0.5), band * 0.7)
            points += [(x, y, (j, i) in panel.excluded_baseline) for i, (x, y) in enumerate(zip(xs, rec))]
        _scatter(ax, points, BASELINE_COLOUR, 16)
        strips.append(("baseline", 0.0, _median(flat)))
    x_current = 1.0 if panel.baseline else 0.0
    xs = _spread(len(panel.current), x_current, 0.5)
    _scatter(ax, [(x, y, i in panel.excluded_current) for i, (x, y) in enumerate(zip(xs, panel.current))],
             colour, 20)
    strips.append(("current", x_current, _median(panel.current)))
    for label, x, med in strips:
        ax.hlines(med, x - 0.4, x + 0.4, colors="#000000" if label == "current" else "#555555",
                  linewidth=2, zorder=4)
    ax.set_xticks([x for _, x, _ in strips])
    ax.set_xticklabels([f"{label}\n{ms(med)} ms" for label, _, med in strips], fontsize=8.5)
    ax.set_xlim(-0.6, x_current + 0.6)
    lo, hi = min(values), max(values)
    need = MIN_SPAN * max(abs(med) for _, _, med in strips) or 1e-3
    if hi - lo < need:
        mid = (hi + lo) / 2
        lo, hi = mid - need / 2, mid + need / 2
    pad = (hi - lo) * 0.08
    ax.set_ylim(lo - pad, hi + pad)
    ax.ticklabel_format(axis="y", style="plain", useOffset=False)
    ax.tick_params(axis="y", labelsize=8)
    ax.grid(axis="y", color="#e6e6e6", linewidth=0.8, zorder=0)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    ax.set_title(panel.row, fontsize=10, fontweight="bold", loc="left", pad=14)
    ax.text(0.0, 1.02, panel.subtitle, transform=ax.transAxes, fontsize=8, va="bottom", ha="left",
            color=colour if panel.tone != "neutral" else "#444444")


def workload_figure(c: WorkloadComparison) -> Figure | None:
    """One figure per workload, one panel per phase (and the residual and the step); None without a current run."""
    shown = panels(c)
    if not shown:
        return None
    from matplotlib.figure import Figure  # imported here: the CLI must not pay for matplotlib

    columns = min(MAX_COLUMNS, len(shown))
    rows = math.ceil(len(shown) / columns)
    fig = Figure(figsize=(PANEL_INCHES[0] * columns, PANEL_INCHES[1] * rows), layout="constrained")
    axes = fig.subplots(rows, columns, squeeze=False)
    for k, ax in enumerate(axes.flat):
        if k < len(shown):
            _draw(ax, shown[k])
            if k % columns == 0:
                ax.set_ylabel("median of the repeat, ms", fontsize=8)
        else:
            ax.set_axis_off()
    return fig


def figure_png(fig: Figure) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=FIGURE_DPI, metadata={"Software": None}, facecolor="white")
    return buffer.getvalue()


def _figure_html(c: WorkloadComparison) -> list[str]:
    fig = workload_figure(c)
    if fig is None:
        return []
    width, height = (round(v * 100) for v in fig.get_size_inches())
    data = base64.b64encode(figure_png(fig)).decode("ascii")
    shown = panels(c)
    judged = any(p.baseline for p in shown)
    alt = (f"{c.workload}: per-repeat medians of " + ", ".join(p.row for p in shown)
           + (", baseline beside current" if judged else ", current run only (no baseline to compare with)"))
    if judged:
        caption = ("Each point is one repeat's median time of the phase; grey: the baseline (its recordings "
                   "side by side, oldest first), coloured: this run (red when the phase is flagged slower or the "
                   "step regressed, green when faster). Points run left to right in the order they were measured; "
                   "the black bars mark the medians; hollow points were set aside as outliers. Each panel has its "
                   f"own linear scale, at least {MIN_SPAN * 100:g}% of its median tall.")
    else:
        caption = ("This run alone: nothing to compare it with. Each point is one repeat's median time of the "
                   "phase, in the order measured; the bar marks the median.")
    return [f'<figure><img src="data:image/png;base64,{data}" width="{width}" height="{height}" alt="{_e(alt)}">',
            f"<figcaption>{_e(caption)}</figcaption></figure>"]


# ---------------------------------------------------------------------------- page


def _badge(verdict: Verdict) -> str:
    return f'<span class="badge {VERDICT_CLASS[verdict]}">{_e(verdict.value)}</span>'


def _anchor(index: int) -> str:
    return f"workload-{index + 1}"


def _phase_cells(c: WorkloadComparison, row: PhaseRow) -> tuple[str, str, str]:
    """The change, the flag and the flag cell's class, worded as in the markdown report."""
    flag = row.flag
    change, mark, css = "—", "", ""
    if flag is not None and flag.estimate is not None:
        est = flag.estimate
        change = change_ci(est.ratio, est.ci_low, est.ci_high)
        if not flag.tested:
            mark = "not tested (too small a share)"
        elif flag.flagged:
            direction = "slower" if est.ratio > 1 else "faster"
            mark = f"{direction} (q={flag.q_value:.2g})"
            css = "flagged" + ("" if direction == "slower" else " faster")
    gated = c.gated.get(row.phase)
    if gated is not None:
        mark = (mark + "; " if mark else "") + f"gated: {gated.verdict.value}"
    return change, mark, css


def _phase_table(c: WorkloadComparison) -> list[str]:
    assert c.time is not None
    before, after = column_names(c)
    lines = ['<table class="phases"><thead><tr><th>phase</th>'
             f'<th class="num">{before} ms</th>'
             f'<th class="num">{after} ms</th><th class="num">change (95% CI)</th><th class="num">share</th>'
             "<th>flag</th></tr></thead><tbody>"]
    for row in c.phases:
        if row.baseline_ms == 0 and row.current_ms == 0:
            continue  # a phase this kind of measurement does not have
        css = ""
        if row.phase == "step":
            est = c.time.estimate
            change, mark, share = change_ci(est.ratio, est.ci_low, est.ci_high), c.time.verdict.value, "100%"
            css = ' class="step"'
            flag_css = ""
        elif row.phase == "residual":
            change, mark, flag_css, share = "—", "not attributed to a phase", "", percent(row.share)
        else:
            change, mark, flag_css = _phase_cells(c, row)
            share = percent(row.share)
        cls = f' class="{flag_css}"' if flag_css else ""
        lines.append(f"<tr{css}><td>{_e(row.phase)}</td><td class=\"num\">{_e(ms(row.baseline_ms))}</td>"
                     f"<td class=\"num\">{_e(ms(row.current_ms))}</td><td class=\"num\">{_e(change)}</td>"
                     f"<td class=\"num\">{_e(share)}</td><td{cls}>{_e(mark)}</td></tr>")
    lines.append("</tbody></table>")
    return lines


def _current_line(c: WorkloadComparison) -> list[str]:
    s = c.current
    if s is None:
        return []
    parts = [f"{len(s.repeats)} repeat(s) × {s.steps} steps on {s.device}",
             f"throughput {s.samples_per_s:.1f} samples/s"]
    if s.device_busy_fraction is not None:
        parts.append(f"device busy {percent(s.device_busy_fraction)} of the window")
    return [f"<p>This run: {_e(', '.join(parts))}.</p>"]


def _labels(c: WorkloadComparison) -> list[str]:
    if not c.labels:
        return []
    lines = ["<h3>Diagnosis</h3>", '<ul class="labels">']
    for label in c.labels:
        lines.append(f'<li><strong>{_e(label.name)}</strong> <span class="sev sev-{_e(label.severity)}">'
                     f"{_e(label.severity)}</span>: {_e(label.evidence)}</li>")
    return lines + ["</ul>"]


def _left_out(c: WorkloadComparison) -> list[str]:
    return [f'<p class="warning">{_e(line)}</p>' for line in c.left_out]


def _differences_table(c: WorkloadComparison) -> list[str]:
    lines = ["<table><thead><tr><th>what differs</th><th>baseline</th><th>current</th></tr></thead><tbody>"]
    for key, (a, b) in c.differences.items():
        lines.append(f"<tr><td>{_e(key)}</td><td><code>{_e(a)}</code></td><td><code>{_e(b)}</code></td></tr>")
    return lines + ["</tbody></table>"]


def _counters(c: WorkloadComparison) -> list[str]:
    """The exact counters that changed (per step), failing ones marked; or why there are none."""
    if c.counters is None:
        if c.counters_note and c.counters_note != NOT_COUNTED:
            return [f"<p>Counters: {_e(c.counters_note)}.</p>"]
        return []
    pair = ("the base side's counted run and the head's" if c.paired
            else "the baseline's counted run and the current one")
    if not c.counters:
        return [f"<p>Counters: no change between {pair}.</p>"]
    before, after = ("base", "head") if c.paired else ("baseline", "current")
    lines = [f"<p>Counters (exact, per step; {pair}):</p>",
             f"<table><thead><tr><th>phase</th><th>counter</th><th>{before}</th><th>{after}</th>"
             "<th>what changed</th></tr></thead><tbody>"]
    for ch in sorted(c.counters, key=lambda ch: not ch.failed):
        cell = lambda v: "—" if v is None else _e(f"{v:g}")  # noqa: E731
        shown = ", ".join(f"<code>{_e(x)}</code>" for x in ch.changed[:6]) or _e(ch.reason)
        lines.append(f"<tr><td>{_e(ch.phase)}</td><td>{_e(ch.counter)}{' ❌' if ch.failed else ''}</td>"
                     f"<td>{cell(ch.before)}</td><td>{cell(ch.after)}</td><td>{shown}</td></tr>")
    lines.append("</tbody></table>")
    if c.counters_note:
        lines.append(f"<p>Counters: {_e(c.counters_note)}.</p>")
    return lines


def _kv(pairs: Sequence[tuple[str, object]]) -> list[str]:
    lines = ['<dl class="kv">']
    lines += [f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in pairs if v not in (None, "")]
    return lines + ["</dl>"]


def _details(c: WorkloadComparison) -> list[str]:
    """Per-repeat step medians, the current run's identity, the baseline's recordings and environment."""
    lines = ["<details><summary>Details: per-repeat step medians, environment, baseline provenance</summary>"]
    current: list[tuple[str, object]] = [("environment key", c.environment_key), ("device", c.device)]
    if c.overrides:
        current.append(("overrides", " ".join(f"{k}={v}" for k, v in sorted(c.overrides.items()))))
    if c.current is not None:
        current.append(("step medians (ms)", ", ".join(ms(v) for v in c.current.per_repeat("step"))))
        current.append(("peak memory kind", c.current.peak_memory_kind))
    lines += ["<h3>This run</h3>", *_kv(current)]
    if c.time is not None and c.time.estimate.excluded:
        names = ", ".join(c.time.estimate.excluded_names())
        lines.append(f"<p>Set aside as outliers (more than the configured robust sds from their run's median): "
                     f"{_e(names)}</p>")
    if c.baseline is not None:
        title = "Baseline" if c.time is not None else "Closest baseline (not comparable)"
        lines += [f"<h3>{title}</h3>", *_kv([("file", c.baseline_path), ("environment key", c.baseline.environment_key),
                                           ("workload version", c.baseline.workload_version)])]
        lines.append("<table><thead><tr><th>recording</th><th>date</th><th>commit</th><th>perfgate</th>"
                     "<th>reason</th><th>CI run</th><th>step medians (ms)</th></tr></thead><tbody>")
        for i, rec in enumerate(c.baseline.recordings, 1):
            p = rec.provenance
            commit = (p.commit or "no commit")[:12] + (" (modified)" if p.dirty else "")
            ci_run = p.ci_run_url or p.ci_run_id or "—"  # shown as text: the page links nowhere outside itself
            lines.append(f"<tr><td class=\"num\">{i}</td><td>{_e(p.date)}</td><td><code>{_e(commit)}</code></td>"
                         f"<td>{_e(p.perfgate_version)}</td><td>{_e(p.reason)}</td><td>{_e(ci_run)}</td>"
                         f"<td>{_e(', '.join(ms(v) for v in rec.medians('step')))}</td></tr>")
        lines.append("</tbody></table>")
        env = c.baseline.recordings[-1].environment
        lines += ["<h3>Baseline environment (latest recording)</h3>", *_kv([
            ("device", env.device), ("GPU", env.gpu_name), ("driver", env.gpu_driver), ("CUDA", env.cuda),
            ("cuDNN", env.cudnn), ("torch", env.torch), ("torchvision", env.torchvision), ("Python", env.python),
            ("CPU", f"{env.cpu_model} ({env.cpu_count} cores)"), ("OS", env.os)])]
    elif c.baseline_path:
        lines += ["<h3>Baseline</h3>", *_kv([("expected at", c.baseline_path)])]
    return lines + ["</details>"]


def _section(c: WorkloadComparison, index: int, power: float) -> list[str]:
    lines = [f'<section id="{_anchor(index)}">', f"<h2>{_badge(c.verdict)} {_e(c.workload)}</h2>"]
    lines += [f'<p class="design">{_e(line)}</p>' for line in design_lines(c)]
    if c.environment_differences:
        lines.append("<p>The two sides ran in different environments (--base-python); the difference measured "
                     "includes them:</p>")
        lines += _kv([(f"{k} (base → head)", f"{a} → {b}") for k, (a, b) in c.environment_differences.items()])
    if c.verdict is Verdict.NO_BASELINE:
        lines += ["<p>No baseline in this environment, so nothing was judged. Create one with:</p>",
                  f'<pre class="cmd">{_e(rebaseline_command(c))}</pre>']
    elif c.verdict is Verdict.INCOMPARABLE:
        lines += [f'<p class="reason">{_e(c.reason)}</p>', *_differences_table(c),
                  "<p>Rebaseline if the change is intended:</p>", f'<pre class="cmd">{_e(rebaseline_command(c))}</pre>']
    elif c.verdict is Verdict.ERROR:
        lines.append(f'<p class="reason">The workload could not be measured or compared: {_e(c.reason)}</p>')
    else:
        lines.append(f'<p class="reason">{_e(c.reason)}</p>')
    lines += _left_out(c)
    lines += _figure_html(c)
    if c.time is not None:
        lines += _phase_table(c)
        lines.append(f"<p>{_e(noise_line(c, power))}</p>")
        memory = memory_line(c, plain=True)
        if memory:
            lines.append(f"<p>{_e(memory)}</p>")
        lines += _counters(c)
        if c.verdict is Verdict.IMPROVED:
            lines += ["<p>Faster beyond the threshold: consider recording a new baseline:</p>",
                      f'<pre class="cmd">{_e(rebaseline_command(c))}</pre>']
    lines += _current_line(c) if c.time is None else []
    lines += _labels(c)
    if c.current is not None or c.baseline is not None or c.baseline_path:
        lines += _details(c)
    return lines + ["</section>"]


def _footer(outcome: GateOutcome) -> list[str]:
    cfg = outcome.config
    lines = ["<footer>"]
    runnable = [c for c in outcome.comparisons if c.device]
    if runnable:
        lines.append("<p>Reproduce locally:</p>")
        lines.append(f'<pre class="cmd">{_e(chr(10).join(reproduce_command(c) for c in runnable))}</pre>')
        lines.append("<p>After an intended change, rebaseline:</p>")
        lines.append(f'<pre class="cmd">{_e(chr(10).join(rebaseline_command(c) for c in runnable))}</pre>')
    judged = sum(1 for c in outcome.comparisons if c.time is not None)
    lines.append(
        f"<p>perfgate {_e(__version__)} · α={cfg.alpha:g} one-sided, Holm over {judged} judged workload(s), "
        f"split over {cfg.looks} look(s) · δ={cfg.delta * 100:g}% · phases flagged by Benjamini–Hochberg at "
        f"q={cfg.phase_q:g} · memory threshold {cfg.memory_threshold * 100:g}%</p>"
    )
    return lines + ["</footer>"]


def render_html(outcome: GateOutcome) -> str:
    """The whole report as one self-contained HTML page (inline CSS, figures as base64 PNG)."""
    comparisons = outcome.comparisons
    lines = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             f"<title>{_e(outcome.headline)}</title>", f"<style>\n{CSS}\n</style>", "</head>", "<body>",
             f"<h1>{_e(outcome.headline)}</h1>", '<ul class="verdicts">']
    for i, c in enumerate(comparisons):
        lines.append(f'<li>{_badge(c.verdict)} <a href="#{_anchor(i)}"><strong>{_e(c.workload)}</strong></a>: '
                     f'<span class="reason">{_e(c.reason)}</span></li>')
    lines.append("</ul>")
    missing = outcome.by_verdict(Verdict.NO_BASELINE)
    if missing:
        consequence = missing_baseline_consequence(outcome)
        names = ", ".join(f"<code>{_e(c.workload)}</code>" for c in missing)
        lines.append(f'<p class="warning"><strong>No baseline for {names}</strong>: {_e(consequence)}. '
                     "Record one with <code>perfgate rebaseline</code>.</p>")
    for i, c in enumerate(comparisons):
        lines += _section(c, i, outcome.config.power)
    lines += _footer(outcome)
    lines += ["</body>", "</html>"]
    return "\n".join(lines) + "\n"


def write_html(outcome: GateOutcome, directory: Path) -> Path:
    """Write ``directory/index.html`` atomically (rendered first, then a temporary file renamed into place)."""
    text = render_html(outcome)  # a rendering error must not leave a partial page
    path = directory / INDEX
    write_text_atomic(path, text)
    return path
