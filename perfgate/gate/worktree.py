"""The base side of a paired gate: its commit checked out as a temporary git worktree.

The worktree lives in a temporary directory outside the repository and is removed when
the gate ends, whether it ends by a verdict, an error, Ctrl-C or SIGTERM (a cancelled CI
job). Bad input (a ref that names no commit, a shallow clone that lacks it, uncommitted
changes in the head) is one line and exit 2, before anything is measured.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from perfgate.model.errors import UsageError
from perfgate.text.inert import terminal

__all__ = ["BaseTree", "base_worktree", "check_clean", "git", "repository_root", "resolve_commit", "sigterm_as_interrupt"]

_GIT_TIMEOUT_S = 120.0


def git(repo: Path, *args: str, check: bool = False,
        needed: str = "the paired gate needs it to check out the base commit") -> subprocess.CompletedProcess[str]:
    """``git -C repo ARGS`` with hooks and fsmonitor off (the tree under test is not trusted to
    run code in git), a bounded wait and messages in English; ``needed`` says, when git is
    missing, what needed it. ``check``: a failure is one UsageError line with git's last line."""
    cmd = ["git", "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-C", str(repo), *args]
    env = {**os.environ, "LC_ALL": "C", "GIT_TERMINAL_PROMPT": "0"}
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=_GIT_TIMEOUT_S, env=env)
    except FileNotFoundError:
        raise UsageError(f"git is not installed: {needed}") from None
    except subprocess.TimeoutExpired:
        raise UsageError(f"git {' '.join(args[:2])} did not finish within {_GIT_TIMEOUT_S:.0f} s") from None
    if check and done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise UsageError(f"git {' '.join(args[:2])} failed: {tail}")
    return done


def repository_root(directory: Path, *, who: str = "--against",
                    needed: str = "the paired gate needs it to check out the base commit") -> Path:
    done = git(directory, "rev-parse", "--show-toplevel", needed=needed)
    if done.returncode != 0:
        raise UsageError(f"{directory}: not inside a git repository; {who} needs one")
    return Path(done.stdout.strip())


def resolve_commit(repo: Path, ref: str, *, role: str = "--against",
                   unshallow: str = "fetch the base (actions/checkout with fetch-depth: 0, or git fetch --unshallow)",
                   needed: str = "the paired gate needs it to check out the base commit") -> str:
    """The full sha ``ref`` names, or one line saying why it names none (``role``: the option
    or argument that gave it; ``unshallow``: what to do in a shallow clone that lacks it)."""
    if not ref or ref.startswith("-"):
        raise UsageError(f"{role} {ref!r}: not a git revision")
    done = git(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}", needed=needed)
    if done.returncode == 0:
        return done.stdout.strip()
    if git(repo, "rev-parse", "--is-shallow-repository", needed=needed).stdout.strip() == "true":
        raise UsageError(f"{role} {terminal(ref)}: no such commit in this shallow clone; {unshallow}")
    raise UsageError(f"{role} {terminal(ref)}: names no commit in {repo}")


def check_clean(repo: Path) -> None:
    """Refuse a head with uncommitted changes to tracked files: the report names commits."""
    done = git(repo, "status", "--porcelain", "--untracked-files=no")
    if done.returncode != 0:
        raise UsageError(f"{repo}: git status failed")
    changed = done.stdout.strip().splitlines()
    if changed:
        first = changed[0][3:]
        raise UsageError(f"the working tree has uncommitted changes ({len(changed)} file(s), e.g. {first}); "
                         "commit or stash them, or pass --allow-dirty to measure the working tree as the head")


@dataclass(frozen=True)
class BaseTree:
    """The base commit checked out for measuring: ``root`` mirrors the repository root."""

    commit: str
    root: Path
    repo: Path

    def mirror(self, path: Path) -> Path:
        """Where ``path`` (inside the head repository) lies in the base tree."""
        resolved = path.resolve()
        try:
            return self.root / resolved.relative_to(self.repo.resolve())
        except ValueError:
            return resolved  # outside the repository: the same file for both sides


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """A cancelled CI job gets SIGTERM: turn it into KeyboardInterrupt so cleanup runs.

    A Python handler already installed (the front end's, which also keeps which signal came,
    for the exit code 143) is called first; it raises, and whatever it does, this raises."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: FrameType | None) -> None:
        if callable(previous):
            previous(signum, frame)
        raise KeyboardInterrupt

    previous = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def base_worktree(repo: Path, commit: str) -> Iterator[BaseTree]:
    """Check ``commit`` out as a detached worktree in a temporary directory; always removed."""
    parent = Path(tempfile.mkdtemp(prefix="perfgate-base-"))
    root = parent / "tree"
    with sigterm_as_interrupt():
        try:
            git(repo, "worktree", "add", "--detach", "--force", str(root), commit, check=True)
            yield BaseTree(commit, root, repo)
        finally:
            git(repo, "worktree", "remove", "--force", str(root))
            shutil.rmtree(parent, ignore_errors=True)
            git(repo, "worktree", "prune")
