"""The verdicts a gate gives a workload; what each means is in docs/errors.md."""

from __future__ import annotations

import enum


class Verdict(str, enum.Enum):
    REGRESSION = "REGRESSION"
    PASS = "PASS"
    INCONCLUSIVE = "INCONCLUSIVE"
    IMPROVED = "IMPROVED"
    INCOMPARABLE = "INCOMPARABLE"
    NO_BASELINE = "NO_BASELINE"
    ERROR = "ERROR"
