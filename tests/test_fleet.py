"""perfgate.analysis.fleet: one runner's time per step against the fleet's, on planted data."""

from __future__ import annotations

import numpy as np

from perfgate.analysis.fleet import compare_to_fleet

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
