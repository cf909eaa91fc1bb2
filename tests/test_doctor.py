"""perfgate doctor: the checks fed fakes of NVML, torch and the host, the real card on this
machine, the micro-run's structure on the CPU, and scripts/gpu-check.sh."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest
from conftest import cuda_available

from perfgate.adapters.doctor import render
from perfgate.gate.doctor.card import FAIL, OK, SKIPPED, UNKNOWN, WARN, Card, Check, guarded
from perfgate.gate.doctor.cpu_disk import check_cache_disk, check_cpu_count, check_cpu_load, check_governor
from perfgate.gate.doctor.diagnosis import cuda_unavailable_reason, diagnose, micro_run_in_child
from perfgate.gate.doctor.gpu import (
    Gpu,
    Host,
    check_clock_lock,
    check_clocks,
    check_ecc,
    check_micro_run,
    check_pcie,
    check_persistence,
    check_throttle,
    cuda_version,
    parse_cuda,
)
from perfgate.measure.probe import Backend, MicroRun, NvmlSession, TorchFacts, micro_run, open_nvml
from perfgate.model.errors import DeviceError

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu-check.sh"
NOT_SUPPORTED = pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)


class FakeNvml:
    """The functions of pynvml the doctor calls, answering from a table. A value that is an
    exception is raised; a name missing from the table is missing from the module."""

    NVML_CLOCK_GRAPHICS = pynvml.NVML_CLOCK_GRAPHICS
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    NVML_VOLATILE_ECC = pynvml.NVML_VOLATILE_ECC

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.shutdowns = 0

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name not in self.answers:
            raise AttributeError(name)

        def call(*args: Any) -> Any:
            self.calls.append((name, args))
            value = self.answers[name]
            if isinstance(value, BaseException):
                raise value
            return value

        return call

    def nvmlShutdown(self) -> None:  # noqa: N802 - pynvml's name
        self.shutdowns += 1


def t4_answers(**changes: Any) -> dict[str, Any]:
    """A healthy Tesla T4: driver 535 (CUDA 12.2), persistence on, locked at 1245 MHz and
    idle, nothing else on it, ECC on without errors, PCIe gen 3 x16."""
    answers: dict[str, Any] = {
        "nvmlSystemGetCudaDriverVersion_v2": 12020,
        "nvmlSystemGetDriverVersion": "535.104.05",
        "nvmlDeviceGetName": "Tesla T4",
        "nvmlDeviceGetPersistenceMode": 1,
        "nvmlDeviceGetClockInfo": 1245,
        "nvmlDeviceGetMaxClockInfo": 1590,
        "nvmlDeviceGetComputeRunningProcesses": [],
        "nvmlDeviceGetGraphicsRunningProcesses": [],
        "nvmlDeviceGetCurrentClocksEventReasons": 0x1,  # gpu_idle
        "nvmlDeviceGetEccMode": [1, 1],
        "nvmlDeviceGetTotalEccErrors": 0,
        "nvmlDeviceGetCurrPcieLinkWidth": 16,
        "nvmlDeviceGetMaxPcieLinkWidth": 16,
        "nvmlDeviceGetCurrPcieLinkGeneration": 3,
        "nvmlDeviceGetMaxPcieLinkGeneration": 3,
    }
    answers.update(changes)
    return answers


T4_TORCH = TorchFacts(version="2.4.1+cu121", cuda="12.1", available=True, device_count=1, name="Tesla T4",
                      pci_bus_id="00000000:00:04.0")

HEALTHY_RUN = MicroRun(steps=220, wall_s=18.0, busy_ms=17_910.0, span_ms=17_985.0, step_median_ms=81.4,
                       sync_caught=True, sync_error=None, device_name="Tesla T4")


def sudo_allows(argv: list[str]) -> tuple[int, str]:
    assert argv[:3] == ["sudo", "-n", "-l"], argv
    return 0, " ".join(argv[3:])


def host(**changes: Any) -> Host:
    values: dict[str, Any] = {"environ": {"PERFGATE_GPU_CLOCKS": "locked:1245"}, "euid": 1000, "pid": 4242,
                              "run": sudo_allows, "process_name": lambda pid: "python3"}
    values.update(changes)
    return Host(**values)


def card_for(answers: dict[str, Any], *, facts: TorchFacts = T4_TORCH, the_host: Host | None = None,
             micro: Callable[[float], MicroRun | str] = lambda s: HEALTHY_RUN, device: str = "auto",
             micro_seconds: float | None = 20.0) -> tuple[Card, FakeNvml]:
    fake = FakeNvml(answers)
    asked: list[float] = []

    def run_micro(seconds: float) -> MicroRun | str:
        asked.append(seconds)
        return micro(seconds)

    card = diagnose(
        device, Path("/nonexistent/cache"), micro_seconds=micro_seconds, host=the_host or host(),
        open_nvml=lambda bus: NvmlSession(fake, f"handle:{bus}", f"PCI bus id {bus}" if bus else "index 0"),
        torch_facts=lambda: facts, micro=run_micro, cpu=lambda cache: [])
    if micro_seconds is not None and facts.available:
        assert asked == [micro_seconds]
    return card, fake


def by_name(card: Card) -> dict[str, Check]:
    return {c.name: c for c in card.checks}


# ---------------------------------------------------------------- whole cards with fakes


def test_a_healthy_t4_is_fit_to_gate() -> None:
    card, fake = card_for(t4_answers())
    checks = by_name(card)
    assert [c.status for c in card.checks] == [OK] * len(card.checks), render(card)
    assert list(checks) == ["driver", "torch cuda", "persistence", "gpu clocks", "clock lock", "gpu processes",
                            "throttle", "ecc", "pcie", "window sync", "event timing"]
    assert card.exit_code == 0
    assert "CUDA up to 12.2" in checks["driver"].detail and "CUDA 12.1" in checks["driver"].detail
    assert "locked:1245" in checks["gpu clocks"].detail and "1245 MHz now, 1590 MHz max" in checks["gpu clocks"].detail
    assert "99.5% busy" in checks["event timing"].detail
    # The NVML device is the one torch measures on, found by its PCI bus id, and NVML is shut down.
    assert {args[0] for name, args in fake.calls if name.startswith("nvmlDevice") and args} == {
        "handle:00000000:00:04.0"}
    assert fake.shutdowns == 2  # opened to see a driver, then again by the PCI bus id torch gave
    assert card.machine["gpu"] == "Tesla T4" and card.machine["gpu_driver"] == "535.104.05"
    text = render(card)
    assert text.splitlines()[-1] == "fit to gate (with the CUDA checks)"
    data = card.to_dict()
    assert data["fit"] is True and data["exit_code"] == 0 and data["failed"] == []
    assert data["micro_run"]["steps"] == 220
    again = Card.from_dict(json.loads(json.dumps(data)))
    assert again.checks == card.checks and again.micro_run == data["micro_run"]


def test_a_driver_too_old_for_torch_fails() -> None:
    facts = TorchFacts(version="2.4.1+cu121", cuda="12.1", available=False, device_count=0,
                       error="The NVIDIA driver on your system is too old (found version 11080).")
    card, _ = card_for(t4_answers(nvmlSystemGetCudaDriverVersion_v2=11080), facts=facts)
    checks = by_name(card)
    assert checks["driver"].status == FAIL
    assert "supports CUDA up to 11.8" in checks["driver"].detail and "too old" in checks["driver"].detail
    assert "update the NVIDIA driver" in checks["driver"].advice
    assert checks["torch cuda"].status == FAIL and "too old" in checks["torch cuda"].detail
    assert checks["micro-run"].status == SKIPPED
    assert card.exit_code == 1
    text = render(card)
    assert "not fit to gate (with the CUDA checks): 2 FAIL" in text
    assert "  - driver: " in text


def test_an_older_minor_cuda_only_warns() -> None:
    facts = TorchFacts(version="2.5.0+cu124", cuda="12.4", available=True, device_count=1, name="Tesla T4")
    card, _ = card_for(t4_answers(), facts=facts)
    check = by_name(card)["driver"]
    assert check.status == WARN and "minor-version compatibility" in check.detail
    assert card.exit_code == 0


def test_a_cpu_only_torch_on_a_gpu_machine_fails() -> None:
    facts = TorchFacts(version="2.4.1+cpu", cuda=None, available=False, device_count=0)
    card, _ = card_for(t4_answers(), facts=facts)
    assert by_name(card)["driver"].status == FAIL
    assert "CPU-only build" in by_name(card)["driver"].detail
    assert card.exit_code == 1


def test_a_torch_that_cannot_be_imported_is_a_fail_line() -> None:
    def broken() -> TorchFacts:
        raise OSError("libcudart.so.13: cannot open shared object file")

    fake = FakeNvml(t4_answers())
    card = diagnose("auto", Path("/tmp"), host=host(), cpu=lambda c: [], micro=lambda s: pytest.fail("no run"),
                    open_nvml=lambda bus: NvmlSession(fake, "h", "index 0"), torch_facts=broken)
    checks = by_name(card)
    assert checks["driver"].status == UNKNOWN and "libcudart.so.13" in checks["driver"].detail
    assert checks["torch cuda"].status == FAIL
    assert "import torch failed: OSError: libcudart.so.13" in checks["torch cuda"].detail
    assert checks["micro-run"].status == SKIPPED
    assert card.exit_code == 1


def test_other_processes_on_the_gpu_fail() -> None:
    own = 4242
    procs = [SimpleNamespace(pid=own, usedGpuMemory=100 * 2**20),
             SimpleNamespace(pid=31337, usedGpuMemory=512 * 2**20)]
    card, _ = card_for(t4_answers(nvmlDeviceGetComputeRunningProcesses=procs,
                                  nvmlDeviceGetGraphicsRunningProcesses=[SimpleNamespace(pid=77, usedGpuMemory=None)]),
                       the_host=host(pid=own, process_name=lambda pid: {31337: "train.py"}.get(pid)))
    check = by_name(card)["gpu processes"]
    assert check.status == FAIL
    assert "2 other processes on the GPU: 77 (?), 31337 (train.py, 512 MiB)" == check.detail
    assert str(own) not in check.detail
    assert card.exit_code == 1
    assert card.to_dict()["failed"] == ["gpu processes"]


def test_nvml_calls_the_gpu_does_not_support_are_unknown_lines() -> None:
    answers = t4_answers(
        nvmlDeviceGetPersistenceMode=NOT_SUPPORTED,
        nvmlDeviceGetEccMode=NOT_SUPPORTED,
        nvmlDeviceGetCurrPcieLinkWidth=pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION),
        nvmlDeviceGetCurrentClocksEventReasons=NOT_SUPPORTED,
        nvmlDeviceGetCurrentClocksThrottleReasons=NOT_SUPPORTED,
        nvmlDeviceGetClockInfo=NOT_SUPPORTED,
        nvmlDeviceGetComputeRunningProcesses=ValueError("bad struct"),
        nvmlDeviceGetName=NOT_SUPPORTED,
    )
    del answers["nvmlSystemGetCudaDriverVersion_v2"]  # an old nvidia-ml-py: the v1 call answers
    answers["nvmlSystemGetCudaDriverVersion"] = 12020
    card, _ = card_for(answers)
    checks = by_name(card)
    assert checks["persistence"] == Check("persistence", UNKNOWN, "nvmlDeviceGetPersistenceMode not supported")
    assert checks["ecc"] == Check("ecc", UNKNOWN, "nvmlDeviceGetEccMode not supported")
    assert checks["pcie"].detail == "nvmlDeviceGetCurrPcieLinkWidth insufficient permissions"
    assert checks["throttle"].detail == "nvmlDeviceGetCurrentClocksThrottleReasons not supported"
    assert checks["gpu processes"].status == UNKNOWN
    assert checks["gpu processes"].detail == "nvmlDeviceGetComputeRunningProcesses failed: ValueError: bad struct"
    # The declared lock still makes the clocks line; NVML's part says why it is missing.
    assert checks["gpu clocks"].status == OK
    assert "graphics clock unknown: nvmlDeviceGetClockInfo not supported" in checks["gpu clocks"].detail
    assert checks["driver"].status == OK and "CUDA up to 12.2" in checks["driver"].detail
    assert card.machine["gpu"] == "Tesla T4"  # from torch when NVML cannot name it
    assert card.exit_code == 0
    text = render(card)
    assert "Traceback" not in text and "unknown  ecc" in text


def test_nvml_missing_a_function_is_said() -> None:
    answers = t4_answers()
    del answers["nvmlDeviceGetMaxPcieLinkGeneration"]
    card, _ = card_for(answers)
    assert by_name(card)["pcie"] == Check("pcie", UNKNOWN,
                                          "nvmlDeviceGetMaxPcieLinkGeneration is not in this nvidia-ml-py")


def test_no_driver_skips_the_cuda_checks_or_is_bad_input_for_cuda() -> None:
    def nothing(bus: str | None) -> str:
        return "NVML: NVML Shared Library Not Found"

    def no_torch() -> TorchFacts:
        raise AssertionError("torch is not asked without a driver")

    card = diagnose("auto", Path("/tmp"), open_nvml=nothing, torch_facts=no_torch, cpu=lambda c: [])
    assert card.checks == [Check("cuda", SKIPPED, "no NVIDIA driver (NVML: NVML Shared Library Not Found): "
                                                  "CUDA checks skipped")]
    assert card.exit_code == 0 and not card.cuda_checked
    with pytest.raises(DeviceError, match=r"^--device cuda: no NVIDIA driver here \(NVML: NVML Shared Library"):
        diagnose("cuda", Path("/tmp"), open_nvml=nothing, torch_facts=no_torch, cpu=lambda c: [])
    card = diagnose("cpu", Path("/tmp"), open_nvml=nothing, torch_facts=no_torch, cpu=lambda c: [])
    assert card.checks == [Check("cuda", SKIPPED, "--device cpu: CUDA checks skipped")]


def test_the_micro_run_failing_or_skipped() -> None:
    card, _ = card_for(t4_answers(), micro=lambda s: "the micro-run process died (exit status -9)")
    check = by_name(card)["micro-run"]
    assert check.status == FAIL and "exit status -9" in check.detail
    card, _ = card_for(t4_answers(), micro_seconds=None)
    assert by_name(card)["micro-run"] == Check("micro-run", SKIPPED, "--no-micro-run")
    assert card.exit_code == 0


def test_cuda_unavailable_reason_names_the_driver() -> None:
    fake = FakeNvml(t4_answers(nvmlSystemGetCudaDriverVersion_v2=11040))
    facts = TorchFacts(version="2.4.1+cu121", cuda="12.1", available=False, device_count=0)
    reason = cuda_unavailable_reason(lambda: facts, lambda bus: NvmlSession(fake, "h", "index 0"))
    assert reason == ("driver 535.104.05 supports CUDA up to 11.4; torch 2.4.1+cu121 is built for CUDA 12.1: "
                      "the driver is too old")
    assert cuda_unavailable_reason(lambda: facts, lambda bus: "NVML: Driver Not Loaded") == (
        "no NVIDIA driver (NVML: Driver Not Loaded)")


# ---------------------------------------------------------------- single GPU checks


def gpu(**changes: Any) -> Gpu:
    return Gpu(FakeNvml(t4_answers(**changes)), "h", T4_TORCH)


@pytest.mark.parametrize(("environ", "status", "words"), [
    ({"PERFGATE_GPU_CLOCKS": "locked:1245"}, OK, "locked:1245"),
    ({"PERFGATE_GPU_CLOCKS": "locked:1000"}, WARN, "above the declared lock"),
    ({"PERFGATE_GPU_CLOCKS": "unlocked"}, WARN, "PERFGATE_GPU_CLOCKS=unlocked"),
    ({}, WARN, "PERFGATE_GPU_CLOCKS is not set"),
    ({"PERFGATE_GPU_CLOCKS": "locked:fast"}, WARN, "neither locked:<MHz> nor unlocked"),
])
def test_gpu_clocks(environ: dict[str, str], status: str, words: str) -> None:
    check = check_clocks(gpu(), environ)
    assert check.status == status and words in check.detail
    assert "1245 MHz now, 1590 MHz max" in check.detail


def test_clock_lock_asks_sudo_without_running_anything() -> None:
    asked: list[list[str]] = []

    def refuse(argv: list[str]) -> tuple[int, str]:
        asked.append(argv)
        return 1, "Sorry, user runner is not allowed to execute '/usr/bin/nvidia-smi -lgc 1400,1400' as root."

    check = check_clock_lock(host(environ={"GPU_LOCK_MHZ": "1400"}, run=refuse))
    assert asked == [["sudo", "-n", "-l", "/usr/bin/nvidia-smi", "-lgc", "1400,1400"]]
    assert check.status == WARN and "sudo -n refuses" in check.detail
    assert r"NOPASSWD: /usr/bin/nvidia-smi -lgc 1400\,1400, /usr/bin/nvidia-smi -rgc" in check.advice

    asked.clear()
    check = check_clock_lock(host(run=lambda argv: asked.append(argv) or (0, "")))
    assert [a[3:] for a in asked] == [["/usr/bin/nvidia-smi", "-lgc", "1245,1245"], ["/usr/bin/nvidia-smi", "-rgc"]]
    assert check.status == OK and "(not run)" in check.detail

    check = check_clock_lock(host(run=lambda argv: (127, "sudo: not found")))
    assert check.status == WARN and "sudo is not installed" in check.detail
    check = check_clock_lock(host(run=lambda argv: (0, "") if "-lgc" in argv else (1, "no")))
    assert check.status == WARN and "but not /usr/bin/nvidia-smi -rgc" in check.detail
    check = check_clock_lock(host(euid=0, run=lambda argv: pytest.fail("root needs no sudo")))
    assert check.status == OK and "root" in check.detail


@pytest.mark.parametrize(("mask", "status", "words"), [
    (0x1, OK, "gpu_idle"),
    (0x0, OK, "none"),
    (0x1 | 0x4, WARN, "sw_power_cap"),
    (0x1 | 0x40, FAIL, "hw_thermal_slowdown"),
    (0x8, FAIL, "hw_slowdown"),
    (0x1 | 0x2000, OK, "0x2000"),
])
def test_throttle_reasons_at_idle(mask: int, status: str, words: str) -> None:
    check = check_throttle(gpu(nvmlDeviceGetCurrentClocksEventReasons=mask))
    assert check.status == status and words in check.detail


def test_throttle_reasons_from_the_older_call() -> None:
    answers = t4_answers(nvmlDeviceGetCurrentClocksThrottleReasons=0x20)
    del answers["nvmlDeviceGetCurrentClocksEventReasons"]
    check = check_throttle(Gpu(FakeNvml(answers), "h", T4_TORCH))
    assert check.status == FAIL and "sw_thermal_slowdown" in check.detail


def test_ecc() -> None:
    assert check_ecc(gpu(nvmlDeviceGetTotalEccErrors=3)).status == FAIL
    assert "3 uncorrected errors" in check_ecc(gpu(nvmlDeviceGetTotalEccErrors=3)).detail
    assert check_ecc(gpu(nvmlDeviceGetEccMode=[1, 0])).status == WARN
    assert check_ecc(gpu(nvmlDeviceGetEccMode=[0, 0])).detail.startswith("ECC off")
    fake = FakeNvml(t4_answers())
    check_ecc(Gpu(fake, "h", T4_TORCH))
    assert ("nvmlDeviceGetTotalEccErrors", ("h", pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                            pynvml.NVML_VOLATILE_ECC)) in fake.calls


def test_pcie() -> None:
    check = check_pcie(gpu(nvmlDeviceGetCurrPcieLinkWidth=8))
    assert check.status == WARN and check.detail.startswith("x8 of x16, gen 3 of 3")
    check = check_pcie(gpu(nvmlDeviceGetCurrPcieLinkGeneration=1))
    assert check.status == OK and "drops at idle" in check.detail


def test_persistence_off_warns() -> None:
    check = check_persistence(gpu(nvmlDeviceGetPersistenceMode=0))
    assert check.status == WARN and "nvidia-persistenced" in check.advice


def test_cuda_version_numbers() -> None:
    assert cuda_version(12020) == (12, 2)
    assert cuda_version(13000) == (13, 0)
    assert cuda_version(11080) == (11, 8)
    assert parse_cuda("12.1") == (12, 1) and parse_cuda("x") is None


# ---------------------------------------------------------------- the micro-run


def run_of(**changes: Any) -> MicroRun:
    values = HEALTHY_RUN.to_dict()
    values.update(changes)
    return MicroRun(**values)


@pytest.mark.parametrize(("changes", "timing", "sync"), [
    ({}, OK, OK),
    ({"busy_ms": 17_100.0}, WARN, OK),  # 95% busy
    ({"busy_ms": 14_000.0}, FAIL, OK),  # the device sat idle
    ({"span_ms": 16_000.0}, FAIL, OK),  # events and host clock disagree
    ({"sync_caught": False}, OK, UNKNOWN),
    ({"sync_error": "RuntimeError: called a synchronizing CUDA operation", "steps": 3}, OK, FAIL),
    ({"steps": 0}, FAIL, OK),
])
def test_judging_the_micro_run(changes: dict[str, Any], timing: str, sync: str) -> None:
    checks = {c.name: c for c in check_micro_run(run_of(**changes))}
    assert checks["event timing"].status == timing, checks["event timing"]
    assert checks["window sync"].status == sync, checks["window sync"]


class _Clock:
    """Fake CUDA: events read the host clock; the sync debug mode is a variable."""

    def __init__(self, raise_on_record: int | None = None) -> None:
        self.mode = "default"
        self.modes: list[str] = []
        self.records = 0
        self.raise_on_record = raise_on_record
        self.syncs = 0

    def set_mode(self, mode: str) -> None:
        self.mode = mode
        self.modes.append(mode)

    def read_back(self, tensor: Any) -> Any:
        if self.mode == "error":
            raise RuntimeError("called a synchronizing CUDA operation")
        return tensor.item()

    def event(self) -> Any:
        clock = self

        class Event:
            t = 0.0

            def record(self) -> None:
                clock.records += 1
                if clock.mode == "error" and clock.raise_on_record == clock.records:
                    raise RuntimeError("called a synchronizing CUDA operation\nsecond line")
                self.t = time.perf_counter()

            def elapsed_time(self, end: Any) -> float:
                return (end.t - self.t) * 1e3

        return Event()

    def backend(self) -> Backend:
        def synchronize() -> None:
            self.syncs += 1

        return Backend("cpu", self.event, synchronize, self.set_mode, read_back=self.read_back)


def test_the_micro_run_structure_on_the_cpu() -> None:
    clock = _Clock()
    run = micro_run(0.4, clock.backend(), width=32, layers=2, batch=8)
    assert run.sync_caught and run.sync_error is None
    assert run.steps >= 20 and clock.records == 2 * run.steps
    assert clock.modes == ["error", "default", "error", "default"] and clock.mode == "default"
    assert 0 < run.busy_ms <= run.span_ms <= run.wall_s * 1e3 * 1.01
    assert run.device_name == "cpu"
    assert json.loads(json.dumps(run.to_dict())) == run.to_dict()


def test_a_sync_inside_the_window_is_caught_and_the_mode_restored() -> None:
    clock = _Clock(raise_on_record=None)
    backend = clock.backend()
    # The first window record after warm-up is record 1 (warm-up records no events).
    clock.raise_on_record = 7  # the start event of the 4th step
    run = micro_run(0.2, backend, width=16, layers=1, batch=4)
    assert run.steps == 3
    assert run.sync_error == "RuntimeError: called a synchronizing CUDA operation"
    assert clock.mode == "default"
    checks = {c.name: c for c in check_micro_run(run)}
    assert checks["window sync"].status == FAIL and "after 3 steps" in checks["window sync"].detail


@pytest.mark.slow
@pytest.mark.skipif(cuda_available(), reason="CUDA is available here")
def test_the_micro_run_child_without_cuda_says_so() -> None:
    outcome = micro_run_in_child(1.0)
    assert isinstance(outcome, str) and "no usable CUDA device" in outcome


# ---------------------------------------------------------------- CPU checks


def test_governor(tmp_path: Path) -> None:
    for cpu, governor in ((0, "performance"), (1, "performance"), (2, "powersave")):
        folder = tmp_path / f"cpu{cpu}" / "cpufreq"
        folder.mkdir(parents=True)
        (folder / "scaling_governor").write_text(governor + "\n")
    check = check_governor(tmp_path)
    assert check.status == WARN and "powersave on 1 of 3 CPUs" in check.detail
    assert check_governor(tmp_path, cpus={0, 1}) == Check("cpu governor", OK, "performance on 2 of 2 CPUs")
    check = check_governor(tmp_path / "none")
    assert check.status == UNKNOWN and "no cpufreq" in check.detail


@pytest.mark.parametrize(("free", "status"), [(0.5e9, FAIL), (3e9, WARN), (50e9, OK)])
def test_cache_disk(tmp_path: Path, free: float, status: str) -> None:
    seen: list[Path] = []

    def usage(path: Path) -> Any:
        seen.append(path)
        return SimpleNamespace(free=free)

    check = check_cache_disk(tmp_path / "not" / "yet", usage)
    assert check.status == status
    assert seen == [tmp_path]  # the nearest folder that exists
    assert f"{free / 1e9:.1f} GB free" in check.detail


def test_cpu_load_and_count() -> None:
    assert check_cpu_load(lambda s: [80.0, 10.0, 0.0, 0.0], {0, 1}, 1.0).status == WARN
    check = check_cpu_load(lambda s: [80.0, 2.0, 3.0, 1.0], {1, 2, 3}, 1.0)
    assert check == Check("cpu load", OK, "other processes used 2% of 3 CPUs over 1 s")
    assert check_cpu_count(1, 1).status == WARN
    assert check_cpu_count(4, 8) == Check("cpus", OK, "4 CPUs for this process of 8 online")


def test_a_check_that_raises_is_an_unknown_line() -> None:
    def broken() -> Check:
        raise KeyError("boom")

    assert guarded("x", broken) == Check("x", UNKNOWN, "the check failed: KeyError: 'boom'")
    with pytest.raises(ValueError):
        Check("x", "fine", "")


# ---------------------------------------------------------------- the real card on this machine


def _no_driver() -> bool:
    session = open_nvml()
    if isinstance(session, str):
        return True
    session.close()
    return False


def perfgate(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    code = "import sys; from perfgate.adapters.cli import main; rc = main(sys.argv[1:]); " \
           "print('torch loaded' if 'torch' in sys.modules else 'torch not loaded', file=sys.stderr); sys.exit(rc)"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120,
                          env=env, cwd=ROOT)


@pytest.mark.slow
@pytest.mark.skipif(not _no_driver(), reason="an NVIDIA driver is here: the card has CUDA checks")
def test_the_cpu_only_card_on_this_machine(tmp_path: Path) -> None:
    env = {**os.environ, "PERFGATE_CACHE_DIR": str(tmp_path / "cache")}
    proc = perfgate("doctor", env=env)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("perfgate doctor: ")
    assert any(line.split()[:2] == ["skipped", "cuda"] and "CUDA checks skipped" in line for line in lines)
    for name in ("cpus", "cpu governor", "cpu load", "cache disk"):
        assert any(f" {name} " in line for line in lines), name
    assert str(tmp_path / "cache") in proc.stdout
    # whether this machine is fit is its own state (a nearly full disk is a FAIL here too): the
    # card's verdict and its exit code must agree with its rows, whichever it is
    failed = sum(line.split()[:1] == ["FAIL"] for line in lines)
    if failed:
        assert proc.returncode == 1, proc.stdout
        assert f"not fit to gate (CUDA checks skipped): {failed} FAIL" in lines
    else:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert lines[-1].startswith("fit to gate (CUDA checks skipped)")
    assert "torch not loaded" in proc.stderr  # no driver: torch is not even imported

    proc = perfgate("doctor", "--json", "--device", "cpu", env=env)
    data = json.loads(proc.stdout)
    assert data["fit"] is (proc.returncode == 0) and data["cuda_checked"] is False
    assert data["fit"] is not any(check["status"] == "FAIL" for check in data["checks"])
    assert data["checks"][-1] == {"name": "cuda", "status": "skipped", "detail": "--device cpu: CUDA checks skipped",
                                  "advice": ""}

    proc = perfgate("doctor", "--device", "cuda", env=env)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines()[0].startswith("perfgate: error: --device cuda: no NVIDIA driver here (")


@pytest.mark.slow
def test_bad_usage_is_exit_2() -> None:
    proc = perfgate("doctor", "--micro-run-seconds", "0")
    assert proc.returncode == 2 and "--micro-run-seconds must be at least 1" in proc.stderr
    proc = perfgate("doctor", "--device", "tpu")
    assert proc.returncode == 2


# ---------------------------------------------------------------- scripts/gpu-check.sh


def test_gpu_check_script_syntax() -> None:
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)
    if shutil.which("shellcheck"):
        proc = subprocess.run(["shellcheck", str(SCRIPT)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout


def test_gpu_check_refuses_without_nvidia_smi(tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    bash = shutil.which("bash")
    assert bash is not None
    proc = subprocess.run([bash, str(SCRIPT), str(tmp_path / "out")], capture_output=True, text=True,
                          env={"PATH": str(empty), "HOME": str(tmp_path)}, timeout=30)
    assert proc.returncode == 2
    assert "nvidia-smi is not on PATH" in proc.stderr
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------- on a real GPU


@pytest.mark.gpu
def test_the_real_micro_run() -> None:
    from perfgate.measure.probe import micro_run as real_micro_run

    run = real_micro_run(5.0)
    checks = {c.name: c for c in check_micro_run(run)}
    assert run.sync_caught, "set_sync_debug_mode('error') did not catch a deliberate .item()"
    assert run.sync_error is None, run.sync_error
    assert checks["event timing"].status in (OK, WARN), checks["event timing"]
    assert abs(run.span_ms - run.wall_s * 1e3) <= 0.02 * run.wall_s * 1e3 + 1.0


@pytest.mark.gpu
def test_the_real_card_on_a_gpu() -> None:
    proc = perfgate("doctor", "--device", "cuda", "--json", "--micro-run-seconds", "5")
    assert proc.returncode in (0, 1), proc.stderr
    data = json.loads(proc.stdout)
    assert data["cuda_checked"] is True
    statuses = {c["name"]: c["status"] for c in data["checks"]}
    assert statuses["torch cuda"] == OK and statuses["window sync"] == OK
    assert data["micro_run"]["steps"] >= 20


def test_run_on_cuda_without_cuda_names_the_cause_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    from perfgate.adapters import cli

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert cli.main(["run", "--device", "cuda", "--repeats", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no usable CUDA device" in err[0] and "no NVIDIA driver" in err[0]
