"""Synthetic gates with a known truth, judged by the real gate: false alarms and power.

Every gate is a whole CI job of several workloads (three by default; the first may carry a
true slowdown, the others never do, so Holm runs over a real family). The simulation
builds :class:`~perfgate.model.result.RunResult` objects the way the runner would, and the
real sequential driver (:func:`perfgate.analysis.driver.drive`) judges them with the real
:func:`perfgate.analysis.compare.compare`: it looks at the first look's blocks (or repeats),
stops every workload it decides, draws one more block of the others, and looks again, up to
``GateConfig.max_blocks`` or the budget (``Scenario.budget_blocks``), exactly as
``perfgate.gate.gating.run_gate`` does; blocks alternate ABBA and BAAB as the runner's do.
Nothing here decides a verdict; it only draws the numbers and counts what the gate says.

The noise model, on the log of each process's step time, in the order the processes run
in their job (workloads round-robin as the runner interleaves them)::

    log y_t = log(level_w) + day + drift * t + sd * e_t + outlier_t + throttle_t
              (+ log(1 + slowdown) for the changed workload's current / head processes)

- ``e_t`` is a stationary AR(1) with unit variance: ``e_t = phi e_{t-1} + sqrt(1-phi^2) z_t``,
  so ``sd`` is the run-to-run sd of one process and ``phi`` the correlation of
  consecutive processes (a machine that is slow for a while, not for one process);
- ``drift`` is a linear drift per process inside the job (warming up, a filling disk);
  every job starts at t = 0, and the second look continues the first look's job;
- ``day`` is one draw per job: per stored baseline recording and for the current job
  (shared by both looks). In the paired design both arms share the job's draw, so it
  cannot matter; it is drawn anyway;
- an outlier adds ``log(outlier_factor)`` to a process with probability ``outlier_rate``;
- a throttled process is ``throttle_factor`` slower and carries the telemetry NVML gives
  (``{"gpu": {"throttled": True, "throttle_reasons": ["hw_slowdown"]}}``), which the gate
  reads through ``RepeatResult.throttled`` and leaves out;
- ``current_sd_factor`` multiplies ``sd`` for the current (stored) or head (paired)
  processes: the "noisier current" case.

The stored design records each of its ``recordings`` baseline recordings in a job of its
own (through the real ``perfgate.model.baseline.updated_baseline``, ``--append`` after the
first) and runs the current job against them. The paired design runs ``blocks`` ABBA
blocks of every workload in one job (for each block, each workload in turn: base, head,
head, base), judged by the block model (or, for the comparison of estimators, by one of
the alternatives swapped in for it: see ``Scenario.estimator``).

Each repeat holds three steps whose median is exactly the drawn value, so ``compare``
stays fast; with ``phases=True`` they are split into the five phases at fixed shares (the
verdicts are the same: only the step is gated), otherwise the phases are zero and
``compare`` takes the phase-free path of a micro-benchmark.

With ``Scenario.windows`` > 1 each repeat times that many windows of ``steps`` steps, one
after the other, and each window's level is drawn around its process's value
(``window_sd``): the within-process level of the variance components
(``perfgate.analysis.stats.components``) that ``perfgate.analysis.allocation`` weighs
windows against fresh processes with.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from perfgate.analysis.blocks import ABBA, BlockValue, block_log_ratio, block_model_log_ratio, block_order
from perfgate.analysis.driver import drive, schedule_for
from perfgate.analysis.decide import GateConfig
from perfgate.analysis.outcome import Entry, Pairing
from perfgate.analysis.stats import LogRatio, log_ratio
from perfgate.model.baseline import Baseline, DayVariation
from perfgate.model.environment import Environment
from perfgate.model.repeat import MEDIAN, PER_STEP
from perfgate.model.result import RepeatResult, RunResult
from perfgate.model.verdict import Verdict
from perfgate.model.workload import PHASES
from perfgate.store.baselines import Lookup, updated_baseline

__all__ = ["CellResult", "ESTIMATORS", "Noise", "Scenario", "paired_calibration", "simulate"]

ENV = Environment(device="cuda", torch="2.14.1", python="3.11.7", cpu_model="Simulated CPU", cpu_count=16,
                  os="Linux", gpu_name="Simulated GPU", gpu_driver="999.1", cuda="12.8", cudnn="91000",
                  torchvision="0.29.1", git_commit="0" * 40, git_dirty=False)
AGAINST = "abc1234def5678abc1234def5678abc1234def56"
_NOW = datetime(2026, 11, 30, tzinfo=timezone.utc)
_STARTED = "2026-11-30T00:00:00+00:00"
_SHARES = {"data_wait": 0.02, "h2d": 0.005, "forward": 0.30, "backward": 0.60, "optimizer": 0.07}
_STEP_SPREAD = (0.999, 1.0, 1.001)  # three steps; their median is the drawn value
_THROTTLED = {"gpu": {"throttled": True, "throttle_reasons": ["hw_slowdown"]}}
_NOT_THROTTLED = {"gpu": {"throttled": False, "throttle_reasons": []}}


@dataclass(frozen=True)
class Noise:
    """What the machine does to each process's step time (all sds on the log scale)."""

    run_sd_log: float = 0.01
    ar: float = 0.3
    """AR(1) correlation between consecutive processes of a job."""
    drift_per_process: float = 0.0
    """Linear drift of log step time per process, in job order (0.001: 0.1% per process)."""
    day_sd_log: float = 0.01
    """True day-to-day sd: one draw per job (the gate assumes ``GateConfig.assumed_day_sd_log``)."""
    outlier_rate: float = 0.02
    outlier_factor: float = 1.30
    throttle_rate: float = 0.02
    throttle_factor: float = 1.15
    current_sd_factor: float = 1.0
    """Run-to-run sd of the current (stored) or head (paired) processes, times the others'."""

    def __post_init__(self) -> None:
        if not (-1.0 < self.ar < 1.0):
            raise ValueError(f"ar must be in (-1, 1), got {self.ar!r}")
        for name in ("run_sd_log", "day_sd_log", "outlier_rate", "throttle_rate"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be >= 0")


ESTIMATORS = ("contrast", "block", "welch")
"""The paired estimators: the one-sample t on block contrasts ``compare`` uses, the
randomised-block least-squares model, and Welch ignoring the blocks."""


@dataclass(frozen=True)
class Scenario:
    noise: Noise
    slowdown: float = 0.0
    """True slowdown of the changed workload (the first one); 0.05 = 5% slower."""
    paired: bool = True
    blocks: int = 6
    """Paired: ABBA blocks at the first look (then a look after every block, up to
    ``GateConfig.max_blocks``)."""
    budget_blocks: int | None = None
    """The wall-time budget, in the time of this many blocks (stored: repeats) of every workload;
    None: none, the gate stops at ``max_blocks``."""
    recordings: int = 1
    """Stored: baseline recordings, each in a job of its own."""
    history_runs: int = 0
    """Stored: jobs of each workload's history whose spread is recorded with its baseline
    (``rebaseline --day-history``: each job ``baseline_repeats`` processes, its mean log
    value one run); 0: none, the gate assumes the day sd."""
    repeats: int = 5
    """Stored: current repeats at the first look (then a look after every repeat)."""
    baseline_repeats: int = 5
    workloads: int = 3
    estimator: str = "contrast"
    """Paired only: "contrast" (what compare uses), "block" or "welch" swapped in for it."""
    phases: bool = False
    steps: int = 3
    """Steps per window (per repeat, with one window). With 3 (and nothing below), the repeat's
    median and time per step are the drawn value; more steps draw each one (``step_sd``, slow
    steps, stalls)."""
    windows: int = 1
    """Timed windows per repeat, each of ``steps`` steps (the repeat's series hold them in order)."""
    window_sd: float = 0.0
    """sd of log of each window's level around its process's value (iid between windows)."""
    step_sd: float = 0.0
    """sd of log of each step around its process's value (iid between steps)."""
    slow_step_rate: float = 0.0
    """Share of steps, on both sides, ``slow_step_factor`` times slower (random slow steps)."""
    slow_step_factor: float = 5.0
    stall_every: int = 0
    """The changed workload's head: every ``stall_every``-th step waits for data (0: never)."""
    stall_share: float = 0.0
    """The stall's mean effect on the time per step (0.06: 6% slower per step on average),
    all of it on one step in ``stall_every``, booked as data wait."""
    clock_dip_rate: float = 0.0
    """Share of processes, on both sides, whose GPU clock dips by ``clock_dip`` (and whose steps
    are that much slower) with no slowdown event: what the old one-sided clock screen removed."""
    clock_dip: float = 0.08

    def __post_init__(self) -> None:
        if self.estimator not in ESTIMATORS:
            raise ValueError(f"estimator must be one of {ESTIMATORS}, got {self.estimator!r}")
        if self.estimator != "contrast" and not self.paired:
            raise ValueError("the estimator is a choice of the paired design only")
        if self.workloads < 1:
            raise ValueError("workloads must be >= 1")
        if isinstance(self.windows, bool) or not isinstance(self.windows, int) or self.windows < 1:
            raise ValueError(f"windows must be an integer >= 1, got {self.windows!r}")
        if not self.window_sd >= 0:
            raise ValueError(f"window_sd must be >= 0, got {self.window_sd!r}")

    @property
    def design(self) -> str:
        if self.paired:
            return f"paired, {self.blocks} blocks"
        history = f", day sd from {self.history_runs} runs" if self.history_runs else ""
        return f"stored, {self.recordings} recording{'s' if self.recordings != 1 else ''}{history}"


@dataclass(frozen=True)
class CellResult:
    scenario: Scenario
    gates: int
    counts: Mapping[Verdict, int] = field(default_factory=dict)
    """Final verdicts of the changed workload (the first one)."""
    false_regressions: int = 0
    """Gates with a REGRESSION on a workload that did not change (all of them when the
    slowdown is 0): the family-wise false alarms Holm controls."""
    went_on: int = 0
    """Gates that looked more than once (for any workload)."""
    looks: int = 0
    """Looks taken over all gates (each one ``compare`` call)."""
    units: tuple[int, ...] = ()
    """Per gate, the blocks (stored: repeats) of its last look: where it stopped."""
    changed_units: tuple[int, ...] = ()
    """Per gate, the blocks (stored: repeats) the changed workload was decided (or left) at."""
    changed_verdicts: tuple[Verdict, ...] = ()
    """Per gate, the changed workload's verdict (in the order of ``changed_units``)."""
    seconds: float = field(default=0.0, compare=False)
    ratios: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    """Per statistic, the changed workload's final estimate (ratio) in each gate."""

    def share(self, verdict: Verdict) -> float:
        return self.counts.get(verdict, 0) / self.gates

    @property
    def false_regression_share(self) -> float:
        return self.false_regressions / self.gates

    @property
    def gates_per_second(self) -> float:
        return self.gates / self.seconds if self.seconds > 0 else math.inf


class _Job:
    """One CI job: its day draw, and the noise of each process in the order they run."""

    def __init__(self, rng: np.random.Generator, noise: Noise) -> None:
        self.rng, self.noise = rng, noise
        self.day = float(rng.normal(0.0, noise.day_sd_log)) if noise.day_sd_log > 0 else 0.0
        self.t = 0
        self.e = 0.0
        self._innovation = math.sqrt(1.0 - noise.ar * noise.ar)

    def next(self, current: bool) -> tuple[float, bool]:
        """The next process's log offset and whether the GPU throttled during it."""
        n, rng = self.noise, self.rng
        z = float(rng.standard_normal())
        self.e = z if self.t == 0 else n.ar * self.e + self._innovation * z
        sd = n.run_sd_log * (n.current_sd_factor if current else 1.0)
        x = self.day + n.drift_per_process * self.t + sd * self.e
        u_out, u_thr = rng.random(2)
        if u_out < n.outlier_rate:
            x += math.log(n.outlier_factor)
        throttled = bool(u_thr < n.throttle_rate)
        if throttled:
            x += math.log(n.throttle_factor)
        self.t += 1
        return x, throttled


@dataclass
class _Repeat:
    value_ms: float
    throttled: bool
    block: int | None = None
    series: Mapping[str, tuple[float, ...]] | None = None
    """Drawn per-step series (``Scenario.steps`` > 3 or a stall); None: three steps around the value."""
    clock_mhz: float | None = None
    windows: int = 1


def _drawn_series(rng: np.random.Generator, s: Scenario, value_ms: float, stalled: bool) -> dict[str, tuple[float, ...]]:
    n = s.steps * s.windows
    steps = value_ms * np.exp(s.step_sd * rng.standard_normal(n)) if s.step_sd > 0 else np.full(n, value_ms)
    if s.window_sd > 0:
        steps = steps * np.repeat(np.exp(s.window_sd * rng.standard_normal(s.windows)), s.steps)
    if s.slow_step_rate > 0:
        steps = np.where(rng.random(n) < s.slow_step_rate, steps * s.slow_step_factor, steps)
    series = {p: tuple(float(v) for v in steps * _SHARES[p]) for p in PHASES}
    wait = np.zeros(n)
    if stalled and s.stall_every > 0 and s.stall_share > 0:
        wait[s.stall_every - 1::s.stall_every] = s.stall_share * s.stall_every * value_ms
    series["data_wait"] = tuple(float(v) for v in steps * _SHARES["data_wait"] + wait)
    series["step"] = tuple(float(v) for v in steps + wait)
    return series


def _repeat_result(index: int, r: _Repeat, phases: bool) -> RepeatResult:
    if r.series is not None:
        series = dict(r.series)
        steps = series["step"]
    else:
        steps = tuple(r.value_ms * f for f in _STEP_SPREAD)
        series = {p: tuple(s * _SHARES[p] for s in steps) if phases else (0.0, 0.0, 0.0) for p in PHASES}
        series["step"] = steps
    window_s = sum(steps) / 1e3
    return RepeatResult(
        index=index, started_at=_STARTED, timing="cuda_events", window_s=window_s, phases_ms=series,
        samples_per_s=3 * 32 / window_s, peak_memory_bytes=1_000_000_000, peak_memory_kind="cuda_max_allocated",
        torch_settings={}, loader_settings={"batch_size": 32, "num_workers": 2},
        telemetry=_telemetry(r), block=r.block, windows=r.windows,
    )


def _telemetry(r: _Repeat) -> Mapping[str, object]:
    base = _THROTTLED if r.throttled else _NOT_THROTTLED
    if r.clock_mhz is None:
        return base
    return {"gpu": {**base["gpu"], "sm_clock_mhz": {"median": r.clock_mhz}}}


def _run_result(workload: str, repeats: Sequence[_Repeat], phases: bool,
                built: Sequence[RepeatResult] | None = None) -> RunResult:
    """A result of ``repeats``; ``built`` are their RepeatResults already made (a later look
    reuses its earlier repeats, and their cached summaries)."""
    return RunResult(
        workload=workload, workload_version=1, workload_source="file:simulated.py", device=ENV.device,
        params={"batch_size": 32, "steps": 3}, overrides={}, environment=ENV,
        data={"kind": "synthetic", "path": "memory", "content_hash": "0" * 64, "hash_method": "none",
              "num_samples": 1024, "description": "simulated"},
        created_at=_STARTED, perfgate_version="0.1.0",
        repeats=tuple(built) if built is not None else tuple(
            _repeat_result(i, r, phases) for i, r in enumerate(repeats)),
    )


def _welch_ignoring_blocks(base: Sequence[BlockValue], head: Sequence[BlockValue], *,
                           confidence: float = 0.95) -> LogRatio:
    return log_ratio([v.value for v in head], [[v.value for v in base]], confidence=confidence,
                     assumed_day_sd_log=0.0, outlier_sd=None)


class _Gate:
    """One simulated gate: draws the processes and is judged by the real driver and ``compare``."""

    def __init__(self, s: Scenario, config: GateConfig, rng: np.random.Generator) -> None:
        self.s, self.config, self.rng = s, config, rng
        self.names = [f"w{i}" for i in range(s.workloads)]
        # Workloads of different speeds; only the first may change.
        self.levels = {n: math.log(50.0 * (1 + i)) for i, n in enumerate(self.names)}
        self.looks = 0
        self.units = 0
        self.changed_units = 0
        self.ratios: dict[str, float] = {}
        """The changed workload's last estimates, per statistic."""

    def _value(self, job: _Job, name: str, current: bool, block: int | None = None) -> _Repeat:
        x, throttled = job.next(current)
        x += self.levels[name]
        changed = current and name == self.names[0]
        if changed and self.s.slowdown:
            x += math.log1p(self.s.slowdown)
        s = self.s
        clock = None
        if s.clock_dip_rate > 0:
            dipped = bool(self.rng.random() < s.clock_dip_rate)
            clock = 1590.0 / (1.0 + s.clock_dip) if dipped else 1590.0
            x += math.log1p(s.clock_dip) if dipped else 0.0
        if (s.steps == 3 and s.windows == 1 and not s.window_sd and not (s.stall_every and s.stall_share)
                and not s.step_sd and not s.slow_step_rate):
            return _Repeat(math.exp(x), throttled, block, clock_mhz=clock)
        return _Repeat(math.exp(x), throttled, block, _drawn_series(self.rng, s, math.exp(x), changed), clock,
                       s.windows)

    def run(self) -> dict[str, Verdict]:
        s = self.s
        strategy: _Drawn = _DrawnBlocks(self) if s.paired else _DrawnRepeats(self)
        first = s.blocks if s.paired else s.repeats
        schedule = schedule_for(self.config, first, strategy.unit)
        budget = None if s.budget_blocks is None else float(s.budget_blocks * s.workloads)
        driven = drive(strategy, self.names, self.config, schedule, budget_s=budget, clock=strategy.clock)
        self.looks, self.units = driven.looks, driven.count
        for c in driven.outcome.comparisons:
            if c.workload == self.names[0] and c.time is not None:
                self.ratios = {k: d.estimate.ratio for k, d in (c.time.by_statistic or {"step": c.time}).items()}
                self.changed_units = c.time.count
        return {c.workload: c.verdict for c in driven.outcome.comparisons}


class _Drawn:
    """A simulated strategy of ``perfgate.analysis.driver.drive``: one unit of one workload
    takes one tick of its clock, so a budget is counted in blocks (or repeats)."""

    unit = "block"

    def __init__(self, gate: _Gate) -> None:
        self.gate = gate
        self.ticks = 0
        self.drawn: dict[str, list[_Repeat]] = {n: [] for n in gate.names}
        self.have: dict[str, int] = {n: 0 for n in gate.names}
        self.built: dict[tuple[int, str], list[RepeatResult]] = {}

    def clock(self) -> float:
        return float(self.ticks)

    def result(self, name: str, drawn: Mapping[str, list[_Repeat]]) -> RunResult:
        """The result of ``drawn[name]``, its RepeatResults built once over all looks."""
        built = self.built.setdefault((id(drawn), name), [])
        phases = self.gate.s.phases
        built.extend(_repeat_result(i, r, phases) for i, r in enumerate(drawn[name]) if i >= len(built))
        return _run_result(name, drawn[name], phases, built)

    def available(self, name: str) -> int:
        return self.have[name]

    def seconds_per_unit(self, names: Sequence[str]) -> float | None:
        return float(len(names))

    def notes(self, name: str) -> tuple[str, ...]:
        return ()

    def measure(self, names: Sequence[str], upto: int) -> None:
        raise NotImplementedError  # each design draws its own units: _DrawnBlocks, _DrawnRepeats

    def entries(self, names: Sequence[str], count: int) -> list[Entry]:
        raise NotImplementedError


class _DrawnBlocks(_Drawn):
    """The paired design: blocks of every open workload in turn, ABBA and BAAB alternating."""

    def __init__(self, gate: _Gate) -> None:
        super().__init__(gate)
        self.job = _Job(gate.rng, gate.s.noise)
        self.base: dict[str, list[_Repeat]] = {n: [] for n in gate.names}

    def measure(self, names: Sequence[str], upto: int) -> None:
        start = min(self.have[n] for n in names)
        for b in range(start, upto):
            for n in names:
                for arm in block_order(b):
                    is_head = arm == "head"
                    (self.drawn if is_head else self.base)[n].append(self.gate._value(self.job, n, is_head, b))
                self.have[n] = b + 1
                self.ticks += 1

    def entries(self, names: Sequence[str], count: int) -> list[Entry]:
        estimate = _estimators()[self.gate.s.estimator]  # compare's own, or an alternative to it
        return [Entry(n, self.result(n, self.drawn), None,
                      pairing=Pairing(self.result(n, self.base), AGAINST, estimate=estimate)) for n in names]


class _DrawnRepeats(_Drawn):
    """The stored design: baselines recorded in jobs of their own, then current repeats."""

    unit = "repeat"

    def __init__(self, gate: _Gate) -> None:
        super().__init__(gate)
        s = gate.s
        baselines: dict[str, Baseline | None] = {n: None for n in gate.names}
        for k in range(s.recordings):  # each recording is a job of its own: perfgate rebaseline [--append]
            job = _Job(gate.rng, s.noise)
            recorded: dict[str, list[_Repeat]] = {n: [] for n in gate.names}
            for _ in range(s.baseline_repeats):
                for n in gate.names:
                    recorded[n].append(gate._value(job, n, False))
            for n in gate.names:
                baselines[n] = updated_baseline(baselines[n], _run_result(n, recorded[n], s.phases),
                                                f"simulated recording {k + 1}", append=k > 0,
                                                max_recordings=max(s.recordings, 1), now=_NOW)
        if s.history_runs:
            for n in gate.names:
                means = []
                for _ in range(s.history_runs):
                    job = _Job(gate.rng, s.noise)
                    means.append(float(np.mean([math.log(gate._value(job, n, False).value_ms)
                                                for _ in range(s.baseline_repeats)])))
                sd = float(np.std(means, ddof=1))
                day = DayVariation({PER_STEP: sd, MEDIAN: sd}, s.history_runs, "2026-01-01", "2026-01-31", "simulated")
                recorded_base = baselines[n]
                assert recorded_base is not None, "a scenario records at least one baseline"
                baselines[n] = dataclasses.replace(recorded_base, day_variation=day)
        self.lookups = {n: Lookup(baselines[n], Path("simulated") / f"{n}.json") for n in gate.names}
        self.job = _Job(gate.rng, s.noise)

    def measure(self, names: Sequence[str], upto: int) -> None:
        start = min(self.have[n] for n in names)
        for _ in range(start, upto):
            for n in names:
                self.drawn[n].append(self.gate._value(self.job, n, True))
                self.have[n] += 1
                self.ticks += 1

    def entries(self, names: Sequence[str], count: int) -> list[Entry]:
        return [Entry(n, self.result(n, self.drawn), self.lookups[n]) for n in names]


def _seed(s: Scenario, seed: int) -> np.random.SeedSequence:
    n = s.noise
    floats = (n.run_sd_log, n.ar, n.drift_per_process, n.day_sd_log, n.outlier_rate, n.outlier_factor,
              n.throttle_rate, n.throttle_factor, n.current_sd_factor, s.slowdown)
    ints = [round(abs(v) * 1_000_000) for v in floats] + [int(n.ar < 0)]
    ints += [int(s.paired), s.blocks, s.budget_blocks or 0, s.recordings, s.repeats, s.baseline_repeats,
             s.workloads, s.steps, s.stall_every]
    ints += [round(abs(v) * 1_000_000) for v in (s.step_sd, s.slow_step_rate, s.slow_step_factor, s.stall_share,
                                                  s.clock_dip_rate, s.clock_dip)]
    if s.windows != 1 or s.window_sd:  # only then, so that every earlier scenario keeps its draws
        ints += [s.windows, round(s.window_sd * 1_000_000)]
    if s.history_runs:
        ints += [1_000_000 + s.history_runs]
    # The estimator is left out on purpose: the three estimators see the same draws.
    return np.random.SeedSequence([seed, *ints])


def simulate(scenario: Scenario, gates: int, config: GateConfig | None = None, seed: int = 0) -> CellResult:
    """Run ``gates`` independent gates of ``scenario`` through ``compare``; deterministic per seed."""
    config = config or GateConfig()
    rng = np.random.default_rng(_seed(scenario, seed))
    counts: dict[Verdict, int] = {}
    ratios: dict[str, list[float]] = {}
    false = went_on = looks = 0
    units: list[int] = []
    changed_units: list[int] = []
    changed_verdicts: list[Verdict] = []
    started = time.perf_counter()
    for _ in range(gates):
        gate = _Gate(scenario, config, rng)
        verdicts = gate.run()
        changed = gate.names[0]
        counts[verdicts[changed]] = counts.get(verdicts[changed], 0) + 1
        changes = scenario.slowdown != 0 or bool(scenario.stall_every and scenario.stall_share)
        unchanged = gate.names[1:] if changes else gate.names
        false += any(verdicts[n] is Verdict.REGRESSION for n in unchanged)
        went_on += gate.looks > 1
        looks += gate.looks
        units.append(gate.units)
        changed_units.append(gate.changed_units)
        changed_verdicts.append(verdicts[changed])
        for k, v in gate.ratios.items():
            ratios.setdefault(k, []).append(v)
    return CellResult(scenario, gates, counts, false, went_on, looks, tuple(units), tuple(changed_units), tuple(changed_verdicts),
                      time.perf_counter() - started, {k: tuple(v) for k, v in ratios.items()})


def _estimators() -> dict[str, Callable[[Sequence[BlockValue], Sequence[BlockValue]], LogRatio]]:
    return {"contrast": block_log_ratio, "block": block_model_log_ratio, "welch": _welch_ignoring_blocks}


def paired_calibration(noise: Noise, slowdown: float, *, blocks: int = 6, workloads: int = 3, draws: int = 5000,
                       levels: Sequence[float] = (0.05, 0.005), seed: int = 0) -> dict[str, dict[float, float]]:
    """How often each paired estimator finds the head slower at one-sided ``levels``.

    The size (``slowdown=0``) and power of the three estimators themselves, without the
    gate around them (one workload's first look, no Holm, no δ): the check that a
    nominal 5% is a true 5% under AR(1) and drift. The process order is the gate's
    (``workloads`` interleaved per block, ABBA); outliers are drawn as in ``noise``,
    throttling is not (it only removes repeats), the day effect cancels.
    ``{estimator: {level: share of draws with p_slower < level}}``.
    """
    rng = np.random.default_rng(_seed(Scenario(noise, slowdown, blocks=blocks, workloads=workloads), seed))
    n_proc = 4 * blocks * workloads
    z = rng.standard_normal((draws, n_proc))
    e = np.empty_like(z)
    e[:, 0] = z[:, 0]
    root = math.sqrt(1.0 - noise.ar**2)
    for t in range(1, n_proc):
        e[:, t] = noise.ar * e[:, t - 1] + root * z[:, t]
    trend = noise.drift_per_process * np.arange(n_proc)
    out = (rng.random((draws, n_proc)) < noise.outlier_rate) * math.log(noise.outlier_factor)
    base_x = trend + noise.run_sd_log * e + out
    head_x = trend + noise.run_sd_log * noise.current_sd_factor * e + out + math.log1p(slowdown)
    # the first workload's processes: block j occupies positions 4 j W .. 4 j W + 3
    positions = [(4 * j * workloads + k, j, arm == "head") for j in range(blocks) for k, arm in enumerate(ABBA)]
    estimators = _estimators()
    hits = {name: dict.fromkeys(levels, 0) for name in estimators}
    for d in range(draws):
        base = [BlockValue(j, 100.0 * math.exp(base_x[d, pos])) for pos, j, is_head in positions if not is_head]
        head = [BlockValue(j, 100.0 * math.exp(head_x[d, pos])) for pos, j, is_head in positions if is_head]
        for name, fn in estimators.items():
            p = fn(base, head).p_slower
            for level in levels:
                hits[name][level] += p < level
    return {name: {level: n / draws for level, n in by.items()} for name, by in hits.items()}
