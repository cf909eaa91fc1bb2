"""perfgate.analysis.compare: from loaded results and baselines to one verdict per workload.

Comparability is checked before any statistics (never a silent comparison); then the step
is judged with Holm over the workloads, phases are flagged with BH, gated phases and peak
memory can fail a workload, and the exit code follows REGRESSION > ERROR/INCOMPARABLE >
INCONCLUSIVE > PASS/IMPROVED.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from factories import ENV, make_result

from perfgate.analysis.compare import compare
from perfgate.analysis.decide import GateConfig, Look
from perfgate.analysis.outcome import Entry, GateOutcome, WorkloadComparison
from perfgate.analysis.stats.sequential import Schedule
from perfgate.model.baseline import Baseline
from perfgate.model.errors import EXIT_ERROR, EXIT_INCONCLUSIVE, EXIT_OK, EXIT_REGRESSION
from perfgate.model.result import RunResult
from perfgate.model.verdict import Verdict
from perfgate.store.baselines import Lookup, find_baseline, save_baseline, updated_baseline

CFG = GateConfig(min_effect=0.0)
"""Hand-made p-values: the tests against no change (min_effect 0)."""
STORED = Schedule(5, CFG.max_blocks)
"""The stored gate's default looks: the first at 5 repeats, then one after every repeat up to max_blocks."""
FIRST = Look(5, STORED, "repeat")
LAST = Look(CFG.max_blocks, STORED, "repeat")
PATH = Path("baselines/cpu-test/tiny.json")
T4 = dataclasses.replace(ENV, device="cuda", gpu_name="Tesla T4", cuda="12.4", cudnn="90100",
                         gpu_driver="550.54")
A10G = dataclasses.replace(T4, gpu_name="NVIDIA A10G")


def baseline_of(*results: RunResult) -> Baseline:
    """One recording per result, as ``rebaseline --append`` on successive days makes them."""
    baseline = None
    for i, result in enumerate(results):
        baseline = updated_baseline(baseline, result, f"day {i + 1}", append=True)
    assert baseline is not None
    return baseline


def days(workload: str = "tiny", n: int = 5, **kwargs: object) -> Baseline:
    """A baseline of ``n`` recordings: enough history that an unchanged run can PASS at one look
    (one is not: the assumed 1% day sd's few degrees of freedom keep the upper bound above +3%)."""
    return baseline_of(*(make_result(workload, seed=day, **kwargs) for day in range(1, n + 1)))  # type: ignore[arg-type]


def entry(result: RunResult, baseline: Baseline | None, others: tuple[Baseline, ...] = ()) -> Entry:
    return Entry(result.workload, result, Lookup(baseline, PATH, others))


def one(result: RunResult, baseline: Baseline | None, config: GateConfig = CFG, **kwargs: object) -> WorkloadComparison:
    outcome = compare([entry(result, baseline)], config, **kwargs)  # type: ignore[arg-type]
    (comparison,) = outcome.comparisons
    return comparison


def current(workload: str = "tiny", **kwargs: object) -> RunResult:
    return make_result(workload, seed=9, **kwargs)  # type: ignore[arg-type]


def with_phase_zero(result: RunResult, phase: str, repeat: int = 0) -> RunResult:
    reps = list(result.repeats)
    rep = reps[repeat]
    reps[repeat] = dataclasses.replace(rep, phases_ms={**rep.phases_ms, phase: (0.0,) * rep.steps})
    return dataclasses.replace(result, repeats=tuple(reps))


# --- comparable first -----------------------------------------------------------------------


@pytest.mark.parametrize(("change", "differences"), [
    ({"params": {"batch_size": 16, "steps": 10}}, {"param batch_size": (8, 16)}),
    ({"params": {"batch_size": 8, "steps": 10, "channels_last": True}}, {"param channels_last": (None, True)}),
    ({"version": 2}, {"workload version": (1, 2)}),
    ({"version": 2, "params": {"batch_size": 8, "steps": 20}},
     {"workload version": (1, 2), "param steps": (10, 20)}),
])
def test_a_different_workload_is_incomparable_and_says_exactly_what_differs(
        change: dict[str, object], differences: dict[str, tuple[object, object]]) -> None:
    # even a 20% slowdown is not reported: the numbers measure something else
    c = one(current(scale=1.2, **change), days())  # type: ignore[arg-type]
    assert c.verdict is Verdict.INCOMPARABLE
    assert dict(c.differences) == differences
    for what, (was, now) in differences.items():
        assert f"{what}: baseline {was!r}, current {now!r}" in c.reason
    assert str(PATH) in c.reason
    assert c.time is None and c.phases == () and c.memory is None


def test_a_gpu_model_change_finds_only_another_environment_and_is_incomparable(tmp_path: Path) -> None:
    root = tmp_path / "baselines"
    save_baseline(days(env=T4), root)
    result = current(env=A10G)
    lookup = find_baseline(root, A10G.key(), "tiny")
    outcome = compare([Entry("tiny", result, lookup)], CFG)
    (c,) = outcome.comparisons
    assert c.verdict is Verdict.INCOMPARABLE
    assert dict(c.differences) == {"environment gpu_name": ("Tesla T4", "NVIDIA A10G")}
    assert f"no baseline for environment {A10G.key()}" in c.reason
    assert T4.key() in c.reason and "'Tesla T4'" in c.reason and "'NVIDIA A10G'" in c.reason
    assert c.baseline is not None and c.baseline.environment_key == T4.key()
    assert outcome.exit_code == EXIT_ERROR


def test_cpu_against_a_cuda_baseline_is_incomparable() -> None:
    c = compare([entry(current(), None, (days(env=T4),))], CFG).comparisons[0]
    assert c.verdict is Verdict.INCOMPARABLE
    assert c.differences["environment device"] == ("cuda", "cpu")
    assert set(c.differences) == {"device", "environment device", "environment gpu_name",
                                  "environment cuda", "environment cudnn"}


def test_the_closest_other_environment_is_the_one_reported() -> None:
    c = compare([entry(current(env=A10G), None, (days(), days(env=T4)))], CFG).comparisons[0]
    assert c.baseline is not None and c.baseline.environment_key == T4.key()
    assert dict(c.differences) == {"environment gpu_name": ("Tesla T4", "NVIDIA A10G")}


def test_a_baseline_recorded_elsewhere_is_never_compared_silently() -> None:
    # a baseline handed over for this key whose recordings say another GPU
    c = one(current(env=A10G), days(env=T4))
    assert c.verdict is Verdict.INCOMPARABLE
    assert dict(c.differences) == {"environment gpu_name": ("Tesla T4", "NVIDIA A10G")}


def test_other_data_is_incomparable() -> None:
    real = dataclasses.replace(current(), data={**current().data, "kind": "real", "content_hash": "ab" * 32})
    c = one(real, days())
    assert c.verdict is Verdict.INCOMPARABLE
    assert dict(c.differences) == {"data kind": ("synthetic", "real"), "data content_hash": ("0" * 64, "ab" * 32)}


def test_commit_driver_and_python_patch_release_do_not_block_the_comparison() -> None:
    moved = dataclasses.replace(T4, git_commit="feedbeef", gpu_driver="560.1", python="3.11.9", os="Linux 6.8")
    c = one(current(env=moved, scale=1.2), days(env=T4))
    assert c.differences == {}
    assert c.verdict is Verdict.REGRESSION


# --- no baseline, errors, exit codes --------------------------------------------------------


def test_a_workload_without_any_baseline_is_no_baseline_and_passes_by_default() -> None:
    outcome = compare([entry(current(), None)], CFG)
    (c,) = outcome.comparisons
    assert c.verdict is Verdict.NO_BASELINE
    assert "no baseline for tiny" in c.reason and ENV.key() in c.reason
    assert c.baseline_path == str(PATH)
    assert outcome.exit_code == EXIT_OK


def test_no_baseline_fails_when_asked_to() -> None:
    strict = GateConfig(fail_on_missing_baseline=True)
    assert compare([entry(current(), None)], strict).exit_code == EXIT_ERROR
    assert compare([Entry("tiny", current(), None)], strict).exit_code == EXIT_ERROR


def test_an_error_entry_is_error_and_exits_2() -> None:
    outcome = compare([Entry("tiny", None, None, error="worker exited with signal 9")], CFG)
    (c,) = outcome.comparisons
    assert c.verdict is Verdict.ERROR and c.reason == "worker exited with signal 9"
    assert outcome.exit_code == EXIT_ERROR


@pytest.mark.parametrize("gate_phases", [(), ("forward",)])
def test_a_one_repeat_run_cannot_be_compared(gate_phases: tuple[str, ...]) -> None:
    outcome = compare([entry(current(repeats=1), days()), entry(current("other", scale=1.2), days("other"))],
                      GateConfig(gate_phases=gate_phases))
    lonely, other = outcome.comparisons
    assert lonely.verdict is Verdict.ERROR
    assert lonely.reason.startswith("cannot compare: ")
    assert "1 repeat" in lonely.reason and "at least 2" in lonely.reason
    assert other.verdict is Verdict.REGRESSION  # the rest of the run is still judged
    assert outcome.exit_code == EXIT_REGRESSION


def outcome_of(*verdicts: Verdict, config: GateConfig = CFG) -> GateOutcome:
    return GateOutcome(tuple(WorkloadComparison(f"w{i}", v, "") for i, v in enumerate(verdicts)), config, 1)


V = Verdict


@pytest.mark.parametrize(("verdicts", "code"), [
    ((V.PASS, V.IMPROVED), EXIT_OK),
    ((V.PASS, V.NO_BASELINE), EXIT_OK),
    ((), EXIT_OK),
    ((V.PASS, V.INCONCLUSIVE, V.IMPROVED), EXIT_INCONCLUSIVE),
    ((V.INCONCLUSIVE, V.ERROR), EXIT_ERROR),
    ((V.INCONCLUSIVE, V.INCOMPARABLE), EXIT_ERROR),
    ((V.REGRESSION, V.ERROR, V.INCOMPARABLE, V.INCONCLUSIVE), EXIT_REGRESSION),
    ((V.PASS, V.REGRESSION), EXIT_REGRESSION),
])
def test_exit_code_precedence(verdicts: tuple[Verdict, ...], code: int) -> None:
    assert outcome_of(*verdicts).exit_code == code


def test_a_missing_baseline_counts_as_an_error_only_when_configured() -> None:
    strict = GateConfig(fail_on_missing_baseline=True)
    assert outcome_of(V.NO_BASELINE, V.INCONCLUSIVE).exit_code == EXIT_INCONCLUSIVE
    assert outcome_of(V.NO_BASELINE, V.INCONCLUSIVE, config=strict).exit_code == EXIT_ERROR
    assert outcome_of(V.NO_BASELINE, V.REGRESSION, config=strict).exit_code == EXIT_REGRESSION


def test_a_regression_outranks_an_error_in_the_same_run() -> None:
    outcome = compare([Entry("broken", None, None, error="boom"), entry(current(scale=1.2), days())], CFG)
    assert [c.verdict for c in outcome.comparisons] == [Verdict.ERROR, Verdict.REGRESSION]
    assert outcome.exit_code == EXIT_REGRESSION
    assert outcome.headline == "perfgate: REGRESSION (1 REGRESSION, 1 ERROR)"


# --- verdicts on the step -------------------------------------------------------------------


def test_a_ten_percent_slowdown_is_a_regression() -> None:
    c = one(current(scale=1.10), days())
    assert c.verdict is Verdict.REGRESSION
    assert c.time is not None and c.time.estimate.ratio == pytest.approx(1.10, abs=0.01)
    assert c.time.estimate.ci_low > 1.03
    assert "above δ=3%" in c.reason


def test_an_unchanged_run_against_several_recordings_passes() -> None:
    c = one(current(), days(n=5))
    assert c.verdict is Verdict.PASS
    assert c.time is not None and c.time.pass_bound < 1.03
    assert all(d.pass_bound < 1.03 for d in c.time.by_statistic.values())
    # one look (results judged as they are): the PASS bound at the whole 2.5%, one-sided
    assert "upper 97.5% bound" in c.reason and "below δ=3%" in c.reason
    assert "median step" in c.reason
    assert compare([entry(current(), days(n=5))], CFG).exit_code == EXIT_OK
    # the stored gate's first look spends only part of it (1 - 0.61%): the same five repeats
    # do not pass yet, and the gate measures on
    first = one(current(), days(n=5), look=FIRST)
    assert first.verdict is Verdict.INCONCLUSIVE and first.goes_on
    assert "upper 99.393% bound" in first.reason and first.reason.endswith("; measuring on")
    assert first.time is not None and c.time.pass_bound < 1.03 < first.time.pass_bound


def test_an_unchanged_run_against_one_recording_stays_inconclusive() -> None:
    # one recording cannot show day-to-day noise: the assumed 1% day sd keeps the CI above 3%
    c = one(current(), days(n=1))
    # undecided, but its interval rules out +6% (2δ): green, and says so
    assert c.verdict is Verdict.INCONCLUSIVE and "undecided, but not slower than +" in c.reason
    assert c.time is not None and c.time.estimate.ci_high > 1.03 and c.upper_bound is not None and c.upper_bound < 1.06
    assert not c.goes_on and "undecided at the last planned look (one look)" in c.reason
    assert compare([entry(current(), days(n=1))], CFG).exit_code == EXIT_INCONCLUSIVE
    first = one(current(), days(n=1), look=FIRST)
    assert first.verdict is Verdict.INCONCLUSIVE and first.goes_on and "measuring on" in first.reason
    assert "look 1 of 26, 5 repeats" in first.reason
    last = one(current(), days(n=1), look=LAST)
    # the last of 26 looks tests at a stricter level: its bound reaches past +6%, too noisy to gate
    assert last.verdict is Verdict.TOO_NOISY and not last.goes_on and last.reason.startswith("too noisy to gate")
    relaxed = one(current(), days(n=1), look=LAST, config=dataclasses.replace(CFG, inconclusive="pass"))
    assert relaxed.verdict is Verdict.INCONCLUSIVE
    assert "undecided at the last planned look (look 26 of 26, 30 repeats)" in last.reason


def test_a_fifteen_percent_speedup_is_improved() -> None:
    c = one(current(scale=0.85), days())
    assert c.verdict is Verdict.IMPROVED
    assert "consider rebaselining" in c.reason
    assert compare([entry(current(scale=0.85), days())], CFG).exit_code == EXIT_OK


# Five repeats with a known spread and almost no step jitter: the p-value is set by the scale.
SPREAD = [1.0, 1.01, 0.99, 1.005, 0.995]
BORDERLINE = 1.08  # one-sided p ≈ 0.0018 (the day prior's 4 df): below α / 2 = 0.005, above α / 8 = 0.00125
# (each workload enters the Holm family twice: its time per step and its median step)
TWO = Schedule(4, 5, gamma=-4.0)
"""Two looks, at 4 and 5 repeats, spending late (γ = -4): the second tests a lone hypothesis
at about 0.0086 of α = 0.01, so the borderline slowdown is decided there alone."""
LOOK2 = Look(5, TWO, "repeat")


def spread_run(workload: str, scale: float, seed: int) -> RunResult:
    return make_result(workload, repeat_scales=[scale * s for s in SPREAD], jitter=0.001, seed=seed)


def borderline_entries(names: tuple[str, ...]) -> list[Entry]:
    entries = [entry(spread_run("tiny", BORDERLINE, 3), baseline_of(spread_run("tiny", 1.0, 0)))]
    entries += [entry(spread_run(n, 1.0, 3), baseline_of(spread_run(n, 1.0, 0))) for n in names]
    return entries


def test_holm_a_borderline_slowdown_is_significant_alone_but_not_among_four_workloads() -> None:
    alone = compare(borderline_entries(()), CFG).comparisons[0]
    assert alone.verdict is Verdict.REGRESSION
    assert alone.time is not None
    p = min(d.estimate.p_slower for d in alone.time.by_statistic.values())
    assert CFG.alpha / 8 < p < CFG.alpha / 2

    among = compare(borderline_entries(("b", "c", "d")), CFG)
    tiny = among.comparisons[0]
    assert tiny.verdict is Verdict.TOO_NOISY  # undecided, and +8% is past the +6% bound
    assert tiny.time is not None and tiny.time.estimate.p_slower == pytest.approx(alone.time.estimate.p_slower)
    # its two statistics are Holm's first two steps of eight: α / 8 and α / 7
    levels = sorted(d.level_slower for d in tiny.time.by_statistic.values())
    # the smaller p fails Holm's first step (α/8), so the other is shown at that step's level too
    assert levels == pytest.approx([CFG.alpha / 8, CFG.alpha / 8])
    assert p > levels[0]
    assert all(c.verdict is not Verdict.REGRESSION for c in among.comparisons[1:])


def test_already_decided_workloads_keep_the_family_size_at_a_later_look() -> None:
    shrunk = compare(borderline_entries(()), CFG, look=LOOK2).comparisons[0]
    kept = compare(borderline_entries(()), CFG, look=LOOK2, already_decided=("b", "c", "d")).comparisons[0]
    assert shrunk.verdict is Verdict.REGRESSION
    assert kept.verdict is Verdict.TOO_NOISY
    assert kept.time is not None and shrunk.time is not None
    # 8 entries against 2: the first Holm step's level is the look's for α / 8, not α / 2
    first_step = lambda c: min(d.level_slower for d in c.time.by_statistic.values())  # noqa: E731
    assert first_step(shrunk) == pytest.approx(TWO.level(CFG.alpha / 2, 5))
    assert first_step(kept) == pytest.approx(TWO.level(CFG.alpha / 8, 5))
    assert "undecided at the last planned look (look 2 of 2, 5 repeats)" in kept.reason


def test_already_decided_workloads_with_gated_phases_stay_in_the_family() -> None:
    config = GateConfig(gate_phases=("forward",))
    c = compare(borderline_entries(()), config, look=LOOK2, already_decided=("b",)).comparisons[0]
    assert c.time is not None
    # the family: tiny (time per step), tiny@median, tiny:forward, and b's three entering with
    # p = 1, so tiny's three take Holm's first three steps of six
    levels = sorted([*(d.level_slower for d in c.time.by_statistic.values()), c.gated["forward"].level_slower])
    # Holm's first step counts the decided workloads' entries too (6, not 3); it fails there, and
    # the step-down stops: every entry is shown at that first step's level
    assert levels == pytest.approx([TWO.level(CFG.alpha / 6, 5)] * 3)
    assert levels != pytest.approx([TWO.level(CFG.alpha / 3, 5)] * 3)


# --- phases ---------------------------------------------------------------------------------


def flags(c: WorkloadComparison) -> dict[str, object]:
    return {row.phase: row.flag for row in c.phases}


def test_a_thirty_percent_forward_slowdown_is_flagged_and_the_other_phases_are_not() -> None:
    c = one(current(phase_scale={"forward": 1.3}), days())
    rows = {row.phase: row for row in c.phases}
    assert list(rows) == ["data_wait", "h2d", "forward", "backward", "optimizer", "residual", "step"]
    forward = rows["forward"].flag
    assert forward is not None and forward.tested and forward.flagged
    assert forward.estimate is not None and forward.estimate.ratio == pytest.approx(1.3, abs=0.02)
    assert "slower (BH" in forward.reason
    for phase in ("data_wait", "backward", "optimizer"):
        flag = rows[phase].flag
        assert flag is not None and flag.tested and not flag.flagged, phase
    assert rows["forward"].current_ms == pytest.approx(1.3 * rows["forward"].baseline_ms, rel=0.02)
    assert rows["residual"].flag is None and rows["step"].flag is None


def test_a_phase_below_the_share_floor_is_not_tested() -> None:
    # h2d is 0.5 ms of a ~100 ms step: 0.5%, below the 1% floor, so even doubling it is not flagged
    c = one(current(phase_scale={"h2d": 2.0}), days())
    h2d = {row.phase: row.flag for row in c.phases}["h2d"]
    assert h2d is not None and not h2d.tested and not h2d.flagged
    assert h2d.reason.startswith("not tested:") and "below the 1% floor" in h2d.reason
    no_floor = one(current(phase_scale={"h2d": 2.0}), days(), GateConfig(phase_min_share=0.0))
    h2d = {row.phase: row.flag for row in no_floor.phases}["h2d"]
    assert h2d is not None and h2d.tested and h2d.flagged


@pytest.mark.parametrize("side", ["current", "baseline"])
def test_a_phase_that_is_zero_in_some_repeat_is_not_tested_and_does_not_crash(side: str) -> None:
    base_results = [make_result(seed=day) for day in (1, 2, 3, 4, 5)]
    result = current()
    if side == "current":
        result = with_phase_zero(result, "data_wait", repeat=2)
    else:
        base_results[1] = with_phase_zero(base_results[1], "data_wait", repeat=0)
    c = one(result, baseline_of(*base_results))
    assert c.verdict is Verdict.PASS
    data_wait = {row.phase: row.flag for row in c.phases}["data_wait"]
    assert data_wait is not None and not data_wait.tested
    assert data_wait.reason.startswith("not tested:")
    forward = {row.phase: row.flag for row in c.phases}["forward"]
    assert forward is not None and forward.tested


def test_a_gated_phase_without_an_estimate_is_an_error_naming_the_phase() -> None:
    c = one(with_phase_zero(current(), "data_wait"), days(), GateConfig(gate_phases=("data_wait",)))
    assert c.verdict is Verdict.ERROR
    assert c.reason.startswith("cannot compare") and "data_wait" in c.reason


def test_a_gated_phase_fails_the_gate_when_the_step_does_not_move_beyond_delta() -> None:
    result = current(phase_scale={"forward": 1.06})  # forward is ~30% of the step: step +1.8%
    ungated = one(result, days())
    assert ungated.verdict is not Verdict.REGRESSION
    assert ungated.time is not None and ungated.time.estimate.ratio < 1.03

    gated = one(result, days(), GateConfig(gate_phases=("forward",)))
    assert gated.verdict is Verdict.REGRESSION
    assert gated.reason.startswith("gated phase forward: forward per step +6.")  # the phase's change, not the step's
    assert gated.gated["forward"].verdict is Verdict.REGRESSION
    assert gated.gated["forward"].estimate.ratio == pytest.approx(1.06, abs=0.01)
    assert gated.time is not None and gated.time.verdict is ungated.verdict
    assert compare([entry(result, days())], GateConfig(gate_phases=("forward",))).exit_code == EXIT_REGRESSION


def test_an_undecided_gated_phase_keeps_a_passing_step_inconclusive() -> None:
    # forward +2%: the step (+0.6%) passes against eight recordings, the gated phase's CI
    # still reaches above 3%
    result = current(phase_scale={"forward": 1.02})
    ungated = one(result, days(n=8))
    assert ungated.verdict is Verdict.PASS
    c = one(result, days(n=8), GateConfig(gate_phases=("forward",)))
    assert c.time is not None and c.time.verdict is Verdict.PASS
    assert c.gated["forward"].verdict is Verdict.INCONCLUSIVE
    assert c.verdict is Verdict.INCONCLUSIVE and c.reason.startswith("gated phase forward: ")


# --- memory ---------------------------------------------------------------------------------


def test_twenty_percent_more_peak_memory_is_a_regression_even_when_time_passes() -> None:
    outcome = compare([entry(current(peak=1_200_000), days())], CFG)
    (c,) = outcome.comparisons
    assert c.time is not None and c.time.verdict is Verdict.PASS
    assert c.memory is not None and c.memory.verdict is Verdict.REGRESSION
    assert c.memory.ratio == pytest.approx(1.2)
    assert c.verdict is Verdict.REGRESSION
    assert c.reason.startswith("memory: peak memory +20.0%") and "time: PASS" in c.reason
    assert outcome.exit_code == EXIT_REGRESSION


def test_peak_memory_within_the_threshold_passes() -> None:
    c = one(current(peak=1_050_000), days())
    assert c.memory is not None and c.memory.verdict is Verdict.PASS
    assert c.verdict is Verdict.PASS
    assert one(current(peak=1_050_000), days(), GateConfig(memory_threshold=0.02)).verdict is Verdict.REGRESSION


@pytest.mark.parametrize(("cur_peak", "base_peak", "missing"), [
    (None, 1_000_000, "current run"),
    (1_200_000, None, "baseline"),
])
def test_missing_memory_is_not_compared_and_says_so(cur_peak: int | None, base_peak: int | None, missing: str) -> None:
    # A current run lacking what its baseline holds is an ERROR (missing data is not a pass)
    # unless missing_is_error is off; a baseline that never recorded it is only not compared.
    lenient = GateConfig(missing_is_error=False)
    c = one(current(peak=cur_peak), days(peak=base_peak), lenient)
    assert c.memory is not None and c.memory.verdict is None
    assert c.memory.reason == f"peak memory not compared: not recorded in the {missing}"
    assert c.verdict is Verdict.PASS
    strict = one(current(peak=cur_peak), days(peak=base_peak))
    if missing == "current run":
        assert strict.verdict is Verdict.ERROR and strict.reason.startswith("the current run lacks its peak memory")
    else:
        assert strict.verdict is Verdict.PASS


# --- per-workload thresholds ----------------------------------------------------------------


def two_slowed_workloads() -> list[Entry]:
    return [entry(current("a", scale=1.06), days("a")), entry(current("b", scale=1.06), days("b"))]


def test_a_per_workload_delta_changes_only_that_workloads_verdict() -> None:
    plain = compare(two_slowed_workloads(), CFG)
    tuned = compare(two_slowed_workloads(), CFG, per_workload={"b": dataclasses.replace(CFG, delta=0.10)})
    assert [c.verdict for c in plain.comparisons] == [Verdict.REGRESSION, Verdict.REGRESSION]
    a, b = tuned.comparisons
    assert a.verdict is Verdict.REGRESSION and a.reason == plain.comparisons[0].reason
    assert b.verdict is Verdict.PASS and "δ=10%" in b.reason
    assert tuned.exit_code == EXIT_REGRESSION


def test_alpha_and_looks_always_come_from_the_run_config() -> None:
    run = GateConfig(alpha=0.05)
    own = {"b": GateConfig(delta=0.10, alpha=0.2, max_blocks=6, spending_gamma=-4.0)}
    outcome = compare(two_slowed_workloads(), run, per_workload=own)
    a, b = outcome.comparisons
    assert a.time is not None and b.time is not None
    assert b.time.alpha_used == a.time.alpha_used == 0.05
    assert b.time.looks == 1
    assert not b.goes_on
    looked = compare(two_slowed_workloads(), run, look=FIRST, per_workload=own)
    a, b = looked.comparisons
    assert a.time is not None and b.time is not None
    assert b.time.alpha_used == a.time.alpha_used == pytest.approx(STORED.level(0.05, 5))
    assert (b.time.look, b.time.looks, b.time.count) == (1, 26, 5)
    assert looked.look == FIRST


def test_per_workload_gate_phases_apply_to_that_workload_only() -> None:
    entries = [entry(current("a", phase_scale={"forward": 1.06}), days("a")),
               entry(current("b", phase_scale={"forward": 1.06}), days("b"))]
    outcome = compare(entries, CFG, per_workload={"b": GateConfig(gate_phases=("forward",))})
    a, b = outcome.comparisons
    assert a.gated == {} and a.verdict is not Verdict.REGRESSION
    assert set(b.gated) == {"forward"} and b.verdict is Verdict.REGRESSION
