"""``perfgate doctor --fleet``: this runner against the other runners of its GPU model and
environment key, on each workload, from the shared history store.

Per workload, :func:`perfgate.store.history_fleet.fleet_times` reads each runner's most
recent runs (their times per step) of the same GPU model (this machine's, as ``perfgate
history record`` stores it: the fingerprint's GPU name on CUDA, none on the CPU) and
environment key, and :func:`perfgate.analysis.fleet.compare_to_fleet` puts this runner's
beside the others'. A runner beyond the fleet's spread is a ``warn`` line: worth a look
(a slow card, a bad slot, a throttled host), never a failure. A workload that cannot be
compared (no runs of it, a fleet of one, too few runs) is ``unknown``, with the reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from perfgate.analysis.fleet import FleetComparison, compare_to_fleet
from perfgate.gate.doctor.card import OK, UNKNOWN, WARN
from perfgate.model.environment import Environment
from perfgate.store.history_fleet import FLEET_RUNS, fleet_times
from perfgate.store.history_sql import Location
from perfgate.store.history_values import recorded_gpu_model


@dataclass(frozen=True)
class FleetReport:
    """This runner against the fleet: one comparison per workload, in the order asked."""

    store: str
    runner: str
    hardware: str
    """This machine's GPU model, or its CPU model on the CPU device."""
    environment_key: str
    runs: int
    comparisons: tuple[FleetComparison, ...]
    skipped: tuple[str, ...] = ()
    """Runs the store's reader left out (a value ``record`` would not have stored), one line each."""

    @property
    def beyond(self) -> list[FleetComparison]:
        return [c for c in self.comparisons if c.beyond_spread]

    def lines(self) -> list[str]:
        """The report as text: a heading, a line per workload with its status, a verdict."""
        out = [f"perfgate doctor --fleet: runner {self.runner} ({self.hardware}, environment {self.environment_key}); "
               f"each runner's last {self.runs} runs in {self.store}"]
        out.extend(f"  {status_of(c):<8} {c.line()}" for c in self.comparisons)
        compared = sum(c.share is not None for c in self.comparisons)
        if self.beyond:
            out.append(f"{len(self.beyond)} of {len(self.comparisons)} workloads beyond the fleet's spread: a warning, "
                       "not a failure")
        elif compared:
            out.append(f"within the fleet's spread on the {compared} workload(s) compared")
        else:
            out.append("nothing compared: no workload has runs of this runner and of another runner with this GPU "
                       "model and environment key in the history")
        return out


def status_of(comparison: FleetComparison) -> str:
    """``warn`` beyond the fleet's spread, ``ok`` compared and within it, ``unknown`` not compared."""
    if comparison.share is None:
        return UNKNOWN
    return WARN if comparison.beyond_spread else OK


def compare_with_fleet(store: Location | Path | str, runner: str, environment: Environment,
                       workloads: Sequence[str], *, runs: int = FLEET_RUNS,
                       environment_key: str | None = None) -> FleetReport:
    """``runner`` (on this machine, whose fingerprint is ``environment``) against the other
    runners of its GPU model and environment key (``environment_key``: another key than
    the fingerprint's) on each of ``workloads``, from each runner's ``runs`` most recent runs."""
    gpu_model = recorded_gpu_model(environment.device, environment)
    hardware = gpu_model or environment.cpu_model
    key = environment_key or environment.key()
    comparisons = []
    skipped: list[str] = []
    for workload in workloads:
        found = fleet_times(store, workload, gpu_model, key, runs=runs)
        skipped.extend(found.skipped)
        if not found.times_ms:
            comparisons.append(FleetComparison(workload, hardware, runner, runs=0, others=0,
                                               note="no runner has recorded it on this GPU model and environment "
                                                    "key in the history"))
        else:
            comparisons.append(compare_to_fleet(workload, hardware, runner, found.times_ms))
    return FleetReport(str(store), runner, hardware, key, runs, tuple(comparisons), tuple(skipped))
