"""The history store as a pandas long table, and the per-run series taken from it.

:func:`load` reads the store that ``perfgate history record`` appends to (an SQLite file
or a PostgreSQL URL: ``perfgate.store.history``) into one row per workload × run × repeat
× row of :data:`perfgate.model.result.ROWS`; :func:`run_series` turns it into one value
per run (the median over the run's repeats), the series that change points and plots use.

Each repeat holds two statistics per row (``perfgate.model.repeat.STATISTICS``): the
**time per step** (``per_step_ms``: the window's total over its steps, what the gate
decides on) and the **median step** (``median_ms``). The series default to the time per
step, so a history shows the number that passed or failed a pull request; runs recorded
before the time per step was kept (schema version 1) have only the median, and are left
out of a time-per-step series (``statistic="median"`` shows them).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from perfgate.model.errors import UsageError
from perfgate.model.repeat import MEDIAN, PER_STEP, STATISTIC_WORDS, STATISTICS
from perfgate.model.result import ROWS
from perfgate.store.history import HistoryRows, Location, read_rows
from perfgate.store.history_sql import URL_ENV, environment_url, parse_location
from perfgate.store.history_values import COLUMNS, COUNTERS

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
    "runner": "category",
    "gpu_model": "category",
    "gpu_uuid": "category",
    "repeat": "int64",
    "block": "Int64",
    "phase": pd.CategoricalDtype(list(ROWS), ordered=True),
    "per_step_ms": "float64",
    "median_ms": "float64",
    "share": "float64",
    "samples_per_s": "float64",
    "peak_memory_bytes": "Int64",
    **{c: "float64" for c in COUNTERS},
}
"""The dtype of each column of :func:`load`'s table."""

VALUE_COLUMNS: dict[str, str] = {PER_STEP: "per_step_ms", MEDIAN: "median_ms"}
"""The column of the long table each statistic is read from."""
SERIES_COLUMNS = ("run_id", "commit", "date", "environment_key", "statistic", "value_ms", "n_repeats")


def value_column(statistic: str) -> str:
    """The long table's column of ``statistic``; a statistic that is not one of ``STATISTICS`` is a ValueError."""
    if statistic not in VALUE_COLUMNS:
        raise ValueError(f"unknown statistic {statistic!r}; statistics: {', '.join(STATISTICS)}")
    return VALUE_COLUMNS[statistic]


def describe(statistic: str) -> str:
    """The statistic in words, as panels and tables name it: ``time per step``, ``median step``."""
    value_column(statistic)
    return STATISTIC_WORDS[statistic]


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


def load(path: Path | str | Location | None = None) -> pd.DataFrame:
    """The history store at ``path`` (an SQLite file, or a ``postgresql://`` URL whose
    password comes from ``PGPASSWORD`` or a libpq password or service file; None: the URL
    in ``PERFGATE_HISTORY_URL``, which may hold its password) as a long table: one row per workload × run × repeat ×
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
    - ``runner`` (category): the runner that recorded the run (``RUNNER_NAME`` or its host
      name), ``gpu_model`` (category): its GPU on CUDA, ``gpu_uuid`` (category): the GPU's
      UUID when known; NaN for runs recorded before the runner was kept;
    - ``repeat`` (int64): the repeat's index in the run; ``block`` (Int64): its ABBA block
      (``<NA>`` in the stored design);
    - ``phase`` (ordered category of ``ROWS``); ``per_step_ms`` (float64): the repeat's
      time per step of the row, the window's total over its steps (``Repeat.per_step_ms``,
      what the gate decides on; NaN for runs recorded before it was kept); ``median_ms``
      (float64): the repeat's median step (``Repeat.medians_ms``); ``share`` (float64): the row's share of
      the total step time (1.0 for ``step``; the residual can be negative);
    - ``samples_per_s`` (float64) and ``peak_memory_bytes`` (Int64): the repeat's, the same
      on each of its rows;
    - ``ops``, ``copies``, ``flops``, ``syncs``, ``launches`` (float64): per step of the
      run's counted run, for the phase (``step``: the sum over the phases); ``NaN`` where
      the run has no counted run, on the ``residual`` row, and for ``launches`` on the CPU.

    A path that is not a perfgate history store, or one of a newer schema, is a
    :class:`perfgate.model.errors.FileFormatError`; the file is never written.
    """
    if path is None:
        url = environment_url()
        if url is None:
            raise UsageError(f"no history store given, and {URL_ENV} is not set")
        return frame(read_rows(parse_location(url, origin=URL_ENV)))
    return frame(read_rows(path if isinstance(path, (Path, Location)) else str(path)))


def per_run(rows: pd.DataFrame, statistic: str = PER_STEP) -> pd.DataFrame:
    """One row per workload × environment key × phase × run of ``rows`` (rows of :func:`load`'s
    table, or any frame with its ``workload, environment_key, phase, run_id, date, commit``
    columns and the column of ``statistic``), in date order (then run id): the run's value
    ``value_ms`` (the median over its repeats of their ``statistic``: what change points
    and the dashboard follow), the repeats' lowest (``low``) and highest (``high``),
    ``n_repeats``, ``statistic``, and the run's ``dirty``, ``device`` and ``runner`` where
    the frame has them. Repeats without a value of the statistic (a time per step in a
    run recorded before it was kept) are left out, and a run with none of them too."""
    column = value_column(statistic)
    rows = rows[rows[column].notna()] if column in rows.columns else rows.iloc[0:0].assign(**{column: 0.0})
    extra = {c: (c, "first") for c in ("dirty", "device", "runner") if c in rows.columns}
    grouped = rows.groupby(["workload", "environment_key", "phase", "run_id"], sort=False, observed=True)
    runs = grouped.agg(date=("date", "first"), commit=("commit", "first"), **extra,
                       value_ms=(column, "median"), low=(column, "min"), high=(column, "max"),
                       n_repeats=(column, "size")).reset_index()
    runs["n_repeats"] = runs["n_repeats"].astype("int64")
    runs["value_ms"] = runs["value_ms"].astype("float64")
    runs["statistic"] = statistic
    return runs.sort_values(["date", "run_id"], kind="stable").reset_index(drop=True)


def run_series(df: pd.DataFrame, workload: str, phase: str = "step",
               environment_key: str | None = None, statistic: str = PER_STEP) -> pd.DataFrame:
    """One row per run of ``workload`` (of ``environment_key``, or of every key when None),
    in date order (then run id): ``run_id``, ``commit``, ``date``, ``environment_key``,
    ``statistic`` (the one asked for), ``value_ms`` (the median over the run's repeats of
    their ``statistic`` for ``phase``: the time per step by default, what the gate decides
    on; ``"median"`` for the median step) and ``n_repeats``. Empty when the workload has no
    runs there with that statistic; a ``phase`` that is not one of ``ROWS``, or an unknown
    ``statistic``, is a ValueError."""
    if phase not in ROWS:
        raise ValueError(f"unknown phase {phase!r}; rows: {', '.join(ROWS)}")
    value_column(statistic)
    rows = df[(df["workload"] == workload) & (df["phase"] == phase)]
    if environment_key is not None:
        rows = rows[rows["environment_key"] == environment_key]
    series = per_run(rows, statistic)
    if series.empty:
        dtypes = {"statistic": "object", "value_ms": "float64", "n_repeats": "int64"}
        return pd.DataFrame({c: pd.Series(dtype=df[c].dtype if c in df else dtypes.get(c, "int64"))
                             for c in SERIES_COLUMNS})
    return series[list(SERIES_COLUMNS)]
