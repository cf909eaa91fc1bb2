"""Phase clocks: the bookkeeping of when each phase of a step starts and ends.

The training loop calls the six marks of a step in order (``begin_step``, ``after_data``,
``after_h2d``, ``after_forward``, ``after_backward``, ``after_optimizer``) and, once the
window is closed and synchronised, ``finish`` turns the marks into per-step durations.
Nothing here synchronises: on CUDA the marks only enqueue events, which are read after
the window. Clocks and event factories are injectable so the accounting is tested
without a GPU.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class WindowTimes:
    """Per-step durations in milliseconds, one list per series, plus the window wall time."""

    series_ms: dict[str, list[float]]
    window_s: float


class PhaseClock(Protocol):
    timing: str

    def start_window(self) -> None: ...
    def begin_step(self) -> None: ...
    def after_data(self) -> None: ...
    def after_h2d(self) -> None: ...
    def after_forward(self) -> None: ...
    def after_backward(self) -> None: ...
    def after_optimizer(self) -> None: ...
    def end_window(self) -> None: ...
    def finish(self) -> WindowTimes: ...


def _step_series(starts: list[float], window_end: float) -> list[float]:
    """Start-to-start wall time; the last step ends where the synchronised window ends."""
    ends = starts[1:] + [window_end]
    return [(e - s) * 1e3 for s, e in zip(starts, ends)]


class HostClock:
    """CPU timing: every boundary is a ``perf_counter`` reading (CPU ops are synchronous)."""

    timing = "perf_counter"

    def __init__(self, steps: int, now: Callable[[], float] = time.perf_counter) -> None:
        self._steps = steps
        self._now = now
        self._marks: list[float] = []
        self._window = (0.0, 0.0)
        # Bound methods resolved once: each mark is one call and one append.
        mark = self._marks.append
        self.begin_step = lambda: mark(now())  # type: ignore[method-assign]
        self.after_data = self.begin_step  # type: ignore[method-assign]
        self.after_h2d = self.begin_step  # type: ignore[method-assign]
        self.after_forward = self.begin_step  # type: ignore[method-assign]
        self.after_backward = self.begin_step  # type: ignore[method-assign]
        self.after_optimizer = self.begin_step  # type: ignore[method-assign]

    def start_window(self) -> None:
        self._window = (self._now(), 0.0)

    def end_window(self) -> None:
        self._window = (self._window[0], self._now())

    def finish(self) -> WindowTimes:
        marks = self._marks
        if len(marks) != 6 * self._steps:
            raise RuntimeError(f"expected {6 * self._steps} marks for {self._steps} steps, got {len(marks)}")
        rows = [marks[i : i + 6] for i in range(0, len(marks), 6)]
        series = {
            "data_wait": [(r[1] - r[0]) * 1e3 for r in rows],
            "h2d": [(r[2] - r[1]) * 1e3 for r in rows],
            "forward": [(r[3] - r[2]) * 1e3 for r in rows],
            "backward": [(r[4] - r[3]) * 1e3 for r in rows],
            "optimizer": [(r[5] - r[4]) * 1e3 for r in rows],
            "step": _step_series([r[0] for r in rows], self._window[1]),
        }
        return WindowTimes(series, self._window[1] - self._window[0])


class TimingEvent(Protocol):
    def record(self) -> None: ...
    def elapsed_time(self, end: Any) -> float: ...


class DeviceClock:
    """CUDA timing: host clock for the data wait and the step, CUDA events for the rest.

    Per step five events are recorded on the current stream: before the host-to-device
    copies (right after the batch arrived), after them, after forward, after backward and
    after the optimizer. All events are allocated before the window and read after the
    synchronisation that closes it. An event completes when the stream reaches it, so
    ``last - first`` of a step is the device time of that step and the gaps between steps
    are the time the device sat idle waiting for the host.
    """

    timing = "cuda_events"

    def __init__(
        self,
        steps: int,
        event_factory: Callable[[], TimingEvent],
        now: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._steps = steps
        self._now = now
        self._origin = event_factory()
        self._events = [event_factory() for _ in range(5 * steps)]
        self._host: list[float] = []
        self._next = 0
        self._window = (0.0, 0.0)
        host = self._host.append
        self.begin_step = lambda: host(now())  # type: ignore[method-assign]

    def _record(self) -> None:
        self._events[self._next].record()
        self._next += 1

    def start_window(self) -> None:
        self._origin.record()
        self._window = (self._now(), 0.0)

    def after_data(self) -> None:
        self._host.append(self._now())
        self._record()

    after_h2d = _record
    after_forward = _record
    after_backward = _record
    after_optimizer = _record

    def end_window(self) -> None:
        self._window = (self._window[0], self._now())

    def finish(self) -> WindowTimes:
        """Read the events; call only after the synchronisation that closes the window."""
        if self._next != 5 * self._steps or len(self._host) != 2 * self._steps:
            raise RuntimeError(
                f"incomplete window: {self._next} events and {len(self._host)} host marks for {self._steps} steps"
            )
        stamps = [self._origin.elapsed_time(e) for e in self._events]
        rows = [stamps[i : i + 5] for i in range(0, len(stamps), 5)]
        host = [self._host[i : i + 2] for i in range(0, len(self._host), 2)]
        series = {
            "data_wait": [(h[1] - h[0]) * 1e3 for h in host],
            "h2d": [r[1] - r[0] for r in rows],
            "forward": [r[2] - r[1] for r in rows],
            "backward": [r[3] - r[2] for r in rows],
            "optimizer": [r[4] - r[3] for r in rows],
            "step": _step_series([h[0] for h in host], self._window[1]),
            "device_busy": [r[4] - r[0] for r in rows],
        }
        return WindowTimes(series, self._window[1] - self._window[0])
