"""The phase bookkeeping, checked with a seeded fake clock and fake CUDA events."""

from __future__ import annotations

import itertools

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


class FakeEvent:
    """A CUDA event whose device timestamp (ms) is scripted; records are counted."""

    def __init__(self, stamps: dict[int, float], ids: itertools.count) -> None:
        self.id = next(ids)
        self.stamps = stamps
        self.recorded = 0

    def record(self) -> None:
        self.recorded += 1

    def elapsed_time(self, end: FakeEvent) -> float:
        assert self.recorded and end.recorded, "read before record"
        return self.stamps[end.id] - self.stamps[self.id]


def test_device_clock_reads_events_after_the_window() -> None:
    ids = itertools.count()
    # event 0 is the window origin; then 5 per step: pre-h2d, h2d, fwd, bwd, opt
    stamps = {0: 0.0,
              1: 5.0, 2: 6.0, 3: 16.0, 4: 36.0, 5: 41.0,      # step 0: busy 36 ms
              6: 60.0, 7: 61.0, 8: 71.0, 9: 91.0, 10: 96.0}   # step 1: starts after a 19 ms idle gap
    events: list[FakeEvent] = []

    def factory() -> FakeEvent:
        events.append(FakeEvent(stamps, ids))
        return events[-1]

    host = FakeClock([0.0,            # window start
                      0.000, 0.004,   # step 0 begin, after data
                      0.020, 0.058,   # step 1 begin, after data (waited 38 ms for data)
                      0.100])         # window end, after synchronize
    clock = DeviceClock(2, factory, now=host)
    assert len(events) == 11  # allocated before the window
    drive(clock, 2)
    assert all(e.recorded == 1 for e in events)
    times = clock.finish()
    s = times.series_ms
    assert s["data_wait"] == pytest.approx([4.0, 38.0])
    assert s["h2d"] == pytest.approx([1.0, 1.0])
    assert s["forward"] == pytest.approx([10.0, 10.0])
    assert s["backward"] == pytest.approx([20.0, 20.0])
    assert s["optimizer"] == pytest.approx([5.0, 5.0])
    assert s["device_busy"] == pytest.approx([36.0, 36.0])
    assert s["step"] == pytest.approx([20.0, 80.0])
    assert times.window_s == pytest.approx(0.100)
    # busy fraction: 72 ms of device work in a 100 ms window
    assert sum(s["device_busy"]) / (times.window_s * 1e3) == pytest.approx(0.72)


def test_device_clock_refuses_an_incomplete_window() -> None:
    ids = itertools.count()
    clock = DeviceClock(2, lambda: FakeEvent({}, ids), now=FakeClock([float(i) for i in range(50)]))
    drive(clock, 1)
    with pytest.raises(RuntimeError, match="incomplete window"):
        clock.finish()
