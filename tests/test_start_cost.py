"""What a repeat's process imports: torch and the measuring code, never the judging side's
scipy or pandas (scipy.stats alone was 0.4-0.6 s of every repeat's and every template's
start on these CPUs, pulled in by two constant strings of the diagnosis).

In a fresh interpreter, so that what the test process imported does not count.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

PARENT_ONLY = ("runner", "paired")
"""The measuring modules only the gate's own process runs (it judges, so it imports scipy anyway)."""


def test_no_module_a_repeat_runs_imports_scipy_or_pandas() -> None:
    code = f"""
import importlib, json, pkgutil, sys
import perfgate.measure as measure
from perfgate.measure.template import _PRELOAD
names = list(_PRELOAD) + ["perfgate.measure." + i.name for i in pkgutil.walk_packages(measure.__path__)
                                  if i.name.split(".")[0] not in {PARENT_ONLY!r}]
for name in names:
    importlib.import_module(name)
print(json.dumps({{"imported": len(names), "heavy": [m for m in ("scipy", "pandas", "jinja2") if m in sys.modules]}}))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["imported"] > 20
    assert out["heavy"] == []
