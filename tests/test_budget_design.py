"""A budget's paired gate spends α over the share of its budget measured: a look after every
block, each spending up to the share of the budget its blocks' timed windows measured, the
look after which the next block would not fit spending all that is left; the judge spends it
the same way from the result files and the base's settings, takes a budget stop only from the
measuring job's duration (the Actions API's times), and refuses impossible stamps and blocks
beyond the last look the settings allow. Without settings a gate gets ``perfgate init``'s
design: windows "auto" and a 10-minute budget."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import random
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest
from factories import define_workloads, make_repeat, make_result
from test_judge import run as run_judge_cli
from test_judge import write_run

from perfgate.adapters.cli import main
from perfgate.analysis.blocks import block_order
from perfgate.analysis.decide import GateConfig
from perfgate.analysis.driver import MAX_PLANNED, BudgetSpending, drive, recorded_window_seconds
from perfgate.analysis.outcome import Entry, Pairing
from perfgate.analysis.stats.sequential import SEED, STANDARD_ALPHAS, spent_t_boundary
from perfgate.gate.config import Settings, load_settings
from perfgate.gate.judge import TreeDefinitions, base_settings, judge_measured
from perfgate.gate.replay import stamp_problem
from perfgate.gate.shards import combine_shards
from perfgate.model.errors import UsageError
from perfgate.model.measuring_job import MeasuringJob
from perfgate.model.result import RunResult
from perfgate.model.verdict import Verdict
from perfgate.store.untrusted_folders import Measured, load_measured

START = datetime(2026, 12, 1, 9, 0, 0, tzinfo=timezone.utc)
AGAINST = "ba5e" * 10


def _at(seconds: float) -> str:
    return (START + timedelta(seconds=seconds)).isoformat()


def _windowed(repeat, seconds: float, **fields):
    """``repeat`` whose timed steps add up to ``seconds`` (its window), every phase scaled alike."""
    factor = seconds * 1e3 / math.fsum(repeat.phases_ms["step"])
    phases = {k: tuple(v * factor for v in series) for k, series in repeat.phases_ms.items()}
    return dataclasses.replace(repeat, phases_ms=phases, window_s=seconds, **fields)


def _result(name: str, starts: Sequence[float], block: int = 0, window_s: float = 1.0) -> RunResult:
    """One side's repeats of one block, started at ``starts`` seconds after START."""
    base = make_result(name, repeats=len(starts))
    repeats = tuple(_windowed(r, window_s, block=block, started_at=_at(t))
                    for r, t in zip(base.repeats, starts, strict=True))
    return dataclasses.replace(base, repeats=repeats)


# --- the boundary over a scale the gate completes ---------------------------------------------

def _crossing_share(alpha: float, counts: Sequence[int], fractions: Sequence[float], paths: int, seed: int) -> float:
    """The share of independent null paths of the one-sample t whose t crosses the boundary at any look."""
    crit = spent_t_boundary(alpha, counts, fractions)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((paths, counts[-1]))
    crossed = np.zeros(paths, dtype=bool)
    for c, n in zip(crit, counts, strict=True):
        sub = x[:, :n]
        t = sub.mean(axis=1) / (sub.std(axis=1, ddof=1) / math.sqrt(n))
        crossed |= t > c
    return float(crossed.mean())


@pytest.mark.parametrize("case", ["even", "three-times-slower-later", "three-times-faster-later", "one-look"])
def test_all_of_alpha_is_spent_whatever_the_share_each_look_reached(case: str) -> None:
    # Block times varying 3x within a gate move the looks' shares of the budget; the last look
    # at 1 spends what is left, so the chance of ever crossing is alpha in every case.
    counts = list(range(4, 16))
    per = {"even": [1.0] * 12, "three-times-slower-later": [1.0] * 6 + [3.0] * 6,
           "three-times-faster-later": [3.0] * 6 + [1.0] * 6, "one-look": [1.0]}[case]
    counts = counts[:len(per)]
    spent = np.cumsum([p * (4 if i == 0 else 1) for i, p in enumerate(per)]) / 100.0
    fractions = [*np.minimum(spent[:-1], 1.0).tolist(), 1.0]
    share = _crossing_share(0.025, counts, fractions, 200_000, seed=11)
    assert abs(share - 0.025) < 0.0015, share  # binomial sd 0.00035 on 200,000 paths


def test_the_boundary_of_a_look_does_not_depend_on_the_looks_after_it() -> None:
    counts, fractions = (6, 7, 8, 9), (0.05, 0.1, 0.2, 1.0)
    whole = spent_t_boundary(0.01, counts, fractions)
    assert spent_t_boundary(0.01, counts[:2], fractions[:2]) == whole[:2]
    other = spent_t_boundary(0.01, (*counts[:2], 8, 9), (*fractions[:2], 0.5, 0.9))
    assert other[:2] == whole[:2] and other[2:] != whole[2:]
    assert SEED and 0.01 in STANDARD_ALPHAS


# --- which gates spend over a budget ------------------------------------------------------------

def _settings(tmp_path: Path, table: str, cli: dict | None = None) -> Settings:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text("[tool.perfgate]\n" + table)
    return load_settings(pyproject, cli)


def test_without_settings_a_gate_gets_inits_design(tmp_path: Path) -> None:
    for settings in (load_settings(None), load_settings(tmp_path / "missing.toml"), _settings(tmp_path, "blocks = 6\n")):
        assert settings.budget_s == 600.0 and settings.windows_auto
        assert settings.budget_spending(paired=True) == BudgetSpending(600.0, 6, MAX_PLANNED, cap_given=False)
        assert settings.gate.inconclusive == "bound"


@pytest.mark.parametrize("value", ["none", "off"])
def test_budget_none_ends_the_looks_at_max_blocks(tmp_path: Path, value: str) -> None:
    settings = _settings(tmp_path, f'budget = "{value}"\n')
    assert settings.budget_s is None and settings.budget_spending(paired=True) is None


def test_a_budget_spends_over_up_to_500_blocks_and_the_stored_design_does_not(tmp_path: Path) -> None:
    settings = _settings(tmp_path, 'budget = "10m"\n')
    assert settings.budget_spending(paired=True) == BudgetSpending(600.0, 6, MAX_PLANNED, cap_given=False)
    assert settings.budget_spending(paired=False) is None  # the stored design ends at max_blocks repeats


@pytest.mark.parametrize(("table", "cli"), [('budget = "10m"\nmax_blocks = 40\n', None),
                                            ('budget = "10m"\n', {"max_blocks": 40})],
                         ids=["settings", "command-line"])
def test_a_given_max_blocks_caps_the_looks(tmp_path: Path, table: str, cli: dict | None) -> None:
    settings = _settings(tmp_path, table, cli)
    assert settings.max_blocks_given
    assert settings.budget_spending(paired=True) == BudgetSpending(600.0, 6, 40, cap_given=True)


def test_a_one_look_design_is_never_extended(tmp_path: Path) -> None:
    settings = _settings(tmp_path, 'budget = "10m"\n')
    step = dataclasses.replace(settings, blocks=12, gate=dataclasses.replace(settings.gate, max_blocks=12))
    assert step.budget_spending(paired=True) is None


def test_the_share_is_the_timed_steps_of_the_blocks_judged_in_any_order() -> None:
    results = [_result("a", [5.0, 10.0], window_s=0.5), _result("a", [0.0, 15.0], window_s=0.25),
               _result("a", [20.0, 25.0], block=1, window_s=2.0)]
    assert recorded_window_seconds(results, 1) == pytest.approx(1.5)
    assert recorded_window_seconds(results, 2) == recorded_window_seconds(results[::-1], 2) == pytest.approx(5.5)
    plan = BudgetSpending(10.0, 2, 30)
    assert plan.share(results, 2) == pytest.approx(0.55) and BudgetSpending(2.0, 2, 30).share(results, 2) == 1.0
    # the steps, not the window the file states beside them
    stated = [dataclasses.replace(r, repeats=tuple(dataclasses.replace(p, window_s=99.0) for p in r.repeats))
              for r in results]
    assert recorded_window_seconds(stated, 2) == recorded_window_seconds(results, 2)


# --- the driver spends over the share measured -----------------------------------------------------

class _Timed:
    """A paired strategy on a fake clock: every process takes ``process_s`` seconds and records
    when it started; the head of each workload is ``slow`` slower, with ``sd`` noise."""

    unit = "block"

    def __init__(self, slow: dict[str, float], process_s: float = 5.0, sd: float = 0.01, seed: int = 0) -> None:
        self.slow, self.process_s, self.sd = slow, process_s, sd
        self.rng = random.Random(seed)
        self.t = 0.0
        self.sides: dict[str, dict[str, list]] = {n: {"head": [], "base": []} for n in slow}
        self.measured: list[tuple[tuple[str, ...], int]] = []
        self.events: list[str] = []

    def clock(self) -> float:
        return self.t

    def measure(self, names: Sequence[str], upto: int) -> None:
        self.measured.append((tuple(names), upto))
        for block in range(self.available(names[0]), upto):
            for name in names:
                for side in block_order(block):
                    scale = math.exp(self.sd * self.rng.gauss(0, 1)) * (1 + self.slow[name] if side == "head" else 1.0)
                    drawn = self.sides[name][side]
                    repeat = make_repeat(len(drawn), scale=scale, seed=self.rng.randrange(10**6), jitter=0.002)
                    drawn.append(_windowed(repeat, scale, block=block, started_at=_at(self.t)))
                    self.t += self.process_s

    def available(self, name: str) -> int:
        return len({r.block for r in self.sides[name]["head"]})

    def result(self, name: str, side: str, count: int | None = None) -> RunResult:
        kept = tuple(r for r in self.sides[name][side] if count is None or r.block < count)
        return dataclasses.replace(make_result(name, repeats=1), repeats=kept)

    def entries(self, names: Sequence[str], count: int) -> list[Entry]:
        self.events.append(f"judged at {count}")
        return [Entry(n, self.result(n, "head", count), None, pairing=Pairing(self.result(n, "base", count), AGAINST))
                for n in names]

    def seconds_per_unit(self, names: Sequence[str]) -> float | None:
        return 4 * self.process_s * len(names) if self.measured else None

    def notes(self, name: str) -> tuple[str, ...]:
        return ()

    def recorded(self, names: Sequence[str]) -> list[RunResult]:
        self.events.append("recorded")
        return [self.result(n, side) for n in names for side in ("head", "base")]


def _drive(strategy: _Timed, plan: BudgetSpending | None, budget_s: float = 200.0, first: int = 4,
           config: GateConfig | None = None):
    messages: list[str] = []
    config = config or GateConfig()
    schedule = plan.schedule(config.spending_gamma) if plan else None
    from perfgate.analysis.driver import schedule_for
    driven = drive(strategy, list(strategy.slow), config, schedule or schedule_for(config, first), budget_s=budget_s,
                   plan=plan, clock=strategy.clock, announce=lambda m: (messages.append(m), strategy.events.append(m)))
    return driven, messages


def test_each_look_spends_up_to_the_share_measured_and_the_last_one_all_of_it() -> None:
    strategy = _Timed({"a": 0.0}, sd=0.3, seed=4)  # 20 s a block, four timed windows of 1 s
    driven, messages = _drive(strategy, BudgetSpending(200.0, 4, MAX_PLANNED))
    schedule = driven.outcome.look.schedule
    # about 4 s of timed steps a block over 200 s, about 2% a block; the 10th block ends at
    # 200 s, and an 11th would not fit, so the look at 10 is the last and spends the rest
    measured = strategy.recorded(["a"])
    assert schedule.spending == (*(recorded_window_seconds(measured, c) / 200.0 for c in range(4, 10)), 1.0)
    assert all(0.015 < b - a < 0.025 for a, b in itertools.pairwise(schedule.spending[:-1]))
    assert schedule.closed and schedule.counts == tuple(range(4, 11)) and driven.outcome.look.last
    assert strategy.measured[:2] == [(("a",), 1), (("a",), 4)]
    (c,) = driven.outcome.comparisons
    assert c.verdict is Verdict.TOO_NOISY  # 30% noise over 10 blocks rules out no +6%
    assert c.progress.startswith("undecided at the last look, at the budget (10 blocks): all of α spent; this runner "
                                 "would need about")
    assert "look 7, the last: 10 blocks, all of α spent" in c.reason
    assert messages[0] == ("α spent over the share of the 3 min 20 s budget measured, all of it at the last look "
                           "(at most 500 blocks)")
    assert driven.outcome.stopped is None


def test_the_last_look_spends_all_of_alpha_where_the_blocks_slow_down_threefold() -> None:
    strategy = _Timed({"a": 0.0}, sd=0.3, seed=4)
    original = strategy.measure

    def slowing(names: Sequence[str], upto: int) -> None:
        original(names, upto)
        if strategy.available("a") >= 6:
            strategy.process_s = 15.0  # three times slower from the 7th block on
    strategy.measure = slowing  # type: ignore[method-assign]
    driven, _ = _drive(strategy, BudgetSpending(200.0, 4, MAX_PLANNED))
    schedule = driven.outcome.look.schedule
    assert schedule.closed and schedule.spending[-1] == 1.0 and driven.count < 10


def test_an_explicit_max_blocks_is_the_last_look() -> None:
    strategy = _Timed({"a": 0.0}, sd=0.3, seed=4)
    driven, _ = _drive(strategy, BudgetSpending(200.0, 4, 8, cap_given=True))
    schedule = driven.outcome.look.schedule
    assert schedule.counts == tuple(range(4, 9)) and schedule.spending[-1] == 1.0 and driven.count == 8


def test_a_decided_gate_stops_early_and_spent_only_its_share() -> None:
    strategy = _Timed({"a": 0.4}, sd=0.01, seed=0)
    driven, _ = _drive(strategy, BudgetSpending(200.0, 4, MAX_PLANNED))
    (c,) = driven.outcome.comparisons
    assert c.verdict is Verdict.REGRESSION and driven.count == 4
    assert driven.outcome.look.schedule.spending == (recorded_window_seconds(strategy.recorded(["a"]), 4) / 200.0,)


# --- the judge spends it the same way from the files ----------------------------------------------

@pytest.fixture
def base_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "base"
    folder.mkdir()
    (folder / "baselines").mkdir()
    define_workloads(folder, "tiny")
    return folder


def _base_settings(base_dir: Path, extra: str) -> None:
    (base_dir / "pyproject.toml").write_text(f'[tool.perfgate]\nbaselines = "baselines"\nblocks = 4\nwindows = 1\n{extra}')


def _measured(tmp_path: Path, *, seed: int = 4, sd: float = 0.3, slow: float = 0.0, cap: int = MAX_PLANNED):
    strategy = _Timed({"tiny": slow}, sd=sd, seed=seed)
    driven, _ = _drive(strategy, BudgetSpending(200.0, 4, cap, cap_given=cap != MAX_PLANNED))
    folder = write_run(tmp_path / "results", {"tiny": strategy.result("tiny", "head")},
                       {"tiny": strategy.result("tiny", "base")})
    return driven, folder


def _judged(tmp_path: Path, base_dir: Path, folder: Path, budget: str, *extra: str, more: str = "") -> tuple:
    _base_settings(base_dir, f'budget = "{budget}"\n{more}')
    code, _, err, _ = run_judge_cli(tmp_path, folder, base_dir, *extra)
    report = json.loads((tmp_path / "judged" / "report.json").read_text())
    return report, code, err


@pytest.mark.parametrize(("seed", "sd", "slow", "verdict", "count"), [
    (4, 0.3, 0.0, "TOO_NOISY", 10),      # undecided at the last look, at the budget
    (0, 0.05, 0.0, "PASS", 10),          # decided at the last look, where all of α is spent
    (0, 0.01, 0.4, "REGRESSION", 4),     # decided at the first look
])
def test_the_judge_spends_alpha_as_the_measuring_gate_did(tmp_path: Path, base_dir: Path, seed: int, sd: float,
                                                          slow: float, verdict: str, count: int) -> None:
    driven, folder = _measured(tmp_path, seed=seed, sd=sd, slow=slow)
    report, code, err = _judged(tmp_path, base_dir, folder, "200s")
    (measured,) = driven.outcome.comparisons
    (judged,) = report["workloads"]
    # the same blocks and the same boundary: the same verdict at the same look
    assert (judged["verdict"], report["look_count"]) == (measured.verdict.value, driven.count) == (verdict, count)
    assert code == {"TOO_NOISY": 2, "PASS": 0, "REGRESSION": 1}[verdict], err


def _job(seconds: float, start: float = -30.0) -> MeasuringJob:
    return MeasuringJob(START + timedelta(seconds=start), START + timedelta(seconds=start + seconds))


def _judge_measured(folder: Path, base_dir: Path, job: MeasuringJob | None):
    settings = base_settings(base_dir)
    measured = load_measured(folder)
    return judge_measured(measured, settings, design="paired", against=AGAINST, job=job,
                          definitions=TreeDefinitions.of(base_dir, settings, None, None)).outcome


def test_a_budget_stop_needs_the_measuring_jobs_own_duration(tmp_path: Path, base_dir: Path) -> None:
    _, folder = _measured(tmp_path)
    _base_settings(base_dir, 'budget = "200s"\n')
    # the job ran 4 min by the Actions API: the files' end is the budget's, the last look spends all of α
    (ran,) = _judge_measured(folder, base_dir, _job(240.0)).comparisons
    assert ran.verdict is Verdict.TOO_NOISY and "all of α spent" in (ran.progress or "")
    # the same files against a base whose budget is 6 min 40 s: the job's 4 min did not spend it, so
    # the files end short of the gate's last look, an ERROR, never a decision on what they hold
    _base_settings(base_dir, 'budget = "400s"\n')
    (short,) = _judge_measured(folder, base_dir, _job(240.0)).comparisons
    assert short.verdict is Verdict.ERROR
    assert "the measuring job ran 4 min by the Actions API, short of the base's budget of 6 min 40 s" in short.reason


def test_stamps_outside_the_job_or_shorter_than_their_windows_are_refused(tmp_path: Path, base_dir: Path) -> None:
    _, folder = _measured(tmp_path)
    measured = load_measured(folder)
    assert stamp_problem(measured, _job(240.0)) is None
    assert "outside the measuring job's run" in (stamp_problem(measured, _job(100.0)) or "")
    squeezed = dataclasses.replace(measured.head["tiny"], repeats=tuple(
        dataclasses.replace(r, started_at=_at(r.index * 0.5)) for r in measured.head["tiny"].repeats))
    problem = stamp_problem(dataclasses.replace(measured, head={"tiny": squeezed}), _job(240.0))
    assert problem is not None and "s after the repeat before it, whose timed window alone took" in problem
    _base_settings(base_dir, 'budget = "200s"\n')
    with pytest.raises(UsageError, match="outside the measuring job's run"):
        _judge_measured(folder, base_dir, _job(100.0))


def test_blocks_beyond_the_last_look_the_settings_allow_are_refused(tmp_path: Path, base_dir: Path) -> None:
    _, folder = _measured(tmp_path)  # 10 blocks
    report, code, _ = _judged(tmp_path, base_dir, folder, "200s", more="max_blocks = 8\n")
    (judged,) = report["workloads"]
    assert code == 2 and judged["verdict"] == "ERROR"
    assert "holds block 8, beyond the last look the base's settings allow (8 blocks): refused" in judged["reason"]


def test_a_sharded_run_spends_by_its_largest_share() -> None:
    from perfgate.gate.replay import ReplayedBlocks

    settings = Settings(blocks=2, budget_s=100.0)
    fast = Measured(None, {"a": _result("a", [2.5, 5.0], window_s=1.0)}, {"a": _result("a", [0.0, 7.5], window_s=1.0)})
    slow = Measured(None, {"b": _result("b", [5.0, 10.0], window_s=3.0)}, {"b": _result("b", [0.0, 15.0], window_s=3.0)})
    combined = combine_shards([("shard-1", fast), ("shard-2", slow)])
    replay = ReplayedBlocks(combined, settings, ["a", "b"], {}, AGAINST)
    assert replay.budget_share(["a", "b"], 1) == 0.12  # shard 2's 12 s of windows, not the 16 s of both


# --- a bad budget is one line and exit code 2 ----------------------------------------------------

@pytest.mark.parametrize("budget", ["soon", "0", "-5m", "9999h"])
def test_a_bad_budget_in_the_settings_is_one_line(tmp_path: Path, budget: str) -> None:
    with pytest.raises(UsageError) as info:
        _settings(tmp_path, f'budget = "{budget}"\n')
    assert "budget" in str(info.value) and "\n" not in str(info.value)


def test_a_bad_budget_on_the_command_line_is_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["gate", "--against", "HEAD", "--budget", "soon"]) == 2
    err = capsys.readouterr().err
    assert err == "perfgate: error: --budget: expected a duration such as 20m, 90s or 1h, got 'soon'\n"


def test_a_bad_budget_in_the_bases_settings_is_the_judges_exit_2(tmp_path: Path, base_dir: Path) -> None:
    strategy = _Timed({"tiny": 0.0})
    strategy.measure(["tiny"], 4)
    folder = write_run(tmp_path / "r", {"tiny": strategy.result("tiny", "head")},
                       {"tiny": strategy.result("tiny", "base")})
    _base_settings(base_dir, 'budget = "soon"\n')
    code, _, err, _ = run_judge_cli(tmp_path, folder, base_dir)
    assert code == 2
    assert err.count("\n") == 1 and "budget: expected a duration such as 20m, 90s or 1h, got 'soon'" in err


# --- the review's case: four stamps chose the gate's length ---------------------------------------

def _forged(result: RunResult, moved: dict[int, float]) -> RunResult:
    """``result`` with the repeats of ``moved`` (index: seconds after START) restamped."""
    return dataclasses.replace(result, repeats=tuple(
        dataclasses.replace(r, started_at=_at(moved[r.index])) if r.index in moved else r for r in result.repeats))


def test_stamps_the_artifact_writes_choose_neither_the_looks_nor_a_budget_stop(tmp_path: Path, base_dir: Path) -> None:
    strategy = _Timed({"tiny": 0.065}, sd=0.02, seed=1)  # a +6.5% head, 20 s blocks, a 200 s budget
    _drive(strategy, BudgetSpending(200.0, 4, MAX_PLANNED))
    head, base = strategy.result("tiny", "head"), strategy.result("tiny", "base")
    control = write_run(tmp_path / "control", {"tiny": head}, {"tiny": base})
    report, code, _ = _judged(tmp_path, base_dir, control, "200s")
    assert (code, report["workloads"][0]["verdict"]) == (1, "REGRESSION")
    looks = report["look_count"]
    # block 0's stamps spread 5 minutes apart (they planned the last look at the first, before):
    # the share of the budget is read from the windows, so the same looks and the same verdict
    spread = write_run(tmp_path / "spread", {"tiny": _forged(head, {0: 300.0, 1: 600.0})},
                       {"tiny": _forged(base, {0: 0.0, 1: 900.0})})
    report, code, _ = _judged(tmp_path, base_dir, spread, "200s")
    assert (code, report["workloads"][0]["verdict"], report["look_count"]) == (1, "REGRESSION", looks)
    # the files cut after 5 blocks and one stamp moved 9.5 minutes on, to pass as "stopped at the
    # budget": the measuring job's own duration (4 min by the API) holds no such stamp: refused
    kept = {n: dataclasses.replace(r, repeats=tuple(p for p in r.repeats if p.block < 5)) for n, r in
            (("head", head), ("base", base))}
    cut = write_run(tmp_path / "cut", {"tiny": _forged(kept["head"], {9: 570.0})}, {"tiny": kept["base"]})
    _base_settings(base_dir, 'budget = "200s"\n')
    with pytest.raises(UsageError, match="outside the measuring job's run"):
        _judge_measured(cut, base_dir, _job(240.0))
    # and without the moved stamp, the cut files are no budget stop: the job ran 1 min 40 s
    honest_cut = write_run(tmp_path / "cut2", {"tiny": kept["head"]}, {"tiny": kept["base"]})
    (c,) = _judge_measured(honest_cut, base_dir, _job(100.0, start=-1.0)).comparisons
    assert looks > 5 and c.verdict is Verdict.ERROR  # undecided at 5 blocks, decided later in the whole files
    assert "the measuring job ran 1 min 40 s by the Actions API, short of the base's budget of 3 min 20 s" in c.reason
