"""The measuring job as GitHub's Actions API reports it: when it started and when it ended.

The judge reads these times from the API, never from the artifact: the measuring job runs
the pull request's code, so every instant its files record is the pull request's to write.
They decide whether a gate that ended undecided was stopped by its wall-time budget (the
job must have run at least that long) and which recorded instants are possible at all (a
repeat's ``started_at`` inside the job's run)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

__all__ = ["MeasuringJob"]


@dataclass(frozen=True)
class MeasuringJob:
    """The measuring job's start and end, both timezone-aware (``completed_at`` not before
    ``started_at``)."""

    started_at: datetime
    completed_at: datetime

    def __post_init__(self) -> None:
        for name in ("started_at", "completed_at"):
            value = getattr(self, name)
            if not isinstance(value, datetime) or value.tzinfo is None:
                raise ValueError(f"MeasuringJob.{name} must be a timezone-aware datetime, got {value!r}")
        if self.completed_at < self.started_at:
            raise ValueError(f"MeasuringJob: completed at {self.completed_at.isoformat()}, before it started at "
                             f"{self.started_at.isoformat()}")

    @property
    def seconds(self) -> float:
        """How long the job ran, by the API's clock."""
        value = (self.completed_at - self.started_at).total_seconds()
        assert math.isfinite(value)
        return value

    def holds(self, moment: datetime) -> bool:
        """Whether ``moment`` lies within the job's run (the API reports whole seconds: one second's slack each side)."""
        return (self.started_at.timestamp() - 1.0) <= moment.timestamp() <= (self.completed_at.timestamp() + 1.0)
