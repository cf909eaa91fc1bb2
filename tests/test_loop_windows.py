"""``--windows N``: one warmup, then N timed windows of ``steps`` steps in one repeat.

``make_loader`` sizes its sampler to the batches the repeat runs, all windows included, so
no window restarts the loader (a restart inside a window is timed as data wait and labels
the repeat LOADER-RESTART); a loader that does run out in any window is counted.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from perfgate.measure.loader import make_loader
from perfgate.measure.loop import run_repeat
from perfgate.model.workload import BuildContext, Built, Params, Workload


class Indexed(Dataset[Any]):
    """Samples that remember which indices were read."""

    def __init__(self, n: int, seen: list[int]) -> None:
        self.n = n
        self.seen = seen
        self.x = torch.randn(n, 4, generator=torch.Generator().manual_seed(0))

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        self.seen.append(int(i))
        return self.x[i], int(i) % 2


def workload(seen: list[int], contexts: list[BuildContext], *, loader_batches: int | None = None) -> Workload:
    def build(ctx: BuildContext) -> Built:
        contexts.append(ctx)
        data = Indexed(1000, seen)
        if loader_batches is None:
            loader = make_loader(data, ctx)
        else:  # the workload's own loader, shorter than the repeat
            loader = DataLoader(torch.utils.data.Subset(data, range(loader_batches * ctx.params.batch_size)),
                                batch_size=ctx.params.batch_size, drop_last=True)
        model = torch.nn.Linear(4, 2)
        return Built(model, torch.optim.SGD(model.parameters(), lr=0.01), torch.nn.CrossEntropyLoss(), loader)

    return Workload("windowed", 1, build=build, params=Params(batch_size=2, warmup_steps=2, steps=4, num_threads=1))


@pytest.fixture
def keep_threads() -> Any:
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("windows", [1, 3])
def test_make_loader_holds_every_windows_batches(tmp_path: Path, keep_threads: None, windows: int) -> None:
    seen: list[int] = []
    contexts: list[BuildContext] = []
    w = workload(seen, contexts)
    repeat, _ = run_repeat(w, w.params, "cpu", data_root=None, cache_dir=tmp_path, index=0, telemetry=False,
                           windows=windows)
    assert contexts[0].windows == windows
    assert repeat.loader_restarts == 0
    assert repeat.steps == windows * 4
    batches = 2 + windows * 4
    assert repeat.loader_settings["num_batches"] == batches
    # every batch of every window is a new one: warmup + windows x steps batches, no index read twice
    assert len(seen) == batches * 2 and len(set(seen)) == len(seen)
    # the start is recorded to the millisecond: the judge checks these instants against the measuring job's run
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00", repeat.started_at)


def test_a_restart_inside_any_window_is_counted(tmp_path: Path, keep_threads: None) -> None:
    # 5 batches a pass: warmup takes 2; window 1 takes 3 and restarts for its 4th step; window 2
    # takes 4 (the pass's batches 2-5); window 3 restarts for its first step
    seen: list[int] = []
    w = workload(seen, [], loader_batches=5)
    repeat, _ = run_repeat(w, w.params, "cpu", data_root=None, cache_dir=tmp_path, index=0, telemetry=False,
                           windows=3)
    assert repeat.loader_restarts == 2


def test_a_build_context_is_one_window_unless_told() -> None:
    ctx = BuildContext(params=Params(batch_size=2), device="cpu", data_root=None, cache_dir=Path("."))
    assert ctx.windows == 1
