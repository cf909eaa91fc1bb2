"""The README's workload example is real code: it must load and run."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from perfgate.adapters.cli import main

README = Path(__file__).resolve().parents[1] / "README.md"
pytest_plugins = ["pytester"]


def example(first_line: str = "# workloads/my_model.py") -> str:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    matches = [b for b in blocks if b.startswith(first_line)]
    assert len(matches) == 1
    return matches[0]


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
    assert data["data"]["hash_method"] == "generator-seed"


@pytest.mark.slow
def test_the_pytest_example_runs(pytester: pytest.Pytester) -> None:
    # The README's `pytest --perfgate` example, as a user's test file: with no baseline yet,
    # its gated workload is measured and the marked test is skipped with the command to record one.
    pytester.makepyfile(test_perf=example("# tests/test_perf.py"))
    result = pytester.runpytest_subprocess("-rs", "--perfgate", "--perfgate-device", "cpu", "--perfgate-repeats", "2",
                                           "--perfgate-workloads", "mlp", "--perfgate-baselines", "baselines",
                                           "--perfgate-cache-dir", "cache", "-p", "no:cacheprovider")
    result.assert_outcomes(skipped=2)  # the gate item perfgate::mlp and the marked test
    result.stdout.fnmatch_lines(["*NO_BASELINE*", "*perfgate rebaseline mlp*"])
