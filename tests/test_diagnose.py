"""Bottleneck labels and throttled repeats: each label with its evidence numbers."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timezone
from pathlib import Path

from factories import make_result

from perfgate.baseline import Lookup, updated_baseline
from perfgate.compare import Entry, compare
from perfgate.decide import GateConfig, Verdict
from perfgate.diagnose import diagnose


def names(result) -> list[tuple[str, str]]:
    return [(label.name, label.severity) for label in diagnose(result)]


def test_compute_bound_is_informational() -> None:
    (label,) = diagnose(make_result())
    assert (label.name, label.severity) == ("COMPUTE-BOUND", "info")
    assert "97% of a 99." in label.evidence and "median over 50 steps of 5 repeat(s)" in label.evidence


def test_input_bound_warning_and_critical_thresholds() -> None:
    # data wait is 2 ms of a ~100 ms step; scaling it moves its share across 10% and 20%
    assert names(make_result(phase_scale={"data_wait": 7})) == [("INPUT-BOUND", "warning")]
    assert names(make_result(phase_scale={"data_wait": 30})) == [("INPUT-BOUND", "critical")]
    label = diagnose(make_result(phase_scale={"data_wait": 30}))[0]
    assert label.evidence.startswith("data wait 60.0 ms, 3")  # the seeds' story: ms and share
    assert 0.35 < label.share < 0.40


def test_h2d_bound_and_balanced() -> None:
    assert ("H2D-BOUND", "critical") in names(make_result(phase_scale={"h2d": 60}))
    # data wait 8% and copies 7%: neither crosses 10%, compute is under 90%
    balanced = diagnose(make_result(phase_scale={"data_wait": 4, "h2d": 14}))
    assert [label.name for label in balanced] == ["BALANCED"]
    assert "no phase dominates" in balanced[0].evidence


def test_residual_heavy_names_the_unattributed_time() -> None:
    result = make_result()
    slow = []
    for rep in result.repeats:
        step = tuple(v + 40.0 for v in rep.phases_ms["step"])  # 40 ms no phase explains
        slow.append(dataclasses.replace(rep, phases_ms={**rep.phases_ms, "step": step}))
    labels = diagnose(dataclasses.replace(result, repeats=tuple(slow)))
    assert labels[0].name == "RESIDUAL-HEAVY" and labels[0].severity == "critical"
    assert labels[0].evidence.startswith("unattributed time 2")


def test_cuda_runs_report_the_device_busy_fraction() -> None:
    result = make_result()
    reps = []
    for rep in result.repeats:
        busy = tuple(0.51 * v for v in rep.phases_ms["step"])
        reps.append(dataclasses.replace(rep, phases_ms={**rep.phases_ms, "device_busy": busy}))
    (label,) = diagnose(dataclasses.replace(result, repeats=tuple(reps)))
    assert "device busy 51% of the window" in label.evidence


def throttle(result, indices: set[int]):
    reps = []
    for rep in result.repeats:
        gpu = {"throttled": rep.index in indices,
               "throttle_reasons": ["hw_thermal_slowdown"] if rep.index in indices else []}
        reps.append(dataclasses.replace(rep, telemetry={"gpu": gpu, "cpu": None}))
    return dataclasses.replace(result, repeats=tuple(reps))


def test_throttled_repeats_are_left_out_with_the_reason() -> None:
    now = datetime(2026, 11, 30, tzinfo=timezone.utc)
    baseline = updated_baseline(None, throttle(make_result(seed=1), {4}), "r", append=False, now=now)
    # current: one repeat 40% slower, recorded while the GPU throttled
    current = throttle(make_result(seed=2, repeat_scales=[1, 1, 1, 1.4, 1, 1]), {3})
    (c,) = compare([Entry("tiny", current, Lookup(baseline, Path("b.json")))], GateConfig()).comparisons
    # telemetry as perfgate wrote it before the power cap stopped counting: the reasons list
    assert c.left_out == ("1 of 6 current repeat(s) left out: thermal (hw_thermal_slowdown) in repeat 4",
                          "1 baseline repeat(s) left out: thermal (hw_thermal_slowdown)")
    assert c.time is not None and c.time.estimate.n_current == 5 and c.time.estimate.n_baseline == 4
    assert c.verdict is not Verdict.REGRESSION
    everything = throttle(make_result(seed=3), set(range(5)))
    (e,) = compare([Entry("tiny", everything, Lookup(baseline, Path("b.json")))], GateConfig()).comparisons
    assert e.verdict is Verdict.ERROR and "none is left" in e.reason


def test_each_workload_keeps_its_own_labels_in_a_gate() -> None:
    now = datetime(2026, 11, 30, tzinfo=timezone.utc)
    entries = []
    for name, scale in (("slow-input", {"data_wait": 20}), ("plain", None)):
        result = dataclasses.replace(make_result(seed=5, phase_scale=scale), workload=name)
        base = updated_baseline(None, dataclasses.replace(make_result(seed=6, phase_scale=scale), workload=name),
                                "r", append=False, now=now)
        entries.append(Entry(name, result, Lookup(base, Path(f"{name}.json"))))
    by_name = {c.workload: [label.name for label in c.labels] for c in compare(entries, GateConfig()).comparisons}
    assert by_name == {"slow-input": ["INPUT-BOUND"], "plain": ["COMPUTE-BOUND"]}
