"""A user's workload whose DataLoader worker count lives in the training code, not in the parameters.

This is the shape of the `perfgate tune-loader` demo's last step: the loader setting the
advisor recommends is adopted as a *code change* (the builder below stands in for a
repository's own `make_dataloader()`), so the workload's pinned parameters stay the same
and `perfgate gate` can compare the change with a baseline recorded before it. The
environment variable DEMO_LOADER_WORKERS stands in for that code change, as
TINY_FORWARD_DELAY_MS does in tests/fixtures/tiny_workloads.py.

The parameters are those of resnet18-imagenette (CPU profile: batch 16, 96 px crops,
3 warmup + 20 steps) with sample_delay_ms=20: each sample sleeps 20 ms in the dataset, as
if storage were slow (320 ms per batch of 16). Their num_workers (0) is NOT what runs: the
builder decides; every repeat's result records the loader settings actually in effect
(`repeats[i].loader_settings`).
"""

from __future__ import annotations

import dataclasses
import os

import perfgate_workloads.resnet18_imagenette as reference  # a module, so its Workload is not re-registered here

from perfgate import BuildContext, Built, Workload


def loader_workers() -> int:
    """The training code's choice of DataLoader workers (the line a pull request would change)."""
    return int(os.environ.get("DEMO_LOADER_WORKERS", "0"))


def build(ctx: BuildContext) -> Built:
    params = dataclasses.replace(ctx.params, num_workers=loader_workers())
    return reference.build(dataclasses.replace(ctx, params=params))


IMAGENETTE_SLOW_IO = Workload(
    name="imagenette-slow-io",
    version=1,
    description="resnet18-imagenette with 20 ms per sample of simulated storage latency; "
                "DataLoader workers set in code (DEMO_LOADER_WORKERS)",
    build=build,
    params=dataclasses.replace(reference.RESNET18_IMAGENETTE.params,
                               extra={**reference.RESNET18_IMAGENETTE.params.extra, "sample_delay_ms": 20.0}),
    profiles={
        "cuda": {"num_workers": 0},
        "cpu": {**reference.RESNET18_IMAGENETTE.profiles["cpu"], "num_workers": 0},
    },
)
