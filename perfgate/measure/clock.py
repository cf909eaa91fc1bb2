"""Phase clocks: the bookkeeping of when each phase of a step starts and ends.

The training loop calls the six marks of a step in order (``begin_step``, ``after_data``,
``after_h2d``, ``after_forward``, ``after_backward``, ``after_optimizer``) and, once the
window is closed and synchronised, ``finish`` turns the marks into per-step durations.
Nothing synchronises inside the window: on CUDA every mark enqueues one event on the
current stream (``begin_step`` and ``after_data`` read the host clock too, around the
DataLoader's ``next``), ``end_window`` records the closing event and is the
synchronisation that ends the window, and the events are read after it. Clocks, event factories, the stream
and the synchronisation are injectable so the accounting is tested without a GPU.
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
    device_window_ratio: float | None = None
    """CUDA: the device steps' sum over the window's wall time (about 1 when the events
    time all of the window's work; well below 1 when work ran where the events did not)."""
    clamps: tuple[tuple[int, float], ...] = ()
    """CUDA, per window: how many event stamps were below the one before them and raised to
    it (:func:`_monotone`), and the largest such raise in milliseconds. Event resolution
    gives raises of about half a microsecond; larger ones mean the stamps are not what the
    accounting assumes (see :data:`perfgate.model.result.CLAMP_NOTE_MS`)."""


class PhaseClock(Protocol):
    timing: str

    def start_window(self) -> None: ...
    def begin_step(self) -> None: ...
    def after_data(self) -> None: ...
    def after_h2d(self) -> None: ...
    def after_forward(self) -> None: ...
    def after_backward(self) -> None: ...
    def after_optimizer(self) -> None: ...
    def end_window(self) -> None:
        """Close the window: on CUDA, the closing event and the synchronisation."""
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
    def record(self, stream: Any = None) -> None: ...
    def elapsed_time(self, end: Any) -> float: ...


def _monotone(stamps: list[float]) -> list[float]:
    """Event stamps on one stream, made non-decreasing.

    Events on one stream complete in the order they were recorded, so a stamp below the
    one before it is the events' resolution (about half a microsecond), not time running
    back: it is raised to the stamp before it. Every difference of consecutive stamps is
    then >= 0 and the differences of a span add up to the span exactly.
    """
    return _monotone_counted(stamps)[0]


def _monotone_counted(stamps: list[float]) -> tuple[list[float], tuple[int, float]]:
    """:func:`_monotone`, with how many stamps it raised and the largest raise (ms), so a
    raise is never silent: the result records both per window."""
    out: list[float] = []
    top = 0.0
    raised = 0
    largest = 0.0
    for stamp in stamps:
        if stamp > top:
            top = stamp
        elif stamp < top:
            raised += 1
            if top - stamp > largest:
                largest = top - stamp
        out.append(top)
    return out, (raised, largest)


class DeviceClock:
    """CUDA timing: CUDA events for the step and every phase, the host clock beside them.

    Per step six events are recorded on the current stream: at ``begin_step`` (before the
    host asks the DataLoader for the batch), after the batch arrived, after the
    host-to-device copies, after forward, after backward and after the optimizer. One more
    opens the window (``origin``) and one closes it, recorded just before the
    synchronisation that ends the window. All events are allocated, and the stream
    resolved, when the clock is made (before the window); they are read only after that
    synchronisation.

    An event completes when the stream reaches it, so the step series is timed on the
    device: step *k* runs from step *k*'s begin event to step *k + 1*'s (step 0 from the
    origin, the last step to the closing event), and the steps tile the window. A stall
    waiting for step *k*'s batch is booked on step *k*, the step it delays. When the host
    runs ahead of the device (few launches per step: CUDA graphs, ``torch.compile``),
    start-to-start host times measure the launches and the backlog lands in the last step;
    the device steps do not. The host's start-to-start times are kept as ``host_step``.

    Every device series is a difference of consecutive events on the one stream:
    ``data_wait`` is the *exposed* data wait, begin event to after-data event: the time the
    device sat idle waiting for this step's batch once it had finished the work queued
    before it (about 0 when the host's wait is hidden behind queued GPU work). The host's
    time in the DataLoader's ``next`` is kept as ``host_data_wait``. ``h2d``, ``forward``,
    ``backward`` and ``optimizer`` follow; ``device_busy`` is after-data to after-optimizer.
    The five phases and the residual (the optimizer's end to the next begin event: host
    overhead that left the device idle) tile the step, and the residual is never negative:
    a stamp below the one before it (event resolution) is raised to it (:func:`_monotone`),
    so no phase's share of a step exceeds 100%.
    """

    timing = "cuda_events"

    def __init__(
        self,
        steps: int,
        event_factory: Callable[[], TimingEvent],
        *,
        synchronize: Callable[[], None],
        current_stream: Callable[[], Any],
        now: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._steps = steps
        self._now = now
        self._synchronize = synchronize
        self._origin = event_factory()
        self._events = [event_factory() for _ in range(6 * steps)]
        self._end = event_factory()
        self._host: list[float] = []
        self._window = (0.0, 0.0)
        self._closed = False
        self._stream = stream = current_stream()
        # The marks are closures over pre-resolved objects: a host mark is one clock read
        # and one append, a device mark takes the next pre-allocated event and records it.
        # The two host reads bracket the DataLoader's ``next`` tightly: the begin mark
        # records its event first, the after-data mark reads the clock first.
        self._pending = pending = iter(self._events)
        take = pending.__next__
        host = self._host.append

        def record() -> None:
            take().record(stream)

        def begin_step() -> None:
            take().record(stream)
            host(now())

        def after_data() -> None:
            host(now())
            take().record(stream)

        self.begin_step = begin_step  # type: ignore[method-assign]
        self.after_data = after_data  # type: ignore[method-assign]
        self.after_h2d = record  # type: ignore[method-assign]
        self.after_forward = record  # type: ignore[method-assign]
        self.after_backward = record  # type: ignore[method-assign]
        self.after_optimizer = record  # type: ignore[method-assign]

    def start_window(self) -> None:
        self._origin.record(self._stream)
        self._window = (self._now(), 0.0)

    def end_window(self) -> None:
        """Record the closing event, synchronise, then read the host clock."""
        self._end.record(self._stream)
        self._synchronize()
        self._closed = True
        self._window = (self._window[0], self._now())

    def finish(self) -> WindowTimes:
        """Read the events; only after :meth:`end_window` (the synchronisation that closes the window)."""
        unrecorded = sum(1 for _ in self._pending)
        recorded = len(self._events) - unrecorded
        if not self._closed or recorded != 6 * self._steps or len(self._host) != 2 * self._steps:
            raise RuntimeError(
                f"incomplete window: {recorded} events and {len(self._host)} host marks for {self._steps} steps"
                + ("" if self._closed else ", not closed")
            )
        origin = self._origin
        raw = [origin.elapsed_time(e) for e in (*self._events, self._end)]
        (*stamps, end), clamps = _monotone_counted(raw)
        rows = [stamps[i : i + 6] for i in range(0, len(stamps), 6)]
        begins = [r[0] for r in rows]
        host = [self._host[i : i + 2] for i in range(0, len(self._host), 2)]
        window_s = self._window[1] - self._window[0]
        series = {
            "data_wait": [r[1] - r[0] for r in rows],
            "h2d": [r[2] - r[1] for r in rows],
            "forward": [r[3] - r[2] for r in rows],
            "backward": [r[4] - r[3] for r in rows],
            "optimizer": [r[5] - r[4] for r in rows],
            "step": [e - s for s, e in zip([0.0, *begins[1:]], [*begins[1:], end])],
            "host_step": _step_series([h[0] for h in host], self._window[1]),
            "host_data_wait": [(h[1] - h[0]) * 1e3 for h in host],
            "device_busy": [r[5] - r[1] for r in rows],
        }
        ratio = end / (window_s * 1e3) if window_s > 0 else None
        return WindowTimes(series, window_s, device_window_ratio=ratio, clamps=(clamps,))
