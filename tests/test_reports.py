"""The reports: markdown checked whole against a committed golden file, the size limit,
and the terminal and JSON forms carrying the same content."""

from __future__ import annotations

import dataclasses
import json
import os
from datetime import datetime, timezone
from pathlib import Path

import pytest
from factories import ENV, make_result

from perfgate.analysis.compare import compare
from perfgate.analysis.decide import GateConfig, Look
from perfgate.analysis.outcome import Entry, GateOutcome
from perfgate.report.json_report import outcome_to_dict
from perfgate.report.markdown import GITHUB_COMMENT_LIMIT, MARKER, render_markdown
from perfgate.report.terminal import gate_table
from perfgate.store.baselines import Lookup, updated_baseline

GOLDEN = Path(__file__).parent / "golden" / "report.md"
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)


@pytest.fixture(autouse=True)
def no_ci_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("GITHUB_RUN_ID", "GITHUB_REPOSITORY", "CI_PIPELINE_ID", "BUILD_ID"):
        monkeypatch.delenv(var, raising=False)


def baseline_for(name: str, seeds: list[int], env=ENV, params=None):
    baseline = None
    for i, seed in enumerate(seeds):
        result = make_result(name, seed=seed, env=env, params=params)
        baseline = updated_baseline(baseline, result, f"recording {i + 1}", append=True, now=NOW)
    return baseline


def scenario() -> GateOutcome:
    """Five workloads, one of each kind of verdict a report must render."""
    t4 = dataclasses.replace(ENV, device="cuda", gpu_name="Tesla T4", cuda="13.0", cudnn="91000")
    a10 = dataclasses.replace(t4, gpu_name="NVIDIA A10G")
    path = Path("baselines")
    entries = [
        Entry("resnet-slow", make_result("resnet-slow", seed=11, phase_scale={"forward": 1.3}),
              Lookup(baseline_for("resnet-slow", [1, 2, 3]), path / ENV.key() / "resnet-slow.json")),
        Entry("resnet-same", make_result("resnet-same", seed=12),
              Lookup(baseline_for("resnet-same", [4, 5, 6, 7, 8]), path / ENV.key() / "resnet-same.json")),
        Entry("vit-gpu", make_result("vit-gpu", seed=13, env=a10),
              Lookup(None, path / a10.key() / "vit-gpu.json",
                     (baseline_for("vit-gpu", [7], env=t4),))),
        Entry("new-model", make_result("new-model", seed=14), Lookup(None, path / ENV.key() / "new-model.json")),
        Entry("broken", None, None, error="broken: building the workload failed: RuntimeError: CUDA out of memory"),
    ]
    # judged as they are, in one look at the whole α (as ``perfgate compare``); five current repeats each
    return compare(entries, GateConfig(), look=Look.single(5, "repeat"))


def test_markdown_matches_the_golden_file() -> None:
    text = render_markdown(scenario())
    if os.environ.get("PERFGATE_UPDATE_GOLDEN"):
        GOLDEN.write_text(text, encoding="utf-8")
    assert text == GOLDEN.read_text(encoding="utf-8"), (
        "markdown report changed; if intended, rerun with PERFGATE_UPDATE_GOLDEN=1 and review the diff"
    )


def test_golden_scenario_reaches_each_verdict() -> None:
    verdicts = {c.workload: c.verdict.value for c in scenario().comparisons}
    assert verdicts == {"resnet-slow": "REGRESSION", "resnet-same": "PASS", "vit-gpu": "INCOMPARABLE",
                        "new-model": "NO_BASELINE", "broken": "ERROR"}


def test_the_report_says_what_matters() -> None:
    text = render_markdown(scenario())
    assert text.startswith(MARKER)
    top = text.split("###")[0]
    for name in ("resnet-slow", "resnet-same", "vit-gpu", "new-model", "broken"):
        assert f"**{name}**" in top  # one verdict line per workload at the top
    assert "> [!WARNING]" in top and "`new-model`" in top and "NOT judged" in top
    slow = text.split("### ❌ resnet-slow")[1].split("###")[0]
    forward = next(line for line in slow.splitlines() if line.startswith("| forward"))
    assert "⚠️ slower" in forward
    backward = next(line for line in slow.splitlines() if line.startswith("| backward"))
    assert "⚠️" not in backward
    assert "Smallest slowdown this run could detect" in slow and "Noise: run-to-run variation" in slow
    gpu = text.split("### ⛔ vit-gpu")[1].split("###")[0]
    assert "| environment gpu_name | `Tesla T4` | `NVIDIA A10G` |" in gpu
    assert "perfgate rebaseline new-model --device cpu --reason" in text
    assert "perfgate gate resnet-slow --device cpu" in text


def test_the_report_stays_under_the_comment_limit_however_many_workloads() -> None:
    base = baseline_for("w", [1, 2])
    entries = []
    for i in range(400):
        result = dataclasses.replace(make_result("w", seed=100 + i), workload=f"workload-{i:03d}")
        entries.append(Entry(result.workload, result, Lookup(dataclasses.replace(base, workload=result.workload),
                                                              Path(f"baselines/x/workload-{i:03d}.json"))))
    outcome = compare(entries, GateConfig())
    text = render_markdown(outcome)
    assert len(text) <= GITHUB_COMMENT_LIMIT
    assert text.startswith(MARKER)
    small = render_markdown(scenario())
    assert "<details>" in small and "Report cut" not in small
    # a tight limit drops details first, then passing tables, and finally cuts with a note
    without_details = render_markdown(scenario(), limit=len(small) - 1)
    assert "<details>" not in without_details and "| forward" in without_details
    cut = render_markdown(scenario(), limit=1500)
    assert len(cut) <= 1500 and "Report cut to fit the comment limit" in cut


def test_terminal_and_json_carry_the_same_verdicts() -> None:
    outcome = scenario()
    text = gate_table(outcome)
    assert text.startswith(outcome.headline)
    assert "resnet-slow: REGRESSION" in text and "MOVED" in text
    data = outcome_to_dict(outcome)
    json.dumps(data, allow_nan=False)  # strict JSON
    assert data["exit_code"] == 1
    assert [w["verdict"] for w in data["workloads"]] == [c.verdict.value for c in outcome.comparisons]
    slow = data["workloads"][0]
    forward = next(p for p in slow["phases"] if p["phase"] == "forward")
    assert forward["flagged"] is True and forward["estimate"]["ratio"] > 1.2
    assert slow["step"]["min_detectable_slowdown"] > 0


def test_a_failed_trace_is_reported_not_hidden() -> None:
    from perfgate.model.trace import TraceError
    from perfgate.store.traces import TraceOutcome

    outcome = scenario()
    failed = TraceOutcome("resnet-slow", None, TraceError("cannot write trace artifacts to /x: Permission denied"))
    text = render_markdown(outcome, traces={"resnet-slow": failed})
    section = text.split("### ❌ resnet-slow")[1].split("###")[0]
    assert "Profiler trace: not taken (cannot write trace artifacts to /x: Permission denied)." in section
    assert "Profiler trace" not in render_markdown(outcome)


def test_files_are_written_readable(tmp_path: Path) -> None:
    from perfgate.store.jsonfile import write_json_atomic

    old = os.umask(0o022)
    try:
        write_json_atomic(tmp_path / "a.json", {"x": 1})
    finally:
        os.umask(old)
    assert (tmp_path / "a.json").stat().st_mode & 0o777 == 0o644


def test_every_report_shows_both_sides_time_per_step_median_step_and_samples_per_second() -> None:
    from perfgate.report.html import render_html
    from perfgate.report.wording import sides_line, step_statistics_line

    outcome = scenario()
    slow = next(c for c in outcome.comparisons if c.workload == "resnet-slow")
    line = ("baseline → current: time per step 99.61 → 108.8 ms (+9.2% [+6.4, +12.1]); median step 99.57 → 108.7 ms "
            "(+9.2% [+6.4, +12.1]); samples/s 80.32 → 73.53 (-8.5%)")
    assert step_statistics_line(slow) == line
    assert line in gate_table(outcome)  # terminal
    assert line.replace("[", "&#91;").replace("]", "&#93;") in render_markdown(outcome)
    assert "time per step 99.61 → 108.8 ms" in render_html(outcome)
    sides = sides_line(slow)
    assert sides is not None and sides.startswith("Sides: geometric means as the estimate weighs the repeats")
    assert sides in gate_table(outcome) and sides in render_markdown(outcome)
    data = outcome_to_dict(outcome)["workloads"][0]
    assert data["step"]["statistics"]["median"]["estimate"]["ratio"] == pytest.approx(1.092, abs=0.001)
    before, after = data["step"]["sides"]["per_step"]
    assert after / before == pytest.approx(data["step"]["statistics"]["per_step"]["estimate"]["ratio"])
    assert data["step"]["sides"]["samples_per_s"] == pytest.approx([80.32, 73.53], abs=0.01)
    # the raw medians over repeats stay in the JSON for machines
    assert data["current_samples_per_s"] == pytest.approx(73.5, abs=0.1)
    assert data["baseline_samples_per_s"] == pytest.approx(80.33, abs=0.01)
    assert data["modes"] == []
