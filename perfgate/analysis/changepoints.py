"""Lasting steps in a series of per-run times: E-divisive means with a permutation test.

``find_changes(values)`` takes one value per run in time order (the history's per-run
series, ``perfgate.analysis.history.run_series``) and returns a :class:`ChangePoint` for
each lasting step it finds, in index order. The method is E-divisive means (Matteson and
James, "A Nonparametric Approach for Multiple Change Point Analysis of Multivariate
Data", JASA 2014, doi:10.1080/01621459.2013.849605), the method of Otava (formerly
Hunter) and of MongoDB's signal-processing-algorithms, written here on numpy:

* The series is taken on a log scale, ``x = log(values)``: a slowdown is a factor, so a
  +3% step is the same distance at 10 ms and at 10 s, and a step up and the step back
  down have the same size.
* Within a segment ``[s, e)`` of at least ``2 × min_size`` runs, every split
  ``s < τ < κ ≤ e`` with at least ``min_size`` runs on each side (``X = x[s:τ]``,
  ``Y = x[τ:κ]``, of ``n`` and ``m`` runs) is scored by the divergence of the two samples'
  distributions, with exponent 1::

      Q(τ, κ) = n·m / (n + m) · ( 2/(n·m) Σ|Xi − Yj| − 2/(n(n−1)) Σi<k |Xi − Xk|
                                                     − 2/(m(m−1)) Σj<k |Yj − Yk| )

  (an energy distance: zero in expectation when both sides come from one distribution,
  growing with any difference between them, and using no assumption of normality, so
  one outlying run weighs as a distance, not as a square). A change in spread alone is
  a difference too, and can be reported with a ratio near 1. The segment's candidate is
  the ``τ`` of the largest ``Q``; searching the end ``κ`` too lets a step that is later
  undone (up, then down) stand out in a segment that holds both.
* Binary segmentation: at first the whole series is one segment; each round the
  candidate with the largest ``Q`` over all segments is tested, and when it is
  significant the series is split there and the next round starts; the first
  non-significant candidate ends the search.
* The test is a permutation test of that largest ``Q``: the values are shuffled within
  each current segment (``permutations`` times, 199 by default, with a generator seeded
  by ``seed``: the result is a function of the input alone), the whole search for the
  largest ``Q`` is repeated on each shuffle, and the p-value is
  ``(1 + #{shuffles whose largest Q ≥ the observed}) / (1 + permutations)``. Because the
  shuffles repeat the search over every split, the p-value accounts for having picked the
  best split of many: on a series with no step, a change is reported with probability at
  most ``alpha``, whatever the series' length (any change needs the first round's test
  to pass). Each later round is tested at ``alpha`` too, so beside a real step a further,
  spurious one is reported with a probability of about ``alpha``. A round's shuffles stop
  early once the candidate can no longer reach ``alpha`` (its p-value is then not
  needed: the search ends there).

Each change's ``p_value`` is that of the round that accepted it, and ``confidence`` is
``1 − p_value``; with 199 shuffles the smallest p-value is 0.005. ``before`` and ``after``
are the medians of the runs between the change and its neighbours (the previous and next
change, or the ends), and ``ratio`` is ``after / before``: above 1 the runs got slower.

The cost is quadratic in a segment's length per shuffle (the pairwise distances and the
table of every ``Q``), so a round costs about ``permutations × n²``: on one core, tens of
milliseconds for 200 runs without a step, about 0.2 s with one, about 10 s for 1000 runs.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["ChangePoint", "find_changes"]

PERMUTATIONS = 199
"""Shuffles per round of the permutation test: p-values in steps of 1/200."""
_BATCH_ELEMENTS = 2_000_000
"""Distance-matrix cells computed at once (shuffles × length²): bounds the memory of a batch."""
_BATCH_MAX = 25
"""Shuffles per batch at most, so a round that cannot succeed stops after a few."""


@dataclass(frozen=True)
class ChangePoint:
    """One lasting step in a series of per-run values.

    ``index`` is the first run after the step (``values[index - 1]`` is the last run
    before it). ``start`` is the first run of the segment before the step (the previous
    change point, or 0) and ``stop`` the end, exclusive, of the segment after it (the
    next change point, or the series' length): ``before`` is the median of
    ``values[start:index]``, ``after`` that of ``values[index:stop]``, and ``ratio`` is
    ``after / before`` (1.03 is 3% slower). ``p_value`` is the permutation test's, of the
    round that accepted the change, and ``confidence`` is ``1 - p_value``.
    """

    index: int
    before: float
    after: float
    ratio: float
    p_value: float
    confidence: float
    start: int
    stop: int


def find_changes(values: Sequence[float], *, min_size: int = 5, alpha: float = 0.05,
                 permutations: int = PERMUTATIONS, seed: int = 0) -> list[ChangePoint]:
    """The lasting steps in ``values`` (one positive value per run, in time order), in
    index order; an empty list when there are none.

    ``min_size`` is the fewest runs on each side of a change (and between two changes);
    ``alpha`` the significance level of each round's permutation test, which bounds the
    chance of reporting a change in a series without one; ``permutations`` the shuffles
    per round; ``seed`` seeds them (same input, same answer).

    Raises ``ValueError`` with a one-line message for a series shorter than
    ``2 × min_size``, for a value that is not a finite positive number (the method works
    on logarithms), and for parameters out of range (``min_size`` below 2, ``alpha`` not
    in ``[1 / (permutations + 1), 1)``).
    """
    if isinstance(min_size, bool) or not isinstance(min_size, int) or min_size < 2:
        raise ValueError(f"min_size must be an integer of at least 2, got {min_size!r}")
    if isinstance(permutations, bool) or not isinstance(permutations, int) or permutations < 1:
        raise ValueError(f"permutations must be a positive integer, got {permutations!r}")
    if not (isinstance(alpha, (int, float)) and 1 / (permutations + 1) <= alpha < 1):
        raise ValueError(f"alpha must be at least 1/(permutations + 1) = {1 / (permutations + 1):.4g} "
                         f"and below 1, got {alpha!r}")
    try:
        raw = np.asarray(values, dtype=float)
    except (TypeError, ValueError):
        raise ValueError("change points need a sequence of numbers") from None
    if raw.ndim != 1:
        raise ValueError(f"change points need a one-dimensional series, got shape {raw.shape}")
    n = len(raw)
    if n < 2 * min_size:
        raise ValueError(f"change points need at least {2 * min_size} runs (2 × min_size {min_size}), got {n}")
    bad = np.flatnonzero(~(np.isfinite(raw) & (raw > 0)))
    if bad.size:
        raise ValueError(f"change points need finite positive values (they work on logarithms); "
                         f"run {int(bad[0])} is {raw[bad[0]]!r}")
    x = np.log(raw)
    rng = np.random.default_rng(seed)
    # the largest count of shuffles at or above the observed Q that still gives p <= alpha
    allowed = math.floor(alpha * (permutations + 1) + 1e-9) - 1
    bounds = [0, n]
    best: dict[tuple[int, int], tuple[float, int]] = {}
    accepted: dict[int, float] = {}
    while True:
        segments = [(a, b) for a, b in itertools.pairwise(bounds) if b - a >= 2 * min_size]
        if not segments:
            break
        for seg in segments:
            if seg not in best:
                qs, taus = _best_splits(x[None, seg[0]:seg[1]], min_size)
                best[seg] = (float(qs[0]), seg[0] + int(taus[0]))
        seg = max(segments, key=lambda s: best[s][0])
        q_obs, tau = best[seg]
        p_value = _permutation_p(x, segments, q_obs, min_size, permutations, allowed, rng)
        if p_value is None:
            break
        accepted[tau] = p_value
        bounds = sorted({*bounds, tau})
    return _describe(raw, bounds, accepted)


def _permutation_p(x: np.ndarray, segments: list[tuple[int, int]], q_obs: float, min_size: int,
                   permutations: int, allowed: int, rng: np.random.Generator) -> float | None:
    """The p-value of ``q_obs``, the largest ``Q`` over ``segments``, by shuffling within
    each segment; None as soon as more than ``allowed`` shuffles reach it (not significant)."""
    longest = max(b - a for a, b in segments)
    batch = max(1, min(_BATCH_MAX, _BATCH_ELEMENTS // (longest * longest)))
    tolerance = 1e-9 * abs(q_obs)
    reached = 0
    done = 0
    while done < permutations:
        size = min(batch, permutations - done)
        largest = np.full(size, -np.inf)
        for a, b in segments:
            shuffled = rng.permuted(np.broadcast_to(x[a:b], (size, b - a)), axis=1)
            largest = np.maximum(largest, _best_splits(shuffled, min_size)[0])
        reached += int(np.count_nonzero(largest >= q_obs - tolerance))
        done += size
        if reached > allowed:
            return None
    return (1 + reached) / (1 + permutations)


def _best_splits(xs: np.ndarray, min_size: int) -> tuple[np.ndarray, np.ndarray]:
    """For each row of ``xs`` (one segment each, ``L`` values), the largest ``Q(τ, κ)`` over
    ``min_size ≤ τ``, ``τ + min_size ≤ κ ≤ L`` and the ``τ`` where it is reached.

    With ``S[a, b]`` the sum of the distances ``|x_i - x_j|`` over ``i < a, j < b`` (a
    two-dimensional cumulative sum), the between-sides sum is ``S[τ, κ] - S[τ, τ]``, the
    within-X sum over pairs ``S[τ, τ] / 2`` and the within-Y sum
    ``(S[κ, κ] - 2 S[τ, κ] + S[τ, τ]) / 2``, so ``Q = a·S[τ, κ] - b·S[τ, τ] - c·S[κ, κ]``
    with weights that depend only on ``n`` and ``m`` (:func:`_weights`): every ``Q`` of a
    segment from one ``L × L`` table.
    """
    rows, length = xs.shape
    table = np.subtract(xs[:, :, None], xs[:, None, :])
    np.abs(table, out=table)
    np.cumsum(table, axis=1, out=table)
    np.cumsum(table, axis=2, out=table)  # table[:, a - 1, b - 1] is S[a, b]
    a, b, c, blocked = _weights(length, min_size)
    taus = np.arange(min_size, length - min_size + 1)
    kappas = np.arange(2 * min_size, length + 1)
    s_tk = table[:, min_size - 1:length - min_size, 2 * min_size - 1:length]
    s_tt = table[:, taus - 1, taus - 1][:, :, None]
    s_kk = table[:, kappas - 1, kappas - 1][:, None, :]
    q = a * s_tk
    q -= b * s_tt
    q -= c * s_kk
    q += blocked
    flat = q.reshape(rows, -1)
    where = flat.argmax(axis=1)
    return flat[np.arange(rows), where], taus[where // len(kappas)]


@functools.lru_cache(maxsize=64)
def _weights(length: int, min_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The weights of ``S[τ, κ]``, ``S[τ, τ]`` and ``S[κ, κ]`` in ``Q(τ, κ)`` on the grid of
    ``τ`` (rows) and ``κ`` (columns) of a segment of ``length`` values, and a grid that is 0
    where the split is allowed and ``-inf`` where the right side is under ``min_size``.

    From ``Q = n·m/(n+m) · (2 (S[τ,κ] - S[τ,τ]) / (n·m) - S[τ,τ] / (n(n-1))
    - (S[κ,κ] - 2 S[τ,κ] + S[τ,τ]) / (m(m-1)))``."""
    n = np.arange(min_size, length - min_size + 1, dtype=float)[:, None]
    m = np.arange(2 * min_size, length + 1, dtype=float)[None, :] - n
    allowed = m >= min_size
    m = np.where(allowed, m, 2.0)  # any value with m(m-1) > 0; the split is blocked below
    scale = n * m / (n + m)
    a = scale * (2 / (n * m) + 2 / (m * (m - 1)))
    b = scale * (2 / (n * m) + 1 / (n * (n - 1)) + 1 / (m * (m - 1)))
    c = scale / (m * (m - 1))
    blocked = np.where(allowed, 0.0, -np.inf)
    out = (np.where(allowed, a, 0.0), np.where(allowed, b, 0.0), np.where(allowed, c, 0.0), blocked)
    for grid in out:
        grid.setflags(write=False)
    return out


def _describe(raw: np.ndarray, bounds: list[int], accepted: dict[int, float]) -> list[ChangePoint]:
    out = []
    for k in range(1, len(bounds) - 1):
        start, index, stop = bounds[k - 1], bounds[k], bounds[k + 1]
        before = float(np.median(raw[start:index]))
        after = float(np.median(raw[index:stop]))
        p_value = accepted[index]
        out.append(ChangePoint(index=index, before=before, after=after, ratio=after / before,
                               p_value=p_value, confidence=1.0 - p_value, start=start, stop=stop))
    return out
