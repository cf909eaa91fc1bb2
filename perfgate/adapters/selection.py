"""Which workloads and scripts a command measures: the registry of workload files, the
``--set``/``--data-root`` assignments, the jobs of the selected workloads and of the
``scripts`` entries of ``[tool.perfgate]``, what fits the device, and a sharded runner's share.

The command line (``cli``), ``perfgate ci``, ``selftest``, ``bisect``, ``counters`` and the
pytest plugin select through these, as they take their options from
:mod:`perfgate.adapters.options`. Importing this module imports no torch.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from perfgate.adapters.options import assignments_of
from perfgate.model.errors import DataError, UsageError
from perfgate.model.shard import Shard, parse_shard
from perfgate.model.workload import Workload

if TYPE_CHECKING:
    from perfgate.gate.config import ScriptEntry, Settings
    from perfgate.model.job import Job
    from perfgate.store.discovery import Registry


def registry_of(args: argparse.Namespace) -> Registry:
    from perfgate.store.discovery import discover

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


def job_for(workload: Workload, device: str, assignments: Mapping[str, object], data_root: Path | None) -> Job:
    from perfgate.model.job import Job

    params = workload.resolve(device, assignments)
    resolved = params.to_dict()
    return Job(workload, params, {k: resolved[k] for k in assignments}, data_root)


def jobs_of(args: argparse.Namespace, settings: Settings, *, prefer_project: bool = False,
            shard: bool = True) -> tuple[str, list[Job]]:
    """The device (``--device``, else ``[tool.perfgate] device``) and a job per selected workload,
    only this runner's share of them with ``--shard`` (unless ``shard`` is False); with
    ``--script PATH`` the script's one job instead.

    ``prefer_project``: the checkout's own version of a reference workload wins over the
    installed one (``perfgate ci``, where the harness is installed from the base commit
    and the checkout is the pull request's)."""
    from perfgate.measure.runner import resolve_device
    from perfgate.store.discovery import discover

    if getattr(args, "script", None) is not None:  # --script PATH [-- ARGS]: one job, the script's
        return script_jobs(args, settings)
    if getattr(args, "name", None) is not None:
        raise UsageError("--name names the result of a --script run; a workload keeps its own name")
    share = shard_of(args)  # bad input before anything is discovered or imported
    device = resolve_device(args.device or settings.device)
    registry = discover([Path(p) for p in (*settings.workloads_path, *args.workloads_path)],
                        prefer_project=prefer_project)
    names = list(args.workloads or settings.workloads)
    assignments = assignments_of(args)
    shared_root, roots = data_roots(args.data_root, registry)
    if not names and prefer_project:
        registry = gated_references(registry, settings, device)
    jobs = selected_jobs(names, registry, settings.scripts, device, assignments,
                         lambda name: roots.get(name, shared_root))
    if not names:
        jobs = fitting(jobs, device)
    return device, share_of(jobs, share, quiet=getattr(args, "quiet", False)) if shard else jobs


def gated_references(registry: Registry, settings: Settings, device: str) -> Registry:
    """``perfgate ci`` with no workload named measures what the judge will judge: the project's
    own workloads, and perfgate's bundled reference workloads only where the base's store holds
    a baseline of theirs for ``device`` (the judge refuses results for a reference workload the
    base neither selects nor holds a baseline of, so measuring one would only cost the runner's
    time and end the gate in an ERROR)."""
    from perfgate.gate.judge import baselines_of
    from perfgate.store.discovery import Registry

    held = baselines_of(settings, device)
    kept = {name: w for name, w in registry.workloads.items() if w.source.startswith("file:") or name in held}
    return Registry(kept)


def selected_jobs(names: Sequence[str], registry: Registry, scripts: Sequence[ScriptEntry], device: str,
                  assignments: Mapping[str, object], data_root: Callable[[str], Path | None]) -> list[Job]:
    """A job per workload or configured script named in ``names``, in their order. With no
    names, every discovered workload (sorted); with ``[tool.perfgate] scripts`` set, the
    project's own workloads (those its files define, not perfgate's reference workloads,
    which ``workloads`` can name) and then the scripts. A script's name may not be a
    workload's (their results would share a file)."""
    from perfgate.gate.config import ScriptEntry

    by_name = configured_scripts(scripts, registry)
    if not names:
        chosen = list(default_selection(registry, by_name).values())
    else:
        chosen = [by_name.get(name) or registry.get(name) for name in dict.fromkeys(names)]
    return [script_entry_job(item, device, assignments) if isinstance(item, ScriptEntry)
            else job_for(item, device, assignments, data_root(item.name)) for item in chosen]


def default_selection(registry: Registry, scripts: Mapping[str, ScriptEntry]) -> dict[str, Workload | ScriptEntry]:
    """What runs when no workload is named, by name: every discovered workload (sorted), or,
    with ``scripts`` (:func:`configured_scripts`), the project's own workloads (those its
    files define, not perfgate's reference workloads) and then the scripts."""
    found = registry.select([])
    if scripts:  # a project that gates its scripts
        found = [w for w in found if w.source.startswith("file:")]
    return {**{w.name: w for w in found}, **scripts}


def configured_scripts(scripts: Sequence[ScriptEntry], registry: Registry | None = None) -> dict[str, ScriptEntry]:
    """``[tool.perfgate] scripts`` by the name each one's results go by; a UsageError for two
    scripts of one name, or a script named like a discovered workload."""
    by_name: dict[str, ScriptEntry] = {}
    for entry in scripts:
        name = entry.job_name
        if name in by_name:
            first = by_name[name]
            raise UsageError(f"the scripts {first.written!r} ({first.given.rstrip(':')}) and {entry.written!r} "
                             f"({entry.given.rstrip(':')}) are both named {name}; give one a name of its own "
                             "(name = \"...\" in [tool.perfgate] scripts)")
        if registry is not None and name in registry.workloads:
            raise UsageError(f"{entry.given} {entry.written!r} is named {name}, which is a workload's name; give the "
                             "script a name of its own (name = \"...\" in [tool.perfgate] scripts)")
        by_name[name] = entry
    return by_name


def script_entry_job(entry: ScriptEntry, device: str, assignments: Mapping[str, object]) -> Job:
    """The job of one ``[tool.perfgate] scripts`` entry (its path relative to the pyproject's folder)."""
    from perfgate.measure.script_job import script_job, script_of

    script = script_of(entry.path, entry.args, entry.root, given=entry.given)
    return script_job(script, device, assignments, name=entry.job_name)


def script_jobs(args: argparse.Namespace, settings: Settings) -> tuple[str, list[Job]]:
    """The device and the one job of ``--script PATH [-- ARGS]`` (``run``, ``rebaseline``, ``gate``,
    ``counters``, ``trace``): a UsageError for what a script run does not take."""
    if args.workloads:
        raise UsageError(f"--script runs one script, not the workloads named with it ({', '.join(args.workloads)}); "
                         "the script's own arguments go after --")
    if getattr(args, "shard", None):
        raise UsageError("--shard shares out the selected workloads; --script runs one script")
    if getattr(args, "data_root", None):
        raise UsageError("--data-root does not apply to --script: the script loads its own data")
    from perfgate.measure.runner import resolve_device
    from perfgate.measure.script_job import script_job, script_of

    device = resolve_device(args.device or settings.device)
    script = script_of(args.script, tuple(args.script_args), Path.cwd())
    return device, [script_job(script, device, assignments_of(args), name=args.name)]


def fitting(jobs: Sequence[Job], device: str) -> list[Job]:
    """A default selection without the distributed workloads this machine has too few devices
    for, each named on stderr (named on the command line or in the settings, they run and
    fail in one line)."""
    from perfgate.measure.distributed import too_few_devices

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
