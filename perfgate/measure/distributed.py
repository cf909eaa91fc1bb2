"""A distributed repeat: its ranks under ``torch.distributed.run``, and their answers as one.

A repeat of a workload with ``nproc_per_node`` = N > 1 starts the existing launcher
(``python -m torch.distributed.run``, no restarts) with N ranks on this machine, each
``python -P -m perfgate.measure.rank_worker REQUEST DIR`` (:mod:`perfgate.measure.rank_worker`),
which joins the process group, runs the ordinary repeat with the model in DDP and writes
``DIR/rank-R.json``. The launcher and every rank run in a session of their own, so that on a
timeout, a crash or an interrupt the whole group (ranks, their DataLoader workers, the
launcher and the store it listens with) is ended, and nothing is left listening.

The ranks' answers become one repeat (:func:`combine`): per step the series of the rank whose
step was the slowest, and every rank's own series beside it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from perfgate.analysis.ranks import slowest_rank_series
from perfgate.measure import telemetry_host
from perfgate.model.errors import DataError, DeviceError, PerfgateError, UsageError, WorkloadError
from perfgate.model.job import Job
from perfgate.store.jsonfile import dumps

PORT_VARIABLE = "PERFGATE_MASTER_PORT"
"""Set it to pin the rendezvous port (a runner whose firewall allows one); default: a free port."""


def check_devices(nproc: int, device: str) -> None:
    """A UsageError when this machine cannot give every rank a device (CUDA) or a core (CPU)."""
    if device == "cuda":
        import torch

        count = torch.cuda.device_count()
        if nproc > count:
            raise UsageError(f"nproc_per_node={nproc} needs {nproc} CUDA devices; this machine has {count}")
        return
    cores = telemetry_host.available_cores()
    if nproc > cores:
        raise UsageError(f"nproc_per_node={nproc} needs a CPU core per rank; this process may use {cores}")


def too_few_devices(jobs: Sequence[Job], device: str) -> dict[str, str]:
    """The jobs whose workload asks (in its own parameters, not in a ``--set``) for more ranks
    than this machine has devices (CUDA) or cores (CPU), with why: a selection by default
    leaves them out and says so, while naming one or setting ``nproc_per_node`` runs it and
    fails in one line (a single-GPU runner gates the single-process workloads)."""
    out = {}
    for job in jobs:
        if job.params.nproc_per_node > 1 and "nproc_per_node" not in job.overrides:
            try:
                check_devices(job.params.nproc_per_node, device)
            except UsageError as exc:
                out[job.workload.name] = exc.message
    return out


def _free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def rendezvous_port() -> int:
    """``$PERFGATE_MASTER_PORT`` when set and free (a UsageError when taken or malformed),
    else a port the system reports free."""
    pinned = os.environ.get(PORT_VARIABLE)
    if pinned:
        if not pinned.isdigit() or not 1 <= int(pinned) <= 65535:
            raise UsageError(f"{PORT_VARIABLE}={pinned!r} is not a port number (1-65535)")
        if not _free(int(pinned)):
            raise UsageError(f"port {pinned} ({PORT_VARIABLE}) is in use; free it or choose another")
        return int(pinned)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _end_group(process: subprocess.Popen[bytes], grace_s: float = 5.0) -> None:
    """End the launcher's whole session: SIGTERM (the launcher ends its ranks), then SIGKILL
    for whatever is left after ``grace_s``; returns once the group is empty."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            process.poll()  # reap the launcher, so that an empty group reads as empty
            try:
                os.killpg(process.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        else:
            continue
        break
    process.wait()


_ERRORS: dict[str, type[PerfgateError]] = {cls.__name__: cls for cls in (WorkloadError, DataError, DeviceError,
                                                                        UsageError)}


def run_ranks(request: dict[str, Any], nproc: int, timeout_s: float, *, python: str | None = None,
              where: str) -> dict[str, Any]:
    """Run one repeat's ``nproc`` ranks; the combined response, or raises a PerfgateError.

    ``where`` names the repeat in messages ("resnet18-cifar10-ddp: repeat 2"). A rank that
    answered an error gives its message (the lowest such rank); ranks that ran past
    ``timeout_s`` or died without answering are named."""
    check_devices(nproc, request["device"])
    port = rendezvous_port()
    interpreter = python or sys.executable
    cwd = request.get("project_dir")
    with tempfile.TemporaryDirectory(prefix="perfgate-ranks-") as tmp:
        req, answers, log = Path(tmp, "request.json"), Path(tmp, "ranks"), Path(tmp, "output.log")
        answers.mkdir()
        req.write_text(dumps(request))
        command = [interpreter, "-P", "-m", "torch.distributed.run", "--nnodes=1", f"--nproc_per_node={nproc}",
                   "--master_addr=127.0.0.1", f"--master_port={port}", "--max_restarts=0", "--no-python",
                   interpreter, "-P", "-m", "perfgate.measure.rank_worker", str(req), str(answers)]
        timed_out = False
        with open(log, "wb") as out:
            try:
                process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                           cwd=cwd, start_new_session=True)
            except OSError as exc:
                raise WorkloadError(f"{where}: cannot start torch.distributed.run with {interpreter}: {exc}") from None
            try:
                process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
            except BaseException:
                _end_group(process)
                raise
            _end_group(process)
        output = log.read_text(errors="replace")
        responses: dict[int, dict[str, Any]] = {}
        answered_at: dict[int, float] = {}
        for rank in range(nproc):
            path = answers / f"rank-{rank}.json"
            if path.exists():
                responses[rank] = json.loads(path.read_text())
                answered_at[rank] = path.stat().st_mtime
    missing = [rank for rank in range(nproc) if rank not in responses]
    failed = sorted((rank for rank, r in responses.items() if not r.get("ok")), key=lambda r: answered_at[r])
    # One rank's failure makes the others' collectives fail ("connection reset by peer"): the
    # cause is a rank that failed otherwise, else one that died without answering, else the first.
    own = [rank for rank in failed if not _follows_a_peer(responses[rank]["error"]["message"])]
    if own or (failed and not missing):
        rank = (own or failed)[0]
        error = responses[rank]["error"]
        kind = _ERRORS.get(error.get("type", ""), WorkloadError)
        message = error["message"]
        raise kind(message if message.startswith(f"rank {rank}") else f"rank {rank}: {message}",
                   detail=(error.get("detail") or "") + "\n" + output)
    silent = ", ".join(map(str, missing))
    if timed_out:
        raise WorkloadError(f"{where}: the ranks did not finish within {timeout_s:g} s (no answer from rank "
                            f"{silent}); every process of the repeat was ended", detail=output)
    if "EADDRINUSE" in output or "address already in use" in output.lower():
        raise UsageError(f"{where}: the rendezvous port {port} was taken before the ranks could use it; "
                         f"run again, or pin a free one with {PORT_VARIABLE}", detail=output)
    if missing:
        cause = root_cause(output)
        first = cause[0] if cause is not None and cause[0] in missing else missing[0]
        how = (_how_it_ended(cause[1]) if cause is not None and cause[0] == first
               else "it died, or hung until the launcher ended it")
        then = []
        ended = [rank for rank in missing if rank != first]
        if ended:
            then.append(f"the launcher then ended rank {', '.join(map(str, ended))}")
        if failed:
            then.append(f"rank {', '.join(map(str, failed))} then failed in a collective waiting for it "
                        "(--verbose shows how)")
        details = "\n".join(f"rank {r}: {responses[r]['error']['message']}" for r in failed)
        if cause is None and not failed:
            tail = next((line.strip() for line in reversed(output.splitlines())
                         if line.strip().strip("=-*")), "")
            raise WorkloadError(f"{where}: rank {silent} died without answering (launcher exit "
                                f"status {process.returncode})" + (f": {tail}" if tail else ""), detail=output)
        raise WorkloadError(f"{where}: rank {first} gave no answer ({how})" + ("; " + "; ".join(then) if then else ""),
                            detail=(details + "\n" + output).lstrip("\n"))
    return combine([responses[rank] for rank in range(nproc)])


def root_cause(output: str) -> tuple[int, int] | None:
    """The rank and exit code ``torch.distributed.run`` names as the first observed failure
    ("Root Cause (first observed failure): ... rank : 1 (local_rank: 1) ... exitcode : 3"), or
    None when its output names none. When one rank fails the launcher ends the others, which
    may then die before they can answer: only this section tells which went first."""
    _, found, section = output.rpartition("Root Cause (first observed failure):")
    if not found:
        return None
    rank = re.search(r"^\s*rank\s*:\s*(\d+)", section, re.MULTILINE)
    code = re.search(r"^\s*exitcode\s*:\s*(-?\d+)", section, re.MULTILINE)
    if rank is None or code is None:
        return None
    return int(rank.group(1)), int(code.group(1))


def _how_it_ended(code: int) -> str:
    """How a rank's process ended, from the launcher's exit code (negative: the signal)."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"it was ended by {name}"
    return f"it exited with status {code} before answering"


_PEER_FAILURE = ("connection reset", "connection closed", "connection refused", "broken pipe", "remote worker",
                 "timed out", "timeout", "distbackenderror", "distnetworkerror", "gloo", "nccl")


def _follows_a_peer(message: str) -> bool:
    """Whether a rank's error reads as the consequence of another rank's failure (its collective
    lost the peer or timed out) rather than a failure of its own."""
    low = message.lower()
    return any(marker in low for marker in _PEER_FAILURE)


def combine(responses: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One repeat's response from its ranks' (rank order): the slowest rank's series per step,
    every rank's series in ``ranks``, rank 0's environment, data and telemetry, the window of
    the slowest rank and the samples per second of all ranks together."""
    repeats = [r["repeat"] for r in responses]
    first = repeats[0]
    series = [r["phases_ms"] for r in repeats]
    lengths = {len(s["step"]) for s in series}
    if len(lengths) != 1:
        raise WorkloadError(f"the ranks measured different numbers of steps ({sorted(lengths)})")
    window_s = max(r["window_s"] for r in repeats)
    steps = lengths.pop()
    batch = first["samples_per_s"] * first["window_s"] / steps
    peaks = [r["peak_memory_bytes"] for r in repeats if r.get("peak_memory_bytes") is not None]
    combined = {
        **first,
        "window_s": window_s,
        "phases_ms": {k: list(v) for k, v in slowest_rank_series(series).items()},
        "samples_per_s": steps * batch * len(repeats) / window_s,
        "peak_memory_bytes": max(peaks) if peaks else None,
        "loader_restarts": max(r.get("loader_restarts", 0) for r in repeats),
        "torch_settings": {**first["torch_settings"], "world_size": len(repeats)},
        "ranks": [dict(s) for s in series],
    }
    return {"ok": True, "repeat": combined, "data": responses[0]["data"], "environment": responses[0]["environment"]}
