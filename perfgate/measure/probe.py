"""What ``perfgate doctor`` asks of torch and NVML, and its CUDA micro-run.

Everything that touches torch is here (the only package allowed to import it); the
judging and the card are in :mod:`perfgate.gate.doctor`, which feeds its checks what these
functions return, or fakes of it, and the command is :mod:`perfgate.adapters.doctor`. torch is imported inside the functions, so
that importing this module (the command line does, through the doctor) stays cheap.

The micro-run runs in its own process (``python -m perfgate.measure.probe REQUEST
RESPONSE``, the protocol of :mod:`perfgate.measure.child`), as a measured repeat does: a
driver that hangs is cut off by a timeout, and the doctor's own process never holds a
CUDA context while it lists the processes on the GPU.
"""

from __future__ import annotations

import sys
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from statistics import median
from typing import Any

from perfgate.measure.child import serve

# The micro-run's model: matrix products large enough that a step keeps any GPU busy for
# milliseconds (a T4 about 80 ms, an H100 a few), so the host stays ahead of the device.
WIDTH = 4096
LAYERS = 4
BATCH = 1024
MIN_STEPS = 20
MAX_STEPS = 100_000
WARMUP_S = 2.0
"""Of the micro-run's time, how much goes to warm-up (cuBLAS, the caching allocator) and
timing a step; the rest is the measured window."""


@dataclass(frozen=True)
class TorchFacts:
    """What the installed torch says about CUDA; no CUDA context is created for it."""

    version: str
    cuda: str | None
    """``torch.version.cuda``: the CUDA the build is for; None for a CPU-only build."""
    available: bool
    device_count: int
    name: str | None = None
    pci_bus_id: str | None = None
    """Of torch's ``cuda:0``, as NVML writes it (``00000000:3B:00.0``), to find the same GPU there."""
    error: str | None = None
    """The warning or error torch gave when CUDA was not usable, one line."""


def torch_facts() -> TorchFacts:
    import torch

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            available = bool(torch.cuda.is_available())
            count = torch.cuda.device_count() if available else 0
            error = None
        except Exception as exc:  # noqa: BLE001 - a broken driver or runtime: said, not raised
            available, count, error = False, 0, f"{type(exc).__name__}: {exc}"
    if error is None and not available and caught:
        error = " ".join(str(caught[-1].message).split())
    name = bus = None
    if available:
        try:
            props = torch.cuda.get_device_properties(0)
            name = props.name
            domain = getattr(props, "pci_domain_id", None)
            bus_id = getattr(props, "pci_bus_id", None)
            device = getattr(props, "pci_device_id", None)
            if None not in (domain, bus_id, device):
                bus = f"{domain:08X}:{bus_id:02X}:{device:02X}.0"
        except Exception as exc:  # noqa: BLE001
            error = f"{type(exc).__name__}: {exc}"
    return TorchFacts(version=torch.__version__, cuda=torch.version.cuda, available=available,
                      device_count=count, name=name, pci_bus_id=bus, error=error)


@dataclass(frozen=True)
class NvmlSession:
    """An initialised NVML and the handle of the GPU torch measures on (or why not)."""

    nvml: Any
    handle: Any
    matched_by: str
    """How the handle was found: ``"PCI bus id 00000000:3B:00.0"`` or ``"index 0"``."""

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001,S110 - nothing to do about a failing shutdown
            pass


def open_nvml(pci_bus_id: str | None = None) -> NvmlSession | str:
    """NVML, or one line saying why it cannot be used (no driver, no library)."""
    try:
        import pynvml
    except ImportError as exc:
        return f"nvidia-ml-py is not installed ({exc})"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return f"NVML: {exc}"
    if pci_bus_id:
        try:
            return NvmlSession(pynvml, pynvml.nvmlDeviceGetHandleByPciBusId(pci_bus_id),
                               f"PCI bus id {pci_bus_id}")
        except Exception:  # noqa: BLE001,S110 - fall back to the first GPU, and say so
            pass
    try:
        return NvmlSession(pynvml, pynvml.nvmlDeviceGetHandleByIndex(0), "index 0")
    except Exception as exc:  # noqa: BLE001
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001,S110
            pass
        return f"NVML sees no GPU: {exc}"


@dataclass(frozen=True)
class MicroRun:
    """The window of the micro-run, as the doctor judges it."""

    steps: int
    wall_s: float
    """Host time between the synchronisation that opens the window and the one that closes it."""
    busy_ms: float
    """Σ over the steps of the CUDA event time from the step's first event to its last."""
    span_ms: float
    """CUDA event time from the first step's start to the last step's end."""
    step_median_ms: float
    sync_caught: bool
    """Whether the sync debug mode raised on a deliberate ``.item()`` before the window:
    without that, no error inside the window proves nothing."""
    sync_error: str | None
    """The first line of what the sync debug mode raised inside the window, else None."""
    device_name: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Backend:
    """The device calls the micro-run makes: real CUDA, or fakes in tests."""

    device: str
    event: Callable[[], Any]
    synchronize: Callable[[], None]
    sync_debug: Callable[[str], None]
    """``torch.cuda.set_sync_debug_mode``: ``"error"`` in the window, ``"default"`` after."""
    now: Callable[[], float] = time.perf_counter
    read_back: Callable[[Any], Any] = lambda tensor: tensor.item()
    """The deliberate synchronisation the sync debug mode must catch before the window."""


def cuda_backend() -> Backend:
    import torch

    return Backend("cuda", lambda: torch.cuda.Event(enable_timing=True), torch.cuda.synchronize,
                   torch.cuda.set_sync_debug_mode)


@contextmanager
def _sync_debug(backend: Backend) -> Iterator[None]:
    backend.sync_debug("error")
    try:
        yield
    finally:
        backend.sync_debug("default")


def _first_line(exc: BaseException) -> str:
    text = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def micro_run(seconds: float, backend: Backend | None = None, *, width: int = WIDTH, layers: int = LAYERS,
              batch: int = BATCH) -> MicroRun:
    """Train a small MLP on device-resident data for about ``seconds``, events per step.

    Each step records a start and an end event; the window is opened and closed by a
    synchronisation, and inside it ``set_sync_debug_mode("error")`` makes any implicit
    synchronisation raise. The update is plain SGD written out (no optimizer machinery,
    nothing that reads a value back), so a healthy machine shows no sync and a device
    busy for almost the whole window.
    """
    import torch

    backend = backend or cuda_backend()
    dev = torch.device(backend.device)
    generator = torch.Generator().manual_seed(0)
    weights = [(torch.randn(width, width, generator=generator) / width**0.5).to(dev).requires_grad_()
               for _ in range(layers)]
    x = torch.randn(batch, width, generator=generator).to(dev)
    y = torch.randn(batch, width, generator=generator).to(dev)

    def step() -> None:
        h = x
        for w in weights:
            h = torch.relu(h @ w)
        loss = torch.nn.functional.mse_loss(h, y)
        grads = torch.autograd.grad(loss, weights)
        with torch.no_grad():
            torch._foreach_add_(weights, grads, alpha=-1e-3)

    # Warm-up, then the time of one step (synchronised: outside the window).
    started = backend.now()
    step()
    backend.synchronize()
    timed = 0
    timed_from = backend.now()
    while timed < 3 or backend.now() - started < min(WARMUP_S, seconds / 4):
        step()
        timed += 1
        backend.synchronize()
    step_s = max((backend.now() - timed_from) / timed, 1e-6)

    # Does the sync debug mode catch a synchronisation here? (It did not before torch 1.13.)
    probe = torch.ones(1, device=dev)
    sync_caught = False
    try:
        with _sync_debug(backend):
            backend.read_back(probe)
    except Exception:  # noqa: BLE001 - RuntimeError from torch; any raise is the mode working
        sync_caught = True

    window_s = max(seconds - (backend.now() - started), 0.0)
    steps = int(min(max(window_s / step_s, MIN_STEPS), MAX_STEPS))
    starts = [backend.event() for _ in range(steps)]
    ends = [backend.event() for _ in range(steps)]
    sync_error = None
    done = 0
    backend.synchronize()
    t0 = backend.now()
    try:
        with _sync_debug(backend):
            for i in range(steps):
                starts[i].record()
                step()
                ends[i].record()
                done += 1
    except Exception as exc:  # noqa: BLE001 - reported on the card, with its type
        sync_error = _first_line(exc)
    backend.synchronize()
    wall_s = backend.now() - t0
    per_step = [starts[i].elapsed_time(ends[i]) for i in range(done)]
    span_ms = starts[0].elapsed_time(ends[done - 1]) if done else 0.0
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else backend.device
    return MicroRun(steps=done, wall_s=wall_s, busy_ms=sum(per_step), span_ms=span_ms,
                    step_median_ms=median(per_step) if per_step else 0.0, sync_caught=sync_caught,
                    sync_error=sync_error, device_name=name)


def _handle(request: dict[str, Any]) -> dict[str, Any]:
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError(f"no usable CUDA device (torch {torch.__version__})")
    run = micro_run(float(request["seconds"]))
    return {"ok": True, "micro_run": run.to_dict()}


def main(argv: list[str]) -> int:
    return serve(argv, "perfgate.measure.probe", _handle)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
