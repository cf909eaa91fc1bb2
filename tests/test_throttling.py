"""Measuring right on the GPU, with a fake NVML: which repeats a slow GPU costs, on which GPU.

- the software power cap is telemetry (its share of the samples), never a reason to leave
  a repeat out: a 70 W T4 sets it on most samples under load;
- a thermal or hardware slowdown in any sample leaves the repeat out, the note names it;
- by the same rule on both sides; a clock level never leaves a repeat out (both sides'
  clocks are reported), and beyond ``GateConfig.max_left_out`` the workload is an ERROR;
- NVML is opened on the GPU CUDA uses, by UUID, whatever ``CUDA_VISIBLE_DEVICES`` says;
- an NVML call that fails mid-run leaves that signal null with its reason, the rest goes on;
- the peak of the process tree's summed RSS (DataLoader workers included) is recorded;
- old result and baseline files, which counted the power cap, still load and judge.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
import types
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from factories import make_result

from perfgate.analysis.compare import compare
from perfgate.analysis.decide import GateConfig
from perfgate.analysis.outcome import Entry, Pairing
from perfgate.measure import telemetry_gpu as G
from perfgate.measure import telemetry_host as H
from perfgate.measure.telemetry import TelemetrySampler
from perfgate.model.baseline import baseline_from_dict
from perfgate.model.result import CLOCK_EVENT_REASONS, SLOWDOWN_REASONS, RunResult, repeat_from_dict
from perfgate.model.verdict import Verdict
from perfgate.store.baselines import Lookup, load_baseline, save_baseline, updated_baseline

NOW = datetime(2026, 11, 30, tzinfo=timezone.utc)
CAP, HW, SW_THERMAL, HW_THERMAL, BRAKE, IDLE = 0x4, 0x8, 0x20, 0x40, 0x80, 0x1


# ---------------------------------------------------------------- a fake NVML and a fake torch


class NVMLError(Exception):
    pass


class NVMLError_NotFound(NVMLError):  # noqa: N801 - as pynvml names it
    pass


class NVMLError_GpuIsLost(NVMLError):  # noqa: N801
    pass


class NVMLError_NotSupported(NVMLError):  # noqa: N801
    pass


@dataclasses.dataclass
class FakeGpu:
    uuid: str  # NVML's form: "GPU-..." or "MIG-..."
    clocks: list[int] = dataclasses.field(default_factory=lambda: [1590])
    """The SM clock of each sample, the last one repeated."""
    events: list[int] = dataclasses.field(default_factory=lambda: [0])
    """The clock-event mask of each sample, the last one repeated."""
    pci: str = "0000:00:00.0"
    util: int = 97
    used: int = 4 << 30
    fail: dict[str, int] = dataclasses.field(default_factory=dict)
    """NVML function name -> the number of calls it answers before it raises GpuIsLost."""
    parent: FakeGpu | None = None  # a MIG instance's GPU
    calls: dict[str, int] = dataclasses.field(default_factory=dict)

    def call(self, name: str) -> int:
        n = self.calls.get(name, 0)
        self.calls[name] = n + 1
        if name in self.fail and n >= self.fail[name]:
            raise NVMLError_GpuIsLost("GPU is lost")
        return n


class FakeNvml(types.ModuleType):
    """The part of pynvml the sampler uses, over a list of GPUs numbered as NVML numbers them (all of them)."""

    NVML_CLOCK_SM = 1
    NVML_TEMPERATURE_GPU = 0

    def __init__(self, gpus: list[FakeGpu]) -> None:
        super().__init__("pynvml")
        self.gpus = gpus
        self.opened: list[str] = []  # how each handle was asked for
        self.shutdowns = 0
        self.NVMLError = NVMLError

    def nvmlInit(self) -> None:  # noqa: N802 - NVML's names throughout
        pass

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:  # noqa: N802
        self.opened.append(f"index {index}")
        return self.gpus[index]

    def nvmlDeviceGetHandleByUUID(self, uuid: str | bytes) -> FakeGpu:  # noqa: N802
        uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
        self.opened.append(f"uuid {uuid}")
        for gpu in self.gpus:
            if gpu.uuid == uuid:
                return gpu
        raise NVMLError_NotFound("Not Found")

    def nvmlDeviceGetHandleByPciBusId(self, bus_id: str) -> FakeGpu:  # noqa: N802
        self.opened.append(f"pci {bus_id}")
        for gpu in self.gpus:
            if gpu.pci == bus_id and gpu.parent is None:
                return gpu
        raise NVMLError_NotFound("Not Found")

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, handle: FakeGpu) -> FakeGpu:  # noqa: N802
        assert handle.parent is not None
        return handle.parent

    def nvmlDeviceGetUtilizationRates(self, h: FakeGpu) -> Any:  # noqa: N802
        h.call("nvmlDeviceGetUtilizationRates")
        if h.parent is not None:
            raise NVMLError_NotSupported("Not Supported")
        return types.SimpleNamespace(gpu=h.util, memory=40)

    def nvmlDeviceGetMemoryInfo(self, h: FakeGpu) -> Any:  # noqa: N802
        h.call("nvmlDeviceGetMemoryInfo")
        return types.SimpleNamespace(used=h.used, total=16 << 30, free=(16 << 30) - h.used)

    def nvmlDeviceGetClockInfo(self, h: FakeGpu, kind: int) -> int:  # noqa: N802
        assert kind == self.NVML_CLOCK_SM and h.parent is None  # a MIG instance has no clock of its own
        n = h.call("nvmlDeviceGetClockInfo")
        return h.clocks[min(n, len(h.clocks) - 1)]

    def nvmlDeviceGetTemperature(self, h: FakeGpu, sensor: int) -> int:  # noqa: N802
        h.call("nvmlDeviceGetTemperature")
        return 71

    def nvmlDeviceGetPowerUsage(self, h: FakeGpu) -> int:  # noqa: N802
        h.call("nvmlDeviceGetPowerUsage")
        return 69_500  # mW

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: FakeGpu) -> int:  # noqa: N802
        assert h.parent is None
        n = h.call("nvmlDeviceGetCurrentClocksEventReasons")
        return h.events[min(n, len(h.events) - 1)]

    def nvmlDeviceGetComputeRunningProcesses(self, h: FakeGpu) -> list:  # noqa: N802
        return [types.SimpleNamespace(pid=os.getpid(), usedGpuMemory=1)]

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: FakeGpu) -> list:  # noqa: N802
        return []


def fake_torch(gpus: list[FakeGpu], *, uuid: bool = True, pci: bool = True) -> types.ModuleType:
    """torch.cuda as CUDA presents the machine: only the GPUs ``CUDA_VISIBLE_DEVICES`` names, renumbered."""

    def visible() -> list[FakeGpu]:
        names = os.environ.get("CUDA_VISIBLE_DEVICES")
        return list(gpus) if names is None else [gpus[int(x)] for x in names.split(",") if x.strip()]

    def properties(ordinal: int) -> Any:
        gpu = visible()[ordinal]
        props = types.SimpleNamespace(name="Tesla T4")
        if uuid:  # torch prints the UUID without NVML's GPU-/MIG- prefix
            props.uuid = _Uuid(gpu.uuid[4:])
        if pci:
            domain, bus, rest = gpu.pci.split(":")
            props.pci_domain_id, props.pci_bus_id, props.pci_device_id = (
                int(domain, 16), int(bus, 16), int(rest.split(".")[0], 16))
        return props

    torch = types.ModuleType("torch")
    torch.cuda = types.SimpleNamespace(  # type: ignore[attr-defined]
        current_device=lambda: 0, get_device_properties=properties)
    return torch


class _Uuid:
    def __init__(self, text: str) -> None:
        self.text = text

    def __str__(self) -> str:
        return self.text


@contextmanager
def gpus(*devices: FakeGpu, uuid: bool = True, pci: bool = True, visible: str | None = None) -> Iterator[FakeNvml]:
    nvml = FakeNvml(list(devices))
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(sys.modules, "pynvml", nvml)
        mp.setitem(sys.modules, "torch", fake_torch(list(devices), uuid=uuid, pci=pci))
        if visible is None:
            mp.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        else:
            mp.setenv("CUDA_VISIBLE_DEVICES", visible)
        yield nvml


def t4(clocks: list[int] | None = None, events: list[int] | None = None, **kw: Any) -> FakeGpu:
    return FakeGpu("GPU-5d3ee0c2-8a51-4c1e-9f6b-0d2c4e6a8b10", clocks=clocks or [1590], events=events or [0], **kw)


def sample(sampler: TelemetrySampler, n: int) -> dict:
    """``n`` samples, taken here rather than by the thread so that the count is exact."""
    for _ in range(n):
        sampler._tick()
    return sampler.summary()


def sampled(gpu: FakeGpu, n: int = 10) -> dict:
    """The telemetry one repeat's window of ``n`` samples on ``gpu`` leaves."""
    with gpus(gpu):
        return sample(TelemetrySampler("cuda"), n)


def with_telemetry(result: RunResult, telemetry: list[dict]) -> RunResult:
    reps = tuple(dataclasses.replace(r, telemetry=t) for r, t in zip(result.repeats, telemetry, strict=True))
    return dataclasses.replace(result, repeats=reps)


def stored(telemetry: list[dict], seed: int = 1):
    result = with_telemetry(make_result(seed=seed, repeats=len(telemetry)), telemetry)
    return updated_baseline(None, result, "r", append=False, now=NOW)


def judge(current: RunResult, baseline, config: GateConfig = GateConfig()):
    (c,) = compare([Entry("tiny", current, Lookup(baseline, Path("tiny.json")))], config).comparisons
    return c


# 8 samples in 10 at the power cap, as a T4 under load at 70 W
POWER_CAPPED = [CAP, CAP, 0, CAP, CAP, CAP, 0, CAP, CAP, CAP]


# ---------------------------------------------------------------- the clock-event bits


def test_the_reason_bits_are_nvmls() -> None:
    import pynvml

    nvml_names = {"gpu_idle": "GpuIdle", "applications_clocks_setting": "ApplicationsClocksSetting",
                  "sw_power_cap": "SwPowerCap", "hw_slowdown": "HwSlowdown", "sync_boost": "SyncBoost",
                  "sw_thermal_slowdown": "SwThermalSlowdown", "hw_thermal_slowdown": "HwThermalSlowdown",
                  "hw_power_brake_slowdown": "HwPowerBrakeSlowdown", "display_clock_setting": "DisplayClockSetting"}
    for bit, name in CLOCK_EVENT_REASONS.items():
        assert getattr(pynvml, f"nvmlClocksEventReason{nvml_names[name]}") == bit, name
    assert G.SLOWDOWN == (pynvml.nvmlClocksEventReasonHwSlowdown | pynvml.nvmlClocksEventReasonSwThermalSlowdown
                          | pynvml.nvmlClocksEventReasonHwThermalSlowdown
                          | pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown)
    assert not G.SLOWDOWN & pynvml.nvmlClocksEventReasonSwPowerCap
    assert set(SLOWDOWN_REASONS) == {CLOCK_EVENT_REASONS[b] for b in (HW, SW_THERMAL, HW_THERMAL, BRAKE)}


# ---------------------------------------------------------------- the power cap is telemetry


def test_a_t4_at_its_power_cap_keeps_every_repeat_and_reports_the_share() -> None:
    telemetry = sampled(t4(events=POWER_CAPPED))
    gpu = telemetry["gpu"]
    assert gpu["power_cap_share"] == 0.8
    assert gpu["clock_event_shares"] == {"sw_power_cap": 0.8}
    assert gpu["slowdown_reasons"] == [] and gpu["throttled"] is False
    assert gpu["sm_clock_mhz"] == {"min": 1590, "median": 1590, "max": 1590}
    assert gpu["samples"] == 10 and gpu["error"] is None and gpu["errors"] == {}
    rep = repeat_from_dict(json.loads(json.dumps(make_result(repeats=1).repeats[0].to_dict()
                                                 | {"telemetry": telemetry})), "r")
    assert (rep.throttled, rep.throttle_reason, rep.power_cap_share, rep.sm_clock_mhz) == (False, None, 0.8, 1590)

    baseline = stored([sampled(t4(events=POWER_CAPPED)) for _ in range(5)])
    assert all(r.power_cap_share == 0.8 and r.slowdown_reasons == () and not r.throttled
               for rec in baseline.recordings for r in rec.repeats)
    current = with_telemetry(make_result(seed=2, repeats=6), [sampled(t4(events=POWER_CAPPED)) for _ in range(6)])
    c = judge(current, baseline)
    assert c.left_out == () and c.verdict is not Verdict.ERROR, c.reason
    assert c.time is not None and (c.time.estimate.n_current, c.time.estimate.n_baseline) == (6, 5)


def test_a_power_cap_on_every_sample_still_keeps_the_repeat() -> None:
    gpu = sampled(t4(events=[CAP | IDLE, CAP]))["gpu"]
    assert gpu["power_cap_share"] == 1.0 and gpu["clock_event_shares"] == {"gpu_idle": 0.1, "sw_power_cap": 1.0}
    assert gpu["throttled"] is False


# ---------------------------------------------------------------- thermal and hardware slowdowns


@pytest.mark.parametrize(("bit", "reason"), [
    (HW_THERMAL, "thermal (hw_thermal_slowdown)"),
    (SW_THERMAL, "thermal (sw_thermal_slowdown)"),
    (HW, "hardware slowdown (hw_slowdown)"),
    (BRAKE, "hardware slowdown (hw_power_brake_slowdown)"),
])
def test_a_thermal_or_hardware_slowdown_in_one_sample_leaves_the_repeat_out_with_the_reason(bit: int,
                                                                                           reason: str) -> None:
    events = list(POWER_CAPPED)
    events[3] = CAP | bit
    telemetry = sampled(t4(events=events))
    assert telemetry["gpu"]["throttled"] is True
    assert telemetry["gpu"]["slowdown_reasons"] == [CLOCK_EVENT_REASONS[bit]]
    assert telemetry["gpu"]["power_cap_share"] == 0.8  # still reported

    baseline = stored([sampled(t4(events=POWER_CAPPED)) for _ in range(5)])
    plain = sampled(t4(events=POWER_CAPPED))
    current = with_telemetry(make_result(seed=2, repeats=6, repeat_scales=[1, 1, 1.3, 1, 1, 1]),
                             [plain, plain, telemetry, plain, plain, plain])
    c = judge(current, baseline)
    assert c.left_out == (f"1 of 6 current repeat(s) left out: {reason} in repeat 3",)
    assert c.time is not None and c.time.estimate.n_current == 5
    # and in a baseline: the repeat is left out there, with the reason
    kept, dropped = stored([plain, telemetry, plain, plain]).without_throttled()
    assert dropped.messages == (f"1 baseline repeat(s) left out: {reason}",)
    assert sum(len(rec.repeats) for rec in kept.recordings) == 3


def test_several_reasons_are_named_and_counted() -> None:
    thermal = sampled(t4(events=[0, HW_THERMAL]))
    hardware = sampled(t4(events=[HW, 0]))
    plain = sampled(t4())
    kept, dropped = stored([thermal, plain, hardware, plain, thermal]).without_throttled()
    assert dropped.throttled == 3
    assert dropped.messages == ("3 baseline repeat(s) left out: thermal (hw_thermal_slowdown) in 2; "
                                "hardware slowdown (hw_slowdown) in 1",)
    current = with_telemetry(make_result(seed=2, repeats=5), [thermal, plain, hardware, plain, thermal])
    c = judge(current, stored([plain] * 4))
    assert c.left_out == ("3 of 5 current repeat(s) left out: thermal (hw_thermal_slowdown) in repeat 1, 5; "
                          "hardware slowdown (hw_slowdown) in repeat 3",)


# ---------------------------------------------------------------- clocks: reported, never screened


def test_an_sm_clock_10_percent_below_the_baselines_is_kept_and_both_clocks_are_reported() -> None:
    # The clock a change causes is part of its cost: a repeat is never left out for its
    # clock level, on either side; both sides' clocks stand beside the verdict.
    baseline = stored([sampled(t4(clocks=[c])) for c in (1590, 1585, 1590, 1575, 1590)])
    assert baseline.sm_clock_mhz() == 1590
    low = sampled(t4(clocks=[1431]))  # 10% below, and no clock-event reason at all
    plain = sampled(t4(clocks=[1590]))
    current = with_telemetry(make_result(seed=2, repeats=6), [plain, low, plain, plain, plain, plain])
    c = judge(current, baseline)
    assert c.left_out == ()
    assert c.time is not None and c.time.estimate.n_current == 6
    assert c.clocks == {"current": 1590, "baseline": 1590}
    with pytest.raises(TypeError):
        GateConfig(clock_deviation=0.05)  # type: ignore[call-arg]  # the rule is gone


def test_a_head_whose_own_change_lowers_the_clock_is_measured_with_it() -> None:
    # An 8% lower clock in every head repeat (a change that draws more power per step):
    # the old one-sided screen left every head repeat out (ERROR, "none is left").
    blocks = [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
    base = make_result(seed=1, repeats=12)
    base = dataclasses.replace(base, repeats=tuple(dataclasses.replace(r, block=b, telemetry=sampled(t4(clocks=[1590])))
                                                   for r, b in zip(base.repeats, blocks, strict=True)))
    head = make_result(seed=2, repeats=12, scale=1.10)
    head = dataclasses.replace(head, repeats=tuple(
        dataclasses.replace(r, block=b, telemetry=sampled(t4(clocks=[1463]))) for r, b in zip(head.repeats, blocks, strict=True)))
    (c,) = compare([Entry("tiny", head, None, pairing=Pairing(base, "a1b2c3d"))], GateConfig()).comparisons
    assert c.left_out == ()
    assert c.clocks == {"base": 1590, "head": 1463}
    assert c.verdict is Verdict.REGRESSION, c.reason


def test_slowdown_events_leave_their_whole_blocks_out_on_both_sides_up_to_the_cap() -> None:
    blocks = [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
    thermal = sampled(t4(events=[0, HW_THERMAL]))
    plain = sampled(t4())

    def side(seed: int, hot: set[int]) -> RunResult:
        r = make_result(seed=seed, repeats=12)
        return dataclasses.replace(r, repeats=tuple(
            dataclasses.replace(rep, block=b, telemetry=thermal if i in hot else plain)
            for i, (rep, b) in enumerate(zip(r.repeats, blocks, strict=True))))

    # a head repeat of block 3 and a base repeat of block 3: block 3 leaves, on both sides
    (c,) = compare([Entry("tiny", side(2, {7}), None, pairing=Pairing(side(1, {6}), "a1b2c3d"))],
                   GateConfig()).comparisons
    assert c.left_out == ("2 of 12 head repeat(s) and 2 of 12 base repeat(s) left out: block 3 on both sides (head "
                          "thermal (hw_thermal_slowdown) in repeat 8; base thermal (hw_thermal_slowdown) in repeat 7); "
                          "a block is left out whole",)
    assert c.verdict is not Verdict.ERROR, c.reason
    assert c.current is not None and len(c.current.repeats) == 10
    # one flag each in blocks 0 and 2 (base) and 3 (head): three blocks, half of each side, unfit
    (unfit,) = compare([Entry("tiny", side(2, {7}), None, pairing=Pairing(side(1, {0, 4}), "a1b2c3d"))],
                       GateConfig()).comparisons
    assert unfit.verdict is Verdict.ERROR
    assert unfit.reason.startswith("runner unfit: 6 of 12 head repeat(s) and 6 of 12 base repeat(s) left out "
                                   "(block 0, 2, 3: thermal (hw_thermal_slowdown)), more than the 25% that may be "
                                   "left out (max_left_out); a slowed-down repeat leaves its whole ABBA block out")
    (allowed,) = compare([Entry("tiny", side(2, {7}), None, pairing=Pairing(side(1, {0, 4}), "a1b2c3d"))],
                         GateConfig(max_left_out=0.5)).comparisons
    assert allowed.verdict is not Verdict.ERROR


def test_without_a_clock_on_either_side_nothing_is_judged_by_it() -> None:
    cpu = make_result(seed=1)  # no telemetry: no clock
    baseline = stored([sampled(t4(clocks=[1590])) for _ in range(4)])
    assert judge(make_result(seed=2), baseline).left_out == ()
    old = updated_baseline(None, cpu, "r", append=False, now=NOW)
    assert old.sm_clock_mhz() is None
    current = with_telemetry(make_result(seed=2, repeats=3), [sampled(t4(clocks=[1000])) for _ in range(3)])
    assert judge(current, old).left_out == ()
    assert judge(current, old).clocks == {"current": 1000}


# ---------------------------------------------------------------- which GPU: by UUID


def test_cuda_visible_devices_1_picks_the_second_gpu_by_its_uuid() -> None:
    first = FakeGpu("GPU-11111111-2222-3333-4444-555555555555", clocks=[1590], pci="0000:3b:00.0")
    second = FakeGpu("GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee", clocks=[1200], pci="0000:af:00.0",
                     events=[HW_THERMAL])
    with gpus(first, second, visible="1") as nvml:
        summary = sample(TelemetrySampler("cuda"), 3)
    gpu = summary["gpu"]
    assert nvml.opened == ["uuid GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"]
    assert gpu["device"] == {"uuid": "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee", "found_by": "uuid", "mig": False,
                             "cuda_device": 0}
    assert gpu["sm_clock_mhz"]["median"] == 1200 and gpu["slowdown_reasons"] == ["hw_thermal_slowdown"]
    assert first.calls == {}  # GPU 0, which index 0 would have opened, was never read
    # with both visible, CUDA's device 0 is NVML's first
    with gpus(first, second) as nvml:
        assert sample(TelemetrySampler("cuda"), 1)["gpu"]["sm_clock_mhz"]["median"] == 1590


def test_without_a_uuid_the_pci_bus_id_and_never_a_guess_between_two_gpus() -> None:
    first = FakeGpu("GPU-1", clocks=[1590], pci="0000:3b:00.0")
    second = FakeGpu("GPU-2", clocks=[1200], pci="0000:af:00.0")
    with gpus(first, second, uuid=False, visible="1") as nvml:
        gpu = sample(TelemetrySampler("cuda"), 1)["gpu"]
    assert nvml.opened == ["pci 0000:af:00.0"] and gpu["device"]["found_by"] == "pci_bus_id"
    assert gpu["sm_clock_mhz"]["median"] == 1200
    with gpus(first, second, uuid=False, pci=False, visible="1"):
        summary = sample(TelemetrySampler("cuda"), 1)
    assert summary["gpu"]["sm_clock_mhz"]["median"] is None and summary["gpu"]["throttled"] is None
    assert "cannot tell which GPU CUDA device 0 is" in summary["unavailable"]["gpu"]
    assert summary["gpu"]["error"] == summary["unavailable"]["gpu"]
    with gpus(second, uuid=False, pci=False):  # a single GPU is not a guess
        assert sample(TelemetrySampler("cuda"), 1)["gpu"]["device"]["found_by"] == "the only GPU"


def test_a_mig_instance_is_found_by_its_uuid_and_says_what_is_the_whole_gpus() -> None:
    whole = FakeGpu("GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee", clocks=[1410], events=[CAP])
    instance = FakeGpu("MIG-99999999-8888-7777-6666-555555555555", used=3 << 30, parent=whole)
    with gpus(instance, whole) as nvml:
        summary = sample(TelemetrySampler("cuda"), 4)
    gpu = summary["gpu"]
    assert nvml.opened == ["uuid GPU-99999999-8888-7777-6666-555555555555",
                           "uuid MIG-99999999-8888-7777-6666-555555555555"]
    assert gpu["device"]["mig"] is True and "MIG instance" in gpu["limited"] and "whole GPU" in gpu["limited"]
    assert gpu["memory_used_bytes"]["max"] == 3 << 30  # the instance's
    assert gpu["sm_clock_mhz"]["median"] == 1410 and gpu["power_cap_share"] == 1.0  # the whole GPU's
    assert gpu["util_percent"]["mean"] is None and "MIG" in gpu["unavailable"]["util_percent"]
    assert gpu["errors"] == {} and gpu["throttled"] is False


# ---------------------------------------------------------------- NVML failing mid-run


def test_an_nvml_call_failing_mid_run_leaves_that_signal_null_with_the_reason() -> None:
    gpu_ = t4(clocks=[1590], events=POWER_CAPPED, fail={"nvmlDeviceGetClockInfo": 3})
    with gpus(gpu_):
        summary = sample(TelemetrySampler("cuda"), 10)
    gpu = summary["gpu"]
    reason = "nvmlDeviceGetClockInfo failed at sample 4: NVMLError_GpuIsLost: GPU is lost"
    assert gpu["sm_clock_mhz"] == {"min": None, "median": None, "max": None}
    assert gpu["errors"] == {"sm_clock_mhz": reason} and gpu["error"] == reason
    assert f"Nvml: {reason}" in summary["errors"]
    assert gpu_.calls["nvmlDeviceGetClockInfo"] == 4  # not asked again once it failed
    assert gpu["samples"] == 10 and gpu["util_percent"]["mean"] == 97  # the other signals went on
    assert gpu["power_cap_share"] == 0.8 and gpu["throttled"] is False
    rep = dataclasses.replace(make_result(repeats=1).repeats[0], telemetry=summary)
    assert rep.sm_clock_mhz is None and not rep.throttled  # not judged by a clock it does not have


def test_clock_events_failing_mid_run_keep_a_slowdown_seen_and_otherwise_say_not_known() -> None:
    seen = sampled(t4(events=[CAP, HW_THERMAL, CAP], fail={"nvmlDeviceGetCurrentClocksEventReasons": 3}))["gpu"]
    assert seen["throttled"] is True and seen["slowdown_reasons"] == ["hw_thermal_slowdown"]
    assert seen["power_cap_share"] is None and seen["clock_event_shares"] is None
    unseen = sampled(t4(events=[CAP], fail={"nvmlDeviceGetCurrentClocksEventReasons": 3}))["gpu"]
    assert unseen["throttled"] is None and unseen["slowdown_reasons"] == []
    assert unseen["errors"]["clock_events"].startswith("nvmlDeviceGetCurrentClocksEventReasons failed at sample 4")
    at_once = sampled(t4(fail={"nvmlDeviceGetCurrentClocksEventReasons": 0}))["gpu"]
    assert at_once["throttled"] is None and at_once["slowdown_reasons"] is None


def test_the_run_goes_on_when_every_nvml_call_fails_mid_run() -> None:
    every = {name: 2 for name in ("nvmlDeviceGetUtilizationRates", "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetClockInfo",
                                  "nvmlDeviceGetTemperature", "nvmlDeviceGetPowerUsage",
                                  "nvmlDeviceGetCurrentClocksEventReasons")}
    gpu_ = t4(fail=every)
    with gpus(gpu_) as nvml:
        sampler = TelemetrySampler("cuda", interval_s=0.01)
        sampler.start()
        time.sleep(0.2)
        sampler.stop()  # the thread ends, NVML is shut down
        summary = sampler.summary()
    assert nvml.shutdowns == 1
    assert summary["samples"] >= 3 and summary["gpu"]["samples"] == summary["samples"]
    gpu = summary["gpu"]
    assert set(gpu["errors"]) == {"util_percent", "memory_used_bytes", "sm_clock_mhz", "temperature_c", "power_w",
                                  "clock_events"}
    assert all(v is None for name in ("util_percent", "memory_used_bytes", "sm_clock_mhz", "temperature_c", "power_w")
               for v in gpu[name].values())
    assert gpu["throttled"] is None and gpu["error"].endswith("at sample 3: NVMLError_GpuIsLost: GPU is lost")
    assert summary["cpu"]["process_percent"]["mean"] is not None  # the CPU side went on


# ---------------------------------------------------------------- the process tree's memory


ALLOCATE = "import sys; x = b'x' * (96 << 20); print('ready', flush=True); sys.stdin.read()"


def test_the_peak_of_the_trees_summed_rss_counts_the_workers() -> None:
    sampler = TelemetrySampler("cpu")
    alone = sample(sampler, 2)["cpu"]["peak_tree_rss_bytes"]
    own = sampler.summary()["cpu"]["rss_bytes"]["max"]
    assert alone is not None and alone >= own * 0.9
    worker = subprocess.Popen([sys.executable, "-c", ALLOCATE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert worker.stdout is not None and worker.stdout.readline().strip() == "ready"
        sampler = TelemetrySampler("cpu")
        summary = sample(sampler, 2)
    finally:
        worker.communicate("")
    peak = summary["cpu"]["peak_tree_rss_bytes"]
    assert peak is not None and peak >= summary["cpu"]["rss_bytes"]["max"] + (96 << 20)
    assert "peak_tree_rss_bytes" not in summary["unavailable"]


def test_a_tree_rss_that_cannot_be_read_is_null_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: H._TreeMemory, pid: int, process: Any) -> int:
        raise PermissionError("statm: refused")

    monkeypatch.setattr(H._TreeMemory, "_rss", refuse)
    summary = sample(TelemetrySampler("cpu"), 2)
    assert summary["cpu"]["peak_tree_rss_bytes"] is None
    assert "refused" in summary["unavailable"]["peak_tree_rss_bytes"]


# ---------------------------------------------------------------- files written before


def test_an_old_result_that_only_hit_the_power_cap_is_kept_and_one_throttled_without_a_reason_is_left_out() -> None:
    capped = {"gpu": {"throttled": True, "throttle_reasons": ["sw_power_cap"]}}
    thermal = {"gpu": {"throttled": True, "throttle_reasons": ["hw_thermal_slowdown", "sw_power_cap"]}}
    unknown = {"gpu": {"throttled": True}}
    reps = {name: dataclasses.replace(make_result(repeats=1).repeats[0], telemetry=t)
            for name, t in (("capped", capped), ("thermal", thermal), ("unknown", unknown))}
    assert not reps["capped"].throttled
    assert reps["thermal"].throttle_reason == "thermal (hw_thermal_slowdown)"
    assert reps["unknown"].throttled and reps["unknown"].slowdown_reasons is None
    assert reps["unknown"].throttle_reason == ("throttled, reason not recorded (an older perfgate counted the "
                                               "power cap too)")
    current = with_telemetry(make_result(seed=2, repeats=4), [capped, unknown, capped, capped])
    c = judge(current, stored([{}, {}, {}]))
    assert c.left_out == ("1 of 4 current repeat(s) left out: throttled, reason not recorded (an older perfgate "
                          "counted the power cap too) in repeat 2",)


def test_an_old_baseline_loads_and_its_throttled_repeats_stay_left_out_saying_why(tmp_path: Path) -> None:
    # schema 1, as written before the reasons, the clock and the share were kept
    data = json.loads((Path(__file__).parent / "fixtures" / "schema_v1" / "baseline-tiny.json").read_text())
    for i, rep in enumerate(data["recordings"][0]["repeats"]):
        for key in ("slowdown_reasons", "sm_clock_mhz", "power_cap_share"):
            del rep[key]
        rep["throttled"] = i == 1
    old = baseline_from_dict(json.loads(json.dumps(data)))
    r = old.recordings[0].repeats[1]
    assert r.throttled and r.slowdown_reasons is None and r.sm_clock_mhz is None
    kept, dropped = old.without_throttled()
    assert dropped.messages == ("1 baseline repeat(s) left out: throttled, reason not recorded (an older perfgate "
                                "counted the power cap too); a rebaseline records the reasons",)
    assert len(kept.recordings[0].repeats) == 3


def test_a_new_baseline_keeps_the_reasons_the_clock_and_the_share(tmp_path: Path) -> None:
    events = list(POWER_CAPPED)
    events[3] = CAP | SW_THERMAL
    baseline = stored([sampled(t4(events=events, clocks=[1500])), sampled(t4(events=POWER_CAPPED, clocks=[1560]))])
    path = save_baseline(baseline, tmp_path)
    written = json.loads(path.read_text())["recordings"][0]["repeats"]
    assert [(r["slowdown_reasons"], r["sm_clock_mhz"], r["power_cap_share"]) for r in written] == [
        (["sw_thermal_slowdown"], 1500, 0.8), ([], 1560, 0.8)]
    assert all("throttled" not in r for r in written)  # schema 2: the reasons say it
    again = [(r.throttled, r.slowdown_reasons, r.sm_clock_mhz, r.power_cap_share)
             for r in load_baseline(path).recordings[0].repeats]
    assert again == [(True, ("sw_thermal_slowdown",), 1500, 0.8), (False, (), 1560, 0.8)]
    for bad in ({"power_cap_share": 1.5}, {"sm_clock_mhz": -1}, {"slowdown_reasons": [3]}, {"sm_clock_mhz": True}):
        data = baseline.to_dict()
        data["recordings"][0]["repeats"][0].update(bad)
        with pytest.raises(ValueError, match=next(iter(bad))):
            baseline_from_dict(data)


def test_the_terminal_line_survives_a_signal_that_failed() -> None:
    import dataclasses

    from factories import make_result

    from perfgate.report.terminal import telemetry_lines

    gpu = {"util_percent": None, "sm_clock_mhz": {"median": 1590.0}, "power_cap_share": 0.8,
           "errors": ["nvmlDeviceGetUtilizationRates failed at sample 4: GPU is lost"]}
    result = make_result("tiny", repeats=2)
    result = dataclasses.replace(result, repeats=tuple(dataclasses.replace(r, telemetry={"gpu": gpu})
                                                       for r in result.repeats))
    (line,) = [x for x in telemetry_lines(result) if x.startswith("telemetry gpu")]
    assert "utilisation not read" in line and "1590 MHz" in line and "power cap 80%" in line
