"""The GitHub workflows: linted by actionlint and zizmor, in sync with the templates
`perfgate init` writes, pinned in the properties their trust model rests on, and their
shell steps run here against fake `nvidia-smi`, `sudo`, `python`, `perfgate` and `gh`
commands (and real git repositories).

The linters come with the test extras (`.venv/bin/actionlint`, `.venv/bin/zizmor`) and are
found next to the running Python. A finding deliberately accepted is ignored in the
workflow itself, with its reason in a comment next to the ignore; the ignores are counted.
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
from collections import Counter
from pathlib import Path

import pytest
from factories import fake

from perfgate.adapters.ci import add_parser as add_ci_parser
from perfgate.adapters.judge_cli import add_parser as add_judge_parser
from perfgate.adapters.scaffold import TEMPLATES
from perfgate.report.markdown import MARKER

ROOT = Path(__file__).resolve().parents[1]
REPO_WORKFLOWS = ROOT / ".github" / "workflows"
TEMPLATE_WORKFLOWS = TEMPLATES / "workflows"
NAMES = ("ci.yml", "perfgate.yml", "perfgate-judge.yml", "rebaseline.yml", "perfgate-history.yml")
# `perfgate init --shards N` writes these in place of the single-runner ones (N written in);
# this repository measures on one runner, so they are not among its own workflows.
SHARDED_WORKFLOWS = TEMPLATES / "workflows-sharded"
SHARDED_NAMES = ("perfgate.yml", "perfgate-judge.yml")
ALL = ([REPO_WORKFLOWS / n for n in NAMES] + [TEMPLATE_WORKFLOWS / n for n in NAMES]
       + [SHARDED_WORKFLOWS / n for n in SHARDED_NAMES])
SHA_PIN = re.compile(r"^\s*(?:- )?uses: [\w.-]+/[\w.-]+@[0-9a-f]{40} # v\d+\.\d+\.\d+$")
# The hosted jobs install perfgate without torch: a user's repository from the package
# index, pinned by its constraints.txt; perfgate's own repository from its checkout (the
# default branch's code). That is the only difference between those workflows here and
# their templates.
TEMPLATE_JUDGE_INSTALL = """\
        # perfgate from the package index, pinned by constraints.txt, without its
        # dependencies: {purpose}
        run: |
          python -I -m venv "$RUNNER_TEMP/perfgate-venv"
          "$RUNNER_TEMP/perfgate-venv/bin/python" -I -m pip install --no-cache-dir --quiet --no-deps -c constraints.txt perfgate
          "$RUNNER_TEMP/perfgate-venv/bin/python" -I -m pip install --no-cache-dir --quiet -c constraints.txt numpy scipy jinja2 tomlkit
"""
REPO_JUDGE_INSTALL = """\
        # perfgate from this checkout (the default branch's code), without its
        # dependencies: {purpose}
        run: |
          python -I -m venv "$RUNNER_TEMP/perfgate-venv"
          "$RUNNER_TEMP/perfgate-venv/bin/python" -I -m pip install --no-cache-dir --quiet --no-deps .
          "$RUNNER_TEMP/perfgate-venv/bin/python" -I -m pip install --no-cache-dir --quiet -c constraints.txt numpy scipy jinja2 tomlkit
"""
INSTALL_PURPOSE = {"perfgate-judge.yml": "the judge imports numpy, scipy, jinja2 and tomlkit only.",
                   "rebaseline.yml": "validating baselines imports numpy, scipy, jinja2 and tomlkit only."}
# Every git command of a job that holds a write token, or reads a checkout it did not write.
NO_HOOKS = "-c core.hooksPath=/dev/null -c core.fsmonitor=false"


def tool(name: str) -> Path:
    path = Path(sys.executable).parent / name
    assert path.is_file(), f"{path} is missing: install the test extras (bash scripts/setup.sh)"
    return path


def run_tool(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=300,
                          env={**os.environ, "NO_COLOR": "1"})


def template(name: str) -> str:
    return (TEMPLATE_WORKFLOWS / name).read_text()


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


@pytest.mark.parametrize("folder", [REPO_WORKFLOWS, TEMPLATE_WORKFLOWS], ids=["repository", "templates"])
def test_the_ignored_findings_are_these_four(folder: Path) -> None:
    """Three self-hosted runners (the point of the gate: the gate, the rebaseline and the
    default branch's history) and one workflow_run trigger (the judge, which runs nothing
    from the pull request). A new ignore is a decision to review here, not a way to quiet
    the linter."""
    found = {name: Counter(re.findall(r"zizmor: ignore\[([\w-]+)\]", (folder / name).read_text()))
             for name in NAMES}
    assert found == {"ci.yml": Counter(), "perfgate.yml": Counter({"self-hosted-runner": 1}),
                     "perfgate-judge.yml": Counter({"dangerous-triggers": 1}),
                     "rebaseline.yml": Counter({"self-hosted-runner": 1}),
                     "perfgate-history.yml": Counter({"self-hosted-runner": 1})}
    assert sum(sum(c.values()) for c in found.values()) == 4
    assert not list(folder.glob("*.yaml"))  # no workflow hides from the count under another ending


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
    assert sorted(p.name for p in REPO_WORKFLOWS.iterdir()) == sorted(NAMES)
    assert sorted(p.name for p in TEMPLATE_WORKFLOWS.iterdir()) == sorted(NAMES)
    assert (REPO_WORKFLOWS / "perfgate.yml").read_text() == template("perfgate.yml")
    for name, purpose in INSTALL_PURPOSE.items():
        text = template(name)
        install = TEMPLATE_JUDGE_INSTALL.format(purpose=purpose)
        assert text.count(install) == 1, name
        expected = text.replace(install, REPO_JUDGE_INSTALL.format(purpose=purpose))
        assert (REPO_WORKFLOWS / name).read_text() == expected, name


def test_the_repository_ci_runs_the_readme_test_command() -> None:
    """perfgate's own ci.yml differs from the template: it runs this repository's setup and
    the README's test command (the one .ci/run runs), not a user's own."""
    command = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert f"run: {command}\n" in (REPO_WORKFLOWS / "ci.yml").read_text()
    assert command in (ROOT / "README.md").read_text()
    assert "run: python -m pytest -q\n" in template("ci.yml")


# --- structure ------------------------------------------------------------------------------

def jobs(text: str) -> dict[str, str]:
    body = text.split("\njobs:\n", 1)[1]
    parts = re.split(r"^  ([\w-]+):\n", body, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def code_lines(script: str) -> list[str]:
    """The lines of a shell script that are not comments."""
    return [line for line in script.splitlines() if not line.lstrip().startswith("#")]


# The one secret a shipped workflow may name: the shared history store's URL. In
# perfgate-history.yml it is in the env of one step of each of the two jobs on a hosted
# runner, which name the environment where it is kept and run only for the default branch:
# `where` only tests whether it is set, `record` records. The self-hosted job `measure`
# names neither the URL nor an environment (the runner also runs pull requests' code).
HISTORY_SECRET_LINE = "          PERFGATE_HISTORY_URL: ${{ secrets.PERFGATE_HISTORY_URL }}"
RECORD_STEP = "Record in the history store"
WHERE_STEP = "Is the shared store's URL set"
RUNNERS_FILE_STEP = "Record in the runner's history file"
DEFAULT_BRANCH_IF = "    if: github.ref == format('refs/heads/{0}', github.event.repository.default_branch)"
RECORD_IF = ("    if: >-\n      github.ref == format('refs/heads/{0}', github.event.repository.default_branch)\n"
             "      && needs.where.outputs.shared == 'true'\n")
HISTORY_ENVIRONMENT = "    environment: perfgate-history"
HOSTED_RUNNER = "    runs-on: ubuntu-latest"
# The recording step runs `perfgate history record` and nothing else; `where`'s step only
# tests the URL and says which store.
RECORD_COMMAND = ('"$RUNNER_TEMP/perfgate-venv/bin/perfgate" history record --results "$RESULTS" --design stored '
                  '--branch "$GITHUB_REF_NAME" --runner "$MEASURED_ON"')
WHERE_STEP_SHELL = re.compile(r'^(if \[ -n "\$\{PERFGATE_HISTORY_URL//\[\[:space:\]\]/\}" \]; then|else|fi'
                              r'|echo "shared=(true|false)" >>"\$GITHUB_OUTPUT"|echo "[^"$`\\]*")$')


def secret_problem(name: str, text: str) -> str | None:
    """What is wrong with the secrets ``text`` (workflow ``name``) names; None when nothing.

    Every workflow but perfgate-history.yml names no secret at all (``secrets.`` nowhere,
    comments included, and no ``secrets`` context in code in any form: indexed, whole,
    ``secrets: inherit``, any case). perfgate-history.yml has the jobs ``where``,
    ``measure`` and ``record`` and names exactly one secret, on exactly two lines, each
    :data:`HISTORY_SECRET_LINE`: in the ``env:`` of ``where``'s step :data:`WHERE_STEP`
    (which only tests it) and of ``record``'s step :data:`RECORD_STEP` (which runs
    :data:`RECORD_COMMAND` alone), neither using an action. Both jobs run on
    :data:`HOSTED_RUNNER`, carry :data:`HISTORY_ENVIRONMENT` (where the secret is kept,
    limited to the default branch in the repository's settings) and run only for the
    default branch (:data:`DEFAULT_BRANCH_IF`, :data:`RECORD_IF`). The self-hosted job
    ``measure`` names neither the URL nor an environment."""
    dotted = [line for line in text.splitlines() if "secrets." in line.lower()]
    in_code = [line for line in code_lines(text) if re.search(r"\bsecrets\b", line, re.I)]
    if name != "perfgate-history.yml":
        return f"{name} names a secret: {dotted + in_code}" if dotted or in_code else None
    if dotted != [HISTORY_SECRET_LINE] * 2 or in_code != [HISTORY_SECRET_LINE] * 2:
        return f"{name}: the secrets named are not exactly the history URL's two lines: {dotted + in_code}"
    all_jobs = jobs(text)
    if list(all_jobs) != ["where", "measure", "record"]:
        return f"{name}: the jobs are {list(all_jobs)}, not where, measure and record"
    if any("PERFGATE_HISTORY_URL" in line or "environment:" in line for line in code_lines(all_jobs["measure"])):
        return f"{name}: the self-hosted job measure names the history URL or an environment"
    for job, step_name, condition in (("where", WHERE_STEP, DEFAULT_BRANCH_IF + "\n"),
                                      ("record", RECORD_STEP, RECORD_IF)):
        body = all_jobs[job]
        if body.splitlines().count(HISTORY_SECRET_LINE) != 1:
            return f"{name}: the history URL is not once in the job {job}"
        if condition not in body:
            return f"{name}: the job {job}, which gets the history URL, is not only for the default branch"
        if HISTORY_ENVIRONMENT not in body.splitlines():
            return f"{name}: the job {job}, which gets the history URL, does not name its environment"
        if HOSTED_RUNNER not in body.splitlines():
            return f"{name}: the job {job}, which gets the history URL, does not run on a hosted runner"
        step = step_text(body, step_name).splitlines()
        if HISTORY_SECRET_LINE not in step:
            return f"{name}: the history URL is not in the step {step_name!r}"
        keys = [line for line in step[:step.index(HISTORY_SECRET_LINE)] if re.match(r"^        \S", line)]
        if not keys or keys[-1] != "        env:":
            return f"{name}: the history URL is not in the env of the step {step_name!r}"
        if any(re.match(r"^        uses:", line) for line in step):
            return f"{name}: the step {step_name!r} uses an action"
        script = "\n".join(code_lines(step_script(body, step_name))).replace("\\\n", " ")
        lines = [" ".join(line.split()) for line in script.splitlines() if line.strip()]
        if lines != [RECORD_COMMAND] if job == "record" else not all(map(WHERE_STEP_SHELL.match, lines)):
            return f"{name}: the step {step_name!r} runs more than it must: {lines}"
    return None


@pytest.mark.parametrize("path", ALL, ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}/{p.name}")
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
    assert secret_problem(path.name, text) is None, secret_problem(path.name, text)
    for script in run_blocks(text):
        assert "${{" not in script, script  # inputs reach scripts through env: only


WORKFLOW_ENV = "\nenv:\n"
JOB_PERMISSIONS = "    permissions:\n      contents: read\n    steps:\n"


def misplaced_secret(where: str) -> tuple[str, str]:
    """A workflow, and its name, with the history URL's secret put where it must not be."""
    history = template("perfgate-history.yml")
    line = HISTORY_SECRET_LINE.strip()
    if where == "workflow":
        return "perfgate-history.yml", history.replace(WORKFLOW_ENV, f"{WORKFLOW_ENV}  {line}\n", 1)
    if where == "job":
        assert history.count(JOB_PERMISSIONS) == 1
        return "perfgate-history.yml", history.replace(
            JOB_PERMISSIONS, JOB_PERMISSIONS.replace("    steps:\n", f"    env:\n      {line}\n    steps:\n"))
    if where == "no environment":
        return "perfgate-history.yml", history.replace(HISTORY_ENVIRONMENT + "\n", "")
    if where == "another step":
        moved = history.replace(HISTORY_SECRET_LINE + "\n", "")
        measure = "      - name: Measure\n"
        return "perfgate-history.yml", moved.replace(measure, f"{measure}        env:\n{HISTORY_SECRET_LINE}\n")
    if where == "no default-branch if":
        return "perfgate-history.yml", history.replace(DEFAULT_BRANCH_IF + "\n", "")
    if where == "indexed, beside":
        return "perfgate-history.yml", history.replace(
            HISTORY_SECRET_LINE, HISTORY_SECRET_LINE + "\n          OTHER: ${{ secrets['GITHUB_TOKEN'] }}")
    if where == "another secret":
        return "perfgate-history.yml", history.replace("secrets.PERFGATE_HISTORY_URL", "secrets.GITHUB_TOKEN")
    if where == "the step runs more":
        return "perfgate-history.yml", history.replace(
            "        run: |\n          if [ -n \"${PERFGATE_HISTORY_URL",
            "        run: |\n          bash ./scripts/anything.sh\n          if [ -n \"${PERFGATE_HISTORY_URL", 1)
    name = where  # perfgate.yml, perfgate-judge.yml: the step's env line as it is in the history
    text = template(name)
    step = re.search(r"^      - name: .*\n", text.split("\njobs:\n", 1)[1], re.M)
    assert step
    return name, text.replace(step.group(0), f"{step.group(0)}        env:\n{HISTORY_SECRET_LINE}\n", 1)


@pytest.mark.parametrize("where", ["workflow", "job", "another step", "no default-branch if", "no environment",
                                   "indexed, beside",
                                   "another secret", "the step runs more", "perfgate.yml", "perfgate-judge.yml"])
def test_the_history_secret_is_refused_anywhere_else(where: str) -> None:
    name, text = misplaced_secret(where)
    assert text != template(name)
    assert secret_problem(name, text) is not None


def test_only_the_default_branchs_recording_step_gets_the_history_secret() -> None:
    text = template("perfgate-history.yml")
    assert secret_problem("perfgate-history.yml", text) is None
    assert text.count("secrets.") == 2
    assert "PERFGATE_HISTORY_URL" not in "\n".join(code_lines(jobs(text)["measure"]))  # the self-hosted job
    before = jobs(text)["record"].split(f"- name: {RECORD_STEP}\n", 1)[0]
    assert "PERFGATE_HISTORY_URL" not in "\n".join(code_lines(before))
    for name in NAMES:
        if name != "perfgate-history.yml":
            assert "PERFGATE_HISTORY_URL" not in template(name), name


@pytest.mark.parametrize("url", ["postgresql://recorder:s3cret@db.internal/perfgate", "", "  "],
                         ids=["secret set", "secret empty", "secret blank"])
def test_the_history_step_records_into_the_shared_store_or_the_runners_file(
        tmp_path: Path, bin_dir: Path, url: str) -> None:
    """`where` says which store; with the URL the hosted job `record` records into it (perfgate
    reads it from its environment), without it the T4 job records into the runner's file."""
    text = template("perfgate-history.yml")
    venv = tmp_path / "perfgate-venv" / "bin"
    fake(venv, "perfgate", f'printf "%s\\n" "$*" > "{tmp_path}/argv"\n'
                           f'printf "%s" "${{PERFGATE_HISTORY_URL-unset}}" > "{tmp_path}/url"\n')
    (tmp_path / "out").touch()
    where = bash(step_script(jobs(text)["where"], WHERE_STEP), tmp_path,
                 {"PERFGATE_HISTORY_URL": url, "GITHUB_OUTPUT": str(tmp_path / "out")}, bin_dir)
    assert where.returncode == 0, where.stderr
    shared = outputs(tmp_path / "out") == {"shared": "true"}
    assert outputs(tmp_path / "out") == {"shared": "true" if url.strip() else "false"}
    if shared:
        results = str(tmp_path / "perfgate-results")
        done = bash(step_script(jobs(text)["record"], RECORD_STEP), tmp_path,
                    {"PERFGATE_HISTORY_URL": url, "RESULTS": results, "MEASURED_ON": "t4-1",
                     "GITHUB_REF_NAME": "main"}, bin_dir)
        expected = ["--results", results, "--design", "stored", "--branch", "main", "--runner", "t4-1"]
    else:
        assert "        if: needs.where.outputs.shared == 'false'\n" in step_text(jobs(text)["measure"],
                                                                                 RUNNERS_FILE_STEP)
        done = bash(step_script(jobs(text)["measure"], RUNNERS_FILE_STEP), tmp_path,
                    {"STORE": "", "GITHUB_REF_NAME": "main"}, bin_dir)
        store = tmp_path / ".local" / "share" / "perfgate" / "history.sqlite"
        expected = ["--results", "perfgate-results", "--design", "stored", "--branch", "main", "--history", str(store)]
        assert store.parent.is_dir()
    assert done.returncode == 0, done.stderr
    assert "s3cret" not in where.stdout + where.stderr + done.stdout + done.stderr  # no step shows the URL
    assert (tmp_path / "argv").read_text().split() == ["history", "record", *expected]
    # With the URL, perfgate reads it from its environment (no --history); the T4 step never has it.
    assert (tmp_path / "url").read_text() == (url if shared else "unset")


def test_the_gate_job_is_read_only_and_gated_for_forks() -> None:
    gate = jobs(template("perfgate.yml"))["gate"]
    (permissions,) = re.findall(r"^    permissions:\n((?:      .*\n)+)", gate, re.M)
    assert permissions == "      contents: read\n"
    assert "runs-on: [self-hosted, linux, x64, gpu, t4]" in gate
    assert "github.event.pull_request.head.repo.full_name == github.repository" in gate
    assert "github.event.label.name == 'perfgate:run'" in gate
    assert "cancel-in-progress: true" in gate
    rebaseline = jobs(template("rebaseline.yml"))
    assert "contents: write" not in rebaseline["measure"] and "contents: write" in rebaseline["pull-request"]


def test_the_gpu_workflows_prepare_the_runner_alike() -> None:
    gate = template("perfgate.yml")
    for other in (template("rebaseline.yml"), template("perfgate-history.yml")):
        for step in ("Record GPU clocks and lock them if permitted", "Reset GPU clocks"):
            assert step_script(gate, step) == step_script(other, step), step
        assert re.findall(r'GPU_LOCK_MHZ: "(\d*)"', gate) == re.findall(r'GPU_LOCK_MHZ: "(\d*)"', other)


def measure_argv() -> list[str]:
    script = step_script(template("perfgate.yml"), "Measure the pull request and its base")
    return shlex.split(script.replace("\\\n", " "))


def test_the_measure_step_is_a_valid_perfgate_ci_command() -> None:
    argv = measure_argv()
    assert argv[:2] == ["$RUNNER_TEMP/perfgate-venv/bin/perfgate", "ci"]
    parser = argparse.ArgumentParser()
    add_ci_parser(parser.add_subparsers())
    args = parser.parse_args(argv[1:])
    assert args.measure_only and args.trace_on_fail and args.results is None
    assert (args.base_dir, args.device, args.artifacts, args.out) == (
        ".perfgate-base", "cuda", "perfgate-artifacts", "perfgate-results")


def test_the_data_cache_is_the_jobs_own() -> None:
    """~/.cache persists between jobs on a self-hosted runner: a pull request could leave
    data there for the next job. $RUNNER_TEMP is emptied after every job."""
    assert measure_argv()[measure_argv().index("--cache-dir") + 1] == "$RUNNER_TEMP/perfgate-cache"
    rebaseline = step_script(template("rebaseline.yml"), "Rebaseline")
    assert '--cache-dir "$RUNNER_TEMP/perfgate-cache"' in rebaseline
    for name in NAMES:
        assert ".cache/perfgate" not in template(name)


def test_the_measuring_job_installs_nothing_from_the_pull_request() -> None:
    """The harness comes from the base commit; the pull request's tree is only measured."""
    gate = jobs(template("perfgate.yml"))["gate"]
    installs = [line for script in run_blocks(gate) for line in code_lines(script) if "pip install" in line]
    assert len(installs) == 2  # the base's project, or perfgate alone when it has none
    for line in installs:
        argv = shlex.split(line)
        assert argv[:4] == ["$RUNNER_TEMP/perfgate-venv/bin/python", "-I", "-m", "pip"], line
        assert argv[-3:-1] == ["-c", ".perfgate-base/constraints.txt"], line
        assert argv[-1] in ("./.perfgate-base", "perfgate"), line
        assert not {"-e", "--editable", "-r", "--requirement", ".", "./"} & set(argv), line
    assert [shlex.split(line)[-1] for line in installs] == ["./.perfgate-base", "perfgate"]
    code = "\n".join(code_lines("\n".join(run_blocks(gate))))
    assert "-e ." not in code and "constraints.txt" not in code.replace(".perfgate-base/constraints.txt", "")
    assert "python -I -m venv \"$RUNNER_TEMP/perfgate-venv\"" in code
    # No pip cache keyed on the pull request's files.
    assert "cache:" not in gate and "cache-dependency-path" not in gate


def test_the_measuring_job_uploads_results_for_the_judge() -> None:
    gate = jobs(template("perfgate.yml"))["gate"]
    uploads = re.findall(r"uses: actions/upload-artifact@.*\n        with:\n((?:          .*\n)+)", gate)
    assert uploads == [
        "          name: perfgate-results\n          path: perfgate-results/\n"
        "          if-no-files-found: warn\n          retention-days: 7\n",
        "          name: perfgate-artifacts\n          path: perfgate-artifacts/\n"
        "          if-no-files-found: warn\n          retention-days: 14\n"]
    assert gate.count("      - name: Upload") == 2 == gate.count("        if: always()\n        uses: actions/upload")
    assert "Verdict" not in gate  # the verdict is the judge's


@pytest.mark.parametrize("path", ALL, ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}/{p.name}")
def test_sudo_runs_nvidia_smi_by_its_absolute_path_only(path: Path) -> None:
    """A sudoers entry for exactly `/usr/bin/nvidia-smi -lgc ...` and `-rgc` permits the
    clock lock; a bare `sudo nvidia-smi` would need a broader one, open to the PR's code."""
    allowed = ('sudo -n /usr/bin/nvidia-smi -lgc "$GPU_LOCK_MHZ,$GPU_LOCK_MHZ"', "sudo -n /usr/bin/nvidia-smi -rgc")
    for script in run_blocks(path.read_text()):
        for line in code_lines(script):
            for found in re.finditer(r"\bsudo\b", line):
                assert line[found.start():].startswith(allowed), line


def test_the_judge_runs_only_after_the_measuring_workflow_of_a_pull_request() -> None:
    text = template("perfgate-judge.yml")
    assert "\n  workflow_run:\n    workflows: [perfgate]\n    types: [completed]\n" in text
    (job,) = jobs(text).values()
    condition = job.split("    if: >-\n", 1)[1].split("    runs-on:", 1)[0]
    assert "github.event.workflow_run.event == 'pull_request'" in condition
    # the run's workflow file, exactly (GitHub may append '@<ref>' to the path)
    assert "github.event.workflow_run.path == '.github/workflows/perfgate.yml'" in condition
    assert "startsWith(github.event.workflow_run.path, '.github/workflows/perfgate.yml@')" in condition
    # every conclusion of the measuring run is answered: a skipped or cancelled run is never silence
    assert "conclusion" not in condition
    (permissions,) = re.findall(r"^    permissions:\n((?:      .*\n)+)", job, re.M)
    assert [line.split("#")[0].strip() for line in permissions.splitlines()] == [
        "actions: read", "checks: write", "contents: read", "pull-requests: write", "statuses: write"]
    assert "runs-on: ubuntu-latest" in job
    # The judge's name for the measuring job is the measuring job's name (the identify step and
    # the judge step, which reads its start and end, name it alike).
    identify_job, judge_job = re.findall(r"GATE_JOB: (.*?)  #", job)
    gate_job = identify_job
    assert judge_job == gate_job
    assert f"    name: {gate_job}\n" in jobs(template("perfgate.yml"))["gate"]


def test_the_judge_checks_which_pull_request_and_commit_it_judges() -> None:
    text = template("perfgate-judge.yml")
    identify = step_text(text, "Identify the pull request")
    for variable, value in (("HEAD_SHA", "github.event.workflow_run.head_sha"),
                            ("HEAD_REPO", "github.event.workflow_run.head_repository.full_name"),
                            ("HEAD_BRANCH", "github.event.workflow_run.head_branch")):
        assert f"          {variable}: ${{{{ {value} }}}}\n" in identify
    script = step_script(text, "Identify the pull request")
    assert '[ "$pr_head" != "$HEAD_SHA" ]' in script
    assert '[ "$pr_repo" != "$HEAD_REPO" ] || [ "$pr_branch" != "$HEAD_BRANCH" ]' in script
    assert "--jq '.head.sha, (.head.repo.full_name // \"\"), .head.ref, .base.ref, .base.sha'" in script
    # the base is the pull request's as the API says, and one pull request holds the head
    assert '[ "$pr_base" != "$base_sha" ]' in script
    assert 'pulls?state=open&head=${HEAD_REPO%%/*}:$HEAD_BRANCH' in script
    assert script.index("du -sb") < script.index("run.json")  # the size is checked before anything reads
    # The base commit is the measured one and lies on the base branch the API names.
    base = step_text(text, "Check out the measured base commit (baselines and thresholds come from here)")
    assert "ref: ${{ steps.identify.outputs.base-sha }}" in base and "fetch-depth: 0" in base
    check = step_script(text, "Check that the base commit is on the base branch")
    assert f'git -C .perfgate-base {NO_HOOKS} \\\n    merge-base --is-ancestor "$BASE_SHA" "origin/$BASE_REF"' in check
    # The judge's command checks the artifact against the same pull request and commit.
    judge = step_script(text, "Judge")
    assert '--expect-head-sha "$HEAD_SHA" --expect-pr "$NUMBER" --expect-base-sha "$BASE_SHA"' in judge
    # Nothing of the pull request is checked out: only the default branch and the base commit.
    checkouts = re.findall(r"uses: actions/checkout@.*\n        with:\n((?:          .*\n)+)", text)
    assert checkouts == ["          persist-credentials: false\n",
                         "          ref: ${{ steps.identify.outputs.base-sha }}\n          path: .perfgate-base\n"
                         "          fetch-depth: 0\n          persist-credentials: false\n"]
    assert "head_sha }}" not in "".join(checkouts) and "head_branch" not in "".join(checkouts)


@pytest.mark.parametrize("name", ["perfgate-judge.yml", "rebaseline.yml"])
def test_every_git_command_of_a_hosted_job_disables_hooks(name: str) -> None:
    """Hooks and fsmonitor are commands git runs from its configuration: a hosted job that
    holds a write token runs git with both switched off."""
    job = jobs(template(name))["judge" if name == "perfgate-judge.yml" else "pull-request"]
    commands = 0
    for script in run_blocks(job):
        for line in code_lines(script):
            for found in re.finditer(r"(?<![\w./-])git(?=\s)", line):
                rest = line[found.end():]
                assert re.match(rf" (?:-C \S+ )?{re.escape(NO_HOOKS)}(?: |$)", rest), line
                commands += 1
    assert commands == (2 if name == "perfgate-judge.yml" else 6)  # every one of them was checked


def test_the_rebaseline_hosted_job_takes_no_path_from_the_runner() -> None:
    """A poisoned runner controls the measure job's outputs: none may name a path or reach
    a script of the job that holds `contents: write`."""
    text = template("rebaseline.yml")
    measure, pull_request = jobs(text)["measure"], jobs(text)["pull-request"]
    (outputs_block,) = re.findall(r"^    outputs:\n((?:      .*\n)+)", measure, re.M)
    assert [line.strip() for line in outputs_block.splitlines() if not line.strip().startswith("#")] == [
        "clocks: ${{ steps.clocks.outputs.outcome }}"]
    for line in pull_request.splitlines():
        if re.match(r"^\s*(path|ref|name|repository):", line):
            assert "needs." not in line, line
    for script in run_blocks(pull_request):
        assert "needs." not in script
    uses_of_needs = [line.strip() for line in pull_request.splitlines() if "needs." in line]
    assert uses_of_needs == ["CLOCKS: ${{ needs.measure.outputs.clocks }}"]
    opening = step_script(text, "Open a pull request with the new baselines")
    assert opening.count("$CLOCKS") == 1 and "tr -cd 'A-Za-z0-9 .,:;()=+/_-'" in opening
    # The store's path is this job's own, and the download goes outside the work tree.
    assert "STORE: ${{ steps.store.outputs.path }}" in pull_request
    download = step_text(text, "Download the new baselines (outside the work tree)")
    assert "path: ${{ runner.temp }}/new-baselines\n" in download
    validate = step_script(text, "Validate the new baselines and put them in place")
    assert validate.index("validate-baselines") < validate.index("cp -R --no-dereference")


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


def step_text(text: str, name: str) -> str:
    """The lines of the step called ``name``, after its `- name:` line."""
    start = re.search(rf"^(\s*)- name: {re.escape(name)}$", text, re.M)
    assert start, name
    indent = len(start.group(1))
    step = []
    for line in text[start.end():].splitlines()[1:]:
        if line.strip() and len(line) - len(line.lstrip()) <= indent:
            break
        step.append(line)
    return "\n".join(step) + "\n"


def step_script(text: str, name: str) -> str:
    """The `run:` script of the step called ``name`` (a block or a one-line value)."""
    (script,) = run_blocks(step_text(text, name))
    return script


def bash(script: str, cwd: Path, env: dict[str, str], bin_dir: Path) -> subprocess.CompletedProcess[str]:
    base_path = os.pathsep.join(p for p in ("/usr/local/bin", "/usr/bin", "/bin") if Path(p).is_dir())
    environment = {"PATH": f"{bin_dir}{os.pathsep}{base_path}", "HOME": str(cwd), "LANG": "C.UTF-8",
                   "RUNNER_TEMP": str(cwd), **env}
    # GitHub runs an unspecified `shell:` on Linux as `bash -e {0}`.
    return subprocess.run(["bash", "-e", "-c", script], cwd=cwd, env=environment, capture_output=True,
                          text=True, timeout=120)


def outputs(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines())


@pytest.mark.parametrize("project", [True, False], ids=["base project", "perfgate alone"])
def test_the_harness_is_installed_from_the_base_commit(tmp_path: Path, bin_dir: Path, project: bool) -> None:
    (tmp_path / ".perfgate-base").mkdir()
    (tmp_path / ".perfgate-base" / "pyproject.toml").write_text(
        '[project]\nname = "train"\n' if project else '[tool.perfgate]\nrepeats = 5\n')
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "the pull request"\n')
    fake(bin_dir, "python", f"""\
        echo "python $*" >> "{tmp_path}/calls"
        [ "$1 $2 $3" = "-I -m venv" ] || exit 1
        mkdir -p "$4/bin"
        printf '#!/bin/bash\\necho "venv-python $*" >> "{tmp_path}/calls"\\n' > "$4/bin/python"
        chmod +x "$4/bin/python"
        """)
    script = step_script(template("perfgate.yml"), "Install the harness from the base commit")
    done = bash(script, tmp_path, {}, bin_dir)
    assert done.returncode == 0, done.stderr
    installed = "./.perfgate-base" if project else "perfgate"
    assert (tmp_path / "calls").read_text().splitlines() == [
        f"python -I -m venv {tmp_path}/perfgate-venv",
        f"venv-python -I -m pip install --no-cache-dir --quiet -c .perfgate-base/constraints.txt {installed}"]


@pytest.mark.parametrize(("lock", "present", "mhz", "locked", "outcome", "clocks"), [
    ("ok", True, "1245", "true", "locked: graphics clock 1245 MHz (nvidia-smi -lgc)", "locked:1245"),
    ("refuse", True, "1245", "false",
     "not locked: nvidia-smi -lgc was refused (Insufficient permissions sudo: a password is required )", "unlocked"),
    ("ok", False, "1245", "false", "not locked: nvidia-smi not found", "unlocked"),
    ("ok", True, "", "false", "not locked: GPU_LOCK_MHZ is empty (clocks recorded only)", "unlocked"),
    ("ok", True, "1245,1590", "false", "not locked: GPU_LOCK_MHZ is not a whole number of MHz", "unlocked"),
])
def test_the_clock_step(tmp_path: Path, bin_dir: Path, lock: str, present: bool, mhz: str, locked: str,
                        outcome: str, clocks: str) -> None:
    if present:
        fake(bin_dir, "nvidia-smi", f"""\
            echo "$*" >> "{tmp_path}/calls"
            case "$1" in
              -lgc) [ "{lock}" = ok ] && {{ echo "GPU clocks set"; exit 0; }}
                    echo "Insufficient permissions"; exit 4 ;;
              -q) printf 'Clocks\\n    Graphics : 1245 MHz\\n' ;;
            esac
            """)
    for name in ("perfgate.yml", "rebaseline.yml"):
        for leftover in ("out", "env", "calls", "sudo-calls"):
            (tmp_path / leftover).unlink(missing_ok=True)
        (tmp_path / "out").touch()
        (tmp_path / "env").touch()
        script = step_script(template(name), "Record GPU clocks and lock them if permitted")
        done = bash(script, tmp_path, {"GPU_LOCK_MHZ": mhz, "GITHUB_OUTPUT": str(tmp_path / "out"),
                                       "GITHUB_ENV": str(tmp_path / "env")}, bin_dir)
        assert done.returncode == 0, done.stderr
        assert outputs(tmp_path / "out") == {"locked": locked, "outcome": outcome}
        # The contract with perfgate's environment record: `locked:<MHz>` or `unlocked`.
        assert (tmp_path / "env").read_text() == f"PERFGATE_GPU_CLOCKS={clocks}\n"
        record = (tmp_path / "perfgate-artifacts" / "gpu-clocks.txt").read_text()
        assert record.startswith(f"outcome: {outcome}\n\n$ nvidia-smi -q -d CLOCK\n")
        if present:
            assert "Graphics : 1245 MHz" in record
            lgc = ["-lgc 1245,1245"] if mhz == "1245" else []
            assert (tmp_path / "calls").read_text().splitlines() == [*lgc, "-q -d CLOCK"]
        sudo = (tmp_path / "sudo-calls").read_text().splitlines() if (tmp_path / "sudo-calls").exists() else []
        assert sudo == (["-n /usr/bin/nvidia-smi -lgc 1245,1245"] if present and lock == "refuse" else [])


# --- the judge's steps ----------------------------------------------------------------------

HEAD, BASE = "c" * 40, "b" * 40
TAG_7 = " (#7 into bbbbbbbbbbbb)"  # perfgate.gate.github.judged_for(7, BASE)


def holders(folder: Path, *pulls: tuple) -> None:
    """The open pull requests of the head branch, as the identify step lists them for a kept
    verdict: number, head commit, base commit, head repository, head branch."""
    rows = []
    for pull in pulls:
        number, base, repo, sha, branch = (*pull, HEAD, "feature") if len(pull) == 3 else pull
        rows.append(f"{number}\t{sha}\t{base}\t{repo}\t{branch}\n")
    (folder / "holders.tsv").write_text("".join(rows))


@pytest.fixture
def identify(tmp_path: Path, bin_dir: Path):
    """Runs the identify step against a fake `gh` that plays the GitHub API."""
    results = tmp_path / "perfgate-results"
    results.mkdir()
    (results / "run.json").write_text(json.dumps({"kind": "perfgate.ci-run", "pr_number": 7, "base_sha": BASE}))
    (tmp_path / "jobs.tsv").write_text("perfgate (T4)\tskipped\nperfgate (waiting for a maintainer)\tsuccess\n")
    (tmp_path / "pr.txt").write_text(f"{HEAD}\nacme/train\nfeature\nmain\n{BASE}\n")
    (tmp_path / "open.tsv").write_text(f"7\t{HEAD}\n12\t{'e' * 40}\n")
    holders(tmp_path, (7, BASE, "acme/train"), (12, BASE, "acme/train", "e" * 40, "other"))
    fake(bin_dir, "gh", f"""\
        printf '%s\\n' "$*" >> "{tmp_path}/gh-calls"
        case "$*" in
          *"/actions/runs/99/jobs"*) cat "{tmp_path}/jobs.tsv" ;;
          *"repos/acme/train/pulls/7 "*) [ -f "{tmp_path}/pr.txt" ] || exit 1; cat "{tmp_path}/pr.txt" ;;
          *"repos/acme/train/pulls?state=open&head=acme:feature "*) cat "{tmp_path}/open.tsv" ;;
          *"-X GET repos/acme/train/pulls -f state=open -f head="*" --jq "*)
            [ -f "{tmp_path}/holders.tsv" ] || exit 1; cat "{tmp_path}/holders.tsv" ;;
          *"repos/acme/train/commits/{HEAD}/statuses?per_page=100 "*) cat "{tmp_path}/latest.txt" ;;
          *) exit 1 ;;
        esac
        """)
    (tmp_path / "latest.txt").write_text("\n")
    script = step_script(template("perfgate-judge.yml"), "Identify the pull request")

    def run(downloaded: str = "success", head_repo: str = "acme/train"):
        for leftover in ("out", "gh-calls"):
            (tmp_path / leftover).unlink(missing_ok=True)
        (tmp_path / "out").touch()
        env = {"GH_TOKEN": "t", "GH_REPO": "acme/train", "DOWNLOADED": downloaded, "RUN_ID": "99",
               "HEAD_SHA": HEAD, "HEAD_REPO": head_repo, "HEAD_BRANCH": "feature", "RESULTS": str(results),
               "GATE_JOB": "perfgate (T4)", "GITHUB_OUTPUT": str(tmp_path / "out")}
        done = bash(script, tmp_path, env, bin_dir)
        calls = (tmp_path / "gh-calls").read_text().splitlines() if (tmp_path / "gh-calls").exists() else []
        return done, outputs(tmp_path / "out"), calls

    run.results, run.dir = results, tmp_path
    return run


def test_the_judge_identifies_the_measured_pull_request(identify) -> None:
    done, out, calls = identify()
    assert done.returncode == 0, done.stderr
    assert out == {"ok": "true", "number": "7", "base-sha": BASE, "base-ref": "main"}
    assert calls == ['api repos/acme/train/pulls/7 --jq .head.sha, (.head.repo.full_name // ""), .head.ref, .base.ref, '
                     '.base.sha',
                     'api --paginate repos/acme/train/pulls?state=open&head=acme:feature --jq .[] | [.number, '
                     '.head.sha] | @tsv']


def test_the_judge_refuses_an_older_base_than_the_pull_requests(identify) -> None:
    # run.json named an older commit of main (with looser rules): the API's base decides
    (identify.dir / "pr.txt").write_text(f"{HEAD}\nacme/train\nfeature\nmain\n{'a' * 40}\n")
    done, out, _ = identify()
    assert done.returncode == 0, done.stderr
    assert out == {"error": f"pull request #7's base is {'a' * 40}, not the measured {BASE}"}


def test_a_second_pull_request_from_the_same_head_cannot_borrow_the_first_ones_status(identify) -> None:
    (identify.dir / "open.tsv").write_text(f"7\t{HEAD}\n8\t{HEAD}\n")
    done, out, _ = identify()
    assert done.returncode == 0, done.stderr
    assert out == {"error": "pull requests #7 #8 hold the measured head commit; perfgate judges one pull request "
                            "per head commit"}


def test_without_results_a_fork_waiting_for_its_label_is_pending(identify) -> None:
    done, out, _ = identify(downloaded="failure", head_repo="mallory/train")
    assert done.returncode == 0 and out == {"waiting": "true"}, done.stderr
    assert "the measuring job did not run" in done.stdout and "pending" in done.stdout
    (identify.dir / "jobs.tsv").write_text("perfgate (T4)\tfailure\n")
    done, out, _ = identify(downloaded="failure", head_repo="mallory/train")
    assert done.returncode == 0, done.stderr
    assert out == {"error": "the measuring job ended (failure) without results to judge"}
    assert done.stdout.startswith("::error title=perfgate judge::")


@pytest.mark.parametrize(("jobs_tsv", "head_repo", "error"), [
    ("perfgate (T4)\tskipped\nperfgate verdict\tsuccess\n", "acme/train",
     "the measuring job 'perfgate (T4)' skipped in this run: nothing was measured for this commit"),
    ("perfgate verdict\tsuccess\n", "acme/train",
     "the measuring job 'perfgate (T4)' is missing (renamed or removed) in this run: nothing was measured for this "
     "commit"),
    ("perfgate (T4) \tsuccess\nperfgate\tskipped\n", "mallory/train",
     "the measuring job 'perfgate (T4)' is missing (renamed or removed) in this run: nothing was measured for this "
     "commit"),
    ("perfgate (T4)\tcancelled\n", "acme/train", "the measuring job ended (cancelled) without results to judge"),
    ("perfgate (T4)\tsuccess\n", "acme/train", "the measuring job ended (success) without results to judge"),
    ("", "acme/train",
     "the measuring job 'perfgate (T4)' is missing (renamed or removed) in this run: nothing was measured for this "
     "commit"),
], ids=["skipped", "renamed, with a job named like the check", "fork renamed", "cancelled", "no artifact",
        "no jobs"])
def test_a_run_that_measured_nothing_is_an_error_not_silence(identify, jobs_tsv: str, head_repo: str,
                                                            error: str) -> None:
    """Case 1: the pull request's own perfgate.yml skips or renames the measuring job (and adds
    a job named like the required check). The identify step, run with a stub `gh`, used to exit 0
    with no outputs, so no status was set; now it sets an error status on the head commit."""
    (identify.dir / "jobs.tsv").write_text(jobs_tsv)
    done, out, calls = identify(downloaded="failure", head_repo=head_repo)
    assert done.returncode == 0, done.stderr
    assert out == {"error": error}
    assert done.stdout.startswith("::error title=perfgate judge::")


@pytest.mark.parametrize("latest", ["success", "failure"])
def test_a_verdict_already_set_for_the_commit_stands_when_a_run_measured_nothing(identify, latest: str) -> None:
    """A label's run of the same commit (the measuring job skipped) leaves the verdict the judge set
    for this pull request against its base as it is."""
    (identify.dir / "latest.txt").write_text(f"{latest}\t{'pass (1 PASS)' if latest == 'success' else 'REGRESSION'}"
                                             f"{TAG_7}\n")
    for head_repo in ("acme/train", "mallory/train"):
        holders(identify.dir, (7, BASE, head_repo))
        done, out, calls = identify(downloaded="failure", head_repo=head_repo)
        assert done.returncode == 0 and out == {}, done.stderr
        assert f"the verdict already set for {HEAD} ({latest}) in pull request #7 stands" in done.stdout
        assert calls[-2].startswith(f"api repos/acme/train/commits/{HEAD}/statuses?per_page=100 --jq ")
        assert calls[-1] == (f"api --paginate -X GET repos/acme/train/pulls -f state=open -f head={head_repo[:-6]}:"
                             "feature --jq .[] | [.number, .head.sha, .base.sha, (.head.repo.full_name // \"\"), "
                             ".head.ref] | @tsv")
    (identify.dir / "latest.txt").write_text(f"error\tperfgate could not judge{TAG_7}\n")  # an error does not stand
    done, out, _ = identify(downloaded="failure")
    assert list(out) == ["error"]


@pytest.mark.parametrize(("tag", "head_repo", "out"), [
    (" (#11 into aaaaaaaaaaaa)", "mallory/train", {"waiting": "true"}),
    (" (#11 into aaaaaaaaaaaa)", "acme/train",
     {"error": "the measuring job 'perfgate (T4)' skipped in this run: nothing was measured for this commit"}),
    (" (#7 into aaaaaaaaaaaa)", "mallory/train", {"waiting": "true"}),
    (" (#11 into bbbbbbbbbbbb)", "mallory/train", {"waiting": "true"}),
    ("", "mallory/train", {"waiting": "true"}),
    (TAG_7, "mallory/train", {}),
], ids=["another pull request and base, a fork", "another pull request and base, same repository", "another base",
        "another pull request", "no tag", "this pull request and base (the control)"])
def test_a_verdict_set_for_another_pull_request_or_base_does_not_stand(identify, tag: str, head_repo: str,
                                                                         out: dict[str, str]) -> None:
    """Case 2: the head was judged `success` in pull request #11 into release-1 (δ 50%); pull request
    #7 holds the same head, into main, and its run measured nothing (a fork waiting for its label).
    The other pull request's success never stands here: the status is pending (a fork) or an error."""
    (identify.dir / "latest.txt").write_text(f"success\tpass (1 PASS){tag}\n")
    holders(identify.dir, (7, BASE, head_repo))
    done, found, _ = identify(downloaded="failure", head_repo=head_repo)
    assert done.returncode == 0 and found == out, done.stdout + done.stderr
    if out:
        assert f"the verdict set for {HEAD} (success) was not set for the pull request that holds it now" in done.stdout
        assert "stands" not in done.stdout.replace("does not stand", "")


@pytest.mark.parametrize("pulls", [
    [(7, BASE, "mallory/train"), (8, BASE, "mallory/train")],  # two pull requests hold the head
    [(7, BASE, "eve/train")],  # a pull request from another repository's branch of the same name
    [(7, BASE, "mallory/train", "d" * 40, "feature")],  # the pull request has moved on
    [(7, BASE, "mallory/train", HEAD, "feature-2")],  # another branch
    [],
], ids=["two holders", "another repository", "another head", "another branch", "none"])
def test_a_kept_verdict_needs_the_one_pull_request_that_holds_the_commit(identify, pulls: list[tuple]) -> None:
    (identify.dir / "latest.txt").write_text(f"success\tpass (1 PASS){TAG_7}\n")
    holders(identify.dir, *pulls)
    done, out, _ = identify(downloaded="failure", head_repo="mallory/train")
    assert done.returncode == 0 and out == {"waiting": "true"}, done.stdout + done.stderr


def test_a_kept_verdict_whose_pull_requests_cannot_be_listed_is_an_error(identify) -> None:
    (identify.dir / "latest.txt").write_text(f"success\tpass (1 PASS){TAG_7}\n")
    (identify.dir / "holders.tsv").unlink()
    done, out, _ = identify(downloaded="failure", head_repo="mallory/train")
    assert out == {"error": "the open pull requests of mallory/train:feature could not be listed"}


def test_statuses_that_cannot_be_read_are_an_error(identify) -> None:
    (identify.dir / "latest.txt").unlink()
    done, out, _ = identify(downloaded="failure")
    assert out == {"error": f"the statuses of {HEAD} could not be read"}


def test_the_judge_refuses_results_over_64_mb_before_reading_them(identify) -> None:
    with open(identify.results / "trace.json", "wb") as handle:
        handle.truncate(64 * 1024 * 1024 + 1)
    done, out, calls = identify()
    assert done.returncode == 0, done.stderr
    assert out == {"error": "the measuring job's results are larger than 64 MB; not read"} and calls == []


@pytest.mark.parametrize("manifest", [
    '{"pr_number": "7; rm -rf /", "base_sha": "' + BASE + '"}',
    '{"pr_number": true, "base_sha": "' + BASE + '"}',
    '{"pr_number": 0, "base_sha": "' + BASE + '"}',
    '{"pr_number": -7, "base_sha": "' + BASE + '"}',
    '{"pr_number": 7.0, "base_sha": "' + BASE + '"}',
    '{"pr_number": 7, "base_sha": "main"}',
    '{"pr_number": 7, "base_sha": "' + BASE.upper() + '"}',
    '{"pr_number": 7}',
    '[7]',
    'not json',
    '{"pr_number": 7, "base_sha": "' + BASE + '", "pad": "' + "x" * (1 << 20) + '"}',
    None,
], ids=["text", "bool", "zero", "negative", "float", "ref", "upper", "no base", "list", "not json", "too long",
        "missing"])
def test_the_judge_refuses_a_bad_run_json(identify, manifest: str | None) -> None:
    if manifest is None:
        (identify.results / "run.json").unlink()
        (identify.results / "other.json").write_text("{}")
    else:
        (identify.results / "run.json").write_text(manifest)
    done, out, calls = identify()
    assert done.returncode == 0, done.stderr
    assert out == {"error": "the results have no valid run.json (pull request number and base commit)"}
    assert calls == []


def test_a_superseded_pull_request_gets_no_comment_and_no_status(identify) -> None:
    (identify.dir / "pr.txt").write_text(f"{'d' * 40}\nacme/train\nfeature\nmain\n")
    done, out, _ = identify()
    assert done.returncode == 0 and out == {}, done.stderr
    assert f"::warning title=perfgate judge::pull request #7 is at {'d' * 40}" in done.stdout


@pytest.mark.parametrize("pull", [f"{HEAD}\nmallory/train\nfeature\nmain\n", f"{HEAD}\nacme/train\nother\nmain\n",
                                  f"{HEAD}\n\nacme/train\nfeature\n", f"{HEAD}\n", None],
                         ids=["other repository", "other branch", "deleted fork", "short answer", "no such pull request"])
def test_the_judge_refuses_a_pull_request_that_was_not_measured(identify, pull: str | None) -> None:
    if pull is None:
        (identify.dir / "pr.txt").unlink()
    else:
        (identify.dir / "pr.txt").write_text(pull)
    done, out, _ = identify()
    assert done.returncode == 0, done.stderr
    assert list(out) == ["error"] and out["error"].startswith("pull request #7")


def git(cwd: Path, *argv: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *argv], cwd=cwd,
                          check=True, capture_output=True, text=True).stdout


def commit(work: Path, name: str) -> str:
    (work / name).write_text(name)
    git(work, "add", name)
    git(work, "commit", "-qm", name)
    return git(work, "rev-parse", "HEAD").strip()


def test_the_base_commit_must_be_on_the_base_branch(tmp_path: Path, bin_dir: Path) -> None:
    remote, work = tmp_path / "remote.git", tmp_path / "work"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(remote))
    git(tmp_path, "init", "-q", "-b", "main", str(work))
    first, second = commit(work, "a"), commit(work, "b")
    git(work, "switch", "-q", "-c", "side", first)
    side = commit(work, "c")
    git(work, "push", "-q", str(remote), "main", "side")
    git(tmp_path, "clone", "-q", str(remote), str(tmp_path / ".perfgate-base"))
    script = step_script(template("perfgate-judge.yml"), "Check that the base commit is on the base branch")

    def run(at: str, base_sha: str) -> dict[str, str]:
        git(tmp_path / ".perfgate-base", "checkout", "-q", "--detach", at)
        (tmp_path / "out").write_text("")
        done = bash(script, tmp_path, {"BASE_SHA": base_sha, "BASE_REF": "main",
                                       "GITHUB_OUTPUT": str(tmp_path / "out")}, bin_dir)
        assert done.returncode == 0, done.stderr
        return outputs(tmp_path / "out")

    assert run(first, first) == {"ok": "true"}
    assert run(second, second) == {"ok": "true"}
    assert run(side, side) == {"error": "the measured base commit is not on the pull request's base branch"}
    assert run(second, first) == {"error": "the base checkout is not the measured base commit"}


STATUSES = (f"api --paginate repos/acme/train/commits/{HEAD}/statuses?per_page=100 --jq .[] | select(.context == "
            '"perfgate") | {state, description: (.description // ""), created_at, creator: (.creator.login // "")} | '
            "tojson")
EVENTS = ("api --paginate repos/acme/train/issues/7/events?per_page=100 --jq .[] | select((.event == \"labeled\" or "
          ".event == \"unlabeled\") and .label.name == $ENV.ACCEPT_LABEL) | [.event, (.actor.login // \"\"), "
          ".created_at] | @tsv")
RECORDED = ('{"state":"failure","description":"REGRESSION (1 REGRESSION)","created_at":"2026-12-04T05:00:00Z",'
            '"creator":"github-actions[bot]"}\n')


LABELLED = "labeled\tmaintainer-1\t2026-12-04T06:00:00Z\n"
PUSHED = {"after": HEAD, "timestamp": "2026-12-04T05:00:00Z", "actor": {"login": "author-1"}}
ACKNOWLEDGED = {"by": "maintainer-1", "at": "2026-12-04T06:00:00Z", "permission": "maintain", "via": "label",
                "head_since": "2026-12-04T05:00:00Z", "pusher": "author-1", "pr_author": "author-1",
                "commit_authors": ["author-1", "web-flow"]}
with_jq = pytest.mark.skipif(shutil.which("jq") is None, reason="the fake gh applies --jq with jq")


def api_gh(bin_dir: Path, folder: Path, answers: dict[str, object]) -> None:
    """A fake `gh` that answers `gh api ... --jq EXPR` by applying EXPR (with jq) to the JSON given
    for the first pattern its arguments match, in order; a pattern whose answer is None fails."""
    cases = []
    for i, (pattern, answer) in enumerate(answers.items()):
        if answer is None:
            cases.append(f'  *"{pattern}"*) exit 1 ;;')
        else:
            (folder / f"answer-{i}.json").write_text(json.dumps(answer))
            cases.append(f'  *"{pattern}"*) jq -r "${{@: -1}}" "{folder}/answer-{i}.json" ;;')
    fake(bin_dir, "gh", f"""\
        printf '%s\\n' "$*" >> "{folder}/gh-calls"
        case "$*" in
        """ + "\n".join(cases) + """
          *) echo "unexpected: $*" >&2; exit 1 ;;
        esac
        """)


def history_answers(events: str, activity: list | None, permission: dict | None = None) -> dict[str, object]:
    events_json = [{"event": e, "actor": {"login": who}, "created_at": when, "label": {"name": "perfgate: accept slowdown"}}
                   for e, who, when in (line.split("\t") for line in events.splitlines())]
    return {
        "/pulls/7/files --jq ": [{"status": "modified", "filename": "x.py"}],
        f"/contents/pyproject.toml?ref={HEAD}": None,
        f"/commits/{HEAD}/statuses?per_page=100 ": [{**json.loads(RECORDED), "context": "perfgate",
                                                      "creator": {"login": "github-actions[bot]"}},
                                                     {"context": "other", "state": "failure", "description": "x",
                                                      "created_at": "2026-12-04T05:00:00Z"}],
        "/issues/7/events?per_page=100 ": events_json,
        "repos/acme/train/collaborators/maintainer-1/permission --jq ": permission or {
            "permission": "write", "role_name": "maintain",
            "user": {"login": "maintainer-1", "permissions": {"admin": False, "maintain": True, "push": True,
                                                               "triage": True, "pull": True}}},
        "-X GET repos/acme/train/activity -f ref=refs/heads/feature -f direction=desc -F per_page=1 --jq ": activity,
        "repos/acme/train/pulls/7 --jq ": {"number": 7, "user": {"login": "author-1"}},
        f"repos/acme/train/commits/{HEAD} --jq ": {"author": {"login": "author-1"}, "committer": {"login": "web-flow"}},
        "repos/acme/train/actions/runs/99/jobs --jq ": {"jobs": [
            {"name": "perfgate (waiting for a maintainer)", "started_at": "2026-12-04T04:59:00Z",
             "completed_at": "2026-12-04T04:59:01Z"},
            {"name": "perfgate (T4)", "started_at": "2026-12-04T05:00:10Z", "completed_at": "2026-12-04T05:12:30Z"}]},
    }


JUDGE_ENV = {"GH_TOKEN": "t", "GH_REPO": "acme/train", "NUMBER": "7", "HEAD_SHA": HEAD, "HEAD_REPO": "acme/train",
             "HEAD_BRANCH": "feature", "RUN_ID": "99", "BASE_SHA": BASE, "ACCEPT_LABEL": "perfgate: accept slowdown",
             "GATE_JOB": "perfgate (T4)"}


@with_jq
@pytest.mark.parametrize(("events", "activity", "acknowledged"), [
    ("", [PUSHED], None),
    (LABELLED, [PUSHED], ACKNOWLEDGED),
    (LABELLED + "unlabeled\tmaintainer-1\t2026-12-04T06:01:00Z\n", [PUSHED], None),
    ("labeled\t../../evil\t2026-12-04T06:00:00Z\n", [PUSHED], None),
    (LABELLED, [{**PUSHED, "after": "d" * 40}], {**ACKNOWLEDGED, "head_since": "", "pusher": ""}),
    (LABELLED, [], {**ACKNOWLEDGED, "head_since": "", "pusher": ""}),
    (LABELLED, None, {**ACKNOWLEDGED, "head_since": "", "pusher": ""}),
    (LABELLED, [{**PUSHED, "timestamp": "2026-12-04T06:00:00.250+01:00"}],
     {**ACKNOWLEDGED, "head_since": "2026-12-04T05:00:01Z"}),
], ids=["no label", "labelled", "label removed", "odd login", "another push last", "no activity",
        "activity unreadable", "fractional time"])
def test_the_judge_step_reads_the_head_commits_history_from_the_api(tmp_path: Path, bin_dir: Path, events: str,
                                                                     activity: list | None,
                                                                     acknowledged: dict | None) -> None:
    """The recorded `perfgate` statuses of the head commit and who applied the accepting label
    (with their role), when the head commit became the pull request's head and who pushed it (the
    head repository's latest activity on the branch, which must be this commit's push), the pull
    request's author and the commit's author and committer reach perfgate judge as files, fetched
    by the trusted job."""
    api_gh(bin_dir, tmp_path, history_answers(events, activity))
    fake(tmp_path / "perfgate-venv" / "bin", "perfgate", f'printf "%s\\n" "$@" > "{tmp_path}/argv"\nexit 1\n')
    script = step_script(template("perfgate-judge.yml"), "Judge")
    done = bash(script, tmp_path, {**JUDGE_ENV, "RESULTS": str(tmp_path / "perfgate-results")}, bin_dir)
    assert done.returncode == 0, done.stderr
    argv = (tmp_path / "argv").read_text().splitlines()
    verdicts, acknowledgement = tmp_path / "perfgate-verdicts.jsonl", tmp_path / "perfgate-acknowledgement.json"
    assert argv[argv.index("--previous-verdicts") + 1] == str(verdicts)
    assert argv[argv.index("--acknowledgement") + 1] == str(acknowledgement)
    calls = (tmp_path / "gh-calls").read_text().splitlines()
    assert STATUSES in calls and EVENTS in calls
    assert verdicts.read_text() == RECORDED
    written = acknowledgement.read_text().strip()
    assert (json.loads(written) if written else None) == acknowledged
    assert any("collaborators" in call for call in calls) == (acknowledged is not None)
    # what the step wrote is what perfgate judge reads
    from perfgate.gate.github import read_acknowledgement, read_recorded_verdicts

    assert [r.regression for r in read_recorded_verdicts(verdicts)] == [True]
    ack = read_acknowledgement(acknowledgement)
    assert (ack is not None and ack.head_since == acknowledged["head_since"]) if acknowledged else ack is None
    text = template("perfgate-judge.yml")
    assert '          ACCEPT_LABEL: "perfgate: accept slowdown"\n' in step_text(text, "Judge")
    # the branch reaches the activity API as a query field gh encodes, never pasted into the URL
    assert "-f \"ref=refs/heads/$HEAD_BRANCH\"" in step_script(text, "Judge")


@with_jq
@pytest.mark.parametrize(("permissions", "role"), [
    ({"admin": True, "maintain": True, "push": True, "triage": True, "pull": True}, "admin"),
    ({"admin": False, "maintain": True, "push": True, "triage": True, "pull": True}, "maintain"),
    ({"admin": False, "maintain": False, "push": True, "triage": True, "pull": True}, "write"),
    ({"admin": False, "maintain": False, "push": False, "triage": True, "pull": True}, "triage"),
    ({"admin": False, "maintain": False, "push": False, "triage": False, "pull": True}, "read"),
    (None, "write"),
])
def test_the_role_comes_from_the_permission_booleans_not_the_legacy_field(tmp_path: Path, bin_dir: Path,
                                                                          permissions: dict | None,
                                                                          role: str) -> None:
    """The collaborators permission API's `permission` says write for maintain and read for triage;
    the judge step reads the user's permission booleans (the legacy field only without them)."""
    answer = {"permission": "write" if role in ("maintain", "write") else "read" if role != "admin" else "admin",
              "user": {"login": "maintainer-1", **({"permissions": permissions} if permissions else {})}}
    api_gh(bin_dir, tmp_path, history_answers(LABELLED, [PUSHED], answer))
    fake(tmp_path / "perfgate-venv" / "bin", "perfgate", "exit 0\n")
    done = bash(step_script(template("perfgate-judge.yml"), "Judge"), tmp_path,
                {**JUDGE_ENV, "RESULTS": str(tmp_path / "perfgate-results")}, bin_dir)
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "perfgate-acknowledgement.json").read_text())["permission"] == role


@with_jq
@pytest.mark.parametrize(("jobs", "written"), [
    (None, ""),
    ({"jobs": [{"name": "perfgate (T4)", "started_at": "2026-12-04T05:00:10Z", "completed_at": None}]}, ""),
    ({"jobs": [{"name": "perfgate (T4) ", "started_at": "2026-12-04T05:00:10Z",
                "completed_at": "2026-12-04T05:12:30Z"}]}, ""),
    ({"jobs": [{"name": "perfgate (T4)", "started_at": "2026-12-04T05:00:10Z",
                "completed_at": "2026-12-04T05:12:30Z"}]},
     '{"started_at": "2026-12-04T05:00:10Z", "completed_at": "2026-12-04T05:12:30Z"}'),
], ids=["unreadable", "not ended", "renamed", "found"])
def test_the_judge_step_passes_the_measuring_jobs_times(tmp_path: Path, bin_dir: Path, jobs: dict | None,
                                                        written: str) -> None:
    """The measuring job's start and end come from the Actions API, for `--measuring-job`; a job
    not found (or not ended) leaves the file empty, which perfgate judge refuses (exit 2)."""
    answers = history_answers("", [PUSHED])
    answers["repos/acme/train/actions/runs/99/jobs --jq "] = jobs
    api_gh(bin_dir, tmp_path, answers)
    fake(tmp_path / "perfgate-venv" / "bin", "perfgate", f'printf "%s\\n" "$@" > "{tmp_path}/argv"\nexit 0\n')
    done = bash(step_script(template("perfgate-judge.yml"), "Judge"), tmp_path,
                {**JUDGE_ENV, "RESULTS": str(tmp_path / "perfgate-results")}, bin_dir)
    assert done.returncode == 0, done.stderr
    argv = (tmp_path / "argv").read_text().splitlines()
    job = tmp_path / "perfgate-measuring-job.json"
    assert argv[argv.index("--measuring-job") + 1] == str(job)
    assert job.read_text().strip() == written
    if written:
        from perfgate.gate.github import read_measuring_job

        assert read_measuring_job(job).seconds == 740.0
    else:
        assert "the measuring job 'perfgate (T4)' was not found among this run's jobs, or has not ended" in done.stdout


@pytest.mark.parametrize("pyproject", [True, False], ids=["head pyproject", "none"])
def test_the_judge_step(tmp_path: Path, bin_dir: Path, pyproject: bool) -> None:
    fake(bin_dir, "gh", f"""\
        case "$*" in
          *"/commits/{HEAD}/statuses?per_page=100 "* | *"/issues/7/events?per_page=100 "*) ;;
          *"--paginate repos/acme/train/actions/runs/99/jobs --jq "*) printf '2026-12-04T05:00:10Z\\t2026-12-04T05:12:30Z\\n' ;;
          *"--paginate repos/acme/train/pulls/7/files --jq "*)
            printf 'modified\\tbaselines/a/w.json\\t\\nadded\\tworkloads/new.py\\t\\nadded\\tworkloads/../x.py\\t\\n' ;;
          *"-H Accept: application/vnd.github.raw repos/mallory/train/contents/workloads/new.py?ref={HEAD}")
            printf 'W = Workload(name="new")\\n' ;;
          *"-H Accept: application/vnd.github.raw repos/mallory/train/contents/pyproject.toml?ref={HEAD}")
            [ "{pyproject}" = True ] || {{ echo "HTTP 404" >&2; exit 1; }}
            printf '[tool.perfgate]\\nrepeats = 3\\n' ;;
          *) echo "unexpected: $*" >&2; exit 1 ;;
        esac
        """)
    fake(tmp_path / "perfgate-venv" / "bin", "perfgate",
         f'printf "%s\\n" "$@" > "{tmp_path}/argv"\nexit 1\n')
    script = step_script(template("perfgate-judge.yml"), "Judge")
    env = {"GH_TOKEN": "t", "GH_REPO": "acme/train", "NUMBER": "7", "HEAD_SHA": HEAD, "HEAD_REPO": "mallory/train",
           "HEAD_BRANCH": "feature", "RUN_ID": "99", "GATE_JOB": "perfgate (T4)",
           "RESULTS": str(tmp_path / "perfgate-results"), "BASE_SHA": BASE}
    done = bash(script, tmp_path, env, bin_dir)
    assert done.returncode == 0, done.stderr  # the verdict is mapped by the last step
    assert "perfgate judge exited with 1" in done.stdout
    argv = (tmp_path / "argv").read_text().splitlines()
    head = ["--head-pyproject", f"{tmp_path}/head-pyproject.toml"] if pyproject else []
    assert argv == ["judge", f"{tmp_path}/perfgate-results", "--base-dir", ".perfgate-base",
                    "--artifacts", f"{tmp_path}/perfgate-judged", "--changed-files", f"{tmp_path}/changed.tsv",
                    "--head-files", f"{tmp_path}/perfgate-head-files", *head,
                    "--previous-verdicts", f"{tmp_path}/perfgate-verdicts.jsonl",
                    "--acknowledgement", f"{tmp_path}/perfgate-acknowledgement.json",
                    "--measuring-job", f"{tmp_path}/perfgate-measuring-job.json", "--expect-head-sha", HEAD,
                    "--expect-pr", "7", "--expect-base-sha", BASE,
                    "--check-run", f"{tmp_path}/perfgate-judged/check-run.json"]
    assert json.loads((tmp_path / "perfgate-measuring-job.json").read_text()) == {
        "started_at": "2026-12-04T05:00:10Z", "completed_at": "2026-12-04T05:12:30Z"}
    assert (tmp_path / "changed.tsv").read_text().startswith("modified\tbaselines/a/w.json\t\n")
    # the pull request's workload files, as data; a path with .. is never fetched
    head_files = tmp_path / "perfgate-head-files"
    assert sorted(p.relative_to(head_files).as_posix() for p in head_files.rglob("*.py")) == ["workloads/new.py"]
    parser = argparse.ArgumentParser()
    add_judge_parser(parser.add_subparsers())
    args = parser.parse_args(argv)
    assert (args.expect_pr, args.expect_head_sha, args.expect_base_sha, args.design) == (7, HEAD, BASE, "paired")
    assert args.check_run == f"{tmp_path}/perfgate-judged/check-run.json"
    assert args.measuring_job == f"{tmp_path}/perfgate-measuring-job.json"


@pytest.fixture
def comment_run(tmp_path: Path, bin_dir: Path):
    """Runs the comment step against a fake `gh` that plays the GitHub API."""
    judged = tmp_path / "perfgate-judged"
    judged.mkdir()
    (judged / "comment.md").write_text(f"{MARKER}\n## perfgate: pass (1 PASS)\n")
    comments = tmp_path / "comments.json"
    comments.write_text("[]")
    fake(bin_dir, "gh", f"""\
        printf '%s\\n' "$*" >> "{tmp_path}/gh-calls"
        args="$*"
        case "$args" in
          *"--paginate"*)
            for ((i = 1; i <= $#; i++)); do
              if [ "${{!i}}" = --jq ]; then j=$((i + 1)); jq -r "${{!j}}" "{comments}"; fi
            done ;;
          *"body=@"*)
            for a in "$@"; do case "$a" in body=@*) cp "${{a#body=@}}" "{tmp_path}/posted.md" ;; esac; done ;;
        esac
        """)
    script = step_script(template("perfgate-judge.yml"), "Post or update the sticky comment")

    def run(number: str = "7"):
        (tmp_path / "gh-calls").unlink(missing_ok=True)
        env = {"GH_TOKEN": "t", "GH_REPO": "acme/train", "NUMBER": number, "COMMENT": str(judged / "comment.md")}
        done = bash(script, tmp_path, env, bin_dir)
        calls = (tmp_path / "gh-calls").read_text().splitlines() if (tmp_path / "gh-calls").exists() else []
        return done, calls

    run.comment, run.comments, run.posted = judged / "comment.md", comments, tmp_path / "posted.md"
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
def test_the_comment_gets_the_marker_and_fits_the_limit(comment_run) -> None:
    comment_run.comment.write_text("## no marker\n")
    done, _ = comment_run()
    assert done.returncode == 0, done.stderr
    assert comment_run.posted.read_text() == f"{MARKER}\n## no marker\n"
    comment_run.comment.write_text(MARKER + "x" * 70000)
    done, _ = comment_run()
    assert done.returncode == 0, done.stderr
    assert comment_run.posted.read_text().startswith(f"{MARKER}\n\nThe report is too long for a comment")


def test_no_comment_without_a_number_or_a_comment_file(comment_run) -> None:
    done, calls = comment_run(number="7; rm -rf /")
    assert done.returncode == 1 and calls == []
    comment_run.comment.unlink()
    done, calls = comment_run()
    assert done.returncode == 0 and calls == [] and "wrote no comment.md" in done.stdout


@pytest.mark.parametrize(("env", "state", "description"), [
    ({"JUDGED_STATE": "failure", "JUDGED_DESCRIPTION": "REGRESSION: 1 of 2 workloads"},
     "failure", "REGRESSION: 1 of 2 workloads"),
    ({"JUDGED_STATE": "success", "JUDGED_DESCRIPTION": "inconclusive (1 INCONCLUSIVE)"},
     "success", "inconclusive (1 INCONCLUSIVE)"),
    ({"IDENTIFY_ERROR": "the measuring job ended (failure) without results to judge"},
     "error", "perfgate could not judge: the measuring job ended (failure) without results to judge"),
    ({"BASE_ERROR": "the measured base commit is not on the pull request's base branch",
      "JUDGED_STATE": "success"},
     "error", "perfgate could not judge: the measured base commit is not on the pull request's base branch"),
    ({}, "error", "perfgate judge failed before a verdict (see the run)"),
    ({"JUDGED_STATE": "success; rm -rf /", "JUDGED_DESCRIPTION": "pass"},
     "error", "perfgate judge failed before a verdict (see the run)"),
    ({"JUDGED_STATE": "error", "JUDGED_DESCRIPTION": "é\x1b[31m" + "y" * 200},
     "error", "é[31m" + "y" * 135),
    ({"JUDGED_STATE": "failure", "JUDGED_DESCRIPTION": "a\x7fb\u0085c\u009bd\x07e"}, "failure", "abcde"),
    ({"WAITING": "true"}, "pending", "waiting for a maintainer's 'perfgate:run' label (a pull request from a fork)"),
    ({"JUDGED_STATE": "pending", "JUDGED_DESCRIPTION": "pass"},
     "error", "perfgate judge failed before a verdict (see the run)"),
], ids=["regression", "inconclusive", "no results", "base", "no verdict", "bad state", "long", "controls",
        "waiting", "pending is the identify step's only"])
def test_the_commit_status(tmp_path: Path, bin_dir: Path, env: dict[str, str], state: str, description: str) -> None:
    fake(bin_dir, "gh", f'printf "%s\\n" "$@" > "{tmp_path}/gh-argv"\n')
    script = step_script(template("perfgate-judge.yml"), "Set the commit status")
    variables = {"GH_TOKEN": "t", "GH_REPO": "acme/train", "HEAD_SHA": HEAD, "GITHUB_SERVER_URL": "https://github.com",
                 "GITHUB_REPOSITORY": "acme/train", "GITHUB_RUN_ID": "123",
                 **{k: "" for k in ("IDENTIFY_ERROR", "BASE_ERROR", "JUDGED_STATE", "JUDGED_DESCRIPTION", "WAITING")},
                 **env}
    done = bash(script, tmp_path, variables, bin_dir)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "gh-argv").read_text().split("\n")[:-1] == [
        "api", "--method", "POST", f"repos/acme/train/statuses/{HEAD}", "-f", f"state={state}",
        "-f", "context=perfgate", "-f", f"description={description}",
        "-f", "target_url=https://github.com/acme/train/actions/runs/123"]
    assert len(description) <= 140


@pytest.mark.parametrize(("code", "conclusion", "status", "annotation"), [
    ("0", "success", 0, None), ("1", "failure", 1, None), ("2", "failure", 1, "::error title=perfgate error::"),
    ("3", "neutral", 0, "::warning title=perfgate inconclusive::"),
    ("3", "failure", 1, "::error title=perfgate inconclusive::"),  # inconclusive = "fail"
    ("", "", 1, "::error title=perfgate error::"),
])
def test_the_verdict_step_maps_exit_codes(tmp_path: Path, bin_dir: Path, code: str, conclusion: str, status: int,
                                          annotation: str | None) -> None:
    script = step_script(template("perfgate-judge.yml"), "Verdict")
    done = bash(script, tmp_path, {"EXIT_CODE": code, "CONCLUSION": conclusion}, bin_dir)
    assert done.returncode == status
    if annotation:
        assert done.stdout.startswith(annotation)



@pytest.mark.parametrize("error", ["IDENTIFY_ERROR", "BASE_ERROR"])
def test_the_verdict_step_fails_a_run_that_could_not_be_judged(tmp_path: Path, bin_dir: Path, error: str) -> None:
    """A run that measured nothing (or of the wrong base) fails the judge's job too, saying why."""
    script = step_script(template("perfgate-judge.yml"), "Verdict")
    done = bash(script, tmp_path, {"EXIT_CODE": "", "CONCLUSION": "", error: "the measuring job 'perfgate (T4)' skipped"},
                bin_dir)
    assert done.returncode == 1
    assert done.stdout.startswith("::error title=perfgate error::perfgate could not judge this run")


def test_the_comment_status_and_verdict_come_after_the_judge_whatever_it_said() -> None:
    text = template("perfgate-judge.yml")
    names = re.findall(r"^      - name: (.*)$", text, re.M)
    assert names[-4:] == ["Post or update the sticky comment", "Set the commit status", "Report the check run",
                          "Verdict"]
    judge = step_script(text, "Judge")
    assert judge.rstrip().endswith('--expect-head-sha "$HEAD_SHA" --expect-pr "$NUMBER" --expect-base-sha "$BASE_SHA" '
                                   '\\\n  --check-run "$RUNNER_TEMP/perfgate-judged/check-run.json" || code=$?\n'
                                   'echo "perfgate judge exited with $code"')
    answered = ("${{ !cancelled() && (steps.identify.outcome == 'failure' || steps.identify.outputs.ok "
                "== 'true' || steps.identify.outputs.error != ''")
    for name in ("Set the commit status", "Report the check run", "Verdict"):
        condition = " ".join(step_text(text, name).split("if: >-\n", 1)[1].split("env:", 1)[0].split())
        waiting = " || steps.identify.outputs.waiting == 'true'" if name == "Set the commit status" else ""
        assert condition == f"{answered}{waiting}) }}}}"


# --- the rebaseline workflow's steps --------------------------------------------------------

def test_the_rebaseline_step_passes_inputs_as_arguments(tmp_path: Path, bin_dir: Path) -> None:
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    fake(tmp_path / ".venv" / "bin", "python", f'exec {shlex.quote(sys.executable)} "$@"\n')
    fake(tmp_path / ".venv" / "bin", "perfgate", f'printf "%s\\n" "$@" > "{tmp_path}/argv"\n')
    (tmp_path / "pyproject.toml").write_text('[tool.perfgate]\nbaselines = "perf/baselines"\n')
    script = step_script(template("rebaseline.yml"), "Rebaseline")
    (tmp_path / "out").touch()
    env = {"REASON": 'new loader; "intended" $(touch pwned)', "WORKLOADS": "a  b", "APPEND": "true",
           "GITHUB_OUTPUT": str(tmp_path / "out")}
    done = bash(script, tmp_path, env, bin_dir)
    assert done.returncode == 0, done.stderr
    assert outputs(tmp_path / "out") == {"baselines": "perf/baselines"}  # for the upload only
    assert (tmp_path / "argv").read_text().splitlines() == [
        "rebaseline", "a", "b", "--reason", 'new loader; "intended" $(touch pwned)', "--device", "cuda",
        "--cache-dir", f"{tmp_path}/perfgate-cache", "--out", "perfgate-artifacts/results", "--append"]
    assert not (tmp_path / "pwned").exists()
    # day_history: the runner's day-to-day variation from the store the job records into
    for store, expected in (("", f"{tmp_path}/.local/share/perfgate/history.sqlite"),
                            ("postgresql://perf@db/history", "postgresql://perf@db/history")):
        done = bash(script, tmp_path, {**env, "APPEND": "false", "DAY_HISTORY": "true", "HISTORY": store,
                                       "HOME": str(tmp_path)}, bin_dir)
        assert done.returncode == 0, done.stderr
        assert (tmp_path / "argv").read_text().splitlines()[-2:] == ["--day-history", expected]


@pytest.mark.parametrize(("pyproject", "store"), [
    (None, "baselines"),
    ('[project]\nname = "train"\n', "baselines"),
    ('[tool.perfgate]\nbaselines = "perf/baselines"\n', "perf/baselines"),
    ('[tool.perfgate]\nbaselines = "./perf/baselines/"\n', "perf/baselines"),
    ('[tool.perfgate]\nbaselines = "../elsewhere"\n', None),
    ('[tool.perfgate]\nbaselines = "perf/../../elsewhere"\n', None),
    ('[tool.perfgate]\nbaselines = "/srv/baselines"\n', None),
    ('[tool.perfgate]\nbaselines = "."\n', None),
    ('[tool.perfgate]\nbaselines = ".git"\n', None),
    ('[tool.perfgate]\nbaselines = ".git/hooks"\n', None),
    ('[tool.perfgate]\nbaselines = ".github/workflows"\n', None),
    ('[tool.perfgate]\nbaselines = "./.github"\n', None),
    ('[tool.perfgate]\nbaselines = "link/baselines"\n', None),
    ('[tool.perfgate]\nbaselines = 3\n', None),
    ('tool = 3\n', "baselines"),
], ids=["no pyproject", "no table", "configured", "dotted", "parent", "escapes", "absolute", "root", ".git",
        "hooks", "workflows", "dot github", "symlink", "number", "odd tool"])
def test_the_hosted_job_finds_the_store_itself(tmp_path: Path, bin_dir: Path, pyproject: str | None,
                                               store: str | None) -> None:
    work = tmp_path / "work"
    (work / ".github").mkdir(parents=True)
    (work / "link").symlink_to(".github")
    if pyproject is not None:
        (work / "pyproject.toml").write_text(pyproject)
    (tmp_path / "out").touch()
    script = step_script(template("rebaseline.yml"), "Find the baseline store")
    done = bash(script, work, {"GITHUB_OUTPUT": str(tmp_path / "out")}, bin_dir)
    if store is None:
        assert done.returncode != 0 and outputs(tmp_path / "out") == {}
        assert "[tool.perfgate] baselines" in done.stderr
    else:
        assert done.returncode == 0, done.stderr
        assert outputs(tmp_path / "out") == {"path": store}


@pytest.mark.parametrize("case", ["valid", "invalid", "link"])
def test_the_new_baselines_are_validated_before_they_are_copied(tmp_path: Path, bin_dir: Path, case: str) -> None:
    new, work = tmp_path / "new-baselines", tmp_path / "work"
    (new / "cuda-tesla-t4").mkdir(parents=True)
    (new / "cuda-tesla-t4" / "my-model.json").write_text("{}\n")
    (new / "README.md").write_text("store\n")
    (work / "perf" / "baselines" / "cuda-tesla-t4").mkdir(parents=True)
    (work / "perf" / "baselines" / "cuda-tesla-t4" / "other.json").write_text("{}\n")
    if case == "link":
        (new / "cuda-tesla-t4" / "linked.json").symlink_to(tmp_path / "secret")
    code = 2 if case == "invalid" else 0
    fake(tmp_path / "perfgate-venv" / "bin", "perfgate", f'printf "%s\\n" "$@" > "{tmp_path}/argv"\nexit {code}\n')
    script = step_script(template("rebaseline.yml"), "Validate the new baselines and put them in place")
    done = bash(script, work, {"STORE": "perf/baselines", "NEW": str(new), "RUNNER_TEMP": str(tmp_path)}, bin_dir)
    argv = (tmp_path / "argv").read_text().splitlines()
    assert argv == ["validate-baselines", str(new)]
    parser = argparse.ArgumentParser()
    add_judge_parser(parser.add_subparsers())
    assert parser.parse_args(argv).folder == str(new)
    copied = sorted(str(p.relative_to(work)) for p in work.rglob("*") if not p.is_dir())
    if case == "valid":
        assert done.returncode == 0, done.stderr
        assert copied == ["perf/baselines/README.md", "perf/baselines/cuda-tesla-t4/my-model.json",
                          "perf/baselines/cuda-tesla-t4/other.json"]
    else:
        assert done.returncode != 0
        assert copied == ["perf/baselines/cuda-tesla-t4/other.json"]
        assert case != "link" or "not a plain file" in done.stdout


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
    # Commands git would run from its configuration: neither may run in this job.
    hooks = tmp_path / "hooks"
    for hook in ("pre-commit", "post-commit", "pre-push", "post-checkout"):
        fake(hooks, hook, f'touch "{tmp_path}/hook-ran"\n')
    fake(tmp_path / "bin-fsmonitor", "fsmonitor", f'touch "{tmp_path}/fsmonitor-ran"\nexit 1\n')
    git(work, "config", "core.hooksPath", str(hooks))
    git(work, "config", "core.fsmonitor", str(tmp_path / "bin-fsmonitor" / "fsmonitor"))
    fake(bin_dir, "gh", f'printf "%s\\n" "$@" > "{tmp_path}/gh-argv"\n'
                        f'for a in "$@"; do [ -f "$a" ] && cp "$a" "{tmp_path}/body.md"; done; exit 0\n')
    script = step_script(template("rebaseline.yml"), "Open a pull request with the new baselines")
    env = {"GH_TOKEN": "token", "GH_REPO": "acme/train", "REASON": "new data loader, intended",
           "STORE": "baselines", "CLOCKS": "locked: graphics clock 1245 MHz (nvidia-smi -lgc)`[x](https://e.example)`",
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
    assert "**Reason:** new data loader, intended" in body
    assert "**GPU clocks:** `locked: graphics clock 1245 MHz (nvidia-smi -lgc)x(https://e.example)`" in body
    assert "A\tbaselines/cuda-tesla-t4/my-model.json" in body
    assert "token" not in (work / ".git" / "config").read_text()
    assert not (tmp_path / "hook-ran").exists() and not (tmp_path / "fsmonitor-ran").exists()


def test_the_python_versions_agree() -> None:
    """pyproject's floor is what tomllib needs, and every workflow runs at least that."""
    import re
    import tomllib

    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert data["project"]["requires-python"] == ">=3.11"
    for path in sorted((ROOT / ".github" / "workflows").glob("*.yml")):
        for version in re.findall(r'python-version: "(\d+\.\d+)"', path.read_text()):
            assert tuple(map(int, version.split("."))) >= (3, 11), (path.name, version)


# --- the sharded workflows (`perfgate init --shards N`) ---------------------------------------

def sharded(name: str) -> str:
    return (SHARDED_WORKFLOWS / name).read_text()


def steps_of(text: str) -> list[tuple[str, str]]:
    """Each step of the workflow, in order: (name, its lines)."""
    return [(name, step_text(text, name)) for name in re.findall(r"^      - name: (.*)$", text, re.M)]


# The steps a sharded workflow changes (single-runner name -> sharded name); every other
# step is the single-runner workflow's, line for line.
SHARDED_STEPS = {
    "perfgate.yml": {"Measure the pull request and its base": "Measure this shard of the pull request and its base",
                     "Upload the measurements for the judge": "Upload the measurements for the judge",
                     "Upload the GPU clocks record and traces": "Upload the GPU clocks record and traces"},
    "perfgate-judge.yml": {"Download the measurements (data only)": "Download every shard's measurements (data only)",
                           "Identify the pull request": "Identify the pull request", "Judge": "Judge"},
}


def shard_count(text: str) -> int:
    (count,) = re.findall(r'^  PERFGATE_SHARDS: "(\d+)"$', text, re.M)
    return int(count)


def test_the_sharded_folder_holds_the_two_sharded_workflows() -> None:
    assert sorted(p.name for p in SHARDED_WORKFLOWS.iterdir()) == sorted(SHARDED_NAMES)
    found = {name: Counter(re.findall(r"zizmor: ignore\[([\w-]+)\]", sharded(name))) for name in SHARDED_NAMES}
    assert found == {"perfgate.yml": Counter({"self-hosted-runner": 1}),
                     "perfgate-judge.yml": Counter({"dangerous-triggers": 1})}


@pytest.mark.parametrize("name", SHARDED_NAMES)
def test_the_sharded_workflows_are_the_single_runner_ones_but_for_the_shards(name: str) -> None:
    single, shards = steps_of(template(name)), dict(steps_of(sharded(name)))
    renamed = SHARDED_STEPS[name]
    assert [renamed.get(n, n) for n, _ in single] == list(shards)
    for step, text in single:
        if step not in renamed:
            assert shards[step] == text, step
    # Outside the steps: the same triggers, permissions and runner.
    head = lambda text: text.split("\njobs:\n", 1)[1].split("    steps:\n", 1)[0]  # noqa: E731
    for line in head(template(name)).splitlines():
        if not any(key in line for key in ("name: perfgate (T4)", "group: perfgate-pr-", "a new push cancels")):
            assert line in head(sharded(name)), line
    preamble = lambda text: text.split("\non:\n", 1)[1].split("\njobs:\n", 1)[0]  # noqa: E731
    added = {"perfgate.yml": ('  GPU_LOCK_MHZ: "1245"\n',
                              "  # The number of shards: the matrix below lists 1 to this, and perfgate-judge.yml's\n"
                              '  # PERFGATE_SHARDS is the same.\n  PERFGATE_SHARDS: "2"\n'),
             "perfgate-judge.yml": ("permissions: {}\n",
                                    "\nenv:\n  # The number of shards perfgate.yml measures in (its PERFGATE_SHARDS "
                                    'and matrix).\n  PERFGATE_SHARDS: "2"\n')}[name]
    assert preamble(sharded(name)) == preamble(template(name)).replace(added[0], added[0] + added[1])
    assert jobs(sharded("perfgate.yml"))["waiting"] == jobs(template("perfgate.yml"))["waiting"]


def test_each_shard_runs_on_its_own_runner_and_uploads_its_own_artifact() -> None:
    text = sharded("perfgate.yml")
    gate = jobs(text)["gate"]
    assert "    name: perfgate (T4, shard ${{ matrix.shard }})\n" in gate
    assert "    strategy:\n" in gate and "      fail-fast: false\n" in gate
    (shards,) = re.findall(r"^        shard: \[(.*)\]$", gate, re.M)
    assert [int(s) for s in shards.split(", ")] == list(range(1, shard_count(text) + 1))
    assert shard_count(text) == shard_count(sharded("perfgate-judge.yml")) == 2
    # A new push cancels each shard's superseded job, never another shard's.
    assert "group: perfgate-pr-${{ github.event.pull_request.number }}-shard-${{ matrix.shard }}\n" in gate
    uploads = re.findall(r"uses: actions/upload-artifact@.*\n        with:\n((?:          .*\n)+)", gate)
    assert [u.splitlines()[0] for u in uploads] == ["          name: perfgate-results-${{ matrix.shard }}",
                                                    "          name: perfgate-artifacts-${{ matrix.shard }}"]
    download = step_text(sharded("perfgate-judge.yml"), "Download every shard's measurements (data only)")
    assert "          pattern: perfgate-results-*\n" in download and "name:" not in download
    assert "merge-multiple" not in download  # each artifact in its own folder, named after it


def test_the_shard_measures_its_share_as_a_valid_perfgate_ci_command() -> None:
    step = step_text(sharded("perfgate.yml"), "Measure this shard of the pull request and its base")
    assert "          SHARD: ${{ matrix.shard }}\n" in step
    script = step_script(sharded("perfgate.yml"), "Measure this shard of the pull request and its base")
    argv = shlex.split(script.replace("\\\n", " "))
    single = measure_argv()
    assert argv[:len(single)] == single and argv[len(single):] == ["--shard", "$SHARD/$PERFGATE_SHARDS"]
    parser = argparse.ArgumentParser()
    add_ci_parser(parser.add_subparsers())
    args = parser.parse_args([*argv[1:-1], "1/2"])
    assert args.measure_only and args.shard == "1/2" and args.out == "perfgate-results"


def test_the_judges_prefix_names_the_measuring_jobs() -> None:
    prefix, judge_prefix = re.findall(r"GATE_JOB: (.*?)  #", sharded("perfgate-judge.yml"))
    assert judge_prefix == prefix
    (name,) = re.findall(r"^    name: (.*)$", jobs(sharded("perfgate.yml"))["gate"], re.M)
    assert name.replace("${{ matrix.shard }}", "1").startswith(prefix)
    assert not "perfgate (waiting for a maintainer)".startswith(prefix)


@pytest.fixture
def identify_shards(tmp_path: Path, bin_dir: Path):
    """Runs the sharded judge's identify step against a fake `gh` that plays the GitHub API."""
    results = tmp_path / "perfgate-results"
    for i in (1, 2):
        (results / f"perfgate-results-{i}").mkdir(parents=True)
        (results / f"perfgate-results-{i}" / "run.json").write_text(
            json.dumps({"kind": "perfgate.ci-run", "pr_number": 7, "base_sha": BASE}))
    (tmp_path / "jobs.tsv").write_text("perfgate (T4, shard 1)\tskipped\nperfgate (T4, shard 2)\tskipped\n"
                                       "perfgate (waiting for a maintainer)\tsuccess\n")
    (tmp_path / "pr.txt").write_text(f"{HEAD}\nacme/train\nfeature\nmain\n{BASE}\n")
    (tmp_path / "open.tsv").write_text(f"7\t{HEAD}\n")
    fake(bin_dir, "gh", f"""\
        printf '%s\\n' "$*" >> "{tmp_path}/gh-calls"
        case "$*" in
          *"/actions/runs/99/jobs"*) cat "{tmp_path}/jobs.tsv" ;;
          *"repos/acme/train/pulls/7 "*) cat "{tmp_path}/pr.txt" ;;
          *"repos/acme/train/pulls?state=open&head=acme:feature "*) cat "{tmp_path}/open.tsv" ;;
          *"-X GET repos/acme/train/pulls -f state=open -f head="*" --jq "*) cat "{tmp_path}/holders.tsv" ;;
          *"repos/acme/train/commits/{HEAD}/statuses?per_page=100 "*) cat "{tmp_path}/latest.txt" ;;
          *) exit 1 ;;
        esac
        """)
    (tmp_path / "latest.txt").write_text("\n")
    holders(tmp_path, (7, BASE, "mallory/train"))
    script = step_script(sharded("perfgate-judge.yml"), "Identify the pull request")
    prefix = re.findall(r"GATE_JOB: (.*?)  #", sharded("perfgate-judge.yml"))[0]

    def run(downloaded: str = "success", shards: str = "2", head_repo: str = "acme/train"):
        for leftover in ("out", "gh-calls"):
            (tmp_path / leftover).unlink(missing_ok=True)
        (tmp_path / "out").touch()
        env = {"GH_TOKEN": "t", "GH_REPO": "acme/train", "DOWNLOADED": downloaded, "RUN_ID": "99",
               "HEAD_SHA": HEAD, "HEAD_REPO": head_repo, "HEAD_BRANCH": "feature", "RESULTS": str(results),
               "GATE_JOB": prefix, "PERFGATE_SHARDS": shards, "GITHUB_OUTPUT": str(tmp_path / "out")}
        done = bash(script, tmp_path, env, bin_dir)
        calls = (tmp_path / "gh-calls").read_text().splitlines() if (tmp_path / "gh-calls").exists() else []
        return done, outputs(tmp_path / "out"), calls

    run.results, run.dir = results, tmp_path
    return run


def test_the_sharded_judge_identifies_the_pull_request_of_every_shard(identify_shards) -> None:
    done, out, calls = identify_shards()
    assert done.returncode == 0, done.stderr
    assert out == {"ok": "true", "number": "7", "base-sha": BASE, "base-ref": "main"}
    assert calls == ['api repos/acme/train/pulls/7 --jq .head.sha, (.head.repo.full_name // ""), .head.ref, .base.ref, '
                     '.base.sha',
                     'api --paginate repos/acme/train/pulls?state=open&head=acme:feature --jq .[] | [.number, '
                     '.head.sha] | @tsv']


def test_the_sharded_judge_refuses_an_older_base_than_the_pull_requests(identify_shards) -> None:
    # every shard's run.json named an older commit of main (with looser rules): the API's base decides
    (identify_shards.dir / "pr.txt").write_text(f"{HEAD}\nacme/train\nfeature\nmain\n{'a' * 40}\n")
    done, out, _ = identify_shards()
    assert done.returncode == 0, done.stderr
    assert out == {"error": f"pull request #7's base is {'a' * 40}, not the measured {BASE}"}


def test_a_second_pull_request_cannot_borrow_the_first_ones_status_from_the_sharded_judge(identify_shards) -> None:
    (identify_shards.dir / "open.tsv").write_text(f"7\t{HEAD}\n8\t{HEAD}\n")
    done, out, _ = identify_shards()
    assert done.returncode == 0, done.stderr
    assert out == {"error": "pull requests #7 #8 hold the measured head commit; perfgate judges one pull request "
                            "per head commit"}


def test_a_shard_without_results_is_an_error(identify_shards) -> None:
    shutil.rmtree(identify_shards.results / "perfgate-results-2")
    done, out, calls = identify_shards()
    assert done.returncode == 0, done.stderr
    assert out == {"error": "shard 2 of 2 left no results (its job failed or was cancelled)"} and calls == []
    # A third shard the judge does not expect is never read.
    done, out, _ = identify_shards(shards="3")
    assert out == {"error": "shard 2 of 3 left no results (its job failed or was cancelled)"}
    done, out, _ = identify_shards(shards="2; rm -rf /")
    assert out == {"error": "PERFGATE_SHARDS is not a number of shards"}


def test_without_any_results_the_sharded_judge_asks_whether_the_shards_ran(identify_shards) -> None:
    for i in (1, 2):
        shutil.rmtree(identify_shards.results / f"perfgate-results-{i}")
    done, out, _ = identify_shards(head_repo="mallory/train")  # the download found nothing: no artifact matched
    assert done.returncode == 0 and out == {"waiting": "true"}, done.stderr
    assert "the measuring jobs did not run" in done.stdout
    done, out, _ = identify_shards()  # a same-repository pull request whose measuring jobs were skipped
    assert out == {"error": "the measuring jobs 'perfgate (T4, shard...' skipped in this run: nothing was measured "
                            "for this commit"}
    (identify_shards.dir / "jobs.tsv").write_text("perfgate (T4, shard 1)\tfailure\nperfgate (T4, shard 2)\tcancelled\n"
                                                  "perfgate (waiting for a maintainer)\tskipped\n")
    done, out, _ = identify_shards(downloaded="failure")
    assert out == {"error": "the measuring jobs ended (cancelled failure) without results to judge"}


@pytest.mark.parametrize(("second", "error"), [
    ({"kind": "perfgate.ci-run", "pr_number": 8, "base_sha": BASE},
     "the shards' run.json files name different pull requests or base commits"),
    ({"kind": "perfgate.ci-run", "pr_number": 7, "base_sha": "d" * 40},
     "the shards' run.json files name different pull requests or base commits"),
    ({"kind": "perfgate.ci-run", "pr_number": "7; rm -rf /", "base_sha": BASE},
     "the results have no valid run.json (pull request number and base commit) in every shard"),
    (None, "the results have no valid run.json (pull request number and base commit) in every shard"),
], ids=["other pull request", "other base", "bad number", "missing"])
def test_the_shards_must_name_one_pull_request(identify_shards, second: dict | None, error: str) -> None:
    run_json = identify_shards.results / "perfgate-results-2" / "run.json"
    if second is None:
        run_json.unlink()
    else:
        run_json.write_text(json.dumps(second))
    done, out, calls = identify_shards()
    assert done.returncode == 0, done.stderr
    assert out == {"error": error} and calls == []


@pytest.mark.parametrize(("tag", "out"), [(" (#11 into aaaaaaaaaaaa)", {"waiting": "true"}), (TAG_7, {})],
                         ids=["another pull request and base", "this pull request and base (the control)"])
def test_the_sharded_judge_keeps_only_this_pull_requests_verdict(identify_shards, tag: str,
                                                                 out: dict[str, str]) -> None:
    """Case 2 in the sharded judge: a fork waiting for its label, the head's latest status set in
    another pull request against another base: pending, never that pull request's success."""
    for i in (1, 2):
        shutil.rmtree(identify_shards.results / f"perfgate-results-{i}")
    (identify_shards.dir / "latest.txt").write_text(f"success\tpass (1 PASS){tag}\n")
    done, found, _ = identify_shards(head_repo="mallory/train")
    assert done.returncode == 0 and found == out, done.stdout + done.stderr


def test_a_shard_over_64_mb_is_not_read(identify_shards) -> None:
    with open(identify_shards.results / "perfgate-results-2" / "trace.json", "wb") as handle:
        handle.truncate(64 * 1024 * 1024 + 1)
    done, out, calls = identify_shards()
    assert out == {"error": "the results of shard 2 are larger than 64 MB; not read"} and calls == []


def test_the_sharded_judge_step_judges_every_shard_together(tmp_path: Path, bin_dir: Path) -> None:
    fake(bin_dir, "gh", 'case "$*" in *"/files --jq "*) printf "modified\\tx.py\\t\\n" ;; *"/statuses?"* | *"/events?"*) ;; '
                        '*"/actions/runs/99/jobs --jq "*) printf "2026-12-04T05:00:10Z\\t2026-12-04T05:12:30Z\\n'
                        '2026-12-04T05:00:05Z\\t2026-12-04T05:10:00Z\\n" ;; *) exit 1 ;; esac\n')
    fake(tmp_path / "perfgate-venv" / "bin", "perfgate", f'printf "%s\\n" "$@" > "{tmp_path}/argv"\nexit 3\n')
    script = step_script(sharded("perfgate-judge.yml"), "Judge")
    results = tmp_path / "perfgate-results"
    env = {"GH_TOKEN": "t", "GH_REPO": "acme/train", "NUMBER": "7", "HEAD_SHA": HEAD, "HEAD_REPO": "acme/train",
           "HEAD_BRANCH": "feature", "RUN_ID": "99", "GATE_JOB": "perfgate (T4, shard",
           "RESULTS": str(results), "PERFGATE_SHARDS": "3", "BASE_SHA": BASE}
    done = bash(script, tmp_path, env, bin_dir)
    assert done.returncode == 0, done.stderr
    assert "perfgate judge exited with 3" in done.stdout
    argv = (tmp_path / "argv").read_text().splitlines()
    shards = [f"{results}/perfgate-results-{i}" for i in (1, 2, 3)]
    assert argv == ["judge", *shards, "--base-dir", ".perfgate-base", "--artifacts", f"{tmp_path}/perfgate-judged",
                    "--changed-files", f"{tmp_path}/changed.tsv", "--head-files", f"{tmp_path}/perfgate-head-files",
                    "--previous-verdicts", f"{tmp_path}/perfgate-verdicts.jsonl",
                    "--acknowledgement", f"{tmp_path}/perfgate-acknowledgement.json",
                    "--measuring-job", f"{tmp_path}/perfgate-measuring-job.json",
                    "--expect-head-sha", HEAD, "--expect-pr", "7", "--expect-base-sha", BASE,
                    "--check-run", f"{tmp_path}/perfgate-judged/check-run.json"]
    parser = argparse.ArgumentParser()
    add_judge_parser(parser.add_subparsers())
    assert parser.parse_args(argv).results == shards
    # one file: the shards' earliest start and latest end
    assert json.loads((tmp_path / "perfgate-measuring-job.json").read_text()) == {
        "started_at": "2026-12-04T05:00:05Z", "completed_at": "2026-12-04T05:12:30Z"}
    script = step_script(sharded("perfgate-judge.yml"), "Judge")
    assert "select(.name | startswith($ENV.GATE_JOB))" in script
    assert "select(.name == $ENV.GATE_JOB)" in step_script(template("perfgate-judge.yml"), "Judge")


def test_init_writes_the_number_of_shards_into_the_sharded_workflows() -> None:
    from perfgate.adapters.scaffold import render_sharded

    for name in SHARDED_NAMES:
        text = render_sharded(sharded(name), 5)
        assert shard_count(text) == 5
        changed = [x for x, y in zip(sharded(name).splitlines(), text.splitlines(), strict=True) if x != y]
        assert len(changed) == (2 if name == "perfgate.yml" else 1), changed
    assert "        shard: [1, 2, 3, 4, 5]\n" in render_sharded(sharded("perfgate.yml"), 5)
    with pytest.raises(ValueError):
        render_sharded(template("perfgate.yml"), 3)  # not a sharded template


@pytest.mark.parametrize("path", ALL, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_default_branch_checks_use_the_full_ref_and_no_pull_request_code_meets_a_pip_cache(path: Path) -> None:
    # github.ref_name == the default branch also matches a tag named "main"; the full ref does not.
    text = path.read_text()
    assert "ref_name ==" not in text and "ref_name==" not in text
    if "self-hosted" in text:
        # a persistent runner's pip cache could carry planted files into a later job
        assert "cache: pip" not in text
        installs = re.findall(r"pip install [^\n]*", text)
        assert installs and all("--no-cache-dir" in line for line in installs), installs
