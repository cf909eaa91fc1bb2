"""Collect the environment fingerprint of the process that measures."""

from __future__ import annotations

import logging
import os
import platform
import re
from collections.abc import Mapping

import torch

from perfgate.measure.telemetry_host import available_cores
from perfgate.model.environment import (
    GPU_CLOCKS_MHZ_RANGE,
    GPU_CLOCKS_UNKNOWN,
    GPU_CLOCKS_UNLOCKED,
    GPU_CLOCKS_VARIABLE,
    Environment,
    cpu_model,
    parse_gpu_clocks,
)

_log = logging.getLogger(__name__)


def _gpu_driver() -> str | None:
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
    except pynvml.NVMLError:
        return None
    return version.decode() if isinstance(version, bytes) else str(version)


def declared_gpu_clocks(environ: Mapping[str, str] | None = None) -> str:
    """The clock lock the runner declared in ``PERFGATE_GPU_CLOCKS``, as recorded in the
    environment: ``"locked <MHz> MHz"``, ``"unlocked"`` or ``"unknown"``. A value that is
    not one of the two forms never stops the run: it reads as unknown, with a warning."""
    value = (os.environ if environ is None else environ).get(GPU_CLOCKS_VARIABLE)
    state, mhz = parse_gpu_clocks(value)
    if state == "unset":
        return GPU_CLOCKS_UNKNOWN
    if state == "unlocked":
        return GPU_CLOCKS_UNLOCKED
    if state == "locked":
        return f"locked {mhz} MHz"
    assert value is not None
    shown = value if len(value) <= 40 else value[:40] + "..."
    _log.warning("%s=%r is neither 'locked:<MHz>' (%d to %d) nor 'unlocked'; the GPU clocks are recorded as %s",
                 GPU_CLOCKS_VARIABLE, shown, *GPU_CLOCKS_MHZ_RANGE, GPU_CLOCKS_UNKNOWN)
    return GPU_CLOCKS_UNKNOWN


def collect(device: str, *, git_commit: str | None = None, git_dirty: bool | None = None) -> Environment:
    try:
        import torchvision

        tv_version: str | None = torchvision.__version__
    except ImportError:
        tv_version = None
    gpu_name = cuda = cudnn = driver = clocks = uuid = None
    if device == "cuda":
        clocks = declared_gpu_clocks()
        gpu_name = torch.cuda.get_device_name(torch.cuda.current_device())
        uuid = gpu_uuid(torch.cuda.current_device())
        cuda = torch.version.cuda
        cudnn_version = torch.backends.cudnn.version()
        cudnn = str(cudnn_version) if cudnn_version is not None else None
        driver = _gpu_driver()
    return Environment(
        device=device,
        torch=torch.__version__,
        python=platform.python_version(),
        cpu_model=cpu_model(),
        cpu_count=available_cores(),
        os=platform.platform(),
        gpu_name=gpu_name,
        gpu_driver=driver,
        cuda=cuda,
        cudnn=cudnn,
        torchvision=tv_version,
        git_commit=git_commit,
        git_dirty=git_dirty,
        gpu_clocks=clocks,
        gpu_uuid=uuid,
    )


def gpu_uuid(index: int) -> str | None:
    """The UUID of CUDA device ``index`` as ``nvidia-smi -L`` writes it (``GPU-`` and the
    hyphenated hex), from ``torch.cuda.get_device_properties``; None when torch does not
    give one. Not verified on a GPU at the time of writing (no device was available)."""
    try:
        value = str(getattr(torch.cuda.get_device_properties(index), "uuid", "") or "")
    except Exception:  # noqa: BLE001 - a fingerprint field, never a failure of the run
        return None
    if not re.fullmatch(r"(GPU-)?[0-9a-fA-F-]{32,36}", value):
        return None
    return value if value.startswith("GPU-") else f"GPU-{value}"
