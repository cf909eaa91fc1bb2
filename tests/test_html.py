"""The HTML report: one self-contained page carrying the markdown report's content, a
figure per workload drawn from the repeats, every outside string escaped, and an atomic
write into a directory."""

from __future__ import annotations

import base64
import dataclasses
import os
import subprocess
import sys
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import pytest
from factories import make_result
from test_reports import scenario

from perfgate.analysis.compare import compare
from perfgate.analysis.decide import GateConfig
from perfgate.analysis.outcome import Entry, GateOutcome
from perfgate.model.verdict import Verdict
from perfgate.model.workload import PHASES
from perfgate.report import html as report
from perfgate.report.markdown import render_markdown
from perfgate.store import jsonfile
from perfgate.store.baselines import Lookup, updated_baseline

CI_URL = "https://github.example/acme/model/actions/runs/4242"
HOSTILE = "<script>alert('pwned')</script>"
PNG = b"\x89PNG\r\n\x1a\n"


class Page(HTMLParser):
    """The parts of a page the tests look at: tags, sections, their images, tables and text."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.ids: set[str] = set()
        self.sections: dict[str, dict] = {}
        self.top_items: list[str] = []
        self._section: dict | None = None
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self._item: list[str] | None = None
        self._text: list[str] = []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.tags.append((tag, a))
        if a.get("id"):
            self.ids.add(a["id"])  # type: ignore[arg-type]
        if tag == "section":
            self._section = {"id": a.get("id"), "imgs": [], "tables": [], "text": []}
        elif self._section is None and tag == "li":
            self._item = []
        elif self._section is not None and tag == "img":
            self._section["imgs"].append(a)
        elif self._section is not None and tag == "table":
            self._section["tables"].append([])
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "section" and self._section is not None:
            self._section["text"] = " ".join("".join(self._section["text"]).split())
            self.sections[self._section["id"]] = self._section
            self._section = None
        elif tag == "li" and self._item is not None:
            self.top_items.append(" ".join("".join(self._item).split()))
            self._item = None
        elif tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "tr" and self._row is not None:
            if self._section is not None and self._section["tables"]:
                self._section["tables"][-1].append(self._row)
            self._row = None

    def handle_data(self, data: str) -> None:
        self._text.append(data)
        for sink in (self._cell, self._item, self._section["text"] if self._section else None):
            if sink is not None:
                sink.append(data)

    @property
    def text(self) -> str:
        return "".join(self._text)

    def section(self, outcome: GateOutcome, workload: str) -> dict:
        index = [c.workload for c in outcome.comparisons].index(workload)
        return self.sections[f"workload-{index + 1}"]


@pytest.fixture(scope="module")
def outcome() -> Iterator[GateOutcome]:
    """The five-workload scenario of the markdown report, its baselines recorded in a CI run
    (so their provenance holds an https URL the page must not link to)."""
    with pytest.MonkeyPatch.context() as mp:
        for var in ("CI_PIPELINE_ID", "BUILD_ID"):
            mp.delenv(var, raising=False)
        mp.setenv("GITHUB_RUN_ID", "4242")
        mp.setenv("GITHUB_REPOSITORY", "acme/model")
        mp.setenv("GITHUB_SERVER_URL", "https://github.example")
        built = scenario()
    yield built


@pytest.fixture(scope="module")
def page_text(outcome: GateOutcome) -> str:
    return report.render_html(outcome)


@pytest.fixture(scope="module")
def page(page_text: str) -> Page:
    return Page(page_text)


def small_outcome(outcome: GateOutcome) -> GateOutcome:
    """The scenario's ERROR workload alone: no figure, quick to render."""
    keep = tuple(c for c in outcome.comparisons if c.workload == "broken")
    return dataclasses.replace(outcome, comparisons=keep)


def test_the_page_is_one_self_contained_document(page_text: str, page: Page) -> None:
    assert page_text.startswith("<!DOCTYPE html>")
    tags = [t for t, _ in page.tags]
    assert tags.count("html") == tags.count("head") == tags.count("body") == tags.count("style") == 1
    assert not {"script", "link", "iframe", "object", "embed"} & set(tags)  # no JavaScript, nothing fetched
    references = [(tag, name, value) for tag, attrs in page.tags for name, value in attrs.items()
                  if name in ("src", "href", "srcset", "data")]
    assert references, "the page has no images or links at all"
    for tag, name, value in references:
        assert value is not None
        if value.startswith("#"):
            assert value[1:] in page.ids, f"link to a missing anchor: {value}"
        else:
            assert tag == "img" and name == "src" and value.startswith("data:image/png;base64,"), value
            assert base64.b64decode(value.split(",", 1)[1]).startswith(PNG)
    assert "url(" not in page_text.split("</style>")[0]  # the CSS fetches nothing either
    # the CI run of a baseline recording is shown, as text only
    assert CI_URL in page.text


def test_every_workload_has_its_verdict_line_and_section(outcome: GateOutcome, page: Page) -> None:
    assert page.text.count(outcome.headline) == 2  # the title and the heading
    # the deciding fact at the top, as in the markdown and the terminal; the whole reason in the section
    assert page.top_items == [f"{c.verdict.value} {c.workload}: {c.headline}" for c in outcome.comparisons]
    assert len(page.sections) == len(outcome.comparisons)
    for c in outcome.comparisons:
        assert page.section(outcome, c.workload)["text"].startswith(f"{c.verdict.value} {c.workload}")
        if c.verdict is not Verdict.NO_BASELINE:  # which says what to run instead
            assert " ".join(c.reason.split()) in " ".join(page.section(outcome, c.workload)["text"].split())
    assert "No baseline for new-model: they were NOT judged and do not fail the gate" in " ".join(page.text.split())


def _markdown_sections(outcome: GateOutcome) -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {}
    for chunk in render_markdown(outcome).split("\n### ")[1:]:
        name = chunk.split(" ", 1)[1].split(":", 1)[0]
        sections[name] = chunk.splitlines()
    return sections


def test_judged_workloads_carry_the_markdown_tables_noise_and_memory(outcome: GateOutcome, page: Page) -> None:
    markdown = _markdown_sections(outcome)
    judged = [c for c in outcome.comparisons if c.time is not None]
    assert [c.workload for c in judged] == ["resnet-slow", "resnet-same"]
    for c in judged:
        lines = markdown[c.workload]
        expected = [[cell.strip().replace("**", "").replace("⚠️ ", "") for cell in line.strip("|").split("|")]
                    for line in lines if line.startswith("| ")]
        section = page.section(outcome, c.workload)
        phase_table = next(t for t in section["tables"] if t[0][0] == "phase")
        assert phase_table == expected
        assert len(phase_table) == 1 + 7  # header, five phases, residual, step
        for prefix in ("Noise:", "Memory ("):
            line = next(line for line in lines if line.startswith(prefix))
            assert line in section["text"]
    slow = page.section(outcome, "resnet-slow")
    forward = next(r for r in slow["tables"][0] if r[0] == "forward")
    assert forward[-1].startswith("slower (q=")


def test_diagnosis_labels_and_provenance_are_shown(outcome: GateOutcome, page: Page) -> None:
    for c in outcome.comparisons:
        text = page.section(outcome, c.workload)["text"]
        for label in c.labels:
            assert f"{label.name} {label.severity}: {label.evidence}" in text
        if c.environment_key:
            assert c.environment_key in text
    slow = outcome.comparisons[0]
    assert slow.baseline is not None
    text = page.section(outcome, "resnet-slow")["text"]
    for rec in slow.baseline.recordings:
        assert rec.provenance.reason in text and rec.provenance.date in text
    assert "CPUTest CPU (2 cores)" in text and "torch2.14.1" in text  # <dt>CPU</dt><dd>Test CPU ...


def test_workloads_without_a_comparison_say_why_and_show_their_run_alone(outcome: GateOutcome, page: Page) -> None:
    gpu = page.section(outcome, "vit-gpu")
    assert ["environment gpu_name", "Tesla T4", "NVIDIA A10G"] in gpu["tables"][0]
    assert "perfgate rebaseline vit-gpu --device cuda" in gpu["text"]
    new = page.section(outcome, "new-model")
    assert "No baseline in this environment, so nothing was judged" in new["text"]
    for section in (gpu, new):
        assert len(section["imgs"]) == 1
        assert "current run only" in section["imgs"][0]["alt"]
    broken = page.section(outcome, "broken")
    assert "could not be measured or compared: broken: building the workload failed" in broken["text"]
    assert broken["imgs"] == []  # no run, nothing to draw


def test_one_plot_per_judged_workload(outcome: GateOutcome, page: Page) -> None:
    images = []
    for c in outcome.comparisons:
        if c.time is None:
            continue
        imgs = page.section(outcome, c.workload)["imgs"]
        assert len(imgs) == 1
        assert imgs[0]["alt"].startswith(f"{c.workload}: per-repeat medians of data_wait, h2d, forward")
        assert "baseline beside current" in imgs[0]["alt"]
        images.append(imgs[0]["src"])
    assert len(images) == 2 and images[0] != images[1]


def _panel_points(ax) -> list[float]:  # noqa: ANN001
    from matplotlib.collections import PathCollection

    return sorted(float(y) for coll in ax.collections if isinstance(coll, PathCollection) for _, y in coll.get_offsets())


def _median_bars(ax) -> list[float]:  # noqa: ANN001
    from matplotlib.collections import LineCollection

    return sorted(float(seg[0][1]) for coll in ax.collections if isinstance(coll, LineCollection)
                  for seg in coll.get_segments())


def test_the_figure_draws_every_repeat_of_both_sides_and_their_medians(outcome: GateOutcome) -> None:
    slow = outcome.comparisons[0]
    assert slow.current is not None and slow.baseline is not None
    fig = report.workload_figure(slow)
    assert fig is not None
    axes = [ax for ax in fig.axes if ax.get_title(loc="left")]
    assert [ax.get_title(loc="left") for ax in axes] == [*PHASES, "residual", "step"]
    rows = {r.phase: r for r in slow.phases}
    for ax in axes:
        row = ax.get_title(loc="left")
        baseline = [v for rec in slow.baseline.recordings for v in rec.values(row)]
        assert _panel_points(ax) == pytest.approx(sorted(baseline + slow.current.per_repeat(row)))
        # the bars mark the sides the panel's estimate compares (perfgate.report.sides), the medians without one
        panel = next(p for p in report.panels(slow) if p.row == row)
        assert (panel.levels is None) == (row == "residual")
        shown = panel.levels or (rows[row].baseline_ms, rows[row].current_ms)
        assert _median_bars(ax) == pytest.approx(sorted(shown))
        low, high = ax.get_ylim()
        assert high - low >= report.MIN_SPAN * rows[row].current_ms  # noise is not blown up to fill the panel
    # the forward slowdown shows: every current repeat lies above every baseline repeat
    forward = axes[PHASES.index("forward")]
    assert min(slow.current.per_repeat("forward")) > max(v for rec in slow.baseline.recordings
                                                         for v in rec.values("forward"))
    assert "+30.3%" in " ".join(t.get_text() for t in forward.texts)


def test_a_measurement_without_phases_is_drawn_and_tabled_as_the_step_alone() -> None:
    zero = {p: 0.0 for p in PHASES}
    base = updated_baseline(None, make_result("micro", seed=1, phase_scale=zero), "first", append=False)
    outcome = compare([Entry("micro", make_result("micro", seed=2, phase_scale=zero), Lookup(base, Path("b.json")))],
                      GateConfig())
    (c,) = outcome.comparisons
    assert c.time is not None
    fig = report.workload_figure(c)
    assert fig is not None and [ax.get_title(loc="left") for ax in fig.axes if ax.axison] == ["step"]
    page = Page(report.render_html(outcome))
    (section,) = page.sections.values()
    assert [row[0] for row in section["tables"][0]] == ["phase", "step"]
    assert len(section["imgs"]) == 1


def test_text_from_results_and_baselines_is_escaped(outcome: GateOutcome) -> None:
    gpu = next(c for c in outcome.comparisons if c.workload == "vit-gpu")
    broken = next(c for c in outcome.comparisons if c.workload == "broken")
    assert gpu.baseline is not None and gpu.labels
    rec = gpu.baseline.recordings[0]
    hostile_baseline = dataclasses.replace(gpu.baseline, recordings=(
        dataclasses.replace(rec, provenance=dataclasses.replace(rec.provenance, reason=HOSTILE)),))
    hostile = (
        dataclasses.replace(broken, workload=f"bench[{HOSTILE}]", reason=f"failed: {HOSTILE}"),
        dataclasses.replace(gpu, current=None, baseline=hostile_baseline, differences={HOSTILE: (HOSTILE, "a&b")},
                            labels=(dataclasses.replace(gpu.labels[0], evidence=HOSTILE),),
                            overrides={"note": HOSTILE}, left_out=(HOSTILE,)),
    )
    text = report.render_html(dataclasses.replace(outcome, comparisons=hostile))
    assert "<script" not in text.lower()
    parsed = Page(text)
    assert not [t for t, _ in parsed.tags if t == "script"]
    # shown as written: the workload name, both reasons, the differences, the label, the provenance, ...
    assert parsed.text.count(HOSTILE) >= 10
    assert "a&b" in parsed.text and "a&amp;b" in text


def test_control_characters_and_a_lone_surrogate_neither_show_nor_break_the_page(outcome: GateOutcome) -> None:
    # JSON lets a result file carry "\ud800", which cannot be written as UTF-8
    broken = next(c for c in outcome.comparisons if c.workload == "broken")
    hostile = dataclasses.replace(broken, reason="bad \ud800 \x1b[31mred\x1b[0m\x00\x07 end\nnext")
    text = report.render_html(dataclasses.replace(outcome, comparisons=(hostile,)))
    text.encode("utf-8")
    assert "\x1b" not in text and "\x00" not in text and "\x07" not in text
    assert "bad \ufffd [31mred[0m end\nnext" in text


def test_the_html_report_is_written_as_index_html_atomically(outcome: GateOutcome, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from perfgate.adapters.publish import publish

    small = small_outcome(outcome)
    target = tmp_path / "report" / "html"
    (path,) = publish(small, {"html": target}).written
    assert path == target / "index.html"
    assert path.read_text(encoding="utf-8") == report.render_html(small)
    assert os.listdir(target) == ["index.html"]
    assert path.stat().st_mode & 0o777 == 0o644

    path.write_text("the previous report", encoding="utf-8")

    def refuse(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(jsonfile.os, "replace", refuse)  # the atomic writer html shares
    (why,) = publish(small, {"html": target}).unwritten
    assert "No space left" in why
    assert path.read_text(encoding="utf-8") == "the previous report"
    assert os.listdir(target) == ["index.html"]  # the temporary file is gone
    monkeypatch.undo()

    def broken_render(_: GateOutcome) -> str:
        raise ValueError("cannot render")

    monkeypatch.setattr(report, "render_html", broken_render)
    with pytest.raises(ValueError, match="cannot render"):
        publish(small, {"html": target})
    assert path.read_text(encoding="utf-8") == "the previous report"
    assert os.listdir(target) == ["index.html"]


@pytest.mark.slow
def test_rendering_is_headless_and_imports_neither_pyplot_nor_torch(tmp_path: Path) -> None:
    tests = Path(__file__).parent
    code = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "from pathlib import Path\n"
        "import perfgate.report.html as report\n"
        "assert 'matplotlib' not in sys.modules, 'importing the renderer loads matplotlib'\n"
        "from factories import make_result\n"
        "from perfgate.store.baselines import Lookup\n"
        "from perfgate.analysis.compare import compare\nfrom perfgate.analysis.outcome import Entry\n"
        "from perfgate.analysis.decide import GateConfig\n"
        "outcome = compare([Entry('w', make_result('w'), Lookup(None, Path('b.json')))], GateConfig())\n"
        "from perfgate.adapters.publish import publish\n"
        "(path,) = publish(outcome, {'html': Path(sys.argv[2])}).written\n"
        "assert 'data:image/png;base64,' in path.read_text()\n"
        "print(sorted(m for m in ('matplotlib.pyplot', 'torch') if m in sys.modules))\n"
    )
    # An interactive backend and no display: only a renderer that never touches pyplot works here.
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env["MPLBACKEND"] = "TkAgg"
    out = subprocess.run([sys.executable, "-c", code, str(tests), str(tmp_path)], capture_output=True, text=True,
                         env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
