"""perfgate.analysis.fleet: one runner's time per step against the fleet's, on planted data; the
store's query of each runner's recent runs and ``perfgate doctor --fleet``, on planted runs."""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from factories import ENV, make_result

from perfgate.adapters.cli import main
from perfgate.analysis.fleet import compare_to_fleet
from perfgate.analysis.history import load, run_series
from perfgate.gate.doctor.fleet import compare_with_fleet, status_of
from perfgate.model.environment import Environment
from perfgate.store.history import record as store_record
from perfgate.store.history_fleet import fleet_times
from perfgate.store.history_values import Recording

RUNNER_OFFSETS = (-0.01, -0.005, 0.0, 0.004, 0.008, 0.012)


def planted(slow: float, *, runs: int = 12, seed: int = 0) -> dict[str, list[float]]:
    """Six runners within about 1% of 100 ms, 2% run-to-run noise; ``t4-7`` ``slow`` slower."""
    rng = np.random.default_rng(seed)
    times = {f"t4-{i + 1}": list(100.0 * (1 + off) * np.exp(rng.normal(0, 0.02, runs)))
             for i, off in enumerate(RUNNER_OFFSETS)}
    times["t4-7"] = list(100.0 * (1 + slow) * np.exp(rng.normal(0, 0.02, runs)))
    return times


def test_a_runner_11_percent_slow_among_6_is_found_beyond_the_spread() -> None:
    c = compare_to_fleet("resnet18-cifar10", "T4", "t4-7", planted(0.11))
    assert c.others == 6 and c.runs == 12
    assert c.share is not None and c.low is not None and c.high is not None
    assert 0.09 < c.share < 0.13 and c.low < 0.11 < c.high and c.low > 0.05
    assert c.beyond_spread
    line = c.line()
    assert line.startswith("this T4 runs resnet18-cifar10 1") and "slower than the fleet's 6 others" in line
    assert "beyond the fleet's spread" in line


def test_a_runner_within_the_fleet_is_not_flagged() -> None:
    c = compare_to_fleet("resnet18-cifar10", "T4", "t4-3", planted(0.0))
    assert c.others == 6 and not c.beyond_spread
    assert c.low is not None and c.high is not None and c.low < 0 < c.high


def test_a_fast_runner_is_called_faster() -> None:
    c = compare_to_fleet("w", "T4", "t4-7", planted(-0.2))
    assert c.beyond_spread and "faster than the fleet's 6 others" in c.line()


def test_a_fleet_of_one_says_so() -> None:
    c = compare_to_fleet("resnet18-cifar10", "T4", "t4-1", {"t4-1": [100.0, 101.0, 99.0]})
    assert c.share is None and c.others == 0
    assert c.line() == ("this T4 on resnet18-cifar10: a fleet of one: no other runner of this GPU model and "
                        "environment has recorded it; nothing to compare with")


def test_a_fleet_of_two_has_an_interval_but_no_spread() -> None:
    times = planted(0.11)
    c = compare_to_fleet("w", "T4", "t4-7", {"t4-7": times["t4-7"], "t4-1": times["t4-1"]})
    assert c.others == 1 and c.share is not None and c.share > 0.05 and not c.beyond_spread
    assert "slower than the fleet's 1 other; a fleet of two has no spread to be beyond" in c.line()


def test_too_few_runs_of_this_runner() -> None:
    c = compare_to_fleet("w", "T4", "t4-7", {"t4-7": [100.0], "t4-1": [100.0, 100.0]})
    assert c.share is None and "this runner has 1 run(s)" in c.line()


# --- from the history store: perfgate.store.history_fleet and perfgate doctor --fleet ---------

T4 = dataclasses.replace(ENV, device="cuda", gpu_name="Tesla T4", cuda="12.4", cudnn="90100",
                         gpu_clocks="locked 1245 MHz")


def plant(store: Path | str, times: dict[str, list[float]], *, env: Environment = T4,
          workloads: tuple[str, ...] = ("resnet18-cifar10",)) -> None:
    """Record each runner's runs of ``workloads``: run i of a runner at ``times[runner][i]``
    times the factory's step (about 100 ms), measured on day i, with 3 repeats."""
    recordings = []
    for r, (runner, scales) in enumerate(sorted(times.items())):
        for i, scale in enumerate(scales):
            for workload in workloads:
                result = make_result(workload, scale=scale / 100.0, seed=r * 100 + i, repeats=3, jitter=0.002,
                                     env=dataclasses.replace(env, git_commit=f"{r:02d}{i:06d}"))
                recordings.append(Recording(dataclasses.replace(result, created_at=_day(i)), None, "stored",
                                            runner=runner))
    store_record(store, recordings)


def _day(i: int) -> str:
    return f"2026-{1 + i // 28:02d}-{1 + i % 28:02d}T10:00:00+00:00"


def test_fleet_times_are_each_runners_most_recent_runs_of_one_gpu_model_and_key(backend) -> None:
    db = backend()
    plant(db, {"t4-1": [100.0, 101.0, 102.0, 103.0], "t4-2": [110.0, 111.0]})
    plant(db, {"t4-1": [200.0, 200.0]}, env=dataclasses.replace(T4, torch="2.15.0"))  # another key
    plant(db, {"a10-1": [50.0, 50.0]}, env=dataclasses.replace(T4, gpu_name="NVIDIA A10G"))
    plant(db, {"cpu-1": [300.0, 300.0]}, env=ENV)
    found = fleet_times(db, "resnet18-cifar10", "Tesla T4", T4.key(), runs=3)
    assert sorted(found.times_ms) == ["t4-1", "t4-2"] and found.skipped == ()
    step = make_result("w", repeats=3, jitter=0.0).repeats[0].per_step_ms["step"]
    ratios = {runner: [round(t / step * 100, 1) for t in ts] for runner, ts in found.times_ms.items()}
    assert ratios == {"t4-1": [101.0, 102.0, 103.0], "t4-2": [110.0, 111.0]}  # the newest 3, oldest first
    assert len(fleet_times(db, "resnet18-cifar10", None, ENV.key()).times_ms["cpu-1"]) == 2
    assert fleet_times(db, "other", "Tesla T4", T4.key()).times_ms == {}


def test_the_run_value_is_the_median_over_its_repeats_as_run_series_takes_it(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    result = make_result("resnet18-cifar10", repeat_scales=[1.0, 1.3, 0.9, 1.1], env=T4)
    store_record(db, [Recording(result, None, "stored", runner="t4-1")])
    (value,) = fleet_times(db, "resnet18-cifar10", "Tesla T4", T4.key()).times_ms["t4-1"]
    series = run_series(load(db), "resnet18-cifar10", environment_key=T4.key())
    assert value == pytest.approx(float(series["value_ms"].iloc[0]))


def test_a_run_with_an_unreadable_value_is_left_out_and_named(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    plant(db, {"t4-1": [100.0, 100.0, 100.0]})
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE runs SET created_at = 'yesterday' WHERE run_id = 2")
    found = fleet_times(db, "resnet18-cifar10", "Tesla T4", T4.key())
    assert len(found.times_ms["t4-1"]) == 2
    assert found.skipped == (f"{db}: run 2 (resnet18-cifar10) left out: created_at: 'yesterday' is not an ISO 8601 "
                             "time with a timezone (2026-11-30T10:00:00+00:00)",)


def test_doctor_fleet_flags_a_runner_11_percent_slow_among_6(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    plant(db, planted(0.11), workloads=("resnet18-cifar10", "w2"))
    report = compare_with_fleet(db, "t4-7", T4, ["resnet18-cifar10"], runs=12)
    (c,) = report.comparisons
    assert c.others == 6 and c.runs == 12 and c.beyond_spread and status_of(c) == "warn"
    lines = report.lines()
    assert lines[0] == (f"perfgate doctor --fleet: runner t4-7 (Tesla T4, environment {T4.key()}); each runner's "
                        f"last 12 runs in {db}")
    assert lines[1].startswith("  warn     this Tesla T4 runs resnet18-cifar10 1")
    assert lines[1].endswith("slower than the fleet's 6 others (beyond the fleet's spread)")
    assert lines[2] == "1 of 1 workloads beyond the fleet's spread: a warning, not a failure"
    within = compare_with_fleet(db, "t4-3", T4, ["w2"], runs=12)
    assert status_of(within.comparisons[0]) == "ok" and within.lines()[-1].startswith("within the fleet's spread")


def test_doctor_fleet_of_one_and_of_none(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    plant(db, {"t4-1": [100.0, 101.0, 99.0]})
    report = compare_with_fleet(db, "t4-1", T4, ["resnet18-cifar10", "resnet18-imagenette"])
    assert report.lines()[1:] == [
        "  unknown  this Tesla T4 on resnet18-cifar10: a fleet of one: no other runner of this GPU model and "
        "environment has recorded it; nothing to compare with",
        "  unknown  this Tesla T4 on resnet18-imagenette: no runner has recorded it on this GPU model and "
        "environment key in the history",
        "nothing compared: no workload has runs of this runner and of another runner with this GPU model and "
        "environment key in the history"]


def test_perfgate_doctor_fleet_on_this_machine(tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    from perfgate.measure.fingerprint import collect

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RUNNER_NAME", "cpu-7")
    monkeypatch.delenv("PERFGATE_HISTORY_URL", raising=False)
    db = tmp_path / "h.sqlite"
    here = collect("cpu")
    times = {name.replace("t4", "cpu"): ts for name, ts in planted(0.11).items()}
    plant(db, times, env=here, workloads=("resnet18-cifar10",))
    code = main(["doctor", "--fleet", "--device", "cpu", "--history", str(db), "--fleet-runs", "12"])
    out, err = capsys.readouterr()
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith(f"perfgate doctor --fleet: runner cpu-7 ({here.cpu_model}, environment {here.key()})")
    flagged = [line for line in lines if "resnet18-cifar10 " in line]
    assert len(flagged) == 1 and flagged[0].startswith("  warn ") and "beyond the fleet's spread" in flagged[0]
    assert "  unknown  this" in out and "resnet18-imagenette: no runner has recorded it" in out
    assert lines[-1].endswith("workloads beyond the fleet's spread: a warning, not a failure")
    # This runner alone: the fleet-of-one line, still exit 0.
    monkeypatch.setenv("RUNNER_NAME", "cpu-1")
    alone = tmp_path / "alone.sqlite"
    plant(alone, {"cpu-1": times["cpu-1"]}, env=here)
    assert main(["doctor", "--fleet", "--device", "cpu", "--history", str(alone)]) == 0
    assert "resnet18-cifar10: a fleet of one: no other runner" in capsys.readouterr().out


@pytest.mark.parametrize(("argv", "message"), [
    (["--history", "mysql://db/perf"], "--history: mysql://db/perf: perfgate keeps its history in an SQLite file"),
    (["--history", "{tmp}/missing.sqlite"], "missing.sqlite: no history store there (perfgate history record "
                                             "creates one)"),
    (["--history", "{tmp}/not-a-store.sqlite"], "not-a-store.sqlite: not a perfgate history store"),
    (["--fleet-runs", "0"], "--fleet-runs must be from 1 to 10000, got 0"),
])
def test_a_store_that_cannot_be_read_is_one_line_and_exit_2(tmp_path: Path, capsys, argv: list[str],
                                                             message: str) -> None:
    (tmp_path / "not-a-store.sqlite").write_text("hello")
    code = main(["doctor", "--fleet", "--device", "cpu", *(a.replace("{tmp}", str(tmp_path)) for a in argv)])
    err = capsys.readouterr().err
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("perfgate: error: ") and message in lines[0], err


def test_the_fleet_options_are_refused_without_fleet(capsys) -> None:
    assert main(["doctor", "--history", "h.sqlite", "--runner", "x"]) == 2
    assert "--history, --runner: only with --fleet" in capsys.readouterr().err
