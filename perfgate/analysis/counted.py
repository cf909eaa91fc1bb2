"""The exact counters of a comparison: which counted runs are compared, and why none are.

The stored design compares the baseline's counted run (recorded by ``perfgate rebaseline``)
with the current one, the paired design the base's with the head's; ``counters = false`` or
a missing counted run leaves a note instead. The comparison itself, call by call, is
:mod:`perfgate.analysis.counters`.
"""

from __future__ import annotations

from perfgate.analysis.counters import CounterChanges, CounterThresholds, compare_counters
from perfgate.analysis.decide import GateConfig
from perfgate.analysis.outcome import Counted
from perfgate.model.counters import GATED, CounterSet
from perfgate.store.baselines import Lookup


STORED_COUNTERS_NOTE = "not compared: the baseline has no counted run (perfgate rebaseline records one)"
"""Why a stored-design comparison has no counters."""
NOT_COUNTED = "not counted"
"""Why a comparison given no counted runs has no counters."""
COUNTERS_OFF_NOTE = "not counted: counters = false in [tool.perfgate]"


def counter_thresholds(config: GateConfig) -> CounterThresholds:
    """The counters' thresholds of a (per-workload) gate configuration."""
    return CounterThresholds(flops_threshold=config.flops_threshold, launch_threshold=config.launch_threshold,
                             enabled=frozenset(GATED) - set(config.counters_off))


def stored_counted(lookup: Lookup | None, head: CounterSet | None, config: GateConfig) -> Counted | None:
    """The stored design's counters of one workload: the baseline's counted run against
    the current one. None when there is no baseline to compare with at all."""
    if lookup is None or lookup.baseline is None:
        return None
    if not config.counters:
        return Counted(note=COUNTERS_OFF_NOTE)
    if lookup.counters is None:
        return Counted(head=head, note=STORED_COUNTERS_NOTE)
    if head is None:
        return Counted(base=lookup.counters, note="not compared: no counted run of the current code")
    return Counted(lookup.counters, head)


def counter_changes(counted: Counted | None, config: GateConfig) -> tuple[CounterChanges | None, str | None]:
    """The counters' changes of one workload, or None with the reason."""
    if counted is None:
        return None, NOT_COUNTED
    if counted.base is None or counted.head is None:
        return None, counted.note or NOT_COUNTED
    try:
        return compare_counters(counted.base, counted.head, counter_thresholds(config)), counted.note
    except ValueError as exc:
        return None, f"not compared: {exc}"


def counters_reason(changes: CounterChanges) -> str:
    """The reason line of a workload its counters fail."""
    return "counters: " + "; ".join(c.reason for c in changes.failures)
