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
from dataclasses import dataclass
from typing import Any

from scipy import special

__all__ = ["LogRatio", "confidence_interval", "t_test"]


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


def _check_probability(value: float, name: str) -> None:
    if not (isinstance(value, (int, float)) and 0.0 < value < 1.0):
        raise ValueError(f"{name} must be between 0 and 1 (exclusive), got {value!r}")


def _check_sd(value: float, name: str) -> None:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")


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


def t_estimate(diff: float, se: float, df: float, confidence: float, **rest: Any) -> LogRatio:
    """The :class:`LogRatio` of a difference of logs ``diff`` with standard error ``se`` on
    ``df`` degrees of freedom: the ratio, its interval at ``confidence`` and the one-sided
    p-values of a t test; ``rest`` holds the estimator's own fields (sizes, variances)."""
    p_slower, p_faster, half = t_test(diff, se, df, confidence)
    return LogRatio(
        ratio=math.exp(diff),
        ci_low=_exp(diff - half),
        ci_high=_exp(diff + half),
        p_slower=p_slower,
        p_faster=p_faster,
        p_two_sided=min(1.0, 2.0 * min(p_slower, p_faster)),
        se_log=se,
        df=df,
        confidence=confidence,
        **rest,
    )
