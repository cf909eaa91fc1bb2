"""``perfgate selftest WORKLOAD``: how well the gate works on this runner, measured.

On the user's own machine it runs paired gates exactly as ``perfgate gate --against``
runs them (ABBA blocks of fresh processes, the same verdict rules, the planned second
look, the contention re-runs), with both sides the same tree:

- **A/A gates**: head and base are the same job, so every REGRESSION is a false alarm;
- **injected gates**: the head side has a slowdown of a known size injected into one
  phase (``Job.inject_ms``: a busy-wait on the CPU, a GPU sleep on CUDA, inside that
  phase's clock marks), sized as a share of the median step of a short probe run.

It prints a card: the false-alarm count with its exact (Clopper-Pearson) interval, the
detection rate per size, how often the injected phase was the one flagged, how long a
gate took, and the smallest size this machine detects in at least 80% of gates. The gates
run interleaved (A/A, then each size, round after round), so drift of the machine over
the self-test hits every kind alike.

Exit code: 0 when the false alarms are within the gate's α budget, 1 when the whole 95%
Clopper-Pearson interval of the A/A false-alarm rate lies above α (the machine raises
false alarms more often than the gate promises, at 97.5% one-sided confidence), 2 bad
input or a gate that could not be judged.

The results of the self-test's gates go to a temporary directory that is removed: an
injected result is never left where ``compare`` or ``rebaseline`` could take it (and
``rebaseline --from-results`` refuses one, by its ``inject_ms`` override).
"""

from __future__ import annotations

import math
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from statistics import median

from perfgate.analysis.blocks import blocks_problem
from perfgate.analysis.decide import GateConfig
from perfgate.analysis.summary import summarise
from perfgate.gate.config import Settings
from perfgate.gate.gating import GateRequest, GateRun, MeasuringRequest, PairedPlan, run_gate
from perfgate.model.errors import EXIT_OK, EXIT_REGRESSION, UsageError, WorkloadError
from perfgate.model.job import Job
from perfgate.model.verdict import POLICY, Verdict
from perfgate.model.workload import PHASES
from perfgate.text.units import duration as duration_text

DEFAULT_SIZES = (0.05, 0.10)
DEFAULT_GATES = 10
QUICK_GATES = 2
QUICK_BLOCKS = 2
QUICK_BUDGET_MIN = 10.0
DETECTED_ENOUGH = 0.80
"""A size counts as supported when at least this share of its gates called a REGRESSION."""
CONFIDENCE = 0.95
AGAINST = "uninjected"
"""What the base side is called in the gates' comparisons: the same tree, no injection."""


@dataclass(frozen=True)
class Probe:
    """The short run that sizes the injections: one repeat of the workload as configured."""

    step_ms: float
    """Median step of the probe repeat."""
    shares: dict[str, float]
    """Each phase's share of the step (time-weighted over the window)."""
    seconds: float
    """Wall time of the probe process, start-up included."""
    environment_key: str


@dataclass(frozen=True)
class GateRecord:
    """One gate of the self-test and what it decided."""

    size: float | None
    """The injected slowdown as a share of the probe's step; None for an A/A gate."""
    phase: str | None
    inject_ms: float
    verdict: Verdict
    step_change: float | None
    """The gate's estimate of the step ratio (1.05 is 5% slower)."""
    flagged_slower: tuple[str, ...]
    """Phases the gate flagged slower (Benjamini-Hochberg over the phases)."""
    blocks_used: int
    """ABBA blocks the gate measured before it stopped (decided, max_blocks or the budget)."""
    seconds: float
    sd_log: float | None = None
    """The run-to-run sd of the log step in the gate's final estimate."""
    mde: float | None = None
    """The smallest slowdown the gate's final look could detect (``TimeDecision.mde``)."""
    reruns: int = 0
    """Blocks measured again because other processes loaded the machine."""
    contended: int = 0
    """Blocks kept although contended (the re-run limit was reached)."""

    @property
    def detected(self) -> bool:
        return self.verdict is Verdict.REGRESSION

    @property
    def right_phase(self) -> bool:
        return self.phase is not None and self.phase in self.flagged_slower

    @property
    def other_phase(self) -> bool:
        return any(p != self.phase for p in self.flagged_slower)


@dataclass(frozen=True)
class Rate:
    """k of n, with its exact two-sided Clopper-Pearson interval."""

    k: int
    n: int
    low: float
    high: float

    @property
    def share(self) -> float:
        return self.k / self.n if self.n else math.nan

    def text(self) -> str:
        if not self.n:
            return "0/0 (none run)"
        return f"{self.k}/{self.n} = {self.share * 100:.1f}% [{self.low * 100:.1f}, {self.high * 100:.1f}]"


def rate(k: int, n: int, confidence: float = CONFIDENCE) -> Rate:
    """``k`` of ``n`` with the exact binomial (Clopper-Pearson) interval."""
    if n == 0:
        return Rate(0, 0, 0.0, 1.0)
    from scipy.stats import binomtest

    ci = binomtest(k, n).proportion_ci(confidence_level=confidence, method="exact")
    return Rate(k, n, float(ci.low), float(ci.high))


@dataclass(frozen=True)
class SelftestResult:
    workload: str
    version: int
    device: str
    config: GateConfig
    """The workload's gate configuration (α and the looks are the run's)."""
    blocks: int
    probe: Probe
    phases: tuple[str, ...]
    phase_choice: str
    """Why these phases: "named with --phases", "the largest share (--quick)", ..."""
    sizes: tuple[float, ...]
    planned: int
    records: tuple[GateRecord, ...]
    seconds: float
    stopped: str | None = None
    """Why fewer gates ran than planned (the time budget), or None."""
    notes: tuple[str, ...] = field(default=())
    last_look: str | None = None
    """Where each gate's looks end when a budget ends them ("where its 10 min budget ends (at
    most 500), alpha spent over the share of the budget measured"); None: at ``max_blocks``."""

    @property
    def aa(self) -> list[GateRecord]:
        return [r for r in self.records if r.size is None]

    def injected(self, size: float) -> list[GateRecord]:
        return [r for r in self.records if r.size == size]

    @property
    def false_alarms(self) -> Rate:
        aa = self.aa
        return rate(sum(r.detected for r in aa), len(aa))

    @property
    def within_budget(self) -> bool:
        """True unless the whole interval of the false-alarm rate lies above α."""
        return self.false_alarms.low <= self.config.alpha

    @property
    def exit_code(self) -> int:
        return EXIT_OK if self.within_budget else EXIT_REGRESSION

    @property
    def supported(self) -> float | None:
        """The smallest size detected in at least 80% of its gates, or None."""
        for size in sorted(self.sizes):
            gates = self.injected(size)
            if gates and sum(r.detected for r in gates) / len(gates) >= DETECTED_ENOUGH:
                return size
        return None

    def card(self) -> str:
        c = self.config
        lines = [f"perfgate selftest: {self.workload} v{self.version} on {self.device} "
                 f"({self.probe.environment_key})"]
        lines.append(f"design: paired gates as `perfgate gate --against` runs them, both sides this tree; "
                     f"the first look at {self.blocks} ABBA blocks of 4 processes, then a look after every block up "
                     f"to {self.last_look or c.max_blocks}; alpha {c.alpha:g} (one-sided, spent over the looks), delta "
                     f"{c.delta * 100:g}%")
        shares = ", ".join(f"{p} {self.probe.shares[p] * 100:.1f}%" for p in PHASES)
        lines.append(f"probe: one repeat in {_duration(self.probe.seconds)}, step median "
                     f"{self.probe.step_ms:.3f} ms; share of the step: {shares}")
        how = ("a GPU sleep calibrated with CUDA events for the device phases, a host busy-wait for data_wait"
               if self.device == "cuda" else "a busy-wait on the CPU")
        lines.append(f"injected into: {', '.join(self.phases)} ({self.phase_choice}); {how}, inside the "
                     f"phase's marks, sized from the probe's median step")
        run = len(self.records)
        tail = f"; {self.stopped}" if self.stopped else ""
        lines.append(f"gates: {run} of {self.planned} planned in {_duration(self.seconds)} "
                     f"(A/A {len(self.aa)}, " + ", ".join(f"+{_pct(s)} {len(self.injected(s))}" for s in self.sizes)
                     + f"){tail}")
        fa = self.false_alarms
        lines.append(f"A/A false alarms (a REGRESSION where nothing changed): {fa.text()} (exact "
                     f"{CONFIDENCE * 100:g}% Clopper-Pearson interval); the gate promises at most {c.alpha * 100:g}%")
        counts: dict[str, int] = {}
        for r in self.aa:
            counts[r.verdict.value] = counts.get(r.verdict.value, 0) + 1
        lines.append("A/A verdicts: " + (", ".join(f"{n} {v}" for v, n in counts.items()) or "none run"))
        for size in self.sizes:
            lines.append(self._size_line(size))
        sds = [r.sd_log for r in self.records if r.sd_log is not None and math.isfinite(r.sd_log)]
        mdes = [r.mde for r in self.records if r.mde is not None and not math.isnan(r.mde)]
        mde = median(mdes) if mdes else None
        lines.append("noise: " + (f"run-to-run sd of the step {median(sds) * 100:.1f}% (median over the gates); "
                                  if sds else "run-to-run sd of the step not known; ")
                     + ("smallest detectable slowdown not known" if mde is None else
                        f"smallest slowdown a gate could detect {mde * 100:.1f}% (median)" if math.isfinite(mde) else
                        "a gate could detect no slowdown with this noise (median)"))
        times = [r.seconds for r in self.records]
        used = sorted(r.blocks_used for r in self.records)
        reruns, kept = sum(r.reruns for r in self.records), sum(r.contended for r in self.records)
        rerun_text = (f"; {reruns} block(s) measured again and {kept} kept although contended, other processes "
                      f"loading the machine" if reruns or kept else "")
        lines.append(f"gate time: median {_duration(median(times))} (min {_duration(min(times))}, "
                     f"max {_duration(max(times))}); blocks used: median {median(used):g} (min {used[0]}, max {used[-1]}){rerun_text}"
                     if times else "gate time: no gate ran")
        supported = self.supported
        if not any(r.size is not None for r in self.records):
            lines.append("this machine supports: not known: no gate with an injected slowdown ran")
        elif supported is None:
            lines.append(f"this machine supports: none of the sizes tried (none detected in at least "
                         f"{DETECTED_ENOUGH * 100:.0f}% of its gates)")
        else:
            lines.append(f"this machine supports: delta = {_pct(supported)} (the smallest size tried that was "
                         f"detected in at least {DETECTED_ENOUGH * 100:.0f}% of its gates)")
        if self.within_budget:
            lines.append(f"result: false alarms within the gate's alpha budget (exit 0): the "
                         f"{CONFIDENCE * 100:g}% interval reaches down to alpha = {c.alpha * 100:g}%")
        else:
            lines.append(f"result: MORE false alarms than the gate's alpha budget (exit 1): the whole "
                         f"{CONFIDENCE * 100:g}% interval lies above alpha = {c.alpha * 100:g}%")
        lines.extend(f"note: {n}" for n in self.notes)
        return "\n".join(lines) + "\n"

    def _size_line(self, size: float) -> str:
        gates = self.injected(size)
        head = f"+{_pct(size)} ({size * self.probe.step_ms:.3f} ms per step): "
        if not gates:
            return head + "no gate ran"
        detected = rate(sum(r.detected for r in gates), len(gates))
        right = sum(r.right_phase for r in gates)
        other = sum(r.other_phase for r in gates)
        changes = [r.step_change for r in gates if r.step_change is not None]
        text = (f"{head}detected {detected.text()}; injected phase flagged slower {right}/{len(gates)}, "
                f"another phase flagged slower in {other}")
        if changes:
            text += f"; step change median {(median(changes) - 1) * 100:+.1f}%"
        if len(self.phases) > 1:
            by_phase = []
            for phase in self.phases:
                mine = [r for r in gates if r.phase == phase]
                if mine:
                    by_phase.append(f"{phase} detected {sum(r.detected for r in mine)}/{len(mine)}, "
                                    f"flagged {sum(r.right_phase for r in mine)}/{len(mine)}")
            text += "; by phase: " + "; ".join(by_phase)
        if size <= self.config.delta:
            text += f" (at most delta = {self.config.delta * 100:g}%: by design not a REGRESSION)"
        return text


def _pct(size: float) -> str:
    return f"{size * 100:g}%"


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s"


def parse_sizes(text: str) -> tuple[float, ...]:
    """``"0.05,0.10"`` → (0.05, 0.1): slowdowns as shares of the step, each in (0, 1]."""
    sizes = []
    for item in text.split(","):
        item = item.strip()
        try:
            value = float(item)
        except ValueError:
            raise UsageError(f"--sizes: {item!r} is not a number (sizes are shares of the step, e.g. 0.05,0.10)") from None
        if not (0 < value <= 1):
            raise UsageError(f"--sizes: {item} must be a share of the step in (0, 1], e.g. 0.05 for 5%")
        if value not in sizes:
            sizes.append(value)
    if not sizes:
        raise UsageError("--sizes: give at least one size")
    return tuple(sorted(sizes))


def parse_phases(text: str) -> tuple[str, ...]:
    phases = []
    for item in text.split(","):
        item = item.strip()
        if item not in PHASES:
            raise UsageError(f"--phases: unknown phase {item!r}; phases: {', '.join(PHASES)}")
        if item not in phases:
            phases.append(item)
    return tuple(phases)


def choose_phases(probe: Probe, config: GateConfig, named: Sequence[str] | None,
                  largest_only: bool) -> tuple[tuple[str, ...], str, list[str]]:
    """The phases to inject into, why, and notes (a named phase the gate does not test)."""
    floor = config.phase_min_share
    notes = []
    if named:
        for p in named:
            if probe.shares[p] < floor:
                notes.append(f"{p} is {probe.shares[p] * 100:.2g}% of the probe's step, below the "
                             f"{floor * 100:g}% floor: the gate does not test it, so it is never the phase flagged")
        return tuple(named), "named with --phases", notes
    if largest_only:
        best = max(PHASES, key=lambda p: probe.shares[p])
        return (best,), "the largest share of the step; --quick injects into one phase", notes
    chosen = tuple(p for p in PHASES if probe.shares[p] >= floor)
    return chosen, f"every phase at or above the {floor * 100:g}% share floor the gate tests", notes


def schedule(gates: int, sizes: Sequence[float], phases: Sequence[str]) -> list[tuple[float | None, str | None]]:
    """Round after round: one A/A gate, then one gate per size, the phases taken in turn.

    Each size gets ``gates`` gates; size ``i`` in round ``r`` injects into phase
    ``(r + i) mod P``, so every phase is reached even with fewer rounds than phases.
    """
    plan: list[tuple[float | None, str | None]] = []
    for r in range(gates):
        plan.append((None, None))
        plan.extend((s, phases[(r + i) % len(phases)]) for i, s in enumerate(sizes))
    return plan


GateFn = Callable[[Job, Job], GateRun]
"""(head job, base job) → the paired gate's run."""


def record_of(run: GateRun, size: float | None, phase: str | None, inject_ms: float, seconds: float) -> GateRecord:
    """What one gate decided; an ERROR or INCOMPARABLE verdict stops the self-test."""
    c = run.outcome.comparisons[0]
    if not POLICY[c.verdict].judged:
        raise WorkloadError(f"selftest: a gate of {c.workload} could not be judged: {c.verdict.value}: {c.reason}")
    flagged = tuple(r.phase for r in c.phases
                    if r.flag is not None and r.flag.flagged and r.flag.estimate is not None
                    and r.flag.estimate.ratio > 1)
    return GateRecord(size, phase, inject_ms, c.verdict, c.time.estimate.ratio if c.time else None, flagged,
                      run.count, seconds,
                      sd_log=c.time.estimate.within_sd_log if c.time else None, mde=c.time.mde if c.time else None,
                      reruns=sum(" measured again: " in note for note in c.left_out),
                      contended=sum("kept although contended" in note for note in c.left_out))


def probe_job(job: Job, measuring: MeasuringRequest) -> Probe:
    """One repeat of ``job``: its median step and phase shares (one window, a fresh process,
    measured once whatever contended it: the probe only sizes the injections)."""
    began = time.perf_counter()
    outcome = replace(measuring, windows=1, contention_check=None).repeats([job], 1)
    seconds = time.perf_counter() - began
    if outcome.errors:
        raise next(iter(outcome.errors.values()))
    result = outcome.results[job.workload.name]
    summary = summarise(result)
    return Probe(summary.median_ms["step"], {p: summary.share[p] for p in PHASES}, seconds,
                 result.environment.key())


def run_selftest(
    job: Job,
    *,
    settings: Settings,
    gates: int = DEFAULT_GATES,
    sizes: Sequence[float] = DEFAULT_SIZES,
    phases: Sequence[str] | None = None,
    largest_phase_only: bool = False,
    blocks: int | None = None,
    budget_s: float | None = None,
    measuring: MeasuringRequest,
    announce: Callable[[str], None] = lambda message: None,
    gate: GateFn | None = None,
    probe: Probe | None = None,
    now: Callable[[], float] = time.perf_counter,
) -> SelftestResult:
    """Probe the step, then run the A/A and injected gates, interleaved; the card's numbers.

    ``measuring``: how every repeat is measured (on its device, the probe's and the gates').
    ``gate`` and ``probe`` replace the real paired gate and probe run (tests). With
    ``budget_s``, no gate starts that would likely end after the budget (its time is
    taken as the longest gate so far, or a gate with a second look at the probe's
    process time); the first gate always runs.
    """
    if gates < 1:
        raise UsageError("--gates must be at least 1")
    if budget_s is not None and not budget_s > 0:
        raise UsageError("--budget must be a positive number of minutes")
    blocks = blocks or settings.blocks
    problem = blocks_problem(blocks, "--blocks")
    if problem is not None:
        raise UsageError(problem)
    # The selftest measures the timing's false alarms and power: its A/A and injected-delay
    # gates run the same code on both sides, so a counted run could only add time.
    settings = replace(settings, gate=replace(settings.gate, counters=False))
    sizes = tuple(sorted(set(sizes)))
    name = job.workload.name
    config = settings.for_workload(name)
    config = replace(config, alpha=settings.gate.alpha, max_blocks=settings.gate.max_blocks)
    began = now()
    if probe is None:
        announce(f"probe: one repeat of {name} sizes the injections")
        probe = probe_job(job, measuring)
    chosen, why, notes = choose_phases(probe, config, phases, largest_phase_only)
    if not chosen:
        raise UsageError(f"{name}: no phase reaches the {config.phase_min_share * 100:g}% share floor; name one "
                         "with --phases")

    if gate is None:
        def gate(head: Job, base: Job) -> GateRun:
            with tempfile.TemporaryDirectory(prefix="perfgate-selftest-") as out:
                plan = PairedPlan([head], {name: base}, Path.cwd(), Path.cwd(), AGAINST)
                return run_gate(GateRequest([head], replace(settings, blocks=blocks), measuring, Path(out),
                                            announce=announce, paired=plan))

    base = replace(job, inject_ms={})
    plan = schedule(gates, sizes, chosen)
    records: list[GateRecord] = []
    stopped = None
    first_guess = probe.seconds * 4 * blocks
    for index, (size, phase) in enumerate(plan):
        if budget_s is not None and records:
            expected = max(r.seconds for r in records)
            if now() - began + expected > budget_s:
                stopped = (f"stopped by the {_duration(budget_s)} budget: the next gate would likely end after it "
                           f"(the longest so far took {_duration(expected)})")
                break
        elif budget_s is not None and now() - began + first_guess > budget_s:
            notes.append(f"the budget of {_duration(budget_s)} is likely too short for even one gate "
                         f"(about {_duration(first_guess)} at the probe's process time); one gate runs anyway")
        inject_ms = size * probe.step_ms if size is not None else 0.0
        if size is None:
            head = base
        else:
            assert phase is not None  # the plan gives every size its phase; an A/A gate is (None, None)
            head = replace(base, inject_ms={phase: inject_ms})
        what = "A/A" if size is None else f"+{_pct(size)} ({inject_ms:.3f} ms per step) in {phase}"
        announce(f"selftest gate {index + 1}/{len(plan)}: {what}")
        start = now()
        run = gate(head, base)
        if run.interrupted:  # a gate cut short is no record of the self-test: it ends as interrupted
            raise KeyboardInterrupt
        records.append(record_of(run, size, phase, inject_ms, now() - start))
        announce(f"selftest gate {index + 1}/{len(plan)}: {what}: {records[-1].verdict.value} "
                 f"in {_duration(records[-1].seconds)}")
    return SelftestResult(
        workload=name, version=job.workload.version, device=measuring.device, config=config, blocks=blocks,
        probe=probe, phases=chosen, phase_choice=why, sizes=sizes,
        planned=len(plan), records=tuple(records), seconds=now() - began, stopped=stopped, notes=tuple(notes),
        last_look=_last_look(settings, blocks),
    )


def _last_look(settings: Settings, blocks: int) -> str | None:
    """The card's words for where each gate's looks end when its budget spends α."""
    plan = replace(settings, blocks=blocks).budget_spending(paired=True)
    if plan is None:
        return None
    return (f"where its {duration_text(plan.budget_s)} budget ends (at most {plan.cap}), alpha spent over the share "
            "of the budget measured")
