"""What a gate's wall time bought: the share of it spent inside timed windows.

A gate's precision comes from the fresh processes it measures; everything between their
timed windows (starting the interpreter, ``import torch``, building the model and the
data, warmup, counted runs, the worktree) is overhead. Every gate reports the share, so a
design that starts processes cheaply or times several windows per process shows its gain,
and one that does not, its cost. No torch, no files.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from perfgate.text.units import duration


@dataclass(frozen=True)
class MeasuringCost:
    wall_s: float
    """The gate's wall time, from its first process to its verdict."""
    timed_s: float
    """Inside the timed windows of the repeats it kept (both sides of a paired gate)."""
    processes: int
    """Repeat processes started, re-runs of contended ones included."""
    windows: int = 1
    """Timed windows per repeat (the fewest, when workloads differ)."""
    windows_high: int = 0
    """The most timed windows per repeat, when workloads' windows differ (``windows = "auto"``); 0: all ``windows``."""
    start: str = "fresh"
    """``"fork"``: forked from templates; ``"fresh"``: a new interpreter each."""
    templates: int = 0
    """Templates started (``start = "fork"``)."""
    fallback: str | None = None
    """Why forking was given up part-way (the rest started fresh); None: it was not."""

    @property
    def share(self) -> float | None:
        """``timed_s`` over ``wall_s`` (None before any wall time)."""
        return min(1.0, self.timed_s / self.wall_s) if self.wall_s > 0 else None

    def describe(self) -> str:
        """One line: "61% of the gate's 2 min 5 s was inside timed windows (48 processes forked
        from 12 templates, 3 windows each)"."""
        share = self.share
        head = (f"{share:.0%} of the gate's {duration(self.wall_s)} was inside timed windows" if share is not None
                else "no wall time measured")
        how = (f"{self.processes} processes forked from {self.templates} templates" if self.start == "fork"
               else f"{self.processes} processes started fresh")
        if self.windows_high > self.windows:
            how += f", {self.windows}–{self.windows_high} windows each"
        elif self.windows > 1:
            how += f", {self.windows} windows each"
        tail = f"; forking was given up: {self.fallback}" if self.fallback else ""
        return f"{head} ({how}){tail}"

    def to_dict(self) -> dict[str, Any]:
        return {"wall_s": round(self.wall_s, 3), "timed_s": round(self.timed_s, 3), "share": self.share,
                "processes": self.processes, "windows": self.windows,
                **({"windows_high": self.windows_high} if self.windows_high > self.windows else {}), "start": self.start,
                "templates": self.templates, "fallback": self.fallback}
