"""The timeline's bookkeeping for a workload's step, checked with a seeded fake clock and
fake CUDA events (``perfgate.measure.timeline``: the one timeline of workloads and scripts)."""

from __future__ import annotations

from statistics import median

import pytest

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
)


class FakeClock:
    """Returns a scripted sequence of times (seconds)."""

    def __init__(self, times: list[float]) -> None:
        self.times = iter(times)

    def __call__(self) -> float:
        return next(self.times)


def step(line) -> None:
    """What ``loop._Step`` tells its timeline per step (tests/test_clock.py checks it does)."""
    line.switch(IDLE, DATA)
    line.switch(DATA, H2D)
    line.switch(H2D, FORWARD)
    line.switch(FORWARD, BACKWARD)
    line.switch(BACKWARD, OPTIMIZER)
    line.boundary(OPTIMIZER, IDLE)


def drive(line, steps: int, warmup: int = 0) -> None:
    for _ in range(warmup):
        step(line)
    line.open(IDLE)
    for _ in range(steps):
        step(line)


def test_host_timeline_turns_switches_into_phase_durations() -> None:
    # made, opened, then per step: data, h2d, fwd, bwd, opt switches and the boundary.
    step0 = [0.000, 0.010, 0.011, 0.031, 0.071, 0.081]
    step1 = [0.082, 0.182, 0.183, 0.203, 0.243, 0.253]
    line = HostTimeline(2, now=FakeClock([0.0, 0.0, *step0, *step1]))
    drive(line, 2)
    times = line.close()
    s = times.series_ms
    assert s["data_wait"] == pytest.approx([10.0, 100.0])
    assert s["h2d"] == pytest.approx([1.0, 1.0])
    assert s["forward"] == pytest.approx([20.0, 20.0])
    assert s["backward"] == pytest.approx([40.0, 40.0])
    assert s["optimizer"] == pytest.approx([10.0, 10.0])
    # boundary to boundary: the loop between two steps (1 ms) is in the second step's residual
    assert s["step"] == pytest.approx([81.0, 172.0])
    assert times.window_s == pytest.approx(0.253)
    for i, residual in enumerate((0.0, 1.0)):
        phases = sum(s[p][i] for p in ("data_wait", "h2d", "forward", "backward", "optimizer"))
        assert s["step"][i] - phases == pytest.approx(residual)


def test_host_timeline_refuses_an_incomplete_window() -> None:
    line = HostTimeline(3, now=FakeClock([float(i) for i in range(100)]))
    drive(line, 2)
    with pytest.raises(RuntimeError, match="expected 3 steps in the window, got 2"):
        line.close()


def test_the_workload_step_tells_its_timeline_six_calls_in_the_order_above() -> None:
    import itertools

    import torch

    from perfgate.measure.loop import _Step
    from perfgate.model.workload import Built, DataSource, Params

    class Recording:
        timing = "recording"

        def __init__(self) -> None:
            self.calls: list[tuple[str, int, int | None]] = []

        def switch(self, old: int, new: int) -> None:
            self.calls.append(("switch", old, new))

        def boundary(self, current: int, after: int | None = None) -> None:
            self.calls.append(("boundary", current, after))

    model = torch.nn.Linear(4, 2)
    built = Built(model, torch.optim.SGD(model.parameters(), lr=0.1), torch.nn.CrossEntropyLoss(),
                  itertools.cycle([(torch.randn(3, 4), torch.tensor([0, 1, 0]))]),
                  DataSource("synthetic", "memory", "", "none", 1))
    real = _Step(built, torch.device("cpu"), Params(batch_size=3, input_size=4, warmup_steps=0, steps=2))
    recording, expected = Recording(), Recording()
    real(recording)  # type: ignore[arg-type]
    step(expected)
    assert recording.calls == expected.calls


class FakeCuda:
    """The CUDA calls a device clock makes, scripted.

    Device timestamps (ms) are handed out in the order events are recorded. An event must
    be recorded on the current stream, and it can be read only once a synchronisation
    after its record has completed it: a read before that fails the test, as reading an
    unfinished event fails on a GPU.
    """

    def __init__(self, stamps: list[float]) -> None:
        self.stream = object()
        self.stamps = iter(stamps)
        self.log: list[str] = []
        self.pending: list[FakeEvent] = []
        self.made: list[FakeEvent] = []

    def current_stream(self) -> object:
        self.log.append("current_stream")
        return self.stream

    def synchronize(self) -> None:
        self.log.append("sync")
        for event in self.pending:
            event.done = True
        self.pending.clear()

    def event(self) -> FakeEvent:
        self.made.append(FakeEvent(self))
        return self.made[-1]


class FakeEvent:
    def __init__(self, cuda: FakeCuda) -> None:
        self.cuda = cuda
        self.stamp: float | None = None
        self.done = False
        self.recorded = 0

    def record(self, stream: object = None) -> None:
        assert stream is self.cuda.stream, "recorded on another stream than the current one"
        self.recorded += 1
        self.stamp = next(self.cuda.stamps)
        self.cuda.pending.append(self)
        self.cuda.log.append("record")

    def elapsed_time(self, end: FakeEvent) -> float:
        assert self.done and end.done, "read before the synchronisation that closes the window"
        assert self.stamp is not None and end.stamp is not None
        return end.stamp - self.stamp


def device_clock(steps: int, stamps: list[float], host: list[float]) -> tuple[DeviceTimeline, FakeCuda]:
    cuda = FakeCuda(stamps)
    line = DeviceTimeline(steps, cuda.event, synchronize=cuda.synchronize, current_stream=cuda.current_stream,
                          now=FakeClock(host))
    return line, cuda


def test_device_timeline_reads_events_after_the_window() -> None:
    # In record order: the window's origin, then 6 per step (entering data_wait, h2d, fwd,
    # bwd, opt, and the boundary after the optimizer). Step 1's data-wait event is reached at
    # 41.5 ms (the device finished step 0's work at 41); its batch arrives 18.5 ms later, at
    # 60: the device sat idle waiting for it. That wait is booked on step 1, the step it
    # delays, as the device saw it, and the host's wait is kept beside it.
    stamps = [0.0,
              0.5, 5.0, 6.0, 16.0, 36.0, 41.0,      # step 0: busy 36 ms, 4.5 ms waiting for its batch
              41.5, 60.0, 61.0, 71.0, 91.0, 96.0]   # step 1: 18.5 ms idle waiting for its batch
    host = [0.0, 0.0,       # one warmup step: entering and leaving the data wait
            0.0,            # the window opens
            0.000, 0.004, 0.010,   # step 0: entering data, leaving it, its boundary
            0.020, 0.058, 0.097,   # step 1 (waited 38 ms for data)
            0.100]          # the window closes, after synchronize
    line, cuda = device_clock(2, stamps, host)
    drive(line, 2, warmup=1)
    made_before = len(cuda.made)
    assert made_before >= 1 + 6 * 2  # the window's events were made before it
    recorded = [e for e in cuda.made if e.recorded]
    assert len(recorded) == 13 and all(e.recorded == 1 for e in recorded)
    assert cuda.log.count("sync") == 1  # the one that opens the window, none inside it
    times = line.close()
    assert len(cuda.made) == made_before
    assert cuda.log[-1] == "sync"
    s = times.series_ms
    assert s["data_wait"] == pytest.approx([4.5, 18.5])  # on the device: entering to leaving next()
    assert s["host_data_wait"] == pytest.approx([4.0, 38.0])  # the host's time in next()
    assert s["h2d"] == pytest.approx([1.0, 1.0])
    assert s["forward"] == pytest.approx([10.0, 10.0])
    assert s["backward"] == pytest.approx([20.0, 20.0])
    assert s["optimizer"] == pytest.approx([5.0, 5.0])
    assert s["device_busy"] == pytest.approx([36.0, 36.0])
    # the gated step is timed on the device: origin to step 0's boundary, then to step 1's
    assert s["step"] == pytest.approx([41.0, 55.0])
    # the phases and a residual >= 0 (the gap before entering the data wait) tile each step
    for i, gap in enumerate((0.5, 0.5)):
        phases = sum(s[p][i] for p in ("data_wait", "h2d", "forward", "backward", "optimizer"))
        assert s["step"][i] - phases == pytest.approx(gap)
    # the host's boundary-to-boundary times stay, as a diagnostic series
    assert s["host_step"] == pytest.approx([10.0, 87.0])
    assert times.window_s == pytest.approx(0.100)
    assert times.device_window_ratio == pytest.approx(0.96)
    assert sum(s["device_busy"]) / (times.window_s * 1e3) == pytest.approx(0.72)


def test_device_timeline_records_only_on_the_current_stream_inside_the_window() -> None:
    steps = 3
    line, cuda = device_clock(steps, [float(i) for i in range(1 + 6 * steps)], [float(i) for i in range(100)])
    for _ in range(2):
        step(line)  # warmup: nothing recorded, the switches counted
    assert cuda.log == []
    drive(line, steps)
    # the window: opened by a synchronisation, then nothing but records, no stream look-up per switch
    assert cuda.log == ["current_stream", "sync"] + ["record"] * (1 + 6 * steps)
    assert len(line.close().series_ms["step"]) == steps
    assert cuda.log[-1] == "sync"


def test_a_device_backlog_is_timed_on_the_device_not_in_the_last_host_step() -> None:
    # Fast host, slow device (CUDA graphs, reduce-overhead): the host enqueues a step in
    # 0.1 ms, the device needs 5 ms for it. Each step's events complete when the device gets
    # to them, and its batch is there already (the data wait completes at once); the
    # closing synchronisation waits for the whole backlog.
    steps, launch_ms, device_ms = 20, 0.1, 5.0
    stamps = [0.0]
    for k in range(steps):
        t = k * device_ms
        stamps += [t, t, t + 0.2, t + 1.5, t + 4.0, t + device_ms]
    host = [0.0]  # open
    for k in range(steps):
        host += [k * launch_ms / 1e3, (k * launch_ms + 0.01) / 1e3, (k + 1) * launch_ms / 1e3]
    host.append((steps * device_ms + 0.05) / 1e3)  # after the synchronisation
    line, _ = device_clock(steps, stamps, host)
    drive(line, steps)
    times = line.close()
    s = times.series_ms
    window_ms = times.window_s * 1e3
    assert s["step"] == pytest.approx([device_ms] * steps)
    assert sum(s["step"]) == pytest.approx(window_ms, rel=0.01)
    assert times.device_window_ratio == pytest.approx(1.0, rel=0.01)
    # the host median is the launch time, far below the device's step; the backlog is the
    # host's wait in the closing synchronisation, which no host step holds
    assert median(s["host_step"]) == pytest.approx(launch_ms)
    assert median(s["host_step"]) < 0.05 * median(s["step"])
    assert sum(s["host_step"]) < 0.05 * window_ms
    # the host's 0.01 ms in next() is hidden behind the queued work: no device data wait
    assert s["data_wait"] == pytest.approx([0.0] * steps)
    assert s["host_data_wait"] == pytest.approx([0.01] * steps)


def test_device_timeline_refuses_an_incomplete_window() -> None:
    line, _ = device_clock(2, [float(i) for i in range(50)], [float(i) for i in range(50)])
    drive(line, 1)
    with pytest.raises(RuntimeError, match="expected 2 steps in the window, got 1"):
        line.close()


def test_an_injected_delay_runs_as_its_phase_is_left() -> None:
    calls: list[str] = []
    line, cuda = device_clock(2, [float(i) for i in range(13)], [float(i) for i in range(20)])
    injecting = InjectingTimeline(line, {"forward": lambda: calls.append("delay")})

    real_switch = line.switch

    def spy(old: int, new: int) -> None:
        calls.append(f"switch {old}->{new}")
        real_switch(old, new)

    injecting = InjectingTimeline(_Spy(line, spy), {"forward": lambda: calls.append("delay")})
    drive(injecting, 2)
    # the delay runs just before the switch that leaves forward, once per step
    assert calls.count("delay") == 2
    assert calls[calls.index("delay") + 1] == f"switch {FORWARD}->{BACKWARD}"
    assert cuda.log.count("record") == 13
    assert injecting.close().series_ms["step"] == pytest.approx([6.0, 6.0])  # origin 0, boundaries 6 and 12
    with pytest.raises(ValueError, match="cannot inject into"):
        InjectingTimeline(line, {"loss": lambda: None})


class _Spy:
    """``line`` with its switch replaced (the injecting timeline takes the calls when it is made)."""

    def __init__(self, line, switch) -> None:
        self.timing = line.timing
        self.switch = switch
        self.boundary = line.boundary
        self.open = line.open
        self.close = line.close
