"""Orchestrating repeats: one fresh process per repeat, workloads interleaved.

Consecutive repeats are independent samples of run-to-run noise only if each one pays
its own start-up (imports, allocator, cuDNN autotuning, DataLoader workers), so each runs
in a new Python process. Workloads are interleaved round-robin (A1 B1 A2 B2 ...), so a
burst of load on a shared machine spreads over all of them rather than hitting one.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from enum import StrEnum
from pathlib import Path
from statistics import median
from typing import Any

from perfgate.measure.separate_run import job_request
from perfgate.measure.template import FRESH, Starter
from perfgate.model.environment import Environment
from perfgate.model.errors import CudaUnavailable, DeviceError, PerfgateError, WorkloadError
from perfgate.model.job import Job
from perfgate.model.result import RepeatResult, RunResult, repeat_from_dict
from perfgate.model.version import __version__
from perfgate.model.workload import PRECISIONS
from perfgate.store.gitinfo import git_revision
from perfgate.store.results import result_path, save_result


def resolve_device(requested: str) -> str:
    """``auto`` becomes ``cuda`` when a CUDA device is usable, else ``cpu``."""
    if requested not in ("auto", "cpu", "cuda"):
        raise DeviceError(f"unknown device {requested!r}; use auto, cpu or cuda")
    if requested == "cpu":
        return "cpu"
    import torch

    available = torch.cuda.is_available()
    if requested == "cuda" and not available:
        built_with = torch.version.cuda or "no CUDA"
        raise CudaUnavailable(
            f"--device cuda: no usable CUDA device (torch {torch.__version__}, built with {built_with}); use --device cpu"
        )
    return "cuda" if available else "cpu"


def default_cache_dir() -> Path:
    """``$PERFGATE_CACHE_DIR``; in a GitHub Actions job, the job's own ``$RUNNER_TEMP``
    (emptied after every job, so nothing a pull request plants there reaches the next one);
    else the user's cache folder."""
    env = os.environ.get("PERFGATE_CACHE_DIR")
    if env:
        return Path(env)
    runner_temp = os.environ.get("RUNNER_TEMP")
    if os.environ.get("GITHUB_ACTIONS") == "true" and runner_temp:
        return Path(runner_temp) / "perfgate-cache"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "perfgate"


class ProgressStatus(StrEnum):
    """Where one repeat (or block) stands."""

    START = "start"
    DONE = "done"
    FAILED = "failed"


@dataclass(frozen=True)
class Progress:
    workload: str
    repeat: int
    repeats: int
    status: ProgressStatus
    seconds: float = 0.0
    step_median_ms: float | None = None
    message: str = ""
    label: str = ""
    """Where in the design ("block 2/6 head"); empty for a plain run."""


@dataclass
class RunOutcome:
    results: dict[str, RunResult] = field(default_factory=dict)
    errors: dict[str, PerfgateError] = field(default_factory=dict)
    reruns: dict[str, list[str]] = field(default_factory=dict)
    """Per workload, each repeat measured again because other processes loaded the machine, and why."""
    contended: dict[str, list[str]] = field(default_factory=dict)
    """Per workload, repeats kept although contended (the re-run limit was reached)."""


def run_one(job: Job, device: str, index: int, cache_dir: Path, git: tuple[str | None, bool | None],
            timeout_s: float, telemetry: bool, *, project_dir: Path | None = None,
            python: str | None = None, starter: Starter = FRESH, windows: int = 1) -> dict[str, Any]:
    """One repeat in a fresh process; its response, or :class:`WorkloadError`.

    ``project_dir`` is the tree under test (the child runs there and imports from it);
    ``python`` another interpreter for it (the paired design's ``--base-python``);
    ``starter`` how the process starts (forked from a template, or a new interpreter:
    :mod:`perfgate.measure.template`); ``windows`` the timed windows in it.
    """
    if windows > 1 and job.script is not None:
        raise WorkloadError(f"{job.workload.name}: windows = {windows}: script mode times the script's own "
                            "steps as one window; set windows = 1")
    request = {
        **job_request(job, device, cache_dir),
        "index": index,
        "git_commit": git[0],
        "git_dirty": git[1],
        "telemetry": telemetry,
        "project_dir": str(project_dir) if project_dir else None,
        **({"windows": windows} if windows > 1 else {}),
    }
    if job.inject_ms:
        request["inject_ms"] = dict(job.inject_ms)
    if job.params.nproc_per_node > 1:
        from perfgate.measure.distributed import run_ranks

        # The ranks' own collectives give up a little before the repeat's timeout, so a rank
        # that hangs is reported by the others where they can still answer.
        request["rank_timeout_s"] = max(1.0, 0.9 * timeout_s)
        return run_ranks(request, job.params.nproc_per_node, timeout_s, python=python,
                         where=f"{job.workload.name}: repeat {index + 1}")
    if job.script is not None:  # a user's script run as it is (perfgate run --script)
        request["script"] = job.script.to_dict()
    module = "perfgate.measure.worker" if job.script is None else "perfgate.measure.script_worker"
    try:
        # A script runs as __main__, which a forked child would share with the template.
        run = starter.call(module, request, timeout_s, python=python, fresh=job.script is not None)
    except subprocess.TimeoutExpired:
        raise WorkloadError(f"{job.workload.name}: repeat {index + 1} did not finish within {timeout_s:.0f} s") from None
    response = run.response
    if response is None:
        raise WorkloadError(f"{job.workload.name}: {run.died(f'repeat {index + 1}')}", detail=run.output)
    if not response["ok"]:
        error = response["error"]
        output = run.output
        raise WorkloadError(error["message"], detail=(error.get("detail") or "") + ("\n" + output if output else ""))
    return response


def measure(
    jobs: Sequence[Job],
    *,
    device: str,
    repeats: int,
    cache_dir: Path,
    out_dir: Path | None,
    progress: Callable[[Progress], None] = lambda p: None,
    timeout_s: float = 3600.0,
    project_dir: Path | None = None,
    telemetry: bool = True,
    contention_check: Callable[[Mapping[str, Any] | None], str | None] | None = None,
    max_reruns: int = 3,
    reruns_used: Mapping[str, int] | None = None,
    starter: Starter = FRESH,
    windows: int | Mapping[str, int] = 1,
) -> RunOutcome:
    """Measure every job ``repeats`` times; write one result file per successful workload.

    A workload whose repeat fails is dropped from later rounds, reported in
    ``RunOutcome.errors`` and gets no result file (a stale one from an earlier run is
    removed first, so nothing incomplete can be mistaken for this run's result).

    A repeat during which other processes loaded the machine (``contention_check`` says
    why) is measured again, up to ``max_reruns`` times per workload; each re-run is named
    in ``RunOutcome.reruns``, and one kept at the limit in ``RunOutcome.contended``.
    ``windows``: the timed windows in each process, one count or a count per workload (a
    workload it does not name gets 1).
    """
    if repeats < 1:
        raise ValueError("repeats must be at least 1")
    git = git_revision(project_dir or Path.cwd())
    outcome = RunOutcome()
    collected: dict[str, list[dict[str, Any]]] = {job.workload.name: [] for job in jobs}
    if out_dir is not None:
        for job in jobs:
            result_path(out_dir, job.workload.name).unlink(missing_ok=True)
    for index in range(repeats):
        for job in jobs:
            name = job.workload.name
            if name in outcome.errors:
                continue
            while True:
                progress(Progress(name, index + 1, repeats, ProgressStatus.START))
                began = time.perf_counter()
                try:
                    # A plain run measures the tree it is started in; project_dir names it for
                    # git, and is where the child runs when it is a directory.
                    response = run_one(job, device, index, cache_dir, git, timeout_s, telemetry,
                                       project_dir=project_dir if project_dir and project_dir.is_dir() else None,
                                       starter=starter,
                                       windows=windows if isinstance(windows, int) else windows.get(name, 1))
                except PerfgateError as exc:
                    outcome.errors[name] = exc
                    progress(Progress(name, index + 1, repeats, ProgressStatus.FAILED, time.perf_counter() - began,
                                      message=exc.message))
                    break
                steps = response["repeat"]["phases_ms"]["step"]
                progress(Progress(name, index + 1, repeats, ProgressStatus.DONE, time.perf_counter() - began, median(steps)))
                why = contention_check(response["repeat"].get("telemetry")) if contention_check else None
                used = (reruns_used or {}).get(name, 0) + len(outcome.reruns.get(name, []))
                if why is not None and used < max_reruns:
                    outcome.reruns.setdefault(name, []).append(f"repeat {index + 1} measured again: {why}")
                    continue
                if why is not None:
                    outcome.contended.setdefault(name, []).append(
                        f"repeat {index + 1} kept although contended (limit of {max_reruns} re-runs reached): {why}")
                collected[name].append(response)
                break
    for job in jobs:
        name = job.workload.name
        if name in outcome.errors:
            continue
        try:
            result = assemble(job, device, collected[name])
        except PerfgateError as exc:
            outcome.errors[name] = exc
            continue
        if out_dir is not None:
            save_result(result, result_path(out_dir, name))
        outcome.results[name] = result
    return outcome


def script_measured_params(repeats: Sequence[RepeatResult]) -> dict[str, Any]:
    """A script's :data:`~perfgate.model.script.SCRIPT_MEASURED` parameters from its repeats:
    the precision most of its measured steps ran in (each repeat's ``torch_settings.script``),
    when it is a workload precision; none when no repeat read one (fp64 is not one: it stays
    in ``torch_settings`` and the run table)."""
    counts: dict[str, int] = {}
    for repeat in repeats:
        precision = ((repeat.torch_settings or {}).get("script") or {}).get("precision")
        if isinstance(precision, str):
            counts[precision] = counts.get(precision, 0) + 1
    if not counts:
        return {}
    precision = max(counts, key=lambda p: (counts[p], p == "fp32"))
    return {"precision": precision} if precision in PRECISIONS else {}


def assemble(job: Job, device: str, responses: list[dict[str, Any]],
             blocks: Sequence[int] | None = None) -> RunResult:
    """One result from the responses of a workload's repeats (with their ABBA blocks, if paired)."""
    name = job.workload.name
    environments = [Environment.from_dict(r["environment"]) for r in responses]
    keys = {e.key() for e in environments}
    if len(keys) != 1:
        raise WorkloadError(f"{name}: the environment changed between repeats ({', '.join(sorted(keys))})")
    hashes = {r["data"]["content_hash"] for r in responses}
    if len(hashes) != 1:
        raise WorkloadError(f"{name}: the data changed between repeats ({len(hashes)} different content hashes)")
    repeats: list[RepeatResult] = [repeat_from_dict(r["repeat"], f"repeat {i}") for i, r in enumerate(responses)]
    if blocks is not None:
        repeats = [dataclasses.replace(r, index=i, block=b) for i, (r, b) in enumerate(zip(repeats, blocks, strict=True))]
    params = job.params.to_dict()
    if job.script is not None:
        params.update(script_measured_params(repeats))
    return RunResult(
        workload=name,
        workload_version=job.workload.version,
        workload_source=job.workload.source,
        device=device,
        params=params,
        overrides=dict(job.overrides),
        environment=environments[0],
        data=responses[0]["data"],
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        perfgate_version=__version__,
        repeats=tuple(repeats),
    )
