"""Talking to a GitHub Actions job: workflow commands, step outputs, the job summary.

Every value that came from a pull request (a workload's name, a reason) is escaped so
that it cannot start a workflow command of its own or add an output line.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from pathlib import Path


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def workflow_command(command: str, message: str, **properties: str) -> str:
    """A GitHub workflow command (``::error title=...::message``), escaped so that text
    from a pull request (a workload's name, a reason) cannot start a command of its own."""
    props = ",".join(
        f"{key}={_escape_data(value).replace(':', '%3A').replace(',', '%2C')}"
        for key, value in properties.items() if value
    )
    return f"::{command}{' ' + props if props else ''}::{_escape_data(message)}"


def set_output(path: Path, values: Mapping[str, str]) -> None:
    """Append step outputs to ``$GITHUB_OUTPUT`` (multi-line values in the delimiter form)."""
    lines = []
    for key, value in values.items():
        if "\n" in value or "\r" in value:
            delimiter = f"perfgate_{uuid.uuid4().hex}"
            lines += [f"{key}<<{delimiter}", value, delimiter]
        else:
            lines.append(f"{key}={value}")
    with open(path, "a", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")


def path_variable(environ: Mapping[str, str], name: str) -> Path | None:
    value = environ.get(name, "").strip()
    return Path(value) if value else None
