"""A user's training script measured as it is (``perfgate run --script train.py -- ARGS``).

The script does not import perfgate: the child process of each repeat installs hooks in
torch and runs the file as ``__main__`` (see ``perfgate.measure.script_hooks``). This
module holds the noun only: which file, with which arguments, and what its result is
called and records. No torch, no file reading.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCRIPT_VERSION = 1
"""The workload version of every script result: the script's edits are what a gate measures,
so they never make two runs incomparable; its arguments do (they are a parameter)."""

SCRIPT_DEFAULTS: Mapping[str, int] = {"warmup_steps": 10, "steps": 50}
"""Warmup and measured optimizer steps per repeat, unless ``--set``/``--warmup``/``--steps`` say otherwise."""

SCRIPT_SETTABLE = ("warmup_steps", "steps", "seed", "num_threads", "cudnn_benchmark", "deterministic", "allow_tf32")
"""The parameters ``--set`` may change for a script: the step counts and the torch switches
perfgate sets before the script starts (the script may set them again itself). The others
(batch size, loader settings, precision, ...) are the script's own."""

SCRIPT_MEASURED = ("precision",)
"""The parameters a script's result reads from what its steps did, not from what perfgate set
(the precision: the autocast dtype in effect at each step's first forward pass, else the
parameters'). A change in one is the script's own edit, which the gate measures: two script
runs are never incomparable for it (results from before it was read hold ``fp32``)."""

ARGS_PARAM = "script_args"
"""The parameter that records the script's arguments (``shlex.join``): other arguments, another run."""

SCRIPT_SOURCE = "script:"
"""How a script result's ``workload_source`` begins: ``script:PATH sha256:HEX``."""


def script_path_of(source: str) -> str | None:
    """The script's path as a result's ``workload_source`` records it; None for a workload."""
    if not source.startswith(SCRIPT_SOURCE):
        return None
    return source.removeprefix(SCRIPT_SOURCE).rsplit(" sha256:", 1)[0]


def script_words(value: str, given: str) -> tuple[str, tuple[str, ...]]:
    """``"PATH [ARGS...]"`` split as a shell would: the path and the arguments. A UsageError
    naming ``given`` (``--perfgate-script``, ``--script``) for an unclosed quote or no path."""
    from perfgate.model.errors import UsageError

    try:
        words = shlex.split(value)
    except ValueError as exc:
        raise UsageError(f"{given} {value!r}: {exc}") from None
    if not words:
        raise UsageError(f"{given}: give the script's path, then its arguments, in one quoted value")
    return words[0], tuple(words[1:])


SCRIPTS_SETTING = "[tool.perfgate] scripts:"
"""How a script named in the settings is named in messages (:attr:`Script.given`)."""

_NAME_CHARS = re.compile(r"[^a-z0-9.-]+")
"""What a script's default name turns into ``-``: the underscore too (``train_lightning.py`` is
``script-train-lightning``); a result recorded under the old name is found with ``--name``."""


@dataclass(frozen=True)
class Script:
    """One script to run: its absolute path, its arguments, the path as results record it
    (relative to the project when inside it) and the sha256 of its bytes when the job was made."""

    path: Path
    args: tuple[str, ...] = ()
    shown: str = ""
    sha256: str = ""
    given: str = "--script"
    """Where it was named, for messages: ``--script`` (the command line: a script the base
    commit lacks is bad input) or ``[tool.perfgate] scripts:`` (a script a pull request adds
    is measured on the head side alone, like a new workload)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "args", tuple(str(a) for a in self.args))
        if not self.shown:
            object.__setattr__(self, "shown", str(self.path))

    @property
    def named_on_command_line(self) -> bool:
        """Named by a flag (``--script``, ``--perfgate-script``): the base commit must have it."""
        return self.given.startswith("--")

    @property
    def configured(self) -> bool:
        """Named in ``[tool.perfgate] scripts``: every command selects it by its name."""
        return self.given == SCRIPTS_SETTING

    def default_name(self) -> str:
        """``script-<file name>``, lowercased, other characters as ``-``, within the workload name rule."""
        stem = _NAME_CHARS.sub("-", self.path.stem.lower()).strip("-._") or "main"
        return f"script-{stem}"[:64].rstrip("-._")

    def joined_args(self) -> str:
        return shlex.join(self.args)

    def source(self) -> str:
        """The result's ``workload_source``: the path and the content hash of what ran."""
        return f"{SCRIPT_SOURCE}{self.shown}" + (f" sha256:{self.sha256}" if self.sha256 else "")

    def to_dict(self) -> dict[str, Any]:
        return {"path": str(self.path), "args": list(self.args), "shown": self.shown, "sha256": self.sha256}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Script:
        args = data.get("args") or []
        if not isinstance(data.get("path"), str) or not isinstance(args, list):
            raise ValueError(f"not a script request: {dict(data)!r}")
        return cls(Path(data["path"]), tuple(str(a) for a in args), str(data.get("shown") or ""),
                   str(data.get("sha256") or ""))
