"""A separate run of a workload, traced or counted: what the two kinds share.

Neither is a measurement, and both start like a repeat: :func:`build_workload` builds
the workload with a repeat's torch settings and :func:`training_step` puts its model on
the device and gives the very same training step (``loop._Step``). Both run one job in a
fresh process (:mod:`perfgate.measure.child`'s protocol) and give the caller an outcome,
never a raised error: the parent sends the job as :func:`job_request`, waits with
:func:`ask_child` and wraps it all in :func:`job_outcome`; the child finds the requested
workload with :func:`requested_job`. Nothing here imports torch until a run starts.
"""

from __future__ import annotations

import subprocess
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from perfgate.measure.child import call
from perfgate.model.errors import DataError, DeviceError, PerfgateError, UsageError, WorkloadError
from perfgate.model.workload import BuildContext, Built, Params, Workload

if TYPE_CHECKING:
    from perfgate.model.job import Job

_Value = TypeVar("_Value")
_Outcome = TypeVar("_Outcome")


# --- the run, in this process -----------------------------------------------------------


def build_workload(workload: Workload, run_params: Params, device: str, *, data_root: Path | None,
                   cache_dir: Path) -> Built:
    """Apply ``run_params``' torch settings and build ``workload`` as a repeat does; raises
    WorkloadError (or the PerfgateError the builder raised) when the build fails."""
    from perfgate.measure.loop import _check_built, _fail, apply_torch_settings

    name = workload.name
    apply_torch_settings(run_params, device)
    ctx = BuildContext(params=run_params, device=device, data_root=data_root, cache_dir=cache_dir, workload=name)
    try:
        return _check_built(workload.build(ctx), name)
    except PerfgateError:
        raise
    except BaseException as exc:  # noqa: BLE001 - user code: reported, not raised raw
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise _fail(name, "building the workload", exc) from None


def training_step(built: Built, device: str, run_params: Params) -> Any:
    """Put the model on ``device`` in ``run_params``' memory format, in training mode, and
    return the repeat's training step (``loop._Step``) for it."""
    import torch

    from perfgate.measure.loop import _Step

    torch_device = torch.device(device)
    memory_format = torch.channels_last if run_params.memory_format == "channels_last" else torch.contiguous_format
    built.model.to(torch_device, memory_format=memory_format)
    built.model.train()
    return _Step(built, torch_device, run_params)


# --- the parent's side ------------------------------------------------------------------


def job_request(job: Job, device: str, cache_dir: Path) -> dict[str, Any]:
    """The part of a request every job child reads: the workload, its source, device,
    parameters, data root and cache (see :func:`requested_job`)."""
    return {
        "workload": job.workload.name,
        "source": job.workload.source,
        "device": device,
        "params": job.params.to_dict(),
        "data_root": str(job.data_root) if job.data_root else None,
        "cache_dir": str(cache_dir),
    }


def ask_child(
    module: str,
    request: dict[str, Any],
    timeout_s: float,
    *,
    kind: type[PerfgateError],
    what: str,
    python: str | None = None,
    on_no_answer: Callable[[], None] = lambda: None,
) -> dict[str, Any]:
    """Run ``python -m module`` on ``request``; its response when it answered ``ok``.

    Otherwise raises: ``kind`` when the child timed out or died without answering (after
    calling ``on_no_answer``), or the error it answered, as the same class when it is
    ``kind``, a WorkloadError, DataError, DeviceError or UsageError, else as ``kind``, its
    detail followed by the child's output. ``what`` names the run in messages ("traced
    run").
    """
    name = request["workload"]
    try:
        run = call(module, request, timeout_s, python=python)
    except subprocess.TimeoutExpired:
        run = None
    if run is None:
        on_no_answer()
        raise kind(f"{name}: the {what} did not finish within {timeout_s:g} s")
    response = run.response
    if response is None:
        on_no_answer()
        raise kind(f"{name}: " + run.died(f"the {what}'s"), detail=run.output)
    if not response["ok"]:
        error = response["error"]
        errors = {cls.__name__: cls for cls in (kind, WorkloadError, DataError, DeviceError, UsageError)}
        raise errors.get(error.get("type", ""), kind)(error["message"],
                                                        detail=(error.get("detail") or "") + "\n" + run.output)
    return response


def job_outcome(
    outcome: Callable[[str, _Value | None, PerfgateError | None, float], _Outcome],
    name: str,
    kind: type[PerfgateError],
    doing: str,
    work: Callable[[], _Value],
) -> _Outcome:
    """``outcome(name, work(), None, seconds)``, or ``outcome(name, None, error, seconds)``
    when ``work`` raised; never raises a PerfgateError or another Exception.

    A PerfgateError is the error as it is; any other Exception becomes ``kind`` ("NAME:
    ``doing`` failed: ...", the traceback as its detail), so a run in a child never takes
    the gate down with it. ``seconds`` is the wall time of ``work``.
    """
    began = time.perf_counter()
    try:
        value = work()
    except PerfgateError as exc:
        return outcome(name, None, exc, round(time.perf_counter() - began, 3))
    except Exception as exc:  # noqa: BLE001 - a run in a child must never take the gate down with it
        error = kind(f"{name}: {doing} failed: {type(exc).__name__}: {exc}", detail=traceback.format_exc())
        return outcome(name, None, error, round(time.perf_counter() - began, 3))
    return outcome(name, value, None, round(time.perf_counter() - began, 3))


# --- the child's side -------------------------------------------------------------------


@dataclass(frozen=True)
class RequestedJob:
    """The job a :func:`job_request` describes, as the child finds it."""

    workload: Workload
    params: Params
    device: str
    cache_dir: Path
    data_root: Path | None

    def run(self, function: Callable[..., _Value], **options: Any) -> _Value:
        """``function(workload, params, device, cache_dir=..., data_root=..., **options)``:
        this job's run in this process (``trace_workload``, ``count_workload``)."""
        return function(self.workload, self.params, self.device, cache_dir=self.cache_dir,
                        data_root=self.data_root, **options)


def requested_job(request: Mapping[str, Any]) -> RequestedJob:
    """Load the request's source and find its workload; raises WorkloadError when the
    source holds none of that name."""
    from perfgate.store.discovery import load_source

    name = request["workload"]
    matches = [w for w in load_source(request["source"]) if w.name == name]
    if not matches:
        raise WorkloadError(f"{name}: not found in {request['source']}")
    return RequestedJob(
        matches[0],
        Params.from_dict(request["params"]),
        request["device"],
        cache_dir=Path(request["cache_dir"]),
        data_root=Path(request["data_root"]) if request.get("data_root") else None,
    )
