"""Sensitivity: the smallest slowdown an estimate can detect, and the repeats a design needs.

:func:`min_detectable_slowdown` reads it off an estimate's standard error and degrees of
freedom; :func:`repeats_needed` sizes a run so that a given slowdown is caught with a given
power, integrating the power of the gate's own Welch statistic over the sampling
distribution of both variances.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special, stats

from perfgate.analysis.stats.logratio import LogRatio, _check_probability, _check_sd

__all__ = ["MDE_LIMIT_RATIO", "min_detectable_slowdown", "repeats_needed"]


#: Above this ratio the smallest detectable slowdown is reported as ``math.inf``.
MDE_LIMIT_RATIO = 10.0


def min_detectable_slowdown(est: LogRatio, alpha: float, power: float = 0.8) -> float:
    """Smallest slowdown (ratio - 1) a one-sided test at ``alpha`` finds with ``power``.

    Uses the estimate's standard error and degrees of freedom with the usual t
    approximation ``log(1 + mde) = se * (t[1-alpha] + t[power])``. Beyond a ratio of
    ``MDE_LIMIT_RATIO`` (10x) it is ``math.inf``: with a few degrees of freedom the t
    quantile at a Holm level runs into the hundreds and the formula gave slowdowns like
    +4e27%, which only say "this run cannot detect a slowdown".
    """
    _check_probability(alpha, "alpha")
    _check_probability(power, "power")
    q = float(special.stdtrit(est.df, 1.0 - alpha) + special.stdtrit(est.df, power))
    x = est.se_log * q
    if not (x <= math.log(MDE_LIMIT_RATIO)):  # also a nan from a df of 0 or nan
        return math.inf
    return math.expm1(x)


def _power(n: int, sd: float, delta_log: float, alpha: float, day_var: float, n_b: int | None) -> float:
    """Power of the gate's one-sided test, integrated over the two sample variances.

    The log difference is normal; the test divides it by the estimated standard error and
    compares with a t quantile whose Satterthwaite df depends on the same two variances.
    Averaging over a quantile grid of both scaled chi-squares gives the power of exactly
    that procedure (the noncentral t with nominal df overstates it by several points at
    five repeats, because Welch's df is usually below n_c + n_b - 2).
    """
    nb = n if n_b is None else n_b
    sd_diff = math.sqrt(day_var + sd**2 / n + sd**2 / nb)
    if sd_diff == 0:
        return 1.0
    if sd == 0:
        return float(stats.norm.sf(stats.norm.isf(alpha) - delta_log / sd_diff))
    u = (np.arange(_GRID) + 0.5) / _GRID
    a = sd**2 / n * stats.chi2.ppf(u, n - 1)[:, None] / (n - 1)
    b = sd**2 / nb * stats.chi2.ppf(u, nb - 1)[None, :] / (nb - 1)
    var = day_var + a + b
    df = var**2 / (a**2 / (n - 1) + b**2 / (nb - 1))
    crit = special.stdtrit(df, 1.0 - alpha) * np.sqrt(var)
    return float(np.mean(special.ndtr((delta_log - crit) / sd_diff)))


_GRID = 96


def repeats_needed(
    sd_log: float,
    delta: float,
    alpha: float,
    power: float = 0.8,
    *,
    day_sd_log: float = 0.0,
    baseline_repeats: int | None = None,
    baseline_recordings: int = 1,
) -> int:
    """Repeats per side so that a true slowdown of ``delta`` is significant (one-sided
    ``alpha``) with probability ``power``.

    ``sd_log`` is the run-to-run sd of log summaries, ``day_sd_log`` the day-to-day sd
    (counted once for the current run and ``1/baseline_recordings`` times for the
    baseline). With ``baseline_repeats`` the baseline size is fixed and only the current
    side grows; otherwise it has as many repeats as the current run. Power is that of the
    gate's own statistic (Welch with Satterthwaite df, the day variance taken as known),
    integrated over the sampling distribution of both variances.

    The gate also requires the estimate to exceed ``delta``, which a true slowdown of
    exactly ``delta`` does only half of the time; size for the slowdown you must catch.
    """
    _check_sd(sd_log, "sd_log")
    _check_sd(day_sd_log, "day_sd_log")
    _check_probability(alpha, "alpha")
    _check_probability(power, "power")
    if not (delta > 0 and math.isfinite(delta)):
        raise ValueError(f"delta must be > 0, got {delta!r}")
    if baseline_repeats is not None and baseline_repeats < 2:
        raise ValueError(f"baseline_repeats must be >= 2, got {baseline_repeats!r}")
    if baseline_recordings < 1:
        raise ValueError(f"baseline_recordings must be >= 1, got {baseline_recordings!r}")
    delta_log = math.log1p(delta)
    day_var = day_sd_log**2 * (1.0 + 1.0 / baseline_recordings)
    n_max = 1_000_000

    def pw(n: int) -> float:
        return _power(n, sd_log, delta_log, alpha, day_var, baseline_repeats)

    if pw(2) >= power:
        return 2
    if pw(n_max) < power:
        limit = math.sqrt(day_var + (sd_log**2 / baseline_repeats if baseline_repeats else 0.0))
        raise ValueError(
            f"a {delta:.1%} slowdown cannot be detected with power {power:.0%} at alpha={alpha:g} "
            f"by adding repeats: the day-to-day sd ({day_sd_log:.2%})"
            + (f" and the fixed baseline of {baseline_repeats} repeats" if baseline_repeats else "")
            + f" alone leave a standard error of {limit:.2%}; record more baselines, "
            "compare in the same job, or raise delta"
        )
    # power grows with n; bisect on integers
    lo, hi = 2, n_max
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if pw(mid) >= power:
            hi = mid
        else:
            lo = mid
    return hi
