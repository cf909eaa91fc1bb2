"""The GitHub workflows: linted by actionlint and zizmor, in sync with the templates
`perfgate init` writes, and their shell steps run here against fake `nvidia-smi`, `sudo`
and `gh` commands.

The linters come with the test extras (`.venv/bin/actionlint`, `.venv/bin/zizmor`) and are
found next to the running Python. A finding deliberately accepted is ignored in the
workflow itself, with its reason in a comment next to the ignore.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from perfgate.ci import add_parser as add_ci_parser
from perfgate.report.markdown import MARKER
from perfgate.scaffold import TEMPLATES

ROOT = Path(__file__).resolve().parents[1]
REPO_WORKFLOWS = ROOT / ".github" / "workflows"
TEMPLATE_WORKFLOWS = TEMPLATES / "workflows"
NAMES = ("ci.yml", "perfgate.yml", "perfgate-comment.yml", "rebaseline.yml")
ALL = [REPO_WORKFLOWS / n for n in NAMES] + [TEMPLATE_WORKFLOWS / n for n in NAMES]
SHARED = ("perfgate.yml", "perfgate-comment.yml", "rebaseline.yml")  # identical in both places
SHA_PIN = re.compile(r"^\s*(?:- )?uses: [\w.-]+/[\w.-]+@[0-9a-f]{40} # v\d+\.\d+\.\d+$")


def tool(name: str) -> Path:
    path = Path(sys.executable).parent / name
    assert path.is_file(), f"{path} is missing: install the test extras (bash scripts/setup.sh)"
    return path


def run_tool(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=300,
                          env={**os.environ, "NO_COLOR": "1"})


# --- linters --------------------------------------------------------------------------------

def test_actionlint_finds_nothing() -> None:
    # shellcheck and pyflakes are switched off so the result does not depend on what else is
    # installed on the machine; the shell steps are run below instead.
    done = run_tool([str(tool("actionlint")), "-no-color", "-oneline", "-shellcheck=", "-pyflakes=",
                     "-config-file", str(TEMPLATES / "actionlint.yaml"), *map(str, ALL)])
    assert done.returncode == 0, done.stdout + done.stderr


def test_zizmor_finds_nothing_even_as_an_auditor() -> None:
    done = run_tool([str(tool("zizmor")), "--offline", "--persona", "auditor", "--no-progress",
                     "--color", "never", *map(str, ALL)])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "No findings to report" in done.stdout, done.stdout + done.stderr


def test_every_ignored_finding_is_justified_next_to_its_ignore() -> None:
    for path in ALL:
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            if "zizmor: ignore[" in line:
                reason_after = line.split("]", 1)[1].strip()
                reason_before = lines[i - 1].strip().startswith("#")
                assert reason_after or reason_before, f"{path}:{i + 1}: an ignore without its reason"


def test_the_linters_do_find_problems(tmp_path: Path) -> None:
    """The two tests above could pass by linting nothing: show that they would fail."""
    bad = textwrap.dedent("""\
        name: bad
        on: pull_request_target
        jobs:
          x:
            runs-on: ubuntu-latest
            steps:
              - uses: actions/checkout@v4
                with:
                  ref: ${{ github.event.pull_request.head.sha }}
              - run: echo "${{ github.event.pull_request.title }}"
        """)
    path = tmp_path / "bad.yml"
    path.write_text(bad)
    zizmor = run_tool([str(tool("zizmor")), "--offline", "--no-progress", "--color", "never", str(path)])
    assert zizmor.returncode != 0 and "template-injection" in zizmor.stdout
    assert "dangerous-triggers" in zizmor.stdout and "artipacked" in zizmor.stdout
    actionlint = run_tool([str(tool("actionlint")), "-no-color", "-shellcheck=", "-pyflakes=", str(path)])
    assert actionlint.returncode != 0 and "potentially untrusted" in actionlint.stdout


# --- one source of truth --------------------------------------------------------------------

def test_the_repository_workflows_are_the_templates() -> None:
    assert sorted(p.name for p in REPO_WORKFLOWS.glob("*.yml")) == sorted(NAMES)
    for name in SHARED:
        assert (REPO_WORKFLOWS / name).read_text() == (TEMPLATE_WORKFLOWS / name).read_text(), name


def test_the_repository_ci_runs_the_readme_test_command() -> None:
    """perfgate's own ci.yml differs from the template: it runs this repository's setup and
    the README's test command (the one .ci/run runs), not a user's own."""
    command = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert f"run: {command}\n" in (REPO_WORKFLOWS / "ci.yml").read_text()
    assert command in (ROOT / "README.md").read_text()
    assert "run: python -m pytest -q\n" in (TEMPLATE_WORKFLOWS / "ci.yml").read_text()


# --- structure ------------------------------------------------------------------------------

def jobs(text: str) -> dict[str, str]:
    body = text.split("\njobs:\n", 1)[1]
    parts = re.split(r"^  ([\w-]+):\n", body, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


@pytest.mark.parametrize("path", ALL, ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_hardening(path: Path) -> None:
    text = path.read_text()
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    assert "pull_request_target" not in code
    assert "\npermissions: {}\n" in text  # nothing by default; each job asks for its own
    for name, job in jobs(text).items():
        assert re.search(r"^    timeout-minutes: \d+$", job, re.M), f"{name}: no timeout-minutes"
        assert re.search(r"^    permissions:", job, re.M), f"{name}: no permissions"
    uses = [line for line in text.splitlines() if re.match(r"^\s*(- )?uses:", line)]
    assert uses and all(SHA_PIN.match(line) for line in uses), uses
    assert text.count("uses: actions/checkout@") == text.count("persist-credentials: false")
    assert "secrets." not in text
    for script in run_blocks(text):
        assert "${{" not in script, script  # inputs reach scripts through env: only


def test_the_gate_job_is_read_only_and_gated_for_forks() -> None:
    gate = jobs((TEMPLATE_WORKFLOWS / "perfgate.yml").read_text())["gate"]
    (permissions,) = re.findall(r"^    permissions:\n((?:      .*\n)+)", gate, re.M)
    assert permissions == "      contents: read\n"
    assert "runs-on: [self-hosted, linux, x64, gpu, t4]" in gate
    assert "github.event.pull_request.head.repo.full_name == github.repository" in gate
    assert "github.event.label.name == 'perfgate:run'" in gate
    assert "cancel-in-progress: true" in gate
    rebaseline = jobs((TEMPLATE_WORKFLOWS / "rebaseline.yml").read_text())
    assert "contents: write" not in rebaseline["measure"] and "contents: write" in rebaseline["pull-request"]


def test_both_gpu_workflows_prepare_the_runner_alike() -> None:
    gate = (TEMPLATE_WORKFLOWS / "perfgate.yml").read_text()
    rebaseline = (TEMPLATE_WORKFLOWS / "rebaseline.yml").read_text()
    for step in ("Install the pinned environment", "Record GPU clocks and lock them if permitted",
                 "Reset GPU clocks"):
        assert step_script(gate, step) == step_script(rebaseline, step), step
    assert re.findall(r'GPU_LOCK_MHZ: "(\d*)"', gate) == re.findall(r'GPU_LOCK_MHZ: "(\d*)"', rebaseline)


def test_the_gate_step_is_a_valid_perfgate_ci_command() -> None:
    script = step_script((TEMPLATE_WORKFLOWS / "perfgate.yml").read_text(), "Run the gate")
    argv = shlex.split(script.replace("\\\n", " ").split("||")[0])
    assert argv[:2] == [".venv/bin/perfgate", "ci"]
    parser = argparse.ArgumentParser()
    add_ci_parser(parser.add_subparsers())
    args = parser.parse_args(argv[1:])
    assert (args.base_dir, args.device, args.artifacts) == (".perfgate-base", "cuda", "perfgate-artifacts")
    assert args.out == "perfgate-artifacts/results" and args.results is None


# --- the shell steps, run ------------------------------------------------------------------

def run_blocks(text: str) -> list[str]:
    blocks = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        match = re.match(r"^(\s*)(?:- )?run: (.*)$", line)
        if not match:
            continue
        if match.group(2) != "|":
            blocks.append(match.group(2))
            continue
        indent = len(match.group(1))
        body = []
        for following in lines[i + 1:]:
            if following.strip() and len(following) - len(following.lstrip()) <= indent:
                break
            body.append(following)
        blocks.append(textwrap.dedent("\n".join(body)).strip("\n") + "\n")
    return blocks


def step_script(text: str, name: str) -> str:
    """The `run:` script of the step called ``name`` (a block or a one-line value)."""
    start = re.search(rf"^(\s*)- name: {re.escape(name)}$", text, re.M)
    assert start, name
    indent = len(start.group(1))
    rest = text[start.end():].splitlines()
    step = []
    for line in rest[1:]:
        if line.strip() and len(line) - len(line.lstrip()) <= indent:
            break
        step.append(line)
    (script,) = run_blocks("\n".join(step))
    return script


def fake(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text("#!/bin/bash\n" + textwrap.dedent(body))
    path.chmod(0o755)


def bash(script: str, cwd: Path, env: dict[str, str], bin_dir: Path) -> subprocess.CompletedProcess[str]:
    base_path = os.pathsep.join(p for p in ("/usr/local/bin", "/usr/bin", "/bin") if Path(p).is_dir())
    environment = {"PATH": f"{bin_dir}{os.pathsep}{base_path}", "HOME": str(cwd), "LANG": "C.UTF-8",
                   "RUNNER_TEMP": str(cwd), **env}
    # GitHub runs an unspecified `shell:` on Linux as `bash -e {0}`.
    return subprocess.run(["bash", "-e", "-c", script], cwd=cwd, env=environment, capture_output=True,
                          text=True, timeout=120)


def outputs(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines())


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "bin"
    directory.mkdir()
    fake(directory, "sudo", 'echo "sudo: a password is required" >&2\nexit 1\n')
    return directory


@pytest.mark.parametrize(("lock", "present", "locked", "outcome"), [
    ("ok", True, "true", "locked: graphics clock 1245 MHz (nvidia-smi -lgc)"),
    ("refuse", True, "false",
     "not locked: nvidia-smi -lgc was refused (Insufficient permissions sudo: a password is required )"),
    ("ok", False, "false", "not locked: nvidia-smi not found"),
])
def test_the_clock_step(tmp_path: Path, bin_dir: Path, lock: str, present: bool, locked: str, outcome: str) -> None:
    if present:
        fake(bin_dir, "nvidia-smi", f"""\
            echo "$*" >> "{tmp_path}/calls"
            case "$1" in
              -lgc) [ "{lock}" = ok ] && {{ echo "GPU clocks set"; exit 0; }}
                    echo "Insufficient permissions"; exit 4 ;;
              -q) printf 'Clocks\\n    Graphics : 1245 MHz\\n' ;;
            esac
            """)
    script = step_script((TEMPLATE_WORKFLOWS / "perfgate.yml").read_text(),
                         "Record GPU clocks and lock them if permitted")
    (tmp_path / "out").touch()
    done = bash(script, tmp_path, {"GPU_LOCK_MHZ": "1245", "GITHUB_OUTPUT": str(tmp_path / "out")}, bin_dir)
    assert done.returncode == 0, done.stderr
    assert outputs(tmp_path / "out") == {"locked": locked, "outcome": outcome}
    record = (tmp_path / "perfgate-artifacts" / "gpu-clocks.txt").read_text()
    assert record.startswith(f"outcome: {outcome}\n\n$ nvidia-smi -q -d CLOCK\n")
    if present:
        assert "Graphics : 1245 MHz" in record
        assert (tmp_path / "calls").read_text().splitlines() == ["-lgc 1245,1245", "-q -d CLOCK"]


@pytest.mark.parametrize(("code", "status", "annotation"), [
    ("0", 0, None), ("1", 1, None), ("2", 1, "::error title=perfgate error::"),
    ("3", 0, "::warning title=perfgate inconclusive::"), ("", 1, "::error title=perfgate error::"),
])
def test_the_verdict_step_maps_exit_codes(tmp_path: Path, bin_dir: Path, code: str, status: int,
                                          annotation: str | None) -> None:
    script = step_script((TEMPLATE_WORKFLOWS / "perfgate.yml").read_text(), "Verdict")
    done = bash(script, tmp_path, {"EXIT_CODE": code}, bin_dir)
    assert done.returncode == status
    if annotation:
        assert done.stdout.startswith(annotation)


@pytest.fixture
def comment_run(tmp_path: Path, bin_dir: Path):
    """Runs the comment step against a fake `gh` that plays the GitHub API."""
    report_dir = tmp_path / "artifact"
    report_dir.mkdir()
    (report_dir / "report.md").write_text(f"{MARKER}\n## perfgate: pass (1 PASS)\n")
    (report_dir / "pr-number").write_text("7\n")
    comments = tmp_path / "comments.json"
    comments.write_text("[]")
    fake(bin_dir, "gh", f"""\
        printf '%s\\n' "$*" >> "{tmp_path}/gh-calls"
        args="$*"
        case "$args" in
          *"/pulls/7 --jq .head.sha"*) echo "$FAKE_PR_HEAD" ;;
          *"--paginate"*)
            for ((i = 1; i <= $#; i++)); do
              if [ "${{!i}}" = --jq ]; then j=$((i + 1)); jq -r "${{!j}}" "{comments}"; fi
            done ;;
          *"body=@"*)
            for a in "$@"; do case "$a" in body=@*) cp "${{a#body=@}}" "{tmp_path}/posted.md" ;; esac; done ;;
        esac
        """)
    script = step_script((TEMPLATE_WORKFLOWS / "perfgate-comment.yml").read_text(), "Post or update the sticky comment")

    def run(pr_head: str = "c" * 40):
        env = {"GH_TOKEN": "t", "GH_REPO": "acme/train", "HEAD_SHA": "c" * 40, "REPORT_DIR": str(report_dir),
               "FAKE_PR_HEAD": pr_head}
        done = bash(script, tmp_path, env, bin_dir)
        calls = (tmp_path / "gh-calls").read_text().splitlines() if (tmp_path / "gh-calls").exists() else []
        return done, calls

    run.report_dir, run.comments, run.posted = report_dir, comments, tmp_path / "posted.md"
    return run


needs_jq = pytest.mark.skipif(shutil.which("jq") is None, reason="the fake gh applies --jq with jq")


@needs_jq
def test_the_comment_is_created_then_edited_in_place(comment_run) -> None:
    done, calls = comment_run()
    assert done.returncode == 0, done.stderr
    assert calls[-1].startswith("api --method POST repos/acme/train/issues/7/comments -F body=@")
    assert comment_run.posted.read_text() == f"{MARKER}\n## perfgate: pass (1 PASS)\n"

    comment_run.comments.write_text(json.dumps([
        {"id": 1, "user": {"login": "someone"}, "body": f"quoting {MARKER}"},
        {"id": 2, "user": {"login": "github-actions[bot]"}, "body": "another bot comment"},
        {"id": 3, "user": {"login": "github-actions[bot]"}, "body": f"{MARKER}\nold report"},
    ]))
    done, calls = comment_run()
    assert done.returncode == 0, done.stderr
    assert calls[-1].startswith("api --method PATCH repos/acme/train/issues/comments/3 -F body=@")


@needs_jq
def test_the_comment_gets_the_marker_even_if_the_artifact_lost_it(comment_run) -> None:
    (comment_run.report_dir / "report.md").write_text("## tampered\n")
    done, _ = comment_run()
    assert done.returncode == 0, done.stderr
    assert comment_run.posted.read_text() == f"{MARKER}\n## tampered\n"


def test_the_comment_goes_only_to_the_pull_request_that_was_measured(comment_run) -> None:
    done, calls = comment_run(pr_head="d" * 40)
    assert done.returncode == 0
    assert "::warning title=perfgate comment::pull request #7 is at dddd" in done.stdout
    assert not any("--method" in c for c in calls)
    (comment_run.report_dir / "pr-number").write_text("7; rm -rf /\n")
    done, calls = comment_run()
    assert done.returncode == 1 and "is not a number" in done.stdout
    assert not any("--method" in c for c in calls)


def test_the_rebaseline_step_passes_inputs_as_arguments(tmp_path: Path, bin_dir: Path) -> None:
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    fake(tmp_path / ".venv" / "bin", "python", f'exec {shlex.quote(sys.executable)} "$@"\n')
    fake(tmp_path / ".venv" / "bin", "perfgate", f'printf "%s\\n" "$@" > "{tmp_path}/argv"\n')
    (tmp_path / "pyproject.toml").write_text('[tool.perfgate]\nbaselines = "perf/baselines"\n')
    script = step_script((TEMPLATE_WORKFLOWS / "rebaseline.yml").read_text(), "Rebaseline")
    (tmp_path / "out").touch()
    env = {"REASON": 'new loader; "intended" $(touch pwned)', "WORKLOADS": "a  b", "APPEND": "true",
           "GITHUB_OUTPUT": str(tmp_path / "out")}
    done = bash(script, tmp_path, env, bin_dir)
    assert done.returncode == 0, done.stderr
    assert outputs(tmp_path / "out") == {"baselines": "perf/baselines"}
    assert (tmp_path / "argv").read_text().splitlines() == [
        "rebaseline", "a", "b", "--reason", 'new loader; "intended" $(touch pwned)', "--device", "cuda",
        "--out", "perfgate-artifacts/results", "--append"]
    assert not (tmp_path / "pwned").exists()


def git(cwd: Path, *argv: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *argv], cwd=cwd,
                          check=True, capture_output=True, text=True).stdout


def test_the_rebaseline_pull_request(tmp_path: Path, bin_dir: Path) -> None:
    remote, work = tmp_path / "remote.git", tmp_path / "work"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(remote))
    git(tmp_path, "init", "-q", "-b", "main", str(work))
    (work / "baselines").mkdir()
    (work / "baselines" / "README.md").write_text("store\n")
    git(work, "add", "-A")
    git(work, "commit", "-qm", "init")
    git(work, "remote", "add", "origin", str(remote))
    git(work, "push", "-q", "origin", "main")
    fake(bin_dir, "gh", f'printf "%s\\n" "$@" > "{tmp_path}/gh-argv"\n'
                        f'for a in "$@"; do [ -f "$a" ] && cp "$a" "{tmp_path}/body.md"; done; exit 0\n')
    script = step_script((TEMPLATE_WORKFLOWS / "rebaseline.yml").read_text(),
                         "Open a pull request with the new baselines")
    env = {"GH_TOKEN": "token", "GH_REPO": "acme/train", "REASON": "new data loader, intended",
           "STORE": "baselines", "CLOCKS": "locked: graphics clock 1245 MHz (nvidia-smi -lgc)",
           "BASE_BRANCH": "main", "GITHUB_RUN_ID": "99", "GITHUB_RUN_ATTEMPT": "1",
           "GITHUB_SERVER_URL": "https://github.com", "GITHUB_REPOSITORY": "acme/train"}

    done = bash(script, work, env, bin_dir)  # nothing changed: no branch, no pull request
    assert done.returncode == 0, done.stderr
    assert "no baseline file changed" in done.stdout and not (tmp_path / "gh-argv").exists()
    assert git(work, "branch", "--list", "perfgate/*") == ""
    (work / "baselines" / "cuda-tesla-t4").mkdir()
    (work / "baselines" / "cuda-tesla-t4" / "my-model.json").write_text("{}\n")
    done = bash(script, work, env, bin_dir)
    assert done.returncode == 0, done.stderr
    files = git(remote, "ls-tree", "-r", "--name-only", "perfgate/rebaseline-99-1").split()
    assert files == ["baselines/README.md", "baselines/cuda-tesla-t4/my-model.json"]
    message = git(remote, "log", "-1", "--format=%B", "perfgate/rebaseline-99-1")
    assert "Reason: new data loader, intended" in message
    assert (tmp_path / "gh-argv").read_text().splitlines()[:9] == [
        "pr", "create", "--base", "main", "--head", "perfgate/rebaseline-99-1",
        "--title", "perfgate: rebaseline (new data loader, intended)", "--body-file"]
    body = (tmp_path / "body.md").read_text()
    assert "**Reason:** new data loader, intended" in body and "locked: graphics clock 1245 MHz" in body
    assert "A\tbaselines/cuda-tesla-t4/my-model.json" in body
    assert "token" not in (work / ".git" / "config").read_text()
