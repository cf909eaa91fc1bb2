"""Comparing current results with baselines: from summaries to one verdict per workload.

Pure: it takes results and baselines already loaded and returns a :class:`GateOutcome`;
no torch, no files, no printing. Before any statistics, a workload must be comparable
with its baseline (same workload version, same parameters, same environment key);
otherwise it is INCOMPARABLE and the outcome names exactly what differs.

Results read from pytest-benchmark JSON (``perfgate.store.benchmark_json``) say in their
``data`` which statistics fit them: several runs are judged like perfgate's own repeats;
a single run by the medians of blocks of its rounds, or from its summary statistics when
the raw rounds are missing. The verdict's reason names the statistics used. They have no
phases, so only the step is shown and gated phases do not apply.

An entry may carry two counted runs (:class:`Counted`, exact counters from
``perfgate.analysis.counters``): the base side's and the head's (paired design), or the
baseline's, stored beside it by ``perfgate rebaseline``, and the current code's (stored
design, :func:`stored_counted`). A counter change that fails by the workload's
``flops_threshold``, ``launch_threshold`` and ``counters_off`` makes it a REGRESSION with
the counters' reason whatever the timing says (the timing decision stays in ``time`` and
in the reason); a change that does not fail is shown and the timing decides. Without
both runs the counters are None with the reason.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from statistics import median
from typing import Any

from perfgate.analysis.blocks import BlockValue, block_log_ratio, blocks_of
from perfgate.analysis.counted import counter_changes, counters_reason
from perfgate.analysis.decide import (
    GateConfig,
    Look,
    TimeDecision,
    combine_statistics,
    decide_time,
    FamilyKey,
    family_keys,
    flag_phases,
)
from perfgate.analysis.memory import Creep, creep_rule, decide_memory, memory_creep, missing_slopes, slope_recordable
from perfgate.analysis.diagnose import Label, diagnose
from perfgate.analysis.outcome import BlockEstimate, Counted, Entry, GateOutcome, PhaseRow, WorkloadComparison, settle
from perfgate.analysis.screening import median_clock, screen, screen_blocks
from perfgate.analysis.stats import LogRatio, SampleSummary, log_ratio, log_ratio_from_summaries
from perfgate.analysis.summary import WorkloadSummary, summarise
from perfgate.model.baseline import Baseline, param_differences
from perfgate.model.benchmark import BenchmarkData, Statistics, benchmark_data
from perfgate.model.repeat import MEDIAN, PER_STEP, ROWS, STATISTICS
from perfgate.model.result import RunResult
from perfgate.model.script import SCRIPT_MEASURED, script_path_of
from perfgate.model.verdict import Verdict
from perfgate.model.workload import PHASES
from perfgate.store.baselines import Lookup, updated_baseline

WORKLOAD_FIELDS = ("delta", "memory_threshold", "gate_phases", "phase_q", "phase_min_share",
                   "flops_threshold", "launch_threshold", "counters_off", "straggler_share")
"""The fields of a per-workload :class:`GateConfig` that ``compare`` uses; the others (α,
the looks, the estimation settings) are the whole run's and come from its own config."""


def day_term(baseline: Baseline, row: str, config: GateConfig, statistic: str = PER_STEP) -> tuple[float, float]:
    """The day sd and its degrees of freedom a stored estimate of ``row`` uses: the baseline's
    measured job-to-job variation for the step (``rebaseline --day-history``), else the
    assumed one (the phases always: the variation is measured on the step)."""
    day = baseline.day_variation
    if day is not None and row == "step" and statistic in day.sd_log:
        return day.sd_log[statistic], float(day.df)
    return config.assumed_day_sd_log, config.day_prior_df


def _estimate(current: Sequence[float], baseline: Baseline, row: str, config: GateConfig,
              statistic: str = PER_STEP) -> LogRatio:
    sd, df = day_term(baseline, row, config, statistic)
    return log_ratio(
        current,
        baseline.recording_values(row, statistic),
        confidence=config.confidence,
        assumed_day_sd_log=sd,
        day_prior_df=df,
        outlier_sd=config.outlier_sd,
    )


Estimator = Callable[[str, str], LogRatio]
"""One workload's estimate of a row (a phase, the residual or the step) under a statistic
(``perfgate.model.repeat.STATISTICS``) against its reference."""


def _stored_estimator(summary: WorkloadSummary, baseline: Baseline, config: GateConfig) -> Estimator:
    return lambda row, statistic: _estimate(summary.per_repeat(row, statistic), baseline, row, config, statistic)


def _block_values(summary: WorkloadSummary, row: str, statistic: str = PER_STEP) -> list[BlockValue]:
    values = []
    for r in summary.repeats:
        if r.block is None:
            raise ValueError(f"repeat {r.index + 1} has no ABBA block: not a paired measurement")
        values.append(BlockValue(r.block, r.summary_ms(statistic)[row]))
    return values


def _paired_estimator(summary: WorkloadSummary, base: WorkloadSummary, config: GateConfig,
                      estimate: BlockEstimate | None = None) -> Estimator:
    by = estimate or block_log_ratio
    return lambda row, statistic: by(_block_values(base, row, statistic), _block_values(summary, row, statistic),
                                     confidence=config.confidence)


def incomparable(result: RunResult, baseline: Baseline) -> dict[str, tuple[Any, Any]]:
    """Everything that must match before two runs are compared: ``{what: (baseline, current)}``."""
    diffs: dict[str, tuple[Any, Any]] = {}
    if baseline.workload_version != result.workload_version:
        diffs["workload version"] = (baseline.workload_version, result.workload_version)
    if baseline.device != result.device:
        diffs["device"] = (baseline.device, result.device)
    measured = SCRIPT_MEASURED if script_path_of(result.workload_source) is not None else ()
    for key, pair in param_differences(baseline.params, result.params).items():
        if key not in measured:  # a script's precision is its own edit: measured, not a reason to refuse
            diffs[f"param {key}"] = pair
    recorded = baseline.recordings[-1].data
    for key in ("kind", "content_hash"):
        if recorded.get(key) != result.data.get(key):
            diffs[f"data {key}"] = (recorded.get(key), result.data.get(key))
    current, stored = benchmark_data(result.data), benchmark_data(recorded)
    if current is not None and stored is not None and "data kind" not in diffs:
        # A repeat is a whole run on one side and a block of one run's rounds on the other.
        base_runs, cur_runs = stored.runs_per_side, current.runs_per_side
        if (base_runs == "one run") != (cur_runs == "one run"):
            diffs["data pytest-benchmark runs"] = (base_runs, cur_runs)
    booking = (_cuda_booking(r.phases_ms for rec in baseline.recordings for r in rec.repeats),
               _cuda_booking(r.phases_ms for r in result.repeats if r.timing == "cuda_events"))
    if None not in booking and booking[0] != booking[1]:
        diffs["CUDA step booking"] = booking
    env = baseline.recordings[-1].environment
    for key, pair in env.differences(result.environment).items():
        diffs[f"environment {key}"] = pair
    if not diffs and baseline.environment_key != result.environment.key():
        diffs["environment key"] = (baseline.environment_key, result.environment.key())
    return diffs


def _cuda_booking(series: Any) -> str | None:
    """How a side's CUDA repeats book the step: since the stall moved onto the step it delays,
    CUDA repeats hold ``host_data_wait`` beside the device-visible ``data_wait``; earlier ones
    booked a stall one step early. None: no CUDA repeat (nothing to tell)."""
    kinds = {"host_data_wait" in s for s in series if "device_busy" in s}
    if not kinds:
        return None
    return "stall on its own step" if kinds == {True} else (
        "stall one step early (recorded before perfgate 0.2; rebaseline)" if kinds == {False} else "mixed")


def _run_summary(data: BenchmarkData | None, what: str) -> SampleSummary:
    if data is None:
        raise ValueError(f"{what}: not a pytest-benchmark run")
    run = data.run_summary(what)
    return SampleSummary(run.mean_ms, run.stddev_ms, run.rounds)


def _step_estimate(result: RunResult, summary: WorkloadSummary, baseline: Baseline,
                   config: GateConfig, estimate: Estimator) -> tuple[LogRatio, str | None]:
    """The step's estimate and, for a pytest-benchmark result, which statistics gave it."""
    current = benchmark_data(result.data)
    if current is None:
        return estimate("step", PER_STEP), None
    recorded = [benchmark_data(rec.data) for rec in baseline.recordings]
    modes = {current.statistics, *(r.statistics if r else None for r in recorded)}
    origin = f"pytest-benchmark {current.benchmark or result.workload}"
    # One run a side: the day sd (the baseline's measured one when it has it) stands in for the
    # run-to-run variation, as day_term gives it to every stored estimate of the step.
    median_day, per_step_day = (day_term(baseline, "step", config, s)[0] for s in (MEDIAN, PER_STEP))
    source = "measured on this runner" if baseline.day_variation is not None else "assumed"
    if modes == {Statistics.PROCESSES}:
        est = _estimate(summary.per_repeat("step", MEDIAN), baseline, "step", config, MEDIAN)
        return est, (f"statistics: Welch on the per-run medians of {est.n_current} vs {est.n_baseline} "
                     f"{origin} runs, one process each")
    if modes == {Statistics.BLOCKS}:
        est = _estimate(summary.per_repeat("step", MEDIAN), baseline, "step", config, MEDIAN)
        return est, (f"statistics: one {origin} run per side, Welch on the medians of {est.n_current} vs "
                     f"{est.n_baseline} contiguous blocks of its rounds; run-to-run variation is not "
                     f"measured, {source} {median_day * 100:.1f}%")
    if modes <= {Statistics.BLOCKS, Statistics.SUMMARY}:
        est = log_ratio_from_summaries(
            _run_summary(current, "current"),
            [_run_summary(r, f"baseline recording {j + 1}") for j, r in enumerate(recorded)],
            confidence=config.confidence,
            assumed_day_sd_log=per_step_day,
        )
        return est, (f"statistics: one {origin} run per side, summary statistics only (no raw rounds, or "
                     f"too few for blocks), Welch on the log mean of {est.n_current} vs {est.n_baseline} "
                     f"rounds taken as independent (delta method); run-to-run variation is not measured, "
                     f"{source} {per_step_day * 100:.1f}%")
    raise ValueError(f"the current run and the baseline recordings mix single runs and several runs "
                     f"({', '.join(sorted(str(m) for m in modes))}); rebaseline without --append")


def _has_phases(summary: WorkloadSummary, baseline: Baseline) -> bool:
    """False for a measurement without phases (a micro-benchmark): all five are 0 everywhere."""
    return any(summary.per_step_ms[p] != 0 for p in PHASES) or any(
        v != 0 for rec in baseline.recordings for p in PHASES for v in rec.values(p))


def _closest(result: RunResult, others: Sequence[Baseline]) -> tuple[Baseline, dict[str, tuple[Any, Any]]]:
    scored = [(len(d), i, o, d) for i, o in enumerate(others) for d in [incomparable(result, o)]]
    _, _, best, diffs = min(scored, key=lambda t: (t[0], t[1]))
    return best, diffs


def _describe(diffs: Mapping[str, tuple[Any, Any]]) -> str:
    return "; ".join(f"{k}: baseline {a!r}, current {b!r}" for k, (a, b) in diffs.items())


def _phase_rows(summary: WorkloadSummary, baseline: Baseline, config: GateConfig,
                estimate: Estimator) -> tuple[PhaseRow, ...]:
    """The phase table, in time per step: a stall on every fourth step is a quarter of the
    stall per step in data_wait, where the median would show nothing."""
    def reference(row: str, statistic: str) -> float:
        return median(v for rec in baseline.recordings for v in rec.values(row, statistic))

    if not _has_phases(summary, baseline):
        # A micro-benchmark (pytest-benchmark): the step alone, by the median its verdict uses
        # (the residual would be the whole step).
        return (PhaseRow("step", reference("step", MEDIAN), summary.median_ms["step"], 1.0, None,
                         reference("step", MEDIAN), summary.median_ms["step"]),)
    estimates: dict[str, LogRatio | None] = {}
    base_shares: dict[str, float] = {}
    for phase in PHASES:
        base_shares[phase] = median(r.shares[phase] for rec in baseline.recordings for r in rec.repeats)
        try:
            estimates[phase] = estimate(phase, PER_STEP)
        except ValueError:
            estimates[phase] = None  # a phase that is zero in some repeat has no log ratio
    flags = flag_phases(estimates, config.phase_q, baseline_shares=base_shares, min_share=config.phase_min_share)
    rows = []
    for row in ROWS:
        rows.append(PhaseRow(
            phase=row,
            baseline_ms=reference(row, PER_STEP),
            current_ms=summary.per_step_ms[row],
            share=summary.share[row],
            flag=flags.get(row),
            baseline_median_ms=reference(row, MEDIAN),
            current_median_ms=summary.median_ms[row],
        ))
    return tuple(rows)


def _screened(result: RunResult, side: str, config: GateConfig) -> tuple[RunResult, str | None, str | None]:
    """``result`` less its slowed-down repeats (``perfgate.analysis.screening``), the note, and
    why the side is unfit (None: fit)."""
    kept, screened = screen(result.repeats, side, config.max_left_out,
                            numbers=[r.index + 1 for r in result.repeats])
    if not screened.left_out:
        return result, None, None
    return dataclasses.replace(result, repeats=kept), screened.note, screened.unfit


def _screened_pair(head: RunResult, base: RunResult, config: GateConfig
                   ) -> tuple[RunResult, RunResult, list[str], list[str]]:
    """Both sides of a paired comparison less every ABBA block in which a repeat slowed down
    (``perfgate.analysis.screening.screen_blocks``), the notes, and why they are unfit."""
    head_kept, base_kept, notes, unfit = screen_blocks(
        head.repeats, base.repeats, config.max_left_out,
        head_numbers=[r.index + 1 for r in head.repeats], base_numbers=[r.index + 1 for r in base.repeats])
    if not notes:
        return head, base, [], []
    return (dataclasses.replace(head, repeats=head_kept), dataclasses.replace(base, repeats=base_kept), list(notes),
            [unfit] if unfit else [])


def _short(commit: str) -> str:
    return commit[:7] if len(commit) >= 7 and all(c in "0123456789abcdef" for c in commit.lower()) else commit


def stored_design(baseline: Baseline) -> str:
    k = len(baseline.recordings)
    return f"stored baseline, {k} recording{'s' if k != 1 else ''}"


def paired_design(blocks: int, against: str) -> str:
    return f"paired, {blocks} ABBA block{'s' if blocks != 1 else ''} against {_short(against)}"


def _since_baseline(result: RunResult, summary: WorkloadSummary, lookup: Lookup | None,
                    config: GateConfig) -> str:
    """The head against the stored baseline, for the paired report's secondary line."""
    if lookup is None or lookup.baseline is None:
        return "since the last rebaseline: no stored baseline for this environment"
    baseline, _ = lookup.baseline.without_throttled()
    if not baseline.recordings:
        return ("since the last rebaseline: every stored repeat was left out (the GPU slowed down while they "
                "were recorded)")
    diffs = incomparable(result, baseline)
    if diffs:
        return f"since the last rebaseline: not comparable ({_describe(diffs)})"
    try:
        est = _estimate(summary.per_repeat("step"), baseline, "step", config)
    except ValueError as exc:
        return f"since the last rebaseline: not estimated ({exc})"
    conf = f"{est.confidence * 100:g}% CI"
    return (f"since the last rebaseline: time per step {_signed(est.ratio)}% [{_signed(est.ci_low)}, "
            f"{_signed(est.ci_high)}] ({conf}, {stored_design(baseline)}; shown, not deciding)")


def _signed(ratio: float) -> str:
    return f"{(ratio - 1) * 100:+.1f}"


@dataclass(frozen=True)
class _Judged:
    result: RunResult
    summary: WorkloadSummary
    reference: Baseline
    """The stored baseline, or the base side made into an in-memory one (paired)."""
    path: str | None
    estimate: Estimator
    labels: tuple[Label, ...]
    left_out: tuple[str, ...]
    design: str
    against: str | None = None
    since_baseline: str | None = None
    environment_differences: Mapping[str, tuple[Any, Any]] = field(default_factory=dict)
    base_environment: Any = None
    counted: Counted | None = None
    clocks: Mapping[str, float] = field(default_factory=dict)
    reference_creep: tuple[Creep, ...] | None = None
    """The base side's memory growth per step (paired); None: not known (a stored baseline
    keeps no telemetry), and the creep rule does not apply."""
    reference_recordable: frozenset[str] = frozenset()
    """The kinds of memory whose slope the base side's windows were long enough to record."""


def _prepared(entry: Entry, config: GateConfig, *, straggler_share: float) -> WorkloadComparison | _Judged:
    """One entry made ready to judge, or its settled comparison (an ERROR, NO_BASELINE or
    INCOMPARABLE that no statistics can change)."""
    name = entry.workload
    if entry.error is not None or entry.result is None:
        return WorkloadComparison(name, Verdict.ERROR, entry.error or "no result")
    lookup = entry.lookup
    labels = tuple(diagnose(entry.result, straggler_share=straggler_share))
    # Both sides are screened by one rule, by the repeats' slowdown events
    # (perfgate.analysis.screening); a clock level never leaves a repeat out. Paired: a
    # slowed-down repeat leaves its whole ABBA block out, on both sides.
    base: RunResult | None = None
    baseline: Baseline | None = None
    if entry.pairing is not None:
        result, base, left_out, unfits = _screened_pair(entry.result, entry.pairing.base, config)
        measured = {"head": median_clock(entry.result.repeats), "base": median_clock(entry.pairing.base.repeats)}
    else:
        result, note, unfit = _screened(entry.result, "current", config)
        left_out = [note] if note else []
        unfits = [unfit] if unfit else []
        measured = {"current": median_clock(entry.result.repeats)}
    if entry.pairing is None and lookup is not None and lookup.baseline is not None:
        baseline, dropped = lookup.baseline.without_throttled()
        left_out.extend(dropped.messages)
        total = sum(len(rec.repeats) for rec in lookup.baseline.recordings)
        if dropped.throttled > config.max_left_out * total:
            unfits.append(f"runner unfit: {dropped.throttled} of {total} baseline repeats slowed down, more than "
                          f"the {config.max_left_out * 100:g}% that may be left out (max_left_out); rebaseline "
                          "on a runner that holds its clocks")
        measured["baseline"] = lookup.baseline.sm_clock_mhz()
    clocks = {side: mhz for side, mhz in measured.items() if mhz is not None}
    if unfits or not result.repeats:
        why = "; ".join(unfits) or f"cannot compare: {left_out[0]}, none is left"
        return WorkloadComparison(name, Verdict.ERROR, why, labels=labels, left_out=tuple(left_out),
                                  clocks=clocks, against=entry.pairing.against if entry.pairing else None)
    summary = summarise(result)
    common: dict[str, Any] = {"current": summary, "environment_key": result.environment.key(),
                              "device": result.device, "overrides": dict(result.overrides),
                              "source": result.workload_source, "params": dict(result.params),
                              "labels": labels, "left_out": tuple(left_out), "clocks": clocks}
    if entry.pairing is not None:
        assert base is not None
        return _prepared_paired(entry, result, summary, base, common, config)
    return _prepared_stored(entry, result, summary, baseline, common, config)


def _prepared_paired(entry: Entry, result: RunResult, summary: WorkloadSummary, base: RunResult,
                     common: dict[str, Any], config: GateConfig) -> WorkloadComparison | _Judged:
    """The paired design: the base side, measured in the same job, made into an in-memory baseline."""
    name, pairing = entry.workload, entry.pairing
    assert pairing is not None
    since = _since_baseline(result, summary, entry.lookup, config)
    if not base.repeats:
        return WorkloadComparison(name, Verdict.ERROR, f"cannot compare: {common['left_out'][-1]}, none is left",
                                  since_baseline=since, against=pairing.against, **common)
    reference = updated_baseline(None, base, f"base side of a paired comparison, measured in this job "
                                 f"({_short(pairing.against)})", append=False)
    base_summary = summarise(base)
    blocks = blocks_of(_block_values(base_summary, "step"), _block_values(summary, "step"))
    design = paired_design(len(blocks), pairing.against)
    diffs = incomparable(result, reference)
    env_diffs = {k.removeprefix("environment "): v for k, v in diffs.items() if k.startswith("environment ")}
    if pairing.base_python:
        diffs = {k: v for k, v in diffs.items() if not k.startswith("environment ")}
    if diffs:
        return WorkloadComparison(
            name, Verdict.INCOMPARABLE, f"the base side ({_short(pairing.against)}) differs: {_describe(diffs)}",
            differences=diffs, baseline=reference, design=design, since_baseline=since,
            against=pairing.against, **common)
    return _Judged(result, summary, reference, None, _paired_estimator(summary, base_summary, config, pairing.estimate),
                   common["labels"], common["left_out"], design, pairing.against, since, env_diffs,
                   base.environment if env_diffs else None, entry.counted, common["clocks"],
                   tuple(memory_creep(base.repeats)), frozenset(slope_recordable(base.repeats)))


def _prepared_stored(entry: Entry, result: RunResult, summary: WorkloadSummary, baseline: Baseline | None,
                     common: dict[str, Any], config: GateConfig) -> WorkloadComparison | _Judged:
    """The stored design: the baseline the store holds for this environment."""
    name, lookup = entry.workload, entry.lookup
    if lookup is None or baseline is None:
        if lookup is not None and lookup.other_environments:
            closest, diffs = _closest(result, lookup.other_environments)
            return WorkloadComparison(
                name, Verdict.INCOMPARABLE,
                f"no baseline for environment {result.environment.key()}; the closest one "
                f"({closest.environment_key}) differs: {_describe(diffs)}",
                differences=diffs, baseline=closest, **common)
        return WorkloadComparison(name, Verdict.NO_BASELINE,
                                  f"no baseline for {name} in environment {result.environment.key()}",
                                  baseline_path=str(lookup.path) if lookup else None, **common)
    if not baseline.recordings:
        return WorkloadComparison(name, Verdict.ERROR, "cannot compare: every baseline repeat was left out "
                                  "(the GPU slowed down while they were recorded); rebaseline", **common)
    diffs = incomparable(result, baseline)
    if diffs:
        return WorkloadComparison(name, Verdict.INCOMPARABLE, f"baseline {lookup.path} differs: {_describe(diffs)}",
                                  differences=diffs, baseline=baseline, baseline_path=str(lookup.path), **common)
    return _Judged(result, summary, baseline, str(lookup.path), _stored_estimator(summary, baseline, config),
                   common["labels"], common["left_out"], stored_design(baseline), counted=entry.counted,
                   clocks=common["clocks"])


def _lacking(j: _Judged, config: GateConfig) -> str | None:
    """What one side holds and the other lacks, as an ERROR's reason (None: nothing).

    Missing data never counts as a pass: a head whose result leaves out its peak memory
    would hide a memory regression, one without its counted run a new per-step sync, and in
    the paired design a side without the memory slope the other side recorded (either side)
    would hide MEMORY-CREEP."""
    if not config.missing_is_error:
        return None
    side = "head" if j.against is not None else "current run"
    reference = "base side" if j.against is not None else "baseline"
    missing = []
    if j.reference.peak_memory() and not any(r.peak_memory_bytes is not None for r in j.result.repeats):
        missing.append("its peak memory")
    if (config.counters and j.against is not None and j.counted is not None and j.counted.base is not None
            and j.counted.head is None):
        missing.append("its counted run (exact counters)")
    reference_missing: list[str] = []
    if j.reference_creep is not None:  # paired: both sides' memory slopes were measured alike
        head_lacks, reference_lacks = missing_slopes(memory_creep(j.result.repeats), j.reference_creep,
                                                     slope_recordable(j.result.repeats), set(j.reference_recordable))
        missing += [f"its memory slope ({what})" for what in head_lacks]
        reference_missing += [f"its memory slope ({what})" for what in reference_lacks]
    if not missing and not reference_missing:
        return None
    found = []
    if missing:
        found.append(f"the {side} lacks {' and '.join(missing)}, which the {reference} holds")
    if reference_missing:
        found.append(f"the {reference} lacks {' and '.join(reference_missing)}, which the {side} holds")
    return (f"{'; '.join(found)}: missing data is not a pass "
            "(missing_is_error = false in [tool.perfgate] shows it as not compared)")


def _final(j: _Judged, time: TimeDecision, gated: Mapping[str, TimeDecision], config: GateConfig) -> WorkloadComparison:
    """A judged workload's comparison: the step's decision, overruled by a failing gated
    phase, memory, an open gated phase or a failing exact counter, in that order."""
    name = j.result.workload
    memory = decide_memory(
        [float(r.peak_memory_bytes) for r in j.result.repeats if r.peak_memory_bytes is not None] or None,
        j.reference.peak_memory() or None,
        config.memory_threshold,
    )
    memory = creep_rule(memory, memory_creep(j.result.repeats), j.reference_creep,
                        "base side" if j.against is not None else "baseline")
    verdict, reason = time.verdict, time.reason
    lacking = _lacking(j, config)
    if lacking:
        return WorkloadComparison(
            name, Verdict.ERROR, lacking, current=j.summary, baseline=j.reference, baseline_path=j.path,
            environment_key=j.result.environment.key(), device=j.result.device, overrides=dict(j.result.overrides),
            source=j.result.workload_source, params=dict(j.result.params), labels=j.labels, left_out=j.left_out,
            design=j.design, against=j.against, since_baseline=j.since_baseline, clocks=j.clocks)
    failed_phases = [p for p, d in gated.items() if d.verdict is Verdict.REGRESSION]
    open_phases = [p for p, d in gated.items() if d.verdict is Verdict.INCONCLUSIVE]
    if failed_phases:
        verdict = Verdict.REGRESSION
        reason = "; ".join(f"gated phase {p}: {gated[p].reason}" for p in failed_phases) + f" (step: {time.reason})"
    elif memory.verdict is Verdict.REGRESSION:
        verdict = Verdict.REGRESSION
        reason = f"memory: {memory.reason} (time: {time.verdict.value}, {time.reason})"
    elif open_phases and verdict in (Verdict.PASS, Verdict.IMPROVED):
        verdict = Verdict.INCONCLUSIVE
        reason = f"gated phase {open_phases[0]}: {gated[open_phases[0]].reason}"
    counters, counters_note = counter_changes(j.counted, config)
    if counters is not None and counters.failed:
        # Exact counts: a failing change decides, whatever the timing says (shown beside it).
        reason = f"{counters_reason(counters)} (time: {verdict.value}, {reason})"
        verdict = Verdict.REGRESSION
    return WorkloadComparison(
        workload=name, verdict=verdict, reason=reason, time=time,
        phases=_phase_rows(j.summary, j.reference, config, j.estimate), memory=memory, gated=dict(gated),
        current=j.summary, baseline=j.reference, baseline_path=j.path,
        environment_key=j.result.environment.key(), device=j.result.device, overrides=dict(j.result.overrides),
        source=j.result.workload_source, params=dict(j.result.params), labels=j.labels, left_out=j.left_out, design=j.design, against=j.against,
        since_baseline=j.since_baseline,
        environment_differences=j.environment_differences, base_environment=j.base_environment,
        counters=counters, counters_note=counters_note, clocks=j.clocks,
    )


def compare(entries: Sequence[Entry], config: GateConfig, *, look: Look | None = None,
            already_decided: Collection[str] = (),
            per_workload: Mapping[str, GateConfig] | None = None) -> GateOutcome:
    """Verdicts for every entry; Holm runs over the workloads (and gated phases) judged here.

    ``already_decided`` names workloads settled at an earlier look: they stay in the Holm
    family with p = 1 (see ``decide_time``). ``per_workload`` holds workload-specific
    thresholds (δ, memory, gated phases, phase flags); α, the looks and the estimation
    settings always come from ``config``, the whole run's. An entry with a ``pairing`` is
    judged by the paired design (the randomised-block analysis of its ABBA blocks); the
    others against their stored baseline. ``look`` says which of the planned looks this is
    (α and the PASS bound are spent over them, ``decide.alpha_for_look``); None: a single look.
    """
    look = look or Look.single()
    per_workload = per_workload or {}
    phase_free: set[str] = set()  # workloads without phases: gated phases do not apply

    def cfg(name: str) -> GateConfig:
        own = per_workload.get(name)
        c = config if own is None else dataclasses.replace(config, **{k: getattr(own, k) for k in WORKLOAD_FIELDS})
        return dataclasses.replace(c, gate_phases=()) if name in phase_free and c.gate_phases else c

    settled: dict[str, WorkloadComparison] = {}
    judged: dict[str, _Judged] = {}
    estimates: dict[FamilyKey, LogRatio] = {}
    notes: dict[str, str] = {}
    for entry in entries:
        name = entry.workload
        prepared = _prepared(entry, config, straggler_share=cfg(name).straggler_share)
        if isinstance(prepared, WorkloadComparison):
            settled[name] = prepared
            continue
        if not _has_phases(prepared.summary, prepared.reference):
            phase_free.add(name)
        row = "step"
        try:
            estimates[FamilyKey(name)], note = _step_estimate(prepared.result, prepared.summary,
                                                              prepared.reference, config, prepared.estimate)
            if note:
                notes[name] = note  # a pytest-benchmark result: its own statistics, one entry
            else:
                for statistic in STATISTICS[1:]:
                    estimates[FamilyKey(name, statistic)] = prepared.estimate("step", statistic)
            for row in cfg(name).gate_phases:
                estimates[FamilyKey(name, PER_STEP, row)] = prepared.estimate(row, PER_STEP)
        except ValueError as exc:
            what = "" if row == "step" else f" gated phase {row}"
            settled[name] = WorkloadComparison(
                name, Verdict.ERROR, f"cannot compare{what}: {exc}", current=prepared.summary,
                environment_key=prepared.result.environment.key(), device=prepared.result.device,
                overrides=dict(prepared.result.overrides), source=prepared.result.workload_source,
                params=dict(prepared.result.params), labels=prepared.labels, left_out=prepared.left_out,
                baseline=prepared.reference, baseline_path=prepared.path, design=prepared.design,
                since_baseline=prepared.since_baseline, against=prepared.against)
            estimates = {k: v for k, v in estimates.items() if k.workload != name}
            continue
        judged[name] = prepared

    # Every name of the gate not judged at this look counts in its Holm family with p = 1:
    # those decided at an earlier look, and those that became an ERROR (or cannot be
    # compared) here, so that the family never shrinks when a workload fails mid-gate.
    not_judged = [*already_decided, *(n for n in settled if n not in already_decided)]
    decided_family = [key for name in not_judged for key in family_keys(name, cfg(name).gate_phases)
                      if key not in estimates]
    # Holm's adjusted p-values depend only on the family; δ only on the workload. So each
    # distinct configuration decides the whole family and its own workloads read from it.
    decisions: dict[FamilyKey, TimeDecision] = {}
    by_config: dict[GateConfig, dict[FamilyKey, TimeDecision]] = {}
    for name in judged:
        c = cfg(name)
        if c not in by_config:
            by_config[c] = decide_time(estimates, c, look, already_decided=decided_family)
        decisions.update({k: by_config[c][k] for k in family_keys(name, c.gate_phases) if k in by_config[c]})

    out: dict[str, WorkloadComparison] = dict(settled)
    for name, j in judged.items():
        time = decisions[FamilyKey(name)]
        if name in notes:
            time = dataclasses.replace(time, reason=f"{time.reason}; {notes[name]}", statistic=MEDIAN)
        else:
            time = combine_statistics([decisions[FamilyKey(name, s)] for s in STATISTICS])
        gated = {p: decisions[FamilyKey(name, PER_STEP, p)] for p in cfg(name).gate_phases}
        out[name] = settle(_final(j, time, gated, cfg(name)), cfg(name))
    ordered = tuple(out[e.workload] for e in entries)
    return GateOutcome(ordered, config, look)
