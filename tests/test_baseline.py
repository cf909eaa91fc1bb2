"""perfgate.model.baseline: the committed store of reference measurements.

A baseline is ``baselines/<env-key>/<workload>.json``: reviewable JSON with provenance,
per-repeat summaries and the raw series they came from. It grows by ``--append`` only
when the new recording measures the same thing, is written atomically, and a bad file is
one clear line naming the file and the problem.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from datetime import datetime, timezone
from pathlib import Path
from statistics import median
from typing import Any

import pytest
from factories import ENV, make_result

import perfgate.store.jsonfile
from perfgate.analysis.compare import compare
from perfgate.analysis.decide import GateConfig
from perfgate.analysis.outcome import Entry
from perfgate.analysis.stats import log_ratio
from perfgate.model.baseline import BASELINE_KIND, BASELINE_SCHEMA_VERSION, Baseline, baseline_from_dict
from perfgate.model.repeat import Repeat
from perfgate.model.errors import EXIT_ERROR, FileFormatError, UsageError
from perfgate.model.result import ROWS
from perfgate.model.verdict import Verdict
from perfgate.model.version import __version__
from perfgate.model.workload import PHASES
from perfgate.store.baselines import (
    Lookup,
    baseline_path,
    find_baseline,
    load_baseline,
    save_baseline,
    updated_baseline,
)

NOW = datetime(2026, 12, 1, 9, 30, 15, tzinfo=timezone.utc)
CI_VARS = ("GITHUB_RUN_ID", "GITHUB_REPOSITORY", "GITHUB_SERVER_URL", "CI_PIPELINE_ID", "BUILD_ID")


@pytest.fixture(autouse=True)
def _no_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests may run under CI: provenance must not pick up the real run id."""
    for name in CI_VARS:
        monkeypatch.delenv(name, raising=False)


def new_baseline(reason: str = "initial", **kwargs: Any) -> Baseline:
    return updated_baseline(None, make_result(**kwargs), reason, append=False, now=NOW)


def saved(tmp_path: Path, baseline: Baseline | None = None) -> Path:
    return save_baseline(baseline or new_baseline(), tmp_path / "baselines")


# --- the file on disk -----------------------------------------------------------------------


def test_saved_where_the_environment_key_and_workload_say(tmp_path: Path) -> None:
    path = saved(tmp_path)
    assert path == tmp_path / "baselines" / ENV.key() / "tiny.json"
    assert path == baseline_path(tmp_path / "baselines", ENV.key(), "tiny")


def test_file_is_sorted_indented_with_trailing_newline_and_versioned(tmp_path: Path) -> None:
    text = saved(tmp_path).read_text(encoding="utf-8")
    data = json.loads(text)
    assert text == json.dumps(data, sort_keys=True, indent=2) + "\n"
    assert not text.endswith("\n\n")
    assert data["kind"] == BASELINE_KIND
    assert data["schema_version"] == BASELINE_SCHEMA_VERSION == 3
    assert data["workload"] == "tiny" and data["workload_version"] == 1
    assert data["environment_key"] == ENV.key()
    assert data["params"] == {"batch_size": 8, "steps": 10}


def test_raw_series_are_one_reviewable_line_precise_enough_to_derive_the_medians(tmp_path: Path) -> None:
    data = json.loads(saved(tmp_path).read_text(encoding="utf-8"))
    repeat = data["recordings"][0]["repeats"][0]
    raw = repeat["phases_ms"]["forward"]
    assert isinstance(raw, str) and "\n" not in raw
    values = raw.split()
    assert len(values) == 10
    assert all(len(v.replace(".", "").lstrip("0")) <= 9 for v in values)  # nine significant digits at most
    # the medians and the time per step written beside them are those of the written values
    assert statistics.median(float(v) for v in values) == repeat["medians_ms"]["forward"]
    assert math.fsum(float(v) for v in values) / len(values) == repeat["per_step_ms"]["forward"]


def test_provenance_records_commit_date_reason_and_version(tmp_path: Path) -> None:
    prov = load_baseline(saved(tmp_path, new_baseline("  first T4 runner  "))).recordings[0].provenance
    assert prov.commit == ENV.git_commit == "0123abcd"
    assert prov.dirty is False
    assert prov.date == "2026-12-01T09:30:15+00:00"
    assert prov.reason == "first T4 runner"
    assert prov.perfgate_version == __version__
    assert prov.ci_run_id is None and prov.ci_run_url is None


def test_provenance_records_the_ci_run_when_the_environment_names_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITHUB_RUN_ID", "987654")
    monkeypatch.setenv("GITHUB_REPOSITORY", "acme/trainer")
    monkeypatch.setenv("GITHUB_SERVER_URL", "https://git.acme.example")
    prov = load_baseline(saved(tmp_path)).recordings[0].provenance
    assert prov.ci_run_id == "987654"
    assert prov.ci_run_url == "https://git.acme.example/acme/trainer/actions/runs/987654"


def test_ci_run_url_defaults_to_github_com(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITHUB_RUN_ID", "42")
    monkeypatch.setenv("GITHUB_REPOSITORY", "acme/trainer")
    prov = new_baseline().recordings[0].provenance
    assert prov.ci_run_url == "https://github.com/acme/trainer/actions/runs/42"


def test_an_empty_reason_is_refused() -> None:
    with pytest.raises(UsageError, match="--reason"):
        new_baseline("   ")


def test_every_repeat_keeps_summaries_of_every_row_and_the_raw_series(tmp_path: Path) -> None:
    result = make_result(repeats=4, peak=2_000_000)
    baseline = load_baseline(saved(tmp_path, updated_baseline(None, result, "r", append=False, now=NOW)))
    (recording,) = baseline.recordings
    assert len(recording.repeats) == 4
    for rep in recording.repeats:
        assert set(rep.medians_ms) == set(ROWS) == set(rep.per_step_ms)
        assert set(rep.shares) == set(ROWS)
        assert set(rep.phases_ms) >= {*PHASES, "step"}
        assert all(len(series) == 10 for series in rep.phases_ms.values())
        assert rep.peak_memory_bytes == 2_000_000
        assert rep.samples_per_s > 0
    assert recording.peak_memory_kind == "cpu_peak_rss"
    assert recording.environment == ENV
    assert recording.data["kind"] == "synthetic"


def test_medians_recomputed_from_the_stored_raw_series_match_the_stored_medians(tmp_path: Path) -> None:
    baseline = load_baseline(saved(tmp_path))
    rounding = 0.0005  # raw values are written with 3 decimals (1 µs)
    for rep in baseline.recordings[0].repeats:
        for row in (*PHASES, "step"):
            assert abs(median(rep.phases_ms[row]) - rep.medians_ms[row]) <= rounding + 1e-9, row
        # the residual is the step minus five phases: six roundings at most
        residual = [s - sum(p) for s, p in zip(rep.phases_ms["step"], zip(*(rep.phases_ms[q] for q in PHASES), strict=True), strict=True)]
        assert abs(median(residual) - rep.medians_ms["residual"]) <= 6 * rounding + 1e-9
        for phase in PHASES:
            share = sum(rep.phases_ms[phase]) / sum(rep.phases_ms["step"])
            assert share == pytest.approx(rep.shares[phase], abs=1e-4)
            assert sum(rep.phases_ms[phase]) / 10 == pytest.approx(rep.per_step_ms[phase], rel=1e-12)


def test_saving_and_loading_round_trips(tmp_path: Path) -> None:
    baseline = updated_baseline(new_baseline(), make_result(seed=2), "second day", append=True, now=NOW)
    loaded = load_baseline(saved(tmp_path, baseline))
    assert loaded.to_dict() == baseline.to_dict()
    assert loaded.recording_values("step") == baseline.recording_values("step")
    assert loaded.peak_memory() == [1_000_000.0] * 10


# --- rebaseline and --append ----------------------------------------------------------------


def test_append_adds_a_recording_from_another_day() -> None:
    first = new_baseline("day 1")
    second = updated_baseline(first, make_result(seed=2), "day 2", append=True, now=NOW)
    assert [r.provenance.reason for r in second.recordings] == ["day 1", "day 2"]
    assert len(second.recording_values("step")) == 2
    assert second.recordings[0] == first.recordings[0]


def test_without_append_a_rebaseline_replaces_the_recordings() -> None:
    first = new_baseline("day 1")
    replaced = updated_baseline(first, make_result(seed=2, params={"batch_size": 16, "steps": 10}),
                                "bigger batch", append=False, now=NOW)
    assert [r.provenance.reason for r in replaced.recordings] == ["bigger batch"]
    assert replaced.params == {"batch_size": 16, "steps": 10}


def test_append_to_nothing_starts_a_baseline() -> None:
    baseline = updated_baseline(None, make_result(), "first", append=True, now=NOW)
    assert len(baseline.recordings) == 1


def test_append_accepts_a_new_commit_on_the_same_environment() -> None:
    moved = dataclasses.replace(ENV, git_commit="feedbeef", git_dirty=True, gpu_driver="999.1")
    baseline = updated_baseline(new_baseline(), make_result(env=moved), "after merge", append=True, now=NOW)
    assert [r.provenance.commit for r in baseline.recordings] == ["0123abcd", "feedbeef"]


def test_append_keeps_at_most_max_recordings_dropping_the_oldest() -> None:
    baseline = new_baseline("day 1")
    for day in range(2, 6):
        baseline = updated_baseline(baseline, make_result(seed=day), f"day {day}", append=True,
                                    max_recordings=3, now=NOW)
    assert [r.provenance.reason for r in baseline.recordings] == ["day 3", "day 4", "day 5"]


@pytest.mark.parametrize(("change", "named"), [
    ({"version": 2}, "workload version 1 -> 2"),
    ({"params": {"batch_size": 16, "steps": 10}}, "batch_size 8 -> 16"),
    ({"params": {"batch_size": 8, "steps": 10, "channels_last": True}}, "channels_last None -> True"),
    ({"env": dataclasses.replace(ENV, torch="2.15.0")}, "environment cpu-test-cpu-torch2.14.1-"),
])
def test_append_refuses_a_recording_of_something_else_and_says_what_differs(
        change: dict[str, Any], named: str) -> None:
    with pytest.raises(UsageError) as info:
        updated_baseline(new_baseline(), make_result(**change), "mixed", append=True, now=NOW)
    message = str(info.value)
    assert named in message
    assert "tiny" in message and "without --append" in message
    assert "\n" not in message


# --- throttled repeats ----------------------------------------------------------------------


def throttled_baseline(throttled: list[list[bool]], reasons: tuple[str, ...] | None = ("hw_thermal_slowdown",)
                       ) -> Baseline:
    """One recording per row, one repeat per flag, the flagged repeats throttled for ``reasons``
    (None: marked throttled without a reason, as perfgate wrote them before it kept the reasons)."""
    baseline = None
    for day, flags in enumerate(throttled):
        baseline = updated_baseline(baseline, make_result(seed=day, repeats=len(flags)), f"day {day}",
                                    append=True, now=NOW)
    assert baseline is not None
    recordings = tuple(
        dataclasses.replace(rec, repeats=tuple(
            dataclasses.replace(r, slowdown_reasons=(reasons if f else ()))
            for r, f in zip(rec.repeats, flags, strict=True)))
        for rec, flags in zip(baseline.recordings, throttled, strict=True))
    return dataclasses.replace(baseline, recordings=recordings)


def test_throttled_repeats_are_left_out_and_counted() -> None:
    kept, dropped = throttled_baseline([[False, True, False], [False, False]]).without_throttled()
    assert [len(rec.repeats) for rec in kept.recordings] == [2, 2]
    assert dropped and dropped.throttled == 1 and dropped.short_recordings == ()
    assert dropped.messages == ("1 baseline repeat(s) left out: thermal (hw_thermal_slowdown)",)
    _, old = throttled_baseline([[False, True, False], [False, False]], reasons=None).without_throttled()
    assert old.throttled == 1 and "reason not recorded" in old.messages[0]
    clean, nothing = throttled_baseline([[False, False]]).without_throttled()
    assert not nothing and nothing.messages == () and len(clean.recordings) == 1


def test_a_recording_left_with_one_repeat_is_dropped_when_others_remain() -> None:
    """One repeat has no run-to-run variation: log_ratio refuses it, and the whole
    workload used to end in ERROR although the other recordings could judge it."""
    kept, dropped = throttled_baseline([[False, False, False], [True, False, True], [False, True, False]]
                                       ).without_throttled()
    assert [len(rec.repeats) for rec in kept.recordings] == [3, 2]
    assert [rec.provenance.reason for rec in kept.recordings] == ["day 0", "day 2"]
    assert dropped.throttled == 3 and dropped.short_recordings == (2,)
    assert dropped.messages == (
        "3 baseline repeat(s) left out: thermal (hw_thermal_slowdown)",
        "baseline recording 2 left out: 1 repeat was left once its throttled repeats were left out, "
        "and a recording needs at least 2",
    )
    est = log_ratio([100.0, 101.0, 99.0], kept.recording_values("step"))
    assert est.recordings == 2
    # and the gate judges the workload, saying what it left out (three of nine is more than
    # the quarter the default lets go: ERROR, runner unfit; allowed here)
    stored = throttled_baseline([[False, False, False], [True, False, True], [False, True, False]])
    entry = Entry("tiny", make_result(seed=9, repeats=3), Lookup(stored, Path("tiny.json")))
    (unfit,) = compare([entry], GateConfig()).comparisons
    assert unfit.verdict is Verdict.ERROR and unfit.reason.startswith("runner unfit: 3 of 9 baseline repeats")
    (c,) = compare([entry], GateConfig(max_left_out=0.4)).comparisons
    assert c.verdict is not Verdict.ERROR, c.reason
    assert c.time is not None and c.time.estimate.recordings == 2
    assert c.left_out[-2:] == dropped.messages


def test_a_lone_recording_left_with_one_repeat_is_kept_for_the_error_to_say_why() -> None:
    kept, dropped = throttled_baseline([[True, False, True]]).without_throttled()
    assert [len(rec.repeats) for rec in kept.recordings] == [1]
    assert dropped.short_recordings == () and dropped.throttled == 2
    everything, _ = throttled_baseline([[True, True]]).without_throttled()
    assert everything.recordings == ()


# --- atomic writes, read-only reads ---------------------------------------------------------


def test_an_interrupted_write_leaves_the_old_baseline_intact_and_no_temporary_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = saved(tmp_path)
    before = path.read_bytes()

    def interrupted(src: object, dst: object) -> None:
        raise KeyboardInterrupt("power cut during rename")

    monkeypatch.setattr(perfgate.store.jsonfile.os, "replace", interrupted)
    newer = updated_baseline(load_baseline(path), make_result(seed=7), "day 2", append=True, now=NOW)
    with pytest.raises(KeyboardInterrupt):
        save_baseline(newer, tmp_path / "baselines")
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == ["tiny.json"]


def test_an_interrupted_first_write_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(src: object, dst: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(perfgate.store.jsonfile.os, "replace", failing)
    with pytest.raises(OSError, match="disk full"):
        saved(tmp_path)
    assert list((tmp_path / "baselines" / ENV.key()).iterdir()) == []


def test_a_baseline_that_cannot_be_serialised_does_not_touch_the_old_file(tmp_path: Path) -> None:
    path = saved(tmp_path)
    before = path.read_bytes()
    good = new_baseline()
    rep = good.recordings[0].repeats[0]
    broken_rep = dataclasses.replace(rep, phases_ms={**rep.phases_ms, "forward": (math.nan,) * rep.steps})
    broken_rec = dataclasses.replace(good.recordings[0], repeats=(broken_rep, *good.recordings[0].repeats[1:]))
    with pytest.raises(ValueError):
        save_baseline(dataclasses.replace(good, recordings=(broken_rec,)), tmp_path / "baselines")
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == ["tiny.json"]


def test_reading_never_modifies_the_store(tmp_path: Path) -> None:
    path = saved(tmp_path)
    root = tmp_path / "baselines"
    stamp = (path.read_bytes(), path.stat().st_mtime_ns)
    listing = sorted(p.relative_to(root) for p in root.rglob("*"))
    load_baseline(path)
    find_baseline(root, ENV.key(), "tiny")
    find_baseline(root, "cuda-tesla-t4-torch2.14.1-00000000", "tiny")
    find_baseline(root, ENV.key(), "absent")
    assert (path.read_bytes(), path.stat().st_mtime_ns) == stamp
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == listing


# --- bad files: one line naming the file and the problem -----------------------------------


def good_dict() -> dict[str, Any]:
    return new_baseline().to_dict()


def first_repeat(data: dict[str, Any]) -> dict[str, Any]:
    return data["recordings"][0]["repeats"][0]


def write(tmp_path: Path, content: str | dict[str, Any] | list[Any]) -> Path:
    path = tmp_path / "cpu-x" / "tiny.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    text = content if isinstance(content, str) else json.dumps(content, allow_nan=True)
    path.write_text(text, encoding="utf-8")
    return path


def refused(path: Path, *words: str) -> str:
    with pytest.raises(FileFormatError) as info:
        load_baseline(path)
    message = str(info.value)
    assert info.value.exit_code == EXIT_ERROR == 2
    assert message.startswith(f"{path}: ")
    assert "\n" not in message
    for word in words:
        assert word in message
    return message


def test_empty_file(tmp_path: Path) -> None:
    refused(write(tmp_path, ""), "empty")
    refused(write(tmp_path, "  \n\n"), "empty")


def test_truncated_file(tmp_path: Path) -> None:
    text = perfgate.store.jsonfile.dumps(good_dict())
    refused(write(tmp_path, text[: len(text) // 2]), "not valid JSON", "truncated")


def test_not_json(tmp_path: Path) -> None:
    refused(write(tmp_path, "baseline: yes\n"), "not valid JSON")


def test_a_list_instead_of_an_object(tmp_path: Path) -> None:
    refused(write(tmp_path, [good_dict()]), "JSON object", "list")


def test_a_result_file_instead_of_a_baseline(tmp_path: Path) -> None:
    refused(write(tmp_path, make_result().to_dict()), "not a perfgate.baseline file", "perfgate.run-result")


def test_missing_recordings(tmp_path: Path) -> None:
    data = good_dict()
    del data["recordings"]
    refused(write(tmp_path, data), "missing field 'recordings'")


def test_no_recordings(tmp_path: Path) -> None:
    refused(write(tmp_path, {**good_dict(), "recordings": []}), "at least one recording")


def test_a_recording_without_repeats(tmp_path: Path) -> None:
    data = good_dict()
    data["recordings"][0]["repeats"] = []
    refused(write(tmp_path, data), "recordings[0].repeats", "at least one repeat")


def test_a_newer_schema_version_asks_for_an_upgrade(tmp_path: Path) -> None:
    message = refused(write(tmp_path, {**good_dict(), "schema_version": BASELINE_SCHEMA_VERSION + 1}),
                      "upgrade perfgate")
    assert f"schema version {BASELINE_SCHEMA_VERSION + 1}" in message


def test_a_missing_schema_version(tmp_path: Path) -> None:
    data = good_dict()
    del data["schema_version"]
    refused(write(tmp_path, data), "schema_version")


def test_nan_in_a_median(tmp_path: Path) -> None:
    data = good_dict()
    first_repeat(data)["medians_ms"]["forward"] = math.nan
    refused(write(tmp_path, data), "non-finite", "NaN")


def test_an_overflowing_median_is_non_finite(tmp_path: Path) -> None:
    data = good_dict()
    first_repeat(data)["medians_ms"]["step"] = 12345.0
    text = json.dumps(data).replace("12345.0", "1e999")
    refused(write(tmp_path, text), "recordings[0].repeats[0].medians_ms.step", "non-finite")


@pytest.mark.parametrize("bad", ["nan", "inf", "-inf"])
def test_non_finite_value_in_a_raw_series(tmp_path: Path, bad: str) -> None:
    data = good_dict()
    first_repeat(data)["phases_ms"]["backward"] = f"60.100 {bad} 59.900"
    refused(write(tmp_path, data), "recordings[0].repeats[0].phases_ms.backward[1]", "non-finite")


def test_words_in_a_raw_series(tmp_path: Path) -> None:
    data = good_dict()
    first_repeat(data)["phases_ms"]["forward"] = "30.0 thirty"
    refused(write(tmp_path, data), "phases_ms.forward", "not a list of numbers")


@pytest.mark.parametrize("row", ["forward", "step"])
def test_negative_median_duration(tmp_path: Path, row: str) -> None:
    data = good_dict()
    first_repeat(data)["medians_ms"][row] = -1.5
    refused(write(tmp_path, data), f"recordings[0].repeats[0].medians_ms.{row}", "negative duration")


def test_a_negative_residual_median_is_legitimate(tmp_path: Path) -> None:
    # CUDA repeats recorded before the stall was booked on its own step timed the data wait
    # on the host, overlapping the device phases: the rest of the step can be < 0 there.
    data = good_dict()
    repeat = first_repeat(data)
    phases = [[float(v) for v in repeat["phases_ms"][p].split()] for p in PHASES]
    step = [round(sum(values) - 0.25, 3) for values in zip(*phases, strict=True)]  # the phases overlap by 0.25 ms
    repeat["phases_ms"]["step"] = " ".join(f"{v:.3f}" for v in step)
    derived = Repeat(phases_ms={k: tuple(float(v) for v in s.split()) for k, s in repeat["phases_ms"].items()},
                     samples_per_s=1.0, peak_memory_bytes=None)
    repeat["medians_ms"], repeat["per_step_ms"], repeat["shares"] = derived.medians_ms, derived.per_step_ms, derived.shares
    loaded = load_baseline(write(tmp_path, data)).recordings[0].repeats[0]
    assert loaded.medians_ms["residual"] == pytest.approx(-0.25, abs=1e-3)


def test_medians_that_are_not_those_of_the_raw_values_are_refused(tmp_path: Path) -> None:
    # The raw values are the data: a median edited by hand does not pass for one.
    data = good_dict()
    first_repeat(data)["medians_ms"]["forward"] += 1.0
    refused(write(tmp_path, data), "medians_ms.forward", "is not the median of the raw values")


def test_negative_duration_in_a_raw_series(tmp_path: Path) -> None:
    data = good_dict()
    first_repeat(data)["phases_ms"]["data_wait"] = "2.000 -0.500 2.100"
    refused(write(tmp_path, data), "phases_ms.data_wait[1]", "negative duration")


def test_negative_peak_memory(tmp_path: Path) -> None:
    data = good_dict()
    first_repeat(data)["peak_memory_bytes"] = -4096
    refused(write(tmp_path, data), "recordings[0].repeats[0].peak_memory_bytes")


def test_a_missing_median_row(tmp_path: Path) -> None:
    data = good_dict()
    del first_repeat(data)["medians_ms"]["optimizer"]
    refused(write(tmp_path, data), "recordings[0].repeats[0].medians_ms.optimizer")


def test_an_environment_missing_required_fields(tmp_path: Path) -> None:
    data = good_dict()
    data["recordings"][0]["environment"] = {"device": "cpu"}
    refused(write(tmp_path, data), "recordings[0].environment")


def test_a_missing_file_and_a_directory(tmp_path: Path) -> None:
    refused(tmp_path / "nowhere.json", "not found")
    (tmp_path / "dir.json").mkdir()
    refused(tmp_path / "dir.json", "directory")


# --- finding a baseline ---------------------------------------------------------------------


T4 = dataclasses.replace(ENV, device="cuda", gpu_name="Tesla T4", cuda="12.4", cudnn="90100")
A10G = dataclasses.replace(T4, gpu_name="NVIDIA A10G")


def test_find_baseline_returns_the_one_for_this_environment(tmp_path: Path) -> None:
    root = tmp_path / "baselines"
    path = save_baseline(new_baseline(), root)
    save_baseline(new_baseline(env=T4), root)
    lookup = find_baseline(root, ENV.key(), "tiny")
    assert lookup.path == path
    assert lookup.baseline is not None and lookup.baseline.environment_key == ENV.key()
    assert lookup.other_environments == ()


def test_find_baseline_lists_other_environments_holding_the_workload(tmp_path: Path) -> None:
    root = tmp_path / "baselines"
    save_baseline(new_baseline(env=T4), root)
    save_baseline(new_baseline(), root)
    save_baseline(new_baseline(env=T4, workload="other"), root)
    lookup = find_baseline(root, A10G.key(), "tiny")
    assert lookup.baseline is None
    assert lookup.path == root / A10G.key() / "tiny.json"
    assert sorted(b.environment_key for b in lookup.other_environments) == sorted([T4.key(), ENV.key()])
    assert all(b.workload == "tiny" for b in lookup.other_environments)


def test_find_baseline_with_nothing_stored(tmp_path: Path) -> None:
    for root in (tmp_path / "missing", tmp_path):
        lookup = find_baseline(root, ENV.key(), "tiny")
        assert lookup.baseline is None and lookup.other_environments == ()


def test_find_baseline_reports_a_bad_file_instead_of_skipping_it(tmp_path: Path) -> None:
    root = tmp_path / "baselines"
    path = save_baseline(new_baseline(), root)
    path.write_text("{", encoding="utf-8")
    with pytest.raises(FileFormatError, match="not valid JSON"):
        find_baseline(root, ENV.key(), "tiny")


def test_a_baseline_written_before_the_medians_were_derived_still_loads() -> None:
    # Written by the earlier writer: raw values to 0.001 ms, medians of the unrounded values.
    # They are derived again from the raw values on load, within the rounding.
    path = Path(__file__).parent / "fixtures" / "baselines" / "written-to-0.001-ms.json"
    stored = json.loads(path.read_text())["recordings"][0]["repeats"]
    loaded = load_baseline(path).recordings[0].repeats
    assert len(loaded) == len(stored) > 1
    for was, now in zip(stored, loaded, strict=True):
        assert all(len(v.split(".")[1]) == 3 for v in was["raw_ms"]["forward"].split())
        residual = [s - sum(p) for s, p in zip(now.phases_ms["step"], zip(*(now.phases_ms[q] for q in PHASES), strict=True), strict=True)]
        for row in ROWS:
            assert now.medians_ms[row] == pytest.approx(was["medians_ms"][row], abs=0.004)
            derived = statistics.median(residual if row == "residual" else now.phases_ms[row])
            assert now.medians_ms[row] == derived


# --- the migration from schema 1 ------------------------------------------------------------

V1 = Path(__file__).parent / "fixtures" / "schema_v1"


def test_a_schema_1_baseline_written_by_the_previous_code_loads_and_judges_as_it_did(tmp_path: Path) -> None:
    # tests/fixtures/schema_v1 was written by the code of 1c356b8 (make_v1.py beside it)
    path = tmp_path / "tiny.json"
    path.write_bytes((V1 / "baseline-tiny.json").read_bytes())
    before = path.read_bytes()
    raw = json.loads(before)
    assert raw["schema_version"] == 1 and "raw_ms" in raw["recordings"][0]["repeats"][0]
    baseline = load_baseline(path)
    assert path.read_bytes() == before  # read in memory, never rewritten
    first = baseline.recordings[0].repeats
    # repeat 2 slowed down for heat; repeat 1 only hit the power cap, which never counts
    assert [r.slowdown_reasons for r in first] == [(), (), ("hw_thermal_slowdown",), ()]
    for was, now in zip(raw["recordings"][0]["repeats"], first, strict=True):
        assert now.medians_ms == pytest.approx(was["medians_ms"])
        assert now.shares == pytest.approx(was["shares"], abs=1e-12)
        step = [float(v) for v in was["raw_ms"]["step"].split()]
        assert now.per_step_ms["step"] == pytest.approx(sum(step) / len(step))
    # what it writes back is the current schema (3) and reads as the same baseline
    again = baseline_from_dict(json.loads(json.dumps(baseline.to_dict())))
    assert baseline.to_dict()["schema_version"] == 3 and again == baseline and baseline.day_variation is None
    assert "raw_ms" not in json.dumps(baseline.to_dict()) and "throttled" not in json.dumps(baseline.to_dict())


def test_a_schema_1_repeat_marked_throttled_without_reasons_stays_left_out() -> None:
    data = json.loads((V1 / "baseline-tiny.json").read_text())
    rep = data["recordings"][1]["repeats"][0]
    del rep["slowdown_reasons"]
    rep["throttled"] = True
    loaded = baseline_from_dict(data).recordings[1].repeats[0]
    assert loaded.slowdown_reasons is None and loaded.throttled
    assert "reason not recorded" in (loaded.throttle_reason or "")


@pytest.mark.parametrize(("edit", "words"), [
    (lambda r: r.update(raw_ms={"step": "1.0 x"}), ("phases_ms.step", "not a list of numbers")),
    (lambda r: r.update(raw_ms="no"), ("phases_ms", "expected an object")),
    (lambda r: r["raw_ms"].update(step="1e999 1.0"), ("phases_ms.step", "non-finite")),
    (lambda r: r["medians_ms"].update(step=1.0), ("medians_ms.step", "is not the median")),
    (lambda r: r.pop("medians_ms"), ("medians_ms",)),
    (lambda r: r["raw_ms"].pop("forward"), ("some phases but not of forward",)),
])
def test_a_schema_1_baseline_the_migration_cannot_read_is_refused_with_its_path(
        tmp_path: Path, edit: Any, words: tuple[str, ...]) -> None:
    data = json.loads((V1 / "baseline-tiny.json").read_text())
    edit(data["recordings"][0]["repeats"][0])
    path = write(tmp_path, data)
    before = path.read_bytes()
    refused(path, *words)
    assert path.read_bytes() == before


def test_a_result_written_by_the_previous_code_loads() -> None:
    from perfgate.store.results import load_result

    raw = json.loads((V1 / "result-tiny.json").read_text())
    result = load_result(V1 / "result-tiny.json")
    assert len(result.repeats) == 3
    for was, now in zip(raw["repeats"], result.repeats, strict=True):
        step = was["phases_ms"]["step"]
        assert now.per_step_ms["step"] == pytest.approx(sum(step) / len(step))
        assert now.medians_ms["step"] == statistics.median(step)
