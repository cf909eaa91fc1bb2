"""Pure statistics for the gate: effect sizes on the log scale and multiplicity corrections.

The unit of analysis is the *repeat*: one fresh process, summarised by the median of its
measured steps, giving one positive number (milliseconds) per repeat. Everything here
works on the natural log of those summaries, so effects are ratios and noise is relative.

No torch, no files, no printing. Cross-checked against scipy in ``tests/test_stats.py``.
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
from scipy import optimize, special, stats

__all__ = [
    "DEFAULT_ASSUMED_DAY_SD_LOG",
    "DEFAULT_DAY_PRIOR_DF",
    "DEFAULT_OUTLIER_SD",
    "LogRatio",
    "MDE_LIMIT_RATIO",
    "SampleSummary",
    "VarianceComponents",
    "benjamini_hochberg",
    "bh_adjusted",
    "confidence_interval",
    "holm",
    "holm_adjusted",
    "log_ratio",
    "log_ratio_from_summaries",
    "min_detectable_slowdown",
    "paired_look_correlation",
    "repeats_needed",
    "stored_look_correlation",
    "two_look_error",
    "two_look_levels",
    "variance_components",
]

#: Day-to-day (job-to-job) sd of the log step time assumed when the baseline history
#: cannot show it. 1% is the drift the simulation models; without it a single-recording
#: baseline raises false alarms well above alpha (see "How perfgate decides" in the README).
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
class LogRatio:
    """Current / baseline step time as a ratio, estimated on the log scale.

    ``n_current`` and ``n_baseline`` count the repeats that entered the estimate. Baseline
    repeats set aside as outliers are listed in ``excluded_baseline`` (``(recording,
    repeat)`` pairs) and are not counted. Current repeats are never set aside: those that
    look like outliers are listed in ``outliers_current`` (indices into the current run)
    and stay in the estimate, because the run under test is what the gate judges and an
    intermittent slowdown is a slowdown.
    """

    ratio: float
    ci_low: float
    ci_high: float
    p_slower: float
    p_faster: float
    p_two_sided: float
    se_log: float
    df: float
    n_current: int
    n_baseline: int
    recordings: int
    within_sd_log: float
    between_sd_log: float
    confidence: float
    current_sd_log: float = math.nan
    baseline_sd_log: float = math.nan
    between_sd_log_data: float | None = None
    excluded_baseline: tuple[tuple[int, int], ...] = ()
    outliers_current: tuple[int, ...] = ()

    @property
    def change(self) -> float:
        """Relative change, ``ratio - 1`` (0.061 for a 6.1% slowdown)."""
        return self.ratio - 1.0

    @property
    def excluded(self) -> int:
        """How many repeats were set aside (baseline repeats only; see ``outliers_current``)."""
        return len(self.excluded_baseline)

    def excluded_names(self) -> list[str]:
        """The baseline repeats set aside as outliers, named for a report ("baseline recording 1 repeat 4")."""
        return [f"baseline recording {j + 1} repeat {i + 1}" for j, i in self.excluded_baseline]

    def outlier_names(self) -> list[str]:
        """The current repeats that look like outliers but were kept ("current repeat 3")."""
        return [f"current repeat {i + 1}" for i in self.outliers_current]


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


def _check_probability(value: float, name: str) -> None:
    if not (isinstance(value, (int, float)) and 0.0 < value < 1.0):
        raise ValueError(f"{name} must be between 0 and 1 (exclusive), got {value!r}")


def _check_sd(value: float, name: str) -> None:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")


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
    for g, keep in zip(groups, masks):
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
    ssw = float(sum(((g - m) ** 2).sum() for g, m in zip(groups, means)))
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
    base = [b[m] for b, m in zip(base_all, base_masks)]
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
    p_slower, p_faster, half = t_test(diff, se, df, confidence)
    pooled_w = (s2_c * (n_c - 1) + msw * dfw) / (n_c - 1 + dfw)
    excluded_b = tuple((j, int(i)) for j, m in enumerate(base_masks) for i in np.flatnonzero(~m))
    return LogRatio(
        ratio=math.exp(diff),
        ci_low=_exp(diff - half),
        ci_high=_exp(diff + half),
        p_slower=p_slower,
        p_faster=p_faster,
        p_two_sided=min(1.0, 2.0 * min(p_slower, p_faster)),
        se_log=se,
        df=df,
        n_current=n_c,
        n_baseline=int(sizes.sum()),
        recordings=k,
        within_sd_log=math.sqrt(pooled_w),
        between_sd_log=math.sqrt(tau2),
        confidence=confidence,
        current_sd_log=math.sqrt(s2_c),
        baseline_sd_log=math.sqrt(msw),
        between_sd_log_data=None if tau2_data is None else math.sqrt(tau2_data),
        excluded_baseline=excluded_b,
        outliers_current=tuple(int(i) for i in np.flatnonzero(~cur_keep)),
    )


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
    for that unseen variation as a known component, as in :func:`log_ratio`:
    ``tau^2 (1 + 1/k)``. ``baseline`` holds one summary per recording; their log means are
    averaged unweighted, like :func:`log_ratio`'s recording means (the recordings' own
    spread is reported in ``between_sd_log_data`` but not estimated from, so ``tau`` is
    the assumed value). Degrees of freedom by Satterthwaite over the sample variances.

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
    p_slower, p_faster, half = t_test(diff, se, df, confidence)

    def pooled_cv(items: Sequence[SampleSummary]) -> float:
        return math.sqrt(sum((s.n - 1) * (s.sd / s.mean) ** 2 for s in items) / sum(s.n - 1 for s in items))

    between_data = None
    if k > 1:
        spread = float(np.var(log_b, ddof=1)) - float(np.mean([v for _, v, _ in base]))
        between_data = math.sqrt(max(0.0, spread))
    return LogRatio(
        ratio=math.exp(diff),
        ci_low=_exp(diff - half),
        ci_high=_exp(diff + half),
        p_slower=p_slower,
        p_faster=p_faster,
        p_two_sided=min(1.0, 2.0 * min(p_slower, p_faster)),
        se_log=se,
        df=df,
        n_current=current.n,
        n_baseline=sum(b.n for b in baseline),
        recordings=k,
        within_sd_log=pooled_cv([current, *baseline]),
        between_sd_log=math.sqrt(tau2),
        confidence=confidence,
        current_sd_log=current.sd / current.mean,
        baseline_sd_log=pooled_cv(baseline),
        between_sd_log_data=between_data,
    )


def t_test(diff: float, se: float, df: float, confidence: float) -> tuple[float, float, float]:
    """One-sided p-values (slower, faster) of a log difference and the half-width of its
    two-sided ``confidence`` interval, from Student's t with ``df`` degrees of freedom."""
    if se > 0:
        t = diff / se
        return (float(special.stdtr(df, -t)), float(special.stdtr(df, t)),
                se * float(special.stdtrit(df, 0.5 + confidence / 2.0)))
    # no noise at all: the sign of the difference is certain
    return (0.0 if diff > 0 else 1.0), (0.0 if diff < 0 else 1.0), 0.0


def _exp(x: float) -> float:
    return math.exp(x) if x < 700 else math.inf  # a handful of df can make t enormous


def confidence_interval(est: LogRatio, level: float) -> tuple[float, float]:
    """The two-sided ``level`` interval of ``est.ratio``, rebuilt from ``se_log`` and ``df``.

    ``est.ci_low``/``est.ci_high`` hold the interval at ``est.confidence``; a test at a
    different level (a Holm step at 0.5%) needs the interval at its own level, so that
    the printed interval clears 0 exactly when that test rejects.
    """
    _check_probability(level, "level")
    diff = math.log(est.ratio)
    if est.se_log == 0:
        return est.ratio, est.ratio
    half = est.se_log * float(special.stdtrit(est.df, 0.5 + level / 2.0))
    return _exp(diff - half), _exp(diff + half)


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


def _check_rho(rho: float) -> None:
    if not (isinstance(rho, (int, float)) and 0.0 <= rho <= 1.0):
        raise ValueError(f"rho must be a correlation between 0 and 1, got {rho!r}")


def two_look_error(level: float, rho: float) -> float:
    """``P(Z1 > c or Z2 > c)`` with ``c`` the one-sided ``level`` quantile, ``(Z1, Z2)``
    standard bivariate normal with correlation ``rho``: the chance that a true null is
    rejected at either of two looks that each test at nominal ``level``.

    Exact, by Owen's T: for equal limits ``Phi2(c, c; rho) = Phi(c) - 2 T(c, a)`` with
    ``a = sqrt((1 - rho) / (1 + rho))``, so the error is ``level + 2 T(c, a)``: ``2 level
    - level^2`` for independent looks, ``level`` for identical ones.
    """
    _check_probability(level, "level")
    _check_rho(rho)
    c = -float(special.ndtri(level))  # isf without losing digits in the tail
    a = math.sqrt((1.0 - rho) / (1.0 + rho))
    return min(1.0, level + 2.0 * float(special.owens_t(c, a)))


def two_look_levels(alpha: float, rho: float) -> tuple[float, float]:
    """Nominal one-sided levels of two looks that together spend exactly ``alpha``.

    Equal z boundaries (Pocock-type): the level ``a`` at both looks solves
    ``P(Z1 > c or Z2 > c) = alpha`` with ``c = z[1 - a]`` and ``corr(Z1, Z2) = rho``, the
    correlation of the two looks' test statistics under the null (see
    :func:`paired_look_correlation`, :func:`stored_look_correlation`). ``rho = 0`` gives
    ``1 - sqrt(1 - alpha)``, slightly more than Bonferroni's ``alpha / 2``; ``rho = 1``
    gives ``alpha``. The Bonferroni split ``alpha / 2`` spends less than ``alpha`` whenever
    the looks are correlated, and theirs always are: look 2 holds look 1's repeats.

    Exact for z statistics; for the gate's t statistics it is the usual large-sample
    boundary, applied to each look's p-value.
    """
    _check_probability(alpha, "alpha")
    _check_rho(rho)
    if rho == 1.0:
        return alpha, alpha
    # two_look_error grows with the level; Bonferroni (alpha / 2) spends at most alpha
    # and a single look's alpha at least alpha, so the root lies between them.
    level = float(optimize.brentq(lambda x: two_look_error(x, rho) - alpha, alpha / 2.0, alpha,
                                  xtol=1e-15, rtol=1e-14))
    return level, level


def paired_look_correlation(blocks_first: int, blocks_total: int) -> float:
    """Correlation of a paired comparison's estimates at look 1 and look 2.

    Blocks are independent, so the estimate at look 2 is the mean over ``blocks_total``
    blocks of which the first ``blocks_first`` made look 1's: ``sqrt(n1 / n2)``.
    """
    if isinstance(blocks_first, bool) or isinstance(blocks_total, bool) or not (
        isinstance(blocks_first, int) and isinstance(blocks_total, int) and 1 <= blocks_first <= blocks_total
    ):
        raise ValueError(f"need 1 <= blocks_first <= blocks_total, got {blocks_first!r} and {blocks_total!r}")
    return math.sqrt(blocks_first / blocks_total)


def stored_look_correlation(first: LogRatio, n_added: int) -> float:
    """Correlation of the log-difference estimates at look 1 (``first``) and at look 2,
    after ``n_added`` more current repeats, against the same stored baseline.

    Look 2's current mean contains look 1's repeats; the current job's day effect, the
    baseline mean and the baseline's day terms are the same at both looks. Only the
    current run-to-run term averages down, from ``s_c^2 / n`` to ``s_c^2 / (n + n_added)``,
    and it is also the covariance's share, so ``Cov(D1, D2) = Var(D2)`` and
    ``rho = sqrt(Var(D2) / Var(D1))`` with ``Var(D1) = se_log^2`` and ``Var(D2) =
    se_log^2 - s_c^2 / n + s_c^2 / (n + n_added)`` (the added repeats assumed as noisy as
    the first ones). Estimated from ``first``'s own components, so it is itself an
    estimate; it is higher the more the shared day and baseline terms dominate.
    """
    if isinstance(n_added, bool) or not (isinstance(n_added, int) and n_added >= 0):
        raise ValueError(f"n_added must be an integer >= 0, got {n_added!r}")
    s2 = first.current_sd_log**2
    if not (math.isfinite(s2) and first.n_current >= 1 and math.isfinite(first.se_log)):
        raise ValueError("the estimate does not carry the current run's variance (current_sd_log)")
    var1 = first.se_log**2
    if n_added == 0 or var1 == 0.0:
        return 1.0
    n = first.n_current
    var2 = max(0.0, var1 - s2 / n + s2 / (n + n_added))
    return min(1.0, math.sqrt(var2 / var1))


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

    def pw(n: float) -> float:
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


def _check_pvalues(pvalues: Sequence[float]) -> np.ndarray:
    p = np.asarray(pvalues, dtype=float)
    if p.ndim != 1:
        raise ValueError("p-values must be a flat sequence")
    if np.any(~np.isfinite(p)) or np.any((p < 0) | (p > 1)):
        raise ValueError("p-values must lie in [0, 1]")
    return p


def holm_adjusted(pvalues: Sequence[float]) -> list[float]:
    """Holm step-down adjusted p-values (reject at level a where adjusted <= a)."""
    p = _check_pvalues(pvalues)
    m = p.size
    if m == 0:
        return []
    order = np.argsort(p, kind="stable")
    stepped = np.maximum.accumulate((m - np.arange(m)) * p[order])
    adj = np.empty(m)
    adj[order] = np.minimum(stepped, 1.0)
    return adj.tolist()


def holm(pvalues: Sequence[float], alpha: float) -> list[bool]:
    """Holm's step-down procedure: which hypotheses are rejected at family-wise ``alpha``."""
    _check_probability(alpha, "alpha")
    return [a <= alpha for a in holm_adjusted(pvalues)]


def bh_adjusted(pvalues: Sequence[float]) -> list[float]:
    """Benjamini-Hochberg adjusted p-values (q-values): scipy's, with perfgate's checks."""
    p = _check_pvalues(pvalues)
    if p.size == 0:
        return []  # scipy refuses an empty family; perfgate's phases may all be untested
    return [float(q) for q in stats.false_discovery_control(p, method="bh")]


def benjamini_hochberg(pvalues: Sequence[float], q: float) -> list[bool]:
    """Which hypotheses are discoveries at false discovery rate ``q``."""
    _check_probability(q, "q")
    return [a <= q for a in bh_adjusted(pvalues)]
