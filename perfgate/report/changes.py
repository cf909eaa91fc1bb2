"""The lasting steps found in the history, as a terminal table (``perfgate history changes``).

One :class:`ChangeRow` per change point (``perfgate.analysis.changepoints.find_changes``
on a workload's per-run series in one environment), and :func:`render_changes` to write
them. The workload name, the environment key and the commits come from the history store,
which recorded what result files said: they are untrusted, and each goes through
``perfgate.text.inert.terminal`` (no control characters or ANSI sequences, one line)
before it is shown.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

from perfgate.text.inert import terminal
from perfgate.text.units import percent, table

__all__ = ["ChangeRow", "render_changes"]

SHORT_COMMIT = 12
"""Characters of a commit shown."""
NAME_LIMIT = 80
"""Characters of a workload name or environment key shown at most (then a note)."""
NONE = "no lasting steps found"
"""What :func:`render_changes` says for no rows."""


@dataclass(frozen=True)
class ChangeRow:
    """One lasting step of one series: the workload, environment key and phase (the row of
    ``perfgate.model.result.ROWS``) whose per-run series it is in; the commit of the last
    run before the step and of the first run after it (None where a run recorded none),
    the date of that first run; ``ratio``, the median after over the median before (above
    1 is slower); and the change point's ``confidence`` (1 - its p-value)."""

    workload: str
    environment_key: str
    phase: str
    commit_before: str | None
    commit_after: str | None
    date_after: datetime | None
    ratio: float
    confidence: float


def render_changes(rows: Sequence[ChangeRow]) -> str:
    """``rows`` as a table, in the order given, with no trailing newline: workload,
    environment, phase, the commit range ``before..after`` (the last run before the step,
    the first after it: the cause is in what the second adds to the first), the date of
    the first run after (UTC), the size as a signed percentage and the confidence.
    For no rows, the line ``no lasting steps found``."""
    if not rows:
        return NONE
    headers = ["workload", "environment", "phase", "commits (last before..first after)", "first run after (UTC)",
               "size", "confidence"]
    body = [[terminal(r.workload, NAME_LIMIT), terminal(r.environment_key, NAME_LIMIT), terminal(r.phase, NAME_LIMIT),
             f"{_commit(r.commit_before)}..{_commit(r.commit_after)}", _date(r.date_after),
             _size(r.ratio), _confidence(r.confidence)]
            for r in rows]
    return table(headers, body, "lllllrr")


def _commit(commit: str | None) -> str:
    shown = "" if commit is None else terminal(commit)[:SHORT_COMMIT]
    return shown or "?"


def _date(when: datetime | None) -> str:
    if when is None or not isinstance(when, datetime) or when != when:  # None, or NaT
        return "—"
    if when.tzinfo is not None:
        when = when.astimezone(timezone.utc)
    return when.strftime("%Y-%m-%d %H:%M")


def _size(ratio: float) -> str:
    return percent(ratio - 1, signed=True) if math.isfinite(ratio) and ratio > 0 else "—"


def _confidence(value: float) -> str:
    return percent(value) if math.isfinite(value) else "—"
