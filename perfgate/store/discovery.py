"""Finding workloads: the reference ones shipped with perfgate and the user's own.

A workload module is a Python file that defines :class:`perfgate.Workload` objects at
module level. Three places are searched, in order:

1. the reference workloads installed with perfgate (the ``perfgate_workloads`` package,
   built from this repository's ``workloads/`` directory), so a user's repository can run
   them without copying them;
2. ``./workloads/`` of the repository perfgate runs in, when it exists;
3. any file or directory given with ``--workloads-path``.

Modules are imported without importing torch (reference workloads import it inside
their builders), so listing stays fast. Two different definitions of one name are an
error; the same file reached twice (perfgate's own repository) is not.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import pkgutil
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from perfgate.model.errors import UsageError, WorkloadError
from perfgate.model.workload import Workload

REFERENCE_PACKAGE = "perfgate_workloads"


def _module_workloads(module: object, source: str) -> list[Workload]:
    found = []
    for value in vars(module).values():
        if isinstance(value, Workload):
            found.append(replace(value, source=source))
    return found


def _import_file(path: Path) -> object:
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:10]
    module_name = f"perfgate_user_workloads.{path.stem}_{digest}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise UsageError(f"{path}: not an importable Python file")
    module = importlib.util.module_from_spec(spec)
    # Registered before execution so dataclasses and DataLoader workers can find it.
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - user code
        del sys.modules[module_name]
        raise WorkloadError(
            f"{path}: importing the workload module failed: {type(exc).__name__}: {exc}"
        ) from exc
    return module


def load_source(source: str) -> list[Workload]:
    """Workloads defined by one source, ``module:NAME`` or ``file:PATH``."""
    kind, _, target = source.partition(":")
    if kind == "module":
        try:
            module = importlib.import_module(target)
        except Exception as exc:  # noqa: BLE001
            raise WorkloadError(f"{target}: importing the workload module failed: {type(exc).__name__}: {exc}") from exc
        return _module_workloads(module, source)
    if kind == "file":
        return _module_workloads(_import_file(Path(target)), source)
    raise UsageError(f"unknown workload source {source!r}")


def _reference_sources() -> list[tuple[str, Path | None]]:
    try:
        package = importlib.import_module(REFERENCE_PACKAGE)
    except ImportError:
        return []
    sources = []
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        spec = importlib.util.find_spec(f"{REFERENCE_PACKAGE}.{info.name}")
        origin = Path(spec.origin).resolve() if spec and spec.origin else None
        sources.append((f"module:{REFERENCE_PACKAGE}.{info.name}", origin))
    return sources


def _file_sources(path: Path) -> list[Path]:
    if path.is_file():
        if path.suffix != ".py":
            raise UsageError(f"{path}: a workload path must be a .py file or a directory")
        return [path.resolve()]
    if path.is_dir():
        return sorted(p.resolve() for p in path.glob("*.py") if not p.name.startswith("_"))
    raise UsageError(f"{path}: workload path not found")


def _same_bytes(a: Path | None, b: Path) -> bool:
    try:
        return a is not None and (a == b or a.read_bytes() == b.read_bytes())
    except OSError:
        return False


@dataclass(frozen=True)
class Registry:
    workloads: dict[str, Workload]

    def names(self) -> list[str]:
        return sorted(self.workloads)

    def get(self, name: str) -> Workload:
        try:
            return self.workloads[name]
        except KeyError:
            known = ", ".join(self.names()) or "none"
            raise UsageError(f"unknown workload {name!r}; known workloads: {known}") from None

    def select(self, names: Sequence[str]) -> list[Workload]:
        """The named workloads in the order given (all of them, sorted, when none are named)."""
        if not names:
            return [self.workloads[n] for n in self.names()]
        seen: list[Workload] = []
        for name in names:
            workload = self.get(name)
            if workload not in seen:
                seen.append(workload)
        return seen


def discover(extra_paths: Iterable[Path] = (), *, project_dir: Path | None = None,
             prefer_project: bool = False) -> Registry:
    """All workloads visible from ``project_dir`` (default: the current directory).

    ``prefer_project``: a workload the project's own files define replaces a reference
    workload of the same name instead of clashing with it. The paired gate's base side
    uses it, so that a tree which *is* the reference workloads' source (perfgate's own
    repository at an older commit) measures its own version of them.
    """
    project_dir = project_dir or Path.cwd()
    found: dict[str, Workload] = {}
    origins: dict[str, Path | None] = {}
    reference_names: set[str] = set()

    def add(workloads: list[Workload], origin: Path | None) -> None:
        for w in workloads:
            if w.name in found:
                if origin is not None and _same_bytes(origins[w.name], origin):
                    continue
                if prefer_project and w.name in reference_names:
                    found[w.name] = w
                    origins[w.name] = origin
                    reference_names.discard(w.name)
                    continue
                raise UsageError(
                    f"workload {w.name!r} is defined twice: {found[w.name].source} and {w.source}"
                )
            found[w.name] = w
            origins[w.name] = origin

    reference = _reference_sources()
    reference_files = {origin for _, origin in reference if origin is not None}
    for source, origin in reference:
        add(load_source(source), origin)
    reference_names.update(found)
    paths: list[Path] = []
    local = project_dir / "workloads"
    if local.is_dir():
        paths.extend(p for p in _file_sources(local) if p not in reference_files)
    for extra in extra_paths:
        paths.extend(p for p in _file_sources(Path(extra)) if p not in reference_files and p not in paths)
    for path in paths:
        add(load_source(f"file:{path}"), path)
    return Registry(found)
