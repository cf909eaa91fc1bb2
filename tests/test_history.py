"""perfgate history: the SQLite store, its pandas long table, and the ``perfgate history`` commands.

One transaction per record; a duplicate, a newer schema, a file that is not a perfgate history
(random bytes, another SQLite database, a damaged store): one line, exit 2, the file byte for
byte as it was. Two processes recording at once both succeed; a process killed inside its
transaction leaves the store as it was.

The tests that take the ``backend`` fixture (``tests/pg_server.py``) run on an SQLite file and
on a PostgreSQL database; ``tests/test_history_postgres.py`` holds the guarantees on both
engines and what only a URL brings.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import math
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from factories import ENV, make_result

from perfgate.adapters.cli import build_parser, main
from perfgate.analysis.history import DTYPES, load, run_series
from perfgate.gate.config import load_settings
from perfgate.model.counters import AllocatorCounts, CounterSet, PhaseCounters, SyncSite
from perfgate.model.errors import FileFormatError, UsageError
from perfgate.model.result import ROWS, RunResult
from perfgate.model.workload import PHASES
from perfgate.store import history as store
from perfgate.store.history_values import Recording
from perfgate.store.counters import save_counters
from perfgate.store.results import save_result

DAY1, DAY2, DAY3 = "2026-11-01T10:00:00+00:00", "2026-11-02T10:00:00+00:00", "2026-11-03T10:00:00+00:00"


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("perfgate: error: "), err
    return lines[0]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def result_of(workload: str, *, commit: str = "0123abcd", created_at: str = DAY1, scale: float = 1.0,
              seed: int = 0, device: str = "cpu", dirty: bool | None = False) -> RunResult:
    env = dataclasses.replace(ENV, git_commit=commit, git_dirty=dirty, device=device,
                              gpu_name="Test GPU" if device == "cuda" else None)
    return dataclasses.replace(make_result(workload, scale=scale, seed=seed, env=env), created_at=created_at)


def counted(workload: str, *, device: str = "cpu", steps: int = 4) -> CounterSet:
    """Totals over ``steps`` counted steps: in forward 40 mm calls (8 of them copies), 4000
    FLOPs and 2 synchronisations; on CUDA 80 kernel launches in forward, 4 in each other phase."""
    cuda = device == "cuda"
    phases = {}
    for p in PHASES:
        forward = p == "forward"
        phases[p] = PhaseCounters(
            ops={"aten::mm": 32, "aten::clone": 8} if forward else {}, copies={"aten::clone": 8} if forward else {},
            dtype_conversions=0, device_copies=0, flops=4000 if forward else 0,
            flops_by_op={"aten::mm": 4000} if forward else {},
            syncs=(SyncSite("workloads/x.py:42", "aten::_local_scalar_dense", 2),) if forward else (),
            kernel_launches=(80 if forward else 4) if cuda else None, memcpy_calls=0 if cuda else None,
            allocator=AllocatorCounts(0, 0, 0, 0, 0) if cuda else None)
    unavailable = {"compile": "does not compile"}
    if not cuda:
        unavailable.update({"kernel_launches": "cpu", "memcpy_calls": "cpu", "allocator": "cpu"})
    return CounterSet(workload, 1, device, steps, 1, {}, phases, None, unavailable, "test")


def results_dir(root: Path, *results: RunResult, counters: tuple[CounterSet, ...] = ()) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for r in results:
        save_result(r, root / f"{r.workload}.json")
    for c in counters:
        save_counters(c, root)
    return root


# --- the round trip: record, then load ------------------------------------------------------


def test_two_recorded_runs_load_as_the_documented_long_table(backend, tmp_path: Path, capsys) -> None:
    first = result_of("tiny", commit="aaaa1111", created_at=DAY1)
    second = result_of("tiny", commit="bbbb2222", created_at=DAY2, scale=1.05, seed=1, dirty=None)
    db = backend()
    code, out, err = run_cli(capsys, "history", "record", "--results",
                             str(results_dir(tmp_path / "r1", first, counters=(counted("tiny"),))),
                             "--history", str(db), "--branch", "main")
    assert code == 0, err
    assert "run 1: tiny of aaaa1111, stored design, 5 repeats, with counters" in out
    code, _, err = run_cli(capsys, "history", "record", "--results", str(results_dir(tmp_path / "r2", second)),
                           "--history", str(db))
    assert code == 0, err

    df = load(db)
    assert list(df.columns) == list(DTYPES)
    assert {c: str(df[c].dtype) for c in df.columns} == {c: str(pd.Series(dtype=d).dtype) for c, d in DTYPES.items()}
    assert len(df) == 2 * 5 * len(ROWS)
    # sorted by date, run, repeat and row in ROWS order
    assert list(df["run_id"].drop_duplicates()) == [1, 2]
    assert list(df["phase"].iloc[: len(ROWS)]) == list(ROWS)
    assert df["date"].is_monotonic_increasing
    for run_id, result in ((1, first), (2, second)):
        rows = df[df["run_id"] == run_id]
        assert rows["date"].iloc[0] == pd.Timestamp(result.created_at)
        assert set(rows["commit"]) == {result.environment.git_commit}
        assert set(rows["environment_key"].astype(str)) == {result.environment.key()}
        for repeat in result.repeats:
            mine = rows[rows["repeat"] == repeat.index]  # the same doubles, bit for bit
            assert dict(zip(mine["phase"].astype(str), mine["per_step_ms"], strict=True)) == repeat.per_step_ms
            assert dict(zip(mine["phase"].astype(str), mine["median_ms"], strict=True)) == repeat.medians_ms
            assert dict(zip(mine["phase"].astype(str), mine["share"], strict=True)) == repeat.shares
            assert set(mine["samples_per_s"]) == {repeat.samples_per_s}
            assert set(mine["peak_memory_bytes"]) == {repeat.peak_memory_bytes}
    run1, run2 = df[df["run_id"] == 1], df[df["run_id"] == 2]
    assert set(run1["runner"].astype(str)) == {store.runner_name()}  # RUNNER_NAME, else the host name
    assert run1["gpu_model"].isna().all() and run1["gpu_uuid"].isna().all()  # on the CPU; no UUID known
    assert set(run1["branch"].astype(str)) == {"main"} and run2["branch"].isna().all()
    assert (~run1["dirty"]).all() and run2["dirty"].isna().all()
    assert set(run1["design"].astype(str)) == {"stored"} and run1["block"].isna().all()
    # counters per step (4 counted steps) where the counters file was given, NaN elsewhere
    forward = run1[run1["phase"] == "forward"]
    assert set(forward["ops"]) == {10.0} and set(forward["copies"]) == {2.0}
    assert set(forward["flops"]) == {1000.0} and set(forward["syncs"]) == {0.5}
    assert set(run1[run1["phase"] == "step"]["ops"]) == {10.0}  # the sum over the phases
    assert set(run1[run1["phase"] == "data_wait"]["ops"]) == {0.0}
    assert run1[run1["phase"] == "residual"][["ops", "flops"]].isna().all().all()
    assert run1["launches"].isna().all()  # not counted on the CPU
    assert run2[["ops", "copies", "flops", "syncs", "launches"]].isna().all().all()


def test_kernel_launches_per_step_on_cuda(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    result = result_of("gpu", device="cuda")
    store.record(db, store.recordings_of(results_dir(tmp_path / "r", result,
                                                     counters=(counted("gpu", device="cuda"),))))
    df = load(db)
    assert set(df["gpu_model"].astype(str)) == {"Test GPU"}
    launches = dict(zip(df["phase"].astype(str), df["launches"], strict=True))
    assert launches["forward"] == 20.0 and launches["optimizer"] == 1.0
    assert launches["step"] == 24.0 and math.isnan(launches["residual"])


def test_a_paired_results_folder_records_the_head_side_only(tmp_path: Path, capsys) -> None:
    head = result_of("tiny", created_at=DAY2)
    head = dataclasses.replace(head, repeats=tuple(dataclasses.replace(r, block=i // 2)
                                                   for i, r in enumerate(head.repeats)))
    base = dataclasses.replace(head, created_at=DAY1, environment=dataclasses.replace(ENV, git_commit="base0000"))
    folder = results_dir(tmp_path / "r", head)
    save_result(base, folder / "base" / "tiny.json")
    db = tmp_path / "h.sqlite"
    code, _, err = run_cli(capsys, "history", "record", "--results", str(folder), "--design", "stored",
                           "--history", str(db))
    assert code == 2 and "measured in the paired design (ABBA blocks), not stored" in one_error_line(err)
    assert not db.exists()
    code, out, err = run_cli(capsys, "history", "record", "--results", str(folder), "--history", str(db))
    assert code == 0, err
    df = load(db)
    assert set(df["commit"]) == {"0123abcd"} and df["run_id"].nunique() == 1
    assert set(df["design"].astype(str)) == {"paired"}
    assert list(df[df["phase"] == "step"]["block"]) == [0, 0, 1, 1, 2]


def test_run_series_is_the_median_over_repeats_per_run_in_date_order(backend, tmp_path: Path) -> None:
    """Of the time per step by default (what the gate decides on; the series were of the
    median step before schema version 2, and ``statistic="median"`` still gives them)."""
    db = backend()
    late, early = result_of("tiny", commit="c2", created_at=DAY3), result_of("tiny", commit="c1", created_at=DAY1,
                                                                              scale=1.1, seed=3)
    other_env = dataclasses.replace(result_of("tiny", commit="c9", created_at=DAY2),
                                    environment=dataclasses.replace(ENV, git_commit="c9", cpu_model="Other CPU"))
    for i, r in enumerate((late, early, other_env)):  # recorded out of date order
        store.record(db, store.recordings_of(results_dir(tmp_path / f"r{i}", r)))
    df = load(db)
    series = run_series(df, "tiny", environment_key=ENV.key())
    assert list(series.columns) == ["run_id", "commit", "date", "environment_key", "statistic", "value_ms",
                                    "n_repeats"]
    assert list(series["commit"]) == ["c1", "c2"] and list(series["run_id"]) == [2, 1]
    assert set(series["statistic"]) == {"per_step"}
    for value, result in zip(series["value_ms"], (early, late), strict=True):
        assert value == pytest.approx(pd.Series([r.per_step_ms["step"] for r in result.repeats]).median())
    medians = run_series(df, "tiny", environment_key=ENV.key(), statistic="median")
    assert set(medians["statistic"]) == {"median"}
    for value, result in zip(medians["value_ms"], (early, late), strict=True):
        assert value == pytest.approx(pd.Series([r.medians_ms["step"] for r in result.repeats]).median())
    assert not (medians["value_ms"] == series["value_ms"]).any()  # two statistics, two series
    assert list(series["n_repeats"]) == [5, 5]
    assert list(run_series(df, "tiny")["commit"]) == ["c1", "c9", "c2"]  # every key, by date
    forward = run_series(df, "tiny", "forward", ENV.key())
    assert forward["value_ms"].iloc[0] == pytest.approx(
        pd.Series([r.per_step_ms["forward"] for r in early.repeats]).median())
    assert run_series(df, "other").empty
    with pytest.raises(ValueError, match="unknown phase 'fwd'"):
        run_series(df, "tiny", "fwd")
    with pytest.raises(ValueError, match="unknown statistic 'mean'"):
        run_series(df, "tiny", statistic="mean")


# --- refusals: one line, exit 2, the file unchanged ------------------------------------------


def recorded_store(tmp_path: Path) -> Path:
    db = tmp_path / "h.sqlite"
    store.record(db, store.recordings_of(results_dir(tmp_path / "first", result_of("tiny"))))
    return db


def test_recording_the_same_result_twice_is_refused_and_nothing_is_written(tmp_path: Path, capsys) -> None:
    db = recorded_store(tmp_path)
    before = digest(db)
    # the same run again, beside a new one: neither is recorded
    folder = results_dir(tmp_path / "again", result_of("tiny"), result_of("fresh"))
    code, out, err = run_cli(capsys, "history", "record", "--results", str(folder), "--history", str(db))
    assert code == 2 and out == ""
    line = one_error_line(err)
    assert "tiny of commit 0123abcd measured at 2026-11-01T10:00:00+00:00" in line
    assert "already recorded (run 1); nothing was recorded" in line
    assert digest(db) == before
    assert set(load(db)["workload"].astype(str)) == {"tiny"}
    # the unique key, not only the check before the insert, refuses it
    columns = "workload, workload_version, git_commit, created_at, environment_key, device, design, " \
              "perfgate_version, recorded_at"
    with pytest.raises(sqlite3.IntegrityError):
        sql(db, f"INSERT INTO runs ({columns}) SELECT {columns} FROM runs")
    with pytest.raises(sqlite3.IntegrityError):  # an unknown commit too
        sql(db, "UPDATE runs SET git_commit = NULL", f"INSERT INTO runs ({columns}) SELECT {columns} FROM runs")


def sql(db: Path, *statements: str) -> None:
    with sqlite3.connect(db) as conn:
        for statement in statements:
            conn.execute(statement)
    conn.close()


def _newer(db: Path) -> None:
    sql(db, f"PRAGMA user_version = {store.HISTORY_SCHEMA_VERSION + 1}")


def _foreign(db: Path) -> None:
    db.unlink()
    sql(db, "CREATE TABLE runs (id INTEGER PRIMARY KEY, name TEXT)", "INSERT INTO runs (name) VALUES ('not ours')")


def _other_kind(db: Path) -> None:
    sql(db, "UPDATE meta SET value = 'someone.else' WHERE key = 'kind'")


def _random_bytes(db: Path) -> None:
    db.write_bytes(bytes(range(256)) * 64)


def _damaged(db: Path) -> None:
    """The root page of the (empty) counters table overwritten: a record without counters would
    not touch it, so only the check of every page before a write finds it."""
    with sqlite3.connect(db) as conn:
        (root,) = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'counters'").fetchone()
    conn.close()
    data = bytearray(db.read_bytes())
    size = int.from_bytes(data[16:18], "big")
    data[(root - 1) * size: (root - 1) * size + 100] = b"\xff" * 100
    db.write_bytes(bytes(data))


def _truncated(db: Path) -> None:
    db.write_bytes(db.read_bytes()[:1500])


@pytest.mark.parametrize(("spoil", "message"), [
    (_newer, f"a history store of schema version {store.HISTORY_SCHEMA_VERSION + 1} (written by perfgate "),
    (_foreign, "not a perfgate history store (an SQLite database without its meta table)"),
    (_other_kind, "not a perfgate history store (kind is 'someone.else')"),
    (_random_bytes, "not a perfgate history store, or a damaged one (file is not a database)"),
    (_damaged, ""),
    (_truncated, ""),
])
def test_a_store_perfgate_cannot_use_is_refused_untouched(tmp_path: Path, capsys, spoil, message: str) -> None:
    db = recorded_store(tmp_path)
    spoil(db)
    before = digest(db)
    folder = results_dir(tmp_path / "next", result_of("tiny", created_at=DAY2))
    code, out, err = run_cli(capsys, "history", "record", "--results", str(folder), "--history", str(db))
    assert code == 2 and out == ""
    line = one_error_line(err)
    assert str(db) in line and message in line
    if spoil is _newer:
        assert "upgrade perfgate" in line
    if not message:
        assert "damaged" in line
    assert digest(db) == before
    assert not Path(f"{db}-journal").exists()
    code, out, err = run_cli(capsys, "history", "export", "--format", "csv", "--history", str(db))
    assert code == 2 and out == "" and str(db) in one_error_line(err)
    assert digest(db) == before


def test_reading_a_missing_store_creates_nothing(tmp_path: Path, capsys) -> None:
    db = tmp_path / "none.sqlite"
    code, out, err = run_cli(capsys, "history", "export", "--format", "json", "--history", str(db))
    assert code == 2 and "no history store there (perfgate history record creates one)" in one_error_line(err)
    assert not db.exists()


@pytest.mark.parametrize(("argv", "message"), [
    (["--results", "{tmp}/missing"], "missing: no such directory"),
    (["--results", "{tmp}/empty"], "empty: no result files (<workload>.json) to record"),
    (["--results", "{tmp}/r", "--branch", " "], "--branch: expected a branch name"),
    (["--results", "{tmp}/r", "--branch", "a\nb"], "--branch: expected a branch name"),
    (["--results", "{tmp}/mismatch"], "tiny: its counted run is of cpu v1, the result of cpu v2"),
    (["--results", "{tmp}/junk"], "unexpected file"),
    (["--results", "{tmp}/r", "--history", "{tmp}/a-file/h.sqlite"], "a-file is not a folder"),  # not over a file
])
def test_bad_record_input_is_one_line(tmp_path: Path, capsys, argv: list[str], message: str) -> None:
    (tmp_path / "empty").mkdir()
    results_dir(tmp_path / "r", result_of("tiny"))
    results_dir(tmp_path / "mismatch", dataclasses.replace(result_of("tiny"), workload_version=2),
                counters=(counted("tiny"),))
    (results_dir(tmp_path / "junk", result_of("tiny")) / "notes.txt").write_text("x")
    (tmp_path / "a-file").write_text("x")
    db = tmp_path / "h.sqlite"
    code, out, err = run_cli(capsys, "history", "record", "--history", str(db),
                             *(a.format(tmp=tmp_path) for a in argv))
    assert code == 2 and out == ""
    assert message in one_error_line(err)
    assert not db.exists()


# --- two processes at once, and a process killed inside its transaction ----------------------

CHILD = """
import sys, time
from pathlib import Path
from perfgate.store import history, history_sql
from perfgate.adapters.cli import main

role, db, results, marker, other = sys.argv[1:6]
insert, connect = history._insert_run, history_sql._connect

def holding_insert(conn, recording, recorded_at):
    run_id = insert(conn, recording, recorded_at)
    Path(marker).touch()  # inside the write transaction, after the first run's rows
    if role == "killed":
        time.sleep(3600)
    deadline = time.monotonic() + 120  # the waiter's marker, or give up
    while role == "holder" and not Path(other).exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    if role == "holder":
        time.sleep(1.0)  # the other process is now waiting on the lock
    return run_id

def announced_connect(path, *, create, timeout_s):
    conn = connect(path, create=create, timeout_s=timeout_s)
    Path(marker).touch()  # about to BEGIN IMMEDIATE
    return conn

if role in ("holder", "killed"):
    history._insert_run = holding_insert
else:
    history_sql._connect = announced_connect
sys.exit(main(["history", "record", "--results", results, "--history", db]))
"""


def child(tmp_path: Path, role: str, db: Path, results: Path, marker: Path, other: Path) -> subprocess.Popen:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    return subprocess.Popen([sys.executable, str(script), role, str(db), str(results), str(marker), str(other)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(path: Path, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 120
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the child never got there"
        time.sleep(0.01)


@pytest.mark.slow
def test_two_processes_recording_at_once_both_succeed(tmp_path: Path) -> None:
    db = recorded_store(tmp_path)
    a = results_dir(tmp_path / "a", result_of("alpha"), result_of("beta"))
    b = results_dir(tmp_path / "b", result_of("gamma"), result_of("delta"))
    holds, waits = tmp_path / "a-holds", tmp_path / "b-begins"
    holder = child(tmp_path, "holder", db, a, holds, waits)
    wait_for(holds, holder)  # the holder is inside its write transaction
    waiter = child(tmp_path, "waiter", db, b, waits, holds)
    out_a, err_a = holder.communicate(timeout=300)
    out_b, err_b = waiter.communicate(timeout=300)
    assert holder.returncode == 0, err_a
    assert waiter.returncode == 0, err_b
    df = load(db)
    runs = dict(zip(df["workload"].astype(str), df["run_id"], strict=True))
    assert sorted(runs) == ["alpha", "beta", "delta", "gamma", "tiny"]
    assert len(df) == 5 * 5 * len(ROWS)
    # the waiter began while the holder held its transaction, and committed after it
    assert max(runs["alpha"], runs["beta"]) < min(runs["gamma"], runs["delta"])


@pytest.mark.slow
@pytest.mark.parametrize("existing", [True, False], ids=["existing-store", "new-store"])
def test_a_recorder_killed_inside_its_transaction_leaves_the_store_as_it_was(tmp_path: Path, existing: bool) -> None:
    db = recorded_store(tmp_path) if existing else tmp_path / "h.sqlite"
    before = load(db) if existing else None
    before_bytes = digest(db) if existing else None
    folder = results_dir(tmp_path / "r", result_of("alpha"), result_of("beta"))
    inside = tmp_path / "inside"
    proc = child(tmp_path, "killed", db, folder, inside, tmp_path / "unused")
    wait_for(inside, proc)  # alpha's rows are inserted, beta's not yet, nothing committed
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert Path(f"{db}-journal").exists()  # killed with its rows written, the old pages saved beside
    if existing:
        pd.testing.assert_frame_equal(load(db), before)  # the next reader rolls the journal back
        assert digest(db) == before_bytes
    else:
        with pytest.raises(FileFormatError, match="no run recorded yet"):
            load(db)
    # and the store takes the next record
    store.record(db, store.recordings_of(folder))
    assert sorted(set(load(db)["workload"].astype(str))) == (["alpha", "beta", "tiny"] if existing
                                                              else ["alpha", "beta"])


# --- export --------------------------------------------------------------------------------


def exported_store(tmp_path: Path) -> Path:
    db = recorded_store(tmp_path)
    store.record(db, store.recordings_of(results_dir(tmp_path / "second", result_of("tiny", created_at=DAY2),
                                                     counters=(counted("tiny"),)), branch="main"))
    return db


def test_export_csv_and_json_to_stdout_hold_the_table(tmp_path: Path, capsys) -> None:
    db = exported_store(tmp_path)
    df = load(db)
    code, out, err = run_cli(capsys, "history", "export", "--format", "csv", "--history", str(db))
    assert code == 0, err
    back = pd.read_csv(io.StringIO(out))
    assert list(back.columns) == list(df.columns) and len(back) == len(df)
    assert back["median_ms"].tolist() == pytest.approx(df["median_ms"].tolist(), rel=1e-12)
    assert pd.to_datetime(back["date"], utc=True).tolist() == df["date"].tolist()
    code, out, err = run_cli(capsys, "history", "export", "--format", "json", "--history", str(db))
    assert code == 0, err
    records = json.loads(out)
    assert len(records) == len(df) and set(records[0]) == set(df.columns)
    assert records[0]["date"] == "2026-11-01T10:00:00.000Z" and records[0]["block"] is None
    assert records[0]["ops"] is None and records[-1]["ops"] == 10.0  # the second run was counted


def test_export_parquet_keeps_the_dtypes(tmp_path: Path, capsys) -> None:
    db = exported_store(tmp_path)
    out_file = tmp_path / "out" / "history.parquet"
    code, out, err = run_cli(capsys, "history", "export", "--format", "parquet", "--out", str(out_file),
                             "--history", str(db))
    assert code == 0 and out == "" and "wrote 70 rows (2 runs)" in err
    back, df = pd.read_parquet(out_file), load(db)
    # a category column with no value at all (no GPU UUID known) comes back a category
    # without values, whose empty categories Parquet types as object rather than str
    empty = [c for c in df.columns if isinstance(df[c].dtype, pd.CategoricalDtype) and df[c].isna().all()]
    assert "gpu_uuid" in empty
    for column in empty:
        assert isinstance(back[column].dtype, pd.CategoricalDtype) and back[column].isna().all()
    pd.testing.assert_frame_equal(back.drop(columns=empty), df.drop(columns=empty))
    code, _, err = run_cli(capsys, "history", "export", "--format", "parquet", "--history", str(db))
    assert code == 2 and "give --out FILE" in one_error_line(err)


def test_an_unwritable_export_path_is_one_line_and_leaves_no_partial_file(tmp_path: Path, capsys,
                                                                          monkeypatch) -> None:
    db = exported_store(tmp_path)
    (tmp_path / "a-file").write_text("x")
    target = tmp_path / "folder"
    target.mkdir()
    for out_path in (target, tmp_path / "a-file" / "h.csv"):  # a folder; under a file
        listing = sorted(p.name for p in tmp_path.rglob("*"))
        code, out, err = run_cli(capsys, "history", "export", "--format", "csv", "--out", str(out_path),
                                 "--history", str(db))
        assert code == 2 and out == ""
        assert "cannot write there" in one_error_line(err)
        assert sorted(p.name for p in tmp_path.rglob("*")) == listing
    # a failure at the rename leaves the old file as it was, and no temporary file beside it
    old = tmp_path / "old.json"
    old.write_text("previous export")

    def fail(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    code, _, err = run_cli(capsys, "history", "export", "--format", "json", "--out", str(old), "--history", str(db))
    assert code == 2 and "No space left on device" in one_error_line(err)
    assert old.read_text() == "previous export"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".old.json.")]


# --- settings and the command line -----------------------------------------------------------


def test_the_store_path_comes_from_the_pyproject_or_the_command_line(tmp_path: Path, capsys,
                                                                      monkeypatch) -> None:
    assert load_settings(None).history == Path("perfgate-history.sqlite")
    project = tmp_path / "proj"
    project.mkdir()
    pyproject = project / "pyproject.toml"
    pyproject.write_text("[tool.perfgate]\n")
    assert load_settings(pyproject).history == project / "perfgate-history.sqlite"  # beside the pyproject
    pyproject.write_text('[tool.perfgate]\nhistory = "perf/history.sqlite"\n')
    assert load_settings(pyproject).history == project / "perf/history.sqlite"
    assert load_settings(pyproject, {"history": "cli.sqlite"}).history == Path("cli.sqlite")
    pyproject.write_text("[tool.perfgate]\nhistory = 3\n")
    with pytest.raises(UsageError, match="history must be the path of the history store"):
        load_settings(pyproject)
    pyproject.write_text('[tool.perfgate]\nhistory = "perf/history.sqlite"\n')
    (project / "perf").mkdir()
    folder = results_dir(tmp_path / "r", result_of("tiny"))
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(capsys, "history", "record", "--results", str(folder), "--config", str(pyproject))
    assert code == 0, err
    assert (project / "perf" / "history.sqlite").is_file() and str(project / "perf" / "history.sqlite") in err


def test_the_help_names_the_history_commands(capsys) -> None:
    parser = build_parser()
    assert "history" in parser.format_help()
    with pytest.raises(SystemExit):
        main(["history", "record", "--help"])
    text = capsys.readouterr().out
    for words in ("--results DIR", "--design {paired,stored}", "--branch NAME", "--history PATH",
                  "one transaction", "head side only", "already recorded"):
        assert words in " ".join(text.split()), words
    with pytest.raises(SystemExit):
        main(["history", "--help"])
    text = capsys.readouterr().out
    assert "record" in text and "export" in text and "changes" in text


def test_neither_the_command_line_nor_import_perfgate_loads_pandas() -> None:
    code = ("import sys, perfgate, perfgate.adapters.cli; light = 'pandas' not in sys.modules; "
            "import perfgate.analysis.history as h; print(light, perfgate.history.load is h.load)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True"]


# --- history changes: the per-run series, find_changes and the table --------------------------


def stepped_store(tmp_path: Path, *, runs: int = 24, step_at: int = 12, short: int = 0,
                  where: Path | str | None = None) -> Path | str:
    """``runs`` runs of ``tiny`` (commit c00, c01, ... one day apart), 5% slower from run
    ``step_at`` on; and ``short`` runs of ``small``, too few for the method; in ``where``
    (default: ``h.sqlite`` in ``tmp_path``)."""
    db = tmp_path / "h.sqlite" if where is None else where
    recordings = []
    for i in range(runs):
        result = result_of("tiny", commit=f"c{i:02d}", created_at=f"2026-10-{i + 1:02d}T10:00:00+00:00",
                           scale=1.05 if i >= step_at else 1.0, seed=i)
        recordings.append(Recording(result, None, "stored"))
    for i in range(short):
        result = result_of("small", commit=f"c{i:02d}", created_at=f"2026-10-{i + 1:02d}T10:00:00+00:00", seed=i)
        recordings.append(Recording(result, None, "stored"))
    store.record(db, recordings)
    return db


def test_changes_finds_a_5_percent_step_with_its_commit_range(backend, tmp_path: Path, capsys) -> None:
    db = stepped_store(tmp_path, short=4, where=backend())
    code, out, err = run_cli(capsys, "history", "changes", "--history", str(db))
    assert code == 0, err
    # the short series is left out with one line, the other searched
    assert err.count("perfgate: left out ") == 1 and "small on cpu-" in err and "at least 10 runs" in err
    lines = out.splitlines()  # the statistic searched first: the time per step, as the gate decides
    assert lines[0] == "time per step: each run's value is the median over its repeats"
    assert lines[1].split()[:3] == ["workload", "environment", "phase"]
    (row,) = lines[3:]
    assert row.startswith("tiny ") and ENV.key() in row and " step " in row
    assert "c11..c12" in row and "2026-10-13 10:00" in row
    size = float(row.split("%")[0].split()[-1])
    assert 4.0 < size < 6.0
    assert float(row.split()[-1].rstrip("%")) >= 95.0
    # one phase of one workload, in one environment
    code, out, err = run_cli(capsys, "history", "changes", "tiny", "--phase", "forward", "--environment",
                             ENV.key(), "--history", str(db))
    assert code == 0 and err == ""
    (row,) = out.splitlines()[3:]
    assert " forward " in row and "c11..c12" in row
    # the median step has the same step (the whole step is 5% slower)
    code, out, err = run_cli(capsys, "history", "changes", "tiny", "--statistic", "median", "--history", str(db))
    assert code == 0 and err == "" and out.startswith("median step: ")
    (row,) = out.splitlines()[3:]
    assert "c11..c12" in row
    # and a series without a step
    code, out, err = run_cli(capsys, "history", "changes", "tiny", "--history", str(stepped_store(tmp_path / "flat",
                                                                                                  step_at=99,
                                                                                                  where=backend())))
    assert (code, out, err) == (0, "time per step: each run's value is the median over its repeats\n"
                                   "no lasting steps found\n", "")


@pytest.mark.parametrize(("argv", "message"), [
    (["small"], "small on cpu-test-cpu-torch2.14.1-"),
    (["nope"], "nope: no runs in "),
    (["--environment", "cpu-other-1234"], "--environment cpu-other-1234: no runs of that environment key"),
    (["tiny", "--phase", "residual"], "change points need finite positive values"),
])
def test_changes_on_a_series_it_cannot_search_is_one_line(tmp_path: Path, capsys, argv: list[str],
                                                          message: str) -> None:
    db = stepped_store(tmp_path, runs=12, short=4)
    if "residual" in argv:  # a residual of 0 or below, which the method (on logarithms) cannot take
        sql(db, "UPDATE phase_times SET per_step_ms = -0.1 WHERE phase = 'residual'")
    code, out, err = run_cli(capsys, "history", "changes", *argv, "--history", str(db))
    assert code == 2 and out == ""
    assert message in one_error_line(err)
    if argv == ["small"]:
        assert "at least 10 runs" in err and "got 4" in err


def test_changes_when_every_series_is_too_short_is_one_line(tmp_path: Path, capsys) -> None:
    db = stepped_store(tmp_path, runs=6, short=4)
    code, out, err = run_cli(capsys, "history", "changes", "--history", str(db))
    assert code == 2 and out == ""
    assert "none of the 2 series can be searched" in one_error_line(err)


def test_html_writes_the_dashboard_of_the_store(backend, tmp_path: Path, capsys) -> None:
    db = stepped_store(tmp_path, where=backend())
    code, out, err = run_cli(capsys, "history", "html", str(tmp_path / "site"), "--history", str(db),
                             "--no-baselines", "--title", "nightly <main>")
    assert code == 0 and "wrote" in err
    page = (tmp_path / "site" / "index.html").read_text()
    assert "nightly &lt;main&gt;" in page and "nightly <main>" not in page
    assert "c12" in page  # the change point's first commit after the step
    # a store that is not there is one line, and nothing is written
    code, _, err = run_cli(capsys, "history", "html", str(tmp_path / "other"), "--history",
                           str(tmp_path / "none.sqlite"))
    assert code == 2 and not (tmp_path / "other").exists()


def test_html_splits_a_workload_by_runner_unless_told_not_to(tmp_path: Path, capsys) -> None:
    db = tmp_path / "h.sqlite"
    for k, runner in enumerate(("runner-a", "runner-b")):  # the same commits; b 5% slower; both +8% from c12
        store.record(db, [Recording(result_of("tiny", commit=f"c{i:02d}", created_at=f"2026-10-{i + 1:02d}T1{k}:00:00Z",
                                              scale=(1.0 + 0.05 * k) * (1.08 if i >= 12 else 1.0), seed=i + 50 * k),
                                    None, "stored", runner=runner) for i in range(24)])
    code, _, err = run_cli(capsys, "history", "html", str(tmp_path / "site"), "--history", str(db), "--no-baselines")
    assert code == 0, err
    page = (tmp_path / "site" / "index.html").read_text()
    assert "<th>runner</th>" in page
    for runner in ("runner-a", "runner-b"):
        cells = f'<td class="runner">{runner}</td><td class="phase">step</td><td><code>c11</code> → <code>c12</code>'
        assert cells in page
    code, _, err = run_cli(capsys, "history", "html", str(tmp_path / "one"), "--history", str(db), "--no-baselines",
                           "--no-by-runner")
    assert code == 0, err
    assert "<th>runner</th>" not in (tmp_path / "one" / "index.html").read_text()
