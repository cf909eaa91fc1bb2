"""Telemetry during the measured window, sampled in a background thread.

On a GPU, NVML (nvidia-ml-py): utilisation, memory used, SM clock, temperature, power and
the clock-event reasons. On the CPU, psutil: this process's CPU use, the machine's CPU
use, the resident set size (its maximum, and its least-squares slope over the window's
samples in bytes per second with the slope's standard error: ``cpu.rss_slope``, None with
fewer than five samples; on CUDA likewise NVML's memory used, ``gpu.memory_used_slope``),
and the peak of the summed resident set size of this process
and its descendants (DataLoader workers). The sampler only reads counters and sleeps
between samples, so the training step is not synchronised or otherwise disturbed (its
cost is measured by ``benchmarks/overhead.py --telemetry``).

The sources are :mod:`perfgate.measure.telemetry_gpu` (NVML: the GPU's signals, its
clock-event reasons and the other processes on it) and
:mod:`perfgate.measure.telemetry_host` (psutil and ``/proc``: CPU use, memory, and the
CPU time of other processes). A source that cannot be opened is reported under
``unavailable``, one that raises mid-run is stopped with the reason under ``errors``, and
the others go on. A signal that is unavailable is ``None``, never 0.

Contention evidence (``summary()["machine"]``, judged by ``perfgate.analysis.contention``): per
interval between samples, the CPU time that processes other than this one and its
descendants (DataLoader workers) used, as a share of the CPUs this process may run on
(``other_cpu_share``), and on CUDA the other processes NVML lists on this GPU
(``other_gpu_processes``). Either is ``None`` when it could not be measured, with the
reason under ``unavailable``; result files written before these fields existed have no
``machine`` key, which reads as "not known".
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from statistics import mean, median
from typing import Any

from perfgate.measure.telemetry_gpu import _cuda_identity, _gpu_unavailable, _GpuProcesses, _Nvml
from perfgate.measure.telemetry_host import _CpuShare, _Psutil, _Samples, _TreeMemory, memory_slope


class TelemetrySampler:
    """Start before the window, stop after it; ``summary()`` is stored in the repeat."""

    def __init__(self, device: str, *, interval_s: float = 0.1, gpu_index: int | None = None,
                 root_pid: int | None = None) -> None:
        """``gpu_index`` is the CUDA device (as torch numbers them: after ``CUDA_VISIBLE_DEVICES``)
        to sample; None: torch's current device. NVML finds it by its UUID. ``root_pid``: the
        process whose tree is "this run" (a distributed repeat's launcher); default this process."""
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

            self._cpu_share = _CpuShare(psutil, interval_s, root_pid)
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
            funcs: dict[str, Callable[[list[float]], float]] = {"mean": mean, "median": median, "min": min, "max": max}
            for kind in kinds:
                if not data:
                    out[kind] = None
                else:
                    out[kind] = funcs[kind](data)
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
                "rss_slope": memory_slope(values.get("rss_time_s", []), values.get("rss_bytes", [])),
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
