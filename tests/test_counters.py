"""Exact counters: the counted run, its file, and the comparison that needs no statistics.

The tiny workloads are counted for real on the CPU. A counted run in a fresh process
costs about 10 s here (most of it importing torch on a shared two-core machine), so the
A/A figure counts the tiny workload ten times *in this process* (rebuilt and reseeded
each time, as a fresh process would) and once in a fresh process, which must give the
very same counters; the detection figures count in-process too. ``count_job``'s own path
(the process, the file, a crash as a typed failure) is tested on its own.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES, cuda_available

from perfgate.adapters.cli import main
from perfgate.analysis.counters import CounterChange, CounterThresholds, compare_counters
from perfgate.measure.counters import (
    COMPILED_EAGER_NOTE_CPU,
    COMPILED_EAGER_NOTE_CUDA,
    count_job,
    count_workload,
)
from perfgate.measure.sync_sites import forces_sync
from perfgate.model.counters import (
    COUNTERS_KIND,
    AllocatorCounts,
    CounterError,
    CounterSet,
    PhaseCounters,
    SyncSite,
    counters_from_dict,
)
from perfgate.model.errors import EXIT_ERROR, EXIT_OK, FileFormatError, WorkloadError
from perfgate.model.job import Job
from perfgate.model.workload import PHASES, Workload
from perfgate.report.counters import render_counters
from perfgate.store.counters import counters_path, load_counters, save_counters
from perfgate.store.discovery import discover

# --- helpers -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def workloads_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("counted_workloads")
    for name in ("tiny_workloads.py", "counted_workloads.py"):
        shutil.copy(FIXTURES / name, target / name)
    return target


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


def workload(directory: Path, name: str) -> Workload:
    return discover([directory], project_dir=directory).get(name)


def count(directory: Path, cache: Path, name: str = "counted", device: str = "cpu", **extra: Any) -> CounterSet:
    w = workload(directory, name)
    params = w.resolve(device, {k: str(v) for k, v in extra.items()})
    return count_workload(w, params, device, cache_dir=cache)


def count_compiled(directory: Path, cache: Path, **extra: Any) -> CounterSet:
    """A compiling workload counted in this process: dynamo's caches are emptied first, as
    a fresh process would have them (its counters are read as differences anyway)."""
    import torch

    torch._dynamo.reset()
    return count(directory, cache, compile=True, **extra)


def line_of(path: Path, text: str) -> int:
    lines = [i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line]
    assert len(lines) == 1, lines
    return lines[0]


def failures(changes: list[CounterChange]) -> dict[tuple[str, str], CounterChange]:
    return {(c.phase, c.counter): c for c in changes if c.failed}


# --- A/A -----------------------------------------------------------------------------


@pytest.mark.slow
def test_aa_the_same_code_counted_ten_times_gives_identical_counters(workloads_dir: Path, cache_dir: Path) -> None:
    runs = [count(workloads_dir, cache_dir, name="tiny") for _ in range(10)]
    first = runs[0]
    assert first.total("ops") and first.total("flops")  # something was counted
    for other in runs[1:]:
        assert other.counters_dict() == first.counters_dict()
        assert compare_counters(first, other) == []
    # and a fresh process, the way the gate counts, gives the very same counters
    w = workload(workloads_dir, "tiny")
    outcome = count_job(Job(w, w.resolve("cpu"), {}), "cpu", cache_dir)
    assert outcome.ok, outcome.error
    assert outcome.counters is not None
    assert outcome.counters.counters_dict() == first.counters_dict()
    assert not compare_counters(first, outcome.counters).failed


# --- detection -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def base(workloads_dir: Path, cache_dir: Path) -> CounterSet:
    return count(workloads_dir, cache_dir)


def test_an_item_in_forward_fails_as_a_new_host_synchronisation_naming_the_line(
        workloads_dir: Path, cache_dir: Path, base: CounterSet) -> None:
    head = count(workloads_dir, cache_dir, sync_in_forward=True)
    changes = compare_counters(base, head)
    assert changes.failed
    sync = failures(changes)[("forward", "syncs")]
    line = line_of(workloads_dir / "counted_workloads.py", "x.sum().item()")
    assert sync.reason.startswith("1 new host synchronisation per step in forward: ")
    assert sync.reason.endswith(f"counted_workloads.py:{line}")
    assert (sync.before, sync.after) == (0, 1)
    assert any("aten::_local_scalar_dense" in c for c in sync.changed)
    # the site, as recorded: once per counted step, from that line
    (site,) = head.phases["forward"].syncs
    assert site.call == "aten::_local_scalar_dense" and site.count == head.steps
    assert site.location.endswith(f"counted_workloads.py:{line}")
    # no other phase gained a synchronisation
    assert {c.phase for c in changes if c.counter == "syncs"} == {"forward"}


def test_float64_activations_fail_on_copies_and_conversions(workloads_dir: Path, cache_dir: Path,
                                                           base: CounterSet) -> None:
    head = count(workloads_dir, cache_dir, float64=True)
    failed = failures(compare_counters(base, head))
    assert ("forward", "copies") in failed and ("backward", "copies") in failed
    forward = failed[("forward", "copies")]
    assert "aten::_to_copy +2" in forward.changed
    assert "dtype conversions 0 → 2" in forward.reason
    assert head.phases["forward"].dtype_conversions == 2 * head.steps
    assert base.phases["forward"].flops == head.phases["forward"].flops  # the same shapes: the copies tell


def test_a_per_parameter_optimizer_loop_fails_on_the_operator_count(workloads_dir: Path, cache_dir: Path,
                                                                   base: CounterSet) -> None:
    head = count(workloads_dir, cache_dir, foreach=False)
    changes = compare_counters(base, head)
    failed = failures(changes)
    assert set(failed) == {("optimizer", "ops")}
    ops = failed[("optimizer", "ops")]
    assert "the CPU stand-in for kernel launches" in ops.reason
    assert ops.after is not None and ops.before is not None and ops.after > 2 * ops.before
    assert any(c.startswith("aten::add_ +") for c in ops.changed)
    assert any(c.startswith("aten::_foreach_add_ -") for c in ops.changed)
    # turned off, the same change is still reported but fails nothing
    quiet = compare_counters(base, head, CounterThresholds(enabled=frozenset({"syncs", "flops"})))
    assert quiet and not quiet.failed


def test_a_scalar_read_in_the_data_wait_is_no_synchronisation(workloads_dir: Path, cache_dir: Path,
                                                             base: CounterSet) -> None:
    from perfgate.measure.inject import HOST_PHASES as INJECTED_ON_THE_HOST
    from perfgate.model.counters import HOST_PHASES
    from perfgate.model.workload import PHASE_TABLE

    # one table says which phases work on host tensors: the counters and the injected delays read it
    assert HOST_PHASES == INJECTED_ON_THE_HOST == {p.name for p in PHASE_TABLE if p.host}
    head = count(workloads_dir, cache_dir, sync_in_data=True)
    assert head.phases["data_wait"].ops["aten::_local_scalar_dense"] == head.steps * 8  # one per sample
    assert head.phases["data_wait"].syncs == ()
    changes = compare_counters(base, head)
    assert [c.counter for c in changes] == ["ops"] and not changes.failed  # reported, not failed


def test_added_parameters_under_adamw_bring_no_new_synchronisation(workloads_dir: Path, cache_dir: Path) -> None:
    """AdamW reads its step count, a host tensor on every device, with .item() per
    parameter: torch's own host-side scalar, no synchronisation, and not the workload's."""
    before = count(workloads_dir, cache_dir, optimizer="adamw")
    after = count(workloads_dir, cache_dir, optimizer="adamw", extra_layer=True)
    assert after.phases["optimizer"].ops["aten::_local_scalar_dense"] > before.phases["optimizer"].ops[
        "aten::_local_scalar_dense"] > 0  # the .item() calls are there, and more of them
    assert before.phases["optimizer"].syncs == () and after.phases["optimizer"].syncs == ()
    changes = compare_counters(before, after)
    assert "syncs" not in {c.counter for c in changes}
    assert ("forward", "flops") in failures(changes)  # the added layer itself is seen
    # the same .item() written in the workload's forward still counts, on this optimizer too
    synced = count(workloads_dir, cache_dir, optimizer="adamw", sync_in_forward=True)
    assert ("forward", "syncs") in failures(compare_counters(before, synced))


@pytest.mark.slow
def test_a_new_graph_break_and_a_recompile_fail(workloads_dir: Path, cache_dir: Path) -> None:
    compiled = count_compiled(workloads_dir, cache_dir)
    assert compiled.compile is not None and "compile" not in compiled.unavailable
    assert compiled.compile.graph_break_count == 0 and compiled.compile.recompiles == 0
    assert compiled.compile.compiles_in_counted_steps == 0
    assert compiled.timings["compile_s"] is not None  # a timing, apart from the counters
    # a dispatch mode makes a compiled model run its eager code: the file says so
    assert compiled.notes == (COMPILED_EAGER_NOTE_CPU,)
    assert "note: compiled: operator calls" in render_counters(compiled)
    assert count_compiled(workloads_dir, cache_dir).counters_dict() == compiled.counters_dict()

    broken = count_compiled(workloads_dir, cache_dir, graph_break=True)
    change = failures(compare_counters(compiled, broken))[("step", "graph_breaks")]
    assert change.reason.startswith("1 new graph break (0 → 1): Call to `torch._dynamo.graph_break()`")

    recompiling = count_compiled(workloads_dir, cache_dir, recompile=True)
    change = failures(compare_counters(compiled, recompiling))[("step", "recompiles")]
    assert change.reason.startswith("1 more recompile (0 → 1)")


def test_a_workload_that_does_not_compile_has_no_compile_counters(base: CounterSet) -> None:
    assert base.compile is None and base.notes == ()
    assert "does not compile" in base.unavailable["compile"]


# --- null with a reason, never 0 -----------------------------------------------------


def test_on_the_cpu_device_counters_are_null_with_a_reason(base: CounterSet) -> None:
    for phase in base.phases.values():
        assert phase.kernel_launches is None and phase.memcpy_calls is None and phase.allocator is None
    assert set(base.unavailable) == {"kernel_launches", "memcpy_calls", "allocator", "compile"}
    assert all(reason.strip() for reason in base.unavailable.values())
    data = base.to_dict()
    assert data["phases"]["forward"]["kernel_launches"] is None
    text = render_counters(base)
    assert "not counted: kernel_launches: a CPU run launches no kernels" in text
    # a null launch count is not a change, and the CPU's stand-in is the operator count
    assert compare_counters(base, base) == []


def test_a_null_counter_without_its_reason_is_refused(base: CounterSet) -> None:
    data = base.to_dict()
    del data["unavailable"]["kernel_launches"]
    with pytest.raises(ValueError, match="kernel_launches: null exactly when unavailable"):
        counters_from_dict(data)
    data = base.to_dict()
    data["phases"]["forward"]["kernel_launches"] = 0
    with pytest.raises(ValueError, match="null in some phases only"):
        counters_from_dict(data)


# --- the file ------------------------------------------------------------------------


def test_the_file_round_trips_and_is_checked(base: CounterSet, tmp_path: Path) -> None:
    path = save_counters(base, tmp_path)
    assert path == counters_path(tmp_path, "counted") == tmp_path / "counted.counters.json"
    data = json.loads(path.read_text())
    assert data["kind"] == COUNTERS_KIND and data["schema_version"] == 1
    assert load_counters(path) == base

    newer = dict(data, schema_version=2)
    path.write_text(json.dumps(newer))
    with pytest.raises(FileFormatError, match="newer than this perfgate understands"):
        load_counters(path)
    bad = json.loads(json.dumps(data))
    bad["phases"]["forward"]["ops"]["aten::addmm"] = -1
    path.write_text(json.dumps(bad))
    with pytest.raises(FileFormatError, match=r"phases\.forward\.ops\.aten::addmm"):
        load_counters(path)
    bad = json.loads(json.dumps(data))
    bad["phases"]["forward"]["flops"] += 1
    path.write_text(json.dumps(bad))
    with pytest.raises(FileFormatError, match="not the sum of flops_by_op"):
        load_counters(path)
    path.write_text("{")
    with pytest.raises(FileFormatError, match="not valid JSON"):
        load_counters(path)


# --- the comparison, on made-up counters -------------------------------------------------


def made_up(device: str = "cpu", steps: int = 2, flops: int = 1000, launches: int = 100, ops: int = 100,
            syncs: tuple[SyncSite, ...] = ()) -> CounterSet:
    cuda = device == "cuda"
    phases = {}
    for p in PHASES:
        forward = p == "forward"
        phases[p] = PhaseCounters(
            ops={"aten::mm": ops} if forward else {}, copies={}, dtype_conversions=0, device_copies=0,
            flops=flops if forward else 0, flops_by_op={"aten::mm": flops} if forward else {},
            syncs=syncs if forward else (),
            kernel_launches=(launches if forward else 0) if cuda else None,
            memcpy_calls=0 if cuda else None, allocator=AllocatorCounts(0, 0, 0, 0, 0) if cuda else None,
        )
    unavailable = {"compile": "does not compile"}
    if not cuda:
        unavailable.update({"kernel_launches": "cpu", "memcpy_calls": "cpu", "allocator": "cpu"})
    return CounterSet("w", 1, device, steps, 1, {}, phases, None, unavailable, "test")


def test_flops_fail_above_their_threshold_only() -> None:
    before = made_up(flops=100_000)
    assert not compare_counters(before, made_up(flops=100_900)).failed  # +0.9%
    changes = compare_counters(before, made_up(flops=102_000))  # +2%
    (flops,) = [c for c in changes if c.counter == "flops"]
    assert flops.failed and flops.reason.startswith("FLOPs per step in forward up 2.0%")
    assert not compare_counters(before, made_up(flops=102_000), CounterThresholds(flops_threshold=0.05)).failed
    assert not compare_counters(before, made_up(flops=50_000)).failed  # fewer is never a failure


def test_launches_gate_on_cuda_and_operator_calls_stand_in_on_the_cpu() -> None:
    before = made_up("cuda", launches=100)
    assert not compare_counters(before, made_up("cuda", launches=109)).failed
    changes = compare_counters(before, made_up("cuda", launches=111))
    assert [c.counter for c in changes if c.failed] == ["kernel_launches"]
    # on CUDA, more operator calls alone are reported, not failed
    changes = compare_counters(before, made_up("cuda", ops=200))
    assert changes and not changes.failed
    # on the CPU they are the stand-in
    assert compare_counters(made_up(ops=100), made_up(ops=111)).failed
    assert not compare_counters(made_up(ops=100), made_up(ops=110)).failed


def test_values_are_compared_per_step() -> None:
    site = SyncSite("w.py:3", "aten::_local_scalar_dense", 2)
    assert compare_counters(made_up(steps=2, ops=100, flops=1000, syncs=(site,)),
                            made_up(steps=4, ops=200, flops=2000, syncs=(dataclasses.replace(site, count=4),))) == []


def test_a_sync_that_moved_to_another_line_is_reported_not_failed() -> None:
    site = SyncSite("w.py:3", "aten::_local_scalar_dense", 2)
    changes = compare_counters(made_up(syncs=(site,)), made_up(syncs=(dataclasses.replace(site, location="w.py:5"),)))
    assert changes and not changes.failed
    more = compare_counters(made_up(syncs=(site,)), made_up(syncs=(site, dataclasses.replace(site, location="w.py:9"))))
    assert failures(more)[("forward", "syncs")].reason == "1 new host synchronisation per step in forward: w.py:9"


def test_thresholds_are_checked_and_devices_must_match() -> None:
    with pytest.raises(ValueError, match="unknown counter"):
        CounterThresholds(enabled=frozenset({"launch"}))
    with pytest.raises(ValueError, match="flops_threshold"):
        CounterThresholds(flops_threshold=-0.1)
    with pytest.raises(ValueError, match="not comparable"):
        compare_counters(made_up("cpu"), made_up("cuda"))


# --- sync rules ------------------------------------------------------------------------


def test_the_calls_that_force_a_synchronisation() -> None:
    import torch

    x = torch.randn(4)
    mask = x > 0
    assert forces_sync("aten::_local_scalar_dense", "default", (x,), {}, "cpu")
    assert forces_sync("aten::nonzero", "default", (x,), {}, "cpu")
    assert forces_sync("aten::index", "Tensor", (x, [mask]), {}, "cpu")
    assert not forces_sync("aten::index", "Tensor", (x, [torch.tensor([0, 1])]), {}, "cpu")
    assert forces_sync("aten::repeat_interleave", "Tensor", (torch.tensor([1, 2]),), {}, "cpu")
    assert not forces_sync("aten::repeat_interleave", "Tensor", (torch.tensor([1, 2]),), {"output_size": 3}, "cpu")
    assert not forces_sync("aten::add", "Tensor", (x, x), {}, "cpu")
    # on a CUDA run, a CPU tensor's .item() waits for nothing
    assert not forces_sync("aten::_local_scalar_dense", "default", (x,), {}, "cuda")
    # a host copy to the host is no device-to-host copy
    assert not forces_sync("aten::_to_copy", "default", (x,), {"dtype": torch.float64}, "cpu")


# --- a counted run in a fresh process ------------------------------------------------------


@pytest.mark.slow
def test_a_counted_run_that_crashes_is_a_typed_failure(workloads_dir: Path, cache_dir: Path) -> None:
    w = workload(workloads_dir, "tiny")
    outcome = count_job(Job(w, w.resolve("cpu", {"fail_build": "true"}), {}), "cpu", cache_dir)
    assert not outcome.ok and outcome.counters is None
    assert isinstance(outcome.error, WorkloadError)
    assert "the builder blew up on purpose" in outcome.error.message
    assert outcome.error.exit_code == EXIT_ERROR

    slow = count_job(Job(w, w.resolve("cpu"), {}), "cpu", cache_dir, timeout_s=0.5)
    assert isinstance(slow.error, CounterError) and "did not finish within 0.5 s" in slow.error.message


@pytest.mark.slow
def test_perfgate_counters_prints_the_counters_and_writes_the_file(workloads_dir: Path, cache_dir: Path,
                                                                   tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    args = ["counters", "counted", "--device", "cpu", "--workloads-path", str(workloads_dir), "--steps", "2",
            "--set", "sync_in_forward=true", "--cache-dir", str(cache_dir), "--config", str(tmp_path / "none.toml")]
    assert main([*args, "--json", "--out", str(tmp_path)]) == EXIT_OK
    printed = counters_from_dict(json.loads(capsys.readouterr().out))
    assert printed.steps == 2 and printed.params["steps"] == 4  # the workload's own steps stay pinned
    assert load_counters(tmp_path / "counted.counters.json") == printed
    text = render_counters(printed)
    line = line_of(workloads_dir / "counted_workloads.py", "x.sum().item()")
    assert f"forward: {workloads_dir / 'counted_workloads.py'}:{line}  aten::_local_scalar_dense  1 per step" in text
    assert main([*args, "--steps", "0"]) == EXIT_ERROR
    assert "--steps must be at least 1" in capsys.readouterr().err


@pytest.mark.slow
def test_the_command_line_does_not_load_torch() -> None:
    code = "import sys, perfgate.adapters.cli, perfgate.analysis.counters, perfgate.adapters.counters_cli; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# --- CUDA ----------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="needs a CUDA device")
def test_cuda_counts_launches_allocator_calls_and_device_syncs(workloads_dir: Path, cache_dir: Path) -> None:
    first = count(workloads_dir, cache_dir, device="cuda")
    again = count(workloads_dir, cache_dir, device="cuda")
    assert first.unavailable.keys() == {"compile"}
    forward = first.phases["forward"]
    assert forward.kernel_launches and forward.kernel_launches > 0
    assert first.phases["backward"].kernel_launches and first.phases["optimizer"].kernel_launches
    assert forward.allocator is not None and forward.allocator.allocations > 0
    assert first.phases["h2d"].device_copies == 2 * first.steps  # inputs and targets
    assert not compare_counters(first, again).failed
    head = count(workloads_dir, cache_dir, device="cuda", sync_in_forward=True)
    sync = failures(compare_counters(first, head))[("forward", "syncs")]
    line = line_of(workloads_dir / "counted_workloads.py", "x.sum().item()")
    assert sync.reason == f"1 new host synchronisation per step in forward: {workloads_dir}/counted_workloads.py:{line}"


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="needs a CUDA device")
def test_cuda_counts_a_compiled_models_launches_apart_from_its_eager_operators(workloads_dir: Path,
                                                                             cache_dir: Path) -> None:
    """The profiler's pass runs with no dispatch mode, so the launches are the compiled
    code's; the operators are counted on the eager path, and the file says so."""
    eager = count(workloads_dir, cache_dir, device="cuda")
    import torch

    torch._dynamo.reset()
    compiled = count(workloads_dir, cache_dir, device="cuda", compile=True, backend="inductor")
    assert compiled.compile is not None and compiled.compile.frames_compiled >= 1
    assert compiled.notes == (COMPILED_EAGER_NOTE_CUDA,)
    for phase in ("forward", "backward"):
        assert compiled.phases[phase].ops == eager.phases[phase].ops  # the eager path
        assert compiled.phases[phase].kernel_launches
    launches = [(eager.phases[p].kernel_launches, compiled.phases[p].kernel_launches) for p in ("forward", "backward")]
    assert any(e != c for e, c in launches), launches  # inductor's kernels, not eager's


@pytest.mark.slow
@pytest.mark.extended
def test_the_compiled_reference_workload_is_counted_on_the_cpu(cache_dir: Path) -> None:
    """resnet18-cifar10-compiled, counted as the gate does (a fresh process): one frame
    compiled by inductor, no graph break, no recompile, the compile time apart, and the
    note that its operators are counted on the eager path."""
    if not shutil.which("g++") and not shutil.which("c++"):
        pytest.skip("inductor needs a C++ compiler on the CPU")
    w = discover().get("resnet18-cifar10-compiled")
    outcome = count_job(Job(w, w.resolve("cpu"), {}), "cpu", cache_dir, timeout_s=900)
    assert outcome.ok, outcome.error
    counted = outcome.counters
    assert counted is not None and counted.compile is not None
    assert counted.compile.frames_compiled >= 1 and counted.compile.graph_break_count == 0
    assert counted.compile.recompiles == 0 and counted.compile.compiles_in_counted_steps == 0
    assert counted.timings["compile_s"] and counted.timings["compile_s"] > 0
    assert counted.notes == (COMPILED_EAGER_NOTE_CPU,)
