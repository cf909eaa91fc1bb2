"""`perfgate init`: scaffolds a repository, never overwrites a file."""

from __future__ import annotations

import argparse
import hashlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from perfgate.config import load_settings
from perfgate.discovery import discover
from perfgate.scaffold import FILES, TEMPLATES, add_parser, scaffold, template_text

README = Path(__file__).resolve().parents[1] / "README.md"
EXPECTED = {
    "workloads/my_model.py", "baselines/README.md", "pyproject.toml", ".github/workflows/ci.yml",
    ".github/workflows/perfgate.yml", ".github/workflows/perfgate-comment.yml",
    ".github/workflows/rebaseline.yml", ".github/actionlint.yaml",
}


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
    assert "kept" not in out and "Add to pyproject.toml" not in out
    assert "There is no constraints.txt yet" in out
    # The settings it wrote are valid, and name the example workload it wrote.
    settings = load_settings(target / "pyproject.toml")
    assert settings.workloads == ("my-model",) and settings.baselines == target / "baselines"
    assert list((target / "baselines").iterdir()) == [target / "baselines" / "README.md"]


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
    code = ("import sys; from pathlib import Path; from perfgate.discovery import discover; "
            f"discover(project_dir=Path({str(tmp_path)!r})).get('my-model'); print('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_the_example_workload_is_the_readme_example() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    (example,) = [b for b in blocks if b.startswith("# workloads/my_model.py")]
    assert template_text("workloads/my_model.py.tmpl") == example


def test_every_template_is_scaffolded() -> None:
    templates = {p.relative_to(TEMPLATES).as_posix() for p in TEMPLATES.rglob("*") if p.is_file()}
    assert templates == {template for _, template in FILES}
