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
from perfgate.measure.separate_run import requested_job
from perfgate.measure.worker import answer
from perfgate.model.errors import PerfgateError


def _measure(request: dict[str, Any]) -> dict[str, Any]:
    from perfgate.measure import ddp
    from perfgate.measure.loop import run_repeat

    job = requested_job(request)
    rank = ddp.rank_from_environment(job.device)
    ddp.join(rank, job.device, float(request.get("rank_timeout_s", 600)))
    try:
        repeat, data = run_repeat(
            job.workload,
            job.params,
            job.device,
            data_root=job.data_root,
            cache_dir=job.cache_dir,
            index=request["index"],
            telemetry=request.get("telemetry", True),
            inject_ms=request.get("inject_ms"),
            rank=rank,
            windows=request.get("windows", 1),
        )
    except PerfgateError as exc:
        raise type(exc)(f"rank {rank.rank}: {exc.message}", detail=exc.detail) from None
    finally:
        ddp.leave()
    return answer(request, repeat, data.to_dict())


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m perfgate.measure.rank_worker REQUEST.json DIR", file=sys.stderr)
        return 2
    rank = os.environ.get("RANK", "unknown")
    return serve([argv[0], str(Path(argv[1]) / f"rank-{rank}.json")], "perfgate.measure.rank_worker", _measure)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
