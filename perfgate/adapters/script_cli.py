"""``perfgate run --script PATH [-- ARGS]``: the command line's side of a script run.

The options (``--script``, ``--name``, the script's own arguments after ``--``) and what
they become: one job, measured by the runner as a workload is, written as the same result
file. See docs/script.md.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from perfgate.adapters.options import assignments_of, cache_dir_of, progress_printer
from perfgate.gate.config import Settings
from perfgate.measure.runner import RunOutcome, measure, resolve_device
from perfgate.measure.script_job import script_job, script_of
from perfgate.model.errors import UsageError
from perfgate.model.job import Job


def add_script_options(parser: argparse.ArgumentParser) -> None:
    """``--script``, ``--name``, and everything after the first ``--`` as the script's arguments.

    Without ``--script`` a ``--`` keeps its usual meaning (the rest are positional)."""
    parser.add_argument("--script", metavar="PATH",
                        help="run this training script as it is (it does not import perfgate) and time its steps "
                             "through hooks in torch; its own arguments go after --")
    parser.add_argument("--name", help="the workload name of a --script result (default: script-<file name>)")
    parser.set_defaults(script_args=[])
    parse = parser.parse_known_args

    def parse_known_args(args: Sequence[str] | None = None,
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        items = list(sys.argv[1:] if args is None else args)
        if "--" in items:
            at = items.index("--")
            parsed, rest = parse(items[:at], namespace)
            if getattr(parsed, "script", None) is not None:
                parsed.script_args = items[at + 1:]
                return parsed, rest
        return parse(items, namespace)

    parser.parse_known_args = parse_known_args  # type: ignore[method-assign,assignment]


def measure_script(args: argparse.Namespace, settings: Settings) -> tuple[list[Job], RunOutcome]:
    """Measure ``args.script`` ``settings.repeats`` times, one fresh process per repeat."""
    if args.workloads:
        raise UsageError(f"--script runs one script, not the workloads named with it ({', '.join(args.workloads)}); "
                         "the script's own arguments go after --")
    if getattr(args, "shard", None):
        raise UsageError("--shard shares out the selected workloads; --script runs one script")
    if args.data_root:
        raise UsageError("--data-root does not apply to --script: the script loads its own data")
    device = resolve_device(args.device or settings.device)
    script = script_of(args.script, tuple(args.script_args), Path.cwd())
    job = script_job(script, device, assignments_of(args), name=args.name)
    outcome = measure([job], device=device, repeats=settings.repeats, cache_dir=cache_dir_of(args),
                      out_dir=Path(args.out), progress=progress_printer(args.quiet), timeout_s=args.timeout,
                      telemetry=not args.no_telemetry)
    return [job], outcome
