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


def test_comparing_and_listing_do_not_load_torch() -> None:
    code = (
        "import sys, perfgate, perfgate.adapters.cli, perfgate.model.result, perfgate.analysis.summary, perfgate.store.discovery;"
        "perfgate.store.discovery.discover();"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
