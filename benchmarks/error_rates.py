"""The gate's promised error rates, measured: false REGRESSION ≤ α, PASS of a true δ ≤ 2.5%.

    .venv/bin/python benchmarks/error_rates.py              # every cell, about 8 minutes on 2 cores alone
    .venv/bin/python benchmarks/error_rates.py --gates 20000 --pass-gates 10000   # quicker, wider errors

Paired cells run the paired rule on arrays (``perfgate.analysis.gate_arrays``, checked verdict
for verdict against the real driver by ``tests/test_gate_arrays.py``): 1 and 3 workloads;
ρ ∈ {1, 0.9, 0.5, 0}, the correlation of a process's time per step and median step; first
looks at 2 and 6 blocks (then a look after every block up to max_blocks = 30); symmetric
noise or a skewed head (2% of head processes 30% slower, the head's log-mean held exactly at
its truth). Every process sd 5% of log, 1% of steps 5x slow (50 steps: the time per step
moves, the median does not), δ = 3%, α = 1%, 95% confidence (PASS at δ promised ≤ 2.5%).

- false REGRESSION: share of gates with a REGRESSION on any workload when every workload's
  head is exactly ``min_effect``·δ slower (δ/2 by default: the edge of the REGRESSION test's
  null, where its α is spent; with ``min_effect = 0``, A/A gates): Holm's family-wise rate;
- PASS at δ: the first workload's head exactly δ slower, the others unchanged: share of gates
  that PASS it;
- too noisy (A/A): unchanged heads, share of gates whose first workload ends TOO_NOISY (its
  interval at the last look does not rule out 2δ): what a runner of this noise pays for green
  having a bound;
- green at 2δ: the first workload's head exactly 2δ slower: share of gates that end green
  (PASS, or INCONCLUSIVE with its bound below 2δ), promised ≤ 2.5% like PASS at δ.

Then the budget's cells (``--only budget``): α spent over the share of a budget measured
(``Schedule.spend``), the last look where the budget ends spending the rest, with block times
that vary threefold within the gate (three times slower, or faster, from the 10th block on).

Each figure is printed with its Monte-Carlo standard error. Then what REGRESSION means (one
workload, ρ = 0.5, first look 6): its chance at δ/2, 2δ/3, δ and 2δ, and A/A gates' PASS
share and blocks. Then the stored design's cells through the real simulator
(``perfgate.analysis.simulate``), fewer gates: a 1% process noise (a GPU runner), one and
three baseline recordings of 10 repeats, the day sd assumed (1%, 4 df) or measured from 30
history runs (``rebaseline --day-history``), at true day sds of 1%, 0.3% and 0.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from perfgate.analysis.decide import GateConfig
from perfgate.analysis.driver import schedule_for
from perfgate.analysis.gate_arrays import (
    IMPROVED,
    INCONCLUSIVE,
    PASS,
    REGRESSION,
    TOO_NOISY,
    draw_paired,
    paired_verdicts,
)
from perfgate.analysis.stats.sequential import Schedule

SD = 0.05
DELTA = 0.03
CHUNK = 20_000


def _se(p: float, n: int) -> float:
    return math.sqrt(max(p * (1 - p), 1e-12) / n)


def _kept(false: float, passed: float, green: float, gates: int, pass_gates: int, alpha: float
          ) -> tuple[bool, float, float, float]:
    """Whether a cell keeps its promises (false REGRESSION ≤ α, PASS at δ and green at 2δ ≤ 2.5%,
    each within two Monte-Carlo standard errors), and those three standard errors."""
    se_f, se_p, se_g = _se(false, gates), _se(passed, pass_gates), _se(green, pass_gates)
    return false <= alpha + 2 * se_f and passed <= 0.025 + 2 * se_p and green <= 0.025 + 2 * se_g, se_f, se_p, se_g


def _run(gates: int, seed: int, workloads: int, first: int, config: GateConfig, schedule: Schedule | None = None,
         **draw) -> tuple[np.ndarray, np.ndarray]:
    """Verdicts and decision counts of ``gates`` gates, drawn in chunks."""
    rng = np.random.default_rng(seed)
    schedule = schedule or schedule_for(config, first, "block")
    verdicts, counts = [], []
    left = gates
    while left > 0:
        n = min(CHUNK, left)
        d = draw_paired(rng, n, workloads, schedule.counts[-1], sd=SD, slow_step_rate=0.01, **draw)
        v = paired_verdicts(d, config, schedule)
        verdicts.append(v.verdict)
        counts.append(v.count)
        left -= n
    return np.concatenate(verdicts), np.concatenate(counts)


def paired_cells(gates: int, pass_gates: int) -> list[str]:
    config = GateConfig(delta=DELTA)
    failed = []
    seed = 1
    for workloads in (1, 3):
        for rho in (1.0, 0.9, 0.5, 0.0):
            for first in (2, 6):
                for skew in (0.0, 0.02):
                    started = time.perf_counter()
                    seed += 1
                    null, _ = _run(gates, seed, workloads, first, config, rho=rho, skew_rate=skew,
                                   every_slowdown=config.min_effect * config.delta)
                    false = float(np.mean((null == REGRESSION).any(axis=1)))
                    seed += 1
                    slow, _ = _run(pass_gates, seed, workloads, first, config, rho=rho, skew_rate=skew,
                                   slowdown=DELTA)
                    passed = float(np.mean(slow[:, 0] == PASS))
                    seed += 1
                    aa, _ = _run(pass_gates, seed, workloads, first, config, rho=rho, skew_rate=skew)
                    noisy = float(np.mean(aa[:, 0] == TOO_NOISY))
                    seed += 1
                    far, _ = _run(pass_gates, seed, workloads, first, config, rho=rho, skew_rate=skew,
                                  slowdown=2 * DELTA)
                    green = float(np.mean((far[:, 0] == PASS) | (far[:, 0] == INCONCLUSIVE)))
                    ok, se_f, se_p, se_g = _kept(false, passed, green, gates, pass_gates, config.alpha)
                    cell = (f"{workloads} workload{'s' if workloads > 1 else ''}, ρ {rho:g}, first look {first}, "
                            f"{'skewed' if skew else 'symmetric'} head")
                    if not ok:
                        failed.append(cell)
                    print(f"{cell}: false REGRESSION {false * 100:.2f}% ± {se_f * 100:.2f}, "
                          f"PASS at δ {passed * 100:.2f}% ± {se_p * 100:.2f}, green at 2δ {green * 100:.2f}% ± "
                          f"{se_g * 100:.2f}, too noisy (A/A) {noisy * 100:.1f}% ± {_se(noisy, pass_gates) * 100:.1f}"
                          f"{'' if ok else '  <-- above the promise'} ({time.perf_counter() - started:.0f} s)",
                          flush=True)
    return failed


BUDGET_BLOCKS = 30
"""The budget's cells: a budget that even block times fill in 30 blocks (first look 6)."""


def _spending(pattern: str, first: int = 6) -> Schedule:
    """The schedule a budget's gate spends at, for block times of ``pattern``: the share of the
    budget measured at each look (each block's windows, a fixed share of its time), the last look
    where the next block would not fit spending the rest."""
    times = {"even": [1.0] * 200, "3x slower from block 10": [1.0] * 9 + [3.0] * 191,
             "3x faster from block 10": [3.0] * 9 + [1.0] * 191}[pattern]
    budget = float(BUDGET_BLOCKS)
    windows = 0.5  # half of each block's time inside its timed windows, as on this machine
    schedule = Schedule(first, 500, 1, 1.0, "t", spending=())
    elapsed = 0.0
    for n in range(1, 501):
        elapsed += times[n - 1]
        if n < first:
            continue
        at_budget = elapsed + times[n] > budget
        schedule = schedule.spend(n, 1.0 if at_budget else windows * elapsed / budget)
        if at_budget:
            return schedule
    return schedule


def budget_cells(gates: int, pass_gates: int) -> list[str]:
    config = GateConfig(delta=DELTA)
    failed = []
    seed = 500
    print(f"\nBudget's gates (α spent over the share of the budget measured; 1 workload, ρ 0.5, first look 6, a budget "
          f"that even blocks fill in {BUDGET_BLOCKS} blocks, half of a block's time inside its windows):", flush=True)
    for pattern in ("even", "3x slower from block 10", "3x faster from block 10"):
        schedule = _spending(pattern)
        started = time.perf_counter()
        rows = {}
        for label, effect, n in (("null", config.min_effect * DELTA, gates), ("δ", DELTA, pass_gates),
                                 ("A/A", 0.0, pass_gates), ("2δ", 2 * DELTA, pass_gates)):
            seed += 1
            key = "every_slowdown" if label == "null" else "slowdown"
            v, _ = _run(n, seed, 1, 6, config, schedule, rho=0.5, **{key: effect})
            rows[label] = v[:, 0]
        false = float(np.mean(rows["null"] == REGRESSION))
        passed = float(np.mean(rows["δ"] == PASS))
        green = float(np.mean((rows["2δ"] == PASS) | (rows["2δ"] == INCONCLUSIVE)))
        noisy = float(np.mean(rows["A/A"] == TOO_NOISY))
        aa_pass = float(np.mean(rows["A/A"] == PASS))
        ok, se_f, se_p, se_g = _kept(false, passed, green, gates, pass_gates, config.alpha)
        if not ok:
            failed.append(pattern)
        print(f"  {pattern} (last look at {schedule.counts[-1]} blocks, {schedule.spending[-2] * 100:.0f}% spent "
              f"before it): false REGRESSION {false * 100:.2f}% ± {se_f * 100:.2f}, PASS at δ {passed * 100:.2f}% ± "
              f"{se_p * 100:.2f}, green at 2δ {green * 100:.2f}% ± {se_g * 100:.2f}; A/A PASS {aa_pass * 100:.1f}%, "
              f"too noisy {noisy * 100:.1f}%{'' if ok else '  <-- above the promise'} "
              f"({time.perf_counter() - started:.0f} s)", flush=True)
    return failed


def meaning(gates: int, min_effects: tuple[float, ...]) -> None:
    for min_effect in min_effects:
        _meaning(gates, min_effect)


def _meaning(gates: int, min_effect: float) -> None:
    config = GateConfig(delta=DELTA, min_effect=min_effect)
    print(f"\nWhat REGRESSION means (1 workload, ρ 0.5, first look 6, sd {SD:.0%}, δ {DELTA:.0%}, "
          f"min_effect {min_effect:g}, {gates} gates each):", flush=True)
    for label, effect in (("0 (A/A)", 0.0), ("δ/2", DELTA / 2), ("2δ/3", 2 * DELTA / 3), ("δ", DELTA),
                          ("2δ", 2 * DELTA)):
        v, counts = _run(gates, 1000 + int(effect * 1e4), 1, 6, config, rho=0.5, slowdown=effect)
        r, p = float(np.mean(v[:, 0] == REGRESSION)), float(np.mean(v[:, 0] == PASS))
        i = float(np.mean(v[:, 0] == IMPROVED))
        undecided = 1 - r - p - i
        noisy = float(np.mean(v[:, 0] == TOO_NOISY))
        print(f"  true slowdown {label:>7}: REGRESSION {r * 100:5.1f}%, PASS {p * 100:5.1f}%, "
              f"INCONCLUSIVE {undecided - noisy:5.1%}, TOO_NOISY {noisy:5.1%}; median blocks "
              f"{np.median(counts[:, 0]):.0f}", flush=True)


def stored_cells(gates: int) -> None:
    from perfgate.analysis.simulate import Noise, Scenario, simulate
    from perfgate.model.verdict import Verdict

    print(f"\nStored baseline (the real simulator and driver, {gates} gates a row; process sd 1% (a GPU runner), "
          f"baselines of 10 repeats a recording, first look 5 current repeats, three workloads, the first changed, "
          f"δ {DELTA:.0%}; 'false REGRESSION' counts the two unchanged workloads; at δ/2, the edge of the "
          f"REGRESSION test's null, the changed workload's REGRESSION share is its own false-alarm rate; at δ its "
          f"PASS share is the PASS error, promised ≤ 2.5%):", flush=True)
    rows = [(0.01, 1, 0), (0.01, 3, 0), (0.01, 1, 30), (0.003, 1, 0), (0.003, 1, 30), (0.0, 1, 30)]
    for day_sd, recordings, history in rows:
        noise = Noise(run_sd_log=0.01, ar=0.0, day_sd_log=day_sd, outlier_rate=0.0, throttle_rate=0.0)
        day = f"day sd measured from {history} runs" if history else "day sd assumed 1% (4 df)"
        for label, effect in (("A/A", 0.0), ("δ/2", DELTA / 2), ("δ", DELTA), ("2δ", 2 * DELTA)):
            started = time.perf_counter()
            cell = simulate(Scenario(noise, effect, paired=False, recordings=recordings, baseline_repeats=10,
                                     repeats=5, history_runs=history), gates, GateConfig(delta=DELTA), seed=5)
            false = cell.false_regression_share
            changed = cell.share(Verdict.REGRESSION)
            print(f"  true day sd {day_sd:.1%}, {recordings} recording{'s' if recordings > 1 else ' '}, {day}, "
                  f"{label:>3}: changed workload REGRESSION {changed * 100:5.1f}% ± {_se(changed, gates) * 100:.1f}, "
                  f"PASS {cell.share(Verdict.PASS) * 100:5.1f}% ± {_se(cell.share(Verdict.PASS), gates) * 100:.1f}; "
                  f"false REGRESSION {false * 100:.2f}% ± "
                  f"{_se(false, gates) * 100:.2f} ({time.perf_counter() - started:.0f} s)", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gates", type=int, default=80_000, help="gates at the null's edge per paired cell")
    parser.add_argument("--pass-gates", type=int, default=40_000, help="δ-slowdown gates per paired cell")
    parser.add_argument("--stored-gates", type=int, default=400)
    parser.add_argument("--only", choices=("paired", "meaning", "stored", "budget"), default=None)
    parser.add_argument("--min-effect", type=float, nargs="+", default=[GateConfig().min_effect],
                        help="the min_effect settings the meaning section shows (default: the gate's)")
    args = parser.parse_args()
    started = time.perf_counter()
    failed: list[str] = []
    if args.only in (None, "paired"):
        failed = paired_cells(args.gates, args.pass_gates)
    if args.only in (None, "budget"):
        failed += budget_cells(args.gates, args.pass_gates)
    if args.only in (None, "meaning"):
        meaning(args.pass_gates, tuple(args.min_effect))
    if args.only in (None, "stored"):
        stored_cells(args.stored_gates)
    print(f"\n{len(failed)} paired or budget cell(s) above the promise; {time.perf_counter() - started:.0f} s in all")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
