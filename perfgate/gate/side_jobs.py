"""Each side's jobs in its own tree: the base commit's (or a bisect candidate's) workloads and
scripts found where that tree holds them, and why a workload has no side to compare.

The live paired gate (:mod:`perfgate.gate.frontend`), bisect and ``perfgate judge``
(:func:`paired_error`) ask these; they read the trees and never measure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from perfgate.gate.worktree import BaseTree
from perfgate.model.errors import UsageError
from perfgate.model.job import Job
from perfgate.model.script import Script
from perfgate.store.discovery import discover, load_source

__all__ = ["base_jobs_for", "base_script_job", "missing_script", "paired_error"]


def base_jobs_for(head_jobs: Sequence[Job], tree: BaseTree, *, project_dir: Path, workload_paths: Sequence[Path],
                  assignments: Mapping[str, object], device: str) -> dict[str, Job]:
    """The base side's job for each head job whose workload the base tree defines.

    The base tree's own workload files are discovered as the head's were (its version of
    a reference workload wins over the installed one); a workload defined in another file
    (a test module) is read from that file's place in the base tree. The parameters are
    resolved with the same ``--set`` assignments as the head's.
    """
    mirrored = [tree.mirror(p) for p in workload_paths]
    registry = discover([p for p in mirrored if p.exists()], project_dir=tree.mirror(project_dir), prefer_project=True)
    jobs: dict[str, Job] = {}
    for job in head_jobs:
        name = job.workload.name
        if job.script is not None:
            base = base_script_job(job, tree, project_dir=project_dir, assignments=assignments, device=device)
            if base is not None:
                jobs[name] = base
            continue
        workload = registry.workloads.get(name)
        kind, _, target = job.workload.source.partition(":")
        if workload is None and kind == "file":
            there = tree.mirror(Path(target))
            if there != Path(target).resolve() and there.is_file():
                workload = next((w for w in load_source(f"file:{there}") if w.name == name), None)
        if workload is not None:
            params = workload.resolve(device, assignments)
            jobs[name] = Job(workload, params, job.overrides, job.data_root)
    return jobs


def base_script_job(job: Job, tree: BaseTree, *, project_dir: Path, assignments: Mapping[str, object],
                    device: str) -> Job | None:
    """The base side of ``gate --against REF --script PATH`` (or a ``[tool.perfgate] scripts``
    entry): the base commit's file at the path the entry names, ``base_root / path`` (the head's
    script was resolved from the same path, with no link in it: :func:`script_of`), hashed now,
    with the same arguments, name and ``--set`` assignments; None when the commit has no such
    file (:func:`missing_script` says so). A UsageError when the script lies outside the
    repository (both sides would run the same file), or when a part of its path is a symbolic
    link in the base commit (the base side would run another file than the one it names)."""
    from perfgate.measure.script_job import refuse_links, script_job, script_of

    assert job.script is not None
    head = job.script
    try:
        relative = head.path.resolve().relative_to(tree.repo.resolve())
    except ValueError:
        raise UsageError(f"{head.given} {head.shown}: the file lies outside the repository, so the base commit "
                         f"{tree.commit[:7]} has no copy of it; a paired gate compares the two commits' "
                         "scripts") from None
    refuse_links(tree.root, relative.as_posix(), f"{head.given} (in the base commit {tree.commit[:7]})")
    there = tree.root / relative
    if not there.is_file():
        return None
    script = script_of(str(there), head.args, tree.mirror(project_dir), given=head.given)
    return script_job(script, device, assignments, name=job.workload.name)


def paired_error(name: str, against: str, *, head_error: str | None = None, base_error: str | None = None,
                 in_base: bool = True, script: Script | None = None) -> str | None:
    """Why the paired design cannot judge ``name`` (its entry's ERROR), or None: the head side
    failed (``head_error``, as the caller words it), else the base side failed (``base_error``,
    its message), else the base commit ``against`` has no side to compare with (``in_base``
    False: a new workload, or with ``script`` a new script). The live gate
    (:func:`paired_entries`) and ``perfgate judge`` (``perfgate.gate.judge``) both ask this."""
    if head_error is not None:
        return head_error
    if base_error is not None:
        return f"the base side ({against[:7]}) failed: {base_error}"
    if in_base:
        return None
    if script is not None:
        return (f"the base commit {against[:7]} has no file {script.shown} (the script {name} is new); a new "
                f"script is gated against a stored baseline once one is recorded (perfgate rebaseline {name})")
    return (f"the base commit {against[:7]} has no workload {name!r} measured; a new workload is gated against a "
            f"stored baseline once one is recorded (perfgate rebaseline {name})")


def missing_script(job: Job, commit: str) -> str:
    """Why ``job``'s script has no base side: the commit lacks the file."""
    assert job.script is not None
    return (f"--script {job.script.shown}: the base commit {commit[:7]} has no such file (the base side cannot "
            "run it); gate a new script against a stored baseline once one is recorded")
