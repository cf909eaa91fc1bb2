"""What a comparison takes and gives: the entries of a gate (a result, its baseline lookup,
the base side of a paired comparison, the counted runs) and the outcome (one
:class:`WorkloadComparison` per workload, and the :class:`GateOutcome` with the exit code)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from perfgate.analysis.counters import CounterChanges
from perfgate.analysis.decide import GateConfig, Look, MemoryDecision, PhaseFlag, TimeDecision
from perfgate.analysis.diagnose import Label
from perfgate.analysis.summary import WorkloadSummary
from perfgate.model.baseline import Baseline, Provenance
from perfgate.model.cost import MeasuringCost
from perfgate.model.counters import CounterSet
from perfgate.model.result import RunResult
from perfgate.model.verdict import Verdict, gate_exit_code, run_policy
from perfgate.store.baselines import Lookup


@dataclass(frozen=True)
class Pairing:
    """The base side of a paired comparison: the base commit measured in the same job,
    alternating with the head in ABBA blocks (each repeat carries its ``block``)."""

    base: RunResult
    against: str
    """The base commit (full sha), or the name the user gave when it is not a git commit."""
    base_python: str | None = None
    """Another interpreter measured the base side (``--base-python``): environments may differ."""



@dataclass(frozen=True)
class Counted:
    """The counted runs of a comparison (``perfgate.analysis.counters``): one per side, or what
    kept one from being counted (an info line, never a verdict on timing)."""

    base: CounterSet | None = None
    head: CounterSet | None = None
    note: str | None = None
    """Why there is nothing to compare (a counted run failed, counters are off, no file)."""



@dataclass(frozen=True)
class Entry:
    """One workload of a gate: its current result (or the error that prevented one).

    With ``pairing`` the verdict comes from the paired design against the base side; the
    stored baseline in ``lookup``, when there is a comparable one, is shown as a secondary
    line only.
    """

    workload: str
    result: RunResult | None
    lookup: Lookup | None
    error: str | None = None
    pairing: Pairing | None = None
    counted: Counted | None = None
    """The counted runs of both sides (paired) or of the baseline and the current code
    (stored): exact counters, a second signal."""


@dataclass(frozen=True)
class PhaseRow:
    phase: str
    baseline_ms: float | None
    current_ms: float | None
    share: float | None
    """Share of the current time per step (time-weighted over the window)."""
    flag: PhaseFlag | None
    baseline_median_ms: float | None = None
    current_median_ms: float | None = None
    """The median step's value of the row on each side: ``baseline_ms`` and ``current_ms`` are
    the time per step, which the flags and the verdict speak of."""


@dataclass(frozen=True)
class WorkloadComparison:
    workload: str
    verdict: Verdict
    reason: str
    time: TimeDecision | None = None
    phases: tuple[PhaseRow, ...] = ()
    memory: MemoryDecision | None = None
    gated: Mapping[str, TimeDecision] = field(default_factory=dict)
    differences: Mapping[str, tuple[Any, Any]] = field(default_factory=dict)
    """What makes the result incomparable with the closest baseline: ``{field: (baseline, current)}``."""
    current: WorkloadSummary | None = None
    baseline: Baseline | None = None
    baseline_path: str | None = None
    environment_key: str | None = None
    device: str | None = None
    overrides: Mapping[str, Any] = field(default_factory=dict)
    source: str = ""
    """Where the current result's workload came from (``script:PATH sha256:...`` for a script run)."""
    params: Mapping[str, Any] = field(default_factory=dict)
    """The current result's parameters."""
    labels: tuple[Label, ...] = ()
    """What bounds the current run's step (INPUT-BOUND, ...), with evidence."""
    left_out: tuple[str, ...] = ()
    """Repeats the gate did not use, with the reason: a thermal or hardware slowdown
    (``perfgate.analysis.screening``), by one rule on both sides."""
    clocks: Mapping[str, float] = field(default_factory=dict)
    """The median SM clock (MHz) of each side that sampled one: ``{"base": .., "head": ..}``
    (paired) or ``{"baseline": .., "current": ..}``. Shown, never a reason to leave out."""
    design: str = ""
    """Which design decided: "paired, 6 ABBA blocks against a1b2c3d" or "stored baseline, 3 recordings"."""
    since_baseline: str | None = None
    """In the paired design, the head against the stored baseline: shown, never deciding."""
    environment_differences: Mapping[str, tuple[Any, Any]] = field(default_factory=dict)
    """Paired with ``--base-python``: how the two sides' environments differ ``{field: (base, head)}``."""
    base_environment: Any = None
    """Paired with differing environments: the base side's :class:`Environment`, shown beside the head's."""
    against: str | None = None
    """Paired: the base commit the head was measured against."""
    counters: CounterChanges | None = None
    """What changed between the reference's counted run (the base side's or the
    baseline's) and the current one (empty: nothing)."""
    counters_note: str | None = None
    """Why ``counters`` is None, or what else there is to know (a counted run that failed)."""

    @property
    def counters_failed(self) -> bool:
        return self.counters is not None and self.counters.failed

    @property
    def paired(self) -> bool:
        return self.design.startswith("paired")

    @property
    def provenance(self) -> Provenance | None:
        return self.baseline.recordings[-1].provenance if self.baseline else None

    progress: str | None = None
    """How the sequential gate ended for this workload: "decided after 9 blocks (3 min 10 s)",
    or why it stopped undecided (the budget, an interruption)."""

    @property
    def goes_on(self) -> bool:
        """Undecided on time with a later look still planned (and not already failed)."""
        return self.verdict is Verdict.INCONCLUSIVE and self.time is not None and self.time.goes_on


@dataclass(frozen=True)
class GateOutcome:
    comparisons: tuple[WorkloadComparison, ...]
    config: GateConfig
    look: Look
    """The last look taken (its schedule: the planned looks α was spent over)."""
    stopped: str | None = None
    """Why the gate stopped with workloads undecided before their last planned look: "stopped at
    the budget ...", "interrupted ..."; None when it ran its course."""
    cost: MeasuringCost | None = None
    """What the gate's wall time bought (the share inside timed windows); None: not measured here
    (``perfgate compare`` of results on disk, the judge's replay)."""

    def by_verdict(self, verdict: Verdict) -> list[WorkloadComparison]:
        return [c for c in self.comparisons if c.verdict is verdict]

    @property
    def exit_code(self) -> int:
        """1 on any regression; else 2 when something could not be judged; else 3 when
        something stays undecided; else 0 (``perfgate.model.verdict``: the policy)."""
        return gate_exit_code((c.verdict for c in self.comparisons), self.config)

    @property
    def headline(self) -> str:
        counts: dict[str, int] = {}
        for c in self.comparisons:
            counts[c.verdict.value] = counts.get(c.verdict.value, 0) + 1
        order = [v.value for v in Verdict]
        parts = [f"{counts[v]} {v}" for v in order if v in counts]
        status = run_policy(self.exit_code, self.config).headline
        return f"perfgate: {status} ({', '.join(parts) or 'no workloads'})"
