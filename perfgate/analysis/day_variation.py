"""A workload's job-to-job variation on this runner, measured from its history store.

The stored design compares the current job with a baseline recorded in another job, so the
difference carries both jobs' day effects. With one recording the baseline cannot show
them, and the gate assumes a day sd (``GateConfig.assumed_day_sd_log``, 1%, worth
``day_prior_df`` = 4 degrees of freedom). On a quiet runner that assumption costs most of the
power (a +6% slowdown at δ = 3% is never a REGRESSION with one recording at a true day sd of
1%), and on a noisy one it is too small. ``perfgate rebaseline --day-history STORE`` measures
it instead, from the runs the history store holds of the same workload, version and
environment key in the stored design (fresh processes, the design the baseline was recorded
in), each run one job: the sd of the runs' mean log step summaries, on ``runs - 1`` degrees
of freedom.

That sd holds each run's repeat noise (``σ²/n``) beside the day effect, and any real change
of speed between the runs' commits too, so it is an upper bound of the day term: the gate
that uses it can lose power to a drifting history, never its false-alarm rate. Runs with
uncommitted changes are left out; the latest :data:`MAX_RUNS` are used.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from perfgate.model.baseline import MIN_DAY_RUNS, DayVariation
from perfgate.model.errors import UsageError
from perfgate.model.repeat import MEDIAN, PER_STEP

MAX_RUNS = 30
"""The latest runs used: enough degrees of freedom (29) that the t quantile is near the
normal's, recent enough to describe the runner as it is."""

_COLUMNS = {PER_STEP: "per_step_ms", MEDIAN: "median_ms"}


def day_variation(rows: pd.DataFrame, *, workload: str, workload_version: int, environment_key: str,
                  source: str, max_runs: int = MAX_RUNS) -> DayVariation:
    """The job-to-job variation of ``workload`` (at ``workload_version`` in ``environment_key``)
    from ``rows``, the long table of :func:`perfgate.analysis.history.load`.

    A run is one job: its repeats' logs are averaged per statistic, as the gate averages
    them, and the sd is taken over the latest ``max_runs`` runs (by date, then run id) that
    have every statistic. Fewer than :data:`~perfgate.model.baseline.MIN_DAY_RUNS` such runs
    is a :class:`UsageError` that says how many there are."""
    if max_runs < MIN_DAY_RUNS:
        raise ValueError(f"max_runs must be at least {MIN_DAY_RUNS}, got {max_runs}")
    mine = rows[(rows["workload"] == workload) & (rows["workload_version"] == workload_version)
                & (rows["environment_key"] == environment_key) & (rows["design"] == "stored")
                & (rows["phase"] == "step") & ~rows["dirty"].fillna(False).astype(bool)]  # unknown (<NA>): kept
    columns = list(_COLUMNS.values())
    values = mine[columns].astype("float64")
    usable = (np.isfinite(values) & (values > 0)).all(axis=1)
    logs = mine.loc[usable, ["run_id", "date"]].assign(**{c: np.log(values.loc[usable, c]) for c in columns})
    runs = logs.groupby("run_id", sort=False).agg(date=("date", "first"), **{c: (c, "mean") for c in columns})
    runs = runs.reset_index().sort_values(["date", "run_id"], kind="stable").tail(max_runs)
    found = len(runs)
    if found < MIN_DAY_RUNS:
        raise UsageError(
            f"{workload}: the history store {source} holds {found} run(s) of version {workload_version} in "
            f"{environment_key} in the stored design, and measuring the day-to-day variation takes at least "
            f"{MIN_DAY_RUNS}; record more with `perfgate history record`")
    sd = {statistic: float(runs[column].std(ddof=1)) for statistic, column in _COLUMNS.items()}
    if not all(math.isfinite(v) and v <= 1.0 for v in sd.values()):
        raise UsageError(f"{workload}: the runs in the history store {source} vary by more than a factor e "
                         "from job to job; nothing was recorded")
    first, last = runs["date"].iloc[0], runs["date"].iloc[-1]
    return DayVariation(sd, found, _day(first), _day(last), source)


def _day(value: object) -> str:
    stamp = pd.Timestamp(value)  # a date column value: Timestamp or NaT
    return "unknown" if pd.isna(stamp) else stamp.strftime("%Y-%m-%d")
