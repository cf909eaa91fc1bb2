"""The runner's day-to-day variation, measured from the history store and recorded with the
baseline (``perfgate rebaseline --day-history``), and what the stored gate makes of it."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
from factories import ENV, make_result

from perfgate.adapters.cli import main
from perfgate.analysis.compare import compare, day_term
from perfgate.analysis.day_variation import day_variation
from perfgate.analysis.decide import GateConfig
from perfgate.analysis.history import load
from perfgate.analysis.outcome import Entry
from perfgate.analysis.simulate import Noise, Scenario, simulate
from perfgate.analysis.stats.estimate import DEFAULT_ASSUMED_DAY_SD_LOG, DEFAULT_DAY_PRIOR_DF
from perfgate.model.baseline import BASELINE_SCHEMA_VERSION, MIN_DAY_RUNS, Baseline, DayVariation, baseline_from_dict
from perfgate.model.errors import UsageError
from perfgate.model.repeat import MEDIAN, PER_STEP
from perfgate.model.result import RunResult
from perfgate.model.verdict import Verdict
from perfgate.report.markdown import noise_line
from perfgate.store import history as store
from perfgate.store.baselines import Lookup, load_baseline, save_baseline, updated_baseline
from perfgate.store.results import save_result

DAY = DayVariation({PER_STEP: 0.004, MEDIAN: 0.005}, 12, "2026-11-01", "2026-11-30", "h.sqlite")


def run_at(day: int, scale: float, *, workload: str = "tiny", dirty: bool = False, version: int = 1,
           seed: int = 0) -> RunResult:
    env = dataclasses.replace(ENV, git_commit=f"{day:08x}", git_dirty=dirty)
    result = make_result(workload, scale=scale, seed=seed + day, env=env, version=version)
    return dataclasses.replace(result, created_at=f"2026-11-{day:02d}T10:00:00+00:00")


def history_with(tmp_path: Path, runs: list[RunResult]) -> Path:
    db = tmp_path / "h.sqlite"
    for i, run in enumerate(runs):
        folder = tmp_path / f"run{i}"
        folder.mkdir(parents=True)
        save_result(run, folder / f"{run.workload}.json")
        store.record(db, store.recordings_of(folder))
    return db


def mean_log(run: RunResult, statistic: str) -> float:
    return float(np.mean([math.log(r.summary_ms(statistic)["step"]) for r in run.repeats]))


# --- the baseline file ----------------------------------------------------------------------


def test_a_baseline_keeps_its_day_variation_and_an_older_file_reads_without_one(tmp_path: Path) -> None:
    baseline = updated_baseline(None, make_result(), "first", append=False, day_variation=DAY)
    path = save_baseline(baseline, tmp_path)
    raw = json.loads(path.read_text())
    assert raw["schema_version"] == BASELINE_SCHEMA_VERSION == 3
    assert raw["day_variation"] == {"sd_log": {PER_STEP: 0.004, MEDIAN: 0.005}, "runs": 12,
                                    "first_date": "2026-11-01", "last_date": "2026-11-30", "source": "h.sqlite"}
    assert load_baseline(path) == baseline and load_baseline(path).day_variation.df == 11

    older = {**raw, "schema_version": 2}
    del older["day_variation"]
    assert baseline_from_dict(older).day_variation is None


def test_appending_keeps_the_variation_and_a_new_baseline_starts_without_one() -> None:
    first = updated_baseline(None, make_result(), "first", append=False, day_variation=DAY)
    appended = updated_baseline(first, make_result(seed=1), "second", append=True)
    assert appended.day_variation == DAY and len(appended.recordings) == 2
    assert updated_baseline(first, make_result(seed=1), "replaced", append=False).day_variation is None


@pytest.mark.parametrize(("field", "value", "words"), [
    ("runs", MIN_DAY_RUNS - 1, "runs"),
    ("sd_log", {PER_STEP: 1.5}, "sd_log.per_step"),
    ("sd_log", {PER_STEP: -0.1}, "sd_log.per_step"),
    ("sd_log", {"p90": 0.01}, "unknown statistic"),
    ("sd_log", {}, "names no statistic"),
    ("first_date", "**2026** [x](http://e.invalid)", "first_date"),
    ("source", "a\nb", "source"),
])
def test_a_bad_day_variation_is_refused_naming_its_field(field: str, value: object, words: str) -> None:
    data = updated_baseline(None, make_result(), "first", append=False, day_variation=DAY).to_dict()
    data["day_variation"][field] = value
    with pytest.raises(ValueError, match="day_variation") as info:
        baseline_from_dict(data)
    assert words in str(info.value)


# --- measuring it from the history ----------------------------------------------------------


def test_the_variation_is_the_sd_of_the_runs_mean_logs_of_this_workloads_stored_clean_runs(tmp_path: Path) -> None:
    scales = [1.0, 1.02, 0.99, 1.01, 0.97, 1.03]
    mine = [run_at(day + 1, s) for day, s in enumerate(scales)]
    mine[2] = dataclasses.replace(mine[2], environment=dataclasses.replace(mine[2].environment, git_dirty=None))
    others = [run_at(20, 1.5, dirty=True), run_at(21, 0.5, version=2), run_at(22, 2.0, workload="other")]
    table = load(history_with(tmp_path, mine + others))
    day = day_variation(table, workload="tiny", workload_version=1, environment_key=ENV.key(), source="h.sqlite")
    assert day.runs == len(mine) and day.df == len(mine) - 1
    for statistic in (PER_STEP, MEDIAN):
        expected = float(np.std([mean_log(r, statistic) for r in mine], ddof=1))
        assert day.sd_log[statistic] == pytest.approx(expected, rel=1e-9)
    assert (day.first_date, day.last_date) == ("2026-11-01", "2026-11-06")

    latest = day_variation(table, workload="tiny", workload_version=1, environment_key=ENV.key(), source="h",
                           max_runs=5)
    assert latest.runs == 5 and latest.first_date == "2026-11-02"


def test_too_few_runs_is_a_usage_error_that_counts_them(tmp_path: Path) -> None:
    table = load(history_with(tmp_path, [run_at(d, 1.0) for d in range(1, MIN_DAY_RUNS)]))
    with pytest.raises(UsageError, match=f"holds {MIN_DAY_RUNS - 1} run\\(s\\).*at least {MIN_DAY_RUNS}"):
        day_variation(table, workload="tiny", workload_version=1, environment_key=ENV.key(), source="h.sqlite")


# --- what the gate makes of it --------------------------------------------------------------


def test_the_step_uses_the_measured_variation_and_the_phases_the_assumed_one() -> None:
    config = GateConfig()
    measured = updated_baseline(None, make_result(), "first", append=False, day_variation=DAY)
    assert day_term(measured, "step", config, PER_STEP) == (0.004, 11.0)
    assert day_term(measured, "step", config, MEDIAN) == (0.005, 11.0)
    assumed = (DEFAULT_ASSUMED_DAY_SD_LOG, DEFAULT_DAY_PRIOR_DF)
    assert day_term(measured, "forward", config, PER_STEP) == assumed
    assert day_term(dataclasses.replace(measured, day_variation=None), "step", config, PER_STEP) == assumed


def test_a_quiet_runner_measured_catches_what_the_assumption_cannot() -> None:
    # The stored design with one recording of 10 repeats, process sd 1%, a true day sd of 0.3%,
    # δ 3%, three workloads, a +6% slowdown on the first: with the assumed 1% (4 df) the gate
    # never calls it; with the day sd measured from 30 runs it nearly always does (measured
    # with 50 gates: 0% and 100%).
    noise = Noise(run_sd_log=0.01, ar=0.0, day_sd_log=0.003, outlier_rate=0.0, throttle_rate=0.0)
    cells = {runs: simulate(Scenario(noise, 0.06, paired=False, recordings=1, baseline_repeats=10, repeats=5,
                                     history_runs=runs), 12, GateConfig(delta=0.03), seed=5)
             for runs in (0, 30)}
    assert cells[0].share(Verdict.REGRESSION) <= 0.2
    assert cells[30].share(Verdict.REGRESSION) >= 0.8
    assert cells[30].false_regression_share == 0.0


def test_the_noise_line_says_where_the_day_variation_came_from() -> None:
    result = make_result(seed=3)
    baseline = updated_baseline(None, make_result(), "first", append=False, day_variation=DAY)

    def line(b: Baseline) -> str:
        outcome = compare([Entry("tiny", result, Lookup(b, Path("baselines") / "tiny.json"))], GateConfig())
        return noise_line(outcome.comparisons[0], 0.8)

    assert "measured on this runner: 12 runs in the history store, 2026-11-01 to 2026-11-30" in line(baseline)
    assert "`perfgate rebaseline --day-history` measures it" in line(dataclasses.replace(baseline, day_variation=None))


# --- the command ----------------------------------------------------------------------------


def test_rebaseline_day_history_records_it_and_too_few_runs_writes_nothing(tmp_path: Path, capsys) -> None:
    db = history_with(tmp_path / "h", [run_at(d, 1.0 + 0.01 * (d % 3)) for d in range(1, 8)])
    results = tmp_path / "results"
    results.mkdir()
    save_result(run_at(9, 1.0), results / "tiny.json")
    baselines = tmp_path / "baselines"
    argv = ["rebaseline", "--from-results", str(results), "--reason", "measured day", "--baselines", str(baselines),
            "--no-counters", "--config", str(tmp_path / "none.toml")]
    assert main([*argv, "--day-history", str(db)]) == 0
    out = capsys.readouterr().out
    assert "tiny: day-to-day variation from 7 runs in" in out
    path = baselines / ENV.key() / "tiny.json"
    written = load_baseline(path)
    assert written.day_variation is not None and written.day_variation.runs == 7
    before = path.read_bytes()

    few = history_with(tmp_path / "few", [run_at(d, 1.0) for d in range(1, 4)])
    assert main([*argv, "--day-history", str(few)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "holds 3 run(s)" in err[0]
    assert path.read_bytes() == before
