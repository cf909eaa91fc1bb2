"""Tabulate the exact t boundaries of the default paired schedules (10^7 null paths each).

    .venv/bin/python benchmarks/t_boundaries.py            # writes perfgate/analysis/stats/t_boundaries.json
    .venv/bin/python benchmarks/t_boundaries.py --check    # the written table against independent paths

The schedules: a first look at 2 to 6 blocks (``blocks`` in the settings), a look after every
block up to 30 (``max_blocks``' default), γ = 1; the levels: ``STANDARD_ALPHAS`` (α/s for
the Holm steps of up to 8 hypotheses, α/2, α/4, and the PASS rule's 2.5%). Deterministic:
the simulation's seed is fixed (``perfgate.analysis.stats.sequential.SEED``). Prints, per
schedule, the seconds it took and, with ``--check``, the crossing rate of α = 1% and 2.5%
on 400,000 independent paths with its Monte-Carlo standard error.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np

from perfgate.analysis.stats import sequential as seq

OUT = Path(seq.__file__).with_name("t_boundaries.json")
FIRSTS = (2, 3, 4, 5, 6)
LAST = 30


def tabulate() -> None:
    schedules = []
    for first in FIRSTS:
        counts = tuple(range(first, LAST + 1))
        started = time.perf_counter()
        critical = seq.simulate_t_boundaries(seq.STANDARD_ALPHAS, counts, seq.DEFAULT_GAMMA, paths=seq.TABLE_PATHS)
        print(f"first {first}, last {LAST}: {time.perf_counter() - started:.1f} s", flush=True)
        schedules.append({"counts": list(counts), "gamma": seq.DEFAULT_GAMMA,
                          "critical": {repr(a): [round(c, 6) for c in crit] for a, crit in critical.items()}})
    OUT.write_text(json.dumps({"schema": 1, "paths": seq.TABLE_PATHS, "seed": seq.SEED,
                               "schedules": schedules}, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {OUT}")


def check(paths: int = 400_000) -> None:
    rng = np.random.default_rng(99)
    for first in FIRSTS:
        counts = np.arange(first, LAST + 1)
        d = rng.standard_normal((paths, LAST), dtype=np.float32).astype(float)
        n = np.arange(1, LAST + 1, dtype=float)
        total, squares = np.cumsum(d, axis=1), np.cumsum(d * d, axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            t = (total / n) / np.sqrt((squares - total * total / n) / (n - 1) / n)
        t = t[:, counts - 1]
        parts = []
        for alpha in (0.01, 0.025):
            crit = np.array(seq.t_boundary(alpha, tuple(int(c) for c in counts)))
            crossed = float(np.mean((t > crit).any(axis=1)))
            parts.append(f"α {alpha:g}: {crossed * 100:.3f}% ± {math.sqrt(alpha * (1 - alpha) / paths) * 100:.3f}")
        print(f"first {first}: " + "; ".join(parts), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    if parser.parse_args().check:
        check()
    else:
        tabulate()
