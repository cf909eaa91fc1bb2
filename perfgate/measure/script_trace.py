"""A traced run of a script: the unmodified training script under ``torch.profiler``.

The script runs as it does for a repeat (:func:`perfgate.measure.script_run.run_under_hooks`:
``__main__``, its own arguments, the hooks of :mod:`perfgate.measure.script_hooks`), but
the hooks tell :class:`ProfiledTimeline` instead of a clock: when warmup's last optimizer
step ends it starts the profiler, each switch of phase moves a ``record_function`` range
named after the phase (none in what no hook sees), each step boundary is a profiler
step, and after the schedule's steps (``(wait + warmup + active) * repeat``) it stops the
profiler and the hooks stop the script. The artifacts are a workload trace's
(:func:`perfgate.measure.trace.traced_run`): ``trace-N.json``, ``operators.json`` and
``operators.md`` in ``<artifacts>/<name>/``.

Where a phase range opens is where torch calls the hooks: the optimizer's inside torch's
own ``Optimizer.step#...`` range (the pre-hook runs in it), a closure's forward and
backward there too; :func:`perfgate.measure.trace.lift_phase_ranges` shows them to the
attribution as children of their profiler step. One phase may have several ranges in a
step (``zero_grad`` and ``step`` are both the optimizer's, gradient accumulation repeats
forward and backward): :class:`StepsOfRanges` sums them per step, so that a phase's
``ranges`` and per-step series count steps, as a workload's do.

A script that stops before the schedule's steps, or raises, is the one-line error of a
repeat (:func:`perfgate.measure.script_run._why_unmeasured`); a profiler that fails is a
TraceError. Either way the profiler and the ranges are closed and nothing half-written
stays behind.

:func:`perfgate.measure.trace.trace_job` runs a script job's traced run in a fresh
``python -m perfgate.measure.script_trace REQUEST RESPONSE`` (:func:`main`), which checks
that the file is still the one the job hashed, then calls :func:`trace_script`.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from perfgate.measure.child import flush_output, serve
from perfgate.measure.timeline import PHASE_OF as _RANGE_OF
from perfgate.measure.timeline import WindowTimes
from perfgate.measure.loop import apply_torch_settings
from perfgate.measure.script_hooks import ScriptHooks, ScriptStop
from perfgate.measure.script_run import _why_unmeasured, run_under_hooks, untrusted
from perfgate.measure.script_worker import _argv0, checked_script
from perfgate.measure.trace import (
    DEFAULT_ROW_LIMIT,
    STEP_RANGE,
    PhaseRanges,
    Profiling,
    lift_phase_ranges,
    profile_host_events,
    traced_run,
)
from perfgate.model.errors import WorkloadError
from perfgate.model.script import Script
from perfgate.model.trace import PhaseOperators, TraceSchedule
from perfgate.model.workload import PHASES, Params, check_device_params
from perfgate.store.traces import TraceResult



class StepsOfRanges:
    """A script's ``host_events``: each cycle's events, its phase ranges lifted, and the
    profiler step each phase range lies in, remembered for :meth:`by_step`.

    A script may enter one phase several times in a step (``zero_grad`` and ``step`` are
    both the optimizer's; gradient accumulation repeats forward and backward), so its
    phases have more ranges than steps; a table counts steps, and its per-step series are
    per step (what the reports divide by, and what they show).
    """

    def __init__(self, events: Callable[[Any], list[Any]] = profile_host_events) -> None:
        self._events = events
        self._cycles = 0
        self.steps: dict[str, list[tuple[int, int]]] = {p: [] for p in PHASES}
        """Per phase, the (cycle, step) of each of its ranges, in the attribution's order (their start)."""

    def __call__(self, prof: Any) -> list[Any]:
        events = lift_phase_ranges(self._events(prof))
        self._cycles += 1
        bounds: dict[tuple[int, int], list[tuple[float, float]]] = {}
        for e in events:
            if e.name.startswith(STEP_RANGE):
                bounds.setdefault((e.thread, e.node_id), []).append((e.time_range.start, e.time_range.end))
        for spans in bounds.values():
            spans.sort()
        ranges = [e for e in events if e.name in self.steps
                  and (e.cpu_parent is None or e.cpu_parent.name.startswith(STEP_RANGE))]
        for e in sorted(ranges, key=lambda e: e.time_range.start):
            spans = bounds.get((e.thread, e.node_id), [])
            start = e.time_range.start
            i = bisect.bisect_right(spans, (start, float("inf"))) - 1
            inside = i >= 0 and start < spans[i][1]
            # A range in no step (none is) stays a step of its own.
            self.steps[e.name].append((self._cycles, i if inside else -1 - len(self.steps[e.name])))
        return events

    def by_step(self, phases: dict[str, PhaseOperators]) -> dict[str, PhaseOperators]:
        """``phases`` with their ranges counted, and their per-step series summed, by step."""
        out = {}
        for name, phase in phases.items():
            keys = self.steps.get(name, [])
            if len(keys) != len(phase.wall_us_per_step) or len(set(keys)) == len(keys):
                out[name] = phase
                continue
            wall: dict[tuple[int, int], float] = {}
            ops: dict[tuple[int, int], float] = {}
            for key, w in zip(keys, phase.wall_us_per_step, strict=True):
                wall[key] = wall.get(key, 0.0) + w
            # the operators' series may be absent (empty); then it stays so, the wall series summed alone
            if len(phase.operator_self_cpu_us_per_step) == len(keys):
                for key, o in zip(keys, phase.operator_self_cpu_us_per_step, strict=True):
                    ops[key] = ops.get(key, 0.0) + o
            out[name] = dataclasses.replace(
                phase, ranges=len(wall), wall_us_per_step=tuple(round(v, 3) for v in wall.values()),
                operator_self_cpu_us_per_step=tuple(round(v, 3) for v in ops.values()))
        return out


class ProfiledTimeline:
    """A script's timeline that profiles instead of timing (the interface of
    :class:`~perfgate.measure.timeline.HostTimeline`).

    ``open`` (warmup is over) enters the profiler and the range of the phase running then;
    ``switch`` moves the range to the new phase; ``boundary`` closes the range, synchronises
    the device after a cycle's last step, steps the profiler and reopens the range; ``close``
    (the last step's boundary) stops both. A failure of the profiler stops the script
    (:class:`ScriptStop`, the hooks told to stop) and is kept in :attr:`error`.
    """

    timing = "profiler"

    def __init__(self, profiling: Profiling) -> None:
        self._profiling = profiling
        self._prof: Any = None
        self._ranges: PhaseRanges | None = None
        self._steps = 0
        self.completed = False
        """The profiler ran every step of the schedule and stopped."""
        self.error: BaseException | None = None
        """What failed in the profiler or a range (the script was stopped)."""
        self.hooks: ScriptHooks | None = None
        """The hooks that call this timeline: told to stop the script when the profiler fails."""

    def _failed(self, exc: BaseException) -> ScriptStop:
        self.error = exc
        if self.hooks is not None:
            self.hooks.stopping = True
        with contextlib.suppress(Exception):  # the first failure is the one to report
            self.stop()
        return ScriptStop("the profiler failed")

    def switch(self, old: int, new: int) -> None:
        ranges = self._ranges
        if ranges is not None:
            try:
                ranges.enter(_RANGE_OF[new])
            except Exception as exc:  # noqa: BLE001 - the profiler's failure, not the script's
                raise self._failed(exc) from None

    def open(self, current: int) -> None:
        try:
            self._profiling.sync()
            prof = self._profiling.profile()
            prof.__enter__()
            self._prof = prof
            self._ranges = self._profiling.ranges()
            self._ranges.enter(_RANGE_OF[current])
        except Exception as exc:  # noqa: BLE001
            raise self._failed(exc) from None

    def boundary(self, current: int, after: int | None = None) -> None:
        ranges, prof = self._ranges, self._prof
        if ranges is None or prof is None:  # a warmup step's end
            return
        try:
            ranges.close()  # a phase range never spans two profiler steps
            self._steps += 1
            if self._steps % self._profiling.cycle == 0:
                # The edge of a cycle: let the device finish so the trace holds every kernel.
                self._profiling.sync()
            prof.step()
            ranges.enter(_RANGE_OF[current])
        except Exception as exc:  # noqa: BLE001
            raise self._failed(exc) from None

    def close(self) -> WindowTimes:
        """After the last traced step's boundary: stop the ranges and the profiler (no times)."""
        self.completed = True
        try:
            self.stop()
        except Exception as exc:  # noqa: BLE001
            self.completed = False
            raise self._failed(exc) from None
        return WindowTimes({}, 0.0)

    def stop(self) -> None:
        """Close the range and the profiler if they are open; a second call does nothing.

        Before the schedule's end the profiler is stopped without collecting the cycle it
        was in (its trace would be cleared anyway).
        """
        ranges, prof = self._ranges, self._prof
        self._ranges = self._prof = None
        try:
            if ranges is not None:
                ranges.close()
        finally:
            if prof is not None:
                if not self.completed:
                    prof.on_trace_ready = None
                prof.__exit__(None, None, None)


TRACE_COUNTS = "--warmup or the profiler's schedule (--profile-wait/--profile-warmup/--profile-active)"
"""The options that set a traced script's steps: its warmup, then the schedule's steps."""


def trace_script(
    script: Script,
    params: Params,
    device: str,
    artifacts_dir: Path,
    *,
    name: str,
    schedule: TraceSchedule = TraceSchedule(),
    row_limit: int = DEFAULT_ROW_LIMIT,
    record_shapes: bool = False,
    argv0: str | None = None,
) -> TraceResult:
    """Trace ``script`` here into ``<artifacts>/<name>``; raises WorkloadError (the script:
    one line, as a repeat's) or TraceError (the profiler, the artifacts).

    ``params`` are the script job's: ``warmup_steps`` optimizer steps run unprofiled, then
    the schedule's steps under the profiler; the seed and torch switches are set as for a
    repeat. The table records the parameters with ``steps`` as the schedule's.
    """
    check_device_params(params, device, workload=name)
    shown = untrusted(script.shown)
    run_params = dataclasses.replace(params, steps=schedule.steps)

    def run(profiling: Profiling) -> None:
        apply_torch_settings(params, device)
        line = ProfiledTimeline(profiling)
        hooks = ScriptHooks(line, warmup_steps=params.warmup_steps, steps=schedule.steps,
                            device_type=device)
        line.hooks = hooks
        try:
            ending = run_under_hooks(hooks, script.path, script.args, argv0 or script.shown)
        except BaseException:
            with contextlib.suppress(Exception):
                line.stop()
            raise
        stopping: Exception | None = None
        try:
            line.stop()  # a script that ended early left the profiler running
        except Exception as exc:  # noqa: BLE001 - reported after what the script did
            stopping = exc
        if line.error is not None:
            raise line.error
        if hooks.failure is not None:
            raise WorkloadError(f"{name}: {shown}: {hooks.failure}")
        if not hooks.done or not line.completed:
            raise WorkloadError(f"{name}: {_why_unmeasured(hooks, ending, shown, counts=TRACE_COUNTS)}")
        if stopping is not None:
            raise stopping

    steps = StepsOfRanges()
    return traced_run(name, device, artifacts_dir, run, run_params=run_params, warmup_steps=params.warmup_steps,
                      schedule=schedule, row_limit=row_limit, record_shapes=record_shapes, host_events=steps,
                      by_step=steps.by_step)


def requested_script(request: Mapping[str, Any]) -> tuple[Script, str]:
    """The script of a trace request, and its ``sys.argv[0]``; a WorkloadError when the file
    cannot be read or is no longer the one the run began with (its sha256)."""
    script = checked_script(request, "traced")
    return script, _argv0(script)


# --- the child of a script's traced run ----------------------------------------------------

_MODULE = "perfgate.measure.script_trace"


def _child(request: dict[str, Any]) -> dict[str, Any]:
    script, argv0 = requested_script(request)
    result = trace_script(
        script,
        Params.from_dict(request["params"]),
        request["device"],
        Path(request["artifacts_dir"]),
        name=request["workload"],
        schedule=TraceSchedule.from_dict(request["schedule"]),
        row_limit=request["row_limit"],
        record_shapes=request["record_shapes"],
        argv0=argv0,
    )
    return {"ok": True, "directory": str(result.directory)}


def main(argv: list[str]) -> int:
    """``python -m perfgate.measure.script_trace REQUEST RESPONSE``: the request of
    :func:`perfgate.measure.trace.trace_job` for a script job (the job's, with ``script``)."""
    return serve(argv, _MODULE, _child)


if __name__ == "__main__":
    code = main(sys.argv[1:])
    flush_output()
    os._exit(code)  # as a script's repeat ends: threads or exit handlers the script left cannot hold it
