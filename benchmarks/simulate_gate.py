"""Share of each verdict over seeded synthetic gates: noise x true slowdown x recordings.

    python benchmarks/simulate_gate.py [--gates 4000] [--seed 0] [--day-sd 0.01] ...

Prints a markdown table. Every gate runs the real perfgate.stats.log_ratio and
perfgate.decide.decide_time (see perfgate/simulate.py for the noise model).
"""

from __future__ import annotations

import argparse
import math
import shlex
import sys
import time
from pathlib import Path

try:
    import perfgate  # noqa: F401
except ImportError:  # run from a checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perfgate.decide import GateConfig, Verdict
from perfgate.simulate import Scenario, simulate

RUN_SDS = (0.01, 0.02, 0.03)
SLOWDOWNS = (0.0, 0.03, 0.05, 0.10)
RECORDINGS = (1, 3)


def _optional_float(text: str) -> float | None:
    return None if text.lower() == "none" else float(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gates", type=int, default=4000, help="gates per cell")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--day-sd", type=float, default=0.01, help="true day-to-day sd of log")
    parser.add_argument("--outlier-rate", type=float, default=0.02)
    parser.add_argument("--outlier-factor", type=float, default=1.30)
    defaults = GateConfig()
    parser.add_argument("--assumed-day-sd", type=float, default=defaults.assumed_day_sd_log)
    parser.add_argument("--day-prior-df", type=float, default=defaults.day_prior_df)
    parser.add_argument("--outlier-sd", type=_optional_float, default=defaults.outlier_sd, help="or 'none'")
    parser.add_argument("--looks", type=int, default=defaults.looks)
    args = parser.parse_args(argv)
    config = GateConfig(
        assumed_day_sd_log=args.assumed_day_sd,
        day_prior_df=args.day_prior_df,
        outlier_sd=args.outlier_sd,
        looks=args.looks,
    )
    shown = ["python", "benchmarks/simulate_gate.py", *(sys.argv[1:] if argv is None else argv)]
    print(f"$ {shlex.join(shown)}")
    print(
        f"# model: day-to-day sd {args.day_sd:.1%}, one repeat in {1 / args.outlier_rate:.0f} "
        f"{args.outlier_factor - 1:.0%} slower, 5 repeats per side, second look +5"
        if args.outlier_rate > 0
        else f"# model: day-to-day sd {args.day_sd:.1%}, no outliers, 5 repeats per side, second look +5"
    )
    prior_df = "known" if math.isinf(config.day_prior_df) else f"{config.day_prior_df:g} df"
    print(
        f"# gate: alpha={config.alpha:g} (one-sided, {config.looks} look(s)), delta={config.delta:.0%}, "
        f"assumed day sd {config.assumed_day_sd_log:.1%} ({prior_df}), outlier_sd={config.outlier_sd}"
    )
    print()
    header = ("run-to-run sd", "recordings", "true slowdown", "gates", "REGRESSION", "PASS",
              "INCONCLUSIVE", "IMPROVED", "second look", "outlier set aside")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---:" for _ in header) + "|")
    started = time.perf_counter()
    for run_sd in RUN_SDS:
        for recordings in RECORDINGS:
            for slowdown in SLOWDOWNS:
                scenario = Scenario(run_sd, slowdown, recordings, day_sd_log=args.day_sd,
                                    outlier_rate=args.outlier_rate, outlier_factor=args.outlier_factor)
                r = simulate(scenario, args.gates, config, seed=args.seed)
                shares = [f"{r.share(v):.1%}" for v in
                          (Verdict.REGRESSION, Verdict.PASS, Verdict.INCONCLUSIVE, Verdict.IMPROVED)]
                cells = [f"{run_sd:.0%}", str(recordings), f"{slowdown:.0%}", str(r.gates), *shares,
                         f"{r.second_looks / r.gates:.0%}", f"{r.with_exclusions / r.gates:.0%}"]
                print("| " + " | ".join(cells) + " |", flush=True)
    print()
    print(f"# {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
