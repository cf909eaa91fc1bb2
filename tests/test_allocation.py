"""The design that reaches a decision soonest (perfgate.analysis.allocation), with few simulated gates."""

from __future__ import annotations

import dataclasses
import math

import pytest

from perfgate.analysis.allocation import Allocation, Bounds, LevelCosts, allocate
from perfgate.analysis.decide import GateConfig
from perfgate.analysis.stats.components import Components

CONFIG = GateConfig(max_blocks=10)
SMALL = {"gates": 4, "simulate_best": 2, "seed": 0}


def comps(process: float | None, window: float | None, step: float | None, block: float | None = 0.01) -> Components:
    return Components(block, process, window, step, 4, 48, 240, 4800, True)


@pytest.fixture(scope="module")
def windows_dominate() -> Allocation:
    # A process costs 30 s to start, a step 10 ms; nearly all the noise is between windows.
    return allocate(comps(0.002, 0.04, 0.01), LevelCosts(process_s=30.0, step_s=0.01), CONFIG,
                    bounds=Bounds(max_steps=100), **SMALL)


@pytest.fixture(scope="module")
def processes_dominate() -> Allocation:
    return allocate(comps(0.03, 0.002, 0.005), LevelCosts(process_s=2.0, step_s=0.05), CONFIG,
                    bounds=Bounds(max_steps=100), **SMALL)


def test_expensive_processes_and_window_noise_take_many_windows(windows_dominate: Allocation) -> None:
    a = windows_dominate
    assert a.windows >= 6
    assert a.chosen.simulated is not None and a.expected_s == a.chosen.simulated.objective_s
    assert math.isfinite(a.expected_s) and a.expected_s > 0


def test_process_noise_keeps_one_or_two_windows(processes_dominate: Allocation) -> None:
    assert processes_dominate.windows <= 2


def test_the_analytic_ranking_follows_the_contrast_variance(windows_dominate: Allocation) -> None:
    # var(d) = σ_P² + σ_W²/W + σ_S²/(W N): the block sd never enters
    c = windows_dominate.candidates[0]
    assert c.contrast_sd == pytest.approx(math.sqrt(0.002**2 + 0.04**2 / c.windows + 0.01**2 / (c.windows * c.steps)))
    ranked = [cand.key() for cand in windows_dominate.candidates]
    assert ranked == sorted(ranked)
    assert c.decided_at is not None and c.analytic_s == pytest.approx(c.decided_at * c.block_s)
    assert c.block_s == pytest.approx(4 * (30.0 + c.windows * c.steps * 0.01))


def test_chosen_design_stays_within_bounds() -> None:
    bounds = Bounds(min_steps=5, max_steps=40, min_windows=2, max_windows=4, min_blocks=3, max_blocks=6)
    a = allocate(comps(0.01, 0.03, 0.02), LevelCosts(process_s=10.0, step_s=0.02, window_s=0.5), CONFIG,
                 bounds=bounds, gates=3, simulate_best=1)
    for c in (a.chosen, *a.candidates):
        assert 5 <= c.steps <= 40 and 2 <= c.windows <= 4 and 3 <= c.blocks <= 6
    assert {c.steps for c in a.candidates} >= {5, 40}
    assert sum(c.simulated is not None for c in a.candidates) <= 2  # its analytic best and the first look 3
    lines = a.describe()
    assert lines[0].startswith(f"design: {a.steps} steps × {a.windows} windows, first look {a.blocks} blocks: about ")
    assert any("cancels from it" in line for line in lines)
    assert any(line.startswith("* ") for line in lines)
    assert all("\n" not in line for line in lines)


def test_deterministic_given_a_seed(processes_dominate: Allocation) -> None:
    again = allocate(comps(0.03, 0.002, 0.005), LevelCosts(process_s=2.0, step_s=0.05), CONFIG,
                     bounds=Bounds(max_steps=100), **SMALL)
    assert again == processes_dominate


def test_the_block_component_changes_nothing_analytic() -> None:
    # It cancels from the paired contrast: the same ranking with or without it.
    quick = {"gates": 1, "simulate_best": 1, "bounds": Bounds(max_steps=20, max_windows=3, max_blocks=4)}
    config = GateConfig(max_blocks=6)
    a = allocate(comps(0.02, 0.02, 0.02, block=0.0), LevelCosts(5.0, 0.05), config, **quick)
    b = allocate(comps(0.02, 0.02, 0.02, block=0.2), LevelCosts(5.0, 0.05), config, **quick)
    strip = [dataclasses.replace(c, simulated=None) for c in a.candidates]
    assert strip == [dataclasses.replace(c, simulated=None) for c in b.candidates]


def test_a_level_not_estimated_is_not_credited() -> None:
    # With no window level, more windows only buy the steps' share; with none of the steps
    # either, a window never helps and the cheapest one is ranked first.
    quick = {"gates": 1, "simulate_best": 1, "bounds": Bounds(max_steps=20, max_blocks=4)}
    a = allocate(comps(0.02, None, None), LevelCosts(5.0, 0.05), GateConfig(max_blocks=6), **quick)
    assert (a.candidates[0].steps, a.candidates[0].windows) == (2, 1)


def test_bad_input_raises_one_line() -> None:
    with pytest.raises(ValueError, match="no variation") as err:
        allocate(comps(0.0, 0.0, None), LevelCosts(5.0, 0.05), CONFIG)
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="process_s"):
        LevelCosts(-1.0, 0.05)
    with pytest.raises(ValueError, match="step_s"):
        LevelCosts(1.0, 0.0)
    with pytest.raises(ValueError, match="max_windows"):
        Bounds(min_windows=3, max_windows=2)
    with pytest.raises(ValueError, match="min_steps"):
        Bounds(min_steps=1)
    with pytest.raises(ValueError, match="below the first look"):
        allocate(comps(0.02, 0.02, 0.02), LevelCosts(5.0, 0.05), GateConfig(max_blocks=2),
                 bounds=Bounds(min_blocks=3))


def test_simulated_repeats_time_their_windows() -> None:
    # simulate.py's window level: a repeat holds windows × steps steps, each window drawn
    # around its process's value; one window and no window sd draw what they always did.
    import numpy as np

    from perfgate.analysis.simulate import Noise, Scenario, _Gate, _Job, _repeat_result

    s = Scenario(Noise(0.01, ar=0.0, outlier_rate=0.0, throttle_rate=0.0), workloads=1, steps=20, windows=5,
                 window_sd=0.05)
    gate = _Gate(s, GateConfig(), np.random.default_rng(0))
    repeat = _repeat_result(0, gate._value(_Job(gate.rng, s.noise), "w0", False), phases=False)
    assert repeat.windows == 5 and repeat.steps == 100 and repeat.steps_per_window == 20
    levels = np.log(repeat.window_step_ms)
    assert float(np.std(levels)) > 0.005  # the windows differ (steps alone: none here)
    with pytest.raises(ValueError, match="windows"):
        Scenario(Noise(), windows=0)
    with pytest.raises(ValueError, match="window_sd"):
        Scenario(Noise(), window_sd=-0.1)
