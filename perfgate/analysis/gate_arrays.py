"""The paired gate's rule over arrays of many gates at once: for measuring its error rates.

The rule is the one :func:`perfgate.analysis.driver.drive` applies through
:func:`perfgate.analysis.compare.compare` (the module doc of ``decide`` has it in words): at
every planned look, for every workload still open, the one-sample t on its blocks' log
contrasts of each statistic (time per step, median step), its lower tail corrected for the
contrasts' right skew (``stats.logratio.t_test``); Holm over the whole family (both
statistics of every workload, those decided earlier at p = 1) at the look's exact t
boundary, each test's null reaching up to ``min_effect``·δ; REGRESSION when significant and
above δ, IMPROVED when significant and faster by more than δ, PASS when the upper bound at the PASS level lies below δ; the step's
verdict from its statistics (``decide.combine_statistics``); a decided workload stops.

Written again here on arrays so that 10^5 gates take seconds instead of hours; kept honest
by a test that runs the same draws through the real ``drive`` verdict for verdict
(``tests/test_gate_arrays.py``). :func:`draw_paired` draws the per-process statistics:
a process level common to both statistics or not (``rho``), slow steps that move the time
per step but not the median, right-skewed head processes. ``benchmarks/error_rates.py``
prints the rates. No torch, no files.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import special

from perfgate.analysis.blocks import block_order
from perfgate.analysis.decide import GateConfig
from perfgate.analysis.stats.sequential import Schedule

__all__ = ["INCONCLUSIVE", "IMPROVED", "PASS", "REGRESSION", "TOO_NOISY", "ArrayVerdicts", "PairedDraws",
           "draw_paired", "head_mask", "paired_verdicts"]

INCONCLUSIVE, PASS, REGRESSION, IMPROVED, TOO_NOISY = 0, 1, 2, 3, 4
"""The verdict codes of :class:`ArrayVerdicts` (``perfgate.model.verdict.Verdict`` by name)."""


def head_mask(blocks: int) -> np.ndarray:
    """(blocks, 4) booleans: which of each block's four processes (in run order) are the head's."""
    return np.array([[arm == "head" for arm in block_order(b)] for b in range(blocks)])


@dataclass(frozen=True)
class PairedDraws:
    """The log of each process's time per step and median step (ms), shaped (gates,
    workloads, blocks, 4): the four processes of each block in run order (ABBA, BAAB, ...)."""

    per_step: np.ndarray
    median: np.ndarray

    def __post_init__(self) -> None:
        if self.per_step.shape != self.median.shape or self.per_step.ndim != 4 or self.per_step.shape[-1] != 4:
            raise ValueError(f"draws must be (gates, workloads, blocks, 4) alike, got {self.per_step.shape} "
                             f"and {self.median.shape}")

    @property
    def shape(self) -> tuple[int, int, int]:
        g, w, b, _ = self.per_step.shape
        return g, w, b

    def contrasts(self) -> tuple[np.ndarray, np.ndarray]:
        """Per block, mean log head - mean log base, of each statistic: (gates, workloads, blocks)."""
        heads = head_mask(self.shape[2])
        out = []
        for x in (self.per_step, self.median):
            out.append(np.where(heads, x, 0.0).sum(-1) / 2.0 - np.where(heads, 0.0, x).sum(-1) / 2.0)
        return out[0], out[1]


def draw_paired(rng: np.random.Generator, gates: int, workloads: int, blocks: int, *, sd: float = 0.05,
                rho: float = 1.0, slowdown: float = 0.0, every_slowdown: float = 0.0, skew_rate: float = 0.0,
                skew_factor: float = 1.30,
                steps: int = 50, slow_step_rate: float = 0.0, slow_step_factor: float = 5.0,
                level_ms: float = 15.0) -> PairedDraws:
    """Draw ``gates`` paired gates.

    - Each process's two statistics share a level ``sd * u`` and ``sd * (rho u + sqrt(1 - rho²) v)``
      (u, v independent standard normal): ``rho`` is their correlation before slow steps.
    - Slow steps (both sides): each of ``steps`` steps is ``slow_step_factor`` times slower with
      chance ``slow_step_rate``; they raise the time per step, never the median.
    - Skewed head (every workload's head processes): with chance ``skew_rate`` a head process
      is ``skew_factor`` times slower, and every head process is shifted down by
      ``skew_rate * log(skew_factor)``, so the head's log-mean stays where ``slowdown`` puts it.
    - ``slowdown``: the first workload's head is that much slower (both statistics);
      ``every_slowdown``: every workload's head is that much slower (with ``min_effect·δ``: the
      edge of every REGRESSION test's null, where its level is spent).
    """
    if not (-1.0 <= rho <= 1.0):
        raise ValueError(f"rho must lie in [-1, 1], got {rho!r}")
    shape = (gates, workloads, blocks, 4)
    u = rng.standard_normal(shape)
    v = rng.standard_normal(shape) if rho < 1.0 else 0.0
    base = math.log(level_ms)
    per_step = base + sd * u
    median = base + sd * (rho * u + math.sqrt(max(0.0, 1.0 - rho * rho)) * v)
    if slow_step_rate > 0:
        k = rng.binomial(steps, slow_step_rate, shape)
        per_step = per_step + np.log1p((slow_step_factor - 1.0) * k / steps)
    heads = np.broadcast_to(head_mask(blocks), shape)
    if skew_rate > 0:
        skewed = (rng.random(shape) < skew_rate) & heads
        shift = np.where(skewed, math.log(skew_factor), 0.0) - np.where(heads, skew_rate * math.log(skew_factor), 0.0)
        per_step, median = per_step + shift, median + shift
    if every_slowdown:
        bump = np.where(heads, math.log1p(every_slowdown), 0.0)
        per_step, median = per_step + bump, median + bump
    if slowdown:
        first = np.zeros(shape, dtype=bool)
        first[:, 0] = True
        bump = np.where(heads & first, math.log1p(slowdown), 0.0)
        per_step, median = per_step + bump, median + bump
    return PairedDraws(per_step, median)


@dataclass(frozen=True)
class ArrayVerdicts:
    """Each gate's verdict of each workload (codes), and the blocks it was decided (or left) at."""

    verdict: np.ndarray
    """(gates, workloads) of INCONCLUSIVE, PASS, REGRESSION, IMPROVED."""
    count: np.ndarray
    """(gates, workloads): the blocks of the look that decided it (the last look when undecided)."""
    estimate: np.ndarray
    """(gates, workloads): the time per step's estimated ratio at that look."""

    def share(self, code: int, workload: int = 0) -> float:
        return float(np.mean(self.verdict[:, workload] == code))

    def any_share(self, code: int, workloads: slice = slice(None)) -> float:
        """The share of gates with ``code`` on any of ``workloads``."""
        return float(np.mean((self.verdict[:, workloads] == code).any(axis=1)))


def _skewness(s1: np.ndarray, s2: np.ndarray, s3: np.ndarray, n: int) -> np.ndarray:
    """``perfgate.analysis.stats.logratio.skewness`` of n observations from their power sums."""
    if n < 3:
        return np.zeros_like(s1)
    mean = s1 / n
    m2 = s2 / n - mean * mean
    m3 = s3 / n - 3.0 * mean * s2 / n + 2.0 * mean ** 3
    g = np.where(m2 > 0, m3 / np.maximum(m2, 1e-300) ** 1.5, 0.0)
    return g * math.sqrt(n * (n - 1)) / (n - 2)


def _hall(x: np.ndarray, gamma: np.ndarray, n: int) -> np.ndarray:
    """``logratio.hall`` on arrays."""
    if n < 3:
        return x
    safe = np.where(gamma == 0, 1.0, gamma)
    a, b = safe / (3.0 * math.sqrt(n)), safe / (6.0 * math.sqrt(n))
    with np.errstate(over="ignore", invalid="ignore"):
        out = b + ((1.0 + a * x) ** 3 - 1.0) / (3.0 * a)
    return np.where(gamma == 0, x, out)


def _hall_inverse(y: float, gamma: np.ndarray, n: int) -> np.ndarray:
    """``logratio.hall_inverse`` on arrays."""
    if n < 3:
        return np.full_like(gamma, y)
    safe = np.where(gamma == 0, 1.0, gamma)
    a, b = safe / (3.0 * math.sqrt(n)), safe / (6.0 * math.sqrt(n))
    return np.where(gamma == 0, y, (np.cbrt(1.0 + 3.0 * a * (y - b)) - 1.0) / a)


def paired_verdicts(draws: PairedDraws, config: GateConfig, schedule: Schedule) -> ArrayVerdicts:
    """Every gate of ``draws`` judged by the paired gate's rule at the looks of ``schedule``
    (``perfgate.analysis.driver.schedule_for(config, first, "block")``)."""
    gates, workloads, blocks = draws.shape
    if schedule.counts[-1] > blocks:
        raise ValueError(f"the schedule looks up to {schedule.counts[-1]} blocks; the draws hold {blocks}")
    d_step, d_median = draws.contrasts()
    d = np.concatenate([d_step, d_median], axis=1)  # (gates, 2W, blocks): each time per step, then each median
    m = 2 * workloads
    s1, s2, s3 = np.cumsum(d, axis=-1), np.cumsum(d * d, axis=-1), np.cumsum(d * d * d, axis=-1)
    up, down = 1.0 + config.delta, 1.0 / (1.0 + config.delta)
    verdict = np.zeros((gates, workloads), dtype=np.int8)
    count = np.full((gates, workloads), schedule.counts[-1], dtype=int)
    estimate = np.full((gates, workloads), np.nan)
    open_ = np.ones((gates, workloads), dtype=bool)
    rows = np.arange(gates)[:, None]
    last = schedule.counts[-1]
    for n in schedule.counts:
        steps = np.array([schedule.level(config.alpha / (m - r), n) for r in range(m)])
        pass_level = schedule.level((1.0 - config.confidence) / 2.0, n)
        mean = s1[..., n - 1] / n
        var = np.maximum(s2[..., n - 1] - n * mean * mean, 0.0) / (n - 1)
        se = np.sqrt(var / n)
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.where(se > 0, mean / se, np.where(mean > 0, np.inf, np.where(mean < 0, -np.inf, 0.0)))
            skew = _skewness(s1[..., n - 1], s2[..., n - 1], s3[..., n - 1], n)
        down_skew = np.maximum(skew, 0.0)
        key_open = np.concatenate([open_, open_], axis=1)
        rejected = []
        shift = math.log1p(config.min_effect * config.delta)  # the tests' null reaches up to min_effect·δ
        with np.errstate(divide="ignore", invalid="ignore"):
            t_up = np.where(se > 0, (mean - shift) / se, np.where(mean > shift, np.inf, -np.inf))
            t_down = np.where(se > 0, (mean + shift) / se, np.where(mean < -shift, -np.inf, np.inf))
        if shift == 0:
            t_up = t_down = t
        for p in (special.stdtr(n - 1, -t_up), special.stdtr(n - 1, _hall(t_down, down_skew, n))):
            p = np.where(key_open, p, 1.0)
            order = np.argsort(p, axis=1, kind="stable")
            ranked = np.take_along_axis(p, order, axis=1)
            keep = np.cumprod(ranked <= steps[None, :], axis=1).astype(bool)
            rej = np.zeros_like(keep)
            rej[rows, order] = keep
            rejected.append(rej)
        slow, fast = rejected
        ratio = np.exp(mean)
        q = float(special.stdtrit(n - 1, 1.0 - pass_level))
        upper = np.exp(mean - se * _hall_inverse(-q, down_skew, n))
        key = np.where(slow & (ratio > up), REGRESSION,
                       np.where(fast & (ratio < down), IMPROVED, np.where(upper < up, PASS, INCONCLUSIVE)))
        step_v, median_v = key[:, :workloads], key[:, workloads:]
        combined = np.where((step_v == REGRESSION) | (median_v == REGRESSION), REGRESSION,
                            np.where(step_v == IMPROVED, IMPROVED,
                                     np.where(step_v == PASS,
                                              np.where(median_v == IMPROVED, IMPROVED, PASS), INCONCLUSIVE)))
        if n == last and config.inconclusive != "pass":
            # green only while the bound PASS is held to rules out the gate's bound (outcome.settle)
            combined = np.where((combined == INCONCLUSIVE) & ~(upper[:, :workloads] < 1.0 + config.green_bound),
                                TOO_NOISY, combined)
        now = open_ & ((combined != INCONCLUSIVE) | (n == last))
        verdict = np.where(now, combined, verdict).astype(np.int8)
        count = np.where(now, n, count)
        estimate = np.where(now, ratio[:, :workloads], estimate)
        open_ = open_ & ~now
        if not open_.any():
            break
    return ArrayVerdicts(verdict, count, estimate)
