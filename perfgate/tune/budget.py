"""How many settings and rounds of ``perfgate tune-loader`` fit the time budget.

The first round gives each setting's repeat time; the number of settings and of rounds is
then chosen so that their estimated time (the sum of the repeat times, process start-up
included) stays within the budget, preferring more repeats over more settings, and
stage-1 settings over stage-2 ones (:func:`plan_stage`; candidates are listed most
important first, so the ones dropped are the last).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

DEFAULT_REPEATS = 3
"""Rounds (one repeat of each setting a round) of stage 1 when the budget holds them, ``--repeats``;
stage 2 is planned with as many as stage 1 got."""
MIN_REPEATS = 2
"""Two rounds holding both settings (paired), or two repeats per side (Welch), are needed to see
run-to-run variation; fewer cannot be judged."""


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
