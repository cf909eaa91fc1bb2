"""Telemetry during the measured window, sampled in a background thread.

On a GPU, NVML (nvidia-ml-py): utilisation, memory used, SM clock, temperature, power and
the clock-event reasons. On the CPU, psutil: this process's CPU use, the machine's CPU
use, the resident set size, and the peak of the summed resident set size of this process
and its descendants (DataLoader workers). The sampler only reads counters and sleeps
between samples, so the training step is not synchronised or otherwise disturbed (its
cost is measured by ``benchmarks/overhead.py --telemetry``).

NVML is opened on the GPU this process uses, found by the UUID CUDA gives for it (so
``CUDA_VISIBLE_DEVICES`` is honoured: NVML numbers every GPU of the machine, CUDA only the
visible ones); ``gpu.device`` says which GPU and how it was found. On a MIG instance NVML
gives memory and processes per instance, but the SM clock, temperature, power and
clock-event reasons only for the whole GPU, and no utilisation: ``gpu.limited`` says so.

Clock events: the share of samples in which each reason was set (``clock_event_shares``),
the software power cap's share apart (``power_cap_share``, telemetry only: a 70 W T4 sets
it on most samples under load), and the thermal and hardware slowdowns seen in any sample
(``slowdown_reasons``; ``throttled`` is true when there was one, and the gate then leaves
the repeat out: see ``perfgate.model.result.SLOWDOWN_REASONS``).

A signal that is unavailable is ``None``, never 0. An NVML call that fails mid-run makes
its signal null for the whole window (its earlier samples alone would pass part of the
window off as all of it), with the reason under ``gpu.errors`` (and the first one under
``gpu.error``); the other signals and the run go on. A slowdown seen before the clock-event
reasons failed still counts; when none was seen, ``throttled`` is None (not known).
NVML's utilisation is averaged by the driver over a period of 1/6 s to 1 s, so it is
coarse: the device busy fraction from the CUDA events is the precise number, this is the
corroboration and the explanation of a noisy repeat (clocks, power, throttling).

Contention evidence (``summary()["machine"]``, judged by ``perfgate.analysis.contention``): per
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

from perfgate.model.result import CLOCK_EVENT_REASONS, SLOWDOWN_REASONS

POWER_CAP = 0x4
SLOWDOWN = sum(bit for bit, name in CLOCK_EVENT_REASONS.items() if name in SLOWDOWN_REASONS)
"""The bits that leave a repeat out: hardware slowdown, software and hardware thermal
slowdown, hardware power brake (the names and their kinds are ``perfgate.model.result``'s)."""

MIG_LIMITED = ("MIG instance: NVML gives memory and processes per instance, but the SM clock, temperature, "
               "power and clock-event reasons are the whole GPU's (shared with the other instances), and no "
               "utilisation")


@dataclass
class _Samples:
    values: dict[str, list[float]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def add(self, name: str, value: float | None) -> None:
        if value is not None:
            self.values.setdefault(name, []).append(float(value))


@dataclass(frozen=True)
class _GpuIdentity:
    """What CUDA says about the device this process uses, to find the same GPU in NVML."""

    ordinal: int
    uuid: str | None
    pci_bus_id: str | None


def _cuda_identity(ordinal: int | None) -> _GpuIdentity:
    """The UUID and PCI bus id of CUDA device ``ordinal`` (None: the current device)."""
    import torch  # the measure layer; the loop has loaded it already

    if ordinal is None:
        ordinal = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(ordinal)
    uuid = getattr(props, "uuid", None)
    pci = None
    domain, bus, device = (getattr(props, f"pci_{k}_id", None) for k in ("domain", "bus", "device"))
    if all(isinstance(v, int) and not isinstance(v, bool) for v in (domain, bus, device)):
        pci = f"{domain:04x}:{bus:02x}:{device:02x}.0"
    return _GpuIdentity(ordinal, str(uuid) if uuid is not None else None, pci)


def _open_device(nvml: Any, identity: _GpuIdentity) -> tuple[Any, dict[str, Any]]:
    """NVML's handle of the GPU CUDA calls ``identity``, and how it was found.

    By UUID: torch gives it without NVML's prefix, which says whether it is a whole GPU
    (``GPU-``) or a MIG instance (``MIG-``), so both are tried. Without a UUID (an older
    torch), by PCI bus id; without that, only when NVML sees a single GPU. Never by index:
    NVML numbers all the machine's GPUs, ``CUDA_VISIBLE_DEVICES`` renumbers them for CUDA.
    """
    tried: list[str] = []
    if identity.uuid:
        raw = identity.uuid.strip()
        candidates = [raw] if raw[:4].upper() in ("GPU-", "MIG-") else [f"GPU-{raw}", f"MIG-{raw}"]
        for uuid in candidates:
            try:
                handle = nvml.nvmlDeviceGetHandleByUUID(uuid)
            except Exception as exc:  # noqa: BLE001 - NVMLError_NotFound: try the next form
                tried.append(f"nvmlDeviceGetHandleByUUID({uuid}): {type(exc).__name__}: {exc}")
                continue
            return handle, {"uuid": uuid, "found_by": "uuid", "mig": uuid[:4].upper() == "MIG-",
                            "cuda_device": identity.ordinal}
    if identity.pci_bus_id:
        try:
            handle = nvml.nvmlDeviceGetHandleByPciBusId(identity.pci_bus_id)
        except Exception as exc:  # noqa: BLE001
            tried.append(f"nvmlDeviceGetHandleByPciBusId({identity.pci_bus_id}): {type(exc).__name__}: {exc}")
        else:
            return handle, {"uuid": None, "found_by": "pci_bus_id", "pci_bus_id": identity.pci_bus_id,
                            "mig": None, "cuda_device": identity.ordinal}
    count = int(nvml.nvmlDeviceGetCount())
    if count == 1:
        return nvml.nvmlDeviceGetHandleByIndex(0), {"uuid": None, "found_by": "the only GPU", "mig": None,
                                                    "cuda_device": identity.ordinal}
    tried.append(f"NVML sees {count} GPUs and CUDA gave neither a UUID nor a PCI bus id that it knows")
    raise LookupError(f"cannot tell which GPU CUDA device {identity.ordinal} is: {'; '.join(tried)}")


class _Nvml:
    """NVML's signals of one GPU, each read on its own: one that fails is null, the others go on."""

    def __init__(self, identity: _GpuIdentity) -> None:
        import pynvml

        self.nvml = pynvml
        pynvml.nvmlInit()
        try:
            self.handle, self.device = _open_device(pynvml, identity)
            whole = self.handle
            if self.device["mig"]:  # clocks, temperature, power and reasons exist only for the whole GPU
                whole = pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self.handle)
        except BaseException:
            self.close()
            raise
        n, h = pynvml, self.handle
        reasons_name = "nvmlDeviceGetCurrentClocksEventReasons"
        if not hasattr(n, reasons_name):  # nvidia-ml-py before 12.535
            reasons_name = "nvmlDeviceGetCurrentClocksThrottleReasons"
        reasons = getattr(n, reasons_name)
        self.signals: list[tuple[str, str, Any]] = [
            ("util_percent", "nvmlDeviceGetUtilizationRates", lambda: n.nvmlDeviceGetUtilizationRates(h).gpu),
            ("memory_used_bytes", "nvmlDeviceGetMemoryInfo", lambda: n.nvmlDeviceGetMemoryInfo(h).used),
            ("sm_clock_mhz", "nvmlDeviceGetClockInfo", lambda: n.nvmlDeviceGetClockInfo(whole, n.NVML_CLOCK_SM)),
            ("temperature_c", "nvmlDeviceGetTemperature",
             lambda: n.nvmlDeviceGetTemperature(whole, n.NVML_TEMPERATURE_GPU)),
            ("power_w", "nvmlDeviceGetPowerUsage", lambda: n.nvmlDeviceGetPowerUsage(whole) / 1000.0),
            ("clock_events", reasons_name, lambda: int(reasons(whole))),
        ]
        self.values: dict[str, list[float]] = {}
        self.failed: dict[str, str] = {}
        self.absent: dict[str, str] = {}
        if self.device["mig"]:
            self.absent["util_percent"] = "NVML gives no utilisation for a MIG instance"
        self.calls = 0
        self.event_samples = 0
        self.event_counts: dict[int, int] = {}
        self.slowdown_mask = 0

    def sample(self, into: _Samples) -> None:
        self.calls += 1
        for signal, call, read in self.signals:
            if signal in self.failed or signal in self.absent:
                continue
            try:
                value = read()
            except Exception as exc:  # noqa: BLE001 - NVMLError: this signal is null from here on
                reason = f"{call} failed at sample {self.calls}: {type(exc).__name__}: {exc}"
                self.failed[signal] = reason
                into.errors.append(f"Nvml: {reason}")
                continue
            if signal == "clock_events":
                self._events(int(value))
            else:
                self.values.setdefault(signal, []).append(float(value))

    def _events(self, mask: int) -> None:
        self.event_samples += 1
        self.slowdown_mask |= mask & SLOWDOWN
        bit = 1
        while bit <= mask:
            if mask & bit:
                self.event_counts[bit] = self.event_counts.get(bit, 0) + 1
            bit <<= 1

    def summary(self) -> dict[str, Any]:
        def stats(signal: str, *kinds: str) -> dict[str, float | None]:
            data = None if signal in self.failed else self.values.get(signal)
            funcs = {"mean": mean, "median": median, "min": min, "max": max}
            return {kind: funcs[kind](data) if data else None for kind in kinds}

        slowdown = sorted(name for bit, name in CLOCK_EVENT_REASONS.items() if self.slowdown_mask & bit)
        complete = "clock_events" not in self.failed and self.event_samples > 0
        shares = None
        if complete:
            shares = {CLOCK_EVENT_REASONS.get(bit, hex(bit)): round(count / self.event_samples, 4)
                      for bit, count in sorted(self.event_counts.items())}
        errors = {**self.failed}
        return {
            "device": dict(self.device),
            "samples": self.calls,
            "util_percent": stats("util_percent", "mean", "min", "max"),
            "memory_used_bytes": stats("memory_used_bytes", "max"),
            "sm_clock_mhz": stats("sm_clock_mhz", "min", "median", "max"),
            "temperature_c": stats("temperature_c", "max"),
            "power_w": stats("power_w", "mean", "max"),
            "clock_event_shares": shares,
            "power_cap_share": round(self.event_counts.get(POWER_CAP, 0) / self.event_samples, 4) if complete else None,
            "slowdown_reasons": slowdown if self.event_samples else None,
            "throttled": True if slowdown else (False if complete else None),
            "limited": MIG_LIMITED if self.device["mig"] else None,
            "unavailable": dict(self.absent),
            "errors": errors,
            "error": next(iter(errors.values()), None),
        }

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 - shutting down a library that already failed
            pass


def _gpu_unavailable(reason: str) -> dict[str, Any]:
    """The GPU summary when NVML could not be opened: every signal null, with the reason."""
    def nulls(*kinds: str) -> dict[str, None]:
        return {kind: None for kind in kinds}

    return {
        "device": None,
        "samples": 0,
        "util_percent": nulls("mean", "min", "max"),
        "memory_used_bytes": nulls("max"),
        "sm_clock_mhz": nulls("min", "median", "max"),
        "temperature_c": nulls("max"),
        "power_w": nulls("mean", "max"),
        "clock_event_shares": None,
        "power_cap_share": None,
        "slowdown_reasons": None,
        "throttled": None,
        "limited": None,
        "unavailable": {},
        "errors": {},
        "error": reason,
    }


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

    def __init__(self, device: str, *, interval_s: float = 0.1, gpu_index: int | None = None) -> None:
        """``gpu_index`` is the CUDA device (as torch numbers them: after ``CUDA_VISIBLE_DEVICES``)
        to sample; None: torch's current device. NVML finds it by its UUID."""
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
        self._tree_memory: _TreeMemory | None = None
        self._nvml: _Nvml | None = None
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
        if self._cpu_share is not None:
            try:
                self._tree_memory = _TreeMemory(self._cpu_share.tree)
                self._tree_memory.sample()  # fail here, where it is reported as unavailable
                self._tree_memory.peak = None
                self._sources.append(self._tree_memory)
            except Exception as exc:  # noqa: BLE001 - /proc/<pid>/statm unreadable
                self._tree_memory = None
                self.unavailable["peak_tree_rss_bytes"] = f"{type(exc).__name__}: {exc}"
        else:
            self.unavailable["peak_tree_rss_bytes"] = self.unavailable["other_cpu_share"]
        if device == "cuda":
            try:
                nvml = _Nvml(_cuda_identity(gpu_index))
                self._nvml = nvml
                self._sources.append(nvml)
                self._gpu_processes = _GpuProcesses(nvml, self._cpu_share.tree if self._cpu_share else None)
                self._sources.append(self._gpu_processes)
            except Exception as exc:  # noqa: BLE001 - NVML missing, no driver, no permission
                self.unavailable["gpu"] = f"{type(exc).__name__}: {exc}"

    def _tick(self) -> None:
        """One sample of every source; a source that raises is stopped, the others go on."""
        for source in list(self._sources):
            try:
                source.sample(self._samples)
            except Exception as exc:  # noqa: BLE001 - e.g. /proc unreadable mid-run: stop that source only
                self._samples.errors.append(f"{type(source).__name__.strip('_')}: {type(exc).__name__}: {exc}")
                self._sources.remove(source)
        self._count += 1

    def _run(self) -> None:
        while not self._stop.is_set():
            self._tick()
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
        if self._nvml is not None:
            self._nvml.close()

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

        machine = self._machine()  # before ``unavailable`` is copied: it adds its reasons there
        gpu = None
        if self.device == "cuda":
            gpu = (self._nvml.summary() if self._nvml is not None
                   else _gpu_unavailable(self.unavailable.get("gpu", "NVML not available")))
        peak_tree_rss = None
        if self._tree_memory is not None:  # null when it failed mid-run: a peak of part of the window
            failed = [e for e in self._samples.errors if e.startswith("TreeMemory")]
            if failed:
                self.unavailable["peak_tree_rss_bytes"] = failed[0]
            elif self._tree_memory.peak is None:
                self.unavailable["peak_tree_rss_bytes"] = "the window ended before the first sample"
            else:
                peak_tree_rss = self._tree_memory.peak
        return {
            "samples": self._count,
            "interval_s": self.interval_s,
            "sampled_s": self._elapsed,
            "gpu": gpu,
            "cpu": {
                "process_percent": stats("process_cpu_percent", "mean", "max"),
                "system_percent": stats("system_cpu_percent", "mean", "max"),
                "rss_bytes": stats("rss_bytes", "max"),
                "peak_tree_rss_bytes": peak_tree_rss,
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
