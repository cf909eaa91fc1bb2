"""What a pull request changes in the gate's own inputs, and the notice that says so.

The gate judges a pull request by the base branch's rules, whatever the pull request
edits; reviewers still need to see when it edits them, because the edits take effect
once merged. The inputs are: the baseline store, ``[tool.perfgate]`` in pyproject.toml,
the workload definitions (``workloads/`` and the configured workload paths), the
harness's own code and pins (``perfgate/``, ``constraints.txt``), and everything under
``.github/`` (the workflows, CODEOWNERS).

Two sources give the list of changed files: the GitHub API's list for the pull request
(``perfgate judge --changed-files``; trusted, it comes from GitHub, not from the pull
request's job), or two checkouts compared file by file (``perfgate ci``, where both trees
are on the runner). Every path shown in the notice is made inert for markdown.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfgate.gate.config import parse_toml
from perfgate.model.errors import FileFormatError, UsageError
from perfgate.text.inert import code, inline

HARNESS = ("perfgate/", "constraints.txt")
WORKLOADS = ("workloads/",)
GITHUB = (".github/",)
PYPROJECT = "pyproject.toml"
LISTED = 20  # names shown per kind of change before "and N more"
STATUSES = {"added", "removed", "modified", "renamed", "copied", "changed", "unchanged"}
MAX_CHANGED = 20_000
MAX_PATH = 1024
HEAD_PYPROJECT_BYTES = 1 * 2**20


@dataclass(frozen=True)
class InputChanges:
    """What the pull request changes in the gate's inputs, against the base commit."""

    baselines_dir: str
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    modified: tuple[str, ...] = ()
    settings: tuple[str, ...] = ()
    github: tuple[str, ...] = ()
    harness: tuple[str, ...] = ()
    workloads: tuple[str, ...] = ()
    workloads_removed: tuple[str, ...] = ()
    """The workload files (repository-relative) the pull request removes: their definitions go."""

    @property
    def baselines_changed(self) -> bool:
        return bool(self.added or self.removed or self.modified)

    @property
    def any(self) -> bool:
        return self.baselines_changed or bool(self.settings or self.github or self.harness or self.workloads)

    def removes_baselines(self, paths: Collection[str]) -> bool:
        """True when the pull request removes every one of ``paths`` (baseline files, relative
        to the store, ``<key>/<workload>.json``), matched by full path: retiring a workload by
        its baselines removes those that gate it, not a stale file of the same name."""
        return bool(paths) and set(paths) <= set(self.removed)



# --- where the list of changed files comes from -----------------------------------------

Change = tuple[str, str]  # (status: added | removed | modified, repository-relative POSIX path)


def read_changed_files(path: Path) -> list[Change]:
    """The GitHub API's changed files as ``status<TAB>path[<TAB>previous path]`` lines.

    A rename becomes the removal of the old path and the addition of the new one.
    """
    try:
        size = path.stat().st_size
        if size > MAX_CHANGED * (MAX_PATH * 2 + 16):
            raise FileFormatError(f"{path}: {size} bytes is too large for a list of changed files")
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FileFormatError(f"{path}: list of changed files not found") from None
    except UnicodeDecodeError:
        raise FileFormatError(f"{path}: list of changed files is not UTF-8 text") from None
    except OSError as exc:
        raise FileFormatError(f"{path}: cannot read the list of changed files: {exc.strerror}") from None
    changes: list[Change] = []
    # Lines end at "\n" only: str.splitlines() also breaks at U+2028, U+0085 and \x1c-\x1e,
    # which a file name may hold.
    for number, line in enumerate(text.removesuffix("\n").split("\n"), 1):
        if not line.strip():
            continue
        fields = line.split("\t")
        status, name = fields[0], fields[1] if len(fields) > 1 else ""
        previous = fields[2] if len(fields) > 2 else ""
        if status not in STATUSES or not name or len(fields) > 3:
            raise FileFormatError(f"{path}:{number}: expected 'status<TAB>path[<TAB>previous path]'")
        for value in (name, previous):
            if len(value) > MAX_PATH or any(ord(ch) < 32 for ch in value):
                raise FileFormatError(f"{path}:{number}: a path longer than {MAX_PATH} characters or with "
                                      "control characters")
        if status == "renamed" and previous:
            changes += [("removed", previous), ("added", name)]
        elif status == "copied":
            changes.append(("added", name))
        elif status == "unchanged":
            continue
        else:
            changes.append((status if status in ("added", "removed") else "modified", name))
        if len(changes) > MAX_CHANGED:
            raise FileFormatError(f"{path}: more than {MAX_CHANGED} changed files")
    return changes


def _digests(root: Path, rel: str) -> dict[str, str]:
    """``{repository path: sha256}`` of the file or folder ``rel`` under ``root``."""
    target = root / rel
    if target.is_file():
        return {rel: hashlib.sha256(target.read_bytes()).hexdigest()}
    if not target.is_dir():
        return {}
    out = {}
    for p in sorted(target.rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts:
            out[p.relative_to(root).as_posix()] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def tree_changes(head_dir: Path, base_dir: Path, watched: Iterable[str]) -> list[Change]:
    """The changed files under ``watched`` paths, comparing two checkouts file by file."""
    changes: list[Change] = []
    for rel in sorted(set(watched)):
        rel = rel.rstrip("/")
        head, base = _digests(head_dir, rel), _digests(base_dir, rel)
        changes += [("added", p) for p in sorted(set(head) - set(base))]
        changes += [("removed", p) for p in sorted(set(base) - set(head))]
        changes += [("modified", p) for p in sorted(set(head) & set(base)) if head[p] != base[p]]
    return changes


# --- [tool.perfgate] ---------------------------------------------------------------------

def perfgate_table_of(text: str) -> tuple[dict[str, Any], str | None]:
    """The raw ``[tool.perfgate]`` table of a pyproject.toml's text, and a problem if unreadable."""
    try:
        tool = parse_toml(text, "the pull request's pyproject.toml").get("tool", {})
        table = tool.get("perfgate", {}) if isinstance(tool, dict) else {}
    except UsageError as exc:  # not TOML, or nested deeper than a settings table is
        return {}, f"not read: {exc.message[:200]}"
    return (table if isinstance(table, dict) else {"": table}), None


def perfgate_table(pyproject: Path, *, limit: int | None = None) -> tuple[dict[str, Any], str | None]:
    """As :func:`perfgate_table_of` for a file (empty when absent)."""
    if not pyproject.is_file():
        return {}, None
    data = pyproject.read_bytes()
    if limit is not None and len(data) > limit:
        return {}, f"larger than {limit} bytes; not read"
    try:
        return perfgate_table_of(data.decode("utf-8"))
    except UnicodeDecodeError:
        return {}, "not UTF-8 text"


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


_UNSET = object()


def _shown(value: Any) -> str:
    return "(unset)" if value is _UNSET else json.dumps(value, default=str)[:200]


def settings_changes(head: tuple[dict[str, Any], str | None] | None, base_table: Mapping[str, Any],
                     pyproject_changed: bool) -> tuple[str, ...]:
    """Each changed key of ``[tool.perfgate]``; when the head's table is not known and
    pyproject.toml changed, one line saying it may have."""
    if head is None:
        return ("pyproject.toml changed; its `[tool.perfgate]` table may have changed",) if pyproject_changed else ()
    head_table, problem = head
    lines = [f"the pull request's pyproject.toml: {problem}"] if problem else []
    head_flat, base_flat = _flatten(head_table), _flatten(base_table)
    for key in sorted(set(head_flat) | set(base_flat)):
        before, after = base_flat.get(key, _UNSET), head_flat.get(key, _UNSET)
        if before != after:
            lines.append(f"{key} {_shown(before)} → {_shown(after)}")
    return tuple(lines)


# --- classification ----------------------------------------------------------------------

def _under(path: str, prefixes: Sequence[str]) -> bool:
    return any(path == p.rstrip("/") or path.startswith(p if p.endswith("/") else p + "/") for p in prefixes)


def classify(changes: Sequence[Change], *, baselines_dir: str, workload_paths: Sequence[str] = (),
             settings: tuple[str, ...] = ()) -> InputChanges:
    """Sort changed files into the kinds of gate input they touch."""
    store = baselines_dir.strip("/")
    added: list[str] = []
    removed: list[str] = []
    modified: list[str] = []
    github, harness, workloads, gone = [], [], [], []
    for status, path in changes:
        if store and _under(path, [store + "/"]):
            rel = path[len(store) + 1:]
            {"added": added, "removed": removed}.get(status, modified).append(rel)
        elif _under(path, GITHUB):
            github.append(path)
        elif _under(path, HARNESS):
            harness.append(path)
        elif _under(path, (*WORKLOADS, *workload_paths)):
            workloads.append(path)
            if status == "removed":
                gone.append(path)
    return InputChanges(baselines_dir=store, added=tuple(sorted(added)), removed=tuple(sorted(removed)),
                        modified=tuple(sorted(modified)), settings=settings, github=tuple(sorted(set(github))),
                        harness=tuple(sorted(set(harness))), workloads=tuple(sorted(set(workloads))),
                        workloads_removed=tuple(sorted(set(gone))))


def relative_to(path: Path, root: Path) -> str | None:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return None


# --- the notice --------------------------------------------------------------------------

def _listed(names: Sequence[str]) -> str:
    shown = ", ".join(code(n) for n in names[:LISTED])
    return shown + (f" and {len(names) - LISTED} more" if len(names) > LISTED else "")


def notice_markdown(changes: InputChanges, base_ref: str, base_sha: str) -> list[str]:
    """The caution block of the report (empty when nothing is changed)."""
    if not changes.any:
        return []
    lines = [
        "> [!CAUTION]",
        "> **This pull request edits the gate's own inputs.** It is judged against the baselines and "
        f"thresholds of the base branch {code(base_ref)} ({code(base_sha[:12])}) all the same, by perfgate "
        "installed from the base commit: the edits take effect only once merged. Reviewers: make sure they "
        "are intended (new baselines should come from the rebaseline workflow, with their reason).",
        ">",
    ]
    if changes.baselines_changed:
        parts = [f"{word} {_listed(names)}" for word, names in
                 (("changed", changes.modified), ("added", changes.added), ("removed", changes.removed)) if names]
        lines.append(f"> - baselines ({code(changes.baselines_dir + '/')}): {'; '.join(parts)}")
    if changes.settings:
        lines.append(f"> - `[tool.perfgate]` in pyproject.toml: {'; '.join(inline(s) for s in changes.settings)}")
    if changes.harness:
        lines.append(f"> - the harness and its pins: {_listed(changes.harness)} (the gate ran the base "
                     "commit's perfgate and pins, not these)")
    if changes.workloads:
        lines.append(f"> - workload definitions: {_listed(changes.workloads)} (measured as the pull request "
                     "has them: a changed workload is a changed measurement)")
    if changes.github:
        lines.append(f"> - `.github/`: {_listed(changes.github)}")
    return lines + [""]
