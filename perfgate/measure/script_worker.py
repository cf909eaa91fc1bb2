"""The process of one repeat of a script: ``python -m perfgate.measure.script_worker REQUEST RESPONSE``.

The runner starts one per repeat, as it starts ``perfgate.measure.worker`` for a
workload, with the same protocol (:mod:`perfgate.measure.child`): the request carries the
script (path, arguments, the sha256 it had when the run began) and the parameters, the
response is the repeat or the error. The script's output goes to the child's log like
any output; the response file is written by this module after the script was stopped,
never from what the script printed. The process then ends at once (``os._exit``), so
threads or exit handlers the script left behind cannot hold it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

from perfgate.measure.child import flush_output, serve
from perfgate.measure.worker import answer
from perfgate.model.errors import WorkloadError
from perfgate.model.script import Script
from perfgate.model.workload import Params


def _argv0(script: Script) -> str:
    """The script as ``sys.argv[0]``: the recorded path when it names the file from here."""
    try:
        if os.path.samefile(script.shown, script.path):
            return script.shown
    except OSError:
        pass
    return str(script.path)


def checked_script(request: Mapping[str, Any], doing: str) -> Script:
    """The request's script, checked to be the file the job hashed; a WorkloadError when it
    cannot be read or ``changed while it was being {doing}`` (measured, counted, traced)."""
    # Imported here so that a broken torch install is reported as an error response.
    from perfgate.measure.script_job import file_sha256
    from perfgate.measure.script_run import untrusted

    name = request["workload"]
    script = Script.from_dict(request["script"])
    try:
        sha = file_sha256(script.path)
    except OSError as exc:
        raise WorkloadError(f"{name}: cannot read {untrusted(script.shown)}: {untrusted(exc.strerror or exc)}") from None
    if script.sha256 and sha != script.sha256:
        raise WorkloadError(f"{name}: {untrusted(script.shown)} changed while it was being {doing} "
                            f"(sha256 {sha[:12]}, {script.sha256[:12]} when the run began)")
    return script


def _measure(request: dict[str, Any]) -> dict[str, Any]:
    from perfgate.measure.script_run import run_script_repeat

    name = request["workload"]
    script = checked_script(request, "measured")
    repeat, data = run_script_repeat(
        script,
        Params.from_dict(request["params"]),
        request["device"],
        name=name,
        index=request["index"],
        telemetry=request.get("telemetry", True),
        argv0=_argv0(script),
        inject_ms=request.get("inject_ms"),
    )
    return answer(request, repeat, data)


def main(argv: list[str]) -> int:
    return serve(argv, "perfgate.measure.script_worker", _measure)


if __name__ == "__main__":
    code = main(sys.argv[1:])
    flush_output()
    os._exit(code)
