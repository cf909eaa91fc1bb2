"""A traced run: a short, separate run of a workload under ``torch.profiler``.

The measured repeats explain *how much* slower a step got and in which phase; a trace
explains *why*. It is a run of its own (the seeds' rule: profile separately from
measuring): the workload is built with the same seed and torch settings as a repeat, its
warmup steps run unprofiled, then a profiler schedule (idle, warmup and active steps)
runs the very same training step (``loop._Step``) with each phase of the step inside a
``record_function`` range named after the phase. It writes into
``<artifacts>/<workload>/``:

- ``trace-N.json``: one Chrome trace per profiler cycle (Perfetto, chrome://tracing);
- ``operators.json``: per phase, the top operators by self CPU time and, on CUDA, by
  the device time of the kernels they launched (``perfgate.model.trace.OperatorTable``);
- ``operators.md``: the same as small markdown tables.

Nothing here writes results: the profiler costs 10-30% and a traced step is never a
measurement. :func:`trace_workload` runs in this process; :func:`trace_job` runs it in a
fresh one (``python -m perfgate.measure.trace REQUEST RESPONSE``), like a repeat, and
returns failures as values so a gate that asks for a trace after failing keeps its verdict.
A script job (``perfgate trace --script``) is traced the same way by
:func:`perfgate.measure.script_trace.trace_script`, the unmodified script with its phases
marked by the hooks, in a child of that module (as the runner starts
``perfgate.measure.script_worker`` for a script's repeat). What every traced run shares (the profiler as configured here, the
checks and the artifacts, the clean-up on failure) is :func:`traced_run`.

Each profiler cycle's host events are summed per phase by
:class:`perfgate.analysis.attribution.PhaseAttribution`, which says how. The phase marks
(:class:`PhaseMarks`, :class:`PhaseRanges`) are here; the counted run uses them too.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from perfgate.analysis.attribution import PhaseAttribution
from perfgate.measure.child import serve
from perfgate.measure.separate_run import (
    ask_child,
    build_workload,
    job_outcome,
    job_request,
    requested_job,
    training_step,
)
from perfgate.model.errors import PerfgateError, UsageError
from perfgate.model.job import Job
from perfgate.model.trace import (
    OPERATORS_JSON,
    OPERATORS_MD,
    TRACE_GLOB,
    OperatorTable,
    PhaseOperators,
    TraceError,
    TraceSchedule,
)
from perfgate.measure.timeline import NO_TIMELINE, PHASE_OF, WindowTimes
from perfgate.model.version import __version__
from perfgate.model.workload import PHASES, Params, Workload
from perfgate.store.traces import TraceOutcome, TraceResult, render_operator_table, save_operator_table

DEFAULT_ROW_LIMIT = 15
_MODULE = "perfgate.measure.trace"
_SCRIPT_MODULE = "perfgate.measure.script_trace"
"""The child of a script job's traced run (it runs the script: :mod:`perfgate.measure.script_trace`)."""
STEP_RANGE = "ProfilerStep"
"""How the profiler names the range of each step (``ProfilerStep#N``)."""


# --- the artifacts directory -----------------------------------------------------------


def _writable(directory: Path, then: Callable[[], None] = lambda: None) -> Path:
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".perfgate-write-check-", dir=directory)
        os.close(fd)
        os.unlink(probe)
        then()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        where = f" ({exc.filename})" if exc.filename and str(exc.filename) != str(directory) else ""
        raise TraceError(f"cannot write trace artifacts to {directory}: {reason}{where}") from None
    return directory


def check_trace_dir(artifacts_dir: Path) -> Path:
    """Create ``artifacts_dir`` if needed and check it is writable; touches no trace in it.

    For a command to fail fast (before measuring) on a bad ``--trace-dir``. Raises
    :class:`TraceError` (exit code 2) with one line naming the directory.
    """
    return _writable(Path(artifacts_dir))


def prepare_trace_dir(artifacts_dir: Path, workload: str) -> Path:
    """Create ``<artifacts>/<workload>``, check it is writable, remove a previous trace's files.

    Raises :class:`TraceError` (exit code 2) with one line naming the directory.
    """
    directory = Path(artifacts_dir) / workload
    # Stale files of an earlier trace must not pass for this one's.
    return _writable(directory, lambda: _clear_strict(directory))


def _remove(paths: Iterable[Path]) -> None:
    for path in paths:
        try:
            path.unlink(missing_ok=True)
        except OSError:
            pass


def _leftovers(directory: Path) -> list[Path]:
    """A trace's files in ``directory``, temporary ones included."""
    return [*directory.glob(TRACE_GLOB), directory / OPERATORS_MD, directory / OPERATORS_JSON,
            *directory.glob(".trace-*.tmp"), *directory.glob(f".{OPERATORS_MD}.tmp"),
            *directory.glob(f".{OPERATORS_JSON}.*.tmp")]


def _clear(directory: Path) -> None:
    """Remove whatever an unfinished trace left in ``directory`` (best effort)."""
    _remove(_leftovers(directory))


def _clear_strict(directory: Path) -> None:
    for path in _leftovers(directory):
        path.unlink(missing_ok=True)


# --- the traced run, in this process ---------------------------------------------------


class PhaseMarks:
    """A timeline (``perfgate.measure.timeline``) that only says which phase runs: each switch
    and boundary is "enter this phase" (None: IDLE, no phase); nothing is timed.

    A subclass says what entering a phase does: the traced run opens a profiler range, the
    counted run attributes its counts.
    """

    timing = "marks"

    def enter(self, phase: str | None) -> None:
        raise NotImplementedError

    def switch(self, old: int, new: int) -> None:
        self.enter(PHASE_OF[new])

    def boundary(self, current: int, after: int | None = None) -> None:
        if after is not None and after != current:
            self.enter(PHASE_OF[after])

    def open(self, current: int) -> None:
        return None

    def close(self) -> WindowTimes:
        self.enter(None)
        return WindowTimes({}, 0.0)


class PhaseRanges(PhaseMarks):
    """Phase marks that open and close one ``record_function`` range per phase."""

    timing = "profiler"

    def __init__(self, record_function: Callable[[str], Any]) -> None:
        self._record_function = record_function
        self._open: Any = None

    def enter(self, phase: str | None) -> None:
        if self._open is not None:
            self._open.__exit__(None, None, None)
            self._open = None
        if phase is not None:
            scope = self._record_function(phase)
            scope.__enter__()
            self._open = scope


class _Collector:
    """``on_trace_ready``: write the cycle's Chrome trace and attribute its events."""

    def __init__(self, directory: Path, attribution: PhaseAttribution, host_events: Callable[[Any], list[Any]]) -> None:
        self.directory = directory
        self.attribution = attribution
        self.host_events = host_events
        self.traces: list[Path] = []
        self.ranges = 0

    def __call__(self, prof: Any) -> None:
        path = self.directory / f"trace-{len(self.traces) + 1}.json"
        tmp = path.with_name(f".{path.name}.tmp")
        self.traces.append(path)
        try:
            prof.export_chrome_trace(str(tmp))
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        self.ranges += self.attribution.add(self.host_events(prof))


def profile_host_events(prof: Any) -> list[Any]:
    """The profile's host events: on the CPU and synchronous (what the attribution reads)."""
    from torch.autograd import DeviceType

    return [e for e in prof.events() if e.device_type == DeviceType.CPU and not e.is_async]


class _Lifted:
    """A phase range seen as a child of its profiler step (its parent hidden, all else its own)."""

    cpu_parent = None

    def __init__(self, event: Any) -> None:
        self._event = event

    def __getattr__(self, name: str) -> Any:
        return getattr(self._event, name)


def lift_phase_ranges(events: Iterable[Any], phases: Iterable[str] = PHASES) -> list[Any]:
    """``events`` with each outermost phase range lifted to the top of its step.

    The attribution takes a phase range for a child of ``ProfilerStep#N``, as a workload's
    loop opens it. A script's hooks open theirs where torch calls them: the optimizer's
    range inside torch's own ``Optimizer.step#...`` range (the step's pre-hook runs in
    it), a closure's forward and backward too. A range named after a phase with no
    phase-named range above it is one of the run's own; it is lifted (seen without its
    parent), one below another stays an operator row of that phase.
    """
    names = set(phases)
    out = []
    for event in events:
        if event.name in names and event.cpu_parent is not None:
            above = event.cpu_parent
            while above is not None and above.name not in names:
                above = above.cpu_parent
            if above is None and not event.cpu_parent.name.startswith(STEP_RANGE):
                event = _Lifted(event)
        out.append(event)
    return out


class Profiling:
    """What a traced run profiles with: ``torch.profiler`` as it is configured for every traced
    run (the activities, the schedule, the collector as ``on_trace_ready``), the phase ranges
    and the synchronisation at the edge of a cycle. Made inside :func:`traced_run`."""

    def __init__(self, directory: Path, device: str, schedule: TraceSchedule, record_shapes: bool,
                 host_events: Callable[[Any], list[Any]]) -> None:
        import torch

        self.device = device
        self.schedule = schedule
        self.record_shapes = record_shapes
        self.cuda = device == "cuda"
        self.sync: Callable[[], None] = torch.cuda.synchronize if self.cuda else (lambda: None)
        self.attribution = PhaseAttribution()
        self.collector = _Collector(directory, self.attribution, host_events)
        self.cycle = schedule.wait + schedule.warmup + schedule.active
        """Steps per profiler cycle: the device is synchronised after each cycle's last."""

    def profile(self) -> Any:
        """A ``torch.profiler.profile`` for the schedule, not yet entered."""
        from torch.profiler import ProfilerActivity, profile
        from torch.profiler import schedule as profiler_schedule

        s = self.schedule
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
        return profile(
            activities=activities,
            schedule=profiler_schedule(wait=s.wait, warmup=s.warmup, active=s.active, repeat=s.repeat),
            on_trace_ready=self.collector,
            record_shapes=self.record_shapes,
        )

    def ranges(self) -> PhaseRanges:
        from torch.profiler import record_function

        return PhaseRanges(record_function)


def traced_run(
    name: str,
    device: str,
    artifacts_dir: Path,
    run: Callable[[Profiling], None],
    *,
    run_params: Params,
    warmup_steps: int,
    schedule: TraceSchedule,
    row_limit: int,
    host_events: Callable[[Any], list[Any]] = profile_host_events,
    by_step: Callable[[dict[str, PhaseOperators]], dict[str, PhaseOperators]] = lambda phases: phases,
    record_shapes: bool = False,
) -> TraceResult:
    """One traced run into ``<artifacts>/<name>``: ``run`` runs the steps under a
    :class:`Profiling`'s profiler, this writes the artifacts: the traces (as each cycle
    ends), ``operators.md``, then ``operators.json``. Whatever fails, nothing half-written
    stays behind; a PerfgateError (or KeyboardInterrupt) is raised as it is, anything else
    as a TraceError ("NAME: the traced run failed: ...", the traceback as its detail).

    ``run_params`` and ``warmup_steps`` are what the table records (the parameters the
    run used; the steps run before the profiler started). ``host_events`` gives the
    attribution a cycle's events; ``by_step`` turns the phases it found into one entry per
    profiled step (a workload's loop opens one range per phase and step: as they are).
    """
    if row_limit < 1:
        raise UsageError(f"row_limit must be at least 1, got {row_limit}")
    began = time.perf_counter()
    directory = prepare_trace_dir(artifacts_dir, name)

    import torch

    try:
        profiling = Profiling(directory, device, schedule, record_shapes, host_events)
        collector = profiling.collector
        run(profiling)
        if len(collector.traces) != schedule.repeat:
            raise TraceError(f"{name}: the profiler produced {len(collector.traces)} trace(s), "
                             f"expected {schedule.repeat}")
        if collector.ranges == 0:
            raise TraceError(f"{name}: no phase ranges ({', '.join(PHASES)}) in the profile")
        phases, other = profiling.attribution.finish(row_limit, profiling.cuda)
        phases = by_step(phases)
        table = OperatorTable(
            workload=name,
            device=device,
            schedule=schedule,
            unprofiled_warmup_steps=warmup_steps,
            profiled_steps=schedule.active_steps,
            row_limit=row_limit,
            traces=tuple(p.name for p in collector.traces),
            phases=phases,
            other_threads=other,
            params=run_params.to_dict(),
            torch_version=str(torch.__version__),
            perfgate_version=__version__,
            created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
            seconds=round(time.perf_counter() - began, 3),
        )
        md = directory / OPERATORS_MD
        tmp = md.with_name(f".{md.name}.tmp")
        tmp.write_text(render_operator_table(table), encoding="utf-8")
        os.replace(tmp, md)
        # operators.json last: its presence says the trace is complete.
        save_operator_table(table, directory / OPERATORS_JSON)
    except BaseException as exc:  # noqa: BLE001 - nothing half-written may pass for a trace
        _clear(directory)
        if isinstance(exc, (KeyboardInterrupt, PerfgateError)):
            raise
        first_line = (str(exc).strip().splitlines() or [""])[0]
        raise TraceError(f"{name}: the traced run failed: {type(exc).__name__}: {first_line}",
                         detail="".join(traceback.format_exception(exc))) from None
    return TraceResult(name, directory, tuple(collector.traces), directory / OPERATORS_JSON,
                       directory / OPERATORS_MD, table)


def trace_workload(
    workload: Workload,
    params: Params,
    device: str,
    *,
    cache_dir: Path,
    artifacts_dir: Path,
    data_root: Path | None = None,
    schedule: TraceSchedule = TraceSchedule(),
    row_limit: int = DEFAULT_ROW_LIMIT,
    record_shapes: bool = False,
) -> TraceResult:
    """Trace one short run of ``workload`` here; raises TraceError or WorkloadError.

    ``params`` are the job's resolved parameters: the same seed and settings as a repeat.
    Only ``steps`` is changed, to size the DataLoader to warmup plus the profiled steps.
    """
    run_params = dataclasses.replace(params, steps=max(2, schedule.steps))

    def run(profiling: Profiling) -> None:

        built = build_workload(workload, run_params, device, data_root=data_root, cache_dir=cache_dir)
        step = training_step(built, device, run_params)
        for _ in range(params.warmup_steps):
            step(NO_TIMELINE)
        profiling.sync()
        clock = profiling.ranges()
        with profiling.profile() as prof:
            for i in range(schedule.steps):
                try:
                    step(clock)
                finally:
                    clock.close()
                if (i + 1) % profiling.cycle == 0:
                    # The edge of a cycle: let the device finish so the trace holds every kernel.
                    profiling.sync()
                prof.step()

    return traced_run(workload.name, device, artifacts_dir, run, run_params=run_params,
                      warmup_steps=params.warmup_steps, schedule=schedule, row_limit=row_limit,
                      record_shapes=record_shapes)


# --- the traced run, in a fresh process ------------------------------------------------


def trace_job(
    job: Job,
    device: str,
    cache_dir: Path,
    artifacts_dir: Path,
    *,
    schedule: TraceSchedule = TraceSchedule(),
    row_limit: int = DEFAULT_ROW_LIMIT,
    record_shapes: bool = False,
    timeout_s: float = 1800.0,
) -> TraceOutcome:
    """Trace ``job`` (a workload's, or a script's) in a fresh process; never raises a
    PerfgateError, returns it instead.

    An unwritable ``artifacts_dir`` is found before the process starts (a TraceError, exit
    code 2, in ``TraceOutcome.error``); whatever fails in the child (build, profiler,
    timeout, a crash) comes back the same way, with ``result`` None.
    """

    def traced() -> TraceResult:
        directory = prepare_trace_dir(artifacts_dir, job.workload.name)
        request = {
            **job_request(job, device, cache_dir),
            "artifacts_dir": str(artifacts_dir),
            "schedule": schedule.to_dict(),
            "row_limit": row_limit,
            "record_shapes": record_shapes,
        }
        module = _MODULE
        if job.script is not None:  # a user's script run as it is (perfgate trace --script)
            request["script"] = job.script.to_dict()
            module = _SCRIPT_MODULE
        # A child that never answered may have left a half-written trace; one that
        # answered an error cleared its own.
        response = ask_child(module, request, timeout_s, kind=TraceError, what="traced run",
                       on_no_answer=lambda: _clear(directory))
        return TraceResult.from_directory(Path(response["directory"]))

    return job_outcome(TraceOutcome, job.workload.name, TraceError, "tracing", traced)


def _child(request: dict[str, Any]) -> dict[str, Any]:
    if request.get("script") is not None:
        raise UsageError(f"{request['workload']}: a script is traced by python -m {_SCRIPT_MODULE}, not {_MODULE}")
    result = requested_job(request).run(
        trace_workload,
        artifacts_dir=Path(request["artifacts_dir"]),
        schedule=TraceSchedule.from_dict(request["schedule"]),
        row_limit=request["row_limit"],
        record_shapes=request["record_shapes"],
    )
    return {"ok": True, "directory": str(result.directory)}


def main(argv: list[str]) -> int:
    return serve(argv, _MODULE, _child)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
