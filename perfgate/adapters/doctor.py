"""``perfgate doctor``: is this machine fit to gate? The command: its options, and the card
printed as text or JSON.

The checks and the card are in :mod:`perfgate.gate.doctor`: on every machine the CPUs,
their governor and load, and the free disk for the data cache; on a GPU the driver, torch,
persistence, clocks and their lock, other processes, throttle reasons, ECC, PCIe, and a
CUDA micro-run. :class:`~perfgate.gate.doctor.card.Card` is imported here with
:func:`render`, which ``scripts/gpu-check.sh`` uses to print a card ``--json`` saved.

Statuses: ``ok``; ``warn`` (worth fixing, does not fail); ``FAIL`` (the machine is not fit
to gate: exit 1); ``unknown`` (the question could not be asked, with the reason, such as
an NVML call the GPU does not support); ``skipped``. Exit 0 when nothing FAILs, 1 with
the list of what is wrong, 2 for bad usage (``--device cuda`` without a driver).

``perfgate doctor --fleet`` prints no card: it compares this runner (``RUNNER_NAME``, else
the host name: the name ``perfgate history record`` stores; ``--runner``) with the other
runners of this machine's GPU model and environment key on each reference workload, from
the history store (``--history``, found as ``perfgate history`` finds it), one line per
workload (:mod:`perfgate.gate.doctor.fleet`). Exit 0 whatever it finds (a runner beyond
the fleet's spread is a ``warn`` line), 2 when the store cannot be read.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from perfgate.adapters import options
from perfgate.adapters.history_cli import runner_of, store_of
from perfgate.gate.doctor.card import OK, UNKNOWN, WARN, Card
from perfgate.gate.doctor.diagnosis import DEFAULT_MICRO_RUN_S, diagnose
from perfgate.gate.doctor.fleet import compare_with_fleet
from perfgate.measure.runner import default_cache_dir
from perfgate.model.errors import EXIT_OK, UsageError
from perfgate.store.definitions import reference_definitions
from perfgate.store.history_fleet import FLEET_RUNS, MAX_FLEET_RUNS
from perfgate.store.history_sql import URL_ENV

FLEET_ONLY = ("history", "fleet_runs", "runner", "environment")
"""Options of ``--fleet`` alone (their dest): refused without it rather than ignored."""


def render(card: Card) -> str:
    """The card as text: the machine, a line per check (with its advice unless ok), and the verdict."""
    m = card.machine
    lines = [f"perfgate doctor: {m.get('host', '?')} ({m.get('cpu_model', '?')}, {m.get('cpus', '?')} CPUs)"]
    if card.cuda_checked:
        lines.append(f"  GPU {m.get('gpu') or '?'}, driver {m.get('gpu_driver') or '?'}, "
                     f"torch {m.get('torch')} (CUDA {m.get('torch_cuda') or 'none'})")
    width = max(len(c.name) for c in card.checks) if card.checks else 0
    for c in card.checks:
        lines.append(f"  {c.status:<8} {c.name:<{width}}  {c.detail}")
        if c.advice and c.status != OK:
            lines.append(f"  {'':<8} {'':<{width}}  -> {c.advice}")
    warnings = sum(c.status == WARN for c in card.checks)
    unknown = sum(c.status == UNKNOWN for c in card.checks)
    notes = ", ".join(p for p in (f"{warnings} warning{'s' if warnings != 1 else ''}" if warnings else "",
                                  f"{unknown} unknown" if unknown else "") if p)
    where = "with the CUDA checks" if card.cuda_checked else "CUDA checks skipped"
    if card.failed:
        lines.append(f"not fit to gate ({where}): {len(card.failed)} FAIL")
        lines.extend(f"  - {c.name}: {c.detail}" + (f" ({c.advice})" if c.advice else "") for c in card.failed)
    else:
        lines.append(f"fit to gate ({where})" + (f"; {notes}" if notes else ""))
    return "\n".join(lines)


def cmd_fleet(args: argparse.Namespace) -> int:
    """``perfgate doctor --fleet``: this runner against the fleet on each reference workload."""
    if args.as_json:
        raise UsageError("--json prints the card; --fleet prints no card (give one or the other)")
    if not 1 <= args.fleet_runs <= MAX_FLEET_RUNS:
        raise UsageError(f"--fleet-runs must be from 1 to {MAX_FLEET_RUNS}, got {args.fleet_runs}")
    store = store_of(args)  # a bad URL or path: one line, before torch is imported
    runner = runner_of(args.runner)
    if runner is None:
        raise UsageError("no runner name: set RUNNER_NAME or give --runner NAME")
    workloads = sorted(reference_definitions().names)
    if not workloads:
        raise UsageError("no reference workloads installed (the perfgate_workloads package) to compare on")
    from perfgate.measure.fingerprint import collect  # torch: only here
    from perfgate.measure.runner import resolve_device

    environment = collect(resolve_device(args.device))
    report = compare_with_fleet(store, runner, environment, workloads, runs=args.fleet_runs,
                                environment_key=args.environment)
    for line in report.skipped:
        print(f"perfgate: warning: {line}", file=sys.stderr)
    print("\n".join(report.lines()))
    return EXIT_OK


def cmd_doctor(args: argparse.Namespace) -> int:
    if args.fleet:
        return cmd_fleet(args)
    given = [f"--{name.replace('_', '-')}" for name in FLEET_ONLY if getattr(args, name) not in (None, FLEET_RUNS)]
    if given:
        raise UsageError(f"{', '.join(given)}: only with --fleet")
    if args.no_micro_run:
        seconds = None
    else:
        seconds = args.micro_run_seconds
        if not (seconds >= 1.0):
            raise UsageError("--micro-run-seconds must be at least 1")
    cache_dir = Path(args.cache_dir) if args.cache_dir else default_cache_dir()
    card = diagnose(args.device, cache_dir, micro_seconds=seconds)
    if args.as_json:
        print(json.dumps(card.to_dict(), indent=2))
    else:
        print(render(card))
    return card.exit_code


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "doctor", help="check this machine for gating: driver, clocks, other GPU processes, CPU governor, disk",
        description="Check the machine perfgate runs on and print a card with a verdict per line (ok, warn, "
                    "FAIL, unknown, skipped) and what to do. On a GPU it also runs a short CUDA micro-run: the "
                    "steps' CUDA event time against the window's wall time, and no synchronisation inside it.",
        epilog="exit codes: 0 fit to gate (warnings allowed), 1 a check FAILed, 2 bad usage "
               "(--device cuda without a driver); with --fleet: 0 compared (a runner beyond the fleet's spread is a "
               "warning), 2 the history store cannot be read")
    options.add_options(p, ("device",), help={
        "device": "auto (default): the CUDA checks when an NVIDIA driver is here; cuda: require them; cpu: skip "
                  "them"}, defaults={"device": "auto"})
    # --json: the card on stdout as JSON (this command's own option, not the gate's report file)
    p.add_argument("--json", dest="as_json", action="store_true", help="print the card as JSON")
    p.add_argument("--micro-run-seconds", type=float, default=DEFAULT_MICRO_RUN_S, metavar="SECONDS",
                   help=f"length of the CUDA micro-run (default {DEFAULT_MICRO_RUN_S:g})")
    p.add_argument("--no-micro-run", action="store_true", help="skip the CUDA micro-run")
    options.add_options(p, ("cache_dir",), help={
        "cache_dir": "the data cache whose disk is checked (default: $PERFGATE_CACHE_DIR or ~/.cache/perfgate)"})
    p.add_argument("--fleet", action="store_true",
                   help="print no card: compare this runner's time per step on each reference workload with the "
                        "other runners of this GPU model and environment key in the history store")
    p.add_argument("--history", metavar="PATH|URL",
                   help=f"with --fleet: the history store, an SQLite file or postgresql://[user@]host[:port]/database "
                        f"(default: {URL_ENV}, else [tool.perfgate] history, else perfgate-history.sqlite beside the "
                        "pyproject)")
    p.add_argument("--config", default="pyproject.toml", metavar="PYPROJECT",
                   help="with --fleet: where [tool.perfgate] is read from (default: ./pyproject.toml)")
    p.add_argument("--fleet-runs", type=int, default=FLEET_RUNS, metavar="N",
                   help=f"with --fleet: each runner's most recent N runs are compared (default {FLEET_RUNS})")
    p.add_argument("--runner", metavar="NAME",
                   help="with --fleet: this runner's name in the history (default: RUNNER_NAME, else the host name, "
                        "as perfgate history record stores it)")
    p.add_argument("--environment", metavar="KEY",
                   help="with --fleet: the environment key compared on (default: this machine's, as perfgate run "
                        "would record it here: PERFGATE_GPU_CLOCKS as the history job sets it)")
    p.add_argument("-v", "--verbose", action="store_true", help="show tracebacks on errors")
    p.set_defaults(func=cmd_doctor)
