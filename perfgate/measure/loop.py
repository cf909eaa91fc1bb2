"""One repeat, in the current process: build, warm up, measure a synchronised window.

This is the only place the training step is run. Warmup and the window run the same
step in the same loop through the same timeline (``perfgate.measure.timeline``), opened
when warmup ends: it records only inside the window. Nothing
synchronises per step in either: the losses stay on the device and are read once, at
the end of warmup and after the window (together with the CUDA events), so the host runs
ahead of the device in warmup as it does in the window.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import torch

from perfgate.measure import telemetry_host
from perfgate.measure.inject import injection_delays
from perfgate.measure.timeline import (
    BACKWARD,
    DATA,
    FORWARD,
    H2D,
    IDLE,
    OPTIMIZER,
    DeviceTimeline,
    HostTimeline,
    InjectingTimeline,
    Timeline,
    WindowTimes,
)
from perfgate.measure.telemetry import TelemetrySampler
from perfgate.measure.template import process_start
from perfgate.model.errors import PerfgateError, WorkloadError
from perfgate.model.result import BLOCKING_COPY_SYNC, GRAD_SCALER_SYNC, RepeatResult
from perfgate.model.workload import (
    BuildContext,
    Built,
    DataSource,
    Params,
    Workload,
    check_device_params,
)


def apply_torch_settings(params: Params, device: str) -> dict[str, Any]:
    """Set every torch switch that changes speed explicitly, and report what is in effect."""
    if params.deterministic and device == "cuda":
        # cuBLAS needs this before its first call to be deterministic.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    # 0: the cores available, shared out between the ranks of a distributed repeat.
    torch.set_num_threads(params.num_threads or max(1, telemetry_host.available_cores() // params.nproc_per_node))
    torch.backends.cudnn.benchmark = params.cudnn_benchmark
    torch.backends.cudnn.deterministic = params.deterministic
    torch.use_deterministic_algorithms(params.deterministic)
    torch.backends.cuda.matmul.allow_tf32 = params.allow_tf32
    torch.backends.cudnn.allow_tf32 = params.allow_tf32
    random.seed(params.seed)
    np.random.seed(params.seed)
    torch.manual_seed(params.seed)
    return torch_settings_in_effect(params.seed)


def torch_settings_in_effect(seed: int) -> dict[str, Any]:
    """The torch switches that change speed, as they are now (and the seed that was set)."""
    return {
        "num_threads": torch.get_num_threads(),
        "num_interop_threads": torch.get_num_interop_threads(),
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "cudnn_deterministic": torch.backends.cudnn.deterministic,
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "seed": seed,
    }


class _PeakMemory:
    """Peak allocated CUDA memory, or the peak RSS of this process on the CPU.

    On CUDA the peak reserved by the caching allocator is read too (``read_reserved``):
    the memory the process held, which is what another job on the GPU could not have.
    """

    def __init__(self, device: str) -> None:
        self.device = device
        self.kind = "cuda_max_allocated" if device == "cuda" else "cpu_peak_rss"

    def reset(self) -> None:
        if self.device == "cuda":
            torch.cuda.reset_peak_memory_stats()
            return
        try:
            # Linux: "5" resets the high-water mark to the current RSS, so the peak is
            # the window's, not the build's.
            with open("/proc/self/clear_refs", "w") as handle:
                handle.write("5")
        except OSError:
            self.kind = "cpu_peak_rss_since_start"

    def read_reserved(self) -> int | None:
        """CUDA: the window's peak of memory reserved by the caching allocator; None on the CPU."""
        return int(torch.cuda.max_memory_reserved()) if self.device == "cuda" else None

    def read(self) -> int | None:
        if self.device == "cuda":
            return int(torch.cuda.max_memory_allocated())
        try:
            with open("/proc/self/status") as handle:
                for line in handle:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        try:
            import resource

            self.kind = "cpu_peak_rss_since_start"
            return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024
        except (ImportError, OSError):
            return None


def _check_built(built: object, name: str) -> Built:
    if not isinstance(built, Built):
        raise WorkloadError(f"{name}: the builder must return perfgate.Built, got {type(built).__name__}")
    if not isinstance(built.model, torch.nn.Module):
        raise WorkloadError(f"{name}: Built.model must be a torch.nn.Module, got {type(built.model).__name__}")
    if not callable(getattr(built.optimizer, "step", None)) or not callable(getattr(built.optimizer, "zero_grad", None)):
        raise WorkloadError(f"{name}: Built.optimizer must have step() and zero_grad()")
    if not isinstance(built.data, DataSource):
        raise WorkloadError(f"{name}: Built.data must be a perfgate.DataSource")
    return built


@dataclass
class _Step:
    """The training step, shared by warmup and the measured window.

    Per step it does what a plain training loop does for the workload's settings and
    nothing more: a batch is moved only when the device needs it (on CUDA, a tensor not
    already there; channels_last asks for its layout on any device), autocast is entered
    only for bf16 or fp16 (one context object, made once), the GradScaler exists only for
    fp16.
    """

    built: Built
    device: torch.device
    params: Params
    loader_restarts: int = 0
    """Times the DataLoader ran out and was restarted (the windows' count, all of them: reset
    before the first, so warmup's restarts are left out)."""
    copied_from_host: bool = False
    """True once a batch tensor was copied to the device (CUDA): the copies exist."""

    def __post_init__(self) -> None:
        self.model = self.built.model
        self.optimizer = self.built.optimizer
        self.loss_fn = self.built.loss_fn
        self.iterator: Iterator[Any] = iter(self.built.loader)
        cuda = self.device.type == "cuda"
        if cuda and self.device.index is None:
            # A tensor's device always has its index: compare with the device it will be on.
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.non_blocking = cuda and self.params.pin_memory
        self.channels_last = self.params.memory_format == "channels_last"
        # On the CPU a batch is already where the model is: nothing to move unless a layout is asked for.
        self.move: Callable[[Any], Any] | None = self._move if cuda or self.channels_last else None
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(self.params.precision)
        self.autocast: Any = torch.autocast(device_type=self.device.type, dtype=dtype) if dtype is not None else None
        self.scaler = torch.amp.GradScaler(self.device.type) if self.params.precision == "fp16" else None

    def _restart(self) -> Any:
        # A loader shorter than the run: restart it, and say so in the result.
        self.loader_restarts += 1
        self.iterator = iter(self.built.loader)
        return next(self.iterator)

    def _move(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            layout = self.channels_last and value.dim() == 4
            if value.device != self.device:
                self.copied_from_host = True
                if layout:
                    return value.to(self.device, non_blocking=self.non_blocking, memory_format=torch.channels_last)
                return value.to(self.device, non_blocking=self.non_blocking)
            return value.contiguous(memory_format=torch.channels_last) if layout else value
        if isinstance(value, (list, tuple)):
            return type(value)(self._move(v) for v in value)
        if isinstance(value, dict):
            return {k: self._move(v) for k, v in value.items()}
        return value

    def __call__(self, timeline: Timeline) -> torch.Tensor:
        """One step, telling ``timeline`` each switch of phase and the boundary at its end
        (six calls: see ``perfgate.measure.timeline``)."""
        switch = timeline.switch
        switch(IDLE, DATA)
        try:
            inputs, targets = next(self.iterator)
        except StopIteration:
            inputs, targets = self._restart()
        switch(DATA, H2D)
        move = self.move
        if move is not None:
            inputs = move(inputs)
            targets = move(targets)
        switch(H2D, FORWARD)
        autocast = self.autocast
        if autocast is None:
            loss = self.loss_fn(self.model(inputs), targets)
        else:
            with autocast:
                loss = self.loss_fn(self.model(inputs), targets)
        switch(FORWARD, BACKWARD)
        scaler = self.scaler
        if scaler is None:
            loss.backward()
            switch(BACKWARD, OPTIMIZER)
            self.optimizer.step()
        else:
            scaler.scale(loss).backward()
            switch(BACKWARD, OPTIMIZER)
            scaler.step(self.optimizer)
            scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        timeline.boundary(OPTIMIZER, IDLE)
        return loss

    def synchronizes(self, pinned: bool) -> list[str]:
        """The synchronisations per step the workload's settings bring (CUDA; empty on the CPU).

        ``pinned``: whether the DataLoader pins its batches (read back from the loader).
        """
        if self.device.type != "cuda":
            return []
        found = []
        if self.scaler is not None and not getattr(self.optimizer, "_step_supports_amp_scaling", False):
            found.append(GRAD_SCALER_SYNC)
        if self.copied_from_host and not pinned:
            found.append(BLOCKING_COPY_SYNC)
        return found


def drive(step: Callable[[Timeline], torch.Tensor], timeline: Timeline, steps: int) -> list[torch.Tensor]:
    """Run ``steps`` steps, keeping each loss on the device: the loop of warmup and window alike."""
    losses: list[torch.Tensor] = []
    keep = losses.append
    for _ in range(steps):
        keep(step(timeline).detach())
    return losses


def loss_values(losses: list[torch.Tensor]) -> list[float]:
    """The kept losses as numbers: one read for all of them (a synchronisation on CUDA)."""
    return torch.stack(losses).float().cpu().tolist() if losses else []


def warm_up(step: Callable[[Timeline], torch.Tensor], timeline: Timeline, steps: int,
            synchronize: Callable[[], None]) -> None:
    """Warmup runs like the window, through the timeline not yet opened (on CUDA it learns how
    many events a step records): no synchronisation per step, one check of the losses at its end.

    A per-step read of the loss would keep the host in lockstep with the device, and the
    window would be the first time the host runs ahead.
    """
    losses = drive(step, timeline, steps)
    synchronize()
    values = loss_values(losses)
    bad = _first_non_finite(values)
    if bad is not None:
        raise WorkloadError(f"loss is non-finite ({values[bad]}) at warmup step {bad}")


def measure_window(
    step: Callable[[Timeline], torch.Tensor],
    timeline: Timeline,
    steps: int,
    *,
    on_open: Callable[[], None] = lambda: None,
    on_close: Callable[[], None] = lambda: None,
    guard: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext,
) -> tuple[WindowTimes, list[float]]:
    """The measured window: the timeline opens (on CUDA a synchronisation ends what came
    before), ``steps`` steps run with nothing synchronising, and ``close`` (on CUDA the
    closing synchronisation) returns the per-step series; then the losses are read.

    ``on_open`` runs just before the window opens (peak memory reset, sampler start),
    ``on_close`` just after it closed; ``guard`` wraps the steps and nothing else (the
    sync debug mode, in the CUDA tests).
    """
    on_open()
    timeline.open(IDLE)
    with guard():
        losses = drive(step, timeline, steps)
    times = timeline.close()
    on_close()
    return times, loss_values(losses)


def sync_debug_error() -> contextlib.AbstractContextManager[None]:
    """``torch.cuda.set_sync_debug_mode("error")`` for the duration: any synchronisation raises."""

    @contextlib.contextmanager
    def mode() -> Iterator[None]:
        before = torch.cuda.get_sync_debug_mode()
        torch.cuda.set_sync_debug_mode("error")
        try:
            yield
        finally:
            torch.cuda.set_sync_debug_mode(before)

    return mode()


def make_timeline(device: str, steps: int) -> HostTimeline | DeviceTimeline:
    """The timeline of a repeat on ``device``: CUDA events on CUDA, the host clock on the CPU."""
    if device == "cuda":
        return DeviceTimeline(steps, _created_event, synchronize=torch.cuda.synchronize,
                              current_stream=torch.cuda.current_stream)
    return HostTimeline(steps)


def _created_event() -> Any:
    """A CUDA timing event that exists on the device already.

    torch creates the driver's event at its first ``record``; recorded once here, before
    the window, the creation is not among the window's marks.
    """
    event = torch.cuda.Event(enable_timing=True)
    event.record()
    return event


def _fail(name: str, stage: str, exc: BaseException) -> WorkloadError:
    if isinstance(exc, PerfgateError):
        return WorkloadError(f"{name}: {_worker_message(exc.message)}", detail=exc.detail)
    first_line = (str(exc).strip().splitlines() or [""])[0]
    return WorkloadError(
        f"{name}: {stage} failed: {type(exc).__name__}: {first_line}",
        detail="".join(traceback.format_exception(exc)),
    )


def _worker_message(message: str) -> str:
    """A perfgate error raised in a DataLoader worker reaches the main process as "Caught
    DataError in DataLoader worker process 0. Original Traceback ..."; its own one line is
    the traceback's last."""
    if not message.startswith("Caught ") or "Original Traceback" not in message:
        return message
    last = next((line for line in reversed(message.splitlines()) if line.strip()), message)
    return last.split(": ", 1)[1] if last.startswith("perfgate.model.errors.") and ": " in last else last


def _first_non_finite(values: list[float]) -> int | None:
    for i, v in enumerate(values):
        if not math.isfinite(v):
            return i
    return None


def run_repeat(
    workload: Workload,
    params: Params,
    device: str,
    *,
    data_root: Path | None,
    cache_dir: Path,
    index: int,
    telemetry: bool = True,
    inject_ms: Mapping[str, float] | None = None,
    sync_check: bool = False,
    rank: Any = None,
    windows: int = 1,
) -> tuple[RepeatResult, DataSource]:
    """Build ``workload`` and measure one repeat on ``device``; raises WorkloadError.

    ``inject_ms`` (``perfgate selftest`` only): milliseconds added per measured step
    inside each named phase (see :class:`perfgate.measure.timeline.InjectingTimeline`). ``sync_check`` (CUDA): the
    steps of the window run under ``torch.cuda.set_sync_debug_mode("error")``, so a
    synchronisation inside the window fails the repeat. ``rank`` (a
    :class:`perfgate.measure.ddp.Rank`, in a distributed repeat's rank): the model runs in
    DistributedDataParallel and the all-reduce is timed (:mod:`perfgate.measure.ddp`); the
    process group is joined already. ``windows``: timed windows of ``params.steps`` steps
    each, one after the other after the one warmup, each opened and closed by its own
    synchronisation; the repeat holds their steps in order (``RepeatResult.windows``).
    """
    if isinstance(windows, bool) or not isinstance(windows, int) or windows < 1:
        raise WorkloadError(f"{workload.name}: windows must be an integer >= 1, got {windows!r}")
    if windows > 1 and rank is not None:  # the all-reduce timer keeps one window's steps
        raise WorkloadError(f"{workload.name}: windows = {windows}: a distributed repeat (nproc_per_node > 1) "
                            "times one window; set windows = 1")
    check_device_params(params, device)
    name = workload.name
    started_at = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
    settings = apply_torch_settings(params, device)
    ctx = BuildContext(params=params, device=device, data_root=data_root, cache_dir=cache_dir, workload=name,
                       windows=windows)
    try:
        built = _check_built(workload.build(ctx), name)
    except WorkloadError:
        raise
    except BaseException as exc:  # noqa: BLE001 - any failure of user code is reported, not raised raw
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise _fail(name, "building the workload", exc) from None

    torch_device = torch.device(device)
    memory_format = torch.channels_last if params.memory_format == "channels_last" else torch.contiguous_format
    cuda = device == "cuda"
    sync: Callable[[], None] = torch.cuda.synchronize if cuda else (lambda: None)
    peak = _PeakMemory(device)
    timer = None
    try:
        built.model.to(torch_device, memory_format=memory_format)
        built.model.train()
        if rank is not None:
            from perfgate.measure import ddp

            ddp.check_loader(built.loader, name)
            timer = ddp.CommTimer(cuda=cuda, event_factory=_created_event if cuda else None)
            built.model = ddp.wrap(built.model, device, rank, timer)
        step = _Step(built, torch_device, params)
        timeline = make_timeline(device, params.steps)
        warm_up(step, timeline, params.warmup_steps, sync)

        def window_timeline() -> Timeline:
            measured: Timeline = timeline
            if timer is not None:
                from perfgate.measure.ddp import CommTimeline

                measured = CommTimeline(measured, timer, steps=params.steps, warmup_steps=params.warmup_steps)
            if inject_ms:
                measured = InjectingTimeline(measured, injection_delays(inject_ms, device))
            return measured

        # In a distributed repeat rank 0 samples for all: the launcher's tree holds every rank.
        sampler = (TelemetrySampler(device, root_pid=os.getppid() if rank is not None else None)
                   if telemetry and (rank is None or rank.rank == 0) else None)

        def on_open() -> None:  # before the first window: the repeat's restarts, peak and samples
            step.loader_restarts = 0  # the window's restarts, not warmup's
            peak.reset()
            if sampler is not None:
                sampler.start()

        def on_close() -> None:
            if sampler is not None:
                sampler.stop()

        guard = sync_debug_error if cuda and sync_check else contextlib.nullcontext
        parts: list[WindowTimes] = []
        losses = []
        for window in range(windows):
            times, window_losses = measure_window(step, window_timeline(), params.steps,
                                                  on_open=on_open if window == 0 else (lambda: None),
                                                  on_close=on_close if window == windows - 1 else (lambda: None),
                                                  guard=guard)
            parts.append(times)
            losses += window_losses
        times = join_windows(parts)
        peak_bytes = peak.read()
        reserved_bytes = peak.read_reserved()
    except BaseException as exc:  # noqa: BLE001
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise _fail(name, "the training step", exc) from None

    bad = _first_non_finite(losses)
    if bad is not None:
        raise WorkloadError(f"{name}: loss is non-finite ({losses[bad]}) at measured step {bad}")
    loader_settings = _loader_settings(built.loader)
    settings["process_start"] = process_start()
    if cuda:
        pinned = bool(loader_settings.get("pin_memory", params.pin_memory))
        settings["synchronizes"] = step.synchronizes(pinned)
        settings["cuda_window"] = {
            "device_steps_over_window": times.device_window_ratio,
            "max_memory_reserved_bytes": reserved_bytes,
            **clamp_record(times),
        }
    samples_per_s = windows * params.steps * params.batch_size / times.window_s
    repeat = RepeatResult(
        index=index,
        started_at=started_at,
        timing=timeline.timing,
        window_s=times.window_s,
        phases_ms={k: tuple(v) for k, v in times.series_ms.items()},
        samples_per_s=samples_per_s,
        peak_memory_bytes=peak_bytes,
        peak_memory_kind=peak.kind,
        torch_settings=settings,
        loader_settings=loader_settings,
        loader_restarts=step.loader_restarts,
        telemetry=sampler.summary() if sampler is not None else None,
        windows=windows,
    )
    assert isinstance(built.data, DataSource)  # _check_built refused anything else
    return repeat, built.data


def join_windows(parts: list[WindowTimes]) -> WindowTimes:
    """Several windows of one repeat as one: the series in order, the windows' wall times
    added (the gaps between windows, a synchronisation each, are not timed), the CUDA
    ratio over all of them."""
    if len(parts) == 1:
        return parts[0]
    names = set(parts[0].series_ms)
    if any(set(p.series_ms) != names for p in parts):
        raise WorkloadError("the windows of one repeat recorded different series")
    series = {name: [v for p in parts for v in p.series_ms[name]] for name in parts[0].series_ms}
    window_s = math.fsum(p.window_s for p in parts)
    ratios = [(p.device_window_ratio, p.window_s) for p in parts]
    ratio = (math.fsum(r * s for r, s in ratios if r is not None) / window_s
             if all(r is not None for r, _ in ratios) else None)
    return WindowTimes(series, window_s, ratio, clamps=tuple(c for p in parts for c in p.clamps))


def clamp_record(times: WindowTimes) -> dict[str, Any]:
    """The CUDA window's raised event stamps, per window (``torch_settings.cuda_window``):
    how many, and the largest raise in ms; empty when the clock raised none it could count."""
    if not times.clamps:
        return {}
    return {"clamped_stamps": [n for n, _ in times.clamps],
            "largest_clamp_ms": [largest for _, largest in times.clamps]}


def _loader_settings(loader: object) -> dict[str, Any]:
    """The DataLoader settings actually in effect, read back from the loader, and how many
    batches one pass over it yields (``num_batches``, when it knows)."""
    keys = ("batch_size", "num_workers", "pin_memory", "prefetch_factor", "persistent_workers", "drop_last")
    settings = {k: getattr(loader, k) for k in keys if hasattr(loader, k)}
    try:
        settings["num_batches"] = len(loader)  # type: ignore[arg-type]  # any loader: no length is an answer below
    except Exception:  # noqa: BLE001 - no length (an iterable dataset, a generator): left out
        pass
    return settings
