"""``perfgate selftest``: the injected slowdowns, the marking of injected results, the card.

The injection's accounting is checked on fake clocks (exact); on the real tiny workload
only wide-margin relations are asserted, since this machine is shared and a timing can
be several times off. Nothing here sets a limit on a duration.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from statistics import median
from types import SimpleNamespace

import pytest

from perfgate.adapters import cli, selftest
from perfgate.gate.selftest import Probe, SelftestResult, rate, run_selftest, schedule
from perfgate.analysis.decide import GateConfig, Look, PhaseFlag
from perfgate.analysis.outcome import GateOutcome, PhaseRow, WorkloadComparison
from perfgate.analysis.summary import summarise
from perfgate.gate.config import Settings
from perfgate.gate.gating import GateRun, MeasuringRequest
from perfgate.measure import runner, template
from perfgate.measure.child import ChildRun
from perfgate.measure.runner import measure
from perfgate.model.errors import UsageError
from perfgate.model.job import INJECTED, Job
from perfgate.model.verdict import Verdict
from perfgate.model.workload import PHASES
from perfgate.store.discovery import discover
from perfgate.store.results import result_path, save_result
from tests.factories import make_result


@pytest.fixture
def tiny(tiny_path: Path, tmp_path: Path):
    return discover([tiny_path], project_dir=tmp_path).get("tiny")


# --- the injection, on fake clocks ---------------------------------------------------------

class FakeTime:
    """A clock that moves 1 us per reading, and by hand for the step's own work."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        self.t += 1e-6
        return self.t

    def work(self, ms: float) -> None:
        self.t += ms / 1e3


def test_an_injected_delay_falls_inside_its_phase_and_nowhere_else():
    from perfgate.measure.inject import host_delay
    from perfgate.measure.timeline import IDLE, HostTimeline, InjectingTimeline

    now = FakeTime()
    steps = 4
    line = InjectingTimeline(HostTimeline(steps, now=now), {"backward": host_delay(2.5, now=now)})
    line.open(IDLE)
    for _ in range(steps):
        for phase in range(5):
            line.switch(IDLE if phase == 0 else phase - 1, phase)
            now.work(1.0)  # every phase does 1 ms of its own work
        line.boundary(4, IDLE)
    series = line.close().series_ms
    for phase in PHASES:
        expected = 3.5 if phase == "backward" else 1.0
        assert all(v == pytest.approx(expected, abs=0.01) for v in series[phase]), (phase, series[phase])
    assert median(series["step"]) == pytest.approx(5 + 2.5, abs=0.02)


def test_the_delay_runs_before_the_switch_that_leaves_its_phase():
    from perfgate.measure.timeline import BACKWARD, DATA, FORWARD, H2D, IDLE, OPTIMIZER, InjectingTimeline

    calls: list[str] = []
    inner = SimpleNamespace(timing="fake", open=lambda current: None, close=lambda: None,
                            switch=lambda old, new: calls.append(f"{old}>{new}"),
                            boundary=lambda current, after=None: calls.append(f"{current}|{after}"))
    line = InjectingTimeline(inner, {"forward": lambda: calls.append("delay"),
                                     "optimizer": lambda: calls.append("opt")})
    assert line.timing == "fake"
    for old, new in ((IDLE, DATA), (DATA, H2D), (H2D, FORWARD), (FORWARD, BACKWARD), (BACKWARD, OPTIMIZER)):
        line.switch(old, new)
    line.boundary(OPTIMIZER, IDLE)
    assert calls == ["5>0", "0>1", "1>2", "delay", "2>3", "3>4", "opt", "4|5"]
    # a script's boundary keeps its phase: nothing is left, no delay
    calls.clear()
    line.boundary(FORWARD)
    line.switch(FORWARD, FORWARD)
    assert calls == ["2|None", "2>2"]
    # a phase left twice in one step (zero_grad, then the optimizer's step) is delayed once
    calls.clear()
    for old, new in ((OPTIMIZER, IDLE), (IDLE, OPTIMIZER), (OPTIMIZER, IDLE)):
        line.switch(old, new)
    line.boundary(IDLE)
    line.switch(OPTIMIZER, IDLE)
    assert calls == ["opt", "4>5", "5>4", "4>5", "5|None", "opt", "4>5"]
    with pytest.raises(ValueError, match="cannot inject"):
        InjectingTimeline(inner, {"step": lambda: None})


def test_device_phases_get_the_device_delay_on_cuda_and_data_wait_stays_on_the_host(monkeypatch):
    from perfgate.measure import inject as loop

    made: list[tuple[str, float]] = []
    monkeypatch.setattr(loop, "device_delay", lambda ms: made.append(("device", ms)) or (lambda: None))
    monkeypatch.setattr(loop, "host_delay", lambda ms: made.append(("host", ms)) or (lambda: None))
    delays = loop.injection_delays({"data_wait": 1.0, "forward": 2.0, "optimizer": 3.0}, "cuda")
    assert set(delays) == {"data_wait", "forward", "optimizer"}
    # a GPU delay is made at its first use: nothing touches CUDA before a script's first line
    assert made == [("host", 1.0)]
    for _ in range(2):
        for delay in delays.values():
            delay()
    assert sorted(made) == [("device", 2.0), ("device", 3.0), ("host", 1.0)]
    made.clear()
    loop.injection_delays({"data_wait": 1.0, "forward": 2.0}, "cpu")
    assert sorted(made) == [("host", 1.0), ("host", 2.0)]


def test_a_plain_repeat_measures_with_the_bare_timeline(monkeypatch, tiny, tmp_path):
    import torch

    from perfgate.measure import loop

    wrapped: list[dict] = []
    real = loop.InjectingTimeline
    monkeypatch.setattr(loop, "InjectingTimeline",
                        lambda line, delays: wrapped.append(dict(delays)) or real(line, delays))
    threads = torch.get_num_threads()
    params = tiny.resolve("cpu", {"steps": "3", "warmup_steps": "1"})
    try:
        for inject in (None, {}):
            loop.run_repeat(tiny, params, "cpu", data_root=None, cache_dir=tmp_path, index=0, telemetry=False,
                            inject_ms=inject)
        assert wrapped == []  # no injection: the step runs on the bare timeline, nothing added per step
        repeat, _ = loop.run_repeat(tiny, params, "cpu", data_root=None, cache_dir=tmp_path, index=0,
                                    telemetry=False, inject_ms={"optimizer": 0.5})
    finally:
        torch.set_num_threads(threads)
    assert [set(d) for d in wrapped] == [{"optimizer"}]
    assert min(repeat.phases_ms["optimizer"]) >= 0.5  # a busy-wait lasts at least what was asked


# --- the job, the request, the marking ----------------------------------------------------

def _captured_request(monkeypatch, job: Job) -> dict:
    seen: dict = {}

    def fake_call(module, request, timeout_s, *, python=None):
        seen.update(request)
        return ChildRun({"ok": True, "repeat": {}}, "", 0)

    monkeypatch.setattr(template, "call", fake_call)  # a fresh start's call (the default starter)
    runner.run_one(job, "cpu", 0, Path("/cache"), ("abc", False), 60.0, True)
    return seen


def test_an_empty_injection_sends_the_request_as_before(monkeypatch, tiny):
    job = Job(tiny, tiny.resolve("cpu"), {"width": 8})
    request = _captured_request(monkeypatch, job)
    assert set(request) == {"workload", "source", "device", "params", "data_root", "cache_dir", "index",
                            "git_commit", "git_dirty", "telemetry", "project_dir"}
    assert job.overrides == {"width": 8} and job.inject_ms == {}
    assert request == _captured_request(monkeypatch, Job(tiny, tiny.resolve("cpu"), {"width": 8}, inject_ms={}))


def test_an_injection_travels_in_the_request_and_marks_the_overrides(monkeypatch, tiny):
    job = Job(tiny, tiny.resolve("cpu"), {"width": 8}, inject_ms={"forward": 1.5, "backward": 0})
    assert job.inject_ms == {"forward": 1.5}
    assert job.overrides == {"width": 8, INJECTED: {"forward": 1.5}}
    assert _captured_request(monkeypatch, job)["inject_ms"] == {"forward": 1.5}
    # the marker follows the injection: taking it away takes the marker away
    plain = dataclasses.replace(job, inject_ms={})
    assert plain.overrides == {"width": 8}
    with pytest.raises(ValueError, match="unknown phase 'step'"):
        Job(tiny, tiny.resolve("cpu"), {}, inject_ms={"step": 1.0})
    with pytest.raises(ValueError, match="forward must be a finite number"):
        Job(tiny, tiny.resolve("cpu"), {}, inject_ms={"forward": -1.0})


def test_rebaseline_refuses_a_result_with_injected_slowdowns(tmp_path, capsys):
    results, baselines = tmp_path / "results", tmp_path / "baselines"
    plain = make_result("plain")
    injected = dataclasses.replace(make_result("tiny"), overrides={INJECTED: {"forward": 0.4}})
    save_result(plain, result_path(results, "plain"))
    save_result(injected, result_path(results, "tiny"))
    code = cli.main(["rebaseline", "--reason", "try", "--from-results", str(results), "--baselines", str(baselines),
                     "--config", str(tmp_path / "none.toml")])
    assert code == 2
    err = capsys.readouterr().err
    assert "tiny: a result with injected slowdowns (perfgate selftest) cannot be a baseline" in err
    assert not baselines.exists() or not any(baselines.rglob("*.json"))
    # the same directory without the injected file records its baseline as before
    result_path(results, "tiny").unlink()
    assert cli.main(["rebaseline", "--reason", "try", "--from-results", str(results), "--baselines",
                     str(baselines), "--config", str(tmp_path / "none.toml")]) == 0
    assert len(list(baselines.rglob("plain.json"))) == 1


# --- the self-test's design and its card, with fake gates ----------------------------------

PROBE = Probe(step_ms=10.0, shares={"data_wait": 0.2, "h2d": 0.002, "forward": 0.3, "backward": 0.35,
                                    "optimizer": 0.12}, seconds=3.0, environment_key="cpu-test-key")


def _comparison(verdict: Verdict, ratio: float, flagged: tuple[str, ...]) -> WorkloadComparison:
    rows = tuple(PhaseRow(p, 1.0, 1.0, 0.2, PhaseFlag(p, SimpleNamespace(ratio=1.2 if p in flagged else 1.0),
                                                        True, p in flagged, 0.01, 0.2, ""))
                 for p in PHASES)
    time = SimpleNamespace(estimate=SimpleNamespace(ratio=ratio, within_sd_log=0.02), mde=0.08)
    return WorkloadComparison("tiny", verdict, "fake", time=time, phases=rows,
                              left_out=("block 2 measured again: other processes used 40% of the CPUs",))


class FakeGates:
    """A gate that calls every injection of at least ``detect`` a REGRESSION flagged in its
    phase, and every A/A gate by the verdicts given in turn; each gate takes 100 fake seconds."""

    def __init__(self, aa_verdicts: list[Verdict], detect: float = 1.0) -> None:
        self.aa = list(aa_verdicts)
        self.detect = detect
        self.t = 0.0
        self.seen: list[dict[str, float]] = []

    def now(self) -> float:
        return self.t

    def __call__(self, head: Job, base: Job) -> GateRun:
        assert base.inject_ms == {} and INJECTED not in base.overrides
        self.seen.append(dict(head.inject_ms))
        self.t += 100.0
        if not head.inject_ms:
            verdict = self.aa.pop(0) if self.aa else Verdict.PASS
            c = _comparison(verdict, 1.0, ())
        else:
            (phase, ms), = head.inject_ms.items()
            size = ms / PROBE.step_ms
            c = _comparison(Verdict.REGRESSION if size >= self.detect - 1e-9 else Verdict.INCONCLUSIVE, 1 + size,
                            (phase,))
        outcome = GateOutcome((c,), GateConfig(), Look.single(6))
        return GateRun(outcome, looks=1, count=6)


def _run(tiny, gates: FakeGates, **kwargs) -> SelftestResult:
    options = {"gates": 3, "sizes": (0.05, 0.10), "measuring": MeasuringRequest("cpu", Path("/cache"))}
    options.update(kwargs)
    return run_selftest(Job(tiny, tiny.resolve("cpu"), {}), settings=Settings(), gate=gates, probe=PROBE,
                        now=gates.now, **options)


def test_gates_interleave_a_a_and_each_size_and_take_the_phases_in_turn():
    plan = schedule(3, (0.05, 0.10), ("forward", "backward"))
    assert plan == [(None, None), (0.05, "forward"), (0.10, "backward"),
                    (None, None), (0.05, "backward"), (0.10, "forward"),
                    (None, None), (0.05, "forward"), (0.10, "backward")]


def test_injections_are_sized_from_the_probe_step_into_phases_the_gate_tests(tiny):
    gates = FakeGates([], detect=0.10)
    result = _run(tiny, gates)
    # h2d is 0.2% of the step, below the 1% floor: the gate could never flag it
    assert result.phases == ("data_wait", "forward", "backward", "optimizer")
    assert gates.seen[:3] == [{}, {"data_wait": pytest.approx(0.5)}, {"forward": pytest.approx(1.0)}]
    assert len(result.records) == result.planned == 9
    assert [r.detected for r in result.injected(0.10)] == [True] * 3
    assert [r.detected for r in result.injected(0.05)] == [False] * 3
    assert all(r.right_phase and not r.other_phase for r in result.records if r.size)
    assert result.supported == 0.10
    assert result.exit_code == 0


def test_quick_injects_into_the_largest_phase_and_named_phases_are_kept(tiny):
    assert _run(tiny, FakeGates([]), largest_phase_only=True).phases == ("backward",)
    result = _run(tiny, FakeGates([]), phases=("h2d",))
    assert result.phases == ("h2d",)
    assert "below the 1% floor" in result.card()


def test_false_alarms_decide_the_exit_code_by_the_exact_interval(tiny):
    # 1 of 3 A/A gates a REGRESSION: the interval [0.8%, 90.6%] still reaches down to alpha = 1%
    one = _run(tiny, FakeGates([Verdict.REGRESSION, Verdict.PASS, Verdict.INCONCLUSIVE]))
    assert (one.false_alarms.k, one.false_alarms.n) == (1, 3)
    assert one.false_alarms.low < 0.01 < one.false_alarms.high
    assert one.exit_code == 0
    # 2 of 3: the whole interval lies above alpha
    two = _run(tiny, FakeGates([Verdict.REGRESSION, Verdict.REGRESSION, Verdict.PASS]))
    assert two.false_alarms.low > 0.01
    assert two.exit_code == 1
    assert "MORE false alarms than the gate's alpha budget (exit 1)" in two.card()


def test_the_interval_is_clopper_pearson():
    r = rate(0, 10)
    assert r.low == 0.0 and r.high == pytest.approx(1 - 0.025 ** (1 / 10), rel=1e-6)
    r = rate(10, 10)
    assert r.high == 1.0 and r.low == pytest.approx(0.025 ** (1 / 10), rel=1e-6)


def test_a_budget_stops_before_a_gate_that_would_end_after_it(tiny):
    gates = FakeGates([])
    result = _run(tiny, gates, budget_s=250.0)
    assert len(result.records) == 2 and result.planned == 9
    assert result.stopped and "budget" in result.stopped
    assert "gates: 2 of 9 planned" in result.card()
    only_aa = _run(tiny, FakeGates([]), budget_s=150.0)
    assert [r.size for r in only_aa.records] == [None]
    assert "this machine supports: not known: no gate with an injected slowdown ran" in only_aa.card()


def test_a_gate_that_cannot_be_judged_stops_the_selftest(tiny):
    def broken(head: Job, base: Job) -> GateRun:
        c = WorkloadComparison("tiny", Verdict.ERROR, "the base side failed")
        outcome = GateOutcome((c,), GateConfig(), Look.single(6))
        return GateRun(outcome, looks=1, count=6)

    from perfgate.model.errors import WorkloadError

    with pytest.raises(WorkloadError, match="could not be judged: ERROR: the base side failed"):
        run_selftest(Job(tiny, tiny.resolve("cpu"), {}), settings=Settings(), measuring=MeasuringRequest("cpu", Path("/c")),
                     gate=broken, probe=PROBE)


class CountingGates(FakeGates):
    """FakeGates whose gates stop at 6 blocks (A/A) or at 6 + 2 per gate so far (injected):
    the blocks each gate used come from its GateRun."""

    def __call__(self, head: Job, base: Job) -> GateRun:
        run = super().__call__(head, base)
        count = 6 if not head.inject_ms else 6 + 2 * len(self.seen)
        return dataclasses.replace(run, looks=count - 5, count=count)


def test_each_record_holds_the_blocks_its_gate_used_and_the_card_sums_them_up(tiny):
    fake = CountingGates([])
    result = run_selftest(Job(tiny, tiny.resolve("cpu"), {}), settings=Settings(), gate=fake, probe=PROBE,
                          now=fake.now, gates=1, sizes=(0.10,), blocks=6, measuring=MeasuringRequest("cpu", Path("/cache")))
    assert [(r.size, r.blocks_used) for r in result.records] == [(None, 6), (0.10, 10)]
    card = result.card()
    assert "blocks used: median 8 (min 6, max 10)" in card
    assert ("the first look at 6 ABBA blocks of 4 processes, then a look after every block up to 30; alpha 0.01 "
            "(one-sided, spent over the looks)") in card
    assert result.config.max_blocks == Settings().gate.max_blocks


def test_the_card_says_where_a_budget_ends_the_gates_looks(tiny):
    fake = CountingGates([])
    settings = dataclasses.replace(Settings(), budget_s=600.0)
    result = run_selftest(Job(tiny, tiny.resolve("cpu"), {}), settings=settings, gate=fake, probe=PROBE,
                          now=fake.now, gates=1, sizes=(0.10,), blocks=6, measuring=MeasuringRequest("cpu", Path("/cache")))
    assert ("then a look after every block up to where its 10 min budget ends (at most 500), alpha spent over the "
            "share of the budget measured; alpha") in result.card()
    # max_blocks given caps the plan, and the card says so
    capped = dataclasses.replace(settings, gate=dataclasses.replace(settings.gate, max_blocks=40),
                                 max_blocks_given=True)
    result = run_selftest(Job(tiny, tiny.resolve("cpu"), {}), settings=capped, gate=CountingGates([]),
                          probe=PROBE, now=fake.now, gates=1, sizes=(0.10,), blocks=6,
                          measuring=MeasuringRequest("cpu", Path("/cache")))
    assert "(at most 40)" in result.card()


def test_an_interrupted_gate_ends_the_selftest_as_interrupted_not_as_a_record(tiny):
    class Interrupted(FakeGates):
        def __call__(self, head: Job, base: Job) -> GateRun:
            run = super().__call__(head, base)
            return dataclasses.replace(run, interrupted=len(self.seen) == 2)

    fake = Interrupted([])
    with pytest.raises(KeyboardInterrupt):
        _run(tiny, fake)
    assert len(fake.seen) == 2  # stopped at the interrupted gate, nothing after it


CARD_LABELS = ("perfgate selftest:", "design:", "probe:", "injected into:", "gates:", "A/A false alarms",
               "A/A verdicts:", "noise:", "gate time:", "this machine supports:", "result:")
"""The lines every card has, in order (one line per size follows the A/A verdicts)."""


def _card_lines(card: str) -> list[str]:
    lines = card.splitlines()
    found = []
    for label in CARD_LABELS:
        hits = [i for i, line in enumerate(lines) if line.startswith(label)]
        assert len(hits) == 1, (label, card)
        found.append(hits[0])
    assert found == sorted(found), card
    return lines


def test_the_card_has_every_line(tiny):
    result = _run(tiny, FakeGates([Verdict.PASS, Verdict.INCONCLUSIVE, Verdict.PASS], detect=0.10))
    card = result.card()
    lines = _card_lines(card)
    assert "A/A false alarms (a REGRESSION where nothing changed): 0/3 = 0.0% [0.0, 70.8] (exact 95% Clopper" in card
    assert "A/A verdicts: 2 PASS, 1 INCONCLUSIVE" in card
    size_lines = [line for line in lines if line.startswith("+")]
    assert [line.split(" ")[0] for line in size_lines] == ["+5%", "+10%"]
    assert "detected 3/3 = 100.0% [29.2, 100.0]" in size_lines[1]
    assert "injected phase flagged slower 3/3" in size_lines[1]
    assert "this machine supports: delta = 10%" in card
    assert "gate time: median 1 min 40 s" in card
    assert "9 block(s) measured again and 0 kept although contended" in card
    assert "noise: run-to-run sd of the step 2.0% (median over the gates); smallest slowdown a gate could " \
           "detect 8.0% (median)" in card
    none = _run(tiny, FakeGates([], detect=0.5)).card()
    assert "this machine supports: none of the sizes tried" in none


def _parsed(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    selftest.add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["selftest", *argv])


@pytest.mark.parametrize("argv, message", [
    (["tiny", "resnet18-cifar10"], "exactly one workload"),
    (["tiny", "--sizes", "0"], "--sizes: 0 must be a share of the step"),
    (["tiny", "--sizes", "five"], "is not a number"),
    (["tiny", "--phases", "forward,step"], "unknown phase 'step'"),
    (["tiny", "--blocks", "1"], "at least 2 ABBA blocks"),
])
def test_bad_input_is_a_usage_error(argv, message, tiny_path, tmp_path):
    args = _parsed(*argv, "--workloads-path", str(tiny_path), "--config", str(tmp_path / "none.toml"),
                   "--device", "cpu")
    with pytest.raises(UsageError, match=message):
        args.func(args)


# --- for real, on the tiny workload ----------------------------------------------------------

@pytest.mark.slow
def test_an_injection_moves_the_named_phase_by_about_its_size(tiny, tmp_path):
    params = tiny.resolve("cpu", {"steps": "30"})
    inject = 40.0
    runs = {}
    # both repeats forked from one template (one torch import, not two fresh interpreters)
    with template.Starter("fork", renew_every=None) as starter:
        for label, amount in (("plain", {}), ("forward", {"forward": inject})):
            outcome = measure([Job(tiny, params, {"steps": 30}, inject_ms=amount)], device="cpu", repeats=1,
                              cache_dir=tmp_path / "cache", out_dir=tmp_path / label, project_dir=tmp_path,
                              telemetry=False, starter=starter)
            assert not outcome.errors, {k: (e.message, e.detail) for k, e in outcome.errors.items()}
            runs[label] = outcome.results["tiny"]
        assert starter.templates == 1 and starter.fallback is None
    assert INJECTED not in runs["plain"].overrides
    assert runs["forward"].overrides[INJECTED] == {"forward": inject}
    on_disk = json.loads(result_path(tmp_path / "forward", "tiny").read_text())
    assert on_disk["overrides"][INJECTED] == {"forward": inject}
    plain, slowed = summarise(runs["plain"]).median_ms, summarise(runs["forward"]).median_ms
    # a busy-wait lasts at least what was asked in every step
    assert min(runs["forward"].repeats[0].phases_ms["forward"]) >= inject
    moved = slowed["forward"] - plain["forward"]
    assert moved >= 0.8 * inject
    # the step moved with the phase, the other phases much less
    assert abs((slowed["step"] - plain["step"]) - moved) < 0.5 * moved
    for phase in PHASES:
        if phase != "forward":
            assert abs(slowed[phase] - plain[phase]) < 0.3 * moved, (phase, plain, slowed)


@pytest.mark.slow
@pytest.mark.extended
def test_a_selftest_end_to_end_prints_its_card(tiny, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # the gates' project directory: nothing lands in the repository
    settings = Settings(gate=GateConfig(max_blocks=2), baselines=tmp_path / "baselines")  # one look, at 2 blocks
    job = Job(tiny, tiny.resolve("cpu", {"steps": "20"}), {"steps": 20})
    result = run_selftest(job, settings=settings, gates=1, sizes=(0.5,), largest_phase_only=True, blocks=2,
                          measuring=MeasuringRequest("cpu", tmp_path / "cache", telemetry=False))
    print(result.card(), end="")
    card = capsys.readouterr().out
    _card_lines(card)
    assert [r.size for r in result.records] == [None, 0.5]
    aa, injected = result.records
    assert injected.inject_ms == pytest.approx(0.5 * result.probe.step_ms)
    assert injected.phase == result.phases[0] == max(PHASES, key=lambda p: result.probe.shares[p])
    assert injected.step_change is not None and injected.step_change > 1.0  # half the step added
    assert result.exit_code == (0 if aa.verdict is not Verdict.REGRESSION else 1)
    assert "2 ABBA blocks" in card
    assert not (tmp_path / "perfgate-results").exists()
