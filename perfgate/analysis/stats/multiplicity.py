"""Multiplicity: two looks at one comparison, and many comparisons at once.

Two looks (a first verdict, then more repeats when it is unclear) each test at a nominal
level that together spends exactly ``alpha``: :func:`two_look_error` and
:func:`two_look_levels`, exact for the looks' correlation, which
:func:`paired_look_correlation` and :func:`stored_look_correlation` give for the paired and
the stored-baseline designs. Many phases tested at once are corrected by Holm (family-wise
error) or Benjamini-Hochberg (false discovery rate).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import optimize, special, stats

from perfgate.analysis.stats.logratio import LogRatio, _check_probability

__all__ = [
    "benjamini_hochberg",
    "bh_adjusted",
    "holm",
    "holm_adjusted",
    "paired_look_correlation",
    "stored_look_correlation",
    "two_look_error",
    "two_look_levels",
]


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
