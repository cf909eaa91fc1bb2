"""Which step a CUDA stall is booked on, checked on a simulated stream.

A stand-in stream keeps a host clock and the time the device will be done with the work
queued so far. Launching work costs the host a little and queues the work behind what is
there; an event recorded on the stream is stamped when the device reaches it: at once if
the device is idle (the host was late), after the queued work if not. That is all the CUDA
clocks rely on, so the booking of a data stall, of a wait hidden behind queued work and of
the residual is checked here without a GPU, for the one timeline (``DeviceTimeline``) as a
workload's step drives it and as a script's hooks do.

The defect these pin down (seen on an H200, tests/fixtures/h200/resnet18-imagenette.json):
when a step's first event came after its data wait, a stall waiting for step k + 1's batch
was device time between step k's first event and step k + 1's, so it landed in step k (its
residual +69 ms) while the host-clock data wait put it on step k + 1 (residual -87 ms).
"""

from __future__ import annotations

from typing import Any

import pytest

from perfgate.measure.timeline import BACKWARD, DATA, FORWARD, H2D, IDLE, OPTIMIZER, DeviceTimeline

PHASES = ("data_wait", "h2d", "forward", "backward", "optimizer")
WORK_MS = {"h2d": 0.4, "forward": 5.0, "backward": 9.5, "optimizer": 0.1}
"""Device time per phase: a 15 ms step, as resnet18-imagenette's on the H200."""


class SimStream:
    """A host clock and one CUDA stream, in milliseconds."""

    def __init__(self, launch_ms: float) -> None:
        self.host = 0.0
        self.tail = 0.0
        """When the device is done with the work queued so far."""
        self.launch_ms = launch_ms
        self.syncs = 0
        self.unread: list[SimEvent] = []

    def now(self) -> float:
        return self.host / 1e3

    def wait(self, ms: float) -> None:
        """The host blocks (in the DataLoader's ``next``); the device goes on with its queue."""
        self.host += ms

    def launch(self, ms: float) -> None:
        self.tail = max(self.tail, self.host) + ms
        self.host += self.launch_ms

    def synchronize(self) -> None:
        self.syncs += 1
        self.host = max(self.host, self.tail)
        for event in self.unread:
            event.done = True
        self.unread.clear()

    def event(self) -> SimEvent:
        return SimEvent(self)

    def current_stream(self) -> SimStream:
        return self


class SimEvent:
    def __init__(self, stream: SimStream) -> None:
        self.stream = stream
        self.stamp: float | None = None
        self.done = False

    def record(self, stream: Any = None) -> None:
        assert stream is self.stream
        self.stamp = max(self.stream.host, self.stream.tail)  # completes when the stream reaches it
        self.done = False
        self.stream.unread.append(self)

    def elapsed_time(self, end: SimEvent) -> float:
        assert self.done and end.done, "read before the synchronisation that closes the window"
        assert self.stamp is not None and end.stamp is not None
        return end.stamp - self.stamp


def run_clock(waits: list[float], *, launch_ms: float,
              overhead_ms: float = 0.0) -> tuple[dict[str, list[float]], SimStream, Any]:
    """A workload's window on the simulated stream: ``waits[k]`` ms in step k's ``next``,
    ``launch_ms`` per launch, ``overhead_ms`` of host time between one step and the next."""
    sim = SimStream(launch_ms)
    clock = DeviceTimeline(len(waits), sim.event, synchronize=sim.synchronize, current_stream=sim.current_stream,
                           now=sim.now)
    clock.open(IDLE)
    for wait in waits:  # the switches as loop._Step makes them
        clock.switch(IDLE, DATA)
        sim.wait(wait)
        clock.switch(DATA, H2D)
        sim.launch(WORK_MS["h2d"])
        clock.switch(H2D, FORWARD)
        sim.launch(WORK_MS["forward"])
        clock.switch(FORWARD, BACKWARD)
        sim.launch(WORK_MS["backward"])
        clock.switch(BACKWARD, OPTIMIZER)
        sim.launch(WORK_MS["optimizer"])
        clock.boundary(OPTIMIZER, IDLE)
        sim.wait(overhead_ms)
    times = clock.close()
    return times.series_ms, sim, times


def run_timeline(waits: list[float], *, launch_ms: float,
                 overhead_ms: float = 0.0) -> tuple[dict[str, list[float]], SimStream, Any]:
    """A script's window on the simulated stream, the switches as the hooks make them."""
    sim = SimStream(launch_ms)
    line = DeviceTimeline(len(waits), sim.event, synchronize=sim.synchronize, current_stream=sim.current_stream,
                          now=sim.now)
    line.open(IDLE)  # the end of warmup's last optimizer step
    for wait in waits:
        line.switch(IDLE, DATA)
        sim.wait(wait)
        line.switch(DATA, IDLE)
        line.switch(IDLE, H2D)
        sim.launch(WORK_MS["h2d"])
        line.switch(H2D, IDLE)
        line.switch(IDLE, FORWARD)
        sim.launch(WORK_MS["forward"])
        line.switch(FORWARD, BACKWARD)
        sim.launch(WORK_MS["backward"])
        line.switch(BACKWARD, IDLE)
        line.switch(IDLE, OPTIMIZER)
        sim.launch(WORK_MS["optimizer"])
        line.switch(OPTIMIZER, IDLE)
        line.boundary(IDLE)  # the end of this optimizer step
        sim.wait(overhead_ms)
    times = line.close()
    return times.series_ms, sim, times


RUNS = pytest.mark.parametrize("run", [run_clock, run_timeline], ids=["workload", "script"])


def residuals(s: dict[str, list[float]]) -> list[float]:
    return [step - sum(row) for step, row in zip(s["step"], zip(*(s[p] for p in PHASES), strict=True), strict=True)]


def assert_tiles(s: dict[str, list[float]]) -> None:
    """Every phase >= 0, the phases within the step, residual >= 0: no share above 100%."""
    for p in PHASES:
        assert min(s[p]) >= 0.0, p
    for k, (step, residual) in enumerate(zip(s["step"], residuals(s), strict=True)):
        assert residual >= 0.0, (k, residual)
        assert all(s[p][k] / step <= 1.0 for p in PHASES)


@RUNS
def test_a_data_stall_is_booked_on_the_step_it_delays(run: Any) -> None:
    # The host's launches take about as long as the device's work (14 ms of launches, a
    # 15 ms step), as on the H200; every 4th step waits 85 ms for its batch.
    stall_ms, steps = 85.0, 16
    stalled = [k for k in range(steps) if k % 4 == 3]
    waits = [stall_ms if k in stalled else 0.1 for k in range(steps)]
    s, _, times = run(waits, launch_ms=3.5)
    assert_tiles(s)
    plain = [k for k in range(1, steps) if k not in stalled and k - 1 not in stalled]
    typical = max(s["step"][k] for k in plain)
    for k in stalled:
        # the stalled step holds the stall, as the device saw it (less what queued work hid)...
        assert s["data_wait"][k] > 0.9 * stall_ms
        assert s["step"][k] > typical + 0.9 * stall_ms
        # (the rest of it is a step's work, and the launch latency the idle device saw after the stall)
        assert s["step"][k] - s["data_wait"][k] < typical + 4 * 3.5
        # ... and the step before it does not: its step and its data wait are a plain step's
        assert s["step"][k - 1] <= typical + 1e-9
        assert s["data_wait"][k - 1] < 1.0
        assert residuals(s)[k - 1] < 1.0
        # the host's wait, on the host clock, beside it
        assert s["host_data_wait"][k] == pytest.approx(stall_ms)
    assert min(s["step"]) >= sum(WORK_MS.values()) - 1e-9
    assert [s["device_busy"][k] for k in plain] == pytest.approx([sum(WORK_MS.values())] * len(plain))
    # the device steps still tile the window
    assert sum(s["step"]) == pytest.approx(times.window_s * 1e3)
    assert times.device_window_ratio == pytest.approx(1.0)


@RUNS
def test_a_host_running_ahead_hides_its_data_wait_from_the_device(run: Any) -> None:
    # 5 ms in next() and 0.1 ms per launch: the host needs 5.4 ms a step, the device 15 ms,
    # so from step 1 on each batch is there before the device has finished the work queued
    # ahead of it. Step 0 starts on an idle device (the window opens after a
    # synchronisation): its wait is exposed.
    steps, wait_ms = 12, 5.0
    s, _, _ = run([wait_ms] * steps, launch_ms=0.1)
    assert_tiles(s)
    assert s["data_wait"][0] == pytest.approx(wait_ms)
    assert s["data_wait"][1:] == pytest.approx([0.0] * (steps - 1))
    assert s["host_data_wait"] == pytest.approx([wait_ms] * steps)
    assert s["step"][1:] == pytest.approx([sum(WORK_MS.values())] * (steps - 1))
    assert residuals(s)[1:] == pytest.approx([0.0] * (steps - 1))


@RUNS
def test_a_late_host_leaves_its_overhead_in_the_residual(run: Any) -> None:
    # 4 ms per launch and 10 ms of loop overhead (logging, say) after each optimizer step:
    # the host is slower than the device, which idles between steps. The idle time after
    # the optimizer is in no phase; it is the residual, never negative. (The workload books
    # the overhead after step k's optimizer on step k, the script on step k + 1: its
    # boundary is the optimizer step's end, so the script's step 0 has none.)
    s, _, _ = run([0.5] * 6, launch_ms=4.0, overhead_ms=10.0)
    assert_tiles(s)
    assert min(residuals(s)[1:]) > 5.0
    assert s["data_wait"] == pytest.approx([0.5] * 6)  # the device was idle: the wait is all exposed
    assert s["host_data_wait"] == pytest.approx([0.5] * 6)


def test_a_stamp_below_the_one_before_it_is_clamped_to_no_time() -> None:
    # Event resolution: a batch already there, its after-data event stamped 0.2 µs before
    # the begin event it follows on the stream. The data wait is 0.0, not negative, and the
    # step's phases still fit in it.
    from test_clock import device_clock

    from test_clock import drive

    stamps = [0.0,
              1.0, 0.9998, 2.0, 3.0, 4.0, 5.0,
              5.0, 6.0, 7.0, 8.0, 9.0, 10.0]
    clock, _ = device_clock(2, stamps, [float(i) / 1e3 for i in range(20)])
    drive(clock, 2)
    s = clock.close().series_ms
    assert s["data_wait"] == [0.0, 1.0]
    assert s["h2d"][0] == pytest.approx(1.0)  # from the raised stamp
    assert_tiles(s)
    assert sum(s["step"]) == pytest.approx(10.0)


def test_the_script_timeline_clamps_a_stamp_below_the_one_before_it() -> None:
    stamps = iter([0.0, 1.0, 0.9999, 1.0, 3.0, 3.0])

    class Event:
        def record(self, stream: Any = None) -> None:
            self.at = next(stamps)

        def elapsed_time(self, end: Any) -> float:
            return end.at - self.at

    line = DeviceTimeline(1, Event, synchronize=lambda: None, current_stream=lambda: None, now=lambda: 0.0)
    line.open(IDLE)          # 0.0
    line.switch(IDLE, DATA)  # 1.0
    line.switch(DATA, IDLE)  # 0.9999: raised to 1.0
    line.switch(IDLE, FORWARD)  # 1.0
    line.switch(FORWARD, IDLE)  # 3.0
    line.boundary(IDLE)      # 3.0
    s = line.close().series_ms
    assert s["data_wait"] == [0.0] and s["forward"] == [2.0] and s["step"] == [3.0]
    assert_tiles(s)
