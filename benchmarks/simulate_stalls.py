"""The verdict on time per step, through the real gate: stalls, random slow steps, noisier heads, clock dips.

    python benchmarks/simulate_stalls.py [--gates 4000] [--jobs 2]

Every gate is the paired design's whole two-look procedure (``perfgate.analysis.simulate``:
three workloads, 6 + 6 ABBA blocks, Holm over the family, the looks' correlation passed as
``run_paired_gate`` passes it), judged by the real ``perfgate.analysis.compare.compare``.
Each repeat holds 64 drawn steps (1% step-to-step jitter) split into the five phases.

Rows:
- stall every k-th step: the changed workload's head waits for data on one step in k; the
  mean effect on the time per step is 2δ (6%); the median step does not move;
- A/A, random slow steps: 1% of the steps on both sides 5x slower;
- A/A, head 2x/3x/10x noisier than base, AR(1) 0 and 0.3 between consecutive processes;
- A/A, clock dips: 20% of the processes on both sides 8% slower with an 8% lower SM clock
  and no slowdown event (what the old one-sided clock screen left out on the head only).

Columns: the changed workload's final verdict shares; "false REGRESSION", the share of
gates with a REGRESSION on a workload that did not change, with its one-sided 95%
Clopper-Pearson upper bound; the median of the changed workload's time-per-step estimate.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor

from scipy import stats as st

from perfgate.analysis.simulate import CellResult, Noise, Scenario, simulate
from perfgate.model.verdict import Verdict

STEPS, JITTER = 64, 0.01


def cells() -> list[tuple[str, Scenario]]:
    quiet = Noise(run_sd_log=0.01, ar=0.0, outlier_rate=0.0, throttle_rate=0.0, day_sd_log=0.0)
    common = {"steps": STEPS, "step_sd": JITTER, "phases": True}
    rows = [(f"stall every {k}th step, mean +6%", Scenario(quiet, stall_every=k, stall_share=0.06, **common))
            for k in (4, 8, 16)]
    rows.append(("A/A, 1% of steps 5x slower", Scenario(quiet, slow_step_rate=0.01, **common)))
    for factor in (2, 3, 10):
        for ar in (0.0, 0.3):
            noise = Noise(run_sd_log=0.05, ar=ar, outlier_rate=0.0, throttle_rate=0.0, day_sd_log=0.0,
                          current_sd_factor=factor)
            rows.append((f"A/A, head {factor}x noisier, AR {ar:g}, sd 5%", Scenario(noise, **common)))
    rows.append(("A/A, clock dips on both sides", Scenario(quiet, clock_dip_rate=0.2, **common)))
    return rows


def run(item: tuple[str, Scenario, int]) -> tuple[str, CellResult]:
    name, scenario, gates = item
    return name, simulate(scenario, gates, seed=21)


def upper(k: int, n: int) -> float:
    return 1.0 if k >= n else float(st.beta.ppf(0.95, k + 1, n - k))


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gates", type=int, default=4000)
    parser.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    items = [(name, s, args.gates) for name, s in cells()]
    with ProcessPoolExecutor(args.jobs) as pool:
        results = list(pool.map(run, items))
    print("| cell | gates | REGRESSION | PASS | INCONCLUSIVE | false REGRESSION [95% upper] | "
          "median estimate (time per step) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, r in results:
        ratios = r.ratios.get("per_step", ())
        est = f"{(statistics.median(ratios) - 1) * 100:+.2f}%" if ratios else "—"
        print(f"| {name} | {r.gates} | {r.share(Verdict.REGRESSION) * 100:.1f}% | {r.share(Verdict.PASS) * 100:.1f}% | "
              f"{r.share(Verdict.INCONCLUSIVE) * 100:.1f}% | {r.false_regression_share * 100:.2f}% "
              f"[{upper(r.false_regressions, r.gates) * 100:.2f}%] | {est} |")
    print(f"\n{len(results)} cells, {args.gates} gates each, {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
