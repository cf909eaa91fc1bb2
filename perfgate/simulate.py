"""Synthetic gates with known truth, to measure false alarms and power of the decision rule.

Noise model, per workload, on the log of per-repeat summaries:
``log x = log(100 ms) + day + run + outlier (+ log(1 + slowdown) for the current run)``,
where ``day`` is one draw per recording and one for the current job (shared by both of
its looks), ``run`` is independent per repeat, and an outlier adds ``log(outlier_factor)``
to a repeat with probability ``outlier_rate``. Each gate runs the real
:func:`perfgate.stats.log_ratio` and :func:`perfgate.decide.decide_time`, with a second look
that adds repeats to the current run when the first is INCONCLUSIVE.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from perfgate.decide import GateConfig, Verdict, decide_time
from perfgate.stats import log_ratio

__all__ = ["CellResult", "Scenario", "simulate"]


@dataclass(frozen=True)
class Scenario:
    run_sd_log: float
    slowdown: float = 0.0
    recordings: int = 1
    day_sd_log: float = 0.01
    outlier_rate: float = 0.02
    outlier_factor: float = 1.30
    repeats: int = 5  # current repeats at the first look
    baseline_repeats: int = 5  # per recording
    extra_repeats: int | None = None  # added at the second look; None: as many again


@dataclass(frozen=True)
class CellResult:
    scenario: Scenario
    gates: int
    counts: Mapping[Verdict, int] = field(default_factory=dict)
    second_looks: int = 0  # gates that needed the second look
    with_exclusions: int = 0  # gates whose final estimate set aside an outlier

    def share(self, verdict: Verdict) -> float:
        return self.counts.get(verdict, 0) / self.gates


def _seed(scenario: Scenario, seed: int) -> np.random.SeedSequence:
    keys = (scenario.run_sd_log, scenario.slowdown, scenario.day_sd_log, scenario.outlier_rate,
            scenario.outlier_factor)
    ints = [round(k * 1_000_000) for k in keys]
    ints += [scenario.recordings, scenario.repeats, scenario.baseline_repeats, scenario.extra_repeats or 0]
    return np.random.SeedSequence([seed, *ints])


def _draw(rng: np.random.Generator, s: Scenario, shape: tuple[int, ...]) -> np.ndarray:
    run = rng.normal(0.0, s.run_sd_log, shape)
    out = rng.random(shape) < s.outlier_rate
    return run + out * math.log(s.outlier_factor)


def simulate(scenario: Scenario, gates: int, config: GateConfig | None = None, seed: int = 0) -> CellResult:
    """Run ``gates`` independent one-workload gates of ``scenario``; deterministic per seed."""
    config = config or GateConfig()
    s = scenario
    extra = s.extra_repeats if s.extra_repeats is not None else (config.second_look_repeats or s.repeats)
    rng = np.random.default_rng(_seed(s, seed))
    base_day = rng.normal(0.0, s.day_sd_log, (gates, s.recordings, 1))
    base = np.exp(math.log(100.0) + base_day + _draw(rng, s, (gates, s.recordings, s.baseline_repeats)))
    cur_day = rng.normal(0.0, s.day_sd_log, (gates, 1))
    shift = math.log(100.0) + math.log1p(s.slowdown)
    cur = np.exp(shift + cur_day + _draw(rng, s, (gates, s.repeats + extra)))

    counts: dict[Verdict, int] = {}
    second = excluded = 0
    opts = dict(
        confidence=config.confidence,
        assumed_day_sd_log=config.assumed_day_sd_log,
        day_prior_df=config.day_prior_df,
        outlier_sd=config.outlier_sd,
    )
    for g in range(gates):
        recordings = base[g].tolist()
        est = log_ratio(cur[g, : s.repeats], recordings, **opts)
        decision = decide_time({"w": est}, config, 1)["w"]
        if decision.second_look:
            second += 1
            est = log_ratio(cur[g], recordings, **opts)
            decision = decide_time({"w": est}, config, 2)["w"]
        excluded += est.excluded > 0
        counts[decision.verdict] = counts.get(decision.verdict, 0) + 1
    return CellResult(s, gates, counts, second, excluded)
