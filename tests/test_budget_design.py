"""A default gate fills its budget: with a budget and no ``max_blocks``, a paired gate plans its
last look from the budget and the first block's recorded wall time, and the judge re-derives
the same last look from the base's settings and the result files."""

from __future__ import annotations

import dataclasses
import json
import math
import random
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from factories import define_workloads, make_repeat, make_result
from test_judge import run as run_judge_cli
from test_judge import write_run

from perfgate.adapters.cli import main
from perfgate.analysis.blocks import block_order
from perfgate.analysis.decide import GateConfig
from perfgate.analysis.driver import MAX_PLANNED, BudgetPlan, drive, first_block_seconds, schedule_for
from perfgate.analysis.outcome import Entry, Pairing
from perfgate.gate.config import Settings, load_settings
from perfgate.gate.judge import planned_last
from perfgate.gate.shards import combine_shards
from perfgate.model.errors import UsageError
from perfgate.model.result import RunResult
from perfgate.model.verdict import Verdict
from perfgate.store.untrusted_folders import Measured

START = datetime(2026, 12, 1, 9, 0, 0, tzinfo=timezone.utc)
AGAINST = "ba5e" * 10


def _at(seconds: float, *, naive: bool = False) -> str:
    moment = START + timedelta(seconds=seconds)
    return (moment.replace(tzinfo=None) if naive else moment).isoformat()


def _result(name: str, starts: Sequence[float], block: int = 0, window_s: float = 1.0) -> RunResult:
    """One side's repeats of one block, started at ``starts`` seconds after START."""
    base = make_result(name, repeats=len(starts))
    repeats = tuple(dataclasses.replace(r, block=block, started_at=_at(t), window_s=window_s)
                    for r, t in zip(base.repeats, starts, strict=True))
    return dataclasses.replace(base, repeats=repeats)


# --- the planning function: recorded data -> the last look ---------------------------------------

def test_the_first_block_lasts_from_its_first_process_to_after_its_last() -> None:
    # One workload: base, head, head, base started 5 s apart: three gaps of 5 s, and the last
    # process taken as long as the mean gap: 20 s.
    head = _result("a", [5.0, 10.0])
    base = _result("a", [0.0, 15.0])
    assert first_block_seconds([head, base]) == pytest.approx(20.0)
    # Two workloads one after the other: eight processes, 5 s apart.
    other = [_result("b", [25.0, 30.0]), _result("b", [20.0, 35.0])]
    assert first_block_seconds([head, base, *other]) == pytest.approx(40.0)


def test_only_the_first_block_is_read_and_the_order_of_the_results_does_not_matter() -> None:
    results = [_result("a", [5.0, 10.0]), _result("a", [0.0, 15.0]), _result("b", [25.0, 30.5]),
               _result("b", [20.0, 35.25])]
    later = [_result("a", [1000.0, 1200.0], block=1), _result("a", [900.0, 1300.0], block=1)]
    expected = first_block_seconds(results)
    assert first_block_seconds([*results, *later]) == expected
    shuffled = list(results)
    for seed in range(5):
        random.Random(seed).shuffle(shuffled)
        assert first_block_seconds(shuffled) == expected  # exactly: the judge reads the files in another order


def test_the_first_block_lasts_at_least_its_timed_windows() -> None:
    # Sub-second processes recorded to the second: the span says 0, the windows say 4 x 0.4 s.
    head = _result("a", [0.0, 0.0], window_s=0.4)
    base = _result("a", [0.0, 0.0], window_s=0.4)
    assert first_block_seconds([head, base]) == pytest.approx(1.6)


def test_recorded_instants_are_read_as_they_are_written() -> None:
    head, base = _result("a", [5.0, 10.0]), _result("a", [0.0, 15.0])
    naive = [dataclasses.replace(r, repeats=tuple(dataclasses.replace(p, started_at=p.started_at.replace("+00:00", ""))
                                                  for p in r.repeats)) for r in (head, base)]
    assert first_block_seconds(naive) == pytest.approx(20.0)  # a naive instant is UTC
    garbled = dataclasses.replace(base, repeats=tuple(dataclasses.replace(r, started_at="yesterday")
                                                      for r in base.repeats))
    # the unreadable starts are left out: two starts 5 s apart, and the four windows
    assert first_block_seconds([head, garbled]) == pytest.approx(10.0)
    assert first_block_seconds([]) is None
    assert first_block_seconds([_result("a", [0.0, 5.0], block=1)]) is None


@pytest.mark.parametrize(("block_s", "last"), [
    (15.8, 37),              # floor(600 / 15.8)
    (20.0, 30),
    (200.0, 6),              # the budget holds 3: never below the first look
    (0.5, MAX_PLANNED),      # 1200: at most 500 without max_blocks
    (None, 6),               # no first block recorded: the first look alone
])
def test_the_last_look_is_the_blocks_the_budget_holds(block_s: float | None, last: int) -> None:
    assert BudgetPlan(600.0, 6, MAX_PLANNED).last_for(block_s) == last


def test_an_explicit_max_blocks_caps_the_plan() -> None:
    assert BudgetPlan(600.0, 6, 24, cap_given=True).last_for(15.8) == 24
    assert BudgetPlan(600.0, 6, 60, cap_given=True).last_for(15.8) == 37


def test_the_plan_says_how_it_was_made() -> None:
    results = [_result("a", [3.95, 7.9]), _result("a", [0.0, 11.85])]  # 15.8 s a block
    plain = BudgetPlan(600.0, 6, MAX_PLANNED).planned(results)
    assert (plain.last, plain.allowed) == (37, 37)
    assert plain.describe() == "planned up to 37 blocks: budget 10 min at about 15.8 s a block"
    capped = BudgetPlan(600.0, 6, 30, cap_given=True).planned(results)
    assert capped.describe() == ("planned up to 30 blocks, max_blocks (budget 10 min at about 15.8 s a block "
                                 "would hold 37)")
    short = BudgetPlan(60.0, 6, MAX_PLANNED).planned(results)
    assert short.describe() == "planned up to 6 blocks, the first look (budget 1 min at about 15.8 s a block holds 3)"
    most = BudgetPlan(3600.0, 6, MAX_PLANNED).planned([_result("a", [0.0, 0.0], window_s=1.0),
                                                      _result("a", [0.0, 0.0], window_s=1.0)])
    assert most.describe() == "planned up to 500 blocks, the most a budget plans (budget 1 h at about 4 s a block " \
                              "would hold 900)"


# --- which gates plan from the budget --------------------------------------------------------

def _settings(tmp_path: Path, table: str, cli: dict | None = None) -> Settings:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text("[tool.perfgate]\n" + table)
    return load_settings(pyproject, cli)


def test_without_a_budget_the_looks_end_at_max_blocks(tmp_path: Path) -> None:
    settings = _settings(tmp_path, "blocks = 6\n")
    assert settings.budget_plan(paired=True) is None
    assert schedule_for(settings.gate, settings.blocks).last == 30  # as before


def test_a_budget_without_max_blocks_plans_up_to_500(tmp_path: Path) -> None:
    settings = _settings(tmp_path, 'budget = "10m"\n')
    assert settings.budget_plan(paired=True) == BudgetPlan(600.0, 6, MAX_PLANNED, cap_given=False)
    assert settings.budget_plan(paired=False) is None  # the stored design ends at max_blocks repeats


@pytest.mark.parametrize(("table", "cli"), [('budget = "10m"\nmax_blocks = 40\n', None),
                                            ('budget = "10m"\n', {"max_blocks": 40})],
                         ids=["settings", "command-line"])
def test_a_given_max_blocks_caps_the_plan(tmp_path: Path, table: str, cli: dict | None) -> None:
    settings = _settings(tmp_path, table, cli)
    assert settings.max_blocks_given
    assert settings.budget_plan(paired=True) == BudgetPlan(600.0, 6, 40, cap_given=True)


def test_a_one_look_design_is_never_extended(tmp_path: Path) -> None:
    # max_blocks set to the blocks: one look, nothing for a budget to extend
    settings = _settings(tmp_path, 'budget = "10m"\n')
    step = dataclasses.replace(settings, blocks=12, gate=dataclasses.replace(settings.gate, max_blocks=12))
    assert step.budget_plan(paired=True) is None


# --- the driver plans from the first block it measured ------------------------------------------

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
                    drawn.append(dataclasses.replace(repeat, block=block, started_at=_at(self.t), window_s=1.0))
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


def _drive(strategy: _Timed, plan: BudgetPlan | None, budget_s: float = 200.0, first: int = 4):
    messages: list[str] = []
    config = GateConfig()
    driven = drive(strategy, list(strategy.slow), config, schedule_for(config, first), budget_s=budget_s,
                   plan=plan, clock=strategy.clock, announce=lambda m: (messages.append(m), strategy.events.append(m)))
    return driven, messages


def test_the_driver_plans_the_last_look_from_its_first_block_before_the_first_look() -> None:
    strategy = _Timed({"a": 0.0}, sd=0.3, seed=4)  # 20 s a block (four processes 5 s apart)
    driven, messages = _drive(strategy, BudgetPlan(200.0, 4, MAX_PLANNED))
    plan = "planned up to 10 blocks: budget 3 min 20 s at about 20 s a block"
    assert driven.planned is not None and driven.planned.describe() == plan
    assert driven.outcome.look.schedule.counts == tuple(range(4, 11))
    # one block first, timed from its recorded starts, then the first look's blocks; planned
    # before anything is judged
    assert strategy.measured[:2] == [(("a",), 1), (("a",), 4)]
    assert strategy.events[:3] == ["recorded", plan, "judged at 4"]
    (c,) = driven.outcome.comparisons
    # The budget holds exactly the planned blocks: undecided, the gate takes its last planned
    # look at 10 blocks (200 s on the fake clock), the whole α spent, not stopped by the budget.
    assert c.verdict is Verdict.INCONCLUSIVE
    assert c.progress == f"undecided at the last planned look (10 blocks); {plan}"
    assert driven.count == 10 and driven.outcome.look.last and driven.outcome.stopped is None


def test_a_gate_that_fills_its_budget_decides_where_the_default_max_blocks_stops_undecided() -> None:
    # Unchanged code at 5% noise: planned to 10 blocks, it PASSes at the 9th; planned to 30,
    # the same blocks are stopped by the same budget after 10, α mostly unspent.
    planned, _ = _drive(_Timed({"a": 0.0}, sd=0.05, seed=0), BudgetPlan(200.0, 4, MAX_PLANNED))
    (c,) = planned.outcome.comparisons
    assert c.verdict is Verdict.PASS
    assert c.progress == ("decided after 9 blocks (3 min); planned up to 10 blocks: budget 3 min 20 s at about "
                          "20 s a block")
    default, _ = _drive(_Timed({"a": 0.0}, sd=0.05, seed=0), None)
    (c,) = default.outcome.comparisons
    assert default.planned is None and default.outcome.look.schedule.last == 30
    assert c.verdict is Verdict.INCONCLUSIVE and not default.outcome.look.last
    assert c.progress.startswith("stopped at the budget (3 min 20 s) after 10 blocks")


def test_the_plan_depends_on_the_first_block_not_on_any_outcome() -> None:
    plans = []
    for slow in (0.0, 0.4):  # unchanged, and decided REGRESSION at the first look
        strategy = _Timed({"a": slow, "b": 0.0}, process_s=2.5)  # two workloads: 20 s a block
        driven, _ = _drive(strategy, BudgetPlan(200.0, 4, MAX_PLANNED))
        assert driven.planned is not None
        plans.append((driven.planned.last, driven.planned.block_s))
    assert plans == [(10, pytest.approx(20.0))] * 2


def test_an_explicit_max_blocks_caps_the_drivers_plan() -> None:
    strategy = _Timed({"a": 0.0}, sd=0.3, seed=4)
    driven, _ = _drive(strategy, BudgetPlan(200.0, 4, 8, cap_given=True))
    assert driven.outcome.look.schedule.last == 8
    (c,) = driven.outcome.comparisons
    assert c.progress.endswith("; planned up to 8 blocks, max_blocks (budget 3 min 20 s at about 20 s a block "
                               "would hold 10)")


# --- the judge derives the same last look from the files ---------------------------------------

@pytest.fixture
def base_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "base"
    folder.mkdir()
    (folder / "baselines").mkdir()
    define_workloads(folder, "tiny")
    return folder


def _base_settings(base_dir: Path, extra: str) -> None:
    (base_dir / "pyproject.toml").write_text(f'[tool.perfgate]\nbaselines = "baselines"\nblocks = 4\n{extra}')


def _measured_and_judged(tmp_path: Path, base_dir: Path, budget: str, *, seed: int = 4, sd: float = 0.3,
                         slow: float = 0.0) -> tuple:
    strategy = _Timed({"tiny": slow}, sd=sd, seed=seed)
    driven, _ = _drive(strategy, BudgetPlan(200.0, 4, MAX_PLANNED))
    folder = write_run(tmp_path / "results", {"tiny": strategy.result("tiny", "head")},
                       {"tiny": strategy.result("tiny", "base")})
    _base_settings(base_dir, f'budget = "{budget}"\n')
    code, _, err, _ = run_judge_cli(tmp_path, folder, base_dir)
    report = json.loads((tmp_path / "judged" / "report.json").read_text())
    return driven, report, code, err


@pytest.mark.parametrize(("seed", "sd", "slow", "verdict", "count"), [
    (4, 0.3, 0.0, "INCONCLUSIVE", 10),   # undecided at the planned last look
    (0, 0.05, 0.0, "PASS", 9),           # decided on the way
    (0, 0.01, 0.4, "REGRESSION", 4),     # decided at the first look
])
def test_the_judge_plans_the_same_last_look_from_the_base_settings_and_the_files(
        tmp_path: Path, base_dir: Path, seed: int, sd: float, slow: float, verdict: str, count: int) -> None:
    driven, report, code, err = _measured_and_judged(tmp_path, base_dir, "200s", seed=seed, sd=sd, slow=slow)
    (measured,) = driven.outcome.comparisons
    (judged,) = report["workloads"]
    plan = "planned up to 10 blocks: budget 3 min 20 s at about 20 s a block"
    assert judged["progress"].endswith(f"; {plan}"), judged["progress"]
    assert report["planned_looks"] == list(range(4, 11)) == list(driven.outcome.look.schedule.counts)
    # the same blocks and the same boundary: the same verdict at the same look
    assert (judged["verdict"], report["look_count"]) == (measured.verdict.value, driven.count) == (verdict, count)
    assert code == {"INCONCLUSIVE": 3, "PASS": 0, "REGRESSION": 1}[verdict], err


def test_the_budget_is_the_bases_not_the_measuring_jobs(tmp_path: Path, base_dir: Path) -> None:
    # Measured with a 200 s plan (10 blocks); the base's budget is 100 s: the judge plans 5
    # blocks, and the blocks beyond are not read.
    _, report, _, _ = _measured_and_judged(tmp_path, base_dir, "100s")
    (judged,) = report["workloads"]
    assert report["planned_looks"] == [4, 5]
    assert judged["progress"].endswith("; planned up to 5 blocks: budget 1 min 40 s at about 20 s a block")


def test_a_sharded_run_is_replayed_to_the_shortest_shards_plan() -> None:
    settings = Settings(blocks=4, budget_s=200.0)
    fast = Measured(None, {"a": _result("a", [2.5, 5.0])}, {"a": _result("a", [0.0, 7.5])})    # 10 s a block
    slow = Measured(None, {"b": _result("b", [5.0, 10.0])}, {"b": _result("b", [0.0, 15.0])})  # 20 s a block
    assert planned_last(fast, settings).last == 20 and planned_last(slow, settings).last == 10
    combined = combine_shards([("shard-1", fast), ("shard-2", slow)])
    both = planned_last(combined, settings)
    assert both is not None and (both.last, both.block_s) == (10, pytest.approx(20.0))
    assert planned_last(combined, dataclasses.replace(settings, budget_s=None)) is None


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
