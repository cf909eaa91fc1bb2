"""Sequential looks: α spent over many looks by a spending function.

The gate looks again after every block (paired) or repeat (stored baseline), from its first
look up to a planned maximum, and stops a workload as soon as it is decided. Each look tests
at a *nominal* one-sided level that this module computes so that the chance of ever crossing
the boundary, over all looks, is exactly the total α (a group-sequential boundary; Lan and
DeMets' α-spending, with Hwang, Shih and DeCani's family of spending functions).

- The statistic at look k is ``Z_k = W(t_k) / sqrt(t_k)`` with ``W`` a Brownian motion and
  ``t_k`` the look's information fraction (its count over the last look's: blocks for a
  paired gate, whose blocks are independent; repeats for a stored baseline, whose looks are
  more correlated than that, so the boundary errs on the safe side there, by Slepian's
  inequality).
- ``spent(t) = α (1 - exp(-γ t)) / (1 - exp(-γ))`` (γ = 0: ``α t``). A larger γ spends more
  early (γ = 1 is close to Pocock's boundary, γ = -4 to O'Brien and Fleming's). The gate's
  default is chosen by simulation (docs/deciding.md, "Sequential looks").
- The boundary is found by the recursive numerical integration of Armitage, McPherson and
  Rowe: the density of ``W`` on the continuation region is carried from look to look on a
  grid, and each look's boundary solves ``P(first crossing at look k) = spent(t_k) -
  spent(t_{k-1})``.

The boundary above is exact for z statistics. The paired gate's statistic is a t statistic
on J - 1 degrees of freedom, whose process over the looks is pivotal (its law under the null
depends on nothing unknown) but is not a Brownian motion: the z boundary's levels applied to
t p-values crossed at 1.11-1.13% for α = 1% (and the PASS rule's 2.5% at 2.74%). So a
``Schedule`` with ``pivot="t"`` finds its boundary on the t process itself
(:func:`t_boundary`): null paths of independent normal block contrasts are simulated once
(a fixed seed: the measuring job, the judge and a rerun find the same boundary), and at look
k the critical value ``c_k`` is the order statistic of the paths not yet stopped such that
the share of paths first crossing at look k equals the spending increment exactly. Each
look's level is then ``P(t_{n_k - 1} > c_k)``, the t tail of that boundary on the look's
own degrees of freedom, so a p-value (or an interval) at that level is the boundary itself:
no other place converts a level to a boundary. The default schedules' boundaries are
tabulated from 10^7 paths (``t_boundaries.json``, written by
``benchmarks/t_boundaries.py``); others are computed from 10^6 paths (about a second) and
kept for the process.

A run that stops before its last planned look (its time budget spent) has spent less than
α: stopping early never raises the error. Nothing here knows about workloads or verdicts.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import math
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources

import numpy as np
from scipy import fft as sp_fft
from scipy import optimize, special

__all__ = ["DEFAULT_GAMMA", "PIVOTS", "Schedule", "crossing_levels", "information_levels", "spent", "spent_t_boundary",
           "t_boundary"]

DEFAULT_GAMMA = 1.0
"""The spending function's γ: near Pocock's boundary, which spends early enough that a gate
stopped by its budget at a third of its planned blocks has spent most of its α."""

_GRID_PER_SD = 16
"""Grid points per standard deviation of the smallest increment between looks (on fractions
drawn at random, the levels are within 0.5% of a grid four times as fine; median 0.1%)."""
_MAX_GRID = 1600
"""At most this many grid points: with hundreds of looks the grid stays coarse enough to be fast."""
_TAIL_SD = 9.0
"""How far below zero (in sd of W at the look) the grid reaches; the mass lost there is < 1e-18."""
_NEWTON_STEPS = 40
"""Newton steps a look's bound may take before Brent's method finds it instead."""


def spent(t: float, alpha: float, gamma: float = DEFAULT_GAMMA) -> float:
    """α spent by information fraction ``t`` (0 ≤ t ≤ 1) under Hwang-Shih-DeCani(γ)."""
    if t >= 1.0:
        return alpha  # exactly: a single look tests at the whole α
    t = max(t, 0.0)
    if abs(gamma) < 1e-12:
        return alpha * t
    return alpha * math.expm1(-gamma * t) / math.expm1(-gamma)


def _norm_sf(x: np.ndarray | float) -> np.ndarray | float:
    return special.ndtr(-np.asarray(x, dtype=float)) if isinstance(x, np.ndarray) else float(special.ndtr(-x))


_SQRT_2PI = math.sqrt(2.0 * math.pi)


def _phi(z: np.ndarray) -> np.ndarray:
    return np.exp(-0.5 * z * z) / _SQRT_2PI


def _grid(lo: float, top: float, step: float) -> tuple[np.ndarray, np.ndarray, int]:
    """The points ``lo + i * step`` below ``top``, then ``top`` itself, with their trapezoid
    weights, and the number of evenly spaced points. On such grids the density carried from one
    look to the next is a convolution of the evenly spaced points (their differences are
    multiples of ``step``), plus the two end points' terms."""
    even = lo + step * np.arange(max(int(math.floor((top - lo) / step)), 0) + 1)
    if even.size > 1 and top - even[-1] < 1e-9 * step:
        even = even[:-1]
    x = np.append(even, top)
    w = np.full(x.size, step)
    last = top - even[-1]
    w[0] = step / 2.0
    w[even.size - 1] = (step + last) / 2.0 if even.size > 1 else last / 2.0
    w[-1] = last / 2.0
    return x, w, even.size


def _convolve(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    size = a.size + b.size - 1
    n = sp_fft.next_fast_len(size, real=True)
    return sp_fft.irfft(sp_fft.rfft(a, n) * sp_fft.rfft(b, n), n)[:size]


def _beyond(mass: np.ndarray, x: np.ndarray, sd: float, bound: float) -> float:
    """``P(W + N(0, sd^2) > bound)`` for the carried ``mass`` at ``x``: the chance of crossing ``bound``."""
    return float(np.dot(mass, _norm_sf((bound - x) / sd)))


def _boundary(mass: np.ndarray, x: np.ndarray, sd: float, target: float, guess: float, low: float,
              high: float) -> float:
    """The bound b with ``P(W + N(0, sd^2) > b) = target`` for the carried ``mass`` at ``x``:
    Newton's method from ``guess`` (the crossing probability is smooth and decreasing in b),
    Brent's within ``low``-``high`` where Newton leaves the bracket or does not settle."""
    b = guess
    for _ in range(_NEWTON_STEPS):
        z = (b - x) / sd
        value = float(np.dot(mass, _norm_sf(z))) - target
        slope = -float(np.dot(mass, _phi(z))) / sd
        if slope == 0.0 or not math.isfinite(value):
            break
        move = value / slope
        b -= move
        if not low < b < high:
            break
        if abs(move) < 1e-10:
            return b
    return float(optimize.brentq(lambda bound: _beyond(mass, x, sd, bound) - target, low, high,
                                 xtol=1e-12, rtol=1e-12))


@functools.lru_cache(maxsize=8192)
def crossing_levels(alpha: float, fractions: tuple[float, ...], gamma: float = DEFAULT_GAMMA) -> tuple[float, ...]:
    """The nominal one-sided level of each look, for total ``alpha`` over looks at the
    information ``fractions`` (increasing, the last one 1).

    ``P(Z_1 > c_1 or ... or Z_K > c_K) = alpha`` under the null, with look k's share of it
    ``spent(t_k) - spent(t_{k-1})``; the level of look k is ``1 - Phi(c_k)``. One look: ``alpha``.
    """
    if not (isinstance(alpha, float) and 0.0 < alpha < 1.0):
        raise ValueError(f"alpha must be a float between 0 and 1, got {alpha!r}")
    t = np.asarray(fractions, dtype=float)
    if t.size == 0 or not np.all(np.isfinite(t)) or t[0] <= 0 or abs(t[-1] - 1.0) > 1e-12 or np.any(np.diff(t) <= 0):
        raise ValueError(f"fractions must increase from above 0 to exactly 1, got {fractions!r}")
    levels: list[float] = []
    # Look 1: W(t1) ~ N(0, t1).
    target = spent(t[0], alpha, gamma)
    c = -float(special.ndtri(target)) if target > 0 else math.inf
    levels.append(target)
    if t.size == 1:
        return tuple(levels)
    lo = -_TAIL_SD * math.sqrt(t[-1])
    ceiling = _TAIL_SD * math.sqrt(t[-1])
    step = max(min(float(np.min(np.diff(t))), float(t[0])) ** 0.5 / _GRID_PER_SD, 2 * -lo / _MAX_GRID)
    x, w, even = _grid(lo, min(c * math.sqrt(t[0]), ceiling), step)
    density = _phi(x / math.sqrt(t[0])) / math.sqrt(t[0])
    previous = spent(t[0], alpha, gamma)
    z_last = c if math.isfinite(c) else 3.0
    for k in range(1, t.size):
        sd = math.sqrt(float(t[k] - t[k - 1]))
        mass = density * w
        now = spent(t[k], alpha, gamma)
        target = now - previous
        previous = now
        if target <= 0:
            bk = math.inf
        else:
            high = x[-1] + 12.0 * sd
            if _beyond(mass, x, sd, high) >= target:  # numerically nothing left to spend here
                bk = high
            else:
                bk = _boundary(mass, x, sd, target, z_last * math.sqrt(t[k]), x[0] - 12.0 * sd, high)
        levels.append(float(special.ndtr(-bk / math.sqrt(t[k]))) if math.isfinite(bk) else 0.0)
        if math.isfinite(bk):
            z_last = bk / math.sqrt(t[k])
        if k == t.size - 1:
            break
        nx, nw, n_even = _grid(lo, min(bk, ceiling), step)
        new = np.empty(nx.size)
        offsets = np.arange(-(even - 1), n_even) * step  # new even point i minus old even point j
        new[:n_even] = _convolve(mass[:even], _phi(offsets / sd) / sd)[even - 1:even - 1 + n_even]
        new[:n_even] += mass[-1] * _phi((nx[:n_even] - x[-1]) / sd) / sd  # from the old top
        new[-1] = float(np.dot(mass, _phi((nx[-1] - x) / sd))) / sd  # to the new top
        density = np.maximum(new, 0.0)  # the transform's rounding leaves tiny negatives far in the tails
        x, w, even = nx, nw, n_even
    return tuple(levels)


PIVOTS = ("z", "t", "information")
"""How a schedule's levels are found: ``"z"``, the Brownian boundary (:func:`crossing_levels`)
at the counts' share of the last count; ``"t"``, the exact boundary of a one-sample t on
``count - 1`` degrees of freedom (:func:`t_boundary`), the paired gate's block contrasts;
``"information"``, the Brownian boundary at each estimate's own information fractions
(:func:`information_levels`), the stored baseline's, whose variance more current repeats
shrink only in part (without them, the count's share)."""

SIMULATED_PATHS = 1_000_000
"""Null paths behind a boundary that is not tabulated (the crossing share of each look is
exact on them; the true error of the whole boundary is then within about 1% of α)."""
TABLE_PATHS = 10_000_000
"""Null paths behind the tabulated boundaries (``t_boundaries.json``)."""
SEED = 20261204
"""The simulation's seed: every process that plans the same looks finds the same boundary."""
STANDARD_ALPHAS = tuple(sorted({round(0.01 / s, 12) for s in range(1, 9)} | {0.025, 0.005, 0.0025}))
"""The levels one simulation computes beside the one asked for (α / s for the Holm steps of up
to 8 hypotheses at the default α, α/2 and α/4, and the PASS rule's 2.5%): one pass over the
paths serves them all."""

_TABLE_FILE = "t_boundaries.json"
_lock = threading.Lock()
_computed: dict[tuple[tuple[int, ...], float, int], dict[float, tuple[float, ...]]] = {}


def _alpha_key(alpha: float) -> float:
    return round(float(alpha), 12)


@functools.lru_cache(maxsize=1)
def _table() -> dict[tuple[tuple[int, ...], float], dict[float, tuple[float, ...]]]:
    """The tabulated boundaries: {(counts, gamma): {alpha: critical t per look}}."""
    try:
        text = resources.files("perfgate.analysis.stats").joinpath(_TABLE_FILE).read_text(encoding="utf-8")
    except (FileNotFoundError, OSError):
        return {}
    data = json.loads(text)
    if data.get("schema") != 1:
        raise ValueError(f"{_TABLE_FILE}: schema {data.get('schema')!r}, expected 1")
    out: dict[tuple[tuple[int, ...], float], dict[float, tuple[float, ...]]] = {}
    for entry in data["schedules"]:
        key = (tuple(int(c) for c in entry["counts"]), float(entry["gamma"]))
        out[key] = {_alpha_key(float(a)): tuple(float(c) for c in crit) for a, crit in entry["critical"].items()}
    return out


class _TPaths:
    """Null paths of a one-sample t process, drawn look by look, and the boundary each level's
    spending sets on them so far: the one simulation behind :func:`simulate_t_boundaries` (the
    looks planned at once) and :func:`spent_t_boundary` (the looks added as the gate takes them).

    Look k's draws depend only on the looks before it, so the boundary of the first k looks is
    the same whatever comes after: a gate can add its looks one at a time."""

    def __init__(self, levels: Sequence[float], gamma: float, paths: int, seed: int) -> None:
        self.levels = sorted({_alpha_key(a) for a in levels})
        if not self.levels or not all(0.0 < a < 0.5 for a in self.levels):
            raise ValueError(f"alphas must lie between 0 and 0.5, got {self.levels!r}")
        self.gamma, self.paths = float(gamma), paths
        self.rng = np.random.Generator(np.random.PCG64(seed))
        # The top of each look's t values holds every path a boundary can stop there, and at
        # most max(alphas) * paths paths are stopped already: rank only that many.
        most = int(max(self.levels) * paths)
        self.top = min(paths, most * 2 + most + 2048)
        self.alive = {a: np.ones(paths, dtype=bool) for a in self.levels}
        self.critical: dict[float, list[float]] = {a: [] for a in self.levels}
        self.counts: list[int] = []
        self.fractions: list[float] = []
        self.total = np.zeros(paths)
        self.m2 = np.zeros(paths)

    def add(self, count: int, fraction: float) -> None:
        """One more look at ``count`` observations, α spent up to information ``fraction``."""
        n = self.counts[-1] if self.counts else 0
        if count <= n or (not self.counts and count < 2):
            raise ValueError(f"counts must increase from at least 2, got {[*self.counts, count]!r}")
        before = self.fractions[-1] if self.fractions else 0.0
        if not (math.isfinite(fraction) and 0.0 <= before <= fraction <= 1.0):
            raise ValueError(f"spending fractions must not decrease and lie in [0, 1], got {[*self.fractions, fraction]!r}")
        paths, rng = self.paths, self.rng
        g = count - n
        new_sum = rng.standard_normal(paths) * math.sqrt(g)
        new_ss = rng.chisquare(g - 1, paths) if g > 1 else np.zeros(paths)
        if n == 0:
            self.total, self.m2 = new_sum, new_ss
        else:
            delta = self.total / n - new_sum / g
            self.m2 = self.m2 + new_ss + delta * delta * (n * g / count)
            self.total = self.total + new_sum
        with np.errstate(divide="ignore", invalid="ignore"):
            t = self.total / np.sqrt(self.m2 * count / (count - 1))
        t = np.nan_to_num(t, nan=0.0, posinf=np.inf, neginf=-np.inf)
        top = self.top
        head = np.argpartition(t, paths - top)[paths - top:] if top < paths else np.arange(paths)
        head = head[np.argsort(-t[head], kind="stable")]
        for a in self.levels:
            want = (spent(fraction, a, self.gamma) - (spent(before, a, self.gamma) if self.counts else 0.0)) * paths
            ranked = t[head[self.alive[a][head]]]
            if want <= 0 or ranked.size < 2:
                c = math.inf
            else:
                j = min(int(round(want)), ranked.size - 1)  # paths to stop here, to half a path
                # halfway between the j-th and (j+1)-th largest t of the paths still going
                c = (float(ranked[j - 1]) + float(ranked[j])) / 2.0 if j > 0 else \
                    float(ranked[0]) + abs(float(ranked[0]) - float(ranked[1])) / 2.0
                self.alive[a] &= ~(t > c)
            self.critical[a].append(c)
        self.counts.append(count)
        self.fractions.append(fraction)


def simulate_t_boundaries(alphas: Iterable[float], counts: Sequence[int], gamma: float = DEFAULT_GAMMA, *,
                          paths: int = SIMULATED_PATHS, seed: int = SEED) -> dict[float, tuple[float, ...]]:
    """The critical one-sample t of every look at ``counts`` (J observations at each, J - 1
    df), for each total level in ``alphas``, spent by Hwang-Shih-DeCani(``gamma``) over the
    information fractions ``count / counts[-1]``.

    Simulated on ``paths`` null paths of independent standard normal observations, drawn
    look by look: between looks only the new observations' sum (normal) and their own sum
    of squares about their mean (chi-square) are needed. At each look the paths not yet
    stopped by a level's boundary are ranked by their t, and the boundary is set where the
    share of paths crossing there is that look's spending increment (halfway between two
    order statistics: exact to half a path). Every level is found on the same paths.
    """
    counts = tuple(int(c) for c in counts)
    if not counts or counts[0] < 2 or any(b <= a for a, b in itertools.pairwise(counts)):
        raise ValueError(f"counts must increase from at least 2, got {counts!r}")
    sim = _TPaths(list(alphas), gamma, paths, seed)
    for count in counts:
        sim.add(count, count / counts[-1])
    return {a: tuple(sim.critical[a]) for a in sim.levels}


_spending_sims: list[_TPaths] = []
"""The simulations :func:`spent_t_boundary` keeps, the latest used last (a few: gates judged one
after the other in one process each add their own looks)."""
_KEPT_SIMULATIONS = 4


def spent_t_boundary(alpha: float, counts: Sequence[int], fractions: Sequence[float], gamma: float = DEFAULT_GAMMA,
                     *, paths: int = SIMULATED_PATHS) -> tuple[float, ...]:
    """The critical one-sample t of every look at ``counts`` for a total one-sided level
    ``alpha`` spent by Hwang-Shih-DeCani(``gamma``) up to the information ``fractions`` each look
    reached (not decreasing, at most 1; a look at 1 spends what is left, so the gate's last look
    spends all of α wherever it falls).

    The fractions are any scale the gate completes, such as the share of its wall-time budget
    measured when the look is taken: a boundary spent over a plan the gate never reaches
    loses the α of its missing looks. A look's boundary depends only on the looks before it,
    so the gate adds its looks one at a time; the simulation (:data:`SEED`, ``paths`` null
    paths, with :data:`STANDARD_ALPHAS` beside ``alpha``) is kept for the process and extended
    look by look, so a gate of K looks draws its paths once, not K times; the measuring job and
    the judge, given the same counts and fractions, find the same boundary."""
    if not (isinstance(alpha, float) and 0.0 < alpha < 0.5):
        raise ValueError(f"alpha must be a float between 0 and 0.5, got {alpha!r}")
    counts = tuple(int(c) for c in counts)
    fractions = tuple(float(f) for f in fractions)
    if len(counts) != len(fractions) or not counts:
        raise ValueError(f"one spending fraction per look: {len(counts)} looks, {len(fractions)} fractions")
    key = _alpha_key(alpha)
    k = len(counts)
    with _lock:
        def same_looks(sim: _TPaths) -> bool:
            """``sim`` simulated these looks so far (or these looks begin its)."""
            n = min(k, len(sim.counts))
            return (sim.gamma == float(gamma) and sim.paths == paths
                    and tuple(sim.counts[:n]) == counts[:n] and tuple(sim.fractions[:n]) == fractions[:n])

        sim = next((s for s in reversed(_spending_sims) if same_looks(s) and key in s.critical), None)
        if sim is None:
            # a level not simulated yet on these looks: simulate them again with it, keeping the others
            prior = next((s for s in reversed(_spending_sims) if same_looks(s)), None)
            if prior is not None:
                _spending_sims.remove(prior)
            sim = _TPaths(sorted({key, *STANDARD_ALPHAS, *(prior.levels if prior else ())}), gamma, paths, SEED)
            del _spending_sims[:max(0, len(_spending_sims) - _KEPT_SIMULATIONS + 1)]
        else:
            _spending_sims.remove(sim)
        _spending_sims.append(sim)
        for count, fraction in zip(counts[len(sim.counts):], fractions[len(sim.fractions):], strict=True):
            sim.add(count, fraction)
        return tuple(sim.critical[key][:k])


def t_boundary(alpha: float, counts: Sequence[int], gamma: float = DEFAULT_GAMMA) -> tuple[float, ...]:
    """The critical one-sample t (J - 1 df at J = each count) of every look at ``counts``,
    for a total one-sided level ``alpha`` spent by Hwang-Shih-DeCani(``gamma``): tabulated
    for the default schedules, else simulated once per process (:func:`simulate_t_boundaries`)
    together with :data:`STANDARD_ALPHAS`. One look: the t quantile itself."""
    if not (isinstance(alpha, float) and 0.0 < alpha < 0.5):
        raise ValueError(f"alpha must be a float between 0 and 0.5, got {alpha!r}")
    counts = tuple(int(c) for c in counts)
    if len(counts) == 1:
        return (float(special.stdtrit(counts[0] - 1, 1.0 - alpha)),)
    key = _alpha_key(alpha)
    tabulated = _table().get((counts, float(gamma)))
    if tabulated is not None and key in tabulated:
        return tabulated[key]
    cache_key = (counts, float(gamma), SIMULATED_PATHS)
    with _lock:
        known = _computed.setdefault(cache_key, {})
        if key not in known:
            wanted = {key, *(a for a in STANDARD_ALPHAS if a not in known)}
            known.update(simulate_t_boundaries(wanted, counts, gamma))
        return known[key]


INFORMATION_STEP = 0.005
"""Information fractions are taken to this step (down, the last one stays 1); looks that
fall on the same step hold the same information and share one level: the later one spends
nothing more (its statistic is the earlier one's, to that step)."""


@functools.lru_cache(maxsize=8192)
def information_levels(alpha: float, information: tuple[float, ...], gamma: float = DEFAULT_GAMMA) -> tuple[float, ...]:
    """The nominal one-sided level of each look at the information fractions ``information``
    (non-decreasing, the last 1), α spent by Hwang-Shih-DeCani(``gamma``) over the information.

    The fractions are taken down to :data:`INFORMATION_STEP`; looks sharing a step share the
    level of the first of them. A first look that already holds (to the step) all the
    information tests at the whole α."""
    f = np.asarray(information, dtype=float)
    if f.size == 0 or not np.all(np.isfinite(f)) or f[0] <= 0 or abs(f[-1] - 1.0) > 1e-9 or np.any(np.diff(f) < -1e-12):
        raise ValueError(f"information must not decrease and end at 1, got {information!r}")
    steps = np.floor(f / INFORMATION_STEP + 1e-9) * INFORMATION_STEP
    steps[-1] = 1.0
    steps = np.maximum(steps, INFORMATION_STEP)
    distinct = sorted(set(np.round(steps, 6).tolist()))
    levels = crossing_levels(float(alpha), tuple(distinct), float(gamma))
    by_step = dict(zip(distinct, levels, strict=True))
    return tuple(by_step[v] for v in np.round(steps, 6).tolist())


@dataclass(frozen=True)
class Schedule:
    """The planned looks of one workload: at ``first`` blocks (or repeats), then after every
    ``every`` more, up to ``last``; α is spent over them by γ.

    ``Schedule(n, n)`` is a single look at n, which tests at the whole α.
    """

    first: int
    last: int
    every: int = 1
    gamma: float = DEFAULT_GAMMA
    pivot: str = "z"
    """``"t"``: the looks test one-sample t statistics on ``count - 1`` df, and their levels come
    from the exact t boundary (:func:`t_boundary`); ``"z"``: the Brownian boundary (:data:`PIVOTS`)."""
    spending: tuple[float, ...] | None = None
    """A budget's gate (``pivot="t"``, ``every`` 1): the information fraction each look taken so
    far reached on a scale the gate completes (the share of its wall-time budget measured), α
    spent up to it (:func:`spent_t_boundary`); a look at 1 is the last, wherever it falls, and
    spends all that is left. None: spent over the counts' share of ``last``."""

    def __post_init__(self) -> None:
        for name in ("first", "last", "every"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"Schedule.{name} must be a positive integer, got {value!r}")
        if self.last < self.first:
            raise ValueError(f"the last look ({self.last}) comes before the first ({self.first})")
        if not (isinstance(self.gamma, (int, float)) and math.isfinite(self.gamma) and -40 <= self.gamma <= 40):
            raise ValueError(f"Schedule.gamma must be a number from -40 to 40, got {self.gamma!r}")
        if self.pivot not in PIVOTS:
            raise ValueError(f"Schedule.pivot must be one of {', '.join(PIVOTS)}, got {self.pivot!r}")
        if self.pivot == "t" and self.first < 2:
            raise ValueError(f"a t boundary needs at least 2 blocks at the first look, got {self.first}")
        if self.spending is not None:
            f = self.spending
            if self.pivot != "t" or self.every != 1:
                raise ValueError("spending fractions need a t schedule with a look after every block")
            if (len(f) > self.last - self.first + 1 or not all(isinstance(v, float) and 0.0 <= v <= 1.0 for v in f)
                    or any(b < a for a, b in itertools.pairwise(f)) or (len(f) == self.last - self.first + 1 and f
                                                                      and f[-1] != 1.0)):
                raise ValueError(f"Schedule.spending must hold, for the looks taken, fractions in [0, 1] that do not "
                                 f"decrease, the last look's 1: got {f!r}")

    @property
    def closed(self) -> bool:
        """A budget's gate whose last look is taken (its spending reached 1)."""
        return self.spending is not None and len(self.spending) > 0 and self.spending[-1] >= 1.0

    @property
    def counts(self) -> tuple[int, ...]:
        """The counts at which the looks fall; the last one is ``last``, or the look a budget's
        gate closed at (:attr:`closed`)."""
        out = (*range(self.first, self.last, self.every), self.last)
        return out[:len(self.spending)] if self.spending is not None and self.closed else out

    def spend(self, count: int, fraction: float) -> Schedule:
        """This budget's schedule with the look at ``count`` taken, α spent up to ``fraction``
        (at most 1; 1 makes it the last look; a fraction below the last look's is that one's)."""
        taken = self.spending or ()
        if self.first + len(taken) != count:
            raise ValueError(f"the next look of this schedule falls at {self.first + len(taken)}, not {count}")
        fraction = 1.0 if count >= self.last else min(1.0, max(float(fraction), taken[-1] if taken else 0.0))
        return dataclasses.replace(self, spending=(*taken, fraction))

    @property
    def looks(self) -> int:
        return len(self.counts)

    def look_at(self, count: int) -> int | None:
        """The 1-based number of the look at ``count``, or None when no look falls there."""
        counts = self.counts
        return counts.index(count) + 1 if count in counts else None

    def level(self, alpha: float, count: int, information: Sequence[float] | None = None) -> float:
        """The nominal one-sided level of the look at ``count`` for a total ``alpha``.

        ``information`` (``pivot="information"`` only): the information fraction of every planned look
        (increasing, the last 1), when it is not the count's share of the last count: the
        stored design's estimate carries a baseline and day variance that more current
        repeats do not shrink, so its information grows far slower than its count
        (:func:`information_levels`)."""
        look = self.look_at(count)
        if look is None:
            raise ValueError(f"no look falls at {count} (looks: {_counts_text(self.counts)})")
        if self.looks == 1:
            return float(alpha)  # one look: the whole level, whatever the statistic
        if self.pivot == "t":
            if information is not None:
                raise ValueError("a t schedule's information is its count")
            if self.spending is not None and self.spending[look - 1] >= 1.0 and look == 1:
                return float(alpha)  # closed at its first look: the whole level
            return float(special.stdtr(count - 1, -self.critical(alpha, count)))
        if information is not None:
            if self.pivot != "information":
                raise ValueError("only an information schedule takes information fractions")
            return information_levels(float(alpha), tuple(information), float(self.gamma))[look - 1]
        fractions = tuple(c / self.last for c in self.counts)
        return crossing_levels(float(alpha), fractions, float(self.gamma))[look - 1]

    def critical(self, alpha: float, count: int) -> float:
        """The critical t of the look at ``count`` (``pivot="t"`` only): the boundary itself."""
        look = self.look_at(count)
        if look is None:
            raise ValueError(f"no look falls at {count} (looks: {_counts_text(self.counts)})")
        if self.pivot != "t":
            raise ValueError("a z schedule has levels, not a t boundary")
        if self.spending is not None:
            if look > len(self.spending):
                raise ValueError(f"the look at {count} is not taken yet: its share of the budget is not known")
            if look == 1 and self.spending[0] >= 1.0:
                return float(special.stdtrit(count - 1, 1.0 - float(alpha)))
            return spent_t_boundary(float(alpha), self.counts[:look], self.spending[:look], float(self.gamma))[look - 1]
        return t_boundary(float(alpha), self.counts, float(self.gamma))[look - 1]

    def describe(self) -> str:
        if self.spending is not None:
            spent_text = f"{self.spending[-1] * 100:.0f}% of the budget" if self.spending else "none yet"
            return (f"a look after every block from {self.first}, α spent by Hwang-Shih-DeCani(γ={self.gamma:g}) over the "
                    f"share of the wall-time budget measured ({spent_text}), all of it at the last look")
        if self.looks == 1:
            return f"one look at {self.last}"
        return (f"looks at {_counts_text(self.counts)}, α spent by Hwang-Shih-DeCani(γ={self.gamma:g}) over "
                f"{self.looks} looks")


def _counts_text(counts: Sequence[int]) -> str:
    if len(counts) <= 4:
        return ", ".join(str(c) for c in counts)
    return f"{counts[0]}, {counts[1]}, …, {counts[-1]}"
