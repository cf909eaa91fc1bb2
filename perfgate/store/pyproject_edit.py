"""Writing settings into ``[tool.perfgate]`` of a pyproject.toml, and nothing else of it.

``perfgate calibrate --auto`` writes the design it recommends (``windows``, ``blocks``). The
file is the user's: its comments, order and other tools' tables stay as they are (tomlkit
edits the document, it does not re-serialise a dict), and it is replaced in one rename, so
it is never half-written. The caller checks the new text before it is written
(:func:`edited_text` returns it; :func:`replace_text` writes it).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import tomlkit
from tomlkit.exceptions import TOMLKitError
from tomlkit.items import Table

from perfgate.model.errors import UsageError
from perfgate.store.jsonfile import write_text_atomic


def edited_text(path: Path, values: Mapping[str, int | str]) -> str:
    """``path``'s text with ``[tool.perfgate]``'s ``values`` set (the table made when
    missing); UsageError (one line) when the file cannot be read or is not TOML."""
    try:
        text = path.read_text(encoding="utf-8") if path.exists() else ""
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read it to write the settings: {exc}") from None
    try:
        document = tomlkit.parse(text)
    except TOMLKitError as exc:
        raise UsageError(f"{path}: not valid TOML, nothing written: {exc}") from None
    tool = document.get("tool")
    if tool is None:
        tool = tomlkit.table(is_super_table=True)
        document["tool"] = tool
    if not isinstance(tool, Table):
        raise UsageError(f"{path}: [tool] is not a table, nothing written")
    table = tool.get("perfgate")
    if table is None:
        table = tomlkit.table()
        tool["perfgate"] = table
    if not isinstance(table, Table):
        raise UsageError(f"{path}: [tool.perfgate] is not a table, nothing written")
    for key, value in values.items():
        table[key] = value
    return tomlkit.dumps(document)


def replace_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` in one rename (never half-written)."""
    write_text_atomic(path, text)
