"""What a comparison takes and gives: the entries of a gate (a result, its baseline lookup,
the base side of a paired comparison, the counted runs) and the outcome (one
:class:`WorkloadComparison` per workload, and the :class:`GateOutcome` with the exit code)."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from perfgate.analysis.counters import CounterChanges
from perfgate.analysis.decide import GateConfig, Look, PhaseFlag, TimeDecision, level_text
from perfgate.analysis.memory import MemoryDecision
from perfgate.analysis.diagnose import Label
from perfgate.analysis.stats import LogRatio
from perfgate.analysis.summary import WorkloadSummary
from perfgate.model.baseline import Baseline, Provenance
from perfgate.model.cost import MeasuringCost
from perfgate.model.counters import CounterSet
from perfgate.model.repeat import PER_STEP, STATISTIC_WORDS
from perfgate.model.result import RunResult
from perfgate.model.verdict import INCONCLUSIVE_PASS, POLICY, Verdict, gate_exit_code, run_policy
from perfgate.store.baselines import Lookup
from perfgate.text.units import change_ci

HEADLINE_LIMIT = 200
"""The most characters of a workload's verdict line (``name: VERDICT — fact``): read in one
glance, in a pull request's comment, a terminal or a check run's annotation."""


BlockEstimate = Callable[..., LogRatio]
"""``(base_blocks, head_blocks, *, confidence) -> LogRatio``: a paired design's estimate of the
head against the base from their ``perfgate.analysis.blocks.BlockValue`` s."""


@dataclass(frozen=True)
class Pairing:
    """The base side of a paired comparison: the base commit measured in the same job,
    alternating with the head in ABBA blocks (each repeat carries its ``block``)."""

    base: RunResult
    against: str
    """The base commit (full sha), or the name the user gave when it is not a git commit."""
    base_python: str | None = None
    """Another interpreter measured the base side (``--base-python``): environments may differ."""
    estimate: BlockEstimate | None = None
    """How the base and head blocks become the estimate: None, the gate's own
    (``perfgate.analysis.blocks.block_log_ratio``); the simulation passes the alternatives
    it compares with it (``perfgate.analysis.simulate``)."""



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

    green_bound: float | None = None
    """The slowdown this undecided workload's interval had to rule out to stay green (:func:`settle`);
    None: not settled (decided, still measuring, or ``inconclusive = "pass"``)."""

    progress: str | None = None
    """How the sequential gate ended for this workload: "decided after 9 blocks (3 min 10 s)",
    or why it stopped undecided (the budget, an interruption)."""

    @property
    def goes_on(self) -> bool:
        """Undecided on time with a later look still planned (and not already failed)."""
        return self.verdict is Verdict.INCONCLUSIVE and self.time is not None and self.time.goes_on

    @property
    def upper_bound(self) -> float | None:
        """The largest slowdown an undecided workload's interval leaves open: the highest PASS
        bound (ratio, at its look's PASS level) of its time per step and its open gated phases;
        None when one of them has none (no interval rules anything out)."""
        if self.time is None:
            return None
        bounds = [self.time.pass_bound, *(d.pass_bound for d in self.gated.values() if d.verdict in UNDECIDED)]
        return max(bounds) if all(isinstance(b, float) and math.isfinite(b) for b in bounds) else None

    @property
    def headline(self) -> str:
        """The deciding fact, and what most bears on it, short enough that :attr:`verdict_line`
        keeps within :data:`HEADLINE_LIMIT`: what failed first (a counter, a gated phase, memory,
        the step), the step's change with the interval the phase table shows, at its level, by
        name. The whole argument (the Holm level, p, the bounds, every failing counter) stays
        in :attr:`reason`, which the report prints under the verdicts, and in the tables."""
        return _fit(_headline_parts(self), HEADLINE_LIMIT - len(self._line_prefix))

    @property
    def verdict_line(self) -> str:
        """``name: VERDICT — fact``, at most :data:`HEADLINE_LIMIT` characters for a name of up
        to 64 (the longest a workload may have)."""
        return self._line_prefix + self.headline

    @property
    def _line_prefix(self) -> str:
        return f"{self.workload}: {self.verdict.value} — "


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


UNDECIDED = (Verdict.INCONCLUSIVE, Verdict.TOO_NOISY)
"""The verdicts of a workload the gate ended without deciding: green or too noisy (:func:`settle`)."""

CALIBRATE_HINT = "`perfgate calibrate` measures where this runner's noise sits and the design that decides soonest"


def settle(c: WorkloadComparison, config: GateConfig, *, ended: bool = False) -> WorkloadComparison:
    """An undecided workload at the end of its gate under ``config.inconclusive``.

    "bound" (the default) and "fail": green only when the interval rules out a slowdown of
    ``config.green_bound`` (2δ by default): the upper bound PASS is held to, at the last look's
    level, below ``1 + green_bound``. Then it stays INCONCLUSIVE and its reason says "undecided,
    but not slower than +X%"; else it is TOO_NOISY: a slowdown of the bound is not ruled out, so
    a green check would cover it. Over the whole gate a true slowdown of the bound ends green
    with chance at most the PASS rule's 2.5% (the same bound, at the same levels, with more room).
    "pass": unchanged. Anything else (decided, still measuring) is returned as it is; ``ended``:
    the gate stopped (its budget, an interruption) while this workload was still measuring."""
    if c.verdict is not Verdict.INCONCLUSIVE or (c.goes_on and not ended) or config.inconclusive == INCONCLUSIVE_PASS:
        return c
    bound = config.green_bound
    upper = c.upper_bound
    limit = f"{bound * 100:+.3g}%"
    if upper is not None and upper < 1.0 + bound:
        return dataclasses.replace(c, green_bound=bound, reason=(
            f"{c.reason}; undecided, but not slower than {(upper - 1) * 100:+.1f}% (the gate's bound {limit}: its "
            "check stays green)"))
    shown = (f"its upper bound {(upper - 1) * 100:+.1f}% reaches the gate's bound {limit}" if upper is not None else
             f"no interval rules out the gate's bound {limit}")
    return dataclasses.replace(c, verdict=Verdict.TOO_NOISY, green_bound=bound, reason=(
        f"too noisy to gate: {shown}, so a slowdown that large could pass unseen; {c.reason}; measure more blocks "
        f"(a larger budget), use a quieter runner, or raise inconclusive_bound; {CALIBRATE_HINT}"))


_MIN_FACT = 100
"""The room a fact keeps whatever the workload's name: a longer name makes a longer line."""
_DELTA = re.compile(r"δ=[0-9.]+%")
_ASIDE = re.compile(r" \([^()]*\)")

Clause = tuple[str, ...]
"""One clause of a headline in the forms it may take, the fullest first."""


def _fit(parts: Sequence[Clause], room: int) -> str:
    """The fullest headline that fits in ``room`` (at least :data:`_MIN_FACT`): every clause in
    its full form, then in its shortest, then the last clauses left out one by one; the
    deciding clause alone is cut at a word, with "…", when nothing else fits."""
    room = max(room, _MIN_FACT)
    for n in range(len(parts), 0, -1):
        for form in (0, -1):
            text = "; ".join(clause[form] if form == 0 else clause[-1] for clause in parts[:n])
            if len(text) <= room:
                return text
    text = parts[0][-1] if parts else ""
    return text[: room - 1].rsplit(" ", 1)[0].rstrip(";,:") + "…"


def _gist(reason: str) -> str:
    """The first clause of a reason: asides in parentheses and what follows the first ": "
    (the operators, stack lines or values behind it) left to the table."""
    text = _ASIDE.sub("", reason)
    return text.split("; ", 1)[0].split(": ", 1)[0].strip()


def _delta(decision: TimeDecision) -> str:
    found = _DELTA.search(decision.reason)
    return found.group(0) if found else "δ"


def _change(decision: TimeDecision, row: str | None = None) -> str:
    """``time per step +9.2% [+6.4, +12.1] (95% CI)``: the estimate's own interval, the one
    the tables show at their level (never the wider interval of the Holm step's level)."""
    est = decision.estimate
    what = row or STATISTIC_WORDS.get(decision.statistic, decision.statistic)
    return f"{what} {change_ci(est.ratio, est.ci_low, est.ci_high)} ({level_text(est.confidence)}% CI)"


def _step_clause(time: TimeDecision) -> Clause:
    change, d = _change(time), _delta(time)
    if time.verdict is Verdict.REGRESSION:
        return (f"{change}: slower by more than {d}, significant after Holm's correction",
                f"{change}: slower by more than {d}")
    if time.verdict is Verdict.IMPROVED:
        return f"{change}: faster by more than {d}; consider rebaselining", f"{change}: faster by more than {d}"
    if time.verdict is Verdict.PASS:
        return (f"{change}: within {d}",)
    # Significance is tested at the Holm step's level, wider than the table's: say so, or a 95%
    # interval above 0% beside "undecided" would read as a contradiction.
    return f"{change}: undecided at this look's Holm level", f"{change}: undecided"


def _more(n: int, what: str) -> Clause:
    return (f" and {n} more {what}{'s' if n > 1 else ''}", f", +{n} more") if n else ("",)


def _headline_parts(c: WorkloadComparison) -> list[Clause]:
    """The headline's clauses, the deciding one first (in :func:`compare`'s order: a failing
    counter, a failing gated phase, memory, an open gated phase, the step), then the others
    in the order they matter; :func:`_fit` keeps as many as the line has room for."""
    time = c.time
    if time is None or not POLICY[c.verdict].judged:
        if c.verdict is Verdict.INCOMPARABLE and c.differences:
            shown = [f"{k}: {a!r} → {b!r}" for k, (a, b) in c.differences.items()]
            more = _more(len(shown) - 1, "difference")
            first = f"differs from the baseline in {shown[0]}"
            return [(first + more[0], first + more[-1]), (c.reason.split("; ")[0],)]
        return [(c.reason,)]
    parts: list[Clause] = []
    if c.counters_failed:
        assert c.counters is not None
        failures = c.counters.failures
        first = f"counters: {_gist(failures[0].reason)}"
        more = _more(len(failures) - 1, "counter")
        parts.append((first + more[0], first + more[-1]))
        short = "time" if time.statistic == PER_STEP else None
        parts.append((f"timing alone {time.verdict.value}: {_change(time)}", f"{_change(time, short)}: {time.verdict.value}"))
    failed_gated = [p for p, d in c.gated.items() if d.verdict is Verdict.REGRESSION]
    open_gated = [p for p, d in c.gated.items() if d.verdict is Verdict.INCONCLUSIVE]
    if failed_gated:
        first_gated = c.gated[failed_gated[0]]
        more = _more(len(failed_gated) - 1, "phase")
        text = f"gated phase {_change(first_gated, f'{failed_gated[0]} per step')}: slower by more than {_delta(first_gated)}"
        parts.append((text + more[0], text + more[-1]))
    elif c.memory is not None and c.memory.verdict is Verdict.REGRESSION:
        parts.append((_ASIDE.sub("", c.memory.reason),))
    elif open_gated and time.verdict in (Verdict.PASS, Verdict.IMPROVED):
        parts.append((f"gated phase {_change(c.gated[open_gated[0]], f'{open_gated[0]} per step')}: undecided",))
    if not c.counters_failed:
        parts.append(_step_clause(time))
    upper = c.upper_bound
    if c.verdict is Verdict.TOO_NOISY and c.green_bound is not None:
        reach = (f"upper bound {(upper - 1) * 100:+.1f}% reaches {c.green_bound * 100:+.3g}%" if upper is not None
                 else f"{c.green_bound * 100:+.3g}% not ruled out")
        parts.insert(0, (f"too noisy to gate: {reach}", "too noisy to gate"))
    elif c.verdict is Verdict.INCONCLUSIVE and c.green_bound is not None and upper is not None:
        parts.append((f"not slower than {(upper - 1) * 100:+.1f}%",))
    if c.verdict in UNDECIDED:
        if c.goes_on:
            parts.append(("measuring on",))
        elif c.progress:
            parts.append((c.progress.split("; ")[0],))
        if math.isfinite(time.mde):
            parts.append((f"this look could detect about {time.mde * 100:+.1f}%",
                          f"could detect {time.mde * 100:+.1f}%"))
    return parts
