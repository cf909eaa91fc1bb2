"""``perfgate calibrate``: what this machine's noise means for a gate.

From A/A repeats of one workload (the same code measured N times, one process each) it
reports the run-to-run variation of the step and of each phase, the number of repeats a
gate needs to catch a slowdown of δ with the requested power, and the verdict of a
split-half A/A gate (even repeats against odd ones), which should never be REGRESSION.
"""

from __future__ import annotations

import dataclasses

from perfgate.analysis.blocks import blocks_needed, paired_min_detectable
from perfgate.analysis.decide import GateConfig, alpha_for_look, decide_time
from perfgate.analysis.stats import log_ratio, repeats_needed
from perfgate.analysis.summary import summarise
from perfgate.model.result import RESIDUAL, ROWS, RunResult
from perfgate.text.units import ms, percent, table


def _needed(sd: float, delta: float, alpha: float, power: float, **kw: float | int) -> str:
    try:
        return str(repeats_needed(sd, delta, alpha, power, **kw))  # type: ignore[arg-type]
    except ValueError:
        return "not reachable"


def _paired_lines(sd: float, delta: float, alpha: float, power: float, blocks: int,
                  config: GateConfig) -> list[str]:
    """What the paired design can detect here: the δ this machine supports."""
    looks = [blocks] if config.looks == 1 else [blocks, 2 * blocks]
    detectable = [paired_min_detectable(sd, j, alpha, power) for j in looks]
    needed = blocks_needed(sd, delta, alpha, power)
    where = " and ".join(f"{percent(m, signed=True)} with {j} blocks" for j, m in zip(looks, detectable))
    supported = detectable[-1]
    lines = [
        f"paired design (ABBA blocks of four processes; this run-to-run sd is an upper bound, since the "
        f"blocks remove drift between them): detects about {where} ({power:.0%} power)",
        f"  blocks needed to detect {delta:.0%}: {needed if needed is not None else 'not reachable'}",
    ]
    if supported > delta:
        lines.append(f"  this machine supports delta of about {supported:.0%} with the default blocks: with "
                     f"--delta {delta:g} most gates of a true {delta:.0%} slowdown end INCONCLUSIVE; raise "
                     f"--delta to {supported:.2g} or --blocks to {needed if needed is not None else 'far more'}")
    else:
        lines.append(f"  this machine supports delta of {delta:.0%} with {looks[-1]} blocks")
    return lines


def calibration_report(result: RunResult, config: GateConfig, *, power: float = 0.8, blocks: int = 6) -> str:
    summary = summarise(result)
    n = len(result.repeats)
    lines = [
        f"calibrate {result.workload} on {result.device} ({result.environment.key()}): "
        f"{n} A/A repeats x {summary.steps} steps",
        "",
    ]
    rows = [[row, ms(summary.median_ms[row]), percent(summary.spread[row]) if summary.spread[row] is not None else "—"]
            for row in ROWS if row != RESIDUAL]
    lines.append(table(["series", "median ms", "run-to-run (sd of log)"], rows, "lrr"))
    sd = summary.spread["step"]
    if sd is None:
        return "\n".join(lines) + "\n"
    alpha = alpha_for_look(config, 1)
    delta = config.delta
    lines += [
        "",
        f"repeats per side to detect a {delta:.0%} slowdown with {power:.0%} power "
        f"(one workload, one-sided alpha {alpha:g} = {config.alpha:g} over {config.looks} look(s)):",
        f"  same-job comparison (no day-to-day drift):           {_needed(sd, delta, alpha, power)}",
        f"  stored baseline, 1 recording, assumed day sd {config.assumed_day_sd_log:.1%}: "
        f"{_needed(sd, delta, alpha, power, day_sd_log=config.assumed_day_sd_log)}",
        f"  stored baseline, 3 recordings:                       "
        f"{_needed(sd, delta, alpha, power, day_sd_log=config.assumed_day_sd_log, baseline_recordings=3)}",
        f"  (a slowdown of exactly delta passes the point-estimate rule only half the time: "
        f"size for the slowdown you must catch, e.g. --delta {2 * delta:g})",
        "",
        *_paired_lines(sd, delta, alpha, power, blocks, config),
    ]
    steps = summary.per_repeat("step")
    half_base, half_cur = steps[0::2], steps[1::2]
    single = dataclasses.replace(config, looks=1)
    est = log_ratio(half_cur, [half_base], confidence=config.confidence,
                    assumed_day_sd_log=0.0, outlier_sd=config.outlier_sd)
    decision = decide_time({result.workload: est}, single, 1)[result.workload]
    lines += [
        "",
        f"split-half A/A gate (odd repeats against even ones, same job, no day term): "
        f"{decision.verdict.value}: {decision.reason}",
    ]
    return "\n".join(lines) + "\n"
