"""Instrumentation overhead: perfgate's phase-timed step against a plain training loop.

Both loops run in this one process on the same model, optimizer and batches, interleaved
in alternating blocks (ABBA...), so drift of a shared machine hits both alike. The plain
loop is what a user would write; the instrumented one is exactly what the runner executes
inside its measured window (``perfgate.measure.loop._Step`` with the CPU phase clock,
the loss kept on the device). Prints microseconds per step and the ratio, per workload.

    .venv/bin/python benchmarks/overhead.py [--blocks N]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from perfgate.discovery import discover
from perfgate.measure.clock import HostClock
from perfgate.measure.loop import _Step, apply_torch_settings
from perfgate.measure.telemetry import TelemetrySampler
from perfgate.workload import BuildContext, Built, DataSource, Params


def plain_block(step: _Step, n: int) -> float:
    model, optimizer, loss_fn, device = step.model, step.optimizer, step.loss_fn, step.device
    start = time.perf_counter()
    for _ in range(n):
        inputs, targets = next(step.iterator)
        inputs, targets = inputs.to(device), targets.to(device)
        loss = loss_fn(model(inputs), targets)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return (time.perf_counter() - start) / n


def instrumented_block(step: _Step, n: int) -> float:
    clock = HostClock(n)
    losses: list[torch.Tensor] = []
    keep = losses.append
    clock.start_window()
    for _ in range(n):
        keep(step(clock).detach())
    clock.end_window()
    times = clock.finish()
    return times.window_s / n


def sampled_block(step: _Step, n: int) -> float:
    """The measured step with the telemetry sampler running, as in a real repeat."""
    sampler = TelemetrySampler("cpu")
    sampler.start()
    try:
        return instrumented_block(step, n)
    finally:
        sampler.stop()


def compare(label: str, step: _Step, blocks: int, steps_per_block: int,
            base: Callable[[_Step, int], float] = plain_block,
            other: Callable[[_Step, int], float] = instrumented_block,
            names: tuple[str, str] = ("plain loop", "perfgate measured")) -> None:
    plain: list[float] = []
    instrumented: list[float] = []
    for b in range(blocks):
        order = (base, other) if b % 2 == 0 else (other, base)
        for fn in order:
            (plain if fn is base else instrumented).append(fn(step, steps_per_block))
    p, i = statistics.median(plain), statistics.median(instrumented)
    # Paired by block: each block's instrumented time against its neighbour plain time.
    diffs = sorted((b - a) * 1e6 for a, b in zip(plain, instrumented))
    print(f"{label}: {blocks} blocks x {steps_per_block} steps per loop, interleaved")
    print(f"  {names[0]:<26} median {p * 1e6:10.1f} us/step")
    print(f"  {names[1]:<26} median {i * 1e6:10.1f} us/step")
    print(f"  difference (paired median) {statistics.median(diffs):+8.1f} us/step"
          f"   [quartiles {diffs[len(diffs) // 4]:+.1f}, {diffs[3 * len(diffs) // 4]:+.1f}]")
    print(f"  ratio                       {i / p:.4f}")


def bookkeeping_only(n: int = 200_000) -> tuple[float, float]:
    """The marks and the loss bookkeeping alone, against an empty loop (us per step)."""
    loss = torch.zeros(())
    start = time.perf_counter()
    for _ in range(n):
        pass
    empty = (time.perf_counter() - start) / n
    clock = HostClock(n)
    losses: list[torch.Tensor] = []
    keep = losses.append
    start = time.perf_counter()
    clock.start_window()
    for _ in range(n):
        clock.begin_step()
        clock.after_data()
        clock.after_h2d()
        clock.after_forward()
        clock.after_backward()
        clock.after_optimizer()
        keep(loss.detach())
    clock.end_window()
    marked = (time.perf_counter() - start) / n
    start = time.perf_counter()
    clock.finish()
    finish = (time.perf_counter() - start) / n
    return (marked - empty) * 1e6, finish * 1e6


def tiny_step() -> _Step:
    params = Params(batch_size=4, input_size=16, warmup_steps=0, steps=2, num_threads=1)
    apply_torch_settings(params, "cpu")
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    batches = [(torch.randn(4, 16), torch.randint(0, 4, (4,))) for _ in range(8)]
    built = Built(model, torch.optim.SGD(model.parameters(), lr=0.01), torch.nn.CrossEntropyLoss(),
                  itertools.cycle(batches), DataSource("synthetic", "memory", "", "none", 8))
    return _Step(built, torch.device("cpu"), params)


def workload_step(name: str, steps: int) -> _Step:
    workload = discover().get(name)
    params = workload.resolve("cpu", {"steps": str(steps), "warmup_steps": "0"})
    apply_torch_settings(params, "cpu")
    cache = Path.home() / ".cache" / "perfgate"
    built = workload.build(BuildContext(params, "cpu", None, cache, name))
    step = _Step(built, torch.device("cpu"), params)
    for _ in range(3):  # warm up allocator and caches
        plain_block(step, 1)
    return step


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--blocks", type=int, default=40, help="interleaved blocks per loop for the tiny model")
    parser.add_argument("--resnet-blocks", type=int, default=12, help="interleaved blocks for resnet18-cifar10")
    parser.add_argument("--telemetry", action="store_true", help="also measure the telemetry sampler's cost")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; command: {' '.join(sys.argv)}")
    per_step, finish = bookkeeping_only()
    print(f"bookkeeping alone (6 marks + keeping the loss): {per_step:.2f} us/step inside the window,"
          f" {finish:.2f} us/step to turn marks into phases after it")
    step = tiny_step()
    plain_block(step, 200)
    compare("tiny MLP (16-16-4, batch 4, in-memory batches)", step, args.blocks, 500)
    if args.telemetry:
        # blocks of ~1 s so each holds about ten samples of the 100 ms sampler
        compare("tiny MLP, telemetry sampler on vs off", step, args.blocks // 2, 4000,
                base=instrumented_block, other=sampled_block, names=("measured, no sampler", "measured, sampler on"))
    steps_per_block = 4
    step = workload_step("resnet18-cifar10", 3 + 2 * args.resnet_blocks * steps_per_block + 8)
    compare("resnet18-cifar10, CPU profile (batch 16)", step, args.resnet_blocks, steps_per_block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
