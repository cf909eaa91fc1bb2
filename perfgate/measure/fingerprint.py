"""Collect the environment fingerprint of the process that measures."""

from __future__ import annotations

import platform

import torch

from perfgate.environment import Environment
from perfgate.measure.loop import available_cores


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


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


def collect(device: str, *, git_commit: str | None = None, git_dirty: bool | None = None) -> Environment:
    try:
        import torchvision

        tv_version: str | None = torchvision.__version__
    except ImportError:
        tv_version = None
    gpu_name = cuda = cudnn = driver = None
    if device == "cuda":
        gpu_name = torch.cuda.get_device_name(torch.cuda.current_device())
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
    )
