"""False alarms and power of the whole gate, stored and paired designs side by side.

    python benchmarks/simulate_gate.py [--gates 4000] [--power-gates N] [--estimator-gates N] [--jobs 1]

Every gate is a CI job of three workloads; the first may carry a true slowdown, the other
two never do, so Holm runs over a family of three. The gate is the real one:
the sequential driver (``perfgate.analysis.driver.drive``) with ``compare`` at every look: the
first look's repeats or ABBA blocks, then one more per look for the workloads it leaves
INCONCLUSIVE, up to ``max_blocks``, the others ``already_decided``. The figures quoted below
were measured with the earlier two-look gate; rerun the script for the sequential one. The noise model is in
``perfgate/simulate.py``: per process in job order, run-to-run sd, AR(1) between
consecutive processes, linear drift inside a job, a day effect per job (sd 1%; the gate
assumes 1%), one process in fifty 30% slower, one in fifty throttled (15% slower and
flagged in its telemetry, so the gate leaves it out).

Table 1, the gate: REGRESSION ... IMPROVED are the shares of the changed workload's final
verdicts; "false REGRESSION" is the share of gates in which a workload that did not
change (any of the three in an A/A row) was called a REGRESSION, with its one-sided 95%
Clopper-Pearson upper bound. The second paired look passes the looks' correlation
(``rho``) to ``compare`` as ``perfgate.gate.gating.run_paired_gate`` does.

Table 2, the paired estimator inside the gate: the same draws judged with the block model
swapped for each alternative inside ``compare`` (``Scenario.estimator``).

Table 3, the paired estimators alone (``perfgate.analysis.simulate.paired_calibration``): the share
of draws with ``p_slower`` below a nominal one-sided level, A/A (size) and 3% slower
(power), without the gate around them.

The choice of the paired estimator (``perfgate.analysis.blocks``)
--------------------------------------------------------
The candidates, on the same ABBA data: the randomised-block model (``block_log_ratio``,
3J - 1 df), the one-sample t on per-block contrasts (``block_contrast_t``, J - 1 df),
and Welch ignoring the blocks (``log_ratio(head, [base], assumed_day_sd_log=0,
outlier_sd=None)``). Measured with J = 6, run-to-run sd 2%, drift 0.1% per process, AR(1)
0 / 0.3 / 0.6 (``--gates 2000 --power-gates 400 --estimator-gates 400 --jobs 2``, 5,000
draws per row of table 3, code of 2026-11-30 at 22c77b0):

- Size. The block model keeps its level under autocorrelation and drift, conservatively
  as AR grows: at a nominal 5% it rejects 4.7% / 4.5% / 3.7% of A/A draws, at 0.5%
  0.3% / 0.4% / 0.5%. The contrast t is exact (4.7-5.1%, 0.4-0.6%). Welch is far too
  conservative (0.1-0.9% at 5%, 0.0% at 0.5%): block-to-block drift inflates its variance.
  In the gate, none of the three gave a false REGRESSION in 400 gates per row.
- Power. Against 3% at p < 0.005: block model 74.5% / 85.1% / 97.0%, contrast t
  45.5% / 58.6% / 83.8% (5 df cost it its tails), Welch 32.5-35.3%. In the gate, a 5%
  slowdown is caught in 83.0% / 85.5% / 82.2% of gates with the block model, 71.0% /
  74.5% / 75.8% with the contrast t and 72.8% / 72.5% / 75.0% with Welch; the block
  model also needs the fewest second looks (62-70% against 72-80% and 83-87%).
- Its one weakness: it pools one residual variance over both arms. When the head is ten
  times noisier than the base (table 3, "head sd x10") it rejects 8.2% at a nominal 5%
  and 1.4% at 0.5%, where the contrast t stays exact (4.8%, 0.5%); in the gate that is a
  false REGRESSION in 3.5% of A/A gates (table 1, "current sd x10").

So the gate keeps the block model: valid under AR(1) and drift, and at six blocks more
power than the contrast t (6-12 points more 5% slowdowns caught by the gate, 13-29
points more power at p < 0.005). Its variance pooling is the open risk; a
Satterthwaite df from the two arms' residual variances, or the contrast t when they
differ, would close it (``tests/test_simulation.py`` holds it as a strict xfail).
Outliers are the other cost of the paired design as it stands: the block model screens
none, and one process in fifty 30% slower turns 20% of A/A gates at 1% noise
INCONCLUSIVE and holds the detection of a 5% slowdown to 87% (without outliers: 100% of
A/A gates PASS and 100% of 5% slowdowns are caught, table 1).
"""

from __future__ import annotations

import argparse
import multiprocessing
import shlex
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

try:
    import perfgate  # noqa: F401
except ImportError:  # run from a checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scipy.stats import beta

from perfgate.analysis.decide import GateConfig
from perfgate.analysis.simulate import CellResult, Noise, Scenario, paired_calibration, simulate
from perfgate.model.verdict import Verdict

RUN_SDS = (0.01, 0.02, 0.05, 0.20)
SLOWDOWNS = (0.0, 0.03, 0.05, 0.10)
DRIFT = 0.001  # 0.1% per process: about 7% over a first paired look of 3 workloads x 6 blocks
AR = 0.3
BLOCKS = 6
RECORDINGS = 1
ESTIMATOR_SD = 0.02
ESTIMATOR_ARS = (0.0, 0.3, 0.6)
ESTIMATOR_SLOWDOWNS = (0.0, 0.05)
CALIBRATION_SLOWDOWN = 0.03
CALIBRATION_LEVELS = (0.05, 0.005)
ESTIMATOR_NAMES = {"block": "block model (3J-1 df)", "contrast": "contrast t (J-1 df)",
                   "welch": "Welch ignoring blocks"}


@dataclass(frozen=True)
class Cell:
    table: str
    case: str
    scenario: Scenario
    gates: int
    seed: int


def _designs() -> list[dict]:
    return [dict(paired=True, blocks=BLOCKS), dict(paired=False, recordings=RECORDINGS)]


def gate_cells(args: argparse.Namespace) -> list[Cell]:
    cells = []

    def gates(slowdown: float) -> int:
        return args.gates if slowdown == 0 else args.power_gates

    for run_sd in args.run_sds:
        for drift in (0.0, args.drift):
            for design in _designs():
                for slowdown in SLOWDOWNS:
                    noise = Noise(run_sd, ar=args.ar, drift_per_process=drift)
                    cells.append(Cell("gate", "", Scenario(noise, slowdown, **design), gates(slowdown), args.seed))
    special = {"current sd x10": dict(current_sd_factor=10.0), "day sd 2%, assumed 1%": dict(day_sd_log=0.02),
               "no outliers, no throttling": dict(outlier_rate=0.0, throttle_rate=0.0)}
    for case, changes in special.items():
        noise = Noise(0.01, ar=args.ar, drift_per_process=args.drift, **changes)
        for design in _designs():
            for slowdown in SLOWDOWNS:
                cells.append(Cell("gate", case, Scenario(noise, slowdown, **design), gates(slowdown), args.seed))
    return cells


def estimator_cells(args: argparse.Namespace) -> list[Cell]:
    cells = []
    for ar in ESTIMATOR_ARS:
        for slowdown in ESTIMATOR_SLOWDOWNS:
            for estimator in ESTIMATOR_NAMES:
                noise = Noise(ESTIMATOR_SD, ar=ar, drift_per_process=args.drift)
                scenario = Scenario(noise, slowdown, paired=True, blocks=BLOCKS, estimator=estimator)
                cells.append(Cell("estimator", "", scenario, args.estimator_gates, args.seed))
    return cells


@dataclass(frozen=True)
class Calibration:
    case: str
    noise: Noise
    slowdown: float
    draws: int
    seed: int


def calibration_cells(args: argparse.Namespace) -> list[Calibration]:
    clean = dict(outlier_rate=0.0, throttle_rate=0.0, drift_per_process=args.drift)
    cells = [Calibration("-", Noise(ESTIMATOR_SD, ar=ar, **clean), slowdown, args.calibration_draws, args.seed)
             for ar in ESTIMATOR_ARS for slowdown in (0.0, CALIBRATION_SLOWDOWN)]
    cells += [Calibration("head sd x10", Noise(ESTIMATOR_SD, ar=AR, current_sd_factor=10.0, **clean), 0.0,
                          args.calibration_draws, args.seed)]
    with_outliers = dict(clean, outlier_rate=0.02)
    cells += [Calibration("1 in 50 30% slower", Noise(ESTIMATOR_SD, ar=AR, **with_outliers), slowdown,
                          args.calibration_draws, args.seed) for slowdown in (0.0, CALIBRATION_SLOWDOWN)]
    return cells


def run_calibration(cell: Calibration) -> tuple[Calibration, dict[str, dict[float, float]]]:
    return cell, paired_calibration(cell.noise, cell.slowdown, blocks=BLOCKS, draws=cell.draws,
                                    levels=CALIBRATION_LEVELS, seed=cell.seed)


def calibration_row(cell: Calibration, shares: dict[str, dict[float, float]]) -> str:
    cells = [cell.case, f"{cell.noise.ar:g}", f"{cell.slowdown:.0%}", str(cell.draws)]
    cells += [_pct(shares[name][level]) for name in ESTIMATOR_NAMES for level in CALIBRATION_LEVELS]
    return "| " + " | ".join(cells) + " |"


def run_cell(cell: Cell) -> tuple[Cell, CellResult]:
    return cell, simulate(cell.scenario, cell.gates, GateConfig(), seed=cell.seed)


def _pct(x: float) -> str:
    return f"{x:.1%}"


def _false(r: CellResult) -> str:
    """The false-alarm share and its one-sided 95% upper bound (Clopper-Pearson)."""
    x, n = r.false_regressions, r.gates
    upper = 1.0 if x >= n else float(beta.ppf(0.95, x + 1, n - x))
    return f"{_pct(r.false_regression_share)} (<{_pct(upper)})"


def gate_row(cell: Cell, r: CellResult) -> str:
    s = cell.scenario
    n = s.noise
    shares = [_pct(r.share(v)) for v in (Verdict.REGRESSION, Verdict.PASS, Verdict.INCONCLUSIVE, Verdict.IMPROVED)]
    cells = [s.design, cell.case or "-", f"{n.run_sd_log:.0%}", f"{n.drift_per_process:.1%}", f"{n.ar:g}",
             f"{s.slowdown:.0%}", str(r.gates), *shares, _false(r),
             _pct(r.went_on / r.gates), f"{r.gates_per_second:.0f}"]
    return "| " + " | ".join(cells) + " |"


def estimator_row(cell: Cell, r: CellResult) -> str:
    s = cell.scenario
    cells = [ESTIMATOR_NAMES[s.estimator], f"{s.noise.ar:g}", f"{s.noise.drift_per_process:.1%}",
             f"{s.slowdown:.0%}", str(r.gates), _pct(r.share(Verdict.REGRESSION)), _pct(r.share(Verdict.PASS)),
             _pct(r.share(Verdict.INCONCLUSIVE)), _false(r), _pct(r.went_on / r.gates)]
    return "| " + " | ".join(cells) + " |"


GATE_HEADER = ("design", "case", "run-to-run sd", "drift / process", "AR", "slowdown", "gates", "REGRESSION",
               "PASS", "INCONCLUSIVE", "IMPROVED", "false REGRESSION", "looked again", "gates/s")
ESTIMATOR_HEADER = ("paired estimator", "AR", "drift / process", "slowdown", "gates", "REGRESSION", "PASS",
                    "INCONCLUSIVE", "false REGRESSION", "looked again")


def _header(names: tuple[str, ...]) -> str:
    return "| " + " | ".join(names) + " |\n|" + "|".join("---" if i < 2 else "---:" for i in range(len(names))) + "|"


def _results(cells: list, jobs: int, fn=run_cell) -> Iterator:
    if jobs <= 1:
        yield from map(fn, cells)
        return
    with multiprocessing.get_context("spawn").Pool(jobs) as pool:
        yield from pool.imap(fn, cells)


def _float_list(text: str) -> tuple[float, ...]:
    return tuple(float(v) for v in text.split(","))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gates", type=int, default=4000, help="gates per A/A cell (and per cell, by default)")
    parser.add_argument("--power-gates", type=int, help="gates per cell with a slowdown (default: --gates)")
    parser.add_argument("--estimator-gates", type=int, help="gates per cell of table 2 (default: --gates)")
    parser.add_argument("--run-sds", type=_float_list, default=RUN_SDS, help="comma-separated, e.g. 0.01,0.05")
    parser.add_argument("--drift", type=float, default=DRIFT, help="drift per process of the drifting rows")
    parser.add_argument("--ar", type=float, default=AR, help="AR(1) of table 1")
    parser.add_argument("--calibration-draws", type=int, default=5000, help="draws per row of table 3")
    parser.add_argument("--tables", choices=("all", "gate", "estimators", "calibration"), default="all")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (cells run in parallel)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    args.power_gates = args.power_gates or args.gates
    args.estimator_gates = args.estimator_gates or args.gates
    config = GateConfig()
    shown = ["python", "benchmarks/simulate_gate.py", *(sys.argv[1:] if argv is None else argv)]
    print(f"$ {shlex.join(shown)}")
    print(f"# gate: alpha={config.alpha:g} (one-sided, spent over looks up to max_blocks={config.max_blocks}), delta={config.delta:.0%}, "
          f"assumed day sd {config.assumed_day_sd_log:.1%}, 3 workloads (Holm), the first one slowed")
    print(f"# designs: paired {BLOCKS} ABBA blocks at the first look, then one more per look; stored {RECORDINGS} "
          f"recording of 5 repeats, current 5 repeats (+5)")
    print("# noise: day sd 1% per job, 1 process in 50 30% slower, 1 in 50 throttled (15% slower, flagged)")
    started = time.perf_counter()
    total_gates = 0
    total_seconds = 0.0
    if args.tables in ("all", "gate"):
        print()
        print(_header(GATE_HEADER))
        for cell, r in _results(gate_cells(args), args.jobs):
            print(gate_row(cell, r), flush=True)
            total_gates += r.gates
            total_seconds += r.seconds
    if args.tables in ("all", "estimators"):
        print()
        print(f"# paired estimators: run-to-run sd {ESTIMATOR_SD:.0%}, drift {args.drift:.1%} per process, "
              f"{BLOCKS} blocks; the three see the same draws")
        print()
        print(_header(ESTIMATOR_HEADER))
        for cell, r in _results(estimator_cells(args), args.jobs):
            print(estimator_row(cell, r), flush=True)
            total_gates += r.gates
            total_seconds += r.seconds
    if args.tables in ("all", "calibration"):
        print()
        print(f"# paired estimators alone (no gate: one workload, one look, no Holm, no delta): share of A/A "
              f"draws with p_slower below the one-sided level (size), and of {CALIBRATION_SLOWDOWN:.0%} "
              f"slowdowns (power); run-to-run sd {ESTIMATOR_SD:.0%}, drift {args.drift:.1%} per process, "
              f"{BLOCKS} blocks, no outliers unless named")
        print()
        names = [f"{label} p<{level:g}" for label in ("block", "contrast", "Welch") for level in CALIBRATION_LEVELS]
        print(_header(("case", "AR", "slowdown", "draws", *names)))
        for cal, shares in _results(calibration_cells(args), args.jobs, run_calibration):
            print(calibration_row(cal, shares), flush=True)
    wall = time.perf_counter() - started
    rate = total_gates / total_seconds if total_seconds else 0.0
    print()
    if total_gates:
        print(f"# {total_gates} gates in {wall:.0f} s wall ({args.jobs} job(s)); {rate:.1f} gates/s per process")
    else:
        print(f"# {wall:.0f} s wall ({args.jobs} job(s))")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
