"""The one timeline of a measured step: where the time between two switches of phase goes.

A workload's step (``perfgate.measure.loop``) and a user's script under the hooks
(``perfgate.measure.script_hooks``) tell the same timeline what happens: each *switch*
from one phase to another (``switch(old, new)``), and each *boundary* between two steps
(``boundary(old, new)``: the step ends while ``old`` runs, the next starts in ``new``; a
script's boundary keeps its phase, ``boundary(cur)``). ``open`` is the boundary that ends
warmup and starts the window, ``close`` the one after the window's last step: it returns
the per-step series. The time from one switch to the next belongs to the phase that ran in
between; :data:`IDLE` is what no phase covers (a workload's loop between two steps, what no
hook sees in a script): it goes to no phase, so it lands in the residual (step minus phases).

A workload's step switches in a fixed order, IDLE → data_wait → h2d → forward → backward →
optimizer, and ends with ``boundary(OPTIMIZER, IDLE)``: six calls per step. A script's
hooks switch in whatever order it runs, as often as it likes (several forward and backward
passes per optimizer step, a forward inside the optimizer's closure).

:class:`HostTimeline` (the CPU) reads ``perf_counter`` at every switch.
:class:`DeviceTimeline` (CUDA) records a CUDA event on the current stream at each switch
between device intervals, the host's time in the DataLoader beside them as
``host_data_wait``; nothing synchronises inside the window and the events are read after
the synchronisation that closes it. Wrappers add to any timeline: :class:`InjectingTimeline`
(``perfgate selftest``'s known delays) and, in a distributed repeat,
``perfgate.measure.ddp.CommTimeline``. The events, the stream and the synchronisation are
injectable, so the accounting is tested without a GPU.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from perfgate.model.workload import PHASES

DATA, H2D, FORWARD, BACKWARD, OPTIMIZER, IDLE = range(6)
"""The phases as indices (``PHASES`` order), and IDLE: time no phase covers."""
assert tuple(PHASES) == ("data_wait", "h2d", "forward", "backward", "optimizer")  # the indices above
PHASE_OF: tuple[str | None, ...] = (*PHASES, None)
"""Per index, the phase's name (None for IDLE)."""
INDEX_OF = {name: i for i, name in enumerate(PHASES)}

_ZEROS = (0.0,) * 6
_GAP = -1
"""A device interval that is in no phase (it lands in the residual)."""
_DEVICE_LABEL = (DATA, H2D, FORWARD, BACKWARD, OPTIMIZER, _GAP)
"""Per phase, the device interval it starts: each phase its own, IDLE a gap."""


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
    it (:func:`monotone_counted`), and the largest such raise in milliseconds. Event
    resolution gives raises of about half a microsecond; larger ones mean the stamps are not
    what the accounting assumes (see :data:`perfgate.model.result.CLAMP_NOTE_MS`)."""


class Timeline(Protocol):
    """What a step tells about its phases; :class:`HostTimeline` is the model."""

    timing: str

    def switch(self, old: int, new: int) -> None: ...
    def open(self, current: int) -> None: ...
    def boundary(self, current: int, after: int | None = None) -> None: ...
    def close(self) -> WindowTimes: ...


class TimingEvent(Protocol):
    def record(self, stream: Any = None) -> None: ...
    def elapsed_time(self, end: Any) -> float: ...


def step_series(starts: list[float], window_end: float) -> list[float]:
    """Start-to-start wall time in ms; the last step ends where the window ends."""
    ends = starts[1:] + [window_end]
    return [(e - s) * 1e3 for s, e in zip(starts, ends, strict=True)]


def monotone(stamps: list[float]) -> list[float]:
    """Event stamps on one stream, made non-decreasing.

    Events on one stream complete in the order they were recorded, so a stamp below the
    one before it is the events' resolution (about half a microsecond), not time running
    back: it is raised to the stamp before it. Every difference of consecutive stamps is
    then >= 0 and the differences of a span add up to the span exactly.
    """
    return monotone_counted(stamps)[0]


def monotone_counted(stamps: list[float]) -> tuple[list[float], tuple[int, float]]:
    """:func:`monotone`, with how many stamps it raised and the largest raise (ms), so a
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


class NoTimeline:
    """Every call does nothing: a step run outside any window (a counted or traced run's
    warmup), or the hooks in a forked child."""

    timing = "none"

    def switch(self, old: int, new: int) -> None:
        return None

    def open(self, current: int) -> None:
        return None

    def boundary(self, current: int, after: int | None = None) -> None:
        return None

    def close(self) -> WindowTimes:
        return WindowTimes({}, 0.0)


NO_TIMELINE = NoTimeline()


class HostTimeline:
    """CPU timing: every switch reads ``perf_counter``; the steps tile the window.

    ``switch`` and ``boundary`` are closures over the timeline's state, made once: a switch
    is one clock read, one addition and one store (no attribute lookups), which is what keeps
    the bookkeeping of a step within a few microseconds of a plain loop.
    """

    timing = "perf_counter"

    def __init__(self, steps: int, now: Callable[[], float] = time.perf_counter) -> None:
        self._steps = steps
        acc = [0.0] * 6
        flat: list[float] = []
        """The window's steps, six sums each (the five phases and IDLE), in one flat list:
        nothing per step for the garbage collector to track."""
        bounds: list[float] = []
        last = now()
        recording = False

        def switch(old: int, new: int) -> None:
            nonlocal last
            t = now()
            acc[old] += t - last
            last = t

        def boundary(current: int, after: int | None = None) -> None:
            """A step ended while ``current`` ran (the next starts in ``after``, by default
            the same phase); kept in the window."""
            nonlocal last
            t = now()
            acc[current] += t - last
            last = t
            if recording:
                flat.extend(acc)
                bounds.append(t)
            acc[:] = _ZEROS

        def open_(current: int) -> None:
            nonlocal last, recording
            t = now()
            acc[:] = _ZEROS
            last = t
            bounds[:] = [t]
            flat.clear()
            recording = True

        def stop() -> tuple[list[float], list[float]]:
            nonlocal recording
            recording = False
            return flat, bounds

        self.switch = switch
        self.boundary = boundary
        self._open = open_
        self._stop = stop

    def open(self, current: int) -> None:
        """The boundary that ends warmup: the window starts here."""
        self._open(current)

    def close(self) -> WindowTimes:
        """After the last measured step's boundary: the per-step series."""
        flat, bounds = self._stop()
        rows = [flat[i : i + 5] for i in range(0, len(flat), 6)]
        if len(rows) != self._steps:
            raise RuntimeError(f"expected {self._steps} steps in the window, got {len(rows)}")
        series = {name: [row[i] * 1e3 for row in rows] for i, name in enumerate(PHASES)}
        series["step"] = [(e - s) * 1e3 for s, e in zip(bounds, bounds[1:], strict=False)]
        return WindowTimes(series, bounds[-1] - bounds[0])


class DeviceTimeline:
    """CUDA timing: CUDA events for the step and every phase, the host clock beside them.

    At each switch between two device intervals (``data_wait``, ``h2d``, ``forward``,
    ``backward``, ``optimizer``, and the gap of what no phase covers) one event is recorded
    on the stream current when the window opened, labelled with the phase that starts
    there; each boundary records one more. An event completes when the stream reaches it,
    so each interval between consecutive events is device time of its label, and step *k*
    runs from boundary *k* to boundary *k + 1* (boundary 0 is the origin recorded when the
    window opens, after a synchronisation that ends warmup): the steps tile the window on
    the device. When the host runs ahead of the device (few launches per step: CUDA graphs,
    ``torch.compile``), the host's boundary-to-boundary times measure the launches and the
    backlog is the host's wait in the closing synchronisation; the device steps hold it. A stall waiting for step *k*'s
    batch is booked on step *k*, the step it delays.

    ``data_wait`` is the *exposed* data wait: the device time from the event recorded as
    the host enters the DataLoader's ``next`` to the one recorded as it leaves, the time
    the device sat waiting for the batch once it had finished the work queued before (about
    0 when the wait is hidden behind queued GPU work). The host's time inside ``next`` is
    kept as ``host_data_wait`` (the two host reads bracket ``next`` inside the events around
    it), its boundary-to-boundary times as ``host_step``, and each step's sum of ``h2d``,
    ``forward``, ``backward`` and ``optimizer`` as ``device_busy``. The phases are disjoint
    intervals of the step, and a stamp below the one before it (event resolution) is raised
    to it (:func:`monotone_counted`, counted per window), so the residual is never negative
    and no share of a step exceeds 100%.

    The events are made before the window, as many as the last step before it switched
    times the steps plus a margin; more are made in the window only when a step switched
    more often.
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
        self._last_step_changes = 0
        self._window = (0.0, 0.0)

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
        per_step = max(self._changes, self._last_step_changes)  # the switches of the last step before
        self._stream = self._current_stream()
        self._pool = [self._factory() for _ in range((per_step + 2) * self._steps + 8)]
        self._synchronize()  # ends what came before, the events' making (each recorded once) included
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

    def boundary(self, current: int, after: int | None = None) -> None:
        if after is None:
            after = current
        elif current == DATA:
            self._data_acc += self._now() - self._data_start
        if self._recording:
            self._record(_DEVICE_LABEL[after])
            self._bound_index.append(len(self._events) - 1)
            self._host_bounds.append(self._now())
            self._data_rows.append(self._data_acc)
            self._data_acc = 0.0
        if after == DATA:
            self._data_start = self._now()
        self._last_step_changes = self._changes
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
        stamps, clamps = monotone_counted([0.0] + [origin.elapsed_time(e) for e in self._events[1:]])
        labels = self._labels
        rows = []
        for start, end in zip(bounds, bounds[1:], strict=False):
            acc = [0.0] * 5
            for i in range(start, end):
                label = labels[i]
                if label != _GAP:
                    acc[label] += stamps[i + 1] - stamps[i]
            rows.append(acc)
        window_s = self._window[1] - self._window[0]
        series = {name: [r[i] for r in rows] for i, name in enumerate(PHASES)}
        series["step"] = [stamps[e] - stamps[s] for s, e in zip(bounds, bounds[1:], strict=False)]
        series["host_step"] = step_series(self._host_bounds[:-1], self._host_bounds[-1])
        series["host_data_wait"] = [seconds * 1e3 for seconds in self._data_rows]
        series["device_busy"] = [sum(r[1:]) for r in rows]
        device_ms = stamps[bounds[-1]]
        ratio = device_ms / (window_s * 1e3) if window_s > 0 else None
        return WindowTimes(series, window_s, device_window_ratio=ratio, clamps=(clamps,))


class InjectingTimeline:
    """A timeline that lengthens named phases by a fixed delay (``perfgate selftest``).

    Each delay runs just before the switch (or boundary) that first leaves its phase in a
    step, so it falls inside that phase's interval and nowhere else, once per step: a
    workload leaves each phase once, a script may leave one several times (``zero_grad``
    and ``optimizer.step`` are two optimizer intervals; gradient accumulation runs forward
    several times) and still gets the delay once. Only ever used when an injection was
    asked for: a normal repeat measures with the bare timeline, so the injection costs it
    nothing.
    """

    def __init__(self, timeline: Timeline, delays: Mapping[str, Callable[[], None]]) -> None:
        unknown = set(delays) - set(INDEX_OF)
        if unknown:
            raise ValueError(f"cannot inject into {sorted(unknown)}; phases: {', '.join(PHASES)}")
        self.timing = timeline.timing
        self._inner = timeline
        by_index: list[Callable[[], None] | None] = [None] * 6
        for phase, delay in delays.items():
            by_index[INDEX_OF[phase]] = delay
        inner_switch, inner_boundary = timeline.switch, timeline.boundary
        done = [False] * 6
        """Per phase, whether this step's delay ran."""

        def switch(old: int, new: int) -> None:
            delay = by_index[old]
            if delay is not None and new != old and not done[old]:
                done[old] = True
                delay()
            inner_switch(old, new)

        def boundary(current: int, after: int | None = None) -> None:
            delay = by_index[current]
            if delay is not None and after is not None and after != current and not done[current]:
                delay()
            done[:] = [False] * 6
            inner_boundary(current, after)

        self.switch = switch
        self.boundary = boundary
        self._done = done

    def open(self, current: int) -> None:
        """The window's first step starts here: no delay has run in it yet."""
        self._done[:] = [False] * 6
        self._inner.open(current)

    def close(self) -> WindowTimes:
        return self._inner.close()
