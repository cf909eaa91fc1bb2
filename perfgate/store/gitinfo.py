"""The commit of the repository under test, read with git (no torch)."""

from __future__ import annotations

import subprocess
from pathlib import Path


def git_revision(directory: Path) -> tuple[str | None, bool | None]:
    """Commit of the repository under test and whether tracked files are modified."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=directory, capture_output=True, text=True, timeout=10
        )
        if commit.returncode != 0:
            return None, None
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=directory, capture_output=True, text=True, timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None, None
    dirty = bool(status.stdout.strip()) if status.returncode == 0 else None
    return commit.stdout.strip(), dirty
