"""A job: one workload to measure, with its parameters resolved, what the user set, and
where its data lies."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfgate.model.script import Script
from perfgate.model.workload import PHASES, Params, Workload

INJECTED = "inject_ms"
"""The key of a result's ``overrides`` that marks slowdowns injected by ``perfgate selftest``."""


@dataclass(frozen=True)
class Job:
    """One workload to measure, with its parameters already resolved and validated.

    ``inject_ms`` (``perfgate selftest`` only) adds that many milliseconds per measured
    step inside the named phases. A job with an injection carries it in its
    ``overrides`` under :data:`INJECTED`, so every result assembled from it is marked
    and can never pass for a measurement of the workload or become a baseline; without
    one, ``overrides`` never holds that key.
    """

    workload: Workload
    params: Params
    overrides: Mapping[str, Any]
    data_root: Path | None = None
    inject_ms: Mapping[str, float] = field(default_factory=dict)
    script: Script | None = None
    """A user's script run as it is (``perfgate run --script``); its ``workload`` stands for it."""

    def __post_init__(self) -> None:
        inject: dict[str, float] = {}
        for phase, value in self.inject_ms.items():
            if phase not in PHASES:
                raise ValueError(f"inject_ms: unknown phase {phase!r}; phases: {', '.join(PHASES)}")
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 <= value < math.inf):
                raise ValueError(f"inject_ms: {phase} must be a finite number of milliseconds >= 0, got {value!r}")
            if value > 0:
                inject[phase] = float(value)
        overrides = {k: v for k, v in self.overrides.items() if k != INJECTED}
        if inject:
            overrides[INJECTED] = dict(inject)
        object.__setattr__(self, "inject_ms", inject)
        object.__setattr__(self, "overrides", overrides)
