"""The base side of a paired gate: its commit checked out as a temporary git worktree.

The worktree lives in a temporary directory outside the repository and is removed when
the gate ends, whether it ends by a verdict, an error, Ctrl-C or SIGTERM (a cancelled CI
job). Bad input (a ref that names no commit, a shallow clone that lacks it, uncommitted
changes in the head) is one line and exit 2, before anything is measured.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from perfgate.model.errors import UsageError

__all__ = ["BaseTree", "base_worktree", "check_clean", "repository_root", "resolve_commit"]

_GIT_TIMEOUT_S = 120.0


def _git(repo: Path, *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
    # Hooks and fsmonitor never run: the tree under test is not trusted to run code in git.
    cmd = ["git", "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-C", str(repo), *args]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=_GIT_TIMEOUT_S)
    except FileNotFoundError:
        raise UsageError("git is not installed: the paired gate needs it to check out the base commit") from None
    except subprocess.TimeoutExpired:
        raise UsageError(f"git {' '.join(args[:2])} did not finish within {_GIT_TIMEOUT_S:.0f} s") from None
    if check and done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise UsageError(f"git {' '.join(args[:2])} failed: {tail}")
    return done


def repository_root(directory: Path) -> Path:
    done = _git(directory, "rev-parse", "--show-toplevel")
    if done.returncode != 0:
        raise UsageError(f"{directory}: not inside a git repository; --against needs one")
    return Path(done.stdout.strip())


def resolve_commit(repo: Path, ref: str) -> str:
    """The full sha ``ref`` names, or one line saying why it names none."""
    if not ref or ref.startswith("-"):
        raise UsageError(f"--against {ref!r}: not a git revision")
    done = _git(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}")
    if done.returncode == 0:
        return done.stdout.strip()
    shallow = _git(repo, "rev-parse", "--is-shallow-repository").stdout.strip() == "true"
    if shallow:
        raise UsageError(f"--against {ref}: no such commit in this shallow clone; fetch the base "
                         "(actions/checkout with fetch-depth: 0, or git fetch --unshallow)")
    raise UsageError(f"--against {ref}: names no commit in {repo}")


def check_clean(repo: Path) -> None:
    """Refuse a head with uncommitted changes to tracked files: the report names commits."""
    done = _git(repo, "status", "--porcelain", "--untracked-files=no")
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
def _sigterm_as_interrupt() -> Iterator[None]:
    """A cancelled CI job gets SIGTERM: turn it into KeyboardInterrupt so cleanup runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def base_worktree(repo: Path, commit: str) -> Iterator[BaseTree]:
    """Check ``commit`` out as a detached worktree in a temporary directory; always removed."""
    parent = Path(tempfile.mkdtemp(prefix="perfgate-base-"))
    root = parent / "tree"
    with _sigterm_as_interrupt():
        try:
            _git(repo, "worktree", "add", "--detach", "--force", str(root), commit, check=True)
            yield BaseTree(commit, root, repo)
        finally:
            _git(repo, "worktree", "remove", "--force", str(root))
            shutil.rmtree(parent, ignore_errors=True)
            _git(repo, "worktree", "prune")
