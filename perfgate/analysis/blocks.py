"""The paired design's statistics: base and head measured in ABBA blocks in one job.

Each block runs four fresh processes in the order base, head, head, base. Linear drift
of the machine inside a block then cancels from the head-minus-base contrast (the mean
position of both arms is the same), and whatever differs between blocks (a slower
quarter of an hour) is removed by the block term. Day-to-day drift never enters: both
arms are measured on the same day, on the same runner, minutes apart.

The estimate is the randomised-block analysis, an additive model on the log of each
repeat's summary::

    log y = mu + arm + block + e

fitted by least squares. With J complete blocks of four it has 4J - (J + 1) = 3J - 1
residual degrees of freedom, and the arm effect is the mean log difference with
standard error sqrt(MSE / J). The mean square is unbiased even when one arm is noisier
than the other, but then its degrees of freedom are fewer: Satterthwaite's over its three
parts (each arm within blocks, the arm-by-block interaction), 3J - 1 when the arms are
alike, towards 2J - 1 when one dominates. When an F test says the arms' within-block
variances differ (two-sided p < 0.05), the estimate is the one-sample t on block
contrasts instead: adjacent processes are correlated, so a noisy arm's within-block spread
understates its noise, while the contrasts of independent blocks stay exact. Blocks that lost a repeat stay in the fit (least squares
handles the imbalance); a block holding only one arm tells nothing about the arm
effect and is left out.

Two alternatives are kept for the simulation that chose between them
(``benchmarks/simulate_gate.py``): the one-sample t on block contrasts (the same
estimate, only J - 1 degrees of freedom, but exact when errors inside a block are
correlated in any way) and Welch ignoring the blocks (not protected against drift).

No torch, no files, no printing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import special

from perfgate.analysis.stats import LogRatio, t_estimate
from perfgate.analysis.stats.logratio import _exp

__all__ = ["ABBA", "BlockValue", "block_contrast_t", "block_log_ratio", "blocks_of"]

ABBA = ("base", "head", "head", "base")
"""The order of the four processes of one block."""


@dataclass(frozen=True)
class BlockValue:
    """One repeat's summary (milliseconds, > 0) and the block it was measured in."""

    block: int
    value: float


def _check(values: Sequence[BlockValue], what: str) -> tuple[np.ndarray, np.ndarray]:
    if len(values) == 0:
        raise ValueError(f"{what}: no repeats")
    blocks = np.array([v.block for v in values], dtype=int)
    raw = np.array([v.value for v in values], dtype=float)
    if not np.all(np.isfinite(raw)) or np.any(raw <= 0):
        raise ValueError(f"{what}: every per-repeat summary must be finite and > 0")
    return blocks, np.log(raw)


def blocks_of(base: Sequence[BlockValue], head: Sequence[BlockValue]) -> list[int]:
    """The blocks that hold both arms, in order: the ones that inform the arm effect."""
    return sorted({v.block for v in base} & {v.block for v in head})


def block_log_ratio(base: Sequence[BlockValue], head: Sequence[BlockValue], *,
                    confidence: float = 0.95) -> LogRatio:
    """Head / base as a ratio from the additive block model on logs (see the module doc).

    Needs at least two blocks holding both arms and at least one residual degree of
    freedom; fewer raise ``ValueError`` (the run is too short to be judged).
    """
    if not (0.0 < confidence < 1.0):
        raise ValueError(f"confidence must be between 0 and 1 (exclusive), got {confidence!r}")
    b_blocks, b_log = _check(base, "base")
    h_blocks, h_log = _check(head, "head")
    kept = blocks_of(base, head)
    if len(kept) < 2:
        raise ValueError(f"{len(kept)} block(s) hold both base and head repeats; at least 2 are needed")
    keep_b, keep_h = np.isin(b_blocks, kept), np.isin(h_blocks, kept)
    y = np.concatenate([b_log[keep_b], h_log[keep_h]])
    arm = np.concatenate([np.zeros(int(keep_b.sum())), np.ones(int(keep_h.sum()))])
    block = np.concatenate([b_blocks[keep_b], h_blocks[keep_h]])
    index = {b: i for i, b in enumerate(kept)}
    # Columns: the arm, then one indicator per block (the block indicators span the intercept).
    x = np.zeros((y.size, 1 + len(kept)))
    x[:, 0] = arm
    x[np.arange(y.size), 1 + np.array([index[b] for b in block])] = 1.0
    coef, _, rank, _ = np.linalg.lstsq(x, y, rcond=None)
    df_resid = float(y.size - rank)
    if df_resid < 1:
        raise ValueError("no residual degrees of freedom: each block needs more than one repeat per arm "
                         "or more blocks")
    resid = y - x @ coef
    sse = float(resid @ resid)
    mse = sse / df_resid
    df = _satterthwaite_df(y, arm, block, sse, df_resid)
    if _arms_differ_in_noise(y, arm, block):
        # One arm much noisier: the within-arm parts (adjacent, correlated processes in ABBA
        # order) understate it. The contrasts of independent blocks stay exact: use them.
        return block_contrast_t(base, head, confidence=confidence)
    xtx_inv = np.linalg.pinv(x.T @ x)
    diff = float(coef[0])
    se = math.sqrt(max(0.0, mse * float(xtx_inv[0, 0])))
    # Block-to-block sd of log (the drift the design removes), from the block means.
    block_means = coef[1:]
    between = float(np.std(block_means, ddof=1)) if len(kept) > 1 else 0.0
    return t_estimate(
        diff, se, df, confidence,
        n_current=int(keep_h.sum()),
        n_baseline=int(keep_b.sum()),
        recordings=1,
        within_sd_log=math.sqrt(mse),
        between_sd_log=between,
        current_sd_log=float(np.std(h_log[keep_h], ddof=1)) if keep_h.sum() > 1 else math.nan,
        baseline_sd_log=float(np.std(b_log[keep_b], ddof=1)) if keep_b.sum() > 1 else math.nan,
    )


def _satterthwaite_df(y: np.ndarray, arm: np.ndarray, block: np.ndarray, sse: float, df_resid: float) -> float:
    """Degrees of freedom of the residual mean square when the two arms may differ in noise.

    The residual sum of squares is the sum of three parts: the spread of each arm within
    its blocks (scale sigma_base^2 and sigma_head^2, one df per repeat beyond the first
    in its cell) and the arm-by-block interaction (the rest). Each part is unbiased for
    the arm effect's variance in its own way, so the mean square stays unbiased whatever
    the two arms' noise; but when one arm is much noisier its parts are not alike, and
    3J - 1 df would overstate what the estimate knows (a head 10x noisier than its base
    rejected 1.4% of A/A tests at a nominal 0.5%). Satterthwaite's df over the three parts
    equals 3J - 1 when the arms are equally noisy and falls towards 2J - 1 when one
    dominates.
    """
    parts = [_within(y, arm, block, 0.0), _within(y, arm, block, 1.0)]
    within_ss = sum(ss for ss, _ in parts)
    within_df = sum(df for _, df in parts)
    parts.append((max(0.0, sse - within_ss), df_resid - within_df))
    denom = sum(ss * ss / df for ss, df in parts if df > 0)
    if denom <= 0.0:
        return df_resid
    return float(min(df_resid, max(1.0, sse * sse / denom)))


#: Two-sided level of the F test on the arms' within-block variances above which the block
#: model gives way to the block contrasts (see :func:`block_log_ratio`).
ARMS_DIFFER_P = 0.05


def _within(y: np.ndarray, arm: np.ndarray, block: np.ndarray, a: float) -> tuple[float, float]:
    ss, df = 0.0, 0.0
    for b in np.unique(block):
        cell = y[(arm == a) & (block == b)]
        if cell.size > 1:
            ss += float(((cell - cell.mean()) ** 2).sum())
            df += cell.size - 1
    return ss, df


def _arms_differ_in_noise(y: np.ndarray, arm: np.ndarray, block: np.ndarray) -> bool:
    """The F test of the two arms' within-block variances, two-sided at ``ARMS_DIFFER_P``."""
    (ss_b, df_b), (ss_h, df_h) = _within(y, arm, block, 0.0), _within(y, arm, block, 1.0)
    if df_b < 1 or df_h < 1 or ss_b <= 0.0 or ss_h <= 0.0:
        return False
    f = (ss_h / df_h) / (ss_b / df_b)
    tail = float(special.fdtrc(df_h, df_b, f)) if f > 1 else float(special.fdtr(df_h, df_b, f))
    return 2.0 * tail < ARMS_DIFFER_P


def block_contrast_t(base: Sequence[BlockValue], head: Sequence[BlockValue], *,
                     confidence: float = 0.95) -> LogRatio:
    """The one-sample t on per-block contrasts ``mean log head - mean log base`` (J - 1 df).

    Valid whatever the correlation of errors inside a block, because the contrasts of
    different blocks are independent; it pays for that with J - 1 degrees of freedom
    instead of 3J - 1. Kept for the simulation that compares the two.
    """
    b_blocks, b_log = _check(base, "base")
    h_blocks, h_log = _check(head, "head")
    kept = blocks_of(base, head)
    if len(kept) < 2:
        raise ValueError(f"{len(kept)} block(s) hold both base and head repeats; at least 2 are needed")
    d = np.array([h_log[h_blocks == b].mean() - b_log[b_blocks == b].mean() for b in kept])
    diff = float(d.mean())
    df = float(d.size - 1)
    se = float(d.std(ddof=1)) / math.sqrt(d.size)
    return t_estimate(
        diff, se, df, confidence, n_current=int(np.isin(h_blocks, kept).sum()),
        n_baseline=int(np.isin(b_blocks, kept).sum()), recordings=1,
        within_sd_log=float(d.std(ddof=1)),  # Var(d) = sigma^2 (1/2 + 1/2) in a full block
        between_sd_log=0.0,
        current_sd_log=float(np.std(h_log, ddof=1)) if h_log.size > 1 else math.nan,
        baseline_sd_log=float(np.std(b_log, ddof=1)) if b_log.size > 1 else math.nan,
    )


def paired_min_detectable(sd_log: float, blocks: int, alpha: float, power: float = 0.8) -> float:
    """Smallest slowdown (ratio - 1) that ``blocks`` full ABBA blocks detect with ``power``
    at one-sided ``alpha``, for a run-to-run sd of log ``sd_log``.

    In a balanced design the arm effect has variance ``sd^2 / J`` (2J repeats per arm) and
    3J - 1 degrees of freedom; the usual t approximation
    ``log(1 + mde) = se * (t[1-alpha] + t[power])`` gives the answer.
    """
    if blocks < 1:
        raise ValueError(f"blocks must be at least 1, got {blocks!r}")
    if not (sd_log >= 0 and math.isfinite(sd_log)):
        raise ValueError(f"sd_log must be a finite number >= 0, got {sd_log!r}")
    df = 3 * blocks - 1
    q = float(special.stdtrit(df, 1.0 - alpha) + special.stdtrit(df, power))
    return _exp(sd_log / math.sqrt(blocks) * q) - 1.0


def blocks_needed(sd_log: float, delta: float, alpha: float, power: float = 0.8, *,
                  limit: int = 10_000) -> int | None:
    """Fewest ABBA blocks whose smallest detectable slowdown is at most ``delta`` (None past ``limit``)."""
    if not (delta > 0):
        raise ValueError(f"delta must be > 0, got {delta!r}")
    lo, hi = 1, limit
    if paired_min_detectable(sd_log, hi, alpha, power) > delta:
        return None
    while lo < hi:  # the detectable slowdown falls as blocks grow
        mid = (lo + hi) // 2
        if paired_min_detectable(sd_log, mid, alpha, power) <= delta:
            hi = mid
        else:
            lo = mid + 1
    return lo
