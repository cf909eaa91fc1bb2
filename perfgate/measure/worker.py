"""The process of one repeat: ``python -m perfgate.measure.worker REQUEST RESPONSE``.

The runner starts one of these per repeat, so every repeat pays the same start-up and
run-to-run variation is sampled rather than hidden. The request names the workload by
its source and carries the resolved parameters; the response is either the repeat's
measurements or the error, as JSON. Exit status 0 means a measurement was written.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from perfgate.measure.child import serve
from perfgate.model.errors import WorkloadError
from perfgate.model.workload import Params
from perfgate.store.discovery import load_source


def _measure(request: dict[str, Any]) -> dict[str, Any]:
    # Imported here so that a broken torch install is reported as an error response.
    from perfgate.measure.fingerprint import collect
    from perfgate.measure.loop import run_repeat

    name = request["workload"]
    matches = [w for w in load_source(request["source"]) if w.name == name]
    if not matches:
        raise WorkloadError(f"{name}: not found in {request['source']}")
    params = Params.from_dict(request["params"])
    data_root = Path(request["data_root"]) if request.get("data_root") else None
    repeat, data = run_repeat(
        matches[0],
        params,
        request["device"],
        data_root=data_root,
        cache_dir=Path(request["cache_dir"]),
        index=request["index"],
        telemetry=request.get("telemetry", True),
        inject_ms=request.get("inject_ms"),
    )
    environment = collect(request["device"], git_commit=request.get("git_commit"), git_dirty=request.get("git_dirty"))
    return {"ok": True, "repeat": repeat.to_dict(), "data": data.to_dict(), "environment": environment.to_dict()}


def main(argv: list[str]) -> int:
    return serve(argv, "perfgate.measure.worker", _measure)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
