"""The history dashboard (``perfgate history html DIR``): one static page with a figure per
workload, the change points marked with their commits, the stored baseline's level, every
store string escaped, an atomic write, and the page as a headless browser draws it."""

from __future__ import annotations

import base64
import math
import random
import shutil
import statistics
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest
from factories import BASE_PHASES, ENV, make_result

from perfgate.model.errors import UsageError
from perfgate.report import dashboard
from perfgate.store import jsonfile
from perfgate.store.baselines import save_baseline, updated_baseline
from perfgate.text.units import ms

COLUMNS = ["run_id", "recorded_at", "date", "commit", "dirty", "branch", "design", "workload", "workload_version",
           "device", "environment_key", "perfgate_version", "runner", "gpu_model", "gpu_uuid", "repeat", "block",
           "phase", "per_step_ms", "median_ms", "share",
           "samples_per_s", "peak_memory_bytes", "ops", "copies", "flops", "syncs", "launches"]
"""The documented columns of ``perfgate.analysis.history.load``."""
DTYPES = {"commit": "string", "dirty": "boolean", "branch": "category", "design": "category",
          "workload": "category", "device": "category", "environment_key": "category",
          "perfgate_version": "category", "runner": "category", "gpu_model": "category", "gpu_uuid": "category",
          "block": "Int64", "peak_memory_bytes": "Int64",
          "phase": pd.CategoricalDtype(["data_wait", "h2d", "forward", "backward", "optimizer", "residual", "step"],
                                       ordered=True)}
"""The documented dtypes that are not plain numbers (dates are datetime64[ns, UTC])."""
KEY = ENV.key()
PER_STEP_OVER_MEDIAN = 1.25
RUNS = 40
STEP_AT = 25
PNG = b"\x89PNG\r\n\x1a\n"
HOSTILE_NAME = "<script>alert(1)</script>"
HOSTILE_COMMIT = "$\\qqq$ab<img src=x onerror=alert(1)>"
"""Its first eight characters, ``$\\qqq$ab``, are mathtext that matplotlib cannot parse."""


@dataclass(frozen=True)
class Found:
    """A change point as ``perfgate.analysis.changepoints.ChangePoint`` carries it."""

    index: int
    before: float
    after: float
    ratio: float
    p_value: float
    confidence: float


def split_finder(values: Sequence[float]) -> list[Found]:
    """A deterministic stand-in for the change-point method: the one split that best separates
    the log values' means, kept when its step exceeds 2.5%; fewer than 10 runs is refused."""
    if len(values) < 10:
        raise ValueError(f"{len(values)} runs: too few to look for change points (at least 10 needed)")
    logs = [math.log(v) for v in values]
    n = len(logs)
    score = lambda i: i * (n - i) / n * (statistics.fmean(logs[:i]) - statistics.fmean(logs[i:])) ** 2
    best = max(range(5, n - 4), key=score)
    before, after = math.exp(statistics.fmean(logs[:best])), math.exp(statistics.fmean(logs[best:]))
    if abs(math.log(after / before)) < 0.025:
        return []
    return [Found(best, before, after, after / before, 0.001, 0.999)]


def history(workloads: dict[str, int | None], *, runs: int = RUNS, seed: int = 7, key: str = KEY,
            commits: Sequence[str] | None = None, step: float = 1.05, level: float = 1.0,
            runner: str = "runner-1") -> pd.DataFrame:
    """A history table with exactly the documented columns: per workload ``runs`` runs of three
    repeats, one a day, 1% noise, every row scaled by ``level`` and by ``step`` (1.05) from the
    run given (None: no step), all recorded by ``runner``.
    Each repeat's time per step is its median step × :data:`PER_STEP_OVER_MEDIAN`, so a test
    tells which statistic a panel shows."""
    rng = random.Random(seed)
    rows = []
    start = datetime(2026, 3, 1, 6, tzinfo=UTC)
    run_id = 0
    for workload, step_at in workloads.items():
        for run in range(runs):
            run_id += 1
            commit = commits[run] if commits else f"{rng.getrandbits(160):040x}"
            date = start + timedelta(days=run, minutes=run_id)
            scale = level * (step if step_at is not None and run >= step_at else 1.0)
            for repeat in range(3):
                values = {p: v * scale * math.exp(rng.gauss(0, 0.01)) for p, v in BASE_PHASES.items()}
                values["residual"] = 0.2 * level
                values["step"] = sum(values.values())
                for phase, value in values.items():
                    rows.append({
                        "run_id": run_id, "recorded_at": date + timedelta(hours=1), "date": date, "commit": commit,
                        "dirty": run == 3, "branch": "main", "design": "stored", "workload": workload,
                        "workload_version": 1, "device": "cpu", "environment_key": key, "perfgate_version": "0.1.0",
                        "runner": runner, "gpu_model": None, "gpu_uuid": None,
                        "repeat": repeat, "block": None, "phase": phase,
                        "per_step_ms": value * PER_STEP_OVER_MEDIAN, "median_ms": value,
                        "share": value / values["step"], "samples_per_s": 80.0, "peak_memory_bytes": 1_000_000,
                        "ops": math.nan, "copies": math.nan, "flops": math.nan, "syncs": math.nan,
                        "launches": math.nan})
    df = pd.DataFrame(rows, columns=COLUMNS)
    for column in ("date", "recorded_at"):
        df[column] = pd.to_datetime(df[column], utc=True)
    return df.astype(DTYPES)


class Page(HTMLParser):
    """Tags, sections (their images and text), table rows and the text of a page."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.sections: dict[str, dict] = {}
        self.rows: list[list[str]] = []
        self.text = ""
        self._section: dict | None = None
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag == "section":
            self._section = {"imgs": [], "text": ""}
            self.sections[str(a["id"])] = self._section
        elif tag == "img" and self._section is not None:
            self._section["imgs"].append(a)
        elif tag == "tr":
            self._row = []
        elif tag == "td" and self._row is not None:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "section":
            self._section = None
        elif tag == "td" and self._cell is not None and self._row is not None:
            self._row.append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "tr" and self._row:
            self.rows.append(self._row)
            self._row = None

    def handle_data(self, data: str) -> None:
        self.text += data
        if self._cell is not None:
            self._cell.append(data)
        if self._section is not None:
            self._section["text"] += data


@pytest.fixture(scope="module")
def baselines(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store holding a baseline of ``resnet`` (the factories' phases, so near its history's level)."""
    root = tmp_path_factory.mktemp("baselines")
    save_baseline(updated_baseline(None, make_result("resnet", repeats=4, seed=3), "first", append=False), root)
    return root


@pytest.fixture(scope="module")
def synthetic() -> pd.DataFrame:
    return history({"bert": None, "resnet": STEP_AT, "tiny": None})


@pytest.fixture(scope="module")
def page_text(synthetic: pd.DataFrame, baselines: Path) -> str:
    return dashboard.render_dashboard(synthetic, find=split_finder, baselines_root=baselines, title="acme history")


@pytest.fixture(scope="module")
def page(page_text: str) -> Page:
    return Page(page_text)


def test_one_figure_per_workload_inline_and_nothing_fetched(page_text: str, page: Page) -> None:
    assert page_text.startswith("<!DOCTYPE html>")
    assert len(page.sections) == 3
    for name in ("bert", "resnet", "tiny"):
        assert sum(name in s["text"].split("\n")[1] for s in page.sections.values()) == 1  # its h2
    for section in page.sections.values():
        assert len(section["imgs"]) == 1
        src = section["imgs"][0]["src"]
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1]).startswith(PNG)
    tags = {t for t, _ in page.tags}
    assert not {"script", "link", "iframe", "object", "embed"} & tags  # opens from disk, fetches nothing
    hrefs = [a["href"] for t, a in page.tags if t == "a"]
    assert hrefs and all(str(h).startswith("#w-") for h in hrefs)


def test_the_step_is_in_the_table_with_its_commits_size_and_confidence(synthetic: pd.DataFrame, page: Page) -> None:
    commits = list(synthetic[synthetic["workload"] == "resnet"].drop_duplicates("run_id")["commit"])
    changes = [r for r in page.rows if len(r) == 7]
    assert {r[0] for r in changes} == {"resnet"}  # no change in the series without a step
    step = next(r for r in changes if r[2] == "step")
    assert step[1] == KEY
    assert step[3] == f"{commits[STEP_AT - 1][:8]} → {commits[STEP_AT][:8]}"
    assert step[4].startswith("2026-03-26")  # the date of the first run after the step
    assert 4.0 < float(step[5].rstrip("%")) < 6.0 and step[5].startswith("+")
    assert step[6] == "99.9%"
    assert sorted(r[2] for r in changes) == sorted([*BASE_PHASES, "step"])  # every stepped row; the residual did not


def test_the_figure_marks_the_change_and_the_baseline(synthetic: pd.DataFrame, baselines: Path) -> None:
    from perfgate.store.baselines import find_baseline

    shown = {s.workload: s for s in dashboard.sections(synthetic, find=split_finder, baselines_root=baselines)}
    resnet, bert = shown["resnet"], shown["bert"]
    assert [p.row for p in resnet.panels] == ["step", "data_wait", "h2d", "forward", "backward", "optimizer",
                                              "residual"]
    stored = find_baseline(baselines, KEY, "resnet").baseline
    assert stored is not None
    # the dashboard shows the time per step, and the baseline's level is of the same statistic
    level = statistics.median(r.per_step_ms["step"] for rec in stored.recordings for r in rec.repeats)
    assert resnet.panels[0].baseline == pytest.approx(level)
    assert all(p.baseline is None for p in bert.panels)  # no baseline stored for bert
    assert any("stored baseline" in n for n in resnet.notes) and not bert.notes

    fig = dashboard.section_figure(resnet)
    assert fig is not None
    step_axes = fig.axes[0]
    lines = step_axes.get_lines()
    vertical = [ln for ln in lines if len(set(ln.get_xdata())) == 1 and ln.get_linestyle() == "-"]
    dashed = [ln for ln in lines if ln.get_linestyle() == "--"]
    assert [ln.get_xdata()[0] for ln in vertical] == [STEP_AT - 0.5]
    assert [ln.get_ydata()[0] for ln in dashed] == [pytest.approx(level)]
    commit = resnet.panels[0].commits[STEP_AT][:8]
    labels = [t.get_text() for t in step_axes.texts]
    assert any(t.startswith(f"{commit} +") for t in labels)
    assert f"baseline {ms(level)}" in step_axes.get_title(loc="left")
    no_baseline = dashboard.section_figure(bert)
    assert no_baseline is not None
    assert not [ln for ln in no_baseline.axes[0].get_lines() if ln.get_linestyle() == "--"]


def test_store_strings_are_escaped_and_never_mathtext(tmp_path: Path) -> None:
    df = history({HOSTILE_NAME: 12}, runs=24, commits=[HOSTILE_COMMIT] * 24, key="../../etc")
    df = df[df["phase"].isin(["step", "forward"])]  # two panels: quicker to draw
    text = dashboard.render_dashboard(df, find=split_finder, baselines_root=tmp_path)
    assert "<script>alert" not in text and "<img src=x" not in text
    page = Page(text)
    assert HOSTILE_NAME in page.text  # shown as written, as text
    assert not {"script"} & {t for t, _ in page.tags}
    assert [a.get("onerror") for t, a in page.tags if t == "img"] == [None]
    step = next(r for r in page.rows if len(r) == 7 and r[2] == "step")
    assert step[3] == "$\\qqq$ab → $\\qqq$ab"
    assert "no baseline looked up" in page.text  # the key is not a plain file name: no path built from it
    (section,) = dashboard.sections(df, find=split_finder)
    fig = dashboard.section_figure(section)
    assert fig is not None
    label = next(t for t in fig.axes[0].texts if t.get_text().startswith("$"))
    assert label.get_text().startswith("$\\qqq$ab +") and label.get_parse_math() is False
    assert dashboard.figure_png(fig).startswith(PNG)  # as mathtext, ``\qqq`` would fail to draw


def test_a_series_too_short_for_the_method_has_no_markers_and_a_note() -> None:
    df = history({"short": 3}, runs=6, commits=[None] * 6)  # no commit known: <NA> in the table
    (section,) = dashboard.sections(df, find=split_finder)
    assert section.panels[0].commits == ("",) * 6
    assert all(p.changes == () and p.note for p in section.panels)
    assert section.notes == (("No change points looked for in step, data_wait, h2d, forward, backward, optimizer, "
                              "residual: 6 runs: too few to look for change points (at least 10 needed)."),)
    fig = dashboard.section_figure(section)
    assert fig is not None
    assert not [ln for ln in fig.axes[0].get_lines() if len(set(ln.get_xdata())) == 1]
    page = Page(dashboard.render_dashboard(df, find=split_finder))
    assert "too few to look for change points" in page.text and "No change point in any series." in page.text
    assert len(page.sections["w-1"]["imgs"]) == 1


def test_each_environment_key_of_a_workload_is_a_section_of_its_own() -> None:
    one = history({"tiny": None}, runs=4, key="cpu-a-torch2.14.1-00000001")
    two = history({"tiny": None}, runs=3, key="cpu-b-torch2.14.1-00000002", seed=8)
    both = pd.concat([one, two.assign(run_id=two["run_id"] + 100)], ignore_index=True).query("phase == 'step'")
    shown = dashboard.sections(both, find=split_finder)
    assert [(s.workload, s.environment_key, s.runs) for s in shown] == [
        ("tiny", "cpu-a-torch2.14.1-00000001", 4), ("tiny", "cpu-b-torch2.14.1-00000002", 3)]


def test_an_empty_history_is_a_page_saying_so(tmp_path: Path) -> None:
    def never(values: Sequence[float]) -> list[Found]:
        raise AssertionError("no series to look at")

    path = dashboard.write_dashboard(pd.DataFrame(columns=COLUMNS), tmp_path / "site", find=never)
    assert path == tmp_path / "site" / "index.html"
    page = Page(path.read_text())
    assert "Nothing is recorded in this history yet" in page.text
    assert not page.sections and not [t for t, _ in page.tags if t == "img"]


def test_a_table_without_the_documented_columns_is_refused(synthetic: pd.DataFrame) -> None:
    with pytest.raises(ValueError, match="lacks the column"):
        dashboard.sections(synthetic.drop(columns=["commit"]), find=split_finder)


def test_an_unwritable_folder_is_one_error_and_nothing_half_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    small = history({"tiny": None}, runs=3).query("phase == 'step'")  # one panel: quick to draw
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    for target in (blocker, blocker / "site"):
        with pytest.raises(UsageError, match="cannot write the dashboard into"):
            dashboard.write_dashboard(small, target, find=split_finder)
    assert blocker.read_text() == "not a folder\n"

    def full_disk(fd: int) -> None:
        raise OSError(28, "No space left on device")

    existing = dashboard.write_dashboard(small, tmp_path / "old", find=split_finder)
    before = existing.read_text()
    monkeypatch.setattr(jsonfile.os, "fsync", full_disk)
    with pytest.raises(UsageError, match="No space left on device"):
        dashboard.write_dashboard(small.assign(workload="bert"), tmp_path / "old", find=split_finder)
    assert existing.read_text() == before and sorted(p.name for p in existing.parent.iterdir()) == ["index.html"]
    with pytest.raises(UsageError):
        dashboard.write_dashboard(small, tmp_path / "new" / "deeper", find=split_finder)
    assert not (tmp_path / "new").exists()  # the folders this write created are gone again


def test_importing_the_dashboard_loads_neither_matplotlib_nor_pandas() -> None:
    code = "import sys, perfgate.report.dashboard; print('matplotlib' in sys.modules, 'pandas' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "False"]


def test_the_real_change_point_method_finds_the_step(synthetic: pd.DataFrame) -> None:
    shown = {s.workload: s for s in dashboard.sections(synthetic)}  # find=None: perfgate's own method
    (change,) = shown["resnet"].panels[0].changes
    assert abs(change.index - STEP_AT) <= 2 and 1.035 < change.ratio < 1.065


CHROMIUM = next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")) if p), None)


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium (chromium-browser, google-chrome) on PATH to draw the page")
def test_a_headless_browser_draws_the_page(tmp_path: Path, page_text: str) -> None:
    import numpy
    from PIL import Image, ImageStat

    index = tmp_path / "site" / "index.html"  # the synthetic history's page, as write_dashboard writes it
    index.parent.mkdir()
    index.write_text(page_text, encoding="utf-8")
    shot = tmp_path / "shot.png"
    done = subprocess.run([str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}", "--window-size=1200,2000",
                           index.resolve().as_uri()], check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert shot.read_bytes().startswith(PNG)
    with Image.open(shot) as raw:
        image = raw.convert("RGB")
    assert image.size == (1200, 2000)
    assert max(ImageStat.Stat(image.convert("L")).stddev) > 20  # not a blank page
    # The figures' points are drawn in POINT_COLOUR, which nothing else on the page uses:
    # finding many such pixels shows the first figure drawn, not a broken image.
    target = tuple(int(dashboard.POINT_COLOUR[i:i + 2], 16) for i in (1, 3, 5))
    distance = numpy.abs(numpy.asarray(image, dtype=int) - numpy.array(target)).sum(axis=2)
    ys, _ = numpy.nonzero(distance < 40)
    assert len(ys) > 500
    top = int(ys.min())
    panel = image.crop((40, top, 1160, min(2000, top + 200))).convert("L")
    assert ImageStat.Stat(panel).stddev[0] > 20  # where the first figure sits is not uniform


def test_each_panel_follows_the_rolling_median_of_the_last_five_runs() -> None:
    from perfgate.report.dashboard import ROLLING_RUNS, sections

    values = [10.0] * 20 + [11.0] * 20
    df = pd.DataFrame({
        "run_id": range(40), "date": pd.date_range("2026-01-01", periods=40, freq="D", tz="UTC"),
        "commit": [f"c{i:02d}" for i in range(40)], "dirty": False, "workload": "w",
        "environment_key": "cpu-x", "device": "cpu", "phase": "step", "per_step_ms": values,
    })
    (section,) = sections(df, find=lambda series: [])
    (panel,) = section.panels
    assert panel.rolling[:2] == (None, None)  # from the third run on
    assert panel.rolling[2] == 10.0 and panel.rolling[21] == 10.0 and panel.rolling[23] == 11.0
    assert panel.rolling[-1] == statistics.median(values[-ROLLING_RUNS:])


def test_every_panel_shows_the_time_per_step_unless_told_and_says_which() -> None:
    df = history({"tiny": None}, runs=4).query("phase in ['step', 'forward']")
    (per_step,) = dashboard.sections(df, find=split_finder)
    (median,) = dashboard.sections(df, find=split_finder, statistic="median")
    for a, b in zip(per_step.panels, median.panels, strict=True):
        assert a.statistic == "per_step" and b.statistic == "median"
        assert a.values == pytest.approx([v * PER_STEP_OVER_MEDIAN for v in b.values])
    fig = dashboard.section_figure(per_step)
    assert fig is not None
    assert fig.axes[0].get_title(loc="left").startswith("step, time per step: latest ")
    assert fig.axes[0].get_ylabel() == "time per step (ms)"
    assert fig.axes[1].get_title(loc="left").startswith("forward, time per step: ")
    text = dashboard.render_dashboard(df, find=split_finder)
    assert "Every panel shows the time per step" in text and "each repeat's time per step;" in text
    text = dashboard.render_dashboard(df, find=split_finder, statistic="median")
    assert "Every panel shows the median step" in text and "each repeat's median step;" in text
    with pytest.raises(ValueError, match="unknown statistic 'mean'"):
        dashboard.sections(df, find=split_finder, statistic="mean")


def test_runs_recorded_before_the_time_per_step_was_kept_are_left_out_and_counted() -> None:
    df = history({"tiny": None}, runs=6).query("phase == 'step'").copy()
    df.loc[df["run_id"] <= 2, "per_step_ms"] = math.nan  # two runs of a version-1 store
    (section,) = dashboard.sections(df, find=split_finder)
    assert section.runs == 4 and len(section.panels[0].values) == 4
    assert any(n.startswith("2 run(s) recorded before the time per step was kept are not shown") for n in section.notes)
    (median,) = dashboard.sections(df, find=split_finder, statistic="median")
    assert median.runs == 6 and not any("recorded before" in n for n in median.notes)


TWO_RUNNERS = ("runner-a", "runner-b")
RUNNER_STEP = 1.08
RUNNER_LEVEL = 1.05


def two_runners() -> tuple[pd.DataFrame, list[str]]:
    """resnet on two runners, the same commits three hours apart, runner-b's level 5% above
    runner-a's, both +8% from the commit at :data:`STEP_AT`."""
    rng = random.Random(11)
    commits = [f"{rng.getrandbits(160):040x}" for _ in range(RUNS)]
    a = history({"resnet": STEP_AT}, commits=commits, step=RUNNER_STEP, runner=TWO_RUNNERS[0])
    b = history({"resnet": STEP_AT}, commits=commits, step=RUNNER_STEP, level=RUNNER_LEVEL, runner=TWO_RUNNERS[1],
                seed=8)
    b = b.assign(run_id=b["run_id"] + 1000, date=b["date"] + timedelta(hours=3),
                 recorded_at=b["recorded_at"] + timedelta(hours=3))
    return pd.concat([a, b], ignore_index=True).astype(DTYPES), commits


def test_two_runners_are_two_series_each_with_the_step_at_the_commit_it_saw() -> None:
    df, commits = two_runners()
    (section,) = dashboard.sections(df)  # perfgate's own change-point method
    assert section.runners == TWO_RUNNERS and section.runs == 2 * RUNS
    assert [(p.row, p.runner) for p in section.panels[:3]] == [("step", "runner-a"), ("step", "runner-b"),
                                                                ("data_wait", "runner-a")]
    a, b = section.rows()[0]
    assert len(a.values) == len(b.values) == RUNS and sorted(a.xs() + b.xs()) == list(range(2 * RUNS))
    assert statistics.median(b.values) / statistics.median(a.values) == pytest.approx(RUNNER_LEVEL, abs=0.01)
    for panel in (a, b):
        (change,) = panel.changes  # found in the runner's own series: the other's level is no step
        assert change.index == STEP_AT and change.commit_after == commits[STEP_AT][:8]
        assert change.ratio == pytest.approx(RUNNER_STEP, abs=0.015)
    assert any(n.startswith("Split by runner: one series per runner (runner-a, runner-b)") for n in section.notes)

    fig = dashboard.section_figure(section)
    assert fig is not None
    step_axes = fig.axes[0]
    legend = step_axes.get_legend()
    assert legend is not None and [t.get_text() for t in legend.get_texts()] == list(TWO_RUNNERS)
    vertical = sorted(ln.get_xdata()[0] for ln in step_axes.get_lines() if len(set(ln.get_xdata())) == 1)
    assert vertical == sorted(x - 0.5 for x in (a.xs()[STEP_AT], b.xs()[STEP_AT]))
    labels = [t.get_text() for t in step_axes.texts]
    assert sorted(labels) == sorted(f"{commits[STEP_AT][:8]} +{100 * (c.ratio - 1):.1f}% {p.runner}"
                                    for p in (a, b) for c in p.changes)

    page = Page(dashboard.render_dashboard(df, find=split_finder))
    steps = {r[2]: r for r in page.rows if len(r) == 8 and r[3] == "step"}  # the change table names the runner
    assert sorted(steps) == list(TWO_RUNNERS)
    for row in steps.values():
        assert row[:2] == ["resnet", KEY]
        assert row[4] == f"{commits[STEP_AT - 1][:8]} → {commits[STEP_AT][:8]}"
        assert 7.0 < float(row[6].rstrip("%")) < 9.0
    assert steps["runner-b"][5] > steps["runner-a"][5]  # runner-b ran the commit three hours later

    (together,) = dashboard.sections(df, find=split_finder, by_runner=False)
    assert together.runners == () and all(p.runner is None for p in together.panels)
    assert all(len(r) == 7 for r in Page(dashboard.render_dashboard(df.query("phase == 'step'"), find=split_finder,
                                                                     by_runner=False)).rows)


def test_one_named_runner_and_runs_without_one_are_one_series() -> None:
    df = history({"tiny": None}, runs=12).query("phase == 'step'").copy()
    df["runner"] = df["runner"].cat.add_categories(["runner-2"])
    df.loc[df["run_id"] <= 4, "runner"] = None  # recorded before the runner was kept
    (section,) = dashboard.sections(df, find=split_finder)
    assert section.runners == () and len(section.panels) == 1
    df.loc[df["run_id"] > 8, "runner"] = "runner-2"
    (section,) = dashboard.sections(df, find=split_finder)
    assert section.runners == ("runner-1", "runner-2", "unknown runner")
    assert [len(p.values) for p in section.panels] == [4, 4, 4]


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium (chromium-browser, google-chrome) on PATH to draw the page")
def test_a_headless_browser_draws_the_two_runners(tmp_path: Path) -> None:
    import numpy
    from PIL import Image

    df, commits = two_runners()
    index = dashboard.write_dashboard(df, tmp_path / "site", find=split_finder)
    run = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
           f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([*run, "--dump-dom", index.resolve().as_uri()], check=False, capture_output=True, text=True,
                         timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    drawn = Page(dom.stdout)
    for runner in TWO_RUNNERS:
        assert any(r[2] == runner and r[4].endswith(commits[STEP_AT][:8]) for r in drawn.rows if len(r) == 8)
        assert runner in drawn.sections["w-1"]["text"]
    shot = tmp_path / "shot.png"
    done = subprocess.run([*run, f"--screenshot={shot}", "--window-size=1200,1600", index.resolve().as_uri()],
                          check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    with Image.open(shot) as raw:
        image = numpy.asarray(raw.convert("RGB"), dtype=int)
    for colour in dashboard.RUNNER_COLOURS[:2]:  # each runner's series is drawn, in its own colour
        target = numpy.array([int(colour[i:i + 2], 16) for i in (1, 3, 5)])
        assert (numpy.abs(image - target).sum(axis=2) < 40).sum() > 300, colour
