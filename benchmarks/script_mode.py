"""Script mode beside workload mode, and the cost of the hooks per step.

1. Side by side: benchmarks/workloads/mlp_script.py (a plain training script that does not
   import perfgate) measured with ``perfgate run --script``, and the same model written as a
   perfgate workload (benchmarks/workloads/mlp_workload.py), measured in one run with their
   repeats interleaved (script 1, workload 1, script 2, ...), each repeat a fresh process.
   Printed: per phase, the median over repeats of each repeat's median, for both, and their
   ratio (script / workload).

2. The hooks' cost: one process, a tiny model (the cost is per call, not per FLOP), rounds
   of plain-loop steps and of the same steps under the hooks (installed once per round, the
   first steps after a change of the patched classes untimed), in ABBA order; the median of
   the rounds' differences of median steps. Then the hooks' own bookkeeping for one such
   step, called directly in a tight loop.

    .venv/bin/python benchmarks/script_mode.py [--repeats N] [--steps N] [--warmup N] [--rounds N] [--block N]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "workloads" / "mlp_script.py"
WORKLOAD = HERE / "workloads" / "mlp_workload.py"
ROWS = ("data_wait", "h2d", "forward", "backward", "optimizer", "residual", "step")


def side_by_side(repeats: int, warmup: int, steps: int) -> float:
    """Print the table; return the median step of the script (ms)."""
    from perfgate.analysis.summary import summarise
    from perfgate.measure.runner import measure
    from perfgate.measure.script_job import script_job, script_of
    from perfgate.model.job import Job
    from perfgate.store.discovery import load_source

    sets = {"warmup_steps": str(warmup), "steps": str(steps), "num_threads": "1"}
    workload = load_source(f"file:{WORKLOAD}")[0]
    params = workload.resolve("cpu", sets)
    resolved = params.to_dict()
    jobs = [script_job(script_of(str(SCRIPT), (), Path.cwd()), "cpu", sets),
            Job(workload, params, {k: resolved[k] for k in sets})]

    def progress(event: object) -> None:
        status = getattr(event, "status", "")
        if status != "start":
            print(f"  {event.workload} repeat {event.repeat}/{event.repeats} {status}", file=sys.stderr)  # type: ignore[attr-defined]

    with tempfile.TemporaryDirectory() as cache:
        outcome = measure(jobs, device="cpu", repeats=repeats, cache_dir=Path(cache), out_dir=None,
                          progress=progress, telemetry=False)
    if outcome.errors:
        raise SystemExit("; ".join(e.message for e in outcome.errors.values()))
    script, plain = (summarise(outcome.results[j.workload.name]) for j in jobs)
    print(f"side by side: {repeats} interleaved repeats each, {warmup} warmup + {steps} measured steps, "
          "CPU, 1 thread")
    print(f"  {'row':<10} {'script ms':>10} {'workload ms':>12} {'ratio':>7}")
    for row in ROWS:
        a, b = script.median_ms[row], plain.median_ms[row]
        ratio = f"{a / b:7.3f}" if b > 0.005 else "      —"
        print(f"  {row:<10} {a:10.3f} {b:12.3f} {ratio}")
    pairs = [s / w for s, w in zip(script.per_repeat("step"), plain.per_repeat("step"), strict=True)]
    print(f"  step ratio per interleaved pair: median {statistics.median(pairs):.3f}, "
          f"range {min(pairs):.3f}-{max(pairs):.3f}")
    counts = script.repeats[0].torch_settings["script"]
    print(f"  script mode saw per step: {counts['batches_per_step']:.0f} batch, "
          f"{counts['forwards_per_step']:.0f} forward, {counts['backwards_per_step']:.0f} backward, "
          f"optimizer {counts['optimizer']}")
    return script.median_ms["step"]


def hook_cost(rounds: int, block: int) -> float:
    """Print the hooks' cost per step in a training loop; return it (us per step)."""
    import torch
    from torch import nn

    from perfgate.measure.timeline import HostTimeline
    from perfgate.measure.script_hooks import ScriptHooks
    from perfgate.measure.script_patches import installed

    torch.set_num_threads(1)
    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(4096, 16), torch.randint(0, 4, (4096,)))
    loader = torch.utils.data.DataLoader(data, batch_size=16, shuffle=True)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    device = torch.device("cpu")
    batches = iter(loader)
    now = time.perf_counter

    def step() -> None:
        nonlocal batches
        try:
            inputs, targets = next(batches)
        except StopIteration:
            batches = iter(loader)
            inputs, targets = next(batches)
        inputs, targets = inputs.to(device), targets.to(device)
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(inputs), targets)
        loss.backward()
        optimizer.step()

    def timed(n: int) -> list[float]:
        out = []
        for _ in range(n):
            t0 = now()
            step()
            out.append((now() - t0) * 1e6)
        return out

    hooks = ScriptHooks(HostTimeline(10**9), warmup_steps=1, steps=10**9)
    plain_us: list[float] = []
    hooked_us: list[float] = []
    diffs: list[float] = []
    timed(300)
    for r in range(rounds):
        order = (False, True) if r % 2 == 0 else (True, False)
        medians = {}
        for hooked in order:
            with installed(hooks) if hooked else contextlib.nullcontext():
                timed(200)  # after the classes changed: untimed
                values = timed(block)
            (hooked_us if hooked else plain_us).extend(values)
            medians[hooked] = statistics.median(values)
        diffs.append(medians[True] - medians[False])
    cost = statistics.median(diffs)
    print(f"hooks in a loop: tiny MLP (batch 16, 1 thread), {rounds} rounds of {block} plain steps and {block} "
          "steps under the hooks (installed once per round), ABBA")
    print(f"  plain loop          median {statistics.median(plain_us):9.1f} us/step")
    print(f"  under the hooks     median {statistics.median(hooked_us):9.1f} us/step")
    print(f"  difference          {cost:+9.1f} us/step (median of the rounds' differences; "
          f"range {min(diffs):+.1f} to {max(diffs):+.1f})")
    return cost


def bookkeeping_only(n: int = 100_000) -> float:
    """The hooks' own work for one step of that loop, called directly in a tight loop (us per step)."""
    import torch

    from perfgate.measure.timeline import BACKWARD, DATA, H2D, OPTIMIZER, HostTimeline
    from perfgate.measure.script_hooks import ScriptHooks

    class Iterator:
        _num_yielded = 2

    hooks = ScriptHooks(HostTimeline(10**9), warmup_steps=1, steps=10**9)
    iterator, batch, loss = Iterator(), (torch.zeros(16, 16), torch.zeros(16)), torch.zeros(())
    module = torch.nn.Linear(16, 4)
    enter, leave = hooks.enter, hooks.exit
    start = time.perf_counter()
    for _ in range(n):
        enter(DATA)
        leave()
        hooks.on_batch(iterator, batch)
        for _ in range(2):
            enter(H2D)
            leave()
        enter(OPTIMIZER)
        leave()
        hooks.start_forward(module)
        enter(BACKWARD)
        hooks.note_loss(loss)
        leave()
        hooks.check_optimizer(hooks)
        enter(OPTIMIZER)
        leave()
        hooks.step_end()
    per_step = (time.perf_counter() - start) / n * 1e6
    print(f"the hooks' bookkeeping alone (the calls of one such step, in a tight loop): {per_step:.2f} us/step")
    return per_step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--block", type=int, default=1500)
    args = parser.parse_args()
    step_ms = side_by_side(args.repeats, args.warmup, args.steps)
    cost_us = hook_cost(args.rounds, args.block)
    bookkeeping_only()
    print(f"the hooks' cost against the script's median step: {cost_us / (step_ms * 1e3) * 100:.3f}%")


if __name__ == "__main__":
    main()
