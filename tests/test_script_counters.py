"""The counted run of a script: ``count_job`` on a script job, ``count_script`` in this process.

The script below is written as a user writes a training loop (a Linear over a
TensorDataset, SGD) and does not import perfgate; its options add a second matmul to the
forward pass or an ``.item()`` to the step. Counting it in a fresh process costs some
seconds here (importing torch), so those tests are slow; the in-process ones run the
script for a few steps under the hooks and the counting modes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import cuda_available

from perfgate.measure.counters import count_job
from perfgate.model.counters import CounterError, CounterSet
from perfgate.model.errors import EXIT_ERROR, WorkloadError
from perfgate.model.script import SCRIPT_VERSION
from perfgate.model.workload import PHASES

BATCH, IN, OUT, HIDDEN_OUT = 16, 8, 4, 4
STEPS = 3

TRAIN = f'''"""A tiny training loop, as a user writes one."""
import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=5)
parser.add_argument("--samples", type=int, default=128)
parser.add_argument("--second-matmul", action="store_true")
parser.add_argument("--item", action="store_true")
parser.add_argument("--device", default="cpu")
args = parser.parse_args()

torch.manual_seed(0)
data = TensorDataset(torch.randn(args.samples, {IN}), torch.randint(0, {OUT}, (args.samples,)))
loader = DataLoader(data, batch_size={BATCH}, shuffle=True)
layers = [nn.Linear({IN}, {OUT})]
if args.second_matmul:
    layers.append(nn.Linear({OUT}, {HIDDEN_OUT}, bias=False))
model = nn.Sequential(*layers).to(args.device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loss_fn = nn.CrossEntropyLoss()
for epoch in range(args.epochs):
    for x, y in loader:
        x, y = x.to(args.device), y.to(args.device)
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        if args.item and loss.item() > 1e6:  # the sync site
            raise RuntimeError("diverged")
        loss.backward()
        optimizer.step()
    print(f"epoch {{epoch}}: loss {{loss.item():.4f}}")
'''

FORWARD_FLOPS = 2 * BATCH * IN * OUT
"""One step's forward FLOPs: the Linear's addmm (the loss has none)."""


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("script_project")
    (target / "train.py").write_text(TRAIN)
    return target


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


def job_of(project: Path, args: list[str], name: str = "train.py", device: str = "cpu", **sets: str) -> Any:
    from perfgate.measure.script_job import script_job, script_of

    return script_job(script_of(name, args, project), device, {"warmup_steps": "2", "num_threads": "1", **sets})


def counted(project: Path, cache_dir: Path, args: list[str], name: str = "train.py") -> CounterSet:
    """The script counted by ``count_job``, in a fresh process run in the project."""
    outcome = count_job(job_of(project, args, name), "cpu", cache_dir, steps=STEPS, project_dir=project)
    assert outcome.ok, outcome.error and (outcome.error.message, outcome.error.detail)
    assert outcome.counters is not None
    return outcome.counters


def in_process(project: Path, args: list[str], name: str = "train.py", device: str = "cpu",
               steps: int = STEPS) -> CounterSet:
    from perfgate.measure.script_count import count_script

    job = job_of(project, args, name, device)
    return count_script(job.script, job.params, device, name=job.workload.name, steps=steps)


def line_of(path: Path, text: str) -> int:
    lines = [i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line]
    assert len(lines) == 1, lines
    return lines[0]


def dispatch_modes() -> int:
    import torch

    return int(torch._C._len_torch_dispatch_stack())


@pytest.fixture(scope="module")
def plain(project: Path, cache_dir: Path) -> CounterSet:
    return counted(project, cache_dir, [])


# --- count_job on a script job ------------------------------------------------------------


@pytest.mark.slow
def test_a_plain_loop_is_counted_phase_by_phase_in_a_fresh_process(plain: CounterSet) -> None:
    phases = plain.phases
    assert plain.workload == "script-train" and plain.workload_version == SCRIPT_VERSION
    assert (plain.device, plain.steps, plain.warmup_steps) == ("cpu", STEPS, 2)
    assert plain.params["steps"] == STEPS and plain.params["warmup_steps"] == 2
    assert any("the script's own optimizer steps" in note for note in plain.notes)
    forward, backward, optimizer = phases["forward"], phases["backward"], phases["optimizer"]
    assert forward.ops["aten::addmm"] == STEPS and forward.ops["aten::nll_loss_forward"] == STEPS
    assert backward.ops["aten::nll_loss_backward"] == STEPS and backward.ops["aten::mm"] == STEPS
    assert optimizer.ops == {"aten::add_": 2 * STEPS}  # SGD: the weight and the bias, per step
    assert phases["data_wait"].ops["aten::stack"] == 2 * STEPS  # the collate: inputs and targets
    assert phases["h2d"].ops == {}  # .to("cpu") of a CPU tensor copies nothing
    # FLOPs: the Linear's 2*batch*in*out per step forward, exactly; as many backward (the
    # weight's gradient only: the inputs need none)
    assert forward.flops == STEPS * FORWARD_FLOPS
    assert backward.flops == STEPS * FORWARD_FLOPS
    assert all(not phases[p].syncs for p in PHASES)
    assert plain.compile is None and "does not compile" in plain.unavailable["compile"]
    assert plain.phases["forward"].kernel_launches is None and "kernel_launches" in plain.unavailable


@pytest.mark.slow
def test_a_script_is_counted_the_same_in_two_runs(plain: CounterSet, project: Path, cache_dir: Path) -> None:
    again = counted(project, cache_dir, [])
    assert again.counters_dict() == plain.counters_dict()


@pytest.mark.slow
def test_a_second_matmul_in_forward_raises_its_flops(plain: CounterSet, project: Path, cache_dir: Path) -> None:
    head = counted(project, cache_dir, ["--second-matmul"])
    added = STEPS * 2 * BATCH * OUT * HIDDEN_OUT
    assert head.phases["forward"].flops == plain.phases["forward"].flops + added
    assert head.phases["forward"].ops["aten::mm"] == STEPS
    assert head.phases["backward"].flops > plain.phases["backward"].flops
    from perfgate.analysis.counters import compare_counters

    changes = compare_counters(plain, head)
    assert ("forward", "flops") in {(c.phase, c.counter) for c in changes if c.failed}


@pytest.mark.slow
def test_a_script_that_finishes_too_early_is_one_line_naming_warmup_and_steps(project: Path,
                                                                              cache_dir: Path) -> None:
    # 3 batches, one epoch: 3 optimizer steps where 2 warmup + 3 counted are needed
    job = job_of(project, ["--epochs", "1", "--samples", "48"])
    outcome = count_job(job, "cpu", cache_dir, steps=STEPS, project_dir=project)
    assert not outcome.ok and outcome.counters is None
    assert isinstance(outcome.error, WorkloadError) and outcome.error.exit_code == EXIT_ERROR
    message = outcome.error.message
    assert message == ("script-train: train.py ran out of data after 3 optimizer step(s) (3 DataLoader "
                       "batch(es)); perfgate needs 2 warmup + 3 measured steps: give it more data, or lower "
                       "--warmup/--steps")


@pytest.mark.slow
def test_a_missing_or_changed_script_is_an_error_not_a_crash(tmp_path: Path, cache_dir: Path) -> None:
    (tmp_path / "train.py").write_text(TRAIN)
    job = job_of(tmp_path, [])
    (tmp_path / "train.py").write_text(TRAIN + "\n# edited\n")
    changed = count_job(job, "cpu", cache_dir, steps=STEPS, project_dir=tmp_path)
    assert isinstance(changed.error, WorkloadError) and changed.counters is None
    assert changed.error.message.startswith("script-train: train.py changed while it was being counted (sha256 ")
    (tmp_path / "train.py").unlink()
    missing = count_job(job, "cpu", cache_dir, steps=STEPS, project_dir=tmp_path)
    assert isinstance(missing.error, WorkloadError) and missing.counters is None
    assert missing.error.message == "script-train: cannot read train.py: No such file or directory"


# --- the request, and count_script in this process -------------------------------------------


def test_count_job_sends_the_script_and_the_project(project: Path, cache_dir: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from perfgate.measure import counters

    sent: list[tuple[str, dict[str, Any]]] = []

    def ask(module: str, request: dict[str, Any], timeout_s: float, **options: Any) -> dict[str, Any]:
        sent.append((module, request))
        raise CounterError("not run")

    monkeypatch.setattr(counters, "ask_child", ask)
    job = job_of(project, ["--item"])
    outcome = count_job(job, "cpu", cache_dir, steps=STEPS, project_dir=project)
    assert outcome.error is not None and outcome.error.message == "not run"
    ((module, request),) = sent
    assert module == "perfgate.measure.script_count"  # a script's own child, as a repeat's is script_worker
    assert request["script"] == job.script.to_dict() and request["script"]["args"] == ["--item"]
    assert request["project_dir"] == str(project) and request["steps"] == STEPS
    assert request["workload"] == "script-train" and request["params"] == job.params.to_dict()


def test_an_item_in_the_step_is_a_sync_site_at_the_scripts_line(project: Path) -> None:
    counters = in_process(project, ["--item"])
    (site,) = counters.phases["forward"].syncs  # the loss, up to its backward, is forward
    line = line_of(project / "train.py", "loss.item() > 1e6")
    assert site.call == "aten::_local_scalar_dense" and site.count == STEPS
    assert site.location.endswith(f"train.py:{line}")
    assert all(not counters.phases[p].syncs for p in PHASES if p != "forward")
    # the logged loss.item() after each epoch is outside every phase: not counted
    assert counters.total("syncs") == STEPS


def test_count_script_counts_here_and_leaves_no_mode_behind(project: Path, tmp_path: Path) -> None:
    import warnings

    before = dispatch_modes()
    counters = in_process(project, [])
    assert counters.phases["forward"].flops == STEPS * FORWARD_FLOPS
    assert dispatch_modes() == before
    filters = list(warnings.filters)
    # a script that raises inside the counted window: the modes are left all the same
    (tmp_path / "boom.py").write_text(
        "import torch\nmodel = torch.nn.Linear(4, 2)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for i in range(50):\n    model(torch.ones(3, 4)).sum().backward()\n"
        "    if i == 3:\n        raise RuntimeError('diverged\\nsecond line')\n    opt.step()\n")
    with pytest.raises(WorkloadError) as caught:
        in_process(tmp_path, [], name="boom.py")
    assert caught.value.message == ("script-boom: boom.py failed after 3 optimizer step(s) (0 DataLoader "
                                    "batch(es)); perfgate needs 2 warmup + 3 measured steps; it raised "
                                    "RuntimeError: diverged")
    assert dispatch_modes() == before and warnings.filters == filters


def test_a_failure_of_the_counting_itself_is_a_counter_error_not_the_scripts(
        project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from perfgate.measure import script_count

    def broken(counts: Any) -> Any:
        raise RuntimeError("no dispatch mode today")

    monkeypatch.setattr(script_count, "op_counter", broken)
    before = dispatch_modes()
    with pytest.raises(CounterError) as caught:
        in_process(project, [])
    assert caught.value.message == ("script-train: train.py: entering the counting modes failed: RuntimeError: "
                                    "no dispatch mode today")
    assert dispatch_modes() == before  # the FLOP counter entered before it was left again


def test_a_script_without_an_optimizer_step_is_the_repeats_one_line(tmp_path: Path) -> None:
    (tmp_path / "nostep.py").write_text(
        "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n"
        "model = torch.nn.Linear(4, 2)\n"
        "for x, in DataLoader(TensorDataset(torch.ones(8, 4)), batch_size=2):\n"
        "    model(x).sum().backward()\n")
    with pytest.raises(WorkloadError) as caught:
        in_process(tmp_path, [], name="nostep.py")
    assert caught.value.message == ("script-nostep: nostep.py: saw 0 optimizer steps in 4 DataLoader batches; "
                                    "perfgate marks the steps with torch.optim optimizer steps")
    assert dispatch_modes() == 0


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="needs a CUDA device")
def test_on_cuda_a_script_counts_ops_and_syncs_and_names_the_device_pass_it_leaves_out(project: Path) -> None:
    counters = in_process(project, ["--item", "--device", "cuda"], device="cuda")
    assert counters.phases["forward"].flops == STEPS * FORWARD_FLOPS
    assert counters.phases["h2d"].device_copies == 2 * STEPS  # inputs and targets
    (site,) = counters.phases["forward"].syncs
    assert site.location.endswith(f"train.py:{line_of(project / 'train.py', 'loss.item() > 1e6')}")
    for name in ("kernel_launches", "memcpy_calls", "allocator"):
        assert "a script is run once" in counters.unavailable[name]
        assert getattr(counters.phases["forward"], name) is None
