"""Scripts named once and gated everywhere: ``[tool.perfgate] scripts``, ``pytest --perfgate``
with ``--perfgate-script`` or ``@pytest.mark.perfgate(script=...)``, and the judge's rule
that a script's result is judged when the base's settings name it.

The settings and the selection are checked without measuring; one slow test runs a
paired gate through pytest in a scratch repository as far as a configured script the base
lacks (that workload's ERROR), and one extended test measures a configured script's paired
gate through pytest to its REGRESSION.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from perfgate.adapters.selection import configured_scripts, selected_jobs
from perfgate.gate.config import load_settings
from perfgate.gate.judge import gated_by_base
from perfgate.model.errors import UsageError
from perfgate.store.discovery import discover

from factories import git

pytest_plugins = ["pytester"]

PLAIN = Path(__file__).parent / "fixtures" / "scripts" / "plain.py"
TINY = Path(__file__).parent / "fixtures" / "tiny_workloads.py"


def settings_of(tmp_path: Path, table: str):
    (tmp_path / "pyproject.toml").write_text(f"[tool.perfgate]\n{table}\n")
    return load_settings(tmp_path / "pyproject.toml")


# --- the setting -----------------------------------------------------------------------


def test_scripts_are_strings_split_as_a_shell_would_or_tables(tmp_path: Path) -> None:
    s = settings_of(tmp_path, 'scripts = ["train/train.py --max-steps 80 --name \'a b\'", '
                              '{ path = "finetune.py", args = ["--bf16"], name = "finetune" }]')
    first, second = s.scripts
    assert (first.path, first.args, first.name, first.root) == (
        "train/train.py", ("--max-steps", "80", "--name", "a b"), None, tmp_path.resolve())
    assert first.job_name == "script-train" and first.written == "train/train.py --max-steps 80 --name 'a b'"
    assert (second.path, second.args, second.job_name) == ("finetune.py", ("--bf16",), "finetune")
    assert load_settings(None).scripts == ()


@pytest.mark.parametrize(("table", "message"), [
    ('scripts = "train.py"', "scripts must be a list of \"PATH [ARGS...]\" strings or"),
    ("scripts = [3]", "scripts must be a list of"),
    ('scripts = [""]', "scripts: an empty entry names no script"),
    ('scripts = ["train.py \'--unclosed"]', "scripts: \"train.py '--unclosed\": No closing quotation"),
    ('scripts = [{ args = ["--x"] }]', "a script's table needs path = "),
    ('scripts = [{ path = "t.py", args = "--x" }]', "scripts: t.py: args must be a list of strings"),
    ('scripts = [{ path = "t.py", name = 3 }]', "scripts: t.py: name must be a string"),
    ('scripts = [{ path = "t.py", arg = [] }]', "unknown key 'arg' in a script's table; allowed: args, name, path"),
], ids=["string", "number", "empty", "quote", "no-path", "args-string", "name-number", "unknown-key"])
def test_a_malformed_scripts_setting_is_one_usage_error(tmp_path: Path, table: str, message: str) -> None:
    with pytest.raises(UsageError) as caught:
        settings_of(tmp_path, table)
    assert message in caught.value.message and "[tool.perfgate]" in caught.value.message


# --- the selection ---------------------------------------------------------------------


@pytest.fixture()
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "workloads").mkdir()
    shutil.copy(TINY, tmp_path / "workloads" / "tiny_workloads.py")
    shutil.copy(PLAIN, tmp_path / "train_loop.py")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def names(jobs) -> list[str]:
    return [job.workload.name for job in jobs]


def test_by_default_a_project_with_scripts_gates_its_own_workloads_and_its_scripts(project: Path) -> None:
    registry = discover(project_dir=project)
    scripts = settings_of(project, 'scripts = ["train_loop.py --epochs 1"]').scripts
    jobs = selected_jobs([], registry, scripts, "cpu", {}, lambda name: None)
    own = sorted(w.name for w in registry.workloads.values() if w.source.startswith("file:"))
    assert names(jobs) == [*own, "script-train-loop"]  # not perfgate's reference workloads
    script = jobs[-1].script
    assert script is not None and script.args == ("--epochs", "1") and script.configured
    assert script.shown == "train_loop.py" and len(script.sha256) == 64
    # named, a script is selected by the name its results go by, with a reference workload
    jobs = selected_jobs(["script-train-loop", "resnet18-cifar10"], registry, scripts, "cpu", {"steps": "7"},
                         lambda name: None)
    assert names(jobs) == ["script-train-loop", "resnet18-cifar10"]
    assert jobs[0].params.steps == 7 and jobs[0].overrides == {"steps": 7}
    # without scripts the default selection is every discovered workload, as before
    assert names(selected_jobs([], registry, (), "cpu", {}, lambda name: None)) == registry.names()


def test_scripts_whose_names_clash_or_whose_file_is_missing_are_one_usage_error(project: Path) -> None:
    registry = discover(project_dir=project)
    twice = settings_of(project, 'scripts = ["train_loop.py", "train_loop.py --epochs 1"]').scripts
    with pytest.raises(UsageError, match=r"the scripts 'train_loop.py' \(\[tool.perfgate\] scripts\) and "
                                         r"'train_loop.py --epochs 1' \(\[tool.perfgate\] scripts\) are both "
                                         "named script-train-loop; give one a name of its own"):
        configured_scripts(twice, registry)
    like_a_workload = settings_of(project, 'scripts = [{ path = "train_loop.py", name = "tiny" }]').scripts
    with pytest.raises(UsageError, match="is named tiny, which is a workload's name"):
        configured_scripts(like_a_workload, registry)
    missing = settings_of(project, 'scripts = ["gone.py"]').scripts
    with pytest.raises(UsageError, match=r"\[tool.perfgate\] scripts: gone.py: no such file \(in "):
        selected_jobs([], registry, missing, "cpu", {}, lambda name: None)
    scripts = settings_of(project, 'scripts = ["train_loop.py"]').scripts
    with pytest.raises(UsageError, match="--set width: a script sets that itself"):
        selected_jobs(["script-train-loop"], registry, scripts, "cpu", {"width": "3"}, lambda name: None)


def test_the_judge_takes_a_script_the_bases_settings_name(tmp_path: Path) -> None:
    s = settings_of(tmp_path, 'scripts = ["train.py", { path = "ft.py", name = "finetune" }]')
    gated = gated_by_base(s, "cpu")
    assert gated == {"script-train": "the base's `[tool.perfgate] scripts` lists train.py",
                     "finetune": "the base's `[tool.perfgate] scripts` lists ft.py"}
    s = settings_of(tmp_path, 'workloads = ["tiny", "finetune"]\nscripts = [{ path = "ft.py", name = "finetune" }]')
    assert gated_by_base(s, "cpu") == {"tiny": "the base's `[tool.perfgate] workloads` lists it",
                                       "finetune": "the base's `[tool.perfgate] scripts` lists ft.py"}


def test_the_base_decides_which_scripts_and_the_head_side_runs_the_pull_requests_copy(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``perfgate ci`` reads the base checkout's settings: a script they list is the pull
    request's file on the head side (as ``workloads_path`` is), the base checkout's on the
    base side (a bug once: both sides ran the base's copy, and the paired gate refused it as
    "outside the repository")."""
    from perfgate.gate.judge import base_settings

    base, head = tmp_path / "base", tmp_path / "head"
    for side in (base, head):
        (side / "train").mkdir(parents=True)
        (side / "pyproject.toml").write_text('[tool.perfgate]\nscripts = ["train/loop.py --epochs 1"]\n')
        shutil.copy(PLAIN, side / "train" / "loop.py")
    monkeypatch.chdir(head)
    (entry,) = base_settings(base).scripts
    assert entry.root == head.resolve() and (entry.path, entry.args) == ("train/loop.py", ("--epochs", "1"))
    job = selected_jobs([], discover(project_dir=head), (entry,), "cpu", {}, lambda name: None)[-1]
    assert job.script is not None and job.script.path == (head / "train" / "loop.py").resolve()


def test_run_selects_a_configured_script_by_its_name(project: Path) -> None:
    from perfgate.adapters.cli import build_parser
    from perfgate.adapters.selection import jobs_of

    settings = settings_of(project, 'workloads = ["script-train-loop"]\nscripts = ["train_loop.py"]')
    args = build_parser().parse_args(["run", "--device", "cpu"])
    device, jobs = jobs_of(args, settings)
    assert device == "cpu" and names(jobs) == ["script-train-loop"] and jobs[0].script is not None
    settings = settings_of(project, 'workloads = ["script-gone"]\nscripts = ["train_loop.py"]')
    with pytest.raises(UsageError, match="unknown workload 'script-gone'"):
        jobs_of(args, settings)


# --- pytest --perfgate -----------------------------------------------------------------


MARKED = '''
import pytest


@pytest.mark.perfgate(script="train_loop.py", args=["--epochs", "1"], name="loop-short")
def test_short(perfgate_comparison):
    pass


def test_plain():
    pass
'''


def test_pytest_collects_configured_given_and_declared_scripts(pytester: pytest.Pytester) -> None:
    shutil.copy(PLAIN, pytester.path / "train_loop.py")
    shutil.copy(PLAIN, pytester.path / "other.py")
    (pytester.path / "pyproject.toml").write_text('[tool.perfgate]\nscripts = ["train_loop.py"]\n')
    pytester.makepyfile(test_user=MARKED)
    base = ["--perfgate", "--perfgate-device", "cpu", "--co", "-q"]

    def listed(*args: str) -> list[str]:
        result = pytester.runpytest(*base, *args)
        assert result.ret == 0, result.stdout.str() + result.stderr.str()
        return [line for line in result.stdout.lines if "::" in line]

    assert listed() == ["test_user.py::test_short", "test_user.py::test_plain", "perfgate::script-train-loop",
                        "perfgate::loop-short"]
    assert listed("--perfgate-script", "other.py --epochs 2")[2:] == [
        "perfgate::script-train-loop", "perfgate::script-other", "perfgate::loop-short"]
    # naming workloads leaves out the configured script unless named; a given one always joins
    (pytester.path / "perf").mkdir()
    shutil.copy(TINY, pytester.path / "perf" / "tiny_workloads.py")
    assert listed("--perfgate-workloads-path", "perf", "--perfgate-workloads", "tiny",
                  "--perfgate-script", "other.py")[2:] == ["perfgate::tiny", "perfgate::script-other",
                                                           "perfgate::loop-short"]
    assert listed("-m", "not perfgate") == ["test_user.py::test_plain"]


@pytest.mark.parametrize(("test", "args", "message"), [
    ("", ["--perfgate-script", "gone.py"], "--perfgate-script gone.py: no such file"),
    ("", ["--perfgate-script", "'train_loop.py"], "--perfgate-script \"'train_loop.py\": No closing quotation"),
    ("", ["--perfgate-script", "train_loop.py --epochs 1"],
     "the scripts 'train_loop.py' ([tool.perfgate] scripts) and 'train_loop.py --epochs 1' (--perfgate-script) "
     "are both named script-train-loop*"),
    ('@__import__("pytest").mark.perfgate(script="gone.py")\ndef test_x():\n    pass\n', [],
     "test_user.py::test_x: @pytest.mark.perfgate(script=...) gone.py: no such file*"),
    ('@__import__("pytest").mark.perfgate(script="train_loop.py", args="--epochs 1")\ndef test_x():\n    pass\n',
     [], "perfgate: test_user.py::test_x: @pytest.mark.perfgate: args= must be a list of strings"),
    ('@__import__("pytest").mark.perfgate(workload="tiny", script="train_loop.py")\ndef test_x():\n    pass\n',
     [], "perfgate: test_user.py::test_x: @pytest.mark.perfgate names a workload or a script, not both"),
    ('@__import__("pytest").mark.perfgate(workload="tiny", args=["x"])\ndef test_x():\n    pass\n',
     [], "perfgate: test_user.py::test_x: @pytest.mark.perfgate: args= goes with script="),
], ids=["missing", "quote", "clash", "marker-missing", "marker-args", "marker-both", "marker-args-alone"])
def test_a_bad_script_for_pytest_is_a_usage_error(pytester: pytest.Pytester, test: str, args: list[str],
                                                  message: str) -> None:
    shutil.copy(PLAIN, pytester.path / "train_loop.py")
    (pytester.path / "pyproject.toml").write_text('[tool.perfgate]\nscripts = ["train_loop.py"]\n')
    if test:
        pytester.makepyfile(test_user=test)
    result = pytester.runpytest("--perfgate", "--perfgate-device", "cpu", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    lines = [line for line in result.stderr.lines if line.startswith("ERROR: ")]
    assert len(lines) == 1, result.stderr.str()
    assert all(part in lines[0] for part in message.split("*")), lines[0]  # not fnmatch: [...] is literal here


def test_the_rebaseline_command_names_a_given_script_and_its_arguments(pytester: pytest.Pytester) -> None:
    from perfgate.adapters.pytest_items import GATE

    shutil.copy(PLAIN, pytester.path / "train_loop.py")
    (pytester.path / "pyproject.toml").write_text('[tool.perfgate]\nscripts = [{ path = "train_loop.py", '
                                                  'name = "loop" }]\n')
    seen: dict[str, str] = {}

    class Probe:  # what a NO_BASELINE skip would print, for each job, without measuring
        @pytest.hookimpl(trylast=True)
        def pytest_collection_finish(self, session: pytest.Session) -> None:
            gate = session.config.stash[GATE]
            for name in gate.jobs:
                c = argparse.Namespace(workload=name, device="cpu", overrides={})
                seen[name] = gate.rebaseline_command(c)

    result = pytester.runpytest("--perfgate", "--perfgate-device", "cpu", "--co", "--perfgate-script",
                                "train_loop.py --epochs 1", plugins=[Probe()])
    assert result.ret == 0, result.stderr.str()
    assert seen == {
        "loop": "perfgate rebaseline loop --device cpu --reason '<why this change is intended>'",
        "script-train-loop": "perfgate rebaseline --script train_loop.py --device cpu --reason "
                             "'<why this change is intended>' -- --epochs 1",
    }


# --- a paired gate of a configured script, through pytest -------------------------------


SCRIPT_SETTINGS = ('[tool.perfgate]\nblocks = 3\nmax_blocks = 10\ndelta = 0.5\ncounters = false\n'
                   'scripts = ["train/train_loop.py --batch-size 8"]\n')
PYTEST_AGAINST = ["-m", "pytest", "-p", "no:cacheprovider", "-rfEs", "--perfgate", "--perfgate-against", "HEAD~1",
                  "--perfgate-device", "cpu", "--perfgate-cache-dir", "cache", "--perfgate-set", "warmup_steps=2",
                  "--perfgate-set", "steps=10", "--perfgate-no-telemetry", "--perfgate-json", "report.json"]


def scratch_project(tmp_path: Path) -> Path:
    """A scratch repository whose first commit configures train/train_loop.py as a script."""
    root = tmp_path / "project"
    (root / "train").mkdir(parents=True)
    shutil.copy(PLAIN, root / "train" / "train_loop.py")
    (root / ".gitignore").write_text("perfgate-results/\ncache/\n.pytest_cache/\n")
    (root / "pyproject.toml").write_text(SCRIPT_SETTINGS)
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "a training script")
    return root


@pytest.mark.slow
@pytest.mark.extended
def test_pytest_paired_gates_a_configured_script_against_its_base_copy(tmp_path: Path) -> None:
    """The head's script sleeps 4 ms in forward (a step is about 1 ms here): the item
    ``perfgate::script-train-loop`` fails with forward flagged.

    Extended (30 s on a quiet 2-core machine, 100 s and more when other jobs load it: every
    process of a script starts fresh). Faster tests in the default lane keep each of its
    assertions: tests/test_script_gate.py::test_a_slower_script_is_a_regression_in_forward_against_its_base_copy
    (the same script, 10 ms slower in forward, paired against its base commit's copy: REGRESSION,
    forward flagged, the script's arguments in its result), tests/test_pytest_plugin.py::
    test_a_slower_forward_fails_with_the_markdown_section (a REGRESSION is the failed item
    ``perfgate::NAME``), test_pytest_collects_configured_given_and_declared_scripts (a configured
    script is the item ``perfgate::script-train-loop``) and
    test_pytest_a_configured_script_the_base_lacks_is_that_workloads_error (this pytest paired
    route on a configured script, as far as the base side)."""
    root = scratch_project(tmp_path)
    loop = root / "train" / "train_loop.py"
    loop.write_text(loop.read_text().replace('"--forward-sleep-ms", type=float, default=0.0',
                                             '"--forward-sleep-ms", type=float, default=4.0'))
    git(root, "commit", "-qam", "a slower forward")
    done = subprocess.run([sys.executable, *PYTEST_AGAINST], cwd=root, capture_output=True, text=True, timeout=900)
    assert done.returncode == 1, done.stdout + done.stderr  # a failed test
    assert "FAILED perfgate::script-train-loop" in done.stdout, done.stdout
    report = json.loads((root / "report.json").read_text())
    (workload,) = report["workloads"]
    assert workload["workload"] == "script-train-loop" and workload["verdict"] == "REGRESSION"
    rows = {row["phase"]: row for row in workload["phases"]}
    assert rows["forward"]["flagged"]
    head = json.loads((root / "perfgate-results" / "script-train-loop.json").read_text())
    assert head["params"]["script_args"] == "--batch-size 8"


@pytest.mark.slow
def test_pytest_a_configured_script_the_base_lacks_is_that_workloads_error(tmp_path: Path) -> None:
    """A script the pull request adds to the settings has no base side and is that workload's
    ERROR, as a new workload's. (The head side is measured all the same, alone, for the first
    look's repeats: the fewest, two, do; at the default five it took five fresh processes.)"""
    root = scratch_project(tmp_path)
    shutil.copy(PLAIN, root / "train" / "new_loop.py")
    (root / "pyproject.toml").write_text(SCRIPT_SETTINGS.replace('"]', '", "train/new_loop.py"]'))
    git(root, "add", "-A")
    git(root, "commit", "-qm", "a second script")
    done = subprocess.run([sys.executable, *PYTEST_AGAINST, "--perfgate-workloads", "script-new-loop",
                           "--perfgate-blocks", "2", "--perfgate-max-blocks", "2", "--perfgate-repeats", "2"],
                          cwd=root, capture_output=True, text=True, timeout=900)
    assert "ERROR perfgate::script-new-loop" in done.stdout, done.stdout
    assert "has no file train/new_loop.py (the script script-new-loop is new)" in done.stdout, done.stdout
