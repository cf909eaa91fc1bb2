"""Phase accounting on a tiny workload, measured for real in fresh processes.

Only wide-margin relations are asserted: this machine is shared and a timing can be
several times off; nothing here sets an upper limit on a duration.

The module's four repeats fork from one template that has imported torch (the paired
gate's start, :mod:`perfgate.measure.template`), so torch is imported once for them, not
four times; the run without warmup starts a new interpreter, ``perfgate run``'s default.
"""

from __future__ import annotations

from pathlib import Path
from statistics import median

import pytest

from perfgate.analysis.summary import summarise
from perfgate.measure.runner import measure
from perfgate.measure.template import FRESH, Starter
from perfgate.model.job import Job
from perfgate.model.workload import PHASES
from perfgate.store.discovery import discover

pytestmark = pytest.mark.slow


def run_tiny(tiny_path: Path, tmp_path: Path, repeats: int = 1, starter: Starter = FRESH, **overrides):
    workload = discover([tiny_path], project_dir=tmp_path).get("tiny")
    params = workload.resolve("cpu", {k: str(v) for k, v in overrides.items()})
    outcome = measure([Job(workload, params, overrides)], device="cpu", repeats=repeats,
                      cache_dir=tmp_path / "cache", out_dir=tmp_path / "out", project_dir=tmp_path,
                      starter=starter)
    assert not outcome.errors, {k: (e.message, e.detail) for k, e in outcome.errors.items()}
    return outcome.results["tiny"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    from conftest import FIXTURES

    tmp = tmp_path_factory.mktemp("runs")
    tiny = tmp / "w"
    tiny.mkdir()
    (tiny / "tiny_workloads.py").write_bytes((FIXTURES / "tiny_workloads.py").read_bytes())
    with Starter("fork") as starter:  # one template serves the four repeats (renewed every four)
        runs = {
            "plain": run_tiny(tiny, tmp / "a", repeats=2, starter=starter),
            "sleepy": run_tiny(tiny, tmp / "b", starter=starter, batch_sleep_ms=50),
            "heavy": run_tiny(tiny, tmp / "c", starter=starter, width=64, input_size=32),
        }
    return runs


def test_a_result_holds_every_raw_step_of_every_repeat(runs: dict) -> None:
    result = runs["plain"]
    assert len(result.repeats) == 2
    for repeat in result.repeats:
        assert repeat.timing == "perf_counter"
        assert set(repeat.phases_ms) == {*PHASES, "step"}
        assert all(len(v) == 12 for v in repeat.phases_ms.values())
        assert repeat.samples_per_s > 0 and repeat.window_s > 0
        assert repeat.peak_memory_bytes and repeat.peak_memory_bytes > 10 * 2**20
        assert repeat.torch_settings["num_threads"] == 1
        assert repeat.loader_restarts == 0
    assert result.environment.device == "cpu" and result.environment.torch
    assert result.data["kind"] == "synthetic"


def test_phases_add_up_to_the_step(runs: dict) -> None:
    # Stated tolerance: per step the unattributed residual (step minus the five phases)
    # is never negative on the CPU, and its median is under 5% of the median step.
    for repeat in runs["plain"].repeats:
        residual = repeat.residual_ms
        assert min(residual) >= 0
        assert median(residual) < 0.05 * median(repeat.phases_ms["step"])
        # the steps tile the synchronised window (only the clock read opening it is outside)
        window_ms = repeat.window_s * 1e3
        assert 0 <= window_ms - sum(repeat.phases_ms["step"]) < 0.01 * window_ms


def test_a_slow_dataset_shows_up_in_data_wait(runs: dict) -> None:
    plain, sleepy = summarise(runs["plain"]), summarise(runs["sleepy"])
    assert sleepy.median_ms["data_wait"] >= 45.0
    assert sleepy.median_ms["data_wait"] - plain.median_ms["data_wait"] >= 40.0
    assert sleepy.share["data_wait"] > 0.5
    assert sleepy.median_ms["data_wait"] > 3 * sleepy.median_ms["forward"]


def test_a_heavier_model_shows_up_in_forward_and_backward(runs: dict) -> None:
    plain, heavy = summarise(runs["plain"]), summarise(runs["heavy"])
    assert heavy.median_ms["forward"] > 3 * plain.median_ms["forward"]
    assert heavy.median_ms["backward"] > 3 * plain.median_ms["backward"]
    assert heavy.share["forward"] + heavy.share["backward"] > 0.8


def test_a_cpu_repeat_keeps_its_shape_and_says_how_long_its_loader_is(runs: dict) -> None:
    for repeat in runs["plain"].repeats:
        # the CPU's step is still the host's start to start: no device series, no CUDA keys
        assert "host_step" not in repeat.phases_ms and "device_busy" not in repeat.phases_ms
        assert "synchronizes" not in repeat.torch_settings and "cuda_window" not in repeat.torch_settings
        assert repeat.loader_settings["num_batches"] == 2 + 12  # make_loader: warmup_steps + steps


def test_the_cpu_still_runs_without_warmup(tiny_path: Path, tmp_path: Path) -> None:
    result = run_tiny(tiny_path, tmp_path, warmup_steps=0)
    (repeat,) = result.repeats
    assert repeat.steps == 12 and repeat.loader_restarts == 0
    assert repeat.loader_settings["num_batches"] == 12
