"""Both sides of a paired gate run from sibling trees of one shape.

``head/`` and ``base/`` of one temporary directory, each a detached git worktree of its
commit (the head's with the working tree's changes copied in): the two sides' paths differ
only in the side's name, instead of the head running from the repository and the base from
a temporary directory elsewhere. What the user sees names the repository's paths; the trees
are removed whatever ends the gate. Tree and plan functions are tested directly; the gate
itself only up to its first measurement (replaced by the test).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from factories import git, make_result

from perfgate.adapters import cli
from perfgate.adapters.ci import PairedSides
from perfgate.gate.bisect import Judgement, bisect, plan_bisection
from perfgate.gate.frontend import checked_out
from perfgate.gate.gating import as_repository
from perfgate.gate.worktree import BaseTree, sibling_worktrees
from perfgate.measure.runner import RunOutcome
from perfgate.model.errors import UsageError, WorkloadError
from perfgate.model.verdict import Verdict

TINY = Path("workloads") / "tiny_workloads.py"
FAST = ["--set", "width=16", "input_size=24", "batch_size=16", "steps=30", "--device", "cpu", "--no-telemetry",
        "--no-counters", "--blocks", "2", "--max-blocks", "2"]


def worktrees(root: Path) -> list[str]:
    return [line for line in git(root, "worktree", "list", "--porcelain").splitlines() if line.startswith("worktree ")]


def same_shape(head: Path, base: Path) -> None:
    assert (head.name, base.name) == ("head", "base")
    assert head.parent == base.parent
    assert len(str(head)) == len(str(base)) and len(head.parts) == len(base.parts)
    assert head.stat().st_dev == base.stat().st_dev  # one filesystem


def make_dirty(repo: Path) -> None:
    """A modified tracked file, a deleted one, a staged new file, an untracked file in a new
    directory, and an ignored one."""
    (repo / TINY).write_text((repo / TINY).read_text() + "\n# edited in the working tree\n")
    (repo / "doomed.txt").write_text("tracked, then deleted\n")
    git(repo, "add", "doomed.txt")
    git(repo, "commit", "-qm", "a file to delete")
    (repo / "doomed.txt").unlink()
    (repo / "staged.txt").write_text("staged, never committed\n")
    git(repo, "add", "staged.txt")
    (repo / "extra").mkdir()
    (repo / "extra" / "new_file.py").write_text("UNTRACKED = True\n")
    (repo / "perfgate-results").mkdir()
    (repo / "perfgate-results" / "ignored.json").write_text("{}\n")


def test_allow_dirty_puts_the_working_trees_changes_in_the_head_tree_only(repo: Path) -> None:
    make_dirty(repo)
    with checked_out(repo, "HEAD", allow_dirty=True) as trees:
        head, base = trees.head.root, trees.base.root
        same_shape(head, base)
        assert trees.head.commit == trees.base.commit == git(repo, "rev-parse", "HEAD")
        assert trees.head.repo == trees.base.repo == repo.resolve()
        assert "# edited in the working tree" in (head / TINY).read_text()
        assert "# edited" not in (base / TINY).read_text()
        assert (head / "extra" / "new_file.py").read_text() == "UNTRACKED = True\n"
        assert (head / "staged.txt").is_file() and not (base / "staged.txt").exists()
        assert not (head / "doomed.txt").exists() and (base / "doomed.txt").is_file()
        assert not (base / "extra").exists()
        assert not (head / "perfgate-results").exists()  # ignored: not copied
        # git in the head tree says what the repository's says of its tracked files (the results' git_dirty)
        status = git(head, "status", "--porcelain", "--untracked-files=no").splitlines()
        assert sorted(line.split() for line in status) == [
            ["A", "staged.txt"], ["D", "doomed.txt"], ["M", TINY.as_posix()]]
        assert git(base, "status", "--porcelain") == ""
        parent = trees.parent
        assert len(worktrees(repo)) == 3
    assert not parent.exists()
    assert worktrees(repo) == [f"worktree {repo.resolve()}"]
    assert "# edited in the working tree" in (repo / TINY).read_text()  # the user's tree untouched
    assert (repo / "perfgate-results" / "ignored.json").is_file()


def test_a_clean_tree_is_heads_commit_and_tracked_changes_need_allow_dirty(repo: Path) -> None:
    git(repo, "commit", "-q", "--allow-empty", "-m", "second")
    with checked_out(repo, "HEAD~1", allow_dirty=False) as trees:
        assert trees.head.commit == git(repo, "rev-parse", "HEAD")
        assert trees.base.commit == trees.commit == git(repo, "rev-parse", "HEAD~1")
        same_shape(trees.head.root, trees.base.root)
        assert git(trees.head.root, "status", "--porcelain") == ""
    (repo / TINY).write_text((repo / TINY).read_text() + "\n# edited\n")
    with pytest.raises(UsageError, match="uncommitted changes"), checked_out(repo, "HEAD", allow_dirty=False):
        pass
    assert worktrees(repo) == [f"worktree {repo.resolve()}"]


def test_the_trees_are_removed_when_the_block_raises(repo: Path) -> None:
    with pytest.raises(RuntimeError), checked_out(repo, "HEAD", allow_dirty=False) as trees:
        parent = trees.parent
        raise RuntimeError("boom")
    assert not parent.exists() and worktrees(repo) == [f"worktree {repo.resolve()}"]


def test_both_sides_jobs_run_in_their_trees_and_the_trees_go_after_a_gate_that_raises(
        repo: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import perfgate.gate.gating as gating

    (repo / TINY).write_text((repo / TINY).read_text() + "\n# edited in the working tree\n")
    seen = []
    texts: list[str] = []

    def measured(head, base, names, **kwargs):  # type: ignore[no-untyped-def]
        same_shape(head.project_dir, base.project_dir)  # while they exist
        texts.extend(Path(side.jobs["tiny"].workload.source.removeprefix("file:")).read_text() for side in (head, base))
        seen.append((head, base, {p: p.exists() for p in (head.project_dir, base.project_dir)}))
        raise RuntimeError("the test stops the gate at its first measurement")

    monkeypatch.setattr(gating, "measure_paired", measured)
    with pytest.raises(RuntimeError, match="the test stops the gate"):
        cli.main(["gate", "tiny", "--against", "HEAD", "--allow-dirty", *FAST])
    capsys.readouterr()
    ((head, base, existed),) = seen
    assert all(existed.values())
    head_file = Path(head.jobs["tiny"].workload.source.removeprefix("file:"))
    base_file = Path(base.jobs["tiny"].workload.source.removeprefix("file:"))
    assert head_file == head.project_dir / TINY and base_file == base.project_dir / TINY
    assert head_file.parent.parent == head.project_dir and base_file.parent.parent == base.project_dir
    assert "# edited in the working tree" in texts[0] and "# edited" not in texts[1]  # --allow-dirty: the head's
    assert not head.project_dir.parent.exists()  # removed after the gate raised
    assert worktrees(repo) == [f"worktree {repo.resolve()}"]


def test_what_the_head_side_records_and_reports_names_the_repository(tmp_path: Path) -> None:
    repo, root = (tmp_path / "project").resolve(), (tmp_path / "trees" / "head").resolve()
    tree = BaseTree("a" * 40, root, repo)
    assert tree.unmirror(root / "workloads" / "w.py") == repo / "workloads" / "w.py"
    assert tree.unmirror(tree.mirror(repo / "train.py")) == repo / "train.py"
    assert tree.unmirror(Path("/elsewhere/w.py")) == Path("/elsewhere/w.py")
    result = make_result()
    result = type(result)(**{**result.__dict__, "workload_source": f"file:{root}/workloads/w.py"})
    error = WorkloadError(f'{root}/workloads/w.py: boom', detail=f'File "{root}/workloads/w.py", line 3')
    outcome = as_repository(RunOutcome({"tiny": result}, {"other": error}), tree)
    assert outcome.results["tiny"].workload_source == f"file:{repo}/workloads/w.py"
    assert outcome.errors["other"].message == f"{repo}/workloads/w.py: boom" == str(outcome.errors["other"])
    assert outcome.errors["other"].detail == f'File "{repo}/workloads/w.py", line 3'
    assert str(root) not in outcome.errors["other"].message
    untouched = RunOutcome({"tiny": result}, {})
    assert as_repository(untouched, None).results["tiny"].workload_source == f"file:{root}/workloads/w.py"


def test_ci_checks_both_sides_out_as_sibling_trees(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    git(workspace, "init", "-q")
    (workspace / "a.txt").write_text("base\n")
    git(workspace, "add", "a.txt")
    git(workspace, "commit", "-qm", "base")
    base_sha = git(workspace, "rev-parse", "HEAD")
    (workspace / "a.txt").write_text("head\n")
    git(workspace, "commit", "-qam", "head")
    head_sha = git(workspace, "rev-parse", "HEAD")
    # the workflow's second checkout, inside the workspace: its own repository, at the base
    subprocess.run(["git", "clone", "-q", str(workspace), str(workspace / "base")], check=True)
    git(workspace / "base", "checkout", "-q", "--detach", base_sha)
    monkeypatch.chdir(workspace)
    sides = PairedSides(BaseTree(base_sha, (workspace / "base").resolve(), workspace.resolve()), base_sha)
    with sides.trees() as trees:
        same_shape(trees.head.root, trees.base.root)
        assert (trees.head.commit, trees.base.commit) == (head_sha, base_sha)
        assert (trees.head.root / "a.txt").read_text() == "head\n"
        assert (trees.base.root / "a.txt").read_text() == "base\n"
        assert trees.base.mirror(workspace / "a.txt") == trees.base.root / "a.txt"  # mirrors the workspace
        parent = trees.parent
    assert not parent.exists()
    assert worktrees(workspace) == [f"worktree {workspace.resolve()}"]
    assert worktrees(workspace / "base") == [f"worktree {(workspace / 'base').resolve()}"]
    # --base-dir that is no git checkout: the base commit from the workspace's repository
    with PairedSides(BaseTree(base_sha, tmp_path / "plain", workspace.resolve()), None).trees() as trees:
        assert (trees.base.root / "a.txt").read_text() == "base\n"
    assert worktrees(workspace) == [f"worktree {workspace.resolve()}"]


def test_bisect_checks_good_and_each_candidate_out_as_siblings(tmp_path: Path) -> None:
    root = tmp_path / "history"
    root.mkdir()
    git(root, "init", "-q")
    for i in range(4):
        (root / "notes.txt").write_text(f"c{i}\n")
        git(root, "add", "-A")
        git(root, "commit", "-qm", f"c{i}")
    shas = git(root, "rev-list", "--reverse", "HEAD").split()
    roots = []

    def judge(candidate: BaseTree, good: BaseTree, blocks: int, max_blocks: int) -> Judgement:
        roots.append((candidate.root, good.root))
        same_shape(candidate.root, good.root)
        return Judgement(Verdict.REGRESSION, "slower", blocks)

    result = bisect(plan_bisection(root, shas[0], shas[3]), judge, blocks=2, max_blocks=2)
    assert result.first_bad == shas[1] and roots
    assert not roots[0][0].parent.exists()
    assert worktrees(root) == [f"worktree {root.resolve()}"]


def test_sibling_worktrees_of_two_commits(repo: Path) -> None:
    first = git(repo, "rev-parse", "HEAD")
    (repo / TINY).write_text((repo / TINY).read_text() + "\n# second\n")
    git(repo, "commit", "-qam", "second")
    with sibling_worktrees(repo, git(repo, "rev-parse", "HEAD"), first) as trees:
        assert "# second" in (trees.head.root / TINY).read_text()
        assert "# second" not in (trees.base.root / TINY).read_text()
    assert worktrees(repo) == [f"worktree {repo.resolve()}"]
