"""``perfgate gate --against REF`` end to end in a scratch git repository.

Real runs of a tiny CPU workload: the base commit is checked out as a temporary
worktree, both sides run in ABBA blocks, and the worktree is gone afterwards whatever
happened. Bad input is one line and exit 2, with the head's results still written.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from perfgate.adapters import cli

FIXTURE = Path(__file__).parent / "fixtures" / "tiny_workloads.py"
SETS = ["--set", "width=16", "input_size=24", "batch_size=16", "steps=30", "--device", "cpu", "--no-telemetry"]
# The counted runs (a process per side, ~10 s each here) are tests/test_counter_gate.py's
# subject; the GitHub-flow tests below keep them.
FAST = [*SETS, "--looks", "1", "--no-counters"]


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


@pytest.fixture()
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "project"
    (root / "workloads").mkdir(parents=True)
    shutil.copy(FIXTURE, root / "workloads" / "tiny_workloads.py")
    (root / ".gitignore").write_text("perfgate-results/\n")
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "tiny workload")
    monkeypatch.chdir(root)
    monkeypatch.setenv("PERFGATE_CACHE_DIR", str(tmp_path / "cache"))
    return root


def commit_change(root: Path, old: str, new: str, message: str) -> None:
    path = root / "workloads" / "tiny_workloads.py"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))
    git(root, "commit", "-qam", message)


def worktrees(root: Path) -> list[str]:
    return [line for line in git(root, "worktree", "list", "--porcelain").splitlines() if line.startswith("worktree ")]


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_a_ref_that_names_no_commit_is_one_line_and_exit_2(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["gate", "tiny", "--against", "no-such-branch", *FAST], capsys)
    assert code == 2
    assert err.strip().splitlines() == ["perfgate: error: --against no-such-branch: names no commit in "
                                        f"{repo.resolve()}"]


def test_a_dirty_head_is_refused_unless_allowed(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (repo / "workloads" / "tiny_workloads.py").write_text((repo / "workloads" / "tiny_workloads.py").read_text()
                                                          + "\n# edited\n")
    code, _, err = run_cli(["gate", "tiny", "--against", "HEAD", *FAST], capsys)
    assert code == 2
    assert "uncommitted changes" in err and "--allow-dirty" in err and len(err.strip().splitlines()) == 1


def test_a_shallow_clone_without_the_base_says_so(repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    commit_change(repo, "nan_at_call\": -1", "nan_at_call\": -2", "second")
    first = git(repo, "rev-parse", "HEAD~1")
    shallow = tmp_path / "shallow"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{repo}", str(shallow)], check=True)
    monkeypatch.chdir(shallow)
    code, _, err = run_cli(["gate", "tiny", "--against", first, *FAST], capsys)
    assert code == 2
    assert "shallow clone" in err and "fetch-depth: 0" in err


@pytest.mark.slow
def test_paired_gate_catches_a_slower_forward_and_names_the_design(repo: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    base = git(repo, "rev-parse", "HEAD")
    commit_change(repo, 'os.environ.get("TINY_FORWARD_DELAY_MS", "0")', 'os.environ.get("TINY_FORWARD_DELAY_MS", "40")',
                  "forward 40 ms slower")
    code, out, err = run_cli(["gate", "tiny", "--against", "HEAD~1", "--blocks", "3", "--markdown", "r.md",
                              "--json", "r.json", *FAST], capsys)
    assert code == 1, out + err
    assert f"Decided by: paired, 3 ABBA blocks against {base[:7]}." in out
    text = (repo / "r.md").read_text()
    assert "| phase | base ms/step | head ms/step |" in text
    forward = next(line for line in text.splitlines() if line.startswith("| forward |"))
    assert "⚠️ slower" in forward
    assert (repo / "perfgate-results" / "tiny.json").is_file()
    assert (repo / "perfgate-results" / "base" / "tiny.json").is_file()
    assert "block 3/3 head" in err
    assert worktrees(repo) == [f"worktree {repo.resolve()}"]


@pytest.mark.slow
@pytest.mark.extended
def test_the_same_commit_against_itself_is_no_regression(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["gate", "tiny", "--against", "HEAD", "--blocks", "3", *FAST], capsys)
    assert code in (0, 3), out + err
    assert "Decided by: paired, 3 ABBA blocks against" in out
    assert worktrees(repo) == [f"worktree {repo.resolve()}"]


@pytest.mark.slow
def test_a_base_without_the_workload_is_an_error_and_the_head_is_still_measured(
        repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    commit_change(repo, 'name="tiny",', 'name="tiny2",', "rename the workload")
    code, out, _ = run_cli(["gate", "tiny2", "--against", "HEAD~1", "--repeats", "2", *FAST], capsys)
    assert code == 2
    assert "tiny2: ERROR - the base commit" in out and "has no workload 'tiny2'" in out
    assert (repo / "perfgate-results" / "tiny2.json").is_file()


@pytest.mark.slow
def test_a_base_side_that_crashes_is_an_error_and_the_head_results_are_written(
        repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    commit_change(repo, 'if p.extra["fail_build"]:', 'if not p.extra["fail_build"]:', "break the builder")
    commit_change(repo, 'if not p.extra["fail_build"]:', 'if p.extra["fail_build"]:', "mend the builder")
    code, out, _ = run_cli(["gate", "tiny", "--against", "HEAD~1", "--blocks", "2", *FAST], capsys)
    assert code == 2
    assert "tiny: ERROR - the base side" in out and "the builder blew up on purpose" in out
    assert (repo / "perfgate-results" / "tiny.json").is_file()
    assert worktrees(repo) == [f"worktree {repo.resolve()}"]


def test_the_worktree_is_removed_on_ctrl_c(repo: Path, capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    import perfgate.gate.gating as gating

    seen: list[list[str]] = []

    def interrupted(*args, **kwargs):
        seen.append(worktrees(repo))
        raise KeyboardInterrupt

    monkeypatch.setattr(gating, "measure_paired", interrupted)
    code, _, err = run_cli(["gate", "tiny", "--against", "HEAD", *FAST], capsys)
    assert code == 130 and "interrupted" in err
    assert len(seen[0]) == 2  # the base worktree existed while measuring
    assert worktrees(repo) == [f"worktree {repo.resolve()}"]
    assert not Path(seen[0][1].removeprefix("worktree ")).exists()


@pytest.mark.slow
@pytest.mark.extended
def test_pytest_perfgate_against_runs_the_paired_gate(repo: Path) -> None:
    commit_change(repo, 'os.environ.get("TINY_FORWARD_DELAY_MS", "0")', 'os.environ.get("TINY_FORWARD_DELAY_MS", "40")',
                  "forward 40 ms slower")
    sets = [arg for s in ("width=16", "input_size=24", "batch_size=16", "steps=30") for arg in ("--perfgate-set", s)]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs", "--perfgate", "--perfgate-device", "cpu",
         "--perfgate-workloads", "tiny",
         "--perfgate-against", "HEAD~1", "--perfgate-blocks", "2", "--perfgate-looks", "1",
         "--perfgate-markdown", "r.md", *sets],
        cwd=repo, capture_output=True, text=True, timeout=1800)
    output = done.stdout + done.stderr
    assert "ABBA block(s) of four processes each" in output, output
    assert "block 2/2 head" in output
    text = (repo / "r.md").read_text()
    assert "(paired, 2 ABBA blocks against " in text
    assert worktrees(repo) == [f"worktree {repo.resolve()}"]
    # a usage error is one line: the gate could not run
    bad = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--perfgate", "--perfgate-device", "cpu",
         "--perfgate-workloads", "tiny",
         "--perfgate-against", "no-such-ref", *sets], cwd=repo, capture_output=True, text=True, timeout=600)
    assert bad.returncode != 0
    assert "--against no-such-ref: names no commit" in bad.stdout + bad.stderr


# --- the GitHub flow: the pull request's job measures, the judge decides -------------------------

def _github_measure(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                    capsys: pytest.CaptureFixture[str], base_sha: str, workload: str) -> Path:
    import json

    base_dir = tmp_path / "base-checkout"
    subprocess.run(["git", "clone", "-q", str(repo), str(base_dir)], check=True)
    git(base_dir, "checkout", "-q", base_sha)
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {
        "number": 9, "base": {"ref": "main", "sha": base_sha, "repo": {"full_name": "acme/x"}},
        "head": {"ref": "topic", "sha": git(repo, "rev-parse", "HEAD"), "repo": {"full_name": "acme/x"}}}}))
    monkeypatch.setenv("GITHUB_EVENT_NAME", "pull_request")
    monkeypatch.setenv("GITHUB_EVENT_PATH", str(event))
    for name in ("GITHUB_OUTPUT", "GITHUB_STEP_SUMMARY"):
        monkeypatch.delenv(name, raising=False)
    results = tmp_path / "perfgate-results"
    code, out, err = run_cli(["ci", workload, "--measure-only", "--base-dir", str(base_dir), "--out", str(results),
                              "--artifacts", str(tmp_path / "artifacts"), *SETS], capsys)
    assert code == 0, out + err
    return base_dir


def _judge(results: Path, base_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code, out, err = run_cli(["judge", str(results), "--base-dir", str(base_dir),
                              "--artifacts", str(tmp_path / "judged")], capsys)
    return code, (tmp_path / "judged" / "comment.md").read_text()


@pytest.mark.slow
def test_the_github_flow_measures_in_one_job_and_judges_in_another(
        repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    (repo / "pyproject.toml").write_text("[tool.perfgate]\nblocks = 3\nlooks = 1\n")
    git(repo, "add", "pyproject.toml")
    git(repo, "commit", "-qm", "three blocks")
    base = git(repo, "rev-parse", "HEAD")
    commit_change(repo, 'os.environ.get("TINY_FORWARD_DELAY_MS", "0")', 'os.environ.get("TINY_FORWARD_DELAY_MS", "40")',
                  "forward 40 ms slower")
    base_dir = _github_measure(repo, tmp_path, monkeypatch, capsys, base, "tiny")
    results = tmp_path / "perfgate-results"
    assert sorted(p.name for p in results.iterdir()) == ["base", "run.json", "tiny.counters.json", "tiny.json"]
    assert sorted(p.name for p in (results / "base").iterdir()) == ["tiny.counters.json", "tiny.json"]
    code, comment = _judge(results, base_dir, tmp_path, capsys)
    assert code == 1, comment
    # a sleep adds no operator: the counters are unchanged and the timing decides
    assert "Counters: no change between the base side's counted run and the head's" in comment
    assert f"paired, 3 ABBA blocks against {base[:7]}" in comment
    assert "Judged by perfgate" in comment


@pytest.mark.slow
@pytest.mark.extended  # the judge's side of a rename is tested without measuring in test_judge.py
def test_the_github_flow_names_a_renamed_workload(
        repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    (repo / "pyproject.toml").write_text("[tool.perfgate]\nblocks = 2\nlooks = 1\n")
    git(repo, "add", "pyproject.toml")
    git(repo, "commit", "-qm", "two blocks")
    base = git(repo, "rev-parse", "HEAD")
    commit_change(repo, 'name="tiny",', 'name="tiny2",', "rename the workload")
    base_dir = _github_measure(repo, tmp_path, monkeypatch, capsys, base, "tiny2")
    code, comment = _judge(tmp_path / "perfgate-results", base_dir, tmp_path, capsys)
    assert code == 2, comment
    assert any("**tiny**" in line and "removed or renamed" in line for line in comment.splitlines()), comment
    assert any("**tiny2**" in line and "has no workload" in line for line in comment.splitlines()), comment
