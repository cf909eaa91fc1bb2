"""A CUDA event stamp below the one before it is raised to it (the events' resolution), and
never silently: each window records how many were raised and the largest raise."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_clock import device_clock, drive

from perfgate.measure.timeline import WindowTimes
from perfgate.measure.timeline import monotone as _monotone
from perfgate.measure.timeline import monotone_counted as _monotone_counted
from perfgate.measure.loop import clamp_record, join_windows


def test_raised_stamps_are_counted_with_the_largest_raise() -> None:
    stamps, (count, largest) = _monotone_counted([0.0, 1.0, 0.9995, 2.0, 1.99, 1.995, 3.0])
    assert stamps == [0.0, 1.0, 1.0, 2.0, 2.0, 2.0, 3.0] == _monotone([0.0, 1.0, 0.9995, 2.0, 1.99, 1.995, 3.0])
    assert count == 3 and largest == pytest.approx(0.01)
    assert _monotone_counted([0.0, 1.0, 1.0, 2.0])[1] == (0, 0.0)  # equal stamps are not raised


def test_the_device_timeline_reports_the_windows_raises_for_a_workload() -> None:
    # step 1's forward event stamped 6 µs before its h2d event: raised, counted, the largest
    stamps = [0.0,
              0.5, 5.0, 6.0, 16.0, 36.0, 41.0,
              41.5, 60.0, 61.0, 60.994, 91.0, 96.0]
    host = [float(i) for i in range(20)]
    clock, _ = device_clock(2, stamps, host)
    drive(clock, 2)
    times = clock.close()
    assert times.clamps == ((1, pytest.approx(0.006)),)
    assert times.series_ms["forward"][1] == 0.0 and min(times.series_ms["h2d"]) >= 0
    assert clamp_record(times) == {"clamped_stamps": [1], "largest_clamp_ms": [pytest.approx(0.006)]}


def test_the_script_timeline_reports_its_raises() -> None:
    from perfgate.measure.timeline import FORWARD, IDLE, DeviceTimeline

    stamps = iter([0.0, 5.0, 4.998, 10.0])

    class Event:
        def record(self, stream: Any = None) -> None:
            self.at = next(stamps)

        def elapsed_time(self, end: Any) -> float:
            return end.at - self.at

    line = DeviceTimeline(1, Event, synchronize=lambda: None, current_stream=lambda: None, now=lambda: 0.0)
    line.open(IDLE)
    line.switch(IDLE, FORWARD)
    line.switch(FORWARD, IDLE)
    line.boundary(IDLE)
    times = line.close()
    assert times.clamps == ((1, pytest.approx(0.002)),)


def test_joined_windows_keep_each_windows_raises() -> None:
    a = WindowTimes({"step": [1.0]}, 0.001, 1.0, clamps=((2, 0.001),))
    b = WindowTimes({"step": [1.0]}, 0.001, 1.0, clamps=((0, 0.0),))
    c = WindowTimes({"step": [1.0]}, 0.001, 1.0, clamps=((5, 0.02),))
    joined = join_windows([a, b, c])
    assert joined.clamps == ((2, 0.001), (0, 0.0), (5, 0.02))
    assert clamp_record(joined) == {"clamped_stamps": [2, 0, 5], "largest_clamp_ms": [0.001, 0.0, 0.02]}
    assert clamp_record(WindowTimes({"step": [1.0]}, 0.001)) == {}  # the CPU clock raises nothing


def test_a_result_with_the_raises_reads_back(tmp_path: Path) -> None:
    from perfgate.model.result import repeat_from_dict

    repeat = {"index": 0, "started_at": "2026-01-01T00:00:00+00:00", "timing": "cuda_events", "window_s": 0.003,
              "phases_ms": {p: [0.5] for p in ("data_wait", "h2d", "forward", "backward", "optimizer")} | {
                  "step": [3.0]},
              "samples_per_s": 1.0, "peak_memory_bytes": 1, "peak_memory_kind": "cuda_max_allocated",
              "torch_settings": {"cuda_window": {"device_steps_over_window": 1.0, "max_memory_reserved_bytes": 1,
                                                 "clamped_stamps": [1], "largest_clamp_ms": [0.006]}},
              "loader_settings": {}, "loader_restarts": 0, "telemetry": None}
    back = repeat_from_dict(repeat, "repeat")
    assert back.torch_settings["cuda_window"]["clamped_stamps"] == [1]
