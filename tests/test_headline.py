"""The verdict line is read in one glance: the deciding fact first, at most ~200 characters
whatever the workload's name and however many counters fail, quoting the interval the phase
table shows (at its level, by name); every report prints the same line, and the whole reason
stays in the workload's section."""

from __future__ import annotations

import dataclasses
import json

import pytest
from factories import make_result
from test_reports import baseline_for, scenario

from perfgate.analysis.compare import compare
from perfgate.analysis.decide import GateConfig, Look
from perfgate.analysis.outcome import HEADLINE_LIMIT, Counted, Entry, Pairing, WorkloadComparison
from perfgate.model.counters import CounterSet, PhaseCounters, SyncSite
from perfgate.model.verdict import Verdict
from perfgate.model.workload import PHASES
from perfgate.report.html import render_html
from perfgate.report.json_report import outcome_to_dict
from perfgate.report.markdown import render_markdown
from perfgate.report.phase_table import RowKind, phase_table
from perfgate.report.terminal import gate_table
from perfgate.store.baselines import Lookup

LONG = "a-very-long-workload-name-that-takes-the-whole-sixty-four-chars."
assert len(LONG) == 64


def counters(name: str, grow: int) -> CounterSet:
    """A CPU counter set; ``grow`` > 1 multiplies the FLOPs and aten calls of forward, backward
    and the optimizer and adds a host synchronisation in forward: seven failing counters."""
    phases = {}
    for p in PHASES:
        k = grow if p in ("forward", "backward", "optimizer") else 1
        phases[p] = PhaseCounters(
            ops={"aten::mm": 100 * k}, copies={}, dtype_conversions=0, device_copies=0, flops=1000 * k,
            flops_by_op={"aten::mm": 1000 * k}, kernel_launches=None, memcpy_calls=None, allocator=None,
            syncs=(SyncSite("workloads/x.py:42", "aten::_local_scalar_dense", 2),) if grow > 1 and p == "forward" else ())
    return CounterSet(name, 1, "cpu", 2, 1, {}, phases, None,
                      {"compile": "no", "kernel_launches": "cpu", "memcpy_calls": "cpu", "allocator": "cpu"}, "test")


def paired(name: str, scale: float, seed: int):
    r = make_result(name, repeats=6, scale=scale, seed=seed)
    return dataclasses.replace(r, repeats=tuple(dataclasses.replace(x, block=i // 2) for i, x in enumerate(r.repeats)))


def counted_regression(name: str) -> tuple[object, WorkloadComparison]:
    entry = Entry(name, paired(name, 1.16, 1), None, pairing=Pairing(paired(name, 1.0, 2), "b" * 40),
                  counted=Counted(counters(name, 1), counters(name, 2)))
    outcome = compare([entry], GateConfig())
    return outcome, outcome.comparisons[0]


def step_change(c: WorkloadComparison) -> tuple[str, str]:
    table = phase_table(c)
    return next(r.change for r in table.rows if r.kind is RowKind.STEP), table.level


def test_many_failing_counters_and_a_long_name_make_one_short_line() -> None:
    outcome, c = counted_regression(LONG)
    assert len(c.counters.failures) == 7 and len(c.reason) > 800  # what the line used to be
    line = c.verdict_line
    assert len(line) <= HEADLINE_LIMIT, line
    assert line.startswith(f"{LONG}: REGRESSION — counters: 1 new host synchronisation per step in forward, +6 more")
    change, level = step_change(c)
    assert f"{change} ({level}% CI)" in line and level == "95"  # the table's interval, named


def test_with_room_the_counters_line_says_more_and_names_the_statistic() -> None:
    _, c = counted_regression("resnet18")
    change, level = step_change(c)
    assert c.verdict_line == ("resnet18: REGRESSION — counters: 1 new host synchronisation per step in forward "
                              f"and 6 more counters; timing alone REGRESSION: time per step {change} ({level}% CI)")


def test_every_verdict_line_of_the_golden_scenario_quotes_the_tables_interval() -> None:
    for c in scenario().comparisons:
        assert len(c.verdict_line) <= HEADLINE_LIMIT
        assert c.verdict_line == f"{c.workload}: {c.verdict.value} — {c.headline}"
        if c.time is not None:
            change, level = step_change(c)
            assert c.headline.startswith(f"time per step {change} ({level}% CI): "), c.headline
            assert "the level of this look's test" not in c.headline  # that interval stays in the reason
    slow = scenario().comparisons[0]
    assert slow.headline.endswith("slower by more than δ=3%, significant after Holm's correction")


@pytest.mark.parametrize("verdict", [Verdict.ERROR, Verdict.INCOMPARABLE, Verdict.NO_BASELINE])
def test_a_long_reason_of_an_unjudged_workload_is_cut_at_a_word(verdict: Verdict) -> None:
    differences = {f"param knob_{i}": (i, i + 1) for i in range(12)} if verdict is Verdict.INCOMPARABLE else {}
    c = WorkloadComparison(LONG, verdict, "the worker said: " + "something went wrong again " * 40,
                           differences=differences)
    assert len(c.verdict_line) <= HEADLINE_LIMIT
    if differences:
        assert c.headline.startswith("differs from the baseline in param knob_0: 0 → 1 and 11 more differences")
    else:
        assert c.headline.endswith("…") and not c.headline.endswith(" …")


def test_memory_and_a_gated_phase_come_before_the_step() -> None:
    baseline = baseline_for("tiny", [1, 2, 3])
    fat = make_result("tiny", seed=9, peak=2_000_000)
    c = compare([Entry("tiny", fat, Lookup(baseline, None))], GateConfig(), look=Look.single(5, "repeat")).comparisons[0]
    assert c.verdict is Verdict.REGRESSION
    assert c.headline.startswith("peak memory +100.0%, above the 10% threshold; time per step ")
    slow_data = make_result("tiny", seed=9, phase_scale={"data_wait": 3.0})
    config = GateConfig(gate_phases=("data_wait",))
    c = compare([Entry("tiny", slow_data, Lookup(baseline, None))], config, look=Look.single(5, "repeat")).comparisons[0]
    assert c.verdict is Verdict.REGRESSION
    assert c.headline.startswith("gated phase data_wait per step +"), c.headline
    assert "% CI): slower by more than δ=3%; time per step " in c.headline


def test_every_renderer_prints_the_same_line() -> None:
    outcome, c = counted_regression("resnet18")
    markdown = render_markdown(outcome)
    top = markdown.split("###")[0]
    assert "counters: 1 new host synchronisation per step in forward and 6 more counters" in top
    assert "aten operator calls per step in optimizer" not in top  # the details: in the section and the table
    assert "aten operator calls per step in optimizer" in markdown
    terminal = gate_table(outcome)
    assert c.verdict_line in terminal
    assert terminal.splitlines()[2] == c.verdict_line
    assert c.headline in render_html(outcome)
    data = outcome_to_dict(outcome)["workloads"][0]
    assert data["headline"] == c.headline and data["reason"] == c.reason
    json.dumps(data, allow_nan=False)


def test_the_pytest_lines_are_the_verdict_line() -> None:
    from types import SimpleNamespace

    from perfgate.adapters.pytest_session import GateSession

    _, c = counted_regression("resnet18")
    assert GateSession.skip_reason(SimpleNamespace(), c) == f"REGRESSION: {c.headline}"


def test_an_undecided_step_says_at_which_level_it_was_tested() -> None:
    baseline = baseline_for("tiny", [1, 2, 3])
    noisy = make_result("tiny", seed=9, repeats=3, scale=1.03, jitter=0.05)
    c = compare([Entry("tiny", noisy, Lookup(baseline, None))], GateConfig(), look=Look.single(3, "repeat")).comparisons[0]
    assert c.verdict is Verdict.TOO_NOISY, c.reason
    change, level = step_change(c)
    assert c.headline.startswith(f"too noisy to gate: upper bound +8.8% reaches +6%; time per step {change} ({level}% CI): "
                                 "undecided at this look's Holm level; ")
    assert "could detect" in c.headline and len(c.verdict_line) <= HEADLINE_LIMIT
    c = compare([Entry("tiny", noisy, Lookup(baseline, None))], GateConfig(inconclusive_bound=0.2),
                look=Look.single(3, "repeat")).comparisons[0]
    assert c.verdict is Verdict.INCONCLUSIVE, c.reason
    assert c.headline.startswith(f"time per step {change} ({level}% CI): undecided at this look's Holm level; ")
    assert "not slower than +8.8%" in c.headline and "undecided, but not slower than +8.8%" in c.reason
    assert "could detect" in c.headline and len(c.verdict_line) <= HEADLINE_LIMIT
