"""The comparison's result, :class:`LogRatio`, and the Student-t arithmetic on it.

Every estimator of current / baseline step time returns a :class:`LogRatio`: the two-level
estimator (:mod:`perfgate.analysis.stats.estimate`), the one from summary statistics
(:mod:`perfgate.analysis.stats.summaries`) and the paired designs
(``perfgate.analysis.blocks``). :func:`t_test` turns a log difference, its standard error
and degrees of freedom into one-sided p-values and a confidence half-width;
:func:`confidence_interval` rebuilds an estimate's interval at another level. Also the
argument checks the sibling modules share.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import special

__all__ = ["LogRatio", "confidence_interval", "hall", "hall_inverse", "p_beyond", "skewness", "t_test"]


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
    skew: float = 0.0
    """The skewness of the observations the one-sample t was taken on (the paired design's
    block contrasts; :func:`skewness`), which :func:`t_test` corrects the lower tail for
    (the PASS bound, the faster test) when it is positive; 0: none (the stored design)."""

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


def _check_probability(value: float, name: str) -> None:
    if not (isinstance(value, (int, float)) and 0.0 < value < 1.0):
        raise ValueError(f"{name} must be between 0 and 1 (exclusive), got {value!r}")


def _check_sd(value: float, name: str) -> None:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")


def skewness(values: Sequence[float] | np.ndarray) -> float:
    """The adjusted Fisher-Pearson skewness ``G1`` of ``values`` (0 with fewer than 3 or no spread)."""
    x = np.asarray(values, dtype=float)
    n = x.size
    if n < 3:
        return 0.0
    c = x - x.mean()
    m2 = float(np.mean(c * c))
    if not m2 > 0:
        return 0.0
    g = float(np.mean(c * c * c)) / m2 ** 1.5
    return g * math.sqrt(n * (n - 1)) / (n - 2)


def hall(x: float, gamma: float, n: float) -> float:
    """Hall's (1992) monotone transformation of a one-sample t on ``n`` observations of
    skewness ``gamma``: ``x + γ(x²/3 + 1/6)/√n + γ²x³/(27n)``, which removes the first-order
    (n^-1/2) effect of skewness on the t distribution's tails."""
    if gamma == 0 or n < 3:
        return x
    a = gamma / (3.0 * math.sqrt(n))
    b = gamma / (6.0 * math.sqrt(n))
    return b + ((1.0 + a * x) ** 3 - 1.0) / (3.0 * a)


def hall_inverse(y: float, gamma: float, n: float) -> float:
    """The x with ``hall(x, gamma, n) == y`` (the transformation is increasing everywhere)."""
    if gamma == 0 or n < 3:
        return y
    a = gamma / (3.0 * math.sqrt(n))
    b = gamma / (6.0 * math.sqrt(n))
    return (float(np.cbrt(1.0 + 3.0 * a * (y - b))) - 1.0) / a


def t_test(diff: float, se: float, df: float, confidence: float, skew: float = 0.0) -> tuple[float, float, float, float]:
    """One-sided p-values (slower, faster) of a log difference and the two-sided ``confidence``
    interval's distances below and above it, from Student's t with ``df`` degrees of freedom.

    ``skew``: the skewness of the ``df + 1`` observations of a one-sample t. A right-skewed
    sample (a head whose processes are now and then much slower) makes t's lower tail heavy,
    so the upper bound PASS holds below δ, and the faster test, were too permissive: a true
    slowdown of exactly δ passed in 2.7–3.0% of simulated gates against the 2.5% promised.
    That side is corrected by Hall's transformation with ``max(skew, 0)``, which can only make
    it stricter (with the estimated skewness used in both directions, the estimate's own
    sampling noise raised the PASS rate under symmetric noise, to 2.9%). The upper tail, the
    REGRESSION test and the interval's lower end, is the plain t: a correction there cost
    too much power at the first looks (simulated at 6 blocks, sd 5%: the power of the slowdown
    the gate says it detects fell from 80% to 52%).
    """
    n = df + 1.0
    lower = max(skew, 0.0)
    q = float(special.stdtrit(df, 0.5 + confidence / 2.0))
    if se > 0:
        t = diff / se
        return (float(special.stdtr(df, -t)), float(special.stdtr(df, hall(t, lower, n))),
                se * q, -se * hall_inverse(-q, lower, n))
    # no noise at all: the sign of the difference is certain
    return (0.0 if diff > 0 else 1.0), (0.0 if diff < 0 else 1.0), 0.0, 0.0


def p_beyond(est: LogRatio, shift: float) -> tuple[float, float]:
    """One-sided p-values that ``est`` is slower than ``exp(shift)`` and faster than
    ``exp(-shift)`` (a minimum-effect test; ``shift = 0``: ``est.p_slower``, ``est.p_faster``)."""
    if shift == 0:
        return est.p_slower, est.p_faster
    diff = math.log(est.ratio)
    slower = t_test(diff - shift, est.se_log, est.df, est.confidence, est.skew)[0]
    faster = t_test(diff + shift, est.se_log, est.df, est.confidence, est.skew)[1]
    return slower, faster


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
    _, _, below, above = t_test(diff, est.se_log, est.df, level, est.skew)
    return _exp(diff - below), _exp(diff + above)


def t_estimate(diff: float, se: float, df: float, confidence: float, *, skew: float = 0.0,
               **rest: Any) -> LogRatio:
    """The :class:`LogRatio` of a difference of logs ``diff`` with standard error ``se`` on
    ``df`` degrees of freedom: the ratio, its interval at ``confidence`` and the one-sided
    p-values of a t test (corrected for ``skew``, see :func:`t_test`); ``rest`` holds the
    estimator's own fields (sizes, variances)."""
    p_slower, p_faster, below, above = t_test(diff, se, df, confidence, skew)
    return LogRatio(
        ratio=math.exp(diff),
        ci_low=_exp(diff - below),
        ci_high=_exp(diff + above),
        p_slower=p_slower,
        p_faster=p_faster,
        p_two_sided=min(1.0, 2.0 * min(p_slower, p_faster)),
        se_log=se,
        df=df,
        confidence=confidence,
        skew=skew,
        **rest,
    )
