"""The history dashboard: one static page of trend plots, ``perfgate history html DIR``.

``write_dashboard(df, out_dir)`` turns the history's long table (``perfgate.analysis.history.load``:
one row per run × repeat × row) into ``out_dir/index.html``, a page that needs no server:
it opens from disk and can be published as it is (GitHub Pages). It holds

* a summary line (runs, workloads, environments, the dates they span) and a table of the
  change points found, newest first: workload, environment, phase, the commit range (the
  last run before the step, the first after), the date of the first run after it, the
  size (signed %) and the confidence;
* one section per workload × environment key, with one small-multiples figure: a wide
  panel for the step on top and one panel per phase (and the residual) below. In each
  panel every run is a point, in date order and evenly spaced (the ticks give the runs'
  dates): the run's value is the median over its repeats of the repeat's **time per
  step** (the window's total over its steps: the statistic the gate decides on), or of
  its median step with ``statistic="median"``; each panel's title and axis name the
  statistic, the vertical bar behind a point spans its repeats from the lowest to the
  highest, and a run of a modified tree is hollow; a line follows the rolling median of the last five runs
  (pandas). A change point is a vertical line before the first run after the step,
  labelled with that run's short commit and the size; the level of the stored baseline
  of that workload and environment (the median of all its recordings' per-repeat
  values of the row, of the same statistic) is a dashed horizontal line when
  ``baselines_root`` is given and the baseline exists. A row that is zero in every run (a
  micro-benchmark's phases) has no panel. Runs recorded before the time per step was kept
  (history schema version 1) are not in a time-per-step panel, and the section says how
  many were left out.
* split by runner (``by_runner``, the default): where a workload's runs in an environment
  come from two or more runners (the table's ``runner``), every panel has one series per
  runner, in its own colour and marker, with its own rolling median, on an x axis the
  series share (all the row's runs in date order); the step's panel has a legend naming
  the runners. Change points are looked for in each runner's series alone, so a step is
  placed at the commit where that runner saw it, and the change table names the runner.
  Runs without a runner (recorded before it was kept) are the series "unknown runner";
  runs of one named runner (with or without such runs) are one series, as before.

Change points come from ``find`` (by default ``perfgate.analysis.changepoints.find_changes``)
called on each panel's per-run values. A series the method refuses as too short (its
``ValueError``), or one holding a zero time (the method works on logarithms), is drawn
without markers and the section says why. An empty history is not an error: the page
says that nothing is recorded yet, so a publishing job can run before the first record.

Every string from the store (workload names, environment keys, commits, devices) is
untrusted: the page is a jinja2 template (``templates/dashboard.html.j2``) rendered with
autoescaping, every value first made one plain line by ``perfgate.text.inert.flatten``;
in the figures a commit is capped and flattened, and every label drawn from the store has
``parse_math=False``, so matplotlib never reads a ``$`` in it as mathtext. A baseline is
looked up only for a workload name and an environment key that are plain file names
(``perfgate.store.untrusted``'s patterns), never for a path the store could steer.

Figures are inline base64 PNGs drawn through ``Figure`` and the Agg canvas (never pyplot),
so the page is one file, written atomically: a failed write (an unwritable ``out_dir``) is
one ``UsageError`` and leaves nothing behind.
"""

from __future__ import annotations

import base64
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy
from markupsafe import Markup

from perfgate.model.repeat import MEDIAN, PER_STEP, STATISTIC_WORDS, STATISTICS
from perfgate.model.errors import UsageError
from perfgate.model.result import ROWS
from perfgate.model.version import __version__
from perfgate.report.html import CSS, figure_png, page_template
from perfgate.store.baselines import find_baseline
from perfgate.store.jsonfile import write_text_atomic
from perfgate.store.untrusted import KEY_RE, NAME_RE
from perfgate.text.inert import flatten
from perfgate.text.units import ms, percent

if TYPE_CHECKING:
    import pandas
    from matplotlib.figure import Figure

__all__ = ["ChangeLike", "Panel", "Section", "render_dashboard", "section_figure", "sections", "write_dashboard"]

INDEX = "index.html"
STATISTIC_NOTES = {PER_STEP: " (each repeat's window total over its steps, the number the gate decides on)",
                   MEDIAN: " (each repeat's median step; the gate decides on the time per step)"}
COLUMNS = ("run_id", "date", "commit", "dirty", "workload", "environment_key", "device", "phase")
"""The columns of the history table the dashboard reads, besides the statistic's own
(:data:`VALUE_COLUMNS`)."""
VALUE_COLUMNS = {PER_STEP: "per_step_ms", MEDIAN: "median_ms"}
"""The history table's column of each statistic (``perfgate.analysis.history.VALUE_COLUMNS``)."""
SHORT_COMMIT = 8
MIN_SPAN = 0.10
"""A panel's y axis spans at least this fraction of its median level: a 0.5% wobble must
not fill the panel and look like a step."""
WIDTH_INCHES = 11.0
STEP_INCHES = 2.9
PANEL_INCHES = 2.3
PHASE_COLUMNS = 3
POINT_COLOUR = "#1f5fa8"
SPREAD_COLOUR = "#9fb8d8"
ROLLING_COLOUR = "#e08a1e"
ROLLING_RUNS = 5
"""The rolling median's window: the last five runs."""
ROLLING_MIN_RUNS = 3
BASELINE_COLOUR = "#6d6d6d"
RUNNER_COLOURS = ("#1f5fa8", "#8e3fa8", "#0f8a7e", "#a8741f", "#4d4d4d", "#c2407d")
"""One colour per runner's series, in order (the first is ``POINT_COLOUR``); none is a change point's red or green."""
RUNNER_MARKERS = ("o", "s", "^", "D", "v", "P")
UNKNOWN_RUNNER = "unknown runner"
RUNNER_CHARS = 40
CHANGE_COLOUR = {"slower": "#c62828", "faster": "#2e7d32"}
EXTRA_CSS = """
.summary { color: #333; }
table.changes td { overflow-wrap: anywhere; }
table.changes td.phase, table.changes td.runner { white-space: nowrap; }
td.slower { color: #c62828; font-weight: 600; } td.faster { color: #2e7d32; font-weight: 600; }
.note { color: #555; font-size: 0.92em; }
.empty { border-left: 4px solid #1f5fa8; background: #eef4fb; padding: 10px 14px; }
""".strip()


class ChangeLike(Protocol):
    """What the dashboard reads of a change point (``perfgate.analysis.changepoints.ChangePoint``)."""

    @property
    def index(self) -> int: ...  # the first run after the step
    @property
    def ratio(self) -> float: ...  # after / before
    @property
    def confidence(self) -> float: ...


Finder = Callable[[Sequence[float]], Sequence[ChangeLike]]


@dataclass(frozen=True)
class Change:
    """A change point placed in its series: the runs either side of the step."""

    index: int
    ratio: float
    confidence: float
    commit_before: str
    commit_after: str
    date_after: str


@dataclass(frozen=True)
class Panel:
    """One row (a phase, the residual or the step) of one workload in one environment, per run in date order."""

    row: str
    dates: tuple[str, ...]
    commits: tuple[str, ...]
    dirty: tuple[bool, ...]
    values: tuple[float, ...]
    """Per run, the median over its repeats of the repeat's ``statistic`` (ms)."""
    low: tuple[float, ...]
    high: tuple[float, ...]
    rolling: tuple[float | None, ...]
    """Per run, the rolling median of the values over the last ``ROLLING_RUNS`` runs (None
    before ``ROLLING_MIN_RUNS`` runs): the level a reader follows through the noise."""
    changes: tuple[Change, ...]
    baseline: float | None
    """The stored baseline's level of this row (ms), or None."""
    note: str | None = None
    """Why no change points were looked for, when they were not."""
    statistic: str = PER_STEP
    """The per-repeat statistic the values are of (``perfgate.model.repeat.STATISTICS``)."""
    runner: str | None = None
    """The runner whose runs these are, when the section is split by runner; None: every run."""
    positions: tuple[int, ...] = ()
    """Per run, its place on the x axis that the row's series share (all the row's runs in
    date order); empty: 0, 1, 2, ... (one series)."""

    def xs(self) -> list[int]:
        return list(self.positions) if self.positions else list(range(len(self.values)))


@dataclass(frozen=True)
class Section:
    """One workload in one environment: its panels (the step first) and what the page says of it."""

    workload: str
    environment_key: str
    device: str
    runs: int
    panels: tuple[Panel, ...]
    """The panels in drawing order; split by runner, one per row and runner, a row's runners together."""
    notes: tuple[str, ...]
    runners: tuple[str, ...] = ()
    """The runners the section is split by (two or more), in the order of their series; empty: not split."""

    def rows(self) -> list[tuple[Panel, ...]]:
        """The panels grouped by row, in order: each group is one drawn panel (one series per runner)."""
        out: list[tuple[Panel, ...]] = []
        for panel in self.panels:
            if out and out[-1][0].row == panel.row:
                out[-1] += (panel,)
            else:
                out.append((panel,))
        return out


def _plain(value: object) -> str | None:
    """A store string as one plain line, or None for a missing value (None, NaN)."""
    import pandas

    if value is None or (pandas.api.types.is_scalar(value) and bool(pandas.isna(value))):
        return None
    return flatten(value, 200)


def _short(commit: str | None) -> str:
    return "no commit" if not commit else flatten(commit, 40)[:SHORT_COMMIT]


def _default_finder() -> Finder:
    from perfgate.analysis.changepoints import find_changes

    return find_changes


def _changes(values: tuple[float, ...], commits: tuple[str, ...], dates: tuple[str, ...],
             find: Finder) -> tuple[tuple[Change, ...], str | None]:
    if any(v <= 0 for v in values):
        return (), "it holds a time that is not positive, and change points are looked for on logarithms"
    try:
        found = find(list(values))
    except ValueError as exc:
        return (), flatten(exc, 300)
    out = []
    for cp in found:
        i = int(cp.index)
        if 0 < i < len(values):
            out.append(Change(i, float(cp.ratio), float(cp.confidence), _short(commits[i - 1]), _short(commits[i]),
                              dates[i]))
    return tuple(out), None


def _baseline_levels(root: Path, environment_key: str, workload: str,
                     statistic: str) -> tuple[dict[str, float], str | None]:
    """Per row, the median of the stored baseline's per-repeat ``statistic`` (all recordings); and a note."""
    if not (NAME_RE.fullmatch(workload) and KEY_RE.fullmatch(environment_key)
            and ".." not in workload + environment_key):
        return {}, "no baseline looked up: the workload name or environment key is not a plain file name"
    found = find_baseline(root, environment_key, workload).baseline
    if found is None:
        return {}, None
    levels = {row: statistics.median(m for per_recording in found.recording_values(row, statistic)
                                     for m in per_recording)
              for row in ROWS}
    latest = found.recordings[-1].provenance
    return levels, (f"dashed line: the stored baseline, {len(found.recordings)} recording(s), the latest of commit "
                    f"{_short(latest.commit)} on {flatten(latest.date, 40)[:10]}")


def _keys(d: pandas.DataFrame) -> dict[str, pandas.Series]:
    return {c: d[c].astype(object).where(d[c].notna(), "").astype(str)  # categories and <NA> as plain str
            for c in ("workload", "environment_key", "phase")}


def _per_run(df: pandas.DataFrame, statistic: str) -> tuple[pandas.DataFrame, dict[tuple[str, str], int]]:
    """The per-run values of ``statistic``, and per workload and environment key the runs
    that hold none (recorded before the time per step was kept)."""
    if statistic not in VALUE_COLUMNS:
        raise ValueError(f"unknown statistic {statistic!r}; statistics: {', '.join(STATISTICS)}")
    value = VALUE_COLUMNS[statistic]
    missing = [c for c in (*COLUMNS, value) if c not in df.columns]
    if missing:
        raise ValueError(f"the history table lacks the column(s) {', '.join(missing)}")
    d = df.loc[:, [*COLUMNS, *(["runner"] if "runner" in df.columns else []), value]]
    finite = numpy.isfinite(d[value].astype(float))
    d = d.assign(**_keys(d), **{value: d[value].astype(float)})
    held = d[finite]
    lacking = d[~d["run_id"].isin(set(held["run_id"]))].groupby(["workload", "environment_key"])["run_id"].nunique()
    from perfgate.analysis.history import per_run  # pandas: only once there is a table to draw

    return per_run(held, statistic), {(str(w), str(k)): int(n) for (w, k), n in lacking.items()}


def _runner_names(block: pandas.DataFrame) -> list[str]:
    """Per run of ``block``, its runner's name as drawn ("unknown runner" when not recorded)."""
    if "runner" not in block.columns:
        return [UNKNOWN_RUNNER] * len(block)
    return [(_plain(v) or UNKNOWN_RUNNER)[:RUNNER_CHARS] for v in block["runner"]]


def _panel(part: pandas.DataFrame, row: str, positions: tuple[int, ...], baseline: float | None, statistic: str,
           finder: Finder, runner: str | None) -> Panel:
    """The panel (one series) of ``part``'s runs, in date order; change points found in this series alone."""
    dates = tuple(_date(v) for v in part["date"])
    commits = tuple(_plain(v) or "" for v in part["commit"])
    values = tuple(float(v) for v in part["value_ms"])
    rolled = part["value_ms"].astype(float).rolling(ROLLING_RUNS, min_periods=ROLLING_MIN_RUNS).median()
    rolling = tuple(None if math.isnan(v) else float(v) for v in rolled)
    changes, why = _changes(values, commits, dates, finder)
    dirty = tuple(_plain(v) is not None and bool(v) for v in part["dirty"])  # unknown: not dirty
    return Panel(row, dates, commits, dirty, values, tuple(float(v) for v in part["low"]),
                 tuple(float(v) for v in part["high"]), rolling, changes, baseline, why, statistic, runner, positions)


def sections(df: pandas.DataFrame, *, find: Finder | None = None, baselines_root: Path | None = None,
             statistic: str = PER_STEP, by_runner: bool = True) -> list[Section]:
    """What the page shows, one section per workload × environment key (sorted), before any drawing.

    With ``by_runner`` (the default), a section whose runs come from two or more runners
    (the history's ``runner`` column; runs without one are the series "unknown runner", and
    with one named runner only they are not split off) has one series per runner in each
    panel, each with its own rolling median and its own change points."""
    runs, lacking = _per_run(df, statistic)
    if runs.empty:
        return []
    finder = find or _default_finder()
    out = []
    for (workload, key), block in runs.groupby(["workload", "environment_key"], sort=True):
        block = block.assign(runner_name=_runner_names(block))
        named = sorted(set(block["runner_name"]) - {UNKNOWN_RUNNER})
        runners = ((named + [UNKNOWN_RUNNER] * (UNKNOWN_RUNNER in set(block["runner_name"])))
                   if by_runner and len(named) > 1 else [])
        levels: dict[str, float] = {}
        notes = []
        if lacking.get((workload, key)):
            notes.append(f"{lacking[(workload, key)]} run(s) recorded before the {STATISTIC_WORDS[statistic]} was "
                         "kept are not shown (perfgate history html --statistic median shows them).")
        if baselines_root is not None:
            levels, baseline_note = _baseline_levels(Path(baselines_root), key, workload, statistic)
            notes += [baseline_note] if baseline_note else []
        refused: dict[str, list[str]] = {}
        panels = []
        order = ["step", *[r for r in ROWS if r != "step"]]
        for row in order + sorted(set(block["phase"]) - set(order)):
            part = block[block["phase"] == row].sort_values(["date", "run_id"], kind="stable")
            if part.empty or not (part["high"] != 0).any():
                continue  # not measured, or zero in every run (a micro-benchmark's phases)
            if not runners:
                panel = _panel(part, row, (), levels.get(row), statistic, finder, None)
                panels.append(panel)
                if panel.note:
                    refused.setdefault(panel.note, []).append(row)
                continue
            where = numpy.arange(len(part))
            for runner in runners:
                mine = (part["runner_name"] == runner).to_numpy()
                if mine.any():
                    panel = _panel(part[mine], row, tuple(int(i) for i in where[mine]), levels.get(row), statistic,
                                   finder, runner)
                    panels.append(panel)
                    if panel.note:
                        refused.setdefault(panel.note, []).append(f"{row} ({runner})")
        for why, rows in refused.items():
            notes.append(f"No change points looked for in {', '.join(rows)}: {why}.")
        devices = sorted({_plain(v) or "unknown" for v in block["device"]})
        if runners:
            notes.append(f"Split by runner: one series per runner ({', '.join(runners)}), each with its own "
                         "rolling median and change points.")
        out.append(Section(workload, key, ", ".join(devices), int(block["run_id"].nunique()), tuple(panels),
                           tuple(notes), tuple(runners)))
    return out


def _date(value: Any) -> str:
    text = _plain(value)
    if text is None:
        return "no date"
    return text[:16].replace("T", " ")


# ---------------------------------------------------------------------------- figures


def _ticks(n: int, most: int) -> list[int]:
    if n <= most:
        return list(range(n))
    step = math.ceil((n - 1) / (most - 1))
    return sorted({*range(0, n, step), n - 1})


def _draw(ax: Any, group: tuple[Panel, ...], wide: bool, runners: Sequence[str] = ()) -> None:
    """One drawn panel: one series, or (split by runner) one series per runner on a shared x axis."""
    panel = group[0]
    split = panel.runner is not None
    dates: dict[int, str] = {}
    values = []
    for k, series in enumerate(group):
        xs = series.xs()
        dates.update(zip(xs, series.dates, strict=True))
        at = runners.index(series.runner) if series.runner in runners else k
        colour = RUNNER_COLOURS[at % len(RUNNER_COLOURS)] if split else POINT_COLOUR
        ax.vlines(xs, series.low, series.high, colors=colour if split else SPREAD_COLOUR,
                  alpha=0.35 if split else None, linewidth=2.2 if wide else 1.6, zorder=2)
        for hollow in (False, True):
            chosen = [j for j in range(len(xs)) if series.dirty[j] is hollow]
            if chosen:
                ax.scatter([xs[j] for j in chosen], [series.values[j] for j in chosen], s=18 if wide else 10,
                           zorder=3, linewidths=1, facecolors="none" if hollow else colour, edgecolors=colour,
                           **({"marker": RUNNER_MARKERS[at % len(RUNNER_MARKERS)]} if split else {}))
        rolled = [(xs[j], v) for j, v in enumerate(series.rolling) if v is not None]
        if rolled:
            ax.plot([i for i, _ in rolled], [v for _, v in rolled], color=colour if split else ROLLING_COLOUR,
                    linewidth=1.2, zorder=2.5, alpha=0.75 if split else 1.0)
        values += [*series.low, *series.high]
        for change in series.changes:
            colour = CHANGE_COLOUR["slower" if change.ratio > 1 else "faster"]
            x = xs[change.index] - 0.5
            label = f"{change.commit_after} {percent(change.ratio - 1, signed=True)}"
            ax.axvline(x, color=colour, linewidth=1.3, zorder=4)
            ax.text(x, 0.97, f"{label} {series.runner}" if split and wide else label, parse_math=False,
                    transform=ax.get_xaxis_transform(), rotation=90, fontsize=7 if wide else 6, color=colour,
                    ha="left" if split and at % 2 else "right", va="top", zorder=5,
                    bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 0.5})
    n = max(dates) + 1
    if panel.baseline is not None:
        values.append(panel.baseline)
        ax.axhline(panel.baseline, color=BASELINE_COLOUR, linestyle="--", linewidth=1.2, zorder=1)
    lo, hi = min(values), max(values)
    need = MIN_SPAN * abs(statistics.median(v for series in group for v in series.values)) or 1e-3
    if hi - lo < need:
        mid = (hi + lo) / 2
        lo, hi = mid - need / 2, mid + need / 2
    pad = (hi - lo) * 0.1
    ax.set_ylim(lo - pad, hi + pad * 2.5)  # room at the top for the change labels
    ax.set_xlim(-0.8, n - 0.2)
    ticks = _ticks(n, 9 if wide else 4)
    ax.set_xticks(ticks)
    ax.set_xticklabels([dates.get(i, "")[:10] if wide else dates.get(i, "")[5:10] for i in ticks], fontsize=7,
                       parse_math=False)
    ax.ticklabel_format(axis="y", style="plain", useOffset=False)
    ax.tick_params(axis="y", labelsize=7)
    ax.grid(axis="y", color="#e6e6e6", linewidth=0.8, zorder=0)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    level = f" · baseline {ms(panel.baseline)}" if panel.baseline is not None else ""
    changes = sum(len(series.changes) for series in group)
    found = f" · {changes} change point(s)" if changes and wide else ""
    if not split:
        latest = f"latest {ms(panel.values[-1])} ms"
    elif wide:
        latest = "latest " + ", ".join(f"{ms(series.values[-1])} ms ({series.runner})" for series in group)
    else:
        latest = f"{len(group)} runners"
    ax.set_title(f"{panel.row}, {STATISTIC_WORDS[panel.statistic]}: {latest}{level}{found}",
                 fontsize=9 if wide else 8, fontweight="bold", loc="left", parse_math=False)
    if split and wide:
        from matplotlib.lines import Line2D

        handles = []
        for k, series in enumerate(group):
            at = runners.index(series.runner) if series.runner in runners else k
            handles.append(Line2D([], [], color=RUNNER_COLOURS[at % len(RUNNER_COLOURS)], linewidth=1.2,
                                  marker=RUNNER_MARKERS[at % len(RUNNER_MARKERS)], markersize=5,
                                  label=str(series.runner)))
        legend = ax.legend(handles=handles, loc="lower right", fontsize=7, framealpha=0.9, title="runner",
                           title_fontsize=7)
        for text in (*legend.get_texts(), legend.get_title()):
            text.set_parse_math(False)


def section_figure(section: Section) -> Figure | None:
    """The section's small multiples: the first panel (the step) across the top, the others three to a row."""
    if not section.panels:
        return None
    # imported here: the CLI must not pay for matplotlib
    from matplotlib.figure import Figure

    first, *rest = section.rows()
    rows = math.ceil(len(rest) / PHASE_COLUMNS)
    fig = Figure(figsize=(WIDTH_INCHES, STEP_INCHES + PANEL_INCHES * rows), layout="constrained")
    grid = fig.add_gridspec(1 + rows, PHASE_COLUMNS, height_ratios=[STEP_INCHES] + [PANEL_INCHES] * rows)
    ax = fig.add_subplot(grid[0, :])
    _draw(ax, first, wide=True, runners=section.runners)
    ax.set_ylabel(f"{STATISTIC_WORDS[first[0].statistic]} (ms)", fontsize=8)
    for k, group in enumerate(rest):
        ax = fig.add_subplot(grid[1 + k // PHASE_COLUMNS, k % PHASE_COLUMNS])
        _draw(ax, group, wide=False, runners=section.runners)
        if k % PHASE_COLUMNS == 0:
            ax.set_ylabel(f"{STATISTIC_WORDS[group[0].statistic]} (ms)", fontsize=8)
    return fig


def _figure(section: Section) -> dict[str, object] | None:
    fig = section_figure(section)
    if fig is None:
        return None
    width, height = (round(v * 100) for v in fig.get_size_inches())
    data = Markup(base64.b64encode(figure_png(fig)).decode("ascii"))  # base64: nothing to escape
    alt = (f"{section.workload} in {section.environment_key}: per-run {STATISTIC_WORDS[first_statistic(section)]} "
           "of " + ", ".join(group[0].row for group in section.rows())
           + (f", one series per runner ({', '.join(section.runners)})" if section.runners else ""))
    return {"data": data, "width": width, "height": height, "alt": alt}


# ---------------------------------------------------------------------------- page


def _finalize(value: object) -> object:
    """Every value the template prints, as one plain line before autoescaping; markup untouched."""
    if value is None:
        return ""
    if isinstance(value, Markup):
        return value
    return flatten(value, 2000)


def _confidence(value: float) -> str:
    return "> 99.9%" if value >= 0.9995 else percent(value)


def _change_rows(shown: Sequence[Section]) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for i, s in enumerate(shown):
        for p in s.panels:
            for c in p.changes:
                rows.append({"anchor": f"w-{i + 1}", "workload": s.workload, "environment": s.environment_key,
                             "runner": p.runner or "", "phase": p.row, "before": c.commit_before, "after": c.commit_after,
                             "date": c.date_after, "size": percent(c.ratio - 1, signed=True),
                             "css": "slower" if c.ratio > 1 else "faster", "confidence": _confidence(c.confidence)})
    return sorted(rows, key=lambda r: str(r["date"]), reverse=True)


def first_statistic(section: Section) -> str:
    return section.panels[0].statistic if section.panels else PER_STEP


def render_dashboard(df: pandas.DataFrame, *, find: Finder | None = None, baselines_root: Path | None = None,
                     title: str = "perfgate history", statistic: str = PER_STEP, by_runner: bool = True) -> str:
    """The whole dashboard as one HTML page (inline CSS, figures as base64 PNG, no JavaScript);
    every panel shows ``statistic`` (the time per step by default) and says so."""
    shown = sections(df, find=find, baselines_root=baselines_root, statistic=statistic, by_runner=by_runner)
    dates = sorted(d for s in shown for p in s.rows()[0] for d in p.dates)
    runs = sum(s.runs for s in shown)
    summary = ""
    if shown:
        summary = (f"{runs} run(s) of {len({s.workload for s in shown})} workload(s) in "
                   f"{len({s.environment_key for s in shown})} environment(s), from {dates[0]} to {dates[-1]} (UTC). "
                   f"Every panel shows the {STATISTIC_WORDS[statistic]}{STATISTIC_NOTES[statistic]}.")
    return page_template("dashboard.html.j2", _finalize).render(
        title=title,
        css=Markup(CSS + "\n" + EXTRA_CSS),
        summary=summary,
        changes=_change_rows(shown),
        by_runner=any(s.runners for s in shown),
        sections=[{"anchor": f"w-{i + 1}", "workload": s.workload, "environment": s.environment_key,
                   "device": s.device, "runs": s.runs, "notes": list(s.notes), "figure": _figure(s)}
                  for i, s in enumerate(shown)],
        min_span=f"{MIN_SPAN * 100:g}%",
        statistic=STATISTIC_WORDS[statistic],
        footer=f"Written by perfgate {__version__}.",
    )


def write_dashboard(df: pandas.DataFrame, out_dir: Path, *, find: Finder | None = None,
                    baselines_root: Path | None = None, title: str = "perfgate history",
                    statistic: str = PER_STEP, by_runner: bool = True) -> Path:
    """Write ``out_dir/index.html`` (see the module's docstring) and return its path.

    ``df`` is ``perfgate.analysis.history.load``'s table (the columns of :data:`COLUMNS` are
    read); ``find`` the change-point method, called with each panel's per-run values in date
    order (default: ``perfgate.analysis.changepoints.find_changes`` with its defaults; its
    ``ValueError`` means "no change points looked for", with the message shown);
    ``baselines_root`` the baseline store whose level is drawn (None: no baseline lines);
    ``title`` the page's heading; ``statistic`` the per-repeat statistic every panel shows
    (``per_step``, the time per step, by default; ``median``); ``by_runner`` splits a workload's
    series by runner where its runs come from two or more (:func:`sections`). A baseline file that is not valid raises
    ``FileFormatError`` from the baseline store, before anything is written.

    The page is rendered first, then written to a temporary file in ``out_dir`` and renamed
    into place, so a failure leaves the previous page (or nothing) and never half a page;
    folders this call created for a write that failed are removed again. An ``out_dir``
    that cannot be written (not a folder, no permission) raises ``UsageError``.
    """
    text = render_dashboard(df, find=find, baselines_root=baselines_root, title=title, statistic=statistic,
                            by_runner=by_runner)
    out_dir = Path(out_dir)
    created = []
    for folder in (out_dir, *out_dir.parents):
        if folder.exists() or folder.is_symlink():
            break
        created.append(folder)
    try:
        write_text_atomic(out_dir / INDEX, text)
    except OSError as exc:
        for folder in created:  # deepest first
            try:
                folder.rmdir()
            except OSError:
                break
        raise UsageError(f"cannot write the dashboard into {out_dir}: {exc.strerror or exc}") from None
    return out_dir / INDEX
