"""The HTML report: one self-contained page with the verdicts, the tables and the plots.

The page carries what the markdown report carries (the verdict lines, per workload the
phase table with the change and its confidence interval, the noise and memory lines, what
differs when a baseline is incomparable, the commands to reproduce and to rebaseline)
plus the diagnosis labels, the environment and baseline provenance, and one figure per
workload: for each phase, the per-repeat medians of the baseline beside those of the
current run, with the medians marked. A workload that was not judged shows its current
run alone.

Everything is inline (CSS in a ``<style>`` element, figures as base64 PNG), so the file
can be archived as a CI artifact and opened anywhere; the page needs no JavaScript. The
markup is a jinja2 template (``perfgate/report/templates/page.html.j2``) rendered with
autoescaping, so every piece of text that comes from a result, a baseline or a reason is
escaped (quotes too, so also inside attributes); the environment's ``finalize`` hook
drops control characters and replaces a lone surrogate first, so that writing the page as
UTF-8 cannot fail. Only the CSS is marked safe.

Matplotlib is imported only when a figure is drawn, through ``Figure`` and the Agg canvas
(never pyplot), so importing this module stays cheap and rendering works headless.
"""

from __future__ import annotations

import base64
import functools
import io
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import jinja2
from markupsafe import Markup

from perfgate.analysis.counted import NOT_COUNTED
from perfgate.analysis.outcome import GateOutcome, PhaseRow, WorkloadComparison
from perfgate.analysis.stats.logratio import LogRatio
from perfgate.model.repeat import PER_STEP
from perfgate.model.result import ROWS
from perfgate.model.verdict import POLICY, Verdict
from perfgate.model.version import __version__
from perfgate.model.workload import PHASES
from perfgate.report.markdown import (
    memory_line,
    missing_baseline_consequence,
    noise_line,
    rebaseline_command,
    reproduce_command,
)
from perfgate.report.phase_table import PhaseTable, RowKind, TableRow, flagged_rank_table, phase_table
from perfgate.report.sides import row_sides
from perfgate.report.wording import (
    clock_line,
    column_names,
    design_lines,
    looks_wording,
    modes_lines,
    sides_line,
    step_estimate,
    step_statistics_line,
)
from perfgate.text.units import change_ci, ms, percent

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
VERDICT_CLASS = {v: POLICY[v].css_class for v in Verdict}
"""Each verdict's CSS class (``perfgate.model.verdict.POLICY``; the colours are in :data:`CSS`)."""

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
    levels: tuple[float, float] | None = None
    """The two sides the subtitle's estimate compares (``perfgate.report.sides``: the baseline's
    geometric mean as the estimate weighs it, and that × the estimated ratio), marked by the
    bars; None (no estimate): the bars mark the medians of the points."""


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
        baseline = tuple(tuple(rec.values(name)) for rec in c.baseline.recordings)
        row: PhaseRow | None = rows.get(name)
        est: LogRatio | None
        if name == "step":  # the step row's estimate, as the phase table shows it
            per_step = step_estimate(c)
            est, statistic = per_step or c.time.estimate, PER_STEP if per_step is not None else c.time.statistic
        else:
            est, statistic = (row.flag.estimate if row and row.flag else None), PER_STEP
        subtitle, tone = "not attributed to a phase" if name == "residual" else "no estimate", "neutral"
        levels = None
        if est is not None:
            subtitle = change_ci(est.ratio, est.ci_low, est.ci_high)
            if name == "step" and c.time.verdict in (Verdict.REGRESSION, Verdict.IMPROVED):
                tone = _tone(est.ratio)
            elif name != "step" and row is not None and row.flag is not None and row.flag.flagged:
                tone = _tone(est.ratio)
            shown = row_sides(c, name, statistic, est)
            levels = None if shown is None else (shown.before, shown.after)
        out.append(Panel(name, current, baseline, subtitle, tone,
                         frozenset(),
                         frozenset(est.excluded_baseline) if est else frozenset(), levels))
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
            points += [(x, y, (j, i) in panel.excluded_baseline) for i, (x, y) in enumerate(zip(xs, rec, strict=True))]
        _scatter(ax, points, BASELINE_COLOUR, 16)
        strips.append(("baseline", 0.0, panel.levels[0] if panel.levels else _median(flat)))
    x_current = 1.0 if panel.baseline else 0.0
    xs = _spread(len(panel.current), x_current, 0.5)
    _scatter(ax, [(x, y, i in panel.excluded_current) for i, (x, y) in enumerate(zip(xs, panel.current, strict=True))],
             colour, 20)
    strips.append(("current", x_current, panel.levels[1] if panel.levels and panel.baseline else _median(panel.current)))
    for label, x, med in strips:
        ax.hlines(med, x - 0.4, x + 0.4, colors="#000000" if label == "current" else "#555555",
                  linewidth=2, zorder=4)
    ax.set_xticks([x for _, x, _ in strips])
    ax.set_xticklabels([f"{label}\n{ms(med)} ms" for label, _, med in strips], fontsize=8.5)
    ax.set_xlim(-0.6, x_current + 0.6)
    lo, hi = min(values + [med for _, _, med in strips]), max(values + [med for _, _, med in strips])
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
                ax.set_ylabel("time per step of the repeat, ms", fontsize=8)
        else:
            ax.set_axis_off()
    return fig


def figure_png(fig: Figure) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=FIGURE_DPI, metadata={"Software": None}, facecolor="white")
    return buffer.getvalue()


def _figure(c: WorkloadComparison) -> dict[str, object] | None:
    fig = workload_figure(c)
    if fig is None:
        return None
    width, height = (round(v * 100) for v in fig.get_size_inches())
    data = base64.b64encode(figure_png(fig)).decode("ascii")
    shown = panels(c)
    judged = any(p.baseline for p in shown)
    alt = (f"{c.workload}: per-repeat medians of " + ", ".join(p.row for p in shown)
           + (", baseline beside current" if judged else ", current run only (no baseline to compare with)"))
    if judged:
        caption = ("Each point is one repeat's time per step of the phase; grey: the baseline (its recordings "
                   "side by side, oldest first), coloured: this run (red when the phase is flagged slower or the "
                   "step regressed, green when faster). Points run left to right in the order they were measured; "
                   "the bars mark the two sides the panel's estimate compares (the baseline's geometric mean, weighed as "
                   "the estimate weighs its repeats, and that × the estimated change; the medians where a panel has "
                   "no estimate); hollow points were set aside as outliers. Each panel has its "
                   f"own linear scale, at least {MIN_SPAN * 100:g}% of its median tall.")
    else:
        caption = ("This run alone: nothing to compare it with. Each point is one repeat's time per step of the "
                   "phase, in the order measured; the bar marks the median.")
    return {"data": data, "width": width, "height": height, "alt": alt, "caption": caption}


# ---------------------------------------------------------------------------- page
#
# The page is perfgate/report/templates/page.html.j2, rendered by jinja2 with
# autoescaping; the functions below only turn a comparison into plain values for it.


def _verdict(verdict: Verdict) -> dict[str, str]:
    return {"name": verdict.value, "css": VERDICT_CLASS[verdict]}


def _anchor(index: int) -> str:
    return f"workload-{index + 1}"


def _phase_cells(row: TableRow) -> tuple[str, str, str]:
    """The change, the flag and the flag cell's class, worded as in the markdown report."""
    mark, css = "", ""
    if row.tested is False:
        mark = "not tested (too small a share)"
    elif row.direction is not None:
        mark = f"{row.direction} (q={row.q_value:.2g})"
        css = "flagged" + ("" if row.direction == "slower" else " faster")
    if row.gated is not None:
        mark = (mark + "; " if mark else "") + f"gated: {row.gated.value}"
    return row.change, mark, css


def _phase_rows(table: PhaseTable) -> list[dict[str, object]]:
    rows = []
    for row in table.rows:
        if row.absent:
            continue  # a phase this kind of measurement does not have
        if row.kind is RowKind.STEP:
            assert row.verdict is not None
            change, mark, css, share = row.change, row.verdict.value, "", "100%"
        elif row.kind is RowKind.RESIDUAL:
            change, mark, css, share = "—", "not attributed to a phase", "", row.share_text
        else:
            change, mark, css = _phase_cells(row)
            share = row.share_text
        rows.append({"phase": row.phase, "before": row.before_ms, "after": row.after_ms,
                     "change": change, "share": share, "mark": mark, "css": css, "step": row.kind is RowKind.STEP})
    return rows


def _current_line(c: WorkloadComparison) -> str | None:
    s = c.current
    if s is None:
        return None
    parts = [f"{len(s.repeats)} repeat(s) × {s.steps} steps on {s.device}",
             f"throughput {s.samples_per_s:.1f} samples/s"]
    if s.device_busy_fraction is not None:
        parts.append(f"device busy {percent(s.device_busy_fraction)} of the window")
    return ", ".join(parts)


def _counters(c: WorkloadComparison) -> dict[str, object]:
    """The exact counters that changed (per step), failing ones first; or why there are none."""
    pair = ("the base side's counted run and the head's" if c.paired
            else "the baseline's counted run and the current one")
    out: dict[str, object] = {"note_only": None, "unchanged": False, "rows": [], "pair": pair,
                              "note": c.counters_note, "columns": ("base", "head") if c.paired else ("baseline", "current")}
    if c.counters is None:
        out["note_only"] = c.counters_note if c.counters_note and c.counters_note != NOT_COUNTED else None
    elif not c.counters:
        out["unchanged"] = True
    else:
        value = lambda v: "—" if v is None else f"{v:g}"  # noqa: E731
        out["rows"] = [{"phase": ch.phase, "counter": ch.counter, "failed": ch.failed, "before": value(ch.before),
                        "after": value(ch.after), "changed": list(ch.changed[:6]), "reason": ch.reason}
                       for ch in sorted(c.counters, key=lambda ch: not ch.failed)]
    return out


def _kv(pairs: Sequence[tuple[str, object]]) -> list[tuple[str, object]]:
    return [(k, v) for k, v in pairs if v not in (None, "")]


def _details(c: WorkloadComparison) -> dict[str, object] | None:
    """Per-repeat step medians, the current run's identity, the baseline's recordings and environment."""
    if c.current is None and c.baseline is None and not c.baseline_path:
        return None
    current: list[tuple[str, object]] = [("environment key", c.environment_key), ("device", c.device)]
    if c.overrides:
        current.append(("overrides", " ".join(f"{k}={v}" for k, v in sorted(c.overrides.items()))))
    if c.current is not None:
        current.append(("step medians (ms)", ", ".join(ms(v) for v in c.current.per_repeat("step"))))
        current.append(("peak memory kind", c.current.peak_memory_kind))
    details: dict[str, object] = {"current": _kv(current), "baseline": None, "expected_at": None, "excluded": None}
    if c.time is not None and c.time.estimate.excluded:
        details["excluded"] = ", ".join(c.time.estimate.excluded_names())
    if c.baseline is not None:
        recordings = []
        for rec in c.baseline.recordings:
            p = rec.provenance
            recordings.append({
                "date": p.date, "commit": (p.commit or "no commit")[:12] + (" (modified)" if p.dirty else ""),
                "perfgate": p.perfgate_version, "reason": p.reason,
                "ci_run": p.ci_run_url or p.ci_run_id or "—",  # text: the page links nowhere outside itself
                "steps": ", ".join(ms(v) for v in rec.values("step"))})
        env = c.baseline.recordings[-1].environment
        details["baseline"] = {
            "title": "Baseline" if c.time is not None else "Closest baseline (not comparable)",
            "facts": _kv([("file", c.baseline_path), ("environment key", c.baseline.environment_key),
                          ("workload version", c.baseline.workload_version)]),
            "recordings": recordings,
            "environment": _kv([
                ("device", env.device), ("GPU", env.gpu_name), ("driver", env.gpu_driver), ("CUDA", env.cuda),
                ("cuDNN", env.cudnn), ("torch", env.torch), ("torchvision", env.torchvision),
                ("Python", env.python), ("CPU", f"{env.cpu_model} ({env.cpu_count} cores)"), ("OS", env.os)]),
        }
    elif c.baseline_path:
        details["expected_at"] = c.baseline_path
    return details


_KIND = {Verdict.NO_BASELINE: "no_baseline", Verdict.INCOMPARABLE: "incomparable", Verdict.ERROR: "error"}


def _section(c: WorkloadComparison, index: int, power: float) -> dict[str, object]:
    judged = c.time is not None
    return {
        "anchor": _anchor(index),
        "workload": c.workload,
        "verdict": _verdict(c.verdict),
        "reason": c.reason,
        "headline": c.headline,
        "kind": _KIND.get(c.verdict, "judged"),
        "design_lines": list(design_lines(c)),
        "environment_differences": _kv([(f"{k} (base → head)", f"{a} → {b}")
                                        for k, (a, b) in c.environment_differences.items()]),
        "rebaseline": rebaseline_command(c) if c.verdict in (Verdict.NO_BASELINE, Verdict.INCOMPARABLE,
                                                             Verdict.IMPROVED) else None,
        "differences": [(k, a, b) for k, (a, b) in c.differences.items()],
        "left_out": list(c.left_out),
        "modes": modes_lines(c),
        "figure": _figure(c),
        "judged": judged,
        "columns": column_names(c) if judged else None,
        "phase_headers": phase_table(c).headers if judged else None,
        "phase_rows": _phase_rows(phase_table(c)) if judged else [],
        "statistics": step_statistics_line(c) if judged else None,
        "sides": sides_line(c) if judged else None,
        "clocks": clock_line(c),
        "noise": noise_line(c, power) if judged else None,
        "memory": memory_line(c, plain=True) if judged else None,
        "counters": _counters(c),
        "improved": c.verdict is Verdict.IMPROVED,
        "current_line": None if judged else _current_line(c),
        "labels": [{"name": label.name, "severity": label.severity, "evidence": label.evidence} for label in c.labels],
        "rank_table": dict(zip(("headers", "rows"), flagged_rank_table(c), strict=True)) if judged else None,
        "details": _details(c),
    }


def _clean(value: object) -> object:
    """Every value the template prints: control characters (not tab or line breaks)
    dropped and lone surrogates replaced, before autoescaping; markup passes untouched."""
    if value is None or isinstance(value, Markup):
        return "" if value is None else value
    return _UNSHOWN.sub("", _SURROGATE.sub("\ufffd", str(value)))


@functools.lru_cache(maxsize=4)
def page_template(name: str, finalize: Callable[[object], object]) -> jinja2.Template:
    """A template of ``perfgate/report/templates``, rendered with autoescaping and a missing
    value an error; ``finalize`` sees every value the template prints, before escaping."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(Path(__file__).resolve().parent / "templates")),
        autoescape=True, finalize=finalize, undefined=jinja2.StrictUndefined,
        trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    return env.get_template(name)


def render_html(outcome: GateOutcome) -> str:
    """The whole report as one self-contained HTML page (inline CSS, figures as base64 PNG)."""
    comparisons = outcome.comparisons
    cfg = outcome.config
    runnable = [c for c in comparisons if c.device]
    judged = sum(1 for c in comparisons if c.time is not None)
    missing = outcome.by_verdict(Verdict.NO_BASELINE)
    return page_template("page.html.j2", _clean).render(
        headline=outcome.headline,
        css=Markup(CSS),
        sections=[_section(c, i, cfg.power) for i, c in enumerate(comparisons)],
        missing=[c.workload for c in missing],
        missing_consequence=missing_baseline_consequence(outcome) if missing else "",
        reproduce="\n".join(reproduce_command(c) for c in runnable),
        rebaseline="\n".join(rebaseline_command(c) for c in runnable),
        footer=(f"perfgate {__version__} · α={cfg.alpha:g} one-sided, Holm over {judged} judged workload(s), "
                f"{looks_wording(outcome)} · δ={cfg.delta * 100:g}% · phases flagged by Benjamini–Hochberg "
                f"at q={cfg.phase_q:g} · memory threshold {cfg.memory_threshold * 100:g}%"
                + (f" · measuring: {outcome.cost.describe()}" if outcome.cost is not None else "")),
    )
