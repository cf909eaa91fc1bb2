"""The workloads a ``pytest --perfgate`` session gates, and their jobs: those selected by
``--perfgate-workloads`` or ``[tool.perfgate] workloads`` (else every discovered one, and
the scripts of ``[tool.perfgate] scripts``), plus those the tests declare with
``@pytest.mark.perfgate``, found among the discovered workloads or defined in the test
module itself, and the scripts given with ``--perfgate-script`` or declared with
``@pytest.mark.perfgate(script="train.py")``."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from perfgate.adapters.pytest_items import MARKER, marker_script, marker_workload

if TYPE_CHECKING:
    from perfgate.gate.config import ScriptEntry, Settings
    from perfgate.model.job import Job
    from perfgate.model.workload import Workload


@dataclass(frozen=True)
class Plan:
    device: str
    jobs: dict[str, Job]
    """By workload, in the order the items are added."""
    assignments: dict[str, object]
    """``--perfgate-set`` values, for every workload."""
    workload_paths: list[Path]


def _split_names(values: Sequence[str]) -> list[str]:
    return [name.strip() for value in values for name in value.split(",") if name.strip()]


def _module_workload(item: pytest.Item, name: str) -> Workload | None:
    """A ``Workload`` called ``name`` defined at module level in the item's test module."""
    from perfgate.model.workload import Workload

    module = getattr(item, "module", None)
    path = getattr(module, "__file__", None)
    if module is None or path is None:
        return None
    for value in vars(module).values():
        if isinstance(value, Workload) and value.name == name:
            # The repeat's worker imports the test module by path, like a workload file.
            return dataclasses.replace(value, source=f"file:{Path(path).resolve()}")
    return None


def plan_jobs(items: Sequence[pytest.Item], settings: Settings, *, here: Path, rootpath: Path,
              workloads: Sequence[str], workloads_path: Sequence[str], assignments: Sequence[str],
              data_root: Sequence[str], scripts: Sequence[str] = ()) -> Plan | None:
    """Validate every workload the session may need and build its job (None: no workload).

    Scripts join as workloads do: ``[tool.perfgate] scripts`` with the default selection (or
    when ``--perfgate-workloads`` names them), every ``--perfgate-script`` and every script a
    test declares with ``@pytest.mark.perfgate(script=...)`` always."""
    from perfgate.adapters.selection import configured_scripts, default_selection, job_for, script_entry_job
    from perfgate.gate.config import ScriptEntry
    from perfgate.measure.runner import resolve_device
    from perfgate.model.errors import UsageError
    from perfgate.model.workload import parse_assignments
    from perfgate.store.discovery import discover

    extra = [*settings.workloads_path, *(str(here / p) for p in workloads_path)]
    registry = discover([Path(p) for p in extra], project_dir=rootpath)
    # Workloads the tests declare with the marker: a discovered one, else one defined
    # in the test module itself; scripts the tests declare, by the name they go by.
    declared: dict[str, Workload] = {}
    wanted: list[ScriptEntry] = [_option_script(value, here) for value in scripts]
    for item in items:
        marker = item.get_closest_marker(MARKER)
        if marker is None:
            continue
        name = marker_workload(marker, item.nodeid)
        script = marker_script(marker, item.nodeid)
        if script is not None:
            wanted.append(ScriptEntry(script[0], script[1], script[2], rootpath,
                                      given=f"{item.nodeid}: @pytest.mark.{MARKER}(script=...)"))
            continue
        if name in declared:
            continue
        workload = registry.workloads.get(name) or _module_workload(item, name)
        if workload is None:
            known = ", ".join(registry.names()) or "none"
            raise UsageError(f"{item.nodeid}: unknown workload {name!r} in @pytest.mark.{MARKER}; "
                             f"known workloads: {known}, or a Workload defined in the test module")
        declared[name] = workload
    configured = configured_scripts(_distinct([*settings.scripts, *wanted]), registry)
    always = list(dict.fromkeys(entry.job_name for entry in wanted))  # in the order given
    names = _split_names(workloads) or list(settings.workloads)
    selected: dict[str, Workload | ScriptEntry]
    if names:
        selected = {n: declared.get(n) or configured.get(n) or registry.get(n) for n in names}
    else:
        selected = default_selection(registry, configured)
    for name, workload in declared.items():
        selected.setdefault(name, workload)
    for name in always:
        selected.setdefault(name, configured[name])
    if not selected:
        return None
    device = resolve_device(settings.device)
    given: dict[str, object] = dict(parse_assignments(assignments))
    shared_root, roots = _data_roots(data_root, set(selected), here)
    jobs = {}
    for name, chosen in selected.items():
        jobs[name] = (script_entry_job(chosen, device, given) if isinstance(chosen, ScriptEntry)
                      else job_for(chosen, device, given, roots.get(name, shared_root)))
    if not names:
        # A default selection leaves out what this machine has too few devices for (named);
        # a workload a test declares with the marker stays, and fails in one line.
        from perfgate.measure.distributed import too_few_devices

        for name, why in too_few_devices([j for n, j in jobs.items() if n not in declared], device).items():
            warnings.warn(f"perfgate: {name} left out of the default selection: {why}", stacklevel=1)
            del jobs[name]
    return Plan(device, jobs, given, [Path(p) for p in extra])


def _option_script(value: str, here: Path) -> ScriptEntry:
    """``--perfgate-script "PATH [ARGS...]"`` (split as a shell would; the path relative to
    the directory pytest was started in)."""
    from perfgate.gate.config import ScriptEntry
    from perfgate.model.script import script_words

    path, args = script_words(value, "--perfgate-script")
    return ScriptEntry(path, args, None, here, given="--perfgate-script")


def _distinct(entries: Sequence[ScriptEntry]) -> list[ScriptEntry]:
    """``entries`` without repeats of one script (the same file and arguments under the same
    name, named in the settings and by a marker, say); the first one named is kept."""
    seen: set[tuple[str, Path, tuple[str, ...]]] = set()
    kept = []
    for entry in entries:
        key = (entry.job_name, (entry.root / entry.path).resolve(), entry.args)
        if key not in seen:
            seen.add(key)
            kept.append(entry)
    return kept


def _data_roots(items: Sequence[str], names: set[str], here: Path) -> tuple[Path | None, dict[str, Path]]:
    """``--perfgate-data-root [NAME=]DIR``: one folder for every workload, or for one."""
    from perfgate.model.errors import DataError

    shared: Path | None = None
    per_workload: dict[str, Path] = {}
    for item in items:
        name, sep, path = item.partition("=")
        if sep and name in names:
            target = per_workload[name] = here / path
        else:
            target = shared = here / item
        if not target.is_dir():
            raise DataError(f"--perfgate-data-root {target}: not a directory")
    return shared, per_workload
