"""`perfgate judge`: the verdict from an untrusted measuring job's files, by the base's rules.

The attack matrix of the trust model: a pull request that edits the gate's defaults in
perfgate's code, deletes or renames a workload, edits constraints.txt, raises an
exception whose text would ping a team or show an image, or sends result files with NaN,
a 10 MB string or a workload name with ``../``. Each is judged by the base's rules,
rejected with one line, or rendered inert. (A file planted in the dataset cache is
tests/test_datasets.py's; the workflows' properties are tests/test_workflows.py's.)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from factories import BASE_SETTINGS, BLOCKS, ENV, define_workloads, make_result

from perfgate.adapters.judge_cli import add_parser
from perfgate.gate.inputs import classify, read_changed_files
from perfgate.model.errors import FileFormatError
from perfgate.model.manifest import MANIFEST_NAME, RunManifest
from perfgate.model.result import RunResult
from perfgate.report.markdown import MARKER
from perfgate.store.baselines import save_baseline, updated_baseline
from perfgate.store.jsonfile import write_json_atomic
from perfgate.store.results import save_result
from perfgate.store.untrusted_folders import load_measured, validate_baselines

HEAD_SHA = "c" * 40
BASE_SHA = "b" * 40
KEY = ENV.key()
HOSTILE = "boom @org/team ![x](https://example.invalid/p.png) <img src=x> [click](https://evil.invalid)\n" \
          "**Check: passes.**"


def paired(name: str, *, scale: float = 1.0, seed: int = 0, blocks: int = BLOCKS) -> RunResult:
    result = make_result(name, repeats=2 * blocks, scale=scale, seed=seed)
    repeats = tuple(dataclasses.replace(r, block=i // 2) for i, r in enumerate(result.repeats))
    return dataclasses.replace(result, repeats=repeats)


def write_run(folder: Path, head: dict[str, RunResult], base: dict[str, RunResult],
              manifest: RunManifest | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, result in head.items():
        save_result(result, folder / f"{name}.json")
    for name, result in base.items():
        save_result(result, folder / "base" / f"{name}.json")
    manifest = manifest or RunManifest(design="paired", device="cpu", workloads=tuple(head), pr_number=7,
                                       head_sha=HEAD_SHA, base_sha=BASE_SHA, base_ref="main")
    write_json_atomic(folder / MANIFEST_NAME, manifest.to_dict())
    return folder


def record(base: Path, name: str) -> None:
    baseline = None
    for day in range(3):
        baseline = updated_baseline(baseline, make_result(name, seed=day + 50), "test", append=True)
    assert baseline is not None
    save_baseline(baseline, base / "baselines")


def run(tmp_path: Path, results: Path, base: Path, *extra: str,
        env: dict[str, str] | None = None) -> tuple[int, str, str, str]:
    """``perfgate judge`` in this process; (exit code, stdout, stderr, comment.md)."""
    parser = argparse.ArgumentParser(prog="perfgate")
    add_parser(parser.add_subparsers())
    artifacts = tmp_path / "judged"
    args = parser.parse_args(["judge", str(results), "--base-dir", str(base), "--artifacts", str(artifacts), *extra])
    from io import StringIO

    from perfgate.adapters.judge_cli import run_judge

    out, err = StringIO(), StringIO()
    code = run_judge(args, env or {}, out, err)
    comment = (artifacts / "comment.md").read_text() if (artifacts / "comment.md").exists() else ""
    return code, out.getvalue(), err.getvalue(), comment


# --- the verdict comes from the data and the base's rules ------------------------------------

def test_an_unchanged_head_passes_and_a_slower_one_regresses(tmp_path: Path, base: Path) -> None:
    same = write_run(tmp_path / "same", {"tiny": paired("tiny", seed=1)}, {"tiny": paired("tiny", seed=2)})
    code, out, _, comment = run(tmp_path, same, base)
    assert code == 0, comment
    assert comment.startswith(MARKER) and "**Check: passes.**" in comment

    slower = write_run(tmp_path / "slower", {"tiny": paired("tiny", scale=1.2, seed=1)},
                       {"tiny": paired("tiny", seed=2)})
    code, out, _, comment = run(tmp_path, slower, base)
    assert code == 1, comment
    assert "REGRESSION" in out


def test_the_base_settings_decide_the_blocks_not_the_measuring_job(tmp_path: Path, base: Path) -> None:
    """Two blocks measured where the base plans three: the first look is not whole."""
    short = write_run(tmp_path / "r", {"tiny": paired("tiny", seed=1, blocks=2)},
                      {"tiny": paired("tiny", seed=2, blocks=2)})
    code, _, _, comment = run(tmp_path, short, base)
    assert code == 2
    assert "the first look was not measured whole: 2 block(s) of its 3" in comment


def test_the_design_is_the_judges(tmp_path: Path, base: Path) -> None:
    manifest = RunManifest(design="stored", device="cpu", workloads=("tiny",), pr_number=7)
    folder = write_run(tmp_path / "r", {"tiny": make_result("tiny", repeats=3)}, {}, manifest)
    code, _, err, _ = run(tmp_path, folder, base)
    assert code == 2 and "measured for the stored design" in err


def test_results_of_another_commit_or_pull_request_are_refused(tmp_path: Path, base: Path) -> None:
    folder = write_run(tmp_path / "r", {"tiny": paired("tiny", seed=1)}, {"tiny": paired("tiny", seed=2)})
    code, _, err, _ = run(tmp_path, folder, base, "--expect-head-sha", "d" * 40)
    assert code == 2 and "not the expected" in err
    code, _, err, _ = run(tmp_path, folder, base, "--expect-pr", "8")
    assert code == 2 and "not #8" in err


# --- the attack matrix ---------------------------------------------------------------------------

def test_a_pull_request_that_deletes_a_workload_is_an_error_naming_it(tmp_path: Path, base: Path) -> None:
    define_workloads(base, "other", file="workloads/other.py")
    record(base, "tiny")
    record(base, "other")
    folder = write_run(tmp_path / "r", {"other": paired("other", seed=1)}, {"other": paired("other", seed=2)})
    code, _, _, comment = run(tmp_path, folder, base)
    assert code == 2
    line = next(x for x in comment.splitlines() if "tiny" in x and "ERROR" in x)
    assert "removed or renamed" in line


def test_a_pull_request_that_renames_a_workload_retires_the_old_name_and_errs_on_the_new(tmp_path: Path,
                                                                                        base: Path) -> None:
    """A rename removes the old name's definition (retired, in plain view) and brings a name
    the base has no side of: an ERROR, so the gate still fails."""
    record(base, "tiny")
    folder = write_run(tmp_path / "r", {"tiny-renamed": paired("tiny-renamed", seed=1)}, {},
                       RunManifest(design="paired", device="cpu", workloads=("tiny-renamed",),
                                   base_missing=("tiny-renamed",)))
    head_files = tmp_path / "head-files"
    define_workloads(head_files, "tiny-renamed", "other")
    changed = tmp_path / "changed.tsv"
    changed.write_text("modified\tworkloads/defined.py\n")
    code, _, _, comment = run(tmp_path, folder, base, "--head-files", str(head_files), "--changed-files", str(changed))
    assert code == 2
    assert "Retired by this pull request" in comment
    assert any("tiny-renamed" in x and "has no workload" in x for x in comment.splitlines())
    # without the pull request's files, its new name is defined by neither tree: refused
    assert run(tmp_path, folder, base)[0] == 2


def test_a_workload_the_base_defines_needs_a_result_unless_the_pull_request_removes_it(tmp_path: Path, base: Path) -> None:
    """No baseline needed in the paired design: the trees, read as data, name the workloads
    (never run.json, whose base_only is not read)."""
    define_workloads(base, "other", file="workloads/other.py")
    define_workloads(base, "gone", file="workloads/gone.py")
    folder = write_run(tmp_path / "r", {"tiny": paired("tiny", seed=1), "other": paired("other", seed=3)},
                       {"tiny": paired("tiny", seed=2), "other": paired("other", seed=4)},
                       RunManifest(design="paired", device="cpu", workloads=("tiny", "other")))
    code, _, _, comment = run(tmp_path, folder, base)
    assert code == 2
    assert any("'gone'" in x and "the base defines it in workloads/gone.py" in x for x in comment.splitlines())
    # its file removed by the pull request: retired in plain view
    changed = tmp_path / "changed.tsv"
    changed.write_text("removed\tworkloads/gone.py\n")
    code, _, _, comment = run(tmp_path, folder, base, "--changed-files", str(changed))
    assert code != 2 and "Retired by this pull request" in comment and "gone" in comment


def test_an_unreadable_head_file_retires_nothing(tmp_path: Path, base: Path) -> None:
    define_workloads(base, "other", file="workloads/other.py")
    head_files = tmp_path / "head-files"
    (head_files / "workloads").mkdir(parents=True)
    (head_files / "workloads" / "defined.py").write_text("x = " + "[" * 200_000 + "]" * 200_000 + "\n")
    changed = tmp_path / "changed.tsv"
    changed.write_text("modified\tworkloads/defined.py\n")
    folder = write_run(tmp_path / "r", {"other": paired("other", seed=1)}, {"other": paired("other", seed=2)})
    code, _, _, comment = run(tmp_path, folder, base, "--head-files", str(head_files), "--changed-files", str(changed))
    assert code == 2 and "no result for 'tiny'" in comment


def test_removing_the_baseline_too_retires_a_workload_in_plain_view(tmp_path: Path, base: Path) -> None:
    define_workloads(base, "other", file="workloads/other.py")
    record(base, "tiny")
    record(base, "other")
    folder = write_run(tmp_path / "r", {"other": paired("other", seed=1)}, {"other": paired("other", seed=2)})
    changed = tmp_path / "changed.tsv"
    changed.write_text(f"removed\tbaselines/{KEY}/tiny.json\t\nremoved\tworkloads/tiny.py\t\n")
    code, _, _, comment = run(tmp_path, folder, base, "--changed-files", str(changed))
    assert code == 0, comment
    assert "Retired by this pull request" in comment and "tiny" in comment
    assert "> [!CAUTION]" in comment and "workload definitions" in comment


def test_a_pull_request_that_edits_constraints_or_the_harness_is_named_in_the_notice(tmp_path: Path,
                                                                                    base: Path) -> None:
    folder = write_run(tmp_path / "r", {"tiny": paired("tiny", seed=1)}, {"tiny": paired("tiny", seed=2)})
    changed = tmp_path / "changed.tsv"
    changed.write_text("modified\tconstraints.txt\t\nmodified\tperfgate/decide.py\t\n"
                       "modified\tpyproject.toml\t\nrenamed\t.github/workflows/x.yml\t.github/workflows/perfgate.yml\n")
    head_pyproject = tmp_path / "head.toml"
    head_pyproject.write_text(BASE_SETTINGS.replace("delta = 0.03", "delta = 0.5"))
    code, _, _, comment = run(tmp_path, folder, base, "--changed-files", str(changed),
                              "--head-pyproject", str(head_pyproject))
    assert code == 0, comment
    notice = [x for x in comment.splitlines() if x.startswith("> - ")]
    assert any("harness" in x and "constraints.txt" in x and "perfgate/decide.py" in x for x in notice)
    assert any("delta 0.03 → 0.5" in x for x in notice)
    assert any(".github/workflows/perfgate.yml" in x for x in notice)
    # ... and the gate used the base's δ all the same
    report = json.loads((tmp_path / "judged" / "report.json").read_text())
    assert report["config"]["delta"] == 0.03


@pytest.mark.slow
def test_edited_defaults_in_the_pull_requests_perfgate_are_never_imported(tmp_path: Path, base: Path) -> None:
    """The judge runs as the installed console script in the pull request's checkout, which
    holds a hostile perfgate package: its code must not run, its defaults must not apply."""
    head = tmp_path / "head"
    (head / "perfgate").mkdir(parents=True)
    marker = tmp_path / "hostile-code-ran"
    (head / "perfgate" / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    (head / "perfgate" / "decide.py").write_text("ALPHA = 1.0\nraise SystemExit(0)\n")
    folder = write_run(tmp_path / "r", {"tiny": paired("tiny", scale=1.2, seed=1)}, {"tiny": paired("tiny", seed=2)})
    script = Path(sys.executable).parent / "perfgate"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    done = subprocess.run([str(script), "judge", str(folder), "--base-dir", str(base), "--artifacts",
                           str(tmp_path / "out")], cwd=head, capture_output=True, text=True, env=env, timeout=300)
    assert not marker.exists()
    assert done.returncode == 1, done.stdout + done.stderr
    assert json.loads((tmp_path / "out" / "report.json").read_text())["config"]["alpha"] == 0.01


@pytest.mark.slow
def test_the_judge_never_imports_torch(tmp_path: Path, base: Path) -> None:
    """The judge job installs no torch, and nothing but what its workflow installs beside
    perfgate (``--no-deps``): judging must not import any other installed package."""
    workflow = (Path(__file__).resolve().parent.parent / ".github" / "workflows" / "perfgate-judge.yml").read_text()
    (install,) = [line for line in workflow.splitlines() if "-c constraints.txt" in line and "pip install" in line]
    allowed = {*install.split("-c constraints.txt", 1)[1].split(), "markupsafe", "perfgate"}  # jinja2's one dependency
    assert {"numpy", "scipy", "jinja2", "tomlkit"} <= allowed and "torch" not in allowed
    folder = write_run(tmp_path / "r", {"tiny": paired("tiny", seed=1)}, {"tiny": paired("tiny", seed=2)})
    code = ("import sys\n"
            "from importlib.machinery import PathFinder\n"
            f"ALLOWED = {sorted(allowed)!r}\n"
            "class Block:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        top = name.split('.')[0]\n"
            "        if '.' in name or top.lower() in ALLOWED or top.startswith('_'):\n"
            "            return None\n"
            "        spec = PathFinder.find_spec(top)\n"
            "        where = (spec.origin or '') if spec is not None else ''\n"
            "        if 'site-packages' in where or 'dist-packages' in where:\n"
            "            raise ImportError('the judge installs no ' + name)\n"
            "sys.meta_path.insert(0, Block())\n"
            "from perfgate.adapters.cli import main\n"
            f"raise SystemExit(main(['judge', {str(folder)!r}, '--base-dir', {str(base)!r}, "
            f"'--artifacts', {str(tmp_path / 'out')!r}]))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")})
    assert done.returncode == 0, done.stdout + done.stderr


def test_exception_text_from_a_workload_reaches_the_comment_inert(tmp_path: Path, base: Path) -> None:
    define_workloads(base, "other", file="workloads/other.py")
    manifest = RunManifest(design="paired", device="cpu", workloads=("tiny", "other"), errors={"tiny": HOSTILE},
                           pr_number=7, head_sha=HEAD_SHA, base_sha=BASE_SHA)
    folder = write_run(tmp_path / "r", {"other": paired("other", seed=1)}, {"other": paired("other", seed=2)},
                       manifest)
    code, _, _, comment = run(tmp_path, folder, base)
    assert code == 2
    assert "boom" in comment and "org/team" in comment  # still readable
    assert "@org/team" not in comment
    assert "![" not in comment and "<img" not in comment and "](https://evil" not in comment
    assert not any(line.lstrip("> -").startswith("**Check: passes") for line in comment.splitlines())


def test_the_clock_record_and_notes_from_the_run_are_inert_too(tmp_path: Path, base: Path) -> None:
    manifest = RunManifest(design="paired", device="cpu", workloads=("tiny",), clocks=HOSTILE,
                           notes={"tiny": (HOSTILE,)})
    folder = write_run(tmp_path / "r", {"tiny": paired("tiny", seed=1)}, {"tiny": paired("tiny", seed=2)}, manifest)
    code, _, _, comment = run(tmp_path, folder, base)
    assert code == 0, comment
    assert "@org/team" not in comment and "<img" not in comment and "![" not in comment


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d["repeats"][0]["phases_ms"]["step"].__setitem__(0, "NaN"), "non-finite"),
    (lambda d: d["repeats"][0].__setitem__("window_s", "1e999"), "non-finite"),
    (lambda d: d.__setitem__("workload_source", "x" * 10_000_000), "more than"),
    (lambda d: d.__setitem__("workload_source", "x" * 100_000), "characters"),
    (lambda d: d.__setitem__("workload", "../evil"), "not a workload name"),
    (lambda d: d["params"].__setitem__("deep", json.loads("[" * 200 + "]" * 200)), "nested"),
])
def test_hostile_result_files_are_rejected_with_one_line(tmp_path: Path, base: Path, mutate, message) -> None:
    folder = write_run(tmp_path / "r", {"tiny": paired("tiny", seed=1)}, {"tiny": paired("tiny", seed=2)})
    path = folder / "tiny.json"
    data = json.loads(path.read_text())
    mutate(data)
    text = json.dumps(data).replace('"NaN"', "NaN").replace('"1e999"', "1e999")
    path.write_text(text)
    code, _, err, comment = run(tmp_path, folder, base)
    assert code == 2
    errors = [line for line in err.splitlines() if line.startswith("perfgate: error:")]
    assert len(errors) == 1 and message in errors[0], err
    assert len(errors[0]) < 600
    assert "## perfgate: error" in comment


def test_a_result_file_named_for_another_workload_or_a_link_is_refused(tmp_path: Path, base: Path) -> None:
    folder = write_run(tmp_path / "r", {"tiny": paired("tiny", seed=1)}, {"tiny": paired("tiny", seed=2)})
    (folder / "tiny.json").rename(folder / "other.json")
    with pytest.raises(FileFormatError, match="named after its workload"):
        load_measured(folder)
    (folder / "other.json").rename(folder / "tiny.json")
    (folder / "extra.json").symlink_to(folder / "tiny.json")
    with pytest.raises(FileFormatError, match="symbolic link"):
        load_measured(folder)
    (folder / "extra.json").unlink()
    (folder / "notes.txt").write_text("hi")
    with pytest.raises(FileFormatError, match="unexpected file"):
        load_measured(folder)


def test_a_manifest_with_a_path_for_a_name_is_refused(tmp_path: Path, base: Path) -> None:
    folder = write_run(tmp_path / "r", {"tiny": paired("tiny", seed=1)}, {"tiny": paired("tiny", seed=2)})
    data = json.loads((folder / MANIFEST_NAME).read_text())
    data["errors"] = {"../../.git/config": "x"}
    (folder / MANIFEST_NAME).write_text(json.dumps(data))
    code, _, err, _ = run(tmp_path, folder, base)
    assert code == 2 and "not a workload name" in err


def test_the_outputs_for_the_commit_status(tmp_path: Path, base: Path) -> None:
    folder = write_run(tmp_path / "r", {"tiny": paired("tiny", scale=1.2, seed=1)}, {"tiny": paired("tiny", seed=2)})
    output, summary = tmp_path / "output", tmp_path / "summary"
    output.touch()
    summary.touch()
    code, _, _, comment = run(tmp_path, folder, base,
                              env={"GITHUB_OUTPUT": str(output), "GITHUB_STEP_SUMMARY": str(summary)})
    values = dict(line.split("=", 1) for line in output.read_text().splitlines())
    assert code == 1 and values["state"] == "failure" and values["exit-code"] == "1"
    assert values["description"].startswith("REGRESSION") and len(values["description"]) <= 140
    assert summary.read_text() == comment


# --- the rebaseline job's download ----------------------------------------------------------------

def test_validate_baselines_accepts_a_store_and_refuses_anything_else(tmp_path: Path, base: Path) -> None:
    record(base, "tiny")
    store = base / "baselines"
    (store / "README.md").write_text("# baselines\n")
    assert [p.as_posix() for p in validate_baselines(store)] == ["README.md", f"{KEY}/tiny.json"]
    for bad, message in (
        (".git/config", "not <environment key>"),
        ("hooks.json", "not <environment key>"),
        (f"{KEY}/Evil Name.json", "not a workload name"),
    ):
        folder = tmp_path / "dl"
        if folder.exists():
            import shutil

            shutil.rmtree(folder)
        (folder / KEY).mkdir(parents=True)
        target = folder / bad
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("{}")
        with pytest.raises(FileFormatError) as info:
            validate_baselines(folder)
        if message:
            assert message in str(info.value)
    folder = tmp_path / "linked"
    (folder / KEY).mkdir(parents=True)
    (folder / KEY / "tiny.json").symlink_to(store / KEY / "tiny.json")
    with pytest.raises(FileFormatError, match="symbolic link"):
        validate_baselines(folder)
    folder = tmp_path / "mismatch"
    (folder / KEY).mkdir(parents=True)
    (folder / KEY / "other.json").write_bytes((store / KEY / "tiny.json").read_bytes())
    with pytest.raises(FileFormatError, match="not what its path says"):
        validate_baselines(folder)


def test_the_changed_files_list_is_read_strictly(tmp_path: Path) -> None:
    good = tmp_path / "good.tsv"
    good.write_text("added\tbaselines/k/a.json\t\nrenamed\tworkloads/b.py\tworkloads/a.py\n")
    changes = classify(read_changed_files(good), baselines_dir="baselines")
    assert changes.added == ("k/a.json",) and changes.workloads == ("workloads/a.py", "workloads/b.py")
    bad = tmp_path / "bad.tsv"
    bad.write_text("exploded\tx\n")
    with pytest.raises(FileFormatError, match="expected 'status"):
        read_changed_files(bad)


def test_the_manifest_has_what_the_judge_workflow_reads_first() -> None:
    """perfgate-judge.yml reads `pr_number` and `base_sha` at the top of run.json before any
    perfgate code runs (tests/test_workflows.py runs that step on such a file)."""
    data = RunManifest(design="paired", device="cuda", workloads=("tiny",), pr_number=7, head_sha=HEAD_SHA,
                       base_sha=BASE_SHA).to_dict()
    assert data["pr_number"] == 7 and data["base_sha"] == BASE_SHA and data["kind"] == "perfgate.ci-run"
    workflow = (Path(__file__).resolve().parents[1] / ".github" / "workflows" / "perfgate-judge.yml").read_text()
    assert 'data["pr_number"], data["base_sha"]' in workflow


# --- the measuring job's start and end (--measuring-job) ------------------------------------------

def test_the_measuring_jobs_times_are_read_into_a_measuring_job(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from perfgate.gate.github import read_measuring_job
    from perfgate.model.measuring_job import MeasuringJob

    path = tmp_path / "job.json"
    path.write_text('{"started_at": "2026-12-04T05:00:00Z", "completed_at": "2026-12-04T05:12:30Z"}')
    job = read_measuring_job(path)
    assert job == MeasuringJob(datetime(2026, 12, 4, 5, 0, tzinfo=UTC), datetime(2026, 12, 4, 5, 12, 30, tzinfo=UTC))
    assert job.seconds == 750.0


@pytest.mark.parametrize(("text", "why"), [
    ("", "empty: the measuring job's start and end were not found"),
    ("{}", "the measuring job: 'started_at' is not a string"),
    ("{oops", "not JSON"),
    ('["2026-12-04T05:00:00Z"]', "not a JSON object"),
    ('{"started_at": "2026-12-04T05:00:00Z"}', "'completed_at' is not a string"),
    ('{"started_at": 5, "completed_at": "2026-12-04T05:00:00Z"}', "'started_at' is not a string"),
    ('{"started_at": "2026-12-04 05:00:00", "completed_at": "2026-12-04T05:00:00Z"}', "started_at is not a time"),
    ('{"started_at": "2026-13-04T05:00:00Z", "completed_at": "2026-12-04T05:00:00Z"}', "started_at is not a time"),
    ('{"started_at": "2026-12-04T05:00:00Z", "completed_at": "2026-12-04T05:00:00+00:00"}',
     "completed_at is not a time"),
    ('{"started_at": "2026-12-04T05:00:00Z", "completed_at": "2026-12-04T04:59:59Z"}',
     "completed_at is before started_at"),
    ('{"started_at": "2026-12-04T05:00:00Z", "completed_at": "2026-12-04T05:00:00Z", "steps": []}',
     "unknown key 'steps'"),
    ('{"started_at": "2026-12-04T05:00:00Z", "completed_at": "2026-12-04T05:00:00Z", "pad": "' + "x" * 5000 + '"}',
     "larger than 4096 bytes"),
    (b"\xff\xfe", "not UTF-8 text"),
    (None, "cannot be read"),
], ids=["empty", "no keys", "not json", "list", "no end", "number", "not iso", "month 13", "offset", "backwards",
        "unknown key", "too large", "not utf-8", "missing"])
def test_a_bad_measuring_job_file_is_one_line_and_exit_2(tmp_path: Path, base: Path, text: str | bytes | None,
                                                         why: str) -> None:
    """The file comes from the judge workflow, from the Actions API; read as untrusted all the same."""
    folder = write_run(tmp_path / "r", {"tiny": paired("tiny", seed=1)}, {"tiny": paired("tiny", seed=2)})
    path = tmp_path / "job.json"
    if isinstance(text, bytes):
        path.write_bytes(text)
    elif text is not None:
        path.write_text(text)
    code, _, err, comment = run(tmp_path, folder, base, "--measuring-job", str(path))
    assert code == 2
    (line,) = err.strip().splitlines()
    assert line.startswith(f"perfgate: error: --measuring-job {path}: ") and why in line
    assert "perfgate could not judge" in comment or "error" in comment.lower()


def test_the_measuring_job_reaches_the_judgement(tmp_path: Path, base: Path) -> None:
    """The same results judged without the job's times and with a job that ran days after their
    recorded starts: the second is refused by the judgement (not by the file's reader), so the
    times reach judge_measured."""
    folder = write_run(tmp_path / "r", {"tiny": paired("tiny", seed=1)}, {"tiny": paired("tiny", seed=2)})
    after = tmp_path / "after.json"
    after.write_text('{"started_at": "2026-12-04T05:00:00Z", "completed_at": "2026-12-04T05:30:00Z"}')
    code, _, _, comment = run(tmp_path, folder, base)
    assert code == 0, comment
    code, _, err, comment = run(tmp_path, folder, base, "--measuring-job", str(after))
    assert code == 2 and "--measuring-job" not in err and "tiny" in err, err
