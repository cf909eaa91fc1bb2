"""One repeat of a script, in the current process: hooks in, the script as ``__main__``, a result.

The script runs with ``runpy.run_path`` under the name ``__main__``, ``sys.argv = [script,
*args]``, its directory first on ``sys.path`` (as ``python script.py`` does) and the
working directory it was started from. The hooks (:mod:`perfgate.measure.script_hooks`)
time its steps and stop it after warmup and the measured window; whatever it does then
(its ``finally`` blocks) runs, and its DataLoader worker processes are shut down. The
repeat is the same :class:`~perfgate.model.result.RepeatResult` a workload's repeat is.

The script's own words (an exception's message, its type's name) reach perfgate's
messages only cleaned by :func:`perfgate.text.inert.terminal` and shortened.
"""

from __future__ import annotations

import os
import runpy
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from statistics import median
from typing import Any

import torch

from perfgate.measure.child import flush_output
from perfgate.measure.inject import injection_delays
from perfgate.measure.loop import (
    _first_non_finite,
    _loader_settings,
    _PeakMemory,
    apply_torch_settings,
    clamp_record,
    make_timeline,
    torch_settings_in_effect,
)
from perfgate.measure.timeline import InjectingTimeline, Timeline
from perfgate.measure.script_hooks import (
    COUNTS,
    SAMPLES,
    SCALER_SKIPS,
    ScriptHooks,
    ScriptStop,
    end_loader_workers,
    frameworks_loaded,
)
from perfgate.measure.script_patches import installed
from perfgate.measure.telemetry import TelemetrySampler
from perfgate.measure.template import process_start
from perfgate.model.errors import WorkloadError
from perfgate.model.result import RepeatResult
from perfgate.model.script import Script
from perfgate.model.workload import Params, check_device_params
from perfgate.text.inert import terminal

_TEXT_LIMIT = 300
"""Characters of the script's own text (an exception's message) kept in a message."""


def untrusted(text: object) -> str:
    """The script's text, one line, cleaned for a terminal and shortened (with the cut counted)."""
    return terminal(text, _TEXT_LIMIT)


@dataclass(frozen=True)
class Ending:
    """How the script's run ended: ``stopped`` (by a hook), ``returned``, ``exit`` (SystemExit) or ``raised``."""

    how: str
    what: str = ""
    code: object = None
    """``exit``: the code given to ``sys.exit``; ``raised``: the exception's type name."""


def run_under_hooks(hooks: ScriptHooks, path: Path, args: tuple[str, ...], argv0: str) -> Ending:
    """Run the script at ``path`` as ``__main__`` under ``hooks``; restores ``sys.argv``,
    ``sys.path`` and the working directory after, and ends the DataLoader workers."""
    saved_argv, saved_path, saved_cwd = sys.argv[:], sys.path[:], os.getcwd()
    sys.argv = [argv0, *args]
    sys.path.insert(0, str(path.parent))
    try:
        with installed(hooks):
            try:
                runpy.run_path(str(path), run_name="__main__")
                ending = Ending("returned")
            except ScriptStop:
                ending = Ending("stopped")
            except SystemExit as exc:
                ending = Ending("exit", f"sys.exit({untrusted(exc.code) if exc.code is not None else ''})", exc.code)
            except KeyboardInterrupt:
                raise
            except BaseException as exc:  # noqa: BLE001 - the script's failure, reported as its words
                first = (str(exc).strip().splitlines() or [""])[0]
                ending = Ending("raised", untrusted(f"{type(exc).__name__}: {first}" if first else type(exc).__name__),
                                type(exc).__name__)
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
        os.chdir(saved_cwd)
        flush_output()
        end_loader_workers(hooks)
    return ending


def _why_unmeasured(hooks: ScriptHooks, ending: Ending, shown: str, *, counts: str = "--warmup/--steps") -> str:
    """One line for a script that stopped before the window closed; the script's own words last.
    ``counts`` names the options that set the steps it needed (a trace's come from its schedule)."""
    if hooks.steps_done == 0 and ending.how in ("returned", "exit") and hooks.batches:
        return (f"{shown}: saw 0 optimizer steps in {hooks.batches} DataLoader batches; perfgate marks the steps "
                "with torch.optim optimizer steps")
    got = (f"after {hooks.steps_done} optimizer step(s) ({hooks.batches} DataLoader batch(es)); perfgate needs "
           f"{hooks.warmup_steps} warmup + {hooks.steps} measured steps")
    if ending.how == "returned":
        if hooks.exhausted:
            return f"{shown} ran out of data {got}: give it more data, or lower {counts}"
        return (f"{shown} finished {got}: let it train longer (more epochs, a larger max_steps), or lower "
                f"{counts}")
    if hooks.steps_done == 0 and ending.how == "exit" and ending.code == 2:
        return (f"{shown} exited before its first optimizer step with {ending.what}: argparse exits with 2 when "
                "it rejects an argument; does this copy of the script take the arguments given after --? "
                "(perfgate run --script with -v shows what it printed)")
    if hooks.steps_done == 0 and ending.how == "raised" and ending.code in ("ModuleNotFoundError", "ImportError"):
        return (f"{shown} could not import what it needs before its first optimizer step: {ending.what}; "
                "install it where perfgate runs (pip install 'perfgate[frameworks]' brings Lightning, "
                "transformers, accelerate and timm)")
    if ending.how == "exit":
        return f"{shown} exited {got}; it called {ending.what}"
    return f"{shown} failed {got}; it raised {ending.what}"


def script_gpu_index(hooks: ScriptHooks) -> int | None:
    """The CUDA device the script trains on, read when the window opens: that of the last
    warmup step's loss, else of the stepped optimizer's first parameter; None (the current
    device) when neither is on a CUDA device with an index."""
    candidates: list[Any] = [hooks.step_loss]
    optimizer = hooks.optimizer() if hooks.optimizer is not None else None
    if optimizer is not None:
        candidates += [p for group in getattr(optimizer, "param_groups", ())[:1] for p in group.get("params", ())[:1]]
    for value in candidates:
        where = getattr(value, "device", None)
        if isinstance(where, torch.device) and where.type == "cuda" and where.index is not None:
            return int(where.index)
    return None


def run_script_repeat(
    script: Script,
    params: Params,
    device: str,
    *,
    name: str,
    index: int,
    telemetry: bool = True,
    argv0: str | None = None,
    timeline: Callable[[str, int], Timeline] = make_timeline,
    inject_ms: Mapping[str, float] | None = None,
) -> tuple[RepeatResult, dict[str, Any]]:
    """Run ``script`` once under the hooks and measure its window; raises WorkloadError
    (one line: what the script did, how many steps it got).

    ``inject_ms`` (``perfgate selftest``): milliseconds added inside each named phase each
    time the script leaves it (:class:`perfgate.measure.timeline.InjectingTimeline`), as for
    a workload."""
    check_device_params(params, device, workload=name)
    shown = untrusted(script.shown)
    started_at = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
    # Nothing here may call into torch.cuda before the script's first line: the script decides
    # when CUDA is initialised and which GPU it uses (torch.cuda.set_device, CUDA_VISIBLE_DEVICES
    # set by the script). apply_torch_settings only sets switches (torch.manual_seed queues the
    # CUDA seeds until CUDA is initialised); the sampler is made when the window opens, on the
    # device the script's last warmup step ran on.
    apply_torch_settings(params, device)
    peak = _PeakMemory(device)
    line = timeline(device, params.steps)
    if inject_ms:
        line = InjectingTimeline(line, injection_delays(inject_ms, device))
    sampling: list[TelemetrySampler] = []

    def on_open() -> None:
        peak.reset()
        if telemetry:
            sampler = TelemetrySampler(device, gpu_index=script_gpu_index(hooks) if device == "cuda" else None)
            sampling.append(sampler)
            sampler.start()

    def on_close() -> None:
        for sampler in sampling:
            sampler.stop()

    hooks = ScriptHooks(line, warmup_steps=params.warmup_steps, steps=params.steps, on_open=on_open,
                        on_close=on_close, device_type=device)
    ending = run_under_hooks(hooks, script.path, script.args, argv0 or script.shown)
    if hooks.recording:
        on_close()
    sampler = sampling[0] if sampling else None
    if hooks.failure is not None:
        raise WorkloadError(f"{name}: {shown}: {hooks.failure}")
    if not hooks.done or hooks.times is None:
        raise WorkloadError(f"{name}: {_why_unmeasured(hooks, ending, shown)}")
    times = hooks.times
    counts = hooks.window_counts()
    peak_bytes = peak.read()
    reserved_bytes = peak.read_reserved()
    if device == "cuda" and not peak_bytes:
        raise WorkloadError(f"{name}: {shown} allocated no CUDA memory in the measured window: it trains on "
                            "another device; run it with --device cpu")
    losses = [float(t) for t in hooks.losses]  # the first and the last measured step's, read after the window
    bad = _first_non_finite(losses)
    if bad is not None:
        where = "first" if bad == 0 else "last"
        raise WorkloadError(f"{name}: loss is non-finite ({losses[bad]}) at the {where} measured step")
    samples = sum(c[SAMPLES] for c in counts)
    settings = torch_settings_in_effect(params.seed)
    settings["process_start"] = process_start()  # always fresh: a script runs as __main__, never forked
    settings["script"] = {
        "optimizer": hooks.optimizer_name,
        **{f"{what}_per_step": median(c[i] for c in counts) for i, what in enumerate(COUNTS)},
        # GradScaler steps that skipped the optimizer (fp16 overflow) in the window: each merged
        # with the step after it, which is then about two steps long.
        "scaler_skipped_steps": sum(c[SCALER_SKIPS] for c in counts),
        "samples_counted": samples > 0,
        # The autocast dtype (else the parameters') the measured steps ran in: the script's
        # own choice, which the parameters' fixed ``precision`` does not know.
        **hooks.precision(),
        "frameworks": frameworks_loaded(),
    }
    if device == "cuda":
        settings["cuda_window"] = {"device_steps_over_window": times.device_window_ratio,
                                   "max_memory_reserved_bytes": reserved_bytes, **clamp_record(times)}
    loader = hooks.window_loader
    repeat = RepeatResult(
        index=index,
        started_at=started_at,
        timing=line.timing,
        window_s=times.window_s,
        phases_ms={k: tuple(v) for k, v in times.series_ms.items()},
        # Samples from the batches' first dimension; without a DataLoader, steps per second.
        samples_per_s=(samples or params.steps) / times.window_s,
        peak_memory_bytes=peak_bytes,
        peak_memory_kind=peak.kind,
        torch_settings=settings,
        loader_settings=_loader_settings(loader) if loader is not None else {},
        loader_restarts=hooks.epochs_in_window,
        telemetry=sampler.summary() if sampler is not None else None,
    )
    data = {
        "kind": "script",
        "path": script.shown,
        "content_hash": "not hashed",
        "hash_method": "none",
        "num_samples": _dataset_length(loader),
        "description": "the data the script loads itself; perfgate does not see or hash it",
        "script_sha256": script.sha256,
    }
    return repeat, data


def _dataset_length(loader: object) -> int:
    try:
        return len(loader.dataset)  # type: ignore[attr-defined]  # any loader: no attribute is an answer below
    except Exception:  # noqa: BLE001 - no loader, or a dataset without a length
        return 0
