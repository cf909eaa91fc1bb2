"""False alarms and power of the default gate on seeded synthetic gates.

Realistic noise (see perfgate.simulate): run-to-run sd of log 1-3%, day-to-day drift 1%
between recordings and between the baseline and the current job, one repeat in fifty 30%
slower; 5 repeats per side, a second look adding 5; baselines of 1 and of 3 recordings.
Every gate goes through the real log_ratio and decide_time. The full table is printed by
benchmarks/simulate_gate.py.
"""

from __future__ import annotations

import functools
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as st

from perfgate.decide import GateConfig, Verdict
from perfgate.simulate import CellResult, Scenario, simulate

GATES = 2000


@functools.lru_cache(maxsize=None)
def cell(run_sd: float, slowdown: float, recordings: int) -> CellResult:
    return simulate(Scenario(run_sd, slowdown, recordings), GATES, GateConfig(), seed=0)


@pytest.mark.parametrize("run_sd", [0.01, 0.02, 0.03])
def test_false_regressions_stay_at_or_below_one_percent(run_sd: float) -> None:
    results = [cell(run_sd, 0.0, k) for k in (1, 3)]
    false = sum(r.counts.get(Verdict.REGRESSION, 0) for r in results)
    assert false / (GATES * len(results)) <= 0.01, [r.share(Verdict.REGRESSION) for r in results]
    # nor does the gate hide in the other direction
    assert all(r.share(Verdict.IMPROVED) <= 0.01 for r in results)


@pytest.mark.parametrize("recordings", [1, 3])
def test_a_ten_percent_slowdown_is_caught(recordings: int) -> None:
    assert cell(0.01, 0.10, recordings).share(Verdict.REGRESSION) >= 0.95


def test_a_five_percent_slowdown_is_caught_with_three_recordings() -> None:
    assert cell(0.01, 0.05, 3).share(Verdict.REGRESSION) >= 0.80


@pytest.mark.xfail(
    strict=True,
    reason="not reachable with one recording: the 1% day-to-day drift of the current job and of "
    "the single baseline recording leave a standard error of at least 1.4% whatever the repeat "
    "count (see the oracle test below)",
)
def test_a_five_percent_slowdown_is_caught_with_one_recording() -> None:
    assert cell(0.01, 0.05, 1).share(Verdict.REGRESSION) >= 0.80


def test_no_test_reaches_eighty_percent_on_five_percent_with_one_recording() -> None:
    """An oracle that knows every variance, at alpha/2 per look, still falls short.

    The current job and the single baseline recording each carry their own 1% day effect,
    so the log difference has sd >= sqrt(2) * 1% however many repeats are added.
    """
    rng = np.random.default_rng(0)
    n, tau, sd, theta = 200_000, 0.01, 0.01, math.log(1.05)
    base = rng.normal(0, tau, n) + rng.normal(0, sd, (n, 5)).mean(axis=1)
    cur = rng.normal(theta, tau, n)[:, None] + rng.normal(0, sd, (n, 10))
    sd1 = math.sqrt(2 * tau**2 + 2 * sd**2 / 5)
    sd2 = math.sqrt(2 * tau**2 + sd**2 / 10 + sd**2 / 5)
    z = st.norm.isf(0.005)
    caught = ((cur[:, :5].mean(axis=1) - base) / sd1 > z) | ((cur.mean(axis=1) - base) / sd2 > z)
    assert caught.mean() < 0.78


def test_simulation_is_deterministic() -> None:
    a = simulate(Scenario(0.02, 0.05, 1), 50, seed=3)
    b = simulate(Scenario(0.02, 0.05, 1), 50, seed=3)
    c = simulate(Scenario(0.02, 0.05, 1), 50, seed=4)
    assert a == b and a != c
    assert sum(a.counts.values()) == 50


def test_benchmark_script_prints_the_whole_table() -> None:
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "simulate_gate.py"
    out = subprocess.run([sys.executable, str(script), "--gates", "3"], capture_output=True, text=True, check=True)
    lines = out.stdout.splitlines()
    assert lines[0] == "$ python benchmarks/simulate_gate.py --gates 3"
    rows = [line for line in lines if re.match(r"\| \d+% \| [13] \| \d+% \| 3 \|", line)]
    assert len(rows) == 3 * 2 * 4
