"""Instrumentation overhead: perfgate's phase-timed step against a plain training loop.

Both loops run in this one process on the same model, optimizer and batches. The plain
loop is what a user would write on the CPU (``next``, forward, loss, backward, step,
``zero_grad``; autocast entered per step when a lower precision is asked for). The
measured one is exactly what the runner executes inside its window: ``loop._Step`` with
the CPU timeline (``perfgate.measure.timeline.HostTimeline``, the one workloads and scripts
share), the loss kept on the device (``loop.drive``'s body), in windows of ``--window`` steps.

The main figure pairs single steps: plain and measured steps alternate (ABBA), each
timed on its own, and the median of the paired differences is the driver's cost per
step, with a 95% interval from order statistics. Pairing neighbouring steps cancels the
drift of a shared machine far better than comparing blocks, so a few microseconds are
resolved on a step of a few hundred.

    .venv/bin/python benchmarks/overhead.py [--pairs N] [--precision bf16] [--telemetry] [--resnet-blocks N]
"""

from __future__ import annotations

import argparse
import itertools
import math
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from perfgate.measure.timeline import BACKWARD, DATA, FORWARD, H2D, IDLE, OPTIMIZER, HostTimeline
from perfgate.measure.loop import _Step, apply_torch_settings
from perfgate.measure.telemetry import TelemetrySampler
from perfgate.model.workload import BuildContext, Built, DataSource, Params
from perfgate.store.discovery import discover


def plain_step_fn(step: _Step) -> Callable[[], object]:
    """One step as a plain loop writes it, over the same model, optimizer and batches."""
    model, optimizer, loss_fn, iterator = step.model, step.optimizer, step.loss_fn, step.iterator
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(step.params.precision)
    device_type = step.device.type
    if dtype is None:
        def plain() -> object:
            inputs, targets = next(iterator)
            loss = loss_fn(model(inputs), targets)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            return loss
    else:
        def plain() -> object:
            inputs, targets = next(iterator)
            with torch.autocast(device_type, dtype=dtype):
                loss = loss_fn(model(inputs), targets)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            return loss
    return plain


def paired_steps(step: _Step, pairs: int, window: int) -> tuple[list[float], list[float], list[float]]:
    """Alternate plain and measured single steps; (plain us, measured us, paired difference us)."""
    plain = plain_step_fn(step)
    now = time.perf_counter
    plain_us: list[float] = []
    measured_us: list[float] = []
    clock = HostTimeline(window)
    losses: list[torch.Tensor] = []
    keep = losses.append
    in_window = 0
    for i in range(pairs):
        if in_window == window:  # a new window, outside the timed steps
            clock.close()
            losses = []
            keep = losses.append
            in_window = 0
        if in_window == 0:
            clock.open(IDLE)
        if i % 2 == 0:
            t0 = now()
            plain()
            t1 = now()
            keep(step(clock).detach())
            t2 = now()
            p, m = t1 - t0, t2 - t1
        else:
            t0 = now()
            keep(step(clock).detach())
            t1 = now()
            plain()
            t2 = now()
            m, p = t1 - t0, t2 - t1
        plain_us.append(p * 1e6)
        measured_us.append(m * 1e6)
        in_window += 1
    diffs = [m - p for p, m in zip(plain_us, measured_us, strict=True)]
    return plain_us, measured_us, diffs


def median_interval(values: list[float]) -> tuple[float, float, float]:
    """Median and a distribution-free 95% interval for it (binomial order statistics)."""
    ordered = sorted(values)
    n = len(ordered)
    half = 1.96 * math.sqrt(n) / 2
    lo, hi = max(0, int(math.floor(n / 2 - half))), min(n - 1, int(math.ceil(n / 2 + half)))
    return statistics.median(ordered), ordered[lo], ordered[hi]


def report_pairs(label: str, step: _Step, pairs: int, window: int) -> None:
    plain, measured, diffs = paired_steps(step, pairs, window)
    mid, lo, hi = median_interval(diffs)
    q = statistics.quantiles(diffs, n=4)
    print(f"{label}: {pairs} single steps, plain and measured alternating, windows of {window}")
    print(f"  plain loop                 median {statistics.median(plain):10.1f} us/step")
    print(f"  perfgate measured          median {statistics.median(measured):10.1f} us/step")
    print(f"  difference (paired median) {mid:+8.2f} us/step   [95% interval {lo:+.2f}, {hi:+.2f};"
          f" quartiles {q[0]:+.1f}, {q[2]:+.1f}]")


def plain_block(step: _Step, n: int) -> float:
    plain = plain_step_fn(step)
    start = time.perf_counter()
    for _ in range(n):
        plain()
    return (time.perf_counter() - start) / n


def instrumented_block(step: _Step, n: int) -> float:
    clock = HostTimeline(n)
    losses: list[torch.Tensor] = []
    keep = losses.append
    clock.open(IDLE)
    for _ in range(n):
        keep(step(clock).detach())
    times = clock.close()
    return times.window_s / n


def sampled_block(step: _Step, n: int) -> float:
    """The measured step with the telemetry sampler running, as in a real repeat."""
    sampler = TelemetrySampler("cpu")
    sampler.start()
    try:
        return instrumented_block(step, n)
    finally:
        sampler.stop()


def compare_blocks(label: str, step: _Step, blocks: int, steps_per_block: int,
                   base: Callable[[_Step, int], float] = plain_block,
                   other: Callable[[_Step, int], float] = instrumented_block,
                   names: tuple[str, str] = ("plain loop", "perfgate measured")) -> None:
    """Blocks of steps in alternating order (ABBA...): for costs that are not per step (a sampler thread)."""
    first: list[float] = []
    second: list[float] = []
    for b in range(blocks):
        order = (base, other) if b % 2 == 0 else (other, base)
        for fn in order:
            (first if fn is base else second).append(fn(step, steps_per_block))
    a, b = statistics.median(first), statistics.median(second)
    diffs = sorted((y - x) * 1e6 for x, y in zip(first, second, strict=True))
    print(f"{label}: {blocks} blocks x {steps_per_block} steps per loop, interleaved")
    print(f"  {names[0]:<26} median {a * 1e6:10.1f} us/step")
    print(f"  {names[1]:<26} median {b * 1e6:10.1f} us/step")
    print(f"  difference (paired median) {statistics.median(diffs):+8.1f} us/step"
          f"   [quartiles {diffs[len(diffs) // 4]:+.1f}, {diffs[3 * len(diffs) // 4]:+.1f}]")
    print(f"  ratio                       {b / a:.4f}")


def bookkeeping_only(n: int = 200_000) -> tuple[float, float]:
    """The timeline's six calls per step and the loss bookkeeping alone, against an empty loop
    (us per step)."""
    loss = torch.zeros(())
    start = time.perf_counter()
    for _ in range(n):
        pass
    empty = (time.perf_counter() - start) / n
    clock = HostTimeline(n)
    losses: list[torch.Tensor] = []
    keep = losses.append
    start = time.perf_counter()
    clock.open(IDLE)
    for _ in range(n):
        switch = clock.switch
        switch(IDLE, DATA)
        switch(DATA, H2D)
        switch(H2D, FORWARD)
        switch(FORWARD, BACKWARD)
        switch(BACKWARD, OPTIMIZER)
        clock.boundary(OPTIMIZER, IDLE)
        keep(loss.detach())
    marked = (time.perf_counter() - start) / n
    start = time.perf_counter()
    clock.close()
    finish = (time.perf_counter() - start) / n
    return (marked - empty) * 1e6, finish * 1e6


def tiny_step(precision: str = "fp32", width: int = 16) -> _Step:
    params = Params(batch_size=4, input_size=16, warmup_steps=0, steps=2, num_threads=1, precision=precision)
    apply_torch_settings(params, "cpu")
    model = torch.nn.Sequential(torch.nn.Linear(16, width), torch.nn.ReLU(), torch.nn.Linear(width, 4))
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


def loader_step(width: int) -> _Step:
    """The tiny MLP fed by a real DataLoader (in-memory tensors, main process, 4096 samples):
    what a script's hooks watch (the iterator's ``__next__``) is there for both modes."""
    params = Params(batch_size=4, input_size=16, warmup_steps=0, steps=2, num_threads=1)
    apply_torch_settings(params, "cpu")
    model = torch.nn.Sequential(torch.nn.Linear(16, width), torch.nn.ReLU(), torch.nn.Linear(width, 4))
    data = torch.utils.data.TensorDataset(torch.randn(4096, 16), torch.randint(0, 4, (4096,)))
    loader = torch.utils.data.DataLoader(data, batch_size=4)
    built = Built(model, torch.optim.SGD(model.parameters(), lr=0.01), torch.nn.CrossEntropyLoss(), loader,
                  DataSource("synthetic", "memory", "", "none", 4096))
    return _Step(built, torch.device("cpu"), params)


def script_beside_workload(width: int, rounds: int, block: int) -> None:
    """Script mode and workload mode beside a plain loop, in one process on one model and loader.

    Three loops of ``block`` single steps per round, their order rotated every round: the plain
    loop; the same plain loop under the script hooks (``perfgate run --script``'s, installed
    for the block: what an unmodified script pays); the workload's measured step
    (``loop._Step`` with the host timeline, the loss kept). Each block's median step; the
    cost of each mode is the median over rounds of its block median less the plain one's.
    """
    from perfgate.measure.script_hooks import ScriptHooks
    from perfgate.measure.script_patches import installed

    step = loader_step(width)
    iterator = iter(step.built.loader)
    model, optimizer, loss_fn = step.model, step.optimizer, step.loss_fn

    def plain() -> None:
        nonlocal iterator
        try:
            inputs, targets = next(iterator)
        except StopIteration:
            iterator = iter(step.built.loader)
            inputs, targets = next(iterator)
        loss = loss_fn(model(inputs), targets)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    now = time.perf_counter

    def timed_plain(n: int) -> float:
        out = []
        for _ in range(n):
            t0 = now()
            plain()
            out.append(now() - t0)
        return statistics.median(out) * 1e6

    def timed_script(n: int) -> float:
        hooks = ScriptHooks(HostTimeline(10**9), warmup_steps=1, steps=10**9)
        with installed(hooks):
            timed_plain(50)  # the first steps after the patched classes changed: untimed
            return timed_plain(n)

    def timed_workload(n: int) -> float:
        clock = HostTimeline(n)
        losses: list[torch.Tensor] = []
        keep = losses.append
        clock.open(IDLE)
        out = []
        for _ in range(n):
            t0 = now()
            keep(step(clock).detach())
            out.append(now() - t0)
        clock.close()
        return statistics.median(out) * 1e6

    arms = {"plain": timed_plain, "script": timed_script, "workload": timed_workload}
    for fn in arms.values():
        fn(200)
    medians: dict[str, list[float]] = {name: [] for name in arms}
    names = list(arms)
    for r in range(rounds):
        order = names[r % 3:] + names[:r % 3]
        if r % 2:
            order.reverse()
        for name in order:
            medians[name].append(arms[name](block))
    plain_us = statistics.median(medians["plain"])
    print(f"script mode and workload mode beside a plain loop: MLP 16-{width}-4, batch 4, a DataLoader in the main "
          f"process; {rounds} rounds of {block} steps per loop, order rotated")
    print(f"  plain loop                 median {plain_us:10.1f} us/step")
    costs = {}
    for name in ("workload", "script"):
        diffs = [m - p for m, p in zip(medians[name], medians["plain"], strict=True)]
        costs[name] = statistics.median(diffs)
        print(f"  {name + ' mode':<26} median {statistics.median(medians[name]):10.1f} us/step, cost "
              f"{costs[name]:+7.2f} us/step (median over rounds; range {min(diffs):+.1f} to {max(diffs):+.1f})")
    if costs["workload"] > 0:
        print(f"  script mode's cost over workload mode's: {costs['script'] / costs['workload']:.1f}x")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=8000, help="single steps of each loop, paired (tiny MLP)")
    parser.add_argument("--window", type=int, default=100, help="steps per measured window")
    parser.add_argument("--precision", choices=("fp32", "bf16", "fp16"), default="fp32",
                        help="the tiny MLP's precision (the plain loop enters autocast per step for bf16/fp16)")
    parser.add_argument("--width", type=int, default=16, help="hidden width of the tiny MLP")
    parser.add_argument("--telemetry", action="store_true", help="also measure the telemetry sampler's cost")
    parser.add_argument("--script-rounds", type=int, default=0,
                        help="rounds of script mode and workload mode beside a plain loop (0: skip)")
    parser.add_argument("--script-block", type=int, default=1000, help="steps per loop and round for --script-rounds")
    parser.add_argument("--resnet-blocks", type=int, default=0,
                        help="interleaved blocks for resnet18-cifar10 (0: skip; its steps are too long to"
                             " resolve microseconds)")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; command: {' '.join(sys.argv)}")
    per_step, finish = bookkeeping_only()
    print(f"bookkeeping alone (6 timeline calls + keeping the loss): {per_step:.2f} us/step inside the window,"
          f" {finish:.2f} us/step to turn them into phases after it")
    step = tiny_step(args.precision, args.width)
    plain_block(step, 200)
    report_pairs(f"tiny MLP (16-{args.width}-4, batch 4, {args.precision}, in-memory batches)", step, args.pairs,
                 args.window)
    if args.telemetry:
        # blocks of ~1 s so each holds about ten samples of the 100 ms sampler
        compare_blocks("tiny MLP, telemetry sampler on vs off", step, 20, 4000,
                       base=instrumented_block, other=sampled_block,
                       names=("measured, no sampler", "measured, sampler on"))
    if args.script_rounds > 0:
        script_beside_workload(args.width, args.script_rounds, args.script_block)
    if args.resnet_blocks > 0:
        steps_per_block = 4
        step = workload_step("resnet18-cifar10", 3 + 2 * args.resnet_blocks * steps_per_block + 8)
        compare_blocks("resnet18-cifar10, CPU profile (batch 16)", step, args.resnet_blocks, steps_per_block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
