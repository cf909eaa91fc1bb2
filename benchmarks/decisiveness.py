"""What a gate decides on a noisy runner: the A/A PASS share and the verdicts of unchanged code.

    python benchmarks/decisiveness.py [--gates 2000]

Paired design, three workloads, 6 + 6 ABBA blocks, the real ``compare`` over both looks
(``perfgate.analysis.simulate``), process-to-process sd 10%, 15% and 20% (this 2-core
machine measured 10-24%), AR(0.3), no outliers or throttling. Run it against another
checkout to compare (``PYTHONPATH=<checkout> python benchmarks/decisiveness.py``): it uses
only the simulator's interface both versions share.
"""

from __future__ import annotations

import argparse
import sys
import time

from perfgate.analysis.simulate import Noise, Scenario, simulate
from perfgate.model.verdict import Verdict


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gates", type=int, default=2000)
    args = parser.parse_args(argv)
    print("| process sd | gates | PASS | INCONCLUSIVE | REGRESSION (false) | looked again |")
    print("|---:|---:|---:|---:|---:|---:|")
    started = time.perf_counter()
    for sd in (0.10, 0.15, 0.20):
        noise = Noise(run_sd_log=sd, ar=0.3, outlier_rate=0.0, throttle_rate=0.0, day_sd_log=0.0)
        r = simulate(Scenario(noise), args.gates, seed=5)
        print(f"| {sd * 100:.0f}% | {r.gates} | {r.share(Verdict.PASS) * 100:.1f}% | "
              f"{r.share(Verdict.INCONCLUSIVE) * 100:.1f}% | {r.false_regression_share * 100:.2f}% | "
              f"{r.went_on / r.gates * 100:.0f}% |")
    print(f"\n{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
