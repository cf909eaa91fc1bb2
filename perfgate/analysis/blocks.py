"""The paired design's statistics: base and head measured in ABBA blocks in one job.

Each block runs four fresh processes in the order base, head, head, base. Linear drift
of the machine inside a block then cancels from the head-minus-base contrast (the mean
position of both arms is the same), and whatever differs between blocks (a slower
quarter of an hour) is removed by taking the contrast inside each block. Day-to-day drift
never enters: both arms are measured on the same day, on the same runner, minutes apart.

The estimate the gate uses, :func:`block_log_ratio`, is the one-sample t on the per-block
contrasts ``d_j = mean log head_j - mean log base_j`` (J - 1 degrees of freedom). The
contrasts of different blocks are independent whatever the processes inside a block do,
so its level holds whatever the two arms' noise and however adjacent processes are
correlated: there is no pre-test and no switch between estimators, whose data-dependent
choice let false alarms exceed alpha (a head 3x noisier than its base, AR(0.3) between
consecutive processes: 1.47% false REGRESSION at alpha = 1%). The alternative it was
chosen against is kept for the simulation that compared them
(``benchmarks/simulate_gate.py``): the randomised-block least-squares model
(:func:`block_model_log_ratio`, 3J - 1 df with Satterthwaite's correction), which has more
degrees of freedom but pools the within-block spread of both arms; the two head
processes of a block are adjacent, so under AR(1) a noisy head's spread is understated
(head 3x noisier, AR 0.3: 0.93% of A/A draws below a nominal 0.5%, where the contrasts
give 0.62%; 20,000 draws each). Welch ignoring the blocks is the third (no drift
protection). A block holding only one arm tells nothing about the arm effect and is left
out; a block that lost a repeat contributes the mean of what it holds.

No torch, no files, no printing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import special

from perfgate.analysis.stats import LogRatio, t_estimate
from perfgate.analysis.stats.logratio import _exp, skewness

__all__ = ["ABBA", "BlockValue", "block_log_ratio", "block_model_log_ratio", "blocks_of"]

ABBA = ("base", "head", "head", "base")
"""The order of the four processes of an even-numbered block (0, 2, ...)."""
BAAB = ("head", "base", "base", "head")
"""The order of an odd-numbered block: the blocks alternate, so that an effect of a process's
place in its block (the first process of a block slower, say) cancels from the head-minus-base
contrast over every two blocks, as linear drift cancels inside each."""


def block_order(block: int) -> tuple[str, str, str, str]:
    """The order of the four processes of ``block`` (0-based): ABBA, BAAB, ABBA, ..."""
    return ABBA if block % 2 == 0 else BAAB


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


def block_model_log_ratio(base: Sequence[BlockValue], head: Sequence[BlockValue], *,
                          confidence: float = 0.95) -> LogRatio:
    """Head / base from the additive block model on logs, ``log y = mu + arm + block + e``,
    fitted by least squares (3J - 1 residual df for J full blocks, Satterthwaite's df over
    the arms' within-block parts and the interaction). Not the gate's estimate (see the
    module doc); kept for the simulation that chose between them.

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


def _within(y: np.ndarray, arm: np.ndarray, block: np.ndarray, a: float) -> tuple[float, float]:
    ss, df = 0.0, 0.0
    for b in np.unique(block):
        cell = y[(arm == a) & (block == b)]
        if cell.size > 1:
            ss += float(((cell - cell.mean()) ** 2).sum())
            df += cell.size - 1
    return ss, df


def block_log_ratio(base: Sequence[BlockValue], head: Sequence[BlockValue], *,
                    confidence: float = 0.95) -> LogRatio:
    """Head / base: the one-sample t on per-block contrasts ``mean log head - mean log base``
    (J - 1 df), the gate's paired estimate (see the module doc).

    Valid whatever the two arms' noise and the correlation of errors inside a block,
    because the contrasts of different blocks are independent. Needs at least two blocks
    holding both arms; fewer raise ``ValueError`` (the run is too short to be judged).
    """
    if not (0.0 < confidence < 1.0):
        raise ValueError(f"confidence must be between 0 and 1 (exclusive), got {confidence!r}")
    b_blocks, b_log = _check(base, "base")
    h_blocks, h_log = _check(head, "head")
    kept = blocks_of(base, head)
    if len(kept) < 2:
        raise ValueError(f"{len(kept)} block(s) hold both base and head repeats; at least 2 are needed")
    d = np.array([h_log[h_blocks == b].mean() - b_log[b_blocks == b].mean() for b in kept])
    diff = float(d.mean())
    df = float(d.size - 1)
    se = float(d.std(ddof=1)) / math.sqrt(d.size)
    # Block-to-block sd of log (the drift the design removes), from the block means.
    block_means = [float(np.concatenate([h_log[h_blocks == b], b_log[b_blocks == b]]).mean()) for b in kept]
    return t_estimate(
        diff, se, df, confidence, skew=skewness(d), n_current=int(np.isin(h_blocks, kept).sum()),
        n_baseline=int(np.isin(b_blocks, kept).sum()), recordings=1,
        within_sd_log=float(d.std(ddof=1)),  # Var(d) = sigma^2 (1/2 + 1/2) in a full block
        between_sd_log=float(np.std(block_means, ddof=1)),
        current_sd_log=float(np.std(h_log, ddof=1)) if h_log.size > 1 else math.nan,
        baseline_sd_log=float(np.std(b_log, ddof=1)) if b_log.size > 1 else math.nan,
    )


MIN_BLOCKS = 2
"""The fewest ABBA blocks the paired design judges: the block contrasts' t needs two."""


def blocks_problem(blocks: object, where: str = "blocks") -> str | None:
    """Why ``blocks`` cannot be the paired design's ABBA blocks, one line naming ``where``
    (``--blocks``, ``pyproject.toml: blocks``), or None. Every check of the blocks asks this."""
    if isinstance(blocks, bool) or not isinstance(blocks, int):
        return f"{where} must be an integer, got {blocks!r}"
    if blocks < MIN_BLOCKS:
        return f"{where}: the paired design needs at least {MIN_BLOCKS} ABBA blocks"
    return None


def paired_min_detectable(sd_log: float, blocks: int, alpha: float, power: float = 0.8) -> float:
    """Smallest slowdown (ratio - 1) that ``blocks`` full ABBA blocks detect with ``power``
    at one-sided ``alpha``, for a run-to-run sd of log ``sd_log``.

    In a balanced design the arm effect has variance ``sd^2 / J`` (2J repeats per arm) and
    the block contrasts J - 1 degrees of freedom; the usual t approximation
    ``log(1 + mde) = se * (t[1-alpha] + t[power])`` gives the answer.
    """
    problem = blocks_problem(blocks)
    if problem is not None:
        raise ValueError(problem)
    if not (sd_log >= 0 and math.isfinite(sd_log)):
        raise ValueError(f"sd_log must be a finite number >= 0, got {sd_log!r}")
    df = blocks - 1
    q = float(special.stdtrit(df, 1.0 - alpha) + special.stdtrit(df, power))
    return _exp(sd_log / math.sqrt(blocks) * q) - 1.0


def blocks_needed(sd_log: float, delta: float, alpha: float, power: float = 0.8, *,
                  limit: int = 10_000) -> int | None:
    """Fewest ABBA blocks whose smallest detectable slowdown is at most ``delta`` (None past ``limit``)."""
    if not (delta > 0):
        raise ValueError(f"delta must be > 0, got {delta!r}")
    lo, hi = 2, limit
    if paired_min_detectable(sd_log, hi, alpha, power) > delta:
        return None
    while lo < hi:  # the detectable slowdown falls as blocks grow
        mid = (lo + hi) // 2
        if paired_min_detectable(sd_log, mid, alpha, power) <= delta:
            hi = mid
        else:
            lo = mid + 1
    return lo
