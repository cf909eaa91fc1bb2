"""Script mode leaves CUDA to the script: nothing perfgate runs before the script's first line
calls into ``torch.cuda``.

A call such as ``torch.cuda.current_device()`` initialises CUDA and fixes the GPU (device 0)
before the script could choose one (``torch.cuda.set_device``, ``CUDA_VISIBLE_DEVICES`` set in
the script), and ``torch.cuda.is_available()`` alone runs ``cuInit`` and poisons every later
fork. These tests spy on the ``torch.cuda`` functions that query or initialise the device and
run a script, asked for with ``--device cuda``, whose first line leaves a mark: no call may
come before the mark. The machine needs no GPU: the script stops at once, so the repeat is an
error either way; only the order of the calls is checked.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import subprocess
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

SCRIPT = "import cuda_spy_marks; cuda_spy_marks.events.append('the script began')\nraise SystemExit(0)\n"

ALLOWED = ("manual_seed", "manual_seed_all", "seed", "seed_all", "is_initialized")
"""torch.cuda functions that touch no device: the seeding ones queue their call until CUDA
is initialised (torch.manual_seed calls manual_seed_all), is_initialized only reads a flag."""


def spied(module: Any, c_module: Any, record: Callable[[str], None]) -> list[tuple[Any, str, Any]]:
    """(owner, name, spy) for every public function of ``torch.cuda`` but :data:`ALLOWED`, its
    lazy initialiser and the C calls that count or initialise devices."""
    out = []
    for name, value in vars(module).items():
        if (name.startswith("_") or name in ALLOWED or not inspect.isfunction(value)
                or not str(getattr(value, "__module__", "")).startswith("torch.cuda")):
            continue
        out.append((module, name, value))
    out.append((module, "_lazy_init", module._lazy_init))
    for name in ("_cuda_getDeviceCount", "_cuda_init", "_cuda_getDevice", "_cuda_setDevice"):
        if hasattr(c_module, name):
            out.append((c_module, name, getattr(c_module, name)))

    def spy(label: str, original: Any) -> Any:
        @functools.wraps(original)
        def call(*args: Any, **kwargs: Any) -> Any:
            record(label)
            return original(*args, **kwargs)

        return call

    return [(owner, name, spy(name, original)) for owner, name, original in out]


def test_nothing_calls_torch_cuda_before_the_scripts_first_line(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    import torch._dynamo  # noqa: F401 - imported before the spies, as a worker imports it (apply_torch_settings):
    import torch._inductor.config  # noqa: F401 - their module-level tables keep the torch.cuda functions they see

    from perfgate.measure.script_job import script_job, script_of
    from perfgate.measure.script_run import run_script_repeat
    from perfgate.model.errors import WorkloadError

    marks = types.SimpleNamespace(events=[])
    monkeypatch.setitem(sys.modules, "cuda_spy_marks", marks)
    for owner, name, spy in spied(torch.cuda, torch._C, marks.events.append):
        monkeypatch.setattr(owner, name, spy)
    (tmp_path / "first_line.py").write_text(SCRIPT)
    job = script_job(script_of(str(tmp_path / "first_line.py"), [], tmp_path), "cuda",
                     {"warmup_steps": "2", "steps": "4"})
    with pytest.raises(WorkloadError, match="exited after 0 optimizer step"):
        run_script_repeat(job.script, job.params, "cuda", name=job.workload.name, index=0, telemetry=True)
    assert "the script began" in marks.events
    assert marks.events[: marks.events.index("the script began")] == []


DRIVER = '''
import json, sys, types
import torch
import torch._dynamo, torch._inductor.config  # as the template and every repeat import them (tables of torch.cuda functions)
events = []
sys.modules["cuda_spy_marks"] = types.SimpleNamespace(events=events)
sys.path.insert(0, sys.argv[3])
from test_script_cuda_untouched import spied
for owner, name, spy in spied(torch.cuda, torch._C, events.append):
    setattr(owner, name, spy)
from perfgate.measure.script_worker import main  # perfgate's own imports are watched too
main([sys.argv[1], sys.argv[2]])
print("EVENTS " + json.dumps(events))
'''


@pytest.mark.slow
def test_the_script_worker_process_calls_no_torch_cuda_before_the_script(tmp_path: Path) -> None:
    """The whole worker process, as a run starts it: perfgate's imports, the request, the
    settings, the hooks; only ``import torch`` (with dynamo and inductor's config) comes before the spy."""
    from perfgate.measure.script_job import script_job, script_of
    from perfgate.measure.separate_run import job_request

    (tmp_path / "first_line.py").write_text(SCRIPT)
    job = script_job(script_of(str(tmp_path / "first_line.py"), [], tmp_path), "cuda",
                     {"warmup_steps": "2", "steps": "4"})
    request = {**job_request(job, "cuda", tmp_path / "cache"), "index": 0, "git_commit": None, "git_dirty": None,
               "telemetry": True, "project_dir": str(tmp_path), "script": job.script.to_dict()}
    (tmp_path / "request.json").write_text(json.dumps(request))
    (tmp_path / "driver.py").write_text(DRIVER)
    proc = subprocess.run([sys.executable, str(tmp_path / "driver.py"), str(tmp_path / "request.json"),
                           str(tmp_path / "response.json"), str(Path(__file__).parent)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)})
    line = next((x for x in proc.stdout.splitlines() if x.startswith("EVENTS ")), None)
    assert line is not None, proc.stdout + proc.stderr
    events = json.loads(line.removeprefix("EVENTS "))
    assert "the script began" in events
    assert events[: events.index("the script began")] == []
    response = json.loads((tmp_path / "response.json").read_text())
    assert not response["ok"]  # it exited before a step: the order of the calls was the point


def test_the_sampler_samples_the_gpu_the_script_trains_on() -> None:
    """Read when the window opens: the last warmup loss's device, else the optimizer's."""
    import torch

    from perfgate.measure.timeline import HostTimeline
    from perfgate.measure.script_hooks import ScriptHooks
    from perfgate.measure.script_run import script_gpu_index

    hooks = ScriptHooks(HostTimeline(1), warmup_steps=1, steps=1)
    assert script_gpu_index(hooks) is None
    hooks.step_loss = types.SimpleNamespace(device=torch.device("cuda", 1))
    assert script_gpu_index(hooks) == 1
    hooks.step_loss = types.SimpleNamespace(device=torch.device("cpu"))
    param = types.SimpleNamespace(device=torch.device("cuda", 2))
    optimizer = types.SimpleNamespace(param_groups=[{"params": [param]}])
    import weakref

    class Holder:
        pass

    holder = Holder()
    holder.param_groups = optimizer.param_groups  # type: ignore[attr-defined]
    hooks.optimizer = weakref.ref(holder)
    assert script_gpu_index(hooks) == 2


@pytest.mark.gpu
@pytest.mark.slow
def test_cuda_a_script_run_leaves_cuda_to_the_script_and_samples_its_gpu(tmp_path: Path) -> None:
    """A real script repeat on CUDA in its own process: CUDA is not initialised at the
    script's first line, and the telemetry samples the GPU the script trains on."""
    from perfgate.measure.runner import run_one
    from perfgate.measure.script_job import script_job, script_of
    from perfgate.model.result import repeat_from_dict

    seen = tmp_path / "seen.txt"
    (tmp_path / "train_cuda.py").write_text(
        "import torch\n"
        f"open({str(seen)!r}, 'w').write(str(torch.cuda.is_initialized()))\n"
        "device = torch.device('cuda', torch.cuda.device_count() - 1)\n"
        "torch.cuda.set_device(device)\n"
        "model = torch.nn.Linear(64, 8).to(device)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.01)\n"
        "for _ in range(100):\n"
        "    model(torch.randn(32, 64, device=device)).sum().backward()\n"
        "    opt.step()\n"
        "    opt.zero_grad()\n")
    job = script_job(script_of(str(tmp_path / "train_cuda.py"), [], tmp_path), "cuda",
                     {"warmup_steps": "3", "steps": "10"})
    response = run_one(job, "cuda", 0, tmp_path / "cache", (None, None), 300.0, True, project_dir=tmp_path)
    assert seen.read_text() == "False"
    repeat = repeat_from_dict(response["repeat"], "repeat")
    assert repeat.timing == "cuda_events"
    gpu = (repeat.telemetry or {}).get("gpu") or {}
    if isinstance(gpu.get("device"), dict):  # NVML present: the CUDA device it found and sampled
        import torch

        assert gpu["device"].get("cuda_device") == torch.cuda.device_count() - 1
