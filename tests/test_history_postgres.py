"""The history store's guarantees on both back ends: an SQLite file and a PostgreSQL server.

Every test marked with the ``backend`` fixture runs twice: on a new SQLite file and on a
new database of the session's throwaway PostgreSQL cluster (``tests/pg_server.py``: it
fails, not skips, when the server cannot start in CI). Then what only a URL brings:
schemes perfgate does not serve, passwords, ``PERFGATE_HISTORY_URL``; ``history migrate``
and ``history copy`` between the engines; and recorders on several processes at once.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from pg_server import PASSWORD, PREFIX, Server, raw, sweep_stale
from factories import ENV
from test_day_variation import run_at
from test_history import DAY1, DAY2, counted, one_error_line, result_of, results_dir, run_cli

from perfgate.analysis.history import load, run_series
from perfgate.model.errors import FileFormatError, UsageError
from perfgate.model.result import ROWS
from perfgate.store import history as store
from perfgate.store.history_sql import HISTORY_SCHEMA_VERSION, TABLES, mask
from perfgate.store.baselines import load_baseline
from perfgate.store.history_values import COLUMNS, Recording
from perfgate.store.results import save_result

Location = Path | str


def test_a_killed_sessions_cluster_is_swept_and_a_live_or_young_one_kept(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(done.stdout)  # its process has exited

    def cluster(name: str, pid: str | None, age_s: float) -> Path:
        folder = tmp_path / name
        (folder / "data").mkdir(parents=True)
        if pid is not None:
            (folder / "data" / "postmaster.pid").write_text(f"{pid}\n/tmp/x\n")
        then = time.time() - age_s
        os.utime(folder, (then, then))
        return folder

    dead = cluster(PREFIX + "dead", str(dead_pid), 7200)
    no_pid = cluster(PREFIX + "nopid", None, 7200)
    running = cluster(PREFIX + "running", str(os.getpid()), 7200)
    young = cluster(PREFIX + "young", None, 60)
    garbled = cluster(PREFIX + "garbled", "not a pid", 7200)
    other = cluster("someone-else", None, 7200)
    assert sweep_stale(tmp_path) == sorted([dead, no_pid])
    assert not dead.exists() and not no_pid.exists()
    assert all(f.is_dir() for f in (running, young, garbled, other))


def snapshot(location: Location) -> object:
    """Everything the store holds: the SQLite file's bytes, or every PostgreSQL table's rows."""
    if isinstance(location, Path):
        return hashlib.sha256(location.read_bytes()).hexdigest()
    tables = [r[0] for r in raw(location, "SELECT table_name FROM information_schema.tables "
                                          "WHERE table_schema = 'public' ORDER BY table_name")]
    return {t: sorted(map(repr, raw(location, f"SELECT * FROM {t}"))) for t in tables}


def record(location: Location, *results, **kwargs) -> list[int]:
    return store.record(location, [Recording(r, None, "stored", **kwargs) for r in results])


def shown(location: Location) -> str:
    return str(location) if isinstance(location, Path) else mask(location)


# --- the same guarantees on both ---------------------------------------------------------------


def test_a_recorded_run_reads_back_bit_for_bit(backend, tmp_path: Path, capsys) -> None:
    where = backend()
    first, second = result_of("tiny", commit="aaaa1111"), result_of("tiny", commit="bbbb2222", created_at=DAY2,
                                                                       scale=1.05, seed=1)
    folder = results_dir(tmp_path / "r1", first, counters=(counted("tiny"),))
    code, out, err = run_cli(capsys, "history", "record", "--results", str(folder), "--history", str(where),
                             "--branch", "main", "--runner", "gpu-runner-3")
    assert code == 0, err
    assert "run 1: tiny of aaaa1111, stored design, 5 repeats, with counters" in out
    assert err.strip() == f"perfgate: recorded 1 run(s) in {shown(where)}"
    assert record(where, second) == [2]
    df = load(where)
    assert len(df) == 2 * 5 * len(ROWS) and list(df["run_id"].drop_duplicates()) == [1, 2]
    for run_id, result in ((1, first), (2, second)):
        rows = df[df["run_id"] == run_id]
        for repeat in result.repeats:
            mine = rows[rows["repeat"] == repeat.index]
            assert dict(zip(mine["phase"].astype(str), mine["per_step_ms"], strict=True)) == repeat.per_step_ms
            assert dict(zip(mine["phase"].astype(str), mine["median_ms"], strict=True)) == repeat.medians_ms
            assert dict(zip(mine["phase"].astype(str), mine["share"], strict=True)) == repeat.shares
    assert set(df.loc[df["run_id"] == 1, "runner"].astype(str)) == {"gpu-runner-3"}
    assert set(df.loc[df["run_id"] == 1, "ops"].dropna()) >= {10.0}
    series = run_series(df, "tiny")
    assert list(series["statistic"]) == ["per_step", "per_step"]
    assert series["value_ms"].iloc[1] == pytest.approx(
        pd.Series([r.per_step_ms["step"] for r in second.repeats]).median())


def test_a_run_is_recorded_once_and_a_refused_record_writes_nothing(backend, tmp_path: Path, capsys) -> None:
    where = backend()
    record(where, result_of("tiny"))
    before = snapshot(where)
    folder = results_dir(tmp_path / "again", result_of("tiny"), result_of("fresh"))
    code, out, err = run_cli(capsys, "history", "record", "--results", str(folder), "--history", str(where))
    assert code == 2 and out == ""
    line = one_error_line(err)
    assert "tiny of commit 0123abcd measured at 2026-11-01T10:00:00+00:00" in line
    assert "already recorded (run 1); nothing was recorded" in line
    assert snapshot(where) == before
    # the unique key refuses it too, an unknown commit included
    columns = ("workload, workload_version, git_commit, created_at, environment_key, device, design, "
               "perfgate_version, recorded_at")
    for statements in ([f"INSERT INTO runs ({columns}) SELECT {columns} FROM runs"],
                       ["UPDATE runs SET git_commit = NULL",
                        f"INSERT INTO runs ({columns}) SELECT {columns} FROM runs"]):
        with pytest.raises(Exception, match="(?i)unique"):
            raw(where, *statements)


def test_a_record_that_fails_half_way_leaves_the_store_as_it_was(backend, monkeypatch) -> None:
    where = backend()
    record(where, result_of("tiny"))
    before = snapshot(where)
    insert = store._insert_run

    def failing(tx, recording, recorded_at):
        if recording.result.workload == "second":  # after the first run's rows went in
            raise FileFormatError("second: refused on purpose; nothing was recorded")
        return insert(tx, recording, recorded_at)

    monkeypatch.setattr(store, "_insert_run", failing)
    with pytest.raises(FileFormatError, match="on purpose"):
        record(where, result_of("first", created_at=DAY2), result_of("second", created_at=DAY2))
    assert snapshot(where) == before
    assert set(load(where)["workload"].astype(str)) == {"tiny"}


def _newer(where: Location) -> None:
    if isinstance(where, Path):
        raw(where, f"PRAGMA user_version = {HISTORY_SCHEMA_VERSION + 1}")
    raw(where, f"UPDATE meta SET value = '{HISTORY_SCHEMA_VERSION + 1}' WHERE key = 'schema_version'")


def _foreign(where: Location) -> None:
    raw(where, "DROP TABLE counters", "DROP TABLE phase_times", "DROP TABLE repeats", "DROP TABLE runs",
        "DROP TABLE meta", "CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT)")


def _other_kind(where: Location) -> None:
    raw(where, "UPDATE meta SET value = 'someone.else' WHERE key = 'kind'")


@pytest.mark.parametrize(("spoil", "message"), [
    (_newer, f"a history store of schema version {HISTORY_SCHEMA_VERSION + 1} (written by perfgate "),
    (_foreign, "without its meta table)"),
    (_other_kind, "not a perfgate history store (kind is 'someone.else')"),
])
def test_a_store_perfgate_cannot_use_is_refused_untouched(backend, tmp_path: Path, capsys, spoil,
                                                          message: str) -> None:
    where = backend()
    record(where, result_of("tiny"))
    spoil(where)
    before = snapshot(where)
    folder = results_dir(tmp_path / "next", result_of("tiny", created_at=DAY2))
    for argv in (["record", "--results", str(folder)], ["export", "--format", "csv"], ["migrate"]):
        code, out, err = run_cli(capsys, "history", *argv, "--history", str(where))
        assert code == 2 and out == ""
        line = one_error_line(err)
        assert shown(where) in line and message in line, line
        if spoil is _newer:
            assert "upgrade perfgate" in line
        assert snapshot(where) == before


def test_readers_name_a_bad_run_and_read_the_others(backend, capsys) -> None:
    where = backend()
    record(where, result_of("tiny"), result_of("tiny", created_at=DAY2, commit="c2"))
    raw(where, "UPDATE runs SET created_at = 'yesterday' WHERE run_id = 2")
    before = snapshot(where)
    code, out, err = run_cli(capsys, "history", "export", "--format", "json", "--history", str(where))
    assert code == 0
    (warning,) = err.splitlines()
    assert warning.startswith("perfgate: warning: ") and "run 2 (tiny) left out: created_at: 'yesterday'" in warning
    assert set(pd.read_json(io.StringIO(out))["run_id"]) == {1}
    assert snapshot(where) == before


def test_migrate_creates_then_says_it_is_current(backend, capsys) -> None:
    where = backend()
    code, _, err = run_cli(capsys, "history", "migrate", "--history", str(where))
    assert code == 0 and f"created the history store at {shown(where)} (schema version {HISTORY_SCHEMA_VERSION})" in err
    assert dict(raw(where, "SELECT key, value FROM meta"))["schema_version"] == str(HISTORY_SCHEMA_VERSION)
    code, _, err = run_cli(capsys, "history", "migrate", "--history", str(where))
    assert code == 0 and f"is at schema version {HISTORY_SCHEMA_VERSION} already" in err
    assert load(where).empty  # a store with no run yet: an empty table, the columns documented
    assert list(load(where).columns) == list(COLUMNS)
    code, out, err = run_cli(capsys, "history", "changes", "--history", str(where))
    assert code == 2 and out == "" and one_error_line(err).endswith(f"{shown(where)}: no run recorded yet")


# --- a version-1 SQLite store brought forward ---------------------------------------------------

V1_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL);
CREATE TABLE runs (run_id INTEGER PRIMARY KEY, workload TEXT NOT NULL, workload_version INTEGER NOT NULL,
    git_commit TEXT, dirty INTEGER CHECK (dirty IN (0, 1)), branch TEXT, created_at TEXT NOT NULL,
    environment_key TEXT NOT NULL, device TEXT NOT NULL, design TEXT NOT NULL CHECK (design IN ('paired', 'stored')),
    perfgate_version TEXT NOT NULL, recorded_at TEXT NOT NULL, counted_steps INTEGER);
CREATE UNIQUE INDEX runs_once ON runs (workload, ifnull(git_commit, ''), created_at, environment_key);
CREATE TABLE repeats (run_id INTEGER NOT NULL REFERENCES runs (run_id), repeat INTEGER NOT NULL, block INTEGER,
    samples_per_s REAL NOT NULL, peak_memory_bytes INTEGER, PRIMARY KEY (run_id, repeat)) WITHOUT ROWID;
CREATE TABLE medians (run_id INTEGER NOT NULL, repeat INTEGER NOT NULL, phase TEXT NOT NULL,
    median_ms REAL NOT NULL, share REAL NOT NULL, PRIMARY KEY (run_id, repeat, phase),
    FOREIGN KEY (run_id, repeat) REFERENCES repeats (run_id, repeat)) WITHOUT ROWID;
CREATE TABLE counters (run_id INTEGER NOT NULL REFERENCES runs (run_id), phase TEXT NOT NULL, ops REAL,
    copies REAL, flops REAL, syncs REAL, launches REAL, PRIMARY KEY (run_id, phase)) WITHOUT ROWID;
"""
"""Schema version 1 as perfgate 0.1 created it."""


def version_one_store(db: Path, *results) -> Path:
    """A store as the version-1 perfgate recorded it: medians and shares, no time per step."""
    conn = sqlite3.connect(db, isolation_level=None)
    conn.executescript(V1_SCHEMA)
    conn.executemany("INSERT INTO meta VALUES (?, ?)", [("kind", "perfgate.history"), ("schema_version", "1"),
                                                         ("created_by", "0.1.0"), ("created_at", DAY1)])
    conn.execute("PRAGMA user_version = 1")
    for run_id, r in enumerate(results, 1):
        conn.execute("INSERT INTO runs VALUES (?, ?, 1, ?, 0, 'main', ?, ?, 'cpu', 'stored', '0.1.0', ?, NULL)",
                     (run_id, r.workload, r.environment.git_commit, r.created_at, r.environment.key(), r.created_at))
        for repeat in r.repeats:
            conn.execute("INSERT INTO repeats VALUES (?, ?, NULL, ?, ?)",
                         (run_id, repeat.index, repeat.samples_per_s, repeat.peak_memory_bytes))
            conn.executemany("INSERT INTO medians VALUES (?, ?, ?, ?, ?)",
                             [(run_id, repeat.index, row, repeat.medians_ms[row], repeat.shares[row]) for row in ROWS])
    conn.close()
    return db


def test_a_version_1_store_is_read_as_it_is_and_migrated_with_its_medians_kept(tmp_path: Path, capsys) -> None:
    old = [result_of("tiny", commit=f"c{i}", created_at=f"2026-10-0{i + 1}T10:00:00+00:00", seed=i) for i in range(3)]
    db = version_one_store(tmp_path / "h.sqlite", *old)
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    as_read = load(db)  # read as it is, never written
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before
    assert as_read["per_step_ms"].isna().all() and as_read["runner"].isna().all()
    assert run_series(as_read, "tiny").empty  # no time per step in a version-1 run
    assert len(run_series(as_read, "tiny", statistic="median")) == 3
    code, _, err = run_cli(capsys, "history", "changes", "--history", str(db))
    assert code == 2 and "no run in" in one_error_line(err) and "--statistic median" in err

    code, _, err = run_cli(capsys, "history", "migrate", "--history", str(db))
    assert code == 0 and f"brought the history store at {db} from schema version 1 to {HISTORY_SCHEMA_VERSION}" in err
    assert raw(db, "PRAGMA user_version") == [(HISTORY_SCHEMA_VERSION,)]
    migrated = load(db)
    pd.testing.assert_series_equal(migrated["median_ms"], as_read["median_ms"])  # the median data kept
    assert migrated["per_step_ms"].isna().all()
    record(db, result_of("tiny", commit="c9", created_at=DAY2))  # the next run has both
    df = load(db)
    assert df.loc[df["run_id"] == 4, "per_step_ms"].notna().all()
    assert len(run_series(df, "tiny")) == 1 and len(run_series(df, "tiny", statistic="median")) == 4


def test_record_brings_a_version_1_store_forward_in_its_transaction(tmp_path: Path) -> None:
    db = version_one_store(tmp_path / "h.sqlite", result_of("tiny"))
    # a run that is refused: neither the run nor the upgrade is written
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    with pytest.raises(FileFormatError, match="already recorded"):
        record(db, result_of("tiny"))
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before
    assert record(db, result_of("tiny", created_at=DAY2)) == [2]
    assert raw(db, "SELECT value FROM meta WHERE key = 'schema_version'") == [(str(HISTORY_SCHEMA_VERSION),)]


# --- copy: SQLite into PostgreSQL, and back ------------------------------------------------------


def test_copy_moves_a_history_into_postgresql_and_back_counted(tmp_path: Path, postgres: Server, capsys) -> None:
    db = tmp_path / "h.sqlite"
    record(db, result_of("tiny"), result_of("small"))
    store.record(db, [Recording(result_of("tiny", created_at=DAY2, commit="c2"), counted("tiny"), "stored",
                                "main", "runner-1")])
    url = postgres.url(postgres.new_database())
    code, _, err = run_cli(capsys, "history", "copy", str(db), url)
    assert code == 0, err
    counts = {t: raw(db, f"SELECT count(*) FROM {t}")[0][0] for t in TABLES}
    assert counts == {"runs": 3, "repeats": 15, "phase_times": 105, "counters": 6}
    assert f"copied 3 run(s) from {db} to {mask(url)}" in err and "105 phase_times" in err
    assert {t: raw(url, f"SELECT count(*) FROM {t}")[0][0] for t in TABLES} == counts
    pd.testing.assert_frame_equal(load(url), load(db))  # run ids, times, text: all as they were
    # the next run recorded on the server follows the copied ids
    assert record(url, result_of("later", created_at=DAY2)) == [4]

    back = tmp_path / "back.sqlite"
    code, _, err = run_cli(capsys, "history", "copy", url, str(back))
    assert code == 0, err
    pd.testing.assert_frame_equal(load(back), load(url))

    # a destination with runs is refused, whole, unless --replace
    before = snapshot(url)
    code, out, err = run_cli(capsys, "history", "copy", str(db), url)
    assert code == 2 and out == ""
    assert "already holds 4 run(s); history copy writes into an empty store (--replace" in one_error_line(err)
    assert snapshot(url) == before
    code, _, err = run_cli(capsys, "history", "copy", str(db), url, "--replace")
    assert code == 0, err
    pd.testing.assert_frame_equal(load(url), load(db))


def test_a_copy_the_server_refuses_a_value_of_writes_nothing(tmp_path: Path, postgres: Server, capsys) -> None:
    db = tmp_path / "h.sqlite"
    record(db, result_of("tiny"), result_of("small"))
    raw(db, "UPDATE phase_times SET median_ms = 'fast' WHERE run_id = 2 AND phase = 'forward'")  # by hand
    url = postgres.url(postgres.new_database())
    code, out, err = run_cli(capsys, "history", "copy", str(db), url)
    assert code == 2 and out == ""
    assert f"{mask(url)}: the store refused a value (" in one_error_line(err) and "nothing was written" in err
    assert snapshot(url) == {}  # not even the tables


@pytest.mark.parametrize(("argv", "message"), [
    (["{tmp}/none.sqlite", "{tmp}/to.sqlite"], "no history store there"),
    (["{tmp}/h.sqlite", "{tmp}/h.sqlite"], "the source and the destination are the same store"),
    (["{tmp}/h.sqlite", "mysql://db/perf"], "not at a mysql:// URL"),
    (["{tmp}/old.sqlite", "{tmp}/to.sqlite"], "bring it to version 2 first (perfgate history migrate"),
])
def test_bad_copy_input_is_one_line(tmp_path: Path, capsys, argv: list[str], message: str) -> None:
    record(tmp_path / "h.sqlite", result_of("tiny"))
    version_one_store(tmp_path / "old.sqlite", result_of("tiny"))
    code, out, err = run_cli(capsys, "history", "copy", *(a.format(tmp=tmp_path) for a in argv))
    assert code == 2 and out == ""
    assert message in one_error_line(err)
    assert not (tmp_path / "to.sqlite").exists()


# --- locations: URLs perfgate does not serve, passwords, the environment ---------------------------


@pytest.mark.parametrize("location", ["postgres+psycopg://db/perf", "mysql://user@db/perf", "http://example.com/h",
                                      "sqlite:///tmp/h.sqlite", "file:///tmp/h.sqlite", "s3:/bucket/h.sqlite"])
def test_a_url_of_a_scheme_perfgate_does_not_serve_is_refused(tmp_path: Path, capsys, monkeypatch,
                                                             location: str) -> None:
    monkeypatch.chdir(tmp_path)
    folder = results_dir(tmp_path / "r", result_of("tiny"))
    code, out, err = run_cli(capsys, "history", "record", "--results", str(folder), "--history", location)
    assert code == 2 and out == ""
    assert "perfgate keeps its history in an SQLite file (give its path) or on a PostgreSQL server" in \
        one_error_line(err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]  # no folder named after the scheme
    # from the settings and from the environment alike
    (tmp_path / "pyproject.toml").write_text(f'[tool.perfgate]\nhistory = "{location}"\n')
    code, _, err = run_cli(capsys, "history", "record", "--results", str(folder))
    assert code == 2 and "pyproject.toml [tool.perfgate] history: " in one_error_line(err)
    monkeypatch.setenv("PERFGATE_HISTORY_URL", location)
    code, _, err = run_cli(capsys, "history", "export", "--format", "csv")
    assert code == 2 and one_error_line(err).startswith("perfgate: error: PERFGATE_HISTORY_URL: ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pyproject.toml", "r"]


@pytest.mark.parametrize("location", ["postgresql:/db.internal/perf", "postgres:/perf"])
def test_a_postgresql_url_a_slash_short_is_refused_not_made_a_folder(tmp_path: Path, capsys, monkeypatch,
                                                                     location: str) -> None:
    monkeypatch.chdir(tmp_path)
    folder = results_dir(tmp_path / "r", result_of("tiny"))
    code, out, err = run_cli(capsys, "history", "record", "--results", str(folder), "--history", location)
    assert code == 2 and out == ""
    assert "not a PostgreSQL URL (write postgres" in one_error_line(err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]


def test_an_unreachable_server_is_one_line_and_no_local_file(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    folder = results_dir(tmp_path / "r", result_of("tiny"))
    url = f"postgresql://perfgate@/perf?host={tmp_path}/no-server&connect_timeout=2"
    code, out, err = run_cli(capsys, "history", "record", "--results", str(folder), "--history", url)
    assert code == 2 and out == ""
    assert f"{url}: cannot connect to the history store (" in one_error_line(err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]


def test_a_password_comes_from_the_environment_and_is_never_shown(tmp_path: Path, postgres: Server, capsys,
                                                                  monkeypatch) -> None:
    database = postgres.new_database()
    folder = results_dir(tmp_path / "r", result_of("tiny"))
    with_password = f"postgresql://recorder:{PASSWORD}@/{database}?host={postgres.socket}"
    # on the command line or in the settings: refused before anything is tried, the password masked
    for argv in (["--history", with_password],
                 ["--history", f"postgresql://recorder@/{database}?host={postgres.socket}&password={PASSWORD}"]):
        code, out, err = run_cli(capsys, "history", "record", "--results", str(folder), *argv)
        assert code == 2 and out == "" and PASSWORD not in err
        assert "a password in the URL is refused here; give it in PGPASSWORD" in one_error_line(err)
        assert "recorder:***@" in err or "password=***" in err
    # in PERFGATE_HISTORY_URL (a CI secret): used, and no message holds it
    monkeypatch.setenv("PERFGATE_HISTORY_URL", with_password)
    code, out, err = run_cli(capsys, "history", "record", "--results", str(folder), "--runner", "r1")
    assert code == 0, err
    assert set(load()["runner"].astype(str)) == {"r1"}  # in Python: load() reads PERFGATE_HISTORY_URL
    assert PASSWORD not in out + err and f"recorded 1 run(s) in postgresql://recorder:***@/{database}" in err
    code, out, err = run_cli(capsys, "history", "record", "--results", str(folder))
    assert code == 2 and PASSWORD not in err and "recorder:***@" in one_error_line(err)
    # a wrong one: the server's refusal, one line, masked
    monkeypatch.setenv("PERFGATE_HISTORY_URL", with_password.replace(PASSWORD, PASSWORD[::-1]))
    code, out, err = run_cli(capsys, "history", "export", "--format", "csv")
    assert code == 2 and PASSWORD[::-1] not in err
    assert "cannot connect to the history store" in one_error_line(err) and "password authentication failed" in err
    # from PGPASSWORD, with a URL that holds none: --history beats the environment's URL
    monkeypatch.setenv("PGPASSWORD", PASSWORD)
    code, out, err = run_cli(capsys, "history", "export", "--format", "csv", "--history",
                             f"postgresql://recorder@/{database}?host={postgres.socket}")
    assert code == 0 and PASSWORD not in out + err and "tiny" in out


def test_rebaseline_measures_the_day_variation_from_the_shared_store_in_the_environment(
        tmp_path: Path, postgres: Server, capsys, monkeypatch) -> None:
    """docs/ci.md's way on a fleet: ``rebaseline --day-history`` with ``PERFGATE_HISTORY_URL``
    set reads the shared store, and no message holds the password."""
    database = postgres.new_database()
    record(postgres.url(database), *(run_at(day, 1.0 + 0.01 * (day % 3)) for day in range(1, 7)))
    postgres.sql("GRANT SELECT ON ALL TABLES IN SCHEMA public TO recorder", database=database)
    results = tmp_path / "results"
    results.mkdir()
    save_result(run_at(9, 1.0), results / "tiny.json")
    baselines = tmp_path / "baselines"
    monkeypatch.setenv("PERFGATE_HISTORY_URL", f"postgresql://recorder:{PASSWORD}@/{database}?host={postgres.socket}")
    code, out, err = run_cli(capsys, "rebaseline", "--from-results", str(results), "--reason", "fleet day",
                             "--baselines", str(baselines), "--no-counters", "--config", str(tmp_path / "none.toml"),
                             "--day-history")
    assert code == 0, err
    assert PASSWORD not in out + err
    assert f"tiny: day-to-day variation from 6 runs in postgresql://recorder:***@/{database}" in out
    written = load_baseline(baselines / ENV.key() / "tiny.json")
    assert written.day_variation is not None and written.day_variation.runs == 6


def test_the_environment_url_is_the_store_unless_history_is_given(tmp_path: Path, postgres: Server, capsys,
                                                                  monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text('[tool.perfgate]\nhistory = "local.sqlite"\n')
    url = postgres.url(postgres.new_database())
    monkeypatch.setenv("PERFGATE_HISTORY_URL", url)
    code, _, err = run_cli(capsys, "history", "record", "--results", str(results_dir(tmp_path / "r",
                                                                                  result_of("tiny"))))
    assert code == 0 and mask(url) in err and not (tmp_path / "local.sqlite").exists()
    assert len(load(url)) == 5 * len(ROWS)
    monkeypatch.delenv("PERFGATE_HISTORY_URL")
    with pytest.raises(UsageError, match="no history store given, and PERFGATE_HISTORY_URL is not set"):
        load()
    code, _, err = run_cli(capsys, "history", "record", "--results", str(tmp_path / "r"))
    assert code == 0 and (tmp_path / "local.sqlite").is_file()
    # a URL in the settings is taken as written (a path would fold its //)
    (tmp_path / "pyproject.toml").write_text(f'[tool.perfgate]\nhistory = "{url}"\n')
    code, out, err = run_cli(capsys, "history", "export", "--format", "csv")
    assert code == 0 and "tiny" in out


def test_a_role_that_may_only_read_cannot_record(tmp_path: Path, postgres: Server) -> None:
    database = postgres.new_database()
    url = postgres.url(database)
    record(url, result_of("tiny"))
    postgres.sql("DROP ROLE IF EXISTS reader", "CREATE ROLE reader LOGIN")
    postgres.sql("GRANT SELECT ON ALL TABLES IN SCHEMA public TO reader", database=database)
    reader = postgres.url(database, user="reader")
    assert set(load(reader)["workload"].astype(str)) == {"tiny"}
    with pytest.raises(FileFormatError, match="cannot be written with this role"):
        record(reader, result_of("tiny", created_at=DAY2))
    with pytest.raises(UsageError, match="password in the URL is refused"):
        load(f"postgresql://reader:x@/{database}")


# --- recorders at once -----------------------------------------------------------------------------

RECORDER = """
import sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[3])
from test_history import result_of
from perfgate.model.errors import FileFormatError
from perfgate.store import history
from perfgate.store.history_values import Recording

url, worker, gate = sys.argv[1], int(sys.argv[2]), Path(sys.argv[4])
mine = [Recording(result_of(f"w{worker}", commit=f"c{i:02d}", seed=i,
                            created_at=f"2026-10-{i + 1:02d}T{worker:02d}:00:00+00:00"), None, "stored")
        for i in range(25)]
shared = [Recording(result_of("shared", commit=f"s{i:02d}"), None, "stored") for i in range(25)]
(gate / f"ready-{worker}").touch()
while not (gate / "go").exists():  # all four start recording at once
    time.sleep(0.005)
ids, refused = [], 0
for i in range(25):
    ids += history.record(url, [mine[i]])
    try:  # every worker also records the one run all of them measured: only one may keep it
        history.record(url, [shared[i]])
    except FileFormatError as exc:
        assert "already recorded" in str(exc), exc
        refused += 1
print(len(ids), refused)
"""


@pytest.mark.slow
def test_four_processes_recording_at_once_lose_nothing_and_duplicate_nothing(tmp_path: Path,
                                                                             postgres: Server) -> None:
    url = postgres.url(postgres.new_database())
    store.migrate(url)
    script = tmp_path / "recorder.py"
    script.write_text(RECORDER)
    tests = str(Path(__file__).parent)
    workers = [subprocess.Popen([sys.executable, str(script), url, str(w), tests, str(tmp_path)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for w in range(4)]
    deadline = time.monotonic() + 240
    while not all((tmp_path / f"ready-{w}").exists() for w in range(4)):
        assert all(w.poll() is None for w in workers), [w.communicate() for w in workers]
        assert time.monotonic() < deadline, "the recorders never got ready"
        time.sleep(0.01)
    (tmp_path / "go").touch()
    outputs = [w.communicate(timeout=300) for w in workers]
    for w, (_, err) in zip(workers, outputs, strict=True):
        assert w.returncode == 0, err
    recorded = [tuple(map(int, out.split())) for out, _ in outputs]
    assert [n for n, _ in recorded] == [25] * 4
    assert sum(refused for _, refused in recorded) == 3 * 25  # each shared run kept once, refused three times
    df = load(url)
    runs = df.drop_duplicates("run_id")
    assert len(runs) == 4 * 25 + 25 and runs["run_id"].is_unique
    assert runs.groupby(["workload", "commit", "date"], observed=True).size().max() == 1
    assert (runs["workload"].astype(str).value_counts().sort_index() == pd.Series(
        {"shared": 25, "w0": 25, "w1": 25, "w2": 25, "w3": 25}, name="count")).all()
    assert (df.groupby("run_id").size() == 5 * len(ROWS)).all()  # every run whole


def test_copy_refuses_a_destination_of_a_newer_schema(tmp_path: Path, postgres: Server) -> None:
    db = tmp_path / "h.sqlite"
    record(db, result_of("tiny"))
    url = postgres.url(postgres.new_database())
    store.migrate(url)
    _newer(url)
    with pytest.raises(FileFormatError, match="upgrade perfgate"):
        store.copy(db, url)


def test_recordings_keep_the_runner_and_gpu(backend) -> None:
    where = backend()
    gpu = result_of("g", device="cuda")
    store.record(where, [Recording(gpu, None, "stored", runner="t4-runner-2",
                                   gpu_uuid="GPU-8a1c2f3e-0000-1111-2222-333344445555")])
    df = load(where)
    assert set(df["runner"].astype(str)) == {"t4-runner-2"} and set(df["gpu_model"].astype(str)) == {"Test GPU"}
    assert set(df["gpu_uuid"].astype(str)) == {"GPU-8a1c2f3e-0000-1111-2222-333344445555"}
    with pytest.raises(FileFormatError, match="runner: expected a one-line string"):
        store.record(where, [Recording(dataclasses.replace(gpu, created_at=DAY2), None, "stored",
                                       runner="a\nb")])


KILLED = """
import sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from test_history import result_of
from perfgate.store import history
from perfgate.store.history_values import Recording

url, marker = sys.argv[1], Path(sys.argv[3])
insert = history._insert_run

def holding(tx, recording, recorded_at):
    run_id = insert(tx, recording, recorded_at)
    marker.touch()  # inside the transaction, the lock held, the first run's rows sent
    time.sleep(3600)

history._insert_run = holding
history.record(url, [Recording(result_of(name, created_at="2026-11-02T10:00:00+00:00"), None, "stored")
                     for name in ("alpha", "beta")])
"""


@pytest.mark.slow
def test_a_recorder_killed_inside_its_transaction_leaves_the_server_store_as_it_was(tmp_path: Path,
                                                                                   postgres: Server) -> None:
    url = postgres.url(postgres.new_database())
    record(url, result_of("tiny"))
    before = snapshot(url)
    script, inside = tmp_path / "killed.py", tmp_path / "inside"
    script.write_text(KILLED)
    proc = subprocess.Popen([sys.executable, str(script), url, str(Path(__file__).parent), str(inside)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not inside.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the recorder never got inside its transaction"
        time.sleep(0.01)
    proc.kill()
    proc.communicate(timeout=60)
    assert snapshot(url) == before  # the server dropped the transaction with the connection
    # and its lock: the next recorder takes it (a lock still held would end this one with "stayed locked")
    store.record(url, [Recording(result_of("alpha", created_at=DAY2), None, "stored")], timeout_s=20)
    assert sorted(set(load(url)["workload"].astype(str))) == ["alpha", "tiny"]


def test_a_recorder_that_waits_too_long_for_the_lock_gives_up_in_one_line(postgres: Server) -> None:
    import psycopg

    from perfgate.store.history_sql import _LOCK_KEY

    url = postgres.url(postgres.new_database())
    record(url, result_of("tiny"))
    before = snapshot(url)
    with psycopg.connect(url) as holder:  # another recorder, inside its transaction
        holder.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
        with pytest.raises(FileFormatError, match="the history store stayed locked by another process; try again"):
            store.record(url, [Recording(result_of("late", created_at=DAY2), None, "stored")], timeout_s=0.5)
        assert not load(url).empty  # a reader does not wait for a recorder
    assert snapshot(url) == before


# --- the fleet's roles, as docs/history.md writes them --------------------------------------

DOCS_HISTORY = Path(__file__).resolve().parents[1] / "docs" / "history.md"


def documented_roles_sql() -> tuple[list[str], list[str]]:
    """The statements of docs/history.md's roles block: those run on the server, and those
    run connected to the new database."""
    text = DOCS_HISTORY.read_text()
    block = text.split("### The roles\n", 1)[1].split("```sql\n", 1)[1].split("```", 1)[0]
    server_part, database_part = block.split("-- Then connected to the database perfgate", 1)
    database_part = database_part.split("\n", 1)[1]

    def statements(part: str) -> list[str]:
        code = "\n".join(line for line in part.splitlines() if not line.lstrip().startswith("--"))
        return [s.strip() for s in code.split(";") if s.strip()]

    return statements(server_part), statements(database_part)


def test_the_documented_roles_record_read_and_are_refused_as_the_docs_say(tmp_path: Path, postgres: Server,
                                                                          capsys) -> None:
    on_server, on_database = documented_roles_sql()
    assert any(s.startswith("ALTER DEFAULT PRIVILEGES") for s in on_database)
    name = f"perfgate_{postgres.new_database()}"  # a name of its own: roles are the cluster's
    postgres.sql(*[s.replace("DATABASE perfgate", f"DATABASE {name}") for s in on_server])
    postgres.sql(*on_database, database=name)
    owner, recorder, reader = (postgres.url(name, user) for user in
                               ("perfgate_owner", "perfgate_recorder", "perfgate_reader"))

    code, _, err = run_cli(capsys, "history", "migrate", "--history", owner)
    assert code == 0, err
    folder = results_dir(tmp_path / "r", result_of("tiny"), result_of("small"))
    code, _, err = run_cli(capsys, "history", "record", "--results", str(folder), "--history", recorder,
                           "--runner", "t4-1")
    assert code == 0, err  # no right on the identity's sequence, none for the advisory lock
    code, _, err = run_cli(capsys, "history", "record", "--results",
                           str(results_dir(tmp_path / "r2", result_of("tiny", created_at=DAY2))),
                           "--history", reader)
    assert code == 2 and "cannot be written with this role" in one_error_line(err)
    for argv in (["html", str(tmp_path / "site")], ["export", "--format", "csv", "--out", str(tmp_path / "h.csv")]):
        code, _, err = run_cli(capsys, "history", *argv, "--history", reader)
        assert code == 0, (argv, err)
    code, _, err = run_cli(capsys, "history", "copy", reader, str(tmp_path / "snapshot.sqlite"))
    assert code == 0, err
    assert raw(tmp_path / "snapshot.sqlite", "SELECT count(*) FROM runs")[0][0] == 2

    import psycopg

    for statement in ("DELETE FROM runs", "UPDATE runs SET branch = 'x'", "DROP TABLE counters",
                      "ALTER TABLE runs ADD COLUMN x TEXT", "CREATE TABLE other (x INT)"):
        with psycopg.connect(recorder) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(statement)
    assert raw(owner, "SELECT count(*) FROM runs")[0][0] == 2
