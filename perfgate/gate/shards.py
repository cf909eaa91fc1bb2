"""Shards: several measuring jobs' folders judged as one run.

A sharded run (each runner measuring its share, ``--shard I/N``) leaves one folder per
shard. :func:`combine_shards` makes them one measurement for ``perfgate.gate.judge``: the
shards must agree on the run (design, device, the pull request and its commits, the
settings that shape a measurement), hold each workload once, and together be the whole
run; an interrupted shard makes the whole run no verdict.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from collections.abc import Sequence
from pathlib import Path

from perfgate.model.errors import UsageError
from perfgate.model.manifest import MANIFEST_NAME, RunManifest
from perfgate.model.shard import parse_shard
from perfgate.store.untrusted_folders import Measured
from perfgate.text.inert import short_repr

_AGREE = ("design", "device", "pr_number", "head_sha", "head_ref", "head_repo", "base_sha", "base_ref",
          "decision_rule")
"""What every shard's manifest must say alike: one run of one pull request."""


def _owned(measured: Measured) -> set[str]:
    """The workloads a shard's folder holds or names as its own (``base_only``, the base
    tree's workloads the pull request lacks, is the same in every shard)."""
    names = {*measured.head, *measured.base, *measured.head_counters, *measured.base_counters}
    manifest = measured.manifest
    if manifest is not None:
        names.update((*manifest.workloads, *manifest.errors, *manifest.base_errors, *manifest.base_missing,
                      *manifest.notes))
    return names


def _check_shares(manifests: Sequence[tuple[str, RunManifest]]) -> None:
    """The folders of a sharded run must be every share of it once (``shard`` I/N in each
    manifest, one N, each I from 1 to N): Holm over fewer would judge a part as the whole.
    A one-line :class:`UsageError` otherwise; nothing to check when no manifest names a share."""
    shares = [(where, parse_shard(m.shard, "shard")) for where, m in manifests if m.shard is not None]
    if not shares:
        return
    if len(shares) != len(manifests):
        plain = next(where for where, m in manifests if m.shard is None)
        raise UsageError(f"the folders are not one sharded run: {shares[0][0]} is shard {shares[0][1]}, "
                         f"{plain} is not a shard")
    counts = {share.count for _, share in shares}
    if len(counts) != 1:
        raise UsageError("the folders are not one sharded run: they split it into "
                         + " and ".join(str(n) for n in sorted(counts)) + " shards")
    count = counts.pop()
    seen: dict[int, str] = {}
    for where, share in shares:
        if share.index in seen:
            raise UsageError(f"shard {share} twice: {seen[share.index]} and {where}")
        seen[share.index] = where
    missing = [str(i) for i in range(1, count + 1) if i not in seen]
    if missing:
        raise UsageError(f"shard {', '.join(missing)} of {count} missing (given: "
                         f"{', '.join(f'{i}/{count}' for i in sorted(seen))}); judge every shard's folder together, "
                         "or Holm would run over part of the run")


def _combined_manifest(parts: Sequence[tuple[str, Measured]]) -> RunManifest | None:
    manifests = [(where, m.manifest) for where, m in parts]
    lacking = [where for where, m in manifests if m is None]
    if len(lacking) == len(manifests):
        return None
    if lacking:
        having = next(where for where, m in manifests if m is not None)
        raise UsageError(f"{lacking[0]}: no {MANIFEST_NAME}, but {having} has one; every shard's folder needs its "
                         "manifest")
    first_where, first = manifests[0]
    assert first is not None
    for where, manifest in manifests[1:]:
        assert manifest is not None
        for name in _AGREE:
            if getattr(manifest, name) != getattr(first, name):
                raise UsageError(f"the shards are not of one run: {name} is {short_repr(getattr(first, name))} in "
                                 f"{first_where} and {short_repr(getattr(manifest, name))} in {where}")
    _check_shares([(where, m) for where, m in manifests if m is not None])
    every = [m for _, m in manifests if m is not None]
    failures = [f"{where}: {m.failure}" for where, m in manifests if m is not None and m.failure]
    clocks = {where: m.clocks for where, m in manifests if m is not None and m.clocks}
    one_clock = len(set(clocks.values())) == 1
    return dataclasses.replace(
        first,
        workloads=tuple(sorted(n for m in every for n in m.workloads)),
        errors={k: v for m in every for k, v in m.errors.items()},
        base_errors={k: v for m in every for k, v in m.base_errors.items()},
        base_missing=tuple(sorted(n for m in every for n in m.base_missing)),
        base_only=tuple(sorted({n for m in every for n in m.base_only})),
        notes={k: v for m in every for k, v in m.notes.items()},
        # each shard designed its own workloads' windows: the union (None only when no shard did)
        windows_evidence=({k: v for m in every if m.windows_evidence is not None for k, v in m.windows_evidence.items()}
                          if any(m.windows_evidence is not None for m in every) else None),
        failure="; ".join(failures) or None,
        # any shard interrupted makes the whole run interrupted (the first shard's alone would hide it)
        interrupted=next((m.interrupted for m in every if m.interrupted), None),
        clocks=(next(iter(clocks.values())) if one_clock
                else "; ".join(f"{Path(where).name}: {c}" for where, c in clocks.items()) or None),
    )


@dataclass(frozen=True)
class ShardedMeasured(Measured):
    """The folders of a sharded run combined, each shard's own measurement kept: every shard
    spent α over its own share of its own budget (``perfgate.gate.replay.ReplayedBlocks.budget_share``)."""

    shards: tuple[Measured, ...] = ()


def combine_shards(parts: Sequence[tuple[str, Measured]]) -> Measured:
    """The folders of a sharded run (``perfgate ci --measure-only --shard I/N`` on each
    runner, or ``perfgate run --shard I/N``), each named by where it came from, as one
    measurement: judged together, Holm runs over all their workloads.

    A workload in two folders, manifests of different runs, or a folder without the
    manifest the others have is a one-line :class:`UsageError` naming both folders."""
    if not parts:
        raise UsageError("no results folder given")
    owner: dict[str, str] = {}
    for where, measured in parts:
        for name in sorted(_owned(measured)):
            if name in owner:
                raise UsageError(f"{name}: in both {owner[name]} and {where}; each workload belongs to one shard")
            owner[name] = where
    if len(parts) == 1:
        manifest = parts[0][1].manifest
        if manifest is not None:
            _check_shares([(parts[0][0], manifest)])
        return parts[0][1]
    every = [m for _, m in parts]
    return ShardedMeasured(
        _combined_manifest(parts),
        {k: v for m in every for k, v in m.head.items()},
        {k: v for m in every for k, v in m.base.items()},
        {k: v for m in every for k, v in m.head_counters.items()},
        {k: v for m in every for k, v in m.base_counters.items()},
        shards=tuple(every),
    )
