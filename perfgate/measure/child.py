"""The protocol of perfgate's child processes (a measured repeat, a traced run).

The parent writes a JSON request to a file and runs ``python -m MODULE REQUEST RESPONSE``;
the child answers ``{"ok": true, ...}`` or ``{"ok": false, "error": {type, message,
detail}}`` in the response file, and exits 0 only when it measured. Keeping each run in
its own process is what makes repeats independent samples; keeping the protocol in one
place is what keeps the two kinds of child alike.

Each child leads its own process group (a fresh one its own session), and whatever is left
of that group when the child ends is killed with it (:func:`wait_group`): a DataLoader
worker, a compile worker, a process the workload's code started and left behind. However
the child ends, by answering, by dying, at its timeout or because the gate was interrupted
while it ran, nothing of one repeat outlives it into the next. A process that leaves the
group itself (``setsid``, a double fork into another group) is beyond this.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfgate.model.errors import PerfgateError
from perfgate.store.jsonfile import dumps, write_json_atomic


@dataclass(frozen=True)
class ChildRun:
    """What came back: the response (None when the process died before answering)."""

    response: dict[str, Any] | None
    output: str
    returncode: int

    def died(self, what: str) -> str:
        """One line for a child that gave no answer, with the last line it printed."""
        tail = (self.output.strip().splitlines() or [""])[-1]
        return f"{what} process died (exit status {self.returncode})" + (f": {tail}" if tail else "")


def end_group(pid: int) -> None:
    """SIGKILL to every process left in the process group ``pid`` leads (none left: nothing)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:  # the group is empty, or was never made: the leader alone
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    except PermissionError:  # a group of someone else's: never ours to end
        pass


def wait_group(pid: int, timeout_s: float | None, *, stop_fd: int | None = None) -> int | None:
    """Wait for the child ``pid``, the leader of its own process group, then kill what is left
    of the group and reap the child; its exit status, or None when it was ended at
    ``timeout_s`` (None: no limit) or because ``stop_fd`` became readable (the template's
    command pipe at EOF: its parent closed it or died).

    The group is killed while the exited child is not yet reaped, so its pid, which names
    the group, cannot have been given to another process. It is killed however the wait
    ends, a KeyboardInterrupt in the caller included (raised again once the group is gone)."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    pidfd: int | None = None
    ended = False
    try:
        pidfd = os.pidfd_open(pid) if hasattr(os, "pidfd_open") else None
        while True:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                break  # exited, not reaped
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                ended = True
                break
            watched = [fd for fd in (pidfd, stop_fd) if fd is not None]
            if pidfd is None:
                ready, _, _ = select.select(watched, [], [], min(0.05, left) if left is not None else 0.05)
            else:
                ready, _, _ = select.select(watched, [], [], left)
            if stop_fd is not None and stop_fd in ready:
                ended = True
                break
    finally:
        end_group(pid)
        try:
            _, status = os.waitpid(pid, 0)
        finally:
            if pidfd is not None:
                os.close(pidfd)
    return None if ended else os.waitstatus_to_exitcode(status)


def call(module: str, request: dict[str, Any], timeout_s: float, *, python: str | None = None) -> ChildRun:
    """Run ``python -m module`` on ``request``; raises ``subprocess.TimeoutExpired``.

    The child runs in a session of its own (Ctrl-C at the terminal reaches the parent only,
    which ends it); when it ends, however it ends, what is left of its process group is
    killed (:func:`wait_group`).

    ``python`` is another interpreter (it must have this perfgate installed). The child
    runs in ``request["project_dir"]`` (the tree under test; default: this directory).
    ``-P`` keeps that directory off the front of ``sys.path`` at start-up, so a tree that
    holds its own ``perfgate/`` cannot replace the harness; :func:`serve` adds the tree
    to ``sys.path`` once perfgate is imported.
    """
    cwd = request.get("project_dir")
    if cwd is not None and not Path(cwd).is_dir():
        return ChildRun(None, f"the tree to measure in does not exist: {cwd}", 127)
    with tempfile.TemporaryDirectory(prefix="perfgate-child-") as tmp:
        req, resp, log = Path(tmp, "request.json"), Path(tmp, "response.json"), Path(tmp, "output.log")
        req.write_text(dumps(request))
        with open(log, "w") as out:
            command = [python or sys.executable, "-P", "-m", module, str(req), str(resp)]
            try:
                proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                        cwd=cwd, start_new_session=True)
            except (FileNotFoundError, PermissionError) as exc:
                return ChildRun(None, f"cannot start {python or sys.executable}: {exc}", 127)
            returncode: int | None = None
            try:
                returncode = wait_group(proc.pid, timeout_s)
            finally:  # wait_group reaped it, whatever happened: Popen must not wait for it again
                proc.returncode = -signal.SIGKILL if returncode is None else returncode
        output = log.read_text(errors="replace")
        if returncode is None:
            raise subprocess.TimeoutExpired(command, timeout_s, output=output)
        response = json.loads(resp.read_text()) if resp.exists() else None
    return ChildRun(response, output, returncode)


def _add_project_dir(project_dir: Path) -> None:
    """The tree under test goes first on ``sys.path`` (its ``src/`` layout too), as the
    current directory would for ``python -m``; perfgate is imported already, so a tree
    holding its own ``perfgate/`` cannot replace the harness that measures it."""
    for entry in (project_dir / "src", project_dir):
        if entry.is_dir() and str(entry) not in sys.path:
            sys.path.insert(0, str(entry))


def flush_output() -> None:
    """Flush stdout and stderr as far as they can be (a script may have closed or replaced
    them): before ``os._exit``, which does not flush, or once a script has run."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass


def serve(argv: list[str], module: str, handle: Callable[[dict[str, Any]], dict[str, Any]]) -> int:
    """The child's side: read the request, answer it or the error, exit 0 only on success."""
    if len(argv) != 2:
        print(f"usage: python -m {module} REQUEST.json RESPONSE.json", file=sys.stderr)
        return 2
    request_path, response_path = Path(argv[0]), Path(argv[1])
    try:
        request = json.loads(request_path.read_text())
        _add_project_dir(Path(request.get("project_dir") or Path.cwd()))
        response = handle(request)
    except PerfgateError as exc:
        response = {"ok": False, "error": {"type": type(exc).__name__, "message": exc.message,
                                           "detail": exc.detail or traceback.format_exc()}}
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which decides
        response = {"ok": False, "error": {"type": type(exc).__name__, "message": f"{type(exc).__name__}: {exc}",
                                           "detail": traceback.format_exc()}}
    write_json_atomic(response_path, response)
    return 0 if response["ok"] else 1
