"""Traced runs: Chrome traces and an operator table attributed to the phases of the step.

The tiny workload is traced for real on the CPU (a few seconds a run). Only wide-margin
relations between runs are asserted, never a duration: this machine is shared. The
cross-thread attribution that CUDA backward needs is checked on synthetic events.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Any

import pytest

from perfgate.analysis.attribution import PhaseAttribution
from perfgate.measure.trace import check_trace_dir, prepare_trace_dir, trace_job, trace_workload
from perfgate.model.errors import EXIT_ERROR, FileFormatError, WorkloadError
from perfgate.model.job import Job
from perfgate.model.trace import OPERATORS_JSON, OPERATORS_MD, TraceError, TraceSchedule
from perfgate.model.workload import PHASES
from perfgate.store.discovery import discover
from perfgate.store.jsonfile import write_json_atomic
from perfgate.store.traces import TraceResult, load_operator_table

FORWARD_OPS = {"aten::conv2d", "aten::convolution", "aten::_convolution", "aten::mkldnn_convolution",
               "aten::addmm", "aten::linear"}


def tiny(tiny_dir: Path):
    return discover([tiny_dir], project_dir=tiny_dir).get("tiny")


def trace_tiny(tiny_dir: Path, artifacts: Path, **overrides: Any) -> TraceResult:
    workload = tiny(tiny_dir)
    params = workload.resolve("cpu", {k: str(v) for k, v in overrides.items()})
    return trace_workload(workload, params, "cpu", cache_dir=artifacts.parent / "cache",
                          artifacts_dir=artifacts, row_limit=100)


def names(result: TraceResult, phase: str) -> set[str]:
    return {row.name for row in result.table.phase(phase).by_self_cpu}


def per_step_ops_ms(result: TraceResult, phase: str) -> float:
    """Median over the profiled steps: one step hit by the shared machine does not count."""
    return median(result.table.phase(phase).operator_self_cpu_us_per_step) / 1000


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from conftest import FIXTURES

    target = tmp_path_factory.mktemp("workloads")
    shutil.copy(FIXTURES / "tiny_workloads.py", target / "tiny_workloads.py")
    return target


@pytest.fixture(scope="module")
def plain(tiny_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> TraceResult:
    return trace_tiny(tiny_dir, tmp_path_factory.mktemp("plain") / "traces")


# --- what a traced run writes ----------------------------------------------------------


@pytest.mark.slow
def test_the_chrome_trace_is_json_with_one_range_per_phase_and_profiled_step(plain: TraceResult) -> None:
    assert [p.name for p in plain.traces] == ["trace-1.json"]
    events = json.loads(plain.traces[0].read_text())["traceEvents"]
    labels = [e["name"] for e in events if e.get("cat") == "user_annotation"]
    for phase in PHASES:
        assert labels.count(phase) == 3, phase  # default schedule: 3 active steps
    assert sum(1 for label in labels if label.startswith("ProfilerStep#")) == 3


@pytest.mark.slow
def test_operators_are_attributed_to_the_phase_that_ran_them(plain: TraceResult) -> None:
    forward, backward = names(plain, "forward"), names(plain, "backward")
    assert forward & FORWARD_OPS
    assert not any("Backward" in n or n.endswith("_backward") for n in forward)
    assert {"aten::convolution_backward", "autograd::engine::evaluate_function: ConvolutionBackward0"} <= backward
    assert not backward & FORWARD_OPS
    assert "aten::randn" in names(plain, "data_wait") and not names(plain, "data_wait") & FORWARD_OPS
    assert any(n.startswith("Optimizer.step#SGD") for n in names(plain, "optimizer"))
    assert plain.table.other_threads is None  # one thread on the CPU


@pytest.mark.slow
def test_each_phase_range_is_split_exactly_into_operators_and_the_rest(plain: TraceResult) -> None:
    for phase in PHASES:
        p = plain.table.phase(phase)
        assert p.ranges == 3 and len(p.wall_us_per_step) == 3
        assert p.operator_self_cpu_us + p.outside_operators_us == pytest.approx(p.wall_us, abs=0.01)
        assert sum(p.operator_self_cpu_us_per_step) == pytest.approx(p.operator_self_cpu_us, abs=0.01)
        assert sum(r.self_cpu_us for r in p.by_self_cpu) == pytest.approx(p.operator_self_cpu_us, abs=0.01)
        assert p.device_us is None and p.by_device == ()
        assert [r.self_cpu_us for r in p.by_self_cpu] == sorted((r.self_cpu_us for r in p.by_self_cpu), reverse=True)


@pytest.mark.slow
def test_operators_json_is_schema_versioned_and_reads_back(plain: TraceResult, tmp_path: Path) -> None:
    data = json.loads(plain.operators_json.read_text())
    assert data["kind"] == "perfgate.operator-table" and data["schema_version"] == 1
    assert set(data["phases"]) == set(PHASES)
    assert data["schedule"] == {"wait": 1, "warmup": 1, "active": 3, "repeat": 1}
    assert data["params"]["seed"] == 0 and data["params"]["num_threads"] == 1
    table = load_operator_table(plain.operators_json)
    assert table == plain.table and list(table.phases) == list(PHASES)
    assert TraceResult.from_directory(plain.directory) == plain

    newer = tmp_path / "newer.json"
    write_json_atomic(newer, {**data, "schema_version": 99})
    with pytest.raises(FileFormatError, match="upgrade perfgate"):
        load_operator_table(newer)


@pytest.mark.slow
def test_the_markdown_names_the_traces_and_the_top_operators(plain: TraceResult) -> None:
    md = plain.operators_md.read_text()
    assert "[trace-1.json](trace-1.json)" in md
    for phase in PHASES:
        assert f"## {phase}:" in md
    assert "never used for the verdict" in md
    assert f"`{plain.top('backward', 1)[0].name}`" in md


# --- the table follows the workload ------------------------------------------------------


@pytest.mark.slow
def test_a_wider_model_moves_operator_time_into_forward(tiny_dir: Path, tmp_path: Path, plain: TraceResult) -> None:
    wide = trace_tiny(tiny_dir, tmp_path / "traces", width=128)
    # data_wait does the same work at any width; forward's convolutions grow about 250x.
    narrow_ratio = per_step_ops_ms(plain, "forward") / per_step_ops_ms(plain, "data_wait")
    wide_ratio = per_step_ops_ms(wide, "forward") / per_step_ops_ms(wide, "data_wait")
    assert wide_ratio > 5 * narrow_ratio
    assert wide.table.operator_share("forward") > wide.table.operator_share("data_wait") * 10
    assert {r.name for r in wide.top("forward", 3)} & FORWARD_OPS


@pytest.mark.slow
def test_a_forward_delay_shows_in_forward_outside_any_operator(
    tiny_dir: Path, tmp_path: Path, plain: TraceResult, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TINY_FORWARD_DELAY_MS", "30")
    slow = trace_tiny(tiny_dir, tmp_path / "traces")
    forward = slow.table.phase("forward")
    # time.sleep is not an operator: it is the range's own time, at least 30 ms a step.
    assert forward.outside_operators_us >= 3 * 30_000 * 0.95
    assert slow.table.wall_share("forward") > plain.table.wall_share("forward") + 0.3
    assert forward.outside_operators_us > 10 * plain.table.phase("forward").outside_operators_us


# --- bad input and failures --------------------------------------------------------------


def test_an_artifacts_dir_under_a_file_is_a_one_line_error(tiny_dir: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    artifacts = blocker / "traces"
    with pytest.raises(TraceError) as caught:
        prepare_trace_dir(artifacts, "tiny")
    assert caught.value.exit_code == EXIT_ERROR
    assert "cannot write trace artifacts to" in caught.value.message and str(artifacts) in caught.value.message
    assert "\n" not in caught.value.message
    with pytest.raises(TraceError, match=f"cannot write trace artifacts to {artifacts}: Not a directory"):
        check_trace_dir(artifacts)

    workload = tiny(tiny_dir)
    with pytest.raises(TraceError, match="cannot write trace artifacts"):
        trace_workload(workload, workload.resolve("cpu"), "cpu", cache_dir=tmp_path / "cache",
                       artifacts_dir=artifacts)
    outcome = trace_job(Job(workload, workload.resolve("cpu"), {}), "cpu", tmp_path / "cache", artifacts)
    assert not outcome.ok and outcome.result is None
    assert isinstance(outcome.error, TraceError) and outcome.error.exit_code == EXIT_ERROR
    assert blocker.read_text() == "not a directory"


def test_a_read_only_artifacts_dir_is_a_one_line_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    artifacts = tmp_path / "ro"
    (artifacts / "tiny").mkdir(parents=True)
    if os.geteuid() == 0:  # root writes to read-only directories: the refusal is simulated
        import perfgate.measure.trace as trace

        def refuse(*args: Any, dir: str, **kwargs: Any) -> Any:
            raise PermissionError(13, "Permission denied", dir)

        monkeypatch.setattr(trace.tempfile, "mkstemp", refuse)
    artifacts.chmod(0o500)
    (artifacts / "tiny").chmod(0o500)
    try:
        with pytest.raises(TraceError) as caught:
            prepare_trace_dir(artifacts, "tiny")
    finally:
        artifacts.chmod(0o700)
        (artifacts / "tiny").chmod(0o700)
    assert caught.value.message == f"cannot write trace artifacts to {artifacts / 'tiny'}: Permission denied"
    assert caught.value.exit_code == EXIT_ERROR


@pytest.mark.slow
def test_a_failed_run_leaves_nothing_that_passes_for_a_trace(
    tiny_dir: Path, tmp_path: Path, plain: TraceResult, monkeypatch: pytest.MonkeyPatch
) -> None:
    artifacts = tmp_path / "traces"
    shutil.copytree(plain.directory, artifacts / "tiny")  # an earlier trace, now stale
    with pytest.raises(WorkloadError, match="builder blew up"):
        trace_tiny(tiny_dir, artifacts, fail_build=True)
    assert sorted(p.name for p in (artifacts / "tiny").iterdir()) == []

    import torch.profiler

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the profiler could not start\nsecond line")

    monkeypatch.setattr(torch.profiler, "profile", broken)
    with pytest.raises(TraceError) as caught:
        trace_tiny(tiny_dir, artifacts)
    assert caught.value.message == "tiny: the traced run failed: RuntimeError: the profiler could not start"
    assert "Traceback" in (caught.value.detail or "")
    assert list((artifacts / "tiny").iterdir()) == []


# --- in a fresh process, as the gate calls it --------------------------------------------


@pytest.mark.slow
def test_trace_job_runs_in_a_fresh_process_end_to_end(tiny_dir: Path, tmp_path: Path) -> None:
    workload = tiny(tiny_dir)
    params = workload.resolve("cpu", {"width": "16"})
    artifacts = tmp_path / "traces"
    outcome = trace_job(Job(workload, params, {"width": 16}), "cpu", tmp_path / "cache", artifacts,
                        schedule=TraceSchedule(wait=0, warmup=1, active=2, repeat=2), row_limit=5)
    assert outcome.ok and outcome.error is None, outcome.error and (outcome.error.message, outcome.error.detail)
    result = outcome.result
    assert result is not None and result.directory == artifacts / "tiny"
    assert sorted(p.name for p in result.directory.iterdir()) == [OPERATORS_JSON, OPERATORS_MD,
                                                                 "trace-1.json", "trace-2.json"]
    assert [p.name for p in artifacts.iterdir()] == ["tiny"]  # nothing but the trace: no results
    table = result.table
    assert table.params["width"] == 16 and table.profiled_steps == 4
    assert all(table.phase(p).ranges == 4 for p in PHASES)
    assert all(len(table.phase(p).by_self_cpu) <= 5 for p in PHASES)
    assert {r.name for r in result.top("forward", 5, by="self_cpu")} & FORWARD_OPS
    assert outcome.seconds >= table.seconds > 0


@pytest.mark.slow
def test_trace_job_returns_failures_as_values(tiny_dir: Path, tmp_path: Path) -> None:
    workload = tiny(tiny_dir)
    failing = Job(workload, workload.resolve("cpu", {"fail_build": "true"}), {"fail_build": True})
    outcome = trace_job(failing, "cpu", tmp_path / "cache", tmp_path / "traces")
    assert outcome.result is None and isinstance(outcome.error, WorkloadError)
    assert "builder blew up" in outcome.error.message
    assert not (tmp_path / "traces" / "tiny" / OPERATORS_JSON).exists()

    plain = Job(workload, workload.resolve("cpu"), {})
    late = trace_job(plain, "cpu", tmp_path / "cache", tmp_path / "traces", timeout_s=0.001)
    assert late.result is None and isinstance(late.error, TraceError)
    assert "did not finish within" in late.error.message


# --- attribution across threads (CUDA backward), on synthetic events ---------------------


@dataclass
class Span:
    start: float
    end: float


@dataclass(eq=False)
class FakeEvent:
    name: str
    start: float
    end: float
    thread: int = 1
    device_us: float = 0.0
    children: list[FakeEvent] = field(default_factory=list)
    node_id: int = 0
    cpu_parent: FakeEvent | None = None

    def __post_init__(self) -> None:
        self.time_range = Span(self.start, self.end)
        self.cpu_children = self.children
        for child in self.children:
            child.cpu_parent = self

    @property
    def cpu_time_total(self) -> float:
        return self.end - self.start

    @property
    def self_cpu_time_total(self) -> float:
        return self.cpu_time_total - sum(c.cpu_time_total for c in self.children)

    @property
    def self_device_time_total(self) -> float:
        return self.device_us

    def walk(self) -> list[FakeEvent]:
        return [self, *(e for c in self.children for e in c.walk())]


def test_backward_work_on_the_autograd_thread_counts_for_backward() -> None:
    conv = FakeEvent("aten::cudnn_convolution", 12, 18, device_us=40)
    user_forward = FakeEvent("forward", 11, 19, children=[conv])  # a workload's own range
    step = FakeEvent("ProfilerStep*", 0, 100, children=[
        FakeEvent("data_wait", 0, 10, children=[FakeEvent("aten::randn", 1, 3)]),
        FakeEvent("forward", 10, 20, children=[user_forward]),
        FakeEvent("backward", 20, 60, children=[FakeEvent("aten::ones_like", 21, 22, device_us=1)]),
        FakeEvent("optimizer", 60, 70, children=[
            FakeEvent("aten::add_", 61, 65, device_us=5, children=[FakeEvent("aten::add_", 62, 63)])]),
    ])
    engine = [
        FakeEvent("autograd::engine::evaluate_function: ConvolutionBackward0", 25, 45, thread=7, children=[
            FakeEvent("aten::convolution_backward", 26, 44, thread=7, device_us=90)]),
        FakeEvent("autograd::engine::evaluate_function: AccumulateGrad", 46, 50, thread=7),
        FakeEvent("aten::zero_", 80, 82, thread=7),  # the engine thread, outside any phase
    ]
    pin = FakeEvent("aten::pin_memory", 30, 40, thread=9)
    events = [e for root in [step, *engine, pin] for e in root.walk()]

    attribution = PhaseAttribution()
    assert attribution.add(events) == 4
    phases, other = attribution.finish(row_limit=10, device=True)

    backward = phases["backward"]
    assert {r.name for r in backward.by_self_cpu} == {
        "aten::ones_like", "autograd::engine::evaluate_function: ConvolutionBackward0",
        "aten::convolution_backward", "autograd::engine::evaluate_function: AccumulateGrad"}
    assert backward.device_us == 91 and backward.by_device[0].name == "aten::convolution_backward"
    assert backward.operator_self_cpu_us_per_step == (1 + 20 + 4,)
    assert backward.outside_operators_us == 40 - 1  # the step's thread waited for the engine
    forward = phases["forward"]
    assert {r.name for r in forward.by_self_cpu} == {"forward", "aten::cudnn_convolution"}
    assert forward.device_us == 40 and forward.ranges == 1 and phases["h2d"].ranges == 0
    assert other is not None and {r.name for r in other.by_self_cpu} == {"aten::zero_", "aten::pin_memory"}
    add = phases["optimizer"].by_self_cpu[0]
    assert (add.name, add.calls, add.self_cpu_us, add.cpu_total_us, add.self_device_us) == ("aten::add_", 2, 4, 4, 5)
