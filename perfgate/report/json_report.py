"""The gate's outcome as JSON: the same content as the markdown, for machines."""

from __future__ import annotations

import dataclasses
import math
from statistics import median
from typing import Any

from perfgate.analysis.counters import CounterChange
from perfgate.analysis.outcome import GateOutcome, WorkloadComparison
from perfgate.analysis.stats import LogRatio
from perfgate.model.repeat import MEDIAN, PER_STEP, STATISTICS
from perfgate.model.verdict import POLICY, run_policy
from perfgate.model.version import __version__
from perfgate.report.sides import row_sides, samples_sides
from perfgate.report.wording import side_modes, step_estimate

REPORT_KIND = "perfgate.gate-report"
REPORT_SCHEMA_VERSION = 2
"""2: the phases in time per step (``*_per_step_ms``) beside their medians, the step's two
statistics (``step.statistics``), both sides' throughput and SM clocks. Added since, without
a new version (a reader of 2 ignores them): ``step.sides``, the sides the reports print
beside the estimates, and ``modes``, the sides whose time per step is bimodal."""


def _finite(value: Any) -> Any:
    """JSON has no NaN or infinity: a number that is not finite (an sd not estimated, a
    slowdown not detectable with this noise) is written as null."""
    return value if not isinstance(value, float) or math.isfinite(value) else None


def _estimate(est: LogRatio | None) -> dict[str, Any] | None:
    if est is None:
        return None
    data = {k: _finite(v) for k, v in dataclasses.asdict(est).items()}
    data["outliers_current"] = list(est.outliers_current)
    data["excluded_baseline"] = [list(p) for p in est.excluded_baseline]
    return data


def _change(ch: CounterChange) -> dict[str, Any]:
    return {"phase": ch.phase, "counter": ch.counter, "base": _finite(ch.before), "head": _finite(ch.after),
            "changed": list(ch.changed), "failed": ch.failed, "reason": ch.reason}


def _sides(c: WorkloadComparison) -> dict[str, Any]:
    """The two sides the reports print beside the step's estimates (``perfgate.report.sides``):
    ``{statistic: [reference, other]}`` and ``samples_per_s``; null where a statistic has none."""
    out: dict[str, Any] = {}
    for statistic in STATISTICS:
        shown = row_sides(c, "step", statistic, step_estimate(c, statistic))
        out[statistic] = None if shown is None else [shown.before, shown.after]
    assert c.time is not None
    sps = samples_sides(c, step_estimate(c, PER_STEP) or c.time.estimate)
    out["samples_per_s"] = None if sps is None else [sps.before, sps.after]
    return out


def _workload(c: WorkloadComparison, outcome: GateOutcome) -> dict[str, Any]:
    out: dict[str, Any] = {
        "workload": c.workload,
        "verdict": c.verdict.value,
        "fails_check": POLICY[c.verdict].fails(outcome.config),
        "reason": c.reason,
        "headline": c.headline,
        "device": c.device,
        "environment_key": c.environment_key,
        "baseline_path": c.baseline_path,
        "overrides": dict(c.overrides),
        "differences": {k: list(v) for k, v in c.differences.items()},
        "labels": [label.to_dict() for label in c.labels],
        "left_out": list(c.left_out),
        "progress": c.progress,
        "design": c.design or None,
        "against": c.against,
        "since_baseline": c.since_baseline,
        "environment_differences": {k: list(v) for k, v in c.environment_differences.items()},
        "counters": None if c.counters is None else [_change(ch) for ch in c.counters],
        "counters_note": c.counters_note,
        "clocks_mhz": dict(c.clocks),
    }
    if c.time is not None:
        out["step"] = {
            "verdict": c.time.verdict.value,
            "reason": c.time.reason,
            "statistic": c.time.statistic,
            "estimate": _estimate(c.time.estimate),
            "alpha_used": c.time.alpha_used,
            "min_detectable_slowdown": _finite(c.time.mde),
            "look": c.time.look,
            "count": c.time.count,
            "looks": c.time.looks,
            "pass_bound": _finite(c.time.pass_bound),
            "statistics": {name: {"verdict": d.verdict.value, "reason": d.reason, "estimate": _estimate(d.estimate),
                                  "pass_bound": _finite(d.pass_bound)} for name, d in c.time.by_statistic.items()},
            "sides": _sides(c),
        }
        out["gated_phases"] = {p: {"verdict": d.verdict.value, "reason": d.reason, "estimate": _estimate(d.estimate)}
                               for p, d in c.gated.items()}
        out["phases"] = [
            {
                "phase": row.phase,
                "baseline_per_step_ms": row.baseline_ms,
                "current_per_step_ms": row.current_ms,
                "baseline_median_ms": row.baseline_median_ms,
                "current_median_ms": row.current_median_ms,
                "share": row.share,
                "tested": row.flag.tested if row.flag else False,
                "flagged": row.flag.flagged if row.flag else False,
                "q_value": row.flag.q_value if row.flag else None,
                "estimate": _estimate(row.flag.estimate) if row.flag else None,
            }
            for row in c.phases
        ]
    out["modes"] = [{"side": side, "low_ms": m.low_ms, "high_ms": m.high_ms, "low_count": m.low_count,
                     "high_count": m.high_count, "separation": _finite(m.separation)} for side, m in side_modes(c)]
    if c.memory is not None:
        out["memory"] = {"verdict": c.memory.verdict.value if c.memory.verdict else None,
                         "ratio": c.memory.ratio, "reason": c.memory.reason}
    if c.current is not None:
        out["current_step_per_step_ms"] = c.current.per_repeat("step")
        out["current_step_medians_ms"] = c.current.per_repeat("step", MEDIAN)
        out["current_samples_per_s"] = c.current.samples_per_s
    if c.baseline is not None and c.time is not None:
        out["baseline_samples_per_s"] = median(r.samples_per_s for rec in c.baseline.recordings for r in rec.repeats)
    return out


def outcome_to_dict(outcome: GateOutcome) -> dict[str, Any]:
    shown = run_policy(outcome.exit_code, outcome.config)
    return {
        "kind": REPORT_KIND,
        "schema_version": REPORT_SCHEMA_VERSION,
        "perfgate_version": __version__,
        "headline": outcome.headline,
        "exit_code": outcome.exit_code,
        "check": {"state": shown.state, "conclusion": shown.conclusion, "fails": shown.fails},
        "look": outcome.look.number,
        "looks": outcome.look.looks,
        "look_count": outcome.look.count,
        "look_unit": outcome.look.unit,
        "planned_looks": list(outcome.look.schedule.counts),
        "spending_gamma": outcome.look.schedule.gamma,
        "stopped": outcome.stopped,
        "measuring": outcome.cost.to_dict() if outcome.cost is not None else None,
        "config": {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(outcome.config).items()},
        "workloads": [_workload(c, outcome) for c in outcome.comparisons],
    }
