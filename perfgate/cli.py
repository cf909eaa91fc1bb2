"""The ``perfgate`` command line: one function per subcommand, each returning an exit code.

Errors raised on purpose (:class:`perfgate.errors.PerfgateError`) become one line on
stderr and their exit code (2 for bad input and failures, never a verdict); ``--verbose``
adds the traceback or the worker's output.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from perfgate import __version__
from perfgate.discovery import Registry, discover
from perfgate.errors import EXIT_ERROR, EXIT_OK, DataError, PerfgateError, UsageError
from perfgate.workload import parse_assignments


def _err(message: str) -> None:
    print(f"perfgate: error: {message}", file=sys.stderr)


def _registry(args: argparse.Namespace) -> Registry:
    return discover([Path(p) for p in args.workloads_path])


def _data_roots(items: Sequence[str], registry: Registry) -> tuple[Path | None, dict[str, Path]]:
    """``--data-root DIR`` for every workload, or ``--data-root NAME=DIR`` for one."""
    shared: Path | None = None
    per_workload: dict[str, Path] = {}
    for item in items:
        name, sep, path = item.partition("=")
        if sep and name in registry.workloads:
            target = Path(path)
            per_workload[name] = target
        else:
            target = Path(item)
            shared = target
        if not target.is_dir():
            raise DataError(f"--data-root {target}: not a directory")
    return shared, per_workload


def cmd_list(args: argparse.Namespace) -> int:
    from perfgate.measure.runner import resolve_device

    registry = _registry(args)
    device = resolve_device(args.device)
    for workload in registry.select(args.workloads):
        params = workload.resolve(device)
        print(f"{workload.name}  v{workload.version}  ({device} profile)")
        if workload.description:
            print(f"  {workload.description}")
        print(f"  source: {workload.source}")
        values = params.to_dict()
        width = max(len(k) for k in values)
        for key in sorted(values):
            print(f"    {key.ljust(width)}  {values[key]}")
    return EXIT_OK


def _progress_printer(quiet: bool):  # type: ignore[no-untyped-def]
    from perfgate.measure.runner import Progress

    def show(event: Progress) -> None:
        if quiet:
            return
        prefix = f"[{event.workload}] repeat {event.repeat}/{event.repeats}"
        if event.status == "start":
            print(f"{prefix} ...", file=sys.stderr, flush=True)
        elif event.status == "done":
            print(f"{prefix} done in {event.seconds:.1f} s, step median {event.step_median_ms:.2f} ms",
                  file=sys.stderr, flush=True)
        else:
            print(f"{prefix} failed after {event.seconds:.1f} s", file=sys.stderr, flush=True)

    return show


def cmd_run(args: argparse.Namespace) -> int:
    from perfgate.measure.runner import Job, default_cache_dir, measure, resolve_device
    from perfgate.report.terminal import run_table
    from perfgate.summary import summarise

    if args.repeats < 1:
        raise UsageError("--repeats must be at least 1")
    registry = _registry(args)
    workloads = registry.select(args.workloads)
    assignments: dict[str, object] = dict(parse_assignments(args.set))
    if args.steps is not None:
        assignments["steps"] = str(args.steps)
    if args.warmup is not None:
        assignments["warmup_steps"] = str(args.warmup)
    shared_root, roots = _data_roots(args.data_root, registry)
    device = resolve_device(args.device)
    jobs = []
    for workload in workloads:
        params = workload.resolve(device, assignments)
        resolved = params.to_dict()
        jobs.append(Job(workload, params, {k: resolved[k] for k in assignments},
                        roots.get(workload.name, shared_root)))
    out_dir = Path(args.out)
    outcome = measure(
        jobs,
        device=device,
        repeats=args.repeats,
        cache_dir=Path(args.cache_dir) if args.cache_dir else default_cache_dir(),
        out_dir=out_dir,
        progress=_progress_printer(args.quiet),
        timeout_s=args.timeout,
    )
    for job in jobs:
        name = job.workload.name
        if name in outcome.results:
            result = outcome.results[name]
            print(run_table(result, summarise(result)))
    if outcome.results:
        print(f"results written to {out_dir}/ ({', '.join(f'{n}.json' for n in outcome.results)})")
    for name, exc in outcome.errors.items():
        _err(exc.message)
        if args.verbose and exc.detail:
            print(exc.detail, file=sys.stderr)
    return EXIT_ERROR if outcome.errors else EXIT_OK


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-v", "--verbose", action="store_true", help="show tracebacks and worker output on errors")
    parser.add_argument("--workloads-path", action="append", default=[], metavar="PATH",
                        help="extra workload file or directory (repeatable); ./workloads/ is always searched")


def _add_run_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("workloads", nargs="*", metavar="WORKLOAD", help="workloads to run (default: all)")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"],
                        help="where to measure (default: auto = cuda when available)")
    parser.add_argument("--repeats", type=int, default=5, help="fresh processes per workload (default: 5)")
    parser.add_argument("--steps", type=int, help="measured steps per repeat (same as --set steps=N)")
    parser.add_argument("--warmup", type=int, help="warmup steps per repeat (same as --set warmup_steps=N)")
    parser.add_argument("--set", action="extend", nargs="+", default=[], metavar="KEY=VALUE",
                        help="override a workload parameter; recorded in the result")
    parser.add_argument("--data-root", action="append", default=[], metavar="[WORKLOAD=]DIR",
                        help="real dataset location (default: generated synthetic stand-in)")
    parser.add_argument("--out", default="perfgate-results", metavar="DIR",
                        help="directory for result files (default: perfgate-results)")
    parser.add_argument("--cache-dir", metavar="DIR",
                        help="synthetic data cache (default: $PERFGATE_CACHE_DIR or ~/.cache/perfgate)")
    parser.add_argument("--timeout", type=float, default=3600.0, metavar="SECONDS",
                        help="give up on a repeat after this long (default: 3600)")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress lines")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="perfgate",
        description="A CI performance-regression gate for PyTorch training.",
    )
    parser.add_argument("--version", action="version", version=f"perfgate {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p_list = sub.add_parser("list", help="list workloads and their parameters for the current device")
    p_list.add_argument("workloads", nargs="*", metavar="WORKLOAD")
    p_list.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    _add_common(p_list)
    p_list.set_defaults(func=cmd_list)

    p_run = sub.add_parser("run", help="measure workloads and write one result file per workload")
    _add_run_options(p_run)
    _add_common(p_run)
    p_run.set_defaults(func=cmd_run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except PerfgateError as exc:
        _err(exc.message)
        if getattr(args, "verbose", False) and exc.detail:
            print(exc.detail, file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        _err("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
