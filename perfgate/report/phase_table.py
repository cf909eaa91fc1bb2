"""The phase table of one judged workload, built once for every report.

Each row holds the values a report shows (the two sides' time per step, the change with
its interval, the share of the time per step) and what the row says (tested, flagged and which way,
gated, the step's verdict); the terminal, markdown and HTML reports only decorate them.
The interval's level is the estimate's own (``[tool.perfgate] confidence``), never a
fixed 95%.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from dataclasses import dataclass
from enum import StrEnum

from perfgate.analysis.decide import level_text
from perfgate.analysis.outcome import WorkloadComparison
from perfgate.analysis.stats import LogRatio
from perfgate.analysis.summary import WorkloadSummary
from perfgate.model.repeat import PER_STEP
from perfgate.model.result import RESIDUAL
from perfgate.model.verdict import Verdict
from perfgate.model.workload import PHASE_TABLE
from perfgate.report.sides import row_sides
from perfgate.report.wording import column_names, step_estimate
from perfgate.text.units import change_ci, ms, percent

NO_CHANGE = "—"


class RowKind(StrEnum):
    PHASE = "phase"
    RESIDUAL = "residual"
    """The part of the step no phase explains: no estimate of its own."""
    STEP = "step"


@dataclass(frozen=True)
class TableRow:
    phase: str
    kind: RowKind
    before_ms: str
    after_ms: str
    change: str
    """The change with its interval, or ``—`` when the row has no estimate."""
    share: float | None
    """Share of the current step (time-weighted over the window); 1 for the step."""
    absent: bool
    """0 ms on both sides: a phase this kind of measurement does not have."""
    tested: bool | None = None
    """Whether the phase's change was tested (None: no estimate)."""
    direction: str | None = None
    """``slower`` or ``faster`` when the phase was flagged (Benjamini-Hochberg over phases)."""
    q_value: float | None = None
    gated: Verdict | None = None
    """The verdict of a gated phase."""
    verdict: Verdict | None = None
    """The step's verdict (the step row only)."""

    @property
    def share_text(self) -> str:
        return percent(self.share)


@dataclass(frozen=True)
class PhaseTable:
    before: str
    after: str
    level: str
    """The interval's confidence level in percent, as the estimate states it."""
    rows: tuple[TableRow, ...]

    @property
    def headers(self) -> list[str]:
        return ["phase", f"{self.before} ms/step", f"{self.after} ms/step", f"change ({self.level}% CI)", "share",
                "flag"]


def _sides(c: WorkloadComparison, row: str, statistic: str, est: LogRatio) -> dict[str, str]:
    """The row's two sides beside its estimate (``perfgate.report.sides``): never moving against it."""
    shown = row_sides(c, row, statistic, est)
    return {} if shown is None else {"before_ms": ms(shown.before), "after_ms": ms(shown.after)}


def phase_table(c: WorkloadComparison) -> PhaseTable:
    """The table of a judged workload (one with a time decision). A row with an estimate shows
    the sides it compares (:mod:`perfgate.report.sides`): the reference's geometric mean as the
    estimate weighs its repeats and that × the estimated ratio; a row without one (the residual,
    a phase with no estimate) the medians over repeats."""
    assert c.time is not None
    before, after = column_names(c)
    rows = []
    for row in c.phases:
        absent = row.baseline_ms == 0 and row.current_ms == 0
        # the keyword arguments every TableRow of the row shares (Any: str and bool values)
        common: dict[str, Any] = {"phase": row.phase, "before_ms": ms(row.baseline_ms),
                                  "after_ms": ms(row.current_ms), "absent": absent}
        if row.phase == "step":
            per_step = step_estimate(c)
            est = per_step or c.time.estimate
            common |= _sides(c, row.phase, PER_STEP if per_step is not None else c.time.statistic, est)
            rows.append(TableRow(kind=RowKind.STEP, change=change_ci(est.ratio, est.ci_low, est.ci_high),
                                 share=row.share, verdict=c.time.verdict, **common))
            continue
        if row.phase == RESIDUAL:
            rows.append(TableRow(kind=RowKind.RESIDUAL, change=NO_CHANGE, share=row.share, **common))
            continue
        gated = c.gated.get(row.phase)
        flag = row.flag
        if flag is None or flag.estimate is None:
            rows.append(TableRow(kind=RowKind.PHASE, change=NO_CHANGE, share=row.share,
                                 gated=gated.verdict if gated else None, **common))
            continue
        est = flag.estimate
        common |= _sides(c, row.phase, PER_STEP, est)
        direction = ("slower" if est.ratio > 1 else "faster") if flag.tested and flag.flagged else None
        rows.append(TableRow(kind=RowKind.PHASE, change=change_ci(est.ratio, est.ci_low, est.ci_high),
                             share=row.share, tested=flag.tested, direction=direction, q_value=flag.q_value,
                             gated=gated.verdict if gated else None, **common))
    return PhaseTable(before, after, level_text(c.time.estimate.confidence), tuple(rows))


_RANK_EXTRAS = {"backward": {"backward_work": "backward w/o wait", "comm": "all-reduce wait",
                              "comm_total": "all-reduce in flight"}}
"""The distributed series shown after a phase's column (the all-reduce's, after backward)."""
RANK_COLUMNS = {column: header
                for phase in PHASE_TABLE
                for column, header in {phase.name: phase.header, **_RANK_EXTRAS.get(phase.name, {})}.items()}
RANK_COLUMNS["step"] = "step"
"""The per-rank table's columns, in order, and their headers: the phases' (PHASE_TABLE), the
all-reduce's after backward, then the step."""


def rank_table(summary: WorkloadSummary | None,
               phases: Sequence[str] | None = None) -> tuple[list[str], list[list[str]]]:
    """A distributed run's per-rank medians (ms): a header and one row per rank; empty for a
    run that is not distributed. ``phases`` limits the phase columns (the flagged ones in a
    gate's report); backward's column brings the wait and the work without it, and the step
    is always shown."""
    if summary is None or not summary.ranks:
        return [], []
    wanted = set(RANK_COLUMNS) if phases is None else {*phases, "step"}
    if "backward" in wanted:
        wanted |= {"comm", "backward_work"}
    columns = [c for c in RANK_COLUMNS if c in wanted and all(c in r for r in summary.ranks)]
    rows = [[str(i), *(ms(r[c]) for c in columns)] for i, r in enumerate(summary.ranks)]
    return ["rank", *(RANK_COLUMNS[c] for c in columns)], rows


def flagged_rank_table(c: WorkloadComparison) -> tuple[list[str], list[list[str]]]:
    """The per-rank table a gate's report shows: the phases flagged, and those a STRAGGLER
    label names (empty when none, or the run is not distributed)."""
    phases = {r.phase for r in c.phases if r.flag is not None and r.flag.flagged}
    phases |= {label.phase for label in c.labels if label.name == "STRAGGLER" and label.phase}
    return rank_table(c.current, sorted(phases)) if phases else ([], [])
