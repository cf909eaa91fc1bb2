"""The counted run of a script: a user's training script, unmodified, counted per phase.

The script runs as a measured repeat runs it (:func:`perfgate.measure.script_run.run_under_hooks`:
``__main__``, its own ``sys.argv``, its directory first on ``sys.path``) under the same
hooks (:mod:`perfgate.measure.script_hooks`), with the repeat's torch settings. Its steps
are its own optimizer steps: after ``params.warmup_steps`` of them the window opens, after
``steps`` more it closes and the hooks stop the script, exactly as in a repeat. Instead of
a clock, the hooks tell a :class:`CountingTimeline`: when the window opens it enters the
counting modes of :mod:`perfgate.measure.counting` (``FlopCounterMode``, the aten operator
counter and, on CUDA, the synchronisation warnings) and at each of the hooks' phase
switches it moves the counters to the new phase (:class:`~perfgate.measure.counting.CountingClock`);
when the window closes it leaves them. The window opens and closes inside the script's
optimizer-step hook, so the modes' context managers are entered and left by hand (an
``ExitStack`` the timeline holds), and left in any case once the script has stopped: one
that raises, exits or stops early never leaves a mode behind. A script perfgate cannot
count gets the one-line :class:`~perfgate.model.errors.WorkloadError` a measured repeat
gets (:func:`perfgate.measure.script_run._why_unmeasured`).

What no hook sees (``IDLE``: the script's code after its optimizer step and before its
next batch, a ``loss.item()`` logged there for one) is in no phase, as its time is in no
phase of a repeat: those calls are not counted (the counter set's ``notes`` say so).

Left out for scripts: the CUDA device pass. A workload's kernel launches, memory copy
calls and allocator calls are counted in a pass of their own, under ``torch.profiler``
alone, because a dispatch mode changes what runs (:mod:`perfgate.measure.counters`). A
script is run once, under the counting modes, so on CUDA ``kernel_launches``,
``memcpy_calls`` and ``allocator`` are unavailable, with that reason; its operator calls,
FLOPs and synchronisations (the CUDA debug mode's too) are counted.

:func:`count_script` counts in this process and raises; ``perfgate.measure.counters.count_job``
counts a script job in a fresh one, ``python -P -m perfgate.measure.script_count REQUEST
RESPONSE`` (:func:`main`, :mod:`perfgate.measure.child`'s protocol), which first checks that
the file still has the sha256 the job recorded, and ends at once (``os._exit``) as a script
repeat's child does. Nothing here imports torch until a script is counted.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import time
import traceback
import warnings
from datetime import datetime, timezone
from typing import Any

from perfgate.measure.child import flush_output, serve
from perfgate.measure.counters import (
    COMPILED_EAGER_NOTE_CPU,
    SYNC_SOURCE_CPU,
    SYNC_SOURCE_CUDA,
    UNAVAILABLE_CPU,
    _compile_info,
    _dynamo_state,
    phase_counters,
)
from perfgate.measure.counting import GLOBAL_HOOKS_WARNING, CountingClock, Counts, op_counter, sync_warnings
from perfgate.measure.timeline import PHASE_OF as _PHASE_OF
from perfgate.measure.timeline import WindowTimes
from perfgate.model.counters import CounterError, CounterSet
from perfgate.model.errors import UsageError, WorkloadError
from perfgate.model.script import SCRIPT_VERSION, Script
from perfgate.model.version import __version__
from perfgate.model.workload import PHASES, Params, check_device_params

_MODULE = "perfgate.measure.script_count"

SCRIPT_STEPS_NOTE = ("script: the steps counted are the script's own optimizer steps (from the end of one "
                     "optimizer step to the end of the next); its calls outside every phase (after the optimizer "
                     "step, before the next batch) are not counted")
SCRIPT_COMPILED_NOTE_CUDA = (
    "compiled: operator calls, FLOPs and synchronisations are counted on the model's eager path "
    "(torch.compile runs eager code while a dispatch mode counts)")
SCRIPT_NO_COMPILE = ("the script does not compile: torch.compile compiled no frame before or during the "
                     "counted steps")
_ONCE = ("a script is run once, under the counting modes; {what} need a pass of their own under "
         "torch.profiler alone (a dispatch mode changes what runs), which would be a second run of the script")
UNAVAILABLE_SCRIPT_CUDA = {
    "kernel_launches": _ONCE.format(what="its kernel launches"),
    "memcpy_calls": _ONCE.format(what="its memory copy calls"),
    "allocator": _ONCE.format(what="its allocator calls"),
}


class CountingTimeline:
    """The hooks' timeline for a counted run: counting modes in the window, no timing.

    ``open`` (the boundary that ends warmup) enters the modes, ``switch`` moves the counts
    to the new phase, ``boundary`` counts the window's steps, ``close`` leaves the modes and
    returns a :class:`WindowTimes` of as many steps (zeros: nothing is timed). A failure of
    the counting itself is kept in :attr:`error` and stops the script (``ScriptStop``
    through the hooks' caller), never reported as the script's.
    """

    timing = "counters"

    def __init__(self, counts: Counts, *, synchronize: Any = lambda: None) -> None:
        self.counts = counts
        self.cuda = counts.device == "cuda"
        self._synchronize = synchronize
        self.clock: CountingClock | None = None
        self._stack: contextlib.ExitStack | None = None
        self.compile_before: Any = None
        """Dynamo's state when the window opened (its compiles in the counted steps are the difference)."""
        self.counted_steps = 0
        self.error: CounterError | None = None

    def switch(self, old: int, new: int) -> None:
        clock = self.clock
        if clock is not None:
            clock.enter(_PHASE_OF[new])

    def open(self, current: int) -> None:
        try:
            from torch.utils.flop_counter import FlopCounterMode

            self._synchronize()
            self.compile_before = _dynamo_state()
            stack = self._stack = contextlib.ExitStack()
            stack.enter_context(warnings.catch_warnings())
            warnings.filterwarnings("ignore", message=GLOBAL_HOOKS_WARNING)
            flop_mode = stack.enter_context(FlopCounterMode(display=False))
            if self.cuda:
                stack.enter_context(sync_warnings(self.counts))
            clock = CountingClock(self.counts, flop_mode, None, None)
            stack.enter_context(op_counter(self.counts))
            self.counted_steps = 0
            self.clock = clock
            clock.enter(_PHASE_OF[current])
        except Exception as exc:  # noqa: BLE001 - the counting's failure, not the script's
            self._failed("entering the counting modes", exc)

    def boundary(self, current: int, after: int | None = None) -> None:
        if self.clock is not None:
            self.counted_steps += 1

    def close(self) -> WindowTimes:
        try:
            if self.clock is not None:
                self.clock.enter(None)  # the last phase's FLOPs are its own
            self.clock = None
            self._synchronize()
            self.leave()
        except Exception as exc:  # noqa: BLE001
            self._failed("leaving the counting modes", exc)
        steps = self.counted_steps
        return WindowTimes({name: [0.0] * steps for name in (*PHASES, "step")}, 0.0)

    def leave(self) -> None:
        """Out of every mode entered (once; nothing when none is): after the window, or after
        a script that stopped inside it."""
        self.clock = None
        self.counts.phase = None
        stack, self._stack = self._stack, None
        if stack is not None:
            stack.close()

    def _failed(self, doing: str, exc: BaseException) -> None:
        from perfgate.measure.script_hooks import ScriptStop

        detail = "".join(traceback.format_exception(exc))
        with contextlib.suppress(Exception):
            self.leave()
        self.error = CounterError(f"{doing} failed: {type(exc).__name__}: {exc}", detail=detail)
        raise ScriptStop(self.error.message)


def count_script(
    script: Script,
    params: Params,
    device: str,
    *,
    name: str,
    steps: int,
    argv0: str | None = None,
) -> CounterSet:
    """Count ``steps`` of the script's optimizer steps here, after ``params.warmup_steps``
    of them; raises WorkloadError (one line: what the script did, how many steps it got)
    or CounterError (the counting itself failed).

    ``params`` are the script job's (its warmup, seed and torch switches); the counter set
    records them with ``steps`` the counted steps. ``argv0`` is the script's ``sys.argv[0]``
    (default: its recorded path).
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise UsageError(f"counted steps must be an integer >= 1, got {steps!r}")
    began = time.perf_counter()
    import torch

    from perfgate.measure.loop import _first_non_finite, _PeakMemory, apply_torch_settings
    from perfgate.measure.script_hooks import ScriptHooks
    from perfgate.measure.script_run import _why_unmeasured, run_under_hooks, untrusted

    check_device_params(params, device, workload=name)
    shown = untrusted(script.shown)
    cuda = device == "cuda"
    apply_torch_settings(params, device)
    compile_at_start = _dynamo_state()

    counts = Counts(device)
    counts.locator.boundary = sys._getframe()  # the callers above are not the script's
    line = CountingTimeline(counts, synchronize=torch.cuda.synchronize if cuda else (lambda: None))
    peak = _PeakMemory(device) if cuda else None
    hooks = ScriptHooks(line, warmup_steps=params.warmup_steps, steps=steps, device_type=device,
                        on_open=peak.reset if peak is not None else (lambda: None))
    try:
        ending = run_under_hooks(hooks, script.path, script.args, argv0 or script.shown)
    finally:
        line.leave()  # a script that raised, exited or was stopped inside the window
    if line.error is not None:
        raise CounterError(f"{name}: {shown}: {line.error.message}", detail=line.error.detail)
    if hooks.failure is not None:
        raise WorkloadError(f"{name}: {shown}: {hooks.failure}")
    if not hooks.done or hooks.times is None:
        raise WorkloadError(f"{name}: {_why_unmeasured(hooks, ending, shown)}")
    if peak is not None and not peak.read():
        raise WorkloadError(f"{name}: {shown} allocated no CUDA memory in the counted steps: it trains on "
                            "another device; count it with --device cpu")
    losses = [float(t) for t in hooks.losses]
    bad = _first_non_finite(losses)
    if bad is not None:
        where = "first" if bad == 0 else "last"
        raise WorkloadError(f"{name}: loss is non-finite ({losses[bad]}) at the {where} counted step")
    compile_info, no_compile, compile_s = _compile_info(compile_at_start, line.compile_before)

    # the device pass is left out for a script: no launches, copies or allocator calls
    phases = {p: phase_counters(counts, p, kernel_launches=None, memcpy_calls=None, allocator=None) for p in PHASES}
    unavailable = dict(UNAVAILABLE_SCRIPT_CUDA if cuda else UNAVAILABLE_CPU)
    if no_compile is not None:
        unavailable["compile"] = SCRIPT_NO_COMPILE
    notes = [SCRIPT_STEPS_NOTE]
    if compile_info is not None:
        notes.append(SCRIPT_COMPILED_NOTE_CUDA if cuda else COMPILED_EAGER_NOTE_CPU)
    return CounterSet(
        workload=name,
        workload_version=SCRIPT_VERSION,
        device=device,
        steps=steps,
        warmup_steps=params.warmup_steps,
        params=dataclasses.replace(params, steps=steps).to_dict(),
        phases=phases,
        compile=compile_info,
        unavailable=unavailable,
        sync_source=SYNC_SOURCE_CUDA if cuda else SYNC_SOURCE_CPU,
        notes=tuple(notes),
        timings={"counted_run_s": round(time.perf_counter() - began, 3),
                 "compile_s": None if compile_s is None else round(compile_s, 3)},
        torch_version=str(torch.__version__),
        perfgate_version=__version__,
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )


# --- the counted run of a script, in a fresh process ---------------------------------------


def _child(request: dict[str, Any]) -> dict[str, Any]:
    """A script job's counted run (``perfgate.measure.counters.count_job`` sends it here): the
    file checked to be the one the job hashed, as a script repeat's child checks it, then counted."""
    from perfgate.measure.script_worker import _argv0, checked_script

    name = request["workload"]
    script = checked_script(request, "counted")
    counters = count_script(script, Params.from_dict(request["params"]), request["device"], name=name,
                            steps=request["steps"], argv0=_argv0(script))
    return {"ok": True, "counters": counters.to_dict()}


def main(argv: list[str]) -> int:
    return serve(argv, _MODULE, _child)


if __name__ == "__main__":
    # Ends at once, as a script repeat's child does: threads or exit handlers the script left
    # behind cannot hold the process (the response is written already).
    code = main(sys.argv[1:])
    flush_output()
    os._exit(code)
