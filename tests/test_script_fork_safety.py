"""Script mode and processes forked from the script: the hooks act only in the process that
installed them.

``installed()`` patches ``torch.nn.Module.__call__`` and the other hooked calls process-wide.
A DataLoader worker forked while the window records inherits the patched methods and a copy
of the timeline; a torchvision transform is an ``nn.Module``, so without a guard the worker's
first transform would switch the timeline to forward and (on CUDA) record an event in a
forked child of a CUDA process. These tests fork real workers (non-persistent, so every epoch
forks new ones, and epochs start inside the window) and spy on the timeline from every
process: a call from any process but the one that installed the hooks leaves a file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

SCRIPT = '''
import sys

import torch
from torch.utils.data import DataLoader, Dataset

try:
    from torchvision.transforms import Normalize
except ImportError:  # the transform is an nn.Module either way
    class Normalize(torch.nn.Module):
        def __init__(self, mean, std):
            super().__init__()
            self.mean, self.std = torch.tensor(mean)[:, None, None], torch.tensor(std)[:, None, None]

        def forward(self, x):
            return (x - self.mean) / self.std


class Images(Dataset):
    def __init__(self):
        self.t = Normalize([0.5] * 3, [0.25] * 3)
        g = torch.Generator().manual_seed(0)
        self.x = torch.rand(32, 3, 4, 4, generator=g)

    def __len__(self):
        return 32

    def __getitem__(self, i):
        x = self.t(self.x[i])
        x = x.to(torch.float32)  # a .to in the worker: the hooks must not see it either
        return x, i % 4


persistent = "--persistent" in sys.argv
loader = DataLoader(Images(), batch_size=8, num_workers=2, persistent_workers=persistent,
                    multiprocessing_context="fork")
model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(48, 4))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for epoch in range(100):
    for x, y in loader:
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
'''


def spy_timelines(marks: Path) -> Any:
    """A timeline factory whose timelines write a file whenever a process other than the
    one that made them switches, marks a boundary or records an event."""
    from perfgate.measure.timeline import DeviceTimeline, HostTimeline

    owner = os.getpid()

    def note(what: str) -> None:
        if os.getpid() != owner:
            (marks / f"{os.getpid()}-{what}").write_text(what)

    class HostSpy(HostTimeline):
        """The host timeline's switch and boundary are closures set on the instance: wrapped there."""

        def __init__(self, steps: int) -> None:
            super().__init__(steps)
            switch, boundary = self.switch, self.boundary

            def spy_switch(old: int, new: int) -> None:
                note("switch")
                switch(old, new)

            def spy_boundary(current: int, after: int | None = None) -> None:
                note("boundary")
                boundary(current, after)

            self.switch = spy_switch  # type: ignore[method-assign]  # the spy on this instance
            self.boundary = spy_boundary  # type: ignore[method-assign]  # the spy on this instance

    class Event:
        def __init__(self) -> None:
            self.at = 0.0

        def record(self, stream: Any = None) -> None:
            note("record")
            import time

            self.at = time.perf_counter()

        def elapsed_time(self, end: Any) -> float:
            return (end.at - self.at) * 1e3

    class DeviceSpy(DeviceTimeline):
        def switch(self, old: int, new: int) -> None:
            note("switch")
            super().switch(old, new)

    def make(device: str, steps: int) -> Any:
        if device == "host":
            return HostSpy(steps)
        return DeviceSpy(steps, Event, synchronize=lambda: None, current_stream=lambda: None)

    return make


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["host", "device"])
@pytest.mark.parametrize("persistent", [False, True])
def test_forked_dataloader_workers_never_touch_the_timeline(tmp_path: Path, kind: str, persistent: bool) -> None:
    from perfgate.measure.script_job import script_job, script_of
    from perfgate.measure.script_run import run_script_repeat

    script_path = tmp_path / "train_fork.py"
    script_path.write_text(SCRIPT)
    marks = tmp_path / "marks"
    marks.mkdir()
    script = script_of(str(script_path), ["--persistent"] if persistent else [], tmp_path)
    # 4 batches an epoch: epochs (and, non-persistent, new workers) start at measured steps 3 and 7
    job = script_job(script, "cpu", {"warmup_steps": "2", "steps": "8", "num_threads": "1"})
    make = spy_timelines(marks)
    repeat, _ = run_script_repeat(job.script, job.params, "cpu", name=job.workload.name, index=0,
                                  telemetry=False, timeline=lambda device, steps: make(kind, steps))
    assert repeat.steps == 8
    assert repeat.loader_settings["num_workers"] == 2
    assert repeat.loader_restarts == 2  # two epochs began inside the window: workers were forked there
    assert sorted(p.name for p in marks.iterdir()) == []  # no worker switched, marked or recorded
    # the hooks still count the script's own module calls in the main process
    assert repeat.torch_settings["script"]["forwards_per_step"] == 1


def test_a_process_forked_under_the_hooks_runs_torch_unhooked(tmp_path: Path) -> None:
    """A bare ``os.fork()`` under the hooks: the child sees torch as it was before they were
    installed (the patches undone in it), and the parent is still hooked."""
    import torch

    from perfgate.measure.timeline import HostTimeline
    from perfgate.measure.script_hooks import ScriptHooks
    from perfgate.measure.script_patches import installed

    before = torch.nn.Module.__call__
    answer = tmp_path / "child.txt"
    calls: list[tuple[int, int]] = []

    line = HostTimeline(2)
    inner = line.switch

    def spy(old: int, new: int) -> None:
        calls.append((old, new))
        inner(old, new)

    line.switch = spy  # type: ignore[method-assign]  # a spy on the instance's switch
    hooks = ScriptHooks(line, warmup_steps=1, steps=2)
    with installed(hooks):
        assert torch.nn.Module.__call__ is not before
        pid = os.fork()
        if pid == 0:  # the child: report, then leave at once
            code = 1
            try:
                torch.nn.Linear(2, 2)(torch.ones(1, 2))  # no hook, no switch here
                answer.write_text(f"{torch.nn.Module.__call__ is before} {len(calls)}")
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        torch.nn.Linear(2, 2)(torch.ones(1, 2))  # the parent is still hooked
    assert answer.read_text() == "True 0"
    assert calls  # the parent's module call switched the timeline
    assert torch.nn.Module.__call__ is before


GPU_SCRIPT = SCRIPT.replace('model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(48, 4))',
                            'model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(48, 4)).cuda()').replace(
    '        torch.nn.functional.cross_entropy(model(x), y).backward()',
    '        torch.nn.functional.cross_entropy(model(x.cuda(non_blocking=True)), y.cuda()).backward()').replace(
    'persistent_workers=persistent,', 'persistent_workers=persistent, pin_memory=True,')


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("persistent", [False, True])
def test_cuda_forked_workers_record_no_event_and_the_window_is_device_timed(tmp_path: Path, persistent: bool) -> None:
    """On CUDA, with the real events wrapped by a spy: a worker forked from this CUDA process
    (non-persistent: inside the window) records nothing, and the repeat is timed on the device."""
    import torch

    from perfgate.measure.loop import _created_event
    from perfgate.measure.timeline import DeviceTimeline
    from perfgate.measure.script_job import script_job, script_of
    from perfgate.measure.script_run import run_script_repeat

    owner = os.getpid()
    marks = tmp_path / "marks"
    marks.mkdir()

    class SpyEvent:
        def __init__(self) -> None:
            self.inner = _created_event()

        def record(self, stream: Any = None) -> None:
            if os.getpid() != owner:
                (marks / f"{os.getpid()}-record").write_text("record")
            self.inner.record(stream)

        def elapsed_time(self, end: Any) -> float:
            return self.inner.elapsed_time(end.inner)

    (tmp_path / "train_fork_cuda.py").write_text(GPU_SCRIPT)
    job = script_job(script_of(str(tmp_path / "train_fork_cuda.py"), ["--persistent"] if persistent else [], tmp_path),
                     "cuda", {"warmup_steps": "2", "steps": "8"})
    repeat, _ = run_script_repeat(
        job.script, job.params, "cuda", name=job.workload.name, index=0, telemetry=False,
        timeline=lambda device, steps: DeviceTimeline(steps, SpyEvent, synchronize=torch.cuda.synchronize,
                                                      current_stream=torch.cuda.current_stream))
    assert repeat.timing == "cuda_events" and repeat.steps == 8 and repeat.loader_restarts == 2
    assert sorted(p.name for p in marks.iterdir()) == []
    assert 0.9 <= repeat.torch_settings["cuda_window"]["device_steps_over_window"] <= 1.02
