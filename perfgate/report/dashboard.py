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
CHANGE_COLOUR = {"slower": "#c62828", "faster": "#2e7d32"}
EXTRA_CSS = """
.summary { color: #333; }
table.changes td { overflow-wrap: anywhere; }
table.changes td.phase { white-space: nowrap; }
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


@dataclass(frozen=True)
class Section:
    """One workload in one environment: its panels (the step first) and what the page says of it."""

    workload: str
    environment_key: str
    device: str
    runs: int
    panels: tuple[Panel, ...]
    notes: tuple[str, ...]


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
    d = df.loc[:, [*COLUMNS, value]]
    finite = numpy.isfinite(d[value].astype(float))
    d = d.assign(**_keys(d), **{value: d[value].astype(float)})
    held = d[finite]
    lacking = d[~d["run_id"].isin(set(held["run_id"]))].groupby(["workload", "environment_key"])["run_id"].nunique()
    from perfgate.analysis.history import per_run  # pandas: only once there is a table to draw

    return per_run(held, statistic), {(str(w), str(k)): int(n) for (w, k), n in lacking.items()}


def sections(df: pandas.DataFrame, *, find: Finder | None = None, baselines_root: Path | None = None,
             statistic: str = PER_STEP) -> list[Section]:
    """What the page shows, one section per workload × environment key (sorted), before any drawing."""
    runs, lacking = _per_run(df, statistic)
    if runs.empty:
        return []
    finder = find or _default_finder()
    out = []
    for (workload, key), block in runs.groupby(["workload", "environment_key"], sort=True):
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
            dates = tuple(_date(v) for v in part["date"])
            commits = tuple(_plain(v) or "" for v in part["commit"])
            values = tuple(float(v) for v in part["value_ms"])
            rolled = part["value_ms"].astype(float).rolling(ROLLING_RUNS, min_periods=ROLLING_MIN_RUNS).median()
            rolling = tuple(None if math.isnan(v) else float(v) for v in rolled)
            changes, why = _changes(values, commits, dates, finder)
            if why:
                refused.setdefault(why, []).append(row)
            dirty = tuple(_plain(v) is not None and bool(v) for v in part["dirty"])  # unknown: not dirty
            panels.append(Panel(row, dates, commits, dirty, values, tuple(float(v) for v in part["low"]),
                                tuple(float(v) for v in part["high"]), rolling, changes, levels.get(row), why,
                                statistic))
        for why, rows in refused.items():
            notes.append(f"No change points looked for in {', '.join(rows)}: {why}.")
        devices = sorted({_plain(v) or "unknown" for v in block["device"]})
        out.append(Section(workload, key, ", ".join(devices), int(block["run_id"].nunique()), tuple(panels),
                           tuple(notes)))
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


def _draw(ax: Any, panel: Panel, wide: bool) -> None:
    n = len(panel.values)
    xs = list(range(n))
    ax.vlines(xs, panel.low, panel.high, colors=SPREAD_COLOUR, linewidth=2.2 if wide else 1.6, zorder=2)
    for hollow in (False, True):
        chosen = [i for i in xs if panel.dirty[i] is hollow]
        if chosen:
            ax.scatter(chosen, [panel.values[i] for i in chosen], s=18 if wide else 10, zorder=3, linewidths=1,
                       facecolors="none" if hollow else POINT_COLOUR, edgecolors=POINT_COLOUR)
    rolled = [(i, v) for i, v in enumerate(panel.rolling) if v is not None]
    if rolled:
        ax.plot([i for i, _ in rolled], [v for _, v in rolled], color=ROLLING_COLOUR, linewidth=1.2, zorder=2.5)
    values = [*panel.low, *panel.high]
    if panel.baseline is not None:
        values.append(panel.baseline)
        ax.axhline(panel.baseline, color=BASELINE_COLOUR, linestyle="--", linewidth=1.2, zorder=1)
    for change in panel.changes:
        colour = CHANGE_COLOUR["slower" if change.ratio > 1 else "faster"]
        x = change.index - 0.5
        ax.axvline(x, color=colour, linewidth=1.3, zorder=4)
        ax.text(x, 0.97, f"{change.commit_after} {percent(change.ratio - 1, signed=True)}", parse_math=False,
                transform=ax.get_xaxis_transform(), rotation=90, fontsize=7 if wide else 6, color=colour,
                ha="right", va="top", zorder=5,
                bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 0.5})
    lo, hi = min(values), max(values)
    need = MIN_SPAN * abs(statistics.median(panel.values)) or 1e-3
    if hi - lo < need:
        mid = (hi + lo) / 2
        lo, hi = mid - need / 2, mid + need / 2
    pad = (hi - lo) * 0.1
    ax.set_ylim(lo - pad, hi + pad * 2.5)  # room at the top for the change labels
    ax.set_xlim(-0.8, n - 0.2)
    ticks = _ticks(n, 9 if wide else 4)
    ax.set_xticks(ticks)
    ax.set_xticklabels([panel.dates[i][:10] if wide else panel.dates[i][5:10] for i in ticks], fontsize=7,
                       parse_math=False)
    ax.ticklabel_format(axis="y", style="plain", useOffset=False)
    ax.tick_params(axis="y", labelsize=7)
    ax.grid(axis="y", color="#e6e6e6", linewidth=0.8, zorder=0)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    level = f" · baseline {ms(panel.baseline)}" if panel.baseline is not None else ""
    found = f" · {len(panel.changes)} change point(s)" if panel.changes and wide else ""
    ax.set_title(f"{panel.row}, {STATISTIC_WORDS[panel.statistic]}: latest {ms(panel.values[-1])} ms{level}{found}",
                 fontsize=9 if wide else 8, fontweight="bold", loc="left")


def section_figure(section: Section) -> Figure | None:
    """The section's small multiples: the first panel (the step) across the top, the others three to a row."""
    if not section.panels:
        return None
    # imported here: the CLI must not pay for matplotlib
    from matplotlib.figure import Figure

    first, rest = section.panels[0], section.panels[1:]
    rows = math.ceil(len(rest) / PHASE_COLUMNS)
    fig = Figure(figsize=(WIDTH_INCHES, STEP_INCHES + PANEL_INCHES * rows), layout="constrained")
    grid = fig.add_gridspec(1 + rows, PHASE_COLUMNS, height_ratios=[STEP_INCHES] + [PANEL_INCHES] * rows)
    ax = fig.add_subplot(grid[0, :])
    _draw(ax, first, wide=True)
    ax.set_ylabel(f"{STATISTIC_WORDS[first.statistic]} (ms)", fontsize=8)
    for k, panel in enumerate(rest):
        ax = fig.add_subplot(grid[1 + k // PHASE_COLUMNS, k % PHASE_COLUMNS])
        _draw(ax, panel, wide=False)
        if k % PHASE_COLUMNS == 0:
            ax.set_ylabel(f"{STATISTIC_WORDS[panel.statistic]} (ms)", fontsize=8)
    return fig


def _figure(section: Section) -> dict[str, object] | None:
    fig = section_figure(section)
    if fig is None:
        return None
    width, height = (round(v * 100) for v in fig.get_size_inches())
    data = Markup(base64.b64encode(figure_png(fig)).decode("ascii"))  # base64: nothing to escape
    alt = (f"{section.workload} in {section.environment_key}: per-run {STATISTIC_WORDS[first_statistic(section)]} "
           "of " + ", ".join(p.row for p in section.panels))
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
                             "phase": p.row, "before": c.commit_before, "after": c.commit_after,
                             "date": c.date_after, "size": percent(c.ratio - 1, signed=True),
                             "css": "slower" if c.ratio > 1 else "faster", "confidence": _confidence(c.confidence)})
    return sorted(rows, key=lambda r: str(r["date"]), reverse=True)


def first_statistic(section: Section) -> str:
    return section.panels[0].statistic if section.panels else PER_STEP


def render_dashboard(df: pandas.DataFrame, *, find: Finder | None = None, baselines_root: Path | None = None,
                     title: str = "perfgate history", statistic: str = PER_STEP) -> str:
    """The whole dashboard as one HTML page (inline CSS, figures as base64 PNG, no JavaScript);
    every panel shows ``statistic`` (the time per step by default) and says so."""
    shown = sections(df, find=find, baselines_root=baselines_root, statistic=statistic)
    dates = sorted(d for s in shown for p in s.panels[:1] for d in p.dates)
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
        sections=[{"anchor": f"w-{i + 1}", "workload": s.workload, "environment": s.environment_key,
                   "device": s.device, "runs": s.runs, "notes": list(s.notes), "figure": _figure(s)}
                  for i, s in enumerate(shown)],
        min_span=f"{MIN_SPAN * 100:g}%",
        statistic=STATISTIC_WORDS[statistic],
        footer=f"Written by perfgate {__version__}.",
    )


def write_dashboard(df: pandas.DataFrame, out_dir: Path, *, find: Finder | None = None,
                    baselines_root: Path | None = None, title: str = "perfgate history",
                    statistic: str = PER_STEP) -> Path:
    """Write ``out_dir/index.html`` (see the module's docstring) and return its path.

    ``df`` is ``perfgate.analysis.history.load``'s table (the columns of :data:`COLUMNS` are
    read); ``find`` the change-point method, called with each panel's per-run values in date
    order (default: ``perfgate.analysis.changepoints.find_changes`` with its defaults; its
    ``ValueError`` means "no change points looked for", with the message shown);
    ``baselines_root`` the baseline store whose level is drawn (None: no baseline lines);
    ``title`` the page's heading; ``statistic`` the per-repeat statistic every panel shows
    (``per_step``, the time per step, by default; ``median``). A baseline file that is not valid raises
    ``FileFormatError`` from the baseline store, before anything is written.

    The page is rendered first, then written to a temporary file in ``out_dir`` and renamed
    into place, so a failure leaves the previous page (or nothing) and never half a page;
    folders this call created for a write that failed are removed again. An ``out_dir``
    that cannot be written (not a folder, no permission) raises ``UsageError``.
    """
    text = render_dashboard(df, find=find, baselines_root=baselines_root, title=title, statistic=statistic)
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
