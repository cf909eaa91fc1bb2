"""Verdicts: turn estimates into REGRESSION / PASS / INCONCLUSIVE / IMPROVED.

Pure functions over :class:`perfgate.analysis.stats.LogRatio`; no torch, no files, no printing.
The rules are written out in the README, "How perfgate decides".
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np

from perfgate.analysis.stats import (
    DEFAULT_ASSUMED_DAY_SD_LOG,
    DEFAULT_DAY_PRIOR_DF,
    DEFAULT_OUTLIER_SD,
    MDE_LIMIT_RATIO,
    LogRatio,
    bh_adjusted,
    confidence_interval,
    p_beyond,
    min_detectable_slowdown,
)
from perfgate.analysis.stats.sequential import DEFAULT_GAMMA, Schedule
from perfgate.model.counters import GATED as COUNTER_NAMES
from perfgate.model.repeat import PER_STEP, STATISTIC_WORDS, STATISTICS
from perfgate.model.verdict import INCONCLUSIVE_POLICIES, Verdict

__all__ = [
    "GateConfig",
    "Look",
    "PhaseFlag",
    "TimeDecision",
    "Verdict",
    "alpha_for_look",
    "combine_statistics",
    "decide_time",
    "flag_phases",
]


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class GateConfig:
    """Thresholds of the gate. Every field is validated on construction."""

    alpha: float = 0.01
    delta: float = 0.03
    min_effect: float = 0.5
    """The REGRESSION (and IMPROVED) test's null reaches up to this share of δ: a workload is
    a REGRESSION only when it is significantly slower than ``min_effect * δ`` (and its
    estimate above δ), so a true slowdown of δ/2 or less is a REGRESSION with chance at most α
    (0: the test against no change, with δ only a filter on the estimate, which called a true
    +1.5% REGRESSION in 10% of simulated gates at δ = 3%)."""
    confidence: float = 0.95
    max_blocks: int = 30
    """The most ABBA blocks a paired workload is measured for (stored baseline: the most current
    repeats); the gate looks after every block from its first look on, α spent over those looks."""
    spending_gamma: float = DEFAULT_GAMMA
    """The α-spending function's γ (Hwang-Shih-DeCani; ``perfgate.analysis.stats.sequential``)."""
    inconclusive: str = "bound"
    """What an undecided workload does to the pull request: "bound" (the default) keeps it green
    (INCONCLUSIVE: a neutral check run, a successful status, a skipped pytest item, exit code 3)
    only while its interval rules out a slowdown of :attr:`green_bound`, else it is TOO_NOISY
    (a failure as an error, exit code 2); "pass" keeps every undecided workload green; "fail"
    fails every one (INCONCLUSIVE exit code 3 with a failing check)."""
    inconclusive_bound: float | None = None
    """The slowdown an undecided workload's interval must rule out to stay green (0.06 = 6%);
    None: twice δ (:attr:`green_bound`)."""
    power: float = 0.8  # for the smallest detectable slowdown that is reported
    phase_q: float = 0.10
    phase_min_share: float = 0.01
    memory_threshold: float = 0.10
    assumed_day_sd_log: float = DEFAULT_ASSUMED_DAY_SD_LOG
    day_prior_df: float = DEFAULT_DAY_PRIOR_DF
    outlier_sd: float | None = DEFAULT_OUTLIER_SD
    gate_phases: tuple[str, ...] = ()
    fail_on_missing_baseline: bool = False
    missing_is_error: bool = True
    """A fact the reference holds and the current side lacks (peak memory; in the judge, a
    counted run) is an ERROR naming it; False shows it as not compared instead."""
    max_left_out: float = 0.25
    """The largest share of one side's repeats that may be left out for a thermal or hardware
    slowdown (``perfgate.analysis.screening``); beyond it the workload is an ERROR, "runner unfit"."""
    counters: bool = True
    """Paired design: one counted run per side after the timed blocks (``perfgate.analysis.counters``);
    a counter change that fails makes the workload a REGRESSION whatever the timing says."""
    flops_threshold: float = 0.01
    """FLOPs per step of a phase up by more than this share fail (0.01 = 1%)."""
    launch_threshold: float = 0.10
    """Kernel launches per step of a phase (on the CPU: aten operator calls) up by more than this share fail."""
    counters_off: tuple[str, ...] = ()
    """Counters reported when they change but never failing (names in ``perfgate.analysis.counters.GATED``)."""
    straggler_share: float = 0.10
    """A distributed run's rank is a STRAGGLER in a phase when it exceeds the other ranks'
    median there by more than this share of the step (``perfgate.analysis.ranks``); a label,
    never a verdict."""

    def __post_init__(self) -> None:
        def need(ok: bool, field: str, rule: str) -> None:
            if not ok:
                raise ValueError(f"GateConfig.{field} {rule}, got {getattr(self, field)!r}")

        def prob(field: str) -> None:
            v = getattr(self, field)
            need(_is_number(v) and 0 < v < 1, field, "must be between 0 and 1 (exclusive)")

        for name in ("alpha", "confidence", "power", "phase_q"):
            prob(name)
        need(_is_number(self.alpha) and self.alpha <= 0.5, "alpha", "must be at most 0.5")
        need(_is_number(self.delta) and 0 < self.delta < 1, "delta", "must be between 0 and 1 (0.03 = 3%)")
        need(_is_number(self.min_effect) and 0 <= self.min_effect < 1, "min_effect",
             "must be in [0, 1) (0.5 = half of δ)")
        need(isinstance(self.max_blocks, int) and not isinstance(self.max_blocks, bool)
             and 2 <= self.max_blocks <= 500, "max_blocks", "must be an integer from 2 to 500")
        need(_is_number(self.spending_gamma) and -40 <= self.spending_gamma <= 40, "spending_gamma",
             "must be a number from -40 to 40")
        need(self.inconclusive in INCONCLUSIVE_POLICIES, "inconclusive", 'must be "bound", "pass" or "fail"')
        need(self.inconclusive_bound is None or (_is_number(self.inconclusive_bound)
                                                 and self.delta < self.inconclusive_bound < 10),
             "inconclusive_bound", f"must be above δ ({self.delta:g}) and below 10 (0.06 = 6%)")
        need(_is_number(self.phase_min_share) and 0 <= self.phase_min_share < 1,
             "phase_min_share", "must be in [0, 1)")
        need(_is_number(self.straggler_share) and 0 < self.straggler_share < 1,
             "straggler_share", "must be between 0 and 1 (0.10 = 10% of the step)")
        need(_is_number(self.memory_threshold) and self.memory_threshold > 0,
             "memory_threshold", "must be > 0 (0.10 = 10%)")
        need(_is_number(self.assumed_day_sd_log) and self.assumed_day_sd_log >= 0,
             "assumed_day_sd_log", "must be a finite number >= 0")
        need(isinstance(self.day_prior_df, (int, float)) and self.day_prior_df >= 0,
             "day_prior_df", "must be >= 0 (math.inf: the assumed day sd is taken as known)")
        need(self.outlier_sd is None or (_is_number(self.outlier_sd) and self.outlier_sd > 0),
             "outlier_sd", "must be None or > 0")
        if isinstance(self.gate_phases, str) or not all(isinstance(p, str) for p in self.gate_phases):
            raise ValueError(f"GateConfig.gate_phases must be a tuple of phase names, got {self.gate_phases!r}")
        object.__setattr__(self, "gate_phases", tuple(self.gate_phases))
        need(isinstance(self.fail_on_missing_baseline, bool), "fail_on_missing_baseline", "must be True or False")
        need(isinstance(self.missing_is_error, bool), "missing_is_error", "must be True or False")
        need(_is_number(self.max_left_out) and 0 <= self.max_left_out < 1,
             "max_left_out", "must be in [0, 1) (0.25 = a quarter of a side's repeats)")
        need(isinstance(self.counters, bool), "counters", "must be True or False")
        for name in ("flops_threshold", "launch_threshold"):
            need(_is_number(getattr(self, name)) and getattr(self, name) >= 0, name,
                 "must be a finite number >= 0 (0.01 = 1%)")
        if isinstance(self.counters_off, str) or not all(isinstance(c, str) for c in self.counters_off):
            raise ValueError(f"GateConfig.counters_off must be a list of counter names, got {self.counters_off!r}")
        unknown = [c for c in self.counters_off if c not in COUNTER_NAMES]
        if unknown:
            raise ValueError(f"GateConfig.counters_off: unknown counter {unknown[0]!r}; counters: "
                             f"{', '.join(COUNTER_NAMES)}")
        object.__setattr__(self, "counters_off", tuple(self.counters_off))

    @property
    def green_bound(self) -> float:
        """The slowdown an undecided workload must rule out to stay green: ``inconclusive_bound``, else 2δ."""
        return self.inconclusive_bound if self.inconclusive_bound is not None else 2.0 * self.delta


@dataclass(frozen=True)
class Look:
    """Where a gate stands: ``count`` blocks (paired) or current repeats (stored) judged, at
    one of the planned looks of ``schedule``."""

    count: int
    schedule: Schedule
    unit: str = "block"

    def __post_init__(self) -> None:
        if self.schedule.look_at(self.count) is None:
            raise ValueError(f"no planned look at {self.count} {self.unit}s ({self.schedule.describe()})")

    @classmethod
    def single(cls, count: int = 1, unit: str = "block") -> Look:
        """The one look of a fixed design: the whole α at once."""
        return cls(count, Schedule(count, count), unit)

    @property
    def number(self) -> int:
        return self.schedule.look_at(self.count) or 0

    @property
    def looks(self) -> int:
        return self.schedule.looks

    @property
    def last(self) -> bool:
        """The gate's last look: the schedule's last count, or the look a budget's gate closed at."""
        return self.count >= self.schedule.counts[-1]

    def level(self, alpha: float) -> float:
        """The nominal one-sided level this look tests a hypothesis at, for a total ``alpha``."""
        return self.schedule.level(alpha, self.count)

    def where(self) -> str:
        spending = self.schedule.spending
        if spending is not None and len(spending) >= self.number > 0:
            n = f"{self.count} {self.unit}{'s' if self.count != 1 else ''}"
            if spending[self.number - 1] >= 1.0:
                return f"look {self.number}, the last: {n}, all of α spent"
            return f"look {self.number}, {n}, {spending[self.number - 1] * 100:.0f}% of the budget measured"
        if self.looks == 1:
            return "one look"
        return f"look {self.number} of {self.looks}, {self.count} {self.unit}{'s' if self.count != 1 else ''}"


def alpha_for_look(config: GateConfig, look: Look) -> float:
    """One-sided level a lone hypothesis is tested at, at ``look``: ``config.alpha`` spent over
    the planned looks (:mod:`perfgate.analysis.stats.sequential`); the whole α with one look."""
    return look.level(config.alpha)


def pass_level(config: GateConfig, look: Look) -> float:
    """The one-sided level of the upper bound PASS holds below δ at ``look``.

    Over the whole gate a true slowdown of exactly δ may PASS with chance at most
    ``(1 - config.confidence) / 2`` (2.5% at 95%), however many looks it takes: that chance is
    spent over the looks as α is (passing at any look is passing). PASS is the time per
    step's bound alone (:func:`combine_statistics`).
    """
    return look.level((1.0 - config.confidence) / 2.0)


@dataclass(frozen=True)
class TimeDecision:
    verdict: Verdict
    reason: str
    estimate: LogRatio
    alpha_used: float  # the level a lone hypothesis is tested at this look (alpha_for_look)
    mde: float  # smallest slowdown detectable at the first Holm step's level with config.power
    look: int = 1
    looks: int = 1
    level_slower: float = 0.0
    """The nominal one-sided level of this hypothesis's Holm step at this look (slower); after
    the step-down stopped, the level of the step that stopped it."""
    level_faster: float = 0.0
    """The same for the faster test (IMPROVED)."""
    statistic: str = PER_STEP
    """Which per-repeat statistic ``estimate`` is of (``perfgate.model.repeat.STATISTICS``)."""
    by_statistic: Mapping[str, TimeDecision] = field(default_factory=dict)
    """The step's decision: each statistic's own, of which this one is the deciding one
    (:func:`combine_statistics`). Empty for a gated phase."""
    pass_bound: float = math.nan
    """The upper bound PASS held below δ (ratio), at :func:`pass_level`'s one-sided level."""

    count: int = 0
    """Blocks (paired) or current repeats (stored) this decision was made on."""

    @property
    def goes_on(self) -> bool:
        """True when this verdict is INCONCLUSIVE and a later look is still planned."""
        return self.verdict is Verdict.INCONCLUSIVE and self.look < self.looks


def _pct(ratio: float) -> str:
    return f"{(ratio - 1) * 100:+.1f}"


def level_text(level: float) -> str:
    """A confidence level in percent with as few decimals as show it: 95, 99.0, 99.875."""
    pct = level * 100.0
    if pct == round(pct) and level < 0.99:
        return f"{pct:g}"
    for digits in (1, 2):
        text = f"{pct:.{digits}f}"
        if abs(float(text) - pct) < 1e-9:
            return text
    return f"{pct:.3f}"


def _p(p: float) -> str:
    return f"{p:.1e}" if 0 < p < 1e-4 else f"{p:.2g}"


def _holm_steps(p: np.ndarray, level_of: Sequence[Callable[[float], float]],
                alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Holm's step-down with each step's level from the sequential boundary: (rejected, level).

    The hypothesis of rank r (0-based, by p) is tested at ``level_of[i](alpha / (m - r))``,
    the nominal level of this look for that hypothesis alone given ``alpha / (m - r)`` over
    all the looks: Bonferroni over the hypotheses still open, the boundary over each one's
    looks (its own information, in the stored design). The step-down stops at the first p
    above its step's level; every hypothesis after it is given that step's level (its p is
    above it too), so that no reason or interval shows a p-value within a level that Holm
    never reached.
    """
    m = p.size
    order = np.argsort(p, kind="stable")
    levels = np.empty(m)
    rejected = np.zeros(m, dtype=bool)
    stopped_at: float | None = None
    for r, i in enumerate(order.tolist()):
        if stopped_at is not None:
            levels[i] = stopped_at
            continue
        levels[i] = level_of[i](alpha / (m - r))
        rejected[i] = bool(p[i] <= levels[i])
        if not rejected[i]:
            stopped_at = float(levels[i])
    return rejected, levels


INFORMATION_RATIO_STEP = 0.05
"""The ratio of an estimate's current-repeat variance to the rest is taken to this step on the
log scale (5%) before its information fractions are computed: the fractions come from an
estimate of that ratio anyway, and the levels of a few dozen ratios are computed once."""


def information(est: LogRatio, counts: Sequence[int]) -> tuple[float, ...] | None:
    """The information fraction of a stored-baseline estimate at each planned count of
    current repeats: ``(A + B / last) / (A + B / c)``, where ``B / n`` is the part of its
    variance the ``n`` current repeats carry (their sd squared over n) and ``A`` the rest
    (the baseline's mean, the day-to-day term), which more current repeats do not shrink;
    ``B / A`` is taken to :data:`INFORMATION_RATIO_STEP`. None when the estimate cannot say
    (no spread in the current repeats)."""
    b = est.current_sd_log ** 2
    n = est.n_current
    var = est.se_log ** 2
    if not (math.isfinite(b) and b > 0 and n >= 2 and math.isfinite(var) and var > 0):
        return None
    a = var - b / n
    last = counts[-1]
    if a <= var * 1e-6:
        return tuple(c / last for c in counts)  # all of it in the current repeats: the count's share
    r = math.exp(round(math.log(b / a) / INFORMATION_RATIO_STEP) * INFORMATION_RATIO_STEP)
    return tuple(min(1.0, (1.0 + r / last) / (1.0 + r / c)) for c in counts)


def _level_function(look: Look, est: LogRatio | None) -> Callable[[float], float]:
    """How this look's level is found for ``est``: by the count (a paired t boundary, one
    look), or, against a stored baseline, by the estimate's own information."""
    schedule = look.schedule
    if est is None or schedule.pivot != "information" or look.looks == 1:
        return look.level
    fractions = information(est, schedule.counts)
    if fractions is None:
        return look.level
    return lambda alpha: schedule.level(alpha, look.count, fractions)


@dataclass(frozen=True, order=True)
class FamilyKey:
    """One entry of a gate's Holm family: a workload's step under one statistic
    (:data:`perfgate.model.repeat.STATISTICS`), or one of its gated phases (per step)."""

    workload: str
    statistic: str = PER_STEP
    phase: str = ""
    """A gated phase; empty for the step."""

    def words(self) -> str:
        """What the entry's reason calls its row ("time per step", "forward per step")."""
        return f"{self.phase} per step" if self.phase else STATISTIC_WORDS[self.statistic]

    def __str__(self) -> str:
        tail = f":{self.phase}" if self.phase else ("" if self.statistic == PER_STEP else f"@{self.statistic}")
        return f"{self.workload}{tail}"


def family_keys(name: str, gate_phases: Sequence[str]) -> list[FamilyKey]:
    """A workload's entries in the Holm family: its step under each statistic, its gated phases."""
    return [*(FamilyKey(name, s) for s in STATISTICS), *(FamilyKey(name, PER_STEP, p) for p in gate_phases)]


def _key(name: FamilyKey | str) -> FamilyKey:
    """A family key; a bare name is a workload's time per step (one workload, one statistic)."""
    return name if isinstance(name, FamilyKey) else FamilyKey(name)


K = TypeVar("K", FamilyKey, str)
"""A family's keys: :class:`FamilyKey`, or bare workload names."""


def decide_time(
    estimates: Mapping[K, LogRatio],
    config: GateConfig,
    look: Look | None = None,
    *,
    already_decided: Collection[K] = (),
) -> dict[K, TimeDecision]:
    """Verdicts for the step time of each workload at ``look`` (None: a single look).

    Holm runs over the whole family: every name in ``estimates`` and in
    ``already_decided``. Workloads decided at an earlier look enter with p = 1 and get no
    new decision (they stopped measuring; counting them keeps every step's level safe).
    The keys are :class:`FamilyKey` (a workload's statistics and gated phases, all in one
    family: :func:`family_keys`), or bare names, each a workload's time per step.

    α is spent over the planned looks: Holm's step with ``s`` hypotheses left tests at this
    look's nominal level for ``alpha / s`` (:func:`_holm_steps`). PASS holds the upper bound
    at :func:`pass_level` below δ. Against a stored baseline each hypothesis's looks are
    spaced by its own information (:func:`information`), not by the count of repeats.
    """
    look = look or Look.single()
    decided = set(already_decided)
    open_names = [n for n in estimates if n not in decided]
    family = open_names + sorted(decided, key=str)
    m = len(family)
    if not open_names:
        return {}
    level_of = [_level_function(look, estimates[n]) for n in open_names] + [look.level] * len(decided)
    shift = math.log1p(config.min_effect * config.delta)
    beyond = [p_beyond(estimates[n], shift) for n in open_names]
    p_slow = np.array([b[0] for b in beyond] + [1.0] * len(decided))
    p_fast = np.array([b[1] for b in beyond] + [1.0] * len(decided))
    rej_slow, thr_slow = _holm_steps(p_slow, level_of, config.alpha)
    rej_fast, thr_fast = _holm_steps(p_fast, level_of, config.alpha)
    up, down = 1.0 + config.delta, 1.0 / (1.0 + config.delta)
    d = f"δ={config.delta * 100:g}%"
    least = config.min_effect * config.delta
    slower_than = f" for a slowdown of more than {least * 100:.3g}%" if least > 0 else ""
    faster_than = f" for a speed-up of more than {least * 100:.3g}%" if least > 0 else ""
    where = look.where()
    out: dict[K, TimeDecision] = {}
    for i, name in enumerate(open_names):
        est = estimates[name]
        slow = bool(rej_slow[i])
        fast = bool(rej_fast[i])
        alpha = level_of[i](config.alpha)
        first_step = level_of[i](config.alpha / m)
        pass_one_sided = level_of[i]((1.0 - config.confidence) / 2.0)
        mde = min_detectable_slowdown(est, first_step, config.power)
        if math.isfinite(mde):
            mde = (1.0 + least) * (1.0 + mde) - 1.0  # the test's null reaches up to min_effect·δ
        ps, pf = beyond[i]
        # The PASS rule's bound is spent over the looks (pass_level); say its level each time.
        upper = confidence_interval(est, 1.0 - 2.0 * pass_one_sided)[1]
        bound = f"upper {level_text(1.0 - pass_one_sided)}% bound {_pct(upper)}%"
        if slow and est.ratio > up:
            verdict = Verdict.REGRESSION
        elif fast and est.ratio < down:
            verdict = Verdict.IMPROVED
        elif upper < up:
            verdict = Verdict.PASS
        else:
            verdict = Verdict.INCONCLUSIVE
        # The printed interval has the level of this workload's Holm step, two-sided
        # 1 - 2 * threshold, so that it clears ±min_effect·δ exactly when that step's
        # one-sided test does (the faster test's step for IMPROVED).
        threshold = thr_fast[i] if verdict is Verdict.IMPROVED else thr_slow[i]
        level = 1.0 - 2.0 * threshold
        low, high = confidence_interval(est, level)
        row = _key(name).words()
        head = (f"{row} {_pct(est.ratio)}% [{_pct(low)}, {_pct(high)}] "
                f"({level_text(level)}% CI, the level of this look's test)")
        if verdict is Verdict.REGRESSION:
            reason = f"{head}, p={_p(ps)} < {_p(thr_slow[i])}{slower_than} (Holm, {where}), above {d}"
        elif verdict is Verdict.IMPROVED:
            reason = (f"{head}, p={_p(pf)} < {_p(thr_fast[i])}{faster_than} (Holm, {where}), "
                      f"faster by more than {d}; consider rebaselining")
        elif verdict is Verdict.PASS:
            reason = f"{head}: {bound} below {d}"
            if slow:
                reason += f"; slower (p={_p(ps)}{slower_than}, Holm, {where}) but by less than {d}"
        else:
            if slow:
                why = (f"slower (p={_p(ps)}{slower_than}, Holm, {where}) but the estimate is not "
                       f"above {d} and the {bound} reaches above it")
            else:
                why = (f"not significant (p={_p(ps)} > its Holm step's level {_p(thr_slow[i])}{slower_than}, "
                       f"{where}) and the {bound} reaches above {d}")
            nxt = "measuring on" if not look.last else f"undecided at the last planned look ({where})"
            if math.isfinite(mde):
                detect = f"this look could detect about {mde * 100:+.1f}%"
            else:
                detect = f"a slowdown up to {MDE_LIMIT_RATIO:g}× is not detectable with this noise"
            reason = f"{head}: {why}; {detect}; {nxt}"
        if est.excluded_baseline or est.outliers_current:
            reason += f"; {_outlier_text(est)}"
        out[name] = TimeDecision(verdict, reason, est, alpha, mde, look.number, look.looks,
                                 float(thr_slow[i]), float(thr_fast[i]), statistic=_key(name).statistic,
                                 pass_bound=upper, count=look.count)
    return out


def combine_statistics(decisions: Sequence[TimeDecision]) -> TimeDecision:
    """The step's decision from its statistics' decisions (in :data:`STATISTICS` order, the
    deciding one first), each already decided in the Holm family.

    - REGRESSION when any is: significant after Holm and above δ. The time per step
      catches what stalls a few steps (a loader falling behind every fourth batch); the
      median step catches a compute change the time per step's noise would hide. Holm over
      all of them keeps the family-wise level at α whatever their correlation.
    - PASS when the deciding statistic (the time per step) has its upper bound below δ and
      no other is a REGRESSION: the gate promises the time per step (what a training run
      pays), so PASS is that statistic's test alone, at its own 2.5%. Asking every bound to
      lie below δ spent nothing but made unchanged code undecided whenever the statistics
      disagree (at a process sd of 20% and a correlation of 0.5 between the two, 1.9% of
      A/A gates passed); the others stay what they are good for, detectors of REGRESSION.
    - IMPROVED when the deciding statistic is faster by more than δ and none is a
      REGRESSION, or another is IMPROVED and the deciding one passes.
    - INCONCLUSIVE otherwise.

    The chosen statistic's decision is returned (the deciding one when they agree), holding
    every statistic's in ``by_statistic``.
    """
    deciding, *others = decisions
    both = {d.statistic: d for d in decisions}
    regressions = [d for d in decisions if d.verdict is Verdict.REGRESSION]
    improved = [d for d in others if d.verdict is Verdict.IMPROVED]
    if regressions:
        chosen = regressions[0]
    elif deciding.verdict is Verdict.PASS and improved:
        chosen = improved[0]
    else:
        chosen = deciding  # PASS, IMPROVED, or undecided: the deciding statistic's own
    reason = chosen.reason
    if chosen.verdict is Verdict.PASS:
        for other in decisions:
            if other is not chosen:
                reason += (f"; {STATISTIC_WORDS[other.statistic]} {_pct(other.estimate.ratio)}% "
                           f"({other.verdict.value.lower()}, shown, not required to pass)")
    return dataclasses.replace(chosen, reason=reason, by_statistic=both)


def _outlier_text(est: LogRatio) -> str:
    """Baseline repeats set aside, and current repeats that look like outliers but count."""
    texts = []
    if est.excluded_baseline:
        parts = [f"baseline recording {j + 1} #{i + 1}" for j, i in est.excluded_baseline]
        n = len(parts)
        texts.append(f"{n} outlier repeat{'s' if n > 1 else ''} set aside ({', '.join(parts)})")
    if est.outliers_current:
        numbers = ", ".join(str(i + 1) for i in est.outliers_current)
        if len(est.outliers_current) == 1:
            texts.append(f"current repeat {numbers} looks like an outlier (kept)")
        else:
            texts.append(f"current repeats {numbers} look like outliers (kept)")
    return "; ".join(texts)


@dataclass(frozen=True)
class PhaseFlag:
    """One phase of one workload: its estimate, and whether it changed (BH over phases)."""

    phase: str
    estimate: LogRatio | None
    tested: bool
    flagged: bool
    q_value: float | None
    share: float | None
    reason: str


def flag_phases(
    phase_estimates: Mapping[str, LogRatio | None],
    q: float = 0.10,
    *,
    baseline_shares: Mapping[str, float] | None = None,
    min_share: float = 0.01,
) -> dict[str, PhaseFlag]:
    """Flag phases whose time changed, Benjamini-Hochberg at ``q`` on two-sided p-values.

    A phase is not tested (and says why) when its estimate is ``None`` or its baseline
    share of the step is below ``min_share``. Phases are diagnosis, not the gate.
    """
    if not (0 < q < 1):
        raise ValueError(f"q must be between 0 and 1 (exclusive), got {q!r}")
    shares = dict(baseline_shares or {})
    out: dict[str, PhaseFlag] = {}
    tested: list[str] = []
    for name, est in phase_estimates.items():
        share = shares.get(name)
        if est is None:
            out[name] = PhaseFlag(name, None, False, False, None, share, "not tested: no estimate for this phase")
        elif share is not None and share < min_share:
            out[name] = PhaseFlag(name, est, False, False, None, share,
                                  f"not tested: {share * 100:.2g}% of the baseline step, "
                                  f"below the {min_share * 100:g}% floor")
        else:
            tested.append(name)
    qs = bh_adjusted([phase_estimates[n].p_two_sided for n in tested])  # type: ignore[union-attr]  # tested holds only phases with an estimate
    for name, qv in zip(tested, qs, strict=True):
        est = phase_estimates[name]
        assert est is not None
        flagged = qv <= q
        head = f"{name} {_pct(est.ratio)}% [{_pct(est.ci_low)}, {_pct(est.ci_high)}]"
        direction = "slower" if est.ratio > 1 else "faster"
        tail = f"{direction} (BH q={_p(qv)} <= {q:g})" if flagged else f"no change flagged (BH q={_p(qv)})"
        out[name] = PhaseFlag(name, est, True, flagged, qv, shares.get(name), f"{head}: {tail}")
    return out
