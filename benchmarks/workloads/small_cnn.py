"""A small CNN with a 10 ms CPU step: the workload the repeat-cost benchmarks gate.

Small enough that starting a process (the interpreter, ``import torch``, building the model,
warmup) costs many times its measured window, which is where a gate's wall time goes on
small workloads (``benchmarks/repeat_cost.py``). ``SMALL_CNN_SPIN_MS`` (an environment
variable) busy-waits in forward: the stand-in for a code change under test.
"""

from __future__ import annotations

import os
import time

from perfgate import BuildContext, Built, DataSource, Params, Workload


def build(ctx: BuildContext) -> Built:
    import torch
    from torch.utils.data import TensorDataset

    from perfgate.measure.loader import make_loader

    spin_s = float(os.environ.get("SMALL_CNN_SPIN_MS", "0")) / 1e3

    class Spin(torch.nn.Module):
        def forward(self, x):
            end = time.perf_counter() + spin_s
            while time.perf_counter() < end:
                pass
            return x

    p = ctx.params
    g = torch.Generator().manual_seed(p.seed)
    inputs = torch.randn(512, 3, p.input_size, p.input_size, generator=g)
    targets = torch.randint(0, 10, (512,), generator=g)
    dataset = TensorDataset(inputs, targets)
    width = int(p.extra["width"])
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, width, 3, padding=1), torch.nn.ReLU(), Spin(),
        torch.nn.Conv2d(width, width, 3, padding=1), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(width, 10),
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = DataSource(kind="synthetic", path="memory", content_hash=f"randn-seed-{p.seed}",
                      hash_method="generator-seed", num_samples=len(dataset))
    return Built(model=model, optimizer=optimizer, loss_fn=torch.nn.CrossEntropyLoss(),
                 loader=make_loader(dataset, ctx), data=data)


SMALL_CNN = Workload(
    name="small-cnn", version=1, description="a two-conv CNN on random 32x32 images, about 10 ms a step on a CPU",
    build=build,
    params=Params(batch_size=32, input_size=32, warmup_steps=5, steps=30, seed=0, num_threads=1,
                  extra={"width": 16}),
)
