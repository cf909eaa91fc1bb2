"""scripts/gpu-check.sh and its assertions (scripts/gpu_check.py), as far as a CPU can check them:
the shell parses, the dry run parses every perfgate command line the check runs, every check
passes good readings and fails bad ones, and the check's training script, run on the CPU in
script mode, meets every assertion but the CUDA-only one."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


def gpu_check() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_check_passes_good_readings_and_fails_bad_ones(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert gpu_check().self_test(tmp_path) == 0, capsys.readouterr().out


def test_the_checks_read_the_fields_the_results_have() -> None:
    """The telemetry's slowdown field, the CUDA window's ratio and the device-timed series:
    the names the measuring code writes."""
    import inspect

    from perfgate.measure import script_run, telemetry_gpu

    source = inspect.getsource(gpu_check())
    assert '"slowdown_reasons"' in inspect.getsource(telemetry_gpu) and "slowdown_reasons" in source
    assert "throttle_reasons" not in source
    assert '"device_steps_over_window"' in inspect.getsource(script_run) and "device_steps_over_window" in source


@pytest.mark.slow
def test_the_shell_parses_and_its_dry_run_passes(tmp_path: Path) -> None:
    assert subprocess.run(["bash", "-n", str(ROOT / "scripts" / "gpu-check.sh")]).returncode == 0
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "gpu-check.sh"), "--dry-run", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PERFGATE_PYTHON": sys.executable})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "PASS commands: 7 command lines" in proc.stdout and "PASS self-test" in proc.stdout
    steps = [line.split(" (at most")[0].removeprefix("gpu-check: ") for line in proc.stderr.splitlines()
             if " (at most " in line]
    assert steps == ["fork-probe", "gate", "windows", "stall", "script-np", "script-p", "gpu-tests"]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["non-persistent", "persistent"])
def test_the_checks_training_script_meets_every_assertion_on_the_cpu_but_cuda_timing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    from perfgate.measure.script_job import script_job, script_of
    from perfgate.measure.script_run import run_script_repeat

    check = gpu_check()
    report = tmp_path / "report"
    report.mkdir()
    (tmp_path / "gpu_check_train.py").write_text(check.SCRIPT)
    monkeypatch.setenv("GPU_CHECK_REPORT", str(report))
    monkeypatch.setenv("GPU_CHECK_DEVICE", "cpu")
    args = ["--persistent"] if kind == "persistent" else []
    job = script_job(script_of(str(tmp_path / "gpu_check_train.py"), args, tmp_path), "cpu",
                     {"warmup_steps": "3", "steps": "12", "num_threads": "1"})
    repeat, _ = run_script_repeat(job.script, job.params, "cpu", name=job.workload.name, index=0, telemetry=False)
    failures = check.check_script([("r.json", repeat.to_dict())], report, kind == "persistent")
    assert failures == ["r.json repeat 0: timed by perf_counter, not CUDA events"]
