"""Sequential looks: the boundary spends exactly α, and the driver stops, goes on and refuses as it should."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pytest
from scipy import special

from perfgate.analysis.decide import GateConfig, Look
from perfgate.analysis.driver import BudgetTooSmall, drive, schedule_for
from perfgate.analysis.outcome import Entry, Pairing
from perfgate.analysis.simulate import AGAINST, Noise, Scenario, _Gate, _repeat_result, _Repeat, _run_result
from perfgate.analysis.stats.sequential import Schedule, crossing_levels, spent
from perfgate.model.verdict import Verdict
from perfgate.text.units import duration, parse_duration


def _crossing(levels: Sequence[float], counts: Sequence[int], paths: int = 200_000, seed: int = 0) -> float:
    """Monte Carlo: the chance that a null random walk crosses the boundary at any look."""
    rng = np.random.default_rng(seed)
    steps = rng.standard_normal((paths, counts[-1]), dtype=np.float32)
    walk = np.cumsum(steps, axis=1)[:, np.asarray(counts) - 1] / np.sqrt(np.asarray(counts, dtype=float))
    bounds = -special.ndtri(np.asarray(levels))
    return float(np.mean((walk > bounds).any(axis=1)))


@pytest.mark.parametrize("gamma", [1.0, -4.0, 0.0])
def test_the_boundary_spends_exactly_alpha_over_many_looks(gamma: float) -> None:
    schedule = Schedule(6, 30, gamma=gamma)
    levels = [schedule.level(0.01, c) for c in schedule.counts]
    assert len(levels) == 25
    crossed = _crossing(levels, schedule.counts)
    # 200,000 paths: the sd of the estimate is 0.00022
    assert abs(crossed - 0.01) < 0.0012, crossed
    # Each look tests at less than α (many looks cost something), the first at its spent share.
    assert all(0 < level < 0.01 for level in levels)
    assert levels[0] == pytest.approx(spent(6 / 30, 0.01, gamma))


def test_one_look_tests_at_the_whole_alpha() -> None:
    assert crossing_levels(0.01, (1.0,)) == (0.01,)
    assert Schedule(6, 6).level(0.025, 6) == 0.025
    assert Look.single(4).level(0.01) == 0.01


def test_two_equal_looks_match_the_known_exact_boundary() -> None:
    # Two looks at information 1/2 and 1, linear spending: look 1 at α/2; look 2 solves the rest exactly.
    first, second = crossing_levels(0.05, (0.5, 1.0), 0.0)
    assert first == pytest.approx(0.025)
    from scipy.stats import multivariate_normal

    c1, c2 = -special.ndtri(first), -special.ndtri(second)
    rho = math.sqrt(0.5)
    both_below = multivariate_normal([0, 0], [[1, rho], [rho, 1]]).cdf([c1, c2])
    assert 1 - both_below == pytest.approx(0.05, abs=2e-5)


def test_a_schedule_refuses_what_cannot_be_planned() -> None:
    with pytest.raises(ValueError, match="comes before the first"):
        Schedule(6, 4)
    with pytest.raises(ValueError, match="no look falls at 5"):
        Schedule(6, 30).level(0.01, 5)
    with pytest.raises(ValueError, match="max_blocks = 4 cannot hold the first look's 6 blocks"):
        schedule_for(GateConfig(max_blocks=4), 6)
    assert Schedule(6, 10, every=3).counts == (6, 9, 10)


@pytest.mark.parametrize("text, seconds", [("20m", 1200.0), ("90s", 90.0), ("1.5h", 5400.0), (45, 45.0),
                                           ("2 min", 120.0)])
def test_budgets_read_as_durations(text: object, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "-5m", "0", "nan", "9999h", True, None, "5d"])
def test_a_bad_budget_is_one_line(text: object) -> None:
    with pytest.raises(ValueError, match="^budget: ") as info:
        parse_duration(text)
    assert "\n" not in str(info.value)


def test_durations_read_as_people_say_them() -> None:
    assert [duration(s) for s in (4.4, 60, 190, 3725)] == ["4 s", "1 min", "3 min 10 s", "1 h 2 min"]


class _Blocks:
    """A paired strategy drawing blocks of fixed-noise workloads; one block of one workload is one tick."""

    unit = "block"

    def __init__(self, slow: dict[str, float], sd: float = 0.01, seed: int = 0, interrupt_at: int | None = None):
        self.slow, self.sd = slow, sd
        self.rng = np.random.default_rng(seed)
        self.head: dict[str, list[_Repeat]] = {n: [] for n in slow}
        self.base: dict[str, list[_Repeat]] = {n: [] for n in slow}
        self.ticks = 0
        self.measured: list[tuple[tuple[str, ...], int]] = []
        self.interrupt_at = interrupt_at

    def clock(self) -> float:
        return float(self.ticks)

    def measure(self, names: Sequence[str], upto: int) -> None:
        self.measured.append((tuple(names), upto))
        if self.interrupt_at is not None and upto >= self.interrupt_at:
            raise KeyboardInterrupt
        for name in names:
            for block in range(len({r.block for r in self.head[name]}), upto):
                for side in ("base", "head", "head", "base"):
                    x = 50.0 * math.exp(self.sd * self.rng.standard_normal())
                    if side == "head":
                        x *= 1 + self.slow[name]
                    (self.head if side == "head" else self.base)[name].append(_Repeat(x, False, block))
                self.ticks += 1

    def available(self, name: str) -> int:
        return len({r.block for r in self.head[name]})

    def entries(self, names: Sequence[str], count: int) -> list[Entry]:
        def result(name: str, drawn: list[_Repeat]):
            kept = [r for r in drawn if r.block < count]
            return _run_result(name, kept, False, [_repeat_result(i, r, False) for i, r in enumerate(kept)])

        return [Entry(n, result(n, self.head[n]), None, pairing=Pairing(result(n, self.base[n]), AGAINST))
                for n in names]

    def seconds_per_unit(self, names: Sequence[str]) -> float | None:
        return float(len(names)) if self.ticks else None

    def notes(self, name: str) -> tuple[str, ...]:
        return ()


def test_a_decided_workload_stops_measuring_and_the_others_go_on() -> None:
    # "fast" is slowed by 40% (decided at the first look); "close" is 3% slower (= δ): it goes on.
    strategy = _Blocks({"fast": 0.40, "close": 0.03}, sd=0.02)
    config = GateConfig(max_blocks=12)
    driven = drive(strategy, ["fast", "close"], config, schedule_for(config, 4), clock=strategy.clock)
    verdicts = {c.workload: c for c in driven.outcome.comparisons}
    assert verdicts["fast"].verdict is Verdict.REGRESSION
    assert verdicts["fast"].progress.startswith("decided after 4 blocks")
    assert strategy.measured[0] == (("fast", "close"), 4)
    assert all(names == ("close",) for names, _ in strategy.measured[1:])
    assert [upto for _, upto in strategy.measured[1:]] == list(range(5, 5 + len(strategy.measured) - 1))
    assert driven.looks == len(strategy.measured)


def test_unchanged_code_at_low_noise_passes_at_the_first_look() -> None:
    strategy = _Blocks({"a": 0.0, "b": 0.0}, sd=0.005)
    config = GateConfig()
    driven = drive(strategy, ["a", "b"], config, schedule_for(config, 6), clock=strategy.clock)
    assert [c.verdict for c in driven.outcome.comparisons] == [Verdict.PASS, Verdict.PASS]
    assert driven.looks == 1 and driven.count == 6


@pytest.mark.parametrize("inconclusive", ["bound", "pass"])
def test_the_budget_stops_the_undecided_naming_what_it_would_need(inconclusive: str) -> None:
    strategy = _Blocks({"noisy": 0.0}, sd=0.30, seed=3)
    config = GateConfig(max_blocks=20, inconclusive=inconclusive)  # above the 9 blocks the budget holds
    driven = drive(strategy, ["noisy"], config, schedule_for(config, 4), budget_s=9.0, clock=strategy.clock)
    (c,) = driven.outcome.comparisons
    # 30% noise over 9 blocks rules out no +6% slowdown: too noisy to gate, unless told to pass it
    assert c.verdict is (Verdict.TOO_NOISY if inconclusive == "bound" else Verdict.INCONCLUSIVE)
    assert driven.count == 9  # one tick a block: the 10th block would end after the budget
    assert c.progress.startswith("stopped at the budget (9 s) after 9 blocks")
    assert "this runner would need about" in c.progress and "blocks (about" in c.progress and "for δ=3%" in c.progress
    assert driven.outcome.stopped.startswith("stopped at the budget")
    if inconclusive == "bound":
        assert c.reason.startswith("too noisy to gate: its upper bound +")
        assert "reaches the gate's bound +6%" in c.reason and "perfgate calibrate" in c.reason
        assert driven.outcome.exit_code == 2


def test_a_budget_that_cannot_hold_the_first_look_is_refused_after_one_block() -> None:
    strategy = _Blocks({"a": 0.0})
    config = GateConfig()
    with pytest.raises(BudgetTooSmall, match="cannot hold the first look: 6 blocks at about 1 s each"):
        drive(strategy, ["a"], config, schedule_for(config, 6), budget_s=3.0, clock=strategy.clock)
    assert strategy.measured == [(("a",), 1)]


def test_ctrl_c_keeps_the_looks_completed_as_undecided() -> None:
    strategy = _Blocks({"a": 0.03}, sd=0.05, interrupt_at=8)
    config = GateConfig()
    driven = drive(strategy, ["a"], config, schedule_for(config, 6), clock=strategy.clock)
    (c,) = driven.outcome.comparisons
    assert driven.interrupted and driven.count == 7
    # a true +3% at 5% noise after 7 blocks: its interval reaches past +6%, so not green
    assert c.verdict is Verdict.TOO_NOISY and c.reason.startswith("too noisy to gate")
    assert c.progress.startswith("interrupted after 7 blocks")
    assert c.time is not None and c.time.count == 7  # the last completed look's estimate is shown


def test_ctrl_c_before_the_first_look_is_undecided_with_nothing_judged() -> None:
    strategy = _Blocks({"a": 0.0}, interrupt_at=1)
    config = GateConfig()
    driven = drive(strategy, ["a"], config, schedule_for(config, 6), clock=strategy.clock)
    (c,) = driven.outcome.comparisons
    assert c.verdict is Verdict.TOO_NOISY and c.time is None  # no interval rules anything out
    assert c.reason.startswith("too noisy to gate: no interval rules out the gate's bound +6%")
    assert "interrupted before the first look was measured" in c.reason
    (passing,) = drive(_Blocks({"a": 0.0}, interrupt_at=1), ["a"], GateConfig(inconclusive="pass"),
                       schedule_for(config, 6)).outcome.comparisons
    assert passing.verdict is Verdict.INCONCLUSIVE and passing.reason == "interrupted before the first look was measured"


def test_undecided_at_max_blocks_says_so() -> None:
    strategy = _Blocks({"a": 0.0}, sd=0.40, seed=1)
    config = GateConfig(max_blocks=5)
    driven = drive(strategy, ["a"], config, schedule_for(config, 4), clock=strategy.clock)
    (c,) = driven.outcome.comparisons
    assert c.verdict is Verdict.TOO_NOISY
    assert c.progress.startswith("undecided at the last planned look (5 blocks, max_blocks); this runner would need")


def test_the_simulated_gate_runs_through_the_driver_with_counterbalanced_blocks() -> None:
    gate = _Gate(Scenario(Noise(run_sd_log=0.01, outlier_rate=0.0, throttle_rate=0.0), 0.0, workloads=2),
                 GateConfig(), np.random.default_rng(0))
    verdicts = gate.run()
    assert set(verdicts.values()) == {Verdict.PASS}
    assert gate.looks == 1 and gate.units == 6


def _t_paths(counts: Sequence[int], paths: int, seed: int) -> np.ndarray:
    """Independent null paths of the one-sample t at each count (J - 1 df), not the boundary's own."""
    rng = np.random.default_rng(seed)
    d = rng.standard_normal((paths, counts[-1]), dtype=np.float32).astype(float)
    n = np.arange(1, counts[-1] + 1, dtype=float)
    total, squares = np.cumsum(d, axis=1), np.cumsum(d * d, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        var = (squares - total * total / n) / (n - 1)
        t = (total / n) / np.sqrt(var / n)
    return t[:, np.asarray(counts) - 1]


def test_the_t_boundary_spends_exactly_alpha_where_the_z_levels_overspend() -> None:
    """The paired gate's statistic is a t on J - 1 df: the Brownian levels applied to its
    p-values cross at about 1.12% for α = 1%; the simulated t boundary at 1% (checked on
    paths of its own, 300,000: sd 0.018%)."""
    schedule = Schedule(6, 30, pivot="t")
    t = _t_paths(schedule.counts, 300_000, seed=11)
    exact = np.array([schedule.critical(0.01, c) for c in schedule.counts])
    crossed = float(np.mean((t > exact).any(axis=1)))
    assert abs(crossed - 0.01) < 0.0006, crossed
    z_levels = crossing_levels(0.01, tuple(c / 30 for c in schedule.counts))
    z_as_t = np.array([special.stdtrit(c - 1, 1 - lv) for c, lv in zip(schedule.counts, z_levels, strict=True)])
    assert float(np.mean((t > z_as_t).any(axis=1))) > 0.0106
    # The level of each look is the t tail of its boundary on that look's df: a p-value at that
    # level is the boundary itself.
    for c, crit in zip(schedule.counts, exact, strict=True):
        assert special.stdtr(c - 1, -crit) == pytest.approx(schedule.level(0.01, c), rel=1e-12)


def test_the_t_boundary_is_the_same_in_every_process_and_holds_the_pass_level() -> None:
    from perfgate.analysis.stats.sequential import simulate_t_boundaries

    counts = (3, 5, 8, 12)
    a = simulate_t_boundaries([0.025], counts, paths=200_000)
    b = simulate_t_boundaries([0.025, 0.01], counts, paths=200_000)
    assert a[0.025] == b[0.025]  # fixed seed, every level on the same paths
    t = _t_paths(counts, 200_000, seed=3)
    crossed = float(np.mean((t > np.array(a[0.025])).any(axis=1)))
    assert abs(crossed - 0.025) < 0.0015, crossed  # sd 0.035% each, two independent sets of paths
    with pytest.raises(ValueError, match="at least 2 blocks"):
        Schedule(1, 5, pivot="t")
    with pytest.raises(ValueError, match="pivot must be one of"):
        Schedule(2, 5, pivot="normal")
    assert Schedule(4, 4, pivot="t").level(0.01, 4) == 0.01  # one look: the whole level


def test_a_paired_schedule_uses_the_t_boundary_and_a_stored_one_the_brownian() -> None:
    assert schedule_for(GateConfig(), 6, "block").pivot == "t"
    assert schedule_for(GateConfig(), 5, "repeat").pivot == "information"
