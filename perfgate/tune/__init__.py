"""The DataLoader advisor, ``perfgate tune-loader``: which loader settings make a workload faster, beyond the noise.

``settings`` lists the settings to try and why some are skipped, ``budget`` plans how many
fit the time budget, ``search`` runs the two stages in alternating rounds, ``decision``
judges them paired by round (:func:`recommend`), ``table`` renders the report and
``advisor`` measures a real workload (:func:`tune_loader`). Everything but
:func:`tune_loader` is pure (no torch, no I/O); it imports :mod:`perfgate.measure.runner`
when called. The names the CLI and the tests use are re-exported here.
"""

from perfgate.tune.advisor import TuneResult, tune_loader
from perfgate.tune.budget import DEFAULT_REPEATS, MIN_REPEATS, StagePlan, plan_stage
from perfgate.tune.decision import (
    DEFAULT_ALPHA,
    DEFAULT_MARGIN,
    Comparison,
    Outcome,
    Recommendation,
    SettingResult,
    recommend,
)
from perfgate.tune.search import Failure, Sample, run_tuning
from perfgate.tune.settings import (
    LOADER_KEYS,
    candidate_settings,
    current_setting,
    describe,
    set_line,
    skip_reason,
    worker_counts,
)
from perfgate.tune.table import render_tune_table

__all__ = [
    "DEFAULT_ALPHA",
    "DEFAULT_MARGIN",
    "DEFAULT_REPEATS",
    "LOADER_KEYS",
    "MIN_REPEATS",
    "Comparison",
    "Failure",
    "Outcome",
    "Recommendation",
    "Sample",
    "SettingResult",
    "StagePlan",
    "TuneResult",
    "candidate_settings",
    "current_setting",
    "describe",
    "plan_stage",
    "recommend",
    "render_tune_table",
    "run_tuning",
    "set_line",
    "skip_reason",
    "tune_loader",
    "worker_counts",
]
