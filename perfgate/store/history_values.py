"""What a run in the history store may hold: checked before ``record`` writes it, and on
every row a reader reads back.

:class:`Recording` is one run to record; :func:`check_recording` checks each value
:func:`perfgate.store.history.record` would store (``created_at`` an ISO 8601 time with a
timezone, from 2000 to at most a day ahead of the clock; the names, commit and versions
short one-line strings; the numbers finite and bounded) and names the first bad field.

:data:`COLUMNS` is the shape of a row read back (one per run × repeat × row), and
:data:`READ_CHECKS` what a readable value of each column is: what ``record`` stores. A
store edited by hand, or written by a perfgate that checked less, may hold a
``created_at`` of "yesterday" or of the year 9999; :func:`readable` leaves out each run
with such a row, whole, and names it in one line.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from perfgate.model.counters import CounterSet
from perfgate.model.environment import Environment
from perfgate.model.manifest import DESIGNS
from perfgate.model.result import MAX_REPEATS, ROWS, RunResult
from perfgate.model.schema import MAX_COUNT
from perfgate.store.history_sql import Location
from perfgate.store.untrusted import safe_name
from perfgate.text.inert import terminal

__all__ = ["AHEAD", "COLUMNS", "COUNTERS", "EARLIEST", "LATEST_READ", "MAX_INDEX", "MAX_NUMBER", "MAX_TEXT",
           "READ_CHECKS", "Recording", "check_recording", "parse_time", "readable", "recorded_gpu_model"]

COUNTERS = ("ops", "copies", "flops", "syncs", "launches")
"""Counters kept per phase, each per counted step: aten operator calls, copy operator
calls, FLOPs, host-device synchronisations, CUDA kernel launches (None on the CPU)."""

COLUMNS = (
    "run_id", "recorded_at", "date", "commit", "dirty", "branch", "design", "workload", "workload_version",
    "device", "environment_key", "perfgate_version", "runner", "gpu_model", "gpu_uuid", "repeat", "block", "phase",
    "per_step_ms", "median_ms", "share", "samples_per_s", "peak_memory_bytes", *COUNTERS,
)
"""The columns :func:`perfgate.store.history.read_rows` returns, in this order: one row per run × repeat × row."""


@dataclass(frozen=True)
class Recording:
    """One run to record: a head result, its counted run (None: none beside it), the
    design it was measured in, the branch it was measured on (None: not given), the
    runner that measured it (``RUNNER_NAME`` or the host name:
    :func:`perfgate.store.history.runner_name`) and its GPU's UUID (None: the one the result's
    environment records, when it does)."""

    result: RunResult
    counters: CounterSet | None
    design: str
    branch: str | None = None
    runner: str | None = None
    gpu_uuid: str | None = None

    def __post_init__(self) -> None:
        if self.design not in DESIGNS:
            raise ValueError(f"design must be one of {', '.join(DESIGNS)}, got {self.design!r}")
        if self.gpu_uuid is None and self.result.environment.gpu_uuid is not None:
            object.__setattr__(self, "gpu_uuid", self.result.environment.gpu_uuid)


def recorded_gpu_model(device: str, environment: Environment) -> str | None:
    """The GPU model a run of ``device`` in ``environment`` is recorded with (the ``gpu_model``
    column): the GPU's name on CUDA (``torch.cuda.get_device_name``, as the fingerprint
    holds it), None on the CPU."""
    return environment.gpu_name if device == "cuda" and environment.gpu_name else None


# --- what a run may hold ---------------------------------------------------------------------

_ISO_TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}(?::[0-9]{2}(?:\.[0-9]{1,9})?)?"
                       r"(?:Z|[+-][0-9]{2}:[0-9]{2})")
"""An ISO 8601 date and time with its timezone (``2026-11-30T10:00:00+00:00``, ``...Z``),
the form perfgate writes and pandas reads."""
EARLIEST = datetime(2000, 1, 1, tzinfo=timezone.utc)
"""No run is older (the year 1 or 1970 is a clock that was not set)."""
LATEST_READ = datetime(2200, 1, 1, tzinfo=timezone.utc)
"""Reading: no time from here on (pandas' nanosecond timestamps end in 2262)."""
AHEAD = timedelta(days=1)
"""Recording: how far ``created_at`` may lie ahead of this machine's clock (another
runner's clock, a timezone written wrong)."""
MAX_TEXT = 200
"""Characters of a stored name, version, commit or branch at most."""
MAX_INDEX = MAX_REPEATS - 1
"""A repeat's index and ABBA block at most, as the result reader bounds them."""
MAX_NUMBER = float(MAX_COUNT)
"""A version, a peak memory or a count of steps at most (2**53, exact in a float)."""


def parse_time(value: object, *, latest: datetime) -> datetime:
    """``value`` as an aware datetime: ISO 8601 with a timezone, from :data:`EARLIEST` to
    ``latest``; ValueError saying which of these it is not."""
    if not isinstance(value, str):
        raise ValueError(f"expected an ISO 8601 time, got {type(value).__name__}")
    shown = terminal(repr(value), 60)
    if not _ISO_TIME.fullmatch(value):
        raise ValueError(f"{shown} is not an ISO 8601 time with a timezone (2026-11-30T10:00:00+00:00)")
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{shown} is not a date and time (month, day, hour or offset out of range)") from None
    if when < EARLIEST:
        raise ValueError(f"{shown} is before {EARLIEST.year}")
    if when > latest:
        raise ValueError(f"{shown} is after {latest.isoformat(timespec='seconds')}")
    return when


def _text(value: object, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if not isinstance(value, str) or not value or len(value) > MAX_TEXT or terminal(value, MAX_TEXT) != value:
        shown = terminal(repr(value), 60) if isinstance(value, str) else type(value).__name__
        raise ValueError(f"expected a one-line string of 1 to {MAX_TEXT} printable characters, got {shown}")


def _integer(value: object, low: int, high: float, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        shown = value if isinstance(value, int) and abs(value) < 10**20 else type(value).__name__
        raise ValueError(f"expected an integer from {low} to {high:.0f}, got {shown}")


def _number(value: object, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    try:
        finite = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
    except OverflowError:  # an integer beyond a float's range
        finite = False
    if not finite:
        shown = value if isinstance(value, float) else type(value).__name__
        raise ValueError(f"expected a finite number, got {shown}")


def _field(where: str, check: Callable[[], object]) -> None:
    try:
        check()
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def check_recording(recording: Recording, *, now: datetime | None = None) -> None:
    """Every value of ``recording`` that ``record`` stores, checked as the readers read
    it back; ValueError naming the first bad field (``created_at: 'yesterday' is not ...``)."""
    result, env = recording.result, recording.result.environment
    latest = (now or datetime.now(timezone.utc)) + AHEAD
    _field("created_at", lambda: parse_time(result.created_at, latest=latest))
    _field("workload", lambda: safe_name(result.workload, "the name"))
    _field("workload_version", lambda: _integer(result.workload_version, 0, MAX_NUMBER))
    _field("device", lambda: _text(result.device))
    _field("perfgate_version", lambda: _text(result.perfgate_version))
    _field("environment.git_commit", lambda: _text(env.git_commit, optional=True))
    if env.git_dirty is not None and not isinstance(env.git_dirty, bool):
        raise ValueError(f"environment.git_dirty: expected true, false or null, got {type(env.git_dirty).__name__}")
    try:
        key = env.key()
    except (AttributeError, TypeError, ValueError):
        raise ValueError("environment: its fields do not make an environment key") from None
    _field("environment key", lambda: _text(key))
    _field("branch", lambda: _text(recording.branch, optional=True))
    _field("runner", lambda: _text(recording.runner, optional=True))
    _field("gpu_uuid", lambda: _text(recording.gpu_uuid, optional=True))
    # _field calls each check at once, in this iteration: the lambdas only put its ValueError
    # under the field's name (hence the noqa: B023 below).
    for repeat in result.repeats:
        where = f"repeat {repeat.index}"
        _field(f"{where} index", lambda: _integer(repeat.index, 0, MAX_INDEX))  # noqa: B023  run at once
        _field(f"{where} block", lambda: _integer(repeat.block, 0, MAX_INDEX, optional=True))  # noqa: B023  run at once
        _field(f"{where} samples_per_s", lambda: _number(repeat.samples_per_s))  # noqa: B023  run at once
        _field(f"{where} peak_memory_bytes",
               lambda: _integer(repeat.peak_memory_bytes, 0, MAX_NUMBER, optional=True))  # noqa: B023  run at once
        if not repeat.samples_per_s > 0:
            raise ValueError(f"{where} samples_per_s: expected a positive number, got {repeat.samples_per_s}")
        if not sum(repeat.phases_ms["step"]) > 0:
            raise ValueError(f"{where}: no step time")
        for row in ROWS:
            _field(f"{where} time per step {row}", lambda: _number(repeat.per_step_ms[row]))  # noqa: B023  run at once
            _field(f"{where} median {row}", lambda: _number(repeat.medians_ms[row]))  # noqa: B023  run at once
            _field(f"{where} share {row}", lambda: _number(repeat.shares[row]))  # noqa: B023  run at once
    if recording.counters is not None:
        _field("counted steps", lambda: _integer(recording.counters.steps if recording.counters else None,
                                                 1, MAX_NUMBER))


# --- reading back ---------------------------------------------------------------------------


def _one_of(choices: Sequence[str]) -> Callable[[object], None]:
    def check(value: object) -> None:
        if value not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}, got {terminal(repr(value), 40)}")
    return check


READ_CHECKS: dict[str, Callable[[object], object]] = {
    "run_id": lambda v: _integer(v, 0, 2**63 - 1),
    "recorded_at": lambda v: parse_time(v, latest=LATEST_READ),
    "date": lambda v: parse_time(v, latest=LATEST_READ),
    "commit": lambda v: _text(v, optional=True),
    "dirty": lambda v: _integer(v, 0, 1, optional=True),
    "branch": lambda v: _text(v, optional=True),
    "design": _one_of(DESIGNS),
    "workload": lambda v: _text(v),
    "workload_version": lambda v: _integer(v, 0, MAX_NUMBER),
    "device": lambda v: _text(v),
    "environment_key": lambda v: _text(v),
    "perfgate_version": lambda v: _text(v),
    "runner": lambda v: _text(v, optional=True),
    "gpu_model": lambda v: _text(v, optional=True),
    "gpu_uuid": lambda v: _text(v, optional=True),
    "repeat": lambda v: _integer(v, 0, MAX_INDEX),
    "block": lambda v: _integer(v, 0, MAX_INDEX, optional=True),
    "phase": _one_of(ROWS),
    "per_step_ms": lambda v: _number(v, optional=True),
    "median_ms": lambda v: _number(v),
    "share": lambda v: _number(v),
    "samples_per_s": lambda v: _number(v),
    "peak_memory_bytes": lambda v: _integer(v, 0, MAX_NUMBER, optional=True),
    **{c: (lambda v: _number(v, optional=True)) for c in COUNTERS},
}
"""Per column of :data:`COLUMNS`, what a readable value is (what ``record`` stores)."""
assert tuple(READ_CHECKS) == COLUMNS


def readable(path: Location, rows: list[tuple[object, ...]], columns: Sequence[str] = COLUMNS,
             ) -> tuple[list[tuple[object, ...]], tuple[str, ...]]:
    """``rows`` (of ``columns``, each one of :data:`READ_CHECKS`, ``run_id`` first and
    ``workload`` among them) less those of the runs with an unreadable value, and one line
    per such run."""
    checks = [READ_CHECKS[column] for column in columns]
    name = list(columns).index("workload")
    bad: dict[object, str] = {}
    readable: set[tuple[int, object]] = set()  # (column, value) pairs checked: a run's values repeat on its rows
    for row in rows:
        run_id = row[0]
        if run_id in bad:
            continue
        for i, (column, value, check) in enumerate(zip(columns, row, checks, strict=True)):
            if (i, value) in readable:
                continue
            try:
                check(value)
            except ValueError as exc:
                bad[run_id] = (f"{path}: run {terminal(repr(run_id), 24)} ({terminal(str(row[name]), 64)}) left out: "
                               f"{'created_at' if column == 'date' else column}: {exc}")
                break
            readable.add((i, value))
    if not bad:
        return rows, ()
    return [row for row in rows if row[0] not in bad], tuple(bad.values())
