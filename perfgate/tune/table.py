"""The report of ``perfgate tune-loader``: the settings measured, how each compares, the decision.

Per setting: its throughput (geometric mean of the repeats' samples/s with a 95% t interval
on the log scale), the data wait's share of the step, the ratio to the current setting
with its interval and the estimator that gave it; then the settings not measured or not
judged and why, the decision and, with a recommendation, the ``--set`` line and the
DataLoader arguments for one's own training code. Pure: it returns a string.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from scipy import special

from perfgate.text.units import table
from perfgate.tune.decision import Outcome, Recommendation, SettingResult, interval_text
from perfgate.tune.settings import LOADER_KEYS, describe, effective, setting_key


def _geo_interval(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """Geometric mean and its t interval from per-repeat values (log scale)."""
    logs = [math.log(v) for v in values]
    mean = sum(logs) / len(logs)
    if len(logs) < 2:
        return math.exp(mean), math.nan, math.nan
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1))
    half = float(special.stdtrit(len(logs) - 1, 0.5 + confidence / 2)) * sd / math.sqrt(len(logs))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def _throughput(values: Sequence[float]) -> str:
    if not values:
        return "—"
    mean, low, high = _geo_interval(values)
    if math.isnan(low):
        return f"{mean:.1f}"
    return f"{mean:.1f} [{low:.1f}, {high:.1f}]"


def render_tune_table(results: Sequence[SettingResult], recommendation: Recommendation, *,
                      title: str = "", notes: Sequence[str] = ()) -> str:
    """The advisor's report: per setting its throughput (geometric mean of the repeats' samples/s
    with a 95% interval), the data wait's share of the step, the ratio to the current setting
    with its interval and the estimator that gave it ("paired by round, 3 rounds"); then the
    settings not measured and why, the decision and the ``--set`` line."""
    current = next((r.setting for r in results if r.is_current), None)
    by_key = {setting_key(c.setting): c for c in recommendation.comparisons}
    best_key = setting_key(recommendation.best) if recommendation.best is not None else None
    level = recommendation.comparisons[0].confidence if recommendation.comparisons else None
    vs_header = f"vs current [{level * 100:.1f}% CI]" if level is not None else "vs current"
    rows = []
    measured = [r for r in results if r.samples_per_s and (r.is_current or not r.skipped)]
    measured.sort(key=lambda r: (not r.is_current, r.stage, effective(r.setting)[0]))
    for r in measured:
        c = by_key.get(setting_key(r.setting))
        if r.is_current:
            label, vs, how, flag = f"current: {describe(r.setting)}", "—", "—", ""
        else:
            label = describe(r.setting, current)
            vs = interval_text(c) if c is not None else "not judged"
            how = c.estimator if c is not None else ""
            flags = []
            if c is not None and c.faster:
                flags.append("faster (recommended)" if setting_key(r.setting) == best_key else "faster")
            if c is not None and c.set_aside:
                flags.append(f"{c.set_aside} outlier repeat(s) set aside")
            flag = "; ".join(flags)
        share = f"{r.data_wait_share * 100:.1f}%" if r.data_wait_share is not None else "—"
        rows.append([label, str(r.stage), str(len(r.samples_per_s)), _throughput(r.samples_per_s), share, vs, how,
                     flag])
    lines = [title] if title else []
    if rows:
        lines.append(table(["setting", "stage", "repeats", "samples/s [95% CI]", "data wait", vs_header, "estimator",
                            ""], rows, "lrrrrrll"))
    skipped = [r for r in results if r.skipped and not r.is_current]
    if skipped:
        lines += ["", "not measured or not judged:"]
        lines += [f"  {describe(r.setting, current)}: {r.skipped}" for r in skipped]
    lines += ["", f"decision: {recommendation.decision}"]
    if recommendation.kind == Outcome.RECOMMEND:
        if recommendation.set_line:
            lines.append(f"to use it: {recommendation.set_line}")
        if recommendation.best is not None:
            best = recommendation.best
            kwargs = ", ".join(f"{k}={best[k]!r}" for k in LOADER_KEYS
                               if k in ("num_workers", "pin_memory")
                               or (int(best["num_workers"]) > 0 and best[k] is not None))
            lines.append(f"in your own training code: DataLoader(..., {kwargs})")
    lines += [f"note: {n}" for n in notes]
    return "\n".join(lines).rstrip() + "\n"
