"""MEMORY-CREEP: the slope of the sampled memory over the window, the label, and the gate's rule."""

from __future__ import annotations

import dataclasses
import json
import math
import random
import shutil
from pathlib import Path

import pytest

from perfgate.analysis.compare import compare
from perfgate.analysis.decide import GateConfig
from perfgate.analysis.diagnose import diagnose
from perfgate.analysis.memory import (
    CREEP_FLOOR_BYTES,
    MemoryDecision,
    creep_rule,
    excess,
    memory_creep,
    missing_slopes,
)
from perfgate.analysis.outcome import Entry, Pairing
from perfgate.measure.telemetry import TelemetrySampler
from perfgate.measure.telemetry_host import memory_slope
from perfgate.model.result import RunResult, result_from_dict
from perfgate.model.verdict import Verdict
from tests.factories import make_result
from tests.test_paired import FIRST, _paired_results

MIB = 1 << 20


def test_the_slope_of_steady_growth_is_its_rate_with_no_error():
    times = [0.1 * i for i in range(12)]
    slope = memory_slope(times, [5e8 + 2e6 * t for t in times])
    assert slope is not None
    assert slope["bytes_per_s"] == pytest.approx(2e6)
    assert slope["stderr_bytes_per_s"] == pytest.approx(0.0, abs=1e-3)
    assert slope["samples"] == 12


def test_a_flat_series_has_a_slope_near_zero_inside_its_error():
    rng = random.Random(1)
    times = [0.1 * i for i in range(20)]
    slope = memory_slope(times, [5e8 + rng.choice((0, 4096, -4096)) for _ in times])
    assert slope is not None
    assert abs(slope["bytes_per_s"]) < 3 * slope["stderr_bytes_per_s"]


def test_too_few_samples_or_unpaired_lists_give_no_slope():
    assert memory_slope([0.0, 0.1, 0.2, 0.3], [1.0, 2.0, 3.0, 4.0]) is None
    assert memory_slope([0.0] * 6, [1.0] * 6) is None  # no spread in time
    assert memory_slope([0.1 * i for i in range(6)], [1.0] * 5) is None


def test_the_sampler_summary_holds_the_rss_slope_once_there_are_enough_samples():
    sampler = TelemetrySampler("cpu")
    for _ in range(3):
        sampler._tick()
    assert sampler.summary()["cpu"]["rss_slope"] is None
    for _ in range(3):
        sampler._tick()
    slope = sampler.summary()["cpu"]["rss_slope"]
    assert slope is not None and slope["samples"] == 6
    assert set(slope) == {"bytes_per_s", "stderr_bytes_per_s", "samples"}


def planted(result: RunResult, per_step: list[float], *, stderr: float = 0.02) -> RunResult:
    """``result`` with each repeat's RSS slope set to ``per_step`` bytes per step (its error a
    share ``stderr`` of a MiB per step)."""
    repeats = []
    for r, grow in zip(result.repeats, per_step, strict=True):
        to_rate = len(r.phases_ms["step"]) / r.window_s
        slope = {"bytes_per_s": grow * to_rate, "stderr_bytes_per_s": stderr * MIB * to_rate, "samples": 15}
        repeats.append(dataclasses.replace(r, telemetry={"samples": 15, "gpu": None, "cpu": {"rss_slope": slope}}))
    return dataclasses.replace(result, repeats=tuple(repeats))


def creep(labels):
    return [label for label in labels if label.name == "MEMORY-CREEP"]


def test_a_creeping_workload_is_labelled_with_its_slope_per_step_and_interval():
    result = planted(make_result(repeats=5), [MIB * f for f in (0.98, 1.0, 1.01, 1.0, 0.99)])
    [label] = creep(diagnose(result))
    assert label.severity == "warning" and label.share == 1.0
    assert label.evidence.startswith("resident memory grows 1.0 MiB per step [")
    assert "over the window (5 repeats)" in label.evidence
    [found] = memory_creep(result.repeats)
    assert found.low < MIB < found.high and found.creeps


def test_a_flat_or_barely_growing_workload_is_not_labelled():
    flat = planted(make_result(repeats=5), [0.0, 512.0, -512.0, 1024.0, 0.0], stderr=0.001)
    assert creep(diagnose(flat)) == []
    small = planted(make_result(repeats=5), [3 * 1024.0] * 5, stderr=0.0001)  # steady, but under the floor
    assert creep(diagnose(small)) == []
    assert not memory_creep(small.repeats)[0].creeps
    assert memory_creep(make_result(repeats=3).repeats) == []  # no telemetry: not known, no label


def test_repeats_that_disagree_widen_the_interval_below_the_floor():
    result = planted(make_result(repeats=3), [2 * MIB, 0.0, 0.0], stderr=0.001)
    [found] = memory_creep(result.repeats)
    assert found.low < CREEP_FLOOR_BYTES and creep(diagnose(result)) == []


def test_the_figure_shown_is_the_centre_of_its_interval_even_when_repeats_disagree():
    # Six flat repeats and four leaking 5 MiB a step: their median (0) lies outside the
    # interval on their mean; the label shows the mean, inside it.
    result = planted(make_result(repeats=10), [0.0] * 6 + [5 * MIB] * 4, stderr=0.001)
    [found] = memory_creep(result.repeats)
    assert found.per_step == pytest.approx(2 * MIB, rel=1e-6)
    assert found.low < found.per_step < found.high and found.low > 0
    assert found.describe().startswith("resident memory grows 2.0 MiB per step [")


def test_the_rule_head_creeps_base_flat_is_a_regression_and_both_creeping_changes_nothing():
    passing = MemoryDecision(Verdict.PASS, 1.0, "peak memory +0.0% (median of 5 vs 5 repeats), within the 10% threshold")
    grows = memory_creep(planted(make_result(repeats=5), [MIB] * 5).repeats)
    flat = memory_creep(planted(make_result(repeats=5), [0.0] * 5, stderr=0.001).repeats)
    decided = creep_rule(passing, grows, flat, "base side")
    assert decided.verdict is Verdict.REGRESSION and decided.ratio == 1.0
    assert decided.reason.startswith("MEMORY-CREEP: resident memory grows 1.0 MiB per step [")
    assert "the base side shows none" in decided.reason and "within the 10% threshold" in decided.reason
    assert creep_rule(passing, grows, grows) == passing
    assert creep_rule(passing, flat, flat) == passing
    assert creep_rule(passing, flat, grows) == passing  # creep that went away is not gated
    assert creep_rule(passing, grows, None) == passing  # a stored baseline: its slope is not known
    # a reference measured alike whose slope is missing: not compared, and the row says so
    # (the comparison makes it an ERROR unless missing_is_error = false)
    unknown = creep_rule(passing, grows, [], "base side")
    assert unknown.verdict is Verdict.PASS
    assert unknown.reason.endswith("; memory creep not compared: resident memory not recorded in the base side")
    assert creep_rule(passing, [], flat, "base side").reason.endswith(
        "memory creep not compared: resident memory not recorded in the head")


def test_a_slope_recorded_on_one_side_only_is_missing_on_the_other():
    grows = memory_creep(planted(make_result(repeats=5), [MIB] * 5).repeats)
    assert missing_slopes(grows, grows) == ([], [])
    assert missing_slopes([], grows) == (["resident memory"], [])
    assert missing_slopes(grows, []) == ([], ["resident memory"])
    assert missing_slopes([], []) == ([], [])


def test_a_head_within_the_reach_of_a_noisy_base_is_not_labelled():
    """A slowed step (a sleep in forward) over a base whose resident memory grows with time:
    the head's interval is above the floor and the base's reaches below it, but the base's
    reaches the head's growth too; the difference is noise, not creep (measured once as
    427 KiB per step [177, 677] against 163.6 [-186, 514], and labelled before this rule)."""
    passing = MemoryDecision(Verdict.PASS, 1.0, "peak memory +0.0% (median of 5 vs 5 repeats), within the 10% threshold")
    kib = 1024.0
    [head] = memory_creep(planted(make_result(repeats=5), [v * kib for v in (350, 400, 427, 460, 500)]).repeats)
    [base] = memory_creep(planted(make_result(repeats=5), [v * kib for v in (0, 500, -100, 400, 18)]).repeats)
    assert head.creeps and not base.creeps and base.high > head.per_step  # what the rule once labelled
    difference, low, high = excess(head, base)
    assert difference == pytest.approx(head.per_step - base.per_step) and low < CREEP_FLOOR_BYTES < high
    assert creep_rule(passing, [head], [base], "base side") == passing
    # the same head over a base measured flat is labelled
    [flat] = memory_creep(planted(make_result(repeats=5), [0.0] * 5, stderr=0.001).repeats)
    assert excess(head, flat)[1] > CREEP_FLOOR_BYTES
    assert creep_rule(passing, [head], [flat], "base side").verdict is Verdict.REGRESSION


def test_a_paired_head_that_creeps_against_a_flat_base_fails_on_its_memory_row():
    base, head = _paired_results(slow=1.0, jitter=0.005)
    base = planted(base, [0.0] * len(base.repeats), stderr=0.001)
    leaking = planted(head, [MIB] * len(head.repeats))
    c = compare([Entry("tiny", leaking, None, pairing=Pairing(base, "a1b2c3d"))], GateConfig(), look=FIRST).comparisons[0]
    assert c.verdict is Verdict.REGRESSION
    assert c.memory is not None and c.memory.verdict is Verdict.REGRESSION
    assert "MEMORY-CREEP: resident memory grows 1.0 MiB per step" in c.reason
    assert "the base side shows none" in c.reason
    both = planted(base, [MIB] * len(base.repeats))
    c = compare([Entry("tiny", leaking, None, pairing=Pairing(both, "a1b2c3d"))], GateConfig(), look=FIRST).comparisons[0]
    assert c.verdict is Verdict.PASS and c.memory is not None and c.memory.verdict is Verdict.PASS


def test_a_memory_slope_left_out_on_one_side_is_an_error_as_a_missing_peak_memory_is():
    """The head's leak is MEMORY-CREEP (the control); the same head with its slopes left out of
    its telemetry, or over a base side whose own slopes were left out, is an ERROR: missing
    data is never a pass. With missing_is_error = false it is shown as not compared."""
    base, head = _paired_results(slow=1.0, jitter=0.005)
    flat = planted(base, [0.0] * len(base.repeats), stderr=0.001)
    leaking = planted(head, [MIB] * len(head.repeats))

    def judged(h: RunResult, b: RunResult, config: GateConfig = GateConfig()):
        return compare([Entry("tiny", h, None, pairing=Pairing(b, "a1b2c3d"))], config, look=FIRST).comparisons[0]

    def without_slope(result: RunResult) -> RunResult:
        return dataclasses.replace(result, repeats=tuple(
            dataclasses.replace(r, telemetry={"samples": 15, "gpu": None, "cpu": {}}) for r in result.repeats))

    assert judged(leaking, flat).verdict is Verdict.REGRESSION  # the control
    c = judged(without_slope(leaking), flat)
    assert c.verdict is Verdict.ERROR
    assert c.reason == ("the head lacks its memory slope (resident memory), which the base side holds: missing data "
                        "is not a pass (missing_is_error = false in [tool.perfgate] shows it as not compared)")
    c = judged(leaking, without_slope(flat))
    assert c.verdict is Verdict.ERROR
    assert c.reason.startswith("the base side lacks its memory slope (resident memory), which the head holds")
    c = judged(without_slope(leaking), flat, GateConfig(missing_is_error=False))
    assert c.verdict is Verdict.PASS and c.memory is not None
    assert "memory creep not compared: resident memory not recorded in the head" in c.memory.reason
    # neither side sampled (--no-telemetry): nothing is missing
    assert judged(without_slope(head), without_slope(base)).verdict is Verdict.PASS


@pytest.mark.slow
def test_a_workload_that_keeps_a_mib_a_step_is_labelled_in_a_real_run(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch):
    from perfgate.adapters.cli import main

    workloads = tmp_path / "workloads"
    workloads.mkdir()
    shutil.copy(Path(__file__).parent / "fixtures" / "leaky_workloads.py", workloads / "leaky_workloads.py")
    out = tmp_path / "out"
    monkeypatch.chdir(tmp_path)
    # perfgate run in this process (no interpreter of its own to start); the two repeats fork
    # from one template that has imported torch, each a process of its own whose memory grows
    code = main(["run", "-q", "--device", "cpu", "--repeats", "2", "--start", "fork", "--workloads-path",
                 str(workloads), "--out", str(out), "--cache-dir", str(tmp_path / "cache"), "leaky"])
    assert code == 0
    result = result_from_dict(json.loads((out / "leaky.json").read_text()))
    for r in result.repeats:
        assert r.telemetry is not None and r.telemetry["cpu"]["rss_slope"]["samples"] >= 8
    [found] = memory_creep(result.repeats)
    assert found.creeps
    assert 0.5 * MIB < found.per_step < 1.5 * MIB
    [label] = creep(diagnose(result))
    assert math.isclose(label.share, 1.0)
