"""The sequential gate's error rates and decisiveness, through the real driver.

Each cell runs simulated paired gates of three workloads (the first may be slowed, Holm over
all three and their median-step entries) through ``perfgate.analysis.driver.drive`` and the
real ``compare``: the first look at 6 ABBA blocks, a look after every block up to
``max_blocks`` (30), α = 1% and the PASS bound spent over the looks. Process noise is the sd
of log step time between fresh processes, with AR(0.3) between consecutive processes and a
drift of 0.1% per process; no outliers or throttling (``--outliers`` adds the default 2% of
each).

    python benchmarks/sequential.py                 # every cell, the gate counts below
    python benchmarks/sequential.py --cells aa15    # one cell
    python benchmarks/sequential.py --gates 400     # fewer gates a cell

It prints one markdown row per cell: the verdict shares of the changed workload, the false
REGRESSION share over the family (with its exact 95% upper bound), and the blocks the changed
workload was decided at (or left undecided at), with the share decided within 6 blocks.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from scipy.stats import binomtest

from perfgate.analysis.decide import GateConfig
from perfgate.analysis.simulate import Noise, Scenario, simulate
from perfgate.model.verdict import Verdict


def noise(sd: float, outliers: bool) -> Noise:
    if outliers:
        return Noise(run_sd_log=sd, ar=0.3, drift_per_process=0.001)
    return Noise(run_sd_log=sd, ar=0.3, drift_per_process=0.001, outlier_rate=0.0, throttle_rate=0.0)


def cells(outliers: bool, big: int, small: int) -> dict[str, tuple[Scenario, int, str]]:
    out: dict[str, tuple[Scenario, int, str]] = {}
    for sd, gates in ((0.01, big), (0.05, big), (0.15, small), (0.20, small)):
        pct = round(sd * 100)
        out[f"aa{pct}"] = (Scenario(noise(sd, outliers), 0.0), gates, f"A/A, {pct}% noise")
        out[f"delta{pct}"] = (Scenario(noise(sd, outliers), 0.03), gates, f"true +3% (= δ), {pct}% noise")
        out[f"slow{pct}"] = (Scenario(noise(sd, outliers), 0.25), max(gates // 4, 100),
                             f"true +25%, {pct}% noise")
    for budget in (6, 12, 20):
        out[f"aa15b{budget}"] = (Scenario(noise(0.15, outliers), 0.0, budget_blocks=budget), small,
                                 f"A/A, 15% noise, budget of {budget} blocks")
    return out


def row(key: str, what: str, scenario: Scenario, gates: int, config: GateConfig, seed: int) -> str:
    began = time.perf_counter()
    r = simulate(scenario, gates, config, seed=seed)
    seconds = time.perf_counter() - began
    shares = " / ".join(f"{r.share(v) * 100:.1f}" for v in (Verdict.REGRESSION, Verdict.PASS,
                                                            Verdict.INCONCLUSIVE, Verdict.IMPROVED))
    upper = binomtest(r.false_regressions, r.gates).proportion_ci(0.95, method="exact").high
    used = sorted(r.changed_units)
    within6 = sum(u <= 6 and v is not Verdict.INCONCLUSIVE
                  for u, v in zip(r.changed_units, r.changed_verdicts, strict=True)) / len(used)
    return (f"| {key} | {what} | {r.gates} | {shares} | {r.false_regression_share * 100:.2f}% "
            f"(≤ {upper * 100:.2f}%) | {statistics.median(used):g} [{used[len(used) // 10]}, "
            f"{used[len(used) * 9 // 10]}] | {within6 * 100:.0f}% | {seconds:.0f} s |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", nargs="*", help="cell keys (default: all)")
    parser.add_argument("--gates", type=int, default=4000, help="gates a cell at 1%% and 5%% noise")
    parser.add_argument("--noisy-gates", type=int, default=1000, help="gates a cell at 15%% and 20%% noise")
    parser.add_argument("--outliers", action="store_true", help="2%% outliers (+30%%) and 2%% throttled processes")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--gamma", type=float, default=None, help="the spending function's γ (default: the gate's)")
    args = parser.parse_args(argv)
    config = GateConfig() if args.gamma is None else GateConfig(spending_gamma=args.gamma)
    table = cells(args.outliers, args.gates, args.noisy_gates)
    keys = args.cells or list(table)
    unknown = [k for k in keys if k not in table]
    if unknown:
        print(f"unknown cell {unknown[0]!r}; cells: {', '.join(table)}", file=sys.stderr)
        return 2
    print(f"max_blocks {config.max_blocks}, first look 6 blocks, alpha {config.alpha:g}, delta "
          f"{config.delta * 100:g}%, spending gamma {config.spending_gamma:g}, outliers "
          f"{'on' if args.outliers else 'off'}, seed {args.seed}")
    print("| cell | scenario | gates | changed workload REG / PASS / INC / IMP % | false REGRESSION (95% upper) "
          "| changed workload's blocks: median [10%, 90%] | decided within 6 blocks | time |")
    print("|---|---|---:|---|---|---|---:|---:|")
    for key in keys:
        scenario, gates, what = table[key]
        print(row(key, what, scenario, gates, config, args.seed), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
