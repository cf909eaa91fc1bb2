"""This machine's telemetry during the measured window, from psutil and ``/proc``.

This process's CPU use, the machine's CPU use and the resident set size (:class:`_Psutil`);
the peak of the summed resident set size of this process and its descendants (DataLoader
workers) (:class:`_TreeMemory`); and the contention evidence: per interval between
samples, the CPU time that processes other than this process tree used, as a share of the
CPUs this process may run on (:class:`_CpuShare`). Sampled by
:class:`perfgate.measure.telemetry.TelemetrySampler`.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from statistics import mean, median
from typing import Any


def available_cores() -> int:
    """The CPU cores this process may run on (its affinity), without importing torch."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


@dataclass
class _Samples:
    """The values :class:`~perfgate.measure.telemetry_host._Psutil` sampled, by signal name,
    and the errors of every source that failed mid-run."""

    values: dict[str, list[float]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def add(self, name: str, value: float | None) -> None:
        if value is not None:
            self.values.setdefault(name, []).append(float(value))


MIN_SLOPE_SAMPLES = 5
"""Fewer samples than this give no memory slope: a line through three or four samples 100 ms
apart says nothing about a window, and its standard error has too few degrees of freedom."""


def memory_slope(times: Sequence[float], values: Sequence[float]) -> dict[str, float | int] | None:
    """The least-squares slope of ``values`` (bytes) over ``times`` (seconds): ``bytes_per_s``,
    its standard error ``stderr_bytes_per_s`` and the number of ``samples``; None with fewer
    than :data:`MIN_SLOPE_SAMPLES` samples, or when the two lists do not pair up."""
    n = len(values)
    if n < MIN_SLOPE_SAMPLES or len(times) != n:
        return None
    t_mean = math.fsum(times) / n
    v_mean = math.fsum(values) / n
    sxx = math.fsum((t - t_mean) ** 2 for t in times)
    if not sxx > 0:
        return None
    slope = math.fsum((t - t_mean) * (v - v_mean) for t, v in zip(times, values, strict=True)) / sxx
    residual = math.fsum((v - v_mean - slope * (t - t_mean)) ** 2 for t, v in zip(times, values, strict=True))
    return {"bytes_per_s": slope, "stderr_bytes_per_s": math.sqrt(residual / (n - 2) / sxx), "samples": n}


class _Psutil:
    """This process's CPU use and resident set size, and the machine's CPU use (psutil)."""

    def __init__(self) -> None:
        import psutil

        self.psutil = psutil
        self.process = psutil.Process()
        self.process.cpu_percent(None)  # the first call only starts the measurement
        psutil.cpu_percent(None)

    def sample(self, into: _Samples) -> None:
        into.add("process_cpu_percent", self.process.cpu_percent(None))
        into.add("system_cpu_percent", self.psutil.cpu_percent(None))
        into.add("rss_bytes", self.process.memory_info().rss)
        into.add("rss_time_s", time.perf_counter())  # after the read: the two lists stay paired


try:
    _CLK_TCK = float(os.sysconf("SC_CLK_TCK"))  # the unit of /proc's CPU times
except (AttributeError, ValueError, OSError):  # not a POSIX system: /proc is not read there
    _CLK_TCK = 100.0


def _quantile(data: list[float], q: float) -> float:
    """Linear interpolation between order statistics (numpy's default method)."""
    xs = sorted(data)
    pos = (len(xs) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


class _CpuStat:
    """Busy and total CPU seconds of the CPUs this process may run on.

    On Linux from ``/proc/stat``: the aggregate row, or the rows of the CPUs in this
    process's affinity mask when that is a proper subset (another process on a CPU we may
    not use does not compete with us). Busy is everything but idle and iowait; steal counts
    as busy (time the hypervisor gave another guest is capacity we did not get); guest time
    is already inside user time, so it is left out. Elsewhere, psutil's machine-wide times.
    """

    def __init__(self, psutil: Any) -> None:
        self.psutil = psutil
        self.rows: set[bytes] | None = None  # /proc/stat rows to add up; None: psutil
        self.scope = "machine"
        self.cpus = psutil.cpu_count() or 1
        if sys.platform.startswith("linux") and os.path.exists("/proc/stat"):
            with open("/proc/stat", "rb") as handle:
                listed = {line.split(None, 1)[0] for line in handle if line[:3] == b"cpu" and line[3:4].isdigit()}
            allowed = {f"cpu{i}".encode() for i in os.sched_getaffinity(0)} & listed
            if allowed and allowed < listed:
                self.rows, self.scope, self.cpus = allowed, "affinity", len(allowed)
            else:
                self.rows, self.cpus = {b"cpu"}, len(listed) or self.cpus
        self.read()  # fail here, where it is reported as unavailable, not in the thread

    def read(self) -> tuple[float, float]:
        """(busy, total) CPU seconds since boot, summed over the CPUs in scope."""
        if self.rows is None:
            t = self.psutil.cpu_times()
            total = sum(t) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)
            return total - t.idle - getattr(t, "iowait", 0.0), total
        busy = total = 0
        with open("/proc/stat", "rb") as handle:
            for line in handle:
                if line[:3] != b"cpu":
                    break  # the cpu rows come first
                fields = line.split()
                if fields[0] not in self.rows:
                    continue
                # user nice system idle iowait irq softirq steal [guest guest_nice]
                ticks = [int(x) for x in fields[1:9]]
                row_total = sum(ticks)
                total += row_total
                busy += row_total - ticks[3] - (ticks[4] if len(ticks) > 4 else 0)
        return busy / _CLK_TCK, total / _CLK_TCK


def _process_seconds(times: Any) -> float:
    """CPU seconds of a process and of its children it has reaped (psutil's cpu_times)."""
    return times.user + times.system + getattr(times, "children_user", 0.0) + getattr(times, "children_system", 0.0)


def _proc_stat_seconds(pid: int) -> float:
    """The same from ``/proc/<pid>/stat`` (utime, stime, cutime, cstime), without psutil's overhead."""
    with open(f"/proc/{pid}/stat", "rb") as handle:
        data = handle.read()
    fields = data[data.rindex(b")") + 2:].split()  # the name in parentheses may hold spaces
    return (int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])) / _CLK_TCK


class _ProcessTree:
    """This process and its descendants (DataLoader workers), and the CPU seconds they used.

    A descendant's time moves into its parent's reaped-children times when it exits, so the
    sum over the tree is continuous. psutil finds descendants by reading every process on
    the machine (milliseconds for a few hundred processes, while holding the GIL), which is
    too dear every 100 ms. On Linux each sample instead reads the ``children`` file of this
    process's main thread (which is where DataLoader workers and subprocesses are forked),
    and every ``FULL_EVERY`` samples those of all threads of every process in the tree;
    without those files, psutil's full scan runs every ``FULL_EVERY`` samples. A descendant
    found late has used CPU time before it was found: ``_CpuShare`` credits that back to the
    intervals since it may have started.
    """

    FULL_EVERY = 10

    def __init__(self, psutil: Any, root_pid: int | None = None) -> None:
        """``root_pid``: the process whose tree this is (a distributed repeat's launcher, so the
        other ranks are not counted as other load); default this process."""
        self.psutil = psutil
        self.me = psutil.Process(root_pid)
        self.pid = self.me.pid
        self.members: dict[int, Any] = {}
        self.seconds: dict[int, float] = {}
        self.largest = 1
        self.proc_children = os.path.exists(f"/proc/{self.pid}/task/{self.pid}/children")
        self.walked_at = self.looked_at = time.time()
        self.discover(full=True)

    def pids(self) -> set[int]:
        return {self.pid, *self.members}

    @staticmethod
    def _children_of(pid: int, full: bool) -> set[int]:
        found: set[int] = set()
        try:
            tids = os.listdir(f"/proc/{pid}/task") if full else [str(pid)]
        except OSError:  # the process ended
            return found
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/children", "rb") as handle:
                    found.update(int(x) for x in handle.read().split())
            except OSError:  # the thread or the process ended
                pass
        return found

    def discover(self, full: bool) -> list[tuple[int, float]]:
        """Add descendants not known yet; return them with the earliest time they may have started.

        A light look sees every child a main thread forked since the previous look; a full
        walk, every descendant started since the previous walk.
        """
        now = time.time()
        since = self.walked_at if full else self.looked_at
        self.looked_at = now
        if self.proc_children:
            found: set[int] = set()
            todo = [self.pid, *self.members] if full else [self.pid]
            while todo:
                for child in self._children_of(todo.pop(), full) - found:
                    found.add(child)
                    if full or child not in self.members:
                        todo.append(child)
        elif full:
            found = {p.pid for p in self.me.children(recursive=True)}
        else:
            return []
        if full:
            self.walked_at = now
        new: list[tuple[int, float]] = []
        for pid in found - self.members.keys():
            try:
                process = self.psutil.Process(pid)
                started = process.create_time()
            except self.psutil.Error:  # already gone
                continue
            self.members[pid] = process
            new.append((pid, max(started, since)))
        self.largest = max(self.largest, 1 + len(self.members))
        return new

    def _seconds(self, pid: int, process: Any) -> float:
        if self.proc_children:
            return _proc_stat_seconds(pid)
        return _process_seconds(process.cpu_times())

    def cpu_seconds(self) -> float:
        total = self._seconds(self.pid, self.me)
        for pid, process in list(self.members.items()):
            try:
                self.seconds[pid] = self._seconds(pid, process)
            except (OSError, self.psutil.Error):  # exited (and reaped: its time is in its parent's now)
                del self.members[pid]
                self.seconds.pop(pid, None)
                continue
            total += self.seconds[pid]
        return total


class _TreeMemory:
    """The peak, over the samples, of the summed resident set size of this process tree.

    The tree is ``_ProcessTree``'s: this process and its descendants (DataLoader workers,
    and any other process the workload started), as found by the CPU-share source, which
    samples just before this one. Each process's RSS counts whole, so pages a forked
    worker still shares with its parent count once per process: the sum is an upper bound
    of the memory the tree holds. A spike between two samples is missed.
    """

    def __init__(self, tree: _ProcessTree) -> None:
        self.tree = tree
        self.page = os.sysconf("SC_PAGE_SIZE") if tree.proc_children else 0
        self.peak: int | None = None
        self.samples = 0

    def _rss(self, pid: int, process: Any) -> int:
        if self.page:
            with open(f"/proc/{pid}/statm", "rb") as handle:
                return int(handle.read().split()[1]) * self.page
        return int(process.memory_info().rss)

    def sample(self, into: _Samples | None = None) -> None:
        total = self._rss(self.tree.pid, self.tree.me)
        for pid, process in list(self.tree.members.items()):
            try:
                total += self._rss(pid, process)
            except (OSError, IndexError, ValueError, self.tree.psutil.Error):  # exited meanwhile
                continue
        self.samples += 1
        self.peak = total if self.peak is None else max(self.peak, total)


class _CpuShare:
    """Per interval between samples: the share of the CPUs that other processes used.

    Other = busy CPU time of the CPUs in scope minus the CPU time of this process tree,
    over the CPU time those CPUs had. The counters tick at 100 Hz, so on a small machine
    one 100 ms interval is coarse (2 CPUs: 20 ticks, so +-1 tick is 5%): the per-repeat
    statistics over many intervals are the evidence, not one interval.
    """

    def __init__(self, psutil: Any, interval_s: float, root_pid: int | None = None) -> None:
        self.stat = _CpuStat(psutil)
        self.tree = _ProcessTree(psutil, root_pid)
        self.min_s = 0.5 * interval_s
        self.calls = 0
        self.intervals: list[list[float]] = []  # [start, end, busy_s, capacity_s, tree_s]
        self.last = self._read()

    def _read(self) -> tuple[float, float, float, float]:
        tree_s = self.tree.cpu_seconds()
        busy, total = self.stat.read()
        return time.time(), busy, total, tree_s

    def restart(self) -> None:
        """Take the baseline now: the first interval starts with the window."""
        self.tree.discover(full=False)
        self.last = self._read()

    def sample(self, into: _Samples | None = None) -> None:
        if time.time() - self.last[0] < self.min_s:
            return  # too short to measure: it becomes part of the next interval
        self.calls += 1
        new = self.tree.discover(full=self.calls % _ProcessTree.FULL_EVERY == 0)
        now, busy, total, tree_s = current = self._read()
        start, busy0, total0, tree0 = self.last
        self.last = current
        if total <= total0:
            return
        interval = [start, now, busy - busy0, total - total0, tree_s - tree0]
        for pid, since in new:
            self._credit_back(interval, self.tree.seconds.get(pid, 0.0), since)
        self.intervals.append(interval)

    def _credit_back(self, interval: list[float], seconds: float, since: float) -> None:
        """A descendant found now that may have run since ``since``: spread its time evenly."""
        start, now = interval[0], interval[1]
        if seconds <= 0 or since >= start or now <= since:
            return
        before = seconds * (start - since) / (now - since)
        interval[4] -= before
        for earlier in reversed(self.intervals):
            if earlier[1] <= since:
                break
            overlap = min(earlier[1], start) - max(earlier[0], since)
            if overlap > 0:
                earlier[4] += seconds * overlap / (now - since)

    def summary(self) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        if not self.intervals:
            return None, None
        other = [min(1.0, max(0.0, (busy - tree) / cap)) for _, _, busy, cap, tree in self.intervals]
        ours = [min(1.0, max(0.0, tree / cap)) for _, _, _, cap, tree in self.intervals]

        def stats(data: list[float]) -> dict[str, float | int]:
            return {
                "median": round(median(data), 4),
                "p90": round(_quantile(data, 0.9), 4),
                "max": round(max(data), 4),
                "mean": round(mean(data), 4),
                "samples": len(data),
            }

        return stats(other), stats(ours)
