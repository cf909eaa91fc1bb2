"""The front-end core of the command line: the options the commands share, and what they
become (settings, jobs, the cache folder, the contention policy, progress lines, the paired
gate in a base tree). ``perfgate`` (``cli``), ``perfgate ci``, ``perfgate selftest`` and
``perfgate counters`` all build on these, so none of them imports another.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from perfgate.analysis.contention import ContentionPolicy, contention
from perfgate.gate.config import Settings, load_settings
from perfgate.gate.frontend import paired_gate
from perfgate.gate.gating import GateRun, run_gate
from perfgate.gate.worktree import BaseTree
from perfgate.measure.distributed import too_few_devices
from perfgate.measure.runner import Progress, default_cache_dir, resolve_device
from perfgate.model.errors import DataError, UsageError
from perfgate.model.job import Job
from perfgate.model.shard import Shard, parse_shard
from perfgate.model.workload import PHASES, Workload, parse_assignments
from perfgate.store.discovery import Registry, discover


def registry_of(args: argparse.Namespace) -> Registry:
    return discover([Path(p) for p in args.workloads_path])


def data_roots(items: Sequence[str], registry: Registry) -> tuple[Path | None, dict[str, Path]]:
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


def progress_printer(quiet: bool) -> Callable[[Progress], None]:
    def show(event: Progress) -> None:
        if quiet:
            return
        prefix = f"[{event.workload}] " + (event.label or f"repeat {event.repeat}/{event.repeats}")
        if event.status == "start":
            print(f"{prefix} ...", file=sys.stderr, flush=True)
        elif event.status == "done":
            print(f"{prefix} done in {event.seconds:.1f} s, step median {event.step_median_ms:.2f} ms",
                  file=sys.stderr, flush=True)
        else:
            print(f"{prefix} failed after {event.seconds:.1f} s", file=sys.stderr, flush=True)

    return show


def settings_of(args: argparse.Namespace) -> Settings:
    if getattr(args, "repeats", None) is not None and args.repeats < 1:
        raise UsageError("--repeats must be at least 1")
    if getattr(args, "blocks", None) is not None and args.blocks < 2:
        raise UsageError("--blocks: the paired design needs at least 2 ABBA blocks")
    cli: dict[str, object] = {
        "repeats": getattr(args, "repeats", None),
        "baselines": getattr(args, "baselines", None),
        "alpha": getattr(args, "alpha", None),
        "delta": getattr(args, "delta", None),
        "looks": getattr(args, "looks", None),
        "second_look_repeats": getattr(args, "second_look_repeats", None),
        "blocks": getattr(args, "blocks", None),
        "counters": False if getattr(args, "no_counters", False) else None,
        "memory_threshold": getattr(args, "memory_threshold", None),
        "phase_q": getattr(args, "phase_q", None),
        "gate_phases": getattr(args, "gate_phase", None) or None,
        "fail_on_missing_baseline": True if getattr(args, "fail_on_missing_baseline", False) else None,
    }
    return load_settings(Path(args.config), cli)


def assignments_of(args: argparse.Namespace) -> dict[str, object]:
    assignments: dict[str, object] = dict(parse_assignments(args.set))
    if args.steps is not None:
        assignments["steps"] = str(args.steps)
    if args.warmup is not None:
        assignments["warmup_steps"] = str(args.warmup)
    return assignments


def job_for(workload: Workload, device: str, assignments: Mapping[str, object], data_root: Path | None) -> Job:
    params = workload.resolve(device, assignments)
    resolved = params.to_dict()
    return Job(workload, params, {k: resolved[k] for k in assignments}, data_root)


def jobs_of(args: argparse.Namespace, settings: Settings, *, prefer_project: bool = False,
            shard: bool = True) -> tuple[str, list[Job]]:
    """The device (``--device``, else ``[tool.perfgate] device``) and a job per selected workload,
    only this runner's share of them with ``--shard`` (unless ``shard`` is False).

    ``prefer_project``: the checkout's own version of a reference workload wins over the
    installed one (``perfgate ci``, where the harness is installed from the base commit
    and the checkout is the pull request's)."""
    share = shard_of(args)  # bad input before anything is discovered or imported
    device = resolve_device(args.device or settings.device)
    registry = discover([Path(p) for p in (*settings.workloads_path, *args.workloads_path)],
                        prefer_project=prefer_project)
    workloads = registry.select(args.workloads or list(settings.workloads))
    assignments = assignments_of(args)
    shared_root, roots = data_roots(args.data_root, registry)
    jobs = [job_for(w, device, assignments, roots.get(w.name, shared_root)) for w in workloads]
    if not (args.workloads or settings.workloads):
        jobs = fitting(jobs, device)
    return device, share_of(jobs, share, quiet=getattr(args, "quiet", False)) if shard else jobs


def fitting(jobs: Sequence[Job], device: str) -> list[Job]:
    """A default selection without the distributed workloads this machine has too few devices
    for, each named on stderr (named on the command line or in the settings, they run and
    fail in one line)."""
    unfit = too_few_devices(jobs, device)
    for name, why in unfit.items():
        print(f"perfgate: {name} left out of the default selection: {why}", file=sys.stderr)
    return [job for job in jobs if job.workload.name not in unfit]


def shard_of(args: argparse.Namespace) -> Shard | None:
    """``--shard I/N``, checked (a one-line UsageError), or None without it."""
    value = getattr(args, "shard", None)
    return None if value is None else parse_shard(value)


def share_of(jobs: Sequence[Job], share: Shard | None, *, quiet: bool = False) -> list[Job]:
    """The jobs of this runner's share (all of them without one), in the selection's order.
    Says which they are; a share with none is said on stderr whatever ``quiet`` says."""
    if share is None:
        return list(jobs)
    names = share.take(job.workload.name for job in jobs)
    kept = [job for job in jobs if job.workload.name in names]
    if not kept:
        print(f"perfgate: shard {share}: none of the {len(jobs)} selected workload(s) falls to this share; "
              "nothing to measure", file=sys.stderr)
    elif not quiet:
        print(f"perfgate: shard {share}: {', '.join(job.workload.name for job in kept)} ({len(kept)} of "
              f"{len(jobs)} selected workloads)", file=sys.stderr)
    return kept


def cache_dir_of(args: argparse.Namespace) -> Path:
    return Path(args.cache_dir) if args.cache_dir else default_cache_dir()


def paired_gate_in(tree: BaseTree, args: argparse.Namespace, settings: Settings, device: str,
                   jobs: list[Job]) -> GateRun:
    """The paired gate of ``jobs`` (the working tree) against the base side checked out in ``tree``."""
    if args.base_python and not Path(args.base_python).is_file():
        raise UsageError(f"--base-python {args.base_python}: no such interpreter")
    if args.max_reruns < 0:
        raise UsageError("--max-reruns must be 0 or more")
    if args.second_look_blocks is not None and args.second_look_blocks < 1:
        raise UsageError("--second-look-blocks must be at least 1")
    return paired_gate(
        jobs, tree, project_dir=Path.cwd(),
        workload_paths=[Path(p) for p in (*settings.workloads_path, *args.workloads_path)],
        assignments=assignments_of(args), settings=settings, device=device, base_python=args.base_python,
        second_look_blocks=args.second_look_blocks, cache_dir=cache_dir_of(args), out_dir=Path(args.out),
        progress=progress_printer(args.quiet), timeout_s=args.timeout,
        announce=lambda message: print(f"perfgate: {message}", file=sys.stderr),
        telemetry=not args.no_telemetry, contention_check=contention_policy_of(args), max_reruns=args.max_reruns,
    )


def stored_gate(args: argparse.Namespace, settings: Settings, device: str, jobs: list[Job]) -> GateRun:
    """The gate of ``jobs`` against the stored baselines, with the command line's measuring options."""
    return run_gate(
        jobs, settings=settings, device=device, repeats=settings.repeats, cache_dir=cache_dir_of(args),
        out_dir=Path(args.out), progress=progress_printer(args.quiet), timeout_s=args.timeout,
        announce=lambda message: print(f"perfgate: {message}", file=sys.stderr),
        telemetry=not args.no_telemetry, contention_check=contention_policy_of(args), max_reruns=args.max_reruns,
    )


def contention_policy_of(args: argparse.Namespace) -> Callable[[Mapping[str, Any] | None], str | None] | None:
    """Why a repeat was contended by other processes (None: not contended), or None when off."""
    if args.max_other_cpu_share is None and args.no_telemetry:
        return None
    try:
        policy = ContentionPolicy() if args.max_other_cpu_share is None else ContentionPolicy(
            max_other_cpu_share=args.max_other_cpu_share)
    except ValueError as exc:
        raise UsageError(f"--max-other-cpu-share: {exc}") from None
    return lambda telemetry: contention(telemetry, policy)


def add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-v", "--verbose", action="store_true", help="show tracebacks and worker output on errors")
    parser.add_argument("--workloads-path", action="append", default=[], metavar="PATH",
                        help="extra workload file or directory (repeatable); ./workloads/ is always searched")
    parser.add_argument("--config", default="pyproject.toml", metavar="PYPROJECT",
                        help="where [tool.perfgate] is read from (default: ./pyproject.toml)")


SHARD_HELP = ("measure only this runner's share I of N: with the selected workloads sorted by name, every "
              "N-th one starting at the I-th (1 <= I <= N). Each workload falls in exactly one share; a share "
              "with none measures nothing and exits 0. `perfgate judge DIR...` judges the shares' result "
              "folders together, with Holm over all their workloads")


SHARDED_COMMANDS = ("run", "gate", "ci")
"""The commands that take ``--shard``: the others measure one workload, or record baselines."""


def add_run_options(parser: argparse.ArgumentParser, *, repeats_help: str, shard: bool | None = None) -> None:
    """The measuring options; ``shard``: also ``--shard I/N`` (None: for the commands
    :data:`SHARDED_COMMANDS`, named by the parser's last word)."""
    parser.add_argument("workloads", nargs="*", metavar="WORKLOAD",
                        help="workloads (default: [tool.perfgate] workloads, else all)")
    if shard or shard is None and parser.prog.rsplit(" ", 1)[-1] in SHARDED_COMMANDS:
        parser.add_argument("--shard", metavar="I/N", help=SHARD_HELP)
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"],
                        help="where to measure (default: [tool.perfgate] device, else auto = cuda when available)")
    parser.add_argument("--repeats", type=int, help=repeats_help)
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
    parser.add_argument("--no-telemetry", action="store_true",
                        help="do not sample NVML/psutil telemetry in a background thread during the window")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress lines")


def add_gate_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--baselines", metavar="DIR", help="baseline store (default: [tool.perfgate] baselines, else baselines/)")
    parser.add_argument("--markdown", metavar="FILE", help="write the markdown report here")
    parser.add_argument("--json", metavar="FILE", help="write the JSON report here")
    parser.add_argument("--html", metavar="DIR", help="write a self-contained HTML report with plots (DIR/index.html)")
    parser.add_argument("--alpha", type=float, help="family-wise false-alarm rate, one-sided (default 0.01)")
    parser.add_argument("--delta", type=float, help="smallest slowdown that fails, as a fraction (default 0.03)")
    parser.add_argument("--memory-threshold", type=float, help="peak-memory growth that fails (default 0.10)")
    parser.add_argument("--phase-q", type=float, help="false-discovery rate for flagging phases (default 0.10)")
    parser.add_argument("--gate-phase", action="append", choices=list(PHASES), metavar="PHASE",
                        help="also fail the gate on this phase (repeatable; default: phases only diagnose)")
    parser.add_argument("--fail-on-missing-baseline", action="store_true",
                        help="a workload without a baseline fails the gate (exit 2) instead of a loud notice")


def add_paired_options(parser: argparse.ArgumentParser) -> None:
    """The paired design's options, shared by ``gate`` and ``ci``."""
    parser.add_argument("--blocks", type=int, help="ABBA blocks at the first look of a paired gate "
                                                   "(default: [tool.perfgate] blocks, else 6)")
    parser.add_argument("--second-look-blocks", type=int,
                        help="ABBA blocks added at the second look (default: as many again)")
    parser.add_argument("--base-python", metavar="PATH",
                        help="run the base side with this interpreter (it must have perfgate installed), e.g. "
                             "when the change upgrades torch; the report then shows both environments")
    parser.add_argument("--max-reruns", type=int, default=3,
                        help="blocks measured again per workload when other processes loaded the machine "
                             "(default 3)")
    parser.add_argument("--max-other-cpu-share", type=float, metavar="SHARE",
                        help="a repeat is contended when other processes used more than this share of the CPUs "
                             "during its window (default: perfgate.analysis.contention's)")
    parser.add_argument("--no-counters", action="store_true",
                        help="skip the counted run of each side (exact operator, FLOP and synchronisation counts); "
                             "[tool.perfgate] counters = false does the same")

