"""Running the doctor's checks: the CUDA micro-run in its own process
(:mod:`perfgate.measure.probe`), the GPU's checks in the card's order, :func:`diagnose`
(the whole card for a device) and :func:`cuda_unavailable_reason` (why CUDA cannot be used
here, in one line, for the command line's error)."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

from perfgate.gate.doctor.card import FAIL, SKIPPED, Card, Check, Unavailable, guarded
from perfgate.gate.doctor.cpu_disk import cpu_checks
from perfgate.gate.doctor.gpu import (
    TORCH_BROKEN,
    Gpu,
    Host,
    check_clock_lock,
    check_clocks,
    check_driver,
    check_ecc,
    check_gpu_processes,
    check_micro_run,
    check_pcie,
    check_persistence,
    check_throttle,
    check_torch_cuda,
    driver_version,
    hides_all_gpus,
    nvml_call,
)
from perfgate.measure import probe
from perfgate.measure.probe import MicroRun, NvmlSession, TorchFacts
from perfgate.model.environment import cpu_model
from perfgate.model.errors import DeviceError

DEFAULT_MICRO_RUN_S = 20.0
"""The micro-run's length in seconds unless ``--micro-run-seconds`` says."""

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
        card.machine.update(torch=facts.version, torch_cuda=facts.cuda, gpu_driver=driver_version(session.nvml))
        card.cuda_checked = True
        checks, run = gpu_checks(gpu, host, micro_seconds, micro)
        card.checks.extend(checks)
        card.micro_run = run.to_dict() if run is not None else None
    finally:
        session.close()
    return card


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
        if hides_all_gpus(os.environ.get("CUDA_VISIBLE_DEVICES")):
            return "CUDA_VISIBLE_DEVICES hides every GPU"
        return facts.error or f"torch {facts.version} cannot use the GPU"
    finally:
        session.close()

