"""Known delays inside named phases (``perfgate selftest``): how a gate is shown to catch a
slowdown of a known size in a known phase.

A host delay is a busy-wait on the clock; a device phase on CUDA gets a GPU sleep of the same
length (``torch.cuda._sleep``, its rate measured once per process). The delays run through
:class:`perfgate.measure.timeline.InjectingTimeline`, for a workload's repeat and a script's
alike; a repeat without an injection never wraps its timeline.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from statistics import median

import torch

from perfgate.model.workload import HOST_PHASES


def host_delay(ms: float, now: Callable[[], float] = time.perf_counter) -> Callable[[], None]:
    """A delay of ``ms`` on the host: a busy-wait on the clock.

    A busy-wait is CPU work, like the slowdowns it stands for: when other load on the
    machine stretches the step, it stretches the delay alike, so the slowdown stays the
    share of the step that was asked for (a sleep would not be stretched, and it
    overshoots by tens of microseconds, a large part of 5% of a few-millisecond step).
    """
    seconds = ms / 1e3

    def delay() -> None:
        end = now() + seconds
        while now() < end:
            pass

    return delay


_cuda_cycles_per_ms: float | None = None


def cuda_cycles_per_ms() -> float:
    """GPU clock cycles per millisecond of ``torch.cuda._sleep``, measured once per process.

    Timed with CUDA events: a short run gives the rough rate, then three runs of about
    10 ms each give the median. Unverified on a GPU at the time of writing (no device
    was available); the CPU path of the injection is the tested one.
    """
    global _cuda_cycles_per_ms
    if _cuda_cycles_per_ms is None:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

        def rate(cycles: int) -> float:
            start.record()
            torch.cuda._sleep(cycles)
            end.record()
            end.synchronize()
            return cycles / max(start.elapsed_time(end), 1e-3)

        rate(1000)  # loads the kernel
        rough = rate(1_000_000)
        cycles = max(1_000_000, min(int(rough * 10), 2**40))
        _cuda_cycles_per_ms = median(rate(cycles) for _ in range(3))
    return _cuda_cycles_per_ms


def device_delay(ms: float) -> Callable[[], None]:
    """A delay of ``ms`` of device time on the current CUDA stream (a host sleep would not
    lengthen what the CUDA events of a device phase time)."""
    cycles = max(1, round(ms * cuda_cycles_per_ms()))
    sleep = torch.cuda._sleep
    return lambda: sleep(cycles)


def injection_delays(inject_ms: Mapping[str, float], device: str) -> dict[str, Callable[[], None]]:
    """The delay of each injected phase: on the host, or on the GPU for a CUDA device phase.

    A GPU delay is made at its first use (it measures the GPU's sleep rate): a script
    decides when CUDA is initialised, and nothing may touch CUDA before its first line.
    """
    def delay(phase: str, ms: float) -> Callable[[], None]:
        if device != "cuda" or phase in HOST_PHASES:
            return host_delay(ms)
        made: list[Callable[[], None]] = []

        def first_use() -> None:
            if not made:
                made.append(device_delay(ms))
            made[0]()

        return first_use

    return {phase: delay(phase, ms) for phase, ms in inject_ms.items() if ms > 0}
