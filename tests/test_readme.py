"""The examples in the README and docs/ are real code: they must load and run."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from perfgate.adapters.cli import main

README = Path(__file__).resolve().parents[1] / "README.md"
DOCS = README.parent / "docs"
pytest_plugins = ["pytester"]


def documents() -> list[Path]:
    """The README and every page under docs/, where the examples live."""
    return [README, *sorted(DOCS.glob("*.md"))]


def example(first_line: str = "# workloads/my_model.py") -> str:
    """The one python block, across the README and docs/, that starts with first_line."""
    matches = [b for doc in documents() for b in re.findall(r"```python\n(.*?)```", doc.read_text(), re.S)
               if b.startswith(first_line)]
    assert len(matches) == 1, f"{first_line!r}: {len(matches)} examples in README.md and docs/"
    return matches[0]


def test_the_workload_example_is_in_the_readme() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert [b for b in blocks if b.startswith("# workloads/my_model.py")] == [example()]


def test_every_docs_page_links_back_and_the_readme_links_every_page() -> None:
    readme = README.read_text()
    for page in sorted(DOCS.glob("*.md")):
        lines = page.read_text().splitlines()
        assert lines[0].startswith("# ") and "(../README.md)" in lines[2], page.name
        assert f"(docs/{page.name})" in readme or f"(docs/{page.name}#" in readme, page.name


def anchors(path: Path) -> set[str]:
    """GitHub's anchors for the headings of a markdown file (outside code fences)."""
    found: set[str] = set()
    fenced = False
    for line in path.read_text().splitlines():
        fenced = fenced != line.startswith("```")
        heading = re.match(r"#{1,6} (.*)", line)
        if heading and not fenced:
            found.add(re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-"))
    return found


def test_the_links_between_the_readme_and_docs_resolve() -> None:
    for doc in documents():
        prose = re.sub(r"```.*?```", "", doc.read_text(), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", prose):
            if target.startswith(("http://", "https://")):
                continue
            path, _, anchor = target.partition("#")
            linked = (doc.parent / path).resolve() if path else doc
            assert linked.exists(), f"{doc.name}: {target}"
            if anchor and linked.suffix == ".md":
                assert anchor in anchors(linked), f"{doc.name}: {target}"


def test_quick_start_names_the_ci_command() -> None:
    ci = (README.parent / ".ci" / "run").read_text()
    command = ci.strip().splitlines()[-1]
    assert command in README.read_text()


@pytest.mark.slow
def test_the_workload_example_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "workloads").mkdir()
    (tmp_path / "workloads" / "my_model.py").write_text(example())
    out = tmp_path / "out"
    code = main(["run", "my-model", "--workloads-path", str(tmp_path / "workloads"), "--device", "cpu",
                 "--repeats", "1", "--set", "steps=3", "warmup_steps=1", "width=4", "--out", str(out), "-q"])
    assert code == 0, capsys.readouterr().err
    data = json.loads((out / "my-model.json").read_text())
    assert data["params"]["batch_size"] == 32 and data["params"]["width"] == 4
    assert data["params"]["warmup_steps"] == 1 and "input_size" not in data["params"]  # unset: not recorded
    assert data["data"]["kind"] == "undeclared" and data["data"]["num_samples"] == 1024


@pytest.mark.slow
def test_the_pytest_example_runs(pytester: pytest.Pytester) -> None:
    # The `pytest --perfgate` example (docs/pytest.md), as a user's test file: with no baseline yet,
    # its gated workload is measured and the marked test is skipped with the command to record one.
    # The two repeats fork from one template that has imported torch (one import, not two).
    pytester.makepyfile(test_perf=example("# tests/test_perf.py"))
    result = pytester.runpytest_subprocess("-rs", "--perfgate", "--perfgate-device", "cpu", "--perfgate-repeats", "2",
                                           "--perfgate-start", "fork", "--perfgate-workloads", "mlp",
                                           "--perfgate-baselines", "baselines", "--perfgate-cache-dir", "cache",
                                           "-p", "no:cacheprovider")
    result.assert_outcomes(skipped=2)  # the gate item perfgate::mlp and the marked test
    result.stdout.fnmatch_lines(["*NO_BASELINE*", "*perfgate rebaseline mlp*"])
