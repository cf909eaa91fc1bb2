"""Sharding: the share of the selected workloads that one of N runners measures.

``--shard I/N`` (``perfgate run``, ``perfgate gate``, ``perfgate ci``) keeps the workloads
whose position in the selection sorted by name, counted from 0, leaves the remainder
I - 1 when divided by N: round robin over the sorted names. The split depends on the
selected names only (not on the order they were given or found in, not on dict order or
hash seeds), every workload falls in exactly one of the N shares, and the shares differ
in size by at most one. A share can be empty (more shards than workloads): that shard
measures nothing. Adding or removing a workload moves the workloads sorted after it to
neighbouring shares; every runner of one run sees the same selection, so the shares of
one run still cover it exactly once.

:func:`second_look_alpha` is the α a shard's measuring job plans its second looks with,
so that the combined judge (Holm over every shard's workloads) finds every second look
it plans measured.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from perfgate.model.errors import UsageError

MAX_SHARDS = 256
"""The most shares a run can be split into (GitHub Actions runs at most 256 jobs of a matrix)."""

_SHARD_RE = re.compile(r"([0-9]{1,6})/([0-9]{1,6})")


@dataclass(frozen=True)
class Shard:
    """Share ``index`` (1-based) of ``count``."""

    index: int
    count: int

    def __post_init__(self) -> None:
        if not 1 <= self.count <= MAX_SHARDS:
            raise ValueError(f"the number of shards N must be 1 to {MAX_SHARDS}")
        if not 1 <= self.index <= self.count:
            raise ValueError(f"the share I must be 1 to N ({self.count})")

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def take(self, names: Iterable[str]) -> tuple[str, ...]:
        """This share of ``names``, sorted: every ``count``-th name of the sorted names,
        starting at the ``index``-th."""
        return tuple(name for position, name in enumerate(sorted(set(names)))
                     if position % self.count == self.index - 1)


def split(names: Iterable[str], count: int) -> tuple[tuple[str, ...], ...]:
    """All ``count`` shares of ``names``, in shard order."""
    ordered = sorted(set(names))
    return tuple(Shard(i, count).take(ordered) for i in range(1, count + 1))


def parse_shard(text: str, option: str = "--shard") -> Shard:
    """``I/N`` as a :class:`Shard`; anything else is a one-line :class:`UsageError`."""
    match = _SHARD_RE.fullmatch(text.strip())
    shown = text if len(text) <= 40 else text[:37] + "..."
    if match is None:
        raise UsageError(f"{option} {shown!r}: expected I/N, this runner's share I of N shards (e.g. 1/2)")
    try:
        return Shard(int(match.group(1)), int(match.group(2)))
    except ValueError as exc:
        raise UsageError(f"{option} {shown}: {exc}") from None


def second_look_alpha(alpha: float, shard_family: int, total_family: int) -> float:
    """The α with which a shard holding ``shard_family`` of the ``total_family`` Holm
    hypotheses (workloads and their gated phases) plans its second looks.

    The combined judge runs Holm over all ``total_family``. The other shards' hypotheses
    make a workload's adjusted p-value largest when they all have p = 1, and then the
    shard's k-th smallest p-value is tested at α / (total − k + 1). Holm within the shard
    at α / (total − shard + 1) tests it at no more than that for every k, so a workload
    the shard decides (a regression or an improvement) the combined judge decides alike,
    and every workload left undecided there, which the judge measures again at the second
    look, is one the shard left undecided and measured again too. (A PASS, the interval
    below 1 + δ, does not depend on the family.)
    """
    if not 0 < shard_family <= total_family:
        raise ValueError("expected 0 < shard_family <= total_family")
    return alpha / (total_family - shard_family + 1)
