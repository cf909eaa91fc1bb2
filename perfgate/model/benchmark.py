"""What a result read from pytest-benchmark JSON says in its ``data``, typed.

``perfgate.store.benchmark_json`` writes it; the comparison reads it back through
:func:`benchmark_data`, never as a loose dict.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

KIND = "pytest-benchmark"
"""``data["kind"]`` of a result read from pytest-benchmark JSON."""


class Statistics(StrEnum):
    """Which statistics fit a pytest-benchmark result (``data["statistics"]``)."""

    PROCESSES = "processes"
    """Several runs, one repeat each: judged like perfgate's own repeats."""
    BLOCKS = "round-blocks"
    """One run, its rounds cut into contiguous blocks, one repeat each."""
    SUMMARY = "summary"
    """One run without (enough) raw rounds: its summary statistics only."""


@dataclass(frozen=True)
class RunSummary:
    """One pytest-benchmark run's summary statistics, in milliseconds."""

    mean_ms: float
    stddev_ms: float
    rounds: int


@dataclass(frozen=True)
class BenchmarkData:
    benchmark: str | None
    statistics: str | None
    """A :class:`Statistics` value, or what an unknown file said (refused when compared)."""
    processes: int | None
    sources: tuple[Mapping[str, Any], ...]

    @property
    def runs_per_side(self) -> str:
        if self.statistics == Statistics.PROCESSES:
            return f"{self.processes} runs"
        return "one run"

    def run_summary(self, what: str) -> RunSummary:
        """The (mean, sd, rounds) of a single run; ValueError when it is not one well-formed run."""
        if not (len(self.sources) == 1 and isinstance(self.sources[0], Mapping)):
            raise ValueError(f"{what}: expected the summary of exactly one pytest-benchmark run")
        src = self.sources[0]
        mean, sd, n = src.get("mean_ms"), src.get("stddev_ms"), src.get("rounds")
        if not (isinstance(mean, (int, float)) and isinstance(sd, (int, float)) and isinstance(n, (int, float))) \
                or any(isinstance(v, bool) for v in (mean, sd, n)) or n != int(n):
            raise ValueError(f"{what}: the run's summary (mean_ms, stddev_ms, rounds) is missing or not numbers")
        return RunSummary(float(mean), float(sd), int(n))


def benchmark_data(data: Mapping[str, Any]) -> BenchmarkData | None:
    """The typed view of a result's ``data``; None when it was not read from pytest-benchmark."""
    if data.get("kind") != KIND:
        return None
    sources = data.get("sources")
    processes = data.get("processes")
    statistics = data.get("statistics")
    return BenchmarkData(
        benchmark=data.get("benchmark") if isinstance(data.get("benchmark"), str) else None,
        statistics=statistics if isinstance(statistics, str) else None,
        processes=processes if isinstance(processes, int) and not isinstance(processes, bool) else None,
        sources=tuple(sources) if isinstance(sources, list) else (),
    )
