"""Timing a step on CUDA without disturbing it: the loop around the clock.

The first part runs everywhere: fakes stand in for the CUDA calls (the synchronisation,
the events, the stream) and a tensor subclass logs every read of a loss value, so the
order of steps, synchronisations and reads is checked without a GPU. The second part
(``gpu``) runs the real CUDA path end to end and is skipped where no CUDA device is
usable.
"""

from __future__ import annotations

import time
from pathlib import Path
from statistics import median
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from conftest import cuda_available
from test_clock import FakeClock, FakeCuda
from test_clock import step as timeline_step

from perfgate.measure import loop
from perfgate.measure.timeline import NO_TIMELINE, DeviceTimeline, HostTimeline
from perfgate.measure.loop import (
    BLOCKING_COPY_SYNC,
    GRAD_SCALER_SYNC,
    _Step,
    measure_window,
    run_repeat,
    warm_up,
)
from perfgate.model.errors import UsageError, WorkloadError
from perfgate.model.workload import BuildContext, Built, DataSource, Params, Workload
from perfgate.store.discovery import discover

READS = {"item", "cpu", "tolist", "numpy", "__float__", "__bool__", "__int__"}
"""Tensor methods that bring a value to the host: a synchronisation on CUDA."""


class LoggedLoss(torch.Tensor):
    """A loss whose every read of its value (and of anything made from it) is logged."""

    log: list[str] = []

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if getattr(func, "__name__", "") in READS:
            cls.log.append("read")
        return super().__torch_function__(func, types, args, kwargs or {})


class FakeStep:
    """A training step that tells the timeline what ``loop._Step`` does, logs itself and
    returns a logged loss."""

    def __init__(self, log: list[str], value: float = 2.5) -> None:
        self.log = log
        self.value = value

    def __call__(self, line: Any) -> torch.Tensor:
        self.log.append("step")
        timeline_step(line)
        return torch.tensor(self.value).as_subclass(LoggedLoss)


@pytest.fixture
def cuda_log() -> FakeCuda:
    cuda = FakeCuda([float(i) for i in range(1000)])
    LoggedLoss.log = cuda.log  # steps, records, synchronisations and reads in one sequence
    return cuda


def test_warmup_runs_like_the_window_one_synchronisation_and_one_read_at_its_end(cuda_log: FakeCuda) -> None:
    warm_up(FakeStep(cuda_log.log), NO_TIMELINE, 6, cuda_log.synchronize)
    log = cuda_log.log
    assert log[:7] == ["step"] * 6 + ["sync"]
    assert set(log[7:]) == {"read"}  # the losses, read together, after the synchronisation


def test_a_non_finite_warmup_loss_is_reported_after_warmup_with_its_step(cuda_log: FakeCuda) -> None:
    with pytest.raises(WorkloadError, match=r"loss is non-finite \(nan\) at warmup step 0"):
        warm_up(FakeStep(cuda_log.log, float("nan")), NO_TIMELINE, 3, cuda_log.synchronize)
    assert cuda_log.log[:4] == ["step"] * 3 + ["sync"]


def test_warmup_and_window_synchronise_only_at_their_ends_never_per_step(cuda_log: FakeCuda) -> None:
    steps, warmup = 5, 3
    step = FakeStep(cuda_log.log)
    line = DeviceTimeline(steps, cuda_log.event, synchronize=cuda_log.synchronize,
                          current_stream=cuda_log.current_stream, now=FakeClock([i / 1e3 for i in range(100)]))
    warm_up(step, line, warmup, cuda_log.synchronize)
    times, losses = measure_window(step, line, steps, on_open=lambda: cuda_log.log.append("open"),
                                   on_close=lambda: cuda_log.log.append("close"))
    log = cuda_log.log
    first_sync = log.index("sync")
    assert log[:first_sync] == ["step"] * warmup  # warmup records nothing: the timeline is not open
    window = log[log.index("open"):]
    # opening: synchronisations end what came before (and the events made for the window), then
    # the origin; inside: six records per step (one per switch and the boundary), no
    # synchronisation; then the closing synchronisation
    opened = window.index("record")  # the origin
    assert window[opened - 1] == "sync"
    closing = window.index("close") - 1
    assert window[closing] == "sync"
    inside = window[opened + 1:closing]
    assert inside == ["step", "record", "record", "record", "record", "record", "record"] * steps
    assert set(window[window.index("close") + 1:]) == {"read"}  # losses read after the window only
    assert losses == [2.5] * steps
    assert len(times.series_ms["step"]) == steps and times.device_window_ratio is not None


def test_the_window_opens_and_closes_around_the_steps_on_the_host_clock(cuda_log: FakeCuda) -> None:
    steps = 4
    clock = HostTimeline(steps, now=FakeClock([i / 1e3 for i in range(6 * steps + 2)]))
    order: list[str] = []

    class Guard:
        def __enter__(self) -> None:
            order.append("guard on")

        def __exit__(self, *exc: object) -> None:
            order.append("guard off")

    times, losses = measure_window(FakeStep(order), clock, steps, on_open=lambda: order.append("open"),
                                   on_close=lambda: order.append("close"), guard=Guard)
    # the guard (the sync debug mode on CUDA) covers the steps, not the closing synchronisation
    assert order == ["open", "guard on", *["step"] * steps, "guard off", "close"]
    assert losses == [2.5] * steps and times.device_window_ratio is None


# --- the step: per step only what the settings need ------------------------------------------


def tiny_built(batches: int = 4, size: int = 8, images: bool = False) -> Built:
    gen = torch.Generator().manual_seed(0)
    if images:
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.Flatten(),
                                    torch.nn.Linear(4 * size * size, 3))
        data = [(torch.randn(2, 3, size, size, generator=gen), torch.tensor([0, 2])) for _ in range(batches)]
    else:
        model = torch.nn.Sequential(torch.nn.Linear(size, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
        data = [(torch.randn(2, size, generator=gen), torch.tensor([0, 2])) for _ in range(batches)]
    return Built(model, torch.optim.SGD(model.parameters(), lr=0.01), torch.nn.CrossEntropyLoss(), data,
                 DataSource("synthetic", "memory", "", "none", batches * 2))


def params(**kw: Any) -> Params:
    base: dict[str, Any] = dict(batch_size=2, input_size=8, warmup_steps=1, steps=2, num_threads=1)
    base.update(kw)
    return Params(**base)


class Spy(torch.Tensor):
    """A batch tensor that logs the methods called on it."""

    calls: list[str] = []

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if args and type(args[0]) is cls:
            cls.calls.append(getattr(func, "__name__", ""))
        return super().__torch_function__(func, types, args, kwargs or {})


def test_a_cpu_fp32_step_moves_nothing_and_enters_no_autocast() -> None:
    built = tiny_built()
    step = _Step(built, torch.device("cpu"), params())
    assert step.move is None and step.autocast is None and step.scaler is None
    Spy.calls = []
    built.loader = [(x.as_subclass(Spy), y.as_subclass(Spy)) for x, y in built.loader]  # type: ignore[attr-defined]
    step.iterator = iter(built.loader)
    loss = step(NO_TIMELINE)
    assert torch.isfinite(loss)
    assert not {"to", "contiguous"} & set(Spy.calls)  # the batch is used as the loader gave it


def test_channels_last_asks_for_the_layout_on_the_cpu_too() -> None:
    step = _Step(tiny_built(images=True), torch.device("cpu"), params(memory_format="channels_last"))
    assert step.move is not None
    x = torch.randn(2, 3, 8, 8)
    moved = step.move(x)
    assert moved.is_contiguous(memory_format=torch.channels_last)
    assert step.move(torch.tensor([1, 2])).dim() == 1
    assert not step.copied_from_host  # nothing left the host's memory
    assert torch.isfinite(step(NO_TIMELINE))


def test_a_batch_already_on_the_device_is_not_moved() -> None:
    # The meta device stands in for a GPU: a host tensor is copied, a device tensor is used as is.
    step = _Step(tiny_built(), torch.device("cpu"), params())
    step.device = torch.device("meta")
    on_device = torch.empty(2, 8, device="meta")
    assert step._move(on_device) is on_device and not step.copied_from_host
    nested = step._move({"x": torch.randn(2, 8), "y": [on_device]})
    assert nested["x"].device.type == "meta" and nested["y"][0] is on_device
    assert step.copied_from_host


def test_bf16_enters_one_autocast_made_once() -> None:
    built = tiny_built()
    seen: list[torch.dtype] = []
    built.model[0].register_forward_hook(lambda m, i, out: seen.append(out.dtype))
    step = _Step(built, torch.device("cpu"), params(precision="bf16"))
    context = step.autocast
    assert isinstance(context, torch.autocast) and step.scaler is None
    for _ in range(3):
        assert torch.isfinite(step(NO_TIMELINE))
    assert step.autocast is context
    assert seen == [torch.bfloat16] * 3
    assert not torch.is_autocast_enabled("cpu")  # left as it was after every step


def test_a_short_loader_restarts_and_is_counted() -> None:
    step = _Step(tiny_built(batches=3), torch.device("cpu"), params())
    loop.drive(step, NO_TIMELINE, 7)
    assert step.loader_restarts == 2


def test_the_settings_that_synchronise_per_step_are_named() -> None:
    built = tiny_built()
    fp16 = _Step(built, torch.device("cpu"), params(precision="fp16"))
    assert fp16.scaler is not None
    assert fp16.synchronizes(pinned=False) == []  # the CPU: nothing to wait for
    fp16.device = torch.device("cuda", 0)
    assert fp16.synchronizes(pinned=True) == [GRAD_SCALER_SYNC]
    fp16.copied_from_host = True
    assert fp16.synchronizes(pinned=False) == [GRAD_SCALER_SYNC, BLOCKING_COPY_SYNC]
    assert fp16.synchronizes(pinned=True) == [GRAD_SCALER_SYNC]
    # a fused optimizer takes the scaler's inf check on the device: no .item(), no sync
    fp16.optimizer = SimpleNamespace(_step_supports_amp_scaling=True)
    assert fp16.synchronizes(pinned=True) == []
    fp32 = _Step(built, torch.device("cpu"), params())
    fp32.device = torch.device("cuda", 0)
    fp32.copied_from_host = True
    assert fp32.synchronizes(pinned=True) == []
    assert fp32.synchronizes(pinned=False) == [BLOCKING_COPY_SYNC]


def test_a_fused_sgd_supports_amp_scaling_in_this_torch() -> None:
    # What the GradScaler check relies on; if a torch release renames it, this says so.
    model = torch.nn.Linear(2, 2)
    try:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, fused=True)
    except (RuntimeError, ValueError) as exc:  # pragma: no cover - depends on the torch build
        pytest.skip(f"fused SGD unavailable here: {exc}")
    assert getattr(optimizer, "_step_supports_amp_scaling", False) is True


# --- a repeat ----------------------------------------------------------------------------------


def short_loader_workload(batches: int) -> Workload:
    def build(ctx: BuildContext) -> Built:
        return tiny_built(batches=batches)

    return Workload("short", 1, build=build, params=params())


@pytest.fixture
def keep_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_a_cpu_repeat_counts_restarts_inside_the_window_only(tmp_path: Path, keep_threads: None) -> None:
    workload = short_loader_workload(4)
    # warmup 5 of a 4-batch loader: one restart in warmup, none in the 3 window steps
    repeat, _ = run_repeat(workload, params(warmup_steps=5, steps=3), "cpu", data_root=None, cache_dir=tmp_path,
                           index=0, telemetry=False)
    assert repeat.loader_restarts == 0
    # warmup 3, window 4: the window's second step restarts the loader
    repeat, _ = run_repeat(workload, params(warmup_steps=3, steps=4), "cpu", data_root=None, cache_dir=tmp_path,
                           index=0, telemetry=False)
    assert repeat.loader_restarts == 1
    assert repeat.timing == "perf_counter" and "host_step" not in repeat.phases_ms
    # the CPU's result is as it was: no CUDA keys
    assert "synchronizes" not in repeat.torch_settings and "cuda_window" not in repeat.torch_settings


def test_a_repeat_records_how_many_batches_the_loader_yields(tiny_path: Path, tmp_path: Path,
                                                             keep_threads: None) -> None:
    tiny = discover([tiny_path], project_dir=tmp_path).get("tiny")
    p = tiny.resolve("cpu", {"steps": "3", "warmup_steps": "0"})
    repeat, _ = run_repeat(tiny, p, "cpu", data_root=None, cache_dir=tmp_path, index=0, telemetry=False)
    assert repeat.loader_settings["num_batches"] == 3  # make_loader: warmup_steps + steps
    assert len(repeat.phases_ms["step"]) == 3


def test_a_repeat_refuses_no_warmup_on_cuda_before_building(tmp_path: Path) -> None:
    def build(ctx: BuildContext) -> Built:
        raise AssertionError("built although the parameters were refused")

    workload = Workload("w", 1, build=build, params=params())
    with pytest.raises(UsageError, match="warmup_steps must be at least 1 on cuda"):
        run_repeat(workload, params(warmup_steps=0), "cuda", data_root=None, cache_dir=tmp_path, index=0)


# --- on a GPU ----------------------------------------------------------------------------------

gpu = pytest.mark.skipif(not cuda_available(), reason="needs a CUDA device (torch.cuda.is_available() is false)")


def cuda_repeat(tiny_path: Path, tmp_path: Path, **overrides: Any):
    tiny = discover([tiny_path], project_dir=tmp_path).get("tiny")
    sets = {"steps": "40", "warmup_steps": "3", "pin_memory": "true", **{k: str(v) for k, v in overrides.items()
                                                                         if k not in ("inject_ms", "sync_check")}}
    p = tiny.resolve("cuda", sets)
    threads = torch.get_num_threads()
    try:
        return run_repeat(tiny, p, "cuda", data_root=None, cache_dir=tmp_path, index=0, telemetry=False,
                          inject_ms=overrides.get("inject_ms"), sync_check=overrides.get("sync_check", False))[0]
    finally:
        torch.set_num_threads(threads)


@pytest.mark.gpu
@gpu
def test_cuda_the_step_is_timed_on_the_device_with_no_sync_in_the_window(tiny_path: Path, tmp_path: Path) -> None:
    repeat = cuda_repeat(tiny_path, tmp_path, sync_check=True)  # any synchronisation in the window raises
    assert repeat.timing == "cuda_events"
    assert {"step", "host_step", "host_data_wait", "device_busy", "data_wait", "h2d", "forward", "backward",
            "optimizer"} <= set(repeat.phases_ms)
    window_ms = repeat.window_s * 1e3
    assert sum(repeat.phases_ms["step"]) == pytest.approx(window_ms, rel=0.03)
    ratio = repeat.torch_settings["cuda_window"]["device_steps_over_window"]
    assert 0.97 <= ratio <= 1.0 + 1e-3
    assert all(v >= 0 for v in repeat.phases_ms["step"])
    # a step on the device holds its own work: from its begin event to the next step's
    assert all(b <= s + 1e-3 for b, s in zip(repeat.phases_ms["device_busy"], repeat.phases_ms["step"], strict=True))
    # every device series is a difference of events on one stream: the phases tile the step, residual >= 0
    phases = [repeat.phases_ms[p] for p in ("data_wait", "h2d", "forward", "backward", "optimizer")]
    assert all(sum(row) <= s + 1e-6 for row, s in zip(zip(*phases, strict=True), repeat.phases_ms["step"], strict=True))
    assert min(v for p in phases for v in p) >= 0.0
    assert repeat.torch_settings["synchronizes"] == []
    reserved = repeat.torch_settings["cuda_window"]["max_memory_reserved_bytes"]
    assert repeat.peak_memory_kind == "cuda_max_allocated"
    assert reserved >= repeat.peak_memory_bytes > 0


@pytest.mark.gpu
@gpu
def test_cuda_a_device_backlog_lands_in_the_device_steps_not_the_host_median(tiny_path: Path,
                                                                             tmp_path: Path) -> None:
    # 20 ms of device time per step from one sleep kernel: the host enqueues far faster
    repeat = cuda_repeat(tiny_path, tmp_path, steps=15, inject_ms={"forward": 20.0})
    steps, host = repeat.phases_ms["step"], repeat.phases_ms["host_step"]
    window_ms = repeat.window_s * 1e3
    assert median(steps) >= 15.0
    assert sum(steps) == pytest.approx(window_ms, rel=0.03)
    assert median(host) < 0.5 * median(steps)
    assert host[-1] > 3 * median(host)  # where the backlog shows on the host clock


@pytest.mark.gpu
@gpu
def test_cuda_fp16_with_a_plain_optimizer_synchronises_per_step(tiny_path: Path, tmp_path: Path) -> None:
    repeat = cuda_repeat(tiny_path, tmp_path, precision="fp16")
    assert repeat.torch_settings["synchronizes"] == [GRAD_SCALER_SYNC]
    # the premise of the label, checked on the device: GradScaler.step synchronises in the window
    with pytest.raises(WorkloadError, match="synchroniz"):
        cuda_repeat(tiny_path, tmp_path, precision="fp16", sync_check=True)


@pytest.mark.gpu
@gpu
def test_cuda_unpinned_batches_are_blocking_copies(tiny_path: Path, tmp_path: Path) -> None:
    repeat = cuda_repeat(tiny_path, tmp_path, pin_memory="false")
    assert repeat.torch_settings["synchronizes"] == [BLOCKING_COPY_SYNC]
    with pytest.raises(WorkloadError, match="synchroniz"):
        cuda_repeat(tiny_path, tmp_path, pin_memory="false", sync_check=True)


@pytest.mark.gpu
@gpu
def test_cuda_events_are_recorded_on_the_current_stream(tiny_path: Path, tmp_path: Path) -> None:
    # Device-bound steps (5 ms of sleep kernel each) on a side stream: events recorded on
    # another stream than the work would complete as soon as the host enqueued them, and
    # the device steps would cover only the host's share of the window.
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        repeat = cuda_repeat(tiny_path, tmp_path, steps=10, inject_ms={"forward": 5.0})
    assert median(repeat.phases_ms["step"]) >= 4.0
    assert sum(repeat.phases_ms["step"]) == pytest.approx(repeat.window_s * 1e3, rel=0.03)



# --- the CUDA path of a repeat, on fakes ---------------------------------------------------------


class Box:
    """A batch element that is not a tensor: the step hands it to the model as it is."""

    def __init__(self, value: torch.Tensor) -> None:
        self.value = value


class BoxModel(torch.nn.Module):
    """A CPU model that stays where it is when asked to move, and logs its forward calls."""

    def __init__(self, log: list[str]) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 3)
        self.log = log

    def to(self, *args: Any, **kwargs: Any) -> BoxModel:  # type: ignore[override]
        return self

    def forward(self, x: Box) -> torch.Tensor:
        self.log.append("forward")
        return self.lin(x.value)


class FakeTorchCuda:
    """The torch.cuda calls a repeat makes, on the host: each event is stamped with the host
    clock when recorded, and can be read once a synchronisation has followed its record."""

    def __init__(self, log: list[str]) -> None:
        self.log = log
        self.stream = object()
        self.pending: list[Any] = []
        cuda = self

        class Event:
            def __init__(self, enable_timing: bool = False) -> None:
                assert enable_timing
                self.stamp: float | None = None
                self.done = False

            def record(self, stream: object = None) -> None:
                assert stream in (None, cuda.stream)
                self.stamp, self.done = time.perf_counter() * 1e3, False
                cuda.pending.append(self)

            def elapsed_time(self, end: Any) -> float:
                assert self.done and end.done, "read before the synchronisation"
                return end.stamp - self.stamp

        self.Event = Event

    def synchronize(self) -> None:
        self.log.append("sync")
        for event in self.pending:
            event.done = True
        self.pending.clear()

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(torch.cuda, "Event", self.Event)
        monkeypatch.setattr(torch.cuda, "synchronize", self.synchronize)
        monkeypatch.setattr(torch.cuda, "current_stream", lambda: self.stream)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
        monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda: self.log.append("reset peak"))
        monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda: 2048)
        monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda: 4096)


def box_workload(log: list[str]) -> Workload:
    def build(ctx: BuildContext) -> Built:
        model = BoxModel(log)
        gen = torch.Generator().manual_seed(0)
        data = [(Box(torch.randn(2, 8, generator=gen)), Box(torch.tensor([0, 2]))) for _ in range(20)]
        cross_entropy = torch.nn.CrossEntropyLoss()
        return Built(model, torch.optim.SGD(model.parameters(), lr=0.01), lambda out, t: cross_entropy(out, t.value),
                     data, DataSource("synthetic", "memory", "", "none", 40))

    return Workload("boxes", 1, build=build, params=params())


@pytest.mark.filterwarnings("ignore::UserWarning")  # autocast and GradScaler on a machine without CUDA
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_a_cuda_repeat_on_fakes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, keep_threads: None,
                                precision: str) -> None:
    log: list[str] = []
    FakeTorchCuda(log).install(monkeypatch)
    warmup, steps = 3, 8
    repeat, _ = run_repeat(box_workload(log), params(warmup_steps=warmup, steps=steps, precision=precision), "cuda",
                           data_root=None, cache_dir=tmp_path, index=0, telemetry=False)
    # one synchronisation ends warmup, one opens the window (after its events are made), one
    # closes it; none per step
    assert log == ["forward"] * warmup + ["sync", "reset peak", "sync"] + ["forward"] * steps + ["sync"]
    assert repeat.timing == "cuda_events"
    assert {"step", "host_step", "host_data_wait", "device_busy"} <= set(repeat.phases_ms)
    assert all(len(v) == steps for v in repeat.phases_ms.values())
    window_ms = repeat.window_s * 1e3
    ratio = repeat.torch_settings["cuda_window"]["device_steps_over_window"]
    assert sum(repeat.phases_ms["step"]) == pytest.approx(ratio * window_ms)
    assert 0.5 < ratio < 1.5  # both clocks read the host here: the steps tile the window
    assert repeat.peak_memory_bytes == 2048
    assert repeat.torch_settings["cuda_window"]["max_memory_reserved_bytes"] == 4096
    assert repeat.torch_settings["synchronizes"] == ([GRAD_SCALER_SYNC] if precision == "fp16" else [])
    assert repeat.loader_settings["num_batches"] == 20 and repeat.loader_restarts == 0


def test_cuda_events_exist_before_the_window(monkeypatch: pytest.MonkeyPatch) -> None:
    log: list[str] = []
    fake = FakeTorchCuda(log)
    fake.install(monkeypatch)
    event = loop._created_event()
    assert event.stamp is not None  # recorded once: torch creates the driver's event at its first record


def test_the_sync_check_restores_the_mode_it_found(monkeypatch: pytest.MonkeyPatch) -> None:
    modes: list[object] = [1]  # "warn", as a caller may have set it
    monkeypatch.setattr(torch.cuda, "get_sync_debug_mode", lambda: modes[-1])
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", modes.append)
    with pytest.raises(ZeroDivisionError):
        with loop.sync_debug_error():
            assert modes[-1] == "error"
            raise ZeroDivisionError("an error inside the block")
    assert modes == [1, "error", 1]
