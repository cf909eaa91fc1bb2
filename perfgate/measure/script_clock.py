"""The timelines of a script run: where the time between the hooks' marks goes.

A workload's step calls six marks in a fixed order (``perfgate.measure.clock``). A script
calls what it calls, in its own order and as often as it likes (several forward and
backward passes per optimizer step, a forward inside the optimizer's closure), so the
hooks (``perfgate.measure.script_hooks``) tell a timeline each *switch* from one phase to
another, and each *boundary* between two steps; the time from one switch to the next
belongs to the phase that ran in between. :data:`IDLE` is what no hook sees: it goes to
no phase, so it lands in the residual (step minus phases).

:class:`HostTimeline` (the CPU) reads ``perf_counter`` at every switch, like
``HostClock``. :class:`DeviceTimeline` (CUDA) does what ``DeviceClock`` does: every
phase (the data wait too, as the device saw it) and the step with CUDA events recorded on
the current stream at each switch between device intervals, the host's time in the
DataLoader beside them as ``host_data_wait``, nothing synchronising inside the window, the
events read after the synchronisation that closes it. The events, the stream and the
synchronisation are injectable, so the accounting is tested without a GPU.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from perfgate.measure.clock import TimingEvent, WindowTimes, _monotone_counted, _step_series
from perfgate.model.workload import PHASES

DATA, H2D, FORWARD, BACKWARD, OPTIMIZER, IDLE = range(6)
"""The phases as indices (``PHASES`` order), and IDLE: time no hook sees."""
assert tuple(PHASES) == ("data_wait", "h2d", "forward", "backward", "optimizer")  # the indices above

_ZEROS = (0.0,) * 6
_GAP = -1
"""A device interval that is in no phase: what no hook sees (it lands in the residual)."""
_DEVICE_LABEL = (DATA, H2D, FORWARD, BACKWARD, OPTIMIZER, _GAP)
"""Per phase, the device interval it starts: each phase its own, IDLE a gap."""


class HostTimeline:
    """CPU timing: every switch reads ``perf_counter``; the steps tile the window."""

    timing = "perf_counter"

    def __init__(self, steps: int, now: Callable[[], float] = time.perf_counter) -> None:
        self._steps = steps
        self._now = now
        self._acc = [0.0] * 6
        self._last = now()
        self._flat: list[float] = []
        """The window's steps, six sums each (the five phases and IDLE), in one flat list: nothing
        per step for the garbage collector to track."""
        self._bounds: list[float] = []
        self._recording = False

    def switch(self, old: int, new: int) -> None:
        now = self._now()
        self._acc[old] += now - self._last
        self._last = now

    def open(self, current: int) -> None:
        """The boundary that ends warmup: the window starts here."""
        now = self._now()
        self._acc[:] = _ZEROS
        self._last = now
        self._bounds = [now]
        self._flat = []
        self._recording = True

    def boundary(self, current: int) -> None:
        """A step ended (``current``: the phase running at the boundary); kept in the window."""
        now = self._now()
        acc = self._acc
        acc[current] += now - self._last
        self._last = now
        if self._recording:
            self._flat.extend(acc)
            self._bounds.append(now)
        acc[:] = _ZEROS

    def close(self) -> WindowTimes:
        """After the last measured step's boundary: the per-step series."""
        self._recording = False
        flat, bounds = self._flat, self._bounds
        rows = [flat[i : i + 5] for i in range(0, len(flat), 6)]
        if len(rows) != self._steps:
            raise RuntimeError(f"expected {self._steps} steps in the window, got {len(rows)}")
        series = {name: [row[i] * 1e3 for row in rows] for i, name in enumerate(PHASES)}
        series["step"] = [(e - s) * 1e3 for s, e in zip(bounds, bounds[1:])]
        return WindowTimes(series, bounds[-1] - bounds[0])


class DeviceTimeline:
    """CUDA timing: CUDA events for the step and every phase, the host clock beside them.

    At each switch between two device intervals (``data_wait``, ``h2d``, ``forward``,
    ``backward``, ``optimizer``, and the gap of what no hook sees) one event is recorded on
    the stream current when the window opened, labelled with the phase that starts there;
    each boundary records one more. An event completes when the stream reaches it, so each
    interval between consecutive events is device time of its label, and step *k* runs
    from boundary *k* to boundary *k + 1* (boundary 0 is the origin recorded when the
    window opens, after a synchronisation that ends warmup): a step's device span starts
    at the step boundary, and the data wait of its own batches is in it.

    ``data_wait`` is the *exposed* data wait: the device time from the event recorded as
    the host enters the DataLoader's ``next`` to the one recorded as it leaves, the time
    the device sat waiting for the batch once it had finished the work queued before (about
    0 when the wait is hidden behind queued GPU work). The host's time inside ``next`` is
    kept as ``host_data_wait``, its boundary-to-boundary times as ``host_step``, and each
    step's sum of ``h2d``, ``forward``, ``backward`` and ``optimizer`` as ``device_busy``.
    The phases are disjoint intervals of the step, and a stamp below the one before it
    (event resolution) is raised to it, so the residual is never negative and no share
    of a step exceeds 100%.

    The events are made before the window, as many as warmup's last step switched times
    the steps plus a margin; more are made in the window only when a step switched more
    often.
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
        self._factory = event_factory
        self._synchronize = synchronize
        self._current_stream = current_stream
        self._now = now
        self._recording = False
        self._stream: Any = None
        self._pool: list[TimingEvent] = []
        self._events: list[TimingEvent] = []
        self._labels: list[int] = []
        self._bound_index: list[int] = []
        self._host_bounds: list[float] = []
        self._data_rows: list[float] = []
        self._data_acc = 0.0
        self._data_start = 0.0
        self._changes = 0
        self._window = (0.0, 0.0)
        self._closed = False

    def _record(self, label: int) -> None:
        pool = self._pool
        event = pool.pop() if pool else self._factory()
        event.record(self._stream)
        self._events.append(event)
        self._labels.append(label)

    def switch(self, old: int, new: int) -> None:
        # The host's reads bracket the DataLoader's ``next`` inside the events around it.
        if old == DATA:
            self._data_acc += self._now() - self._data_start
        label = _DEVICE_LABEL[new]
        if label != _DEVICE_LABEL[old]:
            self._changes += 1
            if self._recording:
                self._record(label)
        if new == DATA:
            self._data_start = self._now()

    def open(self, current: int) -> None:
        """The boundary that ends warmup: synchronise, make the events, record the origin."""
        per_step = self._changes  # the switches of warmup's last step
        self._synchronize()
        self._stream = self._current_stream()
        self._pool = [self._factory() for _ in range((per_step + 2) * self._steps + 8)]
        self._synchronize()  # the events made (and recorded once) before the window
        self._events, self._labels = [], []
        self._record(_DEVICE_LABEL[current])
        self._bound_index = [0]
        now = self._now()
        self._host_bounds = [now]
        self._window = (now, 0.0)
        self._data_rows = []
        self._data_acc = 0.0
        self._data_start = now
        self._recording = True

    def boundary(self, current: int) -> None:
        if self._recording:
            self._record(_DEVICE_LABEL[current])
            self._bound_index.append(len(self._events) - 1)
            self._host_bounds.append(self._now())
            self._data_rows.append(self._data_acc)
            self._data_acc = 0.0
        self._changes = 0

    def close(self) -> WindowTimes:
        """After the last measured step's boundary: synchronise, then read the events."""
        self._synchronize()
        self._recording = False
        self._window = (self._window[0], self._now())
        bounds = self._bound_index
        if len(bounds) != self._steps + 1:
            raise RuntimeError(f"expected {self._steps} steps in the window, got {len(bounds) - 1}")
        origin = self._events[0]
        stamps, clamps = _monotone_counted([0.0] + [origin.elapsed_time(e) for e in self._events[1:]])
        labels = self._labels
        rows = []
        for start, end in zip(bounds, bounds[1:]):
            acc = [0.0] * 5
            for i in range(start, end):
                label = labels[i]
                if label != _GAP:
                    acc[label] += stamps[i + 1] - stamps[i]
            rows.append(acc)
        window_s = self._window[1] - self._window[0]
        series = {
            "data_wait": [r[DATA] for r in rows],
            "h2d": [r[H2D] for r in rows],
            "forward": [r[FORWARD] for r in rows],
            "backward": [r[BACKWARD] for r in rows],
            "optimizer": [r[OPTIMIZER] for r in rows],
            "step": [stamps[e] - stamps[s] for s, e in zip(bounds, bounds[1:])],
            "host_step": _step_series(self._host_bounds[:-1], self._host_bounds[-1]),
            "host_data_wait": [seconds * 1e3 for seconds in self._data_rows],
            "device_busy": [sum(r[1:]) for r in rows],
        }
        device_ms = stamps[bounds[-1]]
        ratio = device_ms / (window_s * 1e3) if window_s > 0 else None
        return WindowTimes(series, window_s, device_window_ratio=ratio, clamps=(clamps,))
