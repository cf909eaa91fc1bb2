"""Which workloads a tree defines, read as data: parsed, never imported or executed.

The judge must know the family of gated workloads from the trees themselves (the base
commit's and the pull request's), not from what the measuring job's ``run.json`` lists,
and it must not run the pull request's code to find out. A workload is a module-level
``Workload(name="...", ...)`` in a Python file (``perfgate.store.discovery``); this module
finds those calls with :mod:`ast`: a call whose function is ``Workload`` (or
``<module>.Workload``) with its name as a string literal, keyword or first argument.

A file that cannot be parsed (too large, not UTF-8, a syntax error, nesting deep enough to
exhaust the parser) defines nothing it can tell; it is named in ``unreadable`` so that the
judge can say so. A name built at run time (``Workload(name=f"...")``) cannot be read
either; such a workload is not in the family, and a result for it is refused.
"""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from perfgate.store.discovery import REFERENCE_PACKAGE

MAX_FILE_BYTES = 1 << 20
"""A workload file larger than this is not parsed (1 MiB of Python is not a workload)."""
MAX_FILES = 2_000


@dataclass(frozen=True)
class Definitions:
    """The workload names a tree defines, each with the file (repository-relative) it is in."""

    names: Mapping[str, str] = field(default_factory=dict)
    unreadable: tuple[str, ...] = ()
    """Files that could not be parsed, with why: ``"workloads/x.py: a syntax error"``."""

    def __contains__(self, name: object) -> bool:
        return name in self.names


def _literal_name(call: ast.Call) -> str | None:
    for keyword in call.keywords:
        if keyword.arg == "name":
            value = keyword.value
            return value.value if isinstance(value, ast.Constant) and isinstance(value.value, str) else None
    if call.args and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str):
        return call.args[0].value
    return None


def _is_workload(func: ast.expr) -> bool:
    return (isinstance(func, ast.Name) and func.id == "Workload") or (
        isinstance(func, ast.Attribute) and func.attr == "Workload")


def names_in_source(source: str) -> list[str]:
    """The literal names of the ``Workload(...)`` calls assigned at a module's top level.

    Raises ``ValueError`` (with why) when the source cannot be parsed."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise ValueError(f"a syntax error (line {exc.lineno})") from None
    except (RecursionError, MemoryError):
        raise ValueError("nested too deeply to parse") from None
    except ValueError:
        raise ValueError("not Python source (a null byte)") from None
    found = []
    for node in tree.body:
        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
        if isinstance(value, ast.Call) and _is_workload(value.func):
            name = _literal_name(value)
            if name is not None:
                found.append(name)
    return found


def _python_files(root: Path, entries: Iterable[str]) -> list[tuple[str, Path]]:
    """(repository-relative POSIX path, file) of every ``*.py`` under ``workloads/`` and the
    ``workloads_path`` entries, links left out (they may point outside the tree)."""
    out: dict[str, Path] = {}
    for entry in ("workloads", *entries):
        rel = PurePosixPath(entry)
        if ".." in rel.parts:
            continue
        path = Path(entry) if rel.is_absolute() else root / rel  # an absolute entry: the trusted base's own
        if path.is_symlink():
            continue
        if path.is_file() and path.suffix == ".py":
            out[rel.as_posix()] = path
        elif path.is_dir():
            for file in sorted(path.rglob("*.py")):
                if not file.is_symlink() and file.is_file() and len(out) < MAX_FILES:
                    out[(file if rel.is_absolute() else file.relative_to(root)).as_posix()] = file
    return sorted(out.items())


def _read(files: Iterable[tuple[str, Path]]) -> Definitions:
    names: dict[str, str] = {}
    unreadable: list[str] = []
    for rel, path in files:
        try:
            if path.stat().st_size > MAX_FILE_BYTES:
                raise ValueError(f"larger than {MAX_FILE_BYTES} bytes")
            source = path.read_text(encoding="utf-8")
            for name in names_in_source(source):
                names.setdefault(name, rel)
        except UnicodeDecodeError:
            unreadable.append(f"{rel}: not UTF-8 text")
        except OSError as exc:
            unreadable.append(f"{rel}: cannot be read ({exc.strerror})")
        except ValueError as exc:
            unreadable.append(f"{rel}: {exc}")
    return Definitions(names, tuple(unreadable))


def tree_definitions(root: Path, workloads_path: Iterable[str] = ()) -> Definitions:
    """The workloads a checkout at ``root`` defines in ``workloads/`` and ``workloads_path``."""
    return _read(_python_files(root, workloads_path))


def head_definitions(base_root: Path, workloads_path: Iterable[str], removed: Iterable[str],
                     head_files: Path | None) -> Definitions:
    """The pull request's tree, from the base's and what the pull request changed: the base's
    workload files less those it removes or changes, and its added or changed files (``head_files``:
    a folder holding them at their repository paths, fetched as data)."""
    entries = list(workloads_path)
    gone = set(removed)
    changed = dict(_python_files(head_files, entries)) if head_files is not None else {}
    kept = [(rel, path) for rel, path in _python_files(base_root, entries) if rel not in gone and rel not in changed]
    return _read([*kept, *changed.items()])


def reference_definitions() -> Definitions:
    """The reference workloads installed with this (trusted) perfgate, read the same way."""
    spec = importlib.util.find_spec(REFERENCE_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return Definitions()
    files = []
    for location in spec.submodule_search_locations:
        root = Path(location)
        files += [(f"{REFERENCE_PACKAGE}/{p.relative_to(root).as_posix()}", p) for p in sorted(root.rglob("*.py"))]
    return _read(files)
