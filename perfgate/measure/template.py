"""Cheap fresh processes: repeats forked from a template that has imported torch.

A repeat is an independent sample only if it is a fresh process: nothing of one repeat's
allocator, autotuner, compiled graphs, DataLoader workers or warm caches may reach the
next. Starting ``python -m perfgate.measure.worker`` gives that, and pays the interpreter
and ``import torch`` (1–3 s on a small machine) again for every repeat. A **template** pays
them once: a process that has imported torch and perfgate's measuring code, and nothing
else. For each repeat it forks; the child, a copy of the template, imports the tree under
test (the workload's code is never imported by the template, so one template serves base
and head), builds, warms up and measures, answers through the same files as
:mod:`perfgate.measure.child`, and exits.

What the template must not have touched, and is checked for before every fork
(:func:`_fork_hazard`): CUDA (a CUDA context does not survive a fork; the child
initialises its own), torch's intra-op thread pool (OpenMP threads do not survive a fork:
the template runs no torch op), Python threads. numpy's OpenBLAS starts its pool at
import; it shuts it down and restarts it around a fork (``pthread_atfork``), so it is allowed.
CUDA can be spoiled for the children without being initialised in torch's sense:
``torch.cuda.is_available()`` runs ``cuInit`` and registers torch's fork handler while
``torch.cuda.is_initialized()`` stays False, and every child forked after it is in torch's
bad-fork state ("Cannot re-initialize CUDA in forked subprocess" at its first CUDA call).
Only a child sees that state, so when the template is ready it forks one probe that reports
it (:func:`_fork_poisoned`); a poisoned template is not used. A child that finds itself in
the bad-fork state anyway, or fails with torch's bad-fork error, is the template's failure,
not the repeat's: :class:`TemplateFailed`, so the starter falls back to fresh processes with
one warning and runs that repeat again fresh.

What a forked child shares with its siblings and a fresh process would not: the address
layout and the hash seed of the template (Python's ``random`` and numpy's global state are
reseeded in the child, as a fresh process seeds them). A layout that happens to suit one
side's code would then be common to every repeat of that template, a bias no number of
repeats reveals. So a template serves **one block** (``renew_every`` processes, a block's
four in the paired design) and is then replaced: the layout becomes one more source of
block-to-block variation, which the paired contrast's variance samples, instead of a
constant of the gate.

Kept on today's start (one ``python`` per repeat), by design: distributed repeats (their
ranks are started by ``torch.distributed``'s launcher), script mode (a script runs as
``__main__``, and multiprocessing's ``spawn`` re-imports ``__main__`` by path), and a side
under another interpreter (``--base-python``); when one side cannot fork, neither does the
other, so both sides always start alike. A template that cannot start (``import torch``
fails, the machine refuses a process) falls back to today's start with one warning line.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from perfgate.measure.child import ChildRun, call, wait_group
from perfgate.store.jsonfile import dumps

START_MODES = ("fork", "fresh")
"""How a repeat's process starts: forked from a template, or a new interpreter (``fresh``)."""
DEFAULT_RENEW_EVERY = 4
"""Processes one template serves in a stored run before it is replaced (a paired gate
replaces it at every block)."""
_READY_TIMEOUT_S = 300.0
_PRELOAD = ("torch", "torch._dynamo", "torch._inductor", "perfgate.measure.worker", "perfgate.measure.loop", "perfgate.measure.fingerprint",
            "perfgate.measure.telemetry", "perfgate.store.discovery")
"""What the template imports: torch and the measuring code every repeat runs. Never the
tree under test. ``torch._dynamo`` and ``torch._inductor`` (about 1 s here) because every
repeat imports them: building any ``torch.optim`` optimizer imports ``torch._dynamo`` (which
imports inductor's config), and ``torch.use_deterministic_algorithms`` imports inductor's
config; importing them runs no torch op and initialises no device."""
_OPTIONAL = ("torchvision",)
"""Imported when they import (the environment fingerprint of every repeat reads torchvision's
version; the reference workloads use it); when one fails, each child meets it as today."""


# --- the template's side -----------------------------------------------------------------


def _threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 0


BAD_FORK = "Cannot re-initialize CUDA in forked subprocess"
"""The start of torch's error in a child forked after its parent initialised the CUDA driver."""


def _in_bad_fork() -> bool:
    """torch's own bad-fork state of this process: True in a child forked from a process
    that initialised the CUDA driver (looked up now: the flag is set at the fork)."""
    torch = sys.modules.get("torch")
    check = getattr(getattr(torch, "cuda", None), "_is_in_bad_fork", None)
    try:
        return bool(check()) if callable(check) else False
    except Exception:  # noqa: BLE001 - a torch without the check: nothing known against the fork
        return False


def _fork_hazard() -> str | None:
    """Why forking now would not give a clean child (None: safe)."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return "the template has initialised CUDA"
    if torch is not None and _in_bad_fork():
        return "the template is itself a forked child of a process that initialised CUDA (torch's bad-fork state)"
    if threading.active_count() > 1:
        return f"the template runs {threading.active_count() - 1} Python thread(s)"
    return None


_POISONED = 3
"""The fork probe's exit status when the child it forked is in torch's bad-fork state."""


def _fork_poisoned() -> str | None:
    """Why a child forked now could not use CUDA (None: it could), asked of a child itself.

    ``torch.cuda.is_available()`` (and anything else that counts devices through the CUDA
    runtime) runs ``cuInit`` and registers torch's fork handler without initialising CUDA in
    torch's sense: ``torch.cuda.is_initialized()`` stays False in the template, while every
    child forked from it is in the bad-fork state and raises "Cannot re-initialize CUDA in
    forked subprocess" at its first CUDA call. Only a forked child sees the flag, so the
    template forks one that reports it and exits (once, when the template is ready: it runs
    nothing after that)."""
    if "torch" not in sys.modules:
        return None
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = _POISONED if _in_bad_fork() else 0
        finally:
            os._exit(code)
    status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    if status == 0:
        return None
    if status == _POISONED:
        return ("a child forked from the template cannot use CUDA (torch's bad-fork state: something the template "
                "imported initialised the CUDA driver, e.g. torch.cuda.is_available())")
    return f"the template's fork probe ended with exit status {status}"


def _reseed() -> None:
    """What a fresh interpreter seeds from the OS and a forked child would share."""
    import random

    random.seed()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()


_FORKED = False
"""True in a child forked from a template (what :func:`process_start` reports)."""


def process_start() -> str:
    """How this process started: ``"fork"`` (from a template) or ``"fresh"``; recorded with
    every repeat, so a comparison can tell the two apart."""
    return "fork" if _FORKED else "fresh"


def _run_child(command: dict[str, Any], inherited: tuple[int, ...]) -> None:
    """In the forked child: become a fresh repeat and never return into the template."""
    # The template runs as __main__: the module the measuring code reads is this one by name.
    import perfgate.measure.template as by_name

    by_name._FORKED = True
    code = 1
    try:
        if _in_bad_fork():  # CUDA would fail at its first call: answer so, and the parent starts it fresh
            from perfgate.store.jsonfile import write_json_atomic

            write_json_atomic(Path(command["response"]), {"ok": False, "error": {
                "type": "TemplateFailed", "message": f"{BAD_FORK} (torch's bad-fork state, seen as the child began)",
                "detail": ""}})
            return
        os.setpgid(0, 0)  # its own group: when it ends, what is left of the group goes with it
        for fd in inherited:  # the template's protocol pipes are not the child's
            os.close(fd)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        null = os.open(os.devnull, os.O_RDONLY)
        log = os.open(command["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(null)
        os.close(log)
        if command.get("cwd"):
            os.chdir(command["cwd"])
        _reseed()
        import importlib

        module = importlib.import_module(command["module"])
        code = int(module.main([command["request"], command["response"]]))
    except BaseException:  # noqa: BLE001 - the child must end here, whatever happened
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)


def serve_template(commands: IO[str], replies: IO[str], preload: tuple[str, ...] = _PRELOAD) -> int:
    """The template's loop: one JSON command a line in, one reply a line out, until EOF."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's; it closes us
    began = time.perf_counter()
    import importlib

    try:
        for module in preload:
            importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001 - a broken install: the parent falls back, and says why
        replies.write(json.dumps({"ready": False, "why": f"importing {module} failed: {type(exc).__name__}: {exc}"})
                      + "\n")
        replies.flush()
        return 1
    if preload == _PRELOAD:
        for module in _OPTIONAL:
            try:
                importlib.import_module(module)
            except Exception:  # noqa: BLE001, S112 - the child imports it again and reports what fails
                continue
    import gc

    # What the template holds stays out of every child's garbage collections (and so out of
    # its timed windows, and its pages are not copied by the collector touching them).
    gc.collect()
    gc.freeze()
    hazard = _fork_hazard() or _fork_poisoned()
    replies.write(json.dumps({"ready": hazard is None, "why": hazard, "pid": os.getpid(),
                              "import_s": round(time.perf_counter() - began, 3), "threads": _threads()}) + "\n")
    replies.flush()
    if hazard is not None:
        return 1
    for line in commands:
        command = json.loads(line)
        hazard = _fork_hazard()
        if hazard is not None:
            replies.write(json.dumps({"refused": hazard}) + "\n")
            replies.flush()
            continue
        sys.stdout.flush()
        sys.stderr.flush()
        forked = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            _run_child(command, (commands.fileno(), replies.fileno()))
        try:
            os.setpgid(pid, pid)  # as the child does: whichever runs first
        except (PermissionError, ProcessLookupError):
            pass
        # However the child ends (an answer, a crash, its timeout, or the parent closing the
        # command pipe: Ctrl-C, or the parent died), what is left of its group is killed.
        returncode = wait_group(pid, float(command["timeout_s"]), stop_fd=commands.fileno())
        try:
            replies.write(json.dumps({"pid": pid, "returncode": returncode,
                                      "seconds": round(time.perf_counter() - forked, 3)}) + "\n")
            replies.flush()
        except (BrokenPipeError, OSError):  # the parent is gone
            return 1
    return 0


def main(argv: list[str]) -> int:
    # The protocol runs on duplicates of stdin/stdout; fd 1 and 2 go to stderr's log, so
    # nothing an import prints can corrupt a reply.
    commands = os.fdopen(os.dup(0), "r")
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    return serve_template(commands, replies, tuple(argv) or _PRELOAD)


# --- the parent's side ----------------------------------------------------------------


class TemplateFailed(Exception):
    """The template could not start or stopped answering (the message says why)."""


def _bad_fork_error(response: dict[str, Any] | None, output: str) -> str | None:
    """torch's bad-fork error, when that is why a forked child failed (its answer, else the
    last line of its output that names it); None otherwise. The child is then started again
    fresh: the error is the template's, not the repeat's."""
    if response is not None:
        if response.get("ok"):
            return None
        error = response.get("error") or {}
        for text in (str(error.get("message") or ""), str(error.get("detail") or "")):
            if BAD_FORK in text:
                return next(line.strip() for line in text.splitlines() if BAD_FORK in line)[:300]
        return None
    lines = [line.strip() for line in output.splitlines() if BAD_FORK in line]
    return lines[-1][:300] if lines else None


class Template:
    """One running template process (``python -P -m perfgate.measure.template``)."""

    def __init__(self, python: str | None = None, cwd: Path | None = None, preload: tuple[str, ...] = ()) -> None:
        """``preload``: the modules the template imports (default :data:`_PRELOAD`)."""
        self._tmp = tempfile.TemporaryDirectory(prefix="perfgate-template-")
        self._log = Path(self._tmp.name, "template.log")
        with open(self._log, "w") as log:
            try:
                self.proc = subprocess.Popen(
                    [python or sys.executable, "-P", "-m", "perfgate.measure.template", *preload],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True, cwd=cwd,
                    start_new_session=True,  # Ctrl-C reaches the parent only; it closes the template
                )
            except OSError as exc:
                self._tmp.cleanup()
                raise TemplateFailed(f"the template process cannot start: {exc}") from None
        ready = self._reply(_READY_TIMEOUT_S)
        if not ready.get("ready"):
            self.close()
            raise TemplateFailed(ready.get("why") or "the template did not start")
        self.import_s = float(ready.get("import_s", 0.0))
        self.processes = 0

    def _reply(self, timeout_s: float) -> dict[str, Any]:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout_s)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            self.proc.poll()
            tail = (self._log.read_text(errors="replace").strip().splitlines() or [""])[-1] if self._log.exists() else ""
            status = self.proc.returncode
            why = "did not answer" if not ready else f"stopped (exit status {status})"
            raise TemplateFailed(f"the template process {why}" + (f": {tail}" if tail else ""))
        return json.loads(line)

    def call(self, module: str, request: dict[str, Any], timeout_s: float) -> ChildRun:
        """Run one child of ``module`` on ``request``, as :func:`perfgate.measure.child.call`
        does; raises ``subprocess.TimeoutExpired`` and :class:`TemplateFailed`."""
        cwd = request.get("project_dir")
        if cwd is not None and not Path(cwd).is_dir():
            return ChildRun(None, f"the tree to measure in does not exist: {cwd}", 127)
        assert self.proc.stdin is not None
        with tempfile.TemporaryDirectory(prefix="perfgate-child-") as tmp:
            req, resp, log = Path(tmp, "request.json"), Path(tmp, "response.json"), Path(tmp, "output.log")
            req.write_text(dumps(request))
            command = {"module": module, "request": str(req), "response": str(resp), "log": str(log),
                       "cwd": cwd, "timeout_s": timeout_s}
            try:
                self.proc.stdin.write(json.dumps(command) + "\n")
                self.proc.stdin.flush()
            except (BrokenPipeError, OSError):
                raise TemplateFailed("the template process stopped") from None
            reply = self._reply(timeout_s + 60.0)
            self.processes += 1
            if "refused" in reply:
                raise TemplateFailed(f"the template refused to fork: {reply['refused']}")
            output = log.read_text(errors="replace") if log.exists() else ""
            if reply["returncode"] is None:
                raise subprocess.TimeoutExpired(module, timeout_s, output=output)
            response = json.loads(resp.read_text()) if resp.exists() else None
        bad_fork = _bad_fork_error(response, output)
        if bad_fork is not None:
            raise TemplateFailed(f"a child forked from the template could not use CUDA: {bad_fork}")
        return ChildRun(response, output, int(reply["returncode"]))

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.close()
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        self._tmp.cleanup()


@dataclass
class Starter:
    """How the repeats of one gate or run start: each ``call`` is one fresh process.

    ``mode`` ``"fork"``: forked from a template, replaced every ``renew_every`` processes or
    at :meth:`renew` (a paired gate renews it at every block); ``"fresh"``: a new interpreter
    each. A template that fails is reported once through ``warn`` and the rest start fresh.
    Use as a context manager, or call :meth:`close`.
    """

    mode: str = "fresh"
    renew_every: int | None = DEFAULT_RENEW_EVERY
    warn: Callable[[str], None] = lambda message: None
    preload: tuple[str, ...] = ()
    """The modules a template imports (default: torch and the measuring code)."""
    _template: Template | None = field(default=None, init=False, repr=False)
    _failed: str | None = field(default=None, init=False, repr=False)
    templates: int = field(default=0, init=False)
    """Templates started so far."""
    template_s: float = field(default=0.0, init=False)
    """Wall time spent starting them."""
    processes: int = field(default=0, init=False)
    """Processes started through this starter, forked or fresh."""

    def __post_init__(self) -> None:
        if self.mode not in START_MODES:
            raise ValueError(f"start must be one of {', '.join(START_MODES)}, got {self.mode!r}")

    @property
    def forking(self) -> bool:
        """True while repeats are forked (not yet fallen back)."""
        return self.mode == "fork" and self._failed is None

    def renew(self) -> None:
        """The next process forks from a new template (the block boundary)."""
        if self._template is not None:
            self._template.close()
            self._template = None

    def _fallback(self, why: str) -> None:
        self._failed = why
        self.renew()
        self.warn(f"warning: repeats start as fresh processes from here on: {why}")

    @property
    def fallback(self) -> str | None:
        """Why forking was given up (None: it was not, or was never asked for)."""
        return self._failed

    def call(self, module: str, request: dict[str, Any], timeout_s: float, *, python: str | None = None,
             fresh: bool = False) -> ChildRun:
        """One process for ``module``: forked, unless this starter starts fresh, ``python`` is
        another interpreter, or ``fresh`` (a script, whose ``__main__`` a fork would share)."""
        self.processes += 1
        if fresh or not self.forking or python is not None:
            return call(module, request, timeout_s, python=python)
        if self._template is not None and self.renew_every and self._template.processes >= self.renew_every:
            self.renew()
        if self._template is None:
            began = time.perf_counter()
            try:
                self._template = Template(preload=self.preload)
            except TemplateFailed as exc:
                self._fallback(str(exc))
                return call(module, request, timeout_s)
            finally:
                self.templates += 1
                self.template_s += time.perf_counter() - began
        try:
            return self._template.call(module, request, timeout_s)
        except TemplateFailed as exc:
            self._fallback(str(exc))
            return call(module, request, timeout_s)

    def close(self) -> None:
        self.renew()

    def __enter__(self) -> Starter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


FRESH = Starter("fresh")
"""Today's start: a new interpreter per process (what a caller without a starter gets; it
counts the processes of every such caller together, so it is never read for a cost)."""


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
