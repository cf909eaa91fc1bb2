"""``perfgate selftest WORKLOAD``: the command. The self-test itself, its gates and its card,
is :mod:`perfgate.gate.selftest`."""

from __future__ import annotations

import argparse
from typing import Any

from perfgate.adapters import options, selection
from perfgate.gate.selftest import (
    DEFAULT_GATES,
    DEFAULT_SIZES,
    QUICK_BLOCKS,
    QUICK_BUDGET_MIN,
    QUICK_GATES,
    parse_phases,
    parse_sizes,
    run_selftest,
)
from perfgate.model.errors import UsageError
from perfgate.model.workload import PHASES


def cmd_selftest(args: argparse.Namespace) -> int:
    settings = options.settings_of(args)
    if len(args.workloads) != 1:
        raise UsageError("selftest takes exactly one workload")
    sizes = parse_sizes(args.sizes)
    phases = parse_phases(args.phases) if args.phases else None
    gates = args.gates if args.gates is not None else (QUICK_GATES if args.quick else DEFAULT_GATES)
    blocks = args.blocks if args.blocks is not None else (QUICK_BLOCKS if args.quick else settings.blocks)
    budget = args.budget_minutes if args.budget_minutes is not None else (QUICK_BUDGET_MIN if args.quick else None)
    device, (job,) = selection.jobs_of(args, settings)
    # The gates' measuring, as `perfgate gate --against` builds it; the jobs are the self-test's own.
    request = options.request_of(args, settings, device, [job])
    result = run_selftest(
        job, settings=settings, gates=gates, sizes=sizes, phases=phases, largest_phase_only=args.quick,
        blocks=blocks, budget_s=budget * 60.0 if budget is not None else None, measuring=request.measuring,
        announce=options.announcer(args.quiet),
    )
    print(result.card(), end="")
    return result.exit_code


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``perfgate selftest`` to the ``perfgate`` command line."""
    p = subparsers.add_parser(
        "selftest", help="A/A gates and gates with injected slowdowns on this runner: false alarms, detection, "
                         "and the slowdown this machine can catch",
        description="Run paired gates on this runner as `perfgate gate --against` does, both sides this tree: A/A "
                    "gates (every REGRESSION is a false alarm) and gates whose head side has a slowdown of a known "
                    "size injected into one phase. Prints the false-alarm count with its exact binomial interval, "
                    "the detection rate per size, how often the injected phase was flagged, the time a gate took "
                    "and the smallest size detected in at least 80% of gates. Nothing it measures is written "
                    "where a gate or a rebaseline could take it.",
        epilog="exit codes: 0 false alarms within the gate's alpha budget, 1 the whole 95% interval of the "
               "false-alarm rate lies above alpha, 2 error or bad input",
    )
    options.add_run_options(p, repeats_help=argparse.SUPPRESS)
    p.add_argument("--gates", type=int, help=f"A/A gates, and injected gates per size, the phases taken in turn "
                                             f"(default {DEFAULT_GATES}; --quick {QUICK_GATES})")
    p.add_argument("--sizes", default=",".join(f"{s:.2f}" for s in DEFAULT_SIZES), metavar="S,S",
                   help="injected slowdowns as shares of the probe's median step (default 0.05,0.10)")
    p.add_argument("--phases", metavar="PHASE,PHASE",
                   help=f"phases to inject into, of {', '.join(PHASES)} (default: every phase at or above the "
                        f"share floor the gate tests; --quick: the largest)")
    options.add_options(p, ("blocks", "max_blocks"), help={
        "blocks": f"ABBA blocks per gate at the first look (default: [tool.perfgate] blocks, else 6; "
                  f"--quick {QUICK_BLOCKS})",
        "max_blocks": "the most ABBA blocks a gate is measured for; it looks after each one (default: "
                      "[tool.perfgate] max_blocks, else 30)"})
    # The whole self-test's time, not a gate's (perfgate gate --budget): its own option.
    p.add_argument("--budget", dest="budget_minutes", type=float, metavar="MINUTES",
                   help=f"start no gate that would likely end after this (default none; --quick {QUICK_BUDGET_MIN:g})")
    p.add_argument("--quick", action="store_true",
                   help=f"{QUICK_GATES} gates of each kind, {QUICK_BLOCKS} blocks, one phase, a "
                        f"{QUICK_BUDGET_MIN:g}-minute budget")
    options.add_options(p, ("alpha", "delta", "phase_q", "max_reruns", "max_other_cpu_share"), help={
        "alpha": "family-wise false-alarm rate of a gate, one-sided (default 0.01)",
        "max_reruns": "blocks measured again per gate when other processes loaded the machine (default 3)"})
    options.add_common(p)
    p.set_defaults(func=cmd_selftest)
    return p
