"""The two-level random-effects estimate of current / baseline step time from repeats.

:func:`log_ratio` compares one current run with baseline recordings (one job each) on the
log scale: run-to-run variation within a recording, day-to-day variation between them
(estimated by one-way ANOVA, pooled with an assumed value worth ``DEFAULT_DAY_PRIOR_DF``
degrees of freedom), Satterthwaite's degrees of freedom, and robust screening that sets
aside outlying baseline repeats. :func:`variance_components` reports the two sds of A/A
recordings. The defaults the gate passes are here too.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

# perfgate's one median, the stdlib's. On the few values of a recording it is also far
# cheaper than np.median (about 2 against 70 us for ten), which the simulation feels.
from statistics import median

import numpy as np

from perfgate.analysis.stats.logratio import LogRatio, _check_probability, _check_sd, t_estimate

__all__ = [
    "DEFAULT_ASSUMED_DAY_SD_LOG",
    "DEFAULT_DAY_PRIOR_DF",
    "DEFAULT_OUTLIER_SD",
    "VarianceComponents",
    "log_ratio",
    "variance_components",
]


#: Day-to-day (job-to-job) sd of the log step time assumed when the baseline history
#: cannot show it. 1% is the drift the simulation models; without it a single-recording
#: baseline raises false alarms well above alpha (see "How perfgate decides" in
#: docs/deciding.md).
DEFAULT_ASSUMED_DAY_SD_LOG = 0.01

#: How many degrees of freedom the assumed day variance is worth, as if it had been
#: estimated from DEFAULT_DAY_PRIOR_DF + 1 recordings. It weighs the assumption against
#: the recordings' own estimate (k - 1 df; pooling keeps three recordings from a t quantile
#: of 6 or more) and enters Satterthwaite's df, with one recording too. 4, not more: the
#: 1% default is a guess about an unknown runner, and with 4 df a 2x error in its sd
#: (4x in variance) is a 1-in-11 event (P(chi2_4 / 4 < 1/4) = 0.09). Measured with one
#: recording, 5 vs 5 repeats, run-to-run sd 1% and a true day sd of 2%: one-sided
#: P(p < 0.005) is 1.8% (7.8% when the assumption counted as known; 3.6% with 6 df,
#: 5.8% with 12). The price is power against small slowdowns: a 5% slowdown with three
#: recordings is caught in about 58% of simulated gates instead of 85% (69% with 6 df),
#: while a 10% slowdown is still caught in at least 98%. ``math.inf`` restores the
#: assumption-as-known behaviour; record several baselines to need the prior less.
DEFAULT_DAY_PRIOR_DF = 4.0

#: A repeat is set aside (and reported) when it lies further than this many robust sds
#: from the median of its own recording.
DEFAULT_OUTLIER_SD = 6.0

# sd of |X - Y| for X, Y iid normal is sqrt(2); its median is sqrt(2) * Phi^-1(0.75).
_PAIR_MEDIAN_TO_SD = math.sqrt(2.0) * 0.6744897501960817


@dataclass(frozen=True)
class VarianceComponents:
    """Run-to-run (within recording) and day-to-day (between recordings) sd of log."""

    within_sd_log: float
    between_sd_log: float
    within_df: int
    recordings: int


def _log_values(values: Sequence[float], what: str) -> np.ndarray:
    try:
        arr = np.asarray(values, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what}: values must be numbers ({exc})") from None
    if arr.ndim != 1:
        raise ValueError(f"{what}: expected a flat list of per-repeat summaries")
    if arr.size < 2:
        raise ValueError(
            f"{what}: {arr.size} repeat(s); at least 2 are needed to estimate run-to-run "
            "variation, so a run this short cannot be judged"
        )
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError(f"{what}: every per-repeat summary must be finite and > 0")
    return np.log(arr)


@functools.lru_cache(maxsize=64)
def _pairs(n: int) -> tuple[np.ndarray, np.ndarray]:
    return np.triu_indices(n, 1)


def _robust_sd(groups: Sequence[np.ndarray]) -> float:
    """Pooled scale from within-group pairwise differences.

    Pairwise differences do not see group (day) means, and one outlier in a group of five
    touches only 4 of its 10 pairs, so the median stays near the clean value.
    """
    diffs = []
    for g in groups:
        i, j = _pairs(g.size)
        diffs.append(np.abs(g[i] - g[j]))
    return median(np.concatenate(diffs).tolist()) / _PAIR_MEDIAN_TO_SD


def _outlier_masks(groups: Sequence[np.ndarray], limit_sd: float | None) -> list[np.ndarray]:
    """Keep-masks: at most one repeat in five per group is set aside, none below five."""
    masks = [np.ones(g.size, dtype=bool) for g in groups]
    if limit_sd is None or all(g.size < 5 for g in groups):
        return masks
    scale = _robust_sd(groups)
    if scale <= 0.0:
        return masks  # ties everywhere: no scale to judge by
    for g, keep in zip(groups, masks, strict=True):
        cap = g.size // 5
        if cap == 0:
            continue
        dev = np.abs(g - median(g.tolist()))
        order = np.argsort(-dev, kind="stable")[:cap]
        keep[order[dev[order] > limit_sd * scale]] = False
    return masks


def _anova(groups: Sequence[np.ndarray]) -> tuple[np.ndarray, float, int, float, float]:
    """(group means, MSW, within df, MSB, n0) of a one-way layout; MSB is nan for one group."""
    sizes = np.array([g.size for g in groups], dtype=float)
    k = len(groups)
    means = np.array([g.sum() for g in groups]) / sizes
    ssw = float(sum(((g - m) ** 2).sum() for g, m in zip(groups, means, strict=True)))
    dfw = int(sizes.sum()) - k
    msw = ssw / dfw
    if k < 2:
        return means, msw, dfw, math.nan, math.nan
    total = sizes.sum()
    grand = float((sizes * means).sum() / total)
    msb = float((sizes * (means - grand) ** 2).sum() / (k - 1))
    n0 = float((total - (sizes**2).sum() / total) / (k - 1))
    return means, msw, dfw, msb, n0


def _satterthwaite(var: float, terms: Sequence[tuple[float, float, float]]) -> float:
    """Satterthwaite df of ``var = sum(coef * ms)``: ``var^2 / sum((coef * ms)^2 / df)``.

    A term with infinite df is known and adds nothing; a nonzero term with 0 df carries no
    information at all and makes the df 0 (the caller's floor applies). ``inf`` when
    nothing is estimated.
    """
    denom = 0.0
    for coef, ms, df in terms:
        part = coef * ms
        if part == 0.0 or df == math.inf:
            continue
        if df <= 0.0:
            return 0.0
        denom += part * part / df
    return var * var / denom if denom > 0.0 else math.inf


def variance_components(recordings: Sequence[Sequence[float]]) -> VarianceComponents:
    """Run-to-run and day-to-day sd of log from A/A recordings (method of moments).

    Each recording is one job's per-repeat summaries. The between-recording variance is
    ``(MSB - MSW) / n0`` floored at 0; with one recording it is reported as 0.
    """
    groups = [_log_values(r, f"recording {j}") for j, r in enumerate(recordings)]
    if not groups:
        raise ValueError("at least one recording is needed")
    _, msw, dfw, msb, n0 = _anova(groups)
    tau2 = max(0.0, (msb - msw) / n0) if len(groups) > 1 else 0.0
    return VarianceComponents(math.sqrt(msw), math.sqrt(tau2), dfw, len(groups))


def log_ratio(
    current: Sequence[float],
    baseline: Sequence[Sequence[float]],
    *,
    confidence: float = 0.95,
    assumed_day_sd_log: float = DEFAULT_ASSUMED_DAY_SD_LOG,
    day_prior_df: float = DEFAULT_DAY_PRIOR_DF,
    outlier_sd: float | None = DEFAULT_OUTLIER_SD,
) -> LogRatio:
    """Welch comparison of mean log summaries with a random day-to-day component.

    ``baseline`` is a list of recordings, each a list of per-repeat summaries (at least
    two per recording, and at least two in ``current``; a one-repeat run raises
    ``ValueError`` because its run-to-run variation is unknown).

    Variance of the log difference: ``s_c^2/n_c`` (current), ``MSW * mean(1/n_j)/k``
    (baseline grand mean, the unweighted mean of the k recording means) and
    ``tau^2 (1 + 1/k)`` because the current run is a new day and the baseline mean
    carries ``tau^2/k``. ``tau^2`` pools the assumed day variance (worth ``day_prior_df``
    degrees of freedom) with the method-of-moments estimate from the recordings
    (``k - 1`` degrees of freedom, floored at 0); with one recording it is the assumed
    value alone.

    Degrees of freedom by Satterthwaite over independent mean squares: the current
    run's variance (``n_c - 1``), MSW (``N - k``), MSB (``k - 1``, when the recordings
    estimate the day term) and the assumed day variance, ``day_prior_df`` (one recording
    included: nothing checks the assumption there; ``math.inf`` takes it as known and
    ``0`` as worthless). MSB enters as ``max(MSB, MSW)``, its expectation
    ``sigma^2 + n0 tau^2`` estimated under the floor ``tau^2 >= 0``, which keeps the df
    continuous as MSB crosses MSW. The df is floored at 1, and at ``k - 1`` when ``k``
    recordings estimate the day term: Satterthwaite only falls below the smallest df of
    its terms through MSW's negative coefficient in the day estimate, and that
    correction should not claim less information than the recordings hold. With
    ``assumed_day_sd_log=0``, one recording and ``outlier_sd=None`` this is exactly
    Welch's t-test on the logs.

    Baseline repeats further than ``outlier_sd`` robust sds from their recording's median
    are set aside (at most one in five per recording; none from recordings under five
    repeats) and listed in ``excluded_baseline``; the robust scale is pooled over the
    baseline recordings only. Current repeats are judged by the same rule against the
    current run's own scale, but only named (``outliers_current``), never dropped.
    ``outlier_sd=None`` screens nothing.
    """
    _check_probability(confidence, "confidence")
    _check_sd(assumed_day_sd_log, "assumed_day_sd_log")
    if not (day_prior_df >= 0):
        raise ValueError(f"day_prior_df must be >= 0 (math.inf: prior taken as known), got {day_prior_df!r}")
    if outlier_sd is not None and not (math.isfinite(outlier_sd) and outlier_sd > 0):
        raise ValueError(f"outlier_sd must be > 0 or None, got {outlier_sd!r}")
    if isinstance(baseline, (str, bytes)) or len(baseline) == 0:
        raise ValueError("baseline: at least one recording is needed")
    if np.ndim(baseline[0]) == 0:
        raise ValueError("baseline: expected a list of recordings, each a list of repeats")

    cur_all = _log_values(current, "current")
    base_all = [_log_values(r, f"baseline recording {j}") for j, r in enumerate(baseline)]
    # Each side is screened against its own scale. The baseline is a reference recorded
    # once and reused: one stray repeat there would bias every later gate, so it is set
    # aside. Its scale is pooled over the baseline's recordings alone, so a noisy or
    # regressed current run cannot widen it. The current run is the thing under test:
    # a repeat of it that is 30% slower may be the regression itself (an intermittent
    # one), so it is named for the reader but stays in the estimate.
    base_masks = _outlier_masks(base_all, outlier_sd)
    (cur_keep,) = _outlier_masks([cur_all], outlier_sd)
    cur = cur_all
    base = [b[m] for b, m in zip(base_all, base_masks, strict=True)]
    k = len(base)
    n_c = cur.size
    sizes = np.array([b.size for b in base], dtype=float)

    s2_c = float(cur.var(ddof=1))
    means, msw, dfw, msb, n0 = _anova(base)
    h = float((1.0 / sizes).sum()) / k**2  # Var(baseline mean) = tau^2/k + sigma^2 * h
    day = 1.0 + 1.0 / k

    # V = sum(coef_i * meansquare_i) over independent mean squares, each with its degrees
    # of freedom. The assumed day variance is one of them, worth day_prior_df degrees of
    # freedom, with one recording too: nothing in a single recording checks it, and
    # taking it as known let a 2x wrong assumption through at 8.6% for a 0.5% test.
    tau2_prior = assumed_day_sd_log**2
    tau2_data: float | None = None
    if k == 1:
        weight = 0.0
    else:
        tau2_data = max(0.0, (msb - msw) / n0)
        weight = (k - 1) / (day_prior_df + k - 1) if math.isfinite(day_prior_df) else 0.0
    c = day * weight / n0 if weight > 0.0 else 0.0  # coefficient of the recordings' (MSB - MSW) / n0
    terms: list[tuple[float, float, float]] = [(1.0 / n_c, s2_c, n_c - 1.0), (h - c, msw, float(dfw))]
    if c > 0.0:
        # E[MSB] = sigma^2 + n0 tau^2 is at least E[MSW], so it is estimated by
        # max(MSB, MSW): the variance equals the tau^2 estimate floored at 0, and the MSB
        # term stays in the df below the floor too, so the df is continuous as MSB crosses
        # MSW (it jumped from 7.2 to 0.5 there when the term entered only above it).
        terms.append((c, max(msb, msw), k - 1.0))
    terms.append((day * (1.0 - weight), tau2_prior, day_prior_df))
    tau2 = (1.0 - weight) * tau2_prior + weight * (tau2_data or 0.0)
    var = max(0.0, sum(c * m for c, m, _ in terms))
    # The floor: never below 1 (a t with under 1 df has no mean), and never below the
    # k - 1 df of the recordings' day estimate when it is used. Satterthwaite falls below
    # the smallest df of its terms only through the negative MSW coefficient, a small
    # correction whose df (the within-recording df) is larger; the floor keeps that
    # correction from claiming less information than the k recordings hold.
    df = max(_satterthwaite(var, terms), max(1.0, k - 1.0) if c > 0.0 else 1.0)

    diff = float(cur.mean() - means.mean())
    se = math.sqrt(var)
    pooled_w = (s2_c * (n_c - 1) + msw * dfw) / (n_c - 1 + dfw)
    excluded_b = tuple((j, int(i)) for j, m in enumerate(base_masks) for i in np.flatnonzero(~m))
    return t_estimate(
        diff, se, df, confidence,
        n_current=n_c,
        n_baseline=int(sizes.sum()),
        recordings=k,
        within_sd_log=math.sqrt(pooled_w),
        between_sd_log=math.sqrt(tau2),
        current_sd_log=math.sqrt(s2_c),
        baseline_sd_log=math.sqrt(msw),
        between_sd_log_data=None if tau2_data is None else math.sqrt(tau2_data),
        excluded_baseline=excluded_b,
        outliers_current=tuple(int(i) for i in np.flatnonzero(~cur_keep)),
    )
