"""Was a repeat contended? Other processes' use of the CPUs and the GPU during its window.

On a shared machine another process can make a repeat many times slower (a 12 ms step
read 216 ms while a package install ran beside it). The telemetry sampler records, per
repeat, what the other processes used (``telemetry["machine"]``, written by
``perfgate.measure.telemetry``); this module judges it against a policy, so that a
contended repeat can be re-run and named in the report. Pure: it reads mappings only.

The layout it reads (every key may be missing in files written before it existed)::

    telemetry["machine"]["other_cpu_share"] = {"median", "p90", "max", "mean", "samples"} | None
    telemetry["machine"]["other_gpu_processes"] = {"count", "pids", "identified_by", "samples"} | None
    telemetry["machine"]["cpus"]            # CPUs the shares are of
    telemetry["unavailable"][...]           # why a field is None
    telemetry["gpu"]                        # None on a CPU run: no GPU check applies

Which statistic of the other-CPU share? A repeat is summarised by the median of its steps
(``perfgate.analysis.summary``), so the question is whether the load could move that median. A
burst covering 20% of the window slows about 20% of the steps; the median step then moves
only from the 50th to about the 62nd percentile of the unhurt steps, a little. A load
sustained over more than half the window slows more than half the steps, and the median
step becomes a slowed step: that hurts a lot. "More than half of the samples were above
the limit" is exactly "the median sample is above the limit", so the median of the
per-interval shares is the statistic that matches the median step. A high quantile (p90)
would flag repeats whose median step is barely touched and send them to be re-run for
nothing; the p90 and max are still recorded, as evidence for the report. The median is
also robust to the 100 Hz tick quantisation of one 100 ms interval on a small machine.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from perfgate.model.result import machine_telemetry, other_cpu_share, other_gpu_processes

DEFAULT_MAX_OTHER_CPU_SHARE = 0.10
"""Why 10%: above the background of a quiet machine (kernel threads, the CI agent, the
idle perfgate parent: a few percent of the CPUs), and below one fully busy foreign
process on machines of up to 8 CPUs (2 CPUs: 50%, 4: 25%, 8: 12.5%), which is where a
package install or a compiler beside a CPU-threaded torch step does its damage: torch's
intra-op threads wait at every parallel region for the one that shares its core. On
larger machines one busy process is under 10% (16 CPUs: 6%); lower the limit there if a
single process should count. The shares are of the CPUs this process may run on (its
affinity mask), so a job pinned to a few cores of a big host is judged on those cores."""


@dataclass(frozen=True)
class ContentionPolicy:
    """When a repeat counts as contended.

    ``max_other_cpu_share``: the median share of the CPUs (0 to 1] that other processes may
    use during the window; a repeat above it is contended. 1 never flags the CPU.
    ``allow_other_gpu_processes``: False flags any other process that NVML lists on the
    GPU (a process with a CUDA context shares the GPU's time slices and memory).
    """

    max_other_cpu_share: float = DEFAULT_MAX_OTHER_CPU_SHARE
    allow_other_gpu_processes: bool = False

    def __post_init__(self) -> None:
        share = self.max_other_cpu_share
        if isinstance(share, bool) or not isinstance(share, (int, float)):
            raise ValueError(f"max_other_cpu_share must be a number, got {type(share).__name__}")
        if not (math.isfinite(share) and 0 < share <= 1):
            raise ValueError(f"max_other_cpu_share must be in (0, 1], a share of the CPUs, got {share!r}")
        if not isinstance(self.allow_other_gpu_processes, bool):
            raise ValueError("allow_other_gpu_processes must be true or false, "
                             f"got {type(self.allow_other_gpu_processes).__name__}")


def _on_gpu(telemetry: Mapping[str, Any] | None) -> bool:
    return isinstance(telemetry, Mapping) and telemetry.get("gpu") is not None


def _pct(share: float) -> str:
    return f"{100 * share:.0f}%"


def _cpu_reason(telemetry: Mapping[str, Any] | None, policy: ContentionPolicy) -> str | None:
    share = other_cpu_share(telemetry)
    if share is None or share <= policy.max_other_cpu_share:
        return None
    machine = machine_telemetry(telemetry)
    stats = machine["other_cpu_share"]
    samples = stats.get("samples")
    cpus = machine.get("cpus")
    of = f"of the {cpus} CPUs" if isinstance(cpus, int) and not isinstance(cpus, bool) else "of the CPUs"
    basis = f"median of {samples} samples" if isinstance(samples, int) else "median"
    used, limit = _pct(share), _pct(policy.max_other_cpu_share)
    if used == limit:  # just over the limit: show the digit that tells them apart
        used, limit = f"{100 * share:.1f}%", f"{100 * policy.max_other_cpu_share:.1f}%"
    return f"other processes used {used} {of} during the window ({basis}; limit {limit})"


def _gpu_reason(telemetry: Mapping[str, Any] | None, policy: ContentionPolicy) -> str | None:
    count = other_gpu_processes(telemetry)
    if policy.allow_other_gpu_processes or not count:
        return None
    stats = machine_telemetry(telemetry)["other_gpu_processes"]
    pids = stats.get("pids")
    noun = "process" if count == 1 else "processes"
    if isinstance(pids, list) and pids:
        which = f"pid{'s' if len(pids) > 1 else ''} {', '.join(str(p) for p in pids)}"
    else:
        which = "pids not visible from this pid namespace"
    return f"{count} other {noun} on the GPU ({which})"


def contention(telemetry: Mapping[str, Any] | None, policy: ContentionPolicy | None = None) -> str | None:
    """A one-line reason when the repeat was contended under ``policy``; None otherwise.

    None also when nothing is known (no telemetry, or a result written before contention
    was measured): ask ``contention_known`` to tell the two apart.
    """
    policy = policy or ContentionPolicy()
    reasons = [r for r in (_cpu_reason(telemetry, policy), _gpu_reason(telemetry, policy)) if r]
    return "; ".join(reasons) or None


def contention_known(telemetry: Mapping[str, Any] | None, policy: ContentionPolicy | None = None) -> bool:
    """True when ``contention`` could decide: it found contention, or every check that
    applies was measured (the CPU share always; the GPU processes on a CUDA run unless the
    policy allows other GPU processes)."""
    policy = policy or ContentionPolicy()
    if contention(telemetry, policy) is not None:
        return True
    return contention_unknown(telemetry, policy) is None


def contention_unknown(telemetry: Mapping[str, Any] | None, policy: ContentionPolicy | None = None) -> str | None:
    """Why contention could not be judged, in a few words; None when it could."""
    policy = policy or ContentionPolicy()
    if not isinstance(telemetry, Mapping):
        return "telemetry was not sampled"
    if "machine" not in telemetry:
        return "the result predates contention telemetry"
    unavailable = telemetry.get("unavailable")
    unavailable = unavailable if isinstance(unavailable, Mapping) else {}
    missing = []
    if other_cpu_share(telemetry) is None:
        missing.append(f"other processes' CPU share: {unavailable.get('other_cpu_share', 'not recorded')}")
    if _on_gpu(telemetry) and not policy.allow_other_gpu_processes and other_gpu_processes(telemetry) is None:
        missing.append(f"other GPU processes: {unavailable.get('other_gpu_processes', 'not recorded')}")
    return "; ".join(missing) or None
