"""The parent's side of a script run: the job that stands for ``perfgate run --script PATH``.

A script is measured by the same runner as a workload (one fresh child per repeat, the
same result file), so it is given a :class:`~perfgate.model.workload.Workload` that names
it: ``script-<file name>`` (or ``--name``), version :data:`SCRIPT_VERSION`, the script's
arguments as a parameter, and the path with the sha256 of its bytes as its source. Its
builder is never called: the child (``perfgate.measure.script_worker``) runs the file.
No torch here.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path

from perfgate.model.errors import UsageError, WorkloadError
from perfgate.model.job import Job
from perfgate.model.script import ARGS_PARAM, SCRIPT_DEFAULTS, SCRIPT_SETTABLE, SCRIPT_VERSION, Script
from perfgate.model.workload import BuildContext, Built, Params, Workload


def _not_built(ctx: BuildContext) -> Built:
    raise WorkloadError(f"{ctx.workload}: a script is run by perfgate.measure.script_worker, not built")


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def shown_path(path: Path, project_dir: Path) -> str:
    """``path`` relative to the project when it lies inside it, else absolute."""
    try:
        return path.relative_to(project_dir.resolve()).as_posix()
    except ValueError:
        return str(path)


def linked_part(root: Path, path: str) -> str | None:
    """The first part of ``path`` (below ``root`` when it is relative, or lies inside it) that is
    a symbolic link, as ``path`` names it; None when none is. An absolute path outside ``root``:
    its last part only (the folders above a checkout are the machine's, not the repository's)."""
    given = Path(path)
    if given.is_absolute():
        try:
            rel, current = given.relative_to(root), root
        except ValueError:
            return path if given.is_symlink() else None
    else:
        rel, current = given, root
    walked: list[str] = []
    for part in rel.parts:
        current = current / part
        walked.append(part)
        if current.is_symlink():
            return "/".join(walked)
    return None


def refuse_links(root: Path, path: str, given: str) -> None:
    """A one-line UsageError when ``path`` (below ``root``) reaches its file through a symbolic
    link: a gate measures the file the path names, on either side, never another one a link
    points to (which the other side may hold under the linked name)."""
    linked = linked_part(root, path)
    if linked is not None:
        raise UsageError(f"{given} {path}: {linked} is a symbolic link; a script is measured as the file its own "
                         "path names, never through a link")


def script_of(path: str, args: tuple[str, ...] | list[str], project_dir: Path, *, given: str = "--script") -> Script:
    """The script at ``path`` (relative to ``project_dir``), hashed now; UsageError when it is no
    file (``given`` names where the path was given: ``--script``, ``[tool.perfgate] scripts``),
    or when a part of the path is a symbolic link (:func:`refuse_links`)."""
    refuse_links(project_dir, path, given)
    target = (project_dir / path).resolve()
    if not target.is_file():
        raise UsageError(f"{given} {path}: no such file" + ("" if given.startswith("--") else f" (in {project_dir})"))
    try:
        sha = file_sha256(target)
    except OSError as exc:
        raise UsageError(f"{given} {path}: cannot read it: {exc.strerror or exc}") from None
    return Script(target, tuple(args), shown_path(target, project_dir), sha, given)


def default_name(script: Script) -> str:
    """``script-<file name>`` (:meth:`Script.default_name`: every character outside ``a-z0-9.``
    as ``-``, the underscore too). A result recorded under the old name (before this rule) is
    found under it again with ``--name script-train_lightning``."""
    return script.default_name()


def script_job(script: Script, device: str, assignments: Mapping[str, object], *, name: str | None = None) -> Job:
    """The job of one script: its workload, its parameters (defaults, then ``assignments``).

    ``assignments`` may only hold :data:`SCRIPT_SETTABLE` keys; ``warmup_steps`` must be at
    least 1 (a step runs from the end of one optimizer step to the end of the next, so the
    first measured step needs a step before it).
    """
    refused = sorted(k for k in assignments if k not in SCRIPT_SETTABLE)
    if refused:
        raise UsageError(f"--set {', '.join(refused)}: a script sets that itself; for a script --set takes "
                         f"{', '.join(SCRIPT_SETTABLE)}")
    base = Params(batch_size=1, input_size=1, warmup_steps=SCRIPT_DEFAULTS["warmup_steps"],
                  steps=SCRIPT_DEFAULTS["steps"], extra={ARGS_PARAM: script.joined_args()})
    label = name or default_name(script)
    try:
        workload = Workload(name=label, version=SCRIPT_VERSION, build=_not_built, params=base,
                            description=f"the script {script.shown}, run as it is", source=script.source())
    except ValueError as exc:
        raise UsageError(f"--name: {exc}") from None
    params = workload.resolve(device, assignments)
    if params.warmup_steps < 1:
        raise UsageError(f"warmup_steps must be at least 1 for a script, got {params.warmup_steps}: a step runs "
                         "from the end of one optimizer step to the end of the next, so the first measured "
                         "step needs one before it")
    resolved = params.to_dict()
    return Job(workload, params, {k: resolved[k] for k in assignments}, script=script)
