"""``perfgate counters WORKLOAD`` (or ``--script PATH [-- ARGS]``): one counted run, printed as a table (or JSON) to look around.

The counted run is the separate, short run of :mod:`perfgate.measure.counters`: the
workload built as a repeat builds it, its warmup, then a few counted steps. Nothing here
judges; :func:`perfgate.analysis.counters.compare_counters` compares two runs' counters.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from perfgate.adapters import options, selection
from perfgate.adapters.script_cli import add_script_options
from perfgate.model.counters import DEFAULT_STEPS
from perfgate.model.errors import EXIT_OK, UsageError
from perfgate.report.counters import render_counters
from perfgate.store.jsonfile import dumps


def cmd_counters(args: argparse.Namespace) -> int:
    from perfgate.measure.counters import count_job

    if args.count_steps < 1:
        raise UsageError("--steps must be at least 1")
    if args.top < 1:
        raise UsageError("--top must be at least 1")
    if args.script is None and len(args.workloads) != 1:
        raise UsageError("perfgate counters counts one workload: name it, or give --script PATH [-- ARGS]")
    settings = options.settings_of(args)
    device, (job,) = selection.jobs_of(args, settings)
    outcome = count_job(job, device, options.cache_dir_of(args), steps=args.count_steps,
                        out_dir=Path(args.out) if args.out else None, timeout_s=args.timeout)
    if outcome.counters is None:
        assert outcome.error is not None
        raise outcome.error
    print(dumps(outcome.counters.to_dict()) if args.as_json else render_counters(outcome.counters, top=args.top),
          end="")
    if args.out:
        print(f"perfgate: wrote {Path(args.out) / (job.workload.name + '.counters.json')}", file=sys.stderr)
    return EXIT_OK


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``perfgate counters`` to the ``perfgate`` command line."""
    p = subparsers.add_parser(
        "counters", help="count one workload's step exactly (operators, copies, FLOPs, host synchronisations, "
                         "kernel launches) in a separate short run",
        description="Build the workload as a measured repeat does, run its warmup, then count a few steps per "
                    "phase: aten operator calls, copies and dtype conversions, FLOPs, host synchronisations with "
                    "the line that issued them, and on CUDA kernel launches, memory copies and allocator calls. "
                    "A counter the device cannot provide is shown as — with the reason.",
    )
    p.add_argument("workloads", nargs="*", metavar="WORKLOAD", help="the workload to count (or --script PATH)")
    options.add_options(p, ("device",), help={
        "device": "where to count (default: [tool.perfgate] device, else auto = cuda when available)"})
    p.add_argument("--steps", dest="count_steps", type=int, default=DEFAULT_STEPS, metavar="N",
                   help=f"steps counted after the warmup (default {DEFAULT_STEPS})")
    options.add_selection_options(p, ("set", "data_root"), help={"set": "override a workload parameter"})
    options.add_options(p, ("cache_dir",))
    # --json: the counters on stdout as JSON (this command's own option, not the gate's report file)
    p.add_argument("--json", dest="as_json", action="store_true",
                   help="print the counters as JSON instead of the table")
    p.add_argument("--top", type=int, default=8, help="operators listed per phase (default 8)")
    options.add_options(p, ("out", "timeout"), help={
        "out": "also write DIR/<workload>.counters.json",
        "timeout": "give up on the counted run after this long (default: 1800)"},
        defaults={"out": None, "timeout": 1800.0})
    add_script_options(p)
    options.add_common(p)
    # --steps here is the counted steps; the workload's own steps and warmup stay as pinned.
    p.set_defaults(func=cmd_counters, steps=None, warmup=None)
    return p
