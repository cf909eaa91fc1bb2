"""The GPU's telemetry during the measured window, from NVML (nvidia-ml-py).

Utilisation, memory used, SM clock, temperature, power and the clock-event reasons
(:class:`_Nvml`), and the other processes on the GPU (:class:`_GpuProcesses`), sampled by
:class:`perfgate.measure.telemetry.TelemetrySampler`.

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
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from statistics import mean, median
from typing import TYPE_CHECKING, Any

from perfgate.measure.telemetry_host import memory_slope
from perfgate.model.result import CLOCK_EVENT_REASONS, SLOWDOWN_REASONS

if TYPE_CHECKING:
    from perfgate.measure.telemetry_host import _ProcessTree, _Samples

POWER_CAP = 0x4
SLOWDOWN = sum(bit for bit, name in CLOCK_EVENT_REASONS.items() if name in SLOWDOWN_REASONS)
"""The bits that leave a repeat out: hardware slowdown, software and hardware thermal
slowdown, hardware power brake (the names and their kinds are ``perfgate.model.result``'s)."""

MIG_LIMITED = ("MIG instance: NVML gives memory and processes per instance, but the SM clock, temperature, "
               "power and clock-event reasons are the whole GPU's (shared with the other instances), and no "
               "utilisation")


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
                if signal == "memory_used_bytes":  # the slope's clock, paired with each value
                    self.values.setdefault("memory_used_time_s", []).append(time.perf_counter())

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
            funcs: dict[str, Callable[[list[float]], float]] = {"mean": mean, "median": median, "min": min, "max": max}
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
            "memory_used_slope": (None if "memory_used_bytes" in self.failed else
                                  memory_slope(self.values.get("memory_used_time_s", []),
                                               self.values.get("memory_used_bytes", []))),
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
        "memory_used_slope": None,
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
