"""The history store: every recorded run of every workload, in one SQLite file.

``perfgate history record`` appends the runs of a results folder (one run per workload:
its identity, and per repeat the median and share of each row of
:data:`perfgate.model.result.ROWS`, with counters per step where a counted run lies
beside the result) in ONE transaction: ``BEGIN IMMEDIATE``, the inserts, ``COMMIT``. A
record that fails, or a process killed before the commit, leaves the store as it was
(SQLite's rollback journal puts it back when the store is next opened). Two processes
recording at once take turns: the second waits for the first's commit (the busy timeout).

Every value ``record`` stores is checked first (:func:`check_recording`): ``created_at``
is an ISO 8601 time with a timezone, from 2000 to at most a day ahead of the clock; the
names, commit and versions are short one-line strings; the numbers finite and bounded. A
run that fails is refused with one line naming the field, and nothing is recorded.

The file is schema-versioned: ``PRAGMA user_version`` holds :data:`HISTORY_SCHEMA_VERSION`
and the ``meta`` table (key, value) holds ``kind = perfgate.history``, the version that
created it and when. A store of a newer schema, a file that is not an SQLite database,
an SQLite database of something else, or a damaged store is refused with one
:class:`FileFormatError` line before anything is written, so the file is left byte for
byte as it was. Reading never writes (a hot journal left by a killed recorder is rolled
back, which restores the file as it was before that recording).

Reading checks every row as ``record`` would have stored it (a store edited by hand, or
written by a perfgate that checked less, may hold a ``created_at`` of "yesterday" or of
the year 9999): a run with a row that is not is left out whole, and
:attr:`HistoryRows.skipped` names it, one line per run, for the command to show; the
other runs are read as usual.

The pandas table built from :func:`read_rows` is ``perfgate.analysis.history``.
"""

from __future__ import annotations

import math
import re
import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

from perfgate.model.counters import CounterSet
from perfgate.model.errors import FileFormatError, UsageError
from perfgate.model.manifest import DESIGNS
from perfgate.model.result import MAX_REPEATS, ROWS, RunResult
from perfgate.model.schema import MAX_COUNT
from perfgate.model.version import __version__
from perfgate.model.workload import PHASES
from perfgate.store.jsonfile import write_bytes_atomic
from perfgate.store.untrusted import safe_name
from perfgate.store.untrusted_folders import load_measured
from perfgate.text.inert import terminal

HISTORY_KIND = "perfgate.history"
HISTORY_SCHEMA_VERSION = 1
BUSY_TIMEOUT_S = 60.0
"""How long a recorder or reader waits for another process's write transaction to end."""
COUNTERS = ("ops", "copies", "flops", "syncs", "launches")
"""Counters kept per phase, each per counted step: aten operator calls, copy operator
calls, FLOPs, host-device synchronisations, CUDA kernel launches (None on the CPU)."""

SCHEMA = """
CREATE TABLE meta (
    key TEXT PRIMARY KEY NOT NULL,
    value TEXT NOT NULL
);
CREATE TABLE runs (
    run_id INTEGER PRIMARY KEY,
    workload TEXT NOT NULL,
    workload_version INTEGER NOT NULL,
    git_commit TEXT,
    dirty INTEGER CHECK (dirty IN (0, 1)),
    branch TEXT,
    created_at TEXT NOT NULL,
    environment_key TEXT NOT NULL,
    device TEXT NOT NULL,
    design TEXT NOT NULL CHECK (design IN ('paired', 'stored')),
    perfgate_version TEXT NOT NULL,
    recorded_at TEXT NOT NULL,
    counted_steps INTEGER
);
CREATE UNIQUE INDEX runs_once ON runs (workload, ifnull(git_commit, ''), created_at, environment_key);
CREATE TABLE repeats (
    run_id INTEGER NOT NULL REFERENCES runs (run_id),
    repeat INTEGER NOT NULL,
    block INTEGER,
    samples_per_s REAL NOT NULL,
    peak_memory_bytes INTEGER,
    PRIMARY KEY (run_id, repeat)
) WITHOUT ROWID;
CREATE TABLE medians (
    run_id INTEGER NOT NULL,
    repeat INTEGER NOT NULL,
    phase TEXT NOT NULL,
    median_ms REAL NOT NULL,
    share REAL NOT NULL,
    PRIMARY KEY (run_id, repeat, phase),
    FOREIGN KEY (run_id, repeat) REFERENCES repeats (run_id, repeat)
) WITHOUT ROWID;
CREATE TABLE counters (
    run_id INTEGER NOT NULL REFERENCES runs (run_id),
    phase TEXT NOT NULL,
    ops REAL,
    copies REAL,
    flops REAL,
    syncs REAL,
    launches REAL,
    PRIMARY KEY (run_id, phase)
) WITHOUT ROWID;
"""
"""Version 1. ``created_at`` and ``recorded_at`` are ISO 8601 text; ``counters`` holds the
five phases and ``step`` (their sum) of the runs that have a counted run; the medians are
``RepeatResult.medians_ms``, the shares ``RepeatResult.shares``."""

COLUMNS = (
    "run_id", "recorded_at", "date", "commit", "dirty", "branch", "design", "workload", "workload_version",
    "device", "environment_key", "perfgate_version", "repeat", "block", "phase", "median_ms", "share",
    "samples_per_s", "peak_memory_bytes", *COUNTERS,
)
"""The columns :func:`read_rows` returns, in this order: one row per run × repeat × row."""

_READ = f"""
SELECT r.run_id, r.recorded_at, r.created_at, r.git_commit, r.dirty, r.branch, r.design, r.workload,
       r.workload_version, r.device, r.environment_key, r.perfgate_version, p.repeat, p.block, m.phase,
       m.median_ms, m.share, p.samples_per_s, p.peak_memory_bytes, {", ".join(f"c.{c}" for c in COUNTERS)}
FROM runs r
JOIN repeats p ON p.run_id = r.run_id
JOIN medians m ON m.run_id = p.run_id AND m.repeat = p.repeat
LEFT JOIN counters c ON c.run_id = m.run_id AND c.phase = m.phase
ORDER BY r.created_at, r.run_id, p.repeat, m.phase
"""


@dataclass(frozen=True)
class Recording:
    """One run to record: a head result, its counted run (None: none beside it), the
    design it was measured in and the branch it was measured on (None: not given)."""

    result: RunResult
    counters: CounterSet | None
    design: str
    branch: str | None = None

    def __post_init__(self) -> None:
        if self.design not in DESIGNS:
            raise ValueError(f"design must be one of {', '.join(DESIGNS)}, got {self.design!r}")


def _utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


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
    """Every value of ``recording`` that :func:`record` stores, checked as the readers read
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
    for repeat in result.repeats:
        where = f"repeat {repeat.index}"
        _field(f"{where} index", lambda: _integer(repeat.index, 0, MAX_INDEX))
        _field(f"{where} block", lambda: _integer(repeat.block, 0, MAX_INDEX, optional=True))
        _field(f"{where} samples_per_s", lambda: _number(repeat.samples_per_s))
        _field(f"{where} peak_memory_bytes", lambda: _integer(repeat.peak_memory_bytes, 0, MAX_NUMBER, optional=True))
        if not repeat.samples_per_s > 0:
            raise ValueError(f"{where} samples_per_s: expected a positive number, got {repeat.samples_per_s}")
        if not sum(repeat.phases_ms["step"]) > 0:
            raise ValueError(f"{where}: no step time")
        for row in ROWS:
            _field(f"{where} median {row}", lambda: _number(repeat.medians_ms[row]))
            _field(f"{where} share {row}", lambda: _number(repeat.shares[row]))
    if recording.counters is not None:
        _field("counted steps", lambda: _integer(recording.counters.steps if recording.counters else None,
                                                 1, MAX_NUMBER))


def _design_of(result: RunResult) -> str:
    return "paired" if any(r.block is not None for r in result.repeats) else "stored"


def recordings_of(directory: Path, *, design: str | None = None, branch: str | None = None) -> list[Recording]:
    """The runs of a results folder (``perfgate run``/``gate``/``ci``): each ``<w>.json``
    with the ``<w>.counters.json`` beside it; a paired run's base side (``base/``) is not
    a run of this code and is left out. The folder is read as untrusted data
    (``perfgate.store.untrusted_folders``). Each run's design is the one it was measured
    in (paired when its repeats have ABBA blocks; ``run.json``, when there, must say the
    same); ``design``, when given, must agree. A counted run of another device or
    workload version than its result is refused."""
    if design is not None and design not in DESIGNS:
        raise UsageError(f"--design must be one of {', '.join(DESIGNS)}, got {design!r}")
    measured = load_measured(Path(directory))
    if not measured.head:
        raise UsageError(f"{directory}: no result files (<workload>.json) to record")
    out = []
    for name in sorted(measured.head):
        result = measured.head[name]
        found = _design_of(result)
        if measured.manifest is not None and measured.manifest.design != found:
            raise FileFormatError(f"{directory}: run.json says the {measured.manifest.design} design, but "
                                  f"{name}.json was measured in the {found} design")
        if design is not None and design != found:
            raise UsageError(f"{name}: measured in the {found} design "
                             f"({'ABBA blocks' if found == 'paired' else 'no ABBA blocks'}), not {design}")
        counted = measured.head_counters.get(name)
        if counted is not None and (counted.device != result.device
                                    or counted.workload_version != result.workload_version):
            raise UsageError(f"{name}: its counted run is of {counted.device} v{counted.workload_version}, the "
                             f"result of {result.device} v{result.workload_version}; nothing was recorded")
        recording = Recording(result, counted, found, branch)
        try:
            check_recording(recording)
        except ValueError as exc:
            raise FileFormatError(f"{Path(directory) / f'{name}.json'}: {exc}; nothing was recorded") from None
        out.append(recording)
    return out


# --- opening and checking the file ---------------------------------------------------------


def _connect(path: Path, *, create: bool, timeout_s: float) -> sqlite3.Connection:
    mode = "rwc" if create else "rw"
    if not create and not path.is_file():
        if path.exists():
            raise FileFormatError(f"{path}: not a perfgate history store (not a file)")
        raise FileFormatError(f"{path}: no history store there (perfgate history record creates one)")
    try:
        if create:
            path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode={mode}", uri=True, timeout=timeout_s,
                               isolation_level=None)
    except FileExistsError:
        raise FileFormatError(f"{path}: cannot create the history store there: {path.parent} is not a folder") from None
    except OSError as exc:
        raise FileFormatError(f"{path}: cannot create the history store there: {exc.strerror or exc}") from None
    except sqlite3.Error as exc:
        raise FileFormatError(f"{path}: cannot open the history store: {_one_line(exc)}") from None
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


def _meta(conn: sqlite3.Connection) -> dict[str, str]:
    return {str(k): str(v) for k, v in conn.execute("SELECT key, value FROM meta")}


def _check(conn: sqlite3.Connection, path: Path, *, deep: bool) -> int:
    """The store's schema version (0: an empty database, a store to create), after
    checking that it is a perfgate history this perfgate can read; inside the caller's
    transaction. ``deep`` adds SQLite's ``quick_check`` of every page (before a write)."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if version == 0 and not tables:
        return 0
    if "meta" not in tables:
        raise FileFormatError(f"{path}: not a perfgate history store (an SQLite database without its meta table)")
    try:
        meta = _meta(conn)
    except sqlite3.OperationalError:
        raise FileFormatError(f"{path}: not a perfgate history store (its meta table is not key, value)") from None
    if meta.get("kind") != HISTORY_KIND:
        raise FileFormatError(f"{path}: not a perfgate history store (kind is "
                              f"{terminal(repr(meta.get('kind', 'missing')), 40)})")
    if version > HISTORY_SCHEMA_VERSION:
        raise FileFormatError(f"{path}: a history store of schema version {version} (written by perfgate "
                              f"{terminal(meta.get('created_by', 'unknown'), 20)}); this perfgate {__version__} reads "
                              f"up to version {HISTORY_SCHEMA_VERSION}: upgrade perfgate")
    if version < 1:
        raise FileFormatError(f"{path}: a perfgate history store without a schema version (user_version 0)")
    if deep:
        problems = [row[0] for row in conn.execute("PRAGMA quick_check(1)")]
        if problems != ["ok"]:
            raise FileFormatError(f"{path}: the history store is damaged ({_one_line(problems[0])})")
    return version


def _one_line(message: object, limit: int = 160) -> str:
    """SQLite's message on one line, shortened: an error is one line on stderr."""
    return terminal(" ".join(str(message).split()), limit)


def _refused(path: Path, exc: sqlite3.Error) -> FileFormatError:
    if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
        return FileFormatError(f"{path}: the history store stayed locked by another process; try again")
    if isinstance(exc, sqlite3.OperationalError) and "readonly" in str(exc):
        return FileFormatError(f"{path}: the history store cannot be written here ({_one_line(exc)})")
    return FileFormatError(f"{path}: not a perfgate history store, or a damaged one ({_one_line(exc)})")


@contextmanager
def _transaction(path: Path, *, write: bool, timeout_s: float) -> Iterator[sqlite3.Connection]:
    """A connection inside one transaction (``BEGIN IMMEDIATE`` to write): committed when
    the block ends, rolled back on any error. SQLite errors become one FileFormatError line."""
    conn = _connect(path, create=write, timeout_s=timeout_s)
    try:
        try:
            conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    except sqlite3.Error as exc:
        raise _refused(path, exc) from None
    finally:
        conn.close()


# --- recording -----------------------------------------------------------------------------


def _create(conn: sqlite3.Connection) -> None:
    for statement in SCHEMA.split(";"):
        if statement.strip():
            conn.execute(statement)
    conn.executemany("INSERT INTO meta (key, value) VALUES (?, ?)",
                     [("kind", HISTORY_KIND), ("schema_version", str(HISTORY_SCHEMA_VERSION)),
                      ("created_by", __version__), ("created_at", _utc_now())])
    conn.execute(f"PRAGMA user_version = {HISTORY_SCHEMA_VERSION}")


def _identity(result: RunResult) -> tuple[str, str | None, str, str]:
    return result.workload, result.environment.git_commit, result.created_at, result.environment.key()


def _counter_rows(counted: CounterSet) -> list[tuple[object, ...]]:
    """Per phase, and for the whole step (their sum), each of :data:`COUNTERS` per counted
    step; ``launches`` is None where kernel launches were not counted (the CPU)."""
    per_phase: dict[str, tuple[float | None, ...]] = {}
    for phase in PHASES:
        c = counted.phases[phase]
        totals = (c.op_calls, c.copy_calls, c.flops, c.sync_count, c.kernel_launches)
        per_phase[phase] = tuple(None if v is None else v / counted.steps for v in totals)
    columns = list(zip(*per_phase.values()))
    per_phase["step"] = tuple(None if None in values else sum(v for v in values if v is not None)
                              for values in columns)
    return [(phase, *values) for phase, values in per_phase.items()]


def _insert_run(conn: sqlite3.Connection, recording: Recording, recorded_at: str) -> int:
    """Insert one run with its repeats, medians and counters; its run id."""
    result, counted = recording.result, recording.counters
    env = result.environment
    cursor = conn.execute(
        "INSERT INTO runs (workload, workload_version, git_commit, dirty, branch, created_at, environment_key, "
        "device, design, perfgate_version, recorded_at, counted_steps) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (result.workload, result.workload_version, env.git_commit,
         None if env.git_dirty is None else int(env.git_dirty), recording.branch, result.created_at, env.key(),
         result.device, recording.design, result.perfgate_version, recorded_at,
         None if counted is None else counted.steps))
    run_id = int(cursor.lastrowid or 0)
    for repeat in result.repeats:
        if not sum(repeat.phases_ms["step"]) > 0:
            raise FileFormatError(f"{result.workload}: repeat {repeat.index} has no step time; nothing was recorded")
        conn.execute("INSERT INTO repeats (run_id, repeat, block, samples_per_s, peak_memory_bytes) "
                     "VALUES (?, ?, ?, ?, ?)",
                     (run_id, repeat.index, repeat.block, repeat.samples_per_s, repeat.peak_memory_bytes))
        medians, shares = repeat.medians_ms, repeat.shares
        conn.executemany("INSERT INTO medians (run_id, repeat, phase, median_ms, share) VALUES (?, ?, ?, ?, ?)",
                         [(run_id, repeat.index, row, medians[row], shares[row]) for row in ROWS])
    if counted is not None:
        conn.executemany(f"INSERT INTO counters (run_id, phase, {', '.join(COUNTERS)}) VALUES (?, ?, ?, ?, ?, ?, ?)",
                         [(run_id, *row) for row in _counter_rows(counted)])
    return run_id


def _duplicate(conn: sqlite3.Connection, result: RunResult) -> int | None:
    workload, commit, created_at, key = _identity(result)
    row = conn.execute("SELECT run_id FROM runs WHERE workload = ? AND ifnull(git_commit, '') = ? "
                       "AND created_at = ? AND environment_key = ?",
                       (workload, commit or "", created_at, key)).fetchone()
    return None if row is None else int(row[0])


def record(path: Path, recordings: Sequence[Recording], *, timeout_s: float = BUSY_TIMEOUT_S) -> list[int]:
    """Append ``recordings`` to the store at ``path`` (created when missing or empty) in one
    transaction; their run ids. A run already recorded (the same workload, commit,
    ``created_at`` and environment key), or two of them in ``recordings``, is a
    FileFormatError and nothing is written; so is a run with a value
    :func:`check_recording` refuses, and a store that is not a perfgate history, is
    damaged, or is of a newer schema."""
    path = Path(path)
    if not recordings:
        raise UsageError("nothing to record")
    seen: set[tuple[str, str | None, str, str]] = set()
    for r in recordings:
        try:
            check_recording(r)
        except ValueError as exc:
            raise FileFormatError(f"{terminal(r.result.workload, 64)}: {exc}; nothing was recorded") from None
        if _identity(r.result) in seen:
            raise UsageError(f"{r.result.workload}: given twice; nothing was recorded")
        seen.add(_identity(r.result))
    recorded_at = _utc_now()
    with _transaction(path, write=True, timeout_s=timeout_s) as conn:
        if _check(conn, path, deep=True) == 0:
            _create(conn)
        for r in recordings:
            existing = _duplicate(conn, r.result)
            if existing is not None:
                commit = (r.result.environment.git_commit or "unknown")[:12]
                raise FileFormatError(f"{path}: {r.result.workload} of commit {commit} measured at "
                                      f"{r.result.created_at} on {r.result.environment.key()} is already "
                                      f"recorded (run {existing}); nothing was recorded")
        try:
            return [_insert_run(conn, r, recorded_at) for r in recordings]
        except sqlite3.IntegrityError as exc:  # a constraint of the schema (the checks above catch duplicates)
            raise FileFormatError(f"{path}: the store refused a run ({_one_line(exc)}); nothing was "
                                  "recorded") from None


# --- reading -------------------------------------------------------------------------------


@dataclass(frozen=True)
class HistoryRows:
    """What :func:`read_rows` returns: the store's meta table and its rows (:data:`COLUMNS`),
    sorted by date, run id, repeat and phase name, and the runs left out (``skipped``: one
    line per run, naming it and its first unreadable value)."""

    meta: Mapping[str, str]
    columns: tuple[str, ...]
    rows: list[tuple[object, ...]]
    skipped: tuple[str, ...] = ()


def _one_of(choices: Sequence[str]) -> Callable[[object], None]:
    def check(value: object) -> None:
        if value not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}, got {terminal(repr(value), 40)}")
    return check


_READ_CHECKS: dict[str, Callable[[object], object]] = {
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
    "repeat": lambda v: _integer(v, 0, MAX_INDEX),
    "block": lambda v: _integer(v, 0, MAX_INDEX, optional=True),
    "phase": _one_of(ROWS),
    "median_ms": lambda v: _number(v),
    "share": lambda v: _number(v),
    "samples_per_s": lambda v: _number(v),
    "peak_memory_bytes": lambda v: _integer(v, 0, MAX_NUMBER, optional=True),
    **{c: (lambda v: _number(v, optional=True)) for c in COUNTERS},
}
"""Per column of :data:`COLUMNS`, what a readable value is (what ``record`` stores)."""
assert tuple(_READ_CHECKS) == COLUMNS


def _readable(path: Path, rows: list[tuple[object, ...]]) -> tuple[list[tuple[object, ...]], tuple[str, ...]]:
    """``rows`` less those of the runs with an unreadable value, and one line per such run."""
    bad: dict[object, str] = {}
    readable: set[tuple[int, object]] = set()  # (column, value) pairs checked: a run's values repeat on its rows
    for row in rows:
        run_id = row[0]
        if run_id in bad:
            continue
        for i, (column, value, check) in enumerate(zip(COLUMNS, row, _READ_CHECKS.values())):
            if (i, value) in readable:
                continue
            try:
                check(value)
            except ValueError as exc:
                bad[run_id] = (f"{path}: run {terminal(repr(run_id), 24)} ({terminal(str(row[7]), 64)}) left out: "
                               f"{'created_at' if column == 'date' else column}: {exc}")
                break
            readable.add((i, value))
    if not bad:
        return rows, ()
    return [row for row in rows if row[0] not in bad], tuple(bad.values())


def read_rows(path: Path, *, timeout_s: float = BUSY_TIMEOUT_S) -> HistoryRows:
    """Every recorded repeat's rows, one per run × repeat × row of ``ROWS``, with the
    counters per step of the runs that have them (None elsewhere). The store is checked
    as :func:`record` checks it (without the page-by-page check) and never written. A run
    with a value ``record`` would not have stored is left out and named in ``skipped``."""
    path = Path(path)
    with _transaction(path, write=False, timeout_s=timeout_s) as conn:
        if _check(conn, path, deep=False) == 0:
            raise FileFormatError(f"{path}: an empty history store: no run recorded yet")
        rows = conn.execute(_READ).fetchall()
        meta = _meta(conn)
    rows, skipped = _readable(path, rows)
    return HistoryRows(meta, COLUMNS, rows, skipped)


def write_export(path: Path, data: bytes) -> None:
    """Write an exported table to ``path`` atomically (a temporary file beside it, then a
    rename): a failure leaves no partial file and the old one, if any, as it was; one
    UsageError line when the path cannot be written."""
    path = Path(path)
    try:
        write_bytes_atomic(path, data)
    except OSError as exc:
        raise UsageError(f"{path}: cannot write there: {exc.strerror or exc}") from None
