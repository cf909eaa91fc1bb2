"""What a counted run costs: its wall time beside a measured repeat's, on the CPU.

For each reference workload (CPU profile), alternately: ``perfgate run W --repeats 1``
(one measured repeat in its fresh process, the command's own start-up included) and
``perfgate counters W`` as the gate would start it (``perfgate.measure.counters.count_job``:
a fresh process, the build, the warmup, then the counted steps). Both are wall times of
the whole thing, process start included. The synthetic data is made beforehand, so
neither pays for it. Prints seconds per run and their ratio, and what was counted.

    .venv/bin/python benchmarks/counters_cost.py [--rounds N] [--steps N] [WORKLOAD ...]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from perfgate.measure.counters import count_job
from perfgate.measure.runner import default_cache_dir
from perfgate.model.counters import CounterSet
from perfgate.model.job import Job
from perfgate.model.workload import BuildContext
from perfgate.store.discovery import discover

REFERENCE = ("resnet18-cifar10", "resnet18-imagenette")


def prepare(job: Job, cache_dir: Path) -> None:
    """Build the workload once here: the synthetic data lands in the cache."""
    ctx = BuildContext(params=job.params, device="cpu", data_root=None, cache_dir=cache_dir, workload=job.workload.name)
    job.workload.build(ctx)


def measured_repeat(name: str, cache_dir: Path, out: Path) -> float:
    began = time.perf_counter()
    subprocess.run([sys.executable, "-m", "perfgate", "run", name, "--repeats", "1", "--device", "cpu",
                    "--out", str(out), "--cache-dir", str(cache_dir), "--config", str(out / "none.toml"), "-q"],
                   check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - began


def counted_run(job: Job, cache_dir: Path, steps: int) -> tuple[float, CounterSet]:
    began = time.perf_counter()
    outcome = count_job(job, "cpu", cache_dir, steps=steps)
    seconds = time.perf_counter() - began
    if outcome.counters is None:
        raise SystemExit(f"{job.workload.name}: the counted run failed: {outcome.error}")
    return seconds, outcome.counters


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workloads", nargs="*", default=list(REFERENCE))
    parser.add_argument("--rounds", type=int, default=1, help="runs of each kind per workload (default 1)")
    parser.add_argument("--steps", type=int, default=3, help="counted steps (default 3)")
    args = parser.parse_args()
    cache_dir = default_cache_dir()
    registry = discover()
    rows = []
    with tempfile.TemporaryDirectory(prefix="perfgate-counters-cost-") as tmp:
        for name in args.workloads:
            workload = registry.get(name)
            job = Job(workload, workload.resolve("cpu"), {})
            prepare(job, cache_dir)
            repeats, counts = [], []
            counters = None
            for r in range(args.rounds):
                # Alternate which goes first, so a drift of the shared machine hits both alike.
                if r % 2 == 0:
                    repeats.append(measured_repeat(name, cache_dir, Path(tmp)))
                    seconds, counters = counted_run(job, cache_dir, args.steps)
                    counts.append(seconds)
                else:
                    seconds, counters = counted_run(job, cache_dir, args.steps)
                    counts.append(seconds)
                    repeats.append(measured_repeat(name, cache_dir, Path(tmp)))
            assert counters is not None
            rows.append((name, job.params, statistics.median(repeats), statistics.median(counts), counters))
    print(f"CPU, {args.rounds} round(s) per workload, {args.steps} counted steps; wall seconds, process start included")
    print(f"{'workload':<22} {'measured repeat':>16} {'counted run':>12} {'ratio':>6}   counted run in its process")
    for name, params, repeat_s, count_s, counters in rows:
        print(f"{name:<22} {repeat_s:>14.1f} s {count_s:>10.1f} s {count_s / repeat_s:>6.2f}   "
              f"{counters.timings['counted_run_s']:.1f} s (import, build, {counters.warmup_steps} warmup + "
              f"{counters.steps} counted steps; a repeat runs {params.warmup_steps} + {params.steps})")
    print()
    for name, _, _, _, c in rows:
        per = c.per_step
        print(f"{name}: per step {per(c.total('ops')):.0f} aten calls, {per(c.total('copies')):.0f} copies, "
              f"{per(c.total('flops')) / 1e9:.2f} GFLOP, {per(c.total('syncs')):.0f} host synchronisations")
    return 0


if __name__ == "__main__":
    sys.exit(main())
