"""pytest-benchmark JSON judged by perfgate: conversion, statistics, report, bad files.

The fixtures in ``fixtures/pytest_benchmark/`` are real runs (``generate.py``): five
pytest processes each of ``base`` and ``same`` (identical code, A/A) and ``slower`` (the
sort calls a Python key function per element; the collate is unchanged), each saved with
its raw rounds (``-raw``) and as statistics only (``-stats``).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import shutil
import statistics
from pathlib import Path

import numpy as np
import pytest
from factories import make_result
from scipy import stats as sps

from perfgate.analysis.compare import compare
from perfgate.analysis.decide import GateConfig
from perfgate.analysis.outcome import Entry, GateOutcome
from perfgate.analysis.stats import SampleSummary, log_ratio_from_summaries
from perfgate.model.baseline import Baseline, DayVariation
from perfgate.model.errors import EXIT_ERROR, FileFormatError
from perfgate.model.result import RunResult
from perfgate.model.repeat import MEDIAN, PER_STEP
from perfgate.model.verdict import Verdict
from perfgate.model.workload import PHASES
from perfgate.report.markdown import render_markdown
from perfgate.store.baselines import Lookup, find_baseline, load_baseline, save_baseline, updated_baseline
from perfgate.store.benchmark_json import (
    BLOCKS,
    is_benchmark_json,
    load_benchmark_file,
    load_benchmark_files,
    load_results_dir,
    workload_name,
)
from perfgate.store.results import save_result

F = Path(__file__).parent / "fixtures" / "pytest_benchmark"
RUNS = range(1, 6)
SORT = "test_micro.test_sort-5000"
COLLATE = "test_micro.test_collate"
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
# perfgate compare judges files on disk in one look at the full alpha
CFG = GateConfig()


def fixture(run: str, kind: str = "raw") -> Path:
    return F / f"{run}-{kind}.json"


def raw_json(run: str, kind: str = "raw") -> dict:
    return json.loads(fixture(run, kind).read_text())


def by_name(results: list[RunResult]) -> dict[str, RunResult]:
    return {r.workload: r for r in results}


def judge(base: list[RunResult], current: list[RunResult], config: GateConfig = CFG,
          day_variation: DayVariation | None = None) -> GateOutcome:
    """Record a baseline from ``base`` (as ``rebaseline --from-results`` does, with
    ``day_variation`` as ``--day-history`` records it) and compare."""
    baselines = by_name(base)
    entries = [
        Entry(c.workload, c, Lookup(updated_baseline(None, baselines[c.workload], "test", append=False,
                                                     day_variation=day_variation),
                                    Path(f"baselines/{c.environment.key()}/{c.workload}.json")))
        for c in current
    ]
    return compare(entries, config)


def verdicts(outcome: GateOutcome) -> dict[str, Verdict]:
    return {c.workload: c.verdict for c in outcome.comparisons}


def reasons(outcome: GateOutcome) -> dict[str, str]:
    return {c.workload: c.reason for c in outcome.comparisons}


def runs_dir(tmp_path: Path, name: str, runs: list[str], kind: str = "raw") -> Path:
    target = tmp_path / name
    target.mkdir()
    for run in runs:
        shutil.copy(fixture(run, kind), target / f"{run}.json")
    return target


# --- conversion -------------------------------------------------------------------------


def test_a_file_with_raw_rounds_becomes_one_result_per_benchmark_split_into_blocks() -> None:
    doc = raw_json("base-1")
    results = by_name(load_benchmark_file(fixture("base-1")))
    assert set(results) == {SORT, COLLATE}
    sort = results[SORT]
    bench = next(b for b in doc["benchmarks"] if b["fullname"] == "test_micro.py::test_sort[5000]")
    assert sort.workload_source == "pytest-benchmark test_micro.py::test_sort[5000]"
    assert sort.data["benchmark"] == "test_micro.py::test_sort[5000]"
    assert sort.workload_version == 1 and sort.device == "cpu"
    assert sort.data["kind"] == "pytest-benchmark" and sort.data["statistics"] == "round-blocks"
    assert sort.data["blocks"] == BLOCKS == len(sort.repeats)
    # every round is kept, in order, in contiguous blocks of (nearly) equal size; nothing
    # is made up (the collate's 279 rounds do not divide by 10)
    for b in doc["benchmarks"]:
        result = results[workload_name(b["fullname"])]
        rounds_ms = [v * 1e3 for v in b["stats"]["data"]]
        assert [v for rep in result.repeats for v in rep.phases_ms["step"]] == pytest.approx(rounds_ms, rel=1e-12)
        sizes = [len(rep.phases_ms["step"]) for rep in result.repeats]
        assert len(sizes) == BLOCKS and max(sizes) - min(sizes) <= 1
        for rep in result.repeats:
            assert all(rep.phases_ms[p] == (0.0,) * len(rep.phases_ms["step"]) for p in PHASES)
            assert rep.peak_memory_bytes is None
    assert len(bench["stats"]["data"]) % BLOCKS == 0 and len(results[COLLATE].repeats[0].phases_ms["step"]) == 28
    (source,) = sort.data["sources"]
    assert source["path"] == str(fixture("base-1"))
    assert source["sha256"] == hashlib.sha256(fixture("base-1").read_bytes()).hexdigest()
    assert source["raw_rounds"] is True and source["rounds"] == bench["stats"]["rounds"]
    assert source["median_ms"] == pytest.approx(bench["stats"]["median"] * 1e3)


def test_parameters_are_the_measuring_options_and_the_benchmark_params() -> None:
    sort = by_name(load_benchmark_file(fixture("base-1")))[SORT]
    options = raw_json("base-1")["benchmarks"][0]["options"]
    assert {k: sort.params[k] for k in options} == options
    assert sort.params["timer"] == "perf_counter" and sort.params["min_rounds"] == 60
    assert sort.params["param.n"] == 5000
    # rounds and iterations are chosen from the measured speed: not parameters
    assert "rounds" not in sort.params and "iterations" not in sort.params


def test_the_environment_comes_from_machine_info_and_torch_is_marked_absent() -> None:
    info = raw_json("base-1")["machine_info"]
    env = load_benchmark_file(fixture("base-1"))[0].environment
    assert env.device == "cpu"
    assert env.cpu_model == info["cpu"]["brand_raw"] and env.cpu_count == info["cpu"]["count"]
    assert env.python == info["python_version"]
    assert env.os == f"{info['system']} {info['release']}"
    assert env.torch == "none" and env.torchvision == "none"
    assert env.git_commit is None  # pytest-benchmark wrote "unversioned"
    key = env.key()
    assert "/" not in key and key.startswith("cpu-") and "torchnone" in key


def test_torch_versions_added_by_a_machine_info_hook_are_used(tmp_path: Path) -> None:
    doc = raw_json("base-1")
    doc["machine_info"]["torch"] = "2.14.1"
    doc["machine_info"]["python_implementation"] = "PyPy"
    path = tmp_path / "hooked.json"
    path.write_text(json.dumps(doc))
    env = load_benchmark_file(path)[0].environment
    assert env.torch == "2.14.1" and env.torchvision == "none"
    assert env.python.startswith("pypy-")
    assert env.key() != load_benchmark_file(fixture("base-1"))[0].environment.key()


def test_a_file_without_raw_rounds_is_one_repeat_holding_the_reported_median() -> None:
    doc = raw_json("base-1", "stats")
    assert all("data" not in b["stats"] for b in doc["benchmarks"])
    for result in load_benchmark_file(fixture("base-1", "stats")):
        bench = next(b for b in doc["benchmarks"] if workload_name(b["fullname"]) == result.workload)
        assert result.data["statistics"] == "summary"
        (rep,) = result.repeats
        assert rep.phases_ms["step"] == pytest.approx((bench["stats"]["median"] * 1e3,))
        (source,) = result.data["sources"]
        assert source["raw_rounds"] is False
        assert source["mean_ms"] == pytest.approx(bench["stats"]["mean"] * 1e3)
        assert source["stddev_ms"] == pytest.approx(bench["stats"]["stddev"] * 1e3)
        assert source["rounds"] == bench["stats"]["rounds"]


def test_too_few_raw_rounds_for_two_blocks_are_judged_from_the_summary(tmp_path: Path) -> None:
    doc = raw_json("base-1")
    stats_ = doc["benchmarks"][0]["stats"]
    stats_["data"] = stats_["data"][:9]
    stats_["rounds"], stats_["min"], stats_["max"] = 9, min(stats_["data"]), max(stats_["data"])
    path = tmp_path / "short.json"
    path.write_text(json.dumps(doc))
    results = by_name(load_benchmark_file(path))
    assert results[SORT].data["statistics"] == "summary" and len(results[SORT].repeats) == 1
    assert results[COLLATE].data["statistics"] == "round-blocks"


@pytest.mark.parametrize(("fullname", "expected"), [
    ("test_micro.py::test_sort[5000]", "test_micro.test_sort-5000"),
    ("tests/bench/test_collate.py::test_collate[64]", "test_collate.test_collate-64"),
    ("tests/bench/test_io.py::TestLoader::test_read[a b/c]", "test_io.testloader.test_read-a-b-c"),
    ("bench.py::test_plain", "bench.test_plain"),
    ("_private.py::test_X", "private.test_x"),
])
def test_workload_names_follow_the_name_rule(fullname: str, expected: str) -> None:
    assert workload_name(fullname) == expected
    assert NAME_RE.match(expected)


def test_too_long_names_are_cut_and_stay_unique() -> None:
    a = workload_name("test_m.py::test_" + "x" * 80 + "[1]")
    b = workload_name("test_m.py::test_" + "x" * 80 + "[2]")
    assert a != b and len(a) <= 64 and len(b) <= 64
    assert NAME_RE.match(a) and NAME_RE.match(b)
    assert workload_name("::[]").startswith("benchmark-") and NAME_RE.match(workload_name("::[]"))


def test_pytest_benchmark_json_is_told_apart_from_perfgate_files() -> None:
    assert is_benchmark_json(raw_json("base-1"))
    assert is_benchmark_json(raw_json("base-1", "stats"))
    assert is_benchmark_json({"machine_info": {}, "version": "5.3.1"})  # malformed, but theirs
    assert not is_benchmark_json(make_result().to_dict())
    assert not is_benchmark_json({"kind": "perfgate.baseline", "benchmarks": []})
    assert not is_benchmark_json([raw_json("base-1")])
    assert not is_benchmark_json({})


# --- comparisons ------------------------------------------------------------------------


def test_one_run_per_side_catches_the_slower_sort_and_says_it_used_blocks() -> None:
    outcome = judge(load_benchmark_file(fixture("base-1")), load_benchmark_file(fixture("slower-1")))
    sort = next(c for c in outcome.comparisons if c.workload == SORT)
    assert sort.verdict is Verdict.REGRESSION
    assert sort.time is not None and sort.time.estimate.ratio > 1.3
    assert "Welch on the medians of 10 vs" in sort.reason and "contiguous blocks" in sort.reason
    assert "run-to-run variation is not measured, assumed 1.0%" in sort.reason
    assert "test_micro.py::test_sort[5000]" in sort.reason


def test_one_run_per_side_stands_the_measured_day_variation_in_for_the_run_to_run_one() -> None:
    measured = DayVariation({PER_STEP: 0.02, MEDIAN: 0.03}, 10, "2026-11-01", "2026-11-30", "h.sqlite")
    base, slower = load_benchmark_file(fixture("base-1")), load_benchmark_file(fixture("slower-1"))
    plain, told = (next(c for c in judge(base, slower, day_variation=d).comparisons if c.workload == SORT)
                   for d in (None, measured))
    assert "run-to-run variation is not measured, measured on this runner 3.0%" in told.reason
    assert plain.time is not None and told.time is not None
    assert told.time.estimate.se_log > plain.time.estimate.se_log  # 3% measured instead of 1% assumed


def test_the_same_run_against_itself_is_no_regression() -> None:
    outcome = judge(load_benchmark_file(fixture("base-1")), load_benchmark_file(fixture("base-1")))
    for c in outcome.comparisons:
        assert c.verdict is not Verdict.REGRESSION
        assert c.time is not None and c.time.estimate.ratio == pytest.approx(1.0)


@pytest.mark.parametrize("kind", ["raw", "stats"])
def test_single_runs_with_the_measured_run_to_run_sd_never_false_alarm_and_catch_the_sort(kind: str) -> None:
    """Every pairing, not a chosen one: 25 A/A pairs and 25 slower pairs.

    One run per side cannot see run-to-run variation; these runs show about 4.5% (sort)
    and 1.4% (collate) between processes, so the assumed value is set to 5%. (At the
    default 1% some A/A pairs do raise a false REGRESSION: see verdicts.py.)
    """
    config = GateConfig(assumed_day_sd_log=0.05)
    for i in RUNS:
        base = load_benchmark_file(fixture(f"base-{i}", kind))
        for j in RUNS:
            same = verdicts(judge(base, load_benchmark_file(fixture(f"same-{j}", kind)), config))
            assert Verdict.REGRESSION not in same.values(), (i, j, same)
            slower = verdicts(judge(base, load_benchmark_file(fixture(f"slower-{j}", kind)), config))
            assert slower[SORT] is Verdict.REGRESSION, (i, j)
            assert slower[COLLATE] is not Verdict.REGRESSION, (i, j)


def test_without_raw_rounds_the_summary_statistics_are_used_and_named() -> None:
    outcome = judge(load_benchmark_file(fixture("base-1", "stats")), load_benchmark_file(fixture("slower-1", "stats")))
    sort = next(c for c in outcome.comparisons if c.workload == SORT)
    assert sort.verdict is Verdict.REGRESSION
    assert "summary statistics only" in sort.reason and "delta method" in sort.reason
    assert "Welch on the log mean of 60 vs 60 rounds taken as independent" in sort.reason
    # the estimate is the ratio of the reported means
    means = {b["name"]: b["stats"]["mean"] for b in raw_json("slower-1", "stats")["benchmarks"]}
    base_means = {b["name"]: b["stats"]["mean"] for b in raw_json("base-1", "stats")["benchmarks"]}
    assert sort.time is not None
    assert sort.time.estimate.ratio == pytest.approx(means["test_sort[5000]"] / base_means["test_sort[5000]"])


def test_a_raw_run_against_a_summary_only_baseline_falls_back_to_the_summary() -> None:
    outcome = judge(load_benchmark_file(fixture("base-1", "stats")), load_benchmark_file(fixture("slower-1")))
    assert verdicts(outcome)[SORT] is Verdict.REGRESSION
    assert "summary statistics only" in reasons(outcome)[SORT]


@pytest.mark.parametrize("kind", ["raw", "stats"])
def test_several_runs_per_side_are_judged_by_their_per_run_medians(tmp_path: Path, kind: str) -> None:
    base = load_results_dir(runs_dir(tmp_path, "base", [f"base-{i}" for i in RUNS], kind))
    same = load_results_dir(runs_dir(tmp_path, "same", [f"same-{i}" for i in RUNS], kind))
    slower = load_results_dir(runs_dir(tmp_path, "slower", [f"slower-{i}" for i in RUNS], kind))
    assert {r.data["statistics"] for r in base} == {"processes"}
    assert all(len(r.repeats) == 5 for r in base)
    aa = judge(base, same)
    assert Verdict.REGRESSION not in verdicts(aa).values()
    outcome = judge(base, slower)
    assert verdicts(outcome)[SORT] is Verdict.REGRESSION
    assert verdicts(outcome)[COLLATE] is not Verdict.REGRESSION
    assert "Welch on the per-run medians of 5 vs 5 pytest-benchmark" in reasons(outcome)[SORT]
    # each run's repeat summarises to the median pytest-benchmark reported for it
    medians = sorted(b["stats"]["median"] * 1e3 for i in RUNS for b in raw_json(f"base-{i}", kind)["benchmarks"]
                     if b["name"] == "test_sort[5000]")
    sort = by_name(base)[SORT]
    assert sorted(statistics.median(r.phases_ms["step"]) for r in sort.repeats) == pytest.approx(medians)


def test_several_runs_give_the_same_estimate_with_or_without_raw_rounds(tmp_path: Path) -> None:
    est = {}
    for kind in ("raw", "stats"):
        base = load_results_dir(runs_dir(tmp_path, f"base-{kind}", [f"base-{i}" for i in RUNS], kind))
        cur = load_results_dir(runs_dir(tmp_path, f"slower-{kind}", [f"slower-{i}" for i in RUNS], kind))
        est[kind] = {c.workload: c.time.estimate for c in judge(base, cur).comparisons if c.time}
    for name in (SORT, COLLATE):
        assert est["raw"][name].ratio == pytest.approx(est["stats"][name].ratio, rel=1e-9)
        assert est["raw"][name].ci_high == pytest.approx(est["stats"][name].ci_high, rel=1e-9)


def test_one_run_against_a_baseline_of_several_runs_is_incomparable(tmp_path: Path) -> None:
    base = load_results_dir(runs_dir(tmp_path, "base", [f"base-{i}" for i in RUNS]))
    outcome = judge(base, load_benchmark_file(fixture("slower-1")))
    assert set(verdicts(outcome).values()) == {Verdict.INCOMPARABLE}
    assert outcome.exit_code == EXIT_ERROR
    assert "data pytest-benchmark runs: baseline '5 runs', current 'one run'" in reasons(outcome)[SORT]


def test_a_changed_measuring_option_is_incomparable(tmp_path: Path) -> None:
    doc = raw_json("slower-1")
    for bench in doc["benchmarks"]:
        bench["options"]["timer"] = "process_time"
    path = tmp_path / "other-timer.json"
    path.write_text(json.dumps(doc))
    outcome = judge(load_benchmark_file(fixture("base-1")), load_benchmark_file(path))
    assert set(verdicts(outcome).values()) == {Verdict.INCOMPARABLE}
    assert "param timer: baseline 'perf_counter', current 'process_time'" in reasons(outcome)[SORT]


def test_a_baseline_round_trips_through_the_store_without_zero_phase_series(tmp_path: Path) -> None:
    for result in load_benchmark_file(fixture("base-1")):
        save_baseline(updated_baseline(None, result, "micro-benchmarks", append=False), tmp_path)
    current = load_benchmark_file(fixture("slower-1"))
    lookups = {c.workload: find_baseline(tmp_path, c.environment.key(), c.workload) for c in current}
    stored = lookups[SORT].baseline
    assert stored is not None
    on_disk = json.loads(lookups[SORT].path.read_text())["recordings"][0]["repeats"]
    assert all(set(r["phases_ms"]) == {"step"} for r in on_disk)
    assert all(set(r.phases_ms) == {*PHASES, "step"} and not any(r.phases_ms[p] != (0.0,) * r.steps for p in PHASES)
               for r in stored.recordings[0].repeats)  # in memory: zero phases
    assert stored.recordings[0].data["sources"][0]["sha256"] == hashlib.sha256(
        fixture("base-1").read_bytes()).hexdigest()
    outcome = compare([Entry(c.workload, c, lookups[c.workload]) for c in current], CFG)
    direct = judge(load_benchmark_file(fixture("base-1")), current)
    assert verdicts(outcome) == verdicts(direct)
    sort = next(c for c in outcome.comparisons if c.workload == SORT)
    assert sort.time is not None and direct.comparisons[0].time is not None
    assert sort.time.estimate.ratio == pytest.approx(direct.comparisons[0].time.estimate.ratio)
    # a perfgate workload still stores every phase
    normal = updated_baseline(None, make_result(), "normal", append=False)
    assert set(normal.to_dict()["recordings"][0]["repeats"][0]["phases_ms"]) >= set(PHASES)


def test_gated_phases_do_not_apply_to_a_micro_benchmark() -> None:
    config = GateConfig(gate_phases=("data_wait",))
    outcome = judge(load_benchmark_file(fixture("base-1")), load_benchmark_file(fixture("slower-1")), config)
    assert verdicts(outcome)[SORT] is Verdict.REGRESSION
    assert all(not c.gated for c in outcome.comparisons)
    assert Verdict.ERROR not in verdicts(outcome).values()


# --- the report -------------------------------------------------------------------------


def test_the_markdown_shows_the_benchmark_with_the_step_row_only() -> None:
    outcome = judge(load_benchmark_file(fixture("base-1")), load_benchmark_file(fixture("slower-1")))
    text = render_markdown(outcome)
    section = text.split(f"### ❌ {SORT}: REGRESSION", 1)[1].split("###", 1)[0]
    table = [line for line in section.splitlines() if line.startswith("|")]
    assert table[0] == "| phase | baseline ms/step | current ms/step | change (95% CI) | share | flag |"
    assert len(table) == 3 and table[2].startswith("| **step** |") and table[2].endswith("| 100% | REGRESSION |")
    for word in (*PHASES, "residual"):
        assert f"| {word} |" not in text
    assert f"**{SORT}** — **REGRESSION**" in text
    assert "contiguous blocks of its rounds" in section


# --- the statistics from summaries ------------------------------------------------------


def _welch_df(v1: float, n1: int, v2: float, n2: int) -> float:
    a, b = v1 / n1, v2 / n2
    return (a + b) ** 2 / (a * a / (n1 - 1) + b * b / (n2 - 1))


@pytest.mark.parametrize("seed", range(6))
def test_summary_welch_equals_scipy_ttest_ind_from_stats(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n_c, n_b = int(rng.integers(2, 400)), int(rng.integers(2, 400))
    m_c, m_b = float(rng.uniform(0.5, 2.0)), float(rng.uniform(0.5, 2.0))
    s_c, s_b = float(rng.uniform(0.01, 0.5)) * m_c, float(rng.uniform(0.01, 0.5)) * m_b
    est = log_ratio_from_summaries(SampleSummary(m_c, s_c, n_c), [SampleSummary(m_b, s_b, n_b)],
                                   assumed_day_sd_log=0.0)
    args = (math.log(m_c), s_c / m_c, n_c, math.log(m_b), s_b / m_b, n_b)
    greater = sps.ttest_ind_from_stats(*args, equal_var=False, alternative="greater")
    less = sps.ttest_ind_from_stats(*args, equal_var=False, alternative="less")
    two = sps.ttest_ind_from_stats(*args, equal_var=False)
    assert est.p_slower == pytest.approx(greater.pvalue, rel=1e-9, abs=1e-300)
    assert est.p_faster == pytest.approx(less.pvalue, rel=1e-9, abs=1e-300)
    assert est.p_two_sided == pytest.approx(two.pvalue, rel=1e-9, abs=1e-300)
    assert est.ratio == pytest.approx(m_c / m_b)
    df = _welch_df((s_c / m_c) ** 2, n_c, (s_b / m_b) ** 2, n_b)
    assert est.df == pytest.approx(df)
    half = sps.t.ppf(0.975, df) * math.sqrt((s_c / m_c) ** 2 / n_c + (s_b / m_b) ** 2 / n_b)
    assert math.log(est.ci_high) == pytest.approx(math.log(m_c / m_b) + half)
    assert math.log(est.ci_low) == pytest.approx(math.log(m_c / m_b) - half)


def test_summary_welch_adds_the_assumed_day_variance_and_averages_recordings() -> None:
    cur = SampleSummary(1.1, 0.05, 100)
    recs = [SampleSummary(1.0, 0.05, 100), SampleSummary(1.02, 0.04, 80)]
    plain = log_ratio_from_summaries(cur, recs, assumed_day_sd_log=0.0)
    wide = log_ratio_from_summaries(cur, recs, assumed_day_sd_log=0.02)
    assert wide.se_log**2 == pytest.approx(plain.se_log**2 + 0.02**2 * (1 + 1 / 2))
    assert wide.ratio == pytest.approx(1.1 / math.exp((math.log(1.0) + math.log(1.02)) / 2))
    assert wide.between_sd_log == 0.02 and wide.recordings == 2 and wide.n_baseline == 180


@pytest.mark.parametrize(("current", "baseline", "match"), [
    (SampleSummary(1.0, 0.1, 1), [SampleSummary(1.0, 0.1, 10)], "at least 2"),
    (SampleSummary(0.0, 0.1, 10), [SampleSummary(1.0, 0.1, 10)], "mean must be finite and > 0"),
    (SampleSummary(1.0, -0.1, 10), [SampleSummary(1.0, 0.1, 10)], "sd must be finite"),
    (SampleSummary(1.0, math.nan, 10), [SampleSummary(1.0, 0.1, 10)], "sd must be finite"),
    (SampleSummary(1.0, 0.1, 10), [], "list of recordings"),
])
def test_summary_welch_refuses_what_it_cannot_judge(current: SampleSummary, baseline: list, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        log_ratio_from_summaries(current, baseline)


# --- reading directories ----------------------------------------------------------------


def test_a_results_directory_holds_perfgate_results_and_pytest_benchmark_files(tmp_path: Path) -> None:
    directory = runs_dir(tmp_path, "results", ["base-1", "base-2"])
    save_result(make_result("tiny"), directory / "tiny.json")
    results = by_name(load_results_dir(directory))
    assert set(results) == {"tiny", SORT, COLLATE}
    assert results["tiny"].data["kind"] == "synthetic"
    assert results[SORT].data["statistics"] == "processes" and results[SORT].data["processes"] == 2
    assert [s["path"] for s in results[SORT].data["sources"]] == [str(directory / "base-1.json"),
                                                                  str(directory / "base-2.json")]


def test_load_benchmark_files_merges_runs_like_a_directory(tmp_path: Path) -> None:
    files = [fixture(f"base-{i}") for i in RUNS]
    merged = by_name(load_benchmark_files(files))
    assert len(merged[SORT].repeats) == 5 and merged[SORT].data["statistics"] == "processes"


@pytest.mark.parametrize(("setup", "match"), [
    ("other-json", "neither a perfgate result"),
    ("same-run-twice", "holds the same measurements as in"),
    ("result-clash", "also"),
    ("other-commit", "measured differently"),
    ("other-options", "options max_time"),
])
def test_a_results_directory_refuses_what_it_cannot_read_alone(tmp_path: Path, setup: str, match: str) -> None:
    directory = runs_dir(tmp_path, "results", ["base-1"])
    bad = directory / "zz.json"
    if setup == "other-json":
        bad.write_text(json.dumps({"hello": "world"}))
    elif setup == "same-run-twice":
        shutil.copy(fixture("base-1", "stats"), bad)
    elif setup == "result-clash":
        save_result(make_result(SORT), bad)
    else:
        doc = raw_json("base-2")
        if setup == "other-commit":
            doc["commit_info"]["id"] = "0123456789abcdef"
        else:
            for bench in doc["benchmarks"]:
                bench["options"]["max_time"] = 1.0
        bad.write_text(json.dumps(doc))
    with pytest.raises(FileFormatError, match=match) as info:
        load_results_dir(directory)
    message = str(info.value)
    assert "\n" not in message and str(directory) in message


def test_a_missing_results_directory_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(FileFormatError, match="results directory not found"):
        load_results_dir(tmp_path / "nowhere")


# --- bad files ----------------------------------------------------------------------------


def _edit(doc: dict, case: str) -> str | dict | list:
    bench = doc["benchmarks"][0]
    if case == "unknown version":
        doc["version"] = "99.0.0"
    elif case == "no version":
        del doc["version"]
    elif case == "missing benchmarks":
        del doc["benchmarks"]
    elif case == "no benchmarks":
        doc["benchmarks"] = []
    elif case == "benchmark without stats":
        del bench["stats"]
    elif case == "benchmark without options":
        del bench["options"]
    elif case == "negative mean":
        bench["stats"]["mean"] = -1.0
    elif case == "rounds not an integer":
        bench["stats"]["rounds"] = "60"
    elif case == "data of another length":
        bench["stats"]["data"] = bench["stats"]["data"][:-1]
    elif case == "data not matching the stats":
        bench["stats"]["data"][0] = bench["stats"]["max"] * 10
    elif case == "not an object":
        return [doc]
    elif case == "NaN mean":
        return json.dumps(doc).replace(f'"mean": {json.dumps(bench["stats"]["mean"])}', '"mean": NaN', 1)
    elif case == "Infinity in the rounds":
        text = json.dumps(doc)
        return text.replace(json.dumps(bench["stats"]["data"][3]), "Infinity", 1)
    elif case == "overflowing mean":
        return json.dumps(doc).replace(f'"mean": {json.dumps(bench["stats"]["mean"])}', '"mean": 1e999', 1)
    elif case == "empty file":
        return ""
    elif case == "truncated":
        return json.dumps(doc)[:500]
    return doc


BAD = {
    "unknown version": "version '99.0.0' is not one perfgate reads",
    "no version": "version: expected pytest-benchmark's version string",
    "missing benchmarks": "missing field 'benchmarks'",
    "no benchmarks": "holds no benchmarks",
    "benchmark without stats": "missing field 'benchmarks[0].stats'",
    "benchmark without options": "missing field 'benchmarks[0].options'",
    "negative mean": "benchmarks[0].stats.mean: negative time",
    "rounds not an integer": "benchmarks[0].stats.rounds: expected an integer",
    "data of another length": "expected the 60 round times, got 59 values",
    "data not matching the stats": "do not match the file's min and max",
    "not an object": "not pytest-benchmark JSON",
    "NaN mean": "non-finite number NaN",
    "Infinity in the rounds": "non-finite number Infinity",
    "overflowing mean": "benchmarks[0].stats.mean: non-finite number",
    "empty file": "file is empty",
    "truncated": "not valid JSON",
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_pytest_benchmark_file_is_one_line_naming_the_file(tmp_path: Path, case: str) -> None:
    edited = _edit(raw_json("base-1"), case)
    path = tmp_path / "bench.json"
    path.write_text(edited if isinstance(edited, str) else json.dumps(edited))
    with pytest.raises(FileFormatError) as info:
        load_benchmark_file(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ") and "\n" not in message
    assert BAD[case] in message
    assert info.value.exit_code == EXIT_ERROR
    # the same file in a results directory is refused the same way, never skipped
    if case != "not an object":
        with pytest.raises(FileFormatError, match=re.escape(BAD[case])):
            load_results_dir(tmp_path)


def test_the_committed_fixtures_are_small_real_pytest_benchmark_output() -> None:
    files = sorted(F.glob("*.json"))
    assert len(files) == 30
    for path in files:
        assert path.stat().st_size < 100_000
        doc = json.loads(path.read_text())
        assert doc["version"] == "5.3.1" and is_benchmark_json(doc)
        assert ("data" in doc["benchmarks"][0]["stats"]) == path.name.endswith("-raw.json")


def test_baselines_recorded_from_benchmarks_load_with_the_regular_reader(tmp_path: Path) -> None:
    for result in load_benchmark_file(fixture("base-1", "stats")):
        path = save_baseline(updated_baseline(None, result, "stats only", append=False), tmp_path)
        loaded: Baseline = load_baseline(path)
        assert loaded.recordings[0].data["statistics"] == "summary"
        assert loaded.params["timer"] == "perf_counter"
