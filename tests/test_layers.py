"""One-way layers: only the measuring code imports torch."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

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


def _imports_of(path: Path, module: str, modules: set[str]) -> set[str]:
    """Every perfgate module ``path`` imports, wherever the import stands (in a function, or
    under ``if TYPE_CHECKING``)."""
    is_package = path.name == "__init__.py"
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".")[: len(module.split(".")) - (node.level - (1 if is_package else 0))]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            targets = [base, *(f"{base}.{a.name}" for a in node.names)]
        else:
            continue
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != module:
                out.add(target)
    return out


def import_cycles() -> list[list[str]]:
    """The strongly connected parts (more than one module) of perfgate's import graph."""
    paths = {}
    for p in PACKAGE.rglob("*.py"):
        parts = p.relative_to(PACKAGE.parent).with_suffix("").parts
        paths[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    graph = {m: _imports_of(p, m, set(paths)) for m, p in paths.items()}
    graph = {m: {t for t in targets if not m.startswith(f"{t}.")} for m, targets in graph.items()}  # a module's own packages
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                cycles.append(sorted(part))

    for v in graph:
        if v not in index:
            visit(v)
    return cycles


def test_no_module_imports_one_that_imports_it_back() -> None:
    assert import_cycles() == []


def test_the_cycle_check_sees_a_cycle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    copy = tmp_path / "perfgate"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    with (copy / "model" / "errors.py").open("a") as handle:
        handle.write("\n\ndef _later() -> None:\n    from perfgate.model import workload  # noqa: F401\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", copy)
    assert import_cycles() == [["perfgate.model.errors", "perfgate.model.workload"]]


def test_no_product_module_patches_with_unittest_mock() -> None:
    # a seam is a parameter or an injected object, never a patch applied at run time
    offenders = [str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if "unittest" in imported_roots(p)]
    assert offenders == []
