"""``perfgate tune-loader``'s decision: which setting, if any, is faster than the current one beyond the noise.

For each candidate S (:func:`recommend`), the ratio of its throughput to the
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
an odd number of rounds, leaving a little of it in the estimate). The table
(:mod:`perfgate.tune.table`) names the estimator of each interval ("paired by round, J rounds").

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
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scipy import special

from perfgate.analysis.blocks import BlockValue, block_log_ratio, blocks_of
from perfgate.analysis.stats import DEFAULT_OUTLIER_SD, log_ratio
from perfgate.text.units import change_ci
from perfgate.tune.budget import MIN_REPEATS
from perfgate.tune.settings import changed_keys, describe, set_line

DEFAULT_ALPHA = 0.05
"""Family-wise one-sided level: the chance that any setting called faster is not."""

DEFAULT_MARGIN = 0.02
"""A setting must be faster than the current one by more than this (2%) beyond the noise."""


class Outcome(enum.StrEnum):
    """What :func:`recommend` answers; compares equal to (and prints as) its string."""

    RECOMMEND = "recommend"
    """A setting is faster than the current one beyond the noise: use it."""
    NONE_HELPS = "none-helps"
    """Settings were compared and none is faster beyond the noise."""
    UNDECIDED = "undecided"
    """Too little was measured to judge."""


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
    kind: Outcome
    """``"recommend"``, ``"none-helps"`` or ``"undecided"`` (too little was measured to judge): an
    :class:`Outcome`, equal to those strings."""
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
        return 3 if self.kind == Outcome.UNDECIDED else 0


def interval_text(c: Comparison) -> str:
    """``+6.1% [+3.2, +9.0]``: the comparison's ratio and interval as percent changes."""
    return change_ci(c.ratio, c.ci_low, c.ci_high)


def _blocks(r: SettingResult) -> list[BlockValue]:
    """``r``'s repeats as block-model values: samples/s, with the round as the block."""
    return [BlockValue(b, v) for b, v in zip(r.rounds, r.samples_per_s, strict=True)]


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
    if current.skipped or len(current.samples_per_s) < MIN_REPEATS:
        why = current.skipped or f"{len(current.samples_per_s)} repeat(s)"
        return Recommendation(Outcome.UNDECIDED, f"cannot judge: the current setting was not measured twice ({why})",
                              alpha=alpha, margin=margin)
    for r in results:
        _check_rounds(r)
    judged = [r for r in results if not (r.is_current or r.skipped) and _judgeable(r, current)]
    if not judged:
        return Recommendation(
            Outcome.UNDECIDED, "cannot judge: no other setting was measured at least twice beside the current one "
                       "(a larger --budget allows more repeats)", alpha=alpha, margin=margin)
    m = len(judged)
    comparisons = tuple(_compare(r, current, m, alpha, margin) for r in judged)
    level = comparisons[0].confidence
    rule = (f"{level * 100:.1f}% intervals (Bonferroni over {m} setting(s) compared); a setting is faster beyond "
            f"the noise when the lower end is above +{margin * 100:g}% (one-sided test at {alpha:g} family-wise)")
    top = max(comparisons, key=lambda c: c.ratio)
    cur = current.setting
    winners = [(c, r) for c, r in zip(comparisons, judged, strict=True) if c.faster]
    if not winners:
        if top.ratio > 1.0:
            best_text = f"the best estimate, {describe(top.setting, cur)}, is {interval_text(top)} ({top.estimator})"
        else:
            best_text = ("no setting's estimate beats the current one "
                         f"(best: {describe(top.setting, cur)} {interval_text(top)}, {top.estimator})")
        return Recommendation(
            Outcome.NONE_HELPS,
            f"none of them helps: no setting is faster than the current one ({describe(cur)}) by more than "
            f"{margin * 100:g}% beyond the noise; {best_text}. {rule}.",
            comparisons=comparisons, alpha=alpha, margin=margin)

    def changes(c: Comparison) -> int:
        return len(changed_keys(c.setting, cur))

    fewest = min(changes(c) for c, _ in winners)
    best, best_result = max(((c, r) for c, r in winners if changes(c) == fewest), key=lambda cr: cr[0].ratio)
    held_back: list[str] = []
    for c, r in sorted(winners, key=lambda cr: -cr[0].ratio):
        if c.ratio <= best.ratio or changes(c) <= changes(best):
            continue
        if len(_paired_rounds(r, best_result)) < MIN_REPEATS:
            held_back.append(f"{describe(c.setting, cur)} ({interval_text(c)}) was not measured beside "
                             f"{describe(best.setting, cur)} often enough to tell them apart")
            continue
        direct = _compare(r, best_result, m, alpha, margin)
        if direct.faster:
            best, best_result = c, r
            held_back = [f"it is also faster than the simpler change it builds on, by {interval_text(direct)} "
                         f"in the {direct.rounds} rounds both were measured in, paired by round"]
            break
        held_back.append(f"{describe(c.setting, cur)} has a higher estimate ({interval_text(c)}) but is not faster "
                         f"than {describe(best.setting, cur)} beyond the noise ({interval_text(direct)} "
                         f"in the {direct.rounds} rounds both were measured in, paired by round)")
    line = set_line(best.setting, cur, overrides)
    text = (f"use {describe(best.setting, cur)}: {best.ratio:.2f}x the throughput of the current setting "
            f"({describe(cur)}), {interval_text(best)} ({best.estimator})")
    if held_back:
        text += "; " + "; ".join(held_back)
    if top is not best and not any(c is top for c, _ in winners):
        text += (f"; {describe(top.setting, cur)} has a higher estimate ({interval_text(top)}) but is not "
                 "faster than the current one beyond the noise")
    others = [c for c, _ in winners if c is not best]
    if others:
        text += "; also faster beyond the noise than the current one: " + ", ".join(
            describe(c.setting, cur) for c in others)
    if best.set_aside:
        text += f" ({best.set_aside} outlier repeat(s) set aside in this comparison)"
    return Recommendation(Outcome.RECOMMEND, f"{text}. {rule}.", best=dict(best.setting), ratio=best.ratio,
                          ci_low=best.ci_low, ci_high=best.ci_high, set_line=line,
                          comparisons=comparisons, alpha=alpha, margin=margin)
