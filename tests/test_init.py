"""`perfgate init`: scaffolds a repository, never overwrites a file."""

from __future__ import annotations

import argparse
import hashlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from perfgate.adapters.scaffold import (
    CODEOWNERS_TEMPLATE,
    FILES,
    PLACEHOLDER_OWNER,
    SHARDED,
    TEMPLATES,
    add_parser,
    parse_owners,
    render_codeowners,
    render_sharded,
    scaffold,
    template_text,
)
from perfgate.gate.config import load_settings
from perfgate.store.discovery import discover

README = Path(__file__).resolve().parents[1] / "README.md"
CI_DOC = README.parent / "docs" / "ci.md"  # "Using perfgate in your repository"
EXPECTED = {
    "workloads/my_model.py", "baselines/README.md", "pyproject.toml", ".github/workflows/ci.yml",
    ".github/workflows/perfgate.yml", ".github/workflows/perfgate-judge.yml",
    ".github/workflows/rebaseline.yml", ".github/workflows/perfgate-history.yml", ".github/actionlint.yaml",
    ".github/CODEOWNERS",
}
GATE_INPUTS = ["/workloads/", "/baselines/", "/constraints.txt", "/pyproject.toml", "/.github/"]


def init(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="perfgate")
    add_parser(parser.add_subparsers())
    args = parser.parse_args(["init", *argv])
    code = args.func(args)
    out, err = capsys.readouterr()
    return code, out, err


def digest(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_init_into_an_empty_directory(capsys, tmp_path: Path) -> None:
    target = tmp_path / "repo"
    code, out, _ = init(capsys, str(target))
    assert code == 0
    assert set(digest(target)) == EXPECTED
    for relative, template in FILES:
        assert (target / relative).read_text() == template_text(template)
        assert f"\n  created  {relative}\n" in out, relative
    assert re.search(r"^  created  \.github/CODEOWNERS\s+\(rules commented out: no --owners given\)$", out, re.M)
    assert "kept" not in out and "Add to pyproject.toml" not in out
    assert "There is no constraints.txt yet" in out
    # The settings it wrote are valid, and name the example workload it wrote.
    settings = load_settings(target / "pyproject.toml")
    assert settings.workloads == ("my-model",) and settings.baselines == target / "baselines"
    assert list((target / "baselines").iterdir()) == [target / "baselines" / "README.md"]


def test_the_settings_set_a_budget_the_gate_spends_alpha_over(capsys, tmp_path: Path) -> None:
    """A default gate fills its budget: 10 minutes, no max_blocks (so the paired gate spends α
    over the share of the budget measured, all of it where the budget ends), explained where it
    is set, and green has its bound, said in one line; the workflows leave it there, where the
    judge reads it too, and give the measuring job time for it."""
    from perfgate.analysis.driver import MAX_PLANNED, BudgetSpending

    target = tmp_path / "repo"
    assert init(capsys, str(target))[0] == 0
    settings = load_settings(target / "pyproject.toml")
    assert settings.budget_s == 600.0 and not settings.max_blocks_given
    assert settings.budget_spending(paired=True) == BudgetSpending(600.0, settings.blocks, MAX_PLANNED)
    assert settings.gate.inconclusive == "bound"
    text = (target / "pyproject.toml").read_text()
    (line,) = [line for line in text.splitlines() if line.startswith("inconclusive = ")]
    assert line.startswith('inconclusive = "bound"') and "too noisy to gate" in line and "2 x delta" in line
    comment = text[text.index("# The most wall time"):text.index('budget = "10m"')]
    for words in ("spends alpha over the share of the budget", "where the budget ends", "docs/repeats.md",
                  "the judge", "max_blocks", "500 blocks", '"none"'):
        assert words in " ".join(comment.replace("#", " ").split()), words
    for relative in (".github/workflows/perfgate.yml",):
        workflow = (target / relative).read_text()
        code = [line for line in workflow.splitlines() if not line.lstrip().startswith("#")]
        assert not any("--budget" in line or "--max-blocks" in line for line in code)
        assert "[tool.perfgate] budget" in workflow
        assert re.search(r"^    timeout-minutes: 60$", workflow, re.M)
    sharded = tmp_path / "sharded"
    assert init(capsys, str(sharded), "--shards", "3")[0] == 0
    workflow = (sharded / ".github/workflows/perfgate.yml").read_text()
    assert "[tool.perfgate] budget" in workflow and "shortest of the shards' planned last looks" in workflow


def test_init_never_overwrites_and_says_what_to_add(capsys, tmp_path: Path) -> None:
    (tmp_path / "workloads").mkdir()
    (tmp_path / "workloads" / "my_model.py").write_text("# my own workload\n")
    (tmp_path / ".github" / "workflows").mkdir(parents=True)
    (tmp_path / ".github" / "workflows" / "ci.yml").write_text("name: my ci\n")
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "train"\nversion = "1"\n')
    (tmp_path / "constraints.txt").write_text("torch==2.14.1\n")
    before = digest(tmp_path)

    code, out, _ = init(capsys, str(tmp_path))

    assert code == 0
    after = digest(tmp_path)
    assert {k: after[k] for k in before} == before  # nothing that existed changed
    assert set(after) - set(before) == EXPECTED - {"workloads/my_model.py", ".github/workflows/ci.yml",
                                                   "pyproject.toml"}
    assert re.search(r"^  kept     workloads/my_model\.py\s+\(exists\)$", out, re.M)
    assert re.search(r"^  kept     pyproject\.toml\s+"
                     r"\(exists without \[tool\.perfgate\], not edited: add the table below\)$", out, re.M)
    assert "\n  created  .github/workflows/perfgate.yml\n" in out
    assert "Add to pyproject.toml:\n\n" + template_text("tool_perfgate.toml") in out
    assert "There is no constraints.txt yet" not in out

    # A second run keeps everything and no longer asks for the table once it is there.
    with open(tmp_path / "pyproject.toml", "a") as handle:
        handle.write("\n" + template_text("tool_perfgate.toml"))
    before = digest(tmp_path)
    code, out, _ = init(capsys, str(tmp_path))
    assert code == 0 and digest(tmp_path) == before
    assert "created" not in out and "Add to pyproject.toml" not in out
    assert re.search(r"^  kept     pyproject\.toml\s+\(exists and has \[tool\.perfgate\]\)$", out, re.M)


def test_init_keeps_an_unreadable_pyproject(capsys, tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[project\n")
    code, out, _ = init(capsys, str(tmp_path))
    assert code == 0 and (tmp_path / "pyproject.toml").read_text() == "[project\n"
    assert "could not be read as TOML" in out and "Add to pyproject.toml" in out


def test_init_into_a_file_is_an_error(capsys, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    code, _, err = init(capsys, str(tmp_path / "file"))
    assert code == 2 and err.strip() == f"perfgate: error: {tmp_path / 'file'}: not a directory"


def test_the_example_workload_is_discovered_without_torch(tmp_path: Path) -> None:
    scaffold(tmp_path)
    registry = discover(project_dir=tmp_path)
    workload = registry.get("my-model")
    assert workload.source.endswith("workloads/my_model.py")
    assert workload.resolve("cpu").batch_size == 32
    code = ("import sys; from pathlib import Path; from perfgate.store.discovery import discover; "
            f"discover(project_dir=Path({str(tmp_path)!r})).get('my-model'); print('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_the_example_workload_is_the_readme_example() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    (example,) = [b for b in blocks if b.startswith("# workloads/my_model.py")]
    assert template_text("workloads/my_model.py.tmpl") == example


def test_every_template_is_scaffolded() -> None:
    templates = {p.relative_to(TEMPLATES).as_posix() for p in TEMPLATES.rglob("*") if p.is_file()}
    assert templates == {template for _, template in FILES} | {CODEOWNERS_TEMPLATE} | set(SHARDED.values())
    assert set(SHARDED) <= {relative for relative, _ in FILES}


def test_the_docs_list_every_file_init_writes() -> None:
    text = CI_DOC.read_text()
    for relative in EXPECTED:
        assert f"| `{relative}` |" in text, relative
    assert "perfgate-comment.yml" not in {relative for relative, _ in FILES}


# --- CODEOWNERS -----------------------------------------------------------------------------

def rules(text: str) -> dict[str, list[str]]:
    """The active rules of a CODEOWNERS file: path -> owners."""
    return {line.split()[0]: line.split()[1:] for line in text.splitlines()
            if line.strip() and not line.lstrip().startswith("#")}


def commented_rules(text: str) -> dict[str, list[str]]:
    """The rules a user gets by uncommenting the commented ones."""
    return rules("\n".join(line[2:] for line in text.splitlines() if line.startswith("# /")))


def test_without_owners_codeowners_has_no_active_rule(capsys, tmp_path: Path) -> None:
    code, out, _ = init(capsys, str(tmp_path))
    assert code == 0
    text = (tmp_path / ".github" / "CODEOWNERS").read_text()
    # GitHub reports an active rule whose owner does not exist as an error: none is written.
    assert rules(text) == {}
    first = text.splitlines()[0]
    assert first.startswith("#") and PLACEHOLDER_OWNER in first and "uncomment" in first
    assert commented_rules(text) == {path: [PLACEHOLDER_OWNER] for path in GATE_INPUTS}
    assert "/perfgate/" not in text  # only perfgate's own repository has that folder
    assert text == render_codeowners(tmp_path, ())
    assert f"Review .github/CODEOWNERS: replace {PLACEHOLDER_OWNER} with your owners and uncomment" in out


def test_owners_make_active_rules_for_the_gate_inputs(capsys, tmp_path: Path) -> None:
    code, out, err = init(capsys, str(tmp_path), "--owners", "@acme/perf-team", "--owners", "@alice, @Bob-2")
    assert code == 0, err
    text = (tmp_path / ".github" / "CODEOWNERS").read_text()
    owners = ["@acme/perf-team", "@alice", "@Bob-2"]
    assert rules(text) == {path: owners for path in GATE_INPUTS}
    assert PLACEHOLDER_OWNER not in text and "uncomment" not in text
    assert text.startswith(template_text(CODEOWNERS_TEMPLATE).split("\n/")[0])  # the template's comments
    assert re.search(r"^  created  \.github/CODEOWNERS$", out, re.M)
    assert "Review .github/CODEOWNERS, then turn on \"Require review from Code Owners\"" in out


def test_codeowners_covers_the_configured_store_and_workload_paths(capsys, tmp_path: Path) -> None:
    (tmp_path / "perf").mkdir()
    (tmp_path / "perf" / "extra.py").write_text("")
    (tmp_path / "pyproject.toml").write_text(
        '[tool.perfgate]\nbaselines = "./perf/baselines"\n'
        'workloads_path = ["perf/more", "perf/extra.py", "workloads", "../elsewhere", "/abs"]\n')
    code, _, err = init(capsys, str(tmp_path), "--owners", "@acme/perf")
    assert code == 0, err
    got = rules((tmp_path / ".github" / "CODEOWNERS").read_text())
    assert list(got) == ["/workloads/", "/perf/more/", "/perf/extra.py", "/perf/baselines/",
                         "/constraints.txt", "/pyproject.toml", "/.github/"]


@pytest.mark.parametrize("handles, expected", [
    (["@octocat"], ("@octocat",)),
    (["@acme/perf-team"], ("@acme/perf-team",)),
    (["@acme/perf_team", "@a-b"], ("@acme/perf_team", "@a-b")),
    (["@a,@b  @c"], ("@a", "@b", "@c")),
    (["@Alice", "@alice"], ("@Alice",)),
    ([f"@{'x' * 39}"], (f"@{'x' * 39}",)),
    (None, ()),
])
def test_owner_handles(handles, expected) -> None:
    assert parse_owners(handles) == expected


@pytest.mark.parametrize("value", [
    "acme", "@", "@-acme", "@acme-", "@ac--me", "@acme/", "@acme/team/sub", "@acme/-team", "a@example.com",
    "@ac.me", f"@{'x' * 40}", "@acme;rm", "", " , ", "@org/team\n/pyproject.toml @me",
])
def test_a_bad_owner_is_a_one_line_error_and_writes_nothing(capsys, tmp_path: Path, value: str) -> None:
    target = tmp_path / "repo"
    code, out, err = init(capsys, str(target), "--owners", "@fine", "--owners", value)
    assert code == 2 and out == ""
    assert err.startswith("perfgate: error: --owners: ") and err.count("\n") == 1, err
    assert not target.exists()


@pytest.mark.parametrize("location", [".github/CODEOWNERS", "CODEOWNERS", "docs/CODEOWNERS"])
def test_an_existing_codeowners_is_kept_and_the_missing_rules_printed(capsys, tmp_path: Path,
                                                                       location: str) -> None:
    existing = tmp_path / location
    existing.parent.mkdir(parents=True, exist_ok=True)
    existing.write_text("*  @acme/everyone\n/workloads  @acme/ml\n# /baselines/  @acme/old\n")
    before = existing.read_bytes()

    code, out, _ = init(capsys, str(tmp_path), "--owners", "@acme/perf")

    assert code == 0 and existing.read_bytes() == before
    assert [loc for loc in (".github/CODEOWNERS", "CODEOWNERS", "docs/CODEOWNERS")
            if (tmp_path / loc).exists()] == [location]  # no second file GitHub would ignore
    assert re.search(rf"^  kept     {re.escape(location)}\s+\(exists without rules for /baselines/, "
                     r"/constraints\.txt, /pyproject\.toml, /\.github/; not edited: add the lines below\)$",
                     out, re.M)
    printed = out.split(f"Add to {location}, below any broader rule:\n\n")[1].split("\n\n")[0]
    assert rules(printed) == {path: ["@acme/perf"] for path in GATE_INPUTS[1:]}
    assert f"Review {location}: add the lines printed above" in out

    # Once the rules are there, a second run prints nothing to add.
    with open(existing, "a") as handle:
        handle.write(printed)
    code, out, _ = init(capsys, str(tmp_path))
    assert code == 0 and "Add to" not in out
    assert re.search(rf"^  kept     {re.escape(location)}\s+\(exists and has rules for the gate's inputs\)$",
                     out, re.M)


def test_an_existing_codeowners_without_owners_prints_the_placeholder(capsys, tmp_path: Path) -> None:
    (tmp_path / "CODEOWNERS").write_text("")
    code, out, _ = init(capsys, str(tmp_path))
    assert code == 0 and (tmp_path / "CODEOWNERS").read_text() == ""
    assert not (tmp_path / ".github" / "CODEOWNERS").exists()
    assert (f"Add to CODEOWNERS, with your owners in place of {PLACEHOLDER_OWNER} "
            "(or run again with --owners @org/team), below any broader rule:") in out
    printed = out.split("below any broader rule:\n\n")[1].split("\n\n")[0]
    assert rules(printed) == {path: [PLACEHOLDER_OWNER] for path in GATE_INPUTS}


def test_a_codeowners_symlink_counts_as_existing(capsys, tmp_path: Path) -> None:
    (tmp_path / ".github").mkdir()
    (tmp_path / ".github" / "CODEOWNERS").symlink_to(tmp_path / "nowhere")
    code, out, _ = init(capsys, str(tmp_path), "--owners", "@acme/perf")
    assert code == 0 and not (tmp_path / "nowhere").exists()
    assert re.search(r"^  kept     \.github/CODEOWNERS\s+\(exists but could not be read", out, re.M)


def test_next_steps_require_the_perfgate_status_and_code_owner_review(capsys, tmp_path: Path) -> None:
    code, out, _ = init(capsys, str(tmp_path), "--owners", "@acme/perf")
    assert code == 0
    steps = out.split("\nNext steps:\n")[1]
    assert "Make the `perfgate` commit status a required check" in steps
    assert "\"perfgate judge\" workflow" in steps
    assert "\"Require review from Code Owners\"" in steps
    assert "ephemeral" in steps


# --- sharded over several runners -------------------------------------------------------------

def test_init_with_shards_writes_the_sharded_workflows(capsys, tmp_path: Path) -> None:
    code, out, _ = init(capsys, str(tmp_path), "--shards", "3")
    assert code == 0
    assert set(digest(tmp_path)) == EXPECTED
    for relative, template in FILES:
        expected = (render_sharded(template_text(SHARDED[relative]), 3) if relative in SHARDED
                    else template_text(template))
        assert (tmp_path / relative).read_text() == expected, relative
    assert '        shard: [1, 2, 3]\n' in (tmp_path / ".github/workflows/perfgate.yml").read_text()
    assert 'PERFGATE_SHARDS: "3"' in (tmp_path / ".github/workflows/perfgate-judge.yml").read_text()
    assert re.search(r"^  created  \.github/workflows/perfgate\.yml\s+\(sharded over 3 runners\)$", out, re.M)
    assert "The gate is sharded over 3 runners: register 3 alike ones" in out


def test_one_shard_is_the_single_runner_gate(capsys, tmp_path: Path) -> None:
    code, _, _ = init(capsys, str(tmp_path / "one"), "--shards", "1")
    assert code == 0
    code, _, _ = init(capsys, str(tmp_path / "default"))
    assert digest(tmp_path / "one") == digest(tmp_path / "default")


@pytest.mark.parametrize("value", ["0", "x", "2.5", "257", "-3"])
def test_a_bad_number_of_shards_is_a_one_line_error_and_writes_nothing(capsys, tmp_path: Path, value: str) -> None:
    code, out, err = init(capsys, str(tmp_path / "repo"), f"--shards={value}")
    assert code == 2 and out == "" and not (tmp_path / "repo").exists()
    assert err.startswith("perfgate: error: --shards ") and err.count("\n") == 1


def test_init_with_scripts_lists_them_in_the_settings_and_writes_no_example_workload(capsys, tmp_path: Path) -> None:
    target = tmp_path / "repo"
    (target / "train").mkdir(parents=True)
    (target / "train" / "loop.py").write_text("print('a training loop')\n")
    (target / "finetune.py").write_text("print('another')\n")
    code, out, _ = init(capsys, str(target), "--script", "train/loop.py --max-steps 80 --name 'a b'",
                        "--script", "finetune.py")
    assert code == 0
    assert not (target / "workloads").exists()
    settings = load_settings(target / "pyproject.toml")
    assert settings.workloads == ()
    assert [(s.path, s.args, s.job_name) for s in settings.scripts] == [
        ("train/loop.py", ("--max-steps", "80", "--name", "a b"), "script-loop"), ("finetune.py", (), "script-finetune")]
    assert "1. Try the scripts here: `perfgate run --device cpu` runs train/loop.py --max-steps 80 --name 'a b', " \
           "finetune.py as they are" in out
    # every other file as without scripts
    plain = tmp_path / "plain"
    init(capsys, str(plain))
    assert set(digest(target)) - {"train/loop.py", "finetune.py"} == set(digest(plain)) - {"workloads/my_model.py"}


@pytest.mark.parametrize(("value", "message"), [
    ("gone.py", "--script gone.py: no such file in "),
    ("../outside.py", "--script ../outside.py: give the path inside the repository, relative to it"),
    ("'train.py", "--script \"'train.py\": No closing quotation"),
    ("", "--script: give the script's path, then its arguments, in one quoted value"),
])
def test_a_bad_script_for_init_is_a_one_line_error_and_writes_nothing(capsys, tmp_path: Path, value: str,
                                                                      message: str) -> None:
    target = tmp_path / "repo"
    target.mkdir()
    (target / "train.py").write_text("")
    code, out, err = init(capsys, str(target), "--script", value)
    assert code == 2 and out == "" and sorted(p.name for p in target.iterdir()) == ["train.py"]
    assert err.startswith(f"perfgate: error: {message}") and err.count("\n") == 1, err


def test_two_scripts_of_one_name_are_refused_by_init(capsys, tmp_path: Path) -> None:
    target = tmp_path / "repo"
    (target / "a").mkdir(parents=True)
    (target / "a" / "train.py").write_text("")
    (target / "train.py").write_text("")
    code, _, err = init(capsys, str(target), "--script", "train.py", "--script", "a/train.py")
    assert code == 2 and "--script a/train.py: its results would be script-train, as train.py's are" in err
    assert not (target / "pyproject.toml").exists()
