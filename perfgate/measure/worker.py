"""The process of one repeat: ``python -m perfgate.measure.worker REQUEST RESPONSE``.

The runner starts one of these per repeat, so every repeat pays the same start-up and
run-to-run variation is sampled rather than hidden. The request names the workload by
its source and carries the resolved parameters; the response is either the repeat's
measurements or the error, as JSON. Exit status 0 means a measurement was written.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from perfgate.measure.child import serve
from perfgate.measure.separate_run import requested_job
from perfgate.model.result import RepeatResult


def answer(request: Mapping[str, Any], repeat: RepeatResult, data: Mapping[str, Any]) -> dict[str, Any]:
    """A measured repeat's response, with the environment it was measured in: what every
    repeat's child (a workload's, a rank's, a script's) answers."""
    from perfgate.measure.fingerprint import collect

    environment = collect(request["device"], git_commit=request.get("git_commit"), git_dirty=request.get("git_dirty"))
    return {"ok": True, "repeat": repeat.to_dict(), "data": dict(data), "environment": environment.to_dict()}


def _measure(request: dict[str, Any]) -> dict[str, Any]:
    # Imported here so that a broken torch install is reported as an error response.
    from perfgate.measure.loop import run_repeat

    job = requested_job(request)
    repeat, data = run_repeat(
        job.workload,
        job.params,
        job.device,
        data_root=job.data_root,
        cache_dir=job.cache_dir,
        index=request["index"],
        telemetry=request.get("telemetry", True),
        inject_ms=request.get("inject_ms"),
        windows=request.get("windows", 1),
    )
    return answer(request, repeat, data.to_dict())


def main(argv: list[str]) -> int:
    return serve(argv, "perfgate.measure.worker", _measure)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
