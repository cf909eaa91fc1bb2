"""The history store: every recorded run of every workload, in an SQLite file or on PostgreSQL.

``perfgate history record`` appends the runs of a results folder (one run per workload:
its identity, the runner that recorded it, and per repeat the time per step, the median
and the share of each row of :data:`perfgate.model.result.ROWS`, with counters per step
where a counted run lies beside the result) in ONE transaction. A record that fails, or a
process killed before the commit, leaves the store as it was (SQLite's rollback journal
puts it back when the store is next opened; PostgreSQL drops the open transaction). Two
processes recording at once take turns: the second waits for the first's commit
(SQLite's busy timeout, PostgreSQL's advisory lock), and a PostgreSQL transaction the
server ends with a serialization failure is run again.

Where the store is, and what differs between the two engines, is
:mod:`perfgate.store.history_sql`: a path is an SQLite file, a ``postgresql://`` URL a
server; one schema and one set of statements serve both.

Every value ``record`` stores is checked first
(:func:`perfgate.store.history_values.check_recording`): ``created_at`` is an ISO 8601
time with a timezone, from 2000 to at most a day ahead of the clock; the names, commit
and versions are short one-line strings; the numbers finite and bounded. A run that
fails is refused with one line naming the field, and nothing is recorded. A run
already recorded (workload, commit, ``created_at``, environment key) is refused; the
unique index refuses it too.

The store is schema-versioned (:data:`HISTORY_SCHEMA_VERSION`): the ``meta`` table (key,
value) holds ``kind = perfgate.history``, ``schema_version``, the version that created
it and when; SQLite's ``PRAGMA user_version`` holds the version too (what perfgate 0.1
reads). A store of a newer schema, a file that is not an SQLite database, a database of
something else, or a damaged store is refused with one :class:`FileFormatError` line
before anything is written. A store of an older schema is brought forward by
:func:`migrate` (``perfgate history migrate``), and by ``record`` in its own transaction;
readers read it as it is and never write (a hot journal left by a killed recorder is
rolled back, which restores the file as it was before that recording).

Reading checks every row as ``record`` would have stored it (a store edited by hand, or
written by a perfgate that checked less, may hold a ``created_at`` of "yesterday" or of
the year 9999; :mod:`perfgate.store.history_values` says what each column may hold): a
run with a row that is not is left out whole, and :attr:`HistoryRows.skipped` names it,
one line per run, for the command to show; the other runs are read as usual.

:func:`copy` moves a whole store from one location to another (SQLite into PostgreSQL and
back), in one transaction on the destination, and checks that each table holds as many
rows as the source's. The pandas table built from :func:`read_rows` is
``perfgate.analysis.history``.
"""

from __future__ import annotations

import os
import socket
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TypeVar

from perfgate.model.counters import CounterSet
from perfgate.model.errors import FileFormatError, UsageError
from perfgate.model.manifest import DESIGNS
from perfgate.model.result import ROWS, RunResult
from perfgate.model.version import __version__
from perfgate.model.workload import PHASES
from perfgate.store.history_sql import (
    BUSY_TIMEOUT_S,
    HISTORY_KIND,
    HISTORY_SCHEMA_VERSION,
    KEYS,
    MIGRATIONS,
    POSTGRES,
    SCHEMA,
    SQLITE,
    TABLES,
    Location,
    Tx,
    one_line,
    parse_location,
    sqlite_location,
    transaction,
)
from perfgate.store.history_values import (
    COLUMNS,
    COUNTERS,
    MAX_TEXT,
    Recording,
    check_recording,
    readable,
    recorded_gpu_model,
)
from perfgate.store.jsonfile import write_bytes_atomic
from perfgate.store.untrusted_folders import load_measured
from perfgate.text.inert import terminal

__all__ = ["BUSY_TIMEOUT_S", "HISTORY_KIND", "HISTORY_SCHEMA_VERSION", "HistoryRows", "Location", "copy",
           "location_of", "migrate", "read_rows", "reading", "record", "recordings_of", "runner_name", "write_export"]

T = TypeVar("T")

_READ = f"""
SELECT r.run_id, r.recorded_at, r.created_at, r.git_commit, r.dirty, r.branch, r.design, r.workload,
       r.workload_version, r.device, r.environment_key, r.perfgate_version, {{runner}}, p.repeat, p.block, m.phase,
       {{per_step}}, m.median_ms, m.share, p.samples_per_s, p.peak_memory_bytes, {", ".join(f"c.{c}" for c in COUNTERS)}
FROM runs r
JOIN repeats p ON p.run_id = r.run_id
JOIN {{phase_times}} m ON m.run_id = p.run_id AND m.repeat = p.repeat
LEFT JOIN counters c ON c.run_id = m.run_id AND c.phase = m.phase
ORDER BY r.run_id, p.repeat, m.phase
"""
READS = {
    2: _READ.format(runner="r.runner, r.gpu_model, r.gpu_uuid", per_step="m.per_step_ms", phase_times="phase_times"),
    1: _READ.format(runner="NULL, NULL, NULL", per_step="NULL", phase_times="medians"),
}
"""The read of each schema version a reader reads as it is (version 1: no time per step,
no runner)."""
assert set(READS) == set(range(1, HISTORY_SCHEMA_VERSION + 1))


def runner_name() -> str | None:
    """The runner recording: GitHub's ``RUNNER_NAME`` when set, else this machine's host name."""
    name = os.environ.get("RUNNER_NAME", "").strip() or socket.gethostname().strip()
    return terminal(name, MAX_TEXT) or None


def _utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


# --- the runs of a results folder ----------------------------------------------------------


def _design_of(result: RunResult) -> str:
    return "paired" if any(r.block is not None for r in result.repeats) else "stored"


def recordings_of(directory: Path, *, design: str | None = None, branch: str | None = None,
                  runner: str | None = None) -> list[Recording]:
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
        recording = Recording(result, counted, found, branch, runner)
        try:
            check_recording(recording)
        except ValueError as exc:
            raise FileFormatError(f"{Path(directory) / f'{name}.json'}: {exc}; nothing was recorded") from None
        out.append(recording)
    return out


# --- opening and checking the store --------------------------------------------------------


def location_of(store: Location | Path | str) -> Location:
    """``store`` as a :class:`Location`: a Path is an SQLite file, a string a path or a URL
    (:func:`perfgate.store.history_sql.parse_location`)."""
    if isinstance(store, Location):
        return store
    if isinstance(store, Path):
        return sqlite_location(store)
    return parse_location(store, origin="the history store")


def _meta(tx: Tx) -> dict[str, str]:
    return {str(k): str(v) for k, v in tx.execute("SELECT key, value FROM meta")}


def _check(tx: Tx, *, deep: bool) -> int:
    """The store's schema version (0: an empty database, a store to create), after
    checking that it is a perfgate history this perfgate can read; inside the caller's
    transaction. ``deep`` adds SQLite's ``quick_check`` of every page (before a write)."""
    where, sqlite = tx.location, tx.dialect is SQLITE
    tables = tx.tables()
    version = SQLITE.version(tx) if sqlite else 0
    if version == 0 and not tables:
        return 0
    if "meta" not in tables:
        kind = "an SQLite database" if sqlite else "a PostgreSQL schema with tables but"
        raise FileFormatError(f"{where}: not a perfgate history store ({kind} without its meta table)")
    bad_query: tuple[type[BaseException], ...] = (sqlite3.OperationalError, *_pg_errors())
    try:
        meta = _meta(tx)
    except bad_query:
        raise FileFormatError(f"{where}: not a perfgate history store (its meta table is not key, value)") from None
    if meta.get("kind") != HISTORY_KIND:
        raise FileFormatError(f"{where}: not a perfgate history store (kind is "
                              f"{terminal(repr(meta.get('kind', 'missing')), 40)})")
    if not sqlite:
        version = POSTGRES.version(tx)
    if version > HISTORY_SCHEMA_VERSION:
        raise FileFormatError(f"{where}: a history store of schema version {version} (written by perfgate "
                              f"{terminal(meta.get('created_by', 'unknown'), 20)}); this perfgate {__version__} reads "
                              f"up to version {HISTORY_SCHEMA_VERSION}: upgrade perfgate")
    if version < 1:
        raise FileFormatError(f"{where}: a perfgate history store without a schema version (user_version 0)")
    if deep and sqlite:
        problems = [row[0] for row in tx.execute("PRAGMA quick_check(1)")]
        if problems != ["ok"]:
            raise FileFormatError(f"{where}: the history store is damaged ({one_line(problems[0])})")
    return version


def _pg_errors() -> tuple[type[BaseException], ...]:
    """psycopg's error for a bad query, when psycopg is there (it is only on a PostgreSQL store)."""
    try:
        import psycopg
    except ImportError:
        return ()
    return (psycopg.errors.UndefinedColumn,)


# --- creating and upgrading ----------------------------------------------------------------


def _set_meta(tx: Tx, key: str, value: str) -> None:
    tx.execute("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
               (key, value))


def _create(tx: Tx) -> None:
    for statement in SCHEMA.format(run_id=tx.dialect.run_id, clustered=tx.dialect.clustered).split(";"):
        if statement.strip():
            tx.execute(statement)
    tx.executemany("INSERT INTO meta (key, value) VALUES (?, ?)",
                   [("kind", HISTORY_KIND), ("schema_version", str(HISTORY_SCHEMA_VERSION)),
                    ("created_by", __version__), ("created_at", _utc_now())])
    tx.set_version(HISTORY_SCHEMA_VERSION)


def _upgrade(tx: Tx, version: int) -> None:
    """Bring a store of schema ``version`` forward to :data:`HISTORY_SCHEMA_VERSION`, in the caller's transaction."""
    for target in range(version + 1, HISTORY_SCHEMA_VERSION + 1):
        for statement in MIGRATIONS[target]:
            tx.execute(statement)
        _set_meta(tx, f"upgraded_to_{target}", f"{_utc_now()} by perfgate {__version__}")
        tx.set_version(target)


def _ready(tx: Tx) -> int:
    """Inside a write transaction: the store checked and at the current schema (created
    when empty, upgraded when older); the version it was at before (0: created)."""
    version = _check(tx, deep=True)
    if version == 0:
        _create(tx)
    elif version < HISTORY_SCHEMA_VERSION:
        _upgrade(tx, version)
    return version


def migrate(store: Location | Path | str, *, timeout_s: float = BUSY_TIMEOUT_S) -> tuple[int, int]:
    """Create the store at ``store`` (when missing or empty) or bring it forward to the
    current schema, in one transaction; (the version before, the version now): (0, 2)
    created, (1, 2) upgraded, (2, 2) already current. A newer schema is refused."""
    location = location_of(store)
    before = transaction(location, write=True, timeout_s=timeout_s, body=_ready)
    return before, HISTORY_SCHEMA_VERSION


# --- recording -----------------------------------------------------------------------------


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
    columns = list(zip(*per_phase.values(), strict=True))
    per_phase["step"] = tuple(None if None in values else sum(v for v in values if v is not None)
                              for values in columns)
    return [(phase, *values) for phase, values in per_phase.items()]


def _insert_run(tx: Tx, recording: Recording, recorded_at: str) -> int:
    """Insert one run with its repeats, times per row and counters; its run id."""
    result, counted = recording.result, recording.counters
    env = result.environment
    gpu_model = recorded_gpu_model(result.device, env)
    run_id = tx.insert_id(
        "INSERT INTO runs (workload, workload_version, git_commit, dirty, branch, created_at, environment_key, "
        "device, design, perfgate_version, recorded_at, counted_steps, runner, gpu_model, gpu_uuid) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (result.workload, result.workload_version, env.git_commit,
         None if env.git_dirty is None else int(env.git_dirty), recording.branch, result.created_at, env.key(),
         result.device, recording.design, result.perfgate_version, recorded_at,
         None if counted is None else counted.steps, recording.runner, gpu_model, recording.gpu_uuid), "run_id")
    for repeat in result.repeats:
        if not sum(repeat.phases_ms["step"]) > 0:
            raise FileFormatError(f"{result.workload}: repeat {repeat.index} has no step time; nothing was recorded")
        tx.execute("INSERT INTO repeats (run_id, repeat, block, samples_per_s, peak_memory_bytes) "
                   "VALUES (?, ?, ?, ?, ?)",
                   (run_id, repeat.index, repeat.block, repeat.samples_per_s, repeat.peak_memory_bytes))
        per_step, medians, shares = repeat.per_step_ms, repeat.medians_ms, repeat.shares
        tx.executemany("INSERT INTO phase_times (run_id, repeat, phase, per_step_ms, median_ms, share) "
                       "VALUES (?, ?, ?, ?, ?, ?)",
                       [(run_id, repeat.index, row, per_step[row], medians[row], shares[row]) for row in ROWS])
    if counted is not None:
        tx.executemany(f"INSERT INTO counters (run_id, phase, {', '.join(COUNTERS)}) VALUES (?, ?, ?, ?, ?, ?, ?)",
                       [(run_id, *row) for row in _counter_rows(counted)])
    return run_id


def _duplicate(tx: Tx, result: RunResult) -> int | None:
    workload, commit, created_at, key = _identity(result)
    row = tx.execute("SELECT run_id FROM runs WHERE workload = ? AND coalesce(git_commit, '') = ? "
                     "AND created_at = ? AND environment_key = ?",
                     (workload, commit or "", created_at, key)).fetchone()
    return None if row is None else int(row[0])


def record(store: Location | Path | str, recordings: Sequence[Recording], *,
           timeout_s: float = BUSY_TIMEOUT_S) -> list[int]:
    """Append ``recordings`` to the store (created when missing or empty, brought forward
    when of an older schema) in one transaction; their run ids. A run already recorded
    (the same workload, commit, ``created_at`` and environment key), or two of them in
    ``recordings``, is a FileFormatError and nothing is written; so is a run with a value
    :func:`check_recording` refuses, and a store that is not a perfgate history, is
    damaged, or is of a newer schema."""
    location = location_of(store)
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

    def body(tx: Tx) -> list[int]:
        _ready(tx)
        for r in recordings:
            existing = _duplicate(tx, r.result)
            if existing is not None:
                commit = (r.result.environment.git_commit or "unknown")[:12]
                raise FileFormatError(f"{location}: {r.result.workload} of commit {commit} measured at "
                                      f"{r.result.created_at} on {r.result.environment.key()} is already "
                                      f"recorded (run {existing}); nothing was recorded")
        return [_insert_run(tx, r, recorded_at) for r in recordings]

    return transaction(location, write=True, timeout_s=timeout_s, body=body)


# --- copying a whole store -----------------------------------------------------------------


def copy(source: Location | Path | str, destination: Location | Path | str, *, replace: bool = False,
         timeout_s: float = BUSY_TIMEOUT_S) -> dict[str, int]:
    """Copy every run of ``source`` into ``destination`` (created when missing or empty),
    run ids kept, in one transaction on the destination; the rows per table copied. The
    destination must hold no run, unless ``replace`` (its runs are deleted first, in the
    same transaction). After the inserts each table of the destination is counted and
    must hold the source's rows, else nothing is written. The source must be at the
    current schema (``perfgate history migrate`` brings it there) and is only read."""
    src, dst = location_of(source), location_of(destination)
    if _same(src, dst):
        raise UsageError(f"{src}: the source and the destination are the same store")

    def read(tx: Tx) -> dict[str, list[tuple[object, ...]]]:
        version = _check(tx, deep=False)
        if version == 0:
            raise FileFormatError(f"{src}: an empty history store: nothing to copy")
        if version < HISTORY_SCHEMA_VERSION:
            raise FileFormatError(f"{src}: a history store of schema version {version}; bring it to version "
                                  f"{HISTORY_SCHEMA_VERSION} first (perfgate history migrate --history ...)")
        return {table: [tuple(row) for row in tx.execute(f"SELECT {', '.join(columns)} FROM {table} "
                                                         f"ORDER BY {KEYS[table]}")]
                for table, columns in TABLES.items()}

    data = transaction(src, write=False, timeout_s=timeout_s, body=read)
    if not data["runs"]:
        raise FileFormatError(f"{src}: an empty history store: nothing to copy")

    def write(tx: Tx) -> dict[str, int]:
        _ready(tx)
        held = int(tx.execute("SELECT count(*) FROM runs").fetchone()[0])
        if held and not replace:
            raise UsageError(f"{dst}: already holds {held} run(s); history copy writes into an empty store "
                             "(--replace deletes its runs first)")
        for table in reversed(TABLES):
            tx.execute(f"DELETE FROM {table}")
        for table, columns in TABLES.items():
            tx.executemany(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' for _ in columns)})",
                           data[table])
        if tx.dialect is POSTGRES:  # the next recorded run follows the copied ids
            tx.execute("SELECT setval(pg_get_serial_sequence('runs', 'run_id'), coalesce(max(run_id), 0) + 1, false) "
                       "FROM runs")
        counted = {table: int(tx.execute(f"SELECT count(*) FROM {table}").fetchone()[0]) for table in TABLES}
        expected = {table: len(rows) for table, rows in data.items()}
        if counted != expected:
            raise FileFormatError(f"{dst}: the copy holds {counted} rows, the source {expected}; nothing was copied")
        _set_meta(tx, "copied_from", f"{src.shown} at {_utc_now()}")
        return counted

    return transaction(dst, write=True, timeout_s=timeout_s, body=write)


def _same(a: Location, b: Location) -> bool:
    if a.path is not None and b.path is not None:
        return a.path.resolve() == b.path.resolve()
    return a.url is not None and a.url == b.url


# --- reading -------------------------------------------------------------------------------


@dataclass(frozen=True)
class HistoryRows:
    """What :func:`read_rows` returns: the store's meta table and its rows (:data:`COLUMNS`),
    in run id order (then repeat and phase name), and the runs left out (``skipped``: one
    line per run, naming it and its first unreadable value)."""

    meta: Mapping[str, str]
    columns: tuple[str, ...]
    rows: list[tuple[object, ...]]
    skipped: tuple[str, ...] = ()


def read_rows(store: Location | Path | str, *, timeout_s: float = BUSY_TIMEOUT_S) -> HistoryRows:
    """Every recorded repeat's rows, one per run × repeat × row of ``ROWS``, with the
    counters per step of the runs that have them (None elsewhere), in run id order. The
    store is checked as :func:`record` checks it (without the page-by-page check) and
    never written; a store of an older schema is read as it is (``per_step_ms`` and the
    runner None). A run with a value ``record`` would not have stored is left out and
    named in ``skipped``."""
    location = location_of(store)

    def read(tx: Tx, version: int) -> tuple[list[tuple[object, ...]], dict[str, str]]:
        if version == 0:
            raise FileFormatError(f"{location}: an empty history store: no run recorded yet")
        return [tuple(row) for row in tx.execute(READS[version])], _meta(tx)

    rows, meta = reading(location, read, timeout_s=timeout_s)
    rows, skipped = readable(location, rows)
    return HistoryRows(meta, COLUMNS, rows, skipped)


def reading(store: Location | Path | str, body: Callable[[Tx, int], T], *,
            timeout_s: float = BUSY_TIMEOUT_S) -> T:
    """``body(tx, version)`` in one read transaction on the store, after checking it as
    :func:`read_rows` does (``version`` 0: an empty database); the store is never written.
    Each reader of the store (:func:`read_rows`, ``perfgate.store.history_fleet``) opens
    it here."""
    return transaction(location_of(store), write=False, timeout_s=timeout_s,
                       body=lambda tx: body(tx, _check(tx, deep=False)))


def write_export(path: Path, data: bytes) -> None:
    """Write an exported table to ``path`` atomically (a temporary file beside it, then a
    rename): a failure leaves no partial file and the old one, if any, as it was; one
    UsageError line when the path cannot be written."""
    path = Path(path)
    try:
        write_bytes_atomic(path, data)
    except OSError as exc:
        raise UsageError(f"{path}: cannot write there: {exc.strerror or exc}") from None
