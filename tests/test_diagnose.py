"""Bottleneck labels and throttled repeats: each label with its evidence numbers."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timezone
from pathlib import Path

from factories import make_result

from perfgate.analysis.compare import compare
from perfgate.analysis.decide import GateConfig
from perfgate.analysis.diagnose import diagnose
from perfgate.analysis.outcome import Entry
from perfgate.model.verdict import Verdict
from perfgate.store.baselines import Lookup, updated_baseline


def names(result) -> list[tuple[str, str]]:
    return [(label.name, label.severity) for label in diagnose(result)]


def test_compute_bound_is_informational() -> None:
    (label,) = diagnose(make_result())
    assert (label.name, label.severity) == ("COMPUTE-BOUND", "info")
    assert "97% of a 99." in label.evidence and "time per step, median of 5 repeat(s)" in label.evidence


def test_input_bound_warning_and_critical_thresholds() -> None:
    # data wait is 2 ms of a ~100 ms step; scaling it moves its share across 10% and 20%
    assert names(make_result(phase_scale={"data_wait": 7})) == [("INPUT-BOUND", "warning")]
    assert names(make_result(phase_scale={"data_wait": 30})) == [("INPUT-BOUND", "critical")]
    label = diagnose(make_result(phase_scale={"data_wait": 30}))[0]
    assert label.evidence.startswith("data wait 60.1 ms, 3")  # the seeds' story: ms and share
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
    assert e.verdict is Verdict.ERROR and e.reason.startswith("runner unfit: 5 of 5 current repeats")


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


def with_repeats(result, **changes_by_index):
    """``result`` with fields of some repeats replaced: index -> dict of fields (a replaced
    ``torch_settings`` keeps the repeat's ``process_start``, which every result records)."""
    def changed(rep):
        fields = dict(changes_by_index.get(f"r{rep.index}", {}))
        if "torch_settings" in fields:
            fields["torch_settings"] = {"process_start": rep.torch_settings["process_start"], **fields["torch_settings"]}
        return dataclasses.replace(rep, **fields)
    return dataclasses.replace(result, repeats=tuple(changed(rep) for rep in result.repeats))


def everywhere(result, **fields):
    return with_repeats(result, **{f"r{rep.index}": fields for rep in result.repeats})


def test_a_workload_that_synchronises_once_per_step_is_told_what_to_change() -> None:
    from perfgate.analysis.diagnose import GRAD_SCALER_SYNC

    result = everywhere(make_result(), torch_settings={"num_threads": 2, "synchronizes": [GRAD_SCALER_SYNC]})
    labels = diagnose(result)
    assert [(label.name, label.severity) for label in labels] == [("SYNC-PER-STEP", "warning"),
                                                                 ("COMPUTE-BOUND", "info")]
    sync = labels[0]
    assert sync.evidence.startswith("this workload synchronises once per step: GradScaler.step (one per step) "
                                    "(5 of 5 repeat(s))")
    assert "precision=bf16 needs no scaler" in sync.evidence and "fused=True" in sync.evidence
    assert "pin_memory" not in sync.evidence
    assert sync.share == 1.0


def test_unpinned_copies_and_a_scaler_synchronise_every_step() -> None:
    from perfgate.analysis.diagnose import BLOCKING_COPY_SYNC, GRAD_SCALER_SYNC

    result = with_repeats(make_result(), r0={"torch_settings": {"synchronizes": [GRAD_SCALER_SYNC, BLOCKING_COPY_SYNC]}},
                          r1={"torch_settings": {"synchronizes": []}})
    (sync,) = [label for label in diagnose(result) if label.name == "SYNC-PER-STEP"]
    assert sync.evidence.startswith("this workload synchronises every step: GradScaler.step (one per step); "
                                    "blocking host-to-device copy (one per copied tensor per step) (1 of 5 repeat(s))")
    assert "pin_memory=true" in sync.evidence and sync.share == 0.2
    # nothing recorded (a CPU run, an older file): no label
    assert "SYNC-PER-STEP" not in [label.name for label in diagnose(make_result())]


def test_a_loader_restart_inside_the_window_is_reported_with_its_data_wait() -> None:
    result = dataclasses.replace(make_result(), params={"batch_size": 8, "warmup_steps": 2, "steps": 10})
    rep = result.repeats[3]
    waits = list(rep.phases_ms["data_wait"])
    waits[4] = 32.7  # the step that restarted the loader, against ~2 ms
    result = with_repeats(result, r3={"loader_restarts": 1,
                                      "phases_ms": {**rep.phases_ms, "data_wait": tuple(waits)},
                                      "loader_settings": {"batch_size": 8, "num_workers": 4, "num_batches": 11,
                                                          "persistent_workers": False}})
    labels = diagnose(result)
    (restart,) = [label for label in labels if label.name == "LOADER-RESTART"]
    assert restart.severity == "warning" and restart.share == 0.2
    assert restart.evidence.startswith(
        "the DataLoader ran out inside the window 1 time(s) in 1 of 5 repeat(s) (the loader holds 11 batches, "
        "warmup_steps + steps = 12): the slowest data wait there was 32.7 ms against a median of 2.0 ms; "
        "make warmup_steps + steps <= len(loader)")
    assert "persistent_workers=true" in restart.evidence
    assert "COMPUTE-BOUND" in [label.name for label in labels]  # the phase labels stay
    assert "LOADER-RESTART" not in [label.name for label in diagnose(make_result())]


def test_device_steps_that_do_not_fill_the_window_are_a_clock_mismatch() -> None:
    def cuda(ratio: float):
        return everywhere(make_result(), torch_settings={
            "synchronizes": [], "cuda_window": {"device_steps_over_window": ratio, "max_memory_reserved_bytes": 1}})

    assert "CLOCK-MISMATCH" not in [label.name for label in diagnose(cuda(0.998))]
    (label,) = [label for label in diagnose(cuda(0.6)) if label.name == "CLOCK-MISMATCH"]
    assert label.severity == "warning" and label.share == 1.0
    assert label.evidence.startswith("the device steps add up to 60% of the window's wall time (median of 5 repeat(s)")


def _round_trip(result):
    """Through the result reader, as a judge reads a result file."""
    from perfgate.model.result import result_from_dict

    return result_from_dict(result.to_dict())


def test_event_stamps_raised_beyond_resolution_are_a_clock_mismatch_and_resolution_is_not() -> None:
    def cuda(counts, largest):
        return _round_trip(everywhere(make_result(), torch_settings={"synchronizes": [], "cuda_window": {
            "device_steps_over_window": 0.999, "max_memory_reserved_bytes": 1,
            "clamped_stamps": counts, "largest_clamp_ms": largest}}))

    # Half a microsecond raises, many of them: the events' resolution, no label.
    assert "CLOCK-MISMATCH" not in [label.name for label in diagnose(cuda([40, 37], [0.0005, 0.0004]))]
    (label,) = [label for label in diagnose(cuda([0, 3], [0.0, 0.42])) if label.name == "CLOCK-MISMATCH"]
    assert label.severity == "warning" and label.share == 1.0
    assert "in 5 of 5 repeat(s) event stamps came out of order: 15 stamp(s)" in label.evidence
    assert "by up to 0.420 ms" in label.evidence and "add up to" not in label.evidence
    # Both findings at once are named together.
    both = everywhere(make_result(), torch_settings={"cuda_window": {
        "device_steps_over_window": 0.5, "clamped_stamps": [2], "largest_clamp_ms": [1.5]}})
    (label,) = [label for label in diagnose(both) if label.name == "CLOCK-MISMATCH"]
    assert "add up to 50%" in label.evidence and "by up to 1.500 ms" in label.evidence


def test_the_reader_refuses_clamp_records_that_do_not_pair_up_or_are_not_counts() -> None:
    import pytest

    from perfgate.model.result import result_from_dict

    def data(window):
        result = everywhere(make_result(), torch_settings={"cuda_window": window})
        return result.to_dict()

    for window, says in [({"clamped_stamps": [1, 2], "largest_clamp_ms": [0.1]}, "one value per window"),
                         ({"largest_clamp_ms": [0.1]}, "one value per window"),
                         ({"clamped_stamps": [-1], "largest_clamp_ms": [0.1]}, "clamped_stamps[0]"),
                         ({"clamped_stamps": [True], "largest_clamp_ms": [0.1]}, "clamped_stamps[0]"),
                         ({"clamped_stamps": [1], "largest_clamp_ms": [float("nan")]}, "largest_clamp_ms[0]"),
                         ({"clamped_stamps": [1], "largest_clamp_ms": ["1"]}, "largest_clamp_ms[0]")]:
        with pytest.raises(ValueError, match=says.replace("[", r"\[").replace("]", r"\]")):
            result_from_dict(data(window))


def test_a_script_whose_grad_scaler_skipped_steps_in_the_window_is_told_so() -> None:
    def script(skips):
        return _round_trip(everywhere(make_result(), torch_settings={"script": {"scaler_skipped_steps": skips}}))

    assert "SCALER-SKIPS" not in [label.name for label in diagnose(script(0))]
    assert "SCALER-SKIPS" not in [label.name for label in diagnose(make_result())]
    result = with_repeats(make_result(), r1={"torch_settings": {"script": {"scaler_skipped_steps": 3}}})
    (label,) = [label for label in diagnose(_round_trip(result)) if label.name == "SCALER-SKIPS"]
    assert label.severity == "warning" and label.share == 0.2
    assert label.evidence.startswith("the GradScaler skipped the optimizer step 3 time(s) in 1 of 5 repeat(s)")
    import pytest

    from perfgate.model.result import result_from_dict

    with pytest.raises(ValueError, match="scaler_skipped_steps"):
        result_from_dict(everywhere(make_result(), torch_settings={"script": {"scaler_skipped_steps": -2}}).to_dict())


def stalled(result, every: int = 4, wait_ms: float = 90.0):
    """Every ``every``-th step waits ``wait_ms`` more for data (a loader that cannot keep up)."""
    repeats = []
    for r in result.repeats:
        phases = {k: list(v) for k, v in r.phases_ms.items()}
        for i in range(every - 1, len(phases["step"]), every):
            phases["data_wait"][i] += wait_ms
            phases["step"][i] += wait_ms
        repeats.append(dataclasses.replace(r, phases_ms=phases))
    return dataclasses.replace(result, repeats=tuple(repeats))


def test_periodic_stalls_that_medians_do_not_see_are_labelled() -> None:
    plain = make_result()
    assert "STALLS" not in [name for name, _ in names(plain)]
    result = stalled(plain)
    labels = {label.name: label for label in diagnose(result)}
    # the shares are of the time per step: two 90 ms stalls in ten steps are 18 ms a step, input-bound
    # (shares of the median step said compute-bound: the blind spot the issue measured)
    assert "INPUT-BOUND" in labels and "COMPUTE-BOUND" not in labels
    assert labels["INPUT-BOUND"].evidence.startswith("data wait 20.0 ms, 17% of a 117.6 ms step")  # 2 stalls in 10 steps
    stall = labels["STALLS"]
    assert stall.severity == "warning" and 0.1 < stall.share < 0.2  # 22.5 ms of ~122 ms a step
    assert "in the data wait" in stall.evidence and "took over twice the median" in stall.evidence
    assert ("STALLS", "critical") in names(stalled(plain, wait_ms=200.0))
    # a stall every tenth step of 5 ms is under 10% of the window: no label
    assert "STALLS" not in [name for name, _ in names(stalled(plain, every=10, wait_ms=5.0))]


def test_the_stalls_measured_on_an_h200_are_labelled() -> None:
    """resnet18-imagenette on an NVIDIA H200 (gpu-check, torch 2.11): every fourth step
    waited 85-100 ms for data; the median step was 15 ms, the mean 30 ms."""
    from perfgate.store.results import load_result

    result = load_result(Path(__file__).parent / "fixtures" / "h200" / "resnet18-imagenette.json")
    labels = {label.name: label for label in diagnose(result)}
    stall = labels["STALLS"]
    assert stall.severity == "critical" and stall.share > 0.4
    assert "98% of that excess in the data wait" in stall.evidence
