"""The history store takes only what its readers can read, and its readers survive a bad row.

``perfgate history record`` checks every value it stores: a ``created_at`` of "yesterday",
of the year 9999, before 2000 or without a timezone is one line, exit 2, and nothing is
recorded. A store that holds such a row anyway (edited by hand, or written by a perfgate
that checked less) is still read: ``export``, ``changes`` and ``html`` leave that run out
with one warning line naming it, and go on with the others.
"""

from __future__ import annotations

import dataclasses
import io
import sqlite3
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pandas as pd
import pytest
from test_history import DAY1, DAY2, DAY3, digest, one_error_line, result_of, results_dir, run_cli

from perfgate.model.errors import FileFormatError
from perfgate.store import history as store
from perfgate.store.history_values import Recording


def _days_ahead(days: float) -> str:
    return (datetime.now(timezone.utc) + timedelta(days=days)).isoformat(timespec="seconds")


@pytest.mark.parametrize(("created_at", "message"), [
    ("yesterday", "not an ISO 8601 time with a timezone"),
    ("9999-01-01T00:00:00+00:00", "is after"),
    ("1999-12-31T23:59:59+00:00", "is before 2000"),
    ("1970-01-01T00:00:00Z", "is before 2000"),
    ("2026-11-01T10:00:00", "not an ISO 8601 time with a timezone"),
    ("2026-11-01", "not an ISO 8601 time with a timezone"),
    ("2026-13-01T10:00:00+00:00", "out of range"),
    ("2026-11-01T10:00:00+25:00", "out of range"),
    ("２０２６-11-01T10:00:00+00:00", "not an ISO 8601 time"),
    ("2026-11-01T10:00:00+00:00\n", "not an ISO 8601 time"),
])
def test_record_refuses_a_created_at_the_readers_cannot_take(tmp_path: Path, capsys, created_at: str,
                                                             message: str) -> None:
    db = tmp_path / "h.sqlite"
    store.record(db, store.recordings_of(results_dir(tmp_path / "first", result_of("small", created_at=DAY1))))
    before = digest(db)
    folder = results_dir(tmp_path / "bad", result_of("tiny", created_at=created_at))
    code, _, err = run_cli(capsys, "history", "record", "--results", str(folder), "--history", str(db))
    line = one_error_line(err)
    assert code == 2
    assert str(folder / "tiny.json") in line and "created_at" in line and message in line, line
    assert "nothing was recorded" in line
    assert digest(db) == before


def test_record_takes_a_created_at_up_to_a_day_ahead_of_the_clock(tmp_path: Path, capsys) -> None:
    db = tmp_path / "h.sqlite"
    code, _, err = run_cli(capsys, "history", "record", "--results",
                           str(results_dir(tmp_path / "soon", result_of("tiny", created_at=_days_ahead(0.5)))),
                           "--history", str(db))
    assert code == 0, err
    code, _, err = run_cli(capsys, "history", "record", "--results",
                           str(results_dir(tmp_path / "later", result_of("small", created_at=_days_ahead(2)))),
                           "--history", str(db))
    assert code == 2 and "is after" in one_error_line(err)


def test_record_checks_the_fields_it_stores_in_the_library_call_too(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    good = Recording(result_of("tiny"), None, "stored")
    bad = [
        dataclasses.replace(good, result=dataclasses.replace(good.result, created_at="yesterday")),
        dataclasses.replace(good, result=dataclasses.replace(good.result, workload="../x")),
        dataclasses.replace(good, result=dataclasses.replace(good.result, workload_version=2**70)),
        dataclasses.replace(good, result=dataclasses.replace(good.result, perfgate_version="0.1\n## x")),
        dataclasses.replace(good, branch="main\x1b[31m"),
        dataclasses.replace(good, result=dataclasses.replace(
            good.result, environment=dataclasses.replace(good.result.environment, git_dirty="yes"))),
        dataclasses.replace(good, result=dataclasses.replace(
            good.result, environment=dataclasses.replace(good.result.environment, torch=5))),
        dataclasses.replace(good, result=dataclasses.replace(good.result, repeats=(
            dataclasses.replace(good.result.repeats[0], peak_memory_bytes=-1), *good.result.repeats[1:]))),
    ]
    for recording in bad:
        with pytest.raises(FileFormatError, match="nothing was recorded"):
            store.record(db, [recording])
        assert not db.exists()
    assert store.record(db, [good]) == [1]


# --- the readers survive a bad row ---------------------------------------------------------------

def three_runs(tmp_path: Path) -> Path:
    db = tmp_path / "h.sqlite"
    for i, day in enumerate((DAY1, DAY2, DAY3)):
        folder = results_dir(tmp_path / f"r{i}", result_of("tiny", commit=f"c{i}", created_at=day, seed=i))
        store.record(db, store.recordings_of(folder))
    return db


def spoil(db: Path, statement: str) -> None:
    """What an older perfgate, or a hand, could have left in the store."""
    conn = sqlite3.connect(db)
    with conn:
        conn.execute(statement)
    conn.close()


SPOILS = [
    pytest.param("UPDATE runs SET created_at = 'yesterday' WHERE run_id = 2", "created_at: 'yesterday'",
                 id="created-yesterday"),
    pytest.param("UPDATE runs SET created_at = '9999-01-01T00:00:00+00:00' WHERE run_id = 2", "created_at",
                 id="created-9999"),
    pytest.param("UPDATE runs SET recorded_at = '1970-01-01T00:00:00+00:00' WHERE run_id = 2", "recorded_at",
                 id="recorded-1970"),
    pytest.param("UPDATE phase_times SET median_ms = 'fast' WHERE run_id = 2 AND phase = 'forward'", "median_ms",
                 id="median-text"),
    pytest.param("UPDATE phase_times SET per_step_ms = 'slow' WHERE run_id = 2 AND phase = 'step'", "per_step_ms",
                 id="per-step-text"),
    pytest.param("UPDATE repeats SET samples_per_s = 9e999 WHERE run_id = 2", "samples_per_s",
                 id="throughput-infinite"),
    pytest.param("UPDATE repeats SET block = 'b' WHERE run_id = 2", "block", id="block-text"),
    pytest.param("UPDATE runs SET workload_version = 'one' WHERE run_id = 2", "workload_version",
                 id="version-text"),
]


@pytest.mark.parametrize(("statement", "named"), SPOILS)
def test_export_leaves_a_bad_run_out_with_one_warning_line(tmp_path: Path, capsys, statement: str,
                                                           named: str) -> None:
    db = three_runs(tmp_path)
    spoil(db, statement)
    before = digest(db)
    code, out, err = run_cli(capsys, "history", "export", "--format", "csv", "--history", str(db))
    assert code == 0, err
    warnings = [line for line in err.splitlines() if line.strip()]
    assert len(warnings) == 1 and warnings[0].startswith("perfgate: warning: "), err
    assert str(db) in warnings[0] and "run 2 (tiny) left out" in warnings[0] and named in warnings[0], warnings[0]
    table = pd.read_csv(io.StringIO(out))
    assert sorted(table["run_id"].unique()) == [1, 3]
    assert digest(db) == before  # reading never writes


@pytest.mark.parametrize(("statement", "named"), SPOILS[:2])
def test_changes_and_html_leave_a_bad_run_out_with_one_warning_line(tmp_path: Path, capsys, statement: str,
                                                                    named: str) -> None:
    db = three_runs(tmp_path)
    spoil(db, statement)
    code, _, err = run_cli(capsys, "history", "html", str(tmp_path / "site"), "--history", str(db),
                           "--no-baselines")
    assert code == 0, err
    assert (tmp_path / "site" / "index.html").is_file()
    assert sum("perfgate: warning: " in line and "run 2 (tiny) left out" in line for line in err.splitlines()) == 1
    code, _, err = run_cli(capsys, "history", "changes", "--history", str(db))
    assert sum("perfgate: warning: " in line and "run 2 (tiny) left out" in line for line in err.splitlines()) == 1
    assert "Traceback" not in err


def test_every_bad_run_is_named_once_and_the_good_ones_are_read(tmp_path: Path) -> None:
    db = three_runs(tmp_path)
    spoil(db, "UPDATE runs SET created_at = 'yesterday' WHERE run_id IN (1, 3)")
    rows = store.read_rows(db)
    assert {row[0] for row in rows.rows} == {2}
    assert len(rows.skipped) == 2
    assert "run 1 (tiny)" in rows.skipped[0] and "run 3 (tiny)" in rows.skipped[1]
    assert all("\n" not in line for line in rows.skipped)
