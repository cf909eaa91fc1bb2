"""The ranks of a distributed repeat: one series from many, and the rank that holds the others back.

In DistributedDataParallel every rank waits for the slowest at each all-reduce, so the
step is the slowest rank's. :func:`slowest_rank_series` keeps, per step, the whole series
of the rank whose step was the longest (its phases then add up to its own step).

A slow rank shows in its own phase when the phase is before the all-reduce: a rank slow to
load its batch has a long ``data_wait`` while the others wait in the all-reduce at the end
of backward. A rank whose backward kernels are slower does *not* show a longer backward:
the all-reduce makes every rank's backward end together, the slow rank's backward is all
work and the others' is work plus waiting. So backward is compared without its wait at the
end (``comm``, the exposed all-reduce time each rank records): :data:`BACKWARD_WORK`.

Pure: no torch, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import median

from perfgate.model.result import RepeatResult, RunResult
from perfgate.model.workload import PHASES

COMM = "comm"
"""Per step, the time backward waited at its end for the all-reduce (exposed communication)."""
COMM_TOTAL = "comm_total"
"""Per step, the time any all-reduce bucket was in flight (overlapped with backward or not; CPU)."""
BACKWARD_WORK = "backward_work"
"""Backward without its exposed all-reduce wait: what a rank's own backward kernels took."""
STRAGGLER_SHARE = 0.10
"""A rank is a straggler in a phase when it exceeds the other ranks' median by this share of the step."""


def slowest_rank_series(ranks: Sequence[Mapping[str, Sequence[float]]]) -> dict[str, tuple[float, ...]]:
    """Per step, every series of the rank whose step was the longest (the series all ranks hold)."""
    if not ranks:
        raise ValueError("no ranks")
    names = [name for name in ranks[0] if all(name in r for r in ranks)]
    steps = len(ranks[0]["step"])
    chosen = [max(range(len(ranks)), key=lambda r: ranks[r]["step"][k]) for k in range(steps)]
    return {name: tuple(ranks[chosen[k]][name][k] for k in range(steps)) for name in names}


def rank_rows(series: Mapping[str, Sequence[float]]) -> dict[str, float]:
    """One rank's medians over its steps: the phases, the step, the exposed all-reduce wait and
    backward without it (when the rank recorded ``comm``)."""
    rows = {name: median(series[name]) for name in (*PHASES, "step") if name in series}
    if COMM in series:
        rows[COMM] = median(series[COMM])
        rows[BACKWARD_WORK] = median(b - c for b, c in zip(series["backward"], series[COMM], strict=True))
    if COMM_TOTAL in series:
        rows[COMM_TOTAL] = median(series[COMM_TOTAL])
    return rows


def per_rank_medians(repeats: Sequence[RepeatResult]) -> list[dict[str, float]] | None:
    """Per rank, the median over the repeats of its per-repeat medians (:func:`rank_rows`);
    None for repeats that are not distributed (or disagree on the rank count)."""
    counts = {len(r.ranks) for r in repeats}
    if len(counts) != 1 or counts == {0}:
        return None
    world = counts.pop()
    out = []
    for rank in range(world):
        rows = [rank_rows(r.ranks[rank]) for r in repeats]
        out.append({name: median(row[name] for row in rows) for name in rows[0] if all(name in row for row in rows)})
    return out


def comm_share(repeats: Sequence[RepeatResult]) -> float | None:
    """The exposed all-reduce wait's share of the step, over the repeats' slowest-rank series
    (None: not recorded)."""
    steps = sum(sum(r.phases_ms["step"]) for r in repeats)
    if not repeats or any(COMM not in r.phases_ms for r in repeats) or steps <= 0:
        return None
    return sum(sum(r.phases_ms[COMM]) for r in repeats) / steps


@dataclass(frozen=True)
class Straggler:
    """One rank that holds the others back in one phase, with its evidence."""

    rank: int
    phase: str
    """A phase of the step, or ``backward`` when backward's own work (without the wait) is slower."""
    rank_ms: float
    others_ms: float
    step_ms: float
    others_comm_ms: float | None
    """The other ranks' median exposed all-reduce wait (None: not recorded)."""
    rank_comm_ms: float | None
    whole_backward: tuple[float, float] | None
    """For a backward straggler: the rank's and the others' whole backward (wait included)."""

    @property
    def excess_ms(self) -> float:
        return self.rank_ms - self.others_ms

    @property
    def share(self) -> float:
        return self.excess_ms / self.step_ms if self.step_ms > 0 else 0.0


def stragglers(result: RunResult, share: float = STRAGGLER_SHARE) -> list[Straggler]:
    """Every rank and phase in which that rank exceeds the other ranks' median by more than
    ``share`` of the step (the step's median over ranks), the largest excess first."""
    ranks = per_rank_medians(result.repeats)
    if ranks is None:
        return []
    step = median(r["step"] for r in ranks)
    found = []
    for rank, rows in enumerate(ranks):
        others = [r for i, r in enumerate(ranks) if i != rank]
        for phase in PHASES:
            name = BACKWARD_WORK if phase == "backward" and BACKWARD_WORK in rows else phase
            if name not in rows or any(name not in o for o in others):
                continue
            others_ms = median(o[name] for o in others)
            if rows[name] - others_ms <= share * step:
                continue
            has_comm = COMM in rows and all(COMM in o for o in others)
            found.append(Straggler(
                rank=rank, phase=phase, rank_ms=rows[name], others_ms=others_ms, step_ms=step,
                others_comm_ms=median(o[COMM] for o in others) if has_comm else None,
                rank_comm_ms=rows[COMM] if has_comm else None,
                whole_backward=(rows["backward"], median(o["backward"] for o in others))
                if name == BACKWARD_WORK else None,
            ))
    return sorted(found, key=lambda s: -s.excess_ms)
