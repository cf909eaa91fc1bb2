"""One rank of a distributed repeat: ``python -m perfgate.measure.rank_worker REQUEST DIR``.

Started by ``torch.distributed.run`` (:mod:`perfgate.measure.distributed`), which sets
RANK, WORLD_SIZE and LOCAL_RANK. The rank joins the process group before the workload is
built (so its loader can take a DistributedSampler), runs the ordinary repeat with the
model in DDP, and answers in ``DIR/rank-R.json`` with the protocol of every child.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from perfgate.measure.child import serve
from perfgate.model.errors import PerfgateError, WorkloadError
from perfgate.model.workload import Params
from perfgate.store.discovery import load_source


def _measure(request: dict[str, Any]) -> dict[str, Any]:
    from perfgate.measure import ddp
    from perfgate.measure.fingerprint import collect
    from perfgate.measure.loop import run_repeat

    name = request["workload"]
    device = request["device"]
    rank = ddp.rank_from_environment(device)
    matches = [w for w in load_source(request["source"]) if w.name == name]
    if not matches:
        raise WorkloadError(f"{name}: not found in {request['source']}")
    ddp.join(rank, device, float(request.get("rank_timeout_s", 600)))
    try:
        repeat, data = run_repeat(
            matches[0],
            Params.from_dict(request["params"]),
            device,
            data_root=Path(request["data_root"]) if request.get("data_root") else None,
            cache_dir=Path(request["cache_dir"]),
            index=request["index"],
            telemetry=request.get("telemetry", True),
            inject_ms=request.get("inject_ms"),
            rank=rank,
        )
    except PerfgateError as exc:
        raise type(exc)(f"rank {rank.rank}: {exc.message}", detail=exc.detail) from None
    finally:
        ddp.leave()
    environment = collect(device, git_commit=request.get("git_commit"), git_dirty=request.get("git_dirty"))
    return {"ok": True, "repeat": repeat.to_dict(), "data": data.to_dict(), "environment": environment.to_dict()}


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m perfgate.measure.rank_worker REQUEST.json DIR", file=sys.stderr)
        return 2
    rank = os.environ.get("RANK", "unknown")
    return serve([argv[0], str(Path(argv[1]) / f"rank-{rank}.json")], "perfgate.measure.rank_worker", _measure)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
