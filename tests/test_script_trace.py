"""Traced runs of a script: an unmodified training loop under ``torch.profiler``, with phase ranges.

The scripts are written here as a user writes a loop (they do not import perfgate). The
end-to-end run goes through ``trace_job`` and a fresh child, as ``perfgate trace --script``
does; the others trace in this process (the hooks are installed and removed around the
script). Only which operators land in which phase is asserted, never a duration.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from perfgate.measure.trace import lift_phase_ranges
from perfgate.model.errors import EXIT_ERROR, WorkloadError
from perfgate.model.trace import OPERATORS_JSON, OPERATORS_MD, TraceError, TraceSchedule
from perfgate.model.workload import PHASES
from perfgate.store.traces import TraceResult

LOOP = '''"""A plain training loop: a Linear model, a DataLoader over a TensorDataset, SGD."""
import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=20)
parser.add_argument("--samples", type=int, default=128)
parser.add_argument("--cumsum", action="store_true")
parser.add_argument("--raise-at", type=int, default=0)
args = parser.parse_args()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.first, self.second = nn.Linear(16, 32), nn.Linear(32, 4)

    def forward(self, x):
        h = torch.relu(self.first(x))
        if args.cumsum:
            h = torch.cumsum(h, dim=1)
        return self.second(h)


torch.manual_seed(0)
data = TensorDataset(torch.randn(args.samples, 16), torch.randint(0, 4, (args.samples,)))
loader = DataLoader(data, batch_size=16, shuffle=True)
model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
step = 0
for epoch in range(args.epochs):
    for inputs, targets in loader:
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(inputs), targets)
        loss.backward()
        optimizer.step()
        step += 1
        if step == args.raise_at:
            raise RuntimeError("diverged\\nsecond line")
'''

FORWARD_OPS = {"aten::addmm", "aten::linear"}
OPTIMIZER_OPS = {"aten::add_", "aten::_foreach_add_", "aten::sgd", "aten::_fused_sgd_"}
SETS = {"warmup_steps": "2", "num_threads": "1"}
SCRIPTS = Path(__file__).parent / "fixtures" / "scripts"


def write_loop(where: Path) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    path = where / "loop.py"
    path.write_text(LOOP)
    return path


def job_of(path: Path, args: list[str]) -> Any:
    from perfgate.measure.script_job import script_job, script_of

    return script_job(script_of(str(path), args, path.parent), "cpu", SETS)


def trace_here(path: Path, args: list[str], artifacts: Path, **options: Any) -> TraceResult:
    """A traced run of the script in this process."""
    from perfgate.measure.script_trace import trace_script

    job = job_of(path, args)
    return trace_script(job.script, job.params, "cpu", artifacts, name=job.workload.name, row_limit=100, **options)


def names(result: TraceResult, phase: str) -> set[str]:
    return {row.name for row in result.table.phase(phase).by_self_cpu}


def profiler_enabled() -> bool:
    import torch

    return bool(torch._C._autograd._profiler_enabled())


@pytest.fixture(scope="module")
def loop(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_loop(tmp_path_factory.mktemp("script"))


@pytest.fixture(scope="module")
def traced(loop: Path, tmp_path_factory: pytest.TempPathFactory) -> TraceResult:
    """The loop traced as the command line does: ``trace_job`` of a script job, in a fresh child."""
    from perfgate.measure.trace import trace_job

    artifacts = tmp_path_factory.mktemp("traced") / "traces"
    outcome = trace_job(job_of(loop, []), "cpu", artifacts.parent / "cache", artifacts, row_limit=100)
    assert outcome.ok, outcome.error and (outcome.error.message, outcome.error.detail)
    assert outcome.result is not None
    return outcome.result


# --- a traced script, end to end ------------------------------------------------------


@pytest.mark.slow
def test_trace_job_traces_a_script_job_into_json_traces_and_a_table(traced: TraceResult) -> None:
    assert traced.workload == "script-loop" and traced.directory.name == "script-loop"
    assert sorted(p.name for p in traced.directory.iterdir()) == [OPERATORS_JSON, OPERATORS_MD, "trace-1.json"]
    events = json.loads(traced.traces[0].read_text())["traceEvents"]
    labels = [e["name"] for e in events if e.get("cat") == "user_annotation"]
    assert sum(1 for label in labels if label.startswith("ProfilerStep#")) == 3  # 3 active steps
    # One range per step of data, forward and backward; the optimizer's zero_grad and step
    # are two; no tensor is moved, so no h2d.
    assert [labels.count(p) for p in PHASES] == [3, 0, 3, 3, 6]
    # Every range is attributed, and counted by step: the optimizer's two make one step's.
    assert [traced.table.phase(p).ranges for p in PHASES] == [3, 0, 3, 3, 3]
    optimizer = traced.table.phase("optimizer")
    assert len(optimizer.wall_us_per_step) == len(optimizer.operator_self_cpu_us_per_step) == 3
    assert sum(optimizer.wall_us_per_step) == pytest.approx(optimizer.wall_us, abs=0.01)
    assert sum(optimizer.operator_self_cpu_us_per_step) == pytest.approx(optimizer.operator_self_cpu_us, abs=0.01)
    zero_grad = next(r for r in optimizer.by_self_cpu if r.name.startswith("Optimizer.zero_grad#SGD"))
    assert zero_grad.calls == 3  # once per step: "calls/step" reads 1
    data = json.loads(traced.operators_json.read_text())
    assert data["kind"] == "perfgate.operator-table" and set(data["phases"]) == set(PHASES)
    assert data["unprofiled_warmup_steps"] == 2 and data["profiled_steps"] == 3
    assert data["params"]["steps"] == 5 and data["params"]["script_args"] == ""
    assert TraceResult.from_directory(traced.directory) == traced
    assert "forward" in traced.operators_md.read_text()


@pytest.mark.slow
def test_a_traced_scripts_operators_are_in_the_phase_that_ran_them(traced: TraceResult) -> None:
    forward, backward, optimizer = (names(traced, p) for p in ("forward", "backward", "optimizer"))
    assert forward & FORWARD_OPS and "aten::cross_entropy_loss" in forward  # the loss after the model
    assert not any("Backward" in n or n.endswith("_backward") for n in forward)
    assert "autograd::engine::evaluate_function: AddmmBackward0" in backward and not backward & FORWARD_OPS
    # torch opens its Optimizer.step range before the hooks see the step: the optimizer's
    # range lies inside it, and is still the phase's.
    assert optimizer & OPTIMIZER_OPS, optimizer
    assert any(n.startswith("Optimizer.zero_grad#SGD") for n in optimizer)
    assert not optimizer & FORWARD_OPS
    assert "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__" in names(traced, "data_wait")
    for phase in ("data_wait", "forward", "backward", "optimizer"):
        p = traced.table.phase(phase)
        assert p.operator_self_cpu_us + p.outside_operators_us == pytest.approx(p.wall_us, abs=0.01)
    assert traced.table.other_threads is None


@pytest.mark.slow
def test_a_distinctive_forward_op_shows_under_forward_only(loop: Path, tmp_path: Path) -> None:
    result = trace_here(loop, ["--cumsum"], tmp_path / "traces", schedule=TraceSchedule(wait=0, warmup=1, active=2))
    assert "aten::cumsum" in names(result, "forward")
    assert "autograd::engine::evaluate_function: CumsumBackward0" in names(result, "backward")  # its gradient
    assert "aten::cumsum" not in names(result, "optimizer") | names(result, "data_wait")
    assert result.table.phase("forward").ranges == 2
    assert not profiler_enabled()


@pytest.mark.slow
def test_forward_and_backward_inside_the_optimizers_closure_are_forward_and_backward(tmp_path: Path) -> None:
    from perfgate.measure.script_job import script_job, script_of
    from perfgate.measure.script_trace import trace_script

    job = script_job(script_of(str(SCRIPTS / "closure.py"), [], Path.cwd()), "cpu", SETS)
    result = trace_script(job.script, job.params, "cpu", tmp_path / "traces", name=job.workload.name, row_limit=100,
                          schedule=TraceSchedule(wait=0, warmup=1, active=2))
    forward, backward, optimizer = (names(result, p) for p in ("forward", "backward", "optimizer"))
    assert "aten::addmm" in forward and "aten::addmm" not in optimizer
    assert "autograd::engine::evaluate_function: AddmmBackward0" in backward
    assert {"aten::mul_", "aten::add_"} <= optimizer  # SGD with momentum
    # Its forward is entered twice a step (the closure's start, zero_grad, the model), its
    # optimizer three times: counted by step.
    assert [result.table.phase(p).ranges for p in ("forward", "backward", "optimizer")] == [2, 2, 2]


# --- a script the schedule cannot trace ---------------------------------------------------


@pytest.mark.slow
def test_a_script_that_finishes_early_is_one_line_and_leaves_no_trace(
    loop: Path, traced: TraceResult, tmp_path: Path
) -> None:
    import shutil

    artifacts = tmp_path / "traces"
    shutil.copytree(traced.directory, artifacts / "script-loop")  # an earlier trace, now stale
    schedule = TraceSchedule(wait=1, warmup=1, active=3, repeat=2)  # 2 warmup + 10 traced steps; it has 3
    with pytest.raises(WorkloadError) as caught:
        trace_here(loop, ["--epochs", "1", "--samples", "48"], artifacts, schedule=schedule)
    message = caught.value.message
    assert message == ("script-loop: loop.py ran out of data after 3 optimizer step(s) (3 DataLoader batch(es)); "
                       "perfgate needs 2 warmup + 10 measured steps: give it more data, or lower --warmup or the "
                       "profiler's schedule (--profile-wait/--profile-warmup/--profile-active)")
    assert caught.value.exit_code == EXIT_ERROR
    assert list((artifacts / "script-loop").iterdir()) == []
    assert not profiler_enabled()


@pytest.mark.slow
def test_a_script_that_raises_while_traced_is_its_one_line_and_the_profiler_stops(loop: Path, tmp_path: Path) -> None:
    artifacts = tmp_path / "traces"
    with pytest.raises(WorkloadError) as caught:
        trace_here(loop, ["--raise-at", "4"], artifacts)  # the profiler started after step 2
    assert caught.value.message == ("script-loop: loop.py failed after 4 optimizer step(s) (4 DataLoader batch(es)); "
                                    "perfgate needs 2 warmup + 5 measured steps; it raised RuntimeError: diverged")
    assert list((artifacts / "script-loop").iterdir()) == []
    assert not profiler_enabled()


@pytest.mark.slow
def test_trace_job_returns_a_short_script_as_a_value(loop: Path, tmp_path: Path) -> None:
    from perfgate.measure.trace import trace_job

    outcome = trace_job(job_of(loop, ["--epochs", "1", "--samples", "48"]), "cpu", tmp_path / "cache",
                        tmp_path / "traces")
    assert outcome.result is None and isinstance(outcome.error, WorkloadError)
    assert outcome.error.message.startswith("script-loop: loop.py ran out of data after 3 optimizer step(s)")
    assert "\n" not in outcome.error.message
    assert not any((tmp_path / "traces" / "script-loop").iterdir())


@pytest.mark.slow
def test_a_script_edited_after_its_job_was_made_is_not_traced(tmp_path: Path) -> None:
    from perfgate.measure.trace import trace_job

    path = write_loop(tmp_path / "script")
    job = job_of(path, [])
    path.write_text(LOOP + "\n# edited\n")
    outcome = trace_job(job, "cpu", tmp_path / "cache", tmp_path / "traces")
    assert isinstance(outcome.error, WorkloadError)
    assert "script-loop: loop.py changed while it was being traced (sha256 " in outcome.error.message


def test_a_profiler_that_fails_stops_the_script_and_is_a_trace_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch.profiler

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the profiler could not start\nsecond line")

    monkeypatch.setattr(torch.profiler, "profile", broken)
    path = write_loop(tmp_path / "script")
    with pytest.raises(TraceError) as caught:
        trace_here(path, [], tmp_path / "traces")
    assert caught.value.message == "script-loop: the traced run failed: RuntimeError: the profiler could not start"
    assert "Traceback" in (caught.value.detail or "")
    assert list((tmp_path / "traces" / "script-loop").iterdir()) == []
    assert torch.nn.Module.__call__.__name__ == "_wrapped_call_impl"  # the hooks are gone


# --- the phase ranges as the attribution sees them, on synthetic events ---------------------


class Event:
    def __init__(self, name: str, parent: Event | None = None) -> None:
        self.name, self.cpu_parent, self.cpu_children = name, parent, []
        self.cpu_time_total = 1.0
        if parent is not None:
            parent.cpu_children.append(self)


def test_an_outermost_phase_range_is_lifted_to_its_step_and_an_inner_one_stays_an_operator() -> None:
    step = Event("ProfilerStep#3")
    direct = Event("forward", step)
    inner = Event("forward", direct)  # the script's own record_function("forward"): an operator row
    torch_step = Event("Optimizer.step#SGD.step", step)
    optimizer = Event("optimizer", torch_step)
    op = Event("aten::add_", optimizer)
    events = [step, direct, inner, torch_step, optimizer, op]
    lifted = lift_phase_ranges(events)
    assert [e for i, e in enumerate(lifted) if e is not events[i]] == [lifted[4]]
    assert lifted[4].cpu_parent is None and lifted[4].name == "optimizer"
    assert lifted[4].cpu_children == [op] and lifted[4].cpu_time_total == 1.0
    assert lifted[2].cpu_parent is direct
