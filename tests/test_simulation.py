"""False alarms and power of the gate on seeded synthetic gates, through the real driver and compare().

Each gate is a job of three workloads (Holm over three), the first one possibly slowed;
noise per process in job order with AR(1) 0.3, one process in fifty 30% slower and one
in fifty throttled (see perfgate.analysis.simulate). These are small, seeded versions of the
tables printed by benchmarks/simulate_gate.py (4,000 gates per cell there).
"""

from __future__ import annotations

import contextlib
import functools
import io
import itertools
import dataclasses
import math
import re

import pytest
from scipy import stats as st

import numpy as np
import perfgate.analysis.driver
from perfgate.analysis.decide import GateConfig, Look
from perfgate.analysis.outcome import GateOutcome, WorkloadComparison
from perfgate.analysis.simulate import (
    CellResult,
    Noise,
    Scenario,
    _Repeat,
    _repeat_result,
    paired_calibration,
    simulate,
)
from perfgate.analysis.stats.sequential import Schedule
from perfgate.model.verdict import Verdict

NOISE_1 = Noise(0.01, ar=0.3, drift_per_process=0.001)


@functools.lru_cache(maxsize=None)
def cell(slowdown: float, paired: bool, gates: int) -> CellResult:
    return simulate(Scenario(NOISE_1, slowdown, paired=paired), gates, GateConfig(), seed=0)


def _bound(gates: int, alpha: float = 0.01, risk: float = 0.001) -> int:
    """The most false alarms a gate with family-wise rate alpha gives in ``gates`` gates,
    except with probability ``risk`` (the binomial upper quantile)."""
    return int(st.binom.ppf(1 - risk, gates, alpha))


def test_paired_a_a_false_regressions_stay_within_alpha() -> None:
    # With a family-wise rate of 1%, more than 5 false alarms in 100 gates has
    # probability < 0.1%; no unchanged workload of any gate is called a REGRESSION here.
    r = cell(0.0, True, 100)
    assert r.false_regressions <= _bound(100) == 5
    assert r.share(Verdict.IMPROVED) <= 0.02


def test_paired_catches_ten_percent_at_one_percent_noise_nearly_always() -> None:
    r = cell(0.10, True, 30)
    # the rest are "runner unfit": with 2% of repeats throttled, two slowed-down blocks of the
    # six (a repeat leaves its whole ABBA block out on both sides) pass the 25% cap; never green
    assert r.counts.get(Verdict.REGRESSION, 0) >= 27
    assert set(r.counts) <= {Verdict.REGRESSION, Verdict.ERROR}
    assert r.false_regressions == 0


# The stored cell is the costliest here (a new look's information fractions cost a boundary
# computation): 30 gates, not 80. Its REGRESSION share sits far from both limits below: 13%
# of these 30 gates (12.5% of 80), a binomial sd of 6 points, against the paired cell's 86%
# less 10 points (a 63-point margin) and against 80% (67 points).
STORED_GATES = 30


def test_paired_beats_the_stored_design_on_five_percent_with_one_recording() -> None:
    paired, stored = cell(0.05, True, 80), cell(0.05, False, STORED_GATES)
    # The paired design removes the day effects that cap the stored one. Its block contrasts
    # (J - 1 = 5 df at six blocks, exact whatever the arms' noise) catch 5% in 86% of these
    # 80 gates; the stored design in 13% of its 30.
    assert paired.share(Verdict.REGRESSION) > 0.60
    assert paired.share(Verdict.REGRESSION) > stored.share(Verdict.REGRESSION) + 0.10


def test_the_stored_design_with_one_recording_stays_below_eighty_percent_on_five_percent() -> None:
    """A limit of the stored design, not of its statistics (see the oracle test below):
    the current job and the single recording each carry their own 1% day effect."""
    assert cell(0.05, False, STORED_GATES).share(Verdict.REGRESSION) < 0.80


# One workload (no Holm over workloads), one baseline recording of 5 repeats in a job of its own,
# the current job 5 repeats at the first look and one more at every look up to max_blocks (30);
# run-to-run and day-to-day sd 1% each, and nothing else (no AR, drift, outliers or
# throttling): the situation an oracle can be solved in.
ONE_RECORDING = Scenario(Noise(0.01, ar=0.0, drift_per_process=0.0, day_sd_log=0.01, outlier_rate=0.0,
                               throttle_rate=0.0), 0.05, paired=False, workloads=1)


def test_the_stored_gate_is_no_more_powerful_than_an_oracle_on_five_percent_with_one_recording() -> None:
    """An oracle that knows every variance, at each look's level of the stored gate's
    boundary spent over the true information, reaches about 80% on a 5% slowdown;
    perfgate's stored gate, simulated in the very same situation, is no more powerful than
    the oracle (and comes within 15 points of it when told the day sd), and a gate that
    forgets the day effects would be.

    The current job and the single baseline recording each carry their own 1% day effect,
    so the log difference has sd >= sqrt(2) * 1% however many repeats are added.
    """
    s = ONE_RECORDING
    config = GateConfig(min_effect=0.0)  # the oracle tests against no change
    assert s.repeats == s.baseline_repeats == 5 and s.recordings == 1 and config.max_blocks == 30
    tau, sd, theta = s.noise.day_sd_log, s.noise.run_sd_log, math.log1p(s.slowdown)
    # D_k = log(current mean at the look of k repeats) - log(baseline mean), k = 5, 6, ..., 30.
    # A later look's current mean holds the earlier one's repeats: Cov(D_j, D_k) = 2 tau^2 +
    # sd^2 / 5 + sd^2 / max(j, k). Each look tests at its boundary's level for a lone
    # hypothesis, the boundary spent over the true information (the gate's own estimates it).
    schedule = Schedule(s.repeats, config.max_blocks, gamma=config.spending_gamma, pivot="information")
    k = np.array(schedule.counts, dtype=float)
    cov = 2 * tau**2 + sd**2 / 5 + sd**2 / np.maximum.outer(k, k)
    sds = np.sqrt(np.diag(cov))
    fractions = tuple(float(v) for v in cov[-1, -1] / np.diag(cov))
    z = np.array([st.norm.isf(schedule.level(config.alpha, int(c), fractions)) for c in schedule.counts])
    missed = st.multivariate_normal(mean=np.zeros(k.size), cov=cov / np.outer(sds, sds)).cdf(z - theta / sds)
    oracle = 1.0 - float(missed)
    assert 0.76 < oracle < 0.84  # 80.5% (68.2% when the boundary was spent by the count of repeats)

    # perfgate's gate through simulate(): the driver's looks against a recorded baseline.
    # A gate claiming more power than the oracle has would be anti-conservative; 200
    # draws, so three binomial sds of slack.
    draws = 200
    bound = oracle + 3 * math.sqrt(oracle * (1 - oracle) / draws)

    def power(config: GateConfig) -> float:
        return simulate(s, draws, config, seed=0).share(Verdict.REGRESSION)

    assert power(config) <= bound
    # Told the true day sd (no prior to learn it from), the gate comes near the oracle
    # (it loses only the t statistic's few degrees of freedom and the 3% delta), not past it.
    told = power(GateConfig(min_effect=0.0, day_prior_df=math.inf))
    assert oracle - 0.15 <= told <= bound
    # What the day term costs buys the level: a gate that assumes no day effect calls
    # unchanged code a REGRESSION more often than α (2.5% of these 200 gates), the gate does not.
    forgetful = GateConfig(min_effect=0.0, assumed_day_sd_log=0.0)
    unchanged = dataclasses.replace(s, slowdown=0.0)
    own = simulate(unchanged, draws, config, seed=0).share(Verdict.REGRESSION)
    assert own <= 0.01 < simulate(unchanged, draws, forgetful, seed=0).share(Verdict.REGRESSION)


@pytest.mark.parametrize("paired", [True, False])
def test_every_verdict_comes_from_compare(monkeypatch: pytest.MonkeyPatch, paired: bool) -> None:
    real = perfgate.analysis.driver.compare
    calls: list[tuple[Look, tuple[str, ...], tuple[str, ...]]] = []

    def counting(entries, config, *, look=None, already_decided=(), per_workload=None):
        calls.append((look, tuple(e.workload for e in entries), tuple(already_decided)))
        assert all((e.pairing is not None) == paired for e in entries)
        return real(entries, config, look=look, already_decided=already_decided, per_workload=per_workload)

    monkeypatch.setattr(perfgate.analysis.driver, "compare", counting)
    r = simulate(Scenario(Noise(0.05), 0.03, paired=paired), 6, seed=1)
    first = 6 if paired else 5
    assert len(calls) == r.looks and r.went_on > 0
    assert r.looks == sum(units - first + 1 for units in r.units)  # a look at every unit from the first on
    gates: list[list[tuple[Look, tuple[str, ...], tuple[str, ...]]]] = []
    for call in calls:
        look = call[0]
        assert look is not None and look.unit == ("block" if paired else "repeat")
        assert look.schedule == Schedule(first, GateConfig().max_blocks, pivot="t" if paired else "information")
        if look.number == 1:
            gates.append([])
        gates[-1].append(call)
    assert len(gates) == 6 and [g[-1][0].count for g in gates] == list(r.units)
    for gate in gates:
        look, names, decided = gate[0]
        assert look.count == first and names == ("w0", "w1", "w2") and decided == ()
        for (before, was, _), (look, names, decided) in itertools.pairwise(gate):
            # the undecided ones measured one more unit and looked at again; the rest stay
            # in Holm's family
            assert look.count == before.count + 1 and look.number == before.number + 1
            assert set(names) <= set(was)
            assert set(names) | set(decided) == {"w0", "w1", "w2"} and not set(names) & set(decided)

    def always_regression(entries, config, *, look=None, already_decided=(), per_workload=None):
        return GateOutcome(tuple(WorkloadComparison(e.workload, Verdict.REGRESSION, "stub") for e in entries),
                           config, look)

    monkeypatch.setattr(perfgate.analysis.driver, "compare", always_regression)
    r = simulate(Scenario(Noise(0.01), 0.0, paired=paired), 4, seed=1)
    assert r.counts == {Verdict.REGRESSION: 4} and r.false_regressions == 4
    assert r.looks == 4 and r.went_on == 0 and r.units == (first,) * 4


@pytest.mark.parametrize("paired", [True, False])
def test_a_budget_stops_the_undecided_gates_before_max_blocks(paired: bool) -> None:
    """Noisy gates of a small slowdown measure on; a budget of 8 units' time (one workload)
    stops every gate by 8 units, and what is left undecided then does not rule out +6%: too
    noisy to gate."""
    free = simulate(Scenario(Noise(0.05), 0.03, paired=paired, workloads=1), 6, seed=2)
    budgeted = simulate(Scenario(Noise(0.05), 0.03, paired=paired, workloads=1, budget_blocks=8), 6, seed=2)
    assert max(free.units) > 8 >= max(budgeted.units)
    assert budgeted.counts.get(Verdict.TOO_NOISY, 0) > 0
    assert sum(budgeted.counts.values()) == 6


def test_the_block_model_keeps_its_level_under_autocorrelation_and_drift() -> None:
    # Its residuals assume independence inside a block; positive AR(1) makes it
    # conservative, and linear drift cancels in ABBA. 300 A/A draws at a nominal 5%:
    # more than the binomial 99.9% quantile would say the level is not kept.
    noise = Noise(0.02, ar=0.3, drift_per_process=0.002, outlier_rate=0.0, throttle_rate=0.0)
    size = paired_calibration(noise, 0.0, draws=300, levels=(0.05,))
    assert size["block"][0.05] <= st.binom.ppf(0.999, 300, 0.05) / 300
    assert size["contrast"][0.05] <= st.binom.ppf(0.999, 300, 0.05) / 300


def test_the_gates_block_contrasts_keep_their_level_when_the_head_is_ten_times_noisier() -> None:
    # The block model, with one pooled residual variance, did not (8.2% at a nominal 5%), and
    # switching to the contrasts on an F test made the level depend on the data: the gate
    # uses the contrasts alone.
    noise = Noise(0.01, ar=0.3, drift_per_process=0.001, outlier_rate=0.0, throttle_rate=0.0, current_sd_factor=10)
    size = paired_calibration(noise, 0.0, draws=800, levels=(0.05,))
    assert size["contrast"][0.05] <= st.binom.ppf(0.999, 800, 0.05) / 800


def test_throttled_repeats_carry_the_telemetry_the_gate_reads() -> None:
    assert _repeat_result(0, _Repeat(100.0, True, 2), phases=False).throttled
    rep = _repeat_result(0, _Repeat(100.0, False, 2), phases=True)
    assert not rep.throttled and rep.block == 2
    assert sorted(rep.phases_ms["step"])[1] == 100.0  # the repeat's median is the drawn value


def test_simulation_is_deterministic() -> None:
    s = Scenario(Noise(0.02), 0.05, paired=True)
    a, b, c = simulate(s, 4, seed=3), simulate(s, 4, seed=3), simulate(s, 4, seed=4)
    assert a == b and a != c
    assert sum(a.counts.values()) == 4


def test_benchmark_script_prints_both_tables() -> None:
    from benchmarks import simulate_gate

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        simulate_gate.main(["--gates", "1", "--run-sds", "0.01", "--estimator-gates", "1", "--calibration-draws", "2"])
    lines = out.getvalue().splitlines()
    assert lines[0] == ("$ python benchmarks/simulate_gate.py --gates 1 --run-sds 0.01 --estimator-gates 1 "
                        "--calibration-draws 2")
    gate_rows = [x for x in lines if re.match(r"\| (paired, 6 blocks|stored, 1 recording) \|", x)]
    estimator_rows = [x for x in lines if re.match(r"\| (block model|contrast t|Welch)", x)]
    assert len(gate_rows) == (2 + 3) * 2 * 4  # (2 drifts + 3 special cases) x 2 designs x 4 slowdowns
    assert len(estimator_rows) == 3 * 2 * 3  # AR x slowdown x estimator
    calibration = r"\| (-|head sd x10|1 in 50 30% slower) \| [0-9.]+ \| \d+% \| 2 \|"
    calibration_rows = [x for x in lines if re.match(calibration, x)]
    assert len(calibration_rows) == 3 * 2 + 1 + 2


def test_the_paired_estimator_is_passed_to_compare_not_patched_into_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each estimator judges the draws through compare (a Pairing's ``estimate``); compare's
    own estimator is never replaced."""
    import perfgate.analysis.compare as gate_compare
    import perfgate.analysis.simulate as simulation
    from perfgate.analysis.blocks import block_log_ratio

    real = simulation._estimators()
    calls: dict[str, int] = dict.fromkeys(real, 0)

    def counting(name):
        def estimate(*args, **kwargs):
            calls[name] += 1
            return real[name](*args, **kwargs)
        return estimate

    monkeypatch.setattr(simulation, "_estimators", lambda: {name: counting(name) for name in real})
    for estimator in ("contrast", "block", "welch"):
        before = dict(calls)
        r = simulate(Scenario(Noise(0.05), 0.10, paired=True, estimator=estimator), 2, seed=3)
        assert sum(r.counts.values()) == 2
        assert [n for n in calls if calls[n] > before[n]] == [estimator]
        assert gate_compare.block_log_ratio is block_log_ratio
