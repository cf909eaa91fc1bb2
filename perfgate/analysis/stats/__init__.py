"""Pure statistics for the gate: effect sizes on the log scale and multiplicity corrections.

The unit of analysis is the *repeat*: one fresh process, summarised by the median of its
measured steps, giving one positive number (milliseconds) per repeat. Everything here
works on the natural log of those summaries, so effects are ratios and noise is relative.

No torch, no files, no printing. Cross-checked against scipy in ``tests/test_stats.py``.
This package re-exports the public names of its modules:

- :mod:`~perfgate.analysis.stats.logratio`: the result, :class:`LogRatio`, and the
  Student-t p-values and confidence intervals on it.
- :mod:`~perfgate.analysis.stats.estimate`: :func:`log_ratio`, the two-level
  random-effects estimate from per-repeat values (variance components, outlier screening,
  Satterthwaite degrees of freedom), and the defaults the gate passes it.
- :mod:`~perfgate.analysis.stats.summaries`: :func:`log_ratio_from_summaries`, the same
  comparison from (mean, sd, n) alone.
- :mod:`~perfgate.analysis.stats.power`: the smallest detectable slowdown and the repeats
  a design needs.
- :mod:`~perfgate.analysis.stats.multiplicity`: two looks that together spend ``alpha``,
  the looks' correlations, and Holm and Benjamini-Hochberg across phases.
"""

from __future__ import annotations

from perfgate.analysis.stats.estimate import (
    DEFAULT_ASSUMED_DAY_SD_LOG,
    DEFAULT_DAY_PRIOR_DF,
    DEFAULT_OUTLIER_SD,
    VarianceComponents,
    log_ratio,
    variance_components,
)
from perfgate.analysis.stats.logratio import LogRatio, confidence_interval, p_beyond, t_estimate, t_test
from perfgate.analysis.stats.multiplicity import (
    benjamini_hochberg,
    bh_adjusted,
    holm,
    holm_adjusted,
    paired_look_correlation,
    stored_look_correlation,
    two_look_error,
    two_look_levels,
)
from perfgate.analysis.stats.power import MDE_LIMIT_RATIO, min_detectable_slowdown, repeats_needed
from perfgate.analysis.stats.summaries import SampleSummary, log_ratio_from_summaries

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
    "t_estimate",
    "p_beyond",
    "t_test",
    "two_look_error",
    "two_look_levels",
    "variance_components",
]
