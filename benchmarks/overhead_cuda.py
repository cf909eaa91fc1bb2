"""Instrumentation overhead on CUDA: the device-timed step against a plain training loop.

Needs a CUDA device. Both loops run in this one process on the same model, optimizer and
batches (pinned host tensors, cycled, so no loader runs). The plain loop is what a user
writes (``next``, ``.to(device, non_blocking=True)``, forward, loss, backward, step,
``zero_grad``). The measured one is what the runner executes inside its window on CUDA:
``loop._Step`` with :class:`perfgate.measure.timeline.DeviceTimeline` as it is now (six
CUDA events per step on the current stream: entering the data wait, before the host asks
the DataLoader for the batch, then one per switch and the boundary after the optimizer;
three host clock reads, two bracketing the DataLoader's ``next``), the loss kept on the
device. The figures in docs/measuring.md were measured with an earlier clock (five events,
one host read per step); this timeline's cost on CUDA is not measured yet.

Blocks of ``--steps`` steps alternate, plain then measured then measured then plain
(ABBA), each ended by one synchronisation and timed on the host from its start to the
end of that synchronisation; the per-step cost is the median of the paired block
differences divided by the block's steps. Two models: a tiny MLP (launch-bound: the host
cost of the marks shows in full) and resnet18-cifar10's model at batch 128 (device-bound:
only a mark that stalled the device would show). Also printed, per measured block: the
device's step median from the events against the wall time per step (events and wall
must agree when the device is busy).

    python benchmarks/overhead_cuda.py [--blocks N] [--steps N] [--precision bf16]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time
from collections.abc import Callable

import torch

from perfgate.measure.timeline import IDLE, DeviceTimeline
from perfgate.measure.loop import _created_event, _Step, apply_torch_settings
from perfgate.model.workload import Built, DataSource, Params


def plain_fn(step: _Step) -> Callable[[], object]:
    model, optimizer, loss_fn, iterator, device = step.model, step.optimizer, step.loss_fn, step.iterator, step.device
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(step.params.precision)

    def plain() -> object:
        inputs, targets = next(iterator)
        inputs = inputs.to(device, non_blocking=True)
        targets = targets.to(device, non_blocking=True)
        with torch.autocast("cuda", dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = loss_fn(model(inputs), targets)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss
    return plain


def plain_block(step: _Step, n: int) -> tuple[float, float | None]:
    plain = plain_fn(step)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(n):
        plain()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / n, None


def measured_block(step: _Step, n: int) -> tuple[float, float | None]:
    clock = DeviceTimeline(n, _created_event, synchronize=torch.cuda.synchronize,
                           current_stream=torch.cuda.current_stream)
    losses: list[torch.Tensor] = []
    keep = losses.append
    keep(step(clock).detach())  # one step before the window: the timeline learns its switches
    clock.open(IDLE)  # makes the window's events and synchronises, before the timer starts
    start = time.perf_counter()
    for _ in range(n):
        keep(step(clock).detach())
    torch.cuda.synchronize()  # the block's end, as the plain block's; close reads the events after it
    wall = (time.perf_counter() - start) / n
    times = clock.close()
    return wall, statistics.median(times.series_ms["step"]) / 1e3


def compare(label: str, step: _Step, blocks: int, steps: int) -> None:
    for _ in range(3):
        plain_block(step, steps)
        measured_block(step, steps)
    plain_s: list[float] = []
    measured_s: list[float] = []
    device_s: list[float] = []
    for b in range(blocks):
        order = (plain_block, measured_block) if b % 2 == 0 else (measured_block, plain_block)
        for fn in order:
            wall, device = fn(step, steps)
            if fn is plain_block:
                plain_s.append(wall)
            else:
                measured_s.append(wall)
                if device is not None:
                    device_s.append(device)
    diffs = sorted((m - p) * 1e6 for p, m in zip(plain_s, measured_s, strict=True))
    q = statistics.quantiles(diffs, n=4)
    a, b = statistics.median(plain_s), statistics.median(measured_s)
    print(f"{label}: {blocks} blocks x {steps} steps per loop, ABBA")
    print(f"  plain loop          median {a * 1e6:10.1f} us/step (wall, synchronised per block)")
    print(f"  perfgate measured   median {b * 1e6:10.1f} us/step (wall); device step median "
          f"{statistics.median(device_s) * 1e6:.1f} us (events)")
    print(f"  difference (paired median) {statistics.median(diffs):+8.2f} us/step"
          f"   [quartiles {q[0]:+.2f}, {q[2]:+.2f}]   ratio {b / a:.4f}")


def make_step(model: torch.nn.Module, batches: list[tuple[torch.Tensor, torch.Tensor]], precision: str,
              optimizer: str = "sgd") -> _Step:
    params = Params(batch_size=batches[0][0].shape[0], input_size=batches[0][0].shape[-1], warmup_steps=0,
                    steps=2, precision=precision, cudnn_benchmark=True, pin_memory=True)
    apply_torch_settings(params, "cuda")
    device = torch.device("cuda")
    model.to(device).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    built = Built(model, opt, torch.nn.CrossEntropyLoss(), itertools.cycle(batches),
                  DataSource("synthetic", "memory", "", "none", len(batches)))
    return _Step(built, device, params)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--blocks", type=int, default=40, help="blocks per loop (default 40)")
    parser.add_argument("--steps", type=int, default=100, help="steps per block, tiny MLP (default 100)")
    parser.add_argument("--resnet-steps", type=int, default=20, help="steps per block, resnet18 (default 20)")
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("overhead_cuda: needs a CUDA device", file=sys.stderr)
        return 2
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}; command: {' '.join(sys.argv)}")
    g = torch.Generator().manual_seed(0)
    tiny = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    batches = [(torch.randn(64, 64, generator=g).pin_memory(), torch.randint(0, 10, (64,), generator=g).pin_memory())
               for _ in range(8)]
    compare(f"tiny MLP (64-256-10, batch 64, {args.precision})", make_step(tiny, batches, args.precision),
            args.blocks, args.steps)

    import torchvision

    resnet = torchvision.models.resnet18(num_classes=10)
    resnet.conv1 = torch.nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
    resnet.maxpool = torch.nn.Identity()
    images = [(torch.randn(128, 3, 32, 32, generator=g).pin_memory(),
               torch.randint(0, 10, (128,), generator=g).pin_memory()) for _ in range(4)]
    compare(f"resnet18-cifar10 model (batch 128, {args.precision})", make_step(resnet, images, args.precision),
            max(8, args.blocks // 2), args.resnet_steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
