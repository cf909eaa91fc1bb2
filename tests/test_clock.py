"""The phase bookkeeping, checked with a seeded fake clock and fake CUDA events."""

from __future__ import annotations

from statistics import median

import pytest

from perfgate.measure.clock import DeviceClock, HostClock


class FakeClock:
    """Returns a scripted sequence of times (seconds)."""

    def __init__(self, times: list[float]) -> None:
        self.times = iter(times)

    def __call__(self) -> float:
        return next(self.times)


def drive(clock, steps: int) -> None:
    clock.start_window()
    for _ in range(steps):
        clock.begin_step()
        clock.after_data()
        clock.after_h2d()
        clock.after_forward()
        clock.after_backward()
        clock.after_optimizer()
    clock.end_window()


def test_host_clock_turns_marks_into_phase_durations() -> None:
    # window start, then per step: begin, data, h2d, fwd, bwd, opt; then window end.
    step0 = [0.000, 0.010, 0.011, 0.031, 0.071, 0.081]
    step1 = [0.082, 0.182, 0.183, 0.203, 0.243, 0.253]
    clock = HostClock(2, now=FakeClock([0.0, *step0, *step1, 0.260]))
    drive(clock, 2)
    times = clock.finish()
    s = times.series_ms
    assert s["data_wait"] == pytest.approx([10.0, 100.0])
    assert s["h2d"] == pytest.approx([1.0, 1.0])
    assert s["forward"] == pytest.approx([20.0, 20.0])
    assert s["backward"] == pytest.approx([40.0, 40.0])
    assert s["optimizer"] == pytest.approx([10.0, 10.0])
    # start to start, and the last step ends at the synchronised window end
    assert s["step"] == pytest.approx([82.0, 178.0])
    assert times.window_s == pytest.approx(0.260)
    # phases plus the residual between steps add up to the step
    for i in range(2):
        phases = sum(s[p][i] for p in ("data_wait", "h2d", "forward", "backward", "optimizer"))
        assert phases <= s["step"][i]


def test_host_clock_refuses_an_incomplete_window() -> None:
    clock = HostClock(3, now=FakeClock([float(i) for i in range(100)]))
    drive(clock, 2)
    with pytest.raises(RuntimeError, match="expected 18 marks"):
        clock.finish()


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


def device_clock(steps: int, stamps: list[float], host: list[float]) -> tuple[DeviceClock, FakeCuda]:
    cuda = FakeCuda(stamps)
    clock = DeviceClock(steps, cuda.event, synchronize=cuda.synchronize, current_stream=cuda.current_stream,
                        now=FakeClock(host))
    return clock, cuda


def test_device_clock_reads_events_after_the_window() -> None:
    # In record order: the window origin, then 6 per step (begin, after data, h2d, fwd, bwd,
    # opt), then the closing event. Step 1's begin event is reached at 41.5 ms (the device
    # finished step 0's work at 41); its batch arrives 18.5 ms later, at 60: the device sat
    # idle waiting for it. Until the begin event was recorded, a step's first event was the
    # after-data one, and this idle wait was booked on step 0 (steps [60, 37] ms, with the
    # host's 38 ms as step 1's data wait): one step early. Now it is on step 1, the step it
    # delays, as the device saw it, and the host's wait is kept beside it.
    stamps = [0.0,
              0.5, 5.0, 6.0, 16.0, 36.0, 41.0,      # step 0: busy 36 ms, 4.5 ms waiting for its batch
              41.5, 60.0, 61.0, 71.0, 91.0, 96.0,   # step 1: 18.5 ms idle waiting for its batch
              97.0]
    host = [0.0,            # window start
            0.000, 0.004,   # step 0 begin, after data
            0.020, 0.058,   # step 1 begin, after data (waited 38 ms for data)
            0.100]          # window end, after synchronize
    clock, cuda = device_clock(2, stamps, host)
    assert len(cuda.made) == 14  # allocated before the window: the origin, 6 per step, the closing event
    drive(clock, 2)
    assert all(e.recorded == 1 for e in cuda.made)
    # one synchronisation, the last thing on the device: after the closing event's record
    assert cuda.log.count("sync") == 1 and cuda.log[-2:] == ["record", "sync"]
    times = clock.finish()
    s = times.series_ms
    assert s["data_wait"] == pytest.approx([4.5, 18.5])  # on the device: begin event to after-data event
    assert s["host_data_wait"] == pytest.approx([4.0, 38.0])  # the host's time in next()
    assert s["h2d"] == pytest.approx([1.0, 1.0])
    assert s["forward"] == pytest.approx([10.0, 10.0])
    assert s["backward"] == pytest.approx([20.0, 20.0])
    assert s["optimizer"] == pytest.approx([5.0, 5.0])
    assert s["device_busy"] == pytest.approx([36.0, 36.0])
    # the gated step is timed on the device: origin to step 1's begin event, then to the closing event
    assert s["step"] == pytest.approx([41.5, 55.5])
    # the phases and a residual >= 0 (optimizer end to the next begin event) tile each step
    for i in range(2):
        phases = sum(s[p][i] for p in ("data_wait", "h2d", "forward", "backward", "optimizer"))
        assert s["step"][i] - phases == pytest.approx(1.0)
    # the host's start-to-start times stay, as a diagnostic series
    assert s["host_step"] == pytest.approx([20.0, 80.0])
    assert times.window_s == pytest.approx(0.100)
    assert times.device_window_ratio == pytest.approx(0.97)
    # busy fraction: 72 ms of device work in a 100 ms window
    assert sum(s["device_busy"]) / (times.window_s * 1e3) == pytest.approx(0.72)


def test_device_clock_marks_only_record_on_the_current_stream() -> None:
    steps = 3
    clock, cuda = device_clock(steps, [float(i) for i in range(2 + 6 * steps)],
                               [float(i) for i in range(2 + 2 * steps)])
    assert cuda.log == ["current_stream"]  # resolved once, when the clock is made
    clock.start_window()
    for _ in range(steps):
        clock.begin_step()
        clock.after_data()
        clock.after_h2d()
        clock.after_forward()
        clock.after_backward()
        clock.after_optimizer()
    # nothing but records inside the window: no synchronisation, no stream look-up per mark
    assert cuda.log == ["current_stream"] + ["record"] * (1 + 6 * steps)
    with pytest.raises(RuntimeError, match="not closed"):
        clock.finish()
    clock.end_window()
    assert cuda.log[-2:] == ["record", "sync"]
    assert len(clock.finish().series_ms["step"]) == steps


def test_a_device_backlog_is_timed_on_the_device_not_in_the_last_host_step() -> None:
    # Fast host, slow device (CUDA graphs, reduce-overhead): the host enqueues a step in
    # 0.1 ms, the device needs 5 ms for it. Each step's begin event completes when the
    # device gets to it, and its batch is there already (after-data completes at once);
    # the closing synchronisation waits for the whole backlog.
    steps, launch_ms, device_ms = 20, 0.1, 5.0
    stamps = [0.0]
    for k in range(steps):
        t = k * device_ms
        stamps += [t, t, t + 0.2, t + 1.5, t + 4.0, t + device_ms]
    stamps.append(steps * device_ms)
    host = [0.0]
    for k in range(steps):
        host += [k * launch_ms / 1e3, (k * launch_ms + 0.01) / 1e3]
    host.append((steps * device_ms + 0.05) / 1e3)  # after the synchronisation
    clock, _ = device_clock(steps, stamps, host)
    drive(clock, steps)
    times = clock.finish()
    s = times.series_ms
    window_ms = times.window_s * 1e3
    assert s["step"] == pytest.approx([device_ms] * steps)
    assert sum(s["step"]) == pytest.approx(window_ms, rel=0.01)
    assert times.device_window_ratio == pytest.approx(1.0, rel=0.01)
    # the host median is the launch time, far below the device's step, and the backlog
    # lands in the host's last step
    assert median(s["host_step"]) == pytest.approx(launch_ms)
    assert median(s["host_step"]) < 0.05 * median(s["step"])
    assert s["host_step"][-1] > 0.9 * window_ms
    assert sum(s["host_step"]) == pytest.approx(window_ms)
    # the host's 0.01 ms in next() is hidden behind the queued work: no device data wait
    assert s["data_wait"] == pytest.approx([0.0] * steps)
    assert s["host_data_wait"] == pytest.approx([0.01] * steps)


def test_device_clock_refuses_an_incomplete_window() -> None:
    clock, _ = device_clock(2, [float(i) for i in range(50)], [float(i) for i in range(50)])
    drive(clock, 1)
    with pytest.raises(RuntimeError, match="incomplete window"):
        clock.finish()


def test_an_injected_delay_wraps_the_device_clock_marks() -> None:
    # The injecting clock takes the marks when it is made: the device clock has them then.
    from perfgate.measure.loop import InjectingClock

    calls: list[str] = []
    clock, cuda = device_clock(2, [float(i) for i in range(14)], [float(i) for i in range(6)])
    injecting = InjectingClock(clock, {"forward": lambda: calls.append("delay")})
    drive(injecting, 2)
    assert calls == ["delay", "delay"]
    assert cuda.log.count("record") == 14 and cuda.log[-1] == "sync"
    assert injecting.finish().series_ms["step"] == pytest.approx([7.0, 6.0])  # origin 0, begins 1 and 7, end 13
