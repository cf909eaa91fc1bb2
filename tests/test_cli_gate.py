"""rebaseline / compare from the command line, on result files the tests write (no torch)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from factories import make_result

from perfgate.adapters.cli import main
from perfgate.store.results import save_result


@pytest.fixture(autouse=True)
def no_ci_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("GITHUB_RUN_ID", "GITHUB_REPOSITORY"):
        monkeypatch.delenv(var, raising=False)


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def results_dir(tmp_path: Path, name: str, **kw) -> Path:
    d = tmp_path / name
    d.mkdir()
    save_result(make_result("tiny", **kw), d / "tiny.json")
    return d


def digest(root: Path) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*")) if p.is_file()}


def no_config(tmp_path: Path) -> list[str]:
    return ["--config", str(tmp_path / "absent-pyproject.toml")]


def test_rebaseline_then_compare(capsys, tmp_path: Path) -> None:
    store = tmp_path / "baselines"
    base = results_dir(tmp_path, "base", seed=1)
    code, out, err = cli(capsys, "rebaseline", "--from-results", str(base), "--reason", "first recording",
                         "--baselines", str(store), *no_config(tmp_path))
    assert code == 0, err
    assert "created" in out
    (path,) = store.glob("*/tiny.json")
    text = path.read_text()
    assert text.endswith("}\n") and '"reason": "first recording"' in text
    code, out, _ = cli(capsys, "rebaseline", "--from-results", str(results_dir(tmp_path, "day2", seed=2)),
                       "--reason", "second day", "--append", "--baselines", str(store), *no_config(tmp_path))
    assert code == 0 and "appended to" in out
    assert len(json.loads(path.read_text())["recordings"]) == 2

    before = digest(store)
    md, js = tmp_path / "report.md", tmp_path / "report.json"
    slow = results_dir(tmp_path, "slow", seed=3, phase_scale={"forward": 1.4})
    code, out, _ = cli(capsys, "compare", "--results", str(slow), "--baselines", str(store),
                       "--markdown", str(md), "--json", str(js), *no_config(tmp_path))
    assert code == 1
    assert "tiny: REGRESSION" in out
    assert "⚠️ slower" in md.read_text()
    assert json.loads(js.read_text())["exit_code"] == 1
    same = results_dir(tmp_path, "same", seed=4)
    code, out, _ = cli(capsys, "compare", "--results", str(same), "--baselines", str(store), *no_config(tmp_path))
    assert code in (0, 3) and "REGRESSION" not in out
    assert digest(store) == before  # compare never modifies baselines


def test_thresholds_come_from_pyproject(capsys, tmp_path: Path) -> None:
    store = tmp_path / "baselines"
    cli(capsys, "rebaseline", "--from-results", str(results_dir(tmp_path, "base", seed=1)), "--reason", "r",
        "--baselines", str(store), *no_config(tmp_path))
    slow = results_dir(tmp_path, "slow", seed=3, scale=1.10)
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[tool.perfgate]\nbaselines = "%s"\n\n[tool.perfgate.workload.tiny]\ndelta = 0.25\n' % store)
    code, out, _ = cli(capsys, "compare", "--results", str(slow), "--config", str(pyproject))
    assert code != 1, out  # a 10% slowdown is below this workload's 25% threshold
    code, out, _ = cli(capsys, "compare", "--results", str(slow), "--config", str(pyproject), "--delta", "0.03")
    assert code == 1  # the command line wins


def test_no_baseline_is_loud_and_optionally_fatal(capsys, tmp_path: Path) -> None:
    current = results_dir(tmp_path, "cur")
    md = tmp_path / "r.md"
    code, _, _ = cli(capsys, "compare", "--results", str(current), "--baselines", str(tmp_path / "none"),
                     "--markdown", str(md), *no_config(tmp_path))
    assert code == 0
    assert "[!WARNING]" in md.read_text() and "perfgate rebaseline tiny" in md.read_text()
    code, _, _ = cli(capsys, "compare", "--results", str(current), "--baselines", str(tmp_path / "none"),
                     "--fail-on-missing-baseline", *no_config(tmp_path))
    assert code == 2


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "result file is empty"),
        ('{"kind": "perfgate.run-result", "schema_version": 1, "repea', "not valid JSON"),
        ('{"kind": "perfgate.run-result", "schema_version": 7}', "newer than this perfgate understands"),
        ("[]", "neither a perfgate result"),
    ],
)
def test_bad_result_files(capsys, tmp_path: Path, content: str, message: str) -> None:
    d = tmp_path / "results"
    d.mkdir()
    (d / "tiny.json").write_text(content)
    code, _, err = cli(capsys, "compare", "--results", str(d), *no_config(tmp_path))
    assert code == 2
    assert message in err and str(d / "tiny.json") in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda text: "", "baseline file is empty"),
        (lambda text: text[: len(text) // 2], "not valid JSON"),
        (lambda text: text.replace('"schema_version": 3', '"schema_version": 4'), "upgrade perfgate"),
        (lambda text: text.replace('"step": ', '"step": NaN, "x": ', 1), "non-finite"),
        (lambda text: text.replace('"kind": "perfgate.baseline"', '"kind": "perfgate.run-result"'), "not a perfgate.baseline file"),
    ],
)
def test_bad_baseline_files(capsys, tmp_path: Path, mutate, message: str) -> None:
    store = tmp_path / "baselines"
    cli(capsys, "rebaseline", "--from-results", str(results_dir(tmp_path, "base")), "--reason", "r",
        "--baselines", str(store), *no_config(tmp_path))
    (path,) = store.glob("*/tiny.json")
    path.write_text(mutate(path.read_text()))
    before = path.read_bytes()
    code, _, err = cli(capsys, "compare", "--results", str(results_dir(tmp_path, "cur")), "--baselines", str(store),
                       *no_config(tmp_path))
    assert code == 2
    assert message in err and str(path) in err
    assert path.read_bytes() == before


def test_rebaseline_needs_a_reason_and_two_repeats(capsys, tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as info:
        main(["rebaseline", "--from-results", str(results_dir(tmp_path, "a"))])
    assert info.value.code == 2
    code, _, err = cli(capsys, "rebaseline", "--from-results", str(results_dir(tmp_path, "b")), "--reason", "  ",
                       *no_config(tmp_path))
    assert code == 2 and "--reason must say why" in err
    code, _, err = cli(capsys, "rebaseline", "--from-results", str(results_dir(tmp_path, "c", repeats=1)),
                       "--reason", "r", "--baselines", str(tmp_path / "s"), *no_config(tmp_path))
    assert code == 2 and "needs at least 2 repeats" in err
    assert not (tmp_path / "s").exists()


def test_missing_results_directory(capsys, tmp_path: Path) -> None:
    code, _, err = cli(capsys, "compare", "--results", str(tmp_path / "nope"), *no_config(tmp_path))
    assert code == 2 and "results directory not found" in err


def test_pytest_benchmark_files_through_the_cli(capsys, tmp_path: Path) -> None:
    fixtures = Path(__file__).parent / "fixtures" / "pytest_benchmark"
    base = tmp_path / "base"
    base.mkdir()
    for i in range(1, 6):
        (base / f"run-{i}.json").write_bytes((fixtures / f"base-{i}-raw.json").read_bytes())
    store = tmp_path / "baselines"
    code, out, err = cli(capsys, "rebaseline", "--from-results", str(base), "--reason", "micro-benchmarks",
                         "--baselines", str(store), *no_config(tmp_path))
    assert code == 0, err
    assert "5 repeats" in out
    slower = [arg for i in range(1, 6) for arg in ("--benchmark-json", str(fixtures / f"slower-{i}-raw.json"))]
    md = tmp_path / "r.md"
    code, out, _ = cli(capsys, "compare", *slower, "--baselines", str(store), "--markdown", str(md),
                       *no_config(tmp_path))
    assert code == 1
    assert "REGRESSION" in out and "test_sort" in out
    assert "| forward" not in md.read_text()  # a micro-benchmark has a step and no phases


def test_html_report_from_results_on_disk(capsys, tmp_path: Path) -> None:
    store = tmp_path / "baselines"
    cli(capsys, "rebaseline", "--from-results", str(results_dir(tmp_path, "base", seed=1)), "--reason", "r",
        "--baselines", str(store), *no_config(tmp_path))
    slow = results_dir(tmp_path, "slow", seed=2, phase_scale={"forward": 1.4})
    code, _, err = cli(capsys, "report", "--results", str(slow), "--baselines", str(store), "--html",
                       str(tmp_path / "html"), *no_config(tmp_path))
    assert code == 0, err  # the page is written whatever the verdict; the gate decides, not the report
    page = (tmp_path / "html" / "index.html").read_text()
    assert "tiny" in page and "REGRESSION" in page and "data:image/png;base64," in page
    code, _, err = cli(capsys, "report", "--results", str(slow), *no_config(tmp_path))
    assert code == 2 and "report needs --html DIR" in err
