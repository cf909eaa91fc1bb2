"""`perfgate ci` outside GitHub: the GITHUB_* files are temporary files, the base branch a
directory in tmp_path, the pull request's checkout the current directory.

Most tests judge result files written by the factories (`--results`), so no torch run is
needed; one test measures the tiny workload end to end.
"""

from __future__ import annotations

import argparse
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from factories import make_result

from perfgate.adapters.ci import add_parser, read_pull_request, workflow_command
from perfgate.model.errors import UsageError
from perfgate.report.markdown import MARKER
from perfgate.store.baselines import save_baseline, updated_baseline
from perfgate.store.results import save_result

BASE_SHA = "b" * 40
HEAD_SHA = "c" * 40
BASE_SETTINGS = '[tool.perfgate]\nbaselines = "baselines"\ndelta = 0.03\n'


@dataclass
class Repo:
    base: Path
    head: Path
    summary: Path
    output: Path
    event: Path
    tmp: Path

    def outputs(self) -> dict[str, str]:
        return dict(line.split("=", 1) for line in self.output.read_text().splitlines())


def pr_event(number: int = 7) -> dict:
    return {
        "action": "synchronize",
        "number": number,
        "pull_request": {
            "number": number,
            "base": {"ref": "main", "sha": BASE_SHA, "repo": {"full_name": "acme/train"}},
            "head": {"ref": "faster-loader", "sha": HEAD_SHA, "repo": {"full_name": "acme/train"}},
        },
        "repository": {"full_name": "acme/train"},
    }


def record_baseline(root: Path, *, seed: int, **kw) -> None:
    """Five recordings, as ``rebaseline --append`` on five days makes them: enough history
    that an unchanged run can PASS against a stored baseline."""
    baseline = None
    for day in range(5):
        baseline = updated_baseline(baseline, make_result("tiny", seed=seed + 10 * day, **kw), "test baseline",
                                    append=True)
    assert baseline is not None
    save_baseline(baseline, root)


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Repo:
    for var in ("GITHUB_RUN_ID", "GITHUB_REPOSITORY", "GITHUB_SERVER_URL"):
        monkeypatch.delenv(var, raising=False)
    base = tmp_path / "base"
    base.mkdir()
    (base / "pyproject.toml").write_text(BASE_SETTINGS)
    record_baseline(base / "baselines", seed=1)
    head = tmp_path / "head"
    shutil.copytree(base, head)
    monkeypatch.chdir(head)
    gh = tmp_path / "github"
    gh.mkdir()
    event = gh / "event.json"
    event.write_text(json.dumps(pr_event()))
    summary, output = gh / "step_summary.md", gh / "output.txt"
    summary.touch()
    output.touch()
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    monkeypatch.setenv("GITHUB_OUTPUT", str(output))
    monkeypatch.setenv("GITHUB_EVENT_PATH", str(event))
    monkeypatch.setenv("GITHUB_EVENT_NAME", "pull_request")
    monkeypatch.setenv("GITHUB_RUN_ID", "4242")
    monkeypatch.setenv("GITHUB_REPOSITORY", "acme/train")
    return Repo(base, head, summary, output, event, tmp_path)


def results(repo: Repo, name: str, **kw) -> Path:
    directory = repo.tmp / name
    directory.mkdir()
    save_result(make_result("tiny", **kw), directory / "tiny.json")
    return directory


def ci(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="perfgate")
    add_parser(parser.add_subparsers())
    args = parser.parse_args(["ci", *argv])
    code = args.func(args)
    out, err = capsys.readouterr()
    return code, out, err


def judge(capsys, repo: Repo, result_dir: Path, *extra: str) -> tuple[int, str, str]:
    return ci(capsys, "--base-dir", str(repo.base), "--results", str(result_dir),
              "--artifacts", str(repo.tmp / "artifacts"), *extra)


# --- the trust model -----------------------------------------------------------------------

def test_a_pull_request_that_edits_baselines_is_judged_against_the_base_branch(capsys, repo: Repo) -> None:
    slower = results(repo, "slower", seed=2, scale=1.10)
    # The pull request rebaselines itself onto its own slowdown: against its own store it passes.
    shutil.rmtree(repo.head / "baselines")
    record_baseline(repo.head / "baselines", seed=2, scale=1.10)
    (repo.head / "baselines" / "extra.json").write_text("{}\n")

    code, out, _ = judge(capsys, repo, slower)

    assert code == 1
    summary = repo.summary.read_text()
    assert summary.startswith(MARKER + "\n## perfgate: REGRESSION")
    assert "> [!CAUTION]" in summary and "edits the gate's own inputs" in summary
    (changed,) = [line for line in summary.splitlines() if line.startswith("> - baselines")]
    assert "changed `cpu-" in changed and "/tiny.json`" in changed and "added `extra.json`" in changed
    assert "::warning title=perfgate%3A baselines edited::this pull request changes 2 file(s) in baselines/" in out
    assert "**tiny** — **REGRESSION**" in summary
    assert repo.outputs() == {"verdict": "regression", "exit-code": "1", "inputs-changed": "true",
                              "markdown": str((repo.tmp / "artifacts" / "report.md").resolve())}


def test_a_pull_request_that_loosens_thresholds_is_judged_with_the_base_thresholds(capsys, repo: Repo) -> None:
    slower = results(repo, "slower", seed=2, scale=1.10)
    (repo.head / "pyproject.toml").write_text(
        '[tool.perfgate]\nbaselines = "baselines"\ndelta = 0.5\n\n[tool.perfgate.workload.tiny]\ndelta = 0.9\n')

    code, out, _ = judge(capsys, repo, slower)

    assert code == 1
    summary = repo.summary.read_text()
    (line,) = [x for x in summary.splitlines() if x.startswith("> - `[tool.perfgate]`")]
    assert "delta 0.03 → 0.5" in line and "workload.tiny.delta (unset) → 0.9" in line
    assert "above δ=3%" in summary  # the base's δ decided, not the pull request's 50%
    assert "::warning title=perfgate%3A thresholds edited::" in out
    assert repo.outputs()["inputs-changed"] == "true"


def test_a_pull_request_that_edits_the_workflow_gets_the_notice(capsys, repo: Repo) -> None:
    (repo.head / ".github" / "workflows").mkdir(parents=True)
    (repo.head / ".github" / "workflows" / "perfgate.yml").write_text("name: perfgate\n")
    code, out, _ = judge(capsys, repo, results(repo, "same", seed=2))
    assert code == 0
    assert "> - `.github/`: `.github/workflows/perfgate.yml`" in repo.summary.read_text()
    assert "perfgate%3A workflows edited" in out


def test_base_settings_choose_the_workloads_so_a_pull_request_cannot_drop_one(capsys, repo: Repo) -> None:
    (repo.base / "pyproject.toml").write_text(BASE_SETTINGS + 'workloads = ["tiny", "other"]\n')
    code, out, err = judge(capsys, repo, results(repo, "only-tiny", seed=2))
    assert code == 2
    assert "no result for other" in err
    assert repo.outputs()["exit-code"] == "2"


def test_a_base_checkout_at_another_commit_is_refused(capsys, repo: Repo) -> None:
    import subprocess

    git = ["git", "-C", str(repo.base), "-c", "user.name=t", "-c", "user.email=t@e"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "base"], check=True)
    code, _, err = judge(capsys, repo, results(repo, "same", seed=2))
    assert code == 2
    assert "not the pull request's base bbbbbbbbbbbb" in err


# --- exit codes, outputs and the report -----------------------------------------------------

@pytest.mark.parametrize(("kw", "code", "verdict", "annotation"), [
    ({"seed": 2}, 0, "pass", None),
    ({"seed": 2, "scale": 1.10}, 1, "regression", "::error title=perfgate REGRESSION%3A tiny::time per step +"),
    ({"seed": 2, "params": {"batch_size": 16, "steps": 10}}, 2, "error",
     "::error title=perfgate INCOMPARABLE%3A tiny::differs from the baseline in param batch_size"),
    ({"seed": 2, "scale": 1.02}, 3, "inconclusive", "::warning title=perfgate INCONCLUSIVE%3A tiny::time per step +"),
])
def test_exit_codes_outputs_and_annotations(capsys, repo: Repo, kw, code, verdict, annotation) -> None:
    got, out, _ = judge(capsys, repo, results(repo, "current", **kw))
    assert got == code
    outputs = repo.outputs()
    assert outputs["verdict"] == verdict and outputs["exit-code"] == str(code)
    assert outputs["inputs-changed"] == "false"
    summary = repo.summary.read_text()
    assert Path(outputs["markdown"]).read_text() == summary
    check = {0: "**Check: passes.**", 1: "**Check: fails** (exit code 1)", 2: "**Check: fails as an error**",
             3: "**Check: neutral** (exit code 3)"}[code]
    assert check in summary
    assert "[!CAUTION]" not in summary
    if annotation:
        assert annotation in out
    else:
        assert "::error" not in out and "::warning" not in out


def test_the_summary_and_the_artifacts(capsys, repo: Repo) -> None:
    artifacts = repo.tmp / "artifacts"
    artifacts.mkdir()
    (artifacts / "gpu-clocks.txt").write_text("outcome: not locked: nvidia-smi not found\n\n$ nvidia-smi ...\n")
    code, out, _ = judge(capsys, repo, results(repo, "current", seed=2))
    assert code == 0
    summary = repo.summary.read_text()
    lines = summary.splitlines()
    assert lines[0] == MARKER and lines[1] == "## perfgate: pass (1 PASS)"
    assert "- ✅ **tiny** — **PASS**" in summary
    assert ("Judged against the baselines and `[tool.perfgate]` of the base branch `main` (`bbbbbbbbbbbb`, "
            "base checkout not verified as a git commit); pull request #7 at `cccccccccccc`.") in summary
    assert "GPU clocks: not locked: nvidia-smi not found." in summary
    assert "[run 4242](https://github.com/acme/train/actions/runs/4242)" in summary
    assert "tiny: PASS" in out  # the terminal table in the log
    assert (artifacts / "comment.md").read_text() == summary
    report = json.loads((artifacts / "report.json").read_text())
    assert report["kind"] == "perfgate.gate-report" and report["exit_code"] == 0


def test_the_summary_is_appended_to_what_earlier_steps_wrote(capsys, repo: Repo) -> None:
    repo.summary.write_text("earlier step\n")
    judge(capsys, repo, results(repo, "current", seed=2))
    assert repo.summary.read_text().startswith("earlier step\n" + MARKER)


def test_a_missing_baseline_is_a_warning_not_a_failure(capsys, repo: Repo) -> None:
    shutil.rmtree(repo.base / "baselines")
    code, out, _ = judge(capsys, repo, results(repo, "current", seed=2))
    assert code == 0
    assert "::warning title=perfgate NO_BASELINE%3A tiny::" in out and "(not judged; it does not fail the gate)" in out
    assert "No baseline for `tiny`" in repo.summary.read_text()


# --- bad input: one line, exit 2, never a passing check ------------------------------------

def assert_error(repo: Repo, code: int, out: str, err: str, message: str) -> None:
    assert code == 2
    (line,) = err.strip().splitlines()
    assert line.startswith("perfgate: error: ") and message in line
    assert "::error title=perfgate error::" in out
    outputs = repo.outputs()
    assert outputs["exit-code"] == "2" and outputs["verdict"] == "error"


def test_missing_step_summary(capsys, repo: Repo, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GITHUB_STEP_SUMMARY")
    code, out, err = judge(capsys, repo, results(repo, "current", seed=2))
    assert_error(repo, code, out, err, "GITHUB_STEP_SUMMARY is not set")


def test_missing_output_file_variable(capsys, repo: Repo, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GITHUB_OUTPUT")
    code, out, err = judge(capsys, repo, results(repo, "current", seed=2))
    assert code == 2 and "GITHUB_OUTPUT is not set" in err
    assert "**Check: fails as an error**" in repo.summary.read_text()


@pytest.mark.parametrize(("event", "message"), [
    ("{not json", "not JSON (Expecting property name enclosed in double quotes at line 1 column 2)"),
    ("[1, 2]", "no pull_request object"),
    (json.dumps({"pull_request": {"number": "7"}}), "pull_request.number is missing or not a positive integer"),
    (json.dumps({"pull_request": {"number": 7, "base": {"ref": "main"}}}), "pull_request.base.sha is missing"),
])
def test_bad_event_files(capsys, repo: Repo, event: str, message: str) -> None:
    repo.event.write_text(event)
    code, out, err = judge(capsys, repo, results(repo, "current", seed=2))
    assert_error(repo, code, out, err, message)
    assert not (repo.tmp / "artifacts" / "comment").exists()  # no pull request to comment on


@pytest.mark.parametrize("name", ["push", "pull_request_target", ""])
def test_only_pull_request_events(capsys, repo: Repo, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.setenv("GITHUB_EVENT_NAME", name)
    code, out, err = judge(capsys, repo, results(repo, "current", seed=2))
    assert_error(repo, code, out, err, "perfgate ci judges pull_request events only")


def test_missing_event_file_and_base_dir(capsys, repo: Repo, monkeypatch: pytest.MonkeyPatch) -> None:
    current = results(repo, "current", seed=2)
    repo.event.unlink()
    code, out, err = judge(capsys, repo, current)
    assert_error(repo, code, out, err, "no such file")
    repo.event.write_text(json.dumps(pr_event()))
    repo.output.write_text("")
    code, out, err = ci(capsys, "--base-dir", str(repo.tmp / "nowhere"), "--results", str(current))
    assert_error(repo, code, out, err, "not a directory")
    repo.output.write_text("")
    code, out, err = ci(capsys, "--base-dir", ".", "--results", str(current))
    assert_error(repo, code, out, err, "is the pull request's own checkout")


def test_an_invalid_base_table_is_an_error(capsys, repo: Repo) -> None:
    (repo.base / "pyproject.toml").write_text("[tool.perfgate]\ndelta = -1\n")
    code, out, err = judge(capsys, repo, results(repo, "current", seed=2))
    assert code == 2 and "[tool.perfgate]" in err and repo.outputs()["exit-code"] == "2"


def test_measuring_options_do_not_mix_with_results(capsys, repo: Repo) -> None:
    code, out, err = judge(capsys, repo, results(repo, "current", seed=2), "--repeats", "3")
    assert_error(repo, code, out, err, "takes no measuring option (--repeats)")


def test_measuring_options_of_the_sequential_gate_do_not_mix_with_results(capsys, repo: Repo) -> None:
    code, out, err = judge(capsys, repo, results(repo, "current", seed=2), "--budget", "20m", "--max-blocks", "9")
    assert_error(repo, code, out, err, "takes no measuring option (--max-blocks, --budget)")


def test_a_report_that_cannot_be_written_is_an_error_not_a_pass(capsys, repo: Repo) -> None:
    (repo.tmp / "artifacts").write_text("a file, so the reports cannot go in a folder of that name")
    code, out, err = judge(capsys, repo, results(repo, "current", seed=2))
    assert code == 2 and "report NOT written: " in err and "artifacts/report.md" in err
    assert repo.outputs()["exit-code"] == "2" and repo.outputs()["verdict"] == "error"
    assert "::error title=perfgate error::" in out


def test_a_bug_is_an_error_with_outputs_not_a_crash(capsys, repo: Repo, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr("perfgate.adapters.ci.judge_on_disk", broken)
    code, out, err = judge(capsys, repo, results(repo, "current", seed=2))
    assert code == 2
    assert "perfgate: error: internal error: RuntimeError: boom" in err
    assert repo.outputs()["exit-code"] == "2"


def test_read_pull_request_and_workflow_commands(tmp_path: Path) -> None:
    path = tmp_path / "event.json"
    event = pr_event(12)
    event["pull_request"]["head"]["repo"] = None  # a fork that was deleted
    path.write_text(json.dumps(event))
    pr = read_pull_request(path)
    assert (pr.number, pr.base_sha, pr.head_sha, pr.head_repo) == (12, BASE_SHA, HEAD_SHA, None)
    with pytest.raises(UsageError):
        read_pull_request(tmp_path / "absent.json")
    # Text from the pull request cannot start a workflow command of its own.
    assert workflow_command("error", "50% slower\n::add-mask::x", title="perfgate: a,b") == \
        "::error title=perfgate%3A a%2Cb::50%25 slower%0A::add-mask::x"


# --- one real run ---------------------------------------------------------------------------

@pytest.mark.slow
def test_measures_the_tiny_workload_end_to_end(capsys, repo: Repo, tiny_path: Path) -> None:
    """The measuring path: workloads from the pull request's checkout, no baseline on the base."""
    shutil.rmtree(repo.base / "baselines")
    (repo.base / "pyproject.toml").write_text('[tool.perfgate]\nworkloads = ["tiny"]\n')
    artifacts = repo.tmp / "artifacts"
    code, out, err = ci(capsys, "tiny", "--base-dir", str(repo.base), "--workloads-path", str(tiny_path),
                        "--device", "cpu", "--repeats", "2", "--out", str(artifacts / "results"),
                        "--artifacts", str(artifacts), "--cache-dir", str(repo.tmp / "cache"), "--design", "stored")
    assert code == 0, err
    assert "[tiny] repeat 2/2 done" in err
    result = json.loads((artifacts / "results" / "tiny.json").read_text())
    assert result["device"] == "cpu" and len(result["repeats"]) == 2
    assert "NO_BASELINE" in repo.summary.read_text()
    assert repo.outputs()["verdict"] == "pass"


@pytest.mark.slow
def test_measure_only_writes_data_alone_and_the_judge_decides(capsys, repo: Repo, tiny_path: Path) -> None:
    """The split of the GitHub workflows: the measuring job writes the result files and
    run.json and no verdict; `perfgate judge` reads them back by the base's rules."""
    from perfgate.adapters.judge_cli import add_parser as add_judge_parser
    from perfgate.adapters.judge_cli import run_judge

    shutil.rmtree(repo.base / "baselines")
    (repo.base / "pyproject.toml").write_text('[tool.perfgate]\nworkloads = ["tiny"]\nrepeats = 2\n')
    artifacts, results_dir = repo.tmp / "artifacts", repo.tmp / "measured"
    code, _, err = ci(capsys, "tiny", "--base-dir", str(repo.base), "--workloads-path", str(tiny_path),
                      "--device", "cpu", "--out", str(results_dir), "--artifacts", str(artifacts),
                      "--cache-dir", str(repo.tmp / "cache"), "--design", "stored", "--measure-only")
    assert code == 0, err
    assert sorted(p.name for p in results_dir.iterdir()) == ["run.json", "tiny.json"]
    manifest = json.loads((results_dir / "run.json").read_text())
    assert manifest["kind"] == "perfgate.ci-run" and manifest["design"] == "stored"
    assert manifest["pr_number"] == 7 and manifest["head_sha"] == HEAD_SHA and manifest["base_sha"] == BASE_SHA
    assert manifest["workloads"] == ["tiny"] and manifest["errors"] == {}
    assert not (artifacts / "report.md").exists() and repo.summary.read_text() == ""
    assert repo.outputs() == {"measured": "true", "exit-code": "0"}

    parser = argparse.ArgumentParser(prog="perfgate")
    add_judge_parser(parser.add_subparsers())
    args = parser.parse_args(["judge", str(results_dir), "--base-dir", str(repo.base), "--design", "stored",
                              "--artifacts", str(repo.tmp / "judged"), "--expect-head-sha", HEAD_SHA,
                              "--expect-pr", "7"])
    assert run_judge(args, {}) == 0
    comment = (repo.tmp / "judged" / "comment.md").read_text()
    assert "NO_BASELINE" in comment and f"pull request #7 at `{HEAD_SHA[:12]}`" in comment


def test_measure_only_that_cannot_measure_leaves_its_error_for_the_judge(capsys, repo: Repo) -> None:
    results_dir = repo.tmp / "measured"
    code, _, err = ci(capsys, "no-such-workload", "--base-dir", str(repo.base), "--device", "cpu",
                      "--out", str(results_dir), "--artifacts", str(repo.tmp / "artifacts"), "--measure-only")
    assert code == 2
    manifest = json.loads((results_dir / "run.json").read_text())
    assert "no-such-workload" in manifest["failure"]
