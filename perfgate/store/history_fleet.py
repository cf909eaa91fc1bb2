"""Each runner's recent times per step of one workload on one GPU model and environment key,
read from the history store: what ``perfgate doctor --fleet`` compares this runner with
(:func:`perfgate.analysis.fleet.compare_to_fleet`).

One statement serves both engines (:mod:`perfgate.store.history_sql`): the ``step`` row's
time per step of every repeat of the runs of the workload with that GPU model (none: a
CPU run) and environment key that name their runner, each runner's runs ranked newest
first by the time they were measured (``created_at``, then the run id), and the ``runs``
newest kept. A window function ranks them (SQLite 3.25 and PostgreSQL have it). Each
run's value is the median over its repeats, as ``perfgate.analysis.history.run_series``
takes it; the median is taken here, not in SQL (SQLite has none).

The rows read are checked as every reader checks them
(:func:`perfgate.store.history_values.readable`): a run with a value ``record`` would not
have stored is left out and named in :attr:`FleetTimes.skipped`. Runs recorded at schema
version 1 name no runner and hold no time per step: a store at that version has none.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path

from perfgate.model.errors import UsageError
from perfgate.store.history import location_of, reading
from perfgate.store.history_sql import BUSY_TIMEOUT_S, Location, Tx
from perfgate.store.history_values import readable

FLEET_RUNS = 20
"""Each runner's most recent runs compared, by default."""
MAX_FLEET_RUNS = 10_000

COLUMNS = ("run_id", "date", "workload", "runner", "repeat", "per_step_ms")
"""The columns :data:`QUERY` returns (``date``: the run's ``created_at``)."""

QUERY = """
SELECT run_id, created_at, workload, runner, repeat, per_step_ms FROM (
    SELECT r.run_id, r.created_at, r.workload, r.runner, p.repeat, m.per_step_ms,
           dense_rank() OVER (PARTITION BY r.runner ORDER BY r.created_at DESC, r.run_id DESC) AS recent
    FROM runs r
    JOIN repeats p ON p.run_id = r.run_id
    JOIN phase_times m ON m.run_id = p.run_id AND m.repeat = p.repeat
    WHERE r.workload = ? AND r.environment_key = ? AND coalesce(r.gpu_model, '') = ?
      AND r.runner IS NOT NULL AND m.phase = 'step' AND m.per_step_ms IS NOT NULL
) ranked
WHERE recent <= ?
ORDER BY runner, created_at, run_id, repeat
"""
"""Schema version 2: the ``step`` rows of each runner's ``runs`` most recent runs, oldest first."""


@dataclass(frozen=True)
class FleetTimes:
    """What :func:`fleet_times` returns: per runner, its runs' times per step (ms, the median
    over each run's repeats), oldest first; and the runs left out, one line each."""

    times_ms: dict[str, list[float]] = field(default_factory=dict)
    skipped: tuple[str, ...] = ()


def fleet_times(store: Location | Path | str, workload: str, gpu_model: str | None, environment_key: str, *,
                runs: int = FLEET_RUNS, timeout_s: float = BUSY_TIMEOUT_S) -> FleetTimes:
    """Each runner's ``runs`` most recent runs of ``workload`` on ``gpu_model`` (None: the
    CPU) and ``environment_key``: their times per step. An empty store holds none; a store
    that cannot be opened, is not a perfgate history, or is of a newer schema is one
    FileFormatError line, as for every reader."""
    if isinstance(runs, bool) or not isinstance(runs, int) or not 1 <= runs <= MAX_FLEET_RUNS:
        raise UsageError(f"--fleet-runs must be an integer from 1 to {MAX_FLEET_RUNS}, got {runs!r}")

    def read(tx: Tx, version: int) -> list[tuple[object, ...]]:
        if version < 2:  # empty, or version 1: no runner, no time per step
            return []
        return [tuple(row) for row in tx.execute(QUERY, (workload, environment_key, gpu_model or "", runs))]

    location = location_of(store)
    rows, skipped = readable(location, reading(location, read, timeout_s=timeout_s), COLUMNS)
    repeats: dict[str, dict[object, list[float]]] = {}
    for run_id, _date, _workload, runner, _repeat, per_step in rows:
        assert isinstance(runner, str) and isinstance(per_step, (int, float))  # checked by readable
        repeats.setdefault(runner, {}).setdefault(run_id, []).append(float(per_step))
    times = {runner: [statistics.median(values) for values in by_run.values()] for runner, by_run in repeats.items()}
    return FleetTimes(times, skipped)
