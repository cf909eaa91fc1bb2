"""The counted run: exact counters of a workload's training step, per phase.

A run of its own, like a traced run, never inside a measured window: the workload is
built with the same builder, parameters, torch settings and data as a repeat
(``loop.apply_torch_settings``, ``loop._check_built``), its warmup steps run exactly as
a repeat's (``loop._Step`` through the no-op timeline), then ``steps`` more steps of the
very same ``_Step`` run under counting, through a timeline whose switches (the ones the
timed loop makes) move the counters from one phase to the next. What is counted, and where
it comes from, is described in :mod:`perfgate.analysis.counters`, which holds the data; the
counted run only touches torch:

- a ``TorchDispatchMode`` counts every aten operator call, its copies and conversions
  and the calls that force a host synchronisation (with the Python line that issued
  them); ``FlopCounterMode`` counts FLOPs, read at each phase mark
  (:mod:`perfgate.measure.counting`; which calls synchronise, and the line:
  :mod:`perfgate.measure.sync_sites`);
- on CUDA, ``torch.cuda.set_sync_debug_mode("warn")`` reports synchronisations outside
  aten operators; in a pass of its own, before the counting modes are entered,
  ``torch.profiler`` (CPU and CUDA activity, one ``record_function`` range per phase as
  in a traced run) gives the kernel launches and memory copy calls, attributed to phases
  by ``perfgate.analysis.attribution.launch_counts``, and ``torch.cuda.memory_stats()``, read
  at each phase mark, the allocator calls. The pass is separate because a dispatch mode
  changes what runs: while one is active a ``torch.compile``d model runs its eager code
  (measured on an H200 with torch 2.11: resnet18-cifar10 launched 319 kernels a step
  compiled, 380 eager, and 380 compiled under either mode). So a compiled workload's
  launches, copies and allocator calls are its compiled code's, while its operator
  calls, FLOPs and synchronisations are counted on its eager path (the counter set
  says so in ``notes``);
- ``torch._dynamo``'s counters and compilation metrics give graph breaks, recompiles
  and the compile time, over the whole run (read here).

Both dispatch modes are thread-local state that autograd carries to its device
threads, so CUDA backward work is counted too, in the ``backward`` phase.

:func:`count_workload` runs in this process and raises; :func:`count_job` runs it in a
fresh process (``python -P -m perfgate.measure.counters REQUEST RESPONSE``) and returns
a failure as a value, so a counted run that crashes never takes a timed verdict down.
This module holds those two, the compile counters and the child's entry point.

A script job (``perfgate run --script``'s, ``Job.script``) is counted by the same
``count_job``: its request carries the script and goes to a child of its own, ``python -P
-m perfgate.measure.script_count`` (as a script's repeat goes to ``script_worker``), which
checks that the file still has the sha256 the job recorded and counts it with
:func:`perfgate.measure.script_count.count_script` (the script run as it is, under the
hooks of a script repeat; what it leaves out is said there).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import sys
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from perfgate.analysis.attribution import launch_counts
from perfgate.analysis.counters import CounterOutcome
from perfgate.measure.child import serve
from perfgate.measure.counting import (
    GLOBAL_HOOKS_WARNING,
    CountingClock,
    Counts,
    device_pass,
    op_counter,
    run_steps,
    sync_warnings,
)
from perfgate.measure.separate_run import (
    ask_child,
    build_workload,
    job_outcome,
    job_request,
    requested_job,
    training_step,
)
from perfgate.model.counters import (
    DEFAULT_STEPS,
    AllocatorCounts,
    CompileInfo,
    CounterError,
    CounterSet,
    PhaseCounters,
    SyncSite,
    clean_reason,
)
from perfgate.model.errors import PerfgateError, UsageError, WorkloadError
from perfgate.model.job import Job
from perfgate.model.version import __version__
from perfgate.model.workload import PHASES, Params, Workload
from perfgate.store.counters import save_counters

_MODULE = "perfgate.measure.counters"
_SCRIPT_MODULE = "perfgate.measure.script_count"
"""The child that counts a script job (it imports this module: named here, never imported)."""

SYNC_SOURCE_CPU = ("aten calls that force a synchronisation on a device (.item(), nonzero, boolean-mask "
                   "indexing, unique, ...) made from the workload's own code, counted on the CPU as the stand-in "
                   "for one, outside the data wait")
SYNC_SOURCE_CUDA = ("aten calls on device tensors that force a synchronisation, and the synchronising calls "
                    "torch.cuda.set_sync_debug_mode reports outside any operator")

COMPILED_EAGER_NOTE_CUDA = (
    "compiled: kernel launches, memory copies and allocator calls are the compiled code's; operator "
    "calls, FLOPs and synchronisations are counted on the model's eager path (torch.compile runs eager "
    "code while a dispatch mode counts)")
COMPILED_EAGER_NOTE_CPU = (
    "compiled: operator calls, FLOPs and synchronisations are counted on the model's eager path "
    "(torch.compile runs eager code while a dispatch mode counts); the compiled code's own kernels "
    "are not counted on the CPU")

UNAVAILABLE_CPU = {
    "kernel_launches": "a CPU run launches no kernels (the aten operator count stands in for them)",
    "memcpy_calls": "a CPU run makes no device memory copies (host-device copies show as copies)",
    "allocator": "the CPU allocator keeps no call counts (torch.cuda.memory_stats is CUDA only)",
}


# --- compile counters -----------------------------------------------------------------


def _dynamo_state() -> tuple[int, dict[str, int], list[Any]] | None:
    """Frames compiled, graph breaks by reason and the compilation metrics so far; None
    when dynamo was never loaded."""
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is None:
        return None
    counters = utils.counters
    frames = int(counters["frames"]["total"]) if "frames" in counters else 0
    breaks = dict(counters["graph_break"]) if "graph_break" in counters else {}
    metrics = list(utils.get_compilation_metrics()) if hasattr(utils, "get_compilation_metrics") else []
    return frames, breaks, metrics


def _compile_info(at_start: tuple[int, dict[str, int], list[Any]] | None,
                  before_counting: tuple[int, dict[str, int], list[Any]] | None
                  ) -> tuple[CompileInfo | None, str | None, float | None]:
    """What dynamo did since ``at_start`` (its counters are per process, and a process
    may count more than once): the info, or why there is none, and the compile seconds."""
    state = _dynamo_state()
    start = at_start or (0, {}, [])
    frames = (state[0] - start[0]) if state is not None else 0
    if state is None or frames <= 0:
        return None, ("the workload does not compile: torch.compile compiled no frame during the build, "
                      "the warmup or the counted steps"), None
    _, breaks, all_metrics = state
    earlier = {id(m) for m in start[2]}
    metrics = [m for m in all_metrics if id(m) not in earlier]
    graph_breaks: Counter[str] = Counter()
    for reason, n in breaks.items():
        new = int(n) - int(start[1].get(reason, 0))
        if new > 0:
            graph_breaks[clean_reason(str(reason))] += new
    recompile_reasons = tuple(clean_reason(str(m.recompile_reason), lines=1).split(" # ")[0].strip()
                              for m in metrics if getattr(m, "recompile_reason", None))
    seconds = [getattr(m, "entire_frame_compile_time_s", None) for m in metrics]
    compile_s = sum(s for s in seconds if isinstance(s, (int, float)) and math.isfinite(s)) if metrics else None
    info = CompileInfo(
        frames_compiled=frames,
        recompiles=len(recompile_reasons),
        recompile_reasons=recompile_reasons,
        graph_breaks=dict(graph_breaks),
        compiles_in_counted_steps=state[0] - (before_counting[0] if before_counting else 0),
    )
    return info, None, compile_s


# --- the counted run, in this process -------------------------------------------------


def phase_counters(counts: Counts, phase: str, *, kernel_launches: int | None, memcpy_calls: int | None,
                   allocator: AllocatorCounts | None) -> PhaseCounters:
    """One phase's counters from the counting modes' totals, with the device pass's counts
    (None where there was none)."""
    return PhaseCounters(
        ops=dict(counts.ops[phase]),
        copies=dict(counts.copies[phase]),
        dtype_conversions=counts.conversions[phase],
        device_copies=counts.device_copies[phase],
        flops=sum(counts.flops[phase].values()),
        flops_by_op=dict(counts.flops[phase]),
        syncs=tuple(SyncSite(loc, what, n) for (loc, what), n in sorted(counts.syncs[phase].items())),
        kernel_launches=kernel_launches,
        memcpy_calls=memcpy_calls,
        allocator=allocator,
    )


def count_workload(
    workload: Workload,
    params: Params,
    device: str,
    *,
    cache_dir: Path,
    data_root: Path | None = None,
    steps: int = DEFAULT_STEPS,
) -> CounterSet:
    """Count ``steps`` steps of ``workload`` here, after its warmup; raises WorkloadError
    (the builder or the step failed) or CounterError (the counting itself failed).

    ``params`` are the job's resolved parameters: the same seed and settings as a repeat.
    Only when ``steps`` is more than ``params.steps`` is the loader sized for it (as a
    traced run does), so it never restarts inside the counted steps.
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise UsageError(f"counted steps must be an integer >= 1, got {steps!r}")
    began = time.perf_counter()
    name = workload.name

    import torch
    from torch.utils.flop_counter import FlopCounterMode

    compile_at_start = _dynamo_state()

    from perfgate.measure.loop import _fail
    from perfgate.measure.timeline import NO_TIMELINE

    cuda = device == "cuda"
    needed = 2 * steps if cuda else steps  # CUDA counts in two passes
    run_params = params if params.steps >= needed else dataclasses.replace(params, steps=needed)
    built = build_workload(workload, run_params, device, data_root=data_root, cache_dir=cache_dir)

    sync: Callable[[], None] = torch.cuda.synchronize if cuda else (lambda: None)
    stage = "the warmup"
    try:
        step = training_step(built, device, run_params)
        for i in range(run_params.warmup_steps):
            value = float(step(NO_TIMELINE).detach().float().item())
            if not math.isfinite(value):
                raise WorkloadError(f"{name}: loss is non-finite ({value}) at warmup step {i}")
        sync()

        counts = Counts(device)
        compile_before = _dynamo_state()
        events: list[Any] = []
        if cuda:
            stage = "the counted steps (the profiler's pass)"
            events = device_pass(step, steps, counts, sync)
        stage = "the counted steps"
        with contextlib.ExitStack() as stack:
            stack.enter_context(warnings.catch_warnings())
            warnings.filterwarnings("ignore", message=GLOBAL_HOOKS_WARNING)
            flop_mode = stack.enter_context(FlopCounterMode(display=False))
            if cuda:
                stack.enter_context(sync_warnings(counts))
            counts.locator.boundary = sys._getframe()
            clock = CountingClock(counts, flop_mode, None, None)
            stack.enter_context(op_counter(counts))
            run_steps(step, clock, steps, counts)
            sync()
        compile_info, no_compile, compile_s = _compile_info(compile_at_start, compile_before)
    except BaseException as exc:  # noqa: BLE001
        if isinstance(exc, (KeyboardInterrupt, PerfgateError)):
            raise
        raise _fail(name, stage, exc) from None

    try:
        launches, memcpy = launch_counts(events) if cuda else ({}, {})
    except Exception as exc:  # noqa: BLE001 - the profiler's events, not the workload
        raise CounterError(f"{name}: reading the profiler's kernel launches failed: {type(exc).__name__}: {exc}",
                           detail=traceback.format_exc()) from None
    phases = {p: phase_counters(
        counts, p,
        kernel_launches=launches.get(p, 0) if cuda else None,
        memcpy_calls=memcpy.get(p, 0) if cuda else None,
        allocator=AllocatorCounts(**{k: counts.allocator[p][k] for k in AllocatorCounts.FIELDS}) if cuda else None,
    ) for p in PHASES}
    unavailable = {} if cuda else dict(UNAVAILABLE_CPU)
    if no_compile is not None:
        unavailable["compile"] = no_compile
    notes = () if compile_info is None else (COMPILED_EAGER_NOTE_CUDA if cuda else COMPILED_EAGER_NOTE_CPU,)
    return CounterSet(
        workload=name,
        workload_version=workload.version,
        device=device,
        steps=steps,
        warmup_steps=run_params.warmup_steps,
        params=run_params.to_dict(),
        phases=phases,
        compile=compile_info,
        unavailable=unavailable,
        sync_source=SYNC_SOURCE_CUDA if cuda else SYNC_SOURCE_CPU,
        notes=notes,
        timings={"counted_run_s": round(time.perf_counter() - began, 3),
                 "compile_s": None if compile_s is None else round(compile_s, 3)},
        torch_version=str(torch.__version__),
        perfgate_version=__version__,
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )


# --- the counted run, in a fresh process ------------------------------------------------


def count_job(
    job: Job,
    device: str,
    cache_dir: Path,
    *,
    steps: int = DEFAULT_STEPS,
    out_dir: Path | None = None,
    timeout_s: float = 1800.0,
    project_dir: Path | None = None,
    python: str | None = None,
) -> CounterOutcome:
    """Count ``job`` in a fresh process; never raises a PerfgateError, returns it instead.

    With ``out_dir`` the counters are also written to ``<out_dir>/<workload>.counters.json``.
    ``project_dir`` is the tree to run in (default: this directory), ``python`` another
    interpreter, as for a repeat. Whatever fails (the build, the step, the counting, a
    crash, the timeout) comes back in ``CounterOutcome.error``, with ``counters`` None.
    """
    from perfgate.model.counters import counters_from_dict

    name = job.workload.name

    def counted() -> CounterSet:
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise UsageError(f"counted steps must be an integer >= 1, got {steps!r}")
        request = {
            **job_request(job, device, cache_dir),
            "steps": steps,
            "project_dir": str(project_dir) if project_dir else None,
        }
        module = _MODULE
        if job.script is not None:  # a user's script run as it is, in a child of its own
            request["script"] = job.script.to_dict()
            module = _SCRIPT_MODULE
        response = ask_child(module, request, timeout_s, kind=CounterError, what="counted run", python=python)
        try:
            counters = counters_from_dict(response["counters"])
        except (KeyError, ValueError) as exc:
            raise CounterError(f"{name}: the counted run answered malformed counters: {exc}") from None
        if out_dir is not None:
            save_counters(counters, Path(out_dir))
        return counters

    return job_outcome(CounterOutcome, name, CounterError, "counting", counted)


def _child(request: dict[str, Any]) -> dict[str, Any]:
    counters = requested_job(request).run(count_workload, steps=request["steps"])
    return {"ok": True, "counters": counters.to_dict()}


def main(argv: list[str]) -> int:
    return serve(argv, _MODULE, _child)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
