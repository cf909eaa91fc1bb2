"""One repeat as a comparison sees it: the raw per-step series and the facts that decide.

A run's result (``perfgate.model.result.RepeatResult``) and a baseline's recording
(``perfgate.model.baseline.Recording``) hold the same type, :class:`Repeat`: the per-step
values of every series, the throughput, the peak memory, the ABBA block, and what the GPU
reported about its clock. Everything a comparison uses is derived from those values here,
once, by one rule, for both sides.

Two statistics summarise a repeat, per phase, for the residual and for the step
(:data:`STATISTICS`):

- ``per_step``, the **time per step**: the window's total over its steps, what throughput
  and the cloud bill see. A loader that stalls one step in four moves it by the whole
  stall, a quarter of it per step.
- ``median``, the **median step**: blind to a stall on fewer than half of the steps,
  but far less noisy when a few steps are slow at random; the precise statistic for a
  change in compute.

No torch, no files.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from statistics import median

from perfgate.model.workload import PHASES

RESIDUAL = "residual"
SERIES = (*PHASES, "step")
"""Per-step series every repeat holds; CUDA runs add ``device_busy``, ``host_step`` and
``host_data_wait``, distributed ones ``comm`` (and on the CPU ``comm_total``)."""
ROWS = (*PHASES, RESIDUAL, "step")
"""Table rows: the five phases, the unattributed rest of the step, and the step."""

@dataclass(frozen=True)
class Statistic:
    """One per-repeat statistic: a row of :data:`STATISTIC_TABLE`."""

    name: str
    words: str
    """How a reason or a table names it ("time per step")."""


PER_STEP = "per_step"
MEDIAN = "median"
STATISTIC_TABLE = (Statistic(PER_STEP, "time per step"), Statistic(MEDIAN, "median step"))
"""The per-repeat statistics a step is decided on, the deciding one first: PASS is its test
alone, REGRESSION any statistic's (``perfgate.analysis.decide.combine_statistics``); each
is one entry of the Holm family per workload. Adding a statistic is a row here, its
computation in :meth:`Repeat.summary_ms`, and the stored formats' migrations."""
STATISTICS = tuple(s.name for s in STATISTIC_TABLE)
"""The statistics' names, the deciding one first (see the module docstring)."""
STATISTIC_WORDS: Mapping[str, str] = {s.name: s.words for s in STATISTIC_TABLE}


def residual_series(series: Mapping[str, Sequence[float]]) -> tuple[float, ...]:
    """Per step, the part of the step no phase explains (loop overhead, host syncs, logging).

    Never negative in repeats measured since the stall is booked on its own step; CUDA
    repeats recorded before that timed the data wait on the host, overlapping the device
    phases, so theirs can be."""
    phases = [series[p] for p in PHASES]
    return tuple(s - sum(values) for s, values in zip(series["step"], zip(*phases, strict=True), strict=True))


def row_medians(series: Mapping[str, Sequence[float]]) -> dict[str, float]:
    """The median over a window's steps of each phase, the residual and the step."""
    medians = {p: median(series[p]) for p in PHASES}
    medians[RESIDUAL] = median(residual_series(series))
    medians["step"] = median(series["step"])
    return medians


def row_means(series: Mapping[str, Sequence[float]]) -> dict[str, float]:
    """The time per step of each phase, the residual and the step: the window's total over its steps.

    ``math.fsum``: the sum of a long window of small values is exact to the last bit, so
    the means written beside the raw values are those a reader derives from them again."""
    n = len(series["step"])
    means = {p: math.fsum(series[p]) / n for p in PHASES}
    means["step"] = math.fsum(series["step"]) / n
    means[RESIDUAL] = means["step"] - math.fsum(means[p] for p in PHASES)
    return means


def row_shares(series: Mapping[str, Sequence[float]]) -> dict[str, float]:
    """Total time of each phase (and the residual) over the total step time of the window:
    the time per step of each row over the time per step."""
    means = row_means(series)
    total = means["step"]
    if total <= 0:
        raise ValueError("the window's steps add up to no time")
    return {row: means[row] / total for row in ROWS}


SLOWDOWN_REASONS: Mapping[str, str] = {
    "hw_slowdown": "hardware slowdown",
    "hw_power_brake_slowdown": "hardware slowdown",
    "sw_thermal_slowdown": "thermal",
    "hw_thermal_slowdown": "thermal",
}
"""NVML clock-event reasons (as the telemetry names them) that leave a repeat out, and their kind.

The software power cap (``sw_power_cap``) is not one of them: a GPU with a low power limit
(a 70 W T4) sets it on most samples under load, at a clock that is its normal working
clock. Its share of the samples is telemetry (``power_cap_share``). A clock level is never
a reason to leave a repeat out: the clock a change causes is part of its cost, and a rule
that held one side's clocks against the other's would remove exactly the repeats that
show it (``perfgate.analysis.screening``)."""


def describe_slowdown(reasons: tuple[str, ...] | None) -> str | None:
    """``"thermal (hw_thermal_slowdown)"``, ``"hardware slowdown (hw_slowdown)"``, ...; None: no slowdown."""
    if reasons is None:
        return "throttled, reason not recorded (an older perfgate counted the power cap too)"
    if not reasons:
        return None
    kinds = sorted({SLOWDOWN_REASONS.get(r, "slowdown") for r in reasons}, key=("thermal", "hardware slowdown",
                                                                             "slowdown").index)
    return f"{' and '.join(kinds)} ({', '.join(reasons)})"


@dataclass(frozen=True, kw_only=True)
class Repeat:
    """One repeat: one fresh process's measured window, as both sides of a comparison hold it."""

    phases_ms: Mapping[str, tuple[float, ...]]
    """Every raw per-step series (:data:`SERIES` and any extra ones), milliseconds."""
    samples_per_s: float
    peak_memory_bytes: int | None
    index: int = 0
    block: int | None = None
    """The ABBA block this repeat was measured in (paired design); None in a plain run."""
    slowdown_reasons: tuple[str, ...] | None = ()
    """The thermal and hardware slowdown reasons NVML reported during the window (``()``:
    none, or nothing sampled); None: the repeat was marked throttled without a reason."""
    sm_clock_mhz: float | None = None
    """The median SM clock during the window (None: not sampled)."""
    power_cap_share: float | None = None
    """The share of the samples in which the software power cap held the clock: shown, never a reason to leave out."""
    windows: int = 1
    """Timed windows in this process, of equal steps, one after the other (each series holds
    them in order): a repeat's windows share its process, so they are sub-samples of one
    independent unit, never independent repeats themselves."""

    def __post_init__(self) -> None:
        if isinstance(self.windows, bool) or not isinstance(self.windows, int) or self.windows < 1:
            raise ValueError(f"windows must be an integer >= 1, got {self.windows!r}")
        steps = len(self.phases_ms["step"]) if "step" in self.phases_ms else 0
        if steps and steps % self.windows:
            raise ValueError(f"{steps} steps do not divide into {self.windows} windows of equal steps")

    @property
    def steps(self) -> int:
        return len(self.phases_ms["step"])

    @cached_property
    def steps_s(self) -> float:
        """The timed steps added up exactly, in seconds: the window the steps themselves measure
        (unlike a stated ``window_s``, what the gate judges)."""
        return math.fsum(self.phases_ms["step"]) / 1e3

    @property
    def steps_per_window(self) -> int:
        return self.steps // self.windows

    def window_series(self) -> list[dict[str, tuple[float, ...]]]:
        """Each window's own series, in the order they were timed."""
        n = self.steps_per_window
        return [{k: tuple(v[w * n:(w + 1) * n]) for k, v in self.phases_ms.items()} for w in range(self.windows)]

    @cached_property
    def window_step_ms(self) -> tuple[float, ...]:
        """Each window's time per step: the within-process level of the variance components."""
        n = self.steps_per_window
        step = self.phases_ms["step"]
        return tuple(math.fsum(step[w * n:(w + 1) * n]) / n for w in range(self.windows))

    @property
    def throttle_reason(self) -> str | None:
        """Why the repeat is left out for a slowdown, in words; None when it is not."""
        return describe_slowdown(self.slowdown_reasons)

    @property
    def throttled(self) -> bool:
        """True when the GPU slowed down for heat or by hardware during the window."""
        return self.slowdown_reasons != ()

    @cached_property
    def residual_ms(self) -> tuple[float, ...]:
        """Per step, the part of the step no phase explains (:func:`residual_series`)."""
        return residual_series(self.phases_ms)

    @cached_property
    def medians_ms(self) -> dict[str, float]:
        """The median step of each row (:func:`row_medians`); with several windows, the mean
        over the windows of each window's median step, so a window's steps are summarised
        where they were timed together and the windows weigh alike."""
        if self.windows == 1:
            return row_medians(self.phases_ms)
        per_window = [row_medians(w) for w in self.window_series()]
        return {row: math.fsum(m[row] for m in per_window) / self.windows for row in ROWS}

    @cached_property
    def per_step_ms(self) -> dict[str, float]:
        """The time per step of each row (:func:`row_means`)."""
        return row_means(self.phases_ms)

    @cached_property
    def shares(self) -> dict[str, float]:
        """Each row's share of the time per step (:func:`row_shares`)."""
        return row_shares(self.phases_ms)

    def summary_ms(self, statistic: str) -> Mapping[str, float]:
        """The repeat's one number per row under ``statistic`` (:data:`STATISTICS`)."""
        if statistic == PER_STEP:
            return self.per_step_ms
        if statistic == MEDIAN:
            return self.medians_ms
        raise ValueError(f"unknown statistic {statistic!r}; statistics: {', '.join(STATISTICS)}")


def check_series(series: Mapping[str, tuple[float, ...]], where: str) -> None:
    """Every series present, of one length, finite and not negative: a repeat a comparison can use."""
    missing = [name for name in SERIES if name not in series]
    if missing:
        raise ValueError(f"{where}: missing series {', '.join(missing)}")
    lengths = {len(v) for v in series.values()}
    if len(lengths) != 1:
        raise ValueError(f"{where}: series have different lengths {sorted(lengths)}")
    if not lengths or 0 in lengths:
        raise ValueError(f"{where}: a repeat holds at least one step")
    if sum(series["step"]) <= 0:
        raise ValueError(f"{where}.step: the steps add up to no time")
