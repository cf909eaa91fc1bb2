"""The model of mlp_script.py (in this folder) written as a perfgate workload, for
benchmarks/script_mode.py: the same MLP, data, optimizer and loss; the runner owns the step."""

from __future__ import annotations

from perfgate import BuildContext, Built, DataSource, Params, Workload


def build(ctx: BuildContext) -> Built:
    import torch
    from torch import nn
    from torch.utils.data import TensorDataset

    from perfgate.measure.loader import make_loader

    p = ctx.params
    features, width, samples = p.input_size, int(p.extra["width"]), int(p.extra["samples"])
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(samples, features, generator=g), torch.randint(0, 10, (samples,), generator=g))
    model = nn.Sequential(
        nn.Linear(features, width), nn.ReLU(),
        nn.Linear(width, width), nn.ReLU(),
        nn.Linear(width, 10),
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    source = DataSource("synthetic", "memory", "randn-seed-0", "generator-seed", samples, "random features")
    return Built(model, optimizer, nn.CrossEntropyLoss(), make_loader(data, ctx), source)


MLP = Workload(
    name="mlp-bench",
    version=1,
    description="the MLP of benchmarks/workloads/mlp_script.py as a workload",
    build=build,
    params=Params(batch_size=64, input_size=256, warmup_steps=10, steps=50, num_threads=1,
                  extra={"width": 1024, "samples": 4096}),
)
