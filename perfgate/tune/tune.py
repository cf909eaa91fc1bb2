"""``perfgate tune-loader``: which DataLoader settings make a workload faster, beyond the noise.

The advisor measures short, unprofiled repeats (one fresh process each, telemetry off) of
one workload under several DataLoader settings and recommends one only when it is faster
than the current setting by more than the machine's noise. It works in two stages:

1. **num_workers sweep.** The current setting and the worker counts from 0 up to the core
   count (all of them up to 8 cores, a ladder above), everything else as it is now.
2. **Around the fastest of stage 1** (highest median throughput): ``pin_memory`` toggled
   (CUDA only: pinned memory speeds up host-to-GPU copies and nothing else, so on the CPU
   it is skipped rather than measured as noise), ``prefetch_factor`` 2 or 4, and
   ``persistent_workers`` toggled (it only keeps workers alive between epochs; it is
   skipped when the measured window never restarted the loader, because it cannot change
   what is measured then). The fastest of stage 1 is measured again beside its variants.

A setting the DataLoader refuses (``prefetch_factor`` or ``persistent_workers`` with
``num_workers=0``) is skipped with the reason; a setting that fails when measured, or
that the workload's builder does not pass on to its DataLoader, is skipped with what
happened. The run goes on.

Order: every round measures the current setting and each candidate of the stage once, in
alternating order (forward, then reversed, ...), so a burst of load on a shared machine
spreads over all of them. Each candidate is compared with the current setting measured in
the same rounds, paired by round.

Budget: the first round gives each setting's repeat time; the number of settings and of
rounds is then chosen so that their estimated time (the sum of the repeat times, process
start-up included) stays within the budget, preferring more repeats over more settings,
and stage-1 settings over stage-2 ones (:func:`plan_stage`).

The decision (:func:`recommend`): for each candidate S, the ratio of its throughput to the
current one's (``> 1``: S is faster) is estimated on log samples/s by the randomised-block
model of :mod:`perfgate.analysis.blocks` with **each round as a block**: ``log samples/s = arm +
round``, fitted by least squares (``block_log_ratio(current, S)``, whose "head / base" is
then S's samples/s over the current's). A round holds one repeat of each, so the estimate
is the mean of the per-round differences ``log S - log current`` and its interval the
paired t on those differences, with J - 1 degrees of freedom for J rounds. Whatever
slows or speeds up the whole machine for a round (the machine getting slower over the
run, a neighbour's job) is shared by both repeats of that round and cancels; Welch on the
two sets of repeats would count it as noise. Drift *inside* a round is not removed (the
two repeats sit at different places in it): with the order alternating, it enters the
differences with a sign that flips from round to round, widening the interval (and, with
an odd number of rounds, leaving a little of it in the estimate). The table names the
estimator of each interval ("paired by round, J rounds").

S is **faster beyond the noise** when the one-sided test of ``ratio > 1 + margin``
rejects at ``alpha / m`` (Bonferroni over the m candidates compared), that is when the
lower end of its two-sided ``1 - 2 alpha / m`` interval is above ``1 + margin``.
Bonferroni holds whatever the dependence between candidates and however the
recommendation is then picked among them: the chance that *any* setting called faster
is not truly faster by the margin is at most ``alpha``. Among those faster beyond the
noise, the highest estimate among the ones that change the fewest settings is
recommended; one that changes more replaces it only when it is faster than it beyond the
noise, by the same paired estimate in the rounds both ran in. When no setting is faster
beyond the noise, the answer is "none of them helps".

Rounds that are not aligned between the two settings compared:

- The current setting is measured in every round (if one of its repeats fails the command
  stops), so a candidate's rounds are always among the current's, and the candidate is
  paired with the current in exactly its own rounds: a stage-2 variant in the stage-2
  rounds, the fastest of stage 1 (measured again in stage 2) in all of its rounds.
- A candidate that fails in any repeat, or whose DataLoader does not take the setting, is
  skipped as a whole (its earlier repeats are not judged), so a failed repeat never leaves
  a hole in a judged comparison. A candidate measured in round 1 only (over the budget
  after it), or in fewer than two rounds beside the current (a stage stopped early), is
  not judged and not counted in m.
- For results built by hand: a round that holds only one of the two settings tells
  nothing about their difference and is left out; a round with more than one repeat of
  a setting is fitted by the block model as it stands (least squares handles the
  imbalance); fewer than two rounds holding both means not judged. Results that carry no
  rounds (``SettingResult.rounds`` empty on either side) fall back to Welch on log
  samples/s against ``reference`` (or all of the current's repeats), named "Welch,
  unpaired" in the table. Only that fallback sets outlying repeats aside (the gate's
  rule); a paired comparison, like the gate's paired design, sets none aside: a repeat
  hit by a burst of load enters its round's difference and widens the interval.

Everything here but :func:`tune_loader` is pure (no torch, no I/O); :func:`tune_loader`
measures through :func:`perfgate.measure.runner.measure`, imported inside it.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Any

from scipy import special

from perfgate.analysis.blocks import BlockValue, block_log_ratio, blocks_of
from perfgate.model.errors import PerfgateError, WorkloadError
from perfgate.report.units import change_ci, table
from perfgate.analysis.stats import DEFAULT_OUTLIER_SD, log_ratio
from perfgate.model.workload import Params, Workload, apply_overrides

__all__ = [
    "DEFAULT_ALPHA",
    "DEFAULT_MARGIN",
    "DEFAULT_REPEATS",
    "LOADER_KEYS",
    "MIN_REPEATS",
    "Comparison",
    "Failure",
    "Recommendation",
    "Sample",
    "SettingResult",
    "StagePlan",
    "TuneResult",
    "candidate_settings",
    "current_setting",
    "describe",
    "plan_stage",
    "recommend",
    "render_tune_table",
    "run_tuning",
    "set_line",
    "skip_reason",
    "tune_loader",
    "worker_counts",
]

LOADER_KEYS = ("num_workers", "pin_memory", "prefetch_factor", "persistent_workers")
"""The DataLoader settings the advisor varies (``batch_size`` is not one: it changes the model's work)."""

DEFAULT_PREFETCH = 2
"""torch's ``prefetch_factor`` when it is not given and ``num_workers > 0``."""

DEFAULT_ALPHA = 0.05
"""Family-wise one-sided level: the chance that any setting called faster is not."""

DEFAULT_MARGIN = 0.02
"""A setting must be faster than the current one by more than this (2%) beyond the noise."""

DEFAULT_REPEATS = 3
MIN_REPEATS = 2
"""Two rounds holding both settings (paired), or two repeats per side (Welch), are needed to see
run-to-run variation; fewer cannot be judged."""

RECOMMEND = "recommend"
NONE_HELPS = "none-helps"
UNDECIDED = "undecided"

Setting = dict[str, Any]


# --------------------------------------------------------------------------- settings


def current_setting(params: Params) -> Setting:
    """The four loader settings ``params`` pin, as a plain dict."""
    return {k: getattr(params, k) for k in LOADER_KEYS}


def _effective(setting: Mapping[str, Any]) -> tuple[Any, ...]:
    """What the DataLoader is actually given: settings that build the same loader are equal.

    ``prefetch_factor`` and ``persistent_workers`` exist only for worker processes (perfgate
    leaves them out with ``num_workers=0``), and ``prefetch_factor=None`` means 2 there.
    """
    workers = int(setting["num_workers"])
    if workers == 0:
        return (0, bool(setting["pin_memory"]), None, False)
    prefetch = setting["prefetch_factor"] if setting["prefetch_factor"] is not None else DEFAULT_PREFETCH
    return (workers, bool(setting["pin_memory"]), prefetch, bool(setting["persistent_workers"]))


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "none"
    return str(value)


def _changed(setting: Mapping[str, Any], base: Mapping[str, Any]) -> list[str]:
    """Keys whose value differs from ``base``; with no workers only ``num_workers``/``pin_memory`` count."""
    keys = [k for k in LOADER_KEYS if setting[k] != base[k]]
    if int(setting["num_workers"]) == 0:
        keys = [k for k in keys if k in ("num_workers", "pin_memory")]
    return keys


def describe(setting: Mapping[str, Any], current: Mapping[str, Any] | None = None) -> str:
    """``num_workers=2 prefetch_factor=4``: the keys that differ from ``current`` (all keys without one)."""
    if current is None:
        keys = list(LOADER_KEYS)
        if int(setting["num_workers"]) == 0:
            keys = ["num_workers", "pin_memory"]
    else:
        keys = [k for k in LOADER_KEYS if setting[k] != current[k]]
        if not keys:
            return "current"
    return " ".join(f"{k}={_text(setting[k])}" for k in keys)


def set_line(setting: Mapping[str, Any], current: Mapping[str, Any],
             overrides: Mapping[str, Any] | None = None) -> str:
    """The ``--set`` line that runs ``setting``: the user's own overrides with the changed keys on top."""
    merged: dict[str, Any] = dict(overrides or {})
    for key in _changed(setting, current):
        merged[key] = setting[key]
    if not merged:
        return ""
    return "--set " + " ".join(f"{k}={_text(v)}" for k, v in merged.items())


def worker_counts(cores: int, current: int = 0) -> list[int]:
    """num_workers to sweep: 0 up to ``cores`` (all of them up to 8 cores, then 0, 1, 2, 4, ...,
    ``cores // 2`` and ``cores``), plus the current count, ascending."""
    if cores < 1:
        raise ValueError(f"cores must be at least 1, got {cores!r}")
    if cores <= 8:
        counts = set(range(cores + 1))
    else:
        counts = {0, cores // 2, cores}
        power = 1
        while power <= cores:
            counts.add(power)
            power *= 2
    counts.add(int(current))
    return sorted(counts)


def _stage1_priority(counts: Sequence[int], current: int, cores: int) -> list[int]:
    """The order in which worker counts are kept when the budget cannot hold them all:
    the current one, then about half and all of the cores (the usual advice), 1, 0, then the rest."""
    preferred = [current, max(1, cores // 2), cores, 1, 0]
    order = [c for c in dict.fromkeys(preferred) if c in counts]
    return order + [c for c in sorted(counts, reverse=True) if c not in order]


def candidate_settings(params: Params, device: str, cores: int, *,
                       around: Mapping[str, Any] | None = None) -> list[Setting]:
    """The settings to consider, most important first.

    Without ``around`` (stage 1): the current setting first, then ``num_workers`` over
    :func:`worker_counts` with everything else as it is now, in the order they are kept
    when the budget is short. With ``around`` (stage 2, the fastest setting of stage 1):
    ``pin_memory`` toggled, ``prefetch_factor`` 2 or 4 (the one it is not), then
    ``persistent_workers`` toggled. Some of these may not be worth measuring or may be
    refused by the DataLoader; :func:`skip_reason` says which and why. ``device`` does not
    prune here, so that what is skipped is listed with its reason.
    """
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be cpu or cuda, got {device!r}")
    current = current_setting(params)
    if around is None:
        counts = worker_counts(cores, current["num_workers"])
        order = _stage1_priority(counts, current["num_workers"], cores)
        return [dict(current, num_workers=w) for w in order]
    base = {k: around[k] for k in LOADER_KEYS}
    out: list[Setting] = [dict(base, pin_memory=not base["pin_memory"])]
    prefetch = base["prefetch_factor"] if base["prefetch_factor"] is not None else DEFAULT_PREFETCH
    out += [dict(base, prefetch_factor=v) for v in (2, 4) if v != prefetch]
    out.append(dict(base, persistent_workers=not base["persistent_workers"]))
    return out


def skip_reason(setting: Mapping[str, Any], base: Mapping[str, Any], device: str, *,
                loader_restarted: bool = False) -> str | None:
    """Why ``setting`` (derived from ``base`` by changing a key or two) is not measured, or None.

    - the DataLoader refuses ``prefetch_factor`` and ``persistent_workers=True`` without
      worker processes (``num_workers=0``), and the other values change nothing there;
    - ``pin_memory`` only speeds up host-to-CUDA copies: on the CPU it would measure noise;
    - ``persistent_workers`` only keeps workers alive from one epoch to the next: if the
      measured window never restarted the loader it cannot change what is measured.
    """
    changed = [k for k in LOADER_KEYS if setting[k] != base[k]]
    if int(setting["num_workers"]) == 0:
        for key in ("prefetch_factor", "persistent_workers"):
            if key not in changed:
                continue
            value = setting[key]
            if (key == "prefetch_factor" and value is not None) or (key == "persistent_workers" and value):
                return (f"the DataLoader refuses {key}={_text(value)} with num_workers=0 "
                        "(it applies to worker processes only)")
            return f"{key} applies to worker processes only: with num_workers=0 it changes nothing"
    if "pin_memory" in changed and device != "cuda":
        return (f"pin_memory only speeds up copies from the host to a CUDA device; on {device} "
                "it would measure noise, so it is not tried")
    if "persistent_workers" in changed and not loader_restarted:
        return ("persistent_workers only keeps the workers alive from one epoch to the next; the measured "
                "window never restarted the loader, so it cannot change this measurement (in a long run "
                "it saves the worker start-up once per epoch)")
    return None


# --------------------------------------------------------------------------- budget


@dataclass(frozen=True)
class StagePlan:
    """How much of a stage fits the budget."""

    kept: int
    """Candidates measured besides the fixed ones (the current setting)."""
    rounds: int
    """Repeats of each setting; 0 when not even ``min_repeats`` rounds of one candidate fit."""
    estimated_s: float


def plan_stage(budget_s: float, repeat_s: float, candidates: int, *, fixed: int = 1,
               repeats: int = DEFAULT_REPEATS, min_repeats: int = MIN_REPEATS,
               spent_s: float = 0.0, done_rounds: int = 0) -> StagePlan:
    """The largest stage whose estimated time fits ``budget_s``.

    The estimate is ``spent_s + (rounds - done_rounds) x (kept + fixed) x repeat_s``:
    what is already spent (``done_rounds`` rounds of this stage measured, for example the
    first round that gave ``repeat_s``) and the rounds still to come. More rounds are
    preferred over more candidates (a setting measured twice cannot be told from noise as
    well as one measured three times): rounds from ``repeats`` down to ``min_repeats``, and
    for each the most candidates that fit. The estimate never exceeds the budget; when
    nothing fits, ``kept`` and ``rounds`` are 0.
    """
    if not (math.isfinite(repeat_s) and repeat_s > 0):
        raise ValueError(f"repeat_s must be a positive number of seconds, got {repeat_s!r}")
    if min_repeats < 1 or repeats < min_repeats:
        raise ValueError(f"need 1 <= min_repeats <= repeats, got {min_repeats} and {repeats}")
    if candidates < 0 or fixed < 0 or done_rounds < 0 or spent_s < 0:
        raise ValueError("candidates, fixed, done_rounds and spent_s must be >= 0")
    for rounds in range(repeats, max(min_repeats, done_rounds) - 1, -1):
        for kept in range(candidates, 0, -1):
            cost = spent_s + (rounds - done_rounds) * (kept + fixed) * repeat_s
            if cost <= budget_s:
                return StagePlan(kept, rounds, cost)
    return StagePlan(0, 0, spent_s)


# --------------------------------------------------------------------------- statistics


@dataclass(frozen=True)
class SettingResult:
    """One setting: its per-repeat throughput, or why it was not measured."""

    setting: Mapping[str, Any]
    stage: int = 1
    samples_per_s: tuple[float, ...] = ()
    """Samples per second of each repeat (window wall time), in measuring order."""
    reference: tuple[float, ...] = ()
    """The current setting's samples/s in the same rounds. Used only when there are no ``rounds``
    to pair by (the Welch fallback); empty there: all of the current's repeats."""
    data_wait_share: float | None = None
    """Median over repeats of the data wait's share of the step time."""
    skipped: str | None = None
    """Why it was not measured or not judged (None: measured)."""
    is_current: bool = False
    rounds: tuple[int, ...] = ()
    """The round of each repeat, one per entry of ``samples_per_s``. When both settings of a
    comparison carry rounds, they are compared paired by round, in the rounds they share;
    without them, by Welch (see the module doc)."""


@dataclass(frozen=True)
class Comparison:
    """One candidate against the current setting (throughput ratio > 1: faster)."""

    setting: Mapping[str, Any]
    ratio: float
    ci_low: float
    ci_high: float
    confidence: float
    """Two-sided level of the interval, ``1 - 2 alpha / m``; its lower end is the one-sided bound."""
    p_value: float
    """One-sided p of ``ratio <= 1 + margin`` (compare with ``alpha / m``)."""
    faster: bool
    n: int
    n_current: int
    """Repeats that entered the estimate (of the setting, of the current in the same rounds)."""
    set_aside: int = 0
    """Repeats set aside as outliers (the gate's rule: > 6 robust sds, only from 5 or more repeats);
    the Welch fallback only, a paired comparison sets none aside."""
    rounds: int = 0
    """Rounds the estimate is paired by (blocks holding both settings); 0: Welch, unpaired."""

    @property
    def estimator(self) -> str:
        """Which estimate gave the interval: ``"paired by round, 3 rounds"`` or ``"Welch, unpaired"``."""
        if self.rounds:
            return f"paired by round, {self.rounds} round{'s' if self.rounds != 1 else ''}"
        return "Welch, unpaired"


@dataclass(frozen=True)
class Recommendation:
    kind: str
    """``"recommend"``, ``"none-helps"`` or ``"undecided"`` (too little was measured to judge)."""
    decision: str
    best: Mapping[str, Any] | None = None
    ratio: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    set_line: str = ""
    """``--set ...`` that runs the recommended setting (the user's own overrides kept)."""
    comparisons: tuple[Comparison, ...] = ()
    alpha: float = DEFAULT_ALPHA
    margin: float = DEFAULT_MARGIN

    @property
    def exit_code(self) -> int:
        """0 with an answer (a recommendation or "none of them helps"), 3 when undecided."""
        return 3 if self.kind == UNDECIDED else 0


def _interval(c: Comparison) -> str:
    return change_ci(c.ratio, c.ci_low, c.ci_high)


def _blocks(r: SettingResult) -> list[BlockValue]:
    """``r``'s repeats as block-model values: samples/s, with the round as the block."""
    return [BlockValue(b, v) for b, v in zip(r.rounds, r.samples_per_s)]


def _paired_rounds(a: SettingResult, b: SettingResult) -> list[int]:
    """The rounds holding repeats of both ``a`` and ``b``; empty when either carries no rounds."""
    if not a.rounds or not b.rounds:
        return []
    return blocks_of(_blocks(a), _blocks(b))


def _compare(s: SettingResult, base: SettingResult, m: int, alpha: float, margin: float) -> Comparison:
    """``s`` against ``base`` (the current setting, or the simpler setting ``s`` builds on).

    The ratio is ``s``'s samples/s over ``base``'s (``> 1``: ``s`` is faster). Paired by
    round when both carry rounds (the caller has checked that at least ``MIN_REPEATS``
    rounds hold both); otherwise Welch on log samples/s against ``s.reference`` or, when
    that is empty, all of ``base``'s repeats.
    """
    confidence = 1.0 - 2.0 * alpha / m
    if s.rounds and base.rounds:
        # "head / base" of the block model on samples/s: throughput of s over throughput of base.
        est = block_log_ratio(_blocks(base), _blocks(s), confidence=confidence)
        paired = len(_paired_rounds(s, base))
    else:
        est = log_ratio(list(s.samples_per_s), [list(s.reference or base.samples_per_s)], confidence=confidence,
                        assumed_day_sd_log=0.0, outlier_sd=DEFAULT_OUTLIER_SD)
        paired = 0
    shift = math.log(est.ratio) - math.log1p(margin)
    if est.se_log > 0:
        p = float(special.stdtr(est.df, -shift / est.se_log))
    else:
        p = 0.0 if shift > 0 else 1.0
    return Comparison(dict(s.setting), est.ratio, est.ci_low, est.ci_high, confidence, p,
                      est.ci_low > 1.0 + margin, est.n_current, est.n_baseline, est.excluded, paired)


def _judgeable(s: SettingResult, base: SettingResult) -> bool:
    """Enough of ``s`` and ``base`` to compare: two rounds holding both, or (no rounds) two repeats a side."""
    if s.rounds and base.rounds:
        return len(_paired_rounds(s, base)) >= MIN_REPEATS
    return len(s.samples_per_s) >= MIN_REPEATS and len(s.reference or base.samples_per_s) >= MIN_REPEATS


def _check_rounds(r: SettingResult) -> None:
    if r.rounds and len(r.rounds) != len(r.samples_per_s):
        raise ValueError(f"{describe(r.setting)}: {len(r.rounds)} round(s) for {len(r.samples_per_s)} repeat(s)")


def recommend(results: Sequence[SettingResult], *, alpha: float = DEFAULT_ALPHA, margin: float = DEFAULT_MARGIN,
              overrides: Mapping[str, Any] | None = None) -> Recommendation:
    """Recommend the fastest setting that is faster than the current one beyond the noise.

    ``results`` holds exactly one ``is_current`` entry. Candidates measured in at least two
    rounds that also hold the current setting are compared (results without rounds: at
    least two repeats a side); with m of them, a candidate is faster when the one-sided
    test of ``ratio > 1 + margin`` on log throughput rejects at ``alpha / m``, i.e. the
    lower end of its ``1 - 2 alpha / m`` interval is above ``1 + margin``. The estimate is
    paired by round (the block model, each round a block; see the module doc), or Welch
    for results that carry no rounds. Bonferroni bounds the chance that any setting called
    faster is not, whichever of them is then recommended.

    Which of those is recommended: among the ones that change the fewest settings, the
    one with the highest estimate (P). A faster-looking setting that changes more (a
    stage-2 variant of P, say ``prefetch_factor=4`` on top of ``num_workers=2``) replaces P
    only if it is faster than P itself beyond the noise, by the same test at ``alpha / m``,
    paired by the rounds both were measured in (``SettingResult.rounds``); an estimate that
    is higher by noise does not add a setting to the recommendation.
    """
    if not (0 < alpha < 0.5):
        raise ValueError(f"alpha must be between 0 and 0.5, got {alpha!r}")
    if not (math.isfinite(margin) and margin >= 0):
        raise ValueError(f"margin must be a number >= 0, got {margin!r}")
    currents = [r for r in results if r.is_current]
    if len(currents) != 1:
        raise ValueError(f"expected exactly one current setting, got {len(currents)}")
    current = currents[0]
    common = dict(alpha=alpha, margin=margin)
    if current.skipped or len(current.samples_per_s) < MIN_REPEATS:
        why = current.skipped or f"{len(current.samples_per_s)} repeat(s)"
        return Recommendation(UNDECIDED, f"cannot judge: the current setting was not measured twice ({why})", **common)
    for r in results:
        _check_rounds(r)
    judged = [r for r in results if not (r.is_current or r.skipped) and _judgeable(r, current)]
    if not judged:
        return Recommendation(
            UNDECIDED, "cannot judge: no other setting was measured at least twice beside the current one "
                       "(a larger --budget allows more repeats)", **common)
    m = len(judged)
    comparisons = tuple(_compare(r, current, m, alpha, margin) for r in judged)
    level = comparisons[0].confidence
    rule = (f"{level * 100:.1f}% intervals (Bonferroni over {m} setting(s) compared); a setting is faster beyond "
            f"the noise when the lower end is above +{margin * 100:g}% (one-sided test at {alpha:g} family-wise)")
    top = max(comparisons, key=lambda c: c.ratio)
    cur = current.setting
    winners = [(c, r) for c, r in zip(comparisons, judged) if c.faster]
    if not winners:
        if top.ratio > 1.0:
            best_text = f"the best estimate, {describe(top.setting, cur)}, is {_interval(top)} ({top.estimator})"
        else:
            best_text = ("no setting's estimate beats the current one "
                         f"(best: {describe(top.setting, cur)} {_interval(top)}, {top.estimator})")
        return Recommendation(
            NONE_HELPS,
            f"none of them helps: no setting is faster than the current one ({describe(cur)}) by more than "
            f"{margin * 100:g}% beyond the noise; {best_text}. {rule}.",
            comparisons=comparisons, **common)

    def changes(c: Comparison) -> int:
        return len(_changed(c.setting, cur))

    fewest = min(changes(c) for c, _ in winners)
    best, best_result = max(((c, r) for c, r in winners if changes(c) == fewest), key=lambda cr: cr[0].ratio)
    held_back: list[str] = []
    for c, r in sorted(winners, key=lambda cr: -cr[0].ratio):
        if c.ratio <= best.ratio or changes(c) <= changes(best):
            continue
        if len(_paired_rounds(r, best_result)) < MIN_REPEATS:
            held_back.append(f"{describe(c.setting, cur)} ({_interval(c)}) was not measured beside "
                             f"{describe(best.setting, cur)} often enough to tell them apart")
            continue
        direct = _compare(r, best_result, m, alpha, margin)
        if direct.faster:
            best, best_result = c, r
            held_back = [f"it is also faster than the simpler change it builds on, by {_interval(direct)} "
                         f"in the {direct.rounds} rounds both were measured in, paired by round"]
            break
        held_back.append(f"{describe(c.setting, cur)} has a higher estimate ({_interval(c)}) but is not faster "
                         f"than {describe(best.setting, cur)} beyond the noise ({_interval(direct)} "
                         f"in the {direct.rounds} rounds both were measured in, paired by round)")
    line = set_line(best.setting, cur, overrides)
    text = (f"use {describe(best.setting, cur)}: {best.ratio:.2f}x the throughput of the current setting "
            f"({describe(cur)}), {_interval(best)} ({best.estimator})")
    if held_back:
        text += "; " + "; ".join(held_back)
    if top is not best and not any(c is top for c, _ in winners):
        text += (f"; {describe(top.setting, cur)} has a higher estimate ({_interval(top)}) but is not "
                 "faster than the current one beyond the noise")
    others = [c for c, _ in winners if c is not best]
    if others:
        text += "; also faster beyond the noise than the current one: " + ", ".join(
            describe(c.setting, cur) for c in others)
    if best.set_aside:
        text += f" ({best.set_aside} outlier repeat(s) set aside in this comparison)"
    return Recommendation(RECOMMEND, f"{text}. {rule}.", best=dict(best.setting), ratio=best.ratio,
                          ci_low=best.ci_low, ci_high=best.ci_high, set_line=line,
                          comparisons=comparisons, **common)


def _geo_interval(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """Geometric mean and its t interval from per-repeat values (log scale)."""
    logs = [math.log(v) for v in values]
    mean = sum(logs) / len(logs)
    if len(logs) < 2:
        return math.exp(mean), math.nan, math.nan
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1))
    half = float(special.stdtrit(len(logs) - 1, 0.5 + confidence / 2)) * sd / math.sqrt(len(logs))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def _throughput(values: Sequence[float]) -> str:
    if not values:
        return "—"
    mean, low, high = _geo_interval(values)
    if math.isnan(low):
        return f"{mean:.1f}"
    return f"{mean:.1f} [{low:.1f}, {high:.1f}]"


def render_tune_table(results: Sequence[SettingResult], recommendation: Recommendation, *,
                      title: str = "", notes: Sequence[str] = ()) -> str:
    """The advisor's report: per setting its throughput (geometric mean of the repeats' samples/s
    with a 95% interval), the data wait's share of the step, the ratio to the current setting
    with its interval and the estimator that gave it ("paired by round, 3 rounds"); then the
    settings not measured and why, the decision and the ``--set`` line."""
    current = next((r.setting for r in results if r.is_current), None)
    by_key = {_raw(c.setting): c for c in recommendation.comparisons}
    best_key = _raw(recommendation.best) if recommendation.best is not None else None
    level = recommendation.comparisons[0].confidence if recommendation.comparisons else None
    vs_header = f"vs current [{level * 100:.1f}% CI]" if level is not None else "vs current"
    rows = []
    measured = [r for r in results if r.samples_per_s and (r.is_current or not r.skipped)]
    measured.sort(key=lambda r: (not r.is_current, r.stage, _effective(r.setting)[0]))
    for r in measured:
        c = by_key.get(_raw(r.setting))
        if r.is_current:
            label, vs, how, flag = f"current: {describe(r.setting)}", "—", "—", ""
        else:
            label = describe(r.setting, current)
            vs = _interval(c) if c is not None else "not judged"
            how = c.estimator if c is not None else ""
            flags = []
            if c is not None and c.faster:
                flags.append("faster (recommended)" if _raw(r.setting) == best_key else "faster")
            if c is not None and c.set_aside:
                flags.append(f"{c.set_aside} outlier repeat(s) set aside")
            flag = "; ".join(flags)
        share = f"{r.data_wait_share * 100:.1f}%" if r.data_wait_share is not None else "—"
        rows.append([label, str(r.stage), str(len(r.samples_per_s)), _throughput(r.samples_per_s), share, vs, how,
                     flag])
    lines = [title] if title else []
    if rows:
        lines.append(table(["setting", "stage", "repeats", "samples/s [95% CI]", "data wait", vs_header, "estimator",
                            ""], rows, "lrrrrrll"))
    skipped = [r for r in results if r.skipped and not r.is_current]
    if skipped:
        lines += ["", "not measured or not judged:"]
        lines += [f"  {describe(r.setting, current) if current else describe(r.setting)}: {r.skipped}" for r in skipped]
    lines += ["", f"decision: {recommendation.decision}"]
    if recommendation.kind == RECOMMEND:
        if recommendation.set_line:
            lines.append(f"to use it: {recommendation.set_line}")
        if recommendation.best is not None:
            best = recommendation.best
            kwargs = ", ".join(f"{k}={best[k]!r}" for k in LOADER_KEYS
                               if k in ("num_workers", "pin_memory")
                               or (int(best["num_workers"]) > 0 and best[k] is not None))
            lines.append(f"in your own training code: DataLoader(..., {kwargs})")
    lines += [f"note: {n}" for n in notes]
    return "\n".join(lines).rstrip() + "\n"


# --------------------------------------------------------------------------- orchestration


@dataclass(frozen=True)
class Sample:
    """One measured repeat of one setting."""

    samples_per_s: float
    seconds: float
    """Wall time of the repeat, process start-up included: what the budget is spent on."""
    data_wait_share: float | None = None
    loader_restarts: int = 0
    loader_settings: Mapping[str, Any] = field(default_factory=dict)
    """The settings read back from the DataLoader the builder made."""


@dataclass(frozen=True)
class Failure:
    """A repeat that could not be measured."""

    message: str
    seconds: float = 0.0


MeasureOne = Callable[[Setting, int, int], "Sample | Failure"]
"""``measure_one(setting, round, rounds)``: one repeat of the workload with ``setting``; ``round``
of ``rounds`` is its place in the stage (for progress; round 1 shows the most rounds planned)."""


@dataclass(frozen=True)
class TuneResult:
    workload: str
    device: str
    cores: int
    current: Mapping[str, Any]
    results: tuple[SettingResult, ...]
    recommendation: Recommendation
    budget_s: float
    spent_s: float
    """Sum of the repeats' wall times."""
    repeats: int
    """Repeats measured in all."""
    notes: tuple[str, ...] = ()
    title: str = ""

    def render(self) -> str:
        return render_tune_table(self.results, self.recommendation, title=self.title, notes=self.notes)

    @property
    def exit_code(self) -> int:
        return self.recommendation.exit_code


def _mismatch(asked: Mapping[str, Any], ran: Mapping[str, Any]) -> str | None:
    """Which asked-for loader setting the built DataLoader does not have (keys it reports only)."""
    keys = ["num_workers", "pin_memory"]
    if int(asked["num_workers"]) > 0:
        keys += ["prefetch_factor", "persistent_workers"]
    wanted = {"prefetch_factor": asked["prefetch_factor"] if asked["prefetch_factor"] is not None else DEFAULT_PREFETCH}
    diffs = []
    for key in keys:
        if key not in ran:
            continue
        want = wanted.get(key, asked[key])
        if ran[key] != want:
            diffs.append(f"{key}={_text(want)} asked, {_text(ran[key])} ran")
    return "; ".join(diffs) or None


def _raw(setting: Mapping[str, Any]) -> tuple[Any, ...]:
    return tuple(setting[k] for k in LOADER_KEYS)


class _Tuning:
    """The two-stage, budgeted, alternating-order measurement behind :func:`run_tuning`.

    Settings are kept by their values (``_raw``); two settings that build the same
    DataLoader (``_effective``) are measured once. Rounds are numbered across both stages
    (stage 2 carries on from the last round of stage 1); each repeat records its round, the
    block that :func:`recommend` pairs by.
    """

    def __init__(self, params: Params, device: str, cores: int, measure_one: MeasureOne, budget_s: float,
                 repeats: int, min_repeats: int) -> None:
        self.params, self.device, self.cores = params, device, cores
        self.measure_one, self.budget_s = measure_one, budget_s
        self.repeats, self.min_repeats = repeats, min_repeats
        self.current = current_setting(params)
        self.cur = _raw(self.current)
        self.settings: dict[tuple[Any, ...], Setting] = {}
        self.stage_of: dict[tuple[Any, ...], int] = {}
        self.samples: dict[tuple[Any, ...], list[Sample]] = {}
        self.rounds_of: dict[tuple[Any, ...], list[int]] = {}
        self.current_by_round: dict[int, float] = {}
        self.skipped: dict[tuple[Any, ...], str] = {}
        self.spent = 0.0
        self.round = 0
        self.stage1_rounds = repeats
        self.notes: list[str] = []

    def _register(self, setting: Setting, stage: int) -> bool:
        """Add ``setting``; False when one that builds the same DataLoader is already there."""
        if any(_effective(s) == _effective(setting) for s in self.settings.values()):
            return False
        self.settings[_raw(setting)] = setting
        self.stage_of[_raw(setting)] = stage
        return True

    # one repeat ------------------------------------------------------------
    def _one(self, setting: Setting, shown: int, rounds: int) -> bool:
        """One repeat of ``setting`` in the current round (``shown`` of ``rounds`` in its stage, for progress)."""
        key = _raw(setting)
        outcome = self.measure_one(setting, shown, rounds)
        self.spent += outcome.seconds
        if isinstance(outcome, Failure):
            if key == self.cur:
                raise WorkloadError(f"the current setting ({describe(self.current)}) could not be measured: "
                                    f"{outcome.message}")
            self.skipped[key] = f"failed when measured: {outcome.message}"
            return False
        wrong = _mismatch(setting, outcome.loader_settings)
        if wrong and key != self.cur:
            self.skipped[key] = (f"the workload's DataLoader did not take this setting ({wrong}): its builder "
                                 "sets the loader itself, so tune it there")
            return False
        if wrong:
            self.notes.append(f"the current parameters ask for {describe(self.current)} but the DataLoader "
                              f"ran with {wrong}")
        self.samples.setdefault(key, []).append(outcome)
        self.rounds_of.setdefault(key, []).append(self.round)
        if key == self.cur:
            self.current_by_round[self.round] = outcome.samples_per_s
        return True

    def _alive(self, settings: Sequence[Setting]) -> list[Setting]:
        return [s for s in settings if _raw(s) not in self.skipped]

    def _repeat_s(self, setting: Setting) -> float:
        own = [x.seconds for x in self.samples.get(_raw(setting), [])]
        return median(own) if own else self._typical_s()

    def _typical_s(self) -> float:
        every = [x.seconds for xs in self.samples.values() for x in xs]
        return max(median(every), 1e-9) if every else 1e-9

    def _rounds(self, settings: Sequence[Setting], first: int, last: int) -> None:
        """Rounds ``first..last`` (1-based within the stage) over ``settings``, alternating order.

        A round is not started when it would end more than 20% past the budget (the
        repeats ran slower than the first round said); the notes say so.
        """
        for r in range(first, last + 1):
            alive = self._alive(settings)
            if len(alive) < 2:
                return
            estimate = sum(self._repeat_s(s) for s in alive)
            if self.spent + estimate > self.budget_s * 1.2:
                self.notes.append(f"stopped before round {r} of stage {self.stage_of[_raw(alive[-1])]}: the repeats "
                                  f"ran slower than estimated ({self.spent:.0f} s of {self.budget_s:.0f} s spent)")
                return
            self.round += 1
            order = alive if self.round % 2 == 1 else list(reversed(alive))
            for s in order:
                self._one(s, r, last)

    # stages ----------------------------------------------------------------
    def stage1(self) -> list[Setting]:
        candidates = [s for s in candidate_settings(self.params, self.device, self.cores) if self._register(s, 1)]
        # Round 1: each setting once, the current first. The second setting is started if
        # min_repeats rounds of the two fit the budget, each later one only if the full
        # number of rounds of everything so far still does (repeats before breadth).
        self.round = 1
        measured: list[Setting] = []
        for i, s in enumerate(candidates):
            if i > 0:
                rounds = self.min_repeats if i == 1 else self.repeats
                need = self.spent + self._typical_s() + (rounds - 1) * (i + 1) * self._typical_s()
                if need > self.budget_s:
                    self.skipped[_raw(s)] = (f"not measured: over the budget ({self.budget_s:.0f} s; "
                                             f"a repeat takes about {self._typical_s():.0f} s)")
                    continue
            if self._one(s, 1, self.repeats):
                measured.append(s)
        others = [s for s in measured if _raw(s) != self.cur]
        # the mean repeat time of the round: rounds x settings x mean is the round's sum
        repeat_s = sum(self._repeat_s(s) for s in measured) / len(measured)
        plan = plan_stage(self.budget_s, repeat_s, len(others), fixed=1, repeats=self.repeats,
                          min_repeats=self.min_repeats, spent_s=self.spent, done_rounds=1)
        if plan.rounds == 0:
            for s in others:
                self.skipped[_raw(s)] = (f"measured once only: two rounds do not fit the budget "
                                         f"({self.budget_s:.0f} s; a repeat takes about {self._typical_s():.0f} s)")
            self.notes.append("the budget allows one round only; nothing can be judged")
            return []
        kept = [self.current, *others[:plan.kept]]
        for s in others[plan.kept:]:
            self.skipped[_raw(s)] = (f"measured once only: the budget holds {plan.kept + 1} settings x "
                                     f"{plan.rounds} repeats (about {self._typical_s():.0f} s each)")
        self.stage1_rounds = plan.rounds
        self._rounds(kept, 2, plan.rounds)
        return kept

    def stage2(self, kept1: Sequence[Setting]) -> None:
        measured = [s for s in self._alive(kept1) if len(self.samples.get(_raw(s), [])) >= self.min_repeats]
        if not measured:
            return
        # the direction to search in: the highest median throughput (a median, so one slow
        # repeat of three does not send stage 2 around the wrong setting)
        best = max(measured, key=lambda s: median(x.samples_per_s for x in self.samples[_raw(s)]))
        restarted = any(x.loader_restarts > 0 for xs in self.samples.values() for x in xs)
        variants = []
        for s in candidate_settings(self.params, self.device, self.cores, around=best):
            if _raw(s) in self.settings:
                continue
            reason = skip_reason(s, best, self.device, loader_restarted=restarted)
            if reason:
                self.settings[_raw(s)] = s
                self.stage_of[_raw(s)] = 2
                self.skipped[_raw(s)] = reason
            elif self._register(s, 2):
                variants.append(s)
        if not variants:
            return
        # The fastest of stage 1 is measured again beside its variants: it gets more repeats,
        # and the variants meet it in the same rounds.
        fixed = [self.current] if _raw(best) == self.cur else [self.current, best]
        remaining = self.budget_s - self.spent
        # a variant is expected to take as long as the setting it varies; the current its own time
        repeat_s = (self._repeat_s(self.current) + self._repeat_s(best)) / 2
        plan = plan_stage(remaining, repeat_s, len(variants), fixed=len(fixed),
                          repeats=self.stage1_rounds, min_repeats=self.min_repeats)
        if plan.rounds == 0 and len(fixed) == 2:
            fixed = [self.current]
            plan = plan_stage(remaining, repeat_s, len(variants), fixed=1,
                              repeats=self.stage1_rounds, min_repeats=self.min_repeats)
        for s in variants[plan.kept:]:
            self.skipped[_raw(s)] = (f"not measured: over the budget ({max(remaining, 0):.0f} s left after "
                                     f"stage 1, a repeat takes about {repeat_s:.0f} s)")
        if plan.rounds:
            self._rounds([*fixed, *variants[:plan.kept]], 1, plan.rounds)

    # results ---------------------------------------------------------------
    def results(self) -> list[SettingResult]:
        out = []
        for key, s in self.settings.items():
            samples = self.samples.get(key, [])
            shares = [x.data_wait_share for x in samples if x.data_wait_share is not None]
            reference: tuple[float, ...] = ()
            if key != self.cur:
                reference = tuple(self.current_by_round[r] for r in self.rounds_of.get(key, [])
                                  if r in self.current_by_round)
            out.append(SettingResult(
                setting=s,
                stage=self.stage_of[key],
                samples_per_s=tuple(x.samples_per_s for x in samples) if key not in self.skipped else (),
                reference=reference,
                data_wait_share=median(shares) if shares else None,
                skipped=self.skipped.get(key),
                is_current=key == self.cur,
                rounds=tuple(self.rounds_of.get(key, [])) if key not in self.skipped else (),
            ))
        return out


def run_tuning(params: Params, device: str, cores: int, measure_one: MeasureOne, *, budget_s: float,
               repeats: int = DEFAULT_REPEATS, min_repeats: int = MIN_REPEATS, alpha: float = DEFAULT_ALPHA,
               margin: float = DEFAULT_MARGIN, overrides: Mapping[str, Any] | None = None,
               ) -> tuple[list[SettingResult], Recommendation, list[str], float, int]:
    """The two stages with any ``measure_one``; returns (results, recommendation, notes, seconds spent, repeats).

    Pure apart from what ``measure_one`` does: the budget is spent in the seconds each
    :class:`Sample` reports, so it can be driven with constructed measurements.
    """
    if not (budget_s > 0):
        raise ValueError(f"the budget must be positive, got {budget_s!r}")
    tuning = _Tuning(params, device, cores, measure_one, budget_s, repeats, min_repeats)
    kept = tuning.stage1()
    tuning.stage2(kept)
    results = tuning.results()
    notes = list(dict.fromkeys(tuning.notes))
    if device != "cuda" and not any("pin_memory" in (r.skipped or "") for r in results):
        notes.append("pin_memory is not tried on the CPU: it only speeds up copies to a CUDA device")
    notes.append("throughput is samples per second of the measured window, one fresh process per repeat; each "
                 "setting is compared with the current one measured in the same rounds (alternating order), "
                 "paired by round: a slowdown of the machine shared by a round cancels")
    count = sum(len(v) for v in tuning.samples.values())
    return results, recommend(results, alpha=alpha, margin=margin, overrides=overrides), notes, tuning.spent, count


def tune_loader(workload: Workload, params: Params, device: str, *, budget_s: float, cache_dir: Path,
                progress: Callable[[Any], None] = lambda p: None, data_root: Path | None = None,
                overrides: Mapping[str, Any] | None = None, cores: int | None = None,
                repeats: int = DEFAULT_REPEATS, alpha: float = DEFAULT_ALPHA, margin: float = DEFAULT_MARGIN,
                timeout_s: float = 3600.0) -> TuneResult:
    """Measure ``workload`` under DataLoader settings around ``params`` and recommend one.

    ``params`` are the resolved parameters (profile and the user's ``--set`` applied);
    ``overrides`` the user's ``--set`` values, kept in the recommended ``--set`` line.
    ``device`` is ``"cpu"`` or ``"cuda"`` (already resolved). Each repeat is one call of
    :func:`perfgate.measure.runner.measure` with one job and one repeat (a fresh process,
    telemetry off, no result file), so settings of one workload never share a name;
    ``progress`` receives its :class:`~perfgate.measure.runner.Progress` events with the
    setting in the workload field and the round as the repeat. Raises
    :class:`~perfgate.model.errors.WorkloadError` when the current setting cannot be measured.
    """
    from perfgate.measure.runner import Job, Progress, measure
    from perfgate.analysis.summary import summarise_repeat

    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    current = current_setting(params)
    base_overrides = dict(overrides or {})

    def measure_one(setting: Setting, round_: int, rounds: int) -> Sample | Failure:
        changed = {k: setting[k] for k in _changed(setting, current)}
        job_params = apply_overrides(params, changed, workload=workload.name)
        label = f"{workload.name} {describe(setting, current)}"

        def relay(event: Any) -> None:
            progress(Progress(label, round_, rounds, event.status, event.seconds, event.step_median_ms, event.message))

        began = time.perf_counter()
        try:
            outcome = measure([Job(workload, job_params, {**base_overrides, **changed}, data_root)], device=device,
                              repeats=1, cache_dir=cache_dir, out_dir=None, progress=relay, timeout_s=timeout_s,
                              telemetry=False)
        except PerfgateError as exc:
            return Failure(exc.message, time.perf_counter() - began)
        seconds = time.perf_counter() - began
        if workload.name in outcome.errors:
            return Failure(outcome.errors[workload.name].message, seconds)
        repeat = outcome.results[workload.name].repeats[0]
        share = summarise_repeat(repeat).shares["data_wait"]
        return Sample(repeat.samples_per_s, seconds, share, repeat.loader_restarts, dict(repeat.loader_settings))

    results, rec, notes, spent, count = run_tuning(
        params, device, cores, measure_one, budget_s=budget_s, repeats=repeats, alpha=alpha, margin=margin,
        overrides=base_overrides)
    title = (f"tune-loader {workload.name} v{workload.version} on {device} ({cores} cores): {count} repeats "
             f"x {params.steps} steps, batch {params.batch_size}, alternating order; "
             f"{spent / 60:.1f} of {budget_s / 60:.1f} min budget")
    return TuneResult(workload.name, device, cores, current, tuple(results), rec, budget_s, spent, count,
                      tuple(notes), title)
