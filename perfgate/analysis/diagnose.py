"""What bounds the step: labels computed from the per-step phases, each with its evidence.

"Low GPU utilisation" is a symptom; the phase split is the diagnosis. For every step of
every repeat the share of each phase in that step is computed, and the median share over
all steps decides the label (a median, so a few slow steps do not relabel a run):

- INPUT-BOUND: data wait ≥ 10% of the step (warning), ≥ 20% (critical);
- H2D-BOUND: host-to-device copies, same thresholds;
- RESIDUAL-HEAVY: the part no phase explains (host syncs such as ``.item()``, logging,
  Python overhead), same thresholds; for a script, the evidence says what its hooks do not
  see (the framework's own loop when it loaded Lightning or the Hugging Face Trainer) and
  that clipping and scheduler steps are not in it (:func:`script_residual_note`);
- COMPUTE-BOUND: forward + backward + optimizer ≥ 90% of the step (informational);
- BALANCED: none of the above.

More labels are read from what each repeat recorded rather than from the shares:

- SYNC-PER-STEP: the workload's settings synchronise the host with the device every
  step on CUDA (a GradScaler over an optimizer that cannot take its inf check on the
  device, copies from unpinned memory), with what to change (warning);
- LOADER-RESTART: the DataLoader ran out inside the window and was restarted (warning);
- CLOCK-MISMATCH: on CUDA the device steps do not add up to the window's wall time, so
  the events miss part of the work, or event stamps came out of order by more than the
  events' resolution (``cuda_window.clamped_stamps``/``largest_clamp_ms``) (warning);
- SCALER-SKIPS: a script's GradScaler skipped optimizer steps inside the window (an fp16
  overflow), each merged with the next step (warning);
- MEMORY-CREEP: memory grows steadily over the window: the median over repeats of each
  repeat's least-squares slope of the resident memory (on CUDA also NVML's device memory),
  sampled about every 100 ms beside the loop, in bytes per step, with a 95% interval on the
  per-repeat slopes whose lower bound is above 64 KiB per step
  (:data:`~perfgate.analysis.memory.CREEP_FLOOR_BYTES`) (warning);
- STALLS: the steps' time beyond the median step is 10% of the window or more (20%:
  critical), with the phase that holds most of it and how often a step takes over twice
  the median. The shares above and the gate's per-repeat medians are medians: a stall
  every few steps (a DataLoader whose workers cannot keep up, measured on an H200 as
  90 ms every fourth step of a 15 ms one) moves neither, so this label says so.

Two more for distributed repeats (``nproc_per_node`` > 1; :mod:`perfgate.analysis.ranks`):

- STRAGGLER: one rank exceeds the other ranks' median in a phase by 10% of the step or
  more (20%: critical), naming the rank and the phase; backward is compared without its
  wait for the all-reduce, since the all-reduce makes every rank's backward end together;
- COMM-EXPOSED: backward waits for the all-reduce at its end for 10% of the step or more
  (20%: critical): communication the backward pass no longer hides.

Pure: no torch, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from statistics import median

from perfgate.analysis.memory import memory_creep
from perfgate.analysis.ranks import COMM, STRAGGLER_SHARE, comm_share, stragglers
from perfgate.model.result import BLOCKING_COPY_SYNC, CLAMP_NOTE_MS, GRAD_SCALER_SYNC, RunResult, finite_number
from perfgate.model.script import script_path_of
from perfgate.model.workload import COMPUTE_PHASES, PHASE_WORDS, PHASES


WARNING_SHARE = 0.10
CRITICAL_SHARE = 0.20
COMPUTE_SHARE = 0.90
CLOCK_RATIO = (0.95, 1.02)
"""On CUDA the device steps' sum over the window's wall time outside this range is CLOCK-MISMATCH."""

SYNC_FIXES = {
    GRAD_SCALER_SYNC: "for GradScaler: precision=bf16 needs no scaler (bf16 has fp32's exponent range; "
                      "Ampere or newer; a change of numerics, so a new baseline), or keep fp16 and build the "
                      "optimizer with fused=True (SGD, Adam, AdamW), whose step takes the scaler's inf check "
                      "on the device",
    BLOCKING_COPY_SYNC: "for the copies: pin_memory=true (pinned batches are copied without blocking)",
}
"""What to change to avoid each synchronisation, shown in the label's evidence."""

PHASE_HINTS = {
    "data_wait": "data wait usually moves with DataLoader workers (num_workers: the DataLoader's, a Lightning "
                 "DataModule's, the HF Trainer's dataloader_num_workers), decoding, augmentation or storage speed",
    "h2d": "host-to-device copies usually move with pinned memory (pin_memory; the HF Trainer's "
           "dataloader_pin_memory), non-blocking copies or the batch size",
    "forward": "forward usually moves with model or kernel changes, precision or memory format",
    "backward": "backward usually moves with model or kernel changes, precision or memory format",
    "optimizer": "the optimizer step usually moves with its implementation (foreach or fused: fused=True in "
                 "torch.optim, also in a LightningModule's configure_optimizers; the HF Trainer's optim, "
                 "adamw_torch_fused by default), the parameter count, or gradient clipping and LR scheduler steps, "
                 "which a script's optimizer phase holds (Lightning's gradient_clip_val, the HF Trainer's max_grad_norm)",
    "residual": "unattributed time usually moves with a new host sync (.item(), .cpu(), printing a tensor) or "
                "logging; in a Lightning or HF Trainer script also the framework's loop (callbacks, logging every "
                "log_every_n_steps / logging_steps, the progress bar)",
}
"""One line per phase on what usually moves it, shown when the gate flags the phase. The
forward and backward lines are a workload's and a script's alike; the others name the
settings a Lightning or Hugging Face Trainer user changes, since script mode measures
those scripts unmodified (the forward line is also in tests/golden/report.md)."""

SCRIPT_RESIDUAL = {
    "pytorch_lightning": "Lightning's loop (its hooks and callbacks, self.log, the progress bar)",
    "lightning": "Lightning's loop (its hooks and callbacks, self.log, the progress bar)",
    "transformers": "the HF Trainer's loop (training_step's work around the model call, FLOP counting, "
                    "loss bookkeeping, callbacks)",
}
"""Per framework a script loaded (``torch_settings["script"]["frameworks"]``), what of its
loop is in the residual: work the hooks do not see, named so that RESIDUAL-HEAVY on a
framework's script is not a mystery."""


class Severity(StrEnum):
    """How much a label matters; its value is what reports and JSON say."""

    CRITICAL = "critical"
    WARNING = "warning"
    INFO = "info"


@dataclass(frozen=True)
class Label:
    name: str
    severity: Severity
    share: float
    """The share of the step the label is about; for the labels read from what the
    repeats recorded (SYNC-PER-STEP, LOADER-RESTART, CLOCK-MISMATCH), the share of the
    repeats it applies to."""
    evidence: str
    rank: int | None = None
    """STRAGGLER: the rank that holds the others back."""
    phase: str | None = None
    """STRAGGLER: the phase it does so in."""

    def to_dict(self) -> dict[str, object]:
        where = {k: v for k, v in (("rank", self.rank), ("phase", self.phase)) if v is not None}
        return {"name": self.name, "severity": self.severity, "share": self.share, "evidence": self.evidence, **where}


def _shares(result: RunResult) -> dict[str, list[float]]:
    """Per repeat, each part's share of the time per step (its window total over the steps'
    total): the same statistic as the verdict and the phase table's share column, so a
    loader that stalls one step in four is a quarter of its stall per step, not nothing."""
    out: dict[str, list[float]] = {"data_wait": [], "h2d": [], "compute": [], "residual": []}
    for repeat in result.repeats:
        if repeat.per_step_ms["step"] <= 0:
            continue
        shares = repeat.shares
        out["data_wait"].append(shares["data_wait"])
        out["h2d"].append(shares["h2d"])
        out["compute"].append(math.fsum(shares[p] for p in COMPUTE_PHASES))
        out["residual"].append(shares["residual"])
    return out


def _median_ms(result: RunResult, series: str) -> float:
    return median(v for r in result.repeats for v in r.phases_ms[series])


def _per_step_ms(result: RunResult, row: str) -> float:
    """The median over repeats of ``row``'s time per step."""
    return median(r.per_step_ms[row] for r in result.repeats)


def diagnose(result: RunResult, *, straggler_share: float = STRAGGLER_SHARE) -> list[Label]:
    """The labels that apply to ``result``, most severe first; BALANCED when none does.
    ``straggler_share``: STRAGGLER's threshold (``[tool.perfgate] straggler_share``)."""
    shares = _shares(result)
    if not shares["compute"]:
        return []
    where = f"time per step, median of {len(result.repeats)} repeat(s)"
    step_ms = _per_step_ms(result, "step")
    busy = [sum(r.phases_ms["device_busy"]) / (r.window_s * 1e3) for r in result.repeats if "device_busy" in r.phases_ms]
    busy_note = f"; device busy {median(busy) * 100:.0f}% of the window" if busy else ""
    labels: list[Label] = []
    for name, key, what in (("INPUT-BOUND", "data_wait", "data wait"),
                            ("H2D-BOUND", "h2d", "host-to-device copies"),
                            ("RESIDUAL-HEAVY", "residual", "unattributed time")):
        share = median(shares[key])
        if share >= WARNING_SHARE:
            severity = Severity.CRITICAL if share >= CRITICAL_SHARE else Severity.WARNING
            amount = "" if key == "residual" else f"{_per_step_ms(result, key):.1f} ms, "
            note = script_residual_note(result) if key == "residual" else ""
            labels.append(Label(name, severity, share, f"{what} {amount}{share * 100:.0f}% of a {step_ms:.1f} ms "
                                                       f"step ({where}){busy_note}{note}"))
    compute = median(shares["compute"])
    if compute >= COMPUTE_SHARE:
        labels.append(Label("COMPUTE-BOUND", Severity.INFO, compute,
                            f"forward+backward+optimizer {compute * 100:.0f}% of a {step_ms:.1f} ms step ({where}){busy_note}"))
    if not labels:
        labels.append(Label("BALANCED", Severity.INFO, compute,
                            f"no phase dominates: compute {compute * 100:.0f}%, data wait "
                            f"{median(shares['data_wait']) * 100:.0f}%, h2d {median(shares['h2d']) * 100:.0f}% "
                            f"of a {step_ms:.1f} ms step ({where}){busy_note}"))
    labels += [label for label in (_stall_label(result), _sync_label(result), _restart_label(result),
                                   _clock_label(result), _scaler_label(result), _comm_label(result))
               if label is not None]
    labels += _creep_labels(result)
    labels += _straggler_labels(result, straggler_share)
    order = {Severity.CRITICAL: 0, Severity.WARNING: 1, Severity.INFO: 2}
    return sorted(labels, key=lambda label: order[label.severity])


def script_residual_note(result: RunResult) -> str:
    """For a script's result, what its residual holds: what the hooks do not see (the loop of
    each framework it loaded), and what is not there (clipping and scheduler steps, booked as
    optimizer, with how many a step had); empty for a workload. Read leniently: the counts
    are the repeats' ``torch_settings["script"]``, free-form in a result file."""
    if script_path_of(result.workload_source) is None:
        return ""
    recorded = [r.torch_settings.get("script") for r in result.repeats]
    script = next((s for s in recorded if isinstance(s, dict)), {})
    frameworks = script.get("frameworks")
    loaded = [name for name in SCRIPT_RESIDUAL if isinstance(frameworks, dict) and name in frameworks]
    seen = list(dict.fromkeys(SCRIPT_RESIDUAL[name] for name in loaded))
    unseen = ", ".join([*seen, "logging", ".item() and other host syncs", "a GradScaler's unscale and update"])
    booked = []
    for key, what in (("grad_clips_per_step", "gradient clipping"), ("lr_scheduler_steps_per_step",
                                                                      "LR scheduler steps")):
        count = finite_number(script.get(key))
        if count:
            booked.append(f"{what} ({count:g} a step)")
    held = f"; {' and '.join(booked)} are in optimizer, not here" if booked else ""
    return f"; in a script this is what no hook sees: {unseen}{held}"


def _sync_label(result: RunResult) -> Label | None:
    """SYNC-PER-STEP: what each repeat recorded under ``torch_settings["synchronizes"]``."""
    per_repeat = [_names(r.torch_settings.get("synchronizes")) for r in result.repeats]
    sources = list(dict.fromkeys(s for found in per_repeat for s in found))
    if not sources:
        return None
    with_sync = sum(1 for found in per_repeat if found)
    how_often = "once per step" if sources == [GRAD_SCALER_SYNC] else "every step"
    fixes = [SYNC_FIXES[s] for s in sources if s in SYNC_FIXES]
    evidence = (f"this workload synchronises {how_often}: {'; '.join(sources)} "
                f"({with_sync} of {len(result.repeats)} repeat(s)); the host waits for the device there, "
                f"so it cannot queue the next step ahead")
    if fixes:
        evidence += f"; to avoid it, {'; '.join(fixes)}"
    return Label("SYNC-PER-STEP", Severity.WARNING, with_sync / len(result.repeats), evidence)


def _names(value: object) -> list[str]:
    """A recorded list of names (``torch_settings["synchronizes"]``); anything else: none.
    The result reader checks the list; a result built in memory is read as leniently."""
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _count(value: object) -> int | None:
    """A recorded count (a loader setting): an integer >= 0, else None (not known)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _stall_label(result: RunResult) -> Label | None:
    """STALLS: time in steps beyond the median step, a share of the window's step time."""
    shares, slow, steps_seen = [], 0, 0
    excess = {p: 0.0 for p in PHASES}
    means, medians = [], []
    for r in result.repeats:
        steps = r.phases_ms["step"]
        total = sum(steps)
        if len(steps) < 4 or total <= 0:
            continue
        typical = median(steps)
        shares.append(max(0.0, total - typical * len(steps)) / total)
        means.append(total / len(steps))
        medians.append(typical)
        slow += sum(1 for v in steps if v > 2 * typical)
        steps_seen += len(steps)
        for p in PHASES:
            values = r.phases_ms[p]
            middle = median(values)
            excess[p] += sum(max(0.0, v - middle) for v in values)
    if not shares:
        return None
    share = median(shares)
    if share < WARNING_SHARE:
        return None
    phase = max(PHASES, key=lambda p: excess[p])
    held = excess[phase] / sum(excess.values()) if sum(excess.values()) > 0 else 0.0
    evidence = (f"the mean step is {median(means):.1f} ms against a median step of {median(medians):.1f} ms: "
                f"{share * 100:.0f}% of the window's step time is beyond the median step (median over "
                f"{len(shares)} repeat(s)), {held * 100:.0f}% of that excess in {PHASE_WORDS[phase]}; "
                f"{slow} of {steps_seen} steps took over twice the median. The median step does not see stalls "
                f"this periodic; the time per step the gate decides on and the shares do")
    severity = Severity.CRITICAL if share >= CRITICAL_SHARE else Severity.WARNING
    return Label("STALLS", severity, share, evidence)


def _restart_label(result: RunResult) -> Label | None:
    """LOADER-RESTART: repeats whose DataLoader ran out inside the window."""
    restarted = [r for r in result.repeats if r.loader_restarts > 0]
    if not restarted:
        return None
    total = sum(r.loader_restarts for r in restarted)
    worst = max(max(r.phases_ms["data_wait"], default=0.0) for r in restarted)
    typical = _median_ms(result, "data_wait")
    warmup, steps = result.params.get("warmup_steps"), result.params.get("steps")
    batches = restarted[0].loader_settings.get("num_batches")
    facts = []
    if _count(batches) is not None:
        facts.append(f"the loader holds {batches} batches")
    if isinstance(warmup, int) and isinstance(steps, int):
        facts.append(f"warmup_steps + steps = {warmup + steps}")
    held = f" ({', '.join(facts)})" if facts else ""
    loader = restarted[0].loader_settings
    persist = ("; with num_workers > 0, persistent_workers=true keeps the workers across a restart"
               if _count(loader.get("num_workers")) and not loader.get("persistent_workers") else "")
    fix = ("fewer steps (--warmup, --steps), or more batches per pass over the script's data"
           if script_path_of(result.workload_source) is not None else
           "fewer steps, or a loader from perfgate.measure.loader.make_loader, which holds exactly that many batches")
    evidence = (f"the DataLoader ran out inside the window {total} time(s) in {len(restarted)} of "
                f"{len(result.repeats)} repeat(s){held}: the slowest data wait there was {worst:.1f} ms against a "
                f"median of {typical:.1f} ms; make warmup_steps + steps <= len(loader) ({fix}){persist}")
    return Label("LOADER-RESTART", Severity.WARNING, len(restarted) / len(result.repeats), evidence)


def _clock_label(result: RunResult) -> Label | None:
    """CLOCK-MISMATCH: on CUDA the device steps should tile the window's wall time, and the
    events' stamps should come in order (a stamp raised to the one before it by more than
    :data:`~perfgate.model.result.CLAMP_NOTE_MS` is not the events' resolution)."""
    ratios, raised, counts, largest = [], 0, 0, 0.0
    for r in result.repeats:
        window = r.torch_settings.get("cuda_window")
        if not isinstance(window, dict):
            continue
        ratio = finite_number(window.get("device_steps_over_window"))
        if ratio is not None:
            ratios.append(ratio)
        # strict=False: a file may hold clamped_stamps without largest_clamp_ms (result.py checks
        # that the two agree when both are there); then there is no raise to weigh.
        pairs = list(zip(window.get("clamped_stamps") or [], window.get("largest_clamp_ms") or [], strict=False))
        big = [(n, ms) for n, ms in pairs if ms > CLAMP_NOTE_MS]
        if big:
            raised += 1
            counts += sum(n for n, _ in big)
            largest = max(largest, max(ms for _, ms in big))
    low, high = CLOCK_RATIO
    ratio = median(ratios) if ratios else None
    off = [x for x in ratios if not low <= x <= high]
    findings = []
    if ratio is not None and not low <= ratio <= high:
        findings.append(f"the device steps add up to {ratio * 100:.0f}% of the window's wall time (median of "
                        f"{len(ratios)} repeat(s); about 100% expected): the step's events miss part of the work, "
                        f"such as kernels on a stream the step does not wait for, or the device and host clocks "
                        f"disagree (perfgate doctor checks that)")
    if raised:
        findings.append(f"in {raised} of {len(result.repeats)} repeat(s) event stamps came out of order: {counts} "
                        f"stamp(s) in windows with a raise above {CLAMP_NOTE_MS * 1000:.0f} µs were raised to the "
                        f"one before them, by up to {largest:.3f} ms (events recorded on another stream than the "
                        f"step's, or a stream the step does not wait for), so the phases they bound are not "
                        f"what they say")
    if not findings:
        return None
    share = max(len(off), raised) / len(result.repeats)
    return Label("CLOCK-MISMATCH", Severity.WARNING, share,
                 "; ".join(findings) + "; the step times of this run are not reliable")


def _creep_labels(result: RunResult) -> list[Label]:
    """MEMORY-CREEP: per kind of memory, a slope per step whose interval lies above the floor
    (:func:`perfgate.analysis.memory.memory_creep`); share: the repeats above the floor."""
    return [Label("MEMORY-CREEP", Severity.WARNING, c.growing / c.repeats,
                  f"{c.describe()}; memory that grows every step runs out on a long run, and the peak of a "
                  f"short window understates it (a tensor kept across steps: a loss appended to a list "
                  f"without .item(), a cache, a graph held by retain_graph)")
            for c in memory_creep(result.repeats) if c.creeps]


def _scaler_label(result: RunResult) -> Label | None:
    """SCALER-SKIPS: a script's GradScaler skipped the optimizer step inside the window (an fp16
    overflow); each skipped step merges with the next, so the steps counted are fewer than run."""
    skipped = []
    for r in result.repeats:
        script = r.torch_settings.get("script")
        count = _count(script.get("scaler_skipped_steps")) if isinstance(script, dict) else None
        if count:
            skipped.append(count)
    if not skipped:
        return None
    steps = result.params.get("steps")
    per = f" of {steps} steps a window" if isinstance(steps, int) and steps > 0 else ""
    return Label("SCALER-SKIPS", Severity.WARNING, len(skipped) / len(result.repeats),
                 f"the GradScaler skipped the optimizer step {sum(skipped)} time(s) in {len(skipped)} of "
                 f"{len(result.repeats)} repeat(s) (up to {max(skipped)}{per}): an fp16 overflow, after which each "
                 f"skipped step merged with the next, so those steps read about twice as long and the time per "
                 f"step holds them; a loss scale that still overflows after warmup (raise --warmup, or start the "
                 f"scaler's init_scale lower) makes the two sides differ by how often they overflow, not by speed")


def _comm_label(result: RunResult) -> Label | None:
    """COMM-EXPOSED: the exposed all-reduce wait's share of the step (distributed repeats)."""
    share = comm_share(result.repeats)
    if share is None or share < WARNING_SHARE:
        return None
    total = [v for r in result.repeats for v in r.phases_ms.get("comm_total", ())]
    overlapped = f"; all-reduce in flight {median(total):.1f} ms a step in all" if total else ""
    return Label("COMM-EXPOSED", Severity.CRITICAL if share >= CRITICAL_SHARE else Severity.WARNING, share,
                 f"backward waits {_median_ms(result, COMM):.1f} ms a step for the all-reduce at its end, "
                 f"{share * 100:.0f}% of a {_median_ms(result, 'step'):.1f} ms step (the slowest rank per step)"
                 f"{overlapped}; it grows when gradients are ready too late to overlap (bucket size, a slow rank, "
                 "a slower interconnect)")


def _straggler_labels(result: RunResult, share: float) -> list[Label]:
    """STRAGGLER: a rank that holds the others back in one phase, with the evidence; critical
    from twice the threshold (20% of the step by default)."""
    labels = []
    for s in stragglers(result, share):
        severity = Severity.CRITICAL if s.share >= 2 * share else Severity.WARNING
        what = "backward without its all-reduce wait" if s.whole_backward is not None else PHASE_WORDS[s.phase]
        evidence = (f"rank {s.rank}: {what} {s.rank_ms:.1f} ms against {s.others_ms:.1f} ms on the other ranks "
                    f"(+{s.excess_ms:.1f} ms, {s.share * 100:.0f}% of a {s.step_ms:.1f} ms step)")
        if s.others_comm_ms is not None and s.rank_comm_ms is not None:
            evidence += (f"; the other ranks wait {s.others_comm_ms:.1f} ms for the all-reduce at the end of backward "
                         f"against {s.rank_comm_ms:.1f} ms on rank {s.rank}")
        if s.whole_backward is not None:
            evidence += (f", so whole backward times look alike ({s.whole_backward[0]:.1f} ms on rank {s.rank}, "
                         f"{s.whole_backward[1]:.1f} ms on the others)")
        labels.append(Label("STRAGGLER", severity, s.share, evidence, rank=s.rank, phase=s.phase))
    return labels
