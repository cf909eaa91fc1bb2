"""Strict reading and atomic writing of perfgate's JSON files.

Results and baselines are read with the same rules: an empty, truncated or non-JSON
file, or one holding NaN or Infinity, is a :class:`FileFormatError` naming the file.
Writes go to a temporary file in the same directory and are renamed into place, so an
interrupted write leaves the previous file intact. A write the system refuses (a full
disk, a read-only folder) is a :class:`WriteError`: one line naming the file and why
(``No space left on device``), exit code 2, and no temporary file is left behind.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from perfgate.model.errors import FileFormatError, PerfgateError

T = TypeVar("T")


class WriteError(PerfgateError, OSError):
    """A file the system would not let perfgate write (``ENOSPC``, ``EACCES``, ``EROFS``):
    a :class:`PerfgateError`, so the command line shows its one line and exits 2, and
    still an :class:`OSError` with the ``errno``, ``strerror`` and ``filename`` of the
    failure, for callers that handle an unwritable file themselves."""

    def __init__(self, path: Path, exc: OSError) -> None:
        reason = exc.strerror or str(exc) or type(exc).__name__
        super().__init__(f"{path}: cannot write the file: {reason}; nothing was written "
                         "(a file already there is as it was)")
        self.errno, self.strerror, self.filename = exc.errno, exc.strerror, str(path)


def _reject_constant(name: str) -> float:
    raise ValueError(f"non-finite number {name}")


def read_json(path: Path, what: str) -> Any:
    """Load ``path`` as JSON; ``what`` names the kind of file in error messages."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FileFormatError(f"{path}: {what} file not found") from None
    except IsADirectoryError:
        raise FileFormatError(f"{path}: expected a {what} file, found a directory") from None
    except UnicodeDecodeError:
        raise FileFormatError(f"{path}: {what} file is not UTF-8 text") from None
    except OSError as exc:
        raise FileFormatError(f"{path}: cannot read {what} file: {exc.strerror}") from None
    return parse_json(text, path, what)


def parse_json(text: str, path: Path, what: str) -> Any:
    """``text`` (read from ``path``) as JSON without NaN or Infinity; one FileFormatError
    line naming the file when it is empty, truncated, too deep or not JSON."""
    if not text.strip():
        raise FileFormatError(f"{path}: {what} file is empty")
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise FileFormatError(f"{path}: {what} file is nested too deeply to read") from None
    except ValueError as exc:  # JSONDecodeError, a non-finite constant, an integer too long to convert
        message = str(exc)[:200]
        if "non-finite" in message:
            raise FileFormatError(f"{path}: {what} file holds a {message}") from None
        raise FileFormatError(f"{path}: {what} file is not valid JSON (truncated?): {message}") from None


def load_document(path: Path, what: str, parse: Callable[[Any], T]) -> T:
    """Read ``path`` and turn it into a typed document; a ValueError from ``parse`` (a
    wrong shape, a newer schema) becomes one FileFormatError line naming the file."""
    data = read_json(path, what)
    try:
        return parse(data)
    except ValueError as exc:
        raise FileFormatError(f"{path}: {exc}") from None


def dumps(data: Any) -> str:
    """The canonical, reviewable form: sorted keys, indent 2, trailing newline."""
    return json.dumps(data, sort_keys=True, indent=2, allow_nan=False, ensure_ascii=False) + "\n"


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` to ``path`` atomically (temporary file, fsync, rename)."""
    write_text_atomic(path, dumps(data))  # serialised first: a value error must not leave a partial file


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically: an interruption leaves the old file intact."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (a temporary file beside it, fsync, rename): an
    interruption or a failure leaves no partial file and the old one, if any, intact. A
    failure of the system's (a full disk) is a :class:`WriteError` naming ``path``."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise WriteError(path, exc) from None
    try:
        # mkstemp creates the file 0600; give it the mode a plain open() would (umask applies),
        # so CI artifacts and committed baselines are readable as usual.
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException as exc:
        try:
            os.unlink(tmp_name)
        except FileNotFoundError:
            pass
        if isinstance(exc, OSError) and not isinstance(exc, WriteError):
            raise WriteError(path, exc) from None
        raise
