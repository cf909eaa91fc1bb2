"""Both sides of a paired gate, each checked out as a temporary git worktree.

The two sides run from sibling trees of one shape: one temporary directory holds ``head/``
and ``base/``, each a detached worktree of its commit (:func:`sibling_worktrees`), so that
both sides' paths have the same length and depth and lie on the same filesystem, and
neither side runs from the repository itself while the other runs from a copy elsewhere.
The head tree is HEAD's commit with what the working tree adds to it copied in
(:func:`carry_working_tree`); what the user sees keeps naming the repository's paths
(:meth:`BaseTree.unmirror`, :meth:`BaseTree.shown`). The trees are removed when the gate
ends, whether it ends by a verdict, an error, Ctrl-C or SIGTERM (a cancelled CI job), and
no worktree entry is left behind. Bad input (a ref that names no commit, a shallow clone
that lacks it, uncommitted changes in the head) is one line and exit 2, before anything is
measured.
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
from typing import Any, NoReturn

from perfgate.model.errors import UsageError
from perfgate.text.inert import terminal

__all__ = ["BASE_NAME", "HEAD_NAME", "BaseTree", "SiblingTrees", "base_worktree", "carry_working_tree", "check_clean",
           "git", "repository_root", "resolve_commit", "sibling_worktrees", "sigterm_as_interrupt", "tree_parent",
           "worktree_at"]

_GIT_TIMEOUT_S = 120.0

HEAD_NAME = "head"
BASE_NAME = "base"
"""The two sides' trees in their parent directory: names of one length, at one depth."""


def git(repo: Path, *args: str, check: bool = False,
        needed: str = "the paired gate needs it to check out the base commit") -> subprocess.CompletedProcess[str]:
    """``git -C repo ARGS`` with hooks and fsmonitor off (the tree under test is not trusted to
    run code in git), a bounded wait and messages in English; ``needed`` says, when git is
    missing, what needed it. ``check``: a failure is one UsageError line with git's last line."""
    done: subprocess.CompletedProcess[str] = _run_git(repo, args, needed=needed, text=True)
    if check and done.returncode != 0:
        _failed(args, done.stderr)
    return done


def _run_git(repo: Path, args: tuple[str, ...], *, needed: str, text: bool) -> subprocess.CompletedProcess[Any]:
    """The one way perfgate runs git (:func:`git`): hooks and fsmonitor off, English, a bounded
    wait; output as text, or as bytes (``text=False``) for file names of any encoding."""
    cmd = ["git", "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-C", str(repo), *args]
    env = {**os.environ, "LC_ALL": "C", "GIT_TERMINAL_PROMPT": "0"}
    try:
        return subprocess.run(cmd, capture_output=True, text=text, timeout=_GIT_TIMEOUT_S, env=env)
    except FileNotFoundError:
        raise UsageError(f"git is not installed: {needed}") from None
    except subprocess.TimeoutExpired:
        raise UsageError(f"git {' '.join(args[:2])} did not finish within {_GIT_TIMEOUT_S:.0f} s") from None


def _failed(args: tuple[str, ...], stderr: str) -> NoReturn:
    tail = (stderr.strip().splitlines() or ["no message"])[-1]
    raise UsageError(f"git {' '.join(args[:2])} failed: {tail}")


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
    """A commit checked out for measuring (either side's tree): ``root`` mirrors the
    repository root ``repo``, the repository whose paths the user gave and sees."""

    commit: str
    root: Path
    repo: Path

    def mirror(self, path: Path) -> Path:
        """Where ``path`` (inside the repository) lies in this tree."""
        resolved = path.resolve()
        try:
            return self.root / resolved.relative_to(self.repo.resolve())
        except ValueError:
            return resolved  # outside the repository: the same file for both sides

    def unmirror(self, path: Path) -> Path:
        """The inverse of :meth:`mirror`: where ``path`` (inside this tree) lies in the
        repository; a path outside the tree is returned as it is."""
        absolute = Path(os.path.abspath(path))
        for root in dict.fromkeys((self.root, self.root.resolve())):
            try:
                return self.repo.resolve() / absolute.relative_to(root)
            except ValueError:
                continue
        return path

    def shown(self, text: str) -> str:
        """``text`` (a message, a traceback, a recorded source) with this tree's paths
        named as the repository's (:meth:`unmirror` over free text)."""
        repo = str(self.repo.resolve())
        for root in dict.fromkeys((str(self.root.resolve()), str(self.root))):
            text = text.replace(root, repo)
        return text


@dataclass(frozen=True)
class SiblingTrees:
    """Both sides of a paired gate: ``head`` and ``base``, the trees ``head/`` and ``base/``
    of one temporary parent directory (:func:`sibling_worktrees`)."""

    head: BaseTree
    base: BaseTree

    @property
    def commit(self) -> str:
        """The base commit (what the gate is ``--against``)."""
        return self.base.commit

    @property
    def parent(self) -> Path:
        return self.head.root.parent


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
def tree_parent() -> Iterator[Path]:
    """A new temporary directory for the trees of one gate (its path resolved, so that the
    trees' paths are the ones their processes see); removed with all it holds."""
    parent = Path(tempfile.mkdtemp(prefix="perfgate-trees-")).resolve()
    with sigterm_as_interrupt():
        try:
            yield parent
        finally:
            shutil.rmtree(parent, ignore_errors=True)


@contextlib.contextmanager
def worktree_at(source: Path, commit: str, root: Path, *, repo: Path | None = None) -> Iterator[BaseTree]:
    """Check ``commit`` of the repository ``source`` out as a detached worktree at ``root``
    (which must not exist yet); removed afterwards, and its worktree entry pruned. ``repo``:
    the repository whose paths the tree mirrors (default: ``source``; ``perfgate ci`` checks
    the base out of the base checkout's repository but mirrors the pull request's)."""
    with sigterm_as_interrupt():
        try:
            git(source, "worktree", "add", "--detach", "--force", str(root), commit, check=True)
            yield BaseTree(commit, root, repo or source)
        finally:
            git(source, "worktree", "remove", "--force", str(root))
            shutil.rmtree(root, ignore_errors=True)
            git(source, "worktree", "prune")


@contextlib.contextmanager
def base_worktree(repo: Path, commit: str) -> Iterator[BaseTree]:
    """Check ``commit`` out as a detached worktree in a temporary directory; always removed."""
    with tree_parent() as parent, worktree_at(repo, commit, parent / BASE_NAME) as tree:
        yield tree


@contextlib.contextmanager
def sibling_worktrees(repo: Path, head_commit: str, base_commit: str, *, base_source: Path | None = None,
                      working_tree: bool = False) -> Iterator[SiblingTrees]:
    """Both sides of a paired gate as sibling trees of one shape: ``head/`` and ``base/`` of
    one temporary directory, each a detached worktree of its commit, both mirroring ``repo``.

    Same parent, same name length, same depth, same filesystem: the two sides' processes
    see paths that differ only in the side's name, instead of the head running from the
    repository and the base from a temporary directory elsewhere (a suspected cause of a
    shift held over a whole A/A gate). ``base_source``: the repository the base commit is
    checked out of (default: ``repo``). ``working_tree``: the head tree also gets what the
    working tree of ``repo`` adds to ``head_commit`` (:func:`carry_working_tree`). Both
    trees are always removed, and their worktree entries pruned.
    """
    with tree_parent() as parent, \
            worktree_at(base_source or repo, base_commit, parent / BASE_NAME, repo=repo) as base, \
            worktree_at(repo, head_commit, parent / HEAD_NAME) as head:
        if working_tree:
            carry_working_tree(repo, head.root)
        yield SiblingTrees(head, base)


def _git_paths(repo: Path, *args: str) -> list[str]:
    """The NUL-separated paths ``git -C repo ARGS -z`` prints, decoded as the file system's
    names (any bytes survive the round trip)."""
    done = _run_git(repo, (*args, "-z"), needed="the paired gate needs it to copy the working tree", text=False)
    if done.returncode != 0:
        _failed(args, os.fsdecode(done.stderr))
    return [os.fsdecode(p) for p in done.stdout.split(b"\0") if p]


def _through_link(root: Path, relative: str) -> bool:
    """Whether a directory on the way to ``root / relative`` is a symbolic link (writing
    there could reach outside the tree)."""
    here = root
    for part in Path(relative).parts[:-1]:
        here = here / part
        if here.is_symlink():
            return True
    return False


def _copy_entry(source: Path, target: Path) -> None:
    """``source`` (a file, a symbolic link as a link, or a directory) copied over ``target``."""
    if target.is_symlink() or target.is_file():
        target.unlink()
    elif target.is_dir():
        shutil.rmtree(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    if source.is_dir() and not source.is_symlink():
        shutil.copytree(source, target, symlinks=True)
    else:
        shutil.copy2(source, target, follow_symlinks=False)


def carry_working_tree(repo: Path, root: Path) -> None:
    """Make ``root`` (a fresh worktree of ``repo``'s HEAD commit) hold what the working tree
    of ``repo`` holds, as git sees it: the tracked files that differ from HEAD, staged or not
    (``git diff HEAD --name-only``; one deleted there is deleted here), and the untracked
    files git does not ignore (``git ls-files --others --exclude-standard``). Ignored files
    (build outputs, caches, results) are not copied; nor are submodules or nested
    repositories.

    Each file is copied byte for byte as it lies in the working tree (a symbolic link as a
    link), not applied as a patch: what the head side runs is exactly what the user's tree
    holds, whatever its line endings, filters or binary content, and no patch can fail to
    apply. The new files among the tracked changes are marked intent-to-add in ``root``, so
    that git there reports the tree modified exactly when the repository's tracked files
    are (the results' ``git_dirty``)."""
    repo = repo.resolve()
    changed = _git_paths(repo, "diff", "HEAD", "--name-only", "--no-renames", "--ignore-submodules", "--no-ext-diff")
    added = set(_git_paths(repo, "diff", "HEAD", "--name-only", "--no-renames", "--ignore-submodules",
                           "--no-ext-diff", "--diff-filter=A"))
    untracked = [p for p in _git_paths(repo, "ls-files", "--others", "--exclude-standard")
                 if not p.endswith("/")]  # a nested repository is listed as its directory: not copied
    for relative in dict.fromkeys([*changed, *untracked]):
        if _through_link(root, relative):
            continue
        source, target = repo / relative, root / relative
        if os.path.lexists(source):
            _copy_entry(source, target)
        elif target.is_symlink() or target.is_file():
            target.unlink()
        elif target.is_dir():
            shutil.rmtree(target)
    new = [p for p in changed if p in added and os.path.lexists(root / p)]
    if new:
        git(root, "--literal-pathspecs", "add", "--intent-to-add", "--", *new, check=True)
