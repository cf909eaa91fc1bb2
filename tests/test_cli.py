"""The command line end to end: successful runs and every bad input of the run issue."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import cuda_available

from perfgate.adapters.cli import main


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("perfgate: error:")]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.slow
def test_run_writes_a_result_and_prints_the_table(capsys, tiny_path: Path, tmp_path: Path) -> None:
    out_dir = tmp_path / "out"
    code, out, err = run_cli(capsys, "run", "tiny", "--workloads-path", str(tiny_path), "--device", "cpu",
                             "--repeats", "2", "--steps", "6", "--set", "width=12", "--out", str(out_dir),
                             "--cache-dir", str(tmp_path / "cache"))
    assert code == 0, err
    assert "[tiny] repeat 2/2 done" in err
    for row in ("data_wait", "h2d", "forward", "backward", "optimizer", "residual", "step", "throughput",
                "peak memory", "overrides steps=6 width=12"):
        assert row in out
    data = json.loads((out_dir / "tiny.json").read_text())
    assert data["overrides"] == {"steps": 6, "width": 12}
    assert data["params"]["width"] == 12 and data["params"]["steps"] == 6
    assert len(data["repeats"]) == 2 and len(data["repeats"][1]["phases_ms"]["backward"]) == 6
    assert data["environment"]["key"].startswith("cpu-")


def test_list_shows_the_device_profile(capsys) -> None:
    code, out, _ = run_cli(capsys, "list", "resnet18-cifar10", "--device", "cpu")
    assert code == 0
    assert "resnet18-cifar10  v1  (cpu profile)" in out
    assert "batch_size          16" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "resnet19"], "unknown workload 'resnet19'; known workloads: resnet18-cifar10, resnet18-cifar10-compiled, resnet18-cifar10-ddp, resnet18-imagenette"),
        (["run", "resnet18-cifar10", "--set", "batch_size=lots"], "bad --set batch_size=lots for workload resnet18-cifar10: batch_size must be an integer"),
        (["run", "resnet18-cifar10", "--set", "optimiser=adam"], "unknown parameter 'optimiser' for workload resnet18-cifar10; allowed: "),
        (["run", "resnet18-cifar10", "--set", "precision=fp8"], "precision must be one of fp32, bf16, fp16"),
        (["run", "resnet18-cifar10", "--data-root", "/nonexistent/data"], "--data-root /nonexistent/data: not a directory"),
        (["run", "resnet18-cifar10", "--repeats", "0"], "--repeats must be at least 1"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, argv: list[str], message: str) -> None:
    code, _, err = run_cli(capsys, *argv, "--device", "cpu")
    assert code == 2
    assert message in one_error_line(err)


@pytest.mark.skipif(cuda_available(), reason="CUDA is available here")
def test_cuda_without_cuda(capsys) -> None:
    code, _, err = run_cli(capsys, "run", "resnet18-cifar10", "--device", "cuda")
    assert code == 2
    assert "--device cuda: no usable CUDA device" in one_error_line(err)


@pytest.mark.slow
def test_a_data_root_that_is_not_the_dataset(capsys, tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    code, _, err = run_cli(capsys, "run", "resnet18-cifar10", "--device", "cpu", "--repeats", "1",
                           "--data-root", str(tmp_path / "data"), "--out", str(tmp_path / "out"))
    assert code == 2
    line = one_error_line(err)
    assert "resnet18-cifar10" in line and "cifar-10-batches-py" in line
    assert not (tmp_path / "out" / "resnet18-cifar10.json").exists()


@pytest.mark.slow
def test_a_workload_that_raises(capsys, tiny_path: Path, tmp_path: Path) -> None:
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    (out_dir / "tiny.json").write_text("{}")  # stale result of an earlier run
    argv = ["run", "tiny", "--workloads-path", str(tiny_path), "--device", "cpu", "--repeats", "2",
            "--set", "fail_build=true", "--out", str(out_dir)]
    code, _, err = run_cli(capsys, *argv)
    assert code == 2
    assert "tiny: building the workload failed: RuntimeError: the builder blew up on purpose" in one_error_line(err)
    assert "Traceback" not in err
    assert "[tiny] repeat 2/2" not in err  # a failed workload is not repeated
    assert not (out_dir / "tiny.json").exists()  # nothing that looks like this run's result
    code, _, err = run_cli(capsys, *argv, "--verbose")
    assert code == 2 and "Traceback" in err


@pytest.mark.slow
def test_a_non_finite_loss_fails_the_repeat(capsys, tiny_path: Path, tmp_path: Path) -> None:
    # two warmup steps, so the fifth call of the loss function is measured step 2
    code, _, err = run_cli(capsys, "run", "tiny", "--workloads-path", str(tiny_path), "--device", "cpu",
                           "--repeats", "1", "--set", "nan_at_call=5", "--out", str(tmp_path / "out"))
    assert code == 2
    assert "tiny: loss is non-finite (nan) at measured step 2" in one_error_line(err)
    assert not (tmp_path / "out" / "tiny.json").exists()


@pytest.mark.slow
def test_a_non_finite_loss_in_warmup(capsys, tiny_path: Path, tmp_path: Path) -> None:
    code, _, err = run_cli(capsys, "run", "tiny", "--workloads-path", str(tiny_path), "--device", "cpu",
                           "--repeats", "1", "--set", "nan_at_call=1", "--out", str(tmp_path / "out"))
    assert code == 2
    assert "tiny: loss is non-finite (nan) at warmup step 0" in one_error_line(err)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["tune-loader", "resnet18-cifar10", "resnet18-imagenette"], "tune-loader takes exactly one workload"),
        (["tune-loader", "resnet18-cifar10", "--budget", "0"], "--budget must be a positive number of minutes"),
        (["tune-loader", "resnet18-cifar10", "--repeats", "1"], "tune-loader needs at least"),
    ],
)
def test_tune_loader_bad_input(capsys, argv: list[str], message: str) -> None:
    code, _, err = run_cli(capsys, *argv, "--device", "cpu")
    assert code == 2
    assert message in one_error_line(err)
