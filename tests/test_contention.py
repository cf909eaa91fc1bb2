"""Contention: the policy on constructed telemetry, and the sampler against real load.

The real tests compare shares of the CPUs, never durations. This machine is shared, so
what another process used is checked against a ground truth read from that process's own
CPU times, which holds whatever else runs beside the test.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest
from conftest import cuda_available
from factories import make_repeat

from perfgate.analysis.contention import (
    DEFAULT_MAX_OTHER_CPU_SHARE,
    ContentionPolicy,
    contention,
    contention_known,
    contention_unknown,
)
from perfgate.measure import telemetry_gpu as G
from perfgate.measure import telemetry_host as H
from perfgate.measure.telemetry import TelemetrySampler
from perfgate.model.result import other_cpu_share, other_gpu_processes, repeat_from_dict

BURN = "while True: pass"


def shares(median: float, p90: float | None = None, samples: int = 41) -> dict:
    p90 = median if p90 is None else p90
    return {"median": median, "p90": p90, "max": max(median, p90), "mean": median, "samples": samples}


def telemetry(cpu: dict | None = None, gpu_processes: dict | None = None, *, cuda: bool = False,
              unavailable: dict | None = None, cpus: int = 8) -> dict:
    return {
        "samples": 41, "interval_s": 0.1, "sampled_s": 4.1,
        "gpu": {"throttled": False} if cuda else None,
        "cpu": {},
        "machine": {"other_cpu_share": cpu, "tree_cpu_share": shares(0.5), "tree_processes": 3,
                    "cpus": cpus, "cpu_scope": "machine", "other_gpu_processes": gpu_processes},
        "unavailable": unavailable or {},
        "errors": [],
    }


def gpu_others(*pids: int) -> dict:
    return {"count": len(pids), "pids": list(pids), "identified_by": "pid", "samples": 9}


# ---------------------------------------------------------------- the policy


def test_the_policy_validates_itself() -> None:
    assert ContentionPolicy().max_other_cpu_share == DEFAULT_MAX_OTHER_CPU_SHARE == 0.10
    assert ContentionPolicy().allow_other_gpu_processes is False
    ContentionPolicy(max_other_cpu_share=1)  # never flags the CPU
    for bad in (0, 0.0, -0.1, 1.01, 25, float("nan"), float("inf"), "0.2", None, True):
        with pytest.raises(ValueError, match="max_other_cpu_share"):
            ContentionPolicy(max_other_cpu_share=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="allow_other_gpu_processes"):
        ContentionPolicy(allow_other_gpu_processes="no")  # type: ignore[arg-type]
    with pytest.raises(dataclasses.FrozenInstanceError):
        ContentionPolicy().max_other_cpu_share = 0.5  # type: ignore[misc]


def test_a_sustained_load_above_the_limit_is_contention_with_its_evidence() -> None:
    t = telemetry(shares(0.63), cpus=2)
    assert contention(t, ContentionPolicy(max_other_cpu_share=0.25)) == (
        "other processes used 63% of the 2 CPUs during the window (median of 41 samples; limit 25%)")
    assert contention(t) is not None and contention_known(t)
    assert contention(t, ContentionPolicy(max_other_cpu_share=0.7)) is None


def test_the_median_decides_so_a_short_burst_is_not_contention() -> None:
    burst = telemetry(shares(0.03, p90=0.9))  # 10-20% of the window under heavy load
    assert contention(burst) is None and contention_known(burst)
    sustained = telemetry(shares(0.5, p90=0.55))
    assert contention(sustained) is not None


def test_a_share_just_over_the_limit_shows_the_digit_that_tells_them_apart() -> None:
    reason = contention(telemetry(shares(0.1004)))
    assert reason is not None and "10.0% of the 8 CPUs" in reason and "limit 10.0%" in reason
    assert contention(telemetry(shares(0.10))) is None  # at the limit is allowed


def test_other_gpu_processes_are_contention_unless_allowed() -> None:
    t = telemetry(shares(0.01), gpu_others(4242, 4343), cuda=True)
    assert contention(t) == "2 other processes on the GPU (pids 4242, 4343)"
    assert contention(t, ContentionPolicy(allow_other_gpu_processes=True)) is None
    one = telemetry(shares(0.01), gpu_others(7), cuda=True)
    assert contention(one) == "1 other process on the GPU (pid 7)"
    counted = telemetry(shares(0.01), {"count": 1, "pids": None, "listed_pids": [10, 11],
                                       "identified_by": "count", "samples": 3}, cuda=True)
    assert contention(counted) == "1 other process on the GPU (pids not visible from this pid namespace)"
    alone = telemetry(shares(0.01), gpu_others(), cuda=True)
    assert contention(alone) is None and contention_known(alone)


def test_both_reasons_make_one_line() -> None:
    reason = contention(telemetry(shares(0.5), gpu_others(9), cuda=True))
    assert reason is not None and "\n" not in reason
    assert reason.startswith("other processes used 50%") and reason.endswith("1 other process on the GPU (pid 9)")


def test_unknown_telemetry_is_not_contention_but_says_it_is_unknown() -> None:
    for t in (None, {}, {"gpu": None, "cpu": {}, "unavailable": {}, "errors": []}):  # the last: an old result
        assert contention(t) is None
        assert contention_known(t) is False
        assert contention_unknown(t)
    assert contention_unknown(None) == "telemetry was not sampled"
    assert contention_unknown({"gpu": None}) == "the result predates contention telemetry"
    short = telemetry(None, unavailable={"other_cpu_share": "the window (0.040 s) held no interval"})
    assert contention(short) is None and not contention_known(short)
    assert "the window (0.040 s)" in contention_unknown(short)


def test_on_cuda_the_gpu_check_must_be_known_too() -> None:
    nvml_failed = telemetry(shares(0.01), None, cuda=True,
                            unavailable={"other_gpu_processes": "NVMLError_NoPermission: Insufficient Permissions"})
    assert contention(nvml_failed) is None
    assert not contention_known(nvml_failed)
    assert "NoPermission" in contention_unknown(nvml_failed)
    assert contention_known(nvml_failed, ContentionPolicy(allow_other_gpu_processes=True))
    # a known contention is known even when the other check is not
    busy = telemetry(shares(0.9), None, cuda=True, unavailable={"other_gpu_processes": "x"})
    assert contention(busy) is not None and contention_known(busy)
    # on the CPU no GPU check applies
    cpu_run = telemetry(shares(0.01), None)
    assert contention_known(cpu_run) and contention_unknown(cpu_run) is None


def test_malformed_values_read_as_unknown_never_as_zero() -> None:
    for bad in ({"median": None}, {"median": "0.5"}, {"median": float("nan")}, {"median": True}, [0.5], 0.5):
        t = telemetry(None)
        t["machine"]["other_cpu_share"] = bad
        assert other_cpu_share(t) is None and contention(t) is None and not contention_known(t)
    t = telemetry(shares(0.0), {"count": -1, "pids": []}, cuda=True)
    assert other_gpu_processes(t) is None and not contention_known(t)


def test_a_repeat_reads_its_other_cpu_share_and_old_files_still_load() -> None:
    old = make_repeat(0)
    assert old.telemetry is None and old.other_cpu_share is None
    old_file = old.to_dict() | {"telemetry": {"gpu": None, "cpu": {}, "unavailable": {}, "errors": []}}
    loaded = repeat_from_dict(json.loads(json.dumps(old_file)), "repeats[0]")
    assert loaded.other_cpu_share is None and not contention_known(loaded.telemetry)
    new = dataclasses.replace(old, telemetry=telemetry(shares(0.42)))
    again = repeat_from_dict(json.loads(json.dumps(new.to_dict())), "repeats[0]")
    assert again.other_cpu_share == 0.42
    assert contention(again.telemetry) is not None


# ---------------------------------------------------------------- sampler parts, without load


def test_time_found_late_is_credited_back_to_the_intervals_it_ran_in() -> None:
    share = H._CpuShare.__new__(H._CpuShare)
    # three 1 s intervals already recorded, each with 1 s of our time
    share.intervals = [[0.0, 1.0, 2.0, 2.0, 1.0], [1.0, 2.0, 2.0, 2.0, 1.0], [2.0, 3.0, 2.0, 2.0, 1.0]]
    current = [3.0, 4.0, 2.0, 2.0, 1.0 + 2.0]  # a child found now, started at t=2, used 2 s in all
    share._credit_back(current, 2.0, since=2.0)
    assert [round(i[4], 6) for i in share.intervals] == [1.0, 1.0, 2.0]
    assert current[4] == pytest.approx(2.0)
    fresh = [4.0, 5.0, 2.0, 2.0, 1.5]
    share._credit_back(fresh, 0.5, since=4.5)  # started inside the current interval: nothing moves
    assert fresh[4] == 1.5


class _FakeNvml:
    def __init__(self, compute: list[int], graphics: list[int] = (), fail: Exception | None = None) -> None:
        self.compute, self.graphics, self.fail = compute, list(graphics), fail

    def _list(self, pids: list[int]) -> list:
        if self.fail is not None:
            raise self.fail
        return [type("P", (), {"pid": p, "usedGpuMemory": 1})() for p in pids]

    def nvmlDeviceGetComputeRunningProcesses(self, handle: object) -> list:  # noqa: N802 - NVML's name
        return self._list(self.compute)

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: object) -> list:  # noqa: N802
        return self._list(self.graphics)


def _gpu_processes(fake: _FakeNvml, ours: set[int]) -> G._GpuProcesses:
    nvml = type("N", (), {"nvml": fake, "handle": object()})()
    tree = type("Tree", (), {"pids": lambda self: ours})()
    return G._GpuProcesses(nvml, tree)  # type: ignore[arg-type]


def test_gpu_processes_by_pid_exclude_our_tree() -> None:
    source = _gpu_processes(_FakeNvml([100, 101, 555], graphics=[555, 777]), ours={100, 101})
    for _ in range(11):
        source.sample()
    found, reason = source.summary()
    assert reason is None
    assert found == {"count": 2, "pids": [555, 777], "identified_by": "pid", "samples": 3}


def test_gpu_processes_in_another_pid_namespace_are_counted_not_named() -> None:
    source = _gpu_processes(_FakeNvml([90001, 90002]), ours={12})
    source.sample()
    found, _ = source.summary()
    assert found is not None and found["count"] == 1 and found["pids"] is None and found["identified_by"] == "count"
    invisible = _gpu_processes(_FakeNvml([]), ours={12})
    invisible.sample()
    assert invisible.summary()[0] is None and "not even this one" in invisible.summary()[1]


def test_an_nvml_error_leaves_gpu_processes_null_with_the_reason() -> None:
    class NVMLError_NotSupported(Exception):  # noqa: N801 - as pynvml names it
        pass

    source = _gpu_processes(_FakeNvml([1], fail=NVMLError_NotSupported("Not Supported")), ours={1})
    with pytest.raises(NVMLError_NotSupported):
        source.sample()
    assert source.summary() == (None, "NVMLError_NotSupported: Not Supported")


def test_a_cpu_share_that_cannot_be_read_is_null_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: H._CpuStat) -> tuple[float, float]:
        raise PermissionError("/proc/stat: refused")

    monkeypatch.setattr(H._CpuStat, "read", refuse)
    sampler = TelemetrySampler("cpu")
    sampler.start()
    sampler.stop()
    summary = sampler.summary()
    assert summary["machine"]["other_cpu_share"] is None
    assert "refused" in summary["unavailable"]["other_cpu_share"]
    assert summary["cpu"]["process_percent"] is not None  # the rest still sampled


def test_a_window_shorter_than_one_interval_is_null_with_the_reason() -> None:
    sampler = TelemetrySampler("cpu")
    sampler.start()
    sampler.stop()
    summary = sampler.summary()
    assert summary["machine"]["other_cpu_share"] is None
    assert "held no interval" in summary["unavailable"]["other_cpu_share"]
    assert set(summary) >= {"samples", "interval_s", "sampled_s", "gpu", "cpu", "unavailable", "errors"}


# ---------------------------------------------------------------- the sampler against real load


def cpu_seconds(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system
    return total


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


@contextmanager
def burners(n: int, *, detached: bool = True) -> Iterator[list[int]]:
    """``n`` busy Python processes; ``detached`` ones are not descendants of this process."""
    procs: list[subprocess.Popen] = []
    pids: list[int] = []
    try:
        for _ in range(n):
            if detached:  # a shell starts it in the background and exits: it is reparented
                shell = subprocess.run(["sh", "-c", f'"{sys.executable}" -c "{BURN}" >/dev/null 2>&1 & echo $!'],
                                       capture_output=True, text=True, check=True)
                pids.append(int(shell.stdout.strip()))
            else:
                procs.append(subprocess.Popen([sys.executable, "-c", BURN]))
                pids.append(procs[-1].pid)
        yield pids
    finally:
        for pid in pids:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        for proc in procs:
            proc.wait()


def sample_for(seconds: float, work=None) -> dict:
    sampler = TelemetrySampler("cpu")
    sampler.start()
    try:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if work is not None:
                work()
            else:  # this thread idles, so the tree's share is the sampler's and the children's
                time.sleep(0.01)
    finally:
        sampler.stop()
    return sampler.summary()


def share_of(pids: list[int], run):
    """What ``run()`` returns, and the share of the CPUs ``pids`` used meanwhile (the ground truth)."""
    before, wall0 = cpu_seconds(pids), time.monotonic()
    out = run()
    return out, (cpu_seconds(pids) - before) / ((time.monotonic() - wall0) * cores())


@pytest.mark.slow
def test_a_burner_outside_the_tree_is_other_load_and_one_inside_is_ours() -> None:
    n = cores()
    with burners(n, detached=True) as pids:
        outside, truth = share_of(pids, lambda: sample_for(1.5))
    assert truth > 0.05, f"the burners hardly ran ({truth:.2f}): nothing to check against"
    other = outside["machine"]["other_cpu_share"]
    assert other["samples"] >= 8
    # the burners' own CPU time is inside what was measured as other processes' use
    assert other["mean"] >= 0.7 * truth, (other, truth)
    assert outside["machine"]["tree_processes"] == 1
    reason = contention(outside)
    assert reason is not None and reason.startswith("other processes used"), outside["machine"]

    with burners(n, detached=False) as pids:
        inside, truth = share_of(pids, lambda: sample_for(1.5))
    assert truth > 0.05, f"the burners hardly ran ({truth:.2f}): nothing to check against"
    # the same burners as children of this process are this process tree's, not foreign
    assert inside["machine"]["tree_processes"] >= 1 + n
    assert inside["machine"]["tree_cpu_share"]["mean"] >= 0.7 * truth, (inside["machine"], truth)


@pytest.mark.slow
def test_a_grandchild_found_by_the_slower_walk_is_ours_too() -> None:
    # The child is found when the sampler starts; half a second later it forks the burner,
    # which only the full walk (every 10 samples) sees: its time is credited back.
    code = f"import subprocess, sys, time; time.sleep(0.5); subprocess.run([sys.executable, '-c', '{BURN}'])"
    child = subprocess.Popen([sys.executable, "-c", code])
    try:
        wall0 = time.monotonic()
        summary = sample_for(2.5)
        grandchildren = [p.pid for p in psutil.Process(child.pid).children()]
        truth = cpu_seconds(grandchildren) / ((time.monotonic() - wall0) * cores())
    finally:
        for p in psutil.Process(child.pid).children():
            p.kill()
        child.kill()
        child.wait()
    assert len(grandchildren) == 1 and summary["machine"]["tree_processes"] >= 3
    assert truth > 0.05, f"the burner hardly ran ({truth:.2f})"
    assert summary["machine"]["tree_cpu_share"]["mean"] >= 0.7 * truth, (summary["machine"], truth)


@pytest.mark.slow
def test_dataloader_workers_are_ours_not_foreign() -> None:
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader, Dataset

    class Busy(Dataset):
        def __len__(self) -> int:
            return 10_000

        def __getitem__(self, i: int):
            end = time.process_time() + 0.02  # 20 ms of CPU per sample
            while time.process_time() < end:
                pass
            return torch.zeros(4)

    loader = DataLoader(Busy(), batch_size=4, num_workers=2, prefetch_factor=8)
    me = psutil.Process()
    state: dict = {}

    def work() -> None:
        if "it" not in state:  # the workers are forked inside the window: found by the light look
            state["it"] = iter(loader)
            state["workers"] = [c.pid for c in me.children()]
            state["before"], state["t0"] = cpu_seconds(state["workers"]), time.monotonic()
        next(state["it"])

    summary = sample_for(2.5, work)
    truth = (cpu_seconds(state["workers"]) - state["before"]) / ((time.monotonic() - state["t0"]) * cores())
    del state["it"]
    machine = summary["machine"]
    assert len(state["workers"]) == 2 and machine["tree_processes"] >= 3
    assert truth > 0.05, f"the workers hardly ran ({truth:.2f})"
    # counted as foreign, the workers would leave this tree with the main thread's few percent
    assert machine["tree_cpu_share"]["mean"] >= 0.7 * truth, (machine, truth)


def run_tiny(tiny_path: Path, tmp_path: Path, **overrides):
    from perfgate.measure.runner import measure
    from perfgate.model.job import Job
    from perfgate.store.discovery import discover

    tmp_path.mkdir(parents=True, exist_ok=True)
    workload = discover([tiny_path], project_dir=tmp_path).get("tiny")
    params = workload.resolve("cpu", {k: str(v) for k, v in overrides.items()})
    outcome = measure([Job(workload, params, overrides)], device="cpu", repeats=1,
                      cache_dir=tmp_path / "cache", out_dir=tmp_path / "out", project_dir=tmp_path)
    assert not outcome.errors, {k: (e.message, e.detail) for k, e in outcome.errors.items()}
    return outcome.results["tiny"].repeats[0]


@pytest.mark.slow
def test_a_repeat_measured_beside_burners_is_contended(tiny_path: Path, tmp_path: Path) -> None:
    knobs = {"steps": 40, "width": 32, "input_size": 32}
    quiet = run_tiny(tiny_path, tmp_path / "quiet", **knobs)
    with burners(cores()) as pids:
        busy, truth = share_of(pids, lambda: run_tiny(tiny_path, tmp_path / "busy", **knobs))
    assert contention_known(quiet.telemetry) and contention_known(busy.telemetry)
    assert truth > 0.05, f"the burners hardly ran ({truth:.2f})"
    assert busy.telemetry["machine"]["other_cpu_share"]["mean"] >= 0.7 * truth
    reason = contention(busy.telemetry)
    assert reason is not None and reason.startswith("other processes used"), reason
    if quiet.other_cpu_share < 0.35:  # else the machine was too busy already to leave room for the margin
        assert busy.other_cpu_share >= quiet.other_cpu_share + 0.25, (quiet.other_cpu_share, busy.other_cpu_share)


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="needs a CUDA device")
def test_another_process_on_the_gpu_is_named_and_our_own_child_is_not() -> None:
    import torch

    torch.zeros(1, device="cuda")  # this process holds a context, as in a measured window
    hold = "import time, torch; torch.zeros(1, device='cuda'); print('ready', flush=True); time.sleep(60)"
    stranger = subprocess.run(["sh", "-c", f'"{sys.executable}" -c "{hold}" >/dev/null 2>&1 & echo $!'],
                              capture_output=True, text=True, check=True)
    stranger_pid = int(stranger.stdout.strip())
    own = subprocess.Popen([sys.executable, "-c", hold], stdout=subprocess.PIPE, text=True)
    try:
        assert own.stdout is not None and own.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 60
        import pynvml

        pynvml.nvmlInit()
        handle, _ = G._open_device(pynvml, G._cuda_identity(None))  # this process's GPU, by UUID
        while time.monotonic() < deadline:  # the stranger's context exists
            if len(pynvml.nvmlDeviceGetComputeRunningProcesses(handle)) >= 3:
                break
            time.sleep(0.2)
        sampler = TelemetrySampler("cuda", gpu_index=torch.cuda.current_device())
        sampler.start()
        time.sleep(1.0)
        sampler.stop()
        summary = sampler.summary()
    finally:
        own.kill()
        own.wait()
        os.kill(stranger_pid, 9)
    found = summary["machine"]["other_gpu_processes"]
    assert found is not None, summary["unavailable"]
    if found["identified_by"] == "pid":
        assert stranger_pid in found["pids"] and own.pid not in found["pids"] and os.getpid() not in found["pids"]
    assert found["count"] >= 1
    reason = contention(summary)
    assert reason is not None and "other process" in reason and "on the GPU" in reason


def test_perfgate_run_names_each_contended_repeat_with_the_other_processes_share() -> None:
    # A fresh-clone run printed "run-to-run 95.3%" with one repeat at 2047 ms while other
    # processes held half the CPUs, and said nothing of it.
    import dataclasses

    from factories import make_result

    from perfgate.analysis.summary import summarise
    from perfgate.report.terminal import run_table

    result = make_result(repeats=4, params={"batch_size": 8, "steps": 10, "input_size": 32, "precision": "fp32"})
    busy = {"machine": {"cpus": 2, "other_cpu_share": {"median": 0.52, "p90": 0.6, "max": 0.7, "mean": 0.5,
                                                        "samples": 20}}}
    quiet = {"machine": {"cpus": 2, "other_cpu_share": {"median": 0.01, "p90": 0.02, "max": 0.03, "mean": 0.01,
                                                         "samples": 20}}}
    reps = tuple(dataclasses.replace(r, telemetry=busy if r.index == 2 else quiet) for r in result.repeats)
    result = dataclasses.replace(result, repeats=reps)
    text = run_table(result, summarise(result))
    (line,) = [x for x in text.splitlines() if "contended" in x]
    assert line.startswith("repeat 3 contended: other processes used 52% of the 2 CPUs during the window "
                           "(median of 20 samples; limit 10%); its time per step ")
    assert "ms/step" in text and "median ms" in text
