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
"""

from __future__ import annotations

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
        try:
            self._sources.append(_Psutil())
        except Exception as exc:  # noqa: BLE001 - psutil missing or refused
            self.unavailable["cpu"] = f"{type(exc).__name__}: {exc}"
        if device == "cuda":
            try:
                self._sources.append(_Nvml(gpu_index))
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
        self._thread = threading.Thread(target=self._run, name="perfgate-telemetry", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._elapsed = time.perf_counter() - self._started
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
            "unavailable": dict(self.unavailable),
            "errors": list(self._samples.errors),
        }
