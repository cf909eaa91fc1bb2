"""The GPU clock lock: declared by the runner in PERFGATE_GPU_CLOCKS, recorded in the
environment as ``gpu_clocks``, and a comparability field on the CUDA device."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pytest
import torch
from factories import ENV, make_result

from perfgate.analysis.compare import compare
from perfgate.analysis.decide import GateConfig
from perfgate.analysis.outcome import Entry
from perfgate.measure import fingerprint
from perfgate.measure.fingerprint import GPU_CLOCKS_VARIABLE, collect, declared_gpu_clocks
from perfgate.model.result import result_from_dict
from perfgate.model.verdict import Verdict
from perfgate.store.baselines import find_baseline, save_baseline, updated_baseline

T4 = dataclasses.replace(ENV, device="cuda", gpu_name="Tesla T4", cuda="13.0", cudnn="91000", gpu_driver="580.1")


@pytest.mark.parametrize(("value", "recorded"), [
    ("locked:1245", "locked 1245 MHz"),
    ("locked:100", "locked 100 MHz"),
    ("locked:5000", "locked 5000 MHz"),
    ("unlocked", "unlocked"),
])
def test_a_valid_declaration_is_recorded(value: str, recorded: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        assert declared_gpu_clocks({GPU_CLOCKS_VARIABLE: value}) == recorded
    assert not caplog.records


def test_no_declaration_is_unknown_without_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        assert declared_gpu_clocks({}) == "unknown"
    assert not caplog.records


@pytest.mark.parametrize("value", [
    "", "locked", "locked:", "locked:99", "locked:5001", "locked:01245", "locked:+1245", "locked:1245.0",
    "locked: 1245", "locked:1245 ", " unlocked", "Locked:1245", "LOCKED:1245", "unlocked\n", "locked:1245,1245",
    "locked:١٢٤٥", "true", "not locked: nvidia-smi -lgc was refused", "locked:" + "9" * 5000,
])
def test_an_invalid_declaration_is_unknown_with_a_warning(value: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger=fingerprint.__name__):
        assert declared_gpu_clocks({GPU_CLOCKS_VARIABLE: value}) == "unknown"
    (record,) = caplog.records
    message = record.getMessage()
    assert GPU_CLOCKS_VARIABLE in message and "unknown" in message
    assert repr(value[:40])[1:-1] in message  # the bad value is named, truncated
    assert len(message) < 300


def test_the_declaration_is_read_from_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(GPU_CLOCKS_VARIABLE, "locked:1245")
    assert declared_gpu_clocks() == "locked 1245 MHz"
    monkeypatch.delenv(GPU_CLOCKS_VARIABLE)
    assert declared_gpu_clocks() == "unknown"


@pytest.fixture
def fake_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """A CUDA device as torch and NVML would describe a T4, without one."""
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index: "Tesla T4")
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.backends.cudnn, "version", lambda: 91000)
    monkeypatch.setattr(fingerprint, "_gpu_driver", lambda: "580.1")


@pytest.mark.parametrize(("value", "recorded"), [
    ("locked:1245", "locked 1245 MHz"), ("unlocked", "unlocked"), ("locked:1245;rm", "unknown"), (None, "unknown"),
])
def test_collect_on_cuda_records_the_declared_clocks(fake_cuda: None, monkeypatch: pytest.MonkeyPatch,
                                                     value: str | None, recorded: str) -> None:
    if value is None:
        monkeypatch.delenv(GPU_CLOCKS_VARIABLE, raising=False)
    else:
        monkeypatch.setenv(GPU_CLOCKS_VARIABLE, value)
    env = collect("cuda")
    assert env.gpu_name == "Tesla T4" and env.gpu_driver == "580.1"
    assert env.gpu_clocks == recorded


def test_collect_on_cpu_records_no_clocks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(GPU_CLOCKS_VARIABLE, "locked:1245")
    env = collect("cpu")
    assert env.gpu_clocks is None
    assert "gpu_clocks" not in env.to_dict() and "gpu_clocks" not in env.comparable_fields()


def test_a_locked_baseline_and_an_unlocked_run_are_incomparable(tmp_path: Path) -> None:
    root = tmp_path / "baselines"
    locked, unlocked = (dataclasses.replace(T4, gpu_clocks=c) for c in ("locked 1245 MHz", "unlocked"))
    baseline = None
    for day in (1, 2, 3):
        baseline = updated_baseline(baseline, make_result(env=locked, seed=day), f"day {day}", append=True)
    assert baseline is not None
    save_baseline(baseline, root)
    result = make_result(env=unlocked, seed=9)
    lookup = find_baseline(root, unlocked.key(), "tiny")
    assert lookup.baseline is None
    (c,) = compare([Entry("tiny", result, lookup)], GateConfig()).comparisons
    assert c.verdict is Verdict.INCOMPARABLE
    assert dict(c.differences) == {"environment gpu_clocks": ("locked 1245 MHz", "unlocked")}
    assert "gpu_clocks" in c.reason and "'locked 1245 MHz'" in c.reason and "'unlocked'" in c.reason


def test_an_old_cuda_result_file_loads_with_unknown_clocks() -> None:
    data = make_result(env=T4).to_dict()
    data["environment"].pop("gpu_clocks", None)
    result = result_from_dict(data)
    assert result.environment.gpu_clocks is None
    assert result.environment.comparable_fields()["gpu_clocks"] == "unknown"
    assert result.environment.key() == data["environment"]["key"]
    # compares with a run that did not know its clocks either, not with a locked one
    assert result.environment.differences(dataclasses.replace(T4, gpu_clocks="unknown")) == {}
    assert result.environment.differences(dataclasses.replace(T4, gpu_clocks="locked 1245 MHz")) == {
        "gpu_clocks": ("unknown", "locked 1245 MHz")}
