"""One-way layers: only the measuring code imports torch."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "perfgate"
TORCH = {"torch", "torchvision"}


def imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_only_the_measure_package_imports_torch() -> None:
    offenders = [
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if "measure" not in p.relative_to(PACKAGE).parts and imported_roots(p) & TORCH
    ]
    assert offenders == []
    # and the check itself sees torch where it is
    assert "torch" in imported_roots(PACKAGE / "measure" / "loop.py")


def test_each_layer_imports_only_from_the_layers_below_it() -> None:
    # pyproject.toml's [tool.importlinter] contracts: model, store, analysis, measure, tune,
    # report, gate, adapters, each importing only from those before it; torch only in measure.
    done = subprocess.run([str(Path(sys.executable).with_name("lint-imports")), "--no-cache",
                           "--config", str(PACKAGE.parent / "pyproject.toml")],
                          capture_output=True, text=True, cwd=PACKAGE.parent)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "2 kept, 0 broken" in done.stdout


def test_the_layer_contract_sees_an_upward_import(tmp_path: Path) -> None:
    # The check can fail: a copy of the package in which the model imports the gate breaks it.
    import shutil

    copy = tmp_path / "perfgate"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(PACKAGE.parent / "pyproject.toml", tmp_path / "pyproject.toml")
    with (copy / "model" / "errors.py").open("a") as handle:
        handle.write("\nimport perfgate.gate.config  # noqa: E402,F401\n")
    env = {"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([str(Path(sys.executable).with_name("lint-imports")), "--no-cache",
                           "--config", str(tmp_path / "pyproject.toml")],
                          capture_output=True, text=True, cwd=tmp_path, env=env)
    assert done.returncode != 0
    assert "perfgate.model.errors -> perfgate.gate.config" in done.stdout


def test_comparing_and_listing_do_not_load_torch() -> None:
    code = (
        "import sys, perfgate, perfgate.adapters.cli, perfgate.model.result, perfgate.analysis.summary, perfgate.store.discovery;"
        "perfgate.store.discovery.discover();"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
