"""The doctor's checks on every machine: the CPUs this process may use, their frequency
governor, the load other processes put on them for a second, and the free disk for the
data cache; and :func:`cpu_checks`, which runs them in the card's order."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from perfgate.analysis.contention import DEFAULT_MAX_OTHER_CPU_SHARE
from perfgate.gate.doctor.card import FAIL, OK, UNKNOWN, WARN, Check, Unavailable, guarded

DISK_WARN_BYTES = 5e9
"""Below this much free space for the cache: warn (the synthetic data of both reference
workloads, traces and results fit easily in it)."""
DISK_FAIL_BYTES = 1e9
"""Below this: FAIL, a run may stop half-way writing its data or results."""


def _gb(n: float) -> str:
    return f"{n / 1e9:.1f} GB"


def check_cpu_count(affinity: int, online: int | None) -> Check:
    of = f" of {online} online" if online and online != affinity else ""
    detail = f"{affinity} CPU{'s' if affinity != 1 else ''} for this process{of}"
    if affinity < 2:
        return Check("cpus", WARN, detail,
                     "with one CPU, the training loop, DataLoader workers and the telemetry thread share it: "
                     "give the runner at least 2")
    return Check("cpus", OK, detail)


def check_governor(cpu_root: Path = Path("/sys/devices/system/cpu"), cpus: Iterable[int] | None = None) -> Check:
    """``scaling_governor`` of the CPUs this process may run on: ``performance`` is ok."""
    wanted = set(cpus) if cpus is not None else None
    governors: dict[str, int] = {}
    unreadable = 0
    for path in sorted(cpu_root.glob("cpu[0-9]*/cpufreq/scaling_governor")):
        number = int(path.parent.parent.name[3:])
        if wanted is not None and number not in wanted:
            continue
        try:
            value = path.read_text().strip()
        except OSError:
            unreadable += 1
            continue
        governors[value] = governors.get(value, 0) + 1
    if not governors:
        reason = (f"{unreadable} scaling_governor file(s) unreadable" if unreadable
                  else f"no cpufreq under {cpu_root} (a VM or container: the host sets the frequency)")
        return Check("cpu governor", UNKNOWN, reason)
    total = sum(governors.values())
    shown = ", ".join(f"{g} on {n} of {total} CPUs" for g, n in sorted(governors.items()))
    if set(governors) == {"performance"}:
        return Check("cpu governor", OK, shown)
    return Check("cpu governor", WARN, shown,
                 "set the 'performance' governor (sudo cpupower frequency-set -g performance): other governors "
                 "change the frequency with the load, and the data-loading phase with it")


def check_cpu_load(sample: Callable[[float], Sequence[float]], cpus: Iterable[int] | None, seconds: float = 1.0,
                   limit: float = DEFAULT_MAX_OTHER_CPU_SHARE) -> Check:
    """What other processes use of this process's CPUs over ``seconds`` (this one sleeps meanwhile).

    ``sample(seconds)`` is ``psutil.cpu_percent(interval=seconds, percpu=True)``."""
    per_cpu = list(sample(seconds))
    chosen = sorted(c for c in cpus if c < len(per_cpu)) if cpus is not None else list(range(len(per_cpu)))
    if not chosen:
        raise Unavailable("no CPU load could be read")
    share = sum(per_cpu[c] for c in chosen) / (100.0 * len(chosen))
    plural = "s" if len(chosen) != 1 else ""
    detail = f"other processes used {share:.0%} of {len(chosen)} CPU{plural} over {seconds:g} s"
    if share > limit:
        return Check("cpu load", WARN, detail,
                     f"above the {limit:.0%} a gate's repeat may see before it counts as contended and is "
                     "re-run: run nothing else beside the gate (a dedicated runner)")
    return Check("cpu load", OK, detail)


def _existing_ancestor(path: Path) -> Path:
    path = path.expanduser().absolute()
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path("/")


def check_cache_disk(cache_dir: Path, usage: Callable[[Path], Any] = shutil.disk_usage) -> Check:
    where = _existing_ancestor(cache_dir)
    try:
        free = float(usage(where).free)
    except OSError as exc:
        raise Unavailable(f"cannot read the free space at {where}: {exc.strerror or exc}") from None
    detail = f"{_gb(free)} free for the cache at {cache_dir}"
    advice = ("free space there, or point the cache elsewhere (--cache-dir, $PERFGATE_CACHE_DIR): the synthetic "
              "data, results and traces are written there")
    if free < DISK_FAIL_BYTES:
        return Check("cache disk", FAIL, detail, advice)
    if free < DISK_WARN_BYTES:
        return Check("cache disk", WARN, detail, advice)
    return Check("cache disk", OK, detail)


# ---------------------------------------------------------------- running them


def _affinity() -> set[int] | None:
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def _psutil_sample(seconds: float) -> Sequence[float]:
    try:
        import psutil
    except ImportError as exc:
        raise Unavailable(f"psutil is not installed ({exc})") from None
    return psutil.cpu_percent(interval=seconds, percpu=True)


def cpu_checks(cache_dir: Path, *, load_seconds: float = 1.0,
               sample: Callable[[float], Sequence[float]] = _psutil_sample,
               cpu_root: Path = Path("/sys/devices/system/cpu")) -> list[Check]:
    cpus = _affinity()
    count = len(cpus) if cpus else (os.cpu_count() or 1)
    return [
        guarded("cpus", check_cpu_count, count, os.cpu_count()),
        guarded("cpu governor", check_governor, cpu_root, cpus),
        guarded("cpu load", check_cpu_load, sample, cpus, load_seconds),
        guarded("cache disk", check_cache_disk, cache_dir),
    ]
