"""Writing settings into ``[tool.perfgate]`` of a pyproject.toml, and nothing else of it.

``perfgate calibrate --auto`` writes the design it recommends (``windows``, ``blocks``). The
file is the user's, and it comes back as the user keeps it:

- its comments, order and other tools' tables stay as they are (tomlkit edits the document,
  it does not re-serialise a dict); ``[tool]`` and ``[tool.perfgate]`` may be split over the
  file, out of order, dotted or inline, as TOML allows;
- its newline style: a file with CRLF newlines only stays CRLF (its bytes are read without
  newline translation, and the lines tomlkit adds get the file's newline); a UTF-8 BOM stays;
- a symbolic link stays a link: the file it names is edited, wherever it is;
- its mode (0600 stays 0600), and its owner when this user may keep it;
- a file with several hard links is edited in place, so every name sees the edit.

It is never written when it is read-only (no write bit in its mode, or not writable by this
user): one line, exit 2. It is read once, before calibrate measures (:func:`read_settings_file`),
the edit is made from that reading, and :func:`write_edited` refuses to write when the file
no longer holds what was read (edited meanwhile, or replaced): an edit made from an old
reading would undo the user's.

Atomicity against links, the choice made: a file with one link is replaced in one rename (a
temporary file beside the link's target, given the old mode, fsync'd, renamed over the
target), so it is never half-written and the link, which names the target's path, stays.
A rename makes a new inode, which would cut a hard link from the edit (the other names would
keep the old text, silently); so a file with several hard links is written in place (one
write from the start, the rest cut off, fsync'd). Keeping the links was chosen over
atomicity there because a split hard link is a silent wrong state, while an interrupted
write of a few kilobytes is rare and visible (the file does not parse; git shows it). The
check that the file is unchanged comes just before the rename or the write; what changes
it in between is not seen.
"""

from __future__ import annotations

import os
import re
import stat
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import tomlkit
from tomlkit.container import OutOfOrderTableProxy
from tomlkit.exceptions import TOMLKitError
from tomlkit.items import InlineTable, Table

from perfgate.model.errors import UsageError

_TABLES = (Table, InlineTable, OutOfOrderTableProxy)
"""What tomlkit gives for a TOML table, whichever way the file writes it."""
_BOM = "\ufeff"


@dataclass(frozen=True)
class SettingsFile:
    """One pyproject.toml as read for an edit: the name given, the file it names (every
    symbolic link followed), its bytes and its status when read."""

    path: Path
    target: Path
    data: bytes
    status: os.stat_result

    @property
    def text(self) -> str:
        """The text, newlines as they are in the file (no translation), without a BOM."""
        return self.data.decode("utf-8").removeprefix(_BOM)

    @property
    def newline(self) -> str:
        """``"\\r\\n"`` when every newline of the file is CRLF (and it has one), else ``"\\n"``."""
        text = self.text
        return "\r\n" if "\r\n" in text and "\n" not in text.replace("\r\n", "") else "\n"


def _refuse_read_only(path: Path, status: os.stat_result, target: Path) -> None:
    mode = stat.S_IMODE(status.st_mode)
    if not mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH):
        raise UsageError(f"{path}: read-only (mode {mode:04o}); nothing written (make it writable to let "
                         "calibrate --auto write the design)")
    if not os.access(target, os.W_OK):
        raise UsageError(f"{path}: not writable by this user; nothing written")


def read_settings_file(path: Path) -> SettingsFile:
    """``path`` read for an edit; UsageError (one line) when it does not exist, is not a
    regular file, is read-only, or is not UTF-8."""
    try:
        target = path.resolve(strict=True)
        status = os.stat(target)
    except FileNotFoundError:
        raise UsageError(f"{path}: does not exist" + (" (a symbolic link to nothing)" if path.is_symlink() else "")
                         ) from None
    except (OSError, RuntimeError) as exc:  # RuntimeError: a loop of links
        raise UsageError(f"{path}: cannot read it to write the settings: {exc}") from None
    if not stat.S_ISREG(status.st_mode):
        raise UsageError(f"{path}: not a regular file; nothing written")
    _refuse_read_only(path, status, target)
    try:
        data = target.read_bytes()
        data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read it to write the settings: {exc}") from None
    return SettingsFile(path, target, data, status)


def edited(file: SettingsFile, values: Mapping[str, int | str]) -> str:
    """``file``'s text with ``[tool.perfgate]``'s ``values`` set (the table made when
    missing), in the file's newline style; UsageError (one line) when it is not TOML or
    ``tool`` / ``tool.perfgate`` is not a table."""
    path = file.path
    try:
        document = tomlkit.parse(file.text)
    except TOMLKitError as exc:
        raise UsageError(f"{path}: not valid TOML, nothing written: {exc}") from None
    tool = document.get("tool")
    if tool is None:
        tool = tomlkit.table(is_super_table=True)
        document["tool"] = tool
    if not isinstance(tool, _TABLES):
        raise UsageError(f"{path}: [tool] is not a table, nothing written")
    table = tool.get("perfgate")
    if table is None:
        tool["perfgate"] = tomlkit.table()
        table = tool["perfgate"]
    if not isinstance(table, _TABLES):
        raise UsageError(f"{path}: [tool.perfgate] is not a table, nothing written")
    for key, value in values.items():
        table[key] = value
    text = tomlkit.dumps(document)
    if file.newline == "\r\n":
        text = re.sub(r"(?<!\r)\n", "\r\n", text)
    return (_BOM if file.data.decode("utf-8").startswith(_BOM) else "") + text


def _unchanged(file: SettingsFile) -> None:
    """UsageError unless the file still is what :func:`read_settings_file` read."""
    try:
        target = file.path.resolve(strict=True)
        status = os.stat(target)
        data = target.read_bytes()
    except (OSError, RuntimeError) as exc:
        raise UsageError(f"{file.path}: cannot be read again before writing ({exc}); nothing written") from None
    same = (target == file.target and (status.st_dev, status.st_ino) == (file.status.st_dev, file.status.st_ino)
            and data == file.data)
    if not same:
        raise UsageError(f"{file.path}: changed since calibrate read it; nothing written (run calibrate --auto "
                         "again, or set the design it printed by hand)")
    _refuse_read_only(file.path, status, target)


def write_edited(file: SettingsFile, text: str) -> None:
    """Write ``text`` over ``file``'s target, keeping its links, mode and owner (see the
    module's docstring for the rename against the in-place write); UsageError (one line)
    when the file changed since it was read, became read-only, or cannot be written."""
    data = text.encode("utf-8")
    target = file.target
    untouched = "nothing written"
    try:
        if file.status.st_nlink > 1:
            _unchanged(file)
            fd = os.open(target, os.O_WRONLY)
            untouched = "it may be partly written (a file with several hard links is written in place)"
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.ftruncate(fd, len(data))
                os.fsync(fd)
            finally:
                os.close(fd)
            return
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        try:
            os.fchmod(fd, stat.S_IMODE(file.status.st_mode))
            try:
                os.fchown(fd, file.status.st_uid, file.status.st_gid)
            except PermissionError:
                pass  # another user's file in a directory of ours: this user's, as any editor leaves it
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            _unchanged(file)
            os.replace(tmp_name, target)
        except BaseException:
            try:
                os.unlink(tmp_name)
            except FileNotFoundError:
                pass
            raise
    except OSError as exc:
        raise UsageError(f"{file.path}: cannot write it: {exc.strerror or exc}; {untouched}") from None
