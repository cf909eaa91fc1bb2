"""``perfgate doctor``: is this machine fit to gate? A card with a verdict per check.

Each check is a small function that returns a :class:`Check` (name, status, detail,
advice); the command runs them and prints the card. On a GPU: the driver against the
CUDA the installed torch is built for, persistence mode, the graphics clocks (what the
runner declared in ``PERFGATE_GPU_CLOCKS``, what NVML reads, whether sudo would let the
workflow lock them), other processes on the GPU, clock-event (throttle) reasons at idle,
ECC, the PCIe link, and a micro-run on CUDA (:mod:`perfgate.measure.probe`): the CUDA
event time of the steps against the wall time of the window, and no synchronisation
inside it. On every machine: the CPU frequency governor, the CPUs, the load other
processes put on them for a second, and the free disk for the data cache.

Statuses: ``ok``; ``warn`` (worth fixing, does not fail); ``FAIL`` (the machine is not fit
to gate: exit 1); ``unknown`` (the question could not be asked, with the reason, such as
an NVML call the GPU does not support); ``skipped``. Exit 0 when nothing FAILs, 1 with
the list of what is wrong, 2 for bad usage (``--device cuda`` without a driver).

Nothing here imports torch: the torch and NVML calls are in ``perfgate.measure.probe``,
and every check takes what they return (or a fake of it) as an argument.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from perfgate.analysis.contention import DEFAULT_MAX_OTHER_CPU_SHARE
from perfgate.measure import probe
from perfgate.measure.probe import MicroRun, NvmlSession, TorchFacts
from perfgate.measure.runner import default_cache_dir
from perfgate.model.environment import GPU_CLOCKS_VARIABLE, cpu_model, parse_gpu_clocks
from perfgate.model.errors import EXIT_OK, EXIT_REGRESSION, DeviceError, UsageError
from perfgate.model.result import CLOCK_EVENT_REASONS

OK, WARN, FAIL, UNKNOWN, SKIPPED = "ok", "warn", "FAIL", "unknown", "skipped"
STATUSES = (OK, WARN, FAIL, UNKNOWN, SKIPPED)

DISK_WARN_BYTES = 5e9
"""Below this much free space for the cache: warn (the synthetic data of both reference
workloads, traces and results fit easily in it)."""
DISK_FAIL_BYTES = 1e9
"""Below this: FAIL, a run may stop half-way writing its data or results."""

DEFAULT_MICRO_RUN_S = 20.0
BUSY_OK = 0.97
"""Σ of the steps' CUDA event times over the wall time of the window: at or above this
the device was busy for the whole window, as a GPU-bound step must keep it."""
BUSY_FAIL = 0.90
"""Below this, FAIL: the device sat idle for more than a tenth of a window whose host has
nothing to do but launch kernels."""
SPAN_TOLERANCE = 0.02
"""The CUDA event clock from the first step's start to the last step's end against the
host clock between the two synchronisations: they must agree within this share."""

TORCH_BROKEN = "(not importable)"
"""``TorchFacts.version`` when importing torch itself failed."""

CLOCK_LOCK_DEFAULT_MHZ = 1245
"""What the workflows lock to (``GPU_LOCK_MHZ``) when nothing else says."""
NVIDIA_SMI = "/usr/bin/nvidia-smi"

# NVML clock-event reasons (nvmlClocksEventReason*): the ones that slow a GPU at idle
# for a fault of the machine (cooling, power) FAIL, a power cap at idle warns.
EVENT_REASONS = CLOCK_EVENT_REASONS
FAILING_REASONS = 0x8 | 0x20 | 0x40 | 0x80
WARNING_REASONS = 0x4


@dataclass(frozen=True)
class Check:
    """One line of the card."""

    name: str
    status: str
    detail: str
    advice: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status {self.status!r} is not one of {STATUSES}")


@dataclass
class Card:
    """The checks, in order, and what the card says about the machine."""

    checks: list[Check] = field(default_factory=list)
    machine: dict[str, Any] = field(default_factory=dict)
    cuda_checked: bool = False
    micro_run: dict[str, Any] | None = None
    """The micro-run's figures (:class:`perfgate.measure.probe.MicroRun`), when it ran."""

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if c.status == FAIL]

    @property
    def exit_code(self) -> int:
        return EXIT_REGRESSION if self.failed else EXIT_OK

    def to_dict(self) -> dict[str, Any]:
        return {
            "fit": not self.failed,
            "exit_code": self.exit_code,
            "machine": dict(self.machine),
            "cuda_checked": self.cuda_checked,
            "checks": [asdict(c) for c in self.checks],
            "failed": [c.name for c in self.failed],
            "micro_run": self.micro_run,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Card:
        """The card ``--json`` printed (``scripts/gpu-check.sh`` renders it again as text)."""
        return cls(checks=[Check(**c) for c in data["checks"]], machine=dict(data.get("machine") or {}),
                   cuda_checked=bool(data.get("cuda_checked")), micro_run=data.get("micro_run"))


class Unavailable(Exception):
    """A question that could not be asked; the message is the reason, one line."""


def _nvml_reason(name: str, exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    if type(exc).__name__.startswith("NVMLError"):  # "Not Supported" -> "... not supported"
        return f"{name} {text.lower()}" if text else f"{name} failed ({type(exc).__name__})"
    return f"{name} failed: {type(exc).__name__}: {text}" if text else f"{name} failed: {type(exc).__name__}"


def nvml_call(nvml: Any, name: str, *args: Any) -> Any:
    """``nvml.<name>(*args)``, or :class:`Unavailable` with the reason (never the traceback)."""
    fn = getattr(nvml, name, None)
    if fn is None:
        raise Unavailable(f"{name} is not in this nvidia-ml-py")
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 - NVMLError_NotSupported, NoPermission, GpuIsLost...
        raise Unavailable(_nvml_reason(name, exc)) from None


def guarded(name: str, check: Callable[..., Check], *args: Any, **kwargs: Any) -> Check:
    """Run one check; whatever it could not ask becomes an ``unknown`` line with the reason."""
    try:
        return check(*args, **kwargs)
    except Unavailable as exc:
        return Check(name, UNKNOWN, str(exc))
    except Exception as exc:  # noqa: BLE001 - a check must never take the card down
        return Check(name, UNKNOWN, f"the check failed: {type(exc).__name__}: {' '.join(str(exc).split())}")


def _gb(n: float) -> str:
    return f"{n / 1e9:.1f} GB"


# ---------------------------------------------------------------- CPU and disk checks


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


# ---------------------------------------------------------------- GPU checks


@dataclass(frozen=True)
class Host:
    """What the GPU checks ask of the machine besides NVML; tests pass fakes."""

    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    euid: int = field(default_factory=lambda: os.geteuid() if hasattr(os, "geteuid") else -1)
    pid: int = field(default_factory=os.getpid)
    run: Callable[[list[str]], tuple[int, str]] | None = None
    """Runs a command and returns (exit status, output); None: :func:`run_command`."""
    process_name: Callable[[int], str | None] | None = None


def run_command(argv: list[str], timeout_s: float = 10.0) -> tuple[int, str]:
    try:
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout_s)
    except FileNotFoundError:
        return 127, f"{argv[0]}: not found"
    except subprocess.TimeoutExpired:
        return 124, f"{argv[0]}: no answer in {timeout_s:g} s"
    except OSError as exc:
        return 126, f"{argv[0]}: {exc}"
    return proc.returncode, (proc.stdout + proc.stderr).strip()


def process_name(pid: int) -> str | None:
    try:
        import psutil

        return str(psutil.Process(pid).name())
    except Exception:  # noqa: BLE001 - gone, another PID namespace, no permission
        return None


@dataclass(frozen=True)
class Gpu:
    """What the GPU checks read: NVML (the module, or a fake with the same functions), the
    handle of the GPU torch measures on, and what torch says."""

    nvml: Any
    handle: Any
    torch: TorchFacts
    matched_by: str = "index 0"


def cuda_version(value: int) -> tuple[int, int]:
    """NVML's CUDA version integer (``12020``) as (major, minor)."""
    return value // 1000, (value % 1000) // 10


def parse_cuda(text: str) -> tuple[int, int] | None:
    match = re.match(r"(\d+)\.(\d+)", text)
    return (int(match[1]), int(match[2])) if match else None


def driver_cuda(nvml: Any) -> tuple[int, int]:
    """The highest CUDA the driver supports, from NVML."""
    try:
        value = nvml_call(nvml, "nvmlSystemGetCudaDriverVersion_v2")
    except Unavailable:
        value = nvml_call(nvml, "nvmlSystemGetCudaDriverVersion")
    return cuda_version(int(value))


def _driver_version(nvml: Any) -> str | None:
    try:
        version = nvml_call(nvml, "nvmlSystemGetDriverVersion")
    except Unavailable:
        return None
    return version.decode() if isinstance(version, bytes) else str(version)


def _fmt(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def check_driver(gpu: Gpu) -> Check:
    """The driver's CUDA against the CUDA torch is built for.

    A driver of an older major CUDA version cannot run the build: FAIL. The same major
    version and an older minor one runs under CUDA's minor-version compatibility, without
    PTX JIT and the newest features: warn."""
    name = "driver"
    torch_cuda = gpu.torch.cuda
    driver = _driver_version(gpu.nvml)
    driver_text = f"driver {driver}" if driver else "the driver"
    if gpu.torch.version == TORCH_BROKEN:
        raise Unavailable(f"{driver_text}; torch: {gpu.torch.error}")
    if torch_cuda is None:
        return Check(name, FAIL, f"torch {gpu.torch.version} is a CPU-only build ({driver_text} is here)",
                     "install a CUDA build of torch (bash scripts/setup.sh installs the pinned one)")
    supported = driver_cuda(gpu.nvml)
    wanted = parse_cuda(torch_cuda)
    detail = (f"{driver_text} supports CUDA up to {_fmt(supported)}; "
              f"torch {gpu.torch.version} is built for CUDA {torch_cuda}")
    if wanted is None:
        raise Unavailable(f"cannot read torch.version.cuda {torch_cuda!r}")
    advice = (f"update the NVIDIA driver to one supporting CUDA {torch_cuda} (nvidia-smi prints what it supports), "
              f"or install a torch built for CUDA {supported[0]}.x")
    if supported[0] < wanted[0]:
        return Check(name, FAIL, detail + ": the driver is too old", advice)
    if supported < wanted:
        return Check(name, WARN, detail + " (minor-version compatibility: no PTX JIT, no newer features)", advice)
    return Check(name, OK, detail)


def check_torch_cuda(gpu: Gpu, environ: Mapping[str, str]) -> Check:
    facts = gpu.torch
    if facts.available:
        shown = facts.name or "a GPU"
        count = f"{facts.device_count} GPUs, measures on cuda:0" if facts.device_count > 1 else "1 GPU"
        return Check("torch cuda", OK, f"torch {facts.version} sees {count}: {shown} (NVML: {gpu.matched_by})")
    reason = facts.error or "torch.cuda.is_available() is False"
    visible = " (CUDA_VISIBLE_DEVICES hides every GPU)" if _hides_all(environ.get("CUDA_VISIBLE_DEVICES")) else ""
    return Check("torch cuda", FAIL, f"torch {facts.version} cannot use the GPU NVML sees: {reason}{visible}",
                 "fix what the driver line says; a torch without CUDA measures on the CPU")


def _hides_all(visible: str | None) -> bool:
    return visible is not None and visible.strip() in ("", "-1", "none", "NoDevFiles")


def check_persistence(gpu: Gpu) -> Check:
    mode = nvml_call(gpu.nvml, "nvmlDeviceGetPersistenceMode", gpu.handle)
    if int(mode) == 1:
        return Check("persistence", OK, "persistence mode on")
    return Check("persistence", WARN, "persistence mode off: the driver may unload between jobs",
                 "enable nvidia-persistenced (or nvidia-smi -pm 1 at boot), so that every job finds the GPU "
                 "initialised and in the same state")


def declared_clocks(environ: Mapping[str, str]) -> tuple[str, int | None]:
    """``PERFGATE_GPU_CLOCKS`` as the fingerprint reads it: ("locked", MHz), ("unlocked",
    None), ("unset", None) or ("bad", None)."""
    return parse_gpu_clocks(environ.get(GPU_CLOCKS_VARIABLE))


def check_clocks(gpu: Gpu, environ: Mapping[str, str]) -> Check:
    """The declared clock lock, and NVML's current and maximum graphics clocks."""
    nvml = gpu.nvml
    state, mhz = declared_clocks(environ)
    try:
        graphics = getattr(nvml, "NVML_CLOCK_GRAPHICS", 0)
        current = int(nvml_call(nvml, "nvmlDeviceGetClockInfo", gpu.handle, graphics))
        top = int(nvml_call(nvml, "nvmlDeviceGetMaxClockInfo", gpu.handle, graphics))
        reading = f"graphics clock {current} MHz now, {top} MHz max"
    except Unavailable as exc:
        current = None
        reading = f"graphics clock unknown: {exc}"
    if state == "locked":
        detail = f"PERFGATE_GPU_CLOCKS=locked:{mhz}; {reading}"
        if current is not None and mhz is not None and current > mhz * 1.02:
            return Check("gpu clocks", WARN, detail + ": above the declared lock",
                         f"the lock is not in effect: nvidia-smi -lgc {mhz},{mhz} before measuring")
        return Check("gpu clocks", OK, detail)
    lock = "lock them (nvidia-smi -lgc <MHz>,<MHz>) and export PERFGATE_GPU_CLOCKS=locked:<MHz>, as the workflows do"
    if state == "unlocked":
        return Check("gpu clocks", WARN, f"PERFGATE_GPU_CLOCKS=unlocked; {reading}",
                     "free clocks boost with temperature and power, and the step time with them: " + lock)
    if state == "bad":
        return Check("gpu clocks", WARN, f"PERFGATE_GPU_CLOCKS is neither locked:<MHz> nor unlocked; {reading}",
                     "results record the clocks as unknown: " + lock)
    return Check("gpu clocks", WARN, f"PERFGATE_GPU_CLOCKS is not set; {reading}",
                 "results record the clocks as unknown (the workflows set it after trying the lock): " + lock)


def lock_mhz(environ: Mapping[str, str]) -> int:
    state, mhz = declared_clocks(environ)
    if state == "locked" and mhz is not None:
        return mhz
    value = environ.get("GPU_LOCK_MHZ", "")
    return int(value) if re.fullmatch(r"[1-9][0-9]{2,3}", value) else CLOCK_LOCK_DEFAULT_MHZ


def check_clock_lock(host: Host) -> Check:
    """Could the workflow lock the clocks? As root it can; else ask sudo without running anything."""
    mhz = lock_mhz(host.environ)
    lock = [NVIDIA_SMI, "-lgc", f"{mhz},{mhz}"]
    reset = [NVIDIA_SMI, "-rgc"]
    if host.euid == 0:
        return Check("clock lock", OK, f"running as root: nvidia-smi -lgc {mhz},{mhz} needs no sudo")
    run = host.run or run_command
    sudoers = (f"allow exactly the two commands in sudoers: runner ALL=(root) NOPASSWD: {NVIDIA_SMI} -lgc "
               f"{mhz}\\,{mhz}, {NVIDIA_SMI} -rgc (or lock the clocks as root before the runner starts)")
    code, output = run(["sudo", "-n", "-l", *lock])
    if code == 127:
        return Check("clock lock", WARN, "sudo is not installed: the workflows cannot lock the clocks", sudoers)
    if code != 0:
        said = (output.splitlines() or ["not allowed"])[0][:200]
        return Check("clock lock", WARN, f"sudo -n refuses {' '.join(lock)}: {said}", sudoers)
    code, output = run(["sudo", "-n", "-l", *reset])
    if code != 0:
        return Check("clock lock", WARN, f"sudo allows {' '.join(lock)} but not {' '.join(reset)}", sudoers)
    return Check("clock lock", OK, f"sudo -n allows {' '.join(lock)} and {' '.join(reset)} (not run)")


def check_gpu_processes(gpu: Gpu, host: Host) -> Check:
    nvml = gpu.nvml
    found: dict[int, int | None] = {}
    for call in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
        for proc in nvml_call(nvml, call, gpu.handle):
            pid = int(proc.pid)
            used = getattr(proc, "usedGpuMemory", None)
            found.setdefault(pid, int(used) if isinstance(used, int) else None)
    found.pop(host.pid, None)
    if not found:
        return Check("gpu processes", OK, "no other process on the GPU")
    namer = host.process_name or process_name
    shown = []
    for pid, used in sorted(found.items()):
        label = namer(pid) or "?"
        memory = f", {used / 2**20:.0f} MiB" if used else ""
        shown.append(f"{pid} ({label}{memory})")
    return Check("gpu processes", FAIL, f"{len(found)} other process{'es' if len(found) != 1 else ''} on the GPU: "
                 + ", ".join(shown[:8]) + (" ..." if len(shown) > 8 else ""),
                 "stop them or measure on a GPU nothing else uses: they share its time slices and memory, "
                 "and every repeat beside them counts as contended")


def check_throttle(gpu: Gpu) -> Check:
    nvml = gpu.nvml
    try:
        mask = int(nvml_call(nvml, "nvmlDeviceGetCurrentClocksEventReasons", gpu.handle))
    except Unavailable:
        mask = int(nvml_call(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", gpu.handle))
    names = [n for bit, n in EVENT_REASONS.items() if mask & bit]
    unknown = mask & ~sum(EVENT_REASONS)
    if unknown:
        names.append(f"0x{unknown:x}")
    shown = ", ".join(names) or "none"
    if mask & FAILING_REASONS:
        return Check("throttle", FAIL, f"at idle the clocks are held down by: {shown}",
                     "a thermal or hardware slowdown at idle is a fault of the machine (cooling, airflow, power "
                     "cables): fix it before measuring")
    if mask & WARNING_REASONS:
        return Check("throttle", WARN, f"at idle the clocks are held down by: {shown}",
                     "a power cap at idle: check the power limit (nvidia-smi -q -d POWER)")
    return Check("throttle", OK, f"clock-event reasons at idle: {shown}")


def check_ecc(gpu: Gpu) -> Check:
    nvml = gpu.nvml
    current, pending = (int(v) for v in nvml_call(nvml, "nvmlDeviceGetEccMode", gpu.handle))
    mode = "on" if current else "off"
    if current != pending:
        return Check("ecc", WARN, f"ECC {mode}, {'on' if pending else 'off'} after the next reboot",
                     "the mode changes memory bandwidth: record baselines after the reboot, not before")
    if not current:
        return Check("ecc", OK, "ECC off (keep it as the baselines were recorded)")
    errors = int(nvml_call(nvml, "nvmlDeviceGetTotalEccErrors", gpu.handle,
                           getattr(nvml, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1),
                           getattr(nvml, "NVML_VOLATILE_ECC", 0)))
    if errors:
        plural = "s" if errors != 1 else ""
        return Check("ecc", FAIL, f"ECC on, {errors} uncorrected error{plural} since the driver loaded",
                     "the GPU's memory is failing: reset the GPU or take it out of service")
    return Check("ecc", OK, "ECC on, no uncorrected errors since the driver loaded")


def check_pcie(gpu: Gpu) -> Check:
    nvml, h = gpu.nvml, gpu.handle
    width = int(nvml_call(nvml, "nvmlDeviceGetCurrPcieLinkWidth", h))
    max_width = int(nvml_call(nvml, "nvmlDeviceGetMaxPcieLinkWidth", h))
    gen = int(nvml_call(nvml, "nvmlDeviceGetCurrPcieLinkGeneration", h))
    max_gen = int(nvml_call(nvml, "nvmlDeviceGetMaxPcieLinkGeneration", h))
    detail = f"x{width} of x{max_width}, gen {gen} of {max_gen}"
    if width < max_width:
        return Check("pcie", WARN, detail + ": the link runs narrower than it can",
                     "reseat the card or move it to a full-width slot: host-to-device copies slow down")
    if gen < max_gen:
        return Check("pcie", OK, detail + " (the generation drops at idle to save power)")
    return Check("pcie", OK, detail)


def check_micro_run(run: MicroRun) -> list[Check]:
    """The micro-run's window: event time against wall time, and no synchronisation in it."""
    checks = []
    wall_ms = run.wall_s * 1e3
    if run.sync_error is not None:
        checks.append(Check("window sync", FAIL,
                            f"the window raised after {run.steps} steps under set_sync_debug_mode('error'): "
                            f"{run.sync_error}",
                            "'called a synchronizing CUDA operation': something in this torch or driver "
                            "synchronises where a measured window must not; any other error: run it again"))
    elif not run.sync_caught:
        checks.append(Check("window sync", UNKNOWN,
                            "set_sync_debug_mode('error') did not raise on a deliberate .item(): it cannot tell"))
    else:
        checks.append(Check("window sync", OK, f"no synchronisation in {run.steps} steps "
                                               "(set_sync_debug_mode('error'), which caught a deliberate .item())"))
    if run.steps == 0 or wall_ms <= 0:
        checks.append(Check("event timing", FAIL, "the window ran no step", "see the window sync line"))
        return checks
    busy = run.busy_ms / wall_ms
    detail = (f"{run.steps} steps of {run.step_median_ms:.2f} ms on {run.device_name}: Σ event time "
              f"{run.busy_ms / 1e3:.3f} s of {run.wall_s:.3f} s wall ({busy:.1%} busy); "
              f"events first to last {run.span_ms / 1e3:.3f} s")
    if abs(run.span_ms - wall_ms) > SPAN_TOLERANCE * wall_ms + 1.0:
        checks.append(Check("event timing", FAIL, detail + ": the CUDA event clock and the host clock disagree",
                            "CUDA event times cannot be trusted here: check the driver and clocks"))
    elif busy < BUSY_FAIL:
        checks.append(Check("event timing", FAIL, detail + ": the device sat idle",
                            "the host could not keep a GPU-bound step fed: other load on the CPUs, a slow CPU, "
                            "or a CPU frequency governor that is not 'performance'"))
    elif busy < BUSY_OK:
        checks.append(Check("event timing", WARN, detail + ": some idle time",
                            "look at the cpu load and governor lines: the host fell behind now and then"))
    else:
        checks.append(Check("event timing", OK, detail))
    return checks


# ---------------------------------------------------------------- running them


MicroRunner = Callable[[float], "MicroRun | str"]


def micro_run_in_child(seconds: float) -> MicroRun | str:
    """The micro-run in its own process (:mod:`perfgate.measure.probe`), or why it failed."""
    from perfgate.measure.child import call

    timeout = seconds + 120.0
    try:
        child = call("perfgate.measure.probe", {"seconds": seconds}, timeout)
    except subprocess.TimeoutExpired:
        return f"the micro-run did not finish in {timeout:.0f} s"
    response = child.response
    if response is None:
        return child.died("the micro-run")
    if not response.get("ok"):
        return str(response.get("error", {}).get("message", "the micro-run failed"))
    return MicroRun(**response["micro_run"])


def gpu_checks(gpu: Gpu, host: Host, micro_seconds: float | None,
               micro: MicroRunner) -> tuple[list[Check], MicroRun | None]:
    """The GPU's checks, then the micro-run's (which it returns too, when it ran)."""
    run = None
    checks = [
        guarded("driver", check_driver, gpu),
        guarded("torch cuda", check_torch_cuda, gpu, host.environ),
        guarded("persistence", check_persistence, gpu),
        guarded("gpu clocks", check_clocks, gpu, host.environ),
        guarded("clock lock", check_clock_lock, host),
        guarded("gpu processes", check_gpu_processes, gpu, host),
        guarded("throttle", check_throttle, gpu),
        guarded("ecc", check_ecc, gpu),
        guarded("pcie", check_pcie, gpu),
    ]
    if micro_seconds is None:
        checks.append(Check("micro-run", SKIPPED, "--no-micro-run"))
    elif not gpu.torch.available:
        checks.append(Check("micro-run", SKIPPED, "torch cannot use the GPU (see above)"))
    else:
        outcome = micro(micro_seconds)
        if isinstance(outcome, str):
            checks.append(Check("micro-run", FAIL, f"the {micro_seconds:g} s CUDA micro-run failed: {outcome}",
                                "a GPU that cannot train for a few seconds cannot gate: fix the lines above, "
                                "then run perfgate doctor again"))
        else:
            run = outcome
            checks.extend(check_micro_run(outcome))
    return checks, run


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


def diagnose(device: str, cache_dir: Path, *, micro_seconds: float | None = DEFAULT_MICRO_RUN_S,
             host: Host | None = None,
             open_nvml: Callable[[str | None], NvmlSession | str] = probe.open_nvml,
             torch_facts: Callable[[], TorchFacts] = probe.torch_facts,
             micro: MicroRunner = micro_run_in_child,
             cpu: Callable[[Path], list[Check]] = cpu_checks) -> Card:
    """The card for ``device`` (``auto``, ``cpu`` or ``cuda``); raises DeviceError when
    ``cuda`` is asked for and there is no NVIDIA driver to check."""
    host = host or Host()
    card = Card(machine={"host": socket.gethostname(), "cpu_model": cpu_model(), "cpus": os.cpu_count()})
    card.checks.extend(cpu(cache_dir))
    if device == "cpu":
        card.checks.append(Check("cuda", SKIPPED, "--device cpu: CUDA checks skipped"))
        return card
    # NVML first: without a driver there is no CUDA, and torch need not even be imported.
    session = open_nvml(None)
    if isinstance(session, str):
        if device == "cuda":
            raise DeviceError(f"--device cuda: no NVIDIA driver here ({session}); use --device cpu")
        card.checks.append(Check("cuda", SKIPPED, f"no NVIDIA driver ({session}): CUDA checks skipped"))
        return card
    try:
        try:
            facts = torch_facts()
        except Exception as exc:  # noqa: BLE001 - a broken torch install: a FAIL line, not a traceback
            facts = TorchFacts(version=TORCH_BROKEN, cuda=None, available=False, device_count=0,
                               error=f"import torch failed: {type(exc).__name__}: {' '.join(str(exc).split())}")
        if facts.pci_bus_id:
            session.close()
            reopened = open_nvml(facts.pci_bus_id)
            if isinstance(reopened, str):
                raise DeviceError(f"NVML went away: {reopened}")
            session = reopened
        gpu = Gpu(session.nvml, session.handle, facts, session.matched_by)
        try:
            name = nvml_call(session.nvml, "nvmlDeviceGetName", session.handle)
            card.machine["gpu"] = name.decode() if isinstance(name, bytes) else str(name)
        except Unavailable:
            card.machine["gpu"] = facts.name
        card.machine.update(torch=facts.version, torch_cuda=facts.cuda, gpu_driver=_driver_version(session.nvml))
        card.cuda_checked = True
        checks, run = gpu_checks(gpu, host, micro_seconds, micro)
        card.checks.extend(checks)
        card.micro_run = run.to_dict() if run is not None else None
    finally:
        session.close()
    return card


# ---------------------------------------------------------------- the command


def render(card: Card) -> str:
    m = card.machine
    lines = [f"perfgate doctor: {m.get('host', '?')} ({m.get('cpu_model', '?')}, {m.get('cpus', '?')} CPUs)"]
    if card.cuda_checked:
        lines.append(f"  GPU {m.get('gpu') or '?'}, driver {m.get('gpu_driver') or '?'}, "
                     f"torch {m.get('torch')} (CUDA {m.get('torch_cuda') or 'none'})")
    width = max(len(c.name) for c in card.checks) if card.checks else 0
    for c in card.checks:
        lines.append(f"  {c.status:<8} {c.name:<{width}}  {c.detail}")
        if c.advice and c.status != OK:
            lines.append(f"  {'':<8} {'':<{width}}  -> {c.advice}")
    warnings = sum(c.status == WARN for c in card.checks)
    unknown = sum(c.status == UNKNOWN for c in card.checks)
    notes = ", ".join(p for p in (f"{warnings} warning{'s' if warnings != 1 else ''}" if warnings else "",
                                  f"{unknown} unknown" if unknown else "") if p)
    where = "with the CUDA checks" if card.cuda_checked else "CUDA checks skipped"
    if card.failed:
        lines.append(f"not fit to gate ({where}): {len(card.failed)} FAIL")
        lines.extend(f"  - {c.name}: {c.detail}" + (f" ({c.advice})" if c.advice else "") for c in card.failed)
    else:
        lines.append(f"fit to gate ({where})" + (f"; {notes}" if notes else ""))
    return "\n".join(lines)


def cmd_doctor(args: argparse.Namespace) -> int:
    if args.no_micro_run:
        seconds = None
    else:
        seconds = args.micro_run_seconds
        if not (seconds >= 1.0):
            raise UsageError("--micro-run-seconds must be at least 1")
    cache_dir = Path(args.cache_dir) if args.cache_dir else default_cache_dir()
    card = diagnose(args.device, cache_dir, micro_seconds=seconds)
    if args.json:
        print(json.dumps(card.to_dict(), indent=2))
    else:
        print(render(card))
    return card.exit_code


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "doctor", help="check this machine for gating: driver, clocks, other GPU processes, CPU governor, disk",
        description="Check the machine perfgate runs on and print a card with a verdict per line (ok, warn, "
                    "FAIL, unknown, skipped) and what to do. On a GPU it also runs a short CUDA micro-run: the "
                    "steps' CUDA event time against the window's wall time, and no synchronisation inside it.",
        epilog="exit codes: 0 fit to gate (warnings allowed), 1 a check FAILed, 2 bad usage "
               "(--device cuda without a driver)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"],
                   help="auto (default): the CUDA checks when an NVIDIA driver is here; cuda: require them; "
                        "cpu: skip them")
    p.add_argument("--json", action="store_true", help="print the card as JSON")
    p.add_argument("--micro-run-seconds", type=float, default=DEFAULT_MICRO_RUN_S, metavar="SECONDS",
                   help=f"length of the CUDA micro-run (default {DEFAULT_MICRO_RUN_S:g})")
    p.add_argument("--no-micro-run", action="store_true", help="skip the CUDA micro-run")
    p.add_argument("--cache-dir", metavar="DIR",
                   help="the data cache whose disk is checked (default: $PERFGATE_CACHE_DIR or ~/.cache/perfgate)")
    p.add_argument("-v", "--verbose", action="store_true", help="show tracebacks on errors")
    p.set_defaults(func=cmd_doctor)


def cuda_unavailable_reason(torch_facts: Callable[[], TorchFacts] = probe.torch_facts,
                            open_nvml: Callable[[str | None], NvmlSession | str] = probe.open_nvml) -> str:
    """Why CUDA cannot be used here, in one line: no driver, a driver too old for the
    installed torch, a CPU-only torch, or torch's own message."""
    session = open_nvml(None)
    if isinstance(session, str):
        return f"no NVIDIA driver ({session})"
    try:
        facts = torch_facts()
        check = guarded("driver", check_driver, Gpu(session.nvml, session.handle, facts, session.matched_by))
        if check.status == FAIL:
            return check.detail
        if _hides_all(os.environ.get("CUDA_VISIBLE_DEVICES")):
            return "CUDA_VISIBLE_DEVICES hides every GPU"
        return facts.error or f"torch {facts.version} cannot use the GPU"
    finally:
        session.close()

