"""perfgate-history.yml: the shared store's URL never reaches the self-hosted runner.

The T4 runner also runs pull requests' code as the same user, and what that code writes
outlives its job there (the Python in the runner's tool cache, a sitecustomize.py, files in
the home folder, a process left behind). So the workflow is three jobs: ``where`` (hosted)
only says whether the secret ``PERFGATE_HISTORY_URL`` is set; ``measure`` (the T4) names
no secret and no environment and uploads its result files; ``record`` (hosted) reads them
as data and records them into the shared store with the secret in one step's env. Without
the secret the T4 job records into the runner's SQLite file, as before, because a hosted
runner keeps no file from one push to the next.

The structure is checked on the text (and each rule shown to catch its breach), and each
shell step is run here against fake ``perfgate`` and ``python`` commands. What the recording
job installs is shown to be enough: ``perfgate history record`` runs, on SQLite and on
PostgreSQL, with every other third-party package made unimportable.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from factories import ENV, fake, make_result
from pg_server import PASSWORD

from perfgate.adapters.cli import build_parser
from perfgate.adapters.scaffold import TEMPLATES
from perfgate.store.results import save_result

ROOT = Path(__file__).resolve().parents[1]
REPOSITORY_COPY = ROOT / ".github" / "workflows" / "perfgate-history.yml"
TEMPLATE_COPY = TEMPLATES / "workflows" / "perfgate-history.yml"

SECRET_LINE = "          PERFGATE_HISTORY_URL: ${{ secrets.PERFGATE_HISTORY_URL }}"
WHERE_STEP = "Is the shared store's URL set"
RECORD_STEP = "Record in the history store"
FILE_STEP = "Record in the runner's history file"
CHECK_STEP = "Check the results' size"
INSTALL_STEP = "Install perfgate without torch"
DEFAULT_BRANCH = "github.ref == format('refs/heads/{0}', github.event.repository.default_branch)"
HOSTED = "ubuntu-latest"
SELF_HOSTED = "[self-hosted, linux, x64, gpu, t4] # zizmor: ignore[self-hosted-runner]"
ENVIRONMENT = "perfgate-history"
# The job keys each job must have, as written (a folded `if` is joined into one line).
EXPECTED_KEYS = {
    "where": {"if": DEFAULT_BRANCH, "runs-on": HOSTED, "environment": ENVIRONMENT, "permissions": "{}"},
    "measure": {"needs": "where", "if": DEFAULT_BRANCH, "runs-on": SELF_HOSTED},
    "record": {"needs": "[where, measure]", "if": f"{DEFAULT_BRANCH} && needs.where.outputs.shared == 'true'",
               "runs-on": HOSTED, "environment": ENVIRONMENT},
}
# The whole script of `where`'s step: it tests the URL and says which store, nothing more.
WHERE_SCRIPT = """\
if [ -n "${PERFGATE_HISTORY_URL//[[:space:]]/}" ]; then
  echo "shared=true" >>"$GITHUB_OUTPUT"
  echo "the shared store (PERFGATE_HISTORY_URL is set): recorded by the job on a hosted runner"
else
  echo "shared=false" >>"$GITHUB_OUTPUT"
  echo "the runner's file (PERFGATE_HISTORY_URL is empty): recorded by the job on the T4 runner"
fi
"""
RECORD_COMMAND = ('"$RUNNER_TEMP/perfgate-venv/bin/perfgate" history record --results "$RESULTS" --design stored '
                  '--branch "$GITHUB_REF_NAME" --runner "$MEASURED_ON"')
LIMIT_BYTES = 64 * 1024 * 1024
# What the recording job installs besides perfgate, and what pip brings with them
# (MarkupSafe for jinja2; psycopg-binary and typing-extensions for psycopg[binary]).
RECORDER_PACKAGES = ["numpy", "scipy", "jinja2", "tomlkit", "psycopg[binary]"]
IMPORTABLE = {"perfgate", "perfgate_workloads", "numpy", "scipy", "jinja2", "markupsafe", "tomlkit", "psycopg",
              "psycopg_binary", "typing_extensions"}


def workflow() -> str:
    return TEMPLATE_COPY.read_text()


# --- reading the workflow's text --------------------------------------------------------------

def code_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if not line.lstrip().startswith("#")]


def jobs(text: str) -> dict[str, str]:
    body = text.split("\njobs:\n", 1)[1]
    parts = re.split(r"^  ([\w-]+):\n", body, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def job_keys(job: str) -> dict[str, str]:
    """A job's keys and their values, a folded (``>-``) value joined into one line."""
    keys: dict[str, str] = {}
    lines = code_lines(job)
    for i, line in enumerate(lines):
        match = re.match(r"^    ([\w-]+):(?: (.*))?$", line)
        if not match:
            continue
        value = match.group(2) or ""
        if value == ">-":
            folded = []
            for following in lines[i + 1:]:
                if not following.startswith("      "):
                    break
                folded.append(following.strip())
            value = " ".join(folded)
        keys[match.group(1)] = value
    return keys


def steps(job: str) -> dict[str, str]:
    """Each step of a job by its name: the lines after its ``- name:`` line."""
    body = job.split("\n    steps:\n", 1)[1]
    parts = re.split(r"^      - name: (.*)\n", body, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def step_key(step: str, key: str) -> str | None:
    match = re.search(rf"^        {re.escape(key)}: (.*)$", step, re.M)
    return match.group(1) if match else None


def step_env(step: str) -> list[str]:
    """The lines of a step's ``env:``, as written."""
    match = re.search(r"^        env:\n((?:          .*\n)+)", step, re.M)
    return match.group(1).splitlines() if match else []


def script(step: str) -> str:
    """A step's ``run: |`` script, dedented."""
    match = re.search(r"^        run: \|\n((?:(?:          .*)?\n)+)", step, re.M)
    assert match, step
    return textwrap.dedent(match.group(1)).rstrip("\n") + "\n"


def commands(shell: str) -> list[str]:
    """The commands of a script: its lines without comments, continuation lines joined."""
    joined = "\n".join(code_lines(shell)).replace("\\\n", " ")
    return [" ".join(line.split()) for line in joined.splitlines() if line.strip()]


def named_secrets(text: str) -> list[str]:
    """Every line that names a secret: ``secrets.`` anywhere (comments too), or the
    ``secrets`` context in any form in code (indexed, whole, ``secrets: inherit``)."""
    return [line for line in text.splitlines()
            if "secrets." in line.lower() or (not line.lstrip().startswith("#")
                                               and re.search(r"\bsecrets\b", line, re.I))]


def problems(text: str) -> list[str]:
    """What is wrong with where the secret, the environment and the runners are; [] when nothing.

    Three jobs, ``where``, ``measure`` and ``record``, with the keys of
    :data:`EXPECTED_KEYS`. The secret is named on exactly two lines, each
    :data:`SECRET_LINE` in the env of one step: ``where``'s :data:`WHERE_STEP` (whose
    script is :data:`WHERE_SCRIPT`) and ``record``'s :data:`RECORD_STEP` (which runs
    :data:`RECORD_COMMAND` alone). Only those two jobs, both on a hosted runner, name the
    environment; ``measure``, the one self-hosted job, names neither it nor the URL."""
    found = []
    all_jobs = jobs(text)
    if list(all_jobs) != list(EXPECTED_KEYS):
        return [f"the jobs are {list(all_jobs)}, not {list(EXPECTED_KEYS)}"]
    for name, expected in EXPECTED_KEYS.items():
        keys = job_keys(all_jobs[name])
        for key, value in expected.items():
            if keys.get(key) != value:
                found.append(f"{name}: {key} is {keys.get(key)!r}, not {value!r}")
        if "environment" in keys and "environment" not in expected:
            found.append(f"{name}: names an environment")
        if "env" in keys:
            found.append(f"{name}: has a job-level env")
        if "environment" in keys and not re.fullmatch(r"ubuntu-[\w.]+", keys.get("runs-on", "")):
            found.append(f"{name}: names the environment on runs-on {keys.get('runs-on')!r}, not a hosted runner")
    if named_secrets(text) != [SECRET_LINE, SECRET_LINE]:
        found.append(f"the lines naming a secret are not the URL's two: {named_secrets(text)}")
    for name, step_name, shell in (("where", WHERE_STEP, None), ("record", RECORD_STEP, RECORD_COMMAND)):
        job_steps = steps(all_jobs[name])
        holding = [s for s, body in job_steps.items() if SECRET_LINE in body.splitlines()]
        if holding != [step_name]:
            found.append(f"{name}: the URL is in the steps {holding}, not in {step_name!r} alone")
            continue
        step = job_steps[step_name]
        if SECRET_LINE not in step_env(step):
            found.append(f"{name}: the URL is not in the env of {step_name!r}")
        if step_key(step, "uses") is not None:
            found.append(f"{name}: {step_name!r} uses an action")
        ran = script(step)
        if (ran != WHERE_SCRIPT) if shell is None else (commands(ran) != [shell]):
            found.append(f"{name}: {step_name!r} runs more than it must: {commands(ran)}")
    measure = all_jobs["measure"]
    if any("PERFGATE_HISTORY_URL" in line or "environment:" in line for line in code_lines(measure)):
        found.append("measure: names the URL or an environment")
    return found


# --- the layout ---------------------------------------------------------------------------------

def test_the_repository_workflow_is_the_template() -> None:
    assert REPOSITORY_COPY.read_bytes() == TEMPLATE_COPY.read_bytes()


def test_the_url_reaches_only_hosted_jobs_of_the_default_branch_that_name_the_environment() -> None:
    assert problems(workflow()) == []


def _swap(text: str, old: str, new: str, count: int = 1) -> str:
    assert text.count(old) >= count, old
    return text.replace(old, new, count)


BREACHES: dict[str, Callable[[str], str]] = {
    "the secret in the T4 job's measuring step": lambda t: _swap(
        t, "      - name: Measure\n", f"      - name: Measure\n        env:\n{SECRET_LINE}\n"),
    "the environment on the T4 job": lambda t: _swap(
        t, "    timeout-minutes: 90\n", f"    timeout-minutes: 90\n    environment: {ENVIRONMENT}\n"),
    "the recording job on the T4 runner": lambda t: _swap(
        t, "    runs-on: ubuntu-latest\n    timeout-minutes: 15\n",
        f"    runs-on: {SELF_HOSTED}\n    timeout-minutes: 15\n"),
    "the check of the secret on the T4 runner": lambda t: _swap(
        t, "    runs-on: ubuntu-latest\n    timeout-minutes: 5\n", f"    runs-on: {SELF_HOSTED}\n    timeout-minutes: 5\n"),
    "the recording job without its environment": lambda t: _swap(
        t, "    timeout-minutes: 15\n    # Where the shared store's URL is kept (as for the job `where`).\n"
           f"    environment: {ENVIRONMENT}\n", "    timeout-minutes: 15\n"),
    "the recording job for any branch": lambda t: _swap(t, f"      {DEFAULT_BRANCH}\n      && ", "      "),
    "the recording job whatever the check said": lambda t: _swap(
        t, "\n      && needs.where.outputs.shared == 'true'", ""),
    "the secret in the workflow's env": lambda t: _swap(t, "\nenv:\n", f"\nenv:\n  {SECRET_LINE.strip()}\n"),
    "the secret in the recording job's env": lambda t: _swap(
        t, "    permissions:\n      contents: read\n    steps:\n      - name: Download",
        f"    permissions:\n      contents: read\n    env:\n      {SECRET_LINE.strip()}\n    steps:\n"
        "      - name: Download"),
    "the secret in another step of the recording job": lambda t: _swap(
        t, "          RESULTS: ${{ runner.temp }}/perfgate-results\n        run: |\n          set -euo pipefail\n",
        f"          RESULTS: ${{{{ runner.temp }}}}/perfgate-results\n{SECRET_LINE}\n        run: |\n"
        "          set -euo pipefail\n"),
    "the recording step runs more": lambda t: _swap(
        t, "        run: |\n          \"$RUNNER_TEMP/perfgate-venv/bin/perfgate\" history record --results \"$RESULTS\"",
        "        run: |\n          bash ./scripts/anything.sh\n"
        "          \"$RUNNER_TEMP/perfgate-venv/bin/perfgate\" history record --results \"$RESULTS\""),
    "the check step prints the URL": lambda t: _swap(
        t, "            echo \"shared=true\" >>\"$GITHUB_OUTPUT\"\n",
        "            echo \"shared=true\" >>\"$GITHUB_OUTPUT\"\n            echo \"$PERFGATE_HISTORY_URL\"\n"),
    "another secret beside": lambda t: _swap(
        t, SECRET_LINE, SECRET_LINE + "\n          OTHER: ${{ secrets['GITHUB_TOKEN'] }}"),
    "all secrets to a job": lambda t: _swap(t, "    needs: where\n", "    needs: where\n    secrets: inherit\n"),
    "the URL on the T4 runner by name": lambda t: _swap(
        t, "          STORE: ${{ vars.PERFGATE_HISTORY }}\n",
        "          STORE: ${{ vars.PERFGATE_HISTORY }}\n          PERFGATE_HISTORY_URL: ${{ vars.URL }}\n"),
}


@pytest.mark.parametrize("breach", list(BREACHES))
def test_each_rule_catches_its_breach(breach: str) -> None:
    text = BREACHES[breach](workflow())
    assert text != workflow()
    assert problems(text), breach


def test_the_runs_are_recorded_under_the_t4_runners_name() -> None:
    """The recording job runs on a hosted runner, whose own RUNNER_NAME would be wrong."""
    measure, record = jobs(workflow())["measure"], jobs(workflow())["record"]
    assert "    outputs:\n" in measure and "      runner: ${{ runner.name }}\n" in measure
    assert "          MEASURED_ON: ${{ needs.measure.outputs.runner }}" in step_env(steps(record)[RECORD_STEP])


# --- the secret's check -------------------------------------------------------------------------

def run_step(shell: str, cwd: Path, env: dict[str, str], bin_dir: Path) -> subprocess.CompletedProcess[str]:
    base_path = os.pathsep.join(p for p in ("/usr/local/bin", "/usr/bin", "/bin") if Path(p).is_dir())
    environment = {"PATH": f"{bin_dir}{os.pathsep}{base_path}", "HOME": str(cwd), "LANG": "C.UTF-8",
                   "RUNNER_TEMP": str(cwd), **env}
    # GitHub runs an unspecified `shell:` on Linux as `bash -e {0}`.
    return subprocess.run(["bash", "-e", "-c", shell], cwd=cwd, env=environment, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize(("url", "shared"), [("postgresql://recorder:s3cret@db.internal/perfgate", "true"),
                                             ("", "false"), ("  \n", "false")],
                         ids=["secret set", "secret empty", "secret blank"])
def test_the_check_says_which_store_and_never_shows_the_url(tmp_path: Path, bin_dir: Path, url: str,
                                                            shared: str) -> None:
    (tmp_path / "out").touch()
    done = run_step(script(steps(jobs(workflow())["where"])[WHERE_STEP]), tmp_path,
                    {"PERFGATE_HISTORY_URL": url, "GITHUB_OUTPUT": str(tmp_path / "out")}, bin_dir)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out").read_text() == f"shared={shared}\n"
    assert "s3cret" not in done.stdout + done.stderr and "db.internal" not in done.stdout + done.stderr
    assert jobs(workflow())["where"].count("      shared: ${{ steps.secret.outputs.shared }}\n") == 1


# --- the T4 job: the runner's file, only without the secret ------------------------------------

def test_the_runners_file_is_recorded_only_when_the_check_found_no_secret() -> None:
    measure = jobs(workflow())["measure"]
    assert step_key(steps(measure)[FILE_STEP], "if") == "needs.where.outputs.shared == 'false'"
    # The one record on the runner; the shared store's record is the hosted job's, only with the secret.
    assert [s for s, body in steps(measure).items() if "history record" in "\n".join(code_lines(body))] == [FILE_STEP]
    assert job_keys(jobs(workflow())["record"])["if"].endswith(" && needs.where.outputs.shared == 'true'")


@pytest.mark.parametrize("store", ["", "/srv/perfgate/history.sqlite"], ids=["default file", "PERFGATE_HISTORY"])
def test_the_t4_job_records_into_the_runners_file(tmp_path: Path, bin_dir: Path, store: str) -> None:
    fake(tmp_path / "perfgate-venv" / "bin", "perfgate",
         f'printf "%s\\n" "$*" > "{tmp_path}/argv"\nprintf "%s" "${{PERFGATE_HISTORY_URL-unset}}" > "{tmp_path}/url"\n')
    where = tmp_path / "srv" / "history.sqlite" if store else tmp_path / ".local" / "share" / "perfgate" / "history.sqlite"
    done = run_step(script(steps(jobs(workflow())["measure"])[FILE_STEP]), tmp_path,
                    {"STORE": str(where) if store else "", "GITHUB_REF_NAME": "main"}, bin_dir)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "argv").read_text().split() == [
        "history", "record", "--results", "perfgate-results", "--design", "stored", "--branch", "main",
        "--history", str(where)]
    assert (tmp_path / "url").read_text() == "unset"
    assert where.parent.is_dir()


def test_the_t4_job_uploads_only_the_result_files_for_the_record() -> None:
    measure, record = jobs(workflow())["measure"], jobs(workflow())["record"]
    uploads = re.findall(r"uses: actions/upload-artifact@.*\n        with:\n((?:          .*\n)+)", measure)
    assert uploads == [
        "          name: perfgate-history-results\n          path: perfgate-results/\n"
        "          if-no-files-found: warn\n          retention-days: 30\n",
        "          name: perfgate-history-artifacts\n          path: perfgate-artifacts/\n"
        "          if-no-files-found: warn\n          retention-days: 30\n"]
    (download,) = re.findall(r"uses: actions/download-artifact@.*\n        with:\n((?:          .*\n)+)", record)
    # Outside the work tree, which the checkout below writes.
    assert download == "          name: perfgate-history-results\n          path: ${{ runner.temp }}/perfgate-results\n"


# --- the recording job: the artifact as data ----------------------------------------------------

def test_the_recording_job_checks_the_results_before_it_installs_or_records() -> None:
    record = jobs(workflow())["record"]
    assert list(steps(record)) == ["Download the results (data only)", CHECK_STEP, "Check out the pushed commit",
                                   "Set up Python", INSTALL_STEP, RECORD_STEP]
    # Nothing of the results is run: only the check and `perfgate history record` read them.
    assert [s for s, body in steps(record).items() if "$RESULTS" in body] == [CHECK_STEP, RECORD_STEP]
    for name in (CHECK_STEP, RECORD_STEP):
        assert "          RESULTS: ${{ runner.temp }}/perfgate-results" in step_env(steps(record)[name])


def _results(tmp_path: Path) -> Path:
    """A results folder as the T4 job writes it: one CUDA run of ``tiny``."""
    folder = tmp_path / "perfgate-results"
    folder.mkdir()
    env = dataclasses.replace(ENV, git_commit="0123abcd", git_dirty=False, device="cuda", gpu_name="Tesla T4")
    result = dataclasses.replace(make_result("tiny", env=env), created_at="2026-11-01T10:00:00+00:00")
    save_result(result, folder / "tiny.json")
    return folder


def du(folder: Path) -> int:
    """``du -sb``'s count of a folder, as the check step takes it."""
    return int(subprocess.run(["du", "-sb", str(folder)], capture_output=True, text=True, check=True).stdout.split()[0])


@pytest.mark.parametrize("content", ["results", "at the limit", "over the limit", "a link", "a fifo"])
def test_the_results_are_size_limited_plain_files(tmp_path: Path, bin_dir: Path, content: str) -> None:
    results = _results(tmp_path)
    if content in ("at the limit", "over the limit"):
        padding = results / "padding.json"
        padding.touch()  # first, so that the folder's own size is counted as it will be
        with open(padding, "r+b") as handle:  # sparse: du -b counts the bytes a file holds, not its blocks
            handle.truncate(LIMIT_BYTES - du(results) + (content == "over the limit"))
        assert du(results) == LIMIT_BYTES + (content == "over the limit")
    if content == "a link":
        (results / "other.json").symlink_to("/etc/passwd")
    if content == "a fifo":
        os.mkfifo(results / "run.json")
    done = run_step(script(steps(jobs(workflow())["record"])[CHECK_STEP]), tmp_path,
                    {"RESULTS": str(results)}, bin_dir)
    if content in ("results", "at the limit"):
        assert done.returncode == 0, done.stdout + done.stderr
        return
    assert done.returncode == 1
    expected = "larger than 64 MB" if content == "over the limit" else "not a plain file"
    assert f"::error title=perfgate history::the results {'are' if 'MB' in expected else 'hold something that is'}" \
           in done.stdout and expected in done.stdout


def test_the_recording_step_records_into_the_shared_store_only(tmp_path: Path, bin_dir: Path) -> None:
    url = "postgresql://recorder:s3cret@db.internal/perfgate"
    fake(tmp_path / "perfgate-venv" / "bin", "perfgate",
         f'printf "%s\\n" "$@" > "{tmp_path}/argv"\nprintf "%s" "$PERFGATE_HISTORY_URL" > "{tmp_path}/url"\n')
    results = str(tmp_path / "perfgate-results")
    done = run_step(script(steps(jobs(workflow())["record"])[RECORD_STEP]), tmp_path,
                    {"PERFGATE_HISTORY_URL": url, "RESULTS": results, "MEASURED_ON": "t4 runner 1",
                     "GITHUB_REF_NAME": "main"}, bin_dir)
    assert done.returncode == 0, done.stderr
    assert "s3cret" not in done.stdout + done.stderr
    argv = (tmp_path / "argv").read_text().splitlines()
    assert argv == ["history", "record", "--results", results, "--design", "stored", "--branch", "main",
                    "--runner", "t4 runner 1"]
    assert (tmp_path / "url").read_text() == url  # from the environment: no --history, so no file on this VM
    args = build_parser().parse_args(argv)
    assert (args.results, args.design, args.branch, args.runner, args.history) == (
        results, "stored", "main", "t4 runner 1", None)


# --- the recording job's perfgate: without torch, from the pushed commit ------------------------

@pytest.mark.parametrize("project", ["perfgate", "train", None], ids=["perfgate's repository", "a project",
                                                                     "no pyproject.toml"])
def test_the_recorder_installs_perfgate_without_torch(tmp_path: Path, bin_dir: Path, project: str | None) -> None:
    if project is not None:
        (tmp_path / "pyproject.toml").write_text(f'[project]\nname = "{project}"\ndependencies = ["perfgate", "torch"]\n'
                                                 '[tool.other]\nname = "perfgate"\n')
    fake(bin_dir, "python", f"""\
        if [ "$1 $2 $3" = "-I -m venv" ]; then
          echo "python $*" >> "{tmp_path}/calls"
          mkdir -p "$4/bin"
          printf '#!/bin/bash\\necho "venv-python $*" >> "{tmp_path}/calls"\\n' > "$4/bin/python"
          chmod +x "$4/bin/python"
        else
          exec {shlex.quote(sys.executable)} "$@"
        fi
        """)
    done = run_step(script(steps(jobs(workflow())["record"])[INSTALL_STEP]), tmp_path, {}, bin_dir)
    assert done.returncode == 0, done.stderr
    pip = "venv-python -I -m pip install --no-cache-dir --quiet"
    perfgate = "--no-deps ." if project == "perfgate" else "--no-deps -c constraints.txt perfgate"
    assert (tmp_path / "calls").read_text().splitlines() == [
        f"python -I -m venv {tmp_path}/perfgate-venv", f"{pip} {perfgate}",
        f"{pip} -c constraints.txt {' '.join(RECORDER_PACKAGES)}"]


# Runs `python -m perfgate ARGS` from the tree under test with every third-party package but
# those the recording job installs made unimportable (as if not installed).
RESTRICTED = """\
import importlib.machinery
import runpy
import site
import sys

root, allowed = sys.argv[1], set(sys.argv[2].split(","))
sys.path.insert(0, root)
installed = tuple(site.getsitepackages())


class NotInstalled:
    \"\"\"A top-level module from site-packages is not there unless allowed.\"\"\"

    def find_spec(self, name, path=None, target=None):
        if "." in name or name in allowed:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name)
        where = spec and (spec.origin or next(iter(spec.submodule_search_locations or ()), None))
        if not where or not where.startswith(installed):
            return None  # the standard library, or not there anyway
        print(f"not installed by the recording job: {name}", file=sys.stderr)
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)


sys.meta_path.insert(0, NotInstalled())
sys.argv = ["perfgate", *sys.argv[3:]]
runpy.run_module("perfgate", run_name="__main__", alter_sys=True)
"""


@pytest.mark.slow
def test_what_the_recorder_installs_is_enough_to_record(tmp_path: Path, backend: Callable[[], Path | str]) -> None:
    """numpy, scipy, jinja2, tomlkit and psycopg[binary] (with what pip brings with them):
    `perfgate history record` of a CUDA run with nothing else importable, torch included."""
    store = backend()
    results = _results(tmp_path)
    argv = ["history", "record", "--results", str(results), "--design", "stored", "--branch", "main",
            "--runner", "t4-runner-1"]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), "LANG": "C.UTF-8",
           "RUNNER_NAME": "GitHub Actions 7"}
    if isinstance(store, str):  # as the job gives it: the whole URL, password and all, in the environment
        env["PERFGATE_HISTORY_URL"] = store.replace("postgresql://perfgate@", f"postgresql://recorder:{PASSWORD}@")
    else:
        argv += ["--history", str(store)]
    done = subprocess.run([sys.executable, "-I", "-c", RESTRICTED, str(ROOT), ",".join(sorted(IMPORTABLE)), *argv],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "run 1: tiny of 0123abcd, stored design, 5 repeats" in done.stdout
    assert PASSWORD not in done.stdout + done.stderr
    query = "SELECT runner, branch, design FROM runs"
    if isinstance(store, str):
        import psycopg

        with psycopg.connect(store) as conn:
            rows = conn.execute(query).fetchall()
    else:
        with sqlite3.connect(store) as conn:
            rows = conn.execute(query).fetchall()
    assert [tuple(r) for r in rows] == [("t4-runner-1", "main", "stored")]
