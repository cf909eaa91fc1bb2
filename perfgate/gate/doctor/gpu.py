"""The doctor's checks on a GPU, each fed NVML (or a fake of it), what torch says
(:class:`~perfgate.measure.probe.TorchFacts`) and the :class:`Host`: the driver against the
CUDA the installed torch is built for, torch's view of the GPU, persistence mode, the
graphics clocks (what the runner declared in ``PERFGATE_GPU_CLOCKS``, what NVML reads,
whether sudo would let the workflow lock them), other processes on the GPU, clock-event
(throttle) reasons at idle, ECC, the PCIe link; and the judging of the CUDA micro-run's
window (:class:`~perfgate.measure.probe.MicroRun`): the CUDA event time of the steps against
the wall time of the window, and no synchronisation inside it.

:func:`nvml_call` asks NVML one question and turns whatever it cannot answer into
:class:`~perfgate.gate.doctor.card.Unavailable` with the reason.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from perfgate.gate.doctor.card import FAIL, OK, UNKNOWN, WARN, Check, Unavailable
from perfgate.measure.probe import MicroRun, TorchFacts
from perfgate.model.environment import GPU_CLOCKS_VARIABLE, parse_gpu_clocks
from perfgate.model.result import CLOCK_EVENT_REASONS

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


def driver_version(nvml: Any) -> str | None:
    """The driver's version string from NVML, or None when NVML cannot say."""
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
    driver = driver_version(gpu.nvml)
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
    visible = " (CUDA_VISIBLE_DEVICES hides every GPU)" if hides_all_gpus(environ.get("CUDA_VISIBLE_DEVICES")) else ""
    return Check("torch cuda", FAIL, f"torch {facts.version} cannot use the GPU NVML sees: {reason}{visible}",
                 "fix what the driver line says; a torch without CUDA measures on the CPU")


def hides_all_gpus(visible: str | None) -> bool:
    """Whether ``CUDA_VISIBLE_DEVICES`` (``visible``, None when unset) hides every GPU."""
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
