"""Reading files that a pull request's code could have written, as untrusted data.

The measuring job runs the pull request's code, so everything it leaves behind (result
files, the run manifest, a downloaded baseline folder) may be hostile: a file of
gigabytes, a string of ten megabytes meant for the comment, ``NaN`` or ``1e999`` where a
duration belongs, nesting deep enough to exhaust the parser's stack, a workload named
``../../.git/config``, a symbolic link to a file outside the folder. Every such file is
read here first: its size is checked before it is read, the JSON is parsed with the
non-finite constants refused, then the whole value is walked once to bound every string,
every list and the depth, and to refuse any number that is not finite. A problem is one
:class:`~perfgate.model.errors.FileFormatError` line naming the file (exit code 2); nothing is
half-judged.

The typed readers (``result_from_dict``, ``baseline_from_dict``) then check the shape.
"""

from __future__ import annotations

import math
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfgate.model.errors import FileFormatError
from perfgate.store.jsonfile import parse_json

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
"""A workload's name, as ``perfgate.model.workload`` accepts it: safe as one path component."""
KEY_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,159}$")
"""An environment key (``cuda-tesla-t4-torch2.14.1-1a2b3c4d``): safe as one path component."""
SHA_RE = re.compile(r"^[0-9a-f]{40}$")


@dataclass(frozen=True)
class Limits:
    """Bounds on what an untrusted folder may hold. A real result file of 12 ABBA blocks of
    50 steps is about 100 kB; the bounds leave two orders of magnitude of room."""

    file_bytes: int = 8 * 2**20
    total_bytes: int = 64 * 2**20
    files: int = 512
    string_chars: int = 4096
    list_items: int = 1_000_000
    depth: int = 24


LIMITS = Limits()


def safe_name(value: object, what: str) -> str:
    """``value`` if it is a workload name that is safe as a file name; else ValueError."""
    if not isinstance(value, str) or not NAME_RE.fullmatch(value) or ".." in value:
        shown = repr(value)[:80] if isinstance(value, str) else type(value).__name__
        raise ValueError(f"{what}: {shown} is not a workload name (lower-case letters, digits, '.', '_', '-'; "
                         "at most 64 characters; no '..')")
    return value


def check_value(value: Any, limits: Limits = LIMITS) -> None:
    """Walk a parsed JSON value; ValueError naming the path of the first value out of bounds."""
    stack: list[tuple[Any, str, int]] = [(value, "", 0)]
    while stack:
        item, where, depth = stack.pop()
        if depth > limits.depth:
            raise ValueError(f"{where or 'top level'}: nested deeper than {limits.depth} levels")
        if isinstance(item, str):
            if len(item) > limits.string_chars:
                raise ValueError(f"{where or 'top level'}: a string of {len(item)} characters "
                                 f"(at most {limits.string_chars})")
        elif isinstance(item, bool) or item is None:
            continue
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise ValueError(f"{where or 'top level'}: non-finite number")
        elif isinstance(item, int):
            continue
        elif isinstance(item, list):
            if len(item) > limits.list_items:
                raise ValueError(f"{where or 'top level'}: a list of {len(item)} items (at most {limits.list_items})")
            stack.extend((v, f"{where}[{i}]", depth + 1) for i, v in enumerate(item))
        elif isinstance(item, dict):
            if len(item) > limits.list_items:
                raise ValueError(f"{where or 'top level'}: an object of {len(item)} keys")
            for key, v in item.items():
                if len(key) > limits.string_chars:
                    raise ValueError(f"{where or 'top level'}: a key of {len(key)} characters")
                stack.append((v, f"{where}.{key[:40]}" if where else key[:40], depth + 1))
        else:  # pragma: no cover - json.loads makes nothing else
            raise ValueError(f"{where or 'top level'}: unexpected {type(item).__name__}")


def regular_file(path: Path, limits: Limits = LIMITS) -> int:
    """The size of ``path``, which must be a regular file (not a link) within the size bound."""
    try:
        info = path.lstat()
    except OSError as exc:
        raise FileFormatError(f"{path}: cannot be read ({exc.strerror})") from None
    if stat.S_ISLNK(info.st_mode):
        raise FileFormatError(f"{path}: a symbolic link; untrusted folders may hold regular files only")
    if not stat.S_ISREG(info.st_mode):
        raise FileFormatError(f"{path}: not a regular file")
    if info.st_size > limits.file_bytes:
        raise FileFormatError(f"{path}: {info.st_size} bytes, more than the {limits.file_bytes} a file may hold")
    return info.st_size


def read_untrusted_json(path: Path, what: str, limits: Limits = LIMITS) -> Any:
    """Parse ``path`` as bounded, finite JSON; FileFormatError (one line, naming it) otherwise."""
    regular_file(path, limits)
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise FileFormatError(f"{path}: {what} file is not UTF-8 text") from None
    except OSError as exc:
        raise FileFormatError(f"{path}: cannot read {what} file: {exc.strerror}") from None
    data = parse_json(text, path, what)
    try:
        check_value(data, limits)
    except ValueError as exc:
        raise FileFormatError(f"{path}: {exc}") from None
    return data


def list_folder(root: Path, limits: Limits = LIMITS) -> list[Path]:
    """Every regular file under ``root`` (relative paths, sorted), refusing links, other
    special files, and more files or bytes than the bounds allow."""
    try:
        info = root.lstat()
    except OSError:
        raise FileFormatError(f"{root}: no such directory") from None
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise FileFormatError(f"{root}: not a directory")
    files: list[Path] = []
    total = 0
    pending = [root]
    while pending:
        folder = pending.pop()
        for entry in sorted(folder.iterdir()):
            mode = entry.lstat().st_mode
            if stat.S_ISDIR(mode):
                pending.append(entry)
                continue
            if stat.S_ISLNK(mode):
                raise FileFormatError(f"{entry}: a symbolic link; untrusted folders may hold regular files only")
            if not stat.S_ISREG(mode):
                raise FileFormatError(f"{entry}: not a regular file")
            files.append(entry.relative_to(root))
            total += entry.lstat().st_size
            if len(files) > limits.files:
                raise FileFormatError(f"{root}: more than {limits.files} files")
            if total > limits.total_bytes:
                raise FileFormatError(f"{root}: more than {limits.total_bytes} bytes in all")
    return sorted(files)
