"""The history store as a pandas long table, and the per-run series taken from it.

:func:`load` reads the SQLite store that ``perfgate history record`` appends to
(``perfgate.store.history``) into one row per workload × run × repeat × row of
:data:`perfgate.model.result.ROWS`; :func:`run_series` turns it into one value per run
(the median over the run's repeats), the series that change points and plots use.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from perfgate.model.result import ROWS
from perfgate.store.history import COLUMNS, COUNTERS, HistoryRows, read_rows

UTC_NS = "datetime64[ns, UTC]"
DTYPES: dict[str, object] = {
    "run_id": "int64",
    "recorded_at": UTC_NS,
    "date": UTC_NS,
    "commit": "string",
    "dirty": "boolean",
    "branch": "category",
    "design": "category",
    "workload": "category",
    "workload_version": "int64",
    "device": "category",
    "environment_key": "category",
    "perfgate_version": "category",
    "repeat": "int64",
    "block": "Int64",
    "phase": pd.CategoricalDtype(list(ROWS), ordered=True),
    "median_ms": "float64",
    "share": "float64",
    "samples_per_s": "float64",
    "peak_memory_bytes": "Int64",
    **{c: "float64" for c in COUNTERS},
}
"""The dtype of each column of :func:`load`'s table."""

SERIES_COLUMNS = ("run_id", "commit", "date", "environment_key", "median_ms", "n_repeats")


def frame(rows: HistoryRows) -> pd.DataFrame:
    """The long table of :func:`load` from rows read by ``perfgate.store.history.read_rows``."""
    raw = pd.DataFrame.from_records(rows.rows, columns=list(COLUMNS))
    out = {}
    for column in COLUMNS:
        dtype = DTYPES[column]
        values = raw[column].astype("object")
        values = values.where(values.notna(), None)  # SQL NULL: None, whatever pandas made of it
        if not isinstance(dtype, str):  # the rows, an ordered category
            out[column] = values.astype(dtype)
        elif dtype == UTC_NS:
            out[column] = pd.to_datetime(values, utc=True, format="ISO8601").astype(UTC_NS)
        elif dtype == "boolean":
            out[column] = values.map(lambda v: pd.NA if v is None else bool(v)).astype("boolean")
        elif dtype in ("Int64", "float64", "int64"):
            out[column] = pd.to_numeric(values.where(values.notna(), np.nan)).astype(dtype)
        elif dtype == "category":  # categories of str, as Parquet gives them back
            present = sorted({str(v) for v in values if v is not None})
            out[column] = pd.Categorical(values, categories=pd.Index(present, dtype="str"))
        else:
            out[column] = values.astype(dtype)
    table = pd.DataFrame(out, columns=list(COLUMNS))
    return table.sort_values(["date", "run_id", "repeat", "phase"], kind="stable").reset_index(drop=True)


def load(path: Path | str) -> pd.DataFrame:
    """The history store at ``path`` as a long table: one row per workload × run × repeat ×
    row (the five phases, ``residual`` and ``step``), sorted by date, run id, repeat and
    row (in the order of :data:`perfgate.model.result.ROWS`). Columns and dtypes:

    - ``run_id`` (int64): the run's number in the store (one run: one workload of one
      result file); ``recorded_at`` (datetime64[ns, UTC]): when it was recorded;
    - ``date`` (datetime64[ns, UTC]): when the run was measured (the result's ``created_at``);
    - ``commit`` (string): the measured commit, ``<NA>`` when unknown; ``dirty`` (boolean):
      the working tree had uncommitted changes (``<NA>``: unknown); ``branch`` (category):
      ``--branch`` at recording, ``NaN`` when not given;
    - ``design`` (category): ``paired`` (ABBA blocks against a base commit; the head side
      is recorded) or ``stored``;
    - ``workload`` (category), ``workload_version`` (int64), ``device`` (category: cpu,
      cuda), ``environment_key`` (category: runs with the same key are comparable),
      ``perfgate_version`` (category: the perfgate that measured);
    - ``repeat`` (int64): the repeat's index in the run; ``block`` (Int64): its ABBA block
      (``<NA>`` in the stored design);
    - ``phase`` (ordered category of ``ROWS``); ``median_ms`` (float64): the repeat's median
      over its steps (``RepeatResult.medians_ms``); ``share`` (float64): the row's share of
      the total step time (1.0 for ``step``; the residual can be negative);
    - ``samples_per_s`` (float64) and ``peak_memory_bytes`` (Int64): the repeat's, the same
      on each of its rows;
    - ``ops``, ``copies``, ``flops``, ``syncs``, ``launches`` (float64): per step of the
      run's counted run, for the phase (``step``: the sum over the phases); ``NaN`` where
      the run has no counted run, on the ``residual`` row, and for ``launches`` on the CPU.

    A path that is not a perfgate history store, or one of a newer schema, is a
    :class:`perfgate.model.errors.FileFormatError`; the file is never written.
    """
    return frame(read_rows(Path(path)))


def per_run(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per workload × environment key × phase × run of ``rows`` (rows of :func:`load`'s
    table, or any frame with its ``workload, environment_key, phase, run_id, date, commit,
    median_ms`` columns), in date order (then run id): the run's value ``median_ms`` (the
    median over its repeats of their ``median_ms``: what change points and the dashboard
    follow), the repeats' lowest (``low``) and highest (``high``), ``n_repeats``, and the
    run's ``dirty`` and ``device`` where the frame has them."""
    extra = {c: (c, "first") for c in ("dirty", "device") if c in rows.columns}
    grouped = rows.groupby(["workload", "environment_key", "phase", "run_id"], sort=False, observed=True)
    runs = grouped.agg(date=("date", "first"), commit=("commit", "first"), **extra,
                       median_ms=("median_ms", "median"), low=("median_ms", "min"), high=("median_ms", "max"),
                       n_repeats=("median_ms", "size")).reset_index()
    runs["n_repeats"] = runs["n_repeats"].astype("int64")
    return runs.sort_values(["date", "run_id"], kind="stable").reset_index(drop=True)


def run_series(df: pd.DataFrame, workload: str, phase: str = "step",
               environment_key: str | None = None) -> pd.DataFrame:
    """One row per run of ``workload`` (of ``environment_key``, or of every key when None),
    in date order (then run id): ``run_id``, ``commit``, ``date``, ``environment_key``,
    ``median_ms`` (the median over the run's repeats of their ``median_ms`` for ``phase``:
    the run's value) and ``n_repeats``. Empty when the workload has no runs there; a
    ``phase`` that is not one of ``ROWS`` is a ValueError."""
    if phase not in ROWS:
        raise ValueError(f"unknown phase {phase!r}; rows: {', '.join(ROWS)}")
    rows = df[(df["workload"] == workload) & (df["phase"] == phase)]
    if environment_key is not None:
        rows = rows[rows["environment_key"] == environment_key]
    if rows.empty:
        return pd.DataFrame({c: pd.Series(dtype=df[c].dtype if c in df else "int64") for c in SERIES_COLUMNS})
    return per_run(rows)[list(SERIES_COLUMNS)]
