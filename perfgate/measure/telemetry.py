"""Telemetry during the measured window, sampled in a background thread.

On a GPU, NVML (nvidia-ml-py): utilisation, memory used, SM clock, temperature, power and
the clock-event (throttle) reasons. On the CPU, psutil: this process's CPU use, the
machine's CPU use and the resident set size. The sampler only reads counters and sleeps
between samples, so the training step is not synchronised or otherwise disturbed (its
cost is measured by ``benchmarks/overhead.py --telemetry``).

A signal that is unavailable is ``None``, never 0. NVML failing mid-run stops the GPU
samples and records the error; the run goes on. NVML's utilisation is averaged by the
driver over a period of 1/6 s to 1 s, so it is coarse: the device busy fraction from the
CUDA events is the precise number, this is the corroboration and the explanation of a
noisy repeat (clocks, power, throttling).

Contention evidence (``summary()["machine"]``, judged by ``perfgate.contention``): per
interval between samples, the CPU time that processes other than this one and its
descendants (DataLoader workers) used, as a share of the CPUs this process may run on
(``other_cpu_share``), and on CUDA the other processes NVML lists on this GPU
(``other_gpu_processes``). Either is ``None`` when it could not be measured, with the
reason under ``unavailable``; result files written before these fields existed have no
``machine`` key, which reads as "not known".
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from statistics import mean, median
from typing import Any

# NVML clock-event reasons that mean the GPU ran slower than it could (not idle, not an
# application clock setting): software power cap, hardware slowdown, software and
# hardware thermal slowdown, power brake.
THROTTLE_REASONS = {
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
}


@dataclass
class _Samples:
    values: dict[str, list[float]] = field(default_factory=dict)
    throttle_mask: int = 0
    errors: list[str] = field(default_factory=list)

    def add(self, name: str, value: float | None) -> None:
        if value is not None:
            self.values.setdefault(name, []).append(float(value))


class _Nvml:
    def __init__(self, index: int) -> None:
        import pynvml

        self.nvml = pynvml
        pynvml.nvmlInit()
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        reasons = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        self.reasons = reasons or pynvml.nvmlDeviceGetCurrentClocksThrottleReasons

    def sample(self, into: _Samples) -> None:
        n, h = self.nvml, self.handle
        util = n.nvmlDeviceGetUtilizationRates(h)
        into.add("gpu_util_percent", util.gpu)
        into.add("gpu_memory_used_bytes", n.nvmlDeviceGetMemoryInfo(h).used)
        into.add("sm_clock_mhz", n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM))
        into.add("temperature_c", n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU))
        into.add("power_w", n.nvmlDeviceGetPowerUsage(h) / 1000.0)
        into.throttle_mask |= int(self.reasons(h))

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 - shutting down a library that already failed
            pass


class _GpuProcesses:
    """The processes NVML lists on this GPU (compute and graphics) other than this process tree.

    Inside a container NVML reports the host's pids, so none of them is ours: then this
    process is taken to be one of the listed processes (it holds a CUDA context during the
    window) and the others are counted, not named. A list without even this process in it
    is not evidence of anything. The list changes rarely and each look is a driver call,
    so it is read at the first sample and then every ``EVERY`` samples.
    """

    EVERY = 5

    def __init__(self, nvml: _Nvml, tree: _ProcessTree | None) -> None:
        self.nvml = nvml
        self.tree = tree
        self.calls = 0
        self.looks = 0
        self.by_pid = 0
        self.by_count = 0
        self.other_pids: set[int] = set()
        self.listed: set[int] = set()
        self.most_unnamed = 0
        self.failed: str | None = None

    def sample(self, into: _Samples | None = None) -> None:
        self.calls += 1
        if (self.calls - 1) % self.EVERY:
            return
        n, h = self.nvml.nvml, self.nvml.handle
        try:
            pids = {p.pid for p in n.nvmlDeviceGetComputeRunningProcesses(h)}
            pids |= {p.pid for p in n.nvmlDeviceGetGraphicsRunningProcesses(h)}
        except Exception as exc:  # noqa: BLE001 - NVMLError: kept as the reason, then stops this source
            self.failed = f"{type(exc).__name__}: {exc}"
            raise
        ours = self.tree.pids() if self.tree is not None else {os.getpid()}
        self.looks += 1
        self.listed |= pids
        if pids & ours:
            self.by_pid += 1
            self.other_pids |= pids - ours
        elif pids:
            self.by_count += 1
            self.most_unnamed = max(self.most_unnamed, len(pids) - 1)

    def summary(self) -> tuple[dict[str, Any] | None, str | None]:
        if self.failed is not None:
            return None, self.failed
        if not self.looks:
            return None, "the window ended before NVML's process list was read"
        if self.by_count and not self.by_pid:
            return {
                "count": self.most_unnamed,
                "pids": None,
                "listed_pids": sorted(self.listed),
                "identified_by": "count",
                "samples": self.looks,
            }, None
        if not self.by_pid:
            return None, "NVML listed no process on this GPU, not even this one (process list not visible here)"
        return {
            "count": len(self.other_pids),
            "pids": sorted(self.other_pids),
            "identified_by": "pid",
            "samples": self.looks,
        }, None


class _Psutil:
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

    def __init__(self, psutil: Any) -> None:
        self.psutil = psutil
        self.me = psutil.Process()
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


class _CpuShare:
    """Per interval between samples: the share of the CPUs that other processes used.

    Other = busy CPU time of the CPUs in scope minus the CPU time of this process tree,
    over the CPU time those CPUs had. The counters tick at 100 Hz, so on a small machine
    one 100 ms interval is coarse (2 CPUs: 20 ticks, so +-1 tick is 5%): the per-repeat
    statistics over many intervals are the evidence, not one interval.
    """

    def __init__(self, psutil: Any, interval_s: float) -> None:
        self.stat = _CpuStat(psutil)
        self.tree = _ProcessTree(psutil)
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


class TelemetrySampler:
    """Start before the window, stop after it; ``summary()`` is stored in the repeat."""

    def __init__(self, device: str, *, interval_s: float = 0.1, gpu_index: int = 0) -> None:
        self.device = device
        self.interval_s = interval_s
        self._samples = _Samples()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._count = 0
        self._started = 0.0
        self._elapsed = 0.0
        self._sources: list[Any] = []
        self.unavailable: dict[str, str] = {}
        self._cpu_share: _CpuShare | None = None
        self._gpu_processes: _GpuProcesses | None = None
        try:
            self._sources.append(_Psutil())
        except Exception as exc:  # noqa: BLE001 - psutil missing or refused
            self.unavailable["cpu"] = f"{type(exc).__name__}: {exc}"
        try:
            import psutil

            self._cpu_share = _CpuShare(psutil, interval_s)
            self._sources.append(self._cpu_share)
        except Exception as exc:  # noqa: BLE001 - psutil missing, /proc unreadable
            self.unavailable["other_cpu_share"] = f"{type(exc).__name__}: {exc}"
        if device == "cuda":
            try:
                nvml = _Nvml(gpu_index)
                self._sources.append(nvml)
                self._gpu_processes = _GpuProcesses(nvml, self._cpu_share.tree if self._cpu_share else None)
                self._sources.append(self._gpu_processes)
            except Exception as exc:  # noqa: BLE001 - NVML missing, no driver, no permission
                self.unavailable["gpu"] = f"{type(exc).__name__}: {exc}"

    def _run(self) -> None:
        while not self._stop.is_set():
            for source in list(self._sources):
                try:
                    source.sample(self._samples)
                except Exception as exc:  # noqa: BLE001 - e.g. NVMLError mid-run: stop that source only
                    self._samples.errors.append(f"{type(source).__name__.strip('_')}: {type(exc).__name__}: {exc}")
                    self._sources.remove(source)
            self._count += 1
            self._stop.wait(self.interval_s)

    def start(self) -> None:
        if not self._sources:
            return
        self._started = time.perf_counter()
        if self._cpu_share is not None:
            self._cpu_share.restart()
        self._thread = threading.Thread(target=self._run, name="perfgate-telemetry", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._elapsed = time.perf_counter() - self._started
        if self._cpu_share is not None and self._cpu_share in self._sources:
            try:  # the tail of the window since the last sample, when it is long enough
                self._cpu_share.sample()
            except Exception as exc:  # noqa: BLE001 - as in the thread: stop that source only
                self._samples.errors.append(f"CpuShare: {type(exc).__name__}: {exc}")
                self._sources.remove(self._cpu_share)
        for source in self._sources:
            if isinstance(source, _Nvml):
                source.close()

    def summary(self) -> dict[str, Any]:
        values = self._samples.values

        def stats(name: str, *kinds: str) -> dict[str, float | None]:
            data = values.get(name)
            out: dict[str, float | None] = {}
            for kind in kinds:
                if not data:
                    out[kind] = None
                else:
                    out[kind] = {"mean": mean, "median": median, "min": min, "max": max}[kind](data)
            return out

        gpu_sampled = "gpu_util_percent" in values
        machine = self._machine()  # before ``unavailable`` is copied: it adds its reasons there
        reasons = sorted(name for bit, name in THROTTLE_REASONS.items() if self._samples.throttle_mask & bit)
        return {
            "samples": self._count,
            "interval_s": self.interval_s,
            "sampled_s": self._elapsed,
            "gpu": {
                "util_percent": stats("gpu_util_percent", "mean", "min", "max"),
                "memory_used_bytes": stats("gpu_memory_used_bytes", "max"),
                "sm_clock_mhz": stats("sm_clock_mhz", "min", "median", "max"),
                "temperature_c": stats("temperature_c", "max"),
                "power_w": stats("power_w", "mean", "max"),
                "throttle_reasons": reasons if gpu_sampled else None,
                "throttled": bool(reasons) if gpu_sampled else None,
            } if self.device == "cuda" else None,
            "cpu": {
                "process_percent": stats("process_cpu_percent", "mean", "max"),
                "system_percent": stats("system_cpu_percent", "mean", "max"),
                "rss_bytes": stats("rss_bytes", "max"),
            },
            "machine": machine,
            "unavailable": dict(self.unavailable),
            "errors": list(self._samples.errors),
        }

    def _machine(self) -> dict[str, Any]:
        """Contention evidence: what other processes used while the window ran."""
        share = self._cpu_share
        other = ours = None
        if share is not None:
            other, ours = share.summary()
            failed = [e for e in self._samples.errors if e.startswith("CpuShare")]
            if other is None and failed:
                self.unavailable["other_cpu_share"] = failed[0]
            elif other is None:
                self.unavailable["other_cpu_share"] = (
                    f"the window ({self._elapsed:.3f} s) held no interval of {share.min_s:g} s or more between samples")
        gpu_processes = None
        if self._gpu_processes is not None:
            gpu_processes, reason = self._gpu_processes.summary()
            if reason is not None:
                self.unavailable["other_gpu_processes"] = reason
        elif self.device == "cuda":
            self.unavailable["other_gpu_processes"] = self.unavailable.get("gpu", "NVML not available")
        return {
            "other_cpu_share": other,
            "tree_cpu_share": ours,
            "tree_processes": share.tree.largest if share is not None else None,
            "cpus": share.stat.cpus if share is not None else None,
            "cpu_scope": share.stat.scope if share is not None else None,
            "other_gpu_processes": gpu_processes,
        }
