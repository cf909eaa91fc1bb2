"""The log-ratio estimate from summary statistics alone: (mean, sd, n) per side.

For tools that keep no per-repeat values (pytest-benchmark saved without
``--benchmark-save-data``): :class:`SampleSummary` holds what they report and
:func:`log_ratio_from_summaries` compares log means by the delta method, with the assumed
day-to-day variation standing in for the variation between processes it cannot see.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from perfgate.analysis.stats.estimate import DEFAULT_ASSUMED_DAY_SD_LOG
from perfgate.analysis.stats.logratio import LogRatio, _check_probability, _check_sd, t_estimate

__all__ = ["SampleSummary", "log_ratio_from_summaries"]


@dataclass(frozen=True)
class SampleSummary:
    """What a tool that keeps no raw values reports: the mean, the sample sd and the count
    of ``n`` positive measurements (pytest-benchmark saved without ``--benchmark-save-data``)."""

    mean: float
    sd: float
    n: int


def _summary_log(s: SampleSummary, what: str) -> tuple[float, float, float]:
    """(log mean, its delta-method variance, its degrees of freedom)."""
    if not isinstance(s, SampleSummary):
        raise ValueError(f"{what}: expected a SampleSummary, got {type(s).__name__}")
    if isinstance(s.n, bool) or not isinstance(s.n, int) or s.n < 2:
        raise ValueError(
            f"{what}: {s.n!r} measurement(s); at least 2 are needed to estimate their variation"
        )
    if not (math.isfinite(s.mean) and s.mean > 0):
        raise ValueError(f"{what}: the mean must be finite and > 0, got {s.mean!r}")
    if not (math.isfinite(s.sd) and s.sd >= 0):
        raise ValueError(f"{what}: the sd must be finite and >= 0, got {s.sd!r}")
    cv = s.sd / s.mean
    return math.log(s.mean), cv * cv / s.n, s.n - 1.0


def log_ratio_from_summaries(
    current: SampleSummary,
    baseline: Sequence[SampleSummary],
    *,
    confidence: float = 0.95,
    assumed_day_sd_log: float = DEFAULT_ASSUMED_DAY_SD_LOG,
) -> LogRatio:
    """Welch comparison of log means from summary statistics alone (delta method).

    For when only (mean, sd, n) of each side exist, no per-repeat values. By the delta
    method ``log(mean)`` has variance ``(sd / mean)^2 / n``; that treats the ``n``
    measurements as independent, which consecutive measurements in one process are not,
    and it sees nothing of the variation between processes. ``assumed_day_sd_log`` stands
    for that unseen variation as a known component, as in
    :func:`~perfgate.analysis.stats.estimate.log_ratio`: ``tau^2 (1 + 1/k)``. ``baseline``
    holds one summary per recording; their log means are averaged unweighted, like
    ``log_ratio``'s recording means (the recordings' own spread is reported in
    ``between_sd_log_data`` but not estimated from, so ``tau`` is the assumed value).
    Degrees of freedom by Satterthwaite over the sample variances.

    With ``assumed_day_sd_log=0`` and one recording this is exactly
    ``scipy.stats.ttest_ind_from_stats(log m_c, s_c/m_c, n_c, log m_b, s_b/m_b, n_b,
    equal_var=False)``. ``n_current``/``n_baseline`` count measurements, not repeats.
    """
    _check_probability(confidence, "confidence")
    _check_sd(assumed_day_sd_log, "assumed_day_sd_log")
    if isinstance(baseline, SampleSummary) or len(baseline) == 0:
        raise ValueError("baseline: expected a list of recordings, one summary each")
    log_c, var_c, df_c = _summary_log(current, "current")
    base = [_summary_log(b, f"baseline recording {j}") for j, b in enumerate(baseline)]
    k = len(base)
    terms = [(var_c, df_c), *((v / k**2, d) for _, v, d in base)]
    day = 1.0 + 1.0 / k
    tau2 = assumed_day_sd_log**2
    var = day * tau2 + sum(v for v, _ in terms)
    denom = sum(v * v / d for v, d in terms)
    df = var**2 / denom if denom > 0 else math.inf
    log_b = [m for m, _, _ in base]
    diff = log_c - float(np.mean(log_b))
    se = math.sqrt(var)

    def pooled_cv(items: Sequence[SampleSummary]) -> float:
        return math.sqrt(sum((s.n - 1) * (s.sd / s.mean) ** 2 for s in items) / sum(s.n - 1 for s in items))

    between_data = None
    if k > 1:
        spread = float(np.var(log_b, ddof=1)) - float(np.mean([v for _, v, _ in base]))
        between_data = math.sqrt(max(0.0, spread))
    return t_estimate(
        diff, se, df, confidence,
        n_current=current.n,
        n_baseline=sum(b.n for b in baseline),
        recordings=k,
        within_sd_log=pooled_cv([current, *baseline]),
        between_sd_log=math.sqrt(tau2),
        current_sd_log=current.sd / current.mean,
        baseline_sd_log=pooled_cv(baseline),
        between_sd_log_data=between_data,
    )
